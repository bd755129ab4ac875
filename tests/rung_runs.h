/// @file tests/rung_runs.h
/// @brief The two steps the rung-specific GPU tests repeat (tests/gpu/test_rung08.cpp,
/// test_rung17.cpp): one case against the fp64 reference, required to pass, and one launch's
/// O and LSE for bit-for-bit comparisons between layouts.
#pragma once

#include <cstdint>
#include <vector>

#include "catch_compat.h"
#include "flashladder/cases.h"
#include "flashladder/timing.h"

namespace fl_test {

/// Runs @p p on @p r against the fp64 reference and requires a pass, every output written (O and
/// the LSE are NaN-poisoned before the launch).
inline void expect_pass(const fl::Rung& r, const fl::Problem& p, fl::CheckMode mode, unsigned long long seed) {
  const fl::CaseResult res = fl::run_case(r, p, fl::InputKind::random, mode, seed);
  INFO(p.describe() << ": " << (res.ran ? res.check.reason : "not run: " + res.skipped) << " (rel_fro "
                    << res.check.err.rel_fro << ", max_abs " << res.check.err.max_abs << ")");
  REQUIRE(res.ran);
  REQUIRE(res.check.pass);
  REQUIRE(res.check.unwritten == 0);
}

/// O and LSE of one launch of @p r on @p p with inputs @p in.
struct Outputs {
  std::vector<uint16_t> o;
  std::vector<float> lse;
};
inline Outputs run_once(const fl::Rung& r, const fl::Problem& p, const fl::HostInputs& in, unsigned long long seed) {
  fl::DeviceProblem dp(p, in, r.workspace_bytes(p), seed);
  dp.poison_outputs();
  fl::launch_once(r, dp);
  return {dp.download_o(), dp.download_lse()};
}

}  // namespace fl_test
