#!/usr/bin/env python3
"""The packed batch's training tables for rungs 14 and 15's READMEs, from committed results folders
(each one run of bench/run_all.sh --family varlen,varlen-backward --torch-backends flash,cudnn):
rung 15's forward, rung 14's backward and their sum against PyTorch SDPA on the same batch as nested
(jagged) tensors and zero-padded, per backend (a backend's forward and backward summed, the best
backend kept); and, given a third folder (bench/run_all.sh --family backward --torch-backends cudnn),
rung 14's dense backward against cuDNN in that run.

usage: python3 bench/packed_tables.py TRAIN_BF16 TRAIN_FP16 [BWD_DENSE]
  e.g. python3 bench/packed_tables.py bench/results/nvidia-h100-80gb-hbm3/rung14-varlen/train-bf16 \\
           bench/results/nvidia-h100-80gb-hbm3/rung14-varlen/train-fp16 bench/results/nvidia-h100-80gb-hbm3/rung14-varlen/bwd-dense
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_sdpa  # noqa: E402  (the batch's lengths: the same draw as ladder_bench's)

BACKENDS = ("flash", "cudnn")


def times(folder):
    """{(rung, shape): median ms}; shape like "varlen/d128/S64/causal1"."""
    out = {}
    for f in ("ladder_bench.json", "torch_sdpa.json"):
        for b in json.load(open(os.path.join(folder, f)))["benchmarks"]:
            if b.get("skipped"):
                continue
            rung, shape = b["name"].split("/", 1)
            out[rung, shape.replace("/iterations:1/manual_time", "")] = b["real_time"]
    return out


def meta(folder):
    m = json.load(open(os.path.join(folder, "meta.json")))
    return "%s, %s, commit %s" % (m["device"], m["date"][:10], m["git_sha"][:7])


def best(t, way, causal, passes):
    """(backend, ms) of the backend whose sum over @p passes ("varlen", "varlen-backward") is least."""
    cand = []
    for be in BACKENDS:
        keys = [("torch_%s_%s" % (be, way), "%s/d128/S64/causal%d" % (p, causal)) for p in passes]
        if all(k in t for k in keys):
            cand.append((sum(t[k] for k in keys), be))
    ms, be = min(cand)
    return be, ms


def training_table(runs, tokens):
    rows = ["| dtype | mask | rung 15 fwd (ms) | rung 14 bwd (ms) | fwd + bwd (ms) | tokens/s | best SDPA nested, fwd + bwd "
            "| ladder / it | best SDPA padded, fwd + bwd | ladder / it |",
            "|---|---|--:|--:|--:|--:|---|--:|---|--:|"]
    for dtype, t in runs:
        for c in (0, 1):
            f = t["15_persistent", "varlen/d128/S64/causal%d" % c]
            b = t["14_hopper_backward", "varlen-backward/d128/S64/causal%d" % c]
            nb, nms = best(t, "nested", c, ("varlen", "varlen-backward"))
            pb, pms = best(t, "padded", c, ("varlen", "varlen-backward"))
            rows.append("| %s | %s | %.1f | %.1f | %.1f | %.2fM | %s %.1f ms | %.2f× | %s %.1f ms | %.2f× |" % (
                dtype, "causal" if c else "none", f, b, f + b, tokens / ((f + b) * 1e-3) / 1e6, nb, nms, nms / (f + b),
                pb, pms, pms / (f + b)))
    return "\n".join(rows)


def backward_table(runs, flops_of):
    rows = ["| dtype | mask | rung 14 (ms) | TFLOP/s | best SDPA nested | rung 14 / it | best SDPA padded | rung 14 / it |",
            "|---|---|--:|--:|---|--:|---|--:|"]
    for dtype, t in runs:
        for c in (0, 1):
            b = t["14_hopper_backward", "varlen-backward/d128/S64/causal%d" % c]
            nb, nms = best(t, "nested", c, ("varlen-backward",))
            pb, pms = best(t, "padded", c, ("varlen-backward",))
            rows.append("| %s | %s | %.1f | %.0f | %s %.1f ms | %.2f× | %s %.1f ms | %.2f× |" % (
                dtype, "causal" if c else "none", b, flops_of(c) / (b * 1e-3) / 1e12, nb, nms, nms / b, pb, pms, pms / b))
    return "\n".join(rows)


def dense_table(t):
    """Rung 14 / cuDNN per shape of the dense backward family (its default mode: atomic dQ order)."""
    rows = ["| head_dim | mask | " + " | ".join("N=%dk" % (n // 1024) for n in (1024, 2048, 4096, 16384)) + " |",
            "|--:|---|" + "--:|" * 4]
    ratios = []
    for d in (64, 128, 256):
        for c in (0, 1):
            cells = []
            for n in (1024, 2048, 4096, 16384):
                s = "backward/d%d/N%d/causal%d" % (d, n, c)
                if ("14_hopper_backward", s) in t and ("torch_cudnn", s) in t:
                    r = t["torch_cudnn", s] / t["14_hopper_backward", s]
                    ratios.append(r)
                    cells.append("%.2f" % r)
                else:
                    cells.append("-")
            rows.append("| %d | %s | %s |" % (d, "causal" if c else "none", " | ".join(cells)))
    return "\n".join(rows), min(ratios), max(ratios)


def main():
    if len(sys.argv) not in (3, 4):
        print(__doc__)
        return 2
    v = torch_sdpa.VARLEN
    lens = torch_sdpa.mixed_lengths(v["count"], v["lo"], v["hi"], v["seed"])
    tokens = sum(lens)
    s = dict(heads_q=32, head_dim=128, lens=lens)
    fwd_flops = lambda c: torch_sdpa.forward_flops(dict(s, causal=c))  # noqa: E731
    runs = [("bf16", times(sys.argv[1])), ("fp16", times(sys.argv[2]))]
    print("**A packed batch, forward + backward** (%d sequences of %d-%d tokens, %d tokens, 32/8 heads, d = 128; "
          "bf16: %s; fp16: %s)\n" % (len(lens), min(lens), max(lens), tokens, meta(sys.argv[1]), meta(sys.argv[2])))
    print(training_table(runs, tokens))
    print()
    print("**The backward pass alone** (TFLOP/s: 2.5 x the forward's FLOPs, each sequence's own pairs)\n")
    print(backward_table(runs, lambda c: 2.5 * fwd_flops(c)))
    if len(sys.argv) == 4:
        table, lo, hi = dense_table(times(sys.argv[3]))
        print()
        print("**Rung 14's dense backward / cuDNN in one run** (%s; the backward family, quick grid: %.2f-%.2f×)\n"
              % (meta(sys.argv[3]), lo, hi))
        print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
