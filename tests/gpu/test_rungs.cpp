// The GPU matrix every rung must pass, against the fp64 reference.
// ctest runs it once per rung with FL_TEST_RUNG=<number> (tests/CMakeLists.txt).
// A backward rung (Rung::launch_bwd: 11) goes through the same cases: run_case checks its
// dQ, dK, dV against the fp64 backward reference (run_bwd_case; the identity input is skipped
// there, see runner.h), so nothing here runs its `launch` (another rung's forward) as its own.
// The matrix spans shapes a rung may refuse (decode rungs, head_dims): those are counted; every
// case supports() accepts must run, and at least one per rung (expected_runs.h). A rung this GPU
// cannot run at all (rungs 09, 10, 13-16 off sm_90) skips the test.
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "catch_compat.h"
#include "expected_runs.h"
#include "flashladder/runner.h"

using namespace fl;

namespace {

/// The rungs under test: FL_TEST_RUNG=<n>, or every main rung.
std::vector<const Rung*> rungs_under_test(bool with_variants) {
  std::vector<const Rung*> out;
  const char* env = std::getenv("FL_TEST_RUNG");
  const int only = env ? std::atoi(env) : 0;
  for (const Rung& r : registry().all()) {
    if (only && r.number != only) continue;
    if (r.variant.empty() != !with_variants) continue;
    out.push_back(&r);
  }
  return out;
}

/// Decode rungs (Rung::decode: 08) take at most 16 query rows, so their shapes differ.
bool is_decode_rung(const Rung& r) { return r.decode; }

/// MLA's rung (17) takes one shape family only: heads over one latent cache (head_dim 576, V its
/// first 512 columns); the matrix and the diagnostic inputs give it that family.
bool is_mla_rung(const Rung& r) { return r.head_dims.size() == 1 && r.head_dims[0] == kMlaHeadDim; }

/// The head_dims a rung's cases take: those of 32, 64, 128 and 256 it claims (none claimed: up to
/// 128); where it claims none of them, its own (an ablation of one tile: rung 16's mla-on-d256 at
/// 192, V's head_dim set by its study_problem). MLA's rung takes its own family (is_mla_rung).
std::vector<int> head_dims_of(const Rung& r) {
  std::vector<int> dims;
  for (int d : {32, 64, 128, 256})
    if ((r.head_dims.empty() && d <= 128) || std::find(r.head_dims.begin(), r.head_dims.end(), d) != r.head_dims.end())
      dims.push_back(d);
  if (dims.empty() && !is_mla_rung(r)) dims = r.head_dims;
  return dims;
}

/// Adds one case of the shared matrix to @p s: a shape the rung may refuse (counted, not failed).
void add_case(fl_test::Section& s, const Rung& r, const Problem& p, InputKind input, unsigned long long seed) {
  if (!r.not_implemented.empty()) FAIL(r.label() << ": not implemented: " << r.not_implemented);
  fl_test::Case& c = s.add(r, p, true);
  c.input = input;
  c.seed = seed;
}

}  // namespace

TEST_CASE("matrix: dtypes x causal x seqlens x GQA/MQA x head_dims", "[gpu][matrix]") {
  // Every length appears as seqlen_q and as seqlen_k, paired with a different
  // length both ways, plus once equal; head layouts rotate over MHA, GQA 8:1, MQA.
  const int lens[] = {1, 17, 113, 203, 257, 1000};
  const int L = 6;
  struct Heads {
    int q, kv;
  };
  const Heads heads[] = {{4, 4}, {16, 2}, {4, 1}};  // MHA, GQA 8:1, MQA
  const auto rungs = rungs_under_test(false);
  REQUIRE(!rungs.empty());
  for (const Rung* r : rungs) {
    fl_test::Section s(r->label() + (r->launch_bwd ? " backward" : "") + " matrix");
    int k = 0;
    if (is_mla_rung(*r)) {  // every length as seqlen_k, heads 16-128, seqlen_q 1-4, paged or not
      const int mla_heads[] = {16, 32, 64, 128, 24};
      for (DType t : {DType::fp16, DType::bf16})
        for (bool causal : {false, true})
          for (int a = 0; a < L; ++a) {
            Problem p = mla_problem(k % 3 == 0 ? 2 : 1, 1 + k % 4, lens[a], mla_heads[k % 5], t, causal);
            p.page_size = (k % 2 == 1) ? 64 : 0;
            ++k;
            add_case(s, *r, p, InputKind::random, 100 + k);
          }
      s.run();
      continue;
    }
    for (DType t : {DType::fp16, DType::bf16})
      for (bool causal : {false, true})
        for (int d : head_dims_of(*r))
          for (int a = 0; a < L; ++a)
            for (int shift : {0, 1, L - 1}) {  // equal, then (a, a+1) and (a, a-1)
              Problem p;
              p.batch = (k % 4 == 0) ? 2 : 1;
              p.seqlen_q = lens[a];
              p.seqlen_k = lens[(a + shift) % L];
              p.heads_q = heads[k % 3].q;
              p.heads_kv = heads[k % 3].kv;
              p.head_dim = d;
              p.dtype = t;
              p.causal = causal;
              ++k;
              add_case(s, *r, p, InputKind::random, 100 + k);
            }
    s.run();
  }
}

TEST_CASE("diagnostic inputs: ones, identity-like Q/K, V ramp", "[gpu][diagnostic]") {
  const auto rungs = rungs_under_test(false);
  REQUIRE(!rungs.empty());
  for (const Rung* r : rungs) {
    fl_test::Section s(r->label() + " diagnostic inputs");
    if (is_mla_rung(*r)) {
      for (InputKind in : {InputKind::ones, InputKind::identity, InputKind::ramp})
        for (DType t : {DType::fp16, DType::bf16}) add_case(s, *r, mla_problem(1, 2, 200, 16, t, t == DType::bf16), in, 7);
      s.run();
      continue;
    }
    for (InputKind in : {InputKind::ones, InputKind::identity, InputKind::ramp})
      for (DType t : {DType::fp16, DType::bf16})
        for (int d : head_dims_of(*r)) {
          Problem p;
          p.batch = 1;
          p.seqlen_q = is_decode_rung(*r) ? 4 : 130;
          p.seqlen_k = 200;
          p.heads_q = 4;
          p.heads_kv = 2;
          p.head_dim = d;
          p.dtype = t;
          p.causal = (d == 64);
          add_case(s, *r, p, in, 7);
        }
    s.run();
  }
}

TEST_CASE("variants (ablations, sweep points) pass a small matrix", "[gpu][matrix]") {
  const auto variants = rungs_under_test(true);
  for (const Rung* r : variants) {
    fl_test::Section s(r->label() + " small matrix");
    for (DType t : {DType::fp16, DType::bf16})
      for (bool causal : {false, true})
        for (int d : head_dims_of(*r)) {
          Problem p;
          p.batch = 2;
          p.seqlen_q = is_decode_rung(*r) ? 5 : 203;
          p.seqlen_k = causal ? 257 : 113;
          p.heads_q = 4;
          p.heads_kv = 1;
          p.head_dim = d;
          p.dtype = t;
          p.causal = causal;
          if (r->study_problem) r->study_problem(p);
          add_case(s, *r, p, InputKind::random, 3);
        }
    s.run();
  }
  WARN(variants.size() << " variants tested");
}

TEST_CASE("the fp32 O: a forward that writes it writes all of it, and it rounds to the 16-bit O", "[gpu][matrix]") {
  // Rung::writes_o_fp32 forwards fill AttnParams::o_fp32 (O before its rounding, for a backward
  // pass's D). Every element is written (poisoned first), and rounding it gives the 16-bit O bit
  // for bit; rows that see no key (causal, seqlen_q > seqlen_k) are 0 in both.
  // The rungs under test that write no fp32 O list no case here (rung 01, say): may_be_empty.
  fl_test::Section s("the fp32 O", true);
  for (const Rung* r : rungs_under_test(false)) {
    if (!r->writes_o_fp32 || r->launch_bwd) continue;  // a backward rung's launch is another rung's
    for (DType t : {DType::fp16, DType::bf16})
      for (int d : head_dims_of(*r))
        for (bool causal : {false, true}) {
          s.add(*r, [&] {
            Problem q;
            q.batch = 2;
            q.seqlen_q = causal ? 203 : 113;
            q.seqlen_k = causal ? 77 : 203;
            q.heads_q = 8;
            q.heads_kv = 2;
            q.head_dim = d;
            q.dtype = t;
            q.causal = causal;
            return q;
          }(), true);
        }
  }
  s.each([](const fl_test::Case& c) {
    const Rung* r = c.rung;
    const Problem& p = c.p;
    const DType t = p.dtype;
    INFO(r->label() << " " << p.describe());
    const HostInputs in = make_inputs(p, InputKind::random, 19);
    DeviceProblem dp(p, in, r->workspace_bytes ? r->workspace_bytes(p) : 0, 19);
    dp.want_o_fp32();
    dp.poison_outputs();
    launch_once(*r, dp);
    const std::vector<uint16_t> o = dp.download_o();
    const std::vector<float> o32 = dp.download_o_fp32();
    REQUIRE(o32.size() == o.size());
    size_t nan = 0, differ = 0;
    for (size_t i = 0; i < o.size(); ++i) {
      nan += std::isnan(o32[i]) ? 1 : 0;
      differ += to_bits(o32[i], t) != o[i] ? 1 : 0;
    }
    REQUIRE(nan == 0);
    REQUIRE(differ == 0);
    REQUIRE(check_output(p, in, o, dp.download_lse(), CheckMode::full, 19).pass);
    return true;
  });
}

TEST_CASE("harness: poison is detected, memory refusal, exit paths", "[gpu][harness]") {
  const Rung* naive = registry().find(1);
  REQUIRE(naive != nullptr);
  Problem p;
  p.batch = 1;
  p.seqlen_q = p.seqlen_k = 64;
  p.heads_q = p.heads_kv = 2;
  p.head_dim = 32;
  const HostInputs in = make_inputs(p, InputKind::random, 1);
  DeviceProblem dp(p, in, naive->workspace_bytes(p));
  dp.poison_outputs();
  // Not launched: every element is still NaN and the check must say so.
  const CheckResult before = check_output(p, in, dp.download_o(), dp.download_lse(), CheckMode::full, 1);
  REQUIRE_FALSE(before.pass);
  REQUIRE(before.unwritten == static_cast<long long>(64 * 2 * 32 + 2 * 64));
  launch_once(*naive, dp);
  REQUIRE(check_output(p, in, dp.download_o(), dp.download_lse(), CheckMode::full, 1).pass);
  // Rung 01 refuses (before allocating) a problem whose S cannot fit.
  Problem huge = p;
  huge.batch = 64;
  huge.heads_q = huge.heads_kv = 32;
  huge.seqlen_q = huge.seqlen_k = 32768;  // S = 8 TiB
  const CaseResult res = run_case(*naive, huge, InputKind::random, CheckMode::none, 1);
  REQUIRE_FALSE(res.ran);
  REQUIRE(res.skipped.find("GPU memory") != std::string::npos);
}
