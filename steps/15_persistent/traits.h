/// @file steps/15_persistent/traits.h
/// @brief Rung 15: rung 10's tiles in a persistent block. Plain C++ (no CUDA).
///
/// A persistent block keeps rung 10's three warpgroups and shared memory, plus one mbarrier, "Q
/// empty", on which both consumers arrive once they have read the Q tile for the last time (so
/// the producer may load the next tile's Q while they still finish this one), and 16 bytes
/// where the producer leaves the next work item for the consumers. With two Q buffers (Q_BUFS),
/// items alternate between two (Q tile, "Q landed", "Q empty", slot) sets, so the next item's Q
/// is loaded as soon as its copies can be issued, not after this item's last S = Q K^T.
#pragma once

#include <cstddef>

#include "../10_warp_specialized/traits.h"

namespace fl::hopper15 {

/// Workspace bytes of a launch: the dynamic schedule's counter (scheduler.h), zeroed by the launch.
constexpr size_t kWorkspaceBytes = 16;

/// Rung 10's tiles plus the "Q empty" barrier and the item slot; with Q_BUFS = 2 a second set
/// (slot, "Q landed", "Q empty") and a second Q tile after the barriers, 1024-byte aligned.
template <int HEAD_DIM, int BLOCK_N, int STAGES, int Q_BUFS = 1>
struct PersistentTiles : hopper10::WsTiles<HEAD_DIM, BLOCK_N, STAGES> {
  using Ws = hopper10::WsTiles<HEAD_DIM, BLOCK_N, STAGES>;
  static constexpr int kQBufs = Q_BUFS;
  static constexpr int kBarrierBytes = Ws::kBarrierBytes + 8 + 16 + (Q_BUFS == 2 ? 32 : 0);
  static constexpr int kSmemBytes = Ws::kSmemBytes + 8 + 16 + (Q_BUFS == 2 ? 32 + 1024 + Ws::kQBytes : 0);
  static_assert(Q_BUFS == 1 || Q_BUFS == 2, "one or two Q tiles");
  static_assert(kSmemBytes <= hopper09::kSmemOptinSm90, "must fit the 227 KB of an sm_90 block");
};

/// The rung's tiles per head_dim and mask: rung 10's (traits.h there gives each one's measured
/// reason), which rung 15's own sweep keeps (README: "Tiles").
template <int HEAD_DIM, bool CAUSAL = false>
struct Tiles;
template <bool CAUSAL>
struct Tiles<64, CAUSAL> : PersistentTiles<64, 128, 3> {};
template <>
struct Tiles<128, false> : PersistentTiles<128, 176, 2> {};
template <>
struct Tiles<128, true> : PersistentTiles<128, 128, 2> {};
template <bool CAUSAL>
struct Tiles<256, CAUSAL> : PersistentTiles<256, 80, 2> {};

// ---- tile variants for the sweep (registered as rung 15 variants, one head_dim each) ----------
using Variant_d64_128x192 = PersistentTiles<64, 192, 2>;    ///< d = 64, a wider S (FA3's d = 64 N)
using Variant_d128_128x128 = PersistentTiles<128, 128, 2>;  ///< d = 128, the causal tile, masked or not
using Variant_d128_128x176 = PersistentTiles<128, 176, 2>;  ///< d = 128, the dense tile, masked or not
using Variant_d256_128x64 = PersistentTiles<256, 64, 2>;    ///< d = 256 with 64 keys
/// Two Q tiles where they fit beside the ring: d = 64 (rung 10's tile), d = 128 with 128 keys
/// (the 176-key tile leaves no room: 208 KB + 32 KB; nor does d = 256: 224 KB + 64 KB).
using Variant_d64_q2 = PersistentTiles<64, 128, 3, 2>;
using Variant_d128_q2 = PersistentTiles<128, 128, 2, 2>;


}  // namespace fl::hopper15
