/// @file problem.h
/// @brief The attention problem, its validation, the kernel parameter struct,
/// the device description and the metrics (FLOPs, bytes), each defined once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "flashladder/dropout.h"
#include "flashladder/masks.h"
#include "flashladder/types.h"

namespace fl {

/// Largest head_dim any rung accepts (rung 01 handles every value up to it), MLA's latent
/// cache aside.
constexpr int kMaxHeadDim = 256;
/// MLA's decode shape (DeepSeek-V2/V3, rung 17): every head attends over one compressed cache
/// row of 512 latent dims plus 64 RoPE dims (head_dim 576), and the values are that row's first
/// 512 dims (head_dim_v 512, Problem::v_in_k). The one head_dim above kMaxHeadDim the harness takes.
constexpr int kMlaHeadDim = 576;
constexpr int kMlaHeadDimV = 512;

/// One attention problem, laid out as flash_attn_func:
/// Q [batch, seqlen_q, heads_q, head_dim], K [batch, seqlen_k, heads_kv, head_dim],
/// V [batch, seqlen_k, heads_kv, dv()], O [batch, seqlen_q, heads_q, dv()].
struct Problem {
  int batch = 4;           ///< batch size
  int seqlen_q = 1024;     ///< query length
  int seqlen_k = 1024;     ///< key/value length
  int heads_q = 16;        ///< query heads
  int heads_kv = 16;       ///< key/value heads (divides heads_q: GQA/MQA)
  int head_dim = 64;       ///< head dimension of Q and K (QK^T's inner dimension)
  /// Head dimension of V, O, dO and dV when it differs from head_dim (MLA's prefill and training:
  /// 192/128; FlashAttention 3 takes any dv <= d, the harness any pair). 0: the same as head_dim.
  /// Read it through dv(). Only rungs with Rung::head_dim_v take dv != head_dim.
  int head_dim_v = 0;
  /// V is K's first dv() columns (MLA's compressed cache: one tensor holds keys and values; rung
  /// 17). The harness fills V from K and hands every rung K's buffer and strides as V's, so a
  /// rung that reads V through AttnParams::v reads K's columns; bytes count the cache once.
  /// Needs dv() <= head_dim; forward only.
  bool v_in_k = false;
  DType dtype = DType::fp16;  ///< storage type
  bool causal = false;     ///< bottom-right aligned causal mask
  float softmax_scale = 0; ///< 0 means 1/sqrt(head_dim)
  int num_splits = 0;      ///< split-KV count for decode rungs (0 = heuristic)
  int page_size = 0;       ///< paged KV cache page size in tokens (0 = contiguous)
  /// A variable-length batch (rungs with Rung::varlen; set_varlen() fills it): int32 prefix sums
  /// of the `batch` sequences' lengths, as flash_attn_varlen_func takes them. Sequence b's
  /// queries are tokens cu_seqlens_q[b] .. cu_seqlens_q[b + 1] - 1 of a packed
  /// [total_q, heads_q, head_dim] Q (and O), its keys likewise in K and V; seqlen_q and seqlen_k
  /// are then the longest lengths (max_seqlen_q/k). Empty: a dense batch.
  std::vector<int> cu_seqlens_q, cu_seqlens_k;

  // ---- masks and score modifiers beyond the causal mask (masks.h has their rules; only rungs
  // with Rung::mods take them, every other rung refuses with one line). All off by default.
  int window_left = -1;   ///< FlashAttention's window_size: query i sees keys from i + off - left
  int window_right = -1;  ///< ... up to i + off + right (off = len_k - len_q); -1: that side open
  int prefix = 0;         ///< prefix-LM: the first `prefix` keys are seen by every query
  /// Document mask (self-attention, len_q = len_k): each sequence's tokens form documents that
  /// start at these positions (0 first, the sequence's length last); tokens attend within theirs.
  std::vector<int> doc_starts;
  /// Keys used per sequence (a KV cache's lengths: flash_attn_with_kvcache's cache_seqlens,
  /// FlashAttention 3's seqused_k): sequence b sees keys 0 .. seqused_k[b] - 1 of its seqlen_k
  /// slots (packed: of its cu_seqlens_k run), its causal diagonal at seqused_k[b] - len_q.
  /// Empty: every slot. Rungs with Rung::seqused_k.
  std::vector<int> seqused_k;
  /// The first key slot per sequence (a left-padded cache: flash_attn_with_kvcache's
  /// cache_leftpad): sequence b's keys are slots seqstart_k[b] .. (seqused_k[b] or the last) - 1.
  /// Empty: slot 0. Rungs with Rung::seqused_k.
  std::vector<int> seqstart_k;
  float softcap = 0;      ///< cap · tanh(s / cap) on each scaled score (0: off)
  bool alibi = false;     ///< ALiBi: -slope_h · |i + off - j| added, the paper's slopes for heads_q
  /// Attention sinks (gpt-oss, FlashAttention 3's learnable sink): one logit per query head, in
  /// the units of a scaled score, that joins each row's softmax denominator and attends to no
  /// value: O_i = sum_j e^{s_ij} v_j / (e^{sink_h} + sum_j e^{s_ij}); the LSE includes it.
  /// Empty: off; else heads_q values.
  std::vector<float> sinks;
  /// Attention dropout (FlashAttention's dropout_p; dropout.h has the rule): each element of P is
  /// kept when its byte of Philox4x32 (under dropout_seed, dropout_offset and the element's
  /// coordinates) is at most floor((1 - dropout_p) 255), so with probability (t + 1) / 256 as in
  /// FlashAttention 2, and the kept ones are scaled by 1 / (1 - dropout_p). 0: off.
  /// Rungs with Rung::dropout only.
  float dropout_p = 0;
  uint64_t dropout_seed = 0;
  uint64_t dropout_offset = 0;
  /// The generator's rounds: kDropoutRounds (7, FlashAttention 2's), or 10 (Philox4x32-10, the
  /// ablation: `--dropout-rounds 10`).
  int dropout_rounds = kDropoutRounds;
  /// The mask's (sequence, head) numbers of a sub-problem cut out of a larger one (check_bwd.h's
  /// group_problem: a sampled (batch, KV head) group renumbers its sequences and heads): sequence
  /// b's head h draws the mask of dropout_bh0[b] + h. Empty: b x heads_q + h, its own numbering.
  std::vector<uint32_t> dropout_bh0;

  /// True when dropout is on.
  bool dropout() const { return dropout_p > 0; }
  /// The mask's key (dropout.h) of this problem's seed, offset and probability.
  DropoutKey dropout_key() const {
    return fl::dropout_key(dropout_seed, dropout_offset, keep_threshold(dropout_p), dropout_rounds);
  }
  /// Is element (query i, key j) of sequence b, head h kept? (dropout.h's dropout_keep; true when
  /// off)
  bool dropout_kept(int b, int h, int i, int j) const {
    if (!dropout()) return true;
    const uint32_t bh0 = dropout_bh0.empty() ? static_cast<uint32_t>(b) * static_cast<uint32_t>(heads_q)
                                             : dropout_bh0[static_cast<size_t>(b)];
    return dropout_keep_bh(dropout_key(), bh0 + static_cast<uint32_t>(h), i, j);
  }

  /// The scale actually used: softmax_scale, or 1/sqrt(head_dim) when 0 (Q and K's head_dim).
  float scale() const;
  /// Head dimension of V, O, dO and dV: head_dim_v, or head_dim when 0.
  int dv() const { return head_dim_v > 0 ? head_dim_v : head_dim; }
  /// heads_q / heads_kv.
  int group() const { return heads_q / heads_kv; }
  /// seqlen_k - seqlen_q: query i sees key j iff j <= i + causal_offset().
  int causal_offset() const { return seqlen_k - seqlen_q; }
  /// Number of keys query row i sees (0 ... seqlen_k) in a dense batch.
  int visible_keys(int i) const;

  // ---- one description of dense and variable-length batches: every CPU index goes through these
  /// True for a variable-length batch (cu_seqlens_q set).
  bool varlen() const { return !cu_seqlens_q.empty(); }
  /// Queries / keys of sequence @p b.
  int len_q(int b) const { return varlen() ? cu_seqlens_q[b + 1] - cu_seqlens_q[b] : seqlen_q; }
  int len_k(int b) const {
    const int start = seqstart_k.empty() ? 0 : seqstart_k[b];
    if (!seqused_k.empty()) return seqused_k[b] - start;
    return (varlen() ? cu_seqlens_k[b + 1] - cu_seqlens_k[b] : seqlen_k) - start;
  }
  /// Row of query i (key j) of sequence b in the [tokens, heads, head_dim] view of Q (of K):
  /// b * seqlen + i dense, cu_seqlens[b] + i packed.
  int64_t q_token(int b, int i) const {
    return varlen() ? static_cast<int64_t>(cu_seqlens_q[b]) + i : static_cast<int64_t>(b) * seqlen_q + i;
  }
  int64_t k_token(int b, int j) const {
    if (!seqstart_k.empty()) j += seqstart_k[b];
    return varlen() ? static_cast<int64_t>(cu_seqlens_k[b]) + j : static_cast<int64_t>(b) * seqlen_k + j;
  }
  /// Query / key tokens of the whole batch.
  int64_t total_q() const { return varlen() ? cu_seqlens_q.back() : static_cast<int64_t>(batch) * seqlen_q; }
  int64_t total_k() const { return varlen() ? cu_seqlens_k.back() : static_cast<int64_t>(batch) * seqlen_k; }
  /// Keys query i of sequence b sees: the causal mask is bottom-right aligned per sequence.
  int visible_keys(int b, int i) const;

  /// Any mask or modifier beyond the causal mask (window, prefix, documents, softcap, ALiBi, sinks).
  bool has_mods() const {
    return window_left >= 0 || window_right >= 0 || prefix > 0 || !doc_starts.empty() || softcap > 0 || alibi ||
           !sinks.empty();
  }
  /// The mask as masks.h describes it, the causal mask folded in as a right window of 0. Points
  /// into doc_starts: valid while this Problem is.
  MaskSpec mask_spec() const;
  /// The keys query i of sequence b sees, [lo, hi] (empty when lo > hi); without mods
  /// [0, visible_keys(b, i) - 1].
  KeySpan key_span(int b, int i) const;
  /// Score s (already scaled) of query i, key j of sequence b, head h after the modifiers:
  /// softcapping, then ALiBi's bias (FlashAttention's order).
  double modified_score(double s, int b, int h, int i, int j) const;
  /// d modified_score / d s (softcapping's derivative; the bias is a constant).
  double modified_score_grad(double s) const { return softcap_grad(s, softcap); }
  /// Index of (sequence b, head h, query i) in the LSE: [batch, heads_q, seqlen_q] dense,
  /// [heads_q, total_q] packed (flash_attn_varlen_func's layout).
  size_t lse_index(int b, int h, int i) const {
    return varlen() ? static_cast<size_t>(h) * total_q() + q_token(b, i)
                    : (static_cast<size_t>(b) * heads_q + h) * seqlen_q + i;
  }
  /// Elements of the LSE: batch x heads_q x seqlen_q dense, heads_q x total_q packed.
  size_t lse_elements() const { return static_cast<size_t>(heads_q) * total_q(); }

  /// Elements of Q (and of dQ): total_q x heads_q x head_dim.
  size_t q_elements() const { return static_cast<size_t>(total_q()) * heads_q * head_dim; }
  /// Elements of O (and of dO, the fp32 O): total_q x heads_q x dv(); q_elements() when dv = d.
  size_t o_elements() const { return static_cast<size_t>(total_q()) * heads_q * dv(); }
  /// Elements of a contiguous K (and of dK): total_k x heads_kv x head_dim.
  size_t kv_elements() const { return static_cast<size_t>(total_k()) * heads_kv * head_dim; }
  /// Elements of a contiguous V (and of dV): total_k x heads_kv x dv(); kv_elements() when dv = d.
  size_t v_elements() const { return static_cast<size_t>(total_k()) * heads_kv * dv(); }
  /// One-line description, e.g. "B=4 Sq=1024 Sk=1024 H=16/16 d=64 fp16 causal=0" (" dv=N" after
  /// d when V's head_dim differs).
  std::string describe() const;
};

/// MLA's decode problem (rung 17): @p batch sequences of @p seqlen_q queries x @p heads heads over
/// one latent cache of @p seqlen_k keys: head_dim kMlaHeadDim, V its first kMlaHeadDimV columns
/// (v_in_k), one KV head. The one place the tour, the graded parts and the tests make it.
Problem mla_problem(int batch, int seqlen_q, int seqlen_k, int heads, DType dtype, bool causal);

/// Makes @p p a variable-length batch of these sequences (@p lens_k empty: the same as
/// @p lens_q): batch, cu_seqlens_q/k and seqlen_q/k (the longest, at least 1) set.
void set_varlen(Problem* p, const std::vector<int>& lens_q, const std::vector<int>& lens_k = {});

/// Checks a problem against the contract; "" if valid, else a message naming
/// the offending flag (e.g. "--dim must be between 1 and 256, got 0"). head_dim_v: 0, or
/// 1 ... kMaxHeadDim and a multiple of 8, with any head_dim (dv > d as well as dv < d).
std::string validate(const Problem& p);

/// Parameters every kernel receives (plain data, passed by value).
/// Strides are in elements; the last dimension is contiguous.
struct AttnParams {
  const void* q;  ///< [batch, seqlen_q, heads_q, head_dim]
  const void* k;  ///< [batch, seqlen_k, heads_kv, head_dim], or a page pool when paged
  const void* v;  ///< like k, with head_dim_v columns
  void* o;        ///< like q, with head_dim_v columns
  float* lse;     ///< [batch, heads_q, seqlen_q], natural log; -inf for rows that see no key
  /// Optional (null: not written): O in fp32 before its 16-bit rounding, dense [batch, seqlen_q,
  /// heads_q, head_dim_v], written by the forward rungs that declare Rung::writes_o_fp32. The
  /// backward pass's D = rowsum(dO * O) reads it: from the 16-bit O, D carries O's rounding,
  /// which no row of dS cancels, and dQ's error grows with the keys a row sees (rung 11's README).
  float* o_fp32;

  int64_t q_batch_stride, q_row_stride, q_head_stride;
  int64_t k_batch_stride, k_row_stride, k_head_stride;
  int64_t v_batch_stride, v_row_stride, v_head_stride;
  int64_t o_batch_stride, o_row_stride, o_head_stride;

  int batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim;
  /// V's and O's head_dim (Problem::dv(): head_dim unless the problem gives V its own). Only rungs
  /// with Rung::head_dim_v are launched with head_dim_v != head_dim; the v_ and o_ strides count
  /// its columns.
  int head_dim_v;
  /// head_dim_v, or head_dim where a launch's parameters were made without it (0).
  FL_HD int dv() const { return head_dim_v > 0 ? head_dim_v : head_dim; }
  int group;          ///< heads_q / heads_kv
  int causal;         ///< 0 or 1
  int causal_offset;  ///< seqlen_k - seqlen_q
  int dtype;          ///< DType as int
  float softmax_scale;  ///< scale applied to QK^T
  float scale_log2;     ///< softmax_scale * log2(e), for exp2-based kernels

  void* workspace;          ///< rung-owned scratch (e.g. rung 01's S), may be null
  size_t workspace_bytes;   ///< its size
  /// 1: the workspace is the one the previous launch of this entry on this stream left, zeros
  /// before the first, kept by the caller (Rung::workspace_kept: the package's prepared launches);
  /// rung 15 then skips zeroing its counters, which its kernel puts back to zero as it ends. 0:
  /// the launch zeroes what it needs (the runner, every other caller).
  int workspace_kept;
  /// Optional, for a rung with Rung::split_counters (rung 08): that many int32 counters, zero when
  /// the launch starts (the caller's earlier launch on the stream zeroed them). The rung then
  /// merges its splits in the split kernel (its last CTA of each tile) and launches no combine.
  /// Null: the combine kernel, as the rung teaches it.
  int* split_counters;

  int num_splits;           ///< decode rungs: requested split count (0 = heuristic)
  int page_size;            ///< paged KV: tokens per page (0 = contiguous)
  const int* block_table;   ///< paged KV: [batch, pages_per_seq] page ids
  int block_table_stride;   ///< paged KV: pages_per_seq
  /// paged KV: pages in the pool (k's first dimension; the harness's pool has batch x
  /// block_table_stride). A kernel that maps the pool for TMA (rung 17) bounds it with this.
  int num_pages;

  // FP8 rungs (13) only, set by the harness's FP8 path (fp8_device.h); null and 0 elsewhere. q
  // and k then point to e4m3 copies (dense [batch, seqlen, heads, head_dim], one byte per
  // element, so the strides above count bytes too) and v to the transposed V, e4m3
  // [batch, heads_kv, head_dim, vt_seqlen] with its keys in vt_key_at() order (fp8.h).
  const float* q_descale;  ///< [batch, heads_kv]: Q = e4m3 x q_descale[b * heads_kv + head / group]
  const float* k_descale;  ///< [batch, heads_kv]: K = e4m3 x k_descale[b * heads_kv + kv head]
  const float* v_descale;  ///< [batch, heads_kv]: V likewise
  int vt_seqlen;           ///< row length of the transposed V: vt_row_length(seqlen_k)

  // Variable-length batches (rungs with Rung::varlen; null and 0 for a dense batch): device
  // copies of Problem::cu_seqlens_q/k (batch + 1 int32 each). Q, O and the LSE are then packed
  // as Problem::q_token and Problem::lse_index say, K and V as Problem::k_token, the batch
  // strides are 0, and seqlen_q/k are the longest sequences. causal_offset is unused: each
  // sequence's is len_k - len_q.
  const int* cu_seqlens_q;
  const int* cu_seqlens_k;
  int total_q, total_k;  ///< tokens of the packed Q and K

  // Masks and score modifiers (rungs with Rung::mods; masks.h has their rules, Problem's fields
  // their meaning). All off by default: -1, 0 and null.
  int window_left, window_right;  ///< FlashAttention's window_size; -1: that side open
  int prefix;                     ///< prefix-LM's bidirectional keys (0: off)
  const int* doc_starts;          ///< device copy of Problem::doc_starts (n_docs + 1), null: off
  int n_docs;
  float softcap;                  ///< cap of cap · tanh(s / cap) on the scaled score, 0: off
  int alibi;                      ///< 0 or 1: ALiBi's bias with alibi_slope(h, heads_q)
  /// ALiBi's slopes given per head (flash_attn_func's alibi_slopes, fp32 on the device): slope of
  /// (sequence b, head h) at alibi_slopes[b * alibi_batch_stride + h]; null: the paper's slopes.
  const float* alibi_slopes;
  int alibi_batch_stride;         ///< 0 for one slope per head, heads_q for [batch, heads_q]
  const float* sinks;             ///< device copy of Problem::sinks ([heads_q]), null: off
  const int* seqused_k;           ///< device copy of Problem::seqused_k ([batch]), null: off
  const int* seqstart_k;          ///< device copy of Problem::seqstart_k ([batch]), null: off
  /// Attention dropout (rungs with Rung::dropout; Problem::dropout_p): p = 0 off.
  DropoutParams dropout;
};

/// AttnParams for @p p with the shape, mask and scale fields filled (group, causal_offset,
/// softmax_scale and its log2(e) multiple, dtype, num_splits, head_dim_v) and the strides of dense
/// [batch, seqlen, heads, head_dim] tensors (V and O: head_dim_v columns); pointers, workspace and
/// paging null. The runner's DeviceProblem and the Python bindings both start from it, then set
/// their pointers (and the bindings their tensors' strides).
AttnParams make_attn_params(const Problem& p);

/// The Problem a launch's @p a describes (its shape, dtype, mask, scale, splits and paging): what a
/// rung's host policy (workspace layout, split counts) is computed from inside `launch_bwd`, the
/// same inputs as from the runner's Problem.
Problem problem_of(const AttnParams& a);

/// "" if a 16-bit [batch, seqlen, heads, head_dim] tensor named @p name at @p base, with these
/// strides in elements (head_dim contiguous), can be read and written by every rung, else a
/// one-line reason. The kernels move rows in 16-byte vectors (uint4, cp.async, ldmatrix) and the
/// Hopper rungs describe tensors to TMA, so the base must be 16-byte aligned and each stride a
/// positive multiple of 8 elements. The stride of a dimension of size 1 is never used: pass any
/// valid value for it (the bindings pass the dense one).
std::string tensor_layout_reason(const char* name, const void* base, int64_t batch_stride,
                                 int64_t row_stride, int64_t head_stride);

/// What a rung needs to know about the GPU (filled by the CUDA library,
/// constructed by hand in CPU tests).
struct DeviceInfo {
  std::string name;            ///< e.g. "NVIDIA H100 80GB HBM3"
  int cc_major = 0;            ///< compute capability
  int cc_minor = 0;
  int sm_count = 0;            ///< multiprocessors
  int clock_khz = 0;           ///< SM clock used for the peak rates
  int smem_per_block_optin = 0;  ///< opt-in dynamic shared memory per block (bytes)
  int smem_per_sm = 0;         ///< shared memory per SM (bytes)
  int regs_per_sm = 0;         ///< registers per SM
  int l2_bytes = 0;            ///< L2 size
  size_t mem_total = 0;        ///< global memory (bytes)
  size_t mem_free = 0;         ///< free global memory when queried (bytes)
  double peak_fp32_tflops = 0;    ///< FFMA peak: SMs x FP32 lanes x 2 x clock
  double peak_tensor_tflops = 0;  ///< dense fp16 tensor peak (fp32 accumulate)
  double peak_gbps = 0;           ///< DRAM bandwidth from bus width and memory clock
  int cuda_runtime_version = 0;   ///< e.g. 13000
  int driver_version = 0;

  /// "sm_90".
  std::string arch() const { return "sm_" + std::to_string(cc_major * 10 + cc_minor); }
};

/// Peak rates from compute capability, SM count and clocks (datasheet method:
/// units x 2 FLOP x clock; tests check it on fake devices).
void fill_peaks(DeviceInfo* d, int mem_clock_khz, int bus_width_bits);

/// Which ceiling a rung's "% of peak" is measured against.
enum class Peak {
  fp32_fma,      ///< CUDA-core rungs
  tensor_16bit,  ///< tensor-core rungs (DeviceInfo::peak_tensor_tflops)
  memory,        ///< decode: DRAM bandwidth
  tensor_fp8,    ///< FP8 tensor-core rungs: twice the 16-bit rate on Hopper (e4m3 at k32 per wgmma)
};

/// Number of (query, key) pairs that are not masked, over all batches and heads.
double unmasked_pairs(const Problem& p);
/// FLOPs = 2 * unmasked pairs * (head_dim + dv): QK^T (head_dim) and PV (dv), 2 FLOPs per MAC;
/// 4 * pairs * head_dim when dv = head_dim.
double attention_flops(const Problem& p);
/// Bytes = Q, K, V read once + O written once (16-bit storage; V and O at dv).
double attention_bytes(const Problem& p);
/// Bytes of K and V read once (the decode metric; V at dv).
double kv_bytes(const Problem& p);

}  // namespace fl
