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

template <class T, int D>
std::vector<KernelInfo> kernel_list() {
  using Cfg = bwd::BwdTiles<D>;
  return {{"bwd_preprocess<d=" + std::to_string(D) + ">",
           reinterpret_cast<const void*>(&bwd::bwd_preprocess_kernel<T, D>), bwd::kThreads, 0},
          {"bwd_main<d=" + std::to_string(D) + ", 64 keys x 64 queries, 4 warps>",
           bwd::prepared_main<T, Cfg>(), bwd::kThreads, static_cast<size_t>(Cfg::kSmemBytes)},
          {"bwd_convert<d=" + std::to_string(D) + ">",
           reinterpret_cast<const void*>(&bwd::bwd_convert_kernel<T, D>), 256, 0}};
}

}  // namespace

void register_rung_11(Registry& reg) {
  Rung r;
  r.number = 11;
  r.name = "backward";
  r.summary = "FA2 backward: recompute P from the LSE, dV/dP/dS/dK per K/V block in registers, dQ by atomics";
  r.peak = Peak::tensor_16bit;
  r.head_dims = {64, 128};
  r.min_cc = 80;
  r.forward_rung = kForwardRung;
  r.in_tour = false;
  r.supports = [](const Problem& p, const DeviceInfo& d) -> std::string {
    if (!registry().find(kForwardRung)) return "needs rung 06 (its forward pass) in the build";
    if (p.head_dim != 64 && p.head_dim != 128) return "head_dim must be 64 or 128";
    const int smem = p.head_dim == 64 ? bwd::BwdTiles<64>::kSmemBytes : bwd::BwdTiles<128>::kSmemBytes;
    const std::string limits = tile_limits(p, d, smem);  // heads_q >= heads_kv: covers grid y
    if (!limits.empty()) return limits;
    return forward_rung().supports ? forward_rung().supports(p, d) : "";
  };
  r.launch = [](const AttnParams& p, cudaStream_t s) { forward_rung().launch(p, s); };
  r.bwd_workspace_bytes = [](const Problem& p, bool deterministic) {
    return bwd::workspace_bytes(p, deterministic);
  };
  r.launch_bwd = [](const AttnBwdParams& P, cudaStream_t s) {
    FL_DTYPE_SWITCH(static_cast<DType>(P.fwd.dtype), T, [&] {
      if (P.fwd.head_dim == 64) {
        bwd::launch_backward<T, 64>(P, s);
      } else {
        bwd::launch_backward<T, 128>(P, s);
      }
    });
  };
  r.kernels = [](const Problem& p) {
    return FL_DTYPE_SWITCH(p.dtype, T, [&] {
      return p.head_dim == 64 ? kernel_list<T, 64>() : kernel_list<T, 128>();
    });
  };
  r.notes = [](const Problem&) {
    return std::vector<std::string>{
        "backward pass after rung 06's forward (O and LSE); FLOPs by FlashAttention's "
        "convention: 2.5 x the forward's"};
  };
  reg.add(std::move(r));
}

}  // namespace fl
