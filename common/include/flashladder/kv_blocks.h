/// @file kv_blocks.h
/// @brief The K/V blocks a tile of query rows visits and which of them need a mask, written once
/// for the tiled kernels (rungs 05, 09, 10, 13) and the CPU test that checks it against the mask
/// itself (FL_HD = __host__ __device__ under nvcc).
#pragma once

#include "flashladder/types.h"

namespace fl {

/// The K/V blocks of one query tile: blocks [0, count) hold a key some row of the tile sees;
/// blocks [mask_from, count) need the mask, the others are wholly visible to every row.
struct KvBlocks {
  int count;
  int mask_from;
};

/// min(a, b) for host and device code alike.
FL_HD int kv_min(int a, int b) { return a < b ? a : b; }

/// Query rows [row0, row0 + q_rows) against keys cut into blocks of @p block_n. A block needs
/// the mask if it holds the partial tail of seqlen_k or, with the causal mask (query i sees key
/// j iff j <= i + causal_offset, bottom-right aligned), if it crosses the diagonal of the tile's
/// first row; blocks wholly above the last row's diagonal are skipped.
FL_HD KvBlocks kv_blocks(int seqlen_k, bool causal, int causal_offset, int row0, int q_rows,
                         int block_n) {
  KvBlocks b{(seqlen_k + block_n - 1) / block_n, seqlen_k / block_n};
  if (causal) {
    const int last_key = row0 + q_rows - 1 + causal_offset;  // the last key any row sees
    b.count = last_key < 0 ? 0 : kv_min(b.count, last_key / block_n + 1);  // skip above-diagonal
    const int first_row_keys = row0 + causal_offset + 1;  // how many keys row0 sees
    b.mask_from = kv_min(b.mask_from, first_row_keys <= 0 ? 0 : first_row_keys / block_n);
  }
  return b;
}

}  // namespace fl
