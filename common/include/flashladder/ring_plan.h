/// @file common/include/flashladder/ring_plan.h
/// @brief Rung 12's bookkeeping, in plain C++ (no CUDA) so the CPU tests check it directly:
/// which tokens each rank holds (zigzag or contiguous shards), which K/V shard it has at each
/// ring step, and which attention launches that step needs (skip, full, diagonal-masked).
///
/// The sequence of N tokens is cut into C chunks of near-equal length (the first N mod C
/// chunks one token longer, so any N works, even N < C: then some chunks are empty).
///
/// @code
///   // clang-format off
///   zigzag, P = 4 ranks, C = 2P = 8 chunks        contiguous, P = 4, C = P = 4 chunks
///
///   chunk:  0  1  2  3  4  5  6  7                chunk:  0     1     2     3
///   rank:   0  1  2  3  3  2  1  0                rank:   0     1     2     3
///
///   rank r holds chunks r and 2P-1-r,             rank r holds chunk r
///   in that order (its local rows)
///   // clang-format on
/// @endcode
///
/// Ring step s (0 <= s < P): rank r holds the K/V shard that rank (r - s) mod P started
/// with, computes its queries against it, and meanwhile passes it on to rank r + 1.
/// With a causal mask, a (query chunk, key chunk) pair is
///   - skipped  when the key chunk lies wholly in the query chunk's future (k > q),
///   - full     when it lies wholly in its past (k < q): no mask at all,
///   - diagonal when it is the same chunk (k == q): causal with equal lengths.
/// Causal attention is bottom-right aligned in the ladder (query i sees key j iff
/// j <= i + seqlen_k - seqlen_q), so one launch can also cover "past chunks, then the
/// diagonal chunk" when they are contiguous in the K/V buffer: the past keys are all visible
/// and the last seqlen_q keys form the diagonal. The planner uses that to give each query
/// chunk at most one launch per step.
///
/// Contiguous shards make the causal work lopsided: rank r computes on r + 1 of the P steps
/// (rank P-1 does ~2P - 1 times rank 0's work; Brandon et al. 2023, Striped Attention, analyse
/// this and balance it by striping tokens round-robin). Zigzag pairs an early chunk with a late
/// one, so every rank does ~2 (N/2P)^2 pairs on every step, and each rank's tokens stay in two
/// contiguous chunks (the layout of Megatron-LM's context parallelism).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace fl::ring {

/// How the sequence is split over the ranks.
enum class Sharding { zigzag, contiguous };

/// "zigzag" / "contiguous" (the --variant names; "" is zigzag).
inline const char* sharding_name(Sharding s) {
  return s == Sharding::zigzag ? "zigzag" : "contiguous";
}

/// Parses a --variant value; false if unknown. "" means the default (zigzag).
inline bool parse_sharding(const std::string& v, Sharding* out) {
  if (v.empty() || v == "zigzag")
    *out = Sharding::zigzag;
  else if (v == "contiguous")
    *out = Sharding::contiguous;
  else
    return false;
  return true;
}

/// A half-open range of token positions [begin, begin + len).
struct Range {
  int begin = 0;
  int len = 0;
  int end() const { return begin + len; }
};

/// Number of chunks the sequence is cut into: 2P (zigzag) or P (contiguous).
inline int num_chunks(Sharding s, int ranks) {
  return s == Sharding::zigzag ? 2 * ranks : ranks;
}

/// Global token range of chunk @p c of @p chunks over @p n tokens: near-equal lengths,
/// the first n % chunks chunks one token longer.
inline Range chunk_range(int n, int chunks, int c) {
  const int base = n / chunks, rem = n % chunks;
  Range r;
  r.begin = c * base + std::min(c, rem);
  r.len = base + (c < rem ? 1 : 0);
  return r;
}

/// The chunks rank @p rank holds, in the order of its local rows.
inline std::vector<int> chunks_of_rank(Sharding s, int ranks, int rank) {
  if (s == Sharding::contiguous) return {rank};
  return {rank, 2 * ranks - 1 - rank};
}

/// The rank that holds chunk @p c.
inline int owner_of_chunk(Sharding s, int ranks, int c) {
  if (s == Sharding::contiguous) return c;
  return c < ranks ? c : 2 * ranks - 1 - c;
}

/// A chunk as one rank stores it: its global range and its first row in the rank's shard.
struct LocalChunk {
  int chunk = 0;  ///< global chunk index
  Range global;   ///< token positions in the whole sequence
  int local = 0;  ///< first row in the rank's shard
};

/// The layout of rank @p rank's shard (the same for its Q rows and its K/V rows).
struct Shard {
  int rank = 0;
  int len = 0;                     ///< rows in the shard
  std::vector<LocalChunk> chunks;  ///< in local order
};

inline Shard shard_of_rank(Sharding s, int n, int ranks, int rank) {
  Shard sh;
  sh.rank = rank;
  const int C = num_chunks(s, ranks);
  for (int c : chunks_of_rank(s, ranks, rank)) {
    LocalChunk lc;
    lc.chunk = c;
    lc.global = chunk_range(n, C, c);
    lc.local = sh.len;
    sh.len += lc.global.len;
    sh.chunks.push_back(lc);
  }
  return sh;
}

/// The longest shard over all ranks (buffer sizes).
inline int max_shard_len(Sharding s, int n, int ranks) {
  int m = 0;
  for (int r = 0; r < ranks; ++r) m = std::max(m, shard_of_rank(s, n, ranks, r).len);
  return m;
}

/// What a (query chunk, key chunk) pair needs.
enum class PairKind { skip, full, diagonal };

inline const char* pair_kind_name(PairKind k) {
  return k == PairKind::skip ? "skip" : k == PairKind::full ? "full" : "diagonal";
}

/// Chunks are numbered in sequence order for both shardings, so the causal question is a
/// comparison of chunk indices. Without a mask every pair is full.
inline PairKind pair_kind(bool causal, int q_chunk, int k_chunk) {
  if (!causal) return PairKind::full;
  if (k_chunk > q_chunk) return PairKind::skip;
  return k_chunk == q_chunk ? PairKind::diagonal : PairKind::full;
}

/// Rows [rows.begin, rows.end()) of the rank's shard into which one launch's partial result
/// is merged. first: no earlier step covers these rows, so the merge starts the accumulator
/// instead of reading it (no reset pass before the ring); last: no later step covers them, so
/// the merge writes the final 16-bit O instead of the fp32 accumulator (no conversion pass
/// after it).
struct MergePiece {
  Range rows;
  bool first = false;
  bool last = false;
};

/// One attention launch of a ring step, in local rows: queries [q.begin, q.end()) of the
/// rank's Q shard against keys [k.begin, k.end()) of the K/V shard it holds at that step.
/// causal: the ladder's bottom-right causal mask on this (seqlen_q = q.len, seqlen_k = k.len)
/// problem, i.e. the last q.len keys are the queries' own chunk (the diagonal).
struct Launch {
  Range q;
  Range k;
  bool causal = false;
  std::vector<MergePiece> merges;  ///< its rows, cut where their first or last step differs
  /// (query, key) pairs it computes per (batch, head).
  int64_t pairs() const {
    if (!causal) return static_cast<int64_t>(q.len) * k.len;
    const int64_t past = k.len - q.len;  // every query sees these
    return static_cast<int64_t>(q.len) * past + static_cast<int64_t>(q.len) * (q.len + 1) / 2;
  }
};

/// One ring step of one rank.
struct StepPlan {
  int step = 0;
  int src_rank = 0;                ///< whose K/V shard this rank holds at this step
  int kv_len = 0;                  ///< rows of that shard
  int send_to = 0, recv_from = 0;  ///< ring neighbours
  int send_len = 0, recv_len = 0;  ///< rows passed on after this step (0: none, the last step)
  std::vector<Launch> launches;    ///< disjoint query rows; empty: the step is skipped
  int64_t pairs() const {
    int64_t n = 0;
    for (const Launch& l : launches) n += l.pairs();
    return n;
  }
};

/// The whole forward pass of one rank.
struct RankPlan {
  Sharding sharding = Sharding::zigzag;
  bool causal = false;
  int n = 0, ranks = 1, rank = 0;
  Shard q_shard;                ///< this rank's queries (and the K/V shard it starts with)
  std::vector<StepPlan> steps;  ///< P steps
  int64_t pairs() const {
    int64_t n_pairs = 0;
    for (const StepPlan& s : steps) n_pairs += s.pairs();
    return n_pairs;
  }
};

/// The launches rank @p rank needs against the shard @p kv (held at some step). For each
/// query chunk: the visible key chunks (full ones, then at most one diagonal), which must be
/// contiguous in the K/V shard so that one bottom-right-causal launch covers them all; then
/// adjacent query chunks with the same unmasked key range are fused into one launch.
inline std::vector<Launch> launches_for(const Shard& q_shard, const Shard& kv, bool causal) {
  std::vector<Launch> out;
  for (const LocalChunk& qc : q_shard.chunks) {
    if (qc.global.len == 0) continue;
    Launch l;
    l.q = {qc.local, qc.global.len};
    bool any = false, diag_seen = false;
    for (const LocalChunk& kc : kv.chunks) {
      if (kc.global.len == 0) continue;
      const PairKind kind = pair_kind(causal, qc.chunk, kc.chunk);
      if (kind == PairKind::skip) continue;
      if (diag_seen)
        throw std::logic_error("ring plan: a visible key chunk follows the diagonal chunk");
      if (!any) {
        l.k = {kc.local, 0};
        any = true;
      } else if (kc.local != l.k.end()) {
        throw std::logic_error("ring plan: the visible key chunks are not contiguous");
      }
      l.k.len += kc.global.len;
      if (kind == PairKind::diagonal) {
        diag_seen = true;
        l.causal = true;
      }
    }
    if (!any) continue;
    if (!out.empty()) {
      Launch& prev = out.back();
      // Fuse with the previous launch: adjacent queries, same keys, no mask on either.
      if (!prev.causal && !l.causal && prev.q.end() == l.q.begin && prev.k.begin == l.k.begin &&
          prev.k.len == l.k.len) {
        prev.q.len += l.q.len;
        continue;
      }
      // Or: the previous launch is a diagonal chunk alone and this one is the next chunk
      // against [that chunk, its own diagonal]. Together they are one square causal problem
      // (query i sees key j iff j <= i), which is what a rank's own shard is at step 0: its
      // chunks are in the sequence's order, so the whole shard is one causal launch.
      if (prev.causal && l.causal && prev.q.end() == l.q.begin && prev.k.len == prev.q.len &&
          prev.k.begin == l.k.begin && l.k.len == prev.k.len + l.q.len) {
        prev.q.len += l.q.len;
        prev.k.len = l.k.len;
        continue;
      }
    }
    out.push_back(l);
  }
  return out;
}

/// Fills every launch's merges: the rank's rows are cut at every launch's edges, so each piece
/// is covered by the same launches throughout; a piece is first at the first launch that covers
/// it and last at the last one, in the order they run (step by step, each step's launches in
/// turn: a step cut by split_keys has several launches over the same rows). Adjacent pieces with
/// the same flags are joined.
inline void plan_merges(RankPlan* p) {
  std::vector<int> cuts;
  std::vector<Launch*> order;  // every launch, in the order the schedule runs them
  for (StepPlan& sp : p->steps)
    for (Launch& l : sp.launches) {
      cuts.push_back(l.q.begin);
      cuts.push_back(l.q.end());
      order.push_back(&l);
    }
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  auto covers = [](const Launch* l, int row) { return row >= l->q.begin && row < l->q.end(); };
  const int n = static_cast<int>(order.size());
  for (int i = 0; i < n; ++i) {
    Launch& l = *order[i];
    l.merges.clear();
    for (size_t c = 0; c + 1 < cuts.size(); ++c) {
      const int b = cuts[c], e = cuts[c + 1];
      if (b < l.q.begin || e > l.q.end()) continue;  // a piece outside this launch
      bool earlier = false, later = false;
      for (int t = 0; t < n && !earlier; ++t) earlier = t < i && covers(order[t], b);
      for (int t = i + 1; t < n && !later; ++t) later = covers(order[t], b);
      const MergePiece m{{b, e - b}, !earlier, !later};
      if (!l.merges.empty() && l.merges.back().rows.end() == b &&
          l.merges.back().first == m.first && l.merges.back().last == m.last)
        l.merges.back().rows.len += m.rows.len;
      else
        l.merges.push_back(m);
    }
  }
}

/// The longest row whose D rung 11 takes from the fp32 O of one launch: its bwd::kExactDeltaKeys
/// (steps/11_backward/delta_policy.h). A copy, so that common/ includes nothing from steps/; rung
/// 12 (ring_params.h) and the CPU test static_assert that the two agree.
constexpr int kTrustedDeltaKeys = 16384;

/// The most keys one launch of the forward rung may sum over, on rows of @p n keys, when a backward
/// pass follows (0: no limit).
///
/// The backward's D = rowsum(dO * O) comes from the forward's fp32 O. That O carries a bias that
/// grows with the keys one launch sums, as truncating fp32 accumulation in the tensor cores gives
/// (measured on Volta to Ampere: docs/sources.md) when O += P V adds every 16 keys into the same
/// accumulator. D carries the
/// bias, and dQ_i = s sum_j dS_ij K_j sums it over the row. Measured on the ring, dQ's error is
/// proportional to L sqrt(N) for L keys per launch on rows of N keys (README, "On four H200s").
/// Rung 11 trusts the fp32 O's D up to rows of kExactDeltaKeys = 16384 keys in one launch
/// (L = N = 16k). The cap keeps L sqrt(N) at that level: L <= 16384 sqrt(16384 / N), a multiple of
/// 128 keys (4096 at N = 256k). The launches' fp32 partials are then merged on the CUDA cores,
/// rounded to nearest, which adds no bias.
inline int forward_key_cap(int n) {
  constexpr int kRef = kTrustedDeltaKeys;
  constexpr int kQuantum = 128;
  if (n <= kRef) return 0;
  const int cap =
      static_cast<int>(kRef * std::sqrt(static_cast<double>(kRef) / n)) / kQuantum * kQuantum;
  return std::max(cap, kQuantum);
}

/// @p l cut into launches none of whose rows sums over more than @p cap keys; together they compute
/// exactly @p l's (query, key) pairs, each once, under the ladder's bottom-right causal mask ({l}
/// when cap is 0 or no row of l sees more than cap keys). Every piece keeps a bottom-right mask
/// or none, so any forward rung runs it:
///
///   unmasked  the keys in blocks of cap, each against every query: K / cap launches.
///   causal    past = k.len - q.len keys every query sees, then the diagonal. The keys are cut into
///             blocks of cap from the launch's first key; row i sees keys [0, past + i]. Band m
///             holds the rows whose last key falls in block m (rows [m cap - past, (m+1) cap -
///             past)): one causal launch of those rows against keys [m cap, past + band end), at
///             most cap keys, bottom-right aligned again. Every block b before that is seen whole
///             by all rows of the later bands: one unmasked launch of rows [(b+1) cap - past,
///             q.len) against block b. About 2 K / cap launches, and every row is merged in about
///             past / cap + 1 pieces.
///
/// @code
///   // clang-format off
///   causal, past = 2 cap, q.len = 2 cap    keys:  | block 0 | block 1 | block 2 | block 3 |
///   rows [0, cap)       band 2                     |  full   |  full   | causal  |
///   rows [cap, 2 cap)   band 3                     |  full   |  full   |  full   | causal  |
///   unmasked launches: block 0 and block 1 x rows [0, 2 cap); block 2 x rows [cap, 2 cap)
///   // clang-format on
/// @endcode
inline std::vector<Launch> split_keys(const Launch& l, int cap) {
  if (cap <= 0 || l.k.len <= cap) return {l};
  std::vector<Launch> out;
  auto piece = [&](int q0, int q1, int k0, int k1, bool causal) {  // relative to l's rows and keys
    if (q1 <= q0 || k1 <= k0) return;
    Launch p;
    p.q = {l.q.begin + q0, q1 - q0};
    p.k = {l.k.begin + k0, k1 - k0};
    p.causal = causal;
    out.push_back(p);
  };
  if (!l.causal) {
    const int blocks = (l.k.len + cap - 1) / cap;
    for (int b = 0; b < blocks; ++b)
      piece(0, l.q.len, b * cap, std::min(l.k.len, (b + 1) * cap), false);
    return out;
  }
  const int past = l.k.len - l.q.len;
  const int64_t blocks = (static_cast<int64_t>(l.k.len) + cap - 1) / cap;
  for (int64_t b = 0; b < blocks; ++b) {  // block b, whole, for the rows whose band comes after it
    const int64_t row0 = (b + 1) * cap - past;
    piece(static_cast<int>(std::clamp<int64_t>(row0, 0, l.q.len)), l.q.len,
          static_cast<int>(b * cap), static_cast<int>(std::min<int64_t>(l.k.len, (b + 1) * cap)),
          false);
  }
  // Band m: its rows against the rest of their keys.
  for (int64_t m = past / cap; m < blocks; ++m) {
    const int q0 = static_cast<int>(std::clamp<int64_t>(m * cap - past, 0, l.q.len));
    const int q1 = static_cast<int>(std::clamp<int64_t>((m + 1) * cap - past, 0, l.q.len));
    piece(q0, q1, static_cast<int>(m * cap), past + q1, true);
  }
  return out;
}

/// True when two launches of step @p sp overlap in the range @p r names: their query rows
/// (&Launch::q) or their keys (&Launch::k).
inline bool launches_overlap(const StepPlan& sp, Range Launch::*r) {
  for (size_t a = 0; a < sp.launches.size(); ++a)
    for (size_t b = a + 1; b < sp.launches.size(); ++b) {
      const Range& x = sp.launches[a].*r;
      const Range& y = sp.launches[b].*r;
      if (x.len > 0 && y.len > 0 && x.begin < y.end() && y.begin < x.end()) return true;
    }
  return false;
}

/// True when two launches of step @p sp compute the same query rows: a plan cut by split_keys. Its
/// merges must then run after each launch, since every launch writes its partial result to the
/// same rows of one buffer (ring_schedule.cu).
inline bool launches_share_rows(const StepPlan& sp) {
  return launches_overlap(sp, &Launch::q);
}

/// The plan of rank @p rank in a ring of @p ranks over @p n tokens.
///
/// @p key_cap > 0: every launch cut by split_keys (the forward of a pass with a backward:
/// forward_key_cap). The backward runs the uncut plan: its launches must read disjoint keys.
inline RankPlan plan_rank(Sharding s, bool causal, int n, int ranks, int rank, int key_cap = 0) {
  if (ranks < 1 || rank < 0 || rank >= ranks || n < 1)
    throw std::invalid_argument("ring plan: need n >= 1 and 0 <= rank < ranks");
  RankPlan p;
  p.sharding = s;
  p.causal = causal;
  p.n = n;
  p.ranks = ranks;
  p.rank = rank;
  p.q_shard = shard_of_rank(s, n, ranks, rank);
  for (int step = 0; step < ranks; ++step) {
    StepPlan sp;
    sp.step = step;
    sp.src_rank = ((rank - step) % ranks + ranks) % ranks;
    const Shard kv = shard_of_rank(s, n, ranks, sp.src_rank);
    sp.kv_len = kv.len;
    sp.send_to = (rank + 1) % ranks;
    sp.recv_from = (rank - 1 + ranks) % ranks;
    if (step + 1 < ranks) {  // the last step passes nothing on
      sp.send_len = kv.len;
      sp.recv_len = shard_of_rank(s, n, ranks, (sp.src_rank - 1 + ranks) % ranks).len;
    }
    sp.launches = launches_for(p.q_shard, kv, causal);
    if (key_cap > 0) {
      std::vector<Launch> cut;
      for (const Launch& l : sp.launches)
        for (Launch& piece : split_keys(l, key_cap)) cut.push_back(std::move(piece));
      sp.launches = std::move(cut);
    }
    p.steps.push_back(sp);
  }
  plan_merges(&p);
  return p;
}

/// True when two launches of step @p sp read the same key rows. The backward pass writes each
/// launch's partial dK, dV rows into one buffer before it sums them (ring_schedule.cu), so it needs
/// the launches' key ranges disjoint; launches_for gives every plan at most one launch per step.
inline bool launches_share_keys(const StepPlan& sp) {
  return launches_overlap(sp, &Launch::k);
}

/// Where global token @p pos lives: the rank and the row in its shard.
struct Location {
  int rank = 0;
  int row = 0;
};

inline Location locate(Sharding s, int n, int ranks, int pos) {
  const int C = num_chunks(s, ranks);
  // Chunks of near-equal length: the first rem have base + 1 tokens.
  const int base = n / C, rem = n % C;
  const int long_tokens = rem * (base + 1);
  const int c = pos < long_tokens ? pos / (base + 1) : rem + (pos - long_tokens) / base;
  const int r = owner_of_chunk(s, ranks, c);
  const Shard sh = shard_of_rank(s, n, ranks, r);
  for (const LocalChunk& lc : sh.chunks)
    if (lc.chunk == c) return {r, lc.local + (pos - lc.global.begin)};
  throw std::logic_error("ring plan: chunk not found in its owner's shard");
}

/// Unmasked (query, key) pairs per (batch, head) of each rank's whole forward pass: the
/// causal imbalance the contiguous variant shows and zigzag removes.
inline std::vector<int64_t> pairs_per_rank(Sharding s, bool causal, int n, int ranks) {
  std::vector<int64_t> out;
  for (int r = 0; r < ranks; ++r) out.push_back(plan_rank(s, causal, n, ranks, r).pairs());
  return out;
}

/// max / mean of pairs_per_rank: 1.0 is perfect balance; the ring's time follows the max.
inline double imbalance(const std::vector<int64_t>& pairs) {
  if (pairs.empty()) return 1.0;
  int64_t mx = 0, sum = 0;
  for (int64_t p : pairs) {
    mx = std::max(mx, p);
    sum += p;
  }
  return sum == 0 ? 1.0 : static_cast<double>(mx) * pairs.size() / static_cast<double>(sum);
}

}  // namespace fl::ring
