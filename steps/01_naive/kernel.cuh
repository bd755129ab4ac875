/// @file steps/01_naive/kernel.cuh
/// @brief Rung 01: attention as three separate kernels, with the full score
/// matrix S = scale * Q K^T materialized in HBM.
///
/// @code
///   // clang-format off
///   Q [Sq x d] ──┐
///                ├─ kernel 1: qk_scores ──> S [Sq x Sk] fp32 in HBM   (write Sq*Sk*4 B)
///   K [Sk x d] ──┘                               │
///                               kernel 2: softmax_rows (read + write S in place, + LSE)
///                                                │
///   V [Sk x d] ─────────────── kernel 3: pv ─────┴──> O [Sq x d]      (read S again)
///   // clang-format on
/// @endcode
///
/// Per (batch, head) this moves ~4 x Sq x Sk x 4 bytes of S through HBM
/// (write, read+write, read), which is what every later rung removes.
#pragma once

#include <math.h>

#include "flashladder/dtype.cuh"
#include "flashladder/problem.h"

namespace fl::naive {

/// Tile edge of the score kernel's 2-D blocks (16 x 16 threads).
constexpr int kScoreTile = 16;
/// Threads per row in the softmax kernel.
constexpr int kSoftmaxThreads = 256;
/// Output columns per block in the PV kernel (one thread per output element).
constexpr int kPvCols = 32;
/// Query rows per block in the PV kernel.
constexpr int kPvRows = 8;

/// Offset of S[b, h, i, 0] in the [batch, heads_q, seqlen_q, seqlen_k] fp32 workspace.
__device__ __forceinline__ int64_t s_row_offset(const AttnParams& p, int b, int h, int i) {
  return ((static_cast<int64_t>(b) * p.heads_q + h) * p.seqlen_q + i) * p.seqlen_k;
}

/// Kernel 1: S[b,h,i,j] = scale * dot(Q[b,i,h,:], K[b,j,h/group,:]), or -inf
/// where the causal mask hides key j from query i. One thread per score; each
/// thread reads a whole Q row and K row from global memory (no reuse at all:
/// this is the baseline the later rungs improve on).
template <class T>
__global__ void qk_scores(AttnParams p) {
  const int j = blockIdx.x * kScoreTile + threadIdx.x;  // key
  const int i = blockIdx.y * kScoreTile + threadIdx.y;  // query
  const int bh = blockIdx.z;
  const int b = bh / p.heads_q, h = bh % p.heads_q;
  if (i >= p.seqlen_q || j >= p.seqlen_k) return;  // tails: no padding in the input

  float* S_gmem = static_cast<float*>(p.workspace) + s_row_offset(p, b, h, i);
  if (p.causal && j > i + p.causal_offset) {
    S_gmem[j] = -INFINITY;
    return;
  }
  const T* q_gmem = static_cast<const T*>(p.q) + b * p.q_batch_stride + i * p.q_row_stride +
                    h * p.q_head_stride;
  const T* k_gmem = static_cast<const T*>(p.k) + b * p.k_batch_stride + j * p.k_row_stride +
                    (h / p.group) * p.k_head_stride;  // GQA: query head h reads KV head h/group
  float acc = 0.f;
  for (int c = 0; c < p.head_dim; ++c) acc += to_float(q_gmem[c]) * to_float(k_gmem[c]);
  S_gmem[j] = acc * p.softmax_scale;
}

/// Block-wide reduction of one float with @p op over kSoftmaxThreads threads;
/// @p identity is op's neutral element (-inf for max, 0 for sum).
template <class Op>
__device__ __forceinline__ float block_reduce(float x, Op op, float identity, float* scratch) {
  for (int off = 16; off > 0; off /= 2) x = op(x, __shfl_xor_sync(0xffffffffu, x, off));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) scratch[warp] = x;
  __syncthreads();
  x = lane < kSoftmaxThreads / 32 ? scratch[lane] : identity;  // one value per warp
  for (int off = 16; off > 0; off /= 2) x = op(x, __shfl_xor_sync(0xffffffffu, x, off));
  __syncthreads();  // scratch is reused by the next reduction
  return x;
}

/// Kernel 2: numerically safe softmax of one row of S, in place:
/// m = max_j S_ij, P_ij = exp(S_ij - m) / sum_j exp(S_ij - m); LSE = m + log(l).
/// A row that sees no key (causal, seqlen_q > seqlen_k) has m = -inf: its P is
/// 0 everywhere, so O = 0, and LSE = -inf, as the contract asks.
__global__ void softmax_rows(AttnParams p) {
  __shared__ float scratch[kSoftmaxThreads / 32];
  const int i = blockIdx.x;
  const int bh = blockIdx.y;
  const int b = bh / p.heads_q, h = bh % p.heads_q;
  float* S_gmem = static_cast<float*>(p.workspace) + s_row_offset(p, b, h, i);

  float m = -INFINITY;  // pass 1 over the row: max
  for (int j = threadIdx.x; j < p.seqlen_k; j += kSoftmaxThreads) m = fmaxf(m, S_gmem[j]);
  m = block_reduce(m, [](float a, float c) { return fmaxf(a, c); }, -INFINITY, scratch);

  float l = 0.f;  // pass 2: sum of exp(s - m); masked entries give exp(-inf) = 0
  if (m != -INFINITY)
    for (int j = threadIdx.x; j < p.seqlen_k; j += kSoftmaxThreads) l += expf(S_gmem[j] - m);
  l = block_reduce(l, [](float a, float c) { return a + c; }, 0.f, scratch);

  const float inv_l = (l > 0.f) ? 1.f / l : 0.f;  // pass 3: normalize in place
  for (int j = threadIdx.x; j < p.seqlen_k; j += kSoftmaxThreads)
    S_gmem[j] = (m == -INFINITY) ? 0.f : expf(S_gmem[j] - m) * inv_l;
  if (threadIdx.x == 0)
    p.lse[(static_cast<int64_t>(b) * p.heads_q + h) * p.seqlen_q + i] =
        (l > 0.f) ? m + logf(l) : -INFINITY;
}

/// Kernel 3: O[b,i,h,c] = sum_j P_ij V[b,j,h/group,c]. One thread per output
/// element; the 32 threads of a warp share i and read consecutive c, so V reads
/// are coalesced and the P_ij read is a broadcast.
template <class T>
__global__ void pv(AttnParams p) {
  const int c = blockIdx.x * kPvCols + threadIdx.x;
  const int i = blockIdx.y * kPvRows + threadIdx.y;
  const int bh = blockIdx.z;
  const int b = bh / p.heads_q, h = bh % p.heads_q;
  if (i >= p.seqlen_q || c >= p.head_dim) return;
  const float* P_gmem = static_cast<const float*>(p.workspace) + s_row_offset(p, b, h, i);
  const T* v_gmem = static_cast<const T*>(p.v) + b * p.v_batch_stride +
                    (h / p.group) * p.v_head_stride + c;
  float acc = 0.f;
  for (int j = 0; j < p.seqlen_k; ++j) acc += P_gmem[j] * to_float(v_gmem[j * p.v_row_stride]);
  T* o_gmem = static_cast<T*>(p.o) + b * p.o_batch_stride + i * p.o_row_stride +
              h * p.o_head_stride;
  o_gmem[c] = from_float<T>(acc);
}

}  // namespace fl::naive
