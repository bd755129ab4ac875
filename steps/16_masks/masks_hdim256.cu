/// @file steps/16_masks/masks_hdim256.cu
/// @brief Rung 16's kernels for head_dim 256 (one translation unit per head_dim: they compile
/// in parallel).
#include "flashladder/tma.h"
#if FL_HOPPER_SM90A
#include "launch_template.cuh"

namespace fl::masks16 {
FL_MASKS16_INSTANTIATE(256)
}  // namespace fl::masks16
#endif
