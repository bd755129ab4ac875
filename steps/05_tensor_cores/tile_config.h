/// @file steps/05_tensor_cores/tile_config.h
/// @brief The tile constants of the tensor-core FlashAttention-2 kernel
/// (rungs 05 and 06), with every constraint the kernel relies on checked by
/// static_assert. Plain C++ (no CUDA) so CPU tests can check the budgets.
#pragma once

namespace fl::tc {

/// One shared-memory byte budget: the largest opt-in dynamic shared memory per
/// block of the GPUs the ladder targets (cudaDevAttrMaxSharedMemoryPerBlockOptin).
constexpr int kSmemOptinSm80 = 163 * 1024;  // A100 (sm_80)
constexpr int kSmemOptinSm86 = 99 * 1024;   // RTX 30xx / A10 (sm_86), RTX 40xx / L4 (sm_89)
constexpr int kSmemOptinSm90 = 227 * 1024;  // H100 (sm_90)

/// Shape of an mma.sync.m16n8k16 instruction.
constexpr int kMmaM = 16;
constexpr int kMmaN = 8;
constexpr int kMmaK = 16;
constexpr int kWarpSize = 32;
/// Bytes per cp.async copy (and per ldmatrix row): 8 elements of 16 bits.
constexpr int kChunkBytes = 16;
/// 16-bit storage (fp16 / bf16).
constexpr int kElemBytes = 2;

/// Tiles of one kernel instantiation.
///
///  - HEAD_DIM: d (the whole row of Q, K, V lives in one tile).
///  - BLOCK_M:  query rows per thread block (the FA2 outer loop's Q_i).
///  - BLOCK_N:  keys per inner-loop step (K_j, V_j).
///  - NUM_WARPS: warps per block; each warp owns BLOCK_M / NUM_WARPS query rows
///    (FA2: warps split Q, so no inter-warp reduction is needed).
///  - STAGES:   K/V buffers in shared memory (cp.async pipeline depth).
///  - Q_IN_REGS: Q fragments loaded once into registers (true) or re-read from
///    shared memory at every K/V step (false: frees registers for bigger tiles).
template <int HEAD_DIM, int BLOCK_M, int BLOCK_N, int NUM_WARPS, int STAGES, bool Q_IN_REGS>
struct TileConfig {
  static constexpr int kHeadDim = HEAD_DIM;
  static constexpr int kBlockM = BLOCK_M;
  static constexpr int kBlockN = BLOCK_N;
  static constexpr int kNumWarps = NUM_WARPS;
  static constexpr int kStages = STAGES;
  static constexpr bool kQInRegs = Q_IN_REGS;

  static constexpr int kThreads = NUM_WARPS * kWarpSize;
  /// Query rows per warp and the number of 16-row MMA tiles they make.
  static constexpr int kWarpRows = BLOCK_M / NUM_WARPS;
  static constexpr int kMTiles = kWarpRows / kMmaM;
  /// Bytes of one row of Q, K or V in shared memory (no padding: swizzled).
  static constexpr int kRowBytes = HEAD_DIM * kElemBytes;
  static constexpr int kChunksPerRow = kRowBytes / kChunkBytes;

  static constexpr int kQSmemBytes = BLOCK_M * kRowBytes;
  static constexpr int kKVTileBytes = BLOCK_N * kRowBytes;  ///< one K_j or one V_j
  static constexpr int kSmemBytes = kQSmemBytes + 2 * STAGES * kKVTileBytes;

  /// Registers per thread that hold accumulators and fragments (fp32 S and O,
  /// 16-bit Q): a first estimate of the pressure, before addresses and m/l.
  static constexpr int kAccumRegs = kMTiles * (BLOCK_N / kMmaN) * 4 +   // S
                                    kMTiles * (HEAD_DIM / kMmaN) * 4 +  // O
                                    (Q_IN_REGS ? kMTiles * (HEAD_DIM / kMmaK) * 4 : 0);

  static_assert(HEAD_DIM % kMmaK == 0, "head_dim must be a multiple of the MMA k (16)");
  static_assert(kRowBytes >= 64 && (kRowBytes & (kRowBytes - 1)) == 0,
                "the swizzle needs rows of a power of two >= 64 bytes (head_dim 32, 64, 128, 256)");
  static_assert(BLOCK_M % NUM_WARPS == 0 && kWarpRows % kMmaM == 0,
                "each warp must own a whole number of 16-row MMA tiles");
  static_assert(BLOCK_N % (2 * kMmaN) == 0,
                "K is loaded two 8-key MMA tiles per ldmatrix.x4, and P needs 16-key k-steps");
  /// Rows one pass of the cp.async loader covers (each thread copies one
  /// 16-byte chunk per row it visits).
  static constexpr int kLoadRowsPerPass = kThreads / kChunksPerRow;
  static_assert(kThreads % kChunksPerRow == 0 && BLOCK_M % kLoadRowsPerPass == 0 &&
                    BLOCK_N % kLoadRowsPerPass == 0,
                "Q and K/V tiles must split evenly into 16-byte cp.async copies over the threads");
  static_assert(STAGES >= 2, "the pipeline needs at least two K/V buffers");
  static_assert(kSmemBytes <= kSmemOptinSm90, "more shared memory than any supported GPU has");
  static_assert(kAccumRegs <= 224, "accumulators alone would exceed the 255-register limit");
};

}  // namespace fl::tc
