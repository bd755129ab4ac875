/// @file tests/cpu/hopper_bad_probe.cu
/// @brief Two deliberately wrong uses of the Hopper wrappers, compiled (never in the default
/// build) by tests/cpu/test_hopper_sass.cpp through the same ptxas guard as the Hopper targets,
/// which must fail and name the report:
///  - `-DFL_BAD_SETMAXNREG`: setmaxnreg in a kernel without `__launch_bounds__(threads, 1)`, so
///    ptxas does not know the register count at entry and ignores it (C7508);
///  - `-DFL_BAD_WGMMA`: a plain instruction writes an accumulator between two wgmmas of one
///    batch, without the wgmma_fence / wgmma_fence_operand pattern, so ptxas serializes every
///    wgmma of the kernel (C751x).
/// The good counterpart of both is tests/cpu/hopper_probe.cu, which the build compiles.
#include "flashladder/hopper.cuh"

namespace fl::hopper_bad_probe {

using namespace fl::hopper;

#if defined(FL_BAD_SETMAXNREG)
__global__ void bad_setmaxnreg(float* out) {  // no __launch_bounds__(384, 1)
  if (warpgroup_index() == 0) {
    setmaxnreg_dec<24>();
    out[threadIdx.x] = 0.0f;
  } else {
    setmaxnreg_inc<240>();
    out[threadIdx.x] = 1.0f;
  }
}
#endif

#if defined(FL_BAD_WGMMA)
__global__ void __launch_bounds__(128, 1) bad_wgmma(const __half* tile, float* out) {
  __shared__ alignas(1024) __half A[64 * 64];
  __shared__ alignas(1024) __half B[64 * 64];
  for (int i = threadIdx.x; i < 64 * 64; i += blockDim.x) A[i] = B[i] = tile[i];
  fence_proxy_async_smem();
  __syncthreads();
  float D[32];
  for (int i = 0; i < 32; ++i) D[i] = 0.0f;
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    wgmma_ss<__half, 64>(D, desc_kmajor(A + 16 * kk), desc_kmajor(B + 16 * kk), 1);
    D[0] += 1.0f;  // wrong: touches an accumulator the pending wgmma is still writing
  }
  wgmma_commit();
  wgmma_wait<0>();
  for (int i = 0; i < 32; ++i) out[threadIdx.x * 32 + i] = D[i];
}
#endif

}  // namespace fl::hopper_bad_probe
