/// @file varlen.h
/// @brief Where one sequence of a batch lives in the kernels' tensors, dense or packed
/// (AttnParams::cu_seqlens_q/k), written once for host and device code (FL_HD). The CPU side's
/// twin is Problem's len_q / q_token / lse_index (problem.h); tests check one against the other.
#pragma once

#include <stdint.h>

#include "flashladder/problem.h"
#include "flashladder/types.h"

namespace fl {

/// Sequence b of a launch. A dense batch addresses sequence b through the TMA maps' batch
/// coordinate; a packed batch is one sequence of all its tokens (batch coordinate 0), and b's
/// rows start at token cu_seqlens[b].
struct SeqSpan {
  int len_q, len_k;  ///< its queries and keys
  int q0, k0;        ///< its first query / key token in the [tokens, heads, d] view (0 dense)
  int batch;         ///< the batch coordinate of its tensors (b dense, 0 packed)
};

FL_HD SeqSpan seq_span(const AttnParams& p, int b) {
  // A KV cache: sequence b's keys are its slots seqstart_k[b] .. seqused_k[b] - 1 (a left-padded
  // cache starts late, a cache not full ends early; AttnParams::seqstart_k, seqused_k).
  const int start = p.seqstart_k ? p.seqstart_k[b] : 0;
  if (p.cu_seqlens_q == nullptr) return {p.seqlen_q, (p.seqused_k ? p.seqused_k[b] : p.seqlen_k) - start, 0, start, b};
  const int q0 = p.cu_seqlens_q[b], k0 = p.cu_seqlens_k[b];
  return {p.cu_seqlens_q[b + 1] - q0, (p.seqused_k ? p.seqused_k[b] : p.cu_seqlens_k[b + 1] - k0) - start, q0,
          k0 + start, 0};
}

/// Sequence b's queries of a launch, without its keys (what a scheduler reads to skip a tile).
FL_HD int seq_len_q(const AttnParams& p, int b) {
  return p.cu_seqlens_q == nullptr ? p.seqlen_q : p.cu_seqlens_q[b + 1] - p.cu_seqlens_q[b];
}

/// Index in the LSE of query 0 of sequence b, head h: its rows follow at stride 1
/// ([batch, heads_q, seqlen_q] dense, [heads_q, total_q] packed, as Problem::lse_index).
FL_HD int64_t lse_offset(const AttnParams& p, const SeqSpan& s, int b, int h) {
  return p.cu_seqlens_q == nullptr ? (static_cast<int64_t>(b) * p.heads_q + h) * p.seqlen_q
                                   : static_cast<int64_t>(h) * p.total_q + s.q0;
}

}  // namespace fl
