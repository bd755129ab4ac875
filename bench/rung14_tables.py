#!/usr/bin/env python3
"""Rung 14's tables for its README, from committed results folders: the side-by-side of rungs 11 and
14 with PyTorch SDPA's flash and cuDNN backward passes (SWEEP: one run of bench/run_all.sh
--family backward,backward-gqa; SWEEP_BF16, optional: the same with --dtype bf16, as one table of
ratios), each with the worst and best cell of rung 14 / cuDNN, and the ablation table (ABLATION:
bench/rung14_ablation.sh).

usage: python3 bench/rung14_tables.py SWEEP ABLATION [SWEEP_BF16]
  e.g. python3 bench/rung14_tables.py bench/results/nvidia-h100-80gb-hbm3/rung14-sweep \
           bench/results/nvidia-h100-80gb-hbm3/rung14/ablation bench/results/nvidia-h100-80gb-hbm3/rung14-sweep-bf16
"""
import json
import os
import sys

SEQLENS = [1024, 2048, 4096, 8192, 16384]


def rates(folder):
    """{(rung, family, "d128", "N4096", "causal1"): TFLOP/s} of a sweep folder; rung "14det" is rung
    14's deterministic run."""
    lb = json.load(open(os.path.join(folder, "ladder_bench.json")))
    tp = json.load(open(os.path.join(folder, "torch_sdpa.json")))
    rate = {}
    for b in lb["benchmarks"]:
        if "[" in b["name"].split("/")[0]:
            continue  # a variant (the tables show the rungs)
        fam, d, n, c = b["name"].split("/")[1:5]
        det = "/det/" in b["name"]
        rate[("%d" % b["rung"]) + ("det" if det else ""), fam, d, n, c] = b["TFLOPS"]
    for b in tp["benchmarks"]:
        if b.get("skipped"):
            continue
        fam, d, n, c = b["name"].split("/")[1:5]
        rate[b["rung"], fam, d, n, c] = b["TFLOPS"]
    return rate


def cells(rate):
    """(rung 14 / cuDNN, cell name) of every cell where both ran."""
    out = []
    for (rung, fam, d, n, c), v in rate.items():
        cudnn = rate.get(("torch_cudnn", fam, d, n, c))
        if rung == "14" and cudnn:
            out.append((v / cudnn, "%s %s N=%dk %s" % ("MHA" if fam == "backward" else "GQA 4:1",
                                                       d.replace("d", "d="), int(n[1:]) // 1024,
                                                       "causal" if c == "causal1" else "not causal")))
    return sorted(out)


def summary(rate, dtype):
    """One line: the worst and best cell of rung 14 / cuDNN and how many are below 1.0x."""
    ratios = cells(rate)
    if not ratios:
        return ""
    below = [r for r in ratios if r[0] < 1.0]
    return "%s: rung 14 / cuDNN from %.2f× (%s) to %.2f× (%s); %d of %d cells below 1.0×." % (
        dtype, ratios[0][0], ratios[0][1], ratios[-1][0], ratios[-1][1], len(below), len(ratios))


def ratio_table(folder, dtype):
    """rung 14 / cuDNN (and rung 14 deterministic / rung 14) per cell, one row per (heads, d, mask)."""
    rate = rates(folder)
    out = ["\n" + summary(rate, dtype) + "\n",
           "**%s: rung 14 / PyTorch cuDNN** (in brackets: rung 14 deterministic / rung 14)\n" % dtype,
           "| | " + " | ".join("N=%dk" % (n // 1024) for n in SEQLENS) + " |", "|---|" + "--:|" * len(SEQLENS)]
    for fam in ("backward", "backward-gqa"):
        for d in ("d64", "d128", "d256"):
            for c in ("causal0", "causal1"):
                row = []
                for n in SEQLENS:
                    k = (fam, d, "N%d" % n, c)
                    a, b, det = rate.get(("14",) + k), rate.get(("torch_cudnn",) + k), rate.get(("14det",) + k)
                    cell = "%.2f×" % (a / b) if a and b else "–"
                    if a and det:
                        cell += " (%.2f)" % (det / a)
                    row.append(cell)
                if any(x != "–" for x in row):
                    out.append("| %s, %s, %s | " % ("MHA" if fam == "backward" else "GQA 4:1", d.replace("d", "d = "),
                                                     "causal" if c == "causal1" else "not causal") + " | ".join(row) + " |")
    return "\n".join(out)


def side_by_side(folder, dtype="fp16"):
    rate = rates(folder)
    rows = [("11", "rung 11"), ("14", "rung 14"), ("14det", "rung 14 deterministic"),
            ("torch_flash", "PyTorch flash"), ("torch_cudnn", "PyTorch cuDNN")]
    out = ["\n" + summary(rate, dtype)]
    for fam in ("backward", "backward-gqa"):
        for d in ("d64", "d128", "d256"):
            for c in ("causal0", "causal1"):
                if not any(rate.get((k, fam, d, "N%d" % n, c)) for k, _ in rows for n in SEQLENS):
                    continue
                title = "%s, %s, %s, %s" % ("MHA" if fam == "backward" else "GQA 4:1", d.replace("d", "d = "),
                                            "causal" if c == "causal1" else "not causal", dtype)
                out.append("\n**%s** (TFLOP/s; last row: rung 14 / cuDNN)\n" % title)
                out.append("| | " + " | ".join("N=%dk" % (n // 1024) for n in SEQLENS) + " |")
                out.append("|---|" + "--:|" * len(SEQLENS))
                for key, label in rows:
                    vals = [rate.get((key, fam, d, "N%d" % n, c)) for n in SEQLENS]
                    if all(v is None for v in vals):
                        continue
                    out.append("| %s | " % label + " | ".join("%.0f" % v if v else "–" for v in vals) + " |")
                ratio = []
                for n in SEQLENS:
                    a, b = rate.get(("14", fam, d, "N%d" % n, c)), rate.get(("torch_cudnn", fam, d, "N%d" % n, c))
                    ratio.append("%.2f×" % (a / b) if a and b else "–")
                out.append("| rung 14 / cuDNN | " + " | ".join(ratio) + " |")
    return "\n".join(out)


def ablation(folder):
    names = [("rung", "rung 14"), ("no-ws", "no-ws"), ("atomic-dq", "atomic-dq"), ("ss-dkv", "ss-dkv"),
             ("one-stage", "one-stage")]
    cols = [(d, n, c) for d in (64, 128) for c in (0, 1) for n in (4096, 16384)]
    out = ["| variant | " + " | ".join("d%d %dk%s" % (d, n // 1024, " causal" if c else "") for d, n, c in cols) + " |",
           "|---|" + "--:|" * len(cols)]
    for key, label in names:
        cells = []
        for d, n, c in cols:
            f = os.path.join(folder, "fp16_d%d_N%d_c%d_%s.json" % (d, n, c, key))
            cells.append("%.0f" % json.load(open(f))["timing"]["tflops"] if os.path.exists(f) else "–")
        out.append("| %s | " % label + " | ".join(cells) + " |")
    bf = []
    for d, n, c in cols:
        f = os.path.join(folder, "bf16_d%d_N%d_c%d_rung.json" % (d, n, c))
        bf.append("%.0f" % json.load(open(f))["timing"]["tflops"] if os.path.exists(f) else "–")
    out.append("| rung 14, bf16 | " + " | ".join(bf) + " |")
    return "\n".join(out)


if __name__ == "__main__":
    text = "### Side by side\n" + side_by_side(sys.argv[1])
    if len(sys.argv) > 3:
        text += "\n" + ratio_table(sys.argv[3], "bf16")
    print(text + "\n\n### Ablation (fp16 unless said, TFLOP/s)\n\n" + ablation(sys.argv[2]))
