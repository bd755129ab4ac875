#include "flashladder/report.h"

#include "flashladder/backward.h"

#include <cmath>
#include <cstdio>
#include <iomanip>
#include <sstream>
#include <utility>

namespace fl {

double tflops_of(const Problem& p, double ms) { return ms > 0 ? attention_flops(p) / (ms * 1e-3) / 1e12 : 0; }

double gbps_of(const Problem& p, double ms, Peak peak, bool fp8_kv_cache) {
  double bytes = peak == Peak::memory ? kv_bytes(p) : attention_bytes(p);
  if (fp8_kv_cache) bytes -= kv_bytes(p) / 2;  // K and V at one byte per element, not two
  return ms > 0 ? bytes / (ms * 1e-3) / 1e9 : 0;
}

double bwd_tflops_of(const Problem& p, double ms) {
  return ms > 0 ? attention_bwd_flops(p) / (ms * 1e-3) / 1e12 : 0;
}

double bwd_gbps_of(const Problem& p, double ms) { return ms > 0 ? attention_bwd_bytes(p) / (ms * 1e-3) / 1e9 : 0; }

double run_tflops(const RunReport& r) {
  return r.backward ? bwd_tflops_of(r.problem, r.timing.median_ms) : tflops_of(r.problem, r.timing.median_ms);
}

double run_gbps(const RunReport& r) {
  return r.backward ? bwd_gbps_of(r.problem, r.timing.median_ms)
                    : gbps_of(r.problem, r.timing.median_ms, r.peak, r.fp8_kv_cache);
}

double percent_of_peak(const RunReport& r) { return percent_of_peak(r, r.peak); }

double percent_of_peak(const RunReport& r, Peak ceiling) {
  if (!r.timing.timed) return 0;
  switch (ceiling) {
    case Peak::fp32_fma:
      return r.device.peak_fp32_tflops > 0 ? 100 * run_tflops(r) / r.device.peak_fp32_tflops : 0;
    case Peak::tensor_16bit:
      return r.device.peak_tensor_tflops > 0 ? 100 * run_tflops(r) / r.device.peak_tensor_tflops : 0;
    case Peak::tensor_fp8:
      return r.device.peak_tensor_tflops > 0 ? 100 * run_tflops(r) / (2 * r.device.peak_tensor_tflops) : 0;
    case Peak::memory: {  // K and V read once (kv_bytes) forward, attention_bwd_bytes backward
      const double ms = r.timing.median_ms;
      const double gbps = r.backward ? bwd_gbps_of(r.problem, ms) : gbps_of(r.problem, ms, Peak::memory, r.fp8_kv_cache);
      return r.device.peak_gbps > 0 ? 100 * gbps / r.device.peak_gbps : 0;
    }
  }
  return 0;
}

std::string format_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (std::fabs(b) >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", b, units[u]);
  return buf;
}

namespace {
const char* peak_name(Peak p) {
  switch (p) {
    case Peak::fp32_fma: return "fp32 FMA peak";
    case Peak::tensor_16bit: return "16-bit tensor peak";
    case Peak::tensor_fp8: return "FP8 tensor peak (2 x 16-bit)";
    default: return "DRAM bandwidth";
  }
}
std::string sci(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2e", v);
  return buf;
}
std::string fixed(double v, int prec) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", prec, v);
  return buf;
}
}  // namespace

std::string format_report(const RunReport& r) {
  std::ostringstream s;
  const DeviceInfo& d = r.device;
  s << "FlashLadder rung " << (r.rung_number < 10 ? "0" : "") << r.rung_number << " " << r.rung_name;
  if (!r.variant.empty()) s << " [" << r.variant << "]";
  s << " - " << r.summary << "\n";
  s << "  device    " << d.name << " (" << d.arch() << ", " << d.sm_count << " SMs, peaks: fp32 "
    << fixed(d.peak_fp32_tflops, 1) << " TFLOP/s, tensor " << fixed(d.peak_tensor_tflops, 0) << " TFLOP/s, DRAM "
    << fixed(d.peak_gbps, 0) << " GB/s)\n";
  if (!r.date.empty() || !r.git_sha.empty())
    s << "  run       " << r.date << ", commit " << (r.git_sha.empty() ? "unknown" : r.git_sha) << "\n";
  s << "  problem   " << r.problem.describe() << " scale=" << r.problem.scale() << " input=" << r.input
    << " seed=" << r.seed << "\n";
  if (r.backward) {
    s << "  pass      backward (dQ, dK, dV) after the forward pass of " << r.forward_label
      << " (O, LSE; run once, not timed), deterministic=" << (r.deterministic ? 1 : 0) << "\n";
    s << "  work      " << fixed(attention_bwd_flops(r.problem) / 1e9, 2)
      << " GFLOP (2.5 x the forward's, unmasked pairs only), " << format_bytes(attention_bwd_bytes(r.problem))
      << " compulsory HBM traffic (Q,K,V,O,dO read + dQ,dK,dV written, LSE read)\n";
  } else {
    const double bytes = attention_bytes(r.problem) - (r.fp8_kv_cache ? kv_bytes(r.problem) / 2 : 0.0);
    s << "  work      " << fixed(attention_flops(r.problem) / 1e9, 2) << " GFLOP (unmasked pairs only), "
      << format_bytes(bytes) << " compulsory HBM traffic (Q,K,V read + O written"
      << (r.fp8_kv_cache ? "; K and V e4m3" : "") << ")\n";
  }
  if (r.workspace_bytes > 0) s << "  workspace " << format_bytes(static_cast<double>(r.workspace_bytes)) << " in HBM\n";
  for (const auto& n : r.notes) s << "  note      " << n << "\n";
  const CheckResult& c = r.check;
  if (r.backward) {
    const BwdCheck& b = r.bwd;
    if (c.checked)
      s << "  check     " << (c.pass ? "PASS" : "FAIL") << " vs fp64 backward reference, " << b.groups << " of "
        << b.groups_total << " (batch, KV head) groups (" << c.mode << ")\n";
    else
      s << "  check     " << (c.pass ? "PASS: every element of dQ, dK, dV written" : "FAIL")
        << "; gradients not compared with the fp64 backward reference\n";
    if (!b.note.empty() && c.mode != "full") s << "            " << b.note << "\n";
    const std::pair<const char*, const CheckResult*> tensors[] = {
        {"dQ", &b.grads.dq}, {"dK", &b.grads.dk}, {"dV", &b.grads.dv}};
    for (const auto& [name, t] : tensors) {
      if (!t->checked && t->unwritten == 0) continue;
      s << "            " << name << " ";
      if (t->checked)
        s << "rel_fro " << sci(t->err.rel_fro) << " (tol " << sci(t->tol.rel_fro) << "), max_abs " << sci(t->err.max_abs)
          << " (tol " << sci(t->tol.max_abs) << "); fp32 CPU rel_fro " << sci(t->fp32_err.rel_fro);
      if (t->unwritten > 0) s << (t->checked ? "; " : "") << t->unwritten << " never written (NaN)";
      s << "\n";
    }
    if (!c.pass) s << "            reason: " << c.reason << "\n";
  } else if (!c.checked) {
    s << "  check     " << (c.pass ? "skipped (--check none), all outputs written" : "FAIL: " + c.reason) << "\n";
  } else {
    s << "  check     " << (c.pass ? "PASS" : "FAIL") << " vs fp64 reference, " << c.rows << " rows (" << c.mode
      << "): rel_fro " << sci(c.err.rel_fro) << " (tol " << sci(c.tol.rel_fro) << "), max_abs " << sci(c.err.max_abs)
      << " (tol " << sci(c.tol.max_abs) << "), lse " << sci(c.err.lse_max_abs) << "; fp32 CPU rel_fro "
      << sci(c.fp32_err.rel_fro) << "\n";
    if (!c.pass) s << "            reason: " << c.reason << "\n";
  }
  if (r.fp8) {
    s << "  fp8       " << (r.fp8_kv_cache ? "K and V" : "inputs") << " quantized " << r.fp8_mode
      << " to e4m3; the check above is on the dequantized values\n";
    if (c.checked)
      s << "            end to end (vs fp64 on the 16-bit inputs): rel_fro " << sci(r.fp8_e2e.rel_fro) << ", max_abs "
        << sci(r.fp8_e2e.max_abs) << ", lse " << sci(r.fp8_e2e.lse_max_abs) << "\n";
    if (r.fp8_quant.timed)
      s << "            quantize (amax, scales, " << (r.fp8_kv_cache ? "e4m3 K and V" : "e4m3 Q, K, transposed V")
        << "): " << fixed(r.fp8_quant.median_ms, 4)
        << " ms median, not in the time below\n";
  }
  if (r.timing.timed) {
    s << "  time      " << fixed(r.timing.median_ms, 4) << " ms median of " << r.timing.iters << " (min "
      << fixed(r.timing.min_ms, 4) << ", max " << fixed(r.timing.max_ms, 4) << "), L2 flushed before each\n";
    s << "  rate      " << fixed(run_tflops(r), 2) << " TFLOP/s" << (r.backward ? " (backward FLOPs)" : "") << ", "
      << fixed(run_gbps(r), 1) << " GB/s"
      << (r.peak == Peak::memory && !r.backward ? " (K+V bytes)" : "") << ", " << fixed(percent_of_peak(r), 1)
      << "% of " << peak_name(r.peak) << "\n";
  }
  if (!r.kernels.empty()) {
    s << "  kernels   " << std::left << std::setw(26) << "name" << std::right << std::setw(8) << "threads" << std::setw(6)
      << "regs" << std::setw(8) << "local B" << std::setw(10) << "smem B" << std::setw(10) << "blocks/SM" << std::setw(8)
      << "occ %" << "\n";
    for (const auto& k : r.kernels)
      s << "            " << std::left << std::setw(26) << k.name << std::right << std::setw(8) << k.block_threads
        << std::setw(6) << k.registers << std::setw(8) << k.local_bytes << std::setw(10)
        << (k.static_smem + k.dynamic_smem) << std::setw(10) << k.max_blocks_per_sm << std::setw(8)
        << fixed(100 * k.occupancy, 0) << "\n";
  }
  for (const auto& b : r.baselines) {
    s << "  vs        " << b.label;
    if (b.fastest_of_earlier) s << " (fastest earlier rung)";
    if (!b.skipped.empty()) {
      s << ": not run: " << b.skipped << "\n";
    } else if (b.timing.timed && r.timing.timed) {
      s << ": " << fixed(b.timing.median_ms, 4) << " ms -> speedup "
        << fixed(b.timing.median_ms / r.timing.median_ms, 2) << "x\n";
    } else {
      s << "\n";
    }
    s << "            why: " << b.why << "\n";
    if (!b.considered.empty()) s << "            considered: " << b.considered << "\n";
  }
  return s.str();
}

// ---- JSON ----------------------------------------------------------------
std::string Json::quote(const std::string& in) {
  std::string o = "\"";
  for (char ch : in) {
    switch (ch) {
      case '"': o += "\\\""; break;
      case '\\': o += "\\\\"; break;
      case '\n': o += "\\n"; break;
      case '\t': o += "\\t"; break;
      default:
        if (static_cast<unsigned char>(ch) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", ch);
          o += buf;
        } else {
          o += ch;
        }
    }
  }
  return o + "\"";
}
void Json::comma() {
  if (!first_.back()) s_ += ",";
  first_.back() = false;
}
void Json::key(const char* k) {
  comma();
  if (k) s_ += quote(k) + ":";
}
Json& Json::begin_object(const char* k) {
  key(k);
  s_ += "{";
  first_.push_back(true);
  return *this;
}
Json& Json::end_object() {
  s_ += "}";
  first_.pop_back();
  return *this;
}
Json& Json::begin_array(const char* k) {
  key(k);
  s_ += "[";
  first_.push_back(true);
  return *this;
}
Json& Json::end_array() {
  s_ += "]";
  first_.pop_back();
  return *this;
}
Json& Json::kv(const char* k, const std::string& v) {
  key(k);
  s_ += quote(v);
  return *this;
}
Json& Json::kv(const char* k, double v) {
  key(k);
  if (std::isfinite(v)) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.9g", v);
    s_ += buf;
  } else {
    s_ += "null";
  }
  return *this;
}
Json& Json::kv(const char* k, long long v) {
  key(k);
  s_ += std::to_string(v);
  return *this;
}
Json& Json::kv(const char* k, bool v) {
  key(k);
  s_ += v ? "true" : "false";
  return *this;
}
Json& Json::raw(const char* k, const std::string& json) {
  key(k);
  s_ += json;
  return *this;
}

std::string device_json(const DeviceInfo& d) {
  Json j;
  j.begin_object()
      .kv("name", d.name)
      .kv("arch", d.arch())
      .kv("sms", d.sm_count)
      .kv("clock_mhz", d.clock_khz / 1000.0)
      .kv("memory_bytes", static_cast<long long>(d.mem_total))
      .kv("l2_bytes", d.l2_bytes)
      .kv("smem_per_block_optin", d.smem_per_block_optin)
      .kv("peak_fp32_tflops", d.peak_fp32_tflops)
      .kv("peak_tensor_tflops", d.peak_tensor_tflops)
      .kv("peak_gbps", d.peak_gbps)
      .kv("cuda_runtime", d.cuda_runtime_version)
      .kv("cuda_driver", d.driver_version)
      .end_object();
  return j.str();
}

namespace {
std::string problem_json(const Problem& p, bool backward) {
  Json j;
  j.begin_object()
      .kv("batch", p.batch)
      .kv("seqlen_q", p.seqlen_q)
      .kv("seqlen_k", p.seqlen_k)
      .kv("heads_q", p.heads_q)
      .kv("heads_kv", p.heads_kv)
      .kv("head_dim", p.head_dim)
      .kv("head_dim_v", p.dv())  // V's and O's head_dim: head_dim unless --dim-v gave V its own
      .kv("dtype", dtype_name(p.dtype))
      .kv("causal", p.causal)
      .kv("softmax_scale", static_cast<double>(p.scale()))
      .kv("num_splits", p.num_splits)
      .kv("page_size", p.page_size)
      .kv("flops", attention_flops(p))
      .kv("bytes", attention_bytes(p));
  if (backward) j.kv("bwd_flops", attention_bwd_flops(p)).kv("bwd_bytes", attention_bwd_bytes(p));
  // The masks and score modifiers beyond causal (Problem::has_mods), each only when set, as
  // describe() names them: a masked run's report says which mask it timed.
  if (p.window_left >= 0 || p.window_right >= 0) j.kv("window_left", p.window_left).kv("window_right", p.window_right);
  if (p.prefix > 0) j.kv("prefix", p.prefix);
  if (!p.doc_starts.empty()) j.kv("documents", static_cast<int>(p.doc_starts.size()) - 1);
  if (p.softcap > 0) j.kv("softcap", static_cast<double>(p.softcap));
  if (p.alibi) j.kv("alibi", true);
  if (!p.sinks.empty()) j.kv("sinks", true);
  if (p.dropout())  // the probability and the generator's rounds (dropout.h)
    j.kv("dropout_p", static_cast<double>(p.dropout_p)).kv("dropout_rounds", p.dropout_rounds);
  if (p.varlen()) {  // a packed batch: its prefix sums, as flash_attn_varlen_func takes them
    auto list = [](const std::vector<int>& v) {
      std::string s = "[";
      for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
      return s + "]";
    };
    j.raw("cu_seqlens_q", list(p.cu_seqlens_q)).raw("cu_seqlens_k", list(p.cu_seqlens_k));
  }
  j.end_object();
  return j.str();
}

/// One gradient's check (dQ, dK or dV) as a JSON object.
std::string gradient_json(const CheckResult& c) {
  Json j;
  j.begin_object();
  check_fields(j, c);
  j.kv("ref_max_abs", c.err.ref_max_abs)
      .kv("fp32_rel_fro", c.fp32_err.rel_fro)
      .kv("fp32_max_abs", c.fp32_err.max_abs)
      .kv("nonfinite", c.err.nonfinite)
      .end_object();
  return j.str();
}
}  // namespace

void check_fields(Json& j, const CheckResult& c) {
  j.kv("pass", c.pass)
      .kv("checked", c.checked)
      .kv("mode", c.mode)
      .kv("rows", static_cast<long long>(c.rows))
      .kv("rel_fro", c.err.rel_fro)
      .kv("max_abs", c.err.max_abs)
      .kv("lse_max_abs", c.err.lse_max_abs)
      .kv("tol_rel_fro", c.tol.rel_fro)
      .kv("tol_max_abs", c.tol.max_abs)
      .kv("tol_lse_abs", c.tol.lse_abs)
      .kv("unwritten", c.unwritten)
      .kv("reason", c.reason);
}

std::string to_json(const RunReport& r) {
  Json j;
  j.begin_object().kv("schema", "flashladder.run/1");
  j.begin_object("rung").kv("number", r.rung_number).kv("name", r.rung_name).kv("variant", r.variant).kv("summary", r.summary).end_object();
  j.raw("device", device_json(r.device));
  j.raw("problem", problem_json(r.problem, r.backward));
  j.kv("backward", r.backward);
  if (r.backward) j.kv("deterministic", r.deterministic).kv("forward_rung", r.forward_label);
  j.kv("input", r.input).kv("seed", static_cast<long long>(r.seed));
  j.kv("date", r.date).kv("git_sha", r.git_sha);
  j.kv("workspace_bytes", static_cast<long long>(r.workspace_bytes));
  j.begin_array("notes");
  for (const auto& n : r.notes) j.kv(nullptr, n);
  j.end_array();
  j.begin_object("check");
  check_fields(j, r.check);
  j.kv("fp32_rel_fro", r.check.fp32_err.rel_fro);
  if (r.backward) {
    // rel_fro, max_abs, tol_* above are those of the gradient closest to its tolerance.
    j.kv("groups", r.bwd.groups).kv("groups_total", r.bwd.groups_total).kv("note", r.bwd.note);
    j.begin_object("gradients")
        .raw("dq", gradient_json(r.bwd.grads.dq))
        .raw("dk", gradient_json(r.bwd.grads.dk))
        .raw("dv", gradient_json(r.bwd.grads.dv))
        .end_object();
  }
  j.end_object();
  if (r.fp8)
    j.begin_object("fp8")
        .kv("mode", r.fp8_mode)
        .kv("e2e_rel_fro", r.fp8_e2e.rel_fro)
        .kv("e2e_max_abs", r.fp8_e2e.max_abs)
        .kv("e2e_lse_max_abs", r.fp8_e2e.lse_max_abs)
        .kv("quantize_ms", r.fp8_quant.timed ? r.fp8_quant.median_ms : 0.0)
        .end_object();
  if (r.timing.timed) {
    j.begin_object("timing")
        .kv("median_ms", r.timing.median_ms)
        .kv("min_ms", r.timing.min_ms)
        .kv("max_ms", r.timing.max_ms)
        .kv("iters", r.timing.iters)
        .kv("tflops", run_tflops(r))
        .kv("gbps", run_gbps(r))
        .kv("percent_of_peak", percent_of_peak(r))
        .end_object();
  }
  j.begin_array("kernels");
  for (const auto& k : r.kernels)
    j.begin_object()
        .kv("name", k.name)
        .kv("block_threads", k.block_threads)
        .kv("registers", k.registers)
        .kv("local_bytes", k.local_bytes)
        .kv("static_smem", k.static_smem)
        .kv("dynamic_smem", static_cast<long long>(k.dynamic_smem))
        .kv("max_blocks_per_sm", k.max_blocks_per_sm)
        .kv("occupancy", k.occupancy)
        .end_object();
  j.end_array();
  j.begin_array("baselines");
  for (const auto& b : r.baselines) {
    j.begin_object().kv("label", b.label).kv("why", b.why).kv("fastest_of_earlier", b.fastest_of_earlier);
    if (!b.considered.empty()) j.kv("considered", b.considered);
    if (b.timing.timed && r.timing.timed)
      j.kv("median_ms", b.timing.median_ms).kv("speedup", b.timing.median_ms / r.timing.median_ms);
    j.kv("skipped", b.skipped).end_object();
  }
  j.end_array();
  j.end_object();
  return j.str();
}

}  // namespace fl
