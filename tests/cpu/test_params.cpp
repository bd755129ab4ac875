// The kernel parameters from a problem (make_attn_params: the runner's DeviceProblem and the
// Python bindings both start from it) and the layout every rung reads (tensor_layout_reason:
// the bindings' check of a PyTorch tensor's pointer and strides).
#include <cmath>
#include <cstdint>

#include "catch_compat.h"
#include "flashladder/problem.h"

using namespace fl;

TEST_CASE("make_attn_params: shapes, mask, scale and dense strides", "[cpu][params]") {
  Problem p;
  p.batch = 3;
  p.seqlen_q = 67;
  p.seqlen_k = 131;
  p.heads_q = 8;
  p.heads_kv = 2;
  p.head_dim = 64;
  p.causal = true;
  p.dtype = DType::bf16;
  p.num_splits = 4;
  const AttnParams a = make_attn_params(p);
  REQUIRE(a.q == nullptr);
  REQUIRE(a.lse == nullptr);
  REQUIRE(a.workspace == nullptr);
  REQUIRE(a.block_table == nullptr);
  REQUIRE(a.page_size == 0);
  REQUIRE(a.batch == 3);
  REQUIRE(a.group == 4);
  REQUIRE(a.causal == 1);
  REQUIRE(a.causal_offset == 131 - 67);
  REQUIRE(a.dtype == static_cast<int>(DType::bf16));
  REQUIRE(a.num_splits == 4);
  REQUIRE(a.softmax_scale == p.scale());
  REQUIRE(std::abs(a.scale_log2 - 0.125f * 1.4426950408889634f) < 1e-7f);
  // [batch, seqlen, heads, head_dim], dense.
  REQUIRE(a.q_head_stride == 64);
  REQUIRE(a.q_row_stride == 8 * 64);
  REQUIRE(a.q_batch_stride == 67 * 8 * 64);
  REQUIRE(a.o_batch_stride == a.q_batch_stride);
  REQUIRE(a.k_row_stride == 2 * 64);
  REQUIRE(a.v_batch_stride == 131 * 2 * 64);
  p.softmax_scale = 0.5f;
  REQUIRE(make_attn_params(p).softmax_scale == 0.5f);
}

TEST_CASE("tensor_layout_reason: 16-byte rows and a 16-byte aligned base", "[cpu][params]") {
  alignas(16) static uint16_t storage[64];
  const void* base = storage;
  REQUIRE(tensor_layout_reason("q", base, 64 * 8 * 16, 8 * 16, 16) == "");
  // A permuted view (transformers' [batch, heads, seqlen, head_dim] seen as the ladder's layout).
  REQUIRE(tensor_layout_reason("k", base, 8 * 100 * 64, 64, 100 * 64) == "");
  const std::string misaligned = tensor_layout_reason("q", storage + 1, 1024, 128, 64);
  REQUIRE(misaligned.find("q: data pointer must be 16-byte aligned") == 0);
  REQUIRE(tensor_layout_reason("v", base, 1024, 132, 64).find("the seqlen stride must be a positive "
                                                              "multiple of 8") != std::string::npos);
  REQUIRE(tensor_layout_reason("v", base, 0, 128, 64).find("batch stride") != std::string::npos);
  REQUIRE(tensor_layout_reason("v", base, 1024, 128, -64).find("heads stride") != std::string::npos);
}
