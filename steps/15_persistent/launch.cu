/// @file steps/15_persistent/launch.cu
/// @brief Rung 15's launcher and registration: the rung (a persistent grid on an LPT schedule,
/// the epilogue under the next item's loads, dense or packed batches), one variant per idea
/// turned off, and the tile variants of its sweep.
#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "flashladder/device.h"
#include "flashladder/registry.h"
#include "flashladder/static_switch.h"
#include "flashladder/tma.h"
#include "scheduler.h"
#include "traits.h"
#if FL_HOPPER_SM90A
#include "kernel.cuh"
#endif

namespace fl {

#if FL_HOPPER_SM90A
int hopper15::sm_count_cached() {
  // One entry per device, filled on first use (device.h): the launch path asks only cudaGetDevice.
  const int n = device_sm_count();
  if (n <= 0) throw std::runtime_error("rung 15: no CUDA device to plan the persistent grid on");
  return n;
}
#endif

namespace {

enum class Mode { all, no_persistent, no_epilogue_overlap, fifo, static_rounds, pair_stores };

constexpr bool persistent(Mode m) { return m != Mode::no_persistent; }
constexpr bool epilogue_overlap(Mode m) { return m != Mode::no_epilogue_overlap; }
constexpr bool lpt(Mode m) { return m != Mode::fifo; }
constexpr bool dynamic(Mode m) { return m != Mode::static_rounds; }
constexpr bool row16(Mode m) { return m != Mode::pair_stores; }

template <int D>
using DenseTiles = hopper15::Tiles<D>;
template <int D>
using CausalTiles = hopper15::Tiles<D, true>;

/// Calls f(TypeTag<the rung's tiles for @p head_dim, @p causal or not>{}).
template <class F>
decltype(auto) with_tiles(int head_dim, bool causal, F&& f) {
  if (causal) return with_head_dim_tiles<CausalTiles>(head_dim, std::forward<F>(f));
  return with_head_dim_tiles<DenseTiles>(head_dim, std::forward<F>(f));
}

template <class TILES>
std::string check_limits(const Problem& p, const DeviceInfo& d) {
  const std::string hopper = hopper_supports(d, FL_HOPPER_SM90A != 0);
  if (!hopper.empty()) return hopper;
  if constexpr (std::is_void_v<TILES>) {
    if (p.head_dim != 64 && p.head_dim != 128 && p.head_dim != 256)
      return "head_dim must be 64, 128 or 256 (TMA boxes of 64 columns)";
    const int smem = with_tiles(p.head_dim, p.causal, [](auto tiles) { return decltype(tiles)::type::kSmemBytes; });
    const std::string tiles = tile_limits(p, d, smem);
    return tiles.empty() ? persistent_size_limits(p, 128) : tiles;
  } else {
    if (p.head_dim != TILES::kHeadDim) return "head_dim must be " + std::to_string(TILES::kHeadDim);
    const std::string tiles = tile_limits(p, d, TILES::kSmemBytes);
    return tiles.empty() ? persistent_size_limits(p, TILES::kBlockM) : tiles;
  }
}

#if FL_HOPPER_SM90A
template <Mode M, class T, class Cfg>
void launch_mode(const AttnParams& p, cudaStream_t s) {
  hopper15::launch_persistent<T, Cfg, persistent(M), epilogue_overlap(M), row16(M)>(p, lpt(M), dynamic(M), s);
}

template <Mode M, class T, class Cfg>
std::vector<KernelInfo> kernels_mode() {
  return {{hopper15::tile_label<Cfg, persistent(M), epilogue_overlap(M), row16(M)>(lpt(M), dynamic(M)),
           hopper15::prepared_kernel<T, Cfg, persistent(M), epilogue_overlap(M), row16(M)>(), Cfg::kThreads,
           static_cast<size_t>(Cfg::kSmemBytes)}};
}
#endif

/// The rung (TILES = void: tiles per head_dim and mask) or one of its variants: an idea turned
/// off (M), or the whole rung on fixed tiles at their one head_dim (TILES).
template <Mode M, class TILES = void>
Rung make(const char* variant, const char* summary) {
  constexpr bool kFixedTiles = !std::is_void_v<TILES>;
  Rung r;
  r.number = 15;
  r.name = "persistent";
  r.variant = variant;
  r.summary = summary;
  r.peak = Peak::tensor_16bit;
  r.writes_o_fp32 = true;  // the epilogue's store_o2 (epilogue.cuh)
  r.lse_optional = true;   // the epilogue skips a null LSE
  r.workspace_kept = true;  // the kernel's last block zeroes the counters it used (kernel.cuh)
  r.varlen = true;
  r.seqused_k = true;  // a KV cache's lengths: seq_span (varlen.h) reads them
  r.min_cc = 90;
  r.head_dims = {64, 128, 256};
  if constexpr (kFixedTiles) r.head_dims = {TILES::kHeadDim};
  r.in_tour = M == Mode::all && !kFixedTiles;
  if (M == Mode::all && !kFixedTiles)
    r.baselines = {Baseline::on(10, "the rung it improves on: the same tiles and schedule inside a block, one block per tile")};
  r.supports = [](const Problem& p, const DeviceInfo& d) { return check_limits<TILES>(p, d); };
  // The schedule's counter, which only the dynamic schedule reads (make_scheduler: a causal mask or
  // a packed batch): a dense batch without a mask needs no workspace, so a call allocates none.
  r.workspace_bytes = [](const Problem& p) {
    return p.causal || p.varlen() ? hopper15::kWorkspaceBytes : size_t{0};
  };
  r.launch = [](const AttnParams& p, cudaStream_t s) {
#if FL_HOPPER_SM90A
    FL_DTYPE_SWITCH(static_cast<DType>(p.dtype), T, [&] {
      if constexpr (kFixedTiles) launch_mode<M, T, TILES>(p, s);
      else
        with_tiles(p.head_dim, p.causal != 0,
                   [&](auto tiles) { launch_mode<M, T, typename decltype(tiles)::type>(p, s); });
    });
#else
    (void)p;
    (void)s;
    throw std::runtime_error("rung 15 was built without sm_90a");
#endif
  };
  r.kernels = [](const Problem& p) -> std::vector<KernelInfo> {
#if FL_HOPPER_SM90A
    return FL_DTYPE_SWITCH(p.dtype, T, [&] {
      if constexpr (kFixedTiles) return kernels_mode<M, T, TILES>();
      else
        return with_tiles(p.head_dim, p.causal,
                          [](auto tiles) { return kernels_mode<M, T, typename decltype(tiles)::type>(); });
    });
#else
    (void)p;
    return {};
#endif
  };
  r.grid_ctas = [](const Problem& p, const DeviceInfo& d) -> long long {
    const long long items = static_cast<long long>((p.seqlen_q + 127) / 128) * p.batch * p.heads_q;
    return persistent(M) ? std::min<long long>(items, d.sm_count) : items;
  };
  return r;
}

}  // namespace

void register_rung_15(Registry& reg) {
  reg.add(make<Mode::all>("", "a persistent grid on an LPT tile schedule, the epilogue under the next tile's loads, packed variable-length batches"));
  reg.add(make<Mode::no_persistent>("no-persistent", "ablation: one block per query tile (rung 10's grid), the same kernel"));
  reg.add(make<Mode::no_epilogue_overlap>("no-epilogue-overlap", "ablation: the next tile's Q is loaded only after O is stored"));
  reg.add(make<Mode::fifo>("fifo", "ablation: causal query tiles shortest first (no LPT)"));
  reg.add(make<Mode::static_rounds>("static", "ablation: causal and packed grids dealt in fixed rounds, no counter"));
  reg.add(make<Mode::pair_stores>("pair-stores", "ablation: O stored in 4-byte pairs (rung 10's epilogue), each sector in two halves"));
  reg.add(make<Mode::all, hopper15::Variant_d64_128x192>("d64-128x192", "tiles: d = 64 with 192 keys per block"));
  reg.add(make<Mode::all, hopper15::Variant_d128_128x128>("d128-128x128", "tiles: d = 128 with 128 keys per block, causal or not"));
  reg.add(make<Mode::all, hopper15::Variant_d128_128x176>("d128-128x176", "tiles: d = 128 with 176 keys per block, causal or not"));
  reg.add(make<Mode::all, hopper15::Variant_d256_128x64>("d256-128x64", "tiles: d = 256 with 64 keys per block"));
  reg.add(make<Mode::all, hopper15::Variant_d64_q2>("d64-q2", "two Q tiles: the next item's Q loads under this item's blocks (d = 64)"));
  reg.add(make<Mode::all, hopper15::Variant_d128_q2>("d128-q2", "two Q tiles and 128 keys per block (d = 128)"));
}

}  // namespace fl
