// Rung 11's workspace policy (steps/11_backward/workspace.h): the split counts it promises and the
// layout the kernels index into (D, the dQ accumulator(s), a split group's partial dK and dV, the
// exact D pass's sums), checked on the CPU over shapes, tiles and every mode.
#include <cstddef>
#include <vector>

#include "catch_compat.h"
#include "problem_shape.h"
#include "11_backward/workspace.h"

using namespace fl;
using namespace fl::bwd;
using fl_test::shape;

namespace {

/// The two BLOCK_N the rung's entries use (BwdTiles: 16 x 8 warps, 16 x 4 warps).
const int kBlockNs[] = {128, 64};

size_t rows_of(const Problem& p) { return size_t(p.batch) * p.heads_q * p.seqlen_q; }

int ceil_div(int a, int b) { return (a + b - 1) / b; }

/// Shapes with tails, GQA and MQA, odd row counts (the dQ accumulator's alignment), long rows (the
/// exact D pass) and one query against many keys (decode-like).
std::vector<Problem> shapes() {
  return {shape(1, 77, 130, 4, 2, 64, true),     shape(2, 1024, 1024, 16, 16, 128, false),
          shape(1, 203, 257, 4, 1, 64, true),    shape(3, 5, 9, 3, 1, 128, false),
          shape(1, 1, 100003, 32, 8, 128, false), shape(4, 4096, 4096, 32, 8, 64, true),
          shape(1, 16384, 16385, 16, 4, 128, true), shape(1, 64, 64, 8, 8, 64, false)};
}

const GroupSplit kSplits[] = {GroupSplit::balanced, GroupSplit::none, GroupSplit::full};
const DeltaPolicy kPolicies[] = {DeltaPolicy::rung, DeltaPolicy::o16, DeltaPolicy::o32, DeltaPolicy::exact};

}  // namespace

TEST_CASE("rung 11's deterministic splits: min(K/V blocks, 8), from the shape and BLOCK_N alone",
          "[cpu][bwd_workspace]") {
  for (int bn : kBlockNs)
    for (int sk : {1, 63, 64, 65, 128, 7 * 128, 8 * 128, 8 * 128 + 1, 100003}) {
      const Problem p = shape(2, 333, sk, 8, 2, 64, false);
      const int blocks = ceil_div(sk, bn);
      CHECK(kv_block_count(p, bn) == blocks);
      CHECK(deterministic_splits(p, bn) == (blocks < 8 ? blocks : 8));
      CHECK(deterministic_splits(p, bn) >= 1);
      CHECK(deterministic_splits(p, bn) <= kMaxDeterministicSplits);
      // Nothing but seqlen_k and the tile: not the queries, heads, batch or head_dim.
      CHECK(deterministic_splits(shape(5, 7, sk, 32, 4, 128, true), bn) == deterministic_splits(p, bn));
    }
  REQUIRE(kMaxDeterministicSplits == 8);
}

TEST_CASE("rung 11's dQ accumulator starts past D at a 128-byte boundary (float2 reductions)",
          "[cpu][bwd_workspace]") {
  for (const Problem& p : shapes()) {
    const size_t rows = rows_of(p), off = dq_acc_offset(p);
    CHECK(off >= rows);      // D ([batch, heads_q, seqlen_q]) fits before it
    CHECK(off < rows + 32);  // and no more than the padding
    CHECK(off % 32 == 0);    // 128 bytes: an even float offset, whatever the row count
    CHECK(off * sizeof(float) % 8 == 0);
  }
  // An odd number of rows is where an unpadded layout would leave the accumulator 4-byte aligned.
  const Problem odd = shape(1, 77, 130, 3, 1, 64, true);
  REQUIRE(rows_of(odd) % 2 == 1);
  CHECK(dq_acc_offset(odd) == 256);
}

TEST_CASE("rung 11's GQA split: a divisor of the group, the smallest that fills kSplitTargetBlocks",
          "[cpu][bwd_workspace]") {
  for (const Problem& p : shapes())
    for (int bn : kBlockNs)
      for (bool det : {false, true}) {
        const int group = p.heads_q / p.heads_kv;
        INFO("heads " << p.heads_q << "/" << p.heads_kv << " seqlen_k " << p.seqlen_k << " BLOCK_N " << bn
                      << " deterministic " << det);
        CHECK(kv_splits(p, bn, det, GroupSplit::none) == 1);
        CHECK(kv_splits(p, bn, det, GroupSplit::full) == group);
        const int s = kv_splits(p, bn, det, GroupSplit::balanced);
        REQUIRE(s >= 1);
        CHECK(group % s == 0);
        if (group == 1) CHECK(s == 1);
        // The grid before the split: K/V blocks (or the deterministic splits) x KV heads x batch.
        const long long blocks =
            static_cast<long long>(det ? deterministic_splits(p, bn) : kv_block_count(p, bn)) * p.heads_kv * p.batch;
        if (s < group) CHECK(blocks * s >= kSplitTargetBlocks);
        for (int smaller = 1; smaller < s; ++smaller)
          if (group % smaller == 0) CHECK(blocks * smaller < kSplitTargetBlocks);
      }
  // 32 query heads on 8 KV heads, head_dim 128 (BLOCK_N 128): 1k keys give 8 K/V blocks x 8 KV
  // heads = 64 blocks, so the whole group of 4 is split; 16k keys give 1024 blocks: no split.
  CHECK(kv_splits(shape(1, 1024, 1024, 32, 8, 128, false), 128, false, GroupSplit::balanced) == 4);
  CHECK(kv_splits(shape(1, 16384, 16384, 32, 8, 128, false), 128, false, GroupSplit::balanced) == 1);
  CHECK(kv_splits(shape(2, 2048, 2048, 32, 8, 128, false), 128, false, GroupSplit::balanced) == 1);  // 256
  CHECK(kv_splits(shape(1, 2048, 2048, 32, 8, 128, false), 128, false, GroupSplit::balanced) == 2);  // 128
  // The deterministic mode counts its splits (at most 8 per KV head), not the K/V blocks, so the
  // same long problem splits there.
  CHECK(kv_splits(shape(1, 16384, 16384, 32, 8, 128, false), 128, true, GroupSplit::balanced) == 4);
}

TEST_CASE("rung 11's workspace: D, dQ, dK/dV, exact-D regions in order, disjoint, aligned, inside it",
          "[cpu][bwd_workspace]") {
  for (const Problem& p : shapes())
    for (int bn : kBlockNs)
      for (bool det : {false, true})
        for (GroupSplit how : kSplits)
          for (DeltaPolicy policy : kPolicies) {
            INFO("seqlen " << p.seqlen_q << "/" << p.seqlen_k << " heads " << p.heads_q << "/" << p.heads_kv
                           << " d " << p.head_dim << " BLOCK_N " << bn << " deterministic " << det << " split "
                           << static_cast<int>(how) << " policy " << static_cast<int>(policy));
            const size_t rows = rows_of(p);
            const size_t splits = det ? size_t(deterministic_splits(p, bn)) : 1;
            const int kv = kv_splits(p, bn, det, how);
            const size_t kv_part = size_t(p.batch) * p.seqlen_k * p.heads_kv * p.head_dim;
            const size_t dq = dq_acc_offset(p), dkv = dkv_acc_offset(p, bn, det),
                         delta = delta_acc_offset(p, bn, det, how);
            const size_t n_delta = size_t(delta_splits(p, bn, det, policy));
            const size_t bytes = workspace_bytes(p, bn, det, how, policy);
            // D, then one dQ accumulator per split, then 2 x kv_split partial sums (none without a
            // split), then the exact pass's pairs: each region ends where the next starts.
            CHECK(rows <= dq);
            CHECK(dkv == dq + splits * rows * p.head_dim);
            CHECK(delta == dkv + (kv > 1 ? 2 * size_t(kv) * kv_part : 0));
            CHECK(bytes == (delta + 2 * n_delta * rows) * sizeof(float));
            CHECK(bytes >= (rows + splits * rows * p.head_dim) * sizeof(float));
            // float2 accesses: the dQ reductions (sm_90) and the dK, dV partial stores and loads.
            CHECK(dq * sizeof(float) % 8 == 0);
            CHECK(dkv * sizeof(float) % 8 == 0);
            // The exact pass's sums: one pair of rows per split (atomics: one), inside the workspace.
            CHECK(delta * sizeof(float) + 2 * n_delta * rows * sizeof(float) <= bytes);
          }
}

TEST_CASE("rung 11's exact D pass gets workspace only where its policy takes the pass",
          "[cpu][bwd_workspace]") {
  for (int bn : kBlockNs)
    for (bool det : {false, true}) {
      const Problem shortrows = shape(1, 77, kExactDeltaKeys, 4, 2, 64, true);
      const Problem longrows = shape(1, 1, kExactDeltaKeys + 1, 32, 8, 128, false);
      const int per_split = det ? deterministic_splits(longrows, bn) : 1;
      // The rung's rule: the pass past kExactDeltaKeys keys, one pair per deterministic split.
      CHECK(delta_splits(shortrows, bn, det, DeltaPolicy::rung) == 0);
      CHECK(delta_splits(longrows, bn, det, DeltaPolicy::rung) == per_split);
      // The ablations: always (exact-delta), never (o16-delta, o32-delta).
      CHECK(delta_splits(shortrows, bn, det, DeltaPolicy::exact) ==
            (det ? deterministic_splits(shortrows, bn) : 1));
      for (DeltaPolicy never : {DeltaPolicy::o16, DeltaPolicy::o32}) {
        CHECK(delta_splits(shortrows, bn, det, never) == 0);
        CHECK(delta_splits(longrows, bn, det, never) == 0);
      }
      // Without the pass the workspace ends with the dK, dV partial sums; with it, 2 x splits rows
      // more.
      for (GroupSplit how : kSplits) {
        CHECK(workspace_bytes(shortrows, bn, det, how, DeltaPolicy::rung) ==
              delta_acc_offset(shortrows, bn, det, how) * sizeof(float));
        CHECK(workspace_bytes(longrows, bn, det, how, DeltaPolicy::rung) -
                  workspace_bytes(longrows, bn, det, how, DeltaPolicy::o32) ==
              2 * size_t(per_split) * rows_of(longrows) * sizeof(float));
      }
    }
}
