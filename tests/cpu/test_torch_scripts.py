#!/usr/bin/env python3
"""The PyTorch bench scripts' parts that need no GPU (ctest: cpu_torch_scripts).

    python3 tests/cpu/test_torch_scripts.py

1. bench/pytorch/torch_train.py's data (train_model.py): the standard library's *.py files in sorted order, every 20th
   held out, the same bytes on every call; batches drawn from a seeded generator (with PyTorch).
2. Its learning-rate schedule (linear warm-up, cosine to 10 %) and its summary on synthetic runs:
   the speedup over SDPA flash, the loss tolerance (the larger of 2 % and 3 x the SDPA rerun's gap).
3. bench/pytorch/torch_sdpa.py's mixed-length batch: the lengths common/'s mixed_lengths draws (the
   values tests/cpu/test_varlen.cpp checks), and the shapes of its varlen family.
4. Without PyTorch (or without a GPU for the full demo), the scripts (torch_overhead.py,
   torch_decode.py, torch_train.py, torch_flex.py) say so and exit 0, measuring nothing; a --quick run on the CPU writes torch_train.json where PyTorch and transformers exist.
5. bench/pytorch/torch_flex.py's masks families: the names, the document starts (pinned, and the same as
   `ladder_bench --fl_list` prints where a built ladder_bench is found: FL_LADDER_BENCH, else the
   newest build/*/bin/ladder_bench), ALiBi's slopes (the paper's recipe, as test_masks.cpp), and
   the unmasked pairs of each case against a count over the dense mask of a small copy; and
   torch_flex_steps.py's cases (16k tokens each, the windows narrower than the sequence, the
   documents packed, a step's FLOPs).
6. bench/pytorch/timing.py, the one timing module: its rounds in turn (each series once per round,
   the order rotated), the paired differences and the medians; and no script in bench/pytorch/
   makes its own CUDA events.
7. bench/pytorch/torch_bwd_profile.py: a pass's kernels get their roles (the longest is the main
   kernel, those before it pre, after it post) and the passes' medians per kernel and per role;
   --list needs no PyTorch; without a GPU it measures nothing.
8. bench/studies/fp8_bwd_error.py's emulated backward (with PyTorch): its 16-bit arithmetic within
   bf16's error of the fp64 backward, each FP8 GEMM's error in its own gradient only, and the
   scales floored so that a vanishing slice cannot make 0 / 0.
9. bench/pytorch/host_serving_ab.py: its child's program, the record among the child's output, the
   arguments it refuses; without a GPU it measures nothing.
"""

import glob
import json
import os
import subprocess
import sys
import tempfile
import types
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench", "pytorch"))
import timing  # noqa: E402  bench/pytorch/timing.py (imports no PyTorch)
import torch_bwd_profile  # noqa: E402  (imports no PyTorch at module level)
import torch_train  # noqa: E402  (imports no PyTorch at module level)
import train_model  # noqa: E402  bench/pytorch/train_model.py: torch_train.py's data, model, schedule


def have(module):
    try:
        __import__(module)
        return True
    except ImportError:
        return False


def run_script(*args):
    out = subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=ROOT)
    return out.returncode, out.stdout + out.stderr


class Data(unittest.TestCase):
    def test_corpus(self):
        train, held, desc = train_model.load_corpus()
        self.assertGreater(desc["files"], 100)
        self.assertEqual(len(train) + len(held), desc["bytes"])
        self.assertGreater(len(train), 10 * len(held))  # every 20th file held out
        self.assertGreater(len(held), 0)
        again = train_model.load_corpus()
        self.assertEqual(again[2]["sha256"], desc["sha256"])
        self.assertIn(b"def ", train[:200000])

    @unittest.skipUnless(have("torch"), "PyTorch is not installed")
    def test_batches(self):
        import torch

        args = types.SimpleNamespace(seqlen=16, batch=2, steps=3, seed=5, eval_batches=2)
        data = train_model.Batches(torch, bytes(range(256)) * 4, bytes(range(256)), args, torch.device("cpu"))
        x, y = data.step(1)
        self.assertEqual(tuple(x.shape), (2, 16))
        self.assertTrue(torch.equal(x[:, 1:], y[:, :-1]))  # y is x shifted by one byte
        again = train_model.Batches(torch, bytes(range(256)) * 4, bytes(range(256)), args, torch.device("cpu"))
        self.assertTrue(torch.equal(again.step(1)[0], x))  # the same order every run
        self.assertEqual(len(data.heldout()), 2)


class Schedule(unittest.TestCase):
    def test_lr(self):
        args = types.SimpleNamespace(lr=1.0, warmup=10, steps=110)
        self.assertAlmostEqual(train_model.lr_at(0, args), 0.1)
        self.assertAlmostEqual(train_model.lr_at(9, args), 1.0)
        self.assertAlmostEqual(train_model.lr_at(10, args), 1.0)
        self.assertAlmostEqual(train_model.lr_at(110, args), 0.1)
        self.assertTrue(all(train_model.lr_at(s, args) >= train_model.lr_at(s + 1, args) for s in range(10, 109)))

    def test_summary(self):
        def run(name, ms, losses, held):
            return {"name": name, "step_ms_mean": ms, "tokens_per_s": 8192 / ms * 1e3, "loss": losses,
                    "final_heldout": held}

        result = {"runs": [run("sdpa_flash", 100.0, [2.0] * 60, 1.50), run("ladder", 95.0, [2.01] * 60, 1.52),
                           run("sdpa_flash_rerun", 101.0, [2.0] * 60, 1.51)],
                  "attention_alone": {"sdpa_flash": {"forward_backward": 5.0}, "ladder": {"forward_backward": 4.0}},
                  "logits_check": {"pass": True}}
        s = torch_train.summarize(result, types.SimpleNamespace(layers=4))
        self.assertAlmostEqual(s["speedup_vs_sdpa_flash"], 100.0 / 95.0)
        self.assertTrue(s["meets_speedup_target"])
        self.assertAlmostEqual(s["final_heldout_gap"], 0.02)
        self.assertAlmostEqual(s["loss_tolerance"], 0.03)  # 2 % of 1.5 > 3 x 0.01
        self.assertTrue(s["loss_match"])
        self.assertAlmostEqual(s["train_loss_gap_last50"], 0.01)
        self.assertAlmostEqual(s["attention_share_ladder"], 4 * 4.0 / 95.0)
        result["runs"][1]["final_heldout"] = 1.6
        self.assertFalse(torch_train.summarize(result, types.SimpleNamespace(layers=4))["loss_match"])


def gpu_visible():
    """PyTorch sees a CUDA device (then the no-GPU paths cannot be taken here)."""
    try:
        import torch
        return torch.cuda.is_available()
    except ImportError:
        return False


class MixedLengths(unittest.TestCase):
    def test_same_as_common(self):
        import torch_sdpa

        lens = torch_sdpa.mixed_lengths(64, 128, 8192, 2024)
        self.assertEqual(lens[:8], [5246, 1315, 4749, 6457, 3999, 3544, 676, 7900])
        self.assertEqual(sum(lens), 286412)
        shapes = torch_sdpa.varlen_shapes()
        self.assertEqual([s["causal"] for s in shapes], [0, 1])
        self.assertEqual(shapes[0]["lens"], lens)
        self.assertEqual(torch_sdpa.shape_name(shapes[1]), "varlen/d128/S64/causal1")


class Entries(unittest.TestCase):
    def test_skipped_entry_is_an_error_and_the_file_is_benchmark_json(self):
        import contextlib
        import io
        import json
        import tempfile

        import torch_sdpa

        results = []
        with contextlib.redirect_stdout(io.StringIO()) as out:
            torch_sdpa.finish_entry({"name": "a", "skipped": "refused"}, results, 10)
            torch_sdpa.finish_entry({"name": "b", "skipped": "", "real_time": 1.5, "TFLOPS": 2.0, "GB/s": 3.0},
                                    results, 10)
        self.assertEqual(results[0]["error_message"], "skipped: refused")
        self.assertTrue(results[0]["error_occurred"])
        self.assertNotIn("error_occurred", results[1])
        self.assertEqual(out.getvalue().splitlines()[0], "a          skipped: refused")
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "x.json")
            with contextlib.redirect_stdout(io.StringIO()):
                torch_sdpa.write_benchmarks(path, {"device": "Fake"}, results)
            with open(path) as f:
                self.assertEqual(json.load(f), {"context": {"device": "Fake"}, "benchmarks": results})


def ladder_bench():
    """A built ladder_bench (FL_LADDER_BENCH, else the newest build/*/bin/ladder_bench), or None."""
    path = os.environ.get("FL_LADDER_BENCH")
    if path:
        return path
    found = glob.glob(os.path.join(ROOT, "build", "*", "bin", "ladder_bench"))
    return max(found, key=os.path.getmtime) if found else None


class MaskShapes(unittest.TestCase):
    def test_document_starts(self):
        import torch_flex

        starts = torch_flex.document_starts(32768, 512, 8192, 2024)
        self.assertEqual(starts, [0, 4327, 9670, 11460, 17908, 23058, 25966, 29874, 32195, 32768])
        for n, lo, hi, seed in [(32768, 512, 8192, s) for s in range(50)] + [(1000, 100, 200, 3), (512, 512, 8192, 1),
                                                                           (9000, 512, 8192, 7)]:
            starts = torch_flex.document_starts(n, lo, hi, seed)
            lens = [b - a for a, b in zip(starts, starts[1:])]
            self.assertEqual((starts[0], starts[-1]), (0, n))
            self.assertTrue(all(lo <= x <= hi for x in lens), (n, lo, hi, seed, lens))

    def test_names(self):
        import torch_flex

        self.assertEqual([torch_flex.shape_name(s) for s in torch_flex.mask_shapes("masks")],
                         ["masks/d128/causal/N8192", "masks/d128/causal/N32768", "masks/d128/window4096/N8192",
                          "masks/d128/window4096/N32768", "masks/d128/docs/N32768", "masks/d128/prefix2048/N8192",
                          "masks/d128/softcap50/N8192", "masks/d128/alibi/N8192", "masks/d128/sinks/N8192"])
        for s in torch_flex.mask_shapes("masks-backward"):
            self.assertEqual(s["batch"] * s["seqlen_q"], 32768)
            self.assertTrue(torch_flex.shape_name(s).startswith("masks-backward/d128/"))

    def test_alibi_slopes(self):
        import torch_flex

        for heads in (1, 8, 12, 16, 20, 32, 40):  # the paper's recipe, as tests/cpu/test_masks.cpp
            c = 1
            while 2 * c <= heads:
                c *= 2
            want = [2.0 ** (-8.0 * (i + 1) / c) for i in range(c)]
            want += [2.0 ** (-8.0 * (i + 1) / (2 * c)) for i in range(0, 2 * c, 2)][: heads - c]
            self.assertEqual(len(want), heads)
            for h in range(heads):
                self.assertAlmostEqual(torch_flex.alibi_slope(h, heads), want[h], places=15)
        self.assertEqual([torch_flex.sink_logit(h) for h in range(5)], [-0.25, 0.25, 0.75, 1.25, -0.25])

    def test_unmasked_pairs(self):
        import torch_flex

        def dense_count(s):  # the element rule (masks.h's mask_mod, self-attention) on every pair
            n, starts = s["seqlen_q"], s["doc_starts"]
            doc = [max(d for d in range(len(starts) - 1) if starts[d] <= t) for t in range(n)] if starts else None
            count = 0
            for i in range(n):
                for j in range(n):
                    ok = not (s["prefix"] > 0 and not (j < s["prefix"] or j <= i))
                    ok = ok and not (s["window_left"] >= 0 and j < i - s["window_left"])
                    ok = ok and not ((s["causal"] or s["window_right"] == 0) and j > i)
                    ok = ok and not (doc and doc[i] != doc[j])
                    count += ok
            return count * s["batch"] * s["heads_q"]

        n = 96  # each case on a small copy: the same rules, scaled down
        for s in torch_flex.mask_shapes("masks"):
            small = dict(s, seqlen_q=n, seqlen_k=n, batch=2, heads_q=3)
            if s["window_left"] > 0:
                small["window_left"] = 24
            if s["prefix"] > 0:
                small["prefix"] = 20
            if s["doc_starts"]:
                small["doc_starts"] = torch_flex.document_starts(n, 8, 40, 5)
            self.assertEqual(torch_flex.unmasked_pairs(small), dense_count(small), s["case"])
        causal = torch_flex.mask_shapes("masks")[0]
        self.assertEqual(torch_flex.flops_of(causal), 4.0 * 128 * 8192 * 8193 // 2 * 4 * 16)

    def test_flex_steps_cases(self):
        """torch_flex_steps.py's cases: 16k tokens each, the windows narrower than the sequence, the
        documents packed as one sequence of every token, and a step's FLOPs 3.5 x the forward's."""
        import torch_flex
        import torch_flex_steps as fs

        names = [s["case"] for s in fs.cases(4096, 64, False)]
        self.assertEqual(names, ["causal", "window256", "window512", "window1024", "window2048", "docs", "softcap30",
                                 "alibi"])
        self.assertIn("window4096", [s["case"] for s in fs.cases(8192, 128, False)])
        self.assertEqual([s["case"] for s in fs.cases(4096, 64, True)], ["causal", "window256", "window2048"])
        for s in fs.cases(8192, 128, False):
            self.assertEqual(s["batch"] * s["seqlen_q"], fs.TOKENS)
            if s["case"] == "docs":
                self.assertEqual((s["batch"], s["doc_starts"][0], s["doc_starts"][-1]), (1, 0, fs.TOKENS))
        w = fs.cases(4096, 64, False)[1]  # window256: row i sees min(i, 256) + 1 keys
        pairs = sum(min(i, 256) + 1 for i in range(4096)) * 4 * 16
        self.assertEqual(torch_flex.unmasked_pairs(w), pairs)
        self.assertEqual(fs.flops(w), 4.0 * 64 * pairs * 3.5)

    @unittest.skipUnless(ladder_bench(), "no built ladder_bench (set FL_LADDER_BENCH)")
    def test_same_as_ladder_bench(self):
        out = subprocess.run([ladder_bench(), "--fl_list", "--fl_family=masks,masks-backward"], capture_output=True,
                             text=True, cwd=ROOT)
        # A ladder_bench without the masks family is a stale build: a failure (rebuild it), never a
        # skip, or the two lists would go uncompared while the test reads as passed.
        self.assertNotIn("unknown family 'masks'", out.stderr, "%s predates the masks family: rebuild it" % ladder_bench())
        self.assertEqual(out.returncode, 0, out.stderr)
        ladder = {}
        for line in out.stdout.splitlines():
            fields = line.split("\t")
            docs = [f for f in fields if f.startswith("doc_starts=")]
            ladder[fields[0]] = docs[0] if docs else ""
        rc, text = run_script("bench/pytorch/torch_flex.py", "--list")
        self.assertEqual(rc, 0, text)
        flex = {}
        for line in text.splitlines():
            fields = line.split("\t")
            flex[fields[0]] = fields[1] if len(fields) > 1 else ""
        self.assertEqual(flex, ladder)
        self.assertTrue(flex["masks/d128/docs/N32768"].startswith("doc_starts=0,4327,"))


class BackwardShapes(unittest.TestCase):
    """torch_sdpa.py's backward families are ladder_bench's shapes (the runs are compared cell by
    cell): MHA, GQA 4:1 and 8:1, 512 to 16k keys."""

    @unittest.skipUnless(ladder_bench(), "no built ladder_bench (set FL_LADDER_BENCH)")
    def test_same_as_ladder_bench(self):
        import torch_sdpa  # noqa: E402  (imports no PyTorch at module level)
        families = ("backward", "backward-gqa", "backward-gqa8")
        out = subprocess.run([ladder_bench(), "--fl_list", "--fl_family=" + ",".join(families)], capture_output=True,
                             text=True, cwd=ROOT)
        self.assertNotIn("unknown family 'backward-gqa8'", out.stderr,
                         "%s predates the backward-gqa8 family: rebuild it" % ladder_bench())
        self.assertEqual(out.returncode, 0, out.stderr)
        ladder = set()
        for line in out.stdout.splitlines():
            name, desc = line.split("\t")[:2]
            fields = dict(kv.split("=", 1) for kv in desc.split() if "=" in kv)
            hq, hkv = fields["H"].split("/") if "/" in fields["H"] else (fields["H"], fields["H"])
            ladder.add((name.split("/")[0], int(fields["d"]), int(fields["Sq"]), int(fields["causal"]),
                        int(fields["B"]), int(hq), int(hkv)))
        torch = {(s["family"], s["head_dim"], s["seqlen_q"], s["causal"], s["batch"], s["heads_q"], s["heads_kv"])
                 for f in families for s in torch_sdpa.backward_shapes(False, f)}
        self.assertEqual(torch, ladder)
        self.assertIn(("backward-gqa8", 256, 512, 1, 32, 8, 1), torch)


class Timing(unittest.TestCase):
    """bench/pytorch/timing.py's parts that need no GPU, and that it is the only place with events."""

    def test_rounds_rotate_the_order(self):
        seen = []
        measure = {n: (lambda n=n: seen.append(n) or len(seen)) for n in ("a", "b", "c")}
        per_round = timing.paired_rounds(measure, 4)
        self.assertEqual(seen, list("abc" "bca" "cab" "abc"))
        self.assertEqual(per_round, {"a": [1, 6, 8, 10], "b": [2, 4, 9, 11], "c": [3, 5, 7, 12]})
        self.assertEqual(timing.paired_rounds({}, 3), {})

    def test_paired_diff_and_medians(self):
        per_round = {"x": [float(10 + i) for i in range(20)], "y": [float(i) for i in range(20)]}
        per_round["x"][3] = 100.0  # one round's outlier: past the 90th percentile, it moves no figure
        d = timing.paired_diff(per_round, "x", "y")
        self.assertEqual((d["median"], d["p10"], d["p90"]), (10.0, 10.0, 10.0))
        self.assertEqual(timing.paired_diff(per_round, "y", "x")["median"], -10.0)
        self.assertEqual(timing.column_medians([[1, 5, 9], [3, 4, 8], [2, 6, 7]]), [2, 5, 8])

    def test_no_script_times_on_its_own(self):
        folder = os.path.join(ROOT, "bench", "pytorch")
        scripts = sorted(glob.glob(os.path.join(folder, "*.py")))
        self.assertGreaterEqual(len(scripts), 10)
        own = []
        for path in scripts:
            if os.path.basename(path) == "timing.py":
                continue
            with open(path, encoding="utf-8") as f:
                text = f.read()
            if "cuda.Event(" in text:
                own.append(os.path.basename(path))
        self.assertEqual(own, [], "CUDA events outside bench/pytorch/timing.py")


class HostSteps(unittest.TestCase):
    """bench/pytorch/host_steps.py on the CPU (PyTorch needed): every entry point's forward +
    backward step runs and is timed, with a stand-in package whose functions are SDPA (the GPU's
    package takes the same arguments), and an entry that raises is reported as not run."""

    @unittest.skipUnless(have("torch"), "PyTorch is not installed")
    def test_every_entry_point_runs(self):
        import contextlib

        import torch
        import torch.nn.functional as F

        import host_steps

        def attn(q, k, v, causal=False, **_):
            return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                  is_causal=causal).transpose(1, 2)

        def varlen(q, k, v, cu_q, cu_k, max_q, max_k, causal=False):
            b = cu_q.numel() - 1
            out = attn(*(t.reshape(b, max_q, t.shape[1], t.shape[2]) for t in (q, k, v)), causal=causal)
            return out.reshape(-1, out.shape[2], out.shape[3])  # packed, as the package returns it

        def refuse(*_, **kw):
            raise ValueError("flashladder: stand-in refusal")

        fl = types.SimpleNamespace(attention=attn, flash_attn_func=attn, flash_attn_varlen_func=varlen)
        sync = torch.cuda.synchronize
        torch.cuda.synchronize = lambda *a: None  # CPU tensors: nothing to wait for
        try:
            rec = host_steps.measure(torch, F, fl, "cpu", 3, contextlib.nullcontext)
            names = [n for n, _ in host_steps.entry_points(F, fl, contextlib.nullcontext, None, 0)]
            self.assertEqual(sorted(rec["step_us"]), sorted(names))
            self.assertTrue(all(v > 0 for v in rec["step_us"].values()))
            self.assertEqual(sorted(rec["step_alone_us"]), sorted(names))
            self.assertEqual(sorted(rec["cpu_profile"]), sorted(names))
            prof = rec["cpu_profile"]["flashladder.attention, causal"]
            self.assertNotIn("error", prof)
            self.assertTrue(prof["ops"] and all(us >= 0 and calls > 0 for _, us, calls in prof["ops"]))
            # cProfile's view: the stand-in's own function (attn, above) among a step's Python calls
            self.assertTrue(prof["python"] and all(us >= 0 and calls > 0 for _, us, calls in prof["python"]))
            self.assertTrue(any("(attn)" in name for name, _, _ in prof["python"]), prof["python"])
            fl.flash_attn_varlen_func = refuse
            rec = host_steps.measure(torch, F, fl, "cpu", 2, contextlib.nullcontext)
            self.assertEqual(list(rec["not_run"]), ["flash_attn_varlen_func, causal"])
            self.assertNotIn("flash_attn_varlen_func, causal", rec["step_us"])
        finally:
            torch.cuda.synchronize = sync


class HostServing(unittest.TestCase):
    """bench/pytorch/host_serving.py on the CPU (PyTorch needed): every serving entry point runs and
    is timed, with a stand-in package whose functions are SDPA on the same tensors."""

    @unittest.skipUnless(have("torch"), "PyTorch is not installed")
    def test_every_entry_point_runs(self):
        import torch
        import torch.nn.functional as F

        import host_serving

        def attn(q, k, v, causal=False, **_):
            g = q.shape[2] // k.shape[2]
            return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2).repeat_interleave(g, 1),
                                                  v.transpose(1, 2).repeat_interleave(g, 1),
                                                  is_causal=causal).transpose(1, 2)

        def kvcache(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, block_table=None, **_):
            if block_table is not None:  # the pool read through the table, as the package reads it
                def pages(pool):  # (an e4m3 pool through its bytes: PyTorch indexes no float8 on the CPU)
                    raw = pool.view(torch.uint8) if pool.dtype == torch.float8_e4m3fn else pool
                    return raw[block_table.long()].flatten(1, 2).view(pool.dtype)

                k_cache, v_cache = pages(k_cache), pages(v_cache)
            n = int(cache_seqlens.max())
            return attn(q, k_cache[:, :n].float(), v_cache[:, :n].float())

        def varlen(q, k, v, cu_q, cu_k, max_q, max_k, causal=False):
            b = cu_q.numel() - 1
            out = attn(*(t.reshape(b, max_q, t.shape[1], t.shape[2]).float() for t in (q, k, v)), causal=causal)
            return out.reshape(-1, out.shape[2], out.shape[3])

        fl = types.SimpleNamespace(flash_attn_func=lambda q, k, v: attn(q.float(), k.float(), v.float()),
                                   flash_attn_with_kvcache=kvcache, flash_attn_varlen_func=varlen)
        sync = torch.cuda.synchronize
        torch.cuda.synchronize = lambda *a: None  # CPU tensors: nothing to wait for
        try:
            real_sdpa = F.scaled_dot_product_attention
            F.scaled_dot_product_attention = lambda q, k, v, **kw: real_sdpa(q.float(), k.float(), v.float(), **kw)
            rec = host_serving.measure(torch, F, fl, "cpu", 4, rounds=2)
        finally:
            torch.cuda.synchronize = sync
            F.scaled_dot_product_attention = real_sdpa
        names = [n for n, _ in host_serving.entry_points(torch, F, fl, "cpu")]
        self.assertEqual(rec.get("not_run", {}), {})
        self.assertEqual(sorted(rec["call_us"]), sorted(names))
        self.assertTrue(all(v > 0 for v in rec["call_us"].values()))
        self.assertEqual(sorted(rec["call_alone_us"]), sorted(names))


class BwdProfile(unittest.TestCase):
    def test_roles(self):
        # (start, name, ms), out of order: the longest is main, the others by launch order.
        events = [(30, "convert", 0.05), (10, "prep", 0.1), (20, "main kernel", 1.5), (5, "memset", 0.001)]
        self.assertEqual(torch_bwd_profile.roles(events), [
            ("memset", "pre", 0.001), ("prep", "pre", 0.1), ("main kernel", "main", 1.5), ("convert", "post", 0.05)])
        self.assertEqual(torch_bwd_profile.roles([]), [])

    def test_summarize(self):
        p1 = [("prep", "pre", 0.1), ("main", "main", 1.0), ("fill", "post", 0.02), ("fill", "post", 0.02)]
        p2 = [("prep", "pre", 0.3), ("main", "main", 1.2)]
        p3 = [("prep", "pre", 0.2), ("main", "main", 1.1), ("fill", "post", 0.04)]
        r = torch_bwd_profile.summarize([p1, p2, p3])
        by = {(k["name"], k["role"]): k for k in r["kernels"]}
        self.assertEqual([k["name"] for k in r["kernels"]], ["prep", "main", "fill"])
        self.assertAlmostEqual(by["prep", "pre"]["ms"], 0.2)
        self.assertAlmostEqual(by["fill", "post"]["ms"], 0.04)  # median of 0.04, 0 (absent), 0.04
        self.assertEqual(by["fill", "post"]["launches"], 1)  # median of 2, 0, 1
        self.assertAlmostEqual(r["pre_ms"], 0.2)
        self.assertAlmostEqual(r["main_ms"], 1.1)
        self.assertAlmostEqual(r["post_ms"], 0.04)
        self.assertAlmostEqual(r["total_ms"], 1.34)  # medians of 1.14, 1.5, 1.34
        self.assertEqual(r["passes"], 3)

    def test_window(self):
        # The flush (fill) ends at 100 µs; the first kernel starts at 150 (lead 0.05 ms), the second
        # 10 µs after the first ends (a gap), the third overlaps nothing; the interval 1.2 ms.
        events = [(300.0, "convert", 0.1), (0.0, "fill", 0.1), (150.0, "prep", 0.05), (210.0, "main", 0.08)]
        w = torch_bwd_profile.window(events, 1.2)
        self.assertAlmostEqual(w["lead_ms"], 0.05)
        self.assertAlmostEqual(w["kernels_ms"], 0.23)
        self.assertAlmostEqual(w["gaps_ms"], 0.01 + 0.01)  # 200 -> 210, 290 -> 300
        self.assertAlmostEqual(w["rest_ms"], 1.2 - 0.05 - 0.23 - 0.02)
        self.assertEqual(torch_bwd_profile.window([(0.0, "fill", 0.1)], 0.5)["rest_ms"], 0.5)

    def test_grid(self):
        # --family: the bench families' cells under torch_sdpa.py's names, GQA's heads divided.
        g = torch_bwd_profile.grid_shapes(["backward", "backward-gqa8"], "fp16")
        self.assertEqual(len(g), 2 * 36)
        self.assertEqual(g["backward/d128/N4096/causal1"], ("fp16", 128, 4096, 4, 16, 16, True))
        self.assertEqual(g["backward-gqa8/d64/N512/causal0"], ("fp16", 64, 512, 32, 32, 4, False))
        with self.assertRaises(ValueError):
            torch_bwd_profile.grid_shapes(["varlen-backward"], "bf16")
        rc, text = run_script("bench/pytorch/torch_bwd_profile.py", "--family", "backward-gqa", "--list")
        self.assertEqual(rc, 0, text)
        self.assertEqual(len(text.strip().splitlines()), 36)

    def test_list_and_no_gpu(self):
        rc, text = run_script("bench/pytorch/torch_bwd_profile.py", "--list")
        self.assertEqual(rc, 0, text)
        self.assertEqual(len(text.strip().splitlines()), len(torch_bwd_profile.SHAPES))
        if not gpu_visible():
            with tempfile.TemporaryDirectory() as out:
                rc, text = run_script("bench/pytorch/torch_bwd_profile.py", "--out", out)
                self.assertEqual(rc, 0, text)
                self.assertIn("nothing measured", text)
                self.assertFalse(os.path.exists(os.path.join(out, "torch_bwd_profile.json")))


class HostServingAB(unittest.TestCase):
    """bench/pytorch/host_serving_ab.py's parts that need no GPU: the child's program compiles with
    its folders in (and with --steps times the steps too), its record is found among the child's
    other output, and bad arguments fail."""

    def test_child_and_record(self):
        import host_serving_ab

        code = host_serving_ab.CHILD.format(here="/h", package="/p", calls=20, mark=host_serving_ab.MARK,
                                            steps=False)
        compile(code, "<child>", "exec")
        self.assertIn("sys.path.insert(0, '/p')", code)
        self.assertIn("if False:", code)  # without --steps the child times no step
        steps = host_serving_ab.CHILD.format(here="/h", package="/p", calls=20, mark=host_serving_ab.MARK,
                                             steps=True)
        compile(steps, "<child>", "exec")
        self.assertIn("if True:", steps)
        self.assertIn("host_steps.measure(", steps)
        self.assertIn('r["steps_not_run"] = s.get("not_run", {})', steps)
        rec = {"call_us": {"x": 1.0}, "call_alone_us": {"x": 2.0}}
        out = "  x  1.0 us per call\n%s%s\ntrailing\n" % (host_serving_ab.MARK, json.dumps(rec))
        self.assertEqual(host_serving_ab.parse_child(out), rec)
        self.assertIsNone(host_serving_ab.parse_child("no record here"))
        rc, text = run_script("bench/pytorch/host_serving_ab.py", "--a", "x", "--b", "y", "--out", "z",
                              "--names", "one")
        self.assertEqual(rc, 2, text)
        self.assertIn("two names", text)


class Scripts(unittest.TestCase):
    @unittest.skipIf(gpu_visible(), "a CUDA device is visible: the scripts would measure")
    def test_without_a_gpu(self):
        with tempfile.TemporaryDirectory() as out:
            rc, text = run_script("bench/pytorch/torch_overhead.py", "--bin", "no-such-bin", "--out", out)
            self.assertEqual(rc, 0, text)
            self.assertIn("nothing measured", text)
            self.assertFalse(os.path.exists(os.path.join(out, "torch_overhead.json")))
            self.assertTrue(os.path.exists(os.path.join(out, "torch_overhead.log")))
            rc, text = run_script("bench/pytorch/torch_decode.py", "--out", out)
            self.assertEqual(rc, 0, text)
            self.assertIn("nothing measured", text)
            self.assertFalse(os.path.exists(os.path.join(out, "torch_decode.json")))
            rc, text = run_script("bench/pytorch/torch_flex.py", "--out", os.path.join(out, "torch_flex.json"))
            self.assertEqual(rc, 0, text)
            self.assertIn("nothing measured", text)
            self.assertFalse(os.path.exists(os.path.join(out, "torch_flex.json")))
            rc, text = run_script("bench/pytorch/host_serving_ab.py", "--a", "x", "--b", "y", "--out", out)
            self.assertEqual(rc, 0, text)
            self.assertIn("nothing measured", text)
            self.assertFalse(os.path.exists(os.path.join(out, "host_serving_ab.json")))
            rc, text = run_script("bench/pytorch/cudnn_fp8.py", "--out", out)
            self.assertEqual(rc, 0, text)
            self.assertIn("nothing measured", text)
            self.assertFalse(os.path.exists(os.path.join(out, "cudnn_fp8.json")))
            if not have("torch"):
                rc, text = run_script("bench/pytorch/torch_train.py", "--out", out)
                self.assertEqual(rc, 0, text)
                self.assertIn("nothing measured", text)

    @unittest.skipUnless(have("torch") and have("transformers"), "PyTorch or transformers is not installed")
    def test_quick_on_cpu(self):
        with tempfile.TemporaryDirectory() as out:
            rc, text = run_script("bench/pytorch/torch_train.py", "--quick", "--cpu", "--steps", "6", "--no-rerun",
                                  "--out", out)
            self.assertEqual(rc, 0, text)
            with open(os.path.join(out, "torch_train.json"), encoding="utf-8") as f:
                d = json.load(f)
        self.assertEqual([r["name"] for r in d["runs"]], ["sdpa_flash"])
        self.assertEqual(len(d["runs"][0]["loss"]), 6)
        self.assertIn("skipped", d["ladder"])
        self.assertLess(d["logits_check"]["sdpa_flash_vs_fp32"]["rel_fro"], 0.05)



class CudnnFp8(unittest.TestCase):
    """9. bench/pytorch/cudnn_fp8.py's scales and grid (no GPU needed)."""

    def test_scales_and_shapes(self):
        sys.path.insert(0, os.path.join(ROOT, "bench", "pytorch"))
        import cudnn_fp8

        self.assertEqual(cudnn_fp8.pow2_scale(1.0), 256.0)  # 448 / 1 -> 2^8
        self.assertEqual(cudnn_fp8.pow2_scale(448.0), 1.0)
        self.assertEqual(cudnn_fp8.pow2_scale(0.001), 2.0 ** 18)
        for bad in (0.0, float("nan"), float("inf")):
            self.assertEqual(cudnn_fp8.pow2_scale(bad), 1.0)
        grid = cudnn_fp8.shapes(False)
        self.assertEqual(len(grid), 12)
        self.assertTrue(all(s["batch"] * s["seqlen"] == cudnn_fp8.TOKENS and s["heads"] * s["head_dim"] == 2048
                            for s in grid))
        self.assertEqual({s["seqlen"] for s in cudnn_fp8.shapes(True)}, {4096})


class Fp8BwdError(unittest.TestCase):
    """8. bench/studies/fp8_bwd_error.py on a small problem."""

    @unittest.skipUnless(have("torch"), "PyTorch is not installed")
    def test_emulation(self):
        import torch

        sys.path.insert(0, os.path.join(ROOT, "bench", "studies"))
        import fp8_bwd_error as emu

        q, k, v, do = emu.inputs(1, 2, 128, 64, False, 7)
        o, lse, ref = emu.reference(q, k, v, do, True)

        def errors(fp8):
            cfg = {"fp8": set(fp8), "p": "pow2", "ds": "tile", "rotate": False}
            return [emu.rel(g, r) for g, r in zip(emu.backward(q, k, v, do, o, lse, True, cfg), ref)]

        base = errors(())
        self.assertTrue(all(e < 1e-2 for e in base), base)  # P and dS in bf16: bf16's error
        for gemm, which in (("dv", 2), ("dq", 0), ("dk", 1)):
            errs = errors((gemm,))
            self.assertGreater(errs[which], 5 * base[which], (gemm, errs))  # e4m3's 3 bits where it enters
            self.assertEqual([e for i, e in enumerate(errs) if i != which],
                             [e for i, e in enumerate(base) if i != which])  # nowhere else
        tiny = torch.tensor([[[[1e-44, 0.0], [0.0, 0.0]]]], dtype=torch.float32)
        self.assertTrue(bool(torch.isfinite(emu.e4m3(tiny, emu.per_tile(tiny))).all()))  # floored, no 0 / 0

if __name__ == "__main__":
    unittest.main(verbosity=2)
