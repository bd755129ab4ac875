/// @file steps/14_hopper_backward/kernel.cuh
/// @brief Rung 14: FlashAttention-3's backward pass (Shah et al., 2024, §3 and its code's
/// `hopper/` backward) on wgmma and TMA: rung 11's algorithm, rung 10's machinery.
///
/// One block per (K/V block j, KV head or a slice of its GQA group, batch): K_j, V_j loaded once,
/// dK_j, dV_j in registers, the query blocks that see j walked in turn. Warpgroup 0 is the
/// producer (warp 0 loads Q_i, dO_i, LSE_i, D_i; warp 1 adds dQ_i by bulk reduce-add), warpgroups
/// 1 and 2 the math. README.md: the GEMM chain with keys as wgmma's M, why dQ needs a writer,
/// head_dim 256's transposed dK, dV, the ablations (launch.cu).
#pragma once

#include <cuda.h>
#include <math.h>
#include <stdint.h>

#include <string>
#include <type_traits>

#include "../11_backward/kernel.cuh"  // bwd::row_delta: D = rowsum(dO ∘ O), rung 11's
#include "flashladder/backward.h"
#include "flashladder/cuda_check.h"
#include "flashladder/dtype.cuh"
#include "flashladder/hopper.cuh"
#include "flashladder/masks.h"
#include "flashladder/problem.h"
#include "flashladder/ptx.cuh"
#include "flashladder/tma.h"
#include "flashladder/varlen.h"
#include "traits.h"
#include "workspace.h"

namespace fl::hopper14 {

using namespace fl::hopper;
namespace wg = fl::wgmma;

/// Named barriers (0 is __syncthreads'): the math warps' dS^T tile complete (256 threads); the
/// dQ hand-off between the math warps and the writer warp (288: 256 + 32); fp8-dq: every math
/// warp's |max| of K_j, or of the step's dS, in shared memory (256).
constexpr uint32_t kDsReady = 1, kDqFull = 2, kDqEmpty = 3, kAmaxReady = 4;
constexpr uint32_t kMathThreads = 256, kDqHandoff = kMathThreads + 32;

/// Where the kernel writes, besides dK and dV: the padded statistics and the dQ accumulator
/// (workspace.h), the deterministic counters, a split group's partial dK, dV.
struct BwdBuffers {
  const float* lse_log2;  ///< padded rows (workspace.h): LSE·log2(e), +inf where no key is seen
  const float* delta;     ///< padded rows: D
  float* dq_acc;      ///< a [BLOCK_M x d] tile per query block of the padded rows, register order
  int* counters;      ///< one per 64 padded rows (deterministic only)
  float* dkv_acc;     ///< rung 11's [2][kv_split][key_rows, heads_kv, d] (kv_split > 1)
  int kv_split;       ///< slices of a GQA group (workspace.h's kv_splits)
  int64_t head_rows;  ///< padded rows of a head (workspace.h's head_rows)
  int64_t key_rows;   ///< batch x seqlen_k, or total_k packed (workspace.h's key_rows)
  /// Deterministic, with the writer warp: the dQ tile freed for the math warps once the copy
  /// engine has read it, the next block's turn given once the add has landed (the rung); false:
  /// both once it has landed (the late-free ablation), the math warps waiting for the add.
  bool early_free;
  /// Cfg::kPersistent: the grid of K/V blocks the persistent blocks walk (x the K/V block, y the
  /// KV head and slice, z the batch, as the non-persistent grid's blockIdx), tile t = x + X (y +
  /// Y z): block b takes tile b first, then tile_counter's next value + gridDim.x each time it
  /// needs one (the hardware's order for a non-persistent grid: a block takes the next tile when
  /// it is free).
  int tiles_x, tiles_y, tiles_z;
  int* tile_counter;  ///< zeroed before the launch (workspace.h's tile_counter_offset)
  /// Deterministic, not causal, rung 14's masks: each K/V block's walk starts at its own query
  /// block (the block's index) and wraps (traits.h's dq_prev_token_rotated, rotated_walk); false: from 0.
  bool rotated_walk;
  /// dK and dV of a whole K/V block out through shared memory and a TMA store (map_dk, map_dv:
  /// store_dkv_tma); false, or a split group's partial sums, or a packed sequence's last block
  /// (its rows past the sequence belong to the next one): each math thread's own stores (the
  /// `direct-dkv` ablation, the rung's stores before).
  bool tma_dkv;
  /// Under a causal mask, not deterministic, one block per K/V block with the warp roles
  /// (launch_bwd.cuh): the grid's blocks taken longest first within sections of this many groups
  /// (grid_coords: in a section the K/V block slowest, so every group's block 0, the longest walk,
  /// goes out before any block 1; the sections one after the other); 0: the K/V block fastest, the
  /// hardware's order of blockIdx.
  int lpt_section;
};

/// LSE·log2(e) and D per query row, padded (workspace.h; +inf and 0 on padding rows, so they have
/// P = 0 and dS = 0): one warp per padded row of the @p rows, 4-byte loads (the unfused-prep
/// ablation's; the rung runs bwd_prep_kernel below). D is rowsum(dO ∘ O) from the
/// forward's fp32 O when it left one, else from the 16-bit O, or (@p exact_d non-null, dense
/// only) rung 11's exact pass.
template <class T, int D>
__global__ void __launch_bounds__(128)
    bwd_stats_kernel(const AttnBwdParams P, float* lse_log2, float* delta, int64_t head_rows,
                     int64_t rows, const float* exact_d) {
  const AttnParams& p = P.fwd;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * 4 + threadIdx.x / 32;
  if (row >= rows) return;
  const int lane = threadIdx.x % 32;
  const PaddedRow at = padded_row_at(p, head_rows, row);
  if (!at.real) {
    if (lane == 0) {
      lse_log2[row] = INFINITY;
      delta[row] = 0.f;
    }
    return;
  }
  const SeqSpan seq = seq_span(p, at.b);
  const int64_t stat =
      lse_offset(p, seq, at.b, at.h) + at.q;  // the forward's LSE (and the exact pass's D)
  const float sum =
      exact_d ? exact_d[stat]
              : bwd::row_delta<T, D>(P, seq.batch, seq.q0 + at.q, at.h, lane);  // rung 11's D
  if (lane == 0) {
    const float lse = p.lse[stat];
    lse_log2[row] = lse == -INFINITY ? INFINITY : lse * 1.4426950408889634f;
    delta[row] = sum;
  }
}

/// Threads of the fused pre-pass (bwd_prep_kernel) per block; a row of the statistics takes
/// kPrepLanes<D> of them, one 16-byte chunk (8 elements) of O and of dO each.
constexpr int kPrepThreads = 128;
template <int D>
constexpr int kPrepLanes = D / 8;
template <int D>
constexpr int kPrepRows = kPrepThreads / kPrepLanes<D>;  ///< padded rows per block: 16, 8 or 4

/// rowsum over the 8 elements of one 16-byte chunk of O (16-bit, or fp32 @p o32 non-null) and dO.
template <class T>
__device__ __forceinline__ float chunk_dot(const T* o, const float* o32, const T* dout) {
  const uint4 g = *reinterpret_cast<const uint4*>(dout);
  const uint32_t gw[4] = {g.x, g.y, g.z, g.w};
  float a[8];
  if (o32) {
    const float4 a0 = *reinterpret_cast<const float4*>(o32), a1 = *reinterpret_cast<const float4*>(o32 + 4);
    a[0] = a0.x, a[1] = a0.y, a[2] = a0.z, a[3] = a0.w, a[4] = a1.x, a[5] = a1.y, a[6] = a1.z, a[7] = a1.w;
  } else {
    const uint4 v = *reinterpret_cast<const uint4*>(o);
    const uint32_t vw[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const float2 f = unpack2<T>(vw[k]);
      a[2 * k] = f.x, a[2 * k + 1] = f.y;
    }
  }
  float sum = 0.f;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const float2 f = unpack2<T>(gw[k]);
    sum += a[2 * k] * f.x + a[2 * k + 1] * f.y;
  }
  return sum;
}

/// The pre-pass in one launch (FlashAttention-3's backward preprocess): LSE·log2(e) and D per
/// padded row, as bwd_stats_kernel, with 16-byte loads of O and dO (kPrepLanes<D> threads per
/// row, their sums joined by shuffles), and the dQ accumulator and the deterministic counters
/// zeroed while it reads: @p zero_vecs 16-byte stores from @p zero, shared between the blocks.
/// O, dO (and the fp32 O) rows are 16-byte aligned and head_dim a multiple of 8 (the layout rule:
/// launch_backward checks it). Grid: rows / kPrepRows<D> blocks.
template <class T, int D>
__global__ void __launch_bounds__(kPrepThreads)
    bwd_prep_kernel(const AttnBwdParams P, float* lse_log2, float* delta, int64_t head_rows, int64_t rows,
                    const float* exact_d, float4* zero, int64_t zero_vecs) {
  constexpr int L = kPrepLanes<D>, R = kPrepRows<D>;
  const AttnParams& p = P.fwd;
  const int64_t per_block = (zero_vecs + gridDim.x - 1) / gridDim.x;
  const int64_t z0 = int64_t(blockIdx.x) * per_block, z1 = min(z0 + per_block, zero_vecs);
  for (int64_t i = z0 + threadIdx.x; i < z1; i += kPrepThreads) zero[i] = make_float4(0.f, 0.f, 0.f, 0.f);

  const int64_t row = int64_t(blockIdx.x) * R + threadIdx.x / L;
  const int c = (threadIdx.x % L) * 8;  // this thread's chunk of the row
  // Every lane reaches the shuffles: padding rows and rows past the end sum nothing.
  const PaddedRow at = row < rows ? padded_row_at(p, head_rows, row) : PaddedRow{0, 0, 0, false};
  int64_t stat = 0;
  float sum = 0.f;
  if (at.real) {
    const SeqSpan seq = seq_span(p, at.b);
    stat = lse_offset(p, seq, at.b, at.h) + at.q;  // the forward's LSE (and the exact pass's D)
    // O and dO have V's head_dim (AttnParams::dv(): MLA's 128 beside Q's 192), which may be below
    // Q's and the tile's: the chunks past it sum nothing.
    const int dv = p.dv();
    if (!exact_d && c < dv) {
      const int b = seq.batch, q = seq.q0 + at.q;
      const int64_t off = b * p.o_batch_stride + q * p.o_row_stride + at.h * p.o_head_stride + c;
      const T* o = static_cast<const T*>(p.o) + off;
      const T* dout = static_cast<const T*>(P.dout) + off;
      const float* o32 =
          p.o_fp32 ? p.o_fp32 + ((int64_t(b) * p.seqlen_q + q) * p.heads_q + at.h) * dv + c : nullptr;
      sum = chunk_dot<T>(o, o32, dout);
    }
  }
#pragma unroll
  for (int s = L / 2; s > 0; s >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, s);
  if (row >= rows || threadIdx.x % L != 0) return;
  if (!at.real) {
    lse_log2[row] = INFINITY;
    delta[row] = 0.f;
    return;
  }
  const float lse = p.lse[stat];
  lse_log2[row] = lse == -INFINITY ? INFINITY : lse * 1.4426950408889634f;
  delta[row] = exact_d ? exact_d[stat] : sum;
}

/// One block's shared memory (traits.h's offsets) from the first 1024-byte boundary.
template <class Cfg>
struct BwdSmem {
  uint32_t base;
  __device__ __forceinline__ explicit BwdSmem(const uint8_t* raw)
      : base((smem_addr(raw) + 1023u) & ~1023u) {}
  __device__ __forceinline__ uint32_t K() const { return base + Cfg::kK; }
  __device__ __forceinline__ uint32_t V() const { return base + Cfg::kV; }
  __device__ __forceinline__ uint32_t Q(int s) const { return base + Cfg::kQ + s * Cfg::kQBytes; }
  __device__ __forceinline__ uint32_t dO(int s) const { return base + Cfg::kDO + s * Cfg::kQBytes; }
  __device__ __forceinline__ uint32_t dS(int b) const {
    return base + Cfg::kDS + b * Cfg::kDsBytes;
  }
  __device__ __forceinline__ uint32_t Pt() const { return base + Cfg::kP; }
  /// fp8-dq: K_j^T in e4m3; the 8 math warps' |max| of K_j (row 0) and (per tile) of dS tile b
  /// (row 1 + b); per query row, each warp's |max| of each row of the step's dS, the rows' scales
  /// and their inverses (traits.h).
  __device__ __forceinline__ uint32_t Kt() const { return base + Cfg::kKt; }
  __device__ __forceinline__ uint32_t amax(int row) const { return base + Cfg::kAmax + row * 32; }
  __device__ __forceinline__ uint32_t ds_warp_max(int math_warp, int row) const {
    return base + Cfg::kDsWarpMax + 2 * (math_warp * Cfg::kBlockM + row);
  }
  __device__ __forceinline__ uint32_t ds_scale(int row) const { return base + Cfg::kDsScale + 4 * row; }
  __device__ __forceinline__ uint32_t ds_inv(int row) const { return base + Cfg::kDsInv + 4 * row; }
  __device__ __forceinline__ uint32_t dQ() const { return base + Cfg::kDQ; }
  __device__ __forceinline__ uint32_t lse(int s) const {
    return base + Cfg::kLse + s * Cfg::kRowStatBytes;
  }
  __device__ __forceinline__ uint32_t delta(int s) const {
    return base + Cfg::kDelta + s * Cfg::kRowStatBytes;
  }
  __device__ __forceinline__ uint32_t kv_full() const { return base + Cfg::kBars; }
  __device__ __forceinline__ uint32_t q_full(int s) const {
    return base + Cfg::kBars + 8u * (1 + s);
  }
  __device__ __forceinline__ uint32_t do_full(int s) const {
    return base + Cfg::kBars + 8u * (1 + Cfg::kStages + s);
  }
  /// The stage's release: one barrier for Q and dO, or (Cfg::kSplitRelease) Q's and dO's apart.
  __device__ __forceinline__ uint32_t q_empty(int s) const {
    return base + Cfg::kBars + 8u * (1 + 2 * Cfg::kStages + s);
  }
  __device__ __forceinline__ uint32_t do_empty(int s) const {
    return Cfg::kSplitRelease ? base + Cfg::kBars + 8u * (1 + 3 * Cfg::kStages + s) : q_empty(s);
  }
  /// Persistent: K_j, V_j free for the next block's; the tile ring's slot @p k, published and read.
  __device__ __forceinline__ uint32_t kv_empty() const { return base + Cfg::kBars + 8u * Cfg::kKvEmptyBar; }
  __device__ __forceinline__ uint32_t tile_slot(int k) const { return base + Cfg::kTileSlots + 4u * k; }
  __device__ __forceinline__ uint32_t tile_full(int k) const { return base + Cfg::kBars + 8u * (Cfg::kKvEmptyBar + 1 + k); }
  __device__ __forceinline__ uint32_t tile_empty(int k) const {
    return base + Cfg::kBars + 8u * (Cfg::kKvEmptyBar + 3 + k);
  }
};

/// What the block walks: its K/V block, its slice of query heads and the query blocks that see the
/// K/V block. Step `it` is query head head0 + it / n_i, query block i_first + it % n_i, or on the
/// rotated walk (it + j) % n_i (traits.h's dq_prev_token_rotated).
/// A packed batch (varlen.h): blockIdx.z is the sequence, its own len_q, len_k and causal diagonal
/// (len_k - len_q) apply, and the grid's K/V blocks past its len_k exit at once (`active`).
struct BlockWork {
  int kv_head, slice, slice_heads, head0, batch, j, key0, i_first, n_i, steps;
  int n_kv_blocks;     ///< K/V blocks of the sequence
  bool active;         ///< the K/V block exists in this sequence
  bool reverse_order;  ///< deterministic, causal or rotated: launched (and added) from the last K/V block down
  int block_n;         ///< keys per K/V block
  int len_q, len_k,
      causal_offset;   ///< the sequence's lengths; causal: query q sees key k <= q + causal_offset
  int q_tok0, k_tok0;  ///< its first query / key token in the [tokens, heads, d] view (0 dense)
  int64_t stat0;       ///< its padded row of query 0, head 0 (workspace.h's stat_row0)
  __device__ __forceinline__ BlockWork(const AttnParams& p, int64_t head_rows, int kv_split,
                                       int block_m, int block_n_, bool deterministic, bool rotated_walk)
      : BlockWork(p, head_rows, kv_split, block_m, block_n_, deterministic, rotated_walk, blockIdx.x, blockIdx.y,
                  blockIdx.z) {}
  /// The work of grid coordinates (@p bx, @p by, @p bz): a persistent block's tile.
  __device__ __forceinline__ BlockWork(const AttnParams& p, int64_t head_rows, int kv_split,
                                       int block_m, int block_n_, bool deterministic, bool rotated_walk, int bx,
                                       int by, int bz)
      : block_n(block_n_) {
    // The K/V block varies fastest: the blocks running at once share their query heads, so they
    // read the same Q_i, dO_i and add into the same dQ tiles while those are in L2. Block 0 first:
    // under a causal mask the longest. The deterministic mode under a causal mask launches (and
    // adds) from the last block down instead (add_dq_tile says why).
    batch = bz;
    const SeqSpan seq = seq_span(p, batch);
    len_q = seq.len_q;
    len_k = seq.len_k;
    causal_offset = p.cu_seqlens_q ? seq.len_k - seq.len_q : p.causal_offset;
    q_tok0 = seq.q0;
    k_tok0 = seq.k0;
    stat0 = stat_row0(p, head_rows, batch);
    n_kv_blocks = (len_k + block_n - 1) / block_n;
    active = bx < n_kv_blocks;
    reverse_order = deterministic && (p.causal || rotated_walk);
    j = reverse_order ? n_kv_blocks - 1 - bx : bx;
    const int head_slice = by;
    kv_head = head_slice / kv_split;
    slice = head_slice % kv_split;
    slice_heads = p.group / kv_split;
    head0 = kv_head * p.group + slice * slice_heads;
    key0 = j * block_n;
    i_first = n_i = steps = 0;  // walk() sets them from the mask's rows
  }
  /// The query blocks to visit: those holding rows [rows.lo, rows.hi], the rows the mask says see
  /// some key of the block (MODS::query_rows). Rows past len_q are padding (P = 0), so the last
  /// block is the one holding len_q - 1.
  __device__ __forceinline__ void walk(KeySpan rows, int block_m) {
    const QueryBlocks v = query_blocks(rows.lo, rows.hi, block_m, (len_q + block_m - 1) / block_m);
    i_first = v.first;
    n_i = max(0, v.end - v.first);
    steps = active ? slice_heads * n_i : 0;
  }
  __device__ __forceinline__ int head(int it) const { return head0 + it / n_i; }
  /// Its key 0's row in the dK, dV partial sums (batch x seqlen_k rows, or total_k packed).
  __device__ __forceinline__ int64_t key_row0(const AttnParams& p) const {
    return p.cu_seqlens_q ? int64_t(k_tok0) : int64_t(batch) * p.seqlen_k;
  }
  /// Whether this block walks rotated: the launch's rotated_walk (@p walk_rotated, a kernel
  /// parameter) and at most as many K/V blocks as query blocks in the sequence.
  __device__ __forceinline__ bool rotated(bool walk_rotated) const { return walk_rotated && n_kv_blocks <= n_i; }
  /// @p walk_rotated: BwdBuffers::rotated_walk.
  __device__ __forceinline__ int q_block(int it, bool walk_rotated) const {
    int k = it % n_i;
    if (rotated(walk_rotated)) {
      k += j;
      if (k >= n_i) k -= n_i;
    }
    return i_first + k;
  }
  /// The deterministic mode's turn at query block @p i: the token of the K/V block that adds into
  /// it just before this one, or 0 (traits.h's dq_prev_token, over the blocks' walks as
  /// MODS::query_rows gives them: rung 14's causal mask or none, or rung 16's masks).
  template <class MODS>
  __device__ __forceinline__ int prev_token(const MODS& mods, int i, int block_m, bool walk_rotated) const {
    if constexpr (!MODS::kSpans) {
      if (walk_rotated)
        return rotated(walk_rotated) ? dq_prev_token_rotated(j, i, n_kv_blocks) : dq_prev_token_descending(j, n_kv_blocks);
      return dq_prev_token_causal(j, i, n_kv_blocks, block_m, block_n, causal_offset,
                                  reverse_order);
    } else {
      const int n_q_blocks = (len_q + block_m - 1) / block_m;
      const auto visits = [&](int jp) {
        const int k0 = jp * block_n;
        const KeySpan rows = mods.query_rows(k0, min(k0 + block_n, len_k) - 1);
        return query_blocks(rows.lo, rows.hi, block_m, n_q_blocks);
      };
      return dq_prev_token(visits, n_kv_blocks, j, i, reverse_order);
    }
  }
};

/// What the score steps of a step read besides S^T and dP^T.
struct StepRows {
  const float* lse;    ///< LSE_i log2(e) of the warpgroup's queries (the stage, shared memory)
  const float* delta;  ///< D_i of the same queries
  int q0;              ///< the warpgroup's first query
  int q;               ///< lane % 4: the thread's queries q0 + 8c + 2q, + 1
  float scale_log2;    ///< softmax_scale log2(e)
};

/// P^T = exp2(S^T scale log2e - LSE_i log2e) in place, zero where the mask hides the key: thread
/// element 4c + e is key key0 + s_key0 + 16 warp + g + 8 (e / 2), query r.q0 + 8c + 2q + e % 2.
/// A tile whose queries all see all of the warpgroup's keys (MODS::full) skips the test.
template <int SN, class MODS>
__device__ __forceinline__ void probs(float (&S)[SN / 2], const MODS& mods, const StepRows& r) {
  const bool masked = !mods.full(r.q0, r.q0 + SN - 1);  // some element of this tile is not seen
#pragma unroll
  for (int c = 0; c < SN / 8; ++c) {
    const float2 l = *reinterpret_cast<const float2*>(r.lse + 8 * c + 2 * r.q);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float lse = e % 2 ? l.y : l.x;
      S[4 * c + e] = ptx::ex2_approx(
          MODS::exponent(mods, S[4 * c + e], lse, r.scale_log2, e / 2, 8 * c + e % 2));
    }
  }
  if (masked) {
#pragma unroll
    for (int c = 0; c < SN / 8; ++c)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        if (!mods.sees(e / 2, r.q0 + 8 * c + 2 * r.q + e % 2)) S[4 * c + e] = 0.f;
  }
}

/// dS^T = P^T ∘ (dP^T - D_i) in place of dP^T, for k-step kk's 16 queries (elements of c = 2 kk,
/// 2 kk + 1), just before they are packed.
template <int SN>
__device__ __forceinline__ void ds_of(const float (&S)[SN / 2], float (&dP)[SN / 2],
                                      const StepRows& r, int kk) {
#pragma unroll
  for (int c = 2 * kk; c < 2 * kk + 2; ++c) {
    const float2 dd = *reinterpret_cast<const float2*>(r.delta + 8 * c + 2 * r.q);
#pragma unroll
    for (int e = 0; e < 4; ++e)
      dP[4 * c + e] = S[4 * c + e] * (dP[4 * c + e] - (e % 2 ? dd.y : dd.x));
  }
}

/// The kernel's MODS parameter, a policy: which keys a query sees (the query blocks a K/V block
/// visits, the tiles that need no mask test, each element's test) and how a score becomes P^T and
/// dS^T. Rung 14's own is CausalOrNone: no mask or the bottom-right causal mask (p.causal), the
/// scale fused into the exponent, P^T by probs() while dP^T runs and dS^T by ds_of() as it is
/// packed. Another policy has the same members (rung 16's masks and score modifiers:
/// steps/16_masks/backward.cuh). Each math thread keeps a copy: set_block once, set_keys once
/// with its two keys of S^T (key0 + 16 warp + g + 8 hh), set_step per step.
struct CausalOrNone {
  static constexpr bool kSpans = false;  ///< no mask or causal: BlockWork::prev_token's closed form
  bool causal;
  int len_q, len_k, offset;
  int key0;  ///< the thread's first key (the second is 8 rows below)
  int wg_key0;
  __device__ __forceinline__ void set_block(const BlockWork& w) {
    len_q = w.len_q;
    len_k = w.len_k;
    offset = w.causal_offset;
  }
  /// The rows that see some key of [first, last]: query q sees key k when k <= q + offset. The
  /// query blocks outside are skipped.
  __device__ __forceinline__ KeySpan query_rows(int first, int last) const {
    (void)last;
    return {causal ? max(0, first - offset) : 0, len_q - 1};
  }
  __device__ __forceinline__ void set_keys(int wg_first, int key_a, int key_b) {
    (void)key_b;
    wg_key0 = wg_first;
    key0 = key_a;
  }
  /// Does every query of [q0, q1] see every key of the warpgroup? Then no element is masked.
  __device__ __forceinline__ bool full(int q0, int q1) const {
    (void)q1;
    return !(wg_key0 + 63 >= len_k || (causal && wg_key0 + 63 > q0 + offset));
  }
  /// Does query @p qr see the thread's key @p hh?
  __device__ __forceinline__ bool sees(int hh, int qr) const {
    const int key = key0 + 8 * hh;
    return !(key >= len_k || (causal && key > qr + offset));
  }
  /// The step's query head and the first of the warpgroup's SN queries (for what depends on
  /// them), before the step's GEMMs are issued.
  template <int SN>
  __device__ __forceinline__ void set_step(int, int) {}
  // The score hooks are static and get the policy as an argument (MODS::exponent(mods, ...)).
  // This one ignores it and takes it by value: by reference, or as a member call, nvcc emits the
  // mask tests below it in another form than with the FFMA written in the loop (SASS compared).
  /// The exponent of P^T's element (the thread's key @p hh, query @p dr after its first) in log2
  /// units: the score times scale log2(e), minus LSE log2(e), in one FFMA.
  static __device__ __forceinline__ float exponent(CausalOrNone, float s, float lse,
                                                   float scale_log2, int, int) {
    return fmaf(s, scale_log2, -lse);
  }
  /// The score steps around dP^T's wait: P^T while dP^T runs (probs), nothing once dP^T is in,
  /// and dS^T of k-step kk's 16 queries just before they are packed (ds_of).
  template <int SN>
  static __device__ __forceinline__ void p_while_dp(const CausalOrNone& m, float (&S)[SN / 2],
                                                    const StepRows& r) {
    probs<SN>(S, m, r);
  }
  template <int SN>
  static __device__ __forceinline__ void after_dp(CausalOrNone, float (&)[SN / 2],
                                                  float (&)[SN / 2], const StepRows&) {}
  template <int SN>
  static __device__ __forceinline__ void ds_at_pack(CausalOrNone, float (&S)[SN / 2], float (&dP)[SN / 2],
                                                    const StepRows& r, int kk) {
    ds_of<SN>(S, dP, r, kk);
  }
};

/// The producer's loads, for one thread: K_j and V_j once, then for every step its Q_i + LSE_i and
/// dO_i + D_i into stage it % STAGES, each once every math thread has released what the stage held
/// (Q and dO are released apart: at d = 256 Q is free after dK^T, dO after dV^T).
template <class Cfg>
struct Loads {
  const CUtensorMap* map_q;
  const CUtensorMap* map_k;
  const CUtensorMap* map_v;
  const CUtensorMap* map_do;
  const float* lse_log2;
  const float* delta;
  int64_t head_rows;
  bool packed;   ///< a packed batch: one sequence of all the tokens to TMA (batch coordinate 0)
  bool rotated;  ///< BwdBuffers::rotated_walk

  __device__ __forceinline__ int tma_batch(const BlockWork& w) const {
    return packed ? 0 : w.batch;
  }

  __device__ __forceinline__ void kv(const BwdSmem<Cfg>& sm, const BlockWork& w) const {
    mbarrier_arrive_expect_tx(sm.kv_full(), 2 * Cfg::kKBytes);
#pragma unroll
    for (int cb = 0; cb < Cfg::kColBlocks; ++cb) {
      tma_load_4d(sm.K() + cb * Cfg::kBlockN * 128, map_k, sm.kv_full(), 64 * cb, w.kv_head,
                  w.k_tok0 + w.key0, tma_batch(w));
      tma_load_4d(sm.V() + cb * Cfg::kBlockN * 128, map_v, sm.kv_full(), 64 * cb, w.kv_head,
                  w.k_tok0 + w.key0, tma_batch(w));
    }
  }
  /// Step @p it of the block's walk, the block's step @p gs in all (a persistent block's steps
  /// over its earlier K/V blocks count: the ring goes on), into stage gs % STAGES.
  __device__ __forceinline__ void step(const BwdSmem<Cfg>& sm, const BlockWork& w, int it, int gs) const {
    const int s = gs % Cfg::kStages;
    // The k-th refill of stage s waits for the k-th release (a fresh barrier passes parity 1).
    mbarrier_wait_parity(sm.q_empty(s), ((gs / Cfg::kStages) & 1) ^ 1);
    const int h = w.head(it), q0 = w.q_block(it, rotated) * Cfg::kBlockM;
    const int64_t stat = w.stat0 + h * head_rows + q0;
    mbarrier_arrive_expect_tx(sm.q_full(s), Cfg::kQBytes + Cfg::kRowStatBytes);
#pragma unroll
    for (int cb = 0; cb < Cfg::kColBlocks; ++cb)
      tma_load_4d(sm.Q(s) + cb * Cfg::kBlockM * 128, map_q, sm.q_full(s), 64 * cb, h, w.q_tok0 + q0,
                  tma_batch(w));
    bulk_load(sm.lse(s), lse_log2 + stat, Cfg::kRowStatBytes, sm.q_full(s));
    if constexpr (Cfg::kSplitRelease)
      mbarrier_wait_parity(sm.do_empty(s), ((gs / Cfg::kStages) & 1) ^ 1);
    mbarrier_arrive_expect_tx(sm.do_full(s), Cfg::kQBytes + Cfg::kRowStatBytes);
#pragma unroll
    for (int cb = 0; cb < Cfg::kColBlocks; ++cb)
      tma_load_4d(sm.dO(s) + cb * Cfg::kBlockM * 128, map_do, sm.do_full(s), 64 * cb, h,
                  w.q_tok0 + q0, tma_batch(w));
    bulk_load(sm.delta(s), delta + stat, Cfg::kRowStatBytes, sm.do_full(s));
  }
};

/// The dQ tile of step @p it in the accumulator.
template <class Cfg>
__device__ __forceinline__ int64_t dq_row(const BwdBuffers& buf, const BlockWork& w, int it) {
  return w.stat0 + w.head(it) * buf.head_rows + int64_t(w.q_block(it, buf.rotated_walk)) * Cfg::kBlockM;
}
template <class Cfg>
__device__ __forceinline__ float* dq_tile(const BwdBuffers& buf, const BlockWork& w, int it) {
  return buf.dq_acc + dq_row<Cfg>(buf, w, it) * Cfg::kHeadDim;
}

/// The dQ writer's add of step @p it, by one thread: the tile in shared memory to the accumulator
/// in one bulk reduce-add; deterministic: only once the counter of the query block holds the
/// token of the K/V block that adds just before this one (BlockWork::prev_token: its index + 1,
/// 0 for the first), then the counter takes this block's token. Returns when the copy engine has
/// read the tile (it may then be overwritten). With @p defer_release (deterministic only), returns
/// the counter before the add has landed: the caller frees the tile for the math warps first and
/// then calls release_dq_turn, so that the math warps do not wait for the add.
template <class Cfg, class MODS>
__device__ __forceinline__ int* add_dq_tile(const BwdSmem<Cfg>& sm, const BwdBuffers& buf,
                                            const AttnParams& p, const BlockWork& w,
                                            const MODS& mods, int it, bool deterministic,
                                            bool defer_release = false) {
  int* pending = nullptr;  // deterministic, defer_release: the counter to move once the add lands
  // LAB-BEGIN(14-dq-writer): one bulk reduce-add per dQ tile; in order when deterministic
  float* dst = dq_tile<Cfg>(buf, w, it);
  int* counter = nullptr;
  if (deterministic) {
    counter = buf.counters + dq_row<Cfg>(buf, w, it) / 64;
    // The block that adds before this one was launched before it (BlockWork's order), so it runs
    // or has run: no wait is for a block that cannot start. Without a mask the order is j = 0, 1,
    // ...; under a causal mask it is from the last K/V block down: block j's first query block is
    // on its diagonal, which the blocks after j do not see, so each block's first adds wait for
    // nobody and the blocks running side by side add in a wavefront. In the ascending order, block
    // j would wait at its diagonal for block 0 to get there: every block as long as the longest.
    // The rotated walk (no mask, BwdBuffers::rotated_walk) has the same wavefront, launched from
    // the last block down too, save its wrap: the last blocks wait at their walks' ends for block
    // 0, launched last. The launch takes it only where a head's K/V blocks fit on the device at
    // once (traits.h's rotated_walk), so block 0 is resident by then.
    // A token, not a count of adds: under rung 16's masks a block's neighbours need not visit
    // every query block it visits, and the neighbour is all that must be known.
    const int token = w.prev_token(mods, w.q_block(it, buf.rotated_walk), Cfg::kBlockM, buf.rotated_walk);
    int seen;
    do {
      asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(seen) : "l"(counter) : "memory");
    } while (seen != token);
    asm volatile("fence.proxy.async.global;\n" ::: "memory");  // the earlier adds, before ours
  }
  bulk_reduce_add_f32(dst, sm.dQ(), Cfg::kDqBytes);
  bulk_commit_group();
  if (deterministic && !defer_release) {
    bulk_wait_group<0>();  // our adds are done in global memory ...
    asm volatile("fence.proxy.async.global;\n" ::: "memory");
    asm volatile("st.release.gpu.global.b32 [%0], %1;\n" ::"l"(counter), "r"(w.j + 1)
                 : "memory");  // ... then the next
  } else {
    bulk_wait_group_read<0>();  // the tile is read: the math warps may write the next one
    if (deterministic) pending = counter;  // the next block's turn: release_dq_turn, once it lands
  }
  // LAB-END(14-dq-writer)
  return pending;
}

/// The next block's turn at a query block's dQ (this block's token, @p token = its index + 1),
/// given once this block's add has landed (the deferred half of add_dq_tile).
__device__ __forceinline__ void release_dq_turn(int* counter, int token) {
  bulk_wait_group<0>();
  asm volatile("fence.proxy.async.global;\n" ::: "memory");
  asm volatile("st.release.gpu.global.b32 [%0], %1;\n" ::"l"(counter), "r"(token) : "memory");
}

/// Where register a[kk][i] of a warpgroup's packed S^T / dS^T A fragment (16-bit pairs, 16 queries
/// per kk) sits in the block's [key][query] tile: row (key) 16 warp + g + 8 (i % 2) of the
/// warpgroup's keys, columns (queries) 16 kk + 8 (i / 2) + 2q and + 1 of its queries.
template <class Cfg>
__device__ __forceinline__ int frag_key(int w, int warp, int g, int i) {
  return Cfg::kSKey0(w) + 16 * warp + g + 8 * (i % 2);
}
template <class Cfg>
__device__ __forceinline__ int frag_col(int w, int q, int kk, int i) {
  return Cfg::kSCol0(w) + 16 * kk + 8 * (i / 2) + 2 * q;
}

/// Stores a warpgroup's 64 x kSN accumulator tile (keys x queries, 16-bit, packed as A fragments)
/// at rows kSKey0(w), columns kSCol0(w) of a [key][query] tile of kBlockN rows with 128B-swizzled
/// 64-query column blocks: the layout dQ = dS K reads as an MN-major A, the ss-dkv ablation's dV,
/// dK read as a K-major A, and d = 256's dK^T, dV^T read as a K-major B.
template <class T, class Cfg>
__device__ __forceinline__ void store_keys_by_queries(uint32_t tile,
                                                      const uint32_t (&a)[Cfg::kSN / 16][4], int w,
                                                      int warp, int g, int q) {
#pragma unroll
  for (int kk = 0; kk < Cfg::kSN / 16; ++kk)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int key = frag_key<Cfg>(w, warp, g, i), col = frag_col<Cfg>(w, q, kk, i);
      const uint32_t off = (col / 64) * Cfg::kBlockN * 128 + key * 128 + (col % 64) * 2;
      asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(tile + wg::sw128(off)), "r"(a[kk][i])
                   : "memory");
    }
}

/// Row @p key of dK (@p which = 0) or dV (1) of the block's KV head, 16-bit.
template <class T>
__device__ __forceinline__ T* grad_row(void* base, const AttnParams& p, const BlockWork& work,
                                       int key, int which) {
  const int64_t batch_stride = which ? p.v_batch_stride : p.k_batch_stride;
  const int64_t head_stride = which ? p.v_head_stride : p.k_head_stride;
  const int64_t row_stride = which ? p.v_row_stride : p.k_row_stride;
  return static_cast<T*>(base) + work.batch * batch_stride + work.kv_head * head_stride +
         int64_t(work.k_tok0 + key) * row_stride;
}

/// Row @p key of a split group's fp32 partial dK (@p which = 0) or dV (1): rung 11's
/// [2][kv_split][key_rows, heads_kv, d], slice work.slice. Only with V's head_dim equal to Q's
/// (launch_backward refuses a split group otherwise: rung 11's convert writes d columns of dV).
__device__ __forceinline__ float* dkv_partial(const AttnBwdParams& P, const BwdBuffers& buf,
                                              const BlockWork& work, int key, int which) {
  const AttnParams& p = P.fwd;
  const int64_t part = buf.key_rows * p.heads_kv * p.head_dim;
  return buf.dkv_acc + (which * buf.kv_split + work.slice) * part +
         ((work.key_row0(p) + key) * p.heads_kv + work.kv_head) * p.head_dim;
}

/// A math thread's dK_j or dV_j accumulators (traits.h: kDkvTiles of m64 x kDkvN).
template <class Cfg>
using DkvRegs = float[Cfg::kDkvTiles][Cfg::kDkvN / 2];

/// dK_j (times @p scale) and dV_j of a whole K/V block out by TMA (BwdBuffers::tma_dkv; every
/// head_dim). Each thread's stores straight from its accumulators are 4 bytes of 8 rows per warp
/// instruction, half-sector writes, and the math warps cannot go on to the next block until they
/// issued them all: 4.4 to 5.6 us per K/V block at d = 128 on the H200 (README, "dK and dV by
/// TMA"). Here the math warps stage the tiles in shared memory in the maps' 128-byte swizzle (the
/// layout K_j and V_j load in; a warp's 4-byte stores then hit 32 banks), and one thread hands them
/// to the TMA unit. The staging is the dS^T tiles' place, free once both warpgroups' last GEMMs
/// are done (the first barrier): 32 KB at d = 128 (dK, then dV once the copy engine has read dK),
/// 64 KB at d = 64 (both at once). At d = 256 (dK^T, dV^T: a warpgroup holds 128 of the dims of
/// all 64 keys) the place is 16 KB, two of the block's 64-column boxes: each warpgroup stages one
/// box of its dims at a time, 16-bit stores (a register is one element), four turns in all.
/// The last copy's read is waited for before the next block's
/// first dS^T store (dkv_wait_staged), not here; or, if the block had no step (@p pending: no dS^T
/// store came between), before this one's staging. @p issuer: the thread that issues the copies.
template <class T, class Cfg>
__device__ __forceinline__ void store_dkv_tma(const BwdSmem<Cfg>& sm, const CUtensorMap* map_dk,
                                              const CUtensorMap* map_dv, const BlockWork& work, int batch,
                                              float scale, const DkvRegs<Cfg>& dK, const DkvRegs<Cfg>& dV,
                                              int w, int warp, int g, int q, bool issuer, bool pending) {
  constexpr int D = Cfg::kHeadDim, TILE = Cfg::kKBytes;
  constexpr int kStaging = Cfg::kDsBufs * Cfg::kDsBytes;
  constexpr int kPasses = kStaging >= 2 * TILE ? 1 : 2;
  const uint32_t stage = sm.dS(0);
  if (pending && issuer) bulk_wait_group_read<0>();
  named_barrier_sync(kDsReady, kMathThreads);  // both warpgroups' GEMMs (and the last copies) have read the place
  if constexpr (Cfg::kDkvT) {
    // Register (t, 4 c + 2 hh + e2) of warpgroup w: dim 128 w + 64 t + 16 warp + g + 8 hh, key
    // 8 c + 2 q + e2 (store_dkv_transposed). Turn (tensor, t): box 2 w + t of each warpgroup.
    constexpr int BOX = Cfg::kBlockN * 128;
    static_assert(kStaging >= 2 * BOX, "one box per warpgroup fits the dS^T tiles' place");
#pragma unroll
    for (int turn = 0; turn < 2 * Cfg::kDkvTiles; ++turn) {
      const int tensor = turn / Cfg::kDkvTiles, t = turn % Cfg::kDkvTiles;
      if (turn > 0) {  // the last turn's boxes read
        if (issuer) bulk_wait_group_read<0>();
        named_barrier_sync(kDsReady, kMathThreads);
      }
      const float mul = tensor == 0 ? scale : 1.f;
      const auto& acc = tensor == 0 ? dK : dV;
#pragma unroll
      for (int c = 0; c < Cfg::kDkvN / 8; ++c)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh)
#pragma unroll
          for (int e2 = 0; e2 < 2; ++e2) {
            const T v = from_float<T>(acc[t][4 * c + 2 * hh + e2] * mul);
            const uint32_t off = (8 * c + 2 * q + e2) * 128 + (16 * warp + g + 8 * hh) * 2;
            asm volatile("st.shared.b16 [%0], %1;\n" ::"r"(stage + w * BOX + wg::sw128(off)),
                         "h"(*reinterpret_cast<const unsigned short*>(&v))
                         : "memory");
          }
      fence_proxy_async_smem();
      named_barrier_sync(kDsReady, kMathThreads);
      if (issuer) {
#pragma unroll
        for (int ww = 0; ww < 2; ++ww)
          tma_store_4d(tensor == 0 ? map_dk : map_dv, stage + ww * BOX, 128 * ww + 64 * t, work.kv_head,
                       work.k_tok0 + work.key0, batch);
        bulk_commit_group();
      }
    }
  } else {
    static_assert(kStaging >= TILE, "a dK or dV tile fits the dS^T tiles' place");
#pragma unroll
    for (int t = 0; t < 2; ++t) {  // t = 0: dK, 1: dV
      const uint32_t tile = stage + (kPasses == 1 ? t * TILE : 0);
      const float mul = t == 0 ? scale : 1.f;
      const auto& acc = t == 0 ? dK : dV;
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int key = 64 * w + 16 * warp + g + 8 * hh;
#pragma unroll
        for (int c = 0; c < D / 8; ++c) {
          const int col = 8 * c + 2 * q;
          const uint32_t off = (col / 64) * Cfg::kBlockN * 128 + key * 128 + (col % 64) * 2;
          asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(tile + wg::sw128(off)),
                       "r"(pack2<T>(acc[0][4 * c + 2 * hh] * mul, acc[0][4 * c + 2 * hh + 1] * mul))
                       : "memory");
        }
      }
      if (kPasses == 2 || t == 1) {
        fence_proxy_async_smem();
        named_barrier_sync(kDsReady, kMathThreads);  // the tile (or both) staged
        if (issuer) {
#pragma unroll
          for (int tt = kPasses == 1 ? 0 : t; tt <= t; ++tt)
#pragma unroll
            for (int cb = 0; cb < Cfg::kColBlocks; ++cb)
              tma_store_4d(tt == 0 ? map_dk : map_dv, stage + (kPasses == 1 ? tt * TILE : 0) + cb * Cfg::kBlockN * 128,
                           64 * cb, work.kv_head, work.k_tok0 + work.key0, batch);
          bulk_commit_group();
        }
        if (kPasses == 2 && t == 0) {  // dV goes where dK was, once the copy engine has read it
          if (issuer) bulk_wait_group_read<0>();
          named_barrier_sync(kDsReady, kMathThreads);
        }
      }
    }
  }
}

/// Before a block's first dS^T store after store_dkv_tma: the copy engine has read the staged
/// tiles (the issuer waits, the barrier tells the other math threads).
__device__ __forceinline__ void dkv_wait_staged(bool issuer) {
  if (issuer) bulk_wait_group_read<0>();
  named_barrier_sync(kDsReady, kMathThreads);
}

/// d = 256's dK^T, dV^T out: accumulator t of warpgroup w holds dims 128 w + 64 t + 16 warp + g
/// + 8 (e / 2) of keys key0 + 8c + 2q + e % 2 (register 4c + e), so each register is one element
/// of a [key][dim] row and a warp's store covers 8 dims of 4 keys. Once per block, against the
/// whole walk over the query blocks: plain stores, no transpose through shared memory.
template <class T, class Cfg>
__device__ __forceinline__ void store_dkv_transposed(const AttnBwdParams& P, const BwdBuffers& buf,
                                                     const BlockWork& work, const DkvRegs<Cfg>& dK,
                                                     const DkvRegs<Cfg>& dV, int w, int warp, int g,
                                                     int q) {
  const AttnParams& p = P.fwd;
  const int dv_cols = p.dv();  // dV's columns: V's head_dim, at most head_dim (MLA's 128 of 192)
#pragma unroll
  for (int c = 0; c < Cfg::kDkvN / 8; ++c)
#pragma unroll
    for (int e2 = 0; e2 < 2; ++e2) {
      const int key = work.key0 + 8 * c + 2 * q + e2;
      if (key >= work.len_k) continue;
      if (buf.kv_split > 1) {
        float *dk = dkv_partial(P, buf, work, key, 0), *dv = dkv_partial(P, buf, work, key, 1);
#pragma unroll
        for (int t = 0; t < Cfg::kDkvTiles; ++t)
#pragma unroll
          for (int hh = 0; hh < 2; ++hh) {
            const int dim = 128 * w + 64 * t + 16 * warp + g + 8 * hh;
            if (dim >= p.head_dim) continue;  // a head_dim below the tile's: zero columns
            dk[dim] = dK[t][4 * c + 2 * hh + e2];
            dv[dim] = dV[t][4 * c + 2 * hh + e2];
          }
        continue;
      }
      T *dk = grad_row<T>(P.dk, p, work, key, 0), *dv = grad_row<T>(P.dv, p, work, key, 1);
#pragma unroll
      for (int t = 0; t < Cfg::kDkvTiles; ++t)
#pragma unroll
        for (int hh = 0; hh < 2; ++hh) {
          const int dim = 128 * w + 64 * t + 16 * warp + g + 8 * hh;
          if (dim >= p.head_dim) continue;
          dk[dim] = from_float<T>(dK[t][4 * c + 2 * hh + e2] * p.softmax_scale);
          if (dim < dv_cols) dv[dim] = from_float<T>(dV[t][4 * c + 2 * hh + e2]);  // zeros past it
        }
    }
}

// ---- fp8-dq: dQ_i = dS K_j on e4m3 wgmma (Cfg::kFp8Dq; README, "dQ in e4m3") ------------------

/// Two floats, times @p inv.x and @p inv.y, to e4m3 (saturating): the first in the low byte.
__device__ __forceinline__ uint32_t e4m3x2(float a, float b, float2 inv) {
  return __nv_cvt_float2_to_fp8x2(make_float2(a * inv.x, b * inv.y), __NV_SATFINITE, __NV_E4M3);
}
__device__ __forceinline__ uint32_t e4m3x2(float a, float b, float inv) { return e4m3x2(a, b, make_float2(inv, inv)); }

/// The scale that maps an |max| of @p amax onto e4m3's largest finite value, 448 (1 for a tile of
/// zeros, which any scale leaves zero), floored at fp32's smallest normal: where the softmax has
/// all but vanished dS's |max| can be subnormal, amax / 448 would round to 0 and its inverse to
/// infinity (rung 13's README: the emulation floors its scales the same way). A multiply by
/// 1 / 448, not a division: an IEEE division is a called subroutine in SASS (FCHK, CALL), and a
/// scale an ulp off 448's only moves the tile's largest value an ulp (the conversion saturates).
__device__ __forceinline__ float e4m3_scale(float amax) {
  return amax > 0.f ? fmaxf(amax * (1.f / 448.f), 1.17549435e-38f) : 1.f;
}

/// 1 / @p scale of e4m3_scale, by the fast reciprocal (MUFU.RCP, within 2 ulp): the values are multiplied
/// by it before their conversion, and dequantized by @p scale itself.
__device__ __forceinline__ float e4m3_inv(float scale) { return __fdividef(1.f, scale); }

/// The |max| over the 256 math threads of @p v: a warp's by shuffles, then the 8 warps' through
/// row @p row of the amax slots and one named barrier. Every math thread gets it.
template <class Cfg>
__device__ __forceinline__ float math_amax(const BwdSmem<Cfg>& sm, float v, int row, int math_warp) {
#pragma unroll
  for (int s = 16; s > 0; s >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, s));
  if (threadIdx.x % 32 == 0)
    asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(sm.amax(row) + 4 * math_warp), "f"(v) : "memory");
  named_barrier_sync(kAmaxReady, kMathThreads);
  float m = 0.f;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    float x;
    asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(x) : "r"(sm.amax(row) + 4 * i) : "memory");
    m = fmaxf(m, x);
  }
  return m;
}

/// K_j^T in e4m3, once per block, by the 256 math threads (@p mt = 128 w + thread of the
/// warpgroup): its |max| over the block, then every element (key k, dim c) divided by the scale
/// and written at row c, byte k of the [d][128 keys] tile (128B swizzle, K-major: dQ's B).
/// A thread takes units of 4 keys by 2 dims: four 4-byte loads of the 16-bit K tile, two 4-byte
/// stores of e4m3 (dims c and c + 1, keys 4 kg ..). A warp's 32 units are 4 key groups by 8 dim
/// pairs, so that its loads and stores each meet at most two-way bank conflicts.
/// Returns the scale (K_j = scale x the e4m3 values). The tile is read by wgmma after the step's
/// proxy fence and kDsReady barrier.
template <class T, class Cfg>
__device__ __forceinline__ float build_kt_e4m3(const BwdSmem<Cfg>& sm, int mt) {
  constexpr int D = Cfg::kHeadDim, N = Cfg::kBlockN, UNITS = (N / 4) * (D / 2);
  static_assert(N == 128 && D % 16 == 0, "K_j^T's rows are 128 keys of one byte");
  // Unit u: key group kg (keys 4 kg .. 4 kg + 3), dim pair cp (dims 2 cp, 2 cp + 1).
  auto kg_of = [](int u) { return u % 4 + 4 * ((u / 32) % (N / 16)); };
  auto cp_of = [](int u) { return (u / 4) % 8 + 8 * (u / (2 * N)); };
  // Key k, dims c and c + 1 in the 16-bit K tile (64-column blocks of 128-byte rows).
  auto at = [&](int k, int c) { return sm.K() + wg::sw128((c / 64) * N * 128 + k * 128 + (c % 64) * 2); };
  auto load4 = [&](int u, uint32_t (&v)[4]) {
#pragma unroll
    for (int i = 0; i < 4; ++i)
      asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(v[i]) : "r"(at(4 * kg_of(u) + i, 2 * cp_of(u))));
  };
  float amax = 0.f;
  for (int u = mt; u < UNITS; u += kMathThreads) {
    uint32_t v[4];
    load4(u, v);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = unpack2<T>(v[i]);
      amax = fmaxf(amax, fmaxf(fabsf(f.x), fabsf(f.y)));
    }
  }
  const float scale = e4m3_scale(math_amax(sm, amax, 0, mt / 32));
  const float inv = e4m3_inv(scale);
  for (int u = mt; u < UNITS; u += kMathThreads) {
    uint32_t v[4];
    load4(u, v);
    uint32_t b[4];  // key 4 kg + i: dim c in the low byte, c + 1 in the next
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float2 f = unpack2<T>(v[i]);
      b[i] = e4m3x2(f.x, f.y, inv);
    }
    const uint32_t lo = b[0] | (b[1] << 16), hi = b[2] | (b[3] << 16);
    const int c = 2 * cp_of(u), k = 4 * kg_of(u);
    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(sm.Kt() + wg::sw128(c * N + k)), "r"(__byte_perm(lo, hi, 0x6420))
                 : "memory");
    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(sm.Kt() + wg::sw128((c + 1) * N + k)),
                 "r"(__byte_perm(lo, hi, 0x7531)) : "memory");
  }
  return scale;
}

/// The larger of two packed 16-bit pairs, lane by lane (HMNMX2).
template <class T>
__device__ __forceinline__ uint32_t max2(uint32_t a, uint32_t b) {
  using T2 = std::conditional_t<std::is_same_v<T, __half>, __half2, __nv_bfloat162>;
  const T2 m = __hmax2(*reinterpret_cast<const T2*>(&a), *reinterpret_cast<const T2*>(&b));
  return *reinterpret_cast<const uint32_t*>(&m);
}
/// |x| of a packed 16-bit pair (fp16 and bf16 alike: the sign bits cleared, one LOP3).
__device__ __forceinline__ uint32_t abs2(uint32_t x) { return x & 0x7fff7fffu; }

/// fp8-dq, a scale per query row: the |max| of this warp's 16 keys of each of the 16 queries
/// 16 kk .. of the step's dS^T, into shared memory ([warp][query], 16-bit). The maxima are taken
/// on the packed 16-bit dS, two columns an instruction, the values store_ds_e4m3 converts. @p a
/// is the thread's 16-bit dS of kk (store_ds_e4m3's a[kk]): a[c2 * 2 + h] holds columns
/// 16 kk + 8 c2 + 2 q, + 1 of key 16 warp + g + 8 h. The thread's |max| over its two keys gives
/// two pairs (c2 = 0, 1); across lane bit 4 a lane keeps the pair its bit names and takes its
/// partner's |max| of it, across bits 3 and 2 the eight lanes of one q end with the same pair:
/// 3 shuffles for 16 columns, and lanes with bits 2 and 3 clear store one pair each.
template <class T>
__device__ __forceinline__ uint32_t ds_warp_max(const uint32_t (&a)[4], int lane) {
  const bool hi = lane & 16;
  const uint32_t m0 = max2<T>(abs2(a[0]), abs2(a[1])), m1 = max2<T>(abs2(a[2]), abs2(a[3]));  // columns + 0, + 8 ..
  uint32_t m = max2<T>(hi ? m1 : m0, __shfl_xor_sync(0xffffffffu, hi ? m0 : m1, 16));
  m = max2<T>(m, __shfl_xor_sync(0xffffffffu, m, 8));
  return max2<T>(m, __shfl_xor_sync(0xffffffffu, m, 4));
}
/// ds_warp_max's pair of columns 16 kk + 8 (lane bit 4) + 2 q, + 1, stored by the lanes with bits 2
/// and 3 clear (after every group's maxima are taken, so that their shuffle chains overlap).
template <class Cfg>
__device__ __forceinline__ void ds_warp_max_store(const BwdSmem<Cfg>& sm, uint32_t m, int kk, int math_warp, int lane) {
  if ((lane & 12) == 0)
    asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(sm.ds_warp_max(math_warp, 16 * kk + 8 * ((lane >> 4) & 1) + 2 * (lane % 4))),
                 "r"(m) : "memory");
}

/// fp8-dq, a scale per query row, after ds_warp_max_store of every column by every math warp
/// (@p mt = 128 w + thread of the warpgroup): one thread per query takes the 8 warps' |max| of its
/// row (the block's 128 keys) and writes the row's scale and inverse; every math thread may read
/// them on return (two barriers: the warps' maxima in, the scales out).
template <class T, class Cfg>
__device__ __forceinline__ void ds_row_scales(const BwdSmem<Cfg>& sm, int mt) {
  named_barrier_sync(kAmaxReady, kMathThreads);
  if (mt < Cfg::kBlockM) {
    uint32_t m = 0;  // the row's |max| in the low half (the values are magnitudes already)
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      uint16_t x;
      asm volatile("ld.shared.u16 %0, [%1];\n" : "=h"(x) : "r"(sm.ds_warp_max(i, mt)) : "memory");
      m = max2<T>(m, x);
    }
    const float scale = e4m3_scale(unpack2<T>(m).x);
    asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(sm.ds_scale(mt)), "f"(scale) : "memory");
    asm volatile("st.shared.f32 [%0], %1;\n" ::"r"(sm.ds_inv(mt)), "f"(e4m3_inv(scale)) : "memory");
  }
  named_barrier_sync(kAmaxReady, kMathThreads);
}

/// The step's dS in e4m3 for dQ = dS K_j: the warpgroup's dS^T A fragments @p a (16-bit, as
/// store_keys_by_queries takes them: a[kk][i] holds columns (queries) 16 kk + 8 (i / 2) + 2q, + 1
/// of row (key) 16 warp + g + 8 (i % 2), offset by kSKey0(w), kSCol0(w)) times @p inv, written
/// transposed: row = query, byte = key of the [BLOCK_M][128 keys] tile (128B swizzle, K-major:
/// dQ's A). The 16-bit rounding first, as the 16-bit path has it; then e4m3's. @p inv_of(kk, c)
/// gives the inverse scales of columns 16 kk + 8 c + 2 q and + 1 (the tile's one, or each query
/// row's).
///
/// A thread's four bytes of one key (queries c, c + 1, c + 8, c + 9) become, between the four
/// lanes that hold keys 4 (g / 4) .. + 3 (g ^ 1: lane ^ 4, g ^ 2: lane ^ 8), one query's four
/// keys: a 4 x 4 byte transpose in two shuffles and two byte permutes, so that each lane stores
/// a 4-byte word (the 128B swizzle moves 16-byte chunks, which keeps a word whole) where it
/// stored four single bytes. Lane r = g % 4 ends with query c + (r % 2) + 8 (r / 2).
template <class T, class Cfg, class INV>
__device__ __forceinline__ void store_ds_e4m3(uint32_t tile, const uint32_t (&a)[Cfg::kSN / 16][4], const INV& inv_of,
                                              int w, int warp, int g, int q) {
  const int r = g % 4;
  const uint32_t sel1 = (r & 1) ? 0x3715u : 0x6240u;  // odd: queries 1, 3 of keys r - 1, r; even: 0, 2 of r, r + 1
  const uint32_t sel2 = (r & 2) ? 0x3276u : 0x5410u;  // keys 0, 1 of the pair below, then 2, 3
  const int jcol = (r & 1) + 8 * (r >> 1);
#pragma unroll
  for (int kk = 0; kk < Cfg::kSN / 16; ++kk) {
    const float2 inv0 = inv_of(kk, 0), inv1 = inv_of(kk, 1);
#pragma unroll
    for (int h = 0; h < 2; ++h) {  // key 16 warp + g + 8 h: fragments i = h (queries c, c + 1), h + 2 (c + 8, c + 9)
      const float2 f0 = unpack2<T>(a[kk][h]), f1 = unpack2<T>(a[kk][h + 2]);
      const uint32_t x = e4m3x2(f0.x, f0.y, inv0) | (e4m3x2(f1.x, f1.y, inv1) << 16);
      const uint32_t z = __byte_perm(x, __shfl_xor_sync(0xffffffffu, x, 4), sel1);
      const uint32_t y = __byte_perm(z, __shfl_xor_sync(0xffffffffu, z, 8), sel2);
      const int key = frag_key<Cfg>(w, warp, g & ~3, h), col = frag_col<Cfg>(w, q, kk, 0) + jcol;
      asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(tile + wg::sw128(col * Cfg::kBlockN + key)), "r"(y) : "memory");
    }
  }
}

/// The backward kernel. Grid: (K/V blocks, heads_kv x kv_split, batch); Cfg::kThreads threads.
/// WRITER: the dQ share goes through shared memory to a bulk reduce-add (else fp32 atomics from
/// the math warps: the `atomic-dq` ablation). MODS: the mask and scores (CausalOrNone: rung 14's).
template <class T, class Cfg, bool WRITER, class MODS = CausalOrNone>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    bwd_hopper_kernel(const __grid_constant__ CUtensorMap map_q,
                      const __grid_constant__ CUtensorMap map_k,
                      const __grid_constant__ CUtensorMap map_v,
                      const __grid_constant__ CUtensorMap map_do,
                      const __grid_constant__ CUtensorMap map_dk,
                      const __grid_constant__ CUtensorMap map_dv, const AttnBwdParams P,
                      const BwdBuffers buf, const MODS mods_arg) {
  constexpr int D = Cfg::kHeadDim;
  constexpr int BLOCK_M = Cfg::kBlockM;
  constexpr int BLOCK_N = Cfg::kBlockN;
  constexpr int STAGES = Cfg::kStages;
  constexpr bool WS = Cfg::kWarpSpecialized;
  constexpr int SN = Cfg::kSN;  // queries of a warpgroup's S^T, dP^T
  const AttnParams& p = P.fwd;
  const bool deterministic = P.deterministic != 0;

  // The block's K/V block; persistent (rung_grid_persistent): its first tile of the grid, then
  // the tile counter's next (the loader's tile ring), each role walking the same tiles in order.
  constexpr bool PERSISTENT = Cfg::kPersistent;
  const int n_tiles = PERSISTENT ? buf.tiles_x * buf.tiles_y * buf.tiles_z : 1;
  const int tile0 = PERSISTENT ? static_cast<int>(blockIdx.x) : 0;
  // The one-block-per-K/V-block grid in longest-first order (BwdBuffers::lpt_section: the rung's
  // sections and the lpt-* ablations; the warp-specialized kernel with rung 14's masks only): the
  // block's own index in the grid's order, read by grid_coords, the K/V block slowest in a section.
  auto work_of = [&](int t) {
    if constexpr (PERSISTENT) {
      return BlockWork(p, buf.head_rows, buf.kv_split, BLOCK_M, BLOCK_N, deterministic, buf.rotated_walk,
                       t % buf.tiles_x,
                       (t / buf.tiles_x) % buf.tiles_y, t / (buf.tiles_x * buf.tiles_y));
    } else {
      if constexpr (WS && !MODS::kSpans) {  // rung 14's own masks (rung 16's keep the hardware's order)
        if (buf.lpt_section > 0) {
          const GridCoord c = grid_coords(static_cast<int>(blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z)),
                                          buf.tiles_x, buf.tiles_y, buf.tiles_z, buf.lpt_section);
          return BlockWork(p, buf.head_rows, buf.kv_split, BLOCK_M, BLOCK_N, deterministic, buf.rotated_walk, c.x,
                           c.y, c.z);
        }
      }
      return BlockWork(p, buf.head_rows, buf.kv_split, BLOCK_M, BLOCK_N, deterministic, buf.rotated_walk);
    }
  };
  BlockWork work = work_of(tile0);
  if constexpr (!PERSISTENT) {
    if (!work.active) return;  // a packed sequence shorter than the grid's longest: no such K/V block
  }
  MODS mods = mods_arg;
  mods.set_block(work);
  work.walk(mods.query_rows(work.key0, min(work.key0 + BLOCK_N, work.len_k) - 1), BLOCK_M);
  // Persistent: tile t's work and mask in place of the last (a tile of a packed sequence past its
  // keys has no step, and every role skips it).
  auto set_tile = [&](int t) {
    work = work_of(t);
    mods = mods_arg;
    mods.set_block(work);
    work.walk(mods.query_rows(work.key0, min(work.key0 + BLOCK_N, work.len_k) - 1), BLOCK_M);
  };
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const BwdSmem<Cfg> sm(smem_raw);
  // Persistent: the k-th tile of the block's walk, from the loader's tile ring (every math thread
  // and the writer warp read each slot, then free it).
  auto read_tile = [&](int k) {
    mbarrier_wait_parity(sm.tile_full(k & 1), (k >> 1) & 1);
    int t;
    asm volatile("ld.shared.b32 %0, [%1];\n" : "=r"(t) : "r"(sm.tile_slot(k & 1)) : "memory");
    mbarrier_arrive(sm.tile_empty(k & 1));
    return t;
  };
  const Loads<Cfg> loads{&map_q,       &map_k,    &map_v,        &map_do,
                         buf.lse_log2, buf.delta, buf.head_rows, p.cu_seqlens_q != nullptr,
                         buf.rotated_walk};
  const int tid = threadIdx.x;

  if (tid == 0) {
    tma_prefetch_map(&map_q);
    tma_prefetch_map(&map_k);
    tma_prefetch_map(&map_v);
    tma_prefetch_map(&map_do);
    mbarrier_init(sm.kv_full(), 1);
    for (int s = 0; s < STAGES; ++s) {
      mbarrier_init(sm.q_full(s), 1);
      mbarrier_init(sm.do_full(s), 1);
      // Every math thread arrives: each reads LSE_i and D_i itself (plain loads) and releases what
      // it read (CUTLASS's consumer_release; with one arrival per warp or per warpgroup after a
      // barrier, racecheck reports the refill as a race).
      mbarrier_init(sm.q_empty(s), kMathThreads);
      if (Cfg::kSplitRelease) mbarrier_init(sm.do_empty(s), kMathThreads);
    }
    if (PERSISTENT) {
      mbarrier_init(sm.kv_empty(), kMathThreads);
      for (int k = 0; k < 2; ++k) {
        mbarrier_init(sm.tile_full(k), 1);
        mbarrier_init(sm.tile_empty(k), kMathThreads + (WRITER ? 32 : 0));
      }
    }
    fence_mbarrier_init();
  }
  __syncthreads();

  const int wg_idx = warpgroup_index();
  if constexpr (WS) {
    if (wg_idx == 0) {
      // ---- producer warpgroup: warp 0 loads, warp 1 writes dQ, warps 2 and 3 idle
      // ----------------
      setmaxnreg_dec<kProducerRegs>();
      const int warp = tid / 32;
      if constexpr (PERSISTENT) {
        // The same two roles over the block's tiles. The loader takes them (tile0, then the tile
        // counter's next, in the grid's order: the hardware's for a non-persistent grid) and
        // publishes each in the two-slot tile ring before its loads, a tile >= n_tiles ending the
        // walk. The Q/dO ring goes on from tile to tile (step gs in all): the next K/V block's
        // first Q_i, dO_i load into the stage the last block's next-to-last step freed while its
        // last step runs, and its K_j, V_j once the math warps release the last block's
        // (kv_empty), while they write its dK, dV.
        if (warp == 0 && tid == 0) {
          int gs = 0, round = 0, t = tile0;
#pragma unroll 1
          for (int k = 0;; ++k) {
            if (k >= 2) mbarrier_wait_parity(sm.tile_empty(k & 1), ((k >> 1) - 1) & 1);  // read by all
            asm volatile("st.shared.b32 [%0], %1;\n" ::"r"(sm.tile_slot(k & 1)), "r"(t) : "memory");
            mbarrier_arrive(sm.tile_full(k & 1));
            if (t >= n_tiles) break;
            set_tile(t);
            if (work.steps > 0) {
              loads.step(sm, work, 0, gs);
              if (round > 0) mbarrier_wait_parity(sm.kv_empty(), (round - 1) & 1);
              loads.kv(sm, work);
#pragma unroll 1
              for (int it = 1; it < work.steps; ++it) loads.step(sm, work, it, gs + it);
              gs += work.steps;
              ++round;
            }
            t = atomicAdd(buf.tile_counter, 1) + static_cast<int>(gridDim.x);
          }
        } else if (warp == 1 && WRITER) {
          // The hand-off as the rung's writer runs it, over the tiles the ring gives: the tile
          // starts free, and each add frees it again, the last too (the math warps take that last
          // phase once the ring says the walk is over).
          named_barrier_arrive(kDqEmpty, kDqHandoff);
#pragma unroll 1
          for (int k = 0;; ++k) {
            const int t = read_tile(k);
            if (t >= n_tiles) break;
            set_tile(t);
#pragma unroll 1
            for (int it = 0; it < work.steps; ++it) {
              named_barrier_sync(kDqFull, kDqHandoff);
              int* turn = nullptr;
              if (tid == 32) turn = add_dq_tile<Cfg>(sm, buf, p, work, mods, it, deterministic, buf.early_free);
              __syncwarp();
              named_barrier_arrive(kDqEmpty, kDqHandoff);
              if (tid == 32 && turn != nullptr) release_dq_turn(turn, work.j + 1);
              __syncwarp();
            }
          }
          if (tid == 32) bulk_wait_group<0>();
        }
      } else if (warp == 0 && tid == 0 && work.steps > 0) {
        loads.kv(sm, work);
#pragma unroll 1
        for (int it = 0; it < work.steps; ++it) loads.step(sm, work, it, it);
      } else if (warp == 1 && WRITER && work.steps > 0) {
        // LAB-BEGIN(14-writer-loop): the writer warp's side of the dQ hand-off, step by step
        named_barrier_arrive(kDqEmpty, kDqHandoff);  // the tile starts free
#pragma unroll 1
        for (int it = 0; it < work.steps; ++it) {
          named_barrier_sync(kDqFull, kDqHandoff);  // the math warps' share is in shared memory
          int* turn = nullptr;  // deterministic, early_free: the counter to move once the add lands
          if (tid == 32)
            turn = add_dq_tile<Cfg>(sm, buf, p, work, mods, it, deterministic, buf.early_free);
          __syncwarp();
          if (it + 1 < work.steps) named_barrier_arrive(kDqEmpty, kDqHandoff);
          if (tid == 32 && turn != nullptr)
            release_dq_turn(turn, work.j + 1);  // the math warps go on
          __syncwarp();
        }
        if (tid == 32) bulk_wait_group<0>();
        // LAB-END(14-writer-loop)
      }
      return;
    }
    setmaxnreg_inc<kMathRegs>();
  }

  // ---- math warpgroups: 64 keys each (d = 256: 128 dims each)
  // ---------------------------------------
  const int w = WS ? wg_idx - 1
                   : wg_idx;   // keys key0 + 64 w .. (d = 256: queries q0 + 32 w .., dims 128 w ..)
  const int mtid = tid % 128;  // thread of the warpgroup
  const int warp = mtid / 32, lane = tid % 32, g = lane / 4, q = lane % 4;
  const bool loader =
      !WS && tid == 0;  // the no-ws ablation: this thread issues the loads and dQ adds
  const float scale_log2 = p.scale_log2;
  // One K/V block's walk, its steps being the block's steps gs0 .. in all (the ring's stages, the
  // dS tiles), and its K_j, V_j the load of parity kv_parity (persistent: the block's tiles in
  // turn; else one call, gs0 = 0).
  // store_dkv_tma's issuer, and whether its last copy may still read the dS^T tiles' place.
  const bool dkv_issuer = w == 0 && mtid == 0;
  bool dkv_staged = false;
  auto math_block = [&](int gs0, uint32_t kv_parity) {
    {  // the thread's two keys of S^T (rows 16 warp + g and + 8 of its warpgroup's 64)
      const int wg_key0 = work.key0 + Cfg::kSKey0(w);
      mods.set_keys(wg_key0, wg_key0 + 16 * warp + g, wg_key0 + 16 * warp + g + 8);
    }

    // dK_j, dV_j: [0] is 64 keys x d; at d = 256 [t] is dims 128 w + 64 t .. x 64 keys (transposed).
    DkvRegs<Cfg> dK, dV;
#pragma unroll
    for (int t = 0; t < Cfg::kDkvTiles; ++t)
#pragma unroll
      for (int r = 0; r < Cfg::kDkvN / 2; ++r) dK[t][r] = dV[t][r] = 0.f;

    if (work.steps > 0) {
      if (loader) {
        loads.kv(sm, work);
        for (int it = 0; it < min(STAGES - 1, work.steps); ++it) loads.step(sm, work, it, gs0 + it);
        if (STAGES == 1) loads.step(sm, work, 0, gs0);
      }
      mbarrier_wait_parity(sm.kv_full(), kv_parity);
    }
    // fp8-dq: K_j^T in e4m3 and its scale, once for the whole walk (every math thread, so the
    // barrier inside counts all 256; a block with no step has nothing to transpose).
    float k_scale = 1.f;
    if constexpr (Cfg::kFp8Dq) {
      if (work.steps > 0) k_scale = build_kt_e4m3<T, Cfg>(sm, 128 * w + mtid);
    }

#pragma unroll 1
    for (int it = 0; it < work.steps; ++it) {
      const int gs = gs0 + it;  // the block's step in all
      const int s = gs % STAGES;
      const uint32_t phase = (gs / STAGES) & 1;
      if (loader && STAGES > 1 && it + STAGES - 1 < work.steps)
        loads.step(sm, work, it + STAGES - 1, gs + STAGES - 1);
      const int q0 = work.q_block(it, buf.rotated_walk) * BLOCK_M;
      const int s_key0 = Cfg::kSKey0(w),
                s_col0 = Cfg::kSCol0(w);  // this warpgroup's S^T: rows, columns
      mods.template set_step<SN>(work.head(it), q0 + s_col0);

      // S^T = K_j Q_i^T and dP^T = V_j dO_i^T (SS): two groups in flight. V and dO narrower than
      // the tile (V's head_dim below Q's: MLA's 128 of 192) come in as zeros past their columns (the
      // maps' own width), so dP^T sums zeros there and dV_j's columns past them stay zero.
      float S[SN / 2], dP[SN / 2];
      mbarrier_wait_parity(sm.q_full(s), phase);
      wgmma_fence_operand(S);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk)
        wgmma_ss<T, SN>(
            S, wg::desc_kmajor_sw128(sm.K() + wg::sw128_kmajor_offset(BLOCK_N, s_key0, kk)),
            wg::desc_kmajor_sw128(sm.Q(s) + wg::sw128_kmajor_offset(BLOCK_M, s_col0, kk)), kk > 0);
      wgmma_commit();
      mbarrier_wait_parity(sm.do_full(s), phase);
      wgmma_fence_operand(dP);
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk)
        wgmma_ss<T, SN>(
            dP, wg::desc_kmajor_sw128(sm.V() + wg::sw128_kmajor_offset(BLOCK_N, s_key0, kk)),
            wg::desc_kmajor_sw128(sm.dO(s) + wg::sw128_kmajor_offset(BLOCK_M, s_col0, kk)), kk > 0);
      wgmma_commit();

      // P^T = exp2(S^T scale log2e - LSE log2e) while dP^T runs, then dS^T = P^T ∘ (dP^T - D), both
      // packed to 16-bit A fragments 16 queries at a time (so that each fp32 P^T register dies as
      // soon as it is packed: at d = 64 the whole S^T and dP^T at once leave the math warps a
      // register short). MODS places the two (CausalOrNone: probs, then ds_of at the packing).
      const StepRows rows{
          reinterpret_cast<const float*>(smem_raw + (sm.lse(s) - smem_addr(smem_raw))) + s_col0,
          reinterpret_cast<const float*>(smem_raw + (sm.delta(s) - smem_addr(smem_raw))) + s_col0,
          q0 + s_col0, q, scale_log2};
      wgmma_wait<1>();  // S^T is in (groups complete in order); dP^T may still run
      wgmma_fence_operand(S);
      MODS::template p_while_dp<SN>(mods, S, rows);
      wgmma_wait<0>();
      wgmma_fence_operand(dP);
      MODS::template after_dp<SN>(mods, S, dP, rows);
      uint32_t Pa[SN / 16][4], dSa[SN / 16][4];
      float ds_amax = 0.f;  // fp8-dq, per tile: this thread's |max| of dS
#pragma unroll
      for (int kk = 0; kk < SN / 16; ++kk) {
        MODS::template ds_at_pack<SN>(mods, S, dP, rows, kk);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          Pa[kk][i] = pack2<T>(S[8 * kk + 2 * i], S[8 * kk + 2 * i + 1]);
          dSa[kk][i] = pack2<T>(dP[8 * kk + 2 * i], dP[8 * kk + 2 * i + 1]);
          if constexpr (Cfg::kFp8Dq && !Cfg::kDsRowScale)
            ds_amax = fmaxf(ds_amax, fmaxf(fabsf(dP[8 * kk + 2 * i]), fabsf(dP[8 * kk + 2 * i + 1])));
        }
      }
      if constexpr (Cfg::kDsRowScale) {  // every group's maxima first, then their stores
        uint32_t m[SN / 16];
#pragma unroll
        for (int kk = 0; kk < SN / 16; ++kk) m[kk] = ds_warp_max<T>(dSa[kk], lane);
#pragma unroll
        for (int kk = 0; kk < SN / 16; ++kk) ds_warp_max_store(sm, m[kk], kk, 4 * w + warp, lane);
      }

      if (dkv_staged) {  // the last K/V block's dK, dV staged where dS^T goes (store_dkv_tma)
        dkv_wait_staged(dkv_issuer);
        dkv_staged = false;
      }
      const uint32_t dS_tile = sm.dS(gs % Cfg::kDsBufs);
      if (Cfg::kDsBufs == 1 && gs > 0)
        named_barrier_sync(kDsReady, kMathThreads);  // the last dQ read it
      if constexpr (!Cfg::kPSmem) {
        // dV_j += P^T dO_i (RS): P^T straight from the registers.
#pragma unroll
        for (int kk = 0; kk < BLOCK_M / 16; ++kk) wgmma_fence_operand(Pa[kk]);
        wgmma_fence_operand(dV[0]);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BLOCK_M / 16; ++kk)
          wgmma_rs<T, D, 1>(
              dV[0], Pa[kk],
              wg::desc_mnmajor_sw128(sm.dO(s) + wg::sw128_mnmajor_offset(BLOCK_M, 0, kk), BLOCK_M),
              1);
        wgmma_commit();
      } else {
        store_keys_by_queries<T, Cfg>(sm.Pt(), Pa, w, warp, g, q);
      }
      // dS^T to shared memory for dQ = dS K_j, which needs both warpgroups' keys. fp8-dq: dS in
      // e4m3, [query][key], scaled by each query row's |max| over both warpgroups (two barriers
      // more), or (fp8-dq-tile) by the tile's (one more).
      float ds_scale = 1.f, dq_row_scale[2] = {1.f, 1.f};
      if constexpr (Cfg::kDsRowScale) {
        ds_row_scales<T>(sm, 128 * w + mtid);
        // Every inverse this thread converts with, and its dQ rows' scales, loaded at once before the
        // first conversion (each group's load would otherwise wait behind the last group's stores).
        float2 inv[SN / 16][2];
#pragma unroll
        for (int kk = 0; kk < SN / 16; ++kk)
#pragma unroll
          for (int c = 0; c < 2; ++c)
            asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n"
                         : "=f"(inv[kk][c].x), "=f"(inv[kk][c].y) : "r"(sm.ds_inv(frag_col<Cfg>(w, q, kk, 2 * c))));
        {
          const int row = (Cfg::kDqSplitRows ? 64 * w : 0) + 16 * warp + g;
          asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(dq_row_scale[0]) : "r"(sm.ds_scale(row)));
          asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(dq_row_scale[1]) : "r"(sm.ds_scale(row + 8)));
        }
        store_ds_e4m3<T, Cfg>(dS_tile, dSa, [&](int kk, int c) { return inv[kk][c]; }, w, warp, g, q);
      } else if constexpr (Cfg::kFp8Dq) {
        ds_scale = e4m3_scale(math_amax(sm, ds_amax, 1 + gs % Cfg::kDsBufs, 4 * w + warp));
        const float inv = e4m3_inv(ds_scale);
        store_ds_e4m3<T, Cfg>(dS_tile, dSa, [inv](int, int) { return make_float2(inv, inv); }, w, warp, g, q);
      } else {
        store_keys_by_queries<T, Cfg>(dS_tile, dSa, w, warp, g, q);
      }
      fence_proxy_async_smem();
      named_barrier_sync(kDsReady, kMathThreads);

      float dQ[Cfg::kDqRegs];
#pragma unroll
      for (int t = 0; t < Cfg::kDkvTiles; ++t) wgmma_fence_operand(dK[t]);
      wgmma_fence_operand(dQ);
#pragma unroll
      for (int kk = 0; kk < SN / 16; ++kk) wgmma_fence_operand(dSa[kk]);
      wgmma_fence();
      if constexpr (Cfg::kDkvT) {
        // d = 256: dK_j^T += Q_i^T dS, then dV_j^T += dO_i^T P (SS): A = Q_i, dO_i read MN-major
        // (head_dim as M: this warpgroup's dims 128 w + 64 t ..), B = the dS^T, P^T tiles K-major.
        // One commit group each, so that Q and dO are released one after the other (below).
        auto transposed_gemm = [&](DkvRegs<Cfg>& acc, uint32_t a_tile, uint32_t b_tile) {
#pragma unroll
          for (int t = 0; t < Cfg::kDkvTiles; ++t) wgmma_fence_operand(acc[t]);
#pragma unroll
          for (int t = 0; t < Cfg::kDkvTiles; ++t)
#pragma unroll
            for (int kk = 0; kk < BLOCK_M / 16; ++kk) {
              const uint32_t dims = wg::sw128_mnmajor_offset(BLOCK_M, 128 * w + 64 * t, kk);
              wgmma_ss<T, BLOCK_N, 0, 1>(
                  acc[t], wg::desc_mnmajor_sw128(a_tile + dims, BLOCK_M),
                  wg::desc_kmajor_sw128(b_tile + wg::sw128_kmajor_offset(BLOCK_N, 0, kk)), 1);
            }
          wgmma_commit();
        };
        transposed_gemm(dK, sm.Q(s), dS_tile);
        transposed_gemm(dV, sm.dO(s), sm.Pt());
      }
      // dQ_i's share = dS K_j (SS): A = dS read MN-major (trans-a) from the [key][query] tile; this
      // warpgroup's 64 x kDqN of it: rows 64 w (a 128-query block) or columns kDqN w (a 64-query
      // block).
      const int m0 = Cfg::kDqSplitRows ? 64 * w : 0, n0 = Cfg::kDqSplitRows ? 0 : Cfg::kDqN * w;
      auto dq_gemm = [&] {
        if constexpr (Cfg::kFp8Dq) {
          // fp8-dq: A = dS [query][key] and B = K_j^T [dim][key], both K-major e4m3, 32 keys a step.
#pragma unroll
          for (int kk = 0; kk < BLOCK_N / 32; ++kk)
            wgmma_ss_e4m3<Cfg::kDqN>(dQ, wg::desc_kmajor_sw(dS_tile + wg::kmajor_offset(128, BLOCK_M, m0, 32 * kk), 128),
                                     wg::desc_kmajor_sw(sm.Kt() + wg::kmajor_offset(128, D, n0, 32 * kk), 128), kk > 0);
        } else {
#pragma unroll
          for (int kk = 0; kk < BLOCK_N / 16; ++kk)
            wgmma_ss<T, Cfg::kDqN, 1, 1>(
                dQ, wg::desc_mnmajor_sw128(dS_tile + wg::sw128_mnmajor_offset(BLOCK_N, m0, kk), BLOCK_N),
                wg::desc_mnmajor_sw128(sm.K() + wg::sw128_mnmajor_offset(BLOCK_N, n0, kk), BLOCK_N),
                kk > 0);
        }
      };
      if constexpr (Cfg::kDkvT) {
        dq_gemm();
        wgmma_commit();
        // Q_i, dO_i (and LSE_i, D_i, read by this thread) go back to the producer once the GEMMs
        // that read them are done: at d = 256 Q after dK^T, dO after dV^T, while dQ still runs.
        static_assert(Cfg::kSplitRelease, "d = 256 releases Q and dO apart");
        wgmma_wait<2>();
        mbarrier_arrive(sm.q_empty(s));
        wgmma_wait<1>();
        mbarrier_arrive(sm.do_empty(s));
        wgmma_wait<0>();
      } else {
        // dQ's GEMM first, then dK_j's in a group of its own: once dQ's share is in, it goes to the
        // writer (the stores and the fence below, which wait on the shared-memory queue) while
        // dK_j's GEMM still runs on the tensor cores (FlashAttention 3's order).
        dq_gemm();
        wgmma_commit();
        if constexpr (Cfg::kPSmem) {  // the ss-dkv ablation: P^T and dS^T as K-major A from shared
                                      // memory
#pragma unroll
          for (int kk = 0; kk < BLOCK_M / 16; ++kk)
            wgmma_ss<T, D, 1>(
                dV[0], wg::desc_kmajor_sw128(sm.Pt() + wg::sw128_kmajor_offset(BLOCK_N, 64 * w, kk)),
                wg::desc_mnmajor_sw128(sm.dO(s) + wg::sw128_mnmajor_offset(BLOCK_M, 0, kk), BLOCK_M),
                1);
#pragma unroll
          for (int kk = 0; kk < BLOCK_M / 16; ++kk)
            wgmma_ss<T, D, 1>(
                dK[0], wg::desc_kmajor_sw128(dS_tile + wg::sw128_kmajor_offset(BLOCK_N, 64 * w, kk)),
                wg::desc_mnmajor_sw128(sm.Q(s) + wg::sw128_mnmajor_offset(BLOCK_M, 0, kk), BLOCK_M), 1);
        } else {
          // dK_j += dS^T Q_i (RS).
#pragma unroll
          for (int kk = 0; kk < BLOCK_M / 16; ++kk)
            wgmma_rs<T, D, 1>(
                dK[0], dSa[kk],
                wg::desc_mnmajor_sw128(sm.Q(s) + wg::sw128_mnmajor_offset(BLOCK_M, 0, kk), BLOCK_M), 1);
        }
        wgmma_commit();
        wgmma_wait<1>();  // dQ's share is in (groups complete in order); dK_j's GEMM may still run
      }
      wgmma_fence_operand(dQ);
      if constexpr (Cfg::kDsRowScale) {  // the e4m3 operands' scales back in (fp32): registers r with
        // r % 4 < 2 hold row 16 warp + g of the share, the others row + 8 (dq_slot_coord)
        const float s0 = dq_row_scale[0] * k_scale, s1 = dq_row_scale[1] * k_scale;
#pragma unroll
        for (int r = 0; r < Cfg::kDqRegs; ++r) dQ[r] *= r % 4 < 2 ? s0 : s1;
      } else if constexpr (Cfg::kFp8Dq) {  // the e4m3 operands' scales back in (fp32)
        const float dq_scale = ds_scale * k_scale;
#pragma unroll
        for (int r = 0; r < Cfg::kDqRegs; ++r) dQ[r] *= dq_scale;
      }

      // dQ_i's share out: through shared memory to the writer, or by atomics.
      if constexpr (WRITER) {
        // LAB-BEGIN(14-dq-handoff): the math warps' side: wait for a free tile, store, hand it over
        float* dq_s = reinterpret_cast<float*>(smem_raw + (sm.dQ() - smem_addr(smem_raw)));
        if constexpr (WS) {
          named_barrier_sync(kDqEmpty, kDqHandoff);  // the writer has handed the last tile over
        } else {
          if (loader && it > 0) bulk_wait_group_read<0>();
          named_barrier_sync(kDqEmpty, kMathThreads);
        }
#pragma unroll
        for (int r = 0; r < Cfg::kDqRegs; r += 4)
          *reinterpret_cast<float4*>(dq_s + dq_slot<Cfg>(w, mtid, r)) =
              make_float4(dQ[r], dQ[r + 1], dQ[r + 2], dQ[r + 3]);
        fence_proxy_async_smem();
        if constexpr (WS) {
          named_barrier_arrive(kDqFull, kDqHandoff);
        } else {
          named_barrier_sync(kDqFull, kMathThreads);
          if (loader) add_dq_tile<Cfg>(sm, buf, p, work, mods, it, deterministic);
          __syncwarp();  // the warp whole again before its next wgmma (else ptxas serializes them)
        }
        // LAB-END(14-dq-handoff)
      } else {
        float* tile = dq_tile<Cfg>(buf, work, it);
#pragma unroll
        for (int r = 0; r < Cfg::kDqRegs; r += 2)
          atomicAdd(reinterpret_cast<float2*>(tile + dq_slot<Cfg>(w, mtid, r)),
                    make_float2(dQ[r], dQ[r + 1]));
      }
      if constexpr (!Cfg::kDkvT) wgmma_wait<0>();  // dK_j's GEMM: Q_i and dS^T's registers free
#pragma unroll
      for (int t = 0; t < Cfg::kDkvTiles; ++t) {
        wgmma_fence_operand(dK[t]);
        wgmma_fence_operand(dV[t]);
      }
      if constexpr (!Cfg::kSplitRelease)
        mbarrier_arrive(sm.q_empty(s));  // the stage: Q_i, dO_i, LSE_i, D_i
      if (loader && STAGES == 1 && it + 1 < work.steps) loads.step(sm, work, it + 1, gs + 1);
    }
    if (loader && WRITER) bulk_wait_group<0>();
    if constexpr (PERSISTENT)  // K_j, V_j (and K_j^T) read for the last time (a block of no step loaded none)
      if (work.steps > 0) mbarrier_arrive(sm.kv_empty());

    // ---- dK_j (scaled) and dV_j out: 16-bit, or a split group's fp32 partial sums
    // -------------------
    if (buf.tma_dkv && buf.kv_split == 1 && (!loads.packed || work.key0 + BLOCK_N <= work.len_k)) {
      // A whole block (a dense batch's last one too: the map ends at seqlen_k), through shared
      // memory and the TMA unit.
      store_dkv_tma<T, Cfg>(sm, &map_dk, &map_dv, work, loads.tma_batch(work), p.softmax_scale, dK, dV, w, warp, g,
                            q, dkv_issuer, dkv_staged);
      dkv_staged = true;
    } else if constexpr (Cfg::kDkvT) {
      store_dkv_transposed<T, Cfg>(P, buf, work, dK, dV, w, warp, g, q);
    } else {
#pragma unroll
      for (int hh = 0; hh < 2; ++hh) {
        const int key = work.key0 + 64 * w + 16 * warp + g + 8 * hh;
        if (key >= work.len_k) continue;
        if (buf.kv_split > 1) {
          float *dk = dkv_partial(P, buf, work, key, 0), *dv = dkv_partial(P, buf, work, key, 1);
#pragma unroll
          for (int c = 0; c < D / 8; ++c) {
            if (8 * c < p.head_dim) {  // a head_dim below the tile's: zero columns past it
              *reinterpret_cast<float2*>(dk + 8 * c + 2 * q) =
                  make_float2(dK[0][4 * c + 2 * hh], dK[0][4 * c + 2 * hh + 1]);
              *reinterpret_cast<float2*>(dv + 8 * c + 2 * q) =
                  make_float2(dV[0][4 * c + 2 * hh], dV[0][4 * c + 2 * hh + 1]);
            }
          }
          continue;
        }
        T *dk = grad_row<T>(P.dk, p, work, key, 0), *dv = grad_row<T>(P.dv, p, work, key, 1);
        const int dv_cols = p.dv();  // dV's columns: V's head_dim, at most head_dim (MLA's 128 of 192)
#pragma unroll
        for (int c = 0; c < D / 8; ++c) {
          if (8 * c < p.head_dim)
            *reinterpret_cast<uint32_t*>(dk + 8 * c + 2 * q) = pack2<T>(
                dK[0][4 * c + 2 * hh] * p.softmax_scale, dK[0][4 * c + 2 * hh + 1] * p.softmax_scale);
          if (8 * c < dv_cols)  // past it dV's columns are zeros (V and dO read as zeros there)
            *reinterpret_cast<uint32_t*>(dv + 8 * c + 2 * q) =
                pack2<T>(dV[0][4 * c + 2 * hh], dV[0][4 * c + 2 * hh + 1]);
        }
      }
    }
  };  // math_block

  if constexpr (PERSISTENT) {
    int gs = 0;
    uint32_t round = 0;
#pragma unroll 1
    for (int k = 0;; ++k) {
      const int t = read_tile(k);
      if (t >= n_tiles) break;
      set_tile(t);
      if (!work.active) continue;  // no such K/V block in its sequence
      math_block(gs, round & 1);   // with no step: dK_j = dV_j = 0, written
      if (work.steps == 0) continue;
      gs += work.steps;
      ++round;
    }
    if constexpr (WRITER) named_barrier_sync(kDqEmpty, kDqHandoff);  // the writer's arrival after its last add
  } else {
    math_block(0, 0);
  }
  if (dkv_staged && dkv_issuer) bulk_wait_group<0>();  // the last dK, dV copies landed
}

/// dQ = scale · accumulator, from the accumulator's register order (dq_slot) to Q's layout
/// ([batch, seqlen_q, heads_q, d], or packed [total_q, heads_q, d]), 16-bit: one thread per pair
/// of fp32 slots (two adjacent columns of one row) of the @p rows padded rows (padded_row_at),
/// 8-byte loads and 4-byte stores (the unfused-prep ablation's; the rung runs
/// bwd_dq_convert_tile_kernel below).
template <class T, class Cfg>
__global__ void __launch_bounds__(256)
    bwd_dq_convert_kernel(const AttnBwdParams P, const float* dq_acc, int64_t head_rows,
                          int64_t rows) {
  constexpr int D = Cfg::kHeadDim, TILE = Cfg::kBlockM * D;
  const AttnParams& p = P.fwd;
  const int64_t pairs = rows * D / 2;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < pairs;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t e = 2 * i;
    int row, col;
    dq_slot_coord<Cfg>(static_cast<int>(e % TILE), row, col);
    const PaddedRow at =
        padded_row_at(p, head_rows, e / TILE * Cfg::kBlockM + row);  // tiles are whole query blocks
    if (!at.real || col >= p.head_dim) continue;  // padding rows; a head_dim below the tile's
    const SeqSpan seq = seq_span(p, at.b);
    const float2 v = *reinterpret_cast<const float2*>(dq_acc + e);
    T* dq = static_cast<T*>(P.dq) + seq.batch * p.q_batch_stride +
            int64_t(seq.q0 + at.q) * p.q_row_stride + at.h * p.q_head_stride + col;
    *reinterpret_cast<uint32_t*>(dq) = pack2<T>(v.x * p.softmax_scale, v.y * p.softmax_scale);
  }
}

/// Threads of bwd_dq_convert_tile_kernel, and the padding of its shared tile's rows (8 elements:
/// rows 16 bytes apart modulo 128, so the 4-byte writes of a warp fall in 32 banks).
constexpr int kConvertThreads = 256;
constexpr int kConvertPad = 8;

/// Bytes of bwd_dq_convert_tile_kernel's shared memory: one dQ tile in 16-bit, rows padded.
template <class T, class Cfg>
constexpr int convert_tile_bytes() {
  return Cfg::kBlockM * (Cfg::kHeadDim + kConvertPad) * int(sizeof(T)) + Cfg::kBlockM * int(sizeof(int64_t));
}

/// The dQ convert with 16-byte accesses: one block per dQ tile (a query block's BLOCK_M x d fp32
/// slots, contiguous). The block reads the tile with 16-byte loads in the accumulator's order,
/// four slots (two columns of rows r and r + 8: dq_slot_coord) per load, scales them and writes
/// them as 16-bit pairs into a shared row-major tile; then writes the tile's rows to dQ in 16-byte
/// chunks (8 columns); dQ's rows are 16-byte aligned and head_dim a multiple of 8 (launch_backward
/// checks it). Rows past a sequence and columns past head_dim are not written.
template <class T, class Cfg>
__global__ void __launch_bounds__(kConvertThreads)
    bwd_dq_convert_tile_kernel(const AttnBwdParams P, const float* dq_acc, int64_t head_rows) {
  constexpr int D = Cfg::kHeadDim, M = Cfg::kBlockM, TILE = M * D, LD = D + kConvertPad;
  static_assert(convert_tile_bytes<T, Cfg>() <= 48 * 1024, "the tile fits the default shared memory");
  static_assert((LD * sizeof(T)) % 16 == 0, "16-byte rows in shared memory");
  extern __shared__ __align__(16) uint8_t convert_smem[];
  T* tile = reinterpret_cast<T*>(convert_smem);
  int64_t* row_at = reinterpret_cast<int64_t*>(convert_smem + M * LD * sizeof(T));  // dQ offset, -1: padding
  const AttnParams& p = P.fwd;
  const float scale = p.softmax_scale;
  const float4* src = reinterpret_cast<const float4*>(dq_acc + int64_t(blockIdx.x) * TILE);
  for (int i = threadIdx.x; i < TILE / 4; i += kConvertThreads) {
    const float4 v = src[i];
    int row, col;
    dq_slot_coord<Cfg>(4 * i, row, col);  // slots 4i..4i+3: (row, col), (row, col+1), (row+8, col), (row+8, col+1)
    *reinterpret_cast<uint32_t*>(tile + row * LD + col) = pack2<T>(v.x * scale, v.y * scale);
    *reinterpret_cast<uint32_t*>(tile + (row + 8) * LD + col) = pack2<T>(v.z * scale, v.w * scale);
  }
  for (int r = threadIdx.x; r < M; r += kConvertThreads) {
    const PaddedRow at = padded_row_at(p, head_rows, int64_t(blockIdx.x) * M + r);
    int64_t off = -1;
    if (at.real) {
      const SeqSpan seq = seq_span(p, at.b);
      off = seq.batch * p.q_batch_stride + int64_t(seq.q0 + at.q) * p.q_row_stride + at.h * p.q_head_stride;
    }
    row_at[r] = off;
  }
  __syncthreads();
  constexpr int CHUNKS = D / 8;
  for (int i = threadIdx.x; i < M * CHUNKS; i += kConvertThreads) {
    const int r = i / CHUNKS, c = (i % CHUNKS) * 8;
    const int64_t off = row_at[r];
    if (off < 0 || c >= p.head_dim) continue;
    *reinterpret_cast<uint4*>(static_cast<T*>(P.dq) + off + c) = *reinterpret_cast<const uint4*>(tile + r * LD + c);
  }
}

}  // namespace fl::hopper14
