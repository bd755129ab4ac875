/// @file steps/15_persistent/kernel.cuh
/// @brief Rung 15: rung 10's warp-specialized forward in a persistent block that walks a tile
/// schedule (scheduler.h), with its epilogue under the next tile's loads, on dense or packed
/// variable-length batches (FlashAttention-3, Shah et al., 2024, hopper/: the persistent tile
/// scheduler; FlashAttention-2's varlen API for cu_seqlens).
///
/// @code
///   // clang-format off
///   grid = min(work items, SMs) blocks; in round r block i takes one item of the schedule
///   (scheduler.h: LPT, dealt in a snake), skipping those past the end of their sequence.
///   Per item, the roles are rung 10's:
///   producer   wait q_empty -> TMA Q           <- the consumers may still be storing the last O
///              every K/V block into the ring, whose stage counter runs on across items
///   consumers  wait Q -> rung 10's loop (ping-pong, softmax under the next S = Q K^T)
///              after the last S = Q K^T: arrive q_empty (EPILOGUE_OVERLAP; else after the store)
///              last O += P V -> O / l and the LSE to global memory, while the producer's copies
///              of the next item land and the other consumer issues its GEMMs
///   // clang-format on
/// @endcode
///
/// What changes from rung 10: the grid and the loop over work items; the ring's stage and phase
/// counters and the ping-pong's turns run on across items; Q has an "empty" barrier; every
/// address goes through the item's sequence (flashladder/varlen.h), whose own length masks its
/// tail and whose own len_k - len_q places its causal diagonal.
#pragma once

#include <algorithm>

#include "../10_warp_specialized/kernel.cuh"
#include "flashladder/varlen.h"
#include "scheduler.h"
#include "traits.h"

namespace fl::hopper15 {

using namespace fl::hopper;
namespace wg = fl::wgmma;
using hopper10::kConsumerThreads;
using hopper10::kTurnBarrier;

/// Rung 10's shared memory, with the "Q empty" barrier after the ring's.
template <class Cfg>
struct Smem : hopper10::WsSmem<Cfg> {
  __device__ __forceinline__ explicit Smem(const uint8_t* raw) : hopper10::WsSmem<Cfg>(raw) {}
  __device__ __forceinline__ uint32_t q_empty() const { return this->bar_q + 8u * (1 + 4 * Cfg::kStages); }
};

/// One work item as every role sees it: its sequence, rows, K/V blocks and mask.
struct Item {
  SeqSpan seq;
  int head, kv_head, batch;
  int row0;         ///< the item's first query row within its sequence
  int n_blocks;     ///< K/V blocks it visits (kv_blocks)
  int n_mask_from;  ///< blocks from here on need the mask
};

template <class Cfg>
__device__ __forceinline__ Item item_of(const AttnParams& p, const Tile& t) {
  Item it;
  it.seq = seq_span(p, t.batch);
  it.head = t.head;
  it.kv_head = t.head / p.group;
  it.batch = t.batch;
  it.row0 = t.m_block * Cfg::kBlockM;
  const int q_rows = min(Cfg::kBlockM, it.seq.len_q - it.row0);
  const KvBlocks kv = kv_blocks(it.seq.len_k, p.causal, it.seq.len_k - it.seq.len_q, it.row0, q_rows, Cfg::kBlockN);
  it.n_blocks = kv.count;
  it.n_mask_from = kv.mask_from;
  return it;
}

/// The ping-pong's turns over a block's whole life: consumer 1 lets consumer 0 go first, each
/// hands the turn over after issuing, across work items too, so one consumer's epilogue runs
/// while the other issues the next item's GEMMs. At the end consumer 0 takes the hand-off
/// consumer 1 gave after its last turn, so every barrier phase that opened is closed.
template <bool PINGPONG>
struct Turns {
  int c;
  __device__ __forceinline__ explicit Turns(int consumer) : c(consumer) {
    if constexpr (PINGPONG) {
      if (c == 1) named_barrier_arrive(kTurnBarrier + 0, kConsumerThreads);
    }
  }
  __device__ __forceinline__ void begin() const {
    if constexpr (PINGPONG) named_barrier_sync(kTurnBarrier + c, kConsumerThreads);
  }
  __device__ __forceinline__ void end() const {
    if constexpr (PINGPONG) named_barrier_arrive(kTurnBarrier + (1 - c), kConsumerThreads);
  }
  __device__ __forceinline__ void finish() const {
    if constexpr (PINGPONG) {
      if (c == 0) named_barrier_sync(kTurnBarrier + 0, kConsumerThreads);
    }
  }
};

/// The persistent forward kernel. Grid: min(work items, SMs) (or one block per item without
/// PERSISTENT); 384 threads.
template <class T, class Cfg, bool PERSISTENT, bool EPILOGUE_OVERLAP>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    persistent_fwd_kernel(const __grid_constant__ CUtensorMap map_q, const __grid_constant__ CUtensorMap map_k,
                          const __grid_constant__ CUtensorMap map_v, const AttnParams p,
                          const TileScheduler sched) {
  constexpr int D = Cfg::kHeadDim;
  constexpr int BLOCK_M = Cfg::kBlockM;
  constexpr int BLOCK_N = Cfg::kBlockN;
  constexpr int STAGES = Cfg::kStages;
  constexpr int QK_STEPS = D / 16;
  constexpr int PV_STEPS = BLOCK_N / 16;

  const int tid = threadIdx.x;
  const int wg_idx = warpgroup_index();  // 0: producer, 1 and 2: consumers
  // A work item exists unless it starts past the end of its sequence (a packed batch's short ones).
  const auto exists = [&p](const Tile& t) { return t.m_block * BLOCK_M < seq_len_q(p, t.batch); };
  const int grid = PERSISTENT ? gridDim.x : sched.total();  // without PERSISTENT: one round
  const int n_rounds = sched.rounds(grid);

  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const Smem<Cfg> sm(smem_raw);

  if (tid == 0) {
    hopper10::start_up(sm, &map_q, &map_k, &map_v);
    mbarrier_init(sm.q_empty(), Cfg::kConsumers);
    fence_mbarrier_init();
  }
  __syncthreads();  // the last barrier of all 384 threads: the roles part here

  if (wg_idx == 0) {
    // ---- producer ---------------------------------------------------------------------------
    setmaxnreg_dec<hopper10::kProducerRegs>();
    if (tid != 0) return;
    // LAB-BEGIN(15-producer): Q and every K/V block of each work item, the ring running on
    int kv_iter = 0;  // K/V blocks loaded so far by this block: the ring's stage and phase
    int n_item = 0;   // work items so far: Q's phase
    for (int r = next_round(sched, blockIdx.x, 0, grid, exists); r < n_rounds;
         r = next_round(sched, blockIdx.x, r + 1, grid, exists), ++n_item) {
      const Item it = item_of<Cfg>(p, sched.tile(sched.item(blockIdx.x, r, grid)));
      const hopper10::TileLoads<Cfg> load{&map_q, &map_k, &map_v, it.head, it.kv_head,
                                          it.seq.q0 + it.row0, it.seq.batch};
      // The Q tile is free once both consumers ran their last S = Q K^T of the previous item
      // (a fresh barrier passes parity 1 at once: the first item does not wait).
      mbarrier_wait_parity(sm.q_empty(), (n_item & 1) ^ 1);
      mbarrier_arrive_expect_tx(sm.bar_q, Cfg::kQBytes);
      load.q(sm.Q_s, sm.bar_q);
#pragma unroll 1
      for (int n = 0; n < it.n_blocks; ++n, ++kv_iter) {
        const int s = kv_iter % STAGES;
        const uint32_t refill_parity = ((kv_iter / STAGES) & 1) ^ 1;
        const int key0 = it.seq.k0 + n * BLOCK_N;
        mbarrier_wait_parity(sm.k_empty(s), refill_parity);
        mbarrier_arrive_expect_tx(sm.k_full(s), Cfg::kKBytes);
        load.k(sm.K_s + s * Cfg::kKBytes, sm.k_full(s), key0);
        mbarrier_wait_parity(sm.v_empty(s), refill_parity);
        mbarrier_arrive_expect_tx(sm.v_full(s), Cfg::kVBytes);
        load.v(sm.V_s + s * Cfg::kVBytes, sm.v_full(s), key0);
      }
    }
    // LAB-END(15-producer)
    return;
  }

  // ---- consumers ------------------------------------------------------------------------------
  setmaxnreg_inc<hopper10::kConsumerRegs>();
  const int c = wg_idx - 1;  // consumer 0 or 1: rows 64c .. 64c + 63 of the Q tile
  const int warp = (tid % kWarpgroupThreads) / 32;
  const int lane = tid % 32;
  const int g = lane / 4;
  const int t4 = lane % 4;
  const bool leader = (tid % kWarpgroupThreads) == 0;  // arrives on "empty" for its warpgroup
  const float scale_log2 = p.scale_log2;
  Turns<true> turn(c);

  float O_acc[D / 2];
  float m_i[2], l_i[2], alpha[2];
  uint32_t P_frag[PV_STEPS][4];
  int kv_iter = 0;  // the ring's position, as the producer's
  int n_item = 0;

  auto issue_qk = [&](float (&S)[BLOCK_N / 2], int i) {  // i: the ring position of the block
    const int s = i % STAGES;
    mbarrier_wait_parity(sm.k_full(s), (i / STAGES) & 1);
    wgmma_fence_operand(S);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < QK_STEPS; ++kk) {
      const uint64_t desc_q = wg::desc_kmajor_sw128(sm.Q_s + wg::sw128_kmajor_offset(BLOCK_M, 64 * c, kk));
      const uint64_t desc_k =
          wg::desc_kmajor_sw128(sm.K_s + s * Cfg::kKVBytes + wg::sw128_kmajor_offset(BLOCK_N, 0, kk));
      wgmma_ss<T, BLOCK_N>(S, desc_q, desc_k, kk > 0);
    }
    wgmma_commit();
  };
  auto issue_pv = [&](int i) {
    const int s = i % STAGES;
    mbarrier_wait_parity(sm.v_full(s), (i / STAGES) & 1);
    wgmma_fence_operand(O_acc);
#pragma unroll
    for (int kk = 0; kk < PV_STEPS; ++kk) wgmma_fence_operand(P_frag[kk]);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < PV_STEPS; ++kk) {
      const uint64_t desc_v = wg::desc_mnmajor_sw128(
          sm.V_s + s * Cfg::kKVBytes + wg::sw128_mnmajor_offset(BLOCK_N, 0, kk), BLOCK_N);
      wgmma_rs<T, D, 1>(O_acc, P_frag[kk], desc_v, 1);
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
#pragma unroll
    for (int kk = 0; kk < PV_STEPS; ++kk)
#pragma unroll
      for (int i = 0; i < 4; ++i) P_frag[kk][i] = pack2<T>(S[8 * kk + 2 * i], S[8 * kk + 2 * i + 1]);
  };
  auto release_q = [&] {
    if (leader) mbarrier_arrive(sm.q_empty());
  };

#pragma unroll 1
  for (int r = next_round(sched, blockIdx.x, 0, grid, exists); r < n_rounds;
       r = next_round(sched, blockIdx.x, r + 1, grid, exists), ++n_item) {
    const Item it = item_of<Cfg>(p, sched.tile(sched.item(blockIdx.x, r, grid)));
    const int n_blocks = it.n_blocks;
    const int i0 = kv_iter;  // ring position of this item's block 0
    kv_iter += n_blocks;

    // Keys each of this thread's two rows sees (the mask's bound), minus the column of its lane.
    int row_visible[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = it.row0 + 64 * c + 16 * warp + g + 8 * h;
      const int offset = it.seq.len_k - it.seq.len_q;
      row_visible[h] = (p.causal ? min(it.seq.len_k, row + offset + 1) : it.seq.len_k) - 2 * t4;
    }
#pragma unroll
    for (int i = 0; i < D / 2; ++i) O_acc[i] = 0.f;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      m_i[h] = -INFINITY;
      l_i[h] = 0.f;
    }
    mbarrier_wait_parity(sm.bar_q, n_item & 1);

    // A stage's K may be refilled once S = Q K^T of its block is done, its V once O += P V is;
    // Q once the item's last S is.
    auto s_landed = [&](float (&S)[BLOCK_N / 2], int n) {
      wgmma_fence_operand(S);
      if (leader) mbarrier_arrive(sm.k_empty((i0 + n) % STAGES));
      if (EPILOGUE_OVERLAP && n == n_blocks - 1) release_q();
    };
    auto pv_done = [&](int n) {
      wgmma_wait<0>();
      wgmma_fence_operand(O_acc);
      if (leader) mbarrier_arrive(sm.v_empty((i0 + n) % STAGES));
    };

    // LAB-BEGIN(15-mainloop): rung 10's loop on ring positions i0 + n
    if (n_blocks > 0) {
      float S[BLOCK_N / 2];
      turn.begin();
      issue_qk(S, i0);
      turn.end();
      wgmma_wait<0>();
      s_landed(S, 0);
      hopper10::softmax_block<BLOCK_N>(S, m_i, l_i, alpha, scale_log2, 0 >= it.n_mask_from, 0, row_visible);
      rescale_and_pack(S);
#pragma unroll 1
      for (int n = 1; n < n_blocks; ++n) {
        float S_next[BLOCK_N / 2];
        turn.begin();
        issue_qk(S_next, i0 + n);  // group 1: S_n
        issue_pv(i0 + n - 1);      // group 2: O += P_{n-1} V_{n-1}
        turn.end();
        wgmma_wait<1>();
        s_landed(S_next, n);
        hopper10::softmax_block<BLOCK_N>(S_next, m_i, l_i, alpha, scale_log2, n >= it.n_mask_from,
                                         n * BLOCK_N, row_visible);
        pv_done(n - 1);
        rescale_and_pack(S_next);
      }
      turn.begin();
      issue_pv(i0 + n_blocks - 1);
      turn.end();
      pv_done(n_blocks - 1);
    } else if (EPILOGUE_OVERLAP) {
      release_q();  // no key block: Q was never read
    }
    // LAB-END(15-mainloop)

    // ---- epilogue (rung 10's, through the item's sequence) ------------------------------------
    // LAB-BEGIN(15-epilogue): O / l and the LSE of each row of the sequence
    T* O_gmem = static_cast<T*>(p.o) + it.seq.batch * p.o_batch_stride + it.head * p.o_head_stride;
    float* lse_gmem = p.lse + lse_offset(p, it.seq, it.batch, it.head);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float l = ptx::quad_sum(l_i[h]);
      const float inv_l = (l > 0.f) ? 1.f / l : 0.f;
      const int row = it.row0 + 64 * c + 16 * warp + g + 8 * h;
      if (row >= it.seq.len_q) continue;
      const int token = it.seq.q0 + row;
      T* o_row = O_gmem + token * p.o_row_stride;
      float* o32_row = o_fp32_row(p, it.seq.batch, token, it.head);  // null unless a backward asked
#pragma unroll
      for (int j = 0; j < D / 8; ++j)
        store_o2<T>(o_row, o32_row, 8 * j + 2 * t4, O_acc[4 * j + 2 * h] * inv_l, O_acc[4 * j + 2 * h + 1] * inv_l);
      if (t4 == 0) lse_gmem[row] = (l > 0.f) ? m_i[h] * p.softmax_scale + logf(l) : -INFINITY;
    }
    // LAB-END(15-epilogue)
    if (!EPILOGUE_OVERLAP) {
      // The ablation: the producer may load the next Q only now. Every consumer thread's stores
      // are issued before its warpgroup's leader arrives.
      named_barrier_sync(kTurnBarrier + 2 + c, kWarpgroupThreads);
      release_q();
    }
  }
  turn.finish();
}

// ---- host side ----------------------------------------------------------------------------------

template <class T, class Cfg, bool PERSISTENT, bool EPILOGUE_OVERLAP>
const void* prepared_kernel() {
  static const bool once = [] {
    FL_CUDA_CHECK(cudaFuncSetAttribute(persistent_fwd_kernel<T, Cfg, PERSISTENT, EPILOGUE_OVERLAP>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes));
    return true;
  }();
  (void)once;
  return reinterpret_cast<const void*>(&persistent_fwd_kernel<T, Cfg, PERSISTENT, EPILOGUE_OVERLAP>);
}

/// Multiprocessors of the current device, asked once per device (not in every launch).
int sm_count_cached();

/// The launch's schedule: query tiles of BLOCK_M rows over the longest sequence, units of
/// (sequence, head), sections of units whose K and V fit kL2BudgetBytes, LPT under a causal mask.
template <class Cfg>
TileScheduler make_scheduler(const AttnParams& p, bool lpt) {
  TileScheduler s;
  s.num_m_blocks = (p.seqlen_q + Cfg::kBlockM - 1) / Cfg::kBlockM;
  s.heads_q = p.heads_q;
  s.units = p.batch * p.heads_q;
  const long long kv_head_bytes = 2ll * p.seqlen_k * Cfg::kHeadDim * 2;  // K and V, 16-bit
  static const long long budget = [] {  // EXPERIMENT
    const char* e = getenv("FL_R15_L2_MB");
    return e ? atoll(e) << 20 : kL2BudgetBytes;
  }();
  static const bool m_fastest = getenv("FL_R15_M_FASTEST") != nullptr;
  s.section_units = section_units_for(kv_head_bytes, p.group, s.units, budget);
  s.m_fastest = m_fastest;
  s.lpt = lpt && p.causal;
  return s;
}

template <class T, class Cfg, bool PERSISTENT, bool EPILOGUE_OVERLAP>
void launch_persistent(const AttnParams& p, bool lpt, cudaStream_t stream) {
  prepared_kernel<T, Cfg, PERSISTENT, EPILOGUE_OVERLAP>();
  const DType dt = static_cast<DType>(p.dtype);
  // A packed batch is one sequence of all its tokens to TMA (batch 1); a dense one is batched.
  // Its batch stride is never used; TMA still wants a positive one.
  const bool packed = p.cu_seqlens_q != nullptr;
  if (packed && p.total_q == 0) return;  // only empty sequences: nothing to write
  const int tma_batch = packed ? 1 : p.batch;
  const int rows_q = packed ? p.total_q : p.seqlen_q;
  // No key at all (every len_k = 0): no K/V copy is ever issued, but the maps must be valid;
  // they then describe Q's memory, one row per head, which nothing reads.
  const bool no_keys = packed && p.total_k == 0;
  const int rows_k = no_keys ? 1 : packed ? p.total_k : p.seqlen_k;
  const void* k = no_keys ? p.q : p.k;
  const void* v = no_keys ? p.q : p.v;
  auto batch_stride = [&](int64_t dense, int64_t row_stride, int rows) { return packed ? row_stride * rows : dense; };
  const CUtensorMap map_q =
      make_tma_map_bshd(dt, p.q, tma_batch, rows_q, p.heads_q, p.head_dim,
                        batch_stride(p.q_batch_stride, p.q_row_stride, rows_q), p.q_row_stride, p.q_head_stride, Cfg::kBlockM);
  const CUtensorMap map_k =
      make_tma_map_bshd(dt, k, tma_batch, rows_k, p.heads_kv, p.head_dim,
                        batch_stride(p.k_batch_stride, p.k_row_stride, rows_k), p.k_row_stride, p.k_head_stride, Cfg::kBlockN);
  const CUtensorMap map_v =
      make_tma_map_bshd(dt, v, tma_batch, rows_k, p.heads_kv, p.head_dim,
                        batch_stride(p.v_batch_stride, p.v_row_stride, rows_k), p.v_row_stride, p.v_head_stride, Cfg::kBlockN);
  const TileScheduler sched = make_scheduler<Cfg>(p, lpt);
  if (sched.total() == 0) return;
  const int blocks = PERSISTENT ? std::min(sched.total(), sm_count_cached()) : sched.total();
  persistent_fwd_kernel<T, Cfg, PERSISTENT, EPILOGUE_OVERLAP>
      <<<blocks, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(map_q, map_k, map_v, p, sched);
  FL_LAUNCH_CHECK("persistent_fwd_kernel");
}

template <class Cfg, bool PERSISTENT, bool EPILOGUE_OVERLAP>
std::string tile_label(bool lpt) {
  return "persistent_fwd<d=" + std::to_string(Cfg::kHeadDim) + ", " + std::to_string(Cfg::kBlockM) + "x" +
         std::to_string(Cfg::kBlockN) + ", " + std::to_string(Cfg::kStages) + " stages" +
         (PERSISTENT ? ", persistent" : ", one block per tile") +
         (EPILOGUE_OVERLAP ? ", epilogue overlap" : "") + (lpt ? ", LPT" : ", fifo") + ">";
}

}  // namespace fl::hopper15
