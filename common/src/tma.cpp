/// @file tma.cpp
/// @brief cuTensorMapEncodeTiled through the runtime's driver entry-point query (tma.h).
#include "flashladder/tma.h"

#include <cuda_runtime_api.h>

#include <sstream>
#include <stdexcept>

#include "flashladder/cuda_check.h"

namespace fl {

#if CUDA_VERSION >= 12000
namespace {

/// The driver function's type, as cuda.h declares cuTensorMapEncodeTiled (ABI of CUDA 12.0).
using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*,
                                   const cuuint64_t*, const cuuint64_t*, const cuuint32_t*,
                                   const cuuint32_t*, CUtensorMapInterleave, CUtensorMapSwizzle,
                                   CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

/// Asks the CUDA runtime for the driver's cuTensorMapEncodeTiled (once per process). Linking
/// libcuda at build time would tie the binary to the build machine's driver stubs; the runtime
/// already loaded the driver, so this is a lookup in it.
EncodeTiledFn encode_tiled_fn() {
  static const EncodeTiledFn fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
    // The function's 12.0 ABI, whatever newer version the driver also offers.
    FL_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000,
                                                   cudaEnableDefault, &found));
#else
    FL_CUDA_CHECK(cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &p, cudaEnableDefault, &found));
#endif
    if (found != cudaDriverEntryPointSuccess || p == nullptr)
      throw std::runtime_error(
          "the CUDA driver has no cuTensorMapEncodeTiled (TMA needs a driver for CUDA 12.0 or "
          "newer)");
    return reinterpret_cast<EncodeTiledFn>(p);
  }();
  return fn;
}

template <class T>
std::string list(const T* v, uint32_t n) {
  std::ostringstream s;
  s << "[";
  for (uint32_t i = 0; i < n; ++i) s << (i ? ", " : "") << v[i];
  s << "]";
  return s.str();
}

const char* cu_result_name(CUresult r) {
  switch (r) {
    case CUDA_ERROR_INVALID_VALUE:
      return "CUDA_ERROR_INVALID_VALUE";
    case CUDA_ERROR_NOT_INITIALIZED:
      return "CUDA_ERROR_NOT_INITIALIZED";
    case CUDA_ERROR_DEINITIALIZED:
      return "CUDA_ERROR_DEINITIALIZED";
    case CUDA_ERROR_INVALID_CONTEXT:
      return "CUDA_ERROR_INVALID_CONTEXT";
    case CUDA_ERROR_NOT_SUPPORTED:
      return "CUDA_ERROR_NOT_SUPPORTED";
    default:
      return "CUresult";
  }
}


/// cuTensorMapEncodeTiled with zeros outside the tensor, or a one-line error listing the arguments.
void encode(CUtensorMap* map, CUtensorMapDataType type, const void* base, const TmaTiledArgs& args,
            CUtensorMapSwizzle swizzle, const char* swizzle_name) {
  // OOB_FILL_NONE writes zeros for elements outside the tensor (the other mode writes NaN).
  const CUresult r = encode_tiled_fn()(
      map, type, args.rank, const_cast<void*>(base), args.dims, args.strides_bytes, args.box,
      args.elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
      CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    std::ostringstream s;
    s << "cuTensorMapEncodeTiled failed: " << cu_result_name(r) << " (" << static_cast<int>(r)
      << "); rank " << args.rank << ", dims " << list(args.dims, args.rank) << ", strides (bytes) "
      << list(args.strides_bytes, args.rank - 1) << ", box " << list(args.box, args.rank)
      << ", swizzle " << swizzle_name;
    throw std::runtime_error(s.str());
  }
}

}  // namespace

void encode_tma_tiled(CUtensorMap* map, DType dtype, const void* base, const TmaTiledArgs& args) {
  const CUtensorMapDataType type =
      dtype == DType::fp16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
  encode(map, type, base, args, CU_TENSOR_MAP_SWIZZLE_128B, "128B");
}

void encode_tma_tiled_u8(CUtensorMap* map, const void* base, const TmaTiledArgs& args, int swizzle_bytes) {
  encode(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, base, args,
         swizzle_bytes == 64 ? CU_TENSOR_MAP_SWIZZLE_64B : CU_TENSOR_MAP_SWIZZLE_128B,
         swizzle_bytes == 64 ? "64B" : "128B");
}

CUtensorMap make_tma_map_u8(const void* base, const uint64_t (&dims)[4], const uint64_t (&strides_bytes)[3],
                            const uint32_t (&box)[4], int swizzle_bytes) {
  TmaTiledArgs args;
  const std::string why = tma_args_u8(base, dims, strides_bytes, box, swizzle_bytes, &args);
  if (!why.empty()) throw std::runtime_error(why);
  CUtensorMap map;
  encode_tma_tiled_u8(&map, base, args, swizzle_bytes);
  return map;
}

CUtensorMap make_tma_map_bshd(DType dtype, const void* base, int batch, int seqlen, int heads,
                              int head_dim, int64_t batch_stride, int64_t row_stride,
                              int64_t head_stride, int box_rows) {
  TmaTiledArgs args;
  const std::string why = tma_args_bshd(base, batch, seqlen, heads, head_dim, batch_stride,
                                        row_stride, head_stride, box_rows, &args);
  if (!why.empty()) throw std::runtime_error(why);
  CUtensorMap map;
  encode_tma_tiled(&map, dtype, base, args);
  return map;
}

CUtensorMap make_tma_map_tokens(DType dtype, const AttnParams& p, bool keys, const void* base,
                                int64_t batch_stride, int64_t row_stride, int64_t head_stride,
                                int box_rows, const void* fallback, int cols) {
  const int heads = keys ? p.heads_kv : p.heads_q;
  const int d = cols > 0 ? cols : p.head_dim;
  if (p.cu_seqlens_q == nullptr)
    return make_tma_map_bshd(dtype, base, p.batch, keys ? p.seqlen_k : p.seqlen_q, heads, d, batch_stride,
                             row_stride, head_stride, box_rows);
  const int tokens = keys ? p.total_k : p.total_q;
  if (tokens == 0)  // one row of valid memory, which no copy reads
    return make_tma_map_bshd(dtype, fallback, 1, 1, 1, d, d, d, d, box_rows);
  return make_tma_map_bshd(dtype, base, 1, tokens, heads, d, row_stride * tokens, row_stride, head_stride,
                           box_rows);
}
#endif

}  // namespace fl
