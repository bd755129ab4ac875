/// @file steps/14_hopper_backward/workspace.h
/// @brief Rung 14's workspace: where its padded row statistics, its dQ accumulator, the
/// deterministic mode's counters, a split group's partial dK, dV and the exact D pass's sums live.
/// Plain C++ (no CUDA), so the CPU tests check the layout (tests/cpu/test_bwd_workspace.cpp).
///
/// One fp32 buffer (AttnBwdParams::workspace), in this order, offsets in floats (each a multiple
/// of 32: 128-byte aligned, as the bulk copies need 16):
/// @code
///   // clang-format off
///   LSE·log2(e)  [batch, heads_q, rows_padded]            at 0                 +inf past seqlen_q
///   D            [batch, heads_q, rows_padded]            at stat_rows         0 past seqlen_q
///   dQ acc.      [batch, heads_q, rows_padded / M][M x d] at dq_acc_offset     one tile per query block
///   counters     [batch, heads_q, rows_padded / 64] int32 at counter_offset    deterministic only
///   dK, dV       [2][kv_split][batch, seqlen_k, heads_kv, d]   (rung 11's)     kv_split > 1 only
///   exact D      [rows] + [delta_splits][2][rows]              (rung 11's)     the exact D pass only
///   // clang-format on
/// @endcode
/// rows_padded is seqlen_q rounded up to 128, so every query block of 64 or 128 rows reads its LSE
/// and D with one bulk copy and adds its dQ tile as one contiguous run, whatever M. A dQ tile is
/// stored in the math warpgroups' register order (kernel.cuh: dq_slot), which the convert kernel
/// undoes.
#pragma once

#include <cstddef>
#include <cstdint>

#include "flashladder/problem.h"
#include "../11_backward/workspace.h"
#include "traits.h"

namespace fl::hopper14 {

/// Query rows per (batch, head) in the padded statistics and the dQ accumulator.
inline int64_t rows_padded(const Problem& p) { return (int64_t(p.seqlen_q) + 127) / 128 * 128; }

/// (batch, head) rows of the padded statistics: batch x heads_q x rows_padded.
inline size_t stat_rows(const Problem& p) { return size_t(p.batch) * p.heads_q * rows_padded(p); }

inline size_t dq_acc_offset(const Problem& p) { return 2 * stat_rows(p); }

/// The deterministic mode's counters, one per (batch, head, 64-row block): K/V block j adds its
/// share of a query block's dQ when the counter says j blocks have added theirs.
inline size_t counter_count(const Problem& p) { return stat_rows(p) / 64; }
inline size_t counter_offset(const Problem& p) { return dq_acc_offset(p) + stat_rows(p) * p.head_dim; }

/// The split group's partial dK, dV (rung 11's layout and convert kernel): after the counters.
inline size_t dkv_acc_offset(const Problem& p, bool deterministic) {
  return counter_offset(p) + (deterministic ? (counter_count(p) + 31) / 32 * 32 : 0);
}

/// Slices of a GQA group: `balanced` (the rung) is rung 11's rule for this head_dim's K/V blocks
/// (kv_block_keys: the smallest divisor of the group that gives the grid 256 blocks); `none` and
/// `full` are the ablations' extremes (README, "The group split": under a causal mask a full split
/// is 7-11% faster at 4k-8k keys and d = 128, and 21% on the training demo's shape, slower on short
/// rows; the rung does not choose by the mask yet). The deterministic mode keeps the grid, so the
/// same rule.
inline int kv_splits(const Problem& p, bwd::GroupSplit how = bwd::GroupSplit::balanced) {
  return bwd::kv_splits(p, kv_block_keys(p.head_dim), false, how);
}

/// Where the exact D pass's row sums start (rung 11's exact pass, run first on long rows): D
/// [batch, heads_q, seqlen_q], then its accumulator pairs.
inline size_t exact_delta_offset(const Problem& p, bool deterministic, bwd::GroupSplit how = bwd::GroupSplit::balanced) {
  const int split = kv_splits(p, how);
  const size_t part = split > 1 ? 2 * size_t(split) * p.batch * p.seqlen_k * p.heads_kv * p.head_dim : 0;
  return (dkv_acc_offset(p, deterministic) + part + 31) / 32 * 32;
}

/// Where the exact pass's accumulator pairs start: after its D, rounded up to 32 floats.
inline size_t exact_delta_sums_offset(const Problem& p, bool deterministic,
                                      bwd::GroupSplit how = bwd::GroupSplit::balanced) {
  const size_t rows = size_t(p.batch) * p.heads_q * p.seqlen_q;
  return exact_delta_offset(p, deterministic, how) + (rows + 31) / 32 * 32;
}

/// The exact pass's accumulator pairs (rung 11's, for its 128-key tiles at this head_dim).
inline int exact_delta_splits(const Problem& p, bool deterministic, bwd::DeltaPolicy policy) {
  return bwd::delta_splits(p, 128, deterministic, policy);
}

/// Bytes of the workspace (the file comment's layout).
inline size_t workspace_bytes(const Problem& p, bool deterministic, bwd::DeltaPolicy policy,
                              bwd::GroupSplit how = bwd::GroupSplit::balanced) {
  const size_t rows = size_t(p.batch) * p.heads_q * p.seqlen_q;
  const int n_delta = exact_delta_splits(p, deterministic, policy);
  if (n_delta == 0) return exact_delta_offset(p, deterministic, how) * sizeof(float);
  return (exact_delta_sums_offset(p, deterministic, how) + 2 * size_t(n_delta) * rows) * sizeof(float);
}

}  // namespace fl::hopper14
