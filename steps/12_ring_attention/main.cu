/// @file steps/12_ring_attention/main.cu
/// @brief Rung 12's program: its flags, the GPUs it finds, and one rank's whole job (or, with
/// --replay, the whole ring's): the communicator, the checked pass, the timed passes, the
/// gathers, rank 0's single-GPU run and its report.
///
/// It has its own main rather than the shared runner's: the runner runs one process on one
/// GPU, and the tour, the bench and the registry-wide tests iterate single-process rungs. Start
/// P > 1 ranks with launch_ring.py; --gpus 1 (the default) runs the degenerate ring in this
/// process. The files of the rung, by concern: ring_schedule.cu (the schedule of a pass: the
/// lesson), rank_ring.h/.cpp (a rank's buffers and gathers), communicator.h/.cpp (the NCCL id
/// and the communicator), ring_report.h (the report's text and JSON), ring_plan.h (the shards
/// and the launches), merge_kernel.cuh (the merge), ring_options.h (the rung's flags).
#include <cuda_runtime.h>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "communicator.h"
#include "flashladder/cases.h"
#include "flashladder/check_bwd.h"
#include "flashladder/inputs.h"
#include "flashladder/ring_plan.h"
#include "flashladder/runner.h"
#include "nccl_check.h"
#include "rank_ring.h"
#include "ring_options.h"
#include "ring_report.h"

#ifndef FL_GIT_SHA
#define FL_GIT_SHA "unknown"
#endif

namespace fl::ring {
namespace {

/// The forward rung of each step: --forward-rung, else rung 10 on sm_90 where it runs the
/// problem, else rung 06. Throws Unsupported with both reasons when neither runs it.
const Rung& pick_forward_rung(int forced, const Problem& p, const DeviceInfo& dev) {
  const Registry& reg = registry();
  auto usable = [&](int n, std::string* why) -> const Rung* {
    const Rung* r = reg.find(n);
    if (!r) {
      *why = "rung " + std::to_string(n) + " is not built (see -DFL_RUNGS)";
      return nullptr;
    }
    if (!r->not_implemented.empty()) {
      *why = r->label() + " is not implemented in this tree (lab starter)";
      return nullptr;
    }
    // Probe both masks: a ring has causal (diagonal) and unmasked steps.
    for (bool causal : {false, true}) {
      Problem q = p;
      q.causal = causal;
      *why = supports(*r, q, dev);
      if (!why->empty()) {
        *why = r->label() + ": " + *why;
        return nullptr;
      }
    }
    return r;
  };
  std::string why10, why06;
  if (forced != 0) {
    std::string why;
    if (const Rung* r = usable(forced, &why)) return *r;
    throw Unsupported("--forward-rung " + std::to_string(forced) + ": " + why);
  }
  if (dev.cc_major == 9 && dev.cc_minor == 0)
    if (const Rung* r = usable(10, &why10)) return *r;
  if (const Rung* r = usable(6, &why06)) return *r;
  throw Unsupported(
      "no forward rung runs this problem here: " + (why10.empty() ? "" : why10 + "; ") + why06);
}

/// The backward rung of each step (--backward): rung 14's o32-delta entry on sm_90 where it runs
/// the problem, else rung 11's. Both take D = rowsum(dO * O) from the O they are given at every
/// length (ring_schedule.cu says why a ring step needs that). Throws Unsupported with the reasons
/// when neither runs it.
const Rung& pick_backward_rung(const Problem& p, const DeviceInfo& dev) {
  std::string reasons;
  for (int n : {14, 11}) {
    if (n == 14 && !(dev.cc_major == 9 && dev.cc_minor == 0)) continue;
    const Rung* r = registry().find(n, "o32-delta");
    std::string why;
    if (!r)
      why = "not built (see -DFL_RUNGS)";
    else if (!r->not_implemented.empty())
      why = "not implemented in this tree (lab starter)";
    for (bool causal : {false, true}) {
      if (!why.empty()) break;
      Problem q = p;
      q.causal = causal;
      why = supports(*r, q, dev);
      if (why.empty() && r->bwd_supports) why = r->bwd_supports(q, false);
    }
    if (why.empty()) return *r;
    reasons += (reasons.empty() ? "" : "; ") + std::string(n == 14 ? "14" : "11") + "[o32-delta]: " + why;
  }
  throw Unsupported("--backward: no backward rung runs this problem here: " + reasons);
}

/// Rank 0, --backward, --single 1: the backward rung's own entry (its default D rule) on the whole
/// sequence on one GPU, after its forward pass: the one-GPU backward time. Skipped, with the
/// reason, where it cannot run it or it does not fit.
void run_single_backward(const Options& opt, const Rung& ring_bwd, const DeviceInfo& dev, const HostInputs& in,
                         Report* rep) {
  const Problem& p = opt.problem;
  const Rung* r = registry().find(ring_bwd.number, "");
  if (!r) {
    rep->bwd.single_skipped = "rung " + std::to_string(ring_bwd.number) + " has no default entry";
    return;
  }
  rep->bwd.single_label = r->label();
  std::string why = supports(*r, p, dev);
  if (why.empty() && r->bwd_supports) why = r->bwd_supports(p, false);
  if (why.empty()) {
    size_t free_b = 0, total_b = 0;
    FL_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    const size_t need = rung_device_bytes(*r, p);
    if (static_cast<double>(need) > 0.9 * static_cast<double>(free_b))
      why = "needs " + format_bytes(static_cast<double>(need)) + " of GPU memory, " +
            format_bytes(static_cast<double>(free_b)) + " free";
  }
  if (!why.empty()) {
    rep->bwd.single_skipped = why;
    return;
  }
  BwdCase c(*r, p, in, opt.seed, false);
  c.launch();
  rep->bwd.single_timing = c.time(dev, opt.iters, opt.warmup);
}

/// Rank 0, --single 1: the same forward rung on the whole sequence on one GPU, checked, compared
/// with the ring's output @p o_ring and timed: the one-GPU time of the scaling efficiency.
/// Skipped, with the reason, where the rung cannot run it or it does not fit.
void run_single(const Options& opt, const Rung& fwd, const DeviceInfo& dev, const HostInputs& in,
                const std::vector<uint16_t>& o_ring, Report* rep) {
  const Problem& p = opt.problem;
  std::string why = supports(fwd, p, dev);
  const size_t ws = fwd.workspace_bytes ? fwd.workspace_bytes(p) : 0;
  if (why.empty()) {
    size_t free_b = 0, total_b = 0;
    FL_CUDA_CHECK(cudaMemGetInfo(&free_b, &total_b));
    const size_t need1 = DeviceProblem::device_bytes(p, ws);
    if (static_cast<double>(need1) > 0.9 * static_cast<double>(free_b))
      why = "needs " + format_bytes(static_cast<double>(need1)) + " of GPU memory, " +
            format_bytes(static_cast<double>(free_b)) + " free";
  }
  if (!why.empty()) {
    rep->single_skipped = why;
    return;
  }
  DeviceProblem dp(p, in, ws, opt.seed);
  dp.poison_outputs();
  launch_once(fwd, dp);
  rep->single_ran = true;
  if (opt.check != CheckMode::none) {
    const std::vector<uint16_t> o_single = dp.download_o();
    rep->single_check = check_output(p, in, o_single, dp.download_lse(), opt.check, opt.seed);
    rep->vs_single = agreement(p.dtype, o_ring, o_single);
    rep->vs_single_pass = rep->vs_single.max_abs <= rep->check.tol.max_abs &&
                          rep->vs_single.rel_fro <= rep->check.tol.rel_fro;
  } else {
    rep->single_check.pass = true;
  }
  rep->single_timing = time_rung(fwd, dp, dev, opt.iters, opt.warmup);
}

/// Rank 0's end: the report (and --json); the exit code of the checks.
int finish(const Report& rep, const Options& opt, const std::string& prog) {
  std::printf("%s", report_text(rep).c_str());
  if (!opt.json_path.empty()) {
    std::ofstream f(opt.json_path);
    f << report_json(rep) << "\n";
    if (!f) {
      std::fprintf(stderr, "%s: error: --json: cannot write '%s'\n", prog.c_str(),
                   opt.json_path.c_str());
      return kExitBadInput;
    }
  }
  const bool pass = rep.check.pass && (!rep.single_ran || (rep.single_check.pass && rep.vs_single_pass)) &&
                    (!rep.bwd.ran || rep.bwd.check.summary.pass);
  return pass ? kExitOk : kExitCheckFailed;
}

/// --replay P: every rank of a P-rank ring in this one process on this one GPU, rank after
/// rank, each step reading the K/V shard where its first owner keeps it (no NCCL, no transfer).
/// The plan, the chunk launches, the running merge and the gather run as on P GPUs, so the
/// check covers them where P GPUs are not at hand; the transfers, the streams' overlap and the
/// process model are what only --gpus P runs. Each rank's pass is timed alone on the GPU, as it
/// would run on its own GPU: the slowest one is the ring's time if every transfer hid.
void replay_ring(const Options& opt, Sharding sh, int P, const Rung& fwd, const Rung* bwd, int key_cap,
                 const DeviceInfo& dev, const HostInputs& in, const std::vector<uint16_t>& dout, Report* rep,
                 std::vector<uint16_t>* o_ring) {
  const Problem& p = opt.problem;
  std::vector<std::unique_ptr<RankRing>> ranks;
  for (int r = 0; r < P; ++r) {
    ranks.push_back(std::make_unique<RankRing>(p, sh, P, r, fwd, dev, nullptr, in));
    std::string why = ranks.back()->why_not();
    if (why.empty() && bwd) {
      ranks.back()->enable_backward(*bwd, dout, key_cap);
      why = ranks.back()->why_not_backward();
    }
    if (!why.empty()) throw Unsupported(why);
  }
  for (int s = 0; s < P; ++s) rep->send_bytes.push_back(ranks[0]->send_bytes(s));
  if (bwd)
    for (int s = 0; s < P; ++s) rep->bwd.send_bytes.push_back(ranks[0]->backward_send_bytes(s));
  // Every rank's backward, in turn, after every rank's forward: each adds its partial dK, dV into
  // the owner's sums, so the sums are zeroed first and rounded last.
  auto replay_backward = [&](std::vector<double>* per_rank_ms, std::vector<StepTimes>* times) {
    for (auto& r : ranks) r->start_replay_backward();
    for (int r = 0; r < P; ++r) {
      const StepTimes t = ranks[r]->replay_backward(ranks);
      if (per_rank_ms) per_rank_ms->push_back(t.total);
      if (times) times->push_back(t);
    }
    for (auto& r : ranks) r->finish_replay_backward();
  };
  // 1. One checked pass of every rank on a NaN-poisoned O (and with --backward, dQ, dK, dV).
  std::vector<float> lse_ring;
  RankRing::start_whole(p, o_ring, &lse_ring);
  for (auto& r : ranks) {
    r->poison_output();
    r->replay(ranks);
    r->collect(o_ring, &lse_ring);
  }
  if (opt.check != CheckMode::none)
    rep->check = check_output(p, in, *o_ring, lse_ring, opt.check, opt.seed);
  else
    rep->check.pass = true;
  if (bwd) {
    replay_backward(nullptr, nullptr);
    std::vector<uint16_t> dq, dk, dv;
    RankRing::start_whole_grads(p, &dq, &dk, &dv);
    for (auto& r : ranks) r->collect_grads(&dq, &dk, &dv);
    rep->bwd.ran = true;
    rep->bwd.label = bwd->label();
    rep->bwd.forward_key_cap = ranks[0]->forward_key_cap();
    rep->bwd.check = check_backward(p, in, dout, dq, dk, dv, opt.check, opt.seed, kBwdCheckWork, nullptr,
                                    BwdForward{o_ring, &lse_ring});
  }
  // 2. Timed passes, rank after rank: per iteration the slowest rank's pass; per (rank, step)
  // the medians of compute and merge.
  for (int i = 0; i < opt.warmup; ++i) {
    for (auto& r : ranks) r->replay(ranks);
    if (bwd) replay_backward(nullptr, nullptr);
  }
  std::vector<std::vector<std::vector<double>>> compute(P, std::vector<std::vector<double>>(P)),
      merge = compute, bcompute = compute, bmerge = compute;
  rep->iters = opt.iters;
  for (int i = 0; i < opt.iters; ++i) {
    double slowest = 0;
    std::vector<double> fwd_ms;
    for (int r = 0; r < P; ++r) {
      const StepTimes t = ranks[r]->replay(ranks);
      fwd_ms.push_back(t.total);
      slowest = std::max(slowest, static_cast<double>(t.total));
      for (int s = 0; s < P; ++s) {
        compute[r][s].push_back(t.compute[s]);
        merge[r][s].push_back(t.merge[s]);
      }
    }
    rep->ring_ms.push_back(slowest);
    if (bwd) {
      std::vector<double> bwd_ms;
      std::vector<StepTimes> times;
      replay_backward(&bwd_ms, &times);
      double slow_b = 0, slow_total = 0;
      for (int r = 0; r < P; ++r) {
        slow_b = std::max(slow_b, bwd_ms[r]);
        slow_total = std::max(slow_total, fwd_ms[r] + bwd_ms[r]);
        for (int s = 0; s < P; ++s) {
          bcompute[r][s].push_back(times[r].compute[s]);
          bmerge[r][s].push_back(times[r].merge[s]);
        }
      }
      rep->bwd.ring_ms.push_back(slow_b);
      rep->bwd.total_ms.push_back(slow_total);
    }
  }
  for (int r = 0; r < P; ++r) {
    rep->compute.emplace_back();
    rep->merge.emplace_back();
    for (int s = 0; s < P; ++s) {
      rep->compute[r].push_back(median(compute[r][s]));
      rep->merge[r].push_back(median(merge[r][s]));
    }
    if (!bwd) continue;
    rep->bwd.compute.emplace_back();
    rep->bwd.merge.emplace_back();
    for (int s = 0; s < P; ++s) {
      rep->bwd.compute[r].push_back(median(bcompute[r][s]));
      rep->bwd.merge[r].push_back(median(bmerge[r][s]));
    }
  }
}

/// The rank's whole job (or, with --replay, the whole ring's). Returns its exit code; throws on
/// failure.
int run_rank(const RingOptions& ro, const Options& opt, Sharding sh, int rank, int device,
             const std::string& prog) {
  const Problem& p = opt.problem;
  const bool replay = ro.replay > 0;
  const int P = replay ? ro.replay : ro.gpus;
  FL_CUDA_CHECK(cudaSetDevice(device));
  const DeviceInfo dev = query_device();
  const Rung& fwd = pick_forward_rung(ro.forward_rung, p, dev);
  const Rung* bwd = ro.backward ? &pick_backward_rung(p, dev) : nullptr;
  size_t need = 0;
  for (int r = replay ? 0 : rank; r < (replay ? P : rank + 1); ++r)
    need += RankRing::device_bytes(p, sh, P, r) + (bwd ? RankRing::backward_device_bytes(p, sh, P, r) : 0);
  if (static_cast<double>(need) > 0.9 * static_cast<double>(dev.mem_free))
    throw Unsupported((replay ? std::string("the replayed ring") : "rank " + std::to_string(rank)) +
                      " needs " + format_bytes(static_cast<double>(need)) + " of GPU memory, " +
                      format_bytes(static_cast<double>(dev.mem_free)) + " is free");
  int nccl_code = 0;
  FL_NCCL_CHECK(ncclGetVersion(&nccl_code));
  const std::string nccl_version = std::to_string(nccl_code / 10000) + "." +
                                   std::to_string(nccl_code / 100 % 100) + "." +
                                   std::to_string(nccl_code % 100);

  // The communicator (not for --replay): rank 0 makes the id and (P > 1) publishes it through
  // the file. The communicator and the ring live on the heap and are released only on success:
  // on a failure the exception reaches ring_main, which aborts the communicator and exits at
  // once. Destructors on that path would free device memory, and cudaFree waits for the GPU,
  // where an NCCL kernel may spin forever on a peer that died.
  Communicator* comm = nullptr;
  if (!replay) {
    ncclUniqueId id;
    if (rank == 0) {
      FL_NCCL_CHECK(ncclGetUniqueId(&id));
      if (P > 1) write_id_file(ro.id_file, id);
    } else {
      id = read_id_file(ro.id_file, ro.timeout_s, rank);
    }
    comm = new Communicator(P, rank, id, ro.timeout_s);
    if (rank == 0 && P > 1) unlink(ro.id_file.c_str());  // everyone has joined: it has served
  }

  // Every rank makes the same whole inputs (and dO) from the seed and keeps its rows.
  const HostInputs in = make_inputs(p, opt.input, opt.seed);
  const std::vector<uint16_t> dout = bwd ? make_grad_output(p, opt.seed) : std::vector<uint16_t>{};
  Report rep;
  rep.p = p;
  rep.sharding = sh;
  rep.world = P;
  rep.replay = replay;
  rep.shared_gpu = ro.shared_gpu;
  rep.forward_label = fwd.label();
  rep.nccl_version = nccl_version;
  rep.git_sha = FL_GIT_SHA;
  rep.dev = dev;
  rep.opt = opt;
  rep.pairs = pairs_per_rank(sh, p.causal, p.seqlen_q, P);
  std::vector<uint16_t> o_ring;
  if (replay) {
    replay_ring(opt, sh, P, fwd, bwd, ro.key_cap, dev, in, dout, &rep, &o_ring);
  } else {
    auto* ring_owned = new RankRing(p, sh, P, rank, fwd, dev, comm, in);
    RankRing& ring = *ring_owned;
    std::string why = ring.why_not();
    if (why.empty() && bwd) {
      ring.enable_backward(*bwd, dout, ro.key_cap);
      why = ring.why_not_backward();
    }
    if (!why.empty()) throw Unsupported(why);  // every rank runs the same problems: all say so
    for (int s = 0; s < P; ++s) rep.send_bytes.push_back(ring.send_bytes(s));
    if (bwd)
      for (int s = 0; s < P; ++s) rep.bwd.send_bytes.push_back(ring.backward_send_bytes(s));

    // 1. One checked pass on a NaN-poisoned O (--backward: then the backward pass, its
    // gradients checked too; --fail-rank then leaves in the backward pass).
    ring.poison_output();
    ring.barrier();
    ring.forward(bwd ? -1 : ro.fail_rank);
    if (bwd) ring.backward(ro.fail_rank);
    std::vector<float> lse_ring;
    if (opt.check != CheckMode::none) ring.gather(&o_ring, &lse_ring);
    if (rank == 0 && opt.check != CheckMode::none)
      rep.check = check_output(p, in, o_ring, lse_ring, opt.check, opt.seed);
    else
      rep.check.pass = true;  // --check none (and ranks != 0: rank 0 decides)
    if (bwd) {
      std::vector<uint16_t> dq, dk, dv;
      if (opt.check != CheckMode::none) ring.gather_grads(&dq, &dk, &dv);
      rep.bwd.ran = true;
      rep.bwd.label = bwd->label();
      rep.bwd.forward_key_cap = ring.forward_key_cap();
      if (rank == 0 && opt.check != CheckMode::none)
        rep.bwd.check = check_backward(p, in, dout, dq, dk, dv, opt.check, opt.seed, kBwdCheckWork, nullptr,
                                       BwdForward{&o_ring, &lse_ring});
      else
        rep.bwd.check.summary.pass = true;
    }

    // 2. Timed passes: all ranks meet before each; per step: compute, exposed comm, merge. With
    // --backward each pass is the forward then the backward, each timed on its own.
    for (int i = 0; i < opt.warmup; ++i) {
      ring.barrier();
      ring.forward(-1);
      if (bwd) ring.backward(-1);
    }
    // mine: [iters forward totals][iters backward totals][forward's P compute, exposed, merge,
    // transfer][the backward's likewise]; without --backward no backward parts.
    const int passes = bwd ? 2 : 1;
    std::vector<std::vector<std::vector<std::vector<double>>>> samples(
        passes, std::vector<std::vector<std::vector<double>>>(4, std::vector<std::vector<double>>(P)));
    std::vector<std::vector<float>> totals(passes);
    for (int i = 0; i < opt.iters; ++i) {
      ring.barrier();
      for (int k = 0; k < passes; ++k) {
        const StepTimes t = k == 0 ? ring.forward(-1) : ring.backward(-1);
        totals[k].push_back(t.total);
        for (int s = 0; s < P; ++s) {
          samples[k][0][s].push_back(t.compute[s]);
          samples[k][1][s].push_back(t.exposed[s]);
          samples[k][2][s].push_back(t.merge[s]);
          samples[k][3][s].push_back(t.transfer[s]);
        }
      }
    }
    std::vector<float> mine;
    for (int k = 0; k < passes; ++k) mine.insert(mine.end(), totals[k].begin(), totals[k].end());
    for (int k = 0; k < passes; ++k)
      for (int m = 0; m < 4; ++m)
        for (int s = 0; s < P; ++s) mine.push_back(static_cast<float>(median(samples[k][m][s])));
    const auto all = ring.gather_floats(mine);
    if (rank == 0) {
      rep.iters = opt.iters;
      const int it = opt.iters;
      for (int i = 0; i < it; ++i) {
        double slowest = 0, slow_b = 0, slow_total = 0;
        for (const auto& v : all) {
          slowest = std::max(slowest, static_cast<double>(v[i]));
          if (bwd) {
            slow_b = std::max(slow_b, static_cast<double>(v[it + i]));
            slow_total = std::max(slow_total, static_cast<double>(v[i]) + v[it + i]);
          }
        }
        rep.ring_ms.push_back(slowest);
        if (bwd) {
          rep.bwd.ring_ms.push_back(slow_b);
          rep.bwd.total_ms.push_back(slow_total);
        }
      }
      std::vector<std::vector<double>>* dst[2][4] = {{&rep.compute, &rep.exposed, &rep.merge, &rep.transfer},
                                                     {&rep.bwd.compute, &rep.bwd.exposed, &rep.bwd.merge,
                                                      &rep.bwd.transfer}};
      const size_t base = static_cast<size_t>(passes) * it;
      for (int k = 0; k < passes; ++k)
        for (int m = 0; m < 4; ++m)
          for (const auto& v : all) {
            const size_t at = base + (static_cast<size_t>(k) * 4 + m) * P;
            dst[k][m]->emplace_back(v.begin() + at, v.begin() + at + P);
          }
    }
    delete ring_owned;  // the ring's buffers go: rank 0's single-GPU run has the memory
    comm->close();
    delete comm;
  }
  if (rank != 0) return kExitOk;

  // 3. Rank 0: the same forward rung on the whole sequence on one GPU (and the backward rung's
  // own entry, --backward).
  if (ro.single) run_single(opt, fwd, dev, in, o_ring, &rep);
  if (ro.single && bwd) run_single_backward(opt, *bwd, dev, in, &rep);
  rep.date = utc_now();
  return finish(rep, opt, prog);
}

/// Leaves at once with @p code after a failure: the communicator is aborted first (its kernels
/// and proxy threads stop), and no destructor runs that could wait on a GPU a dead peer holds.
[[noreturn]] void die(int code) {
  abort_communicator();
  std::fflush(stdout);
  std::fflush(stderr);
  std::_Exit(code);
}

/// The rung's command line: its own flags, then the shared ones; the GPUs; the rank's job.
int ring_main(int argc, char** argv) {
  const std::string prog = program_name(argv[0]);
  RingOptions ro;
  const RingParse rp = take_ring_flags(argc, argv, &ro);
  if (!rp.ok) {
    std::fprintf(stderr, "%s: error: %s\n", prog.c_str(), rp.error.c_str());
    return kExitBadInput;
  }
  std::vector<const char*> rest;
  for (const std::string& a : rp.rest) rest.push_back(a.c_str());
  Options opt;
  opt.iters = 20;
  opt.warmup = 3;
  const ParseResult pr = parse_cli(static_cast<int>(rest.size()), rest.data(), &opt);
  if (!pr.ok) {
    std::fprintf(stderr, "%s: error: %s\n", prog.c_str(), pr.error.c_str());
    return kExitBadInput;
  }
  if (opt.help) {
    std::printf("%s\n%s", usage(prog).c_str(), ring_usage());
    return kExitOk;
  }
  std::string bad = validate(opt.problem);
  Sharding sh = Sharding::zigzag;
  if (bad.empty() && opt.problem.seqlen_q != opt.problem.seqlen_k)
    bad =
        "rung 12 shards one sequence over the ring: --seqlen-q must equal --seqlen-k (use "
        "--seqlen)";
  if (bad.empty() && opt.problem.page_size != 0)
    bad = "rung 12 takes a contiguous K/V (no --page-size)";
  if (bad.empty() && opt.problem.dv() != opt.problem.head_dim)
    bad = "a V head_dim of its own (--dim-v) is not supported by rung 12 (its ring moves K and V rows of one "
          "head_dim)";
  if (bad.empty() && (opt.sweep || opt.deterministic || opt.list || opt.registry_json))
    bad =
        "rung 12 has no --sweep, --deterministic, --list or --registry-json (it is not in the "
        "single-process registry: bin/tour --list lists the rungs it calls)";
  if (bad.empty() && !parse_sharding(opt.variant, &sh))
    bad = "--variant: rung 12 has variants zigzag (default) and contiguous, got '" + opt.variant +
          "'";
  if (!bad.empty()) {
    std::fprintf(stderr, "%s: error: %s\n", prog.c_str(), bad.c_str());
    return kExitBadInput;
  }
  const int rank = ro.rank < 0 ? 0 : ro.rank;
  const int device = ro.local_rank < 0 ? rank : ro.local_rank;

  // GPUs: none at all is a skip (77); fewer than the ring needs here is bad input (2), or a
  // skip for the tests (--skip-missing-gpus).
  int count = 0;
  const cudaError_t ce = cudaGetDeviceCount(&count);
  if (ce != cudaSuccess || count == 0) {
    std::fprintf(stderr, "%s: no usable CUDA device (%s); nothing to run (exit 77 = skipped)\n",
                 prog.c_str(), ce != cudaSuccess ? cudaGetErrorString(ce) : "no CUDA device found");
    return kExitNoDevice;
  }
  const int needed = ro.preflight ? (ro.local_rank >= 0 ? ro.local_rank + 1 : ro.gpus) : device + 1;
  if (count < needed) {
    std::fprintf(stderr, "%s: the ring asks for %d GPU%s on this machine but %d %s visible%s\n",
                 prog.c_str(), needed, needed == 1 ? "" : "s", count, count == 1 ? "is" : "are",
                 ro.skip_missing_gpus ? " (exit 77 = skipped)" : "");
    return ro.skip_missing_gpus ? kExitNoDevice : kExitBadInput;
  }
  if (ro.preflight) return kExitOk;

  try {
    return run_rank(ro, opt, sh, rank, device, prog);
  } catch (const Unsupported& e) {
    std::fprintf(stderr, "%s: rank %d: %s\n", prog.c_str(), rank, e.what());
    die(kExitBadInput);
  } catch (const NoDevice& e) {
    std::fprintf(stderr, "%s: rank %d: %s; nothing to run (exit 77 = skipped)\n", prog.c_str(),
                 rank, e.what());
    die(kExitNoDevice);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: rank %d: error: %s\n", prog.c_str(), rank, e.what());
    die(kExitCheckFailed);
  }
}

}  // namespace
}  // namespace fl::ring

int main(int argc, char** argv) {
  return fl::ring::ring_main(argc, argv);
}
