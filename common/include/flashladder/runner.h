/// @file runner.h
/// @brief The shared runner: inputs -> device -> run -> check -> time -> report.
/// Each rung's main.cu is one call to run_main(); tests and bench use the pieces: the device
/// tensors (device_problem.h), launching and timing (timing.h) and the three kinds of case,
/// forward, FP8 and backward (cases.h), all included here. The tour is tour.h.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "flashladder/cases.h"
#include "flashladder/cli.h"
#include "flashladder/device.h"
#include "flashladder/device_problem.h"
#include "flashladder/inputs.h"
#include "flashladder/registry.h"
#include "flashladder/report.h"
#include "flashladder/timing.h"

namespace fl {

/// Exit codes of every executable.
enum ExitCode : int { kExitOk = 0, kExitCheckFailed = 1, kExitBadInput = 2, kExitNoDevice = 77 };

/// Resource reports for every kernel of @p r on @p p.
std::vector<KernelResources> rung_resources(const Rung& r, const Problem& p);

/// argv[0] without its directory ("01_naive"), for messages.
std::string program_name(const char* argv0);

/// The current time, UTC, ISO 8601 ("2026-11-23T11:02:03Z"), as every report records it.
std::string utc_now();

// ---- the program's steps, shared by run_main and the tour ----------------------

/// Parses and validates the command line into @p opt; returns -1 to continue or an exit code
/// (--help printed, or the error said on stderr as "@p prog: error: ...").
int parse_or_exit(int argc, char** argv, Options* opt, const std::string& prog);

/// --list / --registry-json: prints the registry (no GPU needed) and returns kExitOk; -1 otherwise.
int print_registry(const Options& opt, const Registry& reg);

/// Fills @p dev with device 0; false (and says why: exit 77 = skipped) when there is none.
bool device_or_skip(const std::string& prog, DeviceInfo* dev);

/// Runs one rung on one problem: check (if @p check), time (if @p time), resources. Fills @p rep.
/// Each kind of rung runs its kind of case (cases.h): a backward rung (Rung::launch_bwd) its
/// backward pass, an FP8 rung (Rung::fp8_inputs) its forward on e4m3 copies of @p in.
void run_one(const Rung& r, const Options& opt, const DeviceInfo& dev, const HostInputs& in, RunReport* rep,
             bool check, bool time);

/// Times @p r's declared baselines (Rung::baselines) on the same input. @p known holds
/// times already measured on this input (the tour), by label: those are reused, not re-run,
/// and what is timed here is added to it.
std::vector<BaselineResult> time_baselines(const Registry& reg, const Rung& r, const Options& opt,
                                           const DeviceInfo& dev, const HostInputs& in,
                                           std::map<std::string, Timing>* known);

/// The whole program behind every steps/NN_name executable. Returns an ExitCode.
int run_main(int argc, char** argv, int rung_number);

}  // namespace fl
