// 16-bit conversions on the host: exact values, round-to-nearest-even, specials.
#include <cmath>
#include <limits>

#include "catch_compat.h"
#include "flashladder/types.h"

using namespace fl;

TEST_CASE("fp16 conversion matches IEEE binary16", "[cpu][types]") {
  REQUIRE(float_to_half_bits(1.0f) == 0x3c00);
  REQUIRE(float_to_half_bits(-2.0f) == 0xc000);
  REQUIRE(float_to_half_bits(65504.0f) == 0x7bff);         // largest finite
  REQUIRE(float_to_half_bits(65520.0f) == 0x7c00);         // rounds to +inf
  REQUIRE(float_to_half_bits(5.9604645e-8f) == 0x0001);    // smallest subnormal
  REQUIRE(float_to_half_bits(6.1035156e-5f) == 0x0400);    // smallest normal
  REQUIRE(float_to_half_bits(0.0f) == 0x0000);
  REQUIRE(float_to_half_bits(-0.0f) == 0x8000);
  REQUIRE(float_to_half_bits(std::numeric_limits<float>::infinity()) == 0x7c00);
  const uint16_t nan = float_to_half_bits(std::nanf(""));
  REQUIRE(((nan & 0x7c00) == 0x7c00 && (nan & 0x3ff) != 0));
  // Ties go to even: 1 + 2^-11 is halfway between 1 and 1 + 2^-10.
  REQUIRE(float_to_half_bits(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);
  REQUIRE(float_to_half_bits(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3c02);
  // Every finite half survives a round trip through float.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00) == 0x7c00) continue;
    REQUIRE(float_to_half_bits(half_bits_to_float(static_cast<uint16_t>(h))) == h);
  }
}

TEST_CASE("bf16 conversion rounds to nearest even", "[cpu][types]") {
  REQUIRE(float_to_bf16_bits(1.0f) == 0x3f80);
  REQUIRE(float_to_bf16_bits(-1.5f) == 0xbfc0);
  REQUIRE(bf16_bits_to_float(0x3f80) == 1.0f);
  REQUIRE(float_to_bf16_bits(1.0f + std::ldexp(1.0f, -8)) == 0x3f80);      // tie -> even
  REQUIRE(float_to_bf16_bits(1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3f82);  // tie -> even (up)
  const uint16_t nan = float_to_bf16_bits(std::nanf(""));
  REQUIRE(std::isnan(bf16_bits_to_float(nan)));
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7f80) == 0x7f80) continue;
    REQUIRE(float_to_bf16_bits(bf16_bits_to_float(static_cast<uint16_t>(h))) == h);
  }
}

TEST_CASE("dtype names parse", "[cpu][types]") {
  DType t;
  REQUIRE(parse_dtype("fp16", &t));
  REQUIRE(t == DType::fp16);
  REQUIRE(parse_dtype("bf16", &t));
  REQUIRE(t == DType::bf16);
  REQUIRE_FALSE(parse_dtype("fp8", &t));
  REQUIRE(std::string(dtype_name(DType::bf16)) == "bf16");
}
