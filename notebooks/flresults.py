"""Shared by the notebooks: find a results folder, load it, look up the GPU's ceilings, save figures.

Results come from `bench/run_all.sh` on a GPU, which writes bench/results/<gpu-slug>/:
    ladder_bench.json           every rung over the benchmark families (Google Benchmark JSON)
    torch_sdpa.json             PyTorch SDPA (flash, cuDNN, efficient, math) on the same shapes
    ceilings.json               the measured FFMA, mma.sync, cuBLAS and copy rates (bench/ceilings.cu)
    sweep07_d64.json, ..._d128  rung 07's `--sweep` (registers, spills, time per variant)
    decode_splits/*.json        rung 08 with --splits 1..64 and the heuristic (one run report each)
    meta.json, report.md        device, date, git sha, commands; the speedup tables

Which folder (find_results, one rule for the notebooks and .ci/notebooks.sh): FL_RESULTS=<folder>
if set; else the folder the docs quote (PRIMARY in bench/docblocks/core.py) when it has what the
notebook needs; else the folder with the most measured entries of the needed family (a full sweep
before a partial one), the newest on a tie. The folders searched are bench/results/<gpu>/ and the
sub-runs inside them (bench/results/<gpu>/<run>/ with its own meta.json, such as hopper-rungs/:
what docgen names with gpu=<gpu>/<run>).
FL_NOTEBOOK_OUT=<folder> is where figures go (default: <temp>/flashladder-plots, never the repo).
"""

import glob
import json
import os
import re
import sys
import tempfile

import matplotlib

matplotlib.use("Agg")  # headless: figures are saved, never shown in a window

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

NOTEBOOKS = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(NOTEBOOKS)
sys.path.insert(0, os.path.join(ROOT, "bench"))
import results_io  # noqa: E402  bench/results_io.py: one parser for the report, the docs and the notebooks
from docblocks.core import PRIMARY  # noqa: E402  bench/docgen.py's package: the folder the docs quote

ELEM_BYTES = 2  # fp16 / bf16


class NoResults(RuntimeError):
    """Raised (with what to do) when a notebook needs results that do not exist."""


def families(d):
    """The sweep families ("prefill", "decode", ...) a results folder holds, from its meta.json: a run
    with `bench/run_all.sh --family F` holds F, a joined folder (merge_results.py) its parts'
    families; a folder that does not say holds both prefill and decode, and whatever other families
    its ladder_bench.json records (a hand-made run such as hopper-rungs/ with the backward family)."""
    try:
        with open(os.path.join(d, "meta.json"), encoding="utf-8") as f:
            meta = json.load(f)
    except (OSError, ValueError):
        meta = {}
    if not meta.get("parts") and not meta.get("family"):
        return {"prefill", "decode"} | _recorded_families(d)
    out = set()
    for fam in [p.get("family", "all") for p in meta.get("parts", [])] or [meta.get("family", "all")]:
        # run_all.sh writes its families as a list ("prefill,ablation"); "all" is every family.
        out |= {"prefill", "decode"} if fam in ("all", "", None) else set(str(fam).split(","))
    return out


def find_results(needs=(), family=None):
    """The folder to plot (see the module docstring for the rule); None if none has @p needs (file
    globs) and, if given, the @p family sweep."""
    env = os.environ.get("FL_RESULTS")
    if env:
        candidates = [env] if os.path.isdir(env) else []
    else:
        top = sorted(d for d in glob.glob(os.path.join(ROOT, "bench", "results", "*")) if os.path.isdir(d))
        # Sub-runs: a folder inside a GPU's folder with its own meta.json (not decode_splits/).
        subs = sorted(d for t in top for d in glob.glob(os.path.join(t, "*", "meta.json")))
        candidates = top + [os.path.dirname(m) for m in subs]
    ok = [
        d
        for d in candidates
        if all(glob.glob(os.path.join(d, n)) for n in needs) and (family is None or family in families(d))
    ]
    if not ok:
        return None
    primary = [d for d in ok if os.path.basename(os.path.normpath(d)) == PRIMARY]
    if primary:
        return primary[0]
    return max(ok, key=lambda d: (_entries(d, family), _stamp(d)))


def results_dir_with(rung, family):
    """The newest results folder whose ladder_bench.json has @p rung (a label such as
    "10_warp_specialized") in the @p family sweep: for notebooks about rungs measured in a run of
    their own (a sub-run such as hopper-rungs/). FL_RESULTS, if set, is the only candidate."""
    env = os.environ.get("FL_RESULTS")
    if env:
        candidates = [env] if os.path.isdir(env) else []
    else:
        top = sorted(d for d in glob.glob(os.path.join(ROOT, "bench", "results", "*")) if os.path.isdir(d))
        candidates = top + sorted(os.path.dirname(m) for t in top for m in glob.glob(os.path.join(t, "*", "meta.json")))
    ok = []
    for d in candidates:
        p = os.path.join(d, "ladder_bench.json")
        if os.path.exists(p) and any(r["family"] == family and r["rung"] == rung for r in results_io.load_records(p)):
            ok.append(d)
    if not ok:
        raise NoResults("no benchmark results with %s in the %s sweep under %s: `ladder_bench "
                        "--fl_family=%s` on a GPU that runs it writes them"
                        % (rung, family, env or os.path.join(ROOT, "bench", "results", "*"), family))
    return max(ok, key=_stamp)


def _recorded_families(d):
    """The families the folder's ladder_bench.json has entries of (empty without one)."""
    p = os.path.join(d, "ladder_bench.json")
    return {r["family"] for r in results_io.load_records(p)} if os.path.exists(p) else set()


def _entries(d, family):
    """How many benchmark entries of @p family (all if None) the folder's ladder_bench.json holds."""
    p = os.path.join(d, "ladder_bench.json")
    if not os.path.exists(p):
        return 0
    return sum(1 for r in results_io.load_records(p) if family is None or r["family"] == family)


def results_dir(need="ladder_bench.json", family=None):
    """The results folder to plot; raises NoResults naming what is missing and how to make it."""
    d = find_results([need], family)
    if d is not None:
        return d
    env = os.environ.get("FL_RESULTS")
    if env and not os.path.isdir(env):
        raise NoResults("FL_RESULTS=%s is not a folder" % env)
    raise NoResults(
        "no benchmark results with %s%s in %s. Results come only from a real GPU run: build, then "
        "run `bench/run_all.sh` (writes bench/results/<gpu>/), or point FL_RESULTS at such a folder."
        % (need, " and the %s sweep" % family if family else "",
           env or os.path.join(ROOT, "bench", "results", "*"))
    )


def _stamp(d):
    """Newest first: meta.json's date, else the ladder JSON's modification time."""
    try:
        with open(os.path.join(d, "meta.json"), encoding="utf-8") as f:
            return str(json.load(f).get("date", ""))
    except (OSError, ValueError):
        pass
    p = os.path.join(d, "ladder_bench.json")
    return "%020.3f" % os.path.getmtime(p) if os.path.exists(p) else ""


def load_bench(d):
    """(DataFrame of every benchmark entry, ladder context, torch context or None).

    Columns: rung, number, variant, source, family, batch, seqlen_q, seqlen_k, heads_q, heads_kv,
    head_dim, causal, ms, tflops, gbps, error, plus flops and bytes (compulsory HBM traffic)."""
    path = os.path.join(d, "ladder_bench.json")
    recs = results_io.load_records(path)
    ctx = results_io.load_context(path)
    torch_ctx = None
    tpath = os.path.join(d, "torch_sdpa.json")
    if os.path.exists(tpath):
        recs += results_io.load_records(tpath)
        torch_ctx = results_io.load_context(tpath)
    df = pd.DataFrame(recs)
    df = df[df["error"] == ""].copy()
    df["flops"] = df["tflops"] * 1e12 * df["ms"] * 1e-3
    df["bytes"] = ELEM_BYTES * (
        2 * df["batch"] * df["seqlen_q"] * df["heads_q"] * df["head_dim"]
        + 2 * df["batch"] * df["seqlen_k"] * df["heads_kv"] * df["head_dim"]
    )
    df["intensity"] = df["flops"] / df["bytes"]  # FLOP per compulsory HBM byte
    df["main"] = df["variant"].fillna("") == ""
    return df, ctx, torch_ctx


def ceilings(d, ctx):
    """The ceilings to draw for the results folder @p d: its measured ceilings.json (bench/ceilings.cu)
    when the run has one, else the datasheet peaks of ladder_bench's context, marked as such.

    Returns {"source": text, "measured": bool, "lines": [(name, TFLOP/s)] (compute ceilings to draw),
    "copy_tbps": TB/s or None, "for_peak": {"fp32_fma": TFLOP/s, "tensor_16bit": TFLOP/s} (the
    ceiling each kind of rung is measured against)}."""
    path = os.path.join(d, "ceilings.json")
    if os.path.exists(path):
        c = results_io.load_ceilings(path)

        def val(k):
            return c[k][1] if k in c else None

        copy = val("copy_gbps")
        lines = [(name, val(k)) for k, name in (("ffma_tflops", "fp32 FFMA"), ("mma_sync_fp16_tflops", "mma.sync fp16"),
                                                 ("cublas_fp16_tflops", "cuBLAS fp16 (wgmma)")) if val(k)]
        return {
            "source": "measured (ceilings.json of this run)",
            "measured": True,
            "lines": lines,
            "copy_tbps": copy / 1e3 if copy else None,
            "for_peak": {"fp32_fma": val("ffma_tflops"), "tensor_16bit": val("mma_sync_fp16_tflops")},
        }

    def num(k):
        try:
            return float(ctx.get(k, 0)) or None
        except (TypeError, ValueError):
            return None

    gbps = num("peak_gbps")
    fp32, tensor = num("peak_fp32_tflops"), num("peak_tensor_tflops")
    return {
        "source": "datasheet peaks of %s (this run has no ceilings.json: not measured)" % ctx.get("device", "?"),
        "measured": False,
        "lines": [(n, v) for n, v in (("fp32 FMA datasheet", fp32), ("16-bit tensor datasheet", tensor)) if v],
        "copy_tbps": gbps / 1e3 if gbps else None,
        "for_peak": {"fp32_fma": fp32, "tensor_16bit": tensor},
    }


def provenance(ctx):
    """ "NVIDIA H100 80GB HBM3, 2026-11-23, commit db84a6f": the run's GPU, date and commit from a
    bench JSON's context (the form docgen puts under every generated table)."""
    return "%s, %s, commit %s" % (ctx.get("device", "?"), str(ctx.get("date", "?"))[:10], ctx.get("git_sha", "?"))


def registry():
    """(declared baselines by label, registry entries by label) from the built tour, or (None, None)
    when nothing is built (the notebooks then skip the baseline figures and say so)."""
    tour = results_io.find_tour()
    if not tour:
        return None, None
    return results_io.registry_from_tour(tour)


def out_dir():
    d = os.environ.get("FL_NOTEBOOK_OUT") or os.path.join(tempfile.gettempdir(), "flashladder-plots")
    os.makedirs(d, exist_ok=True)
    return d


def save(fig, name):
    """Saves @p fig as <out>/<name>.png and closes it; returns the path."""
    path = os.path.join(out_dir(), name + ".png")
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    print("saved", path)
    return path


def rung_sort_key(label):
    m = re.match(r"^(\d+)_", label)
    if m:
        return (0, int(m.group(1)), label)
    order = results_io.TORCH_ORDER
    return (1, order.index(label) if label in order else len(order), label)


def seqlen_label(n):
    return results_io.seqlen_text(int(n))
