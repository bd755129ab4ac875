/// @file tma.h
/// @brief Host side of the Hopper rungs (09, 10): the TMA tensor maps of the ladder's
/// [batch, seqlen, heads, head_dim] tensors, and the one `supports` check they share.
///
/// A tensor map (`CUtensorMap`, 128 opaque bytes) tells the copy engine the shape, strides and
/// element type of a tensor in global memory and the *box* one `cp.async.bulk.tensor` copies
/// into shared memory, with its swizzle. It is built on the host by the driver's
/// `cuTensorMapEncodeTiled` and passed to the kernel by value as a `const __grid_constant__
/// CUtensorMap` parameter (device side: hopper.cuh, tma_load_4d).
///
/// The ladder's maps are 4D, listed innermost first as the driver wants them:
/// @code
///   // clang-format off
///   dim 0  head_dim   (contiguous: element stride 1)          box 64   (128 bytes)
///   dim 1  heads      stride head_stride  * 2 bytes           box 1
///   dim 2  seqlen     stride row_stride   * 2 bytes           box box_rows
///   dim 3  batch      stride batch_stride * 2 bytes           box 1
///   // clang-format on
/// @endcode
/// so one load brings box_rows consecutive rows (queries or keys) of one (batch, head), 64
/// columns wide: box_rows x 128 bytes, 128B-swizzled (wgmma_desc.h). A head_dim of 128 or 256 is
/// 2 or 4 such loads side by side (column blocks); 64 columns is the widest box the 128-byte
/// swizzle allows. Rows past seqlen come in as zeros (out-of-bounds fill), so tails need no
/// padding, only masks. The boxes rungs 09 and 10 use (their traits.h; FA3's tile table, Shah
/// et al. 2024, has 192 x 192 at d=64, 128 x 176 or 128 x 128 causal at d=128, 128 x 80 at d=256):
/// @code
///   // clang-format off
///   Q  box_rows = BLOCK_M = 64 x consumer warpgroups = 128 (64 in rung 09's variant d128-64x128)
///   K  box_rows = BLOCK_N per ring stage: d=64: 64 (rung 09) or 128 (rung 10);
///                 d=128: 128 (rung 09, rung 10 causal) or 176 (rung 10); d=256: 80
///   V  like K (read MN-major by the second GEMM: trans-b = 1)
///   expect_tx bytes per K or V stage = BLOCK_N x head_dim x 2
///   // clang-format on
/// @endcode
#pragma once

#include <cuda.h>  // CUtensorMap and its enums (header only: nothing links libcuda)

#include <cstdint>
#include <string>

#include "flashladder/problem.h"

namespace fl {

/// The numbers cuTensorMapEncodeTiled takes, computed by a pure function so a CPU test can
/// check them (the encode itself needs a driver).
struct TmaTiledArgs {
  uint32_t rank = 0;               ///< number of dimensions (4 for [batch, seqlen, heads, dim])
  uint64_t dims[5] = {};           ///< globalDim, innermost first
  uint64_t strides_bytes[4] = {};  ///< globalStrides of dims 1 .. rank-1 (dim 0 is contiguous)
  uint32_t box[5] = {};            ///< boxDim: elements per load along each dimension
  uint32_t elem_strides[5] = {};   ///< elementStrides: 1 (every element of the box)

  /// Bytes one load writes to shared memory (16-bit elements): what the mbarrier expects.
  uint32_t box_bytes() const {
    uint32_t n = 2;
    for (uint32_t i = 0; i < rank; ++i) n *= box[i];
    return n;
  }
};

/// Columns of one box: 128 bytes of 16-bit elements, the 128B swizzle's span.
constexpr int kTmaBoxCols = 64;

/// The tensor map arguments for a 16-bit [batch, seqlen, heads, head_dim] tensor at @p base
/// (strides in elements, as in AttnParams; head_dim contiguous), loaded in boxes of
/// @p box_rows rows x 64 columns of one (batch, head). A head_dim that is not a multiple of 64
/// (80, 96: rung 16) comes in as the next multiple: the columns of the last box past head_dim
/// are read as zeros, as rows past seqlen are. Returns "" and fills @p out, or a one-line reason
/// the copy engine cannot address this tensor (head_dim not a multiple of 8, misaligned base or
/// strides, box too tall).
inline std::string tma_args_bshd(const void* base, int batch, int seqlen, int heads, int head_dim,
                                 int64_t batch_stride, int64_t row_stride, int64_t head_stride,
                                 int box_rows, TmaTiledArgs* out) {
  if (batch < 1 || seqlen < 1 || heads < 1 || head_dim < 1)
    return "TMA: every dimension must be at least 1";
  if (head_dim % 8 != 0)
    return "TMA rows need head_dim a multiple of 8 (16-byte rows), got " + std::to_string(head_dim);
  if (reinterpret_cast<uintptr_t>(base) % 16 != 0)
    return "TMA needs the tensor's base address 16-byte aligned";
  const int64_t strides[3] = {head_stride, row_stride, batch_stride};
  const char* names[3] = {"head", "row", "batch"};
  for (int i = 0; i < 3; ++i) {
    const int64_t bytes = strides[i] * 2;
    if (bytes <= 0 || bytes % 16 != 0 || bytes >= (int64_t{1} << 40))
      return std::string("TMA needs the ") + names[i] +
             " stride to be a positive multiple of 8 elements (16 bytes), under 2^40 bytes, got " +
             std::to_string(strides[i]);
  }
  if (box_rows < 1 || box_rows > 256)
    return "TMA boxes are 1..256 rows, got " + std::to_string(box_rows);
  TmaTiledArgs a;
  a.rank = 4;
  const uint64_t dims[4] = {uint64_t(head_dim), uint64_t(heads), uint64_t(seqlen), uint64_t(batch)};
  const uint32_t box[4] = {uint32_t(kTmaBoxCols), 1u, uint32_t(box_rows), 1u};
  for (int i = 0; i < 4; ++i) {
    a.dims[i] = dims[i];
    a.box[i] = box[i];
    a.elem_strides[i] = 1;
  }
  for (int i = 0; i < 3; ++i) a.strides_bytes[i] = uint64_t(strides[i]) * 2;
  *out = a;
  return "";
}

/// The tensor map arguments of a rank-4 tensor of one-byte elements (rung 13's e4m3 Q, K and
/// transposed V): @p dims innermost first, @p strides_bytes of dims 1..3, @p box per dimension,
/// under a @p swizzle_bytes -wide swizzle (64 or 128: the box's inner extent must fit in it).
/// Returns "" and fills @p out, or why the copy engine cannot address the tensor.
inline std::string tma_args_u8(const void* base, const uint64_t (&dims)[4], const uint64_t (&strides_bytes)[3],
                               const uint32_t (&box)[4], int swizzle_bytes, TmaTiledArgs* out) {
  if (swizzle_bytes != 64 && swizzle_bytes != 128) return "TMA (8-bit): swizzle must be 64 or 128 bytes";
  if (reinterpret_cast<uintptr_t>(base) % 16 != 0) return "TMA needs the tensor's base address 16-byte aligned";
  if (box[0] == 0 || box[0] > static_cast<uint32_t>(swizzle_bytes) || box[0] % 16 != 0)
    return "TMA (8-bit): the box's inner extent must be a multiple of 16 bytes within the swizzle, got " +
           std::to_string(box[0]);
  TmaTiledArgs a;
  a.rank = 4;
  for (int i = 0; i < 4; ++i) {
    if (dims[i] < 1) return "TMA: every dimension must be at least 1";
    if (box[i] < 1 || box[i] > 256) return "TMA boxes are 1..256 per dimension, got " + std::to_string(box[i]);
    a.dims[i] = dims[i];
    a.box[i] = box[i];
    a.elem_strides[i] = 1;
  }
  for (int i = 0; i < 3; ++i) {
    if (strides_bytes[i] == 0 || strides_bytes[i] % 16 != 0 || strides_bytes[i] >= (uint64_t{1} << 40))
      return "TMA needs every stride a positive multiple of 16 bytes, under 2^40, got " +
             std::to_string(strides_bytes[i]);
    a.strides_bytes[i] = strides_bytes[i];
  }
  *out = a;
  return "";
}

#if CUDA_VERSION >= 12000
/// Encodes @p args for one-byte elements (CU_TENSOR_MAP_DATA_TYPE_UINT8: the copy engine moves
/// bytes; e4m3 is how the kernel reads them) under a @p swizzle_bytes -wide swizzle (64 or 128),
/// zeros outside the tensor. Throws like encode_tma_tiled.
void encode_tma_tiled_u8(CUtensorMap* map, const void* base, const TmaTiledArgs& args, int swizzle_bytes);

/// tma_args_u8 + encode_tma_tiled_u8 (throws std::runtime_error with the reason).
CUtensorMap make_tma_map_u8(const void* base, const uint64_t (&dims)[4], const uint64_t (&strides_bytes)[3],
                            const uint32_t (&box)[4], int swizzle_bytes);

/// Encodes @p args for 16-bit elements of @p dtype at @p base into @p map: 128-byte swizzle,
/// out-of-bounds elements filled with zeros, no interleave, L2 promotion of 128 bytes (as
/// CUTLASS does). Calls the driver's cuTensorMapEncodeTiled through
/// cudaGetDriverEntryPointByVersion (cudaGetDriverEntryPoint before CUDA 12.5), so the build
/// never links against libcuda. Throws fl::CudaError (entry-point query failed) or
/// std::runtime_error (driver without the function, or encode rejected the arguments, with
/// them listed) as one line.
void encode_tma_tiled(CUtensorMap* map, DType dtype, const void* base, const TmaTiledArgs& args);

/// tma_args_bshd + encode_tma_tiled: the map of one ladder tensor (throws std::runtime_error
/// with tma_args_bshd's reason when the tensor cannot be described).
CUtensorMap make_tma_map_bshd(DType dtype, const void* base, int batch, int seqlen, int heads,
                              int head_dim, int64_t batch_stride, int64_t row_stride,
                              int64_t head_stride, int box_rows);

/// The map of a launch's query-side tensor (Q, O, dO: @p keys false) or key-side one (K, V: true)
/// with its strides: a dense batch's [batch, seqlen, heads, d], or a packed batch's
/// [total, heads, d] (AttnParams::cu_seqlens_q set) seen as one sequence of all its tokens, batch
/// coordinate 0 (varlen.h's SeqSpan). A packed tensor of no token maps one row of @p fallback
/// instead (valid memory, which nothing reads), so that the map is still legal. @p cols: the
/// tensor's head_dim (0: AttnParams::head_dim; V and O pass AttnParams::dv()).
CUtensorMap make_tma_map_tokens(DType dtype, const AttnParams& p, bool keys, const void* base,
                                int64_t batch_stride, int64_t row_stride, int64_t head_stride,
                                int box_rows, const void* fallback, int cols = 0);
#endif

/// The shared `supports` line of the Hopper rungs: "" when they can run on @p d, else why not.
/// @p built_sm90a is the rung's FL_HOPPER_SM90A (common/FlashLadder.cmake): false when the build
/// had no sm_90 in CMAKE_CUDA_ARCHITECTURES, so no kernel was compiled. sm_90a code runs on
/// compute capability 9.0 only (not on later GPUs: it is architecture-specific).
inline std::string hopper_supports(const DeviceInfo& d, bool built_sm90a) {
  if (!built_sm90a) return "needs an sm_90 GPU (built without sm_90a)";
  if (d.cc_major != 9 || d.cc_minor != 0)
    return "needs an sm_90 GPU (H100/H200: wgmma, TMA), this is " + d.arch();
  return "";
}

}  // namespace fl
