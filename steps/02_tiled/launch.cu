/// @file steps/02_tiled/launch.cu
/// @brief Rung 02's launcher: grid shape, `supports`, and registration.
#include <string>
#include <vector>

#include "flashladder/cuda_check.h"
#include "flashladder/registry.h"
#include "flashladder/report.h"
#include "flashladder/static_switch.h"
#include "kernel.cuh"

namespace fl {
namespace {

using tiled::TiledTraits;

/// Rung 02 is built for head_dim 32, 64 and 128; FL_HEADDIM_SWITCH also has a
/// 256 case, which this guard keeps from being instantiated.
constexpr bool built_02(int d) {
  return d <= 128;
}

/// The kernel for (D, T), with its dynamic shared-memory limit raised once
/// (above 48 KB a kernel must opt in).
template <int D, class T>
const void* prepared_kernel() {
  static const bool once = [] {
    FL_CUDA_CHECK(cudaFuncSetAttribute(tiled::tiled_attention<D, T>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(TiledTraits<D>::kSmemBytes)));
    return true;
  }();
  (void)once;
  return reinterpret_cast<const void*>(&tiled::tiled_attention<D, T>);
}

/// One CTA per (Q tile, query head, batch).
template <int D, class T>
void launch_tiled(const AttnParams& p, cudaStream_t stream) {
  using Tr = TiledTraits<D>;
  prepared_kernel<D, T>();
  const dim3 grid((p.seqlen_q + Tr::kBlockM - 1) / Tr::kBlockM, p.heads_q, p.batch);
  tiled::tiled_attention<D, T><<<grid, Tr::kThreads, Tr::kSmemBytes, stream>>>(p);
  FL_LAUNCH_CHECK("tiled_attention");
}

/// Why rung 02 cannot run @p p on @p d, or "".
std::string supports_02(const Problem& p, const DeviceInfo& d) {
  if (p.heads_q > 65535 || p.batch > 65535)
    return "heads_q and batch must be <= 65535 (grid y and z)";
  const size_t smem = FL_HEADDIM_SWITCH(p.head_dim, D, [&]() -> size_t {
    if constexpr (built_02(D)) return TiledTraits<D>::kSmemBytes;
    return 0;
  });
  if (d.smem_per_block_optin > 0 && smem > static_cast<size_t>(d.smem_per_block_optin))
    return "needs " + std::to_string(smem) + " bytes of shared memory per block, the GPU allows " +
           std::to_string(d.smem_per_block_optin);
  return "";
}

}  // namespace

void register_rung_02(Registry& reg) {
  Rung r;
  r.number = 2;
  r.name = "tiled";
  r.summary = "one fused kernel per Q tile, tiles in shared memory, two passes over K/V";
  r.peak = Peak::fp32_fma;
  r.head_dims = {32, 64, 128};
  r.supports = supports_02;
  r.baselines = {Baseline::on(1, "the rung it improves on: S leaves HBM, Q/K/V tiles are reused")};
  r.launch = [](const AttnParams& p, cudaStream_t s) {
    FL_DTYPE_SWITCH(static_cast<DType>(p.dtype), T, [&] {
      FL_HEADDIM_SWITCH(p.head_dim, D, [&] {
        if constexpr (built_02(D)) launch_tiled<D, T>(p, s);
      });
    });
  };
  r.kernels = [](const Problem& p) {
    return FL_DTYPE_SWITCH(p.dtype, T, [&] {
      return FL_HEADDIM_SWITCH(p.head_dim, D, [&] {
        std::vector<KernelInfo> k;
        if constexpr (built_02(D))
          k.push_back({"tiled_attention", prepared_kernel<D, T>(), TiledTraits<D>::kThreads,
                       TiledTraits<D>::kSmemBytes});
        return k;
      });
    });
  };
  r.notes = [](const Problem& p) {
    // Per Q tile: K is read twice (pass 1 and pass 2), V once, from L2 or HBM.
    const double kv_head_bytes = 2.0 * p.seqlen_k * p.head_dim;  // one K (or V) head, 16-bit
    const int block_m = FL_HEADDIM_SWITCH(p.head_dim, D, [&]() -> int {
      if constexpr (built_02(D)) return TiledTraits<D>::kBlockM;
      return 1;
    });
    const double tiles =
        static_cast<double>(p.batch) * p.heads_q * ((p.seqlen_q + block_m - 1) / block_m);
    return std::vector<std::string>{
        "S never leaves the chip; K/V requests (3 x K/V head per Q tile): " +
        format_bytes(3.0 * kv_head_bytes * tiles)};
  };
  reg.add(std::move(r));
}

}  // namespace fl
