// Rung 15 (persistent grid, variable-length batches) on the GPU, beyond the shared matrix (which
// runs its dense cases): packed batches of every kind the contract names, on the rung and on
// each variant, checked against the fp64 reference on the same packed description:
//   - lengths of 1, empty sequences, tails that end mid-tile, one sequence longer than a tile;
//   - causal with seqlen_q != seqlen_k per sequence both ways (rows that see no key), GQA 4:1;
//   - sequences with no key at all, and a batch with only empty sequences;
//   - more work items than SMs (every block takes several, the ring running on across them);
//   - a bitwise repeat: the same batch twice gives the same O and LSE.
// Every section lists its cases, then asserts that as many ran as supports() accepted, and that
// supports() refused none (expected_runs.h); on a GPU other than sm_90 the test is skipped.
#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "catch_compat.h"
#include "expected_runs.h"
#include "flashladder/runner.h"
#include "problem_shape.h"

using namespace fl;
using fl_test::Section;
using fl_test::shape;

namespace {

const Rung& rung15(const std::string& variant = "") {
  const Rung* r = registry().find(15, variant);
  REQUIRE(r != nullptr);
  return *r;
}

/// A packed problem of these lengths (@p lk empty: the same as @p lq).
Problem packed(const std::vector<int>& lq, const std::vector<int>& lk, int hq, int hkv, int d, bool causal,
               DType t = DType::fp16) {
  Problem p = shape(1, 1, 1, hq, hkv, d, causal, t);
  set_varlen(&p, lq, lk);
  return p;
}

}  // namespace

TEST_CASE("packed batches: lengths of 1, empty sequences, tails, seqlen_q != seqlen_k, GQA", "[rung15]") {
  Section s("rung 15 packed batches");  // 3 head_dims x 2 masks x 2 dtypes x 3 batches = 36
  const std::vector<std::pair<std::vector<int>, std::vector<int>>> batches = {
      {{1, 0, 130, 77, 256, 3}, {}},                     // self-attention lengths, an empty one
      {{5, 200, 1, 64, 0, 129}, {300, 100, 1, 0, 7, 129}},  // q != k both ways, a sequence with no key
      {{333}, {1000}},                                   // one sequence, more keys than queries
  };
  for (int d : {64, 128, 256})
    for (bool causal : {false, true})
      for (DType t : {DType::fp16, DType::bf16})
        for (const auto& [lq, lk] : batches) {
          const int hkv = d == 256 ? 1 : 2;
          s.add(rung15(), packed(lq, lk, 4 * hkv, hkv, d, causal, t));
        }
  s.run();
  CHECK(s.cases().size() == 36);
}

TEST_CASE("every variant takes a packed batch", "[rung15]") {
  Section s("rung 15 variants, packed");  // 2 masks per variant
  for (const Rung& r : registry().all()) {
    if (r.number != 15 || r.variant.empty()) continue;
    const int d = r.head_dims.size() == 1 ? r.head_dims[0] : 128;
    for (bool causal : {false, true})
      s.add(r, packed({1, 0, 130, 77, 256, 3, 500}, {2, 9, 130, 60, 256, 0, 700}, 8, 2, d, causal));
  }
  s.run();
}

TEST_CASE("many work items per block: a mixed batch longer than one wave", "[rung15]") {
  // 48 sequences of 1 .. 1200 tokens, 8 heads: several hundred query tiles over the grid, so
  // every block takes several and the ring's stages and phases run on across them.
  std::mt19937 rng(7);
  std::vector<int> lens(48);
  for (int& n : lens) n = 1 + static_cast<int>(rng() % 1200);
  Section s("rung 15 many work items");  // 10 cases
  for (bool causal : {false, true}) {
    s.add(rung15(), packed(lens, {}, 8, 2, 128, causal, DType::bf16));
    s.add(rung15("fifo"), packed(lens, {}, 8, 2, 128, causal, DType::bf16));
    s.add(rung15("no-epilogue-overlap"), packed(lens, {}, 8, 2, 64, causal));
  }
  // Dense, far more tiles than SMs, and a small one of fewer tiles than SMs.
  for (bool causal : {false, true}) {
    s.add(rung15(), shape(8, 1000, 1000, 16, 4, 128, causal));
    s.add(rung15(), shape(1, 77, 300, 2, 1, 64, causal));
  }
  s.run();
}

TEST_CASE("no key anywhere, and no query anywhere", "[rung15]") {
  // Every row sees no key: O = 0, LSE = -inf everywhere. Only empty sequences: nothing to write,
  // and nothing is read (Section::run checks every output written and the pass).
  Section s("rung 15 no key, no query");  // 2 cases
  s.add(rung15(), packed({3, 130}, {0, 0}, 4, 2, 64, false));
  s.add(rung15(), packed({0, 0, 0}, {5, 0, 9}, 4, 2, 64, true));
  s.run();
}

TEST_CASE("a packed batch is bitwise repeatable", "[rung15]") {
  Section s("rung 15 bitwise repeat");  // 1 case
  s.add(rung15(), packed({100, 1, 700, 0, 250}, {}, 8, 2, 128, true, DType::bf16));
  s.each([](const fl_test::Case& c) {
    const Problem& p = c.p;
    const Rung& r = *c.rung;
    const HostInputs in = make_inputs(p, InputKind::random, 3);
    DeviceProblem dp(p, in, forward_workspace_bytes(r, p), 3);
    std::vector<uint16_t> o[2];
    std::vector<float> lse[2];
    for (int k = 0; k < 2; ++k) {
      dp.poison_outputs();
      r.launch(dp.params(), nullptr);
      FL_CUDA_CHECK(cudaDeviceSynchronize());
      o[k] = dp.download_o();
      lse[k] = dp.download_lse();
    }
    REQUIRE(o[0] == o[1]);
    REQUIRE(std::memcmp(lse[0].data(), lse[1].data(), lse[0].size() * sizeof(float)) == 0);
    return true;
  });
}

TEST_CASE("a KV cache of per-sequence lengths (seqused_k) and starts (seqstart_k): dense and packed, on rungs 15 and 16",
          "[rung15]") {
  // flash_attn_with_kvcache's prefill: sequence b sees the first seqused_k[b] of its slots, its
  // causal diagonal at seqused_k[b] - len_q; a sequence that uses no key: O = 0, LSE = -inf.
  std::vector<const Rung*> rungs{&rung15()};
  if (const Rung* r16 = registry().find(16)) rungs.push_back(r16);
  Section s("rungs 15 and 16 on a KV cache");  // 10 per rung, and rung 16's window
  for (const Rung* r : rungs)
    for (bool causal : {false, true})
      for (DType t : {DType::fp16, DType::bf16}) {
        Problem dense = shape(4, 200, 1500, 8, 2, 128, causal, t);
        dense.seqused_k = {1500, 1, 700, 0};
        s.add(*r, dense);
        Problem pk = packed({3, 130, 1}, {500, 300, 64}, 8, 2, 64, causal, t);
        pk.seqused_k = {400, 300, 1};
        s.add(*r, pk);
      }
  // A left-padded cache (seqstart_k): each sequence's keys from its first slot.
  for (const Rung* r : rungs)
    for (bool causal : {false, true}) {
      Problem lp = shape(3, 100, 1200, 8, 2, 128, causal, DType::fp16);
      lp.seqstart_k = {0, 500, 1100};
      lp.seqused_k = {1200, 1000, 1200};
      s.add(*r, lp);
    }
  // Rung 16 with a window on such a cache.
  if (const Rung* r16 = registry().find(16)) {
    Problem w = shape(2, 64, 2000, 8, 2, 128, true, DType::bf16);
    w.seqused_k = {2000, 333};
    w.window_left = 100;
    s.add(*r16, w);
  }
  s.run();
  CHECK(s.cases().size() == 10 * rungs.size() + (rungs.size() > 1 ? 1 : 0));
}
