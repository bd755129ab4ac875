/// @file steps/16_masks/launch_template.cuh
/// @brief Rung 16's launches and kernel lists for one head_dim, compiled once per head_dim
/// (masks_hdim64.cu, masks_hdim128.cu, masks_hdim256.cu, in parallel translation units; and
/// masks_hdim192.cu, the forward on rung 15's MlaTiles). Per
/// head_dim and dtype: 16 forward kernels without dropout and 5 with it (with_mods_and_dropout),
/// 4 more at d = 64 for the `softcap-exp-fma` study (exp_fma_built: both tile sets, both masks),
/// 4 backward kernels without dropout and 2 with it (with_bwd_mods), beside the classifier and
/// the backward's pre- and post-passes; and the `--dropout-rounds 10` ablation's generator in 3
/// forward kernels and 1 backward kernel (no modifier).
#pragma once

#include <algorithm>
#include <string>
#include <type_traits>
#include <vector>

#include "flashladder/registry.h"
#include "flashladder/static_switch.h"
#include "backward.cuh"
#include "bwd_delta.h"
#include "bwd_grid.h"
#include "kernel.cuh"

namespace fl::masks16 {

/// The forward's key for rung 15's MlaTiles (Q and K 192 columns, V and O 128: launch.cu's
/// with_head_dims picks it); its kernels are instantiated in masks_hdim192.cu, forward only (the
/// backward of those head_dims runs on rung 14's d = 256 tiles).
constexpr int kMlaTileDim = hopper15::MlaTiles::kHeadDim;

/// Calls f(TypeTag<tiles>) with rung 15's tiles for head_dim D: its causal tiles for every mask
/// that bounds the keys (the lists are short, as causal ones), its dense tiles otherwise; MlaTiles
/// for every mask at kMlaTileDim.
template <int D, class F>
decltype(auto) with_tiles_of(const MaskSpec& spec, F&& f) {
  if constexpr (D == kMlaTileDim) {
    (void)spec;
    return f(TypeTag<hopper15::MlaTiles>{});
  } else {
    if (is_no_mask(spec)) return f(TypeTag<hopper15::Tiles<D, false>>{});
    return f(TypeTag<hopper15::Tiles<D, true>>{});
  }
}

/// True for the tiles with_tiles_of takes under masks that bound the keys: rung 15's causal
/// tiles of head_dim D, and MlaTiles (one tile for every mask: the causal mask's own functor is
/// built for it).
template <int D, class Cfg>
constexpr bool causal_tiles() {
  return D == kMlaTileDim || std::is_same<Cfg, hopper15::Tiles<D, true>>::value;
}

/// The `softcap-exp-fma` study's kernels (exp_fma: a quarter of the softmax's exponentials on
/// the FMA pipe, rung 10's Ex2Split<1>): built where the XU pipe sets the forward's pace, softcap
/// at d = 64 (README, "What softcap costs, measured"), without ALiBi or dropout.
template <int D, class SCORE, class DROP>
constexpr bool exp_fma_built() {
  return D == 64 && SCORE::kSoftcap && !SCORE::kAlibi && !DROP::kOn;
}
using ExpFma = hopper10::Ex2Split<1>;

template <int D>
void launch_masks16(const AttnParams& p, Classify mode, cudaStream_t s, bool exp_fma) {
  FL_DTYPE_SWITCH(static_cast<DType>(p.dtype), T, [&] {
    with_tiles_of<D>(mask_spec_of(p), [&](auto tiles) {
      using Cfg = typename decltype(tiles)::type;
      with_mods_and_dropout<causal_tiles<D, Cfg>()>(p, [&](auto mask, auto score, auto drop) {
        using M = decltype(mask);
        using S = decltype(score);
        using P = decltype(drop);
        if constexpr (exp_fma_built<D, S, P>()) {
          if (exp_fma) return launch_masked_with<T, Cfg, M, S, P, ExpFma>(p, mask, score, mode, s, drop);
        }
        if (exp_fma) throw std::runtime_error("rung 16[softcap-exp-fma]: built for softcap at d <= 64 only");
        launch_masked_with<T, Cfg>(p, mask, score, mode, s, drop);
      });
    });
  });
}

template <int D>
std::vector<KernelInfo> kernels_masks16(const Problem& pr, bool exp_fma) {
  const AttnParams p = make_attn_params(pr);
  const MaskSpec spec = pr.mask_spec();
  return FL_DTYPE_SWITCH(pr.dtype, T, [&] {
    return with_tiles_of<D>(spec, [&](auto tiles) {
      using Cfg = typename decltype(tiles)::type;
      std::vector<KernelInfo> out;
      AttnParams q = p;
      q.doc_starts = pr.doc_starts.empty() ? nullptr : pr.doc_starts.data();  // only its presence is read
      with_mods_and_dropout<causal_tiles<D, Cfg>()>(q, [&](auto mask, auto score, auto drop) {
        using M = decltype(mask);
        using S = decltype(score);
        using P = decltype(drop);
 const std::string dims = (pr.head_dim == D ? std::to_string(D) : std::to_string(pr.head_dim) + " on the d=" + std::to_string(D) + " tiles") +
                                 (Cfg::kHeadDimV == Cfg::kHeadDim ? std::string()
                                  : pr.dv() == Cfg::kHeadDimV ? ", V and O " + std::to_string(Cfg::kHeadDimV)
                                  : ", V and O " + std::to_string(pr.dv()) + " on " + std::to_string(Cfg::kHeadDimV));
        const std::string label = "masked_fwd<d=" + dims + ", 128x" + std::to_string(Cfg::kBlockN) + ", " +
                                  (M::kLower ? "span mask" : "causal mask") + (S::kSoftcap ? ", softcap" : "") +
                                  (S::kAlibi ? ", ALiBi" : "") +
                                  (P::kOn ? (P::kRounds == 10 ? ", dropout (Philox4x32-10)" : ", dropout") : "") +
                                  ", block lists>";
        out.push_back({"classify_blocks", reinterpret_cast<const void*>(&classify_kernel<M, Cfg::kBlockM, Cfg::kBlockN>),
                       Cfg::kBlockM, 0});
        const void* kernel = prepared_masked_kernel<T, Cfg, M, S, P>();
        std::string name = label;
        if constexpr (exp_fma_built<D, S, P>()) {
          if (exp_fma) {
            kernel = prepared_masked_kernel<T, Cfg, M, S, P, ExpFma>();
            name.insert(name.size() - 1, ", a quarter of exp2 on the FMA pipe");
          }
        }
        out.push_back({name, kernel, Cfg::kThreads, static_cast<size_t>(Cfg::kSmemBytes)});
      });
      return out;
    });
  });
}

/// The workspace of a launch: the counter, then the block mask (mods.h's layout).
template <int D>
size_t workspace_masks16(const Problem& pr) {
  return with_tiles_of<D>(pr.mask_spec(), [&](auto tiles) {
    using Cfg = typename decltype(tiles)::type;
    return block_mask_layout(pr.varlen() || !pr.seqused_k.empty(), pr.batch, pr.seqlen_q, pr.seqlen_k, Cfg::kBlockM, Cfg::kBlockN).bytes();
  });
}

// ---- the backward pass (backward.cuh) ----------------------------------------------------------

/// Calls f(BwdMods<ScoreMod<softcap?, ALiBi?>>) for a launch's mask and modifiers, or
/// f(BwdMods<ScoreMod<false, ALiBi?>, PDropout<true>>) with dropout (one kernel more per head_dim
/// and dtype for ALiBi; softcap with dropout is not built: rung 16's supports refuses it).
template <class F>
void with_bwd_mods(const AttnParams& p, F&& f) {
  const SpanMask mask{mask_spec_of(p)};
  const float cap = p.softcap;
  const float* sl = p.alibi_slopes;
  const int ss = p.alibi_batch_stride;
  if (p.dropout.p > 0.f) {
    if (cap > 0) throw std::runtime_error("rung 16: dropout with softcap is not built");
    auto dropped = [&](auto mods) {
      mods.drop.params = p.dropout;
      f(mods);
    };
    if (p.dropout.rounds == 10) {  // the ablation's generator: without a modifier only
      if (p.alibi) throw std::runtime_error("rung 16: the 10-round dropout ablation is built without ALiBi");
      dropped(BwdMods<ScoreMod<false, false>, PDropout<true, 10>>{
          mask, {p.scale_log2, 0.f, 0.f}, p.heads_q, sl, ss});
    } else if (p.alibi)
      dropped(BwdMods<ScoreMod<false, true>, PDropout<true>>{
          mask, {p.scale_log2, 0.f, 0.f}, p.heads_q, sl, ss});
    else
      dropped(BwdMods<ScoreMod<false, false>, PDropout<true>>{
          mask, {p.scale_log2, 0.f, 0.f}, p.heads_q, sl, ss});
  } else if (cap > 0 && p.alibi)
    f(BwdMods<ScoreMod<true, true>>{mask, {p.softmax_scale / cap, cap * kLog2e, 0.f}, p.heads_q, sl, ss});
  else if (cap > 0) f(BwdMods<ScoreMod<true, false>>{mask, {p.softmax_scale / cap, cap * kLog2e, 0.f}, p.heads_q, sl, ss});
  else if (p.alibi) f(BwdMods<ScoreMod<false, true>>{mask, {p.scale_log2, 0.f, 0.f}, p.heads_q, sl, ss});
  else f(BwdMods<ScoreMod<false, false>>{mask, {p.scale_log2, 0.f, 0.f}, p.heads_q, sl, ss});
}

/// The backward's workspace shape: the problem with the tile's head_dim D (its dQ tiles are D
/// wide); a head_dim below D (80, 96), or V's head_dim below Q's (MLA's 192/128), never splits a
/// GQA group (the partial dK, dV and rung 11's convert are head_dim wide, dV's as dK's): each
/// block walks its whole group.
template <int D>
hopper14::WsShape bwd_shape(const Problem& pr) {
  hopper14::WsShape s(pr);
  s.p.head_dim = D;
  return s;
}
inline bwd::GroupSplit bwd_split(int head_dim, int head_dim_v, int D) {
  return head_dim == D && head_dim_v == D ? bwd::GroupSplit::balanced : bwd::GroupSplit::none;
}

/// Where D comes from (bwd_delta.h): rung 11's rule where its exact pass applies, else the fp32 O.
inline bwd::DeltaPolicy bwd_policy(const AttnParams& p) {
  return delta_policy(exact_pass_applies(mask_spec_of(p), p.softcap > 0 || p.alibi || p.sinks != nullptr || p.dropout.p > 0,
                                         p.cu_seqlens_q != nullptr, p.head_dim, p.dv()));
}

/// The backward's plain mods: a mask alone, no score modifier and no dropout (sinks add their own
/// pass after the kernel).
template <class MODS>
constexpr bool kPlainBwdMods = std::is_same<MODS, BwdMods<ScoreMod<false, false>>>::value;

template <int D>
void launch_masks16_bwd(const AttnBwdParams& P, cudaStream_t s, bool tile_grid) {
  using Cfg = hopper14::RungTiles<D>;
  const AttnParams& p = P.fwd;
  if (p.sinks != nullptr && P.dsinks == nullptr)
    throw std::runtime_error("rung 16: a backward with sinks needs AttnBwdParams::dsinks");
  hopper14::BwdBuffers buf{};
  FL_DTYPE_SWITCH(static_cast<DType>(p.dtype), T, [&] {
    with_bwd_mods(p, [&](auto mods) {
      using Mods = decltype(mods);
      if constexpr (D <= 128 && kPlainBwdMods<Mods>) {
        if (bwd_persistent(D, mask_spec_of(p), p.seqlen_q, p.head_dim, p.dv(), tile_grid)) {
          buf = hopper14::launch_backward<T, hopper14::RungPersistentTiles<D>, true>(
              P, bwd_policy(p), bwd_split(p.head_dim, p.dv(), D), mods, s);
          return;
        }
      }
      buf = hopper14::launch_backward<T, Cfg, true>(P, bwd_policy(p), bwd_split(p.head_dim, p.dv(), D), mods, s);
    });
  });
  if (p.sinks == nullptr) return;
  if (buf.lse_log2 == nullptr) {  // no row anywhere: nothing pulls on a sink
    FL_CUDA_CHECK(cudaMemsetAsync(P.dsinks, 0, sizeof(float) * p.heads_q, s));
    return;
  }
  sink_grad_kernel<<<p.heads_q, 256, 0, s>>>(p, buf.lse_log2, buf.delta, buf.head_rows, P.dsinks);
  FL_LAUNCH_CHECK("sink_grad_kernel");
}

template <int D>
size_t bwd_workspace_masks16(const Problem& pr, bool deterministic) {
  return hopper14::workspace_bytes(bwd_shape<D>(pr), deterministic, delta_policy(exact_pass_applies(pr)),
                                   bwd_split(pr.head_dim, pr.dv(), D));
}

/// The kernels of one backward launch on tiles Cfg with mods of type MODS (bwd_kernels_masks16).
template <class T, class Cfg, int D, class MODS>
void bwd_kernel_list(const Problem& pr, std::vector<KernelInfo>* out) {
  using S = decltype(MODS::score);
  using Drop = decltype(MODS::drop);
  const std::string dims = (pr.head_dim == D ? std::to_string(D) : std::to_string(pr.head_dim) + " on the d=" + std::to_string(D) + " tiles") +
                           (pr.dv() != pr.head_dim ? ", V's " + std::to_string(pr.dv()) : std::string());
  out->push_back(hopper14::prep_kernel_info<T, D>(hopper14::kRungPrep));
  out->push_back({"masked_bwd<d=" + dims + ", " + std::to_string(Cfg::kBlockN) + " keys x " +
                      std::to_string(Cfg::kBlockM) + " queries, span mask by key" + (S::kSoftcap ? ", softcap" : "") +
                      (S::kAlibi ? ", ALiBi" : "") +
                      (Drop::kOn ? (Drop::kRounds == 10 ? ", dropout (Philox4x32-10)" : ", dropout") : "") +
                      (Cfg::kPersistent ? ", persistent grid" : "") + ", rung 14's kernel>",
                  hopper14::prepared_kernel<T, Cfg, true, MODS>(), Cfg::kThreads,
                  static_cast<size_t>(Cfg::kSmemBytes)});
  out->push_back(hopper14::convert_kernel_info<T, Cfg>(hopper14::kRungPrep));
  if (!pr.sinks.empty()) out->push_back({"sink_grad", reinterpret_cast<const void*>(&sink_grad_kernel), 256, 0});
}

template <int D>
std::vector<KernelInfo> bwd_kernels_masks16(const Problem& pr, bool tile_grid) {
  AttnParams p = make_attn_params(pr);
  std::vector<KernelInfo> out;
  FL_DTYPE_SWITCH(pr.dtype, T, [&] {
    with_bwd_mods(p, [&](auto mods) {
      using Mods = decltype(mods);
      if constexpr (D <= 128 && kPlainBwdMods<Mods>) {
        if (bwd_persistent(D, pr.mask_spec(), pr.seqlen_q, pr.head_dim, pr.dv(), tile_grid)) {
          bwd_kernel_list<T, hopper14::RungPersistentTiles<D>, D, Mods>(pr, &out);
          return;
        }
      }
      bwd_kernel_list<T, hopper14::RungTiles<D>, D, Mods>(pr, &out);
    });
  });
  return out;
}

/// The forward's launches of one tile key D (masks_hdim192.cu: MlaTiles, forward only).
#define FL_MASKS16_INSTANTIATE_FWD(D)                                                               \
  template void launch_masks16<D>(const AttnParams&, Classify, cudaStream_t, bool);                 \
  template std::vector<KernelInfo> kernels_masks16<D>(const Problem&, bool);                        \
  template size_t workspace_masks16<D>(const Problem&);

#define FL_MASKS16_INSTANTIATE(D)                                                                   \
  FL_MASKS16_INSTANTIATE_FWD(D)                                                                     \
  template void launch_masks16_bwd<D>(const AttnBwdParams&, cudaStream_t, bool);                    \
  template size_t bwd_workspace_masks16<D>(const Problem&, bool);                                   \
  template std::vector<KernelInfo> bwd_kernels_masks16<D>(const Problem&, bool);

/// The same functions declared instantiated elsewhere (launch.cu, which includes this file: without
/// these it would instantiate every head_dim's kernels again, one translation unit compiling them
/// all in series, 260 s of a 2-core build, instead of masks_hdim*.cu in parallel).
#define FL_MASKS16_EXTERN_FWD(D)                                                                    \
  extern template void launch_masks16<D>(const AttnParams&, Classify, cudaStream_t, bool);          \
  extern template std::vector<KernelInfo> kernels_masks16<D>(const Problem&, bool);                 \
  extern template size_t workspace_masks16<D>(const Problem&);

#define FL_MASKS16_EXTERN(D)                                                                        \
  FL_MASKS16_EXTERN_FWD(D)                                                                          \
  extern template void launch_masks16_bwd<D>(const AttnBwdParams&, cudaStream_t, bool);             \
  extern template size_t bwd_workspace_masks16<D>(const Problem&, bool);                            \
  extern template std::vector<KernelInfo> bwd_kernels_masks16<D>(const Problem&, bool);

}  // namespace fl::masks16
