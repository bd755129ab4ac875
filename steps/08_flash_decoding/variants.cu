/// @file steps/08_flash_decoding/variants.cu
/// @brief The ablation variants of rung 08 (`--variant NAME`, head_dim 128,
/// contiguous K/V): the ring depths behind DecodeTraits' default of 3 stages.
/// A separate file so that the build compiles them in parallel with launch.cu.
#include "launch_template.cuh"

namespace fl {

using decode::DecodeTraits;
using decode::make_decode_variant;

namespace {

/// The ablations exist at head_dim 128 only: nothing is compiled when the
/// build leaves 128 out (FL_HEAD_DIM), since a discarded `if constexpr` branch
/// of a template is not instantiated.
template <int D>
void add_ring_depth_variants(Registry& reg) {
  if constexpr (D == 128 && head_dim_built(D)) {
    // K/V bytes in flight per CTA = 4 warps x (STAGES - 1) x 8 KiB (README: Little's law); the
    // split heuristic gives each SM one CTA when it splits. The default ring (3 stages) without
    // PDL is registered by launch.cu, which owns that kernel (see make_decode_variant).
    reg.add(make_decode_variant<DecodeTraits<D, 2>>(
        "stages2", "2-stage rings: 32 KiB in flight per CTA, 3 CTAs fit per SM", true));
    reg.add(make_decode_variant<DecodeTraits<D, 6>>(
        "stages6", "6-stage rings: 160 KiB in flight per CTA, 1 CTA fits per SM", true));
    reg.add(make_decode_variant<DecodeTraits<D, 7>>(
        "stages7", "7-stage rings: 192 KiB in flight per CTA, 1 CTA fits per SM", true));
  }
}

}  // namespace

void register_rung_08_variants(Registry& reg) {
  add_ring_depth_variants<128>(reg);
}

}  // namespace fl
