/// @file metadata.h
/// @brief Metadata read on the device, made safe without a synchronization: cu_seqlens of a packed
/// batch, a cache's lengths, its left padding and its block table, each checked against its bound
/// by a small kernel that writes clamped copies (the rung then reads those, never past a tensor)
/// and records the first violation in page-locked host memory, which the host reads at its next
/// call (flashladder's check_errors()). The append of new keys into a cache goes through the same
/// checks: a write whose slot or page is out of bounds is skipped and recorded.
///
/// Why not check on the host: the lengths live on the GPU, and reading them costs a
/// synchronization per call; a serving loop that updates cache_seqlens in place every step (and a
/// CUDA graph, which cannot synchronize) would pay it every time. The cost here is one launch.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "flashladder/types.h"

namespace fl {

/// What went wrong first (MetadataError::code); 0: nothing.
enum MetadataCode : int {
  kMetaOk = 0,
  kCuSeqlensStart = 1,     ///< cu_seqlens_{q,k}[0] < 0
  kCuSeqlensDecrease = 2,  ///< cu_seqlens[b] < cu_seqlens[b - 1]
  kCuSeqlensTotal = 3,     ///< cu_seqlens[b] past the packed tensor's tokens
  kCuSeqlensMax = 4,       ///< a sequence longer than max_seqlen
  kCacheSeqlensNegative = 5,
  kCacheSeqlensCapacity = 6,  ///< cache_seqlens[b] + the new keys past the cache's slots
  kBlockTableEntry = 7,       ///< a used block_table entry outside the page pool
  kLeftpad = 8,               ///< cache_leftpad[b] outside [0, the sequence's keys]
  kCacheBatchIdx = 9,         ///< cache_batch_idx[b] outside the cache's rows
  kBlockTableCapacity = 10,   ///< a paged cache's kCacheSeqlensCapacity: past the table's columns x page
};

/// The first violation a check kernel saw: code, which side (0: q, 1: k, for cu_seqlens), the
/// batch index (and for the block table the column), the value and its bound.
struct MetadataError {
  int code;
  int side;
  int index;
  int column;
  long long value;
  long long bound;
};

/// Where the kernels record it: a device copy, whose code they claim with an atomic (the first
/// violation wins), and a page-locked, mapped host copy the winner then writes with plain stores,
/// which the host reads without a copy or a synchronization.
struct MetadataSink {
  MetadataError* dev;   ///< device memory
  MetadataError* host;  ///< the mapped host record's device address
};

/// The sink of device @p device (allocated once per device, kept for the process).
MetadataSink metadata_sink(int device);

/// The first violation recorded on device @p device since the last clear, in words ("" when
/// none reached the host yet), and with @p clear both records reset.
std::string metadata_error_text(int device, bool clear);

/// One side of a packed batch's cu_seqlens (@p cu, [batch + 1]) clamped into @p out: from >= 0,
/// non-decreasing, each length at most @p max_len, ending at most at @p total. @p record(code,
/// index, value, bound) is called for each violation (the kernels keep the first). Host and
/// device: the CPU test checks it on the host.
template <class Record>
FL_HD void clamp_cu_seqlens(const int* cu, int batch, long long total, long long max_len, int* out, Record&& record) {
  long long prev = cu[0];
  if (prev < 0) {
    record(kCuSeqlensStart, 0, prev, 0LL);
    prev = 0;
  }
  if (prev > total) {
    record(kCuSeqlensTotal, 0, prev, total);
    prev = total;
  }
  out[0] = static_cast<int>(prev);
  for (int b = 1; b <= batch; ++b) {
    long long x = cu[b];
    if (x < prev) {
      record(kCuSeqlensDecrease, b, x, prev);
      x = prev;
    }
    if (x - prev > max_len) {
      record(kCuSeqlensMax, b - 1, x - prev, max_len);
      x = prev + max_len;
    }
    if (x > total) {
      record(kCuSeqlensTotal, b, x, total);
      x = total;
    }
    out[b] = static_cast<int>(x);
    prev = x;
  }
}

/// A cache sequence's length before the append (@p len, the caller's) clamped so that it and
/// @p new_keys fit @p slots (new_keys <= slots); @p record(code, value, bound) on a violation.
template <class Record>
FL_HD long long clamp_cache_length(long long len, int new_keys, long long slots, Record&& record) {
  if (len < 0) {
    record(kCacheSeqlensNegative, len, 0LL);
    return 0;
  }
  if (len + new_keys > slots) {
    record(kCacheSeqlensCapacity, len + new_keys, slots);
    return slots - new_keys;
  }
  return len;
}

/// Where new key @p i of a sequence goes in the append: row (a page of the pool, or the cache's
/// row) and slot, or row -1 when the key is skipped: the sequence's caller length @p len with its
/// @p new_keys does not fit @p slots (skipped whole), or, paged (@p table_row: the sequence's row
/// of the caller's table, pages of @p page slots), its page is outside [0, @p pool_pages); or,
/// contiguous (@p table_row null), its cache row @p row is outside [0, @p pool_pages).
struct AppendTarget {
  long long row, slot;
};
FL_HD AppendTarget append_target(long long len, int i, int new_keys, long long slots, const int* table_row, int page,
                                 long long pool_pages, long long row) {
  if (len < 0 || len + new_keys > slots) return {-1, 0};
  const long long pos = len + i;
  if (table_row != nullptr) {
    const int e = table_row[pos / page];
    if (e < 0 || e >= pool_pages) return {-1, 0};
    return {e, pos % page};
  }
  if (row < 0 || row >= pool_pages) return {-1, 0};
  return {row, pos};
}

/// cu_seqlens_q and cu_seqlens_k ([batch + 1] int32 each) checked against total_q / total_k
/// and max_seqlen_q / max_seqlen_k; clamped copies (non-decreasing, from >= 0, each length at
/// most max_seqlen, ending at most at the total) in @p out_q, @p out_k.
void sanitize_cu_seqlens(const int* cu_q, const int* cu_k, int batch, int64_t total_q, int64_t total_k, int max_q,
                         int max_k, int* out_q, int* out_k, MetadataSink err, cudaStream_t stream);

/// A cache's metadata: @p seqlens (int32 [batch], the keys before the append) with @p new_keys
/// appended must fit @p slots; @p leftpad (int32 [batch] or null) within [0, the keys];
/// @p table (int32 [batch, columns] or null, row stride @p table_stride) entries of the used
/// columns inside [0, @p pool_pages). Writes the clamped lengths before the append
/// (@p out_seqlens), after it (@p out_used), the clamped left padding (@p out_leftpad, when
/// given) and the table with every entry outside the pool replaced by page 0 (@p out_table).
/// @p rows (int32 [batch] or null): cache_batch_idx, each inside [0, @p row_count); with it, the
/// table is the one made from those rows, and a violation is recorded as the row's, not the table's.
/// @p cu_lengths: the lengths are a paged flash_attn_varlen_func's (from cu_seqlens_k), and a
/// violation names them so.
void sanitize_cache(const int* seqlens, int new_keys, int batch, int64_t slots, const int* leftpad,
                    const int* table, int columns, int64_t table_stride, int page, int64_t pool_pages,
                    const int* rows, int64_t row_count, int* out_seqlens, int* out_used, int* out_leftpad,
                    int* out_table, MetadataSink err, cudaStream_t stream, bool cu_lengths = false);

/// What an append writes per element: a 16-bit copy into a 16-bit cache; an e4m3 copy into an e4m3
/// cache; or 16-bit new keys quantized into an e4m3 cache, x / descale rounded to e4m3 with the
/// cache's descales (fp32 [batch, heads], the ones its reader takes: rung 08's fp8-kv).
enum class AppendElems { copy16, copy8, fp16_to_e4m3, bf16_to_e4m3 };

/// The append, one launch: the new keys @p k and values @p v [batch, new_keys, heads, head_dim]
/// (16-bit, strides in elements) into @p k_cache and @p v_cache at each sequence's @p seqlens (the
/// caller's lengths before the append; a sequence whose keys would not fit the slots is skipped
/// whole, sanitize_cache recorded it): paged (@p raw_table, the caller's, pages of @p page slots:
/// caches [pages, page, heads, head_dim]; a page outside the pool is skipped, sanitize_cache
/// recorded it) or contiguous (caches [rows, slots, heads, head_dim], sequence b in row
/// @p rows[b], or row b when null; a row outside [0, @p pool_pages) is skipped and recorded here:
/// for a contiguous cache @p pool_pages is its rows). @p elems: the elements' kind (16-bit by
/// default; @p k_descale and @p v_descale for a quantizing append).
void append_cache(const void* k, const int64_t k_strides[4], void* k_cache, const int64_t k_cache_strides[4],
                  const void* v, const int64_t v_strides[4], void* v_cache, const int64_t v_cache_strides[4],
                  int batch, int new_keys, int heads, int head_dim, const int* seqlens, int64_t slots,
                  const int* raw_table, int64_t table_stride, int page, int64_t pool_pages, const int* rows,
                  MetadataSink err, cudaStream_t stream, AppendElems elems = AppendElems::copy16,
                  const float* k_descale = nullptr, const float* v_descale = nullptr);

/// sanitize_cache and append_cache in one launch (a serving step's first kernel: one launch fewer
/// on the host), for a cache without cache_batch_idx: the lengths, left padding and table checked
/// and clamped into @p out_*, and the new keys and values (when @p new_keys > 0) written at the
/// caller's lengths, each exactly as the two functions do. @p zero, @p zero_count: int32s the same
/// launch sets to 0 (the next launch's counters: rung 08's AttnParams::split_counters), or none.
void sanitize_and_append(const int* seqlens, int new_keys, int batch, int64_t slots, const int* leftpad,
                         const int* table, int columns, int64_t table_stride, int page, int64_t pool_pages,
                         int* out_seqlens, int* out_used, int* out_leftpad, int* out_table, const void* k,
                         const int64_t k_strides[4], void* k_cache, const int64_t k_cache_strides[4], const void* v,
                         const int64_t v_strides[4], void* v_cache, const int64_t v_cache_strides[4], int heads,
                         int head_dim, MetadataSink err, cudaStream_t stream, AppendElems elems = AppendElems::copy16,
                         const float* k_descale = nullptr, const float* v_descale = nullptr, int* zero = nullptr,
                         int zero_count = 0);

}  // namespace fl
