// Rung 16 (masks and score modifiers as functors, block lists) on the GPU, beyond the shared
// matrix (its dense and causal cases): every mask and modifier, alone and combined as the models
// that use them do, checked against the fp64 reference on the same description (O and the LSE):
//   - sliding windows (left only, both sides, right of the diagonal, wider than the sequence),
//     prefix-LM, document masks, softcapping, ALiBi, attention sinks;
//   - Mistral (window), Gemma 2 (window + softcap), gpt-oss (window + sinks), ModernBERT (two-sided
//     window, not causal);
//   - head_dims 64, 128, 256, fp16 and bf16, GQA, tails, seqlen_q != seqlen_k, packed batches with
//     lengths of 1 and empty sequences, rows that see no key (O = 0, LSE = -inf or the sink);
//   - the two classification ablations on the same cases, and the softcap-exp-fma study on its
//     softcapped ones.
// Every section lists its cases, then asserts that as many ran as supports() accepted, and that
// supports() refused none (expected_runs.h); on a GPU other than sm_90 the test is skipped.
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

const Rung& rung16(const std::string& variant = "") {
  const Rung* r = registry().find(16, variant);
  REQUIRE(r != nullptr);
  return *r;
}

Problem window(Problem p, int left, int right) {
  p.window_left = left;
  p.window_right = right;
  return p;
}

std::vector<float> sinks_for(int heads) {
  std::vector<float> s(heads);
  for (int h = 0; h < heads; ++h) s[h] = -2.f + 0.75f * static_cast<float>(h % 7);
  return s;
}

/// The cases every entry runs at one head_dim and dtype.
std::vector<Problem> cases(int d, DType t) {
  std::vector<Problem> out;
  const int hkv = d == 256 ? 1 : 2;
  const Problem base = shape(2, 700, 700, 4 * hkv, hkv, d, true, t);
  const Problem qk = shape(1, 300, 1100, 4 * hkv, hkv, d, true, t);  // seqlen_q < seqlen_k
  const Problem kq = shape(1, 900, 260, 4 * hkv, hkv, d, true, t);   // seqlen_q > seqlen_k: rows with no key
  out.push_back(base);                            // causal through the block lists
  out.push_back(window(base, 256, 0));            // Mistral: a causal sliding window
  out.push_back(window(qk, 100, 0));
  out.push_back(window(kq, 50, 0));
  Problem two = window(base, 200, 64);            // ModernBERT: both sides, not causal
  two.causal = false;
  out.push_back(two);
  Problem right = window(qk, -1, 37);             // keys right of the diagonal only bounded
  right.causal = false;
  out.push_back(right);
  out.push_back(window(base, 5000, 0));           // wider than the sequence: causal
  Problem prefix = base;                          // prefix-LM
  prefix.causal = false;
  prefix.prefix = 300;
  out.push_back(prefix);
  Problem docs = base;                            // documents, causal within each
  docs.doc_starts = {0, 1, 130, 131, 400, 650, 700};
  out.push_back(docs);
  Problem docs_dense = docs;
  docs_dense.causal = false;
  out.push_back(docs_dense);
  Problem cap = base;                             // softcapping
  cap.softcap = 5.f;
  out.push_back(cap);
  Problem gemma2 = window(base, 256, 0);          // Gemma 2: window + softcap
  gemma2.softcap = 50.f;
  out.push_back(gemma2);
  Problem alibi = base;                           // ALiBi
  alibi.alibi = true;
  out.push_back(alibi);
  Problem alibi_dense = qk;
  alibi_dense.causal = false;
  alibi_dense.alibi = true;
  alibi_dense.softcap = 20.f;
  out.push_back(alibi_dense);
  Problem sinks = base;                           // attention sinks
  sinks.sinks = sinks_for(sinks.heads_q);
  out.push_back(sinks);
  Problem gpt_oss = window(kq, 128, 0);           // gpt-oss: window + sinks (rows with no key: LSE = sink)
  gpt_oss.sinks = sinks_for(gpt_oss.heads_q);
  out.push_back(gpt_oss);
  return out;
}

}  // namespace

TEST_CASE("every mask and modifier, alone and as models combine them", "[rung16]") {
  Section s("rung 16: every mask and modifier, alone and as models combine them");
  for (int d : {64, 128, 256})
    for (DType t : {DType::fp16, DType::bf16})
      for (const Problem& p : cases(d, t)) s.add(rung16(), p);
  s.run();
}

TEST_CASE("head_dims between the tiles: 80 and 96 (and 8 to 248, multiples of 8) on the next tile up", "[rung16]") {
  Section s("rung 16: head_dims 80 and 96 (and 8, 16, 24, 40, 48, 72, 104, 136, 160, 200, 240, 248)");
  for (int d : {80, 96})
    for (DType t : {DType::fp16, DType::bf16})
      for (const Problem& p : cases(d, t)) s.add(rung16(), p);
  for (int d : {8, 16, 24, 40, 48, 72, 104, 136, 160, 200, 240, 248}) {
    s.add(rung16(), shape(2, 300, 300, 8, 2, d, true));
    s.add(rung16(), window(shape(1, 257, 700, 4, 1, d, false, DType::bf16), 64, 64));
  }
  // A packed batch at d = 80 (the TMA maps of the packed tokens read zeros past the head too).
  Problem p = shape(1, 1, 1, 8, 2, 80, true, DType::bf16);
  set_varlen(&p, {1, 0, 130, 77, 300}, {5, 9, 130, 60, 256});
  s.add(rung16(), window(p, 64, 0));
  s.run();
}

static Problem with_dv(Problem p, int dv) {
  p.head_dim_v = dv;
  return p;
}

TEST_CASE("V and O with a head_dim of their own (--dim-v): MLA's 192/128 and others, dense and packed", "[rung16]") {
  Section s("rung 16: V's head_dim its own (192/128, 128/64, 64/96, 40/256, 256/8)");
  for (DType t : {DType::fp16, DType::bf16}) {
    s.add(rung16(), with_dv(shape(2, 700, 700, 8, 2, 192, true, t), 128));           // MLA's prefill, causal GQA
    s.add(rung16(), with_dv(shape(1, 300, 1100, 16, 16, 192, true, t), 128));        // seqlen_q < seqlen_k
    s.add(rung16(), with_dv(window(shape(1, 900, 260, 8, 2, 128, true, t), 50, 0), 64));  // rows with no key
    s.add(rung16(), with_dv(shape(2, 257, 257, 4, 4, 64, false, t), 96));            // dv above d
  }
  s.add(rung16(), with_dv(shape(1, 130, 130, 4, 1, 40, true, DType::bf16), 256));
  s.add(rung16(), with_dv(shape(1, 130, 130, 4, 1, 256, false, DType::bf16), 8));
  Problem packed = shape(1, 1, 1, 8, 2, 192, true, DType::bf16);
  set_varlen(&packed, {1, 0, 130, 77, 300}, {5, 9, 130, 60, 256});
  s.add(rung16(), with_dv(packed, 128));
  Problem capped = with_dv(window(shape(1, 500, 500, 8, 2, 192, true), 100, 0), 128);
  capped.softcap = 30.f;
  capped.sinks = sinks_for(capped.heads_q);
  s.add(rung16(), capped);
  s.run();
  // The backward takes V's head_dim up to Q's only ("backward: V's head_dim ..." below): dv above
  // d is refused in one line naming --dim-v.
  DeviceInfo dev;
  dev.cc_major = 9;
  dev.cc_minor = 0;
  dev.sm_count = 132;
  const std::string why = supports(rung16("backward"), with_dv(shape(1, 128, 128, 4, 4, 64, true), 96), dev);
  CHECK(why.find("--dim-v") != std::string::npos);
  CHECK(why.find('\n') == std::string::npos);
}

TEST_CASE("packed batches with masks and modifiers: lengths of 1, empty sequences, q != k", "[rung16]") {
  Section s("rung 16: packed batches with masks and modifiers");
  for (int d : {64, 128}) {
    Problem p = shape(1, 1, 1, 8, 2, d, true, DType::bf16);
    set_varlen(&p, {1, 0, 130, 77, 300, 5, 600}, {5, 9, 130, 60, 256, 0, 900});
    s.add(rung16(), window(p, 64, 0));
    Problem capped = window(p, 100, 0);
    capped.softcap = 30.f;
    capped.sinks = sinks_for(p.heads_q);
    s.add(rung16(), capped);
    Problem alibi = p;
    alibi.alibi = true;
    alibi.causal = false;
    s.add(rung16(), alibi);
  }
  s.run();
}

TEST_CASE("the classification ablations compute the same attention", "[rung16]") {
  Section s("rung 16: the classification ablations compute the same attention");
  for (const char* v : {"no-full-blocks", "no-skip"})
    for (const Problem& p : cases(128, DType::fp16)) s.add(rung16(v), p);
  s.run();
}

TEST_CASE("softcap-exp-fma: softcap at d <= 64 with a quarter of exp2 on the FMA pipe", "[rung16]") {
  Section s("rung 16[softcap-exp-fma]: every mask under softcap, rows that see no key included");
  // Every case of the matrix with softcap 30 (none with ALiBi), at d = 64 and 40 (the d = 64 tiles),
  // fp16 and bf16: the polynomial's 1.0e-4 within the 16-bit tolerance, and a masked score's P
  // exactly 0 (rows that see no key: O = 0, LSE = -inf or the sink).
  for (int d : {64, 40})
    for (DType t : {DType::fp16, DType::bf16})
      for (Problem p : cases(d, t)) {
        if (p.alibi) continue;
        p.softcap = p.softcap > 0 ? p.softcap : 30.f;
        s.add(rung16("softcap-exp-fma"), p);
      }
  s.run();
}

TEST_CASE("a window far shorter than the sequence, and more tiles than SMs", "[rung16]") {
  Section s("rung 16: a window far shorter than the sequence, and more tiles than SMs");
  // 8k keys, a window of 512: each tile lists 5 of 64 blocks; 4 x 64 tiles x 8 heads.
  s.add(rung16(), window(shape(4, 8192, 8192, 8, 2, 128, true, DType::bf16), 512, 0));
  Problem g = window(shape(1, 4096, 4096, 16, 2, 64, true), 1024, 0);
  g.softcap = 50.f;
  s.add(rung16(), g);
  s.run();
}

// ---- the backward pass (16_masks[backward]: rung 14's kernel with the masks by key) ------------
// dQ, dK, dV and, with sinks, d loss / d sink against the fp64 backward reference on the same
// description. Rung 14's own backward matrix (tests/gpu/test_rung11.cpp) runs on this entry too:
// ctest gpu_rung16_backward_matrix (no mask and causal, tails, GQA, the deterministic mode).

TEST_CASE("backward: every mask and modifier, their gradients (the sinks' too)", "[rung16_backward]") {
  Section s("rung 16 backward: every mask and modifier");
  for (int d : {64, 128, 256})
    for (DType t : {DType::fp16, DType::bf16})
      for (const Problem& p : cases(d, t)) s.add(rung16("backward"), p);
  s.run();
}

TEST_CASE("backward: head_dims 80 and 96 (and 8 to 248, multiples of 8) on the next tile up, GQA unsplit",
          "[rung16_backward]") {
  Section s("rung 16 backward: head_dims 80 and 96 (and 8, 40, 48, 72, 104, 160, 200, 248)");
  for (int d : {80, 96})
    for (const Problem& p : cases(d, DType::bf16)) s.add(rung16("backward"), p);
  for (int d : {8, 40, 48, 72, 104, 160, 200, 248}) {
    s.add(rung16("backward"), shape(2, 300, 300, 8, 2, d, true));
    s.add(rung16("backward"), window(shape(1, 257, 700, 4, 1, d, false, DType::bf16), 64, 64));
  }
  s.run();
}

TEST_CASE("backward: packed batches with masks and modifiers: lengths of 1, empty sequences, q != k",
          "[rung16_backward]") {
  Section s("rung 16 backward: packed batches");
  for (int d : {64, 128, 96}) {
    Problem p = shape(1, 1, 1, 8, 2, d, true, DType::bf16);
    set_varlen(&p, {1, 0, 130, 77, 300, 5, 600}, {5, 9, 130, 60, 256, 0, 900});
    s.add(rung16("backward"), window(p, 64, 0));
    Problem capped = window(p, 100, 0);
    capped.softcap = 30.f;
    capped.sinks = sinks_for(p.heads_q);
    s.add(rung16("backward"), capped);
    Problem alibi = p;
    alibi.alibi = true;
    alibi.causal = false;
    s.add(rung16("backward"), alibi);
  }
  s.run();
}

TEST_CASE("backward: a window far shorter than the sequence (most K/V blocks visit few query blocks)",
          "[rung16_backward]") {
  Section s("rung 16 backward: a short window");
  s.add(rung16("backward"), window(shape(2, 4096, 4096, 8, 2, 128, true, DType::bf16), 512, 0));
  Problem g = window(shape(1, 2048, 2048, 16, 2, 64, true), 256, 0);
  g.softcap = 50.f;
  g.sinks = sinks_for(g.heads_q);
  s.add(rung16("backward"), g);
  s.run();
}

TEST_CASE(
    "backward: the deterministic mode under every mask (the dQ adds in turn, each block after its "
    "nearest "
    "neighbour that visits the same query block)",
    "[rung16_backward]") {
  const Rung& r = rung16("backward");
  Section s(
      "rung 16 backward: the deterministic mode");  // every mask case at d = 64 and 128, packed too
  for (int d : {64, 128}) {
    for (const Problem& p : cases(d, d == 64 ? DType::fp16 : DType::bf16)) {
      fl_test::Case& c = s.add(r, p);
      c.deterministic = true;
      c.seed = 5;
    }
  }
  Problem packed = shape(1, 1, 1, 8, 2, 128, true, DType::bf16);
  set_varlen(&packed, {1, 0, 130, 77, 300, 5, 600}, {5, 9, 130, 60, 256, 0, 900});
  for (const Problem& p : {window(packed, 64, 0), window(packed, 30, 40)}) {
    fl_test::Case& c = s.add(r, p);
    c.deterministic = true;
    c.seed = 5;
  }
  s.run();
}

// ---- attention dropout (dropout.h): the forward and the backward against the fp64 reference that
// applies the same mask (Problem::dropout_kept). A kernel whose mask differed from the reference's
// in any element would miss by that element's P V / (1 - p): far outside the tolerance.

namespace {

Problem dropped(Problem p, float prob, uint64_t seed, uint64_t offset = 0) {
  p.dropout_p = prob;
  p.dropout_seed = seed;
  p.dropout_offset = offset;
  return p;
}

Problem with_alibi(Problem p) {
  p.alibi = true;
  return p;
}

/// Dropout's cases at one head_dim and dtype: no mask (the dense tiles), causal, a window, sinks,
/// GQA, tails, seqlen_q != seqlen_k, rows with no key, two probabilities and offsets; and with
/// ALiBi (its own kernels: the span mask on the causal tiles and on the dense ones): causal with
/// seqlen_q < seqlen_k, a causal window, no mask with seqlen_q > seqlen_k.
std::vector<Problem> dropout_cases(int d, DType t) {
  const int hkv = d == 256 ? 1 : 2;
  std::vector<Problem> out;
  Problem none = shape(2, 333, 333, 4 * hkv, hkv, d, false, t);
  out.push_back(dropped(none, 0.17f, 11));
  out.push_back(dropped(shape(2, 700, 700, 4 * hkv, hkv, d, true, t), 0.1f, 12, 1u << 20));
  out.push_back(dropped(shape(1, 300, 1100, 4 * hkv, hkv, d, true, t), 0.5f, 13, 4));
  out.push_back(dropped(shape(1, 900, 260, 4 * hkv, hkv, d, true, t), 0.3f, 14));  // rows with no key
  out.push_back(dropped(window(shape(1, 700, 700, 4 * hkv, hkv, d, true, t), 128, 0), 0.2f, 15));
  Problem sinks = shape(1, 400, 400, 4 * hkv, hkv, d, true, t);
  sinks.sinks = sinks_for(sinks.heads_q);
  out.push_back(dropped(sinks, 0.25f, 16, (uint64_t(3) << 32) + 8));  // the offset's high word too
  out.push_back(dropped(with_alibi(shape(1, 300, 1100, 4 * hkv, hkv, d, true, t)), 0.2f, 17, 5));
  out.push_back(
      dropped(with_alibi(window(shape(1, 700, 700, 4 * hkv, hkv, d, true, t), 128, 0)), 0.3f, 18));
  out.push_back(dropped(with_alibi(shape(2, 500, 333, 4 * hkv, hkv, d, false, t)), 0.1f, 19));
  return out;
}

}  // namespace

TEST_CASE("dropout: the forward against the fp64 reference with the same mask", "[rung16_dropout]") {
  Section s("rung 16: dropout, forward");
  for (int d : {64, 96, 128, 256})
    for (DType t : {DType::fp16, DType::bf16})
      for (const Problem& p : dropout_cases(d, t)) s.add(rung16(), p);
  Problem packed = shape(1, 1, 1, 8, 2, 128, true, DType::bf16);
  set_varlen(&packed, {1, 0, 130, 77, 300, 5, 600}, {5, 9, 130, 60, 256, 0, 900});
  s.add(rung16(), dropped(packed, 0.15f, 21));
  s.add(rung16(), dropped(window(packed, 64, 0), 0.4f, 22));
  s.add(rung16(), dropped(with_alibi(packed), 0.25f, 23));
  Problem packed_dense = with_alibi(packed);  // no mask: the dense tiles' ALiBi kernel
  packed_dense.causal = false;
  s.add(rung16(), dropped(packed_dense, 0.2f, 24));
  s.run();
}

TEST_CASE("dropout: the backward regenerates the forward's mask (dQ, dK, dV, dsinks against fp64)",
          "[rung16_dropout]") {
  Section s("rung 16 backward: dropout");
  for (int d : {64, 96, 128, 256})
    for (DType t : {DType::fp16, DType::bf16})
      for (const Problem& p : dropout_cases(d, t)) s.add(rung16("backward"), p);
  Problem packed = shape(1, 1, 1, 8, 2, 64, true, DType::bf16);
  set_varlen(&packed, {1, 0, 130, 77, 300, 5, 600}, {5, 9, 130, 60, 256, 0, 900});
  s.add(rung16("backward"), dropped(packed, 0.15f, 31));
  s.add(rung16("backward"), dropped(window(with_alibi(packed), 64, 0), 0.25f, 34));
  for (const Problem& p : {dropped(shape(1, 300, 530, 8, 2, 128, true), 0.2f, 32),
                           dropped(shape(1, 256, 256, 4, 4, 64, false, DType::bf16), 0.6f, 33),
                           dropped(with_alibi(shape(1, 300, 530, 8, 2, 64, true)), 0.2f, 35)}) {
    fl_test::Case& c = s.add(rung16("backward"), p);  // the mask does not depend on the order of dQ's adds
    c.deterministic = true;
  }
  s.run();
}

TEST_CASE("dropout: the 10-round ablation's kernels (--dropout-rounds 10) against the fp64 reference",
          "[rung16_dropout]") {
  // Philox4x32-10 compiled in (PDropout<true, 10>): the dense tiles, the causal tiles with the causal
  // and the span mask, forward and backward; the reference draws the 10-round mask.
  Section s("rung 16: dropout with Philox4x32-10");
  for (int d : {64, 128})
    for (const Problem& base : {dropped(shape(2, 333, 333, 8, 2, d, false, DType::bf16), 0.17f, 41),
                                dropped(shape(1, 300, 530, 8, 2, d, true), 0.3f, 42, 7),
                                dropped(window(shape(1, 700, 700, 8, 2, d, true), 128, 0), 0.2f, 43)}) {
      Problem p = base;
      p.dropout_rounds = 10;
      s.add(rung16(), p);
      s.add(rung16("backward"), p);
    }
  s.run();
}

TEST_CASE("dropout: taken with ALiBi; refused with softcap or a KV cache's lengths, in one line",
          "[rung16_dropout]") {
  DeviceInfo dev;  // an H100-like description: the refusals read the problem, not the device
  dev.cc_major = 9;
  dev.cc_minor = 0;
  dev.sm_count = 132;
  Problem cap = dropped(shape(1, 128, 128, 4, 2, 64, true), 0.1f, 1);
  cap.softcap = 30.f;
  Problem cap_alibi = with_alibi(cap);
  Problem cache = dropped(shape(2, 128, 256, 4, 2, 64, true), 0.1f, 1);
  cache.seqused_k = {200, 17};
  Problem ten_alibi = with_alibi(dropped(shape(1, 128, 128, 4, 2, 64, true), 0.1f, 1));
  ten_alibi.dropout_rounds = 10;
  for (const char* variant : {"", "backward"}) {
    const std::string why = supports(rung16(variant), ten_alibi, dev);
    if (why != hopper_supports(dev, false)) CHECK(why.find("--dropout-rounds 10") != std::string::npos);
  }
  for (const Problem& p : {cap, cap_alibi, cache}) {
    INFO(p.describe());
    const std::string why = supports(rung16(), p, dev);
    CHECK(why.find("dropout") != std::string::npos);
    CHECK(why.find(p.softcap > 0 ? "softcap" : "KV cache") != std::string::npos);
    CHECK(why.find('\n') == std::string::npos);
  }
  // ALiBi with dropout is compiled (forward and backward): nothing refuses it but a build without
  // sm_90a, which refuses every problem.
  for (const Problem& p :
       {with_alibi(dropped(shape(1, 128, 128, 4, 2, 64, true), 0.1f, 1)),
        with_alibi(dropped(shape(1, 128, 200, 4, 2, 96, false, DType::bf16), 0.3f, 2))}) {
    for (const char* variant : {"", "backward"}) {
      INFO(p.describe() << " " << variant);
      const std::string why = supports(rung16(variant), p, dev);
      if (why != hopper_supports(dev, false)) CHECK(why.empty());
    }
  }
  // Every other rung refuses dropout (Rung::dropout): it would be ignored, never a wrong answer.
  const Problem plain = dropped(shape(1, 128, 128, 4, 4, 64, true), 0.1f, 1);
  Problem off = plain;
  off.dropout_p = 0.f;
  for (const Rung& r : registry().all()) {
    INFO(r.label());
    if (r.number == 16) continue;
    const std::string why = supports(r, plain, dev);
    CHECK_FALSE(why.empty());
    // A rung that takes the problem without dropout names dropout as its reason (one that refuses it for
    // its head_dim or its decode shape says that first).
    if (supports(r, off, dev).empty()) CHECK(why.find("dropout") != std::string::npos);
    CHECK(feature_support(r, plain).find("dropout") != std::string::npos);
  }
}

// ---- the forward on rung 15's MlaTiles (Q and K 192, V and O 128) ------------------------------

// Head_dims in (128, 192] with V's up to 128 run on MlaTiles (launch.cu's with_head_dims) instead
// of the d = 256 tiles; the cases above (192/128: causal GQA, seqlen_q < seqlen_k, packed,
// window with softcap and sinks) run there too. These add what no case above has on that tile:
// no mask with tails, a head_dim and V's below the tile's (136 and 72, zero columns past them),
// ALiBi, dropout, a long row, and a problem whose V is wider than 128 (the d = 256 tiles).
TEST_CASE("forward on MlaTiles (192/128): no mask, tails, head_dims below the tile's, ALiBi, dropout", "[rung16]") {
  Section s("rung 16: the forward on MlaTiles (192/128 and below)");
  for (DType t : {DType::fp16, DType::bf16})
    s.add(rung16(), with_dv(shape(2, 257, 257, 4, 4, 192, false, t), 128));                 // no mask, tails
  s.add(rung16(), with_dv(shape(1, 200, 330, 8, 8, 136, true, DType::bf16), 72));           // 136/72: zero columns
  s.add(rung16(), with_dv(with_alibi(shape(1, 300, 530, 8, 2, 192, true, DType::bf16)), 128));
  s.add(rung16(), with_dv(dropped(shape(1, 300, 530, 8, 2, 192, true, DType::bf16), 0.2f, 41), 128));
  s.add(rung16(), with_dv(shape(1, 4100, 4100, 4, 1, 192, true, DType::bf16), 128));       // MQA, many blocks
  s.add(rung16(), with_dv(shape(1, 300, 300, 4, 2, 192, true, DType::bf16), 192));         // V 192: the d = 256 tiles
  s.run();
}

// ---- the backward with V's head_dim its own (MLA's training: 192/128) -------------------------
// V and dO read at dv columns on Q's tile (zeros past them), D = rowsum(dO ∘ O) over dv columns,
// dV stored at dv columns; dQ, dK, dV against the fp64 backward reference at dv.

TEST_CASE("backward: V's head_dim its own (--dim-v, dv <= d): MLA's 192/128, dense, causal, GQA, packed, masks",
          "[rung16_backward]") {
  const Rung& r = rung16("backward");
  Section s("rung 16 backward: V's head_dim its own (192/128 on the d=256 tiles, 256/128, 128/64, 64/32)");
  for (DType t : {DType::fp16, DType::bf16}) {
    s.add(r, with_dv(shape(2, 700, 700, 8, 2, 192, true, t), 128));      // MLA's training shape: causal GQA
    s.add(r, with_dv(shape(2, 257, 257, 4, 4, 192, false, t), 128));     // no mask, tails
    s.add(r, with_dv(shape(1, 300, 1100, 16, 16, 192, true, t), 128));   // seqlen_q < seqlen_k
    s.add(r, with_dv(window(shape(1, 900, 260, 8, 2, 192, true, t), 50, 0), 128));  // rows with no key
    s.add(r, with_dv(window(shape(1, 900, 260, 8, 2, 128, true, t), 50, 0), 64));   // the d=128 tiles
  }
  // Q's head_dim the tile's, V's below it: a GQA group that would split is walked whole.
  s.add(r, with_dv(shape(1, 257, 257, 8, 2, 256, true, DType::bf16), 128));
  s.add(r, with_dv(shape(2, 300, 300, 8, 2, 64, true, DType::bf16), 32));
  s.add(r, with_dv(shape(1, 333, 333, 4, 1, 128, false, DType::fp16), 8));
  Problem packed = shape(1, 1, 1, 8, 2, 192, true, DType::bf16);
  set_varlen(&packed, {1, 0, 130, 77, 300, 5, 600}, {5, 9, 130, 60, 256, 0, 900});
  s.add(r, with_dv(packed, 128));
  s.add(r, with_dv(window(packed, 64, 0), 128));
  Problem capped = with_dv(window(shape(1, 500, 500, 8, 2, 192, true), 100, 0), 128);
  capped.softcap = 30.f;
  capped.sinks = sinks_for(capped.heads_q);
  s.add(r, capped);  // softcap's derivative and the sinks' gradient from D at dv
  s.add(r, with_dv(with_alibi(shape(1, 300, 530, 8, 2, 192, true, DType::bf16)), 128));
  s.add(r, with_dv(dropped(shape(1, 300, 530, 8, 2, 192, true, DType::bf16), 0.2f, 41), 128));
  for (const Problem& p : {with_dv(shape(1, 700, 700, 8, 2, 192, true, DType::bf16), 128),
                           with_dv(window(packed, 30, 40), 128)}) {
    fl_test::Case& c = s.add(r, p);
    c.deterministic = true;
    c.seed = 5;
  }
  s.run();
  // dv above d: refused in one line; dv = d said explicitly: taken as before.
  DeviceInfo dev;
  dev.cc_major = 9;
  dev.cc_minor = 0;
  dev.sm_count = 132;
  const std::string why = supports(r, with_dv(shape(1, 128, 128, 4, 4, 128, true), 256), dev);
  CHECK(why.find("--dim-v") != std::string::npos);
  CHECK(why.find('\n') == std::string::npos);
  CHECK(feature_support(r, with_dv(shape(1, 128, 128, 4, 4, 192, true), 128)).empty());
}
