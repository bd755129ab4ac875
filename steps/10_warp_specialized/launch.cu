/// @file steps/10_warp_specialized/launch.cu
/// @brief Rung 10's launcher and registration: the rung (all three FlashAttention-3 ideas) and
/// one variant per idea turned off. `no-ws` is rung 09's kernel on the same tiles: warp
/// specialization off means no producer warpgroup, hence no ping-pong and no overlap either.
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "flashladder/registry.h"
#include "flashladder/static_switch.h"
#include "flashladder/tma.h"
#include "traits.h"
#if FL_HOPPER_SM90A
#include "../09_wgmma_tma/kernel.cuh"
#include "kernel.cuh"
#endif

namespace fl {
namespace {

enum class Mode { all, no_pingpong, no_overlap, no_ws };

/// The rung's tiles per head_dim without a causal mask, and with one: only d = 128 has a tile of
/// its own for the mask (traits.h), so d = 64 and 256 name the same tiles either way.
template <int D>
using Tiles = hopper10::HopperWsTiles<D>;
template <int D>
using CausalTiles = hopper10::HopperWsTiles<D, D == 128>;

/// Calls f(TypeTag<the rung's tiles for @p head_dim, @p causal or not>{}) (with_head_dim_tiles).
template <class F>
decltype(auto) with_tiles(int head_dim, bool causal, F&& f) {
  if (causal) return with_head_dim_tiles<CausalTiles>(head_dim, std::forward<F>(f));
  return with_head_dim_tiles<Tiles>(head_dim, std::forward<F>(f));
}

std::string check_limits(const Problem& p, const DeviceInfo& d) {
  const std::string hopper = hopper_supports(d, FL_HOPPER_SM90A != 0);
  if (!hopper.empty()) return hopper;
  if (p.head_dim != 64 && p.head_dim != 128 && p.head_dim != 256)
    return "head_dim must be 64, 128 or 256 (TMA boxes of 64 columns)";
  const int smem = with_tiles(p.head_dim, p.causal, [](auto tiles) { return decltype(tiles)::type::kSmemBytes; });
  return tile_limits(p, d, smem);
}

#if FL_HOPPER_SM90A
template <Mode M, class T, class Cfg>
void launch_mode(const AttnParams& p, cudaStream_t s) {
  using Cfg09 = typename Cfg::Base;  // the same tiles without the producer
  if constexpr (M == Mode::no_ws) hopper09::launch_wgmma_tma<T, Cfg09>(p, s);
  else
    hopper10::launch_ws<T, Cfg, M != Mode::no_pingpong, M != Mode::no_overlap>(p, s);
}

template <Mode M, class T, class Cfg>
std::vector<KernelInfo> kernels_mode() {
  using Cfg09 = typename Cfg::Base;
  if constexpr (M == Mode::no_ws)
    return {{hopper09::tile_label<Cfg09>(), hopper09::prepared_kernel<T, Cfg09>(), Cfg09::kThreads,
             static_cast<size_t>(Cfg09::kSmemBytes)}};
  else
    return {{hopper10::tile_label<Cfg, M != Mode::no_pingpong, M != Mode::no_overlap>(),
             hopper10::prepared_kernel<T, Cfg, M != Mode::no_pingpong, M != Mode::no_overlap>(),
             Cfg::kThreads, static_cast<size_t>(Cfg::kSmemBytes)}};
}

/// The runtime (dtype, head_dim, mask) to one instantiation.
template <Mode M>
void launch_any(const AttnParams& p, cudaStream_t s) {
  FL_DTYPE_SWITCH(static_cast<DType>(p.dtype), T, [&] {
    with_tiles(p.head_dim, p.causal != 0,
               [&](auto tiles) { launch_mode<M, T, typename decltype(tiles)::type>(p, s); });
  });
}

template <Mode M>
std::vector<KernelInfo> kernels_any(const Problem& p) {
  return FL_DTYPE_SWITCH(p.dtype, T, [&] {
    return with_tiles(p.head_dim, p.causal,
                      [](auto tiles) { return kernels_mode<M, T, typename decltype(tiles)::type>(); });
  });
}
#endif

/// The rung (TILES = void: tiles per head_dim and mask, HopperWsTiles) or one of its variants:
/// an idea turned off (M), or the whole schedule on fixed tiles at their one head_dim (TILES).
template <Mode M, class TILES = void>
Rung make(const char* variant, const char* summary) {
  constexpr bool kFixedTiles = !std::is_void_v<TILES>;
  Rung r;
  r.number = 10;
  r.name = "warp_specialized";
  r.variant = variant;
  r.summary = summary;
  r.peak = Peak::tensor_16bit;
  r.writes_o_fp32 = true;  // the epilogue's store_o2 (epilogue.cuh)
  r.min_cc = 90;
  r.head_dims = {64, 128, 256};
  if constexpr (kFixedTiles) r.head_dims = {TILES::kHeadDim};
  r.in_tour = M == Mode::all && !kFixedTiles;
  if (M == Mode::all)
    r.baselines = {Baseline::on(9, "the rung it improves on: the same tiles and engines, no warp specialization")};
  r.supports = [](const Problem& p, const DeviceInfo& d) -> std::string {
    if (M == Mode::no_ws) {  // runs rung 09's kernel: not where a lab starter stubbed it
      const Rung* r09 = registry().find(9);
      if (!r09) return "runs rung 09's kernel: needs rung 09 in the build";
      if (!r09->not_implemented.empty()) return "runs rung 09's kernel, which is not implemented here";
    }
    if constexpr (kFixedTiles) {
      const std::string hopper = hopper_supports(d, FL_HOPPER_SM90A != 0);
      if (!hopper.empty()) return hopper;
      if (p.head_dim != TILES::kHeadDim) return "head_dim must be " + std::to_string(TILES::kHeadDim);
      return tile_limits(p, d, TILES::kSmemBytes);
    } else {
      return check_limits(p, d);
    }
  };
  r.launch = [](const AttnParams& p, cudaStream_t s) {
#if FL_HOPPER_SM90A
    if constexpr (kFixedTiles)
      FL_DTYPE_SWITCH(static_cast<DType>(p.dtype), T, [&] { launch_mode<M, T, TILES>(p, s); });
    else
      launch_any<M>(p, s);
#else
    (void)p;
    (void)s;
    throw std::runtime_error("rung 10 was built without sm_90a");
#endif
  };
  r.kernels = [](const Problem& p) -> std::vector<KernelInfo> {
#if FL_HOPPER_SM90A
    if constexpr (kFixedTiles)
      return FL_DTYPE_SWITCH(p.dtype, T, [&] { return kernels_mode<M, T, TILES>(); });
    else
      return kernels_any<M>(p);
#else
    (void)p;
    return {};
#endif
  };
  return r;
}

}  // namespace

void register_rung_10(Registry& reg) {
  reg.add(make<Mode::all>("", "FA3's schedule: producer warpgroup + setmaxnreg, ping-pong consumers, softmax under the next GEMM"));
  reg.add(make<Mode::no_pingpong>("no-pingpong", "ablation: consumers issue their GEMMs without taking turns"));
  reg.add(make<Mode::no_overlap>("no-overlap", "ablation: no softmax under the next S = Q K^T inside a warpgroup"));
  reg.add(make<Mode::no_ws>("no-ws", "ablation: no producer warpgroup (rung 09's kernel on these tiles)"));
  reg.add(make<Mode::all, hopper10::Variant_d64_128x64>("d64-128x64", "tiles: d = 64 with 64 keys per block (rung 09's fastest d = 64 tile)"));
  reg.add(make<Mode::all, hopper10::Variant_d128_128x128>("d128-128x128", "tiles: d = 128 with 128 keys per block, causal or not"));
  reg.add(make<Mode::all, hopper10::Variant_d256_128x64>("d256-128x64", "tiles: d = 256 with 64 keys per block"));
}

}  // namespace fl
