/// @file steps/04_fa2/ablations.cuh
/// @brief Rung 04's ablation variants: FA2's kernel with FlashAttention-1's
/// pieces put back, one switch at a time (`--variant NAME`, README "Variants").
///
/// The rung's lesson is kernel.cuh, which is FA2 only. To measure what each of
/// FA2's changes is worth, the bench needs the same kernel (same tiles, thread
/// map, register tiling, loaders) with one change undone. That code lives here,
/// not in the lesson, so kernel.cuh reads as one idea top to bottom; this file
/// includes it and reuses its device functions (compute_scores, mask_scores,
/// online_softmax_fa2, accumulate_pv, write_output, the loaders), so a student
/// who implements the lab regions there gets the ablations for free.
///
/// What each switch of Schedule reproduces (FlashAttention-1, Dao et al. 2022;
/// FlashAttention-2, Dao 2023, section 3):
///  - KV_OUTER = true: FA1's loop order (Algorithm 1): the CTA walks K/V tiles
///    in the outer loop and its Q tiles in the inner loop, so O_i, m_i and l_i
///    of each Q tile round-trip through an fp32 HBM workspace between K/V tiles
///    (Workspace, load_row_state, store_row_state). Used with a grid of one CTA
///    per (batch, head), as FA1 parallelizes (variants fa1-order, fa1-all).
///  - RESCALE_EVERY_TILE = true: FA1's update (Algorithm 1, lines 10-12):
///    P~ against the tile's own max, the full row sum reduced on every tile and
///    O divided by l_new on every tile (online_softmax_fa1), instead of FA2's
///    deferred 1/l (variants fa1-rescale, fa1-all).
///  - PREFETCH_KV = false: K/V tile j is loaded at the start of step j instead
///    of during step j-1 (variant no-prefetch; not an FA1 piece, an
///    implementation detail of this kernel).
/// And the launch's q_tiles_per_cta (> 1 for bh-grid, fa1-order, fa1-all):
/// FA1's grid of batch x heads, each CTA walking all Q tiles of its head,
/// instead of FA2's parallelism over Q tiles too.
#pragma once

#include <math.h>
#include <stdint.h>

#include "kernel.cuh"

namespace fl::fa2 {

/// Compile-time switches of the ablation variants (README: "Variants").
template <bool KV_OUTER, bool RESCALE_EVERY_TILE, bool PREFETCH_KV>
struct Schedule {
  /// FA1's loop order: K/V tiles outer, the CTA's Q tiles inner; O/m/l of each
  /// Q tile round-trip through an fp32 HBM workspace between K/V tiles.
  static constexpr bool kKvOuter = KV_OUTER;
  /// FA1's update: tile-local max, full row sum and O normalized by l on every
  /// tile, instead of one division at the end.
  static constexpr bool kRescaleEveryTile = RESCALE_EVERY_TILE;
  /// Load K_{j+1}, V_{j+1} into registers while tile j is being computed.
  static constexpr bool kPrefetchKv = PREFETCH_KV;
};

// The Schedule each variant compiles (KV_OUTER, RESCALE_EVERY_TILE, PREFETCH_KV).
/// The rung's own settings: Q-outer, deferred rescaling, prefetch (bh-grid
/// changes only the grid).
using Fa2Schedule = Schedule<false, false, true>;
using Fa1RescaleSchedule = Schedule<false, true, true>;
using Fa1OrderSchedule = Schedule<true, false, true>;
using Fa1AllSchedule = Schedule<true, true, true>;
using NoPrefetchSchedule = Schedule<false, false, false>;

/// fp32 scratch in HBM for the K/V-outer variants (rung 03's layout):
/// O [batch, heads_q, seqlen_q, head_dim], then m and l [batch, heads_q, seqlen_q].
struct Workspace {
  float* O;
  float* m;
  float* l;
};

/// Bytes of the workspace (K/V-outer variants only).
inline size_t workspace_bytes(int batch, int heads_q, int seqlen_q, int head_dim) {
  return sizeof(float) * static_cast<size_t>(batch) * heads_q * seqlen_q * (head_dim + 2);
}

__device__ __forceinline__ Workspace workspace(const AttnParams& p) {
  const int64_t rows = static_cast<int64_t>(p.batch) * p.heads_q * p.seqlen_q;
  float* base = static_cast<float*>(p.workspace);
  return {base, base + rows * p.head_dim, base + rows * (p.head_dim + 1)};
}

/// FA1's update (variants fa1-rescale, fa1-all), FlashAttention-1 Algorithm 1
/// lines 10-12 in the log2 domain: P~ = exp2(S - m~) against the tile's own max,
/// the full row sum l~ (a reduction on every tile), and O kept normalized:
///   O = diag(l_new)^-1 (diag(l) 2^(m - m_new) O + 2^(m~ - m_new) P~ V).
/// The two diagonal scalings are applied to O and to P~ before P~ V.
template <class Tr>
__device__ __forceinline__ void online_softmax_fa1(float (&S)[Tr::kThreadRows][Tr::kThreadKeys],
                                                   RowState<Tr>& st) {
#pragma unroll
  for (int t = 0; t < Tr::kThreadRows; ++t) {
    float m_tile = -INFINITY;
#pragma unroll
    for (int n = 0; n < Tr::kThreadKeys; ++n) m_tile = fmaxf(m_tile, S[t][n]);
    m_tile = reduce_lane_cols<Tr>(m_tile, [](float a, float b) { return fmaxf(a, b); });
    const float m_tile_base = (m_tile == -INFINITY) ? 0.f : m_tile;
    float l_tile = 0.f;
#pragma unroll
    for (int n = 0; n < Tr::kThreadKeys; ++n) {
      S[t][n] = exp2f(S[t][n] - m_tile_base);
      l_tile += S[t][n];
    }
    l_tile = reduce_lane_cols<Tr>(l_tile, [](float a, float b) { return a + b; });
    const float m_new = fmaxf(st.m[t], m_tile);
    const float m_base = (m_new == -INFINITY) ? 0.f : m_new;
    const float alpha_old = exp2f(st.m[t] - m_base), alpha_tile = exp2f(m_tile - m_base);
    const float l_new = alpha_old * st.l[t] + alpha_tile * l_tile;
    const float inv_l_new = l_new > 0.f ? 1.f / l_new : 0.f;  // no key yet: O stays 0
    const float c_old = st.l[t] * alpha_old * inv_l_new, c_tile = alpha_tile * inv_l_new;
#pragma unroll
    for (int d = 0; d < Tr::kThreadDims; ++d) st.O[t][d] *= c_old;
#pragma unroll
    for (int n = 0; n < Tr::kThreadKeys; ++n) S[t][n] *= c_tile;
    st.m[t] = m_new;
    st.l[t] = l_new;
  }
}

/// attend_tile with the online-softmax step the Schedule asks for. With
/// RESCALE_EVERY_TILE, RowState::l is the full row sum (every lane of a
/// lane_row holds it) and RowState::O stays normalized.
template <class Tr, class Sched, bool kMask>
__device__ __forceinline__ void attend_tile_sched(const AttnParams& p, const float* Q_smem,
                                                  const float* K_smem, const float* V_smem,
                                                  float* P_smem, const ThreadMap<Tr>& tm, int q0,
                                                  int k0, RowState<Tr>& st) {
  if constexpr (!Sched::kRescaleEveryTile) {
    attend_tile<Tr, kMask>(p, Q_smem, K_smem, V_smem, P_smem, tm, q0, k0, st);
  } else {
    float S[Tr::kThreadRows][Tr::kThreadKeys];
    compute_scores<Tr>(Q_smem, K_smem, tm, S);
    if constexpr (kMask) mask_scores<Tr>(p, tm, q0, k0, S);
    online_softmax_fa1<Tr>(S, st);
    accumulate_pv<Tr>(S, P_smem, V_smem, tm, st);
  }
}

/// The full row sums l_i, for the workspace: FA2's 8 partial sums of a
/// lane_row added, or FA1's l as it is (already the full sum).
template <class Tr, class Sched>
__device__ __forceinline__ void full_row_sums(const RowState<Tr>& st,
                                              float (&l_row)[Tr::kThreadRows]) {
#pragma unroll
  for (int t = 0; t < Tr::kThreadRows; ++t)
    l_row[t] = Sched::kRescaleEveryTile
                   ? st.l[t]
                   : reduce_lane_cols<Tr>(st.l[t], [](float a, float b) { return a + b; });
}

/// write_output for the Schedule: FA2's (divide by the full l once), or, after
/// FA1's update, O already normalized (and 0 for an empty row) and l already full.
template <class Tr, class Sched, class T>
__device__ __forceinline__ void write_output_sched(const AttnParams& p, const ThreadMap<Tr>& tm,
                                                   int b, int h, int q0, const RowState<Tr>& st) {
  if constexpr (!Sched::kRescaleEveryTile) {
    write_output<Tr, T>(p, tm, b, h, q0, st);
  } else {
    T* O_gmem = static_cast<T*>(p.o) + b * p.o_batch_stride + h * p.o_head_stride;
    const int64_t lse_row0 = (static_cast<int64_t>(b) * p.heads_q + h) * p.seqlen_q;
#pragma unroll
    for (int t = 0; t < Tr::kThreadRows; ++t) {
      const int row = q0 + tm.row(t);
      if (row >= p.seqlen_q) continue;
      const SoftmaxState s{st.m[t] / kLog2e, st.l[t]};  // back to natural-log units
#pragma unroll
      for (int c = 0; c < Tr::kDimChunks; ++c) {
        const float* o = &st.O[t][4 * c];
        const uint2 packed = make_uint2(pack2<T>(o[0], o[1]), pack2<T>(o[2], o[3]));
        *reinterpret_cast<uint2*>(O_gmem + row * p.o_row_stride + tm.dim(c)) = packed;
      }
      if (tm.lane_col == 0) p.lse[lse_row0 + row] = softmax_lse(s);
    }
  }
}

/// K/V-outer variants: O_i, m_i, l_i back from the HBM workspace. The stored l
/// is the full row sum; with deferred rescaling lane_col 0 takes it and the
/// other lanes restart their partial sums at 0 (the partials still add up to l).
template <class Tr, class Sched>
__device__ __forceinline__ void load_row_state(const AttnParams& p, const ThreadMap<Tr>& tm,
                                               int64_t bh_row0, int q0, RowState<Tr>& st) {
  const Workspace ws = workspace(p);
#pragma unroll
  for (int t = 0; t < Tr::kThreadRows; ++t) {
    const int row = q0 + tm.row(t);
    const bool ok = row < p.seqlen_q;
    const int64_t r = bh_row0 + row;
    st.m[t] = ok ? ws.m[r] : -INFINITY;
    st.l[t] = ok && (Sched::kRescaleEveryTile || tm.lane_col == 0) ? ws.l[r] : 0.f;
#pragma unroll
    for (int c = 0; c < Tr::kDimChunks; ++c) {
      const float4 o = ok ? *reinterpret_cast<const float4*>(ws.O + r * Tr::kHeadDim + tm.dim(c))
                          : make_float4(0.f, 0.f, 0.f, 0.f);
      st.O[t][4 * c + 0] = o.x;
      st.O[t][4 * c + 1] = o.y;
      st.O[t][4 * c + 2] = o.z;
      st.O[t][4 * c + 3] = o.w;
    }
  }
}

/// K/V-outer variants: O_i, m_i and the full l_i out to the HBM workspace.
template <class Tr, class Sched>
__device__ __forceinline__ void store_row_state(const AttnParams& p, const ThreadMap<Tr>& tm,
                                                int64_t bh_row0, int q0, const RowState<Tr>& st) {
  const Workspace ws = workspace(p);
  float l_row[Tr::kThreadRows];
  full_row_sums<Tr, Sched>(st, l_row);
#pragma unroll
  for (int t = 0; t < Tr::kThreadRows; ++t) {
    const int row = q0 + tm.row(t);
    if (row >= p.seqlen_q) continue;
    const int64_t r = bh_row0 + row;
#pragma unroll
    for (int c = 0; c < Tr::kDimChunks; ++c)
      *reinterpret_cast<float4*>(ws.O + r * Tr::kHeadDim + tm.dim(c)) =
          make_float4(st.O[t][4 * c], st.O[t][4 * c + 1], st.O[t][4 * c + 2], st.O[t][4 * c + 3]);
    if (tm.lane_col == 0) {
      ws.m[r] = st.m[t];
      ws.l[r] = l_row[t];
    }
  }
}

/// The ablation kernel: rung 04's kernel with the Schedule switches and
/// several Q tiles per CTA. Grid: (ceil(Q tiles / q_tiles_per_cta), heads_q,
/// batch); Tr::kThreads threads; Tr::kSmemBytes of dynamic shared memory.
/// With Fa2Schedule and q_tiles_per_cta = 1 it computes what fa2_forward does.
template <class Tr, class T, class Sched>
__global__ void __launch_bounds__(Tr::kThreads, Tr::kMinCtasPerSm)
    fa2_ablation(AttnParams p, int q_tiles_per_cta) {
  constexpr int BLOCK_M = Tr::kBlockM, BLOCK_N = Tr::kBlockN;
  extern __shared__ __align__(16) float smem[];
  float* Q_smem = smem;
  float* K_smem = Q_smem + Tr::kQFloats;
  float* V_smem = K_smem + Tr::kKFloats;
  float* P_smem = V_smem + Tr::kVFloats;

  const int h = blockIdx.y, b = blockIdx.z;
  const int h_kv = h / p.group;  // GQA: query head h reads KV head h / group
  const int num_q_tiles = (p.seqlen_q + BLOCK_M - 1) / BLOCK_M;
  const int i_begin = blockIdx.x * q_tiles_per_cta;
  const int i_end = min(num_q_tiles, i_begin + q_tiles_per_cta);
  const ThreadMap<Tr> tm;

  const T* Q_gmem = static_cast<const T*>(p.q) + b * p.q_batch_stride + h * p.q_head_stride;
  const T* K_gmem = static_cast<const T*>(p.k) + b * p.k_batch_stride + h_kv * p.k_head_stride;
  const T* V_gmem = static_cast<const T*>(p.v) + b * p.v_batch_stride + h_kv * p.v_head_stride;
  const int64_t bh_row0 = (static_cast<int64_t>(b) * p.heads_q + h) * p.seqlen_q;

  RowState<Tr> st;
  KvTile<Tr, T> kv;

  if constexpr (!Sched::kKvOuter) {
    // ---- FA2's order: the CTA's Q tiles outer, one after another, K/V tiles inner
    for (int i = i_begin; i < i_end; ++i) {
      const int q0 = i * BLOCK_M;
      __syncthreads();  // (several Q tiles per CTA) the previous tile's readers of Q_smem are done
      load_q_tile<Tr, T>(Q_gmem + q0 * p.q_row_stride, p.q_row_stride,
                         min(BLOCK_M, p.seqlen_q - q0), p.scale_log2, Q_smem);
      init_row_state(st);
      const int num_kv = visible_kv_tiles<Tr>(p, q0);  // causal: tiles above the diagonal skipped
      if (Sched::kPrefetchKv && num_kv > 0) kv.fetch(K_gmem, V_gmem, p, 0);
      for (int j = 0; j < num_kv; ++j) {
        const int k0 = j * BLOCK_N;
        if (!Sched::kPrefetchKv) kv.fetch(K_gmem, V_gmem, p, k0);
        __syncthreads();  // every warp is done with K_{j-1}, V_{j-1} (and Q_smem is complete)
        kv.store(K_smem, V_smem);
        __syncthreads();
        if (Sched::kPrefetchKv && j + 1 < num_kv) kv.fetch(K_gmem, V_gmem, p, k0 + BLOCK_N);
        if (tile_needs_mask<Tr>(p, q0, k0))
          attend_tile_sched<Tr, Sched, true>(p, Q_smem, K_smem, V_smem, P_smem, tm, q0, k0, st);
        else
          attend_tile_sched<Tr, Sched, false>(p, Q_smem, K_smem, V_smem, P_smem, tm, q0, k0, st);
      }
      write_output_sched<Tr, Sched, T>(p, tm, b, h, q0, st);
    }
  } else {
    // ---- FA1's order: K/V tiles outer, the CTA's Q tiles inner -----------------
    // Q tiles that see no key at all (causal, seqlen_q > seqlen_k) are never
    // visited below: they get O = 0, LSE = -inf now.
    for (int i = i_begin; i < i_end; ++i) {
      if (visible_kv_tiles<Tr>(p, i * BLOCK_M) > 0) continue;
      init_row_state(st);
      write_output_sched<Tr, Sched, T>(p, tm, b, h, i * BLOCK_M, st);
    }
    const int num_kv = visible_kv_tiles<Tr>(p, (i_end - 1) * BLOCK_M);  // the last Q tile sees most
    if (Sched::kPrefetchKv && num_kv > 0) kv.fetch(K_gmem, V_gmem, p, 0);
    for (int j = 0; j < num_kv; ++j) {
      const int k0 = j * BLOCK_N;
      if (!Sched::kPrefetchKv) kv.fetch(K_gmem, V_gmem, p, k0);
      __syncthreads();  // every warp is done with K_{j-1}, V_{j-1}
      kv.store(K_smem, V_smem);
      if (Sched::kPrefetchKv && j + 1 < num_kv) kv.fetch(K_gmem, V_gmem, p, k0 + BLOCK_N);
      for (int i = i_begin; i < i_end; ++i) {
        const int q0 = i * BLOCK_M;
        const int num_kv_i = visible_kv_tiles<Tr>(p, q0);
        if (j >= num_kv_i) continue;  // causal: tile j is above this Q tile's diagonal
        __syncthreads();  // the previous Q tile's readers of Q_smem are done (and K/V is stored)
        load_q_tile<Tr, T>(Q_gmem + q0 * p.q_row_stride, p.q_row_stride,
                           min(BLOCK_M, p.seqlen_q - q0), p.scale_log2, Q_smem);
        if (j == 0)
          init_row_state(st);
        else
          load_row_state<Tr, Sched>(p, tm, bh_row0, q0, st);  // the HBM round trip, inbound
        __syncthreads();
        if (tile_needs_mask<Tr>(p, q0, k0))
          attend_tile_sched<Tr, Sched, true>(p, Q_smem, K_smem, V_smem, P_smem, tm, q0, k0, st);
        else
          attend_tile_sched<Tr, Sched, false>(p, Q_smem, K_smem, V_smem, P_smem, tm, q0, k0, st);
        if (j == num_kv_i - 1)
          write_output_sched<Tr, Sched, T>(p, tm, b, h, q0, st);
        else
          store_row_state<Tr, Sched>(p, tm, bh_row0, q0, st);  // the HBM round trip, outbound
      }
    }
  }
}

}  // namespace fl::fa2
