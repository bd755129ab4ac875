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
bench/torch/flex.py and SDPA on the causal cells; the window / causal time ratio).

The baselines come from the registry the rungs declare (`Rung::baselines`), printed by
`tour --registry-json` (REGISTRY.json): a rung is compared with the rung it improves on, a study
with its own untiled kernel, a decode rung with the fastest earlier rung on the same shape, a
variant with its rung. Without --registry the report has no baseline columns.

This module writes; bench/results_io.py reads (every results format, the registry, the ceilings)
and holds the formatting every table shares. bench/docgen.py (the package bench/docblocks/) calls
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

from results_io import (  # bench/results_io.py: the loaders and the formatting every table shares
    BACKWARD_FAMILIES, FAMILIES, LABEL_RE, MASK_FAMILIES, SEQLEN_FAMILIES, TORCH_ORDER, find_tour, finite_or,
    fmt_ratio, fmt_value, is_main, load_ceilings, load_context, load_records, load_registry, markdown_table, number_of,
    registry_from_tour, rung_order, seqlen_text, short, skipped_pairs, split_name, version_text, x_of)


# ---- tables ------------------------------------------------------------------------------------


def family_groups(records):
    """{(family, key): [records]}: key (head_dim, causal) for prefill, fp8 and backward, (batch,
    heads_kv, head_dim) for decode and paged, causal for ablation."""
    groups = {}
    for r in records:
        if r["family"] in SEQLEN_FAMILIES:
            key = (r["head_dim"], r["causal"])
        elif r["family"] in MASK_FAMILIES:  # every case in one table, a column each
            key = (r["head_dim"],)
        elif r["family"] == "ablation":
            key = (r["causal"],)
        else:
            key = (r["batch"], r["heads_kv"], r["head_dim"])
        groups.setdefault((r["family"], key), []).append(r)
    order = {f: i for i, f in enumerate(FAMILIES)}
    return dict(sorted(groups.items(), key=lambda kv: (order[kv[0][0]], kv[0][1])))


def group_title(family, key, records):
    r = records[0]
    if family == "prefill":
        d, causal = key
        return (
            "Prefill, head_dim %d, %s" % (d, "causal" if causal else "not causal"),
            "batch x seqlen = %d tokens, %d heads; TFLOP/s (unmasked pairs only)"
            % (r["batch"] * r["seqlen_q"], r["heads_q"]),
        )
    if family == "hopper-prefill":
        d, causal = key
        return (
            "Hopper prefill, head_dim %d, %s" % (d, "causal" if causal else "not causal"),
            "the Hopper forward rungs on the prefill shapes (batch x seqlen = %d tokens, %d heads); "
            "TFLOP/s (unmasked pairs only)" % (r["batch"] * r["seqlen_q"], r["heads_q"]),
        )
    if family == "llama":
        d, causal = key
        return (
            "Llama-3-8B prefill, head_dim %d, causal" % d,
            "batch 1, %d query heads on %d KV heads; TFLOP/s (unmasked pairs only)" % (r["heads_q"], r["heads_kv"]),
        )
    if family == "fp8":
        d, causal = key
        return (
            "FP8, head_dim %d, %s" % (d, "causal" if causal else "not causal"),
            "the prefill shapes (batch x seqlen = %d tokens, %d heads): the FP8 rung on e4m3 Q, K, V "
            "(per-head scales, quantized once outside the time) beside the 16-bit rung it changes and "
            "PyTorch's 16-bit backends; TFLOP/s (unmasked pairs only)"
            % (r["batch"] * r["seqlen_q"], r["heads_q"]),
        )
    if family in BACKWARD_FAMILIES:
        d, causal = key
        gqa = family == "backward-gqa"
        return (
            "Backward%s, head_dim %d, %s" % (", GQA %d:1" % (r["heads_q"] // r["heads_kv"]) if gqa else "", d,
                                             "causal" if causal else "not causal"),
            "batch x seqlen = %d tokens, %d heads%s; the backward pass alone (dQ, dK, dV from Q, K, V, O, "
            "LSE and dO; the forward pass that makes O and LSE is not timed); TFLOP/s by FlashAttention's "
            "convention, 2.5 x the forward's FLOPs (unmasked pairs only)"
            % (r["batch"] * r["seqlen_q"], r["heads_q"], " on %d KV heads" % r["heads_kv"] if gqa else ""),
        )
    if family in MASK_FAMILIES:
        return (
            "Masks and score modifiers%s, head_dim %d" % (", backward" if family == "masks-backward" else "", key[0]),
            "batch x seqlen = %d tokens, %d heads; one column per case and length: causal, a window of 4096 "
            "keys (window_size (4096, 0)), documents (causal within each), prefix-LM (2048 bidirectional keys), "
            "softcap 50, ALiBi, attention sinks (causal, one logit per head); %sTFLOP/s (unmasked pairs only)"
            % (r["batch"] * r["seqlen_q"], r["heads_q"],
               "the backward pass alone, 2.5 x the forward's FLOPs; " if family == "masks-backward" else ""),
        )
    if family == "ablation":
        return (
            "Ablations, %s" % ("causal" if key[0] else "not causal"),
            "every variant beside its rung, back to back; seqlen %d, batch x seqlen = %d tokens, "
            "hidden 2048 (heads = 2048 / head_dim); TFLOP/s (unmasked pairs only)"
            % (r["seqlen_q"], r["batch"] * r["seqlen_q"]),
        )
    b, hkv, d = key
    if family == "paged":
        return (
            "Paged KV cache, batch %d, %d KV heads" % (b, hkv),
            "seqlen_q 1, %d query heads, head_dim %d; pages shuffled in the pool (P = page size in "
            "tokens, 0 = contiguous); GB/s of K and V" % (r["heads_q"], d),
        )
    return (
        "Decode, batch %d, %d KV heads" % (b, hkv),
        "seqlen_q 1, %d query heads, head_dim %d; GB/s (Q, K, V read once, O written once)"
        % (r["heads_q"], d),
    )


def x_text(family, x):
    if family == "ablation":
        return "d=%d" % x
    if family in MASK_FAMILIES:
        return "%s N=%s" % (x[2], seqlen_text(x[1]))
    return ("N=" if family in SEQLEN_FAMILIES else "Sk=") + seqlen_text(x)


class Grid:
    """Times (ms) of one family group: series label x shape. A series is a rung label, or for the
    paged family "label P=<page>"."""

    def __init__(self, records, registry=None):
        self.ms, self.value, self.error = {}, {}, {}
        self.registry = registry
        family = records[0]["family"]
        self.family = family
        for r in records:
            cell = (series_of(r), x_of(r))
            if r["error"]:
                self.error[cell] = r["error"]
                continue
            self.ms[cell] = r["ms"]
            self.value[cell] = r["tflops"] if family in ("ablation",) + SEQLEN_FAMILIES + MASK_FAMILIES else r["gbps"]
        self.xs = sorted({x_of(r) for r in records})
        self.labels = rung_order({series_of(r) for r in records})
        self.mains = [l for l in self.labels if is_main(l)]

    def ratio(self, base, label, x):
        """time(base) / time(label): > 1 means label is faster."""
        a, b = self.ms.get((base, x)), self.ms.get((label, x))
        return a / b if a and b else None

    def baselines(self, label):
        """The declared baselines of @p label (registry entries); [] without a registry."""
        return (self.registry or {}).get(label, [])

    def resolve(self, label, baseline, x):
        """The label baseline @p baseline of @p label resolves to at shape x, or None."""
        if baseline["kind"] == "rung":
            return baseline["label"] if (baseline["label"], x) in self.ms else None
        num = number_of(label)
        best = None
        for m in self.mains:
            if number_of(m) < num and (m, x) in self.ms:
                if best is None or self.ms[(m, x)] < self.ms[(best, x)]:
                    best = m
        return best


DET_SUFFIX = " deterministic"


def series_of(r):
    if r["family"] == "paged":
        return "%s P=%d" % (r["rung"], r["page_size"])
    if r["family"] in BACKWARD_FAMILIES and r.get("deterministic"):
        return r["rung"] + DET_SUFFIX
    return r["rung"]


def rung_cell(label):
    return "`%s`" % label


def value_cells(g, label):
    cells = []
    for x in g.xs:
        if (label, x) in g.value:
            cells.append(fmt_value(g.value[(label, x)]))
        elif (label, x) in g.error:
            cells.append("fail" if "check failed" in g.error[(label, x)] else "skip")
        else:
            cells.append("—")
    return cells


def baseline_rows(g, labels):
    """One row per (entry, declared baseline): the speedup over the baseline at each shape. A
    fixed baseline names itself in the first cell; "the fastest earlier rung" names the winner in
    each cell."""
    rows = []
    for l in labels:
        for b in g.baselines(l):
            targets = {x: g.resolve(l, b, x) for x in g.xs}
            ratios = [g.ratio(targets[x], l, x) if targets[x] else None for x in g.xs]
            if not any(ratios):
                continue
            if b["kind"] == "rung":
                rows.append(["%s vs `%s`" % (rung_cell(l), b["label"])] + [fmt_ratio(r) for r in ratios])
            else:
                rows.append(
                    ["%s vs the fastest earlier rung" % rung_cell(l)]
                    + [
                        "%s vs %s" % (fmt_ratio(r), short(targets[x])) if r else "—"
                        for r, x in zip(ratios, g.xs)
                    ]
                )
    return rows


BASELINE_TITLE = (
    "**Speedup over the declared baseline** (`Rung::baselines`: the rung it improves on; a study "
    "against its own untiled kernel; a decode rung against the fastest earlier rung on that shape; "
    "a variant against its rung)"
)


def torch_rows(g, labels):
    out = []
    for torch_label, name in (("torch_flash", "PyTorch SDPA flash"), ("torch_cudnn", "PyTorch SDPA cuDNN")):
        if not any((torch_label, x) in g.ms for x in g.xs):
            continue
        rows = [[rung_cell(l)] + [fmt_ratio(g.ratio(torch_label, l, x)) for x in g.xs] for l in labels]
        rows = [r for r in rows if any(c != "—" for c in r[1:])]
        if rows:
            out.append((torch_label, name, rows))
    return out


def backward_section(key, records, include_variants, family="backward"):
    """The backward family at one (head_dim, causal): TFLOP/s of each backward rung (atomic dQ, then
    deterministic) and of PyTorch SDPA's backward per backend, the ratio to PyTorch flash and cuDNN,
    and what the deterministic dQ costs."""
    g = Grid(records)
    ladder = [l for l in g.labels if LABEL_RE.match(l) and (include_variants or is_main(l))]
    rows_order = []
    for l in ladder:
        rows_order.append(l)
        if l + DET_SUFFIX in g.labels:
            rows_order.append(l + DET_SUFFIX)
    rungs = list(rows_order)
    rows_order += [l for l in g.labels if l in TORCH_ORDER]

    def cell(l):
        return rung_cell(l[: -len(DET_SUFFIX)]) + " deterministic" if l.endswith(DET_SUFFIX) else rung_cell(l)

    title, sub = group_title(family, key, records)
    header = ["rung"] + [x_text(family, x) for x in g.xs]
    out = ["## %s" % title, "", sub + ".", ""]
    out += ["**TFLOP/s**", "", markdown_table(header, [[cell(l)] + value_cells(g, l) for l in rows_order]), ""]
    for torch_label, name in (("torch_flash", "PyTorch SDPA flash"), ("torch_cudnn", "PyTorch SDPA cuDNN")):
        rows = [[cell(l)] + [fmt_ratio(g.ratio(torch_label, l, x)) for x in g.xs] for l in rungs]
        rows = [r for r in rows if any(c != "—" for c in r[1:])]
        if rows:
            out += ["**Ratio to %s backward** (time of `%s` / time of the rung: above 1 = the rung is faster)"
                    % (name, torch_label), "", markdown_table(header, rows), ""]
    rows = [[rung_cell(l)] + [fmt_ratio(g.ratio(l, l + DET_SUFFIX, x)) for x in g.xs] for l in ladder]
    rows = [r for r in rows if any(c != "—" for c in r[1:])]
    if rows:
        out += ["**Deterministic dQ / atomic dQ** (time of the default run / time of the deterministic "
                "one: below 1 = determinism costs)", "", markdown_table(header, rows), ""]
    return "\n".join(out)


def window_rows(g, labels):
    """What a window costs: per entry, the time of each window case over the causal time at the same
    length (rung 16's check: a window of w keys over N = 2w within 1.3 x causal)."""
    causal = {x[1]: x for x in g.xs if x[2] == "causal"}
    pairs = [(causal[x[1]], x) for x in g.xs if x[2].startswith("window") and x[1] in causal]
    header = ["rung"] + ["%s / causal, N=%s" % (w[2], seqlen_text(w[1])) for _, w in pairs]
    rows = []
    for l in labels:
        cells = []
        for c, w in pairs:
            t_window, t_causal = g.ms.get((l, w)), g.ms.get((l, c))
            cells.append(fmt_ratio(t_window / t_causal) if t_window and t_causal else "—")
        if any(c != "—" for c in cells):
            rows.append([rung_cell(l)] + cells)
    return header, rows


def masks_section(family, key, records, include_variants, registry=None):
    """The masks families at one head_dim: TFLOP/s of every rung and of PyTorch (FlexAttention on
    each case, SDPA flash and cuDNN on the causal ones) per (case, seqlen); each rung's ratio to
    FlexAttention, to its declared baseline (rung 16 against rung 15 on the causal cells: what the
    machinery costs) and to SDPA, and the window / causal time ratio."""
    g = Grid(records, registry)
    ladder = [l for l in g.labels if LABEL_RE.match(l) and (include_variants or is_main(l))]
    torch = [l for l in g.labels if not LABEL_RE.match(l)]
    title, sub = group_title(family, key, records)
    header = ["rung"] + [x_text(family, x) for x in g.xs]
    out = ["## %s" % title, "", sub + ".", ""]
    rows = [[rung_cell(l)] + value_cells(g, l) for l in ladder + torch]
    out += ["**TFLOP/s**", "", markdown_table(header, rows), ""]
    rows = [[rung_cell(l)] + [fmt_ratio(g.ratio("torch_flex", l, x)) for x in g.xs] for l in ladder]
    rows = [r for r in rows if any(c != "—" for c in r[1:])]
    if rows:
        out += ["**Ratio to PyTorch FlexAttention** (time of `torch_flex` / time of the rung: above 1 = the rung "
                "is faster)", "", markdown_table(header, rows), ""]
    rows = baseline_rows(g, ladder)
    if rows:
        out += [BASELINE_TITLE, "", markdown_table(header, rows), ""]
    for torch_label, name, rows in torch_rows(g, ladder):
        out += ["**Ratio to %s** (time of `%s` / time of the rung: above 1 = the rung is faster)"
                % (name, torch_label), "", markdown_table(header, rows), ""]
    wheader, rows = window_rows(g, ladder + torch)
    if rows:
        out += ["**Window / causal** (time of the window case / time of causal at the same length; a window of "
                "w keys over N = 2w should cost at most 1.3 x causal)", "", markdown_table(wheader, rows), ""]
    return "\n".join(out)


def family_section(family, key, records, include_variants, registry=None):
    if family in BACKWARD_FAMILIES:
        return backward_section(key, records, include_variants, family)
    if family in MASK_FAMILIES:
        return masks_section(family, key, records, include_variants, registry)
    g = Grid(records, registry)
    labels = [l for l in g.labels if include_variants or not LABEL_RE.match(l) or is_main(l)]
    if family in ("prefill", "decode", "fp8"):  # a variant that is a main's baseline is shown with it
        wanted = {b["label"] for m in g.mains for b in g.baselines(m) if b["kind"] == "rung"}
        labels = [l for l in g.labels if l in labels or l in wanted]
    title, sub = group_title(family, key, records)
    out = ["## %s" % title, "", sub + ".", ""]
    header = ["rung"] + [x_text(family, x) for x in g.xs]
    unit = "TFLOP/s" if family in ("prefill", "ablation", "fp8", "hopper-prefill", "llama") else "GB/s"
    out += ["**%s**" % unit, "", markdown_table(header, [[rung_cell(l)] + value_cells(g, l) for l in labels]), ""]
    ladder = [l for l in labels if LABEL_RE.match(l)]
    if family == "paged":
        rows = []
        for l in labels:
            rung = l.split(" P=")[0]
            if l.endswith(" P=0"):
                continue
            rows.append([rung_cell(l)] + [fmt_ratio(g.ratio(rung + " P=0", l, x)) for x in g.xs])
        if rows:
            out += ["**Paged / contiguous** (time of P=0 / time of the paged run: below 1 = paging costs)",
                    "", markdown_table(header, rows), ""]
        return "\n".join(out)
    base = next((l for l in g.mains if number_of(l) == 1), None)
    if base and family != "ablation":
        rows = [[rung_cell(l)] + [fmt_ratio(g.ratio(base, l, x)) for x in g.xs] for l in ladder if l != base]
        rows = [r for r in rows if any(c != "—" for c in r[1:])]
        if rows:
            out += ["**Speedup over `%s`**" % base, "", markdown_table(header, rows), ""]
    rows = baseline_rows(g, ladder)
    if rows:
        out += [BASELINE_TITLE, "", markdown_table(header, rows), ""]
    for torch_label, name, rows in torch_rows(g, ladder):
        out += [
            "**Ratio to %s** (time of `%s` / time of the rung: above 1 = the rung is faster)"
            % (name, torch_label),
            "",
            markdown_table(header, rows),
            "",
        ]
    return "\n".join(out)


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


def flex_beside(ladder_path):
    """bench/torch/flex.py's JSON in the folder of @p ladder_path (run_all.sh writes it there), or None."""
    path = os.path.join(os.path.dirname(os.path.abspath(ladder_path)), "torch_flex.json")
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
    for path in (p for p in (torch_path, flex_path) if p):
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
        "`bench/pytorch/torch_sdpa.py`%s); %s. `—` = not measured, `skip` = the rung refuses the shape "
        "(reason below), `fail` = the output check failed. Generated by `bench/report.py` from `%s`%s."
        % (
            ", `bench/pytorch/torch_flex.py`" if flex_path else "",
            ctx.get("dtype", "fp16"),  # ladder_bench --fl_dtype (runs before it had the flag: fp16)
            os.path.basename(ladder_path),
            "".join(" and `%s`" % os.path.basename(p) for p in (torch_path, flex_path) if p),
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
        out += [family_section(family, key, recs, include_variants or family == "ablation", registry), ""]
    if torch_only:
        out += [
            "PyTorch measured shapes the ladder does not run (%s); they are in `%s`."
            % ("; ".join(torch_only), "`, `".join(os.path.basename(p) for p in (torch_path, flex_path) if p)),
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
    forward = {r["rung"] for r in records if r["family"] not in BACKWARD_FAMILIES + ("fp8", "masks-backward")}
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
        shape += (" Backward: the prefill shape, not causal, dQ by atomics, the backward pass alone (TFLOP/s"
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
