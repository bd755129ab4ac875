/// @file steps/15_persistent/scheduler.h
/// @brief Rung 15's tile scheduler: which (query tile, head, sequence) a persistent block works
/// on next. Plain C++ for host and device (FL_HD), so the CPU tests walk the same code the
/// kernel runs.
///
/// A persistent grid starts as many blocks as the SMs hold (one per SM here). The work items are
/// numbered in one order, and the blocks take them:
/// @code
///   // clang-format off
///   order        unit u = (sequence b, query head h), h fastest, so a GQA group's heads are
///                adjacent; inside a unit its query tiles, m = M_b - 1 down to 0 under a causal
///                mask (longest first), 0 up to M_b - 1 without. A packed batch numbers only the
///                tiles that exist: sequence b has M_b = ceil(len_q(b) / BLOCK_M) of them.
///   dynamic      (causal, or a packed batch: items of unequal cost) a block takes item blockIdx.x,
///                then whatever an atomic counter hands out next: the first free block takes the
///                next item, a list schedule (Graham, 1969) in the order above
///   static       (dense, no mask: every item costs the same) round r gives block i item
///                r x grid + i, no counter
///   // clang-format on
/// @endcode
/// The order keeps a unit's tiles together: the blocks running at once share the K and V of a
/// few heads, which stay in L2 (bench/results/.../rung15/order-study: ordering the units inside
/// the query tiles, as sections of 32 MB of K/V do, ran 7-30 % slower). Longest first under the
/// mask puts each unit's shortest tiles last, and the grid ends on them. `fifo` numbers the
/// tiles shortest first, `static` deals a causal grid in rounds: the ablations of both choices.
#pragma once

#include "flashladder/types.h"

namespace fl::hopper15 {

/// One work item: query tile m_block of query head `head` of sequence `batch`.
struct Tile {
  int m_block;
  int head;
  int batch;
};

/// How a launch's work items are numbered and handed out. Plain data: the kernel receives it by
/// value.
struct TileScheduler {
  int num_m_blocks;          ///< dense: M = ceil(seqlen_q / block_m); packed: each sequence's own
  int block_m;               ///< query rows per tile
  int heads_q;               ///< query heads per sequence
  int batch;                 ///< sequences
  bool lpt;                  ///< query tiles longest first; else in row order (fifo)
  bool dynamic;              ///< items from the counter; else static rounds
  const int* cu_seqlens_q;   ///< a packed batch's prefix sums (null: dense)
  /// dynamic: counter[0] the items handed out after the first grid's, counter[1] the blocks done
  /// claiming; both zero at launch, and zero again when the kernel ends (its last block resets them)
  int* counter;

  /// Query tiles of sequence @p b.
  FL_HD int m_count(int b) const {
    return cu_seqlens_q == nullptr ? num_m_blocks
                                   : (cu_seqlens_q[b + 1] - cu_seqlens_q[b] + block_m - 1) / block_m;
  }
  /// Work items of a dense batch (a packed batch's are known on the device only). The launch
  /// refuses more than 2^31 (rung 15's supports): every item number is an int.
  FL_HD int dense_total() const { return num_m_blocks * heads_q * batch; }
};

/// Where a walk of a packed batch stands: item `base` is the first of sequence `b`. The items a
/// block takes only grow, so each block's cursor only moves forward (at most `batch` steps).
struct Cursor {
  int b = 0;
  int base = 0;
};

/// Work item @p t of the order: false when there is none (t past the last item).
FL_HD bool locate(const TileScheduler& s, int t, Cursor* c, Tile* out) {
  int b, m_count, local;
  if (s.cu_seqlens_q == nullptr) {
    if (t >= s.dense_total()) return false;
    m_count = s.num_m_blocks;
    const int per_seq = m_count * s.heads_q;
    b = t / per_seq;
    local = t - b * per_seq;
  } else {
    for (;;) {
      if (c->b >= s.batch) return false;
      m_count = s.m_count(c->b);
      const int n = m_count * s.heads_q;
      if (t < c->base + n) break;
      c->base += n;
      ++c->b;
    }
    b = c->b;
    local = t - c->base;
  }
  const int h = local / m_count;
  const int m_idx = local - h * m_count;
  *out = {s.lpt ? m_count - 1 - m_idx : m_idx, h, b};
  return true;
}

/// The item a static block @p block of @p grid takes in round @p round.
FL_HD int static_item(int block, int round, int grid) { return round * grid + block; }

}  // namespace fl::hopper15
