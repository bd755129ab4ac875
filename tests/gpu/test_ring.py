#!/usr/bin/env python3
"""Rung 12's GPU tests, run by ctest (label gpu) through the launcher. Exit 77 (skipped) where
the machine has no GPU or fewer than the ring asks for.

  test_ring.py EXE check P [rung flags]   the ring on P GPUs, checked against the fp64 reference
                                          and the single-GPU rung (exit: the launcher's)
  test_ring.py EXE shared P [rung flags]  the ring of P ranks sharing GPU 0 (launch_ring.py
                                          --share-gpu: every rank its own NCCL host, the shards over
                                          NCCL's socket transport on loopback), checked the same way
  test_ring.py EXE replay P [rung flags]  the P ranks of the ring in turn on one GPU (--replay P, no
                                          NCCL transfer), checked the same way
  test_ring.py EXE fail P [--share-gpu] [--backward]
                                          rank P-1 leaves the ring (--fail-rank; with --backward in
                                          the backward pass): the launcher must exit non-zero naming
                                          it, within a bounded time
  test_ring.py EXE toomany                more GPUs than exist: exit 2 with the reason
  test_ring.py EXE torch P [flags]        PyTorch's all-gather baseline (bench/pytorch/torch_ring_baseline.py)
                                          under torchrun, P ranks sharing GPU 0 (--share-gpu): its
                                          gathered output against one-GPU SDPA (77 without PyTorch)
"""
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LAUNCHER = os.path.join(ROOT, "steps", "12_ring_attention", "launch_ring.py")
BASELINE = os.path.join(ROOT, "bench", "pytorch", "torch_ring_baseline.py")
BF16_MAX_ABS_FLOOR = 3e-2  # common/src/check.cpp, tolerance_floor(bf16): scaled by max(1, max |ref|)
FAIL_BOUND_S = 180  # CUDA and NCCL start-up, the inputs, and the launcher's stop


def launch(exe, gpus, rung, timeout=None, share=False):
    cmd = [sys.executable, LAUNCHER, "--exe", exe, "--gpus", str(gpus), "--grace", "5"]
    if share:
        cmd += ["--share-gpu"]
    if timeout:
        cmd += ["--timeout", str(timeout)]
    cmd += ["--"] + rung
    print("$ " + " ".join(cmd), flush=True)
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True)
    sys.stdout.write(p.stdout)
    sys.stderr.write(p.stderr)
    return p, time.monotonic() - t0


def main(argv):
    exe, what = argv[0], argv[1]
    if what in ("check", "shared"):
        gpus = int(argv[2])
        p, _ = launch(exe, gpus, argv[3:] + ["--skip-missing-gpus", "--iters", "3", "--warmup", "1"],
                      share=what == "shared")
        return p.returncode
    if what == "replay":
        cmd = [exe, "--replay", argv[2]] + argv[3:]
        print("$ " + " ".join(cmd), flush=True)
        return subprocess.run(cmd).returncode
    if what == "fail":
        gpus = int(argv[2])
        bad = gpus - 1
        extra = ["--backward"] if "--backward" in argv[3:] else []  # the rank leaves in the backward pass
        p, took = launch(exe, gpus, ["--seqlen", "4096", "--heads", "8", "--dim", "128", "--causal", "1",
                                     "--fail-rank", str(bad), "--skip-missing-gpus"] + extra, timeout=60,
                         share="--share-gpu" in argv[3:])
        if p.returncode == 77:
            return 77
        ok = p.returncode not in (0, 77) and ("rank %d failed" % bad) in p.stderr and took < FAIL_BOUND_S
        print("fail test: exit %d after %.1f s, %s" % (p.returncode, took,
                                                       "as expected" if ok else "NOT as expected"))
        return 0 if ok else 1
    if what == "toomany":
        p, _ = launch(exe, 64, ["--seqlen", "64"])
        if p.returncode == 77:
            return 77
        ok = p.returncode == 2 and "asks for 64 GPUs" in p.stderr
        print("too-many test: exit %d, %s" % (p.returncode, "as expected" if ok else "NOT as expected"))
        return 0 if ok else 1
    if what == "torch":
        try:
            import torch
        except ImportError:
            print("PyTorch is not installed (exit 77 = skipped)")
            return 77
        if not torch.cuda.is_available():
            print("no CUDA GPU (exit 77 = skipped)")
            return 77
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", argv[2],
               BASELINE, "--share-gpu", "--iters", "2", "--warmup", "1",
               "--check-max-abs", str(BF16_MAX_ABS_FLOOR)] + argv[3:]
        print("$ " + " ".join(cmd), flush=True)
        env = dict(os.environ, NCCL_NVLS_ENABLE="0")
        return subprocess.run(cmd, env=env).returncode
    print("unknown test %r" % what, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
