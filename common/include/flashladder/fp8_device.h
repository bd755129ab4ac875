/// @file fp8_device.h
/// @brief The harness's FP8 input path on the GPU: e4m3 copies of a problem's 16-bit Q, K and V,
/// made by the quantize kernels in common/src/fp8.cu, for the rungs that read FP8
/// (Rung::fp8_inputs: rung 13; K and V alone for an FP8 KV cache, Rung::fp8_kv_cache: rung 08's
/// `fp8-kv`). The 16-bit originals stay where they are: the rung's baselines
/// run on them, and the end-to-end error is taken against them.
///
/// quantize() runs, on one stream:
/// @code
///   // clang-format off
///   1  amax of |Q|, |K|, |V| per (batch, KV head), or per tensor   (Q and K rotated first with --hadamard)
///   2  descale = amax / 448 (1 where amax = 0)
///   3  Q, K -> e4m3 [batch, seqlen, heads, d]        x * 448 / amax, rotated again with --hadamard
///      V    -> e4m3 [batch, heads_kv, d, vt_seqlen]  transposed (the FP8 wgmma reads V K-major),
///                                                    keys in vt_key_at() order, zero padding
///   // clang-format on
/// @endcode
/// Its time is what a user of rung 13 pays once per Q/K/V (the runner reports it beside the
/// kernel's).
#pragma once

#include <cuda_runtime_api.h>

#include "flashladder/device.h"
#include "flashladder/fp8.h"
#include "flashladder/inputs.h"
#include "flashladder/problem.h"

namespace fl {

/// The package's FP8 path (flashladder.fp8_quantize, flash_attn_func on e4m3 tensors), on tensors
/// it owns: @p x, a 16-bit [batch, seqlen, heads, head_dim] tensor (strides in elements: batch,
/// row, head; the last dimension contiguous), to dense e4m3 @p out with one descale per (batch,
/// KV head) in @p descale (amax / 448; @p amax is scratch of batch x heads_kv floats): Q's group of
/// heads_q / heads_kv heads shares one, FlashAttention 3's q_descale layout. @p hadamard: rows
/// rotated by D H / sqrt(head_dim) first (signs from @p seed), as the harness's --hadamard.
/// head_dim 64, 128 or 256. Asynchronous on @p s.
void quantize_e4m3(const void* x, DType dtype, int batch, int seqlen, int heads, int head_dim,
                   const int64_t strides[3], int heads_kv, bool hadamard, unsigned long long seed, uint8_t* out,
                   float* amax, float* descale, cudaStream_t s);

/// An e4m3 V [batch, seqlen, heads_kv, head_dim] (strides in elements: batch, row, head) to the
/// transposed layout rung 13 reads, [batch, heads_kv, head_dim, @p vt_seqlen] with its keys in
/// vt_key_at() order and zero padding (@p vt_seqlen = vt_row_length(seqlen)). Asynchronous on @p s.
void transpose_v_e4m3(const uint8_t* v, int batch, int seqlen, int heads_kv, int head_dim, const int64_t strides[3],
                      int vt_seqlen, uint8_t* vt, cudaStream_t s);

/// e4m3 Q, K, transposed V and their descales for one problem; or, in the cache mode
/// (Rung::fp8_kv_cache: rung 08's FP8 KV cache), e4m3 K and V alone in their own layout, Q left
/// 16-bit.
class DeviceFp8 {
 public:
  /// Allocates for @p p; @p src holds the 16-bit Q, K, V (pointers and strides; contiguous K/V,
  /// or in the cache mode a contiguous or paged cache). @p seed draws the Hadamard signs. Throws
  /// std::invalid_argument for what supports() refuses.
  DeviceFp8(const Problem& p, const AttnParams& src, const Fp8Options& o, unsigned long long seed,
            bool kv_cache = false);
  /// Quantizes @p src's tensors into the e4m3 buffers (asynchronous on @p s).
  void quantize(cudaStream_t s = nullptr);
  /// @p src's params with q, k, v and the descales pointing at the FP8 buffers.
  const AttnParams& params() const { return params_; }
  /// The values the kernel computes with (e4m3 x descale), dense [batch, seqlen, heads, d] in
  /// HostInputs::qf, kf, vf (V un-transposed): what the check's references read.
  HostInputs dequantized() const;
  /// Device bytes of the FP8 copies and scales.
  static size_t device_bytes(const Problem& p, bool kv_cache = false);
  /// "" if the quantize kernels handle @p p (with @p o), else why not: head_dim 64, 128 or 256
  /// (one warp per row, a power of two for the rotation), one head_dim for Q, K and V; a
  /// contiguous K/V, or in the cache mode a paged one too but no rotation (Q stays 16-bit, so K
  /// cannot be rotated alone).
  static std::string supports(const Problem& p, const Fp8Options& o = Fp8Options{}, bool kv_cache = false);

 private:
  /// The cache mode's K and V: their 16-bit rows as the quantize kernels walk them (a paged pool
  /// as one sequence of all its rows) and the scale indices per batch they fill.
  void quantize_cache(cudaStream_t s);

  Problem p_;
  Fp8Options o_;
  unsigned long long seed_;
  bool kv_cache_;
  AttnParams src_{}, params_{};
  DeviceBuffer q8_, k8_, vt8_, v8_, amax_, descale_;
};

}  // namespace fl
