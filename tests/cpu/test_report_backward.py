#!/usr/bin/env python3
"""bench/report.py's backward family on tiny synthetic runs (no GPU, no build needed).

    python3 tests/cpu/test_report_backward.py      (ctest: cpu_report_backward)

1. ladder_bench's backward records ("11_backward/backward/d128/N4096/causal1[/det]") and
   torch_sdpa.py's ("torch_flash/backward/...") are read with their shape and deterministic flag.
2. The report has one backward section per (head_dim, causal): TFLOP/s of the rung (atomic and
   deterministic) and of PyTorch, the ratios to PyTorch flash and cuDNN, and the deterministic cost.
3. A run without backward records has no backward section; the README summary table shows a
   backward-only rung in a backward column of its own, against PyTorch's backward, and no forward
   figure for it.
4. bench/docgen.py's backward-table generator (bench/docblocks/backward.py) reads the same records,
   and says what to run when a results folder has none.
5. The masks families ("16_x/masks/d128/window4096/N8192", bench/pytorch/torch_flex.py's
   "torch_flex/masks/..." read from the torch_flex.json beside the ladder's JSON): one table per
   family, a column per (case, seqlen) in ladder_bench's order, the ratios to FlexAttention and to
   the declared baseline, and the window / causal time.
"""

import json
import os
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from docblocks import core  # noqa: E402  bench/docblocks/: the package behind bench/docgen.py
import report  # noqa: E402
import results_io  # noqa: E402


def bench(name, ms, tflops, **counters):
    b = {"name": name + "/iterations:1/manual_time", "run_name": name, "run_type": "iteration",
         "iterations": 1, "real_time": ms, "time_unit": "ms", "median_ms": ms, "TFLOPS": tflops, "GB/s": 1.0}
    b.update(counters)
    return b


def shape(n, d, causal, **extra):
    out = dict(batch=16384 // n, seqlen_q=n, seqlen_k=n, heads_q=2048 // d, heads_kv=2048 // d, head_dim=d,
               causal=causal, page_size=0)
    out.update(extra)
    return out


class Files:
    """Writes the given benchmark lists as ladder_bench / torch_sdpa JSON files in a temp folder."""

    def __init__(self, ladder, torch=None, skips=None):
        self.dir = tempfile.mkdtemp(prefix="report-bwd-")
        ctx = {"device": "Fake GPU", "arch": "sm_90", "sms": "132", "date": "2026-11-23", "git_sha": "abc"}
        ctx.update({"skip: " + k: v for k, v in (skips or {}).items()})
        self.ladder = os.path.join(self.dir, "ladder_bench.json")
        with open(self.ladder, "w") as f:
            json.dump({"context": ctx, "benchmarks": ladder}, f)
        self.torch = None
        if torch is not None:
            self.torch = os.path.join(self.dir, "torch_sdpa.json")
            with open(self.torch, "w") as f:
                json.dump({"context": {"device": "Fake GPU", "torch": "2.9"}, "benchmarks": torch}, f)

    def cleanup(self):
        for name in os.listdir(self.dir):
            os.unlink(os.path.join(self.dir, name))
        os.rmdir(self.dir)


def backward_run():
    ladder, torch = [], []
    for d in (64, 128):
        for causal in (0, 1):
            for n in (1024, 4096):
                base = "backward/d%d/N%d/causal%d" % (d, n, causal)
                ladder.append(bench("11_backward/" + base, 2.0, 100.0, rung=11, deterministic=0, **shape(n, d, causal)))
                ladder.append(bench("11_backward/" + base + "/det", 2.5, 80.0, rung=11, deterministic=1,
                                    **shape(n, d, causal)))
                torch.append(bench("torch_flash/" + base, 3.0, 66.7, family="backward", rung="torch_flash",
                                   **shape(n, d, causal)))
                torch.append(bench("torch_cudnn/" + base, 1.0, 200.0, family="backward", rung="torch_cudnn",
                                   **shape(n, d, causal)))
    # One forward rung on prefill, so the summary table has something to show.
    ladder.append(bench("06_headdim_tiles/prefill/d128/N4096/causal0", 1.0, 300.0, rung=6, **shape(4096, 128, 0)))
    return ladder, torch


class ReportBackwardTest(unittest.TestCase):
    def setUp(self):
        ladder, torch = backward_run()
        self.files = Files(ladder, torch, skips={"11_backward/backward/d128/N16384/causal0/det": "needs 99 GiB"})

    def tearDown(self):
        self.files.cleanup()

    def test_records(self):
        recs = [r for r in results_io.load_records(self.files.ladder) if r["family"] == "backward"]
        self.assertEqual(len(recs), 16)
        det = [r for r in recs if r["deterministic"]]
        self.assertEqual(len(det), 8)
        r = det[0]
        self.assertEqual((r["rung"], r["number"], r["variant"], r["source"]), ("11_backward", 11, "", "ladder"))
        self.assertEqual((r["head_dim"], r["seqlen_q"], r["causal"]), (64, 1024, 0))
        torch = results_io.load_records(self.files.torch)
        self.assertTrue(all(t["family"] == "backward" and t["source"] == "torch" for t in torch))
        # Without the counter, "/det" in the name says it.
        doc = {"benchmarks": [{"name": "11_backward/backward/d64/N1024/causal1/det/iterations:1/manual_time",
                               "run_type": "iteration", "real_time": 1.0, "time_unit": "ms"}]}
        path = os.path.join(self.files.dir, "named.json")
        with open(path, "w") as f:
            json.dump(doc, f)
        (r,) = results_io.load_records(path)
        self.assertEqual((r["family"], r["deterministic"], r["head_dim"], r["seqlen_q"], r["causal"]),
                         ("backward", 1, 64, 1024, 1))

    def test_sections(self):
        md = report.full_report(self.files.ladder, self.files.torch, False, registry={})
        for d in (64, 128):
            for causal in ("not causal", "causal"):
                self.assertIn("## Backward, head_dim %d, %s\n" % (d, causal), md)
        sec = md[md.index("## Backward, head_dim 128, causal\n"):]
        sec = sec[: sec.index("\n## ")] if "\n## " in sec else sec
        self.assertIn("2.5 x the forward's FLOPs", sec)
        self.assertIn("| rung | N=1k | N=4k |", sec)
        self.assertIn("| `11_backward` | 100 | 100 |", sec)
        self.assertIn("| `11_backward` deterministic | 80.0 | 80.0 |", sec)
        self.assertIn("| `torch_flash` | 66.7 | 66.7 |", sec)
        self.assertIn("| `torch_cudnn` | 200 | 200 |", sec)
        # Ratios: time of PyTorch / time of the rung.
        flash = sec[sec.index("**Ratio to PyTorch SDPA flash backward**"):]
        self.assertIn("| `11_backward` | 1.50× | 1.50× |", flash)
        self.assertIn("| `11_backward` deterministic | 1.20× | 1.20× |", flash)
        cudnn = sec[sec.index("**Ratio to PyTorch SDPA cuDNN backward**"):]
        self.assertIn("| `11_backward` | 0.50× | 0.50× |", cudnn)
        det = sec[sec.index("**Deterministic dQ / atomic dQ**"):]
        self.assertIn("| `11_backward` | 0.80× | 0.80× |", det)
        # The skipped pair is listed with its reason.
        self.assertIn("- `11_backward`: needs 99 GiB (1 shape, e.g. `backward/d128/N16384/causal0/det`)", md)
        # The prefill section of the forward rung is unaffected, and lists no backward rung.
        pre = md[md.index("## Prefill, head_dim 128, not causal"):md.index("## Backward")]
        self.assertIn("`06_headdim_tiles`", pre)
        self.assertNotIn("11_backward", pre)

    def test_summary_has_a_backward_column(self):
        table = report.summary_table(self.files.ladder, self.files.torch, registry={})
        self.assertIn("| rung | compared with | prefill TFLOP/s | causal TFLOP/s | decode GB/s | backward TFLOP/s |", table)
        # The forward rung has no backward figure; the backward rung no forward one. Its ratios are
        # on the backward shape (d=128, 4k, not causal, atomic dQ): PyTorch's time / the rung's.
        self.assertIn("| `06_headdim_tiles` |  | 300 | — | — | — |", table)
        self.assertIn("| `11_backward` | PyTorch's backward | — | — | — | 100 | — | 1.50× | 0.50× |", table)
        self.assertIn("| `torch_cudnn` |  | — | — | — | 200 |", table)
        self.assertIn("Backward: the prefill shape, not causal, not deterministic (dQ summed in any order)", table)

    def test_summary_fp8_row(self):
        # An FP8 rung (measured in the fp8 family alone) gets a row on the fp8 shape, its speedup
        # over its declared 16-bit baseline and PyTorch's ratios from that family's records.
        ladder, torch = backward_run()
        for c in (0, 1):
            base = "fp8/d128/N4096/causal%d" % c
            ladder.append(bench("13_fp8/" + base, 0.5, 900.0, rung=13, **shape(4096, 128, c)))
            ladder.append(bench("10_warp_specialized/" + base, 1.0, 600.0, rung=10, **shape(4096, 128, c)))
            torch.append(bench("torch_cudnn/" + base, 1.5, 500.0, family="fp8", rung="torch_cudnn", **shape(4096, 128, c)))
        files = Files(ladder, torch)
        try:
            reg = {"13_fp8": [{"kind": "rung", "label": "10_warp_specialized", "why": "16-bit"}]}
            table = report.summary_table(files.ladder, files.torch, registry=reg)
            self.assertIn("| `13_fp8` | `10_warp_specialized` | 900 | 900 | — | — | 2.00× | — | 3.00× |", table)
            self.assertIn("FP8: the prefill shape on e4m3 Q, K, V", table)
            self.assertNotIn("\n| `10_warp_specialized` |", table)  # in the fp8 family only as a baseline: no row
        finally:
            files.cleanup()

    def test_summary_without_backward_has_no_backward_column(self):
        ladder, torch = backward_run()
        files = Files([b for b in ladder if "/backward/" not in b["name"]])
        try:
            table = report.summary_table(files.ladder, None, registry={})
            self.assertNotIn("backward", table)
            self.assertIn("`06_headdim_tiles`", table)
        finally:
            files.cleanup()

    def test_no_backward_records_no_section(self):
        ladder, _ = backward_run()
        files = Files([b for b in ladder if "/backward/" not in b["name"]])
        try:
            md = report.full_report(files.ladder, None, False, registry={})
            self.assertNotIn("Backward", md)
            self.assertIn("## Prefill, head_dim 128, not causal", md)
        finally:
            files.cleanup()


def masks_run():
    """A rung with masks on every case, rung 15 on the causal cells, FlexAttention everywhere but
    sinks (skipped), SDPA cuDNN on the causal cells."""
    ladder, flex = [], []
    cases = [("causal", 8192), ("causal", 32768), ("window4096", 8192), ("window4096", 32768), ("docs", 32768),
             ("prefix2048", 8192), ("softcap50", 8192), ("alibi", 8192), ("sinks", 8192)]
    for case, n in cases:
        base = "masks/d128/%s/N%d" % (case, n)
        fields = dict(batch=32768 // n, seqlen_q=n, seqlen_k=n, heads_q=16, heads_kv=16, head_dim=128, causal=1,
                      page_size=0)
        ms = 1.2 if case == "window4096" and n == 8192 else 1.0
        ladder.append(bench("16_masks/" + base, ms, 400.0, rung=16, **fields))
        if case == "causal":
            ladder.append(bench("15_persistent/" + base, 0.9, 440.0, rung=15, **fields))
            flex.append(bench("torch_cudnn/" + base, 0.8, 500.0, family="masks", rung="torch_cudnn", case=case,
                              **fields))
        f = bench("torch_flex/" + base, 2.0, 200.0, family="masks", rung="torch_flex", case=case, **fields)
        if case == "sinks":
            f.update(skipped="no FlexAttention counterpart", error_occurred=True)
        flex.append(f)
    return ladder, flex


class ReportMasksTest(unittest.TestCase):
    def setUp(self):
        ladder, flex = masks_run()
        self.files = Files(ladder)
        with open(os.path.join(self.files.dir, "torch_flex.json"), "w") as f:  # found beside the ladder's
            json.dump({"context": {"device": "Fake GPU", "torch": "2.11"}, "benchmarks": flex}, f)

    def tearDown(self):
        self.files.cleanup()

    def test_records(self):
        recs = results_io.load_records(self.files.ladder)
        self.assertEqual(len(recs), 11)
        self.assertEqual([(r["case"], r["seqlen_q"]) for r in recs if r["rung"] == "15_persistent"],
                         [("causal", 8192), ("causal", 32768)])
        (r,) = [r for r in recs if r["case"] == "window4096" and r["seqlen_q"] == 8192]
        self.assertEqual((r["family"], r["rung"], r["ms"]), ("masks", "16_masks", 1.2))

    def test_section(self):
        reg = {"16_masks": [{"kind": "rung", "label": "15_persistent", "why": "rung 15 with masks"}]}
        md = report.full_report(self.files.ladder, None, False, registry=reg)
        self.assertIn("and `torch_flex.json`", md)
        sec = md[md.index("## Masks and score modifiers, head_dim 128\n"):]
        self.assertIn("| rung | causal N=8k | causal N=32k | window4096 N=8k | window4096 N=32k | docs N=32k | "
                      "prefix2048 N=8k | softcap50 N=8k | alibi N=8k | sinks N=8k |", sec)
        self.assertIn("| `15_persistent` | 440 | 440 | — | — | — | — | — | — | — |", sec)
        self.assertIn("| `torch_flex` | 200 | 200 | 200 | 200 | 200 | 200 | 200 | 200 | skip |", sec)
        flex = sec[sec.index("**Ratio to PyTorch FlexAttention**"):]
        self.assertIn("| `16_masks` | 2.00× | 2.00× | 1.67× | 2.00× | 2.00× | 2.00× | 2.00× | 2.00× | — |", flex)
        base = sec[sec.index("**Speedup over the declared baseline**"):]
        self.assertIn("| `16_masks` vs `15_persistent` | 0.90× | 0.90× | — |", base)
        cudnn = sec[sec.index("**Ratio to PyTorch SDPA cuDNN**"):]
        self.assertIn("| `16_masks` | 0.80× | 0.80× | — |", cudnn)
        window = sec[sec.index("**Window / causal**"):]
        self.assertIn("| rung | window4096 / causal, N=8k | window4096 / causal, N=32k |", window)
        self.assertIn("| `16_masks` | 1.20× | 1.00× |", window)
        self.assertIn("| `torch_flex` | 1.00× | 1.00× |", window)
        self.assertNotIn("masks-backward", md)  # no records, no section


class DocgenBackwardTableTest(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="docgen-bwd-")
        self.saved = core.ROOT, core.CURRENT_DIR[0]
        core.ROOT = core.CURRENT_DIR[0] = self.root  # results under <tmp>/bench/results/<gpu>/
        ladder, torch = backward_run()
        for gpu, benches in (("fake-gpu", (ladder, torch)), ("no-backward", ([ladder[-1]], []))):
            folder = os.path.join(self.root, "bench", "results", gpu)
            os.makedirs(folder)
            for name, b in zip(("ladder_bench.json", "torch_sdpa.json"), benches):
                with open(os.path.join(folder, name), "w") as f:
                    json.dump({"context": {"device": "Fake GPU", "date": "2026-11-23", "git_sha": "abc", "torch": "2.9"},
                               "benchmarks": b}, f)
        info = {"06_headdim_tiles": {"number": 6, "variant": ""}, "11_backward": {"number": 11, "variant": ""}}
        self.ctx = core.Context({}, info)

    def tearDown(self):
        core.ROOT, core.CURRENT_DIR[0] = self.saved
        for dirpath, _, files in os.walk(self.root, topdown=False):
            for name in files:
                os.unlink(os.path.join(dirpath, name))
            os.rmdir(dirpath)

    def test_table(self):
        md = core.GENERATORS["backward-table"](self.ctx, gpu="fake-gpu", d="128", n="1024,4096", causal="1")
        self.assertIn("| head_dim | seqlen | causal | `11_backward` ms | TFLOP/s | deterministic TFLOP/s |", md)
        self.assertIn("| 128 | 4k | yes | 2.000 | 100 | 80.0 | 3.000 | 1.50× | 1.000 | 0.50× |", md)
        self.assertIn("backward pass only", md)

    def test_missing(self):
        with self.assertRaises(core.Missing) as e:
            core.GENERATORS["backward-table"](self.ctx, gpu="no-backward")
        self.assertEqual(e.exception.command, "bench/run_all.sh --family backward")


if __name__ == "__main__":
    unittest.main(verbosity=2)
