/// @file fp8.h
/// @brief The harness's FP8 input path, the parts that need no GPU: the e4m3 format, the scaling
/// modes, the random Hadamard rotation ("incoherent processing") and the layout of the
/// transposed V that the FP8 rung (13) reads. The same inline functions run in the quantize
/// kernels (fp8_device.h) and in the CPU tests (tests/cpu/test_fp8.cpp).
///
/// @code
///   // clang-format off
///   e4m3     1 sign, 4 exponent (bias 7), 3 significand bits; no infinities; S.1111.111 is NaN
///            largest 448 = 1.75 x 2^8, smallest normal 2^-6, smallest subnormal 2^-9
///            round to nearest even: relative error <= 2^-4 on normals (16-bit: 2^-11 fp16, 2^-8 bf16)
///   scaling  x_fp8 = e4m3(x * 448 / amax), descale = amax / 448, over one amax per
///              head:   (batch, KV head): Q's query heads of one group share K's scale index
///              tensor: the whole tensor
///            A Q K^T entry is then descale_q * descale_k * (Q_fp8 K_fp8^T): both descales fold
///            into the softmax scale, V's into the output.
///   Hadamard x <- x D H / sqrt(d) on every row of Q and K (D = diag of random signs, H the
///            d x d Sylvester-Hadamard matrix): D H / sqrt(d) is orthogonal, so Q K^T is
///            unchanged, but one channel that is 10-100x the others is spread over all d,
///            and amax (hence the rounding step of every other value) shrinks.
///   // clang-format on
/// @endcode
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

#include "flashladder/types.h"

namespace fl {

/// The largest finite e4m3 value: 1.75 x 2^8.
constexpr float kE4m3Max = 448.f;

/// Over what one FP8 scale factor is taken.
enum class Fp8Scaling : int {
  tensor = 0,  ///< one amax for the whole tensor ("plain" FP8)
  head = 1,    ///< one amax per (batch, KV head), FlashAttention-3's descale layout
};

/// How the harness quantizes Q, K and V for an FP8 rung (--fp8-scale, --hadamard).
struct Fp8Options {
  Fp8Scaling scaling = Fp8Scaling::head;  ///< --fp8-scale
  bool hadamard = false;                  ///< --hadamard: rotate Q and K before quantizing
};

/// "tensor" or "head", as on the command line.
const char* fp8_scaling_name(Fp8Scaling s);
/// Parses "tensor" / "head"; false if unknown.
bool parse_fp8_scaling(const std::string& s, Fp8Scaling* out);
/// One label for a quantization mode: "per-tensor", "per-head" or "per-head+hadamard".
std::string fp8_mode_label(const Fp8Options& o);

/// Widens e4m3 bits to float (exact).
FL_HD float e4m3_to_float(uint8_t b) {
  const int e = (b >> 3) & 15, m = b & 7;
  float v;
  if (e == 15 && m == 7)
    v = NAN;
  else if (e == 0)
    v = ldexpf(static_cast<float>(m), -9);  // subnormal: m/8 x 2^-6
  else
    v = ldexpf(static_cast<float>(8 + m), e - 10);  // (1 + m/8) x 2^(e-7)
  return (b & 0x80) ? -v : v;
}

/// Rounds a float to e4m3 (nearest even), saturating finite values to +-448 and NaN to NaN:
/// what `cvt.rn.satfinite.e4m3x2.f32` does on the GPU (a CPU test checks every code).
uint8_t float_to_e4m3(float f);

/// The sign (+1 or -1) of channel @p c in the rotation's random diagonal D, from @p seed.
FL_HD float hadamard_sign(unsigned long long seed, int c) {
  unsigned long long x = seed * 0x9e3779b97f4a7c15ull + static_cast<unsigned long long>(c) + 1;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  x ^= x >> 31;
  return (x & 1) ? -1.f : 1.f;
}

/// x <- x D H / sqrt(n) in place on the host (n a power of two): the rotation the quantize
/// kernel applies with a warp-wide fast Walsh-Hadamard transform (log2 n butterfly stages).
void hadamard_rotate_host(float* x, int n, unsigned long long seed);

/// Keys per group of the transposed V's permutation (one k16 half of a k32 wgmma step).
constexpr int kVtGroup = 16;

/// Length of a row of the transposed V: seqlen_k rounded up to 16 keys (16 bytes, which the
/// copy engine needs of every row stride). The padding keys are zeros.
FL_HD int vt_row_length(int seqlen_k) { return (seqlen_k + kVtGroup - 1) / kVtGroup * kVtGroup; }

/// The key stored at position @p pos of a transposed V row. FP8 wgmma reads P, its A operand,
/// from registers in 4 consecutive k per thread (k = 4t .. 4t+3 and 16+4t .. 16+4t+3 of each
/// k32 step, t = lane % 4), while S = Q K^T leaves each thread 2 consecutive columns of every
/// 8 (2t, 2t+1, 8+2t, 9+2t, ...). Storing V's keys in the order the registers already have
/// (position 4t+e of a 16-key group holds key 2t + (e & 1) + 8 (e >> 1)) makes P V right with
/// no shuffle of P: a permutation of the summation index.
FL_HD int vt_key_at(int pos) {
  const int q = pos % kVtGroup;
  return pos - q + 2 * (q >> 2) + (q & 1) + 8 * ((q >> 1) & 1);
}

}  // namespace fl
