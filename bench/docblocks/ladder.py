"""The forward ladder's blocks: the README summary, the declared baselines, the prefill sweep and its
ablations, PyTorch SDPA beside a rung, run reports, kernel resources, rung 07's sweep, the measured
ceilings, Nsight Compute metrics, a handout's "what to expect" line and the lessons' code diffs."""

import os
import re
import sys

import report
import results_io
from .core import (GENERATORS, ROOT, Missing, binary_bytes, earlier_fastest, generator, ints, labels_of, link,
                   measured_line, ms, pct, pct_of_peak, prefill_shapes, prefill_want, ratio_text, run_label,
                   run_problem, run_reports, span, torch_cells)


@generator("readme-summary")
def gen_readme_summary(ctx, gpu=None):
    """The top README's table: every rung at one prefill and one decode shape, its declared
    baseline, the speedup over it, and PyTorch (report.summary_table)."""
    res = ctx.results(gpu)
    return summary_with_every_rung(ctx, res, report.summary_table(
        res.path("ladder_bench.json"), res.path("torch_sdpa.json") if res.has("torch_sdpa.json") else None,
        ctx.registry, link=res.rel("report.md")).rstrip("\n"))


# The rungs the summary always shows, measured or not: a sweep that predates them, or ran without
# their families, shows "—" in their cells (a rung 16 backward entry of the registry too).
SUMMARY_ALWAYS = (14, 15, 16)


def summary_with_every_rung(ctx, res, text):
    """@p text (report.summary_table's table and note) with a backward column and a row for each
    rung of SUMMARY_ALWAYS that the table leaves out, every figure "—" but a backward entry's (a
    variant such as 16_masks[backward], which the table does not show): its backward TFLOP/s on the
    table's backward shape in run @p res, the speedup over its declared baseline and its ratios to
    PyTorch's flash and cuDNN backward on that shape."""
    lines = text.split("\n")
    head = next(i for i, l in enumerate(lines) if l.startswith("| rung |"))
    end = next((i for i in range(head + 2, len(lines)) if not lines[i].startswith("|")), len(lines))
    cells = [l.strip("|").split("|") for l in lines[head:end]]
    cells = [[c.strip() for c in row] for row in cells]
    if "backward TFLOP/s" not in cells[0]:
        at = cells[0].index("decode GB/s") + 1
        for k, row in enumerate(cells):
            row.insert(at, "backward TFLOP/s" if k == 0 else "--:" if k == 1 else "—")
    shown = {row[0].strip("`") for row in cells[2:]}
    wanted = []
    for n in SUMMARY_ALWAYS:
        entries = sorted((l, e) for l, e in ctx.info.items() if e["number"] == n)
        forward_rung = any(not e["variant"] and not e.get("backward") for _, e in entries)
        for label, e in entries:
            # the main entry, and a forward rung's backward entry (a backward rung's variants and the
            # backward's ablations stay out)
            ablation = e.get("summary", "").startswith("ablation")
            if (not e["variant"] or (forward_rung and e.get("backward") and not ablation)) and label not in shown:
                wanted.append((label, e))
    if not wanted:
        return text
    torch_at = next((k for k, row in enumerate(cells) if k >= 2 and row[0].startswith("`torch_")), len(cells))
    added = []
    for label, e in wanted:
        bs = e["baselines"]
        if bs:
            compared = "`%s`" % bs[0]["label"] if bs[0]["kind"] == "rung" else "fastest earlier"
        else:
            compared = "PyTorch's backward" if e.get("backward") else ""
        row = ["`%s`" % label, compared] + ["—"] * (len(cells[0]) - 2)
        want = dict(family="backward", head_dim=128, seqlen_q=4096, causal=0)
        r = res.find(rung=label, deterministic=0, **want) if e.get("backward") else None
        if r:
            base = res.find(rung=bs[0]["label"], deterministic=0, **want) if bs and bs[0]["kind"] == "rung" else None
            row[cells[0].index("backward TFLOP/s")] = report.fmt_value(r["tflops"])
            row[-3:] = [ratio_text(base, r), ratio_text(res.find(rung="torch_flash", **want), r),
                        ratio_text(res.find(rung="torch_cudnn", **want), r)]
        added.append(row)
    rows = cells[:torch_at] + added + cells[torch_at:]
    table = ["| " + " | ".join(row) + " |" for row in rows]
    table[1] = "|" + "|".join(rows[1]) + "|"
    return "\n".join(lines[:head] + table + lines[end:])


@generator("baselines")
def gen_baselines(ctx):
    """Rung -> what it is compared with -> why, from the registry (main entries)."""
    rows = []
    for label, e in ctx.info.items():
        if e["variant"]:
            continue
        bs = e["baselines"]
        if not bs and e.get("backward"):  # no earlier rung has a backward pass
            rows.append(["`%s`" % label, "PyTorch SDPA's backward (flash, cuDNN) on the same shapes",
                         "the first backward rung: measured in the bench's backward family"])
        elif not bs:
            rows.append(["`%s`" % label, "— (the reference point)", ""])
        for b in bs:
            rows.append(["`%s`" % label, "the fastest earlier rung on the same shape" if b["kind"] ==
                         "fastest_earlier" else "`%s`" % b["label"], b["why"]])
    return results_io.markdown_table(["rung", "compared with", "why"], rows, ["---", "---", "---"])


@generator("prefill-table")
def gen_prefill_table(ctx, rungs, d="64,128", n="4096", causal="0", gpu=None, baseline=None,
                      family="prefill"):
    """Rows (rung, head_dim, seqlen, causal) of the prefill sweep: heads, time, TFLOP/s, % of the
    datasheet peak the rung is measured against, and the speedup over its declared baseline (the
    first one measured on that shape; baseline=LABEL picks one of the declared baselines).
    family=ablation reads the ablation family's shapes instead (the same prefill problems at
    seqlen 4096, with head_dim 256 too)."""
    res = ctx.results(gpu)
    cj = res.ctx
    rows = []
    for label in labels_of(ctx, ints(rungs)):
        e = ctx.info[label]
        declared = [b["label"] for b in e["baselines"] if b["kind"] == "rung"]
        if baseline and baseline not in declared:
            raise ValueError("%s does not declare %s as a baseline (it declares: %s)" % (
                label, baseline, ", ".join(declared) or "none"))
        for dd in ints(d):
            for nn in ints(n):
                for c in ints(causal):
                    r = res.need(family, rung=label, **prefill_want(dd, nn, c))
                    base = "—" if declared else ""
                    for b in ([baseline] if baseline else declared):
                        br = res.find(family=family, rung=b, **prefill_want(dd, nn, c))
                        if br:
                            base = "%s vs `%s`" % (ratio_text(br, r), b)
                            break
                    rows.append(["`%s`" % label, str(dd), str(r["heads_q"]), results_io.seqlen_text(nn),
                                 "yes" if c else "no", ms(r["ms"]), results_io.fmt_value(r["tflops"]),
                                 pct(pct_of_peak(cj, e["peak"], r)), base or "—"])
    peak_name = "% of datasheet peak"
    table = results_io.markdown_table(["rung", "head_dim", "heads", "seqlen", "causal", "time", "TFLOP/s", peak_name,
                                   "speedup over baseline"], rows)
    return table + "\n\n" + measured_line(res, ", fp16, batch x seqlen = 16k tokens, hidden 2048")


@generator("baseline-span")
def gen_baseline_span(ctx, rung, d="64,128", gpu=None):
    """One sentence per head_dim: the span of the rung's speedup over its declared baseline across
    the prefill sweep, not causal and causal separately."""
    res = ctx.results(gpu)
    label = labels_of(ctx, [int(rung)])[0]
    e = ctx.info[label]
    if not e["baselines"]:
        raise ValueError("%s has no baseline" % label)
    b = e["baselines"][0]
    lines = []
    for dd in ints(d):
        parts = []
        for c in (0, 1):
            ratios, ns = [], []
            for r in res.records:
                if r["family"] == "prefill" and r["rung"] == label and r["head_dim"] == dd and r["causal"] == c:
                    br = res.find(family="prefill", rung=b["label"], **prefill_want(dd, r["seqlen_q"], c))
                    if br:
                        ratios.append(br["ms"] / r["ms"])
                        ns.append(r["seqlen_q"])
            if not ratios:
                raise Missing("prefill %s and %s at head_dim %d" % (label, b["label"], dd),
                              "bench/run_all.sh --family prefill")
            parts.append("%s %s" % (span(ratios), "causal" if c else "not causal"))
        lines.append("- `%s` over `%s`, head_dim %d, seqlen %s–%s: %s." % (
            label, b["label"], dd, results_io.seqlen_text(min(ns)), results_io.seqlen_text(max(ns)), "; ".join(parts)))
    return "\n".join(lines) + "\n\n" + measured_line(res)


@generator("torch-compare")
def gen_torch_compare(ctx, rung, d="128", n="4096", causal="0,1", gpu=None, family="prefill"):
    """The rung against PyTorch SDPA's flash (FlashAttention-2) and cuDNN backends, same GPU, same
    run: ms and the ratio (time of PyTorch / time of the rung: above 1 = the rung is faster).
    family=ablation reads the ablation shapes (seqlen 4096, the only ones with head_dim 256)."""
    res = ctx.results(gpu)
    label = labels_of(ctx, [int(rung)])[0]
    rows = []
    for _, _, _, w, lead in prefill_shapes(d, n, causal):
        r = res.need(family, rung=label, **w)
        rows.append(lead + ["%.3f" % r["ms"], results_io.fmt_value(r["tflops"])] + torch_cells(res, family, w, r))
    head = ["head_dim", "seqlen", "causal", "`%s` ms" % label, "TFLOP/s", "flash ms", "flash / rung",
            "cuDNN ms", "cuDNN / rung"]
    return results_io.markdown_table(head, rows) + "\n\n" + measured_line(
        res, ", fp16, batch x seqlen = 16k tokens, hidden 2048, PyTorch %s" % res.json("torch_sdpa.json")
        ["context"].get("torch", "?"))


@generator("headdim-ratio")
def gen_headdim_ratio(ctx, rung, small="32", large="64", gpu=None):
    """time(d=large) / time(d=small) over the prefill sweep (same hidden size, same FLOPs): the
    head_dim note's d=32 vs d=64 question, for the rung and for PyTorch's flash backend."""
    res = ctx.results(gpu)
    label = labels_of(ctx, [int(rung)])[0]
    ds, dl = int(small), int(large)
    rows = []
    missing = []
    for nn in sorted({r["seqlen_q"] for r in res.records if r["family"] == "prefill"}):
        cells = [results_io.seqlen_text(nn)]
        for who in (label, "torch_flash"):
            a = res.find(family="prefill", rung=who, **prefill_want(dl, nn, 0))
            b = res.find(family="prefill", rung=who, **prefill_want(ds, nn, 0))
            if not (a and b):
                missing.append(who)
            cells.append("%s (%.3f vs %.3f ms)" % (ratio_text(a, b), a["ms"], b["ms"]) if a and b else "—")
        rows.append(cells)
    head = ["seqlen", "`%s`: time d=%d / time d=%d" % (label, dl, ds), "PyTorch flash: the same"]
    out = results_io.markdown_table(head, rows) + "\n\n" + measured_line(res, ", fp16, not causal")
    if label in missing:
        out += ("\n\n`—`: no committed run has `%s` at head_dim %d yet (`bench/run_all.sh --family prefill` "
                "measures head_dim 32, 64 and 128)." % (label, ds))
    return out


@generator("ablation")
def gen_ablation(ctx, rung, d="64,128", gpu=None):
    """Every variant of a rung beside the rung, back to back on one shape (family ablation): ms and
    the variant's time over the rung's (above 1 = the variant is slower), not causal and causal."""
    res = ctx.results(gpu)
    label = labels_of(ctx, [int(rung)])[0]
    entries = [l for l, e in ctx.info.items() if e["number"] == int(rung)]
    rows = []
    for l in entries:
        cells = ["`%s`" % l]
        any_cell = False
        for dd in ints(d):
            for c in (0, 1):
                r = res.find(family="ablation", rung=l, head_dim=dd, causal=c)
                m = res.find(family="ablation", rung=label, head_dim=dd, causal=c)
                if r and m:
                    any_cell = True
                    cells.append("%.3f (%s)" % (r["ms"], results_io.fmt_ratio(r["ms"] / m["ms"])))
                else:
                    cells.append("—")
        if any_cell:
            rows.append(cells)
    if not rows:
        raise Missing("the ablation family for %s" % label, "bench/run_all.sh --family ablation")
    head = ["entry"] + ["d=%d%s ms (/ rung)" % (dd, ", causal" if c else "") for dd in ints(d) for c in (0, 1)]
    sample = res.find(family="ablation")
    return results_io.markdown_table(head, rows) + "\n\n" + measured_line(
        res, ", fp16, seqlen %d, batch x seqlen = 16k tokens, hidden 2048" % sample["seqlen_q"])


# What each ablation ratio isolates, per rung: (effect, slower entry, faster entry, what the source says).
# An entry is a variant name ("" = the rung itself) or "NN" for another rung's main entry (measured in
# the prefill family on the same shape). The ratio is time(slower) / time(faster).
ATTRIBUTIONS = {
    4: [
        ("deferred rescaling (divide by l once)", "fa1-rescale", "",
         "FlashAttention-2 §3.1.1: fewer non-matmul FLOPs; no separate figure"),
        ("sequence parallelism (grid over Q tiles)", "bh-grid", "",
         "FlashAttention-2 §3.2: matters when batch x heads is small; no separate figure"),
        ("loop order: Q outer, O/m/l stay on chip", "fa1-order", "bh-grid",
         "FlashAttention-2 §3.1, §3.2; no separate figure"),
        ("FA1's update under FA1's loop order", "fa1-all", "fa1-order", ""),
        ("the register prefetch of K/V tile j+1", "no-prefetch", "", "not an FA2 idea (implementation)"),
        ("FA1 -> FA2 on this kernel (all of the above)", "fa1-all", "",
         "FlashAttention-2 abstract: about 2x over FlashAttention"),
        ("implementation: rung 03 vs FA1 on this kernel", "03", "fa1-all",
         "register tiling, vector loads, exp2: not FA2 ideas"),
    ],
}


@generator("attribution")
def gen_attribution(ctx, rung, d="64,128", gpu=None):
    """The measured share of each change of a rung, from its ablation variants (ATTRIBUTIONS):
    per effect the ratio time(slower) / time(faster) on the ablation shape, not causal and causal,
    beside what the source says."""
    res = ctx.results(gpu)
    num = int(rung)
    label = labels_of(ctx, [num])[0]
    if num not in ATTRIBUTIONS:
        raise ValueError("no attribution table for rung %02d in bench/docblocks/ladder.py" % num)

    def entry(name):
        if re.fullmatch(r"\d\d", name):
            return labels_of(ctx, [int(name)])[0], "prefill"
        return (label + ("[%s]" % name if name else "")), "ablation"

    rows = []
    any_cell = False
    for effect, slow, fast, source in ATTRIBUTIONS[num]:
        (ls, fs), (lf, ff) = entry(slow), entry(fast)
        cells = ["%s: `%s` / `%s`" % (effect, results_io.short(ls), results_io.short(lf))]
        for dd in ints(d):
            for c in (0, 1):
                sample = res.find(family="ablation", head_dim=dd, causal=c)
                want = dict(head_dim=dd, causal=c, seqlen_q=sample["seqlen_q"]) if sample else None
                a = res.find(family=fs, rung=ls, **want) if want else None
                b = res.find(family=ff, rung=lf, **want) if want else None
                any_cell = any_cell or bool(a and b)
                cells.append(ratio_text(a, b))
        rows.append(cells + [source or "—"])
    if not any_cell:
        raise Missing("the ablation family for %s" % label, "bench/run_all.sh --family prefill,ablation")
    head = ["effect: slower / faster"] + ["d=%d%s" % (dd, ", causal" if c else "") for dd in ints(d)
                                          for c in (0, 1)] + ["the source"]
    return results_io.markdown_table(head, rows, ["---"] + ["--:"] * (len(head) - 2) + ["---"]) + \
        "\n\n" + measured_line(res, ", fp16, batch x seqlen = 16k tokens, hidden 2048")


@generator("run-reports")
def gen_run_reports(ctx, files, gpu=None):
    """Rows from committed run reports (a rung's --json output): the entry, the problem,
    workspace, time, TFLOP/s, % of peak, the check."""
    res, reports = run_reports(ctx, files, gpu)
    rows = []
    for name, j in reports:
        p, t, c = j["problem"], j["timing"], j["check"]
        rows.append([run_label(j), run_problem(p),
                     binary_bytes(j["workspace_bytes"]),
                     ms(t["median_ms"]), results_io.fmt_value(t["tflops"]), "%.1f %%" % t["percent_of_peak"],
                     "%s (%s), rel_fro %.1e" % ("PASS" if c["pass"] else "FAIL", c["mode"], c["rel_fro"]),
                     link(res, name, "`%s`" % name)])
    first = reports[0][1]
    r0 = first["rung"]
    e0 = next((e for e in ctx.info.values() if e["number"] == r0["number"] and e["variant"] == r0["variant"]), {})
    peak = {"fp32_fma": "fp32 FMA peak", "tensor_16bit": "16-bit tensor peak", "tensor_fp8": "FP8 tensor peak",
            "memory": "DRAM peak"}.get(
        e0.get("peak"), "peak")
    head = ["entry", "problem", "workspace", "time", "TFLOP/s", "%% of %s" % peak, "check", "report"]
    d = first["device"]
    when = ", %s, commit `%s`" % (first["date"][:10], first["git_sha"]) if first.get("date") else \
        " (these reports predate the date and commit fields of the run report: %s gives them)" % link(
            res, "meta.json", "`meta.json`")
    return results_io.markdown_table(head, rows) + "\n\nMeasured on %s%s." % (d["name"], when)


@generator("kernels")
def gen_kernels(ctx, file, gpu=None):
    """The resource report of one committed run report (a rung's --json output): per kernel the
    threads, registers, local (spill) bytes, shared memory, blocks per SM and occupancy, as the
    runner read them (cudaFuncGetAttributes and the occupancy API) on that GPU."""
    res = ctx.results(gpu)
    if not res.has(file):
        raise Missing(file, "the rung's --json FILE")
    j = res.json(file)
    rows = [["`%s`" % k["name"], str(k["block_threads"]), str(k["registers"]), str(k["local_bytes"]),
             str(k["static_smem"] + k["dynamic_smem"]), str(k["max_blocks_per_sm"]),
             "%.0f %%" % (100 * k["occupancy"])] for k in j["kernels"]]
    p = j["problem"]
    return results_io.markdown_table(["kernel", "threads", "registers", "local B", "shared B", "blocks/SM",
                                  "occupancy"], rows, ["---"] + ["--:"] * 6) + \
        "\n\n%s, B=%d Sq=%d Sk=%d H=%d/%d d=%d %s; %s." % (j["device"]["name"], p["batch"], p["seqlen_q"],
                                                        p["seqlen_k"], p["heads_q"], p["heads_kv"], p["head_dim"],
                                                        p["dtype"], link(res, file))


# The register-spill note's model of rung 07 (docs/sources.md, "The register-spill / DV-tiling
# note"): its head_dim and DV_TILE, and its worked example's load, compute and spill times (ms).
NOTE07 = dict(head_dim=128, dv_tile=32, load_ms=100, compute_ms=50, spill_ms=2000)


@generator("rung07-note-table")
def gen_rung07_note_table(ctx):
    """The note's trade-off table from its own model (NOTE07): o's fp32 registers at DV = head_dim
    and at DV_TILE, the passes over K/V, and its worked example's time (untiled: loads + compute +
    spill; tiled: loads x passes + compute)."""
    n = NOTE07
    d, t = n["head_dim"], n["dv_tile"]
    passes = d // t
    untiled = n["load_ms"] + n["compute_ms"] + n["spill_ms"]
    tiled = n["load_ms"] * passes + n["compute_ms"]
    return "\n".join([
        "| item | untiled | DV tiling (%d tiles) | change |" % passes,
        "|---|---|---|---|",
        "| registers (o_acc) | %d B | %d B | \u2212%d %% |" % (4 * d, 4 * t, round(100 * (1 - t / d))),
        "| spill | yes | none | removed |",
        "| K/V loads | 1\u00d7 | %d\u00d7 | %d\u00d7 more |" % (passes, passes),
        "| compute | N | N | same |",
        "| example time | %d ms | %d ms | %.1f\u00d7 faster |" % (untiled, tiled, untiled / tiled)])


def rung07_passes(d):
    """(name, passes over K/V) of rung 07's kernels at head_dim @p d: d / DV_TILE; split-d is one
    pass. A pass executes QK^T (2d FLOPs per pair) and PV over its DV_TILE columns: 2d (p + 1) per
    pair in all."""
    return [("untiled", 1), ("dv64", d // 64), ("dv32", d // 32), ("dv16", d // 16), ("split-d", 1)]


@generator("rung07-floors")
def gen_rung07_floors(ctx, d="128", gpu=None):
    """The FFMA floor of each of rung 07's kernels on its sweep's problem (sweep07_d<d>.json: the
    pairs B·H·Sq·Sk) at the GPU's datasheet fp32 peak: executed FLOPs (2d (passes + 1) per pair)
    over the peak."""
    res = ctx.results(gpu)
    name = "sweep07_d%s.json" % d
    if not res.has(name):
        raise Missing(name, "bench/run_all.sh --family prefill")
    doc = res.json(name)
    prob = dict(kv.split("=", 1) for kv in doc["problem"].split() if "=" in kv)
    pairs = int(prob["B"]) * int(prob["H"].split("/")[0]) * int(prob["Sq"]) * int(prob["Sk"])
    peak = doc["device"]["peak_fp32_tflops"]
    hd = int(doc["head_dim"])
    rows = []
    for kernel, p in rung07_passes(hd):
        flop = 2 * hd * (p + 1)
        rows.append("| %s | %d | %.1f | %.2f ms |" % (kernel, flop, pairs * flop / 1e9, pairs * flop / (peak * 1e9)))
    return "\n".join(["| | executed FLOP/pair | executed GFLOP | FFMA floor at %.1f TFLOP/s |" % peak,
                      "|---|---|---|---|"] + rows)


@generator("rung07-variant-cost")
def gen_rung07_variant_cost(ctx, d="128", main="32"):
    """Rung 07's variants by formula at head_dim @p d: passes over K/V (d / DV_TILE), K read into
    shared memory once per pass, V once in all, and FLOPs per (query, key) pair: QK^T (2d) on every
    pass, PV (2d) once. split-d is one pass. @p main: the main entry's DV_TILE."""
    d = int(d)
    cols = rung07_passes(d)
    heads = ["%s%s" % (name, " (main)" if name == "dv" + main else "") for name, _ in cols]
    passes = [p for _, p in cols]

    def row(item, cells):
        return "| %s | " % item + " | ".join(cells) + " |"

    return "\n".join([
        row("item", heads), "|---|" + "---|" * len(cols),
        row("passes over K/V", ["%d" % p for p in passes]),
        row("K read from L2/HBM into shared", ["%d\u00d7" % p for p in passes]),
        row("V bytes read", ["1\u00d7"] * len(cols)),
        row("FLOPs executed per pair", ["%dd = %d" % (2 * (p + 1), 2 * (p + 1) * d) for p in passes])])


@generator("sweep07")
def gen_sweep07(ctx, d="128", variants="", gpu=None):
    """Rung 07's --sweep (sweep07_d<d>.json): per variant the passes over K/V, block shape, registers,
    local memory per thread (the spill space), blocks per SM, check, time, TFLOP/s and the speedup
    over the untiled kernel with the same block shape. variants=a,b,c keeps those rows."""
    res = ctx.results(gpu)
    name = "sweep07_d%s.json" % d
    if not res.has(name):
        raise Missing(name, "bench/run_all.sh --family prefill")
    doc = res.json(name)
    hd = doc["head_dim"]
    rows_in = [r for r in doc["rows"] if not r["skipped"]]
    base = {(r["block_m"], r["block_n"]): r["median_ms"] for r in rows_in
            if r["kernel"] == "dv_tiled" and r["dv_tile"] == hd}
    keep = variants.split(",") if variants else None
    rows = []
    for r in rows_in:
        if keep and r["variant"] not in keep:
            continue
        b = base.get((r["block_m"], r["block_n"]) if r["kernel"] == "dv_tiled" else (64, 64))
        passes = hd // r["dv_tile"] if r["kernel"] == "dv_tiled" else 1
        rows.append(["`%s`" % r["variant"], str(passes), "%d x %d" % (r["block_m"], r["block_n"]),
                     str(r["registers"]), str(r["local_bytes"]), "%d (%.1f %%)" % (r["max_blocks_per_sm"],
                                                                               100 * r["occupancy"]),
                     "pass" if r["check_pass"] else "FAIL", "%.2f" % r["median_ms"], "%.2f" % r["tflops"],
                     results_io.fmt_ratio(b / r["median_ms"]) if b else "—"])
    head = ["variant", "passes over K/V", "BLOCK_M x BLOCK_N", "registers", "local B / thread",
            "blocks/SM (occupancy)", "check", "ms", "TFLOP/s", "vs untiled"]
    return results_io.markdown_table(head, rows) + "\n\n%s, %s on %s; %s." % (
        doc["problem"], "median ms", doc["device"]["name"], link(res, name))


@generator("ceilings")
def gen_ceilings(ctx, gpu=None):
    """The measured ceilings of the GPU (bench/ceilings.cu -> ceilings.json) beside its datasheet peaks."""
    res = ctx.results(gpu)
    if not res.has("ceilings.json"):
        raise Missing("ceilings.json on %s" % res.gpu, "bench/run_all.sh (step 0: build/release/bin/ceilings)")
    c = results_io.load_ceilings(res.path("ceilings.json"))
    rows = [[what, results_io.fmt_value(v) if v else "—", unit, note] for what, v, unit, note in c.values()]
    dev = res.json("ceilings.json")["device"]
    return results_io.markdown_table(["ceiling", "measured", "unit", "how"], rows, ["---", "--:", "---", "---"]) + \
        "\n\nOn %s; %s." % (dev["name"], link(res, "ceilings.json"))


# What each Nsight Compute metric the READMEs quote measures (the table's first column).
NCU_METRICS = {
    "gpu__time_duration.sum": "kernel time",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "DRAM throughput, % of peak",
    "dram__bytes_read.sum": "bytes read from DRAM",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "SM throughput, % of peak",
    "sm__inst_executed.sum": "warp instructions executed",
    "smsp__issue_active.avg.pct_of_peak_sustained_active": "issue slots used, % of active cycles",
    "sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active": "XU pipe (special functions), % of its peak",
    "sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active": "FMA pipe active, % of active cycles",
    "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active": "tensor pipe active, % of active cycles",
    "sm__inst_executed_pipe_tensor_op_hmma.sum": "tensor (HMMA) instructions",
    "smsp__inst_executed_op_ldsm.sum": "`ldmatrix` instructions",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum": "shared-store bank conflicts",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum": "shared-load bank conflicts",
    "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum": "shared-load wavefronts",
    "launch__registers_per_thread": "registers per thread",
    "launch__occupancy_limit_registers": "blocks per SM allowed by registers",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "achieved occupancy, % of max warps",
    "sm__cycles_elapsed.avg.per_second": "SM clock",
    "smsp__warps_active.avg.per_cycle_active": "warps per scheduler",
    "lts__t_sectors_op_red.sum": "L2 sectors of reductions (atomics)",
}
# Stall reasons: cycles per issued instruction a warp spends waiting for each reason.
for _r, _what in [("short_scoreboard", "a shared-memory or special-function result"),
                  ("long_scoreboard", "a global-memory result"), ("wait", "a fixed-latency dependency"),
                  ("barrier", "a barrier"), ("dispatch_stall", "the dispatcher"),
                  ("mio_throttle", "the shared-memory instruction queue"),
                  ("math_pipe_throttle", "a busy math pipe")]:
    NCU_METRICS["smsp__average_warps_issue_stalled_%s_per_issue_active.ratio" % _r] = \
        "stall: %s, cycles per instruction" % _what


def ncu_value(text, unit):
    """One cell of an ncu CSV export ("2,420,864" with unit "ns") as the docs print it: times in
    µs or ms, bytes in MiB/GiB, rates in GHz, percentages with %, counts with their separators."""
    try:
        v = float(text.replace(",", ""))
    except ValueError:
        return text or "—"
    if unit == "ns":
        return "%.1f µs" % (v / 1e3) if v < 1e6 else "%.3f ms" % (v / 1e6)
    if unit == "usecond":
        return "%.1f µs" % v if v < 1e3 else "%.3f ms" % (v / 1e3)
    if unit == "msecond":
        return "%.3f ms" % v
    if unit == "byte":
        return binary_bytes(v)
    if unit in ("Kbyte", "Mbyte", "Gbyte"):
        return binary_bytes(v * {"K": 1e3, "M": 1e6, "G": 1e9}[unit[0]])
    if unit == "hz":
        return "%.2f GHz" % (v / 1e9)
    if unit == "%":
        return "%.1f %%" % v
    return text  # counts (inst, register/thread, block, none): as ncu printed them


def ncu_kernel(name):
    """ "void f<__half, T<1, 2>>(AttnParams, SplitArgs)" -> "f<__half, T<1, 2>>"."""
    name = re.sub(r"^void ", "", name.strip())
    depth = 0
    for i, ch in enumerate(name):  # cut the parameter list: the first "(" outside the template
        depth += ch == "<"
        depth -= ch == ">"
        if ch == "(" and depth == 0:
            return name[:i]
    return name


@generator("ncu")
def gen_ncu(ctx, target, metrics, gpu=None):
    """Selected metrics of Nsight Compute exports (ncu_<target>.csv from bench/ncu_summary.sh:
    `ncu --csv --page raw`: a header row, a units row, then one row per profiled kernel), one row
    per metric and one column per kernel; @p target may name several exports (comma-separated),
    side by side, each column headed by its target."""
    res = ctx.results(gpu)
    import csv

    targets = target.split(",")
    want = metrics.split(",")
    columns, names, dev = [], [], ""  # columns: (header, {metric: value})
    for t in targets:
        name = "ncu_%s.csv" % t
        if not res.has(name):
            raise Missing(name, "bench/run_all.sh --ncu")
        names.append(name)
        with open(res.path(name), encoding="utf-8", newline="") as f:
            rows_in = list(csv.reader(f))
        if len(rows_in) < 3 or "Kernel Name" not in rows_in[0]:
            raise ValueError("%s: expected a header row with \"Kernel Name\", a units row and one row per "
                             "kernel (ncu --csv --page raw)" % res.rel(name))
        head_in, units = rows_in[0], rows_in[1]
        data = [r for r in rows_in[2:] if len(r) == len(head_in)]
        kcol = head_in.index("Kernel Name")
        if "device__attribute_display_name" in head_in and not dev:
            dev = " on %s" % data[0][head_in.index("device__attribute_display_name")]
        for r in data:
            header = "`%s`" % ncu_kernel(r[kcol])
            if len(targets) > 1:
                header = "%s: %s" % (t, header)
            columns.append((header, {m: ncu_value(r[head_in.index(m)], units[head_in.index(m)])
                                     for m in want if m in head_in}))
    present = [m for m in want if any(m in c for _, c in columns)]
    absent = [m for m in want if m not in present]
    if not present:
        raise ValueError("%s has none of the metrics %s" % (", ".join(names), metrics))
    rows = []
    for m in present:
        label = NCU_METRICS.get(m)
        rows.append(["%s (`%s`)" % (label, m) if label else "`%s`" % m] + [c.get(m, "–") for _, c in columns])
    out = results_io.markdown_table(["metric"] + [h for h, _ in columns], rows, ["---"] + ["--:"] * len(columns))
    out += "\n\nNsight Compute, one launch per kernel at ncu's default (base) clocks%s (`bench/ncu_summary.sh`, " \
           "target%s %s); %s." % (dev, "s" if len(targets) > 1 else "", ", ".join(targets),
                                  ", ".join(link(res, n) for n in names))
    if absent:
        out += " Not in this export (dropped by ncu on that GPU): %s." % ", ".join("`%s`" % m for m in absent)
    return out


@generator("expect")
def gen_expect(ctx, rung, d="128", n="4096", gpu=None, family="prefill", batch="1", kv="8", sk="65536",
):
    """A handout's one-line "what to expect": the rung against its declared baseline on one shape."""
    res = ctx.results(gpu)
    label = labels_of(ctx, [int(rung)])[0]
    e = ctx.info[label]
    if family == "decode":
        want = dict(family="decode", batch=int(batch), heads_kv=int(kv), seqlen_k=int(sk))
        r = res.need("decode", rung=label, batch=int(batch), heads_kv=int(kv), seqlen_k=int(sk))
        base = earlier_fastest(ctx, res, label, want)
        unit, val = "GB/s", "gbps"
        shape = "batch %s, 32/%s heads, head_dim 128, seqlen_k %s" % (batch, kv, results_io.seqlen_text(int(sk)))
    else:
        want = dict(family="prefill", **prefill_want(int(d), int(n), 0))
        r = res.need("prefill", rung=label, **prefill_want(int(d), int(n), 0))
        b = e["baselines"][0]
        br = res.find(rung=b["label"], **want)
        base = (b["label"], br) if br else None
        unit, val = "TFLOP/s", "tflops"
        shape = "head_dim %s, seqlen %s, not causal, batch x seqlen = 16k tokens, hidden 2048" % (
            d, results_io.seqlen_text(int(n)))
    if base is None:
        raise Missing("the baseline of %s" % label, "bench/run_all.sh")
    fl = res.find(rung="torch_flash", **want)
    return "> `%s` against `%s`, %s: **%s** (%s vs %s %s)%s. Measured on %s, fp16; %s." % (
        label, base[0], shape, results_io.fmt_ratio(base[1]["ms"] / r["ms"]), results_io.fmt_value(r[val]),
        results_io.fmt_value(base[1][val]), unit,
        "; PyTorch flash: %s %s" % (results_io.fmt_value(fl[val]), unit) if fl else "", res.provenance(),
        link(res, "report.md", "report"))


def lesson_diff(ctx):
    """The changed code lines of each rung against the rung it builds on (docs/lesson_diff.py),
    paired through the same registry as every other block."""
    sys.path.insert(0, os.path.join(ROOT, "docs"))
    import lesson_diff as ld  # docs/lesson_diff.py

    mains = {e["number"]: e for e in ctx.info.values() if not e["variant"]}
    return ld.lesson_table(ROOT, mains).rstrip("\n")


if os.path.exists(os.path.join(ROOT, "docs", "lesson_diff.py")):
    GENERATORS["lesson-diff"] = lesson_diff
