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
#include <functional>
#include <queue>
#include <vector>

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
/// sums depend on the problem alone, as rung 11's kSplitTargetBlocks); the FLOPs the kernel does in
/// the time the copy engine moves one byte (its backward rate, about 500 TFLOP/s, over the 3.0 TB/s
/// of a copy on the H100), which prices a split's fp32 partial dK, dV; the gain a split must bring.
constexpr int kNominalSms = 132;
constexpr double kFlopsPerByte = 167.0;
constexpr double kMinSplitGain = 0.05;

/// The modelled efficiency of rung 14's grid for @p p with the group split in @p split slices: the
/// blocks in launch order (K/V block fastest, then KV head x slice, then batch), each given to the
/// first of kNominalSms SMs to be free (a list schedule), each as long as its steps (query blocks
/// that see it, BlockWork's count, times its slice's query heads); all the steps over kNominalSms
/// against the time the last SM finishes. 1.0: no SM idles before the end.
inline double grid_efficiency(const Problem& p, int split) {
  const int block_n = kv_block_keys(p.head_dim), block_m = query_block_rows(p.head_dim);
  const int64_t n_q = (int64_t(p.seqlen_q) + block_m - 1) / block_m, offset = int64_t(p.seqlen_k) - p.seqlen_q;
  const int64_t heads_per_slice = p.heads_q / p.heads_kv / split;
  std::vector<int64_t> steps;  // of each K/V block, for one query head
  for (int64_t key0 = 0; key0 < p.seqlen_k; key0 += block_n)
    steps.push_back(p.causal ? n_q - std::min(n_q, std::max<int64_t>(0, key0 - offset) / block_m) : n_q);
  std::priority_queue<int64_t, std::vector<int64_t>, std::greater<int64_t>> free_at;
  for (int i = 0; i < kNominalSms; ++i) free_at.push(0);
  int64_t total = 0, end = 0;
  for (int64_t group = 0; group < int64_t(p.batch) * p.heads_kv * split; ++group)
    for (int64_t s : steps) {
      const int64_t done = free_at.top() + s * heads_per_slice;
      free_at.pop();
      free_at.push(done);
      end = std::max(end, done);
      total += s * heads_per_slice;
    }
  return end > 0 ? double(total) / (double(kNominalSms) * end) : 1.0;
}

/// The modelled cost of the grid with @p split slices, in FLOPs: the blocks' GEMM work (five per
/// step, each 2 x BLOCK_M x BLOCK_N x d) over grid_efficiency, plus, for a split group, the fp32
/// partial dK, dV written and read back by the convert, priced at kFlopsPerByte.
inline double split_cost(const Problem& p, int split) {
  const int block_n = kv_block_keys(p.head_dim), block_m = query_block_rows(p.head_dim);
  const int64_t n_q = (int64_t(p.seqlen_q) + block_m - 1) / block_m, offset = int64_t(p.seqlen_k) - p.seqlen_q;
  double steps = 0;  // of all blocks: every query head walks the query blocks that see each K/V block
  for (int64_t key0 = 0; key0 < p.seqlen_k; key0 += block_n)
    steps += p.causal ? n_q - std::min(n_q, std::max<int64_t>(0, key0 - offset) / block_m) : n_q;
  steps *= double(p.heads_q) * p.batch;
  const double work = steps * 10.0 * block_m * block_n * p.head_dim / grid_efficiency(p, split);
  const double partial_bytes = split > 1 ? 16.0 * split * p.batch * p.seqlen_k * p.heads_kv * p.head_dim : 0.0;
  return work + kFlopsPerByte * partial_bytes;
}

/// Slices of a GQA group. `balanced` (the rung): rung 11's rule for this head_dim's K/V blocks
/// (kv_block_keys: the smallest divisor of the group that gives the grid 256 blocks), and under a
/// causal mask the divisor from there with the lowest split_cost, if it is at least kMinSplitGain
/// below that of rung 11's. Under the mask K/V block 0 sees every query block of its slice's
/// heads: with the K/V block the grid's fastest index, the longest blocks of the (KV head, batch)
/// groups launched last start late and end the kernel alone (the training demo's shape, batch 2,
/// 4k keys, 16/4 heads: grid_efficiency 0.63 unsplit, 0.88 in four slices; README, "The group
/// split"). A split costs the fp32 partial dK, dV and their convert, which short sequences do not
/// earn back. `none` and `full`: the ablations' extremes. The deterministic mode keeps the grid, so
/// the same rule.
inline int kv_splits(const Problem& p, bwd::GroupSplit how = bwd::GroupSplit::balanced) {
  const int group = p.heads_q / p.heads_kv;
  const int base = bwd::kv_splits(p, kv_block_keys(p.head_dim), false, how);
  if (how != bwd::GroupSplit::balanced || !p.causal) return base;
  const double base_cost = split_cost(p, base);
  int best = base;
  double best_cost = base_cost;
  for (int split = base + 1; split <= group; ++split) {
    if (group % split != 0) continue;
    const double cost = split_cost(p, split);
    if (cost < best_cost) best = split, best_cost = cost;
  }
  return best_cost <= (1.0 - kMinSplitGain) * base_cost ? best : base;
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
