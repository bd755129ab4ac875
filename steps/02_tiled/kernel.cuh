/// @file steps/02_tiled/kernel.cuh
/// @brief Rung 02: one fused kernel per (batch, head, Q tile). Q, K and V tiles
/// are staged in shared memory and the score matrix S never reaches HBM. The
/// price: two passes over K (pass 1 finds each row's max and sum, pass 2
/// recomputes the scores, normalizes them and multiplies by V).
///
/// @code
///   // clang-format off
///   one CTA = one Q tile (BLOCK_M query rows of one head)
///
///   Q_i ──> Q_smem (loaded once, kept for both passes)
///
///   pass 1:  for each K_j:  S_ij = Q_i K_j^T  ──> S_smem ──> m_i, l_i (online max/sum)
///   pass 2:  for each K_j, V_j:  S_ij again ──> P_ij = exp(S_ij - m_i) / l_i
///                                             ──> O_i += P_ij V_j   (registers)
///   O_i ──> HBM (16-bit), LSE_i = m_i + log l_i ──> HBM
///
///   HBM traffic per Q tile: Q_i once, K twice, V once, O_i once. S: none.
///   // clang-format on
/// @endcode
///
/// The threads are mapped in the simplest way that keeps shared memory free
/// of bank conflicts: one thread per score (a warp covers 32 consecutive keys
/// of one query row) and one thread per output column. Rung 04 replaces this
/// with register tiling; here the lesson is fusion and tiling alone.
#pragma once

#include <math.h>
#include <stdint.h>

#include "flashladder/dtype.cuh"
#include "flashladder/problem.h"
#include "flashladder/softmax_math.h"

namespace fl::tiled {

/// Tile shapes of rung 02 for one head_dim. All sizes in elements.
template <int HEAD_DIM>
struct TiledTraits {
  static constexpr int kHeadDim = HEAD_DIM;
  /// Query rows per CTA (the Q tile). Also the grid's unit of parallelism.
  static constexpr int kBlockM = 64;
  /// Keys per K/V tile. d=128 halves it so K, V and Q fit in ~73 KB.
  static constexpr int kBlockN = HEAD_DIM <= 64 ? 64 : 32;
  static constexpr int kThreads = 256;
  static constexpr int kWarps = kThreads / 32;

  /// K_smem row pitch: one extra float, so the 32 threads of a warp, which read
  /// 32 different keys at the same column, hit 32 different banks.
  static constexpr int kKPitch = HEAD_DIM + 1;
  /// Q, V and S are read along rows (or broadcast): no padding needed.
  static constexpr int kQPitch = HEAD_DIM;
  static constexpr int kVPitch = HEAD_DIM;
  static constexpr int kSPitch = kBlockN;

  // Shared-memory layout, in floats: Q | K | V | S | m | l | 1/l.
  static constexpr int kQFloats = kBlockM * kQPitch;
  static constexpr int kKFloats = kBlockN * kKPitch;
  static constexpr int kVFloats = kBlockN * kVPitch;
  static constexpr int kSFloats = kBlockM * kSPitch;
  static constexpr int kStatFloats = 3 * kBlockM;
  static constexpr size_t kSmemBytes =
      sizeof(float) * (kQFloats + kKFloats + kVFloats + kSFloats + kStatFloats);

  /// Scores each thread computes per K tile.
  static constexpr int kScoresPerThread = kBlockM * kBlockN / kThreads;
  /// Output elements each thread accumulates (one column, several rows).
  static constexpr int kRowsPerThread = kBlockM * HEAD_DIM / kThreads;
  /// Rows between two of a thread's output rows.
  static constexpr int kRowStep = kThreads / HEAD_DIM;

  static_assert(HEAD_DIM % 8 == 0, "16-byte global loads move 8 elements of a row");
  static_assert(kBlockN % 32 == 0, "a warp's 32 scores must lie in one query row");
  static_assert((kBlockM * kBlockN) % kThreads == 0, "scores split evenly over the threads");
  static_assert(kThreads % HEAD_DIM == 0, "each thread owns one output column");
  static_assert(kBlockM % kRowStep == 0, "output rows split evenly over the threads");
  static_assert(kBlockM % kWarps == 0, "row statistics: whole rows per warp");
  // 163 KB is the opt-in limit of sm_80 (A100), the smallest we build for.
  static_assert(kSmemBytes <= 163 * 1024, "tiles must fit in an A100's shared memory");
};

/// Copies a [ROWS x HEAD_DIM] tile of 16-bit storage (rows @p row_stride
/// elements apart) into fp32 shared memory with row pitch PITCH. Rows at or
/// beyond @p rows_valid are zero-filled: tails are masked in the kernel, never
/// padded in the input. Each thread moves 16 bytes (8 elements) per load, and
/// consecutive threads read consecutive 16-byte pieces of a row (coalesced).
template <class T, int ROWS, int HEAD_DIM, int PITCH, int THREADS>
__device__ __forceinline__ void load_tile(const T* tile_gmem, int64_t row_stride, int rows_valid,
                                          float* tile_smem) {
  constexpr int kChunksPerRow = HEAD_DIM / 8;
  for (int idx = threadIdx.x; idx < ROWS * kChunksPerRow; idx += THREADS) {
    const int r = idx / kChunksPerRow;
    const int c = (idx % kChunksPerRow) * 8;
    float v[8];
    if (r < rows_valid) {
      const uint4 raw = *reinterpret_cast<const uint4*>(tile_gmem + r * row_stride + c);
      const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        const float2 f = unpack2<T>(words[w]);
        v[2 * w] = f.x;
        v[2 * w + 1] = f.y;
      }
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] = 0.f;
    }
#pragma unroll
    for (int e = 0; e < 8; ++e) tile_smem[r * PITCH + c + e] = v[e];
  }
}

/// Sum (or max) over the 32 lanes of a warp; every lane gets the result.
template <class Op>
__device__ __forceinline__ float warp_reduce(float x, Op op) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) x = op(x, __shfl_xor_sync(0xffffffffu, x, offset));
  return x;
}

/// One score: scale * dot(Q row r, K row c), or -inf where the key is past
/// the end (tail tile) or hidden by the causal mask. @p q_row and @p key are
/// absolute indices; r and c index the tiles in shared memory.
template <class Tr>
__device__ __forceinline__ float score(const AttnParams& p, const float* Q_smem,
                                       const float* K_smem, int r, int c, int q_row, int key) {
  if (key >= p.seqlen_k || (p.causal && key > q_row + p.causal_offset)) return -INFINITY;
  float acc = 0.f;
#pragma unroll 16
  for (int k = 0; k < Tr::kHeadDim; ++k)
    acc += Q_smem[r * Tr::kQPitch + k] * K_smem[c * Tr::kKPitch + k];
  return acc * p.softmax_scale;
}

/// Rung 02's kernel. Grid: (Q tiles, heads_q, batch); kThreads threads.
template <int HEAD_DIM, class T>
__global__ void __launch_bounds__(TiledTraits<HEAD_DIM>::kThreads) tiled_attention(AttnParams p) {
  using Tr = TiledTraits<HEAD_DIM>;
  constexpr int BLOCK_M = Tr::kBlockM, BLOCK_N = Tr::kBlockN;

  extern __shared__ __align__(16) float smem[];
  float* Q_smem = smem;
  float* K_smem = Q_smem + Tr::kQFloats;
  float* V_smem = K_smem + Tr::kKFloats;
  float* S_smem = V_smem + Tr::kVFloats;  // pass 1: scores; pass 2: probabilities
  float* m_smem = S_smem + Tr::kSFloats;  // running row max
  float* l_smem = m_smem + BLOCK_M;       // running row sum of exp(s - m)
  float* inv_l_smem = l_smem + BLOCK_M;   // 1 / l, for pass 2

  const int q_tile = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int h_kv = h / p.group;  // GQA: query head h reads KV head h / group
  const int q0 = q_tile * BLOCK_M;
  const int rows_q = min(BLOCK_M, p.seqlen_q - q0);
  const int num_kv_tiles = (p.seqlen_k + BLOCK_N - 1) / BLOCK_N;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;

  const T* Q_gmem =
      static_cast<const T*>(p.q) + b * p.q_batch_stride + q0 * p.q_row_stride + h * p.q_head_stride;
  const T* K_gmem = static_cast<const T*>(p.k) + b * p.k_batch_stride + h_kv * p.k_head_stride;
  const T* V_gmem = static_cast<const T*>(p.v) + b * p.v_batch_stride + h_kv * p.v_head_stride;

  load_tile<T, BLOCK_M, HEAD_DIM, Tr::kQPitch, Tr::kThreads>(Q_gmem, p.q_row_stride, rows_q,
                                                             Q_smem);
  for (int r = tid; r < BLOCK_M; r += Tr::kThreads) {
    const SoftmaxState s0 = softmax_init();
    m_smem[r] = s0.m;
    l_smem[r] = s0.l;
  }

  // ---- pass 1: row max m_i and row sum l_i over all K tiles -------------------
  for (int j = 0; j < num_kv_tiles; ++j) {
    const int k0 = j * BLOCK_N;
    __syncthreads();  // the previous tile's readers of K_smem are done
    load_tile<T, BLOCK_N, HEAD_DIM, Tr::kKPitch, Tr::kThreads>(
        K_gmem + k0 * p.k_row_stride, p.k_row_stride, min(BLOCK_N, p.seqlen_k - k0), K_smem);
    __syncthreads();
    // LAB-BEGIN(02-scores): S_ij = scale * Q_i K_j^T into S_smem, -inf where masked
#pragma unroll
    for (int e = 0; e < Tr::kScoresPerThread; ++e) {
      const int idx = tid + e * Tr::kThreads;
      const int r = idx / BLOCK_N, c = idx % BLOCK_N;
      S_smem[r * Tr::kSPitch + c] = score<Tr>(p, Q_smem, K_smem, r, c, q0 + r, k0 + c);
    }
    // LAB-END(02-scores)
    __syncthreads();
    // LAB-BEGIN(02-row-stats): fold this tile's row max and row sum into m_i, l_i
    // One warp per row: the tile's max and sum of exp(s - max) come from warp
    // reductions, then fl::softmax_merge rescales the old sum to the new max.
    // Only the scalar l is rescaled here; rung 03 rescales O the same way.
    for (int r = warp; r < BLOCK_M; r += Tr::kWarps) {
      float m_tile = -INFINITY;
      for (int c = lane; c < BLOCK_N; c += 32) m_tile = fmaxf(m_tile, S_smem[r * Tr::kSPitch + c]);
      m_tile = warp_reduce(m_tile, [](float a, float c) { return fmaxf(a, c); });
      float l_tile = 0.f;
      for (int c = lane; c < BLOCK_N; c += 32)
        l_tile += exp_diff(S_smem[r * Tr::kSPitch + c], m_tile);
      l_tile = warp_reduce(l_tile, [](float a, float c) { return a + c; });
      if (lane == 0) {
        float alpha_old, alpha_tile;  // rescale factors; pass 1 only needs the new state
        const SoftmaxState s =
            softmax_merge({m_smem[r], l_smem[r]}, m_tile, l_tile, &alpha_old, &alpha_tile);
        m_smem[r] = s.m;
        l_smem[r] = s.l;
      }
    }
    // LAB-END(02-row-stats)
  }
  __syncthreads();
  for (int r = tid; r < BLOCK_M; r += Tr::kThreads) {
    const SoftmaxState s{m_smem[r], l_smem[r]};
    inv_l_smem[r] = softmax_inv_l(s);  // 0 for a row that sees no key: O = 0
    if (r < rows_q)
      p.lse[(static_cast<int64_t>(b) * p.heads_q + h) * p.seqlen_q + q0 + r] = softmax_lse(s);
  }

  // ---- pass 2: O_i = sum_j softmax(S_ij) V_j -----------------------------------
  // Thread tid owns output column c_out and rows r_out0, r_out0 + kRowStep, ...
  const int c_out = tid % HEAD_DIM, r_out0 = tid / HEAD_DIM;
  float O_reg[Tr::kRowsPerThread];
#pragma unroll
  for (int e = 0; e < Tr::kRowsPerThread; ++e) O_reg[e] = 0.f;

  for (int j = 0; j < num_kv_tiles; ++j) {
    const int k0 = j * BLOCK_N;
    const int rows_k = min(BLOCK_N, p.seqlen_k - k0);
    __syncthreads();  // K_smem, V_smem and S_smem of the previous tile are free
    load_tile<T, BLOCK_N, HEAD_DIM, Tr::kKPitch, Tr::kThreads>(K_gmem + k0 * p.k_row_stride,
                                                               p.k_row_stride, rows_k, K_smem);
    load_tile<T, BLOCK_N, HEAD_DIM, Tr::kVPitch, Tr::kThreads>(V_gmem + k0 * p.v_row_stride,
                                                               p.v_row_stride, rows_k, V_smem);
    __syncthreads();
    // LAB-BEGIN(02-probs): recompute S_ij and store P_ij = exp(S_ij - m_i) / l_i
#pragma unroll
    for (int e = 0; e < Tr::kScoresPerThread; ++e) {
      const int idx = tid + e * Tr::kThreads;
      const int r = idx / BLOCK_N, c = idx % BLOCK_N;
      const float s = score<Tr>(p, Q_smem, K_smem, r, c, q0 + r, k0 + c);
      S_smem[r * Tr::kSPitch + c] = exp_diff(s, m_smem[r]) * inv_l_smem[r];
    }
    // LAB-END(02-probs)
    __syncthreads();
    // LAB-BEGIN(02-pv): O_i += P_ij V_j for this thread's column
    // A warp reads one P row (broadcast) and 32 consecutive V columns.
#pragma unroll
    for (int e = 0; e < Tr::kRowsPerThread; ++e) {
      const int r = r_out0 + e * Tr::kRowStep;
      float acc = 0.f;
#pragma unroll 8
      for (int c = 0; c < BLOCK_N; ++c)
        acc += S_smem[r * Tr::kSPitch + c] * V_smem[c * Tr::kVPitch + c_out];
      O_reg[e] += acc;
    }
    // LAB-END(02-pv)
  }

  T* O_gmem =
      static_cast<T*>(p.o) + b * p.o_batch_stride + q0 * p.o_row_stride + h * p.o_head_stride;
#pragma unroll
  for (int e = 0; e < Tr::kRowsPerThread; ++e) {
    const int r = r_out0 + e * Tr::kRowStep;
    if (r < rows_q) O_gmem[r * p.o_row_stride + c_out] = from_float<T>(O_reg[e]);
  }
}

}  // namespace fl::tiled
