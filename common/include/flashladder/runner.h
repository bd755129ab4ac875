/// @file runner.h
/// @brief The shared runner: inputs -> device -> run -> check -> time -> report.
/// Each rung's main.cu is one call to run_main(); tests and bench use the pieces.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "flashladder/check.h"
#include "flashladder/cli.h"
#include "flashladder/device.h"
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
  /// Fills O and LSE with NaN (so unwritten elements are caught).
  void poison_outputs();
  /// Dense O [batch, seqlen_q, heads_q, head_dim] as 16-bit bits.
  std::vector<uint16_t> download_o() const;
  /// LSE [batch, heads_q, seqlen_q].
  std::vector<float> download_lse() const;
  /// Bytes the problem needs on the device (inputs, outputs, workspace).
  static size_t device_bytes(const Problem& p, size_t workspace_bytes);

 private:
  Problem p_;
  AttnParams params_{};
  DeviceBuffer q_, k_, v_, o_, lse_, ws_, table_;
};

/// Runs @p r once on @p dp and synchronizes (throws CudaError on failure).
void launch_once(const Rung& r, DeviceProblem& dp);

/// Times @p iters launches (after @p warmup), L2 flushed before each; median.
Timing time_rung(const Rung& r, DeviceProblem& dp, const DeviceInfo& dev, int iters, int warmup);

/// Result of run_case: the verdict and, if it could not run, why.
struct CaseResult {
  bool ran = false;
  std::string skipped;   ///< supports() reason or memory message when !ran
  CheckResult check;
};

/// Makes inputs, runs @p r once on NaN-poisoned outputs and checks it
/// (the unit of every GPU test).
CaseResult run_case(const Rung& r, const Problem& p, InputKind input, CheckMode mode,
                    unsigned long long seed);

/// Resource reports for every kernel of @p r on @p p.
std::vector<KernelResources> rung_resources(const Rung& r, const Problem& p);

/// The whole program behind every steps/NN_name executable. Returns an ExitCode.
int run_main(int argc, char** argv, int rung_number);

/// The tour: every main rung in order on the default problem, one table.
int tour_main(int argc, char** argv);

}  // namespace fl
