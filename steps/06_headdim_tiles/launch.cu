/// @file steps/06_headdim_tiles/launch.cu
/// @brief Rung 06's launcher: runtime (dtype, head_dim, GPU class) to one
/// compile-time instantiation, `supports`, and registration of the rung and
/// of the ablation variants its choices were measured against.
#include <string>
#include <vector>

#include "flashladder/registry.h"
#include "flashladder/static_switch.h"
#include "kernel.cuh"

namespace fl {
namespace {

using tc::SmemClass;

std::string smem_class_name(SmemClass c) {
  return c == SmemClass::large ? "large (>= 128 KB per block)" : "small (~100 KB per block)";
}

/// The rung: tiles from traits.h for the runtime head_dim; @p forced picks a
/// class regardless of the GPU (the "small-smem" variant runs the tiles meant
/// for ~100 KB GPUs on a large one, to measure and test them).
Rung make_rung(bool force_small) {
  Rung r;
  r.number = 6;
  r.name = "headdim_tiles";
  r.peak = Peak::tensor_16bit;
  r.writes_o_fp32 = true;  // the epilogue's store_o2 (epilogue.cuh)
  r.head_dims = {32, 64, 128, 256};
  r.min_cc = 80;
  auto cls = [force_small](int optin) {
    return force_small ? SmemClass::small : tc::smem_class_for(optin);
  };
  auto cls_now = [force_small] {
    return force_small ? SmemClass::small : tc::current_smem_class();
  };
  if (force_small) {
    r.variant = "small-smem";
    r.summary = "rung 06 with the tiles for ~100 KB-per-block GPUs (sm_86/89), on any GPU";
    r.in_tour = false;
  } else {
    r.summary = "tiles, warps and stages per head_dim from a traits struct (FA2 kernel_traits)";
    r.baselines = {Baseline::on(5, "the rung it improves on: the same kernel with one tile size")};
  }
  r.supports = [cls](const Problem& p, const DeviceInfo& d) -> std::string {
    if (p.head_dim != 32 && p.head_dim != 64 && p.head_dim != 128 && p.head_dim != 256)
      return "head_dim must be 32, 64, 128 or 256";
    const int smem = FL_HEADDIM_SWITCH(p.head_dim, D, [&] {
      return tc::with_tiles<D>(cls(d.smem_per_block_optin),
                               [](auto cfg) { return decltype(cfg)::kSmemBytes; });
    });
    return tile_limits(p, d, smem);
  };
  r.launch = [cls_now](const AttnParams& p, cudaStream_t s) {
    const SmemClass c = cls_now();
    FL_DTYPE_SWITCH(static_cast<DType>(p.dtype), T, [&] {
      FL_HEADDIM_SWITCH(p.head_dim, D, [&] {
        tc::with_tiles<D>(c, [&](auto cfg) { tc::launch_flash_tc<T, decltype(cfg)>(p, s); });
      });
    });
  };
  r.kernels = [cls_now](const Problem& p) {
    const SmemClass c = cls_now();
    return FL_DTYPE_SWITCH(p.dtype, T, [&] {
      return FL_HEADDIM_SWITCH(p.head_dim, D, [&] {
        return tc::with_tiles<D>(c, [](auto cfg) { return tc::kernel_info<T, decltype(cfg)>(); });
      });
    });
  };
  r.notes = [cls_now](const Problem& p) {
    return std::vector<std::string>{"tile class: " + smem_class_name(cls_now()) +
                                    ", tiles chosen for head_dim " + std::to_string(p.head_dim) +
                                    " (steps/06_headdim_tiles/traits.h)"};
  };
  return r;
}

}  // namespace

void register_rung_06_variants(Registry& reg);

void register_rung_06(Registry& reg) {
  reg.add(make_rung(false));
  reg.add(make_rung(true));
  register_rung_06_variants(reg);  // variants.cu: the ablations behind traits.h
}

}  // namespace fl
