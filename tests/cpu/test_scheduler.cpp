// Rung 15's tile scheduler (steps/15_persistent/scheduler.h), walked on the CPU with the code the
// kernel's producer runs: every work item taken once, by one block, in both ways of handing them
// out (static rounds, and a counter simulated as a list schedule on tile costs); the order (a
// unit's query tiles together, longest first under a causal mask); a packed batch numbering only
// the tiles that exist; and what the counter buys under the mask.
#include <algorithm>
#include <functional>
#include <map>
#include <queue>
#include <tuple>
#include <vector>

#include "catch_compat.h"
#include "15_persistent/scheduler.h"

using namespace fl::hopper15;

namespace {

TileScheduler dense(int m_blocks, int batch, int heads, bool lpt, bool dynamic) {
  return {m_blocks, 128, heads, batch, lpt, dynamic, nullptr, nullptr};
}

/// Every item in the order, as locate() numbers them.
std::vector<Tile> order(const TileScheduler& s) {
  std::vector<Tile> out;
  Cursor c;
  Tile t;
  for (int i = 0; locate(s, i, &c, &t); ++i) out.push_back(t);
  return out;
}

/// A causal query tile's cost: the key blocks it visits (square sequences, 128-row tiles and
/// 128-key blocks: tile m sees m + 1 of them).
long long cost(const Tile& t) { return t.m_block + 1; }

/// The grid of @p blocks walking @p s as the producers do: static rounds, or the counter (each
/// block takes item blockIdx.x, then the next item number when it becomes free: simulated as a
/// list schedule in which the block with the least work so far takes the next item). Returns
/// every block's items and its total cost.
struct Walk {
  std::vector<std::vector<Tile>> items;
  std::vector<long long> load;
};
Walk walk(const TileScheduler& s, int blocks) {
  Walk w{std::vector<std::vector<Tile>>(blocks), std::vector<long long>(blocks, 0)};
  std::vector<Cursor> cursor(blocks);
  Tile t;
  if (!s.dynamic) {
    for (int b = 0; b < blocks; ++b)
      for (int r = 0; locate(s, static_item(b, r, blocks), &cursor[b], &t); ++r) {
        w.items[b].push_back(t);
        w.load[b] += cost(t);
      }
    return w;
  }
  using Free = std::pair<long long, int>;  // (time the block is free, block)
  std::priority_queue<Free, std::vector<Free>, std::greater<Free>> free;
  int next = blocks;  // the counter hands out items after the first grid's
  for (int b = 0; b < blocks; ++b)
    if (locate(s, b, &cursor[b], &t)) {
      w.items[b].push_back(t);
      w.load[b] += cost(t);
      free.push({w.load[b], b});
    }
  while (!free.empty()) {
    const int b = free.top().second;
    free.pop();
    if (!locate(s, next++, &cursor[b], &t)) continue;
    w.items[b].push_back(t);
    w.load[b] += cost(t);
    free.push({w.load[b], b});
  }
  return w;
}

long long spread(const Walk& w) {
  return *std::max_element(w.load.begin(), w.load.end()) - *std::min_element(w.load.begin(), w.load.end());
}

}  // namespace

TEST_CASE("every work item is taken once, by one block", "[cpu][scheduler]") {
  for (bool lpt : {false, true})
    for (bool dynamic : {false, true})
      for (int blocks : {1, 7, 132}) {
        const TileScheduler s = dense(5, 3, 4, lpt, dynamic);
        std::map<std::tuple<int, int, int>, int> seen;
        for (const auto& items : walk(s, blocks).items)
          for (const Tile& t : items) {
            REQUIRE(t.m_block >= 0);
            REQUIRE(t.m_block < 5);
            REQUIRE(t.head >= 0);
            REQUIRE(t.head < 4);
            REQUIRE(t.batch >= 0);
            REQUIRE(t.batch < 3);
            ++seen[{t.m_block, t.head, t.batch}];
          }
        REQUIRE(seen.size() == 5u * 3 * 4);
        for (auto& kv : seen) REQUIRE(kv.second == 1);
      }
}

TEST_CASE("the order: a unit's query tiles together, longest first under the mask", "[cpu][scheduler]") {
  const std::vector<Tile> lpt = order(dense(4, 2, 3, true, true));
  REQUIRE(lpt.size() == 4u * 2 * 3);
  for (size_t i = 0; i < lpt.size(); ++i) {
    const int unit = static_cast<int>(i / 4);  // (sequence, head), head fastest
    REQUIRE(lpt[i].batch == unit / 3);
    REQUIRE(lpt[i].head == unit % 3);
    REQUIRE(lpt[i].m_block == 3 - static_cast<int>(i % 4));  // longest first
  }
  const std::vector<Tile> fifo = order(dense(4, 2, 3, false, true));
  for (size_t i = 0; i < fifo.size(); ++i) REQUIRE(fifo[i].m_block == static_cast<int>(i % 4));
}

TEST_CASE("a packed batch numbers only the tiles that exist", "[cpu][scheduler]") {
  // Query lengths of a packed batch, tiles of 128 rows.
  const std::vector<int> len_q = {1000, 1, 0, 300, 128, 129};
  std::vector<int> cu{0};
  for (int n : len_q) cu.push_back(cu.back() + n);
  const int heads = 3;
  for (bool lpt : {false, true}) {
    TileScheduler s{8, 128, heads, static_cast<int>(len_q.size()), lpt, true, cu.data(), nullptr};
    const std::vector<Tile> all = order(s);
    size_t expected = 0;
    for (int n : len_q) expected += (n + 127) / 128 * heads;
    REQUIRE(all.size() == expected);
    std::map<std::tuple<int, int, int>, int> seen;
    for (const Tile& t : all) {
      REQUIRE(t.m_block * 128 < len_q[t.batch]);
      ++seen[{t.m_block, t.head, t.batch}];
    }
    REQUIRE(seen.size() == expected);
    // Both ways of handing out, on any grid, take each of them once.
    for (bool dynamic : {false, true})
      for (int blocks : {1, 5, 132}) {
        s.dynamic = dynamic;
        size_t taken = 0;
        for (const auto& items : walk(s, blocks).items) taken += items.size();
        REQUIRE(taken == expected);
      }
  }
}

TEST_CASE("under a causal mask the counter balances the grid; static rounds do not", "[cpu][scheduler]") {
  // 64 units of 32 query tiles (the bench's 4k-key causal shape at d = 128), 132 blocks. Taken
  // from the counter longest first, every block ends within one longest tile (32 key blocks)
  // of the others; dealt in rounds, the tiles of a unit land on the blocks in a fixed stripe.
  const Walk counter = walk(dense(32, 4, 16, true, true), 132);
  const Walk rounds = walk(dense(32, 4, 16, true, false), 132);
  INFO("spread: counter " << spread(counter) << ", static rounds " << spread(rounds));
  REQUIRE(spread(counter) <= 32);
  REQUIRE(spread(rounds) > spread(counter));
}
