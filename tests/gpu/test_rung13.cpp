// Rung 13 (FP8 on Hopper) and the harness's FP8 input path on the GPU, beyond the shared
// matrix (which runs rung 13 with per-head scales over dtypes, causal, tails, GQA/MQA and every
// head_dim, judged on the dequantized inputs with the FP8 floors):
//   - the quantize kernels against the host's e4m3 and Hadamard rotation, element by element;
//   - every quantization mode (per tensor, per head, with and without the rotation) through the
//     kernel;
//   - the end-to-end error on the outlier input, with the rotation and without;
//   - each block's P V summed in fp32 against the tensor cores' accumulator (fast-accum);
//   - P cast as it is (the p-unscaled variant) within the floors too.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "catch_compat.h"
#include "expected_runs.h"
#include "flashladder/runner.h"
#include "problem_shape.h"

using namespace fl;
using fl_test::shape;

namespace {

const Rung& rung13(const std::string& variant = "") {
  const Rung* r = registry().find(13, variant);
  REQUIRE(r != nullptr);
  return *r;
}

/// False where this GPU (or build) cannot run rung 13 at all (not an sm_90 GPU, no sm_90a code):
/// the whole test is then skipped (exit 77, expected_runs.h). Any other refusal of @p p fails.
bool runs_here(const Problem& p) {
  const DeviceInfo dev = query_device();
  const std::string gate = fl_test::device_gate(rung13(), dev);
  const std::string why = supports(rung13(), p, dev);
  if (!gate.empty() || why == hopper_supports(dev, false)) {
    fl_test::skip_whole_test(gate.empty() ? "rung 13 " + why : gate);
    return false;
  }
  INFO(p.describe() << ": " << why);
  REQUIRE(why.empty());
  return true;
}

}  // namespace

TEST_CASE("the quantize kernels: e4m3 of x / descale, amax to 448, V transposed in vt_key_at order",
          "[rung13]") {
  for (const Fp8Options o : {Fp8Options{Fp8Scaling::head, false}, Fp8Options{Fp8Scaling::tensor, false},
                             Fp8Options{Fp8Scaling::head, true}}) {
    for (int d : {64, 128, 256}) {
      const Problem p = shape(2, 37, 45, 4, 2, d, false, DType::bf16);
      const HostInputs in = make_inputs(p, InputKind::outlier, 5);
      DeviceProblem dp(p, in, 0, 5);
      dp.to_fp8(o, 5);
      const HostInputs dq = dp.fp8()->dequantized();
      INFO(fp8_mode_label(o) << " d=" << d);
      // Each tensor: every dequantized value within e4m3's rounding of the (rotated) input, and
      // per scale group the largest |value| is 448 x descale exactly.
      auto check = [&](const std::vector<uint16_t>& x16, const std::vector<float>& xq, int seqlen, int heads,
                       int group, bool rotated) {
        const int n_idx = o.scaling == Fp8Scaling::tensor ? 1 : p.batch * p.heads_kv;
        const size_t rows = x16.size() / d;
        std::vector<float> ref(x16.size());  // the (rotated) 16-bit input, row by row
        std::vector<int> idx(rows);          // each row's scale index
        std::vector<float> amax_in(n_idx, 0.f), amax_q(n_idx, 0.f);
        for (size_t r = 0; r < rows; ++r) {  // rows in [batch, seqlen, heads] order
          const int h = static_cast<int>(r % heads), b = static_cast<int>(r / (static_cast<size_t>(heads) * seqlen));
          for (int c = 0; c < d; ++c) ref[r * d + c] = from_bits(x16[r * d + c], p.dtype);
          if (rotated) hadamard_rotate_host(&ref[r * d], d, 5);
          idx[r] = o.scaling == Fp8Scaling::tensor ? 0 : b * p.heads_kv + h / group;
          for (int c = 0; c < d; ++c) {
            amax_in[idx[r]] = std::max(amax_in[idx[r]], std::fabs(ref[r * d + c]));
            amax_q[idx[r]] = std::max(amax_q[idx[r]], std::fabs(xq[r * d + c]));
          }
        }
        for (int i = 0; i < n_idx; ++i) CHECK(std::fabs(amax_q[i] - amax_in[i]) <= 1e-5f * amax_in[i]);
        for (size_t e = 0; e < ref.size(); ++e) {
          const float descale = amax_in[idx[e / d]] / kE4m3Max;
          // Half a step of e4m3 at this magnitude (2^-4 relative; subnormal steps 2^-9), plus the
          // fp32 rounding of the rotation.
          const float err = std::fabs(xq[e] - ref[e]);
          const float bound = std::max(std::ldexp(std::fabs(ref[e]), -4), std::ldexp(descale, -10)) * 1.01f +
                              1e-5f * amax_in[idx[e / d]];
          if (err > bound) FAIL_CHECK("row " << e / d << " c=" << e % d << ": " << xq[e] << " vs " << ref[e]);
        }
      };
      check(in.q, dq.qf, p.seqlen_q, p.heads_q, p.group(), o.hadamard);
      check(in.k, dq.kf, p.seqlen_k, p.heads_kv, 1, o.hadamard);
      check(in.v, dq.vf, p.seqlen_k, p.heads_kv, 1, false);
    }
  }
}

TEST_CASE("every quantization mode through the kernel: causal, GQA, tails, each head_dim", "[rung13]") {
  if (!runs_here(shape(1, 128, 128, 2, 2, 128, false, DType::bf16))) return;
  const Fp8Options modes[] = {{Fp8Scaling::head, false}, {Fp8Scaling::tensor, false}, {Fp8Scaling::head, true},
                              {Fp8Scaling::tensor, true}};
  int k = 0, ran = 0;
  for (const Fp8Options& o : modes)
    for (int d : {64, 128, 256})
      for (bool causal : {false, true}) {
        const int sq = (k % 2) ? 300 : 257, sk = (k % 3) ? 411 : 257;
        const Problem p = shape(2, sq, sk, 8, (k % 2) ? 2 : 8, d, causal, (k % 2) ? DType::fp16 : DType::bf16);
        ++k;
        for (InputKind input : {InputKind::random, InputKind::outlier}) {
          const CaseResult res = run_fp8_case(rung13(), p, input, CheckMode::full, 13, o);
          INFO(fp8_mode_label(o) << " " << p.describe() << " input=" << input_kind_name(input) << ": "
                                 << res.check.reason << " (rel_fro " << res.check.err.rel_fro << ", max_abs "
                                 << res.check.err.max_abs << "; end to end rel_fro " << res.fp8_e2e.rel_fro << ")");
          REQUIRE(res.ran);
          ++ran;
          REQUIRE(res.fp8);
          REQUIRE(res.check.pass);
        }
      }
  REQUIRE(ran == 4 * 3 * 2 * 2);  // modes x head_dims x causal x inputs, every one accepted
}

TEST_CASE("outlier channels: the Hadamard rotation lowers the end-to-end error", "[rung13]") {
  for (int d : {64, 128, 256}) {
    const Problem p = shape(2, 512, 512, 2048 / d, 2048 / d, d, false, DType::bf16);
    if (!runs_here(p)) return;
    const CaseResult plain = run_fp8_case(rung13(), p, InputKind::outlier, CheckMode::full, 3, {Fp8Scaling::head, false});
    const CaseResult rot = run_fp8_case(rung13(), p, InputKind::outlier, CheckMode::full, 3, {Fp8Scaling::head, true});
    INFO("d=" << d << ": end to end rel_fro per-head " << plain.fp8_e2e.rel_fro << ", +hadamard " << rot.fp8_e2e.rel_fro);
    REQUIRE(plain.ran);
    REQUIRE(rot.ran);
    REQUIRE(plain.check.pass);
    REQUIRE(rot.check.pass);
    CHECK(rot.fp8_e2e.rel_fro < plain.fp8_e2e.rel_fro);
  }
}

TEST_CASE("each block's P V summed in fp32 against the tensor cores' accumulator (fast-accum)", "[rung13]") {
  // 4k keys: 128 k32 steps add into O. The FP8 accumulator keeps about 14 significand bits, so
  // without the fp32 sums the error grows with the number of blocks.
  for (int d : {64, 128, 256}) {
    const Problem p = shape(1, 4096, 4096, 2048 / d, 2048 / d, d, false, DType::bf16);
    if (!runs_here(p)) return;
    const CaseResult promoted = run_case(rung13(), p, InputKind::random, CheckMode::sample, 6);
    const CaseResult fast = run_case(rung13("fast-accum"), p, InputKind::random, CheckMode::sample, 6);
    INFO("d=" << d << " kernel rel_fro: fp32 sums " << promoted.check.err.rel_fro << ", fast-accum "
              << fast.check.err.rel_fro);
    REQUIRE(promoted.ran);
    REQUIRE(fast.ran);
    REQUIRE(promoted.check.pass);
    CHECK(promoted.check.err.rel_fro < fast.check.err.rel_fro);
  }
}

TEST_CASE("P cast as it is (p-unscaled) still passes: the scaling is measured, not required", "[rung13]") {
  // How much P x 2^8 buys is a bench figure (bench/run_fp8.sh, the README's table); here both
  // choices must stay within the FP8 floors on random and outlier inputs.
  const Problem p = shape(2, 1024, 1024, 16, 16, 128, false, DType::bf16);
  if (!runs_here(p)) return;
  for (InputKind input : {InputKind::random, InputKind::outlier}) {
    const CaseResult scaled = run_case(rung13(), p, input, CheckMode::full, 4);
    const CaseResult unscaled = run_case(rung13("p-unscaled"), p, input, CheckMode::full, 4);
    INFO(input_kind_name(input) << " kernel rel_fro: P x 2^8 " << scaled.check.err.rel_fro << ", P as it is "
                                << unscaled.check.err.rel_fro << ": " << unscaled.check.reason);
    REQUIRE(scaled.ran);
    REQUIRE(unscaled.ran);
    REQUIRE(scaled.check.pass);
    REQUIRE(unscaled.check.pass);
  }
}
