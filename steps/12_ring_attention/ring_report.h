/// @file steps/12_ring_attention/ring_report.h
/// @brief What rank 0 reports: the Report of a ring's run, its text (printed) and its JSON
/// (--json, schema flashladder.ring/1, read by bench/report.py and bench/docblocks/ring.py),
/// written with common's JSON writer and check fields (flashladder/report.h). Plain C++ (no
/// CUDA) so the CPU tests check it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "flashladder/backward.h"
#include "flashladder/check.h"
#include "flashladder/check_bwd.h"
#include "flashladder/cli.h"
#include "flashladder/problem.h"
#include "flashladder/report.h"
#include "flashladder/ring_plan.h"
#include "flashladder/types.h"

namespace fl::ring {

/// The median of @p v (0 if empty): the report's statistic of the timed passes.
inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/// Errors of the ring's O against the single-GPU rung's O, over every element.
struct Agreement {
  double max_abs = 0, rel_fro = 0;
};
inline Agreement agreement(DType t, const std::vector<uint16_t>& ring,
                           const std::vector<uint16_t>& single) {
  double d2 = 0, r2 = 0;
  Agreement a;
  for (size_t i = 0; i < ring.size(); ++i) {
    const double x = from_bits(ring[i], t), y = from_bits(single[i], t);
    a.max_abs = std::max(a.max_abs, std::abs(x - y));
    if (!std::isfinite(x) || !std::isfinite(y)) a.max_abs = INFINITY;
    d2 += (x - y) * (x - y);
    r2 += y * y;
  }
  a.rel_fro = r2 > 0 ? std::sqrt(d2 / r2) : std::sqrt(d2);
  return a;
}

/// The backward pass's part of a report (--backward).
struct BackwardReport {
  bool ran = false;
  std::string label;  ///< the backward rung of each step (rung 14's o32-delta, or rung 11's)
  int forward_key_cap = 0;  ///< keys per launch of the forward (ring_plan.h, forward_key_cap; 0: uncut)
  BwdCheck check;     ///< the ring's dQ, dK, dV against the fp64 reference
  std::vector<double> ring_ms;   ///< per timed iteration: the slowest rank's backward pass
  std::vector<double> total_ms;  ///< per timed iteration: the slowest rank's forward + backward
  /// [rank][step] medians: the backward launches, the waits (K/V, travelling dK/dV sums), the fp32
  /// sums, the transfers (K/V and sums; empty in a replay)
  std::vector<std::vector<double>> compute, exposed, merge, transfer;
  std::vector<double> send_bytes;  ///< per step, rank 0's: K/V and the dK, dV sums
  std::string single_label;        ///< the backward rung on the whole sequence (its default entry)
  std::string single_skipped;
  Timing single_timing;  ///< its backward pass alone
};

/// Everything rank 0 reports.
struct Report {
  Problem p;
  Sharding sharding = Sharding::zigzag;
  int world = 1;
  bool replay = false;      ///< --replay: the world's ranks in turn on one GPU (each timed alone)
  bool shared_gpu = false;  ///< --shared-gpu: the world's ranks at once on one GPU (time-shared)
  std::string forward_label, nccl_version;
  std::string date;     ///< when the report is written (UTC, ISO 8601)
  std::string git_sha;  ///< the commit the rung was built from (configure time)
  DeviceInfo dev;
  Options opt;
  CheckResult check;
  bool single_ran = false;
  std::string single_skipped;
  CheckResult single_check;
  Agreement vs_single;
  bool vs_single_pass = true;
  Timing single_timing;
  int iters = 0;
  std::vector<double> ring_ms;  ///< per timed iteration: the slowest rank's
  /// [rank][step] medians over the timed iterations (exposed and transfer empty in a replay)
  std::vector<std::vector<double>> compute, exposed, merge, transfer;
  std::vector<int64_t> pairs;      ///< per rank (per batch and head)
  std::vector<double> send_bytes;  ///< per step, rank 0's
  BackwardReport bwd;
};

/// One check as a line of the text report.
inline std::string check_line(const CheckResult& c) {
  char buf[320];
  if (!c.checked) return c.pass ? "not checked (--check none)" : "FAIL: " + c.reason;
  std::snprintf(
      buf, sizeof buf,
      "%s (%s, %zu rows): rel_fro %.3g (tol %.3g), max_abs %.3g (tol %.3g), LSE %.3g (tol %.3g)",
      c.pass ? "PASS" : "FAIL", c.mode.c_str(), c.rows, c.err.rel_fro, c.tol.rel_fro, c.err.max_abs,
      c.tol.max_abs, c.err.lse_max_abs, c.tol.lse_abs);
  std::string s = buf;
  if (!c.pass) s += ": " + c.reason;
  return s;
}

/// A backward check as a line of the text report: the summary, and each gradient's errors.
inline std::string bwd_check_line(const BwdCheck& c) {
  std::string s = check_line(c.summary);
  char buf[256];
  const std::pair<const char*, const CheckResult*> grads[3] = {{"dQ", &c.grads.dq}, {"dK", &c.grads.dk}, {"dV", &c.grads.dv}};
  if (c.summary.checked && c.groups > 0) {
    std::snprintf(buf, sizeof buf, "\n         %d of %d (batch, KV head) groups:", c.groups, c.groups_total);
    s += buf;
    for (const auto& g : grads) {
      std::snprintf(buf, sizeof buf, " %s rel_fro %.3g (tol %.3g)", g.first, g.second->err.rel_fro, g.second->tol.rel_fro);
      s += buf;
    }
  }
  if (!c.note.empty()) s += "\n         " + c.note;
  return s;
}

/// T1 / (P x TP), or 0 when either is missing.
inline double efficiency(double one, int world, double ring) {
  return (ring > 0 && one > 0) ? one / (world * ring) : 0.0;
}

/// One check as the object @p key, with common's check fields.
inline void json_check(Json& j, const char* key, const CheckResult& c) {
  j.begin_object(key);
  check_fields(j, c);
  j.end_object();
}

/// A [rank][step] matrix as the array @p key of arrays.
inline void json_matrix(Json& j, const char* key, const std::vector<std::vector<double>>& m) {
  j.begin_array(key);
  for (const auto& row : m) {
    j.begin_array();
    for (double v : row) j.kv(nullptr, v);
    j.end_array();
  }
  j.end_array();
}

/// The report as one JSON object (schema flashladder.ring/1).
inline std::string report_json(const Report& r) {
  const double ring = median(r.ring_ms);
  const double one = r.single_timing.timed ? r.single_timing.median_ms : 0;
  Json j;
  j.begin_object()
      .kv("schema", "flashladder.ring/1")
      .kv("rung", "12_ring_attention")
      .kv("variant", sharding_name(r.sharding))
      .kv("gpus", r.replay || r.shared_gpu ? 1 : r.world)
      .kv("ranks", r.world)
      .kv("replay", r.replay)
      .kv("shared_gpu", r.shared_gpu)
      .kv("forward_rung", r.forward_label)
      .kv("nccl", r.nccl_version)
      .kv("date", r.date)
      .kv("git_sha", r.git_sha)
      .kv("input", input_kind_name(r.opt.input))
      .kv("seed", static_cast<long long>(r.opt.seed));
  j.begin_object("problem")
      .kv("batch", r.p.batch)
      .kv("seqlen", r.p.seqlen_q)
      .kv("heads_q", r.p.heads_q)
      .kv("heads_kv", r.p.heads_kv)
      .kv("head_dim", r.p.head_dim)
      .kv("dtype", dtype_name(r.p.dtype))
      .kv("causal", r.p.causal)
      .kv("softmax_scale", static_cast<double>(r.p.scale()))
      .end_object();
  j.raw("device", device_json(r.dev));
  json_check(j, "check", r.check);
  j.begin_object("single")
      .kv("ran", r.single_ran)
      .kv("skipped", r.single_skipped)
      .kv("ring_vs_single_max_abs", r.vs_single.max_abs)
      .kv("ring_vs_single_rel_fro", r.vs_single.rel_fro)
      .kv("ring_vs_single_pass", r.vs_single_pass);
  json_check(j, "check", r.single_check);
  j.kv("median_ms", one).end_object();
  const double eff = (ring > 0 && one > 0) ? one / (r.world * ring) : 0.0;
  const double tflops = ring > 0 ? attention_flops(r.p) / (ring * 1e-3) / 1e12 : 0.0;
  const double lo = r.ring_ms.empty() ? 0.0 : *std::min_element(r.ring_ms.begin(), r.ring_ms.end());
  const double hi = r.ring_ms.empty() ? 0.0 : *std::max_element(r.ring_ms.begin(), r.ring_ms.end());
  // A replay times each rank alone on one GPU: a bound, not the ring's time, so other key names.
  // Ranks sharing one GPU time-share it: their ring time is no P-GPU time, so no efficiency.
  struct Keys {
    const char *median, *min, *max, *eff, *tflops;
  };
  const Keys k = r.replay
                     ? Keys{"slowest_rank_median_ms", "slowest_rank_min_ms", "slowest_rank_max_ms",
                            "compute_bound_efficiency", "compute_bound_tflops"}
                     : Keys{"ring_median_ms", "ring_min_ms", "ring_max_ms", "scaling_efficiency",
                            "ring_tflops"};
  j.begin_object("timing")
      .kv("iters", r.iters)
      .kv("warmup", r.opt.warmup)
      .kv(k.median, ring)
      .kv(k.min, lo)
      .kv(k.max, hi)
      .kv("single_median_ms", one);
  if (!r.shared_gpu) j.kv(k.eff, eff).kv(k.tflops, tflops);
  j.end_object();
  j.begin_array("pairs_per_rank");
  for (int64_t x : r.pairs) j.kv(nullptr, static_cast<long long>(x));
  j.end_array();
  j.kv("imbalance", imbalance(r.pairs));
  j.begin_array("send_bytes_per_step");
  for (double b : r.send_bytes) j.kv(nullptr, b);
  j.end_array();
  j.begin_object("steps_ms");  // [rank][step], medians over the timed iterations
  json_matrix(j, "compute", r.compute);
  json_matrix(j, "merge", r.merge);
  if (!r.replay) {  // a replay transfers nothing
    json_matrix(j, "exposed_comm", r.exposed);
    json_matrix(j, "transfer", r.transfer);
  }
  j.end_object();
  if (r.bwd.ran) {
    const BackwardReport& b = r.bwd;
    const double bwd = median(b.ring_ms), total = median(b.total_ms);
    const double one_bwd = b.single_timing.timed ? b.single_timing.median_ms : 0;
    const double one_total = (one > 0 && one_bwd > 0) ? one + one_bwd : 0;
    j.begin_object("backward").kv("rung", b.label);
    json_check(j, "check", b.check.summary);
    j.begin_object("grads");
    for (const auto& g : {std::make_pair("dq", &b.check.grads.dq), std::make_pair("dk", &b.check.grads.dk),
                          std::make_pair("dv", &b.check.grads.dv)})
      j.begin_object(g.first)
          .kv("rel_fro", g.second->err.rel_fro)
          .kv("max_abs", g.second->err.max_abs)
          .kv("tol_rel_fro", g.second->tol.rel_fro)
          .kv("unwritten", static_cast<long long>(g.second->unwritten))
          .end_object();
    j.kv("groups", b.check.groups).kv("groups_total", b.check.groups_total).kv("note", b.check.note).end_object();
    j.begin_object("single").kv("rung", b.single_label).kv("skipped", b.single_skipped).kv("median_ms", one_bwd).end_object();
    j.kv("forward_key_cap", b.forward_key_cap);
    const bool rep = r.replay;
    j.begin_object("timing")
        .kv(rep ? "slowest_rank_bwd_median_ms" : "ring_bwd_median_ms", bwd)
        .kv(rep ? "slowest_rank_fwd_bwd_median_ms" : "ring_fwd_bwd_median_ms", total)
        .kv("single_bwd_median_ms", one_bwd)
        .kv("single_fwd_bwd_median_ms", one_total);
    if (!r.shared_gpu)
      j.kv(rep ? "compute_bound_efficiency_bwd" : "scaling_efficiency_bwd", efficiency(one_bwd, r.world, bwd))
          .kv(rep ? "compute_bound_efficiency_fwd_bwd" : "scaling_efficiency_fwd_bwd", efficiency(one_total, r.world, total))
          .kv(rep ? "compute_bound_bwd_tflops" : "ring_bwd_tflops", bwd > 0 ? attention_bwd_flops(r.p) / (bwd * 1e-3) / 1e12 : 0.0);
    j.end_object();
    j.begin_array("send_bytes_per_step");
    for (double x : b.send_bytes) j.kv(nullptr, x);
    j.end_array();
    j.begin_object("steps_ms");
    json_matrix(j, "compute", b.compute);
    json_matrix(j, "merge", b.merge);
    if (!r.replay) {
      json_matrix(j, "exposed_comm", b.exposed);
      json_matrix(j, "transfer", b.transfer);
    }
    j.end_object();
    j.end_object();
  }
  j.end_object();
  return j.str();
}

/// The per-step table of one pass (ms, the slowest rank's medians).
inline std::string steps_table(const Report& r, const std::vector<std::vector<double>>& compute,
                               const std::vector<std::vector<double>>& exposed, const std::vector<std::vector<double>>& merge,
                               const std::vector<std::vector<double>>& transfer, const std::vector<double>& send_bytes,
                               const char* merge_name) {
  std::string s;
  char buf[256];
  std::snprintf(buf, sizeof buf, "  %4s %10s %14s %10s %10s %12s\n", "step", "compute", "exposed comm", merge_name,
                "transfer", "bytes sent");
  s += buf;
  for (int st = 0; st < r.world; ++st) {
    double c = 0, e = 0, m = 0, t = 0;
    for (size_t rk = 0; rk < compute.size(); ++rk) {
      c = std::max(c, compute[rk][st]);
      m = std::max(m, merge[rk][st]);
      if (r.replay) continue;  // a replay has no exposed communication and no transfer
      e = std::max(e, exposed[rk][st]);
      t = std::max(t, transfer[rk][st]);
    }
    if (r.replay)  // nothing is sent: the bytes are those the ring would send
      std::snprintf(buf, sizeof buf, "  %4d %10.4f %14s %10.4f %10s %12s\n", st, c, "-", m, "-",
                    format_bytes(send_bytes[st]).c_str());
    else
      std::snprintf(buf, sizeof buf, "  %4d %10.4f %14.4f %10.4f %10.4f %12s\n", st, c, e, m, t,
                    format_bytes(send_bytes[st]).c_str());
    s += buf;
  }
  return s;
}

/// The backward pass's lines of the text report.
inline std::string backward_text(const Report& r) {
  const BackwardReport& b = r.bwd;
  std::string s = "backward: " + b.label + " on each step's launches";
  if (b.forward_key_cap > 0)
    s += "; the forward's launches cut to " + std::to_string(b.forward_key_cap) +
         " keys (ring_plan.h, forward_key_cap: D from an fp32 O summed over that many keys at most)";
  s += "\n";
  s += "check:   " + bwd_check_line(b.check) + "\n";
  char buf[512];
  const double bwd = median(b.ring_ms), total = median(b.total_ms);
  const double one_fwd = r.single_timing.timed ? r.single_timing.median_ms : 0;
  const double one_bwd = b.single_timing.timed ? b.single_timing.median_ms : 0;
  if (!b.single_skipped.empty()) s += "single:  backward skipped: " + b.single_skipped + "\n";
  if (bwd > 0) {
    std::snprintf(buf, sizeof buf, "time:    %s backward %.4f ms, forward + backward %.4f ms (medians of %d)",
                  r.replay ? "the slowest rank's" : "ring", bwd, total, r.iters);
    s += buf;
    if (one_bwd > 0 && !r.shared_gpu) {
      std::snprintf(buf, sizeof buf,
                    "; one GPU (%s) backward %.4f ms, forward + backward %.4f ms; %s %.3f backward, %.3f "
                    "forward + backward",
                    b.single_label.c_str(), one_bwd, one_fwd + one_bwd,
                    r.replay ? "the efficiency's compute bound" : "scaling efficiency",
                    efficiency(one_bwd, r.world, bwd), efficiency(one_fwd > 0 ? one_fwd + one_bwd : 0, r.world, total));
      s += buf;
    }
    s += "\nbackward per step (ms, medians; the slowest rank's value; sums: dQ, dK, dV in fp32):\n";
    s += steps_table(r, b.compute, b.exposed, b.merge, b.transfer, b.send_bytes, "sums");
  }
  return s;
}

/// The text report rank 0 prints.
inline std::string report_text(const Report& r) {
  std::string s;
  char buf[512];
  const int C = num_chunks(r.sharding, r.world);
  if (r.replay)
    std::snprintf(buf, sizeof buf,
                  "12_ring_attention[%s]: the %d ranks of a ring replayed on one GPU, in turn (no "
                  "NCCL transfer), forward rung %s\n",
                  sharding_name(r.sharding), r.world, r.forward_label.c_str());
  else if (r.shared_gpu)
    std::snprintf(buf, sizeof buf,
                  "12_ring_attention[%s]: ring attention over %d ranks sharing one GPU (NCCL %s, "
                  "each rank its own NCCL host), forward rung %s\n"
                  "         the ranks time-share the GPU: the times below are no %d-GPU ring's\n",
                  sharding_name(r.sharding), r.world, r.nccl_version.c_str(),
                  r.forward_label.c_str(), r.world);
  else
    std::snprintf(
        buf, sizeof buf,
        "12_ring_attention[%s]: ring attention over %d GPU%s (NCCL %s), forward rung %s\n",
        sharding_name(r.sharding), r.world, r.world == 1 ? "" : "s", r.nccl_version.c_str(),
        r.forward_label.c_str());
  s += buf;
  std::snprintf(
      buf, sizeof buf,
      "problem: %s\ndevice:  %s (%s, %d SMs)%s\n"
      "shards:  %d chunks of ~%d tokens; %s\n",
      r.p.describe().c_str(), r.dev.name.c_str(), r.dev.arch().c_str(), r.dev.sm_count,
      r.replay || r.shared_gpu ? "" : " per rank", C, r.p.seqlen_q / C,
      r.sharding == Sharding::zigzag ? "rank r holds chunks r and 2P-1-r" : "rank r holds chunk r");
  s += buf;
  s += "work:    (query, key) pairs per rank:";
  for (int64_t x : r.pairs) s += " " + std::to_string(x);
  std::snprintf(buf, sizeof buf, " (max/mean %.3f)\n", imbalance(r.pairs));
  s += buf;
  s += "check:   " + check_line(r.check) + "\n";
  if (r.single_ran) {
    s += "single:  " + r.forward_label + " on all " + std::to_string(r.p.seqlen_q) +
         " tokens: " + check_line(r.single_check) + "\n";
    if (r.check.checked) {
      std::snprintf(
          buf, sizeof buf, "         ring vs single GPU: max_abs %.3g, rel_fro %.3g: %s\n",
          r.vs_single.max_abs, r.vs_single.rel_fro,
          r.vs_single_pass ? "within the ring's tolerance" : "FAIL: outside the ring's tolerance");
      s += buf;
    }
  } else if (!r.single_skipped.empty()) {
    s += "single:  skipped: " + r.single_skipped + "\n";
  }
  const double ring = median(r.ring_ms);
  if (ring > 0) {
    if (r.replay)
      std::snprintf(buf, sizeof buf,
                    "time:    the slowest rank's pass %.4f ms (median of %d; each rank alone on "
                    "this GPU, no transfer)",
                    ring, r.iters);
    else if (r.shared_gpu)
      std::snprintf(buf, sizeof buf,
                    "time:    ring %.4f ms (median of %d, the slowest rank each time; the ranks "
                    "time-share one GPU)",
                    ring, r.iters);
    else
      std::snprintf(
          buf, sizeof buf,
          "time:    ring %.4f ms (median of %d, the slowest rank each time), %.1f TFLOP/s", ring,
          r.iters, attention_flops(r.p) / (ring * 1e-3) / 1e12);
    s += buf;
    if (r.single_timing.timed && r.shared_gpu) {
      std::snprintf(buf, sizeof buf, "; one GPU %.4f ms (no scaling efficiency: one GPU shared)",
                    r.single_timing.median_ms);
      s += buf;
    } else if (r.single_timing.timed) {
      std::snprintf(buf, sizeof buf,
                    r.replay ? "; one GPU %.4f ms\n         if every transfer hid: T1 / (P x "
                               "slowest) = %.3f, the scaling efficiency's compute bound"
                             : "; one GPU %.4f ms; scaling efficiency T1 / (P x TP) = %.3f",
                    r.single_timing.median_ms, r.single_timing.median_ms / (r.world * ring));
      s += buf;
    }
    s += "\n";
    s += "per step (ms, medians; the slowest rank's value):\n";
    s += steps_table(r, r.compute, r.exposed, r.merge, r.transfer, r.send_bytes, "merge");
  }
  if (r.bwd.ran) s += backward_text(r);
  return s;
}

}  // namespace fl::ring
