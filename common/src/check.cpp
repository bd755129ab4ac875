#include "flashladder/check.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace fl {

Tolerance tolerance_floor(DType t) {
  // Floors cover rounding the output (and, on tensor-core rungs, P) to 16 bits:
  // fp16 has an 11-bit significand (half-ulp 2^-11 = 4.9e-4 relative), bf16 an
  // 8-bit one (2^-8 = 3.9e-3). The floors leave about 4x headroom over that.
  if (t == DType::fp16) return {2e-3, 4e-3, 2e-3};
  return {1.6e-2, 3e-2, 1e-2};
}

Tolerance tolerance_floor_fp8(DType t) { return {0x1p-5, 0x1p-3, tolerance_floor(t).lse_abs, 0x1p-8}; }

Tolerance tolerance_for(DType t, const ErrorStats& fp32_err) {
  return tolerance_for(tolerance_floor(t), fp32_err);
}

Tolerance tolerance_for(const Tolerance& f, const ErrorStats& fp32_err) {
  const double scale = std::max(1.0, fp32_err.ref_max_abs);
  return {std::max(2 * fp32_err.rel_fro, f.rel_fro), std::max(2 * fp32_err.max_abs, f.max_abs * scale),
          std::max({2 * fp32_err.lse_max_abs, f.lse_abs, f.lse_rel * fp32_err.lse_ref_max_abs}), f.lse_rel};
}

namespace {

/// Accumulates the error of one row of results against the reference.
struct Accumulator {
  double diff2 = 0, ref2 = 0;
  ErrorStats e;
  void add(double got, double ref) {
    if (!std::isfinite(got)) {
      ++e.nonfinite;
      return;
    }
    const double d = got - ref;
    diff2 += d * d;
    ref2 += ref * ref;
    e.max_abs = std::max(e.max_abs, std::fabs(d));
    e.ref_max_abs = std::max(e.ref_max_abs, std::fabs(ref));
  }
  void add_lse(double got, double ref) {
    if (std::isinf(ref) && ref < 0) {  // row sees no key: LSE must be -inf
      if (!(std::isinf(got) && got < 0)) ++e.lse_bad;
      return;
    }
    if (!std::isfinite(got)) {
      ++e.lse_bad;
      return;
    }
    e.lse_max_abs = std::max(e.lse_max_abs, std::fabs(got - ref));
    e.lse_ref_max_abs = std::max(e.lse_ref_max_abs, std::fabs(ref));
  }
  ErrorStats finish() {
    e.rel_fro = ref2 > 0 ? std::sqrt(diff2 / ref2) : std::sqrt(diff2);
    return e;
  }
};

}  // namespace

ErrorStats compare_rows(const Problem& p, const std::vector<uint16_t>& out, const std::vector<float>& lse,
                        const std::vector<RowId>& rows, const RowResults& ref) {
  const int D = p.dv();  // O's columns
  Accumulator acc;
  for (size_t n = 0; n < rows.size(); ++n) {
    const RowId& r = rows[n];
    const size_t base = (static_cast<size_t>(p.q_token(r.b, r.i)) * p.heads_q + r.h) * D;
    for (int c = 0; c < D; ++c) acc.add(from_bits(out[base + c], p.dtype), ref.out[n * D + c]);
    acc.add_lse(lse[p.lse_index(r.b, r.h, r.i)], ref.lse[n]);
  }
  return acc.finish();
}

ErrorStats compare_results(const Problem& p, const RowResults& got, const RowResults& ref) {
  Accumulator acc;
  for (size_t n = 0; n < ref.out.size(); ++n) acc.add(got.out[n], ref.out[n]);
  for (size_t n = 0; n < ref.lse.size(); ++n) acc.add_lse(got.lse[n], ref.lse[n]);
  (void)p;
  return acc.finish();
}

ErrorStats compare_tensor(DType t, const std::vector<uint16_t>& got,
                          const std::vector<double>& ref) {
  Accumulator acc;
  for (size_t n = 0; n < ref.size(); ++n) acc.add(from_bits(got[n], t), ref[n]);
  return acc.finish();
}

ErrorStats compare_values(const std::vector<double>& got, const std::vector<double>& ref) {
  Accumulator acc;
  for (size_t n = 0; n < ref.size(); ++n) acc.add(got[n], ref[n]);
  return acc.finish();
}

long long count_unwritten(const Problem& p, const std::vector<uint16_t>& out, const std::vector<float>& lse) {
  long long bad = 0;
  // NaN in 16 bits: exponent all ones and mantissa non-zero.
  const uint16_t exp_mask = p.dtype == DType::fp16 ? 0x7c00 : 0x7f80;
  const uint16_t man_mask = p.dtype == DType::fp16 ? 0x03ff : 0x007f;
  for (uint16_t x : out) bad += ((x & exp_mask) == exp_mask && (x & man_mask) != 0);
  for (float x : lse) bad += std::isnan(x);
  return bad;
}

void decide(CheckResult* r) {
  auto fail = [&](const std::string& why) {
    if (r->reason.empty()) r->reason = why;
  };
  auto fmt = [](const char* what, double got, double tol) {
    std::ostringstream s;
    s.precision(3);
    s << what << " " << std::scientific << got << " > tolerance " << tol;
    return s.str();
  };
  r->reason.clear();
  if (r->unwritten > 0) fail(std::to_string(r->unwritten) + " output elements never written (NaN)");
  if (r->err.nonfinite > 0) fail(std::to_string(r->err.nonfinite) + " checked outputs are NaN/Inf");
  if (r->err.lse_bad > 0) fail(std::to_string(r->err.lse_bad) + " LSE values wrong (non-finite, or not -inf for a row with no key)");
  // A reference that is exactly zero everywhere has no relative error: a gradient that vanishes
  // (dK when every query sees one key, so softmax has nothing to move) is computed as the
  // cancellation of equal terms, and only its absolute size, the max abs check below, means
  // anything. Accumulator::finish() gives the absolute Frobenius norm then; it is reported, not judged.
  const bool zero_ref = r->err.ref_max_abs == 0;
  if (!zero_ref && r->err.rel_fro > r->tol.rel_fro)
    fail(fmt("relative Frobenius error", r->err.rel_fro, r->tol.rel_fro));
  if (r->err.max_abs > r->tol.max_abs) fail(fmt("max abs error", r->err.max_abs, r->tol.max_abs));
  if (r->err.lse_max_abs > r->tol.lse_abs) fail(fmt("LSE max abs error", r->err.lse_max_abs, r->tol.lse_abs));
  r->pass = r->reason.empty();
}

CheckResult check_output(const Problem& p, const HostInputs& in, const std::vector<uint16_t>& out,
                         const std::vector<float>& lse, CheckMode mode, unsigned long long seed,
                         const Tolerance* floor) {
  CheckResult r;
  const Tolerance base = floor ? *floor : tolerance_floor(p.dtype);
  r.unwritten = count_unwritten(p, out, lse);
  const std::vector<RowId> rows = rows_for_check(p, mode, seed);
  if (rows.empty()) {
    r.mode = "none";
    r.checked = false;
    r.tol = base;
    decide(&r);  // still fails on unwritten outputs
    return r;
  }
  r.checked = true;
  r.rows = rows.size();
  r.mode = rows.size() == static_cast<size_t>(p.total_q()) * p.heads_q ? "full" : "sample";
  const RowResults ref = reference_fp64(p, in, rows);
  const RowResults f32 = reference_fp32(p, in, rows);
  r.fp32_err = compare_results(p, f32, ref);
  r.err = compare_rows(p, out, lse, rows, ref);
  r.fp32_err.ref_max_abs = r.err.ref_max_abs;
  r.fp32_err.lse_ref_max_abs = r.err.lse_ref_max_abs;
  r.tol = tolerance_for(base, r.fp32_err);
  decide(&r);
  return r;
}

}  // namespace fl
