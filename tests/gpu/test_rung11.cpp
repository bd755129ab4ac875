// The backward rungs (11, 14) on the GPU: dQ, dK, dV of every registered backward entry
// (Rung::launch_bwd; FL_TEST_RUNG=<n> keeps one rung's) against the fp64 backward reference
// (reference_bwd.h, judged by check_bwd.h), beyond the shared matrix that run_case also routes to
// the backward check:
//   - a matrix: fp16/bf16, head_dim 64/128/256 (those the rung claims), causal or not, seqlen_q != seqlen_k both ways and
//     equal, tails (1, 17, 113, 203), MHA, GQA 4:1, MQA;
//   - the deterministic mode (AttnBwdParams::deterministic) on the matrix's hardest corners;
//   - rows that see no key (causal, seqlen_q > seqlen_k): dQ exactly zero, no NaN anywhere;
//   - deterministic=1: two runs give bitwise identical dQ, dK, dV;
//   - a larger problem checked on sampled (batch, KV head) groups;
//   - a few queries against many keys (seqlen_q << seqlen_k: the GQA group split over a small grid,
//     and rows of 100k keys, where D must come from the exact pass: delta_policy.h).
// ctest: gpu_rung11_<part>, one entry per TEST_CASE by its last tag (tests/CMakeLists.txt, which
// reads the tags from this file); exits 77 without a GPU (gpu_main.cpp). Every section
// lists its cases first and asserts that as many ran as supports() accepted (expected_runs.h):
// the matrices span shapes a rung may refuse (counted); the packed sections expect no refusal
// from a rung that takes packed batches. Rung 14 (sm_90 only) skips the test on another GPU.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "catch_compat.h"
#include "expected_runs.h"
#include "flashladder/runner.h"
#include "problem_shape.h"

using namespace fl;
using fl_test::Section;
using fl_test::shape;

namespace {

/// Every registered backward entry (mains and variants), or those of rung FL_TEST_RUNG=<n>.
std::vector<const Rung*> backward_rungs() {
  const char* env = std::getenv("FL_TEST_RUNG");
  const int only = env ? std::atoi(env) : 0;
  std::vector<const Rung*> out;
  for (const Rung& r : registry().all())
    if (r.launch_bwd && (!only || r.number == only)) out.push_back(&r);
  INFO("FL_TEST_RUNG=" << (env ? env : "(unset)"));
  if (only) REQUIRE(!out.empty());  // ctest names a rung it built: it must have backward entries
  if (out.empty()) fl_test::skip_whole_test("no backward rung in this build (FL_RUNGS)");
  return out;
}

std::vector<int> head_dims_of(const Rung& r) {
  std::vector<int> dims;
  for (int d : {64, 128, 256})
    if (r.head_dims.empty() || std::find(r.head_dims.begin(), r.head_dims.end(), d) != r.head_dims.end())
      dims.push_back(d);
  return dims;
}

/// One line per gradient: "dQ rel_fro 1.2e-03 / tol 4.0e-03, max_abs ..." for the failure message.
std::string gradient_lines(const CaseResult& res) {
  std::string s;
  const std::pair<const char*, const CheckResult*> tensors[] = {
      {"dQ", &res.bwd.grads.dq}, {"dK", &res.bwd.grads.dk}, {"dV", &res.bwd.grads.dv}};
  for (const auto& [name, c] : tensors) {
    char buf[200];
    std::snprintf(buf, sizeof buf, "\n  %s rel_fro %.2e / tol %.2e, max_abs %.2e / tol %.2e, unwritten %lld", name,
                  c->err.rel_fro, c->tol.rel_fro, c->err.max_abs, c->tol.max_abs, c->unwritten);
    s += buf;
  }
  return s;
}

/// Adds one backward case to @p s: a shape the section spans, which the rung may refuse (counted).
fl_test::Case& add_bwd(Section& s, const Rung& r, const Problem& p, bool deterministic,
                       CheckMode mode = CheckMode::full, unsigned long long seed = 11, bool may_refuse = true) {
  if (!r.not_implemented.empty()) FAIL(r.label() << ": not implemented: " << r.not_implemented);
  fl_test::Case& c = s.add(r, p, may_refuse);
  c.deterministic = deterministic;
  c.mode = mode;
  c.seed = seed;
  return c;
}

/// Section::run's extra checks on a backward case: the three gradients, each named on failure.
void gradients_checked(const fl_test::Case& c, const CaseResult& res) {
  INFO(c.rung->label() << " deterministic=" << c.deterministic << ":" << gradient_lines(res));
  REQUIRE(res.backward);
  CHECK(res.check.pass);
}

/// dQ, dK, dV of one backward launch.
struct Grads {
  std::vector<uint16_t> dq, dk, dv;
  bool operator==(const Grads& o) const { return dq == o.dq && dk == o.dk && dv == o.dv; }
};

Grads download(const DeviceGrads& g) { return {g.download_dq(), g.download_dk(), g.download_dv()}; }

/// The forward pass of @p r once on @p p, as run_bwd_once makes it (D from the fp32 O when the
/// rung's forward writes one): the O and LSE the backward launches read.
std::unique_ptr<DeviceProblem> forward_once(const Rung& r, const Problem& p, const HostInputs& in,
                                            unsigned long long seed) {
  auto dp = std::make_unique<DeviceProblem>(p, in, forward_workspace_bytes(r, p), seed);
  if (r.writes_o_fp32) dp->want_o_fp32();
  dp->poison_outputs();
  launch_once(r, *dp);
  return dp;
}

/// One backward launch of @p r into gradients poisoned with NaN first (workspace included).
Grads backward_once(const Rung& r, DeviceGrads& g) {
  g.poison();
  launch_bwd_once(r, g);
  return download(g);
}

/// Elements whose bits differ.
size_t differing(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b) {
  size_t n = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) n += a[i] != b[i];
  return n;
}

bool is_nan16(uint16_t x, DType t) {
  const uint16_t exp_mask = t == DType::fp16 ? 0x7c00 : 0x7f80;
  const uint16_t man_mask = t == DType::fp16 ? 0x03ff : 0x007f;
  return (x & exp_mask) == exp_mask && (x & man_mask) != 0;
}

}  // namespace

TEST_CASE("backward matrix: dtypes x head_dims x causal x seqlens x MHA/GQA 4:1/MQA", "[gpu][rung11][bwd_matrix]") {
  // Every length appears as seqlen_q and as seqlen_k, paired with a different length both ways,
  // plus once equal; the head layouts rotate over MHA, GQA 4:1 and MQA.
  const int lens[] = {1, 17, 113, 203};
  const int L = 4;
  struct Heads {
    int q, kv;
  };
  const Heads heads[] = {{4, 4}, {8, 2}, {4, 1}};
  for (const Rung* r : backward_rungs()) {
    Section s(r->label() + " backward matrix");
    int k = 0;
    for (DType t : {DType::fp16, DType::bf16})
      for (int d : head_dims_of(*r))
        for (bool causal : {false, true})
          for (int a = 0; a < L; ++a)
            for (int shift : {0, 1, L - 1}) {  // equal, then (a, a+1) and (a, a-1)
              const Heads h = heads[k % 3];
              const Problem p = shape(k % 4 == 0 ? 2 : 1, lens[a], lens[(a + shift) % L], h.q, h.kv, d, causal, t);
              ++k;
              add_bwd(s, *r, p, false, CheckMode::full, 200 + k);
            }
    s.run(gradients_checked);
  }
}

TEST_CASE("backward: the deterministic mode passes the matrix's corners", "[gpu][rung11][bwd_corners]") {
  for (const Rung* r : backward_rungs()) {
    Section s(r->label() + " deterministic corners");
    for (DType t : {DType::fp16, DType::bf16})
      for (int d : head_dims_of(*r))
        for (bool causal : {false, true}) {
          // Tails both ways, GQA 4:1 (dK, dV sum over four query heads) and MQA.
          add_bwd(s, *r, shape(2, 203, 113, 8, 2, d, causal, t), true);
          add_bwd(s, *r, shape(1, 113, 203, 4, 1, d, causal, t), true);
          add_bwd(s, *r, shape(1, 17, 17, 4, 4, d, causal, t), true);
        }
    s.run(gradients_checked);
  }
}

TEST_CASE("backward: rows that see no key get zero dQ and no NaN", "[gpu][rung11][bwd_nokey]") {
  // Causal with seqlen_q > seqlen_k: query i sees keys 0 .. i - (Sq - Sk), so the first Sq - Sk
  // rows see none. Their P is 0: dQ is exactly zero there, and they add nothing to dK, dV.
  for (const Rung* r : backward_rungs()) {
    Section s(r->label() + " rows that see no key");
    for (DType t : {DType::fp16, DType::bf16})
      for (int d : head_dims_of(*r))
        for (bool det : {false, true}) {
          fl_test::Case& c = s.add(*r, shape(2, 203, 77, 4, 2, d, true, t), true);
          c.deterministic = det;
        }
    s.each([&](const fl_test::Case& cs) {
      const Problem& p = cs.p;
      const bool det = cs.deterministic;
      const DType t = p.dtype;
      const int d = p.head_dim;
      const HostInputs in = make_inputs(p, InputKind::random, 5);
      const std::vector<uint16_t> dout = make_grad_output(p, 5);
      DeviceProblem dp(p, in, forward_workspace_bytes(*r, p), 5);
      if (r->writes_o_fp32) dp.want_o_fp32();  // as run_bwd_once: D from the fp32 O
      dp.poison_outputs();
      launch_once(*r, dp);
      DeviceGrads g(p, dp, dout, r->bwd_workspace_bytes ? r->bwd_workspace_bytes(p, det) : 0, det);
      g.poison();
      launch_bwd_once(*r, g);
      const Grads out = download(g);
      INFO(r->label() << " " << p.describe() << " deterministic=" << det);
      const int empty_rows = p.seqlen_q - p.seqlen_k;
      long long nonzero = 0, nan = 0;
      for (int b = 0; b < p.batch; ++b)
        for (int i = 0; i < empty_rows; ++i)
          for (int h = 0; h < p.heads_q; ++h)
            for (int c = 0; c < d; ++c) {
              const uint16_t x = out.dq[((static_cast<size_t>(b) * p.seqlen_q + i) * p.heads_q + h) * d + c];
              nonzero += from_bits(x, t) != 0.0f;  // -0 counts as zero
            }
      for (const auto* v : {&out.dq, &out.dk, &out.dv})
        for (uint16_t x : *v) nan += is_nan16(x, t);
      REQUIRE(nan == 0);
      REQUIRE(nonzero == 0);
      BwdCheck c = check_backward(p, in, dout, out.dq, out.dk, out.dv, CheckMode::full, 5);
      apply_rung_floors(*r, p, &c);
      INFO(c.grads.reason);
      REQUIRE(c.summary.pass);
      return true;
    });
  }
}

TEST_CASE("backward: deterministic=1 gives bitwise identical dQ, dK, dV run to run", "[gpu][rung11][bwd_repeat]") {
  // GQA 4:1 and long enough that many K/V blocks add into each dQ row (and four query heads into
  // each dK, dV row): the sums whose order atomics would change.
  for (const Rung* r : backward_rungs()) {
    Section s(r->label() + " deterministic bitwise repeat");
    for (DType t : {DType::fp16, DType::bf16})
      for (int d : head_dims_of(*r))
        for (bool causal : {false, true}) {
          fl_test::Case& c = s.add(*r, shape(2, 1000, 1000, 8, 2, d, causal, t), true);
          c.deterministic = true;
        }
    s.each([&](const fl_test::Case& cs) {
      const Problem& p = cs.p;
      const bool causal = p.causal;
      const DType t = p.dtype;
      const int d = p.head_dim;
      INFO(r->label() << " " << p.describe());
      const HostInputs in = make_inputs(p, InputKind::random, 17);
      const std::vector<uint16_t> dout = make_grad_output(p, 17);
      const auto dp_owner = forward_once(*r, p, in, 17);
      const DeviceProblem& dp = *dp_owner;
      const size_t ws = r->bwd_workspace_bytes ? r->bwd_workspace_bytes(p, true) : 0;
      DeviceGrads g(p, dp, dout, ws, true);
      const Grads first = backward_once(*r, g);
      const Grads second = backward_once(*r, g);  // from NaN again, workspace included
      DeviceGrads fresh(p, dp, dout, ws, true);  // other buffers: no dependence on their addresses
      const Grads third = backward_once(*r, fresh);
      INFO("differing elements: dQ " << differing(first.dq, second.dq) << ", dK " << differing(first.dk, second.dk)
                                     << ", dV " << differing(first.dv, second.dv) << "; fresh buffers: dQ "
                                     << differing(first.dq, third.dq));
      REQUIRE(first == second);
      REQUIRE(first == third);
      BwdCheck c = check_backward(p, in, dout, first.dq, first.dk, first.dv, CheckMode::auto_, 17);
      apply_rung_floors(*r, p, &c);
      INFO(c.grads.reason);
      REQUIRE(c.summary.pass);
      if (t == DType::fp16 && d == head_dims_of(*r).front() && !causal) {
        // For information: how much the default (atomic) mode varies on this shape.
        DeviceGrads atomic(p, dp, dout, r->bwd_workspace_bytes ? r->bwd_workspace_bytes(p, false) : 0, false);
        atomic.poison();
        launch_bwd_once(*r, atomic);
        const Grads a1 = download(atomic);
        launch_bwd_once(*r, atomic);
        const Grads a2 = download(atomic);
        WARN(r->label() << " deterministic=0 on " << p.describe() << ": " << differing(a1.dq, a2.dq)
                        << " of " << a1.dq.size() << " dQ elements differ between two runs");
      }
      return true;
    });
  }
}

TEST_CASE("backward: a few queries against many keys (seqlen_q << seqlen_k), GQA groups split over blocks",
          "[gpu][rung11][bwd_fewq]") {
  // The shape class of a decode-time or prefix-tuning gradient: one to 16 queries against a long
  // context. Two things go wrong there if nothing guards them: the grid is small, so the GQA
  // group is split over blocks (fp32 partial dK, dV added by bwd_convert_kv), and a row sees so
  // many keys that D taken from the forward's O no longer leaves dQ within the check (kernel.cuh,
  // "D's precision"; delta_policy.h). Every backward entry runs the small-grid shapes; the long
  // rows run on the main entries (the exact D pass) and the exact-delta variant, and on the
  // o16-delta and o32-delta ablations to show what the exact pass buys.
  struct Case {
    Problem p;
    bool long_rows;
  };
  const Case cases[] = {
      {shape(1, 1, 100003, 32, 8, 128, false, DType::fp16), true},  // the shape that failed (GQA 4:1)
      {shape(1, 1, 100003, 32, 8, 128, false, DType::bf16), true},
      {shape(1, 4, 65537, 16, 2, 64, true, DType::fp16), true},      // speculative rows, causal, GQA 8:1
      {shape(1, 1, 4000, 16, 2, 128, false, DType::fp16), false},    // 64 blocks: the group split 4 ways
      {shape(2, 3, 2999, 8, 1, 64, true, DType::bf16), false},       // MQA, causal, split
      {shape(1, 16, 1537, 32, 4, 128, true, DType::bf16), false},
      {shape(3, 1, 777, 8, 2, 64, false, DType::fp16), false},
      {shape(1, 3, 5000, 16, 2, 256, true, DType::bf16), false},     // d = 256: 64-key blocks, split
  };
  for (const Rung* r : backward_rungs()) {
    Section s(r->label() + " few queries, many keys");
    Section against(r->label() + " D from O against the rung's exact D");  // the ablations' long rows
    const bool ablation = r->variant == "o16-delta" || r->variant == "o32-delta";
    for (const Case& c : cases) {
      // Long rows: the rungs' own entries (rung 16's backward, an entry of its own, takes D from
      // the fp32 O on every row: checked here too), not their other ablations.
      if (c.long_rows && !r->variant.empty() && !ablation && r->variant != "exact-delta" && !r->mods) continue;
      if (ablation && c.long_rows) {
        against.add(*r, c.p, true);
        continue;
      }
      add_bwd(s, *r, c.p, false, CheckMode::full, 31);
      if (c.long_rows && r->variant.empty()) add_bwd(s, *r, c.p, true, CheckMode::full, 31);  // deterministic
    }
    s.run(gradients_checked);
    if (!ablation) continue;
    against.each([&](const fl_test::Case& c) {
      // D from the forward's O: the check may pass or not; dQ is measurably worse than the rung's.
      const Rung* main = registry().find(r->number);
      REQUIRE(main != nullptr);
      const CaseResult got = run_bwd_case(*r, c.p, InputKind::random, CheckMode::full, 31, false);
      const CaseResult rung = run_bwd_case(*main, c.p, InputKind::random, CheckMode::full, 31, false);
      INFO(main->label() << ": " << (rung.ran ? rung.check.reason : "not run: " + rung.skipped));
      REQUIRE(rung.ran);  // the rung takes every shape its ablation takes
      if (!got.ran) return false;
      WARN(r->label() << " " << c.p.describe() << ": dQ rel_fro " << got.bwd.grads.dq.err.rel_fro << " (pass "
                      << got.check.pass << "); the rung's (exact D) " << rung.bwd.grads.dq.err.rel_fro
                      << ", tolerance " << rung.bwd.grads.dq.tol.rel_fro);
      REQUIRE(rung.check.pass);
      REQUIRE(got.bwd.grads.dq.err.rel_fro > 2 * rung.bwd.grads.dq.err.rel_fro);
      return true;
    });
  }
}

TEST_CASE("backward: a larger problem, checked on sampled (batch, KV head) groups", "[gpu][rung11][bwd_large]") {
  // B x Hq x Sq x Sk x d = 1.7e10 is above kBwdCheckWork: --check auto compares the first and the
  // last (batch, KV head) group (each group's gradients are exact on their own), and looks for
  // NaN in all of dQ, dK, dV.
  for (const Rung* r : backward_rungs()) {
    Section s(r->label() + " a larger problem, sampled");
    for (bool causal : {false, true})
      add_bwd(s, *r, shape(2, 2048, 2048, 16, 4, head_dims_of(*r).back(), causal, DType::fp16), false,
              CheckMode::auto_, 23);
    s.run([](const fl_test::Case& c, const CaseResult& res) {
      gradients_checked(c, res);
      REQUIRE(res.check.mode == "sample");
      REQUIRE(res.bwd.groups >= 2);
      REQUIRE(res.bwd.groups < res.bwd.groups_total);
    });
  }
}

// ---- packed batches (rungs with Rung::varlen: rung 14) ------------------------------------------

namespace {

/// A packed problem of these lengths (@p lk empty: the same as @p lq).
Problem packed_bwd(const std::vector<int>& lq, const std::vector<int>& lk, int hq, int hkv, int d, bool causal,
                   DType t) {
  Problem p = shape(1, 1, 1, hq, hkv, d, causal, t);
  set_varlen(&p, lq, lk);
  return p;
}

/// The backward entries that take packed batches (Rung::varlen); none: the test is skipped (exit
/// 77, the reason printed), not passed with nothing run.
std::vector<const Rung*> varlen_backward_rungs(bool main_only) {
  std::vector<const Rung*> out;
  for (const Rung* r : backward_rungs())
    if (r->varlen && (!main_only || r->variant.empty())) out.push_back(r);
  if (out.empty()) fl_test::skip_whole_test("no backward entry here takes packed batches (Rung::varlen)");
  return out;
}

}  // namespace

TEST_CASE("backward: packed batches (lengths of 1, empty sequences, tails, seqlen_q != seqlen_k, GQA)",
          "[gpu][rung11][bwd_packed]") {
  // Every backward entry that takes packed batches (each of rung 14's variants), against the fp64
  // backward reference on the same packed description; the others refuse with one line.
  const std::vector<std::pair<std::vector<int>, std::vector<int>>> batches = {
      {{1, 0, 130, 77, 256, 3}, {}},                        // self-attention lengths, an empty one
      {{5, 200, 1, 64, 0, 129}, {300, 100, 1, 0, 7, 129}},  // q != k both ways, a sequence with no key
      {{333}, {1000}},                                      // one sequence, more keys than queries
  };
  // The rung on every case; a variant (one idea turned off) on the second batch, causal and not,
  // at each of its head_dims in bf16.
  const DeviceInfo dev = query_device();
  for (const Rung* r : backward_rungs()) {
    Section s(r->label() + " packed batches");  // a rung that takes them refuses none
    const bool main = r->variant.empty();
    for (size_t bi = main ? 0 : 1; bi < (main ? batches.size() : 2); ++bi)
      for (int d : head_dims_of(*r))
        for (bool causal : {false, true})
          for (DType t : {DType::fp16, DType::bf16}) {
            if (!main && t == DType::fp16) continue;
            const auto& [lq, lk] = batches[bi];
            const Problem p = packed_bwd(lq, lk, 8, 2, d, causal, t);
            if (!r->varlen) {
              CHECK(supports(*r, p, dev).find("variable-length") != std::string::npos);
              continue;
            }
            add_bwd(s, *r, p, false, CheckMode::full, 11, false);
          }
    if (r->varlen) s.run(gradients_checked);
  }
}

TEST_CASE("backward: a packed batch in the deterministic mode repeats bit for bit and passes",
          "[gpu][rung11][bwd_packed_repeat]") {
  // Sequences of different K/V block counts: the per-sequence counters, from the last block down
  // under the mask; MQA and GQA 4:1 (a split group's partial sums).
  for (const Rung* r : varlen_backward_rungs(false)) {
    Section s(r->label() + " packed, deterministic bitwise repeat");  // 4 cases, none refused
    for (int hkv : {1, 2})
      for (bool causal : {false, true})
        s.add(*r, packed_bwd({700, 1, 300, 0, 129}, {900, 5, 300, 40, 128}, 8, hkv, 128, causal, DType::bf16))
            .deterministic = true;
    s.each([&](const fl_test::Case& cs) {
      const Problem& p = cs.p;
      INFO(r->label() << " " << p.describe());
      const HostInputs in = make_inputs(p, InputKind::random, 23);
      const std::vector<uint16_t> dout = make_grad_output(p, 23);
      const auto dp = forward_once(*r, p, in, 23);
      DeviceGrads g(p, *dp, dout, r->bwd_workspace_bytes ? r->bwd_workspace_bytes(p, true) : 0, true);
      const Grads first = backward_once(*r, g);
      const Grads second = backward_once(*r, g);
      INFO("differing elements: dQ " << differing(first.dq, second.dq) << ", dK " << differing(first.dk, second.dk)
                                     << ", dV " << differing(first.dv, second.dv));
      REQUIRE(first == second);
      BwdCheck c = check_backward(p, in, dout, first.dq, first.dk, first.dv, CheckMode::full, 23);
      apply_rung_floors(*r, p, &c);
      INFO(c.grads.reason);
      REQUIRE(c.summary.pass);
      return true;
    });
  }
}

TEST_CASE("backward: a mixed packed batch longer than one wave, sampled check; no key or no query anywhere",
          "[gpu][rung11][bwd_wave]") {
  for (const Rung* r : varlen_backward_rungs(true)) {  // the rung itself (its variants ran above)
    Section s(r->label() + " a mixed packed batch; no key or no query anywhere");  // 5 cases, none refused
    // 24 sequences of 1 to 3000 tokens, Llama-style GQA 32/8, causal: many K/V blocks per sequence.
    const std::vector<int> lens = mixed_lengths(24, 1, 3000, 5);
    for (DType t : {DType::fp16, DType::bf16})
      add_bwd(s, *r, packed_bwd(lens, {}, 32, 8, 128, true, t), false, CheckMode::auto_, 11, false);
    // No key anywhere: O = 0, so dQ = dK = dV = 0 (no K/V row exists); no query anywhere: dK = dV = 0.
    add_bwd(s, *r, packed_bwd({3, 130, 1}, {0, 0, 0}, 8, 2, 64, false, DType::fp16), false, CheckMode::full, 11, false);
    add_bwd(s, *r, packed_bwd({0, 0, 0}, {3, 130, 1}, 8, 2, 64, true, DType::fp16), false, CheckMode::full, 11, false);
    add_bwd(s, *r, packed_bwd({0, 0}, {0, 0}, 8, 2, 128, true, DType::bf16), false, CheckMode::full, 11, false);
    s.run(gradients_checked);
    CHECK(s.cases().size() == 5);
  }
}
