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

#include <algorithm>
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

/// The causal rule's constants: an H100's SM count (a constant, so the split and the order of the
/// sums depend on the problem alone, as rung 11's kSplitTargetBlocks) and the share of one SM's
/// work the longest block may take.
constexpr int kNominalSms = 132;
constexpr int kLongestBlockShare = 4;  ///< the longest block: at most 1/4 of one SM's share

/// Slices of a GQA group. `balanced` (the rung): rung 11's rule for this head_dim's K/V blocks
/// (kv_block_keys: the smallest divisor of the group that gives the grid 256 blocks), and under a
/// causal mask further, until the longest block, K/V block 0 with every query block of its slice's
/// heads, is at most a kLongestBlockShare-th of one SM's share of all the blocks' steps. Without
/// that, the longest blocks of the (KV head, batch) groups launched last start late (the K/V block
/// is the grid's fastest index) and end the kernel alone: on the training demo's shape (batch 2,
/// 4k keys, 16/4 heads) a block of 256 steps against 256 per SM (README, "Where it loses").
/// `none` and `full`: the ablations' extremes. The deterministic mode keeps the grid, so the same
/// rule.
inline int kv_splits(const Problem& p, bwd::GroupSplit how = bwd::GroupSplit::balanced) {
  const int block_n = kv_block_keys(p.head_dim);
  const int group = p.heads_q / p.heads_kv;
  int split = bwd::kv_splits(p, block_n, false, how);
  if (how != bwd::GroupSplit::balanced || !p.causal || split == group) return split;
  // Steps (query blocks) of each K/V block for one query head, as BlockWork counts them.
  const int block_m = query_block_rows(p.head_dim);
  const int64_t n_q = (int64_t(p.seqlen_q) + block_m - 1) / block_m, offset = int64_t(p.seqlen_k) - p.seqlen_q;
  int64_t total = 0, longest = 0;
  for (int64_t key0 = 0; key0 < p.seqlen_k; key0 += block_n) {
    const int64_t steps = n_q - std::min(n_q, std::max<int64_t>(0, key0 - offset) / block_m);
    total += steps;
    longest = std::max(longest, steps);
  }
  total *= int64_t(group) * p.heads_kv * p.batch;
  for (; split < group; ++split)
    if (group % split == 0 && longest * (group / split) * kNominalSms * kLongestBlockShare <= total) return split;
  return group;
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
