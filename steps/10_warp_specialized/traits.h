/// @file steps/10_warp_specialized/traits.h
/// @brief Rung 10: rung 09's tiles plus a producer warpgroup. Plain C++ (no CUDA).
///
/// One block = 1 producer warpgroup (TMA only, 24 registers per thread after setmaxnreg) + 2
/// consumer warpgroups (64 query rows each, 240 registers per thread):
/// @code
///   // clang-format off
///   registers per SM   128 x 24 (producer) + 2 x 128 x 240 (consumers) = 64512 <= 65536
///   shared memory      rung 09's tiles + a "K empty" and a "V empty" mbarrier per stage
///   // clang-format on
/// @endcode
/// The `no-ws` variant runs rung 09's kernel on this rung's tiles: this rung with warp
/// specialization turned off.
#pragma once

#include "../09_wgmma_tma/traits.h"

namespace fl::hopper10 {

/// Registers per thread after setmaxnreg (FlashAttention-3's split for 2 consumer warpgroups).
constexpr int kProducerRegs = 24;
constexpr int kConsumerRegs = 240;
static_assert(128 * kProducerRegs + 2 * 128 * kConsumerRegs <= 65536,
              "the register file of one SM holds the three warpgroups");

/// Rung 09's tiles with a producer warpgroup in front of its two consumer warpgroups; V's and O's
/// head_dim HEAD_DIM_V (rung 09's WgmmaTilesV; WsTiles below: V at Q's).
template <int HEAD_DIM, int BLOCK_N, int STAGES, int HEAD_DIM_V>
struct WsTilesV : hopper09::WgmmaTilesV<HEAD_DIM, 2, BLOCK_N, STAGES, HEAD_DIM_V> {
  using Base = hopper09::WgmmaTilesV<HEAD_DIM, 2, BLOCK_N, STAGES, HEAD_DIM_V>;
  static constexpr int kConsumers = 2;
  static constexpr int kThreads = 128 * (1 + kConsumers);
  /// A K tile and a V tile of the ring: the same size unless V has fewer columns (rung 13's e4m3
  /// K and V^T name them too).
  static constexpr int kKBytes = Base::kKVBytes;
  static constexpr int kVBytes = Base::kVTileBytes;
  /// mbarriers: Q, then per stage "K landed", "V landed", "K empty", "V empty".
  static constexpr int kBarrierBytes = 8 * (1 + 4 * STAGES);
  static constexpr int kSmemBytes =
      Base::kQBytes + STAGES * (kKBytes + kVBytes) + kBarrierBytes + 1024;
  static_assert(kSmemBytes <= hopper09::kSmemOptinSm90, "must fit the 227 KB of an sm_90 block");
  static_assert(Base::kAccRegs <= kConsumerRegs - 40,
                "S of block n+1, P of block n (still read by its wgmma) and O fit the consumers");
};

/// This rung's tiles: V and O at Q's and K's head_dim.
template <int HEAD_DIM, int BLOCK_N, int STAGES>
struct WsTiles : WsTilesV<HEAD_DIM, BLOCK_N, STAGES, HEAD_DIM> {};

/// The rung's tiles, per head_dim and (at 128) causal or not. Each choice was timed against the
/// variants below in one H100 run (bench/results/nvidia-h100-80gb-hbm3/hopper-rungs/):
///   d = 64:  128 x 128, 3 stages. The 64-key tile that is rung 09's fastest at d = 64 loses here:
///            rung 09 runs two blocks per SM and they hide each other's softmax; this rung runs
///            one (384 threads x 168 registers), and a narrow S leaves its GEMMs too short to
///            cover a softmax.
///   d = 128: 128 x 176 without a causal mask (FlashAttention-3's tile: S 88 + P 44 + O 64
///            registers, 209 KB), 128 x 128 with one (FlashAttention-3's causal tile; that run
///            has no 176-key causal entry): a causal row block ends on the diagonal, and a wider
///            block would waste more of its last tile there.
///   d = 256: 128 x 80 (FlashAttention-3's; 225 KB of shared memory), faster than 128 x 64.
template <int HEAD_DIM, bool CAUSAL = false>
struct HopperWsTiles;
template <bool CAUSAL>
struct HopperWsTiles<64, CAUSAL> : WsTiles<64, 128, 3> {};
template <>
struct HopperWsTiles<128, false> : WsTiles<128, 176, 2> {};
template <>
struct HopperWsTiles<128, true> : WsTiles<128, 128, 2> {};
template <bool CAUSAL>
struct HopperWsTiles<256, CAUSAL> : WsTiles<256, 80, 2> {};

// ---- tile variants (registered as rung 10 variants, one head_dim each) -------------------------
using Variant_d64_128x64 = WsTiles<64, 64, 3>;     ///< d = 64, S half as wide: rung 09's fastest d = 64 tile
using Variant_d128_128x128 = WsTiles<128, 128, 2>; ///< d = 128 with the causal tile, masked or not
using Variant_d256_128x64 = WsTiles<256, 64, 2>;   ///< d = 256 with 64 keys (O alone is 128 registers)

/// The three FlashAttention-3 ideas this rung adds to rung 09; each `--variant` turns one off.
struct Features {
  bool pingpong;  ///< consumer warpgroups take turns issuing their GEMMs (named barriers)
  bool overlap;   ///< softmax of block n under the S = Q K^T of block n + 1, same warpgroup
};

}  // namespace fl::hopper10
