/// @file steps/04_fa2/launch.cu
/// @brief Rung 04's registration: the rung and its ablation variants,
/// `supports`, workspace and report notes. Grid shapes: launch_template.cuh;
/// the rung's kernel: kernel.cuh; the variants' kernel: ablations.cuh.
#include <algorithm>
#include <string>
#include <vector>

#include "ablations.cuh"  // workspace_bytes (K/V-outer variants)
#include "flashladder/registry.h"
#include "flashladder/report.h"
#include "flashladder/static_switch.h"
#include "kernel.cuh"
#include "variants.h"

namespace fl {
namespace {

using fa2::Fa2Traits;
using fa2::Variant;

/// Rung 04 is built for head_dim 32, 64 and 128; FL_HEADDIM_SWITCH also has a
/// 256 case, which this guard keeps from being instantiated.
constexpr bool built_04(int d) {
  return d <= 128;
}

/// Tile shape (BLOCK_M, BLOCK_N) and CTA size for a head_dim, on the host.
struct TileShape {
  int block_m = 1, block_n = 1, threads = 1;
};
TileShape tile_shape(int head_dim) {
  return FL_HEADDIM_SWITCH(head_dim, D, [&]() -> TileShape {
    if constexpr (built_04(D))
      return {Fa2Traits<D>::kBlockM, Fa2Traits<D>::kBlockN, Fa2Traits<D>::kThreads};
    return {};
  });
}

/// Why rung 04 cannot run @p p on @p d, or "".
std::string supports_04(const Problem& p, const DeviceInfo& d) {
  if (p.heads_q > 65535 || p.batch > 65535)
    return "heads_q and batch must be <= 65535 (grid y and z)";
  const size_t smem = FL_HEADDIM_SWITCH(p.head_dim, D, [&]() -> size_t {
    if constexpr (built_04(D)) return fa2::fa2_smem_bytes<D>();
    return 0;
  });
  if (d.smem_per_block_optin > 0 && smem > static_cast<size_t>(d.smem_per_block_optin))
    return "needs " + std::to_string(smem) + " bytes of shared memory per block, the GPU allows " +
           std::to_string(d.smem_per_block_optin);
  return "";
}

/// Report lines: the grid, and (causal) how many K/V tiles the skip saves.
std::vector<std::string> notes_04(const Problem& p, const fa2::VariantDesc& v) {
  const TileShape t = tile_shape(p.head_dim);
  const long long q_tiles = (p.seqlen_q + t.block_m - 1) / t.block_m;
  const long long kv_tiles = (p.seqlen_k + t.block_n - 1) / t.block_n;
  const long long ctas =
      static_cast<long long>(p.batch) * p.heads_q * (v.whole_head_per_cta ? 1 : q_tiles);
  std::vector<std::string> out{
      "grid: " + std::to_string(ctas) + " CTAs of " + std::to_string(t.threads) + " threads (" +
      (v.whole_head_per_cta ? "batch x heads" : "batch x heads x Q tiles") + "), tiles " +
      std::to_string(t.block_m) + " x " + std::to_string(t.block_n)};
  if (p.causal) {
    // Same rule as visible_kv_tiles() in the kernel.
    long long visited = 0;
    for (long long i = 0; i < q_tiles; ++i) {
      const long long last_key =
          std::min<long long>((i + 1) * t.block_m, p.seqlen_q) - 1 + p.causal_offset();
      visited += last_key < 0 ? 0 : std::min<long long>(kv_tiles, last_key / t.block_n + 1);
    }
    out.push_back("causal: " + std::to_string(visited) + " of " +
                  std::to_string(q_tiles * kv_tiles) +
                  " (Q tile, K/V tile) pairs computed per head; the rest are skipped");
  }
  if (v.uses_workspace) {
    const double ws =
        static_cast<double>(fa2::workspace_bytes(p.batch, p.heads_q, p.seqlen_q, p.head_dim));
    out.push_back("O/m/l round trip through HBM: fp32 scratch of " + format_bytes(ws) +
                  ", read and written once per K/V tile");
  }
  return out;
}

}  // namespace

void register_rung_04(Registry& reg) {
  for (const fa2::VariantDesc& v : fa2::kVariants) {
    Rung r;
    r.number = 4;
    r.name = "fa2";
    r.variant = v.name;
    r.summary = v.summary;
    r.peak = Peak::fp32_fma;
    r.head_dims = {32, 64, 128};
    r.in_tour = (v.id == Variant::fa2);
    if (v.id == Variant::fa2)
      r.baselines = {Baseline::on(3, "the rung it improves on: FA1's algorithm, FA2's schedule")};
    else  // the entry one change away (the attribution in the README pairs them the same way)
      r.baselines = {Baseline::on(4, v.why, v.compared_with)};
    r.supports = supports_04;
    if (v.uses_workspace)
      r.workspace_bytes = [](const Problem& p) {
        return fa2::workspace_bytes(p.batch, p.heads_q, p.seqlen_q, p.head_dim);
      };
    const Variant id = v.id;
    r.launch = [id](const AttnParams& p, cudaStream_t s) {
      FL_HEADDIM_SWITCH(p.head_dim, D, [&] {
        if constexpr (built_04(D)) fa2::launch_fa2<D>(p, s, id);
      });
    };
    r.kernels = [id](const Problem& p) {
      return FL_HEADDIM_SWITCH(p.head_dim, D, [&] {
        std::vector<KernelInfo> k;
        if constexpr (built_04(D)) k = fa2::fa2_kernels<D>(p.dtype, id);
        return k;
      });
    };
    r.notes = [v](const Problem& p) { return notes_04(p, v); };
    reg.add(std::move(r));
  }
}

}  // namespace fl
