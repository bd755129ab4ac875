/// @file steps/16_masks/backward.cuh
/// @brief Rung 16's backward pass: rung 14's kernel (FlashAttention-3's backward) with the masks
/// and score modifiers as its MODS parameter, and the sinks' gradient.
///
/// Rung 14's kernel walks K/V blocks: block j loads K_j, V_j once and visits the query blocks
/// that see it. So it needs the mask by key, not by row: col_span (masks.h), the rows that see
/// key j. Every mask here gives an interval there too, and both of its ends grow with j (the
/// CPU tests check it), so
/// @code
///   // clang-format off
///   query blocks of K/V block j   the ones holding rows [col(key0).lo, col(key1).hi]: no other
///                                 block can see a key of it (the skipped blocks)
///   full (query block i, warpgroup's 64 keys)   col(last key).lo <= first row and
///                                 col(first key).hi >= last row: no mask arithmetic
///   partial                       each thread tests its two keys' rows: lo <= row <= hi
///   // clang-format on
/// @endcode
/// The forward's classifier and lists are not needed: the rule is the same (empty, full,
/// partial), evaluated from two spans per warpgroup when the block starts.
///
/// Score modifiers: P = exp2(t - LSE log2 e) with t = score_mod(s) in log2 units (mods.h).
/// ALiBi's bias is a constant, so dS = P (dP - D) as before: rung 14's steps (probs, ds_of) with
/// the modified exponent. Softcapping multiplies dS by its derivative 1 - tanh^2, which needs
/// the raw score: P and dS are computed in one pass once dP^T is in (after_dp), so the
/// derivative is never held beside dP^T's accumulators.
///
/// Sinks: the forward's LSE includes each head's sink, so P is right as it stands. The sink's own
/// gradient is d L / d sink_h = -sum_i exp(sink_h - LSE_i) D_i over the head's rows (the sink's
/// probability times D, since d P_ij / d sink_h = -P_ij p_sink_i): sink_grad_kernel, from the
/// LSE and D rung 14's statistics kernel already wrote.
#pragma once

#include <limits.h>

#include "../14_hopper_backward/launch_bwd.cuh"
#include "mods.h"

namespace fl::masks16 {

/// Rung 14's kernel's MODS (kernel.cuh's CausalOrNone has the same members): SpanMask by key,
/// ScoreMod SCORE, and dropout (DROP = PDropout<true>, with ALiBi or no modifier, not softcap).
///
/// Dropout regenerates the forward's mask (dropout.h) where rung 14's layout holds the elements:
/// a thread's keys k and k + 8 (k mod 16 < 8) of the queries q0 + 8c + 2q and + 1. Of each 16
/// queries, those elements lie in two Philox cells (query parities 0 and 1), which the neighbour
/// thread (lane ^ 4, keys k ^ 1) needs too. So each thread of the pair makes the call of its own
/// key parity, keeps its 4 bytes and sends the other 4 by one shuffle: one call per 8 elements
/// (the forward's layout gets 16 from one call; the other 8 bytes of each call are another warp's
/// keys). The step's keep bits are made before its GEMMs (set_step: drop_keep_bits); at the
/// packing, P_drop = P M / (1 - p) goes to dV's GEMM and dS = P (dP M / (1 - p) - D) to dK's
/// and dQ's (drop_ds).
///
/// Dropout with ALiBi: the bias is added to the score, so dS by the raw score is dS by the
/// modified one and drop_ds stays as it is; P comes from p_while_dp with ALiBi's distances, and
/// set_step sets the step's slope and its keep bits, neither reading the other. Softcapping makes
/// its dS whole in after_dp, before the packing where drop_ds enters: not built with dropout.
template <class SCORE, class DROP = PDropout<false>>
struct BwdMods {
  static constexpr bool kSpans = true;  ///< any mask: BlockWork::prev_token walks the neighbours
  SpanMask mask;
  SCORE score;
  int heads_q;
  const float* slopes;  ///< ALiBi's given slopes (AttnParams::alibi_slopes), null: the paper's
  int slope_stride;     ///< their batch stride
  DROP drop;            ///< dropout's parameters (PDropout<true>); unread without it
  int drop_key_a;       ///< the thread's first key (its second is + 8)
  uint64_t drop_bits;   ///< the step's keep bits: bit x = element x of S^T (drop_keep_bits)
  int batch;
  int len_q, len_k, offset;
  int diag[2];      ///< ALiBi: the thread's two keys minus the diagonal's offset (row - diag)
  float dist0[2];   ///< ALiBi: per step, the distance of the thread's first row (set_rows)
  KeySpan rows[2];  ///< the rows that see the thread's two keys
  int full_lo;      ///< every row of [full_lo, full_hi] sees every key of the warpgroup
  int full_hi;      ///< (mods.h's rows_seeing_all)

  __device__ __forceinline__ void set_block(const hopper14::BlockWork& w) {
    batch = w.batch;
    len_q = w.len_q;
    len_k = w.len_k;
    offset = w.len_k - w.len_q;
  }
  __device__ __forceinline__ KeySpan query_rows(int key0, int key1) const {
    return rows_of_keys(mask, len_q, len_k, key0, key1);
  }
  __device__ __forceinline__ KeySpan col_of(int j) const {
    return j < len_k ? mask.col(len_q, len_k, j) : KeySpan{INT_MAX, -1};
  }
  __device__ __forceinline__ void set_keys(int wg_key0, int key_a, int key_b) {
    if constexpr (DROP::kOn) drop_key_a = key_a;
    diag[0] = key_a - offset;
    diag[1] = key_b - offset;
    rows[0] = col_of(key_a);
    rows[1] = col_of(key_b);
    const KeySpan all = rows_seeing_all(mask, len_q, len_k, wg_key0, wg_key0 + 63);
    full_lo = all.lo;
    full_hi = all.hi;
  }
  __device__ __forceinline__ bool full(int q0, int q1) const {
    return full_lo <= q0 && full_hi >= q1;
  }
  __device__ __forceinline__ bool sees(int hh, int qr) const {
    return rows[hh].lo <= qr && qr <= rows[hh].hi;
  }
  template <int SN>
  __device__ __forceinline__ void set_step(int h, int q0) {
    if constexpr (SCORE::kAlibi)
      score.slope = alibi_slope_of(slopes, slope_stride, batch, h, heads_q);
    if constexpr (DROP::kOn)
      drop_keep_bits<SN>(static_cast<uint32_t>(batch) * heads_q + h, q0, static_cast<int>(threadIdx.x) % 4);
  }
  /// Dropout's keep bits of the step, before its GEMMs: bit x set iff element x of S^T is kept
  /// (x = 4c + 2 hk + e: key drop_key_a + 8 hk, query q0 + 8c + 2q + e). Per 16 queries one
  /// call, the cell of query parity = this thread's key parity, and one shuffle with lane ^ 4 for
  /// the other's bytes. Here, with S^T and dP^T not yet allocated, and `unroll 1` into 64 bits:
  /// made while dP^T's GEMM ran, or at the packing, the calls spilled at d = 64 (README, §7).
  template <int SN>
  __device__ __forceinline__ void drop_keep_bits(uint32_t bh, int q0, int q) {
    // The key read again each step (the state is 16 bytes in L1): held over the step it is
    // registers that S^T and dP^T need at d = 64.
    const DropoutKey key = dropout_key(drop.params);
    static_assert(SN % 16 == 0 && SN / 2 <= 64, "whole 16-query cells, 64 bits");
    const int odd = drop_key_a & 1;           // = g & 1: the pair's threads are lanes l and l ^ 4
    const int upper = (drop_key_a >> 4) & 1;  // keys 16..23 of their 32: words 2, 3 of the cell
    const uint32_t key_cell = dropout_key_cell(drop_key_a);
    uint64_t bits = 0;
#pragma unroll 1
    for (int kk = 0; kk < SN / 16; ++kk) {
      uint32_t w[4], mine, send, words[2];
      dropout_cell_rounds<DROP::kRounds>(key, bh, dropout_row_cell(q0 + 16 * kk + 2 * q + odd), key_cell, w);
      dropout_bwd_pack(w, upper, odd, mine, send);
      const uint32_t theirs = __shfl_xor_sync(0xffffffffu, send, 4);
      dropout_bwd_rows(mine, theirs, odd, words[0], words[1]);
      uint32_t b8 = 0;  // bit 4h + 2hk + e: query + 8h (+ e), key + 8 hk
#pragma unroll
      for (int h = 0; h < 2; ++h)
#pragma unroll
        for (int hk = 0; hk < 2; ++hk)
#pragma unroll
          for (int e = 0; e < 2; ++e)
            b8 |= static_cast<uint32_t>(dropout_kept_byte(words[e], h + 2 * hk, key.threshold)) << (4 * h + 2 * hk + e);
      bits |= static_cast<uint64_t>(b8) << (8 * kk);
    }
    drop_bits = bits;
  }
  /// The step's first row of the thread, @p row0, once S^T is in: ALiBi's distances are then
  /// dist0 + a constant of the element. @p anchor is a score of S^T: dist0 is made to depend on it
  /// (0 x anchor, which IEEE arithmetic may not fold), so ptxas cannot compute the 64 distances
  /// before the wgmma wait, while dP^T's accumulators are live, and spill them (it did).
  __device__ __forceinline__ void set_rows(int row0, float anchor) {
    if constexpr (SCORE::kAlibi) {
      dist0[0] = fmaf(anchor, 0.f, static_cast<float>(row0 - diag[0]));
      dist0[1] = fmaf(anchor, 0.f, static_cast<float>(row0 - diag[1]));
    }
  }
  /// ALiBi's |i + len_k - len_q - j| for the thread's key @p hh and the row @p dr after row0.
  __device__ __forceinline__ float dist(int hh, int dr) const {
    return dist0[hh] + static_cast<float>(dr);
  }
  __device__ __forceinline__ float score_of(float s, int hh, int dr) const {
    return score(s, dist(hh, dr));
  }
  __device__ __forceinline__ float score_grad(float s, int hh, int dr, float& grad) const {
    return score.with_grad(s, dist(hh, dr), grad);
  }
  // Rung 14's score hooks (kernel.cuh's CausalOrNone): static, the policy as an argument.
  /// P^T's exponent in log2 units: the modified score minus LSE log2(e), or rung 14's fused scale
  /// without a modifier.
  static __device__ __forceinline__ float exponent(const BwdMods& m, float s, float lse,
                                                   float scale_log2, int hh, int dr) {
    if constexpr (SCORE::kAny)
      return m.score_of(s, hh, dr) - lse;
    else
      return fmaf(s, scale_log2, -lse);
  }
  /// P^T while dP^T runs: rung 14's probs(), ALiBi's distances set first. Softcapping waits.
  template <int SN>
  static __device__ __forceinline__ void p_while_dp(BwdMods& m, float (&S)[SN / 2],
                                                    const hopper14::StepRows& r) {
    if constexpr (!SCORE::kSoftcap) {
      m.set_rows(r.q0 + 2 * r.q, S[0]);
      hopper14::probs<SN>(S, m, r);
    }
  }
  /// Softcapping, once dP^T is in: P^T and dS^T = P^T ∘ (dP^T - D) ∘ score' in one pass.
  template <int SN>
  static __device__ __forceinline__ void after_dp(BwdMods& m, float (&S)[SN / 2],
                                                  float (&dP)[SN / 2],
                                                  const hopper14::StepRows& r) {
    if constexpr (SCORE::kSoftcap) {
      const bool masked = !m.full(r.q0, r.q0 + SN - 1);
      m.set_rows(r.q0 + 2 * r.q, S[0]);
#pragma unroll
      for (int c = 0; c < SN / 8; ++c) {
        const float2 l = *reinterpret_cast<const float2*>(r.lse + 8 * c + 2 * r.q);
        const float2 dd = *reinterpret_cast<const float2*>(r.delta + 8 * c + 2 * r.q);
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int qr = r.q0 + 8 * c + 2 * r.q + e % 2;
          float grad;
          const float t = m.score_grad(S[4 * c + e], e / 2, 8 * c + e % 2, grad);
          float pr = ptx::ex2_approx(t - (e % 2 ? l.y : l.x));
          if (masked && !m.sees(e / 2, qr)) pr = 0.f;
          dP[4 * c + e] = pr * (dP[4 * c + e] - (e % 2 ? dd.y : dd.x)) * grad;
          S[4 * c + e] = pr;
        }
      }
    }
  }
  /// Dropout, as k-step kk's 16 queries are packed: in place, dS^T = P^T ∘ (dP^T ∘ Z - D) and
  /// P_drop = P^T ∘ Z with Z = M / (1 - p) (drop_bits), which the kernel packs for dV. P^T is
  /// probs()' (ALiBi's bias in it, if any): an additive bias leaves dS as it is.
  template <int SN>
  __device__ __forceinline__ void drop_ds(float (&S)[SN / 2], float (&dP)[SN / 2],
                                          const hopper14::StepRows& r, int kk) const {
    static_assert(!SCORE::kSoftcap,
                  "dropout is built without softcap (its dS factor is after_dp's)");
#pragma unroll
    for (int c = 2 * kk; c < 2 * kk + 2; ++c) {
      const float2 dd = *reinterpret_cast<const float2*>(r.delta + 8 * c + 2 * r.q);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int x = 4 * c + e;
        const float z = (drop_bits >> x) & 1u ? drop.params.rp : 0.f;
        dP[x] = S[x] * (dP[x] * z - (e % 2 ? dd.y : dd.x));
        S[x] *= z;
      }
    }
  }
  /// dS^T of k-step kk's 16 queries as they are packed: rung 14's ds_of, or dropout's (softcapping:
  /// done in after_dp).
  template <int SN>
  static __device__ __forceinline__ void ds_at_pack(const BwdMods& m, float (&S)[SN / 2], float (&dP)[SN / 2],
                                                    const hopper14::StepRows& r, int kk) {
    if constexpr (DROP::kOn) m.template drop_ds<SN>(S, dP, r, kk);
    else if constexpr (!SCORE::kSoftcap) hopper14::ds_of<SN>(S, dP, r, kk);
  }
};

/// d L / d sink_h = -sum over the head's real rows of 2^(sink_h log2 e - LSE_i log2 e) D_i, from
/// rung 14's padded statistics (padding rows: LSE log2 e = +inf, D = 0, so they add nothing).
/// One block per query head, its rows in a fixed order: the same sum run after run.
static __global__ void __launch_bounds__(256)
    sink_grad_kernel(const AttnParams p, const float* lse_log2, const float* delta,
                     int64_t head_rows, float* dsinks) {
  const int h = blockIdx.x;
  // dense: [batch, heads_q, head_rows]; packed: [heads_q, head_rows]
  const int groups = p.cu_seqlens_q ? 1 : p.batch;
  const float sink = p.sinks[h] * 1.4426950408889634f;
  float sum = 0.f;
  for (int b = 0; b < groups; ++b) {
    const int64_t base = (static_cast<int64_t>(b) * p.heads_q + h) * head_rows;
    for (int64_t r = threadIdx.x; r < head_rows; r += blockDim.x)
      sum += exp2f(sink - lse_log2[base + r]) * delta[base + r];
  }
  __shared__ float part[8];
#pragma unroll
  for (int s = 16; s > 0; s >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, s);
  if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = sum;
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0.f;
    for (int w = 0; w < 8; ++w) total += part[w];
    dsinks[h] = -total;
  }
}

}  // namespace fl::masks16
