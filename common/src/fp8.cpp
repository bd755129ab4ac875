#include "flashladder/fp8.h"

#include <vector>

namespace fl {

const char* fp8_scaling_name(Fp8Scaling s) { return s == Fp8Scaling::tensor ? "tensor" : "head"; }

bool parse_fp8_scaling(const std::string& s, Fp8Scaling* out) {
  if (s == "tensor") *out = Fp8Scaling::tensor;
  else if (s == "head") *out = Fp8Scaling::head;
  else return false;
  return true;
}

std::string fp8_mode_label(const Fp8Options& o) {
  std::string s = o.scaling == Fp8Scaling::tensor ? "per-tensor" : "per-head";
  if (o.hadamard) s += "+hadamard";
  return s;
}

uint8_t float_to_e4m3(float f) {
  if (std::isnan(f)) return 0x7f;
  const uint8_t sign = std::signbit(f) ? 0x80 : 0x00;
  const float a = std::fabs(f);
  if (a >= kE4m3Max) return sign | 0x7e;  // satfinite: 448 and beyond (464 would round up) clamp
  if (a < 0x1p-6f) {
    // Subnormals (and zero): multiples of 2^-9; nearbyint rounds half to even. 8 x 2^-9 = 2^-6
    // is the smallest normal, whose bits (exponent 1, significand 0) are also 8.
    return sign | static_cast<uint8_t>(std::nearbyint(a * 512.f));
  }
  int ex = 0;
  std::frexp(a, &ex);      // a = fr x 2^ex, fr in [0.5, 1): a in [2^(ex-1), 2^ex)
  int e = ex - 1 + 7;      // biased exponent, 1 .. 15
  int m = static_cast<int>(std::nearbyint((std::ldexp(a, -(ex - 1)) - 1.f) * 8.f));
  if (m == 8) {  // rounded up to the next power of two
    m = 0;
    ++e;
  }
  if (e > 15 || (e == 15 && m == 7)) return sign | 0x7e;
  return sign | static_cast<uint8_t>((e << 3) | m);
}

void hadamard_rotate_host(float* x, int n, unsigned long long seed) {
  for (int c = 0; c < n; ++c) x[c] *= hadamard_sign(seed, c);
  for (int h = 1; h < n; h *= 2)
    for (int i = 0; i < n; i += 2 * h)
      for (int j = i; j < i + h; ++j) {
        const float a = x[j], b = x[j + h];
        x[j] = a + b;
        x[j + h] = a - b;
      }
  const float norm = 1.f / std::sqrt(static_cast<float>(n));
  for (int c = 0; c < n; ++c) x[c] *= norm;
}

}  // namespace fl
