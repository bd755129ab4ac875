/// @file steps/11_backward/launch.cu
/// @brief Rung 11's launches and registration: the backward kernels (kernel.cuh, modes.cuh,
/// exact_delta.cuh) in the workspace workspace.h lays out, behind `launch_bwd`, and rung 06's
/// forward pass behind `launch` (the backward pass needs the forward's O and LSE).
#include <stdint.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "flashladder/cuda_check.h"
#include "flashladder/registry.h"
#include "flashladder/static_switch.h"
#include "exact_delta.cuh"
#include "kernel.cuh"
#include "workspace.h"

namespace fl {
namespace bwd {

/// The backward pass of one entry: the preprocess, the exact D pass when the policy takes it, the
/// main kernel and the convert kernel(s), in @p given's workspace (workspace.h's layout for
/// Cfg::kBlockN).
template <class T, class Cfg>
void launch_backward(const AttnBwdParams& given, GroupSplit how, bool longest_first, DeltaPolicy policy,
                     cudaStream_t stream) {
  constexpr int D = Cfg::kHeadDim;
  const AttnParams& p = given.fwd;
  const Problem shape = problem_of(p);
  const bool deterministic = given.deterministic != 0;
  const int splits = deterministic ? deterministic_splits(shape, Cfg::kBlockN) : 1;
  const int kv_split = kv_splits(shape, Cfg::kBlockN, deterministic, how);
  const DeltaSource delta = delta_source(policy, p.seqlen_k, p.o_fp32 != nullptr);
  AttnBwdParams P = given;
  if (delta == DeltaSource::o16) P.fwd.o_fp32 = nullptr;  // the preprocess reads the 16-bit O
  if (P.workspace_bytes < workspace_bytes(shape, Cfg::kBlockN, deterministic, how, policy))
    throw std::runtime_error("rung 11: workspace smaller than bwd_workspace_bytes");
  if (reinterpret_cast<uintptr_t>(P.workspace) % 8 != 0)  // float2 reductions and stores
    throw std::runtime_error("rung 11: workspace not 8-byte aligned");
  float* d_rowsum = static_cast<float*>(P.workspace);
  float* dq_acc = d_rowsum + dq_acc_offset(shape);
  float* dkv_acc = d_rowsum + dkv_acc_offset(shape, Cfg::kBlockN, deterministic);
  // The exact D pass's accumulator pairs: one (atomics), or one per deterministic split.
  const int n_delta = delta_splits(shape, Cfg::kBlockN, deterministic, policy);
  float* delta_acc = d_rowsum + delta_acc_offset(shape, Cfg::kBlockN, deterministic, how);

  const int64_t rows = int64_t(p.batch) * p.heads_q * p.seqlen_q;
  bwd_preprocess_kernel<T, D><<<static_cast<unsigned>((rows + kPrepWarps - 1) / kPrepWarps),
                                kPrepThreads, 0, stream>>>(P, d_rowsum, dq_acc, splits, delta_acc, n_delta);
  FL_LAUNCH_CHECK("bwd_preprocess_kernel");

  const int n_kv_blocks = kv_block_count(shape, Cfg::kBlockN);
  // Longest blocks first (causal: K/V block j sees the Q blocks from the diagonal on); the
  // deterministic mode's blocks each walk several K/V blocks, so it keeps its order.
  const bool lpt = longest_first && p.causal && !deterministic;
  const dim3 grid = lpt ? dim3(p.heads_kv * kv_split, p.batch, n_kv_blocks)
                        : dim3(deterministic ? splits : n_kv_blocks, p.heads_kv * kv_split, p.batch);
  if (n_delta > 0)  // D = rowsum(P ∘ dP) for the backward's own P (delta_policy.h)
    launch_exact_delta<T, Cfg>(P, d_rowsum, delta_acc, n_delta, grid, kv_split, lpt, /*zero=*/false, stream);
  prepared_main<T, Cfg>();
  bwd_main_kernel<T, Cfg><<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(P, d_rowsum, dq_acc, kv_split,
                                                                             dkv_acc, lpt);
  FL_LAUNCH_CHECK("bwd_main_kernel");

  const int64_t pairs = int64_t(p.batch) * p.seqlen_q * p.heads_q * D / 2;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((pairs + 255) / 256, 65535));
  bwd_convert_kernel<T, D><<<blocks, 256, 0, stream>>>(P, dq_acc, splits);
  FL_LAUNCH_CHECK("bwd_convert_kernel");
  if (kv_split > 1) {
    const int64_t kv_pairs = int64_t(p.batch) * p.seqlen_k * p.heads_kv * D / 2;
    const unsigned kv_blocks = static_cast<unsigned>(std::min<int64_t>((kv_pairs + 255) / 256, 65535));
    bwd_convert_kv_kernel<T, D><<<kv_blocks, 256, 0, stream>>>(P, dkv_acc, kv_split);
    FL_LAUNCH_CHECK("bwd_convert_kv_kernel");
  }
}

}  // namespace bwd

namespace {

constexpr int kForwardRung = 6;

const Rung& forward_rung() {
  const Rung* f = registry().find(kForwardRung);
  if (!f) throw std::runtime_error("rung 11 runs rung 06's forward pass, which is not built");
  return *f;
}

/// Each entry's tiles and GQA split: the rung's (kernel.cuh's BwdTiles, the group split by
/// workspace.h's kv_splits), the same with a staggered Q order, 4 warps on 64 keys, the rung's
/// tiles with the group never split or always split down to one query head per block, the rung
/// launched in K/V-block order under a causal mask (not longest first), and the rung with one
/// source of D always (delta_policy.h): the 16-bit O (FlashAttention-2's preprocess), the
/// forward's fp32 O, or the exact pass.
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
      return bwd::workspace_bytes(p, decltype(cfg)::kBlockN, deterministic, group_split(TILES), delta_policy(TILES));
    });
  };
  r.bwd_reads_o_fp32 = [](const Problem& p) { return bwd::reads_o32(delta_policy(TILES), p.seqlen_k); };
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
            " (delta_policy.h: the 16-bit O for rows of at most " + std::to_string(bwd::kO16DeltaKeys) +
            " keys, the exact pass for more than " + std::to_string(bwd::kExactDeltaKeys) +
            ", else the forward's fp32 O)"};
    if (p.heads_kv > 0 && p.heads_q > p.heads_kv && (p.head_dim == 64 || p.head_dim == 128)) {
      const int split = with_tiles<TILES>(p.head_dim, [&](auto cfg) {
        return bwd::kv_splits(p, decltype(cfg)::kBlockN, false, group_split(TILES));
      });
      notes.push_back(bwd::group_split_note(p.heads_q / p.heads_kv, split));
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
