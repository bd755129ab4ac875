/// @file softmax_math.h
/// @brief The online-softmax update and the log-sum-exp combine, written once
/// for kernels and CPU tests alike (FL_HD = __host__ __device__ under nvcc).
///
/// Notation follows the FlashAttention papers: for a query row, m is the
/// running maximum of the scaled scores seen so far, l the running sum of
/// exp(s - m), and O the running (unnormalized) sum of exp(s - m) * v.
#pragma once

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "flashladder/types.h"

namespace fl {

/// Running softmax statistics of one row.
struct SoftmaxState {
  float m;  ///< running max (-inf before any key)
  float l;  ///< running sum of exp(s - m)
};

/// Fresh state: no key seen yet.
FL_HD SoftmaxState softmax_init() { return {-INFINITY, 0.f}; }

/// exp(a - b) that is 0 (not NaN) when both are -inf: a row that has seen no
/// key yet keeps l = 0 and O = 0 when its first block is fully masked too.
FL_HD float exp_diff(float a, float b) { return (a == -INFINITY) ? 0.f : expf(a - b); }

/// One online-softmax step for a block whose max is @p m_block and whose sum
/// of exp(s - m_block) is @p l_block. Returns the new state and, through
/// @p alpha_old / @p alpha_block, the factors to rescale the old accumulator
/// and the block's P·V by (FlashAttention-1 Algorithm 1, lines 10-12):
///   m_new = max(m, m_block)
///   l_new = exp(m - m_new) l + exp(m_block - m_new) l_block
FL_HD SoftmaxState softmax_merge(SoftmaxState s, float m_block, float l_block, float* alpha_old,
                                 float* alpha_block) {
  const float m_new = fmaxf(s.m, m_block);
  const float a_old = exp_diff(s.m, m_new);
  const float a_blk = exp_diff(m_block, m_new);
  *alpha_old = a_old;
  *alpha_block = a_blk;
  return {m_new, a_old * s.l + a_blk * l_block};
}

/// FlashAttention-2 form: the block's scores are exponentiated against the
/// *new* max directly, so only the old accumulator is rescaled.
/// Returns the factor exp(m_old - m_new) for O and l; updates s.m.
FL_HD float softmax_rescale(SoftmaxState* s, float m_block) {
  const float m_new = fmaxf(s->m, m_block);
  const float alpha = exp_diff(s->m, m_new);
  s->m = m_new;
  s->l *= alpha;
  return alpha;
}

/// Natural-log LSE of a finished row: m + log(l); -inf when no key was seen.
FL_HD float softmax_lse(SoftmaxState s) {
  return (s.l > 0.f) ? s.m + logf(s.l) : -INFINITY;
}

/// 1 / l for the final normalization; 0 for a row that saw no key (O = 0).
FL_HD float softmax_inv_l(SoftmaxState s) { return (s.l > 0.f) ? 1.f / s.l : 0.f; }

/// Log-sum-exp combine of two partial results (Flash-Decoding): partial A has
/// lse_a and normalized output o_a, B likewise. Returns the merged LSE and the
/// weights w_a, w_b with o = w_a o_a + w_b o_b (w_a + w_b = 1 unless both empty).
FL_HD float lse_combine(float lse_a, float lse_b, float* w_a, float* w_b) {
  const float m = fmaxf(lse_a, lse_b);
  if (m == -INFINITY) {
    *w_a = 0.f;
    *w_b = 0.f;
    return -INFINITY;
  }
  const float ea = expf(lse_a - m), eb = expf(lse_b - m);
  const float sum = ea + eb;
  *w_a = ea / sum;
  *w_b = eb / sum;
  return m + logf(sum);
}

/// The log-sum-exp of n partial LSEs (the combine kernel's first pass).
FL_HD float lse_reduce(const float* lse, int n) {
  float m = -INFINITY;
  for (int i = 0; i < n; ++i) m = fmaxf(m, lse[i]);
  if (m == -INFINITY) return -INFINITY;
  float sum = 0.f;
  for (int i = 0; i < n; ++i) sum += expf(lse[i] - m);
  return m + logf(sum);
}

/// Weight of a partial with log-sum-exp @p lse_part in a total @p lse_total.
FL_HD float lse_weight(float lse_part, float lse_total) {
  return (lse_total == -INFINITY || lse_part == -INFINITY) ? 0.f : expf(lse_part - lse_total);
}

/// The bits of a float and back (__float_as_uint and __uint_as_float on the device).
FL_HD uint32_t float_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(x);
#else
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
#endif
}
FL_HD float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
#endif
}

/// 2^x on the FMA pipe, for the softmax's exponentials (x <= 8 there): 2^n 2^f with n = round(x),
/// f = x - n in [-0.5, 0.5], and 2^f by a cubic fitted for relative error (1.02e-4 = 2^-13.3 at
/// most, at f = +-0.5; the CPU test measures it over [-126, 8]: far below fp16's 2^-11 rounding). Adding 1.5 x 2^23 rounds x to the integer n,
/// held in the low mantissa bits; n << 23 is then added to the exponent field of 2^f. Below -126
/// it is 0, as ex2.approx.ftz's flushed result: a masked score (-inf) gives P = 0 exactly, and a
/// row that sees no key keeps l = 0. Three FADDs, three FFMAs, a FMNMX, a shift, an integer add and
/// a select, where ex2.approx is one MUFU.EX2 on the XU pipe, which issues 16 per clock per SM
/// against the FMA pipe's 128 (rung 13's and rung 16's `Ex2Split` move part of the softmax here).
FL_HD float exp2_poly(float x) {
  const float xc = fmaxf(x, -126.f);
  const float j = xc + 12582912.f;  // 1.5 x 2^23: round to nearest, n in the low bits
  const float f = xc - (j - 12582912.f);
  const float p = fmaf(fmaf(fmaf(0.05500843f, f, 0.24220999f), f, 0.6932829f), f, 1.f);
  const float r = bits_float(float_bits(p) + (float_bits(j) << 23));
  return x < -126.f ? 0.f : r;
}

}  // namespace fl
