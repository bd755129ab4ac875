/// @file steps/08_flash_decoding/launch.cu
/// @brief Rung 08's launcher: the split plan, the two grids, `supports`, and
/// registration.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "flashladder/cuda_check.h"
#include "flashladder/registry.h"
#include "flashladder/report.h"
#include "flashladder/static_switch.h"
#include "kernel.cuh"
#include "split_heuristic.h"

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

/// Largest seqlen_q the decode kernel takes (a decode step plus speculative tokens).
constexpr int kMaxSeqlenQ = 16;

/// SMs used by the plan when no device can be queried (an H100 SXM), so
/// workspace_bytes() and the notes still give an answer on a CPU-only host.
constexpr int kFallbackSmCount = 132;

/// Multiprocessors of the current device. The same number feeds the plan in
/// workspace_bytes() and in launch(), so both see the same split count.
int sm_count() {
  int dev = 0, n = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n <= 0) {
    (void)cudaGetLastError();  // clear the (non-sticky) error: no device is not a failure here
    return kFallbackSmCount;
  }
  return n;
}

DecodePlan plan_for(const Problem& p) {
  return make_decode_plan(p.batch, p.heads_kv, p.group(), p.seqlen_q, p.seqlen_k, p.num_splits,
                          sm_count());
}

DecodePlan plan_for(const AttnParams& p) {
  return make_decode_plan(p.batch, p.heads_kv, p.group, p.seqlen_q, p.seqlen_k, p.num_splits,
                          sm_count());
}

/// The split kernel for (T, D) with its shared-memory limit raised once
/// (above 48 KiB dynamic shared memory must be opted into).
template <class T, class Tr>
const void* prepared_split_kernel() {
  static const cudaError_t set =
      cudaFuncSetAttribute(split_kv_attention<T, Tr>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(Tr::kSmemBytes));
  FL_CUDA_CHECK(set);
  return reinterpret_cast<const void*>(&split_kv_attention<T, Tr>);
}

/// 16-byte loads need 16-byte aligned rows: pointers and strides are checked
/// here because supports() only sees the Problem, not the tensors.
void check_alignment(const AttnParams& p) {
  auto aligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
  const int64_t strides[] = {p.q_batch_stride, p.q_row_stride, p.q_head_stride,
                             p.k_batch_stride, p.k_row_stride, p.k_head_stride,
                             p.v_batch_stride, p.v_row_stride, p.v_head_stride};
  bool ok = aligned(p.q) && aligned(p.k) && aligned(p.v);
  for (int64_t s : strides) ok = ok && s % 8 == 0;
  if (!ok)
    throw std::invalid_argument(
        "rung 08: Q/K/V pointers must be 16-byte aligned and their strides multiples of 8 "
        "elements (16-byte vector loads)");
}

template <class T, int D>
void launch_decode(const AttnParams& p, const DecodePlan& plan, cudaStream_t stream) {
  using Tr = DecodeTraits<D>;
  SplitArgs a{plan.rows_total, plan.num_splits, plan.split_len, nullptr, nullptr};
  if (plan.num_splits > 1) {
    const size_t need = workspace_bytes(plan, p.batch, p.heads_q, p.seqlen_q, D);
    if (p.workspace == nullptr || p.workspace_bytes < need)
      throw std::invalid_argument("rung 08: workspace of " + std::to_string(p.workspace_bytes) +
                                  " bytes, the split plan needs " + std::to_string(need));
    a.o_part = static_cast<float*>(p.workspace);
    a.lse_part = a.o_part + partial_o_elems(plan, p.batch, p.heads_q, p.seqlen_q, D);
  }
  prepared_split_kernel<T, Tr>();
  const dim3 grid(plan.num_splits, p.heads_kv * plan.row_tiles, p.batch);
  split_kv_attention<T, Tr><<<grid, Tr::kThreads, Tr::kSmemBytes, stream>>>(p, a);
  FL_LAUNCH_CHECK("split_kv_attention");

  if (plan.num_splits > 1) {  // one CTA of D threads per output row
    const int64_t rows = static_cast<int64_t>(p.batch) * p.heads_q * p.seqlen_q;
    combine_splits<T, D><<<static_cast<unsigned>(rows), D, 0, stream>>>(p, a);
    FL_LAUNCH_CHECK("combine_splits");
  }
}

/// Why rung 08 cannot run @p p, or "" (head_dims and paged KV are checked by
/// the runner from the Rung fields).
std::string supports_08(const Problem& p, const DeviceInfo& d) {
  if (p.seqlen_q > kMaxSeqlenQ)
    return "rung 08 is a decode kernel: seqlen_q must be <= " + std::to_string(kMaxSeqlenQ);
  if (p.head_dim != 64 && p.head_dim != 128) return "head_dim must be 64 or 128";
  if (!head_dim_built(p.head_dim))
    return "head_dim " + std::to_string(p.head_dim) + " not built (configured with FL_HEAD_DIM)";
  if (!dtype_built(p.dtype)) return "dtype not built (configured with FL_DTYPE)";
  const DecodePlan plan = plan_for(p);
  if (p.batch > 65535) return "batch must be <= 65535 (grid z)";
  if (static_cast<long long>(p.heads_kv) * plan.row_tiles > 65535)
    return "heads_kv x row tiles must be <= 65535 (grid y)";
  const size_t smem = with_head_dim(
      p.head_dim, [&](auto dim) { return DecodeTraits<decltype(dim)::value>::kSmemBytes; });
  if (d.smem_per_block_optin > 0 && smem > static_cast<size_t>(d.smem_per_block_optin))
    return "needs " + std::to_string(smem) + " bytes of shared memory per block, the GPU allows " +
           std::to_string(d.smem_per_block_optin);
  return "";
}

size_t workspace_08(const Problem& p) {
  return workspace_bytes(plan_for(p), p.batch, p.heads_q, p.seqlen_q, p.head_dim);
}

std::vector<KernelInfo> kernels_08(const Problem& p) {
  const DecodePlan plan = plan_for(p);
  return FL_DTYPE_SWITCH(p.dtype, T, [&] {
    return with_head_dim(p.head_dim, [&](auto dim) {
      constexpr int D = decltype(dim)::value;
      using Tr = DecodeTraits<D>;
      std::vector<KernelInfo> k;
      k.push_back({"split_kv_attention<d=" + std::to_string(D) + ">",
                   prepared_split_kernel<T, Tr>(), Tr::kThreads, Tr::kSmemBytes});
      if (plan.num_splits > 1)
        k.push_back({"combine_splits", reinterpret_cast<const void*>(&combine_splits<T, D>), D, 0});
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
                "of %lld slots (%d SMs x %d), wave efficiency %.2f",
                ctas, plan.work_items, plan.num_splits,
                static_cast<double>(ctas) / static_cast<double>(slots), slots, sms,
                SplitPolicy{}.ctas_per_sm, wave_efficiency(ctas, slots));
  out.push_back(buf);
  if (plan.num_splits > 1)
    out.push_back("partial O + LSE in HBM: " + format_bytes(static_cast<double>(workspace_08(p))) +
                  " (written by kernel 1, read by combine_splits)");
  if (plan.row_tiles > 1)
    out.push_back("more rows than one CTA holds: each of the " + std::to_string(plan.row_tiles) +
                  " row tiles re-reads its split of K/V (mostly from L2)");
  return out;
}

}  // namespace

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
  r.min_cc = 80;  // cp.async, ldmatrix, mma.sync
  r.supports = supports_08;
  r.workspace_bytes = workspace_08;
  r.launch = [](const AttnParams& p, cudaStream_t s) {
    check_alignment(p);
    const DecodePlan plan = plan_for(p);
    FL_DTYPE_SWITCH(static_cast<DType>(p.dtype), T, [&] {
      with_head_dim(p.head_dim,
                    [&](auto dim) { launch_decode<T, decltype(dim)::value>(p, plan, s); });
    });
  };
  r.kernels = kernels_08;
  r.notes = notes_08;
  reg.add(std::move(r));
}

}  // namespace fl
