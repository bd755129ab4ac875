#!/usr/bin/env python3
"""Speedup tables from one ladder_bench run (and the PyTorch SDPA run on the same GPU).

    python3 bench/report.py LADDER.json [--torch TORCH.json] [--flex FLEX.json] [--registry REGISTRY.json]
                            [--ceilings CEILINGS.json] [--variants] [--out report.md]

writes a markdown report: a header (device, date, git sha, CUDA, datasheet peaks and the measured
ceilings), then per family the throughput of every rung at every shape (TFLOP/s for prefill,
GB/s for decode), the speedup over rung 01, the speedup over each rung's **declared baseline**, and
the ratio to PyTorch SDPA's flash and cuDNN backends. Every ratio compares times on the same shape,
so it is also the ratio of throughputs. Families: prefill (by head_dim and causal), decode (by
batch and KV heads), ablation (every variant beside its rung at one shape), paged (paged KV cache
against contiguous), backward (the backward rungs, atomic and deterministic dQ, against PyTorch
SDPA's flash and cuDNN backward; TFLOP/s by FlashAttention's 2.5 x the forward's FLOPs), fp8 (the
FP8 rung in e4m3 beside the 16-bit rung it changes and PyTorch's 16-bit backends, by head_dim and
causal like prefill), masks and masks-backward (rung 16's masks and score modifiers, one column
per case and length, beside rung 15 on the plain causal cells, PyTorch FlexAttention from
bench/torch/flex.py and SDPA on the causal cells; the window / causal time ratio), mla-decode (rung
17 on MLA's latent cache, a row per shape: time, TFLOP/s and GB/s beside the two floors from the
measured ceilings, and SDPA on the decompressed cache from bench/pytorch/torch_mla.py's
torch_mla.json beside LADDER.json) and mla-prefill (rung 16 at head_dim 192 / 128 against SDPA's
fastest backend, forward only).

The baselines come from the registry the rungs declare (`Rung::baselines`), printed by
`tour --registry-json` (REGISTRY.json): a rung is compared with the rung it improves on, a study
with its own untiled kernel, a decode rung with the fastest earlier rung on the same shape, a
variant with its rung. Without --registry the report has no baseline columns.

This module writes the document (its header, the sections in order, the README's summary) and the
CLI; bench/report_tables.py makes each family's tables; bench/results_io.py reads (every results
format, the registry, the ceilings) and holds the formatting every table shares. bench/docgen.py (the package bench/docblocks/) calls
full_report() to regenerate every committed report.md and summary_table() for the README's summary.

Inputs: ladder_bench's Google Benchmark JSON (--benchmark_out=F --benchmark_out_format=json), whose
benchmark names are "<rung label>/<family>/<shape>" (e.g. "04_fa2/prefill/d128/N4096/causal1",
"11_backward/backward/d128/N4096/causal1/det", "13_fp8/fp8/d128/N4096/causal1"), bench/torch/sdpa.py's
JSON in the same schema ("torch_flash/prefill/d128/N4096/causal0"), bench/torch/flex.py's
("torch_flex/masks/d128/window4096/N32768"), from --flex or else the torch_flex.json beside
LADDER.json; bench/ceilings.cu's JSON for the measured ceilings.
"""

import argparse
import os
import sys

from report_tables import (  # bench/report_tables.py: the per-family tables
    Grid, family_groups, family_section, group_title, rung_cell, x_text)
from results_io import (  # bench/results_io.py: the loaders and the formatting every table shares
    BACKWARD_FAMILIES, LABEL_RE, MASK_FAMILIES, MLA_FAMILIES, find_tour, finite_or, fmt_ratio, fmt_value, is_main,
    load_ceilings, load_context, load_records, load_registry, markdown_table, registry_from_tour,
    rate_ceilings, rung_order, seqlen_text, skipped_pairs, split_name, version_text, x_of)


def ceiling_text(ceilings):
    parts = []
    for what, value, unit, note in ceilings.values():
        parts.append("%s %s %s" % (what, fmt_value(value), unit) if value else "%s: %s" % (what, note))
    return ", ".join(parts)


def header_lines(ctx, torch_ctx, ceilings=None, fp8=False):
    """The report's header table; @p fp8: the run has the fp8 family, so the FP8 tensor peak (twice
    the 16-bit one, the peak rung 13 is measured against) is listed too."""
    dev = ctx.get("device", "unknown GPU")
    rows = [
        ["device", "%s (%s, %s SMs)" % (dev, ctx.get("arch", "?"), ctx.get("sms", "?"))],
        ["date", str(ctx.get("date", "?"))],
        ["git sha", "`%s`" % ctx.get("git_sha", "unknown")],
        [
            "CUDA",
            "runtime %s, driver %s"
            % (version_text(ctx.get("cuda_version", "?")), version_text(ctx.get("driver_version", "?"))),
        ],
    ]
    peaks = []
    for key, what in (
        ("peak_fp32_tflops", "fp32 FMA %s TFLOP/s"),
        ("peak_tensor_tflops", "16-bit tensor %s TFLOP/s"),
        ("peak_gbps", "DRAM %s GB/s"),
    ):
        v = finite_or(ctx.get(key))
        if v:
            peaks.append(what % fmt_value(v))
        if v and fp8 and key == "peak_tensor_tflops":
            peaks.append("FP8 tensor %s TFLOP/s (2 x 16-bit)" % fmt_value(2 * v))
    if peaks:
        rows.append(["peaks (datasheet formula)", ", ".join(peaks)])
    if ceilings:
        rows.append(["measured ceilings (`ceilings.json`)", ceiling_text(ceilings)])
    if torch_ctx:
        rows.append(
            [
                "PyTorch",
                "%s (CUDA %s, cuDNN %s, layout %s), same GPU: %s"
                % (
                    torch_ctx.get("torch", "?"),
                    torch_ctx.get("cuda_version", "?"),
                    torch_ctx.get("cudnn", "?") or "none",
                    torch_ctx.get("layout", "?"),
                    torch_ctx.get("device", "?"),
                ),
            ]
        )
    return ["| | |", "|---|---|"] + ["| %s | %s |" % (a, b) for a, b in rows]


def flex_beside(ladder_path, name="torch_flex.json"):
    """bench/torch/flex.py's JSON (or @p name: torch_mla.json, bench/pytorch/torch_mla.py's) in the
    folder of @p ladder_path (run_all.sh writes them there), or None."""
    path = os.path.join(os.path.dirname(os.path.abspath(ladder_path)), name)
    return path if os.path.exists(path) else None


def full_report(ladder_path, torch_path=None, include_variants=False, registry=None, ceilings=None, flex_path=None):
    """The markdown report. @p registry: load_registry()'s dict (baseline tables); @p ceilings:
    load_ceilings()'s dict (header line); @p flex_path: bench/torch/flex.py's JSON (default: the
    torch_flex.json beside @p ladder_path, if any)."""
    ctx = load_context(ladder_path)
    records = load_records(ladder_path)
    torch_ctx = None
    notes = []
    flex_path = flex_path or flex_beside(ladder_path)
    mla_path = flex_beside(ladder_path, "torch_mla.json")
    for path in (p for p in (torch_path, flex_path, mla_path) if p):
        pctx = load_context(path)
        torch_ctx = torch_ctx or pctx
        if pctx.get("device") and pctx.get("device") != ctx.get("device"):
            notes.append(
                "**Warning:** the PyTorch run was on `%s`, the ladder on `%s`; ratios to PyTorch "
                "compare different GPUs." % (pctx.get("device"), ctx.get("device"))
            )
        records += load_records(path)
    out = ["# FlashLadder benchmark report", ""]
    out += header_lines(ctx, torch_ctx, ceilings, any(r["family"] == "fp8" for r in records)) + [""]
    out += notes
    out += [
        "Median of CUDA-event times with L2 flushed before each launch (`bench/ladder_bench.cpp`, "
        "`bench/pytorch/torch_sdpa.py`%s%s); %s. `—` = not measured, `skip` = the rung refuses the shape "
        "(reason below), `fail` = the output check failed. Generated by `bench/report.py` from `%s`%s."
        % (
            ", `bench/pytorch/torch_flex.py`" if flex_path else "",
            ", `bench/pytorch/torch_mla.py`" if mla_path else "",
            ctx.get("dtype", "fp16"),  # ladder_bench --fl_dtype (runs before it had the flag: fp16)
            os.path.basename(ladder_path),
            "".join(" and `%s`" % os.path.basename(p) for p in (torch_path, flex_path, mla_path) if p),
        ),
        "",
    ]
    if registry is None:
        out += ["(No registry given: the speedups over each rung's declared baseline are not shown.)", ""]
    groups = family_groups(records)
    if not groups:
        out += ["No benchmark entries found."]
    torch_only = []
    for (family, key), recs in groups.items():
        if not any(r["source"] == "ladder" for r in recs):
            torch_only.append(group_title(family, key, recs)[0])
            continue
        out += [family_section(family, key, recs, include_variants or family == "ablation", registry,
                               rate_ceilings(ctx, ceilings)), ""]
    if torch_only:
        out += [
            "PyTorch measured shapes the ladder does not run (%s); they are in `%s`."
            % ("; ".join(torch_only), "`, `".join(os.path.basename(p) for p in (torch_path, flex_path, mla_path) if p)),
            "",
        ]
    skips = skipped_pairs(ctx)
    errors = [(r["rung"], r) for r in records if r["error"] and r["source"] == "ladder"]
    if skips or errors:
        out += ["## Not measured", ""]
        reasons = {}
        for name, why in skips.items():
            label, family = split_name(name)
            if (
                not include_variants
                and family != "ablation"
                and LABEL_RE.match(label)
                and LABEL_RE.match(label)["variant"]
            ):
                continue
            reasons.setdefault((label, why), []).append(name.split("/", 1)[1] if "/" in name else name)
        for label, r in errors:
            x = x_text(r["family"], x_of(r)) if r["family"] in MASK_FAMILIES else x_of(r)
            reasons.setdefault((label, r["error"]), []).append("%s %s" % (r["family"], x))
        for (label, why), shapes in sorted(reasons.items(), key=lambda kv: (rung_order([kv[0][0]])[0], kv[0])):
            out.append(
                "- `%s`: %s (%d shape%s, e.g. `%s`)"
                % (label, why, len(shapes), "s" if len(shapes) > 1 else "", shapes[0])
            )
        out.append("")
    return "\n".join(out).rstrip() + "\n"


# ---- the README summary ------------------------------------------------------------------------


def pick(records, **want):
    for r in records:
        if all(r.get(k) == v for k, v in want.items()) and not r["error"]:
            return r
    return None


def summary_table(ladder_path, torch_path=None, registry=None, link=None, seqlen=4096, decode_sk=65536):
    """The top README's table: one prefill shape (head_dim 128, causal and not) and one decode shape
    (batch 1, 32/8 heads); each rung's speedup over its declared baseline on its own family
    (decode for decode rungs, prefill otherwise), and its ratio to PyTorch's flash and cuDNN.
    Where the run has them, a backward rung gets a row on the backward family's shape (dQ by
    atomics, against PyTorch's backward) and an FP8 rung a row on the fp8 family's (against its
    16-bit baseline and PyTorch's 16-bit backends): one table for every rung of one run."""
    ctx = load_context(ladder_path)
    records = load_records(ladder_path)
    if torch_path:
        records += load_records(torch_path)
    prefill = [r for r in records if r["family"] == "prefill" and r["head_dim"] == 128]
    decode = [r for r in records if r["family"] == "decode" and r["batch"] == 1 and r["heads_kv"] == 8]
    backward = [r for r in records if r["family"] == "backward" and r["head_dim"] == 128 and not r.get("deterministic")]
    fp8 = [r for r in records if r["family"] == "fp8" and r["head_dim"] == 128]
    # Fall back to the largest measured length when the preferred one is absent (--fl_quick runs).
    if prefill and not any(r["seqlen_q"] == seqlen for r in prefill):
        seqlen = max(r["seqlen_q"] for r in prefill)
    if decode and not any(r["seqlen_k"] == decode_sk for r in decode):
        decode_sk = max(r["seqlen_k"] for r in decode)
    g_pre = Grid([r for r in prefill if r["causal"] == 0 and r["seqlen_q"] == seqlen] or prefill, registry)
    g_dec = Grid([r for r in decode if r["seqlen_k"] == decode_sk] or decode, registry) if decode else None
    bwd_at = [r for r in backward if r["causal"] == 0 and r["seqlen_q"] == seqlen]
    g_bwd = Grid(bwd_at, registry) if bwd_at else None
    fp8_at = [r for r in fp8 if r["causal"] == 0 and r["seqlen_q"] == seqlen]
    g_fp8 = Grid(fp8_at, registry) if fp8_at else None
    # A decode rung is one the sweep measured on decode shapes only (it refuses prefill shapes).
    decode_rungs = {r["rung"] for r in records if r["family"] == "decode"} - {
        r["rung"] for r in records if r["family"] == "prefill"}
    # The MLA families' rungs have their own tables (a decode rung on another problem; rung 16 at 192 / 128).
    forward = {r["rung"] for r in records if r["family"] not in BACKWARD_FAMILIES + MLA_FAMILIES + ("fp8",
                                                                                                  "masks-backward")}
    # A backward rung is measured in the backward family alone; an FP8 rung in the fp8 family alone.
    backward_rungs = {r["rung"] for r in bwd_at} - forward - {"torch_flash", "torch_cudnn"}
    fp8_rungs = {r["rung"] for r in fp8_at} - forward - {"torch_flash", "torch_cudnn"}
    # ... less the 16-bit entries that the fp8 family runs as an FP8 rung's declared baseline.
    fp8_rungs -= {b["label"] for l in fp8_rungs for b in (registry or {}).get(l, []) if b["kind"] == "rung"}
    torch = {"torch_flash", "torch_cudnn"}
    shown = forward | ({r["rung"] for r in bwd_at} if g_bwd else set()) | (fp8_rungs if g_fp8 else set())
    shown = {l for l in shown if l in torch or l in forward or l in backward_rungs or l in fp8_rungs}
    labels = rung_order({l for l in shown if l in torch or is_main(l)})
    header = ["rung", "compared with", "prefill TFLOP/s", "causal TFLOP/s", "decode GB/s"]
    if g_bwd:
        header.append("backward TFLOP/s")
    header += ["speedup", "vs PyTorch flash", "vs cuDNN"]
    rows = []
    for l in labels:
        in_fp8 = l in fp8_rungs
        fam = fp8 if in_fp8 else prefill
        p0 = pick(fam, rung=l, causal=0, seqlen_q=seqlen)
        p1 = pick(fam, rung=l, causal=1, seqlen_q=seqlen)
        dec = pick(decode, rung=l, seqlen_k=decode_sk)
        cells = [rung_cell(l), "", fmt_value(p0["tflops"]) if p0 else "—", fmt_value(p1["tflops"]) if p1 else "—",
                 fmt_value(dec["gbps"]) if dec else "—"]
        if g_bwd:
            b = pick(bwd_at, rung=l)
            cells.append(fmt_value(b["tflops"]) if b else "—")
        ratios = ["—", "—", "—"]  # speedup, vs flash, vs cuDNN
        if LABEL_RE.match(l):
            if l in backward_rungs:
                g, x = g_bwd, seqlen
            elif in_fp8:
                g, x = g_fp8, seqlen
            elif l in decode_rungs:
                g, x = g_dec, decode_sk
            else:
                g, x = g_pre, seqlen
            if g is not None:
                # The first declared baseline measured on this shape (a study may name two).
                bs = g.baselines(l)
                b = next((b for b in bs if g.resolve(l, b, x)), bs[0] if bs else None)
                if b is not None:
                    target = g.resolve(l, b, x)
                    if b["kind"] == "rung":
                        cells[1] = "`%s`" % b["label"]
                    else:
                        cells[1] = "fastest earlier%s" % (": `%s`" % target if target else "")
                    ratios[0] = fmt_ratio(g.ratio(target, l, x)) if target else "—"
                elif l in backward_rungs:
                    cells[1] = "PyTorch's backward"
                ratios[1] = fmt_ratio(g.ratio("torch_flash", l, x))
                ratios[2] = fmt_ratio(g.ratio("torch_cudnn", l, x))
        rows.append(cells + ratios)
    shape = (
        "Prefill: head_dim 128, seqlen %s, batch x seqlen = 16k tokens, 16 heads, fp16. Decode: batch 1, "
        "32 query / 8 KV heads, head_dim 128, seqlen_k %s. The speedup and the PyTorch ratios are on the "
        "rung's own family (decode for decode rungs, non-causal prefill otherwise)."
        % (seqlen_text(seqlen), seqlen_text(decode_sk))
    )
    if g_bwd:
        shape += (" Backward: the prefill shape, not causal, not deterministic (dQ summed in any order), the backward pass alone (TFLOP/s"
                  " count 2.5 x the forward's FLOPs), against PyTorch SDPA's backward in the same run.")
    if g_fp8:
        shape += (" FP8: the prefill shape on e4m3 Q, K, V (per-head scales, the quantization outside the"
                  " time), against its 16-bit baseline and PyTorch's 16-bit backends in the same run.")
    where = "Measured on %s, %s, commit `%s`" % (
        ctx.get("device", "?"),
        str(ctx.get("date", "?"))[:10],
        ctx.get("git_sha", "?"),
    )
    if link:
        where += "; every shape and ratio: [%s](%s)" % (link, link)
    align = ["---", "---"] + ["--:"] * (len(header) - 2)
    return "\n".join([markdown_table(header, rows, align), "", shape + " " + where + "."]) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("ladder", help="ladder_bench JSON (Google Benchmark format)")
    ap.add_argument("--torch", help="bench/torch/sdpa.py JSON from the same GPU (optional)")
    ap.add_argument("--flex", help="bench/torch/flex.py JSON from the same GPU (default: torch_flex.json beside LADDER)")
    ap.add_argument("--registry", help="tour --registry-json output: the rungs' declared baselines "
                    "(default: ask the newest build/*/bin/tour)")
    ap.add_argument("--ceilings", help="bench/ceilings.cu JSON from the same GPU (optional)")
    ap.add_argument("--out", help="markdown report to write (default: standard output)")
    ap.add_argument("--variants", action="store_true", help="list rung variants too (ablations, sweeps)")
    args = ap.parse_args(argv)
    try:
        if args.registry:
            registry = load_registry(args.registry)
        else:
            tour = find_tour()
            registry = registry_from_tour(tour)[0] if tour else None
        ceilings = load_ceilings(args.ceilings) if args.ceilings else None
        report = full_report(args.ladder, args.torch, args.variants, registry, ceilings, args.flex)
    except (OSError, ValueError, KeyError) as e:
        print("report.py: error: %s" % e, file=sys.stderr)
        return 2
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(report)
        print("report.py: wrote %s" % args.out)
    else:
        sys.stdout.write(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
