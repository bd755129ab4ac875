// V with a head_dim of its own (Problem::head_dim_v, --dim-v): multi-head latent attention's
// prefill and training take head_dim_qk 192 and head_dim_v 128 (DeepSeek-V2), FlashAttention 3 any
// dv <= d, the harness any pair. Q, K, dQ, dK have head_dim columns; V, O, dO, dV have dv. Checked
// here: the fp64 references (forward against a direct computation, backward against central
// differences), the checks (rows of O, sampled groups and rows of the backward), the metrics, the
// kernel parameters, validation and the CLI, and that a rung without Rung::head_dim_v refuses in
// one line.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "catch_compat.h"
#include "finite_differences.h"
#include "problem_shape.h"
#include "run_command.h"
#include "flashladder/backward.h"
#include "flashladder/check.h"
#include "flashladder/check_bwd.h"
#include "flashladder/cli.h"
#include "flashladder/reference.h"
#include "flashladder/reference_bwd.h"
#include "flashladder/registry.h"
#include "flashladder/report.h"

using namespace fl;
using fl_test::shape;

namespace {

Problem with_dv(Problem p, int dv) {
  p.head_dim_v = dv;
  return p;
}

/// Attention written out for one row, straight from the definition and the layout (Q and K rows
/// of head_dim, V rows of dv; dense or packed through q_token/k_token), in double.
RowResults direct(const Problem& p, const HostInputs& in, const std::vector<RowId>& rows) {
  const int d = p.head_dim, dv = p.dv();
  REQUIRE(p.scale() == 1.0f / std::sqrt(static_cast<float>(d)));  // head_dim's, whatever dv is
  RowResults res;
  res.out.assign(rows.size() * dv, 0.0);
  res.lse.assign(rows.size(), -std::numeric_limits<double>::infinity());
  for (size_t n = 0; n < rows.size(); ++n) {
    const RowId& r = rows[n];
    const int hk = r.h / p.group();
    const int lk = p.len_k(r.b), last = p.causal ? r.i + lk - p.len_q(r.b) : lk - 1;
    if (last < 0) continue;
    std::vector<double> s;
    for (int j = 0; j <= std::min(last, lk - 1); ++j) {
      double dot = 0;
      for (int c = 0; c < d; ++c)
        dot += static_cast<double>(from_bits(in.q[(p.q_token(r.b, r.i) * p.heads_q + r.h) * d + c], p.dtype)) *
               from_bits(in.k[(p.k_token(r.b, j) * p.heads_kv + hk) * d + c], p.dtype);
      s.push_back(dot * static_cast<double>(p.scale()));
    }
    double m = s[0], l = 0;
    for (double x : s) m = std::max(m, x);
    for (double x : s) l += std::exp(x - m);
    for (size_t j = 0; j < s.size(); ++j) {
      const int64_t v_row = (p.k_token(r.b, static_cast<int>(j)) * p.heads_kv + hk) * dv;
      for (int c = 0; c < dv; ++c)
        res.out[n * dv + c] += std::exp(s[j] - m) / l * from_bits(in.v[v_row + c], p.dtype);
    }
    res.lse[n] = m + std::log(l);
  }
  return res;
}

double max_diff(const RowResults& a, const RowResults& b) {
  REQUIRE(a.out.size() == b.out.size());
  double m = 0;
  for (size_t i = 0; i < a.out.size(); ++i) m = std::max(m, std::fabs(a.out[i] - b.out[i]));
  for (size_t i = 0; i < a.lse.size(); ++i) {
    if (std::isinf(a.lse[i]) || std::isinf(b.lse[i])) {
      REQUIRE(a.lse[i] == b.lse[i]);
      continue;
    }
    m = std::max(m, std::fabs(a.lse[i] - b.lse[i]));
  }
  return m;
}

std::vector<uint16_t> round_to(const std::vector<double>& t, DType dt) {
  std::vector<uint16_t> out(t.size());
  for (size_t n = 0; n < t.size(); ++n) out[n] = to_bits(static_cast<float>(t[n]), dt);
  return out;
}

/// The problems the forward tests run: dv below and above head_dim, causal or not, GQA and MQA,
/// rows that see no key, and a packed batch with an empty sequence.
std::vector<Problem> forward_cases() {
  std::vector<Problem> c = {
      with_dv(shape(1, 17, 23, 2, 2, 24, false), 16),
      with_dv(shape(2, 33, 40, 4, 2, 16, true), 40),  // GQA 2:1, seqlen_q < seqlen_k
      with_dv(shape(1, 40, 20, 4, 1, 24, true), 16),  // MQA, seqlen_q > seqlen_k: rows see no key
      with_dv(shape(1, 19, 19, 2, 1, 16, false, DType::bf16), 40),
  };
  Problem packed = with_dv(shape(1, 1, 1, 4, 2, 16, true), 40);
  set_varlen(&packed, {5, 0, 17, 9}, {7, 3, 17, 30});
  c.push_back(packed);
  return c;
}

}  // namespace

TEST_CASE("dv: 0 means head_dim; sizes of Q, K against V, O", "[cpu][dim_v]") {
  Problem p = shape(2, 5, 7, 4, 2, 192, false);
  REQUIRE(p.head_dim_v == 0);
  REQUIRE(p.dv() == 192);
  REQUIRE(p.o_elements() == p.q_elements());
  REQUIRE(p.v_elements() == p.kv_elements());
  REQUIRE(p.describe().find("dv=") == std::string::npos);
  p.head_dim_v = 192;  // the same, said explicitly: still no dv= in the description
  REQUIRE(p.describe().find("dv=") == std::string::npos);
  p.head_dim_v = 128;
  REQUIRE(p.dv() == 128);
  REQUIRE(p.q_elements() == 2u * 5 * 4 * 192);
  REQUIRE(p.o_elements() == 2u * 5 * 4 * 128);
  REQUIRE(p.kv_elements() == 2u * 7 * 2 * 192);
  REQUIRE(p.v_elements() == 2u * 7 * 2 * 128);
  REQUIRE(p.describe().find(" d=192 dv=128 ") != std::string::npos);
  REQUIRE(p.scale() == 1.0f / std::sqrt(192.0f));  // the scale is Q and K's head_dim's
  const HostInputs in = make_inputs(p, InputKind::random, 3);
  REQUIRE((in.q.size() == p.q_elements() && in.k.size() == p.kv_elements() && in.v.size() == p.v_elements()));
  REQUIRE(make_grad_output(p, 3).size() == p.o_elements());
  for (InputKind k : {InputKind::ones, InputKind::identity, InputKind::ramp, InputKind::outlier})
    REQUIRE(make_inputs(p, k, 3).v.size() == p.v_elements());
}

TEST_CASE("fp64 reference with dv != d equals a direct computation", "[cpu][dim_v]") {
  for (const Problem& p : forward_cases()) {
    INFO(p.describe());
    REQUIRE(validate(p).empty());
    const HostInputs in = make_inputs(p, InputKind::random, 7);
    const std::vector<RowId> rows = all_rows(p);
    const RowResults want = direct(p, in, rows);
    const RowResults ref = reference_fp64(p, in, rows);
    REQUIRE(ref.out.size() == rows.size() * p.dv());
    REQUIRE(max_diff(ref, want) < 1e-12);
    REQUIRE(max_diff(naive_loops(p, in, rows), want) < 1e-12);
    REQUIRE(max_diff(reference_fp32(p, in, rows), want) < 1e-4);
    // Sampled rows read the same columns.
    const std::vector<RowId> some = sample_rows(p, 5);
    REQUIRE(max_diff(reference_fp64(p, in, some), direct(p, in, some)) < 1e-12);
  }
}

TEST_CASE("the forward check reads O at dv columns", "[cpu][dim_v]") {
  for (const Problem& p : forward_cases()) {
    INFO(p.describe());
    const HostInputs in = make_inputs(p, InputKind::random, 9);
    const std::vector<RowId> rows = all_rows(p);
    const RowResults ref = reference_fp64(p, in, rows);
    // A faithful device O: the reference rounded, at each row's place in [tokens, heads_q, dv].
    std::vector<uint16_t> out(p.o_elements(), to_bits(0.f, p.dtype));
    std::vector<float> lse(p.lse_elements(), 0.f);
    for (size_t n = 0; n < rows.size(); ++n) {
      const RowId& r = rows[n];
      for (int c = 0; c < p.dv(); ++c)
        out[(p.q_token(r.b, r.i) * p.heads_q + r.h) * p.dv() + c] =
            to_bits(static_cast<float>(ref.out[n * p.dv() + c]), p.dtype);
      lse[p.lse_index(r.b, r.h, r.i)] = static_cast<float>(ref.lse[n]);
    }
    const CheckResult good = check_output(p, in, out, lse, CheckMode::full, 1);
    INFO(good.reason);
    REQUIRE(good.pass);
    // An error in the last column of the last row is seen.
    const RowId& last = rows.back();
    std::vector<uint16_t> bad = out;
    uint16_t& x = bad[(p.q_token(last.b, last.i) * p.heads_q + last.h) * p.dv() + p.dv() - 1];
    x = to_bits(from_bits(x, p.dtype) + 1.0f, p.dtype);
    REQUIRE_FALSE(check_output(p, in, bad, lse, CheckMode::full, 1).pass);
  }
}

TEST_CASE("backward reference with dv != d: central finite differences and the loops", "[cpu][dim_v]") {
  // Raw double inputs (require_finite_differences): dV has dv columns, dQ and dK head_dim.
  std::vector<Problem> cases = {
      with_dv(shape(1, 5, 7, 2, 1, 8, false), 16),  with_dv(shape(1, 5, 7, 2, 1, 16, true), 8),
      with_dv(shape(1, 7, 5, 2, 1, 8, true), 16),   // causal, seqlen_q > seqlen_k: rows see no key
      with_dv(shape(2, 4, 6, 4, 2, 16, false), 8),  // GQA 2:1 over two batches
  };
  Problem packed = with_dv(shape(1, 1, 1, 2, 1, 8, true), 16);
  set_varlen(&packed, {3, 0, 4}, {5, 2, 4});
  cases.push_back(packed);
  for (const Problem& p : cases) {
    INFO(p.describe());
    REQUIRE(validate(p).empty());
    const BwdResults eig = fl_test::require_finite_differences(p, 13);
    REQUIRE(eig.dq.size() == p.q_elements());
    REQUIRE(eig.dk.size() == p.kv_elements());
    REQUIRE(eig.dv.size() == p.v_elements());
    REQUIRE(eig.out.size() == p.o_elements());
    double dk = 0, dv = 0;
    for (double x : eig.dk) dk = std::max(dk, std::fabs(x));
    for (double x : eig.dv) dv = std::max(dv, std::fabs(x));
    REQUIRE((dk > 0.01 && dv > 0.01));  // gradients compared, not zeros
  }
  // On 16-bit inputs: the Eigen reference, the loops and the forward reference agree.
  for (const Problem& p :
       {with_dv(shape(2, 33, 40, 4, 2, 16, true), 40), with_dv(shape(1, 40, 20, 4, 1, 24, true), 16)}) {
    INFO(p.describe());
    const HostInputs in = make_inputs(p, InputKind::random, 3);
    const std::vector<uint16_t> dout = make_grad_output(p, 3);
    const BwdResults ref = reference_bwd_fp64(p, in, dout), loops = naive_loops_bwd(p, in, dout);
    for (auto [a, b] : {std::make_pair(&ref.dq, &loops.dq), std::make_pair(&ref.dk, &loops.dk),
                        std::make_pair(&ref.dv, &loops.dv), std::make_pair(&ref.out, &loops.out)}) {
      REQUIRE(a->size() == b->size());
      for (size_t n = 0; n < a->size(); ++n) REQUIRE(std::fabs((*a)[n] - (*b)[n]) < 1e-12);
    }
    const RowResults fwd = reference_fp64(p, in, all_rows(p));
    const std::vector<RowId> rows = all_rows(p);
    for (size_t n = 0; n < rows.size(); ++n)
      for (int c = 0; c < p.dv(); ++c)
        REQUIRE(std::fabs(ref.out[(p.q_token(rows[n].b, rows[n].i) * p.heads_q + rows[n].h) * p.dv() + c] -
                          fwd.out[n * p.dv() + c]) < 1e-12);
  }
}

TEST_CASE("the backward check with dv != d: full, sampled groups, sampled rows", "[cpu][dim_v]") {
  for (const Problem& p :
       {with_dv(shape(4, 48, 40, 4, 4, 32, true), 16), with_dv(shape(4, 48, 40, 4, 4, 16, true), 40)}) {
    INFO(p.describe());
    const HostInputs in = make_inputs(p, InputKind::random, 3);
    const std::vector<uint16_t> dout = make_grad_output(p, 3);
    const BwdResults f32 = reference_bwd_fp32(p, in, dout);
    const std::vector<uint16_t> dq = round_to(f32.dq, p.dtype), dk = round_to(f32.dk, p.dtype),
                                dv = round_to(f32.dv, p.dtype);
    const double budget = 4 * bwd_check_work(p) / 16;  // four of the sixteen groups
    for (CheckMode m : {CheckMode::full, CheckMode::auto_}) {
      const BwdCheck c = check_backward(p, in, dout, dq, dk, dv, m, 5, budget);
      INFO(c.grads.reason);
      REQUIRE(c.summary.pass);
      REQUIRE(c.summary.mode == (m == CheckMode::full ? "full" : "sample"));
      REQUIRE(c.grads.dv.rows == static_cast<size_t>(c.groups) * p.seqlen_k);  // dV rows: dv columns each
    }
    // An error in dV of a compared group fails, naming dV; the plan's last group is compared.
    const BwdGroup g = plan_bwd_check(p, CheckMode::auto_, 5, budget).groups.back();
    std::vector<uint16_t> bad = dv;
    uint16_t& x = bad[((static_cast<size_t>(g.b) * p.seqlen_k + 7) * p.heads_kv + g.hk) * p.dv() + p.dv() - 1];
    x = to_bits(from_bits(x, p.dtype) + 0.5f, p.dtype);
    for (CheckMode m : {CheckMode::full, CheckMode::auto_}) {
      const BwdCheck c = check_backward(p, in, dout, dq, dk, bad, m, 5, budget);
      REQUIRE_FALSE(c.summary.pass);
      REQUIRE(c.summary.reason.rfind("dV: ", 0) == 0);
    }
    // Sizes are checked against dv: dV of K's size is refused.
    REQUIRE_THROWS(check_backward(p, in, dout, dq, dk, dk, CheckMode::full, 5));
    // The rows check (one group too long for the reference), D from the forward's O at dv columns.
    const std::vector<uint16_t> o = round_to(f32.out, p.dtype);
    const std::vector<float> lse(f32.lse.begin(), f32.lse.end());
    const BwdForward fwd{&o, &lse};
    const BwdCheck rows = check_backward_rows(p, in, dout, dq, dk, dv, fwd, 12, 9);
    INFO(rows.grads.reason);
    REQUIRE(rows.summary.pass);
    for (const CheckResult* t : {&rows.grads.dq, &rows.grads.dk, &rows.grads.dv}) REQUIRE(t->err.rel_fro > 0);
    std::vector<uint16_t> bad_row = dv;  // key 0 of batch 0 is always sampled
    bad_row[static_cast<size_t>(p.dv()) - 1] ^= 0x4000;
    const BwdCheck rows_bad = check_backward_rows(p, in, dout, dq, dk, bad_row, fwd, 12, 9);
    REQUIRE_FALSE(rows_bad.summary.pass);
    REQUIRE(rows_bad.summary.reason.rfind("dV: ", 0) == 0);
  }
}

TEST_CASE("metrics with dv: QK^T over d, PV over dv; unchanged when dv = d", "[cpu][dim_v]") {
  for (bool causal : {false, true}) {
    Problem p = shape(2, 300, 1000, 8, 2, 192, causal);
    const double pairs = unmasked_pairs(p);
    const double flops = attention_flops(p), bytes = attention_bytes(p), kv = kv_bytes(p),
                 bwd_bytes = attention_bwd_bytes(p);
    // dv = d, said or not: every figure as before (4 pairs d; four Q-like and four K-like tensors).
    REQUIRE(flops == 4.0 * pairs * 192);
    REQUIRE(kv == 2.0 * 2 * 2000 * 2 * 192);
    REQUIRE(bytes == 2.0 * 2 * 600 * 8 * 192 + kv);
    REQUIRE(bwd_bytes == 4 * 2.0 * 600 * 8 * 192 + 4 * 2.0 * 2000 * 2 * 192 + 4.0 * p.lse_elements());
    p.head_dim_v = 192;
    REQUIRE((attention_flops(p) == flops && attention_bytes(p) == bytes && kv_bytes(p) == kv &&
             attention_bwd_bytes(p) == bwd_bytes));
    // MLA's prefill: 192 / 128.
    p.head_dim_v = 128;
    REQUIRE(unmasked_pairs(p) == pairs);
    REQUIRE(attention_flops(p) == 2.0 * pairs * (192 + 128));
    REQUIRE(attention_bwd_flops(p) == 2.5 * attention_flops(p));
    REQUIRE(kv_bytes(p) == 2.0 * 2000 * 2 * (192 + 128));                        // K + V
    REQUIRE(attention_bytes(p) == 2.0 * 600 * 8 * (192 + 128) + kv_bytes(p));     // Q + O, K + V
    REQUIRE(attention_bwd_bytes(p) == 2 * 2.0 * 600 * 8 * (192 + 128) +           // Q, dQ; O, dO
                                          2 * 2.0 * 2000 * 2 * (192 + 128) +      // K, dK; V, dV
                                          4.0 * p.lse_elements());
    REQUIRE(std::fabs(tflops_of(p, 1.0) - attention_flops(p) / 1e9) < 1e-9);
  }
}

TEST_CASE("kernel parameters: V's and O's strides count dv", "[cpu][dim_v]") {
  Problem p = with_dv(shape(3, 67, 131, 8, 2, 192, true), 128);
  const AttnParams a = make_attn_params(p);
  REQUIRE((a.head_dim == 192 && a.head_dim_v == 128));
  REQUIRE((a.q_head_stride == 192 && a.q_row_stride == 8 * 192 && a.q_batch_stride == 67 * 8 * 192));
  REQUIRE((a.k_head_stride == 192 && a.k_row_stride == 2 * 192 && a.k_batch_stride == 131 * 2 * 192));
  REQUIRE((a.v_head_stride == 128 && a.v_row_stride == 2 * 128 && a.v_batch_stride == 131 * 2 * 128));
  REQUIRE((a.o_head_stride == 128 && a.o_row_stride == 8 * 128 && a.o_batch_stride == 67 * 8 * 128));
  REQUIRE(a.softmax_scale == p.scale());
  const Problem back = problem_of(a);
  REQUIRE((back.head_dim == 192 && back.dv() == 128));
  // dv = d: the field says head_dim, V's and O's strides are K's and Q's.
  const AttnParams same = make_attn_params(shape(1, 5, 9, 4, 2, 64, false));
  REQUIRE(same.head_dim_v == 64);
  REQUIRE((same.v_row_stride == same.k_row_stride && same.o_row_stride == same.q_row_stride));
  REQUIRE(problem_of(same).dv() == 64);
  // A packed batch: no batch strides, rows of dv.
  set_varlen(&p, {4, 9}, {10, 3});
  const AttnParams pk = make_attn_params(p);
  REQUIRE((pk.v_batch_stride == 0 && pk.o_batch_stride == 0 && pk.v_row_stride == 2 * 128));
}

TEST_CASE("validation: dv a multiple of 8 up to 256, any pair with head_dim", "[cpu][dim_v]") {
  Problem p = shape(1, 8, 8, 2, 2, 64, false);
  for (int dv : {0, 8, 32, 64, 128, 256}) {
    p.head_dim_v = dv;
    INFO(dv);
    REQUIRE(validate(p).empty());
  }
  p.head_dim = 256;
  p.head_dim_v = 8;  // dv < d
  REQUIRE(validate(p).empty());
  p.head_dim = 8;
  p.head_dim_v = 256;  // dv > d: the harness takes any pair
  REQUIRE(validate(p).empty());
  for (int dv : {-8, -1, 4, 12, 100, 264, 512}) {
    p.head_dim_v = dv;
    const std::string why = validate(p);
    INFO(dv << ": " << why);
    REQUIRE(why.rfind("--dim-v ", 0) == 0);
    REQUIRE(why.find("multiple of 8 between 8 and 256") != std::string::npos);
    REQUIRE(why.find("any --dim") != std::string::npos);
    REQUIRE(why.find("got " + std::to_string(dv)) != std::string::npos);
    REQUIRE(why.find('\n') == std::string::npos);
  }
}

TEST_CASE("--dim-v: parsed, in the usage, defaults to --dim", "[cpu][dim_v]") {
  auto parse = [](std::vector<const char*> args, Options* o) {
    args.insert(args.begin(), "prog");
    return parse_cli(static_cast<int>(args.size()), args.data(), o);
  };
  Options o;
  REQUIRE(parse({"--dim", "192", "--dim-v", "128"}, &o).ok);
  REQUIRE((o.problem.head_dim == 192 && o.problem.head_dim_v == 128 && o.problem.dv() == 128));
  REQUIRE(o.shape_set);
  Options eq;
  REQUIRE(parse({"--dim-v=48", "--dim", "96"}, &eq).ok);  // either order, --flag=value too
  REQUIRE(eq.problem.dv() == 48);
  Options def;
  REQUIRE(parse({"--dim", "96"}, &def).ok);
  REQUIRE((def.problem.head_dim_v == 0 && def.problem.dv() == 96));
  Options bad;
  const ParseResult r = parse({"--dim-v", "x"}, &bad);
  REQUIRE_FALSE(r.ok);
  REQUIRE(r.error.find("--dim-v") != std::string::npos);
  Options big;
  REQUIRE(parse({"--dim-v", "300"}, &big).ok);  // the range is validate()'s, naming the flag
  REQUIRE(validate(big.problem).rfind("--dim-v", 0) == 0);
  REQUIRE(usage("prog").find("--dim-v N") != std::string::npos);
}

TEST_CASE("a rung without Rung::head_dim_v refuses dv != d in one line", "[cpu][dim_v]") {
  Rung r;
  r.number = 6;
  r.name = "headdim_tiles";
  r.head_dims = {64, 128};
  DeviceInfo hopper;
  hopper.cc_major = 9;
  Problem p = shape(1, 64, 64, 2, 2, 128, true);
  REQUIRE(feature_support(r, p).empty());
  p.head_dim_v = 128;  // the same head_dim, said explicitly: not a V head_dim of its own
  REQUIRE(supports(r, p, hopper).empty());
  p.head_dim_v = 64;  // a head_dim the rung takes, but not for V
  for (const std::string& why : {feature_support(r, p), generic_supports(r, p, hopper), supports(r, p, hopper)}) {
    INFO(why);
    REQUIRE(why.find("--dim-v") != std::string::npos);
    REQUIRE(why.find("not supported by this rung") != std::string::npos);
    REQUIRE(why.find('\n') == std::string::npos);
  }
  // The generic check refuses before the rung's own supports(), which here takes anything.
  r.supports = [](const Problem&, const DeviceInfo&) { return std::string(); };
  REQUIRE_FALSE(supports(r, p, hopper).empty());
  // A rung that declares it takes the problem (rung 17's prefill and decode will).
  r.head_dim_v = true;
  REQUIRE(supports(r, p, hopper).empty());
  // The runner asks before it looks for a GPU: rung 01 exits 2 naming --dim-v on any machine.
  std::string out;
  const int rc = fl_test::run_command(std::string(FL_STEP01_BINARY) + " --dim 64 --dim-v 32", &out);
  INFO(out);
  REQUIRE(rc == 2);
  REQUIRE(out.find("--dim-v") != std::string::npos);
  REQUIRE(out.find("d=64 dv=32") != std::string::npos);  // the problem it refused, dv included
  REQUIRE(out.find('\n') == out.size() - 1);
  REQUIRE(fl_test::run_command(std::string(FL_STEP01_BINARY) + " --dim-v 12", &out) == 2);
  REQUIRE(out.find("--dim-v") != std::string::npos);
}

TEST_CASE("the report's problem: dv in the JSON, dv= in the line where it differs", "[cpu][dim_v]") {
  RunReport r;
  r.problem = with_dv(shape(1, 64, 64, 2, 2, 192, true), 128);
  REQUIRE(to_json(r).find("\"head_dim_v\":128") != std::string::npos);
  REQUIRE(format_report(r).find("d=192 dv=128") != std::string::npos);
  r.problem.head_dim_v = 0;
  REQUIRE(to_json(r).find("\"head_dim_v\":192") != std::string::npos);
  REQUIRE(format_report(r).find("dv=") == std::string::npos);
}
