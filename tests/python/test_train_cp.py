#!/usr/bin/env python3
"""The training demo with context parallelism (bench/pytorch/torch_train_cp.py) on the CPU: its loss curve
over 2 processes against its curve in 1 (ctest: python_train_cp_cpu).

    PYTHONPATH=build/ci/python python3 tests/python/test_train_cp.py [--steps N] [--keep DIR]

Runs the script under torch.distributed.run with 1 and then 2 processes (--cpu --quick: gloo, the
package's reference backend, the tiny model in fp32, --steps steps, default 8), the second with
--compare on the first's JSON, and checks:
  - every step's loss of the 2-process run within LOSS_ABS of the 1-process run's (and the script's
    own --compare says the same, over the same configuration and data);
  - every rank's weights identical at the end (the script's broadcast check), in both runs;
  - the ring ran in every layer (attention calls per forward = layers) and nothing diverged.

Why LOSS_ABS = 2e-5: with the same seed, data and fp32 weights the two runs differ only in the
order of their sums (the ring merges two partial softmaxes by their LSE; the loss and the gradients
are summed in two parts, then all-reduced). Measured: at most 2 ulp of the loss (9.5e-7 at a loss
of 5.5) over 8 steps and over 20, for 2 and 4 processes. 2e-5 leaves 20x that for AdamW, which can
turn one rounding into a full lr-sized step of a weight whose gradient is near zero. The bugs the
demo guards against move the curve far more within 8 steps (measured with the script patched):
RoPE on each shard's local positions 8e-4 (already 4e-5 at step 0), labels shifted after the cut
1e-2, a ring without the causal mask 4e-2. torch_train.py's held-out rule (2 %) would pass all
three: it judges bf16 runs of different kernels, not the bookkeeping.

Prints one line per check; exits 77 (ctest: skipped) without PyTorch, torch.distributed's gloo or
transformers; 0 when every check passes, 1 if one fails.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

SKIP = 77
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "bench", "pytorch", "torch_train_cp.py")
# The 2-process curve against the 1-process one, every step, fp32 (the docstring says why).
LOSS_ABS = 2e-5

try:
    import torch
    import torch.distributed as dist
except ImportError:
    print("PyTorch is not installed: skipped (exit 77)")
    sys.exit(SKIP)
try:
    import transformers
except ImportError:
    print("transformers is not installed: skipped (exit 77)")
    sys.exit(SKIP)
if not (dist.is_available() and dist.is_gloo_available()):
    print("this PyTorch has no torch.distributed with gloo: skipped (exit 77)")
    sys.exit(SKIP)

FAILURES = []


def check(ok, what):
    print("%s %s" % ("ok  " if ok else "FAIL", what), flush=True)
    if not ok:
        FAILURES.append(what)


def run_script(ranks, out, steps, compare=None):
    """torch_train_cp.py --cpu --quick over @p ranks processes: its JSON (None if it failed)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(ranks), SCRIPT,
           "--cpu", "--quick", "--steps", str(steps), "--out", out]
    if compare:
        cmd += ["--compare", compare]
    t0 = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT)
    print("ran %d process%s in %.0f s (exit %d): %s" % (ranks, "es" if ranks > 1 else "", time.time() - t0,
                                                        proc.returncode, " ".join(cmd[1:])), flush=True)
    path = os.path.join(out, "torch_train_cp.json")
    if proc.returncode != 0 or not os.path.exists(path):
        print(proc.stdout[-4000:] + proc.stderr[-4000:])
        check(False, "torch_train_cp.py over %d processes ran" % ranks)
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def check_run(result, ranks, steps):
    run = result["runs"][0]
    layers = result["config"]["model"]["layers"]
    check(result["world_size"] == ranks and run["ranks"] == ranks, "P=%d: %d ranks ran" % (ranks, ranks))
    check(len(run["loss"]) == steps and "diverged_at" not in run, "P=%d: %d steps, none diverged" % (ranks, steps))
    check(run.get("ring_attention_calls_per_forward") == layers,
          "P=%d: the ring ran in every layer (%s calls per forward, %d layers)" % (
              ranks, run.get("ring_attention_calls_per_forward"), layers))
    w = result["weights"]
    check(w["identical"] and w["checksum_spread"] == 0.0,
          "P=%d: every rank's weights identical to rank 0's (%d tensors differ, max |diff| %g, checksum spread %g)" % (
              ranks, w["tensors_differing"], w["max_abs_diff_vs_rank0"], w["checksum_spread"]))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--keep", help="write the runs here (default: a temporary folder, removed)")
    args = ap.parse_args()
    print("PyTorch %s, transformers %s; %s" % (torch.__version__, transformers.__version__, SCRIPT), flush=True)
    with tempfile.TemporaryDirectory(prefix="fl_train_cp_") as tmp:
        base = args.keep or tmp
        one = run_script(1, os.path.join(base, "p1"), args.steps)
        two = run_script(2, os.path.join(base, "p2"), args.steps,
                         compare=os.path.join(base, "p1", "torch_train_cp.json")) if one else None
        if one and two:
            check_run(one, 1, args.steps)
            check_run(two, 2, args.steps)
            a, b = two["runs"][0]["loss"], one["runs"][0]["loss"]
            diff = max(abs(x - y) for x, y in zip(a, b))
            check(diff <= LOSS_ABS, "P=2 against P=1: max |dloss| %.3e over %d steps (tolerance %.0e)" % (
                diff, len(a), LOSS_ABS))
            c = two.get("compare", {})
            check(c.get("config_differs") == [] and c.get("steps_compared") == args.steps
                  and c.get("max_abs") == diff,
                  "the script's --compare: the same configuration and data, max |dloss| %s over %s steps" % (
                      c.get("max_abs"), c.get("steps_compared")))
    if FAILURES:
        print("%d check(s) FAILED" % len(FAILURES))
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
