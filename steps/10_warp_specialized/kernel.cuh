/// @file steps/10_warp_specialized/kernel.cuh
/// @brief Rung 10: rung 09 plus FlashAttention-3's three scheduling ideas (Shah et al., 2024,
/// §3.1-3.2), each of which a `--variant` turns off:
///
/// @code
///   // clang-format off
///   warpgroup 0  producer   setmaxnreg.dec 24. One thread: Q, then for every K/V block n:
///                           wait k_empty[s] -> expect_tx + TMA K_n (k_full[s])
///                           wait v_empty[s] -> expect_tx + TMA V_n (v_full[s])
///   warpgroups   consumers  setmaxnreg.inc 240. 64 query rows each. Per block n (OVERLAP):
///   1 and 2                   [turn]  issue S_n = Q K_n^T ; issue O += P_{n-1} V_{n-1}  [/turn]
///                             wait_group 1   (S_n done, P V still running)
///                             arrive k_empty[stage of n]       (K_n is read)
///                             softmax(S_n) in fp32             <- under the P V wgmma
///                             wait_group 0 ; arrive v_empty[stage of n-1]  (V_{n-1} is read)
///                             O *= alpha_n ; P_n = 16-bit S_n
///   PINGPONG: [turn] .. [/turn] is a named-barrier hand-off between the two consumers, so one
///   issues its GEMMs while the other runs its softmax.
///   // clang-format on
/// @endcode
///
/// What changes from rung 09, and nothing else: the loads come from a warpgroup that does
/// nothing but wait for free stages and issue copies (no __syncthreads in the main loop: each
/// stage has two "empty" mbarriers the consumers arrive on, one for K and one for V, since K_n is
/// read a whole softmax before V_n); registers move from the producer to
/// the consumers; the two consumers are scheduled against each other; and inside a consumer
/// the softmax of one block overlaps the GEMMs.
///
/// The schedule's steps that do not depend on the operands' type are named functions ahead of
/// the kernel (the shared-memory ring and its barriers, the start-up, the producer, the
/// ping-pong's turns); rung 13 runs the same steps on e4m3 tiles by calling them.
#pragma once

#include <cuda.h>
#include <math.h>
#include <stdint.h>

#include <string>

#include "flashladder/cuda_check.h"
#include "flashladder/dtype.cuh"
#include "flashladder/epilogue.cuh"
#include "flashladder/kv_blocks.h"
#include "flashladder/hopper.cuh"
#include "flashladder/problem.h"
#include "flashladder/softmax_math.h"
#include "flashladder/ptx.cuh"
#include "flashladder/tma.h"
#include "traits.h"

namespace fl::hopper10 {

using namespace fl::hopper;
namespace wg = fl::wgmma;

/// Named barriers of the ping-pong (0 is __syncthreads'): consumer c waits on kTurnBarrier + c
/// for its turn to issue GEMMs; the other consumer arrives on it when its own GEMMs are issued.
constexpr uint32_t kTurnBarrier = 2;
constexpr uint32_t kConsumerThreads = 256;

/// The softmax's exponential: ex2.approx, one MUFU instruction on the XU pipe.
struct Ex2Mufu {
  static __device__ __forceinline__ float apply(float x, int /*col_block*/) { return ptx::ex2_approx(x); }
};

/// The softmax's exponential split between two pipes: POLY of every 4 8-column blocks of S by
/// fl::exp2_poly (softmax_math.h: a cubic on the FMA pipe), the others by ex2.approx, so that the
/// FMA pipe takes part of the XU pipe's load where that pipe sets the pace (rung 13's `exp-fma`
/// studies, rung 16's softcap at d = 64, whose tanh shares the XU pipe).
template <int POLY>
struct Ex2Split {
  static __device__ __forceinline__ float apply(float x, int col_block) {
    return (col_block % 4) < POLY ? exp2_poly(x) : ptx::ex2_approx(x);
  }
};

/// Online softmax of one S block in place (rung 05's code on the wgmma layout): masks, updates
/// m and l, exponentiates S, and returns the factor O must be scaled by, per row half.
/// P_SHIFT (rung 13) multiplies every P, and l, by 2^P_SHIFT: exp2(s - m + P_SHIFT) puts the
/// largest P of a row at 2^P_SHIFT, inside e4m3's range; O / l cancels it and alpha never sees it.
/// EXP2 (rung 13) computes the exponentials of S, given each one's 8-column block.
template <int BLOCK_N, int P_SHIFT = 0, class EXP2 = Ex2Mufu>
__device__ __forceinline__ void softmax_block(float (&S)[BLOCK_N / 2], float (&m_i)[2],
                                              float (&l_i)[2], float (&alpha)[2],
                                              float scale_log2, bool mask, int visible_base,
                                              const int (&row_visible)[2]) {
  // LAB-BEGIN(10-softmax): mask, online softmax and the O rescale factor of one S block
  // [same-code: 09-online-softmax] [copy-of: 05-online-softmax]
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    if (mask) {
      const int visible = row_visible[h] - visible_base;
#pragma unroll
      for (int j = 0; j < BLOCK_N / 8; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e)
          if (8 * j + e >= visible) S[4 * j + 2 * h + e] = -INFINITY;
    }
    float m_blk = -INFINITY;
#pragma unroll
    for (int j = 0; j < BLOCK_N / 8; ++j)
      m_blk = fmaxf(m_blk, fmaxf(S[4 * j + 2 * h], S[4 * j + 2 * h + 1]));
    const float m_new = fmaxf(m_i[h], ptx::quad_max(m_blk));
    const float m_scaled = (m_new == -INFINITY) ? 0.f : m_new * scale_log2;
    alpha[h] = ptx::ex2_approx(m_i[h] * scale_log2 - m_scaled);
    m_i[h] = m_new;
    const float m_exp = P_SHIFT == 0 ? m_scaled : m_scaled - static_cast<float>(P_SHIFT);
    float l_blk = 0.f;
#pragma unroll
    for (int j = 0; j < BLOCK_N / 8; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        float& x = S[4 * j + 2 * h + e];
        x = EXP2::apply(fmaf(x, scale_log2, -m_exp), j);
        l_blk += x;
      }
    l_i[h] = l_i[h] * alpha[h] + l_blk;
  }
  // LAB-END(10-softmax)
}

/// One block's shared memory: the Q tile, a ring of STAGES K tiles, a ring of STAGES V tiles,
/// then the mbarriers, from the first 1024-byte swizzle atom of the dynamic shared memory. Cfg
/// gives the sizes (kQBytes, kKBytes, kVBytes, kStages; rung 13's e4m3 tiles too). The
/// barriers: Q's, then per stage s "K landed" and "V landed" (k_full, v_full: the producer's
/// arrive.expect_tx and the bytes of its copies complete a phase) and "K empty" and "V empty"
/// (k_empty, v_empty: one arrival per consumer warpgroup that has read the tile).
template <class Cfg>
struct WsSmem {
  uint32_t Q_s;    ///< the Q tile
  uint32_t K_s;    ///< stage s's K tile at K_s + s * kKBytes
  uint32_t V_s;    ///< stage s's V tile at V_s + s * kVBytes
  uint32_t bar_q;  ///< Q's barrier, followed by the ring's

  __device__ __forceinline__ explicit WsSmem(const uint8_t* smem_raw)
      : Q_s((smem_addr(smem_raw) + 1023u) & ~1023u),
        K_s(Q_s + Cfg::kQBytes),
        V_s(K_s + Cfg::kStages * Cfg::kKBytes),
        bar_q(V_s + Cfg::kStages * Cfg::kVBytes) {}
  __device__ __forceinline__ uint32_t k_full(int s) const { return bar_q + 8u * (1 + s); }
  __device__ __forceinline__ uint32_t v_full(int s) const { return bar_q + 8u * (1 + Cfg::kStages + s); }
  __device__ __forceinline__ uint32_t k_empty(int s) const { return bar_q + 8u * (1 + 2 * Cfg::kStages + s); }
  __device__ __forceinline__ uint32_t v_empty(int s) const { return bar_q + 8u * (1 + 3 * Cfg::kStages + s); }
};

/// The block's start-up, by one thread before the warpgroups take their roles: the three tensor
/// maps prefetched, and every barrier initialized (one arrival per phase for Q's and the "landed"
/// ones: the producer's arrive.expect_tx).
template <class Cfg>
__device__ __forceinline__ void start_up(const WsSmem<Cfg>& sm, const CUtensorMap* map_q, const CUtensorMap* map_k,
                                         const CUtensorMap* map_v) {
  tma_prefetch_map(map_q);
  tma_prefetch_map(map_k);
  tma_prefetch_map(map_v);
  mbarrier_init(sm.bar_q, 1);
  for (int s = 0; s < Cfg::kStages; ++s) {
    mbarrier_init(sm.k_full(s), 1);
    mbarrier_init(sm.v_full(s), 1);
    mbarrier_init(sm.k_empty(s), Cfg::kConsumers);  // one arrival per consumer warpgroup
    mbarrier_init(sm.v_empty(s), Cfg::kConsumers);
  }
  fence_mbarrier_init();
}

/// The TMA copies of one tile of this rung (16-bit): one box of 64 columns (128-byte rows, the
/// swizzle's width) per 64-column block cb of head_dim, coordinates innermost first: column,
/// head, row, batch. Q's rows start at row0 of `head`; K's and V's at key0 of `kv_head`.
template <class Cfg>
struct TileLoads {
  const CUtensorMap* map_q;
  const CUtensorMap* map_k;
  const CUtensorMap* map_v;
  int head, kv_head, row0, batch;

  __device__ __forceinline__ void q(uint32_t Q_s, uint32_t bar) const {
#pragma unroll
    for (int cb = 0; cb < Cfg::kColBlocks; ++cb)
      tma_load_4d(Q_s + cb * Cfg::kBlockM * 128, map_q, bar, 64 * cb, head, row0, batch);
  }
  __device__ __forceinline__ void k(uint32_t K_tile, uint32_t bar, int key0) const {
#pragma unroll
    for (int cb = 0; cb < Cfg::kColBlocks; ++cb)
      tma_load_4d(K_tile + cb * Cfg::kBlockN * 128, map_k, bar, 64 * cb, kv_head, key0, batch);
  }
  __device__ __forceinline__ void v(uint32_t V_tile, uint32_t bar, int key0) const {
#pragma unroll
    for (int cb = 0; cb < Cfg::kColBlocksV; ++cb)
      tma_load_4d(V_tile + cb * Cfg::kBlockN * 128, map_v, bar, 64 * cb, kv_head, key0, batch);
  }
};

/// The producer's work, for one thread: Q once, then every K/V block n into stage n % STAGES as
/// soon as both consumers have released what the stage held. LOADS issues one tile's copies
/// (TileLoads here; rung 13's for e4m3 tiles and V^T); each "landed" barrier is told the tile's
/// bytes first.
template <class Cfg, class LOADS>
__device__ __forceinline__ void produce(const WsSmem<Cfg>& sm, const LOADS& load, int n_blocks) {
  // LAB-BEGIN(10-producer): Q once, then every K/V block into the ring as stages free up
  mbarrier_arrive_expect_tx(sm.bar_q, Cfg::kQBytes);
  load.q(sm.Q_s, sm.bar_q);
#pragma unroll 1
  for (int n = 0; n < n_blocks; ++n) {
    const int s = n % Cfg::kStages;
    // The k-th refill of stage s waits for the consumers' k-th release: parity (k & 1) ^ 1,
    // which a fresh barrier satisfies at once (k = 0: the ring starts empty). K and V are
    // released apart: K_n right after S_n, V_n only after O += P_n V_n, one softmax later.
    const uint32_t refill_parity = ((n / Cfg::kStages) & 1) ^ 1;
    const int key0 = n * Cfg::kBlockN;
    mbarrier_wait_parity(sm.k_empty(s), refill_parity);
    mbarrier_arrive_expect_tx(sm.k_full(s), Cfg::kKBytes);
    load.k(sm.K_s + s * Cfg::kKBytes, sm.k_full(s), key0);
    mbarrier_wait_parity(sm.v_empty(s), refill_parity);
    mbarrier_arrive_expect_tx(sm.v_full(s), Cfg::kVBytes);
    load.v(sm.V_s + s * Cfg::kVBytes, sm.v_full(s), key0);
  }
  // LAB-END(10-producer)
}

/// The ping-pong's turns: consumer c issues its GEMMs between begin() and end() (without
/// PINGPONG both do nothing). Consumer 1 lets consumer 0 go first; each hands the turn over
/// after issuing, and the last hand-off of consumer 1 is skipped so every barrier phase it opens
/// is closed. `windows`: the turns each consumer takes.
template <bool PINGPONG>
struct PingPong {
  int c;
  int windows;
  int window = 0;

  __device__ __forceinline__ PingPong(int consumer, int turns) : c(consumer), windows(turns) {
    if constexpr (PINGPONG) {
      if (c == 1 && windows > 0) named_barrier_arrive(kTurnBarrier + 0, kConsumerThreads);
    }
  }
  __device__ __forceinline__ void begin() const {
    if constexpr (PINGPONG) named_barrier_sync(kTurnBarrier + c, kConsumerThreads);
  }
  __device__ __forceinline__ void end() {
    if constexpr (PINGPONG) {
      if (!(c == 1 && window == windows - 1)) named_barrier_arrive(kTurnBarrier + (1 - c), kConsumerThreads);
      ++window;
    }
  }
};

/// A consumer's GEMMs on the K/V block at ring position @p n (stage n % STAGES, filled for the
/// (n / STAGES)-th time), each issued after its tile landed and committed as one wgmma group:
/// S = Q K^T for consumer @p c's 64 query rows (issue_qk_block), O += P V from the 16-bit P in
/// registers (issue_pv_block). Rung 15 calls them with the ring position of its running counter.
template <class T, class Cfg>
__device__ __forceinline__ void issue_qk_block(const WsSmem<Cfg>& sm, int c, float (&S)[Cfg::kBlockN / 2], int n) {
  const int s = n % Cfg::kStages;
  mbarrier_wait_parity(sm.k_full(s), (n / Cfg::kStages) & 1);
  wgmma_fence_operand(S);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < Cfg::kHeadDim / 16; ++kk) {
    const uint64_t desc_q = wg::desc_kmajor_sw128(sm.Q_s + wg::sw128_kmajor_offset(Cfg::kBlockM, 64 * c, kk));
    const uint64_t desc_k =
        wg::desc_kmajor_sw128(sm.K_s + s * Cfg::kKBytes + wg::sw128_kmajor_offset(Cfg::kBlockN, 0, kk));
    wgmma_ss<T, Cfg::kBlockN>(S, desc_q, desc_k, kk > 0);
  }
  wgmma_commit();
}

template <class T, class Cfg>
__device__ __forceinline__ void issue_pv_block(const WsSmem<Cfg>& sm, float (&O_acc)[Cfg::kHeadDimV / 2],
                                               uint32_t (&P_frag)[Cfg::kBlockN / 16][4], int n) {
  constexpr int PV_STEPS = Cfg::kBlockN / 16;
  const int s = n % Cfg::kStages;
  mbarrier_wait_parity(sm.v_full(s), (n / Cfg::kStages) & 1);
  wgmma_fence_operand(O_acc);
#pragma unroll
  for (int kk = 0; kk < PV_STEPS; ++kk) wgmma_fence_operand(P_frag[kk]);
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < PV_STEPS; ++kk) {
    const uint64_t desc_v = wg::desc_mnmajor_sw128(
        sm.V_s + s * Cfg::kVBytes + wg::sw128_mnmajor_offset(Cfg::kBlockN, 0, kk), Cfg::kBlockN);
    wgmma_rs<T, Cfg::kHeadDimV, 1>(O_acc, P_frag[kk], desc_v, 1);
  }
  wgmma_commit();
}

/// After a block's softmax: O scaled by its rows' alpha, and the exponentiated S packed to the
/// 16-bit A operand of the next O += P V.
template <class T, class Cfg>
__device__ __forceinline__ void rescale_and_pack_p(float (&O_acc)[Cfg::kHeadDimV / 2],
                                                   uint32_t (&P_frag)[Cfg::kBlockN / 16][4],
                                                   const float (&S)[Cfg::kBlockN / 2], const float (&alpha)[2]) {
#pragma unroll
  for (int j = 0; j < Cfg::kHeadDimV / 8; ++j)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      O_acc[4 * j + 2 * h] *= alpha[h];
      O_acc[4 * j + 2 * h + 1] *= alpha[h];
    }
#pragma unroll
  for (int kk = 0; kk < Cfg::kBlockN / 16; ++kk)
#pragma unroll
    for (int i = 0; i < 4; ++i) P_frag[kk][i] = pack2<T>(S[8 * kk + 2 * i], S[8 * kk + 2 * i + 1]);
}

/// The forward kernel. Grid: (ceil(seqlen_q / 128), heads_q, batch); 384 threads.
template <class T, class Cfg, bool PINGPONG, bool OVERLAP>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    ws_fwd_kernel(const __grid_constant__ CUtensorMap map_q, const __grid_constant__ CUtensorMap map_k,
                  const __grid_constant__ CUtensorMap map_v, const AttnParams p) {
  constexpr int D = Cfg::kHeadDimV;  // O's columns: V's head_dim (Q's and K's: Cfg::kHeadDim)
  constexpr int BLOCK_M = Cfg::kBlockM;
  constexpr int BLOCK_N = Cfg::kBlockN;
  constexpr int STAGES = Cfg::kStages;
  constexpr int PV_STEPS = BLOCK_N / 16;

  const int m_block = static_cast<int>(gridDim.x - 1 - blockIdx.x);
  const int head = blockIdx.y;
  const int batch = blockIdx.z;
  const int kv_head = head / p.group;
  const int tid = threadIdx.x;
  const int wg_idx = warpgroup_index();  // 0: producer, 1 and 2: consumers

  const int row0 = m_block * BLOCK_M;
  const int q_rows = min(BLOCK_M, p.seqlen_q - row0);
  const KvBlocks kv_range = kv_blocks(p.seqlen_k, p.causal, p.causal_offset, row0, q_rows, BLOCK_N);
  const int n_blocks = kv_range.count;  // blocks n >= n_mask_from need the mask (rung 05)
  const int n_mask_from = kv_range.mask_from;

  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const WsSmem<Cfg> sm(smem_raw);  // Q_s, K_s, V_s and the barriers (k_full(s), ...)

  if (tid == 0) start_up(sm, &map_q, &map_k, &map_v);
  __syncthreads();  // the last barrier of all 384 threads: the roles part here

  if (wg_idx == 0) {
    // ---- producer ---------------------------------------------------------------------------
    setmaxnreg_dec<kProducerRegs>();
    if (tid == 0) produce(sm, TileLoads<Cfg>{&map_q, &map_k, &map_v, head, kv_head, row0, batch}, n_blocks);
    return;
  }

  // ---- consumers ------------------------------------------------------------------------------
  setmaxnreg_inc<kConsumerRegs>();
  const int c = wg_idx - 1;  // consumer 0 or 1: rows 64c .. 64c + 63 of the Q tile
  const int warp = (tid % kWarpgroupThreads) / 32;
  const int lane = tid % 32;
  const int g = lane / 4;
  const int t = lane % 4;
  const bool leader = (tid % kWarpgroupThreads) == 0;  // arrives on "empty" for its warpgroup

  // Keys each of this thread's two rows sees (the mask's bound), minus the column of its lane.
  int row_visible[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = row0 + 64 * c + 16 * warp + g + 8 * h;
    row_visible[h] = (p.causal ? min(p.seqlen_k, row + p.causal_offset + 1) : p.seqlen_k) - 2 * t;
  }

  // Ping-pong turns: consumer c issues its GEMMs between turn.begin() and turn.end(), once per
  // block with the overlap (plus the tail's P V), else twice (S, then P V).
  PingPong<PINGPONG> turn(c, n_blocks == 0 ? 0 : (OVERLAP ? n_blocks + 1 : 2 * n_blocks));

  float O_acc[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) O_acc[i] = 0.f;
  float m_i[2] = {-INFINITY, -INFINITY};
  float l_i[2] = {0.f, 0.f};
  float alpha[2];
  uint32_t P_frag[PV_STEPS][4];
  const float scale_log2 = p.scale_log2;
  mbarrier_wait_parity(sm.bar_q, 0);

  auto issue_qk = [&](float (&S)[BLOCK_N / 2], int n) { issue_qk_block<T, Cfg>(sm, c, S, n); };
  auto issue_pv = [&](int n) { issue_pv_block<T, Cfg>(sm, O_acc, P_frag, n); };
  auto rescale_and_pack = [&](float (&S)[BLOCK_N / 2]) { rescale_and_pack_p<T, Cfg>(O_acc, P_frag, S, alpha); };
  // A stage's K may be refilled once S = Q K^T of its block is done, its V once O += P V is.
  auto s_landed = [&](float (&S)[BLOCK_N / 2], int n) {  // after the wait that covers S_n
    wgmma_fence_operand(S);
    if (leader) mbarrier_arrive(sm.k_empty(n % STAGES));
  };
  auto pv_done = [&](int n) {  // waits for O += P_n V_n: O may be rescaled, P_n overwritten
    wgmma_wait<0>();
    wgmma_fence_operand(O_acc);
    if (leader) mbarrier_arrive(sm.v_empty(n % STAGES));
  };

  if constexpr (OVERLAP) {
    // LAB-BEGIN(10-overlap): the softmax of block n runs under the S = Q K^T of block n + 1
    if (n_blocks > 0) {
      float S[BLOCK_N / 2];
      turn.begin();
      issue_qk(S, 0);
      turn.end();
      wgmma_wait<0>();
      s_landed(S, 0);
      softmax_block<BLOCK_N>(S, m_i, l_i, alpha, scale_log2, 0 >= n_mask_from, 0, row_visible);
      rescale_and_pack(S);
#pragma unroll 1
      for (int n = 1; n < n_blocks; ++n) {
        float S_next[BLOCK_N / 2];
        turn.begin();
        issue_qk(S_next, n);  // group 1: S_n
        issue_pv(n - 1);      // group 2: O += P_{n-1} V_{n-1}
        turn.end();
        wgmma_wait<1>();  // groups complete in order: S_n is ready, P V may still run
        s_landed(S_next, n);
        softmax_block<BLOCK_N>(S_next, m_i, l_i, alpha, scale_log2, n >= n_mask_from,
                               n * BLOCK_N, row_visible);
        pv_done(n - 1);
        rescale_and_pack(S_next);
      }
      turn.begin();
      issue_pv(n_blocks - 1);
      turn.end();
      pv_done(n_blocks - 1);
    }
    // LAB-END(10-overlap)
  } else {
    // Rung 09's order: S, wait, softmax, P V, wait; only the other consumer fills the gaps.
#pragma unroll 1
    for (int n = 0; n < n_blocks; ++n) {
      float S[BLOCK_N / 2];
      turn.begin();
      issue_qk(S, n);
      turn.end();
      wgmma_wait<0>();
      s_landed(S, n);
      softmax_block<BLOCK_N>(S, m_i, l_i, alpha, scale_log2, n >= n_mask_from, n * BLOCK_N,
                             row_visible);
      rescale_and_pack(S);
      turn.begin();
      issue_pv(n);
      turn.end();
      pv_done(n);
    }
  }

  // ---- epilogue (rung 09's) ---------------------------------------------------------------------
  T* O_gmem = static_cast<T*>(p.o) + batch * p.o_batch_stride + head * p.o_head_stride;
  float* lse_gmem = p.lse + (static_cast<int64_t>(batch) * p.heads_q + head) * p.seqlen_q;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float l = ptx::quad_sum(l_i[h]);
    const float inv_l = (l > 0.f) ? 1.f / l : 0.f;
    const int row = row0 + 64 * c + 16 * warp + g + 8 * h;
    if (row >= p.seqlen_q) continue;
    T* o_row = O_gmem + row * p.o_row_stride;
    float* o32_row = o_fp32_row(p, batch, row, head);  // null unless a backward pass asked
#pragma unroll
    for (int j = 0; j < D / 8; ++j)
      store_o2<T>(o_row, o32_row, 8 * j + 2 * t, O_acc[4 * j + 2 * h] * inv_l, O_acc[4 * j + 2 * h + 1] * inv_l);
    if (t == 0) lse_gmem[row] = (l > 0.f) ? m_i[h] * p.softmax_scale + logf(l) : -INFINITY;
  }
}

// ---- host side ----------------------------------------------------------------------------------

template <class T, class Cfg, bool PINGPONG, bool OVERLAP>
const void* prepared_kernel() {
  static const bool once = [] {
    FL_CUDA_CHECK(cudaFuncSetAttribute(ws_fwd_kernel<T, Cfg, PINGPONG, OVERLAP>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       Cfg::kSmemBytes));
    return true;
  }();
  (void)once;
  return reinterpret_cast<const void*>(&ws_fwd_kernel<T, Cfg, PINGPONG, OVERLAP>);
}

template <class T, class Cfg, bool PINGPONG, bool OVERLAP>
void launch_ws(const AttnParams& p, cudaStream_t stream) {
  prepared_kernel<T, Cfg, PINGPONG, OVERLAP>();
  const DType dt = static_cast<DType>(p.dtype);
  const CUtensorMap map_q =
      make_tma_map_bshd(dt, p.q, p.batch, p.seqlen_q, p.heads_q, p.head_dim, p.q_batch_stride,
                        p.q_row_stride, p.q_head_stride, Cfg::kBlockM);
  const CUtensorMap map_k =
      make_tma_map_bshd(dt, p.k, p.batch, p.seqlen_k, p.heads_kv, p.head_dim, p.k_batch_stride,
                        p.k_row_stride, p.k_head_stride, Cfg::kBlockN);
  const CUtensorMap map_v =
      make_tma_map_bshd(dt, p.v, p.batch, p.seqlen_k, p.heads_kv, p.head_dim, p.v_batch_stride,
                        p.v_row_stride, p.v_head_stride, Cfg::kBlockN);
  const dim3 grid((p.seqlen_q + Cfg::kBlockM - 1) / Cfg::kBlockM, p.heads_q, p.batch);
  ws_fwd_kernel<T, Cfg, PINGPONG, OVERLAP>
      <<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(map_q, map_k, map_v, p);
  FL_LAUNCH_CHECK("ws_fwd_kernel");
}

template <class Cfg, bool PINGPONG, bool OVERLAP>
std::string tile_label() {
  return "ws_fwd<d=" + std::to_string(Cfg::kHeadDim) + ", " + std::to_string(Cfg::kBlockM) + "x" +
         std::to_string(Cfg::kBlockN) + ", producer + 2 consumers, " +
         std::to_string(Cfg::kStages) + " stages" + (PINGPONG ? ", ping-pong" : "") +
         (OVERLAP ? ", softmax overlap" : "") + ">";
}

}  // namespace fl::hopper10
