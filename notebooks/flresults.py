"""Shared by the notebooks: find a results folder, load it, look up the GPU's ceilings, save figures.

Results come from `bench/run_all.sh` on a GPU, which writes bench/results/<gpu-slug>/:
    ladder_bench.json           every rung over the prefill and decode sweeps (Google Benchmark JSON)
    torch_sdpa.json             PyTorch SDPA (flash, cuDNN, efficient, math) on the same shapes
    sweep07_d64.json, ..._d128  rung 07's `--sweep` (registers, spills, time per variant)
    decode_splits/*.json        rung 08 with --splits 1..64 and the heuristic (one run report each)
    meta.json, report.md        device, date, git sha; the speedup tables

FL_RESULTS=<folder> picks a folder; otherwise the newest bench/results/*/ that has what the notebook
needs (find_results: the files, and the prefill or decode sweep per meta.json).
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
import report  # noqa: E402  bench/report.py: one parser for the report and the notebooks

ELEM_BYTES = 2  # fp16 / bf16


class NoResults(RuntimeError):
    """Raised (with what to do) when a notebook needs results that do not exist."""


def families(d):
    """The sweep families ("prefill", "decode") a results folder holds, from its meta.json: a run
    with `bench/run_all.sh --family F` holds F, a joined folder (merge_results.py) its parts'
    families; a folder that does not say holds both."""
    try:
        with open(os.path.join(d, "meta.json"), encoding="utf-8") as f:
            meta = json.load(f)
    except (OSError, ValueError):
        return {"prefill", "decode"}
    out = set()
    for fam in [p.get("family", "all") for p in meta.get("parts", [])] or [meta.get("family", "all")]:
        out |= {"prefill", "decode"} if fam in ("all", "", None) else {fam}
    return out


def find_results(needs=(), family=None):
    """The folder to plot: FL_RESULTS if set, else the newest bench/results/*/ (meta.json's date)
    that has a file for every glob in @p needs and, if @p family is given, that sweep. None if
    there is none. .ci/notebooks.sh asks the same question with each notebook's metadata."""
    env = os.environ.get("FL_RESULTS")
    if env:
        candidates = [env] if os.path.isdir(env) else []
    else:
        candidates = [
            d for d in glob.glob(os.path.join(ROOT, "bench", "results", "*")) if os.path.isdir(d)
        ]
        candidates.sort(key=_stamp, reverse=True)
    for d in candidates:
        if all(glob.glob(os.path.join(d, n)) for n in needs) and (
            family is None or family in families(d)
        ):
            return d
    return None


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
    recs = report.load_records(path)
    ctx = report.load_context(path)
    torch_ctx = None
    tpath = os.path.join(d, "torch_sdpa.json")
    if os.path.exists(tpath):
        recs += report.load_records(tpath)
        torch_ctx = report.load_context(tpath)
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


def ceilings(device_name):
    """The measured ceilings of this GPU (notebooks/ceilings.json, matched by name substring).

    Falls back to ladder_bench's datasheet peaks (marked "datasheet") for a GPU not in the file."""
    with open(os.path.join(NOTEBOOKS, "ceilings.json"), encoding="utf-8") as f:
        table = json.load(f)
    for entry in table["devices"]:
        if entry["match"].lower() in (device_name or "").lower():
            return dict(entry)
    return None


def datasheet_ceilings(ctx):
    def num(k):
        try:
            return float(ctx.get(k, 0))
        except (TypeError, ValueError):
            return 0.0

    return {
        "match": ctx.get("device", "?"),
        "source": "datasheet peaks from ladder_bench's context " "(not measured)",
        "ffma_tflops": num("peak_fp32_tflops"),
        "mma_sync_tflops": num("peak_tensor_tflops"),
        "cublas_fp16_tflops": None,
        "copy_tbps": num("peak_gbps") / 1e3,
    }


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
    order = report.TORCH_ORDER
    return (1, order.index(label) if label in order else len(order), label)


def seqlen_label(n):
    return report.seqlen_text(int(n))
