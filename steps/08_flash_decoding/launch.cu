/// @file steps/08_flash_decoding/launch.cu
/// @brief Rung 08's registration: the default ring depth for head_dim 64 and
/// 128, `supports`, the workspace, the kernels and the notes of a run.
#include <cstdio>
#include <string>
#include <type_traits>
#include <vector>

#include "flashladder/registry.h"
#include "flashladder/report.h"
#include "launch_template.cuh"

namespace fl {
namespace {

using namespace decode;

/// Runs @p f with std::integral_constant<int, D> for the head_dims rung 08 is
/// built for. (FL_HEADDIM_SWITCH would also instantiate 32 and 256: its cases
/// are not templates, so an `if constexpr` inside them does not stop that.)
template <class F>
decltype(auto) with_head_dim(int d, F&& f) {
  if constexpr (head_dim_built(64))
    if (d == 64) return f(std::integral_constant<int, 64>{});
  if constexpr (head_dim_built(128))
    if (d == 128) return f(std::integral_constant<int, 128>{});
  throw std::invalid_argument("rung 08: head_dim " + std::to_string(d) +
                              " not supported or not built (64, 128)");
}

/// The rung's supports (KV_BYTES 2), and its FP8 cache's (1: e4m3 K and V).
template <int KV_BYTES>
std::string supports_08(const Problem& p, const DeviceInfo& d) {
  if (p.head_dim != 64 && p.head_dim != 128) return "head_dim must be 64 or 128";
  if (!head_dim_built(p.head_dim))
    return "head_dim " + std::to_string(p.head_dim) + " not built (configured with FL_HEAD_DIM)";
  return with_head_dim(p.head_dim, [&](auto dim) {
    return check_decode_limits<DecodeTraits<decltype(dim)::value, 3, KV_BYTES>>(p, d);
  });
}

/// The FP8 cache's traits at head_dim D: the default rings, e4m3 K and V.
template <int D>
using Fp8KvTraits = DecodeTraits<D, 3, 1>;

template <bool FP8_KV>
std::vector<KernelInfo> kernels_08(const Problem& p) {
  const DecodePlan plan = plan_for(p);
  return FL_DTYPE_SWITCH(p.dtype, T, [&] {
    return with_head_dim(p.head_dim, [&](auto dim) {
      constexpr int D = decltype(dim)::value;
      using Tr = std::conditional_t<FP8_KV, Fp8KvTraits<D>, DecodeTraits<D>>;
      std::vector<KernelInfo> k;
      const std::string name = std::string("split_kv_attention<d=") + std::to_string(D) +
                               (FP8_KV ? ", e4m3 K/V" : "") + (p.page_size ? ", paged>" : ">");
      k.push_back({name,
                   p.page_size ? prepared_split_kernel<T, Tr, true>()
                               : prepared_split_kernel<T, Tr, false>(),
                   Tr::kThreads, Tr::kSmemBytes});
      if (plan.num_splits > 1)
        k.push_back({"combine_splits", reinterpret_cast<const void*>(&combine_splits<T, D>),
                     CombineTraits<D>::kThreads, 0});
      return k;
    });
  });
}

std::vector<std::string> notes_08(const Problem& p) {
  const int sms = sm_count();
  const DecodePlan plan = plan_for(p);
  const long long ctas = plan.work_items * plan.num_splits;
  const long long slots = static_cast<long long>(sms) * SplitPolicy{}.ctas_per_sm;
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "split-KV: %d split(s) of %d keys (%s); %d rows per (batch, KV head) = group %d x "
                "seqlen_q %d, in %d row tile(s) of %d (one MMA tile)",
                plan.num_splits, plan.split_len, plan.from_heuristic ? "heuristic" : "--splits",
                plan.rows_total, p.group(), p.seqlen_q, plan.row_tiles, plan.rows_per_cta);
  std::vector<std::string> out{buf};
  std::snprintf(buf, sizeof buf,
                "grid: %lld CTAs = %lld (batch x heads_kv x row tiles) x %d splits; %.2f waves "
                "of %lld (one CTA per SM), wave efficiency %.2f",
                ctas, plan.work_items, plan.num_splits,
                static_cast<double>(ctas) / static_cast<double>(slots), slots,
                wave_efficiency(ctas, slots));
  out.push_back(buf);
  if (plan.num_splits > 1)
    out.push_back(
        "partial O + LSE in HBM: " + format_bytes(static_cast<double>(decode_workspace_bytes(p))) +
        " (written by kernel 1, read by combine_splits)");
  if (plan.row_tiles > 1)
    out.push_back("more rows than one CTA holds: each of the " + std::to_string(plan.row_tiles) +
                  " row tiles re-reads its split of K/V (mostly from L2)");
  return out;
}

/// The default kernel with kernel 2 launched the ordinary way (head_dim 128,
/// when the build has it; see variants.cu for why this is a template).
template <int D>
void add_no_pdl_variant(Registry& reg) {
  if constexpr (D == 128 && head_dim_built(D))
    reg.add(make_decode_variant<DecodeTraits<D>>(
        "no-pdl", "default rings, kernel 2 launched without PDL", false));
}

}  // namespace

void register_rung_08_variants(Registry& reg);

void register_rung_08(Registry& reg) {
  Rung r;
  r.number = 8;
  r.name = "flash_decoding";
  r.summary =
      "Flash-Decoding: split-KV CTAs stream K/V once per GQA group, a log-sum-exp combine "
      "merges the splits; paged KV cache";
  r.peak = Peak::memory;
  r.head_dims = {64, 128};
  r.paged_kv = true;
  r.seqused_k = true;  // a KV cache of per-sequence lengths (kernel.cuh: len_k)
  r.decode = true;
  r.baselines = {Baseline::fastest(
      "the fastest earlier rung on the same decode shape (which one depends on the shape)")};
  r.builds_on = {5};  // mma.sync m16n8k16, ldmatrix and cp.async, from rung 05
  r.new_design = "split-KV decode: a grid over the keys and a log-sum-exp combine";
  r.min_cc = 80;  // cp.async, ldmatrix, mma.sync
  r.supports = supports_08<2>;
  r.workspace_bytes = decode_workspace_bytes;
  r.split_counters = decode_split_counters;
  r.grid_ctas = [](const Problem& p, const DeviceInfo& d) {
    const DecodePlan plan = make_decode_plan(p.batch, p.heads_kv, p.group(), p.seqlen_q, p.seqlen_k,
                                             p.num_splits, d.sm_count);
    return plan.work_items * plan.num_splits;
  };
  r.launch = [](const AttnParams& p, cudaStream_t s) {
    check_alignment(p);
    FL_DTYPE_SWITCH(static_cast<DType>(p.dtype), T, [&] {
      with_head_dim(p.head_dim, [&](auto dim) {
        using Tr = DecodeTraits<decltype(dim)::value>;
        launch_decode<T, Tr>(p, plan_for(p), s, /*pdl=*/true);
      });
    });
  };
  r.kernels = kernels_08<false>;
  r.notes = notes_08;
  // The FP8 KV cache: the same kernel reading e4m3 K and V (half the bytes per key) with a
  // descale per (batch, KV head), each register ldmatrix delivers widened to fp16 on its way into
  // the MMAs (kernel.cuh: fp8_qk, fp8_pv). Registered here, beside the 16-bit kernel, because
  // the two launch the same combine kernel and split plan.
  Rung f = r;
  f.variant = "fp8-kv";
  f.summary = "an e4m3 KV cache, a descale per (batch, KV head): half the bytes per key, widened to fp16 in "
              "registers on the way into the same MMAs";
  f.baselines.clear();
  f.builds_on.clear();
  f.new_design.clear();
  f.in_tour = false;
  f.min_cc = 89;  // cvt e4m3x2 -> f16x2 in hardware (Ada, Hopper)
  f.fp8_inputs = true;
  f.fp8_kv_cache = true;
  f.supports = supports_08<1>;
  f.launch = [](const AttnParams& p, cudaStream_t s) {
    check_alignment(p, 1);
    if (p.k_descale == nullptr || p.v_descale == nullptr)
      throw std::invalid_argument("rung 08 [fp8-kv]: an e4m3 cache needs its k_descale and v_descale");
    FL_DTYPE_SWITCH(static_cast<DType>(p.dtype), T, [&] {
      with_head_dim(p.head_dim, [&](auto dim) {
        launch_decode<T, Fp8KvTraits<decltype(dim)::value>>(p, plan_for(p), s, /*pdl=*/true);
      });
    });
  };
  f.kernels = kernels_08<true>;
  f.notes = [](const Problem& p) {
    std::vector<std::string> out = notes_08(p);
    out.push_back("K and V e4m3 (1 byte per element) with a descale per (batch, KV head), made by the harness "
                  "(fp8_device.h, the cache mode); Q and O 16-bit");
    return out;
  };
  reg.add(std::move(r));
  reg.add(std::move(f));
  // Ablations: kernel 2 without PDL (here: this file owns the default kernel),
  // and the ring depths (variants.cu).
  add_no_pdl_variant<128>(reg);
  register_rung_08_variants(reg);
}

}  // namespace fl
