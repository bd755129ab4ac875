/// @file steps/13_fp8/kernel.cuh
/// @brief Rung 13: rung 10's kernel with e4m3 operands (FlashAttention-3, Shah et al. 2024,
/// §3.3). The schedule (producer warpgroup, ping-pong consumers, softmax under the next
/// S = Q K^T) is rung 10's: its shared-memory ring, start-up, producer and ping-pong turns are
/// rung 10's functions, called with e4m3 tiles; what changes is what the tensor cores read:
///
/// @code
///   // clang-format off
///   S = Q K^T      wgmma m64nNk32 e4m3: Q and K are e4m3 tiles (K-major, as in 16 bits)
///   softmax        scale_log2 x descale_q x descale_k (the harness's per-(batch, KV head)
///                  factors); P = exp2(s - m + 8): the row max lands on 256, not 1
///   P -> e4m3      cvt.rn.satfinite.e4m3x2.f32, straight from the accumulators: V^T's keys are
///                  stored in the order the accumulators hold them (fp8.h, vt_key_at), so the
///                  register layout S leaves is the A operand P V wants
///   O += P V       wgmma RS m64n(d)k32 e4m3: V^T tiles [d][128 keys], K-major, into a fresh
///                  accumulator per block, added to O in fp32: the FP8 tensor cores accumulate
///                  with about 14 significand bits, and 128 blocks of k32 steps adding into O
///                  itself lose percents (the `fast-accum` variant measures it)
///   epilogue       O x descale_v / l in 16 bits; LSE = m s + log(l) - 8 ln 2
///   // clang-format on
/// @endcode
#pragma once

#include <cuda.h>
#include <cuda_fp8.h>
#include <math.h>
#include <stdint.h>

#include <string>

#include "../10_warp_specialized/kernel.cuh"
#include "flashladder/cuda_check.h"
#include "flashladder/dtype.cuh"
#include "flashladder/kv_blocks.h"
#include "flashladder/fp8.h"
#include "flashladder/hopper.cuh"
#include "flashladder/problem.h"
#include "flashladder/ptx.cuh"
#include "flashladder/tma.h"
#include "traits.h"

namespace fl::hopper13 {

using namespace fl::hopper;
namespace wg = fl::wgmma;
using hopper10::PingPong;
using hopper10::WsSmem;

/// Four floats -> four e4m3 in one register, the first in the low byte (wgmma's k order).
__device__ __forceinline__ uint32_t pack4_e4m3(float a, float b, float c, float d) {
  const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3);
  const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(c, d), __NV_SATFINITE, __NV_E4M3);
  return lo | (hi << 16);
}

/// The exponential of rung 13's softmax: POLY of every 4 8-column blocks of S by a cubic on the
/// FMA pipe (fl::exp2_poly, softmax_math.h: relative error 1.02e-4 at most, far below e4m3's
/// 2^-4), the others by ex2.approx (rung 10's hopper10::Ex2Split).
template <int POLY>
using Ex2Split = hopper10::Ex2Split<POLY>;

/// The TMA copies of one e4m3 tile, for rung 10's producer (hopper10::produce): Q and K rows of
/// head_dim bytes in boxes of kSwizzleQK bytes, one per column block (coordinates: column, head,
/// row, batch); V^T, [d rows][keys], in boxes of kSwizzleV keys by all d rows (coordinates: key,
/// row of d, KV head, batch).
template <class Cfg>
struct Fp8TileLoads {
  static constexpr int SWQ = Cfg::kSwizzleQK;
  static constexpr int SWV = Cfg::kSwizzleV;
  const CUtensorMap* map_q;
  const CUtensorMap* map_k;
  const CUtensorMap* map_vt;
  int head, kv_head, row0, batch;

  __device__ __forceinline__ void q(uint32_t Q_s, uint32_t bar) const {
#pragma unroll
    for (int cb = 0; cb < Cfg::kColBlocks; ++cb)
      tma_load_4d(Q_s + cb * Cfg::kBlockM * SWQ, map_q, bar, SWQ * cb, head, row0, batch);
  }
  __device__ __forceinline__ void k(uint32_t K_tile, uint32_t bar, int key0) const {
#pragma unroll
    for (int cb = 0; cb < Cfg::kColBlocks; ++cb)
      tma_load_4d(K_tile + cb * Cfg::kBlockN * SWQ, map_k, bar, SWQ * cb, kv_head, key0, batch);
  }
  __device__ __forceinline__ void v(uint32_t V_tile, uint32_t bar, int key0) const {  // V^T: [d rows][keys]
#pragma unroll
    for (int cb = 0; cb < Cfg::kVColBlocks; ++cb)
      tma_load_4d(V_tile + cb * Cfg::kHeadDim * SWV, map_vt, bar, key0 + SWV * cb, 0, kv_head, batch);
  }
};

/// The forward kernel. Grid: (ceil(seqlen_q / 128), heads_q, batch); 384 threads. T is O's type.
template <class T, class Cfg, int P_SHIFT, bool PROMOTE, int POLY>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    fp8_fwd_kernel(const __grid_constant__ CUtensorMap map_q, const __grid_constant__ CUtensorMap map_k,
                   const __grid_constant__ CUtensorMap map_vt, const AttnParams p) {
  constexpr int D = Cfg::kHeadDim;
  constexpr int BLOCK_M = Cfg::kBlockM;
  constexpr int BLOCK_N = Cfg::kBlockN;
  constexpr int STAGES = Cfg::kStages;
  constexpr int SWQ = Cfg::kSwizzleQK;
  constexpr int SWV = Cfg::kSwizzleV;
  constexpr int QK_STEPS = D / 32;
  constexpr int PV_STEPS = BLOCK_N / 32;
  // PROMOTE: each block's P V goes to a fresh accumulator, added to O in fp32 (D = 256: in two
  // halves of 128 columns, for registers). Without it every k32 step adds into O itself.
  constexpr int PV_SPLIT = (PROMOTE && D == 256) ? 2 : 1;
  constexpr int PV_N = D / PV_SPLIT;
  // The softmax of block n under the GEMMs of block n + 1 needs S_{n+1}, P_n, O and (PROMOTE)
  // O_blk at once: 64 + 16 + 128 + 64 registers at d = 256 spill, so there PROMOTE runs rung
  // 10's order without that overlap (the other consumer's GEMMs still hide each softmax).
  constexpr bool OVERLAP = !(PROMOTE && D == 256);

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
  const WsSmem<Cfg> sm(smem_raw);  // rung 10's ring, of e4m3 K and V^T tiles

  if (tid == 0) hopper10::start_up(sm, &map_q, &map_k, &map_vt);
  __syncthreads();

  if (wg_idx == 0) {
    // ---- producer: rung 10's, with byte-wide boxes and V^T's coordinates ---------------------
    setmaxnreg_dec<hopper10::kProducerRegs>();
    if (tid == 0)
      hopper10::produce(sm, Fp8TileLoads<Cfg>{&map_q, &map_k, &map_vt, head, kv_head, row0, batch}, n_blocks);
    return;
  }

  // ---- consumers ------------------------------------------------------------------------------
  setmaxnreg_inc<hopper10::kConsumerRegs>();
  const int c = wg_idx - 1;
  const int warp = (tid % kWarpgroupThreads) / 32;
  const int lane = tid % 32;
  const int g = lane / 4;
  const int t = lane % 4;
  const bool leader = (tid % kWarpgroupThreads) == 0;

  int row_visible[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = row0 + 64 * c + 16 * warp + g + 8 * h;
    row_visible[h] = (p.causal ? min(p.seqlen_k, row + p.causal_offset + 1) : p.seqlen_k) - 2 * t;
  }

  PingPong<true> turn(c, n_blocks == 0 ? 0 : (OVERLAP ? n_blocks + 1 : 2 * n_blocks));

  // The descales of this (batch, KV head): Q's and K's fold into the softmax scale, V's into O.
  const int scale_idx = batch * p.heads_kv + kv_head;
  const float qk_descale = p.q_descale[scale_idx] * p.k_descale[scale_idx];
  const float scale_log2 = p.scale_log2 * qk_descale;

  float O_acc[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) O_acc[i] = 0.f;
  float O_blk[PROMOTE ? PV_N / 2 : 1];  // PROMOTE: one block's P V (columns of one half)
  float m_i[2] = {-INFINITY, -INFINITY};
  float l_i[2] = {0.f, 0.f};
  float alpha[2] = {1.f, 1.f};  // set by every softmax; defined before the first (and in a lab stub)
  uint32_t P_frag[PV_STEPS][4];
  mbarrier_wait_parity(sm.bar_q, 0);

  auto issue_qk = [&](float (&S)[BLOCK_N / 2], int n) {
    const int s = n % STAGES;
    mbarrier_wait_parity(sm.k_full(s), (n / STAGES) & 1);
    wgmma_fence_operand(S);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < QK_STEPS; ++kk) {
      const uint64_t desc_q = wg::desc_kmajor_sw(sm.Q_s + wg::kmajor_offset(SWQ, BLOCK_M, 64 * c, 32 * kk), SWQ);
      const uint64_t desc_k =
          wg::desc_kmajor_sw(sm.K_s + s * Cfg::kKBytes + wg::kmajor_offset(SWQ, BLOCK_N, 0, 32 * kk), SWQ);
      wgmma_ss_e4m3<BLOCK_N>(S, desc_q, desc_k, kk > 0);
    }
    wgmma_commit();
  };
  // Issues O += P_n V_n (or, PROMOTE, O_blk = P_n V_n for columns half * PV_N ...).
  auto issue_pv = [&](int n, int half) {
    const int s = n % STAGES;
    if (half == 0) mbarrier_wait_parity(sm.v_full(s), (n / STAGES) & 1);
#pragma unroll
    for (int kk = 0; kk < PV_STEPS; ++kk) wgmma_fence_operand(P_frag[kk]);
    if constexpr (PROMOTE) {
      wgmma_fence_operand(O_blk);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < PV_STEPS; ++kk) {
        // B = V^T: rows half * PV_N .. of d (N) by BLOCK_N keys (K), K-major like K in S = Q K^T.
        const uint64_t desc_v = wg::desc_kmajor_sw(
            sm.V_s + s * Cfg::kVBytes + wg::kmajor_offset(SWV, D, half * PV_N, 32 * kk), SWV);
        wgmma_rs_e4m3<PV_N>(O_blk, P_frag[kk], desc_v, kk > 0);
      }
    } else {
      wgmma_fence_operand(O_acc);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < PV_STEPS; ++kk) {
        const uint64_t desc_v =
            wg::desc_kmajor_sw(sm.V_s + s * Cfg::kVBytes + wg::kmajor_offset(SWV, D, 0, 32 * kk), SWV);
        wgmma_rs_e4m3<D>(O_acc, P_frag[kk], desc_v, 1);
      }
    }
    wgmma_commit();
  };
  auto rescale_and_pack = [&](float (&S)[BLOCK_N / 2]) {
#pragma unroll
    for (int j = 0; j < D / 8; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        O_acc[4 * j + 2 * h] *= alpha[h];
        O_acc[4 * j + 2 * h + 1] *= alpha[h];
      }
    // LAB-BEGIN(13-pack-p): P's accumulators to the e4m3 A operand of the k32 steps
    // Register i of k-step kk: row half h = i % 2, keys 16 (i / 2) .. + 15 of the step, which
    // S holds as the 8-column blocks j0 = 4 kk + 2 (i / 2) and j0 + 1. V^T's key order
    // (vt_key_at) matches these four values to the four k this register feeds.
#pragma unroll
    for (int kk = 0; kk < PV_STEPS; ++kk)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int j0 = 4 * kk + 2 * (i / 2), h = i % 2;
        P_frag[kk][i] = pack4_e4m3(S[4 * j0 + 2 * h], S[4 * j0 + 2 * h + 1], S[4 * j0 + 4 + 2 * h],
                                   S[4 * j0 + 4 + 2 * h + 1]);
      }
    // LAB-END(13-pack-p)
  };
  auto s_landed = [&](float (&S)[BLOCK_N / 2], int n) {
    wgmma_fence_operand(S);
    if (leader) mbarrier_arrive(sm.k_empty(n % STAGES));
  };
  // Waits for P_n V_n: O may be rescaled and P_n overwritten. PROMOTE adds the block's sum to O
  // in fp32 (the FP8 tensor cores keep about 14 significand bits when they accumulate).
  auto pv_done = [&](int n) {
    wgmma_wait<0>();
    if constexpr (PROMOTE) {
#pragma unroll
      for (int half = 0; half < PV_SPLIT; ++half) {
        if (half > 0) {  // the second half of d = 256: its own P V, after the first's sum
          issue_pv(n, half);
          wgmma_wait<0>();
        }
        wgmma_fence_operand(O_blk);
#pragma unroll
        for (int i = 0; i < PV_N / 2; ++i) O_acc[half * (PV_N / 2) + i] += O_blk[i];
      }
    } else {
      wgmma_fence_operand(O_acc);
    }
    if (leader) mbarrier_arrive(sm.v_empty(n % STAGES));
  };

  // Rung 10's main loop: the softmax of block n under the S = Q K^T of block n + 1.
  if constexpr (OVERLAP) {
  // LAB-BEGIN(13-overlap): rung 10's overlapped main loop, with P shifted by 2^P_SHIFT
  // [copy-of: 10-overlap]
  if (n_blocks > 0) {
    float S[BLOCK_N / 2];
    turn.begin();
    issue_qk(S, 0);
    turn.end();
    wgmma_wait<0>();
    s_landed(S, 0);
    hopper10::softmax_block<BLOCK_N, P_SHIFT, Ex2Split<POLY>>(S, m_i, l_i, alpha, scale_log2, 0 >= n_mask_from, 0,
                                              row_visible);
    rescale_and_pack(S);
#pragma unroll 1
    for (int n = 1; n < n_blocks; ++n) {
      float S_next[BLOCK_N / 2];
      turn.begin();
      issue_qk(S_next, n);
      issue_pv(n - 1, 0);
      turn.end();
      wgmma_wait<1>();
      s_landed(S_next, n);
      hopper10::softmax_block<BLOCK_N, P_SHIFT, Ex2Split<POLY>>(S_next, m_i, l_i, alpha, scale_log2, n >= n_mask_from,
                                                n * BLOCK_N, row_visible);
      pv_done(n - 1);
      rescale_and_pack(S_next);
    }
    turn.begin();
    issue_pv(n_blocks - 1, 0);
    turn.end();
    pv_done(n_blocks - 1);
  }
  // LAB-END(13-overlap)
  } else {
    // Rung 10's no-overlap order: S, wait, softmax, P V, wait (d = 256 with PROMOTE).
#pragma unroll 1
    for (int n = 0; n < n_blocks; ++n) {
      float S[BLOCK_N / 2];
      turn.begin();
      issue_qk(S, n);
      turn.end();
      wgmma_wait<0>();
      s_landed(S, n);
      hopper10::softmax_block<BLOCK_N, P_SHIFT, Ex2Split<POLY>>(S, m_i, l_i, alpha, scale_log2, n >= n_mask_from, n * BLOCK_N,
                                                row_visible);
      rescale_and_pack(S);
      turn.begin();
      issue_pv(n, 0);
      turn.end();
      pv_done(n);
    }
  }

  // ---- epilogue: rung 10's, with V's descale and P's shift undone -------------------------------
  const float v_descale = p.v_descale[scale_idx];
  const float lse_shift = static_cast<float>(P_SHIFT) * 0.69314718055994531f;  // P_SHIFT ln 2
  T* O_gmem = static_cast<T*>(p.o) + batch * p.o_batch_stride + head * p.o_head_stride;
  float* lse_gmem = p.lse + (static_cast<int64_t>(batch) * p.heads_q + head) * p.seqlen_q;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float l = ptx::quad_sum(l_i[h]);
    const float out_scale = (l > 0.f) ? v_descale / l : 0.f;
    const int row = row0 + 64 * c + 16 * warp + g + 8 * h;
    if (row >= p.seqlen_q) continue;
    T* o_row = O_gmem + row * p.o_row_stride;
#pragma unroll
    for (int j = 0; j < D / 8; ++j)
      *reinterpret_cast<uint32_t*>(o_row + 8 * j + 2 * t) =
          pack2<T>(O_acc[4 * j + 2 * h] * out_scale, O_acc[4 * j + 2 * h + 1] * out_scale);
    if (t == 0)
      lse_gmem[row] = (l > 0.f) ? m_i[h] * p.softmax_scale * qk_descale + logf(l) - lse_shift : -INFINITY;
  }
}

// ---- host side ----------------------------------------------------------------------------------

template <class T, class Cfg, int P_SHIFT, bool PROMOTE, int POLY>
const void* prepared_kernel() {
  static const bool once = [] {
    FL_CUDA_CHECK(cudaFuncSetAttribute(fp8_fwd_kernel<T, Cfg, P_SHIFT, PROMOTE, POLY>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes));
    return true;
  }();
  (void)once;
  return reinterpret_cast<const void*>(&fp8_fwd_kernel<T, Cfg, P_SHIFT, PROMOTE, POLY>);
}

/// The three maps: e4m3 Q and K ([batch, seqlen, heads, d], boxes of SWQ bytes x rows) and V^T
/// ([batch, heads_kv, d, vt_seqlen], boxes of SWV keys x d rows).
template <class T, class Cfg, int P_SHIFT, bool PROMOTE, int POLY>
void launch_fp8(const AttnParams& p, cudaStream_t stream) {
  prepared_kernel<T, Cfg, P_SHIFT, PROMOTE, POLY>();
  constexpr int D = Cfg::kHeadDim;
  const uint64_t d = D;
  const CUtensorMap map_q = make_tma_map_u8(
      p.q, {d, uint64_t(p.heads_q), uint64_t(p.seqlen_q), uint64_t(p.batch)},
      {uint64_t(p.q_head_stride), uint64_t(p.q_row_stride), uint64_t(p.q_batch_stride)},
      {uint32_t(Cfg::kSwizzleQK), 1u, uint32_t(Cfg::kBlockM), 1u}, Cfg::kSwizzleQK);
  const CUtensorMap map_k = make_tma_map_u8(
      p.k, {d, uint64_t(p.heads_kv), uint64_t(p.seqlen_k), uint64_t(p.batch)},
      {uint64_t(p.k_head_stride), uint64_t(p.k_row_stride), uint64_t(p.k_batch_stride)},
      {uint32_t(Cfg::kSwizzleQK), 1u, uint32_t(Cfg::kBlockN), 1u}, Cfg::kSwizzleQK);
  const uint64_t vt = uint64_t(p.vt_seqlen);
  const CUtensorMap map_vt = make_tma_map_u8(p.v, {vt, d, uint64_t(p.heads_kv), uint64_t(p.batch)},
                                             {vt, vt * d, vt * d * uint64_t(p.heads_kv)},
                                             {uint32_t(Cfg::kSwizzleV), uint32_t(D), 1u, 1u}, Cfg::kSwizzleV);
  const dim3 grid((p.seqlen_q + Cfg::kBlockM - 1) / Cfg::kBlockM, p.heads_q, p.batch);
  fp8_fwd_kernel<T, Cfg, P_SHIFT, PROMOTE, POLY><<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(map_q, map_k, map_vt, p);
  FL_LAUNCH_CHECK("fp8_fwd_kernel");
}

template <class Cfg, int P_SHIFT, bool PROMOTE, int POLY>
std::string tile_label() {
  return "fp8_fwd<d=" + std::to_string(Cfg::kHeadDim) + ", " + std::to_string(Cfg::kBlockM) + "x" +
         std::to_string(Cfg::kBlockN) + ", e4m3, " + std::to_string(Cfg::kStages) + " stages, P x 2^" +
         std::to_string(P_SHIFT) + (PROMOTE ? ", P V summed in fp32" : ", P V in the tensor core's accumulator") +
         (POLY ? ", " + std::to_string(POLY) + "/4 of exp2 on the FMA pipe" : "") + ">";
}

}  // namespace fl::hopper13
