/// @file reference.h
/// @brief Attention on the CPU for selected rows: fp64 (the reference) and
/// plain fp32 (which sets the error a good fp32 implementation makes).
#pragma once

#include <cstdint>
#include <vector>

#include "flashladder/cli.h"
#include "flashladder/inputs.h"
#include "flashladder/problem.h"

namespace fl {

/// One output row: (batch, query head, query index).
struct RowId {
  int b, h, i;
};

/// Reference output for a list of rows: out[r * dv + c] (Problem::dv(): V's head_dim), lse[r].
struct RowResults {
  std::vector<double> out;
  std::vector<double> lse;  ///< -inf for rows that see no key (with sinks: the head's sink)
};

/// Every row of the problem.
std::vector<RowId> all_rows(const Problem& p);

/// Rows for a sampled check: first and last rows, the tail rows of the last
/// partial 64/128 tiles, one whole head (strided if very long) and random rows.
std::vector<RowId> sample_rows(const Problem& p, unsigned long long seed);

/// Picks full or sampled rows; auto means full while the fp64 work is small.
std::vector<RowId> rows_for_check(const Problem& p, CheckMode mode, unsigned long long seed);

/// Head @p h's attention-sink logit, or -inf when Problem::sinks is off: exp(-inf - m) adds an
/// exact 0 to a softmax's denominator and max(-inf, m) is m, so the references (forward and
/// backward) have one code path for both. A row that sees no key gets LSE = this value.
double sink_logit(const Problem& p, int h);

/// fp64 reference (Eigen, OpenMP over (batch, kv head)) on the 16-bit inputs.
RowResults reference_fp64(const Problem& p, const HostInputs& in, const std::vector<RowId>& rows);

/// The same computation in fp32 (Eigen float); its error against fp64 sets
/// the tolerance floor's "2 x fp32" term.
RowResults reference_fp32(const Problem& p, const HostInputs& in, const std::vector<RowId>& rows);

/// Textbook nested loops in double (no Eigen): the reference's own test oracle.
RowResults naive_loops(const Problem& p, const HostInputs& in, const std::vector<RowId>& rows);

}  // namespace fl
