/// @file tests/cpu/test_fp8.cpp
/// @brief The FP8 input path's host side (common/include/flashladder/fp8.h): the e4m3 format
/// against its definition, the Hadamard rotation (orthogonal, Q K^T unchanged, outliers spread),
/// the transposed V's key order against the register layouts it has to match, the outlier
/// input, the FP8 floors, and the generalized wgmma descriptor rung 13 uses.
#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include "catch_compat.h"
#include "flashladder/check.h"
#include "flashladder/cli.h"
#include "flashladder/fp8.h"
#include "flashladder/inputs.h"
#include "flashladder/wgmma_desc.h"

using namespace fl;

TEST_CASE("e4m3: every code decodes to sign x (1 + m/8) x 2^(e-7), or m/8 x 2^-6", "[cpu][fp8]") {
  CHECK(e4m3_to_float(0x00) == 0.f);
  CHECK(e4m3_to_float(0x01) == std::ldexp(1.f, -9));  // smallest subnormal
  CHECK(e4m3_to_float(0x08) == std::ldexp(1.f, -6));  // smallest normal
  CHECK(e4m3_to_float(0x38) == 1.f);                  // exponent 7 = bias
  CHECK(e4m3_to_float(0x7e) == 448.f);                // largest finite
  CHECK(e4m3_to_float(0xfe) == -448.f);
  CHECK(std::isnan(e4m3_to_float(0x7f)));
  CHECK(std::isnan(e4m3_to_float(0xff)));
  // Round trip of every finite code, and monotone order of the positive ones.
  float prev = -1.f;
  for (int b = 0; b < 0x7f; ++b) {
    const float v = e4m3_to_float(static_cast<uint8_t>(b));
    CHECK(float_to_e4m3(v) == b);
    CHECK(float_to_e4m3(-v) == (b == 0 ? 0x80 : (0x80 | b)));
    CHECK(v > prev);
    prev = v;
  }
}

TEST_CASE("e4m3: round to nearest even, saturating", "[cpu][fp8]") {
  // Between 1 (0x38) and 1.125 (0x39): the midpoint goes to the even code.
  CHECK(float_to_e4m3(1.0625f) == 0x38);
  CHECK(float_to_e4m3(1.0626f) == 0x39);
  CHECK(float_to_e4m3(1.1875f) == 0x3a);  // midpoint of 1.125 and 1.25: 0x3a is even
  CHECK(float_to_e4m3(1000.f) == 0x7e);   // satfinite
  CHECK(float_to_e4m3(-1e30f) == 0xfe);
  CHECK(float_to_e4m3(std::ldexp(1.f, -10)) == 0x00);  // half the smallest subnormal (2^-9): to even, 0
  CHECK(float_to_e4m3(std::ldexp(3.f, -10)) == 0x02);  // 1.5 subnormal steps: to even, 2
  CHECK(float_to_e4m3(0.0155f) == 0x08);               // rounds up into the smallest normal
  // The relative error of a normal is at most 2^-4 (3 significand bits).
  for (float x = 0.02f; x < 440.f; x *= 1.0137f) {
    const float q = e4m3_to_float(float_to_e4m3(x));
    CHECK(std::fabs(q - x) <= std::ldexp(x, -4) * (1 + 1e-6f));
  }
}

TEST_CASE("Hadamard rotation: orthogonal, dot products kept, outliers spread", "[cpu][fp8]") {
  for (int n : {64, 128, 256}) {
    std::vector<float> q(n), k(n);
    for (int c = 0; c < n; ++c) {
      q[c] = normal_at(7, c);
      k[c] = normal_at(8, c);
    }
    q[5] = 80.f;  // one outlier channel in both
    k[5] = -60.f;
    double dot = 0, qq = 0;
    for (int c = 0; c < n; ++c) {
      dot += static_cast<double>(q[c]) * k[c];
      qq += static_cast<double>(q[c]) * q[c];
    }
    std::vector<float> qr = q, kr = k;
    hadamard_rotate_host(qr.data(), n, 42);
    hadamard_rotate_host(kr.data(), n, 42);
    double dot_r = 0, qq_r = 0;
    for (int c = 0; c < n; ++c) {
      dot_r += static_cast<double>(qr[c]) * kr[c];
      qq_r += static_cast<double>(qr[c]) * qr[c];
    }
    INFO("n = " << n);
    CHECK(std::fabs(dot_r - dot) <= 1e-4 * std::fabs(qq));  // Q K^T unchanged
    CHECK(std::fabs(qq_r - qq) <= 1e-5 * qq);               // lengths unchanged
    // amax shrinks: the outlier's 80 spreads as about 80 / sqrt(n) over every channel.
    float amax = 0, amax_r = 0;
    for (int c = 0; c < n; ++c) {
      amax = std::max(amax, std::fabs(q[c]));
      amax_r = std::max(amax_r, std::fabs(qr[c]));
    }
    CHECK(amax_r < amax / 2);
  }
  // The signs depend on the seed and are +-1.
  int differ = 0;
  for (int c = 0; c < 128; ++c) {
    CHECK(std::fabs(hadamard_sign(1, c)) == 1.f);
    differ += hadamard_sign(1, c) != hadamard_sign(2, c);
  }
  CHECK(differ > 32);
}

TEST_CASE("transposed V: the key order matches P's registers to wgmma's k order", "[cpu][fp8]") {
  CHECK(vt_row_length(1) == 16);
  CHECK(vt_row_length(16) == 16);
  CHECK(vt_row_length(17) == 32);
  // A permutation inside each 16-key group.
  for (int base : {0, 16, 4096}) {
    std::set<int> keys;
    for (int pos = base; pos < base + 16; ++pos) {
      const int key = vt_key_at(pos);
      CHECK(key >= base);
      CHECK(key < base + 16);
      keys.insert(key);
    }
    CHECK(keys.size() == 16);
  }
  // Thread t of a quad holds, after S = Q K^T, the columns 8j + 2t and 8j + 2t + 1 of each
  // 8-column block j (the m64nN accumulator layout). Rung 13 packs blocks j0 = 4 kk + 2u and
  // j0 + 1 of k-step kk into register 2u + h of the A fragment, in the order (2t, 2t+1 of j0,
  // 2t, 2t+1 of j0 + 1); wgmma reads that register as k = 16u + 4t .. 16u + 4t + 3 (the 8-bit
  // A layout of mma.m16n8k32). So position 32 kk + 16 u + 4 t + e of V^T must hold that key.
  for (int kk = 0; kk < 4; ++kk)
    for (int u = 0; u < 2; ++u)
      for (int t = 0; t < 4; ++t) {
        const int j0 = 4 * kk + 2 * u;
        const int held[4] = {8 * j0 + 2 * t, 8 * j0 + 2 * t + 1, 8 * (j0 + 1) + 2 * t, 8 * (j0 + 1) + 2 * t + 1};
        for (int e = 0; e < 4; ++e) CHECK(vt_key_at(32 * kk + 16 * u + 4 * t + e) == held[e]);
      }
}

TEST_CASE("outlier input: channels 10-100x the others, scores of moderate size", "[cpu][fp8]") {
  for (int d : {64, 128, 256}) {
    const OutlierChannels oc = outlier_channels(d);
    REQUIRE(oc.channel.size() == static_cast<size_t>(std::max(2, d / 32)));
    CHECK(std::fabs(oc.factor.front() - 10.f) < 1e-4f);
    CHECK(std::fabs(oc.factor.back() - 100.f) < 1e-3f);
    for (int c : oc.channel) CHECK((c >= 0 && c < d));
    Problem p;
    p.batch = 1;
    p.seqlen_q = p.seqlen_k = 64;
    p.heads_q = p.heads_kv = 2;
    p.head_dim = d;
    p.dtype = DType::bf16;
    const HostInputs in = make_inputs(p, InputKind::outlier, 3);
    // The largest |value| lies in an outlier channel and is > 10x the ordinary channels' rms.
    double ord2 = 0;
    long long n_ord = 0;
    float amax = 0;
    int amax_c = -1;
    for (size_t i = 0; i < in.q.size(); ++i) {
      const int c = static_cast<int>(i % d);
      const float v = from_bits(in.q[i], p.dtype);
      if (std::fabs(v) > amax) {
        amax = std::fabs(v);
        amax_c = c;
      }
      if (std::find(oc.channel.begin(), oc.channel.end(), c) == oc.channel.end()) {
        ord2 += static_cast<double>(v) * v;
        ++n_ord;
      }
    }
    CHECK(std::find(oc.channel.begin(), oc.channel.end(), amax_c) != oc.channel.end());
    CHECK(amax > 10 * std::sqrt(ord2 / n_ord));
    // Scores q . k / sqrt(d): a standard deviation of about 2 (not one-hot, not flat).
    double s2 = 0;
    int n = 0;
    for (int i = 0; i < 64; ++i)
      for (int j = 0; j < 64; ++j) {
        double dot = 0;
        for (int c = 0; c < d; ++c)
          dot += static_cast<double>(from_bits(in.q[(i * 2) * d + c], p.dtype)) * from_bits(in.k[(j * 2) * d + c], p.dtype);
        s2 += dot * dot / d;
        ++n;
      }
    INFO("d = " << d << ": score rms " << std::sqrt(s2 / n));
    CHECK(std::sqrt(s2 / n) > 0.8);
    CHECK(std::sqrt(s2 / n) < 5.0);
  }
}

TEST_CASE("FP8 floors: P in e4m3 (2^-5, 2^-3), S from a ~14-bit accumulator (LSE 2^-8 relative)", "[cpu][fp8]") {
  for (DType t : {DType::fp16, DType::bf16}) {
    const Tolerance f = tolerance_floor_fp8(t);
    CHECK(f.rel_fro == std::ldexp(1.0, -5));
    CHECK(f.max_abs == std::ldexp(1.0, -3));
    CHECK(f.lse_abs == tolerance_floor(t).lse_abs);
    CHECK(f.lse_rel == std::ldexp(1.0, -8));
    CHECK(f.rel_fro > tolerance_floor(t).rel_fro);
    // The relative LSE floor applies where |LSE| is large: 2^-8 x 20 = 0.078 for an LSE of 20.
    ErrorStats fp32;
    fp32.lse_ref_max_abs = 20;
    CHECK(tolerance_for(f, fp32).lse_abs == 20 * std::ldexp(1.0, -8));
    fp32.lse_ref_max_abs = 0.5;
    CHECK(tolerance_for(f, fp32).lse_abs == f.lse_abs);
    // The 16-bit floors have none.
    CHECK(tolerance_for(t, fp32).lse_abs == tolerance_floor(t).lse_abs);
  }
}

TEST_CASE("fp8 flags: --fp8-scale, --hadamard, --input outlier", "[cpu][fp8]") {
  Options o;
  const char* argv[] = {"x", "--fp8-scale", "tensor", "--hadamard", "--input", "outlier"};
  const ParseResult r = parse_cli(6, argv, &o);
  REQUIRE(r.ok);
  CHECK(o.fp8.scaling == Fp8Scaling::tensor);
  CHECK(o.fp8.hadamard);
  CHECK(o.input == InputKind::outlier);
  CHECK(fp8_mode_label(o.fp8) == "per-tensor+hadamard");
  Options d;
  CHECK(fp8_mode_label(d.fp8) == "per-head");
  const char* bad[] = {"x", "--fp8-scale", "row"};
  const ParseResult rb = parse_cli(3, bad, &d);
  CHECK(!rb.ok);
  CHECK(rb.error.find("--fp8-scale") != std::string::npos);
}

namespace wg = fl::wgmma;

// The generalized K-major descriptor: with a 128-byte swizzle it is rung 09's, and the offsets
// of a k32 step in bytes are those of a 16-bit k16 step.
static_assert(wg::desc_kmajor_sw(0x400, 128) == wg::desc_kmajor_sw128(0x400), "128 B: rung 09's descriptor");
static_assert(wg::kmajor_offset(128, 176, 64, 32 * 5) == wg::sw128_kmajor_offset(176, 64, 5),
              "128 B: rung 09's offsets");
// 64-byte swizzle (rung 13 at d = 64): mode 2 in bits 62-63, SBO = 8 rows x 64 B = 512.
static_assert((wg::desc_kmajor_sw(0x400, 64) >> 62) == 2, "64 B swizzle mode");
static_assert(((wg::desc_kmajor_sw(0x400, 64) >> 32) & 0x3FFF) == 512 >> 4, "64 B: SBO 512");
static_assert(wg::kmajor_offset(64, 128, 64, 32) == 64 * 64 + 32, "rows 64.., k bytes 32..63");
static_assert(wg::kmajor_offset(128, 128, 0, 160) == 128 * 128 + 32, "d = 256: the second column block");

TEST_CASE("the generalized descriptor checks compile", "[cpu][fp8]") { SUCCEED(); }
