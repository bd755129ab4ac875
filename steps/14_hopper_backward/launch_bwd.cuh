/// @file steps/14_hopper_backward/launch_bwd.cuh
/// @brief Rung 14's backward launch, for any mask and scores the kernel takes (kernel.cuh's MODS):
/// the row statistics, the kernel and the dQ convert in the workspace workspace.h lays out, rung
/// 11's exact D pass on long rows and its dK, dV convert for a split group. Rung 14's entries
/// (launch.cu) run it with CausalOrNone, rung 16's backward (steps/16_masks) with its masks and
/// score modifiers.
#pragma once

#include <stdint.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "flashladder/cuda_check.h"
#include "flashladder/device.h"
#include "flashladder/registry.h"
#include "flashladder/tma.h"
#include "../11_backward/exact_delta.cuh"
#include "kernel.cuh"
#include "workspace.h"

namespace fl::hopper14 {

/// The kernel for (T, Cfg, WRITER, MODS), its shared memory limit raised once.
template <class T, class Cfg, bool WRITER, class MODS = CausalOrNone>
const void* prepared_kernel() {
  static const bool once = [] {
    FL_CUDA_CHECK(cudaFuncSetAttribute(bwd_hopper_kernel<T, Cfg, WRITER, MODS>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmemBytes));
    return true;
  }();
  (void)once;
  return reinterpret_cast<const void*>(&bwd_hopper_kernel<T, Cfg, WRITER, MODS>);
}

/// The pre- and post-passes around the kernel: `fused` (the rung's, and rung 16's) zeroes the dQ
/// accumulator in the statistics pass and reads and writes 16 bytes at a time (bwd_prep_kernel,
/// bwd_dq_convert_tile_kernel); `unfused` (rung 14's unfused-prep ablation, the passes before) is
/// a memset of the accumulator, one warp per row with 4-byte loads for the statistics, and a
/// convert of 8-byte loads and 4-byte stores (README, "Before and after the kernel").
enum class Prep { unfused, fused };

/// The passes the rungs run (rung 14's entries but unfused-prep, rung 16's backward).
constexpr Prep kRungPrep = Prep::fused;

/// A device address on the 16-byte boundary the fused passes' accesses and TMA need.
inline bool aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

/// The fused passes' 16-byte accesses need O's, dO's and dQ's rows 16-byte aligned and head_dim a
/// multiple of 8, which the layout rule every entry checks gives (fl::tensor_layout_reason: strides
/// multiples of 8 elements, 16-byte aligned data); a launch that breaks it is refused, not run.
inline void require_rows_aligned16(const AttnBwdParams& P) {
  const AttnParams& p = P.fwd;
  const auto strides = [](int64_t row, int64_t head, int64_t batch) {
    return row % 8 == 0 && head % 8 == 0 && batch % 8 == 0;
  };
  if (p.head_dim % 8 != 0 || p.dv() % 8 != 0 || !aligned16(p.o) || !aligned16(P.dout) || !aligned16(P.dq) ||
      (p.o_fp32 != nullptr && !aligned16(p.o_fp32)) || !strides(p.o_row_stride, p.o_head_stride, p.o_batch_stride) ||
      !strides(p.q_row_stride, p.q_head_stride, p.q_batch_stride))
    throw std::runtime_error("rung 14's backward: O, dO and dQ need 16-byte aligned rows (head_dim, V's head_dim "
                             "and strides multiples of 8 elements)");
}

/// The pre-pass's and the convert's entries in a rung's kernel list (Rung::kernels), for @p prep.
template <class T, int D>
KernelInfo prep_kernel_info(Prep prep) {
  const std::string d = "<d=" + std::to_string(D) + ">";
  if (prep == Prep::fused)
    return {"bwd_prep" + d, reinterpret_cast<const void*>(&bwd_prep_kernel<T, D>), kPrepThreads, 0};
  return {"bwd_stats" + d, reinterpret_cast<const void*>(&bwd_stats_kernel<T, D>), 128, 0};
}
template <class T, class Cfg>
KernelInfo convert_kernel_info(Prep prep) {
  const std::string d = "<d=" + std::to_string(Cfg::kHeadDim) + ">";
  if (prep == Prep::fused)
    return {"bwd_dq_convert_tile" + d, reinterpret_cast<const void*>(&bwd_dq_convert_tile_kernel<T, Cfg>),
            kConvertThreads, static_cast<size_t>(convert_tile_bytes<T, Cfg>())};
  return {"bwd_dq_convert" + d, reinterpret_cast<const void*>(&bwd_dq_convert_kernel<T, Cfg>), 256, 0};
}

/// dQ from its accumulator and, for a split group, dK and dV from their partial sums.
template <class T, class Cfg>
void convert_gradients(const AttnBwdParams& P, const BwdBuffers& buf, int64_t stat_rows, Prep prep,
                       cudaStream_t stream) {
  constexpr int D = Cfg::kHeadDim;
  const AttnParams& p = P.fwd;
  if (prep == Prep::fused) {
    bwd_dq_convert_tile_kernel<T, Cfg><<<static_cast<unsigned>(stat_rows / Cfg::kBlockM), kConvertThreads,
                                         convert_tile_bytes<T, Cfg>(), stream>>>(P, buf.dq_acc, buf.head_rows);
    FL_LAUNCH_CHECK("bwd_dq_convert_tile_kernel");
  } else {
    const int64_t pairs = stat_rows * D / 2;
    bwd_dq_convert_kernel<T, Cfg><<<static_cast<unsigned>(std::min<int64_t>((pairs + 255) / 256, 65535)), 256,
                                    0, stream>>>(P, buf.dq_acc, buf.head_rows, stat_rows);
    FL_LAUNCH_CHECK("bwd_dq_convert_kernel");
  }
  if (buf.kv_split > 1 && buf.key_rows > 0) {  // a packed batch of no key has no dK, dV row
    // Rung 11's convert walks [batch, seqlen_k, heads_kv, d]: a packed batch's keys are one
    // sequence of key_rows tokens to it.
    AttnBwdParams flat = P;
    if (p.cu_seqlens_q != nullptr) {
      flat.fwd.batch = 1;
      flat.fwd.seqlen_k = static_cast<int>(buf.key_rows);
    }
    const int64_t kv_pairs = buf.key_rows * p.heads_kv * D / 2;
    bwd::bwd_convert_kv_kernel<T, D><<<static_cast<unsigned>(std::min<int64_t>((kv_pairs + 255) / 256, 65535)), 256,
                                       0, stream>>>(flat, buf.dkv_acc, buf.kv_split);
    FL_LAUNCH_CHECK("bwd_convert_kv_kernel");
  }
}

/// D from rung 11's exact pass where rows are long (delta_policy.h), else nullptr. Rung 11 has no
/// head_dim 256 tiles: supports() refuses such rows at d = 256.
template <class T, int D>
float* exact_delta(const AttnBwdParams& P, const WsShape& shape, float* ws, bool deterministic, bwd::DeltaPolicy policy,
                   bwd::GroupSplit how, cudaStream_t stream) {
  const int n_delta = exact_delta_splits(shape, deterministic, policy);
  if (n_delta == 0) return nullptr;
  if (P.fwd.dv() != P.fwd.head_dim)  // rung 11's pass reads V at Q's head_dim
    throw std::runtime_error("rung 14: no exact D pass with V's head_dim of its own (--dim-v)");
  if constexpr (D > 128) {
    throw std::runtime_error("rung 14: no exact D pass at head_dim " + std::to_string(D));
  } else {
    const AttnParams& p = P.fwd;
    using Cfg11 = bwd::BwdTiles<D>;
    float* exact_d = ws + exact_delta_offset(shape, deterministic, how);
    float* delta_acc = ws + exact_delta_sums_offset(shape, deterministic, how);
    const int kv_split11 = bwd::kv_splits(shape.p, Cfg11::kBlockN, deterministic, bwd::GroupSplit::balanced);
    const bool lpt = p.causal && !deterministic;
    const int blocks = deterministic ? bwd::deterministic_splits(shape.p, Cfg11::kBlockN)
                                     : bwd::kv_block_count(shape.p, Cfg11::kBlockN);
    const dim3 grid = lpt ? dim3(p.heads_kv * kv_split11, p.batch, blocks) : dim3(blocks, p.heads_kv * kv_split11, p.batch);
    bwd::launch_exact_delta<T, Cfg11>(P, exact_d, delta_acc, n_delta, grid, kv_split11, lpt, /*zero=*/true, stream);
    return exact_d;
  }
}

/// The backward pass: D (rung 11's exact pass on long rows, where @p policy asks for it), the
/// padded statistics, the kernel with @p mods, the dQ convert and, for a split group, rung 11's
/// dK, dV convert. WRITER false: the atomic-dq ablation, which has no deterministic order of its
/// own (asked for one, the writer runs). Returns where the statistics and accumulators are (rung
/// 16 reads the LSE and D rows again for the sinks' gradient); lse_log2 null: nothing was written
/// (a packed batch of empty sequences). @p tma_dkv false: each math thread stores its own dK, dV
/// (the `direct-dkv` ablation); true: whole blocks by TMA where dK and dV are 16-byte aligned
/// (kernel.cuh's store_dkv_tma). @p lpt_section > 0: under rung 14's causal mask, not
/// deterministic, the blocks longest first within sections of that many groups, at most all of them
/// (BwdBuffers::lpt_section; the rung's traits.h rung_lpt_section, the `lpt-*` ablations), on the
/// grid of one block per K/V block (the persistent grid keeps its tile order).
template <class T, class Cfg, bool WRITER, class MODS = CausalOrNone>
BwdBuffers launch_backward(const AttnBwdParams& given, bwd::DeltaPolicy policy, bwd::GroupSplit how, const MODS& mods,
                     cudaStream_t stream, Prep prep = kRungPrep, bool early_free = true, bool rotate = true,
                     bool tma_dkv = true, int lpt_section = 0) {
  constexpr int D = Cfg::kHeadDim;
  const AttnParams& p = given.fwd;
  // A packed batch's token counts included. The dQ tiles are the kernel's (D columns): a head_dim
  // below D (rung 16's 80 and 96 on the d = 128 tiles) lays out the workspace as D's.
  WsShape shape(p);
  shape.p.head_dim = D;
  if (p.dv() > p.head_dim)  // the tile is Q's: V's columns past it would not be read
    throw std::runtime_error("rung 14's backward: V's head_dim (--dim-v) above Q's and K's is not taken");
  if (shape.packed && p.total_q == 0 && p.total_k == 0) return {};  // only empty sequences: nothing to write
  const bool deterministic = given.deterministic != 0;
  const bwd::DeltaSource source = bwd::delta_source(policy, p.seqlen_k, p.o_fp32 != nullptr);
  AttnBwdParams P = given;
  if (source == bwd::DeltaSource::o16) P.fwd.o_fp32 = nullptr;
  if (P.workspace_bytes < workspace_bytes(shape, deterministic, policy, how))
    throw std::runtime_error("rung 14: workspace smaller than bwd_workspace_bytes");
  if (reinterpret_cast<uintptr_t>(P.workspace) % 128 != 0)  // bulk copies: 16 bytes; tiles: 128
    throw std::runtime_error("rung 14: workspace not 128-byte aligned");
  float* ws = static_cast<float*>(P.workspace);
  BwdBuffers buf{};
  buf.head_rows = head_rows(shape);
  buf.key_rows = key_rows(shape);
  buf.lse_log2 = ws;
  buf.delta = ws + stat_rows(shape);
  buf.dq_acc = ws + dq_acc_offset(shape);
  buf.counters = deterministic ? reinterpret_cast<int*>(ws + counter_offset(shape)) : nullptr;
  buf.tile_counter = reinterpret_cast<int*>(ws + tile_counter_offset(shape, deterministic));
  buf.dkv_acc = ws + dkv_acc_offset(shape, deterministic);
  buf.kv_split = kv_splits(shape, how);
  buf.early_free = early_free;
  // The partial sums and rung 11's convert are d wide, for dV as for dK.
  if (buf.kv_split > 1 && (p.head_dim != D || p.dv() != D))
    throw std::runtime_error("the backward launch: a split GQA group needs head_dim " + std::to_string(D) +
                             " for Q, K and V");

  float* exact_d = exact_delta<T, D>(P, shape, ws, deterministic, policy, how, stream);

  // The dQ accumulator and the counters (the persistent grid's tile counter too) start at zero; the
  // statistics are padded. stat_rows is a multiple of 128 (workspace.h), so of every block's rows;
  // the zeroed floats of 32.
  const size_t zero_floats = dkv_acc_offset(shape, deterministic) - dq_acc_offset(shape);
  const int64_t stat_rows = static_cast<int64_t>(hopper14::stat_rows(shape));
  if (prep == Prep::fused) {
    require_rows_aligned16(P);
    bwd_prep_kernel<T, D><<<static_cast<unsigned>(stat_rows / kPrepRows<D>), kPrepThreads, 0, stream>>>(
        P, const_cast<float*>(buf.lse_log2), const_cast<float*>(buf.delta), buf.head_rows, stat_rows, exact_d,
        reinterpret_cast<float4*>(buf.dq_acc), static_cast<int64_t>(zero_floats / 4));
    FL_LAUNCH_CHECK("bwd_prep_kernel");
  } else {
    FL_CUDA_CHECK(cudaMemsetAsync(buf.dq_acc, 0, zero_floats * sizeof(float), stream));
    if (stat_rows > 0) {
      bwd_stats_kernel<T, D><<<static_cast<unsigned>((stat_rows + 3) / 4), 128, 0, stream>>>(
          P, const_cast<float*>(buf.lse_log2), const_cast<float*>(buf.delta), buf.head_rows, stat_rows, exact_d);
      FL_LAUNCH_CHECK("bwd_stats_kernel");
    }
  }

  // A packed batch is one sequence of all its tokens to TMA; a side with no token maps one row of
  // the other side's memory, which no copy reads.
  const DType dt = static_cast<DType>(p.dtype);
  const CUtensorMap map_q = make_tma_map_tokens(dt, p, false, p.q, p.q_batch_stride, p.q_row_stride, p.q_head_stride,
                                                Cfg::kBlockM, p.k);
  // dO and V at V's head_dim (AttnParams::dv(), at most head_dim: MLA's 128 beside 192): the tile's
  // columns past it come in as zeros, which dP^T sums and dV's GEMM multiplies (kernel.cuh).
  const CUtensorMap map_do = make_tma_map_tokens(dt, p, false, P.dout, p.o_batch_stride, p.o_row_stride,
                                                 p.o_head_stride, Cfg::kBlockM, p.k, p.dv());
  const CUtensorMap map_k = make_tma_map_tokens(dt, p, true, p.k, p.k_batch_stride, p.k_row_stride, p.k_head_stride,
                                                Cfg::kBlockN, p.q);
  const CUtensorMap map_v = make_tma_map_tokens(dt, p, true, p.v, p.v_batch_stride, p.v_row_stride, p.v_head_stride,
                                                Cfg::kBlockN, p.q, p.dv());
  // dK and dV have K's and V's strides (kernel.cuh's grad_row), so their maps are K's and V's on
  // other bases; a base off the 16-byte rule TMA needs keeps the threads' own stores.
  buf.tma_dkv = tma_dkv && buf.kv_split == 1 && aligned16(P.dk) && aligned16(P.dv);
  const CUtensorMap map_dk = buf.tma_dkv ? make_tma_map_tokens(dt, p, true, P.dk, p.k_batch_stride, p.k_row_stride,
                                                               p.k_head_stride, Cfg::kBlockN, p.q)
                                         : map_k;
  const CUtensorMap map_dv = buf.tma_dkv ? make_tma_map_tokens(dt, p, true, P.dv, p.v_batch_stride, p.v_row_stride,
                                                               p.v_head_stride, Cfg::kBlockN, p.q, p.dv())
                                         : map_v;
  dim3 grid((p.seqlen_k + Cfg::kBlockN - 1) / Cfg::kBlockN, p.heads_kv * buf.kv_split, p.batch);
  buf.tiles_x = static_cast<int>(grid.x);
  buf.tiles_y = static_cast<int>(grid.y);
  buf.tiles_z = static_cast<int>(grid.z);
  // Longest first: rung 14's causal mask makes K/V block 0 the longest walk of every group.
  const bool lpt = lpt_order(lpt_section, Cfg::kPersistent, Cfg::kWarpSpecialized, MODS::kSpans, p.causal != 0,
                             deterministic);
  buf.lpt_section = lpt ? static_cast<int>(std::min<int64_t>(lpt_section, int64_t(grid.y) * grid.z)) : 0;
  // The persistent tiles and the longest-first order number the grid's blocks in one int.
  if ((Cfg::kPersistent || lpt) && int64_t(grid.x) * grid.y * grid.z > INT32_MAX)
    throw std::runtime_error("rung 14's backward: more than 2^31 - 1 K/V blocks in one grid");
  // The deterministic mode's rotated walk (traits.h): rung 14's own masks only (rung 16's keep the
  // order from block 0 or the last block down), a head's K/V blocks resident at once.
  buf.rotated_walk = rotate && !MODS::kSpans &&
                     rotated_walk(deterministic, p.causal != 0, buf.tiles_x, std::max(1, device_sm_count()));
  if constexpr (Cfg::kPersistent) {  // one block per SM walks the tiles (kernel.cuh, set_tile)
    const int64_t tiles = int64_t(grid.x) * grid.y * grid.z;
    grid = dim3(static_cast<unsigned>(std::min<int64_t>(tiles, std::max(1, device_sm_count()))), 1, 1);
  }
  bool writer = true;
  if constexpr (!WRITER) {
    if (!deterministic) {
      writer = false;
      prepared_kernel<T, Cfg, false, MODS>();
      bwd_hopper_kernel<T, Cfg, false, MODS>
          <<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(map_q, map_k, map_v, map_do, map_dk, map_dv, P, buf, mods);
    }
  }
  if (writer) {
    prepared_kernel<T, Cfg, true, MODS>();
    bwd_hopper_kernel<T, Cfg, true, MODS>
        <<<grid, Cfg::kThreads, Cfg::kSmemBytes, stream>>>(map_q, map_k, map_v, map_do, map_dk, map_dv, P, buf, mods);
  }
  FL_LAUNCH_CHECK("bwd_hopper_kernel");
  convert_gradients<T, Cfg>(P, buf, stat_rows, prep, stream);
  return buf;
}


}  // namespace fl::hopper14
