/// @file steps/04_fa2/kernel.cuh
/// @brief Rung 04: FlashAttention-2 on CUDA cores (fp32 FFMA, no tensor cores).
///
/// What changes from rung 03 (FlashAttention-1):
///  - loop order: a CTA owns one Q tile and walks K/V tiles in its inner loop,
///    so O_i, m_i and l_i live in registers from start to end (no HBM round trip);
///  - deferred rescaling: O_i is kept unnormalized and divided by l_i once, at
///    the end; the sum l_i is even kept as per-thread partial sums until then;
///  - parallelism: the grid is batch x heads x Q tiles, not batch x heads;
///  - warps split the Q rows: a warp owns 16 rows of S, P and O, so the P
///    exchange stays inside the warp (no inter-warp reduction, no __syncthreads);
///  - causal: K/V tiles above the diagonal are skipped, only tiles crossing the
///    diagonal (or the K tail) are masked;
///  - exp2 with log2(e) folded into the scale (Q is pre-multiplied on load);
///  - register tiling: each thread computes a 4 x TN micro-tile of S and a
///    4 x TD micro-tile of O with FFMAs fed by 16-byte shared-memory loads.
///
/// @code
///   // clang-format off
///   CTA (b, h, i): 4 warps, warp w owns query rows 16w .. 16w+15 of Q_i
///
///   Q_i * scale*log2(e) ──> Q_smem (fp32)         O_i, m_i, l_i: registers
///   for j = 0 .. last tile the Q tile can see (causal: skip the rest):
///       K_j, V_j ──> K_smem, V_smem   (prefetched in registers during tile j-1)
///       S   = Q_i K_j^T               4 x TN micro-tile per thread, FFMA
///       mask only if tile j crosses the diagonal or the end of K
///       m_new = max(m_i, rowmax S);  P = exp2(S - m_new)
///       l_i = 2^(m_i - m_new) l_i + rowsum P     (partial, per thread)
///       O_i = 2^(m_i - m_new) O_i + P V_j        P via the warp's rows of P_smem
///   O_i / l_i ──> O (16-bit);   m_i ln 2 + ln l_i ──> LSE
///
///   lanes of a warp (lane = 8 lane_row + lane_col):
///          keys lane_col, lane_col+8, ...      dims 4 lane_col .. +3, +32, ...
///   rows   ┌─────────────────────────┐         ┌──────────────────────┐
///   lr+4t  │ S micro-tile 4 x TN     │  P ──>  │ O micro-tile 4 x TD  │
///          └─────────────────────────┘         └──────────────────────┘
///   // clang-format on
/// @endcode
///
/// This file is the lesson, top to bottom: traits, thread map, loaders, the
/// four steps of one (Q tile, K/V tile) visit, the epilogue and the kernel.
/// The ablation variants, which put FA1's pieces back one at a time to measure
/// what each change is worth (`--variant fa1-rescale`, `bh-grid`, ...), are
/// built from these same functions in ablations.cuh; none of their switches
/// appear here.
#pragma once

#include <math.h>
#include <stdint.h>

#include "flashladder/dtype.cuh"
#include "flashladder/problem.h"
#include "flashladder/softmax_math.h"

namespace fl::fa2 {

/// Tile shapes and thread layout of rung 04 for one head_dim (elements).
template <int HEAD_DIM>
struct Fa2Traits {
  static constexpr int kHeadDim = HEAD_DIM;
  /// Query rows per CTA (the Q tile).
  static constexpr int kBlockM = 64;
  /// Keys per K/V tile. d=128 halves it: O's micro-tile doubles (4 x 16 fp32
  /// registers) and Q_smem doubles, so two CTAs (8 warps) still fit on an SM.
  static constexpr int kBlockN = HEAD_DIM <= 64 ? 64 : 32;
  static constexpr int kWarps = 4;
  static constexpr int kThreads = 32 * kWarps;
  /// CTAs per SM we ask the register allocator for (__launch_bounds__):
  /// 65536 / (128 x this) registers per thread at most, and shared memory allows it.
  static constexpr int kMinCtasPerSm = HEAD_DIM == 32 ? 4 : (HEAD_DIM == 64 ? 3 : 2);

  // A warp owns kRowsPerWarp query rows; its 32 lanes form a 4 x 8 grid.
  static constexpr int kRowsPerWarp = kBlockM / kWarps;
  static constexpr int kLaneRows = 4;
  static constexpr int kLaneCols = 8;
  /// Micro-tiles per thread: rows of S and O, keys of S, dims of O.
  static constexpr int kThreadRows = kRowsPerWarp / kLaneRows;
  static constexpr int kThreadKeys = kBlockN / kLaneCols;
  static constexpr int kThreadDims = HEAD_DIM / kLaneCols;
  /// Output dims are taken 4 at a time (one float4), 32 apart.
  static constexpr int kDimChunks = kThreadDims / 4;

  /// Q_smem and K_smem row pitch. A multiple of 4 floats for float4 loads along
  /// the head dim, and = 4 (mod 32) so the 8 consecutive keys (or 4 consecutive
  /// rows) read by one instruction start in different 4-bank groups.
  static constexpr int kQKPitch = HEAD_DIM + 4;
  /// V is read along rows (all lanes: one key, 32 consecutive dims): no padding.
  static constexpr int kVPitch = HEAD_DIM;
  /// P_smem pitch = 8 (mod 32): the scalar P stores of a warp (4 consecutive
  /// rows x 8 consecutive keys) land in 32 different banks.
  static constexpr int kPPitch = kBlockN + 8;

  // Shared-memory layout, in floats: Q | K | V | P.
  static constexpr int kQFloats = kBlockM * kQKPitch;
  static constexpr int kKFloats = kBlockN * kQKPitch;
  static constexpr int kVFloats = kBlockN * kVPitch;
  static constexpr int kPFloats = kBlockM * kPPitch;
  static constexpr size_t kSmemBytes = sizeof(float) * (kQFloats + kKFloats + kVFloats + kPFloats);

  /// 16-byte chunks (8 elements) of a K or V tile, and per thread.
  static constexpr int kChunksPerRow = HEAD_DIM / 8;
  static constexpr int kTileChunks = kBlockN * kChunksPerRow;
  static constexpr int kChunksPerThread = kTileChunks / kThreads;

  static_assert(HEAD_DIM % 32 == 0, "output dims are 4 per lane_col in chunks of 32");
  static_assert(kLaneRows * kLaneCols == 32, "a warp is a 4 x 8 grid of lanes");
  static_assert(kThreadRows * kLaneRows * kWarps == kBlockM,
                "rows split evenly over lanes and warps");
  static_assert(kThreadKeys * kLaneCols == kBlockN, "keys split evenly over lane_cols");
  static_assert(kBlockN % 4 == 0, "P is read 4 keys at a time (float4)");
  static_assert(kQKPitch % 4 == 0 && kQKPitch % 32 == 4,
                "Q/K pitch: float4-aligned, 4 banks apart");
  static_assert(kPPitch % 4 == 0 && kPPitch % 32 == 8, "P pitch: float4-aligned, 8 banks apart");
  static_assert(kTileChunks % kThreads == 0, "K/V chunks split evenly over the threads");
  static_assert(kSmemBytes <= 163 * 1024, "tiles must fit in an A100's shared memory");
};

/// Where a thread sits: its warp owns kRowsPerWarp rows; inside the warp the
/// lane is (lane_row, lane_col) of a 4 x 8 grid.
template <class Tr>
struct ThreadMap {
  int warp, lane_row, lane_col;

  __device__ __forceinline__ ThreadMap()
      : warp(threadIdx.x / 32),
        lane_row((threadIdx.x % 32) / Tr::kLaneCols),
        lane_col(threadIdx.x % Tr::kLaneCols) {}
  /// Tile row of the thread's t-th row. Rows are interleaved (lane_row + 4t) so
  /// one float4 load by the 4 lane_rows touches 4 consecutive rows: 4 bank groups.
  __device__ __forceinline__ int row(int t) const {
    return warp * Tr::kRowsPerWarp + lane_row + Tr::kLaneRows * t;
  }
  /// Tile key of the thread's n-th score column (interleaved: 8 consecutive keys per instruction).
  __device__ __forceinline__ int key(int n) const { return lane_col + Tr::kLaneCols * n; }
  /// First of the 4 consecutive output dims of chunk c (8 lanes x 16 B = 128 contiguous bytes).
  __device__ __forceinline__ int dim(int c) const { return 32 * c + 4 * lane_col; }
};

/// What a thread carries for its rows through the K/V loop (registers).
/// m is in the log2 domain (scores are pre-multiplied by scale * log2 e); l is
/// this thread's partial sum over its keys (deferred: the row's 8 partial sums
/// are added once, in write_output).
template <class Tr>
struct RowState {
  float O[Tr::kThreadRows][Tr::kThreadDims];
  float m[Tr::kThreadRows];
  float l[Tr::kThreadRows];
};

/// Component i (0..3, a compile-time constant after unrolling) of a float4.
__device__ __forceinline__ float component(const float4& v, int i) {
  return i == 0 ? v.x : (i == 1 ? v.y : (i == 2 ? v.z : v.w));
}

/// Reduces over the 8 lanes that share a lane_row (lane_col is the low 3 bits
/// of the lane): those lanes hold the same rows, so this completes a row.
template <class Tr, class Op>
__device__ __forceinline__ float reduce_lane_cols(float x, Op op) {
#pragma unroll
  for (int offset = Tr::kLaneCols / 2; offset > 0; offset /= 2)
    x = op(x, __shfl_xor_sync(0xffffffffu, x, offset));
  return x;
}

/// Converts 8 elements of 16-bit storage (one 16-byte word) to floats,
/// multiplied by @p scale, and stores them as two float4.
template <class T>
__device__ __forceinline__ void store_chunk(uint4 raw, float scale, float* dst_smem) {
  const float2 a = unpack2<T>(raw.x), b = unpack2<T>(raw.y);
  const float2 c = unpack2<T>(raw.z), d = unpack2<T>(raw.w);
  reinterpret_cast<float4*>(dst_smem)[0] =
      make_float4(a.x * scale, a.y * scale, b.x * scale, b.y * scale);
  reinterpret_cast<float4*>(dst_smem)[1] =
      make_float4(c.x * scale, c.y * scale, d.x * scale, d.y * scale);
}

/// Q_i -> Q_smem, multiplied by softmax_scale * log2(e) once here, so every
/// score comes out in the log2 domain and the softmax can use exp2 directly.
/// Rows >= rows_valid are zero-filled (never stored: the tail is masked on output).
template <class Tr, class T>
__device__ __forceinline__ void load_q_tile(const T* Q_gmem, int64_t row_stride, int rows_valid,
                                            float scale_log2, float* Q_smem) {
  for (int idx = threadIdx.x; idx < Tr::kBlockM * Tr::kChunksPerRow; idx += Tr::kThreads) {
    const int r = idx / Tr::kChunksPerRow, c = (idx % Tr::kChunksPerRow) * 8;
    const uint4 raw = r < rows_valid ? *reinterpret_cast<const uint4*>(Q_gmem + r * row_stride + c)
                                     : make_uint4(0, 0, 0, 0);
    store_chunk<T>(raw, scale_log2, Q_smem + r * Tr::kQKPitch + c);
  }
}

/// One K/V tile in flight: 16-byte global loads land in registers (fetch) and
/// are converted to fp32 shared memory later (store), so the loads of tile j+1
/// overlap the math of tile j. Consecutive threads read consecutive 16 bytes
/// of a row (coalesced); rows past the end of K/V are zeros.
template <class Tr, class T>
struct KvTile {
  uint4 k[Tr::kChunksPerThread];
  uint4 v[Tr::kChunksPerThread];

  __device__ __forceinline__ void fetch(const T* K_gmem, const T* V_gmem, const AttnParams& p,
                                        int k0) {
    const int rows_valid = min(Tr::kBlockN, p.seqlen_k - k0);
#pragma unroll
    for (int e = 0; e < Tr::kChunksPerThread; ++e) {
      const int idx = threadIdx.x + e * Tr::kThreads;
      const int r = idx / Tr::kChunksPerRow, c = (idx % Tr::kChunksPerRow) * 8;
      const bool ok = r < rows_valid;
      const int64_t key = k0 + r;
      k[e] = ok ? *reinterpret_cast<const uint4*>(K_gmem + key * p.k_row_stride + c)
                : make_uint4(0, 0, 0, 0);
      v[e] = ok ? *reinterpret_cast<const uint4*>(V_gmem + key * p.v_row_stride + c)
                : make_uint4(0, 0, 0, 0);
    }
  }

  __device__ __forceinline__ void store(float* K_smem, float* V_smem) const {
#pragma unroll
    for (int e = 0; e < Tr::kChunksPerThread; ++e) {
      const int idx = threadIdx.x + e * Tr::kThreads;
      const int r = idx / Tr::kChunksPerRow, c = (idx % Tr::kChunksPerRow) * 8;
      store_chunk<T>(k[e], 1.f, K_smem + r * Tr::kQKPitch + c);
      store_chunk<T>(v[e], 1.f, V_smem + r * Tr::kVPitch + c);
    }
  }
};

/// Number of K/V tiles Q tile q0 must visit: all of them, or (causal) those up
/// to the last key its last row sees. Tiles after that are skipped entirely.
template <class Tr>
__device__ __forceinline__ int visible_kv_tiles(const AttnParams& p, int q0) {
  const int num_kv_tiles = (p.seqlen_k + Tr::kBlockN - 1) / Tr::kBlockN;
  if (!p.causal) return num_kv_tiles;
  const int last_key = min(q0 + Tr::kBlockM, p.seqlen_q) - 1 + p.causal_offset;
  return last_key < 0 ? 0 : min(num_kv_tiles, last_key / Tr::kBlockN + 1);
}

/// True if some (row, key) of tile (q0, k0) is masked: the tile runs past the
/// end of K, or (causal) its last key is beyond what the tile's first row sees.
template <class Tr>
__device__ __forceinline__ bool tile_needs_mask(const AttnParams& p, int q0, int k0) {
  return k0 + Tr::kBlockN > p.seqlen_k || (p.causal && k0 + Tr::kBlockN - 1 > q0 + p.causal_offset);
}

template <class Tr>
__device__ __forceinline__ void init_row_state(RowState<Tr>& st) {
#pragma unroll
  for (int t = 0; t < Tr::kThreadRows; ++t) {
    st.m[t] = -INFINITY;
    st.l[t] = 0.f;
#pragma unroll
    for (int d = 0; d < Tr::kThreadDims; ++d) st.O[t][d] = 0.f;
  }
}

/// S = Q_i K_j^T for the thread's kThreadRows x kThreadKeys micro-tile. Per 4
/// head dims: kThreadRows + kThreadKeys 16-byte loads feed 4 x rows x keys FFMAs.
template <class Tr>
__device__ __forceinline__ void compute_scores(const float* Q_smem, const float* K_smem,
                                               const ThreadMap<Tr>& tm,
                                               float (&S)[Tr::kThreadRows][Tr::kThreadKeys]) {
  // LAB-BEGIN(04-scores): S = Q_i K_j^T on the thread's micro-tile (float4 loads, FFMA)
#pragma unroll
  for (int t = 0; t < Tr::kThreadRows; ++t)
#pragma unroll
    for (int n = 0; n < Tr::kThreadKeys; ++n) S[t][n] = 0.f;
      // Not unrolled: one iteration already holds rows x keys x 4 independent FFMAs
      // (128 at d=64). Unrolling by 2 or 4 made ptxas hoist loads and spill under
      // the __launch_bounds__ register cap (d=32: 80 B, d=64: 28 B of spill stores).
#pragma unroll 1
  for (int k = 0; k < Tr::kHeadDim; k += 4) {
    float4 q[Tr::kThreadRows];
#pragma unroll
    for (int t = 0; t < Tr::kThreadRows; ++t)
      q[t] = *reinterpret_cast<const float4*>(Q_smem + tm.row(t) * Tr::kQKPitch + k);
#pragma unroll
    for (int n = 0; n < Tr::kThreadKeys; ++n) {
      const float4 kk = *reinterpret_cast<const float4*>(K_smem + tm.key(n) * Tr::kQKPitch + k);
#pragma unroll
      for (int t = 0; t < Tr::kThreadRows; ++t) {
        S[t][n] = fmaf(q[t].x, kk.x, S[t][n]);
        S[t][n] = fmaf(q[t].y, kk.y, S[t][n]);
        S[t][n] = fmaf(q[t].z, kk.z, S[t][n]);
        S[t][n] = fmaf(q[t].w, kk.w, S[t][n]);
      }
    }
  }
  // LAB-END(04-scores)
}

/// -inf where key k0 + key is past the end of K or hidden by the causal mask.
/// Called only for tiles on the diagonal or at the K tail.
template <class Tr>
__device__ __forceinline__ void mask_scores(const AttnParams& p, const ThreadMap<Tr>& tm, int q0,
                                            int k0, float (&S)[Tr::kThreadRows][Tr::kThreadKeys]) {
#pragma unroll
  for (int t = 0; t < Tr::kThreadRows; ++t) {
    const int row = q0 + tm.row(t);
#pragma unroll
    for (int n = 0; n < Tr::kThreadKeys; ++n) {
      const int key = k0 + tm.key(n);
      if (key >= p.seqlen_k || (p.causal && key > row + p.causal_offset)) S[t][n] = -INFINITY;
    }
  }
}

/// FA2's online-softmax step (log2 domain): exponentiate against the new max
/// directly, rescale the old O and l by alpha = 2^(m_old - m_new), and leave
/// the division by l for the very end. l stays a per-thread partial sum.
/// (The natural-log twin of this step is fl::softmax_rescale.)
template <class Tr>
__device__ __forceinline__ void online_softmax_fa2(float (&S)[Tr::kThreadRows][Tr::kThreadKeys],
                                                   RowState<Tr>& st) {
  // LAB-BEGIN(04-online-softmax): m_new, alpha = 2^(m - m_new), P = 2^(S - m_new), rescale l, O
#pragma unroll
  for (int t = 0; t < Tr::kThreadRows; ++t) {
    float m_tile = -INFINITY;
#pragma unroll
    for (int n = 0; n < Tr::kThreadKeys; ++n) m_tile = fmaxf(m_tile, S[t][n]);
    m_tile = reduce_lane_cols<Tr>(m_tile, [](float a, float b) { return fmaxf(a, b); });
    const float m_new = fmaxf(st.m[t], m_tile);
    // A row that has seen only masked keys keeps m = -inf; subtracting 0 instead
    // gives exp2(-inf) = 0 for its P and alpha rather than exp2(-inf + inf) = NaN.
    const float m_base = (m_new == -INFINITY) ? 0.f : m_new;
    const float alpha = exp2f(st.m[t] - m_base);
    st.m[t] = m_new;
    float l_tile = 0.f;
#pragma unroll
    for (int n = 0; n < Tr::kThreadKeys; ++n) {
      S[t][n] = exp2f(S[t][n] - m_base);
      l_tile += S[t][n];
    }
    st.l[t] = alpha * st.l[t] + l_tile;
#pragma unroll
    for (int d = 0; d < Tr::kThreadDims; ++d) st.O[t][d] *= alpha;
  }
  // LAB-END(04-online-softmax)
}

/// O_i += P V_j. The thread holds P for its keys only; the PV product needs its
/// rows for all keys, which the other 7 lanes of its lane_row hold. They swap
/// through the warp's own rows of P_smem: only the warp touches them, so a
/// __syncwarp is enough (warps split Q rows: no inter-warp traffic at all).
template <class Tr>
__device__ __forceinline__ void accumulate_pv(const float (&P)[Tr::kThreadRows][Tr::kThreadKeys],
                                              float* P_smem, const float* V_smem,
                                              const ThreadMap<Tr>& tm, RowState<Tr>& st) {
  // LAB-BEGIN(04-pv): P -> the warp's rows of P_smem, __syncwarp, O_i += P V_j
#pragma unroll
  for (int t = 0; t < Tr::kThreadRows; ++t)
#pragma unroll
    for (int n = 0; n < Tr::kThreadKeys; ++n) P_smem[tm.row(t) * Tr::kPPitch + tm.key(n)] = P[t][n];
  __syncwarp();
#pragma unroll 2
  for (int j = 0; j < Tr::kBlockN; j += 4) {
    float4 p4[Tr::kThreadRows];
#pragma unroll
    for (int t = 0; t < Tr::kThreadRows; ++t)
      p4[t] = *reinterpret_cast<const float4*>(P_smem + tm.row(t) * Tr::kPPitch + j);
#pragma unroll
    for (int jj = 0; jj < 4; ++jj) {
#pragma unroll
      for (int c = 0; c < Tr::kDimChunks; ++c) {
        const float4 v =
            *reinterpret_cast<const float4*>(V_smem + (j + jj) * Tr::kVPitch + tm.dim(c));
#pragma unroll
        for (int t = 0; t < Tr::kThreadRows; ++t) {
          const float p = component(p4[t], jj);
          st.O[t][4 * c + 0] = fmaf(p, v.x, st.O[t][4 * c + 0]);
          st.O[t][4 * c + 1] = fmaf(p, v.y, st.O[t][4 * c + 1]);
          st.O[t][4 * c + 2] = fmaf(p, v.z, st.O[t][4 * c + 2]);
          st.O[t][4 * c + 3] = fmaf(p, v.w, st.O[t][4 * c + 3]);
        }
      }
    }
  }
  __syncwarp();  // the warp's P rows may be overwritten by the next tile
  // LAB-END(04-pv)
}

/// One (Q tile, K/V tile) step: scores, mask (diagonal / tail tiles only),
/// online softmax, P V.
template <class Tr, bool kMask>
__device__ __forceinline__ void attend_tile(const AttnParams& p, const float* Q_smem,
                                            const float* K_smem, const float* V_smem, float* P_smem,
                                            const ThreadMap<Tr>& tm, int q0, int k0,
                                            RowState<Tr>& st) {
  float S[Tr::kThreadRows][Tr::kThreadKeys];
  compute_scores<Tr>(Q_smem, K_smem, tm, S);
  if constexpr (kMask) mask_scores<Tr>(p, tm, q0, k0, S);
  online_softmax_fa2<Tr>(S, st);
  accumulate_pv<Tr>(S, P_smem, V_smem, tm, st);
}

/// Epilogue: O_i / l_i in 16 bits (8-byte stores of 4 dims) and LSE = m ln2 + ln l.
/// A row that saw no key has l = 0: O = 0 and LSE = -inf (fl::softmax_inv_l / softmax_lse).
template <class Tr, class T>
__device__ __forceinline__ void write_output(const AttnParams& p, const ThreadMap<Tr>& tm, int b,
                                             int h, int q0, const RowState<Tr>& st) {
  // The deferred part of l: the 8 partial sums of a lane_row added once, by
  // all lanes, before any row is skipped.
  float l_row[Tr::kThreadRows];
#pragma unroll
  for (int t = 0; t < Tr::kThreadRows; ++t)
    l_row[t] = reduce_lane_cols<Tr>(st.l[t], [](float a, float b) { return a + b; });
  T* O_gmem = static_cast<T*>(p.o) + b * p.o_batch_stride + h * p.o_head_stride;
  const int64_t lse_row0 = (static_cast<int64_t>(b) * p.heads_q + h) * p.seqlen_q;
#pragma unroll
  for (int t = 0; t < Tr::kThreadRows; ++t) {
    const int row = q0 + tm.row(t);
    if (row >= p.seqlen_q) continue;
    const SoftmaxState s{st.m[t] / kLog2e, l_row[t]};  // back to natural-log units
    const float inv_l = softmax_inv_l(s);              // the one division of the row
#pragma unroll
    for (int c = 0; c < Tr::kDimChunks; ++c) {
      const float* o = &st.O[t][4 * c];
      const uint2 packed =
          make_uint2(pack2<T>(o[0] * inv_l, o[1] * inv_l), pack2<T>(o[2] * inv_l, o[3] * inv_l));
      *reinterpret_cast<uint2*>(O_gmem + row * p.o_row_stride + tm.dim(c)) = packed;
    }
    if (tm.lane_col == 0) p.lse[lse_row0 + row] = softmax_lse(s);
  }
}

/// Rung 04's kernel. Grid: (Q tiles, heads_q, batch), one Q tile per CTA;
/// Tr::kThreads threads; Tr::kSmemBytes of dynamic shared memory.
template <class Tr, class T>
__global__ void __launch_bounds__(Tr::kThreads, Tr::kMinCtasPerSm) fa2_forward(AttnParams p) {
  constexpr int BLOCK_M = Tr::kBlockM, BLOCK_N = Tr::kBlockN;
  extern __shared__ __align__(16) float smem[];
  float* Q_smem = smem;
  float* K_smem = Q_smem + Tr::kQFloats;
  float* V_smem = K_smem + Tr::kKFloats;
  float* P_smem = V_smem + Tr::kVFloats;

  const int i = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int h_kv = h / p.group;  // GQA: query head h reads KV head h / group
  const int q0 = i * BLOCK_M;
  const ThreadMap<Tr> tm;

  const T* Q_gmem = static_cast<const T*>(p.q) + b * p.q_batch_stride + h * p.q_head_stride;
  const T* K_gmem = static_cast<const T*>(p.k) + b * p.k_batch_stride + h_kv * p.k_head_stride;
  const T* V_gmem = static_cast<const T*>(p.v) + b * p.v_batch_stride + h_kv * p.v_head_stride;

  // ---- the Q tile is this CTA's for good: staged once, O_i, m_i, l_i in registers
  load_q_tile<Tr, T>(Q_gmem + q0 * p.q_row_stride, p.q_row_stride, min(BLOCK_M, p.seqlen_q - q0),
                     p.scale_log2, Q_smem);
  RowState<Tr> st;
  init_row_state(st);

  // ---- the K/V loop: FA2's inner loop (its outer loop over Q tiles is the grid)
  KvTile<Tr, T> kv;
  const int num_kv = visible_kv_tiles<Tr>(p, q0);  // causal: tiles above the diagonal skipped
  if (num_kv > 0) kv.fetch(K_gmem, V_gmem, p, 0);
  for (int j = 0; j < num_kv; ++j) {
    const int k0 = j * BLOCK_N;
    __syncthreads();  // every warp is done with K_{j-1}, V_{j-1} (and Q_smem is complete)
    kv.store(K_smem, V_smem);
    __syncthreads();
    if (j + 1 < num_kv) kv.fetch(K_gmem, V_gmem, p, k0 + BLOCK_N);  // in flight during tile j
    if (tile_needs_mask<Tr>(p, q0, k0))
      attend_tile<Tr, true>(p, Q_smem, K_smem, V_smem, P_smem, tm, q0, k0, st);
    else
      attend_tile<Tr, false>(p, Q_smem, K_smem, V_smem, P_smem, tm, q0, k0, st);
  }
  write_output<Tr, T>(p, tm, b, h, q0, st);
}

}  // namespace fl::fa2
