// Rung 15's tile scheduler (steps/15_persistent/scheduler.h), walked on the CPU as the kernel
// walks it: every work item visited once by exactly one block, the LPT order under a causal
// mask, L2 sections of whole GQA groups, and a packed batch's missing tiles skipped.
#include <algorithm>
#include <map>
#include <numeric>
#include <tuple>
#include <vector>

#include "catch_compat.h"
#include "15_persistent/scheduler.h"

using namespace fl::hopper15;

namespace {

/// Every block's items, in the order it takes them: what the kernel's loop visits.
template <class EXISTS>
std::vector<std::vector<Tile>> walk(const TileScheduler& s, int blocks, const EXISTS& exists) {
  std::vector<std::vector<Tile>> per_block(blocks);
  for (int b = 0; b < blocks; ++b)
    for (int r = next_round(s, b, 0, blocks, exists); r < s.rounds(blocks); r = next_round(s, b, r + 1, blocks, exists))
      per_block[b].push_back(s.tile(s.item(b, r, blocks)));
  return per_block;
}

TileScheduler make(int m_blocks, int batch, int heads, int section, bool lpt) {
  return {m_blocks, heads, batch * heads, section, lpt};
}

const auto kAll = [](const Tile&) { return true; };

}  // namespace

TEST_CASE("every work item is visited once, by one block", "[cpu][scheduler]") {
  for (bool lpt : {false, true})
    for (int section : {1, 2, 6, 8, 64})
      for (int blocks : {1, 7, 132}) {
        const TileScheduler s = make(5, 3, 4, std::min(section, 12), lpt);
        std::map<std::tuple<int, int, int>, int> seen;
        for (const auto& items : walk(s, blocks, kAll))
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

TEST_CASE("LPT: within a section the longest causal tiles come first", "[cpu][scheduler]") {
  const TileScheduler s = make(8, 2, 4, 4, true);
  const int per_section = 4 * 8;
  for (int t = 1; t < s.total(); ++t) {
    if (t % per_section == 0) continue;  // a new section starts over from the longest
    REQUIRE(s.tile(t).m_block <= s.tile(t - 1).m_block);
  }
  REQUIRE(s.tile(0).m_block == 7);
  REQUIRE(s.tile(s.total() - 1).m_block == 0);  // the grid ends on the shortest
  // fifo is the same order with the rows reversed
  const TileScheduler f = make(8, 2, 4, 4, false);
  REQUIRE(f.tile(0).m_block == 0);
  REQUIRE(f.tile(f.total() - 1).m_block == 7);
}

TEST_CASE("LPT dealt in a snake balances causal blocks better than fifo", "[cpu][scheduler]") {
  // A tile of query block m visits about m + 1 key blocks. Longest first and dealt in a snake,
  // the busiest block of the grid ends within a few tiles' work of the least busy; dealt
  // round-robin in row order, block 0 always takes the shortest of each round.
  const int M = 32, blocks = 132;
  auto spread = [&](bool lpt) {
    const TileScheduler s = make(M, 4, 16, 64, lpt);
    std::vector<long long> load;
    for (const auto& items : walk(s, blocks, kAll)) {
      long long sum = 0;
      for (const Tile& t : items) sum += t.m_block + 1;
      load.push_back(sum);
    }
    return *std::max_element(load.begin(), load.end()) - *std::min_element(load.begin(), load.end());
  };
  const long long lpt = spread(true), fifo = spread(false);
  INFO("spread LPT " << lpt << ", fifo " << fifo);
  REQUIRE(lpt <= 4);
  REQUIRE(fifo >= M / 2);
}

TEST_CASE("L2 sections hold whole GQA groups and fit the budget", "[cpu][scheduler]") {
  // 16k keys, d = 128, 16-bit: K and V of one head are 8 MB; 32 MB holds 4 of them.
  const long long head_bytes = 2ll * 16384 * 128 * 2;
  REQUIRE(section_units_for(head_bytes, 1, 64, 32ll << 20) == 4);
  REQUIRE(section_units_for(head_bytes, 4, 64, 32ll << 20) == 16);  // 4 K/V heads, 4 queries each
  REQUIRE(section_units_for(head_bytes * 16, 4, 64, 32ll << 20) == 4);  // never less than a group
  REQUIRE(section_units_for(1024, 2, 10, 32ll << 20) == 10);            // never more than all
  // A section's units are consecutive (sequence, head) pairs, so a group's heads run together.
  const TileScheduler s = make(3, 2, 8, 4, true);
  for (int t = 0; t < s.total(); ++t) {
    const Tile x = s.tile(t);
    const int unit = x.batch * 8 + x.head;
    REQUIRE(unit / 4 == t / (4 * 3));  // section t / (units per section x M)
  }
}

TEST_CASE("a packed batch's missing tiles are skipped, the others visited once", "[cpu][scheduler]") {
  // Query lengths of a packed batch, tiles of 128 rows: M = ceil(1000 / 128) = 8.
  const std::vector<int> len_q = {1000, 1, 0, 300, 128, 129};
  const int heads = 3, block_m = 128;
  const auto exists = [&](const Tile& t) { return t.m_block * block_m < len_q[t.batch]; };
  int expected = 0;
  for (int n : len_q) expected += (n + block_m - 1) / block_m * heads;
  for (bool lpt : {false, true})
    for (int blocks : {1, 5, 132}) {
      const TileScheduler s = make(8, static_cast<int>(len_q.size()), heads, 6, lpt);
      std::map<std::tuple<int, int, int>, int> seen;
      for (const auto& items : walk(s, blocks, exists))
        for (const Tile& t : items) {
          REQUIRE(exists(t));
          ++seen[{t.m_block, t.head, t.batch}];
        }
      REQUIRE(static_cast<int>(seen.size()) == expected);
      for (auto& kv : seen) REQUIRE(kv.second == 1);
    }
}
