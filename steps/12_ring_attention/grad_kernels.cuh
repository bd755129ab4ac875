/// @file steps/12_ring_attention/grad_kernels.cuh
/// @brief Rung 12's backward kernels beside the backward rung: the fp32 sums of the gradients.
///
/// A ring step's backward launch (rung 14 or 11 on one (query rows, key rows) chunk) writes its
/// partial dQ, dK, dV in 16 bits. Over the ring, a rank's dQ is the sum of its P steps' partials
/// and a K/V shard's dK, dV the sum of the P ranks' partials, which travel with it. Both sums stay
/// in fp32: summing P 16-bit partials in 16 bits would round P times. Each partial is rounded
/// once, by the rung, before it is added.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "flashladder/dtype.cuh"

namespace fl::ring {

/// dst[b, dst_row + i, :] += src[b, src_row + i, :] for i < rows (elements of one token's row
/// each), b < batch; the batch strides count rows. fp32 destination, 16-bit source.
struct AddRowsArgs {
  float* dst;
  const void* src;
  int batch, rows, row_elems;
  int64_t dst_batch_rows, src_batch_rows;  ///< rows per batch entry in each buffer
  int dst_row, src_row;                    ///< the first row of each
};

template <class T>
__global__ void add_rows_kernel(AddRowsArgs a) {
  const int64_t per_batch = static_cast<int64_t>(a.rows) * a.row_elems / 4;  // row_elems % 8 == 0
  const int64_t n = per_batch * a.batch;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t b = i / per_batch, e = (i % per_batch) * 4;
    const int64_t d = (b * a.dst_batch_rows + a.dst_row) * a.row_elems + e;
    const int64_t s = (b * a.src_batch_rows + a.src_row) * a.row_elems + e;
    const uint2 x16 = *reinterpret_cast<const uint2*>(static_cast<const T*>(a.src) + s);
    const float2 x01 = unpack2<T>(x16.x), x23 = unpack2<T>(x16.y);
    float4 acc = *reinterpret_cast<const float4*>(a.dst + d);
    acc.x += x01.x;
    acc.y += x01.y;
    acc.z += x23.x;
    acc.w += x23.y;
    *reinterpret_cast<float4*>(a.dst + d) = acc;
  }
}

/// Rounds @p n fp32 values to 16 bits (n % 4 == 0).
template <class T>
__global__ void round_kernel(void* dst, const float* src, int64_t n) {
  for (int64_t i = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) * 4; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x * 4) {
    const float4 x = *reinterpret_cast<const float4*>(src + i);
    *reinterpret_cast<uint2*>(static_cast<T*>(dst) + i) = make_uint2(pack2<T>(x.x, x.y), pack2<T>(x.z, x.w));
  }
}

/// Blocks of 256 threads for @p work items of four elements, at most a few waves.
inline unsigned grid_for(int64_t work) {
  const int64_t blocks = (work + 255) / 256;
  return static_cast<unsigned>(blocks < 4096 ? (blocks > 0 ? blocks : 1) : 4096);
}

template <class T>
void launch_add_rows(const AddRowsArgs& a, cudaStream_t s) {
  const int64_t work = static_cast<int64_t>(a.batch) * a.rows * a.row_elems / 4;
  if (work == 0) return;
  add_rows_kernel<T><<<grid_for(work), 256, 0, s>>>(a);
}

template <class T>
void launch_round(void* dst, const float* src, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  round_kernel<T><<<grid_for(n / 4), 256, 0, s>>>(dst, src, n);
}

}  // namespace fl::ring
