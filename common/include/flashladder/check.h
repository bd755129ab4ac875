/// @file check.h
/// @brief Error metrics and the tolerance policy, defined once for every rung.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "flashladder/problem.h"
#include "flashladder/reference.h"

namespace fl {

/// Errors of one output against the reference over the checked rows.
struct ErrorStats {
  double rel_fro = 0;   ///< ||out - ref||_F / ||ref||_F (||out - ref||_F where ref is all zero)
  double max_abs = 0;   ///< max |out - ref|
  double ref_max_abs = 0;  ///< max |ref| (scales the absolute floor)
  double lse_max_abs = 0;  ///< max |lse - lse_ref| over rows that see keys
  double lse_ref_max_abs = 0;  ///< max |lse_ref| over rows that see keys (scales a relative LSE floor)
  long long nonfinite = 0;      ///< NaN/Inf in checked O (NaN = never written)
  long long lse_bad = 0;        ///< LSE non-finite where keys are visible, or not -inf where none is
};

/// Tolerances actually applied.
struct Tolerance {
  double rel_fro;
  double max_abs;
  double lse_abs;
  double lse_rel = 0;  ///< a floor of lse_rel x max |lse_ref| too (the FP8 floors' only)
};

/// Verdict of one check.
struct CheckResult {
  bool pass = false;
  bool checked = false;      ///< false with --check none
  std::string mode;          ///< "full" / "sample" / "none"
  size_t rows = 0;           ///< rows compared
  ErrorStats err;            ///< device output vs fp64
  ErrorStats fp32_err;       ///< plain fp32 CPU vs fp64
  Tolerance tol{};           ///< what was required
  long long unwritten = 0;   ///< NaN anywhere in O or LSE (the outputs are NaN-poisoned)
  std::string reason;        ///< first failing criterion, "" if pass
};

/// Per-dtype floors of the tolerance (relative Frobenius, absolute).
Tolerance tolerance_floor(DType t);

/// Floors of an FP8 rung (13), whose second GEMM reads P rounded to e4m3 (3 significand bits: a
/// relative rounding error up to 2^-4 on every P, where 16-bit rungs have 2^-11 or 2^-8). An
/// output is a P-weighted mean of V rows, so independent roundings average: relative Frobenius
/// 2^-5, max abs 2^-3 (scaled by max |ref| like every floor). The LSE: @p t's floor, or 2^-8 of
/// max |lse_ref| where that is larger, because S = Q K^T comes out of the FP8 tensor cores,
/// whose accumulator keeps fewer significand bits than fp32 (about 14, by the DeepSeek-V3
/// report): each of the d/32 <= 8 k32 steps loses about 2^-12 of |S| (rung 13's fast-accum
/// variant measures 11 % over 512 steps), so |S| may be off by 8 x 2^-12 = 2^-9 of itself, half
/// the floor.
/// The check runs on the dequantized inputs (the values the kernel was given), so these judge
/// the kernel, not the quantization of Q, K, V.
Tolerance tolerance_floor_fp8(DType t);

/// The policy: pass iff rel_fro and max_abs are <= max(2 x fp32 error, floor),
/// no NaN/Inf, every element written, LSE within tolerance.
Tolerance tolerance_for(DType t, const ErrorStats& fp32_err);

/// The same policy with a given floor (the backward's gradients have floors of their own):
/// max(2 x fp32 error, floor), the absolute floor scaled by max(1, max |ref|).
Tolerance tolerance_for(const Tolerance& floor, const ErrorStats& fp32_err);

/// Compares rows of a 16-bit output [batch, seqlen_q, heads_q, dv]
/// (dense) and fp32 LSE [batch, heads_q, seqlen_q] with a reference.
ErrorStats compare_rows(const Problem& p, const std::vector<uint16_t>& out,
                        const std::vector<float>& lse, const std::vector<RowId>& rows,
                        const RowResults& ref);

/// Errors of a CPU result (fp32 reference) against fp64 on the same rows.
ErrorStats compare_results(const Problem& p, const RowResults& got, const RowResults& ref);

/// Errors of a whole dense 16-bit tensor of type @p t against a reference of the same layout
/// and size (e.g. a backward pass's dK); no LSE.
ErrorStats compare_tensor(DType t, const std::vector<uint16_t>& got,
                          const std::vector<double>& ref);

/// Errors of a CPU tensor (e.g. the fp32 reference's dK) against a reference of the same size.
ErrorStats compare_values(const std::vector<double>& got, const std::vector<double>& ref);

/// Counts NaN in all of O and LSE. LSE = -inf is legal only where the row sees no key.
long long count_unwritten(const Problem& p, const std::vector<uint16_t>& out,
                          const std::vector<float>& lse);

/// Applies the policy to the errors; fills pass and reason.
void decide(CheckResult* r);

/// Full check of a device result: rows, references, comparison, verdict, against the floors
/// of p.dtype, or @p floor when given (an FP8 rung's: tolerance_floor_fp8).
CheckResult check_output(const Problem& p, const HostInputs& in, const std::vector<uint16_t>& out,
                         const std::vector<float>& lse, CheckMode mode, unsigned long long seed,
                         const Tolerance* floor = nullptr);

}  // namespace fl
