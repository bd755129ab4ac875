/// @file check_bwd.h
/// @brief The check of a backward rung's run: how much of it is compared with the fp64
/// backward reference (reference_bwd.h), and the comparison of the device's dQ, dK, dV.
///
/// The backward reference has no row sampling (dK and dV need every query row), so a large
/// problem is checked on whole (batch, KV head) groups instead: a group's dK and dV, and the dQ
/// of its query heads, depend only on that group's Q, K, V and dO, so the reference of a
/// sub-problem made of some groups is exact for them. Where even one group is too long (a ring's
/// 128k tokens), rows are sampled instead, given the forward's O and LSE (check_backward_rows).
/// Host code only (no CUDA): the runner, the tests and the bench call it on downloaded gradients,
/// the CPU tests on modelled ones.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "flashladder/check.h"
#include "flashladder/cli.h"
#include "flashladder/inputs.h"
#include "flashladder/problem.h"
#include "flashladder/reference_bwd.h"

namespace fl {

/// One (batch, KV head) of a problem.
struct BwdGroup {
  int b;   ///< batch index
  int hk;  ///< KV head (its query heads are hk * group ... hk * group + group - 1)
};

/// The reference's work on @p p in the forward's units, B x Hq x Sq x Sk x d, d the mean of
/// head_dim and dv (it does about five multiply-adds per unit, in fp64 and again in fp32 for the
/// tolerance).
double bwd_check_work(const Problem& p);

/// The default budget: `--check auto` compares the whole problem up to this much work
/// (bwd_check_work units: about a second of the fp64 and fp32 references on a few cores), else
/// sampled groups up to this much.
constexpr double kBwdCheckWork = 1.0e9;
/// A single group above this many budgets is not compared with `--check auto` or `sample` (the
/// unwritten-element check still runs); `--check full` compares it anyway.
constexpr double kBwdGroupCapFactor = 8.0;

/// Which part of a backward run is compared with the reference.
struct BwdCheckPlan {
  std::string mode;              ///< "full" (every group), "sample" (some groups) or "none"
  std::vector<BwdGroup> groups;  ///< the groups compared (every group for "full"), ascending
  std::string note;              ///< why not every group is compared ("" for "full")
};

/// The plan for @p mode: full always compares everything; auto everything up to @p budget;
/// sample (and auto above @p budget) the first and last groups plus seeded random ones while
/// their work stays within @p budget (at least those two, unless one group alone is above
/// kBwdGroupCapFactor x @p budget: then none); none nothing.
BwdCheckPlan plan_bwd_check(const Problem& p, CheckMode mode, unsigned long long seed,
                            double budget = kBwdCheckWork);

/// The problem made of @p groups of @p p, one after another as its batches: one KV head,
/// group() query heads, the same lengths (a packed batch: the groups' sequences, packed),
/// head_dim, dv, dtype, mask and scale.
Problem group_problem(const Problem& p, const std::vector<BwdGroup>& groups);

/// The rows of @p groups in a [tokens, heads_q, dim] tensor of @p p (dense or packed), in
/// group_problem()'s layout; @p dim 0 means head_dim (Q, dQ), p.dv() is O's and dO's.
std::vector<uint16_t> gather_q_like(const Problem& p, const std::vector<uint16_t>& t,
                                    const std::vector<BwdGroup>& groups, int dim = 0);

/// The rows of @p groups in a [tokens, heads_kv, dim] tensor of @p p (dense or packed), in
/// group_problem()'s layout; @p dim 0 means head_dim (K, dK), p.dv() is V's and dV's.
std::vector<uint16_t> gather_kv_like(const Problem& p, const std::vector<uint16_t>& t,
                                     const std::vector<BwdGroup>& groups, int dim = 0);

/// What the check of one backward run found.
struct BwdCheck {
  /// dQ, dK, dV one by one (compare_gradients on the compared groups); each tensor's
  /// `unwritten` counts NaN over the whole tensor, compared or not.
  BwdCheckResult grads;
  /// The verdict in the forward's shape, for callers that handle both (tests, grading, the
  /// bench): pass and reason of all three, mode, rows (dQ rows compared), unwritten (all three),
  /// and err, fp32_err, tol of the tensor closest to its tolerance.
  CheckResult summary;
  int groups = 0;        ///< (batch, KV head) groups compared
  int groups_total = 0;  ///< batch x heads_kv
  std::string note;      ///< BwdCheckPlan::note
};

/// The forward pass's outputs, for the row-sampled check (check_backward_rows): O (16-bit, dense
/// [batch, seqlen_q, heads_q, dv]) and the LSE ([batch, heads_q, seqlen_q], natural log), as the
/// backward read them.
struct BwdForward {
  const std::vector<uint16_t>* o = nullptr;
  const std::vector<float>* lse = nullptr;
};

/// Whether check_backward_rows can check @p p ("" if so, else why not): a dense batch with at
/// most the causal mask (no window, documents, modifier, sink, packing or paged cache).
std::string rows_check_reason(const Problem& p);

/// Rows compared by the row-sampled check, each of query rows and key rows: as many as fit
/// kBwdGroupCapFactor x @p budget of work (a query row costs heads_q x seqlen_k x d, a key row
/// heads_q x seqlen_q x d, d the mean of head_dim and dv), at least 4 and at most 64 (or the
/// length).
int rows_check_count(const Problem& p, double budget = kBwdCheckWork);

/// The backward's check on sampled rows, for problems whose (batch, KV head) groups are each too
/// long for the reference (the ring's 128k tokens): @p rows query rows (b, i) and @p rows key rows
/// (b, j), seeded, the first and the last among them, every head of each.
/// - dQ's rows are exact fp64: each row's P, LSE, O and D recomputed from Q, K, V and dO over the
///   keys it sees.
/// - dK's and dV's rows sum over every query row that sees the key: there P_ij comes from the
///   forward's LSE_i and D_i = rowsum(dO_i * O_i) from the forward's O (@p fwd), in fp64. Those
///   two are what the forward check judges (on its own sampled rows); recomputing them exactly
///   for every row would cost the whole reference.
/// Each gradient is judged as compare_gradients does, its "2 x fp32" term from the same sums in
/// fp32. NaN is counted over the whole tensors.
BwdCheck check_backward_rows(const Problem& p, const HostInputs& in, const std::vector<uint16_t>& dout,
                             const std::vector<uint16_t>& dq, const std::vector<uint16_t>& dk,
                             const std::vector<uint16_t>& dv, const BwdForward& fwd, int rows,
                             unsigned long long seed);

/// Checks the device's dense 16-bit @p dq, @p dk, @p dv (laid out like Q, K, V, NaN-poisoned
/// before the backward ran) for inputs @p in and output gradient @p dout, under @p mode
/// (plan_bwd_check with @p budget). Where that plan compares nothing because one group is too long
/// (not --check none), and @p fwd gives the forward's O and LSE, the rows are sampled instead
/// (check_backward_rows) when the problem allows it (rows_check_reason).
BwdCheck check_backward(const Problem& p, const HostInputs& in, const std::vector<uint16_t>& dout,
                        const std::vector<uint16_t>& dq, const std::vector<uint16_t>& dk,
                        const std::vector<uint16_t>& dv, CheckMode mode, unsigned long long seed,
                        double budget = kBwdCheckWork, const std::vector<float>* dsinks = nullptr,
                        const BwdForward& fwd = {});

/// Fills @p c's summary from its per-tensor results (pass, reason, unwritten, the worst tensor).
void summarize(BwdCheck* c);

}  // namespace fl
