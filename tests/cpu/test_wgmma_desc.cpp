/// @file tests/cpu/test_wgmma_desc.cpp
/// @brief The wgmma shared-memory descriptor (common/include/flashladder/wgmma_desc.h) against
/// values worked out by hand from the PTX ISA's "Matrix Descriptor Format" table, the 128-byte
/// swizzle against its definition, and the descriptors of the tile shapes of rungs 09-10 and of
/// FlashAttention-3's tile table.
#include <cstdint>
#include <set>

#include "catch_compat.h"
#include "flashladder/wgmma_desc.h"

namespace {

namespace wg = fl::wgmma;

/// The descriptor's fields back as byte values (the inverse of make_desc, written from the
/// table independently of it).
struct Fields {
  uint32_t start, lbo, sbo, base_offset, swizzle;
};
Fields decode(uint64_t d) {
  return {static_cast<uint32_t>(d & 0x3FFF) << 4, static_cast<uint32_t>((d >> 16) & 0x3FFF) << 4,
          static_cast<uint32_t>((d >> 32) & 0x3FFF) << 4, static_cast<uint32_t>((d >> 49) & 7),
          static_cast<uint32_t>(d >> 62)};
}

// Worked by hand: a K-major 64 x 64 fp16 tile (128 B rows) at shared address 0x400, 128B swizzle:
//   start 0x400 >> 4 = 0x40 (bits 0-13), LBO 16 >> 4 = 1 (bits 16-29, unused but 1),
//   SBO 1024 >> 4 = 0x40 (bits 32-45), base offset 0, swizzle 1 << 62.
static_assert(wg::desc_kmajor_sw128(0x400) == 0x4000004000010040ull, "K-major 64x64 at 0x400");

}  // namespace

TEST_CASE("descriptor fields sit where the PTX ISA table puts them", "[cpu][hopper_desc]") {
  CHECK(wg::make_desc(0, 0, 0, 0, wg::Swizzle::none) == 0);
  // Each field alone: 14 bits of (x >> 4), then its shift.
  CHECK(wg::make_desc(0x3FFF0, 0, 0, 0, wg::Swizzle::none) == 0x3FFFull);
  CHECK(wg::make_desc(0, 0x3FFF0, 0, 0, wg::Swizzle::none) == 0x3FFFull << 16);
  CHECK(wg::make_desc(0, 0, 0x3FFF0, 0, wg::Swizzle::none) == 0x3FFFull << 32);
  CHECK(wg::make_desc(0, 0, 0, 7, wg::Swizzle::none) == 7ull << 49);
  CHECK(wg::make_desc(0, 0, 0, 0, wg::Swizzle::b128) == 1ull << 62);
  CHECK(wg::make_desc(0, 0, 0, 0, wg::Swizzle::b64) == 2ull << 62);
  CHECK(wg::make_desc(0, 0, 0, 0, wg::Swizzle::b32) == 3ull << 62);
  // matrix-descriptor-encode(x) = (x & 0x3FFFF) >> 4: bits above 17 and below 4 are dropped.
  CHECK(wg::desc_encode(0x40010) == 1);
  CHECK(wg::desc_encode(0x1F) == 1);
}

TEST_CASE("descriptors of a K-major 64x64 tile worked by hand", "[cpu][hopper_desc]") {
  // The tile at 0x400: see the static_assert above.
  CHECK(wg::desc_kmajor_sw128(0x400) == 0x4000004000010040ull);
  // Its k-step 3 (k = 48..63): 3 x 32 B into each row, 0x460; bits 7-9 unchanged, base offset 0.
  CHECK(wg::sw128_kmajor_offset(64, 0, 3) == 96);
  CHECK(wg::desc_kmajor_sw128(0x400 + 96) == 0x4000004000010046ull);
  // Rows 8..: one atom (1024 B) further, still on the pattern boundary.
  CHECK(wg::sw128_kmajor_offset(64, 8, 0) == 1024);
  // A start that is not on a 1024 B boundary needs the base offset (start >> 7) & 7:
  // 0x2480 >> 7 = 0x49, & 7 = 1.
  CHECK(wg::sw128_base_offset(0x2480) == 1);
  CHECK(wg::desc_kmajor_sw128(0x2480) == (0x4000004000010248ull | (1ull << 49)));
}

TEST_CASE("descriptors of an MN-major V tile worked by hand", "[cpu][hopper_desc]") {
  // V [64 keys][64 dims] at 0x4000: start 0x400, LBO = 64 rows x 128 B = 8192 -> 0x200,
  // SBO 1024 -> 0x40, 128B swizzle.
  CHECK(wg::desc_mnmajor_sw128(0x4000, 64) == 0x4000004002000400ull);
  // k-step kk of O = P V: keys 16 kk .. 16 kk + 15 are rows, 16 x 128 B = 2048 B per step.
  CHECK(wg::sw128_mnmajor_offset(64, 0, 1) == 2048);
  // head_dim 128 with BLOCK_N = 176: the second 64-dim column block starts 176 x 128 B later,
  // which is LBO: 22528 -> 0x580.
  CHECK(wg::sw128_mnmajor_offset(176, 64, 0) == 22528);
  CHECK(wg::sw128_mnmajor_offset(176, 64, 2) == 22528 + 4096);
  CHECK(decode(wg::desc_mnmajor_sw128(0, 176)).lbo == 22528);
  CHECK(((wg::desc_mnmajor_sw128(0, 176) >> 16) & 0x3FFF) == 0x580);
}

TEST_CASE("128B swizzle: chunk XOR row within each 1024 B atom", "[cpu][hopper_desc]") {
  // By hand: row 1 chunk 0 -> chunk 1; row 7 chunk 7 -> chunk 0; row 8 is row 0 of the next atom.
  CHECK(wg::sw128(0x080) == 0x090);
  CHECK(wg::sw128(0x3F0) == 0x380);
  CHECK(wg::sw128(0x400) == 0x400);
  CHECK(wg::sw128(0x485) == 0x495);  // bytes inside a chunk keep their place
  for (uint32_t row = 0; row < 32; ++row) {
    std::set<uint32_t> chunks;
    for (uint32_t chunk = 0; chunk < 8; ++chunk) {
      const uint32_t at = wg::sw128(row * 128 + chunk * 16);
      CHECK(at == row * 128 + ((chunk ^ (row % 8)) * 16));  // = fl::ptx::swizzle<128>
      CHECK(wg::sw128(at) == row * 128 + chunk * 16);       // an involution
      chunks.insert(at);
    }
    CHECK(chunks.size() == 8);  // a permutation of the row's chunks
  }
  // The point of it: one logical chunk of 8 consecutive rows lands in 8 different bank groups.
  for (uint32_t chunk = 0; chunk < 8; ++chunk) {
    std::set<uint32_t> banks;
    for (uint32_t row = 0; row < 8; ++row)
      banks.insert((wg::sw128(row * 128 + chunk * 16) % 128) / 16);
    CHECK(banks.size() == 8);
  }
}

TEST_CASE("the tiles of rungs 09-10 and FA3: aligned, fields in range", "[cpu][hopper_desc]") {
  // FA3's tile table, then the other tiles of rungs 09 and 10 and their variants (their
  // traits.h); BLOCK_M = 64 per consumer warpgroup.
  struct Shape {
    uint32_t head_dim, block_m, block_n;
  };
  const Shape shapes[] = {{64, 192, 192}, {128, 128, 176}, {128, 128, 128},
                          {256, 128, 80}, {64, 128, 64},   {64, 128, 128},
                          {128, 128, 64}, {128, 64, 128},  {256, 128, 64}};
  for (const Shape& s : shapes) {
    INFO("head_dim " << s.head_dim << " BLOCK_M " << s.block_m << " BLOCK_N " << s.block_n);
    // Tiles of Q, K, V placed one after the other from a 1024-aligned base stay 1024-aligned:
    // each is (head_dim / 64) column blocks of rows x 128 B, and rows is a multiple of 8.
    const uint32_t q_bytes = s.block_m * s.head_dim * 2, kv_bytes = s.block_n * s.head_dim * 2;
    CHECK(q_bytes % wg::kSw128AtomBytes == 0);
    CHECK(kv_bytes % wg::kSw128AtomBytes == 0);
    const uint32_t q_base = 0, k_base = q_bytes, v_base = q_bytes + kv_bytes;
    for (uint32_t kk = 0; kk < s.head_dim / 16; ++kk) {
      for (uint32_t row0 = 0; row0 < s.block_m; row0 += 64) {  // each consumer's 64 rows
        const Fields q =
            decode(wg::desc_kmajor_sw128(q_base + wg::sw128_kmajor_offset(s.block_m, row0, kk)));
        CHECK(q.base_offset == 0);
        CHECK(q.sbo == 1024);
        CHECK(q.swizzle == 1);
      }
      const Fields k =
          decode(wg::desc_kmajor_sw128(k_base + wg::sw128_kmajor_offset(s.block_n, 0, kk)));
      CHECK(k.base_offset == 0);
      CHECK(k.lbo == 16);
      CHECK(k.sbo == 1024);
      CHECK(k.start == k_base + (kk / 4) * s.block_n * 128 + (kk % 4) * 32);
    }
    for (uint32_t kk = 0; kk < s.block_n / 16; ++kk) {
      const Fields v = decode(
          wg::desc_mnmajor_sw128(v_base + wg::sw128_mnmajor_offset(s.block_n, 0, kk), s.block_n));
      CHECK(v.base_offset == 0);
      CHECK(v.lbo == s.block_n * 128);  // the next 64 dims (N > 64 for head_dim 128, 256)
      CHECK(v.sbo == 1024);
      CHECK(v.start == v_base + kk * 2048);
    }
    CHECK(v_base + kv_bytes <= 227u * 1024);  // shared memory per block on H100/H200
  }
}
