/// @file metadata.cu
/// @brief metadata.h: the check kernels (cu_seqlens, a cache's lengths, left padding and block
/// table), their clamped copies, the cache append, and the error record. Plain CUDA, any
/// architecture: a few integers per sequence, and the append's copies.
#include <cuda_runtime.h>

#include <cstdint>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "flashladder/cuda_check.h"
#include "flashladder/dtype.cuh"
#include "flashladder/metadata.h"

namespace fl {
namespace {

struct Records {
  MetadataError* dev = nullptr;
  MetadataError* host = nullptr;      ///< page-locked, mapped
  MetadataError* host_dev = nullptr;  ///< its device address
};

std::mutex g_mutex;
std::unordered_map<int, Records> g_records;

Records& records_of(int device) {
  std::lock_guard<std::mutex> lock(g_mutex);
  Records& r = g_records[device];
  if (r.dev == nullptr) {
    int current = 0;
    FL_CUDA_CHECK(cudaGetDevice(&current));
    FL_CUDA_CHECK(cudaSetDevice(device));
    FL_CUDA_CHECK(cudaMalloc(&r.dev, sizeof(MetadataError)));
    FL_CUDA_CHECK(cudaMemset(r.dev, 0, sizeof(MetadataError)));
    FL_CUDA_CHECK(cudaHostAlloc(&r.host, sizeof(MetadataError), cudaHostAllocMapped | cudaHostAllocPortable));
    *r.host = MetadataError{};
    FL_CUDA_CHECK(cudaHostGetDevicePointer(&r.host_dev, r.host, 0));
    FL_CUDA_CHECK(cudaSetDevice(current));
  }
  return r;
}

/// The first violation wins the device record's code; it then writes both records, the host's
/// code last, after a system fence, so that a host that sees the code sees the rest.
__device__ void record(MetadataSink s, int code, int side, int index, int column, long long value,
                       long long bound) {
  if (atomicCAS(&s.dev->code, 0, code) != 0) return;
  s.dev->side = side;
  s.dev->index = index;
  s.dev->column = column;
  s.dev->value = value;
  s.dev->bound = bound;
  volatile MetadataError* h = s.host;
  h->side = side;
  h->index = index;
  h->column = column;
  h->value = value;
  h->bound = bound;
  __threadfence_system();
  h->code = code;
}

/// One thread per side (q, k): clamp_cu_seqlens (metadata.h).
__global__ void sanitize_cu_seqlens_kernel(const int* cu_q, const int* cu_k, int batch, long long total_q,
                                           long long total_k, int max_q, int max_k, int* out_q, int* out_k,
                                           MetadataSink err) {
  const int side = threadIdx.x;
  if (side > 1) return;
  clamp_cu_seqlens(side == 0 ? cu_q : cu_k, batch, side == 0 ? total_q : total_k, side == 0 ? max_q : max_k,
                   side == 0 ? out_q : out_k, [&](int code, int index, long long value, long long bound) {
                     record(err, code, side, index, 0, value, bound);
                   });
}

/// sanitize_cache's arguments, as its kernel and the fused one pass them.
struct CacheCheck {
  const int* seqlens;
  int new_keys;
  long long slots;
  const int* leftpad;
  const int* table;
  int columns;
  long long table_stride;
  int page;
  long long pool_pages;
  const int* rows;
  long long row_count;
  int* out_seqlens;
  int* out_used;
  int* out_leftpad;
  int* out_table;
  int lengths_side;
};

/// Sequence @p b's check, by one block: its length (thread 0) and its row of the table (every thread).
__device__ void check_cache_row(const CacheCheck& c, int b, MetadataSink err) {
  const int* seqlens = c.seqlens;
  const int new_keys = c.new_keys, columns = c.columns, page = c.page, lengths_side = c.lengths_side;
  const long long slots = c.slots, table_stride = c.table_stride, pool_pages = c.pool_pages, row_count = c.row_count;
  const int *leftpad = c.leftpad, *table = c.table, *rows = c.rows;
  int *out_seqlens = c.out_seqlens, *out_used = c.out_used, *out_leftpad = c.out_leftpad, *out_table = c.out_table;
  // new_keys <= slots: the host checks it. Every thread computes the length; thread 0 records
  // (side 1: the lengths are cu_seqlens_k's, a paged flash_attn_varlen_func's).
  auto rec = [&](int code, long long value, long long bound) {
    if (threadIdx.x != 0) return;
    if (code == kCacheSeqlensCapacity && table != nullptr)  // the table's capacity: name it
      record(err, kBlockTableCapacity, lengths_side, b, columns, value, bound);
    else
      record(err, code, lengths_side, b, 0, value, bound);
  };
  const long long len = clamp_cache_length(seqlens[b], new_keys, slots, rec);
  const long long used = len + new_keys;
  if (threadIdx.x == 0) {
    if (rows != nullptr && (rows[b] < 0 || rows[b] >= row_count))
      record(err, kCacheBatchIdx, 0, b, 0, rows[b], row_count);
    out_seqlens[b] = static_cast<int>(len);
    out_used[b] = static_cast<int>(used);
    if (leftpad != nullptr) {
      long long pad = leftpad[b];
      if (pad < 0 || pad > used) {
        record(err, kLeftpad, 0, b, 0, pad, used);
        pad = pad < 0 ? 0 : used;
      }
      out_leftpad[b] = static_cast<int>(pad);
    }
  }
  if (table == nullptr) return;
  const long long used_columns = (used + page - 1) / page;
  for (int j = threadIdx.x; j < columns; j += blockDim.x) {
    const int e = table[b * table_stride + j];
    const bool inside = e >= 0 && e < pool_pages;
    if (!inside && j < used_columns && rows == nullptr) record(err, kBlockTableEntry, 0, b, j, e, pool_pages);
    out_table[static_cast<long long>(b) * columns + j] = inside ? e : 0;
  }
}

/// One block per sequence.
__global__ void sanitize_cache_kernel(CacheCheck c, MetadataSink err) { check_cache_row(c, blockIdx.x, err); }

/// One side of the append: the new rows and the cache they go into (strides in elements), and for
/// a quantizing append the cache's descales (fp32 [batch, heads], one per sequence and head).
struct AppendSide {
  const void* src;
  long long s0, s1, s2, s3;
  void* dst;
  long long d0, d1, d2, d3;
  const float* descale;
};

/// The append's arguments (append_cache). Its threads copy the heads' rows, one element at a time
/// (AppendElems: 16-bit, e4m3, or 16-bit quantized into an e4m3 cache).
/// @p seqlens: the caller's lengths before the append, unclamped, so that a sequence that would
/// not fit is skipped whole.
struct Append {
  AppendSide keys, values;
  int heads, head_dim, new_keys;
  const int* seqlens;
  long long slots;
  const int* table;
  long long table_stride;
  int page;
  long long pool_pages;
  const int* rows;
  AppendElems elems;
};

/// Element @p from of @p a's source written as element @p to of its cache, for sequence @p b and
/// head @p h: a copy (16-bit, e4m3), or x / descale rounded to e4m3 (to_e4m3, the package's one
/// quantizer: the product with 1 / descale, as fp8_quantize makes a cache).
__device__ __forceinline__ void append_elem(const AppendSide& a, AppendElems elems, long long from, long long to,
                                            int b, int heads, int h) {
  switch (elems) {
    case AppendElems::copy16:
      static_cast<uint16_t*>(a.dst)[to] = static_cast<const uint16_t*>(a.src)[from];
      return;
    case AppendElems::copy8:
      static_cast<uint8_t*>(a.dst)[to] = static_cast<const uint8_t*>(a.src)[from];
      return;
    case AppendElems::fp16_to_e4m3:
    case AppendElems::bf16_to_e4m3: {
      const float x = elems == AppendElems::fp16_to_e4m3
                          ? to_float(static_cast<const __half*>(a.src)[from])
                          : to_float(static_cast<const __nv_bfloat16*>(a.src)[from]);
      static_cast<uint8_t*>(a.dst)[to] = to_e4m3(x * (1.f / a.descale[static_cast<long long>(b) * heads + h]));
      return;
    }
  }
}

/// New key @p i of sequence @p b, on side @p side (0 keys, 1 values), by one block.
__device__ void append_row(const Append& p, int i, int b, int side, MetadataSink err) {
  const AppendSide& a = side == 0 ? p.keys : p.values;
  const int* table = p.table;
  const long long pool_pages = p.pool_pages;
  const long long cache_row = p.rows != nullptr ? p.rows[b] : b;
  const AppendTarget to = append_target(p.seqlens[b], i, p.new_keys, p.slots,
                                        table != nullptr ? table + b * p.table_stride : nullptr, p.page, pool_pages,
                                        cache_row);
  if (to.row < 0) {
    // A contiguous cache's row outside it is recorded here; the rest sanitize_cache recorded.
    if (table == nullptr && (cache_row < 0 || cache_row >= pool_pages) && i == 0 && side == 0 && threadIdx.x == 0)
      record(err, kCacheBatchIdx, 0, b, 0, cache_row, pool_pages);
    return;
  }
  const long long row = to.row, slot = to.slot;
  const int head_dim = p.head_dim;
  const long long n = static_cast<long long>(p.heads) * head_dim;
  for (long long t = threadIdx.x; t < n; t += blockDim.x) {
    const long long h = t / head_dim, c = t % head_dim;
    append_elem(a, p.elems, b * a.s0 + i * a.s1 + h * a.s2 + c * a.s3,
                row * a.d0 + slot * a.d1 + h * a.d2 + c * a.d3, b, p.heads, static_cast<int>(h));
  }
}

/// One block per (new key, sequence, side: keys or values); its threads copy the heads' rows.
__global__ void append_cache_kernel(Append p, MetadataSink err) {
  append_row(p, blockIdx.x, blockIdx.y, blockIdx.z, err);
}

/// The check and the append in one launch (a serving step's first kernel): blocks [0, batch)
/// check one sequence each, the rest append one (new key, sequence, side) each. The two read
/// only the caller's metadata, never each other's output, so they need no order between them.
__global__ void check_and_append_kernel(CacheCheck c, Append p, int batch, MetadataSink err, int* zero,
                                        int zero_count) {
  const int blk = blockIdx.x;
  if (blk == 0)  // the counters the next launch takes, zeroed (sanitize_and_append's @p zero)
    for (int i = threadIdx.x; i < zero_count; i += blockDim.x) zero[i] = 0;
  if (blk < batch) {
    check_cache_row(c, blk, err);
    return;
  }
  const int j = blk - batch;  // (side, sequence, new key), the new key fastest
  const int i = j % p.new_keys, rest = j / p.new_keys;
  append_row(p, i, rest % batch, rest / batch, err);
}

/// A quantizing append needs both descales.
void check_elems(AppendElems elems, const float* k_descale, const float* v_descale) {
  const bool quantizes = elems == AppendElems::fp16_to_e4m3 || elems == AppendElems::bf16_to_e4m3;
  if (quantizes && (k_descale == nullptr || v_descale == nullptr))
    throw std::invalid_argument("append into an e4m3 cache: the cache's k_descale and v_descale are needed");
}

AppendSide side_of(const void* src, const int64_t s[4], void* dst, const int64_t d[4], const float* descale) {
  return {src, s[0], s[1], s[2], s[3], dst, d[0], d[1], d[2], d[3], descale};
}

const char* side_name(int side) { return side == 0 ? "q" : "k"; }

CacheCheck cache_check(const int* seqlens, int new_keys, int64_t slots, const int* leftpad, const int* table,
                       int columns, int64_t table_stride, int page, int64_t pool_pages, const int* rows,
                       int64_t row_count, int* out_seqlens, int* out_used, int* out_leftpad, int* out_table,
                       bool cu_lengths) {
  return {seqlens,    new_keys, slots,       leftpad,  table,       columns,       table_stride, page,
          pool_pages, rows,     row_count,   out_seqlens, out_used, out_leftpad, out_table,   cu_lengths ? 1 : 0};
}

}  // namespace

MetadataSink metadata_sink(int device) {
  Records& r = records_of(device);
  return {r.dev, r.host_dev};
}

std::string metadata_error_text(int device, bool clear) {
  Records& r = records_of(device);
  volatile MetadataError* h = r.host;
  const int code = h->code;
  if (code == kMetaOk) return std::string();  // every call asks: no stream built for nothing
  std::ostringstream out;
  const long long value = h->value, bound = h->bound;
  const int index = h->index, side = h->side, column = h->column;
  switch (code) {
    case kMetaOk:
      break;
    case kCuSeqlensStart:
      out << "cu_seqlens_" << side_name(side) << "[0] is " << value << ", below 0";
      break;
    case kCuSeqlensDecrease:
      out << "cu_seqlens_" << side_name(side) << " decreases: entry " << index << " is " << value
          << ", below the entry before it (" << bound << ")";
      break;
    case kCuSeqlensTotal:
      out << "cu_seqlens_" << side_name(side) << "[" << index << "] is " << value << ", past " << side_name(side)
          << "'s " << bound << " tokens";
      break;
    case kCuSeqlensMax:
      out << "sequence " << index << " has " << value << " " << (side == 0 ? "queries" : "keys")
          << ", more than max_seqlen_" << side_name(side) << " = " << bound;
      break;
    case kCacheSeqlensNegative:
      out << "cache_seqlens[" << index << "] is " << value << ", below 0";
      break;
    case kCacheSeqlensCapacity:
      out << "cache_seqlens[" << index << "] plus the new keys is " << value << ", past the cache's " << bound
          << " slots";
      break;
    case kBlockTableEntry:
      out << "block_table[" << index << ", " << column << "] is " << value << ", outside the pool's " << bound
          << " pages";
      break;
    case kLeftpad:
      out << "cache_leftpad[" << index << "] is " << value << ", outside [0, " << bound << "]";
      break;
    case kBlockTableCapacity:
      if (side == 1)
        out << "sequence " << index << " has " << value << " keys (cu_seqlens_k), past the block_table's capacity of ";
      else
        out << "cache_seqlens[" << index << "] plus the new keys is " << value << ", past the block_table's capacity of ";
      out << bound << " slots (" << column << " columns x " << (column > 0 ? bound / column : 0) << " per page)";
      break;
    case kCacheBatchIdx:
      out << "cache_batch_idx[" << index << "] is " << value << ", outside the cache's " << bound << " rows";
      break;
    default:
      out << "metadata error " << code;
  }
  if (clear && code != kMetaOk) {
    int current = 0;
    FL_CUDA_CHECK(cudaGetDevice(&current));
    FL_CUDA_CHECK(cudaSetDevice(device));
    FL_CUDA_CHECK(cudaDeviceSynchronize());  // no kernel of the erring call still writing
    FL_CUDA_CHECK(cudaMemset(r.dev, 0, sizeof(MetadataError)));
    h->code = 0;
    FL_CUDA_CHECK(cudaSetDevice(current));
  }
  return out.str();
}

void sanitize_cu_seqlens(const int* cu_q, const int* cu_k, int batch, int64_t total_q, int64_t total_k, int max_q,
                         int max_k, int* out_q, int* out_k, MetadataSink err, cudaStream_t stream) {
  sanitize_cu_seqlens_kernel<<<1, 32, 0, stream>>>(cu_q, cu_k, batch, total_q, total_k, max_q, max_k, out_q, out_k,
                                                   err);
  FL_LAUNCH_CHECK("sanitize_cu_seqlens_kernel");
}

void sanitize_cache(const int* seqlens, int new_keys, int batch, int64_t slots, const int* leftpad, const int* table,
                    int columns, int64_t table_stride, int page, int64_t pool_pages, const int* rows,
                    int64_t row_count, int* out_seqlens, int* out_used, int* out_leftpad, int* out_table,
                    MetadataSink err, cudaStream_t stream, bool cu_lengths) {
  if (batch <= 0) return;
  if (new_keys < 0 || new_keys > slots) throw std::invalid_argument("sanitize_cache: new keys past the cache's slots");
  if (table != nullptr && page <= 0) throw std::invalid_argument("sanitize_cache: a block table needs a page size");
  sanitize_cache_kernel<<<batch, 128, 0, stream>>>(
      cache_check(seqlens, new_keys, slots, leftpad, table, columns, table_stride, page, pool_pages, rows, row_count,
                  out_seqlens, out_used, out_leftpad, out_table, cu_lengths),
      err);
  FL_LAUNCH_CHECK("sanitize_cache_kernel");
}

void append_cache(const void* k, const int64_t k_strides[4], void* k_cache, const int64_t k_cache_strides[4],
                  const void* v, const int64_t v_strides[4], void* v_cache, const int64_t v_cache_strides[4],
                  int batch, int new_keys, int heads, int head_dim, const int* seqlens, int64_t slots,
                  const int* raw_table, int64_t table_stride, int page, int64_t pool_pages, const int* rows,
                  MetadataSink err, cudaStream_t stream, AppendElems elems, const float* k_descale,
                  const float* v_descale) {
  if (batch <= 0 || new_keys <= 0) return;
  check_elems(elems, k_descale, v_descale);
  if (batch > 65535) throw std::invalid_argument("append_cache: more than 65535 sequences in one call");
  const dim3 grid(static_cast<unsigned>(new_keys), static_cast<unsigned>(batch), 2);
  append_cache_kernel<<<grid, 128, 0, stream>>>(
      Append{side_of(k, k_strides, k_cache, k_cache_strides, k_descale),
             side_of(v, v_strides, v_cache, v_cache_strides, v_descale), heads, head_dim, new_keys, seqlens, slots,
             raw_table, table_stride, page, pool_pages, rows, elems},
      err);
  FL_LAUNCH_CHECK("append_cache_kernel");
}

void sanitize_and_append(const int* seqlens, int new_keys, int batch, int64_t slots, const int* leftpad,
                         const int* table, int columns, int64_t table_stride, int page, int64_t pool_pages,
                         int* out_seqlens, int* out_used, int* out_leftpad, int* out_table, const void* k,
                         const int64_t k_strides[4], void* k_cache, const int64_t k_cache_strides[4], const void* v,
                         const int64_t v_strides[4], void* v_cache, const int64_t v_cache_strides[4], int heads,
                         int head_dim, MetadataSink err, cudaStream_t stream, AppendElems elems,
                         const float* k_descale, const float* v_descale, int* zero, int zero_count) {
  if (batch <= 0) return;
  if (zero_count < 0 || (zero_count > 0 && zero == nullptr))
    throw std::invalid_argument("sanitize_and_append: counters to zero without a pointer");
  if (new_keys > 0) check_elems(elems, k_descale, v_descale);
  if (new_keys < 0 || new_keys > slots) throw std::invalid_argument("sanitize_and_append: new keys past the cache's slots");
  if (table != nullptr && page <= 0) throw std::invalid_argument("sanitize_and_append: a block table needs a page size");
  const long long blocks = static_cast<long long>(batch) * (1 + 2LL * new_keys);
  if (blocks > 0x7fffffffLL) throw std::invalid_argument("sanitize_and_append: more than 2^31 - 1 blocks in one call");
  const CacheCheck c = cache_check(seqlens, new_keys, slots, leftpad, table, columns, table_stride, page, pool_pages,
                                   nullptr, 0, out_seqlens, out_used, out_leftpad, out_table, false);
  const Append a{side_of(k, k_strides, k_cache, k_cache_strides, k_descale),
                 side_of(v, v_strides, v_cache, v_cache_strides, v_descale),
                 heads, head_dim, new_keys, seqlens, slots, table, table_stride, page, pool_pages, nullptr, elems};
  check_and_append_kernel<<<static_cast<unsigned>(blocks), 128, 0, stream>>>(c, a, batch, err, zero, zero_count);
  FL_LAUNCH_CHECK("check_and_append_kernel");
}

}  // namespace fl
