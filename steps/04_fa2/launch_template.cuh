/// @file steps/04_fa2/launch_template.cuh
/// @brief Grid shapes and the variant -> Schedule table of rung 04. Included
/// by one file per head_dim (fa2_hdim32.cu, ...) so nvcc builds them in parallel.
#pragma once

#include <vector>

#include "flashladder/cuda_check.h"
#include "flashladder/static_switch.h"
#include "kernel.cuh"
#include "variants.h"

namespace fl::fa2 {

// The Schedule each variant compiles (KV_OUTER, RESCALE_EVERY_TILE, PREFETCH_KV).
using Fa1RescaleSchedule = Schedule<false, true, true>;
using Fa1OrderSchedule = Schedule<true, false, true>;
using Fa1AllSchedule = Schedule<true, true, true>;
using NoPrefetchSchedule = Schedule<false, false, false>;

/// The kernel for (Tr, T, Sched), with its dynamic shared-memory limit raised once.
template <class Tr, class T, class Sched>
const void* prepared_kernel() {
  static const bool once = [] {
    FL_CUDA_CHECK(cudaFuncSetAttribute(fa2_forward<Tr, T, Sched>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(Tr::kSmemBytes)));
    return true;
  }();
  (void)once;
  return reinterpret_cast<const void*>(&fa2_forward<Tr, T, Sched>);
}

/// Grid (Q-tile groups, heads_q, batch). FA2 gives each CTA one Q tile; the
/// whole-head variants give a CTA all Q tiles of its (batch, head), like FA1.
template <class Tr, class T, class Sched>
void launch_kernel(const AttnParams& p, cudaStream_t stream, bool whole_head_per_cta) {
  prepared_kernel<Tr, T, Sched>();
  const int num_q_tiles = (p.seqlen_q + Tr::kBlockM - 1) / Tr::kBlockM;
  const int q_tiles_per_cta = whole_head_per_cta ? num_q_tiles : 1;
  const dim3 grid((num_q_tiles + q_tiles_per_cta - 1) / q_tiles_per_cta, p.heads_q, p.batch);
  fa2_forward<Tr, T, Sched><<<grid, Tr::kThreads, Tr::kSmemBytes, stream>>>(p, q_tiles_per_cta);
  FL_LAUNCH_CHECK("fa2_forward");
}

template <int D, class T>
void launch_variant(const AttnParams& p, cudaStream_t s, Variant v) {
  using Tr = Fa2Traits<D>;
  switch (v) {
    case Variant::fa2:
      return launch_kernel<Tr, T, Fa2Schedule>(p, s, false);
    case Variant::fa1_rescale:
      return launch_kernel<Tr, T, Fa1RescaleSchedule>(p, s, false);
    case Variant::bh_grid:
      return launch_kernel<Tr, T, Fa2Schedule>(p, s, true);
    case Variant::fa1_order:
      return launch_kernel<Tr, T, Fa1OrderSchedule>(p, s, true);
    case Variant::fa1_all:
      return launch_kernel<Tr, T, Fa1AllSchedule>(p, s, true);
    case Variant::no_prefetch:
      return launch_kernel<Tr, T, NoPrefetchSchedule>(p, s, false);
  }
}

template <int D, class T>
const void* variant_kernel(Variant v) {
  using Tr = Fa2Traits<D>;
  switch (v) {
    case Variant::fa2:
    case Variant::bh_grid:
      return prepared_kernel<Tr, T, Fa2Schedule>();
    case Variant::fa1_rescale:
      return prepared_kernel<Tr, T, Fa1RescaleSchedule>();
    case Variant::fa1_order:
      return prepared_kernel<Tr, T, Fa1OrderSchedule>();
    case Variant::fa1_all:
      return prepared_kernel<Tr, T, Fa1AllSchedule>();
    case Variant::no_prefetch:
      return prepared_kernel<Tr, T, NoPrefetchSchedule>();
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
  return {{"fa2_forward", f, Tr::kThreads, Tr::kSmemBytes}};
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
