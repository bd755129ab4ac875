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
///   tile counter one int32 (a 128-byte slot) at tile_counter_offset
///   dK, dV       [2][kv_split][batch, seqlen_k, heads_kv, d]   (rung 11's)     kv_split > 1 only
///   exact D      [rows] + [delta_splits][2][rows]              (rung 11's)     the exact D pass only
///   // clang-format on
/// @endcode
/// rows_padded is seqlen_q rounded up to 128, so every query block of 64 or 128 rows reads its LSE
/// and D with one bulk copy and adds its dQ tile as one contiguous run, whatever M. A dQ tile is
/// stored in the math warpgroups' register order (kernel.cuh: dq_slot), which the convert kernel
/// undoes.
///
/// A packed batch (cu_seqlens_q) pads each sequence instead: the statistics are [heads_q,
/// head_rows], and sequence b's rows start at packed_row0 = (cu_seqlens_q[b] / 128 + b) · 128, a
/// multiple of 128 with room for its len_q rounded up to 128 before the next sequence's (FA3's
/// padded offsets). The dK, dV partial sums are [2][kv_split][total_k, heads_kv, d]. One rule
/// addresses both layouts: row q of head h of sequence b is stat0(b) + h · head_rows + q
/// (stat_row0).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <queue>
#include <tuple>
#include <vector>

#include "flashladder/problem.h"
#include "flashladder/types.h"  // FL_HD
#include "../11_backward/workspace.h"
#include "traits.h"

namespace fl::hopper14 {

/// What the layout reads of a problem: its dense sizes (a packed batch's longest sequences) and,
/// packed, its token counts. Made from the host's Problem or from a launch's AttnParams, which has
/// the counts but not the host's cu_seqlens.
struct WsShape {
  Problem p;
  bool packed;
  int64_t total_q, total_k;
  WsShape(const Problem& q) : p(q), packed(q.varlen()), total_q(q.total_q()), total_k(q.total_k()) {}  // NOLINT
  WsShape(const AttnParams& a)  // NOLINT: implicit, like the Problem overload
      : p(problem_of(a)), packed(a.cu_seqlens_q != nullptr), total_q(a.total_q), total_k(a.total_k) {}
};

/// Where sequence b of a packed batch starts in the padded rows of a head (see the file comment).
FL_HD int64_t packed_row0(int cu_seqlen_q_b, int b) { return (int64_t(cu_seqlen_q_b) / 128 + b) * 128; }

/// Rows of one head in the padded statistics and the dQ accumulator: seqlen_q rounded up to 128
/// (dense), or packed_row0 of the batch's end (packed).
inline int64_t head_rows(const WsShape& s) {
  return s.packed ? packed_row0(static_cast<int>(s.total_q), s.p.batch) : (int64_t(s.p.seqlen_q) + 127) / 128 * 128;
}

/// The padded row of query 0, head 0 of sequence @p b: row q of head h is this + h · head_rows + q.
FL_HD int64_t stat_row0(const AttnParams& p, int64_t head_rows, int b) {
  return p.cu_seqlens_q ? packed_row0(p.cu_seqlens_q[b], b) : int64_t(b) * p.heads_q * head_rows;
}

/// The packed sequence whose padded rows hold row @p row of a head (0 <= row < head_rows): the last
/// b with packed_row0(b) <= row, by bisection over cu_seqlens_q.
FL_HD int packed_seq_of_row(const AttnParams& p, int64_t row) {
  int lo = 0, hi = p.batch - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (packed_row0(p.cu_seqlens_q[mid], mid) <= row) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

/// Padded row @p row of the statistics (0 <= row < stat_rows) as (sequence, head, query), and
/// whether it is a query of the problem (else padding: LSE·log2(e) = +inf, D = 0, no dQ row). The
/// inverse of stat_row0 (CPU-tested); the statistics and dQ convert kernels walk the rows with it.
struct PaddedRow {
  int b, h, q;
  bool real;
};
FL_HD PaddedRow padded_row_at(const AttnParams& p, int64_t head_rows, int64_t row) {
  if (p.cu_seqlens_q == nullptr) {
    const int q = static_cast<int>(row % head_rows);
    const int64_t bh = row / head_rows;
    return {static_cast<int>(bh / p.heads_q), static_cast<int>(bh % p.heads_q), q, q < p.seqlen_q};
  }
  const int64_t r = row % head_rows;
  const int b = packed_seq_of_row(p, r);
  const int q = static_cast<int>(r - packed_row0(p.cu_seqlens_q[b], b));
  return {b, static_cast<int>(row / head_rows), q, q < p.cu_seqlens_q[b + 1] - p.cu_seqlens_q[b]};
}

/// Padded rows of the statistics (each of LSE and D): heads_q x head_rows (x batch, dense).
inline size_t stat_rows(const WsShape& s) {
  return size_t(s.packed ? 1 : s.p.batch) * s.p.heads_q * head_rows(s);
}

inline size_t dq_acc_offset(const WsShape& s) { return 2 * stat_rows(s); }

/// The deterministic mode's counters, one per (batch, head, 64-row block): K/V block j adds its
/// share of a query block's dQ when the counter says j blocks have added theirs.
inline size_t counter_count(const WsShape& s) { return stat_rows(s) / 64; }
inline size_t counter_offset(const WsShape& s) { return dq_acc_offset(s) + stat_rows(s) * s.p.head_dim; }

/// The persistent grid's tile counter (one int in a 128-byte slot, zeroed with the accumulator):
/// each block's next K/V block after its first (kernel.cuh's persistent producer).
inline size_t tile_counter_offset(const WsShape& s, bool deterministic) {
  return counter_offset(s) + (deterministic ? (counter_count(s) + 31) / 32 * 32 : 0);
}

/// The split group's partial dK, dV (rung 11's layout and convert kernel): after the counters.
inline size_t dkv_acc_offset(const WsShape& s, bool deterministic) { return tile_counter_offset(s, deterministic) + 32; }

/// Key rows of dK, dV: batch x seqlen_k, or total_k packed.
inline int64_t key_rows(const WsShape& s) { return s.packed ? s.total_k : int64_t(s.p.batch) * s.p.seqlen_k; }

/// The schedule model of a causal grid (bench/studies/rung14_split_model.py, the same model):
/// K/V block j of a (batch, KV head, slice) group walks the query blocks from its diagonal on, for
/// each query head of its slice; the blocks go, in launch order (K/V block fastest), to the first of
/// kSms SMs to be free. A split into s slices costs the work's FLOPs over the schedule's efficiency
/// plus the fp32 partial dK, dV's bytes (written, then read by the convert) at kFlopsPerByte; the
/// model takes the cheapest split, and only if it is kMinGain cheaper than no split. Constants, not
/// the device's: the split sizes the workspace, which depends on the problem alone.
namespace split_model {
constexpr int kSms = 132;
constexpr double kFlopsPerByte = 167.0;  // about 500 TFLOP/s of backward over a 3.0 TB/s copy (H100)
constexpr double kMinGain = 0.05;

/// Query blocks each K/V block walks for one query head (the kernel's BlockWork).
inline std::vector<int> block_steps(int seqlen_q, int seqlen_k, int d, bool causal) {
  const int bm = query_block_rows(d), bn = kv_block_keys(d);
  const int n_q = (seqlen_q + bm - 1) / bm, offset = seqlen_k - seqlen_q;
  std::vector<int> steps;
  for (int key0 = 0; key0 < seqlen_k; key0 += bn)
    steps.push_back(causal ? n_q - std::min(n_q, std::max(0, key0 - offset) / bm) : n_q);
  return steps;
}

/// All the blocks' steps over kSms SMs against the list schedule's end: 1 is a perfect schedule.
inline double efficiency(const Problem& p, int split) {
  const std::vector<int> steps = block_steps(p.seqlen_q, p.seqlen_k, p.head_dim, p.causal);
  const int64_t per_slice = p.heads_q / p.heads_kv / split;
  std::priority_queue<int64_t, std::vector<int64_t>, std::greater<int64_t>> free_at;
  for (int i = 0; i < kSms; ++i) free_at.push(0);
  int64_t total = 0, end = 0;
  for (int64_t g = 0; g < int64_t(p.batch) * p.heads_kv * split; ++g)
    for (int st : steps) {
      const int64_t t = free_at.top() + st * per_slice;
      free_at.pop();
      free_at.push(t);
      end = std::max(end, t);
      total += st * per_slice;
    }
  return end > 0 ? double(total) / (double(kSms) * double(end)) : 1.0;
}

/// The model's cost of a split into @p split slices, in FLOP-equivalents.
inline double cost(const Problem& p, int split) {
  const int bm = query_block_rows(p.head_dim), bn = kv_block_keys(p.head_dim);
  int64_t steps = 0;
  for (int st : block_steps(p.seqlen_q, p.seqlen_k, p.head_dim, p.causal)) steps += st;
  const double work = double(steps) * p.heads_q * p.batch * 10.0 * bm * bn * p.head_dim / efficiency(p, split);
  const double partial = split > 1 ? 16.0 * split * p.batch * double(p.seqlen_k) * p.heads_kv * p.head_dim : 0.0;
  return work + kFlopsPerByte * partial;
}

/// The model's split: a divisor of the group, 1 unless one is kMinGain cheaper.
inline int predicted(const Problem& p) {
  const int group = p.heads_q / p.heads_kv;
  const double base = cost(p, 1);
  int best = 1;
  double best_cost = base;
  for (int s = 2; s <= group; ++s)
    if (group % s == 0) {
      const double c = cost(p, s);
      if (c < best_cost) best = s, best_cost = c;
    }
  return best_cost <= (1.0 - kMinGain) * base ? best : 1;
}
}  // namespace split_model

/// `modeled`'s split of a dense causal problem: the larger of rung 11's rule and the schedule
/// model's, computed once per shape and cached (the launch, the workspace size and the notes ask
/// for it; the model walks every block, so not on every call). Not causal, or packed: rung 11's
/// rule (equal blocks: the model has nothing to balance; a packed batch's lengths are on the device).
inline int modeled_split(const WsShape& s) {
  const int rule = bwd::kv_splits(s.p, kv_block_keys(s.p.head_dim), false, bwd::GroupSplit::balanced);
  if (s.packed || !s.p.causal || s.p.heads_q == s.p.heads_kv) return rule;
  using Key = std::tuple<int, int, int, int, int, int>;
  static std::mutex mu;
  static std::map<Key, int> cache;
  const Key key{s.p.batch, s.p.seqlen_q, s.p.seqlen_k, s.p.heads_q, s.p.heads_kv, s.p.head_dim};
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(key);
  if (it == cache.end()) {
    if (cache.size() >= 4096) cache.clear();
    it = cache.emplace(key, split_model::predicted(s.p)).first;
  }
  return std::max(rule, it->second);
}

/// Slices of a GQA group: `balanced` (the rung) is rung 11's rule for this head_dim's K/V blocks
/// (kv_block_keys: the smallest divisor of the group that gives the grid 256 blocks); `none` and
/// `full` are the ablations' extremes (README, "The group split": under a causal mask a full split
/// is 7-11% faster at 4k-8k keys and d = 128, and 21% on the training demo's shape, slower on short
/// rows); `modeled` (the split-model candidate) is the schedule model's choice under a causal mask
/// (modeled_split). The deterministic mode keeps the grid, so the same rule.
inline int kv_splits(const WsShape& s, bwd::GroupSplit how = bwd::GroupSplit::balanced) {
  if (how == bwd::GroupSplit::modeled) return modeled_split(s);
  return bwd::kv_splits(s.p, kv_block_keys(s.p.head_dim), false, how);
}

/// Where the exact D pass's row sums start (rung 11's exact pass, run first on long rows): D
/// [batch, heads_q, seqlen_q], then its accumulator pairs.
inline size_t exact_delta_offset(const WsShape& s, bool deterministic, bwd::GroupSplit how = bwd::GroupSplit::balanced) {
  const int split = kv_splits(s, how);
  const size_t part = split > 1 ? 2 * size_t(split) * key_rows(s) * s.p.heads_kv * s.p.head_dim : 0;
  return (dkv_acc_offset(s, deterministic) + part + 31) / 32 * 32;
}

/// Where the exact pass's accumulator pairs start: after its D, rounded up to 32 floats.
inline size_t exact_delta_sums_offset(const WsShape& s, bool deterministic,
                                      bwd::GroupSplit how = bwd::GroupSplit::balanced) {
  const size_t rows = size_t(s.p.batch) * s.p.heads_q * s.p.seqlen_q;
  return exact_delta_offset(s, deterministic, how) + (rows + 31) / 32 * 32;
}

/// The exact pass's accumulator pairs (rung 11's, for its 128-key tiles at this head_dim). A packed
/// batch has none: rung 11's pass takes dense batches only (supports() refuses packed sequences of
/// more than bwd::kExactDeltaKeys keys).
inline int exact_delta_splits(const WsShape& s, bool deterministic, bwd::DeltaPolicy policy) {
  return s.packed ? 0 : bwd::delta_splits(s.p, 128, deterministic, policy);
}

/// Bytes of the workspace (the file comment's layout).
inline size_t workspace_bytes(const WsShape& s, bool deterministic, bwd::DeltaPolicy policy,
                              bwd::GroupSplit how = bwd::GroupSplit::balanced) {
  const size_t rows = size_t(s.p.batch) * s.p.heads_q * s.p.seqlen_q;
  const int n_delta = exact_delta_splits(s, deterministic, policy);
  if (n_delta == 0) return exact_delta_offset(s, deterministic, how) * sizeof(float);
  return (exact_delta_sums_offset(s, deterministic, how) + 2 * size_t(n_delta) * rows) * sizeof(float);
}

}  // namespace fl::hopper14
