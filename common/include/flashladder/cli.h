/// @file cli.h
/// @brief The command line every rung executable, the tour and the bench share.
#pragma once

#include <string>
#include <vector>

#include "flashladder/fp8.h"
#include "flashladder/problem.h"

namespace fl {

/// How much of the output is compared with the fp64 reference.
enum class CheckMode { auto_, full, sample, none };

/// The input pattern (random is the default; the others are diagnostics).
enum class InputKind { random, ones, identity, ramp, outlier };

/// Everything the command line can set.
struct Options {
  Problem problem;              ///< the shape
  bool shape_set = false;       ///< a shape flag was given (--batch, --seqlen*, --heads, --kv-heads, --dim, --dim-v, --causal, --scale, a mask or modifier)
  InputKind input = InputKind::random;  ///< --input
  CheckMode check = CheckMode::auto_;   ///< --check
  int iters = 50;               ///< --iters: timed launches (median is reported)
  int warmup = 5;               ///< --warmup
  unsigned long long seed = 2024;  ///< --seed
  std::string json_path;        ///< --json FILE
  std::string variant;          ///< --variant NAME (ablations, sweep points)
  bool compare_baselines = true;  ///< --no-compare: do not time the rung's baselines
  bool sweep = false;           ///< --sweep (rungs that define one)
  bool deterministic = false;   ///< --deterministic: backward rungs sum dQ in a fixed order
  Fp8Options fp8;               ///< --fp8-scale, --hadamard: how an FP8 rung's inputs are quantized
  bool list = false;            ///< --list: print the registry and exit
  bool registry_json = false;   ///< --registry-json: print the registry as JSON and exit
  bool device_info = false;     ///< --device-info: print the GPU and exit (77 if none)
  bool help = false;            ///< --help
};

/// Result of parsing: ok, or an error message that names the flag.
struct ParseResult {
  bool ok = true;
  std::string error;  ///< e.g. "--dim: expected a positive integer, got '0'"
};

/// Parses argv into @p out (starting from defaults already in @p out).
/// Values are checked for syntax here and for meaning by validate().
ParseResult parse_cli(int argc, const char* const* argv, Options* out);

/// One argv entry as a flag: "--flag=value" -> {"--flag", "value", true}; anything else ->
/// {arg, "", false} (the value, if any, is the next entry). Shared with rung 12's own flags.
struct FlagArg {
  std::string flag, value;
  bool has_eq = false;
};
FlagArg split_flag(const char* arg);

/// The syntax of a flag's value (range checks are the caller's): a whole int / a real number.
bool parse_int_value(const std::string& s, int* out);
bool parse_double_value(const std::string& s, double* out);

/// The --help text.
std::string usage(const std::string& program);

/// Name of a check mode / input kind, as on the command line.
const char* check_mode_name(CheckMode m);
/// Name of an input kind, as on the command line.
const char* input_kind_name(InputKind k);

}  // namespace fl
