/// @file static_switch.h
/// @brief Runtime flags to compile-time constants (after FlashAttention-2's
/// static_switch.h), honouring the single-head_dim / single-dtype build options.
///
/// Configure with -DFL_HEAD_DIM=128 and/or -DFL_DTYPE=fp16 to build one
/// instantiation only; the others then report "not built" through supports().
/// The Hopper rungs (09, 10, 13) pick their tiles with with_head_dim_tiles instead.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

#include "flashladder/types.h"

#ifndef FL_HEAD_DIM_ONLY
#define FL_HEAD_DIM_ONLY 0  // 0: every head_dim is built
#endif
#ifndef FL_DTYPE_ONLY
#define FL_DTYPE_ONLY -1  // -1: both dtypes are built; else DType as int
#endif

namespace fl {

/// True if kernels for head_dim @p d were compiled in this build.
constexpr bool head_dim_built(int d) { return FL_HEAD_DIM_ONLY == 0 || FL_HEAD_DIM_ONLY == d; }
/// True if kernels for @p t were compiled in this build.
constexpr bool dtype_built(DType t) {
  return FL_DTYPE_ONLY < 0 || FL_DTYPE_ONLY == static_cast<int>(t);
}

/// A type passed as a value, to a generic lambda, which takes it back as the tag's member `type`.
template <class T>
struct TypeTag {
  using type = T;
};

/// The head_dim switch of the Hopper rungs (09, 10, 13), whose tiles are TILES<D> for D = 64,
/// 128 and 256: returns @p f(TypeTag<TILES<D>>{}) for head_dim @p d = D. All three are compiled
/// whatever FL_HEAD_DIM says. Any other @p d throws std::invalid_argument; each rung's
/// supports() refuses it first, with the rung's reason.
template <template <int> class TILES, class F>
decltype(auto) with_head_dim_tiles(int d, F&& f) {
  switch (d) {
    case 64: return std::forward<F>(f)(TypeTag<TILES<64>>{});
    case 128: return std::forward<F>(f)(TypeTag<TILES<128>>{});
    case 256: return std::forward<F>(f)(TypeTag<TILES<256>>{});
    default:
      throw std::invalid_argument("head_dim " + std::to_string(d) + " is not a head_dim of this rung (64, 128, 256)");
  }
}

}  // namespace fl

/// BOOL_SWITCH(cond, NAME, ...): runs the body with constexpr bool NAME.
#define FL_BOOL_SWITCH(COND, NAME, ...) \
  [&] {                                 \
    if (COND) {                         \
      constexpr bool NAME = true;       \
      return __VA_ARGS__();             \
    } else {                            \
      constexpr bool NAME = false;      \
      return __VA_ARGS__();             \
    }                                   \
  }()

/// Runs the body with `using T = __half` or `__nv_bfloat16` (needs dtype.cuh).
#define FL_DTYPE_SWITCH(DTYPE, T, ...)                                              \
  [&] {                                                                             \
    if ((DTYPE) == ::fl::DType::fp16) {                                             \
      if constexpr (::fl::dtype_built(::fl::DType::fp16)) {                         \
        using T = __half;                                                           \
        return __VA_ARGS__();                                                       \
      }                                                                             \
    } else {                                                                        \
      if constexpr (::fl::dtype_built(::fl::DType::bf16)) {                         \
        using T = __nv_bfloat16;                                                    \
        return __VA_ARGS__();                                                       \
      }                                                                             \
    }                                                                               \
    throw std::invalid_argument("dtype not built in this configuration (FL_DTYPE)"); \
  }()

/// Runs the body with constexpr int NAME = 32, 64, 128 or 256.
#define FL_HEADDIM_CASE_(D, NAME, ...)          \
  if (fl_hd_ == D) {                            \
    if constexpr (::fl::head_dim_built(D)) {    \
      constexpr int NAME = D;                   \
      return __VA_ARGS__();                     \
    }                                           \
  }
#define FL_HEADDIM_SWITCH(HD, NAME, ...)                                                \
  [&] {                                                                                 \
    const int fl_hd_ = (HD);                                                            \
    FL_HEADDIM_CASE_(32, NAME, __VA_ARGS__)                                             \
    FL_HEADDIM_CASE_(64, NAME, __VA_ARGS__)                                             \
    FL_HEADDIM_CASE_(128, NAME, __VA_ARGS__)                                            \
    FL_HEADDIM_CASE_(256, NAME, __VA_ARGS__)                                            \
    throw std::invalid_argument("head_dim " + std::to_string(fl_hd_) + " not built");   \
  }()
