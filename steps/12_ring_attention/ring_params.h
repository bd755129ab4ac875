/// @file steps/12_ring_attention/ring_params.h
/// @brief Host side of rung 12 that needs no GPU: a launch of the plan as the AttnParams the
/// forward rung takes (pointers into the shards, their strides), and the copies between the
/// whole sequence and a rank's shard (inputs out, O and LSE back). The CPU tests check them.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "../11_backward/delta_policy.h"
#include "flashladder/problem.h"
#include "flashladder/ring_plan.h"

namespace fl::ring {

// The plan's copy of the row length rung 11 trusts D from the fp32 O (ring_plan.h keeps its own:
// common/ includes nothing from steps/).
static_assert(kTrustedDeltaKeys == bwd::kExactDeltaKeys,
              "ring_plan.h's kTrustedDeltaKeys is rung 11's");

/// Elements of one token's row: heads x head_dim.
inline int64_t row_elems(int heads, int head_dim) {
  return static_cast<int64_t>(heads) * head_dim;
}

/// The forward rung's parameters for launch @p l of a ring step. @p p is the whole problem
/// (its scale is kept: a chunk problem must not fall back to a different default). The rank's
/// Q shard and partial O are [batch, s_local, heads_q, head_dim]; the K/V shard it holds has
/// kv_len rows, K then V in one buffer, each [batch, kv_len, heads_kv, head_dim]. The launch
/// writes its LSE densely as [batch, heads_q, l.q.len] at @p lse_part.
inline AttnParams launch_params(const Problem& p, const Launch& l, int s_local, int kv_len,
                                const void* q_shard, const void* kv_shard, void* o_part,
                                float* lse_part, void* workspace, size_t workspace_bytes) {
  Problem lp = p;
  lp.seqlen_q = l.q.len;
  lp.seqlen_k = l.k.len;
  lp.causal = l.causal;
  lp.softmax_scale = p.scale();
  AttnParams a = make_attn_params(lp);  // shape, mask (causal_offset = k.len - q.len), scale
  const int64_t q_row = row_elems(p.heads_q, p.head_dim);
  const int64_t kv_row = row_elems(p.heads_kv, p.head_dim);
  const auto* q16 = static_cast<const uint16_t*>(q_shard);
  const auto* k16 = static_cast<const uint16_t*>(kv_shard);
  const uint16_t* v16 = k16 + static_cast<int64_t>(p.batch) * kv_len * kv_row;
  a.q = q16 + l.q.begin * q_row;
  a.o = static_cast<uint16_t*>(o_part) + l.q.begin * q_row;
  a.k = k16 + l.k.begin * kv_row;
  a.v = v16 + l.k.begin * kv_row;
  a.q_batch_stride = a.o_batch_stride = s_local * q_row;
  a.q_row_stride = a.o_row_stride = q_row;
  a.q_head_stride = a.o_head_stride = p.head_dim;
  a.k_batch_stride = a.v_batch_stride = kv_len * kv_row;
  a.k_row_stride = a.v_row_stride = kv_row;
  a.k_head_stride = a.v_head_stride = p.head_dim;
  a.lse = lse_part;
  a.workspace = workspace;
  a.workspace_bytes = workspace_bytes;
  return a;
}

/// The rows of @p shard out of a whole [batch, n, heads, head_dim] tensor (@p heads per row),
/// as a dense [batch, shard.len, heads, head_dim] tensor.
template <class E>
std::vector<E> take_shard(const std::vector<E>& whole, int batch, int n, int heads, int head_dim,
                          const Shard& shard) {
  const int64_t row = row_elems(heads, head_dim);
  std::vector<E> out(static_cast<size_t>(batch) * shard.len * row);
  for (int b = 0; b < batch; ++b)
    for (const LocalChunk& lc : shard.chunks)
      if (lc.global.len > 0)
        std::memcpy(&out[(static_cast<int64_t>(b) * shard.len + lc.local) * row],
                    &whole[(static_cast<int64_t>(b) * n + lc.global.begin) * row],
                    sizeof(E) * lc.global.len * row);
  return out;
}

/// The inverse of take_shard: a rank's O rows back into the whole [batch, n, heads, head_dim].
template <class E>
void put_shard(const std::vector<E>& part, int batch, int n, int heads, int head_dim,
               const Shard& shard, std::vector<E>* whole) {
  const int64_t row = row_elems(heads, head_dim);
  for (int b = 0; b < batch; ++b)
    for (const LocalChunk& lc : shard.chunks)
      if (lc.global.len > 0)
        std::memcpy(&(*whole)[(static_cast<int64_t>(b) * n + lc.global.begin) * row],
                    &part[(static_cast<int64_t>(b) * shard.len + lc.local) * row],
                    sizeof(E) * lc.global.len * row);
}

/// A rank's LSE [batch, heads, shard.len] back into the whole [batch, heads, n].
inline void put_shard_lse(const std::vector<float>& part, int batch, int n, int heads,
                          const Shard& shard, std::vector<float>* whole) {
  for (int b = 0; b < batch; ++b)
    for (int h = 0; h < heads; ++h)
      for (const LocalChunk& lc : shard.chunks)
        if (lc.global.len > 0)
          std::memcpy(&(*whole)[(static_cast<int64_t>(b) * heads + h) * n + lc.global.begin],
                      &part[(static_cast<int64_t>(b) * heads + h) * shard.len + lc.local],
                      sizeof(float) * lc.global.len);
}

}  // namespace fl::ring
