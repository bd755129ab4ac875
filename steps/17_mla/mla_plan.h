/// @file steps/17_mla/mla_plan.h
/// @brief Rung 17's tiles and its split plan. Plain C++ (no CUDA), so the CPU tests check it.
///
/// MLA decode (DeepSeek-V2, 2024, §2.1; FlashMLA): one compressed cache row of 576 dims per
/// token (512 latent + 64 RoPE), shared by every query head; scores over all 576 dims, values
/// the row's first 512. With the up-projections absorbed, it is MQA with head_dim_qk 576 and
/// head_dim_v 512, and the query heads of one token become the rows of one tile:
/// @code
///   // clang-format off
///   rows of a sequence   seqlen_q x heads_q  (row r = query i = r / heads_q, head h = r % heads_q)
///   one tile             64 rows (one wgmma M) x 64 keys (one page of FlashMLA's cache)
///   per key block        S = Q K^T  64 x 64 over 576: 36 k-steps   (warpgroup 0)
///                        O += P V   64 x 512 over 64: two warpgroups, 256 columns each
///   // clang-format on
/// @endcode
/// The two floors of one sequence (rung 17's README puts them beside each measured rate): FLOPs
/// 2 x rows x keys x (576 + 512) against the cache's bytes, 576 x 2 per key, read once: 1.89 FLOP
/// per byte per row. The H100's 16-bit tensor rate over its HBM rate (the bench's `ceilings`)
/// is ~270-300 FLOP per byte, the H200's ~170-210: decode is memory-bound below ~150 rows
/// (seqlen_q x heads) per sequence on the H100, ~100 on the H200, and compute-bound above.
#pragma once

#include <algorithm>

#include "../08_flash_decoding/split_heuristic.h"

namespace fl::mla {

constexpr int kHeadDim = 576;   ///< Q and K: 512 latent + 64 RoPE dims
constexpr int kHeadDimV = 512;  ///< V = the cache row's first 512 dims; O
constexpr int kBlockM = 64;     ///< query rows (seqlen_q x heads) per tile: one wgmma M
constexpr int kBlockN = 64;     ///< keys per block: one page of FlashMLA's cache
constexpr int kColBlocks = kHeadDim / 64;   ///< 9 TMA boxes of 64 columns (128-byte rows) per tile
constexpr int kVColBlocks = kHeadDimV / 64; ///< the first 8 are V's
constexpr int kStages = 2;                  ///< K tiles in flight
constexpr int kThreads = 384;               ///< warpgroup 0: S and softmax; 1 and 2: O's halves
constexpr int kTileBytes = kColBlocks * kBlockN * 128;  ///< one K tile (or the Q tile): 72 KB
constexpr int kPBytes = kBlockM * kBlockN * 2;          ///< P, 16-bit: the A operand of O += P V
/// Q + 2 K tiles + P + the row statistics (alpha, then l and m: 3 x 64 floats) + the barriers
/// (per stage, one "landed" per column block and one "empty") + the 1024-byte alignment slack.
constexpr int kSmemBytes = kTileBytes * (1 + kStages) + kPBytes + 3 * kBlockM * 4 +
                           8 * kStages * (kColBlocks + 1) + 1024;
static_assert(kSmemBytes <= 227 * 1024, "Q, two K tiles and P fit the 227 KB of an sm_90 block");

/// The launch plan: row tiles per sequence, and the keys cut into splits of whole 64-key blocks.
struct MlaPlan {
  int rows = 0;          ///< seqlen_q x heads_q
  int row_tiles = 0;     ///< ceil(rows / 64)
  long long work_items = 0;  ///< batch x row_tiles: the CTAs of the unsplit grid
  int num_splits = 1;    ///< >= 1; 1: the CTA writes O and the LSE itself
  int split_len = 0;     ///< keys per split, a multiple of kBlockN
  bool from_heuristic = true;
};

/// The split policy of rung 08 with pieces of at least 4 blocks (256 keys): a 64-row tile's block
/// costs a 72 KB load and ~9 MFLOP, so shorter pieces spend more on their partial O (64 x 512
/// fp32 = 128 KB written and read back) than they save.
inline decode::SplitPolicy mla_split_policy() {
  decode::SplitPolicy pol;
  pol.min_split_len = 4 * kBlockN;
  return pol;
}

/// The plan for @p batch sequences of @p seqlen_q queries x @p heads_q heads against @p seqlen_k
/// keys (the longest cache), on @p sm_count SMs; @p requested_splits > 0 overrides the heuristic
/// (an upper bound: no split is empty).
inline MlaPlan make_mla_plan(int batch, int heads_q, int seqlen_q, int seqlen_k, int requested_splits,
                             int sm_count) {
  MlaPlan m;
  m.rows = seqlen_q * heads_q;
  m.row_tiles = (m.rows + kBlockM - 1) / kBlockM;
  m.work_items = static_cast<long long>(batch) * m.row_tiles;
  m.from_heuristic = requested_splits <= 0;
  const int blocks = std::max(1, (seqlen_k + kBlockN - 1) / kBlockN);
  int wanted = m.from_heuristic
                   ? decode::num_splits_heuristic(sm_count, m.work_items, seqlen_k, mla_split_policy())
                   : requested_splits;
  wanted = std::max(1, std::min(wanted, blocks));
  const int blocks_per_split = (blocks + wanted - 1) / wanted;
  m.split_len = blocks_per_split * kBlockN;
  m.num_splits = (blocks + blocks_per_split - 1) / blocks_per_split;
  return m;
}

/// fp32 elements of the split workspace: a normalized partial O (512 columns) and a partial LSE
/// per (batch, head, query) and split, in rung 08's layout (its combine kernel merges them).
inline size_t mla_workspace_floats(const MlaPlan& m, int batch, int heads_q, int seqlen_q) {
  if (m.num_splits <= 1) return 0;
  const size_t rows = static_cast<size_t>(batch) * heads_q * seqlen_q * m.num_splits;
  return rows * (kHeadDimV + 1);
}

}  // namespace fl::mla
