/// @file steps/09_wgmma_tma/launch.cu
/// @brief Rung 09's launcher: runtime (dtype, head_dim) to one compile-time instantiation,
/// `supports`, and the registration of the rung and of the variants its tiles were timed
/// against. Built for sm_90a only (fl_add_rung ... HOPPER); a build without sm_90 registers the
/// rung with the reason it cannot run.
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

/// The checks shared by the rung and its variants: an sm_90 GPU and a build with sm_90a, then
/// the limits of every tiled kernel (common/: tile_limits) for @p smem bytes of tiles.
std::string check_limits(const Problem& p, const DeviceInfo& d, int smem) {
  const std::string hopper = hopper_supports(d, FL_HOPPER_SM90A != 0);
  return hopper.empty() ? tile_limits(p, d, smem) : hopper;
}

template <class Cfg>
std::vector<KernelInfo> kernel_info(DType t) {
#if FL_HOPPER_SM90A
  return FL_DTYPE_SWITCH(t, T, [&] {
    return std::vector<KernelInfo>{{hopper09::tile_label<Cfg>(),
                                    hopper09::prepared_kernel<T, Cfg>(), Cfg::kThreads,
                                    static_cast<size_t>(Cfg::kSmemBytes)}};
  });
#else
  (void)t;
  return {};
#endif
}

template <class Cfg>
void launch_cfg(const AttnParams& p, cudaStream_t s) {
#if FL_HOPPER_SM90A
  FL_DTYPE_SWITCH(static_cast<DType>(p.dtype), T,
                  [&] { hopper09::launch_wgmma_tma<T, Cfg>(p, s); });
#else
  (void)p;
  (void)s;
  throw std::runtime_error("rung 09 was built without sm_90a");
#endif
}

Rung base_rung() {
  Rung r;
  r.number = 9;
  r.name = "wgmma_tma";
  r.peak = Peak::tensor_16bit;
  r.writes_o_fp32 = true;  // the epilogue's store_o2 (epilogue.cuh)
  r.min_cc = 90;
  return r;
}

Rung make_rung() {
  Rung r = base_rung();
  r.summary = "rung 06 on Hopper's engines: TMA into an mbarrier ring, wgmma (SS for QK^T, RS for PV)";
  r.head_dims = {64, 128, 256};
  r.baselines = {Baseline::on(6, "the rung it improves on: the same algorithm on mma.sync and cp.async")};
  r.new_design = "Hopper's TMA and wgmma in place of cp.async and mma.sync";
  r.supports = [](const Problem& p, const DeviceInfo& d) -> std::string {
    if (p.head_dim != 64 && p.head_dim != 128 && p.head_dim != 256)
      return "head_dim must be 64, 128 or 256 (TMA boxes of 64 columns)";
    const int smem = with_head_dim_tiles<hopper09::HopperTiles>(
        p.head_dim, [](auto tiles) { return decltype(tiles)::type::kSmemBytes; });
    return check_limits(p, d, smem);
  };
  r.launch = [](const AttnParams& p, cudaStream_t s) {
    with_head_dim_tiles<hopper09::HopperTiles>(
        p.head_dim, [&](auto tiles) { launch_cfg<typename decltype(tiles)::type>(p, s); });
  };
  r.kernels = [](const Problem& p) {
    return with_head_dim_tiles<hopper09::HopperTiles>(
        p.head_dim, [&](auto tiles) { return kernel_info<typename decltype(tiles)::type>(p.dtype); });
  };
  r.notes = [](const Problem& p) {
    return std::vector<std::string>{"tiles for head_dim " + std::to_string(p.head_dim) +
                                    " from steps/09_wgmma_tma/traits.h; K/V through TMA, "
                                    "both GEMMs on wgmma"};
  };
  return r;
}

/// An ablation point: fixed tiles Cfg, for head_dim Cfg::kHeadDim only.
template <class Cfg>
Rung make_variant(const char* name, const char* what) {
  Rung r = base_rung();
  r.variant = name;
  r.summary = std::string("ablation: ") + what;
  r.head_dims = {Cfg::kHeadDim};
  r.in_tour = false;
  r.supports = [](const Problem& p, const DeviceInfo& d) -> std::string {
    if (p.head_dim != Cfg::kHeadDim)
      return "this variant is built for head_dim " + std::to_string(Cfg::kHeadDim) + " only";
    return check_limits(p, d, Cfg::kSmemBytes);
  };
  r.launch = [](const AttnParams& p, cudaStream_t s) { launch_cfg<Cfg>(p, s); };
  r.kernels = [](const Problem& p) { return kernel_info<Cfg>(p.dtype); };
  return r;
}

}  // namespace

void register_rung_09(Registry& reg) {
  reg.add(make_rung());
  // The alternatives behind the d = 128 choice in traits.h (README.md: measured table).
  reg.add(make_variant<hopper09::Variant_d128_128x64>("d128-128x64",
                                                      "d=128, BLOCK_N 64 (S in 32 registers)"));
  reg.add(make_variant<hopper09::Variant_d128_64x128>("d128-64x128",
                                                      "d=128, one warpgroup per block (BLOCK_M 64)"));
  reg.add(make_variant<hopper09::Variant_d128_128x128_s1>(
      "d128-1stage", "d=128, one K/V stage: each block's load waits for the previous block"));
  // ... and behind the d = 64 and d = 256 choices.
  reg.add(make_variant<hopper09::Variant_d64_128x128>("d64-128x128",
                                                      "d=64, BLOCK_N 128 (S as wide as at d=128; one block per SM)"));
  reg.add(make_variant<hopper09::Variant_d64_128x64_s2>("d64-2stage",
                                                        "d=64, two K/V stages instead of three"));
  reg.add(make_variant<hopper09::Variant_d256_128x64>(
      "d256-128x64", "d=256, BLOCK_N 64 (192 KB of shared memory)"));
}

}  // namespace fl
