/// @file steps/16_masks/mods.h
/// @brief Rung 16's masks and score modifiers as functors, template parameters of its kernels
/// (compiled in, not interpreted), and the block mask's layout. FL_HD: the CPU tests run the
/// same code as the kernels.
///
/// A mask functor gives the keys query row i of a sequence sees as one interval, span(len_q,
/// len_k, i) (masks.h: every mask here is an interval per row, so the per-element test is two
/// comparisons, or one when the interval always starts at key 0, kLower = false):
/// @code
///   CausalMask   [0, i + len_k - len_q]                      the bottom-right causal mask
///   SpanMask     row_span(spec, ...) of any MaskSpec          windows, prefix-LM, documents, and
///                                                             causal or none combined with them
/// @endcode
/// The backward (rung 14's kernel, backward.cuh) asks the mask by key instead: col(len_q, len_k,
/// j), the query rows that see key j, also one interval.
///
/// A score functor turns one raw score s = q . k into log2(e) x the modified, scaled score, the
/// units of the exp2 softmax:
/// @code
///   ScoreMod<SOFTCAP, ALIBI>   t = log2(e) (cap tanh(scale s / cap) - slope_h |i + off - j|)
/// @endcode
/// Without either, the rung keeps rung 15's fused scale (one FFMA per score), so the plain causal
/// kernel pays nothing for the machinery but the block list.
#pragma once

#include <stddef.h>

#include "flashladder/dropout.h"
#include "flashladder/masks.h"
#include "flashladder/types.h"

namespace fl::masks16 {

/// True when the spec masks nothing (no window, prefix or documents; causal is a right window).
FL_HD bool is_no_mask(const MaskSpec& m) {
  return m.window_left < 0 && m.window_right < 0 && m.prefix == 0 && m.doc_starts == nullptr;
}
/// True when the spec is the plain causal mask (CausalMask's one comparison suffices).
FL_HD bool is_plain_causal(const MaskSpec& m) {
  return m.window_left < 0 && m.window_right == 0 && m.prefix == 0 && m.doc_starts == nullptr;
}

/// The bottom-right causal mask: keys 0 .. i + len_k - len_q.
struct CausalMask {
  static constexpr bool kLower = false;  ///< spans start at key 0: only the upper bound is tested
  FL_HD KeySpan span(int len_q, int len_k, int i) const {
    return {0, mask_min(len_k - 1, i + len_k - len_q)};
  }
};

/// Any MaskSpec (masks.h): sliding windows, prefix-LM, document masks, with or without causal.
/// The backward pass, which walks K/V blocks, reads it by key: col(j), the rows that see key j.
struct SpanMask {
  MaskSpec spec;
  static constexpr bool kLower = true;
  FL_HD KeySpan span(int len_q, int len_k, int i) const { return row_span(spec, len_q, len_k, i); }
  FL_HD KeySpan col(int len_q, int len_k, int j) const { return col_span(spec, len_q, len_k, j); }
};

/// ALiBi's slope of head @p h times log2(e), in float (masks.h's alibi_slope is the fp64
/// definition): exp2f of the same exact exponent, so no double-precision call in the kernels
/// (one would take a stack frame and spill the backward's registers).
FL_HD float alibi_slope_log2(int h, int heads) {
  int n = 1;
  float inv_n = 1.f;  // 1 / n, exact: no division (whose slow path is a call)
  for (; 2 * n <= heads; n *= 2) inv_n *= 0.5f;
  const float e = h < n ? -8.f * static_cast<float>(h + 1) * inv_n : -4.f * static_cast<float>(2 * (h - n) + 1) * inv_n;
  return exp2f(e) * 1.4426950408889634f;
}

/// ALiBi's slope of (sequence @p b, head @p h) times log2(e): the given slopes (AttnParams::
/// alibi_slopes) when there are some, else the paper's.
FL_HD float alibi_slope_of(const float* slopes, int batch_stride, int b, int h, int heads) {
  return slopes != nullptr ? slopes[static_cast<int64_t>(b) * batch_stride + h] * 1.4426950408889634f
                           : alibi_slope_log2(h, heads);
}

/// Which score modifiers a kernel applies (both off: rung 15's fused scale).
template <bool SOFTCAP, bool ALIBI>
struct ScoreMod {
  static constexpr bool kSoftcap = SOFTCAP;
  static constexpr bool kAlibi = ALIBI;
  static constexpr bool kAny = SOFTCAP || ALIBI;
  float pre;    ///< softcap: scale / cap; else scale x log2(e)
  float post;   ///< softcap: cap x log2(e)
  float slope;  ///< ALiBi: slope_h x log2(e) (per head: set per work item)

  /// @p s the raw score, @p dist = (i + len_k - len_q) - j, the key's distance from the diagonal.
  FL_HD float operator()(float s, float dist) const {
    float t;
    if constexpr (SOFTCAP) t = post * tanh_of(s * pre);
    else t = s * pre;
    if constexpr (ALIBI) t -= slope * (dist < 0 ? -dist : dist);
    return t;
  }
  /// The same, and in @p grad the derivative of the softcapped score by the scaled one,
  /// 1 - tanh^2 (1 without softcapping; ALiBi's bias is a constant): the backward's dS factor.
  FL_HD float with_grad(float s, float dist, float& grad) const {
    float t;
    if constexpr (SOFTCAP) {
      const float th = tanh_of(s * pre);
      grad = 1.f - th * th;
      t = post * th;
    } else {
      grad = 1.f;
      t = s * pre;
    }
    if constexpr (ALIBI) t -= slope * (dist < 0 ? -dist : dist);
    return t;
  }

 private:
  FL_HD static float tanh_of(float x) {
#if defined(__CUDA_ARCH__)
    float y;
    asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));  // one MUFU.TANH
    return y;
#else
    return tanhf(x);
#endif
  }
};

/// Attention dropout as a P-modifier (dropout.h, FlashAttention's): compiled in or not, like the
/// score modifiers. Off, the kernels are the ones without it; on, each element of P is kept or
/// zeroed after the softmax by its byte of a Philox cell (dropout.h; the LSE stays the undropped
/// one's) and O, or dV, is scaled by 1 / (1 - p). ROUNDS: the generator's rounds, compiled in
/// (kDropoutRounds; 10 in the `--dropout-rounds 10` ablation's kernels, built without ALiBi).
template <bool DROPOUT, int ROUNDS = kDropoutRounds>
struct PDropout {
  static constexpr bool kOn = DROPOUT;
  static constexpr int kRounds = ROUNDS;
  DropoutParams params;  ///< AttnParams::dropout (read only when kOn)
};

/// Where the block mask lives in a launch's workspace (after the schedule's 16-byte counter):
/// per (sequence, query tile) the count of its non-empty K/V blocks, then their list, ascending,
/// each entry the block's index with bit 31 set when it is partial. A dense batch's sequences
/// share one mask (classified once: `sequences` = 1); a packed batch, or one whose sequences use
/// their own number of keys (a KV cache's seqused_k), has one per sequence.
struct BlockMaskLayout {
  int sequences;  ///< 1 dense, batch per sequence
  int m_tiles;    ///< query tiles of the longest sequence
  int n_blocks;   ///< K/V blocks of the longest sequence
  static constexpr int kPartial = -2147483647 - 1;  // bit 31
  static constexpr size_t kCountsOffset = 16;  ///< after the counter

  FL_HD size_t tiles() const { return static_cast<size_t>(sequences) * m_tiles; }
  /// Index of (sequence b, query tile m) among the counts (b = 0 in a dense batch).
  FL_HD size_t tile_index(int b, int m) const { return (sequences == 1 ? 0 : static_cast<size_t>(b)) * m_tiles + m; }
  FL_HD size_t lists_offset() const { return kCountsOffset + ((tiles() * 4 + 15) / 16) * 16; }
  FL_HD size_t bytes() const { return lists_offset() + tiles() * n_blocks * 4; }
  FL_HD static int block_of(int entry) { return entry & 0x7fffffff; }
  FL_HD static bool partial(int entry) { return entry < 0; }
};

/// The bounds of a query tile's spans that decide most blocks without a look at each row.
struct TileBounds {
  int min_lo = 2147483647;       ///< over rows that see a key: no row sees below it ...
  int max_hi = -2147483647 - 1;  ///< ... or above it
  int max_lo = -2147483647 - 1;  ///< over every row of the sequence: every row sees from here ...
  int min_hi = 2147483647;       ///< ... up to here
  FL_HD void add(const KeySpan& s) {
    if (s.lo <= s.hi) {  // a row that sees nothing widens no bound of "some row sees it"
      min_lo = mask_min(min_lo, s.lo);
      max_hi = mask_max(max_hi, s.hi);
    }
    max_lo = mask_max(max_lo, s.lo);
    min_hi = mask_min(min_hi, s.hi);
  }
};

/// classify_spans, deciding from @p b first: a block outside [min_lo, max_hi] is empty, one inside
/// [max_lo, min_hi] (and before len_k) is full; only the blocks in between look at each row.
FL_HD BlockClass classify_tile_block(const TileBounds& b, const KeySpan* spans, int rows, int key0, int key1, int len_k) {
  if (rows <= 0 || key1 < b.min_lo || key0 > b.max_hi) return BlockClass::empty;
  if (b.max_lo <= key0 && b.min_hi >= key1 && key1 < len_k) return BlockClass::full;
  return classify_spans(spans, rows, key0, key1, len_k);
}

// ---- the backward's rule, by key ------------------------------------------------------------------
// Rung 14's kernel walks K/V blocks, so the backward classifies (K/V block, query block) pairs
// from the mask's columns: col(j), the rows that see key j. Both ends of col(j) grow with j for
// every mask here (the CPU tests check it), so two spans bound a whole block of keys.

/// The rows that see some key of [key0, key1] (keys of the sequence): [col(key0).lo,
/// col(key1).hi]. No row outside sees a key of the block; a query block outside is skipped.
template <class MASK>
FL_HD KeySpan rows_of_keys(const MASK& mask, int len_q, int len_k, int key0, int key1) {
  if (key1 < key0) return {0, -1};
  return {mask.col(len_q, len_k, key0).lo, mask.col(len_q, len_k, key1).hi};
}

/// The rows that see every key of [key0, key1]: [col(key1).lo, col(key0).hi], the upper end
/// 2^31 - 1 when it reaches the last row (rows past len_q are padding, which needs no mask); empty
/// when a key is past len_k. A query tile inside needs no element mask.
template <class MASK>
FL_HD KeySpan rows_seeing_all(const MASK& mask, int len_q, int len_k, int key0, int key1) {
  if (key1 >= len_k) return {2147483647, -1};
  KeySpan s{mask.col(len_q, len_k, key1).lo, mask.col(len_q, len_k, key0).hi};
  if (s.hi >= len_q - 1) s.hi = 2147483647;
  return s;
}

/// The layout for a launch's longest lengths, tiles of @p block_m x @p block_n.
inline BlockMaskLayout block_mask_layout(bool per_sequence, int batch, int seqlen_q, int seqlen_k, int block_m,
                                         int block_n) {
  return {per_sequence ? batch : 1, (seqlen_q + block_m - 1) / block_m, (seqlen_k + block_n - 1) / block_n};
}

/// One query tile's list, as the classifying kernel writes it, for the CPU tests and the host
/// reference: the non-empty blocks of rows [row0, row0 + rows) (rows of the sequence only).
template <class MASK>
int tile_block_list(const MASK& mask, int len_q, int len_k, int row0, int block_m, int block_n, int* list) {
  const int rows = mask_max(0, mask_min(block_m, len_q - row0));
  KeySpan spans[256];
  TileBounds bounds;
  for (int r = 0; r < rows; ++r) bounds.add(spans[r] = mask.span(len_q, len_k, row0 + r));
  int count = 0;
  for (int n = 0; n * block_n < len_k; ++n) {
    const BlockClass c = classify_tile_block(bounds, spans, rows, n * block_n, n * block_n + block_n - 1, len_k);
    if (c != BlockClass::empty) list[count++] = n | (c == BlockClass::partial ? BlockMaskLayout::kPartial : 0);
  }
  return count;
}

}  // namespace fl::masks16
