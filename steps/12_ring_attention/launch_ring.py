#!/usr/bin/env python3
"""Starts rung 12's ranks on this machine: one process per GPU, watched until all have ended.

  python3 steps/12_ring_attention/launch_ring.py --gpus 2 [launcher flags] -- [rung flags]

  python3 steps/12_ring_attention/launch_ring.py --gpus 2 -- --seqlen 65536 --heads 16 \\
      --dim 128 --dtype bf16 --causal 1 --batch 1

What it does:
  1. finds the executable (--exe, else build/*/bin/12_ring_attention, the newest) and asks it,
     once, whether the flags are valid and this machine has the GPUs (--preflight): bad flags
     or too few GPUs exit 2 with the rung's reason, no GPU at all exits 77 (ctest: skipped);
  2. starts the ranks with --gpus (world size), --rank, --local-rank (the CUDA device) and
     --id-file (where rank 0 writes the NCCL unique id: a fresh temporary directory here, or
     --id-file on a filesystem every host sees when the ring spans hosts), each with
     NCCL_NVLS_ENABLE=0 in its environment (NVLink multicast stays off), each under --wrap's
     command if given (a sanitizer, a profiler);
  3. watches them: the first rank that exits non-zero makes the launcher stop the others
     (SIGTERM, then SIGKILL after --grace seconds) and exit non-zero naming that rank; a run
     longer than --max-seconds is stopped the same way. Nothing is left hanging.

One GPU, several ranks (--share-gpu): every rank of this host runs on its first GPU. NCCL
refuses two ranks of one communicator on one GPU of one host, so each rank is told it is its
own host (NCCL_HOSTID) and the shards travel through NCCL's socket transport over loopback
(NCCL_NET=Socket, NCCL_SOCKET_IFNAME=lo unless set). The whole multi-process path runs (the id
file, the communicator, every ncclSend/ncclRecv, the gather, a rank's failure), checked as on
P GPUs; the ranks time-share the GPU, so the times are no P-GPU ring's and the rung reports
no scaling efficiency. For tests and for learning the ring on a machine with one GPU.

Across hosts: run it once per host with the same --nnodes, the host's --node-rank (0 on the
host of rank 0), the same --gpus per host and the same --id-file path on a shared filesystem.

Exit codes (the ladder's): 0 every rank ok; 1 a rank failed (a failed check, a crash, a
timeout); 2 bad flags or unsupported input (the rung's reason); 77 no usable CUDA device.
Python standard library only.
"""

import argparse
import glob
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

EXIT_OK, EXIT_FAIL, EXIT_BAD, EXIT_SKIP = 0, 1, 2, 77
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def find_exe():
    """The newest build/*/bin/12_ring_attention of this checkout, or None."""
    found = glob.glob(os.path.join(ROOT, "build", "*", "bin", "12_ring_attention"))
    found = [f for f in found if os.access(f, os.X_OK)]
    return max(found, key=os.path.getmtime) if found else None


def command(exe):
    """How to run @exe: directly, or through this interpreter for a .py (the tests' fake rank)."""
    return [sys.executable, exe] if exe.endswith(".py") else [exe]


def parse(argv):
    ap = argparse.ArgumentParser(
        prog="launch_ring.py",
        description="Start rung 12's ranks (one process per GPU) and watch them.",
        epilog="Everything after -- goes to every rank (the rung's flags: --seqlen, --causal, ...).")
    ap.add_argument("--gpus", type=int, default=1,
                    help="ranks on this host, one per GPU (default 1; with --share-gpu all on one GPU)")
    ap.add_argument("--nnodes", type=int, default=1, help="hosts in the ring (default 1)")
    ap.add_argument("--node-rank", type=int, default=0, help="this host's index, 0 ... nnodes-1")
    ap.add_argument("--share-gpu", action="store_true",
                    help="every rank of this host on its first GPU, NCCL over sockets on loopback "
                    "(tests the process model on one GPU; no scaling efficiency)")
    ap.add_argument("--id-file", help="where rank 0 writes the NCCL unique id (default: a fresh "
                    "temporary file; required with --nnodes > 1: a path every host reads)")
    ap.add_argument("--exe", help="the rung's executable (default: the newest build/*/bin/12_ring_attention)")
    ap.add_argument("--wrap", default="",
                    help="a command each rank runs under, e.g. \"compute-sanitizer --tool memcheck\" "
                    "(the preflight runs without it)")
    ap.add_argument("--timeout", type=float, default=300.0,
                    help="seconds a rank waits for the id, the communicator or a GPU wait (default 300)")
    ap.add_argument("--max-seconds", type=float, default=3600.0,
                    help="the whole run's limit: ranks still running then are stopped (default 3600)")
    ap.add_argument("--grace", type=float, default=5.0,
                    help="seconds between SIGTERM and SIGKILL when stopping ranks (default 5)")
    if "--" in argv:
        cut = argv.index("--")
        ours, rung = argv[:cut], argv[cut + 1:]
    else:
        ours, rung = argv, []
    args = ap.parse_args(ours)
    if args.gpus < 1 or args.nnodes < 1 or not 0 <= args.node_rank < args.nnodes:
        ap.error("need --gpus >= 1, --nnodes >= 1 and 0 <= --node-rank < --nnodes")
    if args.nnodes > 1 and not args.id_file:
        ap.error("--nnodes > 1 needs --id-file on a filesystem every host reads")
    if args.share_gpu and args.nnodes > 1:
        ap.error("--share-gpu puts the ranks of one host on one GPU: it takes no --nnodes")
    for flag in ("--gpus", "--rank", "--local-rank", "--id-file", "--timeout", "--shared-gpu"):
        if any(a == flag or a.startswith(flag + "=") for a in rung):
            ap.error("%s is the launcher's to set (give it before --)" % flag)
    return args, rung


#: What a rank's error starts with when it fails because a peer did (NCCL's remote error:
#: nccl_check.h's kPeerLeft).
PEER_LEFT = "a peer left the ring: "


class Rank:
    """One rank's process and the threads that copy its output line by line; `peer_left` once its
    stderr said it failed because a peer did (PEER_LEFT). When one rank fails the others follow
    within moments, in no fixed order (a rank's exit is seen only after the GPU driver lets it go),
    so the rank the launcher names is the one that did not fail because of a peer."""

    def __init__(self, rank, cmd, env):
        self.rank = rank
        self.peer_left = False
        self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     stdin=subprocess.DEVNULL)
        # Rank 0's stdout is the report (and stays clean for a reader); the rest is prefixed.
        self.threads = [self._copy(self.proc.stdout, sys.stdout, rank != 0),
                        self._copy(self.proc.stderr, sys.stderr, True, errors=True)]

    def _copy(self, src, dst, prefix, errors=False):
        def run():
            for raw in iter(src.readline, b""):
                line = raw.decode("utf-8", "replace")
                if errors and PEER_LEFT in line:
                    self.peer_left = True
                dst.write(("[rank %d] " % self.rank if prefix else "") + line)
                dst.flush()
            src.close()
        t = threading.Thread(target=run, daemon=True)
        t.start()
        return t

    def code(self):
        return self.proc.poll()


def first_failure(ranks, bad, wait_s=3.0):
    """(rank, exit code) to name for a failed ring: among the ranks that failed (@p bad: (Rank,
    code) pairs), one whose error does not say a peer left; while every failed rank says so, the
    one that did not may still be exiting: wait for it up to @p wait_s. Else the lowest rank."""
    deadline = time.monotonic() + wait_s
    while True:
        for r, _ in bad:
            r.threads[1].join(timeout=1.0)  # its stderr read to the end: peer_left is final
        own = [(r, c) for r, c in bad if not r.peer_left]
        if own or time.monotonic() > deadline:
            r, c = min(own or bad, key=lambda rc: rc[0].rank)
            return r.rank, c
        time.sleep(0.05)
        bad = [(r, c) for r, c in ((r, r.code()) for r in ranks) if c is not None and c != 0]


def stop(ranks, grace):
    """SIGTERM every rank still running, then SIGKILL those left after @grace seconds."""
    alive = [r for r in ranks if r.code() is None]
    for r in alive:
        try:
            r.proc.terminate()
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace
    for r in alive:
        try:
            r.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            r.proc.kill()
            r.proc.wait()


def shared_gpu_env(env, rank):
    """--share-gpu: @p env for rank @p rank, which NCCL must take for a host of its own (it refuses
    two ranks on one GPU of one host), reached through its socket transport on loopback."""
    e = dict(env)
    e["NCCL_HOSTID"] = "flashladder-shared-gpu-rank%d" % rank
    e["NCCL_NET"] = "Socket"
    e.setdefault("NCCL_SOCKET_IFNAME", "lo")
    return e


def describe(code):
    return "signal %d" % -code if code < 0 else "code %d" % code


def main(argv):
    args, rung = parse(argv)
    exe = args.exe or find_exe()
    if not exe or not os.path.exists(exe):
        print("launch_ring.py: no rung 12 executable (build it: cmake --build --preset release "
              "--target 12_ring_attention, or give --exe)", file=sys.stderr)
        return EXIT_BAD
    world = args.nnodes * args.gpus
    env = dict(os.environ)
    env["NCCL_NVLS_ENABLE"] = "0"  # NVLink multicast (NVLS) stays off

    shared = ["--shared-gpu"] if args.share_gpu else []

    def device(local):
        return 0 if args.share_gpu else local

    # 1. The flags and the GPUs, checked once by the rung itself.
    pre = subprocess.run(command(exe) + rung + ["--gpus", str(world), "--local-rank",
                                                str(device(args.gpus - 1)), "--preflight"] + shared,
                         env=env, stdin=subprocess.DEVNULL)
    if pre.returncode != EXIT_OK:
        if pre.returncode not in (EXIT_BAD, EXIT_SKIP):
            print("launch_ring.py: the preflight check failed with %s" % describe(pre.returncode),
                  file=sys.stderr)
            return EXIT_FAIL
        return pre.returncode

    # 2. The ranks.
    tmpdir = None
    id_file = args.id_file
    if not id_file:
        tmpdir = tempfile.mkdtemp(prefix="fl-ring-")
        id_file = os.path.join(tmpdir, "nccl_id")
    ranks = []
    interrupted = []

    def on_signal(signum, _frame):
        interrupted.append(signum)

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        for local in range(args.gpus):
            g = args.node_rank * args.gpus + local
            cmd = (shlex.split(args.wrap) + command(exe) + rung +
                   ["--gpus", str(world), "--rank", str(g), "--local-rank", str(device(local)),
                    "--id-file", id_file, "--timeout", str(args.timeout)] + shared)
            ranks.append(Rank(g, cmd, shared_gpu_env(env, g) if args.share_gpu else env))

        # 3. The watchdog.
        start = time.monotonic()
        failed = None
        while True:
            codes = [r.code() for r in ranks]
            bad = [(r, c) for r, c in zip(ranks, codes) if c is not None and c != 0]
            if bad:
                failed = first_failure(ranks, bad)
                break
            if all(c == 0 for c in codes):
                break
            if interrupted:
                stop(ranks, args.grace)
                print("launch_ring.py: interrupted (signal %d): stopped every rank" % interrupted[0],
                      file=sys.stderr)
                return EXIT_FAIL
            if time.monotonic() - start > args.max_seconds:
                running = [r.rank for r, c in zip(ranks, codes) if c is None]
                stop(ranks, args.grace)
                print("launch_ring.py: rank%s %s still running after --max-seconds %g: stopped every rank"
                      % ("s" if len(running) > 1 else "", ", ".join(map(str, running)), args.max_seconds),
                      file=sys.stderr)
                return EXIT_FAIL
            time.sleep(0.05)
        if failed is not None:
            stop(ranks, args.grace)
        for r in ranks:
            r.proc.wait()
            for t in r.threads:
                t.join(timeout=5)
        if failed is None:
            return EXIT_OK
        rank, code = failed
        others = [r.rank for r in ranks if r.rank != rank]
        print("launch_ring.py: rank %d failed (exit %s)%s" % (
            rank, describe(code),
            "; stopped rank%s %s" % ("s" if len(others) > 1 else "", ", ".join(map(str, others)))
            if others else ""), file=sys.stderr)
        # The rung's own verdicts pass through: unsupported input (2) or no device (77) on the
        # first rank to fail; anything else (a failed check, a crash, a signal) is 1.
        return code if code in (EXIT_BAD, EXIT_SKIP) else EXIT_FAIL
    finally:
        for s, h in old.items():
            signal.signal(s, h)
        stop(ranks, args.grace)
        if tmpdir:
            shutil.rmtree(tmpdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
