/// @file steps/16_masks/kernel.cuh
/// @brief Rung 16: masks and score modifiers as code (FlexAttention, Dong et al., 2024). Before the
/// forward runs, one small kernel classifies every (query tile, K/V block) block as empty, full
/// or partial and writes each tile's list of non-empty blocks; rung 15's persistent forward then
/// walks only those, runs full blocks without any mask arithmetic and applies the element mask
/// on partial ones. The causal mask is one case of that rule, not special code.
///
/// @code
///   // clang-format off
///   classify   one block of 128 threads per (sequence, query tile): each thread its row's span
///              (mods.h), then every K/V block of the sequence -> empty / full / partial, the
///              non-empty ones compacted into the tile's list in key order (mods.h's layout)
///   forward    rung 15's kernel, the K/V block range replaced by the tile's list:
///   producer   for each entry: block = entry & 0x7fffffff -> TMA K, V of keys block x BLOCK_N
///   consumers  S = Q K^T; score_mod (if any) -> log2 units; partial: keys outside the row's
///              span -> -inf; rung 10's softmax; O += P V. Epilogue: the sink (if any) joins l.
///   // clang-format on
/// @endcode
#pragma once

#include "../15_persistent/kernel.cuh"
#include "mods.h"

namespace fl::masks16 {

using namespace fl::hopper;
using hopper15::Tile;
using hopper15::TileScheduler;

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

/// How the classifier labels blocks: the rung, and two ablations of it.
enum class Classify : int {
  exact = 0,         ///< empty, full or partial
  no_full = 1,       ///< every non-empty block partial: the element mask everywhere
  no_skip = 2,       ///< every block of the sequence visited, every one partial (no skipping)
};

/// The classifier: grid (query tiles, sequences), 128 threads, one per row of the tile.
template <class MASK, int BLOCK_M, int BLOCK_N>
__global__ void __launch_bounds__(BLOCK_M) classify_kernel(const AttnParams p, const MASK mask,
                                                           const BlockMaskLayout L, int mode) {
  static_assert(BLOCK_M == 128, "four warps, one row each thread");
  const int m = blockIdx.x, b = blockIdx.y;
  if (m == 0 && b == 0 && threadIdx.x == 0) *static_cast<int*>(p.workspace) = 0;  // the schedule's counter
  const SeqSpan seq = seq_span(p, b);
  int* counts = reinterpret_cast<int*>(static_cast<uint8_t*>(p.workspace) + BlockMaskLayout::kCountsOffset);
  int* list = reinterpret_cast<int*>(static_cast<uint8_t*>(p.workspace) + L.lists_offset()) +
              L.tile_index(b, m) * L.n_blocks;
  __shared__ KeySpan spans[BLOCK_M];
  __shared__ int warp_count[4];
  __shared__ alignas(TileBounds) unsigned char bounds_mem[sizeof(TileBounds)];  // no constructor runs
  TileBounds& bounds = *reinterpret_cast<TileBounds*>(bounds_mem);
  // LAB-BEGIN(16-classify): each K/V block of a query tile -> empty, full or partial, listed
  const int row0 = m * BLOCK_M;
  const int rows = max(0, min(BLOCK_M, seq.len_q - row0));
  if (threadIdx.x == 0) bounds = TileBounds{};
  __syncthreads();
  if (static_cast<int>(threadIdx.x) < rows) {  // TileBounds::add, by shared-memory atomics
    const KeySpan s = mask.span(seq.len_q, seq.len_k, row0 + threadIdx.x);
    spans[threadIdx.x] = s;
    if (s.lo <= s.hi) {
      atomicMin(&bounds.min_lo, s.lo);
      atomicMax(&bounds.max_hi, s.hi);
    }
    atomicMax(&bounds.max_lo, s.lo);
    atomicMin(&bounds.min_hi, s.hi);
  }
  __syncthreads();
  const int n_total = (seq.len_k + BLOCK_N - 1) / BLOCK_N;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  int written = 0;
  for (int base = 0; base < n_total; base += BLOCK_M) {
    const int n = base + static_cast<int>(threadIdx.x);
    const int key0 = n * BLOCK_N, key1 = key0 + BLOCK_N - 1;
    BlockClass c = BlockClass::empty;
    if (n < n_total && rows > 0) {
      c = classify_tile_block(bounds, spans, rows, key0, key1, seq.len_k);
      if (mode == static_cast<int>(Classify::no_full) && c == BlockClass::full) c = BlockClass::partial;
      if (mode == static_cast<int>(Classify::no_skip)) c = BlockClass::partial;
    }
    const bool keep = c != BlockClass::empty;
    const unsigned ballot = __ballot_sync(0xffffffffu, keep);
    if (lane == 0) warp_count[warp] = __popc(ballot);
    __syncthreads();
    int at = written + __popc(ballot & ((1u << lane) - 1u));
    for (int w = 0; w < warp; ++w) at += warp_count[w];
    if (keep) list[at] = n | (c == BlockClass::partial ? BlockMaskLayout::kPartial : 0);
    written += warp_count[0] + warp_count[1] + warp_count[2] + warp_count[3];
    __syncthreads();
  }
  if (threadIdx.x == 0) counts[L.tile_index(b, m)] = written;
  // LAB-END(16-classify)
}

/// One work item as rung 16's roles see it: rung 15's, its K/V blocks a list.
struct MaskedItem {
  SeqSpan seq;
  int head, kv_head, batch, row0;
  const int* blocks;  ///< the tile's list (mods.h: block index | partial bit)
  int n_blocks;
};

/// The count of (sequence b, query tile m)'s list, from the workspace.
__device__ __forceinline__ int list_count(const AttnParams& p, const BlockMaskLayout& L, const Tile& t) {
  const uint8_t* ws = static_cast<const uint8_t*>(p.workspace);
  return reinterpret_cast<const int*>(ws + BlockMaskLayout::kCountsOffset)[L.tile_index(t.batch, t.m_block)];
}

/// Item @p t with its list of @p n_blocks entries (the count, read by the producer ahead of time).
__device__ __forceinline__ MaskedItem masked_item_of(const AttnParams& p, const BlockMaskLayout& L, const Tile& t,
                                                     int n_blocks) {
  MaskedItem it;
  it.seq = seq_span(p, t.batch);
  it.head = t.head;
  it.kv_head = t.head / p.group;
  it.batch = t.batch;
  it.row0 = t.m_block * 128;
  const uint8_t* ws = static_cast<const uint8_t*>(p.workspace);
  it.n_blocks = n_blocks;
  it.blocks = reinterpret_cast<const int*>(ws + L.lists_offset()) + L.tile_index(t.batch, t.m_block) * L.n_blocks;
  return it;
}

/// The item slot with the list's count in its fourth word (rung 15's put_tile leaves it 0): the
/// consumers read it from shared memory, not from the workspace.
__device__ __forceinline__ void put_item(uint32_t slot, const Tile& t, int n_blocks) {
  asm volatile("st.shared.v4.s32 [%0], {%1, %2, %3, %4};\n" ::"r"(slot), "r"(t.m_block), "r"(t.head), "r"(t.batch),
               "r"(n_blocks)
               : "memory");
}
__device__ __forceinline__ Tile get_item(uint32_t slot, int* n_blocks) {
  int4 v;
  asm volatile("ld.shared.v4.s32 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(slot)
               : "memory");
  *n_blocks = v.w;
  return {v.x, v.y, v.z};
}

/// Dropout on one S block after the softmax (FlashAttention §3.1: the mask regenerated, never
/// stored): the thread's elements of a 32-key block are exactly one Philox cell (dropout.h), so
/// one call per 16 elements. Blocks of 80 or 176 keys start at 16 mod 32 every other block: the
/// walk is compiled for both starts and picked once per block (warp-uniform). A dropped element's
/// P becomes 0; l keeps it (the LSE is the undropped one's).
template <int BLOCK_N, int ROUNDS>
__device__ __forceinline__ void dropout_block(float (&S)[BLOCK_N / 2], const DropoutKey& key, uint32_t bh,
                                              uint32_t row_cell, int key0, int t4) {
  static_assert(BLOCK_N % 16 == 0, "whole 16-key halves of a cell");
  if constexpr (BLOCK_N % 32 == 0) {
    dropout_fwd_fragment<BLOCK_N, 0, ROUNDS>(S, key, bh, row_cell, key0, t4);
  } else {
    if (key0 & 16) dropout_fwd_fragment<BLOCK_N, 1, ROUNDS>(S, key, bh, row_cell, key0, t4);
    else dropout_fwd_fragment<BLOCK_N, 0, ROUNDS>(S, key, bh, row_cell, key0, t4);
  }
}

/// Rung 16's forward: rung 15's persistent kernel on the block lists. MASK gives each row's span,
/// SCORE the score modifiers (mods.h); a sink, when p.sinks is set, joins the epilogue's l. DROP
/// (PDropout<true>) zeroes the dropped elements of P after each block's softmax and scales O.
/// EXP2 computes the softmax's exponentials (rung 10's Ex2Mufu; Ex2Split moves part of them to
/// the FMA pipe: the `softcap-exp-fma` study).
template <class T, class Cfg, class MASK, class SCORE, class DROP = PDropout<false>, class EXP2 = hopper10::Ex2Mufu>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    masked_fwd_kernel(const __grid_constant__ CUtensorMap map_q, const __grid_constant__ CUtensorMap map_k,
                      const __grid_constant__ CUtensorMap map_v, const AttnParams p, const TileScheduler sched,
                      const BlockMaskLayout L, const MASK mask, const SCORE score_in, const DROP drop) {
  constexpr int D = Cfg::kHeadDimV;  // O's columns: V's head_dim (Q's and K's: Cfg::kHeadDim)
  constexpr int BLOCK_N = Cfg::kBlockN;
  constexpr int STAGES = Cfg::kStages;
  constexpr int PV_STEPS = BLOCK_N / 16;
  static_assert(Cfg::kQBufs == 1, "one Q tile");

  const int tid = threadIdx.x;
  const int wg_idx = warpgroup_index();  // 0: producer, 1 and 2: consumers

  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const hopper15::Smem<Cfg> sm(smem_raw);
  if (tid == 0) {
    hopper10::start_up(sm, &map_q, &map_k, &map_v);
    mbarrier_init(sm.q_empty(0), hopper10::kConsumerThreads);
    fence_mbarrier_init();
  }
  __syncthreads();

  if (wg_idx == 0) {
    // ---- producer: rung 15's, each item's K/V blocks from its list ----------------------------
    setmaxnreg_dec<hopper10::kProducerRegs>();
    if (tid != 0) return;
    hopper15::Cursor cursor;
    Tile tile;
    int t = blockIdx.x;
    bool more = hopper15::locate(sched, t, &cursor, &tile);
    // The next item's count is read as soon as the item is claimed: its load is in flight while
    // the consumers finish this one, not on the path from "Q empty" to the next copies.
    int count = more ? list_count(p, L, tile) : 0;
    int first = more ? masked_item_of(p, L, tile, 0).blocks[0] : 0;  // read even when count is 0: the list has room
    int kv_iter = 0;
    for (int n_item = 0, round = 0;; ++n_item) {
      mbarrier_wait_parity(sm.q_empty(0), (n_item & 1) ^ 1);
      if (!more) {
        put_item(sm.item_slot(0), Tile{-1, 0, 0}, 0);
        mbarrier_arrive(sm.q_full(0));
        break;
      }
      put_item(sm.item_slot(0), tile, count);
      const MaskedItem it = masked_item_of(p, L, tile, count);
      const hopper10::TileLoads<Cfg> load{&map_q, &map_k, &map_v, it.head, it.kv_head, it.seq.q0 + it.row0, it.seq.batch};
      mbarrier_arrive_expect_tx(sm.q_full(0), Cfg::kQBytes);
      load.q(sm.q_tile(0), sm.q_full(0));
      // LAB-BEGIN(16-producer): only the listed blocks are loaded
      // [same-code: 15-producer]
      int entry = first;
#pragma unroll 1
      for (int n = 0; n < it.n_blocks; ++n, ++kv_iter) {
        const int following = n + 1 < it.n_blocks ? it.blocks[n + 1] : 0;  // in flight during the waits
        const int s = kv_iter % STAGES;
        const uint32_t refill_parity = ((kv_iter / STAGES) & 1) ^ 1;
        const int key0 = it.seq.k0 + BlockMaskLayout::block_of(entry) * BLOCK_N;
        mbarrier_wait_parity(sm.k_empty(s), refill_parity);
        mbarrier_arrive_expect_tx(sm.k_full(s), Cfg::kKBytes);
        load.k(sm.K_s + s * Cfg::kKBytes, sm.k_full(s), key0);
        mbarrier_wait_parity(sm.v_empty(s), refill_parity);
        mbarrier_arrive_expect_tx(sm.v_full(s), Cfg::kVBytes);
        load.v(sm.V_s + s * Cfg::kVBytes, sm.v_full(s), key0);
        entry = following;
      }
      // LAB-END(16-producer)
      t = sched.dynamic ? static_cast<int>(gridDim.x) + atomicAdd(sched.counter, 1)
                        : hopper15::static_item(blockIdx.x, ++round, gridDim.x);
      more = t >= 0 && hopper15::locate(sched, t, &cursor, &tile);
      if (more) {
        count = list_count(p, L, tile);
        first = masked_item_of(p, L, tile, 0).blocks[0];
      }
    }
    return;
  }

  // ---- consumers ------------------------------------------------------------------------------
  setmaxnreg_inc<hopper10::kConsumerRegs>();
  const int c = wg_idx - 1;
  const int warp = (tid % kWarpgroupThreads) / 32;
  const int lane = tid % 32;
  const int g = lane / 4;
  const int t4 = lane % 4;
  const bool leader = (tid % kWarpgroupThreads) == 0;
  // Without a score modifier, rung 15's fused scale; with one, S is in log2 units before the softmax.
  const float scale_log2 = SCORE::kAny ? 1.f : p.scale_log2;
  hopper15::Turns<true> turn(c);

  float O_acc[D / 2];
  float m_i[2], l_i[2], alpha[2];
  uint32_t P_frag[PV_STEPS][4];
  int kv_iter = 0;

  auto issue_qk = [&](float (&S)[BLOCK_N / 2], int i) { hopper10::issue_qk_block<T, Cfg>(sm, c, S, i); };
  auto issue_pv = [&](int i) { hopper10::issue_pv_block<T, Cfg>(sm, O_acc, P_frag, i); };
  auto rescale_and_pack = [&](float (&S)[BLOCK_N / 2]) { hopper10::rescale_and_pack_p<T, Cfg>(O_acc, P_frag, S, alpha); };
  auto release_q = [&] { mbarrier_arrive(sm.q_empty(0)); };
  const int no_mask[2] = {0, 0};  // softmax_block's own mask is off: the span mask ran before it

#pragma unroll 1
  for (int n_item = 0;; ++n_item) {
    mbarrier_wait_parity(sm.q_full(0), n_item & 1);
    int count;
    const Tile tile = get_item(sm.item_slot(0), &count);
    if (tile.m_block < 0) break;
    const MaskedItem it = masked_item_of(p, L, tile, count);
    const int n_blocks = it.n_blocks;
    const int i0 = kv_iter;
    kv_iter += n_blocks;

    int lo[2], hi[2];  // the row's span, minus this lane's first column
    float diag[2];     // (i + len_k - len_q) - this lane's first column: ALiBi's distance at key 0
    SCORE score = score_in;
    // LAB-BEGIN(16-rows): each of this thread's two rows: its span, its distance from the diagonal
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int row = it.row0 + 64 * c + 16 * warp + g + 8 * h;
      const KeySpan s = mask.span(it.seq.len_q, it.seq.len_k, row);
      lo[h] = s.lo - 2 * t4;
      hi[h] = s.hi - 2 * t4;
      diag[h] = static_cast<float>(row + it.seq.len_k - it.seq.len_q - 2 * t4);
    }
    if constexpr (SCORE::kAlibi)
      score.slope = alibi_slope_of(p.alibi_slopes, p.alibi_batch_stride, it.batch, it.head, p.heads_q);
    // LAB-END(16-rows)
    // Dropout's coordinates: (sequence, head) and the row cell of the thread's two rows (g, g + 8
    // of its warp's 16: one cell row) within the sequence.
    const uint32_t drop_bh = static_cast<uint32_t>(it.batch) * p.heads_q + it.head;
    const uint32_t drop_row_cell = dropout_row_cell(it.row0 + 64 * c + 16 * warp + g);

    auto mask_and_softmax = [&](float (&S)[BLOCK_N / 2], int entry) {
      // LAB-BEGIN(16-mask): score_mod on every block, the span on partial ones, then the softmax
      const int key0 = BlockMaskLayout::block_of(entry) * BLOCK_N;
      if constexpr (SCORE::kAny) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float d0 = diag[h] - static_cast<float>(key0);
#pragma unroll
          for (int j = 0; j < BLOCK_N / 8; ++j)
#pragma unroll
            for (int e = 0; e < 2; ++e)
              S[4 * j + 2 * h + e] = score(S[4 * j + 2 * h + e], d0 - static_cast<float>(8 * j + e));
        }
      }
      if (BlockMaskLayout::partial(entry)) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int lo_b = lo[h] - key0, hi_b = hi[h] - key0;
#pragma unroll
          for (int j = 0; j < BLOCK_N / 8; ++j)
#pragma unroll
            for (int e = 0; e < 2; ++e)
              if (8 * j + e > hi_b || (MASK::kLower && 8 * j + e < lo_b)) S[4 * j + 2 * h + e] = -INFINITY;
        }
      }
      // LAB-END(16-mask)
      hopper10::softmax_block<BLOCK_N, 0, EXP2>(S, m_i, l_i, alpha, scale_log2, false, 0, no_mask);
      // The key is read from the device state per block (16 bytes in L1): held over the loop it
      // took registers that O and S need at d = 256.
      if constexpr (DROP::kOn)
        dropout_block<BLOCK_N, DROP::kRounds>(S, dropout_key(drop.params), drop_bh, drop_row_cell,
                               BlockMaskLayout::block_of(entry) * BLOCK_N, t4);
    };

#pragma unroll
    for (int i = 0; i < D / 2; ++i) O_acc[i] = 0.f;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      m_i[h] = -INFINITY;
      l_i[h] = 0.f;
    }
    auto s_landed = [&](float (&S)[BLOCK_N / 2], int n) {
      wgmma_fence_operand(S);
      if (leader) mbarrier_arrive(sm.k_empty((i0 + n) % STAGES));
      if (n == n_blocks - 1) release_q();
    };
    auto pv_done = [&](int n) {
      wgmma_wait<0>();
      wgmma_fence_operand(O_acc);
      if (leader) mbarrier_arrive(sm.v_empty((i0 + n) % STAGES));
    };

    // LAB-BEGIN(16-mainloop): rung 15's loop, each block's entry from the list
    // [same-code: 15-mainloop]
    if (n_blocks > 0) {
      float S[BLOCK_N / 2];
      int entry = it.blocks[0];
      turn.begin();
      issue_qk(S, i0);
      turn.end();
      int next = n_blocks > 1 ? it.blocks[1] : 0;  // read under the GEMM
      wgmma_wait<0>();
      s_landed(S, 0);
      mask_and_softmax(S, entry);
      rescale_and_pack(S);
#pragma unroll 1
      for (int n = 1; n < n_blocks; ++n) {
        float S_next[BLOCK_N / 2];
        entry = next;
        turn.begin();
        issue_qk(S_next, i0 + n);
        issue_pv(i0 + n - 1);
        turn.end();
        if (n + 1 < n_blocks) next = it.blocks[n + 1];
        wgmma_wait<1>();
        s_landed(S_next, n);
        mask_and_softmax(S_next, entry);
        pv_done(n - 1);
        rescale_and_pack(S_next);
      }
      turn.begin();
      issue_pv(i0 + n_blocks - 1);
      turn.end();
      pv_done(n_blocks - 1);
    } else {
      release_q();
    }
    // LAB-END(16-mainloop)

    // ---- epilogue: rung 15's, the sink in l, the LSE from log2 units --------------------------
    // LAB-BEGIN(16-epilogue): the sink joins the denominator; O / l and the LSE
    // [same-code: 15-epilogue]
    T* O_gmem = static_cast<T*>(p.o) + it.seq.batch * p.o_batch_stride + it.head * p.o_head_stride;
    float* lse_gmem = p.lse + lse_offset(p, it.seq, it.batch, it.head);
    const float m_unit = SCORE::kAny ? 1.f : p.scale_log2;  // m_i x m_unit: the max in log2 units
    const float sink = p.sinks != nullptr ? p.sinks[it.head] * kLog2e : -INFINITY;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float l = ptx::quad_sum(l_i[h]);
      float m2 = m_i[h] == -INFINITY ? -INFINITY : m_i[h] * m_unit;
      float o_scale = 1.f;
      if (p.sinks != nullptr) {  // l + e^(sink - m), computed from the larger of the two
        const float mx = fmaxf(m2, sink);
        o_scale = ptx::ex2_approx(m2 - mx);
        l = l * o_scale + ptx::ex2_approx(sink - mx);
        m2 = mx;
      }
      // Dropout's 1 / (1 - p) joins 1 / l: O = (P ∘ M) V / (l (1 - p)).
      const float inv_l = (l > 0.f) ? (DROP::kOn ? drop.params.rp : 1.f) * o_scale / l : 0.f;
      const int row = it.row0 + 64 * c + 16 * warp + g + 8 * h;
      const bool in_seq = row < it.seq.len_q;
      const int token = it.seq.q0 + row;
      store_o_row16<T, D>(O_gmem + token * p.o_row_stride, O_acc, h, inv_l, t4, in_seq, p.dv());
      if (!in_seq) continue;
      if (float* o32_row = o_fp32_row(p, it.seq.batch, token, it.head)) {
#pragma unroll
        for (int j = 0; j < D / 8; ++j)
          if (8 * j < p.dv())
            *reinterpret_cast<float2*>(o32_row + 8 * j + 2 * t4) =
                make_float2(O_acc[4 * j + 2 * h] * inv_l, O_acc[4 * j + 2 * h + 1] * inv_l);
      }
      if (t4 == 0) lse_gmem[row] = (l > 0.f) ? m2 * kLn2 + logf(l) : -INFINITY;
    }
    // LAB-END(16-epilogue)
  }
  turn.finish();
}

// ---- host side ----------------------------------------------------------------------------------

/// The MaskSpec of a launch (masks.h's make_mask_spec, the causal mask folded in).
inline MaskSpec mask_spec_of(const AttnParams& p) {
  return make_mask_spec(p.causal != 0, p.window_left, p.window_right, p.prefix, p.doc_starts, p.n_docs);
}
/// True when the spec bounds some row's keys from the right (a longer tile sees more keys: LPT).
inline bool grows_with_rows(const MaskSpec& m) { return m.window_right >= 0 || m.prefix > 0 || m.doc_starts != nullptr; }

template <class T, class Cfg, class MASK, class SCORE, class DROP = PDropout<false>, class EXP2 = hopper10::Ex2Mufu>
const void* prepared_masked_kernel() {
  static const bool once = [] {
    FL_CUDA_CHECK(cudaFuncSetAttribute(masked_fwd_kernel<T, Cfg, MASK, SCORE, DROP, EXP2>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes));
    return true;
  }();
  (void)once;
  return reinterpret_cast<const void*>(&masked_fwd_kernel<T, Cfg, MASK, SCORE, DROP, EXP2>);
}

template <class Cfg>
BlockMaskLayout layout_of(const AttnParams& p) {
  return block_mask_layout(p.cu_seqlens_q != nullptr || p.seqused_k != nullptr, p.batch, p.seqlen_q, p.seqlen_k, Cfg::kBlockM, Cfg::kBlockN);
}

template <class T, class Cfg, class MASK, class SCORE, class DROP = PDropout<false>, class EXP2 = hopper10::Ex2Mufu>
void launch_masked_with(const AttnParams& p, const MASK& mask, const SCORE& score, Classify mode, cudaStream_t stream,
                        const DROP& drop = DROP{}) {
  prepared_masked_kernel<T, Cfg, MASK, SCORE, DROP, EXP2>();
  const bool packed = p.cu_seqlens_q != nullptr;
  if (packed && p.total_q == 0) return;
  const BlockMaskLayout L = layout_of<Cfg>(p);
  if (p.workspace == nullptr || p.workspace_bytes < L.bytes())
    throw std::runtime_error("rung 16: the block mask needs its workspace (Rung::workspace_bytes)");
  classify_kernel<MASK, Cfg::kBlockM, Cfg::kBlockN>
      <<<dim3(L.m_tiles, L.sequences), Cfg::kBlockM, 0, stream>>>(p, mask, L, static_cast<int>(mode));
  FL_LAUNCH_CHECK("classify_kernel");

  const DType dt = static_cast<DType>(p.dtype);
  const CUtensorMap map_q = make_tma_map_tokens(dt, p, false, p.q, p.q_batch_stride, p.q_row_stride, p.q_head_stride,
                                                Cfg::kBlockM, p.q);
  const CUtensorMap map_k = make_tma_map_tokens(dt, p, true, p.k, p.k_batch_stride, p.k_row_stride, p.k_head_stride,
                                                Cfg::kBlockN, p.q);
  // V at its own head_dim (MLA's 192/128): the columns of the tile past it come in as zeros, and O's
  // columns past it, zero, are not stored (the epilogue's cols).
  const CUtensorMap map_v = make_tma_map_tokens(dt, p, true, p.v, p.v_batch_stride, p.v_row_stride, p.v_head_stride,
                                                Cfg::kBlockN, p.q, p.dv());
  const MaskSpec spec = mask_spec_of(p);
  TileScheduler sched = hopper15::make_scheduler<Cfg>(p, true, true);
  sched.lpt = grows_with_rows(spec);
  sched.dynamic = true;  // items of unequal cost under every mask but none; the counter is cheap
  const int blocks = std::min(sched.dense_total(), hopper15::sm_count_cached());
  masked_fwd_kernel<T, Cfg, MASK, SCORE, DROP, EXP2>
      <<<blocks, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(map_q, map_k, map_v, p, sched, L, mask, score, drop);
  FL_LAUNCH_CHECK("masked_fwd_kernel");
}

/// Calls f(mask functor, score functor type tag) for a launch's mask and modifiers: CausalMask for
/// the plain causal mask, SpanMask for every other; ScoreMod<softcap?, ALiBi?>.
template <class F>
void with_mods(const AttnParams& p, F&& f) {
  const MaskSpec spec = mask_spec_of(p);
  auto with_mask = [&](auto score) {
    if (is_plain_causal(spec)) f(CausalMask{}, score);
    else f(SpanMask{spec}, score);
  };
  const float cap = p.softcap;
  if (cap > 0 && p.alibi) with_mask(ScoreMod<true, true>{p.softmax_scale / cap, cap * kLog2e, 0.f});
  else if (cap > 0) with_mask(ScoreMod<true, false>{p.softmax_scale / cap, cap * kLog2e, 0.f});
  else if (p.alibi) with_mask(ScoreMod<false, true>{p.scale_log2, 0.f, 0.f});
  else with_mask(ScoreMod<false, false>{p.scale_log2, 0.f, 0.f});
}

/// Calls f(mask functor, score functor, PDropout) for a launch on the tiles Cfg (CAUSAL_TILES:
/// rung 15's causal tiles): with_mods' without dropout. With it, softcap is not built (rung 16's
/// supports refuses it, as FlashAttention 2 does): no score modifier with only the masks those
/// tiles run (with_tiles_of: the dense tiles take no mask), or ALiBi with the span mask alone (the
/// plain causal mask is one of its specs; CausalMask would save one comparison per element of the
/// partial blocks, the diagonal's, for one more kernel). So dropout adds five kernels per head_dim
/// and dtype, not with_mods' sixteen: three without a modifier, two with ALiBi (the span mask on
/// each tile set); the `--dropout-rounds 10` ablation's generator (PDropout<true, 10>) three more,
/// without a modifier.
template <bool CAUSAL_TILES, class F>
void with_mods_and_dropout(const AttnParams& p, F&& f) {
  if (p.dropout.p <= 0.f) {
    with_mods(p, [&](auto mask, auto score) { f(mask, score, PDropout<false>{}); });
    return;
  }
  if (p.softcap > 0) throw std::runtime_error("rung 16: dropout with softcap is not built");
  const MaskSpec spec = mask_spec_of(p);
  // No score modifier: the masks the tiles run (the dense tiles take the span mask alone).
  auto unmodified = [&](auto drop) {
    const ScoreMod<false, false> score{p.scale_log2, 0.f, 0.f};
    if constexpr (CAUSAL_TILES) {
      if (is_plain_causal(spec)) f(CausalMask{}, score, drop);
      else f(SpanMask{spec}, score, drop);
    } else {
      f(SpanMask{spec}, score, drop);
    }
  };
  if (p.dropout.rounds == 10) {  // the ablation's generator: without a modifier only
    if (p.alibi) throw std::runtime_error("rung 16: the 10-round dropout ablation is built without ALiBi");
    unmodified(PDropout<true, 10>{p.dropout});
    return;
  }
  const PDropout<true> drop{p.dropout};
  if (p.alibi) {
    f(SpanMask{spec}, ScoreMod<false, true>{p.scale_log2, 0.f, 0.f}, drop);
    return;
  }
  unmodified(drop);
}

}  // namespace fl::masks16
