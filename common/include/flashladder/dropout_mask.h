/// @file dropout_mask.h
/// @brief The dropout mask written out, for inspection (the package's return_attn_probs with
/// dropout_p > 0, FlashAttention's S_dmask): one byte per element, from dropout.h's dropout_keep
/// on the device, the kernels' own function and generator state. The kernels never store it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace fl {

/// Writes out[((b heads_q + h) rows + i) cols + j] = 1 where element (query i, key j) of
/// (sequence b, head h) is kept, 0 where dropped, for i < rows, j < cols; the elements past a
/// packed sequence's own lengths (cu_seqlens_q/k non-null: int32 [batch + 1]) are 1. @p state: the
/// device {seed, offset} (DropoutParams::state). Asynchronous, on @p stream.
void dropout_mask(uint8_t* out, int batch, int heads_q, int rows, int cols, const int* cu_seqlens_q,
                  const int* cu_seqlens_k, float p, const int64_t* state, cudaStream_t stream);

}  // namespace fl
