#include "flashladder/registry.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "flashladder/static_switch.h"

namespace fl {

std::string Rung::label() const {
  std::string s = (number < 10 ? "0" : "") + std::to_string(number) + "_" + name;
  if (!variant.empty()) s += "[" + variant + "]";
  return s;
}

Baseline Baseline::on(int n, std::string why, std::string v) {
  Baseline b;
  b.kind = Kind::rung;
  b.number = n;
  b.variant = std::move(v);
  b.why = std::move(why);
  return b;
}

Baseline Baseline::fastest(std::string why) {
  Baseline b;
  b.kind = Kind::fastest_earlier;
  b.why = std::move(why);
  return b;
}

std::string Baseline::target_label(const std::string& name) const {
  if (kind != Kind::rung) return "";
  std::string s = (number < 10 ? "0" : "") + std::to_string(number) + "_" + name;
  if (!variant.empty()) s += "[" + variant + "]";
  return s;
}

void Registry::add(Rung r) {
  // A variant (ablation, sweep point) is compared with its own rung unless it says otherwise.
  if (!r.variant.empty() && r.baselines.empty())
    r.baselines.push_back(Baseline::on(r.number, "the rung this variant changes one thing of"));
  rungs_.push_back(std::move(r));
  std::stable_sort(rungs_.begin(), rungs_.end(), [](const Rung& a, const Rung& b) { return a.number < b.number; });
}

const Rung* Registry::find(int number, const std::string& variant) const {
  for (const auto& r : rungs_)
    if (r.number == number && r.variant == variant) return &r;
  return nullptr;
}

const Rung* Registry::previous(int number) const {
  const Rung* best = nullptr;
  for (const auto& r : rungs_)
    if (r.number < number && r.variant.empty() && (!best || r.number > best->number)) best = &r;
  return best;
}

std::vector<const Rung*> Registry::candidates(const Rung& r, const Baseline& b) const {
  std::vector<const Rung*> out;
  if (b.kind == Baseline::Kind::rung) {
    if (const Rung* t = find(b.number, b.variant)) out.push_back(t);
    return out;
  }
  for (const auto& c : rungs_)
    if (c.variant.empty() && c.number < r.number) out.push_back(&c);
  return out;
}

std::vector<const Rung*> Registry::mains() const {
  std::vector<const Rung*> out;
  for (const auto& r : rungs_)
    if (r.variant.empty()) out.push_back(&r);
  return out;
}

namespace {
std::string json_quote(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    if (static_cast<unsigned char>(c) < 0x20) continue;
    o += c;
  }
  return o + "\"";
}

const char* peak_key(Peak p) {
  switch (p) {
    case Peak::fp32_fma: return "fp32_fma";
    case Peak::tensor_16bit: return "tensor_16bit";
    case Peak::tensor_fp8: return "tensor_fp8";
    default: return "memory";
  }
}

/// The label of baseline @p b in @p reg (a rung's name is looked up; unbuilt: "NN_?").
std::string baseline_label(const Registry& reg, const Baseline& b) {
  if (b.kind == Baseline::Kind::fastest_earlier) return "the fastest earlier rung";
  const Rung* main = reg.find(b.number);
  return b.target_label(main ? main->name : "?");
}
}  // namespace

std::vector<std::string> describe_baselines(const Registry& reg, const Rung& r) {
  std::vector<std::string> out;
  for (const auto& b : r.baselines) out.push_back("vs " + baseline_label(reg, b) + ": " + b.why);
  return out;
}

int Registry::builds_on(const Rung& r) const {
  for (const Baseline& b : r.baselines)
    if (b.kind == Baseline::Kind::rung && b.number != r.number) return b.number;
  return r.builds_on.empty() ? 0 : r.builds_on.front();
}

std::string registry_json(const Registry& reg) {
  std::string s = "{\"schema\": \"flashladder.registry/1\", \"rungs\": [";
  bool first = true;
  for (const auto& r : reg.all()) {
    s += first ? "\n " : ",\n ";
    first = false;
    s += "{\"label\": " + json_quote(r.label()) + ", \"number\": " + std::to_string(r.number) +
         ", \"name\": " + json_quote(r.name) + ", \"variant\": " + json_quote(r.variant) +
         ", \"summary\": " + json_quote(r.summary) + ", \"peak\": " + json_quote(peak_key(r.peak)) +
         ", \"decode\": " + (r.decode ? "true" : "false") +
         ", \"in_tour\": " + (r.in_tour ? "true" : "false") +
         ", \"backward\": " + (r.launch_bwd ? "true" : "false") +
         ", \"builds_on\": " + std::to_string(reg.builds_on(r)) + ", \"new_design\": " + json_quote(r.new_design) +
         ", \"baselines\": [";
    for (size_t i = 0; i < r.baselines.size(); ++i) {
      const Baseline& b = r.baselines[i];
      s += (i ? ", " : "") + std::string("{\"kind\": ") +
           (b.kind == Baseline::Kind::rung ? "\"rung\"" : "\"fastest_earlier\"") +
           ", \"label\": " + json_quote(baseline_label(reg, b)) + ", \"why\": " + json_quote(b.why) + "}";
    }
    s += "]}";
  }
  return s + "\n]}\n";
}

std::string feature_support(const Rung& r, const Problem& p) {
  if (p.dv() != p.head_dim && !r.head_dim_v)
    return "a V head_dim of its own (--dim-v) is not supported by this rung";
  if (p.page_size > 0 && !r.paged_kv) return "paged KV cache (--page-size) not supported by this rung";
  if (p.varlen() && !r.varlen)
    return "variable-length batches (--seqlens-q) not supported by this rung (rungs 14 and 15 take them)";
  if ((!p.seqused_k.empty() || !p.seqstart_k.empty()) && !r.seqused_k)
    return "a KV cache's per-sequence lengths or starts (seqused_k, seqstart_k) not supported by this rung (rungs "
           "08, 15 and 16 take them)";
  if (p.has_mods() && !r.mods)
    return "sliding windows, prefix-LM, document masks, softcapping, ALiBi and attention sinks "
           "(--window, --prefix, --docs, --softcap, --alibi, --sinks) are not supported by this rung";
  if (p.dropout() && !r.dropout)
    return "attention dropout (--dropout) is not supported by this rung (rung 16 takes it)";
  return "";
}

std::string generic_supports(const Rung& r, const Problem& p, const DeviceInfo& d) {
  if (r.head_dims.empty() && (p.head_dim > kMaxHeadDim || p.dv() > kMaxHeadDim))
    return "head_dim " + std::to_string(p.head_dim) + " not supported (at most " + std::to_string(kMaxHeadDim) +
           "; MLA's latent cache is rung 17's)";
  if (!r.head_dims.empty() &&
      std::find(r.head_dims.begin(), r.head_dims.end(), p.head_dim) == r.head_dims.end()) {
    std::string list;
    for (int h : r.head_dims) list += (list.empty() ? "" : ", ") + std::to_string(h);
    return "head_dim " + std::to_string(p.head_dim) + " not supported (supported: " + list + ")";
  }
  if (!r.head_dims.empty() && !head_dim_built(p.head_dim))
    return "head_dim " + std::to_string(p.head_dim) + " not built (configured with -DFL_HEAD_DIM=" +
           std::to_string(FL_HEAD_DIM_ONLY) + ")";
  if (!dtype_built(p.dtype))
    return std::string(dtype_name(p.dtype)) + " not built (configured with -DFL_DTYPE)";
  if (std::string why = feature_support(r, p); !why.empty()) return why;
  const int cc = d.cc_major * 10 + d.cc_minor;
  if (r.min_cc > 0 && cc < r.min_cc)
    return "needs compute capability >= " + std::to_string(r.min_cc / 10) + "." + std::to_string(r.min_cc % 10) +
           " (this GPU is " + d.arch() + ")";
  return "";
}

std::string supports(const Rung& r, const Problem& p, const DeviceInfo& d) {
  std::string why = generic_supports(r, p, d);
  if (why.empty() && r.supports) why = r.supports(p, d);
  return why;
}

std::string persistent_size_limits(const Problem& p, int block_m) {
  const double items = std::ceil(static_cast<double>(p.seqlen_q) / block_m) * p.batch * p.heads_q;
  if (items > std::numeric_limits<int>::max()) return "more than 2^31 query tiles (batch x heads x seqlen_q / 128)";
  if (static_cast<double>(p.total_q()) * p.heads_q > std::numeric_limits<int>::max() ||
      static_cast<double>(p.total_k()) > std::numeric_limits<int>::max())
    return "more than 2^31 tokens x heads";
  return "";
}

std::string tile_limits(const Problem& p, const DeviceInfo& d, int smem_bytes) {
  if (!head_dim_built(p.head_dim))
    return "head_dim " + std::to_string(p.head_dim) + " not built (configured with FL_HEAD_DIM)";
  if (!dtype_built(p.dtype)) return "dtype not built (configured with FL_DTYPE)";
  if (p.heads_q > 65535 || p.batch > 65535)
    return "heads_q and batch must be <= 65535 (grid y and z)";
  if (d.smem_per_block_optin > 0 && smem_bytes > d.smem_per_block_optin)
    return "needs " + std::to_string(smem_bytes) +
           " bytes of shared memory per block, the GPU allows " +
           std::to_string(d.smem_per_block_optin);
  return "";
}

}  // namespace fl
