// The largest difference between two result vectors whose infinities must agree (the LSE of rows
// that see no key), for the reference tests.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "catch_compat.h"

namespace fl_test {

/// max |a - b| over finite entries; both must be -inf (or +inf) at the same places.
inline double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (size_t n = 0; n < a.size(); ++n) {
    if (std::isinf(a[n]) || std::isinf(b[n])) {
      REQUIRE(a[n] == b[n]);
      continue;
    }
    REQUIRE(std::isfinite(a[n]));
    REQUIRE(std::isfinite(b[n]));
    m = std::max(m, std::fabs(a[n] - b[n]));
  }
  return m;
}

}  // namespace fl_test
