/// @file steps/05_tensor_cores/launch.cu
/// @brief Rung 05's launcher: one tile size for every head_dim, `supports`,
/// and registration.
#include <string>
#include <vector>

#include "flashladder/registry.h"
#include "flashladder/static_switch.h"
#include "kernel.cuh"

namespace fl {
namespace {

using tc::OneSizeTiles;

/// Rung 05 is built for head_dim 32, 64 and 128; FL_HEADDIM_SWITCH also has a
/// 256 case, which this guard keeps from being instantiated.
constexpr bool built_05(int d) {
  return d <= 128;
}

/// Why rung 05 cannot run @p p on @p d, or "".
std::string supports_05(const Problem& p, const DeviceInfo& d) {
  if (p.head_dim != 32 && p.head_dim != 64 && p.head_dim != 128)
    return "head_dim must be 32, 64 or 128";
  if (!head_dim_built(p.head_dim))
    return "head_dim " + std::to_string(p.head_dim) + " not built (configured with FL_HEAD_DIM)";
  if (!dtype_built(p.dtype)) return "dtype not built (configured with FL_DTYPE)";
  if (p.heads_q > 65535 || p.batch > 65535)
    return "heads_q and batch must be <= 65535 (grid y and z)";
  const int smem = FL_HEADDIM_SWITCH(p.head_dim, D, [&] {
    if constexpr (built_05(D)) return OneSizeTiles<D>::kSmemBytes;
    return 0;
  });
  if (d.smem_per_block_optin > 0 && smem > d.smem_per_block_optin)
    return "needs " + std::to_string(smem) + " bytes of shared memory per block, the GPU allows " +
           std::to_string(d.smem_per_block_optin);
  return "";
}

}  // namespace

void register_rung_05(Registry& reg) {
  Rung r;
  r.number = 5;
  r.name = "tensor_cores";
  r.summary = "FA2 on tensor cores: mma.sync m16n8k16, ldmatrix, cp.async ring, swizzled smem";
  r.peak = Peak::tensor_16bit;
  r.writes_o_fp32 = true;  // the epilogue's store_o2 (epilogue.cuh)
  r.head_dims = {32, 64, 128};
  r.min_cc = 80;  // mma.sync bf16, cp.async and ldmatrix.trans need Ampere
  r.supports = supports_05;
  r.baselines = {Baseline::on(4, "the rung it improves on: the same algorithm on CUDA cores")};
  r.new_design = "tensor cores (mma.sync, ldmatrix, cp.async) in place of CUDA-core FMAs";
  r.launch = [](const AttnParams& p, cudaStream_t s) {
    FL_DTYPE_SWITCH(static_cast<DType>(p.dtype), T, [&] {
      FL_HEADDIM_SWITCH(p.head_dim, D, [&] {
        if constexpr (built_05(D)) tc::launch_flash_tc<T, OneSizeTiles<D>>(p, s);
      });
    });
  };
  r.kernels = [](const Problem& p) {
    return FL_DTYPE_SWITCH(p.dtype, T, [&] {
      return FL_HEADDIM_SWITCH(p.head_dim, D, [&] {
        std::vector<KernelInfo> k;
        if constexpr (built_05(D)) {
          using Cfg = OneSizeTiles<D>;
          k.push_back({tc::tile_label<Cfg>(), tc::prepared_kernel<T, Cfg>(), Cfg::kThreads,
                       static_cast<size_t>(Cfg::kSmemBytes)});
        }
        return k;
      });
    });
  };
  r.notes = [](const Problem& p) {
    const int d = p.head_dim;
    return std::vector<std::string>{
        "one tile size for every head_dim: 64 query rows x 64 keys, 4 warps, 2 K/V stages; "
        "rung 06 picks tiles per head_dim (d=" +
        std::to_string(d) + " here)"};
  };
  reg.add(std::move(r));
}

}  // namespace fl
