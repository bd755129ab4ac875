/// @file steps/03_online_softmax/kernel.cuh
/// @brief Rung 03: FlashAttention-1. One pass over K/V with the online-softmax
/// update: every time a row meets a new K/V tile its max m, its sum l and its
/// output O are rescaled (FlashAttention-1, Algorithm 1). The loop order is
/// FA1's: the outer loop walks K/V tiles, the inner loop walks Q tiles, so
/// O_i, m_i and l_i of every Q tile make a round trip through HBM per K/V tile.
///
/// @code
///   // clang-format off
///   one CTA = one (batch, head); it walks the whole S matrix tile by tile
///
///   for j over K/V tiles:                     K_j, V_j ──> K_smem, V_smem (once)
///     for i over Q tiles:
///       Q_i ──> Q_smem;  O_i, m_i, l_i <── HBM (fp32 workspace; not for j = 0)
///       S_ij = scale Q_i K_j^T                (S_smem, never in HBM)
///       m~ = rowmax S_ij;  P~ = exp(S_ij - m~);  l~ = rowsum P~
///       m_new = max(m_i, m~);  l_new = e^(m_i - m_new) l_i + e^(m~ - m_new) l~
///       O_i  = (l_i e^(m_i - m_new) O_i + e^(m~ - m_new) P~ V_j) / l_new
///       O_i, m_i, l_i ──> HBM (fp32)     ... or, for the last K/V tile,
///       O_i ──> O (16-bit), m_i + log l_i ──> LSE
///   // clang-format on
/// @endcode
///
/// Only batch x heads CTAs run: the K/V-outer order makes a CTA the sole owner
/// of all Q tiles of its head (another CTA updating the same O_i would need
/// synchronization through HBM). With batch 4 x 32 heads that is 128 CTAs on a
/// 132-SM H100: one CTA per SM, 8 warps, and nothing to hide latency with.
/// FlashAttention-2 (rung 04) turns the loops around and parallelizes over Q
/// tiles too.
///
/// The thread mapping, the tile loader and the score are rung 02's.
#pragma once

#include <math.h>
#include <stdint.h>

#include "flashladder/dtype.cuh"
#include "flashladder/problem.h"
#include "flashladder/softmax_math.h"

namespace fl::fa1 {

/// Tile shapes of rung 03 for one head_dim (rung 02's). All sizes in elements.
template <int HEAD_DIM>
struct Fa1Traits {
  static constexpr int kHeadDim = HEAD_DIM;
  /// Query rows per Q tile (inner loop).
  static constexpr int kBlockM = 64;
  /// Keys per K/V tile (outer loop). d=128 halves it so the tiles fit in ~75 KB.
  static constexpr int kBlockN = HEAD_DIM <= 64 ? 64 : 32;
  static constexpr int kThreads = 256;
  static constexpr int kWarps = kThreads / 32;

  /// K_smem row pitch: one extra float, so a warp reading 32 different keys at
  /// the same column hits 32 different banks.
  static constexpr int kKPitch = HEAD_DIM + 1;
  static constexpr int kQPitch = HEAD_DIM;
  static constexpr int kVPitch = HEAD_DIM;
  static constexpr int kSPitch = kBlockN;

  // Shared-memory layout, in floats: Q | K | V | S | m | l | c_old | c_new.
  static constexpr int kQFloats = kBlockM * kQPitch;
  static constexpr int kKFloats = kBlockN * kKPitch;
  static constexpr int kVFloats = kBlockN * kVPitch;
  static constexpr int kSFloats = kBlockM * kSPitch;
  static constexpr int kStatFloats = 4 * kBlockM;
  static constexpr size_t kSmemBytes =
      sizeof(float) * (kQFloats + kKFloats + kVFloats + kSFloats + kStatFloats);

  static constexpr int kScoresPerThread = kBlockM * kBlockN / kThreads;
  static constexpr int kRowsPerThread = kBlockM * HEAD_DIM / kThreads;
  static constexpr int kRowStep = kThreads / HEAD_DIM;

  static_assert(HEAD_DIM % 8 == 0, "16-byte global loads move 8 elements of a row");
  static_assert(kBlockN % 32 == 0, "a warp's 32 scores must lie in one query row");
  static_assert((kBlockM * kBlockN) % kThreads == 0, "scores split evenly over the threads");
  static_assert(kThreads % HEAD_DIM == 0, "each thread owns one output column");
  static_assert(kBlockM % kRowStep == 0, "output rows split evenly over the threads");
  static_assert(kBlockM % kWarps == 0, "row statistics: whole rows per warp");
  static_assert(kSmemBytes <= 163 * 1024, "tiles must fit in an A100's shared memory");
};

/// fp32 scratch in HBM, as FA1 keeps it: O [batch, heads_q, seqlen_q, head_dim]
/// (normalized, like the final output), then m and l [batch, heads_q, seqlen_q].
struct Fa1Workspace {
  float* O;
  float* m;
  float* l;
};

/// Bytes of the workspace for a problem (what Rung::workspace_bytes returns).
inline size_t fa1_workspace_bytes(int batch, int heads_q, int seqlen_q, int head_dim) {
  const size_t rows = static_cast<size_t>(batch) * heads_q * seqlen_q;
  return sizeof(float) * rows * (head_dim + 2);
}

/// Carves the workspace the runner allocated into O, m, l.
__device__ __forceinline__ Fa1Workspace fa1_workspace(const AttnParams& p) {
  const int64_t rows = static_cast<int64_t>(p.batch) * p.heads_q * p.seqlen_q;
  float* base = static_cast<float*>(p.workspace);
  return {base, base + rows * p.head_dim, base + rows * (p.head_dim + 1)};
}

/// Rung 02's tile loader: [ROWS x HEAD_DIM] of 16-bit storage -> fp32 shared
/// memory with row pitch PITCH, 16 bytes per load, rows >= rows_valid zeroed.
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

/// Rung 02's score: scale * dot(Q row r, K row c), or -inf where masked.
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

/// Rung 03's kernel. Grid: (heads_q, batch); kThreads threads. Needs the
/// fa1_workspace_bytes() scratch.
template <int HEAD_DIM, class T>
__global__ void __launch_bounds__(Fa1Traits<HEAD_DIM>::kThreads) fa1_attention(AttnParams p) {
  using Tr = Fa1Traits<HEAD_DIM>;
  constexpr int BLOCK_M = Tr::kBlockM, BLOCK_N = Tr::kBlockN;

  extern __shared__ __align__(16) float smem[];
  float* Q_smem = smem;
  float* K_smem = Q_smem + Tr::kQFloats;
  float* V_smem = K_smem + Tr::kKFloats;
  float* S_smem = V_smem + Tr::kVFloats;     // S_ij, then P~_ij
  float* m_smem = S_smem + Tr::kSFloats;     // m_i of the current Q tile
  float* l_smem = m_smem + BLOCK_M;          // l_i
  float* c_old_smem = l_smem + BLOCK_M;      // l_i e^(m_i - m_new) / l_new: weight of the old O_i
  float* c_new_smem = c_old_smem + BLOCK_M;  // e^(m~ - m_new) / l_new: weight of P~ V_j

  const int h = blockIdx.x, b = blockIdx.y;
  const int h_kv = h / p.group;  // GQA: query head h reads KV head h / group
  const int num_q_tiles = (p.seqlen_q + BLOCK_M - 1) / BLOCK_M;
  const int num_kv_tiles = (p.seqlen_k + BLOCK_N - 1) / BLOCK_N;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;

  const T* Q_gmem = static_cast<const T*>(p.q) + b * p.q_batch_stride + h * p.q_head_stride;
  const T* K_gmem = static_cast<const T*>(p.k) + b * p.k_batch_stride + h_kv * p.k_head_stride;
  const T* V_gmem = static_cast<const T*>(p.v) + b * p.v_batch_stride + h_kv * p.v_head_stride;
  T* O_gmem = static_cast<T*>(p.o) + b * p.o_batch_stride + h * p.o_head_stride;
  // Row (b, h, 0) of the [batch, heads_q, seqlen_q] arrays: LSE and the workspace.
  const int64_t bh_row0 = (static_cast<int64_t>(b) * p.heads_q + h) * p.seqlen_q;
  const Fa1Workspace ws = fa1_workspace(p);

  // Thread tid owns output column c_out and rows r_out0, r_out0 + kRowStep, ...
  const int c_out = tid % HEAD_DIM, r_out0 = tid / HEAD_DIM;

  // ---- outer loop: K/V tiles ------------------------------------------------
  for (int j = 0; j < num_kv_tiles; ++j) {
    const int k0 = j * BLOCK_N;
    const int rows_k = min(BLOCK_N, p.seqlen_k - k0);
    const bool first_kv = (j == 0), last_kv = (j == num_kv_tiles - 1);
    __syncthreads();  // the previous K/V tile's readers are done
    load_tile<T, BLOCK_N, HEAD_DIM, Tr::kKPitch, Tr::kThreads>(K_gmem + k0 * p.k_row_stride,
                                                               p.k_row_stride, rows_k, K_smem);
    load_tile<T, BLOCK_N, HEAD_DIM, Tr::kVPitch, Tr::kThreads>(V_gmem + k0 * p.v_row_stride,
                                                               p.v_row_stride, rows_k, V_smem);

    // ---- inner loop: Q tiles --------------------------------------------------
    for (int i = 0; i < num_q_tiles; ++i) {
      const int q0 = i * BLOCK_M;
      const int rows_q = min(BLOCK_M, p.seqlen_q - q0);
      __syncthreads();  // the previous Q tile's readers of Q_smem, S_smem and the stats are done
      load_tile<T, BLOCK_M, HEAD_DIM, Tr::kQPitch, Tr::kThreads>(Q_gmem + q0 * p.q_row_stride,
                                                                 p.q_row_stride, rows_q, Q_smem);
      // m_i, l_i come back from HBM (or start empty on the first K/V tile).
      for (int r = tid; r < BLOCK_M; r += Tr::kThreads) {
        SoftmaxState s = softmax_init();
        if (!first_kv && r < rows_q) s = {ws.m[bh_row0 + q0 + r], ws.l[bh_row0 + q0 + r]};
        m_smem[r] = s.m;
        l_smem[r] = s.l;
      }
      // O_i comes back from HBM too; the loads are issued here to overlap the scores.
      float O_reg[Tr::kRowsPerThread];
#pragma unroll
      for (int e = 0; e < Tr::kRowsPerThread; ++e) {
        const int r = r_out0 + e * Tr::kRowStep;
        O_reg[e] = (!first_kv && r < rows_q) ? ws.O[(bh_row0 + q0 + r) * HEAD_DIM + c_out] : 0.f;
      }
      __syncthreads();

      // S_ij = scale Q_i K_j^T, masked (rung 02's mapping: one thread per score).
      // LAB-BEGIN(03-scores): S_ij = scale * Q_i K_j^T into S_smem, -inf where masked, as in lab 02
      // [copy-of: 02-scores]
#pragma unroll
      for (int e = 0; e < Tr::kScoresPerThread; ++e) {
        const int idx = tid + e * Tr::kThreads;
        const int r = idx / BLOCK_N, c = idx % BLOCK_N;
        S_smem[r * Tr::kSPitch + c] = score<Tr>(p, Q_smem, K_smem, r, c, q0 + r, k0 + c);
      }
      // LAB-END(03-scores)
      __syncthreads();

      // LAB-BEGIN(03-online-softmax): tile max m~, P~ = exp(S - m~), l~; merge into m_i, l_i
      // One warp per row. fl::softmax_merge returns the new (m, l) and the two
      // factors that move the old O_i and this tile's P~ V_j onto the new max.
      for (int r = warp; r < BLOCK_M; r += Tr::kWarps) {
        float m_tile = -INFINITY;
        for (int c = lane; c < BLOCK_N; c += 32)
          m_tile = fmaxf(m_tile, S_smem[r * Tr::kSPitch + c]);
        m_tile = warp_reduce(m_tile, [](float a, float c) { return fmaxf(a, c); });
        float l_tile = 0.f;
        for (int c = lane; c < BLOCK_N; c += 32) {
          const float p_tilde = exp_diff(S_smem[r * Tr::kSPitch + c], m_tile);  // 0 where masked
          S_smem[r * Tr::kSPitch + c] = p_tilde;
          l_tile += p_tilde;
        }
        l_tile = warp_reduce(l_tile, [](float a, float c) { return a + c; });
        if (lane == 0) {
          float alpha_old, alpha_tile;
          const float l_old = l_smem[r];
          const SoftmaxState s =
              softmax_merge({m_smem[r], l_old}, m_tile, l_tile, &alpha_old, &alpha_tile);
          // FA1 keeps O_i normalized: divide by l_new on every tile. A row that
          // has seen no key yet (l_new = 0) keeps O_i = 0.
          const float inv_l_new = softmax_inv_l(s);
          c_old_smem[r] = l_old * alpha_old * inv_l_new;
          c_new_smem[r] = alpha_tile * inv_l_new;
          m_smem[r] = s.m;
          l_smem[r] = s.l;
        }
      }
      // LAB-END(03-online-softmax)
      __syncthreads();

      // LAB-BEGIN(03-rescale-pv): O_i = c_old O_i + c_new P~ V_j for this thread's column
      // [copy-of: 02-pv]
#pragma unroll
      for (int e = 0; e < Tr::kRowsPerThread; ++e) {
        const int r = r_out0 + e * Tr::kRowStep;
        float pv = 0.f;
#pragma unroll 8
        for (int c = 0; c < BLOCK_N; ++c)
          pv += S_smem[r * Tr::kSPitch + c] * V_smem[c * Tr::kVPitch + c_out];
        O_reg[e] = c_old_smem[r] * O_reg[e] + c_new_smem[r] * pv;
      }
      // LAB-END(03-rescale-pv)

      // The round trip: O_i, m_i, l_i go back to HBM for the next K/V tile, or,
      // after the last one, O_i is final (already normalized) and goes out in 16 bits.
#pragma unroll
      for (int e = 0; e < Tr::kRowsPerThread; ++e) {
        const int r = r_out0 + e * Tr::kRowStep;
        if (r >= rows_q) continue;
        if (last_kv)
          O_gmem[(q0 + r) * p.o_row_stride + c_out] = from_float<T>(O_reg[e]);
        else
          ws.O[(bh_row0 + q0 + r) * HEAD_DIM + c_out] = O_reg[e];
      }
      for (int r = tid; r < rows_q; r += Tr::kThreads) {
        if (last_kv) {
          p.lse[bh_row0 + q0 + r] = softmax_lse({m_smem[r], l_smem[r]});
        } else {
          ws.m[bh_row0 + q0 + r] = m_smem[r];
          ws.l[bh_row0 + q0 + r] = l_smem[r];
        }
      }
    }
  }
}

}  // namespace fl::fa1
