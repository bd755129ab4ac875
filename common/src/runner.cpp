#include "flashladder/runner.h"

#include <cstdio>
#include <ctime>
#include <fstream>

#ifndef FL_GIT_SHA
#define FL_GIT_SHA "unknown"
#endif

namespace fl {

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

}  // namespace

bool device_or_skip(const std::string& prog, DeviceInfo* dev) {
  try {
    *dev = query_device();
    return true;
  } catch (const NoDevice& e) {
    std::fprintf(stderr, "%s: %s; nothing to run (exit 77 = skipped)\n", prog.c_str(), e.what());
    return false;
  }
}

int print_registry(const Options& opt, const Registry& reg) {
  if (opt.list) print_list(reg);
  else if (opt.registry_json) std::printf("%s", registry_json(reg).c_str());
  else return -1;
  return kExitOk;
}

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

namespace {

/// The forward mode of run_one: the forward case (cases.h) once on poisoned O and LSE, its
/// check, then its launches timed.
void run_one_fwd(const Rung& r, const Options& opt, const DeviceInfo& dev, const HostInputs& in, RunReport* rep,
                 bool check, bool time) {
  FwdCase c(r, opt.problem, in, opt.seed);
  c.launch();
  if (check) rep->check = c.check(opt.check);
  if (time) rep->timing = c.time(dev, opt.iters, opt.warmup);
}

/// The FP8 mode of run_one (Rung::fp8_inputs): the FP8 case, with its end-to-end error and the
/// quantization's own time.
void run_one_fp8(const Rung& r, const Options& opt, const DeviceInfo& dev, const HostInputs& in, RunReport* rep,
                 bool check, bool time) {
  Fp8Case c(r, opt.problem, in, opt.seed, opt.fp8);
  rep->fp8 = true;
  rep->fp8_kv_cache = r.fp8_kv_cache;
  rep->fp8_mode = fp8_mode_label(opt.fp8);
  c.launch();
  if (check) rep->check = c.check(opt.check, &rep->fp8_e2e);
  if (time) rep->timing = c.time(dev, opt.iters, opt.warmup, &rep->fp8_quant);
}

/// The backward mode of run_one (Rung::launch_bwd): the backward case, whose prepare runs the
/// forward pass once (O, LSE); the backward once on NaN-poisoned gradients, its check, then the
/// backward alone timed.
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
  BwdCase c(r, p, in, opt.seed, opt.deterministic);
  c.launch();
  if (check) {
    rep->bwd = c.check(opt.check);
    rep->check = rep->bwd.summary;
  }
  if (time) rep->timing = c.time(dev, opt.iters, opt.warmup);
}

}  // namespace

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
  } else {
    rep->workspace_bytes = r.workspace_bytes ? r.workspace_bytes(p) : 0;
    if (r.fp8_inputs) run_one_fp8(r, opt, dev, in, rep, check, time);
    else run_one_fwd(r, opt, dev, in, rep, check, time);
  }
  rep->kernels = rung_resources(r, p);
}

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
  if (const std::string why = feature_support(*rung, opt.problem); !why.empty()) {
    std::fprintf(stderr, "%s: rung %s cannot run %s: %s\n", prog.c_str(), rung->label().c_str(),
                 opt.problem.describe().c_str(), why.c_str());
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

}  // namespace fl
