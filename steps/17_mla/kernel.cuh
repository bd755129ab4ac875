/// @file steps/17_mla/kernel.cuh
/// @brief Rung 17: multi-head latent attention (MLA) decode on the compressed cache, after
/// DeepSeek-V2 (2024) and FlashMLA. One CTA = one tile of 64 query rows (seqlen_q x heads of
/// one sequence) against one split of the keys, 64 keys (one page) per block:
///
/// @code
///   // clang-format off
///   warpgroup 0  S = Q K^T (64 x 64 over 576: 36 wgmma k-steps, each column block as soon as
///                its TMA box lands), online softmax (rung 10's), P -> shared memory (16-bit),
///                the rows' rescale factors alpha -> shared memory          "P ready" ->
///   warpgroups   wait "P ready"; O *= alpha; O += P V for columns 0-255 (warpgroup 1) or
///   1 and 2      256-511 (warpgroup 2), V = the K tile's first 512 columns; "P free" ->
///                warpgroup 1's first thread refills the stage with the block two ahead
///   // clang-format on
/// @endcode
///
/// What is new against rung 10 (whose softmax this rung calls):
/// - **V is K.** The values are the cache row's first 512 columns, read from the K tile already
///   in shared memory: the cache is read once, 1152 bytes per key, for every head.
/// - **Heads are rows.** All heads of a token share the cache row, so a tile's 64 rows are
///   (query, head) pairs of one sequence (row r = query r / heads, head r % heads): a decode
///   step of 128 heads fills two wgmma tiles, where rung 08 had 1-16 rows per KV head.
/// - **The V dimension is split across warpgroups.** O is 64 x 512 fp32: 256 registers per
///   thread for one warpgroup, more than it has. Two warpgroups own 256 columns each (128
///   registers), and S moves to a third, which hands P over through shared memory (FlashMLA
///   splits O the same way). Warpgroup 0's S of block n + 1 runs under the others' P V of block n.
/// - **Pages are TMA boxes.** A block of 64 keys is one page of the pool (or 64 rows of a
///   contiguous cache): nine 8 KB boxes through the block table, each on its own barrier.
/// - Split-KV with rung 08's log-sum-exp combine when the batch is small.
#pragma once

#include <cuda.h>
#include <math.h>
#include <stdint.h>

#include <stdexcept>
#include <string>

#include "../08_flash_decoding/kernel.cuh"      // combine_splits, SplitArgs (rung 08's combine)
#include "../10_warp_specialized/kernel.cuh"    // softmax_block (rung 10's online softmax)
#include "flashladder/cuda_check.h"
#include "flashladder/dtype.cuh"
#include "flashladder/hopper.cuh"
#include "flashladder/problem.h"
#include "flashladder/ptx.cuh"
#include "flashladder/tma.h"
#include "mla_plan.h"

namespace fl::mla {

using namespace fl::hopper;
namespace wg = fl::wgmma;

/// Named barriers (0 is __syncthreads'), each a full barrier of all 384 threads: kPReady when P
/// and alpha (at the end: l and m) are in shared memory, kPFree when warpgroups 1-2's O += P V of
/// a block has read them and warpgroup 0 may overwrite them. Both sides sync (no bar.arrive): the
/// side that waits anyway loses nothing, since warpgroups 1-2 reach kPFree(n) and kPReady(n + 1)
/// back to back, and warpgroup 0 reaches kPReady(n) right after kPFree(n - 1). compute-sanitizer's
/// racecheck found the alpha hand-off racy with bar.arrive on the consumers' side.
constexpr uint32_t kPReady = 1;
constexpr uint32_t kPFree = 2;
/// Per-warpgroup barrier of warpgroups 1 and 2 (ids 3 and 4, 128 threads): their tail rows of V
/// are zeroed before their wgmma reads them.
constexpr uint32_t kTailZeroed = 3;

/// The descriptor of k-step @p kk of a K-major operand whose tile (@p rows high, 64-column
/// blocks of 128-byte rows) starts at @p base: Q, K and P here.
__device__ __forceinline__ uint64_t desc_kmajor_sw128_at(uint32_t base, uint32_t rows, int kk) {
  return wg::desc_kmajor_sw128(base + wg::sw128_kmajor_offset(rows, 0, static_cast<uint32_t>(kk)));
}

/// The block's shared memory: Q, the two K stages, P, the row statistics, the barriers.
struct MlaSmem {
  uint32_t Q_s;     ///< 64 rows x 576: nine column blocks of 64 rows x 128 B
  uint32_t K_s;     ///< stage s at K_s + s * kTileBytes, laid out as Q
  uint32_t P_s;     ///< 64 rows x 64 keys, 16-bit, one 128B-swizzled column block
  float* alpha;     ///< [64]: the rows' O rescale factor of the current block
  float* row_l;     ///< [64]: the rows' softmax denominators, after the last block
  float* row_m;     ///< [64]: the rows' running maxima (raw scores), after the last block
  uint32_t bar0;    ///< "landed" barriers: stage s, column block cb at bar0 + 8 (s * 9 + cb)

  __device__ __forceinline__ explicit MlaSmem(uint8_t* smem_raw) {
    const uint32_t raw = smem_addr(smem_raw);
    Q_s = (raw + 1023u) & ~1023u;
    K_s = Q_s + kTileBytes;
    P_s = K_s + kStages * kTileBytes;
    uint8_t* stats = smem_raw + (P_s + kPBytes - raw);
    alpha = reinterpret_cast<float*>(stats);
    row_l = alpha + kBlockM;
    row_m = row_l + kBlockM;
    bar0 = P_s + kPBytes + 3 * kBlockM * 4;
  }
  __device__ __forceinline__ uint32_t k_full(int s, int cb) const { return bar0 + 8u * (s * kColBlocks + cb); }
  /// "Empty": warpgroups 1 and 2 arrive once their O += P V has read the stage.
  __device__ __forceinline__ uint32_t k_empty(int s) const { return bar0 + 8u * (kStages * kColBlocks + s); }
};

/// Where the CTA's keys are: its sequence's length, its split's first key and its blocks.
struct KeyRange {
  int len_k;     ///< keys of the sequence (cache_seqlens)
  int key0;      ///< first key of the split (a multiple of 64)
  int n_blocks;  ///< 64-key blocks this CTA attends to (0: none; O = 0, LSE = -inf)
};

/// The TMA copies of one K block: nine boxes of 64 keys x 64 columns, through the block table
/// when the cache is paged (a page of page_size keys holds page_size / 64 blocks).
struct KLoads {
  const CUtensorMap* map;
  const int* table;  ///< this sequence's row of the block table (paged), else null
  int page_size, batch;

  __device__ __forceinline__ void issue(const MlaSmem& sm, int stage, int key) const {
    int page = batch, row = key;  // contiguous: (batch, key) of [batch, seqlen_k, 1, 576]
    if (table != nullptr) {
      page = table[key / page_size];
      row = key % page_size;
    }
    const uint32_t dst = sm.K_s + stage * kTileBytes;
#pragma unroll
    for (int cb = 0; cb < kColBlocks; ++cb) {
      mbarrier_arrive_expect_tx(sm.k_full(stage, cb), kBlockN * 128);
      tma_load_4d(dst + cb * kBlockN * 128, map, sm.k_full(stage, cb), 64 * cb, 0, row, page);
    }
  }
};

/// Q's 64 rows of this tile into Q_s, 16 bytes per thread and step, in the 128B swizzle TMA would
/// have written (rows of the tile past seqlen_q x heads are zeros). Plain loads: a tile's rows are
/// (query, head) pairs, which no TMA box of [batch, seqlen_q, heads, 576] covers when heads < 64.
template <class T>
__device__ __forceinline__ void load_q(const AttnParams& p, uint32_t Q_s, int batch, int row0, int rows) {
  constexpr int kChunks = kHeadDim / 8;  // 16-byte chunks per row
  const T* q = static_cast<const T*>(p.q) + static_cast<int64_t>(batch) * p.q_batch_stride;
  for (int idx = threadIdx.x; idx < kBlockM * kChunks; idx += kThreads) {
    const int r = idx / kChunks, c = idx % kChunks;
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    if (row0 + r < rows) {
      const int i = (row0 + r) / p.heads_q, h = (row0 + r) % p.heads_q;
      v = *reinterpret_cast<const uint4*>(q + i * p.q_row_stride + h * p.q_head_stride + 8 * c);
    }
    const uint32_t off = (c / 8) * kBlockM * 128 + wg::sw128(static_cast<uint32_t>(r * 128 + (c % 8) * 16));
    asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(Q_s + off), "r"(v.x), "r"(v.y), "r"(v.z),
                 "r"(v.w)
                 : "memory");
  }
}

/// The kernel. Grid: (row tiles, splits, batch); 384 threads; one CTA per SM (227 KB).
template <class T>
__global__ void __launch_bounds__(kThreads, 1)
    mla_decode_kernel(const __grid_constant__ CUtensorMap map_k, const AttnParams p, const MlaPlan plan,
                      const decode::SplitArgs split) {
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const MlaSmem sm(smem_raw);
  const int tile = blockIdx.x, sp = blockIdx.y, batch = blockIdx.z;
  const int tid = threadIdx.x;
  const int wg_idx = warpgroup_index();
  const int row0 = tile * kBlockM;

  // ---- the CTA's keys ---------------------------------------------------------------------------
  // Row r sees keys [0, len_k - seqlen_q + r / heads] under the causal mask (bottom-right
  // aligned), all len_k without it; the tile needs keys up to its last row's bound.
  KeyRange kr;
  kr.len_k = p.seqused_k != nullptr ? p.seqused_k[batch] : p.seqlen_k;
  const int last_row = min(row0 + kBlockM, plan.rows) - 1;
  const int tile_end =
      p.causal ? max(0, min(kr.len_k, kr.len_k - p.seqlen_q + last_row / p.heads_q + 1)) : kr.len_k;
  kr.key0 = sp * plan.split_len;
  const int split_end = min(tile_end, kr.key0 + plan.split_len);
  kr.n_blocks = split_end > kr.key0 ? (split_end - kr.key0 + kBlockN - 1) / kBlockN : 0;

  const KLoads loads{&map_k, p.block_table != nullptr ? p.block_table + static_cast<int64_t>(batch) * p.block_table_stride
                                                      : nullptr,
                     p.page_size, batch};

  if (tid == 0) {
    tma_prefetch_map(&map_k);
    for (int s = 0; s < kStages; ++s) {
      for (int cb = 0; cb < kColBlocks; ++cb) mbarrier_init(sm.k_full(s, cb), 1);
      mbarrier_init(sm.k_empty(s), 2);  // warpgroups 1 and 2
    }
    fence_mbarrier_init();
  }
  __syncthreads();
  if (tid == 0)  // the first two blocks, while everyone loads Q
    for (int n = 0; n < min(kStages, kr.n_blocks); ++n) loads.issue(sm, n, kr.key0 + n * kBlockN);
  load_q<T>(p, sm.Q_s, batch, row0, plan.rows);
  fence_proxy_async_smem();  // Q's generic stores, before wgmma reads them
  __syncthreads();

  const int warp = (tid % kWarpgroupThreads) / 32;
  const int lane = tid % 32;
  const int g = lane / 4, t = lane % 4;

  if (wg_idx == 0) {
    // ---- warpgroup 0: S = Q K^T, the online softmax, P ------------------------------------------
    int row_visible[2];  // keys each of this thread's rows sees, minus its lane's column (rung 10)
    int min_visible = kr.len_k;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = row0 + 16 * warp + g + 8 * h;
      const int vis = p.causal ? max(0, min(kr.len_k, kr.len_k - p.seqlen_q + min(r, plan.rows - 1) / p.heads_q + 1))
                               : kr.len_k;
      row_visible[h] = vis - 2 * t;
    }
    if (p.causal) min_visible = max(0, kr.len_k - p.seqlen_q + (row0 / p.heads_q) + 1);
    float m_i[2] = {-INFINITY, -INFINITY}, l_i[2] = {0.f, 0.f}, alpha[2];
#pragma unroll 1
    for (int n = 0; n < kr.n_blocks; ++n) {
      const int s = n % kStages;
      const uint32_t parity = (n / kStages) & 1;
      const int key_base = kr.key0 + n * kBlockN;
      float S[kBlockN / 2];
      // LAB-BEGIN(17-scores): S = Q K^T over 576 dims, each column block as soon as it lands
      wgmma_fence_operand(S);
      wgmma_fence();
#pragma unroll
      for (int cb = 0; cb < kColBlocks; ++cb) {
        mbarrier_wait_parity(sm.k_full(s, cb), parity);
#pragma unroll
        for (int k4 = 0; k4 < 4; ++k4) {
          const int kk = 4 * cb + k4;
          wgmma_ss<T, kBlockN>(S, desc_kmajor_sw128_at(sm.Q_s, kBlockM, kk), desc_kmajor_sw128_at(sm.K_s + s * kTileBytes, kBlockN, kk),
                               kk > 0);
        }
      }
      wgmma_commit();
      wgmma_wait<0>();
      wgmma_fence_operand(S);
      // LAB-END(17-scores)
      // Keys past the rows' bounds (the causal diagonal, the cache's end) are masked: the last
      // blocks, from the first one that reaches past the tile's smallest bound.
      const bool mask = key_base + kBlockN > min_visible;
      hopper10::softmax_block<kBlockN>(S, m_i, l_i, alpha, p.scale_log2, mask, key_base, row_visible);
      if (n > 0) named_barrier_sync(kPFree, kThreads);  // O += P V of block n - 1 has read P
      // LAB-BEGIN(17-p-handoff): P and the rescale factors to shared memory for warpgroups 1-2
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = 16 * warp + g + 8 * h;
#pragma unroll
        for (int j = 0; j < kBlockN / 8; ++j) {
          const uint32_t off = wg::sw128(static_cast<uint32_t>(r * 128 + (8 * j + 2 * t) * 2));
          const uint32_t pair = pack2<T>(S[4 * j + 2 * h], S[4 * j + 2 * h + 1]);
          asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(sm.P_s + off), "r"(pair) : "memory");
        }
        if (t == 0) sm.alpha[r] = alpha[h];
      }
      fence_proxy_async_smem();  // P's generic stores, before the other warpgroups' wgmma read it
      named_barrier_sync(kPReady, kThreads);
      // LAB-END(17-p-handoff)
    }
    // The rows' denominators and maxima for the epilogue, then the LSE (or the split's).
    if (kr.n_blocks > 0) named_barrier_sync(kPFree, kThreads);  // the last block's P V read alpha
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = 16 * warp + g + 8 * h;
      const float l = ptx::quad_sum(l_i[h]);
      if (t == 0) {
        sm.row_l[r] = l;
        sm.row_m[r] = m_i[h];
      }
      const int row = row0 + r;
      if (t == 0 && row < plan.rows) {
        const int i = row / p.heads_q, hq = row % p.heads_q;
        const float lse = (l > 0.f) ? m_i[h] * p.softmax_scale + logf(l) : -INFINITY;
        const int64_t out = decode::out_row(p, batch, hq, i);
        if (split.num_splits > 1) split.lse_part[out * split.num_splits + sp] = lse;
        else p.lse[out] = lse;
      }
    }
    named_barrier_sync(kPReady, kThreads);
    return;
  }

  // ---- warpgroups 1 and 2: O += P V, 256 columns each -------------------------------------------
  const int half = wg_idx - 1;
  const bool leader = (tid % kWarpgroupThreads) == 0;
  float O[kHeadDimV / 4];  // 64 rows x 256 columns: 128 fp32 per thread
#pragma unroll
  for (int i = 0; i < kHeadDimV / 4; ++i) O[i] = 0.f;
#pragma unroll 1
  for (int n = 0; n < kr.n_blocks; ++n) {
    const int s = n % kStages;
    const uint32_t parity = (n / kStages) & 1;
    const int key_base = kr.key0 + n * kBlockN;
    named_barrier_sync(kPReady, kThreads);
#pragma unroll
    for (int cb = 0; cb < kVColBlocks / 2; ++cb) mbarrier_wait_parity(sm.k_full(s, 4 * half + cb), parity);
    // LAB-BEGIN(17-v-split): this warpgroup's half of O, rescaled, then O += P V[:, half]
    const float a0 = sm.alpha[16 * warp + g], a1 = sm.alpha[16 * warp + g + 8];
#pragma unroll
    for (int j = 0; j < kHeadDimV / 16; ++j) {
      O[4 * j] *= a0;
      O[4 * j + 1] *= a0;
      O[4 * j + 2] *= a1;
      O[4 * j + 3] *= a1;
    }
    const uint32_t V_s = sm.K_s + s * kTileBytes + half * (kVColBlocks / 2) * kBlockN * 128;
    if (key_base + kBlockN > kr.len_k) {
      // The cache's last block: rows past its end hold whatever the pool holds there (NaN is
      // possible, and 0 x NaN is NaN): zero them in this warpgroup's four column blocks.
      const int valid = kr.len_k - key_base;
      for (int idx = tid % kWarpgroupThreads; idx < (kVColBlocks / 2) * kBlockN * 8; idx += kWarpgroupThreads) {
        const int cb = idx / (kBlockN * 8), row = (idx / 8) % kBlockN, chunk = idx % 8;
        if (row >= valid)
          asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(V_s + cb * kBlockN * 128 + row * 128 + chunk * 16),
                       "r"(0u)
                       : "memory");
      }
      fence_proxy_async_smem();
      named_barrier_sync(kTailZeroed + half, kWarpgroupThreads);
    }
    wgmma_fence_operand(O);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk)
      wgmma_ss<T, kHeadDimV / 2, 1>(O, desc_kmajor_sw128_at(sm.P_s, kBlockM, kk),
                                    wg::desc_mnmajor_sw128(V_s + wg::sw128_mnmajor_offset(kBlockN, 0, kk), kBlockN), 1);
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_fence_operand(O);
    // LAB-END(17-v-split)
    if (leader) mbarrier_arrive(sm.k_empty(s));
    // The stage is free once both halves have read it: warpgroup 1's first thread refills it
    // with the block two ahead (warpgroup 0 read its K for S long before), before the barrier.
    if (half == 0 && leader && n + kStages < kr.n_blocks) {
      mbarrier_wait_parity(sm.k_empty(s), parity);
      loads.issue(sm, s, key_base + kStages * kBlockN);
    }
    __syncwarp();  // the leader rejoins its warp before the named barrier (bar.sync is aligned)
    named_barrier_sync(kPFree, kThreads);
  }

  // ---- epilogue: O / l, 16-bit (one split) or the split's normalized fp32 partial ----------------
  named_barrier_sync(kPReady, kThreads);  // l and m of every row are in shared memory
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int r = 16 * warp + g + 8 * h;
    const int row = row0 + r;
    if (row >= plan.rows) continue;
    const float l = sm.row_l[r];
    const float inv_l = (l > 0.f) ? 1.f / l : 0.f;
    const int i = row / p.heads_q, hq = row % p.heads_q;
    const int col0 = half * (kHeadDimV / 2) + 2 * t;
    if (split.num_splits > 1) {
      float* o = split.o_part + (decode::out_row(p, batch, hq, i) * split.num_splits + sp) * kHeadDimV + col0;
#pragma unroll
      for (int j = 0; j < kHeadDimV / 16; ++j)
        *reinterpret_cast<float2*>(o + 8 * j) = make_float2(O[4 * j + 2 * h] * inv_l, O[4 * j + 2 * h + 1] * inv_l);
    } else {
      T* o = static_cast<T*>(p.o) + static_cast<int64_t>(batch) * p.o_batch_stride + static_cast<int64_t>(i) * p.o_row_stride +
             static_cast<int64_t>(hq) * p.o_head_stride + col0;
#pragma unroll
      for (int j = 0; j < kHeadDimV / 16; ++j)
        *reinterpret_cast<uint32_t*>(o + 8 * j) = pack2<T>(O[4 * j + 2 * h] * inv_l, O[4 * j + 2 * h + 1] * inv_l);
    }
  }
}

// ---- host side ----------------------------------------------------------------------------------

template <class T>
const void* prepared_kernel() {
  static const bool once = [] {
    FL_CUDA_CHECK(cudaFuncSetAttribute(mla_decode_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes));
    return true;
  }();
  (void)once;
  return reinterpret_cast<const void*>(&mla_decode_kernel<T>);
}

/// The K map: a contiguous cache [batch, seqlen_k, 1, 576] (box: 64 keys of one sequence; rows
/// past seqlen_k read as zeros), or the page pool [num_pages, page_size, 1, 576] (box: 64 rows
/// of one page).
inline CUtensorMap make_k_map(const AttnParams& p) {
  const DType dt = static_cast<DType>(p.dtype);
  if (p.page_size > 0) {
    const int pages = p.num_pages > 0 ? p.num_pages : p.batch * p.block_table_stride;
    return make_tma_map_bshd(dt, p.k, pages, p.page_size, 1, kHeadDim, static_cast<int64_t>(p.page_size) * p.k_row_stride,
                             p.k_row_stride, p.k_head_stride, kBlockN);
  }
  return make_tma_map_bshd(dt, p.k, p.batch, p.seqlen_k, 1, kHeadDim, p.k_batch_stride, p.k_row_stride, p.k_head_stride,
                           kBlockN);
}

/// The decode: kernel 1 (one CTA per row tile, split and sequence), then rung 08's combine when
/// the keys are split.
template <class T>
void launch_mla(const AttnParams& p, const MlaPlan& plan, cudaStream_t stream) {
  prepared_kernel<T>();
  const CUtensorMap map_k = make_k_map(p);
  decode::SplitArgs split{plan.rows, plan.num_splits, plan.split_len, nullptr, nullptr};
  if (plan.num_splits > 1) {
    const size_t need = mla_workspace_floats(plan, p.batch, p.heads_q, p.seqlen_q) * sizeof(float);
    if (p.workspace == nullptr || p.workspace_bytes < need)
      throw std::runtime_error("rung 17: the split plan needs " + std::to_string(need) + " bytes of workspace");
    split.o_part = static_cast<float*>(p.workspace);
    split.lse_part = split.o_part + static_cast<size_t>(p.batch) * p.heads_q * p.seqlen_q * plan.num_splits * kHeadDimV;
  }
  const dim3 grid(plan.row_tiles, plan.num_splits, p.batch);
  mla_decode_kernel<T><<<grid, kThreads, kSmemBytes, stream>>>(map_k, p, plan, split);
  FL_LAUNCH_CHECK("mla_decode_kernel");
  if (plan.num_splits > 1) {
    const int rows = p.batch * p.heads_q * p.seqlen_q;
    decode::combine_splits<T, kHeadDimV><<<rows, decode::CombineTraits<kHeadDimV>::kThreads, 0, stream>>>(p, split);
    FL_LAUNCH_CHECK("combine_splits");
  }
}

}  // namespace fl::mla
