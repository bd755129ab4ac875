// ceilings: the measured rates the ladder is compared with, on this GPU.
//
//   fp32 FFMA          a kernel of independent FFMA chains (the CUDA-core rungs 01-04, 07)
//   mma.sync fp16/bf16 a kernel of independent mma.sync.m16n8k16 with fp32 accumulators
//                      (the instruction rungs 05, 06 and 08 use)
//   cuBLAS fp16/bf16   cublasGemmEx, 8192^3, fp32 accumulation: what the library reaches with
//                      every instruction the GPU has (on Hopper: wgmma), when cuBLAS is built in
//   device copy        cudaMemcpyAsync device to device of 1 GiB; bytes read + written / time
//
// Each rate is the median of --reps timed launches (CUDA events), after a warm-up. The
// datasheet peaks (DeviceInfo) are printed beside them: the measured ceilings are what
// "% of the ceiling" means in the notebooks and the bench report.
//
//   ceilings [--json FILE] [--reps N]
//
// Exit: 0 measured, 2 bad arguments, 77 no usable CUDA device.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#if FL_HAVE_CUBLAS
#include <cublas_v2.h>
#endif

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "flashladder/cuda_check.h"
#include "flashladder/device.h"
#include "flashladder/ptx.cuh"
#include "flashladder/report.h"

namespace {

using namespace fl;

// ---- fp32 FFMA ----------------------------------------------------------------
constexpr int kFfmaChains = 16;   // independent accumulators per thread: hides the FFMA latency
constexpr int kFfmaIters = 4096;  // loop trips per launch (x kFfmaChains FFMAs each)

__global__ void __launch_bounds__(256) ffma_loop(float* out, float a, float b) {
  float acc[kFfmaChains];
#pragma unroll
  for (int c = 0; c < kFfmaChains; ++c) acc[c] = threadIdx.x + c;
  for (int i = 0; i < kFfmaIters; ++i) {
#pragma unroll
    for (int c = 0; c < kFfmaChains; ++c) acc[c] = fmaf(acc[c], a, b);
  }
  float sum = 0.f;
#pragma unroll
  for (int c = 0; c < kFfmaChains; ++c) sum += acc[c];
  if (sum == 1234.5f)
    out[threadIdx.x] = sum;  // never true for the inputs used: keeps the loop alive
}

// ---- mma.sync m16n8k16 ----------------------------------------------------------
constexpr int kMmaChains = 8;    // independent accumulator tiles per warp
constexpr int kMmaIters = 2048;  // loop trips per launch (x kMmaChains MMAs each)

template <class T>
__global__ void __launch_bounds__(256) mma_loop(float* out, uint32_t seed) {
  uint32_t a[4] = {seed, seed ^ 1u, seed ^ 2u, seed ^ 3u};
  const uint32_t b0 = seed * 3u, b1 = seed * 5u;
  float acc[kMmaChains][4] = {};
  for (int i = 0; i < kMmaIters; ++i) {
#pragma unroll
    for (int c = 0; c < kMmaChains; ++c) ptx::mma_m16n8k16<T>(acc[c], a, b0, b1);
  }
  float sum = 0.f;
#pragma unroll
  for (int c = 0; c < kMmaChains; ++c) sum += acc[c][0] + acc[c][1] + acc[c][2] + acc[c][3];
  if (sum == 1234.5f) out[threadIdx.x] = sum;
}

/// Median milliseconds of @p reps calls of @p launch (after one warm-up call).
double median_ms(const std::function<void()>& launch, int reps) {
  launch();
  FL_CUDA_CHECK(cudaDeviceSynchronize());
  EventTimer timer;
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    timer.start();
    launch();
    ms.push_back(timer.stop());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

struct Ceiling {
  std::string key, what, unit;
  double value = 0;
  std::string note;  ///< why it is absent, or how it was measured
};

Ceiling measure_ffma(const DeviceInfo& dev, float* scratch, int reps) {
  const int blocks = dev.sm_count * 8, threads = 256;
  const double ms = median_ms(
      [&] {
        ffma_loop<<<blocks, threads>>>(scratch, 0.999f, 0.001f);
        FL_LAUNCH_CHECK("ffma_loop");
      },
      reps);
  const double flops = 2.0 * blocks * threads * static_cast<double>(kFfmaIters) * kFfmaChains;
  return {"ffma_tflops", "fp32 FFMA", "TFLOP/s", flops / (ms * 1e-3) / 1e12,
          "independent FFMA chains, 16 per thread, 8 x 256-thread blocks per SM"};
}

template <class T>
Ceiling measure_mma(const DeviceInfo& dev, float* scratch, int reps, const char* key,
                    const char* what) {
  const int blocks = dev.sm_count * 4, threads = 256;
  const double ms = median_ms(
      [&] {
        mma_loop<T><<<blocks, threads>>>(scratch, 0x3c003c00u);
        FL_LAUNCH_CHECK("mma_loop");
      },
      reps);
  const double mmas = static_cast<double>(blocks) * (threads / 32) * kMmaIters * kMmaChains;
  return {key, what, "TFLOP/s", mmas * 2.0 * 16 * 8 * 16 / (ms * 1e-3) / 1e12,
          "mma.sync.aligned.m16n8k16, fp32 accumulate, 8 independent tiles per warp"};
}

Ceiling measure_copy(int reps) {
  const size_t bytes = size_t{1} << 30;
  DeviceBuffer a(bytes), b(bytes);
  const double ms = median_ms(
      [&] { FL_CUDA_CHECK(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice)); },
      reps);
  return {"copy_gbps", "device copy", "GB/s", 2.0 * bytes / (ms * 1e-3) / 1e9,
          "cudaMemcpyAsync device to device, 1 GiB; bytes read + written"};
}

#if FL_HAVE_CUBLAS
#define FL_CUBLAS_CHECK(call)                                                   \
  do {                                                                          \
    const cublasStatus_t st_ = (call);                                          \
    if (st_ != CUBLAS_STATUS_SUCCESS)                                           \
      throw std::runtime_error(std::string(#call) + " failed: cuBLAS status " + \
                               std::to_string(st_));                            \
  } while (0)

Ceiling measure_cublas(cudaDataType_t type, const char* key, const char* what, int reps) {
  const int n = 8192;
  const size_t bytes = static_cast<size_t>(n) * n * 2;
  DeviceBuffer a(bytes), b(bytes), c(bytes);
  FL_CUDA_CHECK(cudaMemset(a.get(), 0, bytes));  // zeros: the rate does not depend on the values
  FL_CUDA_CHECK(cudaMemset(b.get(), 0, bytes));
  cublasHandle_t h;
  FL_CUBLAS_CHECK(cublasCreate(&h));
  const float alpha = 1.f, beta = 0.f;
  double ms = 0;
  try {
    ms = median_ms(
        [&] {
          FL_CUBLAS_CHECK(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a.get(), type,
                                       n, b.get(), type, n, &beta, c.get(), type, n,
                                       CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        },
        reps);
  } catch (...) {
    cublasDestroy(h);
    throw;
  }
  cublasDestroy(h);
  return {key, what, "TFLOP/s", 2.0 * n * n * static_cast<double>(n) / (ms * 1e-3) / 1e12,
          "cublasGemmEx 8192^3, fp32 compute, default algorithm"};
}
#endif

std::string ceilings_json(const DeviceInfo& dev, const std::vector<Ceiling>& cs, int reps) {
  Json j;
  j.begin_object()
      .kv("schema", "flashladder.ceilings/1")
      .raw("device", device_json(dev))
      .kv("reps", reps);
  j.begin_object("ceilings");
  for (const auto& c : cs) {
    j.begin_object(c.key.c_str()).kv("what", c.what).kv("unit", c.unit);
    if (c.value > 0) j.kv("value", c.value);
    j.kv("note", c.note).end_object();
  }
  j.end_object().end_object();
  return j.str();
}

}  // namespace

int main(int argc, char** argv) {
  std::string json_path;
  int reps = 20;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--json") && i + 1 < argc) {
      json_path = argv[++i];
    } else if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) {
      reps = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: ceilings [--json FILE] [--reps N]\n");
      return 2;
    }
  }
  if (reps < 3) {
    std::fprintf(stderr, "ceilings: --reps must be >= 3\n");
    return 2;
  }
  DeviceInfo dev;
  try {
    dev = query_device();
  } catch (const NoDevice& e) {
    std::fprintf(stderr, "ceilings: %s; nothing to measure (exit 77 = skipped)\n", e.what());
    return 77;
  }
  try {
    DeviceBuffer scratch(4096);
    std::vector<Ceiling> cs;
    cs.push_back(measure_ffma(dev, scratch.as<float>(), reps));
    const bool sm80 = dev.cc_major >= 8;
    if (sm80) {
      cs.push_back(measure_mma<__half>(dev, scratch.as<float>(), reps, "mma_sync_fp16_tflops",
                                       "mma.sync fp16"));
      cs.push_back(measure_mma<__nv_bfloat16>(dev, scratch.as<float>(), reps,
                                              "mma_sync_bf16_tflops", "mma.sync bf16"));
    } else {
      cs.push_back({"mma_sync_fp16_tflops", "mma.sync fp16", "TFLOP/s", 0, "needs sm_80"});
      cs.push_back({"mma_sync_bf16_tflops", "mma.sync bf16", "TFLOP/s", 0, "needs sm_80"});
    }
#if FL_HAVE_CUBLAS
    cs.push_back(measure_cublas(CUDA_R_16F, "cublas_fp16_tflops", "cuBLAS fp16 GEMM", reps));
    if (sm80)
      cs.push_back(measure_cublas(CUDA_R_16BF, "cublas_bf16_tflops", "cuBLAS bf16 GEMM", reps));
#else
    cs.push_back({"cublas_fp16_tflops", "cuBLAS fp16 GEMM", "TFLOP/s", 0, "built without cuBLAS"});
    cs.push_back({"cublas_bf16_tflops", "cuBLAS bf16 GEMM", "TFLOP/s", 0, "built without cuBLAS"});
#endif
    cs.push_back(measure_copy(reps));

    std::printf("ceilings on %s (%s, %d SMs, %.0f MHz), median of %d launches\n", dev.name.c_str(),
                dev.arch().c_str(), dev.sm_count, dev.clock_khz / 1e3, reps);
    for (const auto& c : cs) {
      if (c.value > 0)
        std::printf("  %-18s %9.1f %-8s %s\n", c.what.c_str(), c.value, c.unit.c_str(),
                    c.note.c_str());
      else
        std::printf("  %-18s %9s %-8s %s\n", c.what.c_str(), "-", c.unit.c_str(), c.note.c_str());
    }
    std::printf("  datasheet: fp32 FMA %.1f TFLOP/s, 16-bit tensor %.0f TFLOP/s, DRAM %.0f GB/s\n",
                dev.peak_fp32_tflops, dev.peak_tensor_tflops, dev.peak_gbps);
    if (!json_path.empty()) {
      std::ofstream f(json_path);
      f << ceilings_json(dev, cs, reps) << "\n";
      if (!f) {
        std::fprintf(stderr, "ceilings: cannot write '%s'\n", json_path.c_str());
        return 2;
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ceilings: %s\n", e.what());
    return 1;
  }
  return 0;
}
