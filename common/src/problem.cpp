#include "flashladder/problem.h"

#include "flashladder/backward.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace fl {

float Problem::scale() const {
  return softmax_scale > 0 ? softmax_scale : 1.0f / std::sqrt(static_cast<float>(head_dim));
}

int Problem::visible_keys(int i) const {
  if (!causal) return seqlen_k;
  const long long last = static_cast<long long>(i) + causal_offset();  // last visible key
  return static_cast<int>(std::clamp<long long>(last + 1, 0, seqlen_k));
}

int Problem::visible_keys(int b, int i) const {
  const int lk = len_k(b);
  if (!causal) return lk;
  const long long last = static_cast<long long>(i) + lk - len_q(b);  // last visible key
  return static_cast<int>(std::clamp<long long>(last + 1, 0, lk));
}

MaskSpec Problem::mask_spec() const {
  return make_mask_spec(causal, window_left, window_right, prefix, doc_starts.empty() ? nullptr : doc_starts.data(),
                        static_cast<int>(doc_starts.size()) - 1);
}

KeySpan Problem::key_span(int b, int i) const {
  if (!has_mods()) return {0, visible_keys(b, i) - 1};
  return row_span(mask_spec(), len_q(b), len_k(b), i);
}

double Problem::modified_score(double s, int b, int h, int i, int j) const {
  const double capped = fl::softcap(s, softcap);
  return alibi ? capped + alibi_bias(alibi_slope(h, heads_q), len_q(b), len_k(b), i, j) : capped;
}

void set_varlen(Problem* p, const std::vector<int>& lens_q, const std::vector<int>& lens_k) {
  const std::vector<int>& lk = lens_k.empty() ? lens_q : lens_k;
  auto prefix = [](const std::vector<int>& lens, std::vector<int>* cu, int* longest) {
    cu->assign(1, 0);
    *longest = 1;
    for (int n : lens) {
      cu->push_back(cu->back() + n);
      *longest = std::max(*longest, n);
    }
  };
  p->batch = static_cast<int>(lens_q.size());
  prefix(lens_q, &p->cu_seqlens_q, &p->seqlen_q);
  prefix(lk, &p->cu_seqlens_k, &p->seqlen_k);
}

Problem mla_problem(int batch, int seqlen_q, int seqlen_k, int heads, DType dtype, bool causal) {
  Problem p;
  p.batch = batch;
  p.seqlen_q = seqlen_q;
  p.seqlen_k = seqlen_k;
  p.heads_q = heads;
  p.heads_kv = 1;
  p.head_dim = kMlaHeadDim;
  p.head_dim_v = kMlaHeadDimV;
  p.v_in_k = true;
  p.dtype = dtype;
  p.causal = causal;
  return p;
}

std::string Problem::describe() const {
  std::ostringstream s;
  s << "B=" << batch << " Sq=" << seqlen_q << " Sk=" << seqlen_k << " H=" << heads_q << "/"
    << heads_kv << " d=" << head_dim;
  if (dv() != head_dim) s << " dv=" << dv();
  if (v_in_k) s << " v=k[:dv]";
  s << " " << dtype_name(dtype) << " causal=" << (causal ? 1 : 0);
  if (varlen()) s << " varlen tokens=" << total_q() << "/" << total_k();
  if (page_size > 0) s << " page=" << page_size;
  if (num_splits > 0) s << " splits=" << num_splits;
  if (window_left >= 0 || window_right >= 0) s << " window=(" << window_left << "," << window_right << ")";
  if (prefix > 0) s << " prefix=" << prefix;
  if (!doc_starts.empty()) s << " docs=" << doc_starts.size() - 1;
  if (softcap > 0) s << " softcap=" << softcap;
  if (alibi) s << " alibi";
  if (!sinks.empty()) s << " sinks";
  if (dropout()) s << " dropout=" << dropout_p;
  if (dropout() && dropout_rounds != kDropoutRounds) s << " philox_rounds=" << dropout_rounds;
  if (!seqused_k.empty()) s << " seqused_k";
  if (!seqstart_k.empty()) s << " seqstart_k";
  return s.str();
}

std::string validate(const Problem& p) {
  auto bad = [](const char* flag, const std::string& what, long long got) {
    return std::string(flag) + " " + what + ", got " + std::to_string(got);
  };
  if (p.batch < 1) return bad("--batch", "must be >= 1", p.batch);
  if (p.seqlen_q < 1) return bad("--seqlen-q", "must be >= 1", p.seqlen_q);
  if (p.seqlen_k < 1) return bad("--seqlen-k", "must be >= 1", p.seqlen_k);
  if (p.heads_q < 1) return bad("--heads", "must be >= 1", p.heads_q);
  if (p.heads_kv < 1) return bad("--kv-heads", "must be >= 1", p.heads_kv);
  if (p.heads_q % p.heads_kv != 0)
    return "--kv-heads must divide --heads (GQA/MQA), got heads " + std::to_string(p.heads_q) +
           " and kv-heads " + std::to_string(p.heads_kv);
  const bool mla = p.head_dim == kMlaHeadDim && p.dv() == kMlaHeadDimV;  // rung 17's latent cache
  if (p.head_dim < 1 || (p.head_dim > kMaxHeadDim && !mla))
    return bad("--dim",
               "must be between 1 and " + std::to_string(kMaxHeadDim) + " (or " + std::to_string(kMlaHeadDim) +
                   " with --dim-v " + std::to_string(kMlaHeadDimV) + ": MLA's latent cache)",
               p.head_dim);
  if (p.head_dim % 8 != 0)
    return bad("--dim", "must be a multiple of 8 (16-byte rows)", p.head_dim);
  // V's head_dim: any multiple of 8 up to kMaxHeadDim, above or below --dim (MLA's prefill: 192/128).
  if (p.head_dim_v != 0 && (p.head_dim_v < 1 || (p.head_dim_v > kMaxHeadDim && !mla) || p.head_dim_v % 8 != 0))
    return bad("--dim-v",
               "(V's head_dim) must be a multiple of 8 between 8 and " + std::to_string(kMaxHeadDim) +
                   ", with any --dim (0: the same as --dim)",
               p.head_dim_v);
  if (p.v_in_k && p.dv() > p.head_dim)
    return bad("--v-in-k", "needs V's head_dim (--dim-v) at most --dim (V is K's first columns)", p.dv());
  if (!(p.softmax_scale >= 0) || !std::isfinite(p.softmax_scale))
    return "--scale must be a finite number > 0 (0 means 1/sqrt(dim))";
  if (p.num_splits < 0) return bad("--splits", "must be >= 0 (0 = heuristic)", p.num_splits);
  if (p.page_size < 0 || (p.page_size > 0 && (p.page_size & (p.page_size - 1)) != 0))
    return bad("--page-size", "must be 0 (contiguous) or a power of two", p.page_size);
  if (p.varlen()) {
    const auto& cq = p.cu_seqlens_q;
    const auto& ck = p.cu_seqlens_k;
    if (cq.size() != static_cast<size_t>(p.batch) + 1 || ck.size() != cq.size())
      return "--seqlens-q and --seqlens-k must give one length per sequence, the same count";
    if (cq[0] != 0 || ck[0] != 0) return "cu_seqlens must start at 0";
    for (int b = 0; b < p.batch; ++b) {
      if (p.len_q(b) < 0 || p.len_k(b) < 0)
        return "--seqlens-q/--seqlens-k: sequence " + std::to_string(b) + " has a negative length";
      if (p.len_q(b) > p.seqlen_q || p.len_k(b) > p.seqlen_k)
        return "sequence " + std::to_string(b) + " is longer than max_seqlen (seqlen_q/seqlen_k)";
    }
    if (p.page_size > 0) return "a variable-length batch takes a contiguous K/V (no --page-size)";
  }
  if (p.window_left < -1 || p.window_right < -1)
    return "--window: each side must be >= 0, or -1 (open), got (" + std::to_string(p.window_left) + ", " +
           std::to_string(p.window_right) + ")";
  if (p.prefix < 0) return bad("--prefix", "must be >= 0 (0: off)", p.prefix);
  if (!(p.softcap >= 0) || !std::isfinite(p.softcap)) return "--softcap must be a finite number >= 0 (0: off)";
  if (!(p.dropout_p >= 0 && p.dropout_p < 1))
    return "--dropout must be a probability in [0, 1) (0: off)";
  if (p.dropout_rounds != kDropoutRounds && p.dropout_rounds != 10)
    return "--dropout-rounds: Philox's rounds are " + std::to_string(kDropoutRounds) +
           " (FlashAttention 2's) or 10 (Philox4x32-10), got " + std::to_string(p.dropout_rounds);
  if (!p.seqused_k.empty()) {
    if (p.seqused_k.size() != static_cast<size_t>(p.batch)) return "seqused_k: one key count per sequence";
    for (int b = 0; b < p.batch; ++b) {
      const int slots = p.varlen() ? p.cu_seqlens_k[b + 1] - p.cu_seqlens_k[b] : p.seqlen_k;
      if (p.seqused_k[b] < 0 || p.seqused_k[b] > slots)
        return "seqused_k: sequence " + std::to_string(b) + " uses " + std::to_string(p.seqused_k[b]) +
               " keys of its " + std::to_string(slots);
    }
  }
  if (!p.seqstart_k.empty()) {
    if (p.seqstart_k.size() != static_cast<size_t>(p.batch)) return "seqstart_k: one first key slot per sequence";
    for (int b = 0; b < p.batch; ++b) {
      const int end = !p.seqused_k.empty() ? p.seqused_k[b]
                      : p.varlen()         ? p.cu_seqlens_k[b + 1] - p.cu_seqlens_k[b]
                                           : p.seqlen_k;
      if (p.seqstart_k[b] < 0 || p.seqstart_k[b] > end)
        return "seqstart_k: sequence " + std::to_string(b) + " starts at slot " + std::to_string(p.seqstart_k[b]) +
               ", past its last key " + std::to_string(end);
    }
  }
  if (!p.sinks.empty()) {
    if (p.sinks.size() != static_cast<size_t>(p.heads_q)) return "sinks: one logit per query head (heads_q values)";
    for (float s : p.sinks)
      if (!std::isfinite(s)) return "sinks must be finite logits";
  }
  if (!p.doc_starts.empty()) {
    const auto& d = p.doc_starts;
    if (p.varlen()) return "a document mask takes a dense batch (a packed batch's sequences are its documents already)";
    if (p.seqlen_q != p.seqlen_k) return "a document mask is self-attention: seqlen_q must equal seqlen_k";
    if (d.size() < 2 || d.front() != 0 || d.back() != p.seqlen_k)
      return "document starts must begin at 0 and end at seqlen_k (" + std::to_string(p.seqlen_k) + ")";
    for (size_t n = 1; n < d.size(); ++n)
      if (d[n] <= d[n - 1]) return "document starts must increase (no empty document)";
  }
  // Element counts must fit the int64 strides with room to spare.
  const double elems =
      static_cast<double>(std::max(p.total_q(), p.total_k())) * p.heads_q * std::max(p.head_dim, p.dv());
  if (elems > 4e12) return "problem too large: more than 4e12 elements per tensor";
  return "";
}

Problem problem_of(const AttnParams& a) {
  Problem p;
  p.batch = a.batch;
  p.seqlen_q = a.seqlen_q;
  p.seqlen_k = a.seqlen_k;
  p.heads_q = a.heads_q;
  p.heads_kv = a.heads_kv;
  p.head_dim = a.head_dim;
  p.head_dim_v = a.head_dim_v;  // 0 or head_dim: dv() is head_dim
  p.dtype = static_cast<DType>(a.dtype);
  p.causal = a.causal != 0;
  p.softmax_scale = a.softmax_scale;
  p.num_splits = a.num_splits;
  p.page_size = a.page_size;
  p.window_left = a.window_left;
  p.window_right = a.window_right;
  p.prefix = a.prefix;
  p.softcap = a.softcap;
  p.alibi = a.alibi != 0;
  p.dropout_p = a.dropout.p;  // the seed and offset may live on the device (DropoutParams::state)
  p.dropout_seed = a.dropout.seed;
  p.dropout_offset = a.dropout.offset;
  p.dropout_rounds = a.dropout.rounds;
  // doc_starts and sinks stay on the device: a host policy needs only whether they are set.
  return p;
}

AttnParams make_attn_params(const Problem& p) {
  AttnParams a{};
  const int64_t D = p.head_dim, Dv = p.dv();  // Q and K's columns, V and O's
  a.q_batch_stride = static_cast<int64_t>(p.seqlen_q) * p.heads_q * D;
  a.q_row_stride = static_cast<int64_t>(p.heads_q) * D;
  a.q_head_stride = D;
  a.o_batch_stride = static_cast<int64_t>(p.seqlen_q) * p.heads_q * Dv;
  a.o_row_stride = static_cast<int64_t>(p.heads_q) * Dv;
  a.o_head_stride = Dv;
  a.k_batch_stride = static_cast<int64_t>(p.seqlen_k) * p.heads_kv * D;
  a.k_row_stride = static_cast<int64_t>(p.heads_kv) * D;
  a.k_head_stride = D;
  a.v_batch_stride = static_cast<int64_t>(p.seqlen_k) * p.heads_kv * Dv;
  a.v_row_stride = static_cast<int64_t>(p.heads_kv) * Dv;
  a.v_head_stride = Dv;
  a.batch = p.batch;
  a.seqlen_q = p.seqlen_q;
  a.seqlen_k = p.seqlen_k;
  a.heads_q = p.heads_q;
  a.heads_kv = p.heads_kv;
  a.head_dim = p.head_dim;
  a.head_dim_v = p.dv();
  a.group = p.group();
  a.causal = p.causal ? 1 : 0;
  a.causal_offset = p.causal_offset();
  a.dtype = static_cast<int>(p.dtype);
  a.softmax_scale = p.scale();
  a.scale_log2 = p.scale() * 1.4426950408889634f;
  a.num_splits = p.num_splits;
  a.total_q = static_cast<int>(p.total_q());
  a.total_k = static_cast<int>(p.total_k());
  a.window_left = p.window_left;  // doc_starts and sinks: device copies, set by their owner
  a.window_right = p.window_right;
  a.prefix = p.prefix;
  a.n_docs = p.doc_starts.empty() ? 0 : static_cast<int>(p.doc_starts.size()) - 1;
  a.softcap = p.softcap;
  a.alibi = p.alibi ? 1 : 0;
  a.dropout = make_dropout(p.dropout_p, p.dropout_seed, p.dropout_offset, nullptr, p.dropout_rounds);
  if (p.varlen()) {  // packed: the tokens of every sequence one after another
    a.q_batch_stride = a.o_batch_stride = a.k_batch_stride = a.v_batch_stride = 0;
    a.causal_offset = 0;  // per sequence: len_k - len_q
  }
  return a;
}

std::string tensor_layout_reason(const char* name, const void* base, int64_t batch_stride,
                                 int64_t row_stride, int64_t head_stride) {
  if (reinterpret_cast<uintptr_t>(base) % 16 != 0)
    return std::string(name) + ": data pointer must be 16-byte aligned (the kernels load rows " +
           "in 16-byte vectors); a view that starts mid-row is not, call .contiguous()";
  const int64_t strides[3] = {batch_stride, row_stride, head_stride};
  const char* dims[3] = {"batch", "seqlen", "heads"};
  for (int i = 0; i < 3; ++i)
    if (strides[i] <= 0 || strides[i] % 8 != 0)
      return std::string(name) + ": the " + dims[i] + " stride must be a positive multiple of 8 " +
             "elements (16-byte rows), got " + std::to_string(strides[i]) + "; call .contiguous()";
  return "";
}

void fill_peaks(DeviceInfo* d, int mem_clock_khz, int bus_width_bits) {
  const int cc = d->cc_major * 10 + d->cc_minor;
  // FP32 lanes per SM: 64 on GV100/GA100, 128 on the other recent chips.
  const int fp32_lanes = (cc == 70 || cc == 80) ? 64 : 128;
  // Dense fp16 tensor FLOP per SM per clock with fp32 accumulate (datasheet
  // rates divided by SMs x boost clock): V100/T4 1024, A100 2048, GA10x/AD10x
  // 1024 (datacenter parts), H100 4096 (wgmma; mma.sync reaches ~60% of it).
  int tensor = 1024;
  if (cc == 80) tensor = 2048;
  if (cc >= 90 && cc < 100) tensor = 4096;
  if (cc >= 100 && cc < 120) tensor = 8192;
  const double hz = d->clock_khz * 1e3;
  d->peak_fp32_tflops = d->sm_count * fp32_lanes * 2.0 * hz / 1e12;
  d->peak_tensor_tflops = d->sm_count * static_cast<double>(tensor) * hz / 1e12;
  // Double data rate: 2 transfers per memory clock over the bus.
  d->peak_gbps = 2.0 * mem_clock_khz * 1e3 * (bus_width_bits / 8.0) / 1e9;
}

double unmasked_pairs(const Problem& p) {
  double pairs = 0;
  if (p.has_mods()) {  // each row's span; a dense batch's sequences share one mask
    for (int b = 0; b < (p.varlen() ? p.batch : 1); ++b)
      for (int i = 0; i < p.len_q(b); ++i) {
        const KeySpan s = p.key_span(b, i);
        pairs += s.hi >= s.lo ? s.hi - s.lo + 1 : 0;
      }
    return pairs * p.heads_q * (p.varlen() ? 1 : p.batch);
  }
  if (p.varlen()) {
    for (int b = 0; b < p.batch; ++b) {
      if (!p.causal) pairs += static_cast<double>(p.len_q(b)) * p.len_k(b);
      else
        for (int i = 0; i < p.len_q(b); ++i) pairs += p.visible_keys(b, i);
    }
    return pairs * p.heads_q;
  }
  if (!p.causal) {
    pairs = static_cast<double>(p.seqlen_q) * p.seqlen_k;
  } else {
    for (int i = 0; i < p.seqlen_q; ++i) pairs += p.visible_keys(i);
  }
  return pairs * p.batch * p.heads_q;
}

double attention_flops(const Problem& p) {
  // QK^T: 2 FLOPs per MAC over head_dim; PV: over dv. 4 pairs d when dv = d, as always.
  return 2.0 * unmasked_pairs(p) * (p.head_dim + p.dv());
}

double attention_bytes(const Problem& p) {
  const double q = static_cast<double>(p.total_q()) * p.heads_q;  // query rows x heads
  return 2.0 * (q * p.head_dim + q * p.dv()) + kv_bytes(p);        // Q read + O written, 16-bit
}

double kv_bytes(const Problem& p) {
  // K + V, 16-bit; one tensor when V is K's first columns (MLA's cache is read once).
  return 2.0 * static_cast<double>(p.total_k()) * p.heads_kv * (p.head_dim + (p.v_in_k ? 0 : p.dv()));
}

double attention_bwd_bytes(const Problem& p) {
  // Q read and dQ written, O and dO read (O's dv columns); K read and dK written, V read and dV
  // written (V's dv columns); 16-bit each, plus the forward's LSE (fp32, one per query row and
  // head) read. Four tensors of each shape when dv = d.
  const double q = 2.0 * static_cast<double>(p.total_q()) * p.heads_q;    // bytes per column
  const double kv = 2.0 * static_cast<double>(p.total_k()) * p.heads_kv;  // bytes per column
  const double lse = 4.0 * static_cast<double>(p.lse_elements());
  return 2.0 * q * (p.head_dim + p.dv()) + 2.0 * kv * (p.head_dim + p.dv()) + lse;
}

}  // namespace fl
