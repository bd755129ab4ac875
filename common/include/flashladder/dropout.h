/// @file dropout.h
/// @brief Attention dropout, FlashAttention's way: a counter-based generator (Philox4x32,
/// Salmon, Moraes, Dror and Shaw, SC 2011, with FlashAttention 2's 7 rounds: kDropoutRounds)
/// turns each element's coordinates into its random
/// byte, so the forward and the backward regenerate the same mask wherever the element lands in
/// their tiles, and no mask is ever stored (FlashAttention, Dao et al., 2022, §3.1). FL_HD: the
/// kernels, the fp64 reference and the CPU tests call the same functions.
///
/// The semantics are FlashAttention 2's: P = softmax(S) (the LSE from the undropped P),
/// O = (P ∘ M / (1 - p)) V, M_ij = 1 with probability 1 - p. Backward: dV = P_drop^T dO,
/// dP = (dO V^T) ∘ M / (1 - p), dS = P ∘ (dP - D) with D = rowsum(dO ∘ O), O the dropped output.
///
/// Eight bits per element (FlashAttention 2's csrc/flash_attn/src/dropout.h): one Philox call
/// gives 16 bytes, the random bytes of 16 elements, and an element is kept when its byte is at
/// most keep_threshold(p) = floor((1 - p) 255). The keep probability is then (t + 1) / 256, not
/// exactly 1 - p (e.g. p = 0.1: t = 229, 230 / 256 = 0.8984), while the kept elements are scaled
/// by 1 / (1 - p) as asked: the expectation of O is off by that ratio, as in FlashAttention 2.
///
/// A call decides one *cell*: query rows r and r + 8 (r mod 16 < 8) by the keys 2s, 2s + 1 of each
/// of the four 8-key chunks of a 32-key block: exactly what one thread holds of a 16 x 32 tile of
/// a wgmma (or mma.sync) accumulator, whose thread (g = lane / 4, t = lane % 4) holds rows g,
/// g + 8 and, of each 8-key chunk n, the keys 8n + 2t, + 1. The call's counter is (key cell,
/// row cell, batch x heads_q + head, low word of the offset), its key (seed's low word, seed's
/// high word ^ offset's high word); word w of the result holds chunk w, its byte 2h + e the row
/// r + 8h and key 2s + e:
/// @code
///   // clang-format off
///   element (i, j)    row cell  (i / 16) 8 + i mod 8       key cell  (j / 32) 4 + (j mod 8) / 2
///                     word      (j / 8) mod 4              byte      2 ((i / 8) mod 2) + j mod 2
///   forward (rung 16, S = Q K^T, rows = queries): a thread's accumulator element 4n + b of a
///       32-key block is word n mod 4, byte b of its own call: one call per 16 elements, no
///       exchange (a block that starts at 16 mod 32, BLOCK_N = 80 or 176, shifts the chunks by 2)
///   backward (rung 14, S^T = K Q^T, rows = keys): a thread holds keys k, k + 8 (k mod 16 < 8) of
///       queries 8c + 2q, + 1. Keys k and k ^ 1 (lanes l, l ^ 4) share their cells: for every 16
///       queries each of the pair makes the call of one query parity, keeps its 4 bytes and sends
///       the partner the partner's 4 (one shuffle): one call per 8 elements
///   // clang-format on
/// @endcode
/// The mask is a pure function of (seed, offset, sequence, head, row, key): tiles only choose
/// which thread computes which cell.
#pragma once

#include <stdint.h>

#include <cmath>

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

/// Philox4x32 with ROUNDS rounds (10: Philox4x32-10, the published generator and its known
/// answers; 7: FlashAttention 2's, the dropout's: kDropoutRounds): counter @p c (4 words) under
/// key (@p k0, @p k1), the result in place of @p c. Per round two 32 x 32 -> 64 multiplies, four
/// XORs; the key advances by the Weyl increments between rounds.
template <int ROUNDS>
FL_HD void philox4x32_rounds(uint32_t (&c)[4], uint32_t k0, uint32_t k1) {
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int r = 0; r < ROUNDS; ++r) {
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
/// Philox4x32-10 (the published generator; the CPU test checks Random123's known answers).
FL_HD void philox4x32(uint32_t (&c)[4], uint32_t k0, uint32_t k1) { philox4x32_rounds<10>(c, k0, k1); }

/// The dropout generator's rounds: 7, FlashAttention 2's (its csrc/flash_attn/src/philox.cuh: six
/// rounds with the key advanced, then a last one). Salmon et al. (2011) find Philox4x32 passing
/// TestU01's BigCrush from 7 rounds and choose 10 as a safety margin; at 7 the generator is 42
/// integer instructions a call instead of 60 (rung 16's README, section 7, measures the saving;
/// `--dropout-rounds 10`, DropoutParams::rounds, is the ablation with the published 10).
constexpr int kDropoutRounds = 7;

/// CUDA's __byte_perm(x, y, s) (PRMT): byte k of the result is byte (s >> 4k) & 7 of the eight
/// bytes (x's 0-3, y's 4-7). The host's copy, so the CPU tests run the kernels' packing.
FL_HD uint32_t byte_perm(uint32_t x, uint32_t y, uint32_t s) {
#if defined(__CUDA_ARCH__)
  return __byte_perm(x, y, s);
#else
  const uint64_t xy = (static_cast<uint64_t>(y) << 32) | x;
  uint32_t r = 0;
  for (int k = 0; k < 4; ++k)
    r |= static_cast<uint32_t>((xy >> (8 * ((s >> (4 * k)) & 7u))) & 0xffu) << (8 * k);
  return r;
#endif
}

/// A launch's dropout: the probability, and where the generator's seed and offset come from.
/// The package draws them on the device from PyTorch's generator (so a CUDA graph replays new
/// ones, as at::cuda::philox::unpack reads them there): @p state non-null points at
/// {seed, offset} in device memory and overrides the two values.
struct DropoutParams {
  float p;                ///< probability of dropping an element; 0: off
  float rp;               ///< 1 / (1 - p), O's and dV's factor
  uint32_t threshold;     ///< keep an element iff its byte <= threshold (keep_threshold)
  uint64_t seed, offset;  ///< the call's generator state, when state is null
  const int64_t* state;   ///< device {seed, offset}, or null
  int rounds;             ///< Philox rounds: kDropoutRounds (7), or 10 (the ablation)
};

/// floor((1 - p) 255) with 1 - p in float, as FlashAttention 2's p_dropout_in_uint8_t: an
/// element is kept iff its random byte is at most this.
FL_HD uint32_t keep_threshold(float p) {
  const double t = std::floor(static_cast<double>(1.f - p) * 255.0);
  return t >= 255.0 ? 255u : t <= 0.0 ? 0u : static_cast<uint32_t>(t);
}
/// The probability that an element is kept under @p threshold: (threshold + 1) / 256.
FL_HD double keep_probability(uint32_t threshold) {
  return (threshold + 1) / 256.0;
}

/// A DropoutParams with the probability's derived fields set (p = 0: off).
inline DropoutParams make_dropout(float p, uint64_t seed, uint64_t offset,
                                  const int64_t* state = nullptr, int rounds = kDropoutRounds) {
  DropoutParams d{};
  d.rounds = rounds;
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
  int rounds;       ///< Philox rounds (kDropoutRounds, or 10)
};

FL_HD DropoutKey dropout_key(uint64_t seed, uint64_t offset, uint32_t threshold,
                             int rounds = kDropoutRounds) {
  return {static_cast<uint32_t>(seed),
          static_cast<uint32_t>(seed >> 32) ^ static_cast<uint32_t>(offset >> 32),
          static_cast<uint32_t>(offset), threshold, rounds};
}
/// The key of @p d, reading the device state when there is one (device code only reads it there).
FL_HD DropoutKey dropout_key(const DropoutParams& d) {
  uint64_t seed = d.seed, offset = d.offset;
  if (d.state != nullptr) {
    seed = static_cast<uint64_t>(d.state[0]);
    offset = static_cast<uint64_t>(d.state[1]);
  }
  return dropout_key(seed, offset, d.threshold, d.rounds);
}

/// Element (query @p i, key @p j)'s cell (the file comment): its row cell, key cell, word of
/// the call and byte of the word.
FL_HD uint32_t dropout_row_cell(int i) {
  return (static_cast<uint32_t>(i) >> 4) * 8u + (static_cast<uint32_t>(i) & 7u);
}
FL_HD uint32_t dropout_key_cell(int j) {
  return (static_cast<uint32_t>(j) >> 5) * 4u + ((static_cast<uint32_t>(j) >> 1) & 3u);
}
FL_HD int dropout_word(int j) {
  return (j >> 3) & 3;
}
FL_HD int dropout_byte(int i, int j) {
  return 2 * ((i >> 3) & 1) + (j & 1);
}

/// The 16 random bytes of cell (@p row_cell, @p key_cell) of (sequence, head) @p bh = b x
/// heads_q + h: one Philox4x32 call of ROUNDS rounds. The kernels compile it for their
/// PDropout's rounds (rung 16: kDropoutRounds, or 10 in the ablation's kernels); the key's own
/// `rounds` must match (the launch picks the kernel by it).
template <int ROUNDS>
FL_HD void dropout_cell_rounds(const DropoutKey& k, uint32_t bh, uint32_t row_cell, uint32_t key_cell,
                               uint32_t (&w)[4]) {
  w[0] = key_cell;
  w[1] = row_cell;
  w[2] = bh;
  w[3] = k.c3;
  philox4x32_rounds<ROUNDS>(w, k.k0, k.k1);
}
/// The same cell with the key's rounds chosen at run time (the reference, the CPU tests and the
/// element-wise mask of dropout_mask.h).
FL_HD void dropout_cell(const DropoutKey& k, uint32_t bh, uint32_t row_cell, uint32_t key_cell,
                        uint32_t (&w)[4]) {
  if (k.rounds == 10)
    dropout_cell_rounds<10>(k, bh, row_cell, key_cell, w);
  else
    dropout_cell_rounds<kDropoutRounds>(k, bh, row_cell, key_cell, w);
}

/// Is byte @p b of @p word at most @p threshold (the element kept)?
FL_HD bool dropout_kept_byte(uint32_t word, int b, uint32_t threshold) {
  return ((word >> (8 * b)) & 0xffu) <= threshold;
}

/// The mask itself: is element (query @p i, key @p j) of (sequence, head) @p bh = b x heads_q + h
/// kept? The definition the kernels' cell walks must agree with; dropout_keep numbers bh.
FL_HD bool dropout_keep_bh(const DropoutKey& k, uint32_t bh, int i, int j) {
  uint32_t w[4];
  dropout_cell(k, bh, dropout_row_cell(i), dropout_key_cell(j), w);
  return dropout_kept_byte(w[dropout_word(j)], dropout_byte(i, j), k.threshold);
}
FL_HD bool dropout_keep(const DropoutKey& k, int b, int h, int heads_q, int i, int j) {
  return dropout_keep_bh(
      k, static_cast<uint32_t>(b) * static_cast<uint32_t>(heads_q) + static_cast<uint32_t>(h), i, j);
}

/// The forward's walk (rung 16): zero the dropped elements of a thread's accumulator fragment
/// @p S of one S block (rows = queries: element 4n + 2h + e is row cell @p row_cell's row h, key
/// @p key0 + 8n + 2t + e), one call per 32-key block the fragment meets. SHIFT (0 or 1): the block
/// starts 16 keys into a 32-key block (key0 mod 32 = 16 SHIFT), so chunk n is word (n + 2 SHIFT)
/// mod 4 of call (n + 2 SHIFT) / 4; both compile-time, the caller branches on key0 once. ROUNDS:
/// the generator's, compiled in (the key's `rounds` must be the same).
template <int BLOCK_N, int SHIFT, int ROUNDS = kDropoutRounds, class F>
FL_HD void dropout_fwd_fragment(F (&S)[BLOCK_N / 2], const DropoutKey& key, uint32_t bh,
                                uint32_t row_cell, int key0, int t) {
  constexpr int kChunks = BLOCK_N / 8;
  constexpr int kCalls = (kChunks + 2 * SHIFT + 3) / 4;
  const uint32_t key_cell0 = (static_cast<uint32_t>(key0) >> 5) * 4u + static_cast<uint32_t>(t);
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
  for (int u = 0; u < kCalls; ++u) {
    uint32_t w[4];
    dropout_cell_rounds<ROUNDS>(key, bh, row_cell, key_cell0 + 4u * static_cast<uint32_t>(u), w);
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
    for (int v = 0; v < 4; ++v) {
      const int n = 4 * u + v - 2 * SHIFT;
      if (n < 0 || n >= kChunks) continue;
#if defined(__CUDA_ARCH__)
#pragma unroll
#endif
      for (int b = 0; b < 4; ++b)
        if (!dropout_kept_byte(w[v], b, key.threshold)) S[4 * n + b] = F(0);
    }
  }
}

/// The backward's cell for 16 queries (rung 14's S^T fragment): the thread of key parity @p odd
/// (its keys k, k + 8 with k mod 32 = 16 @p upper + g) calls the cell of its query parity; of the
/// result it keeps, in @p mine, the bytes of its own keys and sends, in @p send, the partner's
/// (keys k ^ 1, k ^ 1 + 8): both packed as byte h + 2 hk = query 8h (+ parity), key + 8 hk.
FL_HD void dropout_bwd_pack(const uint32_t (&w)[4], int upper, int odd, uint32_t& mine,
                            uint32_t& send) {
  const uint32_t x0 = upper ? w[2] : w[0], x1 = upper ? w[3] : w[1];  // keys k, k + 8
  // Bytes (parity, 2 + parity) of x0, then of x1.
  mine = byte_perm(x0, x1, odd ? 0x7531u : 0x6420u);
  send = byte_perm(x0, x1, odd ? 0x6420u : 0x7531u);
}

/// The words of queries 2q and 2q + 1 (query parity 0, 1) once the partner's word @p theirs is
/// in: the thread's own call was that of its key parity @p odd.
FL_HD void dropout_bwd_rows(uint32_t mine, uint32_t theirs, int odd, uint32_t& even_q,
                            uint32_t& odd_q) {
  even_q = odd ? theirs : mine;
  odd_q = odd ? mine : theirs;
}

}  // namespace fl
