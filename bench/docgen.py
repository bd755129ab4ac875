#!/usr/bin/env python3
"""Every measured figure in the docs, generated from the committed runs under bench/results/.

    python3 bench/docgen.py --check [--bin BUILD/bin | --registry REGISTRY.json]
    python3 bench/docgen.py --write [--bin BUILD/bin | --registry REGISTRY.json]
    python3 bench/docgen.py --list

A markdown file (README.md, steps/*/README.md, docs/**/*.md, bench/README.md, notebooks/README.md)
holds generated blocks between two marker lines:

    <!-- gen:prefill-table rungs=02 d=64,128 -->
    ...generated: never edit by hand...
    <!-- /gen:prefill-table -->

The first marker names a generator (GENERATORS below, `--list` prints them) and its parameters.
Every committed bench/results/<gpu>/report.md is generated too (bench/report.py). --write rewrites
the blocks and reports from the committed files; --check regenerates them in memory and exits 1
with a unified diff when a committed file differs, so a hand-edited figure fails the CPU test
`cpu_docgen` (tests/cpu/test_docgen.py), and so does a results file whose docs were not
regenerated. A block whose data no committed run holds says so, with the command that makes it;
it never keeps a number from elsewhere.

Which run the docs quote: PRIMARY below (one folder name); a block may name another with gpu=...
The rungs' declared baselines come from the registry, printed by the built `tour --registry-json`
(--bin: the folder that holds `tour`; default: the newest build/*/bin/tour).
Exit: 0 up to date (or written), 1 stale (--check), 2 usage or data errors.
"""

import argparse
import difflib
import glob
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import report  # noqa: E402  bench/report.py: one parser and one set of table helpers

# The results folder the course quotes (bench/results/<PRIMARY>/): the GPU with the full sweep.
PRIMARY = "nvidia-h100-80gb-hbm3"

MARK_RE = re.compile(r"^<!-- gen:(?P<name>[a-z0-9-]+)(?P<args>(?: [a-z_]+=[^ ]+)*) -->$")
END_FMT = "<!-- /gen:%s -->"
DOC_GLOBS = ("README.md", "steps/*/README.md", "docs/*.md", "docs/labs/*.md", "bench/README.md",
             "notebooks/README.md")


class Missing(Exception):
    """The data a block needs is in no committed run: the block says so and how to make it."""

    def __init__(self, what, command):
        super().__init__(what)
        self.what, self.command = what, command


# ---- the committed runs -------------------------------------------------------------------------


class Results:
    """One folder bench/results/<gpu>/: its records, context, meta and side files, loaded lazily."""

    def __init__(self, gpu):
        self.gpu = gpu
        self.dir = os.path.join(ROOT, "bench", "results", gpu)
        if not os.path.isdir(self.dir):
            raise ValueError("no results folder bench/results/%s" % gpu)
        self._records = None

    def path(self, name):
        return os.path.join(self.dir, name)

    def rel(self, name):
        return "bench/results/%s/%s" % (self.gpu, name)

    def has(self, name):
        return os.path.exists(self.path(name))

    def json(self, name):
        with open(self.path(name), encoding="utf-8") as f:
            return json.load(f)

    @property
    def records(self):
        if self._records is None:
            recs = []
            if self.has("ladder_bench.json"):
                recs += report.load_records(self.path("ladder_bench.json"))
            if self.has("torch_sdpa.json"):
                recs += report.load_records(self.path("torch_sdpa.json"))
            self._records = [r for r in recs if not r["error"]]
        return self._records

    @property
    def ctx(self):
        return report.load_context(self.path("ladder_bench.json"))

    @property
    def meta(self):
        return self.json("meta.json") if self.has("meta.json") else {}

    def find(self, **want):
        """The record with every field of @p want (None if absent)."""
        for r in self.records:
            if all(r.get(k) == v for k, v in want.items()):
                return r
        return None

    def need(self, family, command_family=None, **want):
        r = self.find(family=family, **want)
        if r is None:
            desc = ", ".join("%s=%s" % kv for kv in sorted(want.items()))
            raise Missing(
                "%s (%s) on %s" % (family, desc, self.gpu),
                "bench/run_all.sh --family %s" % (command_family or family),
            )
        return r

    def provenance(self):
        """ "NVIDIA H200, 2026-11-22, commit `5efb7eb`" (the ladder run's context)."""
        ctx = self.ctx
        return "%s, %s, commit `%s`" % (ctx.get("device", "?"), str(ctx.get("date", "?"))[:10],
                                        ctx.get("git_sha", "?"))


class Context:
    def __init__(self, registry, info):
        self.registry = registry  # report.load_registry()'s dict: label -> declared baselines
        self.info = info  # label -> the registry entry (number, variant, peak, baselines, ...)
        self._results = {}

    def results(self, gpu=None):
        gpu = gpu or PRIMARY
        if gpu not in self._results:
            self._results[gpu] = Results(gpu)
        return self._results[gpu]


# ---- helpers --------------------------------------------------------------------------------------


def ints(s):
    return [int(x) for x in str(s).split(",") if x != ""]


def labels_of(ctx, numbers):
    """Main-entry labels of rung numbers, from the registry ("05" -> "05_tensor_cores")."""
    out = []
    for n in numbers:
        hit = [l for l, e in ctx.info.items() if e["number"] == n and not e["variant"]]
        if not hit:
            raise ValueError("no rung %02d in the registry" % n)
        out.append(hit[0])
    return out


# The folder of the markdown file being generated: links are written relative to it.
CURRENT_DIR = [ROOT]


def link(res, name, text=None):
    """A markdown link from the file being generated to a results file."""
    path = os.path.relpath(os.path.join(ROOT, res.rel(name)), CURRENT_DIR[0])
    return "[%s](%s)" % (text or "`%s`" % res.rel(name), path)


def measured_line(res, what=""):
    return "Measured on %s%s; every shape: %s." % (res.provenance(), what, link(res, "report.md"))


def pct_of_peak(ctx_json, entry_peak, rec):
    # The FP8 tensor peak is twice the 16-bit one (DeviceInfo's formula, Peak::tensor_fp8).
    key, factor = {"fp32_fma": ("peak_fp32_tflops", 1), "tensor_16bit": ("peak_tensor_tflops", 1),
                   "tensor_fp8": ("peak_tensor_tflops", 2)}.get(entry_peak, (None, 1))
    if key is None:
        return None
    peak = report._num(ctx_json.get(key))
    return 100.0 * rec["tflops"] / (factor * peak) if peak else None


def binary_bytes(b):
    """ "256.0 MiB" (the runner's format_bytes)."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(b) < 1024 or unit == "TiB":
            return "%.0f %s" % (b, unit) if unit == "B" else "%.1f %s" % (b, unit)
        b /= 1024.0


def pct(v):
    return "—" if v is None else "%.1f %%" % v


def ms(v):
    return "—" if v is None else ("%.3f ms" % v if v < 10 else "%.2f ms" % v if v < 100 else "%.1f ms" % v)


def prefill_want(d, n, causal):
    return dict(head_dim=d, seqlen_q=n, causal=causal)


def ratio_text(a, b):
    """time(a) / time(b) as a speedup of b, or —."""
    return report.fmt_ratio(a["ms"] / b["ms"]) if a and b else "—"


def span(values):
    vals = [v for v in values if v is not None]
    if not vals:
        return "—"
    lo, hi = min(vals), max(vals)
    return report.fmt_ratio(lo) if report.fmt_ratio(lo) == report.fmt_ratio(hi) else "%s–%s" % (
        report.fmt_ratio(lo).rstrip("×"), report.fmt_ratio(hi))


# ---- generators -------------------------------------------------------------------------------------
# Each takes (ctx, **params) and returns markdown. Parameters come from the marker as strings.

GENERATORS = {}


def generator(name):
    def deco(f):
        GENERATORS[name] = f
        return f

    return deco


@generator("readme-summary")
def gen_readme_summary(ctx, gpu=None):
    """The top README's table: every rung at one prefill and one decode shape, its declared
    baseline, the speedup over it, and PyTorch (report.summary_table)."""
    res = ctx.results(gpu)
    return report.summary_table(res.path("ladder_bench.json"),
                                res.path("torch_sdpa.json") if res.has("torch_sdpa.json") else None,
                                ctx.registry, link=res.rel("report.md")).rstrip("\n")


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
    return report.markdown_table(["rung", "compared with", "why"], rows, ["---", "---", "---"])


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
                    rows.append(["`%s`" % label, str(dd), str(r["heads_q"]), report.seqlen_text(nn),
                                 "yes" if c else "no", ms(r["ms"]), report.fmt_value(r["tflops"]),
                                 pct(pct_of_peak(cj, e["peak"], r)), base or "—"])
    peak_name = "% of datasheet peak"
    table = report.markdown_table(["rung", "head_dim", "heads", "seqlen", "causal", "time", "TFLOP/s", peak_name,
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
            label, b["label"], dd, report.seqlen_text(min(ns)), report.seqlen_text(max(ns)), "; ".join(parts)))
    return "\n".join(lines) + "\n\n" + measured_line(res)


@generator("torch-compare")
def gen_torch_compare(ctx, rung, d="128", n="4096", causal="0,1", gpu=None, family="prefill"):
    """The rung against PyTorch SDPA's flash (FlashAttention-2) and cuDNN backends, same GPU, same
    run: ms and the ratio (time of PyTorch / time of the rung: above 1 = the rung is faster).
    family=ablation reads the ablation shapes (seqlen 4096, the only ones with head_dim 256)."""
    res = ctx.results(gpu)
    label = labels_of(ctx, [int(rung)])[0]
    rows = []
    for dd in ints(d):
        for nn in ints(n):
            for c in ints(causal):
                w = prefill_want(dd, nn, c)
                r = res.need(family, rung=label, **w)
                fl = res.find(family=family, rung="torch_flash", **w)
                cu = res.find(family=family, rung="torch_cudnn", **w)
                rows.append([str(dd), report.seqlen_text(nn), "yes" if c else "no", "%.3f" % r["ms"],
                             report.fmt_value(r["tflops"]), "%.3f" % fl["ms"] if fl else "—", ratio_text(fl, r),
                             "%.3f" % cu["ms"] if cu else "—", ratio_text(cu, r)])
    head = ["head_dim", "seqlen", "causal", "`%s` ms" % label, "TFLOP/s", "flash ms", "flash / rung",
            "cuDNN ms", "cuDNN / rung"]
    return report.markdown_table(head, rows) + "\n\n" + measured_line(
        res, ", fp16, batch x seqlen = 16k tokens, hidden 2048, PyTorch %s" % res.json("torch_sdpa.json")
        ["context"].get("torch", "?"))


def gqa_text(family):
    """", GQA 4:1 (heads_kv = heads_q / 4)" for the backward-gqa family, else ""."""
    return ", GQA 4:1 (heads_kv = heads_q / 4)" if family == "backward-gqa" else ""


@generator("backward-table")
def gen_backward_table(ctx, rung="11", d="64,128", n="4096", causal="0,1", gpu=None, family="backward"):
    """A backward rung (the backward family, or backward-gqa) against PyTorch SDPA's flash and cuDNN backward, same
    GPU, same run: ms and TFLOP/s (2.5 x the forward's FLOPs) of the default (atomic dQ) and the
    deterministic run, and the ratios (time of PyTorch / time of the rung: above 1 = faster)."""
    res = ctx.results(gpu)
    label = labels_of(ctx, [int(rung)])[0]
    rows = []
    for dd in ints(d):
        for nn in ints(n):
            for c in ints(causal):
                w = prefill_want(dd, nn, c)
                r = res.need(family, rung=label, deterministic=0, **w)
                det = res.find(family=family, rung=label, deterministic=1, **w)
                fl = res.find(family=family, rung="torch_flash", **w)
                cu = res.find(family=family, rung="torch_cudnn", **w)
                rows.append([str(dd), report.seqlen_text(nn), "yes" if c else "no", "%.3f" % r["ms"],
                             report.fmt_value(r["tflops"]), report.fmt_value(det["tflops"]) if det else "—",
                             "%.3f" % fl["ms"] if fl else "—", ratio_text(fl, r),
                             "%.3f" % cu["ms"] if cu else "—", ratio_text(cu, r)])
    head = ["head_dim", "seqlen", "causal", "`%s` ms" % label, "TFLOP/s", "deterministic TFLOP/s",
            "flash ms", "flash / rung", "cuDNN ms", "cuDNN / rung"]
    torch = res.json("torch_sdpa.json")["context"].get("torch", "?") if res.has("torch_sdpa.json") else "not run"
    return report.markdown_table(head, rows) + "\n\n" + measured_line(
        res, ", fp16, backward pass only, batch x seqlen = 16k tokens, hidden 2048%s, PyTorch %s" % (
            gqa_text(family), torch))


@generator("backward-entries")
def gen_backward_entries(ctx, rung="11", d="64,128", n="4096", causal="0", gpu=None, family="backward"):
    """Every entry of a backward rung that the run measured (its main entry and variants, as the
    run named them: a variant may since have left the tree), TFLOP/s per shape, and its time
    relative to PyTorch SDPA's flash backward in the same run (above 1 = the entry is faster)."""
    res = ctx.results(gpu)
    prefix = labels_of(ctx, [int(rung)])[0]
    entries = []
    for r in res.records:
        lab = r.get("rung", "")
        if r.get("family") == family and (lab == prefix or lab.startswith(prefix + "[")) \
                and lab not in entries:
            entries.append(lab)
    entries.sort(key=lambda l: (l != prefix, l))
    shapes = [(dd, nn, c) for dd in ints(d) for nn in ints(n) for c in ints(causal)]
    head = ["entry"] + ["d=%d %s%s" % (dd, report.seqlen_text(nn), ", causal" if c else "")
                        for dd, nn, c in shapes]
    rows = []
    for lab in entries:
        cells = ["`%s`" % lab]
        for dd, nn, c in shapes:
            w = prefill_want(dd, nn, c)
            r = res.find(family=family, rung=lab, deterministic=0, **w)
            fl = res.find(family=family, rung="torch_flash", **w)
            cells.append("%s (%s)" % (report.fmt_value(r["tflops"]), ratio_text(fl, r)) if r else "—")
        rows.append(cells)
    if not rows:
        raise Missing("the %s family for %s" % (family, prefix), "bench/run_all.sh --family %s" % family)
    return report.markdown_table(head, rows, ["---"] + ["--:"] * len(shapes)) + "\n\n" + measured_line(
        res, ", fp16, backward pass only, TFLOP/s (time of PyTorch's flash backward / time of the "
        "entry), batch x seqlen = 16k tokens, hidden 2048" + gqa_text(family))


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
        cells = [report.seqlen_text(nn)]
        for who in (label, "torch_flash"):
            a = res.find(family="prefill", rung=who, **prefill_want(dl, nn, 0))
            b = res.find(family="prefill", rung=who, **prefill_want(ds, nn, 0))
            if not (a and b):
                missing.append(who)
            cells.append("%s (%.3f vs %.3f ms)" % (ratio_text(a, b), a["ms"], b["ms"]) if a and b else "—")
        rows.append(cells)
    head = ["seqlen", "`%s`: time d=%d / time d=%d" % (label, dl, ds), "PyTorch flash: the same"]
    out = report.markdown_table(head, rows) + "\n\n" + measured_line(res, ", fp16, not causal")
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
                    cells.append("%.3f (%s)" % (r["ms"], report.fmt_ratio(r["ms"] / m["ms"])))
                else:
                    cells.append("—")
        if any_cell:
            rows.append(cells)
    if not rows:
        raise Missing("the ablation family for %s" % label, "bench/run_all.sh --family ablation")
    head = ["entry"] + ["d=%d%s ms (/ rung)" % (dd, ", causal" if c else "") for dd in ints(d) for c in (0, 1)]
    sample = res.find(family="ablation")
    return report.markdown_table(head, rows) + "\n\n" + measured_line(
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
        raise ValueError("no attribution table for rung %02d in bench/docgen.py" % num)

    def entry(name):
        if re.fullmatch(r"\d\d", name):
            return labels_of(ctx, [int(name)])[0], "prefill"
        return (label + ("[%s]" % name if name else "")), "ablation"

    rows = []
    any_cell = False
    for effect, slow, fast, source in ATTRIBUTIONS[num]:
        (ls, fs), (lf, ff) = entry(slow), entry(fast)
        cells = ["%s: `%s` / `%s`" % (effect, report.short(ls), report.short(lf))]
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
    return report.markdown_table(head, rows, ["---"] + ["--:"] * (len(head) - 2) + ["---"]) + \
        "\n\n" + measured_line(res, ", fp16, batch x seqlen = 16k tokens, hidden 2048")


def run_label(j):
    """The entry of a run report: `NN_name` or `NN_name[variant]`."""
    r = j["rung"]
    return "`%02d_%s%s`" % (r["number"], r["name"], "[%s]" % r["variant"] if r.get("variant") else "")


def run_problem(p):
    """A run report's problem in a few words: "B=4 H=16 N=4096 d=128 fp16", with seqlen_q and
    seqlen_k, GQA heads and the mask where they matter."""
    n = ("N=%d" % p["seqlen_q"]) if p["seqlen_q"] == p["seqlen_k"] else "Sq=%d Sk=%d" % (p["seqlen_q"], p["seqlen_k"])
    h = ("H=%d" % p["heads_q"]) if p.get("heads_kv", p["heads_q"]) == p["heads_q"] else "H=%d/%d" % (
        p["heads_q"], p["heads_kv"])
    return "B=%d %s %s d=%d %s%s" % (p["batch"], h, n, p["head_dim"], p["dtype"], " causal" if p.get("causal") else "")


def run_reports(ctx, files, gpu):
    """(Results, [(name, report)]) of the committed run reports @p files (comma-separated; a
    rung's --json output) in folder @p gpu; Missing for the first that is not there."""
    res = ctx.results(gpu)
    out = []
    for name in files.split(","):
        if not res.has(name):
            raise Missing(name, "the rung's --json FILE")
        out.append((name, res.json(name)))
    return res, out


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
                     ms(t["median_ms"]), report.fmt_value(t["tflops"]), "%.1f %%" % t["percent_of_peak"],
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
    return report.markdown_table(head, rows) + "\n\nMeasured on %s%s." % (d["name"], when)


@generator("bwd-check")
def gen_bwd_check(ctx, files, gpu=None):
    """Committed backward run reports (a backward rung's --json output), one row each: the entry,
    the problem, dQ's, dK's and dV's relative Frobenius error beside its tolerance, the verdict."""
    res, reports = run_reports(ctx, files, gpu)
    rows = []
    for name, j in reports:
        c = j["check"]
        g = c["gradients"]
        rows.append([run_label(j), run_problem(j["problem"])] + ["%.1e / %.1e" % (g[t]["rel_fro"], g[t]["tol_rel_fro"]) for t in ("dq", "dk", "dv")]
                    + ["%s (%s)" % ("PASS" if c["pass"] else "FAIL", c["mode"]), link(res, name, "`%s`" % name)])
    first = reports[0][1]
    head = ["entry", "problem", "dQ rel_fro / tol", "dK rel_fro / tol", "dV rel_fro / tol", "check", "report"]
    return report.markdown_table(head, rows) + "\n\nMeasured on %s, %s, commit `%s`." % (
        first["device"]["name"], first["date"][:10], first["git_sha"])


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
    return report.markdown_table(["kernel", "threads", "registers", "local B", "shared B", "blocks/SM",
                                  "occupancy"], rows, ["---"] + ["--:"] * 6) + \
        "\n\n%s, B=%d Sq=%d Sk=%d H=%d/%d d=%d %s; %s." % (j["device"]["name"], p["batch"], p["seqlen_q"],
                                                        p["seqlen_k"], p["heads_q"], p["heads_kv"], p["head_dim"],
                                                        p["dtype"], link(res, file))


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
                     report.fmt_ratio(b / r["median_ms"]) if b else "—"])
    head = ["variant", "passes over K/V", "BLOCK_M x BLOCK_N", "registers", "local B / thread",
            "blocks/SM (occupancy)", "check", "ms", "TFLOP/s", "vs untiled"]
    return report.markdown_table(head, rows) + "\n\n%s, %s on %s; %s." % (
        doc["problem"], "median ms", doc["device"]["name"], link(res, name))


def earlier_fastest(ctx, res, label, want):
    """(label, record) of the fastest main rung numbered below @p label measured at @p want: the
    report's rule (report.Grid.resolve), on the records of that one shape."""
    recs = [r for r in res.records if all(r.get(k) == v for k, v in want.items())]
    if not recs:
        return None
    g = report.Grid(recs, ctx.registry)
    x = report.x_of(recs[0])
    best = g.resolve(label, {"kind": "fastest_earlier"}, x)
    return (best, next(r for r in recs if r["rung"] == best)) if best else None


@generator("decode-table")
def gen_decode_table(ctx, rung="8", shapes="1/8/1024,1/8/65536", gpu=None):
    """Decode shapes batch/kv_heads/seqlen_k: the decode rung (ms, GB/s), its baseline (the fastest
    earlier rung on that shape, named), PyTorch cuDNN and flash, and the ratios."""
    res = ctx.results(gpu)
    label = labels_of(ctx, [int(rung)])[0]
    rows = []
    for s in shapes.split(","):
        b, hkv, sk = (int(x) for x in s.split("/"))
        want = dict(family="decode", batch=b, heads_kv=hkv, seqlen_k=sk)
        r = res.need("decode", rung=label, batch=b, heads_kv=hkv, seqlen_k=sk)
        e = earlier_fastest(ctx, res, label, want)
        cu = res.find(rung="torch_cudnn", **want)
        fl = res.find(rung="torch_flash", **want)
        rows.append(["%d, 32/%d, %s" % (b, hkv, report.seqlen_text(sk)), "%.4f" % r["ms"], report.fmt_value(r["gbps"]),
                     "`%s` %s" % (report.short(e[0]), report.fmt_value(e[1]["gbps"])) if e else "—",
                     ratio_text(e[1], r) if e else "—", report.fmt_value(cu["gbps"]) if cu else "—",
                     report.fmt_value(fl["gbps"]) if fl else "—", ratio_text(cu, r), ratio_text(fl, r)])
    head = ["B, heads q/kv, Sk", "`%s` ms" % report.short(label), "GB/s", "fastest earlier rung, GB/s",
            "speedup", "cuDNN GB/s", "FA2 GB/s", "vs cuDNN", "vs FA2"]
    out = report.markdown_table(head, rows) + "\n\n" + measured_line(
        res, ", fp16, head_dim 128, seqlen_q 1, GB/s of Q, K, V read once and O written once")
    earlier = sorted(l for l, e in ctx.info.items() if not e["variant"] and e["number"] < report.number_of(label))
    ran = sorted({r["rung"] for r in res.records if r["family"] == "decode" and r["rung"] in earlier})
    if ran != earlier:
        out += " The earlier rungs measured on this GPU: %s (not all: the fastest earlier rung is the " \
               "fastest of these)." % ", ".join("`%s`" % report.short(l) for l in ran)
    return out


@generator("decode-variants")
def gen_decode_variants(ctx, rung="8", batch="1", kv="8", gpu=None):
    """GB/s of a decode rung and each of its variants over seqlen_k (decode family, --fl_variants)."""
    res = ctx.results(gpu)
    label = labels_of(ctx, [int(rung)])[0]
    entries = [l for l, e in ctx.info.items() if e["number"] == int(rung)]
    b, hkv = int(batch), int(kv)
    sks = sorted({r["seqlen_k"] for r in res.records if r["family"] == "decode" and r["rung"] == label
                  and r["batch"] == b and r["heads_kv"] == hkv})
    rows = []
    for l in entries:
        cells = [res.find(family="decode", rung=l, batch=b, heads_kv=hkv, seqlen_k=sk) for sk in sks]
        if any(cells):
            rows.append(["`%s`" % l] + [report.fmt_value(c["gbps"]) if c else "—" for c in cells])
    if len(rows) < 2:
        raise Missing("the variants of %s in the decode family" % label,
                      "bench/run_all.sh --family decode -- --fl_variants")
    return report.markdown_table(["entry"] + ["Sk=" + report.seqlen_text(x) for x in sks], rows) + "\n\n" + \
        measured_line(res, ", batch %d, 32/%d heads, head_dim 128, GB/s" % (b, hkv))


@generator("splits")
def gen_splits(ctx, gpu=None):
    """Rung 08's split study (decode_splits/*.json): GB/s per --splits count and the heuristic's
    choice (--splits 0), per seqlen_k."""
    res = ctx.results(gpu)
    files = sorted(glob.glob(res.path("decode_splits/*.json")))
    if not files:
        raise Missing("decode_splits/*.json on %s" % res.gpu, "bench/run_all.sh --family decode")
    runs = {}
    shape = None
    for f in files:
        with open(f, encoding="utf-8") as fh:
            j = json.load(fh)
        if "timing" not in j:
            continue
        p = j["problem"]
        shape = (p["batch"], p["heads_q"], p["heads_kv"], p["head_dim"])
        m = re.search(r"split-KV: (\d+) split", " ".join(j.get("notes", [])))
        runs[(p["seqlen_k"], p["num_splits"])] = (j["timing"]["gbps"], int(m.group(1)) if m else p["num_splits"])
    sks = sorted({k[0] for k in runs})
    counts = sorted({k[1] for k in runs if k[1] > 0})
    rows = []
    for sk in sks:
        fixed = {c: runs[(sk, c)][0] for c in counts if (sk, c) in runs}
        best = max(fixed, key=fixed.get) if fixed else None
        cells = [report.seqlen_text(sk)]
        for c in counts:
            v = fixed.get(c)
            cells.append("—" if v is None else ("**%s**" if c == best else "%s") % report.fmt_value(v))
        h = runs.get((sk, 0))
        cells.append("%s (%d)" % (report.fmt_value(h[0]), h[1]) if h else "—")
        rows.append(cells)
    head = ["seqlen_k"] + [str(c) for c in counts] + ["heuristic (splits)"]
    b, hq, hkv, d = shape
    return report.markdown_table(head, rows) + "\n\nGB/s of K and V, batch %d, %d/%d heads, head_dim %d, by " \
        "`--splits`; bold: the best fixed count. Measured on %s (%s); files %s." % (
            b, hq, hkv, d, res.meta.get("device", "?"), res.provenance().split(", ", 1)[1],
            link(res, "decode_splits", "`%s`" % res.rel("decode_splits/")))


@generator("paged")
def gen_paged(ctx, rung="8", gpu=None):
    """Paged KV cache against contiguous, back to back (family paged): GB/s and the ratio."""
    res = ctx.results(gpu)
    label = labels_of(ctx, [int(rung)])[0]
    recs = [r for r in res.records if r["family"] == "paged" and r["rung"] == label]
    if not recs:
        raise Missing("the paged family for %s" % label, "bench/run_all.sh --family paged")
    sks = sorted({r["seqlen_k"] for r in recs})
    pages = sorted({r["page_size"] for r in recs})
    rows = []
    for sk in sks:
        base = next((r for r in recs if r["seqlen_k"] == sk and r["page_size"] == 0), None)
        cells = [report.seqlen_text(sk)]
        for pg in pages:
            r = next((x for x in recs if x["seqlen_k"] == sk and x["page_size"] == pg), None)
            if r is None:
                cells.append("—")
            elif pg == 0 or base is None:
                cells.append(report.fmt_value(r["gbps"]))
            else:
                cells.append("%s (%.2f)" % (report.fmt_value(r["gbps"]), base["ms"] / r["ms"]))
        rows.append(cells)
    head = ["seqlen_k"] + ["contiguous" if p == 0 else "%d-token pages" % p for p in pages]
    return report.markdown_table(head, rows) + "\n\n" + measured_line(
        res, ", GB/s of K and V (in brackets: paged / contiguous)")


@generator("ceilings")
def gen_ceilings(ctx, gpu=None):
    """The measured ceilings of the GPU (bench/ceilings.cu -> ceilings.json) beside its datasheet peaks."""
    res = ctx.results(gpu)
    if not res.has("ceilings.json"):
        raise Missing("ceilings.json on %s" % res.gpu, "bench/run_all.sh (step 0: build/release/bin/ceilings)")
    c = report.load_ceilings(res.path("ceilings.json"))
    rows = [[what, report.fmt_value(v) if v else "—", unit, note] for what, v, unit, note in c.values()]
    dev = res.json("ceilings.json")["device"]
    return report.markdown_table(["ceiling", "measured", "unit", "how"], rows, ["---", "--:", "---", "---"]) + \
        "\n\nOn %s; %s." % (dev["name"], link(res, "ceilings.json"))


# What each Nsight Compute metric the READMEs quote measures (the table's first column).
NCU_METRICS = {
    "gpu__time_duration.sum": "kernel time",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "DRAM throughput, % of peak",
    "dram__bytes_read.sum": "bytes read from DRAM",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "SM throughput, % of peak",
    "sm__inst_executed.sum": "warp instructions executed",
    "smsp__issue_active.avg.pct_of_peak_sustained_active": "issue slots used, % of active cycles",
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
    """Selected metrics of one Nsight Compute export (ncu_<target>.csv from bench/ncu_summary.sh:
    `ncu --csv --page raw`: a header row, a units row, then one row per profiled kernel), one row
    per metric and one column per kernel."""
    res = ctx.results(gpu)
    name = "ncu_%s.csv" % target
    if not res.has(name):
        raise Missing(name, "bench/run_all.sh --ncu")
    import csv

    with open(res.path(name), encoding="utf-8", newline="") as f:
        rows_in = list(csv.reader(f))
    if len(rows_in) < 3 or "Kernel Name" not in rows_in[0]:
        raise ValueError("%s: expected a header row with \"Kernel Name\", a units row and one row per "
                         "kernel (ncu --csv --page raw)" % res.rel(name))
    head_in, units, data = rows_in[0], rows_in[1], [r for r in rows_in[2:] if len(r) == len(rows_in[0])]
    kcol = head_in.index("Kernel Name")
    want = metrics.split(",")
    absent = [m for m in want if m not in head_in]
    rows = []
    for m in want:
        if m in absent:
            continue
        i = head_in.index(m)
        label = NCU_METRICS.get(m)
        rows.append(["%s (`%s`)" % (label, m) if label else "`%s`" % m] + [ncu_value(r[i], units[i]) for r in data])
    if not rows:
        raise ValueError("%s has none of the metrics %s" % (res.rel(name), metrics))
    head = ["metric"] + ["`%s`" % ncu_kernel(r[kcol]) for r in data]
    dev = ""
    if "device__attribute_display_name" in head_in:
        dev = " on %s" % data[0][head_in.index("device__attribute_display_name")]
    out = report.markdown_table(head, rows, ["---"] + ["--:"] * len(data))
    out += "\n\nNsight Compute, one launch per kernel at ncu's default (base) clocks%s (`bench/ncu_summary.sh`, " \
           "target %s); %s." % (dev, target, link(res, name))
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
        shape = "batch %s, 32/%s heads, head_dim 128, seqlen_k %s" % (batch, kv, report.seqlen_text(int(sk)))
    else:
        want = dict(family="prefill", **prefill_want(int(d), int(n), 0))
        r = res.need("prefill", rung=label, **prefill_want(int(d), int(n), 0))
        b = e["baselines"][0]
        br = res.find(rung=b["label"], **want)
        base = (b["label"], br) if br else None
        unit, val = "TFLOP/s", "tflops"
        shape = "head_dim %s, seqlen %s, not causal, batch x seqlen = 16k tokens, hidden 2048" % (
            d, report.seqlen_text(int(n)))
    if base is None:
        raise Missing("the baseline of %s" % label, "bench/run_all.sh")
    fl = res.find(rung="torch_flash", **want)
    return "> `%s` against `%s`, %s: **%s** (%s vs %s %s)%s. Measured on %s, fp16; %s." % (
        label, base[0], shape, report.fmt_ratio(base[1]["ms"] / r["ms"]), report.fmt_value(r[val]),
        report.fmt_value(base[1][val]), unit,
        "; PyTorch flash: %s %s" % (report.fmt_value(fl[val]), unit) if fl else "", res.provenance(),
        link(res, "report.md", "report"))


# ---- rung 13: FP8 (the fp8 family of bench/run_all.sh, bench/run_fp8.sh's accuracy runs) ---------

FP8_SPEED_COMMAND = "bench/run_all.sh --family fp8 --results bench/results/<gpu>/fp8"
FP8_ACCURACY_COMMAND = "bench/run_fp8.sh build/release/bin bench/results/<gpu>/fp8"
# The quantization modes in the order the accuracy table lists them (fp8.mode of a run report).
FP8_MODES = ("per-tensor", "per-head", "per-tensor+hadamard", "per-head+hadamard")


def results_folder(ctx, gpu, what, command):
    """The Results of folder @p gpu (default PRIMARY); Missing when it does not exist yet (a run of
    its own, such as <gpu>/fp8, is committed after the README that quotes it)."""
    folder = gpu or PRIMARY
    if not os.path.isdir(os.path.join(ROOT, "bench", "results", folder)):
        raise Missing("%s in bench/results/%s" % (what, folder), command)
    return ctx.results(folder)


def fp8_accuracy_runs(folder):
    """The run reports (schema flashladder.run/1 with an "fp8" object) of bench/run_fp8.sh under
    @p folder/fp8_accuracy/, sorted by file name; [] when there are none. Also for the notebooks."""
    out = []
    for f in sorted(glob.glob(os.path.join(folder, "fp8_accuracy", "*.json"))):
        with open(f, encoding="utf-8") as fh:
            j = json.load(fh)
        if isinstance(j, dict) and j.get("schema") == "flashladder.run/1" and "fp8" in j:
            j["_file"] = os.path.basename(f)
            out.append(j)
    return out


def fp8_runs(ctx, gpu, rung):
    """(Results, the accuracy runs of rung @p rung) of folder @p gpu; Missing if it has none."""
    res = results_folder(ctx, gpu, "fp8_accuracy/*.json", FP8_ACCURACY_COMMAND)
    runs = [j for j in fp8_accuracy_runs(res.dir) if j["rung"]["number"] == int(rung)]
    if not runs:
        raise Missing("fp8_accuracy/*.json of rung %s in bench/results/%s" % (rung, res.gpu), FP8_ACCURACY_COMMAND)
    return res, runs


def sci(v):
    return "—" if v is None else "%.2e" % v


def fp8_errors(j):
    """(kernel rel_fro, end-to-end rel_fro, kernel max_abs, end-to-end max_abs) of one accuracy run;
    None where the run checked nothing."""
    c, f = j["check"], j["fp8"]
    if not c.get("checked"):
        return None, None, None, None
    return c["rel_fro"], f["e2e_rel_fro"], c["max_abs"], f["e2e_max_abs"]


def fp8_cell(v, j):
    """An error with " (fail)" when the run's check failed (13_fp8 exited 1; the run is kept)."""
    if v is None:
        return "—"
    return sci(v) + ("" if j["check"]["pass"] else " (fail)")


def runs_provenance(runs):
    """ "NVIDIA H100 80GB HBM3, 2026-11-30, commit `abc1234`" of the run reports (each distinct one)."""
    seen = []
    for j in runs:
        p = "%s, %s, commit `%s`" % (j["device"]["name"], str(j.get("date", "?"))[:10], j.get("git_sha", "?"))
        if p not in seen:
            seen.append(p)
    return "; ".join(seen)


def runs_shape(runs):
    p = runs[0]["problem"]
    dims = sorted({j["problem"]["head_dim"] for j in runs})
    return "batch %d, seqlen %s, heads = %d / head_dim (%s), %s, %s" % (
        p["batch"], report.seqlen_text(p["seqlen_q"]), p["heads_q"] * p["head_dim"],
        ", ".join("%d at d=%d" % (p["heads_q"] * p["head_dim"] // d, d) for d in dims), p["dtype"],
        "causal" if p["causal"] else "not causal")


def entry_label(j):
    r = j["rung"]
    return "%02d_%s%s" % (r["number"], r["name"], "[%s]" % r["variant"] if r["variant"] else "")


def label_in_run(ctx, res, family, number):
    """The main entry's label of rung @p number as the run recorded it (a build without the rung
    still regenerates the docs), else from the registry."""
    for r in res.records:
        if r["family"] == family and r["number"] == number and not r["variant"]:
            return r["rung"]
    return labels_of(ctx, [number])[0]


@generator("fp8-speed")
def gen_fp8_speed(ctx, rung="13", baseline="10", d="64,128,256", n="", causal="0,1", gpu=None):
    """The fp8 family (the prefill shapes at head_dim 64, 128, 256): per head_dim, causal and seqlen
    the FP8 rung's TFLOP/s and % of the FP8 tensor peak, the 16-bit rung it changes and PyTorch
    SDPA's cuDNN backend (16-bit) in the same run, the ratios (time of the other / time of the FP8
    rung: above 1 = the FP8 rung is faster), and the e4m3 conversion of Q, K, V (quantize_ms, not
    in the rung's time) where the run has it. n= picks seqlens (default: every one measured)."""
    res = results_folder(ctx, gpu, "the fp8 family", FP8_SPEED_COMMAND)
    if not res.has("ladder_bench.json"):
        raise Missing("the fp8 family in bench/results/%s" % res.gpu, FP8_SPEED_COMMAND)
    label = label_in_run(ctx, res, "fp8", int(rung))
    base = label_in_run(ctx, res, "fp8", int(baseline))
    mine = [r for r in res.records if r["family"] == "fp8" and r["rung"] == label]
    if not mine:
        raise Missing("the fp8 family for %s in bench/results/%s" % (label, res.gpu), FP8_SPEED_COMMAND)
    cj = res.ctx
    peak = report._num(cj.get("peak_tensor_tflops"))
    rows, quant = [], False
    for dd in ints(d):
        for c in ints(causal):
            ns = ints(n) if n else sorted({r["seqlen_q"] for r in mine if r["head_dim"] == dd and r["causal"] == c})
            for nn in ns:
                w = dict(family="fp8", **prefill_want(dd, nn, c))
                r = res.find(rung=label, **w)
                b = res.find(rung=base, **w)
                cu = res.find(rung="torch_cudnn", **w)
                q = r.get("quantize_ms") if r else None
                quant = quant or q is not None
                rows.append([str(dd), "yes" if c else "no", report.seqlen_text(nn),
                             report.fmt_value(r["tflops"]) if r else "—",
                             pct(100.0 * r["tflops"] / (2 * peak)) if r and peak else "—",
                             report.fmt_value(b["tflops"]) if b else "—",
                             report.fmt_value(cu["tflops"]) if cu else "—",
                             ratio_text(b, r), ratio_text(cu, r),
                             "%s (%.0f %%)" % (ms(q), 100.0 * q / r["ms"]) if q is not None else "—"])
    head = ["head_dim", "causal", "seqlen", "`%s` TFLOP/s" % label, "% of FP8 peak", "`%s` TFLOP/s" % base,
            "cuDNN TFLOP/s", "%s / %s" % (report.short(label), report.short(base)),
            "%s / cuDNN" % report.short(label), "quantize Q, K, V (% of the rung's time)"]
    if not quant:
        head, rows = head[:-1], [row[:-1] for row in rows]
    torch = res.json("torch_sdpa.json")["context"].get("torch", "?") if res.has("torch_sdpa.json") else "not run"
    return report.markdown_table(head, rows) + "\n\n" + measured_line(
        res, "; `%s` on e4m3 Q, K, V (per-head scales, made once outside the time) from the fp16 inputs, `%s` "
        "and cuDNN (PyTorch %s) on the fp16 inputs; batch x seqlen = 16k tokens, hidden 2048; ratios: time of "
        "the other / time of `%s` (above 1 = FP8 is faster); FP8 peak = 2 x the 16-bit tensor peak (datasheet "
        "formula)" % (label, base, torch, label))


def fp8_by_key(runs):
    """{(input, fp8 mode, head_dim, variant): run report}."""
    return {(j["input"], j["fp8"]["mode"], j["problem"]["head_dim"], j["rung"]["variant"]): j for j in runs}


@generator("fp8-accuracy")
def gen_fp8_accuracy(ctx, rung="13", d="64,128,256", inputs="random,outlier", gpu=None):
    """bench/run_fp8.sh's accuracy runs (fp8_accuracy/*.json): per input and quantization mode
    (per-tensor or per-head scales, with or without the Hadamard rotation of Q and K), per head_dim
    the kernel's error (relative Frobenius, against fp64 on the dequantized inputs: what the check
    judges) and the end-to-end error (against fp64 on the original 16-bit inputs: what a user sees);
    then, on the outlier input, end-to-end error with the rotation / without (per-head scales)."""
    res, runs = fp8_runs(ctx, gpu, rung)
    by = fp8_by_key(runs)
    dims = ints(d)
    rows = []
    for inp in inputs.split(","):
        for mode in FP8_MODES:
            cells = []
            for dd in dims:
                j = by.get((inp, mode, dd, ""))
                k, e = fp8_errors(j)[:2] if j else (None, None)
                cells += [fp8_cell(k, j), fp8_cell(e, j)]
            if any(c != "—" for c in cells):
                rows.append([inp, mode] + cells)
    if not rows:
        raise Missing("fp8_accuracy/*.json with inputs %s in bench/results/%s" % (inputs, res.gpu),
                      FP8_ACCURACY_COMMAND)
    head = ["input", "scales"]
    for dd in dims:
        head += ["d=%d kernel" % dd, "d=%d end to end" % dd]
    out = report.markdown_table(head, rows, ["---", "---"] + ["--:"] * (2 * len(dims)))
    ratios = []
    for dd in dims:
        rot, plain = by.get(("outlier", "per-head+hadamard", dd, "")), by.get(("outlier", "per-head", dd, ""))
        a, b = (fp8_errors(rot)[1] if rot else None), (fp8_errors(plain)[1] if plain else None)
        if a is not None and b:
            ratios.append((dd, a / b))
    if ratios:
        met = [dd for dd, r in ratios if r <= 0.5]
        out += ("\n\nOutlier input, end-to-end error with the Hadamard rotation / without (per-head scales): %s "
                "(target ≤ 0.5: %s)." % (", ".join("d=%d %.2f" % (dd, r) for dd, r in ratios),
                                         "met at every head_dim" if len(met) == len(ratios) else
                                         "met at %s" % (", ".join("d=%d" % x for x in met) if met else "none")))
    checks = sorted({j["check"]["mode"] for j in runs if j["check"]["checked"]})
    fails = [j["_file"] for j in runs if j["check"]["checked"] and not j["check"]["pass"]]
    out += ("\n\n%s; `%s`, default variant; check %s%s. Measured on %s; %s." % (
        runs_shape(runs), entry_label(runs[0]).split("[")[0], ", ".join(checks) or "none",
        "; `(fail)`: the check failed (%s)" % ", ".join("`%s`" % f for f in fails) if fails else "",
        runs_provenance(runs), link(res, "fp8_accuracy", "`%s`" % res.rel("fp8_accuracy/"))))
    return out


@generator("fp8-p-scaling")
def gen_fp8_p_scaling(ctx, rung="13", variant="p-unscaled", d="128", mode="per-head", inputs="random,outlier",
                      gpu=None):
    """The choice of scaling P before its e4m3 cast (bench/run_fp8.sh): the rung against its variant
    that casts P as it is, same inputs and scales; kernel and end-to-end errors (relative Frobenius)
    and the variant's error / the rung's (above 1 = the variant is less accurate)."""
    res, runs = fp8_runs(ctx, gpu, rung)
    by = fp8_by_key(runs)
    rows = []
    main = alt = None
    for dd in ints(d):
        for inp in inputs.split(","):
            j, v = by.get((inp, mode, dd, "")), by.get((inp, mode, dd, variant))
            if not (j and v):
                continue
            main, alt = main or j, alt or v
            (k1, e1, _, _), (k2, e2, _, _) = fp8_errors(j), fp8_errors(v)
            rows.append([inp, str(dd), fp8_cell(k1, j), fp8_cell(k2, v),
                         "%.2f" % (k2 / k1) if k1 and k2 is not None else "—",
                         fp8_cell(e1, j), fp8_cell(e2, v), "%.2f" % (e2 / e1) if e1 and e2 is not None else "—"])
    if not rows:
        raise Missing("fp8_accuracy/*.json with the %s variant in bench/results/%s" % (variant, res.gpu),
                      FP8_ACCURACY_COMMAND)
    a, b = entry_label(main), entry_label(alt)
    head = ["input", "head_dim", "kernel: `%s`" % a, "kernel: `%s`" % b, "ratio", "end to end: `%s`" % a,
            "end to end: `%s`" % b, "ratio"]
    return report.markdown_table(head, rows, ["---"] + ["--:"] * 7) + (
        "\n\n`%s`: %s. `%s`: %s. %s scales; %s; relative Frobenius errors, kernel against fp64 on the "
        "dequantized inputs, end to end against fp64 on the 16-bit inputs. Measured on %s; %s." % (
            a, main["rung"]["summary"], b, alt["rung"]["summary"], mode, runs_shape([main, alt]),
            runs_provenance([main, alt]), link(res, "fp8_accuracy", "`%s`" % res.rel("fp8_accuracy/"))))


# ---- rung 12 on one GPU (bench/run_ring.sh --gpus 1 --replay "2 4 8") -------------------------------

RING_ONE_GPU_COMMAND = ('bench/run_ring.sh --gpus 1 --replay "2 4 8" --no-torch '
                        '--results bench/results/<gpu>/ring-1gpu')


def ring_runs(folder):
    """{(kind, ranks, seqlen, causal, variant): report} of rung 12's JSON reports (schema
    flashladder.ring/1) in @p folder: kind "ring" (--gpus P), "replay" (--replay P) or "shared"
    (launch_ring.py --share-gpu: P ranks on one GPU)."""
    out = {}
    for f in sorted(glob.glob(os.path.join(folder, "*.json"))):
        with open(f, encoding="utf-8") as fh:
            j = json.load(fh)
        if not (isinstance(j, dict) and j.get("schema") == "flashladder.ring/1"):
            continue
        p = j["problem"]
        j["_file"] = os.path.basename(f)
        kind = "replay" if j.get("replay") else "shared" if j.get("shared_gpu") else "ring"
        out[(kind, j.get("ranks", j["gpus"]), p["seqlen"], p["causal"], j["variant"])] = j
    return out


def torch_ring_runs(folder, prefix):
    """{(ranks, seqlen, causal): report} of PyTorch's all-gather baseline (schema
    flashladder.torch_ring/1, bench/torch_ring_baseline.py) in @p folder, files <prefix>*.json."""
    out = {}
    for f in sorted(glob.glob(os.path.join(folder, prefix + "*.json"))):
        with open(f, encoding="utf-8") as fh:
            t = json.load(fh)
        if isinstance(t, dict) and t.get("schema") == "flashladder.torch_ring/1":
            out[(t.get("ranks", t["gpus"]), t["problem"]["seqlen"], int(t["problem"]["causal"]))] = t
    return out


def ring_hidden(j):
    """The share of the communication the ring hid, on its worst rank: 1 - (time the compute
    stream waited for shards) / (time the transfers took); None without transfers."""
    st = j["steps_ms"]
    shares = [1.0 - sum(e) / sum(t) for e, t in zip(st["exposed_comm"], st["transfer"]) if sum(t) > 0]
    return min(shares) if shares else None


def ring_provenance(res):
    """ "Measured on <device>, <date>, commit `<sha>`; files <folder link>." of a ring folder."""
    m = res.meta
    return "Measured on %s, %s, commit `%s`; files %s." % (
        m.get("device", "?"), str(m.get("date", "?"))[:10], m.get("git_sha", "?"),
        link(res, "", "`%s`" % res.rel("")))


@generator("ring-one-gpu")
def gen_ring_one_gpu(ctx, gpu=None, n="65536,131072", ranks="1,2,4,8"):
    """Rung 12 on one GPU (folder <gpu>/ring-1gpu): per length, mask, sharding and ring size P the
    single-GPU rung's time T1, the ring's time (P = 1: the degenerate ring through the launcher; P > 1:
    the slowest rank's pass of the ring replayed with --replay, each rank alone on the GPU: the ring's
    time if every transfer hid), T1 / (P x that time) (P = 1: the measured scaling efficiency; P > 1:
    its compute bound), the slowest rank's merges, the plan's work imbalance and the checks."""
    folder = gpu or PRIMARY + "/ring-1gpu"
    res = results_folder(ctx, folder, "rung 12's one-GPU runs", RING_ONE_GPU_COMMAND)
    runs = ring_runs(res.dir)
    if not runs:
        raise Missing("rung 12's reports in bench/results/%s" % folder, RING_ONE_GPU_COMMAND)
    rows, shape = [], None
    for nn in ints(n):
        for c in (1, 0):
            for v in (("zigzag", "contiguous") if c else ("zigzag",)):
                for P in ints(ranks):
                    j = runs.get(("ring" if P == 1 else "replay", P, nn, c, v))
                    if j is None:
                        continue
                    t, st = j["timing"], j["steps_ms"]
                    one = t["single_median_ms"]
                    mine = t["ring_median_ms"] if P == 1 else t["slowest_rank_median_ms"]
                    eff = t["scaling_efficiency"] if P == 1 else t["compute_bound_efficiency"]
                    merge = max(sum(m) for m in st["merge"]) if st["merge"] else None
                    ok = j["check"]["pass"] and j["single"]["ran"] and j["single"]["ring_vs_single_pass"]
                    pr = j["problem"]
                    shape = "batch %d, %d heads, head_dim %d, %s" % (pr["batch"], pr["heads_q"], pr["head_dim"],
                                                                   pr["dtype"])
                    rows.append([report.seqlen_text(nn), "yes" if c else "no", v, str(P), ms(one),
                                 ms(mine) + ("" if P == 1 else " (replay)"), "**%.3f**" % eff, ms(merge),
                                 "%.3f" % j["imbalance"],
                                 "%s (%.2g)" % ("pass" if ok else "FAIL", j["single"]["ring_vs_single_max_abs"])])
    if not rows:
        raise Missing("rung 12's reports at n=%s in bench/results/%s" % (n, folder), RING_ONE_GPU_COMMAND)
    any_run = runs[next(iter(runs))]
    head = ["N", "causal", "sharding", "P", "one GPU (T1)", "ring: the slowest rank", "T1 / (P × ring)",
            "its merges", "work max/mean", "checks (ring vs one GPU, max abs)"]
    m = res.meta
    return report.markdown_table(head, rows, ["--:", "---", "---", "--:", "--:", "--:", "--:", "--:", "--:", "---"]) + (
        "\n\n%s; forward rung `%s` in every step and for T1; medians of %d timed passes. P = 1 is the ring "
        "itself through the launcher (its T1 / (P × ring) is the measured scaling efficiency of one GPU); "
        "P > 1 is the ring replayed on one GPU (`--replay P`): every rank's steps, launches and merges as "
        "on P GPUs, each rank's pass timed alone, no transfer, so T1 / (P × ring) is the compute bound of "
        "the scaling efficiency, the value P GPUs reach if every transfer hides and NCCL takes nothing from "
        "the compute. Checks: the fp64 reference on sampled rows and the single-GPU rung on every element. "
        "%s" % (shape, any_run["forward_rung"], any_run["timing"]["iters"], ring_provenance(res)))


@generator("ring-steps")
def gen_ring_steps(ctx, gpu=None, n="65536,131072", ranks="2,4,8", variant="zigzag"):
    """The steps of the replayed rings (<gpu>/ring-1gpu, --replay P): per length, mask and P the
    shard length N/P, the slowest rank's compute at step 0 (its own shard) and at a later step
    (median of steps 1..P-1), the forward rung's rate on a later step's problem, the merge per step,
    the K/V bytes a rank sends per step and the link bandwidth per direction at which that transfer
    takes exactly a later step's compute (above it, the transfer can hide)."""
    folder = gpu or PRIMARY + "/ring-1gpu"
    res = results_folder(ctx, folder, "rung 12's one-GPU runs", RING_ONE_GPU_COMMAND)
    runs = ring_runs(res.dir)
    rows = []
    for nn in ints(n):
        for c in (1, 0):
            for P in ints(ranks):
                j = runs.get(("replay", P, nn, c, variant))
                if j is None:
                    continue
                pr, st = j["problem"], j["steps_ms"]
                slow = max(range(P), key=lambda r: sum(st["compute"][r]) + sum(st["merge"][r]))
                comp, merge = st["compute"][slow], st["merge"][slow]
                later = sorted(comp[1:])[(P - 1) // 2]
                shard = nn // P
                # (query, key) pairs of a later step per (batch, head): zigzag causal computes half
                # the N/P x N/P pairs of an unmasked step (and N is a multiple of 2P here).
                pairs = shard * shard // (2 if c else 1)
                rate = 4.0 * pr["batch"] * pr["heads_q"] * pr["head_dim"] * pairs / (later * 1e-3) / 1e12
                sent = j["send_bytes_per_step"][0]
                rows.append([report.seqlen_text(nn), "yes" if c else "no", str(P), report.seqlen_text(shard),
                             ms(comp[0]), ms(later), report.fmt_value(rate), ms(sum(merge) / P),
                             binary_bytes(sent), "%.0f GB/s" % (sent / (later * 1e-3) / 1e9)])
    if not rows:
        raise Missing("replayed rings (--replay) in bench/results/%s" % folder, RING_ONE_GPU_COMMAND)
    head = ["N", "causal", "P", "N/P", "step 0", "a later step", "its TFLOP/s", "merge per step",
            "K/V sent per step", "hidden if the link gives ≥"]
    return report.markdown_table(head, rows, ["--:", "---", "--:", "--:", "--:", "--:", "--:", "--:", "--:", "--:"]) + (
        "\n\n%s sharding; the slowest rank of each replayed ring (`--replay P`, each rank alone on the GPU); "
        "a later step: the median of steps 1 … P−1. The last column is the K/V bytes of a step over a later "
        "step's compute: the bandwidth per direction a link needs for the transfer to take no longer than the "
        "compute it runs under (NCCL's own use of the SMs aside). %s" % (variant, ring_provenance(res)))


RING_SHARED_COMMAND = 'bench/run_ring.sh --share "2 4" --results bench/results/<gpu>/ring-shared'


@generator("ring-shared")
def gen_ring_shared(ctx, gpu=None, n="65536,131072", ranks="2,4"):
    """The ring's NCCL path on one GPU (<gpu>/ring-shared, launch_ring.py --share-gpu): per length,
    mask, sharding and P the checks of the gathered output (the fp64 reference on sampled rows, the
    single-GPU rung on every element), the K/V bytes each rank sent through NCCL and, on the zigzag
    rows, PyTorch's all-gather baseline run the same way (torch_shared_p<P>_n<N>_causal<c>.json:
    its gathered output against one-GPU SDPA). No times: the ranks time-share the GPU."""
    folder = gpu or PRIMARY + "/ring-shared"
    res = results_folder(ctx, folder, "rung 12's rings on one shared GPU", RING_SHARED_COMMAND)
    runs = ring_runs(res.dir)
    torch_runs = torch_ring_runs(res.dir, "torch_shared_p")
    rows = []
    for nn in ints(n):
        for c in (1, 0):
            for v in (("zigzag", "contiguous") if c else ("zigzag",)):
                for P in ints(ranks):
                    j = runs.get(("shared", P, nn, c, v))
                    t = torch_runs.get((P, nn, c)) if v == "zigzag" else None
                    if j is None:
                        continue
                    ck, single = j["check"], j["single"]
                    rows.append([report.seqlen_text(nn), "yes" if c else "no", v, str(P),
                                 "%s (%d rows, max abs %.2g, tol %.2g)" % (
                                     "pass" if ck["pass"] else "FAIL", ck["rows"], ck["max_abs"], ck["tol_max_abs"]),
                                 "%s (max abs %.2g)" % ("pass" if single["ran"] and single["ring_vs_single_pass"]
                                                        else "FAIL", single["ring_vs_single_max_abs"]),
                                 binary_bytes(sum(j["send_bytes_per_step"])),
                                 "max abs %.2g" % t["max_abs_vs_single_gpu"] if t else "—"])
    if not rows:
        raise Missing("rings on one shared GPU (--share-gpu) in bench/results/%s" % folder, RING_SHARED_COMMAND)
    any_run = runs[next(k for k in runs if k[0] == "shared")]
    pr = any_run["problem"]
    head = ["N", "causal", "sharding", "P", "gathered O vs fp64 (sampled rows)", "vs the single-GPU rung",
            "K/V each rank sent", "PyTorch baseline vs one-GPU SDPA"]
    torch_note = ""
    if torch_runs:
        t = next(iter(torch_runs.values()))
        torch_note = (" PyTorch's baseline (`bench/torch_ring_baseline.py --share-gpu` under torchrun: all-gather K/V, "
                      "SDPA on the zigzag query shard) ran the same way on PyTorch %s, NCCL %s; its gathered output is "
                      "compared with SDPA on the whole sequence on one GPU." % (t["torch"], t["nccl"]))
    return report.markdown_table(head, rows, ["--:", "---", "---", "--:", "---", "---", "--:", "---"]) + (
        "\n\nbatch %d, %d heads, head_dim %d, %s; forward rung `%s`; NCCL %s. P processes on one GPU "
        "(`launch_ring.py --share-gpu`), each its own NCCL host, so every shard crossed NCCL's socket transport "
        "on loopback; the ranks time-share the GPU, so no time is reported.%s %s" % (
            pr["batch"], pr["heads_q"], pr["head_dim"], pr["dtype"], any_run["forward_rung"], any_run["nccl"],
            torch_note, ring_provenance(res)))


# ---- rung 12 on P GPUs (bench/run_ring.sh --gpus 2 on a two-GPU machine) ---------------------------

RING_GPUS_COMMAND = 'bench/run_ring.sh --gpus 2 --results bench/results/<gpu>-x2/ring'


def ring_gpu_rows(runs, n, gpus):
    """(N, causal, sharding, P, report) of the rings on P GPUs in @p runs (ring_runs), in the tables'
    order: by length, causal first, zigzag first, by P."""
    for nn in ints(n):
        for c in (1, 0):
            for v in ("zigzag", "contiguous"):
                for P in ints(gpus):
                    j = runs.get(("ring", P, nn, c, v))
                    if j is not None:
                        yield nn, c, v, P, j


@generator("ring-gpus")
def gen_ring_gpus(ctx, gpu="nvidia-h200-x2/ring", n="65536,131072", gpus="2"):
    """Rung 12 on P GPUs: per length, mask and sharding the single-GPU rung's time T1 (rank 0, same
    run), the ring's time, the scaling efficiency T1 / (P x ring), the share of the communication
    hidden under the compute (worst rank), and, on the zigzag rows, PyTorch's all-gather baseline from
    the same run (one-GPU SDPA, all-gather + SDPA on P GPUs, its efficiency); the checks."""
    res = results_folder(ctx, gpu, "rung 12's runs on P GPUs", RING_GPUS_COMMAND)
    runs = ring_runs(res.dir)
    torch_runs = torch_ring_runs(res.dir, "torch_ring_p")
    rows, any_run = [], None
    for nn, c, v, P, j in ring_gpu_rows(runs, n, gpus):
        any_run = j
        t = j["timing"]
        tr = torch_runs.get((P, nn, c)) if v == "zigzag" else None
        ok = j["check"]["pass"] and j["single"]["ran"] and j["single"]["ring_vs_single_pass"]
        hidden = ring_hidden(j)
        rows.append([report.seqlen_text(nn), "yes" if c else "no", v, str(P), ms(t["single_median_ms"]),
                     ms(t["ring_median_ms"]), "**%.3f**" % t["scaling_efficiency"],
                     "—" if hidden is None else "%.1f %%" % (100 * hidden),
                     ms(tr["single_gpu_ms"]) if tr else "—", ms(tr["total_ms"]) if tr else "—",
                     "%.3f" % tr["scaling_efficiency"] if tr else "—",
                     "%s (%.2g)" % ("pass" if ok else "FAIL", j["single"]["ring_vs_single_max_abs"])])
    if not rows:
        raise Missing("rung 12's runs on P GPUs in bench/results/%s" % gpu, RING_GPUS_COMMAND)
    pr = any_run["problem"]
    tr = next(iter(torch_runs.values()), None)
    head = ["N", "causal", "sharding", "P", "one GPU (T1)", "ring", "T1 / (P × ring)", "communication hidden",
            "PyTorch: one GPU", "PyTorch: all-gather + SDPA", "PyTorch: T1 / (P × that)",
            "checks (ring vs one GPU, max abs)"]
    torch_text = ""
    if tr:
        torch_text = (" PyTorch %s (`bench/torch_ring_baseline.py` under torchrun, NCCL %s): K and V all-gathered, then "
                      "SDPA on the zigzag query shard; its one-GPU time is SDPA with cuDNN on the whole sequence, and its "
                      "causal shards run on SDPA's flash / memory-efficient kernels (they take the lower-right mask, "
                      "cuDNN does not)." % (tr["torch"], tr["nccl"]))
    return report.markdown_table(head, rows, ["--:", "---", "---", "--:", "--:", "--:", "--:", "--:", "--:", "--:",
                                              "--:", "---"]) + (
        "\n\nbatch %d, %d heads, head_dim %d, %s; forward rung `%s` in every step and for T1 (rank 0, the whole sequence "
        "on one GPU, in the same run); NCCL %s, one process per GPU, `NCCL_NVLS_ENABLE=0`; medians of %d timed passes, "
        "each the slowest rank's. Communication hidden: 1 − (time the compute stream waited for a shard) / (time the "
        "transfers took), on the worst rank. Checks: the fp64 reference on sampled rows and the single-GPU rung on every "
        "element.%s %s" % (pr["batch"], pr["heads_q"], pr["head_dim"], pr["dtype"], any_run["forward_rung"],
                            any_run["nccl"], any_run["timing"]["iters"], torch_text, ring_provenance(res)))


@generator("ring-gpus-steps")
def gen_ring_gpus_steps(ctx, gpu="nvidia-h200-x2/ring", n="65536,131072", gpus="2"):
    """Each rank's steps in the runs on P GPUs: compute per step, the merges, the exposed communication
    and the transfer (the K/V bytes over the transfer's time), per length, mask and sharding."""
    res = results_folder(ctx, gpu, "rung 12's runs on P GPUs", RING_GPUS_COMMAND)
    runs = ring_runs(res.dir)
    rows = []
    for nn, c, v, P, j in ring_gpu_rows(runs, n, gpus):
        st = j["steps_ms"]
        for r in range(P):
            sent = sum(j["send_bytes_per_step"])
            moved = sum(st["transfer"][r][s] for s in range(P) if j["send_bytes_per_step"][s] > 0)
            rows.append([report.seqlen_text(nn), "yes" if c else "no", v, str(r),
                         " / ".join(ms(x) for x in st["compute"][r]), ms(sum(st["merge"][r])),
                         ms(sum(st["exposed_comm"][r])), ms(moved),
                         "%.0f GB/s" % (sent / (moved * 1e-3) / 1e9) if moved > 0 else "—"])
    if not rows:
        raise Missing("rung 12's runs on P GPUs in bench/results/%s" % gpu, RING_GPUS_COMMAND)
    head = ["N", "causal", "sharding", "rank", "compute per step", "merges", "exposed communication",
            "transfer", "K/V bytes / transfer time"]
    return report.markdown_table(head, rows, ["--:", "---", "---", "--:", "--:", "--:", "--:", "--:", "--:"]) + (
        "\n\nMedians over the timed passes, per rank. The transfer runs on its own stream under the step's compute; "
        "its time is from its launch to the shard's arrival, so the last column is the rate the transfer got while "
        "the compute ran, not the link's. %s" % ring_provenance(res))


RING_ABLATION_SETTINGS = (("default", "NCCL's default (P2P over NVLink, one CTA per channel)"),
                          ("ch1", "`NCCL_MAX_P2P_NCHANNELS=1` (one channel)"),
                          ("ce", "`NCCL_P2P_USE_CUDA_MEMCPY=1` (copy engines)"))


@generator("ring-gpus-ablation")
def gen_ring_gpus_ablation(ctx, gpu="nvidia-h200-x2/ring-nccl-ablation"):
    """How NCCL moves the shards (<gpu>-x2/ring-nccl-ablation, ring_p2_n<N>_zigzag_causal<c>_<setting>.json):
    per mask and setting the ring's time, T1 and the efficiency, each rank's compute at step 0 (under
    the transfer) and step 1, the exposed communication and the transfer (worst rank); a setting whose
    run left no report is listed as such."""
    res = results_folder(ctx, gpu, "the NCCL ablation on two GPUs", "see bench/results/%s/meta.json" % gpu)
    rows, n = [], None
    for c in (0, 1):
        for tag, label in RING_ABLATION_SETTINGS:
            found = glob.glob(os.path.join(res.dir, "ring_p2_n*_zigzag_causal%d_%s.*" % (c, tag)))
            js = [f for f in found if f.endswith(".json")]
            if not js:
                if found:
                    rows.append(["yes" if c else "no", label, "did not finish its first pass in the time given "
                                 "(stopped, no report)", "", "", "", "", "", ""])
                continue
            with open(js[0], encoding="utf-8") as fh:
                j = json.load(fh)
            t, st = j["timing"], j["steps_ms"]
            n = j["problem"]["seqlen"]
            rows.append(["yes" if c else "no", label, ms(t["ring_median_ms"]), ms(t["single_median_ms"]),
                         "**%.3f**" % t["scaling_efficiency"], " / ".join(ms(r[0]) for r in st["compute"]),
                         " / ".join(ms(r[1]) for r in st["compute"]),
                         ms(max(sum(e) for e in st["exposed_comm"])), ms(max(r[0] for r in st["transfer"]))])
    if not rows:
        raise Missing("the NCCL ablation in bench/results/%s" % gpu, "see its meta.json")
    head = ["causal", "how NCCL moves the shards", "ring", "one GPU (T1)", "T1 / (2 × ring)",
            "step 0 compute, rank 0 / 1", "step 1 compute, rank 0 / 1", "exposed communication", "transfer"]
    return report.markdown_table(head, rows, ["---", "---", "--:", "--:", "--:", "--:", "--:", "--:", "--:"]) + (
        "\n\n%s tokens, zigzag, otherwise as above; one run per setting, in turn, medians of 20 passes. Exposed "
        "communication and transfer: the worst rank's. %s" % (report.seqlen_text(n) if n else "?",
                                                               ring_provenance(res)))


# ---- the ladder inside PyTorch (bench/torch_train.py, bench/torch_overhead.py) ------------------

TORCH_RUN_COMMANDS = {
    "torch_train.json": "PYTHONPATH=build/release/python python3 bench/torch_train.py "
                        "--out bench/results/<gpu>/pytorch",
    "torch_overhead.json": "PYTHONPATH=build/release/python python3 bench/torch_overhead.py --bin build/release/bin "
                           "--out bench/results/<gpu>/pytorch",
    "torch_decode.json": "PYTHONPATH=build/release/python python3 bench/torch_decode.py --out bench/results/<gpu>/pytorch-decode",
}


def torch_run(ctx, gpu, name):
    """(Results, the JSON) of a PyTorch script's run in folder @p gpu; Missing when no committed
    run has it (the folder may not exist yet either)."""
    folder = gpu or PRIMARY
    if not os.path.exists(os.path.join(ROOT, "bench", "results", folder, name)):
        raise Missing("%s in bench/results/%s" % (name, folder), TORCH_RUN_COMMANDS[name])
    res = ctx.results(folder)
    return res, res.json(name)


def torch_provenance(data):
    """ "NVIDIA H100 80GB HBM3, 2026-11-24, commit `abc1234`, PyTorch 2.11.0, transformers 5.17.0"."""
    v = data.get("versions", {})
    extra = "".join(", %s %s" % (n, v[k]) for k, n in (("torch", "PyTorch"), ("transformers", "transformers"))
                    if v.get(k))
    return "%s, %s, commit `%s`%s" % (data.get("device", {}).get("name", "?"), str(data.get("date", "?"))[:10],
                                      data.get("git_sha", "?"), extra)


def fmt_loss(v):
    return "—" if v is None else "%.3f" % v


def fmt_tokens(v):
    return "—" if v is None else "%.0fk" % (v / 1e3) if v >= 1e4 else "%.0f" % v


@generator("torch-train")
def gen_torch_train(ctx, gpu=None):
    """The training demo (bench/torch_train.py, torch_train.json): per run (SDPA flash, the ladder,
    SDPA flash again) the steady-state step time, tokens/s, the last held-out loss and the speedup
    over SDPA flash; the logits check, the loss curves' agreement and attention's share of a step."""
    res, d = torch_run(ctx, gpu, "torch_train.json")
    s, cfg, lad = d.get("summary", {}), d["config"], d.get("ladder", {})
    by = {r["name"]: r for r in d["runs"]}
    ref = by.get("sdpa_flash")
    names = {"sdpa_flash": ("SDPA", "flash backend forced (FlashAttention-2)"),
             "ladder": ("the ladder", "forward `%s`, backward `%s` (autograd)" % (
                 lad.get("forward_rung", "?"), lad.get("backward_rung", "?"))),
             "sdpa_flash_rerun": ("SDPA again", "flash backend forced: the noise between two runs")}
    rows = []
    for r in d["runs"]:
        who, what = names.get(r["name"], (r["name"], ""))
        ratio = ref["step_ms_mean"] / r["step_ms_mean"] if ref and r is not ref and r.get("step_ms_mean") else None
        rows.append([who, what, "%.1f" % r["step_ms_mean"] if r.get("step_ms_mean") else "—",
                     fmt_tokens(r.get("tokens_per_s")), fmt_loss(r.get("final_heldout")),
                     report.fmt_ratio(ratio) if ratio else "—"])
    out = report.markdown_table(["run", "attention", "ms / step", "tokens/s", "last held-out loss",
                                 "speedup over SDPA flash"], rows, ["---", "---", "--:", "--:", "--:", "--:"])
    notes = []
    lc = d.get("logits_check", {})
    if lc.get("ladder_vs_sdpa_flash"):
        notes.append("Logits check (%s, %s): the ladder's logits differ from SDPA flash's by max abs %.2e, "
                     "relative Frobenius %.2e; against the fp32 model the ladder's relative error is %.2e and SDPA "
                     "flash's %.2e (%.2f×; pass at ≤ %s×, attention on the ladder in %d of %d layers): **%s**." % (
                         lc["input"], lc["dtype"], lc["ladder_vs_sdpa_flash"]["max_abs"],
                         lc["ladder_vs_sdpa_flash"]["rel_fro"], lc["ladder_vs_fp32"]["rel_fro"],
                         lc["sdpa_flash_vs_fp32"]["rel_fro"], lc["error_ratio"],
                         "%g" % lc.get("tolerance_ratio", 2.0),
                         lc.get("ladder_attention_calls", 0), lc.get("layers", cfg["model"]["layers"]),
                         "pass" if lc.get("pass") else "FAIL"))
    if "loss_match" in s:
        rerun = ((" (two SDPA flash runs: %.4f)" % s["rerun_final_heldout_gap"])
                 if "rerun_final_heldout_gap" in s else "")
        notes.append("Loss curves: the last held-out losses differ by %.4f%s, tolerance %.4f: **%s**." % (
            s["final_heldout_gap"], rerun, s["loss_tolerance"], "match" if s["loss_match"] else "differ"))
    shares = [(n, s.get("attention_share_%s" % k)) for n, k in (("SDPA flash", "sdpa_flash"), ("the ladder", "ladder"))]
    if any(v for _, v in shares):
        notes.append("Attention's share of a step (one layer's forward + backward alone x %d layers): %s." % (
            cfg["model"]["layers"], ", ".join("%s %.0f %%" % (n, 100 * v) for n, v in shares if v)))
    m = cfg["model"]
    notes.append("Model: Llama-style (GQA, RoPE), random init, %.3gM parameters, %d layers, hidden %d, %d/%d heads of "
                 "%d, MLP %d, byte vocabulary; %s; batch %d x seqlen %s, %d steps of AdamW, tokens/s without the first "
                 "%d steps; data: %s (%d files, %.1f MB). Measured on %s; %s." % (
                     m["parameters"] / 1e6, m["layers"], m["hidden"], m["heads_q"], m["heads_kv"], m["head_dim"],
                     m["intermediate"], cfg["precision"], cfg["batch"], report.seqlen_text(cfg["seqlen"]), cfg["steps"],
                     cfg["timing_skip"], d["data"]["source"].split(" (")[0], d["data"]["files"],
                     d["data"]["bytes"] / 1e6, torch_provenance(d), link(res, "torch_train.json")))
    return out + "\n\n" + "\n\n".join(notes)


@generator("torch-overhead")
def gen_torch_overhead(ctx, gpu=None):
    """The call overhead (bench/torch_overhead.py, torch_overhead.json): per rung the runner's time
    and flashladder.attention's on the same shape, timed the runner's way, their difference per call
    against the target, the same with the GPU idle before each call, and the host's time per call."""
    res, d = torch_run(ctx, gpu, "torch_overhead.json")
    rows = []
    for e in d["rungs"]:
        if "median_ms" not in e:
            continue
        m = e["median_ms"]
        rows.append(["`%s`%s" % (e["label"], " (default)" if e["requested"] == "default" else ""),
                     "%.1f" % (m["runner"] * 1e3), "%.1f" % (m["python"] * 1e3), "%+.1f" % e["diff_us"],
                     "%+.1f" % e["idle_diff_us"], "%+.1f" % e["python_layer_idle_us"]])
        if "binding_diff_us" in e:  # measured since the profiler column was added
            rows[-1] += ["%+.1f" % e["binding_diff_us"],
                         "%+.1f" % e["kernel_diff_us"] if "kernel_diff_us" in e else "not measured"]
    if not rows:
        raise Missing("a timed rung in %s" % res.rel("torch_overhead.json"), TORCH_RUN_COMMANDS["torch_overhead.json"])
    head = ["rung", "runner µs", "PyTorch µs", "PyTorch − runner, µs", "the same, GPU idle before the call",
            "Python layer over the binding, GPU idle"]
    if all(len(r) == len(head) + 2 for r in rows):
        head += ["binding alone − runner, µs", "the call's kernels (profiler) − runner, µs"]
    else:
        rows = [r[:len(head)] for r in rows]
    out = report.markdown_table(head, rows)
    sh = d["shape"]
    ok = all(abs(e["diff_us"]) <= d["target_us"] for e in d["rungs"] if "diff_us" in e)
    notes = ["batch %d, seqlen %s, %d heads, head_dim %d, %s, not causal; median of %d single calls per repeat, "
             "the L2 flushed before each (the runner's way), median of %d repeats. Target: within %g µs per call: "
             "**%s**." % (sh["batch"], report.seqlen_text(sh["seqlen"]), sh["heads"], sh["head_dim"], sh["dtype"],
                          d["iters"], d["repeats"], d["target_us"], "met" if ok else "not met")]
    h = d.get("host")
    if h:
        t = h["shape"]
        notes.append("Host time per call (batch %d, seqlen %d, %d heads, d=%d; the kernel alone %.1f µs): %s." % (
            t["batch"], t["seqlen"], t["heads"], t["head_dim"], h["kernel_us"],
            "; ".join("%s %.1f µs" % (n, v) for n, v in h["per_call_us"].items())))
    notes.append("Measured on %s; %s." % (torch_provenance(d), link(res, "torch_overhead.json")))
    return out + "\n\n" + "\n\n".join(notes)


@generator("torch-decode")
def gen_torch_decode(ctx, gpu=None):
    """Decode through the package (bench/torch_decode.py, torch_decode.json): per shape the rung the
    route picked, its time and GB/s, rung 08 and the prefill rung called by number, SDPA's cuDNN and
    flash backends, and the route against cuDNN; the worst and best cell and the bench goal."""
    res, d = torch_run(ctx, gpu, "torch_decode.json")
    rows, ratios = [], []

    def cell(r, name):
        return "%.4f" % r["ms"][name] if name in r["ms"] else "refused"

    for r in d["rows"]:
        s = r["shape"]
        vs = r.get("route_vs_cudnn")
        if vs:
            ratios.append((vs, s))
        flash = r["ms"].get("flash")
        rows.append([s["dtype"], "%d, %d/%d" % (s["batch"], s["heads_q"], s["heads_kv"]),
                     "%d" % s["seqlen_q"] + (" causal" if s["causal"] else ""), report.seqlen_text(s["seqlen_k"]),
                     "`%s`" % r["route"], cell(r, "route"),
                     "%.0f" % r["gbps"]["route"] if "route" in r.get("gbps", {}) else "—",
                     cell(r, "rung08"), cell(r, "prefill"), cell(r, "cudnn"), cell(r, "flash"),
                     report.fmt_ratio(vs) if vs else "—",
                     report.fmt_ratio(flash / r["ms"]["route"]) if flash and "route" in r["ms"] else "—"])
    head = ["dtype", "B, heads q/kv", "seqlen_q", "seqlen_k", "route", "route ms", "GB/s", "rung 08 ms",
            "`%s` ms" % d["prefill_rung"], "cuDNN ms", "flash ms", "cuDNN / route", "flash / route"]
    out = report.markdown_table(head, rows, ["---", "---", "--:", "--:", "---"] + ["--:"] * 8)
    notes = []
    if ratios:
        lo, hi = min(ratios, key=lambda x: x[0]), max(ratios, key=lambda x: x[0])

        def where(sh):
            return "%s B=%d %d/%d seqlen_q %d, %s keys" % (sh["dtype"], sh["batch"], sh["heads_q"], sh["heads_kv"],
                                                          sh["seqlen_q"], report.seqlen_text(sh["seqlen_k"]))

        notes.append("The route against cuDNN: worst %s (%s), best %s (%s). Goal: at least %.2f× cuDNN for a decode step "
                     "at 64k and 128k keys: **%s**." % (report.fmt_ratio(lo[0]), where(lo[1]), report.fmt_ratio(hi[0]),
                                                        where(hi[1]), d["target_vs_cudnn"],
                                                        "met" if d["target_met"] else "not met"))
    notes.append("head_dim %d; each figure the median of %d repeats (the columns in a rotating order) of the median "
                 "of %d calls, each timed with CUDA events after a %s flush of the L2, long enough that the host's work "
                 "of either library's call is queued under it: the GPU time of the call's kernels, the same way for "
                 "every column; GB/s counts K and V read once. Measured on %s; %s." % (
                     d["head_dim"], d.get("repeats", 1), d["iters"], binary_bytes(d.get("flush_bytes", 0)),
                     torch_provenance(d), link(res, "torch_decode.json")))
    return out + "\n\n" + "\n\n".join(notes)


def lesson_diff(ctx):
    """The changed code lines of each rung against the rung it builds on (docs/lesson_diff.py),
    paired through the same registry as every other block."""
    sys.path.insert(0, os.path.join(ROOT, "docs"))
    import lesson_diff as ld  # docs/lesson_diff.py

    mains = {e["number"]: e for e in ctx.info.values() if not e["variant"]}
    return ld.lesson_table(ROOT, mains).rstrip("\n")


if os.path.exists(os.path.join(ROOT, "docs", "lesson_diff.py")):
    GENERATORS["lesson-diff"] = lesson_diff


# ---- blocks in files ---------------------------------------------------------------------------


def parse_args(text):
    out = {}
    for tok in text.split():
        k, v = tok.split("=", 1)
        out[k] = v
    return out


def render(ctx, name, args):
    if name not in GENERATORS:
        raise ValueError("unknown generator '%s' (--list)" % name)
    try:
        return GENERATORS[name](ctx, **args).rstrip("\n")
    except Missing as m:
        return ("_Not in a committed run yet: %s. `%s` measures it; then `python3 bench/docgen.py --write` "
                "fills this block._" % (m.what, m.command))


def regenerate_text(ctx, text, path):
    """@p text (of the file @p path, relative to the root) with every generated block regenerated.
    Raises ValueError on marker errors."""
    CURRENT_DIR[0] = os.path.dirname(os.path.join(ROOT, path))
    lines = text.split("\n")
    out, i = [], 0
    while i < len(lines):
        m = MARK_RE.match(lines[i])
        out.append(lines[i])
        if not m:
            if lines[i].startswith("<!-- gen:"):
                raise ValueError("%s:%d: malformed marker '%s'" % (path, i + 1, lines[i]))
            i += 1
            continue
        end = END_FMT % m["name"]
        try:
            j = lines.index(end, i + 1)
        except ValueError:
            raise ValueError("%s:%d: '%s' has no '%s'" % (path, i + 1, lines[i], end))
        try:
            out.append(render(ctx, m["name"], parse_args(m["args"])))
        except (KeyError, ValueError, TypeError, OSError) as e:
            raise ValueError("%s:%d: gen:%s: %s" % (path, i + 1, m["name"], e))
        out.append(end)
        i = j + 1
    return "\n".join(out)


def doc_files():
    files = []
    for g in DOC_GLOBS:
        files += glob.glob(os.path.join(ROOT, g))
    return sorted(set(files))


def report_files(ctx):
    """{path of a committed report.md: its regenerated text} for every results folder with a ladder run."""
    out = {}
    # A GPU's folder, and the folders of runs made for one rung inside it (e.g. <gpu>/rung09/).
    found = glob.glob(os.path.join(ROOT, "bench", "results", "*", "ladder_bench.json"))
    found += glob.glob(os.path.join(ROOT, "bench", "results", "*", "*", "ladder_bench.json"))
    for d in sorted(found):
        folder = os.path.dirname(d)
        torch = os.path.join(folder, "torch_sdpa.json")
        ceil = os.path.join(folder, "ceilings.json")
        out[os.path.join(folder, "report.md")] = report.full_report(
            d, torch if os.path.exists(torch) else None, True, ctx.registry,
            report.load_ceilings(ceil) if os.path.exists(ceil) else None)
    return out


def load_registry(args):
    """The Context: the registry from --registry FILE, or from the built tour (--bin, or the newest)."""
    if args.registry:
        reg = report.load_registry(args.registry)
        with open(args.registry, encoding="utf-8") as f:
            return Context(reg, {r["label"]: r for r in json.load(f)["rungs"]})
    tour = report.find_tour(args.bin)
    if not tour:
        raise ValueError("no built tour (build first, or pass --bin BUILD/bin or --registry FILE)")
    return Context(*report.registry_from_tour(tour))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--check", action="store_true", help="exit 1 if a generated block or report is stale")
    mode.add_argument("--write", action="store_true", help="rewrite every generated block and report")
    mode.add_argument("--list", action="store_true", help="the generators and what they make")
    ap.add_argument("--bin", help="folder with the built tour (for the registry)")
    ap.add_argument("--registry", help="tour --registry-json output (instead of --bin)")
    ap.add_argument("files", nargs="*", help="markdown files to check/write (default: every doc file)")
    args = ap.parse_args(argv)
    if args.list:
        for name, f in sorted(GENERATORS.items()):
            print("%-16s %s" % (name, " ".join((f.__doc__ or "").split())))
        return 0
    try:
        ctx = load_registry(args)
        targets = {}
        for path in [os.path.abspath(f) for f in args.files] or doc_files():
            with open(path, encoding="utf-8") as f:
                old = f.read()
            targets[path] = (old, regenerate_text(ctx, old, os.path.relpath(path, ROOT)))
        if not args.files:
            for path, new in report_files(ctx).items():
                old = open(path, encoding="utf-8").read() if os.path.exists(path) else ""
                targets[path] = (old, new)
    except (ValueError, OSError, KeyError) as e:
        print("docgen.py: error: %s" % e, file=sys.stderr)
        return 2
    stale = [(p, o, n) for p, (o, n) in targets.items() if o != n]
    if args.write:
        for p, _, n in stale:
            with open(p, "w", encoding="utf-8") as f:
                f.write(n)
            print("docgen.py: wrote %s" % os.path.relpath(p, ROOT))
        print("docgen.py: %d file(s) up to date, %d rewritten" % (len(targets) - len(stale), len(stale)))
        return 0
    for p, o, n in stale:
        rel = os.path.relpath(p, ROOT)
        sys.stdout.writelines(difflib.unified_diff(o.splitlines(True), n.splitlines(True), "committed/" + rel,
                                                   "generated/" + rel))
    if stale:
        print("docgen.py: %d file(s) differ from what the committed results generate: %s\n"
              "Figures are never edited by hand: run `python3 bench/docgen.py --write` (after committing "
              "the run under bench/results/) and commit the result." % (
                  len(stale), ", ".join(os.path.relpath(p, ROOT) for p, _, _ in stale)))
        return 1
    print("docgen.py: %d file(s) checked, every generated block and report matches the committed results"
          % len(targets))
    return 0


if __name__ == "__main__":
    sys.exit(main())
