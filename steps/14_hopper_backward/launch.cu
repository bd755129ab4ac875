/// @file steps/14_hopper_backward/launch.cu
/// @brief Rung 14's registration: its entries run launch_bwd.cuh's backward (the row statistics,
/// the kernel with rung 14's own mask, CausalOrNone, and the dQ convert in the workspace
/// workspace.h lays out) behind `launch_bwd`, and rung 15's forward pass behind `launch`. Rows of
/// more than bwd::kExactDeltaKeys keys take D from rung 11's exact pass (exact_delta.cuh); a split
/// GQA group adds its partial dK, dV with rung 11's convert kernel. One variant per idea turned off.
#include <stdint.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "flashladder/cuda_check.h"
#include "flashladder/registry.h"
#include "flashladder/static_switch.h"
#include "flashladder/tma.h"
#include "traits.h"
#include "workspace.h"
#if FL_HOPPER_SM90A
#include "launch_bwd.cuh"
#endif

namespace fl {
namespace {

/// The forward pass whose O and LSE the backward reads: rung 15 (rung 10's kernel in a persistent
/// grid), which also takes packed batches.
constexpr int kForwardRung = 15;

/// The rung and its ablations: each turns one idea off (nosplit, fullsplit: the group split's
/// extremes, rung 11's variants of the same names).
enum class Mode { rung, no_ws, atomic_dq, ss_dkv, one_stage, nosplit, fullsplit, o32_delta, unfused_prep, rule_split,
                  late_free, fp8_dq, fp8_dq_tile, persistent, tile_grid, det_linear, o16_delta, direct_dkv, lpt_grid,
                  lpt_s16, lpt_s32, x_order };

/// The causal grid longest first (BwdBuffers::lpt_section) for rows of @p seqlen_q queries at
/// @p head_dim: the rung's in sections of hopper14::rung_lpt_section groups (none, the K/V block
/// fastest, on rows too long for L2), and so every ablation of one other idea; lpt-grid over all
/// the groups at once, lpt-s<n> in sections of n groups whatever the length (README, "Longest
/// first"); x-order, the ablation, and o32-delta, the ring's (rung 12: its steps' chunks not
/// measured with the order), the K/V block fastest.
constexpr int lpt_section(Mode m, int64_t seqlen_q, int head_dim) {
  return m == Mode::x_order || m == Mode::o32_delta ? 0
         : m == Mode::lpt_grid                       ? INT32_MAX
         : m == Mode::lpt_s16                        ? 16
         : m == Mode::lpt_s32                        ? 32
                                                     : hopper14::rung_lpt_section(seqlen_q, head_dim);
}
/// The order's ablations (x-order, the section's sizes): the rung's kernel at every head_dim.
constexpr bool lpt_entry(Mode m) {
  return m == Mode::lpt_grid || m == Mode::lpt_s16 || m == Mode::lpt_s32 || m == Mode::x_order;
}

/// The kernel's own ablations have the rung's tiles at d = 64 and 128 only; the rung and the group
/// split's variants run the rung's kernel at every head_dim.
template <Mode M>
constexpr bool kRungKernel =
    M == Mode::rung || M == Mode::nosplit || M == Mode::fullsplit || M == Mode::o32_delta || M == Mode::unfused_prep ||
    M == Mode::rule_split || M == Mode::late_free || M == Mode::tile_grid || M == Mode::det_linear ||
    M == Mode::o16_delta || M == Mode::direct_dkv || lpt_entry(M);

/// Where D = rowsum(dO * O) comes from: the rung's rule (delta_policy.h: the 16-bit O on rows of at
/// most 4096 keys, the exact pass on rows of more than 16384, the fp32 O between), or, for
/// o32-delta, always the O it is given (its fp32 copy when given, else the 16-bit O). Rung 12's
/// ring needs that one: each ring step is a chunk of a row's keys under the row's global LSE, and
/// only the global O gives D; the exact pass would sum the chunk's P * dP alone. o16-delta: the
/// 16-bit O always (the ablation that measures the rule's choice on longer rows).
constexpr bwd::DeltaPolicy delta_policy(Mode m) {
  return m == Mode::o32_delta ? bwd::DeltaPolicy::o32 : m == Mode::o16_delta ? bwd::DeltaPolicy::o16 : bwd::DeltaPolicy::rung;
}

/// The pre- and post-passes (launch_bwd.cuh): the rung's one pre-pass and 16-byte convert, or
/// unfused-prep's memset, warp-per-row statistics and narrow convert (README, "Before and after
/// the kernel").
#if FL_HOPPER_SM90A
constexpr hopper14::Prep prep_of(Mode m) {
  return m == Mode::unfused_prep ? hopper14::Prep::unfused : hopper14::kRungPrep;
}
#endif
/// The GQA group split (workspace.h, kv_splits): the rung's is `modeled` (a causal group split as the
/// schedule model finds cheapest, at least rung 11's rule; README, "The group split"), and so is
/// every ablation of one other idea; nosplit and fullsplit are the extremes, rule-split rung 11's
/// rule alone (the rung's split up to commit `6bcb0cd`). o32-delta, the ring's (rung 12), keeps
/// rung 11's rule: its steps' chunks are not measured with the model.
constexpr bwd::GroupSplit group_split(Mode m) {
  return m == Mode::nosplit                                  ? bwd::GroupSplit::none
         : m == Mode::fullsplit                              ? bwd::GroupSplit::full
         : m == Mode::rule_split || m == Mode::o32_delta     ? bwd::GroupSplit::balanced
                                                             : bwd::GroupSplit::modeled;
}

/// dQ on e4m3 (traits.h's FP8_DQ): dS scaled per query row (fp8-dq) or per tile (fp8-dq-tile).
constexpr int fp8_dq_of(Mode m) {
  return m == Mode::fp8_dq ? hopper14::kFp8DqRow : m == Mode::fp8_dq_tile ? hopper14::kFp8DqTile : hopper14::kFp8DqOff;
}

/// The tiles of @p M at head_dim @p D (traits.h). ss-dkv at d = 64 keeps one dS^T tile: P^T's
/// own tile would not fit beside two. d = 256 has the rung's tiles only (the ablations are
/// measured at d = 64 and 128).
template <Mode M, int D>
struct ModeTiles {
  static constexpr int kBlockM = hopper14::kRungBlockM<D>;
  using type = hopper14::BwdTiles<D, kBlockM, M == Mode::one_stage ? 1 : 2, M != Mode::no_ws,
                                  (M == Mode::ss_dkv && D == 64) ? 1 : 2, M == Mode::ss_dkv, fp8_dq_of(M),
                                  M == Mode::persistent>;
};
template <Mode M>
struct ModeTiles<M, 256> {
  static_assert(kRungKernel<M>, "the kernel's ablations are built at d = 64 and 128");
  using type = hopper14::RungTiles<256>;
};
// The persistent grid's tiles are the ones rung 16's masked backward takes (traits.h).
static_assert(std::is_same<ModeTiles<Mode::persistent, 64>::type, hopper14::RungPersistentTiles<64>>::value &&
                  std::is_same<ModeTiles<Mode::persistent, 128>::type, hopper14::RungPersistentTiles<128>>::value,
              "the persistent variant runs RungPersistentTiles");

/// The head_dims of @p M: 64, 128, and 256 where it runs the rung's kernel.
template <Mode M>
std::vector<int> mode_head_dims() {
  if (kRungKernel<M>) return {64, 128, 256};
  return {64, 128};
}

/// Calls f(TypeTag<M's tiles>{}) for the runtime head_dim (one of mode_head_dims<M>()).
template <Mode M, class F>
decltype(auto) with_tiles(int head_dim, F&& f) {
  if constexpr (kRungKernel<M>)
    if (head_dim == 256) return f(TypeTag<typename ModeTiles<M, 256>::type>{});
  if (head_dim == 64) return f(TypeTag<typename ModeTiles<M, 64>::type>{});
  return f(TypeTag<typename ModeTiles<M, 128>::type>{});
}

/// Calls f(TypeTag<tiles>{}) with the tiles @p M runs for a problem of @p head_dim and @p seqlen_q
/// (the longest sequence's queries): with_tiles' for every entry but the rung (and det-linear and
/// direct-dkv, ablations of its deterministic order and of its dK, dV stores), which takes the
/// persistent grid's tiles where traits.h's
/// rung_grid_persistent says (README, "A persistent grid").
template <Mode M, class F>
decltype(auto) with_grid(int head_dim, int seqlen_q, F&& f) {
  if constexpr (M == Mode::rung || M == Mode::det_linear || M == Mode::direct_dkv || lpt_entry(M))
    if (hopper14::rung_grid_persistent(head_dim, seqlen_q)) return with_tiles<Mode::persistent>(head_dim, f);
  return with_tiles<M>(head_dim, f);
}

const Rung& forward_rung() {
  const Rung* f = registry().find(kForwardRung);
  if (!f) throw std::runtime_error("rung 14 runs rung 15's forward pass, which is not built");
  return *f;
}

#if FL_HOPPER_SM90A
/// Entry @p M's backward pass: launch_bwd.cuh's, with rung 14's mask (none or causal).
template <Mode M, class T, class Cfg>
void launch_backward(const AttnBwdParams& P, cudaStream_t stream) {
  const hopper14::CausalOrNone mods{P.fwd.causal != 0};
  hopper14::launch_backward<T, Cfg, M != Mode::atomic_dq>(P, delta_policy(M), group_split(M), mods, stream,
                                                         prep_of(M), M != Mode::late_free, M != Mode::det_linear,
                                                         M != Mode::direct_dkv, lpt_section(M, P.fwd.seqlen_q, P.fwd.head_dim));
}

template <Mode M, class T, class Cfg>
std::vector<KernelInfo> kernel_list() {
  constexpr int D = Cfg::kHeadDim;
  const std::string tile = "d=" + std::to_string(D) + ", " + std::to_string(Cfg::kBlockN) + " keys x " +
                           std::to_string(Cfg::kBlockM) + " queries, " +
                           std::to_string(Cfg::kStages) + (Cfg::kStages == 1 ? " stage" : " stages") +
                           (Cfg::kWarpSpecialized ? ", producer + dQ writer + 2 math warpgroups" : ", 2 math warpgroups") +
                           (Cfg::kDkvT ? ", dK^T and dV^T (head_dim as M)" : "") +
                           (Cfg::kPSmem ? ", P and dS from shared memory" : "") +
                           (Cfg::kFp8Dq ? (Cfg::kDsRowScale ? ", dQ = dS K on e4m3 (dS per row)" : ", dQ = dS K on e4m3 (dS per tile)") : "") +
                           (Cfg::kPersistent ? ", one block per SM walking the K/V blocks" : "");
  constexpr bool kWriter = M != Mode::atomic_dq;
  return {hopper14::prep_kernel_info<T, D>(prep_of(M)),
          {"bwd_hopper<" + tile + (kWriter ? ", dQ by bulk reduce-add>" : ", dQ by atomics>"),
           hopper14::prepared_kernel<T, Cfg, kWriter>(), Cfg::kThreads, static_cast<size_t>(Cfg::kSmemBytes)},
          hopper14::convert_kernel_info<T, Cfg>(prep_of(M))};
}
#endif

template <Mode M>
Rung make_rung(const char* variant, const char* summary) {
  Rung r;
  r.number = 14;
  r.name = "hopper_backward";
  r.variant = variant;
  r.summary = summary;
  r.head_dims = mode_head_dims<M>();
  r.peak = Peak::tensor_16bit;
  r.min_cc = 90;
  r.forward_rung = kForwardRung;
  r.builds_on = {11, 10};
  r.writes_o_fp32 = true;  // `launch` is rung 15's forward, which writes the fp32 O asked for
  r.fp8_dq = fp8_dq_of(M) != hopper14::kFp8DqOff;
  r.varlen = true;         // packed batches (cu_seqlens): per-sequence K/V blocks, padded statistics
  r.in_tour = false;
  if (M == Mode::rung)
    r.baselines = {Baseline::on(11, "the backward pass it moves to Hopper: the same algorithm on mma.sync")};
  r.supports = [](const Problem& p, const DeviceInfo& d) -> std::string {
    const std::string hopper = hopper_supports(d, FL_HOPPER_SM90A != 0);
    if (!hopper.empty()) return hopper;
    if (!registry().find(kForwardRung)) return "needs rung 15 (its forward pass) in the build";
    if (!forward_rung().not_implemented.empty()) return "needs rung 15's forward pass, which is not implemented here";
    if (!registry().find(11)) return "needs rung 11 in the build (its exact D pass)";
    if (p.head_dim != 64 && p.head_dim != 128 && (!kRungKernel<M> || p.head_dim != 256))
      return kRungKernel<M>         ? "head_dim must be 64, 128 or 256"
             : fp8_dq_of(M) != hopper14::kFp8DqOff
                 ? "head_dim must be 64 or 128 (fp8-dq: 128 keys, one 128-byte e4m3 row, per block)"
                                 : "head_dim must be 64 or 128 (the ablations)";
    const bool exact_pass = bwd::delta_source(delta_policy(M), p.seqlen_k, true) == bwd::DeltaSource::exact;
    if (p.head_dim == 256 && exact_pass)
      return "head_dim 256: rows of more than 16384 keys need rung 11's exact D pass, built for head_dim 64 and 128";
    if (p.varlen() && exact_pass)
      return "a packed batch with a sequence of more than 16384 keys: rung 11's exact D pass takes dense batches only";
    const int smem =
        with_grid<M>(p.head_dim, p.seqlen_q, [](auto tiles) { return decltype(tiles)::type::kSmemBytes; });
    const std::string limits = tile_limits(p, d, smem);
    if (!limits.empty()) return limits;
    if (int64_t(p.heads_kv) * hopper14::kv_splits(p, group_split(M)) > 65535)
      return "heads_kv x group slices beyond the grid's y limit";
    return forward_rung().supports ? forward_rung().supports(p, d) : "";
  };
  r.launch = [](const AttnParams& p, cudaStream_t s) { forward_rung().launch(p, s); };
  r.bwd_workspace_bytes = [](const Problem& p, bool deterministic) {
    return hopper14::workspace_bytes(p, deterministic, delta_policy(M), group_split(M));
  };
  r.bwd_reads_o_fp32 = [](const Problem& p) { return bwd::reads_o32(delta_policy(M), p.seqlen_k); };
  r.launch_bwd = [](const AttnBwdParams& P, cudaStream_t s) {
#if FL_HOPPER_SM90A
    FL_DTYPE_SWITCH(static_cast<DType>(P.fwd.dtype), T, [&] {
      with_grid<M>(P.fwd.head_dim, P.fwd.seqlen_q,
                   [&](auto tiles) { launch_backward<M, T, typename decltype(tiles)::type>(P, s); });
    });
#else
    (void)P;
    (void)s;
    throw std::runtime_error("rung 14 was built without sm_90a");
#endif
  };
  r.kernels = [](const Problem& p) -> std::vector<KernelInfo> {
#if FL_HOPPER_SM90A
    return FL_DTYPE_SWITCH(p.dtype, T, [&] {
      return with_grid<M>(p.head_dim, p.seqlen_q,
                          [](auto tiles) { return kernel_list<M, T, typename decltype(tiles)::type>(); });
    });
#else
    (void)p;
    return {};
#endif
  };
  r.notes = [](const Problem& p) {
    std::vector<std::string> notes{
        "backward pass after rung 15's forward (O and LSE); FLOPs by FlashAttention's convention: 2.5 x the forward's",
        std::string("D from ") + bwd::delta_source_name(bwd::delta_source(delta_policy(M), p.seqlen_k, true)) +
            " (rung 11's delta_policy.h)"};
    const bool persistent = with_grid<M>(p.head_dim, p.seqlen_q, [](auto t) { return decltype(t)::type::kPersistent; });
    const int section = lpt_section(M, p.seqlen_q, p.head_dim);
    const bool warp_roles =  // the order is the warp-specialized kernel's (launch_bwd.cuh)
        with_grid<M>(p.head_dim, p.seqlen_q, [](auto t) { return decltype(t)::type::kWarpSpecialized; });
    // launch_bwd.cuh's rule, the deterministic mode aside (the note says "unless deterministic")
    const bool lpt = hopper14::lpt_order(section, persistent, warp_roles, false, p.causal, false);
    notes.push_back(std::string(persistent ? "grid: persistent, one block per SM walking the K/V blocks"
                                           : "grid: one block per K/V block") +
                    (lpt ? ", longest first unless deterministic (K/V block 0 of every group, then 1, ...), " +
                               (M == Mode::lpt_grid ? std::string("one section")
                                                    : "in sections of " + std::to_string(section) + " groups")
                         : ""));
    if (p.heads_kv > 0 && p.heads_q > p.heads_kv) {
      notes.push_back(bwd::group_split_note(p.heads_q / p.heads_kv, hopper14::kv_splits(p, group_split(M))));
    }
    return notes;
  };
  return r;
}

}  // namespace

void register_rung_14(Registry& reg) {
  reg.add(make_rung<Mode::rung>(
      "", "FA3 backward: S^T, dP^T with keys as wgmma's M, P^T and dS^T as register A operands of dV, dK, "
          "dQ = dS K from shared memory; TMA producer warp, dQ writer warp (bulk reduce-add), setmaxnreg"));
  reg.add(make_rung<Mode::no_ws>("no-ws", "ablation: no producer warpgroup (a math thread issues the loads and the "
                                          "dQ bulk adds itself)"));
  reg.add(make_rung<Mode::atomic_dq>("atomic-dq", "ablation: dQ by fp32 atomics from the math warps (as rung 11), no "
                                                  "writer warp (the deterministic mode still runs the writer)"));
  reg.add(make_rung<Mode::ss_dkv>("ss-dkv", "ablation: P^T and dS^T through shared memory for dV and dK (SS wgmma "
                                            "instead of RS)"));
  reg.add(make_rung<Mode::one_stage>("one-stage", "ablation: one stage of Q, dO (the next block's loads wait for "
                                                  "this one's GEMMs)"));
  reg.add(make_rung<Mode::nosplit>("nosplit", "ablation: a GQA group never split (one block per KV head walks all "
                                              "its query heads; dK, dV written directly)"));
  reg.add(make_rung<Mode::fullsplit>("fullsplit", "ablation: a GQA group split into one block per query head "
                                                  "(fp32 partial dK, dV added by rung 11's convert kernel)"));
  reg.add(make_rung<Mode::unfused_prep>("unfused-prep", "ablation: the passes around the kernel unfused (a memset of "
                                                        "the dQ accumulator, one warp per row for D with 4-byte loads, "
                                                        "a dQ convert of 8-byte loads and 4-byte stores)"));
  reg.add(make_rung<Mode::rule_split>("rule-split", "ablation: rung 11's rule for the GQA group split (slices only "
                                                    "when the grid would have fewer than 256 blocks), without the "
                                                    "schedule model's causal split"));
  reg.add(make_rung<Mode::late_free>("late-free", "ablation: deterministic, the dQ tile freed for the math warps only "
                                                  "once its add has landed (not once the copy engine has read it)"));
  reg.add(make_rung<Mode::fp8_dq>("fp8-dq", "rung 18's first GEMM: dQ = dS K on e4m3 wgmma (K_j^T in e4m3 once per "
                                            "block with a scale per block, dS in e4m3 with a scale per query row); "
                                            "dK, dV 16-bit"));
  reg.add(make_rung<Mode::fp8_dq_tile>("fp8-dq-tile", "ablation of fp8-dq: one scale per dS tile (64 or 128 queries x "
                                                      "128 keys) instead of one per query row (README, \"dQ in "
                                                      "e4m3\")"));
  reg.add(make_rung<Mode::persistent>("persistent", "ablation: the persistent grid at every length (the rung's on "
                                                    "rows of at most 4096 queries at d = 64, 1024 at d = 128): one "
                                                    "block per SM takes K/V blocks from a counter; the next block's "
                                                    "K_j, V_j and first Q_i, dO_i load while the math warps end the "
                                                    "last (README, \"A persistent grid\")"));
  reg.add(make_rung<Mode::tile_grid>("tile-grid", "ablation: one block per K/V block at every length (the rung's "
                                                  "grid is persistent on rows of at most 4096 queries at d = 64, "
                                                  "1024 at d = 128: README, \"A persistent grid\")"));
  reg.add(make_rung<Mode::det_linear>("det-linear", "ablation: deterministic, every K/V block's walk from query "
                                                    "block 0 and the adds in K/V block order when not causal (the "
                                                    "rung rotates each block's walk: README, \"Deterministic "
                                                    "mode\")"));
  reg.add(make_rung<Mode::o16_delta>("o16-delta", "ablation: D = rowsum(dO * O) from the 16-bit O at every length, as "
                                                  "FlashAttention-2 and 3 (the rung: on rows of at most 4096 keys; "
                                                  "rung 11's README, \"D from the 16-bit O on short rows\")"));
  reg.add(make_rung<Mode::direct_dkv>("direct-dkv", "ablation: each math thread stores its own dK, dV from its "
                                                    "accumulators (4-byte stores; the rung stages a whole K/V block's "
                                                    "in shared memory and writes it by TMA: README, \"dK and dV by "
                                                    "TMA\")"));
  reg.add(make_rung<Mode::x_order>("x-order", "ablation: under a causal mask, the K/V block fastest in the grid's "
                                             "order, so a group's blocks go out together and the last groups' "
                                             "longest blocks start last (the rung: longest first in sections of 8 "
                                             "groups where their rows fit L2; README, \"Longest first\")"));
  reg.add(make_rung<Mode::lpt_grid>("lpt-grid", "ablation of the section's size: under a causal mask (not "
                                               "deterministic), on the grid of one block per K/V block, longest "
                                               "first over all the groups at once at every length (MHA's L2 reuse "
                                               "lost: README, \"Longest first\")"));
  reg.add(make_rung<Mode::lpt_s16>("lpt-s16", "ablation of the section's size: the rung's order in sections of 16 "
                                             "groups (KV heads x slices x batch) at every length"));
  reg.add(make_rung<Mode::lpt_s32>("lpt-s32", "ablation of the section's size: sections of 32 groups at every length"));
  reg.add(make_rung<Mode::o32_delta>("o32-delta", "D = rowsum(dO * O) from the O it is given (fp32 when given) at "
                                                  "every length, never the exact pass: what a ring step needs "
                                                  "(rung 12: a chunk of keys under the row's global LSE)"));
}

}  // namespace fl
