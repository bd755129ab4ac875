// Rung 08 (Flash-Decoding) on the GPU, beyond the shared matrix: explicit
// split counts, long KV, GQA ratios with seqlen_q 1..16, rows that see no key,
// the paged KV cache against the contiguous layout, and the FP8 cache (`fp8-kv`).
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "catch_compat.h"
#include "expected_runs.h"
#include "rung_runs.h"
#include "flashladder/cuda_check.h"
#include "flashladder/device_problem.h"
#include "flashladder/runner.h"
#include "flashladder/timing.h"

using namespace fl;

namespace {

const Rung& rung08() {
  const Rung* r = registry().find(8);
  REQUIRE(r != nullptr);
  return *r;
}

Problem decode_problem(int batch, int heads_q, int heads_kv, int seqlen_q, int seqlen_k, int dim,
                       DType t, bool causal, int splits, int page = 0) {
  Problem p;
  p.batch = batch;
  p.heads_q = heads_q;
  p.heads_kv = heads_kv;
  p.seqlen_q = seqlen_q;
  p.seqlen_k = seqlen_k;
  p.head_dim = dim;
  p.dtype = t;
  p.causal = causal;
  p.num_splits = splits;
  p.page_size = page;
  return p;
}

/// Runs @p p on rung 08 against the fp64 reference and requires a pass (rung_runs.h).
void expect_pass(const Problem& p, CheckMode mode = CheckMode::full, unsigned long long seed = 8) {
  fl_test::expect_pass(rung08(), p, mode, seed);
}

using fl_test::Outputs;
Outputs run_once(const Problem& p, const HostInputs& in, unsigned long long seed) {
  return fl_test::run_once(rung08(), p, in, seed);
}

}  // namespace

TEST_CASE("rung 08: split counts x seqlen_k", "[gpu][rung08]") {
  // 300: more splits than the heuristic ever picks, most shorter than one
  // warp's chunk (so some warps of a CTA see no key), combined by one CTA per row.
  int k = 0;
  for (int sk : {1, 257, 1000, 4097})
    for (int splits : {1, 2, 3, 7, 300, 0}) {  // 0 = heuristic
      const DType t = (k++ % 2) ? DType::bf16 : DType::fp16;
      expect_pass(decode_problem(2, 8, 2, 1, sk, 128, t, false, splits));
    }
}

TEST_CASE("rung 08: long KV (65537 keys), sampled check", "[gpu][rung08]") {
  expect_pass(decode_problem(1, 32, 8, 1, 65537, 128, DType::fp16, false, 0), CheckMode::sample);
  expect_pass(decode_problem(1, 32, 8, 1, 65537, 128, DType::bf16, false, 7), CheckMode::sample);
  expect_pass(decode_problem(1, 32, 8, 4, 65537, 128, DType::fp16, true, 0), CheckMode::sample);
  expect_pass(decode_problem(1, 8, 1, 16, 65537, 64, DType::bf16, true, 0), CheckMode::sample);
}

TEST_CASE("rung 08: GQA 1:1, 4:1, 8:1, MQA x seqlen_q 1..16 x causal", "[gpu][rung08]") {
  struct Heads {
    int q, kv;
  };
  const Heads heads[] = {{8, 8}, {8, 2}, {16, 2}, {16, 1}};
  int k = 0;
  for (const Heads& h : heads)
    for (int sq : {1, 3, 16})
      for (bool causal : {false, true}) {
        const DType t = (k % 2) ? DType::bf16 : DType::fp16;
        const int d = (k / 2 % 2) ? 64 : 128;
        const int splits = (k % 3 == 0) ? 3 : 0;
        ++k;
        expect_pass(decode_problem(2, h.q, h.kv, sq, 1000, d, t, causal, splits));
      }
}

TEST_CASE("rung 08: rows that see no key (causal, seqlen_q > seqlen_k)", "[gpu][rung08]") {
  // Query i sees keys j <= i + seqlen_k - seqlen_q: with 16 queries and 1 or 7
  // keys the first rows see nothing and must give O = 0, LSE = -inf.
  for (int sk : {1, 7})
    for (int splits : {1, 3, 0}) {
      expect_pass(decode_problem(2, 4, 1, 16, sk, 128, DType::fp16, true, splits));
      expect_pass(decode_problem(1, 8, 8, 16, sk, 64, DType::bf16, true, splits));
    }
}

TEST_CASE("rung 08: paged KV cache equals the contiguous layout", "[gpu][rung08]") {
  int k = 0;
  for (int page : {16, 64, 256})
    for (int sk : {1000, 4097})
      for (int splits : {0, 3}) {
        const int sq = (k % 2) ? 4 : 1;
        const DType t = (k / 2 % 2) ? DType::bf16 : DType::fp16;
        ++k;
        const Problem contiguous = decode_problem(3, 8, 2, sq, sk, 128, t, sq > 1, splits);
        Problem paged = contiguous;
        paged.page_size = page;
        const HostInputs in = make_inputs(contiguous, InputKind::random, 21);
        const Outputs a = run_once(contiguous, in, 21);
        const Outputs b = run_once(paged, in, 21);
        INFO(paged.describe());
        // Same values, same order of arithmetic: the block table only moves rows.
        REQUIRE(a.o.size() == b.o.size());
        REQUIRE(std::memcmp(a.o.data(), b.o.data(), a.o.size() * sizeof(uint16_t)) == 0);
        REQUIRE(a.lse.size() == b.lse.size());
        REQUIRE(std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * sizeof(float)) == 0);
      }
  // And a paged run on its own against the reference.
  for (int page : {16, 64, 256})
    expect_pass(decode_problem(2, 16, 2, 2, 777, 128, DType::fp16, true, 0, page));
}

TEST_CASE("rung 08: one split, several splits and the heuristic agree", "[gpu][rung08]") {
  const Problem base = decode_problem(1, 32, 8, 1, 8192, 128, DType::fp16, false, 1);
  const HostInputs in = make_inputs(base, InputKind::random, 5);
  const Outputs one = run_once(base, in, 5);
  for (int splits : {2, 7, 0}) {
    Problem p = base;
    p.num_splits = splits;
    const Outputs many = run_once(p, in, 5);
    double max_o = 0, max_lse = 0;
    for (size_t e = 0; e < one.o.size(); ++e)
      max_o = std::max(
          max_o, std::abs(double(from_bits(one.o[e], p.dtype)) - from_bits(many.o[e], p.dtype)));
    for (size_t e = 0; e < one.lse.size(); ++e)
      max_lse = std::max(max_lse, std::abs(double(one.lse[e]) - many.lse[e]));
    INFO("splits " << splits << ": max |dO| " << max_o << ", max |dLSE| " << max_lse);
    CHECK(max_o <= 2e-3);  // a couple of fp16 ulps at |O| ~ 0.5
    CHECK(max_lse <= 1e-4);
  }
}

TEST_CASE("rung 08: the fused merge (split counters) equals kernel 2 bit for bit", "[gpu][rung08]") {
  // AttnParams::split_counters (the package's prepared cache call): kernel 1's last CTA of each
  // tile merges the splits with kernel 2's code, so O and LSE are kernel 2's to the bit; the
  // counters are back at zero after each launch (a second launch on them, unzeroed, agrees too).
  // Contiguous and paged, per-sequence lengths with a sequence of no key, GQA and MQA, decode and
  // speculative rows, d = 64 and 128, fp16 and bf16, split counts from 2 to 300.
  int k = 0;
  for (int page : {0, 64})
    for (int splits : {2, 7, 300, 0})
      for (int sq : {1, 4}) {
        const DType t = (k++ % 2) ? DType::bf16 : DType::fp16;
        Problem p = decode_problem(3, 16, sq == 1 ? 4 : 1, sq, 2000, (k % 3) ? 128 : 64, t, sq > 1, splits, page);
        p.seqused_k = {2000, 0, 1333};
        const long long n = rung08().split_counters(p);
        INFO("page " << page << ", splits " << splits << ", seqlen_q " << sq << ", " << n << " counters");
        REQUIRE(n > 0);  // every case splits (2000 keys, 3 x heads_kv tiles on any GPU)
        const HostInputs in = make_inputs(p, InputKind::random, 11);
        DeviceProblem dp(p, in, rung08().workspace_bytes(p), 11);
        dp.poison_outputs();
        launch_once(rung08(), dp);
        const std::vector<uint16_t> o2 = dp.download_o();
        const std::vector<float> lse2 = dp.download_lse();
        int* counters = nullptr;
        FL_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&counters), n * sizeof(int)));
        FL_CUDA_CHECK(cudaMemset(counters, 0, n * sizeof(int)));
        AttnParams a = dp.params();
        a.split_counters = counters;
        for (int round = 0; round < 2; ++round) {
          dp.poison_outputs();
          rung08().launch(a, nullptr);
          FL_CUDA_CHECK(cudaDeviceSynchronize());
          CHECK(dp.download_o() == o2);
          CHECK(dp.download_lse() == lse2);
          std::vector<int> left(n, -1);
          FL_CUDA_CHECK(cudaMemcpy(left.data(), counters, n * sizeof(int), cudaMemcpyDeviceToHost));
          CHECK(left == std::vector<int>(n, 0));
        }
        FL_CUDA_CHECK(cudaFree(counters));
        // And the split plan's workspace alone: without counters, O and LSE as before.
        expect_pass(p);
      }
  CHECK(rung08().split_counters(decode_problem(1, 32, 8, 1, 100, 128, DType::fp16, false, 1)) == 0);  // no split
}

TEST_CASE("rung 08: refuses what it cannot do", "[gpu][rung08]") {
  const DeviceInfo dev = query_device();
  const Problem prefill = decode_problem(1, 8, 8, 17, 1024, 128, DType::fp16, false, 0);
  CHECK(supports(rung08(), prefill, dev) == "rung 08 is a decode kernel: seqlen_q must be <= 16");
  const Problem d96 = decode_problem(1, 8, 8, 1, 1024, 96, DType::fp16, false, 0);
  CHECK_FALSE(supports(rung08(), d96, dev).empty());
  const CaseResult res = run_case(rung08(), prefill, InputKind::random, CheckMode::full, 1);
  CHECK_FALSE(res.ran);
}

TEST_CASE("rung 08: a KV cache of per-sequence lengths (seqused_k), contiguous and paged", "[gpu][rung08]") {
  // flash_attn_with_kvcache's cache_seqlens: sequence b sees its first seqused_k[b] slots, its
  // causal diagonal at seqused_k[b] - seqlen_q; 0 keys: O = 0, LSE = -inf.
  for (int page : {0, 64})
    for (int splits : {0, 1, 5})
      for (int sq : {1, 4}) {
        Problem p = decode_problem(4, 16, 4, sq, 3000, 128, sq == 1 ? DType::fp16 : DType::bf16, sq > 1, splits, page);
        p.seqused_k = {3000, 1, 1777, sq == 1 ? 0 : 4};
        expect_pass(p);
      }
  Problem p = decode_problem(3, 8, 1, 1, 70000, 64, DType::bf16, false, 0);
  p.seqused_k = {65536, 70000, 129};
  expect_pass(p, CheckMode::sample);
}

TEST_CASE("rung 08: a left-padded KV cache (seqstart_k), contiguous and paged", "[gpu][rung08]") {
  // flash_attn_with_kvcache's cache_leftpad: sequence b's keys are slots seqstart_k[b] ..
  // seqused_k[b] - 1; the causal diagonal at their end.
  for (int page : {0, 64})
    for (int sq : {1, 4}) {
      Problem p = decode_problem(3, 16, 4, sq, 3000, 128, DType::bf16, sq > 1, 0, page);
      p.seqused_k = {3000, 2500, 3000};
      p.seqstart_k = {0, 1000, 3000 - sq};
      expect_pass(p);
    }
}

TEST_CASE("rung 08 [fp8-kv]: an e4m3 cache against the reference on its values", "[gpu][rung08]") {
  // K and V e4m3 with a descale per (batch, KV head) (the harness's cache mode: fp8_device.h),
  // judged on the values the kernel reads with the FP8 floors (check.h), contiguous and paged:
  // pages of 16 (smaller than a chunk: the cursor across pages) and 64, per-sequence lengths with
  // rows that see no key, decode and speculative causal rows, GQA and MQA, split counts, 64k keys.
  const Rung* f = registry().find(8, "fp8-kv");
  REQUIRE(f != nullptr);
  const std::string gate = fl_test::device_gate(*f, query_device());
  if (!gate.empty()) {
    WARN("not run: " << gate);  // the rest of this binary runs: no skip of the whole test
    return;
  }
  for (int page : {0, 16, 64})
    for (int sq : {1, 4})
      for (DType t : {DType::fp16, DType::bf16}) {
        Problem p = decode_problem(3, 16, 4, sq, 3000, 128, t, sq > 1, 0, page);
        p.seqused_k = {3000, 1, 1777};
        fl_test::expect_pass(*f, p, CheckMode::full, 8);
      }
  for (int splits : {1, 3, 300})
    fl_test::expect_pass(*f, decode_problem(2, 8, 2, 1, 1000, 128, DType::fp16, false, splits), CheckMode::full, 8);
  fl_test::expect_pass(*f, decode_problem(2, 8, 1, 4, 4097, 64, DType::bf16, true, 0, 64), CheckMode::full, 8);
  fl_test::expect_pass(*f, decode_problem(1, 32, 8, 1, 65537, 128, DType::fp16, false, 0), CheckMode::sample, 8);
  // End to end, against fp64 on the 16-bit inputs the cache was made from: within the FP8 floor.
  const CaseResult r =
      run_case(*f, decode_problem(2, 32, 8, 1, 8192, 128, DType::bf16, false, 0), InputKind::random, CheckMode::sample, 9);
  REQUIRE(r.ran);
  REQUIRE(r.fp8);
  INFO("end-to-end rel_fro " << r.fp8_e2e.rel_fro);
  CHECK(r.fp8_e2e.rel_fro < 0x1p-5);
}
