#!/usr/bin/env python3
"""bench/studies/ab_compare.py (the A/B table of bench/studies/ab_timing.sh) on synthetic runs, and
bench/studies/sass_loop.py on a synthetic SASS listing, bench/studies/ncu_source_top.py on a synthetic
Nsight Compute source page: no GPU needed.

    python3 tests/cpu/test_ab_compare.py      (ctest: cpu_ab_compare)

The median of each side, after / before, the noise as the larger spread between two runs of one
build, the verdict against noise + 2 %, and only the benchmarks every run has.
"""

import json
import os
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench", "studies"))
import ab_compare  # noqa: E402
import ncu_source_top  # noqa: E402
import sass_loop  # noqa: E402


def run(times, unit="ms"):
    """ab_compare.load of a ladder_bench JSON with these times (the file removed after)."""
    fd, path = tempfile.mkstemp(suffix=".json", prefix="ab-")
    with os.fdopen(fd, "w") as f:
        json.dump({"context": {"device": "Fake GPU", "date": "2026-11-26T00:00:00"},
                   "benchmarks": [{"name": n + "/iterations:1/manual_time", "run_type": "iteration",
                                   "real_time": t, "time_unit": unit} for n, t in times.items()]}, f)
    try:
        return ab_compare.load(path)
    finally:
        os.unlink(path)


class AbCompareTest(unittest.TestCase):
    def test_ratio_noise_and_verdict(self):
        a1 = (run({"x": 1.00, "y": 2.0, "only_a": 1.0}))
        a2 = (run({"x": 1.04, "y": 2.0, "only_a": 1.0}))
        b1 = (run({"x": 1.02, "y": 2.4}))
        b2 = (run({"x": 1.02, "y": 2.4}))
        rows = {r[0].split("/")[0]: r for r in ab_compare.compare([a1, a2], [b1, b2])}
        self.assertEqual(sorted(rows), ["x", "y"])  # only what every run has
        _, ma, mb, ratio, noise, ok = rows["x"]
        self.assertAlmostEqual(ma, 1.02)
        self.assertAlmostEqual(mb, 1.02)
        self.assertAlmostEqual(noise, 0.04)
        self.assertTrue(ok)
        _, ma, mb, ratio, noise, ok = rows["y"]
        self.assertAlmostEqual(ratio, 1.2)  # 20 % slower, no noise: outside
        self.assertFalse(ok)

    def test_units_and_markdown(self):
        a = (run({"x": 1000.0}, unit="us"))
        self.assertAlmostEqual(a["x/iterations:1/manual_time"], 1.0)
        text = ab_compare.markdown(ab_compare.compare([a], [a]), "ctx")
        self.assertIn("| `x` | 1.0000 | 1.0000 | 1.000 | 0.0 % | yes |", text)
        self.assertIn("1 benchmarks; geometric mean of after / before 1.000", text)



class SassLoopTest(unittest.TestCase):
    """bench/studies/sass_loop.py's reading of a cuobjdump -sass listing (rung 08's per-chunk counts):
    the functions apart, the main loop as the widest backward branch, the opcodes without predicates."""

    LISTING = """
        Function : _Z5otherv
        /*0000*/                   NOP ;
        /*0010*/                   BRA 0x0 ;
        Function : _Z6kernelv
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/                   HMMA.16816.F32 R4, R8, R12, R4 ;
        /*0020*/              @!P0 BRA 0x40 ;
        /*0030*/                   LDSM.16.M88.4 R8, [R2] ;
        /*0040*/                   F2FP.F16.E4M3.UNPACK_B R9, R8 ;
        /*0050*/               @P1 BRA 0x30 ;
        /*0060*/                   HMMA.16816.F32 R4, R8, R12, R4 ;
        /*0070*/                   BRA 0x10 ;
        /*0080*/                   EXIT ;
"""

    def test_main_loop(self):
        funcs = dict(sass_loop.kernels(self.LISTING))
        self.assertEqual(sorted(funcs), ["_Z5otherv", "_Z6kernelv"])
        body = funcs["_Z6kernelv"]
        self.assertEqual(sass_loop.main_loop(body), (0x10, 0x70))  # the widest of the two back edges
        loop = [i for a, i in body if 0x10 <= a <= 0x70]
        self.assertEqual([sass_loop.opcode(i) for i in loop],
                         ["HMMA", "BRA", "LDSM", "F2FP", "BRA", "HMMA", "BRA"])
        self.assertIsNone(sass_loop.main_loop([(0, "NOP"), (0x10, "BRA 0x20")]))  # forward only

    def test_narrowest_loop_and_counts(self):
        body = dict(sass_loop.kernels(self.LISTING))["_Z6kernelv"]
        # The narrowest back edge around an LDSM is 0x30..0x50; around an HMMA only the wide one.
        self.assertEqual(sass_loop.narrowest_loop(body, "LDSM"), (0x30, 0x50))
        self.assertEqual(sass_loop.narrowest_loop(body, "HMMA"), (0x10, 0x70))
        self.assertIsNone(sass_loop.narrowest_loop(body, "STSM"))
        ins = ["STS [R1], R2", "STS.128 [R1], R4", "@P0 STSM.16.M88.4 [R1], R4", "LDS.64 R2, [R1]", "STS [R3], R2"]
        counts = sass_loop.count_prefixes(ins, ["STSM", "STS.128", "STS", "LDS"])
        self.assertEqual(dict(counts), {"STS": 2, "STS.128": 1, "STSM": 1, "LDS": 1})  # the longest prefix wins

class NcuSourceTopTest(unittest.TestCase):
    def test_ranks_by_reason(self):
        # ncu's source page: progress text, then quoted CSV rows (address, SASS, samples by reason).
        # ncu 2025 prints the kernel's name first, as a quoted row of its own.
        text = ('==PROF== Connected\n"Kernel Name","void k<(int)1, (bool)0>(float *)",\n"Address","Source","Warp Stall Sampling (All Samples)","stall_mio_throttle",'
                '"stall_barrier"\n"0x10","STS.128 [R1], R4","50","40","0"\n"0x20","HGMMA.64x64x16.F32","30","0","5"\n'
                '"0x30","BAR.SYNC 0x1","20","0","15"\n')
        import contextlib
        import gzip
        import io
        outs = []
        for zipped in (False, True):  # the committed copies are gzipped (rung14_ncu_source.sh)
            fd, path = tempfile.mkstemp(suffix=".csv.gz" if zipped else ".csv", prefix="ncu-source-")
            with os.fdopen(fd, "wb") as f:
                f.write(gzip.compress(text.encode()) if zipped else text.encode())
            try:
                out = io.StringIO()
                with contextlib.redirect_stdout(out):
                    self.assertEqual(ncu_source_top.main([path, "--top", "2"]), 0)
                outs.append(out.getvalue())
            finally:
                os.remove(path)
        self.assertEqual(outs[0], outs[1])
        lines = outs[0].splitlines()
        at = lines.index("stall_mio_throttle:")
        self.assertIn("100.0 %", lines[at + 1])
        self.assertIn("STS.128", lines[at + 1])
        every = lines.index("Warp Stall Sampling (All Samples) (3 instructions):")
        self.assertIn("50.0 %", lines[every + 1])
        self.assertEqual(len([x for x in lines[every + 1:every + 4] if "%" in x]), 2)  # --top 2


if __name__ == "__main__":
    unittest.main(verbosity=2)
