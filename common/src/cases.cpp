#include "flashladder/cases.h"

#include <algorithm>
#include <cmath>

#include "flashladder/reference.h"

namespace fl {

// ---- what a case needs ---------------------------------------------------------

size_t forward_workspace_bytes(const Rung& r, const Problem& p) {
  if (r.workspace_bytes) return r.workspace_bytes(p);
  if (r.forward_rung > 0)
    if (const Rung* f = registry().find(r.forward_rung); f && f->workspace_bytes) return f->workspace_bytes(p);
  return 0;
}

bool bwd_wants_o_fp32(const Rung& r, const Problem& p) {
  return r.writes_o_fp32 && r.bwd_reads_o_fp32 && r.bwd_reads_o_fp32(p);
}

size_t rung_device_bytes(const Rung& r, const Problem& p, bool deterministic) {
  size_t need = DeviceProblem::device_bytes(p, forward_workspace_bytes(r, p));
  if (r.fp8_inputs) need += DeviceFp8::device_bytes(p, r.fp8_kv_cache);
  if (r.launch_bwd)
    need += DeviceGrads::device_bytes(p, r.bwd_workspace_bytes ? r.bwd_workspace_bytes(p, deterministic) : 0) +
            (bwd_wants_o_fp32(r, p) ? p.o_elements() * sizeof(float) : 0);  // the fp32 O for D
  return need;
}

std::string forward_label(const Rung& r) {
  if (r.forward_rung > 0)
    if (const Rung* f = registry().find(r.forward_rung)) return f->label();
  return r.label();
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

/// "" if the backward of @p r can run @p p on @p dev, else why not.
std::string bwd_why_not(const Rung& r, const Problem& p, const DeviceInfo& dev, bool deterministic) {
  if (!r.not_implemented.empty()) return "not implemented (lab starter)";
  if (p.page_size > 0) return "the backward pass takes a contiguous K/V (no --page-size)";
  std::string why = supports(r, p, dev);
  if (why.empty() && r.bwd_supports) why = r.bwd_supports(p, deterministic);
  if (why.empty()) why = memory_check(r, p, deterministic);
  return why;
}

}  // namespace

std::string why_not(const Rung& r, const Problem& p, const DeviceInfo& dev, bool deterministic) {
  if (r.launch_bwd) return bwd_why_not(r, p, dev, deterministic);
  if (!r.not_implemented.empty()) return "not implemented (lab starter)";
  std::string why = supports(r, p, dev);
  if (why.empty()) why = memory_check(r, p);
  return why;
}

// ---- the checks, and the backward's forward pass -------------------------------

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

namespace {

/// run_bwd_once up to the backward's launch: the forward once, the gradients' tensors poisoned.
BwdRun prepare_bwd(const Rung& r, const Problem& p, const HostInputs& in, const std::vector<uint16_t>& dout,
                   unsigned long long seed, bool deterministic) {
  BwdRun run;
  run.dp = std::make_unique<DeviceProblem>(p, in, forward_workspace_bytes(r, p), seed);
  if (bwd_wants_o_fp32(r, p)) run.dp->want_o_fp32();  // the backward's D reads O before its rounding
  run.dp->poison_outputs();
  launch_once(r, *run.dp);
  run.forward_unwritten = count_unwritten(p, run.dp->download_o(), run.dp->download_lse());
  for (float x : run.dp->download_o_fp32()) run.forward_unwritten += std::isnan(x) ? 1 : 0;
  const size_t ws = r.bwd_workspace_bytes ? r.bwd_workspace_bytes(p, deterministic) : 0;
  run.grads = std::make_unique<DeviceGrads>(p, *run.dp, dout, ws, deterministic);
  run.grads->poison();
  return run;
}

}  // namespace

BwdRun run_bwd_once(const Rung& r, const Problem& p, const HostInputs& in, const std::vector<uint16_t>& dout,
                    unsigned long long seed, bool deterministic) {
  BwdRun run = prepare_bwd(r, p, in, dout, seed, deterministic);
  if (run.forward_unwritten == 0) launch_bwd_once(r, *run.grads);
  return run;
}

void apply_rung_floors(const Rung& r, const Problem& p, BwdCheck* c) {
  if (!r.fp8_dq || !c->grads.dq.checked) return;
  c->grads.dq.tol = tolerance_for(gradient_tolerance_floor_fp8(p.dtype), c->grads.dq.fp32_err);
  decide(&c->grads.dq);
  c->grads.finish();
  summarize(c);
}

BwdCheck check_bwd_run(const Rung& r, const Problem& p, const HostInputs& in, const std::vector<uint16_t>& dout,
                       const BwdRun& run, CheckMode mode, unsigned long long seed) {
  const std::vector<float> dsinks = run.grads->download_dsinks();
  BwdCheck c = check_backward(p, in, dout, run.grads->download_dq(), run.grads->download_dk(),
                              run.grads->download_dv(), mode, seed, kBwdCheckWork, &dsinks);
  apply_rung_floors(r, p, &c);
  if (run.forward_unwritten > 0) {
    c.grads.pass = false;
    c.grads.reason = "the forward pass (" + forward_label(r) + ") left " + std::to_string(run.forward_unwritten) +
                     " elements of O/LSE (or of its fp32 O) unwritten (NaN); the backward pass was not run";
    summarize(&c);
  }
  return c;
}

// ---- the forward case ----------------------------------------------------------

FwdCase::FwdCase(const Rung& r, const Problem& p, const HostInputs& in, unsigned long long seed)
    : FwdCase(r, p, in, seed, nullptr) {}

FwdCase::FwdCase(const Rung& r, const Problem& p, const HostInputs& in, unsigned long long seed,
                 const Fp8Options* fp8)
    : r_(r), p_(p), in_(in), seed_(seed), dp_(p, in, r.workspace_bytes ? r.workspace_bytes(p) : 0, seed) {
  if (fp8) dp_.to_fp8(*fp8, seed, r.fp8_kv_cache);
  dp_.poison_outputs();
}

void FwdCase::launch() { launch_once(r_, dp_); }

CheckResult FwdCase::check(CheckMode mode) const { return check_forward(p_, in_, dp_, mode, seed_, nullptr); }

Timing FwdCase::time(const DeviceInfo& dev, int iters, int warmup) {
  return time_rung(r_, dp_, dev, iters, warmup);
}

// ---- the FP8 case: a forward case on e4m3 copies ---------------------------------

Fp8Case::Fp8Case(const Rung& r, const Problem& p, const HostInputs& in, unsigned long long seed,
                 const Fp8Options& o)
    : FwdCase(r, p, in, seed, &o) {}

CheckResult Fp8Case::check(CheckMode mode, ErrorStats* e2e) const {
  return check_forward(p_, in_, dp_, mode, seed_, e2e);
}

Timing Fp8Case::time(const DeviceInfo& dev, int iters, int warmup, Timing* quant) {
  const Timing t = FwdCase::time(dev, iters, warmup);
  *quant = time_launches([&] { dp_.fp8()->quantize(); }, dev, std::max(5, iters / 5), 2);
  return t;
}

// ---- the backward case -----------------------------------------------------------

BwdCase::BwdCase(const Rung& r, const Problem& p, const HostInputs& in, unsigned long long seed,
                 bool deterministic)
    : r_(r),
      p_(p),
      in_(in),
      seed_(seed),
      dout_(make_grad_output(p, seed)),
      run_(prepare_bwd(r, p, in, dout_, seed, deterministic)) {}

void BwdCase::launch() {
  if (run_.forward_unwritten == 0) launch_bwd_once(r_, *run_.grads);
}

BwdCheck BwdCase::check(CheckMode mode) const { return check_bwd_run(r_, p_, in_, dout_, run_, mode, seed_); }

Timing BwdCase::time(const DeviceInfo& dev, int iters, int warmup) {
  return run_.forward_unwritten == 0 ? time_rung_bwd(r_, *run_.grads, dev, iters, warmup) : Timing{};
}

// ---- the unit of every GPU test ------------------------------------------------

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
  if (r.fp8_inputs) {
    Fp8Case c(r, p, in, seed, fp8);
    c.launch();
    res.fp8 = true;
    res.check = c.check(mode, &res.fp8_e2e);
  } else {
    FwdCase c(r, p, in, seed);
    c.launch();
    res.check = c.check(mode);
  }
  res.ran = true;
  return res;
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
  BwdCase c(r, p, in, seed, deterministic);
  c.launch();
  res.ran = true;
  res.bwd = c.check(mode);
  res.check = res.bwd.summary;
  return res;
}

}  // namespace fl
