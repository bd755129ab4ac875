/// @file steps/11_backward/launch.cu
/// @brief Rung 11's registration: the backward kernels (kernel.cuh) behind `launch_bwd`, and
/// rung 06's forward pass behind `launch` (the backward pass needs the forward's O and LSE).
#include <stdexcept>
#include <string>
#include <vector>

#include "flashladder/registry.h"
#include "flashladder/static_switch.h"
#include "kernel.cuh"

namespace fl {
namespace {

constexpr int kForwardRung = 6;

const Rung& forward_rung() {
  const Rung* f = registry().find(kForwardRung);
  if (!f) throw std::runtime_error("rung 11 runs rung 06's forward pass, which is not built");
  return *f;
}

/// Each entry's tiles and GQA split: the rung's (kernel.cuh's BwdTiles, the group split by
/// kv_splits), the same with a staggered Q order, 4 warps on 64 keys, the rung's tiles with the
/// group never split or always split down to one query head per block, the rung launched in
/// K/V-block order under a causal mask (not longest first), and the rung with one source of D
/// always (delta_policy.h): the 16-bit O (FlashAttention-2's preprocess), the forward's fp32 O, or
/// the exact pass.
enum class Tiles { rung, stagger, four_warps, nosplit, fullsplit, inorder, o16_delta, o32_delta, exact_delta };

constexpr bwd::DeltaPolicy delta_policy(Tiles t) {
  return t == Tiles::o16_delta   ? bwd::DeltaPolicy::o16
         : t == Tiles::o32_delta ? bwd::DeltaPolicy::o32
         : t == Tiles::exact_delta ? bwd::DeltaPolicy::exact
                                   : bwd::DeltaPolicy::rung;
}

constexpr bwd::GroupSplit group_split(Tiles t) {
  return t == Tiles::nosplit ? bwd::GroupSplit::none
                             : t == Tiles::fullsplit ? bwd::GroupSplit::full : bwd::GroupSplit::balanced;
}

/// Calls @p f with the tile of @p TILES for the runtime head_dim (64 or 128).
template <Tiles TILES, class F>
decltype(auto) with_tiles(int head_dim, F&& f) {
  if constexpr (TILES == Tiles::rung || TILES == Tiles::nosplit || TILES == Tiles::fullsplit ||
                TILES == Tiles::inorder || TILES == Tiles::o16_delta || TILES == Tiles::o32_delta ||
                TILES == Tiles::exact_delta) {
    if (head_dim == 64) return f(bwd::BwdTiles<64>{});
    return f(bwd::BwdTiles<128>{});
  } else if constexpr (TILES == Tiles::stagger) {
    if (head_dim == 64) return f(bwd::BwdTiles<64, 128, 8, true>{});
    return f(bwd::BwdTiles<128, 64, 8, true>{});
  } else {
    if (head_dim == 64) return f(bwd::BwdTiles<64, 64, 4>{});
    return f(bwd::BwdTiles<128, 64, 4>{});
  }
}

template <class T, class Cfg>
std::vector<KernelInfo> kernel_list(bool exact_delta) {
  constexpr int D = Cfg::kHeadDim;
  const std::string tile = std::to_string(Cfg::kBlockN) + " keys x " + std::to_string(Cfg::kBlockM) + " queries, " +
                           std::to_string(Cfg::kWarps) + " warps>";
  std::vector<KernelInfo> k{{"bwd_preprocess<d=" + std::to_string(D) + ">",
                             reinterpret_cast<const void*>(&bwd::bwd_preprocess_kernel<T, D>), bwd::kPrepThreads, 0}};
  if (exact_delta)
    k.push_back({"bwd_main<d=" + std::to_string(D) + ", exact D pass, " + tile, bwd::prepared_main<T, Cfg, true>(),
                 Cfg::kThreads, static_cast<size_t>(Cfg::kSmemBytes)});
  std::vector<KernelInfo> rest{
      {"bwd_main<d=" + std::to_string(D) + ", " + tile,
       bwd::prepared_main<T, Cfg>(), Cfg::kThreads, static_cast<size_t>(Cfg::kSmemBytes)},
      {"bwd_convert<d=" + std::to_string(D) + ">",
       reinterpret_cast<const void*>(&bwd::bwd_convert_kernel<T, D>), 256, 0},
      {"bwd_convert_kv<d=" + std::to_string(D) + "> (split GQA groups)",
       reinterpret_cast<const void*>(&bwd::bwd_convert_kv_kernel<T, D>), 256, 0}};
  k.insert(k.end(), rest.begin(), rest.end());
  return k;
}

/// The rung (2D tiles) or one of its variants.
template <Tiles TILES>
Rung make_rung() {
  Rung r;
  r.number = 11;
  r.name = "backward";
  r.head_dims = {64, 128};
  switch (TILES) {
    case Tiles::rung:
      r.summary =
          "FA2 backward: recompute P from the LSE, 128-key blocks with dK/dV in registers, "
          "FA2's 2D warp layouts (P and dS through shared memory), dQ by atomics, GQA groups "
          "split over blocks, causal blocks launched longest first";
      break;
    case Tiles::inorder:
      r.variant = "inorder";
      r.summary =
          "ablation: causal blocks launched in K/V-block order (as FA2) instead of longest "
          "first, so long blocks may start in the last wave";
      break;
    case Tiles::nosplit:
      r.variant = "nosplit";
      r.summary =
          "ablation: one block per (K/V block, KV head), the whole GQA group's query heads in "
          "turn (the grid divided by the group size; dK, dV written directly)";
      break;
    case Tiles::fullsplit:
      r.variant = "fullsplit";
      r.summary =
          "ablation: one block per (K/V block, query head), as FlashAttention-2 (fp32 partial "
          "dK, dV per query head, added by a convert kernel)";
      break;
    case Tiles::o16_delta:
      r.variant = "o16-delta";
      r.summary =
          "ablation: D = rowsum(dO * O) from the 16-bit O always, as FlashAttention-2 (O's rounding "
          "shifts D, and dQ's error grows with the keys a row sees)";
      break;
    case Tiles::o32_delta:
      r.variant = "o32-delta";
      r.summary =
          "ablation: D = rowsum(dO * O) from the forward's fp32 O always, never the exact pass (the "
          "forward's O drifts with the row's length, and so does dQ's error)";
      break;
    case Tiles::exact_delta:
      r.variant = "exact-delta";
      r.summary =
          "ablation: D = rowsum(P * dP) by the exact pass always, also on short rows (what the pass "
          "costs where the rung does not need it)";
      break;
    case Tiles::stagger:
      r.variant = "stagger";
      r.summary =
          "ablation: K/V block j visits its Q blocks from the (j mod n)-th, so that the blocks "
          "running at once add into different dQ rows (do the dQ atomics contend?)";
      break;
    case Tiles::four_warps:
      r.variant = "4warps";
      r.summary =
          "ablation: 4 warps on 64 keys x 64 queries (fewer registers and shared memory per "
          "block: two or three blocks per SM; twice the dQ atomics and Q/dO loads per key)";
      break;
  }
  r.peak = Peak::tensor_16bit;
  r.min_cc = 80;
  r.forward_rung = kForwardRung;
  // Rung 05's mma.sync, ldmatrix and cp.async (the lesson diff compares with it), and the
  // longest-first launch order of FlashAttention-3's schedule, which rung 10 teaches.
  r.builds_on = {5, 10};
  r.new_design = "the backward pass";
  r.writes_o_fp32 = true;  // `launch` is rung 06's forward, which writes the fp32 O asked for
  r.in_tour = false;
  r.supports = [](const Problem& p, const DeviceInfo& d) -> std::string {
    if (!registry().find(kForwardRung)) return "needs rung 06 (its forward pass) in the build";
    if (!forward_rung().not_implemented.empty())
      return "needs rung 06's forward pass, which is not implemented here";
    if (p.head_dim != 64 && p.head_dim != 128) return "head_dim must be 64 or 128";
    const int smem =
        with_tiles<TILES>(p.head_dim, [](auto cfg) { return decltype(cfg)::kSmemBytes; });
    const std::string limits = tile_limits(p, d, smem);  // heads_q >= heads_kv: covers grid y
    if (!limits.empty()) return limits;
    return forward_rung().supports ? forward_rung().supports(p, d) : "";
  };
  r.launch = [](const AttnParams& p, cudaStream_t s) { forward_rung().launch(p, s); };
  r.bwd_workspace_bytes = [](const Problem& p, bool deterministic) {
    return with_tiles<TILES>(p.head_dim, [&](auto cfg) {
      return bwd::workspace_bytes<decltype(cfg)>(p, deterministic, group_split(TILES), delta_policy(TILES));
    });
  };
  r.launch_bwd = [](const AttnBwdParams& P, cudaStream_t s) {
    FL_DTYPE_SWITCH(static_cast<DType>(P.fwd.dtype), T, [&] {
      with_tiles<TILES>(P.fwd.head_dim,
                        [&](auto cfg) {
                          bwd::launch_backward<T, decltype(cfg)>(P, group_split(TILES),
                                                                 TILES != Tiles::inorder, delta_policy(TILES), s);
                        });
    });
  };
  r.kernels = [](const Problem& p) {
    const bool exact = bwd::delta_source(delta_policy(TILES), p.seqlen_k, true) == bwd::DeltaSource::exact;
    return FL_DTYPE_SWITCH(p.dtype, T, [&] {
      return with_tiles<TILES>(p.head_dim,
                               [&](auto cfg) { return kernel_list<T, decltype(cfg)>(exact); });
    });
  };
  r.notes = [](const Problem& p) {
    std::vector<std::string> notes{
        "backward pass after rung 06's forward (O and LSE); FLOPs by FlashAttention's "
        "convention: 2.5 x the forward's",
        std::string("D from ") +
            bwd::delta_source_name(bwd::delta_source(delta_policy(TILES), p.seqlen_k, true)) +
            " (delta_policy.h: the exact pass for rows of more than " + std::to_string(bwd::kExactDeltaKeys) +
            " keys, else the forward's fp32 O)"};
    if (p.heads_kv > 0 && p.heads_q > p.heads_kv && (p.head_dim == 64 || p.head_dim == 128)) {
      const int split = with_tiles<TILES>(p.head_dim, [&](auto cfg) {
        return bwd::kv_splits<decltype(cfg)>(p, false, group_split(TILES));
      });
      notes.push_back("GQA group of " + std::to_string(p.heads_q / p.heads_kv) + " query heads: " +
                      (split == 1 ? std::string("one block per KV head, dK and dV written directly")
                                  : std::to_string(split) + " blocks per KV head, fp32 partial dK, dV "
                                                            "added by bwd_convert_kv"));
    }
    return notes;
  };
  return r;
}

}  // namespace

void register_rung_11(Registry& reg) {
  reg.add(make_rung<Tiles::rung>());
  reg.add(make_rung<Tiles::stagger>());
  reg.add(make_rung<Tiles::four_warps>());
  reg.add(make_rung<Tiles::nosplit>());
  reg.add(make_rung<Tiles::fullsplit>());
  reg.add(make_rung<Tiles::inorder>());
  reg.add(make_rung<Tiles::o16_delta>());
  reg.add(make_rung<Tiles::o32_delta>());
  reg.add(make_rung<Tiles::exact_delta>());
}

}  // namespace fl
