// The graded parts of a rung (common/src/grading.cpp: the cases `grade NN` runs) must all
// pass. ctest runs it once per rung as gpu_grade_rungNN with FL_TEST_RUNG=NN
// (tests/CMakeLists.txt); without FL_TEST_RUNG every main rung of the build is graded.
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "catch_compat.h"
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
  for (const Rung* r : rungs) {
    GradeReport g = grade_rung(*r, grade_variants(registry(), *r), run_case);
    g.device = query_device().name;
    const std::string table = format_grade_table(g);
    std::printf("%s\n", table.c_str());  // shown by ctest -V, and on failure
    INFO(table);
    CHECK(g.passed_all());
  }
}
