/// @file steps/11_backward/kernel.cuh
/// @brief Rung 11: the FlashAttention-2 backward pass on tensor cores (mma.sync, sm_80+).
///
/// Three kernels, as in the FlashAttention-2 paper (Dao, 2023, §3.1.2, Algorithm 2):
/// @code
///   // clang-format off
///   1. preprocess   D_q = rowsum(dO_q ∘ O_q) (fp32, from the forward's fp32 O when it left
///                   one: AttnParams::o_fp32), or on long rows D_q = rowsum(P ∘ dP) / rowsum(P) by
///                   a pass of kernel 2 (delta_policy.h, modes.cuh); the fp32 dQ accumulator zeroed
///   2. main         one block per (K/V block j, KV head, group slice, batch): K_j, V_j in
///                   shared memory, dK_j, dV_j in registers; for every query head of its slice
///                   of the group and every Q block i that sees block j:
///                     S   = Q_i K_jᵀ                 (recomputed, not stored by the forward)
///                     P   = exp(scale S − LSE_i)      (the forward's LSE: no second softmax)
///                     dP  = dO_i V_jᵀ
///                     dS  = P ∘ (dP − D_i)
///                     dV_j += Pᵀ dO_i
///                     dK_j += dSᵀ Q_i                (scaled once at the end)
///                     dQ_i += dS K_j                 (fp32 atomics, or a per-split buffer
///                                                     when deterministic)
///   3. convert      dQ = scale · Σ_splits accumulator, to 16 bits; with a split group, also
///                   dK = scale · Σ_slices, dV = Σ_slices of the slices' fp32 partial sums
///   // clang-format on
/// @endcode
///
/// GQA: the query heads of a KV head all add into the same dK_j, dV_j. One block per KV head
/// would divide the grid by the group size (16 query heads on 4 KV heads: a quarter of the
/// blocks, and under a causal mask the longest block four times longer), so the group is split
/// into kv_split slices (workspace.h's kv_splits: the smallest divisor of the group that gives the
/// grid kSplitTargetBlocks blocks), each slice's block writes its partial dK_j, dV_j in fp32, and
/// the convert kernel adds the slices in index order (deterministic). FlashAttention-2 always splits
/// down to one query head per block (its `dk_expanded`); the `fullsplit` variant does that, the
/// `nosplit` variant never splits.
///
/// D's precision: every row of dS = P ∘ (dP − D) sums to zero only if D = Σ_j P_ij dP_ij for the P
/// this pass recomputes, and then dQ_i = scale Σ_j dS_ij K_j is a small difference of large terms.
/// FlashAttention-2 takes D = rowsum(dO ∘ O) from the 16-bit O the forward returned; any error δ
/// in D adds −scale δ Σ_j P_ij K_j to dQ_i, a term no row cancels, and it grows against dQ as a row
/// sees more keys. Two things put δ there: O's 16-bit rounding, and the forward's accumulation of O
/// over the whole row (its tensor-core sums drift with the row's length: at 100k keys O in fp32 is
/// off by 2e-4, D by 3e-3; its LSE leaves Σ_j P_ij off 1 by 1e-4). delta_policy.h says which D the
/// rung takes: the forward's fp32 O (AttnParams::o_fp32) on rows up to kExactDeltaKeys keys, an
/// exact pass of this kernel (DELTA_PASS: S, P and dP again, Σ P ∘ dP / Σ P on the CUDA cores) on
/// longer ones; the `o16-delta`, `o32-delta` and `exact-delta` variants take one source always.
///
/// Launch order: under a causal mask the blocks are unequal (K/V block j sees the Q blocks from
/// the diagonal on), so the longest go first: every (KV head, slice, batch) of K/V block 0, then
/// of block 1, and so on (the grid's x is the head, z the K/V block), and the short ones fill the
/// last wave, as FlashAttention-3's longest-processing-time-first schedule does. The `inorder`
/// variant keeps the K/V block as x (FlashAttention-2's order), where a long block may start in
/// the last wave.
///
/// The five GEMMs do not share one warp layout: S and dP have queries as rows, dV and dK keys,
/// dQ queries again. Each gets its own 2D grid of warps (BwdTiles, FlashAttention-2's
/// `AtomLayoutMSdP` / `AtomLayoutNdKV` / `AtomLayoutMdQ`), with warp tiles of 32 rows, and P and
/// dS change hands through shared memory (16-bit, [query][key]); dV and dK read them back
/// transposed with `ldmatrix.trans`. The three GEMM shapes are gemm_sdp, gemm_dkv and gemm_dq.
///
/// This file is the lesson: the three kernels with dQ by fp32 atomics. The modes that change where
/// a sum goes or its order (the deterministic dQ, the split group's partial dK, dV and their
/// convert kernel, the stagger order, the exact D pass's row sums and its kernel) are in
/// modes.cuh, called from the main kernel where it branches (each call marked `modes.cuh`); the
/// workspace's layout and split counts in workspace.h (plain C++); the launches in launch.cu.
#pragma once

#include <math.h>
#include <stdint.h>

#include "flashladder/backward.h"
#include "flashladder/dtype.cuh"
#include "flashladder/problem.h"
#include "flashladder/ptx.cuh"
#include "modes.cuh"

namespace fl::bwd {

/// Threads of the preprocess kernel (one warp per query row).
constexpr int kPrepWarps = 4;
constexpr int kPrepThreads = 32 * kPrepWarps;

/// rowsum(dO ∘ O) of query row @p q of head @p h, batch @p b, summed by one warp (@p lane): from the
/// forward's fp32 O when it left one (dense [batch, seqlen_q, heads_q, d]), else from the 16-bit O
/// (FlashAttention-2's D; see "D's precision" above). Every lane returns the sum. Rung 14's
/// statistics kernel calls it too.
template <class T, int D>
__device__ __forceinline__ float row_delta(const AttnBwdParams& P, int b, int q, int h, int lane) {
  const AttnParams& p = P.fwd;
  const int64_t off = b * p.o_batch_stride + q * p.o_row_stride + h * p.o_head_stride;
  const T* dout = static_cast<const T*>(P.dout) + off;
  const float* o32 = p.o_fp32 ? p.o_fp32 + ((static_cast<int64_t>(b) * p.seqlen_q + q) * p.heads_q + h) * p.dv() : nullptr;
  const T* o = static_cast<const T*>(p.o) + off;
  float sum = 0.f;
  for (int c = 2 * lane; c < D && c < p.dv(); c += 64) {  // rung 16: O's head_dim (V's) below the tile's D
    const float2 a = o32 ? *reinterpret_cast<const float2*>(o32 + c)
                         : unpack2<T>(*reinterpret_cast<const uint32_t*>(o + c));
    const float2 g = unpack2<T>(*reinterpret_cast<const uint32_t*>(dout + c));
    sum += a.x * g.x + a.y * g.y;
  }
#pragma unroll
  for (int s = 16; s > 0; s >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, s);
  return sum;
}

/// D = rowsum(dO ∘ O) per (batch, head, query) and the dQ accumulator(s) zeroed: one warp per row.
/// With @p delta_splits > 0 (the exact pass follows, delta_policy.h) D is not computed here: the
/// pass's @p delta_splits accumulator pairs ([splits][2][rows] from @p delta_acc) are zeroed instead
/// (modes.cuh: zero_delta_sums).
template <class T, int D>
__global__ void __launch_bounds__(kPrepThreads)
    bwd_preprocess_kernel(const AttnBwdParams P, float* d_rowsum, float* dq_acc, int splits, float* delta_acc,
                          int delta_splits) {
  const AttnParams& p = P.fwd;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kPrepWarps + threadIdx.x / 32;
  const int64_t rows = static_cast<int64_t>(p.batch) * p.heads_q * p.seqlen_q;
  if (row >= rows) return;
  const int lane = threadIdx.x % 32;
  const int q = static_cast<int>(row % p.seqlen_q);
  const int h = static_cast<int>((row / p.seqlen_q) % p.heads_q);
  const int b = static_cast<int>(row / (static_cast<int64_t>(p.seqlen_q) * p.heads_q));
  // The accumulator is [splits][batch, seqlen_q, heads_q, d], contiguous.
  const int64_t acc_row = ((static_cast<int64_t>(b) * p.seqlen_q + q) * p.heads_q + h) * D;
  const int64_t split_elems = static_cast<int64_t>(p.batch) * p.seqlen_q * p.heads_q * D;
  for (int s = 0; s < splits; ++s)
    for (int c = lane; c < D; c += 32) dq_acc[s * split_elems + acc_row + c] = 0.f;
  const int64_t stat = (static_cast<int64_t>(b) * p.heads_q + h) * p.seqlen_q + q;  // [b, h, q]
  if (delta_splits > 0) {  // the exact D pass (modes.cuh)
    zero_delta_sums(delta_acc, delta_splits, rows, stat, lane);
    return;
  }
  const float sum = row_delta<T, D>(P, b, q, h, lane);
  if (lane == 0) d_rowsum[stat] = sum;
}

/// Copies @p rows_total rows of a [rows][d] tile into swizzled shared memory with cp.async,
/// zero-filling rows at or past @p rows_valid (the seqlen tails).
template <class Cfg, int ROWS, class T>
__device__ __forceinline__ void load_rows(uint32_t smem, const T* gmem, int64_t row_stride,
                                          int rows_valid) {
  constexpr int kPerPass = Cfg::kThreads / Cfg::kChunks;
  const int r0 = threadIdx.x / Cfg::kChunks, chunk = threadIdx.x % Cfg::kChunks;
#pragma unroll
  for (int i = 0; i < ROWS / kPerPass; ++i) {
    const int r = r0 + i * kPerPass;
    const bool ok = r < rows_valid;
    ptx::cp_async_16(smem + ptx::swizzle<Cfg::kRowBytes>(r, chunk),
                     gmem + (ok ? r : 0) * row_stride + chunk * 8, ok ? 16 : 0);
  }
}

/// The 2D tiles (FlashAttention-2's backward layout): BLOCK_N = 16 x WARPS keys per block, and
/// each GEMM with its own 2D arrangement of warps, so that a warp's tile is at least 32 x 32 (a
/// 16-row warp tile reads its B operand once per 16 rows; a 32-row one once per 32):
/// @code
///   // clang-format off
///   S = Q Kᵀ, dP = dO Vᵀ      BLOCK_M x BLOCK_N   kSdpWarpsM x kSdpWarpsN warps of 32 x kSdpN
///   dV += Pᵀ dO, dK += dSᵀ Q  BLOCK_N x d         kKvWarpsN x kKvWarpsD warps of 32 x kKvD
///   dQ = dS K                 BLOCK_M x d         kDqWarpsM x kDqWarpsD warps of 32 x kDqD
///   // clang-format on
/// @endcode
/// P and dS change hands between the first and the other GEMMs (a warp's S rows are not its dV
/// rows), so both go through shared memory, [query][key], 16-bit.
/// 8 warps (128 keys): BLOCK_M = 128 queries at head_dim 64 (as FA2; S, dP of 32 x 64 per warp,
/// dK, dV of 32 x 32), 64 at head_dim 128 (S, dP of 32 x 32, dK, dV of 32 x 64). 4 warps (64 keys,
/// BLOCK_M = 64): every warp tile 32 x 32 at head_dim 64, and few enough registers for three blocks
/// per SM.
template <int HEAD_DIM, int BLOCK_M = (HEAD_DIM <= 64 ? 128 : 64), int WARPS = 8,
          bool STAGGER = false>
struct BwdTiles {
  /// STAGGER: the `stagger` variant's order of the Q blocks (modes.cuh: q_block_of_step).
  static constexpr bool kStagger = STAGGER;
  static constexpr int kHeadDim = HEAD_DIM;
  static constexpr int kWarps = WARPS;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kBlockN = 16 * WARPS;
  static constexpr int kBlockM = BLOCK_M;
  static constexpr int kSdpWarpsM = kBlockM / 32, kSdpWarpsN = kWarps / kSdpWarpsM;
  static constexpr int kSdpN = kBlockN / kSdpWarpsN;  ///< keys of a warp's S tile
  static constexpr int kKvWarpsN = kBlockN / 32, kKvWarpsD = kWarps / kKvWarpsN;
  static constexpr int kKvD = HEAD_DIM / kKvWarpsD;  ///< columns of a warp's dK, dV tile
  static constexpr int kDqWarpsM = kBlockM / 32, kDqWarpsD = kWarps / kDqWarpsM;
  static constexpr int kDqD = HEAD_DIM / kDqWarpsD;  ///< columns of a warp's dQ tile
  /// Blocks per SM the register budget aims at (__launch_bounds__): three of the 4-warp tile at
  /// head_dim 64 (at most 168 registers per thread), else what 255 registers allow.
  static constexpr int kMinBlocks = (WARPS == 4 && HEAD_DIM <= 64) ? 3 : 1;
  static constexpr int kRowBytes = HEAD_DIM * 2;
  static constexpr int kChunks = kRowBytes / 16;
  static constexpr int kPRowBytes = kBlockN * 2;  ///< a row of P or dS: BLOCK_N keys, 16-bit
  static constexpr int kTileN = kBlockN * kRowBytes;
  static constexpr int kTileM = kBlockM * kRowBytes;
  static constexpr int kPBytes = kBlockM * kPRowBytes;
  /// K | V | Q[2] | dO[2] | P | dS | LSE[2][BLOCK_M] | D[2][BLOCK_M] (fp32, as stored in HBM)
  static constexpr int kK = 0, kV = kTileN, kQ = 2 * kTileN, kDO = kQ + 2 * kTileM,
                       kP = kDO + 2 * kTileM, kDS = kP + kPBytes, kLse = kDS + kPBytes,
                       kD = kLse + 2 * kBlockM * 4;
  static constexpr int kSmemBytes = kD + 2 * kBlockM * 4;
  static_assert(kSdpWarpsM * kSdpWarpsN == kWarps && kSdpN % 16 == 0, "S: whole 16-key pairs");
  static_assert(kKvWarpsN * kKvWarpsD == kWarps && kKvD % 16 == 0, "dK, dV: 16-column pairs");
  static_assert(kDqWarpsM * kDqWarpsD == kWarps && kDqD % 16 == 0, "dQ: 16-column pairs");
  static_assert(kThreads >= 2 * kBlockM, "load_step: one thread per LSE and per D value");
  static_assert(kBlockN % (kThreads / kChunks) == 0 && kBlockM % (kThreads / kChunks) == 0,
                "load_rows: whole passes of the CTA over a tile");
  static_assert(kSmemBytes <= 227 * 1024, "beyond any GPU's opt-in shared memory per block");
  static_assert(2 * kSdpWarpsN * kBlockM * 4 <= kPBytes, "the exact D pass's row sums fit in the P tile");
};
// ---- the step's GEMMs, one per warp grid (BwdTiles) ------------------------------------------
// mma.sync m16n8k16 on a warp tile of 32 rows (two m16 tiles, mi = 0, 1, each B fragment feeding
// both) from swizzled shared memory. The per-lane ldmatrix offsets (a_lane, b_lane, pa_lane,
// pt_lane: bwd_main_kernel) are relative to a tile and its first row; a move of 16 columns (32
// bytes) is an XOR. The warp tile's origins (sm0, sn0, ...) come by reference, as the lambdas these
// functions replace captured them: by value, NVVM placed the step's mask test differently (sm_90,
// head_dim 128: 2672 SASS instructions in the main kernel instead of 2576, and 5 more registers in
// the exact D pass, for the same work).

/// S = Q_i K_jᵀ or dP = dO_i V_jᵀ, added into @p acc, on the S grid: this warp's 32 queries (rows
/// @p sm0.. of @p A_s, [query][d]) x kSdpN keys (rows @p sn0.. of @p B_s, [key][d]), k = head_dim.
/// Element (mi, n, e) is query sm0 + 16 mi + g + 8 (e / 2), key sn0 + 8 n + 2 t + e % 2.
template <class T, class Cfg>
__device__ __forceinline__ void gemm_sdp(float (&acc)[2][Cfg::kSdpN / 8][4], uint32_t A_s, uint32_t B_s,
                                         const int& sm0, const int& sn0, uint32_t a_lane, uint32_t b_lane) {
  constexpr int D = Cfg::kHeadDim, RB = Cfg::kRowBytes, S_NT = Cfg::kSdpN / 8;
  // LAB-BEGIN(11-gemm-sdp): the S-grid GEMM of 11-recompute-p (called for S, then for dP)
  // [same-code: 11-recompute-p]
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    uint32_t a[2][4];
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
      ptx::ldmatrix_x4(a[mi], A_s + (sm0 + 16 * mi) * RB + (a_lane ^ (kk * 32)));
#pragma unroll
    for (int nj = 0; nj < S_NT / 2; ++nj) {
      uint32_t b[4];
      ptx::ldmatrix_x4(b, B_s + (sn0 + 16 * nj) * RB + (b_lane ^ (kk * 32)));
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
        ptx::mma_m16n8k16<T>(acc[mi][2 * nj], a[mi], b[0], b[1]);
        ptx::mma_m16n8k16<T>(acc[mi][2 * nj + 1], a[mi], b[2], b[3]);
      }
    }
  }
  // LAB-END(11-gemm-sdp)
}

/// dV_j += Pᵀ dO_i or dK_j += dSᵀ Q_i, into @p acc, on the K/V grid: this warp's 32 keys (columns
/// @p kn0.. of @p At_s, [query][key], read transposed) x kKvD columns (@p kd0.. of @p B_s,
/// [query][d], read transposed), k = the step's BLOCK_M queries. Element (mi, n, e) is key
/// kn0 + 16 mi + g + 8 (e / 2), column kd0 + 8 n + 2 t + e % 2.
template <class T, class Cfg>
__device__ __forceinline__ void gemm_dkv(float (&acc)[2][Cfg::kKvD / 8][4], uint32_t At_s, uint32_t B_s,
                                         const int& kn0, const int& kd0, uint32_t pt_lane, uint32_t a_lane) {
  constexpr int BLOCK_M = Cfg::kBlockM, RB = Cfg::kRowBytes, PRB = Cfg::kPRowBytes, KV_NT = Cfg::kKvD / 8;
  // LAB-BEGIN(11-gemm-dkv): the K/V-grid GEMM of 11-dv (called for dV, then for dK)
  // [same-code: 11-dv]
#pragma unroll
  for (int kk = 0; kk < BLOCK_M / 16; ++kk) {
    uint32_t a[2][4];
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
      ptx::ldmatrix_x4_trans(a[mi], At_s + kk * 16 * PRB + (pt_lane ^ ((kn0 + 16 * mi) / 8 * 16)));
#pragma unroll
    for (int dj = 0; dj < KV_NT / 2; ++dj) {
      uint32_t b[4];
      ptx::ldmatrix_x4_trans(b, B_s + kk * 16 * RB + (a_lane ^ ((kd0 / 16 + dj) * 32)));
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
        ptx::mma_m16n8k16<T>(acc[mi][2 * dj], a[mi], b[0], b[1]);
        ptx::mma_m16n8k16<T>(acc[mi][2 * dj + 1], a[mi], b[2], b[3]);
      }
    }
  }
  // LAB-END(11-gemm-dkv)
}

/// dS K_j, dQ_i's share of this block (unscaled), into @p acc, on the dQ grid: this warp's 32
/// queries (rows @p qm0.. of @p dS_s, [query][key]) x kDqD columns (@p qd0.. of @p K_s, [key][d],
/// read transposed), k = the block's BLOCK_N keys. Element (mi, n, e) is query
/// qm0 + 16 mi + g + 8 (e / 2), column qd0 + 8 n + 2 t + e % 2.
template <class T, class Cfg>
__device__ __forceinline__ void gemm_dq(float (&acc)[2][Cfg::kDqD / 8][4], uint32_t dS_s, uint32_t K_s,
                                        const int& qm0, const int& qd0, uint32_t pa_lane, uint32_t a_lane) {
  constexpr int BLOCK_N = Cfg::kBlockN, RB = Cfg::kRowBytes, PRB = Cfg::kPRowBytes, DQ_NT = Cfg::kDqD / 8;
  // LAB-BEGIN(11-gemm-dq): the dQ-grid GEMM of 11-dv (dS K_j)
  // [same-code: 11-dv]
#pragma unroll
  for (int kk = 0; kk < BLOCK_N / 16; ++kk) {
    uint32_t a[2][4];
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
      ptx::ldmatrix_x4(a[mi], dS_s + (qm0 + 16 * mi) * PRB + (pa_lane ^ (kk * 32)));
#pragma unroll
    for (int dj = 0; dj < DQ_NT / 2; ++dj) {
      uint32_t b[4];
      ptx::ldmatrix_x4_trans(b, K_s + kk * 16 * RB + (a_lane ^ ((qd0 / 16 + dj) * 32)));
#pragma unroll
      for (int mi = 0; mi < 2; ++mi) {
        ptx::mma_m16n8k16<T>(acc[mi][2 * dj], a[mi], b[0], b[1]);
        ptx::mma_m16n8k16<T>(acc[mi][2 * dj + 1], a[mi], b[2], b[3]);
      }
    }
  }
  // LAB-END(11-gemm-dq)
}

/// The main kernel. Grid: (K/V blocks, or splits when deterministic; heads_kv x kv_split;
/// batch), or with @p lpt (causal, not deterministic: longest blocks first) (heads_kv x kv_split;
/// batch; K/V blocks). The modes it calls into (modes.cuh): the deterministic mode
/// (P.deterministic: block x walks K/V blocks x, x + gridDim.x, ... and adds into split x's own
/// dQ accumulator, add_dq_in_order); a split group (kv_split > 1: dK and dV go to @p dkv_acc as
/// fp32 partial sums, [2][kv_split][batch, seqlen_k, heads_kv, d], dK unscaled, then dV, for
/// bwd_convert_kv_kernel: store_dkv_partial); the stagger (Cfg::kStagger: q_block_of_step);
/// DELTA_PASS (delta_policy.h's exact D): the same loop up to P and dP, then rowsum(P ∘ dP) added
/// into @p dq_acc read as D's accumulator ([batch, heads_q, seqlen_q] fp32, one per split when
/// deterministic) instead of the three gradient GEMMs (add_delta_rows); @p d_rowsum is not read.
// The exact D pass leaves each step after P and dP (`continue`): in that instantiation the rest of
// the step is unreachable, which the front end would warn about on every instantiation.
#pragma nv_diag_suppress 128
template <class T, class Cfg, bool DELTA_PASS = false>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::kMinBlocks)
    bwd_main_kernel(const AttnBwdParams P, const float* d_rowsum, float* dq_acc, int kv_split,
                    float* dkv_acc, bool lpt) {
  constexpr int D = Cfg::kHeadDim;
  constexpr int BLOCK_N = Cfg::kBlockN;
  constexpr int BLOCK_M = Cfg::kBlockM;
  constexpr int RB = Cfg::kRowBytes;
  constexpr int PRB = Cfg::kPRowBytes;
  constexpr int S_NT = Cfg::kSdpN / 8;   // 8-key tiles of a warp's S (2 x 16 query rows)
  constexpr int KV_NT = Cfg::kKvD / 8;   // 8-column tiles of a warp's dK, dV (2 x 16 keys)
  constexpr int DQ_NT = Cfg::kDqD / 8;   // 8-column tiles of a warp's dQ (2 x 16 queries)
  const AttnParams& p = P.fwd;

  const int head_slice = lpt ? blockIdx.x : blockIdx.y;  // KV head x kv_split + slice
  const int kv_head = head_slice / kv_split;
  const int slice = head_slice % kv_split;  // this block's slice of the group's query heads
  const int slice_heads = p.group / kv_split;
  const int head0 = kv_head * p.group + slice * slice_heads;  // the slice's first query head
  const int batch = lpt ? blockIdx.y : blockIdx.z;
  const int j0 = lpt ? blockIdx.z : blockIdx.x;  // the first (or only) K/V block
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  // This warp's tiles: S and dP rows sm0.. (32 queries), columns sn0.. (kSdpN keys); dK and dV
  // rows kn0.. (32 keys), columns kd0..; dQ rows qm0.. (32 queries), columns qd0...
  const int sm0 = 32 * (warp % Cfg::kSdpWarpsM), sn0 = Cfg::kSdpN * (warp / Cfg::kSdpWarpsM);
  const int kn0 = 32 * (warp % Cfg::kKvWarpsN), kd0 = Cfg::kKvD * (warp / Cfg::kKvWarpsN);
  const int qm0 = 32 * (warp % Cfg::kDqWarpsM), qd0 = Cfg::kDqD * (warp / Cfg::kDqWarpsM);
  const int n_kv_blocks = (p.seqlen_k + BLOCK_N - 1) / BLOCK_N;
  const int n_q_blocks = (p.seqlen_q + BLOCK_M - 1) / BLOCK_M;
  const float scale_log2 = p.scale_log2;
  const float log2e = 1.4426950408889634f;
  // dQ's accumulator per split: [batch, seqlen_q, heads_q, d]; the exact pass's: [2][rows]. The
  // deterministic mode (modes.cuh): this block's split, and its K/V blocks every gridDim.x.
  const int64_t split_elems =
      static_cast<int64_t>(p.batch) * p.seqlen_q * p.heads_q * (DELTA_PASS ? 2 : D);
  float* dq_split = dq_acc + (P.deterministic ? blockIdx.x * split_elems : 0);
  const int j_step = P.deterministic ? gridDim.x : n_kv_blocks;

  extern __shared__ __align__(128) uint8_t smem[];
  const uint32_t base = ptx::smem_addr(smem);
  const uint32_t K_s = base + Cfg::kK, V_s = base + Cfg::kV;
  const uint32_t P_s = base + Cfg::kP, dS_s = base + Cfg::kDS;
  const uint32_t lse_s = base + Cfg::kLse, D_s = base + Cfg::kD;  // [2][BLOCK_M] fp32 each
  const float* lse_f = reinterpret_cast<const float*>(smem + Cfg::kLse);
  const float* D_f = reinterpret_cast<const float*>(smem + Cfg::kD);

  // Per-lane ldmatrix offsets, relative to a tile and its first row (a multiple of 16):
  const uint32_t a_lane = ptx::swizzle<RB>(lane % 16, lane / 16);  // A [m][k]; B [k][n] trans
  const uint32_t b_lane = ptx::swizzle<RB>(lane % 8 + (lane / 16) * 8, (lane / 8) % 2);  // B [n][k]
  const uint32_t pa_lane = ptx::swizzle<PRB>(lane % 16, lane / 16);  // A [m][k] from P, dS
  // A from a [k][m] tile transposed (Pᵀ, dSᵀ from P, dS stored [query][key]).
  const uint32_t pt_lane = ptx::swizzle<PRB>(lane % 8 + (lane / 16) * 8, (lane / 8) % 2);

  for (int j = j0; j < n_kv_blocks; j += j_step) {
    const int key0 = j * BLOCK_N;
    const int i_first = p.causal ? max(0, key0 - p.causal_offset) / BLOCK_M : 0;
    const int n_i = max(0, n_q_blocks - i_first);
    const int steps = slice_heads * n_i;
    // Step s's Q block, from i_first: s mod n_i (modes.cuh: the stagger rotates it).
    auto q_block = [&](int s) { return q_block_of_step<Cfg>(s, n_i, j); };

    const T* K_g = static_cast<const T*>(p.k) + batch * p.k_batch_stride + kv_head * p.k_head_stride +
                   key0 * p.k_row_stride;
    const T* V_g = static_cast<const T*>(p.v) + batch * p.v_batch_stride + kv_head * p.v_head_stride +
                   key0 * p.v_row_stride;
    load_rows<Cfg, BLOCK_N>(K_s, K_g, p.k_row_stride, p.seqlen_k - key0);
    load_rows<Cfg, BLOCK_N>(V_s, V_g, p.v_row_stride, p.seqlen_k - key0);

    auto load_step = [&](int s, int bf) {
      const int h = head0 + s / n_i;
      const int q0 = (i_first + q_block(s)) * BLOCK_M;
      const T* Q_g = static_cast<const T*>(p.q) + batch * p.q_batch_stride + h * p.q_head_stride +
                     q0 * p.q_row_stride;
      const T* dO_g = static_cast<const T*>(P.dout) + batch * p.o_batch_stride +
                      h * p.o_head_stride + q0 * p.o_row_stride;
      load_rows<Cfg, BLOCK_M>(base + Cfg::kQ + bf * Cfg::kTileM, Q_g, p.q_row_stride, p.seqlen_q - q0);
      load_rows<Cfg, BLOCK_M>(base + Cfg::kDO + bf * Cfg::kTileM, dO_g, p.o_row_stride,
                              p.seqlen_q - q0);
      // The LSE and D of the step's rows, in the same cp.async group (no thread waits on a
      // global load); zero past seqlen_q, where Q and dO are zero too, so that P dO = 0 and dS = 0.
      const int r = threadIdx.x % BLOCK_M;
      const int64_t at = (static_cast<int64_t>(batch) * p.heads_q + h) * p.seqlen_q + q0 + r;
      const int bytes = q0 + r < p.seqlen_q ? 4 : 0;
      if (threadIdx.x < BLOCK_M)
        ptx::cp_async_4(lse_s + 4 * (bf * BLOCK_M + r), p.lse + (bytes ? at : 0), bytes);
      else if (!DELTA_PASS && threadIdx.x < 2 * BLOCK_M)  // the exact D pass computes D: none to load
        ptx::cp_async_4(D_s + 4 * (bf * BLOCK_M + r), d_rowsum + (bytes ? at : 0), bytes);
    };
    if (steps > 0) load_step(0, 0);
    ptx::cp_async_commit();

    float dK[2][KV_NT][4], dV[2][KV_NT][4];
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
      for (int n = 0; n < KV_NT; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e) dK[mi][n][e] = dV[mi][n][e] = 0.f;

#pragma unroll 1
    for (int s = 0; s < steps; ++s) {
      const int bf = s & 1;
      ptx::cp_async_wait<0>();
      __syncthreads();  // step s landed; every warp is done with step s - 1 (buffers, P, dS)
      if (s + 1 < steps) load_step(s + 1, bf ^ 1);
      ptx::cp_async_commit();

      const int h = head0 + s / n_i;
      const int q0 = (i_first + q_block(s)) * BLOCK_M;
      const uint32_t Q_b = base + Cfg::kQ + bf * Cfg::kTileM;
      const uint32_t dO_b = base + Cfg::kDO + bf * Cfg::kTileM;
      // The LSE (as log2; +inf for rows that see no key: their P is 0) and D of this thread's
      // four S rows sm0 + 16 mi + g + 8 hh.
      float lse_r[2][2], D_r[2][2];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          const int r = bf * BLOCK_M + sm0 + 16 * mi + g + 8 * hh;
          const float lse = lse_f[r];
          lse_r[mi][hh] = lse == -INFINITY ? INFINITY : lse * log2e;
          D_r[mi][hh] = D_f[r];
        }

      // S = Q_i K_jᵀ and dP = dO_i V_jᵀ on this warp's 32 queries x kSdpN keys: element
      // (mi, n, e) is query q0 + sm0 + 16 mi + g + 8 (e / 2), key key0 + sn0 + 8 n + 2 t + e % 2.
      float S[2][S_NT][4], dP[2][S_NT][4];
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int n = 0; n < S_NT; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) S[mi][n][e] = dP[mi][n][e] = 0.f;
      // LAB-BEGIN(11-recompute-p): S = Q_i K_jᵀ and dP = dO_i V_jᵀ on this warp's tile, then P
      // from the LSE, masked
      gemm_sdp<T, Cfg>(S, Q_b, K_s, sm0, sn0, a_lane, b_lane);
      gemm_sdp<T, Cfg>(dP, dO_b, V_s, sm0, sn0, a_lane, b_lane);
      const int warp_last_key = key0 + sn0 + Cfg::kSdpN - 1;
      const bool warp_masked = warp_last_key >= p.seqlen_k ||
                               (p.causal && warp_last_key > q0 + sm0 + p.causal_offset);
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int n = 0; n < S_NT; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e)
            S[mi][n][e] = ptx::ex2_approx(S[mi][n][e] * scale_log2 - lse_r[mi][e / 2]);
      if (warp_masked) {  // masked pairs: whatever exp2 gave (even inf), P is 0
#pragma unroll
        for (int mi = 0; mi < 2; ++mi)
#pragma unroll
          for (int n = 0; n < S_NT; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int key = key0 + sn0 + 8 * n + 2 * t + e % 2;
              const int q = q0 + sm0 + 16 * mi + g + 8 * (e / 2);
              if (key >= p.seqlen_k || (p.causal && key > q + p.causal_offset)) S[mi][n][e] = 0.f;
            }
      }
      // LAB-END(11-recompute-p)
      if constexpr (DELTA_PASS) {  // the exact D pass (modes.cuh): P and dP's row sums, no gradient
        add_delta_rows<Cfg>(S, dP, dq_split + (static_cast<int64_t>(batch) * p.heads_q + h) * p.seqlen_q,
                            split_elems / 2, q0, p.seqlen_q, reinterpret_cast<float*>(smem + Cfg::kP),
                            P.deterministic != 0);
        continue;
      }
      // LAB-BEGIN(11-ds): dS = P ∘ (dP − D_i), in place of dP
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int n = 0; n < S_NT; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) dP[mi][n][e] = S[mi][n][e] * (dP[mi][n][e] - D_r[mi][e / 2]);
      // LAB-END(11-ds)
      // P and dS to shared memory, [query][key], 16-bit (swizzled 256-byte rows).
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int n = 0; n < S_NT; ++n)
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) {
            const uint32_t at = ptx::swizzle<PRB>(sm0 + 16 * mi + g + 8 * hh, (sn0 + 8 * n) / 8) + 4 * t;
            asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(P_s + at),
                         "r"(pack2<T>(S[mi][n][2 * hh], S[mi][n][2 * hh + 1]))
                         : "memory");
            asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(dS_s + at),
                         "r"(pack2<T>(dP[mi][n][2 * hh], dP[mi][n][2 * hh + 1]))
                         : "memory");
          }
      __syncthreads();

      float acc[2][DQ_NT][4];  // this warp's share of dS K_j (below)
#pragma unroll
      for (int mi = 0; mi < 2; ++mi)
#pragma unroll
        for (int n = 0; n < DQ_NT; ++n)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[mi][n][e] = 0.f;
      // LAB-BEGIN(11-dv): dV_j += Pᵀ dO_i and dK_j += dSᵀ Q_i on this warp's 32 keys x kKvD
      // columns (k = queries, Pᵀ and dSᵀ read transposed from shared memory), then dS K_j
      gemm_dkv<T, Cfg>(dV, P_s, dO_b, kn0, kd0, pt_lane, a_lane);
      gemm_dkv<T, Cfg>(dK, dS_s, Q_b, kn0, kd0, pt_lane, a_lane);
      // dQ_i's share, dS K_j, on this warp's 32 queries x kDqD columns (k = the block's keys),
      // added to the fp32 accumulator unscaled (below).
      gemm_dq<T, Cfg>(acc, dS_s, K_s, qm0, qd0, pa_lane, a_lane);
      // LAB-END(11-dv)
      float* dq_rows = dq_split + (static_cast<int64_t>(batch) * p.seqlen_q * p.heads_q + h) * D;
      // The row of fragment row (mi, hh) of this thread, at its first column (nullptr past seqlen_q).
      auto row_dst = [&](int mi, int hh) -> float* {
        const int q = q0 + qm0 + 16 * mi + g + 8 * hh;
        return q < p.seqlen_q ? dq_rows + static_cast<int64_t>(q) * p.heads_q * D + qd0 + 2 * t
                              : nullptr;
      };
      if (P.deterministic) {  // uniform: this block owns its split (modes.cuh: the deterministic mode)
        add_dq_in_order(acc, row_dst);
      } else {
#pragma unroll
        for (int mi = 0; mi < 2; ++mi)
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) {
            float* dst = row_dst(mi, hh);
            if (!dst) continue;
#pragma unroll
            for (int n = 0; n < DQ_NT; ++n) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
              // sm_90: columns 2t, 2t + 1 in one vector reduction (red.global.add.v2.f32), half
              // the atomic instructions. 8-byte aligned: the element index (row base a multiple
              // of d, qd0 a multiple of 16, 8 n, 2 t) is even, and the accumulator starts at an
              // even float offset of the workspace (dq_acc_offset).
              atomicAdd(reinterpret_cast<float2*>(dst + 8 * n),
                        make_float2(acc[mi][n][2 * hh], acc[mi][n][2 * hh + 1]));
#else
              atomicAdd(dst + 8 * n, acc[mi][n][2 * hh]);
              atomicAdd(dst + 8 * n + 1, acc[mi][n][2 * hh + 1]);
#endif
            }
          }
      }
    }
    ptx::cp_async_wait<0>();
    if constexpr (DELTA_PASS) {
      __syncthreads();  // K_s, V_s are reloaded for the next K/V block
      continue;
    }

    // dK_j (scaled) and dV_j to global memory, keys past seqlen_k skipped; with a split group,
    // this slice's partial sums (dK unscaled) to its fp32 slot instead.
#pragma unroll
    for (int mi = 0; mi < 2; ++mi)
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int key = key0 + kn0 + 16 * mi + g + 8 * hh;
        if (key >= p.seqlen_k) continue;
        if (kv_split > 1) {  // a split group (modes.cuh): this slice's fp32 partial sums
          store_dkv_partial<D>(dK, dV, mi, hh, dkv_acc, slice, kv_split, p, batch, key, kv_head, kd0 + 2 * t);
          continue;
        }
        T* dk = static_cast<T*>(P.dk) + batch * p.k_batch_stride + kv_head * p.k_head_stride +
                static_cast<int64_t>(key) * p.k_row_stride + kd0 + 2 * t;
        T* dv = static_cast<T*>(P.dv) + batch * p.v_batch_stride + kv_head * p.v_head_stride +
                static_cast<int64_t>(key) * p.v_row_stride + kd0 + 2 * t;
#pragma unroll
        for (int n = 0; n < KV_NT; ++n) {
          *reinterpret_cast<uint32_t*>(dk + 8 * n) = pack2<T>(dK[mi][n][2 * hh] * p.softmax_scale,
                                                              dK[mi][n][2 * hh + 1] * p.softmax_scale);
          *reinterpret_cast<uint32_t*>(dv + 8 * n) = pack2<T>(dV[mi][n][2 * hh], dV[mi][n][2 * hh + 1]);
        }
      }
    __syncthreads();  // K_s, V_s and the buffers are reloaded for the next K/V block
  }
}

#pragma nv_diag_default 128

/// dQ = scale · Σ_splits accumulator, rounded to 16 bits (splits summed in index order).
template <class T, int D>
__global__ void __launch_bounds__(256)
    bwd_convert_kernel(const AttnBwdParams P, const float* dq_acc, int splits) {
  const AttnParams& p = P.fwd;
  const int64_t pairs = static_cast<int64_t>(p.batch) * p.seqlen_q * p.heads_q * D / 2;
  const int64_t split_elems = 2 * pairs;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < pairs;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t e = 2 * i;  // [batch, seqlen_q, heads_q, d], contiguous
    const RowCoord at = row_coord<D>(e, p.seqlen_q, p.heads_q);  // modes.cuh
    float x = 0.f, y = 0.f;
    for (int s = 0; s < splits; ++s) {
      x += dq_acc[s * split_elems + e];
      y += dq_acc[s * split_elems + e + 1];
    }
    T* dq = static_cast<T*>(P.dq) + at.b * p.q_batch_stride + at.row * p.q_row_stride +
            at.h * p.q_head_stride + at.c;
    *reinterpret_cast<uint32_t*>(dq) = pack2<T>(x * p.softmax_scale, y * p.softmax_scale);
  }
}

}  // namespace fl::bwd
