// The fp64 Eigen backward reference against textbook loops and against finite differences,
// the fp32 run that sets the "2 x fp32" term, and the gradient check's verdicts.
#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

#include "catch_compat.h"
#include "finite_differences.h"
#include "max_diff.h"
#include "problem_shape.h"
#include "flashladder/reference.h"
#include "flashladder/reference_bwd.h"

using namespace fl;

namespace {

using fl_test::shape;

double max_abs(const std::vector<double>& a) {
  double m = 0;
  for (double x : a) m = std::max(m, std::fabs(x));
  return m;
}

/// Every tensor of two results agrees to @p rel of the reference's largest magnitude.
void require_close(const BwdResults& got, const BwdResults& ref, double rel) {
  const std::pair<const std::vector<double>*, const std::vector<double>*> pairs[] = {
      {&got.out, &ref.out}, {&got.lse, &ref.lse}, {&got.delta, &ref.delta},
      {&got.dq, &ref.dq},   {&got.dk, &ref.dk},   {&got.dv, &ref.dv}};
  const char* names[] = {"O", "LSE", "D", "dQ", "dK", "dV"};
  for (int t = 0; t < 6; ++t) {
    INFO(names[t]);
    double scale = 1;
    for (double x : *pairs[t].second)
      if (std::isfinite(x)) scale = std::max(scale, std::fabs(x));
    REQUIRE(fl_test::max_abs_diff(*pairs[t].first, *pairs[t].second) <= rel * scale);
  }
}

std::vector<uint16_t> round_to(const std::vector<double>& t, DType dt) {
  std::vector<uint16_t> out(t.size());
  for (size_t n = 0; n < t.size(); ++n) out[n] = to_bits(static_cast<float>(t[n]), dt);
  return out;
}

/// A CPU model of what a FlashAttention-2 style backward kernel writes (Dao, 2023, Algorithm
/// 2): O from the forward in 16 bits, LSE in fp32, P recomputed in fp32 and rounded to 16 bits
/// for dV = P^T dO, dS in fp32 and rounded to 16 bits for dQ = s dS K and dK = s dS^T Q, fp32
/// accumulation, 16-bit outputs. D = rowsum(dO * O) from the 16-bit O (FlashAttention-2's
/// preprocess), or with @p d_exact from the exact O, which equals rowsum(P * dP) for the P used
/// here (rung 11's exact pass on long rows: steps/11_backward/delta_policy.h).
struct Grads16 {
  std::vector<uint16_t> dq, dk, dv;
};
Grads16 model_16bit_kernel(const Problem& p, const BwdInputs& x, const BwdResults& fwd, bool d_exact = false) {
  const int Sq = p.seqlen_q, Sk = p.seqlen_k, Hq = p.heads_q, Hkv = p.heads_kv, D = p.head_dim;
  const DType t = p.dtype;
  auto r16 = [t](float f) { return from_bits(to_bits(f, t), t); };
  auto at = [D](int b, int s, int h, int S, int H) {
    return ((static_cast<size_t>(b) * S + s) * H + h) * D;
  };
  const float scale = p.scale();
  std::vector<float> dq(x.q.size(), 0.f), dk(x.k.size(), 0.f), dv(x.v.size(), 0.f);
  for (int b = 0; b < p.batch; ++b)
    for (int h = 0; h < Hq; ++h)
      for (int i = 0; i < Sq; ++i) {
        const int hk = h / p.group();
        const size_t qi = at(b, i, h, Sq, Hq);
        const float lse = static_cast<float>(fwd.lse[(static_cast<size_t>(b) * Hq + h) * Sq + i]);
        if (p.visible_keys(i) == 0) continue;
        float Di = 0;
        for (int c = 0; c < D; ++c)
          Di += static_cast<float>(x.dout[qi + c]) *
                (d_exact ? static_cast<float>(fwd.out[qi + c]) : r16(static_cast<float>(fwd.out[qi + c])));
        for (int j = 0; j < p.visible_keys(i); ++j) {
          const size_t kj = at(b, j, hk, Sk, Hkv);
          float s = 0, dp = 0;
          for (int c = 0; c < D; ++c) {
            s += static_cast<float>(x.q[qi + c]) * static_cast<float>(x.k[kj + c]);
            dp += static_cast<float>(x.dout[qi + c]) * static_cast<float>(x.v[kj + c]);
          }
          const float P = std::exp(s * scale - lse);
          const float P16 = r16(P), dS16 = r16(P * (dp - Di));
          for (int c = 0; c < D; ++c) {
            dv[kj + c] += P16 * static_cast<float>(x.dout[qi + c]);
            dq[qi + c] += dS16 * static_cast<float>(x.k[kj + c]);
            dk[kj + c] += dS16 * static_cast<float>(x.q[qi + c]);
          }
        }
      }
  Grads16 g;
  for (float v : dq) g.dq.push_back(to_bits(v * scale, t));
  for (float v : dk) g.dk.push_back(to_bits(v * scale, t));
  for (float v : dv) g.dv.push_back(to_bits(v, t));
  return g;
}

}  // namespace

TEST_CASE("dO is seeded, laid out like O, offset and on its own stream", "[cpu][reference_bwd]") {
  const Problem p = shape(2, 33, 70, 4, 2, 64, false);
  const auto a = make_grad_output(p, 3), b = make_grad_output(p, 3), c = make_grad_output(p, 4);
  REQUIRE(a.size() == static_cast<size_t>(2) * 33 * 4 * 64);
  REQUIRE(a == b);
  REQUIRE(a != c);
  REQUIRE(a != make_inputs(p, InputKind::random, 3).q);
  double mean = 0;
  for (uint16_t v : a) mean += half_bits_to_float(v);
  mean /= static_cast<double>(a.size());
  REQUIRE(std::fabs(mean - 0.25) < 0.05);
}

TEST_CASE("fp64 backward reference equals nested loops; fp32 is close, not equal",
          "[cpu][reference_bwd]") {
  const Problem cases[] = {
      shape(2, 37, 37, 2, 2, 64, false),              // MHA, odd lengths
      shape(1, 33, 70, 8, 2, 64, true, DType::bf16),  // GQA 4:1, causal, seqlen_q < seqlen_k
      shape(1, 70, 33, 4, 1, 128, true),  // MQA, causal, seqlen_q > seqlen_k: empty rows
      shape(2, 1, 129, 4, 1, 128, false, DType::bf16),  // MQA, decode-like, tail of 1 key past 128
      shape(1, 131, 65, 3, 3, 64, true, DType::bf16),   // tails past 64-row chunks, empty rows
      shape(1, 65, 131, 4, 1, 128, true),               // MQA causal, one row past a 64-row chunk
  };
  for (const Problem& p : cases) {
    INFO(p.describe());
    REQUIRE(validate(p).empty());
    const HostInputs in = make_inputs(p, InputKind::random, 7);
    const auto dout = make_grad_output(p, 7);
    const BwdResults ref = reference_bwd_fp64(p, in, dout);
    require_close(naive_loops_bwd(p, in, dout), ref, 1e-12);

    // The backward's O and LSE are the forward reference's (rows in all_rows order: b, h, i).
    const RowResults fwd = reference_fp64(p, in, all_rows(p));
    const int D = p.head_dim;
    const std::vector<RowId> rows = all_rows(p);
    for (size_t n = 0; n < rows.size(); ++n) {
      const RowId& r = rows[n];
      const size_t base = ((static_cast<size_t>(r.b) * p.seqlen_q + r.i) * p.heads_q + r.h) * D;
      for (int c = 0; c < D; ++c)
        REQUIRE(std::fabs(ref.out[base + c] - fwd.out[n * D + c]) < 1e-12);
      if (std::isinf(fwd.lse[n]))
        REQUIRE(ref.lse[n] == fwd.lse[n]);
      else
        REQUIRE(std::fabs(ref.lse[n] - fwd.lse[n]) < 1e-12);
    }

    // fp32 is close to fp64 but not equal: it sets each gradient's "2 x fp32" term.
    const BwdResults f32 = reference_bwd_fp32(p, in, dout);
    for (auto [name, got, want] :
         {std::make_tuple("dQ", &f32.dq, &ref.dq), std::make_tuple("dK", &f32.dk, &ref.dk),
          std::make_tuple("dV", &f32.dv, &ref.dv)}) {
      INFO(name);
      const ErrorStats e = compare_values(*got, *want);
      REQUIRE(e.nonfinite == 0);
      REQUIRE(e.rel_fro > 0);
      REQUIRE(e.rel_fro < 1e-5);
      REQUIRE(e.max_abs > 0);
      REQUIRE(e.max_abs < 1e-4 * std::max(1.0, max_abs(*want)));
    }
  }
}

TEST_CASE("rows that see no key get zero dQ, no NaN, and add nothing to dK, dV",
          "[cpu][reference_bwd]") {
  const Problem p = shape(1, 10, 4, 2, 1, 16, true);  // offset -6: rows 0..5 see no key
  REQUIRE(p.visible_keys(5) == 0);
  const HostInputs in = make_inputs(p, InputKind::random, 1);
  auto dout = make_grad_output(p, 1);
  for (const BwdResults& r : {reference_bwd_fp64(p, in, dout), reference_bwd_fp32(p, in, dout),
                              naive_loops_bwd(p, in, dout)}) {
    for (const auto* t : {&r.out, &r.delta, &r.dq, &r.dk, &r.dv})
      for (double x : *t) REQUIRE(std::isfinite(x));
    for (int h = 0; h < 2; ++h)
      for (int i = 0; i < 10; ++i) {
        const double lse = r.lse[h * 10 + i];
        REQUIRE((i < 6 ? (std::isinf(lse) && lse < 0) : std::isfinite(lse)));
        if (i >= 6) continue;
        REQUIRE(r.delta[h * 10 + i] == 0.0);
        for (int c = 0; c < 16; ++c) {
          REQUIRE(r.dq[(i * 2 + h) * 16 + c] == 0.0);
          REQUIRE(r.out[(i * 2 + h) * 16 + c] == 0.0);
        }
      }
    REQUIRE(max_abs(r.dq) > 0);  // the rows that do see keys have gradients
  }
  // dO of the empty rows does not reach dK or dV.
  const BwdResults before = reference_bwd_fp64(p, in, dout);
  for (size_t n = 0; n < static_cast<size_t>(6) * 2 * 16; ++n) dout[n] = to_bits(100.0f, p.dtype);
  const BwdResults after = reference_bwd_fp64(p, in, dout);
  REQUIRE(after.dk == before.dk);
  REQUIRE(after.dv == before.dv);
  REQUIRE(after.dq == before.dq);
}

TEST_CASE("central finite differences of L = sum(O * dO) match dQ, dK, dV",
          "[cpu][reference_bwd]") {
  // Tiny shapes on raw double inputs (any values, not 16-bit ones), GQA 2:1, head_dim 8.
  const Problem cases[] = {
      shape(1, 5, 7, 2, 1, 8, false), shape(1, 5, 7, 2, 1, 8, true),  // causal, seqlen_q < seqlen_k
      shape(1, 7, 5, 2, 1, 8, true),  // causal, seqlen_q > seqlen_k: rows 0 and 1 see no key
  };
  for (const Problem& p : cases) {
    INFO(p.describe());
    REQUIRE(validate(p).empty());
    const BwdResults eig = fl_test::require_finite_differences(p, 11);
    REQUIRE(max_abs(eig.dk) > 0.01);  // the check compared gradients, not zeros
    if (p.causal && p.seqlen_q > p.seqlen_k)
      for (size_t n = 0; n < static_cast<size_t>(2) * p.heads_q * p.head_dim; ++n)
        REQUIRE(eig.dq[n] == 0.0);
  }
}

namespace {

/// A backward problem with empty rows (causal offset -10), its references, and the fp64
/// gradients rounded to 16 bits: what a faithful kernel writes at best.
struct BwdFixture {
  Problem p;
  HostInputs in;
  std::vector<uint16_t> dout;
  BwdResults ref, f32;
  std::vector<uint16_t> dq, dk, dv;

  explicit BwdFixture(DType t) : p(shape(2, 40, 30, 4, 2, 32, true, t)) {
    in = make_inputs(p, InputKind::random, 5);
    dout = make_grad_output(p, 5);
    ref = reference_bwd_fp64(p, in, dout);
    f32 = reference_bwd_fp32(p, in, dout);
    dq = round_to(ref.dq, t);
    dk = round_to(ref.dk, t);
    dv = round_to(ref.dv, t);
  }
  BwdCheckResult check() const { return compare_gradients(p, ref, f32, dq, dk, dv); }
};

}  // namespace

TEST_CASE("gradients rounded to 16 bits pass in both dtypes", "[cpu][check_bwd]") {
  for (DType t : {DType::fp16, DType::bf16}) {
    const BwdFixture f(t);
    const BwdCheckResult r = f.check();
    INFO(r.reason);
    REQUIRE(r.pass);
    REQUIRE(r.reason.empty());
    for (const CheckResult* c : {&r.dq, &r.dk, &r.dv}) {
      REQUIRE(c->pass);
      REQUIRE(c->checked);
      REQUIRE(c->unwritten == 0);
      REQUIRE(c->err.rel_fro > 0);                   // rounding is visible...
      REQUIRE(c->err.rel_fro < c->tol.rel_fro / 4);  // ...and well inside the floor
      REQUIRE(c->fp32_err.rel_fro > 0);
      REQUIRE(c->tol.rel_fro >= 2 * c->fp32_err.rel_fro);  // max(2 x fp32, floor)
      REQUIRE(c->tol.rel_fro >= gradient_tolerance_floor(t).rel_fro);
    }
    REQUIRE(r.dq.rows == static_cast<size_t>(2) * 40 * 4);
    REQUIRE(r.dk.rows == static_cast<size_t>(2) * 30 * 2);
    // check_gradients computes the same references itself.
    const BwdCheckResult full = check_gradients(f.p, f.in, f.dout, f.dq, f.dk, f.dv);
    REQUIRE(full.pass);
    REQUIRE(full.dk.err.rel_fro == r.dk.err.rel_fro);
  }
}

TEST_CASE("a model of a 16-bit FlashAttention-2 backward passes", "[cpu][check_bwd]") {
  // P and dS rounded to 16 bits before the products, fp32 accumulation: the floors must let a
  // faithful kernel through (see gradient_tolerance_floor for the measured growth with seqlen_k).
  for (DType t : {DType::fp16, DType::bf16})
    for (const Problem& p :
         {shape(1, 100, 300, 4, 2, 64, false, t), shape(1, 130, 260, 2, 1, 128, true, t)}) {
      INFO(p.describe());
      const HostInputs in = make_inputs(p, InputKind::random, 9);
      const auto dout = make_grad_output(p, 9);
      const BwdInputs x = widen_bwd_inputs(p, in, dout);
      const BwdResults ref = reference_bwd_fp64(p, x);
      const Grads16 g = model_16bit_kernel(p, x, ref);
      const BwdCheckResult r =
          compare_gradients(p, ref, reference_bwd_fp32(p, in, dout), g.dq, g.dk, g.dv);
      INFO(r.reason);
      REQUIRE(r.pass);
      REQUIRE(r.dq.err.rel_fro < r.dq.tol.rel_fro / 2);
    }
}

TEST_CASE("one query against 100k keys: D from a rounded O costs dQ its precision, D consistent with P does not",
          "[cpu][check_bwd]") {
  // Every row of dS sums to zero only for the exact D; D from the 16-bit O is off by O's rounding,
  // and dQ_i picks up -s * that * sum_j P_ij K_j, which grows against dQ itself as a row sees more
  // keys (rung 11's README). The shape is the one that failed rung 11's fp64 check (seqlen_q = 1,
  // 100003 keys, head_dim 128), with a smaller GQA group so that the reference stays in seconds.
  for (DType t : {DType::fp16, DType::bf16}) {
    const Problem p = shape(1, 1, 100003, 4, 1, 128, false, t);
    INFO(p.describe());
    const HostInputs in = make_inputs(p, InputKind::random, 11);
    const auto dout = make_grad_output(p, 11);
    const BwdInputs x = widen_bwd_inputs(p, in, dout);
    const BwdResults ref = reference_bwd_fp64(p, x);
    const BwdResults f32 = reference_bwd_fp32(p, in, dout);
    const Grads16 fa2 = model_16bit_kernel(p, x, ref, false);
    const Grads16 rung11 = model_16bit_kernel(p, x, ref, true);
    const BwdCheckResult a = compare_gradients(p, ref, f32, fa2.dq, fa2.dk, fa2.dv);
    const BwdCheckResult b = compare_gradients(p, ref, f32, rung11.dq, rung11.dk, rung11.dv);
    INFO("dQ rel_fro: D from the 16-bit O " << a.dq.err.rel_fro << ", the exact D " << b.dq.err.rel_fro << ", tol "
                                            << b.dq.tol.rel_fro);
    REQUIRE(b.pass);
    REQUIRE(b.dq.err.rel_fro < b.dq.tol.rel_fro / 4);
    REQUIRE(a.dq.err.rel_fro > 4 * b.dq.err.rel_fro);  // the rounded O's D: most of dQ's error
    REQUIRE(a.dk.err.rel_fro < a.dk.tol.rel_fro / 2);  // dK and dV hardly notice D
    REQUIRE(a.dv.err.rel_fro == b.dv.err.rel_fro);     // dV does not read D at all
  }
}

TEST_CASE("a perturbed gradient fails, naming the tensor", "[cpu][check_bwd]") {
  SECTION("one element of dK off by 0.05") {
    BwdFixture f(DType::fp16);
    const size_t idx = ((1 * 30 + 17) * 2 + 1) * 32 + 5;  // b=1, j=17, kv head 1, c=5
    f.dk[idx] = to_bits(from_bits(f.dk[idx], DType::fp16) + 0.05f, DType::fp16);
    const BwdCheckResult r = f.check();
    REQUIRE_FALSE(r.pass);
    REQUIRE(r.dq.pass);
    REQUIRE_FALSE(r.dk.pass);
    REQUIRE(r.dv.pass);
    REQUIRE(r.reason.rfind("dK: max abs error", 0) == 0);
  }
  SECTION("dV scaled by 1.05 (bf16)") {
    BwdFixture f(DType::bf16);
    for (uint16_t& x : f.dv) x = to_bits(from_bits(x, DType::bf16) * 1.05f, DType::bf16);
    const BwdCheckResult r = f.check();
    REQUIRE_FALSE(r.pass);
    REQUIRE(r.reason.rfind("dV: relative Frobenius error", 0) == 0);
  }
  SECTION("dQ without the softmax scale") {
    BwdFixture f(DType::fp16);
    for (uint16_t& x : f.dq) x = to_bits(from_bits(x, DType::fp16) / f.p.scale(), DType::fp16);
    REQUIRE_FALSE(f.check().pass);
  }
  SECTION("a tensor of the wrong size") {
    BwdFixture f(DType::fp16);
    f.dv.pop_back();
    const BwdCheckResult r = f.check();
    REQUIRE_FALSE(r.pass);
    REQUIRE(r.reason.rfind("dV: dV has", 0) == 0);
  }
}

TEST_CASE("NaN and unwritten (poisoned) gradient elements fail", "[cpu][check_bwd]") {
  SECTION("NaN in dQ") {
    BwdFixture f(DType::fp16);
    f.dq[12 * 4 * 32 + 3] = 0x7e00;  // fp16 quiet NaN in a row that sees keys
    const BwdCheckResult r = f.check();
    REQUIRE_FALSE(r.pass);
    REQUIRE(r.dq.unwritten == 1);
    REQUIRE(r.dq.err.nonfinite == 1);
    REQUIRE(r.reason.rfind("dQ: 1 output elements never written", 0) == 0);
  }
  SECTION("the poison left in the last element of dV") {
    BwdFixture f(DType::bf16);
    f.dv.back() = 0xffff;
    const BwdCheckResult r = f.check();
    REQUIRE_FALSE(r.pass);
    REQUIRE(r.dv.unwritten == 1);
    REQUIRE(r.reason.rfind("dV: ", 0) == 0);
    REQUIRE(r.reason.find("never written") != std::string::npos);
  }
  SECTION("the poison left in an empty row of dQ (its reference is 0)") {
    BwdFixture f(DType::fp16);
    f.dq[0] = 0xffff;  // b=0, i=0 sees no key
    const BwdCheckResult r = f.check();
    REQUIRE_FALSE(r.pass);
    REQUIRE(r.dq.unwritten == 1);
  }
}

TEST_CASE("gradient floors are the forward's, with twice the relative one", "[cpu][check_bwd]") {
  for (DType t : {DType::fp16, DType::bf16}) {
    REQUIRE(gradient_tolerance_floor(t).rel_fro == 2 * tolerance_floor(t).rel_fro);
    REQUIRE(gradient_tolerance_floor(t).max_abs == tolerance_floor(t).max_abs);
    // The same rule on the FP8 floors (a gradient from e4m3 operands: rung 14's fp8-dq dQ).
    REQUIRE(gradient_tolerance_floor_fp8(t).rel_fro == 2 * tolerance_floor_fp8(t).rel_fro);
    REQUIRE(gradient_tolerance_floor_fp8(t).rel_fro == 0x1p-4);
    REQUIRE(gradient_tolerance_floor_fp8(t).max_abs == tolerance_floor_fp8(t).max_abs);
  }
  ErrorStats big;
  big.rel_fro = 0.1;
  big.max_abs = 0.2;
  big.ref_max_abs = 3;
  const Tolerance t = tolerance_for(gradient_tolerance_floor(DType::fp16), big);
  REQUIRE(t.rel_fro == 0.2);
  REQUIRE(t.max_abs == 0.4);
  const Tolerance floor = tolerance_for(gradient_tolerance_floor(DType::fp16), ErrorStats{});
  REQUIRE(floor.rel_fro == gradient_tolerance_floor(DType::fp16).rel_fro);
}
