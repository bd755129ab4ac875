/// @file inputs.h
/// @brief Seeded inputs on the host (16-bit storage), reproducible for any thread count.
#pragma once

#include <cstdint>
#include <vector>

#include "flashladder/cli.h"
#include "flashladder/problem.h"
#include "flashladder/types.h"

namespace fl {

/// Q, K, V in dense [batch, seqlen, heads, head_dim] layout, V with Problem::dv() columns (packed
/// [total, heads, head_dim] for a variable-length batch: Problem::q_token and k_token index
/// both), 16-bit bits.
struct HostInputs {
  std::vector<uint16_t> q, k, v;
  /// The FP8 path's inputs (fp8_device.h): the values an FP8 rung computes with, e4m3 times
  /// its descale, dense like q, k, v. When set, the CPU references read these instead of the
  /// 16-bit bits, so the check judges the kernel on the inputs it was given.
  std::vector<float> qf, kf, vf;

  /// Element @p i of Q, K or V as the references read it.
  float q_at(size_t i, DType t) const { return qf.empty() ? from_bits(q[i], t) : qf[i]; }
  float k_at(size_t i, DType t) const { return kf.empty() ? from_bits(k[i], t) : kf[i]; }
  float v_at(size_t i, DType t) const { return vf.empty() ? from_bits(v[i], t) : vf[i]; }
};

/// Makes inputs. random: N(0,1) + offset (Q, K +0.25, V +0.5) so outputs are
/// not centred on zero; ones: all 1; identity: Q/K rows are scaled unit vectors
/// (peaked attention); ramp: random Q/K, V a ramp exact in 16 bits; outlier: random, with
/// outlier_channels() of Q and K at 10-100x the others (outlier_scale() sets their size).
HostInputs make_inputs(const Problem& p, InputKind kind, unsigned long long seed);

/// Makes dO, the gradient of the loss with respect to O, for a backward pass: laid out like O
/// ([batch, seqlen_q, heads_q, dv], 16-bit bits), N(0,1) + 0.25 like Q and K, on a stream
/// of its own (make_inputs with any seed never draws the same values).
std::vector<uint16_t> make_grad_output(const Problem& p, unsigned long long seed);

/// The outlier input's channels of Q and K, and their factors over the other channels: one
/// channel in 32 (at least 2), factors log-spaced from 10 to 100, at channels spread over the
/// head (the same ones in Q and K, as in the outlier features of trained transformers).
struct OutlierChannels {
  std::vector<int> channel;
  std::vector<float> factor;
};
OutlierChannels outlier_channels(int head_dim);

/// The factor every Q and K value of the outlier input is multiplied by, so that the scores
/// q . k / sqrt(d), which the outlier channels dominate, have a standard deviation near 2:
/// softmax is peaked but not one-hot.
float outlier_scale(int head_dim);

/// The lengths of a packed batch of @p count sequences drawn uniformly from [@p lo, @p hi] on
/// stream @p seed (splitmix64 of seed x 0x9e3779b97f4a7c15 ^ i, modulo the range): the bench's
/// mixed-length batch. bench/pytorch/torch_sdpa.py draws the same ones (mixed_lengths there; both are
/// checked against the same values by the CPU tests).
std::vector<int> mixed_lengths(int count, int lo, int hi, unsigned long long seed);

/// Standard normal value number @p index of stream @p seed (counter-based:
/// the same value for any thread count).
float normal_at(unsigned long long seed, unsigned long long index);

}  // namespace fl
