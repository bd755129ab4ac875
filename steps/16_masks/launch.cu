/// @file steps/16_masks/launch.cu
/// @brief Rung 16's registration: the rung (block lists from a classifier, masks and score
/// modifiers as functors, sinks in the epilogue), the two ablations of its classification, and
/// its backward pass (rung 14's kernel with the masks and modifiers: backward.cuh).
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "flashladder/registry.h"
#include "flashladder/tma.h"
#include "bwd_delta.h"
#include "mods.h"
#include "../14_hopper_backward/traits.h"
#include "../15_persistent/traits.h"
#if FL_HOPPER_SM90A
#include "launch_template.cuh"
namespace fl::masks16 {
// Instantiated in masks_hdim64.cu, masks_hdim128.cu, masks_hdim192.cu (the forward) and
// masks_hdim256.cu, in parallel.
FL_MASKS16_EXTERN(64)
FL_MASKS16_EXTERN(128)
FL_MASKS16_EXTERN_FWD(192)
FL_MASKS16_EXTERN(256)
}  // namespace fl::masks16
#endif

namespace fl {

namespace {

#if !FL_HOPPER_SM90A
namespace masks16 {
enum class Classify : int { exact = 0, no_full = 1, no_skip = 2 };
}
#endif
using masks16::Classify;

/// Calls f(std::integral_constant<int, D>) with the tile's head_dim D for head_dim @p d: the
/// next of 64, 128 and 256. TMA reads the columns between d and D as zeros (tma.h), which add
/// nothing to Q K^T and give O zero columns that the epilogue does not store: a head_dim of 80
/// or 96 runs the d = 128 kernel, its extra columns' FLOPs spent on zeros.
template <class F>
decltype(auto) with_head_dim(int d, F&& f) {
  if (d <= 64) return f(std::integral_constant<int, 64>{});
  if (d <= 128) return f(std::integral_constant<int, 128>{});
  return f(std::integral_constant<int, 256>{});
}
/// True where the forward runs rung 15's MlaTiles: Q's and K's head_dim @p d in (128, 192], V's
/// @p dv up to 128 (MLA's prefill, DeepSeek's 192 and 128).
bool mla_tiles_take(int d, int dv) {
  using Mla = hopper15::MlaTiles;
  return d > 128 && d <= Mla::kHeadDim && dv <= Mla::kHeadDimV;
}

/// The forward's tile head_dim for Q and K of @p d columns and V and O of @p dv: MlaTiles (key
/// 192) where they take the pair and @p mla is on; any other pair on the tile of the wider, the
/// narrower's columns past its own read as zeros (the `mla-on-d256` ablation: 192/128 too).
template <class F>
decltype(auto) with_head_dims(int d, int dv, bool mla, F&& f) {
  if (mla && mla_tiles_take(d, dv)) return f(std::integral_constant<int, hopper15::MlaTiles::kHeadDim>{});
  return with_head_dim(std::max(d, dv), std::forward<F>(f));
}

std::string check_limits(const Problem& p, const DeviceInfo& d) {
  const std::string hopper = hopper_supports(d, FL_HOPPER_SM90A != 0);
  if (!hopper.empty()) return hopper;
  if (p.dropout() && p.softcap > 0)
    return "dropout with softcap is not built (rung 16 compiles dropout with ALiBi or no score "
           "modifier, as FlashAttention 2 does)";
  if (p.dropout() && p.dropout_rounds != kDropoutRounds && p.alibi)
    return "the 10-round dropout ablation (--dropout-rounds 10) is built without ALiBi";
  if (p.dropout() && (!p.seqused_k.empty() || !p.seqstart_k.empty()))
    return "dropout with a KV cache's lengths or starts (seqused_k, seqstart_k) is not taken";
  if (p.head_dim % 8 != 0 || p.head_dim > 256)
    return "head_dim must be a multiple of 8 up to 256 (16-byte rows; the d = 64, 128 or 256 tiles, zero columns "
           "past it)";
  const std::string tiles = tile_limits(p, d, hopper15::Tiles<256>::kSmemBytes);
  if (!tiles.empty()) return tiles;
  if (std::string why = persistent_size_limits(p, 128); !why.empty()) return why;
  const double lists = std::ceil(p.seqlen_q / 128.0) * std::ceil(p.seqlen_k / 64.0) * (p.varlen() ? p.batch : 1) * 4;
  if (lists > 8e9) return "the block mask would take more than 8 GB (query tiles x key blocks x sequences)";
  return "";
}

/// What every entry of the rung shares, forward and backward.
Rung base_entry(const char* variant, const char* summary) {
  Rung r;
  r.number = 16;
  r.name = "masks";
  r.variant = variant;
  r.summary = summary;
  r.peak = Peak::tensor_16bit;
  r.writes_o_fp32 = true;
  r.varlen = true;
  r.mods = true;
  r.dropout = true;  // PDropout<true> (mods.h): ALiBi with it, not softcap (check_limits)
  r.seqused_k = true;  // a KV cache's lengths: seq_span (varlen.h) reads them
  r.min_cc = 90;
  // Every multiple of 8 up to 256 (with_head_dim): the tiles' own 64, 128 and 256, and between
  // them the open models' 80 and 96 (Phi-3, GPT-NeoX-style) and FlashAttention's test file's 40,
  // 72, 104 on the next tile up. Every store past the head is guarded in 8-column (16-byte)
  // chunks, and TMA takes rows of any multiple of 8 elements (tma.h).
  r.head_dims.clear();
  for (int d = 8; d <= 256; d += 8) r.head_dims.push_back(d);
  return r;
}

/// Why the `softcap-exp-fma` study cannot run @p p ("" when it can): its kernels are built for
/// softcap at d = 64 (launch_template.cuh, exp_fma_built).
std::string exp_fma_reason(const Problem& p) {
  if (p.softcap <= 0 || p.alibi || p.dropout() || std::max(p.head_dim, p.dv()) > 64)
    return "softcap-exp-fma: a study built for softcap without ALiBi or dropout, head_dim <= 64";
  return "";
}

/// @p exp_fma: the `softcap-exp-fma` study (a quarter of the softmax's exponentials on the FMA pipe);
/// @p mla: MlaTiles where they take the head_dims (off: the `mla-on-d256` ablation).
Rung make(Classify mode, const char* variant, const char* summary, bool exp_fma = false, bool mla = true) {
  Rung r = base_entry(variant, summary);
  r.in_tour = mode == Classify::exact && !exp_fma && mla;
  r.workspace_kept = true;  // the classifier rewrites the lists and zeroes the counter every launch
  if (mode == Classify::exact && !exp_fma && mla)
    r.baselines = {Baseline::on(15, "the rung it builds on: the same kernel with the causal mask as special code")};
  // V and O with a head_dim of their own (--dim-v; MLA's prefill 192/128): V's tensor map at its
  // own columns, O stored at them, on rung 15's MlaTiles where they take the pair, else on the tile
  // of the wider (with_head_dims). The backward takes V's head_dim up to Q's (make_backward).
  r.head_dim_v = true;
  if (exp_fma) {  // the study's kernels: softcap, d <= 64 (exp_fma_reason)
    r.head_dims.erase(std::remove_if(r.head_dims.begin(), r.head_dims.end(), [](int d) { return d > 64; }),
                      r.head_dims.end());
    r.study_problem = [](Problem& p) { p.softcap = 30; };
  }
  if (!mla) {  // the ablation: only where MlaTiles would run (MLA's prefill, 192/128)
    r.head_dims = {hopper15::MlaTiles::kHeadDim};
    r.study_problem = [](Problem& p) { p.head_dim_v = hopper15::MlaTiles::kHeadDimV; };
  }
  r.supports = [exp_fma, mla](const Problem& p, const DeviceInfo& d) {
    const std::string why = check_limits(p, d);
    if (!why.empty()) return why;
    if (!mla && !mla_tiles_take(p.head_dim, p.dv()))
      return std::string("mla-on-d256: an ablation of MlaTiles' head_dims (Q and K in (128, 192], V up to 128)");
    return exp_fma ? exp_fma_reason(p) : why;
  };
  r.workspace_bytes = [mla](const Problem& p) -> size_t {
#if FL_HOPPER_SM90A
    return with_head_dims(p.head_dim, p.dv(), mla,
                          [&](auto d) { return masks16::workspace_masks16<decltype(d)::value>(p); });
#else
    (void)p;
    (void)mla;
    return 16;
#endif
  };
  r.launch = [mode, exp_fma, mla](const AttnParams& p, cudaStream_t s) {
#if FL_HOPPER_SM90A
    with_head_dims(p.head_dim, p.dv(), mla,
                   [&](auto d) { masks16::launch_masks16<decltype(d)::value>(p, mode, s, exp_fma); });
#else
    (void)p;
    (void)s;
    (void)mode;
    (void)exp_fma;
    (void)mla;
    throw std::runtime_error("rung 16 was built without sm_90a");
#endif
  };
  r.kernels = [exp_fma, mla](const Problem& p) -> std::vector<KernelInfo> {
#if FL_HOPPER_SM90A
    return with_head_dims(p.head_dim, p.dv(), mla,
                          [&](auto d) { return masks16::kernels_masks16<decltype(d)::value>(p, exp_fma); });
#else
    (void)p;
    (void)exp_fma;
    (void)mla;
    return {};
#endif
  };
  r.grid_ctas = [](const Problem& p, const DeviceInfo& d) -> long long {
    const long long items = static_cast<long long>((p.seqlen_q + 127) / 128) * p.batch * p.heads_q;
    return std::min<long long>(items, d.sm_count);
  };
  return r;
}

/// The backward pass after the rung's forward: rung 14's kernel and tiles (d = 64, 128, 256; the
/// head_dims between on the next tile up, as the forward's), the masks by key, the modifiers, the
/// sinks' gradient. V with a head_dim of its own up to Q's (MLA's training, 192/128): V's and dO's
/// maps at its columns, zeros past them on Q's tile; D over O's and dO's columns, dV stored at
/// them (launch_bwd.cuh, kernel.cuh).
template <bool TILE_GRID>
Rung make_backward() {
  Rung r = TILE_GRID
               ? base_entry("backward-tile-grid", "ablation: the backward with one block per K/V block at every length "
                                                  "(the backward's grid is rung 14's persistent one where its walks "
                                                  "are short and no score modifier nor dropout is on: README)")
               : base_entry("backward", "backward: rung 14's kernel with the masks read by key (the query blocks that "
                                        "see a K/V block, full or partial per warpgroup), softcap's derivative, ALiBi, "
                                        "the sinks' gradient; rung 14's persistent grid on short walks");
  r.forward_rung = 16;
  r.builds_on = {14};
  r.seqused_k = false;  // a KV cache has no backward pass; rung 11's exact D pass ignores seqused_k
  r.in_tour = false;
  r.baselines = {TILE_GRID ? Baseline::on(16, "the backward whose grid it changes", "backward")
                           : Baseline::on(14, "the backward it builds on: the same kernel with the causal mask as special code")};
  r.head_dim_v = true;  // up to head_dim (supports): the tile is Q's and K's
  r.supports = [](const Problem& p, const DeviceInfo& d) -> std::string {
    if (p.dv() > p.head_dim)
      return "the backward takes V's head_dim (--dim-v) up to --dim only (its tiles are Q's and K's; MLA's 192/128 "
             "runs)";
    if (std::string why = check_limits(p, d); !why.empty()) return why;  // the forward's
    return tile_limits(p, d, with_head_dim(p.head_dim, [](auto t) {  // the backward tile's, either grid
                         constexpr int D = decltype(t)::value;
                         if constexpr (D <= 128)
                           return std::max(hopper14::RungTiles<D>::kSmemBytes, hopper14::RungPersistentTiles<D>::kSmemBytes);
                         else
                           return hopper14::RungTiles<D>::kSmemBytes;
                       }));
  };
  r.bwd_supports = [](const Problem& p, bool deterministic) -> std::string {
    // Deterministic with any mask: the dQ adds go in rung 14's order, each block waiting for the
    // nearest block that visits the same query block (kernel.cuh's prev_token).
    (void)deterministic;
    return masks16::long_row_refusal(p);
  };
  r.launch = [](const AttnParams& p, cudaStream_t s) { registry().find(16)->launch(p, s); };
  r.bwd_workspace_bytes = [](const Problem& p, bool deterministic) -> size_t {
#if FL_HOPPER_SM90A
    return with_head_dim(p.head_dim,
                         [&](auto d) { return masks16::bwd_workspace_masks16<decltype(d)::value>(p, deterministic); });
#else
    (void)p;
    (void)deterministic;
    return 0;
#endif
  };
  r.bwd_reads_o_fp32 = [](const Problem& p) {
    return bwd::reads_o32(masks16::delta_policy(masks16::exact_pass_applies(p)), p.seqlen_k);
  };
  r.launch_bwd = [](const AttnBwdParams& P, cudaStream_t s) {
#if FL_HOPPER_SM90A
    with_head_dim(P.fwd.head_dim, [&](auto d) { masks16::launch_masks16_bwd<decltype(d)::value>(P, s, TILE_GRID); });
#else
    (void)P;
    (void)s;
    throw std::runtime_error("rung 16 was built without sm_90a");
#endif
  };
  r.kernels = [](const Problem& p) -> std::vector<KernelInfo> {
#if FL_HOPPER_SM90A
    return with_head_dim(p.head_dim,
                         [&](auto d) { return masks16::bwd_kernels_masks16<decltype(d)::value>(p, TILE_GRID); });
#else
    (void)p;
    return {};
#endif
  };
  r.notes = [](const Problem& p) {
    std::vector<std::string> notes{
        "backward pass after rung 16's forward (O, fp32 O and LSE); FLOPs by FlashAttention's convention: 2.5 x "
        "the forward's, unmasked pairs only",
        std::string("D from ") +
            bwd::delta_source_name(bwd::delta_source(masks16::delta_policy(masks16::exact_pass_applies(p)),
                                                     p.seqlen_k, true)) +
            " (bwd_delta.h: rung 11's rule where its exact pass applies, the fp32 O elsewhere)"};
    if ((p.head_dim % 64 != 0 || p.dv() != p.head_dim) && p.heads_q > p.heads_kv)
      notes.push_back(p.dv() != p.head_dim
                          ? "V's head_dim not Q's: each block walks its whole GQA group (no split)"
                          : "head_dim below its tile's: each block walks its whole GQA group (no split)");
    return notes;
  };
  return r;
}

}  // namespace

void register_rung_16(Registry& reg) {
  reg.add(make(Classify::exact, "", "masks and score modifiers as functors: blocks classified empty, full or partial on the device, only non-empty ones visited, the element mask on partial ones only; softcap, ALiBi, sinks"));
  reg.add(make(Classify::no_full, "no-full-blocks", "ablation: every visited block partial (the element mask on every block)"));
  reg.add(make(Classify::no_skip, "no-skip", "ablation: every block of the sequence visited and masked (nothing skipped)"));
  reg.add(make(Classify::exact, "softcap-exp-fma",
               "study: softcap at d <= 64 with a quarter of the softmax's exponentials on the FMA pipe (exp2_poly), "
               "the rest and softcap's tanh on the XU pipe",
               true));
  reg.add(make(Classify::exact, "mla-on-d256",
               "ablation: MLA's 192/128 forward on the d = 256 tiles (zero columns past 192 and 128), as before MlaTiles",
               false, false));
  reg.add(make_backward<false>());
  reg.add(make_backward<true>());
}

}  // namespace fl
