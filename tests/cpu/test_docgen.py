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

The baselines come from the build's registry, so a partial build (-DFL_RUNGS, -DFL_HEAD_DIM,
-DFL_DTYPE: some committed entries are not registered) cannot regenerate the committed reports:
the test then exits 77 (ctest: skipped) and says so. CI builds everything.
"""

import glob
import json
import os
import re
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

    def test_committed_tree_is_generated(self):
        rc, out = docgen("--check")
        self.assertEqual(rc, 0, out)

    def test_hand_edited_figure_fails(self):
        with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
            text = f.read()
        m = re.search(r"<!-- gen:readme-summary -->\n(.*?)<!-- /gen:readme-summary -->", text, re.S)
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

    def test_torch_blocks(self):
        # torch-train and torch-overhead (bench/torch_train.py, bench/torch_overhead.py) from
        # synthetic runs in a temp folder, named relative to bench/results/ as gpu= names a run.
        with tempfile.TemporaryDirectory() as run:
            for name, data in (("torch_train.json", synthetic_torch_train()),
                               ("torch_overhead.json", synthetic_torch_overhead())):
                with open(os.path.join(run, name), "w", encoding="utf-8") as f:
                    json.dump(data, f)
            gpu = os.path.relpath(run, os.path.join(ROOT, "bench", "results"))
            doc = ("<!-- gen:torch-train gpu=%s -->\n<!-- /gen:torch-train -->\n\n"
                   "<!-- gen:torch-overhead gpu=%s -->\n<!-- /gen:torch-overhead -->\n" % (gpu, gpu))
            written = self.write_doc(doc)
        rows = [l for l in written.splitlines() if l.startswith("| ")]
        self.assertIn("| the ladder | forward `10_warp_specialized`, backward `11_backward` (autograd) | 95.0 | 86k "
                      "| 1.520 | 1.05× |", rows)
        self.assertIn("| SDPA | flash backend forced (FlashAttention-2) | 100.0 | 82k | 1.510 | — |", rows)
        self.assertIn("(1.10×; pass at ≤ 2×, attention on the ladder in 6 of 6 layers): **pass**", written)
        self.assertIn("differ by 0.0100 (two SDPA flash runs: 0.0040), tolerance 0.0302: **match**", written)
        self.assertIn("SDPA flash 20 %, the ladder 18 %", written)
        self.assertIn("| `10_warp_specialized` (default) | 61.0 | 62.2 | +1.2 | +14.0 | +9.0 |", rows)
        self.assertIn("Target: within 5 µs per call: **met**", written)
        self.assertIn("NVIDIA H100 80GB HBM3, 2026-11-24, commit `abc1234`, PyTorch 2.11.0", written)
        # No run yet: the block says so and names the command, with no figure.
        doc = "<!-- gen:torch-train gpu=nvidia-h200/no-such-run -->\n<!-- /gen:torch-train -->\n"
        written = self.write_doc(doc)
        self.assertIn("Not in a committed run yet", written)
        self.assertIn("bench/torch_train.py", written)
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


def synthetic_torch_train():
    """What bench/torch_train.py writes, with made-up figures (only what the generator reads)."""
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
        "runs": [run("sdpa_flash", "sdpa", 100.0, 1.51), run("ladder", "ladder", 95.0, 1.52),
                 run("sdpa_flash_rerun", "sdpa", 100.5, 1.514)],
        "summary": {"final_heldout_gap": 0.01, "rerun_final_heldout_gap": 0.004, "loss_tolerance": 0.0302,
                    "loss_match": True, "attention_share_sdpa_flash": 0.2, "attention_share_ladder": 0.18}}


def synthetic_torch_overhead():
    """What bench/torch_overhead.py writes, with made-up figures."""
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
    import report

    registry = report.registry_from_tour(os.path.join(BIN, "tour"))[1]
    missing = set()
    for path in sorted(glob.glob(os.path.join(ROOT, "bench", "results", "*", "ladder_bench.json"))):
        missing |= {r["rung"] for r in report.load_records(path) if r["source"] == "ladder"} - set(registry)
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
