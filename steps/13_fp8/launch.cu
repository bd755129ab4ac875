/// @file steps/13_fp8/launch.cu
/// @brief Rung 13's launcher and registration: the rung (P x 2^8 before its cast, each block's
/// P V added to O in fp32) and two variants that measure those choices: `p-unscaled` (P cast as
/// it is, in [0, 1]) and `fast-accum` (P V accumulated across blocks inside the tensor cores).
#include <string>
#include <vector>

#include "flashladder/registry.h"
#include "flashladder/static_switch.h"
#include "flashladder/tma.h"
#include "traits.h"
#if FL_HOPPER_SM90A
#include "kernel.cuh"
#endif

namespace fl {
namespace {

#if FL_HOPPER_SM90A
template <int P_SHIFT, bool PROMOTE, int POLY>
void launch_any(const AttnParams& p, cudaStream_t s) {
  FL_DTYPE_SWITCH(static_cast<DType>(p.dtype), T, [&] {
    with_head_dim_tiles<hopper13::Fp8TilesFor>(p.head_dim, [&](auto tiles) {
      hopper13::launch_fp8<T, typename decltype(tiles)::type, P_SHIFT, PROMOTE, POLY>(p, s);
    });
  });
}

template <int P_SHIFT, bool PROMOTE, int POLY, class Cfg, class T>
KernelInfo info() {
  return {hopper13::tile_label<Cfg, P_SHIFT, PROMOTE, POLY>(), hopper13::prepared_kernel<T, Cfg, P_SHIFT, PROMOTE, POLY>(),
          Cfg::kThreads,
          static_cast<size_t>(Cfg::kSmemBytes)};
}

template <int P_SHIFT, bool PROMOTE, int POLY>
std::vector<KernelInfo> kernels_any(const Problem& p) {
  return FL_DTYPE_SWITCH(p.dtype, T, [&] {
    return with_head_dim_tiles<hopper13::Fp8TilesFor>(p.head_dim, [](auto tiles) {
      return std::vector<KernelInfo>{info<P_SHIFT, PROMOTE, POLY, typename decltype(tiles)::type, T>()};
    });
  });
}
#endif

template <int P_SHIFT, bool PROMOTE, int POLY>
Rung make(const char* variant, const char* summary) {
  Rung r;
  r.number = 13;
  r.name = "fp8";
  r.variant = variant;
  r.summary = summary;
  r.peak = Peak::tensor_fp8;
  r.min_cc = 90;
  r.head_dims = {64, 128, 256};
  r.fp8_inputs = true;
  constexpr bool kMain = P_SHIFT == hopper13::kPShift && PROMOTE && POLY == hopper13::kExpFma;
  r.in_tour = kMain;
  if (kMain)
    r.baselines = {Baseline::on(10, "the rung it changes: the same schedule on 16-bit operands")};
  r.supports = [](const Problem& p, const DeviceInfo& d) -> std::string {
    const std::string hopper = hopper_supports(d, FL_HOPPER_SM90A != 0);
    if (!hopper.empty()) return hopper;
    if (p.head_dim != 64 && p.head_dim != 128 && p.head_dim != 256)
      return "head_dim must be 64, 128 or 256 (e4m3 rows of 64 B or whole 128 B column blocks)";
    const int smem = with_head_dim_tiles<hopper13::Fp8TilesFor>(
        p.head_dim, [](auto tiles) { return decltype(tiles)::type::kSmemBytes; });
    return tile_limits(p, d, smem);
  };
  r.launch = [](const AttnParams& p, cudaStream_t s) {
#if FL_HOPPER_SM90A
    launch_any<P_SHIFT, PROMOTE, POLY>(p, s);
#else
    (void)p;
    (void)s;
    throw std::runtime_error("rung 13 was built without sm_90a");
#endif
  };
  r.kernels = [](const Problem& p) -> std::vector<KernelInfo> {
#if FL_HOPPER_SM90A
    return kernels_any<P_SHIFT, PROMOTE, POLY>(p);
#else
    (void)p;
    return {};
#endif
  };
  r.notes = [](const Problem&) -> std::vector<std::string> {
    return {"Q, K, V reach the kernel as e4m3 made by the harness (fp8_device.h); O is 16-bit"};
  };
  return r;
}

}  // namespace

void register_rung_13(Registry& reg) {
  constexpr int S = hopper13::kPShift, E = hopper13::kExpFma;
  reg.add(make<S, true, E>("", "FA3's FP8 forward: rung 10's schedule on e4m3 wgmma, P x 2^8 before its cast, P V summed in fp32"));
  reg.add(make<0, true, E>("p-unscaled", "ablation: P cast to e4m3 as it is, in [0, 1]"));
  reg.add(make<S, false, E>("fast-accum", "ablation: P V accumulated in the FP8 tensor cores' own accumulator across blocks"));
  reg.add(make<S, true, 1>("exp-fma-25", "study: a quarter of the softmax's exp2 on the FMA pipe (a polynomial), the rest on the XU pipe"));
  reg.add(make<S, true, 2>("exp-fma-50", "study: half of the softmax's exp2 on the FMA pipe (a polynomial), the rest on the XU pipe"));
}

}  // namespace fl
