#!/usr/bin/env python3
"""The PyTorch bench scripts' parts that need no GPU (ctest: cpu_torch_scripts).

    python3 tests/cpu/test_torch_scripts.py

1. bench/torch_train.py's data: the standard library's *.py files in sorted order, every 20th
   held out, the same bytes on every call; batches drawn from a seeded generator (with PyTorch).
2. Its learning-rate schedule (linear warm-up, cosine to 10 %) and its summary on synthetic runs:
   the speedup over SDPA flash, the loss tolerance (the larger of 2 % and 3 x the SDPA rerun's gap).
3. bench/torch_sdpa.py's mixed-length batch: the lengths common/'s mixed_lengths draws (the
   values tests/cpu/test_varlen.cpp checks), and the shapes of its varlen family.
4. Without PyTorch (or without a GPU for the full demo), the scripts (torch_overhead.py,
   torch_decode.py, torch_train.py) say so and exit 0, measuring nothing; a --quick run on the CPU writes torch_train.json where PyTorch and transformers exist.
"""

import json
import os
import subprocess
import sys
import tempfile
import types
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import torch_train  # noqa: E402  (imports no PyTorch at module level)


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
        train, held, desc = torch_train.load_corpus()
        self.assertGreater(desc["files"], 100)
        self.assertEqual(len(train) + len(held), desc["bytes"])
        self.assertGreater(len(train), 10 * len(held))  # every 20th file held out
        self.assertGreater(len(held), 0)
        again = torch_train.load_corpus()
        self.assertEqual(again[2]["sha256"], desc["sha256"])
        self.assertIn(b"def ", train[:200000])

    @unittest.skipUnless(have("torch"), "PyTorch is not installed")
    def test_batches(self):
        import torch

        args = types.SimpleNamespace(seqlen=16, batch=2, steps=3, seed=5, eval_batches=2)
        data = torch_train.Batches(torch, bytes(range(256)) * 4, bytes(range(256)), args, torch.device("cpu"))
        x, y = data.step(1)
        self.assertEqual(tuple(x.shape), (2, 16))
        self.assertTrue(torch.equal(x[:, 1:], y[:, :-1]))  # y is x shifted by one byte
        again = torch_train.Batches(torch, bytes(range(256)) * 4, bytes(range(256)), args, torch.device("cpu"))
        self.assertTrue(torch.equal(again.step(1)[0], x))  # the same order every run
        self.assertEqual(len(data.heldout()), 2)


class Schedule(unittest.TestCase):
    def test_lr(self):
        args = types.SimpleNamespace(lr=1.0, warmup=10, steps=110)
        self.assertAlmostEqual(torch_train.lr_at(0, args), 0.1)
        self.assertAlmostEqual(torch_train.lr_at(9, args), 1.0)
        self.assertAlmostEqual(torch_train.lr_at(10, args), 1.0)
        self.assertAlmostEqual(torch_train.lr_at(110, args), 0.1)
        self.assertTrue(all(torch_train.lr_at(s, args) >= torch_train.lr_at(s + 1, args) for s in range(10, 109)))

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


class Scripts(unittest.TestCase):
    @unittest.skipIf(gpu_visible(), "a CUDA device is visible: the scripts would measure")
    def test_without_a_gpu(self):
        with tempfile.TemporaryDirectory() as out:
            rc, text = run_script("bench/torch_overhead.py", "--bin", "no-such-bin", "--out", out)
            self.assertEqual(rc, 0, text)
            self.assertIn("nothing measured", text)
            self.assertFalse(os.path.exists(os.path.join(out, "torch_overhead.json")))
            self.assertTrue(os.path.exists(os.path.join(out, "torch_overhead.log")))
            rc, text = run_script("bench/torch_decode.py", "--out", out)
            self.assertEqual(rc, 0, text)
            self.assertIn("nothing measured", text)
            self.assertFalse(os.path.exists(os.path.join(out, "torch_decode.json")))
            if not have("torch"):
                rc, text = run_script("bench/torch_train.py", "--out", out)
                self.assertEqual(rc, 0, text)
                self.assertIn("nothing measured", text)

    @unittest.skipUnless(have("torch") and have("transformers"), "PyTorch or transformers is not installed")
    def test_quick_on_cpu(self):
        with tempfile.TemporaryDirectory() as out:
            rc, text = run_script("bench/torch_train.py", "--quick", "--cpu", "--steps", "6", "--no-rerun",
                                  "--out", out)
            self.assertEqual(rc, 0, text)
            with open(os.path.join(out, "torch_train.json"), encoding="utf-8") as f:
                d = json.load(f)
        self.assertEqual([r["name"] for r in d["runs"]], ["sdpa_flash"])
        self.assertEqual(len(d["runs"][0]["loss"]), 6)
        self.assertIn("skipped", d["ladder"])
        self.assertLess(d["logits_check"]["sdpa_flash_vs_fp32"]["rel_fro"], 0.05)


if __name__ == "__main__":
    unittest.main(verbosity=2)
