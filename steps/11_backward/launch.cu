/// @file steps/11_backward/launch.cu
/// @brief Rung 11's registration: the backward kernels (kernel.cuh) behind `launch_bwd`, and
/// rung 06's forward pass behind `launch` (the backward pass needs the forward's O and LSE).
#include <stdexcept>
#include <string>
#include <vector>

#include "flashladder/registry.h"
#include "flashladder/static_switch.h"
#include "kernel.cuh"

namespace fl {
namespace {

constexpr int kForwardRung = 6;

const Rung& forward_rung() {
  const Rung* f = registry().find(kForwardRung);
  if (!f) throw std::runtime_error("rung 11 runs rung 06's forward pass, which is not built");
  return *f;
}

/// Calls @p f with the tile of WARPS warps (16 keys each) for the runtime head_dim (64 or 128).
template <int WARPS, class F>
decltype(auto) with_tiles(int head_dim, F&& f) {
  if (head_dim == 64) return f(bwd::BwdTiles<64, WARPS>{});
  return f(bwd::BwdTiles<128, WARPS>{});
}

template <class T, class Cfg>
std::vector<KernelInfo> kernel_list() {
  constexpr int D = Cfg::kHeadDim;
  return {
      {"bwd_preprocess<d=" + std::to_string(D) + ">",
       reinterpret_cast<const void*>(&bwd::bwd_preprocess_kernel<T, D>), bwd::kPrepThreads, 0},
      {"bwd_main<d=" + std::to_string(D) + ", " + std::to_string(Cfg::kBlockN) + " keys x " +
           std::to_string(Cfg::kBlockM) + " queries, " + std::to_string(Cfg::kWarps) + " warps>",
       bwd::prepared_main<T, Cfg>(), Cfg::kThreads, static_cast<size_t>(Cfg::kSmemBytes)},
      {"bwd_convert<d=" + std::to_string(D) + ">",
       reinterpret_cast<const void*>(&bwd::bwd_convert_kernel<T, D>), 256, 0}};
}

/// The rung (WARPS = 8: 128 keys per block) or its `64keys` variant (WARPS = 4).
template <int WARPS>
Rung make_rung() {
  Rung r;
  r.number = 11;
  r.name = "backward";
  if (WARPS == 8) {
    r.summary =
        "FA2 backward: recompute P from the LSE, dV/dP/dS/dK per 128-key block in "
        "registers, dQ by atomics";
  } else {
    r.variant = "64keys";
    r.summary =
        "ablation: the previous tile, 64 keys (4 warps x 16 keys), kept to measure what "
        "the 128-key tile buys (dQ atomics and Q/dO loads per key halved)";
  }
  r.peak = Peak::tensor_16bit;
  r.head_dims = {64, 128};
  r.min_cc = 80;
  r.forward_rung = kForwardRung;
  r.in_tour = false;
  r.supports = [](const Problem& p, const DeviceInfo& d) -> std::string {
    if (!registry().find(kForwardRung)) return "needs rung 06 (its forward pass) in the build";
    if (!forward_rung().not_implemented.empty())
      return "needs rung 06's forward pass, which is not implemented here";
    if (p.head_dim != 64 && p.head_dim != 128) return "head_dim must be 64 or 128";
    const int smem =
        with_tiles<WARPS>(p.head_dim, [](auto cfg) { return decltype(cfg)::kSmemBytes; });
    const std::string limits = tile_limits(p, d, smem);  // heads_q >= heads_kv: covers grid y
    if (!limits.empty()) return limits;
    return forward_rung().supports ? forward_rung().supports(p, d) : "";
  };
  r.launch = [](const AttnParams& p, cudaStream_t s) { forward_rung().launch(p, s); };
  r.bwd_workspace_bytes = [](const Problem& p, bool deterministic) {
    return with_tiles<WARPS>(p.head_dim, [&](auto cfg) {
      return bwd::workspace_bytes<decltype(cfg)>(p, deterministic);
    });
  };
  r.launch_bwd = [](const AttnBwdParams& P, cudaStream_t s) {
    FL_DTYPE_SWITCH(static_cast<DType>(P.fwd.dtype), T, [&] {
      with_tiles<WARPS>(P.fwd.head_dim,
                        [&](auto cfg) { bwd::launch_backward<T, decltype(cfg)>(P, s); });
    });
  };
  r.kernels = [](const Problem& p) {
    return FL_DTYPE_SWITCH(p.dtype, T, [&] {
      return with_tiles<WARPS>(p.head_dim,
                               [](auto cfg) { return kernel_list<T, decltype(cfg)>(); });
    });
  };
  r.notes = [](const Problem&) {
    return std::vector<std::string>{
        "backward pass after rung 06's forward (O and LSE); FLOPs by FlashAttention's "
        "convention: 2.5 x the forward's"};
  };
  return r;
}

}  // namespace

void register_rung_11(Registry& reg) {
  reg.add(make_rung<8>());
  reg.add(make_rung<4>());  // the 64keys ablation
}

}  // namespace fl
