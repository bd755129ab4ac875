// The dropout mask written out (dropout_mask.h): one thread per element, dropout_keep itself.
#include <stdexcept>

#include "flashladder/cuda_check.h"
#include "flashladder/dropout.h"
#include "flashladder/dropout_mask.h"

namespace fl {
namespace {

__global__ void dropout_mask_kernel(uint8_t* out, int heads_q, int rows, int cols, const int* cu_q,
                                    const int* cu_k, DropoutParams d) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  const int i = blockIdx.y;
  const int bh = blockIdx.z;
  if (j >= cols) return;
  const int b = bh / heads_q, h = bh % heads_q;
  bool inside = true;
  if (cu_q != nullptr) inside = i < cu_q[b + 1] - cu_q[b] && j < cu_k[b + 1] - cu_k[b];
  const DropoutKey key = dropout_key(d);
  out[(static_cast<int64_t>(bh) * rows + i) * cols + j] =
      !inside || dropout_keep(key, b, h, heads_q, i, j);
}

}  // namespace

void dropout_mask(uint8_t* out, int batch, int heads_q, int rows, int cols, const int* cu_seqlens_q,
                  const int* cu_seqlens_k, float p, const int64_t* state, cudaStream_t stream) {
  if (batch <= 0 || heads_q <= 0 || rows <= 0 || cols <= 0) return;
  if (static_cast<int64_t>(batch) * heads_q > 65535 || rows > 65535)
    throw std::invalid_argument(
        "dropout_mask: batch x heads_q and rows must each be at most 65535");
  const dim3 grid((cols + 127) / 128, rows, batch * heads_q);
  dropout_mask_kernel<<<grid, 128, 0, stream>>>(out, heads_q, rows, cols, cu_seqlens_q,
                                                cu_seqlens_k, make_dropout(p, 0, 0, state));
  FL_LAUNCH_CHECK("dropout_mask_kernel");
}

}  // namespace fl
