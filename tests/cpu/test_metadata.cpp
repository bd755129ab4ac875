// The metadata checks of metadata.h on the host (the kernels run the same functions on the
// device): cu_seqlens clamped to be non-decreasing from 0, each length at most max_seqlen and the
// end at most the tokens, and a cache's length clamped to fit its slots with the new keys; each
// violation recorded with its index, value and bound, the first one being what the package reports.
#include <vector>

#include "catch_compat.h"
#include "flashladder/metadata.h"

using namespace fl;

namespace {

struct Seen {
  int code, index;
  long long value, bound;
};

/// clamp_cu_seqlens of @p cu into the returned vector, every violation in @p seen.
std::vector<int> clamp(const std::vector<int>& cu, long long total, long long max_len, std::vector<Seen>* seen) {
  std::vector<int> out(cu.size(), -7);
  clamp_cu_seqlens(cu.data(), static_cast<int>(cu.size()) - 1, total, max_len, out.data(),
                   [&](int code, int index, long long value, long long bound) {
                     seen->push_back({code, index, value, bound});
                   });
  return out;
}

}  // namespace

TEST_CASE("metadata: good cu_seqlens pass unchanged, with nothing recorded", "[cpu][metadata]") {
  std::vector<Seen> seen;
  const std::vector<int> cu{0, 37, 237, 242, 242};  // an empty last sequence
  CHECK(clamp(cu, 242, 200, &seen) == cu);
  CHECK(seen.empty());
  CHECK(clamp({0, 5}, 100, 5, &seen) == std::vector<int>{0, 5});  // a length equal to max_seqlen
  CHECK(seen.empty());
}

TEST_CASE("metadata: bad cu_seqlens are clamped inside the tokens and each violation named", "[cpu][metadata]") {
  std::vector<Seen> seen;
  SECTION("decreasing") {
    CHECK(clamp({0, 37, 20, 242}, 242, 300, &seen) == std::vector<int>{0, 37, 37, 242});
    REQUIRE(seen.size() == 1);
    CHECK(seen[0].code == kCuSeqlensDecrease);
    CHECK(seen[0].index == 2);
    CHECK(seen[0].value == 20);
    CHECK(seen[0].bound == 37);
  }
  SECTION("past the tokens") {
    CHECK(clamp({0, 37, 237, 300}, 242, 300, &seen) == std::vector<int>{0, 37, 237, 242});
    REQUIRE(seen.size() == 1);
    CHECK(seen[0].code == kCuSeqlensTotal);
    CHECK(seen[0].value == 300);
    CHECK(seen[0].bound == 242);
  }
  SECTION("a negative start, and a first entry past the tokens") {
    CHECK(clamp({-5, 10}, 100, 100, &seen) == std::vector<int>{0, 10});
    REQUIRE(seen.size() == 1);
    CHECK(seen[0].code == kCuSeqlensStart);
    seen.clear();
    CHECK(clamp({500, 600}, 100, 1000, &seen) == std::vector<int>{100, 100});
    REQUIRE(seen.size() == 2);
    CHECK(seen[0].code == kCuSeqlensTotal);
    CHECK(seen[0].index == 0);
  }
  SECTION("longer than max_seqlen: the sequence cut to it (the next one then too long as well)") {
    CHECK(clamp({0, 37, 237, 242}, 242, 100, &seen) == std::vector<int>{0, 37, 137, 237});
    REQUIRE(seen.size() == 2);
    CHECK(seen[0].code == kCuSeqlensMax);
    CHECK(seen[0].index == 1);  // the sequence, not the entry
    CHECK(seen[0].value == 200);
    CHECK(seen[0].bound == 100);
  }
  // Whatever went in: the copy never decreases, never passes the tokens, no length past max.
  const std::vector<std::vector<int>> worst{{3, -9, 1 << 30, 4, -1}, {0, 0, 0}, {7, 7, 6, 100000}};
  for (const auto& cu : worst) {
    std::vector<Seen> any;
    const std::vector<int> out = clamp(cu, 50, 8, &any);
    CHECK(out[0] >= 0);
    for (size_t b = 1; b < out.size(); ++b) {
      CHECK(out[b] >= out[b - 1]);
      CHECK(out[b] - out[b - 1] <= 8);
      CHECK(out[b] <= 50);
    }
  }
}

TEST_CASE("metadata: a cache's length clamped to fit its slots with the new keys", "[cpu][metadata]") {
  std::vector<Seen> seen;
  auto rec = [&](int code, long long value, long long bound) { seen.push_back({code, 0, value, bound}); };
  CHECK(clamp_cache_length(10, 1, 256, rec) == 10);
  CHECK(clamp_cache_length(255, 1, 256, rec) == 255);  // the last slot
  CHECK(seen.empty());
  CHECK(clamp_cache_length(256, 1, 256, rec) == 255);
  REQUIRE(seen.size() == 1);
  CHECK(seen[0].code == kCacheSeqlensCapacity);
  CHECK(seen[0].value == 257);
  CHECK(seen[0].bound == 256);
  CHECK(clamp_cache_length(-3, 0, 256, rec) == 0);
  REQUIRE(seen.size() == 2);
  CHECK(seen[1].code == kCacheSeqlensNegative);
  CHECK(clamp_cache_length(300, 0, 256, rec) == 256);  // no new keys: every slot
}

TEST_CASE("metadata: the append's target, skipped where it would leave the cache", "[cpu][metadata]") {
  const int table[4] = {5, 2, -1, 9};  // pages of 16 slots; the pool holds 8 pages
  // Paged: key i of a sequence of 20 keys goes to slot 20 + i, page table[(20 + i) / 16].
  AppendTarget t = append_target(20, 1, 2, 64, table, 16, 8, 0);
  CHECK(t.row == 2);
  CHECK(t.slot == 5);
  CHECK(append_target(15, 0, 1, 64, table, 16, 8, 0).row == 5);  // the last slot of page 0
  CHECK(append_target(32, 0, 1, 64, table, 16, 8, 0).row == -1);  // table entry -1: skipped
  CHECK(append_target(48, 0, 1, 64, table, 16, 8, 0).row == -1);  // entry 9: past the pool
  CHECK(append_target(63, 0, 2, 64, table, 16, 8, 0).row == -1);  // would not fit: skipped whole
  CHECK(append_target(62, 0, 2, 64, table, 16, 8, 0).row == -1);  // slot 62 is in page 3 (entry 9)
  CHECK(append_target(-1, 0, 1, 64, table, 16, 8, 0).row == -1);  // a negative length
  // Contiguous: row `row` of a cache of 4 rows, slot len + i.
  t = append_target(100, 3, 4, 256, nullptr, 0, 4, 2);
  CHECK(t.row == 2);
  CHECK(t.slot == 103);
  CHECK(append_target(253, 0, 4, 256, nullptr, 0, 4, 2).row == -1);  // 253 + 4 > 256
  CHECK(append_target(252, 3, 4, 256, nullptr, 0, 4, 2).slot == 255);  // the last slot
  CHECK(append_target(10, 0, 1, 256, nullptr, 0, 4, 4).row == -1);  // cache_batch_idx past the rows
  CHECK(append_target(10, 0, 1, 256, nullptr, 0, 4, -1).row == -1);
}
