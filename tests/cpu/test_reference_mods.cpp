// The fp64 references with masks and score modifiers beyond the causal mask (Problem's window,
// prefix, doc_starts, softcap, alibi; masks.h's rules), checked on the CPU: the Eigen references
// against the textbook loops, forward and backward; each mask against its definition through the
// references themselves (a masked key changes nothing); softcapping and ALiBi against the
// formulas; the gradients against central finite differences; and every rung without
// Rung::mods refusing such a problem in one line.
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
