/// @file steps/03_online_softmax/launch.cu
/// @brief Rung 03's launcher: grid shape, workspace, `supports`, and registration.
#include <string>
#include <vector>

#include "flashladder/cuda_check.h"
#include "flashladder/registry.h"
#include "flashladder/report.h"
#include "flashladder/static_switch.h"
#include "kernel.cuh"

namespace fl {
namespace {

using fa1::Fa1Traits;

/// Rung 03 is built for head_dim 32, 64 and 128; FL_HEADDIM_SWITCH also has a
/// 256 case, which this guard keeps from being instantiated.
constexpr bool built_03(int d) {
  return d <= 128;
}

/// The kernel for (D, T), with its dynamic shared-memory limit raised once.
template <int D, class T>
const void* prepared_kernel() {
  static const bool once = [] {
    FL_CUDA_CHECK(cudaFuncSetAttribute(fa1::fa1_attention<D, T>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(Fa1Traits<D>::kSmemBytes)));
    return true;
  }();
  (void)once;
  return reinterpret_cast<const void*>(&fa1::fa1_attention<D, T>);
}

/// One CTA per (query head, batch): FA1 parallelizes over batch x heads only.
template <int D, class T>
void launch_fa1(const AttnParams& p, cudaStream_t stream) {
  using Tr = Fa1Traits<D>;
  prepared_kernel<D, T>();
  const dim3 grid(p.heads_q, p.batch);
  fa1::fa1_attention<D, T><<<grid, Tr::kThreads, Tr::kSmemBytes, stream>>>(p);
  FL_LAUNCH_CHECK("fa1_attention");
}

size_t workspace_03(const Problem& p) {
  return fa1::fa1_workspace_bytes(p.batch, p.heads_q, p.seqlen_q, p.head_dim);
}

/// Why rung 03 cannot run @p p on @p d, or "".
std::string supports_03(const Problem& p, const DeviceInfo& d) {
  if (p.batch > 65535) return "batch must be <= 65535 (grid y)";
  const size_t smem = FL_HEADDIM_SWITCH(p.head_dim, D, [&]() -> size_t {
    if constexpr (built_03(D)) return Fa1Traits<D>::kSmemBytes;
    return 0;
  });
  if (d.smem_per_block_optin > 0 && smem > static_cast<size_t>(d.smem_per_block_optin))
    return "needs " + std::to_string(smem) + " bytes of shared memory per block, the GPU allows " +
           std::to_string(d.smem_per_block_optin);
  return "";
}

}  // namespace

void register_rung_03(Registry& reg) {
  Rung r;
  r.number = 3;
  r.name = "online_softmax";
  r.summary =
      "FlashAttention-1: one pass, online softmax, K/V-outer loop, O/m/l round-trip via HBM";
  r.peak = Peak::fp32_fma;
  r.head_dims = {32, 64, 128};
  r.supports = supports_03;
  r.baselines = {Baseline::on(2, "the rung it improves on: one pass over K/V instead of two")};
  r.workspace_bytes = workspace_03;
  r.launch = [](const AttnParams& p, cudaStream_t s) {
    FL_DTYPE_SWITCH(static_cast<DType>(p.dtype), T, [&] {
      FL_HEADDIM_SWITCH(p.head_dim, D, [&] {
        if constexpr (built_03(D)) launch_fa1<D, T>(p, s);
      });
    });
  };
  r.kernels = [](const Problem& p) {
    return FL_DTYPE_SWITCH(p.dtype, T, [&] {
      return FL_HEADDIM_SWITCH(p.head_dim, D, [&] {
        std::vector<KernelInfo> k;
        if constexpr (built_03(D))
          k.push_back({"fa1_attention", prepared_kernel<D, T>(), Fa1Traits<D>::kThreads,
                       Fa1Traits<D>::kSmemBytes});
        return k;
      });
    });
  };
  r.notes = [](const Problem& p) {
    const int block_n = FL_HEADDIM_SWITCH(p.head_dim, D, [&]() -> int {
      if constexpr (built_03(D)) return Fa1Traits<D>::kBlockN;
      return 1;
    });
    // Every K/V tile but the last reads and writes O, m, l of every row in fp32.
    const double kv_tiles = (p.seqlen_k + block_n - 1) / block_n;
    const double round_trip = 2.0 * (kv_tiles - 1) * static_cast<double>(workspace_03(p));
    const long long ctas = static_cast<long long>(p.batch) * p.heads_q;
    return std::vector<std::string>{
        "O/m/l round trip through HBM: " + format_bytes(round_trip) + " (2 x (Tc-1) x " +
            format_bytes(static_cast<double>(workspace_03(p))) + " fp32 scratch)",
        "parallelism: batch x heads = " + std::to_string(ctas) + " CTAs (FA1 does not split Q)"};
  };
  reg.add(std::move(r));
}

}  // namespace fl
