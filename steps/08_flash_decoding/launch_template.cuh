/// @file steps/08_flash_decoding/launch_template.cuh
/// @brief Rung 08's launcher pieces, shared by launch.cu (the rung) and
/// variants.cu (the ablations): the split plan, the two launches, the checks
/// and the ablation registration.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "flashladder/cuda_check.h"
#include "flashladder/problem.h"
#include "flashladder/device.h"
#include "flashladder/registry.h"
#include "flashladder/static_switch.h"
#include "kernel.cuh"
#include "split_heuristic.h"

namespace fl::decode {

/// Largest seqlen_q the decode kernel takes (a decode step plus speculative tokens).
constexpr int kMaxSeqlenQ = 16;

/// SMs used by the plan when no device can be queried (an H100 SXM), so
/// workspace_bytes() and the notes still give an answer on a CPU-only host.
constexpr int kFallbackSmCount = 132;

/// Attribute @p attr of the current device, or @p fallback without one.
inline int device_attribute(cudaDeviceAttr attr, int fallback) {
  int dev = 0, v = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&v, attr, dev) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the (non-sticky) error: no device is not a failure here
    return fallback;
  }
  return v;
}
/// Multiprocessors of the current device (kFallbackSmCount without one).
inline int sm_count() {
  const int n = device_sm_count();
  return n > 0 ? n : kFallbackSmCount;
}
/// Compute capability as major * 10 + minor (0 without a device).
inline int compute_capability() {
  return device_attribute(cudaDevAttrComputeCapabilityMajor, 0) * 10 +
         device_attribute(cudaDevAttrComputeCapabilityMinor, 0);
}

/// The split kernel for (T, Tr, PAGED) with its shared-memory limit raised
/// once (above 48 KiB dynamic shared memory must be opted into).
template <class T, class Tr, bool PAGED>
const void* prepared_split_kernel() {
  static const cudaError_t set = cudaFuncSetAttribute(split_kv_attention<T, Tr, PAGED>,
                                                      cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                      static_cast<int>(Tr::kSmemBytes));
  FL_CUDA_CHECK(set);
  return reinterpret_cast<const void*>(&split_kv_attention<T, Tr, PAGED>);
}

/// The plan (split count, keys per split) on this GPU. The same call feeds
/// workspace_bytes() and launch(), so both see the same plan.
inline DecodePlan plan_for(const Problem& p) {
  return make_decode_plan(p.batch, p.heads_kv, p.group(), p.seqlen_q, p.seqlen_k, p.num_splits,
                          sm_count());
}
inline DecodePlan plan_for(const AttnParams& p) {
  return make_decode_plan(p.batch, p.heads_kv, p.group, p.seqlen_q, p.seqlen_k, p.num_splits,
                          sm_count());
}
/// Workspace of that plan (the partial O and LSE; 0 for one split).
inline size_t decode_workspace_bytes(const Problem& p) {
  return workspace_bytes(plan_for(p), p.batch, p.heads_q, p.seqlen_q, p.head_dim);
}
/// Rung::split_counters: one per CTA tile of the split grid (batch x heads_kv x row tiles), 0 when
/// the plan does not split (kernel 1 then writes O itself).
inline long long decode_split_counters(const Problem& p) {
  const DecodePlan plan = plan_for(p);
  return plan.num_splits > 1 ? plan.work_items : 0;
}

/// 16-byte loads need 16-byte aligned rows (8-byte stores of O in kernel 2):
/// pointers and strides are checked here because supports() only sees the
/// Problem, not the tensors. @p kv_bytes: bytes of a K or V element (1: an
/// e4m3 cache, whose strides must then be multiples of 16 elements).
inline void check_alignment(const AttnParams& p, int kv_bytes = 2) {
  auto aligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
  // clang-format off
  const int64_t qo_strides[] = {p.q_batch_stride, p.q_row_stride, p.q_head_stride,
                                p.o_batch_stride, p.o_row_stride, p.o_head_stride};
  const int64_t kv_strides[] = {p.k_batch_stride, p.k_row_stride, p.k_head_stride,
                                p.v_batch_stride, p.v_row_stride, p.v_head_stride};
  // clang-format on
  bool ok = aligned(p.q) && aligned(p.k) && aligned(p.v) && aligned(p.o);
  for (int64_t s : qo_strides) ok = ok && s % 8 == 0;
  for (int64_t s : kv_strides) ok = ok && s % (16 / kv_bytes) == 0;
  if (!ok)
    throw std::invalid_argument(
        "rung 08: Q/K/V/O pointers must be 16-byte aligned and their strides 16-byte multiples "
        "(16-byte vector loads)");
}

/// Launches kernel 1 and, with more than one split, kernel 2. @p pdl: launch
/// kernel 2 with programmatic stream serialization (sm_90+), so that its CTAs
/// are already resident when kernel 1 finishes instead of being launched then.
/// WITH_PAGED = false builds the contiguous loader only (the ablations).
template <class T, class Tr, bool WITH_PAGED = true>
void launch_decode(const AttnParams& p, const DecodePlan& plan, cudaStream_t stream, bool pdl) {
  constexpr int D = Tr::kHeadDim;
  SplitArgs a{plan.rows_total, plan.num_splits, plan.split_len, nullptr, nullptr, nullptr};
  if (plan.num_splits > 1) {
    const size_t need = workspace_bytes(plan, p.batch, p.heads_q, p.seqlen_q, D);
    if (p.workspace == nullptr || p.workspace_bytes < need)
      throw std::invalid_argument("rung 08: workspace of " + std::to_string(p.workspace_bytes) +
                                  " bytes, the split plan needs " + std::to_string(need));
    a.o_part = static_cast<float*>(p.workspace);
    a.lse_part = a.o_part + partial_o_elems(plan, p.batch, p.heads_q, p.seqlen_q, D);
    a.counters = p.split_counters;  // zeroed by the caller: kernel 1 merges, no kernel 2
  }
  const dim3 grid(plan.num_splits, p.heads_kv * plan.row_tiles, p.batch);
  auto launch_split = [&](auto paged) {
    constexpr bool PAGED = decltype(paged)::value;
    prepared_split_kernel<T, Tr, PAGED>();
    split_kv_attention<T, Tr, PAGED><<<grid, Tr::kThreads, Tr::kSmemBytes, stream>>>(p, a);
  };
  if constexpr (WITH_PAGED) {
    if (p.page_size != 0)
      launch_split(std::true_type{});
    else
      launch_split(std::false_type{});
  } else {
    if (p.page_size != 0) throw std::invalid_argument("rung 08: this variant has no paged loader");
    launch_split(std::false_type{});
  }
  FL_LAUNCH_CHECK("split_kv_attention");
  if (plan.num_splits == 1 || a.counters != nullptr) return;

  // One CTA per output row.
  static const bool has_pdl = compute_capability() >= 90;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(static_cast<int64_t>(p.batch) * p.heads_q * p.seqlen_q));
  cfg.blockDim = dim3(CombineTraits<D>::kThreads);
  cfg.dynamicSmemBytes = 0;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = (pdl && has_pdl) ? 1 : 0;
  FL_CUDA_CHECK(cudaLaunchKernelEx(&cfg, combine_splits<T, D>, p, a));
  FL_LAUNCH_CHECK("combine_splits");
}

/// Why the split kernel with traits Tr cannot run @p p, or "" (head_dims and
/// paged KV are checked by the runner from the Rung fields).
template <class Tr>
std::string check_decode_limits(const Problem& p, const DeviceInfo& d) {
  if (p.seqlen_q > kMaxSeqlenQ)
    return "rung 08 is a decode kernel: seqlen_q must be <= " + std::to_string(kMaxSeqlenQ);
  if (!dtype_built(p.dtype)) return "dtype not built (configured with FL_DTYPE)";
  const DecodePlan plan = plan_for(p);
  if (p.batch > 65535) return "batch must be <= 65535 (grid z)";
  if (static_cast<long long>(p.heads_kv) * plan.row_tiles > 65535)
    return "heads_kv x row tiles must be <= 65535 (grid y)";
  if (d.smem_per_block_optin > 0 && Tr::kSmemBytes > d.smem_per_block_optin)
    return "needs " + std::to_string(Tr::kSmemBytes) +
           " bytes of shared memory per block, the GPU allows " +
           std::to_string(d.smem_per_block_optin);
  return "";
}

/// An ablation point of rung 08: ring depth Tr::kStages at head_dim 128,
/// contiguous K/V, kernel 2 with or without PDL (`--variant NAME`).
/// Register each Tr from one .cu file only, the one that owns that kernel: the
/// once-per-kernel setup above (prepared_split_kernel's static) is shared by
/// every file that instantiates it, while each file loads its own copy of the
/// kernel, so a second file's copy would launch without its shared-memory
/// limit raised (cudaErrorInvalidValue).
template <class Tr>
Rung make_decode_variant(const char* name, const std::string& summary, bool pdl) {
  static_assert(Tr::kHeadDim == 128, "the ablations are measured at head_dim 128");
  Rung r;
  r.number = 8;
  r.name = "flash_decoding";
  r.variant = name;
  r.summary = "ablation: " + summary;
  r.peak = Peak::memory;
  r.head_dims = {128};
  r.min_cc = 80;
  r.in_tour = false;
  r.decode = true;
  r.supports = [](const Problem& p, const DeviceInfo& d) { return check_decode_limits<Tr>(p, d); };
  r.workspace_bytes = decode_workspace_bytes;
  r.launch = [pdl](const AttnParams& p, cudaStream_t s) {
    check_alignment(p);
    FL_DTYPE_SWITCH(static_cast<DType>(p.dtype), T,
                    [&] { launch_decode<T, Tr, false>(p, plan_for(p), s, pdl); });
  };
  r.kernels = [](const Problem& p) {
    return FL_DTYPE_SWITCH(p.dtype, T, [&] {
      return std::vector<KernelInfo>{
          {"split_kv_attention<d=128, stages=" + std::to_string(Tr::kStages) + ">",
           prepared_split_kernel<T, Tr, false>(), Tr::kThreads, Tr::kSmemBytes}};
    });
  };
  return r;
}

}  // namespace fl::decode
