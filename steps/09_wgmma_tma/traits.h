/// @file steps/09_wgmma_tma/traits.h
/// @brief Rung 09: the tiles of the wgmma + TMA kernel per head_dim, with the shared-memory and
/// register budgets checked at compile time. Plain C++ (no CUDA), so a CPU test can check it.
///
/// What fixes the shape on Hopper:
/// @code
///   // clang-format off
///   BLOCK_M  = 64 x warpgroups    wgmma's M is 64 per warpgroup; 2 warpgroups = 128 query rows
///   BLOCK_N  multiple of 16       S = Q K^T is one m64nBLOCK_Nk16 wgmma per 16 columns of d
///   d        multiple of 64       a TMA box under the 128-byte swizzle is 64 16-bit columns
///   registers / thread  ~  BLOCK_N/2 (S, fp32) + BLOCK_N/4 (P, 16-bit pairs) + d/2 (O, fp32)
///   shared memory       =  BLOCK_M*d*2 (Q)  +  2 * STAGES * BLOCK_N*d*2 (K and V rings)
///   // clang-format on
/// @endcode
/// Each choice below says why; the alternatives are registered variants of the rung
/// (launch.cu), timed beside it by `ladder_bench --fl_family=ablation` (README.md's table).
#pragma once

namespace fl::hopper09 {

/// Shared memory one block may opt into on an H100 / H200 (sm_90).
constexpr int kSmemOptinSm90 = 227 * 1024;

/// The tiles of one instantiation. WARPGROUPS consumer warpgroups of 128 threads each own 64
/// query rows; K/V come through a STAGES-deep TMA ring of BLOCK_N-key tiles. HEAD_DIM_V: V's and
/// O's columns, fewer than Q's and K's in MLA's prefill (192 and 128: rung 15's MlaTiles); this
/// rung's tiles are WgmmaTiles, V at Q's head_dim.
template <int HEAD_DIM, int WARPGROUPS, int BLOCK_N, int STAGES, int HEAD_DIM_V>
struct WgmmaTilesV {
  static constexpr int kHeadDim = HEAD_DIM;
  static constexpr int kHeadDimV = HEAD_DIM_V;
  static constexpr int kWarpgroups = WARPGROUPS;
  static constexpr int kBlockM = 64 * WARPGROUPS;
  static constexpr int kBlockN = BLOCK_N;
  static constexpr int kStages = STAGES;
  static constexpr int kThreads = 128 * WARPGROUPS;
  /// 64-column blocks of head_dim: one TMA box (128 B wide rows) each.
  static constexpr int kColBlocks = HEAD_DIM / 64;
  static constexpr int kColBlocksV = HEAD_DIM_V / 64;  ///< V's 64-column blocks
  static constexpr int kQBytes = kBlockM * HEAD_DIM * 2;
  static constexpr int kKVBytes = BLOCK_N * HEAD_DIM * 2;  ///< one K tile of the ring (and V's, at V = Q's head_dim)
  static constexpr int kVTileBytes = BLOCK_N * HEAD_DIM_V * 2;  ///< one V tile of the ring
  /// mbarriers: Q, then a "K landed" and a "V landed" barrier per stage.
  static constexpr int kBarrierBytes = 8 * (1 + 2 * STAGES);
  /// The tiles, the barriers, and 1024 bytes of slack to align the base to the swizzle atom.
  static constexpr int kSmemBytes = kQBytes + STAGES * (kKVBytes + kVTileBytes) + kBarrierBytes + 1024;
  /// Accumulator registers per thread: S (fp32), P (16-bit pairs), O (fp32, V's columns).
  static constexpr int kAccRegs = BLOCK_N / 2 + BLOCK_N / 4 + HEAD_DIM_V / 2;

  static_assert(HEAD_DIM % 64 == 0 && HEAD_DIM <= 256, "head_dim: 64, 128, 192 or 256");
  static_assert(HEAD_DIM_V % 64 == 0 && HEAD_DIM_V <= HEAD_DIM, "V's head_dim: a multiple of 64, at most Q's");
  static_assert(BLOCK_N % 16 == 0 && BLOCK_N >= 16 && BLOCK_N <= 256, "wgmma N: 16..256, by 16");
  static_assert(WARPGROUPS >= 1 && WARPGROUPS <= 3, "1 to 3 warpgroups (BLOCK_M 64..192)");
  static_assert(STAGES >= 1, "at least one K/V stage");
  static_assert(kQBytes % 1024 == 0 && kKVBytes % 1024 == 0 && kVTileBytes % 1024 == 0,
                "every tile starts on a 1024-byte swizzle atom");
  static_assert(kSmemBytes <= kSmemOptinSm90, "must fit the 227 KB an sm_90 block may use");
  static_assert(kAccRegs <= 200, "the accumulators leave room for addresses and softmax state");
};

/// This rung's tiles: V and O at Q's and K's head_dim.
template <int HEAD_DIM, int WARPGROUPS, int BLOCK_N, int STAGES>
struct WgmmaTiles : WgmmaTilesV<HEAD_DIM, WARPGROUPS, BLOCK_N, STAGES, HEAD_DIM> {};

/// The rung's tiles for head_dim HEAD_DIM (every choice: 2 warpgroups, 256 threads).
template <int HEAD_DIM>
struct HopperTiles;

// d = 64: 128 x 64, 3 stages. Timed against 128 x 128 (the `d64-128x128` variant) in one H100
// run, this tile was 1.2-1.3x faster at every seqlen, causal or not: with S in 32 registers the
// kernel fits two blocks per SM (registers and 16 + 3 x 2 x 8 = 64 KB of shared memory each),
// and one block's softmax runs under the other's wgmmas. The third stage hides the load of a
// tile whose GEMMs are short (half the MMA work per byte loaded of d = 128).
template <>
struct HopperTiles<64> : WgmmaTiles<64, 2, 64, 3> {};

// d = 128: 128 x 128, 2 stages (FA3's 128 x 128 for causal d = 128). 64 + 32 + 64 accumulator
// registers; 32 + 2 x 2 x 32 = 160 KB of shared memory: one block per SM, in which one
// warpgroup's softmax runs while the other's wgmmas occupy the tensor cores. Variants: BLOCK_N
// = 64 (half the registers for S, twice the barriers per key) and one warpgroup per block
// (BLOCK_M = 64: K/V tiles reused by 64 rows instead of 128).
template <>
struct HopperTiles<128> : WgmmaTiles<128, 2, 128, 2> {};

// d = 256: 128 x 80, 2 stages (FlashAttention-3's tile). O alone is 128 registers per thread, so
// S must narrow (40 registers); 64 + 2 x 2 x 40 = 224 KB of shared memory. Timed against 128 x 64
// (the `d256-128x64` variant) in one H100 run, 80 keys were ~5% faster, causal or not.
template <>
struct HopperTiles<256> : WgmmaTiles<256, 2, 80, 2> {};

// ---- ablation variants (registered as rung 09 variants, one head_dim each) --------------------
using Variant_d128_128x64 = WgmmaTiles<128, 2, 64, 2>;   ///< narrower S block
using Variant_d128_64x128 = WgmmaTiles<128, 1, 128, 2>;  ///< one warpgroup per block
using Variant_d128_128x128_s1 = WgmmaTiles<128, 2, 128, 1>;  ///< no prefetch: the ring's worth
using Variant_d64_128x128 = WgmmaTiles<64, 2, 128, 3>;   ///< d = 64 with d = 128's S width
using Variant_d64_128x64_s2 = WgmmaTiles<64, 2, 64, 2>;  ///< d = 64 without the third stage
using Variant_d256_128x64 = WgmmaTiles<256, 2, 64, 2>;   ///< d = 256 with 64 keys (192 KB)

}  // namespace fl::hopper09
