/// @file steps/06_headdim_tiles/traits.h
/// @brief Rung 06: the tile shape of the tensor-core kernel chosen per head_dim
/// (after FlashAttention-2's kernel_traits.h / flash_fwd_launch_template.h),
/// with the shared-memory budget checked at compile time. Plain C++ (no CUDA),
/// so tests/cpu/test_traits.cpp checks it without nvcc.
///
/// Each choice below gives its reason and names the alternatives it was weighed
/// against; every alternative is a registered variant (end of this file), and
/// README.md's ablation table, generated from the committed ablation run
/// (`bench/run_all.sh --family ablation`), has their times against the choice.
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
// The alternatives named below are timed against these choices in README.md's
// ablation table (fp16, batch x seqlen = 16k tokens, hidden 2048, seqlen 4096).

// d = 32: 128 x 64, 4 warps (32 rows each), Q in registers.
// Against 128 x 128 (the head_dim note's choice, docs/sources.md;
// Variant_d32_128x128): the wider S block needs more registers and 40 KB of
// shared memory, so fewer blocks may fit per SM, and at d = 32 a block does
// little MMA work per K/V byte, so latency hiding needs the extra blocks.
// Against 64 x 64 (rung 05; Variant_d32_64x64): 16 rows per warp double the
// ldmatrix traffic per MMA.
template <>
struct HeadDimTiles<32, SmemClass::large> : TileConfig<32, 128, 64, 4, 2, true> {};

// d = 64: 128 x 64, 4 warps (32 rows each), Q in registers.
// 32 rows per warp means each K/V fragment read by ldmatrix feeds two MMAs.
// Against FA2's 128 x 128 with Q re-read from shared memory
// (Variant_d64_128x128_qsmem, and 128 x 96: Variant_d64_128x96_qsmem): the
// wider S block pushes the register count to the limit, and re-reading Q adds
// ldmatrix traffic. Against 8 warps of 16 rows (Variant_d64_128x128_w8) and
// 64 x 64 (rung 05; Variant_d64_64x64): half the MMAs per ldmatrix.
template <>
struct HeadDimTiles<64, SmemClass::large> : TileConfig<64, 128, 64, 4, 2, true> {};

// d = 128: 128 x 64, 4 warps (32 rows each), Q re-read from shared memory
// (FA2's choice for A100/H100). O_i alone is 128 registers at 32 rows per
// warp, so Q cannot stay in registers, and ptxas may need a small stack frame
// (the run report's kernel table, or -DFL_PTXAS_VERBOSE=ON, shows it). The
// bet is that this costs less than the spill-free 8-warp version (16 rows per
// warp, Q in registers; Variant_d128_128x64_w8), which pays twice the ldmatrix
// traffic per MMA. Against 128 x 32 (Variant_d128_128x32_w4): twice the
// barriers and softmax bookkeeping per key. A third stage
// (Variant_d128_128x64_w8_s3) tests whether a deeper cp.async pipeline helps.
template <>
struct HeadDimTiles<128, SmemClass::large> : TileConfig<128, 128, 64, 4, 2, false> {};

// d = 256: 128 x 32, 8 warps (16 rows each), Q in shared memory (128 KB, fits
// an A100). O_i is 128 registers per thread even at 16 rows per warp, so only
// a narrow S block fits. Alternatives: 64 x 32 with 4 warps (Variant_d256_64x32,
// the small class's tile), 64 x 64 (Variant_d256_64x64), and 128 x 64 with 8
// warps (Variant_d256_128x64_w8), which needs 192 KB: H100/H200 only, so it
// can only be a variant whatever it measures.
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
// The alternatives the choices above are weighed against. Each is run with
// `--variant NAME` on its head_dim; README.md's ablation table times them.

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
