/// @file steps/09_wgmma_tma/kernel.cuh
/// @brief Rung 09: rung 06's FlashAttention-2 algorithm on Hopper's two new engines, and
/// nothing else: K/V tiles arrive through the tensor memory accelerator (TMA) into a ring of
/// shared-memory stages that completes on mbarriers, and both GEMMs run on the asynchronous
/// warpgroup MMA (wgmma.mma_async).
///
/// @code
///   // clang-format off
///   HBM ──TMA (one thread, 128B swizzle, zero fill past seqlen)──> smem ring: Q | K[s] | V[s]
///                                     │ complete_tx on mbarrier k_full[s] / v_full[s]
///                                     v
///   wgmma SS:  S(64 x BLOCK_N, fp32 regs) = Q_wg (smem) · K[s]^T (smem)       per warpgroup
///   softmax on the S registers (rung 05's code) ──> P (16-bit regs, the A fragment as is)
///   wgmma RS:  O(64 x d, fp32 regs) += P (regs) · V[s] (smem, MN-major: trans-b)
///   __syncthreads ──> thread 0 refills stage s with block n + STAGES
///   // clang-format on
/// @endcode
///
/// What is the same as rung 05/06: one block per (Q tile, head, batch), the online softmax
/// with exp2 and the FA2 rescale of O, 1 / l once at the end, the LSE, causal blocks above the
/// diagonal never loaded and masks only where a block crosses the diagonal or the seqlen_k tail,
/// GQA by indexing the KV head. What is new, one engine at a time:
/// - **TMA** replaces every thread's cp.async: one thread issues one `cp.async.bulk.tensor`
///   per 64-column block of a tile, the copy engine computes the addresses, swizzles the rows
///   and writes zeros for rows past seqlen (no padding, no per-thread bounds checks). The
///   tile's arrival is an mbarrier phase, not a cp.async group.
/// - **wgmma** replaces mma.sync + ldmatrix: four warps issue one instruction for a 64 x N x 16
///   product whose operands the tensor cores read from shared memory themselves (descriptors,
///   wgmma_desc.h), and whose accumulators land in the same per-warp fragment layout mma.sync
///   used, so the softmax code and P-in-registers carry over unchanged.
/// Rung 10 then splits producer and consumers and overlaps softmax with the GEMMs.
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
#include "flashladder/ptx.cuh"
#include "flashladder/tma.h"
#include "traits.h"

namespace fl::hopper09 {

using namespace fl::hopper;
namespace wg = fl::wgmma;

/// The forward kernel. Grid: (ceil(seqlen_q / BLOCK_M), heads_q, batch); Cfg::kThreads threads
/// (Cfg::kWarpgroups warpgroups); Cfg::kSmemBytes of dynamic shared memory. The tensor maps are
/// kernel parameters (`__grid_constant__`: the TMA unit reads them where the launch put them).
template <class T, class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    wgmma_tma_fwd_kernel(const __grid_constant__ CUtensorMap map_q,
                         const __grid_constant__ CUtensorMap map_k,
                         const __grid_constant__ CUtensorMap map_v, const AttnParams p) {
  static_assert(Cfg::kHeadDimV == Cfg::kHeadDim, "rung 09 reads V on K's tiles");
  constexpr int D = Cfg::kHeadDim;
  constexpr int BLOCK_M = Cfg::kBlockM;
  constexpr int BLOCK_N = Cfg::kBlockN;
  constexpr int STAGES = Cfg::kStages;
  constexpr int QK_STEPS = D / 16;       // k-steps of S = Q K^T (wgmma k = 16)
  constexpr int PV_STEPS = BLOCK_N / 16;  // k-steps of O += P V
  constexpr int S_REGS = BLOCK_N / 2;     // S accumulator registers per thread
  constexpr int O_REGS = D / 2;           // O accumulator registers per thread

  const int m_block = static_cast<int>(gridDim.x - 1 - blockIdx.x);  // heavy (causal) tiles first
  const int head = blockIdx.y;
  const int batch = blockIdx.z;
  const int kv_head = head / p.group;
  const int tid = threadIdx.x;
  const int wg_idx = warpgroup_index();       // this warpgroup's 64 rows: 64 wg_idx ..
  const int warp = (tid % kWarpgroupThreads) / 32;  // warp in the warpgroup: 16 of those rows
  const int lane = tid % 32;
  const int g = lane / 4;  // accumulator row (and row + 8) of this lane
  const int t = lane % 4;  // accumulator column pair

  const int row0 = m_block * BLOCK_M;
  const int q_rows = min(BLOCK_M, p.seqlen_q - row0);

  // ---- the K/V blocks this Q tile visits (rung 05's rule) ---------------------------------
  const KvBlocks kv_range = kv_blocks(p.seqlen_k, p.causal, p.causal_offset, row0, q_rows, BLOCK_N);
  const int n_blocks = kv_range.count;  // blocks n >= n_mask_from need the mask (rung 05)
  const int n_mask_from = kv_range.mask_from;

  // ---- shared memory: Q | K[0..STAGES) | V[0..STAGES) | mbarriers --------------------------
  // The launch asks for 1024 bytes more than the tiles: the base is rounded up to the swizzle
  // atom, so that TMA's 128B pattern and the descriptors' base offset 0 agree.
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const uint32_t Q_s = (smem_addr(smem_raw) + 1023u) & ~1023u;
  const uint32_t K_s = Q_s + Cfg::kQBytes;
  const uint32_t V_s = K_s + STAGES * Cfg::kKVBytes;
  const uint32_t bar_q = V_s + STAGES * Cfg::kKVBytes;
  auto k_full = [&](int s) { return bar_q + 8u * (1 + s); };
  auto v_full = [&](int s) { return bar_q + 8u * (1 + STAGES + s); };

  // One thread issues the loads of block n into stage s: per tile, arrive.expect_tx with the
  // tile's bytes, then one TMA per 64-column block (coordinates innermost first: column, head,
  // row, batch). K and V complete on separate barriers, so S = Q K^T can start before V lands.
  auto load_kv = [&](int n, int s) {
    // LAB-BEGIN(09-load-kv): expect_tx and the TMA loads of K_n and V_n into stage s
    // [same-code: 10-producer]
    const int key0 = n * BLOCK_N;
    mbarrier_arrive_expect_tx(k_full(s), Cfg::kKVBytes);
#pragma unroll
    for (int cb = 0; cb < Cfg::kColBlocks; ++cb)
      tma_load_4d(K_s + s * Cfg::kKVBytes + cb * BLOCK_N * 128, &map_k, k_full(s), 64 * cb,
                  kv_head, key0, batch);
    mbarrier_arrive_expect_tx(v_full(s), Cfg::kKVBytes);
#pragma unroll
    for (int cb = 0; cb < Cfg::kColBlocks; ++cb)
      tma_load_4d(V_s + s * Cfg::kKVBytes + cb * BLOCK_N * 128, &map_v, v_full(s), 64 * cb,
                  kv_head, key0, batch);
    // LAB-END(09-load-kv)
  };

  if (tid == 0) {
    tma_prefetch_map(&map_q);
    tma_prefetch_map(&map_k);
    tma_prefetch_map(&map_v);
    mbarrier_init(bar_q, 1);  // one arrival per phase: the arrive.expect_tx of thread 0
    for (int s = 0; s < STAGES; ++s) {
      mbarrier_init(k_full(s), 1);
      mbarrier_init(v_full(s), 1);
    }
    fence_mbarrier_init();
  }
  __syncthreads();  // everyone sees initialized barriers before waiting on them
  if (tid == 0) {
    // LAB-BEGIN(09-tma-prologue): Q once, then the first STAGES K/V blocks into the ring
    mbarrier_arrive_expect_tx(bar_q, Cfg::kQBytes);
#pragma unroll
    for (int cb = 0; cb < Cfg::kColBlocks; ++cb)
      tma_load_4d(Q_s + cb * BLOCK_M * 128, &map_q, bar_q, 64 * cb, head, row0, batch);
    for (int s = 0; s < STAGES && s < n_blocks; ++s) load_kv(s, s);
    // LAB-END(09-tma-prologue)
  }
  __syncwarp();

  // ---- registers: this thread's share of its warpgroup's 64 rows ---------------------------
  // Accumulator element 4j + 2h + e is row 16 warp + g + 8h, column 8j + 2t + e (hopper.cuh).
  float O_acc[O_REGS];
#pragma unroll
  for (int i = 0; i < O_REGS; ++i) O_acc[i] = 0.f;
  float m_i[2] = {-INFINITY, -INFINITY};  // running max of rows g and g + 8 (raw scores)
  float l_i[2] = {0.f, 0.f};              // running sum of exp, this lane's columns only
  const float scale_log2 = p.scale_log2;

  // Q is waited for even when no K/V block is visited: no TMA may still be writing into the
  // shared memory of a block that has exited.
  mbarrier_wait_parity(bar_q, 0);

#pragma unroll 1
  for (int n = 0; n < n_blocks; ++n) {
    const int s = n % STAGES;
    const uint32_t parity = (n / STAGES) & 1;  // the k-th use of stage s waits for phase k & 1
    const uint32_t K_j = K_s + s * Cfg::kKVBytes;
    const uint32_t V_j = V_s + s * Cfg::kKVBytes;

    float S_acc[S_REGS];
    // LAB-BEGIN(09-wgmma-qk): S = Q_wg K_j^T, both operands from shared memory (SS)
    mbarrier_wait_parity(k_full(s), parity);
    wgmma_fence_operand(S_acc);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < QK_STEPS; ++kk) {
      // Q: rows 64 wg_idx .. +63 of the Q tile; K: all BLOCK_N keys; both K-major, k-step kk.
      const uint64_t desc_q =
          wg::desc_kmajor_sw128(Q_s + wg::sw128_kmajor_offset(BLOCK_M, 64 * wg_idx, kk));
      const uint64_t desc_k = wg::desc_kmajor_sw128(K_j + wg::sw128_kmajor_offset(BLOCK_N, 0, kk));
      wgmma_ss<T, BLOCK_N>(S_acc, desc_q, desc_k, /*scale_d: first k-step overwrites=*/kk > 0);
    }
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_fence_operand(S_acc);
    // LAB-END(09-wgmma-qk)

    // Masks where needed (rung 05's rule): the causal diagonal and the seqlen_k tail.
    if (n >= n_mask_from) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int row = row0 + 64 * wg_idx + 16 * warp + g + 8 * h;
        const int visible = (p.causal ? min(p.seqlen_k, row + p.causal_offset + 1) : p.seqlen_k) -
                            n * BLOCK_N - 2 * t;
#pragma unroll
        for (int j = 0; j < BLOCK_N / 8; ++j)
#pragma unroll
          for (int e = 0; e < 2; ++e)
            if (8 * j + e >= visible) S_acc[4 * j + 2 * h + e] = -INFINITY;
      }
    }

    // Online softmax on the S registers, as in rung 05 (rows g and g + 8; a row's 4 lanes
    // form a quad), then P packed to 16 bits: columns 16kk .. 16kk+15 of S are the A fragment
    // of k-step kk of O += P V, register for register.
    uint32_t P_frag[PV_STEPS][4];
    // LAB-BEGIN(09-online-softmax): rung 05's online softmax on the wgmma accumulators
    // [copy-of: 05-online-softmax]
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float m_blk = -INFINITY;
#pragma unroll
      for (int j = 0; j < BLOCK_N / 8; ++j)
        m_blk = fmaxf(m_blk, fmaxf(S_acc[4 * j + 2 * h], S_acc[4 * j + 2 * h + 1]));
      const float m_new = fmaxf(m_i[h], ptx::quad_max(m_blk));
      const float m_scaled = (m_new == -INFINITY) ? 0.f : m_new * scale_log2;
      const float alpha = ptx::ex2_approx(m_i[h] * scale_log2 - m_scaled);
      m_i[h] = m_new;
      float l_blk = 0.f;
#pragma unroll
      for (int j = 0; j < BLOCK_N / 8; ++j)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& x = S_acc[4 * j + 2 * h + e];
          x = ptx::ex2_approx(fmaf(x, scale_log2, -m_scaled));
          l_blk += x;
        }
      l_i[h] = l_i[h] * alpha + l_blk;
#pragma unroll
      for (int j = 0; j < D / 8; ++j) {
        O_acc[4 * j + 2 * h] *= alpha;
        O_acc[4 * j + 2 * h + 1] *= alpha;
      }
    }
#pragma unroll
    for (int kk = 0; kk < PV_STEPS; ++kk)
#pragma unroll
      for (int i = 0; i < 4; ++i)
        P_frag[kk][i] = pack2<T>(S_acc[8 * kk + 2 * i], S_acc[8 * kk + 2 * i + 1]);
    // LAB-END(09-online-softmax)

    // LAB-BEGIN(09-wgmma-pv): O += P V_j, P from registers (RS), V MN-major in shared memory
    mbarrier_wait_parity(v_full(s), parity);
    wgmma_fence_operand(O_acc);
#pragma unroll
    for (int kk = 0; kk < PV_STEPS; ++kk) wgmma_fence_operand(P_frag[kk]);
    wgmma_fence();  // the rescaled O and the new P are written before the tensor cores read them
#pragma unroll
    for (int kk = 0; kk < PV_STEPS; ++kk) {
      // Keys 16kk .. 16kk+15 of V_j (its rows), all d columns: LBO steps over column blocks.
      const uint64_t desc_v =
          wg::desc_mnmajor_sw128(V_j + wg::sw128_mnmajor_offset(BLOCK_N, 0, kk), BLOCK_N);
      wgmma_rs<T, D, /*TRANS_B=*/1>(O_acc, P_frag[kk], desc_v, /*scale_d=*/1);
    }
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_fence_operand(O_acc);
#pragma unroll
    for (int kk = 0; kk < PV_STEPS; ++kk) wgmma_fence_operand(P_frag[kk]);
    // LAB-END(09-wgmma-pv)

    // Every warpgroup's wgmmas have read stage s (wait_group 0 above); after the barrier the
    // one producing thread may overwrite it with block n + STAGES. The TMA write (async proxy)
    // follows the completed wgmma reads (async proxy) of the same CTA: no proxy fence needed.
    __syncthreads();
    if (tid == 0 && n + STAGES < n_blocks) load_kv(n + STAGES, s);
    __syncwarp();
  }

  // ---- epilogue: O / l and the LSE, straight from registers (rows past seqlen_q skipped) ----
  T* O_gmem = static_cast<T*>(p.o) + batch * p.o_batch_stride + head * p.o_head_stride;
  float* lse_gmem = p.lse + (static_cast<int64_t>(batch) * p.heads_q + head) * p.seqlen_q;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const float l = ptx::quad_sum(l_i[h]);
    const float inv_l = (l > 0.f) ? 1.f / l : 0.f;  // a row that saw no key: O = 0
    const int row = row0 + 64 * wg_idx + 16 * warp + g + 8 * h;
    if (row >= p.seqlen_q) continue;
    T* o_row = O_gmem + row * p.o_row_stride;
    float* o32_row = o_fp32_row(p, batch, row, head);  // null unless a backward pass asked
#pragma unroll
    for (int j = 0; j < D / 8; ++j)
      store_o2<T>(o_row, o32_row, 8 * j + 2 * t, O_acc[4 * j + 2 * h] * inv_l, O_acc[4 * j + 2 * h + 1] * inv_l);
    if (t == 0) lse_gmem[row] = (l > 0.f) ? m_i[h] * p.softmax_scale + logf(l) : -INFINITY;
  }
}

// ---- host side ---------------------------------------------------------------------------

/// The kernel for (T, Cfg) with its dynamic shared-memory limit raised (once per process).
template <class T, class Cfg>
const void* prepared_kernel() {
  static const bool once = [] {
    FL_CUDA_CHECK(cudaFuncSetAttribute(wgmma_tma_fwd_kernel<T, Cfg>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       Cfg::kSmemBytes));
    return true;
  }();
  (void)once;
  return reinterpret_cast<const void*>(&wgmma_tma_fwd_kernel<T, Cfg>);
}

/// Builds the three tensor maps (Q boxes of BLOCK_M rows, K/V boxes of BLOCK_N rows) and
/// launches one block per (Q tile, query head, batch).
template <class T, class Cfg>
void launch_wgmma_tma(const AttnParams& p, cudaStream_t stream) {
  prepared_kernel<T, Cfg>();
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
  wgmma_tma_fwd_kernel<T, Cfg><<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(map_q, map_k,
                                                                                  map_v, p);
  FL_LAUNCH_CHECK("wgmma_tma_fwd_kernel");
}

/// "wgmma_tma_fwd<d=128, 128x128, 2 warpgroups, 2 stages>".
template <class Cfg>
std::string tile_label() {
  return "wgmma_tma_fwd<d=" + std::to_string(Cfg::kHeadDim) + ", " + std::to_string(Cfg::kBlockM) +
         "x" + std::to_string(Cfg::kBlockN) + ", " + std::to_string(Cfg::kWarpgroups) +
         (Cfg::kWarpgroups == 1 ? " warpgroup, " : " warpgroups, ") + std::to_string(Cfg::kStages) +
         (Cfg::kStages == 1 ? " stage>" : " stages>");
}

}  // namespace fl::hopper09
