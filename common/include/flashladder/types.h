/// @file types.h
/// @brief Storage dtypes and host-side 16-bit float conversions (no CUDA needed).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

/// Marks functions compiled for both the host and the device: the same
/// online-softmax and combine math runs in kernels and in the CPU tests.
#if defined(__CUDACC__)
#define FL_HD __host__ __device__ __forceinline__
#else
#define FL_HD inline
#endif

namespace fl {

/// Storage type of Q, K, V and O. Accumulation is always fp32.
enum class DType : int { fp16 = 0, bf16 = 1 };

/// "fp16" or "bf16".
const char* dtype_name(DType t);

/// Parses "fp16"/"bf16" (also "half", "bfloat16"); false if unknown.
bool parse_dtype(const std::string& s, DType* out);

/// Rounds a float to IEEE binary16 (round to nearest even), returned as bits.
uint16_t float_to_half_bits(float f);
/// Widens IEEE binary16 bits to float (exact).
float half_bits_to_float(uint16_t h);
/// Rounds a float to bfloat16 (round to nearest even), returned as bits.
uint16_t float_to_bf16_bits(float f);
/// Widens bfloat16 bits to float (exact).
float bf16_bits_to_float(uint16_t h);

/// Rounds @p f to @p t and returns the bits.
inline uint16_t to_bits(float f, DType t) {
  return t == DType::fp16 ? float_to_half_bits(f) : float_to_bf16_bits(f);
}
/// Widens 16-bit storage of type @p t to float.
inline float from_bits(uint16_t h, DType t) {
  return t == DType::fp16 ? half_bits_to_float(h) : bf16_bits_to_float(h);
}

}  // namespace fl
