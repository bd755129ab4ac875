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

/// Workspace bytes of a launch: the dynamic schedule's two counters (scheduler.h), zeroed by the
/// launch or, in a workspace the caller keeps (AttnParams::workspace_kept), left at zero by the
/// kernel's last block.
constexpr size_t kWorkspaceBytes = 16;

/// Rung 10's tiles plus the "Q empty" barrier and the item slot; with Q_BUFS = 2 a second set
/// (slot, "Q landed", "Q empty") and a second Q tile after the barriers, 1024-byte aligned. V's
/// and O's head_dim HEAD_DIM_V (rung 10's WsTilesV; PersistentTiles below: V at Q's, MlaTiles).
template <int HEAD_DIM, int BLOCK_N, int STAGES, int Q_BUFS, int HEAD_DIM_V>
struct PersistentTilesV : hopper10::WsTilesV<HEAD_DIM, BLOCK_N, STAGES, HEAD_DIM_V> {
  using Ws = hopper10::WsTilesV<HEAD_DIM, BLOCK_N, STAGES, HEAD_DIM_V>;
  static constexpr int kQBufs = Q_BUFS;
  static constexpr int kBarrierBytes = Ws::kBarrierBytes + 8 + 16 + (Q_BUFS == 2 ? 32 : 0);
  static constexpr int kSmemBytes = Ws::kSmemBytes + 8 + 16 + (Q_BUFS == 2 ? 32 + 1024 + Ws::kQBytes : 0);
  static_assert(Q_BUFS == 1 || Q_BUFS == 2, "one or two Q tiles");
  static_assert(kSmemBytes <= hopper09::kSmemOptinSm90, "must fit the 227 KB of an sm_90 block");
};

/// The rung's tiles: V and O at Q's and K's head_dim.
template <int HEAD_DIM, int BLOCK_N, int STAGES, int Q_BUFS = 1>
struct PersistentTiles : PersistentTilesV<HEAD_DIM, BLOCK_N, STAGES, Q_BUFS, HEAD_DIM> {};

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

/// MLA's prefill and training forward (DeepSeek-V2/V3: Q and K of 128 + 64 RoPE = 192 columns,
/// V and O of 128) on tiles of its own rather than the d = 256 ones with zero columns, which
/// spend 256 / 192 of Q K^T's FLOPs and 256 / 128 of P V's (1.6x the pair's 2 x (192 + 128)).
/// FlashAttention-3's 192/128 tile: 128 x 128, 2 stages; shared memory 48 (Q) + 2 x (48 (K) +
/// 32 (V)) = 208 KB; registers S 64 + P 32 + O 64 = 160, the d = 128 causal tile's. Rung 16
/// runs it for head_dims in (128, 192] with V's up to 128 (its with_head_dims), under every mask.
struct MlaTiles : PersistentTilesV<192, 128, 2, 1, 128> {};
static_assert(MlaTiles::kSmemBytes <= 214 * 1024 && MlaTiles::kAccRegs == 160, "the budget above");

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
