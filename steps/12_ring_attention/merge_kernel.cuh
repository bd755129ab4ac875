/// @file steps/12_ring_attention/merge_kernel.cuh
/// @brief Rung 12's own kernel: the merge of one step's partial (O, LSE) into the rank's running
/// result.
///
/// The merge is rung 08's split combine one level up: a ring step is a "split" of the keys
/// (the K/V shard the rank holds at that step), the forward rung returns that split's
/// normalized O_s and LSE_s, and the merge folds it into a running (O, LSE) with the one rule
/// of softmax_math.h:
/// @code
///   // clang-format off
///   LSE = log(exp(LSE_acc) + exp(LSE_s))               lse_combine(LSE_acc, LSE_s, &w_acc, &w_s)
///   O   = w_acc O_acc + w_s O_s,   w_x = exp(LSE_x - LSE)
///   // clang-format on
/// @endcode
/// O_acc stays in fp32 for the whole ring; only the final O is rounded to 16 bits. Merging in
/// 16 bits would round P times (zhuzilin/ring-flash-attention warns of the loss). O_s itself
/// comes from the forward rung in 16 bits (the ladder's O is 16-bit), so each step's partial
/// is rounded once; the weights w_s sum to 1, so the merged error stays that of one rounding.
/// That is enough for O, not for the backward's D = rowsum(dO * O): with a backward to follow,
/// the rung also writes O_s in fp32 (AttnParams::o_fp32) and the merge reads that (o_part32).
///
/// The plan knows each row's first and last merge (ring_plan.h, MergePiece), so there is no
/// reset pass before the ring and no conversion pass after it: a first merge takes LSE_acc =
/// -inf and O_acc = 0 without reading them, a last merge writes the 16-bit O instead of O_acc.
/// Bytes per element of O over the P steps: 6 (first: read O_s, write O_acc) + 10 per middle
/// step + 8 (last: read O_s and O_acc, write O), instead of 4 + 10 P + 6 with the two passes.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "flashladder/dtype.cuh"
#include "flashladder/softmax_math.h"

namespace fl::ring {

/// Where one launch's partial result is and where it goes. The rank's shard has S_local rows;
/// the launch covered local query rows [q_begin, q_begin + q_len), and this merge takes its
/// rows [rows_begin, rows_begin + rows_len) (one MergePiece).
struct MergeArgs {
  const void* o_part;     ///< 16-bit [batch, S_local, heads, head_dim]: the launch's O rows
  const float* lse_part;  ///< fp32 [batch, heads, q_len]: dense, as the rung wrote it
  float* o_acc;           ///< fp32 [batch, S_local, heads, head_dim]
  float* lse_acc;         ///< fp32 [batch, heads, S_local]: the rank's LSE output
  void* o_out;            ///< null, or (the rows' last merge) the rank's 16-bit O: written instead
  bool first;             ///< the rows' first merge: O_acc and LSE_acc are not read
  int batch, heads, head_dim, s_local, q_begin, q_len, rows_begin, rows_len;
  /// A last merge also keeps O in fp32 in O_acc (a backward pass follows: its D = rowsum(dO * O)
  /// reads O before the rounding, ring_schedule.cu).
  bool keep_o_fp32 = false;
  /// Null, or the launch's O before its 16-bit rounding, fp32 dense [batch, q_len, heads,
  /// head_dim] (AttnParams::o_fp32): read instead of o_part. A backward pass follows: an O_acc
  /// merged from 16-bit partials carries their rounding into D, and on rows of many keys dQ's
  /// error grows with it (measured: README, "The backward pass").
  const float* o_part32 = nullptr;
};

constexpr int kMergeWarps = 8;  ///< rows per CTA: one warp per (batch, query, head) row

/// One warp per output row (b, i, h), rows ordered like O in memory (h fastest). Every lane
/// reads both LSEs and computes the same weights; lanes then take four columns at a time,
/// 4*lane, 4*lane + 128, ... (head_dim is a multiple of 8, the contract): one 8-byte load of O_s,
/// one 16-byte load and store of O_acc (or an 8-byte store of O) per lane and pass.
template <class T>
__global__ void __launch_bounds__(kMergeWarps * 32) merge_partial(MergeArgs a) {
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kMergeWarps + threadIdx.x / 32;
  if (row >= static_cast<int64_t>(a.batch) * a.rows_len * a.heads) return;
  const int h = static_cast<int>(row % a.heads);
  const int64_t bi = row / a.heads;
  const int i = static_cast<int>(bi % a.rows_len);
  const int b = static_cast<int>(bi / a.rows_len);
  const int li = a.rows_begin + i;  // the row in the rank's shard

  float* lse_acc_gmem = a.lse_acc + (static_cast<int64_t>(b) * a.heads + h) * a.s_local + li;
  const float lse_s =
      a.lse_part[(static_cast<int64_t>(b) * a.heads + h) * a.q_len + (li - a.q_begin)];
  float w_acc, w_s;
  const float lse_new = lse_combine(a.first ? -INFINITY : *lse_acc_gmem, lse_s, &w_acc, &w_s);

  const int64_t off = ((static_cast<int64_t>(b) * a.s_local + li) * a.heads + h) * a.head_dim;
  const T* o_s_gmem = static_cast<const T*>(a.o_part) + off;
  const float* o_s32_gmem =
      a.o_part32 ? a.o_part32 + ((static_cast<int64_t>(b) * a.q_len + (li - a.q_begin)) * a.heads + h) * a.head_dim
                 : nullptr;
  float* o_acc_gmem = a.o_acc + off;
  for (int c = 4 * lane; c < a.head_dim; c += 128) {
    float2 s01, s23;
    if (o_s32_gmem) {
      const float4 s = *reinterpret_cast<const float4*>(o_s32_gmem + c);
      s01 = make_float2(s.x, s.y);
      s23 = make_float2(s.z, s.w);
    } else {
      const uint2 s16 = *reinterpret_cast<const uint2*>(o_s_gmem + c);
      s01 = unpack2<T>(s16.x);
      s23 = unpack2<T>(s16.y);
    }
    float4 o = a.first ? make_float4(0.f, 0.f, 0.f, 0.f)
                       : *reinterpret_cast<const float4*>(o_acc_gmem + c);
    // w_s = 0 for a partial that saw no key: its O_s (0 by the contract) drops out.
    o.x = w_acc * o.x + (w_s == 0.f ? 0.f : w_s * s01.x);
    o.y = w_acc * o.y + (w_s == 0.f ? 0.f : w_s * s01.y);
    o.z = w_acc * o.z + (w_s == 0.f ? 0.f : w_s * s23.x);
    o.w = w_acc * o.w + (w_s == 0.f ? 0.f : w_s * s23.y);
    if (a.o_out)
      *reinterpret_cast<uint2*>(static_cast<T*>(a.o_out) + off + c) =
          make_uint2(pack2<T>(o.x, o.y), pack2<T>(o.z, o.w));
    if (!a.o_out || a.keep_o_fp32) *reinterpret_cast<float4*>(o_acc_gmem + c) = o;
  }
  __syncwarp();  // every lane has read the old LSE before lane 0 replaces it
  if (lane == 0) *lse_acc_gmem = lse_new;
}

template <class T>
void launch_merge(const MergeArgs& a, cudaStream_t s) {
  const int64_t rows = static_cast<int64_t>(a.batch) * a.rows_len * a.heads;
  if (rows == 0) return;
  const int64_t ctas = (rows + kMergeWarps - 1) / kMergeWarps;
  merge_partial<T><<<static_cast<unsigned>(ctas), kMergeWarps * 32, 0, s>>>(a);
}

}  // namespace fl::ring
