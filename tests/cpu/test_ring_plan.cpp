// Rung 12's host logic on the CPU: the shards (zigzag and contiguous, with tails), the plan of
// every (rank, ring step) (skip / full / diagonal-masked launches), the ring's transfers, and
// the merge of the partial (O, LSE) results by the one LSE combine of softmax_math.h against a
// direct softmax over the whole sequence in double. The executable's flag parser too.
#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "12_ring_attention/ring_options.h"
#include "12_ring_attention/ring_params.h"
#include "catch_compat.h"
#include "flashladder/ring_plan.h"
#include "flashladder/softmax_math.h"

using namespace fl;
using namespace fl::ring;

namespace {

const Sharding kShardings[] = {Sharding::zigzag, Sharding::contiguous};

/// For every global query, the global keys it is given over all steps of its rank's plan (its
/// launches cut to @p key_cap keys when > 0: the forward of a pass with a backward), applying each
/// launch's mask exactly as a rung does (bottom-right on local indices).
std::vector<std::vector<int>> keys_seen(Sharding s, bool causal, int n, int ranks, int key_cap = 0) {
  std::vector<std::vector<int>> seen(n);
  for (int r = 0; r < ranks; ++r) {
    const RankPlan plan = plan_rank(s, causal, n, ranks, r, key_cap);
    // Global position of each local row of a shard.
    auto global_rows = [&](const Shard& sh) {
      std::vector<int> g(sh.len);
      for (const LocalChunk& lc : sh.chunks)
        for (int t = 0; t < lc.global.len; ++t) g[lc.local + t] = lc.global.begin + t;
      return g;
    };
    const std::vector<int> qg = global_rows(plan.q_shard);
    for (const StepPlan& sp : plan.steps) {
      const std::vector<int> kg = global_rows(shard_of_rank(s, n, ranks, sp.src_rank));
      for (const Launch& l : sp.launches) {
        REQUIRE(l.q.begin >= 0);
        REQUIRE(l.q.end() <= plan.q_shard.len);
        REQUIRE(l.k.begin >= 0);
        REQUIRE(l.k.end() <= sp.kv_len);
        REQUIRE(l.q.len > 0);
        REQUIRE(l.k.len >= l.q.len * (l.causal ? 1 : 0));
        if (key_cap > 0) REQUIRE(l.k.len <= std::max(key_cap, 0));
        for (int i = 0; i < l.q.len; ++i)
          for (int j = 0; j < l.k.len; ++j) {
            const bool visible = !l.causal || j <= i + l.k.len - l.q.len;
            if (visible) seen[qg[l.q.begin + i]].push_back(kg[l.k.begin + j]);
          }
      }
    }
  }
  return seen;
}

}  // namespace

TEST_CASE("ring shards: chunk ranges tile the sequence, tails spread", "[cpu][ring_plan]") {
  for (int n : {1, 5, 16, 17, 1000, 4097})
    for (int chunks : {1, 2, 3, 4, 8, 16}) {
      int next = 0, shortest = n, longest = 0;
      for (int c = 0; c < chunks; ++c) {
        const Range r = chunk_range(n, chunks, c);
        CHECK(r.begin == next);
        next = r.end();
        shortest = std::min(shortest, r.len);
        longest = std::max(longest, r.len);
      }
      CHECK(next == n);
      CHECK(longest - shortest <= 1);  // unequal only by the tail's one token
    }
  // N = 10 over 2P = 4 chunks: 3, 3, 2, 2.
  CHECK(chunk_range(10, 4, 0).len == 3);
  CHECK(chunk_range(10, 4, 1).begin == 3);
  CHECK(chunk_range(10, 4, 2).begin == 6);
  CHECK(chunk_range(10, 4, 3).len == 2);
}

TEST_CASE("ring shards: zigzag holds chunks r and 2P-1-r, contiguous chunk r", "[cpu][ring_plan]") {
  CHECK(chunks_of_rank(Sharding::zigzag, 4, 0) == std::vector<int>{0, 7});
  CHECK(chunks_of_rank(Sharding::zigzag, 4, 3) == std::vector<int>{3, 4});
  CHECK(chunks_of_rank(Sharding::contiguous, 4, 2) == std::vector<int>{2});
  for (Sharding s : kShardings)
    for (int ranks : {1, 2, 3, 4, 8})
      for (int n : {1, 3, 7, 64, 1001}) {
        INFO(sharding_name(s) << " P=" << ranks << " N=" << n);
        // Every token has exactly one owner, and locate() finds it at the right row.
        std::vector<int> owner(n, -1);
        int total = 0;
        for (int r = 0; r < ranks; ++r) {
          const Shard sh = shard_of_rank(s, n, ranks, r);
          total += sh.len;
          CHECK(sh.len <= max_shard_len(s, n, ranks));
          for (const LocalChunk& lc : sh.chunks) {
            CHECK(owner_of_chunk(s, ranks, lc.chunk) == r);
            for (int t = 0; t < lc.global.len; ++t) {
              const int pos = lc.global.begin + t;
              CHECK(owner[pos] == -1);
              owner[pos] = r;
              const Location loc = locate(s, n, ranks, pos);
              CHECK(loc.rank == r);
              CHECK(loc.row == lc.local + t);
            }
          }
        }
        CHECK(total == n);
        CHECK(std::count(owner.begin(), owner.end(), -1) == 0);
      }
}

TEST_CASE("ring plan: pair kinds per (query chunk, key chunk)", "[cpu][ring_plan]") {
  CHECK(pair_kind(false, 0, 5) == PairKind::full);
  CHECK(pair_kind(true, 0, 5) == PairKind::skip);
  CHECK(pair_kind(true, 5, 0) == PairKind::full);
  CHECK(pair_kind(true, 3, 3) == PairKind::diagonal);
}

TEST_CASE("ring plan: every query sees exactly its keys, each once", "[cpu][ring_plan]") {
  // Uncut (key cap 0), and cut by split_keys to caps that split the launches: every piece at most
  // the cap's keys (keys_seen requires it), together the same pairs.
  for (Sharding s : kShardings)
    for (bool causal : {false, true})
      for (int ranks : {1, 2, 3, 4, 5, 8})
        for (int n : {1, 2, 7, 8, 33, 100, 257})
          for (int cap : {0, 1, 3, 8, 40}) {
          INFO(sharding_name(s) << " causal=" << causal << " P=" << ranks << " N=" << n << " key cap=" << cap);
          const auto seen = keys_seen(s, causal, n, ranks, cap);
          bool ok = true;
          for (int i = 0; i < n && ok; ++i) {
            std::vector<int> got = seen[i];
            std::sort(got.begin(), got.end());
            const int expect = causal ? i + 1 : n;
            ok = static_cast<int>(got.size()) == expect;
            for (int j = 0; j < expect && ok; ++j) ok = got[j] == j;  // each key once, none missing
            if (!ok) INFO("query " << i << " sees " << got.size() << " keys, expected " << expect);
          }
          CHECK(ok);
        }
}

TEST_CASE("ring plan: launches of a step touch disjoint queries", "[cpu][ring_plan]") {
  // The rung writes a step's partial O rows and merges them afterwards: rows must not repeat.
  for (Sharding s : kShardings)
    for (bool causal : {false, true})
      for (int ranks : {1, 2, 3, 4, 8})
        for (int n : {3, 16, 1000}) {
          for (int r = 0; r < ranks; ++r) {
            const RankPlan plan = plan_rank(s, causal, n, ranks, r);
            REQUIRE(static_cast<int>(plan.steps.size()) == ranks);
            for (const StepPlan& sp : plan.steps) {
              std::vector<int> used(plan.q_shard.len, 0);
              for (const Launch& l : sp.launches)
                for (int i = l.q.begin; i < l.q.end(); ++i) used[i]++;
              CHECK(std::count_if(used.begin(), used.end(), [](int u) { return u > 1; }) == 0);
              // At most one launch per query chunk: 2 for zigzag, 1 for contiguous.
              CHECK(sp.launches.size() <= plan.q_shard.chunks.size());
            }
          }
        }
}

TEST_CASE("ring plan: launches of a step read disjoint keys (the backward's one dK, dV partial)",
          "[cpu][ring_plan]") {
  for (Sharding s : kShardings)
    for (bool causal : {false, true})
      for (int ranks : {1, 2, 3, 4, 8})
        for (int n : {3, 13, 16, 1000, 1001})
          for (int r = 0; r < ranks; ++r)
            for (const StepPlan& sp : plan_rank(s, causal, n, ranks, r).steps) CHECK_FALSE(launches_share_keys(sp));
  // The check itself: two launches over keys [0, 4) and [3, 5) share key 3; [0, 3) and [3, 5) none.
  StepPlan sp;
  sp.launches.resize(2);
  sp.launches[0].k = {0, 4};
  sp.launches[1].k = {3, 2};
  CHECK(launches_share_keys(sp));
  sp.launches[0].k = {0, 3};
  CHECK_FALSE(launches_share_keys(sp));
}

TEST_CASE("ring plan: the ring passes every shard around once", "[cpu][ring_plan]") {
  for (Sharding s : kShardings)
    for (int ranks : {1, 2, 3, 4, 8}) {
      const int n = 1003;
      for (int r = 0; r < ranks; ++r) {
        const RankPlan plan = plan_rank(s, true, n, ranks, r);
        std::set<int> sources;
        for (const StepPlan& sp : plan.steps) {
          sources.insert(sp.src_rank);
          CHECK(sp.kv_len == shard_of_rank(s, n, ranks, sp.src_rank).len);
          CHECK(sp.send_to == (r + 1) % ranks);
          CHECK(sp.recv_from == (r + ranks - 1) % ranks);
          if (sp.step + 1 < ranks) {
            // What this rank sends is what its successor receives at the same step, and what
            // it receives is the shard it holds at the next step.
            const RankPlan next = plan_rank(s, true, n, ranks, sp.send_to);
            CHECK(next.steps[sp.step].recv_len == sp.send_len);
            CHECK(sp.recv_len == plan.steps[sp.step + 1].kv_len);
          } else {
            CHECK(sp.send_len == 0);
            CHECK(sp.recv_len == 0);
          }
        }
        CHECK(static_cast<int>(sources.size()) == ranks);
        CHECK(plan.steps[0].src_rank == r);
      }
    }
}

TEST_CASE("ring plan: causal skips and masks per (rank, step)", "[cpu][ring_plan]") {
  const int ranks = 4, n = 800;  // chunks of 100 (zigzag) or 200 (contiguous) tokens
  SECTION("contiguous: rank r computes on steps 0..r, masked only at step 0") {
    for (int r = 0; r < ranks; ++r) {
      const RankPlan plan = plan_rank(Sharding::contiguous, true, n, ranks, r);
      for (const StepPlan& sp : plan.steps) {
        INFO("rank " << r << " step " << sp.step);
        if (sp.step > r) {
          CHECK(sp.launches.empty());  // the source's chunk is wholly in the future
        } else {
          REQUIRE(sp.launches.size() == 1);
          CHECK(sp.launches[0].causal == (sp.step == 0));
          CHECK(sp.launches[0].q.len == 200);
          CHECK(sp.launches[0].k.len == 200);
        }
      }
    }
  }
  SECTION("zigzag: every rank computes ~2 chunks^2 on every step") {
    for (int r = 0; r < ranks; ++r) {
      const RankPlan plan = plan_rank(Sharding::zigzag, true, n, ranks, r);
      // Step 0: the early chunk on its own diagonal and the late chunk on [early (past), late
      // (diagonal)] are one square causal launch over the whole shard (its rows are in the
      // sequence's order).
      const StepPlan& s0 = plan.steps[0];
      REQUIRE(s0.launches.size() == 1);
      CHECK(s0.launches[0].causal);
      CHECK(s0.launches[0].q.begin == 0);
      CHECK(s0.launches[0].q.len == 200);
      CHECK(s0.launches[0].k.begin == 0);
      CHECK(s0.launches[0].k.len == 200);
      for (const StepPlan& sp : plan.steps) {
        if (sp.step == 0) continue;
        INFO("rank " << r << " step " << sp.step << " source " << sp.src_rank);
        REQUIRE(sp.launches.size() == 1);
        const Launch& l = sp.launches[0];
        CHECK_FALSE(l.causal);
        if (sp.src_rank < r) {  // both query chunks see the source's early chunk only
          CHECK(l.q.begin == 0);
          CHECK(l.q.len == 200);
          CHECK(l.k.begin == 0);
          CHECK(l.k.len == 100);
        } else {  // only the late query chunk, against both of the source's chunks
          CHECK(l.q.begin == 100);
          CHECK(l.q.len == 100);
          CHECK(l.k.len == 200);
        }
        CHECK(sp.pairs() == 20000);
      }
      CHECK(s0.pairs() == 200 * 201 / 2);  // = 100 * 101 / 2 + 100 * 100 + 100 * 101 / 2
    }
  }
  SECTION("the imbalance zigzag removes") {
    const auto contiguous = pairs_per_rank(Sharding::contiguous, true, n, ranks);
    const auto zigzag = pairs_per_rank(Sharding::zigzag, true, n, ranks);
    CHECK(contiguous.front() == 200 * 201 / 2);
    CHECK(contiguous.back() == 3 * 200 * 200 + 200 * 201 / 2);
    CHECK(imbalance(contiguous) > 1.7);  // (2P - 1) / P = 1.75 in the limit
    CHECK(imbalance(zigzag) < 1.001);
    int64_t a = 0, b = 0;
    for (auto x : contiguous) a += x;
    for (auto x : zigzag) b += x;
    CHECK(a == b);
    CHECK(a == static_cast<int64_t>(n) * (n + 1) / 2);
  }
  SECTION("without a mask, one full launch per step") {
    for (Sharding s : kShardings)
      for (const StepPlan& sp : plan_rank(s, false, n, ranks, 1).steps) {
        REQUIRE(sp.launches.size() == 1);
        CHECK_FALSE(sp.launches[0].causal);
        CHECK(sp.launches[0].q.len == 200);
        CHECK(sp.launches[0].k.len == 200);
      }
  }
}

TEST_CASE("ring plan: tails and sequences shorter than the ring", "[cpu][ring_plan]") {
  // N = 3 over 2P = 8 chunks: five empty chunks; ranks with no queries plan no launches.
  const RankPlan r3 = plan_rank(Sharding::zigzag, true, 3, 4, 3);
  CHECK(r3.q_shard.len == 0);
  for (const StepPlan& sp : r3.steps) CHECK(sp.launches.empty());
  const RankPlan r0 = plan_rank(Sharding::zigzag, true, 3, 4, 0);
  CHECK(r0.q_shard.len == 1);
  // Unequal chunk lengths: N = 1001 over 8 chunks -> 126 x 1 and 125 x 7.
  const RankPlan t = plan_rank(Sharding::zigzag, true, 1001, 4, 0);
  CHECK(t.q_shard.chunks[0].global.len == 126);
  CHECK(t.q_shard.chunks[1].global.len == 125);
  REQUIRE(t.steps[0].launches.size() == 1);  // the whole shard, one square causal launch
  CHECK(t.steps[0].launches[0].k.len == 251);
  CHECK(t.steps[0].launches[0].q.len == 251);
}

TEST_CASE("ring merge: partial (O, LSE) merged in fp32 equal one softmax", "[cpu][ring_merge]") {
  // Each launch's partial result is computed here in double as the rung would (normalized O of
  // its keys, their LSE), rounded to float, and merged step after step with lse_combine (the
  // merge kernel's rule): the result must equal a softmax over all visible keys in double.
  std::mt19937 rng(7);
  std::normal_distribution<double> nd(0.0, 1.0);
  const int D = 16;
  // Uncut, and cut by split_keys (several launches of a step over the same rows, each merged
  // right after it runs, as ring_schedule.cu does then).
  for (Sharding s : kShardings)
    for (bool causal : {false, true})
      for (int ranks : {1, 2, 3, 4})
        for (int cap : {0, 4, 7}) {
        const int n = 61;
        std::vector<double> q(n * D), k(n * D), v(n * D);
        for (auto* t : {&q, &k, &v})
          for (double& x : *t) x = 2.0 * nd(rng) + 0.5;  // spread scores: the weights matter
        const double scale = 1.0 / std::sqrt(static_cast<double>(D));
        auto score = [&](int i, int j) {
          double d = 0;
          for (int c = 0; c < D; ++c) d += q[i * D + c] * k[j * D + c];
          return d * scale;
        };
        double worst = 0, worst_lse = 0;
        for (int r = 0; r < ranks; ++r) {
          const RankPlan plan = plan_rank(s, causal, n, ranks, r, cap);
          const Shard& qs = plan.q_shard;
          std::vector<int> qg(qs.len);
          for (const LocalChunk& lc : qs.chunks)
            for (int t = 0; t < lc.global.len; ++t) qg[lc.local + t] = lc.global.begin + t;
          // The accumulator before a row's first merge holds NaN (the first merge must not read
          // it); the 16-bit O is NaN until the row's last merge writes it (here in float).
          std::vector<float> o_acc(qs.len * D, NAN), lse_acc(qs.len, NAN), o_out(qs.len * D, NAN);
          for (const StepPlan& sp : plan.steps) {
            const Shard ks = shard_of_rank(s, n, ranks, sp.src_rank);
            std::vector<int> kg(ks.len);
            for (const LocalChunk& lc : ks.chunks)
              for (int t = 0; t < lc.global.len; ++t) kg[lc.local + t] = lc.global.begin + t;
            for (const Launch& l : sp.launches) {
              // The launch's partial result for its rows, as the forward rung returns it.
              std::vector<float> o_part(l.q.len * D), lse_part(l.q.len);
              for (int i = 0; i < l.q.len; ++i) {
                const int gi = qg[l.q.begin + i];
                double m = -INFINITY;
                std::vector<int> keys;
                for (int j = 0; j < l.k.len; ++j)
                  if (!l.causal || j <= i + l.k.len - l.q.len) keys.push_back(kg[l.k.begin + j]);
                for (int gj : keys) m = std::max(m, score(gi, gj));
                double sum = 0;
                std::vector<double> o(D, 0.0);
                for (int gj : keys) {
                  const double p = std::exp(score(gi, gj) - m);
                  sum += p;
                  for (int c = 0; c < D; ++c) o[c] += p * v[gj * D + c];
                }
                lse_part[i] = keys.empty() ? -INFINITY : static_cast<float>(m + std::log(sum));
                for (int c = 0; c < D; ++c)
                  o_part[i * D + c] = keys.empty() ? 0.f : static_cast<float>(o[c] / sum);
              }
              // The merge kernel's rule, piece by piece.
              for (const MergePiece& mp : l.merges)
                for (int row = mp.rows.begin; row < mp.rows.end(); ++row) {
                  const int i = row - l.q.begin;
                  float w_acc, w_part;
                  const float lse_new = lse_combine(mp.first ? -INFINITY : lse_acc[row],
                                                    lse_part[i], &w_acc, &w_part);
                  for (int c = 0; c < D; ++c) {
                    const float old = mp.first ? 0.f : o_acc[row * D + c];
                    (mp.last ? o_out : o_acc)[row * D + c] =
                        w_acc * old + (w_part == 0.f ? 0.f : w_part * o_part[i * D + c]);
                  }
                  lse_acc[row] = lse_new;
                }
            }
          }
          // Against one softmax in double over the whole visible sequence.
          for (int row = 0; row < qs.len; ++row) {
            const int gi = qg[row];
            const int nk = causal ? gi + 1 : n;
            double m = -INFINITY;
            for (int j = 0; j < nk; ++j) m = std::max(m, score(gi, j));
            double sum = 0;
            std::vector<double> o(D, 0.0);
            for (int j = 0; j < nk; ++j) {
              const double p = std::exp(score(gi, j) - m);
              sum += p;
              for (int c = 0; c < D; ++c) o[c] += p * v[j * D + c];
            }
            for (int c = 0; c < D; ++c)
              worst = std::max(worst, std::abs(o_out[row * D + c] - o[c] / sum));
            worst_lse = std::max(worst_lse, std::abs(lse_acc[row] - (m + std::log(sum))));
          }
        }
        INFO(sharding_name(s) << " causal=" << causal << " P=" << ranks << " key cap=" << cap);
        CHECK(worst < 2e-5);  // NaN (a row never written, or a first merge that read) fails
        CHECK(worst_lse < 2e-5);
      }
}

TEST_CASE("ring merge: every row's merges start once and end once, in step order",
          "[cpu][ring_merge]") {
  // Per local row, over the steps: the pieces that cover it are exactly the launches that
  // cover it (one each), the first of them alone is `first`, the last alone is `last`.
  for (Sharding s : kShardings)
    for (bool causal : {false, true})
      for (int ranks = 1; ranks <= 8; ++ranks)
        for (int n : {1, 5, 13, 61, 1001})
          for (int cap : {0, 16}) {
          for (int r = 0; r < ranks; ++r) {
            const RankPlan plan = plan_rank(s, causal, n, ranks, r, cap);
            const int rows = plan.q_shard.len;
            std::vector<std::vector<std::pair<int, const MergePiece*>>> seen(rows);
            bool pieces_tile_launches = true;
            for (const StepPlan& sp : plan.steps)
              for (const Launch& l : sp.launches) {
                int at = l.q.begin;
                for (const MergePiece& mp : l.merges) {
                  pieces_tile_launches =
                      pieces_tile_launches && mp.rows.begin == at && mp.rows.len > 0;
                  at = mp.rows.end();
                  for (int row = mp.rows.begin; row < mp.rows.end(); ++row)
                    seen[row].push_back({sp.step, &mp});
                }
                pieces_tile_launches = pieces_tile_launches && at == l.q.end();
              }
            INFO(sharding_name(s) << " causal=" << causal << " P=" << ranks << " n=" << n
                                  << " rank=" << r << " key cap=" << cap);
            CHECK(pieces_tile_launches);
            bool ok = true;
            for (int row = 0; row < rows; ++row) {
              const auto& v = seen[row];
              ok = ok && !v.empty() && v.front().second->first && v.back().second->last;
              for (size_t k = 0; k < v.size(); ++k) {
                // Uncut: one piece per step, in step order. Cut: several in a step, in launch order.
                ok = ok && (k == 0 || (cap > 0 ? v[k - 1].first <= v[k].first : v[k - 1].first < v[k].first));
                ok = ok && v[k].second->first == (k == 0);
                ok = ok && v[k].second->last == (k + 1 == v.size());
              }
            }
            CHECK(ok);
          }
        }
}

TEST_CASE("ring plan: the forward's key cap keeps L sqrt(N) at rung 11's 16k level", "[cpu][ring_plan]") {
  CHECK(forward_key_cap(1) == 0);
  CHECK(forward_key_cap(fl::bwd::kExactDeltaKeys) == 0);  // one launch of 16k keys: what rung 11 trusts
  CHECK(forward_key_cap(65536) == 8192);
  CHECK(forward_key_cap(131072) == 5760);  // 16384 / sqrt(8) = 5792.6, down to a multiple of 128
  CHECK(forward_key_cap(262144) == 4096);
  CHECK(forward_key_cap(1 << 20) == 2048);
  CHECK(forward_key_cap(1 << 30) == 128);  // never below one 128-key block
  const double budget = 16384.0 * std::sqrt(16384.0);
  for (int n = 16385; n < (1 << 27); n = n * 3 / 2) {
    const int cap = forward_key_cap(n);
    INFO("n=" << n << " cap=" << cap);
    CHECK(cap % 128 == 0);
    CHECK(cap <= n);
    if (cap > 128) CHECK(cap * std::sqrt(static_cast<double>(n)) <= budget);
  }
}

TEST_CASE("ring plan: split_keys cuts a launch into bottom-right pieces of at most the cap", "[cpu][ring_plan]") {
  // Every (row, key) pair of the launch, visible under its mask, is computed by exactly one piece,
  // under that piece's own bottom-right mask, and no hidden pair by any; every piece is a launch a
  // rung runs (causal: at least as many keys as rows) within the cap. A causal launch is cut into
  // about 2 K / cap pieces, an unmasked one into K / cap.
  for (bool causal : {false, true})
    for (int q_len : {1, 5, 64, 130})
      for (int past : {0, 1, 63, 200})
        for (int cap : {1, 2, 16, 64, 100, 1000}) {
          if (!causal && past == 0) continue;  // unmasked: the keys alone matter
          Launch l;
          l.q = {7, q_len};
          l.k = {3, q_len + past};
          l.causal = causal;
          const std::vector<Launch> pieces = split_keys(l, cap);
          INFO("causal=" << causal << " q=" << q_len << " past=" << past << " cap=" << cap << " pieces="
                         << pieces.size());
          std::vector<int> count(static_cast<size_t>(l.q.len) * l.k.len, 0);
          bool shapes_ok = true;
          for (const Launch& p : pieces) {
            shapes_ok = shapes_ok && p.q.len > 0 && p.k.len > 0 && p.q.begin >= l.q.begin && p.q.end() <= l.q.end() &&
                        p.k.begin >= l.k.begin && p.k.end() <= l.k.end() && (!p.causal || p.k.len >= p.q.len) &&
                        (l.k.len <= cap || p.k.len <= cap);
            for (int i = 0; i < p.q.len; ++i)
              for (int j = 0; j < p.k.len; ++j)
                if (!p.causal || j <= i + p.k.len - p.q.len)
                  count[static_cast<size_t>(p.q.begin - l.q.begin + i) * l.k.len + (p.k.begin - l.k.begin + j)]++;
          }
          CHECK(shapes_ok);
          bool pairs_ok = true;
          for (int i = 0; i < l.q.len; ++i)
            for (int j = 0; j < l.k.len; ++j) {
              const bool visible = !l.causal || j <= i + l.k.len - l.q.len;
              pairs_ok = pairs_ok && count[static_cast<size_t>(i) * l.k.len + j] == (visible ? 1 : 0);
            }
          CHECK(pairs_ok);
          int64_t sum = 0;
          for (const Launch& p : pieces) sum += p.pairs();
          CHECK(sum == l.pairs());
          if (l.k.len <= cap) {
            CHECK(pieces.size() == 1);
          } else {
            const int blocks = (l.k.len + cap - 1) / cap;
            CHECK(static_cast<int>(pieces.size()) <= (causal ? 2 * blocks : blocks));
          }
        }
  // A plan cut for the backward runs several launches of a step over the same rows; uncut, never.
  const RankPlan cut = plan_rank(Sharding::zigzag, true, 1001, 2, 0, 64);
  const RankPlan whole = plan_rank(Sharding::zigzag, true, 1001, 2, 0);
  CHECK(launches_share_rows(cut.steps[0]));
  CHECK_FALSE(launches_share_rows(whole.steps[0]));
  CHECK(cut.pairs() == whole.pairs());
}

TEST_CASE("ring merge: a partial with no key changes nothing", "[cpu][ring_merge]") {
  float wa, wb;
  // The accumulator before any step: LSE -inf, O = 0; merging a real partial takes it whole.
  CHECK(lse_combine(-INFINITY, 1.5f, &wa, &wb) == 1.5f);
  CHECK(wa == 0.f);
  CHECK(wb == 1.f);
  // A partial that saw no key keeps the accumulator.
  CHECK(lse_combine(0.25f, -INFINITY, &wa, &wb) == 0.25f);
  CHECK(wa == 1.f);
  CHECK(wb == 0.f);
  // A row that never sees a key stays LSE = -inf, O = 0 (the contract).
  CHECK(lse_combine(-INFINITY, -INFINITY, &wa, &wb) == -INFINITY);
  CHECK(wa == 0.f);
  CHECK(wb == 0.f);
}

namespace {
RingParse parse(std::vector<const char*> args, RingOptions* o) {
  args.insert(args.begin(), "12_ring_attention");
  return take_ring_flags(static_cast<int>(args.size()), args.data(), o);
}
}  // namespace

TEST_CASE("ring options: rung 12's flags, the rest for the shared parser", "[cpu][ring_options]") {
  RingOptions o;
  RingParse r = parse({"--seqlen", "4096", "--gpus", "1", "--causal", "--timeout=30",
                       "--forward-rung", "6", "--single", "0", "--variant", "contiguous"},
                      &o);
  REQUIRE(r.ok);
  CHECK(o.gpus == 1);
  CHECK(o.timeout_s == 30);
  CHECK(o.forward_rung == 6);
  CHECK_FALSE(o.single);
  CHECK(r.rest == std::vector<std::string>{"12_ring_attention", "--seqlen", "4096", "--causal",
                                           "--variant", "contiguous"});
  o = RingOptions();
  r = parse({"--gpus", "2", "--rank", "1", "--local-rank", "1", "--id-file", "ring.id"}, &o);
  REQUIRE(r.ok);
  CHECK(o.rank == 1);
  CHECK(o.local_rank == 1);
  CHECK(o.id_file == "ring.id");
  // Bad values and a ring that needs the launcher: exit 2 with the flag named.
  o = RingOptions();
  r = parse({"--gpus", "0"}, &o);
  CHECK_FALSE(r.ok);
  CHECK(r.error.find("--gpus") != std::string::npos);
  o = RingOptions();
  r = parse({"--gpus", "2"}, &o);
  CHECK_FALSE(r.ok);
  CHECK(r.error.find("launch_ring.py") != std::string::npos);
  o = RingOptions();
  r = parse({"--gpus", "2", "--preflight"}, &o);  // the launcher's check needs no rank
  CHECK(r.ok);
  o = RingOptions();
  r = parse({"--gpus", "2", "--rank", "2", "--id-file", "f"}, &o);
  CHECK_FALSE(r.ok);
  o = RingOptions();
  r = parse({"--forward-rung", "7"}, &o);
  CHECK_FALSE(r.ok);
  o = RingOptions();
  r = parse({"--timeout"}, &o);
  CHECK_FALSE(r.ok);
  CHECK(r.error == "--timeout: missing value");
  // --backward: a flag without a value, rung 12's own.
  o = RingOptions();
  r = parse({"--backward", "--seqlen", "1001", "--replay", "2"}, &o);
  REQUIRE(r.ok);
  CHECK(o.backward);
  CHECK(r.rest == std::vector<std::string>{"12_ring_attention", "--seqlen", "1001"});
  CHECK(o.key_cap == -1);  // the forward's launches cut by forward_key_cap unless told
  // --key-cap K: the forward's keys per launch, with a backward only (0: uncut, the ablation).
  o = RingOptions();
  r = parse({"--backward", "--key-cap", "64"}, &o);
  REQUIRE(r.ok);
  CHECK(o.key_cap == 64);
  o = RingOptions();
  r = parse({"--backward", "--key-cap=0"}, &o);
  REQUIRE(r.ok);
  CHECK(o.key_cap == 0);
  o = RingOptions();
  r = parse({"--key-cap", "64"}, &o);
  CHECK_FALSE(r.ok);
  CHECK(r.error.find("needs --backward") != std::string::npos);
  o = RingOptions();
  r = parse({"--backward", "--key-cap", "-1"}, &o);
  CHECK_FALSE(r.ok);
  // --replay P: every rank in this one process, so no --gpus P and no --fail-rank with it.
  o = RingOptions();
  r = parse({"--replay", "4", "--seqlen", "1001"}, &o);
  REQUIRE(r.ok);
  CHECK(o.replay == 4);
  CHECK(o.gpus == 1);
  CHECK(r.rest == std::vector<std::string>{"12_ring_attention", "--seqlen", "1001"});
  o = RingOptions();
  r = parse({"--replay", "0"}, &o);
  CHECK_FALSE(r.ok);
  CHECK(r.error.find("--replay") != std::string::npos);
  o = RingOptions();
  r = parse({"--replay", "2", "--gpus", "2", "--rank", "0", "--id-file", "f"}, &o);
  CHECK_FALSE(r.ok);
  CHECK(r.error.find("one GPU") != std::string::npos);
  o = RingOptions();
  r = parse({"--replay", "2", "--fail-rank", "1"}, &o);
  CHECK_FALSE(r.ok);
  // --shared-gpu (launch_ring.py --share-gpu): a flag without a value; not with --replay.
  o = RingOptions();
  r = parse({"--gpus", "2", "--rank", "1", "--local-rank", "0", "--id-file", "f", "--shared-gpu",
             "--seqlen", "64"},
            &o);
  REQUIRE(r.ok);
  CHECK(o.shared_gpu);
  CHECK(o.local_rank == 0);
  CHECK(r.rest == std::vector<std::string>{"12_ring_attention", "--seqlen", "64"});
  o = RingOptions();
  r = parse({"--replay", "2", "--shared-gpu"}, &o);
  CHECK_FALSE(r.ok);
  CHECK(r.error.find("--shared-gpu") != std::string::npos);
  Sharding sh;
  CHECK(parse_sharding("", &sh));
  CHECK(sh == Sharding::zigzag);
  CHECK(parse_sharding("contiguous", &sh));
  CHECK(sh == Sharding::contiguous);
  CHECK_FALSE(parse_sharding("striped", &sh));
}

TEST_CASE("ring params: a launch's pointers, strides, mask and scale", "[cpu][ring_params]") {
  Problem p;
  p.batch = 2;
  p.seqlen_q = p.seqlen_k = 1001;
  p.heads_q = 8;
  p.heads_kv = 2;
  p.head_dim = 128;
  p.causal = true;
  const RankPlan plan = plan_rank(Sharding::zigzag, true, 1001, 2, 1);  // chunks 1 and 2
  const StepPlan& s0 = plan.steps[0];
  // A launch of the second local chunk (125 rows from row 251) against keys from row 126 on:
  // 125 past keys visible to every query, then its diagonal.
  Launch late;
  late.q = {251, 125};
  late.k = {126, 250};
  late.causal = true;
  std::vector<uint16_t> q(1), kv(1), o(1);
  float lse = 0;
  const AttnParams a = launch_params(p, late, plan.q_shard.len, s0.kv_len, q.data(), kv.data(),
                                     o.data(), &lse, nullptr, 0);
  const int64_t qr = 8 * 128, kr = 2 * 128;
  CHECK(a.seqlen_q == late.q.len);
  CHECK(a.seqlen_k == late.k.len);
  CHECK(a.causal == 1);
  CHECK(a.causal_offset == late.k.len - late.q.len);  // the past chunk: visible to every query
  CHECK(a.group == 4);
  CHECK(a.softmax_scale == p.scale());  // the whole problem's scale, not the chunk's default
  CHECK(static_cast<const uint16_t*>(a.q) == q.data() + late.q.begin * qr);
  CHECK(static_cast<uint16_t*>(a.o) == o.data() + late.q.begin * qr);
  CHECK(a.q_batch_stride == plan.q_shard.len * qr);
  CHECK(a.o_row_stride == qr);
  CHECK(static_cast<const uint16_t*>(a.k) == kv.data() + late.k.begin * kr);
  // V follows K in the shard buffer: batch x kv_len rows later.
  CHECK(static_cast<const uint16_t*>(a.v) == kv.data() + 2 * s0.kv_len * kr + late.k.begin * kr);
  CHECK(a.k_batch_stride == s0.kv_len * kr);
  CHECK(a.v_row_stride == kr);
  CHECK(a.lse == &lse);
  // Every base the kernels see stays 16-byte aligned (rows of heads x head_dim 16-bit values).
  CHECK(tensor_layout_reason("q", reinterpret_cast<const void*>(late.q.begin * qr * 2),
                             a.q_batch_stride, a.q_row_stride, a.q_head_stride) == "");
}

TEST_CASE("ring params: shards out of the whole tensor and back", "[cpu][ring_params]") {
  for (Sharding s : kShardings)
    for (int ranks : {1, 2, 3}) {
      const int B = 2, n = 37, H = 3, D = 4;
      std::vector<uint16_t> whole(B * n * H * D);
      for (size_t i = 0; i < whole.size(); ++i) whole[i] = static_cast<uint16_t>(i);
      std::vector<uint16_t> back(whole.size(), 0xffff);
      std::vector<float> lse(B * H * n), lse_back(lse.size(), NAN);
      for (size_t i = 0; i < lse.size(); ++i) lse[i] = static_cast<float>(i);
      for (int r = 0; r < ranks; ++r) {
        const Shard sh = shard_of_rank(s, n, ranks, r);
        const auto part = take_shard(whole, B, n, H, D, sh);
        CHECK(part.size() == static_cast<size_t>(B) * sh.len * H * D);
        // Row t of the shard is global token locate()^-1: check one element per row.
        for (int b = 0; b < B; ++b)
          for (int t = 0; t < n; ++t) {
            const Location loc = locate(s, n, ranks, t);
            if (loc.rank != r) continue;
            CHECK(part[((b * sh.len + loc.row) * H + 1) * D + 2] ==
                  whole[((b * n + t) * H + 1) * D + 2]);
          }
        put_shard(part, B, n, H, D, sh, &back);
        // The LSE layout [batch, heads, rows]: the shard's from the whole, then back.
        std::vector<float> lpart(static_cast<size_t>(B) * H * sh.len);
        for (int b = 0; b < B; ++b)
          for (int h = 0; h < H; ++h)
            for (const LocalChunk& lc : sh.chunks)
              for (int t = 0; t < lc.global.len; ++t)
                lpart[(b * H + h) * sh.len + lc.local + t] =
                    lse[(b * H + h) * n + lc.global.begin + t];
        put_shard_lse(lpart, B, n, H, sh, &lse_back);
      }
      CHECK(back == whole);
      CHECK(lse_back == lse);
    }
}
