/// @file steps/08_flash_decoding/kernel.cuh
/// @brief Rung 08: Flash-Decoding. Kernel 1 streams one slice (split) of the
/// KV sequence for a whole GQA group and writes a partial O and LSE; kernel 2
/// merges the splits by the log-sum-exp rule.
///
/// @code
///   // clang-format off
///   grid of kernel 1: (split, KV head x row tile, batch)
///
///       keys:  0 ........ L ........ 2L ........ 3L ... seqlen_k
///              |  split 0  |  split 1  |  split 2  | ...
///              v           v           v
///   CTA(s, kvh, b): the G x Sq query rows of KV head kvh (G = heads_q / heads_kv)
///                   against keys [s L, (s+1) L), each K/V row read once from HBM
///        for each chunk of BLOCK_N keys (cp.async, STAGES deep):
///            S = Q K_j^T            all rows x BLOCK_N keys   (CUDA cores, fp32)
///            online softmax         m_i, l_i per row
///            O_i = alpha O_i + P V_j
///        -> O_s = O_i / l_i (fp32), LSE_s = m_i + log l_i           (workspace)
///
///   kernel 2, one warp per output row:
///        LSE = log sum_s exp(LSE_s)     O = sum_s exp(LSE_s - LSE) O_s   -> O (16-bit), LSE
///   // clang-format on
/// @endcode
///
/// Decode is memory-bound: a query row does 4 d FLOPs per key but the key
/// costs 4 d bytes of K and V (16-bit), about 1 FLOP per byte where an H100
/// needs ~20 to become compute-bound on CUDA cores. So the scores and P V are
/// computed on CUDA cores (the tensor cores of rungs 05-06 would pad the few
/// rows of a decode step to 16 or 64); what matters is that every CTA keeps
/// enough K/V bytes in flight and that there are enough CTAs (the splits).
#pragma once

#include <math.h>
#include <stdint.h>

#include "flashladder/dtype.cuh"
#include "flashladder/problem.h"
#include "flashladder/ptx.cuh"
#include "flashladder/softmax_math.h"
#include "split_heuristic.h"

namespace fl::decode {

/// Tile constants of the split kernel for one head_dim and one row bucket.
/// ROWS (1, 2, 4, 8, 16) is how many query rows (heads of the GQA group x
/// query positions) one CTA carries; it is a compile-time constant so the
/// per-row accumulators live in registers.
template <int HEAD_DIM, int ROWS>
struct DecodeTraits {
  static constexpr int kHeadDim = HEAD_DIM;
  static constexpr int kRows = ROWS;
  static constexpr int kThreads = 128;
  static constexpr int kWarps = kThreads / 32;
  /// 16-bit elements per 16-byte load (one cp.async, one LDS.128).
  static constexpr int kVec = 8;
  /// Keys per chunk (BLOCK_N): about 16 KiB of K+V per chunk for both head_dims.
  static constexpr int kBlockN = HEAD_DIM >= 128 ? 32 : 64;
  /// Chunks in shared memory: STAGES - 1 are in flight while one is consumed.
  /// Decode needs bytes in flight, not reuse: 3 x 16 KiB per CTA, two or three
  /// CTAs per SM, keeps ~100 KiB per SM on the way from HBM.
  static constexpr int kStages = 4;
  /// Padding per K/V row in shared memory (elements). The row pitch becomes
  /// HEAD_DIM * 2 + 16 bytes, so 8 consecutive keys read at the same column by
  /// one LDS.128 phase start 4 banks apart: conflict-free.
  static constexpr int kSmemPad = 8;
  static constexpr int kSmemRow = HEAD_DIM + kSmemPad;

  /// S = Q K^T: thread owns one key of the chunk and a kQkDims-wide slice of
  /// head_dim, for every row; the kQkSlots partial dots are summed in softmax.
  static constexpr int kQkSlots = kThreads / kBlockN;
  static constexpr int kQkDims = HEAD_DIM / kQkSlots;
  /// O += P V: thread owns 2 output columns (one 32-bit load of V) for every
  /// row and every kPvSlots-th key; the slots' partial O are summed at the end.
  static constexpr int kPvCols = 2;
  static constexpr int kPvSlots = kThreads / (HEAD_DIM / kPvCols);
  /// Loader: kVecsPerRow threads copy one K row; kLoadPasses passes per chunk.
  static constexpr int kVecsPerRow = HEAD_DIM / kVec;
  static constexpr int kLoadRowsPerPass = kThreads / kVecsPerRow;
  static constexpr int kLoadPasses = kBlockN / kLoadRowsPerPass;
  /// Softmax: one warp per row, kKeysPerLane keys per lane.
  static constexpr int kKeysPerLane = kBlockN / 32;
  static constexpr int kRowsPerWarp = (kRows + kWarps - 1) / kWarps;

  /// Shared memory, in order: K stages, V stages (16-bit), Q (fp32, scaled),
  /// S/P (fp32), row statistics (alpha, 1/l, LSE). After the loop the K/V
  /// region is reused to sum the PV slots' partial O.
  static constexpr int kStageElems = kBlockN * kSmemRow;
  static constexpr size_t kKvBytes = 2ull * kStages * kStageElems * 2;
  static constexpr size_t kQBytes = static_cast<size_t>(kRows) * HEAD_DIM * 4;
  static constexpr size_t kSBytes = static_cast<size_t>(kQkSlots) * kRows * kBlockN * 4;
  static constexpr size_t kStatBytes = 3ull * kRows * 4;
  static constexpr size_t kReduceBytes = static_cast<size_t>(kPvSlots) * kRows * HEAD_DIM * 4;
  static constexpr size_t kSmemBytes = kKvBytes + kQBytes + kSBytes + kStatBytes;

  static_assert(HEAD_DIM % (kVec * kQkSlots) == 0, "each QK slot reads whole 16-byte vectors");
  static_assert(kThreads % kBlockN == 0, "QK: threads cover the chunk's keys evenly");
  static_assert(kThreads % (HEAD_DIM / kPvCols) == 0, "PV: threads cover the column pairs evenly");
  static_assert(kBlockN % kPvSlots == 0, "PV: slots cover the chunk's keys evenly");
  static_assert(kThreads % kVecsPerRow == 0 && kBlockN % kLoadRowsPerPass == 0,
                "loader: whole rows per pass, whole passes per chunk");
  static_assert(kBlockN % 32 == 0, "softmax: whole keys per lane");
  static_assert((kSmemRow * 2) % 16 == 0, "cp.async / LDS.128 need 16-byte aligned rows");
  static_assert(kKvBytes % 16 == 0 && kQBytes % 16 == 0, "float4 reads of Q need alignment");
  static_assert(kReduceBytes <= kKvBytes, "the O reduction reuses the K/V stages");
  static_assert(kRows >= 1 && kRows <= kMaxRowsPerCta && (kRows & (kRows - 1)) == 0,
                "row buckets are powers of two up to kMaxRowsPerCta");
  static_assert(kStages >= 2, "a pipeline needs at least two stages");
  static_assert(kSmemBytes <= 227 * 1024, "fits the H100/A100 opt-in shared memory per block");
};

/// What the launcher tells the kernels about the cut (see split_heuristic.h).
struct SplitArgs {
  int rows_total;   ///< query rows per (batch, KV head): group x seqlen_q
  int num_splits;   ///< splits launched (1: kernel 1 writes O and LSE itself)
  int split_len;    ///< keys per split
  float* o_part;    ///< [batch*heads_q*seqlen_q][num_splits][head_dim], normalized partial O
  float* lse_part;  ///< [batch*heads_q*seqlen_q][num_splits], natural-log partial LSE
};

/// Index of output row (b, h, i) in LSE [batch, heads_q, seqlen_q]; the
/// workspace uses the same row order.
__device__ __forceinline__ int64_t out_row(const AttnParams& p, int b, int h, int i) {
  return (static_cast<int64_t>(b) * p.heads_q + h) * p.seqlen_q + i;
}

/// Row of token @p n of sequence @p b in the K/V tensor. Contiguous: row n of
/// the batch's slice. Paged: the block table names the page, n % page_size is
/// the row inside it (the pool is [num_pages, page_size, heads_kv, head_dim]).
/// Per-row lookup, so any page size works with any chunk size.
__device__ __forceinline__ int64_t kv_token_row(const AttnParams& p, int b, int n) {
  if (p.page_size == 0) return n;
  const int page = p.block_table[static_cast<int64_t>(b) * p.block_table_stride + n / p.page_size];
  return static_cast<int64_t>(page) * p.page_size + n % p.page_size;
}

/// 8 16-bit values (one 16-byte load) -> 8 floats.
template <class T>
__device__ __forceinline__ void unpack8(const uint4& raw, float (&f)[8]) {
  const float2 a = unpack2<T>(raw.x), b = unpack2<T>(raw.y);
  const float2 c = unpack2<T>(raw.z), d = unpack2<T>(raw.w);
  f[0] = a.x;
  f[1] = a.y;
  f[2] = b.x;
  f[3] = b.y;
  f[4] = c.x;
  f[5] = c.y;
  f[6] = d.x;
  f[7] = d.y;
}

__device__ __forceinline__ float warp_max(float x) {
  for (int off = 16; off > 0; off /= 2) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, off));
  return x;
}
__device__ __forceinline__ float warp_sum(float x) {
  for (int off = 16; off > 0; off /= 2) x += __shfl_xor_sync(0xffffffffu, x, off);
  return x;
}

/// Kernel 1: CTA (split, kvh + heads_kv * row_tile, b) computes attention of
/// the rows [row0, row0 + ROWS) of KV head kvh's group against the keys of its
/// split. Row r of the group is query position i = r / group of query head
/// h = kvh * group + r % group, so the heads sharing this K/V are all served by
/// one read of it (GQA/MQA). Writes the normalized partial O and its LSE to
/// the workspace, or O and LSE directly when there is a single split.
template <class T, class Tr>
__global__ void __launch_bounds__(Tr::kThreads)
    split_kv_attention(const AttnParams p, const SplitArgs a) {
  constexpr int D = Tr::kHeadDim, R = Tr::kRows, BLOCK_N = Tr::kBlockN, VEC = Tr::kVec;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* K_smem = reinterpret_cast<T*>(smem_raw);          // [kStages][BLOCK_N][kSmemRow]
  T* V_smem = K_smem + Tr::kStages * Tr::kStageElems;  // [kStages][BLOCK_N][kSmemRow]
  float* Q_smem = reinterpret_cast<float*>(smem_raw + Tr::kKvBytes);  // [R][D], times scale
  float* S_smem = Q_smem + R * D;                           // [kQkSlots][R][BLOCK_N]; P in slot 0
  float* alpha_smem = S_smem + Tr::kQkSlots * R * BLOCK_N;  // [R] rescale of O this chunk
  float* inv_l_smem = alpha_smem + R;                       // [R]
  float* lse_smem = inv_l_smem + R;                         // [R]
  float* O_red_smem = reinterpret_cast<float*>(smem_raw);   // [kPvSlots][R][D], after the loop

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int split = blockIdx.x;
  const int kvh = blockIdx.y % p.heads_kv;
  const int row0 = (blockIdx.y / p.heads_kv) * R;
  const int b = blockIdx.z;
  const int rows = min(R, a.rows_total - row0);  // rows of this tile that exist

  // This split's keys. With a causal mask no row of the tile sees past the
  // last row's diagonal, so those keys are not even loaded.
  const int n_begin = static_cast<int>(static_cast<int64_t>(split) * a.split_len);
  int n_end = static_cast<int>(
      min(static_cast<int64_t>(p.seqlen_k), static_cast<int64_t>(n_begin) + a.split_len));
  if (p.causal) n_end = min(n_end, (row0 + rows - 1) / p.group + p.causal_offset + 1);
  const int num_chunks = n_end > n_begin ? (n_end - n_begin + BLOCK_N - 1) / BLOCK_N : 0;

  const T* K_gmem =
      static_cast<const T*>(p.k) + kvh * p.k_head_stride + (p.page_size ? 0 : b * p.k_batch_stride);
  const T* V_gmem =
      static_cast<const T*>(p.v) + kvh * p.v_head_stride + (p.page_size ? 0 : b * p.v_batch_stride);

  // Copies chunk c (keys n_begin + c*BLOCK_N ...) into stage st with cp.async.
  // Keys past n_end are zero-filled: their P is 0, and 0 * V must not be NaN.
  auto load_chunk = [&](int c, int st) {
    const int v = tid % Tr::kVecsPerRow;  // this thread's 16-byte column
#pragma unroll
    for (int pass = 0; pass < Tr::kLoadPasses; ++pass) {
      const int j = tid / Tr::kVecsPerRow + pass * Tr::kLoadRowsPerPass;  // key in the chunk
      const int n = n_begin + c * BLOCK_N + j;
      const bool valid = n < n_end;
      const int64_t t = valid ? kv_token_row(p, b, n) : 0;
      const int smem_off = st * Tr::kStageElems + j * Tr::kSmemRow + v * VEC;
      ptx::cp_async_16(ptx::smem_addr(K_smem + smem_off), K_gmem + t * p.k_row_stride + v * VEC,
                       valid ? 16 : 0);
      ptx::cp_async_16(ptx::smem_addr(V_smem + smem_off), V_gmem + t * p.v_row_stride + v * VEC,
                       valid ? 16 : 0);
    }
  };

  // Start the pipeline first so the Q load below overlaps the first K/V bytes.
  // A group is committed even when empty, so "chunk c landed" is always
  // "all but the newest kStages - 1 groups are done".
#pragma unroll
  for (int st = 0; st < Tr::kStages - 1; ++st) {
    if (st < num_chunks) load_chunk(st, st);
    ptx::cp_async_commit();
  }

  // Q rows of the tile, times softmax_scale, as fp32 (zeros for missing rows).
  for (int e = tid; e < R * Tr::kVecsPerRow; e += Tr::kThreads) {
    const int r = e / Tr::kVecsPerRow, v = e % Tr::kVecsPerRow;
    float q[VEC] = {};
    if (r < rows) {
      const int row = row0 + r, i = row / p.group, h = kvh * p.group + row % p.group;
      const T* q_gmem = static_cast<const T*>(p.q) + b * p.q_batch_stride + i * p.q_row_stride +
                        h * p.q_head_stride + v * VEC;
      unpack8<T>(*reinterpret_cast<const uint4*>(q_gmem), q);
#pragma unroll
      for (int k = 0; k < VEC; ++k) q[k] *= p.softmax_scale;
    }
    float4* dst = reinterpret_cast<float4*>(Q_smem + r * D + v * VEC);
    dst[0] = make_float4(q[0], q[1], q[2], q[3]);
    dst[1] = make_float4(q[4], q[5], q[6], q[7]);
  }

  // Running softmax state of the rows this warp owns (r = warp + k * kWarps).
  SoftmaxState state[Tr::kRowsPerWarp];
#pragma unroll
  for (int k = 0; k < Tr::kRowsPerWarp; ++k) state[k] = softmax_init();
  float O_reg[R][Tr::kPvCols] = {};  // unnormalized O_i: 2 columns x all rows

  for (int c = 0; c < num_chunks; ++c) {
    const int st = c % Tr::kStages;
    // Refill the stage chunk c - 1 used (freed by the barrier that ended it).
    const int next = c + Tr::kStages - 1;
    if (next < num_chunks) load_chunk(next, next % Tr::kStages);
    ptx::cp_async_commit();
    ptx::cp_async_wait<Tr::kStages - 1>();
    __syncthreads();  // chunk c is in shared memory for every thread (and Q, at c = 0)

    const int n0 = n_begin + c * BLOCK_N;
    const T* K_j = K_smem + st * Tr::kStageElems;
    const T* V_j = V_smem + st * Tr::kStageElems;

    // LAB-BEGIN(08-split-chunk): scores, online softmax and P V for one chunk of the split
    // (1) S = Q K_j^T: each thread one key, one slice of head_dim, every row.
    {
      const int j = tid % BLOCK_N, slot = tid / BLOCK_N, d0 = slot * Tr::kQkDims;
      float s[R] = {};
#pragma unroll
      for (int v = 0; v < Tr::kQkDims / VEC; ++v) {
        float k[VEC];
        unpack8<T>(*reinterpret_cast<const uint4*>(K_j + j * Tr::kSmemRow + d0 + v * VEC), k);
#pragma unroll
        for (int r = 0; r < R; ++r) {  // Q reads are warp-wide broadcasts
          const float4 qa = *reinterpret_cast<const float4*>(Q_smem + r * D + d0 + v * VEC);
          const float4 qb = *reinterpret_cast<const float4*>(Q_smem + r * D + d0 + v * VEC + 4);
          s[r] = fmaf(qa.x, k[0], fmaf(qa.y, k[1], fmaf(qa.z, k[2], fmaf(qa.w, k[3], s[r]))));
          s[r] = fmaf(qb.x, k[4], fmaf(qb.y, k[5], fmaf(qb.z, k[6], fmaf(qb.w, k[7], s[r]))));
        }
      }
#pragma unroll
      for (int r = 0; r < R; ++r) S_smem[(slot * R + r) * BLOCK_N + j] = s[r];
    }
    __syncthreads();

    // (2) Online softmax, one warp per row: mask, block max, rescale factor
    // alpha = exp(m_old - m_new), P = exp(S - m_new), l += sum P.
#pragma unroll
    for (int k = 0; k < Tr::kRowsPerWarp; ++k) {
      const int r = warp + k * Tr::kWarps;
      if (r < R) {
        const int i = (row0 + r) / p.group;  // query position of this row
        float s[Tr::kKeysPerLane];
        float m_block = -INFINITY;
#pragma unroll
        for (int t = 0; t < Tr::kKeysPerLane; ++t) {
          const int j = lane + 32 * t, n = n0 + j;
          float x = 0.f;
#pragma unroll
          for (int slot = 0; slot < Tr::kQkSlots; ++slot) x += S_smem[(slot * R + r) * BLOCK_N + j];
          const bool visible = r < rows && n < n_end && (!p.causal || n <= i + p.causal_offset);
          s[t] = visible ? x : -INFINITY;
          m_block = fmaxf(m_block, s[t]);
        }
        const float alpha = softmax_rescale(&state[k], warp_max(m_block));
        float l_block = 0.f;
#pragma unroll
        for (int t = 0; t < Tr::kKeysPerLane; ++t) {
          const float p_ij = exp_diff(s[t], state[k].m);  // 0 for masked keys
          S_smem[r * BLOCK_N + lane + 32 * t] = p_ij;
          l_block += p_ij;
        }
        state[k].l += warp_sum(l_block);
        if (lane == 0) alpha_smem[r] = alpha;
      }
    }
    __syncthreads();

    // (3) O_i = alpha O_i + P V_j: each thread 2 columns of every row, over
    // every kPvSlots-th key of the chunk (P reads are broadcasts).
    {
      const int cp = tid % (D / Tr::kPvCols), slot = tid / (D / Tr::kPvCols);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const float alpha = alpha_smem[r];
        O_reg[r][0] *= alpha;
        O_reg[r][1] *= alpha;
      }
#pragma unroll 4
      for (int j = slot; j < BLOCK_N; j += Tr::kPvSlots) {
        const float2 v =
            unpack2<T>(*reinterpret_cast<const uint32_t*>(V_j + j * Tr::kSmemRow + cp * 2));
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const float p_ij = S_smem[r * BLOCK_N + j];
          O_reg[r][0] = fmaf(p_ij, v.x, O_reg[r][0]);
          O_reg[r][1] = fmaf(p_ij, v.y, O_reg[r][1]);
        }
      }
    }
    // LAB-END(08-split-chunk)
    __syncthreads();  // S and this stage are overwritten next iteration
  }
  ptx::cp_async_wait<0>();  // only empty groups can be left; be explicit anyway
  __syncthreads();          // K/V stages are free: reuse them for the O reduction

  // Sum the PV slots' partial O; normalize by l (the split's own softmax).
  {
    const int cp = tid % (D / Tr::kPvCols), slot = tid / (D / Tr::kPvCols);
#pragma unroll
    for (int r = 0; r < R; ++r)
      *reinterpret_cast<float2*>(O_red_smem + (slot * R + r) * D + cp * 2) =
          make_float2(O_reg[r][0], O_reg[r][1]);
  }
#pragma unroll
  for (int k = 0; k < Tr::kRowsPerWarp; ++k) {
    const int r = warp + k * Tr::kWarps;
    if (r < R && lane == 0) {
      inv_l_smem[r] = softmax_inv_l(state[k]);  // 0 when the row saw no key: O = 0
      lse_smem[r] = softmax_lse(state[k]);      // -inf when the row saw no key
    }
  }
  __syncthreads();

  for (int e = tid; e < rows * D; e += Tr::kThreads) {
    const int r = e / D, col = e % D;
    float o = 0.f;
#pragma unroll
    for (int slot = 0; slot < Tr::kPvSlots; ++slot) o += O_red_smem[(slot * R + r) * D + col];
    o *= inv_l_smem[r];
    const int row = row0 + r, i = row / p.group, h = kvh * p.group + row % p.group;
    if (a.num_splits == 1) {
      T* o_gmem =
          static_cast<T*>(p.o) + b * p.o_batch_stride + i * p.o_row_stride + h * p.o_head_stride;
      o_gmem[col] = from_float<T>(o);
    } else {
      a.o_part[(out_row(p, b, h, i) * a.num_splits + split) * D + col] = o;
    }
  }
  for (int r = tid; r < rows; r += Tr::kThreads) {
    const int row = row0 + r, i = row / p.group, h = kvh * p.group + row % p.group;
    if (a.num_splits == 1)
      p.lse[out_row(p, b, h, i)] = lse_smem[r];
    else
      a.lse_part[out_row(p, b, h, i) * a.num_splits + split] = lse_smem[r];
  }
}

/// Threads per CTA of the combine kernel (one warp per output row).
constexpr int kCombineThreads = 128;

/// Kernel 2: merges the splits of one output row (b, h, i) per warp.
/// Split s holds O_s = softmax over its keys times V, and LSE_s = log of its
/// sum of exp(scores). The whole row's LSE is log sum_s exp(LSE_s) and
/// O = sum_s exp(LSE_s - LSE) O_s: each split weighs by its share of the total
/// softmax mass (seed 002, section 3.3, written with LSE instead of m and l).
template <class T, int HEAD_DIM>
__global__ void __launch_bounds__(kCombineThreads)
    combine_splits(const AttnParams p, const SplitArgs a) {
  constexpr int kColsPerLane = HEAD_DIM / 32;
  static_assert(HEAD_DIM % 32 == 0, "a warp covers head_dim in whole columns per lane");
  const int lane = threadIdx.x % 32;
  const int64_t g = static_cast<int64_t>(blockIdx.x) * (kCombineThreads / 32) + threadIdx.x / 32;
  if (g >= static_cast<int64_t>(p.batch) * p.heads_q * p.seqlen_q) return;
  const int i = static_cast<int>(g % p.seqlen_q);
  const int h = static_cast<int>((g / p.seqlen_q) % p.heads_q);
  const int b = static_cast<int>(g / (static_cast<int64_t>(p.seqlen_q) * p.heads_q));
  const float* lse_s = a.lse_part + g * a.num_splits;
  const float* O_s = a.o_part + g * a.num_splits * HEAD_DIM;

  // LAB-BEGIN(08-lse-combine): merge the partial outputs by their log-sum-exp
  const float lse = lse_reduce(lse_s, a.num_splits);  // -inf if no split saw a key
  float o[kColsPerLane] = {};
  for (int s = 0; s < a.num_splits; ++s) {
    const float w = lse_weight(lse_s[s], lse);  // 0 for a split whose keys were all masked
#pragma unroll
    for (int k = 0; k < kColsPerLane; ++k)
      o[k] = fmaf(w, O_s[static_cast<int64_t>(s) * HEAD_DIM + lane + 32 * k], o[k]);
  }
  // LAB-END(08-lse-combine)

  T* o_gmem =
      static_cast<T*>(p.o) + b * p.o_batch_stride + i * p.o_row_stride + h * p.o_head_stride;
#pragma unroll
  for (int k = 0; k < kColsPerLane; ++k) o_gmem[lane + 32 * k] = from_float<T>(o[k]);
  if (lane == 0) p.lse[g] = lse;
}

}  // namespace fl::decode
