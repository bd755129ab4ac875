/// @file steps/14_hopper_backward/traits.h
/// @brief Rung 14's tiles: one block per (K/V block of 128 keys, KV head or a slice of its group,
/// batch); two math warpgroups of 64 keys each, and (warp-specialized) a producer warpgroup whose
/// warp 0 loads and warp 1 writes dQ. Plain C++ (no CUDA), so the CPU tests check the budgets.
///
/// @code
///   // clang-format off
///   per math warpgroup (64 keys)          registers per thread (fp32 accumulators)
///     dK_j, dV_j   64 x d each            d / 2 each              kept over the whole block
///     S^T, dP^T    64 x BLOCK_M each      BLOCK_M / 2 each        one query block at a time
///     dQ share     64 x 64                32                      after S^T, dP^T are packed
///   shared memory
///     K_j, V_j     128 x d (16-bit)       loaded once by TMA
///     Q_i, dO_i    BLOCK_M x d, STAGES    the producer's ring
///     dS^T         128 x BLOCK_M, 2       written by the math warps (dQ = dS K_j reads it)
///     P^T          128 x BLOCK_M          the ss-dkv ablation only (dV from shared memory)
///     dQ_i         BLOCK_M x d fp32       the math warps' share of dQ_i, for the writer warp
///     LSE_i, D_i   BLOCK_M fp32, STAGES   with Q_i and dO_i
///   // clang-format on
/// @endcode
/// The tiles per head_dim, from the register budget (no other tile has been timed yet):
///   d = 64:  BLOCK_M = 128. S^T and dP^T are 64 registers each, dK and dV 32: the wide query block
///            halves the K/V blocks' dQ traffic per key (FA3: 128 x 128 at d = 64 too). 192
///            accumulators leave the math warps one register short when every thread releases its
///            stage (README, "Registers").
///   d = 128: BLOCK_M = 64. dK and dV alone are 128 registers per thread; S^T and dP^T of 64 queries
///            (32 each) fit beside them in 240 (FA3: 64 x 128 under a causal mask; its 80-query
///            block without the mask does not fit this layout's 64-column swizzle blocks).
///   d = 256: dK and dV of 64 keys by the keys-as-M layout would be 256 registers per thread. So the
///            block computes dK^T = Q^T dS and dV^T = dO^T P instead (FA3's "dKV_swapAB"): head_dim
///            is wgmma's M, each math warpgroup owns 128 of the 256 dims of all 64 keys of the
///            block (64 + 64 registers), and S^T, dP^T (64 keys x 32 queries per warpgroup) and
///            dQ (64 queries x 128 dims) fit beside them. P^T and dS^T go through shared memory
///            (the B operands). Shared memory sets the rest: K, V, Q, dO of 64 x 256 are 32 KB
///            each and the fp32 dQ tile 64 KB, so one stage of Q, dO (217 KB in all); the stage is
///            released in two halves (Q after dK^T, dO after dV^T) so the next loads start while
///            dV^T and dQ run. FA3 uses 64 x 80 here (its dQ path differs).
#pragma once

#include "flashladder/types.h"  // FL_HD

namespace fl::hopper14 {

/// Registers per thread after setmaxnreg: the producer warpgroup (loads and dQ writes only) and
/// the two math warpgroups.
constexpr int kProducerRegs = 24;
constexpr int kMathRegs = 240;
static_assert(128 * kProducerRegs + 2 * 128 * kMathRegs <= 65536, "the three warpgroups fit one SM's registers");

/// The 227 KB of shared memory an sm_90 block may opt in to.
constexpr int kSmemOptin = 227 * 1024;

/// Keys per K/V block at head_dim @p d: 128 (two warpgroups of 64 keys as wgmma's M), 64 at
/// d = 256 (head_dim as M for dK^T, dV^T; see the file comment).
constexpr int kv_block_keys(int d) { return d > 128 ? 64 : 128; }

/// One configuration of the kernel. WS: a producer warpgroup (else the math warps issue their own
/// loads and dQ adds: the `no-ws` ablation); STAGES: the Q/dO ring's depth; DS_BUFS: dS^T tiles
/// (2 lets a warpgroup write the next one while the other still reads the last); P_SMEM: P^T
/// through shared memory for the `ss-dkv` ablation (and always at d = 256, where it is dV^T's B);
/// FP8_DQ: dQ = dS K on e4m3 wgmma (rung 18's first GEMM: README, "dQ in e4m3"): K_j^T transposed
/// into e4m3 once per block, dS written [query][key] in e4m3, both in 128-byte K-major rows
/// (d = 64 and 128: 128 keys per block); dS with a scale per query row (kFp8DqRow: the `fp8-dq`
/// variant) or one per tile (kFp8DqTile: the `fp8-dq-tile` ablation). PERSISTENT: one
/// block per SM takes the grid's K/V blocks from a tile counter (the rung's grid on short rows,
/// rung_grid_persistent below; README, "A persistent grid"), the producer loading the next K/V
/// block while the math warps write the last one's dK, dV.
/// BwdTiles' FP8_DQ: 16-bit dQ, or dQ on e4m3 with dS scaled per tile or per query row.
constexpr int kFp8DqOff = 0, kFp8DqTile = 1, kFp8DqRow = 2;

template <int HEAD_DIM, int BLOCK_M, int STAGES = 2, bool WS = true, int DS_BUFS = 2, bool P_SMEM = false,
          int FP8_DQ = kFp8DqOff, bool PERSISTENT = false>
struct BwdTiles {
  static constexpr int kHeadDim = HEAD_DIM;
  static constexpr int kBlockM = BLOCK_M;  ///< queries per step
  static constexpr int kBlockN = kv_block_keys(HEAD_DIM);  ///< keys per block
  static constexpr int kStages = STAGES;
  static constexpr bool kWarpSpecialized = WS;
  static constexpr int kDsBufs = DS_BUFS;
  static constexpr bool kPSmem = P_SMEM;
  static constexpr bool kFp8Dq = FP8_DQ != kFp8DqOff;
  static constexpr bool kDsRowScale = FP8_DQ == kFp8DqRow;  ///< fp8-dq: dS's scale per query row
  static constexpr bool kPersistent = PERSISTENT;
  /// d = 256: dK^T, dV^T with head_dim as wgmma's M (the file comment).
  static constexpr bool kDkvT = HEAD_DIM > 128;
  static constexpr int kMathThreads = 256;
  static constexpr int kThreads = WS ? 384 : 256;
  static constexpr int kColBlocks = HEAD_DIM / 64;  ///< 64-column TMA boxes of a head_dim row
  /// A warpgroup's S^T and dP^T: keys kSKey0(w).. (64 rows, wgmma's M) by queries kSCol0(w)..
  /// (kSN columns): 64 keys each and all BLOCK_M queries, or at d = 256 all 64 keys and half the
  /// queries.
  static constexpr int kSN = kDkvT ? BLOCK_M / 2 : BLOCK_M;
  static constexpr int kSKey0(int w) { return kDkvT ? 0 : 64 * w; }
  static constexpr int kSCol0(int w) { return kDkvT ? kSN * w : 0; }
  /// A warpgroup's dK and dV: kDkvTiles accumulators of m64 x kDkvN each: 64 keys x d, or at
  /// d = 256 two of 64 dims x 64 keys (dims 128 w .. 128 w + 127).
  static constexpr int kDkvTiles = kDkvT ? HEAD_DIM / 2 / 64 : 1;
  static constexpr int kDkvN = kDkvT ? kBlockN : HEAD_DIM;
  /// dQ_i = dS K_j (BLOCK_M x d) is split between the two math warpgroups by query rows when
  /// BLOCK_M = 128 (64 rows each, all of d), else by columns (all 64 rows, d / 2 columns each):
  /// each warpgroup's share is one 64 x kDqN wgmma.
  static constexpr bool kDqSplitRows = BLOCK_M == 128;
  static constexpr int kDqN = kDqSplitRows ? HEAD_DIM : HEAD_DIM / 2;
  static constexpr int kDqRegs = kDqN / 2;  ///< fp32 registers of a thread's dQ share
  // Bytes of each tile.
  static constexpr int kKBytes = kBlockN * HEAD_DIM * 2;
  static constexpr int kQBytes = BLOCK_M * HEAD_DIM * 2;
  static constexpr int kDsBytes = kBlockN * BLOCK_M * 2;
  static constexpr int kDqBytes = BLOCK_M * HEAD_DIM * 4;
  static constexpr int kRowStatBytes = BLOCK_M * 4;  ///< LSE_i or D_i
  // Offsets from the first 1024-byte boundary of the dynamic shared memory.
  static constexpr int kK = 0, kV = kKBytes, kQ = 2 * kKBytes, kDO = kQ + STAGES * kQBytes;
  static constexpr int kDS = kDO + STAGES * kQBytes;
  static constexpr int kP = kDS + DS_BUFS * kDsBytes;
  static constexpr int kDQ = kP + (P_SMEM ? kDsBytes : 0);
  /// FP8_DQ: K_j^T in e4m3, [HEAD_DIM rows][BLOCK_N keys] (128-byte rows, 128B-swizzled); the
  /// dS tiles then hold dS in e4m3, [BLOCK_M rows][BLOCK_N keys], in the 16-bit tiles' place.
  static constexpr int kKtBytes = kFp8Dq ? HEAD_DIM * kBlockN : 0;
  static constexpr int kKt = kDQ + kDqBytes;
  static constexpr int kLse = kKt + kKtBytes, kDelta = kLse + STAGES * kRowStatBytes;
  /// Q and dO released apart (d = 256: Q after dK^T, dO after dV^T), else together.
  static constexpr bool kSplitRelease = kDkvT;
  /// FP8_DQ: the 8 math warps' |max| of K_j (one row of 8 floats); per tile, then the |max| of
  /// each dS tile (a row per buffer); per query row, then each warp's |max| of each query row of the
  /// step's dS ([8 warps][BLOCK_M], 16-bit), and the rows' scales and their inverses (BLOCK_M
  /// floats each).
  static constexpr int kAmax = kDelta + STAGES * kRowStatBytes;
  static constexpr int kAmaxBytes = !kFp8Dq ? 0 : kDsRowScale ? 8 * 4 : (1 + DS_BUFS) * 8 * 4;
  static constexpr int kDsWarpMax = kAmax + kAmaxBytes;
  static constexpr int kDsWarpMaxBytes = kDsRowScale ? 8 * BLOCK_M * 2 : 0;
  static constexpr int kDsScale = kDsWarpMax + kDsWarpMaxBytes, kDsInv = kDsScale + BLOCK_M * 4;
  static constexpr int kDsScaleBytes = kDsRowScale ? 2 * BLOCK_M * 4 : 0;
  /// PERSISTENT: the two slots of the tile ring (the producer's next K/V blocks, one int each).
  static constexpr int kTileSlots = kDsScale + kDsScaleBytes;
  static constexpr int kTileSlotBytes = PERSISTENT ? 16 : 0;
  /// mbarriers: K and V, then per stage "Q landed", "dO landed", "stage (Q) free", "dO free";
  /// PERSISTENT: then "K and V free" (the math warps done with the last K/V block), and per tile
  /// slot "tile published", then per slot "tile read".
  static constexpr int kBars = kTileSlots + kTileSlotBytes;
  static constexpr int kKvEmptyBar = 1 + (kSplitRelease ? 4 : 3) * STAGES;
  static constexpr int kBarCount = kKvEmptyBar + (PERSISTENT ? 5 : 0);
  static constexpr int kSmemBytes = kBars + 8 * kBarCount + 1024;  // + alignment slack
  /// fp32 registers a math thread holds for dK and dV together.
  static constexpr int kDkvRegs = 2 * kDkvTiles * kDkvN / 2;

  static_assert(HEAD_DIM == 64 || HEAD_DIM == 128 || HEAD_DIM == 256, "rung 14's tiles: head_dim 64, 128 or 256");
  static_assert(BLOCK_M == 64 || BLOCK_M == 128, "a query block of one or two 64-column swizzle blocks");
  static_assert(kDqN == 64 || kDkvT, "each warpgroup's dQ share is 64 x 64 (one m64n64 wgmma per 16 keys)");
  static_assert(!kDkvT || (BLOCK_M == 64 && P_SMEM), "d = 256: 64 queries, P^T from shared memory");
  static_assert(FP8_DQ == kFp8DqOff || FP8_DQ == kFp8DqTile || FP8_DQ == kFp8DqRow, "FP8_DQ: off, tile or row");
  static_assert(!kFp8Dq || (!kDkvT && !P_SMEM && kBlockN == 128),
                "fp8-dq: d = 64 and 128, dS^T from registers for dK, 128-byte e4m3 rows of keys");
  static_assert(!kFp8Dq || BLOCK_M * kBlockN <= kDsBytes, "the e4m3 dS tile fits the 16-bit one's place");
  static_assert(!PERSISTENT || WS, "persistent: the producer warpgroup loads the next K/V block");
  static_assert(kSmemBytes <= kSmemOptin, "must fit the 227 KB of an sm_90 block");
  static_assert(kDkvRegs + kSN <= kMathRegs - 48,
                "dK, dV and S^T, dP^T (kSN / 2 each) fit the math registers");
  static_assert(kDkvRegs + kDqRegs <= kMathRegs - 48, "dK, dV and the dQ share fit the math registers");
};

/// The rung's query block per head_dim (see the file comment), and its tiles.
constexpr int query_block_rows(int d) { return d == 64 ? 128 : 64; }
template <int HEAD_DIM>
constexpr int kRungBlockM = query_block_rows(HEAD_DIM);
template <int HEAD_DIM>
constexpr int kRungStages = HEAD_DIM == 256 ? 1 : 2;
template <int HEAD_DIM>
using RungTiles = BwdTiles<HEAD_DIM, kRungBlockM<HEAD_DIM>, kRungStages<HEAD_DIM>, true, 2, HEAD_DIM == 256>;
/// The rung's tiles on its persistent grid (rung_grid_persistent below; d = 64 and 128).
template <int HEAD_DIM>
using RungPersistentTiles =
    BwdTiles<HEAD_DIM, kRungBlockM<HEAD_DIM>, kRungStages<HEAD_DIM>, true, 2, HEAD_DIM == 256, kFp8DqOff, true>;

/// The rung's grid (README, "A persistent grid"): one block per SM walking the K/V blocks
/// (RungTiles with PERSISTENT; the `persistent` variant at every length) on rows of at most
/// persistent_max_queries(d) queries (the longest sequence of a packed batch), else one block per
/// K/V block (the `tile-grid` ablation at every length). The bounds are the longest rows where the
/// persistent grid was measured faster on the H200: 4096 queries at d = 64 (3 to 9 % faster, 512 to
/// 4096 queries), 1024 at d = 128 (1 to 4 % at 512 and 1024; at 2048 within 2 % either way, and
/// 1 % slower from 4096 on); never at d = 256, where it is not built.
constexpr int persistent_max_queries(int head_dim) { return head_dim == 64 ? 4096 : head_dim == 128 ? 1024 : 0; }
constexpr bool rung_grid_persistent(int head_dim, int seqlen_q) {
  return persistent_max_queries(head_dim) > 0 && seqlen_q <= persistent_max_queries(head_dim);
}

/// The rung's section of the causal grid's longest-first order, in groups (grid_coords): the
/// schedule model's choice (bench/studies/rung14_lpt_model.py): 8 groups reach 0.97-1.00 of a
/// perfect schedule on the shapes measured while a group keeps 8.6 or more blocks running at once.
/// Measured on the H200 (README, "Longest first"): 1.02 to 1.19x the rate of the K/V block fastest
/// on causal rows of 2k to 8k queries at d = 64 and 128, MHA kept, where lpt-grid, one section,
/// lost 29 % on MHA.
constexpr int kRungLptSection = 8;
/// Longest first only where a section's query heads' Q and dO rows, in 16-bit types, fit
/// kLptRowsBudget (32 MiB, two thirds of the H100's and H200's 50 MiB L2), else the K/V block
/// fastest (x-order). Beyond it, on the H200 (README, "Longest first"), sections of 8 ran 0.92 to
/// 1.01x x-order's rate (MHA 0.92 to 0.95x), sections of 4 and 2 0.86 to 1.04x. Our reading,
/// neither part measured alone: the longest walks are a small part of a grid of that many waves,
/// and spreading the running blocks over more heads reads their rows again from HBM.
constexpr int64_t kLptRowsBudget = int64_t(32) << 20;
/// The rung's section for rows of @p seqlen_q queries (the longest sequence's) at @p head_dim:
/// kRungLptSection where that many query heads' Q and dO rows fit kLptRowsBudget, else 0 (the
/// K/V block fastest).
constexpr int rung_lpt_section(int64_t seqlen_q, int head_dim) {
  const int64_t head_rows = seqlen_q * head_dim * 2 * 2;  // Q and dO, 2 bytes an element
  return head_rows * kRungLptSection <= kLptRowsBudget ? kRungLptSection : 0;
}

/// Whether a launch takes the grid longest first (grid_coords with @p section): a section asked
/// for, under rung 14's causal mask (not rung 16's spans), not deterministic (its counters' turns
/// follow the launch), on the grid of one block per K/V block with the warp roles (the persistent
/// grid keeps its tile order). launch_bwd.cuh decides by it; the runner's report says it.
constexpr bool lpt_order(int section, bool persistent, bool warp_roles, bool spans, bool causal, bool deterministic) {
  return section > 0 && !persistent && warp_roles && !spans && causal && !deterministic;
}

/// A block's grid coordinates: x the K/V block, y the KV head and slice, z the batch.
struct GridCoord {
  int x, y, z;
};

/// The grid coordinates of linear index @p t of an X x Y x Z grid: x fastest (the hardware's order
/// of a grid's blocks), or, with @p section > 0, longest first within sections of that many of the
/// Y x Z groups: in a section x slowest, so that under a causal mask every group's K/V block 0 goes
/// out before any block 1 (a list schedule's longest-processing-time rule, which leaves no group's
/// block 0 to start last and end the kernel alone), while a section's groups, few enough, keep
/// several blocks each running at once, reading the same Q_i, dO_i tiles from L2 (README, "Longest
/// first"). The sections go in turn, the last one holding the groups left over.
FL_HD GridCoord grid_coords(int t, int X, int Y, int Z, int section) {
  if (section > 0) {
    const int groups = Y * Z, full = groups / section, per = X * section;
    int s = t / per, size = section;
    if (s >= full) s = full, size = groups - full * section;
    const int r = t - s * per, g = s * section + r % size;
    return {r / size, g % Y, g / Y};
  }
  return {t % X, (t / X) % Y, t / (X * Y)};
}

/// The fp32 slot, in a dQ tile, of a math thread's register @p r of its dQ share (warpgroup
/// @p w, thread @p tid of it): 16-byte runs of four registers, thread after thread, so that the
/// math warps' stores are 512 contiguous bytes per warp and the accumulator holds the tile as the
/// registers hold it. dq_slot_coord() is the inverse the convert kernel uses.
template <class Cfg>
FL_HD int dq_slot(int w, int tid, int r) {
  return ((w * (Cfg::kDqRegs / 4) + r / 4) * 128 + tid) * 4 + r % 4;
}

/// (row, column) of a dQ tile held at fp32 slot @p f (dq_slot's layout): the wgmma accumulator's
/// layout (hopper.cuh) of the share of warpgroup w, placed by the row or column split (traits.h).
template <class Cfg>
FL_HD void dq_slot_coord(int f, int& row, int& col) {
  const int sub = f % 4, tid = (f / 4) % 128, j = (f / 512) % (Cfg::kDqRegs / 4), w = f / (128 * Cfg::kDqRegs);
  const int warp = tid / 32, lane = tid % 32;
  const int r = 16 * warp + lane / 4 + 8 * (sub / 2), c = 8 * j + 2 * (lane % 4) + sub % 2;
  row = Cfg::kDqSplitRows ? 64 * w + r : r;
  col = Cfg::kDqSplitRows ? c : Cfg::kDqN * w + c;
}

/// The query blocks [first, end) a K/V block visits (empty when end <= first).
struct QueryBlocks {
  int first, end;
};

/// The query blocks holding rows [rows_lo, rows_hi] (the rows the mask says see some key of a K/V
/// block), of @p n_q_blocks blocks of @p block_m rows: the walk of the backward (BlockWork::walk).
FL_HD QueryBlocks query_blocks(int rows_lo, int rows_hi, int block_m, int n_q_blocks) {
  const int first = rows_lo / block_m;
  const int end =
      rows_hi < 0 ? 0 : (rows_hi / block_m + 1 < n_q_blocks ? rows_hi / block_m + 1 : n_q_blocks);
  return {first, end};
}

/// The deterministic mode's turn of K/V block @p j at query block @p i: the token of the block
/// that adds into i just before j (that block's index + 1), or 0 when j adds first. The blocks
/// add in launch order, from block 0 up, or (@p reverse) from the last down; @p visits(j') gives
/// block j''s QueryBlocks. The nearest neighbour in that order that visits any query block
/// decides: every mask here moves a block's visits only forward with its keys (both ends; the
/// CPU test checks it on every mask case), so if that neighbour does not visit i, no block before
/// it does. Empty blocks between are skipped: they add nothing.
template <class VISITS>
FL_HD int dq_prev_token(const VISITS& visits, int n_blocks, int j, int i, bool reverse) {
  const int step = reverse ? 1 : -1;
  for (int jp = j + step; jp >= 0 && jp < n_blocks; jp += step) {
    const QueryBlocks v = visits(jp);
    if (v.end > v.first) return v.first <= i && i < v.end ? jp + 1 : 0;
  }
  return 0;
}

/// dq_prev_token for rung 14's own masks, no mask or causal, in closed form (the kernel's
/// producer warps run with few registers: the walk over neighbours spilled there). No mask: every
/// block visits every query block and the order is 0, 1, ...: block j - 1 adds just before j.
/// Causal, from the last block down: block j + 1 visits query block i when j + 1 <= j_last(i), the
/// last block whose first key the block's last row sees (padded rows included, as the walk
/// counts them).
FL_HD int dq_prev_token_causal(int j, int i, int n_blocks, int block_m, int block_n,
                               int causal_offset, bool reverse) {
  if (!reverse) return j;
  const int last_row = (i + 1) * block_m - 1;
  const int j_last = (last_row + causal_offset) / block_n < n_blocks - 1
                         ? (last_row + causal_offset) / block_n
                         : n_blocks - 1;
  return j < j_last ? j + 2 : 0;
}

/// The deterministic mode's rotated walk (no mask, launched from the last K/V block down): K/V
/// block j of a sequence's n starts its walk at query block j and wraps around (it needs n at
/// most the n_q query blocks), so the blocks running side by side add into different query blocks
/// (README, "Deterministic mode"). Without it every block starts at query block 0 and block j's
/// first add waits for the j before it. The start needs no register of its own: the block's index.
///
/// Block j's turn at query block @p i (dq_prev_token's token: the index + 1 of the block that adds
/// just before it, or 0 when j adds first). A query block takes its adds in the order the blocks
/// arrive there: block j arrives at step i - j (mod n_q), so first block min(i, n - 1), then the
/// blocks below it down to 0, then from the last block down to the first's successor (arrived
/// after wrapping). Each block's turn is its successor's (j + 1, or block 0 after the last),
/// except the first's: a block's first add waits for nobody and each later one for a block one
/// step ahead of it. The wrap makes the last blocks wait for block 0, launched last: a sequence's
/// K/V blocks must all be resident at once (the launch's rule: rotated_walk).
FL_HD int dq_prev_token_rotated(int j, int i, int n_blocks) {
  const int first = i < n_blocks - 1 ? i : n_blocks - 1;
  return j == first ? 0 : (j + 1 < n_blocks ? j + 2 : 1);
}

/// The order from the last K/V block down without a mask (a sequence of a packed batch with more
/// K/V blocks than query blocks, when the launch takes the rotated walk): block j's turn is block
/// j + 1's, the last block's nobody's.
FL_HD int dq_prev_token_descending(int j, int n_blocks) { return j + 1 < n_blocks ? j + 2 : 0; }

/// Whether the deterministic mode's walk is rotated: not causal (the causal order from the last
/// block down has the same wavefront already), rung 14's own masks, and the longest sequence's
/// K/V blocks (@p kv_blocks) at most the blocks the device runs at once (@p resident: one per
/// SM), so that a sequence's blocks are all resident when the last ones wait for block 0. A
/// sequence with more K/V blocks than query blocks walks from query block 0 in the order from the
/// last block down (BlockWork::rotated).
inline bool rotated_walk(bool deterministic, bool causal, int kv_blocks, int resident) {
  return deterministic && !causal && kv_blocks > 1 && kv_blocks <= resident;
}

}  // namespace fl::hopper14
