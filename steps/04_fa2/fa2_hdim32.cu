/// @file steps/04_fa2/fa2_hdim32.cu
/// @brief Rung 04's kernel and its ablation kernels for head_dim 32 (one file per
/// head_dim: parallel builds).
#include "launch_template.cuh"

#if FL_HEAD_DIM_ONLY == 0 || FL_HEAD_DIM_ONLY == 32
FL_FA2_INSTANTIATE(32)
#endif
