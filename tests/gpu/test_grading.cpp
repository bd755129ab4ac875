// The graded parts of a rung (common/src/grading.cpp: the cases `grade NN` runs) must all
// pass. ctest runs it once per rung as gpu_grade_rungNN with FL_TEST_RUNG=NN
// (tests/CMakeLists.txt); without FL_TEST_RUNG every main rung of the build is graded. Every case
// the rung's supports() accepts must run, and at least one must (expected_runs.h); a rung this GPU
// cannot run at all (rungs 09, 10, 13-16 off sm_90) skips the test.
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "catch_compat.h"
#include "expected_runs.h"
#include "flashladder/grading.h"
#include "flashladder/runner.h"

using namespace fl;

TEST_CASE("grading: every part of the rung passes", "[gpu][grading]") {
  const char* env = std::getenv("FL_TEST_RUNG");
  std::vector<const Rung*> rungs;
  if (env) {
    const Rung* r = registry().find(std::atoi(env));
    INFO("FL_TEST_RUNG=" << env);
    REQUIRE(r != nullptr);
    rungs.push_back(r);
  } else {
    rungs = registry().mains();
  }
  const DeviceInfo dev = query_device();
  for (const Rung* r : rungs) {
    if (const std::string gate = fl_test::device_gate(*r, dev); !gate.empty()) {
      fl_test::skip_whole_test(gate);
      continue;
    }
    int accepted = 0, ran = 0;  // over every part: cases supports() accepts, cases that ran
    const CaseRunner counting = [&](const Rung& v, const Problem& p, InputKind input, CheckMode mode,
                                    unsigned long long seed) {
      const fl_test::Case c{&v, p, false, false, seed, input, mode};
      const bool accepts = fl_test::Section::refusal(c, dev).empty();
      const CaseResult res = run_case(v, p, input, mode, seed);
      accepted += accepts;
      ran += res.ran;
      if (accepts && !res.ran)
        FAIL_CHECK(v.label() << " accepted " << p.describe() << " and did not run it: " << res.skipped);
      return res;
    };
    GradeReport g = grade_rung(*r, grade_variants(registry(), *r), counting);
    g.device = dev.name;
    const std::string table = format_grade_table(g);
    std::printf("%s\n", table.c_str());  // shown by ctest -V, and on failure
    INFO(table);
    CHECK(g.passed_all());
    std::printf("%s graded: %d cases ran, %d accepted by supports()\n", r->label().c_str(), ran, accepted);
    CHECK(ran == accepted);
    CHECK(ran > 0);
  }
}
