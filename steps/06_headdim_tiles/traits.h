/// @file steps/06_headdim_tiles/traits.h
/// @brief Rung 06: the tile shape of the tensor-core kernel chosen per head_dim
/// (after FlashAttention-2's kernel_traits.h / flash_fwd_launch_template.h),
/// with the shared-memory budget checked at compile time. Plain C++ (no CUDA),
/// so tests/cpu/test_traits.cpp checks it without nvcc.
///
/// The reasons below are measurements: see README.md for the table they come
/// from (H100 SXM, fp16, batch x seqlen = 16k tokens, hidden 2048, seqlen 4096,
/// median of 50 launches with L2 flushed). "x% slower" is against the choice.
#pragma once

#include "../05_tensor_cores/tile_config.h"

namespace fl::tc {

/// Which per-block shared-memory budget the tiles are sized for.
///  - large: sm_80 (A100, 163 KB opt-in per block) and sm_90 (H100, 227 KB).
///  - small: sm_86 / sm_89 (RTX 30xx/40xx, A10, L4: 99 KB per block and only
///    100 KB per SM, so a 96 KB tile would leave one block, 4 warps, per SM).
enum class SmemClass { large, small };

/// Opt-in shared memory per block from which the large tiles are used.
constexpr int kLargeSmemThreshold = 128 * 1024;

/// The class for a GPU with @p smem_per_block_optin bytes
/// (DeviceInfo::smem_per_block_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin).
constexpr SmemClass smem_class_for(int smem_per_block_optin) {
  return smem_per_block_optin >= kLargeSmemThreshold ? SmemClass::large : SmemClass::small;
}

/// Shared-memory budget the tiles of a class must fit, per block.
constexpr int smem_budget(SmemClass c) {
  return c == SmemClass::large ? kSmemOptinSm80 : kSmemOptinSm86;
}

/// Tiles for head_dim HEAD_DIM on a GPU of class C. Each specialization is a
/// TileConfig<HEAD_DIM, BLOCK_M, BLOCK_N, NUM_WARPS, STAGES, Q_IN_REGS>.
template <int HEAD_DIM, SmemClass C>
struct HeadDimTiles;

// ---- large shared memory (A100, H100) -------------------------------------
// Measured on an H200 (sm_90, 132 SMs), fp16, batch 4 x seqlen 4096, hidden
// 2048: median ms of the forward, non-causal / causal (README.md, table 1).

// d = 32: 128 x 64, 4 warps (32 rows each), Q in registers: 2.10 / 1.14 ms.
// 128 x 128 (the head_dim note's choice, docs/sources.md) is 6% slower
// (2.23 / 1.21 ms): 246 registers and 40 KB leave 2 blocks per SM against 3
// here, and at d = 32 a block does little MMA work per K/V byte, so latency
// hiding needs the third block.
// 64 x 64 (rung 05) is 13% slower: 16 rows per warp double the ldmatrix
// traffic per MMA.
template <>
struct HeadDimTiles<32, SmemClass::large> : TileConfig<32, 128, 64, 4, 2, true> {};

// d = 64: 128 x 64, 4 warps (32 rows each), Q in registers: 1.70 / 0.92 ms.
// 32 rows per warp means each K/V fragment read by ldmatrix feeds two MMAs.
// FA2's 128 x 128 with Q re-read from shared memory is 1.5% slower (1.72 /
// 0.95 ms) and spills at 255 registers; 8 warps of 16 rows are 18% slower
// (2.00 ms); 64 x 64 (rung 05) 17% slower (1.99 ms).
template <>
struct HeadDimTiles<64, SmemClass::large> : TileConfig<64, 128, 64, 4, 2, true> {};

// d = 128: 128 x 64, 4 warps (32 rows each), Q re-read from shared memory
// (FA2's choice for A100/H100): 1.58 / 0.90 ms. O_i alone is 128 registers
// at 32 rows per warp, so Q cannot stay in registers. ptxas reports 255
// registers and 8 bytes of stack (two loop-invariant scalars, reloaded from
// L1 twice per K/V block). The spill-free 8-warp version (16 rows per warp,
// Q in registers, 182 registers) is 24% slower (1.96 / 1.08 ms): twice the
// ldmatrix traffic per MMA. 128 x 32 is 13% slower (1.80 ms): twice the
// barriers and softmax bookkeeping per key; 3 stages do not help (1.95 ms
// with 8 warps vs 1.96 with 2 stages).
template <>
struct HeadDimTiles<128, SmemClass::large> : TileConfig<128, 128, 64, 4, 2, false> {};

// d = 256: 128 x 32, 8 warps (16 rows each), Q in shared memory (128 KB, fits
// an A100): 2.11 / 1.22 ms. O_i is 128 registers per thread even at 16 rows
// per warp, so only a narrow S block fits. 64 x 32 with 4 warps is 5% slower
// (2.21 ms), 64 x 64 16% slower (2.43 ms). 128 x 64 with 8 warps is 16% faster
// (1.78 / 1.04 ms) but needs 192 KB: H100/H200 only, so it stays a variant.
template <>
struct HeadDimTiles<256, SmemClass::large> : TileConfig<256, 128, 32, 8, 2, false> {};

// ---- small shared memory (sm_86 / sm_89, ~100 KB per SM) -------------------
// Not measured on such a GPU in this project: sized so that two blocks (8
// warps) fit in 100 KB wherever the register budget allows it.

template <>
struct HeadDimTiles<32, SmemClass::small> : TileConfig<32, 128, 64, 4, 2, true> {};  // 24 KB
template <>
struct HeadDimTiles<64, SmemClass::small> : TileConfig<64, 128, 64, 4, 2, true> {};  // 48 KB
template <>
struct HeadDimTiles<128, SmemClass::small> : TileConfig<128, 64, 32, 4, 2, true> {};  // 48 KB
template <>
struct HeadDimTiles<256, SmemClass::small> : TileConfig<256, 64, 32, 4, 2, false> {};  // 96 KB

/// Compile-time checks of every specialization against its class's budget.
template <int HEAD_DIM, SmemClass C>
constexpr bool tiles_fit() {
  using Cfg = HeadDimTiles<HEAD_DIM, C>;
  return Cfg::kHeadDim == HEAD_DIM && Cfg::kSmemBytes <= smem_budget(C);
}
static_assert(tiles_fit<32, SmemClass::large>() && tiles_fit<64, SmemClass::large>() &&
                  tiles_fit<128, SmemClass::large>() && tiles_fit<256, SmemClass::large>(),
              "large tiles must fit an A100's 163 KB per block");
static_assert(tiles_fit<32, SmemClass::small>() && tiles_fit<64, SmemClass::small>() &&
                  tiles_fit<128, SmemClass::small>() && tiles_fit<256, SmemClass::small>(),
              "small tiles must fit the 99 KB per block of sm_86 / sm_89");

// ---- ablation variants (registered as rung 06 variants, one head_dim each) --
// The alternatives the choices above were measured against. Each is run with
// `--variant NAME` on its head_dim; README.md has the measured table.

using Variant_d32_128x128 = TileConfig<32, 128, 128, 4, 2, true>;
using Variant_d32_64x64 = TileConfig<32, 64, 64, 4, 2, true>;
using Variant_d32_128x128_w8 = TileConfig<32, 128, 128, 8, 2, true>;
using Variant_d64_128x128_qsmem = TileConfig<64, 128, 128, 4, 2, false>;
using Variant_d64_128x96_qsmem = TileConfig<64, 128, 96, 4, 2, false>;
using Variant_d64_128x128_w8 = TileConfig<64, 128, 128, 8, 2, true>;
using Variant_d64_64x64 = TileConfig<64, 64, 64, 4, 2, true>;
using Variant_d128_128x64_w8 = TileConfig<128, 128, 64, 8, 2, true>;
using Variant_d128_128x32_w4 = TileConfig<128, 128, 32, 4, 2, false>;
using Variant_d128_128x128_w8 = TileConfig<128, 128, 128, 8, 2, false>;
using Variant_d128_128x64_w8_s3 = TileConfig<128, 128, 64, 8, 3, true>;
using Variant_d256_64x32 = TileConfig<256, 64, 32, 4, 2, false>;
using Variant_d256_64x64 = TileConfig<256, 64, 64, 4, 2, false>;
using Variant_d256_128x64_w8 = TileConfig<256, 128, 64, 8, 2, false>;

}  // namespace fl::tc
