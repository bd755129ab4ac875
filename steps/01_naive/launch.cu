/// @file steps/01_naive/launch.cu
/// @brief Rung 01's launcher: grid shapes, workspace size, and registration.
#include "flashladder/cuda_check.h"
#include "flashladder/registry.h"
#include "flashladder/report.h"
#include "flashladder/static_switch.h"
#include "kernel.cuh"

namespace fl {
namespace {

using namespace naive;

/// S in fp32: batch x heads_q x seqlen_q x seqlen_k x 4 bytes.
size_t s_bytes(const Problem& p) {
  return static_cast<size_t>(p.batch) * p.heads_q * p.seqlen_q * p.seqlen_k * sizeof(float);
}

template <class T>
void launch_naive(const AttnParams& p, cudaStream_t stream) {
  const dim3 qk_block(kScoreTile, kScoreTile);
  const dim3 qk_grid((p.seqlen_k + kScoreTile - 1) / kScoreTile,
                     (p.seqlen_q + kScoreTile - 1) / kScoreTile, p.batch * p.heads_q);
  qk_scores<T><<<qk_grid, qk_block, 0, stream>>>(p);
  FL_LAUNCH_CHECK("qk_scores");

  softmax_rows<<<dim3(p.seqlen_q, p.batch * p.heads_q), kSoftmaxThreads, 0, stream>>>(p);
  FL_LAUNCH_CHECK("softmax_rows");

  const dim3 pv_grid((p.head_dim + kPvCols - 1) / kPvCols, (p.seqlen_q + kPvRows - 1) / kPvRows,
                     p.batch * p.heads_q);
  pv<T><<<pv_grid, dim3(kPvCols, kPvRows), 0, stream>>>(p);
  FL_LAUNCH_CHECK("pv");
}

template <class T>
std::vector<KernelInfo> kernels_of() {
  return {{"qk_scores", reinterpret_cast<const void*>(&qk_scores<T>), kScoreTile * kScoreTile, 0},
          {"softmax_rows", reinterpret_cast<const void*>(&softmax_rows), kSoftmaxThreads, 0},
          {"pv", reinterpret_cast<const void*>(&pv<T>), kPvCols * kPvRows, 0}};
}

}  // namespace

void register_rung_01(Registry& reg) {
  Rung r;
  r.number = 1;
  r.name = "naive";
  r.summary = "three kernels: S = scale*QK^T to HBM, row softmax in place, O = PV";
  r.peak = Peak::fp32_fma;
  r.supports = [](const Problem& p, const DeviceInfo&) -> std::string {
    // gridDim.y/z limits: (batch*heads) and ceil(seqlen_q/16) must stay <= 65535.
    if (static_cast<long long>(p.batch) * p.heads_q > 65535)
      return "batch*heads_q must be <= 65535 for the naive grid";
    if ((p.seqlen_q + kScoreTile - 1) / kScoreTile > 65535)
      return "seqlen_q must be <= 1048560 for the naive grid";
    return "";
  };
  r.workspace_bytes = s_bytes;
  r.launch = [](const AttnParams& p, cudaStream_t s) {
    FL_DTYPE_SWITCH(static_cast<DType>(p.dtype), T, [&] { launch_naive<T>(p, s); });
  };
  r.kernels = [](const Problem& p) {
    return FL_DTYPE_SWITCH(p.dtype, T, [&] { return kernels_of<T>(); });
  };
  r.notes = [](const Problem& p) {
    const double s = static_cast<double>(s_bytes(p));
    return std::vector<std::string>{
        "S in HBM: " + format_bytes(s) + " (B*H*Sq*Sk*4 bytes); S traffic ~" +
        format_bytes(4 * s) + " (write, read+write in softmax, read in PV)"};
  };
  reg.add(std::move(r));
}

}  // namespace fl
