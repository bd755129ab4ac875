// The fp64 Eigen reference against textbook nested loops, and the row sampler.
#include <cmath>
#include <set>

#include "catch_compat.h"
#include "problem_shape.h"
#include "flashladder/reference.h"

using namespace fl;

namespace {

double max_diff(const RowResults& a, const RowResults& b) {
  double m = 0;
  for (size_t i = 0; i < a.out.size(); ++i) m = std::max(m, std::fabs(a.out[i] - b.out[i]));
  for (size_t i = 0; i < a.lse.size(); ++i) {
    if (std::isinf(a.lse[i]) || std::isinf(b.lse[i])) {
      REQUIRE(a.lse[i] == b.lse[i]);  // both -inf
      continue;
    }
    m = std::max(m, std::fabs(a.lse[i] - b.lse[i]));
  }
  return m;
}

using fl_test::shape;

}  // namespace

TEST_CASE("fp64 reference equals nested loops", "[cpu][reference]") {
  const Problem cases[] = {
      shape(1, 17, 17, 2, 2, 32, false),
      shape(2, 33, 70, 4, 2, 64, true),     // GQA 2:1, seqlen_q < seqlen_k, causal
      shape(1, 70, 33, 4, 1, 64, true),     // MQA, seqlen_q > seqlen_k: early rows see no key
      shape(2, 1, 129, 8, 1, 128, false),   // decode-like
      shape(1, 45, 45, 2, 2, 40, true, DType::bf16),
  };
  for (const Problem& p : cases) {
    INFO(p.describe());
    const HostInputs in = make_inputs(p, InputKind::random, 7);
    const auto rows = all_rows(p);
    const RowResults ref = reference_fp64(p, in, rows);
    const RowResults loops = naive_loops(p, in, rows);
    REQUIRE(max_diff(ref, loops) < 1e-12);
    // fp32 is close to fp64 but not equal: it sets the tolerance's "2 x fp32" term.
    const RowResults f32 = reference_fp32(p, in, rows);
    REQUIRE(max_diff(ref, f32) < 1e-4);
  }
}

TEST_CASE("rows that see no key give O = 0 and LSE = -inf", "[cpu][reference]") {
  const Problem p = shape(1, 10, 4, 1, 1, 16, true);  // offset -6: rows 0..5 see nothing
  REQUIRE(p.visible_keys(5) == 0);
  REQUIRE(p.visible_keys(6) == 1);
  REQUIRE(p.visible_keys(9) == 4);
  const HostInputs in = make_inputs(p, InputKind::random, 1);
  const auto rows = all_rows(p);
  const RowResults ref = reference_fp64(p, in, rows);
  for (int i = 0; i < 6; ++i) {
    REQUIRE(std::isinf(ref.lse[i]));
    REQUIRE(ref.lse[i] < 0);
    for (int c = 0; c < 16; ++c) REQUIRE(ref.out[i * 16 + c] == 0.0);
  }
  REQUIRE(std::isfinite(ref.lse[6]));
}

TEST_CASE("diagnostic inputs have known answers", "[cpu][reference]") {
  Problem p = shape(1, 9, 13, 2, 1, 16, false);
  SECTION("ones: uniform attention, O = 1, LSE = scale*d + log(Sk)") {
    const HostInputs in = make_inputs(p, InputKind::ones, 0);
    const RowResults ref = reference_fp64(p, in, all_rows(p));
    for (double o : ref.out) REQUIRE(std::fabs(o - 1.0) < 1e-12);
    const double lse = p.scale() * 16 + std::log(13.0);
    for (double l : ref.lse) REQUIRE(std::fabs(l - lse) < 1e-6);
  }
  SECTION("ramp: V exact in 16 bits") {
    const HostInputs in = make_inputs(p, InputKind::ramp, 0);
    for (uint16_t v : in.v) {
      const float f = from_bits(v, p.dtype);
      REQUIRE(f == std::round(f * 32) / 32);
    }
  }
}

TEST_CASE("inputs are seeded and offset", "[cpu][reference]") {
  const Problem p = shape(2, 64, 64, 4, 4, 64, false);
  const HostInputs a = make_inputs(p, InputKind::random, 3), b = make_inputs(p, InputKind::random, 3);
  const HostInputs c = make_inputs(p, InputKind::random, 4);
  REQUIRE(a.q == b.q);
  REQUIRE(a.q != c.q);
  double mean_v = 0;
  for (uint16_t v : a.v) mean_v += half_bits_to_float(v);
  mean_v /= static_cast<double>(a.v.size());
  REQUIRE(std::fabs(mean_v - 0.5) < 0.05);  // N(0,1) + 0.5: outputs not centred on zero
}

TEST_CASE("sampled rows cover first, last, tails and a whole head", "[cpu][reference]") {
  const Problem p = shape(3, 1000, 1000, 8, 2, 64, true);
  const auto rows = sample_rows(p, 11);
  std::set<std::tuple<int, int, int>> s;
  for (const auto& r : rows) {
    REQUIRE((r.b >= 0 && r.b < 3 && r.h >= 0 && r.h < 8 && r.i >= 0 && r.i < 1000));
    s.insert({r.b, r.h, r.i});
  }
  REQUIRE(s.size() == rows.size());  // no duplicates
  REQUIRE(s.count({0, 0, 0}));
  REQUIRE(s.count({2, 7, 999}));
  REQUIRE(s.count({2, 7, 960}));  // first row past the last full 64-row tile
  int whole_head = 0;
  for (const auto& r : rows) whole_head += (r.b == 1 && r.h == 6);
  REQUIRE(whole_head >= 1000);
  // auto: full when small, sampled when large.
  REQUIRE(rows_for_check(shape(1, 64, 64, 2, 2, 64, false), CheckMode::auto_, 1).size() == 128);
  REQUIRE(rows_for_check(shape(4, 16384, 16384, 16, 16, 128, false), CheckMode::auto_, 1).size() < 10000);
  REQUIRE(rows_for_check(p, CheckMode::none, 1).empty());
}
