// The K/V blocks a query tile visits and which of them need the mask (kv_blocks.h: rungs 05,
// 09, 10 and 13 call it), against the mask itself: for every tile and block, whether some row
// of the tile sees a key of the block, and whether every row sees every key of it.
#include "catch_compat.h"
#include "flashladder/kv_blocks.h"

using namespace fl;

namespace {
// Query i sees key j (the ladder's mask: bottom-right aligned causal, and j < seqlen_k).
bool sees(int i, int j, int seqlen_k, bool causal, int offset) {
  return j < seqlen_k && (!causal || j <= i + offset);
}
}  // namespace

TEST_CASE("kv_blocks: the visited blocks and the masked ones, against the mask", "[cpu][kv_blocks]") {
  int tiles = 0;
  for (bool causal : {false, true})
    for (int seqlen_q : {1, 7, 64, 100, 200})
      for (int seqlen_k : {1, 9, 64, 100, 300})
        for (int block_m : {16, 64})
          for (int block_n : {16, 64, 128}) {
            const int offset = seqlen_k - seqlen_q;  // bottom-right: make_attn_params' causal_offset
            for (int row0 = 0; row0 < seqlen_q; row0 += block_m) {
              const int q_rows = seqlen_q - row0 < block_m ? seqlen_q - row0 : block_m;
              const KvBlocks b = kv_blocks(seqlen_k, causal, offset, row0, q_rows, block_n);
              const int all = (seqlen_k + block_n - 1) / block_n;
              bool ok = b.count >= 0 && b.count <= all && b.mask_from >= 0;
              for (int n = 0; n < all; ++n) {
                bool any = false, every = true;
                for (int i = row0; i < row0 + q_rows; ++i)
                  for (int j = n * block_n; j < (n + 1) * block_n; ++j) {
                    const bool s = sees(i, j, seqlen_k, causal, offset);
                    any = any || s;
                    every = every && s;
                  }
                // Visited: exactly the blocks some row sees (they are a prefix of the blocks).
                ok = ok && (n < b.count) == any;
                // Unmasked: only blocks every row sees in full.
                if (n < b.count && n < b.mask_from) ok = ok && every;
              }
              // And no more masking than needed: the first masked block is one a row does not
              // see in full (or past the visited ones).
              if (b.mask_from < b.count) {
                bool every = true;
                for (int i = row0; i < row0 + q_rows; ++i)
                  for (int j = b.mask_from * block_n; j < (b.mask_from + 1) * block_n; ++j)
                    every = every && sees(i, j, seqlen_k, causal, offset);
                ok = ok && !every;
              }
              INFO("causal=" << causal << " seqlen_q=" << seqlen_q << " seqlen_k=" << seqlen_k
                             << " block " << block_m << "x" << block_n << " row0=" << row0);
              CHECK(ok);
              ++tiles;
            }
          }
  CHECK(tiles > 500);
}
