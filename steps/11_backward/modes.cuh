/// @file steps/11_backward/modes.cuh
/// @brief Rung 11's modes: what the main kernel (kernel.cuh) calls at its marked points for the
/// deterministic dQ, a split GQA group, the staggered Q order and the exact D pass, and the two
/// kernels only those modes launch.
///
/// kernel.cuh is the lesson, FlashAttention-2's backward with dQ by fp32 atomics, read top to
/// bottom. The modes change where a sum goes or in which order, not the algorithm, so their code
/// lives here and the kernel calls it where it branches, each call marked `(modes.cuh: ...)`. No
/// mode adds an instantiation of the main kernel beyond those it had: the deterministic mode and
/// the split group are runtime values, tested by uniform branches; the stagger is BwdTiles'
/// STAGGER and the exact D pass bwd_main_kernel's DELTA_PASS, as before.
///  - deterministic (AttnBwdParams::deterministic, `--deterministic 1`): the grid's x is a split
///    (workspace.h's deterministic_splits), which walks K/V blocks x, x + splits, ... and adds into
///    its own dQ accumulator with plain adds (add_dq_in_order); the convert kernel adds the splits
///    in order.
///  - split group (kv_split > 1, workspace.h's kv_splits): each slice of a GQA group writes its
///    fp32 partial dK_j, dV_j (store_dkv_partial), and bwd_convert_kv_kernel adds the slices in
///    order.
///  - stagger (the `stagger` variant): K/V block j visits its Q blocks from the (j mod n)-th
///    (q_block_of_step).
///  - exact D pass (delta_policy.h): the main kernel up to P and dP, then Σ P ∘ dP and Σ P per row
///    (add_delta_rows), zeroed by the preprocess (zero_delta_sums) and turned into D by
///    bwd_delta_sum_kernel.
#pragma once

#include <stdint.h>

#include "flashladder/backward.h"
#include "flashladder/dtype.cuh"
#include "flashladder/problem.h"

namespace fl::bwd {

// ---- the staggered Q order ------------------------------------------------------------------

/// The Q block (counted from the first that sees K/V block @p j) of step @p s, when the block
/// visits @p n_i Q blocks per query head: s mod n_i, in order; with Cfg::kStagger (the `stagger`
/// variant) rotated to start at the (j mod n_i)-th, so that the blocks running at once add into
/// different rows of the dQ accumulator instead of all into the same BLOCK_M x d tile. It tests
/// whether those atomics contend; the order within one K/V block changes no sum's order across
/// blocks, so the deterministic mode stays deterministic.
template <class Cfg>
__device__ __forceinline__ int q_block_of_step(int s, int n_i, int j) {
  return Cfg::kStagger ? (s % n_i + j % n_i) % n_i : s % n_i;
}

// ---- the deterministic dQ -------------------------------------------------------------------

/// dQ_i += dS K_j in the deterministic mode: this block owns its split's accumulator, so plain
/// adds, in the fixed order of its K/V blocks and steps. @p row_dst (mi, hh) is the accumulator
/// row of the thread's fragment row (mi, hh) at its first column, nullptr past seqlen_q.
template <int DQ_NT, class RowDst>
__device__ __forceinline__ void add_dq_in_order(const float (&acc)[2][DQ_NT][4], RowDst row_dst) {
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      float* dst = row_dst(mi, hh);
      if (!dst) continue;
#pragma unroll
      for (int n = 0; n < DQ_NT; ++n) {
        dst[8 * n] += acc[mi][n][2 * hh];
        dst[8 * n + 1] += acc[mi][n][2 * hh + 1];
      }
    }
}

// ---- the split GQA group --------------------------------------------------------------------

/// A split group's share of dK_j, dV_j: fragment row (@p mi, @p hh), which is @p key, of this
/// slice's fp32 partial sums (dK unscaled), columns @p col + 8 n + {0, 1}, to its slot of
/// @p dkv_acc ([2][kv_split][batch, seqlen_k, heads_kv, d]: dK, then dV), float2 stores (d and
/// @p col are even, dkv_acc_offset is even).
template <int D, int KV_NT>
__device__ __forceinline__ void store_dkv_partial(const float (&dK)[2][KV_NT][4], const float (&dV)[2][KV_NT][4],
                                                  int mi, int hh, float* dkv_acc, int slice, int kv_split,
                                                  const AttnParams& p, int batch, int key, int kv_head, int col) {
  const int64_t part_elems = static_cast<int64_t>(p.batch) * p.seqlen_k * p.heads_kv * D;
  float* dk = dkv_acc + slice * part_elems +
              ((static_cast<int64_t>(batch) * p.seqlen_k + key) * p.heads_kv + kv_head) * D + col;
  float* dv = dk + kv_split * part_elems;
#pragma unroll
  for (int n = 0; n < KV_NT; ++n) {
    *reinterpret_cast<float2*>(dk + 8 * n) = make_float2(dK[mi][n][2 * hh], dK[mi][n][2 * hh + 1]);
    *reinterpret_cast<float2*>(dv + 8 * n) = make_float2(dV[mi][n][2 * hh], dV[mi][n][2 * hh + 1]);
  }
}

/// Element @p e of a contiguous [batch, rows, heads, D] tensor as (batch, row, head, column):
/// the coordinates the convert kernels (kernel.cuh's bwd_convert_kernel, bwd_convert_kv_kernel)
/// write it to through the 16-bit tensor's strides.
struct RowCoord {
  int b, row, h, c;
};
template <int D>
__device__ __forceinline__ RowCoord row_coord(int64_t e, int rows, int heads) {
  return {static_cast<int>(e / (int64_t(D) * heads * rows)),
          static_cast<int>((e / (int64_t(D) * heads)) % rows), static_cast<int>((e / D) % heads),
          static_cast<int>(e % D)};
}

/// dK = scale · Σ_slices, dV = Σ_slices of a split group's fp32 partial sums (bwd_main_kernel's
/// dkv_acc), added in slice order and rounded to 16 bits.
template <class T, int D>
__global__ void __launch_bounds__(256)
    bwd_convert_kv_kernel(const AttnBwdParams P, const float* dkv_acc, int kv_split) {
  const AttnParams& p = P.fwd;
  const int64_t pairs = static_cast<int64_t>(p.batch) * p.seqlen_k * p.heads_kv * D / 2;
  const int64_t part_elems = 2 * pairs;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < pairs;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t e = 2 * i;  // [batch, seqlen_k, heads_kv, d], contiguous
    const RowCoord at = row_coord<D>(e, p.seqlen_k, p.heads_kv);
    float2 dk = make_float2(0.f, 0.f), dv = make_float2(0.f, 0.f);
    for (int s = 0; s < kv_split; ++s) {
      const float2 a = *reinterpret_cast<const float2*>(dkv_acc + s * part_elems + e);
      const float2 v = *reinterpret_cast<const float2*>(dkv_acc + (kv_split + s) * part_elems + e);
      dk.x += a.x;
      dk.y += a.y;
      dv.x += v.x;
      dv.y += v.y;
    }
    T* dk_g = static_cast<T*>(P.dk) + at.b * p.k_batch_stride + at.row * p.k_row_stride +
              at.h * p.k_head_stride + at.c;
    T* dv_g = static_cast<T*>(P.dv) + at.b * p.v_batch_stride + at.row * p.v_row_stride +
              at.h * p.v_head_stride + at.c;
    *reinterpret_cast<uint32_t*>(dk_g) = pack2<T>(dk.x * p.softmax_scale, dk.y * p.softmax_scale);
    *reinterpret_cast<uint32_t*>(dv_g) = pack2<T>(dv.x, dv.y);
  }
}

// ---- the exact D pass -----------------------------------------------------------------------

/// The preprocess's share of the exact D pass: this row's @p delta_splits accumulator pairs
/// ([splits][2][rows] from @p delta_acc; row @p stat, [batch, heads_q, seqlen_q]) zeroed, one
/// lane per value.
__device__ __forceinline__ void zero_delta_sums(float* delta_acc, int delta_splits, int64_t rows, int64_t stat,
                                                int lane) {
  for (int s = lane; s < 2 * delta_splits; s += 32) delta_acc[s * rows + stat] = 0.f;
}

/// The exact pass's step (DELTA_PASS): adds rowsum(P ∘ dP) and rowsum(P) over this block's keys
/// into D's accumulators @p delta (the step's head: element q is query row q) and @p delta +
/// @p rows. A warp holds 32 rows x kSdpN keys of P (in @p S, masked) and dP; its quad's four lanes
/// sum a row's columns, the warps that share rows (kSdpWarpsN of them) meet in @p rows_smem
/// ([2][kSdpWarpsN][BLOCK_M] fp32: the P tile's space, which this pass does not use), and one
/// thread per row adds their sums, in warp order: atomically, or plainly into the block's own split
/// when @p deterministic. Rows at or past @p seqlen_q add nothing.
template <class Cfg, int S_NT>
__device__ __forceinline__ void add_delta_rows(const float (&S)[2][S_NT][4], const float (&dP)[2][S_NT][4],
                                               float* delta, int64_t rows, int q0, int seqlen_q, float* rows_smem,
                                               bool deterministic) {
  constexpr int kHalf = Cfg::kSdpWarpsN * Cfg::kBlockM;  // the Σ P half of rows_smem
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int sm0 = 32 * (warp % Cfg::kSdpWarpsM);
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      float pdp = 0.f, p = 0.f;
#pragma unroll
      for (int n = 0; n < S_NT; ++n) {
        pdp += S[mi][n][2 * hh] * dP[mi][n][2 * hh] + S[mi][n][2 * hh + 1] * dP[mi][n][2 * hh + 1];
        p += S[mi][n][2 * hh] + S[mi][n][2 * hh + 1];
      }
#pragma unroll
      for (int lanes = 1; lanes < 4; lanes *= 2) {
        pdp += __shfl_xor_sync(0xffffffffu, pdp, lanes);
        p += __shfl_xor_sync(0xffffffffu, p, lanes);
      }
      const int at = (warp / Cfg::kSdpWarpsM) * Cfg::kBlockM + sm0 + 16 * mi + g + 8 * hh;
      if (t == 0) {
        rows_smem[at] = pdp;
        rows_smem[kHalf + at] = p;
      }
    }
  __syncthreads();
  const int r = threadIdx.x;
  if (r < Cfg::kBlockM && q0 + r < seqlen_q) {
    float pdp = 0.f, p = 0.f;
#pragma unroll
    for (int w = 0; w < Cfg::kSdpWarpsN; ++w) {
      pdp += rows_smem[w * Cfg::kBlockM + r];
      p += rows_smem[kHalf + w * Cfg::kBlockM + r];
    }
    if (deterministic) {  // the block's own split, in its K/V blocks' order
      delta[q0 + r] += pdp;
      delta[rows + q0 + r] += p;
    } else {
      atomicAdd(delta + q0 + r, pdp);
      atomicAdd(delta + rows + q0 + r, p);
    }
  }
}

/// D from the exact pass's sums ([splits][2][rows]: Σ P ∘ dP, then Σ P), the splits added in
/// order: D = Σ P ∘ dP / Σ P, so that every row of dS sums to zero for the P the main pass
/// recomputes, even where the forward's LSE leaves Σ P a little off 1 (by 1e-4 at 100k keys). A
/// row that sees no key (Σ P = 0) gets D = 0. `static`: rungs 11 and 14 each compile this header.
static __global__ void __launch_bounds__(256) bwd_delta_sum_kernel(const float* delta_acc, int splits, int64_t rows,
                                                            float* d_rowsum) {
  for (int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; r < rows; r += int64_t(gridDim.x) * blockDim.x) {
    float pdp = 0.f, p = 0.f;
    for (int s = 0; s < splits; ++s) {
      pdp += delta_acc[(2 * s) * rows + r];
      p += delta_acc[(2 * s + 1) * rows + r];
    }
    d_rowsum[r] = p > 0.f ? pdp / p : 0.f;
  }
}

}  // namespace fl::bwd
