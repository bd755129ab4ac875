#include "flashladder/runner.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>
#include <map>
#include <numeric>
#include <random>
#include <sstream>
#include <stdexcept>

#ifndef FL_GIT_SHA
#define FL_GIT_SHA "unknown"
#endif

namespace fl {

// ---- DeviceProblem ------------------------------------------------------------
namespace {
int pages_per_seq(const Problem& p) { return (p.seqlen_k + p.page_size - 1) / p.page_size; }
size_t kv_elems(const Problem& p) {
  return p.page_size > 0 ? static_cast<size_t>(p.batch) * pages_per_seq(p) * p.page_size * p.heads_kv * p.head_dim
                         : p.kv_elements();
}
/// A 16-bit device tensor, whole, to the host.
std::vector<uint16_t> download16(const DeviceBuffer& b) {
  std::vector<uint16_t> h(b.bytes() / 2);
  b.download(h.data(), b.bytes());
  return h;
}
}  // namespace

size_t DeviceProblem::device_bytes(const Problem& p, size_t workspace_bytes) {
  const size_t qo = p.q_elements() * 2;
  const size_t lse = static_cast<size_t>(p.batch) * p.heads_q * p.seqlen_q * 4;
  return 2 * qo + 2 * kv_elems(p) * 2 + lse + workspace_bytes;
}

DeviceProblem::DeviceProblem(const Problem& p, const HostInputs& in, size_t workspace_bytes,
                             unsigned long long seed)
    : p_(p) {
  const int D = p.head_dim;
  const size_t q_elems = p.q_elements();
  q_ = DeviceBuffer(q_elems * 2);
  o_ = DeviceBuffer(q_elems * 2);
  lse_ = DeviceBuffer(static_cast<size_t>(p.batch) * p.heads_q * p.seqlen_q * sizeof(float));
  k_ = DeviceBuffer(kv_elems(p) * 2);
  v_ = DeviceBuffer(kv_elems(p) * 2);
  if (workspace_bytes > 0) ws_ = DeviceBuffer(workspace_bytes);
  q_.upload(in.q.data(), q_elems * 2);

  AttnParams& a = params_;
  a = make_attn_params(p);  // shapes, scale, mask fields and dense strides
  const int64_t hd = static_cast<int64_t>(p.heads_kv) * D;
  if (p.page_size == 0) {
    k_.upload(in.k.data(), in.k.size() * 2);
    v_.upload(in.v.data(), in.v.size() * 2);
  } else {
    // Paged KV cache: token j of sequence b lives in page table[b][j / page] at
    // row j % page. Pages are shuffled so a kernel that ignores the table fails.
    const int pps = pages_per_seq(p), page = p.page_size;
    std::vector<int> table(static_cast<size_t>(p.batch) * pps);
    std::iota(table.begin(), table.end(), 0);
    std::mt19937_64 rng(seed ^ 0x9a9edull);
    std::shuffle(table.begin(), table.end(), rng);
    std::vector<uint16_t> kp(kv_elems(p), 0), vp(kv_elems(p), 0);
    for (int b = 0; b < p.batch; ++b)
      for (int j = 0; j < p.seqlen_k; ++j) {
        const size_t dst = (static_cast<size_t>(table[b * pps + j / page]) * page + j % page) * hd;
        const size_t src = (static_cast<size_t>(b) * p.seqlen_k + j) * hd;
        std::copy_n(in.k.begin() + src, hd, kp.begin() + dst);
        std::copy_n(in.v.begin() + src, hd, vp.begin() + dst);
      }
    k_.upload(kp.data(), kp.size() * 2);
    v_.upload(vp.data(), vp.size() * 2);
    table_ = DeviceBuffer(table.size() * sizeof(int));
    table_.upload(table.data(), table.size() * sizeof(int));
    a.k_batch_stride = a.v_batch_stride = 0;  // unused: the block table locates pages
    a.block_table = table_.as<int>();
    a.block_table_stride = pps;
    a.page_size = page;
  }
  a.q = q_.get();
  a.k = k_.get();
  a.v = v_.get();
  a.o = o_.get();
  a.lse = lse_.as<float>();
  a.workspace = ws_.get();
  a.workspace_bytes = workspace_bytes;
  params16_ = a;
}

void DeviceProblem::to_fp8(const Fp8Options& o, unsigned long long seed) {
  fp8_ = std::make_unique<DeviceFp8>(p_, params16_, o, seed);
  fp8_->quantize();
  FL_CUDA_CHECK(cudaDeviceSynchronize());
  params_ = fp8_->params();
}

void DeviceProblem::want_o_fp32() {
  if (o32_.bytes() == 0) o32_ = DeviceBuffer(p_.q_elements() * sizeof(float));
  params_.o_fp32 = params16_.o_fp32 = o32_.as<float>();
}

void DeviceProblem::poison_outputs() {
  o_.poison();
  lse_.poison();
  if (o32_.bytes() > 0) o32_.poison();
}

std::vector<uint16_t> DeviceProblem::download_o() const { return download16(o_); }

std::vector<float> DeviceProblem::download_o_fp32() const {
  std::vector<float> o(o32_.bytes() / sizeof(float));
  if (!o.empty()) o32_.download(o.data(), o32_.bytes());
  return o;
}

std::vector<float> DeviceProblem::download_lse() const {
  std::vector<float> l(lse_.bytes() / 4);
  lse_.download(l.data(), lse_.bytes());
  return l;
}

// ---- DeviceGrads ---------------------------------------------------------------

size_t DeviceGrads::device_bytes(const Problem& p, size_t workspace_bytes) {
  return 2 * (2 * p.q_elements() + 2 * p.kv_elements()) + workspace_bytes;  // dO, dQ + dK, dV
}

DeviceGrads::DeviceGrads(const Problem& p, const DeviceProblem& fwd, const std::vector<uint16_t>& dout,
                         size_t workspace_bytes, bool deterministic) {
  if (p.page_size > 0) throw std::invalid_argument("the backward pass takes a contiguous K/V (no --page-size)");
  if (dout.size() != p.q_elements())
    throw std::invalid_argument("dO has " + std::to_string(dout.size()) + " elements, expected " +
                                std::to_string(p.q_elements()));
  dout_ = DeviceBuffer(p.q_elements() * 2);
  dq_ = DeviceBuffer(p.q_elements() * 2);
  dk_ = DeviceBuffer(p.kv_elements() * 2);
  dv_ = DeviceBuffer(p.kv_elements() * 2);
  if (workspace_bytes > 0) ws_ = DeviceBuffer(workspace_bytes);
  dout_.upload(dout.data(), dout.size() * 2);
  // dO has O's strides, dQ Q's, dK K's and dV V's (backward.h): the forward's params say them.
  params_.fwd = fwd.params();
  params_.dout = dout_.get();
  params_.dq = dq_.get();
  params_.dk = dk_.get();
  params_.dv = dv_.get();
  params_.workspace = ws_.get();
  params_.workspace_bytes = workspace_bytes;
  params_.deterministic = deterministic ? 1 : 0;
}

void DeviceGrads::poison() {
  dq_.poison();
  dk_.poison();
  dv_.poison();
  if (ws_.bytes() > 0) ws_.poison();
}

std::vector<uint16_t> DeviceGrads::download_dq() const { return download16(dq_); }
std::vector<uint16_t> DeviceGrads::download_dk() const { return download16(dk_); }
std::vector<uint16_t> DeviceGrads::download_dv() const { return download16(dv_); }

// ---- running ------------------------------------------------------------------
void launch_once(const Rung& r, DeviceProblem& dp) {
  r.launch(dp.params(), nullptr);
  FL_CUDA_CHECK(cudaDeviceSynchronize());
}

void launch_bwd_once(const Rung& r, DeviceGrads& g) {
  r.launch_bwd(g.params(), nullptr);
  FL_CUDA_CHECK(cudaDeviceSynchronize());
}

Timing time_rung(const Rung& r, DeviceProblem& dp, const DeviceInfo& dev, int iters, int warmup) {
  return time_launches([&] { r.launch(dp.params(), nullptr); }, dev, iters, warmup);
}

Timing time_rung_bwd(const Rung& r, DeviceGrads& g, const DeviceInfo& dev, int iters, int warmup) {
  return time_launches([&] { r.launch_bwd(g.params(), nullptr); }, dev, iters, warmup);
}

Timing time_launches(const std::function<void()>& launch, const DeviceInfo& dev, int iters, int warmup) {
  for (int i = 0; i < warmup; ++i) launch();
  FL_CUDA_CHECK(cudaDeviceSynchronize());
  L2Flusher flusher(dev.l2_bytes);
  EventTimer timer;
  std::vector<double> ms;
  for (int i = 0; i < iters; ++i) {
    flusher.flush();
    timer.start();
    launch();
    ms.push_back(timer.stop());
  }
  std::sort(ms.begin(), ms.end());
  Timing t;
  t.timed = true;
  t.iters = iters;
  t.min_ms = ms.front();
  t.max_ms = ms.back();
  t.median_ms = ms.size() % 2 ? ms[ms.size() / 2] : 0.5 * (ms[ms.size() / 2 - 1] + ms[ms.size() / 2]);
  return t;
}

size_t forward_workspace_bytes(const Rung& r, const Problem& p) {
  if (r.workspace_bytes) return r.workspace_bytes(p);
  if (r.forward_rung > 0)
    if (const Rung* f = registry().find(r.forward_rung); f && f->workspace_bytes) return f->workspace_bytes(p);
  return 0;
}

size_t rung_device_bytes(const Rung& r, const Problem& p, bool deterministic) {
  size_t need = DeviceProblem::device_bytes(p, forward_workspace_bytes(r, p));
  if (r.fp8_inputs) need += DeviceFp8::device_bytes(p);
  if (r.launch_bwd)
    need += DeviceGrads::device_bytes(p, r.bwd_workspace_bytes ? r.bwd_workspace_bytes(p, deterministic) : 0) +
            (r.writes_o_fp32 ? p.q_elements() * sizeof(float) : 0);  // the fp32 O for D
  return need;
}

namespace {

/// "" if the problem fits in free device memory, else the numbers.
std::string memory_check(const Rung& r, const Problem& p, bool deterministic = false) {
  const size_t ws = r.launch_bwd ? (r.bwd_workspace_bytes ? r.bwd_workspace_bytes(p, deterministic) : 0)
                                 : (r.workspace_bytes ? r.workspace_bytes(p) : 0);
  const size_t need = rung_device_bytes(r, p, deterministic);
  size_t free_b = 0, total_b = 0;
  FL_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
  // Keep 5% back for the L2 flush buffer and the CUDA context.
  if (static_cast<double>(need) > 0.95 * static_cast<double>(free_b)) {
    std::string s = "needs " + format_bytes(static_cast<double>(need)) + " of GPU memory";
    if (ws > 0) s += " (" + format_bytes(static_cast<double>(ws)) + " of it rung workspace)";
    s += " but only " + format_bytes(static_cast<double>(free_b)) + " of " +
         format_bytes(static_cast<double>(total_b)) + " is free";
    return s;
  }
  return "";
}

/// The label of the rung whose forward pass @p r runs ("06_headdim_tiles"; @p r's own if none).
std::string forward_label(const Rung& r) {
  if (r.forward_rung > 0)
    if (const Rung* f = registry().find(r.forward_rung)) return f->label();
  return r.label();
}

/// "" if the backward of @p r can run @p p on @p dev, else why not.
std::string bwd_why_not(const Rung& r, const Problem& p, const DeviceInfo& dev, bool deterministic) {
  if (!r.not_implemented.empty()) return "not implemented (lab starter)";
  if (p.page_size > 0) return "the backward pass takes a contiguous K/V (no --page-size)";
  std::string why = supports(r, p, dev);
  if (why.empty()) why = memory_check(r, p, deterministic);
  return why;
}

}  // namespace

BwdRun run_bwd_once(const Rung& r, const Problem& p, const HostInputs& in, const std::vector<uint16_t>& dout,
                    unsigned long long seed, bool deterministic) {
  BwdRun run;
  run.dp = std::make_unique<DeviceProblem>(p, in, forward_workspace_bytes(r, p), seed);
  if (r.writes_o_fp32) run.dp->want_o_fp32();  // the backward's D reads O before its rounding
  run.dp->poison_outputs();
  launch_once(r, *run.dp);
  run.forward_unwritten = count_unwritten(p, run.dp->download_o(), run.dp->download_lse());
  for (float x : run.dp->download_o_fp32()) run.forward_unwritten += std::isnan(x) ? 1 : 0;
  const size_t ws = r.bwd_workspace_bytes ? r.bwd_workspace_bytes(p, deterministic) : 0;
  run.grads = std::make_unique<DeviceGrads>(p, *run.dp, dout, ws, deterministic);
  run.grads->poison();
  if (run.forward_unwritten == 0) launch_bwd_once(r, *run.grads);
  return run;
}

BwdCheck check_bwd_run(const Rung& r, const Problem& p, const HostInputs& in, const std::vector<uint16_t>& dout,
                       const BwdRun& run, CheckMode mode, unsigned long long seed) {
  BwdCheck c = check_backward(p, in, dout, run.grads->download_dq(), run.grads->download_dk(),
                              run.grads->download_dv(), mode, seed);
  if (run.forward_unwritten > 0) {
    c.grads.pass = false;
    c.grads.reason = "the forward pass (" + forward_label(r) + ") left " + std::to_string(run.forward_unwritten) +
                     " elements of O/LSE (or of its fp32 O) unwritten (NaN); the backward pass was not run";
    summarize(&c);
  }
  return c;
}

CaseResult run_bwd_case(const Rung& r, const Problem& p, InputKind input, CheckMode mode, unsigned long long seed,
                        bool deterministic) {
  CaseResult res;
  res.backward = true;
  const DeviceInfo dev = query_device();
  res.skipped = bwd_why_not(r, p, dev, deterministic);
  if (res.skipped.empty() && input == InputKind::identity)
    res.skipped = "identity input: peaked attention makes dQ cancel, the gradient policy cannot judge a 16-bit backward on it";
  if (!res.skipped.empty()) return res;
  const HostInputs in = make_inputs(p, input, seed);
  const std::vector<uint16_t> dout = make_grad_output(p, seed);
  const BwdRun run = run_bwd_once(r, p, in, dout, seed, deterministic);
  res.ran = true;
  res.bwd = check_bwd_run(r, p, in, dout, run, mode, seed);
  res.check = res.bwd.summary;
  return res;
}

CheckResult check_forward(const Problem& p, const HostInputs& in, const DeviceProblem& dp, CheckMode mode,
                          unsigned long long seed, ErrorStats* e2e) {
  const std::vector<uint16_t> out = dp.download_o();
  const std::vector<float> lse = dp.download_lse();
  if (!dp.fp8()) return check_output(p, in, out, lse, mode, seed);
  const Tolerance floor = tolerance_floor_fp8(p.dtype);
  CheckResult c = check_output(p, dp.fp8()->dequantized(), out, lse, mode, seed, &floor);
  const std::vector<RowId> rows = rows_for_check(p, mode, seed);
  *e2e = rows.empty() ? ErrorStats{} : compare_rows(p, out, lse, rows, reference_fp64(p, in, rows));
  return c;
}

CaseResult run_case(const Rung& r, const Problem& p, InputKind input, CheckMode mode, unsigned long long seed) {
  return run_fp8_case(r, p, input, mode, seed, Fp8Options{});
}

CaseResult run_fp8_case(const Rung& r, const Problem& p, InputKind input, CheckMode mode, unsigned long long seed,
                        const Fp8Options& fp8) {
  if (r.launch_bwd) return run_bwd_case(r, p, input, mode, seed, false);
  CaseResult res;
  const DeviceInfo dev = query_device();
  res.skipped = supports(r, p, dev);
  if (res.skipped.empty()) res.skipped = memory_check(r, p);
  if (!res.skipped.empty()) return res;
  const HostInputs in = make_inputs(p, input, seed);
  DeviceProblem dp(p, in, r.workspace_bytes ? r.workspace_bytes(p) : 0, seed);
  if (r.fp8_inputs) dp.to_fp8(fp8, seed);
  dp.poison_outputs();
  launch_once(r, dp);
  res.ran = true;
  res.fp8 = r.fp8_inputs;
  res.check = check_forward(p, in, dp, mode, seed, &res.fp8_e2e);
  return res;
}

std::vector<KernelResources> rung_resources(const Rung& r, const Problem& p) {
  std::vector<KernelResources> out;
  if (!r.kernels) return out;
  for (const auto& k : r.kernels(p)) out.push_back(kernel_resources(k.name, k.func, k.block_threads, k.dynamic_smem));
  return out;
}

std::string program_name(const char* argv0) {
  std::string s = argv0 ? argv0 : "flashladder";
  const auto slash = s.find_last_of('/');
  return slash == std::string::npos ? s : s.substr(slash + 1);
}

/// The current time, UTC, ISO 8601 ("2026-11-23T11:02:03Z").
std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

namespace {

void print_list(const Registry& reg) {
  for (const auto& r : reg.all()) {
    std::printf("%-34s %s\n", r.label().c_str(), r.summary.c_str());
    for (const std::string& line : describe_baselines(reg, r)) std::printf("%-34s   %s\n", "", line.c_str());
  }
}

/// Fills @p dev with device 0; false (and says why: exit 77 = skipped) when there is none.
bool device_or_skip(const std::string& prog, DeviceInfo* dev) {
  try {
    *dev = query_device();
    return true;
  } catch (const NoDevice& e) {
    std::fprintf(stderr, "%s: %s; nothing to run (exit 77 = skipped)\n", prog.c_str(), e.what());
    return false;
  }
}

/// --list / --registry-json: prints the registry (no GPU needed) and returns kExitOk; -1 otherwise.
int print_registry(const Options& opt, const Registry& reg) {
  if (opt.list) print_list(reg);
  else if (opt.registry_json) std::printf("%s", registry_json(reg).c_str());
  else return -1;
  return kExitOk;
}

std::string device_line(const DeviceInfo& d) {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "%s: %s, %d SMs, %.0f MHz, %s memory (%s free), L2 %s, smem/block opt-in %s\n"
                "peaks (clock x units): fp32 FMA %.1f TFLOP/s, 16-bit tensor %.0f TFLOP/s, DRAM %.0f GB/s\n"
                "CUDA runtime %d, driver %d",
                d.name.c_str(), d.arch().c_str(), d.sm_count, d.clock_khz / 1e3,
                format_bytes(static_cast<double>(d.mem_total)).c_str(),
                format_bytes(static_cast<double>(d.mem_free)).c_str(), format_bytes(d.l2_bytes).c_str(),
                format_bytes(d.smem_per_block_optin).c_str(), d.peak_fp32_tflops, d.peak_tensor_tflops, d.peak_gbps,
                d.cuda_runtime_version, d.driver_version);
  return buf;
}

/// Parses and validates; returns -1 to continue or an exit code.
int parse_or_exit(int argc, char** argv, Options* opt, const std::string& prog) {
  const ParseResult pr = parse_cli(argc, argv, opt);
  if (!pr.ok) {
    std::fprintf(stderr, "%s: error: %s\n", prog.c_str(), pr.error.c_str());
    return kExitBadInput;
  }
  if (opt->help) {
    std::printf("%s", usage(prog).c_str());
    return kExitOk;
  }
  const std::string bad = validate(opt->problem);
  if (!bad.empty()) {
    std::fprintf(stderr, "%s: error: %s\n", prog.c_str(), bad.c_str());
    return kExitBadInput;
  }
  return -1;
}

/// The backward mode of run_one (Rung::launch_bwd): the forward pass once (O, LSE), the
/// backward once on NaN-poisoned gradients, its check, then the backward alone timed.
void run_one_bwd(const Rung& r, const Options& opt, const DeviceInfo& dev, const HostInputs& in, RunReport* rep,
                 bool check, bool time) {
  const Problem& p = opt.problem;
  rep->backward = true;
  rep->deterministic = opt.deterministic;
  rep->forward_label = forward_label(r);
  rep->workspace_bytes = r.bwd_workspace_bytes ? r.bwd_workspace_bytes(p, opt.deterministic) : 0;
  if (opt.input == InputKind::identity)
    rep->notes.push_back("identity input: peaked attention makes dQ cancel; a faithful 16-bit backward can "
                         "exceed the gradients' relative floor on it (the tests skip it)");
  const std::vector<uint16_t> dout = make_grad_output(p, opt.seed);
  BwdRun run = run_bwd_once(r, p, in, dout, opt.seed, opt.deterministic);
  if (check) {
    rep->bwd = check_bwd_run(r, p, in, dout, run, opt.check, opt.seed);
    rep->check = rep->bwd.summary;
  }
  if (time && run.forward_unwritten == 0) rep->timing = time_rung_bwd(r, *run.grads, dev, opt.iters, opt.warmup);
  rep->kernels = rung_resources(r, p);
}

/// Runs one rung on one problem: check, time, resources. Fills @p rep. A backward rung
/// (Rung::launch_bwd) runs its backward mode (run_one_bwd).
void run_one(const Rung& r, const Options& opt, const DeviceInfo& dev, const HostInputs& in, RunReport* rep,
             bool check, bool time) {
  const Problem& p = opt.problem;
  rep->rung_number = r.number;
  rep->rung_name = r.name;
  rep->variant = r.variant;
  rep->summary = r.summary;
  rep->peak = r.peak;
  rep->problem = p;
  rep->input = input_kind_name(opt.input);
  rep->seed = opt.seed;
  rep->device = dev;
  rep->date = utc_now();
  rep->git_sha = FL_GIT_SHA;
  if (r.notes) rep->notes = r.notes(p);
  if (r.launch_bwd) {
    run_one_bwd(r, opt, dev, in, rep, check, time);
    return;
  }
  rep->workspace_bytes = r.workspace_bytes ? r.workspace_bytes(p) : 0;
  DeviceProblem dp(p, in, rep->workspace_bytes, opt.seed);
  if (r.fp8_inputs) {
    dp.to_fp8(opt.fp8, opt.seed);
    rep->fp8 = true;
    rep->fp8_mode = fp8_mode_label(opt.fp8);
  }
  dp.poison_outputs();
  launch_once(r, dp);
  if (check)
    rep->check = check_forward(p, in, dp, opt.check, opt.seed, &rep->fp8_e2e);
  if (time) rep->timing = time_rung(r, dp, dev, opt.iters, opt.warmup);
  // The quantization's own time (once per Q/K/V, not in the kernel's): the same timer.
  if (time && r.fp8_inputs)
    rep->fp8_quant = time_launches([&] { dp.fp8()->quantize(); }, dev, std::max(5, opt.iters / 5), 2);
  rep->kernels = rung_resources(r, p);
}

/// "" if @p r can run @p p on @p dev (supports, memory, not a lab stub), else why not.
std::string why_not(const Rung& r, const Problem& p, const DeviceInfo& dev, bool deterministic = false) {
  if (r.launch_bwd) return bwd_why_not(r, p, dev, deterministic);
  if (!r.not_implemented.empty()) return "not implemented (lab starter)";
  std::string why = supports(r, p, dev);
  if (why.empty()) why = memory_check(r, p);
  return why;
}

/// Times @p r's declared baselines (Rung::baselines) on the same input. @p known holds
/// times already measured on this input (the tour), by label: those are reused, not re-run,
/// and what is timed here is added to it.
std::vector<BaselineResult> time_baselines(const Registry& reg, const Rung& r, const Options& opt,
                                           const DeviceInfo& dev, const HostInputs& in,
                                           std::map<std::string, Timing>* known) {
  std::vector<BaselineResult> out;
  auto time_of = [&](const Rung& c) -> Timing {
    if (auto it = known->find(c.label()); it != known->end()) return it->second;
    RunReport rep;
    run_one(c, opt, dev, in, &rep, false, true);
    (*known)[c.label()] = rep.timing;
    return rep.timing;
  };
  for (const Baseline& b : r.baselines) {
    BaselineResult res;
    res.why = b.why;
    const std::vector<const Rung*> cands = reg.candidates(r, b);
    if (b.kind == Baseline::Kind::rung) {
      const Rung* main = reg.find(b.number);
      res.label = b.target_label(main ? main->name : "?");
      if (cands.empty()) {
        res.skipped = "not built (see -DFL_RUNGS)";
      } else if (std::string why = why_not(*cands[0], opt.problem, dev, opt.deterministic); !why.empty()) {
        res.skipped = why;
      } else {
        res.timing = time_of(*cands[0]);
      }
    } else {
      res.fastest_of_earlier = true;
      for (const Rung* c : cands) {
        if (!why_not(*c, opt.problem, dev, opt.deterministic).empty()) continue;
        const Timing t = time_of(*c);
        char buf[96];
        std::snprintf(buf, sizeof buf, "%s%s %.4f ms", res.considered.empty() ? "" : ", ", c->label().c_str(),
                      t.median_ms);
        res.considered += buf;
        if (!res.timing.timed || t.median_ms < res.timing.median_ms) {
          res.timing = t;
          res.label = c->label();
        }
      }
      if (!res.timing.timed) {
        res.label = "the fastest earlier rung";
        res.skipped = "no earlier rung runs this shape";
      }
    }
    out.push_back(res);
  }
  return out;
}

}  // namespace

int run_main(int argc, char** argv, int rung_number) {
  const std::string prog = program_name(argv[0]);
  Options opt;
  if (const int rc = parse_or_exit(argc, argv, &opt, prog); rc >= 0) return rc;
  const Registry& reg = registry();
  if (const int rc = print_registry(opt, reg); rc >= 0) return rc;
  const Rung* rung = reg.find(rung_number, opt.variant);
  if (!rung) {
    std::string names;
    for (const auto& r : reg.all())
      if (r.number == rung_number && !r.variant.empty()) names += " " + r.variant;
    std::fprintf(stderr, "%s: error: --variant: rung %d has no variant '%s' (variants:%s)\n", prog.c_str(),
                 rung_number, opt.variant.c_str(), names.empty() ? " none" : names.c_str());
    return kExitBadInput;
  }
  // A lab starter tree says so before anything else, with or without a GPU.
  if (!rung->not_implemented.empty()) {
    std::fprintf(stderr, "%s: not implemented: %s\n", prog.c_str(), rung->not_implemented.c_str());
    return kExitCheckFailed;
  }
  if (opt.sweep && !rung->sweep) {
    std::fprintf(stderr, "%s: error: --sweep: rung %d has no sweep\n", prog.c_str(), rung_number);
    return kExitBadInput;
  }
  if (opt.deterministic && !rung->launch_bwd) {
    std::fprintf(stderr, "%s: error: --deterministic: rung %d has no backward pass\n", prog.c_str(), rung_number);
    return kExitBadInput;
  }
  try {
    DeviceInfo dev;
    if (!device_or_skip(prog, &dev)) return kExitNoDevice;
    if (opt.device_info) {
      std::printf("%s\n", device_line(dev).c_str());
      return kExitOk;
    }
    if (opt.sweep) return rung->sweep(opt);
    const Problem& p = opt.problem;
    const std::string why = why_not(*rung, p, dev, opt.deterministic);
    if (!why.empty()) {
      std::fprintf(stderr, "%s: rung %s cannot run %s: %s\n", prog.c_str(), rung->label().c_str(),
                   p.describe().c_str(), why.c_str());
      return kExitBadInput;
    }
    const HostInputs in = make_inputs(p, opt.input, opt.seed);
    RunReport rep;
    run_one(*rung, opt, dev, in, &rep, true, true);

    // The rung's declared baselines on the same input, for the speedup lines.
    if (opt.compare_baselines) {
      std::map<std::string, Timing> known{{rung->label(), rep.timing}};
      rep.baselines = time_baselines(reg, *rung, opt, dev, in, &known);
    }
    std::printf("%s", format_report(rep).c_str());
    if (!opt.json_path.empty()) {
      std::ofstream f(opt.json_path);
      f << to_json(rep) << "\n";
      if (!f) {
        std::fprintf(stderr, "%s: error: --json: cannot write '%s'\n", prog.c_str(), opt.json_path.c_str());
        return kExitBadInput;
      }
    }
    return rep.check.pass ? kExitOk : kExitCheckFailed;
  } catch (const CudaError& e) {
    std::fprintf(stderr, "%s: CUDA error: %s\n", prog.c_str(), e.what());
    return kExitCheckFailed;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", prog.c_str(), e.what());
    return kExitCheckFailed;
  }
}

namespace {

/// One section of the tour: a lesson, the problem it holds on, and the rungs that teach it.
struct TourSection {
  std::string title;  ///< what the section shows, and why on this problem
  Problem problem;
  std::vector<const Rung*> rungs;
  bool decode = false;  ///< rates in GB/s of K/V (decode) instead of TFLOP/s
};

/// A prefill problem of B x seqlen = 16k tokens and hidden 2048 (the bench's standard sweep) at
/// @p head_dim and @p seqlen, in the tour's dtype.
Problem tour_prefill_problem(int seqlen, int head_dim, DType dtype) {
  Problem p;
  p.batch = 16384 / seqlen;
  p.seqlen_q = p.seqlen_k = seqlen;
  p.heads_q = p.heads_kv = 2048 / head_dim;
  p.head_dim = head_dim;
  p.dtype = dtype;
  return p;
}

/// The tour's decode problem: one new token of 32 query heads against a 16k-token
/// KV cache of 8 KV heads (GQA 4:1), head_dim 128, in the tour's dtype.
Problem tour_decode_problem(DType dtype) {
  Problem p;
  p.batch = 1;
  p.seqlen_q = 1;
  p.seqlen_k = 16384;
  p.heads_q = 32;
  p.heads_kv = 8;
  p.head_dim = 128;
  p.dtype = dtype;
  return p;
}

/// The tour's sections, each lesson on a problem where it holds (or all on the command line's
/// problem when a shape flag was given): the CUDA-core rungs on a small problem (rung 01 writes S
/// to HBM, and the fp32 rungs take seconds on a large one); the tensor-core and Hopper rungs where
/// they reach their rates (head_dim 128, 4k keys: on 1k keys at head_dim 64 each block's start-up
/// and epilogue, which rung 10 does not overlap, weigh as much as its schedule gains); the backward
/// rung on that problem; the decode rung, after every earlier rung that runs its problem.
std::vector<TourSection> tour_sections(const Registry& reg, const Options& opt) {
  const DType t = opt.problem.dtype;
  Problem small = opt.problem, large = opt.problem, decode = tour_decode_problem(t);
  if (!opt.shape_set) {
    small = Problem{};  // B=4, 1k tokens, 16 heads of 64: rung 01's S is 256 MiB
    small.dtype = t;
    large = tour_prefill_problem(4096, 128, t);
  }
  const std::string which = opt.shape_set ? " (the command line's problem)" : "";
  TourSection cuda{"prefill on CUDA cores (rungs without tensor cores)" + which +
                       (opt.shape_set ? "" : ": a small problem, as rung 01 writes S to HBM"),
                   small, {}, false};
  TourSection tensor{"prefill on tensor cores" + which +
                         (opt.shape_set ? "" : ": head_dim 128, 4k keys, where the Hopper rungs reach their rates"),
                     large, {}, false};
  TourSection bwd{"backward (dQ, dK, dV after the forward; TFLOP/s by FlashAttention's 2.5x convention, "
                  "compared with PyTorch in the bench's backward family)" + which,
                  large, {}, false};
  TourSection dec{"decode: one new token against a KV cache, after every earlier rung that runs it", decode, {}, true};
  for (const Rung* r : reg.mains()) {
    if (r->launch_bwd) bwd.rungs.push_back(r);  // in_tour is about forward rows: its launch is another rung's
    else if (!r->in_tour) continue;
    else if (r->decode) dec.rungs.push_back(r);
    else (r->peak == Peak::fp32_fma ? cuda : tensor).rungs.push_back(r);
  }
  if (!dec.rungs.empty()) {  // the decode rung after every earlier forward rung (its baseline: the fastest)
    std::vector<const Rung*> rows;
    for (const Rung* r : reg.mains())
      if (r->in_tour && !r->launch_bwd && r->number <= dec.rungs.back()->number) rows.push_back(r);
    dec.rungs = rows;
  }
  std::vector<TourSection> out;
  for (TourSection* s : {&cuda, &tensor, &bwd, &dec})
    if (!s->rungs.empty()) out.push_back(*s);
  return out;
}

/// One section of the tour: every rung in it on its problem, one line each, with the speedup over
/// the rung's first declared baseline. Returns false if a check failed.
bool tour_section(const Registry& reg, const TourSection& sec, const Options& base, const DeviceInfo& dev) {
  Options opt = base;
  opt.problem = sec.problem;
  const Problem& p = opt.problem;
  std::printf("%s\n  %s, input %s, %d timed runs each\n", sec.title.c_str(), p.describe().c_str(),
              input_kind_name(opt.input), opt.iters);
  std::printf("%-22s %10s %9s %8s %8s  %-34s %s\n", "rung", "time ms", sec.decode ? "GB/s" : "TFLOP/s", "% peak",
              "speedup", "vs baseline", "check");
  const HostInputs in = make_inputs(p, opt.input, opt.seed);
  std::map<std::string, Timing> known;  // every time measured on this input, by label
  bool all_pass = true;
  for (const Rung* r : sec.rungs) {
    if (!r->not_implemented.empty()) {
      std::printf("%-22s %10s  FAIL: not implemented: %s\n", r->label().c_str(), "-", r->not_implemented.c_str());
      all_pass = false;
      continue;
    }
    try {
      if (const std::string why = why_not(*r, p, dev); !why.empty()) {
        std::printf("%-22s %10s  skipped: %s\n", r->label().c_str(), "-", why.c_str());
        continue;
      }
      RunReport rep;
      run_one(*r, opt, dev, in, &rep, true, true);
      known[r->label()] = rep.timing;
      const double ms = rep.timing.median_ms;
      // The headline baseline: earlier rungs of this section are reused, others are run now.
      std::string vs = "-", speedup = "-";
      if (!r->baselines.empty()) {
        Rung first = *r;
        first.baselines.resize(1);
        const BaselineResult b = time_baselines(reg, first, opt, dev, in, &known).front();
        vs = b.label + (b.fastest_of_earlier ? " (fastest earlier)" : "");
        if (b.skipped.empty()) {
          char buf[32];
          std::snprintf(buf, sizeof buf, "%.2fx", b.timing.median_ms / ms);
          speedup = buf;
        } else {
          vs += ": " + b.skipped;
        }
      }
      const double rate = sec.decode ? gbps_of(p, ms, Peak::memory) : run_tflops(rep);
      std::printf("%-22s %10.4f %9.2f %8.1f %8s  %-34s %s\n", r->label().c_str(), ms, rate, percent_of_peak(rep),
                  speedup.c_str(), vs.c_str(),
                  rep.check.pass ? ("PASS (" + rep.check.mode + ")").c_str() : ("FAIL: " + rep.check.reason).c_str());
      all_pass = all_pass && rep.check.pass;
    } catch (const std::exception& e) {
      std::printf("%-22s FAIL: %s\n", r->label().c_str(), e.what());
      all_pass = false;
    }
  }
  return all_pass;
}

}  // namespace

int tour_main(int argc, char** argv) {
  const std::string prog = program_name(argv[0]);
  Options opt;
  opt.iters = 20;
  if (const int rc = parse_or_exit(argc, argv, &opt, prog); rc >= 0) return rc;
  const Registry& reg = registry();
  if (const int rc = print_registry(opt, reg); rc >= 0) return rc;
  DeviceInfo dev;
  if (!device_or_skip(prog, &dev)) return kExitNoDevice;
  std::printf("FlashLadder tour on %s (%s, %d SMs)\n", dev.name.c_str(), dev.arch().c_str(), dev.sm_count);
  std::printf("speedup = time of the rung's baseline / time of the rung, on the same input (--list: every baseline)\n");
  bool pass = true;
  for (const TourSection& sec : tour_sections(reg, opt)) {
    std::printf("\n");
    pass = tour_section(reg, sec, opt, dev) && pass;
  }
  return pass ? kExitOk : kExitCheckFailed;
}

}  // namespace fl
