/// @file steps/11_backward/delta_policy.h
/// @brief Where rung 11 takes D = rowsum(dO ∘ O) from, per problem. Plain C++ (no CUDA), so the
/// CPU tests check the rule.
///
/// dQ_i = s Σ_j dS_ij K_j, with dS_ij = P_ij (dP_ij − D_i), is a small difference of large terms:
/// it is right only if every row of dS sums to zero, that is if D_i = Σ_j P_ij dP_ij / Σ_j P_ij for
/// the P the backward pass recomputes (Σ_j P_ij is 1 up to the forward's LSE). Any other D (off by
/// δ) adds −s δ Σ_j P_ij K_j to dQ_i, a term no row cancels, which grows against dQ itself as a row
/// sees more keys. Three sources of D:
///
///   o16    dO · O from the 16-bit O the forward returned (FlashAttention-2's preprocess): off by O's
///          rounding (2^-11 of |O| per element in fp16, 2^-8 in bf16);
///   o32    dO · O from the forward's fp32 O (AttnParams::o_fp32), before its rounding: off by the
///          forward's own sums over the row, which drift with the row's length (O by 2e-4 and the
///          LSE by 1e-4 at 100k keys, measured: README);
///   exact  Σ_j P_ij dP_ij / Σ_j P_ij, summed by a pass of the main kernel that recomputes S, P and
///          dP and adds P ∘ dP and P in fp32 on the CUDA cores: every row of dS then sums to zero
///          for the backward's own P, at the price of two of the backward's five GEMMs again (the
///          `exact-delta` variant measures it).
///
/// The rung takes `exact` only where a row is long enough for the drift to matter (the measured
/// errors against seqlen_k: README, "D from the backward's own P"); o16 on rows of at most
/// kO16DeltaKeys keys, where O's rounding costs dQ less than the fp32 O costs in bytes (written by
/// the forward, read by the pre-pass, kept by autograd: README, "D from the 16-bit O on short
/// rows"), as FlashAttention-2 and 3 and cuDNN do on every row; o32 in between when the forward
/// wrote it, else o16.
#pragma once

namespace fl::bwd {

/// Where D comes from (see the file comment).
enum class DeltaSource { o16, o32, exact };

/// What an entry asks for: the rung's rule, or one source always (the ablation variants).
enum class DeltaPolicy { rung, o16, o32, exact };

/// Rows that see more keys than this get the exact D pass (the rung's rule). The bench's backward
/// sweep (seqlen <= 16k) stays below it; one query against 100k keys does not.
constexpr int kExactDeltaKeys = 16384;

/// Rows that see at most this many keys take D from the 16-bit O (the rung's rule): there dQ's
/// error against fp64 with it is at most a third of the tolerance in fp16 and bf16 (measured on an
/// H200: README, "D from the 16-bit O on short rows"), and the forward writes no fp32 O for them.
constexpr int kO16DeltaKeys = 4096;
static_assert(kO16DeltaKeys < kExactDeltaKeys, "the fp32 O's range lies between the two");

/// The source of D for a problem whose rows see at most @p max_keys keys, when the forward wrote
/// its fp32 O (@p have_o32) or not. `o32` without the fp32 O falls back to o16.
constexpr DeltaSource delta_source(DeltaPolicy policy, int max_keys, bool have_o32) {
  switch (policy) {
    case DeltaPolicy::o16: return DeltaSource::o16;
    case DeltaPolicy::o32: return have_o32 ? DeltaSource::o32 : DeltaSource::o16;
    case DeltaPolicy::exact: return DeltaSource::exact;
    case DeltaPolicy::rung: break;
  }
  if (max_keys > kExactDeltaKeys) return DeltaSource::exact;
  if (max_keys <= kO16DeltaKeys) return DeltaSource::o16;
  return have_o32 ? DeltaSource::o32 : DeltaSource::o16;
}

/// Whether a backward pass with @p policy on rows of at most @p max_keys keys reads the forward's
/// fp32 O (the forward then writes it; else it need not, and autograd keeps none).
constexpr bool reads_o32(DeltaPolicy policy, int max_keys) {
  return delta_source(policy, max_keys, true) == DeltaSource::o32;
}

/// "exact pass", "fp32 O" or "16-bit O", for the notes.
constexpr const char* delta_source_name(DeltaSource s) {
  return s == DeltaSource::exact ? "the exact pass (sum of P * dP)" : s == DeltaSource::o32 ? "the fp32 O" : "the 16-bit O";
}

}  // namespace fl::bwd
