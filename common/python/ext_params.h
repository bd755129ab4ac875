/// @file common/python/ext_params.h
/// @brief The extension's launch parameters (flashladder_ext.cpp): a rung's AttnParams from the
/// data pointers and strides the Python layer passes, every stride and pointer checked first
/// against the layout every rung reads (fl::tensor_layout_reason); a refusal is a ValueError
/// whose message is the one-line reason.
#pragma once

#include <nanobind/nanobind.h>

#include <array>
#include <cstdint>
#include <string>

#include "flashladder/check.h"
#include "flashladder/problem.h"

namespace fl::pyext {

namespace nb = nanobind;

/// Strides of one [batch, seqlen, heads, head_dim] tensor, in elements, as PyTorch gives them.
using Strides4 = std::array<int64_t, 4>;

/// The layout check of one tensor of shape {batch, seqlen, heads, head_dim} with @p strides:
/// head_dim contiguous, then tensor_layout_reason on the strides of the other dimensions (a
/// dimension of size 1 gets its dense stride: PyTorch gives such a dimension any stride).
/// Fills @p out with (batch, row, head) strides when the tensor is fine.
inline std::string layout_reason(const std::string& name, uintptr_t ptr,
                                 const std::array<int64_t, 4>& shape, const Strides4& strides,
                                 std::array<int64_t, 3>* out = nullptr) {
  if (strides[3] != 1 && shape[3] != 1)
    return name + ": the last dimension (head_dim) must be contiguous (stride 1), got stride " +
           std::to_string(strides[3]) + "; call .contiguous()";
  std::array<int64_t, 3> s{};
  int64_t dense = shape[3];
  for (int i = 2; i >= 0; --i) {
    s[i] = shape[i] == 1 ? dense : strides[i];
    dense *= shape[i];
  }
  const std::string why =
      tensor_layout_reason(name.c_str(), reinterpret_cast<const void*>(ptr), s[0], s[1], s[2]);
  if (why.empty() && out) *out = s;
  return why;
}

/// Throws a ValueError with @p why unless it is empty.
inline void refuse_if(const std::string& why) {
  if (!why.empty()) throw nb::value_error(why.c_str());
}

/// The (batch, row, head) strides of one tensor; a ValueError if a rung cannot read it.
inline std::array<int64_t, 3> checked_strides(const char* name, uintptr_t ptr,
                                              const std::array<int64_t, 4>& shape,
                                              const Strides4& strides) {
  std::array<int64_t, 3> s{};
  refuse_if(layout_reason(name, ptr, shape, strides, &s));
  return s;
}

/// The shapes the checks read a tensor as: [batch, seqlen, heads, head_dim], or for a packed
/// batch (Problem::varlen) [1, tokens, heads, head_dim], the view of its [tokens, heads,
/// head_dim] tensor that the Python layer passes. @p cols: the last dimension, 0 for head_dim
/// (V and O pass Problem::dv()).
inline std::array<int64_t, 4> q_shape_of(const Problem& p, int cols = 0) {
  const int64_t d = cols > 0 ? cols : p.head_dim;
  return p.varlen() ? std::array<int64_t, 4>{1, p.total_q(), p.heads_q, d}
                    : std::array<int64_t, 4>{p.batch, p.seqlen_q, p.heads_q, d};
}
inline std::array<int64_t, 4> kv_shape_of(const Problem& p, int64_t pool_rows = 0, int cols = 0) {
  const int64_t d = cols > 0 ? cols : p.head_dim;
  if (p.page_size > 0) return {1, pool_rows, p.heads_kv, d};  // a page pool's rows
  return p.varlen() ? std::array<int64_t, 4>{1, p.total_k(), p.heads_kv, d}
                    : std::array<int64_t, 4>{p.batch, p.seqlen_k, p.heads_kv, d};
}

/// The device buffers beside Q, K, V, O and the LSE that a problem's mask, modifiers, packing
/// and KV cache need (each 0 when unused): cu_seqlens_q, cu_seqlens_k (int32, batch + 1), sinks
/// (fp32, heads_q), alibi_slopes (fp32, [heads_q] or [batch, heads_q]), seqused_k (int32,
/// batch), block_table (int32 [batch, pages per sequence], a paged cache), seqstart_k (int32,
/// batch: a left-padded cache's first slots), and for a paged cache its pool's rows (pages x
/// page_size).
struct Extras {
  uintptr_t cu_seqlens_q = 0, cu_seqlens_k = 0, sinks = 0, alibi_slopes = 0, seqused_k = 0,
            block_table = 0, seqstart_k = 0;
  int alibi_batch_stride = 0;
  int block_table_stride = 0;
  int64_t pool_rows = 0;
};

/// Extras from the Python call's arguments: ptrs (the seven buffers, in the order above) and ints
/// (alibi_batch_stride, block_table_stride, pool_rows).
inline Extras extras_of(const std::array<uintptr_t, 7>& ptrs, const std::array<int64_t, 3>& ints) {
  return {ptrs[0],
          ptrs[1],
          ptrs[2],
          ptrs[3],
          ptrs[4],
          ptrs[5],
          ptrs[6],
          static_cast<int>(ints[0]),
          static_cast<int>(ints[1]),
          ints[2]};
}

/// Checks @p e against @p p (one pointer per feature the problem has, none it lacks, each
/// aligned) and sets its pointers in @p a.
inline void set_extras(AttnParams* a, const Problem& p, const Extras& e) {
  auto need = [](const char* name, uintptr_t ptr, bool wanted, const char* what) {
    if (wanted && ptr == 0)
      refuse_if(std::string(name) + ": the problem has " + what + " but no buffer was given");
    if (!wanted && ptr != 0)
      refuse_if(std::string(name) + ": given, but the problem has no " + what);
    if (ptr % 4 != 0) refuse_if(std::string(name) + ": needs a 4-byte aligned buffer");
  };
  need("cu_seqlens_q", e.cu_seqlens_q, p.varlen(), "packed sequences");
  need("cu_seqlens_k", e.cu_seqlens_k, p.varlen(), "packed sequences");
  need("sinks", e.sinks, !p.sinks.empty(), "sinks");
  need("seqused_k", e.seqused_k, !p.seqused_k.empty(), "keys used per sequence");
  need("seqstart_k", e.seqstart_k, !p.seqstart_k.empty(), "first key slots per sequence");
  need("block_table", e.block_table, p.page_size > 0, "a paged cache");
  if (p.page_size > 0 &&
      (e.block_table_stride < (p.seqlen_k + p.page_size - 1) / p.page_size || e.pool_rows < 1))
    refuse_if(
        "block_table: [batch, pages per sequence] must cover seqlen_k, and the pool must have "
        "rows");
  if (e.alibi_slopes != 0 && !p.alibi)
    refuse_if("alibi_slopes: given, but the problem has no ALiBi");
  if (e.alibi_slopes % 4 != 0) refuse_if("alibi_slopes: needs a 4-byte aligned buffer");
  if (e.alibi_batch_stride != 0 && e.alibi_batch_stride != p.heads_q)
    refuse_if(
        "alibi_slopes: one slope per head ([heads_q]) or per sequence and head ([batch, heads_q])");
  a->cu_seqlens_q = reinterpret_cast<const int*>(e.cu_seqlens_q);
  a->cu_seqlens_k = reinterpret_cast<const int*>(e.cu_seqlens_k);
  a->sinks = reinterpret_cast<const float*>(e.sinks);
  a->alibi_slopes = reinterpret_cast<const float*>(e.alibi_slopes);
  a->alibi_batch_stride = e.alibi_batch_stride;
  a->seqused_k = reinterpret_cast<const int*>(e.seqused_k);
  a->seqstart_k = reinterpret_cast<const int*>(e.seqstart_k);
  a->block_table = reinterpret_cast<const int*>(e.block_table);
  a->block_table_stride = e.block_table_stride;
  if (p.page_size > 0) {  // the block table locates pages: no batch stride
    a->page_size = p.page_size;
    a->k_batch_stride = a->v_batch_stride = 0;
    a->num_pages = static_cast<int>(e.pool_rows / p.page_size);  // k's first dimension (rung 17's TMA map)
  }
}

/// The rule of Problem::v_in_k (MLA's latent cache): v is a view of k's first dv columns, the
/// same data pointer and the same (batch, row, head) strides, both read as k's shape (a dimension
/// of size 1 then gets one dense stride for both). "" when it holds, else why not.
inline std::string v_in_k_reason(uintptr_t k_ptr, const std::array<int64_t, 3>& k_strides, uintptr_t v_ptr,
                                 const std::array<int64_t, 3>& v_strides) {
  if (v_ptr != k_ptr || v_strides != k_strides)
    return "v: the problem has v_in_k (V is K's first dv columns) but v is not a view of k's first columns "
           "(the same data pointer and strides)";
  return "";
}

/// AttnParams for @p p (make_attn_params) with the tensors' pointers and strides: @p ptr holds
/// q, k, v, o, lse; @p strides q, k, v, o; @p e the buffers of the mask, modifiers and packing.
/// Every stride and pointer is checked first. V and O have dv() columns; with Problem::v_in_k
/// v must be k's first dv columns (v_in_k_reason), and gets k's strides, as the harness gives them.
inline AttnParams params_for(const Problem& p, const std::array<uintptr_t, 5>& ptr,
                             const std::array<Strides4, 4>& strides, const Extras& e) {
  const std::array<int64_t, 4> q_shape = q_shape_of(p);
  const std::array<int64_t, 4> kv_shape = kv_shape_of(p, e.pool_rows);
  const auto q = checked_strides("q", ptr[0], q_shape, strides[0]);
  const auto k = checked_strides("k", ptr[1], kv_shape, strides[1]);
  const auto v = checked_strides("v", ptr[2], p.v_in_k ? kv_shape : kv_shape_of(p, e.pool_rows, p.dv()), strides[2]);
  if (p.v_in_k) refuse_if(v_in_k_reason(ptr[1], k, ptr[2], v));
  const auto o = checked_strides("out", ptr[3], q_shape_of(p, p.dv()), strides[3]);
  if (ptr[4] == 0 || ptr[4] % 4 != 0) refuse_if("lse: needs a 4-byte aligned fp32 buffer");
  AttnParams a = make_attn_params(p);
  a.q = reinterpret_cast<const void*>(ptr[0]);
  a.k = reinterpret_cast<const void*>(ptr[1]);
  a.v = reinterpret_cast<const void*>(ptr[2]);
  a.o = reinterpret_cast<void*>(ptr[3]);
  a.lse = reinterpret_cast<float*>(ptr[4]);
  a.q_batch_stride = q[0], a.q_row_stride = q[1], a.q_head_stride = q[2];
  a.k_batch_stride = k[0], a.k_row_stride = k[1], a.k_head_stride = k[2];
  a.v_batch_stride = v[0], a.v_row_stride = v[1], a.v_head_stride = v[2];
  a.o_batch_stride = o[0], a.o_row_stride = o[1], a.o_head_stride = o[2];
  if (p.varlen()) a.q_batch_stride = a.k_batch_stride = a.v_batch_stride = a.o_batch_stride = 0;
  set_extras(&a, p, e);
  return a;
}

/// AttnParams::dropout of @p p with the generator state at @p state (the device {seed, offset},
/// int64, drawn by the package from PyTorch's generator): required with dropout, refused without.
inline void set_dropout(AttnParams* a, const Problem& p, uintptr_t state) {
  if (p.dropout() && state == 0)
    refuse_if("dropout_state: the problem has dropout but no generator state (a device int64 {seed, offset}) was given");
  if (!p.dropout() && state != 0) refuse_if("dropout_state: given, but the problem has no dropout");
  if (state % 8 != 0) refuse_if("dropout_state: needs an 8-byte aligned int64 buffer");
  a->dropout = make_dropout(p.dropout_p, 0, 0, reinterpret_cast<const int64_t*>(state));
}

/// AttnParams::o_fp32 from a data pointer (0: none); refuses one that is not 8-byte aligned (the
/// kernels move it in float2 pairs).
inline float* fp32_o_pointer(uintptr_t ptr) {
  if (ptr % 8 != 0) refuse_if("o_fp32: needs an 8-byte aligned fp32 buffer");
  return reinterpret_cast<float*>(ptr);
}

/// Refuses a workspace smaller than @p need bytes.
inline void check_workspace(uintptr_t ptr, size_t bytes, size_t need) {
  if (need > 0 && (ptr == 0 || bytes < need))
    refuse_if("workspace: the rung needs " + std::to_string(need) + " bytes, got " +
              std::to_string(ptr == 0 ? 0 : bytes));
}

}  // namespace fl::pyext
