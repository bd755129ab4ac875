/// @file steps/06_headdim_tiles/kernel.cuh
/// @brief Rung 06: rung 05's kernel, unchanged, instantiated with tiles chosen
/// per head_dim (traits.h) instead of one size for all.
///
/// The kernel body is a template over its TileConfig, so specializing is only
/// a matter of choosing the constants. What the choice trades, per head_dim d:
///
/// @code
///   // clang-format off
///   registers / thread  ~  M_TILES * (BLOCK_N/8 + d/8) * 4    (S and O_i, fp32)
///                          + M_TILES * d/16 * 4               (Q_i, if kept in registers)
///   shared memory       =  BLOCK_M * 2d  +  2 * STAGES * BLOCK_N * 2d   bytes
///   smem bytes / MMA    ~  1 / M_TILES     (a K/V fragment feeds M_TILES MMAs)
///   // clang-format on
/// @endcode
///
/// Small d leaves room for big tiles (the head_dim note's point, docs/sources.md:
/// d = 32 allows 128 x 128); large d fills the registers with O_i, so BLOCK_N (S)
/// and BLOCK_M (rows per warp) must shrink. The choice is made at compile time
/// for each head_dim and at run time between two shared-memory classes of GPU.
#pragma once

#include <cuda_runtime_api.h>

#include <string>
#include <vector>

#include "../05_tensor_cores/kernel.cuh"
#include "flashladder/cuda_check.h"
#include "flashladder/registry.h"
#include "flashladder/static_switch.h"
#include "traits.h"

namespace fl::tc {

/// The shared-memory class of the current device, from the same attribute as
/// DeviceInfo::smem_per_block_optin (the launch only receives AttnParams).
inline SmemClass current_smem_class() {
  int device = 0, optin = 0;
  FL_CUDA_CHECK(cudaGetDevice(&device));
  FL_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  return smem_class_for(optin);
}

/// Calls `f.template operator()<Cfg>()` with the tiles for head_dim D on a GPU
/// of class @p c: the runtime class becomes a compile-time type.
template <int D, class F>
decltype(auto) with_tiles(SmemClass c, F&& f) {
  if (c == SmemClass::large) return f(HeadDimTiles<D, SmemClass::large>{});
  return f(HeadDimTiles<D, SmemClass::small>{});
}

// ---- host side: limits and resource entries shared by the rung and its variants

/// The KernelInfo entry of one instantiation.
template <class T, class Cfg>
std::vector<KernelInfo> kernel_info() {
  return {{tc::tile_label<Cfg>(), tc::prepared_kernel<T, Cfg>(), Cfg::kThreads,
           static_cast<size_t>(Cfg::kSmemBytes)}};
}

}  // namespace fl::tc
