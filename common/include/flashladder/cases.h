/// @file cases.h
/// @brief A case: one rung run once on one problem. Each kind (a forward, an FP8 and a backward
/// case) has the same four steps:
/// @code
///   // clang-format off
///   prepare   the constructor: the inputs on the device, the outputs poisoned with NaN
///   launch    the rung once, synchronized (also the warm-up of a timed run)
///   check     the outputs against the fp64 reference
///   time      the launch alone, L2 flushed before each (timing.h)
///   // clang-format on
/// @endcode
/// The runner (run_one) and the tests (run_case) go through these; the bench uses the pieces
/// beneath them (device_problem.h, timing.h, check_forward, run_bwd_once).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "flashladder/check.h"
#include "flashladder/check_bwd.h"
#include "flashladder/cli.h"
#include "flashladder/device_problem.h"
#include "flashladder/fp8.h"
#include "flashladder/inputs.h"
#include "flashladder/registry.h"
#include "flashladder/report.h"
#include "flashladder/timing.h"

namespace fl {

// ---- what a case needs ---------------------------------------------------------

/// Workspace of the forward pass @p r runs through `launch`: its own workspace_bytes, else (a
/// backward rung) that of its Rung::forward_rung in the registry, else 0.
size_t forward_workspace_bytes(const Rung& r, const Problem& p);

/// Whether the runner has backward rung @p r's forward write the fp32 O for @p p: where the
/// forward can (Rung::writes_o_fp32) and the backward's D reads it (Rung::bwd_reads_o_fp32).
bool bwd_wants_o_fp32(const Rung& r, const Problem& p);

/// Bytes @p r needs on the device for @p p: the forward's tensors and workspace, plus for a
/// backward rung dO, dQ, dK, dV and bwd_workspace_bytes(p, @p deterministic) (and the fp32 O
/// where bwd_wants_o_fp32).
size_t rung_device_bytes(const Rung& r, const Problem& p, bool deterministic = false);

/// "" if @p r can run @p p on @p dev (supports, memory, not a lab stub; a backward rung: also a
/// contiguous K/V), else why not.
std::string why_not(const Rung& r, const Problem& p, const DeviceInfo& dev, bool deterministic = false);

/// The label of the rung whose forward pass @p r runs ("06_headdim_tiles"; @p r's own if none).
std::string forward_label(const Rung& r);

// ---- the checks, and the backward's forward pass -------------------------------

/// Checks the forward run on @p dp (after the launch) against the fp64 reference: check_output
/// on the 16-bit inputs @p in, or, once DeviceProblem::to_fp8 made FP8 inputs, an FP8 rung's two
/// figures: the check on the dequantized inputs with the FP8 floors (tolerance_floor_fp8), which
/// judges the kernel, and @p e2e, the same rows against the fp64 result of @p in: the error a user
/// sees, quantization included (reported, not judged; left alone for a 16-bit run).
CheckResult check_forward(const Problem& p, const HostInputs& in, const DeviceProblem& dp, CheckMode mode,
                          unsigned long long seed, ErrorStats* e2e);

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

/// A backward rung's own floors on a check_backward result: Rung::fp8_dq's dQ judged against
/// gradient_tolerance_floor_fp8 (dK, dV keep the 16-bit floor). check_bwd_run applies it; a test
/// that calls check_backward itself applies it too.
void apply_rung_floors(const Rung& r, const Problem& p, BwdCheck* c);

/// Checks @p run's gradients (check_backward, apply_rung_floors); a forward pass that left O or
/// LSE unwritten fails the check.
BwdCheck check_bwd_run(const Rung& r, const Problem& p, const HostInputs& in, const std::vector<uint16_t>& dout,
                       const BwdRun& run, CheckMode mode, unsigned long long seed);

// ---- the three kinds of case ---------------------------------------------------
// Each keeps references to its rung and host inputs: they must outlive it.

/// A forward case: the rung's forward pass on the 16-bit inputs.
class FwdCase {
 public:
  /// Prepare: uploads @p in and the rung's workspace (DeviceProblem), poisons O and LSE.
  FwdCase(const Rung& r, const Problem& p, const HostInputs& in, unsigned long long seed);
  /// Launch: the rung once (launch_once).
  void launch();
  /// Check: O and LSE against the fp64 reference on @p mode's rows (check_forward).
  CheckResult check(CheckMode mode) const;
  /// Time: @p iters launches after @p warmup (time_rung).
  Timing time(const DeviceInfo& dev, int iters, int warmup);

 protected:
  /// Prepare, with the FP8 path's e4m3 copies made before the poison when @p fp8 is set (Fp8Case).
  FwdCase(const Rung& r, const Problem& p, const HostInputs& in, unsigned long long seed, const Fp8Options* fp8);
  const Rung& r_;
  const Problem p_;
  const HostInputs& in_;
  const unsigned long long seed_;
  DeviceProblem dp_;
};

/// An FP8 case (Rung::fp8_inputs): a forward case whose rung reads e4m3 copies of the inputs.
/// It differs where the FP8 path must: prepare makes the copies, check has two figures, time
/// also times the quantization.
class Fp8Case : public FwdCase {
 public:
  /// Prepare: as FwdCase, plus the e4m3 copies of Q, K, V made with @p o (DeviceProblem::to_fp8,
  /// quantized once here, not in the rung's time).
  Fp8Case(const Rung& r, const Problem& p, const HostInputs& in, unsigned long long seed, const Fp8Options& o);
  /// Check: judged on the dequantized inputs; @p e2e gets the error against the 16-bit inputs'
  /// fp64 result (check_forward).
  CheckResult check(CheckMode mode, ErrorStats* e2e) const;
  /// Time: the rung's launches as FwdCase::time; @p quant gets the quantize kernels' own time
  /// (what a user pays once per Q/K/V), on the same timer.
  Timing time(const DeviceInfo& dev, int iters, int warmup, Timing* quant);
};

/// A backward case (Rung::launch_bwd): the backward pass, after one forward pass that makes O and LSE.
class BwdCase {
 public:
  /// Prepare: dO (make_grad_output), the forward once on poisoned O and LSE (and the fp32 O), the
  /// gradients' tensors poisoned: run_bwd_once up to the backward's launch.
  BwdCase(const Rung& r, const Problem& p, const HostInputs& in, unsigned long long seed, bool deterministic);
  /// Launch: the backward once (launch_bwd_once), unless the forward left O or LSE unwritten.
  void launch();
  /// Check: dQ, dK, dV against the fp64 reference on @p mode's rows (check_bwd_run).
  BwdCheck check(CheckMode mode) const;
  /// Time: the backward alone (time_rung_bwd); untimed when the forward left O or LSE unwritten.
  Timing time(const DeviceInfo& dev, int iters, int warmup);

 private:
  const Rung& r_;
  const Problem p_;
  const HostInputs& in_;
  const unsigned long long seed_;
  const std::vector<uint16_t> dout_;
  BwdRun run_;
};

// ---- the unit of every GPU test ------------------------------------------------

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

/// The backward unit: makes inputs and dO (make_grad_output), runs the forward pass once
/// (O, LSE; `unwritten` fails the case if it left NaN), then the backward once on
/// NaN-poisoned dQ, dK, dV, and checks them (check_backward). InputKind::identity is skipped:
/// its peaked attention makes dQ cancel (every row of dS sums to zero), and a faithful 16-bit
/// backward exceeds the gradient policy's relative floor on it (a CPU model does), so it
/// cannot judge a kernel.
CaseResult run_bwd_case(const Rung& r, const Problem& p, InputKind input, CheckMode mode,
                        unsigned long long seed, bool deterministic);

}  // namespace fl
