// The backward rung's harness on the CPU: its metrics, the --deterministic flag, the registry's
// backward flag, which part of a backward run is checked (check_bwd.h: whole problem or sampled
// (batch, KV head) groups) and the check on modelled gradients, and the backward run report.
#include <algorithm>
#include <cmath>
#include <vector>

#include "catch_compat.h"
#include "flashladder/backward.h"
#include "flashladder/check_bwd.h"
#include "flashladder/cli.h"
#include "flashladder/registry.h"
#include "flashladder/report.h"
#include "problem_shape.h"
#include "11_backward/delta_policy.h"

using namespace fl;
using fl_test::shape;

namespace {

std::vector<uint16_t> round_to(const std::vector<double>& t, DType dt) {
  std::vector<uint16_t> out(t.size());
  for (size_t n = 0; n < t.size(); ++n) out[n] = to_bits(static_cast<float>(t[n]), dt);
  return out;
}

/// Inputs, dO and "device" gradients: the fp32 reference rounded to 16 bits (a faithful result).
struct Fixture {
  Problem p;
  HostInputs in;
  std::vector<uint16_t> dout, dq, dk, dv;
  explicit Fixture(const Problem& prob, unsigned long long seed = 3) : p(prob) {
    in = make_inputs(p, InputKind::random, seed);
    dout = make_grad_output(p, seed);
    const BwdResults f32 = reference_bwd_fp32(p, in, dout);
    dq = round_to(f32.dq, p.dtype);
    dk = round_to(f32.dk, p.dtype);
    dv = round_to(f32.dv, p.dtype);
  }
  BwdCheck check(CheckMode mode, unsigned long long seed = 1, double budget = kBwdCheckWork) const {
    return check_backward(p, in, dout, dq, dk, dv, mode, seed, budget);
  }
};

/// Offset of element (b, s, h, 0) of a dense [batch, S, H, D] tensor.
size_t at(int b, int s, int h, int S, int H, int D) { return ((static_cast<size_t>(b) * S + s) * H + h) * D; }

bool has_group(const std::vector<BwdGroup>& gs, int b, int hk) {
  return std::any_of(gs.begin(), gs.end(), [&](const BwdGroup& g) { return g.b == b && g.hk == hk; });
}

}  // namespace

TEST_CASE("backward metrics: 2.5 x the forward's FLOPs; Q,K,V,O,dO read, dQ,dK,dV written, LSE read",
          "[cpu][backward]") {
  Problem p = shape(2, 1000, 3000, 8, 2, 128, false);
  REQUIRE(attention_bwd_flops(p) == 2.5 * attention_flops(p));
  const double q_like = 2.0 * 2 * 1000 * 8 * 128;   // one 16-bit tensor shaped like Q
  const double kv_like = 2.0 * 2 * 3000 * 2 * 128;  // one shaped like K
  const double lse = 4.0 * 2 * 8 * 1000;            // fp32, one per (batch, head, query row)
  REQUIRE(attention_bwd_bytes(p) == 4 * q_like + 4 * kv_like + lse);
  // The forward's compulsory bytes are Q, K, V read and O written: the backward's hold them.
  REQUIRE(attention_bwd_bytes(p) > 2 * attention_bytes(p));
  p.causal = true;  // causality changes the FLOPs, not the compulsory bytes
  REQUIRE(attention_bwd_flops(p) == 2.5 * attention_flops(p));
  REQUIRE(attention_bwd_bytes(p) == 4 * q_like + 4 * kv_like + lse);
  REQUIRE(std::fabs(bwd_tflops_of(p, 2.0) - attention_bwd_flops(p) / 2e9) < 1e-9);
  REQUIRE(std::fabs(bwd_gbps_of(p, 2.0) - attention_bwd_bytes(p) / 2e6) < 1e-9);
  REQUIRE(bwd_tflops_of(p, 0) == 0);
}

TEST_CASE("--deterministic is a boolean flag like --causal", "[cpu][backward]") {
  struct Case {
    std::vector<const char*> args;
    bool det;
  };
  const std::vector<Case> cases = {{{}, false},
                                   {{"--deterministic"}, true},
                                   {{"--deterministic", "--causal"}, true},
                                   {{"--deterministic", "0"}, false},
                                   {{"--deterministic=1"}, true},
                                   {{"--deterministic", "false"}, false}};
  for (const auto& c : cases) {
    std::vector<const char*> argv{"prog"};
    argv.insert(argv.end(), c.args.begin(), c.args.end());
    Options o;
    const ParseResult r = parse_cli(static_cast<int>(argv.size()), argv.data(), &o);
    INFO(c.args.size() << " args: " << r.error);
    REQUIRE(r.ok);
    REQUIRE(o.deterministic == c.det);
  }
  Options o;
  const char* with_causal[] = {"prog", "--deterministic", "--causal", "0"};
  REQUIRE(parse_cli(4, with_causal, &o).ok);
  REQUIRE((o.deterministic && !o.problem.causal));
  const char* bad[] = {"prog", "--deterministic", "2"};
  const ParseResult r = parse_cli(3, bad, &o);
  REQUIRE_FALSE(r.ok);
  REQUIRE(r.error.find("--deterministic") != std::string::npos);
  REQUIRE(usage("x").find("--deterministic") != std::string::npos);
}

TEST_CASE("the registry JSON marks backward rungs", "[cpu][backward]") {
  Registry reg;
  Rung fwd, bwd;
  fwd.number = 6;
  fwd.name = "headdim_tiles";
  bwd.number = 11;
  bwd.name = "backward";
  bwd.forward_rung = 6;
  bwd.launch_bwd = [](const AttnBwdParams&, cudaStream_t) {};
  reg.add(fwd);
  reg.add(bwd);
  const std::string js = registry_json(reg);
  REQUIRE(js.find("\"label\": \"06_headdim_tiles\", \"number\": 6") != std::string::npos);
  const size_t f = js.find("\"label\": \"06_headdim_tiles\""), b = js.find("\"label\": \"11_backward\"");
  REQUIRE(b != std::string::npos);
  REQUIRE(js.find("\"backward\": false", f) < b);
  REQUIRE(js.find("\"backward\": true", b) != std::string::npos);
}

TEST_CASE("which part of a backward run is checked", "[cpu][backward]") {
  SECTION("small problems: everything, whatever the mode but none") {
    const Problem p = shape(2, 100, 130, 4, 2, 64, true);
    for (CheckMode m : {CheckMode::auto_, CheckMode::full}) {
      const BwdCheckPlan plan = plan_bwd_check(p, m, 1);
      REQUIRE(plan.mode == "full");
      REQUIRE(plan.groups.size() == 4);
      REQUIRE(plan.note.empty());
    }
    // sample on a small problem: the budget covers every group, so it is a full check.
    REQUIRE(plan_bwd_check(p, CheckMode::sample, 1).mode == "full");
    const BwdCheckPlan none = plan_bwd_check(p, CheckMode::none, 1);
    REQUIRE(none.mode == "none");
    REQUIRE(none.groups.empty());
  }
  SECTION("large problems: the first and last groups and seeded random ones, within the budget") {
    const Problem p = shape(8, 1024, 1024, 32, 8, 64, false);  // 64 groups of 2.7e8 each
    REQUIRE(bwd_check_work(p) == 8.0 * 32 * 1024 * 1024 * 64);
    const BwdCheckPlan plan = plan_bwd_check(p, CheckMode::auto_, 7);
    REQUIRE(plan.mode == "sample");
    REQUIRE(has_group(plan.groups, 0, 0));
    REQUIRE(has_group(plan.groups, 7, 7));
    const double group_work = bwd_check_work(p) / 64;
    REQUIRE(plan.groups.size() == 3);  // first, last and one random group fit in 1e9
    REQUIRE(plan.groups.size() * group_work <= kBwdCheckWork);
    REQUIRE(plan.note.find("of 64 (batch, KV head) groups") != std::string::npos);
    for (size_t i = 1; i < plan.groups.size(); ++i)  // ascending, no repeats
      REQUIRE(std::make_pair(plan.groups[i - 1].b, plan.groups[i - 1].hk) <
              std::make_pair(plan.groups[i].b, plan.groups[i].hk));
    // Seeded: the same seed picks the same groups.
    const BwdCheckPlan again = plan_bwd_check(p, CheckMode::sample, 7);
    REQUIRE(again.groups.size() == plan.groups.size());
    for (size_t i = 0; i < plan.groups.size(); ++i)
      REQUIRE((again.groups[i].b == plan.groups[i].b && again.groups[i].hk == plan.groups[i].hk));
    // --check full compares everything anyway.
    REQUIRE(plan_bwd_check(p, CheckMode::full, 7).groups.size() == 64);
  }
  SECTION("a single group above the cap is not compared; the reason says so") {
    const Problem p = shape(1, 16384, 16384, 16, 16, 128, true);  // 3.4e10 per group
    REQUIRE(bwd_check_work(p) / 16 > kBwdGroupCapFactor * kBwdCheckWork);
    for (CheckMode m : {CheckMode::auto_, CheckMode::sample}) {
      const BwdCheckPlan plan = plan_bwd_check(p, m, 1);
      REQUIRE(plan.mode == "none");
      REQUIRE(plan.note.find("above the cap") != std::string::npos);
      REQUIRE(plan.note.find("--check full") != std::string::npos);
    }
    REQUIRE(plan_bwd_check(p, CheckMode::full, 1).mode == "full");
  }
  SECTION("ALiBi and sinks belong to the query head: no sampled groups, whose heads are renumbered") {
    for (bool alibi : {true, false}) {
      Problem p = shape(8, 1024, 1024, 32, 8, 64, false);  // sampled without them (above)
      Problem small = shape(2, 100, 130, 4, 2, 64, true);  // checked whole, with them too
      p.alibi = small.alibi = alibi;
      if (!alibi) {
        p.sinks.assign(32, 0.5f);
        small.sinks.assign(4, 0.5f);
      }
      for (CheckMode m : {CheckMode::auto_, CheckMode::sample}) {
        const BwdCheckPlan plan = plan_bwd_check(p, m, 7);
        REQUIRE(plan.mode == "none");
        REQUIRE(plan.note.find("--check full") != std::string::npos);
      }
      REQUIRE(plan_bwd_check(p, CheckMode::full, 7).groups.size() == 64);
      REQUIRE(plan_bwd_check(small, CheckMode::auto_, 1).mode == "full");
    }
  }
}

TEST_CASE("a group's gradients are exact on their own (gathered sub-problem)", "[cpu][backward]") {
  // With dropout the sub-problem keeps each group's mask (Problem::dropout_bh0): a sampled check of
  // a dropout backward compares the same mask as the kernel drew (it did not, and a correct kernel
  // failed its sampled check at 4k).
  // V's head_dim of its own (--dim-v, MLA): V, dO and dV are gathered at dv columns, Q, dQ, K, dK
  // at head_dim (48 is wider than Q's 32, 16 narrower).
  const bool drop = GENERATE(false, true);
  const int dv = GENERATE(0, 48, 16);
  Problem p = shape(3, 70, 90, 8, 2, 32, true);
  p.head_dim_v = dv;
  if (drop) {
    p.dropout_p = 0.3f;
    p.dropout_seed = 99;
  }
  INFO("dropout " << drop << ", " << p.describe());
  const HostInputs in = make_inputs(p, InputKind::random, 4);
  const std::vector<uint16_t> dout = make_grad_output(p, 4);
  const BwdResults full = reference_bwd_fp64(p, in, dout);
  const std::vector<BwdGroup> groups = {{0, 1}, {2, 0}};
  const Problem sub = group_problem(p, groups);
  REQUIRE((sub.batch == 2 && sub.heads_kv == 1 && sub.heads_q == 4 && sub.seqlen_q == 70 && sub.seqlen_k == 90));
  REQUIRE((sub.causal && sub.scale() == p.scale() && sub.dtype == p.dtype));
  REQUIRE((sub.head_dim == p.head_dim && sub.dv() == p.dv()));
  for (size_t g = 0; g < groups.size(); ++g)
    for (int h = 0; h < p.group(); ++h)
      for (int i = 0; i < p.seqlen_q; i += 7)
        for (int j = 0; j < p.seqlen_k; ++j)
          REQUIRE(sub.dropout_kept(static_cast<int>(g), h, i, j) ==
                  p.dropout_kept(groups[g].b, groups[g].hk * p.group() + h, i, j));
  HostInputs sin;
  sin.q = gather_q_like(p, in.q, groups);
  sin.k = gather_kv_like(p, in.k, groups);
  sin.v = gather_kv_like(p, in.v, groups, p.dv());
  REQUIRE((sin.q.size() == sub.q_elements() && sin.k.size() == sub.kv_elements()));
  REQUIRE(sin.v.size() == sub.v_elements());
  const BwdResults part = reference_bwd_fp64(sub, sin, gather_q_like(p, dout, groups, p.dv()));
  REQUIRE((part.dv.size() == sub.v_elements() && part.out.size() == sub.o_elements()));
  // The sub-problem's rows are the groups' rows of the full problem, in order.
  for (size_t g = 0; g < groups.size(); ++g) {
    const int b = groups[g].b, hk = groups[g].hk;
    for (int s = 0; s < p.seqlen_k; ++s) {
      for (int c = 0; c < p.head_dim; ++c)
        REQUIRE(std::fabs(part.dk[at(static_cast<int>(g), s, 0, p.seqlen_k, 1, p.head_dim) + c] -
                          full.dk[at(b, s, hk, p.seqlen_k, p.heads_kv, p.head_dim) + c]) < 1e-12);
      for (int c = 0; c < p.dv(); ++c)
        REQUIRE(std::fabs(part.dv[at(static_cast<int>(g), s, 0, p.seqlen_k, 1, p.dv()) + c] -
                          full.dv[at(b, s, hk, p.seqlen_k, p.heads_kv, p.dv()) + c]) < 1e-12);
    }
    for (int s = 0; s < p.seqlen_q; ++s)
      for (int h = 0; h < p.group(); ++h)
        for (int c = 0; c < p.head_dim; ++c)
          REQUIRE(std::fabs(part.dq[at(static_cast<int>(g), s, h, p.seqlen_q, p.group(), p.head_dim) + c] -
                            full.dq[at(b, s, hk * p.group() + h, p.seqlen_q, p.heads_q, p.head_dim) + c]) < 1e-12);
  }
}

TEST_CASE("the backward check on modelled gradients: full, sampled, none", "[cpu][backward]") {
  SECTION("faithful gradients pass in every mode, each tensor judged") {
    const Fixture f(shape(2, 40, 57, 4, 2, 32, true));
    for (CheckMode m : {CheckMode::full, CheckMode::auto_}) {
      const BwdCheck c = f.check(m);
      INFO(c.grads.reason);
      REQUIRE(c.summary.pass);
      REQUIRE(c.summary.checked);
      REQUIRE(c.summary.mode == "full");
      REQUIRE((c.groups == 4 && c.groups_total == 4));
      REQUIRE(c.summary.rows == static_cast<size_t>(2) * 40 * 4);
      for (const CheckResult* t : {&c.grads.dq, &c.grads.dk, &c.grads.dv}) {
        REQUIRE(t->pass);
        REQUIRE(t->err.rel_fro > 0);
        REQUIRE(t->unwritten == 0);
      }
      // The summary carries the tensor closest to its tolerance.
      double worst = 0;
      for (const CheckResult* t : {&c.grads.dq, &c.grads.dk, &c.grads.dv})
        worst = std::max({worst, t->err.rel_fro / t->tol.rel_fro, t->err.max_abs / t->tol.max_abs});
      REQUIRE(std::max(c.summary.err.rel_fro / c.summary.tol.rel_fro, c.summary.err.max_abs / c.summary.tol.max_abs) ==
              worst);
    }
    const BwdCheck none = f.check(CheckMode::none);
    REQUIRE(none.summary.pass);
    REQUIRE_FALSE(none.summary.checked);
    REQUIRE(none.summary.mode == "none");
    REQUIRE(none.groups == 0);
  }
  SECTION("an error in dK is named, the other gradients still pass") {
    const Fixture f(shape(2, 64, 64, 4, 4, 64, false));
    const Problem& p = f.p;
    Fixture bad = f;
    uint16_t& x = bad.dk[at(1, 5, 2, p.seqlen_k, p.heads_kv, p.head_dim) + 3];
    x = to_bits(from_bits(x, p.dtype) + 0.5f, p.dtype);
    const BwdCheck c = bad.check(CheckMode::full);
    REQUIRE_FALSE(c.summary.pass);
    REQUIRE(c.summary.reason.rfind("dK: ", 0) == 0);
    REQUIRE_FALSE(c.grads.dk.pass);
    REQUIRE((c.grads.dq.pass && c.grads.dv.pass));
  }
  SECTION("a NaN anywhere fails, compared or not") {
    Fixture f(shape(1, 30, 30, 2, 1, 32, false));
    f.dv[7] = 0x7e00;  // fp16 NaN, as the poison leaves an element never written
    for (CheckMode m : {CheckMode::full, CheckMode::none}) {
      const BwdCheck c = f.check(m);
      REQUIRE_FALSE(c.summary.pass);
      REQUIRE(c.summary.unwritten == 1);
      REQUIRE(c.grads.dv.unwritten == 1);
      REQUIRE(c.summary.reason.rfind("dV: ", 0) == 0);
    }
  }
}

TEST_CASE("sampled groups: errors outside them are not seen, inside them and NaN anywhere are",
          "[cpu][backward]") {
  // A small budget makes a small problem "large": the sampled path as the runner takes it.
  const Problem p = shape(4, 48, 48, 4, 4, 32, true);  // 16 groups of 48 x 48 x 32 work each
  const double group_work = bwd_check_work(p) / 16;
  const double budget = 4 * group_work;  // four groups
  const Fixture f(p);
  const BwdCheck c = f.check(CheckMode::auto_, 5, budget);
  INFO(c.grads.reason);
  REQUIRE(c.summary.pass);
  REQUIRE(c.summary.mode == "sample");
  REQUIRE((c.groups == 4 && c.groups_total == 16));
  REQUIRE(c.summary.rows == static_cast<size_t>(4) * 48 * 1);  // dQ rows of four groups (group 1)
  REQUIRE(c.note.find("4 of 16 (batch, KV head) groups") != std::string::npos);
  for (const CheckResult* t : {&c.grads.dq, &c.grads.dk, &c.grads.dv}) REQUIRE(t->mode == "sample");
  const BwdCheckPlan plan = plan_bwd_check(p, CheckMode::auto_, 5, budget);
  REQUIRE(plan.groups.size() == 4);
  // A group the plan leaves out, and one it compares.
  BwdGroup out{-1, -1};
  for (int b = 0; b < p.batch && out.b < 0; ++b)
    for (int hk = 0; hk < p.heads_kv; ++hk)
      if (!has_group(plan.groups, b, hk)) {
        out = {b, hk};
        break;
      }
  REQUIRE(out.b >= 0);
  const BwdGroup in = plan.groups.back();
  auto flip = [&](const BwdGroup& g) {
    Fixture h = f;
    h.dq[at(g.b, 40, g.hk, p.seqlen_q, p.heads_q, p.head_dim)] ^= 0x4000;  // a large error
    return h;
  };
  const Fixture outside = flip(out);
  REQUIRE(outside.check(CheckMode::auto_, 5, budget).summary.pass);   // not compared...
  REQUIRE_FALSE(outside.check(CheckMode::full).summary.pass);          // ...the full check sees it
  const BwdCheck inside = flip(in).check(CheckMode::auto_, 5, budget);
  REQUIRE_FALSE(inside.summary.pass);
  REQUIRE(inside.summary.reason.rfind("dQ: ", 0) == 0);
  // NaN in a group that is not compared still fails: unwritten counts whole tensors.
  Fixture nan = f;
  nan.dk[at(out.b, 3, out.hk, p.seqlen_k, p.heads_kv, p.head_dim)] = 0x7e00;
  const BwdCheck n = nan.check(CheckMode::auto_, 5, budget);
  REQUIRE_FALSE(n.summary.pass);
  REQUIRE(n.grads.dk.unwritten == 1);
  REQUIRE(n.summary.reason.rfind("dK: ", 0) == 0);
  // Past the cap, nothing is compared but NaN is still looked for.
  const BwdCheck capped = f.check(CheckMode::auto_, 5, group_work / (2 * kBwdGroupCapFactor));
  REQUIRE(capped.summary.pass);
  REQUIRE_FALSE(capped.summary.checked);
  REQUIRE(capped.summary.mode == "none");
  REQUIRE(capped.note.find("above the cap") != std::string::npos);
  REQUIRE_FALSE(nan.check(CheckMode::auto_, 5, group_work / (2 * kBwdGroupCapFactor)).summary.pass);
}

namespace {

/// dQ of a FlashAttention-style kernel, modelled on the CPU (P recomputed from the LSE in fp32, dS =
/// P (dP - D) rounded to 16 bits, fp32 sums, 16-bit result), with D = rowsum(dO * O) from the O
/// given: the fp32 O, or that O rounded to 16 bits.
std::vector<uint16_t> model_dq(const Problem& p, const Fixture& f, const BwdResults& fwd, bool d_from_16bit_o) {
  const int D = p.head_dim, Hq = p.heads_q, Hk = p.heads_kv, Sk = p.seqlen_k;
  const float scale = p.scale();
  auto val = [&](uint16_t b) { return from_bits(b, p.dtype); };
  auto r16 = [&](float x) { return from_bits(to_bits(x, p.dtype), p.dtype); };
  std::vector<uint16_t> dq(f.dq.size());
  for (int i = 0; i < p.seqlen_q; ++i)
    for (int h = 0; h < Hq; ++h) {
      const size_t qi = at(0, i, h, p.seqlen_q, Hq, D);
      const int hk = h / p.group();
      float d = 0;
      for (int c = 0; c < D; ++c) {
        const float o = static_cast<float>(fwd.out[qi + c]);
        d += val(f.dout[qi + c]) * (d_from_16bit_o ? r16(o) : o);
      }
      const float lse = static_cast<float>(fwd.lse[static_cast<size_t>(h) * p.seqlen_q + i]);
      std::vector<float> g(D, 0.f);
      for (int j = 0; j < Sk; ++j) {
        const size_t kj = at(0, j, hk, Sk, Hk, D);
        float s = 0, dp = 0;
        for (int c = 0; c < D; ++c) {
          s += val(f.in.q[qi + c]) * val(f.in.k[kj + c]);
          dp += val(f.dout[qi + c]) * val(f.in.v[kj + c]);
        }
        const float ds = r16(std::exp(s * scale - lse) * (dp - d));
        for (int c = 0; c < D; ++c) g[c] += ds * val(f.in.k[kj + c]);
      }
      for (int c = 0; c < D; ++c) dq[qi + c] = to_bits(g[c] * scale, p.dtype);
    }
  return dq;
}

}  // namespace

TEST_CASE("sampled rows at 128k keys: dQ with D from the fp32 O passes, with D from the 16-bit O fails",
          "[cpu][backward]") {
  // Rung 12's ring merged its steps' 16-bit O and took the backward's D from that: on 2 GPUs at
  // 128k and 256k tokens (bench/results/nvidia-h200-x2/ring-backward-o16/) dQ was off by up to
  // 0.076 (relative Frobenius; 0.044 at 128k without the mask) against a floor of 0.032, dK and dV
  // at 0.0025. The 16-bit rounding of O
  // shifts D, no row of dS then sums to zero, and dQ_i = s sum_j dS_ij K_j sums that shift over
  // every key. The sampled-rows check must tell the two apart at this length.
  Problem p = shape(1, 8, 131072, 2, 2, 128, false);
  p.dtype = DType::bf16;
  const Fixture f(p);
  const BwdResults f32 = reference_bwd_fp32(p, f.in, f.dout);
  const std::vector<uint16_t> o = round_to(f32.out, p.dtype);
  const std::vector<float> lse(f32.lse.begin(), f32.lse.end());
  const BwdForward fwd{&o, &lse};
  const BwdCheck good = check_backward_rows(p, f.in, f.dout, model_dq(p, f, f32, false), f.dk, f.dv, fwd, 8, 9);
  INFO(good.grads.reason);
  REQUIRE(good.summary.pass);
  REQUIRE(good.grads.dq.err.rel_fro < 0.25 * good.grads.dq.tol.rel_fro);
  const BwdCheck bad = check_backward_rows(p, f.in, f.dout, model_dq(p, f, f32, true), f.dk, f.dv, fwd, 8, 9);
  REQUIRE_FALSE(bad.summary.pass);
  REQUIRE(bad.summary.reason.rfind("dQ: ", 0) == 0);
}

TEST_CASE("sampled rows (the long groups' check): faithful gradients pass, an error in a sampled row fails",
          "[cpu][backward]") {
  // GQA 4:2, causal with seqlen_q < seqlen_k and a tail, fp16 and bf16.
  for (DType dt : {DType::fp16, DType::bf16}) {
    Problem p = shape(2, 61, 90, 4, 2, 32, true);
    p.dtype = dt;
    const Fixture f(p);
    // The forward's O (16-bit) and LSE, as a faithful forward leaves them.
    const BwdResults f32 = reference_bwd_fp32(p, f.in, f.dout);
    const std::vector<uint16_t> o = round_to(f32.out, dt);
    const std::vector<float> lse(f32.lse.begin(), f32.lse.end());
    const BwdForward fwd{&o, &lse};
    const int rows = 12;
    const BwdCheck c = check_backward_rows(p, f.in, f.dout, f.dq, f.dk, f.dv, fwd, rows, 9);
    INFO(dtype_name(dt) << ": " << c.grads.reason);
    REQUIRE(c.summary.pass);
    REQUIRE(c.summary.checked);
    REQUIRE(c.grads.dq.mode == "sample-rows");
    REQUIRE(c.grads.dq.rows == static_cast<size_t>(rows) * p.heads_q);  // every head of 12 query rows
    REQUIRE(c.grads.dk.rows == static_cast<size_t>(rows) * p.heads_kv);
    for (const CheckResult* t : {&c.grads.dq, &c.grads.dk, &c.grads.dv}) REQUIRE(t->err.rel_fro > 0);
    // The rows' reference is the whole reference's: the same fixture with full groups agrees.
    REQUIRE(f.check(CheckMode::full).summary.pass);
    // The first key row (batch 0, key 0) is always sampled: an error there fails dK; one in the
    // last query row (always sampled) fails dQ.
    Fixture bad_k = f;
    bad_k.dk[at(0, 0, 1, p.seqlen_k, p.heads_kv, p.head_dim) + 5] ^= 0x4000;
    const BwdCheck ck = check_backward_rows(p, bad_k.in, bad_k.dout, bad_k.dq, bad_k.dk, bad_k.dv, fwd, rows, 9);
    REQUIRE_FALSE(ck.summary.pass);
    REQUIRE(ck.summary.reason.rfind("dK: ", 0) == 0);
    Fixture bad_q = f;
    bad_q.dq[at(1, p.seqlen_q - 1, 3, p.seqlen_q, p.heads_q, p.head_dim)] ^= 0x4000;
    const BwdCheck cq = check_backward_rows(p, bad_q.in, bad_q.dout, bad_q.dq, bad_q.dk, bad_q.dv, fwd, rows, 9);
    REQUIRE_FALSE(cq.summary.pass);
    REQUIRE(cq.summary.reason.rfind("dQ: ", 0) == 0);
    // check_backward takes this path where a group is past the cap and the forward's outputs are given.
    const double tiny = bwd_check_work(p) / (64 * kBwdGroupCapFactor);
    const BwdCheck routed = check_backward(p, f.in, f.dout, f.dq, f.dk, f.dv, CheckMode::auto_, 9, tiny, nullptr, fwd);
    REQUIRE(routed.summary.pass);
    REQUIRE(routed.grads.dq.mode == "sample-rows");
    REQUIRE(routed.note.find("query rows") != std::string::npos);
    REQUIRE_FALSE(check_backward(p, bad_k.in, bad_k.dout, bad_k.dq, bad_k.dk, bad_k.dv, CheckMode::auto_, 9, tiny,
                                 nullptr, fwd).summary.pass);
    // Without them it stays as before: nothing compared, NaN looked for.
    REQUIRE(f.check(CheckMode::auto_, 9, tiny).summary.mode == "none");
  }
  // What it takes: a dense batch with at most the causal mask.
  Problem w = shape(1, 64, 64, 2, 2, 32, true);
  REQUIRE(rows_check_reason(w).empty());
  w.window_left = 8;
  REQUIRE_FALSE(rows_check_reason(w).empty());
  REQUIRE(rows_check_count(shape(1, 131072, 131072, 16, 16, 128, true)) >= 4);
  REQUIRE(rows_check_count(shape(1, 131072, 131072, 16, 16, 128, true)) <= 64);
}

TEST_CASE("a backward run report: the backward's work, rate, per-gradient check and JSON", "[cpu][backward]") {
  const Fixture f(shape(1, 64, 96, 4, 2, 64, true));
  RunReport r;
  r.rung_number = 11;
  r.rung_name = "backward";
  r.summary = "FA2 backward";
  r.peak = Peak::tensor_16bit;
  r.problem = f.p;
  r.device.name = "Fake GPU";
  r.device.cc_major = 9;
  r.device.peak_tensor_tflops = 1000;
  r.timing.timed = true;
  r.timing.median_ms = 0.5;
  r.timing.iters = 20;
  r.backward = true;
  r.deterministic = true;
  r.forward_label = "06_headdim_tiles";
  r.bwd = f.check(CheckMode::full);
  r.check = r.bwd.summary;
  r.workspace_bytes = 4096;
  const std::string text = format_report(r);
  for (const char* s : {"rung 11 backward", "backward (dQ, dK, dV) after the forward pass of 06_headdim_tiles",
                        "deterministic=1", "2.5 x the forward's", "Q,K,V,O,dO read + dQ,dK,dV written, LSE read",
                        "PASS vs fp64 backward reference, 2 of 2 (batch, KV head) groups (full)", "dQ rel_fro",
                        "dK rel_fro", "dV rel_fro", "(backward FLOPs)"})
    REQUIRE(text.find(s) != std::string::npos);
  REQUIRE(std::fabs(run_tflops(r) - bwd_tflops_of(f.p, 0.5)) < 1e-12);
  REQUIRE(std::fabs(percent_of_peak(r) - 100 * bwd_tflops_of(f.p, 0.5) / 1000) < 1e-9);
  const std::string js = to_json(r);
  for (const char* key : {"\"schema\":\"flashladder.run/1\"", "\"backward\":true", "\"deterministic\":true",
                          "\"forward_rung\":\"06_headdim_tiles\"", "\"bwd_flops\":", "\"bwd_bytes\":",
                          "\"groups\":2", "\"groups_total\":2", "\"gradients\":{\"dq\":{\"pass\":true",
                          "\"dk\":{\"pass\":true", "\"dv\":{\"pass\":true", "\"tol_rel_fro\"", "\"fp32_rel_fro\""})
    REQUIRE(js.find(key) != std::string::npos);
  char tflops[64];
  std::snprintf(tflops, sizeof tflops, "\"tflops\":%.9g", bwd_tflops_of(f.p, 0.5));
  REQUIRE(js.find(tflops) != std::string::npos);
  REQUIRE(std::count(js.begin(), js.end(), '{') == std::count(js.begin(), js.end(), '}'));
  // A failing gradient is named in the text.
  RunReport bad = r;
  bad.bwd.grads.dv.pass = false;
  bad.bwd.grads.dv.reason = "max abs error 1e-1 > tolerance 4e-3";
  bad.bwd.grads.pass = false;
  bad.bwd.grads.reason = "dV: max abs error 1e-1 > tolerance 4e-3";
  summarize(&bad.bwd);
  bad.check = bad.bwd.summary;
  REQUIRE(format_report(bad).find("reason: dV: max abs error") != std::string::npos);
  REQUIRE(to_json(bad).find("\"pass\":false") != std::string::npos);
  // A forward run's report says backward false and has no gradients.
  RunReport fwd;
  fwd.problem = f.p;
  const std::string fjs = to_json(fwd);
  REQUIRE(fjs.find("\"backward\":false") != std::string::npos);
  REQUIRE(fjs.find("\"gradients\"") == std::string::npos);
  REQUIRE(fjs.find("\"bwd_flops\"") == std::string::npos);
}

TEST_CASE("rung 11's source of D: the exact pass past kExactDeltaKeys keys, the fp32 O below, the 16-bit O on short rows",
          "[cpu][backward]") {
  using fl::bwd::DeltaPolicy;
  using fl::bwd::DeltaSource;
  using fl::bwd::delta_source;
  using fl::bwd::kExactDeltaKeys;
  using fl::bwd::kO16DeltaKeys;
  using fl::bwd::reads_o32;
  // The bench's backward sweep takes the 16-bit O up to 4k keys and the forward's fp32 O at 8k and
  // 16k; one query against 100k keys (the held-out failure) takes the exact pass.
  REQUIRE(kExactDeltaKeys >= 16384);
  REQUIRE(kO16DeltaKeys == 4096);
  REQUIRE(delta_source(DeltaPolicy::rung, 16384, true) == DeltaSource::o32);
  REQUIRE(delta_source(DeltaPolicy::rung, kO16DeltaKeys + 1, true) == DeltaSource::o32);
  for (int keys : {1, 512, kO16DeltaKeys}) {  // short rows: the 16-bit O, fp32 O given or not
    REQUIRE(delta_source(DeltaPolicy::rung, keys, true) == DeltaSource::o16);
    REQUIRE(!reads_o32(DeltaPolicy::rung, keys));
  }
  // The forward writes the fp32 O only where the backward reads it.
  REQUIRE(reads_o32(DeltaPolicy::rung, kO16DeltaKeys + 1));
  REQUIRE(reads_o32(DeltaPolicy::rung, kExactDeltaKeys));
  REQUIRE(!reads_o32(DeltaPolicy::rung, kExactDeltaKeys + 1));
  REQUIRE(reads_o32(DeltaPolicy::o32, 100003));
  REQUIRE(!reads_o32(DeltaPolicy::o16, 8192));
  REQUIRE(delta_source(DeltaPolicy::rung, 100003, true) == DeltaSource::exact);
  REQUIRE(delta_source(DeltaPolicy::rung, 100003, false) == DeltaSource::exact);
  REQUIRE(delta_source(DeltaPolicy::rung, kExactDeltaKeys, false) == DeltaSource::o16);  // no fp32 O given
  REQUIRE(delta_source(DeltaPolicy::rung, kExactDeltaKeys + 1, true) == DeltaSource::exact);
  // The ablations take one source whatever the length (o32 without the fp32 O falls back to o16).
  for (int keys : {1, 4096, 100003}) {
    REQUIRE(delta_source(DeltaPolicy::o16, keys, true) == DeltaSource::o16);
    REQUIRE(delta_source(DeltaPolicy::o32, keys, true) == DeltaSource::o32);
    REQUIRE(delta_source(DeltaPolicy::o32, keys, false) == DeltaSource::o16);
    REQUIRE(delta_source(DeltaPolicy::exact, keys, false) == DeltaSource::exact);
  }
}
