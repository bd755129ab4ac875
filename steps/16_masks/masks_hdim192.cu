/// @file steps/16_masks/masks_hdim192.cu
/// @brief Rung 16's forward kernels on rung 15's MlaTiles (Q and K 192 columns, V and O 128:
/// MLA's prefill; launch.cu's with_head_dims). The backward of these head_dims runs on rung 14's
/// d = 256 tiles (masks_hdim256.cu).
#include "flashladder/tma.h"
#if FL_HOPPER_SM90A
#include "launch_template.cuh"

namespace fl::masks16 {
FL_MASKS16_INSTANTIATE_FWD(192)
}  // namespace fl::masks16
#endif
