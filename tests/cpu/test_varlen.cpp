// Variable-length batches (Problem::cu_seqlens_q/k): the packed description, its command line,
// and the fp64 references (forward and backward) on a packed batch against the same sequences run
// one by one as dense problems (the references and the checks take one description for both).
#include <cmath>
#include <vector>

#include "catch_compat.h"
#include "problem_shape.h"
#include "flashladder/check.h"
#include "flashladder/check_bwd.h"
#include "flashladder/cli.h"
#include "flashladder/reference.h"
#include "flashladder/reference_bwd.h"

using namespace fl;

namespace {

/// Sequence @p b of the packed problem @p p as a dense problem of batch 1, with its inputs.
Problem one_sequence(const Problem& p, int b) {
  Problem s = p;
  s.cu_seqlens_q.clear();
  s.cu_seqlens_k.clear();
  s.batch = 1;
  s.seqlen_q = p.len_q(b);
  s.seqlen_k = p.len_k(b);
  return s;
}

std::vector<uint16_t> slice(const std::vector<uint16_t>& packed, int64_t token0, int tokens, int heads, int d) {
  const size_t w = static_cast<size_t>(heads) * d;
  return {packed.begin() + token0 * w, packed.begin() + (token0 + tokens) * w};
}

}  // namespace

TEST_CASE("set_varlen fills the prefix sums, the batch and the longest lengths", "[cpu][varlen]") {
  Problem p = fl_test::shape(1, 1, 1, 4, 2, 64, true);
  set_varlen(&p, {5, 0, 130}, {7, 3, 128});
  REQUIRE(p.varlen());
  REQUIRE(p.batch == 3);
  REQUIRE(p.cu_seqlens_q == std::vector<int>{0, 5, 5, 135});
  REQUIRE(p.cu_seqlens_k == std::vector<int>{0, 7, 10, 138});
  REQUIRE(p.seqlen_q == 130);
  REQUIRE(p.seqlen_k == 128);
  REQUIRE(p.total_q() == 135);
  REQUIRE(p.total_k() == 138);
  REQUIRE(p.len_q(1) == 0);
  REQUIRE(p.q_token(2, 4) == 9);
  REQUIRE(p.k_token(1, 2) == 9);
  REQUIRE(p.lse_index(2, 1, 0) == 135 + 5);  // [heads, total_q]
  REQUIRE(p.q_elements() == 135u * 4 * 64);
  REQUIRE(p.kv_elements() == 138u * 2 * 64);
  // Each sequence's causal diagonal is its own: sequence 0 has len_k - len_q = 2.
  REQUIRE(p.visible_keys(0, 0) == 3);
  REQUIRE(p.visible_keys(2, 0) == 0);    // offset -2: the first two rows see no key
  REQUIRE(p.visible_keys(2, 129) == 128);
  REQUIRE(validate(p).empty());
  // The metrics count each sequence's own pairs.
  Problem dense = fl_test::shape(1, 5, 7, 4, 2, 64, true);
  Problem only0 = p;
  set_varlen(&only0, {5}, {7});
  REQUIRE(unmasked_pairs(only0) == unmasked_pairs(dense));
}

TEST_CASE("a dense problem answers the same questions as before", "[cpu][varlen]") {
  const Problem p = fl_test::shape(3, 10, 12, 4, 2, 32, true);
  REQUIRE(!p.varlen());
  REQUIRE(p.q_token(2, 3) == 23);
  REQUIRE(p.k_token(1, 0) == 12);
  REQUIRE(p.lse_index(1, 2, 5) == (1u * 4 + 2) * 10 + 5);
  for (int i = 0; i < 10; ++i) REQUIRE(p.visible_keys(1, i) == p.visible_keys(i));
  REQUIRE(p.total_q() == 30);
}

TEST_CASE("a packed batch is validated with the flag to blame", "[cpu][varlen]") {
  Problem p = fl_test::shape(1, 1, 1, 2, 2, 64, false);
  set_varlen(&p, {4, 4}, {4});
  REQUIRE(validate(p).find("--seqlens-q and --seqlens-k") != std::string::npos);
  set_varlen(&p, {4, 4});
  p.seqlen_q = 3;  // a max_seqlen shorter than a sequence
  REQUIRE(validate(p).find("longer than max_seqlen") != std::string::npos);
  set_varlen(&p, {4, 4});
  p.page_size = 16;
  REQUIRE(validate(p).find("contiguous") != std::string::npos);
}

TEST_CASE("--seqlens-q and --seqlens-k make a packed batch", "[cpu][varlen][cli]") {
  Options o;
  const char* argv[] = {"prog", "--seqlens-q", "3,0,17", "--seqlens-k=5,2,17", "--heads", "4"};
  REQUIRE(parse_cli(6, argv, &o).ok);
  REQUIRE(o.problem.varlen());
  REQUIRE(o.problem.batch == 3);
  REQUIRE(o.problem.cu_seqlens_k == std::vector<int>{0, 5, 7, 24});
  REQUIRE(o.shape_set);
  Options bad;
  const char* argv2[] = {"prog", "--seqlens-q", "3,-1"};
  const ParseResult r = parse_cli(3, argv2, &bad);
  REQUIRE(!r.ok);
  REQUIRE(r.error.find("--seqlens-q") != std::string::npos);
  Options only_k;
  const char* argv3[] = {"prog", "--seqlens-k", "3"};
  REQUIRE(!parse_cli(3, argv3, &only_k).ok);
}

TEST_CASE("the reference on a packed batch equals each sequence run alone", "[cpu][varlen][reference]") {
  // Lengths of 1, an empty sequence, tails that end mid-tile, seqlen_q != seqlen_k both ways
  // (rows that see no key under the causal mask), GQA 4:2.
  for (bool causal : {false, true}) {
    Problem p = fl_test::shape(1, 1, 1, 4, 2, 32, causal);
    set_varlen(&p, {1, 0, 70, 33, 9}, {1, 5, 33, 70, 0});
    INFO("causal " << causal);
    const HostInputs in = make_inputs(p, InputKind::random, 11);
    REQUIRE(in.q.size() == p.q_elements());
    const auto rows = all_rows(p);
    REQUIRE(rows.size() == static_cast<size_t>(p.total_q()) * p.heads_q);
    const RowResults packed = reference_fp64(p, in, rows);
    // The textbook loops agree on the packed description too.
    const RowResults loops = naive_loops(p, in, rows);
    for (size_t n = 0; n < packed.out.size(); ++n) REQUIRE(std::fabs(packed.out[n] - loops.out[n]) < 1e-12);

    size_t n = 0;  // rows of all_rows are ordered by sequence, then head, then query
    for (int b = 0; b < p.batch; ++b) {
      const Problem s = one_sequence(p, b);
      if (s.seqlen_q == 0) continue;
      HostInputs si;
      si.q = slice(in.q, p.q_token(b, 0), s.seqlen_q, p.heads_q, p.head_dim);
      si.k = slice(in.k, p.k_token(b, 0), s.seqlen_k, p.heads_kv, p.head_dim);
      si.v = slice(in.v, p.k_token(b, 0), s.seqlen_k, p.heads_kv, p.head_dim);
      const RowResults alone = reference_fp64(s, si, all_rows(s));
      for (size_t r = 0; r < alone.lse.size(); ++r, ++n) {
        if (std::isinf(alone.lse[r])) REQUIRE(packed.lse[n] == alone.lse[r]);
        else REQUIRE(std::fabs(packed.lse[n] - alone.lse[r]) < 1e-12);
        for (int c = 0; c < p.head_dim; ++c)
          REQUIRE(std::fabs(packed.out[n * p.head_dim + c] - alone.out[r * p.head_dim + c]) < 1e-12);
      }
    }
    REQUIRE(n == rows.size());
  }
}

TEST_CASE("the check reads a packed O and a [heads, total_q] LSE", "[cpu][varlen][check]") {
  Problem p = fl_test::shape(1, 1, 1, 2, 1, 16, true);
  set_varlen(&p, {3, 0, 20}, {5, 4, 18});
  const HostInputs in = make_inputs(p, InputKind::random, 3);
  const auto rows = all_rows(p);
  const RowResults ref = reference_fp64(p, in, rows);
  // A "device" result made from the reference, written where the packed layout says.
  std::vector<uint16_t> out(p.q_elements());
  std::vector<float> lse(p.lse_elements(), NAN);
  for (size_t n = 0; n < rows.size(); ++n) {
    const RowId& r = rows[n];
    for (int c = 0; c < p.head_dim; ++c)
      out[(p.q_token(r.b, r.i) * p.heads_q + r.h) * p.head_dim + c] = to_bits(static_cast<float>(ref.out[n * p.head_dim + c]), p.dtype);
    lse[p.lse_index(r.b, r.h, r.i)] = static_cast<float>(ref.lse[n]);
  }
  CheckResult c = check_output(p, in, out, lse, CheckMode::full, 1);
  INFO(c.reason);
  REQUIRE(c.pass);
  REQUIRE(c.mode == "full");
  REQUIRE(c.unwritten == 0);
  // One LSE entry left unwritten is caught.
  lse[p.lse_index(2, 1, 7)] = NAN;
  c = check_output(p, in, out, lse, CheckMode::full, 1);
  REQUIRE(!c.pass);
}

TEST_CASE("the bench's mixed-length batch: the same lengths as bench/pytorch/torch_sdpa.py draws", "[cpu][varlen]") {
  // tests/cpu/test_torch_scripts.py checks the Python mirror against the same values.
  const std::vector<int> lens = mixed_lengths(64, 128, 8192, 2024);
  REQUIRE(lens.size() == 64u);
  REQUIRE(std::vector<int>(lens.begin(), lens.begin() + 8) == std::vector<int>{5246, 1315, 4749, 6457, 3999, 3544, 676, 7900});
  long long sum = 0;
  for (int n : lens) {
    REQUIRE(n >= 128);
    REQUIRE(n <= 8192);
    sum += n;
  }
  REQUIRE(sum == 286412);
}

TEST_CASE("the backward reference on a packed batch equals each sequence run alone", "[cpu][varlen][reference_bwd]") {
  for (bool causal : {false, true}) {
    Problem p = fl_test::shape(1, 1, 1, 4, 2, 32, causal);
    set_varlen(&p, {1, 0, 70, 33, 9}, {1, 5, 33, 70, 0});
    INFO("causal " << causal);
    const HostInputs in = make_inputs(p, InputKind::random, 5);
    const std::vector<uint16_t> dout = make_grad_output(p, 5);
    REQUIRE(dout.size() == p.q_elements());
    const BwdResults packed = reference_bwd_fp64(p, in, dout);
    const BwdResults loops = naive_loops_bwd(p, in, dout);
    for (size_t n = 0; n < packed.dq.size(); ++n) REQUIRE(std::fabs(packed.dq[n] - loops.dq[n]) < 1e-10);
    for (size_t n = 0; n < packed.dk.size(); ++n) REQUIRE(std::fabs(packed.dk[n] - loops.dk[n]) < 1e-10);
    REQUIRE(packed.lse.size() == p.lse_elements());
    const int Hq = p.heads_q, Hkv = p.heads_kv, D = p.head_dim;
    for (int b = 0; b < p.batch; ++b) {
      const Problem s = one_sequence(p, b);
      if (s.seqlen_q == 0 && s.seqlen_k == 0) continue;
      HostInputs si;
      si.q = slice(in.q, p.q_token(b, 0), s.seqlen_q, Hq, D);
      si.k = slice(in.k, p.k_token(b, 0), s.seqlen_k, Hkv, D);
      si.v = slice(in.v, p.k_token(b, 0), s.seqlen_k, Hkv, D);
      const std::vector<uint16_t> sdo = slice(dout, p.q_token(b, 0), s.seqlen_q, Hq, D);
      const BwdResults alone = naive_loops_bwd(s, si, sdo);
      for (int i = 0; i < s.seqlen_q; ++i)
        for (int h = 0; h < Hq; ++h) {
          for (int c = 0; c < D; ++c)
            REQUIRE(std::fabs(packed.dq[(p.q_token(b, i) * Hq + h) * D + c] - alone.dq[(static_cast<size_t>(i) * Hq + h) * D + c]) < 1e-10);
          const double a = alone.lse[static_cast<size_t>(h) * s.seqlen_q + i], q = packed.lse[p.lse_index(b, h, i)];
          if (std::isinf(a)) REQUIRE(q == a);
          else REQUIRE(std::fabs(q - a) < 1e-10);
        }
      for (int j = 0; j < s.seqlen_k; ++j)
        for (int h = 0; h < Hkv; ++h)
          for (int c = 0; c < D; ++c) {
            const size_t pk = (p.k_token(b, j) * Hkv + h) * D + c, ak = (static_cast<size_t>(j) * Hkv + h) * D + c;
            REQUIRE(std::fabs(packed.dk[pk] - alone.dk[ak]) < 1e-10);
            REQUIRE(std::fabs(packed.dv[pk] - alone.dv[ak]) < 1e-10);
          }
    }
  }
}

TEST_CASE("the backward check on a packed batch: full and sampled groups", "[cpu][varlen][check_bwd]") {
  Problem p = fl_test::shape(1, 1, 1, 8, 2, 32, true, DType::bf16);
  set_varlen(&p, {40, 0, 90, 7}, {40, 3, 60, 20});
  const HostInputs in = make_inputs(p, InputKind::random, 9);
  const std::vector<uint16_t> dout = make_grad_output(p, 9);
  const BwdResults ref = reference_bwd_fp64(p, in, dout);
  auto to16 = [&](const std::vector<double>& x) {
    std::vector<uint16_t> o(x.size());
    for (size_t n = 0; n < x.size(); ++n) o[n] = to_bits(static_cast<float>(x[n]), p.dtype);
    return o;
  };
  const auto dq = to16(ref.dq), dk = to16(ref.dk), dv = to16(ref.dv);
  for (CheckMode mode : {CheckMode::full, CheckMode::sample}) {
    // A budget below the whole batch's work makes "sample" pick some groups.
    const BwdCheck c = check_backward(p, in, dout, dq, dk, dv, mode, 3, bwd_check_work(p) / 3);
    INFO(c.summary.reason << " " << c.note);
    REQUIRE(c.summary.pass);
    REQUIRE(c.summary.checked);
  }
  // A wrong dK row of one sequence fails the full check.
  auto bad = dk;
  bad[(p.k_token(2, 5) * p.heads_kv + 1) * p.head_dim + 3] ^= 0x4000;
  REQUIRE(!check_backward(p, in, dout, dq, bad, dv, CheckMode::full, 3).summary.pass);
}
