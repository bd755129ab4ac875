/// @file steps/13_fp8/traits.h
/// @brief Rung 13: rung 10's warpgroups on e4m3 operands. Plain C++ (no CUDA).
///
/// What changes with one byte per element:
/// @code
///   // clang-format off
///   wgmma          m64nNk32 e4m3 x e4m3 -> fp32: 32 of K per instruction (16 in 16 bits), twice
///                  the FLOPs per cycle; both operands K-major (8-bit types have no transpose)
///   rows in smem   Q, K: head_dim bytes (64 B at d = 64: 64-byte swizzle; 128 B column blocks
///                  at d = 128, 256). V^T: BLOCK_N keys = 128 bytes per row (128-byte swizzle)
///   registers      S BLOCK_N/2 fp32 + P BLOCK_N/8 (4 e4m3 per register) + O head_dim/2 fp32
///   shared memory  Q BLOCK_M d + STAGES x (K BLOCK_N d + V^T d BLOCK_N) bytes: half of rung 10's
///   // clang-format on
/// @endcode
#pragma once

#include "../09_wgmma_tma/traits.h"
#include "../10_warp_specialized/traits.h"

namespace fl::hopper13 {

/// P is multiplied by 2^kPShift before its cast to e4m3 (FlashAttention-3's choice, 2^8): the
/// row maximum becomes 256 instead of 1, so P's small values stay in e4m3's normal range
/// (>= 2^-6) 8 binades longer. 256 is exact in e4m3 and below its 448; l carries the same
/// factor, so O / l is unchanged, and the LSE subtracts kPShift ln 2. The `p-unscaled`
/// variant uses 0, to measure the choice.
constexpr int kPShift = 8;

/// Of every 4 8-column blocks of S, how many take their exp2 from a polynomial on the FMA pipe
/// instead of ex2.approx on the XU pipe (softmax_math.h, exp2_poly). The `exp-fma-25` and
/// `exp-fma-50` variants take 1 and 2.
constexpr int kExpFma = 0;

/// Tiles of one instantiation: a producer warpgroup and two consumer warpgroups of 64 query
/// rows each (rung 10's), on e4m3 tiles.
template <int HEAD_DIM, int BLOCK_N, int STAGES>
struct Fp8Tiles {
  static constexpr int kHeadDim = HEAD_DIM;
  static constexpr int kConsumers = 2;
  static constexpr int kBlockM = 64 * kConsumers;
  static constexpr int kBlockN = BLOCK_N;
  static constexpr int kStages = STAGES;
  static constexpr int kThreads = 128 * (1 + kConsumers);
  /// Q and K rows are head_dim bytes: swizzled 64 B wide at d = 64, else in 128 B column blocks.
  static constexpr int kSwizzleQK = HEAD_DIM >= 128 ? 128 : HEAD_DIM;
  static constexpr int kColBlocks = HEAD_DIM / kSwizzleQK;
  /// V^T rows are BLOCK_N keys = BLOCK_N bytes, in 128 B column blocks.
  static constexpr int kSwizzleV = BLOCK_N >= 128 ? 128 : BLOCK_N;
  static constexpr int kVColBlocks = BLOCK_N / kSwizzleV;
  static constexpr int kQBytes = kBlockM * HEAD_DIM;
  static constexpr int kKBytes = BLOCK_N * HEAD_DIM;
  static constexpr int kVBytes = HEAD_DIM * BLOCK_N;
  /// mbarriers: Q, then per stage "K landed", "V landed", "K empty", "V empty" (rung 10's).
  static constexpr int kBarrierBytes = 8 * (1 + 4 * STAGES);
  static constexpr int kSmemBytes = kQBytes + STAGES * (kKBytes + kVBytes) + kBarrierBytes + 1024;
  /// Accumulator registers per thread: S (fp32), P (4 e4m3 per register), O (fp32).
  static constexpr int kAccRegs = BLOCK_N / 2 + BLOCK_N / 8 + HEAD_DIM / 2;

  static_assert(HEAD_DIM == 64 || HEAD_DIM == 128 || HEAD_DIM == 256, "head_dim 64, 128 or 256");
  static_assert(BLOCK_N == 64 || BLOCK_N == 128 || BLOCK_N == 256,
                "BLOCK_N: whole k32 steps in whole 64 or 128 B swizzled V^T rows");
  static_assert(kQBytes % 1024 == 0 && kKBytes % 1024 == 0 && kVBytes % 1024 == 0,
                "every tile starts on a 1024-byte swizzle atom");
  static_assert(kSmemBytes <= hopper09::kSmemOptinSm90, "must fit the 227 KB of an sm_90 block");
  static_assert(kAccRegs <= hopper10::kConsumerRegs - 24,
                "S of block n+1, P of block n and O fit the consumers' 240 registers");
};

/// The rung's tiles per head_dim: 128 keys per block everywhere (one 128 B row of V^T), so the
/// second GEMM is 4 k32 steps; stages as deep as shared memory allows within rung 10's budget.
///   d = 64:  3 stages,  56 KB  (S 64 + P 16 + O 32 registers)
///   d = 128: 3 stages, 112 KB  (S 64 + P 16 + O 64)
///   d = 256: 2 stages, 160 KB  (S 64 + P 16 + O 128: the register budget is the limit)
template <int HEAD_DIM>
struct Fp8TilesFor;
template <>
struct Fp8TilesFor<64> : Fp8Tiles<64, 128, 3> {};
template <>
struct Fp8TilesFor<128> : Fp8Tiles<128, 128, 3> {};
template <>
struct Fp8TilesFor<256> : Fp8Tiles<256, 128, 2> {};

}  // namespace fl::hopper13
