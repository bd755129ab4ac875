// The backward references against central finite differences of L = sum(O * dO), for tests that
// check a problem's gradients from its definition (test_reference_bwd.cpp, test_reference_mods.cpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <tuple>
#include <vector>

#include "catch_compat.h"
#include "flashladder/reference_bwd.h"

namespace fl_test {

/// Fills Q, K, V and dO of problem @p p (dense or packed) with raw doubles (any values, not 16-bit ones) from
/// @p seed, then REQUIREs that the Eigen backward and the textbook loops both match central
/// differences of L for every element of Q, K and V, and with Problem::sinks for every sink
/// (whose values must be multiples of 2^-12: the float sink moves by exactly 2^-12). Returns the
/// Eigen results.
inline fl::BwdResults require_finite_differences(const fl::Problem& p, unsigned long long seed) {
  fl::BwdInputs x;
  auto fill = [](std::vector<double>* t, size_t n, unsigned long long s, double offset) {
    t->resize(n);
    for (size_t i = 0; i < n; ++i) (*t)[i] = fl::normal_at(s, i) + offset;
  };
  // Q and K have head_dim columns, V and dO (like O) Problem::dv().
  fill(&x.q, p.q_elements(), seed, 0.25);
  fill(&x.k, p.kv_elements(), seed + 1, 0.25);
  fill(&x.v, p.v_elements(), seed + 2, 0.5);
  fill(&x.dout, p.o_elements(), seed + 3, 0.25);
  auto loss = [&](const fl::BwdInputs& y, const fl::Problem& q) {
    const fl::BwdResults r = fl::reference_bwd_fp64(q, y);
    double l = 0;
    for (size_t n = 0; n < r.out.size(); ++n) l += r.out[n] * y.dout[n];
    return l;
  };
  const fl::BwdResults eig = fl::reference_bwd_fp64(p, x), loops = fl::naive_loops_bwd(p, x);
  constexpr double h = 1e-5;
  for (auto [t, grad_e, grad_l] : {std::make_tuple(&fl::BwdInputs::q, &eig.dq, &loops.dq),
                                   std::make_tuple(&fl::BwdInputs::k, &eig.dk, &loops.dk),
                                   std::make_tuple(&fl::BwdInputs::v, &eig.dv, &loops.dv)})
    for (size_t n = 0; n < (x.*t).size(); ++n) {
      fl::BwdInputs y = x;
      (y.*t)[n] = (x.*t)[n] + h;
      const double up = loss(y, p);
      (y.*t)[n] = (x.*t)[n] - h;
      const double fd = (up - loss(y, p)) / (2 * h);
      const double tol = 1e-7 * std::max(1.0, std::fabs(fd));
      REQUIRE(std::fabs((*grad_e)[n] - fd) <= tol);
      REQUIRE(std::fabs((*grad_l)[n] - fd) <= tol);
    }
  // Sinks are floats in Problem: a step of 2^-12 is exact for the multiples of 2^-12 the tests use
  // (a 1e-5 step would be off by up to ~1 % of itself), and small enough for the h^2 term.
  REQUIRE(eig.dsinks.size() == p.sinks.size());
  REQUIRE(loops.dsinks.size() == p.sinks.size());
  for (size_t hq = 0; hq < p.sinks.size(); ++hq) {
    constexpr float hs = 1.0f / 4096;
    fl::Problem moved = p;
    moved.sinks[hq] = p.sinks[hq] + hs;
    REQUIRE(static_cast<double>(moved.sinks[hq]) - p.sinks[hq] == hs);
    const double up = loss(x, moved);
    moved.sinks[hq] = p.sinks[hq] - hs;
    REQUIRE(static_cast<double>(p.sinks[hq]) - moved.sinks[hq] == hs);
    const double fd = (up - loss(x, moved)) / (2.0 * hs);
    const double tol = 1e-7 * std::max(1.0, std::fabs(fd));
    INFO("sink of head " << hq << ": d L / d sink " << eig.dsinks[hq] << ", difference quotient " << fd);
    REQUIRE(std::fabs(eig.dsinks[hq] - fd) <= tol);
    REQUIRE(std::fabs(loops.dsinks[hq] - fd) <= tol);
  }
  return eig;
}

}  // namespace fl_test
