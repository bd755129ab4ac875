"""Rung 16's blocks (masks and score modifiers):

  rung16-masks           one run of bench/run_all.sh --family masks: each mask and modifier's rate
                         and time against the plain causal kernel on the same shape, against
                         FlexAttention, the two classification ablations; rung 15 on causal; the
                         sliding-window check (a window of w over 2w keys against causal over 2w);
  rung16-sweep           bench/studies/rung16_sweep.sh (one run report per cell): rung 16's causal kernel
                         against rung 15's, each modifier against rung 16's causal kernel, and
                         head_dims 80 and 96 against 128;
  rung16-masks-backward  one run of bench/run_all.sh --family masks-backward: rung 16's backward per
                         case against its causal cell, FlexAttention's backward, rung 14 on causal;
  rung16-bwd-sweep       bench/studies/rung16_bwd_sweep.sh: rung 16's backward against rung 14 (causal), each
                         modifier against rung 16's causal backward;
  rung16-rounds          one cell, rungs 15 and 16 in alternating processes (n32k_<rung>_<i>.json):
                         each round's median and the fastest launch.

Every block names its folder under bench/results/ with gpu= and opens with the folder's device,
date and commit (its meta.json)."""

import collections
import glob
import os
import re
import statistics

from .core import Missing, generator

CASES = ["causal", "window4096", "docs", "prefix2048", "softcap50", "alibi", "sinks"]
CASE_NAMES = {"causal": "causal", "window4096": "sliding window 4096 (causal)", "docs": "documents (causal within each)",
              "prefix2048": "prefix-LM (2048 keys)", "softcap50": "softcap 50 (causal)", "alibi": "ALiBi (causal)",
              "sinks": "attention sinks (causal)"}


def masks_times(res):
    """{(rung, case, N): (ms, TFLOP/s)} of a masks-family folder."""
    out = {}
    for name in ("ladder_bench.json", "torch_flex.json"):
        if not res.has(name):
            continue
        for b in res.json(name)["benchmarks"]:
            if b.get("skipped"):
                continue
            parts = b["name"].replace("/iterations:1/manual_time", "").split("/")
            out[parts[0], parts[3], int(parts[4][1:])] = (b["real_time"], b["TFLOPS"])
    return out


def fmt(x, digits=2):
    return "-" if x is None else ("%.*f" % (digits, x))


def row(cells):
    return "| " + " | ".join(cells) + " |"


def provenance(res, what):
    """ "<what>: NVIDIA H100 80GB HBM3, 2026-11-27, commit `8eb4e35` (`bench/results/...`)" from the folder's meta.json."""
    m = res.meta
    if not m:
        raise Missing("meta.json in bench/results/%s" % res.gpu, "the run's commands, recorded beside it")
    return "%s: %s, %s, commit `%s` (`bench/results/%s`)" % (what, m["device"], m["date"][:10], m["git_sha"][:7], res.gpu)


def case_cells(t, rung, case, n, flex="torch_flex"):
    """A masks-family row's common cells for @p rung: its TFLOP/s, its time and rate against its
    own causal cell at the same length, FlexAttention's TFLOP/s and FlexAttention's time over the
    rung's. Returns (cells, ms)."""
    ms, tf = t[rung, case, n]
    causal, fl = t.get((rung, "causal", n)), t.get((flex, case, n))
    return ["%s" % CASE_NAMES[case], "%dk" % (n // 1024), "%.0f" % tf,
            fmt(ms / causal[0]) if causal else "-", fmt(tf / causal[1]) if causal else "-",
            "%.0f" % fl[1] if fl else "-", fmt(fl[0] / ms) + "×" if fl else "-"], ms


def measured(t, rung):
    """The (case, N) cells of the masks family that @p rung ran, in the tables' order."""
    cells = [(case, n) for case in CASES for n in (8192, 32768) if (rung, case, n) in t]
    if not cells:
        raise Missing("%s in the masks family" % rung, "bench/run_all.sh --family masks,masks-backward")
    return cells


@generator("rung16-masks")
def gen_rung16_masks(ctx, gpu):
    """The masks family (bf16, d = 128, 16 heads, 32k tokens): rung 16 per case against its causal
    cell, FlexAttention and the two ablations; rung 16's causal kernel against rung 15's; the
    window of 4096 keys over 8k against causal over 8k."""
    res = ctx.results(gpu)
    t = masks_times(res)
    lines = [provenance(res, "Masks family") + ": bf16, d = 128, 16 heads, batch x seqlen = 32k "
             "tokens; TFLOP/s of the unmasked pairs.", ""]
    r16, r15, flex = "16_masks", "15_persistent", "torch_flex"
    lines += ["| case | N | rung 16 (TFLOP/s) | time / causal's | rate / causal's | FlexAttention (TFLOP/s) | "
              "rung 16 / FlexAttention | no-full-blocks | no-skip |",
              "|---|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for case, n in measured(t, r16):
        cells, ms = case_cells(t, r16, case, n, flex)
        abl = [t.get((r16 + "[%s]" % v, case, n)) for v in ("no-full-blocks", "no-skip")]
        lines.append(row(cells + [fmt(ms / a[0]) if a else "-" for a in abl]))
    lines += ["", "(time / causal's and rate / causal's: against rung 16's plain causal kernel on the same shape; "
              "no-full-blocks and no-skip: rung 16's time over the ablation's, below 1 = the idea the ablation "
              "turns off helps.)", ""]
    rows = []
    for n in (8192, 32768):
        if (r15, "causal", n) in t and (r16, "causal", n) in t:
            rows.append("| %dk | %.0f | %.0f | %s |" % (n // 1024, t[r16, "causal", n][1], t[r15, "causal", n][1],
                                                        fmt(t[r15, "causal", n][0] / t[r16, "causal", n][0])))
    lines += ["**The machinery's cost** (causal, rung 16's block lists against rung 15's special code)", "",
              "| N | rung 16 (TFLOP/s) | rung 15 (TFLOP/s) | rung 16 / rung 15 |", "|--:|--:|--:|--:|"] + rows
    w, c = t.get((r16, "window4096", 8192)), t.get((r16, "causal", 8192))
    if w and c:
        lines += ["", "**A window of w = 4096 keys over 2w = 8k** takes %.3f ms, causal over 8k %.3f ms: %.2f× "
                  "(the issue's bound: 1.3×)." % (w[0], c[0], w[0] / c[0])]
    return "\n".join(lines)


def sweep_runs(res):
    """{tag: (ms, TFLOP/s)} of a sweep folder (one run report per cell)."""
    out = {}
    for f in sorted(os.listdir(res.dir)):
        if f.endswith(".json") and f != "meta.json":
            j = res.json(f)
            out[f[:-5]] = (j["timing"]["median_ms"], j["timing"]["tflops"])
    if not out:
        raise Missing("the run reports of bench/results/%s" % res.gpu, "bench/studies/rung16_sweep.sh")
    return out


@generator("rung16-sweep")
def gen_rung16_sweep(ctx, gpu):
    """Rung 16's forward sweep (fp16 and bf16, d = 64 ... 256, 512 to 8k keys, GQA 4:1, causal):
    its causal kernel / rung 15's, each modifier's rate / the causal kernel's, head_dims 80 and 96
    against 128."""
    res = ctx.results(gpu)
    runs = sweep_runs(res)
    lines = [provenance(res, "Sweep") + ": batch x seqlen = 16k tokens, hidden 2048 (32 heads at "
             "d = 80 and 96), GQA 4:1, causal.", ""]
    ratios = []
    lines += ["**Rung 16's causal kernel / rung 15's** (time ratio, above 1 = rung 16 faster)", "",
              "| dtype, d | N=512 | N=2k | N=8k |", "|---|--:|--:|--:|"]
    for t in ("fp16", "bf16"):
        for d in (64, 128, 256):
            cells = []
            for n in (512, 2048, 8192):
                a, b = runs.get("%s_d%d_N%d_causal" % (t, d, n)), runs.get("%s_d%d_N%d_causal_rung15" % (t, d, n))
                if a and b:
                    ratios.append(b[0] / a[0])
                cells.append(fmt(b[0] / a[0]) if a and b else "-")
            lines.append("| %s, d=%d | %s |" % (t, d, " | ".join(cells)))
    if ratios:
        lines += ["", "From %.3f× to %.3f× (%d of %d cells below 0.95×)." % (
            min(ratios), max(ratios), sum(r < 0.95 for r in ratios), len(ratios))]
    lines += ["", "**Each modifier's rate against rung 16's causal kernel** (TFLOP/s ratio on the same shape; the "
              "window's rate counts only its unmasked pairs)", "",
              "| dtype, d | case | N=512 | N=2k | N=8k |", "|---|---|--:|--:|--:|"]
    for t in ("fp16", "bf16"):
        for d in (64, 80, 96, 128, 256):
            for case in ("window", "softcap", "alibi", "sinks"):
                cells = []
                for n in (512, 2048, 8192):
                    a, c = runs.get("%s_d%d_N%d_%s" % (t, d, n, case)), runs.get("%s_d%d_N%d_causal" % (t, d, n))
                    cells.append(fmt(a[1] / c[1]) if a and c else "-")
                lines.append("| %s, d=%d | %s | %s |" % (t, d, case, " | ".join(cells)))
    lines += ["", "**Head_dims 80 and 96 on the d = 128 tiles** (useful TFLOP/s, causal; d = 128 with 16 heads "
              "for comparison)", "", "| dtype | N | d=80 | d=96 | d=128 | 80 / 128 | 96 / 128 |", "|---|--:|--:|--:|--:|--:|--:|"]
    for t in ("fp16", "bf16"):
        for n in (512, 2048, 8192):
            v = [runs.get("%s_d%d_N%d_causal" % (t, d, n)) for d in (80, 96, 128)]
            if all(v):
                lines.append("| %s | %d | %.0f | %.0f | %.0f | %s | %s |" % (
                    t, n, v[0][1], v[1][1], v[2][1], fmt(v[0][1] / v[2][1]), fmt(v[1][1] / v[2][1])))
    return "\n".join(lines)


@generator("rung16-masks-backward")
def gen_rung16_masks_backward(ctx, gpu):
    """The masks-backward family (the backward pass alone): rung 16's backward per case against its
    causal cell, FlexAttention's backward and rung 14; the window of 4096 keys over 8k."""
    res = ctx.results(gpu)
    t = masks_times(res)
    r16, r14, flex = "16_masks[backward]", "14_hopper_backward", "torch_flex"
    lines = [provenance(res, "Masks family, backward") + ": bf16, d = 128, 16 heads, batch x seqlen = 32k "
             "tokens, the backward pass alone; TFLOP/s of the unmasked pairs (2.5 x the forward's).", "",
             "| case | N | rung 16 backward (TFLOP/s) | time / causal's | rate / causal's | FlexAttention backward "
             "(TFLOP/s) | rung 16 / FlexAttention | rung 14 (TFLOP/s) | rung 16 / rung 14 |",
             "|---|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for case, n in measured(t, r16):
        cells, ms = case_cells(t, r16, case, n, flex)
        b14 = t.get((r14, case, n))
        lines.append(row(cells + ["%.0f" % b14[1] if b14 else "-", fmt(b14[0] / ms) if b14 else "-"]))
    w, c = t.get((r16, "window4096", 8192)), t.get((r16, "causal", 8192))
    if w and c:
        lines += ["", "**A window of w = 4096 keys over 2w = 8k, backward:** %.3f ms against causal's %.3f ms: "
                  "%.2f× (the issue's bound: 1.3×)." % (w[0], c[0], w[0] / c[0])]
    return "\n".join(lines)


@generator("rung16-bwd-sweep")
def gen_rung16_bwd_sweep(ctx, gpu):
    """Rung 16's backward sweep (GQA 4:1, causal): its TFLOP/s and rung 14's time over it, then each
    modifier's rate against rung 16's causal backward."""
    res = ctx.results(gpu)
    runs = sweep_runs(res)
    lines = [provenance(res, "Backward sweep") + ": batch x seqlen = 16k tokens, hidden 2048 (32 heads at "
             "d = 96), GQA 4:1, causal; rung 16's backward (TFLOP/s) and its time against rung 14's, then each "
             "modifier's rate against rung 16's causal backward.", "",
             "| dtype, d | N | causal (TFLOP/s) | rung 14 / rung 16 (time) | window N/4 | softcap 50 | ALiBi | sinks |",
             "|---|--:|--:|--:|--:|--:|--:|--:|"]
    for cell in ("bf16_d64", "bf16_d96", "bf16_d128", "fp16_d128"):
        for n in (2048, 8192):
            c, b = runs.get("%s_N%d_causal" % (cell, n)), runs.get("%s_N%d_causal_rung14" % (cell, n))
            if not c:
                continue
            mods = [runs.get("%s_N%d_%s" % (cell, n, m)) for m in ("window", "softcap", "alibi", "sinks")]
            t, d = cell.split("_")
            lines.append("| %s, d=%s | %dk | %.0f | %s | %s |" % (
                t, d[1:], n // 1024, c[1], fmt(b[0] / c[0]) if b else "-",
                " | ".join(fmt(m[1] / c[1]) if m else "-" for m in mods)))
    return "\n".join(lines)


@generator("rung16-rounds")
def gen_rung16_rounds(ctx, gpu):
    """One cell run by rungs 15 and 16 in alternating processes (n32k_<rung>_<i>.json): each round's
    median, their ratio and each round's fastest launch; then the fastest over all rounds."""
    res = ctx.results(gpu)
    meta = res.meta
    timing = {}
    for name in sorted(os.listdir(res.dir)):
        if name.startswith("n32k_") and name.endswith(".json"):
            rung, i = name[len("n32k_"):-len(".json")].rsplit("_", 1)
            timing[(rung, int(i))] = res.json(name)["timing"]
    rounds = sorted({i for _, i in timing})
    if not rounds:
        raise Missing("the rounds' run reports in bench/results/%s" % gpu, "the commands in its meta.json")
    out = [provenance(res, "The 32k causal forward cell") + ": %s; %d launches per process, "
           "rungs 15 and 16 alternating." % (meta["shape"], meta["iters"]), "",
           "| round | rung 15 median (ms) | rung 16 median (ms) | rung 16 / rung 15 (rate) | rung 15 fastest | "
           "rung 16 fastest |", "|--:|--:|--:|--:|--:|--:|"]
    for i in rounds:
        a, b = timing[("15_persistent", i)], timing[("16_masks", i)]
        out.append(row([str(i), "%.3f" % a["median_ms"], "%.3f" % b["median_ms"], fmt(a["median_ms"] / b["median_ms"]),
                        "%.3f" % a["min_ms"], "%.3f" % b["min_ms"]]))
    fast15 = min(timing[("15_persistent", i)]["min_ms"] for i in rounds)
    fast16 = min(timing[("16_masks", i)]["min_ms"] for i in rounds)
    out += ["", "Fastest launch over all rounds: rung 15 %.3f ms, rung 16 %.3f ms (%s)." % (fast15, fast16,
                                                                                         fmt(fast15 / fast16))]
    return "\n".join(out)


@generator("rung16-sweep-change")
def gen_rung16_sweep_change(ctx, gpu):
    """Rung 16's causal kernel / rung 15's over two forward sweep folders (gpu=BEFORE,AFTER: a
    change between them): each folder's range, and its cells at d = 64, 512 keys."""
    parts = []
    for g in gpu.split(","):
        runs = sweep_runs(ctx.results(g))
        ratios, d64 = [], []
        for t in ("fp16", "bf16"):
            for d in (64, 128, 256):
                for n in (512, 2048, 8192):
                    a, b = runs.get("%s_d%d_N%d_causal" % (t, d, n)), runs.get("%s_d%d_N%d_causal_rung15" % (t, d, n))
                    if a and b:
                        ratios.append(b[0] / a[0])
                        if d == 64 and n == 512:
                            d64.append(b[0] / a[0])
        if not ratios:
            raise Missing("rungs 15 and 16 in %s" % g, "bench/studies/rung16_sweep.sh")
        parts.append("`%s`: %.3f–%.3f×, d = 64 at 512 keys %s" % (
            g.split("/")[-1], min(ratios), max(ratios), " and ".join("%.2f×" % r for r in d64)))
    return "Rung 16 / rung 15, causal (time ratio, fp16 and bf16): " + "; then ".join(parts) + "."


@generator("rung16-ablation-span")
def gen_rung16_ablation_span(ctx, gpu):
    """The masks family's two classification ablations in one folder (run with --fl_variants):
    rung 16's time / each ablation's over the cases both ran (least and most)."""
    t = masks_times(ctx.results(gpu))
    parts = []
    for v in ("no-full-blocks", "no-skip"):
        rs = [t["16_masks", case, n][0] / t["16_masks[%s]" % v, case, n][0]
              for case, n in measured(t, "16_masks") if ("16_masks[%s]" % v, case, n) in t]
        if rs:
            parts.append("rung 16 / %s %.2f–%.2f" % (v, min(rs), max(rs)))
    if not parts:
        raise Missing("the ablations in %s" % gpu, "bench/run_all.sh --family masks -- --fl_variants")
    return "In `%s` (time ratios over its cases): %s." % (gpu.split("/")[-1], ", ".join(parts))


# ---- dropout's cost (bench/studies/rung16_dropout_ab.sh) -----------------------------------------

DROPOUT_AB_COMMAND = "bench/studies/rung16_dropout_ab.sh build/release/bin bench/results/<gpu>/rung16/dropout-ab 3"


def dropout_ab_runs(res):
    """{shape: {(pass, p): [run report, ...]}} of a rung16_dropout_ab.sh folder
    (<shape>_<forward|backward>_p<p>_r<i>.json); the runs with Philox4x32-10
    (<shape>_<pass>_p<p>-philox10_r<i>.json) under (pass, p, 10)."""
    runs = collections.defaultdict(lambda: collections.defaultdict(list))
    for path in sorted(glob.glob(res.path("*_p*_r[0-9]*.json"))):
        m = re.match(r"(.+_c[01])_(forward|backward)_p([0-9.]+)(-philox10)?_r\d+\.json$", os.path.basename(path))
        if m:
            key = (m.group(2), float(m.group(3))) + ((10,) if m.group(4) else ())
            runs[m.group(1)][key].append(res.json(os.path.basename(path)))
    return runs


def dropout_check(res, shape, which):
    """The study's check run of one pass with dropout, as its log says: "PASS (sample)", "FAIL (full)",
    "PASS (coverage)" (every element written, not compared), "?" when the log says neither."""
    name = "%s_%s_dropout_check.log" % (shape, which)
    if not res.has(name):
        return "–"
    with open(res.path(name), encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"check +(PASS|FAIL)[^\n]*\((full|sample)\)", text)
    if m:
        return "%s (%s)" % m.groups()
    cover = re.search(r"check +(PASS|FAIL): every element of dQ, dK, dV written", text)
    return "%s (coverage)" % cover.group(1) if cover else "?"


@generator("rung16-dropout-ab")
def gen_rung16_dropout_ab(ctx, gpu):
    """Rung 16 with dropout against the same call without it, forward and backward, per shape of a
    rung16_dropout_ab.sh folder: the median over the rounds of each run's median time, the ratios,
    and the time dropout adds per visible element in SM clocks (the device's clock from the run
    report; the README's count predicts it), beside each pass's check with dropout."""
    res = ctx.results(gpu)
    runs = dropout_ab_runs(res)
    if not runs:
        raise Missing("rung 16's dropout A/B in %s" % gpu, DROPOUT_AB_COMMAND)

    def med(xs):
        return statistics.median(r["timing"]["median_ms"] for r in xs)

    def order(shape):
        p = next(iter(runs[shape].values()))[0]["problem"]
        return p["head_dim"], p["seqlen_k"], p["dtype"], not p["causal"]

    ten = any(len(k) == 3 for by in runs.values() for k in by)  # the study timed Philox4x32-10 too
    rows = ["| dtype, d, keys, batch, heads (q/kv), causal | p | forward (ms), without / with | forward × | "
            "backward (ms), without / with | backward × | forward + backward × | added SM clocks per element, "
            "forward / backward |" + (" with Philox4x32-10: forward / backward (ms), forward + backward × |" if ten
                                      else "") + " check with dropout, forward / backward | rounds |",
            "|---|--:|--:|--:|--:|--:|--:|--:|" + ("--:|--:|" if ten else "") + "---|--:|"]
    meta = None
    for shape in sorted(runs, key=order):
        by = runs[shape]
        ps = sorted({k[1] for k in by if k[1] > 0})
        if not ps or ("forward", 0.0) not in by or ("backward", 0.0) not in by:
            continue
        p = ps[0]
        if ("forward", p) not in by or ("backward", p) not in by:
            continue
        f0, f1 = med(by["forward", 0.0]), med(by["forward", p])
        b0, b1 = med(by["backward", 0.0]), med(by["backward", p])
        run = by["forward", p][0]
        meta = meta or run
        prob, dev = run["problem"], run["device"]
        pairs = prob["flops"] / (4.0 * prob["head_dim"])  # visible (query, key) pairs of every head
        per_elem = dev["clock_mhz"] * 1e3 * dev["sms"] / pairs  # SM clocks per element per ms
        rows.append(row([
            "%s, %d, %d, %d, %d/%d, %s" % (prob["dtype"], prob["head_dim"], prob["seqlen_k"], prob["batch"],
                                          prob["heads_q"], prob["heads_kv"], "yes" if prob["causal"] else "no"),
            "%g" % p, "%.3f / %.3f" % (f0, f1), "%.2f×" % (f1 / f0), "%.3f / %.3f" % (b0, b1), "%.2f×" % (b1 / b0),
            "%.2f×" % ((f1 + b1) / (f0 + b0)),
            "%.3f / %.3f" % ((f1 - f0) * per_elem, (b1 - b0) * per_elem)] +
            ((["%.3f / %.3f" % (med(by["forward", p, 10]), med(by["backward", p, 10])),
               "%.2f×" % ((med(by["forward", p, 10]) + med(by["backward", p, 10])) / (f0 + b0))]
              if ("forward", p, 10) in by and ("backward", p, 10) in by else ["–", "–"]) if ten else []) + [
            "%s / %s" % (dropout_check(res, shape, "forward"), dropout_check(res, shape, "backward")),
            "%d" % min(len(by["forward", p]), len(by["forward", 0.0]), len(by["backward", p]), len(by["backward", 0.0]))]))
    if meta is None:
        raise Missing("both passes with and without dropout in %s" % gpu, DROPOUT_AB_COMMAND)
    rounds = meta["problem"].get("dropout_rounds")  # recorded from the 7-round generator on
    generator = "; with dropout: Philox4x32-%s%s" % (
        rounds or 10, ", and in the Philox4x32-10 columns the same calls with `--dropout-rounds 10`, timed in the "
        "same rounds" if ten else "")
    rows += ["", "%s, %s, commit `%s`; each entry's time the median of 50 launches (L2 flushed), median over the "
             "rounds, the order alternating; the backward's time is its passes' (pre-pass, kernel, convert) after "
             "the forward; added clocks: the time dropout adds over the visible (query, key) pairs of every head, "
             "at the device's %d MHz on %d SMs (an upper bound where the clock ran lower); checks: the study's "
             "run of each pass with dropout against the fp64 reference with the same mask (`--check auto`: sample "
             "or full; coverage: every element written, not compared)%s." % (
                 meta["device"]["name"], meta["date"][:10], meta.get("git_sha", "")[:7],
                 meta["device"]["clock_mhz"], meta["device"]["sms"], generator)]
    return "\n".join(rows)
