/// @file steps/16_masks/launch_impl.cuh
/// @brief Rung 16's launch and kernel list for one head_dim, compiled once per head_dim
/// (d64.cu, d128.cu, d256.cu: 16 forward kernels each, in parallel translation units).
#pragma once

#include <string>
#include <vector>

#include "flashladder/registry.h"
#include "flashladder/static_switch.h"
#include "kernel.cuh"

namespace fl::masks16 {

/// Calls f(TypeTag<tiles>) with rung 15's tiles for head_dim D: its causal tiles for every mask
/// that bounds the keys (the lists are short, as causal ones), its dense tiles otherwise.
template <int D, class F>
decltype(auto) with_tiles_of(const MaskSpec& spec, F&& f) {
  const bool dense = spec.window_left < 0 && spec.window_right < 0 && spec.prefix == 0 && spec.doc_starts == nullptr;
  if (dense) return f(TypeTag<hopper15::Tiles<D, false>>{});
  return f(TypeTag<hopper15::Tiles<D, true>>{});
}

template <int D>
void launch_masks16(const AttnParams& p, Classify mode, cudaStream_t s) {
  FL_DTYPE_SWITCH(static_cast<DType>(p.dtype), T, [&] {
    with_tiles_of<D>(mask_spec_of(p), [&](auto tiles) {
      using Cfg = typename decltype(tiles)::type;
      with_mods(p, [&](auto mask, auto score) { launch_masked_with<T, Cfg>(p, mask, score, mode, s); });
    });
  });
}

template <int D>
std::vector<KernelInfo> kernels_masks16(const Problem& pr) {
  const AttnParams p = make_attn_params(pr);
  const MaskSpec spec = pr.mask_spec();
  return FL_DTYPE_SWITCH(pr.dtype, T, [&] {
    return with_tiles_of<D>(spec, [&](auto tiles) {
      using Cfg = typename decltype(tiles)::type;
      std::vector<KernelInfo> out;
      AttnParams q = p;
      q.doc_starts = pr.doc_starts.empty() ? nullptr : pr.doc_starts.data();  // only its presence is read
      with_mods(q, [&](auto mask, auto score) {
        using M = decltype(mask);
        using S = decltype(score);
 const std::string dims = pr.head_dim == D ? std::to_string(D) : std::to_string(pr.head_dim) + " on the d=" + std::to_string(D) + " tiles";
        const std::string label = "masked_fwd<d=" + dims + ", 128x" + std::to_string(Cfg::kBlockN) + ", " +
                                  (M::kLower ? "span mask" : "causal mask") + (S::kSoftcap ? ", softcap" : "") +
                                  (S::kAlibi ? ", ALiBi" : "") + ", block lists>";
        out.push_back({"classify_blocks", reinterpret_cast<const void*>(&classify_kernel<M, Cfg::kBlockM, Cfg::kBlockN>),
                       Cfg::kBlockM, 0});
        out.push_back({label, prepared_masked_kernel<T, Cfg, M, S>(), Cfg::kThreads, static_cast<size_t>(Cfg::kSmemBytes)});
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
    return block_mask_layout(pr.varlen(), pr.batch, pr.seqlen_q, pr.seqlen_k, Cfg::kBlockM, Cfg::kBlockN).bytes();
  });
}

#define FL_MASKS16_INSTANTIATE(D)                                                                   \
  template void launch_masks16<D>(const AttnParams&, Classify, cudaStream_t);                       \
  template std::vector<KernelInfo> kernels_masks16<D>(const Problem&);                              \
  template size_t workspace_masks16<D>(const Problem&);

}  // namespace fl::masks16
