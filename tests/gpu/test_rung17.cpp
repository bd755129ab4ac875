// Rung 17 (MLA decode) on the GPU, beyond the shared matrix and the graded parts: every head
// count with speculative rows, per-sequence cache lengths (0 and 1 key among them), the paged
// cache bit for bit against the contiguous one, splits that start inside a page, NaN in the
// pool's unused rows, 64k+ keys, and what it refuses.
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "catch_compat.h"
#include "rung_runs.h"
#include "flashladder/cases.h"
#include "flashladder/runner.h"
#include "flashladder/timing.h"

using namespace fl;

namespace {

const Rung& rung17() {
  const Rung* r = registry().find(17);
  REQUIRE(r != nullptr);
  return *r;
}

/// Skips the test (exit 77 through the harness's gate) where rung 17 cannot run at all.
bool runs_here() {
  const DeviceInfo dev = query_device();
  const Problem p = mla_problem(1, 1, 64, 16, DType::bf16, false);
  const std::string why = supports(rung17(), p, dev);
  if (!why.empty()) {
    WARN("rung 17 does not run here: " << why);
    return false;
  }
  return true;
}

Problem mla(int batch, int heads, int seqlen_q, int seqlen_k, DType t, bool causal, int page = 0, int splits = 0) {
  Problem p = mla_problem(batch, seqlen_q, seqlen_k, heads, t, causal);
  p.page_size = page;
  p.num_splits = splits;
  return p;
}

/// Runs @p p on rung 17 against the fp64 reference and requires a pass (rung_runs.h).
void expect_pass(const Problem& p, CheckMode mode = CheckMode::full, unsigned long long seed = 17) {
  fl_test::expect_pass(rung17(), p, mode, seed);
}

using fl_test::Outputs;
Outputs run_once(const Problem& p, const HostInputs& in, unsigned long long seed) {
  return fl_test::run_once(rung17(), p, in, seed);
}

}  // namespace

TEST_CASE("rung 17: heads 16-128 x seqlen_q 1-4 x causal x dtype, contiguous and paged", "[gpu][rung17]") {
  if (!runs_here()) return;
  int k = 0;
  for (int heads : {16, 32, 64, 128})
    for (int sq : {1, 2, 4})
      for (bool causal : {false, true}) {
        if (sq == 1 && causal) continue;  // one row: the mask is the whole cache
        const DType t = (k % 2) ? DType::bf16 : DType::fp16;
        expect_pass(mla(1 + k % 2, heads, sq, 100 + 331 * (k % 5), t, causal, (k % 3 == 0) ? 64 : 0));
        ++k;
      }
}

TEST_CASE("rung 17: per-sequence cache lengths (cache_seqlens): 0, 1 and a tail of each block", "[gpu][rung17]") {
  if (!runs_here()) return;
  for (int page : {0, 64, 128})
    for (int splits : {0, 1, 5}) {
      Problem p = mla(4, 32, 2, 3000, page == 64 ? DType::bf16 : DType::fp16, true, page, splits);
      p.seqused_k = {3000, 1, 1777, 0};
      expect_pass(p);
    }
}

TEST_CASE("rung 17: the paged cache gives the contiguous cache's O bit for bit", "[gpu][rung17]") {
  if (!runs_here()) return;
  for (int splits : {1, 4}) {
    const Problem flat = mla(3, 64, 2, 1000, DType::bf16, true, 0, splits);
    Problem paged = flat;
    paged.page_size = 64;
    const HostInputs in = make_inputs(flat, InputKind::random, 5);
    const Outputs a = run_once(flat, in, 5), b = run_once(paged, in, 5);
    REQUIRE(a.o.size() == b.o.size());
    CHECK(std::memcmp(a.o.data(), b.o.data(), a.o.size() * 2) == 0);
    CHECK(std::memcmp(a.lse.data(), b.lse.data(), a.lse.size() * 4) == 0);
  }
}

TEST_CASE("rung 17: NaN in the cache's rows past each sequence's length is never read into O", "[gpu][rung17]") {
  if (!runs_here()) return;
  // A pool allocated with torch.empty holds anything past a sequence's keys; P is 0 there, and
  // 0 x NaN would still be NaN if those rows of V reached the tensor cores.
  for (int page : {0, 64}) {
    Problem p = mla(2, 16, 1, 700, DType::bf16, false, page);
    p.seqused_k = {650, 33};
    HostInputs in = make_inputs(p, InputKind::random, 9);
    const uint16_t nan_bits = 0x7fc0;  // a bf16 NaN
    for (int b = 0; b < p.batch; ++b)
      for (int j = p.seqused_k[b]; j < p.seqlen_k; ++j) {
        const size_t row = static_cast<size_t>(b) * p.seqlen_k + j;
        std::fill_n(in.k.begin() + row * kMlaHeadDim, kMlaHeadDim, nan_bits);
        std::fill_n(in.v.begin() + row * kMlaHeadDimV, kMlaHeadDimV, nan_bits);
      }
    const Rung& r = rung17();
    DeviceProblem dp(p, in, r.workspace_bytes(p), 9);
    dp.poison_outputs();
    launch_once(r, dp);
    const CheckResult c = check_forward(p, in, dp, CheckMode::full, 9, nullptr);
    INFO(p.describe() << ": " << c.reason);
    CHECK(c.pass);
    CHECK(c.unwritten == 0);
  }
}

TEST_CASE("rung 17: splits forced, and splits that start inside a page", "[gpu][rung17]") {
  if (!runs_here()) return;
  for (int splits : {1, 2, 7, 300}) expect_pass(mla(1, 64, 1, 3000, DType::fp16, false, 256, splits));
  expect_pass(mla(2, 128, 2, 4099, DType::bf16, true, 128, 3));
}

TEST_CASE("rung 17: 64k+ keys, sampled rows", "[gpu][rung17]") {
  if (!runs_here()) return;
  expect_pass(mla(1, 128, 1, 65537, DType::bf16, false), CheckMode::sample);
  expect_pass(mla(2, 16, 2, 70000, DType::fp16, true, 64), CheckMode::sample);
}

TEST_CASE("rung 17: refuses what it cannot do, in one line", "[gpu][rung17]") {
  const DeviceInfo dev = query_device();
  Problem ok = mla(1, 16, 1, 100, DType::bf16, false);
  Problem two_kv = ok;
  two_kv.heads_q = 32;
  two_kv.heads_kv = 2;
  Problem v_own = ok;
  v_own.v_in_k = false;
  Problem page16 = ok;
  page16.page_size = 16;
  Problem d128;
  d128.head_dim = 128;
  for (const Problem* p : {&two_kv, &v_own, &page16, &d128}) {
    const std::string why = supports(rung17(), *p, dev);
    INFO(p->describe());
    CHECK_FALSE(why.empty());
    CHECK(why.find('\n') == std::string::npos);
  }
  // And the rungs before it refuse MLA's cache rather than compute something else.
  for (const Rung& r : registry().all()) {
    if (r.number >= 17 || r.launch_bwd) continue;
    INFO(r.label());
    CHECK_FALSE(supports(r, ok, dev).empty());
  }
}
