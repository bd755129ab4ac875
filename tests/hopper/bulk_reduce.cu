/// @file tests/hopper/bulk_reduce.cu
/// @brief The kernel behind bulk_reduce.h, built for sm_90a (fl_hopper_target): the threads fill
/// the CTA's tiles in shared memory, fence them for the async proxy and meet at a barrier; thread 0
/// adds each tile into global memory with cp.reduce.async.bulk, commits the bulk group and waits
/// until the tiles are read before the CTA ends.
#include "bulk_reduce.h"

#include "flashladder/hopper.cuh"

namespace fl_test {

#if FL_HOPPER_SM90A
namespace {

constexpr int kThreads = 128;
constexpr int kMaxFloats = 8192;  // 32 KiB of shared memory per CTA

__global__ void __launch_bounds__(kThreads) bulk_reduce_kernel(float* accum, const float* parts, int tiles_per_cta,
                                                               int targets, int tile_floats) {
  __shared__ __align__(128) float tiles[kMaxFloats];
  const int n = tiles_per_cta * tile_floats;
  const float* mine = parts + static_cast<long long>(blockIdx.x) * n;
  for (int i = threadIdx.x; i < n; i += kThreads) tiles[i] = mine[i];
  fl::hopper::fence_proxy_async_smem();
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int t = 0; t < tiles_per_cta; ++t) {
      float* dst = accum + static_cast<long long>((blockIdx.x + t) % targets) * tile_floats;
      fl::hopper::bulk_reduce_add_f32(dst, fl::hopper::smem_addr(tiles + t * tile_floats),
                                      static_cast<uint32_t>(tile_floats * sizeof(float)));
    }
    fl::hopper::bulk_commit_group();
    fl::hopper::bulk_wait_group_read<0>();
  }
}

}  // namespace
#endif

cudaError_t bulk_reduce_add_tiles(float* accum, const float* parts, int ctas, int tiles_per_cta, int targets,
                                  int tile_floats) {
#if FL_HOPPER_SM90A
  if (tile_floats % 4 != 0 || tiles_per_cta * tile_floats > kMaxFloats || targets < 1) return cudaErrorInvalidValue;
  bulk_reduce_kernel<<<ctas, kThreads>>>(accum, parts, tiles_per_cta, targets, tile_floats);
  cudaError_t e = cudaGetLastError();
  return e != cudaSuccess ? e : cudaDeviceSynchronize();
#else
  (void)accum, (void)parts, (void)ctas, (void)tiles_per_cta, (void)targets, (void)tile_floats;
  return cudaErrorNotSupported;
#endif
}

}  // namespace fl_test
