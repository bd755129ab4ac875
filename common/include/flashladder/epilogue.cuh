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
  return p.o_fp32 ? p.o_fp32 + ((static_cast<int64_t>(batch) * p.seqlen_q + row) * p.heads_q + head) * p.dv()
                  : nullptr;
}

/// Columns @p c and @p c + 1 of one output row: the 16-bit pair into @p o_row, and the same two
/// values before their rounding into @p o32_row when it is set (o_fp32_row).
template <class T>
__device__ __forceinline__ void store_o2(T* o_row, float* o32_row, int c, float x, float y) {
  *reinterpret_cast<uint32_t*>(o_row + c) = pack2<T>(x, y);
  if (o32_row) *reinterpret_cast<float2*>(o32_row + c) = make_float2(x, y);
}

/// Row h (0 or 1) of a thread's share of a wgmma accumulator tile of @p D columns (hopper.cuh's
/// layout: register 4j + 2h + e of quad thread @p t holds column 8j + 2t + e), scaled by @p inv_l,
/// stored 16-bit in 16-byte pieces. Stored as pairs (store_o2), each 32-byte sector of the row is
/// written by two store instructions of half a sector each, which L2 takes as two partial writes.
/// Here the quad's four threads first transpose each group of four 8-column blocks among
/// themselves (two shuffle rounds, xor 1 then xor 2), so that thread t holds all eight columns of
/// block 4m + t and writes them with one 16-byte store: a warp's store covers whole sectors, each
/// once. Every lane of the warp must call it (the shuffles); only those with @p store write, and
/// only the columns below @p cols (a head_dim under the tile's D: rung 16's 80 and 96).
template <class T, int D>
__device__ __forceinline__ void store_o_row16(T* o_row, const float* acc, int h, float inv_l, int t, bool store,
                                              int cols = D) {
  const bool odd = t & 1, high = t & 2;
#pragma unroll
  for (int m = 0; m < D / 32; ++m) {
    uint32_t x[4];  // x[i]: this thread's pair of block 4m + i
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int j = 4 * m + i;
      x[i] = pack2<T>(acc[4 * j + 2 * h] * inv_l, acc[4 * j + 2 * h + 1] * inv_l);
    }
    // Round 1 (partner t ^ 1): keep the blocks of this thread's parity, trade the others. y[s][k]:
    // the pair of thread (t & ~1) + s for block 2k + (t & 1).
    const uint32_t r0 = __shfl_xor_sync(0xffffffffu, odd ? x[0] : x[1], 1);
    const uint32_t r1 = __shfl_xor_sync(0xffffffffu, odd ? x[2] : x[3], 1);
    const uint32_t y00 = odd ? r0 : x[0], y10 = odd ? x[1] : r0, y01 = odd ? r1 : x[2], y11 = odd ? x[3] : r1;
    // Round 2 (partner t ^ 2): keep block t's pairs, trade the others.
    const uint32_t q0 = __shfl_xor_sync(0xffffffffu, high ? y00 : y01, 2);
    const uint32_t q1 = __shfl_xor_sync(0xffffffffu, high ? y10 : y11, 2);
    const uint32_t k0 = high ? y01 : y00, k1 = high ? y11 : y10;
    const uint4 v = high ? make_uint4(q0, q1, k0, k1) : make_uint4(k0, k1, q0, q1);  // threads 0..3's pairs
    if (store && (cols == D || 8 * (4 * m + t) < cols)) *reinterpret_cast<uint4*>(o_row + 8 * (4 * m + t)) = v;
  }
}

}  // namespace fl
