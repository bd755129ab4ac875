/// @file runner.h
/// @brief The shared runner: inputs -> device -> run -> check -> time -> report.
/// Each rung's main.cu is one call to run_main(); tests and bench use the pieces.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <functional>

#include "flashladder/backward.h"
#include "flashladder/check.h"
#include "flashladder/check_bwd.h"
#include "flashladder/cli.h"
#include "flashladder/device.h"
#include "flashladder/fp8_device.h"
#include "flashladder/inputs.h"
#include "flashladder/registry.h"
#include "flashladder/report.h"

namespace fl {

/// Exit codes of every executable.
enum ExitCode : int { kExitOk = 0, kExitCheckFailed = 1, kExitBadInput = 2, kExitNoDevice = 77 };

/// Q, K, V, O, LSE and workspace on the device for one problem, plus the
/// AttnParams that point at them. K/V are laid out in pages when
/// problem.page_size > 0 (pages shuffled through a block table).
class DeviceProblem {
 public:
  /// Allocates and uploads. Throws std::runtime_error with the numbers when the
  /// problem does not fit in free device memory.
  DeviceProblem(const Problem& p, const HostInputs& in, size_t workspace_bytes,
                unsigned long long seed = 1);
  const AttnParams& params() const { return params_; }
  /// Allocates the fp32 copy of O (AttnParams::o_fp32, dense like O) and points params() at it,
  /// for a forward that writes one (Rung::writes_o_fp32) ahead of a backward pass.
  void want_o_fp32();
  /// Fills O, LSE and the fp32 O (when wanted) with NaN (so unwritten elements are caught).
  void poison_outputs();
  /// Dense O [batch, seqlen_q, heads_q, head_dim] as 16-bit bits.
  std::vector<uint16_t> download_o() const;
  /// The fp32 copy of O (empty unless want_o_fp32 was called).
  std::vector<float> download_o_fp32() const;
  /// LSE [batch, heads_q, seqlen_q].
  std::vector<float> download_lse() const;
  /// Bytes the problem needs on the device (inputs, outputs, workspace).
  static size_t device_bytes(const Problem& p, size_t workspace_bytes);

  /// For an FP8 rung (Rung::fp8_inputs): makes e4m3 copies of Q, K, V (DeviceFp8, quantized
  /// once here) and points params() at them; params16() keeps the 16-bit inputs.
  void to_fp8(const Fp8Options& o, unsigned long long seed);
  /// The FP8 copies (null before to_fp8).
  DeviceFp8* fp8() const { return fp8_.get(); }
  /// The 16-bit inputs' params, whatever to_fp8 did.
  const AttnParams& params16() const { return params16_; }

 private:
  Problem p_;
  AttnParams params_{}, params16_{};
  DeviceBuffer q_, k_, v_, o_, lse_, ws_, table_, o32_;
  std::unique_ptr<DeviceFp8> fp8_;
};

/// The backward pass's own tensors on the device, beside a DeviceProblem's: dO (uploaded), dQ,
/// dK, dV (dense, laid out like Q, K, V) and the backward workspace, plus the AttnBwdParams
/// that point at them and at the forward's Q, K, V, O, LSE. The DeviceProblem must outlive it
/// and have a contiguous K/V (no pages).
class DeviceGrads {
 public:
  /// Allocates and uploads @p dout. Throws std::invalid_argument for a paged problem.
  DeviceGrads(const Problem& p, const DeviceProblem& fwd, const std::vector<uint16_t>& dout,
              size_t workspace_bytes, bool deterministic);
  const AttnBwdParams& params() const { return params_; }
  /// Fills dQ, dK, dV and the workspace with NaN: an element never written, or scratch read
  /// before the backward initialized it, shows up in the check.
  void poison();
  /// Dense dQ, dK, dV as 16-bit bits.
  std::vector<uint16_t> download_dq() const;
  std::vector<uint16_t> download_dk() const;
  std::vector<uint16_t> download_dv() const;
  /// Bytes the backward's own tensors need on the device (dO, dQ, dK, dV, workspace).
  static size_t device_bytes(const Problem& p, size_t workspace_bytes);

 private:
  AttnBwdParams params_{};
  DeviceBuffer dout_, dq_, dk_, dv_, ws_;
};

/// Runs @p r once on @p dp and synchronizes (throws CudaError on failure).
void launch_once(const Rung& r, DeviceProblem& dp);

/// Runs the backward pass of @p r (Rung::launch_bwd) once on @p g and synchronizes.
void launch_bwd_once(const Rung& r, DeviceGrads& g);

/// Times @p iters calls of @p launch (after @p warmup), L2 flushed before each, CUDA events
/// around each; median, min, max.
Timing time_launches(const std::function<void()>& launch, const DeviceInfo& dev, int iters, int warmup);

/// Times @p iters launches (after @p warmup), L2 flushed before each; median.
Timing time_rung(const Rung& r, DeviceProblem& dp, const DeviceInfo& dev, int iters, int warmup);

/// Times @p iters backward launches of @p r on @p g (the forward pass is not in the time).
Timing time_rung_bwd(const Rung& r, DeviceGrads& g, const DeviceInfo& dev, int iters, int warmup);

/// Workspace of the forward pass @p r runs through `launch`: its own workspace_bytes, else (a
/// backward rung) that of its Rung::forward_rung in the registry, else 0.
size_t forward_workspace_bytes(const Rung& r, const Problem& p);

/// Bytes @p r needs on the device for @p p: the forward's tensors and workspace, plus for a
/// backward rung dO, dQ, dK, dV and bwd_workspace_bytes(p, @p deterministic).
size_t rung_device_bytes(const Rung& r, const Problem& p, bool deterministic = false);

/// A backward run on the device: the forward's tensors and the gradients.
struct BwdRun {
  std::unique_ptr<DeviceProblem> dp;
  std::unique_ptr<DeviceGrads> grads;
  long long forward_unwritten = 0;  ///< NaN left in O or LSE by the forward pass
};

/// The forward pass of @p r once on NaN-poisoned O and LSE (and the fp32 O the backward's D reads,
/// when @p r's forward writes one: Rung::writes_o_fp32), then (if it wrote them) the backward once
/// on NaN-poisoned dQ, dK, dV (also the warm-up of a timed run).
BwdRun run_bwd_once(const Rung& r, const Problem& p, const HostInputs& in, const std::vector<uint16_t>& dout,
                    unsigned long long seed, bool deterministic);

/// Checks @p run's gradients (check_backward); a forward pass that left O or LSE unwritten
/// fails the check.
BwdCheck check_bwd_run(const Rung& r, const Problem& p, const HostInputs& in, const std::vector<uint16_t>& dout,
                       const BwdRun& run, CheckMode mode, unsigned long long seed);

/// Result of run_case: the verdict and, if it could not run, why.
struct CaseResult {
  bool ran = false;
  bool fp8 = false;      ///< an FP8 rung: `check` judged it on the dequantized inputs
  ErrorStats fp8_e2e;    ///< an FP8 rung: its output against fp64 on the 16-bit inputs
  std::string skipped;   ///< supports() reason or memory message when !ran
  CheckResult check;     ///< a backward case: bwd.summary (all three gradients)
  bool backward = false; ///< a backward case (Rung::launch_bwd): dQ, dK, dV were checked
  BwdCheck bwd;          ///< a backward case: each gradient's errors
};

/// Makes inputs, runs @p r once on NaN-poisoned outputs and checks it
/// (the unit of every GPU test). A backward rung (Rung::launch_bwd) goes to
/// run_bwd_case(..., deterministic = false), so the shared matrix, diagnostic and
/// grading cases check its gradients.
CaseResult run_case(const Rung& r, const Problem& p, InputKind input, CheckMode mode,
                    unsigned long long seed);

/// run_case with the FP8 path's options (@p fp8) for an FP8 rung (Rung::fp8_inputs; run_case
/// uses the defaults: per-head scales, no rotation); any other rung ignores them.
CaseResult run_fp8_case(const Rung& r, const Problem& p, InputKind input, CheckMode mode,
                        unsigned long long seed, const Fp8Options& fp8);

/// Checks the forward run on @p dp (after the launch) against the fp64 reference: check_output
/// on the 16-bit inputs @p in, or, once DeviceProblem::to_fp8 made FP8 inputs, an FP8 rung's two
/// figures: the check on the dequantized inputs with the FP8 floors (tolerance_floor_fp8), which
/// judges the kernel, and @p e2e, the same rows against the fp64 result of @p in: the error a user
/// sees, quantization included (reported, not judged; left alone for a 16-bit run).
CheckResult check_forward(const Problem& p, const HostInputs& in, const DeviceProblem& dp, CheckMode mode,
                          unsigned long long seed, ErrorStats* e2e);

/// The backward unit: makes inputs and dO (make_grad_output), runs the forward pass once
/// (O, LSE; `unwritten` fails the case if it left NaN), then the backward once on
/// NaN-poisoned dQ, dK, dV, and checks them (check_backward). InputKind::identity is skipped:
/// its peaked attention makes dQ cancel (every row of dS sums to zero), and a faithful 16-bit
/// backward exceeds the gradient policy's relative floor on it (a CPU model does), so it
/// cannot judge a kernel.
CaseResult run_bwd_case(const Rung& r, const Problem& p, InputKind input, CheckMode mode,
                        unsigned long long seed, bool deterministic);

/// Resource reports for every kernel of @p r on @p p.
std::vector<KernelResources> rung_resources(const Rung& r, const Problem& p);

/// argv[0] without its directory ("01_naive"), for messages.
std::string program_name(const char* argv0);

/// The current time, UTC, ISO 8601 ("2026-11-23T11:02:03Z"), as every report records it.
std::string utc_now();

/// The whole program behind every steps/NN_name executable. Returns an ExitCode.
int run_main(int argc, char** argv, int rung_number);

/// The tour: every main rung in order on the default problem, one table.
int tour_main(int argc, char** argv);

}  // namespace fl
