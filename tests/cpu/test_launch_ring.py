#!/usr/bin/env python3
"""Rung 12's launcher (steps/12_ring_attention/launch_ring.py) on the CPU, with a fake rank
(tests/cpu/fake_ring_rank.py): every rank gets its flags and NCCL_NVLS_ENABLE=0; the first rank
that fails stops the others, within a bounded time, and the launcher exits non-zero naming it;
too few GPUs exits 2, no GPU 77; --max-seconds stops a hung ring. With the built executable as
argument (tests/CMakeLists.txt passes it), also its flags without a GPU.

  python3 tests/cpu/test_launch_ring.py [path/to/12_ring_attention]
"""
import json
import os
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
LAUNCHER = os.path.join(ROOT, "steps", "12_ring_attention", "launch_ring.py")
FAKE = os.path.join(HERE, "fake_ring_rank.py")
EXE = None  # the real executable, from argv


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purpose (its parent, the launcher, has gone).
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


class Launcher(unittest.TestCase):
    def setUp(self):
        # Every folder a test makes (the ranks' reports, an id file) lives in one, removed after it.
        tmp = tempfile.TemporaryDirectory(prefix="fl-ring-test-")
        self.addCleanup(tmp.cleanup)
        self.tmp = tmp.name

    def run_launcher(self, args, rung=(), timeout=60, **env):
        self.out = tempfile.mkdtemp(dir=self.tmp)
        e = dict(os.environ, FAKE_OUT=self.out)
        for k in ("NCCL_NVLS_ENABLE", "NCCL_HOSTID", "NCCL_NET", "NCCL_SOCKET_IFNAME"):
            e.pop(k, None)
        e.update({k: str(v) for k, v in env.items()})
        t0 = time.monotonic()
        p = subprocess.run([sys.executable, LAUNCHER, "--exe", FAKE] + list(args) + ["--"] + list(rung),
                           env=e, capture_output=True, text=True, timeout=timeout)
        self.elapsed = time.monotonic() - t0
        return p

    def ranks(self):
        out = {}
        for name in os.listdir(self.out):
            with open(os.path.join(self.out, name)) as f:
                d = json.load(f)
            out[d["rank"]] = d
        return out

    def test_every_rank_gets_its_flags_and_nvls_off(self):
        p = self.run_launcher(["--gpus", "3", "--timeout", "7"], ["--seqlen", "64"])
        self.assertEqual(p.returncode, 0, p.stderr)
        r = self.ranks()
        self.assertEqual(sorted(r), [0, 1, 2])
        self.assertEqual(len({d["id_file"] for d in r.values()}), 1)
        for k, d in r.items():
            self.assertEqual(d["local_rank"], k)
            self.assertEqual(d["gpus"], 3)
            self.assertEqual(d["nvls"], "0")
            self.assertEqual(d["timeout"], "7.0")
            self.assertEqual(d["argv"][:2], ["--seqlen", "64"])
        self.assertIn("fake rank 0 here", p.stdout.splitlines())  # rank 0's stdout: no prefix
        self.assertIn("[rank 2] fake rank 2 here", p.stdout.splitlines())
        self.assertFalse(os.path.exists(r[0]["id_file"]))  # the temporary directory is gone

    def test_share_gpu_puts_every_rank_on_gpu_0_as_its_own_nccl_host(self):
        p = self.run_launcher(["--gpus", "3", "--share-gpu"], ["--seqlen", "64"], FAKE_GPUS=1)
        self.assertEqual(p.returncode, 0, p.stderr)  # one GPU is enough for three ranks
        r = self.ranks()
        self.assertEqual(sorted(r), [0, 1, 2])
        for k, d in r.items():
            self.assertEqual(d["local_rank"], 0)
            self.assertEqual(d["gpus"], 3)
            self.assertTrue(d["shared_gpu"])
            self.assertEqual(d["nccl_env"]["NCCL_NET"], "Socket")
            self.assertEqual(d["nccl_env"]["NCCL_SOCKET_IFNAME"], "lo")
        self.assertEqual(len({d["nccl_env"]["NCCL_HOSTID"] for d in r.values()}), 3)  # a host each
        # Without --share-gpu no rank is told so, and NCCL's host is the real one.
        p = self.run_launcher(["--gpus", "2"], FAKE_GPUS=2)
        self.assertEqual(p.returncode, 0, p.stderr)
        for d in self.ranks().values():
            self.assertFalse(d["shared_gpu"])
            self.assertNotIn("NCCL_HOSTID", d["nccl_env"])
        # A socket interface the user chose is kept; --share-gpu is one host's.
        p = self.run_launcher(["--gpus", "2", "--share-gpu"], NCCL_SOCKET_IFNAME="eth9")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual({d["nccl_env"]["NCCL_SOCKET_IFNAME"] for d in self.ranks().values()}, {"eth9"})
        p = self.run_launcher(["--gpus", "2", "--share-gpu", "--nnodes", "2", "--id-file", "x"])
        self.assertEqual(p.returncode, 2)
        self.assertIn("--share-gpu", p.stderr)

    def test_wrap_runs_every_rank_under_a_command(self):
        p = self.run_launcher(["--gpus", "2", "--wrap", "env FAKE_WRAPPED='yes it is'"])
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual({d["wrapped"] for d in self.ranks().values()}, {"yes it is"})

    def test_a_failing_rank_stops_the_others(self):
        p = self.run_launcher(["--gpus", "4", "--grace", "2"], FAKE_HANG=1, FAKE_FAIL_RANK=2)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("rank 2 failed (exit code 1)", p.stderr)
        self.assertIn("stopped ranks 0, 1, 3", p.stderr)
        self.assertLess(self.elapsed, 15)
        time.sleep(0.2)
        for d in self.ranks().values():
            self.assertFalse(alive(d["pid"]), "rank %d still running" % d["rank"])

    def test_a_rank_saying_unsupported_gives_2(self):
        p = self.run_launcher(["--gpus", "2"], FAKE_HANG=1, FAKE_FAIL_RANK=0, FAKE_FAIL_CODE=2)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("rank 0 failed (exit code 2)", p.stderr)

    def test_too_few_gpus_is_2_and_no_gpu_77(self):
        p = self.run_launcher(["--gpus", "4"], FAKE_GPUS=2)
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn("asks for 4 GPUs", p.stderr)
        self.assertEqual(self.ranks(), {})  # no rank was started
        p = self.run_launcher(["--gpus", "1"], FAKE_GPUS=0)
        self.assertEqual(p.returncode, 77, p.stderr)

    def test_max_seconds_stops_a_hung_ring(self):
        p = self.run_launcher(["--gpus", "2", "--max-seconds", "1", "--grace", "1"], FAKE_HANG=1)
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("ranks 0, 1 still running after --max-seconds 1", p.stderr)
        self.assertLess(self.elapsed, 15)

    def test_the_launchers_flags_are_its_own(self):
        p = self.run_launcher(["--gpus", "2"], ["--rank", "1"])
        self.assertEqual(p.returncode, 2)
        self.assertIn("--rank is the launcher's to set", p.stderr)
        p = self.run_launcher(["--gpus", "2", "--nnodes", "2"])
        self.assertEqual(p.returncode, 2)
        self.assertIn("--id-file", p.stderr)

    def test_nodes_number_the_ranks(self):
        p = self.run_launcher(["--gpus", "2", "--nnodes", "3", "--node-rank", "1", "--id-file",
                               os.path.join(tempfile.mkdtemp(dir=self.tmp), "id")])
        self.assertEqual(p.returncode, 0, p.stderr)
        r = self.ranks()
        self.assertEqual(sorted(r), [2, 3])
        self.assertEqual([r[2]["local_rank"], r[3]["local_rank"]], [0, 1])
        self.assertEqual(r[2]["gpus"], 6)


@unittest.skipUnless(len(sys.argv) > 1, "no executable given")
class Executable(unittest.TestCase):
    def run_exe(self, *args):
        return subprocess.run([EXE] + list(args), capture_output=True, text=True, timeout=300)

    def test_help_and_bad_flags(self):
        p = self.run_exe("--help")
        self.assertEqual(p.returncode, 0)
        self.assertIn("--variant zigzag|contiguous", p.stdout)
        for bad, says in ((["--variant", "striped"], "zigzag (default) and contiguous"),
                          (["--gpus", "2"], "launch_ring.py"),
                          (["--gpus", "0"], "--gpus must be >= 1"),
                          (["--seqlen-q", "8", "--seqlen-k", "16"], "--seqlen-q must equal --seqlen-k"),
                          (["--forward-rung", "5"], "--forward-rung must be 6 or 10")):
            p = self.run_exe(*bad)
            self.assertEqual(p.returncode, 2, (bad, p.stderr))
            self.assertIn(says, p.stderr)

    def test_degenerate_ring_runs_or_skips(self):
        # Without a GPU: 77 (skipped). With one: a tiny causal ring through the launcher, checked.
        p = subprocess.run([sys.executable, LAUNCHER, "--exe", EXE, "--gpus", "1", "--", "--seqlen", "70",
                            "--heads", "2", "--dim", "64", "--causal", "1", "--iters", "2", "--warmup", "1"],
                           capture_output=True, text=True, timeout=300)
        self.assertIn(p.returncode, (0, 77), p.stdout + p.stderr)


if __name__ == "__main__":
    if len(sys.argv) > 1:
        EXE = sys.argv.pop(1)
    unittest.main(argv=[sys.argv[0]], verbosity=2)
