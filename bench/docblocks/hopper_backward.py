"""Rung 14's blocks (the Hopper backward pass) and the packed batch's training blocks (rung 15's
forward with rung 14's backward): the side-by-side of rungs 11 and 14 with PyTorch SDPA's flash and
cuDNN backward passes over one sweep folder (bench/run_all.sh --family backward,backward-gqa), the
ratios of another dtype's sweep, the ablation run (rung14_ablation.sh's output: one
run report per variant and shape), and the packed batch against SDPA on nested and zero-padded
tensors (bench/run_all.sh --family varlen,varlen-backward).

Every block names its folder(s) under bench/results/ with gpu=; several folders are separated by
commas. The sweep's dtype is the one its ladder run's context records."""

import collections
import glob
import os
import re
import statistics

from .core import Missing, bench_module, generator, link, varlen_lengths

SEQLENS = [1024, 2048, 4096, 8192, 16384]


def folders(ctx, gpu):
    """The Results of each comma-separated folder of @p gpu."""
    return [ctx.results(g) for g in gpu.split(",")]


def dtype_of(res):
    return res.json("ladder_bench.json")["context"].get("dtype", "fp16")


#: The backward sweep's families (ladder_bench), by their heads.
HEADS = {"backward": "MHA", "backward-gqa": "GQA 4:1", "backward-gqa8": "GQA 8:1"}


def head_of(fam, d, c):
    return "%s, %s, %s" % (HEADS[fam], d.replace("d", "d = "), "causal" if c == "causal1" else "not causal")


def n_label(n):
    """A seqlen as a column: N=512, N=1k, ..."""
    return "N=%d" % n if n < 1024 else "N=%dk" % (n // 1024)


def seqlens_of(rate):
    """The seqlens a backward sweep folder has (rates()' keys), in order."""
    return sorted({int(k[3][1:]) for k in rate})


def rates(res):
    """{(rung, family, "d128", "N4096", "causal1"): TFLOP/s} of a backward sweep folder; rung
    "14det" is rung 14's deterministic run; variants are left out (the tables show the rungs)."""
    rate = {}
    for b in res.json("ladder_bench.json")["benchmarks"]:
        if "[" in b["name"].split("/")[0]:
            continue
        fam, d, n, c = b["name"].split("/")[1:5]
        rate[("%d" % b["rung"]) + ("det" if "/det/" in b["name"] else ""), fam, d, n, c] = b["TFLOPS"]
    if res.has("torch_sdpa.json"):
        for b in res.json("torch_sdpa.json")["benchmarks"]:
            if b.get("skipped"):
                continue
            fam, d, n, c = b["name"].split("/")[1:5]
            rate[b["rung"], fam, d, n, c] = b["TFLOPS"]
    return rate


#: The rows a backward sweep folder can set against cuDNN: rung 14 through the runner, and the
#: package through PyTorch's autograd (torch_sdpa.py --backends ...,ladder).
MINE = {"14": "rung 14", "torch_ladder": "the package (autograd)"}


def cudnn_cells(rate, mine="14"):
    """(@p mine / cuDNN, cell name) of every cell where both ran, worst first."""
    out = []
    for (rung, fam, d, n, c), v in rate.items():
        cudnn = rate.get(("torch_cudnn", fam, d, n, c))
        if rung == mine and cudnn:
            out.append((v / cudnn, "%s %s %s %s" % (HEADS[fam], d.replace("d", "d="), n_label(int(n[1:])),
                                                    "causal" if c == "causal1" else "not causal")))
    return sorted(out)


def summary(rate, dtype, mine="14"):
    """One line: the worst and best cell of @p mine (MINE) / cuDNN and how many are below 1.0x."""
    ratios = cudnn_cells(rate, mine)
    if not ratios:
        raise Missing("%s beside PyTorch's cuDNN backward" % MINE[mine],
                      "bench/run_all.sh --family backward,backward-gqa" if mine == "14" else
                      "PYTHONPATH=build/release/python bench/run_all.sh --family backward,backward-gqa,backward-gqa8 "
                      "--torch-backends cudnn,ladder")
    below = [r for r in ratios if r[0] < 1.0]
    return "%s: %s / cuDNN from %.2f× (%s) to %.2f× (%s); %d of %d cells below 1.0×." % (
        dtype, MINE[mine], ratios[0][0], ratios[0][1], ratios[-1][0], ratios[-1][1], len(below), len(ratios))


def shapes():
    for fam in HEADS:
        for d in ("d64", "d128", "d256"):
            for c in ("causal0", "causal1"):
                yield fam, d, c


@generator("rung14-backward")
def gen_rung14_backward(ctx, gpu):
    """Rung 14 beside rung 11 and PyTorch SDPA's flash and cuDNN backward, one table per (heads,
    head_dim, mask) of a backward sweep folder: TFLOP/s per seqlen, rung 14's deterministic run, and
    rung 14 / cuDNN; first a line with the worst and best cell."""
    res = ctx.results(gpu)
    rate, dtype = rates(res), dtype_of(res)
    rows = [("11", "rung 11"), ("14", "rung 14"), ("14det", "rung 14 deterministic"),
            ("torch_flash", "PyTorch flash"), ("torch_cudnn", "PyTorch cuDNN")]
    out = [summary(rate, dtype)]
    seqlens = seqlens_of(rate)
    for fam, d, c in shapes():
        if not any(rate.get((k, fam, d, "N%d" % n, c)) for k, _ in rows for n in seqlens):
            continue
        out.append("\n**%s, %s** (TFLOP/s; last row: rung 14 / cuDNN)\n" % (head_of(fam, d, c), dtype))
        out.append("| | " + " | ".join(n_label(n) for n in seqlens) + " |")
        out.append("|---|" + "--:|" * len(seqlens))
        for key, label in rows:
            vals = [rate.get((key, fam, d, "N%d" % n, c)) for n in seqlens]
            if all(v is None for v in vals):
                continue
            out.append("| %s | " % label + " | ".join("%.0f" % v if v else "–" for v in vals) + " |")
        ratio = []
        for n in seqlens:
            a, b = rate.get(("14", fam, d, "N%d" % n, c)), rate.get(("torch_cudnn", fam, d, "N%d" % n, c))
            ratio.append("%.2f×" % (a / b) if a and b else "–")
        out.append("| rung 14 / cuDNN | " + " | ".join(ratio) + " |")
    return "\n".join(out)


@generator("rung14-ratios")
def gen_rung14_ratios(ctx, gpu, mine="14"):
    """Rung 14 / PyTorch's cuDNN backward per cell of a backward sweep folder (in brackets: rung
    14 deterministic / rung 14), one row per (heads, head_dim, mask); first the worst and best cell.
    @p mine=torch_ladder: the package's autograd instead of the runner (no brackets), both from
    torch_sdpa.json, one process."""
    res = ctx.results(gpu)
    rate, dtype = rates(res), dtype_of(res)
    seqlens = seqlens_of(rate)
    det_note = " (in brackets: rung 14 deterministic / rung 14)" if mine == "14" else ""
    out = [summary(rate, dtype, mine) + "\n",
           "**%s: %s / PyTorch cuDNN**%s\n" % (dtype, MINE[mine], det_note),
           "| | " + " | ".join(n_label(n) for n in seqlens) + " |", "|---|" + "--:|" * len(seqlens)]
    for fam, d, c in shapes():
        row = []
        for n in seqlens:
            k = (fam, d, "N%d" % n, c)
            a, b = rate.get((mine,) + k), rate.get(("torch_cudnn",) + k)
            det = rate.get(("14det",) + k) if mine == "14" else None
            cell = "%.2f×" % (a / b) if a and b else "–"
            if a and det:
                cell += " (%.2f)" % (det / a)
            row.append(cell)
        if any(x != "–" for x in row):
            out.append("| %s | " % head_of(fam, d, c) + " | ".join(row) + " |")
    return "\n".join(out)


@generator("torch-inputs-ab")
def gen_torch_inputs_ab(ctx, gpu, files="torch_sdpa_randn.json,torch_sdpa_offset.json"):
    """The package's backward (autograd) against cuDNN's on two input distributions, one
    torch_sdpa.py run each (--inputs randn, --inputs offset: the runner's), in one folder: per
    (head_dim, mask) and seqlen, package / cuDNN on each; then each backend's time on the second
    distribution over the first, from 8k keys (where one cell's time is long enough to read 1 %)."""
    res = ctx.results(gpu)
    names = files.split(",")
    runs = []
    for f in names:
        if not res.has(f):
            raise Missing(f, "bench/pytorch/torch_sdpa.py --family backward --backends cudnn,ladder --inputs ...")
        runs.append({tuple(b["name"].split("/")[:5]): b for b in res.json(f)["benchmarks"] if not b.get("skipped")})
    inputs = [res.json(f)["context"].get("inputs", f) for f in names]
    cells = sorted({k[1:] for k in runs[0]}, key=lambda k: (k[0], int(k[1][1:]), k[3], int(k[2][1:])))
    seqlens = sorted({int(k[2][1:]) for k in cells})
    rows = ["| | " + " | ".join(n_label(n) for n in seqlens) + " |", "|---|" + "--:|" * len(seqlens)]
    for fam, d, c in shapes():
        row = []
        for n in seqlens:
            k = (fam, d, "N%d" % n, c)
            r = [(run.get(("torch_ladder",) + k), run.get(("torch_cudnn",) + k)) for run in runs]
            row.append(" / ".join("%.2f×" % (b["TFLOPS"] / a["TFLOPS"]) if a and b else "–" for b, a in
                                  ((x[0], x[1]) for x in r)))
        if any(x.strip("– /") for x in row):
            rows.append("| %s | " % head_of(fam, d, c) + " | ".join(row) + " |")
    ratio = collections.defaultdict(list)
    for k in cells:
        if int(k[2][1:]) >= 8192:
            for backend in ("torch_ladder", "torch_cudnn"):
                a, b = runs[0].get((backend,) + k), runs[1].get((backend,) + k)
                if a and b:
                    ratio[backend].append(b["real_time"] / a["real_time"])
    ctxt = res.json(names[0])["context"]
    rows += ["", "The package (autograd) / PyTorch cuDNN, TFLOP/s ratio per cell: `--inputs %s` / `--inputs %s`. "
             "Each backend's time on `%s` over its time on `%s`, the cells from 8k keys: the package %s, cuDNN %s. "
             "%s, %s, commit `%s`, PyTorch %s; %s." % (
                 inputs[0], inputs[1], inputs[1], inputs[0],
                 "%.3f–%.3f" % (min(ratio["torch_ladder"]), max(ratio["torch_ladder"])) if ratio["torch_ladder"] else "–",
                 "%.3f–%.3f" % (min(ratio["torch_cudnn"]), max(ratio["torch_cudnn"])) if ratio["torch_cudnn"] else "–",
                 ctxt.get("device", "?"), ctxt.get("date", "?")[:10], ctxt.get("git_sha", "?")[:7],
                 ctxt.get("torch", "?"), ", ".join(link(res, f) for f in names))]
    return "\n".join(rows)


def kv_block_keys(d):
    """Keys per K/V block of rung 14's tiles at head_dim @p d (traits.h's kv_block_keys)."""
    return 64 if d > 128 else 128


@generator("rung14-det-cost")
def gen_rung14_det_cost(ctx, gpu, family="backward"):
    """What the deterministic mode costs per cell of a backward sweep folder (@p family, not
    causal then causal): its time minus the default's (ms), and that difference over the K/V blocks
    of one head that a wave of the grid holds times the waves (µs): the cost per block of a chain
    in which each block's add into a query block waits for the block before it."""
    res = ctx.results(gpu)
    ms = {}
    for b in res.json("ladder_bench.json")["benchmarks"]:
        if "[" in b["name"].split("/")[0] or b.get("run_type", "iteration") != "iteration" or b.get("error_occurred"):
            continue
        fam, d, n, c = b["name"].split("/")[1:5]
        if fam == family and b["rung"] == 14:
            ms[int(d[1:]), int(n[1:]), c == "causal1", "/det/" in b["name"]] = (
                b["real_time"], int(b["batch"]), int(b["heads_q"]))
    if not ms:
        raise Missing("rung 14's %s family in %s" % (family, gpu), "bench/run_all.sh --family %s" % family)
    sms = int(res.json("ladder_bench.json")["context"].get("sms", 0) or 0)
    seqlens = sorted({k[1] for k in ms})
    out = ["| head_dim, mask | | " + " | ".join(n_label(n) for n in seqlens) + " |", "|---|---|" + "--:|" * len(seqlens)]
    for d in sorted({k[0] for k in ms}):
        for c in (False, True):
            extra, per = [], []
            for n in seqlens:
                a, b = ms.get((d, n, c, False)), ms.get((d, n, c, True))
                if a is None or b is None:
                    extra.append("–")
                    per.append("–")
                    continue
                (a, batch, heads), b = a, b[0]
                blocks = -(-n // kv_block_keys(d))
                tiles = blocks * heads * batch
                waves = tiles / float(sms) if sms else 0
                chain = min(blocks, sms)
                extra.append("%.3f" % (b - a))
                per.append("%.2f" % ((b - a) * 1e3 / (waves * chain)) if waves else "–")
            label = "d = %d, %s" % (d, "causal" if c else "not causal")
            out.append("| %s | deterministic - default (ms) | " % label + " | ".join(extra) + " |")
            out.append("| | per block of a wave's chain (µs) | " + " | ".join(per) + " |")
    ctxt = res.json("ladder_bench.json")["context"]
    out += ["", "%s, %s, commit `%s`, %s, the %s family's shapes, the runner's median times (D and the dQ "
            "conversion included); a wave is %s K/V blocks (one per SM), a chain the K/V blocks of one head in a "
            "wave (at most a wave's); per block: the difference / (waves x chain). From %s." % (
                ctxt.get("device", "?"), str(ctxt.get("date", "?"))[:10], str(ctxt.get("git_sha", "?"))[:7],
                dtype_of(res), family, sms or "?", link(res, "ladder_bench.json"))]
    return "\n".join(out)


@generator("rung14-ablation")
def gen_rung14_ablation(ctx, gpu):
    """Rung 14 and each ablation variant (TFLOP/s of its run report) at d = 64 and 128, 4k and 16k
    keys, causal or not, fp16; and the rung in bf16."""
    res = ctx.results(gpu)
    names = [("rung", "rung 14"), ("no-ws", "no-ws"), ("atomic-dq", "atomic-dq"), ("ss-dkv", "ss-dkv"),
             ("one-stage", "one-stage"), ("unfused-prep", "unfused-prep")]
    cols = [(d, n, c) for d in (64, 128) for c in (0, 1) for n in (4096, 16384)]

    def cell(name):
        return "%.0f" % res.json(name)["timing"]["tflops"] if res.has(name) else "–"

    out = ["| variant | " + " | ".join("d%d %dk%s" % (d, n // 1024, " causal" if c else "") for d, n, c in cols) + " |",
           "|---|" + "--:|" * len(cols)]
    for key, label in names:
        cells = [cell("fp16_d%d_N%d_c%d_%s.json" % (d, n, c, key)) for d, n, c in cols]
        if key != "rung" and all(x == "–" for x in cells):
            continue  # a variant this run predates (unfused-prep: added after the H100's ablation run)
        out.append("| %s | " % label + " | ".join(cells) + " |")
    out.append("| rung 14, bf16 | " + " | ".join(cell("bf16_d%d_N%d_c%d_rung.json" % (d, n, c)) for d, n, c in cols) + " |")
    return "\n".join(out)


# ---- the packed batch (varlen and varlen-backward families) ------------------------------------

BACKENDS = ("flash", "cudnn")


def times(res):
    """{(rung, shape): median ms} of a folder's bench and PyTorch runs; shape like "varlen/d128/S64/causal1"."""
    out = {}
    for f in ("ladder_bench.json", "torch_sdpa.json"):
        if not res.has(f):
            continue
        for b in res.json(f)["benchmarks"]:
            if b.get("skipped"):
                continue
            rung, shape = b["name"].split("/", 1)
            out[rung, shape.replace("/iterations:1/manual_time", "")] = b["real_time"]
    return out


def meta_text(res):
    m = res.meta
    return "%s, %s, commit %s" % (m["device"], m["date"][:10], m["git_sha"][:7])


def best(t, way, causal, passes):
    """(backend, ms) of the backend whose sum over @p passes ("varlen", "varlen-backward") is least."""
    cand = []
    for be in BACKENDS:
        keys = [("torch_%s_%s" % (be, way), "%s/d128/S64/causal%d" % (p, causal)) for p in passes]
        if all(k in t for k in keys):
            cand.append((sum(t[k] for k in keys), be))
    if not cand:
        raise Missing("SDPA's %s packed batch" % way, "bench/run_all.sh --family varlen,varlen-backward")
    ms, be = min(cand)
    return be, ms


def packed_runs(ctx, gpu):
    return [(dtype_of(r), times(r), r) for r in folders(ctx, gpu)]


@generator("packed-training")
def gen_packed_training(ctx, gpu):
    """The packed batch, forward + backward: rung 15's forward and rung 14's backward against the
    best PyTorch SDPA backend on the same batch as nested and as zero-padded tensors (a backend's
    forward and backward summed), one row per dtype (folder in gpu=) and mask."""
    _, lens = varlen_lengths()
    tokens = sum(lens)
    runs = packed_runs(ctx, gpu)
    rows = ["**A packed batch, forward + backward** (%d sequences of %d-%d tokens, %d tokens, 32/8 heads, d = 128; "
            "%s)\n" % (len(lens), min(lens), max(lens), tokens, "; ".join("%s: %s" % (dt, meta_text(r)) for dt, _, r in runs)),
            "| dtype | mask | rung 15 fwd (ms) | rung 14 bwd (ms) | fwd + bwd (ms) | tokens/s | best SDPA nested, fwd + bwd "
            "| ladder / it | best SDPA padded, fwd + bwd | ladder / it |",
            "|---|---|--:|--:|--:|--:|---|--:|---|--:|"]
    for dtype, t, _ in runs:
        for c in (0, 1):
            f = t["15_persistent", "varlen/d128/S64/causal%d" % c]
            b = t["14_hopper_backward", "varlen-backward/d128/S64/causal%d" % c]
            nb, nms = best(t, "nested", c, ("varlen", "varlen-backward"))
            pb, pms = best(t, "padded", c, ("varlen", "varlen-backward"))
            rows.append("| %s | %s | %.1f | %.1f | %.1f | %.2fM | %s %.1f ms | %.2f× | %s %.1f ms | %.2f× |" % (
                dtype, "causal" if c else "none", f, b, f + b, tokens / ((f + b) * 1e-3) / 1e6, nb, nms, nms / (f + b),
                pb, pms, pms / (f + b)))
    return "\n".join(rows)


@generator("packed-backward")
def gen_packed_backward(ctx, gpu):
    """The packed batch's backward pass alone: rung 14 (ms, TFLOP/s at 2.5 x the forward's FLOPs of
    each sequence's own pairs) against the best SDPA backend, nested and padded."""
    mod, lens = varlen_lengths()
    s = dict(heads_q=32, head_dim=128, lens=lens)
    rows = ["**The backward pass alone** (TFLOP/s: 2.5 x the forward's FLOPs, each sequence's own pairs)\n",
            "| dtype | mask | rung 14 (ms) | TFLOP/s | best SDPA nested | rung 14 / it | best SDPA padded | rung 14 / it |",
            "|---|---|--:|--:|---|--:|---|--:|"]
    for dtype, t, _ in packed_runs(ctx, gpu):
        for c in (0, 1):
            b = t["14_hopper_backward", "varlen-backward/d128/S64/causal%d" % c]
            nb, nms = best(t, "nested", c, ("varlen-backward",))
            pb, pms = best(t, "padded", c, ("varlen-backward",))
            flops = 2.5 * mod.forward_flops(dict(s, causal=c))
            rows.append("| %s | %s | %.1f | %.0f | %s %.1f ms | %.2f× | %s %.1f ms | %.2f× |" % (
                dtype, "causal" if c else "none", b, flops / (b * 1e-3) / 1e12, nb, nms, nms / b, pb, pms, pms / b))
    return "\n".join(rows)


@generator("packed-dense")
def gen_packed_dense(ctx, gpu):
    """Rung 14 / cuDNN per shape of a dense backward run (its default mode: atomic dQ order), the
    range first."""
    res = ctx.results(gpu)
    t = times(res)
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
    if not ratios:
        raise Missing("rung 14 beside cuDNN in %s" % gpu, "bench/run_all.sh --family backward --torch-backends cudnn")
    return ("**Rung 14's dense backward / cuDNN in one run** (%s; the backward family, quick grid: %.2f-%.2f×)\n\n"
            % (meta_text(res), min(ratios), max(ratios))) + "\n".join(rows)


@generator("rung14-group-split")
def gen_rung14_group_split(ctx, gpu):
    """rung14_split_model.py's list-schedule model of rung 14's causal grid per GQA shape (efficiency
    unsplit and split in 4, the split it predicts) beside the measured fullsplit / nosplit ratio of
    each folder in gpu= (a backward-gqa run with the variants, or a folder of the rung's run
    reports of one shape)."""
    mod = bench_module("rung14_split_model")
    meas = mod.measured([ctx.results(g).dir for g in gpu.split(",")])
    rows = ["| shape | efficiency unsplit | split in 4 | predicted split | measured fullsplit / nosplit |",
            "|---|--:|--:|--:|--:|"]
    shapes = [(16384 // n, n, 2048 // d, 2048 // d // 4, d, 1) for d in (64, 128, 256)
              for n in (1024, 2048, 4096, 8192, 16384)]
    shapes.append((2, 4096, 16, 4, 128, 1))  # the training demo's attention
    for b, n, hq, hkv, d, c in shapes:
        m = meas.get((b, d, n, c), [])
        rows.append("| B=%d, N=%dk, %d/%d heads, d=%d%s | %.2f | %.2f | %d | %s |" % (
            b, n // 1024, hq, hkv, d, ", causal" if c else "", mod.efficiency(b, n, hq, hkv, d, c, 1),
            mod.efficiency(b, n, hq, hkv, d, c, 4), mod.predicted_split(b, n, hq, hkv, d, c),
            " ".join("%.2f" % x for x in m) if m else "–"))
    return "\n".join(rows)


# ---- sentences that quote the sweeps' figures ------------------------------------------------------


def span_text(values, unit="x"):
    """ "0.97-1.16x" of the values (two decimals)."""
    return "%.2f-%.2f%s" % (min(values), max(values), unit)


def cell_ratios(rate, num, den, fam=None, d=None):
    """[num / den] over the cells of @p rate where both ran, optionally of one family and head_dim."""
    out = []
    for (rung, f, dd, n, c), v in sorted(rate.items()):
        if rung == num and (fam is None or f == fam) and (d is None or dd == d) and rate.get((den, f, dd, n, c)):
            out.append(v / rate[den, f, dd, n, c])
    return out


@generator("rung14-summary")
def gen_rung14_summary(ctx, gpu):
    """One line of a backward sweep folder: the worst and best cell of rung 14 / cuDNN and how many
    cells are below 1.0x."""
    res = ctx.results(gpu)
    return summary(rates(res), dtype_of(res))


@generator("rung14-cudnn")
def gen_rung14_cudnn(ctx, gpu):
    """A paragraph over two backward sweep folders (gpu=FIRST,SECOND, e.g. fp16 and bf16): rung 14 /
    cuDNN per head_dim in the first, the cells below 1.0x and the worst, the second's range, and
    rung 14 / SDPA's flash backend over both."""
    (r1, r2) = folders(ctx, gpu)
    a, b = rates(r1), rates(r2)
    per_d = ", ".join("%s at d = %s" % (span_text(cell_ratios(a, "14", "torch_cudnn", d="d%d" % d)), d)
                      for d in (128, 64, 256))
    all1, all2 = cell_ratios(a, "14", "torch_cudnn"), cell_ratios(b, "14", "torch_cudnn")
    flash = cell_ratios(a, "14", "torch_flash") + cell_ratios(b, "14", "torch_flash")
    return ("**Against cuDNN.** In this run rung 14 / cuDNN's backward is %s in %s (%d of %d cells below "
            "1.0x, the worst %.2fx), and %s in %s (%d of %d below 1.0x); rung 14 / SDPA's flash backend, %s." % (
                per_d, dtype_of(r1), sum(r < 1 for r in all1), len(all1), min(all1), span_text(all2),
                dtype_of(r2), sum(r < 1 for r in all2), len(all2), span_text(flash)))


@generator("rung14-run-spread")
def gen_rung14_run_spread(ctx, gpu):
    """Two backward sweep folders of the same cells (gpu=EARLIER,LATER): how far each of rung 11,
    rung 14 and cuDNN moved per cell in TFLOP/s (least and most, and the mean)."""
    (r1, r2) = folders(ctx, gpu)
    a, b = rates(r1), rates(r2)
    parts = []
    for key, name in (("11", "rung 11"), ("14", "rung 14"), ("torch_cudnn", "cuDNN")):
        ch = [100 * (b[k] / v - 1) for k, v in sorted(a.items()) if k[0] == key and k in b]
        if not ch:
            raise Missing("%s in both %s" % (name, gpu), "bench/run_all.sh --family backward,backward-gqa")
        parts.append("%s moved by %+.1f%% to %+.1f%% per cell (%.1f%% %s on average)" % (
            name, min(ch), max(ch), abs(sum(ch) / len(ch)), "lower" if sum(ch) < 0 else "higher"))
    return ("Between the two runs (`%s`, then `%s`; TFLOP/s per cell of the same shapes) %s." % (
        r1.gpu, r2.gpu, "; ".join(parts)))


@generator("rung14-deterministic")
def gen_rung14_deterministic(ctx, gpu):
    """Rung 14's deterministic run / its default run per head_dim over backward sweep folders
    (gpu=FIRST[,SECOND]), and the cells at d = 256 below 0.8x."""
    out = []
    for i, res in enumerate(folders(ctx, gpu)):
        rate = rates(res)
        per = [(d, cell_ratios(rate, "14det", "14", d="d%d" % d)) for d in (64, 128, 256)]
        per = [(d, r) for d, r in per if r]
        if not per:
            raise Missing("rung 14's deterministic run in %s" % res.gpu, "bench/run_all.sh --family backward")
        text = ", ".join("%s at d = %d" % (span_text(r), d) for d, r in per)
        d256 = dict(per).get(256, [])
        if d256:
            text += " (at d = 256, %d of %d cells below 0.8x)" % (sum(r < 0.8 for r in d256), len(d256))
        out.append("%s: %s" % (dtype_of(res), text))
    return "**Deterministic mode**, its time / the default's as a rate: " + "; ".join(out) + "."


@generator("rung14-ablation-ratios")
def gen_rung14_ablation_ratios(ctx, gpu):
    """Each ablation variant's rate / the rung's over the ablation folder's fp16 shapes (least and
    most): what turning that idea off costs."""
    res = ctx.results(gpu)
    parts = []
    for v in ("atomic-dq", "no-ws", "ss-dkv", "one-stage", "unfused-prep"):
        rs = []
        for d in (64, 128):
            for n in (4096, 16384):
                for c in (0, 1):
                    a, b = ("fp16_d%d_N%d_c%d_%s.json" % (d, n, c, x) for x in (v, "rung"))
                    if res.has(a) and res.has(b):
                        rs.append(res.json(a)["timing"]["tflops"] / res.json(b)["timing"]["tflops"])
        if rs:
            parts.append("`%s` %s" % (v, span_text(rs)))
    if not parts:
        raise Missing("rung 14's ablation runs in %s" % gpu, "bench/studies/rung14_ablation.sh")
    return "Each variant's rate / the rung's (fp16, the table's shapes): " + ", ".join(parts) + "."


@generator("rung14-grid-order")
def gen_rung14_grid_order(ctx, gpu, d="128", causal="0"):
    """Rung 14 before and after a change of its grid order (gpu=BEFORE,AFTER: two backward runs),
    TFLOP/s per seqlen at one head_dim and mask (MHA)."""
    (r1, r2) = folders(ctx, gpu)
    a, b = rates(r1), rates(r2)
    rows = ["| grid | " + " | ".join("N=%dk" % (n // 1024) for n in SEQLENS) + " |", "|---|" + "--:|" * len(SEQLENS)]
    for label, r in (("K/V block slowest (`%s`)" % r1.gpu.split("/")[-1], a), ("K/V block fastest (`%s`)" % r2.gpu.split("/")[-1], b)):
        vals = [r.get(("14", "backward", "d" + d, "N%d" % n, "causal" + causal)) for n in SEQLENS]
        rows.append("| %s | " % label + " | ".join("%.0f" % v if v else "–" for v in vals) + " |")
    return "\n".join(rows) + "\n\nRung 14, MHA, d = %s%s, fp16, TFLOP/s." % (d, ", causal" if causal == "1" else "")


# ---- the passes around the kernel (bench/studies/rung14_prep_ab.sh) -----------------------------


def prep_of(run):
    """"fused" or "unfused": the passes a run report's kernel list shows (bwd_prep: the one pre-pass)."""
    names = [k["name"] for k in run.get("kernels", [])]
    if any(n.startswith("bwd_prep") for n in names):
        return "fused"
    if any(n.startswith("bwd_stats") for n in names):
        return "unfused"
    raise ValueError("a rung 14 run report without its pre-pass in the kernel list")


def pass_bytes(prob, o32):
    """Compulsory bytes of the two passes per query row and head: the pre-pass reads O (fp32 when
    D comes from the fp32 O) and dO, reads LSE, writes the fp32 accumulator's zeros, LSE·log2(e)
    and D; the convert reads the accumulator and writes dQ (16-bit)."""
    d = prob["head_dim"]
    rows = prob["batch"] * prob["seqlen_q"] * prob["heads_q"]
    pre = (4 * d if o32 else 2 * d) + 2 * d + 4 + 4 * d + 8
    return rows * (pre + 4 * d + 2 * d)


def ab_runs(res):
    """{shape: {entry: [run report, ...]}} of a rung14_prep_ab.sh folder (<shape>_<entry>_r<i>.json;
    entry "rung" or the variant), and one of the reports (its device, date and commit)."""
    runs = collections.defaultdict(lambda: collections.defaultdict(list))
    meta = None
    for path in sorted(glob.glob(res.path("*_r[0-9]*.json"))):
        m = re.match(r"(.+_c[01])_(.+)_r\d+\.json$", os.path.basename(path))
        if m:
            run = res.json(os.path.basename(path))
            log = path[:-len(".json")] + ".log"
            if os.path.exists(log):  # the report's problem line (the masks and modifiers, on any commit)
                with open(log, encoding="utf-8") as f:
                    run["problem_line"] = next((line.split(None, 1)[1].strip() for line in f
                                                if line.strip().startswith("problem ")), "")
            runs[m.group(1)][m.group(2)].append(run)
            meta = meta or run
    return runs, meta


def median_ms(runs):
    """The median over the rounds of each run's median time."""
    xs = sorted(r["timing"]["median_ms"] for r in runs)
    return (xs[(len(xs) - 1) // 2] + xs[len(xs) // 2]) / 2


def ab_checks(res, shape):
    """Each entry's check run of @p shape, as its log says: "PASS (full)", "FAIL (sample)", "PASS
    (coverage)" (every element written, the gradients not compared: one group above the fp64
    reference's work cap); – none."""
    out = []
    for log in sorted(glob.glob(res.path(shape + "_*_check.log"))):
        with open(log, encoding="utf-8") as f:
            text = f.read()
        m = re.search(r"check +(PASS|FAIL)[^\n]*\((full|sample)\)", text)
        cover = re.search(r"check +(PASS|FAIL): every element of dQ, dK, dV written", text)
        out.append("%s (%s)" % m.groups() if m else "%s (coverage)" % cover.group(1) if cover else "?")
    return " ".join(out) if out else "–"


def ab_shapes(runs):
    """The shapes by head_dim, keys, dtype and mask."""
    def order(shape):
        p = next(iter(runs[shape].values()))[0]["problem"]
        return p["head_dim"], p["seqlen_k"], p["dtype"], p["causal"]

    return sorted(runs, key=order)


def shape_cell(prob):
    return "%s, %d, %d, %d, %d/%d, %s" % (prob["dtype"], prob["head_dim"], prob["seqlen_k"], prob["batch"],
                                        prob["heads_q"], prob["heads_kv"], "yes" if prob["causal"] else "no")


def ab_commit(meta):
    """The report's commit, 7 digits (or as gen_rung14_ab's rung_at spelled it)."""
    sha = meta.get("git_sha", "")
    return sha if "`" in sha else sha[:7]


def ab_caption(meta, what, pass_="backward"):
    """@p pass_: what the runner timed and checked, "backward" (rung 14's, rung 16's backward entry)
    or "forward" (BINARY=16_masks with a forward entry)."""
    checks = ("full: every (batch, KV head) group; sample: two; coverage: every element written, the gradients not "
              "compared, one group being above the reference's work cap" if pass_ == "backward" else
              "full: every row; sample: a sample of rows")
    return ("%s, %s, commit `%s`; time of the whole %s (median of 50 launches, L2 flushed), median over the "
            "rounds; %s; checks: the study's check run of each entry against the fp64 %s reference (%s; – where it "
            "did not finish)." % (meta["device"]["name"], meta["date"][:10], ab_commit(meta), pass_, what, pass_,
                                  checks))


@generator("rung14-prep-ab")
def gen_rung14_prep_ab(ctx, gpu):
    """The whole backward (pre-pass, kernel, convert) with the unfused and the fused passes, per
    shape of rung14_prep_ab.sh's folder (which entry ran which passes: its kernel list): median over
    the rounds of each run's median time, the difference, and the two passes' compulsory bytes over
    the device's DRAM peak (their floor)."""
    res = ctx.results(gpu)
    runs, meta = ab_runs(res)
    if not runs:
        raise Missing("rung 14's pre- and post-pass A/B in %s" % gpu, "bench/studies/rung14_prep_ab.sh")
    rows = ["| dtype, d, seqlen, batch, heads (q/kv), causal | unfused passes (ms) | fused passes (ms) | "
            "fused / unfused | saved (µs) | the two passes' bytes (MB) | their floor at DRAM peak (µs) | "
            "rounds | checks |", "|---|--:|--:|--:|--:|--:|--:|--:|---|"]
    for shape in ab_shapes(runs):
        by = collections.defaultdict(list)
        for entry_runs in runs[shape].values():
            for run in entry_runs:
                by[prep_of(run)].append(run)
        if "fused" not in by or "unfused" not in by:
            continue
        u, f = median_ms(by["unfused"]), median_ms(by["fused"])
        run = by["fused"][0]
        o32 = any("fp32 O" in n for n in run.get("notes", []))
        b = pass_bytes(run["problem"], o32)
        floor_us = b / (run["device"]["peak_gbps"] * 1e9) * 1e6
        rows.append("| %s | %.3f | %.3f | %.2f× | %.0f | %.0f | %.0f | %d | %s |" % (
            shape_cell(run["problem"]), u, f, f / u, (u - f) * 1e3, b / 1e6, floor_us,
            min(len(by["fused"]), len(by["unfused"])), ab_checks(res, shape)))
    rows += ["", ab_caption(meta, "the passes each entry ran, from its kernel list")]
    return "\n".join(rows)


def modifiers_of(run):
    """The masks and score modifiers of a run, in words (the forward A/B's caption): from its
    report's problem line (describe(): "window=(l,r)", "softcap=50", "alibi", ...; reports before
    the JSON's problem named them have only the line)."""
    words = run.get("problem_line", "").split()
    mods = [w.replace("=", " ") for w in words if w.split("=")[0] in
            ("window", "prefix", "docs", "softcap", "alibi", "sinks", "dropout")]
    return ", ".join(mods) or "no mask or modifier beyond causal"


@generator("rung14-ab")
def gen_rung14_ab(ctx, gpu, other, rung_at=None, base="rung 14", tree_at=None, pass_="backward"):
    """The rung against one of its variants (@p other), per shape of a rung14_prep_ab.sh folder run
    with OTHER=@p other: median over the rounds of each entry's median time and their ratio.
    @p rung_at: the commit of steps/14_hopper_backward/ when the binary was built from an older
    rung 14 over the tree its reports name (their git_sha), as the folder's README says. @p base:
    the column of the folder's base entry (BINARY=16_masks BASE=backward: "rung 16's backward",
    with underscores for spaces in the marker). @p tree_at: the commit whose tree was built, where the
    build was the reports' commit with that commit's diff applied (its README says so). @p pass_:
    "forward" where the entries are forwards (rung 16's softcap-exp-fma study)."""
    res = ctx.results(gpu)
    runs, meta = ab_runs(res)
    if tree_at:
        meta = dict(meta, git_sha="%s`, built as `%s` with its diff applied; the reports name `%s" % (
            tree_at, meta.get("git_sha", "")[:7], meta.get("git_sha", "")[:7]))
    if rung_at:
        meta = dict(meta, git_sha="%s` with rung 14 at `%s" % (meta.get("git_sha", "")[:7], rung_at))
    shapes = [s for s in ab_shapes(runs) if "rung" in runs[s] and other in runs[s]]
    if not shapes:
        raise Missing("rung 14 against %s in %s" % (other, gpu), "OTHER=%s bench/studies/rung14_prep_ab.sh" % other)
    rows = ["| dtype, d, seqlen, batch, heads (q/kv), causal | %s (ms) | `%s` (ms) | `%s` / rung | rounds | "
            "checks |" % (base.replace("_", " "), other, other), "|---|--:|--:|--:|--:|---|"]
    for shape in shapes:
        r, o = runs[shape]["rung"], runs[shape][other]
        rows.append("| %s | %.3f | %.3f | %.2f× | %d | %s |" % (
            shape_cell(r[0]["problem"]), median_ms(r), median_ms(o), median_ms(o) / median_ms(r), min(len(r), len(o)),
            ab_checks(res, shape)))
    modes = {bool(run.get("deterministic")) for s in shapes for e in ("rung", other) for run in runs[s][e]}
    mode = {(True,): "deterministic mode (dQ summed in key order)",
            (False,): "not deterministic (dQ summed in any order)"}.get(tuple(modes), "deterministic on some runs")
    if pass_ == "forward":
        mode = "; ".join(sorted({modifiers_of(run) for s in shapes for run in runs[s]["rung"]}))
    rows += ["", ab_caption(meta, "%s; `%s` / rung below 1.0× is the variant faster" % (mode, other), pass_)]
    return "\n".join(rows)


# ---- rung 14's kernel and its fp8-dq variants under Nsight Compute (rung14_fp8dq_ncu.sh) --------

NCU_STALLS = ["barrier", "short_scoreboard", "wait", "long_scoreboard", "mio_throttle", "math_pipe_throttle",
              "not_selected", "dispatch_stall"]


def ncu_details(path):
    """{metric: float} of the first kernel of an `ncu --csv` export (details page: one row per metric)."""
    import csv
    with open(path, encoding="utf-8", newline="") as f:
        rows = [r for r in csv.reader(line for line in f if line.startswith('"'))]
    head, out = rows[0], {}
    mi, vi, ki = head.index("Metric Name"), head.index("Metric Value"), head.index("ID")
    first = rows[1][ki]
    for r in rows[1:]:
        if r[ki] == first:
            out[r[mi]] = float(r[vi].replace(",", ""))
    return out


@generator("rung14-fp8dq-ncu")
def gen_rung14_fp8dq_ncu(ctx, gpu, variants="rung,fp8-dq-tile,fp8-dq"):
    """Per variant of rung14_fp8dq_ncu.sh's folder: the kernel's time, instructions, issue slots and
    tensor pipe, and each stall reason as warp-cycles in all (ncu's stall per issued instruction times
    the instructions issued), so that the variants' columns add up against each other."""
    res = ctx.results(gpu)
    names = variants.split(",")
    m = {}
    for v in names:
        f = "ncu_%s.csv" % v
        if not res.has(f):
            raise Missing(f, "bench/studies/rung14_fp8dq_ncu.sh")
        m[v] = ncu_details(res.path(f))
    inst = {v: m[v]["smsp__inst_executed.sum"] for v in names}
    rows = ["| | " + " | ".join("`%s`" % v if v != "rung" else "rung 14" for v in names) + " |",
            "|---|" + "--:|" * len(names),
            "| kernel time (ms) | " + " | ".join("%.3f" % (m[v]["gpu__time_duration.sum"] / 1e6) for v in names) + " |",
            "| warp instructions issued (M) | " + " | ".join("%.0f" % (inst[v] / 1e6) for v in names) + " |",
            "| issue slots busy | " + " | ".join(
                "%.1f %%" % m[v]["smsp__issue_active.avg.pct_of_peak_sustained_active"] for v in names) + " |",
            "| tensor pipe busy | " + " | ".join(
                "%.1f %%" % m[v]["sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active"]
                for v in names) + " |",
            "| shared-memory wavefronts (M) | " + " | ".join(
                "%.0f" % (m[v]["l1tex__data_pipe_lsu_wavefronts_mem_shared.sum"] / 1e6) for v in names) + " |"]
    for r in NCU_STALLS:
        key = "smsp__average_warps_issue_stalled_%s_per_issue_active.ratio" % r
        rows.append("| stalled: %s (M warp-cycles) | " % r.replace("_", " ") + " | ".join(
            "%.0f" % (m[v][key] * inst[v] / 1e6) for v in names) + " |")
    cmd = open(res.path("ncu_%s.cmd" % names[0]), encoding="utf-8").read().split(None, 1)[1].strip()
    rows += ["", "Nsight Compute, the first `bwd_hopper` launch of `14_hopper_backward %s` per variant, at ncu's "
             "default clocks; stalls: `smsp__average_warps_issue_stalled_<reason>_per_issue_active` times "
             "`smsp__inst_executed`; %s." % (cmd.replace("--variant fp8-dq-tile ", "").replace("--variant fp8-dq ", ""),
                                             ", ".join(link(res, "ncu_%s.csv" % v) for v in names))]
    return "\n".join(rows)


# ---- fp8-dq's checks against fp64, from a smoke folder's run reports, and its emulation ----------

def smoke_runs(res, folder="smoke", variants=("fp8-dq", "fp8-dq-tile")):
    """The runs of a smoke folder (summary.txt: "<variant> <runner args> -> rc=.. PASS|FAIL", run n in
    <variant>_<n>.log) of @p variants, each as a dict: variant, args, the problem line's fields, and
    per gradient (rel_fro, tol) from the report's check lines."""
    out = []
    with open(res.path(folder + "/summary.txt"), encoding="utf-8") as f:
        lines = [line.rstrip("\n") for line in f if line.strip()]
    for n, line in enumerate(lines, 1):
        variant, rest = line.split(" ", 1)
        if variant not in variants:
            continue
        args = rest.split(" -> ")[0]
        with open(res.path("%s/%s_%d.log" % (folder, variant, n)), encoding="utf-8") as f:
            text = f.read()
        prob = dict(kv.split("=", 1) for kv in re.search(r"problem\s+(.*)", text).group(1).split() if "=" in kv)
        prob["dtype"] = re.search(r"problem\s+.*? (bf16|fp16) ", text).group(1)
        grads = {g: (float(a), float(b)) for g, a, b in
                 re.findall(r"(dQ|dK|dV) rel_fro ([0-9.e+-]+) \(tol ([0-9.e+-]+)\)", text)}
        run = re.search(r"run\s+(\S+), commit (\w+)", text)
        check = re.search(r"check\s+(PASS|FAIL)", text)
        out.append(dict(variant=variant, args=args, prob=prob, grads=grads, date=run.group(1)[:10], commit=run.group(2),
                        device=re.search(r"device\s+(.*?) \(", text).group(1), check=check.group(1) if check else "–"))
    return out


def smoke_shape(r):
    """dtype, d, the batch in words, mask and input of a smoke run."""
    a, p = r["args"], r["prob"]
    if "--seqlens-q" in a:
        batch = "packed " + re.search(r"--seqlens-q (\S+)", a).group(1).replace(",", ", ") + " tokens"
    else:
        batch = "B%s, %s quer%s x %s keys, heads %s" % (p["B"], p["Sq"], "y" if p["Sq"] == "1" else "ies", p["Sk"], p["H"])
    extra = ", deterministic" if "--deterministic 1" in a else ""
    return "%s, %s, %s, %s%s, %s" % (p["dtype"], p["d"], batch, "causal" if p["causal"] == "1" else "not causal",
                                    extra, p["input"])


@generator("rung14-fp8dq-checks")
def gen_rung14_fp8dq_checks(ctx, gpu, folder="smoke"):
    """Each fp8-dq and fp8-dq-tile run of a smoke folder (`--check full` against the fp64 backward
    reference): its shape and input, dQ's, dK's and dV's relative Frobenius error, and the check."""
    res = ctx.results(gpu)
    runs = smoke_runs(res, folder)
    if not runs:
        raise Missing("fp8-dq runs in %s/%s" % (gpu, folder), "the smoke runs of rung 14's fp8-dq (README)")
    rows = ["| variant | dtype, d, batch, mask, input | dQ (bound) | dK | dV | check |", "|---|---|--:|--:|--:|---|"]
    for r in runs:
        g = r["grads"]
        rows.append("| `%s` | %s | %.2e (%.2e) | %.2e | %.2e | %s |" % (
            r["variant"], smoke_shape(r), g["dQ"][0], g["dQ"][1], g["dK"][0], g["dV"][0], r["check"]))
    commits = sorted({r["commit"] for r in runs})
    rows += ["", "%s, %s, commit %s; `14_hopper_backward --variant <variant> <shape> --check full --iters 3`, "
             "relative Frobenius error against the fp64 backward reference (every (batch, KV head) group); %s." % (
                 runs[0]["device"], runs[0]["date"], ", ".join("`%s`" % c for c in commits),
                 link(res, folder + "/summary.txt"))]
    return "\n".join(rows)


@generator("rung14-fp8dq-emulated")
def gen_rung14_fp8dq_emulated(ctx, gpu, emu):
    """The kernel's dQ error on the outlier input under the causal mask (smoke runs of @p gpu,
    fp8-dq and fp8-dq-tile) beside fp8_dq_scales.py's emulation of the same shape (@p emu:
    comma-separated folders, one per seed and (d, dtype)): the range over the seeds of fp8-dq's,
    fp8-dq-tile's and two scales per row's."""
    res = ctx.results(gpu)
    runs = [r for r in smoke_runs(res) if r["prob"]["input"] == "outlier" and r["prob"]["causal"] == "1"]
    emus = collections.defaultdict(list)  # (d, dtype) -> [(seed, rows)]
    folders = [ctx.results(e) for e in emu.split(",")]
    for f in folders:
        j = f.json("fp8_dq_scales.json")
        emus[(j["meta"]["shape"]["head_dim"], j["meta"]["dtype"])].append((j["meta"]["seed"], j["rows"]))

    def emu_range(key, prefix):
        vals = [r["rel_fro_dq"] for _, rows in emus[key] for r in rows
                if r["input"] == "outlier" and r["causal"] and r["config"].startswith(prefix)]
        return "%.2e to %.2e" % (min(vals), max(vals)) if vals else "–"

    def kernel(d, dtype, variant):
        v = [r["grads"]["dQ"][0] for r in runs if r["variant"] == variant and int(r["prob"]["d"]) == d
             and r["prob"]["dtype"] == dtype]
        return "%.2e" % v[0] if v else "–"

    rows = ["| d, dtype | kernel, per row | emulated, per row | kernel, per tile | emulated, per tile | "
            "emulated, per row and 64-key half |", "|---|--:|--:|--:|--:|--:|"]
    for d, dtype in sorted(emus, reverse=True):
        rows.append("| %d, %s | %s | %s | %s | %s | %s |" % (
            d, dtype, kernel(d, dtype, "fp8-dq"), emu_range((d, dtype), "fp8-dq:"), kernel(d, dtype, "fp8-dq-tile"),
            emu_range((d, dtype), "fp8-dq-tile:"), emu_range((d, dtype), "dS per query row of each 64-key half")))
    seeds = sorted({s for v in emus.values() for s, _ in v})
    shapes = sorted({"%d heads, %d keys" % (f.json("fp8_dq_scales.json")["meta"]["shape"]["heads"],
                                           f.json("fp8_dq_scales.json")["meta"]["shape"]["seqlen"]) for f in folders})
    rows += ["", "dQ's relative Frobenius error, outlier input, causal. Kernel: the smoke runs (%s). Emulated: "
             "`bench/studies/fp8_dq_scales.py` at %s, seeds %s (%s)." % (
                 link(res, "smoke/summary.txt"), ", ".join(shapes), ", ".join(str(s) for s in seeds),
                 ", ".join(link(f, "fp8_dq_scales.md", "`%s`" % f.gpu.split("/")[-1]) for f in folders))]
    return "\n".join(rows)


# ---- the backward kernel by kernel, beside cuDNN's (bench/pytorch/torch_bwd_profile.py) ----------

def short_kernel(name, width=48):
    """A kernel's name without its template arguments and return type, cut to @p width."""
    base = name.split("(")[0].split("<")[0].replace("void ", "").strip() or name
    return base if len(base) <= width else base[:width - 1] + "…"


def build_ab_runs(res, folder):
    """{shape index: (runner args, {"a": [TFLOP/s, ...], "b": [...]})} of an A/B of two builds run
    in turn (@p folder/summary.txt: "s<i> <a|b><round> <args> -> rate <x> TFLOP/s"; a: the first
    build, b: the second)."""
    out = collections.OrderedDict()
    with open(res.path(folder + "/summary.txt"), encoding="utf-8") as f:
        for line in f:
            m = re.match(r"s(\d+) ([ab])\d+ (.*?) -> rate +([0-9.]+) TFLOP/s", line.strip())
            if m:
                args, rates = out.setdefault(int(m.group(1)), (m.group(3), {"a": [], "b": []}))
                rates[m.group(2)].append(float(m.group(4)))
    return out


def args_cell(args):
    """A runner's arguments as the A/B table's shape: dtype, d, seqlen, batch, heads, mask, mode."""
    opt = dict(re.findall(r"--([\w-]+) (\S+)", args))
    heads = opt.get("heads", "?") + ("/" + opt["kv-heads"] if "kv-heads" in opt else "")
    return "%s, %s, %s, %s, %s, %s%s" % (opt.get("dtype", "?"), opt.get("dim", "?"), opt.get("seqlen", "?"),
                                         opt.get("batch", "?"), heads,
                                         "causal" if opt.get("causal") == "1" else "not causal",
                                         ", deterministic" if opt.get("deterministic") == "1" else "")


@generator("rung14-order-sweep")
def gen_rung14_order_sweep(ctx, gpu, file="variants.json", base="x-order", variant="rung", others=""):
    """The causal grid's orders side by side in one ladder_bench --fl_variants run (@p file, the
    backward families at one dtype): per (heads, head_dim) and seqlen @p variant's rate / @p base's
    (the time of base over variant's), and a span of the same ratio for each of @p others
    (comma-separated variant names). The deterministic cells are left out (their order is their
    own)."""
    res = ctx.results(gpu)
    if not res.has(file):
        raise Missing("a ladder_bench --fl_variants run of the backward families in %s" % gpu,
                      "ladder_bench --fl_family=backward,backward-gqa,backward-gqa8 --fl_rungs=14 --fl_variants")
    run = res.json(file)
    t = {}
    for b in run["benchmarks"]:
        if b.get("error_occurred") or "/det" in b["name"]:
            continue
        label, fam, d, n, c = b["name"].split("/")[:5]
        m = re.match(r"14_hopper_backward(?:\[(.*)\])?$", label)
        if m and c == "causal1":
            t[m.group(1) or "rung", fam, d, int(n[1:])] = b["real_time"]
    ratio = lambda v, k: t[(base,) + k] / t[(v,) + k] if (base,) + k in t and (v,) + k in t else None  # noqa: E731
    seqlens = sorted({k[3] for k in t})
    out = ["| %s / %s | " % (variant, base) + " | ".join(n_label(n) for n in seqlens) + " |",
           "|---|" + "--:|" * len(seqlens)]
    for fam in HEADS:
        for d in ("d64", "d128", "d256"):
            row = [ratio(variant, (fam, d, n)) for n in seqlens]
            if any(x is not None for x in row):
                out.append("| %s | " % head_of(fam, d, "causal1") + " | ".join(
                    "%.2f×" % x if x is not None else "–" for x in row) + " |")
    spans = []
    for v in [x for x in others.split(",") if x]:
        rs = [r for r in (ratio(v, k[1:]) for k in t if k[0] == base) if r is not None]
        if rs:
            spans.append("`%s` %s (median %.2f×)" % (v, span_text(rs, "×"), statistics.median(rs)))
    ctxt = run["context"]
    out += ["", "Rate of `%s` over `%s`'s (time of `%s` / time of `%s`), above 1.0× `%s` faster: rung 14's "
            "entries in one `ladder_bench --fl_variants` run, %s, causal, each cell the median of its launches "
            "(L2 flushed)%s. %s, %s, commit `%s`; %s." % (
                variant, base, base, variant, variant, ctxt.get("dtype", "?"),
                ("; over the same cells " + ", ".join(spans)) if spans else "", ctxt.get("device", "?"),
                ctxt["date"][:10], ctxt.get("git_sha", "?")[:7], link(res, file))]
    return "\n".join(out)


@generator("build-ab")
def gen_build_ab(ctx, gpu, a="A", b="B", folder="abmain"):
    """Two builds of a rung's runner timed in turn on the same shapes (@p folder/summary.txt, its
    logs beside it): per shape each build's TFLOP/s per round, their medians and B / A; @p a, @p b
    name the builds (underscores for spaces)."""
    res = ctx.results(gpu)
    if not res.has(folder + "/summary.txt"):
        raise Missing("an A/B of two builds in %s" % gpu, "the builds' runners in turn, summary.txt")
    runs = build_ab_runs(res, folder)
    a, b = a.replace("_", " "), b.replace("_", " ")
    rows = ["| dtype, d, seqlen, batch, heads, mask | %s (TFLOP/s) | %s (TFLOP/s) | %s / %s |" % (a, b, b, a),
            "|---|---|---|--:|"]
    for args, rates in runs.values():
        ma, mb = statistics.median(rates["a"]), statistics.median(rates["b"])
        rows.append("| %s | %s | %s | %.3f× |" % (args_cell(args), ", ".join("%.1f" % x for x in rates["a"]),
                                                 ", ".join("%.1f" % x for x in rates["b"]), mb / ma))
    first = sorted(glob.glob(res.path(folder + "/s1_a1.log")))
    stamp = ""
    if first:
        with open(first[0], encoding="utf-8") as f:
            m = re.search(r"run +(\S+), commit (\w+)", f.read())
        if m:
            stamp = "; the first run %s, commit `%s` (as its report says)" % (m.group(1)[:10], m.group(2)[:7])
    rows += ["", "Each build's rate per round (median of its launches, L2 flushed), the two builds in turn on one "
             "GPU; the last column the ratio of their medians over the rounds, above 1.0× the second build faster%s; "
             "%s." % (stamp, link(res, folder + "/summary.txt"))]
    return "\n".join(rows)


@generator("bwd-kernel-ratios")
def gen_bwd_kernel_ratios(ctx, gpu):
    """The backward's kernels against cuDNN's kernels over a bench grid (torch_bwd_profile.py
    --family ...: each cell's profiled device time per pass, pre- and post-passes included, no host
    wait): cuDNN's time / the package's per cell, one row per (heads, head_dim, mask); first the
    worst and best cell and the cells below 1.0x."""
    res = ctx.results(gpu)
    if not res.has("torch_bwd_profile.json"):
        raise Missing("the backward grid's kernels in %s" % gpu,
                      "bench/pytorch/torch_bwd_profile.py --family backward,backward-gqa,backward-gqa8 --backends "
                      "ladder,cudnn")
    run = res.json("torch_bwd_profile.json")
    ratio = {}
    for shp in run["shapes"]:
        r, c = shp["backends"].get("ladder", {}), shp["backends"].get("cudnn", {})
        if "total_ms" in r and "total_ms" in c and shp["name"].count("/") == 3:
            fam, d, n, causal = shp["name"].split("/")
            ratio[fam, d, int(n[1:]), causal] = c["total_ms"] / r["total_ms"]
    if not ratio:
        raise Missing("a --family run in %s" % gpu, "bench/pytorch/torch_bwd_profile.py --family ...")
    cells = sorted((v, k) for k, v in ratio.items())
    name = lambda k: "%s d=%s %s %s" % (HEADS[k[0]], k[1][1:], n_label(k[2]),  # noqa: E731
                                        "causal" if k[3] == "causal1" else "not causal")
    dtype = run["context"].get("dtype") or "?"
    out = ["%s: the package's kernels / cuDNN's from %.2f× (%s) to %.2f× (%s); %d of %d cells below 1.0×.\n" % (
        dtype, cells[0][0], name(cells[0][1]), cells[-1][0], name(cells[-1][1]),
        sum(1 for v, _ in cells if v < 1.0), len(cells))]
    seqlens = sorted({k[2] for k in ratio})
    out += ["| | " + " | ".join(n_label(n) for n in seqlens) + " |", "|---|" + "--:|" * len(seqlens)]
    for fam, d, c in shapes():
        row = ["%.2f×" % ratio[fam, d, n, c] if (fam, d, n, c) in ratio else "–" for n in seqlens]
        if any(x != "–" for x in row):
            out.append("| %s | " % head_of(fam, d, c) + " | ".join(row) + " |")
    ctxt = run["context"]
    out += ["", "cuDNN's backward kernels' device time per pass over the package's (rung 14's), above 1.0× the "
            "package faster: the PyTorch profiler, the median of %d passes per backend and cell, each pass's kernels "
            "and memsets (pre- and post-passes included), no host wait. %s, %s, commit `%s`, PyTorch %s, cuDNN %s." % (
                ctxt["passes"], ctxt["device"], ctxt["date"][:10], ctxt["git_sha"][:7],
                ctxt["versions"].get("torch", "?"), ctxt["cudnn"])]
    return "\n".join(out)


def sass_text(source):
    """A SASS line of ncu's source page without its predicate, cut to 48 characters."""
    words = source.split()
    if words and words[0].startswith("@"):
        words = words[1:]
    text = " ".join(words)
    return text if len(text) <= 48 else text[:47] + "…"


@generator("ncu-source")
def gen_ncu_source(ctx, gpu, builds, names="", reasons="mio,barrier,long_sb,wait", top=4):
    """Nsight Compute's per-instruction stall samples of rung 14's main kernel
    (bench/studies/rung14_ncu_source.sh) for one or more builds (@p builds: folders under @p gpu,
    comma-separated; @p names: their labels, underscores for spaces): per build the samples in all,
    each reason's share of them, and for each of @p reasons the @p top instructions with the most of
    its samples (the opcode and the share of the reason's samples)."""
    top = int(top)
    folders = builds.split(",")
    labels = [n.replace("_", " ") for n in names.split(",")] if names else folders
    res = ctx.results(gpu)
    runs = []
    for folder in folders:
        path = next((res.path(folder + "/rung14_demo_source.csv" + z) for z in (".gz", "")
                     if res.has(folder + "/rung14_demo_source.csv" + z)), None)
        if path is None:
            raise Missing("ncu's source page in %s/%s" % (gpu, folder), "bench/studies/rung14_ncu_source.sh BIN OUT")
        runs.append((folder, bench_module("ncu_source_top").read_rows(path)))
    number = bench_module("ncu_source_top").number
    num = lambda r, c: number(r.get(c))  # noqa: E731  a cell's samples (0 where empty)
    every = "Warp Stall Sampling (All Samples)"
    shown = [r.strip() for r in reasons.split(",")]
    out = ["| | " + " | ".join(labels) + " |", "|---|" + "--:|" * len(labels)]
    totals = [sum(num(r, every) for r in rows) for _, rows in runs]
    out.append("| stall samples, all reasons | " + " | ".join("{:,.0f}".format(t) for t in totals) + " |")
    for reason in shown:
        col = "stall_" + reason
        out.append("| `%s`, share of all | " % col + " | ".join(
            "%.1f %%" % (100 * sum(num(r, col) for r in rows) / t) for (_, rows), t in zip(runs, totals)) + " |")
    for reason in shown:
        col = "stall_" + reason
        cells = []
        for _, rows in runs:
            tot = sum(num(r, col) for r in rows)
            ranked = sorted(rows, key=lambda r: -num(r, col))[:top]
            cells.append("<br>".join("%.1f %% `%s`" % (100 * num(r, col) / tot, sass_text(r.get("Source", "")))
                                     for r in ranked if tot > 0))
        out.append("| top `%s` instructions | " % col + " | ".join(cells) + " |")
    with open(res.path(folders[0] + "/rung14_demo_source.cmd"), encoding="utf-8") as f:
        cmd = f.read().strip()
    out += ["", "Nsight Compute's warp-state samples per SASS instruction of rung 14's main kernel, one launch each "
            "(`bench/studies/rung14_ncu_source.sh`: `%s`); a reason's share is its samples over all samples, an "
            "instruction's its samples over the reason's. %s." % (cmd, ", ".join(
                link(res, f + "/rung14_demo_top.txt") for f in folders))]
    return "\n".join(out)


@generator("bwd-window")
def gen_bwd_window(ctx, gpu):
    """Per shape and backend of a torch_bwd_profile.py --window folder: the kernels' device time per
    pass, the pass timed as torch_sdpa.py times it (events around the call after the L2 flush), and
    that interval under the profiler taken apart (torch_bwd_profile.window: the GPU's wait for the
    first launch after the flush, the kernels, the gaps between them, the rest)."""
    res = ctx.results(gpu)
    if not res.has("torch_bwd_profile.json"):
        raise Missing("the backward's timed window in %s" % gpu,
                      "PYTHONPATH=build/release/python python3 bench/pytorch/torch_bwd_profile.py --window --out DIR")
    run = res.json("torch_bwd_profile.json")
    rows = ["| shape | backend | kernels (ms) | timed as `torch_sdpa.py` (ms) | over the kernels (ms) | profiled: "
            "wait for the first launch | kernels | gaps | rest |", "|---|---|--:|--:|--:|--:|--:|--:|--:|"]
    for shp in run["shapes"]:
        for backend in ("ladder", "cudnn", "flash"):
            r = shp["backends"].get(backend)
            if r is None or "window" not in r:
                continue
            w = r["window"]
            label = {"ladder": "flashladder", "cudnn": "SDPA cuDNN", "flash": "SDPA flash"}[backend]
            rows.append("| %s | %s | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f |" % (
                shp["name"], label, r["total_ms"], w["events_ms"], w["events_ms"] - r["total_ms"], w["lead_ms"],
                w["kernels_ms"], w["gaps_ms"], w["rest_ms"]))
    if len(rows) == 2:
        raise Missing("a --window run in %s" % gpu, "bench/pytorch/torch_bwd_profile.py --window")
    c = run["context"]
    rows += ["", "%s, %s, commit `%s`, PyTorch %s, cuDNN %s; medians of %d passes each: the kernels profiled alone, "
             "the pass timed as `torch_sdpa.py` times it, and that interval profiled and taken apart (ms; the "
             "profiler's own host cost lengthens its wait for the first launch)." % (
                 c["device"], c["date"][:10], c["git_sha"][:7], c["versions"].get("torch", "?"), c["cudnn"],
                 c["passes"])]
    return "\n".join(rows)


@generator("bwd-profile")
def gen_bwd_profile(ctx, gpu):
    """Per shape of torch_bwd_profile.py's folder and per backend (the package's autograd, SDPA cuDNN,
    SDPA flash): the device time per backward pass of the kernels before the main one, the main one
    and those after it, the total, and the kernels before and after by name (launches per pass)."""
    res = ctx.results(gpu)
    if not res.has("torch_bwd_profile.json"):
        raise Missing("the backward's kernels beside cuDNN's in %s" % gpu,
                      "PYTHONPATH=build/release/python python3 bench/pytorch/torch_bwd_profile.py --out DIR")
    run = res.json("torch_bwd_profile.json")
    rows = ["| shape | backend | pre (ms) | main (ms) | post (ms) | total (ms) | pre and post kernels |",
            "|---|---|--:|--:|--:|--:|---|"]
    for shp in run["shapes"]:
        for backend in ("ladder", "cudnn", "flash"):
            r = shp["backends"].get(backend)
            if r is None:
                continue
            label = {"ladder": "flashladder", "cudnn": "SDPA cuDNN", "flash": "SDPA flash"}[backend]
            if "skipped" in r:
                rows.append("| %s | %s | – | – | – | – | skipped: %s |" % (shp["name"], label, r["skipped"]))
                continue
            side = ["%s%s (%s)" % (short_kernel(k["name"]), " ×%g" % k["launches"] if k["launches"] != 1 else "",
                                   k["role"]) for k in r["kernels"] if k["role"] != "main"]
            rows.append("| %s | %s | %.3f | %.3f | %.3f | %.3f | %s |" % (
                shp["name"], label, r["pre_ms"], r["main_ms"], r["post_ms"], r["total_ms"],
                "; ".join(side) if side else "none"))
    c = run["context"]
    rows.append("")
    rows.append("%s, %s, commit `%s`, PyTorch %s, cuDNN %s; device time per backward pass, the median of %d "
                "profiled passes (kernels and memsets only, not the gaps between them)." % (
                    c["device"], c["date"][:10], c["git_sha"][:7], c["versions"].get("torch", "?"), c["cudnn"],
                    c["passes"]))
    return "\n".join(rows)
