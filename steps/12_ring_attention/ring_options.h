/// @file steps/12_ring_attention/ring_options.h
/// @brief Rung 12's own command-line flags (the ring and its process), taken out of argv
/// before the shared parser (common/src/cli.cpp) reads the rest: --batch, --seqlen, --heads,
/// --kv-heads, --dim, --dtype, --causal, --iters, --check, --json, --variant ... keep their one
/// definition there. Plain C++ so the CPU tests check it.
#pragma once

#include <string>
#include <vector>

#include "flashladder/cli.h"

namespace fl::ring {

/// The flags only rung 12 has.
struct RingOptions {
  int gpus = 1;         ///< --gpus: ranks in the ring (the world size)
  int rank = -1;        ///< --rank: this process's rank (-1: not given; allowed only for --gpus 1)
  int local_rank = -1;  ///< --local-rank: the CUDA device of this process (-1: rank)
  std::string id_file;  ///< --id-file: where rank 0 writes the NCCL unique id
  double timeout_s = 300;  ///< --timeout: seconds for the id file, the communicator, each wait
  int forward_rung = 0;    ///< --forward-rung: 6 or 10 (0: rung 10 on sm_90 when built, else 06)
  bool single = true;      ///< --single 0|1: rank 0 also runs the forward rung on the whole
                           ///< sequence (check against it, one-GPU time, scaling efficiency)
  bool preflight = false;  ///< --preflight: check the flags and the GPUs, start nothing (launcher)
  bool skip_missing_gpus = false;  ///< --skip-missing-gpus: fewer GPUs than --gpus -> 77 (tests)
  int fail_rank = -1;       ///< --fail-rank: (testing) this rank exits 1 in the middle of the ring
  int replay = 0;           ///< --replay P: the P ranks' steps in turn on this one GPU, no NCCL
                            ///< transfer (0: off): checks the plan without P GPUs, and times each
                            ///< rank's pass alone (the ring's time if every transfer hid)
  bool shared_gpu = false;  ///< --shared-gpu: (set by launch_ring.py --share-gpu) the ranks of
                            ///< this host share one GPU, so the times are not a P-GPU ring's
  bool backward = false;    ///< --backward: each pass is a forward and a backward pass over the
                            ///< ring (dQ, dK, dV checked; forward + backward timed)
  int key_cap = -1;         ///< --key-cap K: with --backward, the keys per launch of the forward
                            ///< (-1: ring_plan.h's forward_key_cap of the sequence; 0: uncut)
};

/// Result of take_ring_flags: the rung's flags, the rest for parse_cli, or an error.
struct RingParse {
  bool ok = true;
  std::string error;
  std::vector<std::string> rest;  ///< argv[0] and every flag that is not rung 12's
};

/// Takes rung 12's flags out of argv ("--flag value" or "--flag=value"); checks their values.
inline RingParse take_ring_flags(int argc, const char* const* argv, RingOptions* o) {
  RingParse r;
  if (argc > 0) r.rest.push_back(argv[0]);
  auto fail = [&](const std::string& msg) {
    r.ok = false;
    r.error = msg;
  };
  for (int a = 1; a < argc && r.ok; ++a) {
    const FlagArg fa = split_flag(argv[a]);  // the shared parser's "--flag value|=value" rule
    const std::string& flag = fa.flag;
    const bool has_eq = fa.has_eq;
    std::string value = fa.value;
    if (flag == "--preflight") {
      o->preflight = true;
      continue;
    }
    if (flag == "--backward") {
      o->backward = true;
      continue;
    }
    if (flag == "--skip-missing-gpus") {
      o->skip_missing_gpus = true;
      continue;
    }
    if (flag == "--shared-gpu") {
      o->shared_gpu = true;
      continue;
    }
    const bool ours = flag == "--gpus" || flag == "--rank" || flag == "--local-rank" ||
                      flag == "--id-file" || flag == "--timeout" || flag == "--forward-rung" ||
                      flag == "--single" || flag == "--fail-rank" || flag == "--replay" ||
                      flag == "--key-cap";
    if (!ours) {
      r.rest.push_back(argv[a]);
      continue;
    }
    if (!has_eq) {
      if (a + 1 >= argc) {
        fail(flag + ": missing value");
        break;
      }
      value = argv[++a];
    }
    int iv = 0;
    if (flag == "--id-file") {
      if (value.empty()) fail("--id-file: expected a path");
      o->id_file = value;
    } else if (flag == "--timeout") {
      if (!parse_double_value(value, &o->timeout_s) || !(o->timeout_s > 0))
        fail("--timeout: expected seconds > 0, got '" + value + "'");
    } else if (flag == "--single") {
      if (value != "0" && value != "1") fail("--single: expected 0 or 1, got '" + value + "'");
      o->single = value == "1";
    } else if (!parse_int_value(value, &iv)) {
      fail(flag + ": expected an integer, got '" + value + "'");
    } else if (flag == "--gpus") {
      if (iv < 1) fail("--gpus must be >= 1, got " + value);
      o->gpus = iv;
    } else if (flag == "--rank") {
      if (iv < 0) fail("--rank must be >= 0, got " + value);
      o->rank = iv;
    } else if (flag == "--local-rank") {
      if (iv < 0) fail("--local-rank must be >= 0, got " + value);
      o->local_rank = iv;
    } else if (flag == "--forward-rung") {
      if (iv != 0 && iv != 6 && iv != 10) fail("--forward-rung must be 6 or 10, got " + value);
      o->forward_rung = iv;
    } else if (flag == "--fail-rank") {
      o->fail_rank = iv;
    } else if (flag == "--replay") {
      if (iv < 1) fail("--replay must be >= 1 ranks, got " + value);
      o->replay = iv;
    } else if (flag == "--key-cap") {
      if (iv < 0) fail("--key-cap must be >= 0 keys (0: the forward's launches uncut), got " + value);
      o->key_cap = iv;
    }
  }
  if (!r.ok) return r;
  // Consistency of the process flags.
  if (o->replay > 0 && o->gpus != 1)
    fail("--replay runs every rank in one process on one GPU: it takes no --gpus " +
         std::to_string(o->gpus));
  else if (o->replay > 0 && o->fail_rank >= 0)
    fail("--fail-rank tests the process model, which --replay does not have");
  else if (o->replay > 0 && o->shared_gpu)
    fail("--shared-gpu marks ranks in separate processes on one GPU; --replay runs them in one");
  else if (o->key_cap >= 0 && !o->backward)
    fail("--key-cap cuts the forward's launches for the backward's D: it needs --backward");
  else if (o->rank >= o->gpus)
    fail("--rank " + std::to_string(o->rank) + " is outside a ring of --gpus " +
         std::to_string(o->gpus));
  else if (o->gpus > 1 && !o->preflight && (o->rank < 0 || o->id_file.empty()))
    fail("--gpus " + std::to_string(o->gpus) +
         " runs one process per GPU: start it with steps/12_ring_attention/launch_ring.py, "
         "which gives each process --rank and --id-file");
  return r;
}

/// The rung's own part of --help.
inline const char* ring_usage() {
  return "Rung 12 (ring attention over P GPUs, one process per GPU):\n"
         "  --gpus P             ranks in the ring (default 1: the degenerate ring on one GPU;\n"
         "                       P > 1 through launch_ring.py)\n"
         "  --variant zigzag|contiguous   sharding (default zigzag: causal work balanced)\n"
         "  --forward-rung 6|10  the forward kernel of each step (default: 10 on sm_90, else 6)\n"
         "  --backward           also the backward pass over the ring (rung 14's o32-delta entry\n"
         "                       on sm_90, else rung 11's): K/V travel again with their dK, dV\n"
         "                       sums; dQ, dK, dV checked, forward + backward timed\n"
         "                       (--fail-rank then leaves in the backward pass)\n"
         "  --key-cap K          with --backward: at most K keys per launch of the forward (default:\n"
         "                       ring_plan.h's forward_key_cap of the sequence, so the fp32 O that\n"
         "                       D comes from stays exact enough; 0: launches uncut, the ablation)\n"
         "  --replay P           the P ranks of a ring in turn on this one GPU: every step's "
         "launches\n"
         "                       and merges, no NCCL transfer; checks the plan where P GPUs are\n"
         "                       not at hand and times each rank's pass alone (the ring's time\n"
         "                       if every transfer hid: the scaling efficiency's compute bound)\n"
         "  --single 0|1         rank 0 also runs that kernel on the whole sequence: the check\n"
         "                       against it, the one-GPU time and the scaling efficiency (1)\n"
         "  --timeout S          seconds for the NCCL id file, the communicator and every wait\n"
         "                       (default 300): a rank that waits longer aborts, never hangs\n"
         "  set by the launcher: --rank R --local-rank L --id-file PATH [--shared-gpu: the\n"
         "                       ranks share one GPU (launch_ring.py --share-gpu), so the report\n"
         "                       gives no scaling efficiency]\n";
}

}  // namespace fl::ring
