/// @file steps/16_masks/bwd_delta.h
/// @brief Where rung 16's backward takes D = rowsum(dO ∘ O) from, per problem, and the rows it
/// refuses. Plain C++ (no CUDA): the CPU tests check the rule.
///
/// D from the forward's fp32 O drifts with the keys a row sees: past 16384 (rung 11's
/// kExactDeltaKeys, measured in its README, "D from the backward's own P") dQ leaves fp16's
/// tolerance. Rung 11's exact pass, which rung 14 runs on such rows, recomputes S and P without
/// rung 16's masks and modifiers, and divides by ΣP, which a sink's share breaks. So:
/// @code
///   rows see <= 16384 keys                            the fp32 O (any mask, any modifier)
///   longer rows, no mask or causal, no softcap,       rung 11's rule (its exact pass), as rung 14
///     ALiBi or sinks, a dense batch, d = 64 or 128,
///     V's head_dim the same
///   longer rows otherwise                             refused, in one line
/// @endcode
/// A window bounds every row (left + right + 1 keys), documents by the longest one: a 4k window
/// or packed documents of 8k keep the fp32 O on sequences of any length.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "flashladder/problem.h"
#include "../11_backward/delta_policy.h"
#include "mods.h"

namespace fl::masks16 {

/// The most keys one query row can see under @p p's mask (an upper bound: seqlen_k without a
/// window or documents).
inline int64_t max_row_keys(const Problem& p) {
  const MaskSpec m = p.mask_spec();  // causal folded in as a right window of 0
  int64_t keys = p.seqlen_k;
  if (m.window_left >= 0 && m.window_right >= 0)
    keys = std::min<int64_t>(keys, int64_t(m.window_left) + m.window_right + 1);
  if (!p.doc_starts.empty()) {
    int64_t longest = 0;
    for (size_t d = 0; d + 1 < p.doc_starts.size(); ++d)
      longest = std::max<int64_t>(longest, p.doc_starts[d + 1] - p.doc_starts[d]);
    keys = std::min(keys, longest);
  }
  return keys;
}

/// True where rung 11's exact pass computes the D rung 16's kernel needs: no mask beyond causal,
/// no score modifier, sinks or dropout (@p modifiers: the pass recomputes the undropped P), a dense
/// batch, a head_dim with its own tile, V's the same (the pass reads V at Q's head_dim).
inline bool exact_pass_applies(const MaskSpec& m, bool modifiers, bool packed, int head_dim, int head_dim_v) {
  return (is_no_mask(m) || is_plain_causal(m)) && !modifiers && !packed && (head_dim == 64 || head_dim == 128) &&
         head_dim_v == head_dim;
}
inline bool exact_pass_applies(const Problem& p) {
  return exact_pass_applies(p.mask_spec(), p.softcap > 0 || p.alibi || !p.sinks.empty() || p.dropout(), p.varlen(),
                            p.head_dim, p.dv());
}

/// The source of D: rung 11's rule (its exact pass on rows of more than 16384 keys) where that
/// pass applies, else the fp32 O always.
constexpr bwd::DeltaPolicy delta_policy(bool exact_applies) {
  return exact_applies ? bwd::DeltaPolicy::rung : bwd::DeltaPolicy::o32;
}

/// Why rung 16's backward refuses @p p's rows (long rows the exact pass cannot take), or "".
inline std::string long_row_refusal(const Problem& p) {
  if (max_row_keys(p) <= bwd::kExactDeltaKeys || exact_pass_applies(p)) return "";
  return "rows that see more than " + std::to_string(bwd::kExactDeltaKeys) +
         " keys need rung 11's exact D pass, which takes no mask but causal, no softcap, ALiBi, sinks or dropout, "
         "dense batches and head_dim 64 or 128 only (V's the same)";
}

}  // namespace fl::masks16
