/// @file steps/04_fa2/launch_template.cuh
/// @brief Grid shapes of rung 04 and the variant -> kernel table: the rung
/// launches the teaching kernel (kernel.cuh), the ablation variants the
/// Schedule kernel of ablations.cuh. Included by one file per head_dim
/// (fa2_hdim32.cu, ...) so nvcc builds them in parallel.
#pragma once

#include <vector>

#include "ablations.cuh"
#include "flashladder/cuda_check.h"
#include "flashladder/static_switch.h"
#include "kernel.cuh"
#include "variants.h"

namespace fl::fa2 {

/// The rung's kernel for (Tr, T), prepared once.
template <class Tr, class T>
const void* prepared_kernel() {
  static const bool once = [] {
    FL_CUDA_CHECK(cudaFuncSetAttribute(fa2_forward<Tr, T>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(Tr::kSmemBytes)));
    return true;
  }();
  (void)once;
  return reinterpret_cast<const void*>(&fa2_forward<Tr, T>);
}

/// The ablation kernel for (Tr, T, Sched), prepared once.
template <class Tr, class T, class Sched>
const void* prepared_ablation() {
  static const bool once = [] {
    FL_CUDA_CHECK(cudaFuncSetAttribute(fa2_ablation<Tr, T, Sched>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(Tr::kSmemBytes)));
    return true;
  }();
  (void)once;
  return reinterpret_cast<const void*>(&fa2_ablation<Tr, T, Sched>);
}

/// The rung: grid (Q tiles, heads_q, batch), one Q tile per CTA.
template <class Tr, class T>
void launch_rung(const AttnParams& p, cudaStream_t stream) {
  prepared_kernel<Tr, T>();
  const int num_q_tiles = (p.seqlen_q + Tr::kBlockM - 1) / Tr::kBlockM;
  const dim3 grid(num_q_tiles, p.heads_q, p.batch);
  fa2_forward<Tr, T><<<grid, Tr::kThreads, Tr::kSmemBytes, stream>>>(p);
  FL_LAUNCH_CHECK("fa2_forward");
}

/// An ablation: grid (Q-tile groups, heads_q, batch). One Q tile per CTA as
/// in the rung, or (whole-head variants) all Q tiles of a (batch, head), like FA1.
template <class Tr, class T, class Sched>
void launch_ablation(const AttnParams& p, cudaStream_t stream, bool whole_head_per_cta) {
  prepared_ablation<Tr, T, Sched>();
  const int num_q_tiles = (p.seqlen_q + Tr::kBlockM - 1) / Tr::kBlockM;
  const int q_tiles_per_cta = whole_head_per_cta ? num_q_tiles : 1;
  const dim3 grid((num_q_tiles + q_tiles_per_cta - 1) / q_tiles_per_cta, p.heads_q, p.batch);
  fa2_ablation<Tr, T, Sched><<<grid, Tr::kThreads, Tr::kSmemBytes, stream>>>(p, q_tiles_per_cta);
  FL_LAUNCH_CHECK("fa2_ablation");
}

template <int D, class T>
void launch_variant(const AttnParams& p, cudaStream_t s, Variant v) {
  using Tr = Fa2Traits<D>;
  switch (v) {
    case Variant::fa2:
      return launch_rung<Tr, T>(p, s);
    case Variant::fa1_rescale:
      return launch_ablation<Tr, T, Fa1RescaleSchedule>(p, s, false);
    case Variant::bh_grid:
      return launch_ablation<Tr, T, Fa2Schedule>(p, s, true);
    case Variant::fa1_order:
      return launch_ablation<Tr, T, Fa1OrderSchedule>(p, s, true);
    case Variant::fa1_all:
      return launch_ablation<Tr, T, Fa1AllSchedule>(p, s, true);
    case Variant::no_prefetch:
      return launch_ablation<Tr, T, NoPrefetchSchedule>(p, s, false);
  }
}

template <int D, class T>
const void* variant_kernel(Variant v) {
  using Tr = Fa2Traits<D>;
  switch (v) {
    case Variant::fa2:
      return prepared_kernel<Tr, T>();
    case Variant::fa1_rescale:
      return prepared_ablation<Tr, T, Fa1RescaleSchedule>();
    case Variant::bh_grid:
      return prepared_ablation<Tr, T, Fa2Schedule>();
    case Variant::fa1_order:
      return prepared_ablation<Tr, T, Fa1OrderSchedule>();
    case Variant::fa1_all:
      return prepared_ablation<Tr, T, Fa1AllSchedule>();
    case Variant::no_prefetch:
      return prepared_ablation<Tr, T, NoPrefetchSchedule>();
  }
  return nullptr;
}

template <int D>
void launch_fa2(const AttnParams& p, cudaStream_t stream, Variant v) {
  FL_DTYPE_SWITCH(static_cast<DType>(p.dtype), T, [&] { launch_variant<D, T>(p, stream, v); });
}

template <int D>
std::vector<KernelInfo> fa2_kernels(DType dtype, Variant v) {
  using Tr = Fa2Traits<D>;
  const void* f = FL_DTYPE_SWITCH(dtype, T, [&] { return variant_kernel<D, T>(v); });
  return {{v == Variant::fa2 ? "fa2_forward" : "fa2_ablation", f, Tr::kThreads, Tr::kSmemBytes}};
}

template <int D>
size_t fa2_smem_bytes() {
  return Fa2Traits<D>::kSmemBytes;
}

}  // namespace fl::fa2

/// Explicit instantiation of rung 04's entry points for one head_dim.
#define FL_FA2_INSTANTIATE(D)                                                                  \
  template void fl::fa2::launch_fa2<D>(const fl::AttnParams&, cudaStream_t, fl::fa2::Variant); \
  template std::vector<fl::KernelInfo> fl::fa2::fa2_kernels<D>(fl::DType, fl::fa2::Variant);   \
  template size_t fl::fa2::fa2_smem_bytes<D>();
