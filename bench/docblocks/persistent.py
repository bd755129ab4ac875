"""Rung 15's blocks (the persistent kernel): rung 15 against PyTorch SDPA's cuDNN backend and rung 10
over the hopper-prefill family of a sweep folder (bench/run_all.sh --family hopper-prefill,llama,varlen,
one folder per dtype), Llama-3-8B's prefill, the packed batch against SDPA on nested and zero-padded
tensors, the cost of a work item fitted from the sweep, and the ablation and tile runs
(rung15_ablation.sh's logs, one per variant and shape).

Every block names its folder(s) under bench/results/ with gpu=; several folders are separated by
commas. A sweep's dtype is the one its ladder run's context records."""

import math
import os
import re

from .core import Missing, generator, varlen_lengths

SEQLENS = [512, 1024, 2048, 4096, 8192, 16384]
HEAD_DIMS = [64, 128, 256]
SMS = 132  # the H100 SXM's SMs: a round of work items (the item-cost block's model)
BLOCK_N = {64: 128, 128: 176, 256: 80}  # rung 15's non-causal tiles (traits.h), 128 query rows
OTHERS = {"torch_cudnn": "cuDNN", "10_warp_specialized": "rung 10"}


def times(res):
    """{(rung, shape): median ms} of a sweep folder; shape like "hopper-prefill/d128/N4096/causal1"."""
    out = {}
    for b in res.json("ladder_bench.json")["benchmarks"]:
        rung, shape = b["name"].split("/", 1)
        out[rung, shape.replace("/iterations:1/manual_time", "")] = b["real_time"]
    if res.has("torch_sdpa.json"):
        for b in res.json("torch_sdpa.json")["benchmarks"]:
            if not b.get("skipped"):
                out[b["name"].split("/", 1)[0], b["name"].split("/", 1)[1]] = b["real_time"]
    return out


def sweep(ctx, gpu):
    """(dtype, times) of one sweep folder."""
    res = ctx.results(gpu)
    return res.json("ladder_bench.json")["context"].get("dtype", "fp16"), times(res)


def flops(shape):
    """The forward's FLOPs of a hopper-prefill or llama shape (square, causal bottom-right)."""
    fam, d, n, c = shape.split("/")
    d, n, causal = int(d[1:]), int(n[1:]), c == "causal1"
    b, h = (1, 32) if fam == "llama" else (16384 // n, 2048 // d)
    pairs = n * (n + 1) / 2 if causal else n * n
    return 4.0 * b * h * d * pairs


def shape(d, n, c):
    return "hopper-prefill/d%d/N%d/causal%d" % (d, n, c)


def kilo(n):
    return "%dk" % (n // 1024) if n >= 1024 else str(n)


def ratio_cells(t, rung="15_persistent", other="torch_cudnn"):
    out = []
    for d in HEAD_DIMS:
        for c in (0, 1):
            for n in SEQLENS:
                s = shape(d, n, c)
                if (rung, s) in t and (other, s) in t:
                    out.append((t[other, s] / t[rung, s], "d=%d N=%s %s" % (d, kilo(n), "causal" if c else "not causal")))
    return sorted(out)


@generator("rung15-summary")
def gen_rung15_summary(ctx, gpu):
    """One line of a hopper-prefill sweep folder: rung 15 / cuDNN's worst and best cell, the cells
    below 1.0x, the range at 512-2k and at 4k-16k keys, and rung 15 / rung 10's range."""
    dtype, t = sweep(ctx, gpu)
    cells = ratio_cells(t)
    vs10 = ratio_cells(t, "15_persistent", "10_warp_specialized")
    if not cells or not vs10:
        raise Missing("rung 15 beside cuDNN and rung 10 in %s" % gpu, "bench/run_all.sh --family hopper-prefill")
    below = sum(1 for r, _ in cells if r < 1.0)
    short = [r for r, name in cells if re.search(r"N=(512|1k|2k) ", name)]
    long_ = [r for r, name in cells if not re.search(r"N=(512|1k|2k) ", name)]
    return ("%s: rung 15 / cuDNN from %.2f× (%s) to %.2f× (%s); %d of %d cells below 1.0×; N = 512-2k: "
            "%.2f-%.2f×, N = 4k-16k: %.2f-%.2f×. Rung 15 / rung 10: %.2f-%.2f× (%d of %d cells below 1.0×)."
            % (dtype, cells[0][0], cells[0][1], cells[-1][0], cells[-1][1], below, len(cells), min(short),
               max(short), min(long_), max(long_), vs10[0][0], vs10[-1][0], sum(1 for r, _ in vs10 if r < 1.0),
               len(vs10)))


@generator("rung15-ratios")
def gen_rung15_ratios(ctx, gpu, other="torch_cudnn"):
    """Rung 15's time ratio over a hopper-prefill sweep folder against other= (torch_cudnn or
    10_warp_specialized): the other's time / rung 15's, per head_dim, mask and seqlen."""
    dtype, t = sweep(ctx, gpu)
    rows = ["| | " + " | ".join("N=%s" % kilo(n) for n in SEQLENS) + " |",
            "|---|" + "--:|" * len(SEQLENS)]
    for d in HEAD_DIMS:
        for c in (0, 1):
            cells = []
            for n in SEQLENS:
                s = shape(d, n, c)
                cells.append("%.2f" % (t[other, s] / t["15_persistent", s])
                             if (other, s) in t and ("15_persistent", s) in t else "-")
            rows.append("| d=%d %s | %s |" % (d, "causal" if c else "not causal", " | ".join(cells)))
    return "**rung 15 / %s, %s**\n\n" % (OTHERS.get(other, other), dtype) + "\n".join(rows)


@generator("rung15-rates")
def gen_rung15_rates(ctx, gpu):
    """TFLOP/s of rung 15 and PyTorch's cuDNN backend over a hopper-prefill sweep folder (forward
    FLOPs of the unmasked pairs)."""
    dtype, t = sweep(ctx, gpu)
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


@generator("rung15-llama")
def gen_rung15_llama(ctx, gpu):
    """Llama-3-8B's prefill (the llama family: batch 1, 32/8 heads, d = 128, causal) at 8k and 16k
    keys: rung 15, cuDNN and rung 10 (TFLOP/s), one row per sweep folder of gpu= and seqlen."""
    rows = ["**Llama-3-8B prefill** (batch 1, 32 query heads on 8 KV heads, d = 128, causal)\n",
            "| dtype | N | rung 15 (TFLOP/s) | cuDNN (TFLOP/s) | rung 10 (TFLOP/s) | rung 15 / cuDNN |",
            "|---|--:|--:|--:|--:|--:|"]
    for g in gpu.split(","):
        dtype, t = sweep(ctx, g)
        for n in (8192, 16384):
            s = "llama/d128/N%d/causal1" % n
            r = {k: flops(s) / (t[k, s] * 1e-3) / 1e12 for k in ("15_persistent", "torch_cudnn", "10_warp_specialized")}
            rows.append("| %s | %s | %.0f | %.0f | %.0f | %.2f |" % (dtype, kilo(n), r["15_persistent"], r["torch_cudnn"],
                                                                      r["10_warp_specialized"],
                                                                      r["15_persistent"] / r["torch_cudnn"]))
    return "\n".join(rows)


@generator("rung15-packed")
def gen_rung15_packed(ctx, gpu):
    """The packed batch's forward (the varlen family): rung 15 against the best PyTorch SDPA
    backend on the same batch as nested and as zero-padded tensors, one row per folder and mask."""
    _, lens = varlen_lengths()
    tokens = sum(lens)
    rows = ["**A packed batch** (64 sequences of 128-8192 tokens, %d tokens, 32/8 heads, d = 128)\n" % tokens,
            "| dtype | mask | rung 15 (ms) | tokens/s | best SDPA, nested | rung 15 / it | best SDPA, padded | rung 15 / it |",
            "|---|---|--:|--:|---|--:|---|--:|"]
    for g in gpu.split(","):
        dtype, t = sweep(ctx, g)
        for c in (0, 1):
            s = "varlen/d128/S64/causal%d" % c
            ms = t["15_persistent", s]
            best = {}
            for way in ("nested", "padded"):
                best[way] = min((v, k[0]) for k, v in t.items() if k[1] == s and k[0].endswith("_" + way))
            rows.append("| %s | %s | %.1f | %.2fM | %s %.1f ms | %.2f× | %s %.1f ms | %.2f× |" % (
                dtype, "causal" if c else "none", ms, tokens / (ms * 1e-3) / 1e6,
                best["nested"][1].replace("torch_", "").replace("_nested", ""), best["nested"][0], best["nested"][0] / ms,
                best["padded"][1].replace("torch_", "").replace("_padded", ""), best["padded"][0], best["padded"][0] / ms))
    return "\n".join(rows)


@generator("rung15-item-cost")
def gen_rung15_item_cost(ctx, gpu):
    """The cost of a work item: least squares of the time per round of work items (items / 132 SMs)
    against the K/V blocks per item, over N = 512-16k without a mask, per head_dim: the fixed cost
    of an item (intercept) and of a K/V block (slope)."""
    _, t = sweep(ctx, gpu)
    rows = ["**The cost of a work item** (fp16, not causal: time per round of 132 items against K/V blocks per item)\n",
            "| head_dim | K/V block (keys) | per block (µs) | per item, fixed (µs) | fixed share at N=512 |",
            "|--:|--:|--:|--:|--:|"]
    for d in HEAD_DIMS:
        xs, ys = [], []
        for n in SEQLENS:
            items = (16384 // n) * (2048 // d) * math.ceil(n / 128)
            xs.append(math.ceil(n / BLOCK_N[d]))
            ys.append(t["15_persistent", shape(d, n, 0)] * 1e3 / math.ceil(items / SMS))
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
        icpt = my - slope * mx
        rows.append("| %d | %d | %.2f | %.2f | %.0f %% |" % (d, BLOCK_N[d], slope, icpt, 100 * icpt / ys[0]))
    return "\n".join(rows)


def ablation_rates(res):
    """{tag: TFLOP/s} of rung15_ablation.sh's logs in a folder."""
    out = {}
    for f in sorted(os.listdir(res.dir)):
        if f.endswith(".log"):
            with open(res.path(f), encoding="utf-8") as fh:
                m = re.search(r"rate\s+([0-9.]+) TFLOP/s", fh.read())
            if m:
                out[f[:-4]] = float(m.group(1))
    if not out:
        raise Missing("rung 15's ablation logs in %s" % res.gpu, "bench/studies/rung15_ablation.sh")
    return out


@generator("rung15-ablation")
def gen_rung15_ablation(ctx, gpu):
    """Rung 15 / each variant (time ratio: above 1.0 the idea the variant turns off helps) per
    shape of the ablation run, fp16, and on the packed batch in bf16."""
    a = ablation_rates(ctx.results(gpu))
    variants = ["no-persistent", "no-epilogue-overlap", "fifo", "static", "pair-stores", "q2"]
    rows = ["**Ablation** (rung 15 / variant, time ratio: above 1.0 the idea the variant turns off helps)\n",
            "| shape (fp16) | rung 15 (TFLOP/s) | " + " | ".join(variants) + " |", "|---|--:|" + "--:|" * len(variants)]
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


@generator("rung15-tiles")
def gen_rung15_tiles(ctx, gpu):
    """The rung's tile per head_dim and mask (traits.h) against the other candidate tiles of the
    ablation run (TFLOP/s and rung / variant), fp16 and bf16."""
    a = ablation_rates(ctx.results(gpu))
    tiles = {64: ["d64-128x192"], 128: ["d128-128x128", "d128-128x176"], 256: ["d256-128x64"]}
    rows = ["**Tiles** (the rung's tile per head_dim and mask, traits.h, against the other candidates)\n",
            "| shape | dtype | rung 15 (TFLOP/s) | tile variant | its TFLOP/s | rung / variant |", "|---|---|--:|---|--:|--:|"]
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


def ncu_metric(text, name, unit=r"\S+"):
    """The value of metric @p name (in a unit matching @p unit) in an Nsight Compute details page
    (`ncu --page details` text): (unit, number) of its first occurrence."""
    m = re.search(r"^\s+%s\s+(%s)\s+([0-9][0-9,.]*)\s*$" % (re.escape(name), unit), text, re.M)
    if not m:
        raise ValueError("no '%s' in the Nsight Compute output" % name)
    return m.group(1), float(m.group(2).replace(",", ""))


@generator("rung15-ncu-epilogue")
def gen_rung15_ncu_epilogue(ctx, gpu, rung="ncu_rung15_d128_n512_full.txt", cudnn="ncu_cudnn_d128_n512_full.txt"):
    """Two Nsight Compute details pages of one shape, rung 15 (O stored in pairs) beside PyTorch's
    cuDNN kernel: duration, the sectors sent to L2's write path (L2 compression input; 32 bytes
    each) and DRAM throughput."""
    res = ctx.results(gpu)
    pages = []
    for name in (rung, cudnn):
        if not res.has(name):
            raise Missing(name, "ncu --page details on the rung and on cuDNN's kernel")
        with open(res.path(name), encoding="utf-8") as f:
            pages.append(f.read())
    rows = [["duration"] + ["%.1f µs" % ncu_metric(p, "Duration")[1] for p in pages],
            ["sectors sent to L2's write path (L2 compression input)"] +
            ["%.2f M (%.0f MB)" % (s / 1e6, s * 32 / 1e6) for s in (ncu_metric(p, "L2 Compression Input Sectors")[1]
                                                                   for p in pages)],
            ["DRAM throughput"] + ["%.1f %%" % ncu_metric(p, "DRAM Throughput")[1] for p in pages]]
    return "\n".join(["| | rung 15, pair stores | cuDNN |", "|---|--:|--:|"] + ["| " + " | ".join(r) + " |" for r in rows])


@generator("rung15-ncu-sm")
def gen_rung15_ncu_sm(ctx, gpu, d="64", n="512"):
    """Nsight Compute details pages of rung 15 and PyTorch's cuDNN kernel at one head_dim and
    seqlen, not causal and causal (ncu_<rung15|cudnn>_d<d>_n<n>_c<0|1>_full.txt): duration, sectors
    into L2's write path, DRAM bytes (throughput x duration), instructions executed and issue slots
    busy."""
    res = ctx.results(gpu)
    cols = [(who, c) for c in (0, 1) for who in ("rung15", "cudnn")]
    pages = []
    for who, c in cols:
        name = "ncu_%s_d%s_n%s_c%d_full.txt" % (who, d, n, c)
        if not res.has(name):
            raise Missing(name, "ncu --page details on the rung and on cuDNN's kernel")
        with open(res.path(name), encoding="utf-8") as f:
            pages.append(f.read())

    def dram_mb(p):
        return ncu_metric(p, "Memory Throughput", "Tbyte/s")[1] * 1e12 * ncu_metric(p, "Duration")[1] * 1e-6 / 1e6

    rows = [["duration"] + ["%.0f µs" % ncu_metric(p, "Duration")[1] for p in pages],
            ["sectors into L2's write path"] + ["%.2f M" % (ncu_metric(p, "L2 Compression Input Sectors")[1] / 1e6)
                                                for p in pages],
            ["DRAM bytes (throughput x duration)"] + ["%.0f MB" % dram_mb(p) for p in pages],
            ["instructions executed"] + ["%.1f M" % (ncu_metric(p, "Executed Instructions")[1] / 1e6) for p in pages],
            ["issue slots busy"] + ["%.0f %%" % ncu_metric(p, "Issue Slots Busy")[1] for p in pages]]
    head = "| d = %s, %s keys, fp16 | " % (d, n) + " | ".join(
        "%s, %s" % ("rung 15" if who == "rung15" else "cuDNN", "causal" if c else "not causal") for who, c in cols) + " |"
    return "\n".join([head, "|---|" + "--:|" * len(cols)] + ["| " + " | ".join(r) + " |" for r in rows])
