/// @file dropout.h
/// @brief Attention dropout, FlashAttention's way: a counter-based generator (Philox4x32-10,
/// Salmon, Moraes, Dror and Shaw, SC 2011) turns each element's coordinates into its random
/// word, so the forward and the backward regenerate the same mask wherever the element lands in
/// their tiles, and no mask is ever stored (FlashAttention, Dao et al., 2022, §3.1). FL_HD: the
/// kernels, the fp64 reference and the CPU tests call the same functions.
///
/// The semantics are FlashAttention 2's: P = softmax(S) (the LSE from the undropped P),
/// O = (P ∘ M / (1 - p)) V, M_ij = 1 with probability 1 - p. Backward: dV = P_drop^T dO,
/// dP = (dO V^T) ∘ M / (1 - p), dS = P ∘ (dP - D) with D = rowsum(dO ∘ O), O the dropped output.
///
/// One Philox call gives four 32-bit words; an element is kept when its word is below
/// keep_threshold(p) = floor((1 - p) 2^32), so the keep probability is 1 - p to within 2^-32.
/// The call's counter is (key group, query row, batch x heads_q + head, low word of the offset),
/// its key (seed's low word, seed's high word ^ offset's high word). The four keys of a group
/// are chosen for the kernels' register layouts:
/// @code
///   // clang-format off
///   keys 16u .. 16u + 15 of a row:  group 4u + t holds keys 16u + 2t, 16u + 2t + 1   (words 0, 1)
///                                                       16u + 2t + 8, 16u + 2t + 9  (words 2, 3)
///   forward (rung 16)   a thread holds keys 8n + 2t, + 1 of a row for every n: one call, 4 keys
///   backward (rung 14)  a thread holds keys k, k + 8 (k mod 16 < 8) of two rows: one call per
///                       row, 2 of its words; the neighbour thread (k + 1) takes the other 2
///   // clang-format on
/// @endcode
#pragma once

#include <stdint.h>

#include "flashladder/types.h"

namespace fl {

/// Philox4x32's multipliers and Weyl key increments (Salmon et al. 2011, Random123's philox.h).
constexpr uint32_t kPhiloxM0 = 0xD2511F53u, kPhiloxM1 = 0xCD9E8D57u;
constexpr uint32_t kPhiloxW0 = 0x9E3779B9u, kPhiloxW1 = 0xBB67AE85u;

/// The high and low words of a x b.
FL_HD void philox_mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
#if defined(__CUDA_ARCH__)
  hi = __umulhi(a, b);
  lo = a * b;
#else
  const uint64_t p = static_cast<uint64_t>(a) * b;
  hi = static_cast<uint32_t>(p >> 32);
  lo = static_cast<uint32_t>(p);
#endif
}

/// Philox4x32 with @p rounds rounds (10: Philox4x32-10, the published generator): counter
/// @p c (4 words) under key (@p k0, @p k1), the result in place of @p c. Per round two 32 x 32
/// -> 64 multiplies, four XORs; the key advances by the Weyl increments between rounds.
FL_HD void philox4x32(uint32_t (&c)[4], uint32_t k0, uint32_t k1, int rounds = 10) {
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int r = 0; r < rounds; ++r) {
    if (r > 0) {
      k0 += kPhiloxW0;
      k1 += kPhiloxW1;
    }
    uint32_t hi0, lo0, hi1, lo1;
    philox_mulhilo(kPhiloxM0, c[0], hi0, lo0);
    philox_mulhilo(kPhiloxM1, c[2], hi1, lo1);
    const uint32_t n0 = hi1 ^ c[1] ^ k0, n2 = hi0 ^ c[3] ^ k1;
    c[0] = n0;
    c[1] = lo1;
    c[2] = n2;
    c[3] = lo0;
  }
}

/// A launch's dropout: the probability, and where the generator's seed and offset come from.
/// The package draws them on the device from PyTorch's generator (so a CUDA graph replays new
/// ones, as at::cuda::philox::unpack reads them there): @p state non-null points at
/// {seed, offset} in device memory and overrides the two values.
struct DropoutParams {
  float p;                ///< probability of dropping an element; 0: off
  float rp;               ///< 1 / (1 - p), O's and dV's factor
  uint32_t threshold;     ///< keep an element iff its word < threshold (keep_threshold)
  uint64_t seed, offset;  ///< the call's generator state, when state is null
  const int64_t* state;   ///< device {seed, offset}, or null
};

/// floor((1 - p) 2^32), at most 2^32 - 1: the keep test's bound.
FL_HD uint32_t keep_threshold(double p) {
  const double t = (1.0 - p) * 4294967296.0;
  return t >= 4294967295.0 ? 0xffffffffu : t <= 0.0 ? 0u : static_cast<uint32_t>(t);
}

/// A DropoutParams with the probability's derived fields set (p = 0: off).
inline DropoutParams make_dropout(float p, uint64_t seed, uint64_t offset,
                                  const int64_t* state = nullptr) {
  DropoutParams d{};
  d.p = p;
  d.rp = p > 0.f ? 1.f / (1.f - p) : 1.f;
  d.threshold = keep_threshold(p);
  d.seed = seed;
  d.offset = offset;
  d.state = state;
  return d;
}

/// The resolved generator state of one call: Philox's key and the counter's fourth word.
struct DropoutKey {
  uint32_t k0, k1;  ///< seed's low word; seed's high word ^ offset's high word
  uint32_t c3;      ///< offset's low word
  uint32_t threshold;
};

FL_HD DropoutKey dropout_key(uint64_t seed, uint64_t offset, uint32_t threshold) {
  return {static_cast<uint32_t>(seed),
          static_cast<uint32_t>(seed >> 32) ^ static_cast<uint32_t>(offset >> 32),
          static_cast<uint32_t>(offset), threshold};
}
/// The key of @p d, reading the device state when there is one (device code only reads it there).
FL_HD DropoutKey dropout_key(const DropoutParams& d) {
  uint64_t seed = d.seed, offset = d.offset;
  if (d.state != nullptr) {
    seed = static_cast<uint64_t>(d.state[0]);
    offset = static_cast<uint64_t>(d.state[1]);
  }
  return dropout_key(seed, offset, d.threshold);
}

/// The group of key @p j (its Philox call within the row) and its word in the call.
FL_HD uint32_t dropout_group(int j) {
  return (static_cast<uint32_t>(j) >> 4) * 4u + ((static_cast<uint32_t>(j) >> 1) & 3u);
}
FL_HD int dropout_word(int j) {
  return ((j >> 3) & 1) * 2 + (j & 1);
}

/// The four keep bits (bit w: word w kept) of group @p group of query row @p i of (sequence @p b,
/// head @p h), @p bh = b x heads_q + h. Rows and keys count within the sequence.
FL_HD uint32_t dropout_keep4(const DropoutKey& k, uint32_t bh, int i, uint32_t group) {
  uint32_t c[4] = {group, static_cast<uint32_t>(i), bh, k.c3};
  philox4x32(c, k.k0, k.k1);
  return (c[0] < k.threshold ? 1u : 0u) | (c[1] < k.threshold ? 2u : 0u) |
         (c[2] < k.threshold ? 4u : 0u) | (c[3] < k.threshold ? 8u : 0u);
}

/// The mask itself: is element (query @p i, key @p j) of (sequence @p b, head @p h) of a problem
/// with @p heads_q heads kept? The definition the kernels' grouped calls must agree with.
FL_HD bool dropout_keep(const DropoutKey& k, int b, int h, int heads_q, int i, int j) {
  const uint32_t bh =
      static_cast<uint32_t>(b) * static_cast<uint32_t>(heads_q) + static_cast<uint32_t>(h);
  return (dropout_keep4(k, bh, i, dropout_group(j)) >> dropout_word(j)) & 1u;
}

}  // namespace fl
