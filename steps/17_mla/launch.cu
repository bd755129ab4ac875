/// @file steps/17_mla/launch.cu
/// @brief Rung 17's registration: what it takes (MLA's decode shape on a contiguous or paged
/// latent cache), its split plan, workspace, kernels and the notes of a run.
#include <cstdio>
#include <string>
#include <vector>

#include "flashladder/cuda_check.h"
#include "flashladder/device.h"
#include "flashladder/registry.h"
#include "flashladder/report.h"
#include "flashladder/static_switch.h"
#include "flashladder/tma.h"
#include "mla_plan.h"
#if FL_HOPPER_SM90A
#include "kernel.cuh"
#endif

namespace fl {
namespace {

/// Multiprocessors of the current device (device.h's table; an H100's 132 without a device, as
/// rung 08 plans): the split plan's wave.
int sms() {
  const int n = device_sm_count();
  return n > 0 ? n : 132;
}

mla::MlaPlan plan_for(const Problem& p, int sm_count) {
  return mla::make_mla_plan(p.batch, p.heads_q, p.seqlen_q, p.seqlen_k, p.num_splits, sm_count);
}

std::string supports_17(const Problem& p, const DeviceInfo& d) {
  const std::string hopper = hopper_supports(d, FL_HOPPER_SM90A != 0);
  if (!hopper.empty()) return hopper;
  if (p.head_dim != mla::kHeadDim || p.dv() != mla::kHeadDimV || !p.v_in_k || p.heads_kv != 1)
    return "rung 17 takes MLA's latent cache only: --dim 576 --dim-v 512 --v-in-k 1 --kv-heads 1";
  if (!dtype_built(p.dtype)) return "dtype not built (configured with FL_DTYPE)";
  if (p.page_size > 0 && p.page_size % mla::kBlockN != 0)
    return "--page-size must be a multiple of 64 (one TMA box of 64 keys per block), got " +
           std::to_string(p.page_size);
  if (!p.seqstart_k.empty()) return "a left-padded cache (seqstart_k) is not supported by rung 17";
  if (p.batch > 65535) return "--batch must be at most 65535 (the grid's z)";
  if (static_cast<long long>(p.seqlen_q) * p.heads_q > (1 << 24)) return "seqlen_q x heads above 2^24 rows";
  return "";
}

size_t workspace_17(const Problem& p) {
  return mla::mla_workspace_floats(plan_for(p, sms()), p.batch, p.heads_q, p.seqlen_q) * sizeof(float);
}

std::vector<std::string> notes_17(const Problem& p) {
  const mla::MlaPlan m = plan_for(p, sms());
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "rows per sequence: seqlen_q %d x heads %d = %d, in %d tile(s) of 64; split-KV: %d split(s) of %d "
                "keys (%s); grid %lld CTAs on %d SMs",
                p.seqlen_q, p.heads_q, m.rows, m.row_tiles, m.num_splits, m.split_len,
                m.from_heuristic ? "heuristic" : "--splits", m.work_items * m.num_splits, sms());
  std::vector<std::string> out{buf};
  // The two floors (mla_plan.h): the cache's bytes, read once per row tile, against the FLOPs.
  const double keys = static_cast<double>(p.batch) * p.seqlen_k;
  const double bytes = keys * mla::kHeadDim * 2.0;
  const double flops = 2.0 * keys * m.rows * (mla::kHeadDim + mla::kHeadDimV);
  std::snprintf(buf, sizeof buf,
                "floors: %.1f FLOP per cache byte (%d rows x 2 x 1088 / 1152); the cache %.1f MB%s", flops / bytes,
                m.rows, bytes / 1e6,
                m.row_tiles > 1 ? ", read by each row tile (the second from L2 mostly)" : "");
  out.push_back(buf);
  return out;
}

}  // namespace

void register_rung_17(Registry& reg) {
  Rung r;
  r.number = 17;
  r.name = "mla";
  r.summary =
      "multi-head latent attention decode: every head over one 576-dim latent cache row, V its first 512 "
      "columns; heads as the rows of a tile, O split across two warpgroups, pages as TMA boxes";
  r.peak = Peak::tensor_16bit;
  r.head_dims = {mla::kHeadDim};
  r.head_dim_v = true;
  r.paged_kv = true;
  r.seqused_k = true;  // cache_seqlens: kernel.cuh's KeyRange::len_k
  r.decode = true;
  r.min_cc = 90;
  r.builds_on = {8, 10};  // rung 08's split-KV and combine, rung 10's wgmma softmax and TMA
  r.new_design = "MLA: one latent cache for K and V, heads as rows, O split across warpgroups";
  r.baselines = {Baseline::fastest(
      "the earlier rungs stop at head_dim 256, so none runs MLA's cache: the bench compares SDPA on the "
      "decompressed K and V")};
  r.supports = supports_17;
  r.workspace_bytes = workspace_17;
  r.grid_ctas = [](const Problem& p, const DeviceInfo& d) {
    const mla::MlaPlan m = plan_for(p, d.sm_count);
    return m.work_items * m.num_splits;
  };
  r.launch = [](const AttnParams& p, cudaStream_t s) {
#if FL_HOPPER_SM90A
    const mla::MlaPlan plan = mla::make_mla_plan(p.batch, p.heads_q, p.seqlen_q, p.seqlen_k, p.num_splits, sms());
    FL_DTYPE_SWITCH(static_cast<DType>(p.dtype), T, [&] { mla::launch_mla<T>(p, plan, s); });
#else
    (void)p;
    (void)s;
    throw std::runtime_error("rung 17 was built without sm_90a");
#endif
  };
  r.kernels = [](const Problem& p) -> std::vector<KernelInfo> {
#if FL_HOPPER_SM90A
    return FL_DTYPE_SWITCH(p.dtype, T, [&] {
      std::vector<KernelInfo> k{{"mla_decode<64 rows x 64 keys, S warpgroup + 2 O warpgroups, 2 stages>",
                                 mla::prepared_kernel<T>(), mla::kThreads, static_cast<size_t>(mla::kSmemBytes)}};
      if (plan_for(p, sms()).num_splits > 1)
        k.push_back({"combine_splits<512>", reinterpret_cast<const void*>(&decode::combine_splits<T, mla::kHeadDimV>),
                     decode::CombineTraits<mla::kHeadDimV>::kThreads, 0});
      return k;
    });
#else
    (void)p;
    return {};
#endif
  };
  r.notes = notes_17;
  reg.add(std::move(r));
}

}  // namespace fl
