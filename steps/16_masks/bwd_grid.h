/// @file steps/16_masks/bwd_grid.h
/// @brief Which grid rung 16's backward runs, per problem: rung 14's persistent grid (one block per
/// SM walking the K/V blocks: rung 14's README, "A persistent grid") where every K/V block's walk
/// is short, else one block per K/V block. Plain C++ (no CUDA): the CPU tests check the bound.
#pragma once

#include <algorithm>

#include "flashladder/masks.h"
#include "../14_hopper_backward/traits.h"

namespace fl::masks16 {

/// The most query rows that see one K/V block of @p block_n keys under @p m (an upper bound): a
/// window open on neither side bounds them by left + right + the block's keys; every other mask
/// may reach all @p seqlen_q of them (a prefix's keys are seen by every query; a document mask is
/// bounded by its longest document, which a launch's device-side starts do not tell the host).
inline int walk_rows(const MaskSpec& m, int seqlen_q, int block_n) {
  if (m.prefix > 0 || m.window_left < 0 || m.window_right < 0) return seqlen_q;
  return static_cast<int>(std::min<long long>(seqlen_q, static_cast<long long>(m.window_left) + m.window_right + block_n));
}

/// Whether the backward on tiles of head_dim @p D runs the persistent grid: Q's, K's and V's
/// head_dim the tile's, and a walk (walk_rows) within rung 14's bound for D
/// (rung_grid_persistent). The caller adds the kernel's own condition: the mask alone, no score
/// modifier nor dropout (launch_template.cuh, kPlainBwdMods). @p tile_grid: the
/// `backward-tile-grid` ablation, never.
inline bool bwd_persistent(int D, const MaskSpec& m, int seqlen_q, int head_dim, int head_dim_v, bool tile_grid) {
  return !tile_grid && D <= 128 && head_dim == D && head_dim_v == D &&
         hopper14::rung_grid_persistent(D, walk_rows(m, seqlen_q, hopper14::kv_block_keys(D)));
}

}  // namespace fl::masks16
