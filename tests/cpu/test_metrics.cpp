// FLOPs, bytes and peak formulas, defined once in problem.cpp.
#include <cmath>

#include "catch_compat.h"
#include "flashladder/problem.h"
#include "flashladder/report.h"

using namespace fl;

TEST_CASE("FLOPs count unmasked pairs only", "[cpu][metrics]") {
  Problem p;
  p.batch = 2;
  p.heads_q = 8;
  p.heads_kv = 2;
  p.head_dim = 64;
  p.seqlen_q = p.seqlen_k = 1024;
  REQUIRE(attention_flops(p) == 4.0 * 2 * 8 * 1024 * 1024 * 64);
  p.causal = true;  // square causal: N(N+1)/2 pairs per head
  REQUIRE(unmasked_pairs(p) == 2.0 * 8 * 1024 * 1025 / 2);
  p.seqlen_q = 4;  // decode-like causal: query i sees Sk - Sq + i + 1 keys
  REQUIRE(unmasked_pairs(p) == 2.0 * 8 * (1021 + 1022 + 1023 + 1024));
  p.seqlen_q = 2000;  // Sq > Sk: the first 976 rows see no key
  REQUIRE(unmasked_pairs(p) == 2.0 * 8 * 1024 * 1025 / 2);
}

TEST_CASE("bytes: Q, K, V read once and O written once", "[cpu][metrics]") {
  Problem p;
  p.batch = 1;
  p.heads_q = 32;
  p.heads_kv = 8;
  p.head_dim = 128;
  p.seqlen_q = 1;
  p.seqlen_k = 4096;
  REQUIRE(kv_bytes(p) == 2.0 * 2 * 4096 * 8 * 128);
  REQUIRE(attention_bytes(p) == kv_bytes(p) + 2.0 * 2 * 32 * 128);
  REQUIRE(std::fabs(tflops_of(p, 1.0) - attention_flops(p) / 1e9) < 1e-12);
  REQUIRE(std::fabs(gbps_of(p, 1.0, Peak::memory) - kv_bytes(p) / 1e6) < 1e-9);
}

/// A timed run (0.05 ms) of the tour's decode problem: batch 1, 32/8 heads, d 128, 16k keys.
static RunReport decode_report() {
  RunReport r;
  r.problem.batch = 1;
  r.problem.heads_q = 32;
  r.problem.heads_kv = 8;
  r.problem.head_dim = 128;
  r.problem.seqlen_q = 1;
  r.problem.seqlen_k = 16384;
  r.timing.timed = true;
  r.timing.median_ms = 0.05;
  return r;
}

TEST_CASE("a decode row's percent of peak is its share of the DRAM bandwidth", "[cpu][metrics]") {
  RunReport r = decode_report();  // a CUDA-core rung (its own ceiling: fp32 FMA)
  r.peak = Peak::fp32_fma;
  r.device.peak_fp32_tflops = 50;
  r.device.peak_gbps = 3000;
  const double gbps = gbps_of(r.problem, 0.05, Peak::memory);  // K and V read once
  REQUIRE(gbps > 100);
  REQUIRE(std::fabs(percent_of_peak(r, Peak::memory) - 100 * gbps / 3000) < 1e-9);
  REQUIRE(std::fabs(percent_of_peak(r) - 100 * tflops_of(r.problem, 0.05) / 50) < 1e-9);  // its own
  r.peak = Peak::memory;  // rung 08: the same definition either way
  REQUIRE(percent_of_peak(r) == percent_of_peak(r, Peak::memory));
  r.timing.timed = false;
  REQUIRE(percent_of_peak(r, Peak::memory) == 0);
}

TEST_CASE("an e4m3 KV cache counts K and V at one byte per element", "[cpu][metrics]") {
  RunReport r = decode_report();  // rung 08's fp8-kv variant
  r.peak = Peak::memory;
  r.fp8_kv_cache = true;
  r.device.peak_gbps = 4000;
  const double half = gbps_of(r.problem, 0.05, Peak::memory) / 2;
  REQUIRE(std::fabs(gbps_of(r.problem, 0.05, Peak::memory, true) - half) < 1e-9);
  REQUIRE(std::fabs(run_gbps(r) - half) < 1e-9);
  REQUIRE(std::fabs(percent_of_peak(r) - 100 * half / 4000) < 1e-9);  // the bytes it read
}

TEST_CASE("peak rates from clocks and units", "[cpu][metrics]") {
  DeviceInfo h100;
  h100.cc_major = 9;
  h100.sm_count = 132;
  h100.clock_khz = 1980000;
  fill_peaks(&h100, 2619000, 5120);
  REQUIRE(std::fabs(h100.peak_fp32_tflops - 66.9) < 0.1);   // 132 x 128 x 2 x 1.98 GHz
  REQUIRE(std::fabs(h100.peak_tensor_tflops - 1070.4) < 1);  // 132 x 4096 x 1.98 GHz
  REQUIRE(std::fabs(h100.peak_gbps - 3352) < 1);             // 2 x 2.619 GHz x 640 B
  DeviceInfo a100;
  a100.cc_major = 8;
  a100.sm_count = 108;
  a100.clock_khz = 1410000;
  fill_peaks(&a100, 1215000, 5120);
  REQUIRE(std::fabs(a100.peak_fp32_tflops - 19.5) < 0.1);
  REQUIRE(std::fabs(a100.peak_tensor_tflops - 312) < 1);
}
