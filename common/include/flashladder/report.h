/// @file report.h
/// @brief The run report: the table a student reads and the JSON the bench,
/// notebooks and reports read. One format, one place.
#pragma once

#include <string>
#include <vector>

#include "flashladder/check.h"
#include "flashladder/check_bwd.h"
#include "flashladder/problem.h"

namespace fl {

/// Resource usage of one kernel of a rung (cudaFuncGetAttributes + occupancy API).
struct KernelResources {
  std::string name;          ///< kernel name as the rung calls it
  int block_threads = 0;     ///< threads per block at launch
  int registers = 0;         ///< registers per thread
  int local_bytes = 0;       ///< local memory per thread (spills and stack arrays)
  int static_smem = 0;       ///< static shared memory per block
  size_t dynamic_smem = 0;   ///< dynamic shared memory per block at launch
  int max_blocks_per_sm = 0; ///< occupancy API
  double occupancy = 0;      ///< active warps / max warps per SM
};

/// Timing of a rung (CUDA events, median).
struct Timing {
  bool timed = false;
  int iters = 0;
  double median_ms = 0, min_ms = 0, max_ms = 0;
};

/// One declared baseline timed on the same input (the "vs" lines of a report).
struct BaselineResult {
  std::string label;    ///< the entry that ran, e.g. "05_tensor_cores" or "07_dv_tiling[untiled-m64-n64]"
  std::string why;      ///< Baseline::why
  bool fastest_of_earlier = false;  ///< chosen as the fastest earlier rung on this shape
  std::string considered;  ///< fastest_of_earlier: every candidate and its time ("04 1.2 ms, ...")
  Timing timing;
  std::string skipped;  ///< why it did not run ("" if it ran)
};

/// Everything one run of one rung produced.
struct RunReport {
  int rung_number = 0;
  std::string rung_name, variant, summary;
  Peak peak = Peak::fp32_fma;
  Problem problem;
  std::string input;            ///< input kind name
  unsigned long long seed = 0;
  DeviceInfo device;
  std::string date;             ///< when it ran (UTC, ISO 8601)
  std::string git_sha;          ///< the commit it was built from (configure time)
  size_t workspace_bytes = 0;   ///< rung scratch in HBM (e.g. S for rung 01)
  std::vector<std::string> notes;  ///< extra lines a rung adds
  CheckResult check;
  Timing timing;
  std::vector<KernelResources> kernels;
  /// The rung's declared baselines (Rung::baselines) timed on the same input.
  std::vector<BaselineResult> baselines;

  // A backward rung's run (Rung::launch_bwd): the timing, the rate and the kernels are the
  // backward pass's; `check` is bwd.summary; `workspace_bytes` the backward's scratch.
  bool backward = false;       ///< this run timed and checked a backward pass
  bool deterministic = false;  ///< AttnBwdParams::deterministic (--deterministic)
  std::string forward_label;   ///< the rung whose forward pass made O and LSE (not timed)
  BwdCheck bwd;                ///< dQ, dK, dV one by one

  // An FP8 rung's run (Rung::fp8_inputs): `check` judged the kernel on the dequantized inputs.
  bool fp8 = false;            ///< the inputs went through the FP8 path (fp8_device.h)
  std::string fp8_mode;        ///< fp8_mode_label(): "per-head", "per-tensor+hadamard", ...
  ErrorStats fp8_e2e;          ///< output vs fp64 on the 16-bit inputs: the error a user sees
  Timing fp8_quant;            ///< the quantize kernels' time (once per Q/K/V, not in `timing`)
  bool fp8_kv_cache = false;   ///< Rung::fp8_kv_cache: K and V read at one byte per element
};

/// TFLOP/s from attention_flops() and the median time.
double tflops_of(const Problem& p, double ms);
/// GB/s from attention_bytes() (or kv_bytes() for Peak::memory rungs); @p fp8_kv_cache: K and V
/// are e4m3 (Rung::fp8_kv_cache), one byte per element instead of two.
double gbps_of(const Problem& p, double ms, Peak peak, bool fp8_kv_cache = false);
/// Backward TFLOP/s from attention_bwd_flops() (2.5 x the forward's) and the median time.
double bwd_tflops_of(const Problem& p, double ms);
/// Backward GB/s from attention_bwd_bytes().
double bwd_gbps_of(const Problem& p, double ms);
/// TFLOP/s of a run: tflops_of, or bwd_tflops_of for a backward run.
double run_tflops(const RunReport& r);
/// GB/s of a run: gbps_of, or bwd_gbps_of for a backward run.
double run_gbps(const RunReport& r);
/// Percent of the ceiling the rung is measured against (its Rung::peak).
double percent_of_peak(const RunReport& r);
/// Percent of @p ceiling: a decode row's is Peak::memory, the DRAM bandwidth (GB/s of gbps_of),
/// whichever peak its rung declares for prefill.
double percent_of_peak(const RunReport& r, Peak ceiling);
/// Human-readable bytes ("256.0 MiB").
std::string format_bytes(double bytes);
/// The text report.
std::string format_report(const RunReport& r);
/// The report as one JSON object (schema "flashladder.run/1").
std::string to_json(const RunReport& r);
/// The device as a JSON object (shared by the bench context).
std::string device_json(const DeviceInfo& d);

/// Minimal JSON writer (objects, arrays, numbers, strings), enough for reports.
class Json {
 public:
  Json& begin_object(const char* key = nullptr);
  Json& end_object();
  Json& begin_array(const char* key = nullptr);
  Json& end_array();
  Json& kv(const char* key, const std::string& v);
  Json& kv(const char* key, const char* v) { return kv(key, std::string(v)); }
  Json& kv(const char* key, double v);
  Json& kv(const char* key, long long v);
  Json& kv(const char* key, int v) { return kv(key, static_cast<long long>(v)); }
  Json& kv(const char* key, bool v);
  Json& raw(const char* key, const std::string& json);
  const std::string& str() const { return s_; }
  static std::string quote(const std::string& s);

 private:
  void comma();
  void key(const char* k);
  std::string s_;
  std::vector<bool> first_{true};
};

/// The fields of a check result, written into the object @p j has open: pass, checked, mode,
/// rows, rel_fro, max_abs, lse_max_abs and their tolerances, unwritten, reason. The run report's
/// "check" and rung 12's report share it.
void check_fields(Json& j, const CheckResult& c);

}  // namespace fl
