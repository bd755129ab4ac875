#!/usr/bin/env python3
"""Rung 15's tables for its README, from committed results folders: rung 15 against PyTorch SDPA's
cuDNN backend and rung 10 over the hopper-prefill family (SWEEP_FP16, SWEEP_BF16: one run each of
bench/run_all.sh --family hopper-prefill,llama,varlen), with the worst and best cell; Llama-3-8B's
prefill; the packed batch against SDPA on nested and zero-padded tensors; the cost of a work item
fitted from the sweep; and the ablation and tile tables (ABLATION: bench/rung15_ablation.sh).

usage: python3 bench/rung15_tables.py SWEEP_FP16 SWEEP_BF16 ABLATION
  e.g. python3 bench/rung15_tables.py bench/results/nvidia-h100-80gb-hbm3/rung15-sweep-fp16 \\
           bench/results/nvidia-h100-80gb-hbm3/rung15-sweep-bf16 bench/results/nvidia-h100-80gb-hbm3/rung15/ablation
"""
import json
import math
import os
import re
import sys

SEQLENS = [512, 1024, 2048, 4096, 8192, 16384]
HEAD_DIMS = [64, 128, 256]
SMS = 132
BLOCK_N = {64: 128, 128: 176, 256: 80}  # rung 15's non-causal tiles (traits.h), 128 query rows


def times(folder):
    """{(rung, shape): median ms} of a sweep folder; shape like "hopper-prefill/d128/N4096/causal1"."""
    out = {}
    lb = json.load(open(os.path.join(folder, "ladder_bench.json")))
    for b in lb["benchmarks"]:
        rung, shape = b["name"].split("/", 1)
        out[rung, shape.replace("/iterations:1/manual_time", "")] = b["real_time"]
    tp = json.load(open(os.path.join(folder, "torch_sdpa.json")))
    for b in tp["benchmarks"]:
        if not b.get("skipped"):
            out[b["name"].split("/", 1)[0], b["name"].split("/", 1)[1]] = b["real_time"]
    return out


def flops(shape):
    """The forward's FLOPs of a hopper-prefill or llama shape (square, causal bottom-right)."""
    fam, d, n, c = shape.split("/")
    d, n, causal = int(d[1:]), int(n[1:]), c == "causal1"
    b, h = (1, 32) if fam == "llama" else (16384 // n, 2048 // d)
    pairs = n * (n + 1) / 2 if causal else n * n
    return 4.0 * b * h * d * pairs


def shape(d, n, c):
    return "hopper-prefill/d%d/N%d/causal%d" % (d, n, c)


def ratio_cells(t, rung="15_persistent", other="torch_cudnn"):
    out = []
    for d in HEAD_DIMS:
        for c in (0, 1):
            for n in SEQLENS:
                s = shape(d, n, c)
                if (rung, s) in t and (other, s) in t:
                    out.append((t[other, s] / t[rung, s], "d=%d N=%s %s" % (d, kilo(n), "causal" if c else "not causal")))
    return sorted(out)


def kilo(n):
    return "%dk" % (n // 1024) if n >= 1024 else str(n)


def ratio_table(t, other, label):
    rows = ["| | " + " | ".join("N=%s" % kilo(n) for n in SEQLENS) + " |",
            "|---|" + "--:|" * len(SEQLENS)]
    for d in HEAD_DIMS:
        for c in (0, 1):
            cells = []
            for n in SEQLENS:
                s = shape(d, n, c)
                cells.append("%.2f" % (t[other, s] / t["15_persistent", s]) if (other, s) in t and ("15_persistent", s) in t else "-")
            rows.append("| d=%d %s | %s |" % (d, "causal" if c else "not causal", " | ".join(cells)))
    return "**%s**\n\n" % label + "\n".join(rows)


def rate_table(t, dtype):
    rows = ["| | " + " | ".join("N=%s" % kilo(n) for n in SEQLENS) + " |", "|---|" + "--:|" * len(SEQLENS)]
    for d in HEAD_DIMS:
        for c in (0, 1):
            for rung, name in (("15_persistent", "rung 15"), ("torch_cudnn", "cuDNN")):
                cells = []
                for n in SEQLENS:
                    s = shape(d, n, c)
                    cells.append("%.0f" % (flops(s) / (t[rung, s] * 1e-3) / 1e12) if (rung, s) in t else "-")
                rows.append("| d=%d %s, %s | %s |" % (d, "causal" if c else "not causal", name, " | ".join(cells)))
    return "**TFLOP/s, %s**\n\n" % dtype + "\n".join(rows)


def summary(t, dtype):
    cells = ratio_cells(t)
    below = sum(1 for r, _ in cells if r < 1.0)
    short = [r for r, name in cells if re.search(r"N=(512|1k|2k) ", name)]
    long_ = [r for r, name in cells if not re.search(r"N=(512|1k|2k) ", name)]
    vs10 = ratio_cells(t, "15_persistent", "10_warp_specialized")
    return ("%s: rung 15 / cuDNN from %.2f× (%s) to %.2f× (%s); %d of %d cells below 1.0×; N = 512-2k: "
            "%.2f-%.2f×, N = 4k-16k: %.2f-%.2f×. Rung 15 / rung 10: %.2f-%.2f× (%d of %d cells below 1.0×)."
            % (dtype, cells[0][0], cells[0][1], cells[-1][0], cells[-1][1], below, len(cells), min(short),
               max(short), min(long_), max(long_), vs10[0][0], vs10[-1][0], sum(1 for r, _ in vs10 if r < 1.0),
               len(vs10)))


def llama_table(sweeps):
    rows = ["| dtype | N | rung 15 (TFLOP/s) | cuDNN (TFLOP/s) | rung 10 (TFLOP/s) | rung 15 / cuDNN |",
            "|---|--:|--:|--:|--:|--:|"]
    for dtype, t in sweeps:
        for n in (8192, 16384):
            s = "llama/d128/N%d/causal1" % n
            r = {k: flops(s) / (t[k, s] * 1e-3) / 1e12 for k in ("15_persistent", "torch_cudnn", "10_warp_specialized")}
            rows.append("| %s | %s | %.0f | %.0f | %.0f | %.2f |" % (dtype, kilo(n), r["15_persistent"], r["torch_cudnn"],
                                                                      r["10_warp_specialized"],
                                                                      r["15_persistent"] / r["torch_cudnn"]))
    return "\n".join(rows)


def varlen_table(sweeps, tokens):
    rows = ["| dtype | mask | rung 15 (ms) | tokens/s | best SDPA, nested | rung 15 / it | best SDPA, padded | rung 15 / it |",
            "|---|---|--:|--:|---|--:|---|--:|"]
    for dtype, t in sweeps:
        for c in (0, 1):
            s = "varlen/d128/S64/causal%d" % c
            ms = t["15_persistent", s]
            best = {}
            for way in ("nested", "padded"):
                cand = [(v, k[0]) for k, v in t.items() if k[1] == s and k[0].endswith("_" + way)]
                best[way] = min(cand)
            rows.append("| %s | %s | %.1f | %.2fM | %s %.1f ms | %.2f× | %s %.1f ms | %.2f× |" % (
                dtype, "causal" if c else "none", ms, tokens / (ms * 1e-3) / 1e6,
                best["nested"][1].replace("torch_", "").replace("_nested", ""), best["nested"][0], best["nested"][0] / ms,
                best["padded"][1].replace("torch_", "").replace("_padded", ""), best["padded"][0], best["padded"][0] / ms))
    return "\n".join(rows)


def item_cost(t):
    """Least squares of the time per round of work items (items / 132 SMs) against the K/V blocks per
    item, over N = 512-16k without a mask: the fixed cost of an item (intercept) and of a block."""
    rows = ["| head_dim | K/V block (keys) | per block (µs) | per item, fixed (µs) | fixed share at N=512 |",
            "|--:|--:|--:|--:|--:|"]
    for d in HEAD_DIMS:
        xs, ys = [], []
        for n in SEQLENS:
            s = shape(d, n, 0)
            items = (16384 // n) * (2048 // d) * math.ceil(n / 128)
            xs.append(math.ceil(n / BLOCK_N[d]))
            ys.append(t["15_persistent", s] * 1e3 / math.ceil(items / SMS))
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
        icpt = my - slope * mx
        rows.append("| %d | %d | %.2f | %.2f | %.0f %% |" % (d, BLOCK_N[d], slope, icpt, 100 * icpt / ys[0]))
    return "\n".join(rows)


def ablation(folder):
    """{tag: TFLOP/s} of bench/rung15_ablation.sh's logs."""
    out = {}
    for f in os.listdir(folder):
        if f.endswith(".log"):
            m = re.search(r"rate\s+([0-9.]+) TFLOP/s", open(os.path.join(folder, f)).read())
            if m:
                out[f[:-4]] = float(m.group(1))
    return out


def ablation_table(a):
    variants = ["no-persistent", "no-epilogue-overlap", "fifo", "static", "pair-stores", "q2"]
    rows = ["| shape (fp16) | rung 15 (TFLOP/s) | " + " | ".join(variants) + " |", "|---|--:|" + "--:|" * len(variants)]
    for d in HEAD_DIMS:
        for c in (0, 1):
            for n in (512, 2048, 8192):
                tag = "fp16_d%d_N%d_c%d" % (d, n, c)
                if tag + "_rung" not in a:
                    continue
                r = a[tag + "_rung"]
                names = {v: ("d%d-q2" % d if v == "q2" else v) for v in variants}
                rows.append("| d=%d N=%s %s | %.0f | %s |" % (d, kilo(n), "causal" if c else "not causal", r, " | ".join(
                    "%.2f" % (r / a[tag + "_" + names[v]]) if tag + "_" + names[v] in a else "-" for v in variants)))
    for c in (0, 1):
        tag = "bf16_varlen_c%d" % c
        if tag + "_rung" in a:
            r = a[tag + "_rung"]
            rows.append("| packed batch, bf16, %s | %.0f | %s |" % ("causal" if c else "not causal", r, " | ".join(
                "%.2f" % (r / a[tag + "_" + v]) if tag + "_" + v in a else "-" for v in variants)))
    return "\n".join(rows)


def tiles_table(a):
    tiles = {64: ["d64-128x192"], 128: ["d128-128x128", "d128-128x176"], 256: ["d256-128x64"]}
    rows = ["| shape | dtype | rung 15 (TFLOP/s) | tile variant | its TFLOP/s | rung / variant |", "|---|---|--:|---|--:|--:|"]
    for d in HEAD_DIMS:
        for c in (0, 1):
            for n in (512, 2048, 8192):
                for dtype in ("fp16", "bf16"):
                    tag = "%s_d%d_N%d_c%d" % (dtype, d, n, c)
                    if tag + "_rung" not in a:
                        continue
                    for v in tiles[d]:
                        if tag + "_" + v in a:
                            rows.append("| d=%d N=%s %s | %s | %.0f | %s | %.0f | %.2f |" % (
                                d, kilo(n), "causal" if c else "not causal", dtype, a[tag + "_rung"], v, a[tag + "_" + v],
                                a[tag + "_rung"] / a[tag + "_" + v]))
    return "\n".join(rows)


def main():
    if len(sys.argv) != 4:
        print(__doc__)
        return 2
    fp16, bf16 = times(sys.argv[1]), times(sys.argv[2])
    a = ablation(sys.argv[3])
    lens = json.load(open(os.path.join(sys.argv[1], "ladder_bench.json")))
    tokens = None
    for b in lens["benchmarks"]:
        if b["name"].startswith("15_persistent/varlen/"):
            tokens = b["bytes"] / (2 * 2 * 128 * (32 + 8)) if "bytes" in b else None
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import torch_sdpa
    v = torch_sdpa.VARLEN
    tokens = sum(torch_sdpa.mixed_lengths(v["count"], v["lo"], v["hi"], v["seed"]))
    print(summary(fp16, "fp16"))
    print()
    print(summary(bf16, "bf16"))
    print()
    print(ratio_table(fp16, "torch_cudnn", "rung 15 / cuDNN, fp16"))
    print()
    print(ratio_table(bf16, "torch_cudnn", "rung 15 / cuDNN, bf16"))
    print()
    print(ratio_table(fp16, "10_warp_specialized", "rung 15 / rung 10, fp16"))
    print()
    print(ratio_table(bf16, "10_warp_specialized", "rung 15 / rung 10, bf16"))
    print()
    print(rate_table(fp16, "fp16"))
    print()
    print("**Llama-3-8B prefill** (batch 1, 32 query heads on 8 KV heads, d = 128, causal)\n")
    print(llama_table([("fp16", fp16), ("bf16", bf16)]))
    print()
    print("**A packed batch** (64 sequences of 128-8192 tokens, %d tokens, 32/8 heads, d = 128)\n" % tokens)
    print(varlen_table([("fp16", fp16), ("bf16", bf16)], tokens))
    print()
    print("**The cost of a work item** (fp16, not causal: time per round of 132 items against K/V blocks per item)\n")
    print(item_cost(fp16))
    print()
    print("**Ablation** (rung 15 / variant, time ratio: above 1.0 the idea the variant turns off helps)\n")
    print(ablation_table(a))
    print()
    print("**Tiles** (the rung's tile per head_dim and mask, traits.h, against the other candidates)\n")
    print(tiles_table(a))
    return 0


if __name__ == "__main__":
    sys.exit(main())
