/// @file steps/11_backward/exact_delta.cuh
/// @brief The exact D pass as one call (delta_policy.h): the preprocess zeroes the pass's sums, a
/// pass of the main kernel adds Σ P ∘ dP and Σ P per row, bwd_delta_sum_kernel divides. Rung 11's
/// launch runs it before its main kernel on long rows; rung 14 runs it before its own.
#pragma once

#include <algorithm>

#include "flashladder/cuda_check.h"
#include "kernel.cuh"

namespace fl::bwd {

/// The main kernel's instantiation for T, Cfg, DELTA_PASS, with its dynamic shared memory limit
/// raised to Cfg::kSmemBytes once (above the 48 KB default).
template <class T, class Cfg, bool DELTA_PASS = false>
const void* prepared_main() {
  static const bool once = [] {
    FL_CUDA_CHECK(cudaFuncSetAttribute(bwd_main_kernel<T, Cfg, DELTA_PASS>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes));
    return true;
  }();
  (void)once;
  return reinterpret_cast<const void*>(&bwd_main_kernel<T, Cfg, DELTA_PASS>);
}

/// D = Σ P ∘ dP / Σ P per row into @p d_rowsum ([batch, heads_q, seqlen_q]), from @p n_delta
/// accumulator pairs at @p delta_acc (workspace.h: one, or one per deterministic split). @p grid,
/// @p kv_split and @p lpt as for the main kernel of the same launch. With @p zero (rung 14), the
/// preprocess only zeroes the sums; rung 11's own preprocess does that beside its other work.
template <class T, class Cfg>
void launch_exact_delta(const AttnBwdParams& P, float* d_rowsum, float* delta_acc, int n_delta, dim3 grid,
                        int kv_split, bool lpt, bool zero, cudaStream_t stream) {
  const AttnParams& p = P.fwd;
  const int64_t rows = int64_t(p.batch) * p.heads_q * p.seqlen_q;
  if (zero) {
    bwd_preprocess_kernel<T, Cfg::kHeadDim><<<static_cast<unsigned>((rows + kPrepWarps - 1) / kPrepWarps),
                                              kPrepThreads, 0, stream>>>(P, d_rowsum, nullptr, 0, delta_acc, n_delta);
    FL_LAUNCH_CHECK("bwd_preprocess_kernel (exact D sums)");
  }
  prepared_main<T, Cfg, true>();
  bwd_main_kernel<T, Cfg, true><<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(P, nullptr, delta_acc, kv_split,
                                                                                 nullptr, lpt);
  FL_LAUNCH_CHECK("bwd_main_kernel (exact D pass)");
  bwd_delta_sum_kernel<<<static_cast<unsigned>(std::min<int64_t>((rows + 255) / 256, 65535)), 256, 0, stream>>>(
      delta_acc, n_delta, rows, d_rowsum);
  FL_LAUNCH_CHECK("bwd_delta_sum_kernel");
}

}  // namespace fl::bwd
