// The masks and score modifiers of common/include/flashladder/masks.h, checked on the CPU: each
// mask's row interval (row_span) against its element definition (mask_mod) on every element, the
// block classification against the element mask on every block of several tilings, and the score
// modifiers against their definitions (softcapping's derivative by finite differences, ALiBi's
// slopes against the paper's recipe).
#include <algorithm>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "catch_compat.h"
#include "flashladder/masks.h"
#include "mask_cases.h"

using namespace fl;

namespace {

using Case = fl_test::MaskCase;

std::vector<Case> cases(const std::vector<int>& docs) { return fl_test::mask_cases(docs); }

const std::vector<int> kDocs = {0, 1, 130, 131, 258, 400, 401};  // lengths 1, 129, 1, 127, 142, 1

}  // namespace

TEST_CASE("masks: each row's span is exactly the keys mask_mod lets it see", "[cpu][masks]") {
  for (const Case& c : cases(kDocs)) {
    INFO(c.name << " len_q=" << c.len_q << " len_k=" << c.len_k);
    for (int i = 0; i < c.len_q; ++i) {
      const KeySpan s = row_span(c.m, c.len_q, c.len_k, i);
      int seen = 0;
      for (int j = -2; j < c.len_k + 2; ++j) {
        const bool inside = j >= s.lo && j <= s.hi;
        if (inside != mask_mod(c.m, c.len_q, c.len_k, i, j)) {
          INFO("row " << i << " key " << j << " span [" << s.lo << ", " << s.hi << "]");
          REQUIRE(inside == mask_mod(c.m, c.len_q, c.len_k, i, j));
        }
        seen += inside;
      }
      CHECK(seen == (s.hi >= s.lo ? s.hi - s.lo + 1 : 0));
    }
  }
}

TEST_CASE("masks: each key's column span is exactly the rows mask_mod lets see it", "[cpu][masks]") {
  for (const Case& c : cases(kDocs)) {
    INFO(c.name << " len_q=" << c.len_q << " len_k=" << c.len_k);
    for (int j = -1; j <= c.len_k; ++j) {
      const KeySpan s = col_span(c.m, c.len_q, c.len_k, j);
      int seen = 0;
      for (int i = -1; i <= c.len_q; ++i) {
        const bool inside = i >= s.lo && i <= s.hi;
        if (inside != mask_mod(c.m, c.len_q, c.len_k, i, j)) {
          INFO("key " << j << " row " << i << " column span [" << s.lo << ", " << s.hi << "]");
          REQUIRE(inside == mask_mod(c.m, c.len_q, c.len_k, i, j));
        }
        seen += mask_mod(c.m, c.len_q, c.len_k, i, j);
      }
      CHECK(seen == (s.hi >= s.lo ? s.hi - s.lo + 1 : 0));
    }
  }
}

TEST_CASE("masks: the causal window is FlashAttention's bottom-right causal mask", "[cpu][masks]") {
  MaskSpec causal;
  causal.window_right = 0;
  for (auto [lq, lk] : {std::pair{300, 300}, std::pair{77, 500}, std::pair{500, 77}})
    for (int i = 0; i < lq; ++i) {
      const KeySpan s = row_span(causal, lq, lk, i);
      const int visible = std::min(lk, std::max(0, i + lk - lq + 1));  // Problem::visible_keys's rule
      CHECK(s.lo == 0);
      CHECK(std::max(0, s.hi + 1) == visible);
    }
}

TEST_CASE("masks: block classes agree with the element mask on every block", "[cpu][masks]") {
  for (const Case& c : cases(kDocs))
    for (auto [bm, bn] : {std::pair{128, 128}, std::pair{64, 176}, std::pair{128, 80}, std::pair{16, 16}}) {
      INFO(c.name << " len_q=" << c.len_q << " len_k=" << c.len_k << " tile " << bm << "x" << bn);
      int counts[3] = {0, 0, 0};
      for (int r0 = 0; r0 < c.len_q; r0 += bm)
        for (int k0 = 0; k0 < c.len_k; k0 += bn) {
          int seen = 0, total = 0;
          for (int i = r0; i < r0 + bm; ++i)
            for (int j = k0; j < k0 + bn; ++j) {
              seen += mask_mod(c.m, c.len_q, c.len_k, i, j);
              ++total;
            }
          const BlockClass want = seen == 0 ? BlockClass::empty : seen == total ? BlockClass::full : BlockClass::partial;
          const BlockClass got = classify_block(c.m, c.len_q, c.len_k, r0, bm, k0, bn);
          INFO("block rows " << r0 << " keys " << k0 << ": " << seen << " of " << total << " seen");
          REQUIRE(got == want);
          ++counts[static_cast<int>(got)];
        }
      CHECK(counts[0] + counts[1] + counts[2] > 0);
    }
}

TEST_CASE("masks: a sliding window of w keys leaves each row of tiles w / block_n + 1 blocks, whatever N", "[cpu][masks]") {
  // The claim rung 16's bench checks in time (a window of w over N keys costs about what a causal
  // sequence of 2w does): the non-empty blocks of a row of tiles do not grow with N. Rows
  // r0 .. r0 + 127 see keys r0 - w .. r0 + 127: w / 128 blocks back and their own diagonal block.
  MaskSpec w;
  w.window_left = 4096;
  w.window_right = 0;
  for (int n : {8192, 32768, 131072}) {
    int most = 0;
    for (int r0 = 0; r0 < n; r0 += 128) {
      int blocks = 0;
      for (int k0 = 0; k0 < n; k0 += 128) blocks += classify_block(w, n, n, r0, 128, k0, 128) != BlockClass::empty;
      most = std::max(most, blocks);
    }
    INFO("N=" << n);
    CHECK(most == 4096 / 128 + 1);
  }
}

TEST_CASE("score modifiers: softcapping and its derivative, ALiBi's slopes and bias", "[cpu][masks]") {
  for (double cap : {5.0, 30.0, 50.0})
    for (double s : {-200.0, -31.0, -1.0, 0.0, 0.5, 12.0, 29.0, 400.0}) {
      INFO("cap " << cap << " s " << s);
      CHECK(std::abs(softcap(s, cap)) <= cap);  // bounded (equal only where tanh rounds to 1)
      CHECK(std::abs(softcap(s, cap) - cap * std::tanh(s / cap)) < 1e-12);
      const double h = 1e-5, fd = (softcap(s + h, cap) - softcap(s - h, cap)) / (2 * h);
      CHECK(std::abs(softcap_grad(s, cap) - fd) < 1e-8);
    }
  CHECK(softcap(3.5, 0) == 3.5);
  CHECK(softcap_grad(3.5, 0) == 1.0);
  // The paper's recipe: a power of two n gives 2^(-8/n), 2^(-16/n), ...; other counts take the
  // largest power of two c and then every other slope of 2c heads.
  auto recipe = [](int heads) {
    auto pow2 = [](int n) {
      std::vector<double> v;
      for (int i = 0; i < n; ++i) v.push_back(std::pow(2.0, -8.0 * (i + 1) / n));
      return v;
    };
    int c = 1;
    while (2 * c <= heads) c *= 2;
    std::vector<double> v = pow2(c), extra = pow2(2 * c);
    for (int i = 0; static_cast<int>(v.size()) < heads; i += 2) v.push_back(extra[i]);
    return v;
  };
  for (int heads : {1, 8, 12, 16, 20, 32, 40}) {
    const std::vector<double> want = recipe(heads);
    for (int h = 0; h < heads; ++h) {
      INFO("heads " << heads << " head " << h);
      CHECK(std::abs(alibi_slope(h, heads) - want[h]) < 1e-15);
    }
  }
  CHECK(alibi_bias(0.5, 10, 10, 4, 4) == 0.0);                   // the diagonal
  CHECK(alibi_bias(0.5, 10, 10, 4, 1) == -1.5);                  // three keys back
  CHECK(alibi_bias(0.5, 1, 100, 0, 99) == 0.0);                  // decode: the last key is the diagonal
  CHECK(alibi_bias(0.25, 1, 100, 0, 0) == -0.25 * 99);
}
