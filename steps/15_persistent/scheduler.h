/// @file steps/15_persistent/scheduler.h
/// @brief Rung 15's tile scheduler: which (query tile, head, sequence) a persistent block works
/// on next. Plain C++ for host and device (FL_HD), so the CPU tests walk the same code the
/// kernel runs.
///
/// A persistent grid starts as many blocks as the SMs hold (one per SM here). The work items
/// are put in one fixed order, and the blocks take them in rounds: round r deals items
/// r x grid .. r x grid + grid - 1, one per block. Every warpgroup of a block computes its own
/// items alone, so no block ever waits for a queue (FlashAttention-3's static persistent
/// scheduler; its causal scheduler hands the same order out from an atomic counter instead).
///
/// The order, from outer to inner:
/// @code
///   // clang-format off
///   section      a run of consecutive (sequence, query head) units whose K and V fit in L2
///                together (section_units, a whole number of GQA groups): while a section runs,
///                the blocks re-read K/V from L2, not from HBM
///   query tile   m = M-1, M-2, ..., 0 under a causal mask (LPT: longest first), 0 .. M-1 without
///   unit         u = (sequence b, query head h), h fastest, so a GQA group's heads are adjacent
///   // clang-format on
/// @endcode
/// Under a causal mask query tile m visits about m + 1 key blocks. Taken longest first and dealt
/// in a snake (block i takes the i-th item of an even round and the i-th from the end of an odd
/// one), two consecutive rounds give every block about the same work, and the grid ends on the
/// shortest tiles (longest-processing-time-first, Graham 1969, made static). `fifo` deals the
/// tiles shortest first and round-robin, the ablation that measures both.
///
/// A variable-length batch walks the same order with M = ceil(max_seqlen_q / BLOCK_M); a tile
/// past the end of its sequence does not exist and is skipped (one length read per candidate).
#pragma once

#include "flashladder/types.h"

namespace fl::hopper15 {

/// One work item: query tile m_block of query head `head` of sequence `batch`.
struct Tile {
  int m_block;
  int head;
  int batch;
};

/// The fixed order of every work item, and how the rounds deal it (see the file comment).
/// Plain data: the kernel receives it by value.
struct TileScheduler {
  int num_m_blocks;   ///< M = ceil(max_seqlen_q / BLOCK_M)
  int heads_q;        ///< query heads per sequence
  int units;          ///< batch x heads_q
  int section_units;  ///< units per L2 section: a multiple of the GQA group, >= 1
  bool lpt;           ///< query tiles longest first, dealt in a snake; else in row order, round-robin
  bool m_fastest = false;  ///< EXPERIMENT: within a section, units outer and query tiles inner

  /// Work items, empty ones of a variable-length batch included.
  FL_HD int total() const { return num_m_blocks * units; }

  /// Work item @p t (0 <= t < total()).
  FL_HD Tile tile(int t) const {
    const int per_section = section_units * num_m_blocks;
    const int section = t / per_section;
    const int first_unit = section * section_units;
    // The last section may hold fewer units.
    const int here = units - first_unit < section_units ? units - first_unit : section_units;
    const int i = t - section * per_section;
    const int m_idx = m_fastest ? i % num_m_blocks : i / here;
    const int u = first_unit + (m_fastest ? i / num_m_blocks : i % here);
    return {lpt ? num_m_blocks - 1 - m_idx : m_idx, u % heads_q, u / heads_q};
  }

  /// The item block @p block of @p grid takes in round @p round (may be >= total() in the last).
  FL_HD int item(int block, int round, int grid) const {
    const bool reversed = lpt && (round & 1);
    return round * grid + (reversed ? grid - 1 - block : block);
  }
  /// Rounds of a grid of @p grid blocks.
  FL_HD int rounds(int grid) const { return (total() + grid - 1) / grid; }
};

/// Units per L2 section for K/V heads of @p kv_head_bytes each (K and V of one head, one
/// sequence): as many whole GQA groups (@p group query heads share one K/V head) as fit in
/// @p l2_budget_bytes, at least one group, at most all @p units.
inline int section_units_for(long long kv_head_bytes, int group, int units, long long l2_budget_bytes) {
  long long kv_heads = kv_head_bytes > 0 ? l2_budget_bytes / kv_head_bytes : units;
  if (kv_heads < 1) kv_heads = 1;
  const long long u = kv_heads * group;
  return u > units ? units : static_cast<int>(u);
}

/// The first round from @p round on in which block @p block of @p grid has an item that exists
/// (@p exists(Tile) false: a query tile beyond its sequence's end); rounds(grid) when none is left.
template <class EXISTS>
FL_HD int next_round(const TileScheduler& s, int block, int round, int grid, const EXISTS& exists) {
  const int n = s.rounds(grid);
  for (; round < n; ++round) {
    const int t = s.item(block, round, grid);
    if (t < s.total() && exists(s.tile(t))) break;
  }
  return round;
}

}  // namespace fl::hopper15
