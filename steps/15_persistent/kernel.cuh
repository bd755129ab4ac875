/// @file steps/15_persistent/kernel.cuh
/// @brief Rung 15: rung 10's warp-specialized forward in a persistent block that walks a tile
/// schedule (scheduler.h), with its epilogue under the next tile's loads, on dense or packed
/// variable-length batches (FlashAttention-3, Shah et al., 2024, hopper/: the persistent tile
/// scheduler; FlashAttention-2's varlen API for cu_seqlens).
///
/// @code
///   // clang-format off
///   grid = min(work items, SMs) blocks; the producer takes the block's items (scheduler.h: a
///   counter under a causal mask or in a packed batch, static rounds otherwise) and writes each
///   into a shared-memory slot before its Q, where the consumers read it. Per item, rung 10's roles:
///   producer   wait q_empty -> the item into the slot, TMA Q   <- the consumers may still be
///              storing the last O; claim the next item; every K/V block into the ring, whose
///              stage counter runs on across items
///   consumers  wait Q, read the slot -> rung 10's loop (ping-pong, softmax under the next S = Q K^T)
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

/// Rung 10's shared memory, with the "Q empty" barrier after the ring's and the slot in which
/// the producer leaves each work item (m_block, head, batch; m_block -1: no more work). Item n
/// uses Q buffer b = n % Cfg::kQBufs: its tile, "Q landed" (rung 10's bar_q for b = 0), "Q empty"
/// and slot (16-byte aligned for the vector access).
template <class Cfg>
struct Smem : hopper10::WsSmem<Cfg> {
  __device__ __forceinline__ explicit Smem(const uint8_t* raw) : hopper10::WsSmem<Cfg>(raw) {}
  __device__ __forceinline__ uint32_t q_tile(int b) const {
    return b == 0 ? this->Q_s : (this->bar_q + 8u * (8 + 4 * Cfg::kStages) + 1023u) & ~1023u;
  }
  __device__ __forceinline__ uint32_t q_full(int b) const {
    return b == 0 ? this->bar_q : this->bar_q + 8u * (6 + 4 * Cfg::kStages);
  }
  __device__ __forceinline__ uint32_t q_empty(int b) const { return this->bar_q + 8u * ((b == 0 ? 1 : 7) + 4 * Cfg::kStages); }
  __device__ __forceinline__ uint32_t item_slot(int b) const { return this->bar_q + 8u * ((b == 0 ? 2 : 4) + 4 * Cfg::kStages); }
  /// Rung 10's view of the shared memory with Q buffer @p b as its Q tile (its GEMMs read Q_s).
  __device__ __forceinline__ hopper10::WsSmem<Cfg> with_q(int b) const {
    hopper10::WsSmem<Cfg> v = *this;
    v.Q_s = q_tile(b);
    return v;
  }
};

/// The item slot's accesses. The producer writes it before its arrive on Q's barrier, whose
/// phase the consumers wait for before they read it (mbarrier arrive: release; wait: acquire),
/// and writes it again only after both consumers arrived on "Q empty", after their read.
__device__ __forceinline__ void put_tile(uint32_t slot, const Tile& t) {
  asm volatile("st.shared.v4.s32 [%0], {%1, %2, %3, %4};\n" ::"r"(slot), "r"(t.m_block), "r"(t.head), "r"(t.batch),
               "r"(0)
               : "memory");
}
__device__ __forceinline__ Tile get_tile(uint32_t slot) {
  int4 v;
  asm volatile("ld.shared.v4.s32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(slot)
               : "memory");
  return {v.x, v.y, v.z};
}

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
/// PERSISTENT); 384 threads. The producer takes the work items (scheduler.h) and hands each to
/// the consumers through the item slot, with its Q.
template <class T, class Cfg, bool PERSISTENT, bool EPILOGUE_OVERLAP, bool ROW16>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    persistent_fwd_kernel(const __grid_constant__ CUtensorMap map_q, const __grid_constant__ CUtensorMap map_k,
                          const __grid_constant__ CUtensorMap map_v, const AttnParams p,
                          const TileScheduler sched) {
  constexpr int D = Cfg::kHeadDimV;  // O's columns: V's head_dim (Q's and K's: Cfg::kHeadDim)
  constexpr int BLOCK_N = Cfg::kBlockN;
  constexpr int STAGES = Cfg::kStages;
  constexpr int PV_STEPS = BLOCK_N / 16;

  const int tid = threadIdx.x;
  const int wg_idx = warpgroup_index();  // 0: producer, 1 and 2: consumers

  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const Smem<Cfg> sm(smem_raw);

  constexpr int QB = Cfg::kQBufs;
  if (tid == 0) {
    hopper10::start_up(sm, &map_q, &map_k, &map_v);
    for (int b = 0; b < QB; ++b) {
      if (b > 0) mbarrier_init(sm.q_full(b), 1);
      mbarrier_init(sm.q_empty(b), kConsumerThreads);  // every consumer thread: each read the slot
    }
    fence_mbarrier_init();
  }
  __syncthreads();  // the last barrier of all 384 threads: the roles part here

  if (wg_idx == 0) {
    // ---- producer ---------------------------------------------------------------------------
    setmaxnreg_dec<hopper10::kProducerRegs>();
    if (tid != 0) return;
    // LAB-BEGIN(15-producer): take work items, hand each to the consumers, load its Q and K/V
    // [same-code: 10-producer]
    Cursor cursor;
    Tile tile;
    int t = blockIdx.x;  // the first item: one per block, no counter
    bool more = locate(sched, t, &cursor, &tile);
    int kv_iter = 0;  // K/V blocks loaded so far by this block: the ring's stage and phase
    for (int n_item = 0, round = 0;; ++n_item) {
      // The Q tile (and the item slot) are free once every consumer thread ran its last S = Q K^T
      // of the previous item (a fresh barrier passes parity 1 at once: the first item waits not).
      // (Two Q buffers: item n's buffer was freed by item n - 2's last S.)
      const int qb = n_item % QB;
      mbarrier_wait_parity(sm.q_empty(qb), ((n_item / QB) & 1) ^ 1);
      if (!more) {  // tell the consumers there is no more work: an arrival without copies
        put_tile(sm.item_slot(qb), Tile{-1, 0, 0});
        mbarrier_arrive(sm.q_full(qb));
        break;
      }
      put_tile(sm.item_slot(qb), tile);
      const Item it = item_of<Cfg>(p, tile);
      const hopper10::TileLoads<Cfg> load{&map_q, &map_k, &map_v, it.head, it.kv_head,
                                          it.seq.q0 + it.row0, it.seq.batch};
      mbarrier_arrive_expect_tx(sm.q_full(qb), Cfg::kQBytes);
      load.q(sm.q_tile(qb), sm.q_full(qb));
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
      // Claim the next item once this one's copies are issued: the consumers still have the
      // ring's last blocks to run, under which the counter's round trip passes. Claimed any
      // earlier, the next item would go to the block that just started a long one, not to the
      // first to become free.
      t = PERSISTENT ? (sched.dynamic ? static_cast<int>(gridDim.x) + atomicAdd(sched.counter, 1) : static_item(blockIdx.x, ++round, gridDim.x))
                     : -1;
      more = t >= 0 && locate(sched, t, &cursor, &tile);
    }
    // LAB-END(15-producer)
    if (PERSISTENT && sched.dynamic) {
      // The counter back to zero for the next launch on the stream (a workspace the caller keeps:
      // AttnParams::workspace_kept): the last block to finish claiming, counted in counter[1],
      // zeroes both. Every block's last claim comes before its count (the fence), so no claim
      // follows the reset.
      __threadfence();
      if (atomicAdd(sched.counter + 1, 1) == static_cast<int>(gridDim.x) - 1) {
        atomicExch(sched.counter, 0);
        atomicExch(sched.counter + 1, 0);
      }
    }
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

  // Rung 10's GEMMs and rescale, on ring positions i (the block's stage and fill: issue_qk_block),
  // S = Q K^T on the item's Q buffer.
  int qb = 0;
  auto issue_qk = [&](float (&S)[BLOCK_N / 2], int i) { hopper10::issue_qk_block<T, Cfg>(sm.with_q(qb), c, S, i); };
  auto issue_pv = [&](int i) { hopper10::issue_pv_block<T, Cfg>(sm, O_acc, P_frag, i); };
  auto rescale_and_pack = [&](float (&S)[BLOCK_N / 2]) {
    hopper10::rescale_and_pack_p<T, Cfg>(O_acc, P_frag, S, alpha);
  };
  // Every consumer thread arrives, after its own last read of Q (its wgmma) and of the slot.
  auto release_q = [&] { mbarrier_arrive(sm.q_empty(qb)); };

#pragma unroll 1
  for (;; ++n_item) {
    qb = n_item % QB;
    mbarrier_wait_parity(sm.q_full(qb), (n_item / QB) & 1);  // Q landed, or the producer said "no more"
    const Tile tile = get_tile(sm.item_slot(qb));
    if (tile.m_block < 0) break;
    const Item it = item_of<Cfg>(p, tile);
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
    // [copy-of: 10-overlap]
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
    // A null LSE: the caller asked for O alone (Rung::lse_optional), so the LSE is not stored.
    float* lse_gmem = p.lse != nullptr ? p.lse + lse_offset(p, it.seq, it.batch, it.head) : nullptr;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float l = ptx::quad_sum(l_i[h]);
      const float inv_l = (l > 0.f) ? 1.f / l : 0.f;
      const int row = it.row0 + 64 * c + 16 * warp + g + 8 * h;
      const bool in_seq = row < it.seq.len_q;
      const int token = it.seq.q0 + row;
      T* o_row = O_gmem + token * p.o_row_stride;
      if constexpr (ROW16) {
        // Whole sectors: the quad's pairs transposed into 16-byte pieces. Every lane takes part
        // in the shuffles; only rows of the sequence store.
        store_o_row16<T, D>(o_row, O_acc, h, inv_l, t4, in_seq);
        if (!in_seq) continue;
        if (float* o32_row = o_fp32_row(p, it.seq.batch, token, it.head)) {  // null unless a backward asked
#pragma unroll
          for (int j = 0; j < D / 8; ++j)
            *reinterpret_cast<float2*>(o32_row + 8 * j + 2 * t4) =
                make_float2(O_acc[4 * j + 2 * h] * inv_l, O_acc[4 * j + 2 * h + 1] * inv_l);
        }
      } else {  // the pair-stores ablation: rung 10's stores
        if (!in_seq) continue;
        float* o32_row = o_fp32_row(p, it.seq.batch, token, it.head);
#pragma unroll
        for (int j = 0; j < D / 8; ++j)
          store_o2<T>(o_row, o32_row, 8 * j + 2 * t4, O_acc[4 * j + 2 * h] * inv_l, O_acc[4 * j + 2 * h + 1] * inv_l);
      }
      if (t4 == 0 && lse_gmem != nullptr) lse_gmem[row] = (l > 0.f) ? m_i[h] * p.softmax_scale + logf(l) : -INFINITY;
    }
    // LAB-END(15-epilogue)
    if (!EPILOGUE_OVERLAP) release_q();  // the ablation: the next Q only after every store
  }
  turn.finish();
}

// ---- host side ----------------------------------------------------------------------------------

template <class T, class Cfg, bool PERSISTENT, bool EPILOGUE_OVERLAP, bool ROW16>
const void* prepared_kernel() {
  static const bool once = [] {
    FL_CUDA_CHECK(cudaFuncSetAttribute(persistent_fwd_kernel<T, Cfg, PERSISTENT, EPILOGUE_OVERLAP, ROW16>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes));
    return true;
  }();
  (void)once;
  return reinterpret_cast<const void*>(&persistent_fwd_kernel<T, Cfg, PERSISTENT, EPILOGUE_OVERLAP, ROW16>);
}

/// Multiprocessors of the current device, asked once per device (not in every launch).
int sm_count_cached();

/// The launch's schedule (scheduler.h): query tiles of BLOCK_M rows, longest first under a
/// causal mask (unless @p lpt is off), handed out by the counter in the workspace when the items'
/// costs differ (a causal mask, a packed batch) unless @p dynamic is off.
template <class Cfg>
TileScheduler make_scheduler(const AttnParams& p, bool lpt, bool dynamic) {
  TileScheduler s;
  s.num_m_blocks = (p.seqlen_q + Cfg::kBlockM - 1) / Cfg::kBlockM;
  s.block_m = Cfg::kBlockM;
  s.heads_q = p.heads_q;
  s.batch = p.batch;
  s.lpt = lpt && p.causal;
  s.cu_seqlens_q = p.cu_seqlens_q;
  s.dynamic = dynamic && (p.causal || p.cu_seqlens_q != nullptr);
  s.counter = static_cast<int*>(p.workspace);
  return s;
}

template <class T, class Cfg, bool PERSISTENT, bool EPILOGUE_OVERLAP, bool ROW16>
void launch_persistent(const AttnParams& p, bool lpt, bool dynamic, cudaStream_t stream) {
  prepared_kernel<T, Cfg, PERSISTENT, EPILOGUE_OVERLAP, ROW16>();
  const DType dt = static_cast<DType>(p.dtype);
  const bool packed = p.cu_seqlens_q != nullptr;
  if (packed && p.total_q == 0) return;  // only empty sequences: nothing to write
  // A packed batch's tensors are one sequence of all its tokens (make_tma_map_tokens); with no key
  // at all no K/V copy is ever issued, and the K/V maps describe one row of Q.
  const CUtensorMap map_q = make_tma_map_tokens(dt, p, false, p.q, p.q_batch_stride, p.q_row_stride, p.q_head_stride,
                                                Cfg::kBlockM, p.q);
  const CUtensorMap map_k = make_tma_map_tokens(dt, p, true, p.k, p.k_batch_stride, p.k_row_stride, p.k_head_stride,
                                                Cfg::kBlockN, p.q);
  const CUtensorMap map_v = make_tma_map_tokens(dt, p, true, p.v, p.v_batch_stride, p.v_row_stride, p.v_head_stride,
                                                Cfg::kBlockN, p.q);
  const TileScheduler sched = make_scheduler<Cfg>(p, lpt, dynamic);
  // Items of a dense batch; of a packed one, at most this many (the longest sequence's count for
  // every sequence): without PERSISTENT, one block per item, the missing ones exit at once.
  const int items = sched.dense_total();
  const int blocks = PERSISTENT ? std::min(items, sm_count_cached()) : items;
  if (PERSISTENT && sched.dynamic) {
    if (p.workspace == nullptr || p.workspace_bytes < 2 * sizeof(int))
      throw std::runtime_error("rung 15: the dynamic schedule needs its workspace (the counters)");
    // A kept workspace holds the zeros the previous launch on the stream left (the kernel's end
    // puts them back): no memset, one stream operation fewer per call.
    if (!p.workspace_kept) FL_CUDA_CHECK(cudaMemsetAsync(p.workspace, 0, 2 * sizeof(int), stream));
  }
  persistent_fwd_kernel<T, Cfg, PERSISTENT, EPILOGUE_OVERLAP, ROW16>
      <<<blocks, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(map_q, map_k, map_v, p, sched);
  FL_LAUNCH_CHECK("persistent_fwd_kernel");
}

template <class Cfg, bool PERSISTENT, bool EPILOGUE_OVERLAP, bool ROW16>
std::string tile_label(bool lpt, bool dynamic) {
  return "persistent_fwd<d=" + std::to_string(Cfg::kHeadDim) + ", " + std::to_string(Cfg::kBlockM) + "x" +
         std::to_string(Cfg::kBlockN) + ", " + std::to_string(Cfg::kStages) + " stages" + (Cfg::kQBufs == 2 ? ", 2 Q tiles" : "") +
         (PERSISTENT ? ", persistent" : ", one block per tile") + (EPILOGUE_OVERLAP ? ", epilogue overlap" : "") +
         (ROW16 ? ", 16-byte O stores" : ", O stored in pairs") +
         (lpt ? ", LPT" : ", fifo") + (dynamic ? "" : ", static rounds") + ">";
}

}  // namespace fl::hopper15
