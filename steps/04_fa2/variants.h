/// @file steps/04_fa2/variants.h
/// @brief Rung 04 and its ablation variants (host side): what each one
/// changes, and the per-head_dim entry points compiled in fa2_hdim*.cu.
/// The rung runs fa2_forward (kernel.cuh); every other entry runs
/// fa2_ablation (ablations.cuh) with the Schedule and grid it names.
#pragma once

#include <cstddef>
#include <vector>

#include "flashladder/problem.h"
#include "flashladder/registry.h"

namespace fl::fa2 {

/// The rung and its ablations. Each changes one thing, so the bench can
/// attribute the FA1 -> FA2 gain (README, "Variants").
enum class Variant {
  fa2,          ///< the rung: Q-outer, deferred rescaling, grid over Q tiles, prefetch
  fa1_rescale,  ///< FA1's update (O normalized on every tile); everything else FA2
  bh_grid,      ///< one CTA per (batch, head) walking its Q tiles in turn; else FA2
  fa1_order,    ///< bh_grid + FA1's loop order: K/V outer, Q inner, O/m/l through HBM
  fa1_all,      ///< fa1_order + FA1's update: FlashAttention-1 on this kernel
  no_prefetch,  ///< the rung without the K/V register prefetch
};

/// Registry data of one entry.
struct VariantDesc {
  Variant id;
  const char* name;  ///< --variant NAME ("" = the rung)
  const char* summary;
  bool uses_workspace;      ///< K/V-outer: O/m/l scratch in HBM
  bool whole_head_per_cta;  ///< grid = batch x heads (the CTA walks all Q tiles)
  /// The entry that differs from this one by exactly one change ("" = the rung): its baseline.
  const char* compared_with = "";
  const char* why = "the rung this variant changes one thing of";
};

inline constexpr VariantDesc kVariants[] = {
    {Variant::fa2, "",
     "FA2 on CUDA cores: Q-outer, O in registers, deferred rescaling, Q-tile grid, causal skip",
     false, false},
    {Variant::fa1_rescale, "fa1-rescale",
     "ablation: FA1's per-tile normalization of O (tile max, full l, divide every tile)", false,
     false},
    {Variant::bh_grid, "bh-grid",
     "ablation: no sequence parallelism, one CTA per (batch, head) walks its Q tiles", false, true},
    {Variant::fa1_order, "fa1-order",
     "ablation: bh-grid + FA1 loop order (K/V outer, Q inner, O/m/l round trip via HBM)", true,
     true, "bh-grid", "bh-grid differs from it by the loop order alone"},
    {Variant::fa1_all, "fa1-all",
     "ablation: fa1-order + FA1's per-tile normalization = FlashAttention-1 on this kernel", true,
     true, "fa1-order", "fa1-order differs from it by FA1's update alone"},
    {Variant::no_prefetch, "no-prefetch",
     "ablation: K/V tile j+1 not prefetched into registers during tile j", false, false},
};

/// Launches variant @p v for head_dim D (defined in fa2_hdim<D>.cu).
template <int D>
void launch_fa2(const AttnParams& p, cudaStream_t stream, Variant v);

/// The kernel variant @p v launches for head_dim D and @p dtype.
template <int D>
std::vector<KernelInfo> fa2_kernels(DType dtype, Variant v);

/// Dynamic shared memory per CTA for head_dim D.
template <int D>
size_t fa2_smem_bytes();

}  // namespace fl::fa2
