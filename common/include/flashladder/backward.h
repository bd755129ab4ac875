/// @file backward.h
/// @brief The backward pass's kernel parameters (rung 11): the forward pass's tensors plus the
/// output gradient dO and the three input gradients, same shapes and layouts.
#pragma once

#include <cstddef>
#include <cstdint>

#include "flashladder/problem.h"

namespace fl {

/// What a backward launch receives. `fwd` holds Q, K, V, the forward output O and its LSE (as
/// the forward pass wrote them), every shape, stride, scale and the causal offset; dO has O's
/// strides, dQ Q's, dK K's and dV V's (every tensor [batch, seqlen, heads, head_dim]).
struct AttnBwdParams {
  AttnParams fwd;
  const void* dout;  ///< dO, like fwd.o
  void* dq;          ///< dQ, like fwd.q
  void* dk;          ///< dK, like fwd.k
  void* dv;          ///< dV, like fwd.v
  void* workspace;   ///< rung-owned scratch (dQ accumulator, rowsum(dO * O)), bwd_workspace_bytes
  size_t workspace_bytes;
  int deterministic;  ///< 1: dQ summed in a fixed order (bitwise identical run to run)
  /// d loss / d sink_h, [heads_q] fp32, written when fwd.sinks is set (rung 16's backward); null
  /// otherwise.
  float* dsinks;
};

/// FLOPs of the backward pass by FlashAttention's convention: 2.5 x the forward's (five GEMMs of
/// the forward's two sizes: S recomputed, dV, dP, dS K, dSᵀ Q).
inline double attention_bwd_flops(const Problem& p) { return 2.5 * attention_flops(p); }

/// Bytes the backward pass must move at least: Q, K, V, O, dO read and dQ, dK, dV written once
/// (16-bit), plus the LSE read (fp32).
double attention_bwd_bytes(const Problem& p);

}  // namespace fl
