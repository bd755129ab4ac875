#include "flashladder/tour.h"

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "flashladder/runner.h"

namespace fl {

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

/// The tour's MLA problem (rung 17): a decode step of 16 sequences, 128 query heads each, over a
/// paged latent cache of 4k tokens (576 dims, V its first 512), in the tour's dtype.
Problem tour_mla_problem(DType dtype) {
  Problem p = mla_problem(16, 1, 4096, 128, dtype, false);
  p.page_size = 64;
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
  TourSection mla{"MLA decode: 128 heads over one paged latent cache (no earlier rung takes head_dim 576)",
                  opt.shape_set ? opt.problem : tour_mla_problem(t), {}, true};
  for (const Rung* r : reg.mains()) {
    if (r->launch_bwd) bwd.rungs.push_back(r);  // in_tour is about forward rows: its launch is another rung's
    else if (!r->in_tour) continue;
    else if (r->decode && r->head_dims.size() == 1 && r->head_dims[0] == kMlaHeadDim) mla.rungs.push_back(r);
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
  for (TourSection* s : {&cuda, &tensor, &bwd, &dec, &mla})
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
      // A decode row is measured against the DRAM bandwidth, whatever its rung's prefill ceiling.
      const double rate = sec.decode ? gbps_of(p, ms, Peak::memory) : run_tflops(rep);
      const double pct = sec.decode ? percent_of_peak(rep, Peak::memory) : percent_of_peak(rep);
      std::printf("%-22s %10.4f %9.2f %8.1f %8s  %-34s %s\n", r->label().c_str(), ms, rate, pct,
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
