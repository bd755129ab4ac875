// The tolerance policy: a faithful 16-bit result passes; planted errors, NaN,
// unwritten elements and wrong LSE fail.
#include <cmath>
#include <limits>

#include "catch_compat.h"
#include "flashladder/check.h"

using namespace fl;

namespace {

struct Fixture {
  Problem p;
  HostInputs in;
  std::vector<RowId> rows;
  RowResults ref;
  std::vector<uint16_t> out;  // the reference rounded to 16 bits: what a good kernel writes
  std::vector<float> lse;

  explicit Fixture(DType t, bool causal = true) {
    p.batch = 2;
    p.seqlen_q = 40;
    p.seqlen_k = 30;  // causal offset -10: rows 0..9 see no key
    p.heads_q = 4;
    p.heads_kv = 2;
    p.head_dim = 32;
    p.dtype = t;
    p.causal = causal;
    in = make_inputs(p, InputKind::random, 5);
    rows = all_rows(p);
    ref = reference_fp64(p, in, rows);
    out.resize(rows.size() * p.head_dim);
    lse.resize(rows.size());
    for (size_t n = 0; n < rows.size(); ++n) {
      const RowId& r = rows[n];
      const size_t base = ((static_cast<size_t>(r.b) * p.seqlen_q + r.i) * p.heads_q + r.h) * p.head_dim;
      for (int c = 0; c < p.head_dim; ++c) out[base + c] = to_bits(static_cast<float>(ref.out[n * p.head_dim + c]), t);
      lse[(static_cast<size_t>(r.b) * p.heads_q + r.h) * p.seqlen_q + r.i] = static_cast<float>(ref.lse[n]);
    }
  }
  CheckResult check(CheckMode m = CheckMode::full) const { return check_output(p, in, out, lse, m, 1); }
};

}  // namespace

TEST_CASE("a correctly rounded output passes in both dtypes", "[cpu][check]") {
  for (DType t : {DType::fp16, DType::bf16}) {
    Fixture f(t);
    const CheckResult r = f.check();
    INFO(r.reason);
    REQUIRE(r.pass);
    REQUIRE(r.checked);
    REQUIRE(r.mode == "full");
    REQUIRE(r.err.rel_fro > 0);                       // rounding is visible...
    REQUIRE(r.err.rel_fro < r.tol.rel_fro / 2);       // ...and well inside the floor
    REQUIRE(r.tol.rel_fro >= 2 * r.fp32_err.rel_fro);  // the policy's max(2 x fp32, floor)
  }
}

TEST_CASE("a planted error fails", "[cpu][check]") {
  Fixture f(DType::fp16);
  const size_t idx = ((1 * 40 + 33) * 4 + 3) * 32 + 7;  // b=1, i=33, h=3, c=7
  f.out[idx] = to_bits(from_bits(f.out[idx], DType::fp16) + 0.05f, DType::fp16);
  const CheckResult r = f.check();
  REQUIRE_FALSE(r.pass);
  REQUIRE(r.reason.find("max abs") != std::string::npos);
}

TEST_CASE("NaN in a checked element fails", "[cpu][check]") {
  Fixture f(DType::bf16);
  f.out[100] = 0x7fc0;  // bf16 quiet NaN
  const CheckResult r = f.check();
  REQUIRE_FALSE(r.pass);
  REQUIRE(r.unwritten == 1);
}

TEST_CASE("an unwritten element fails even where rows are not checked", "[cpu][check]") {
  Fixture f(DType::fp16);
  f.out[f.out.size() - 1] = 0xffff;  // the NaN poison pattern, left in place
  const CheckResult none = f.check(CheckMode::none);
  REQUIRE_FALSE(none.checked);
  REQUIRE_FALSE(none.pass);
  REQUIRE(none.reason.find("never written") != std::string::npos);
}

TEST_CASE("LSE must be -inf exactly for rows that see no key", "[cpu][check]") {
  Fixture f(DType::fp16);
  REQUIRE(f.check().pass);
  f.lse[0] = 0.0f;  // b=0, h=0, i=0 sees no key
  const CheckResult r = f.check();
  REQUIRE_FALSE(r.pass);
  REQUIRE(r.err.lse_bad == 1);
}

TEST_CASE("a wrong LSE value fails", "[cpu][check]") {
  Fixture f(DType::fp16);
  f.lse[f.lse.size() - 1] += 0.01f;
  REQUIRE_FALSE(f.check().pass);
}

TEST_CASE("tolerance floors per dtype", "[cpu][check]") {
  REQUIRE(tolerance_floor(DType::fp16).rel_fro < tolerance_floor(DType::bf16).rel_fro);
  ErrorStats big;
  big.rel_fro = 0.1;
  big.max_abs = 0.2;
  big.ref_max_abs = 1;
  const Tolerance t = tolerance_for(DType::fp16, big);  // a bad fp32 baseline widens the bound
  REQUIRE(t.rel_fro == 0.2);
  REQUIRE(t.max_abs == 0.4);
}

TEST_CASE("an all-zero reference is judged by the absolute error alone", "[cpu][check]") {
  // dK with one key per query: exactly zero in fp64, cancellation noise in 16 bits.
  CheckResult r;
  r.tol = tolerance_floor(DType::fp16);
  r.err = compare_values({1e-4, -5e-4, 3e-4}, {0.0, 0.0, 0.0});
  REQUIRE(r.err.ref_max_abs == 0);
  REQUIRE(r.err.rel_fro > 0);  // reported (absolute), not divided by zero
  decide(&r);
  REQUIRE(r.pass);
  r.err = compare_values({1e-4, -5e-2, 3e-4}, {0.0, 0.0, 0.0});  // past the absolute floor
  decide(&r);
  REQUIRE_FALSE(r.pass);
  // A nonzero reference keeps the relative check.
  r.err = compare_values({1.003, 1.003}, {1.0, 1.0});  // max abs 3e-3 passes; relative 3e-3 does not
  decide(&r);
  REQUIRE_FALSE(r.pass);
}
