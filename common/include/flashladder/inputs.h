/// @file inputs.h
/// @brief Seeded inputs on the host (16-bit storage), reproducible for any thread count.
#pragma once

#include <cstdint>
#include <vector>

#include "flashladder/cli.h"
#include "flashladder/problem.h"

namespace fl {

/// Q, K, V in dense [batch, seqlen, heads, head_dim] layout, 16-bit bits.
struct HostInputs {
  std::vector<uint16_t> q, k, v;
};

/// Makes inputs. random: N(0,1) + offset (Q, K +0.25, V +0.5) so outputs are
/// not centred on zero; ones: all 1; identity: Q/K rows are scaled unit vectors
/// (peaked attention); ramp: random Q/K, V a ramp exact in 16 bits.
HostInputs make_inputs(const Problem& p, InputKind kind, unsigned long long seed);

/// Makes dO, the gradient of the loss with respect to O, for a backward pass: laid out like O
/// ([batch, seqlen_q, heads_q, head_dim], 16-bit bits), N(0,1) + 0.25 like Q and K, on a stream
/// of its own (make_inputs with any seed never draws the same values).
std::vector<uint16_t> make_grad_output(const Problem& p, unsigned long long seed);

/// Standard normal value number @p index of stream @p seed (counter-based:
/// the same value for any thread count).
float normal_at(unsigned long long seed, unsigned long long index);

}  // namespace fl
