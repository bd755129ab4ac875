// Attention dropout on the CPU (dropout.h, the references' dropout): Philox4x32-10 against the
// published known-answer vectors (Random123's kat_vectors, Salmon et al. 2011); the key groups'
// layout; the mask's keep fraction over many seeds within 5 sigma of a binomial; the fp64
// references with dropout against their textbook loops and against the formula; the gradients
// against central finite differences (the mask fixed by the seed); the CLI flag; and every rung
// without Rung::dropout refusing it in one line.
#include <cmath>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "catch_compat.h"
#include "finite_differences.h"
#include "flashladder/cli.h"
#include "flashladder/dropout.h"
#include "flashladder/reference.h"
#include "flashladder/reference_bwd.h"
#include "flashladder/registry.h"
#include "max_diff.h"
#include "problem_shape.h"

using namespace fl;
using fl_test::max_abs_diff;
using fl_test::shape;

TEST_CASE("Philox4x32-10 gives the published known answers", "[cpu][dropout]") {
  // Random123's tests/kat_vectors, the three philox4x32 10 lines: counter, key, result.
  struct Kat {
    uint32_t ctr[4], key[2], want[4];
  };
  const Kat kats[] = {
      {{0u, 0u, 0u, 0u}, {0u, 0u}, {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}},
      {{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu},
       {0xffffffffu, 0xffffffffu},
       {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}},
      {{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
       {0xa4093822u, 0x299f31d0u},
       {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}},
  };
  for (const Kat& k : kats) {
    uint32_t c[4] = {k.ctr[0], k.ctr[1], k.ctr[2], k.ctr[3]};
    philox4x32(c, k.key[0], k.key[1]);
    for (int w = 0; w < 4; ++w) CHECK(c[w] == k.want[w]);
  }
}

TEST_CASE("the key groups: every key of a row has its own (group, word), four keys per call",
          "[cpu][dropout]") {
  std::set<std::pair<uint32_t, int>> seen;
  for (int j = 0; j < 4096; ++j) {
    const uint32_t g = dropout_group(j);
    const int w = dropout_word(j);
    REQUIRE(w >= 0);
    REQUIRE(w < 4);
    CHECK(seen.insert({g, w}).second);
    CHECK(g < 4096 / 4);  // dense: 4096 keys use groups 0 .. 1023
  }
  // The forward thread t of a 16-key chunk u holds keys 16u + 2t, +1, +8, +9: one group, words 0-3.
  for (int u = 0; u < 4; ++u)
    for (int t = 0; t < 4; ++t) {
      const int keys[4] = {16 * u + 2 * t, 16 * u + 2 * t + 1, 16 * u + 2 * t + 8,
                           16 * u + 2 * t + 9};
      for (int w = 0; w < 4; ++w) {
        CHECK(dropout_group(keys[w]) == static_cast<uint32_t>(4 * u + t));
        CHECK(dropout_word(keys[w]) == w);
      }
    }
  // dropout_keep reads its element's bit of the group's call.
  const DropoutKey k = dropout_key(12345, 678, keep_threshold(0.4));
  for (int j = 0; j < 64; ++j)
    CHECK(dropout_keep(k, 1, 2, 3, 5, j) ==
          (((dropout_keep4(k, 1u * 3u + 2u, 5, dropout_group(j)) >> dropout_word(j)) & 1u) != 0));
}

TEST_CASE("keep_threshold: floor((1 - p) 2^32), saturating", "[cpu][dropout]") {
  CHECK(keep_threshold(0.0) == 0xffffffffu);
  CHECK(keep_threshold(0.5) == 0x80000000u);
  CHECK(keep_threshold(0.75) == 0x40000000u);
  CHECK(keep_threshold(1.0) == 0u);
  const DropoutParams d = make_dropout(0.2f, 7, 9);
  CHECK(d.rp == Approx(1.0 / (1.0 - 0.2f)));
  CHECK(d.state == nullptr);
}

TEST_CASE("the mask keeps 1 - p of the elements, within 5 sigma, seed by seed and over all",
          "[cpu][dropout]") {
  for (double p : {0.1, 0.17, 0.5, 0.9}) {
    INFO("p = " << p);
    long long kept_all = 0, n_all = 0;
    for (uint64_t seed = 1; seed <= 64; ++seed) {
      const DropoutKey k = dropout_key(seed * 0x9E3779B97F4A7C15ull, seed * 3, keep_threshold(p));
      long long kept = 0, n = 0;
      for (int bh = 0; bh < 2; ++bh)
        for (int i = 0; i < 32; ++i)
          for (int j = 0; j < 96; ++j, ++n) kept += dropout_keep(k, bh, 1, 3, i, j);
      const double sigma = std::sqrt(p * (1 - p) / n);
      CHECK(std::fabs(static_cast<double>(kept) / n - (1 - p)) <= 5 * sigma);
      kept_all += kept;
      n_all += n;
    }
    const double sigma = std::sqrt(p * (1 - p) / n_all);
    CHECK(std::fabs(static_cast<double>(kept_all) / n_all - (1 - p)) <= 5 * sigma);
  }
}

TEST_CASE("the mask changes with the seed, the offset and each coordinate", "[cpu][dropout]") {
  const uint32_t t = keep_threshold(0.5);
  auto mask = [&](uint64_t seed, uint64_t offset, int b, int h, int i) {
    std::vector<bool> m;
    const DropoutKey k = dropout_key(seed, offset, t);
    for (int j = 0; j < 256; ++j) m.push_back(dropout_keep(k, b, h, 4, i, j));
    return m;
  };
  const auto base = mask(1, 0, 0, 0, 0);
  CHECK(base == mask(1, 0, 0, 0, 0));                  // a function of its arguments
  CHECK(base != mask(2, 0, 0, 0, 0));                  // seed
  CHECK(base != mask(1, 4, 0, 0, 0));                  // offset, low word
  CHECK(base != mask(1, uint64_t(1) << 32, 0, 0, 0));  // offset, high word
  CHECK(base != mask(1, 0, 1, 0, 0));                  // sequence
  CHECK(base != mask(1, 0, 0, 1, 0));                  // head
  CHECK(base != mask(1, 0, 0, 0, 1));                  // query row
}

namespace {

std::vector<std::pair<std::string, Problem>> dropout_cases() {
  std::vector<std::pair<std::string, Problem>> out;
  auto add = [&](const std::string& name, Problem p, float drop) {
    p.dropout_p = drop;
    p.dropout_seed = 0x1234567890abcdefull;
    p.dropout_offset = 40;
    out.push_back({name, p});
  };
  add("dense, p = 0.17", shape(2, 40, 40, 4, 2, 32, false), 0.17f);
  add("causal, Sq < Sk, p = 0.5", shape(1, 33, 70, 4, 1, 32, true), 0.5f);
  add("causal, Sq > Sk (empty rows), p = 0.3", shape(1, 50, 30, 2, 2, 16, true), 0.3f);
  Problem win = shape(1, 64, 64, 2, 1, 32, true);
  win.window_left = 9;
  add("window (9, 0), p = 0.2", win, 0.2f);
  Problem sinks = shape(1, 40, 40, 4, 2, 16, false);
  sinks.sinks = {-1.5f, 0.25f, 2.f, 4.5f};
  add("sinks, p = 0.25", sinks, 0.25f);
  Problem packed = shape(1, 1, 1, 4, 2, 32, false);
  set_varlen(&packed, {40, 1, 0, 45}, {50, 9, 3, 45});
  packed.causal = true;
  add("packed, causal, p = 0.4", packed, 0.4f);
  return out;
}

}  // namespace

TEST_CASE("references with dropout equal their textbook loops; the LSE is the undropped one",
          "[cpu][dropout]") {
  for (const auto& [name, p] : dropout_cases()) {
    INFO(name << ": " << p.describe());
    REQUIRE(validate(p).empty());
    const HostInputs in = make_inputs(p, InputKind::random, 3);
    const auto rows = all_rows(p);
    const RowResults ref = reference_fp64(p, in, rows), loops = naive_loops(p, in, rows);
    CHECK(max_abs_diff(ref.out, loops.out) < 1e-12);
    CHECK(max_abs_diff(ref.lse, loops.lse) < 1e-12);
    Problem off = p;
    off.dropout_p = 0;
    const RowResults undropped = reference_fp64(off, in, rows);
    CHECK(max_abs_diff(ref.lse, undropped.lse) == 0.0);
    CHECK(max_abs_diff(ref.out, undropped.out) > 1e-3);  // the mask does something
    const auto dout = make_grad_output(p, 3);
    const BwdResults b = reference_bwd_fp64(p, in, dout), bl = naive_loops_bwd(p, in, dout);
    for (auto [t, got, want] :
         {std::make_tuple("O", &b.out, &bl.out), std::make_tuple("dQ", &b.dq, &bl.dq),
          std::make_tuple("dK", &b.dk, &bl.dk), std::make_tuple("dV", &b.dv, &bl.dv),
          std::make_tuple("D", &b.delta, &bl.delta)}) {
      INFO(t);
      CHECK(max_abs_diff(*got, *want) < 1e-11);
    }
    CHECK(max_abs_diff(b.dsinks, bl.dsinks) < 1e-11);
  }
}

TEST_CASE("the forward reference with dropout is the formula O = (P ∘ M / (1 - p)) V",
          "[cpu][dropout]") {
  // P from the undropped reference's LSE, the mask from dropout_keep element by element, O
  // summed here in plain double loops: an oracle that shares only the mask function.
  Problem p = shape(1, 24, 37, 2, 1, 16, true);
  p.dropout_p = 0.35f;
  p.dropout_seed = 99;
  p.dropout_offset = 8;
  const HostInputs in = make_inputs(p, InputKind::random, 11);
  const auto rows = all_rows(p);
  const RowResults got = reference_fp64(p, in, rows);
  const DropoutKey key = dropout_key(p.dropout_seed, p.dropout_offset, keep_threshold(p.dropout_p));
  const double rp = 1.0 / (1.0 - static_cast<double>(p.dropout_p));
  const int D = p.head_dim;
  int dropped = 0, seen = 0;
  for (size_t n = 0; n < rows.size(); ++n) {
    const RowId r = rows[n];
    const int hk = r.h / p.group();
    for (int c = 0; c < D; ++c) {
      double o = 0;
      for (int j = 0; j <= r.i + p.causal_offset() && j < p.seqlen_k; ++j) {
        double s = 0;
        for (int e = 0; e < D; ++e)
          s += static_cast<double>(in.q_at(
                   (static_cast<size_t>(p.q_token(0, r.i)) * p.heads_q + r.h) * D + e, p.dtype)) *
               in.k_at((static_cast<size_t>(p.k_token(0, j)) * p.heads_kv + hk) * D + e, p.dtype);
        const double prob = std::exp(s * p.scale() - got.lse[n]);
        const bool keep = dropout_keep(key, r.b, r.h, p.heads_q, r.i, j);
        if (c == 0) {
          ++seen;
          dropped += !keep;
        }
        o += keep ? prob * rp *
                        in.v_at((static_cast<size_t>(p.k_token(0, j)) * p.heads_kv + hk) * D + c,
                                p.dtype)
                  : 0.0;
      }
      CHECK(std::fabs(got.out[n * D + c] - o) < 1e-12);
    }
  }
  CHECK(dropped > 0);
  CHECK(dropped < seen);
}

TEST_CASE(
    "dropout: central finite differences of L = sum(O * dO) match dQ, dK, dV (the mask fixed by "
    "the seed)",
    "[cpu][dropout]") {
  Problem p = shape(1, 9, 13, 2, 1, 8, true);
  p.dropout_p = 0.3f;
  p.dropout_seed = 5;
  fl_test::require_finite_differences(p, 31);
  Problem q = shape(1, 7, 7, 2, 2, 8, false);
  q.dropout_p = 0.6f;
  q.dropout_seed = 6;
  q.sinks = {0.5f, -1.0f};
  fl_test::require_finite_differences(q, 37);
}

TEST_CASE("--dropout parses to Problem::dropout_p, seeded by --seed; bad values refused",
          "[cpu][dropout]") {
  {
    Options o;
    const char* argv[] = {"x", "--dropout", "0.1", "--seed", "77"};
    REQUIRE(parse_cli(5, argv, &o).ok);
    CHECK(o.problem.dropout_p == Approx(0.1f));
    CHECK(o.problem.dropout_seed == 77u);
    CHECK(o.problem.dropout());
    CHECK(o.shape_set);
    CHECK(o.problem.describe().find("dropout=") != std::string::npos);
  }
  for (const char* bad : {"1", "-0.1", "x"}) {
    Options o;
    const char* argv[] = {"x", "--dropout", bad};
    const ParseResult r = parse_cli(3, argv, &o);
    CHECK(!r.ok);
    CHECK(r.error.find("--dropout") != std::string::npos);
  }
  Problem p = shape(1, 8, 8, 1, 1, 16, false);
  p.dropout_p = 1.0f;
  CHECK(validate(p).find("--dropout") != std::string::npos);
  const AttnParams a = make_attn_params([] {
    Problem q = shape(1, 8, 8, 1, 1, 16, false);
    q.dropout_p = 0.25f;
    q.dropout_seed = 3;
    q.dropout_offset = 12;
    return q;
  }());
  CHECK(a.dropout.p == 0.25f);
  CHECK(a.dropout.threshold == keep_threshold(0.25f));
  CHECK(a.dropout.seed == 3u);
  CHECK(a.dropout.offset == 12u);
  const Problem back = problem_of(a);
  CHECK(back.dropout_p == 0.25f);
  CHECK(back.dropout_offset == 12u);
}

TEST_CASE("a rung without Rung::dropout refuses dropout in one line", "[cpu][dropout]") {
  Problem p = shape(1, 64, 64, 2, 2, 64, true);
  p.dropout_p = 0.1f;
  DeviceInfo dev;
  dev.cc_major = 9;
  dev.cc_minor = 0;
  Rung r;
  r.number = 15;
  r.name = "persistent";
  const std::string why = generic_supports(r, p, dev);
  CHECK(why.find("dropout") != std::string::npos);
  CHECK(why.find('\n') == std::string::npos);
  r.dropout = true;
  CHECK(generic_supports(r, p, dev).empty());
}
