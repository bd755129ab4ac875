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

/// Standard normal value number @p index of stream @p seed (counter-based:
/// the same value for any thread count).
float normal_at(unsigned long long seed, unsigned long long index);

}  // namespace fl
