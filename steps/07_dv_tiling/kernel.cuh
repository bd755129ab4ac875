/// @file steps/07_dv_tiling/kernel.cuh
/// @brief Rung 07: the register-spill study (a course note, docs/sources.md). One
/// query row per thread, q_i and O_i held in registers, K staged in shared memory,
/// V read from global.
///
/// @code
///   // clang-format off
///   block = BLOCK_M threads = BLOCK_M query rows          thread t owns row i = row0 + t
///
///   registers of one thread:  Q_reg [HEAD_DIM floats]      (q_i * softmax_scale)
///                             O_reg [DV_TILE  floats]      (one tile of the output row)
///
///   for each DV tile  [dv0, dv0 + DV_TILE)        <- untiled: one tile, DV_TILE = HEAD_DIM
///     for each K tile  K_j  (BLOCK_N rows)        -> K_smem, shared by the BLOCK_M rows
///       for 8 keys at a time:
///         s   = Q_reg . K_smem[j]                 (whole head_dim: recomputed per DV tile)
///         m_i, l_i, O_reg rescaled                (online softmax, softmax_math.h)
///         O_reg += p * V[j][dv0 : dv0+DV_TILE]    (V straight from global, a warp-wide broadcast)
///     O[i][dv0 : dv0+DV_TILE] = O_reg / l_i
///   // clang-format on
/// @endcode
///
/// At head_dim 128 the untiled kernel wants 128 + 128 floats of q and O plus the
/// scores and addresses: more than the 255 registers a thread may have, so ptxas
/// spills to local memory. DV tiling keeps only DV_TILE floats of O live, at the
/// price of reading K again and recomputing S for every tile. The split-d kernel at
/// the end is the alternative the course note called "complex": THREADS_PER_ROW threads
/// share a row, each holding HEAD_DIM / THREADS_PER_ROW of q and O, and add their
/// partial dot products with warp shuffles.
#pragma once

#include <math.h>
#include <stdint.h>

#include "flashladder/dtype.cuh"
#include "flashladder/problem.h"
#include "flashladder/softmax_math.h"

namespace fl::dv_tiling {

/// 16-bit elements in one 16-byte vector load or store.
constexpr int kVec = 8;
/// Keys scored before one online-softmax rescale of O_i: the rescale costs
/// DV_TILE multiplies, so doing it once per 8 keys instead of per key keeps it
/// small, and 8 scores are only 8 registers.
constexpr int kKeyStep = 8;

/// Tile constants of the DV-tiled kernel.
template <class T_, int HEAD_DIM_, int DV_TILE_, int BLOCK_M_, int BLOCK_N_>
struct DvTraits {
  using T = T_;                                            ///< __half or __nv_bfloat16
  static constexpr int HEAD_DIM = HEAD_DIM_;               ///< q and k length
  static constexpr int DV_TILE = DV_TILE_;                 ///< output columns per pass over K/V
  static constexpr int NUM_DV_TILES = HEAD_DIM / DV_TILE;  ///< passes over K/V
  static constexpr int BLOCK_M = BLOCK_M_;                 ///< query rows per block
  static constexpr int BLOCK_N = BLOCK_N_;                 ///< K rows per shared-memory tile
  static constexpr int THREADS = BLOCK_M;                  ///< one query row per thread
  /// K_smem holds fp32: converted once when staged instead of BLOCK_M times when read.
  static constexpr int SMEM_BYTES = BLOCK_N * HEAD_DIM * static_cast<int>(sizeof(float));

  static_assert(HEAD_DIM % kVec == 0, "rows are loaded 16 bytes at a time");
  static_assert(HEAD_DIM % DV_TILE == 0, "DV_TILE must divide head_dim");
  static_assert(DV_TILE % kVec == 0, "O tiles are stored 16 bytes at a time");
  static_assert(BLOCK_N % kKeyStep == 0, "a K tile holds whole key steps");
  static_assert(BLOCK_M % 32 == 0, "whole warps per block");
  static_assert(SMEM_BYTES <= 48 * 1024, "K_smem must fit the 48 KiB static limit");
};

/// Tile constants of the split-d kernel (THREADS_PER_ROW threads per query row).
template <class T_, int HEAD_DIM_, int BLOCK_M_, int BLOCK_N_, int THREADS_PER_ROW_>
struct SplitDTraits {
  using T = T_;
  static constexpr int HEAD_DIM = HEAD_DIM_;
  static constexpr int BLOCK_M = BLOCK_M_;
  static constexpr int BLOCK_N = BLOCK_N_;
  static constexpr int THREADS_PER_ROW = THREADS_PER_ROW_;
  static constexpr int THREADS = BLOCK_M * THREADS_PER_ROW;
  /// float4 chunks of q and O each thread owns.
  static constexpr int CHUNKS = HEAD_DIM / 4 / THREADS_PER_ROW;
  static constexpr int SMEM_BYTES = BLOCK_N * HEAD_DIM * static_cast<int>(sizeof(float));

  static_assert(32 % THREADS_PER_ROW == 0, "a row's threads must sit in one warp (shuffles)");
  static_assert(HEAD_DIM % (4 * THREADS_PER_ROW) == 0, "whole float4 chunks per thread");
  static_assert(BLOCK_N % kKeyStep == 0, "a K tile holds whole key steps");
  static_assert(THREADS % 32 == 0 && THREADS <= 1024, "whole warps, at most 1024 threads");
  static_assert(SMEM_BYTES <= 48 * 1024, "K_smem must fit the 48 KiB static limit");
};

// ---- small helpers ----------------------------------------------------------

/// Eight 16-bit values (one 16-byte load) -> two float4.
template <class T>
__device__ __forceinline__ void unpack8(const uint4& raw, float4* lo, float4* hi) {
  const float2 a = unpack2<T>(raw.x), b = unpack2<T>(raw.y);
  const float2 c = unpack2<T>(raw.z), d = unpack2<T>(raw.w);
  *lo = make_float4(a.x, a.y, b.x, b.y);
  *hi = make_float4(c.x, c.y, d.x, d.y);
}

/// Four 16-bit values (one 8-byte load) -> float4.
template <class T>
__device__ __forceinline__ float4 unpack4(const uint2& raw) {
  const float2 a = unpack2<T>(raw.x), b = unpack2<T>(raw.y);
  return make_float4(a.x, a.y, b.x, b.y);
}

/// acc + a . b
__device__ __forceinline__ float dot4(const float4& a, const float4& b, float acc) {
  acc = fmaf(a.x, b.x, acc);
  acc = fmaf(a.y, b.y, acc);
  acc = fmaf(a.z, b.z, acc);
  return fmaf(a.w, b.w, acc);
}

/// y += a * x
__device__ __forceinline__ void axpy4(float4* y, float a, const float4& x) {
  y->x = fmaf(a, x.x, y->x);
  y->y = fmaf(a, x.y, y->y);
  y->z = fmaf(a, x.z, y->z);
  y->w = fmaf(a, x.w, y->w);
}

/// y *= a
__device__ __forceinline__ void scale4(float4* y, float a) {
  y->x *= a;
  y->y *= a;
  y->z *= a;
  y->w *= a;
}

/// Keys query row @p i sees: [0, n). Causal is bottom-right aligned (j <= i + offset).
__device__ __forceinline__ int visible_keys(const AttnParams& p, int i) {
  if (!p.causal) return p.seqlen_k;
  return min(p.seqlen_k, max(0, i + p.causal_offset + 1));
}

/// Copies K rows [n0, n0 + BLOCK_N) of one head into K_smem as fp32, 16 bytes per
/// load (consecutive threads read consecutive bytes of a row: coalesced). Rows past
/// seqlen_k are zero; their scores are masked anyway.
template <class T, int HEAD_DIM, int BLOCK_N, int THREADS>
__device__ __forceinline__ void stage_k_tile(float4 (*K_smem)[HEAD_DIM / 4], const T* K_gmem,
                                             int64_t row_stride, int n0, int seqlen_k) {
  constexpr int VECS_PER_ROW = HEAD_DIM / kVec;
#pragma unroll 4
  for (int v = threadIdx.x; v < BLOCK_N * VECS_PER_ROW; v += THREADS) {
    const int r = v / VECS_PER_ROW, c = v % VECS_PER_ROW;
    float4 lo = make_float4(0.f, 0.f, 0.f, 0.f), hi = lo;
    if (n0 + r < seqlen_k) {
      const uint4 raw = __ldg(reinterpret_cast<const uint4*>(K_gmem + (n0 + r) * row_stride) + c);
      unpack8<T>(raw, &lo, &hi);
    }
    K_smem[r][2 * c] = lo;
    K_smem[r][2 * c + 1] = hi;
  }
}

// ---- the DV-tiled kernel (untiled when DV_TILE == HEAD_DIM) --------------------

/// Grid (ceil(seqlen_q / BLOCK_M), heads_q, batch); BLOCK_M threads, one query row each.
template <class Tr>
__global__ void __launch_bounds__(Tr::THREADS) dv_tiled_fwd(const AttnParams p) {
  using T = typename Tr::T;
  constexpr int D4 = Tr::HEAD_DIM / 4;  // float4 per q row
  constexpr int DV4 = Tr::DV_TILE / 4;  // float4 per O tile
  __shared__ float4 K_smem[Tr::BLOCK_N][D4];

  const int b = blockIdx.z, h = blockIdx.y;
  const int h_kv = h / p.group;  // GQA: query head h reads KV head h / group
  const int row0 = blockIdx.x * Tr::BLOCK_M;
  const int i = row0 + threadIdx.x;  // this thread's query row
  const bool row_valid = i < p.seqlen_q;
  const int n_keys_i = row_valid ? visible_keys(p, i) : 0;
  // The block stages keys up to its last row's limit: under causal masking the
  // K tiles right of the diagonal are never loaded (causal block skipping).
  const int n_keys_block = visible_keys(p, min(row0 + Tr::BLOCK_M, p.seqlen_q) - 1);

  const T* K_gmem = static_cast<const T*>(p.k) + b * p.k_batch_stride + h_kv * p.k_head_stride;
  const T* V_gmem = static_cast<const T*>(p.v) + b * p.v_batch_stride + h_kv * p.v_head_stride;

  // q_i lives in registers for the whole kernel, pre-multiplied by softmax_scale so a
  // score is one dot product. It stays there because every DV tile reuses it.
  float4 Q_reg[D4];
  if (row_valid) {
    const uint4* q_vec =
        reinterpret_cast<const uint4*>(static_cast<const T*>(p.q) + b * p.q_batch_stride +
                                       i * p.q_row_stride + h * p.q_head_stride);
#pragma unroll
    for (int c = 0; c < D4 / 2; ++c) {
      unpack8<T>(q_vec[c], &Q_reg[2 * c], &Q_reg[2 * c + 1]);
      scale4(&Q_reg[2 * c], p.softmax_scale);
      scale4(&Q_reg[2 * c + 1], p.softmax_scale);
    }
  } else {
#pragma unroll
    for (int c = 0; c < D4; ++c) Q_reg[c] = make_float4(0.f, 0.f, 0.f, 0.f);
  }

  // One pass over K/V per output tile. The tile loop is not unrolled: each pass
  // is the same code with another V column offset.
#pragma unroll 1
  for (int dv0 = 0; dv0 < Tr::HEAD_DIM; dv0 += Tr::DV_TILE) {
    float4 O_reg[DV4];  // only DV_TILE floats of O_i are live: the point of this rung
#pragma unroll
    for (int c = 0; c < DV4; ++c) O_reg[c] = make_float4(0.f, 0.f, 0.f, 0.f);
    SoftmaxState st = softmax_init();  // m_i, l_i: recomputed identically by every pass

    for (int n0 = 0; n0 < n_keys_block; n0 += Tr::BLOCK_N) {
      __syncthreads();  // every thread is done with the previous K tile
      stage_k_tile<T, Tr::HEAD_DIM, Tr::BLOCK_N, Tr::THREADS>(K_smem, K_gmem, p.k_row_stride, n0,
                                                              p.seqlen_k);
      __syncthreads();

      const int n_valid = n_keys_i - n0;  // keys of this tile row i sees (may be <= 0)
#pragma unroll 1
      for (int j0 = 0; j0 < Tr::BLOCK_N && j0 < n_valid; j0 += kKeyStep) {
        // LAB-BEGIN(07-scores): s[kk] = Q_reg . K_smem[j0 + kk] for 8 keys, masked past n_valid
        float s[kKeyStep];
#pragma unroll
        for (int kk = 0; kk < kKeyStep; ++kk) s[kk] = 0.f;
          // Column chunk outer, key inner: each chunk of q is used for 8 keys in a row.
          // All threads read the same K_smem address: a broadcast, no bank conflict.
#pragma unroll
        for (int c = 0; c < D4; ++c) {
#pragma unroll
          for (int kk = 0; kk < kKeyStep; ++kk) s[kk] = dot4(Q_reg[c], K_smem[j0 + kk][c], s[kk]);
        }
        float m_step = -INFINITY;
#pragma unroll
        for (int kk = 0; kk < kKeyStep; ++kk) {
          if (j0 + kk >= n_valid) s[kk] = -INFINITY;  // tail or causal mask
          m_step = fmaxf(m_step, s[kk]);
        }
        // LAB-END(07-scores)

        // LAB-BEGIN(07-online-softmax): rescale O_reg by exp(m_old - m_new), then O_reg += p * V_j
        const float alpha = softmax_rescale(&st, m_step);
#pragma unroll
        for (int c = 0; c < DV4; ++c) scale4(&O_reg[c], alpha);
#pragma unroll
        for (int kk = 0; kk < kKeyStep; ++kk) {
          const float p_ij = exp_diff(s[kk], st.m);  // 0 for masked keys
          st.l += p_ij;
          // A masked key has p_ij = 0; clamping keeps its (unused) V address in bounds.
          const int key = min(n0 + j0 + kk, p.seqlen_k - 1);
          // Every thread of the warp reads the same V row: one broadcast transaction.
          const uint4* v_vec = reinterpret_cast<const uint4*>(V_gmem + key * p.v_row_stride + dv0);
#pragma unroll
          for (int c = 0; c < DV4 / 2; ++c) {
            float4 lo, hi;
            unpack8<T>(__ldg(v_vec + c), &lo, &hi);
            axpy4(&O_reg[2 * c], p_ij, lo);
            axpy4(&O_reg[2 * c + 1], p_ij, hi);
          }
        }
        // LAB-END(07-online-softmax)
      }
    }

    // Epilogue of this tile: normalize once (FA2's deferred 1/l_i) and store.
    if (row_valid) {
      const float inv_l = softmax_inv_l(st);  // 0 for a row that saw no key: O = 0
      uint4* o_vec = reinterpret_cast<uint4*>(static_cast<T*>(p.o) + b * p.o_batch_stride +
                                              i * p.o_row_stride + h * p.o_head_stride + dv0);
#pragma unroll
      for (int c = 0; c < DV4 / 2; ++c) {
        const float4 lo = O_reg[2 * c], hi = O_reg[2 * c + 1];
        o_vec[c] =
            make_uint4(pack2<T>(lo.x * inv_l, lo.y * inv_l), pack2<T>(lo.z * inv_l, lo.w * inv_l),
                       pack2<T>(hi.x * inv_l, hi.y * inv_l), pack2<T>(hi.z * inv_l, hi.w * inv_l));
      }
      if (dv0 == 0)  // every pass computes the same m_i, l_i; the first one writes LSE
        p.lse[(static_cast<int64_t>(b) * p.heads_q + h) * p.seqlen_q + i] = softmax_lse(st);
    }
  }
}

// ---- split-d: the note's "complex" alternative ------------------------------------

/// Grid (ceil(seqlen_q / BLOCK_M), heads_q, batch); BLOCK_M * THREADS_PER_ROW threads.
/// Thread r of a row owns the float4 chunks r, r + THREADS_PER_ROW, ... of q and O, so
/// the row's threads read neighbouring 16-byte pieces of K_smem and V (no bank
/// conflicts) and each holds HEAD_DIM / THREADS_PER_ROW floats of q and of O.
template <class Tr>
__global__ void __launch_bounds__(Tr::THREADS) split_d_fwd(const AttnParams p) {
  using T = typename Tr::T;
  constexpr int D4 = Tr::HEAD_DIM / 4;
  constexpr int TPR = Tr::THREADS_PER_ROW;
  __shared__ float4 K_smem[Tr::BLOCK_N][D4];

  const int b = blockIdx.z, h = blockIdx.y;
  const int h_kv = h / p.group;
  const int row0 = blockIdx.x * Tr::BLOCK_M;
  const int i = row0 + threadIdx.x / TPR;
  const int part = threadIdx.x % TPR;  // which slice of the row this thread holds
  const bool row_valid = i < p.seqlen_q;
  const int n_keys_i = row_valid ? visible_keys(p, i) : 0;
  const int n_keys_block = visible_keys(p, min(row0 + Tr::BLOCK_M, p.seqlen_q) - 1);

  const T* K_gmem = static_cast<const T*>(p.k) + b * p.k_batch_stride + h_kv * p.k_head_stride;
  const T* V_gmem = static_cast<const T*>(p.v) + b * p.v_batch_stride + h_kv * p.v_head_stride;

  float4 Q_reg[Tr::CHUNKS];
  if (row_valid) {
    const uint2* q_vec =
        reinterpret_cast<const uint2*>(static_cast<const T*>(p.q) + b * p.q_batch_stride +
                                       i * p.q_row_stride + h * p.q_head_stride);
#pragma unroll
    for (int c = 0; c < Tr::CHUNKS; ++c) {
      Q_reg[c] = unpack4<T>(q_vec[c * TPR + part]);
      scale4(&Q_reg[c], p.softmax_scale);
    }
  } else {
#pragma unroll
    for (int c = 0; c < Tr::CHUNKS; ++c) Q_reg[c] = make_float4(0.f, 0.f, 0.f, 0.f);
  }

  float4 O_reg[Tr::CHUNKS];
#pragma unroll
  for (int c = 0; c < Tr::CHUNKS; ++c) O_reg[c] = make_float4(0.f, 0.f, 0.f, 0.f);
  SoftmaxState st = softmax_init();

  for (int n0 = 0; n0 < n_keys_block; n0 += Tr::BLOCK_N) {
    __syncthreads();
    stage_k_tile<T, Tr::HEAD_DIM, Tr::BLOCK_N, Tr::THREADS>(K_smem, K_gmem, p.k_row_stride, n0,
                                                            p.seqlen_k);
    __syncthreads();

    const int n_valid = n_keys_i - n0;
#pragma unroll 1
    for (int j0 = 0; j0 < Tr::BLOCK_N; j0 += kKeyStep) {
      // The shuffles need every lane of the warp, so the exit is decided warp-wide:
      // rows already past their last key keep going with fully masked scores.
      if (!__any_sync(0xffffffffu, j0 < n_valid)) break;

      float s[kKeyStep];
      float m_step = -INFINITY;
      // LAB-BEGIN(07-split-d-scores): partial dots over this thread's chunks, then a shuffle sum
#pragma unroll
      for (int kk = 0; kk < kKeyStep; ++kk) s[kk] = 0.f;
#pragma unroll
      for (int c = 0; c < Tr::CHUNKS; ++c) {
#pragma unroll
        for (int kk = 0; kk < kKeyStep; ++kk)
          s[kk] = dot4(Q_reg[c], K_smem[j0 + kk][c * TPR + part], s[kk]);
      }
      // Butterfly over the TPR neighbouring lanes of a row: every one gets the full sum.
#pragma unroll
      for (int kk = 0; kk < kKeyStep; ++kk) {
#pragma unroll
        for (int offset = TPR / 2; offset > 0; offset /= 2)
          s[kk] += __shfl_xor_sync(0xffffffffu, s[kk], offset);
      }
#pragma unroll
      for (int kk = 0; kk < kKeyStep; ++kk) {
        if (j0 + kk >= n_valid) s[kk] = -INFINITY;
        m_step = fmaxf(m_step, s[kk]);
      }
      // LAB-END(07-split-d-scores)

      // The row's TPR threads hold identical scores, so they keep identical m_i, l_i.
      // LAB-BEGIN(07-split-d-softmax): 07-online-softmax on this thread's chunks of O_reg and V
      // [same-code: 07-online-softmax]
      const float alpha = softmax_rescale(&st, m_step);
#pragma unroll
      for (int c = 0; c < Tr::CHUNKS; ++c) scale4(&O_reg[c], alpha);
#pragma unroll
      for (int kk = 0; kk < kKeyStep; ++kk) {
        const float p_ij = exp_diff(s[kk], st.m);
        st.l += p_ij;
        const int key = min(n0 + j0 + kk, p.seqlen_k - 1);
        const uint2* v_vec = reinterpret_cast<const uint2*>(V_gmem + key * p.v_row_stride);
#pragma unroll
        for (int c = 0; c < Tr::CHUNKS; ++c)
          axpy4(&O_reg[c], p_ij, unpack4<T>(__ldg(v_vec + c * TPR + part)));
      }
      // LAB-END(07-split-d-softmax)
    }
  }

  if (row_valid) {
    const float inv_l = softmax_inv_l(st);
    uint2* o_vec = reinterpret_cast<uint2*>(static_cast<T*>(p.o) + b * p.o_batch_stride +
                                            i * p.o_row_stride + h * p.o_head_stride);
#pragma unroll
    for (int c = 0; c < Tr::CHUNKS; ++c) {
      const float4 o = O_reg[c];
      o_vec[c * TPR + part] =
          make_uint2(pack2<T>(o.x * inv_l, o.y * inv_l), pack2<T>(o.z * inv_l, o.w * inv_l));
    }
    if (part == 0)
      p.lse[(static_cast<int64_t>(b) * p.heads_q + h) * p.seqlen_q + i] = softmax_lse(st);
  }
}

}  // namespace fl::dv_tiling
