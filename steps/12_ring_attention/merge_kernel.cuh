/// @file steps/12_ring_attention/merge_kernel.cuh
/// @brief Rung 12's own kernels, all small: the fp32 accumulator's reset, the merge of one
/// step's partial (O, LSE) into it, and the final 16-bit O.
///
/// The merge is rung 08's split combine one level up: a ring step is a "split" of the keys
/// (the K/V shard the rank holds at that step), the forward rung returns that split's
/// normalized O_s and LSE_s, and the merge folds it into a running (O, LSE) with the one rule
/// of softmax_math.h:
/// @code
///   // clang-format off
///   LSE = log(exp(LSE_acc) + exp(LSE_s))               lse_combine(LSE_acc, LSE_s, &w_acc, &w_s)
///   O   = w_acc O_acc + w_s O_s,   w_x = exp(LSE_x - LSE)
///   // clang-format on
/// @endcode
/// O_acc stays in fp32 for the whole ring; only the final O is rounded to 16 bits. Merging in
/// 16 bits would round P times (zhuzilin/ring-flash-attention warns of the loss). O_s itself
/// comes from the forward rung in 16 bits (the ladder's O is 16-bit), so each step's partial
/// is rounded once; the weights w_s sum to 1, so the merged error stays that of one rounding.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "flashladder/dtype.cuh"
#include "flashladder/softmax_math.h"

namespace fl::ring {

/// Where one launch's partial result is and where it goes. The rank's shard has S_local rows;
/// the launch covered local query rows [q_begin, q_begin + q_len).
struct MergeArgs {
  const void* o_part;     ///< 16-bit [batch, S_local, heads, head_dim]: the launch's O rows
  const float* lse_part;  ///< fp32 [batch, heads, q_len]: dense, as the rung wrote it
  float* o_acc;           ///< fp32 [batch, S_local, heads, head_dim]
  float* lse_acc;         ///< fp32 [batch, heads, S_local]: the rank's LSE output
  int batch, heads, head_dim, s_local, q_begin, q_len;
};

constexpr int kMergeWarps = 8;  ///< rows per CTA: one warp per (batch, query, head) row

/// One warp per output row (b, i, h), rows ordered like O in memory (h fastest). Every lane
/// reads both LSEs and computes the same weights; lanes then take column pairs 2*lane,
/// 2*lane + 64, ... (head_dim is even: 32 ... 256).
template <class T>
__global__ void __launch_bounds__(kMergeWarps * 32) merge_partial(MergeArgs a) {
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kMergeWarps + threadIdx.x / 32;
  if (row >= static_cast<int64_t>(a.batch) * a.q_len * a.heads) return;
  const int h = static_cast<int>(row % a.heads);
  const int64_t bi = row / a.heads;
  const int i = static_cast<int>(bi % a.q_len);
  const int b = static_cast<int>(bi / a.q_len);
  const int li = a.q_begin + i;  // the row in the rank's shard

  float* lse_acc_gmem = a.lse_acc + (static_cast<int64_t>(b) * a.heads + h) * a.s_local + li;
  const float lse_s = a.lse_part[(static_cast<int64_t>(b) * a.heads + h) * a.q_len + i];
  float w_acc, w_s;
  const float lse_new = lse_combine(*lse_acc_gmem, lse_s, &w_acc, &w_s);

  const int64_t off = ((static_cast<int64_t>(b) * a.s_local + li) * a.heads + h) * a.head_dim;
  const T* o_s_gmem = static_cast<const T*>(a.o_part) + off;
  float* o_acc_gmem = a.o_acc + off;
  for (int c = 2 * lane; c < a.head_dim; c += 64) {
    const float2 o_s = unpack2<T>(*reinterpret_cast<const uint32_t*>(o_s_gmem + c));
    float2 o = *reinterpret_cast<const float2*>(o_acc_gmem + c);
    // w_s = 0 for a partial that saw no key: its O_s (0 by the contract) drops out.
    o.x = w_acc * o.x + (w_s == 0.f ? 0.f : w_s * o_s.x);
    o.y = w_acc * o.y + (w_s == 0.f ? 0.f : w_s * o_s.y);
    *reinterpret_cast<float2*>(o_acc_gmem + c) = o;
  }
  __syncwarp();  // every lane has read the old LSE before lane 0 replaces it
  if (lane == 0) *lse_acc_gmem = lse_new;
}

/// Before the first step: O_acc = 0 and LSE = -inf (a row that sees no key keeps both: the
/// contract's O = 0, LSE = -inf).
__global__ void reset_accumulator(float* o_acc, int64_t o_elems, float* lse, int64_t lse_elems) {
  const int64_t n = o_elems > lse_elems ? o_elems : lse_elems;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += stride) {
    if (e < o_elems) o_acc[e] = 0.f;
    if (e < lse_elems) lse[e] = -INFINITY;
  }
}

/// After the last step: the 16-bit O the contract asks for, two columns per thread.
template <class T>
__global__ void finalize_output(const float* o_acc, void* o, int64_t pairs) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < pairs;
       e += stride) {
    const float2 v = reinterpret_cast<const float2*>(o_acc)[e];
    reinterpret_cast<uint32_t*>(o)[e] = pack2<T>(v.x, v.y);
  }
}

/// Grid of a grid-stride kernel over @p n items: enough CTAs to fill the GPU, no more.
inline int grid_for(int64_t n, int threads, int sms) {
  const int64_t want = (n + threads - 1) / threads;
  const int64_t cap = static_cast<int64_t>(sms) * 8;
  return static_cast<int>(want < 1 ? 1 : (want < cap ? want : cap));
}

template <class T>
void launch_merge(const MergeArgs& a, cudaStream_t s) {
  const int64_t rows = static_cast<int64_t>(a.batch) * a.q_len * a.heads;
  if (rows == 0) return;
  const int64_t ctas = (rows + kMergeWarps - 1) / kMergeWarps;
  merge_partial<T><<<static_cast<unsigned>(ctas), kMergeWarps * 32, 0, s>>>(a);
}

inline void launch_reset(float* o_acc, int64_t o_elems, float* lse, int64_t lse_elems, int sms,
                         cudaStream_t s) {
  const int64_t n = o_elems > lse_elems ? o_elems : lse_elems;
  if (n == 0) return;
  reset_accumulator<<<grid_for(n, 256, sms), 256, 0, s>>>(o_acc, o_elems, lse, lse_elems);
}

template <class T>
void launch_finalize(const float* o_acc, void* o, int64_t o_elems, int sms, cudaStream_t s) {
  if (o_elems == 0) return;
  finalize_output<T><<<grid_for(o_elems / 2, 256, sms), 256, 0, s>>>(o_acc, o, o_elems / 2);
}

}  // namespace fl::ring
