// The bulk reduce-add wrappers (hopper.cuh) on an sm_90 GPU: 264 CTAs (two waves of an H100's 132
// SMs) add their fp32 tiles into 4 global tiles through the TMA unit (tests/hopper/bulk_reduce.cu),
// one tile and two tiles per bulk group, over a non-zero accumulator. Each sum is checked against
// fp64 on the host: every element of every target tile, so a lost, doubled or misplaced add fails.
#include <cmath>
#include <random>
#include <vector>

#include "catch_compat.h"
#include "expected_runs.h"
#include "flashladder/cuda_check.h"
#include "flashladder/device.h"
#include "hopper/bulk_reduce.h"

namespace {

bool is_sm90() {
  int dev = 0, major = 0;
  FL_CUDA_CHECK(cudaGetDevice(&dev));
  FL_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  return major == 9;
}

}  // namespace

TEST_CASE("bulk reduce-add: many CTAs add fp32 tiles into the same global tiles", "[hopper_bulk]") {
  if (!is_sm90()) {  // the whole test is skipped (exit 77), not passed
    fl_test::skip_whole_test("cp.reduce.async.bulk needs an sm_90 GPU");
    return;
  }
  int ran = 0;
  const int ctas = 264, targets = 4, tile_floats = 64 * 32;  // a 64-row x 32-column fp32 tile: 8 KiB
  for (int tiles_per_cta : {1, 2}) {
    INFO("tiles per CTA " << tiles_per_cta);
    const size_t n_parts = static_cast<size_t>(ctas) * tiles_per_cta * tile_floats;
    const size_t n_accum = static_cast<size_t>(targets) * tile_floats;
    std::mt19937 rng(2024 + tiles_per_cta);
    std::normal_distribution<float> normal(0.f, 1.f);
    std::vector<float> parts(n_parts), accum(n_accum);
    for (float& x : parts) x = normal(rng);
    for (float& x : accum) x = 0.25f + normal(rng);
    std::vector<double> expect(accum.begin(), accum.end());
    for (int c = 0; c < ctas; ++c)
      for (int t = 0; t < tiles_per_cta; ++t) {
        const float* src = parts.data() + (static_cast<size_t>(c) * tiles_per_cta + t) * tile_floats;
        double* dst = expect.data() + static_cast<size_t>((c + t) % targets) * tile_floats;
        for (int i = 0; i < tile_floats; ++i) dst[i] += src[i];
      }
    float *d_parts = nullptr, *d_accum = nullptr;
    FL_CUDA_CHECK(cudaMalloc(&d_parts, n_parts * sizeof(float)));
    FL_CUDA_CHECK(cudaMalloc(&d_accum, n_accum * sizeof(float)));
    FL_CUDA_CHECK(cudaMemcpy(d_parts, parts.data(), n_parts * sizeof(float), cudaMemcpyHostToDevice));
    FL_CUDA_CHECK(cudaMemcpy(d_accum, accum.data(), n_accum * sizeof(float), cudaMemcpyHostToDevice));
    const cudaError_t e = fl_test::bulk_reduce_add_tiles(d_accum, d_parts, ctas, tiles_per_cta, targets, tile_floats);
    std::vector<float> got(n_accum);
    FL_CUDA_CHECK(cudaMemcpy(got.data(), d_accum, n_accum * sizeof(float), cudaMemcpyDeviceToHost));
    FL_CUDA_CHECK(cudaFree(d_parts));
    FL_CUDA_CHECK(cudaFree(d_accum));
    if (e == cudaErrorNotSupported) {
      fl_test::skip_whole_test("this build has no sm_90a code (FL_HOPPER off)");
      return;
    }
    REQUIRE(e == cudaSuccess);
    ++ran;
    // Each element is a sum of 66 (or 132) N(0, 1) terms in fp32, in some order: its rounding error
    // stays far below 1e-3; a lost or doubled tile moves elements by about 1.
    double worst = 0;
    for (size_t i = 0; i < n_accum; ++i) worst = std::max(worst, std::fabs(got[i] - expect[i]));
    CHECK(worst < 1e-3);
  }
  REQUIRE(ran == 2);  // one tile and two tiles per bulk group
}
