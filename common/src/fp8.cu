/// @file fp8.cu
/// @brief The harness's FP8 input path (fp8_device.h): amax, scales, the Hadamard rotation and
/// the e4m3 copies of Q, K and the transposed V. Plain CUDA (any architecture): the FP8 tensor
/// cores are rung 13's; this only prepares their inputs.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "flashladder/cuda_check.h"
#include "flashladder/dtype.cuh"
#include "flashladder/fp8_device.h"
#include "flashladder/static_switch.h"

namespace fl {
namespace {

constexpr int kThreads = 256;

/// One row of D = 32 E values, E per lane (lane l holds columns l E .. l E + E - 1).
template <int E>
struct Row {
  float x[E];
};

/// The row x D H / sqrt(32 E) in place: random signs, then the fast Walsh-Hadamard transform's
/// log2(32 E) butterfly stages, the first log2(E) inside each lane and the last five across
/// lanes (partner lane l ^ s holds the other half of each pair), then the normalization.
template <int E>
__device__ __forceinline__ void rotate(Row<E>& r, int lane, unsigned long long seed) {
#pragma unroll
  for (int e = 0; e < E; ++e) r.x[e] *= hadamard_sign(seed, lane * E + e);
#pragma unroll
  for (int h = 1; h < E; h *= 2)
#pragma unroll
    for (int i = 0; i < E; i += 2 * h)
#pragma unroll
      for (int j = i; j < i + h; ++j) {
        const float a = r.x[j], b = r.x[j + h];
        r.x[j] = a + b;
        r.x[j + h] = a - b;
      }
#pragma unroll
  for (int s = 1; s < 32; s *= 2)
#pragma unroll
    for (int e = 0; e < E; ++e) {
      const float other = __shfl_xor_sync(0xffffffffu, r.x[e], s);
      r.x[e] = (lane & s) ? other - r.x[e] : r.x[e] + other;
    }
  const float norm = rsqrtf(32.f * E);
#pragma unroll
  for (int e = 0; e < E; ++e) r.x[e] *= norm;
}

/// A 16-bit [batch, seqlen, heads, d] tensor as the quantize kernels walk it.
struct Src {
  const void* base;
  int batch, seqlen, heads;
  int64_t batch_stride, row_stride, head_stride;
  int group;     ///< heads per scale index (Q: heads_q / heads_kv; K, V: 1)
  int heads_kv;  ///< scale indices per batch
};

/// Rows in (batch, head, seqlen) order, so a warp's contiguous chunk of rows shares one scale.
struct RowIndex {
  int b, h, s;
};
__device__ __forceinline__ RowIndex row_index(const Src& t, long long r) {
  RowIndex i;
  i.s = static_cast<int>(r % t.seqlen);
  i.h = static_cast<int>((r / t.seqlen) % t.heads);
  i.b = static_cast<int>(r / (static_cast<long long>(t.seqlen) * t.heads));
  return i;
}
__device__ __forceinline__ int scale_index(const Src& t, const RowIndex& i, bool per_tensor) {
  return per_tensor ? 0 : i.b * t.heads_kv + i.h / t.group;
}

template <class T, int E>
__device__ __forceinline__ Row<E> load_row(const Src& t, const RowIndex& i, int lane) {
  const T* row = static_cast<const T*>(t.base) + i.b * t.batch_stride + i.s * t.row_stride + i.h * t.head_stride;
  Row<E> r;
#pragma unroll
  for (int e = 0; e < E; ++e) r.x[e] = to_float(row[lane * E + e]);
  return r;
}

/// Each warp takes a contiguous chunk of rows.
__device__ __forceinline__ void warp_chunk(long long rows, long long* begin, long long* end) {
  const long long warps = static_cast<long long>(gridDim.x) * (blockDim.x / 32);
  const long long w = (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const long long chunk = (rows + warps - 1) / warps;
  *begin = w * chunk;
  *end = min(rows, *begin + chunk);
}

/// amax[scale index] = max |x| over its rows (after the rotation when @p rotate_rows). Floats
/// >= 0 order like their bit patterns, so atomicMax on the bits is a float max.
template <class T, int E>
__global__ void amax_kernel(Src t, bool per_tensor, bool rotate_rows, unsigned long long seed, float* amax) {
  const int lane = threadIdx.x % 32;
  long long r0, r1;
  warp_chunk(static_cast<long long>(t.batch) * t.heads * t.seqlen, &r0, &r1);
  int cur = -1;
  float run = 0.f;
  for (long long r = r0; r < r1; ++r) {
    const RowIndex i = row_index(t, r);
    const int idx = scale_index(t, i, per_tensor);
    if (idx != cur) {
      if (cur >= 0 && lane == 0) atomicMax(reinterpret_cast<int*>(amax + cur), __float_as_int(run));
      cur = idx;
      run = 0.f;
    }
    Row<E> row = load_row<T, E>(t, i, lane);
    if (rotate_rows) rotate(row, lane, seed);
    float m = 0.f;
#pragma unroll
    for (int e = 0; e < E; ++e) m = fmaxf(m, fabsf(row.x[e]));
#pragma unroll
    for (int s = 16; s > 0; s /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, s));
    run = fmaxf(run, m);
  }
  if (cur >= 0 && lane == 0) atomicMax(reinterpret_cast<int*>(amax + cur), __float_as_int(run));
}

/// descale = amax / 448 (1 for an all-zero slice), per scale index; per tensor, every index
/// gets slot 0's.
__global__ void descale_kernel(const float* amax, float* descale, int n, bool per_tensor) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float a = amax[per_tensor ? 0 : i];
  descale[i] = a > 0.f ? a / kE4m3Max : 1.f;
}

/// Q or K to dense e4m3 [batch, seqlen, heads, d], rotated when @p rotate_rows.
template <class T, int E>
__global__ void quantize_rows_kernel(Src t, bool rotate_rows, unsigned long long seed, const float* descale,
                                     uint8_t* dst) {
  const int lane = threadIdx.x % 32;
  long long r0, r1;
  warp_chunk(static_cast<long long>(t.batch) * t.heads * t.seqlen, &r0, &r1);
  for (long long r = r0; r < r1; ++r) {
    const RowIndex i = row_index(t, r);
    const float inv = 1.f / descale[scale_index(t, i, false)];
    Row<E> row = load_row<T, E>(t, i, lane);
    if (rotate_rows) rotate(row, lane, seed);
    uint8_t* out = dst + ((static_cast<int64_t>(i.b) * t.seqlen + i.s) * t.heads + i.h) * (32 * E) + lane * E;
#pragma unroll
    for (int e = 0; e < E; ++e) out[e] = to_e4m3(row.x[e] * inv);
  }
}

/// V to e4m3 [batch, heads_kv, d, vt_seqlen]: 64 positions of one (batch, KV head) per block,
/// staged in shared memory so both the reads (along d) and the writes (along keys) are coalesced.
template <class T>
__global__ void quantize_vt_kernel(Src t, int D, int vt_seqlen, const float* descale, uint8_t* dst) {
  extern __shared__ uint8_t tile[];  // [D][64]
  const int pos0 = blockIdx.x * 64, h = blockIdx.y, b = blockIdx.z;
  const float inv = 1.f / descale[b * t.heads_kv + h];
  const T* base = static_cast<const T*>(t.base) + b * t.batch_stride + h * t.head_stride;
  for (int idx = threadIdx.x; idx < 64 * D; idx += blockDim.x) {
    const int pos = idx / D, c = idx % D;
    const int key = vt_key_at(pos0 + pos);
    const float v = key < t.seqlen ? to_float(base[key * t.row_stride + c]) : 0.f;
    tile[c * 64 + pos] = to_e4m3(v * inv);
  }
  __syncthreads();
  uint8_t* out = dst + (static_cast<int64_t>(b) * t.heads_kv + h) * D * vt_seqlen;
  for (int idx = threadIdx.x; idx < D * 16; idx += blockDim.x) {
    const int c = idx / 16, p4 = 4 * (idx % 16);
    if (pos0 + p4 < vt_seqlen)
      *reinterpret_cast<uint32_t*>(out + static_cast<int64_t>(c) * vt_seqlen + pos0 + p4) =
          *reinterpret_cast<const uint32_t*>(tile + c * 64 + p4);
  }
}

int grid_for(long long rows) {
  const long long warps_wanted = std::max(1LL, rows / 8);  // ~8 rows per warp
  return static_cast<int>(std::min<long long>(4096, (warps_wanted + kThreads / 32 - 1) / (kThreads / 32)));
}

template <class T, int E>
void amax_and_scales(const Src& t, bool per_tensor, bool rot, unsigned long long seed, float* amax,
                     cudaStream_t s) {
  const long long rows = static_cast<long long>(t.batch) * t.heads * t.seqlen;
  amax_kernel<T, E><<<grid_for(rows), kThreads, 0, s>>>(t, per_tensor, rot, seed, amax);
  FL_LAUNCH_CHECK("amax_kernel");
}

template <class T, int E>
void quantize_rows(const Src& t, bool rot, unsigned long long seed, const float* descale, uint8_t* dst,
                   cudaStream_t s) {
  const long long rows = static_cast<long long>(t.batch) * t.heads * t.seqlen;
  quantize_rows_kernel<T, E><<<grid_for(rows), kThreads, 0, s>>>(t, rot, seed, descale, dst);
  FL_LAUNCH_CHECK("quantize_rows_kernel");
}

/// Calls @p f with std::integral_constant<int, E>: the values per lane of a head_dim 64, 128 or
/// 256 row (one warp per row).
template <class F>
void with_lane_values(int head_dim, F&& f) {
  switch (head_dim) {
    case 64: f(std::integral_constant<int, 2>{}); break;
    case 128: f(std::integral_constant<int, 4>{}); break;
    case 256: f(std::integral_constant<int, 8>{}); break;
    default: throw std::invalid_argument("the FP8 quantize kernels take head_dim 64, 128 or 256");
  }
}

/// A paged cache's pool rows: every sequence's pages (DeviceProblem's layout).
size_t pool_rows(const Problem& p) {
  return static_cast<size_t>(p.batch) * ((p.seqlen_k + p.page_size - 1) / p.page_size) * p.page_size;
}

/// Elements of the cache mode's e4m3 K (and V): the pool's rows when paged, else dense.
size_t cache_elements(const Problem& p) {
  return p.page_size > 0 ? pool_rows(p) * p.heads_kv * p.head_dim : p.kv_elements();
}

/// The descales of scale indices [0, heads_kv) repeated for every sequence: a paged pool's rows
/// belong to no sequence in particular, so its scales are per KV head over the whole pool.
__global__ void broadcast_descale_kernel(float* descale, int batch, int heads_kv) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < heads_kv || i >= batch * heads_kv) return;
  descale[i] = descale[i % heads_kv];
}

}  // namespace

std::string DeviceFp8::supports(const Problem& p, const Fp8Options& o, bool kv_cache) {
  if (p.head_dim != 64 && p.head_dim != 128 && p.head_dim != 256)
    return "the FP8 quantize path takes head_dim 64, 128 or 256";
  if (p.page_size > 0 && !kv_cache) return "the FP8 quantize path takes a contiguous K/V (no --page-size)";
  if (p.dv() != p.head_dim) return "the FP8 quantize path takes one head_dim for Q, K and V (no --dim-v)";
  if (kv_cache && o.hadamard)
    return "an FP8 KV cache quantizes K and V alone: no --hadamard (Q stays 16-bit, so K cannot be rotated alone)";
  if (kv_cache && (p.varlen() || p.v_in_k)) return "an FP8 KV cache takes a dense batch and a V of its own";
  return "";
}

size_t DeviceFp8::device_bytes(const Problem& p, bool kv_cache) {
  const size_t n = static_cast<size_t>(p.batch) * p.heads_kv;
  if (kv_cache) return 2 * cache_elements(p) + 6 * n * sizeof(float);
  return p.q_elements() + p.kv_elements() +
         static_cast<size_t>(p.batch) * p.heads_kv * p.head_dim * vt_row_length(p.seqlen_k) + 6 * n * sizeof(float);
}

DeviceFp8::DeviceFp8(const Problem& p, const AttnParams& src, const Fp8Options& o, unsigned long long seed,
                     bool kv_cache)
    : p_(p), o_(o), seed_(seed), kv_cache_(kv_cache), src_(src) {
  if (const std::string why = supports(p, o, kv_cache); !why.empty()) throw std::invalid_argument(why);
  const size_t n = static_cast<size_t>(p.batch) * p.heads_kv;
  if (kv_cache) {
    // K and V in e4m3 with the 16-bit cache's layout and element strides (dense, or the pool's
    // rows read through the same block table); Q, O and the LSE as they are.
    k8_ = DeviceBuffer(cache_elements(p));
    v8_ = DeviceBuffer(cache_elements(p));
    amax_ = DeviceBuffer(3 * n * sizeof(float));
    descale_ = DeviceBuffer(3 * n * sizeof(float));
    params_ = src;
    params_.k = k8_.get();
    params_.v = v8_.get();
    params_.q_descale = nullptr;
    params_.k_descale = descale_.as<float>() + n;
    params_.v_descale = descale_.as<float>() + 2 * n;
    return;
  }
  const int vt = vt_row_length(p.seqlen_k);
  q8_ = DeviceBuffer(p.q_elements());
  k8_ = DeviceBuffer(p.kv_elements());
  vt8_ = DeviceBuffer(static_cast<size_t>(p.batch) * p.heads_kv * p.head_dim * vt);
  amax_ = DeviceBuffer(3 * n * sizeof(float));
  descale_ = DeviceBuffer(3 * n * sizeof(float));
  params_ = src;
  const AttnParams dense = make_attn_params(p);  // the e4m3 copies are dense
  params_.q = q8_.get();
  params_.k = k8_.get();
  params_.v = vt8_.get();
  params_.q_batch_stride = dense.q_batch_stride;
  params_.q_row_stride = dense.q_row_stride;
  params_.q_head_stride = dense.q_head_stride;
  params_.k_batch_stride = params_.v_batch_stride = dense.k_batch_stride;
  params_.k_row_stride = params_.v_row_stride = dense.k_row_stride;
  params_.k_head_stride = params_.v_head_stride = dense.k_head_stride;
  params_.q_descale = descale_.as<float>();
  params_.k_descale = descale_.as<float>() + n;
  params_.v_descale = descale_.as<float>() + 2 * n;
  params_.vt_seqlen = vt;
}

void DeviceFp8::quantize_cache(cudaStream_t s) {
  const Problem& p = p_;
  const int n = p.batch * p.heads_kv;
  const bool per_tensor = o_.scaling == Fp8Scaling::tensor;
  const bool paged = p.page_size > 0;
  // A paged pool is walked as one sequence of all its rows (its scales then per KV head, repeated
  // for every sequence below); a contiguous cache per (batch, KV head), as rung 13's K and V.
  const int batch = paged ? 1 : p.batch;
  const int rows = paged ? static_cast<int>(pool_rows(p)) : p.seqlen_k;
  const Src k{src_.k, batch, rows, p.heads_kv, paged ? 0 : src_.k_batch_stride, src_.k_row_stride,
              src_.k_head_stride, 1, p.heads_kv};
  const Src v{src_.v, batch, rows, p.heads_kv, paged ? 0 : src_.v_batch_stride, src_.v_row_stride,
              src_.v_head_stride, 1, p.heads_kv};
  const int filled = batch * p.heads_kv;  // scale indices the walk fills
  float* amax = amax_.as<float>();
  float* descale = descale_.as<float>();
  FL_CUDA_CHECK(cudaMemsetAsync(amax, 0, amax_.bytes(), s));
  FL_DTYPE_SWITCH(p.dtype, T, [&] {
    with_lane_values(p.head_dim, [&](auto e_tag) {
      constexpr int E = decltype(e_tag)::value;
      amax_and_scales<T, E>(k, per_tensor, false, seed_, amax + n, s);
      amax_and_scales<T, E>(v, per_tensor, false, seed_, amax + 2 * n, s);
      for (int i = 1; i < 3; ++i) {
        descale_kernel<<<(filled + 255) / 256, 256, 0, s>>>(amax + i * n, descale + i * n, filled, per_tensor);
        FL_LAUNCH_CHECK("descale_kernel");
      }
      quantize_rows<T, E>(k, false, seed_, descale + n, k8_.as<uint8_t>(), s);
      quantize_rows<T, E>(v, false, seed_, descale + 2 * n, v8_.as<uint8_t>(), s);
    });
  });
  if (paged)
    for (int i = 1; i < 3; ++i) {
      broadcast_descale_kernel<<<(n + 255) / 256, 256, 0, s>>>(descale + i * n, p.batch, p.heads_kv);
      FL_LAUNCH_CHECK("broadcast_descale_kernel");
    }
}

void DeviceFp8::quantize(cudaStream_t s) {
  if (kv_cache_) {
    quantize_cache(s);
    return;
  }
  const Problem& p = p_;
  const int n = p.batch * p.heads_kv;
  const bool per_tensor = o_.scaling == Fp8Scaling::tensor;
  const Src q{src_.q, p.batch, p.seqlen_q, p.heads_q, src_.q_batch_stride, src_.q_row_stride,
              src_.q_head_stride, p.group(), p.heads_kv};
  const Src k{src_.k, p.batch, p.seqlen_k, p.heads_kv, src_.k_batch_stride, src_.k_row_stride,
              src_.k_head_stride, 1, p.heads_kv};
  const Src v{src_.v, p.batch, p.seqlen_k, p.heads_kv, src_.v_batch_stride, src_.v_row_stride,
              src_.v_head_stride, 1, p.heads_kv};
  float* amax = amax_.as<float>();
  float* descale = descale_.as<float>();
  FL_CUDA_CHECK(cudaMemsetAsync(amax, 0, amax_.bytes(), s));
  FL_DTYPE_SWITCH(p.dtype, T, [&] {
    auto run = [&](auto e_tag) {
      constexpr int E = decltype(e_tag)::value;
      amax_and_scales<T, E>(q, per_tensor, o_.hadamard, seed_, amax, s);
      amax_and_scales<T, E>(k, per_tensor, o_.hadamard, seed_, amax + n, s);
      amax_and_scales<T, E>(v, per_tensor, false, seed_, amax + 2 * n, s);
      for (int i = 0; i < 3; ++i)
        descale_kernel<<<(n + 255) / 256, 256, 0, s>>>(amax + i * n, descale + i * n, n, per_tensor);
      FL_LAUNCH_CHECK("descale_kernel");
      quantize_rows<T, E>(q, o_.hadamard, seed_, descale, q8_.as<uint8_t>(), s);
      quantize_rows<T, E>(k, o_.hadamard, seed_, descale + n, k8_.as<uint8_t>(), s);
    };
    with_lane_values(p.head_dim, run);
    const dim3 grid(params_.vt_seqlen / 64 + (params_.vt_seqlen % 64 != 0), p.heads_kv, p.batch);
    quantize_vt_kernel<T><<<grid, kThreads, 64 * p.head_dim, s>>>(v, p.head_dim, params_.vt_seqlen,
                                                                  descale + 2 * n, vt8_.as<uint8_t>());
    FL_LAUNCH_CHECK("quantize_vt_kernel");
  });
}

void quantize_e4m3(const void* x, DType dtype, int batch, int seqlen, int heads, int head_dim,
                   const int64_t strides[3], int heads_kv, bool hadamard, unsigned long long seed, uint8_t* out,
                   float* amax, float* descale, cudaStream_t s) {
  if (batch < 1 || seqlen < 1 || heads < 1 || heads_kv < 1 || heads % heads_kv != 0)
    throw std::invalid_argument("quantize_e4m3: batch, seqlen, heads >= 1 and heads a multiple of heads_kv");
  const int n = batch * heads_kv;
  const Src t{x, batch, seqlen, heads, strides[0], strides[1], strides[2], heads / heads_kv, heads_kv};
  FL_CUDA_CHECK(cudaMemsetAsync(amax, 0, n * sizeof(float), s));
  FL_DTYPE_SWITCH(dtype, T, [&] {
    with_lane_values(head_dim, [&](auto e_tag) {
      constexpr int E = decltype(e_tag)::value;
      amax_and_scales<T, E>(t, false, hadamard, seed, amax, s);
      descale_kernel<<<(n + 255) / 256, 256, 0, s>>>(amax, descale, n, false);
      FL_LAUNCH_CHECK("descale_kernel");
      quantize_rows<T, E>(t, hadamard, seed, descale, out, s);
    });
  });
}

/// Positions of a V^T row per transpose_vt_kernel block: 128 bytes, a whole cache line per row.
constexpr int kTransposePositions = 128;

/// An e4m3 V to V^T (transpose_v_e4m3), 16 bytes per access both ways: the block's 128 positions
/// of one (batch, KV head), each thread loading 16 bytes of one key's row (positions fastest
/// across threads, so its byte writes into the staged [D][128] tile hit distinct banks) and then
/// storing 16 consecutive positions of one V^T row. Rows need 16-byte aligned starts (the caller
/// checks the strides); vt_seqlen is a multiple of 16.
__global__ void transpose_vt_kernel(const uint8_t* v, int D, int seqlen, int64_t batch_stride, int64_t row_stride,
                                    int64_t head_stride, int vt_seqlen, uint8_t* dst) {
  extern __shared__ uint8_t tile[];  // [D][kTransposePositions]
  constexpr int P = kTransposePositions;
  const int pos0 = blockIdx.x * P, h = blockIdx.y, b = blockIdx.z;
  const uint8_t* base = v + b * batch_stride + h * head_stride;
  const int chunks = D / 16;
  for (int idx = threadIdx.x; idx < P * chunks; idx += blockDim.x) {
    const int pos = idx % P, c16 = idx / P;
    const int key = vt_key_at(pos0 + pos);
    uint4 x = make_uint4(0, 0, 0, 0);
    if (key < seqlen) x = *reinterpret_cast<const uint4*>(base + static_cast<int64_t>(key) * row_stride + 16 * c16);
    const uint8_t* bytes = reinterpret_cast<const uint8_t*>(&x);
#pragma unroll
    for (int e = 0; e < 16; ++e) tile[(16 * c16 + e) * P + pos] = bytes[e];
  }
  __syncthreads();
  uint8_t* out = dst + (static_cast<int64_t>(b) * gridDim.y + h) * D * vt_seqlen;
  for (int idx = threadIdx.x; idx < D * (P / 16); idx += blockDim.x) {
    const int c = idx / (P / 16), p16 = 16 * (idx % (P / 16));
    if (pos0 + p16 < vt_seqlen)
      *reinterpret_cast<uint4*>(out + static_cast<int64_t>(c) * vt_seqlen + pos0 + p16) =
          *reinterpret_cast<const uint4*>(tile + c * P + p16);
  }
}

void transpose_v_e4m3(const uint8_t* v, int batch, int seqlen, int heads_kv, int head_dim, const int64_t strides[3],
                      int vt_seqlen, uint8_t* vt, cudaStream_t s) {
  if (batch < 1 || seqlen < 1 || heads_kv < 1 || vt_seqlen != vt_row_length(seqlen))
    throw std::invalid_argument("transpose_v_e4m3: batch, seqlen, heads_kv >= 1 and vt_seqlen = vt_row_length(seqlen)");
  if (head_dim != 64 && head_dim != 128 && head_dim != 256)
    throw std::invalid_argument("transpose_v_e4m3: head_dim 64, 128 or 256");
  if (reinterpret_cast<uintptr_t>(v) % 16 != 0 || reinterpret_cast<uintptr_t>(vt) % 16 != 0 || strides[0] % 16 != 0 ||
      strides[1] % 16 != 0 || strides[2] % 16 != 0)
    throw std::invalid_argument("transpose_v_e4m3: v, vt and v's strides must be 16-byte aligned");
  const dim3 grid((vt_seqlen + kTransposePositions - 1) / kTransposePositions, heads_kv, batch);
  transpose_vt_kernel<<<grid, kThreads, kTransposePositions * head_dim, s>>>(v, head_dim, seqlen, strides[0],
                                                                             strides[1], strides[2], vt_seqlen, vt);
  FL_LAUNCH_CHECK("transpose_vt_kernel");
}

HostInputs DeviceFp8::dequantized() const {
  const Problem& p = p_;
  if (kv_cache_) {
    // Q as it is (16-bit bits, dense); K and V e4m3 x descale per logical token, read through the
    // block table when paged.
    const int D = p.head_dim, n = p.batch * p.heads_kv;
    std::vector<float> descale(3 * n);
    descale_.download(descale.data(), descale.size() * sizeof(float));
    std::vector<uint8_t> k8(k8_.bytes()), v8(v8_.bytes());
    k8_.download(k8.data(), k8.size());
    v8_.download(v8.data(), v8.size());
    HostInputs in;
    in.q.resize(p.q_elements());
    FL_CUDA_CHECK(cudaMemcpy(in.q.data(), src_.q, in.q.size() * 2, cudaMemcpyDeviceToHost));
    std::vector<int> table;
    const int pps = p.page_size > 0 ? (p.seqlen_k + p.page_size - 1) / p.page_size : 0;
    if (p.page_size > 0) {
      table.resize(static_cast<size_t>(p.batch) * pps);
      FL_CUDA_CHECK(cudaMemcpy(table.data(), src_.block_table, table.size() * sizeof(int), cudaMemcpyDeviceToHost));
    }
    in.kf.resize(p.kv_elements());
    in.vf.resize(p.kv_elements());
    for (int b = 0; b < p.batch; ++b)
      for (int j = 0; j < p.seqlen_k; ++j) {
        const size_t row = p.page_size > 0
                               ? static_cast<size_t>(table[static_cast<size_t>(b) * pps + j / p.page_size]) * p.page_size +
                                     j % p.page_size
                               : static_cast<size_t>(b) * p.seqlen_k + j;
        for (int h = 0; h < p.heads_kv; ++h) {
          const size_t from = (row * p.heads_kv + h) * D;
          const size_t to = ((static_cast<size_t>(b) * p.seqlen_k + j) * p.heads_kv + h) * D;
          const float dk = descale[n + b * p.heads_kv + h], dv = descale[2 * n + b * p.heads_kv + h];
          for (int c = 0; c < D; ++c) {
            in.kf[to + c] = e4m3_to_float(k8[from + c]) * dk;
            in.vf[to + c] = e4m3_to_float(v8[from + c]) * dv;
          }
        }
      }
    return in;
  }
  const int D = p.head_dim, n = p.batch * p.heads_kv, vt = params_.vt_seqlen;
  std::vector<float> descale(3 * n);
  descale_.download(descale.data(), descale.size() * sizeof(float));
  std::vector<uint8_t> q8(q8_.bytes()), k8(k8_.bytes()), v8(vt8_.bytes());
  q8_.download(q8.data(), q8.size());
  k8_.download(k8.data(), k8.size());
  vt8_.download(v8.data(), v8.size());
  HostInputs in;
  in.qf.resize(q8.size());
  in.kf.resize(k8.size());
  in.vf.resize(p.kv_elements());
  for (int b = 0; b < p.batch; ++b)
    for (int s = 0; s < p.seqlen_q; ++s)
      for (int h = 0; h < p.heads_q; ++h) {
        const size_t base = ((static_cast<size_t>(b) * p.seqlen_q + s) * p.heads_q + h) * D;
        const float ds = descale[b * p.heads_kv + h / p.group()];
        for (int c = 0; c < D; ++c) in.qf[base + c] = e4m3_to_float(q8[base + c]) * ds;
      }
  for (int b = 0; b < p.batch; ++b)
    for (int s = 0; s < p.seqlen_k; ++s)
      for (int h = 0; h < p.heads_kv; ++h) {
        const size_t base = ((static_cast<size_t>(b) * p.seqlen_k + s) * p.heads_kv + h) * D;
        const float ds = descale[n + b * p.heads_kv + h];
        for (int c = 0; c < D; ++c) in.kf[base + c] = e4m3_to_float(k8[base + c]) * ds;
      }
  for (int b = 0; b < p.batch; ++b)
    for (int h = 0; h < p.heads_kv; ++h) {
      const float ds = descale[2 * n + b * p.heads_kv + h];
      for (int c = 0; c < D; ++c)
        for (int pos = 0; pos < vt; ++pos) {
          const int key = vt_key_at(pos);
          if (key >= p.seqlen_k) continue;
          const uint8_t x = v8[((static_cast<size_t>(b) * p.heads_kv + h) * D + c) * vt + pos];
          in.vf[((static_cast<size_t>(b) * p.seqlen_k + key) * p.heads_kv + h) * D + c] = e4m3_to_float(x) * ds;
        }
    }
  return in;
}

}  // namespace fl
