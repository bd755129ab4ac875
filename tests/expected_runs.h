/// @file expected_runs.h
/// @brief How a GPU test asserts that the cases it meant to run ran (docs/adding_a_rung.md,
/// "Tests that can fail").
///
/// A section lists its cases first (fl_test::Section::add), then runs them (run or each). Before
/// any case runs, the section counts the cases the rung's supports() accepts on this device: that
/// is the expected count. A refusal the section did not declare (may_refuse) fails it; a case
/// accepted up front and then not run (a memory refusal, a run-time refusal) fails it; after the
/// loop the section REQUIREs runs == expected and runs > 0.
///
/// The one legitimate absence is the device's: a rung this GPU cannot run at all (its declared
/// compute capability; an sm_90-only rung on another GPU, or a build without sm_90a code). Such
/// cases are left out and the whole test binary exits 77 (ctest: skipped) at the end, unless a
/// test failed (gpu_main.cpp). That gate reads the rung's registration and the device, never
/// supports(), so a supports() that refuses everything fails on the GPU it is meant for.
#pragma once

#include <cstdio>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "catch_compat.h"
#include "flashladder/runner.h"
#include "flashladder/tma.h"

namespace fl_test {

/// Why the whole test binary is skipped ("" = it is not): the first device gate a section met.
inline std::string& skip_reason() {
  static std::string why;
  return why;
}

/// Marks the test binary skipped (exit 77 after the run, unless a test failed: gpu_main.cpp).
inline void skip_whole_test(const std::string& why) {
  if (skip_reason().empty()) skip_reason() = why;
  WARN("skipped on this device: " << why);
}

/// "" when this device can run rung @p r at all, else why not, from the rung's registration alone
/// (Rung::min_cc; min_cc 90 is an sm_90a rung, which runs on compute capability 9.0 only, tma.h).
inline std::string device_gate(const fl::Rung& r, const fl::DeviceInfo& d) {
  if (r.min_cc >= 90) {
    const std::string why = fl::hopper_supports(d, true);
    return why.empty() ? "" : r.label() + " " + why;
  }
  if (r.min_cc > d.cc_major * 10 + d.cc_minor)
    return r.label() + " needs compute capability >= " + std::to_string(r.min_cc / 10) + "." +
           std::to_string(r.min_cc % 10) + ", this is " + d.arch();
  return "";
}

/// One case of a section: the rung, the problem, and how it is run.
struct Case {
  const fl::Rung* rung = nullptr;
  fl::Problem p;
  bool may_refuse = false;  ///< the section spans shapes this rung may refuse (the shared matrix)
  bool deterministic = false;  ///< a backward case in the deterministic mode
  unsigned long long seed = 1;
  fl::InputKind input = fl::InputKind::random;
  fl::CheckMode mode = fl::CheckMode::full;
};

/// The cases one section means to run, and the count of them that ran.
class Section {
 public:
  /// @p may_be_empty: the section lists no case for some rungs under test by their registration
  /// (a rung without variants, without an fp32 O); otherwise an empty list fails.
  explicit Section(std::string name, bool may_be_empty = false)
      : name_(std::move(name)), may_be_empty_(may_be_empty) {}

  Case& add(const fl::Rung& r, const fl::Problem& p, bool may_refuse = false) {
    Case c;
    c.rung = &r;
    c.p = p;
    c.may_refuse = may_refuse;
    cases_.push_back(c);
    return cases_.back();
  }

  /// "" when @p c's rung accepts it on @p dev, else the refusal: supports(), and for a backward
  /// rung the harness's own refusals (run_bwd_case, cases.h) and its mode-dependent ones.
  static std::string refusal(const Case& c, const fl::DeviceInfo& dev) {
    std::string why = fl::supports(*c.rung, c.p, dev);
    if (!why.empty() || !c.rung->launch_bwd) return why;
    if (c.p.page_size > 0) return "the backward pass takes a contiguous K/V";
    if (c.input == fl::InputKind::identity)
      return "identity input: the backward check cannot judge it";
    return c.rung->bwd_supports ? c.rung->bwd_supports(c.p, c.deterministic) : "";
  }

  /// Plans (the expected count, before any case runs), then calls @p body on each accepted case;
  /// @p body returns whether the case ran. Ends with REQUIRE(ran == expected) and ran > 0, unless
  /// every case was left out by the device gate (the test is then skipped, not passed).
  void each(const std::function<bool(const Case&)>& body) {
    const fl::DeviceInfo dev = fl::query_device();
    const std::string no_sm90a = fl::hopper_supports(dev, false);
    std::vector<const Case*> accepted;
    int gated = 0, refused = 0;
    for (const Case& c : cases_) {
      std::string gate = device_gate(*c.rung, dev);
      const std::string why = refusal(c, dev);
      if (gate.empty() && why == no_sm90a)
        gate = c.rung->label() + " " + why;  // a build without Hopper code
      if (!gate.empty()) {
        ++gated;
        skip_whole_test(gate);
        continue;
      }
      if (!why.empty()) {
        ++refused;
        if (!c.may_refuse)
          FAIL_CHECK(name_ << ": " << c.rung->label() << " refused " << c.p.describe() << ": "
                           << why);
        continue;
      }
      accepted.push_back(&c);
    }
    const int expected = static_cast<int>(accepted.size());
    int ran = 0;
    for (const Case* c : accepted) {
      INFO(name_ << ": " << c->rung->label() << " " << c->p.describe());
      if (body(*c))
        ++ran;
      else
        FAIL_CHECK(name_ << ": " << c->rung->label() << " accepted " << c->p.describe()
                         << " and did not run it");
    }
    std::printf(
        "%s: %d of %d cases ran (%d accepted by supports(), %d refused, %d left out: this "
        "device)\n",
        name_.c_str(), ran, static_cast<int>(cases_.size()), expected, refused, gated);
    INFO(name_ << ": " << ran << " ran, " << expected << " expected, " << refused << " refused, "
               << gated << " left out by the device");
    if (cases_.empty()) {
      REQUIRE(may_be_empty_);
      return;
    }
    if (gated > 0 && expected == 0) return;  // skipped (exit 77), not passed
    REQUIRE(ran == expected);
    REQUIRE(ran > 0);
  }

  /// Runs each case against the fp64 reference (run_case; a backward rung: its gradients, in the
  /// case's mode) and checks a pass with every output written; @p more adds checks on a result.
  void run(const std::function<void(const Case&, const fl::CaseResult&)>& more = {}) {
    each([&](const Case& c) {
      const fl::CaseResult res =
          c.rung->launch_bwd
              ? fl::run_bwd_case(*c.rung, c.p, c.input, c.mode, c.seed, c.deterministic)
              : fl::run_case(*c.rung, c.p, c.input, c.mode, c.seed);
      if (!res.ran) {
        UNSCOPED_INFO("not run: " << res.skipped);
        return false;
      }
      INFO(res.check.reason << " (rel_fro " << res.check.err.rel_fro << ", max_abs "
                            << res.check.err.max_abs << ")");
      CHECK(res.check.pass);
      CHECK(res.check.unwritten == 0);  // outputs were NaN-poisoned before the launch
      if (more) more(c, res);
      return true;
    });
  }

  const std::vector<Case>& cases() const { return cases_; }

 private:
  std::string name_;
  bool may_be_empty_ = false;
  std::vector<Case> cases_;
};

}  // namespace fl_test
