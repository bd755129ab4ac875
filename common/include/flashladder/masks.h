/// @file masks.h
/// @brief Masks and score modifiers as small functions, written once for the CPU reference and
/// the kernels (FL_HD = __host__ __device__ under nvcc): the groundwork of rung 16 (FlexAttention's
/// idea, Dong et al., 2024: a mask is mask_mod(b, h, q, k), a modifier score_mod(s, b, h, q, k), and
/// a kernel classifies each (query tile, key tile) block as empty, full or partial before it runs).
///
/// Every mask here leaves each query row one interval of keys, so it has two forms:
/// - mask_mod(i, j): the definition, one comparison chain per element, as FlexAttention writes it;
/// - row_span(i):    the keys [lo, hi] row i sees, what a kernel needs to bound and skip blocks.
/// The CPU tests (tests/cpu/test_masks.cpp) check one against the other element by element, and
/// classify_block against the element mask on every block of many tiles.
///
/// Positions are within one sequence (a packed batch's sequence b, or a dense batch's row): query
/// i of len_q, key j of len_k, and every diagonal is bottom-right aligned as FlashAttention's:
/// query i's diagonal key is i + len_k - len_q.
#pragma once

#include <math.h>

#include "flashladder/types.h"

namespace fl {

/// The mask part of a problem. Each field off by default; causal is window (-1, 0).
struct MaskSpec {
  /// FlashAttention's window_size = (left, right): query i sees key j iff
  /// i + off - left <= j <= i + off + right (off = len_k - len_q); -1 leaves that side open.
  int window_left = -1;
  int window_right = -1;
  /// Prefix-LM: the first `prefix` keys are seen by every query (bidirectional), the rest causally.
  /// 0: off.
  int prefix = 0;
  /// Document mask: query i and key j attend iff they belong to the same document. Documents are
  /// contiguous runs of tokens: doc_starts (n_docs + 1 prefix sums, ending at len_k, shared by
  /// queries and keys of a self-attention sequence) gives where each starts. Null: off.
  const int* doc_starts = nullptr;
  int n_docs = 0;
};

/// The MaskSpec of a problem's fields (Problem::mask_spec on the host, rung 16's kernels from
/// AttnParams): the causal mask folded in as a right window of 0.
FL_HD MaskSpec make_mask_spec(bool causal, int window_left, int window_right, int prefix, const int* doc_starts,
                              int n_docs) {
  MaskSpec m;
  m.window_left = window_left;
  m.window_right = causal ? 0 : window_right;  // causal: no key right of the diagonal
  m.prefix = prefix;
  m.doc_starts = doc_starts;
  m.n_docs = doc_starts != nullptr ? n_docs : 0;
  return m;
}

/// The keys one query row sees: [lo, hi], empty when lo > hi.
struct KeySpan {
  int lo, hi;
};

FL_HD int mask_max(int a, int b) { return a > b ? a : b; }
FL_HD int mask_min(int a, int b) { return a < b ? a : b; }

/// The document of token @p t: the last d with doc_starts[d] <= t (bisection).
FL_HD int document_of(const MaskSpec& m, int t) {
  int lo = 0, hi = m.n_docs - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (m.doc_starts[mid] <= t) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

/// The definition: does query @p i see key @p j? (len_q, len_k: the sequence's lengths.)
FL_HD bool mask_mod(const MaskSpec& m, int len_q, int len_k, int i, int j) {
  if (j < 0 || j >= len_k || i < 0 || i >= len_q) return false;
  const int diag = i + len_k - len_q;
  if (m.prefix > 0 && !(j < m.prefix || j <= diag)) return false;
  if (m.window_left >= 0 && j < diag - m.window_left) return false;
  if (m.window_right >= 0 && j > diag + m.window_right) return false;
  if (m.doc_starts != nullptr && document_of(m, i) != document_of(m, j)) return false;
  return true;
}

/// The same mask as row i's interval of keys.
FL_HD KeySpan row_span(const MaskSpec& m, int len_q, int len_k, int i) {
  const int diag = i + len_k - len_q;
  KeySpan s{0, len_k - 1};
  if (m.prefix > 0) s.hi = mask_min(s.hi, mask_max(m.prefix - 1, diag));
  if (m.window_left >= 0) s.lo = mask_max(s.lo, diag - m.window_left);
  if (m.window_right >= 0) s.hi = mask_min(s.hi, diag + m.window_right);
  if (m.doc_starts != nullptr) {
    const int d = document_of(m, i);
    s.lo = mask_max(s.lo, m.doc_starts[d]);
    s.hi = mask_min(s.hi, m.doc_starts[d + 1] - 1);
  }
  if (i < 0 || i >= len_q) s = {0, -1};
  return s;
}

/// The transpose: the query rows that see key @p j, [lo, hi] (empty when lo > hi). Every mask here
/// is an interval per key as well (each bound of a row's span grows with the row), which is what a
/// backward pass that walks K/V blocks needs to list its query tiles.
FL_HD KeySpan col_span(const MaskSpec& m, int len_q, int len_k, int j) {
  const int off = len_k - len_q;
  KeySpan s{0, len_q - 1};
  if (m.prefix > 0 && j >= m.prefix) s.lo = mask_max(s.lo, j - off);  // past the prefix: causal
  if (m.window_right >= 0) s.lo = mask_max(s.lo, j - off - m.window_right);
  if (m.window_left >= 0) s.hi = mask_min(s.hi, j - off + m.window_left);
  if (m.doc_starts != nullptr) {  // self-attention: the key's own document's rows
    const int d = document_of(m, j);
    s.lo = mask_max(s.lo, m.doc_starts[d]);
    s.hi = mask_min(s.hi, m.doc_starts[d + 1] - 1);
  }
  if (j < 0 || j >= len_k) s = {0, -1};
  return s;
}

/// What a kernel does with one (query tile, key tile) block: skip it, run it without any mask
/// arithmetic, or apply the element mask.
enum class BlockClass { empty = 0, full = 1, partial = 2 };

/// The class of the block of query rows [row0, row0 + rows) and keys [key0, key0 + keys) from
/// each row's span: empty if no row sees a key of it, full if every row sees every key of it
/// (rows past len_q, and keys past len_k, make a block partial: they need the tail mask).
FL_HD BlockClass classify_block(const MaskSpec& m, int len_q, int len_k, int row0, int rows, int key0, int keys) {
  const int key1 = key0 + keys - 1;
  bool any = false, all = row0 + rows <= len_q && key1 < len_k;
  for (int r = 0; r < rows; ++r) {
    const KeySpan s = row_span(m, len_q, len_k, row0 + r);
    if (mask_max(s.lo, key0) <= mask_min(s.hi, key1)) any = true;
    if (!(s.lo <= key0 && s.hi >= key1)) all = false;
  }
  return !any ? BlockClass::empty : all ? BlockClass::full : BlockClass::partial;
}

/// The kernels' form of classify_block: the class of keys [key0, key1] for a query tile whose
/// rows of the sequence have these spans. Rows past the sequence are not given: a kernel computes
/// them and stores nothing, so they neither make a block partial nor keep it. Keys past len_k do:
/// a block that holds any is partial when it is not empty (the tail mask).
FL_HD BlockClass classify_spans(const KeySpan* spans, int rows, int key0, int key1, int len_k) {
  bool any = false, all = key1 < len_k;
  for (int r = 0; r < rows; ++r) {
    const KeySpan s = spans[r];
    if (mask_max(s.lo, key0) <= mask_min(s.hi, key1)) any = true;
    if (!(s.lo <= key0 && s.hi >= key1)) all = false;
  }
  return !any ? BlockClass::empty : all ? BlockClass::full : BlockClass::partial;
}

// ---- score modifiers --------------------------------------------------------------------------

/// Softcapping (Gemma 2, FlashAttention's softcap): s -> cap · tanh(s / cap); cap <= 0: identity.
FL_HD double softcap(double s, double cap) { return cap > 0 ? cap * tanh(s / cap) : s; }
/// Its derivative with respect to s, which the backward pass multiplies dS by: 1 - tanh²(s / cap).
FL_HD double softcap_grad(double s, double cap) {
  if (cap <= 0) return 1.0;
  const double t = tanh(s / cap);
  return 1.0 - t * t;
}

/// ALiBi's slope of head @p h of @p heads (Press et al., 2022): 2^(-8 (h + 1) / n) over the largest
/// power of two n <= heads, the heads beyond it interleaved at half steps, as the paper's code.
FL_HD double alibi_slope(int h, int heads) {
  int n = 1;
  while (2 * n <= heads) n *= 2;
  if (h < n) return exp2(-8.0 * (h + 1) / n);
  return exp2(-4.0 * (2 * (h - n) + 1) / n);
}
/// ALiBi's bias of (query i, key j), added to the scaled score: -slope · |i + len_k - len_q - j|
/// (FlashAttention's alibi_slopes, bottom-right aligned).
FL_HD double alibi_bias(double slope, int len_q, int len_k, int i, int j) {
  const int dist = i + len_k - len_q - j;
  return -slope * (dist < 0 ? -dist : dist);
}

}  // namespace fl
