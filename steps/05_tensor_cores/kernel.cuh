/// @file steps/05_tensor_cores/kernel.cuh
/// @brief Rung 05: rung 04's FlashAttention-2 algorithm on tensor cores.
///
/// The algorithm is unchanged: one thread block owns a Q tile Q_i and its
/// output O_i, loops over K_j / V_j blocks with the online softmax, keeps
/// O_i, m_i, l_i in registers and divides by l_i once at the end; warps split
/// the query rows. What changes is how the two matmuls are executed:
///
/// @code
///   // clang-format off
///   HBM ──cp.async──> smem (swizzled, STAGES-deep ring for K_j, V_j)
///                        │ ldmatrix           │ ldmatrix.trans
///                        v                    v
///   Q_i frags ──mma.sync──> S (fp32 regs) ──softmax──> P (16-bit regs) ──mma.sync──> O_i (fp32
///   regs)
///                                      same fragment layout: no shuffle, no smem round trip
///   // clang-format on
/// @endcode
///
/// - S = Q_i K_j^T and O_i += P V_j run on mma.sync.m16n8k16 (16-bit in, fp32
///   accumulate), fed by ldmatrix; V is loaded transposed by ldmatrix.trans.
/// - K_j / V_j arrive through cp.async in a STAGES-deep ring: while the warps
///   compute on block j, blocks j+1 ... j+STAGES-1 are in flight.
/// - Shared memory is XOR-swizzled (ptx::swizzle), so ldmatrix and the cp.async
///   stores are free of bank conflicts without padding.
/// - P never leaves registers: the fp32 S fragments are exponentiated, rounded
///   to 16 bits and reused directly as the A operand of the second MMA.
/// - Causal: blocks above the diagonal are never loaded; only the blocks that
///   cross the diagonal (or the seqlen_k tail) pay for the mask.
#pragma once

#include <math.h>
#include <stdint.h>

#include <string>

#include "flashladder/cuda_check.h"
#include "flashladder/dtype.cuh"
#include "flashladder/epilogue.cuh"
#include "flashladder/kv_blocks.h"
#include "flashladder/problem.h"
#include "flashladder/ptx.cuh"
#include "tile_config.h"

namespace fl::tc {

/// Rung 05's one-size tiles, for every head_dim: 64 query rows x 64 keys,
/// 4 warps (16 rows each, Q fragments kept in registers), K/V double-buffered.
/// Rung 06 replaces this with a choice per head_dim.
template <int HEAD_DIM>
using OneSizeTiles = TileConfig<HEAD_DIM, 64, 64, 4, 2, true>;

/// Copies a rows x HEAD_DIM tile from global memory (row pitch @p row_stride
/// elements) into swizzled shared memory with cp.async. Rows at or beyond
/// @p rows_valid (the seqlen tail) are zero-filled: src-size 0 reads nothing,
/// so no out-of-bounds access, and zeros cannot turn into NaN later (0 * NaN
/// garbage from uninitialized shared memory would).
template <class Cfg, int ROWS, class T>
__device__ __forceinline__ void load_tile_async(uint32_t tile_smem, const T* tile_gmem,
                                                int64_t row_stride, int rows_valid) {
  // Thread tid copies chunk tid % kChunksPerRow of rows tid / kChunksPerRow,
  // + kRowsPerPass, ...: a warp covers whole rows, consecutive in memory.
  constexpr int kRowsPerPass = Cfg::kThreads / Cfg::kChunksPerRow;
  constexpr int kElemsPerChunk = kChunkBytes / kElemBytes;
  static_assert(Cfg::kThreads % Cfg::kChunksPerRow == 0 && ROWS % kRowsPerPass == 0,
                "the tile must split evenly into 16-byte copies over the threads");
  const int row_first = static_cast<int>(threadIdx.x) / Cfg::kChunksPerRow;
  const int chunk = static_cast<int>(threadIdx.x) % Cfg::kChunksPerRow;
#pragma unroll
  for (int i = 0; i < ROWS / kRowsPerPass; ++i) {
    const int row = row_first + i * kRowsPerPass;
    const bool valid = row < rows_valid;
    const int src_row = valid ? row : 0;  // row 0 always exists; nothing is read from it
    ptx::cp_async_16(tile_smem + ptx::swizzle<Cfg::kRowBytes>(row, chunk),
                     tile_gmem + src_row * row_stride + chunk * kElemsPerChunk,
                     valid ? kChunkBytes : 0);
  }
}


/// The forward kernel. Grid: (ceil(seqlen_q / BLOCK_M), heads_q, batch);
/// Cfg::kThreads threads; Cfg::kSmemBytes of dynamic shared memory.
template <class T, class Cfg>
__global__ void __launch_bounds__(Cfg::kThreads) flash_fwd_tc_kernel(const AttnParams p) {
  constexpr int D = Cfg::kHeadDim;
  constexpr int BLOCK_M = Cfg::kBlockM;
  constexpr int BLOCK_N = Cfg::kBlockN;
  constexpr int STAGES = Cfg::kStages;
  constexpr int M_TILES = Cfg::kMTiles;     // 16-row MMA tiles per warp
  constexpr int N_TILES = BLOCK_N / kMmaN;  // 8-key tiles of S
  constexpr int D_TILES = D / kMmaN;        // 8-column tiles of O
  constexpr int D_STEPS = D / kMmaK;        // k-steps of S = Q K^T
  constexpr int N_STEPS = BLOCK_N / kMmaK;  // k-steps of O += P V
  constexpr int RB = Cfg::kRowBytes;

  // Heavier (later) Q blocks first: with a causal mask the last Q block does
  // the most work, and starting it early shortens the tail of the grid.
  const int m_block = static_cast<int>(gridDim.x - 1 - blockIdx.x);
  const int head = blockIdx.y;
  const int batch = blockIdx.z;
  const int kv_head = head / p.group;  // GQA: query heads h..h+group-1 share a KV head
  const int warp = threadIdx.x / kWarpSize;
  const int lane = threadIdx.x % kWarpSize;
  const int g = lane / 4;  // row of the MMA fragment this lane holds
  const int t = lane % 4;  // column pair of the MMA fragment

  const int row0 = m_block * BLOCK_M;
  const int q_rows = min(BLOCK_M, p.seqlen_q - row0);

  // ---- the K/V blocks this Q tile visits -------------------------------
  // Blocks [0, n_blocks) hold a key some row sees (with causal, the blocks wholly above the
  // last row's diagonal are skipped); blocks n >= n_mask_from need a mask: the partial
  // seqlen_k tail, and with causal every block that crosses the diagonal of row row0
  // (common/include/flashladder/kv_blocks.h, checked on the CPU against the mask itself).
  const KvBlocks kv_range = kv_blocks(p.seqlen_k, p.causal, p.causal_offset, row0, q_rows, BLOCK_N);
  const int n_blocks = kv_range.count;
  const int n_mask_from = kv_range.mask_from;

  // ---- pointers (64-bit: batch * stride can exceed 2^31) ----------------
  const T* Q_gmem = static_cast<const T*>(p.q) + batch * p.q_batch_stride + row0 * p.q_row_stride +
                    head * p.q_head_stride;
  const T* K_gmem =
      static_cast<const T*>(p.k) + batch * p.k_batch_stride + kv_head * p.k_head_stride;
  const T* V_gmem =
      static_cast<const T*>(p.v) + batch * p.v_batch_stride + kv_head * p.v_head_stride;

  // ---- shared memory: Q_i, then STAGES K_j buffers, then STAGES V_j ----
  extern __shared__ __align__(128) uint8_t smem[];
  const uint32_t Q_smem = ptx::smem_addr(smem);
  const uint32_t K_smem = Q_smem + Cfg::kQSmemBytes;
  const uint32_t V_smem = K_smem + STAGES * Cfg::kKVTileBytes;

  auto load_kv = [&](int n, int stage) {
    const int key0 = n * BLOCK_N;
    const int keys = min(BLOCK_N, p.seqlen_k - key0);
    load_tile_async<Cfg, BLOCK_N>(K_smem + stage * Cfg::kKVTileBytes,
                                  K_gmem + key0 * p.k_row_stride, p.k_row_stride, keys);
    load_tile_async<Cfg, BLOCK_N>(V_smem + stage * Cfg::kKVTileBytes,
                                  V_gmem + key0 * p.v_row_stride, p.v_row_stride, keys);
  };

  // Prologue: Q_i is one cp.async group, then one group per K/V block for the
  // first STAGES-1 blocks. Groups are committed even when empty so that
  // "wait until STAGES-2 are pending" always means "block n has landed".
  load_tile_async<Cfg, BLOCK_M>(Q_smem, Q_gmem, p.q_row_stride, q_rows);
  ptx::cp_async_commit();
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < n_blocks) load_kv(s, s);
    ptx::cp_async_commit();
  }

  // ---- per-lane ldmatrix offsets (swizzled, relative to a tile) ---------
  // A operand (Q): lanes 0-15 give rows 0-15 at chunk 0, lanes 16-31 the same
  // rows at chunk 1 -> registers a0..a3 of a 16x16 k-step.
  const uint32_t q_lane = ptx::swizzle<RB>(warp * Cfg::kWarpRows + lane % 16, lane / 16);
  // B operand (K, not transposed): lanes 0-7 keys 0-7 chunk 0, 8-15 keys 0-7
  // chunk 1, 16-23 keys 8-15 chunk 0, 24-31 keys 8-15 chunk 1 -> (b0, b1) of
  // the 8-key tile 2*nj and (b0, b1) of tile 2*nj+1.
  const uint32_t k_lane = ptx::swizzle<RB>(lane % 8 + (lane / 16) * 8, (lane / 8) % 2);
  // B operand (V, transposed): lanes 0-15 keys 0-15 at chunk 0, lanes 16-31
  // the same keys at chunk 1 -> (b0, b1) of dims 0-7 and of dims 8-15.
  const uint32_t v_lane = ptx::swizzle<RB>(lane % 16, lane / 16);

  // ---- registers: the FA2 state of this warp's rows ---------------------
  // Row r of m-tile mi is held by the quad g = r % 8 (r < 8: index 0, else 1).
  float O_acc[M_TILES][D_TILES][4];  // O_i, unnormalized, fp32
  float m_i[M_TILES][2];             // running max of the raw scores
  float l_i[M_TILES][2];             // running sum of exp, this lane's columns only
#pragma unroll
  for (int mi = 0; mi < M_TILES; ++mi) {
#pragma unroll
    for (int dt = 0; dt < D_TILES; ++dt)
#pragma unroll
      for (int e = 0; e < 4; ++e) O_acc[mi][dt][e] = 0.f;
    m_i[mi][0] = m_i[mi][1] = -INFINITY;
    l_i[mi][0] = l_i[mi][1] = 0.f;
  }

  // Q fragments are loaded once when they fit in registers (Cfg::kQInRegs).
  uint32_t Q_frag[Cfg::kQInRegs ? M_TILES : 1][Cfg::kQInRegs ? D_STEPS : 1][4];
  if constexpr (Cfg::kQInRegs) {
    ptx::cp_async_wait<STAGES - 1>();  // Q's group (the oldest) has landed
    __syncthreads();
#pragma unroll
    for (int mi = 0; mi < M_TILES; ++mi)
#pragma unroll
      for (int kk = 0; kk < D_STEPS; ++kk)
        ptx::ldmatrix_x4(Q_frag[mi][kk], Q_smem + mi * kMmaM * RB + (q_lane ^ (kk * 32)));
  }

  // log2(e) is folded into the scale: p = exp(scale*(s - m)) = 2^(s*scale_log2 - m*scale_log2).
  const float scale_log2 = p.scale_log2;

  for (int n = 0; n < n_blocks; ++n) {
    // Block n has landed (only the STAGES-2 newer groups may be pending), and
    // after the barrier every warp is done with the buffer block n-1 used...
    ptx::cp_async_wait<STAGES - 2>();
    __syncthreads();
    const int stage = n % STAGES;  // the ring buffer that holds block n
    // ...so that buffer can take block n + STAGES - 1.
    {
      const int n_next = n + STAGES - 1;
      if (n_next < n_blocks) load_kv(n_next, (stage + STAGES - 1) % STAGES);
      ptx::cp_async_commit();
    }
    const uint32_t K_j = K_smem + stage * Cfg::kKVTileBytes;
    const uint32_t V_j = V_smem + stage * Cfg::kKVTileBytes;

    float S_acc[M_TILES][N_TILES][4];  // this warp's rows of S_ij, fp32 accumulators
    // LAB-BEGIN(05-mma-qk): S = Q_i K_j^T with ldmatrix + mma.sync m16n8k16
#pragma unroll
    for (int mi = 0; mi < M_TILES; ++mi)
#pragma unroll
      for (int nt = 0; nt < N_TILES; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) S_acc[mi][nt][e] = 0.f;

          // With Q in shared memory the k-step loop is left rolled: fully unrolled,
          // ptxas hoists the ldmatrix of later k-steps and runs out of registers
          // (spills) at 32 rows per warp. With Q in registers kk must be a constant.
#pragma unroll(Cfg::kQInRegs ? D_STEPS : 1)
    for (int kk = 0; kk < D_STEPS; ++kk) {
      uint32_t a[M_TILES][4];
#pragma unroll
      for (int mi = 0; mi < M_TILES; ++mi) {
        if constexpr (Cfg::kQInRegs) {
#pragma unroll
          for (int r = 0; r < 4; ++r) a[mi][r] = Q_frag[mi][kk][r];
        } else {
          ptx::ldmatrix_x4(a[mi], Q_smem + mi * kMmaM * RB + (q_lane ^ (kk * 32)));
        }
      }
#pragma unroll
      for (int nj = 0; nj < BLOCK_N / 16; ++nj) {
        uint32_t b[4];  // (b0, b1) of key tile 2nj, then of key tile 2nj+1
        ptx::ldmatrix_x4(b, K_j + nj * 16 * RB + (k_lane ^ (kk * 32)));
#pragma unroll
        for (int mi = 0; mi < M_TILES; ++mi) {
          ptx::mma_m16n8k16<T>(S_acc[mi][2 * nj], a[mi], b[0], b[1]);
          ptx::mma_m16n8k16<T>(S_acc[mi][2 * nj + 1], a[mi], b[2], b[3]);
        }
      }
    }
    // LAB-END(05-mma-qk)

    // Mask only where needed: the diagonal blocks of a causal problem and the
    // partial last block. Everything before n_mask_from is fully visible.
    if (n >= n_mask_from) {
#pragma unroll
      for (int mi = 0; mi < M_TILES; ++mi)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          // Keys this row sees, relative to the block's first key.
          const int row = row0 + warp * Cfg::kWarpRows + mi * kMmaM + g + half * 8;
          const int visible = (p.causal ? min(p.seqlen_k, row + p.causal_offset + 1) : p.seqlen_k) -
                              n * BLOCK_N - 2 * t;
#pragma unroll
          for (int nt = 0; nt < N_TILES; ++nt)
#pragma unroll
            for (int e = 0; e < 2; ++e)
              if (nt * kMmaN + e >= visible) S_acc[mi][nt][2 * half + e] = -INFINITY;
        }
    }

    // LAB-BEGIN(05-online-softmax): online softmax on the S fragments; P as 16-bit A fragments
    uint32_t P_frag[M_TILES][N_STEPS][4];
#pragma unroll
    for (int mi = 0; mi < M_TILES; ++mi) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {  // rows g and g + 8 of the m-tile
        float m_blk = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < N_TILES; ++nt)
          m_blk = fmaxf(m_blk, fmaxf(S_acc[mi][nt][2 * half], S_acc[mi][nt][2 * half + 1]));
        const float m_new = fmaxf(m_i[mi][half], ptx::quad_max(m_blk));
        // A row that has not seen any key yet has m_new = -inf; subtracting 0
        // instead keeps exp2(-inf - ...) = 0 and avoids -inf - -inf = NaN.
        const float m_scaled = (m_new == -INFINITY) ? 0.f : m_new * scale_log2;
        const float alpha = ptx::ex2_approx(m_i[mi][half] * scale_log2 - m_scaled);
        m_i[mi][half] = m_new;
        // FA2: rescale O_i by alpha now, divide by l_i only once at the end.
        // l_i stays a per-lane partial sum; the quad adds it up in the epilogue.
        float l_blk = 0.f;
#pragma unroll
        for (int nt = 0; nt < N_TILES; ++nt)
#pragma unroll
          for (int e = 2 * half; e < 2 * half + 2; ++e) {
            S_acc[mi][nt][e] = ptx::ex2_approx(fmaf(S_acc[mi][nt][e], scale_log2, -m_scaled));
            l_blk += S_acc[mi][nt][e];
          }
        l_i[mi][half] = l_i[mi][half] * alpha + l_blk;
#pragma unroll
        for (int dt = 0; dt < D_TILES; ++dt) {
          O_acc[mi][dt][2 * half] *= alpha;
          O_acc[mi][dt][2 * half + 1] *= alpha;
        }
      }
      // The C fragments of key tiles 2kk and 2kk+1 are, packed to 16 bits, the
      // A fragment (a0, a1, a2, a3) of k-step kk of O += P V.
#pragma unroll
      for (int kk = 0; kk < N_STEPS; ++kk) {
        P_frag[mi][kk][0] = pack2<T>(S_acc[mi][2 * kk][0], S_acc[mi][2 * kk][1]);
        P_frag[mi][kk][1] = pack2<T>(S_acc[mi][2 * kk][2], S_acc[mi][2 * kk][3]);
        P_frag[mi][kk][2] = pack2<T>(S_acc[mi][2 * kk + 1][0], S_acc[mi][2 * kk + 1][1]);
        P_frag[mi][kk][3] = pack2<T>(S_acc[mi][2 * kk + 1][2], S_acc[mi][2 * kk + 1][3]);
      }
    }
    // LAB-END(05-online-softmax)

    // LAB-BEGIN(05-mma-pv): O_i += P V_j with ldmatrix.trans + mma.sync
#pragma unroll
    for (int kk = 0; kk < N_STEPS; ++kk) {
#pragma unroll
      for (int dj = 0; dj < D / 16; ++dj) {
        uint32_t b[4];  // (b0, b1) of dims 16dj..+7, then of dims 16dj+8..+15
        ptx::ldmatrix_x4_trans(b, V_j + kk * 16 * RB + (v_lane ^ (dj * 32)));
#pragma unroll
        for (int mi = 0; mi < M_TILES; ++mi) {
          ptx::mma_m16n8k16<T>(O_acc[mi][2 * dj], P_frag[mi][kk], b[0], b[1]);
          ptx::mma_m16n8k16<T>(O_acc[mi][2 * dj + 1], P_frag[mi][kk], b[2], b[3]);
        }
      }
    }
    // LAB-END(05-mma-pv)
  }
  ptx::cp_async_wait<0>();  // only empty groups remain; leave nothing in flight

  // ---- epilogue: O_i / l_i, LSE; rows beyond seqlen_q are not stored -----
  T* O_gmem = static_cast<T*>(p.o) + batch * p.o_batch_stride + head * p.o_head_stride;
  float* lse_gmem = p.lse + (static_cast<int64_t>(batch) * p.heads_q + head) * p.seqlen_q;
#pragma unroll
  for (int mi = 0; mi < M_TILES; ++mi)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const float l = ptx::quad_sum(l_i[mi][half]);
      const float inv_l = (l > 0.f) ? 1.f / l : 0.f;  // a row that saw no key: O = 0
      const int row = row0 + warp * Cfg::kWarpRows + mi * kMmaM + g + half * 8;
      if (row >= p.seqlen_q) continue;
      T* o_row = O_gmem + row * p.o_row_stride;
      float* o32_row = o_fp32_row(p, batch, row, head);  // null unless a backward pass asked
#pragma unroll
      for (int dt = 0; dt < D_TILES; ++dt)
        store_o2<T>(o_row, o32_row, dt * kMmaN + 2 * t, O_acc[mi][dt][2 * half] * inv_l,
                    O_acc[mi][dt][2 * half + 1] * inv_l);
      if (t == 0) lse_gmem[row] = (l > 0.f) ? m_i[mi][half] * p.softmax_scale + logf(l) : -INFINITY;
    }
}

// ---- host side: one instantiation's launch and its resource entry ---------

/// The kernel for (T, Cfg), with its dynamic shared-memory limit raised to
/// Cfg::kSmemBytes (needed above 48 KB; done once per process, also before the
/// occupancy query of the resource report).
template <class T, class Cfg>
const void* prepared_kernel() {
  static const bool once = [] {
    FL_CUDA_CHECK(cudaFuncSetAttribute(
        flash_fwd_tc_kernel<T, Cfg>, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes));
    return true;
  }();
  (void)once;
  return reinterpret_cast<const void*>(&flash_fwd_tc_kernel<T, Cfg>);
}

/// Launches the forward kernel: one block per (Q tile, query head, batch).
template <class T, class Cfg>
void launch_flash_tc(const AttnParams& p, cudaStream_t stream) {
  prepared_kernel<T, Cfg>();
  const dim3 grid((p.seqlen_q + Cfg::kBlockM - 1) / Cfg::kBlockM, p.heads_q, p.batch);
  flash_fwd_tc_kernel<T, Cfg><<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(p);
  FL_LAUNCH_CHECK("flash_fwd_tc_kernel");
}

/// "flash_fwd_tc<d=128, 64x64, 4 warps, 2 stages, Q in regs>".
template <class Cfg>
std::string tile_label() {
  return "flash_fwd_tc<d=" + std::to_string(Cfg::kHeadDim) + ", " + std::to_string(Cfg::kBlockM) +
         "x" + std::to_string(Cfg::kBlockN) + ", " + std::to_string(Cfg::kNumWarps) + " warps, " +
         std::to_string(Cfg::kStages) + " stages, Q in " + (Cfg::kQInRegs ? "regs" : "smem") + ">";
}

}  // namespace fl::tc
