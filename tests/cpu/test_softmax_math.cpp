// Online-softmax update and log-sum-exp combine (common/include/flashladder/softmax_math.h):
// the math every kernel from rung 02 on relies on, checked on the CPU against a
// direct softmax computed in double precision.
#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "catch_compat.h"
#include "flashladder/softmax_math.h"

namespace {

using fl::SoftmaxState;

constexpr int kValueDim = 8;  // width of the V rows in these tests

/// One query row: its scores and one V row per key.
struct Row {
  std::vector<float> s;               // scores (may hold -inf: masked keys)
  std::vector<std::vector<float>> v;  // [keys][kValueDim]
};

/// What a softmax of a row produces.
struct Result {
  double m, l, lse;
  std::vector<double> o;  // kValueDim
};

/// The textbook computation in double: m = max s, l = sum e^(s - m), O = sum e^(s - m) v / l.
Result direct(const Row& r) {
  Result out{-INFINITY, 0.0, -INFINITY, std::vector<double>(kValueDim, 0.0)};
  for (float x : r.s) out.m = std::max(out.m, static_cast<double>(x));
  if (out.m == -INFINITY) return out;  // no visible key: O = 0, LSE = -inf
  for (size_t j = 0; j < r.s.size(); ++j) {
    const double p = std::exp(static_cast<double>(r.s[j]) - out.m);
    out.l += p;
    for (int c = 0; c < kValueDim; ++c) out.o[c] += p * r.v[j][c];
  }
  for (double& x : out.o) x /= out.l;
  out.lse = out.m + std::log(out.l);
  return out;
}

/// Random cut points: blocks [cuts[k], cuts[k+1]) covering [0, n).
std::vector<int> random_blocks(int n, std::mt19937& g) {
  std::uniform_int_distribution<int> len(1, std::max(1, n / 3 + 1));
  std::vector<int> cuts{0};
  while (cuts.back() < n) cuts.push_back(std::min(n, cuts.back() + len(g)));
  return cuts;
}

/// FlashAttention-1 (rung 03): tile max, P~ = e^(s - m~), merge, O kept normalized.
Result online_fa1(const Row& r, const std::vector<int>& cuts) {
  SoftmaxState st = fl::softmax_init();
  std::vector<float> o(kValueDim, 0.f);
  for (size_t k = 0; k + 1 < cuts.size(); ++k) {
    float m_blk = -INFINITY;
    for (int j = cuts[k]; j < cuts[k + 1]; ++j) m_blk = std::max(m_blk, r.s[j]);
    float l_blk = 0.f;
    std::vector<float> pv(kValueDim, 0.f);
    for (int j = cuts[k]; j < cuts[k + 1]; ++j) {
      const float p = fl::exp_diff(r.s[j], m_blk);
      l_blk += p;
      for (int c = 0; c < kValueDim; ++c) pv[c] += p * r.v[j][c];
    }
    float a_old = 0.f, a_blk = 0.f;
    const SoftmaxState nx = fl::softmax_merge(st, m_blk, l_blk, &a_old, &a_blk);
    const float inv = fl::softmax_inv_l(nx);
    for (int c = 0; c < kValueDim; ++c) o[c] = (st.l * a_old * o[c] + a_blk * pv[c]) * inv;
    st = nx;
  }
  Result out{st.m, st.l, fl::softmax_lse(st), std::vector<double>(o.begin(), o.end())};
  return out;
}

/// FlashAttention-2 (rung 04, natural-log form): exponentiate against the new
/// max, rescale the unnormalized O by alpha, divide by l once at the end.
Result online_fa2(const Row& r, const std::vector<int>& cuts) {
  SoftmaxState st = fl::softmax_init();
  std::vector<float> o(kValueDim, 0.f);
  for (size_t k = 0; k + 1 < cuts.size(); ++k) {
    float m_blk = -INFINITY;
    for (int j = cuts[k]; j < cuts[k + 1]; ++j) m_blk = std::max(m_blk, r.s[j]);
    const float alpha = fl::softmax_rescale(&st, m_blk);
    for (float& x : o) x *= alpha;
    for (int j = cuts[k]; j < cuts[k + 1]; ++j) {
      const float p = fl::exp_diff(r.s[j], st.m);
      st.l += p;
      for (int c = 0; c < kValueDim; ++c) o[c] += p * r.v[j][c];
    }
  }
  const float inv = fl::softmax_inv_l(st);
  for (float& x : o) x *= inv;
  Result out{st.m, st.l, fl::softmax_lse(st), std::vector<double>(o.begin(), o.end())};
  return out;
}

/// |a - b| <= tol, with -inf == -inf.
bool close(double a, double b, double tol) {
  if (a == -INFINITY || b == -INFINITY) return a == b;
  return std::fabs(a - b) <= tol;
}

/// Both online forms against the direct softmax: m exact, l, LSE and O to fp32 accuracy.
void require_matches(const Row& r, const std::vector<int>& cuts) {
  const Result ref = direct(r);
  for (const Result& got : {online_fa1(r, cuts), online_fa2(r, cuts)}) {
    REQUIRE(close(got.m, ref.m, 0.0));  // the max is exact, whatever the split
    REQUIRE(std::fabs(got.l - ref.l) <= 1e-5 * std::max(1.0, ref.l));
    REQUIRE(close(got.lse, ref.lse, 1e-5 * std::max(1.0, std::fabs(ref.lse))));
    for (int c = 0; c < kValueDim; ++c) {
      REQUIRE(std::isfinite(got.o[c]));
      REQUIRE(std::fabs(got.o[c] - ref.o[c]) <= 1e-5);
    }
  }
}

Row random_row(int n, float spread, std::mt19937& g) {
  std::normal_distribution<float> nd(0.f, 1.f);
  Row r;
  for (int j = 0; j < n; ++j) {
    r.s.push_back(spread * nd(g));
    std::vector<float> v(kValueDim);
    for (float& x : v) x = nd(g) + 0.5f;
    r.v.push_back(v);
  }
  return r;
}

}  // namespace

TEST_CASE("random block splits of a row reproduce the full softmax", "[cpu][softmax]") {
  std::mt19937 g(20240501);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 1 + static_cast<int>(g() % 300);
    const float spread = (trial % 3 == 0) ? 0.1f : (trial % 3 == 1 ? 3.f : 20.f);
    const Row r = random_row(n, spread, g);
    require_matches(r, random_blocks(n, g));
  }
  SECTION("one block and one key per block are the two extremes") {
    const Row r = random_row(97, 2.f, g);
    require_matches(r, {0, 97});
    std::vector<int> singles;
    for (int j = 0; j <= 97; ++j) singles.push_back(j);
    require_matches(r, singles);
  }
}

TEST_CASE("masked keys: rows partly or entirely -inf", "[cpu][softmax]") {
  std::mt19937 g(7);
  SECTION("a row that sees no key gives l = 0, O = 0, LSE = -inf and no NaN") {
    Row r = random_row(50, 1.f, g);
    std::fill(r.s.begin(), r.s.end(), -INFINITY);
    for (const Result& got :
         {online_fa1(r, random_blocks(50, g)), online_fa2(r, random_blocks(50, g))}) {
      REQUIRE(got.m == -INFINITY);
      REQUIRE(got.l == 0.0);
      REQUIRE(got.lse == -INFINITY);
      for (double x : got.o) REQUIRE(x == 0.0);
    }
    const SoftmaxState empty = fl::softmax_init();
    REQUIRE(fl::softmax_inv_l(empty) == 0.f);
    REQUIRE(fl::exp_diff(-INFINITY, -INFINITY) == 0.f);
  }
  SECTION("fully masked blocks before, between and after visible ones (causal tails)") {
    for (int trial = 0; trial < 50; ++trial) {
      Row r = random_row(120, 2.f, g);
      const std::vector<int> cuts = random_blocks(120, g);
      // Mask every other block entirely, and the first one always.
      for (size_t k = 0; k + 1 < cuts.size(); k += 2)
        for (int j = cuts[k]; j < cuts[k + 1]; ++j) r.s[j] = -INFINITY;
      require_matches(r, cuts);
    }
  }
  SECTION("merging an empty block leaves the state unchanged") {
    float a_old = -1.f, a_blk = -1.f;
    const SoftmaxState s = fl::softmax_merge({1.5f, 3.f}, -INFINITY, 0.f, &a_old, &a_blk);
    REQUIRE(s.m == 1.5f);
    REQUIRE(s.l == 3.f);
    REQUIRE(a_old == 1.f);
    REQUIRE(a_blk == 0.f);
  }
}

TEST_CASE("huge logits (1e4, -1e4) neither overflow nor underflow to NaN", "[cpu][softmax]") {
  std::mt19937 g(99);
  for (int trial = 0; trial < 50; ++trial) {
    Row r = random_row(64, 1.f, g);
    for (size_t j = 0; j < r.s.size(); ++j) {
      const unsigned pick = g() % 4;
      if (pick == 0) r.s[j] = 1e4f;
      if (pick == 1) r.s[j] = -1e4f;
      if (pick == 2) r.s[j] = 1e4f - static_cast<float>(g() % 8);  // close to the max: counts
    }
    r.s[g() % r.s.size()] = 1e4f;  // at least one key at the max
    require_matches(r, random_blocks(64, g));
  }
  SECTION("the max arriving last rescales everything seen before") {
    Row r = random_row(40, 1.f, g);
    for (int j = 0; j < 39; ++j) r.s[j] = -1e4f + static_cast<float>(j);
    r.s[39] = 1e4f;
    require_matches(r, random_blocks(40, g));
    const Result got = online_fa2(r, {0, 10, 20, 39, 40});
    REQUIRE(std::fabs(got.lse - 1e4) <= 1e-2);  // e^(-2e4) terms vanish next to 1
  }
}

TEST_CASE("lse_combine / lse_reduce / lse_weight equal a direct LSE", "[cpu][softmax]") {
  std::mt19937 g(4242);
  for (int trial = 0; trial < 100; ++trial) {
    const int n = 2 + static_cast<int>(g() % 400);
    Row r = random_row(n, (trial % 2) ? 5.f : 0.5f, g);
    if (trial % 5 == 0)  // some splits entirely masked (a split past a short KV)
      for (int j = 0; j < n / 2; ++j) r.s[j] = -INFINITY;
    const Result full = direct(r);
    const std::vector<int> cuts = random_blocks(n, g);
    // Each split's own softmax: what a Flash-Decoding split writes (O normalized + LSE).
    std::vector<float> lse_parts;
    std::vector<std::vector<double>> o_parts;
    for (size_t k = 0; k + 1 < cuts.size(); ++k) {
      Row part;
      part.s.assign(r.s.begin() + cuts[k], r.s.begin() + cuts[k + 1]);
      part.v.assign(r.v.begin() + cuts[k], r.v.begin() + cuts[k + 1]);
      const Result pr = direct(part);
      lse_parts.push_back(static_cast<float>(pr.lse));
      o_parts.push_back(pr.o);
    }
    const double tol = 1e-5 * std::max(1.0, std::fabs(full.lse));

    // lse_reduce: one pass over all splits.
    const float lse_all = fl::lse_reduce(lse_parts.data(), static_cast<int>(lse_parts.size()));
    REQUIRE(close(lse_all, full.lse, tol));

    // lse_weight: weights sum to 1 and reproduce O.
    double w_sum = 0;
    std::vector<double> o(kValueDim, 0.0);
    for (size_t k = 0; k < lse_parts.size(); ++k) {
      const float w = fl::lse_weight(lse_parts[k], lse_all);
      REQUIRE(w >= 0.f);
      w_sum += w;
      for (int c = 0; c < kValueDim; ++c) o[c] += w * o_parts[k][c];
    }
    REQUIRE(std::fabs(w_sum - 1.0) <= 1e-5);
    for (int c = 0; c < kValueDim; ++c) REQUIRE(std::fabs(o[c] - full.o[c]) <= 1e-5);

    // lse_combine: folding the splits pairwise, left to right.
    float lse_acc = -INFINITY;
    std::vector<double> o_acc(kValueDim, 0.0);
    for (size_t k = 0; k < lse_parts.size(); ++k) {
      float w_a = 0.f, w_b = 0.f;
      lse_acc = fl::lse_combine(lse_acc, lse_parts[k], &w_a, &w_b);
      for (int c = 0; c < kValueDim; ++c) o_acc[c] = w_a * o_acc[c] + w_b * o_parts[k][c];
    }
    REQUIRE(close(lse_acc, full.lse, tol));
    for (int c = 0; c < kValueDim; ++c) REQUIRE(std::fabs(o_acc[c] - full.o[c]) <= 1e-5);
  }
  SECTION("all splits empty: -inf and zero weights") {
    const float parts[3] = {-INFINITY, -INFINITY, -INFINITY};
    REQUIRE(fl::lse_reduce(parts, 3) == -INFINITY);
    REQUIRE(fl::lse_weight(-INFINITY, -INFINITY) == 0.f);
    float w_a = -1.f, w_b = -1.f;
    REQUIRE(fl::lse_combine(-INFINITY, -INFINITY, &w_a, &w_b) == -INFINITY);
    REQUIRE(w_a == 0.f);
    REQUIRE(w_b == 0.f);
  }
  SECTION("huge LSEs combine without overflow") {
    float w_a = 0.f, w_b = 0.f;
    const float lse = fl::lse_combine(1e4f, 1e4f, &w_a, &w_b);
    REQUIRE(std::fabs(lse - (1e4 + std::log(2.0))) <= 1e-2);
    REQUIRE(std::fabs(w_a - 0.5f) <= 1e-6);
    const float parts[2] = {1e4f, -1e4f};
    REQUIRE(std::fabs(fl::lse_reduce(parts, 2) - 1e4f) <= 1e-2);
    REQUIRE(fl::lse_weight(-1e4f, 1e4f) == 0.f);
  }
}

TEST_CASE("exp2_poly: 2^x within 1.02e-4 relative on [-126, 8], 0 below and at -inf", "[cpu][softmax]") {
  // Every float step of 2^-10 over the softmax's range (x = s - m <= 0, and up to 8 with rung 13's
  // P shift), against exp2 in double precision.
  double worst = 0.0;
  float worst_at = 0.f;
  for (int i = -126 * 1024; i <= 8 * 1024; ++i) {
    const float x = static_cast<float>(i) / 1024.f;
    const double want = std::exp2(static_cast<double>(x));
    const double rel = std::fabs(static_cast<double>(fl::exp2_poly(x)) - want) / want;
    if (rel > worst) worst = rel, worst_at = x;
  }
  INFO("worst relative error " << worst << " at x = " << worst_at);
  CHECK(worst <= 1.02e-4);
  // Integers are exact up to the cubic's error at f = 0 (its constant term is 1).
  for (int n = -126; n <= 8; ++n) CHECK(fl::exp2_poly(static_cast<float>(n)) == std::ldexp(1.f, n));
  // Below the range, as ex2.approx.ftz: 0, never a tiny positive P that a row with no key would sum.
  CHECK(fl::exp2_poly(-126.5f) == 0.f);
  CHECK(fl::exp2_poly(-1.0e4f) == 0.f);
  CHECK(fl::exp2_poly(-INFINITY) == 0.f);
  // Monotone over a fine grid near 0, where P's largest values are.
  float prev = fl::exp2_poly(-4.f);
  int decreasing = 0;
  for (int i = -4 * 4096 + 1; i <= 0; ++i) {
    const float y = fl::exp2_poly(static_cast<float>(i) / 4096.f);
    decreasing += y < prev;
    prev = y;
  }
  CHECK(decreasing == 0);
}
