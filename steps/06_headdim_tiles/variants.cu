/// @file steps/06_headdim_tiles/variants.cu
/// @brief The ablation variants of rung 06: the alternative tiles each choice
/// in traits.h was measured against, one head_dim each (`--variant NAME`).
/// A separate file so that the build compiles them in parallel with launch.cu.
#include <string>
#include <vector>

#include "flashladder/registry.h"
#include "flashladder/static_switch.h"
#include "kernel.cuh"

namespace fl {
namespace {

/// An ablation point: fixed tiles Cfg, for head_dim Cfg::kHeadDim only.
template <class Cfg>
Rung make_variant(const char* name) {
  Rung r;
  r.number = 6;
  r.name = "headdim_tiles";
  r.variant = name;
  r.summary = "ablation: " + tc::tile_label<Cfg>();
  r.peak = Peak::tensor_16bit;
  r.writes_o_fp32 = true;  // the epilogue's store_o2 (epilogue.cuh)
  r.head_dims = {Cfg::kHeadDim};
  r.min_cc = 80;
  r.in_tour = false;
  r.supports = [](const Problem& p, const DeviceInfo& d) -> std::string {
    if (p.head_dim != Cfg::kHeadDim)
      return "this variant is built for head_dim " + std::to_string(Cfg::kHeadDim) + " only";
    return tile_limits(p, d, Cfg::kSmemBytes);
  };
  r.launch = [](const AttnParams& p, cudaStream_t s) {
    FL_DTYPE_SWITCH(static_cast<DType>(p.dtype), T, [&] { tc::launch_flash_tc<T, Cfg>(p, s); });
  };
  r.kernels = [](const Problem& p) {
    return FL_DTYPE_SWITCH(p.dtype, T, [&] { return tc::kernel_info<T, Cfg>(); });
  };
  return r;
}

}  // namespace

void register_rung_06_variants(Registry& reg) {
  // The alternatives behind each choice in traits.h (README.md: measured table).
  reg.add(make_variant<tc::Variant_d32_128x128>("d32-128x128"));
  reg.add(make_variant<tc::Variant_d32_64x64>("d32-64x64"));
  reg.add(make_variant<tc::Variant_d32_128x128_w8>("d32-128x128-w8"));
  reg.add(make_variant<tc::Variant_d64_128x128_qsmem>("d64-128x128-qsmem"));
  reg.add(make_variant<tc::Variant_d64_128x96_qsmem>("d64-128x96-qsmem"));
  reg.add(make_variant<tc::Variant_d64_128x128_w8>("d64-128x128-w8"));
  reg.add(make_variant<tc::Variant_d64_64x64>("d64-64x64"));
  reg.add(make_variant<tc::Variant_d128_128x64_w8>("d128-128x64-w8"));
  reg.add(make_variant<tc::Variant_d128_128x32_w4>("d128-128x32-w4"));
  reg.add(make_variant<tc::Variant_d128_128x128_w8>("d128-128x128-w8"));
  reg.add(make_variant<tc::Variant_d128_128x64_w8_s3>("d128-128x64-w8-s3"));
  reg.add(make_variant<tc::Variant_d256_64x32>("d256-64x32"));
  reg.add(make_variant<tc::Variant_d256_64x64>("d256-64x64"));
  reg.add(make_variant<tc::Variant_d256_128x64_w8>("d256-128x64-w8"));
}

}  // namespace fl
