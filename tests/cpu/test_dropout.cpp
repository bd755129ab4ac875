// Attention dropout on the CPU (dropout.h, the references' dropout): Philox4x32-10 against the
// published known-answer vectors (Random123's kat_vectors, Salmon et al. 2011); the cells'
// layout, and the forward's and the backward's walks over their fragments against the mask
// function; the mask's keep fraction over many seeds within 5 sigma of a binomial; the fp64
// references with dropout against their textbook loops and against the formula; the gradients
// against central finite differences (the mask fixed by the seed); the CLI flag; and every rung
// without Rung::dropout refusing it in one line.
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <type_traits>
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

TEST_CASE("the cells: every element of a row block has its own (cell, word, byte), 16 per call",
          "[cpu][dropout]") {
  std::map<std::pair<uint32_t, uint32_t>, std::set<std::pair<int, int>>> cells;
  for (int i = 0; i < 64; ++i)
    for (int j = 0; j < 256; ++j) {
      const int w = dropout_word(j), b = dropout_byte(i, j);
      REQUIRE(w >= 0);
      REQUIRE(w < 4);
      REQUIRE(b >= 0);
      REQUIRE(b < 4);
      CHECK(cells[{dropout_row_cell(i), dropout_key_cell(j)}].insert({w, b}).second);
    }
  CHECK(cells.size() == 64u * 256u / 16u);  // dense: every call's 16 bytes used
  for (const auto& kv : cells) CHECK(kv.second.size() == 16u);
  // A forward thread (g, t) holds rows g, g + 8 and keys 8n + 2t, + 1: of a 32-key block, one
  // cell, element 4n + 2h + e at word n, byte 2h + e.
  for (int g = 0; g < 8; ++g)
    for (int t = 0; t < 4; ++t)
      for (int n = 0; n < 4; ++n)
        for (int h = 0; h < 2; ++h)
          for (int e = 0; e < 2; ++e) {
            const int i = 16 + g + 8 * h, j = 32 + 8 * n + 2 * t + e;
            CHECK(dropout_row_cell(i) == dropout_row_cell(16 + g));
            CHECK(dropout_key_cell(j) == dropout_key_cell(32 + 2 * t));
            CHECK(4 * dropout_word(j) + dropout_byte(i, j) == 4 * n + 2 * h + e);
          }
  // dropout_keep reads its element's byte of its cell's call, against keep_threshold.
  const DropoutKey k = dropout_key(12345, 678, keep_threshold(0.4f));
  for (int j = 0; j < 64; ++j) {
    uint32_t w[4];
    dropout_cell(k, 1u * 3u + 2u, dropout_row_cell(5), dropout_key_cell(j), w);
    const uint32_t byte = (w[dropout_word(j)] >> (8 * dropout_byte(5, j))) & 0xffu;
    CHECK(dropout_keep(k, 1, 2, 3, 5, j) == (byte <= k.threshold));
  }
}

TEST_CASE("byte_perm: the host's PRMT", "[cpu][dropout]") {
  CHECK(byte_perm(0x33221100u, 0x77665544u, 0x3210u) == 0x33221100u);
  CHECK(byte_perm(0x33221100u, 0x77665544u, 0x7654u) == 0x77665544u);
  CHECK(byte_perm(0x33221100u, 0x77665544u, 0x6420u) == 0x66442200u);
  CHECK(byte_perm(0x33221100u, 0x77665544u, 0x7531u) == 0x77553311u);
}

TEST_CASE("the forward's fragment walk equals dropout_keep, blocks at 0 or 16 mod 32",
          "[cpu][dropout]") {
  // Every thread of a warp, its two rows of a 16-row slice, on S blocks of 64, 80, 128, 176 keys
  // (rung 15's tiles) at several block starts: an element is zeroed iff dropout_keep drops it.
  const DropoutKey k = dropout_key(0xfeedbeefcafeull, 77, keep_threshold(0.45f));
  const int heads_q = 5, b = 1, h = 3;
  const uint32_t bh = static_cast<uint32_t>(b * heads_q + h);
  int dropped = 0, seen = 0;
  auto check = [&](auto block) {
    constexpr int BLOCK_N = decltype(block)::value;
    for (int blk = 0; blk < 4; ++blk) {
      const int key0 = blk * BLOCK_N;
      for (int row0 : {0, 48})
        for (int lane = 0; lane < 32; ++lane) {
          const int g = lane / 4, t = lane % 4;
          float S[BLOCK_N / 2];
          for (float& x : S) x = 1.f;
          if (BLOCK_N % 32 != 0 && (key0 & 16))
            dropout_fwd_fragment<BLOCK_N, 1>(S, k, bh, dropout_row_cell(row0 + g), key0, t);
          else
            dropout_fwd_fragment<BLOCK_N, 0>(S, k, bh, dropout_row_cell(row0 + g), key0, t);
          for (int n = 0; n < BLOCK_N / 8; ++n)
            for (int hh = 0; hh < 2; ++hh)
              for (int e = 0; e < 2; ++e) {
                const int i = row0 + g + 8 * hh, j = key0 + 8 * n + 2 * t + e;
                INFO("BLOCK_N " << BLOCK_N << " row " << i << " key " << j);
                CHECK((S[4 * n + 2 * hh + e] != 0.f) == dropout_keep(k, b, h, heads_q, i, j));
                dropped += S[4 * n + 2 * hh + e] == 0.f;
                ++seen;
              }
        }
    }
  };
  check(std::integral_constant<int, 64>{});
  check(std::integral_constant<int, 80>{});
  check(std::integral_constant<int, 128>{});
  check(std::integral_constant<int, 176>{});
  CHECK(dropped > seen / 4);  // the walk drops something: about 45% of it
  CHECK(dropped < seen * 2 / 3);
}

TEST_CASE("the backward's pair exchange equals dropout_keep (rung 16's drop_keep_bits, host copy)",
          "[cpu][dropout]") {
  // Rung 14's S^T fragment: warp `warp` of a 64-key warpgroup, lane (g, q) holds keys
  // key0 + 16 warp + g, + 8 of queries q0 + 8c + 2q, + 1. Each lane makes the call of its key
  // parity; the lane ^ 4 shuffle is the array read below. Byte h + 2hk of the query parity's word.
  const DropoutKey k = dropout_key(0x0123456789ull, (uint64_t(5) << 32) + 3, keep_threshold(0.3f));
  const int heads_q = 4, b = 2, h = 1;
  const uint32_t bh = static_cast<uint32_t>(b * heads_q + h);
  for (int key0 : {0, 128, 64})
    for (int warp = 0; warp < 4; ++warp)
      for (int q0 : {0, 64, 32}) {
        uint32_t mine[32], send[32];
        for (int lane = 0; lane < 32; ++lane) {
          const int g = lane / 4, q = lane % 4, key_a = key0 + 16 * warp + g;
          const int odd = key_a & 1, upper = (key_a >> 4) & 1;
          uint32_t w[4];
          dropout_cell(k, bh, dropout_row_cell(q0 + 2 * q + odd), dropout_key_cell(key_a), w);
          dropout_bwd_pack(w, upper, odd, mine[lane], send[lane]);
        }
        for (int lane = 0; lane < 32; ++lane) {
          const int g = lane / 4, q = lane % 4, key_a = key0 + 16 * warp + g;
          uint32_t words[2];
          dropout_bwd_rows(mine[lane], send[lane ^ 4], key_a & 1, words[0], words[1]);
          for (int hh = 0; hh < 2; ++hh)
            for (int hk = 0; hk < 2; ++hk)
              for (int e = 0; e < 2; ++e) {
                const int i = q0 + 8 * hh + 2 * q + e, j = key_a + 8 * hk;
                INFO("query " << i << " key " << j);
                CHECK(dropout_kept_byte(words[e], hh + 2 * hk, k.threshold) ==
                      dropout_keep(k, b, h, heads_q, i, j));
              }
        }
      }
}

TEST_CASE(
    "keep_threshold: floor((1 - p) 255) as FlashAttention 2's; keep probability (t + 1) / 256",
    "[cpu][dropout]") {
  CHECK(keep_threshold(0.f) == 255u);
  CHECK(keep_threshold(0.5f) == 127u);
  CHECK(keep_threshold(0.1f) == 229u);
  CHECK(keep_threshold(0.75f) == 63u);
  CHECK(keep_threshold(0.999f) == 0u);
  CHECK(keep_threshold(1.f) == 0u);
  CHECK(keep_probability(255u) == 1.0);
  CHECK(keep_probability(229u) == Approx(230.0 / 256.0));
  const DropoutParams d = make_dropout(0.2f, 7, 9);
  CHECK(d.rp == Approx(1.0 / (1.0 - 0.2f)));
  CHECK(d.threshold == keep_threshold(0.2f));
  CHECK(d.state == nullptr);
  CHECK(d.rounds == kDropoutRounds);
}

TEST_CASE("the dropout generator: FlashAttention 2's 7 rounds, the published 10 as the ablation",
          "[cpu][dropout]") {
  STATIC_REQUIRE(kDropoutRounds == 7);
  // Two generators: their outputs differ, and each mask keeps (t + 1) / 256 within 5 sigma.
  uint32_t a[4] = {1u, 2u, 3u, 4u}, b[4] = {1u, 2u, 3u, 4u};
  philox4x32_rounds<7>(a, 5u, 6u);
  philox4x32_rounds<10>(b, 5u, 6u);
  CHECK((a[0] != b[0] || a[1] != b[1] || a[2] != b[2] || a[3] != b[3]));
  const uint32_t t = keep_threshold(0.3f);
  const double keep = keep_probability(t);
  for (int rounds : {7, 10}) {
    INFO("rounds " << rounds);
    const DropoutKey k = dropout_key(0xabcdef12345ull, 99, t, rounds);
    CHECK(k.rounds == rounds);
    long long kept = 0, n = 0, differ = 0;
    const DropoutKey other = dropout_key(0xabcdef12345ull, 99, t, rounds == 7 ? 10 : 7);
    for (int i = 0; i < 64; ++i)
      for (int j = 0; j < 256; ++j, ++n) {
        const bool keep_ij = dropout_keep(k, 0, 1, 2, i, j);
        kept += keep_ij;
        differ += keep_ij != dropout_keep(other, 0, 1, 2, i, j);
      }
    const double sigma = std::sqrt(keep * (1 - keep) / n);
    CHECK(std::fabs(static_cast<double>(kept) / n - keep) <= 5 * sigma);
    CHECK(differ > n / 10);  // another generator, another mask
  }
  Problem p = shape(1, 64, 64, 2, 2, 64, false);
  p.dropout_p = 0.2f;
  CHECK(p.dropout_key().rounds == kDropoutRounds);
  p.dropout_rounds = 10;
  CHECK(p.dropout_key().rounds == 10);
  CHECK(validate(p).empty());
  CHECK(make_attn_params(p).dropout.rounds == 10);
  CHECK(problem_of(make_attn_params(p)).dropout_rounds == 10);
  p.dropout_rounds = 8;
  CHECK(validate(p).find("--dropout-rounds") != std::string::npos);
}

TEST_CASE("the mask keeps (t + 1) / 256 of the elements, within 5 sigma, seed by seed and over all",
          "[cpu][dropout]") {
  for (float p : {0.1f, 0.17f, 0.5f, 0.9f}) {
    INFO("p = " << p);
    const double keep = keep_probability(keep_threshold(p));
    CHECK(std::fabs(keep - (1.0 - p)) < 1.0 / 256);  // the 8-bit rule's bias: below one step
    long long kept_all = 0, n_all = 0;
    for (uint64_t seed = 1; seed <= 64; ++seed) {
      const DropoutKey k = dropout_key(seed * 0x9E3779B97F4A7C15ull, seed * 3, keep_threshold(p));
      long long kept = 0, n = 0;
      for (int bh = 0; bh < 2; ++bh)
        for (int i = 0; i < 32; ++i)
          for (int j = 0; j < 96; ++j, ++n) kept += dropout_keep(k, bh, 1, 3, i, j);
      const double sigma = std::sqrt(keep * (1 - keep) / n);
      CHECK(std::fabs(static_cast<double>(kept) / n - keep) <= 5 * sigma);
      kept_all += kept;
      n_all += n;
    }
    const double sigma = std::sqrt(keep * (1 - keep) / n_all);
    CHECK(std::fabs(static_cast<double>(kept_all) / n_all - keep) <= 5 * sigma);
  }
}

TEST_CASE("the mask changes with the seed, the offset and each coordinate", "[cpu][dropout]") {
  const uint32_t t = keep_threshold(0.5f);
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
  // ALiBi with dropout: the bias before the softmax, the mask after it (rung 16 compiles the two).
  Problem alibi = shape(1, 33, 70, 4, 2, 32, true);
  alibi.alibi = true;
  add("ALiBi, causal, Sq < Sk, p = 0.3", alibi, 0.3f);
  Problem alibi_dense = shape(2, 40, 30, 4, 2, 32, false);
  alibi_dense.alibi = true;
  add("ALiBi, dense, Sq > Sk, p = 0.2", alibi_dense, 0.2f);
  Problem alibi_packed = packed;
  alibi_packed.alibi = true;
  alibi_packed.window_left = 12;
  add("ALiBi, packed, causal window (12, 0), p = 0.25", alibi_packed, 0.25f);
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
    "the seed; with sinks, with ALiBi)",
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
  Problem a = shape(1, 9, 13, 4, 2, 8, true);  // ALiBi's bias and the mask together
  a.alibi = true;
  a.dropout_p = 0.3f;
  a.dropout_seed = 7;
  fl_test::require_finite_differences(a, 41);
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
    CHECK(o.problem.dropout_rounds == kDropoutRounds);
  }
  {
    Options o;
    const char* argv[] = {"x", "--dropout", "0.1", "--dropout-rounds", "10"};
    REQUIRE(parse_cli(5, argv, &o).ok);
    CHECK(o.problem.dropout_rounds == 10);
    CHECK(o.problem.describe().find("philox_rounds=10") != std::string::npos);
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
