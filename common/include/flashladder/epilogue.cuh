/// @file epilogue.cuh
/// @brief The output stores the forward rungs' epilogues share: O's 16-bit pairs, and beside them
/// the fp32 copy of O that a backward pass takes its D = rowsum(dO * O) from
/// (AttnParams::o_fp32; null when nobody asked for it).
#pragma once

#include <stdint.h>

#include "flashladder/dtype.cuh"
#include "flashladder/problem.h"

namespace fl {

/// Row @p row of head @p head of batch @p batch in AttnParams::o_fp32 (dense [batch, seqlen_q,
/// heads_q, head_dim]), or null when the caller asked for no fp32 copy of O.
__device__ __forceinline__ float* o_fp32_row(const AttnParams& p, int batch, int row, int head) {
  return p.o_fp32 ? p.o_fp32 + ((static_cast<int64_t>(batch) * p.seqlen_q + row) * p.heads_q + head) * p.head_dim
                  : nullptr;
}

/// Columns @p c and @p c + 1 of one output row: the 16-bit pair into @p o_row, and the same two
/// values before their rounding into @p o32_row when it is set (o_fp32_row).
template <class T>
__device__ __forceinline__ void store_o2(T* o_row, float* o32_row, int c, float x, float y) {
  *reinterpret_cast<uint32_t*>(o_row + c) = pack2<T>(x, y);
  if (o32_row) *reinterpret_cast<float2*>(o32_row + c) = make_float2(x, y);
}

}  // namespace fl
