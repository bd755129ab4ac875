// Rung 16's block lists (steps/16_masks/mods.h), built on the CPU by the code the classifying
// kernel runs (classify_spans over each row's span): on every tile of many masks and tilings,
// the list holds exactly the blocks the element mask (masks.h's mask_mod) leaves a key in, in
// key order, and marks partial exactly those where some row of the sequence misses a key of the
// block (or the block holds keys past the sequence); rows past the sequence count for neither.
// Also: the mask functors against row_span, the workspace layout's offsets, and where the
// backward takes D from (bwd_delta.h).
#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "catch_compat.h"
#include "14_hopper_backward/traits.h"
#include "16_masks/bwd_delta.h"
#include "16_masks/bwd_grid.h"
#include "16_masks/mods.h"
#include "mask_cases.h"

using namespace fl;
using namespace fl::masks16;

namespace {

using Case = fl_test::MaskCase;

std::vector<Case> cases(const std::vector<int>& docs) { return fl_test::mask_cases(docs); }

const std::vector<int> kDocs = {0, 1, 130, 131, 258, 400, 401, 700};

}  // namespace

TEST_CASE("block lists: exactly the non-empty blocks, partial exactly where a row misses a key", "[cpu][block_lists]") {
  for (const Case& c : cases(kDocs))
    for (auto [bm, bn] : {std::pair{128, 128}, std::pair{128, 176}, std::pair{128, 80}, std::pair{64, 64}}) {
      INFO(c.name << " len_q=" << c.len_q << " len_k=" << c.len_k << " tile " << bm << "x" << bn);
      const SpanMask mask{c.m};
      std::vector<int> list((c.len_k + bn - 1) / bn + 1);
      for (int r0 = 0; r0 < c.len_q; r0 += bm) {
        const int count = tile_block_list(mask, c.len_q, c.len_k, r0, bm, bn, list.data());
        std::vector<int> want;
        const int rows_end = std::min(r0 + bm, c.len_q);
        for (int n = 0; n * bn < c.len_k; ++n) {
          int seen = 0;
          bool all = true;
          for (int i = r0; i < rows_end; ++i)
            for (int j = n * bn; j < n * bn + bn; ++j) {
              const bool s = mask_mod(c.m, c.len_q, c.len_k, i, j);
              seen += s;
              all = all && s;
            }
          if (seen > 0) want.push_back(n | (all ? 0 : BlockMaskLayout::kPartial));
        }
        INFO("tile rows " << r0);
        REQUIRE(count == static_cast<int>(want.size()));
        for (int e = 0; e < count; ++e) {
          INFO("entry " << e << ": block " << BlockMaskLayout::block_of(want[e]));
          REQUIRE(list[e] == want[e]);
        }
      }
    }
}

TEST_CASE("block lists: the causal functor is the causal span, with one bound", "[cpu][block_lists]") {
  MaskSpec causal;
  causal.window_right = 0;
  for (auto [lq, lk] : {std::pair{300, 300}, std::pair{77, 500}, std::pair{500, 77}})
    for (int i = 0; i < lq; ++i) {
      const KeySpan a = CausalMask{}.span(lq, lk, i), b = row_span(causal, lq, lk, i);
      INFO("len_q " << lq << " len_k " << lk << " row " << i);
      // The same keys (an empty span may be written differently: hi < lo).
      CHECK(std::max(a.hi - a.lo + 1, 0) == std::max(b.hi - b.lo + 1, 0));
      if (b.hi >= b.lo) CHECK((a.lo == b.lo && a.hi == b.hi));
    }
  static_assert(!CausalMask::kLower && SpanMask::kLower, "the causal mask never needs its lower bound");
}

TEST_CASE("block lists: make_mask_spec folds causal into the right window of 0", "[cpu][block_lists]") {
  const MaskSpec m = make_mask_spec(true, 4096, 7, 0, nullptr, 3);
  CHECK(m.window_left == 4096);
  CHECK(m.window_right == 0);
  CHECK(m.n_docs == 0);  // no starts: no documents
  const MaskSpec n = make_mask_spec(false, -1, 7, 5, kDocs.data(), 7);
  CHECK(n.window_right == 7);
  CHECK(n.prefix == 5);
  CHECK(n.n_docs == 7);
}

TEST_CASE("block lists: the workspace layout", "[cpu][block_lists]") {
  const BlockMaskLayout dense = block_mask_layout(false, 8, 1000, 3000, 128, 176);
  CHECK(dense.sequences == 1);  // a dense batch's sequences share one mask
  CHECK(dense.m_tiles == 8);
  CHECK(dense.n_blocks == 18);
  CHECK(dense.tile_index(5, 3) == 3);
  CHECK(dense.lists_offset() % 16 == 0);
  CHECK(dense.lists_offset() >= BlockMaskLayout::kCountsOffset + 8 * 4);
  CHECK(dense.bytes() == dense.lists_offset() + 8 * 18 * 4);
  const BlockMaskLayout packed = block_mask_layout(true, 3, 300, 500, 128, 128);
  CHECK(packed.sequences == 3);
  CHECK(packed.tile_index(2, 1) == 2 * 3 + 1);
  CHECK(packed.bytes() == packed.lists_offset() + 9 * 4 * 4);
  CHECK(BlockMaskLayout::block_of(7 | BlockMaskLayout::kPartial) == 7);
  CHECK(BlockMaskLayout::partial(7 | BlockMaskLayout::kPartial));
  CHECK(!BlockMaskLayout::partial(7));
}

TEST_CASE("score functor: softcap and ALiBi in log2 units, as the reference's modified score", "[cpu][block_lists]") {
  const float scale = 0.125f, cap = 30.f, log2e = 1.4426950408889634f;
  const ScoreMod<true, true> both{scale / cap, cap * log2e, 0.25f * log2e};
  const ScoreMod<false, false> plain{scale * log2e, 0.f, 0.f};
  for (float s : {-400.f, -3.f, 0.f, 2.5f, 90.f, 1000.f})
    for (float dist : {-5.f, 0.f, 17.f}) {
      const double want = (cap * std::tanh(scale * s / cap) - 0.25 * std::fabs(dist)) * log2e;
      CHECK(std::fabs(both(s, dist) - want) <= 1e-4 * (1 + std::fabs(want)));
      CHECK(std::fabs(plain(s, dist) - scale * s * log2e) <= 1e-5 * (1 + std::fabs(s)));
    }
}

TEST_CASE("block lists: the tile's bounds decide as the row-by-row rule does", "[cpu][block_lists]") {
  // classify_tile_block (the kernel's shortcut: empty outside [min lo, max hi], full inside
  // [max lo, min hi]) against classify_spans on every block of every tile of every case.
  for (const Case& c : cases(kDocs))
    for (int bn : {64, 80, 128, 176})
      for (int r0 = 0; r0 < c.len_q; r0 += 128) {
        const int rows = std::min(128, c.len_q - r0);
        KeySpan spans[128];
        TileBounds b;
        for (int r = 0; r < rows; ++r) b.add(spans[r] = row_span(c.m, c.len_q, c.len_k, r0 + r));
        for (int k0 = 0; k0 < c.len_k; k0 += bn) {
          INFO(c.name << " len_q=" << c.len_q << " len_k=" << c.len_k << " rows " << r0 << " keys " << k0 << "+" << bn);
          REQUIRE(classify_tile_block(b, spans, rows, k0, k0 + bn - 1, c.len_k) ==
                  classify_spans(spans, rows, k0, k0 + bn - 1, c.len_k));
        }
      }
}

// ---- the backward's rule, by key (rows_of_keys, rows_seeing_all) --------------------------------

TEST_CASE("backward by key: both ends of a key's rows grow with the key, on every mask", "[cpu][block_lists]") {
  // What lets two spans bound a whole K/V block (mods.h): col(j).lo and col(j).hi never decrease.
  for (const Case& c : cases(kDocs)) {
    const SpanMask m{c.m};
    for (int j = 1; j < c.len_k; ++j) {
      INFO(c.name << " len_q=" << c.len_q << " len_k=" << c.len_k << " key " << j);
      REQUIRE(m.col(c.len_q, c.len_k, j).lo >= m.col(c.len_q, c.len_k, j - 1).lo);
      REQUIRE(m.col(c.len_q, c.len_k, j).hi >= m.col(c.len_q, c.len_k, j - 1).hi);
    }
  }
}

TEST_CASE("backward grid: walk_rows bounds the query rows that see each K/V block, on every mask", "[cpu][block_lists]") {
  // The persistent grid's choice (bwd_grid.h) rests on it: no K/V block of 32 or 128 keys is seen
  // by more rows than walk_rows says; a window on both sides bounds it below seqlen_q.
  for (const Case& c : cases(kDocs)) {
    const SpanMask m{c.m};
    for (int block_n : {32, 128}) {
      const int bound = walk_rows(c.m, c.len_q, block_n);
      for (int k0 = 0; k0 < c.len_k; k0 += block_n) {
        const int k1 = std::min(k0 + block_n, c.len_k) - 1;
        // col(j) is monotonic in j (the test above): the block's rows run from col(k0).lo to col(k1).hi.
        const int lo = std::max(m.col(c.len_q, c.len_k, k0).lo, 0);
        const int hi = std::min(m.col(c.len_q, c.len_k, k1).hi, c.len_q - 1);
        INFO(c.name << " len_q=" << c.len_q << " len_k=" << c.len_k << " block_n=" << block_n << " keys " << k0 << ".."
                    << k1 << " rows " << lo << ".." << hi << " bound " << bound);
        CHECK(hi - lo + 1 <= bound);
      }
      if (c.m.prefix == 0 && c.m.window_left >= 0 && c.m.window_right >= 0)
        CHECK(bound <= c.m.window_left + c.m.window_right + block_n);
      else
        CHECK(bound == c.len_q);
    }
  }
  // The grid: d = 64 and 128 with the tile's own head_dims and rung 14's bounds; the ablation never.
  MaskSpec window;
  window.window_left = 511;
  window.window_right = 0;
  CHECK(bwd_persistent(64, window, 100000, 64, 64, false));    // 511 + 128 rows at any length
  CHECK(bwd_persistent(128, window, 100000, 128, 128, false));  // 639 <= 1024
  CHECK_FALSE(bwd_persistent(128, window, 100000, 128, 128, true));
  CHECK_FALSE(bwd_persistent(128, window, 1000, 96, 96, false));  // d = 96 on the d = 128 tiles
  CHECK_FALSE(bwd_persistent(256, window, 1000, 256, 256, false));
  MaskSpec causal;
  causal.window_right = 0;
  CHECK(bwd_persistent(64, causal, 4096, 64, 64, false));
  CHECK_FALSE(bwd_persistent(64, causal, 4097, 64, 64, false));
  CHECK_FALSE(bwd_persistent(128, causal, 2048, 128, 128, false));
}

TEST_CASE("backward by key: the visited query blocks hold every seen element, and full tiles have no masked one",
          "[cpu][block_lists]") {
  // For each K/V block (rung 14's 128 or 64 keys) and each query tile (64 or 128 rows), as the
  // kernel decides: a tile outside rows_of_keys holds no element the mask leaves; a warpgroup's 64
  // keys against a tile inside rows_seeing_all see every row of it (rows past len_q are padding).
  long long full_tiles = 0, skipped_tiles = 0;
  for (const Case& c : cases(kDocs)) {
    const SpanMask m{c.m};
    for (int bn : {64, 128})
      for (int bm : {64, 128})
        for (int k0 = 0; k0 < c.len_k; k0 += bn) {
          const int k1 = std::min(k0 + bn, c.len_k) - 1;
          const KeySpan rows = rows_of_keys(m, c.len_q, c.len_k, k0, k1);
          for (int q0 = 0; q0 < c.len_q; q0 += bm) {
            const int q1 = q0 + bm - 1;
            const bool visited = !(q1 < rows.lo || q0 > rows.hi);
            INFO(c.name << " len_q=" << c.len_q << " len_k=" << c.len_k << " keys " << k0 << ".." << k1 << " rows "
                        << q0 << ".." << q1);
            if (!visited) {
              ++skipped_tiles;
              for (int i = q0; i <= std::min(q1, c.len_q - 1); ++i)
                for (int j = k0; j <= k1; ++j) REQUIRE_FALSE(mask_mod(c.m, c.len_q, c.len_k, i, j));
            }
            for (int w0 = k0; w0 < k0 + bn; w0 += 64) {  // a warpgroup's keys
              const KeySpan all = rows_seeing_all(m, c.len_q, c.len_k, w0, w0 + 63);
              if (!(all.lo <= q0 && all.hi >= q1)) continue;
              ++full_tiles;
              for (int i = q0; i <= std::min(q1, c.len_q - 1); ++i)
                for (int j = w0; j <= w0 + 63; ++j) REQUIRE(mask_mod(c.m, c.len_q, c.len_k, i, j));
            }
          }
        }
  }
  CHECK(full_tiles > 0);     // the rule finds full tiles ...
  CHECK(skipped_tiles > 0);  // ... and skips some
}

TEST_CASE(
    "deterministic backward: each block's turn at a query block is its nearest visiting "
    "neighbour's, on "
    "every mask",
    "[cpu][block_lists]") {
  // The kernel's rule (traits.h's dq_prev_token over the walks BlockWork::walk takes from
  // rows_of_keys) against the brute force: the K/V block that adds into query block i just before
  // block j, in order (from block 0 up) and from the last block down, is the nearest block in that
  // order that visits i, and each visiting block's token is seen by exactly one successor.
  long long turns = 0, firsts = 0;
  for (const Case& c : cases(kDocs)) {
    const SpanMask m{c.m};
    for (int bn : {64, 128})
      for (int bm : {64, 128}) {
        const int n_kv = (c.len_k + bn - 1) / bn, n_q = (c.len_q + bm - 1) / bm;
        auto visits = [&](int j) {
          const KeySpan rows =
              rows_of_keys(m, c.len_q, c.len_k, j * bn, std::min(j * bn + bn, c.len_k) - 1);
          return fl::hopper14::query_blocks(rows.lo, rows.hi, bm, n_q);
        };
        auto visits_i = [&](int j, int i) {
          const fl::hopper14::QueryBlocks v = visits(j);
          return v.first <= i && i < v.end;
        };
        for (bool reverse : {false, true})
          for (int i = 0; i < n_q; ++i) {
            int prev = 0;  // the brute force's token: the last visitor so far in the order, + 1
            for (int s = 0; s < n_kv; ++s) {
              const int j = reverse ? n_kv - 1 - s : s;
              if (!visits_i(j, i)) continue;
              INFO(c.name << " len_q=" << c.len_q << " len_k=" << c.len_k << " bm=" << bm
                          << " bn=" << bn << (reverse ? " from the last down" : " in order")
                          << " query block " << i << " K/V block " << j);
              REQUIRE(fl::hopper14::dq_prev_token(visits, n_kv, j, i, reverse) == prev);
              // Rung 14's own masks take the closed form (causal: from the last block down).
              if (c.name == "none" && !reverse)
                REQUIRE(fl::hopper14::dq_prev_token_causal(j, i, n_kv, bm, bn, 0, false) == prev);
              if (c.name == "causal" && reverse)
                REQUIRE(fl::hopper14::dq_prev_token_causal(j, i, n_kv, bm, bn, c.len_k - c.len_q,
                                                           true) == prev);
              (prev == 0 ? firsts : turns) += 1;
              prev = j + 1;
            }
          }
      }
  }
  CHECK(turns > 0);
  CHECK(firsts > 0);
}

TEST_CASE("deterministic backward, not causal: the rotated walk's turns follow the blocks' arrivals",
          "[cpu][block_lists]") {
  // traits.h's dq_prev_token_rotated (BlockWork's rotated walk: block j of n starts at query block
  // j of m >= n and wraps): at every query block the turns chain all K/V blocks once, from one
  // first block (token 0); along the chain each block arrives at the query block later than the
  // one before it; and the blocks, all resident, each walking its query blocks in its order and
  // adding only on its turn, all finish. dq_prev_token_descending (a packed sequence with more K/V
  // blocks than query blocks) chains them from the last block down.
  using fl::hopper14::dq_prev_token_descending;
  using fl::hopper14::dq_prev_token_rotated;
  long long chains = 0;
  for (int n : {1, 2, 3, 4, 5, 7, 8, 16, 31, 64, 128, 132})
    for (int m : {1, 2, 3, 4, 7, 8, 9, 16, 33, 64, 128, 256, 264}) {
      if (m < n) continue;  // BlockWork::rotated: at most as many K/V blocks as query blocks
      auto step_at = [&](int j, int i) { return ((i - j) % m + m) % m; };
      for (int i = 0; i < m; ++i) {
        INFO("n_blocks=" << n << " n_q=" << m << " query block " << i);
        std::vector<int> next(n + 1, -1);  // next[token]: the block whose turn that token is
        int firsts = 0;
        for (int j = 0; j < n; ++j) {
          const int t = dq_prev_token_rotated(j, i, n);
          REQUIRE(t >= 0);
          REQUIRE(t <= n);
          REQUIRE(t != j + 1);
          REQUIRE(next[t] == -1);  // one successor per token
          next[t] = j;
          if (t == 0) ++firsts;
        }
        REQUIRE(firsts == 1);
        int seen = 0, prev = -1;
        for (int j = next[0]; j >= 0; j = next[j + 1]) {
          if (prev >= 0) REQUIRE(step_at(prev, i) < step_at(j, i));
          prev = j;
          if (++seen > n) break;
        }
        REQUIRE(seen == n);
        ++chains;
      }
      // All resident, in rounds: in each, every block whose add at its next query block is due
      // (its turn's block added there in an earlier round) adds and moves on. No round may pass
      // without an add, and the blocks lose no round to the order: each finishes its m steps in
      // m rounds. Beside it the order from block 0 (every walk from query block 0, block j after
      // block j - 1): block j's first add waits j rounds, m + n - 1 in all.
      auto rounds_of = [&](auto query_block, auto turn) {
        std::vector<int> done(n, 0), last(m, 0);  // steps each block finished; per query block the last token
        int left = n * m, rounds = 0;
        while (left > 0) {
          std::vector<std::pair<int, int>> adds;  // (query block, token), decided on the round's start
          for (int j = 0; j < n; ++j) {
            if (done[j] == m) continue;
            const int i = query_block(j, done[j]);
            if (turn(j, i) == last[i]) adds.emplace_back(i, j + 1);
          }
          INFO("n_blocks=" << n << " n_q=" << m << " steps left " << left);
          REQUIRE(!adds.empty());
          for (const auto& a : adds) {
            last[a.first] = a.second;
            ++done[a.second - 1];
            --left;
          }
          ++rounds;
        }
        return rounds;
      };
      CHECK(rounds_of([&](int j, int s) { return (j + s) % m; },
                      [&](int j, int i) { return dq_prev_token_rotated(j, i, n); }) == m);
      CHECK(rounds_of([](int, int s) { return s; }, [](int j, int) { return j; }) == m + n - 1);
      // The packed sequence's fallback: one chain from the last block down.
      for (int j = 0; j < n; ++j)
        REQUIRE(dq_prev_token_descending(j, n) == (j == n - 1 ? 0 : j + 2));
    }
  CHECK(chains > 0);
  // The launch's rule: not causal and deterministic, a sequence's K/V blocks all resident at once.
  CHECK(fl::hopper14::rotated_walk(true, false, 132, 132));
  CHECK_FALSE(fl::hopper14::rotated_walk(true, false, 133, 132));
  CHECK_FALSE(fl::hopper14::rotated_walk(true, true, 64, 132));
  CHECK_FALSE(fl::hopper14::rotated_walk(false, false, 64, 132));
  CHECK_FALSE(fl::hopper14::rotated_walk(true, false, 1, 132));
}

TEST_CASE("ALiBi's slope in float, as the kernels compute it, against the fp64 definition",
          "[cpu][block_lists]") {
  for (int heads : {1, 2, 3, 8, 12, 16, 20, 32, 40, 64, 128})
    for (int h = 0; h < heads; ++h) {
      const double want = alibi_slope(h, heads) * 1.4426950408889634;
      INFO("head " << h << " of " << heads);
      CHECK(std::fabs(alibi_slope_log2(h, heads) - want) <= 4e-7 * want);
    }
}

TEST_CASE("backward's D: max_row_keys bounds every row's span, tightly under windows and documents",
          "[cpu][block_lists]") {
  struct Shape {
    bool causal;
    int left, right, prefix;
    std::vector<int> docs;
  };
  const std::vector<Shape> shapes = {{false, -1, -1, 0, {}},  {true, -1, -1, 0, {}},   {true, 37, -1, 0, {}},
                                     {false, 20, 9, 0, {}},   {false, -1, 5, 0, {}},   {true, -1, -1, 64, {}},
                                     {true, 300, -1, 0, kDocs}, {false, -1, -1, 0, kDocs}, {false, 3, 0, 10, {}}};
  for (const Shape& sh : shapes) {
    for (const auto& [lq, lk] : std::vector<std::pair<int, int>>{{700, 700}, {1, 700}, {300, 700}}) {
      if (!sh.docs.empty() && lq != lk) continue;  // documents: self-attention
      Problem p;
      p.seqlen_q = lq;
      p.seqlen_k = lk;
      p.causal = sh.causal;
      p.window_left = sh.left;
      p.window_right = sh.right;
      p.prefix = sh.prefix;
      p.doc_starts = sh.docs;
      int64_t widest = 0;
      for (int i = 0; i < lq; ++i) {
        const KeySpan s = p.key_span(0, i);
        widest = std::max<int64_t>(widest, s.hi - s.lo + 1);
      }
      INFO("causal " << sh.causal << " window " << sh.left << "," << sh.right << " prefix " << sh.prefix << " docs "
                     << sh.docs.size() << " len_q " << lq << " len_k " << lk);
      REQUIRE(max_row_keys(p) >= widest);
      const bool bounded = (sh.left >= 0 && (sh.right >= 0 || sh.causal)) || !sh.docs.empty();
      if (bounded && lq == lk && sh.prefix == 0) REQUIRE(max_row_keys(p) == widest);
    }
  }
}

TEST_CASE("backward's D: rung 11's exact pass on the long rows it can take, a refusal on the others",
          "[cpu][block_lists]") {
  const int longest = bwd::kExactDeltaKeys;
  auto problem = [](int lk) {
    Problem p;
    p.seqlen_q = 1;
    p.seqlen_k = lk;
    p.heads_q = 32;
    p.heads_kv = 8;
    p.head_dim = 128;
    return p;
  };
  // Rows up to 16384 keys: the fp32 O, whatever the mask.
  Problem p = problem(longest);
  p.softcap = 30;
  p.sinks.assign(32, 0.f);
  CHECK(long_row_refusal(p).empty());
  CHECK(!exact_pass_applies(p));
  CHECK(delta_policy(exact_pass_applies(p)) == bwd::DeltaPolicy::o32);
  // One query against 100003 keys, no mask or causal: the exact pass, as rung 14.
  p = problem(100003);
  CHECK(exact_pass_applies(p));
  CHECK(long_row_refusal(p).empty());
  CHECK(bwd::delta_source(delta_policy(true), p.seqlen_k, true) == bwd::DeltaSource::exact);
  p.causal = true;
  CHECK(long_row_refusal(p).empty());
  // A window of 4096 or documents of 8k bound the rows: the fp32 O on any length.
  p.window_left = 4096;
  p.softcap = 30;
  CHECK(max_row_keys(p) == 4097);
  CHECK(long_row_refusal(p).empty());
  p = problem(32768);
  p.seqlen_q = 32768;
  for (int d = 0; d <= 4; ++d) p.doc_starts.push_back(d * 8192);
  p.alibi = true;
  CHECK(max_row_keys(p) == 8192);
  CHECK(long_row_refusal(p).empty());
  // Long rows the exact pass cannot take: each modifier, a mask, head_dim 96 or 256, a packed batch.
  auto refused = [&](auto&& change) {
    Problem q = problem(32768);
    q.causal = true;
    change(q);
    return !long_row_refusal(q).empty();
  };
  CHECK(refused([](Problem& q) { q.softcap = 30; }));
  CHECK(refused([](Problem& q) { q.alibi = true; }));
  CHECK(refused([](Problem& q) { q.sinks.assign(32, 0.f); }));
  CHECK(refused([](Problem& q) { q.dropout_p = 0.1f; }));  // the exact pass recomputes the undropped P
  CHECK(refused([](Problem& q) { q.prefix = 100; }));
  CHECK(refused([](Problem& q) { q.window_left = 20000; }));
  CHECK(refused([](Problem& q) { q.head_dim = 96; }));
  CHECK(refused([](Problem& q) { q.head_dim = 256; }));
  CHECK(refused([](Problem& q) { q.head_dim_v = 64; }));  // V's own head_dim: the pass reads V at d
  CHECK(!refused([](Problem& q) { q.head_dim_v = 128; }));  // d said explicitly
  CHECK(refused([](Problem& q) { set_varlen(&q, {1, 1}, {32768, 100}); }));
  CHECK(!refused([](Problem& q) { q.head_dim = 64; }));
}
