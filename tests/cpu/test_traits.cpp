/// @file tests/cpu/test_traits.cpp
/// @brief Rung 06's tile traits, checked on the CPU: shared-memory budgets per
/// GPU class, the runtime class choice, tile divisibility and register estimates.
/// (traits.h is plain C++; the static_asserts in it already fail the build for
/// an illegal configuration, these tests document the numbers and the choice.)
#include "06_headdim_tiles/traits.h"
#include "catch_compat.h"

namespace {

using fl::tc::HeadDimTiles;
using fl::tc::SmemClass;

/// What every configuration of the kernel must satisfy.
template <class Cfg>
void check_divisibility() {
  CHECK(Cfg::kHeadDim % fl::tc::kMmaK == 0);
  CHECK(Cfg::kBlockM % (Cfg::kNumWarps * fl::tc::kMmaM) == 0);  // whole 16-row tiles per warp
  CHECK(Cfg::kBlockN % 16 == 0);  // two 8-key tiles per ldmatrix.x4, 16-key k-steps for P V
  CHECK(Cfg::kThreads % Cfg::kChunksPerRow == 0);  // a loader pass covers whole rows
  const int rows_per_pass = Cfg::kThreads / Cfg::kChunksPerRow;
  CHECK(Cfg::kBlockM % rows_per_pass == 0);
  CHECK(Cfg::kBlockN % rows_per_pass == 0);
  CHECK(Cfg::kStages >= 2);
  CHECK(Cfg::kAccumRegs <= 224);  // S + O (+ Q) must leave room under 255 registers
}

template <int D, SmemClass C>
void check_class() {
  using Cfg = HeadDimTiles<D, C>;
  INFO("head_dim " << D << (C == SmemClass::large ? " large" : " small"));
  CHECK(Cfg::kHeadDim == D);
  CHECK(Cfg::kSmemBytes <= fl::tc::smem_budget(C));
  CHECK(Cfg::kSmemBytes ==
        Cfg::kBlockM * D * 2 + 2 * Cfg::kStages * Cfg::kBlockN * D * 2);  // Q + K/V ring
  check_divisibility<Cfg>();
}

}  // namespace

TEST_CASE("runtime class choice from smem_per_block_optin", "[cpu][traits]") {
  CHECK(fl::tc::smem_class_for(fl::tc::kSmemOptinSm90) == SmemClass::large);  // H100: 227 KB
  CHECK(fl::tc::smem_class_for(fl::tc::kSmemOptinSm80) == SmemClass::large);  // A100: 163 KB
  CHECK(fl::tc::smem_class_for(fl::tc::kSmemOptinSm86) == SmemClass::small);  // sm_86/89: 99 KB
  CHECK(fl::tc::smem_class_for(48 * 1024) == SmemClass::small);
  CHECK(fl::tc::smem_class_for(0) == SmemClass::small);  // unknown: the safe choice
}

TEST_CASE("every head_dim fits its class's shared-memory budget", "[cpu][traits]") {
  check_class<32, SmemClass::large>();
  check_class<64, SmemClass::large>();
  check_class<128, SmemClass::large>();
  check_class<256, SmemClass::large>();
  check_class<32, SmemClass::small>();
  check_class<64, SmemClass::small>();
  check_class<128, SmemClass::small>();
  check_class<256, SmemClass::small>();
}

TEST_CASE("small tiles leave two blocks per 100 KB SM where registers allow", "[cpu][traits]") {
  constexpr int kSm86PerSm = 100 * 1024;
  CHECK(2 * HeadDimTiles<32, SmemClass::small>::kSmemBytes <= kSm86PerSm);
  CHECK(2 * HeadDimTiles<64, SmemClass::small>::kSmemBytes <= kSm86PerSm);
  CHECK(2 * HeadDimTiles<128, SmemClass::small>::kSmemBytes <= kSm86PerSm);
  CHECK(HeadDimTiles<256, SmemClass::small>::kSmemBytes <= fl::tc::kSmemOptinSm86);
}

TEST_CASE("large tiles: two blocks share an H100 SM up to d = 128", "[cpu][traits]") {
  constexpr int kH100PerSm = 228 * 1024;
  constexpr int kPerBlockReserve = 1024;  // the driver reserves 1 KB per block
  CHECK(2 * (HeadDimTiles<32, SmemClass::large>::kSmemBytes + kPerBlockReserve) <= kH100PerSm);
  CHECK(2 * (HeadDimTiles<64, SmemClass::large>::kSmemBytes + kPerBlockReserve) <= kH100PerSm);
  CHECK(2 * (HeadDimTiles<128, SmemClass::large>::kSmemBytes + kPerBlockReserve) <= kH100PerSm);
  // d = 256: one 8-warp block of 128 KB per SM (fits an A100's 163 KB too).
  CHECK(HeadDimTiles<256, SmemClass::large>::kSmemBytes <= fl::tc::kSmemOptinSm80);
}

TEST_CASE("tile area shrinks as head_dim grows past 64", "[cpu][traits]") {
  // Not the head_dim note's d=32 -> 128x128 (the variant d32-128x128; traits.h gives the
  // reason): at d <= 64 the limit is occupancy, above it the registers O_i needs.
  using D32 = HeadDimTiles<32, SmemClass::large>;
  using D64 = HeadDimTiles<64, SmemClass::large>;
  using D128 = HeadDimTiles<128, SmemClass::large>;
  using D256 = HeadDimTiles<256, SmemClass::large>;
  CHECK(D32::kBlockM * D32::kBlockN == D64::kBlockM * D64::kBlockN);
  CHECK(D64::kBlockM * D64::kBlockN >= D128::kBlockM * D128::kBlockN);
  CHECK(D128::kBlockM * D128::kBlockN >= D256::kBlockM * D256::kBlockN);
  // Rows per warp: 32 (two MMA row tiles) wherever O_i leaves room for it.
  CHECK(D32::kMTiles == 2);
  CHECK(D64::kMTiles == 2);
  CHECK(D128::kMTiles == 2);
  CHECK(D256::kMTiles == 1);
}

TEST_CASE("ablation variants are legal configurations", "[cpu][traits]") {
  check_divisibility<fl::tc::Variant_d32_128x128>();
  check_divisibility<fl::tc::Variant_d32_64x64>();
  check_divisibility<fl::tc::Variant_d32_128x128_w8>();
  check_divisibility<fl::tc::Variant_d64_128x128_qsmem>();
  check_divisibility<fl::tc::Variant_d64_128x96_qsmem>();
  check_divisibility<fl::tc::Variant_d64_128x128_w8>();
  check_divisibility<fl::tc::Variant_d64_64x64>();
  check_divisibility<fl::tc::Variant_d128_128x64_w8>();
  check_divisibility<fl::tc::Variant_d128_128x32_w4>();
  check_divisibility<fl::tc::Variant_d128_128x128_w8>();
  check_divisibility<fl::tc::Variant_d128_128x64_w8_s3>();
  check_divisibility<fl::tc::Variant_d256_64x32>();
  check_divisibility<fl::tc::Variant_d256_64x64>();
  check_divisibility<fl::tc::Variant_d256_128x64_w8>();
  // The one variant too big for an A100: its supports() refuses it there.
  CHECK(fl::tc::Variant_d256_128x64_w8::kSmemBytes > fl::tc::kSmemOptinSm80);
  CHECK(fl::tc::Variant_d256_128x64_w8::kSmemBytes <= fl::tc::kSmemOptinSm90);
}
