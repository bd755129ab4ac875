/// @file reference_bwd.h
/// @brief The attention backward pass on the CPU: fp64 (the reference), plain fp32 (which sets
/// the error a good fp32 implementation makes), textbook loops (the reference's own test oracle),
/// and the check of a backward rung's dQ, dK, dV under check.h's policy.
///
/// With scale s, per (batch, query head) and the mask of Problem::visible_keys:
///   S = s Q K^T, P = softmax(S) (masked entries 0), O = P V, LSE = log sum exp(S),
///   D = rowsum(dO * O), dV = P^T dO, dP = dO V^T, dS = P * (dP - D),
///   dQ = s dS K, dK = s dS^T Q
/// (FlashAttention-2, Dao, 2023, Algorithm 2). Q, K, dQ and dK have head_dim columns, V, O, dO
/// and dV Problem::dv() (MLA's 192/128; any pair, the scale from head_dim). A KV head's dK and dV
/// sum over the query heads that read it (GQA/MQA). A query row that sees no key has P = 0:
/// O = 0, LSE = -inf, D = 0, zero dQ, and it adds nothing to dK or dV.
///
/// With attention sinks (Problem::sinks), head h's sink logit joins every row's denominator:
/// LSE_i = log(e^{sink_h} + sum_j e^{S_ij}) includes it, P_ij = exp(S_ij - LSE_i) as above (so
/// dV, dS, dQ, dK keep their formulas), and the sink's own gradient is
///   dsink_h = -sum_{b,i} exp(sink_h - LSE_{b,h,i}) D_{b,h,i}.
/// A row that sees no key then has LSE = sink_h (not -inf), still O = 0 and D = 0.
///
/// Unlike the forward reference, the backward has no row sampling: dK and dV need every query
/// row, so it always computes whole tensors. Its cost is about 5 x B x Hq x Sq x Sk x d
/// multiply-adds in double: for test and check shapes, not for benchmark sizes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "flashladder/check.h"
#include "flashladder/inputs.h"
#include "flashladder/problem.h"

namespace fl {

/// The backward pass's inputs widened to double, dense like HostInputs. This is the raw-array
/// entry point: the 16-bit entry points widen into it, and a finite-difference test perturbs it.
struct BwdInputs {
  std::vector<double> q;     ///< [batch, seqlen_q, heads_q, head_dim]
  std::vector<double> k;     ///< [batch, seqlen_k, heads_kv, head_dim]
  std::vector<double> v;     ///< [batch, seqlen_k, heads_kv, dv]
  std::vector<double> dout;  ///< dO, like O: [batch, seqlen_q, heads_q, dv]
};

/// Everything the backward reference computes, full tensors, as double.
struct BwdResults {
  std::vector<double> out;  ///< O [batch, seqlen_q, heads_q, dv]
  std::vector<double> lse;  ///< [batch, heads_q, seqlen_q], natural log, the sink included; -inf
                            ///< where no key is seen (the sink with sinks on)
  std::vector<double> delta;  ///< D = rowsum(dO * O) [batch, heads_q, seqlen_q]; 0 where no key
  std::vector<double> dq;     ///< like Q; zero rows where no key is seen
  std::vector<double> dk;     ///< like K, summed over the query heads of each KV head
  std::vector<double> dv;     ///< like V, summed over the query heads of each KV head
  std::vector<double> dsinks;  ///< [heads_q] d loss / d sink_h, all batches and rows; empty: off
};

/// Widens the 16-bit Q, K, V of @p in and @p dout (dO, like O) to double, exactly.
BwdInputs widen_bwd_inputs(const Problem& p, const HostInputs& in,
                           const std::vector<uint16_t>& dout);

/// fp64 backward reference (Eigen, OpenMP over (batch, KV head)) on the 16-bit inputs.
BwdResults reference_bwd_fp64(const Problem& p, const HostInputs& in,
                              const std::vector<uint16_t>& dout);

/// The same computation in fp32 (Eigen float); its error against fp64 sets the tolerance's
/// "2 x fp32" term for each gradient.
BwdResults reference_bwd_fp32(const Problem& p, const HostInputs& in,
                              const std::vector<uint16_t>& dout);

/// Textbook nested loops in double (no Eigen): the backward reference's own test oracle.
BwdResults naive_loops_bwd(const Problem& p, const HostInputs& in,
                           const std::vector<uint16_t>& dout);

/// fp64 Eigen reference on raw double inputs (any values; only the shape, mask and scale of
/// @p p are read, not its dtype).
BwdResults reference_bwd_fp64(const Problem& p, const BwdInputs& x);

/// Textbook loops on raw double inputs.
BwdResults naive_loops_bwd(const Problem& p, const BwdInputs& x);

/// Verdict on a backward pass's gradients: each of dQ, dK, dV is judged on its own by check.h's
/// policy (decide()), against the fp64 reference, with its own "2 x fp32" term.
struct BwdCheckResult {
  bool pass = false;
  CheckResult dq;      ///< dQ: errors, fp32 errors, tolerance, unwritten count, reason
  CheckResult dk;      ///< dK, likewise
  CheckResult dv;      ///< dV, likewise
  CheckResult dsinks;  ///< d loss / d sink per query head, checked only for a problem with sinks
  std::string reason;  ///< first failing criterion prefixed by its tensor ("dK: ..."), "" if pass

  /// pass and reason from the tensors' own verdicts (dQ, dK, dV, then dsinks when checked).
  void finish();
};

/// Per-dtype floors of the gradients' tolerance: relative Frobenius twice the forward's
/// tolerance_floor() (dQ's error grows with the keys a row sees once dS is rounded to 16 bits),
/// absolute as the forward's; lse_abs unused.
Tolerance gradient_tolerance_floor(DType t);
/// The same rule on the FP8 floors (tolerance_floor_fp8): relative Frobenius twice the FP8
/// forward's, 2^-4, for a gradient made from e4m3 operands (rung 14's fp8-dq: dQ = dS K with dS
/// and K_j in e4m3; rung 13's README measures 3.4e-2 to 3.9e-2 for it by emulation).
Tolerance gradient_tolerance_floor_fp8(DType t);

/// Judges 16-bit dQ, dK, dV (dense, laid out like Q, K, V) against references already computed
/// (@p ref from reference_bwd_fp64, @p fp32 from reference_bwd_fp32 on the same inputs).
/// The gradients are expected NaN-poisoned before the backward runs: a NaN anywhere counts as
/// an element never written. With Problem::sinks, @p dsinks (fp32, one per query head) is judged
/// too, against ref.dsinks: missing, it fails.
BwdCheckResult compare_gradients(const Problem& p, const BwdResults& ref, const BwdResults& fp32,
                                 const std::vector<uint16_t>& dq, const std::vector<uint16_t>& dk,
                                 const std::vector<uint16_t>& dv, const std::vector<float>* dsinks = nullptr);

/// Full check of a backward pass: both references on (@p in, @p dout), then compare_gradients.
BwdCheckResult check_gradients(const Problem& p, const HostInputs& in,
                               const std::vector<uint16_t>& dout, const std::vector<uint16_t>& dq,
                               const std::vector<uint16_t>& dk, const std::vector<uint16_t>& dv,
                               const std::vector<float>* dsinks = nullptr);

}  // namespace fl
