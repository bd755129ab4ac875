/// @file steps/11_backward/workspace.h
/// @brief Rung 11's workspace: how many dQ, dK/dV and D accumulators a launch needs, and where
/// each starts. Plain C++ (no CUDA), so the CPU tests check the layout (tests/cpu/test_bwd_workspace.cpp).
///
/// One fp32 buffer (AttnBwdParams::workspace), in this order, offsets in floats:
/// @code
///   // clang-format off
///   D            [batch, heads_q, seqlen_q]                          at 0
///   dQ acc.      [splits][batch, seqlen_q, heads_q, d]               at dq_acc_offset (a multiple of 32)
///   dK, dV       [2][kv_split][batch, seqlen_k, heads_kv, d]         at dkv_acc_offset (kv_split > 1 only)
///   exact D      [delta_splits][2][batch, heads_q, seqlen_q]         at delta_acc_offset (exact D pass only)
///   // clang-format on
/// @endcode
/// The counts depend on the problem and on the main kernel's BLOCK_N (@p block_n: the launch's
/// BwdTiles::kBlockN) alone, never on the device, so the workspace size and the order of every sum
/// repeat from run to run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "flashladder/problem.h"
#include "delta_policy.h"

namespace fl::bwd {

/// The most splits of the deterministic mode (each owns a dQ accumulator of the whole problem).
constexpr int kMaxDeterministicSplits = 8;

/// K/V blocks of @p block_n keys that cover the keys of @p p.
inline int kv_block_count(const Problem& p, int block_n) { return (p.seqlen_k + block_n - 1) / block_n; }

/// Splits of the deterministic mode: the K/V blocks are dealt round-robin to this many blocks,
/// each with its own dQ accumulator (a fixed function of the shape and the tile, so runs repeat
/// bit for bit).
inline int deterministic_splits(const Problem& p, int block_n) {
  const int n_kv_blocks = kv_block_count(p, block_n);
  return n_kv_blocks < kMaxDeterministicSplits ? n_kv_blocks : kMaxDeterministicSplits;
}

/// Where the dQ accumulator starts in the workspace, in floats: after D, rounded up to 32 floats
/// (128 bytes), so that the accumulator is aligned for the vector reductions whatever the number
/// of rows (an odd one would leave it 4-byte aligned).
inline size_t dq_acc_offset(const Problem& p) {
  const size_t rows = size_t(p.batch) * p.heads_q * p.seqlen_q;
  return (rows + 31) / 32 * 32;
}

/// How the query heads of a GQA group are dealt to blocks: the rung's choice (kv_splits), never
/// split (`nosplit`: one block per KV head, the group's heads in turn), or one query head per
/// block (`fullsplit`, FlashAttention-2's `dk_expanded`); `modeled` is rung 14's choice by a model
/// of its causal grid's schedule (its workspace.h), which rung 11 takes as `balanced`.
enum class GroupSplit { balanced, none, full, modeled };

/// Blocks the main kernel should have before the rung stops splitting a group: about two waves of
/// one block per SM on an H100 (132 SMs). A constant, not the device's SM count, so the workspace
/// size and the order of the sums depend on the problem alone.
constexpr int kSplitTargetBlocks = 256;

/// Slices of each GQA group (a divisor of heads_q / heads_kv): each slice's block adds its query
/// heads into its own fp32 partial dK, dV; 1 means dK, dV are written directly. The rung's
/// choice: the smallest divisor that gives the grid kSplitTargetBlocks blocks (the partial sums
/// cost memory traffic, so a grid that fills the GPU is not split further).
inline int kv_splits(const Problem& p, int block_n, bool deterministic, GroupSplit how) {
  const int group = p.heads_q / p.heads_kv;
  if (how == GroupSplit::none || group == 1) return 1;
  if (how == GroupSplit::full) return group;
  const int64_t blocks =
      int64_t(deterministic ? deterministic_splits(p, block_n) : kv_block_count(p, block_n)) * p.heads_kv * p.batch;
  for (int s = 1; s < group; ++s)
    if (group % s == 0 && blocks * s >= kSplitTargetBlocks) return s;
  return group;
}

/// The report's line for a GQA group of @p group query heads dealt to @p split blocks per KV head
/// (rungs 11 and 14 print it in their notes).
inline std::string group_split_note(int group, int split) {
  return "GQA group of " + std::to_string(group) + " query heads: " +
         (split == 1 ? std::string("one block per KV head, dK and dV written directly")
                     : std::to_string(split) + " blocks per KV head, fp32 partial dK, dV added by bwd_convert_kv");
}

/// Where the dK, dV partial sums start in the workspace, in floats: after the dQ accumulator(s)
/// (an even count: d is even, so float2-aligned).
inline size_t dkv_acc_offset(const Problem& p, int block_n, bool deterministic) {
  const size_t rows = size_t(p.batch) * p.heads_q * p.seqlen_q;
  const size_t splits = deterministic ? size_t(deterministic_splits(p, block_n)) : 1;
  return dq_acc_offset(p) + splits * rows * p.head_dim;
}

/// Accumulator pairs of the exact D pass (Σ P ∘ dP and Σ P per row): one per deterministic split,
/// else one (atomics), none without the pass; bwd_delta_sum_kernel turns them into D.
inline int delta_splits(const Problem& p, int block_n, bool deterministic, DeltaPolicy policy) {
  if (delta_source(policy, p.seqlen_k, true) != DeltaSource::exact) return 0;
  return deterministic ? deterministic_splits(p, block_n) : 1;
}

/// Where the dK, dV partial sums end and the exact pass's accumulators start.
inline size_t delta_acc_offset(const Problem& p, int block_n, bool deterministic, GroupSplit how) {
  const int kv_split = kv_splits(p, block_n, deterministic, how);
  const size_t part = kv_split > 1 ? 2 * size_t(kv_split) * p.batch * p.seqlen_k * p.heads_kv * p.head_dim : 0;
  return dkv_acc_offset(p, block_n, deterministic) + part;
}

/// Bytes of the workspace (the file comment's layout) for a main kernel of @p block_n keys per
/// block: what AttnBwdParams::workspace must hold (Rung::bwd_workspace_bytes).
inline size_t workspace_bytes(const Problem& p, int block_n, bool deterministic, GroupSplit how,
                              DeltaPolicy policy) {
  const size_t rows = size_t(p.batch) * p.heads_q * p.seqlen_q;
  return (delta_acc_offset(p, block_n, deterministic, how) +
          2 * size_t(delta_splits(p, block_n, deterministic, policy)) * rows) *
         sizeof(float);
}

}  // namespace fl::bwd
