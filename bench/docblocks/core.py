"""Every measured figure in the docs, generated from the committed runs under bench/results/.

    python3 bench/docgen.py --check [--bin BUILD/bin | --registry REGISTRY.json]
    python3 bench/docgen.py --write [--bin BUILD/bin | --registry REGISTRY.json]
    python3 bench/docgen.py --list

A markdown file (README.md, steps/*/README.md, docs/**/*.md, bench/README.md, notebooks/README.md)
holds generated blocks between two marker lines:

    <!-- gen:prefill-table rungs=02 d=64,128 -->
    ...generated: never edit by hand...
    <!-- /gen:prefill-table -->

The first marker names a generator (GENERATORS below, filled by the family modules of this package:
ladder, decode, backward, fp8, ring, pytorch; `--list` prints them) and its parameters.
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

This module is what every family shares: the markers, the results and context objects, the
generator registry, the small formatting helpers, --check, --write and --list. A family module
imports from here and from bench/results_io.py (the parser of the bench records and run reports, and
the shared formatting), never from another family module.
"""

import argparse
import difflib
import glob
import importlib.util
import json
import os
import re
import sys

import report  # bench/report.py: the report writer (full_report); bench/ is on sys.path
import report_tables  # bench/report_tables.py: its tables (Grid)
import results_io  # bench/results_io.py: one parser and one set of table helpers

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

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
                recs += results_io.load_records(self.path("ladder_bench.json"))
            if self.has("torch_sdpa.json"):
                recs += results_io.load_records(self.path("torch_sdpa.json"))
            self._records = [r for r in recs if not r["error"]]
        return self._records

    @property
    def ctx(self):
        return results_io.load_context(self.path("ladder_bench.json"))

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
        self.registry = registry  # results_io.load_registry()'s dict: label -> declared baselines
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
    """The % of its datasheet peak (results_io.peak_tflops of a registry entry's "peak") that the record
    @p rec reached; None without that peak."""
    peak = results_io.peak_tflops(ctx_json, entry_peak)
    return 100.0 * rec["tflops"] / peak if peak else None


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
    return results_io.fmt_ratio(a["ms"] / b["ms"]) if a and b else "—"


def prefill_shapes(d, n, causal):
    """(head_dim, seqlen, causal, the records' want, the row's first three cells) of a block's
    d=, n= and causal= parameters, in that order."""
    for dd in ints(d):
        for nn in ints(n):
            for c in ints(causal):
                yield dd, nn, c, prefill_want(dd, nn, c), [str(dd), results_io.seqlen_text(nn), "yes" if c else "no"]


def torch_cells(res, family, want, r):
    """PyTorch's flash and cuDNN backends beside record @p r on the same shape of the same run:
    flash ms, flash / rung, cuDNN ms, cuDNN / rung (— where the run has no such record)."""
    fl = res.find(family=family, rung="torch_flash", **want)
    cu = res.find(family=family, rung="torch_cudnn", **want)
    return ["%.3f" % fl["ms"] if fl else "—", ratio_text(fl, r), "%.3f" % cu["ms"] if cu else "—", ratio_text(cu, r)]


def span(values):
    vals = [v for v in values if v is not None]
    if not vals:
        return "—"
    lo, hi = min(vals), max(vals)
    return results_io.fmt_ratio(lo) if results_io.fmt_ratio(lo) == results_io.fmt_ratio(hi) else "%s–%s" % (
        results_io.fmt_ratio(lo).rstrip("×"), results_io.fmt_ratio(hi))


def earlier_fastest(ctx, res, label, want):
    """(label, record) of the fastest main rung numbered below @p label measured at @p want: the
    report's rule (report_tables.Grid.resolve), on the records of that one shape."""
    recs = [r for r in res.records if all(r.get(k) == v for k, v in want.items())]
    if not recs:
        return None
    g = report_tables.Grid(recs, ctx.registry)
    x = results_io.x_of(recs[0])
    best = g.resolve(label, {"kind": "fastest_earlier"}, x)
    return (best, next(r for r in recs if r["rung"] == best)) if best else None


def results_folder(ctx, gpu, what, command):
    """The Results of folder @p gpu (default PRIMARY); Missing when it does not exist yet (a run of
    its own, such as <gpu>/fp8, is committed after the README that quotes it)."""
    folder = gpu or PRIMARY
    if not os.path.isdir(os.path.join(ROOT, "bench", "results", folder)):
        raise Missing("%s in bench/results/%s" % (what, folder), command)
    return ctx.results(folder)


def bench_module(name):
    """The bench script bench/<name>.py (or bench/<folder>/<name>.py, wherever it lives), loaded as a
    module: a block that needs a script's own definitions (the packed batch's lengths, a study's
    model) takes them from it instead of restating them."""
    found = sorted(glob.glob(os.path.join(ROOT, "bench", name + ".py")) +
                   glob.glob(os.path.join(ROOT, "bench", "*", name + ".py")))
    if not found:
        raise ValueError("no bench/%s.py" % name)
    spec = importlib.util.spec_from_file_location("bench_" + name, found[0])
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def varlen_lengths():
    """(torch_sdpa module, lengths) of the bench's packed batch: torch_sdpa.py's mixed_lengths of its
    VARLEN draw, the lengths of ladder_bench's varlen family (common/'s inputs.h)."""
    mod = bench_module("torch_sdpa")
    v = mod.VARLEN
    return mod, mod.mixed_lengths(v["count"], v["lo"], v["hi"], v["seed"])


# ---- a rung's run reports (its --json output) -----------------------------------------------


def entry_label(j):
    """The entry of a run report: NN_name or NN_name[variant]."""
    r = j["rung"]
    return "%02d_%s%s" % (r["number"], r["name"], "[%s]" % r["variant"] if r.get("variant") else "")


def run_label(j):
    """The entry of a run report as a table cell: `NN_name` or `NN_name[variant]`."""
    return "`%s`" % entry_label(j)


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


# ---- generators -------------------------------------------------------------------------------------
# Each takes (ctx, **params) and returns markdown. Parameters come from the marker as strings. The
# family modules register theirs with @generator(NAME); the package imports every one of them.

GENERATORS = {}


def generator(name):
    def deco(f):
        GENERATORS[name] = f
        return f

    return deco


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
    # A superseded run under <gpu>/archive/ keeps its report checked too.
    found += glob.glob(os.path.join(ROOT, "bench", "results", "*", "archive", "*", "ladder_bench.json"))
    for d in sorted(found):
        folder = os.path.dirname(d)
        torch = os.path.join(folder, "torch_sdpa.json")
        ceil = os.path.join(folder, "ceilings.json")
        out[os.path.join(folder, "report.md")] = report.full_report(
            d, torch if os.path.exists(torch) else None, True, ctx.registry,
            results_io.load_ceilings(ceil) if os.path.exists(ceil) else None)
    return out


# The figures: (name, output path relative to the root, generator(ctx, **params) -> SVG text, params),
# filled by figures.py; --write writes each file, --check compares it as it does a report.md.
FIGURES = []


def figure_files(ctx):
    """{path of a committed figure (SVG): its regenerated text} for every FIGURES entry."""
    return {os.path.join(ROOT, path): fn(ctx, **params) for _, path, fn, params in sorted(FIGURES, key=lambda f: f[1])}


def load_registry(args):
    """The Context: the registry from --registry FILE, or from the built tour (--bin, or the newest)."""
    if args.registry:
        reg = results_io.load_registry(args.registry)
        with open(args.registry, encoding="utf-8") as f:
            return Context(reg, {r["label"]: r for r in json.load(f)["rungs"]})
    tour = results_io.find_tour(args.bin)
    if not tour:
        raise ValueError("no built tour (build first, or pass --bin BUILD/bin or --registry FILE)")
    return Context(*results_io.registry_from_tour(tour))


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
        for name, path, _, params in sorted(FIGURES, key=lambda f: f[1]):
            print("%-16s figure %s (%s)" % (name, path, ", ".join("%s=%s" % kv for kv in sorted(params.items()))))
        return 0
    try:
        ctx = load_registry(args)
        targets = {}
        for path in [os.path.abspath(f) for f in args.files] or doc_files():
            with open(path, encoding="utf-8") as f:
                old = f.read()
            targets[path] = (old, regenerate_text(ctx, old, os.path.relpath(path, ROOT)))
        if not args.files:
            for path, new in list(report_files(ctx).items()) + list(figure_files(ctx).items()):
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
