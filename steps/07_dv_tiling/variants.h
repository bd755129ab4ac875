/// @file steps/07_dv_tiling/variants.h
/// @brief Rung 07's variant names and the main entry's tiles, in plain C++ (no CUDA), so the
/// launcher and the CPU spill test (tests/cpu/test_spill.cpp) agree on them.
#pragma once

#include <string>

namespace fl::dv_tiling {

/// DV_TILE value that means "one tile of head_dim columns": the untiled kernel.
constexpr int kUntiled = 0;

/// The main entry's DV_TILE: the largest tile that does not spill, which is the
/// course note's rule (docs/sources.md). With ptxas for sm_90 (255 registers per
/// thread at most):
///   d = 64:  one 64-column tile (q 64 + O 64 floats) fits, no tiling needed;
///   d = 128: 128 spills, 64 still spills (q 128 + O 64 floats plus 8 scores,
///            addresses and loads in flight exceed 255), 32 does not.
/// The local memory per thread of each variant is the "local B / thread" column of
/// the generated sweep tables in README.md; tests/cpu/test_spill.cpp checks the
/// d = 128 claim (untiled spills, the main entry does not) on every build.
constexpr int main_dv_tile(int head_dim) {
  return head_dim <= 64 ? head_dim : 32;
}
/// The main entry's query rows per block (= threads per block).
constexpr int kMainBlockM = 64;
/// The main entry's K rows per shared-memory tile.
constexpr int kMainBlockN = 64;

/// Threads that share one query row in the "split-d" variant (the note's rejected
/// alternative: split head_dim across threads, reduce the dot product by warp shuffles).
constexpr int kSplitThreadsPerRow = 4;

/// Variant name of a DV-tiled kernel, e.g. "untiled-m64-n64" or "dv32-m64-n64".
inline std::string dv_variant_name(int dv_tile, int block_m, int block_n) {
  const std::string dv = dv_tile == kUntiled ? "untiled" : "dv" + std::to_string(dv_tile);
  return dv + "-m" + std::to_string(block_m) + "-n" + std::to_string(block_n);
}

}  // namespace fl::dv_tiling
