/// @file wgmma_desc.h
/// @brief The wgmma shared-memory matrix descriptor and the 128-byte swizzle, as constexpr
/// host+device functions: the same code builds descriptors in the Hopper kernels (hopper.cuh)
/// and is checked bit by bit in a CPU test (tests/cpu/test_wgmma_desc.cpp). Plain C++, no CUDA.
///
/// `wgmma.mma_async` does not take shared-memory addresses: each operand read from shared
/// memory is a 64-bit *matrix descriptor* that tells the tensor cores where the tile starts and
/// how its 8 x 16-byte "core matrices" are laid out (PTX ISA, "Matrix Descriptor Format"):
/// @code
///   // clang-format off
///   bits  0-13  start address >> 4          (the tile's shared-state-space byte address)
///   bits 16-29  leading  byte offset >> 4   (LBO)
///   bits 32-45  stride   byte offset >> 4   (SBO)
///   bits 49-51  base offset                 (0 when the tile starts on the swizzle's 1024 B
///                                            pattern boundary; else (start >> 7) & 7)
///   bits 62-63  swizzle mode                (0 none, 1 128-byte, 2 64-byte, 3 32-byte)
///   // clang-format on
/// @endcode
/// Each of the three byte fields keeps bits 4..17 of its value ((x & 0x3FFFF) >> 4): addresses
/// and offsets are multiples of 16 bytes and shared memory is under 256 KB.
///
/// The tiles of the Hopper rungs are what TMA writes with CU_TENSOR_MAP_SWIZZLE_128B (tma.h):
/// rows of 64 16-bit elements (128 bytes), each 16-byte chunk c of row r stored at chunk
/// c ^ (r % 8). Eight rows (1024 bytes) are one *swizzle atom*; a tile is atoms stacked row-wise.
/// A head_dim wider than 64 is several such tiles side by side ("column blocks"), each
/// rows x 128 B, one TMA box each.
///
/// K-major operand (the K index contiguous: Q and K in S = Q K^T, rows = M or N, row = 128 B):
/// @code
///   // clang-format off
///   byte 0      128     256          1024 = SBO                      rows*128
///        | row 0 | row 1 | ... row 7 | row 8 ... row 15 | ...       | next column block
///        \______ one 1024 B swizzle atom: 8 rows x 8 chunks _______/   (k = 64..127)
///   One wgmma reads k16 = 32 B of each row: the k-step kk starts at byte 32*kk of row 0
///   (the hardware applies the XOR itself, from the address bits), and the next 8 rows
///   of M/N are SBO = 1024 B further. LBO is unused for swizzled K-major ("assumed 1").
///   // clang-format on
/// @endcode
/// MN-major operand (the M/N index contiguous: V in O += P V, stored [key][dim], so B = V is
/// K x N with N = dim contiguous; wgmma's imm-trans-b = 1):
/// @code
///   // clang-format off
///   row = one key (k), 128 B = 64 dims (n). k16 = 16 rows = 2 atoms:
///   SBO = 1024 B  (next 8 keys)
///   LBO = rows * 128 B  (next 64 dims: the next column block), used when N > 64
///   // clang-format on
/// @endcode
#pragma once

#include <cstdint>

#include "flashladder/types.h"  // FL_HD

namespace fl::wgmma {

/// Swizzle modes as the descriptor's bits 62-63 encode them (note: not the CUtensorMapSwizzle
/// enum's numbering).
enum class Swizzle : uint32_t { none = 0, b128 = 1, b64 = 2, b32 = 3 };

/// Bytes of one 128B-swizzled row (64 16-bit elements) and of one swizzle atom (8 rows).
constexpr uint32_t kSw128RowBytes = 128;
constexpr uint32_t kSw128AtomBytes = 1024;
/// Elements of a 16-bit type per 128-byte row: the widest TMA box under 128B swizzle.
constexpr int kSw128Cols16 = 64;

/// (x & 0x3FFFF) >> 4: the 14-bit field the PTX ISA calls matrix-descriptor-encode(x).
FL_HD constexpr uint64_t desc_encode(uint32_t x) {
  return (x & 0x3FFFFu) >> 4;
}

/// The 64-bit descriptor from its five fields (byte values, not yet shifted).
FL_HD constexpr uint64_t make_desc(uint32_t start_addr, uint32_t lbo_bytes, uint32_t sbo_bytes,
                                   uint32_t base_offset, Swizzle swizzle) {
  return desc_encode(start_addr) | (desc_encode(lbo_bytes) << 16) | (desc_encode(sbo_bytes) << 32) |
         (static_cast<uint64_t>(base_offset & 7u) << 49) | (static_cast<uint64_t>(swizzle) << 62);
}

/// The base-offset field for a tile starting at @p start_addr under 128B swizzle: 0 when it
/// starts on a 1024-byte boundary (every tile of the rungs does: they are 1024-aligned and
/// advance by whole atoms or by 32-byte k-steps inside a row, which leave bits 7-9 alone).
FL_HD constexpr uint32_t sw128_base_offset(uint32_t start_addr) {
  return (start_addr >> 7) & 7u;
}

/// K-major operand under 128B swizzle: rows of 128 B, 8-row groups SBO = 1024 B apart.
/// @p start_addr is where the (row, k) = (row0, 16*kk) corner of this wgmma's operand lies:
/// use sw128_kmajor_offset().
FL_HD constexpr uint64_t desc_kmajor_sw128(uint32_t start_addr) {
  return make_desc(start_addr, /*lbo (unused, "assumed 1")=*/16, kSw128AtomBytes,
                   sw128_base_offset(start_addr), Swizzle::b128);
}

/// MN-major operand under 128B swizzle: rows are the K index (128 B = 64 M/N elements),
/// 8-row groups SBO = 1024 B apart, the next 64 M/N elements LBO = @p rows_total * 128 B
/// further (the next TMA column block).
FL_HD constexpr uint64_t desc_mnmajor_sw128(uint32_t start_addr, uint32_t rows_total) {
  return make_desc(start_addr, rows_total * kSw128RowBytes, kSw128AtomBytes,
                   sw128_base_offset(start_addr), Swizzle::b128);
}

/// Byte offset, from the tile base, of the K-major operand of one wgmma: rows [row0, row0+M or N)
/// (row0 a multiple of 8), k-step @p kk (k = 16 kk .. 16 kk + 15) of a 16-bit tile that is
/// @p rows_total rows high and split into 64-element column blocks.
FL_HD constexpr uint32_t sw128_kmajor_offset(uint32_t rows_total, uint32_t row0, uint32_t kk) {
  return (kk / 4) * rows_total * kSw128RowBytes  // column block: 4 k-steps of 16 per 64 columns
         + row0 * kSw128RowBytes                 // whole atoms when row0 % 8 == 0
         + (kk % 4) * 32;                        // 16 elements = 32 B inside the row
}

/// Byte offset of the MN-major operand of one wgmma: K rows [16 kk, 16 kk + 16) (keys of V),
/// N columns from @p n0 (a multiple of 64: a column block).
FL_HD constexpr uint32_t sw128_mnmajor_offset(uint32_t rows_total, uint32_t n0, uint32_t kk) {
  return (n0 / kSw128Cols16) * rows_total * kSw128RowBytes + kk * 16 * kSw128RowBytes;
}

/// Descriptor mode of a swizzle @p bytes wide (128, 64 or 32; anything else: none).
FL_HD constexpr Swizzle swizzle_of_bytes(uint32_t bytes) {
  return bytes == 128 ? Swizzle::b128 : bytes == 64 ? Swizzle::b64 : bytes == 32 ? Swizzle::b32 : Swizzle::none;
}

/// K-major operand under a @p sw -byte swizzle (128 or 64): rows of sw bytes, 8-row groups
/// SBO = 8 sw apart (one swizzle atom). The 8-bit rung (13) needs the 64-byte form for
/// head_dim 64, whose rows are 64 e4m3. Tiles start on their atom and k-steps stay inside a
/// row, so the base offset is 0 (for 128 B this is desc_kmajor_sw128).
FL_HD constexpr uint64_t desc_kmajor_sw(uint32_t start_addr, uint32_t sw) {
  return make_desc(start_addr, /*lbo (unused)=*/16, 8 * sw, 0, swizzle_of_bytes(sw));
}

/// Byte offset of the K-major operand of one wgmma in a tile @p rows_total rows high whose K
/// extent is cut into column blocks @p sw bytes wide (one TMA box each): rows from @p row0 (a
/// multiple of 8), K from byte @p k_byte (a multiple of the instruction's 32 bytes). In bytes,
/// an 8-bit k32 step is a 16-bit k16 step: with sw = 128 and k_byte = 32 kk this is
/// sw128_kmajor_offset(rows_total, row0, kk).
FL_HD constexpr uint32_t kmajor_offset(uint32_t sw, uint32_t rows_total, uint32_t row0, uint32_t k_byte) {
  return (k_byte / sw) * rows_total * sw + row0 * sw + k_byte % sw;
}

/// Where byte @p offset of a 1024-byte-aligned 128B-swizzled region really lives: the 16-byte
/// chunk index (bits 4-6) XOR the row index within the atom (bits 7-9). This is what TMA does
/// on the way in and what wgmma undoes on the way out; a thread that reads or writes such a
/// tile itself (e.g. an epilogue through shared memory) must apply it too. Same pattern as
/// fl::ptx::swizzle<128> (rung 05's ldmatrix tiles).
FL_HD constexpr uint32_t sw128(uint32_t offset) {
  return offset ^ (((offset >> 7) & 7u) << 4);
}

}  // namespace fl::wgmma
