#!/usr/bin/env python3
"""Every figure in the docs is generated from the committed runs (bench/docgen.py).

    python3 tests/cpu/test_docgen.py BUILD/bin      (ctest: cpu_docgen)

1. The committed tree is up to date: every generated block of every doc page and every committed
   bench/results/<gpu>/report.md equals what the committed results generate.
2. A hand-edited figure inside a generated block fails the check (and names the file); an edit
   outside the blocks does not.
3. A block whose data no committed run holds says so, with the command that measures it, and
   carries no number.
4. Marker errors (unknown generator, missing end marker) are errors, not silently skipped.
5. Rung 13's bench side on synthetic files made here (no committed run, no GPU): bench/report.py's
   fp8 family (grouped like prefill), the generators fp8-speed, fp8-accuracy and fp8-p-scaling,
   bench/run_fp8.sh (arguments, exit codes, the recorded commands) on a stub 13_fp8, and
   bench/run_all.sh --family fp8 on stub binaries: one folder with the sweep and the accuracy runs.

The baselines come from the build's registry, so a partial build (-DFL_RUNGS, -DFL_HEAD_DIM,
-DFL_DTYPE: some committed entries are not registered) cannot regenerate the committed reports:
the test then exits 77 (ctest: skipped) and says so. CI builds everything.
"""

import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DOCGEN = os.path.join(ROOT, "bench", "docgen.py")
BIN = None  # set from argv


def docgen(*args):
    out = subprocess.run([sys.executable, DOCGEN, "--bin", BIN, *args], capture_output=True, text=True)
    return out.returncode, out.stdout + out.stderr


class ScratchDoc:
    """A markdown file next to README.md (so its relative links are the README's), removed after."""

    def __init__(self, text):
        fd, self.path = tempfile.mkstemp(prefix="docgen-test-", suffix=".md", dir=ROOT)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)

    def __enter__(self):
        return self.path

    def __exit__(self, *exc):
        os.unlink(self.path)


class DocgenTest(unittest.TestCase):
    def write_doc(self, doc):
        """What `docgen.py --write` makes of @p doc (a scratch file next to README.md)."""
        with ScratchDoc(doc) as path:
            rc, out = docgen("--write", path)
            self.assertEqual(rc, 0, out)
            with open(path, encoding="utf-8") as f:
                return f.read()

    def write_run_doc(self, files, block):
        """What `docgen.py --write` makes of a ``block`` (gen:<name>) whose run is a temp folder
        holding ``files`` ({name: JSON data}), named relative to bench/results/ as gpu= names one."""
        with tempfile.TemporaryDirectory() as run:
            for name, data in files.items():
                with open(os.path.join(run, name), "w", encoding="utf-8") as f:
                    json.dump(data, f)
            gpu = os.path.relpath(run, os.path.join(ROOT, "bench", "results"))
            return self.write_doc("".join("<!-- gen:%s gpu=%s -->\n<!-- /gen:%s -->\n\n" % (b, gpu, b)
                                          for b in block))

    def test_committed_tree_is_generated(self):
        rc, out = docgen("--check")
        self.assertEqual(rc, 0, out)

    def test_hand_edited_figure_fails(self):
        with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
            text = f.read()
        m = re.search(r"<!-- gen:readme-summary[^\n]* -->\n(.*?)<!-- /gen:readme-summary -->", text, re.S)
        self.assertIsNotNone(m, "README.md has no readme-summary block")
        block = m.group(1)
        figure = re.search(r"\| (\d+\.\d+) \|", block)  # the first decimal figure in a table cell
        self.assertIsNotNone(figure, "no figure in the README table")
        edited_value = "%s9" % figure.group(1)
        edited = text[: m.start(1) + figure.start(1)] + edited_value + text[m.start(1) + figure.end(1):]
        with ScratchDoc(edited) as path:
            rc, out = docgen("--check", path)
            self.assertEqual(rc, 1, out)
            self.assertIn(os.path.basename(path), out)
            self.assertIn(edited_value, out)  # the diff shows the hand-edited line
        # The same file without the edit is up to date; an edit outside every block is allowed.
        with ScratchDoc(text.replace("## Quick start", "## Quick start (edited prose)")) as path:
            rc, out = docgen("--check", path)
            self.assertEqual(rc, 0, out)

    def test_hand_edited_figure_fails_rungs_14_to_16(self):
        # One committed block of each of rungs 14, 15 and 16 (tables once pasted from scripts), alone in a
        # scratch file: as committed it is up to date; with one figure changed the check fails and shows it.
        for readme, name in (("steps/14_hopper_backward/README.md", "rung14-backward"),
                             ("steps/15_persistent/README.md", "rung15-ratios"),
                             ("steps/16_masks/README.md", "rung16-masks")):
            with open(os.path.join(ROOT, readme), encoding="utf-8") as f:
                text = f.read()
            m = re.search(r"(<!-- gen:%s [^\n]* -->\n)(.*?)(<!-- /gen:%s -->)" % (name, name), text, re.S)
            self.assertIsNotNone(m, "%s has no %s block" % (readme, name))
            figure = re.search(r"\| (\d+(?:\.\d+)?)×? \|", m.group(2))  # a figure in a table cell
            self.assertIsNotNone(figure, "no figure in %s's %s block" % (readme, name))
            block = m.group(1) + m.group(2) + m.group(3) + "\n"
            with ScratchDoc(block) as path:
                rc, out = docgen("--check", path)
                self.assertEqual(rc, 0, out)
            edited_value = "%s1" % figure.group(1)
            start = len(m.group(1)) + figure.start(1)
            with ScratchDoc(block[:start] + edited_value + block[start + len(figure.group(1)):]) as path:
                rc, out = docgen("--check", path)
                self.assertEqual(rc, 1, "%s: an edited figure in %s passed\n%s" % (readme, name, out))
                self.assertIn(edited_value, out)  # the diff shows the hand-edited line

    def test_package_grid_without_its_run_is_said(self):
        # The backward grid through the package (torch_sdpa.py --backends ...,ladder) on a folder whose
        # run timed SDPA alone: the block says what is missing and the command, and carries no figure.
        doc = ("<!-- gen:rung14-ratios gpu=nvidia-h200/rung14-grid-bf16 mine=torch_ladder -->\n"
               "<!-- /gen:rung14-ratios -->\n")
        written = self.write_doc(doc)
        self.assertIn("Not in a committed run yet", written)
        self.assertIn("--torch-backends cudnn,ladder", written)
        self.assertNotIn("×", written)

    def test_missing_data_is_said_not_invented(self):
        # The H200 run predates the ablation family: its folder has no ablation records.
        doc = "<!-- gen:ablation rung=4 gpu=nvidia-h200 -->\n<!-- /gen:ablation -->\n"
        written = self.write_doc(doc)
        self.assertIn("Not in a committed run yet", written)
        self.assertIn("bench/run_all.sh --family ablation", written)
        self.assertIsNone(re.search(r"\d+\.\d+", written), written)

    def test_ncu_export_is_read_as_ncu_writes_it(self):
        # ncu --csv --page raw: a header row, a units row, one row per kernel, "1,234" numbers.
        folder = os.path.join(ROOT, "bench", "results", "nvidia-h100-80gb-hbm3")
        if not os.path.exists(os.path.join(folder, "ncu_rung08_128k.csv")):
            self.skipTest("no committed ncu_rung08_128k.csv")
        doc = ("<!-- gen:ncu gpu=nvidia-h100-80gb-hbm3 target=rung08_128k "
               "metrics=gpu__time_duration.sum,dram__bytes_read.sum,sm__inst_executed.sum -->\n<!-- /gen:ncu -->\n")
        written = self.write_doc(doc)
        rows = [l for l in written.splitlines() if l.startswith("| ")]
        self.assertEqual(len(rows), 4, written)  # the header and one row per metric
        self.assertIn("`split_kv_attention<", rows[0])  # one column per kernel, without "void" and arguments
        self.assertIn("`combine_splits<", rows[0])
        self.assertNotIn("(AttnParams", rows[0])
        self.assertRegex(rows[1], r"\d µs|\d ms")  # ns converted, no "179,648 ns"
        self.assertNotIn(" ns", rows[1])
        self.assertRegex(rows[2], r"MiB|GiB|KiB")  # bytes in binary units

    def test_decode_fp8_block(self):
        # gen:decode-fp8 on the committed run of rung 08's e4m3 cache (one folder per dtype): a row
        # per (dtype, batch, cache), each cell the 16-bit time over the e4m3 time and the e4m3 time.
        run = "nvidia-h200/checks-2026-11-29i/inregister-9921bd4/decode-fp8-"
        if not os.path.exists(os.path.join(ROOT, "bench", "results", run + "bf16", "ladder_bench.json")):
            self.skipTest("no committed decode-fp8 run")
        doc = "<!-- gen:decode-fp8 folders=%sbf16,%sfp16 -->\n<!-- /gen:decode-fp8 -->\n" % (run, run)
        written = self.write_doc(doc)
        rows = [l for l in written.splitlines() if l.startswith("| ")]
        self.assertEqual(rows[0], "| dtype, batch, cache | Sk=4k | Sk=16k | Sk=64k | Sk=128k |")
        self.assertIn("| bf16, 8, contiguous | 1.40× (0.034 ms) | 1.60× (0.084 ms) | 1.82× (0.264 ms) | "
                      "1.87× (0.503 ms) |", rows)
        self.assertEqual(len(rows), 1 + 8, written)  # 2 dtypes x 2 batches x (contiguous, pages of 64)
        self.assertEqual(written.count("commit `9921bd4"), 2, written)  # each folder's provenance
        doc = "<!-- gen:decode-fp8 folders=nvidia-h200/no-such-run -->\n<!-- /gen:decode-fp8 -->\n"
        written = self.write_doc(doc)
        self.assertIn("Not in a committed run yet", written)
        self.assertIsNone(re.search(r"\d+\.\d+×", written), written)

    def test_fa_tests_block(self):
        # fa-tests (bench/studies/fa_tests/run.py): the per-test counts, the share that ran, and the
        # refusals grouped by what precedes each rung's reason in brackets, the reasons given once.
        d = {"device": {"name": "NVIDIA H200"}, "date": "2026-11-29T10:00:00+00:00", "git_sha": "abc1234",
             "versions": {"torch": "2.11.0"}, "sample": "1/64", "cases": 12, "not_skipped": 10, "ran": 8,
             "ran_share": 0.8, "passed_share_of_ran": 1.0, "failures_total": 0, "failures": [],
             "tests_file": "test_flash_attn.py", "tests_source": "flash-attention 0251105a",
             "per_test": {"test_a": {"passed": 8, "refused": 2, "skipped": 2}},
             "total": {"passed": 8, "refused": 2, "skipped": 2},
             "refusals": [["flashladder: no backward rung runs d=40 (14: head_dim 40 not supported (64, 128))", 1],
                          ["flashladder: no backward rung runs d=40 (14: head_dim 40 not supported (64, 128))", 1],
                          ["flashladder: dropout_p must be in [0, 1)", 1]]}
        written = self.write_run_doc({"fa_tests.json": d}, ["fa-tests"])
        self.assertIn("| `test_a` | 12 | 8 | 0 | 2 | 0 | 2 |", written)
        self.assertIn("8 ran on the ladder (**80.0%**", written)
        self.assertIn("The refusals, most frequent first: 2 × flashladder: no backward rung runs d=40; "
                      "1 × flashladder: dropout_p must be in [0, 1).", written)
        self.assertIn("The first in full: flashladder: no backward rung runs d=40 (14: head_dim 40 not supported "
                      "(64, 128)).", written)

    def test_cudnn_fp8_block(self):
        # cudnn-fp8 (bench/pytorch/cudnn_fp8.py): the six columns, "—" where cuDNN took no graph and its
        # reason once, the backward ratio rung 18 is read against, the error block.
        row = lambda d, bwd: {  # noqa: E731
            "shape": {"batch": 4, "seqlen": 4096, "heads": 2048 // d, "head_dim": d, "causal": False},
            "ms": dict({"cudnn_fp8_fwd": 0.5, "ladder_fp8_fwd": 0.6, "cudnn_fwd": 0.8, "ladder_bwd": 2.5,
                        "cudnn_bwd": 2.9}, **({"cudnn_fp8_bwd": 2.0} if bwd else {})),
            "refused": {} if bwd else {"cudnn_fp8_bwd": "hidden_dim should be 128"},
            "cudnn_notes": {"o": "FP8_E4M3", "grads": "FP8_E4M3" if bwd else "None"}}
        d = {"device": {"name": "NVIDIA H200"}, "date": "2026-11-29T10:00:00+00:00", "git_sha": "abc1234",
             "versions": {"torch": "2.11.0", "cudnn": "9.19.0", "cudnn_frontend": "nvidia-cudnn-frontend==1.14.0"},
             "iters": 20, "repeats": 3, "p_scale": 256.0, "rows": [row(64, False), row(128, True)],
             "errors": [{"head_dim": 128, "heads": 16, "seqlen": 1024,
                         "cudnn_fp8_held": {"dQ": 0.04, "dK": 0.04, "dV": 0.037},
                         "cudnn_fp8_end_to_end": {"dQ": 0.07, "dK": 0.07, "dV": 0.056},
                         "ladder_bf16": {"dQ": 0.0025, "dK": 0.0025, "dV": 0.0023}}]}
        written = self.write_run_doc({"cudnn_fp8.json": d}, ["cudnn-fp8"])
        self.assertIn("| 64 | 4 × 4k, 32 heads | no | 0.500 | 0.600 | 0.800 | — | 2.500 | 2.900 | — |", written)
        self.assertIn("| 128 | 4 × 4k, 16 heads | no | 0.500 | 0.600 | 0.800 | 2.000 | 2.500 | 2.900 | 1.25× |", written)
        self.assertIn('Not taken by cuDNN at head_dim 64: "hidden_dim should be 128".', written)
        self.assertIn("cuDNN's FP8 dQ, dK, dV 4.0e-02, 4.0e-02, 3.7e-02 on the values", written)
        self.assertIn("cuDNN 9.19.0 through nvidia-cudnn-frontend==1.14.0", written)

    def test_ncu_source_block(self):
        # ncu-source (bench/studies/rung14_ncu_source.sh): per build the samples in all, each reason's share,
        # and the instructions with the most of a reason's samples, read from the gzipped source page with
        # ncu's "Kernel Name" line before the table.
        import gzip
        head = '"Kernel Name","k"\n"Address","Source","Warp Stall Sampling (All Samples)","stall_mio","stall_wait"\n'
        pages = {"one": head + '"0x10","STS.128 [R3], R4","60","45","0"\n'
                               '"0x20","@P0 MUFU.EX2 R1, R1","40","15","10"\n',
                 "two": head + '"0x10","STSM.16.M88.4 [R3], R4","50","10","5"\n'
                               '"0x20","MUFU.EX2 R1, R1","50","30","15"\n'}
        with tempfile.TemporaryDirectory() as run:
            for name, text in pages.items():
                os.makedirs(os.path.join(run, name))
                with gzip.open(os.path.join(run, name, "rung14_demo_source.csv.gz"), "wt", encoding="utf-8") as f:
                    f.write(text)
                with open(os.path.join(run, name, "rung14_demo_source.cmd"), "w", encoding="utf-8") as f:
                    f.write("14_hopper_backward --dim 128\n")
            gpu = os.path.relpath(run, os.path.join(ROOT, "bench", "results"))
            written = self.write_doc("<!-- gen:ncu-source gpu=%s builds=one,two names=main,the_branch "
                                     "reasons=mio,wait top=2 -->\n<!-- /gen:ncu-source -->\n" % gpu)
        self.assertIn("| | main | the branch |", written)
        self.assertIn("| stall samples, all reasons | 100 | 100 |", written)
        self.assertIn("| `stall_mio`, share of all | 60.0 % | 40.0 % |", written)
        self.assertIn("| top `stall_mio` instructions | 75.0 % `STS.128 [R3], R4`<br>25.0 % `MUFU.EX2 R1, R1` | "
                      "75.0 % `MUFU.EX2 R1, R1`<br>25.0 % `STSM.16.M88.4 [R3], R4` |", written)
        self.assertIn("`14_hopper_backward --dim 128`", written)

    def test_host_serving_ab_block(self):
        # host-serving-ab (bench/pytorch/host_serving_ab.py): each build's µs per call per round, each over
        # its own process's SDPA decode call (the median over the rounds), and B's ratio over A's.
        sdpa, paged = "F.scaled_dot_product_attention, decode", "with_kvcache, paged, appending one token"
        def run(build, r, s, p):
            return {"build": build, "round": r, "package": "x", "call_us": {sdpa: s, paged: p},
                    "call_alone_us": {sdpa: s, paged: p}, "not_run": {}}
        d = {"context": {"device": "NVIDIA H200", "date": "2026-11-30T10:00:00+00:00", "git_sha": "abc1234def",
                         "versions": {"torch": "2.11.0"}},
             "names": ["main", "fused"], "calls": 2000,
             "shape": {"batch": 2, "heads_q": 8, "heads_kv": 2, "head_dim": 128, "slots": 1024, "used": 500,
                       "page": 64, "dtype": "fp16"},
             "runs": [run("a", 1, 20.0, 40.0), run("b", 1, 20.0, 30.0), run("a", 2, 10.0, 20.0),
                      run("b", 2, 30.0, 45.0)]}
        written = self.write_run_doc({"host_serving_ab.json": d}, ["host-serving-ab"])
        self.assertIn("| `%s` | 40.0, 20.0 | 30.0, 45.0 | 2.00× | 1.50× | 0.75× |" % paged, written)
        self.assertIn("| `%s` | 20.0, 10.0 | 20.0, 30.0 | 1.00× | 1.00× | — |" % sdpa, written)
        self.assertIn("Each round runs main's package, then fused's", written)
        self.assertIn("NVIDIA H200, 2026-11-30, commit `abc1234`, PyTorch 2.11.0", written)

    def test_rung16_dropout_ab_block(self):
        # rung16-dropout-ab (bench/studies/rung16_dropout_ab.sh): without / with dropout per pass, and the same
        # calls with Philox4x32-10 (`-philox10` runs) in their own columns; the footnote names the generator.
        def run(ms, p=0.0, rounds=None):
            prob = {"dtype": "bf16", "head_dim": 128, "seqlen_k": 4096, "batch": 4, "heads_q": 16, "heads_kv": 16,
                    "causal": True, "flops": 4.0 * 128 * 1e9}
            if p:
                prob.update(dropout_p=p, dropout_rounds=rounds)
            return {"problem": prob, "timing": {"median_ms": ms}, "date": "2026-11-29T10:00:00+00:00",
                    "git_sha": "abc1234", "device": {"name": "NVIDIA H200", "clock_mhz": 1980, "sms": 132}}
        shape = "bf16_d128_N4096_B4_H16_KV16_c1"
        files = {}
        for r in range(2):
            files["%s_forward_p0_r%d.json" % (shape, r)] = run(1.0)
            files["%s_forward_p0.1_r%d.json" % (shape, r)] = run(1.3, 0.1, 7)
            files["%s_forward_p0.1-philox10_r%d.json" % (shape, r)] = run(1.5, 0.1, 10)
            files["%s_backward_p0_r%d.json" % (shape, r)] = run(2.0)
            files["%s_backward_p0.1_r%d.json" % (shape, r)] = run(2.6, 0.1, 7)
            files["%s_backward_p0.1-philox10_r%d.json" % (shape, r)] = run(3.0, 0.1, 10)
        written = self.write_run_doc(files, ["rung16-dropout-ab"])
        self.assertIn("| bf16, 128, 4096, 4, 16/16, yes | 0.1 | 1.000 / 1.300 | 1.30× | 2.000 / 2.600 | 1.30× | "
                      "1.30× |", written)
        self.assertIn("| 1.500 / 3.000 | 1.50× | – / – | 2 |", written)
        self.assertIn("with dropout: Philox4x32-7, and in the Philox4x32-10 columns", written)

    def test_torch_blocks(self):
        # torch-train and torch-overhead (bench/pytorch/torch_train.py, bench/pytorch/torch_overhead.py) from
        # synthetic runs in a temp folder, named relative to bench/results/ as gpu= names a run.
        written = self.write_run_doc({"torch_train.json": synthetic_torch_train(),
                                      "torch_overhead.json": synthetic_torch_overhead()},
                                     ["torch-train", "torch-overhead"])
        rows = [l for l in written.splitlines() if l.startswith("| ")]
        self.assertIn("| the ladder | forward `10_warp_specialized`, backward `11_backward` (autograd) | 95.0 | 86k "
                      "| 1.520 | 1.05× | 0.95× |", rows)
        self.assertIn("| SDPA | flash backend forced (FlashAttention-2) | 100.0 | 82k | 1.510 | — | — |", rows)
        self.assertIn("| SDPA | cuDNN backend forced | 90.2 | 91k | 1.512 | 1.11× | — |", rows)
        self.assertIn("Against SDPA cuDNN: the last held-out losses differ by 0.0080 (the same tolerance): **match**",
                      written)
        self.assertIn("(1.10×; pass at ≤ 2×, attention on the ladder in 6 of 6 layers): **pass**", written)
        self.assertIn("differ by 0.0100 (two SDPA flash runs: 0.0040), tolerance 0.0302: **match**", written)
        self.assertIn("SDPA flash 20 %, SDPA cuDNN 16 %, the ladder 18 %", written)
        self.assertIn("| `10_warp_specialized` (default) | 61.0 | 62.2 | +1.2 | +14.0 | +9.0 |", rows)
        self.assertIn("Target: within 5 µs per call: **met**", written)
        self.assertIn("NVIDIA H100 80GB HBM3, 2026-11-24, commit `abc1234`, PyTorch 2.11.0", written)
        # No run yet: the block says so and names the command, with no figure.
        doc = "<!-- gen:torch-train gpu=nvidia-h200/no-such-run -->\n<!-- /gen:torch-train -->\n"
        written = self.write_doc(doc)
        self.assertIn("Not in a committed run yet", written)
        self.assertIn("bench/pytorch/torch_train.py", written)
        self.assertIsNone(re.search(r"\d+\.\d+", written), written)

    def test_marker_errors(self):
        with ScratchDoc("<!-- gen:no-such-table -->\n<!-- /gen:no-such-table -->\n") as path:
            rc, out = docgen("--check", path)
            self.assertEqual(rc, 2, out)
            self.assertIn("unknown generator", out)
        with ScratchDoc("<!-- gen:baselines -->\nno end marker\n") as path:
            rc, out = docgen("--check", path)
            self.assertEqual(rc, 2, out)
            self.assertIn("has no", out)

    def test_svg_figures(self):
        # The figures (bench/docblocks/figures.py, core.FIGURES) in a scratch copy of bench/ and
        # docs/figures/: --check fails naming a committed SVG one byte off, --write restores it, and
        # two --write runs from nothing (two processes, two hash seeds) give the committed bytes.
        def read(path):
            with open(path, "rb") as f:
                return f.read()

        committed = {os.path.basename(p): read(p)
                     for p in sorted(glob.glob(os.path.join(ROOT, "docs", "figures", "*.svg")))}
        self.assertGreaterEqual(len(committed), 5, sorted(committed))
        with tempfile.TemporaryDirectory(prefix="fl-docgen-figures-") as tmp:
            shutil.copytree(os.path.join(ROOT, "bench"), os.path.join(tmp, "bench"),
                            ignore=shutil.ignore_patterns("__pycache__"))
            figures = os.path.join(tmp, "docs", "figures")
            shutil.copytree(os.path.join(ROOT, "docs", "figures"), figures)

            def scratch(*args, seed="0"):
                out = subprocess.run([sys.executable, os.path.join(tmp, "bench", "docgen.py"), "--bin", BIN, *args],
                                     capture_output=True, text=True, env=dict(os.environ, PYTHONHASHSEED=seed))
                return out.returncode, out.stdout + out.stderr

            rc, out = scratch("--check")
            self.assertEqual(rc, 0, out)
            name = sorted(committed)[0]
            data = committed[name]
            i = data.index(b"</title>") - 1  # the title's last letter, one bit flipped
            with open(os.path.join(figures, name), "wb") as f:
                f.write(data[:i] + bytes([data[i] ^ 1]) + data[i + 1:])
            rc, out = scratch("--check")
            self.assertEqual(rc, 1, out)
            self.assertIn("docs/figures/%s" % name, out)
            self.assertEqual(out.count("docs/figures/"), 3, out)  # the diff's two file lines and the summary
            written = []
            for seed in ("1", "2"):
                for p in glob.glob(os.path.join(figures, "*.svg")):
                    os.unlink(p)
                rc, out = scratch("--write", seed=seed)
                self.assertEqual(rc, 0, out)
                self.assertIn("wrote docs/figures/%s" % name, out)
                written.append({p: read(os.path.join(figures, p)) for p in sorted(os.listdir(figures))})
            self.assertEqual(written[0], written[1])
            self.assertEqual(written[0], committed)
            for text in written[0].values():  # each figure says what it is and which run it plots
                self.assertIn(b"<title>", text)
                if b"not in a committed run yet" not in text:
                    self.assertRegex(text.decode("utf-8"), r"commit [0-9a-f]{7,}; data: bench/results/")


# ---- rung 13 (FP8): synthetic runs ------------------------------------------------------------------

FP8_DIMS = (64, 128, 256)


def gbench(name, ms, tflops, **counters):
    """One Google Benchmark entry as ladder_bench and torch_sdpa.py write it."""
    b = {"name": name + "/iterations:1/manual_time", "run_name": name, "run_type": "iteration", "iterations": 1,
         "real_time": ms, "time_unit": "ms", "median_ms": ms, "TFLOPS": tflops, "GB/s": 1.0}
    b.update(counters)
    return b


def fp8_sweep(folder):
    """ladder_bench.json and torch_sdpa.json of an fp8-family run in @p folder: rung 13 at twice rung
    10's TFLOP/s, cuDNN at 1.5 x rung 10's, at head_dim 64, 128, 256, causal 0/1, seqlen 1k and 4k."""
    ladder, torch = [], []
    for d in FP8_DIMS:
        for c in (0, 1):
            for n in (1024, 4096):
                shape = dict(batch=16384 // n, seqlen_q=n, seqlen_k=n, heads_q=2048 // d, heads_kv=2048 // d,
                             head_dim=d, causal=c, page_size=0)
                tail = "fp8/d%d/N%d/causal%d" % (d, n, c)
                ladder.append(gbench("13_fp8/" + tail, 1.0, 600.0, rung=13, quantize_ms=0.25, e2e_rel_fro=0.02,
                                     **shape))
                ladder.append(gbench("10_warp_specialized/" + tail, 2.0, 300.0, rung=10, **shape))
                torch.append(gbench("torch_cudnn/" + tail, 4.0 / 3, 450.0, family="fp8", rung="torch_cudnn", **shape))
                torch.append(gbench("torch_flash/" + tail, 2.5, 240.0, family="fp8", rung="torch_flash", **shape))
    ctx = {"device": "Fake H100", "arch": "sm_90", "sms": "132", "date": "2026-12-01T10:00:00+00:00",
           "git_sha": "fp8abcd", "peak_tensor_tflops": 1000.0}
    with open(os.path.join(folder, "ladder_bench.json"), "w", encoding="utf-8") as f:
        json.dump({"context": ctx, "benchmarks": ladder}, f)
    with open(os.path.join(folder, "torch_sdpa.json"), "w", encoding="utf-8") as f:
        json.dump({"context": {"device": "Fake H100", "torch": "2.11.0"}, "benchmarks": torch}, f)


# A stub 13_fp8: writes the run report bench/run_fp8.sh asks for (the end-to-end error depends on the
# mode: the rotation divides the outlier input's error by 4), fails the check of per-tensor scales on
# the outlier input (exit 1, report written), exits 77 when FAKE_FP8_NO_GPU is set.
STUB_13_FP8 = r'''#!%s
import json, os, sys
a = sys.argv[1:]
get = lambda flag, default=None: a[a.index(flag) + 1] if flag in a else default
if os.environ.get("FAKE_FP8_NO_GPU"):
    sys.exit(77)
d, inp, variant = int(get("--dim")), get("--input", "random"), get("--variant", "")
mode = ("per-head" if get("--fp8-scale", "head") == "head" else "per-tensor") + ("+hadamard" if "--hadamard" in a else "")
e2e = {"per-tensor": 0.04, "per-head": 0.02, "per-tensor+hadamard": 0.015, "per-head+hadamard": 0.01}[mode]
if inp == "outlier" and "hadamard" not in mode:
    e2e *= 2
if variant:
    e2e *= 3
ok = not (inp == "outlier" and mode == "per-tensor")
n = int(get("--seqlen"))
summary = "ablation: P cast to e4m3 as it is" if variant else "P scaled before its cast"
json.dump({"schema": "flashladder.run/1", "rung": {"number": 13, "name": "fp8", "variant": variant, "summary": summary},
           "device": {"name": "Fake H100"}, "date": "2026-12-02T10:00:00Z", "git_sha": "acc1234", "input": inp,
           "problem": {"batch": int(get("--batch")), "seqlen_q": n, "seqlen_k": n, "heads_q": int(get("--heads")),
                       "heads_kv": int(get("--heads")), "head_dim": d, "dtype": get("--dtype"),
                       "causal": int(get("--causal"))},
           "check": {"pass": ok, "checked": True, "mode": get("--check"), "rows": 64, "rel_fro": e2e / 4,
                     "max_abs": e2e},
           "fp8": {"mode": mode, "e2e_rel_fro": e2e, "e2e_max_abs": 2 * e2e, "e2e_lse_max_abs": 0.001,
                   "quantize_ms": 0.05}}, open(get("--json"), "w"))
print("13_fp8 (stub):", inp, mode, d, variant or "-")
sys.exit(0 if ok else 1)
'''

# A stub ladder_bench: writes the fp8 family's sweep (fp8_sweep) where --benchmark_out says.
STUB_LADDER_BENCH = r'''#!%s
import os, shutil, sys
out = next(x.split("=", 1)[1] for x in sys.argv[1:] if x.startswith("--benchmark_out="))
if "--fl_family=fp8" not in sys.argv[1:]:
    sys.exit("ladder_bench (stub): expected --fl_family=fp8, got %%s" %% sys.argv[1:])
shutil.copy(os.path.join(os.path.dirname(os.path.abspath(__file__)), "sweep.json"), out)
'''


def stub_bin(folder, ladder=False):
    """A bin folder with the stub 13_fp8 (and with @p ladder, the stub ladder_bench)."""
    os.makedirs(folder, exist_ok=True)
    stubs = [("13_fp8", STUB_13_FP8)] + ([("ladder_bench", STUB_LADDER_BENCH)] if ladder else [])
    for name, text in stubs:
        path = os.path.join(folder, name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text % sys.executable)
        os.chmod(path, 0o755)
    if ladder:
        fp8_sweep(folder)
        os.replace(os.path.join(folder, "ladder_bench.json"), os.path.join(folder, "sweep.json"))
        os.unlink(os.path.join(folder, "torch_sdpa.json"))
    return folder


def run_fp8(*args, env=None):
    out = subprocess.run(["bash", os.path.join(ROOT, "bench", "run_fp8.sh"), *args], capture_output=True,
                         text=True, env=dict(os.environ, **(env or {})))
    return out.returncode, out.stdout + out.stderr


def results_name(folder):
    """@p folder as a block's gpu= names it (relative to bench/results/)."""
    return os.path.relpath(folder, os.path.join(ROOT, "bench", "results"))


class Fp8Test(unittest.TestCase):
    """Rung 13's bench side on synthetic runs."""

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="fl-fp8-test-")
        self.addCleanup(shutil.rmtree, self.tmp)

    def write_doc(self, doc):
        return DocgenTest.write_doc(self, doc)

    def test_report_groups_fp8_like_prefill(self):
        sys.path.insert(0, os.path.join(ROOT, "bench"))
        import report
        import report_tables
        import results_io

        fp8_sweep(self.tmp)
        ladder, torch = (os.path.join(self.tmp, n) for n in ("ladder_bench.json", "torch_sdpa.json"))
        recs = [r for r in results_io.load_records(ladder) if r["rung"] == "13_fp8"]
        self.assertEqual(len(recs), 12)
        self.assertEqual({(r["family"], r["quantize_ms"], r["e2e_rel_fro"]) for r in recs}, {("fp8", 0.25, 0.02)})
        groups = report_tables.family_groups(results_io.load_records(ladder))
        self.assertEqual(sorted(groups), [("fp8", (d, c)) for d in FP8_DIMS for c in (0, 1)])
        registry = {"13_fp8": [{"kind": "rung", "label": "10_warp_specialized", "why": "the rung it changes"}]}
        text = report.full_report(ladder, torch, True, registry)
        self.assertIn("FP8 tensor 2000 TFLOP/s (2 x 16-bit)", text)
        for d in FP8_DIMS:
            self.assertIn("## FP8, head_dim %d, not causal" % d, text)
            self.assertIn("## FP8, head_dim %d, causal" % d, text)
        section = text.split("## FP8, head_dim 128, causal\n")[1].split("\n## ")[0]
        self.assertIn("| rung | N=1k | N=4k |", section)
        self.assertIn("| `13_fp8` | 600 | 600 |", section)
        self.assertIn("| `10_warp_specialized` | 300 | 300 |", section)
        self.assertIn("| `torch_cudnn` | 450 | 450 |", section)
        self.assertIn("| `13_fp8` vs `10_warp_specialized` | 2.00× | 2.00× |", section)
        self.assertIn("Ratio to PyTorch SDPA cuDNN", section)
        self.assertIn("| `13_fp8` | 1.33× | 1.33× |", section)

    def test_report_decode_fp8(self):
        # The decode-fp8 family's sections (the committed run): pages as series beside each rung,
        # and the e4m3 / 16-bit ratio per page size.
        sys.path.insert(0, os.path.join(ROOT, "bench"))
        import report

        ladder = os.path.join(ROOT, "bench", "results", "nvidia-h200", "checks-2026-11-29i", "inregister-9921bd4",
                              "decode-fp8-bf16", "ladder_bench.json")
        if not os.path.exists(ladder):
            self.skipTest("no committed decode-fp8 run")
        text = report.full_report(ladder, None, True, {})
        section = text.split("## FP8 KV cache, batch 8, 8 KV heads\n")[1].split("\n## ")[0]
        self.assertIn("| `08_flash_decoding P=64` |", section)
        self.assertIn("| `08_flash_decoding[fp8-kv] P=0` |", section)
        ratios = section.split("**e4m3 / 16-bit**")[1]
        self.assertIn("| `08_flash_decoding[fp8-kv] P=0` | 1.40× | 1.60× | 1.82× | 1.87× |", ratios)
        self.assertNotIn("| `08_flash_decoding P=0` |", ratios)  # the 16-bit rows are the denominators

    def test_fp8_blocks(self):
        fp8_sweep(self.tmp)
        rc, out = run_fp8(stub_bin(os.path.join(self.tmp, "bin")), self.tmp)
        self.assertEqual(rc, 0, out)
        gpu = results_name(self.tmp)
        doc = "".join("<!-- gen:%s gpu=%s -->\n<!-- /gen:%s -->\n\n" % (g, gpu, g)
                      for g in ("fp8-speed", "fp8-accuracy", "fp8-p-scaling"))
        written = self.write_doc(doc)
        rows = [l for l in written.splitlines() if l.startswith("| ")]
        # Speed: rung 13, % of the FP8 peak (2 x 1000), rung 10, cuDNN, the ratios, the quantization.
        self.assertIn("| 128 | yes | 4k | 600 | 30.0 % | 300 | 450 | 2.00× | 1.33× | 0.250 ms (25 %) |", rows)
        self.assertIn("| 256 | no | 1k | 600 | 30.0 % | 300 | 450 | 2.00× | 1.33× | 0.250 ms (25 %) |", rows)
        self.assertEqual(len([r for r in rows if re.match(r"\| (64|128|256) \| (yes|no) \|", r)]), 12)
        self.assertIn("Fake H100, 2026-12-01, commit `fp8abcd`", written)
        self.assertIn("PyTorch 2.11.0", written)
        # Accuracy: kernel and end-to-end error per input x mode x head_dim; a failed check is marked.
        self.assertIn("| random | per-head | 5.00e-03 | 2.00e-02 | 5.00e-03 | 2.00e-02 | 5.00e-03 | 2.00e-02 |", rows)
        self.assertIn("| outlier | per-tensor | 2.00e-02 (fail) | 8.00e-02 (fail) |", "\n".join(rows))
        self.assertIn("| outlier | per-head+hadamard | 2.50e-03 | 1.00e-02 |", "\n".join(rows))
        self.assertIn("with the Hadamard rotation / without (per-head scales): d=64 0.25, d=128 0.25, d=256 0.25 "
                      "(target ≤ 0.5: met at every head_dim)", written)
        self.assertIn("Fake H100, 2026-12-02, commit `acc1234`", written)
        # P scaling: the rung against p-unscaled, kernel and end to end, with the ratio.
        self.assertIn("| random | 128 | 5.00e-03 | 1.50e-02 | 3.00 | 2.00e-02 | 6.00e-02 | 3.00 |", rows)
        self.assertIn("| outlier | 128 | 1.00e-02 | 3.00e-02 | 3.00 | 4.00e-02 | 1.20e-01 | 3.00 |", rows)
        self.assertIn("`13_fp8[p-unscaled]`: ablation: P cast to e4m3 as it is", written)
        self.assertNotIn("Not in a committed run yet", written)

    def test_fp8_blocks_without_a_run(self):
        # No such folder, and a folder without the fp8 family or accuracy runs: said, no figure.
        for gpu in ("nvidia-h200/no-such-fp8-run", "nvidia-h200"):
            doc = "".join("<!-- gen:%s gpu=%s -->\n<!-- /gen:%s -->\n" % (g, gpu, g)
                          for g in ("fp8-speed", "fp8-accuracy", "fp8-p-scaling"))
            written = self.write_doc(doc)
            self.assertEqual(written.count("Not in a committed run yet"), 3, written)
            self.assertIn("bench/run_all.sh --family fp8", written)
            self.assertIn("bench/run_fp8.sh", written)
            self.assertIsNone(re.search(r"\d+\.\d+", written), written)

    def test_run_fp8_arguments_and_exit_codes(self):
        bin_dir = stub_bin(os.path.join(self.tmp, "build", "bin"))
        out = os.path.join(self.tmp, "out")
        rc, text = run_fp8(os.path.dirname(bin_dir), out, "--quick", "--check", "full", "--iters", "3")
        self.assertEqual(rc, 0, text)  # the failed checks (per-tensor on the outlier input) are not fatal
        with open(os.path.join(out, "fp8_accuracy", "runs.json"), encoding="utf-8") as f:
            runs = json.load(f)
        self.assertEqual(runs["check"], "full")
        self.assertEqual(len(runs["runs"]), 11)  # --quick: 2 inputs x 4 modes at d=128, p-unscaled on both, fast-accum
        self.assertEqual({r["file"]: r["exit"] for r in runs["runs"]}["outlier_per-tensor_d128.json"], 1)
        self.assertEqual(sum(r["exit"] for r in runs["runs"]), 1)
        files = sorted(os.listdir(os.path.join(out, "fp8_accuracy")))
        self.assertEqual(len(files), 12, files)  # every run's report (the failed check's too) and runs.json
        first = runs["runs"][0]["command"]
        self.assertEqual(first, "<build>/bin/13_fp8 --batch 4 --seqlen 4096 --heads 16 --dim 128 --dtype fp16 "
                                "--causal 0 --input random --fp8-scale tensor --check full --iters 3 --no-compare "
                                "--json <out>/fp8_accuracy/random_per-tensor_d128.json")
        self.assertIn("--fp8-scale head --hadamard", runs["runs"][3]["command"])
        self.assertIn("--variant p-unscaled", runs["runs"][4]["command"])
        self.assertNotIn(self.tmp, json.dumps(runs))  # no path of this machine
        self.assertIn("1 failed it", text)
        # --record-as names the folder the files end up in.
        rc, text = run_fp8(bin_dir, out, "--quick", "--record-as", "bench/results/some-gpu/fp8")
        self.assertEqual(rc, 0, text)
        with open(os.path.join(out, "fp8_accuracy", "runs.json"), encoding="utf-8") as f:
            self.assertIn("--json bench/results/some-gpu/fp8/fp8_accuracy/", json.load(f)["runs"][0]["command"])
        # No GPU: 77 at once. Bad arguments, no 13_fp8: 2.
        rc, text = run_fp8(bin_dir, out, env={"FAKE_FP8_NO_GPU": "1"})
        self.assertEqual(rc, 77, text)
        self.assertIn("no usable CUDA device", text)
        self.assertEqual(run_fp8(bin_dir, out, "--check", "some")[0], 2)
        self.assertEqual(run_fp8(bin_dir, out, "--iters", "0")[0], 2)
        self.assertEqual(run_fp8(bin_dir)[0], 2)
        rc, text = run_fp8(self.tmp, out)
        self.assertEqual(rc, 2, text)
        self.assertIn("no 13_fp8", text)

    def test_run_all_family_fp8(self):
        # bench/run_all.sh BIN --family fp8: the sweep and the accuracy runs land in one results folder.
        bin_dir = stub_bin(os.path.join(self.tmp, "bin"), ladder=True)
        results = os.path.join(self.tmp, "results")
        out = subprocess.run(["bash", os.path.join(ROOT, "bench", "run_all.sh"), bin_dir, "--family", "fp8",
                              "--no-torch", "--quick", "--results", results], capture_output=True, text=True,
                             env=dict(os.environ, TMPDIR=self.tmp))
        self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
        names = os.listdir(results)
        for want in ("ladder_bench.json", "report.md", "meta.json", "fp8_accuracy", "fp8_accuracy.log", "run_fp8.log"):
            self.assertIn(want, names)
        self.assertEqual(len(glob.glob(os.path.join(results, "fp8_accuracy", "*_d128*.json"))), 11)
        with open(os.path.join(results, "meta.json"), encoding="utf-8") as f:
            meta = json.load(f)
        self.assertEqual(meta["family"], "fp8")
        self.assertTrue(any("bench/run_fp8.sh" in c and "--quick" in c for c in meta["commands"]), meta["commands"])
        with open(os.path.join(results, "fp8_accuracy", "runs.json"), encoding="utf-8") as f:
            runs = json.load(f)
        self.assertTrue(all("--json <part>/fp8_accuracy/" in r["command"] for r in runs["runs"]), runs)
        self.assertNotIn(self.tmp, json.dumps(meta) + json.dumps(runs))
        with open(os.path.join(results, "report.md"), encoding="utf-8") as f:
            self.assertIn("## FP8, head_dim 128, causal", f.read())


def synthetic_torch_train():
    """What bench/pytorch/torch_train.py writes, with made-up figures (only what the generator reads)."""
    run = lambda name, impl, ms, loss: {  # noqa: E731
        "name": name, "attn_implementation": impl, "step_ms_mean": ms, "tokens_per_s": 8192 / ms * 1e3,
        "final_heldout": loss, "loss": [2.0, 1.5], "heldout": [[0, 5.5], [300, loss]]}
    return {
        "device": {"name": "NVIDIA H100 80GB HBM3"}, "date": "2026-11-24T10:00:00+00:00", "git_sha": "abc1234",
        "versions": {"torch": "2.11.0", "transformers": "5.17.0"},
        "ladder": {"forward_rung": "10_warp_specialized", "backward_rung": "11_backward"},
        "config": {"model": {"parameters": 271e6, "layers": 6, "hidden": 2048, "heads_q": 16, "heads_kv": 4,
                             "head_dim": 128, "intermediate": 5632},
                   "precision": "bf16 weights, activations and gradients; fp32 master weights and AdamW state",
                   "batch": 2, "seqlen": 4096, "steps": 300, "timing_skip": 10},
        "data": {"source": "the *.py files of Python 3.11.7's standard library (sysconfig 'stdlib')", "files": 1790,
                 "bytes": 31525224},
        "logits_check": {"input": "the first held-out batch, 2 x 4096 tokens", "dtype": "bf16",
                         "ladder_vs_sdpa_flash": {"max_abs": 0.05, "rel_fro": 0.01},
                         "ladder_vs_fp32": {"rel_fro": 0.022}, "sdpa_flash_vs_fp32": {"rel_fro": 0.02},
                         "error_ratio": 1.1, "tolerance_ratio": 2.0, "ladder_attention_calls": 6, "layers": 6,
                         "pass": True},
        "runs": [run("sdpa_flash", "sdpa", 100.0, 1.51), run("sdpa_cudnn", "sdpa", 90.25, 1.512),
                 run("ladder", "ladder", 95.0, 1.52), run("sdpa_flash_rerun", "sdpa", 100.5, 1.514)],
        "summary": {"final_heldout_gap": 0.01, "rerun_final_heldout_gap": 0.004, "loss_tolerance": 0.0302,
                    "loss_match": True, "cudnn_final_heldout_gap": 0.008, "loss_match_cudnn": True,
                    "attention_share_sdpa_flash": 0.2, "attention_share_sdpa_cudnn": 0.16,
                    "attention_share_ladder": 0.18}}


def synthetic_torch_overhead():
    """What bench/pytorch/torch_overhead.py writes, with made-up figures."""
    return {
        "device": {"name": "NVIDIA H100 80GB HBM3"}, "date": "2026-11-24T10:00:00+00:00", "git_sha": "abc1234",
        "versions": {"torch": "2.11.0"}, "target_us": 5.0, "iters": 200, "repeats": 3,
        "shape": {"batch": 16, "seqlen": 1024, "heads": 16, "head_dim": 128, "dtype": "fp16"},
        "rungs": [{"requested": "default", "label": "10_warp_specialized",
                   "median_ms": {"runner": 0.061, "python": 0.0622, "python_idle": 0.075, "binding_idle": 0.066},
                   "diff_us": 1.2, "idle_diff_us": 14.0, "python_layer_idle_us": 9.0},
                  {"requested": 6, "label": "06_headdim_tiles",
                   "median_ms": {"runner": 0.1, "python": 0.1005, "python_idle": 0.11, "binding_idle": 0.104},
                   "diff_us": 0.5, "idle_diff_us": 10.0, "python_layer_idle_us": 6.0}],
        "host": {"shape": {"batch": 1, "seqlen": 128, "heads": 16, "head_dim": 128}, "kernel_us": 6.0,
                 "per_call_us": {"flashladder.attention": 18.0}}}


def partial_build():
    """The committed ladder entries this build does not register ([] for a full build)."""
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    import results_io

    registry = results_io.registry_from_tour(os.path.join(BIN, "tour"))[1]
    missing = set()
    for path in sorted(glob.glob(os.path.join(ROOT, "bench", "results", "*", "ladder_bench.json"))):
        missing |= {r["rung"] for r in results_io.load_records(path) if r["source"] == "ladder"} - set(registry)
    return sorted(missing)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: test_docgen.py BUILD/bin")
    BIN = sys.argv.pop(1)
    missing = partial_build()
    if missing:
        print("test_docgen.py: skipped: this build does not register %d committed entries (%s ...); "
              "a partial build cannot regenerate the committed reports" % (len(missing), ", ".join(missing[:3])))
        sys.exit(77)
    unittest.main(verbosity=2)
