// The fp64 references with masks and score modifiers beyond the causal mask (Problem's window,
// prefix, doc_starts, softcap, alibi, sinks; masks.h's rules), checked on the CPU: the Eigen
// references against the textbook loops, forward and backward; each mask against its definition
// through the references themselves (a masked key changes nothing); softcapping and ALiBi
// against the formulas; sinks against a brute-force softmax over mask_mod, with rows that see no
// key and a sink too small to matter; the gradients (dsinks too) against central finite
// differences; and every rung without Rung::mods refusing such a problem in one line.
#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "catch_compat.h"
#include "finite_differences.h"
#include "max_diff.h"
#include "flashladder/reference.h"
#include "flashladder/reference_bwd.h"
#include "flashladder/registry.h"
#include "problem_shape.h"

using namespace fl;
using fl_test::max_abs_diff;
using fl_test::shape;

namespace {

/// Problems with every mask and modifier, alone and combined, dense and packed, GQA.
std::vector<std::pair<std::string, Problem>> mod_cases() {
  std::vector<std::pair<std::string, Problem>> out;
  auto add = [&](const std::string& name, Problem p, const std::function<void(Problem&)>& set) {
    set(p);
    out.push_back({name, p});
  };
  const Problem self = shape(2, 70, 70, 4, 2, 32, false);
  const Problem cross = shape(1, 33, 90, 4, 1, 32, false);  // seqlen_q < seqlen_k
  add("sliding window (16, 0)", self, [](Problem& p) { p.window_left = 16; p.window_right = 0; });
  add("window (10, 5), cross", cross, [](Problem& p) { p.window_left = 10; p.window_right = 5; });
  add("left window + causal flag", cross, [](Problem& p) { p.window_left = 7; p.causal = true; });
  add("prefix-LM 20", self, [](Problem& p) { p.prefix = 20; });
  add("documents", self, [](Problem& p) { p.doc_starts = {0, 1, 30, 31, 70}; });
  add("documents + causal", self, [](Problem& p) { p.doc_starts = {0, 25, 64, 70}; p.causal = true; });
  add("softcap 2", self, [](Problem& p) { p.softcap = 2.f; });
  add("softcap 0.5 + causal", cross, [](Problem& p) { p.softcap = 0.5f; p.causal = true; });
  add("ALiBi", self, [](Problem& p) { p.alibi = true; });
  add("ALiBi + window + softcap", cross, [](Problem& p) {
    p.alibi = true;
    p.window_left = 20;
    p.window_right = 0;
    p.softcap = 1.f;
  });
  Problem packed = shape(1, 1, 1, 4, 2, 32, false);
  set_varlen(&packed, {40, 1, 0, 65}, {50, 9, 3, 65});
  add("packed, window (8, 0) + ALiBi", packed, [](Problem& p) { p.window_left = 8; p.window_right = 0; p.alibi = true; });
  // Sinks: some above the rows' largest scores (about 2-3 here), some below.
  const std::vector<float> sinks = {-1.5f, 0.25f, 2.f, 4.5f};
  add("sinks", self, [&](Problem& p) { p.sinks = sinks; });
  add("sinks + causal, Sq > Sk: empty rows", shape(1, 50, 30, 4, 2, 32, true),
      [&](Problem& p) { p.sinks = sinks; });
  add("sinks + window + softcap + ALiBi", cross, [&](Problem& p) {
    p.sinks = sinks;
    p.window_left = 12;
    p.window_right = 3;
    p.softcap = 1.f;
    p.alibi = true;
  });
  add("packed, sinks + causal", packed, [&](Problem& p) {
    p.sinks = sinks;
    p.causal = true;
  });
  return out;
}

}  // namespace

TEST_CASE("references with masks and modifiers equal their textbook loops, forward and backward",
          "[cpu][reference_mods]") {
  for (const auto& [name, p] : mod_cases()) {
    INFO(name << ": " << p.describe());
    REQUIRE(validate(p).empty());
    REQUIRE(p.has_mods());
    const HostInputs in = make_inputs(p, InputKind::random, 3);
    const auto rows = all_rows(p);
    const RowResults ref = reference_fp64(p, in, rows), loops = naive_loops(p, in, rows);
    CHECK(max_abs_diff(ref.out, loops.out) < 1e-12);
    CHECK(max_abs_diff(ref.lse, loops.lse) < 1e-12);
    const auto dout = make_grad_output(p, 3);
    const BwdResults b = reference_bwd_fp64(p, in, dout), bl = naive_loops_bwd(p, in, dout);
    for (auto [t, got, want] : {std::make_tuple("O", &b.out, &bl.out), std::make_tuple("dQ", &b.dq, &bl.dq),
                                std::make_tuple("dK", &b.dk, &bl.dk), std::make_tuple("dV", &b.dv, &bl.dv)}) {
      INFO(t);
      CHECK(max_abs_diff(*got, *want) < 1e-12);
    }
    REQUIRE(b.dsinks.size() == p.sinks.size());
    REQUIRE(bl.dsinks.size() == p.sinks.size());
    CHECK(max_abs_diff(b.dsinks, bl.dsinks) < 1e-11);
  }
}

TEST_CASE("a masked key changes nothing; a seen key changes its row", "[cpu][reference_mods]") {
  // The references read only the keys of Problem::key_span: perturb key j, and exactly the rows
  // whose mask (masks.h's mask_mod, the definition) lets them see j change.
  for (const auto& [name, p] : mod_cases()) {
    if (p.varlen()) continue;  // one sequence per batch row: the dense cases suffice here
    INFO(name << ": " << p.describe());
    HostInputs in = make_inputs(p, InputKind::random, 5);
    const auto rows = all_rows(p);
    const RowResults base = reference_fp64(p, in, rows);
    const MaskSpec m = p.mask_spec();
    for (int j : {0, p.seqlen_k / 3, p.seqlen_k - 1}) {
      HostInputs moved = in;
      // Key j of batch 0, KV head 0: every column of K and V.
      for (int c = 0; c < p.head_dim; ++c) {
        const size_t at = (static_cast<size_t>(p.k_token(0, j)) * p.heads_kv) * p.head_dim + c;
        moved.k[at] = to_bits(from_bits(in.k[at], p.dtype) + 0.5f, p.dtype);
        moved.v[at] = to_bits(from_bits(in.v[at], p.dtype) - 0.75f, p.dtype);
      }
      const RowResults after = reference_fp64(p, moved, rows);
      for (size_t n = 0; n < rows.size(); ++n) {
        const RowId& r = rows[n];
        if (r.b != 0 || r.h / p.group() != 0) continue;
        double change = 0;
        for (int c = 0; c < p.head_dim; ++c)
          change = std::max(change, std::fabs(after.out[n * p.head_dim + c] - base.out[n * p.head_dim + c]));
        INFO("key " << j << " row " << r.i << " head " << r.h);
        CHECK((change > 0) == mask_mod(m, p.seqlen_q, p.seqlen_k, r.i, j));
      }
    }
  }
}

TEST_CASE("softcapping and ALiBi enter the scores as their formulas say", "[cpu][reference_mods]") {
  // One row, one head: O from the reference against a softmax written out from the formulas.
  Problem p = shape(1, 4, 11, 3, 3, 16, false);
  p.softcap = 1.5f;
  p.alibi = true;
  const HostInputs in = make_inputs(p, InputKind::random, 9);
  const auto rows = all_rows(p);
  const RowResults ref = reference_fp64(p, in, rows);
  for (size_t n = 0; n < rows.size(); ++n) {
    const RowId& r = rows[n];
    std::vector<double> s;
    for (int j = 0; j < p.seqlen_k; ++j) {
      double dot = 0;
      for (int c = 0; c < p.head_dim; ++c)
        dot += from_bits(in.q[(static_cast<size_t>(r.i) * p.heads_q + r.h) * p.head_dim + c], p.dtype) *
               from_bits(in.k[(static_cast<size_t>(j) * p.heads_kv + r.h) * p.head_dim + c], p.dtype);
      const double slope = std::pow(2.0, -8.0 * (r.h + 1) / 2);  // 3 heads: powers of 2 below are 2
      const double bias = r.h < 2 ? -slope * std::abs(r.i + 7 - j) : -std::pow(2.0, -4.0 / 2) * std::abs(r.i + 7 - j);
      s.push_back(1.5 * std::tanh(dot * p.scale() / 1.5) + bias);
    }
    const double m = *std::max_element(s.begin(), s.end());
    double l = 0;
    for (double x : s) l += std::exp(x - m);
    INFO("row " << r.i << " head " << r.h);
    CHECK(std::fabs(ref.lse[n] - (m + std::log(l))) < 1e-12);
    for (int c = 0; c < p.head_dim; ++c) {
      double o = 0;
      for (int j = 0; j < p.seqlen_k; ++j)
        o += std::exp(s[j] - m) / l * from_bits(in.v[(static_cast<size_t>(j) * p.heads_kv + r.h) * p.head_dim + c], p.dtype);
      CHECK(std::fabs(ref.out[n * p.head_dim + c] - o) < 1e-12);
    }
  }
}

TEST_CASE("the causal flag and the window (-1, 0) are one mask", "[cpu][reference_mods]") {
  Problem causal = shape(1, 40, 60, 2, 1, 16, true);
  Problem window = shape(1, 40, 60, 2, 1, 16, false);
  window.window_right = 0;
  const HostInputs in = make_inputs(causal, InputKind::random, 4);
  const RowResults a = reference_fp64(causal, in, all_rows(causal)), b = reference_fp64(window, in, all_rows(window));
  CHECK(max_abs_diff(a.out, b.out) == 0.0);
  CHECK(max_abs_diff(a.lse, b.lse) == 0.0);
  for (int i = 0; i < 40; ++i) {
    const KeySpan s = window.key_span(0, i);
    CHECK(s.lo == 0);
    CHECK(s.hi + 1 == causal.visible_keys(i));
  }
}

TEST_CASE("central finite differences of L = sum(O * dO) match dQ, dK, dV with softcap, ALiBi, a window",
          "[cpu][reference_mods]") {
  Problem p = shape(1, 6, 9, 2, 1, 8, false);
  p.softcap = 0.8f;  // small: the cap bends the scores hard
  p.alibi = true;
  p.window_left = 4;
  p.window_right = 1;
  REQUIRE(validate(p).empty());
  const BwdResults eig = fl_test::require_finite_differences(p, 21);
  double largest = 0;
  for (double g : eig.dq) largest = std::max(largest, std::fabs(g));
  CHECK(largest > 0.01);  // the check compared gradients, not zeros
}

namespace {

/// Problems with sinks for the brute-force checks: causal, a window, GQA, dense and packed, with
/// rows that see no key (Sq > Sk under the causal mask; a packed sequence with no keys), an empty
/// sequence and a sequence of one token. The sinks lie above and below the rows' largest scores.
std::vector<std::pair<std::string, Problem>> sink_cases() {
  const std::vector<float> sinks = {-1.5f, 0.25f, 2.f, 4.5f};
  std::vector<std::pair<std::string, Problem>> out;
  Problem causal = shape(2, 24, 17, 4, 2, 16, true);  // rows 0..6 see no key
  causal.sinks = sinks;
  out.push_back({"causal, Sq > Sk", causal});
  Problem window = shape(1, 13, 30, 4, 2, 16, false);
  window.window_left = 5;
  window.window_right = 2;
  window.sinks = sinks;
  out.push_back({"window (5, 2), cross", window});
  Problem packed = shape(1, 1, 1, 4, 2, 16, true);
  set_varlen(&packed, {9, 0, 1, 20, 6}, {12, 3, 1, 20, 0});  // empty, one token, no keys
  packed.sinks = sinks;
  out.push_back({"packed, causal", packed});
  Problem packed_window = packed;
  packed_window.window_left = 4;
  out.push_back({"packed, causal + window (4, 0)", packed_window});
  return out;
}

/// The forward from the definition, no max subtracted (the scores are small): z = e^{sink_h} +
/// the sum of e^{s_ij} over the keys mask_mod lets row i see, O_i = sum_j e^{s_ij} v_j / z,
/// LSE_i = log z. Rows in all_rows() order.
RowResults brute_force_sinks(const Problem& p, const HostInputs& in) {
  const int D = p.head_dim;
  const MaskSpec m = p.mask_spec();
  RowResults res;
  for (const RowId& r : all_rows(p)) {
    double z = std::exp(static_cast<double>(p.sinks[r.h]));
    std::vector<double> num(D, 0.0);
    for (int j = 0; j < p.len_k(r.b); ++j) {
      if (!mask_mod(m, p.len_q(r.b), p.len_k(r.b), r.i, j)) continue;
      const size_t qi = (static_cast<size_t>(p.q_token(r.b, r.i)) * p.heads_q + r.h) * D;
      const size_t kj = (static_cast<size_t>(p.k_token(r.b, j)) * p.heads_kv + r.h / p.group()) * D;
      double dot = 0;
      for (int c = 0; c < D; ++c)
        dot += static_cast<double>(from_bits(in.q[qi + c], p.dtype)) * from_bits(in.k[kj + c], p.dtype);
      const double e = std::exp(dot * p.scale());
      z += e;
      for (int c = 0; c < D; ++c) num[c] += e * from_bits(in.v[kj + c], p.dtype);
    }
    for (int c = 0; c < D; ++c) res.out.push_back(num[c] / z);
    res.lse.push_back(std::log(z));
  }
  return res;
}

}  // namespace

TEST_CASE("sinks: the references equal a brute-force softmax with the sink in its denominator",
          "[cpu][reference_mods]") {
  for (const auto& [name, p] : sink_cases()) {
    INFO(name << ": " << p.describe());
    REQUIRE(validate(p).empty());
    const HostInputs in = make_inputs(p, InputKind::random, 13);
    const auto rows = all_rows(p);
    const RowResults want = brute_force_sinks(p, in);
    const RowResults ref = reference_fp64(p, in, rows), loops = naive_loops(p, in, rows);
    const RowResults f32 = reference_fp32(p, in, rows);
    CHECK(max_abs_diff(ref.out, want.out) < 1e-12);
    CHECK(max_abs_diff(ref.lse, want.lse) < 1e-12);
    CHECK(max_abs_diff(loops.out, want.out) < 1e-12);
    CHECK(max_abs_diff(loops.lse, want.lse) < 1e-12);
    CHECK(max_abs_diff(f32.out, want.out) < 1e-5);
    CHECK(max_abs_diff(f32.lse, want.lse) < 1e-5);
    // The backward reference's forward (its O and the LSE it saves) is the same softmax.
    const BwdResults b = reference_bwd_fp64(p, in, make_grad_output(p, 13));
    for (size_t n = 0; n < rows.size(); ++n) {
      const RowId& r = rows[n];
      INFO("b " << r.b << " h " << r.h << " i " << r.i);
      REQUIRE(std::fabs(b.lse[p.lse_index(r.b, r.h, r.i)] - want.lse[n]) < 1e-12);
      const size_t qi = (static_cast<size_t>(p.q_token(r.b, r.i)) * p.heads_q + r.h) * p.head_dim;
      for (int c = 0; c < p.head_dim; ++c)
        REQUIRE(std::fabs(b.out[qi + c] - want.out[n * p.head_dim + c]) < 1e-12);
    }
  }
}

TEST_CASE("sinks: a row that sees no key has O = 0 and LSE = its head's sink, and no gradient",
          "[cpu][reference_mods]") {
  for (const auto& [name, p] : sink_cases()) {
    INFO(name << ": " << p.describe());
    const HostInputs in = make_inputs(p, InputKind::random, 17);
    const auto rows = all_rows(p);
    const auto dout = make_grad_output(p, 17);
    const RowResults results[] = {reference_fp64(p, in, rows), reference_fp32(p, in, rows),
                                  naive_loops(p, in, rows)};
    const BwdResults grads[] = {reference_bwd_fp64(p, in, dout), reference_bwd_fp32(p, in, dout),
                                naive_loops_bwd(p, in, dout)};
    int empty = 0;
    for (size_t n = 0; n < rows.size(); ++n) {
      const RowId& r = rows[n];
      const KeySpan span = p.key_span(r.b, r.i);
      bool sees = false;  // from the definition, not from the span
      for (int j = 0; j < p.len_k(r.b); ++j)
        sees = sees || mask_mod(p.mask_spec(), p.len_q(r.b), p.len_k(r.b), r.i, j);
      REQUIRE(sees == (span.lo <= span.hi));
      if (sees) continue;
      ++empty;
      INFO("b " << r.b << " h " << r.h << " i " << r.i);
      const double sink = p.sinks[r.h];
      for (const RowResults& res : results) {
        CHECK(res.lse[n] == sink);
        for (int c = 0; c < p.head_dim; ++c) CHECK(res.out[n * p.head_dim + c] == 0.0);
      }
      const size_t qi = (static_cast<size_t>(p.q_token(r.b, r.i)) * p.heads_q + r.h) * p.head_dim;
      for (const BwdResults& g : grads) {
        CHECK(g.lse[p.lse_index(r.b, r.h, r.i)] == sink);
        CHECK(g.delta[p.lse_index(r.b, r.h, r.i)] == 0.0);
        for (int c = 0; c < p.head_dim; ++c) {
          CHECK(g.out[qi + c] == 0.0);
          CHECK(g.dq[qi + c] == 0.0);
        }
      }
    }
    if (name.find("window (5, 2)") == std::string::npos) CHECK(empty > 0);  // the others have such rows
  }
}

TEST_CASE("sinks: a sink of -50 changes nothing that a double can see", "[cpu][reference_mods]") {
  // e^-50 ~ 2e-22 beside a denominator >= e^{row max} ~ 1: below double's rounding. Every row
  // sees a key (Sq <= Sk; the packed sequences all have keys), so no LSE is -inf without sinks.
  Problem dense = shape(2, 20, 33, 4, 2, 16, true);
  dense.window_left = 6;
  Problem packed = shape(1, 1, 1, 4, 1, 16, true);
  set_varlen(&packed, {7, 0, 1, 12}, {9, 2, 1, 30});
  for (const Problem& off : {dense, packed}) {
    Problem on = off;
    on.sinks.assign(on.heads_q, -50.f);
    INFO(on.describe());
    REQUIRE(validate(on).empty());
    const HostInputs in = make_inputs(off, InputKind::random, 19);
    const auto rows = all_rows(off);
    const auto dout = make_grad_output(off, 19);
    const RowResults a = reference_fp64(off, in, rows), b = reference_fp64(on, in, rows);
    for (double l : a.lse) REQUIRE(std::isfinite(l));
    CHECK(max_abs_diff(a.out, b.out) < 1e-15);
    CHECK(max_abs_diff(a.lse, b.lse) < 1e-14);
    const BwdResults ga = reference_bwd_fp64(off, in, dout), gb = reference_bwd_fp64(on, in, dout);
    for (auto [t, x, y] : {std::make_tuple("dQ", &ga.dq, &gb.dq), std::make_tuple("dK", &ga.dk, &gb.dk),
                           std::make_tuple("dV", &ga.dv, &gb.dv),
                           std::make_tuple("LSE", &ga.lse, &gb.lse)}) {
      INFO(t);
      CHECK(max_abs_diff(*x, *y) < 1e-14);
    }
    CHECK(ga.dsinks.empty());
    REQUIRE(gb.dsinks.size() == static_cast<size_t>(on.heads_q));
    for (double d : gb.dsinks) CHECK(std::fabs(d) < 1e-18);
  }
}

TEST_CASE("sinks: central finite differences of L = sum(O * dO) match dsinks and dQ, dK, dV",
          "[cpu][reference_mods]") {
  // Sinks are multiples of 2^-12 (the helper's exact step), one above the largest scores and
  // some below; causal with Sq > Sk leaves rows with no key (their LSE is the sink, D = 0).
  Problem causal = shape(1, 9, 6, 4, 2, 8, true);
  causal.sinks = {2.5f, -1.f, 0.f, 1.25f};
  Problem mods = shape(1, 6, 9, 2, 1, 8, false);
  mods.sinks = {0.75f, -0.5f};
  mods.softcap = 0.8f;
  mods.alibi = true;
  mods.window_left = 4;
  mods.window_right = 1;
  Problem packed = shape(1, 1, 1, 2, 1, 8, true);
  set_varlen(&packed, {4, 0, 1, 5}, {6, 2, 1, 3});
  packed.sinks = {1.5f, -0.25f};
  for (const Problem& p : {causal, mods, packed}) {
    INFO(p.describe());
    REQUIRE(validate(p).empty());
    const BwdResults eig = fl_test::require_finite_differences(p, 23);
    double largest = 0;
    for (double g : eig.dsinks) largest = std::max(largest, std::fabs(g));
    CHECK(largest > 0.01);  // the check compared gradients, not zeros
  }
}

TEST_CASE("problems with masks or modifiers: validated, described, refused by every rung without them",
          "[cpu][reference_mods]") {
  Problem p = shape(1, 64, 64, 2, 2, 64, false);
  p.window_left = -2;
  CHECK(validate(p).find("--window") != std::string::npos);
  p.window_left = 8;
  p.softcap = -1.f;
  CHECK(validate(p).find("--softcap") != std::string::npos);
  p.softcap = 30.f;
  p.doc_starts = {0, 10, 10, 64};
  CHECK(validate(p).find("increase") != std::string::npos);
  p.doc_starts = {0, 10, 64};
  REQUIRE(validate(p).empty());
  CHECK(p.describe().find("window=(8,-1)") != std::string::npos);
  CHECK(p.describe().find("softcap=30") != std::string::npos);
  CHECK(p.describe().find("docs=2") != std::string::npos);
  // Only the unmasked pairs count as FLOPs: document of 10 and of 54 tokens, keys from i - 8 on.
  double pairs = 0;
  for (int i = 0; i < 64; ++i) {
    const int d0 = i < 10 ? 0 : 10, d1 = i < 10 ? 9 : 63;
    pairs += d1 - std::max(d0, i - 8) + 1;
  }
  CHECK(unmasked_pairs(p) == pairs * p.heads_q);
  // A rung without Rung::mods refuses in one line; one with it is not refused for them.
  DeviceInfo dev;
  dev.cc_major = 9;
  dev.cc_minor = 0;
  Rung r;
  r.number = 15;
  r.name = "persistent";
  const std::string why = generic_supports(r, p, dev);
  CHECK(why.find("not supported by this rung") != std::string::npos);
  CHECK(why.find('\n') == std::string::npos);
  r.mods = true;
  CHECK(generic_supports(r, p, dev).empty());
  Problem plain = shape(1, 64, 64, 2, 2, 64, true);
  CHECK(!plain.has_mods());
  r.mods = false;
  CHECK(generic_supports(r, plain, dev).empty());
}
