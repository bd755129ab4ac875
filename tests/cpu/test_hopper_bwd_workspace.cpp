// Rung 14's host policies (steps/14_hopper_backward/workspace.h, traits.h), checked on the CPU: the
// workspace layout the kernels index into (padded statistics, the dQ accumulator, the deterministic
// counters, a split group's partial dK and dV, the exact D pass's sums), the group split, the
// register order of a dQ tile (dq_slot), which the convert kernel must invert exactly, the
// Problem a launch recomputes them from (problem_of), and a packed batch's padded rows.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <set>
#include <utility>
#include <vector>

#include "14_hopper_backward/traits.h"
#include "14_hopper_backward/workspace.h"
#include "catch_compat.h"
#include "problem_shape.h"

using namespace fl;
using fl_test::shape;

namespace {

/// Shapes with tails, GQA and MQA, long rows (the exact D pass), one query against many keys.
std::vector<Problem> shapes() {
  return {shape(1, 77, 130, 4, 2, 64, true),      shape(2, 1024, 1024, 16, 16, 128, false),
          shape(1, 203, 257, 4, 1, 64, true),     shape(3, 5, 9, 3, 1, 128, false),
          shape(1, 1, 100003, 32, 8, 128, false), shape(2, 4096, 4096, 16, 4, 128, true),
          shape(1, 16384, 16385, 16, 4, 128, true), shape(16, 1024, 1024, 16, 4, 64, true),
          shape(1, 333, 4000, 8, 2, 256, true),   shape(2, 2048, 2048, 16, 16, 256, false)};
}

/// Every slot of a tile of Cfg maps to one (row, column), every (row, column) is reached once, and
/// each is where the wgmma accumulator layout (hopper.cuh) puts register r of thread tid of
/// warpgroup w: row 16 warp + g + 8 ((r % 4) / 2), column 8 (r / 4) + 2 (tid % 4) + r % 2, offset by
/// the warpgroup's 64 rows (BLOCK_M = 128) or kDqN columns (BLOCK_M = 64: 64, or 128 at d = 256).
template <class Cfg>
void check_slots() {
  constexpr int M = Cfg::kBlockM, D = Cfg::kHeadDim;
  std::set<std::pair<int, int>> seen;
  std::set<int> slots;
  for (int w = 0; w < 2; ++w)
    for (int tid = 0; tid < 128; ++tid)
      for (int r = 0; r < Cfg::kDqRegs; ++r) {
        const int f = hopper14::dq_slot<Cfg>(w, tid, r);
        REQUIRE(f >= 0);
        REQUIRE(f < M * D);
        slots.insert(f);
        int row = -1, col = -1;
        hopper14::dq_slot_coord<Cfg>(f, row, col);
        const int lane = tid % 32, warp = tid / 32;
        const int r_in = 16 * warp + lane / 4 + 8 * ((r % 4) / 2), c_in = 8 * (r / 4) + 2 * (lane % 4) + r % 2;
        CHECK(row == (Cfg::kDqSplitRows ? 64 * w + r_in : r_in));
        CHECK(col == (Cfg::kDqSplitRows ? c_in : Cfg::kDqN * w + c_in));
        seen.insert({row, col});
      }
  CHECK(slots.size() == size_t(M * D));
  CHECK(seen.size() == size_t(M * D));
  // Four registers are one 16-byte run: the float4 stores of the math warps and the bulk add's
  // 16-byte granule.
  CHECK(hopper14::dq_slot<Cfg>(1, 5, 4) % 4 == 0);
  CHECK(hopper14::dq_slot<Cfg>(1, 5, 7) == hopper14::dq_slot<Cfg>(1, 5, 4) + 3);
}

/// The 16-byte convert (kernel.cuh: bwd_dq_convert_tile_kernel) reads slots 4i..4i+3 as one
/// float4 and writes them as two column pairs: (row, col), (row, col + 1), (row + 8, col),
/// (row + 8, col + 1), with (row, col) = dq_slot_coord(4i) and col even. Over all i those pairs
/// cover the tile once.
template <class Cfg>
void check_convert_quads() {
  constexpr int M = Cfg::kBlockM, D = Cfg::kHeadDim;
  std::set<std::pair<int, int>> seen;
  for (int i = 0; i < M * D / 4; ++i) {
    int row = -1, col = -1;
    hopper14::dq_slot_coord<Cfg>(4 * i, row, col);
    REQUIRE(col % 2 == 0);
    REQUIRE(row + 8 < M);
    for (int k = 0; k < 4; ++k) {
      int r = -1, c = -1;
      hopper14::dq_slot_coord<Cfg>(4 * i + k, r, c);
      CHECK(r == row + 8 * (k / 2));
      CHECK(c == col + k % 2);
      seen.insert({r, c});
    }
  }
  CHECK(seen.size() == size_t(M * D));
}

}  // namespace

TEST_CASE("rung 14's dQ tile order: a bijection onto the tile, the accumulator's layout", "[cpu][hopper_bwd]") {
  check_slots<hopper14::RungTiles<64>>();
  check_slots<hopper14::RungTiles<128>>();
  check_slots<hopper14::RungTiles<256>>();
}

TEST_CASE("rung 14's dQ convert: each 16-byte read is two column pairs of rows r and r + 8", "[cpu][hopper_bwd]") {
  check_convert_quads<hopper14::RungTiles<64>>();
  check_convert_quads<hopper14::RungTiles<128>>();
  check_convert_quads<hopper14::RungTiles<256>>();
}

TEST_CASE("rung 14's tiles: d = 256 transposes dK, dV (head_dim as M) and fits one stage", "[cpu][hopper_bwd]") {
  using T64 = hopper14::RungTiles<64>;
  using T128 = hopper14::RungTiles<128>;
  using T256 = hopper14::RungTiles<256>;
  STATIC_REQUIRE(!T64::kDkvT);
  STATIC_REQUIRE(!T128::kDkvT);
  STATIC_REQUIRE(T256::kDkvT);
  // Keys as M: 128 keys, a warpgroup's S^T is its 64 keys by the whole query block.
  STATIC_REQUIRE(T128::kBlockN == 128);
  STATIC_REQUIRE(T128::kSN == T128::kBlockM);
  STATIC_REQUIRE(T128::kSKey0(1) == 64);
  STATIC_REQUIRE(T128::kSCol0(1) == 0);
  // d = 256: 64 keys, a warpgroup's S^T is all of them by half the queries; dK^T and dV^T are two
  // m64 x 64-key accumulators each, 128 registers in all, and the dQ share 64 x 128.
  STATIC_REQUIRE(T256::kBlockN == 64);
  STATIC_REQUIRE(T256::kSN == 32);
  STATIC_REQUIRE(T256::kSKey0(1) == 0);
  STATIC_REQUIRE(T256::kSCol0(1) == 32);
  STATIC_REQUIRE(T256::kDkvTiles * 64 * 2 == 256);  // two warpgroups x kDkvTiles x 64 dims
  STATIC_REQUIRE(T256::kDkvRegs == 128);
  STATIC_REQUIRE(T256::kDqN == 128);
  STATIC_REQUIRE(T256::kStages == 1);
  STATIC_REQUIRE(T256::kSplitRelease);
  STATIC_REQUIRE(T256::kSmemBytes <= hopper14::kSmemOptin);
  // Two stages would not fit: K, V, Q, dO of 64 x 256 and the fp32 dQ tile alone are 256 KB.
  STATIC_REQUIRE(hopper14::BwdTiles<256, 64, 1, true, 2, true>::kSmemBytes + 2 * 64 * 256 * 2 > hopper14::kSmemOptin);
  CHECK(hopper14::kv_block_keys(64) == 128);
  CHECK(hopper14::kv_block_keys(256) == 64);
}

TEST_CASE("rung 14's grid: persistent on short rows at d = 64 and 128, never at d = 256", "[cpu][hopper_bwd]") {
  // The bounds README "A persistent grid" measured; an empty packed batch (seqlen_q 0) at d = 256
  // must not take d = 128's persistent tiles.
  CHECK(hopper14::rung_grid_persistent(64, 1));
  CHECK(hopper14::rung_grid_persistent(64, 4096));
  CHECK_FALSE(hopper14::rung_grid_persistent(64, 4097));
  CHECK(hopper14::rung_grid_persistent(128, 1024));
  CHECK_FALSE(hopper14::rung_grid_persistent(128, 1025));
  CHECK_FALSE(hopper14::rung_grid_persistent(256, 0));
  CHECK_FALSE(hopper14::rung_grid_persistent(256, 512));
  CHECK_FALSE(hopper14::rung_grid_persistent(96, 512));  // not a tile of the rung
}

TEST_CASE("rung 14's workspace: regions in order, disjoint, 128-byte aligned, sized by the mode",
          "[cpu][hopper_bwd]") {
  for (const Problem& p : shapes())
    for (bool det : {false, true}) {
      INFO(p.describe() << " deterministic=" << det);
      const int64_t rows_pad = hopper14::head_rows(p);
      CHECK(rows_pad % 128 == 0);
      CHECK(rows_pad >= p.seqlen_q);
      CHECK(rows_pad < p.seqlen_q + 128);
      const size_t stat = hopper14::stat_rows(p);
      const size_t dq = hopper14::dq_acc_offset(p);
      const size_t cnt = hopper14::counter_offset(p);
      const size_t dkv = hopper14::dkv_acc_offset(p, det);
      const size_t exact = hopper14::exact_delta_offset(p, det);
      for (size_t off : {stat, dq, cnt, dkv, exact}) CHECK(off % 32 == 0);  // floats: 128 bytes
      CHECK(dq == 2 * stat);                                     // LSE, then D
      CHECK(cnt == dq + stat * p.head_dim);                      // the accumulator: one row per padded row
      CHECK(hopper14::tile_counter_offset(p, det) - cnt == (det ? (hopper14::counter_count(p) + 31) / 32 * 32 : 0));
      CHECK(dkv - hopper14::tile_counter_offset(p, det) == 32);  // the persistent grid's tile counter
      CHECK(hopper14::counter_count(p) * 64 == stat);            // a counter per 64-row block
      const int split = hopper14::kv_splits(p);
      const size_t part = split > 1 ? 2 * size_t(split) * p.batch * p.seqlen_k * p.heads_kv * p.head_dim : 0;
      CHECK(exact >= dkv + part);
      CHECK(exact < dkv + part + 32);
      const size_t bytes = hopper14::workspace_bytes(p, det, bwd::DeltaPolicy::rung);
      const int n_delta = hopper14::exact_delta_splits(p, det, bwd::DeltaPolicy::rung);
      const size_t rows = size_t(p.batch) * p.heads_q * p.seqlen_q;
      CHECK(bytes / sizeof(float) == exact + (n_delta > 0 ? (rows + 31) / 32 * 32 + 2 * size_t(n_delta) * rows : 0));
      // The exact pass only where rung 11's rule takes it (rows of more than 16k keys).
      CHECK((n_delta > 0) == (p.seqlen_k > bwd::kExactDeltaKeys));
    }
}

TEST_CASE("rung 14's group split: rung 11's rule for the head_dim's K/V blocks, and the ablations' extremes",
          "[cpu][hopper_bwd]") {
  std::vector<Problem> all = shapes();
  all.push_back(shape(2, 4096, 4096, 16, 4, 128, true));  // the training demo's attention
  all.push_back(shape(1, 1000, 3000, 32, 8, 64, true));   // seqlen_q < seqlen_k
  for (const Problem& p : all) {
    INFO(p.describe());
    const int group = p.heads_q / p.heads_kv, split = hopper14::kv_splits(p);
    const int block_n = hopper14::kv_block_keys(p.head_dim);
    CHECK(group % split == 0);
    CHECK(split == bwd::kv_splits(p, block_n, false, bwd::GroupSplit::balanced));
    CHECK(hopper14::kv_splits(p, bwd::GroupSplit::none) == 1);
    CHECK(hopper14::kv_splits(p, bwd::GroupSplit::full) == group);
    const int64_t blocks = int64_t((p.seqlen_k + block_n - 1) / block_n) * p.heads_kv * p.batch;
    if (split < group) CHECK(blocks * split >= bwd::kSplitTargetBlocks);  // no further than the grid needs
    for (int s = 1; s < split; ++s)
      if (group % s == 0) CHECK(blocks * s < bwd::kSplitTargetBlocks);
  }
}

TEST_CASE("rung 14's modeled group split: the schedule model of bench/studies/rung14_split_model.py, cached",
          "[cpu][hopper_bwd]") {
  // (batch, seqlen, heads_q, heads_kv, d, the study's predicted split, its unsplit efficiency): the
  // group split table's shapes in rung 14's README and the GQA 32/8 shapes, all causal,
  // as `python3 bench/studies/rung14_split_model.py` computes them.
  struct Row {
    int b, n, hq, hkv, d, split;
    double eff;
  };
  const Row rows[] = {{16, 1024, 32, 8, 64, 1, 0.873},  {8, 2048, 32, 8, 64, 1, 0.868},   {4, 4096, 32, 8, 64, 1, 0.877},
                      {2, 8192, 32, 8, 64, 1, 0.894},   {1, 16384, 32, 8, 64, 1, 0.987},  {16, 1024, 16, 4, 128, 1, 0.793},
                      {8, 2048, 16, 4, 128, 1, 0.767},  {4, 4096, 16, 4, 128, 4, 0.780},  {2, 8192, 16, 4, 128, 4, 0.808},
                      {1, 16384, 16, 4, 128, 1, 0.981}, {16, 1024, 8, 2, 256, 1, 0.767},  {4, 4096, 8, 2, 256, 1, 0.808},
                      {2, 8192, 8, 2, 256, 1, 0.981},   {2, 4096, 16, 4, 128, 4, 0.627},  {1, 8192, 32, 8, 128, 4, 0.808},
                      {1, 4096, 32, 8, 128, 4, 0.627},  {8, 1024, 32, 8, 128, 1, 0.793}};
  for (const Row& r : rows) {
    const Problem p = shape(r.b, r.n, r.n, r.hq, r.hkv, r.d, true);
    INFO(p.describe());
    CHECK(std::abs(hopper14::split_model::efficiency(p, 1) - r.eff) < 5e-4);
    CHECK(hopper14::split_model::predicted(p) == r.split);
    const int rule = hopper14::kv_splits(p, bwd::GroupSplit::balanced);
    const int modeled = hopper14::kv_splits(p, bwd::GroupSplit::modeled);
    CHECK(modeled == std::max(rule, r.split));
    CHECK(hopper14::kv_splits(p, bwd::GroupSplit::modeled) == modeled);  // the cached answer, the same
    // The workspace holds the modeled split's partial sums.
    CHECK(hopper14::workspace_bytes(p, false, bwd::DeltaPolicy::rung, bwd::GroupSplit::modeled) >=
          hopper14::workspace_bytes(p, false, bwd::DeltaPolicy::rung, bwd::GroupSplit::none));
    // Without the mask every block is as long: rung 11's rule.
    const Problem full = shape(r.b, r.n, r.n, r.hq, r.hkv, r.d, false);
    CHECK(hopper14::kv_splits(full, bwd::GroupSplit::modeled) == hopper14::kv_splits(full, bwd::GroupSplit::balanced));
  }
  // A packed batch: rung 11's rule (its lengths are on the device).
  Problem packed = shape(1, 1, 1, 16, 4, 128, true);
  set_varlen(&packed, {4096, 4096}, {});
  CHECK(hopper14::kv_splits(packed, bwd::GroupSplit::modeled) == hopper14::kv_splits(packed, bwd::GroupSplit::balanced));
}

TEST_CASE("problem_of: the Problem a launch's AttnParams describe, causal and scale included", "[cpu][hopper_bwd]") {
  for (const Problem& p : shapes()) {
    const Problem q = problem_of(make_attn_params(p));
    CHECK(q.describe() == p.describe());
    CHECK(q.causal == p.causal);
    CHECK(q.scale() == p.scale());
    CHECK(hopper14::workspace_bytes(q, true, bwd::DeltaPolicy::rung) ==
          hopper14::workspace_bytes(p, true, bwd::DeltaPolicy::rung));
  }
}

TEST_CASE("rung 14's packed statistics: each sequence padded to 128-row blocks, no two overlap, the row map inverts",
          "[cpu][hopper_bwd]") {
  // Lengths with empty sequences, lengths of 1, exact multiples of 128 and tails.
  const std::vector<std::vector<int>> batches = {
      {300, 0, 1, 4096, 128, 129, 127, 0}, {1}, {0, 0, 5}, {128, 128, 128}, {1000, 17, 2049}};
  for (const auto& lens : batches) {
    Problem p = shape(1, 1, 1, 4, 2, 128, true);
    set_varlen(&p, lens, lens);
    INFO(p.describe());
    const hopper14::WsShape s(p);
    REQUIRE(s.packed);
    const int64_t rows = hopper14::head_rows(s);
    CHECK(rows % 128 == 0);
    CHECK(hopper14::stat_rows(s) == size_t(p.heads_q) * rows);
    AttnParams a = make_attn_params(p);
    a.cu_seqlens_q = p.cu_seqlens_q.data();  // host memory: the rules are FL_HD
    a.cu_seqlens_k = p.cu_seqlens_k.data();
    // The same layout from the launch's AttnParams (its counts, no host cu_seqlens vector).
    CHECK(hopper14::workspace_bytes(hopper14::WsShape(a), false, bwd::DeltaPolicy::rung) ==
          hopper14::workspace_bytes(s, false, bwd::DeltaPolicy::rung));
    std::vector<int> owner(static_cast<size_t>(rows), -1);
    for (int b = 0; b < p.batch; ++b) {
      const int64_t r0 = hopper14::stat_row0(a, rows, b);
      CHECK(r0 % 128 == 0);
      // Room for the sequence's query blocks, rounded up to 128 rows, inside the head's rows.
      const int64_t span = (int64_t(p.len_q(b)) + 127) / 128 * 128;
      CHECK(r0 + span <= rows);
      for (int64_t r = r0; r < r0 + span; ++r) {
        CHECK(owner[size_t(r)] == -1);
        owner[size_t(r)] = b;
      }
    }
    for (int h = 0; h < p.heads_q; h += 3)
      for (int64_t r = 0; r < rows; ++r) {
        const hopper14::PaddedRow at = hopper14::padded_row_at(a, rows, h * rows + r);
        CHECK(at.h == h);
        CHECK(at.q >= 0);
        CHECK(at.real == (owner[size_t(r)] >= 0 && at.q < p.len_q(at.b)));
        if (at.real) CHECK(hopper14::stat_row0(a, rows, at.b) + at.q == r);
      }
  }
  // A dense batch: [batch, heads_q, rows_padded], as before.
  const Problem d = shape(3, 77, 130, 4, 2, 64, true);
  const AttnParams a = make_attn_params(d);
  const int64_t rows = hopper14::head_rows(d);
  const hopper14::PaddedRow at = hopper14::padded_row_at(a, rows, (2 * d.heads_q + 1) * rows + 76);
  CHECK(at.b == 2);
  CHECK(at.h == 1);
  CHECK(at.q == 76);
  CHECK(at.real);
  CHECK(!hopper14::padded_row_at(a, rows, 77).real);
}

TEST_CASE("rung 14's grid order (traits.h's grid_coords): a permutation of the grid, longest first by section",
          "[cpu][hopper_bwd]") {
  const int dims[][3] = {{16, 4, 8}, {32, 16, 2}, {7, 3, 5}, {1, 1, 1}, {128, 2, 1}, {5, 1, 13}};
  for (const auto& d : dims) {
    const int X = d[0], Y = d[1], Z = d[2], groups = Y * Z;
    for (int section : {0, 1, 3, 8, 16, 32, groups, groups + 5}) {
      std::set<std::vector<int>> seen;
      int last_group_section = 0, last_x = -1;
      for (int t = 0; t < X * groups; ++t) {
        const hopper14::GridCoord c = hopper14::grid_coords(t, X, Y, Z, section);
        REQUIRE(c.x >= 0);
        REQUIRE(c.x < X);
        REQUIRE(c.y >= 0);
        REQUIRE(c.y < Y);
        REQUIRE(c.z >= 0);
        REQUIRE(c.z < Z);
        seen.insert({c.x, c.y, c.z});
        if (section == 0) {  // the hardware's order: x fastest, as blockIdx
          CHECK(c.x == t % X);
          CHECK(c.y == (t / X) % Y);
          CHECK(c.z == t / (X * Y));
          continue;
        }
        // Longest first within a section: its groups' K/V block 0, then 1, ...; the sections in turn.
        const int s = (c.y + Y * c.z) / section;
        CHECK(s >= last_group_section);
        if (s != last_group_section) last_x = -1;
        CHECK(c.x >= last_x);
        last_group_section = s;
        last_x = c.x;
      }
      CHECK(seen.size() == size_t(X) * groups);  // every block once
    }
  }
}

TEST_CASE("rung 14's section (traits.h's rung_lpt_section): 8 groups where their Q and dO rows fit 32 MiB, else none",
          "[cpu][hopper_bwd]") {
  using hopper14::rung_lpt_section;
  CHECK(rung_lpt_section(2048, 128) == 8);
  CHECK(rung_lpt_section(8192, 128) == 8);  // 4 MiB a head: 8 of them fill the budget
  CHECK(rung_lpt_section(8193, 128) == 0);
  CHECK(rung_lpt_section(16384, 128) == 0);  // 8 MiB a head: the K/V block fastest
  CHECK(rung_lpt_section(16384, 64) == 8);
  CHECK(rung_lpt_section(4096, 256) == 8);
  CHECK(rung_lpt_section(8192, 256) == 0);
  CHECK(rung_lpt_section(262144, 128) == 0);
  CHECK(rung_lpt_section(1, 64) == 8);
  CHECK(rung_lpt_section(0, 128) == 8);
}

TEST_CASE("rung 14's longest-first rule (traits.h's lpt_order): the causal, non-deterministic one-block-per-K/V-block grid only",
          "[cpu][hopper_bwd]") {
  using hopper14::lpt_order;
  CHECK(lpt_order(8, false, true, false, true, false));
  CHECK_FALSE(lpt_order(0, false, true, false, true, false));  // no section: the K/V block fastest
  CHECK_FALSE(lpt_order(8, true, true, false, true, false));   // the persistent grid keeps its tile order
  CHECK_FALSE(lpt_order(8, false, false, false, true, false));  // no warp roles
  CHECK_FALSE(lpt_order(8, false, true, true, true, false));   // rung 16's spans
  CHECK_FALSE(lpt_order(8, false, true, false, false, false));  // not causal: every block walks alike
  CHECK_FALSE(lpt_order(8, false, true, false, true, true));   // deterministic: the counters' order
}
