"""Loading the bench's results, and the small formatting helpers every reader of them shares.

    import results_io  # bench/ on sys.path
    recs = results_io.load_records("bench/results/<gpu>/ladder_bench.json")

One parser for every results format the bench writes: ladder_bench's Google Benchmark JSON and
bench/torch/sdpa.py's (and bench/torch/flex.py's) JSON in the same schema (load_records,
load_context), the registry of declared baselines that `tour --registry-json` prints
(load_registry, registry_from_tour), bench/ceilings.cu's measured ceilings (load_ceilings), and
the run reports of rungs 12 and 13 (ring_runs, torch_ring_runs, torch_cp_runs, ring_ablation_run,
fp8_accuracy_runs). Beside them the formatting every table uses (seqlen_text, fmt_value,
fmt_ratio, short, markdown_table), so that a docs table, a notebook and report.md print a figure
the same way.

Users: bench/report.py (the report writer), bench/docblocks/ (the generated docs), the notebooks
(notebooks/flresults.py) and the CPU tests. Record names look like
"04_fa2/prefill/d128/N4096/causal1", "08_flash_decoding/decode/d128/B1/Hkv8/Sk65536",
"08_flash_decoding/paged/d128/B1/Hkv8/Sk65536/P16", "11_backward/backward/d128/N4096/causal1/det",
"torch_flash/prefill/d128/N4096/causal0", "torch_flex/masks/d128/window4096/N32768",
"17_mla/mla-decode/d576/B32/H128/Sq1/Sk16384/P64" (and bench/pytorch/torch_mla.py's
"torch_cudnn/mla-decode/...": SDPA on the decompressed cache of the same shape).
"""

import glob
import json
import math
import os
import re
import subprocess
import tempfile

TORCH_ORDER = ["torch_flex", "torch_flash", "torch_cudnn", "torch_efficient", "torch_math"]
LABEL_RE = re.compile(r"^(?P<num>\d+)_(?P<name>[A-Za-z0-9_]+)(\[(?P<variant>[^\]]*)\])?$")
SHAPE_FIELDS = ("batch", "seqlen_q", "seqlen_k", "heads_q", "heads_kv", "head_dim", "causal", "page_size")
FAMILIES = ("prefill", "decode", "ablation", "paged", "backward", "backward-gqa", "backward-gqa8", "fp8",
            "hopper-prefill", "llama",
            "masks", "masks-backward", "mla-decode", "mla-prefill", "mla-prefill-backward", "decode-fp8")
BACKWARD_FAMILIES = ("backward", "backward-gqa", "backward-gqa8")
# Rung 16's masks and score modifiers: one table per family, a column per (case, seqlen) of
# "masks/d128/<case>/N<n>", in ladder_bench's order (mask_shapes); an unknown case after them.
MASK_FAMILIES = ("masks", "masks-backward")
MASK_CASES = ("causal", "window4096", "docs", "prefix2048", "softcap50", "alibi", "sinks")
# MLA (rung 17's decode on the latent cache, beside SDPA on the decompressed one; rung 16's 192/128
# prefill): bench/pytorch/torch_mla.py writes PyTorch's records (torch_mla.json).
MLA_FAMILIES = ("mla-decode", "mla-prefill", "mla-prefill-backward")
# Families swept over seqlen at each (head_dim, causal), in TFLOP/s: the prefill shapes.
SEQLEN_FAMILIES = ("prefill", "fp8", "hopper-prefill", "llama", "mla-prefill", "mla-prefill-backward") + \
    BACKWARD_FAMILIES


# ---- loading -----------------------------------------------------------------------------------


def finite_or(x, default=None):
    """float(x), or @p default when x is no finite number (None, "", "nan", "inf")."""
    try:
        v = float(x)
    except (TypeError, ValueError):
        return default
    return v if math.isfinite(v) else default


def split_name(name):
    """ "04_fa2[v]/prefill/d128/N4096/causal1/iterations:20/manual_time" -> ("04_fa2[v]", "prefill").

    Google Benchmark appends its own components (iterations:N, manual_time, repeats:N)."""
    parts = [p for p in name.split("/") if p and ":" not in p and p not in ("manual_time", "real_time")]
    return (parts[0] if parts else name), (parts[1] if len(parts) > 1 else "")


def load_records(path):
    """One dict per measured (or failed) benchmark of a ladder_bench or bench/torch/sdpa.py JSON file.

    Keys: rung (label: "04_fa2", "06_headdim_tiles[d64-64x64]", "torch_flash"), number (int,
    None for torch), variant, source ("ladder" or "torch"), family, the shape fields, deterministic
    (backward family: 1 for a deterministic-dQ run, else 0), ms (median), tflops, gbps, error ("" if
    it ran), and for the FP8 rungs' entries quantize_ms (the e4m3 conversion of Q, K, V, not in ms)
    and e2e_rel_fro (the error against fp64 on the 16-bit inputs); None where absent. case: the
    masks families' case ("window4096", from the name), None in the other families. head_dim_v: V's
    head_dim (the MLA families record it; else head_dim)."""
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    if not isinstance(doc, dict) or "benchmarks" not in doc:
        raise ValueError("%s: not a Google Benchmark JSON file (no 'benchmarks')" % path)
    out = []
    for b in doc["benchmarks"]:
        if b.get("run_type", "iteration") != "iteration":
            continue  # aggregates (mean/median/stddev over repetitions) would double count
        label, family = split_name(b.get("name", ""))
        family = b.get("family") or family
        if family not in FAMILIES:
            continue
        rec = {"rung": label, "family": family, "variant": "", "number": None}
        m = LABEL_RE.match(label)
        if m:
            rec.update(number=int(m["num"]), variant=m["variant"] or "", source="ladder")
        else:
            rec["source"] = "torch" if label.startswith("torch") else "other"
        for k in SHAPE_FIELDS:
            v = finite_or(b.get(k))
            rec[k] = int(v) if v is not None else None
        if rec["head_dim"] is None:  # counters missing: fall back to the name
            rec.update(_shape_from_name(b.get("name", "")))
        if rec["page_size"] is None:  # runs before the paged family recorded no page size
            rec["page_size"] = 0
        dv = finite_or(b.get("head_dim_v"))  # the MLA families' V head_dim (else V's is head_dim)
        rec["head_dim_v"] = int(dv) if dv is not None else rec["head_dim"]
        det = finite_or(b.get("deterministic"))
        rec["deterministic"] = int(det) if det is not None else int("det" in b.get("name", "").split("/"))
        ms = finite_or(b.get("median_ms"))
        if ms is None:
            ms = finite_or(b.get("real_time"))
            unit = b.get("time_unit", "ms")
            if ms is not None:
                ms *= {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}.get(unit, 1.0)
        rec["ms"] = ms
        rec["tflops"] = finite_or(b.get("TFLOPS"))
        rec["gbps"] = finite_or(b.get("GB/s"))
        rec["quantize_ms"] = finite_or(b.get("quantize_ms"))
        rec["e2e_rel_fro"] = finite_or(b.get("e2e_rel_fro"))
        err = b.get("skipped") or (b.get("error_message") if b.get("error_occurred") else "")
        rec["error"] = str(err or "")
        if not rec["error"] and not ms:
            rec["error"] = "no time"
        rec["case"] = _mask_case(b.get("name", "")) if family in MASK_FAMILIES else None
        out.append(rec)
    return out


def _mask_case(name):
    """ "16_masks/masks/d128/window4096/N32768/manual_time" -> "window4096": the part after d<d>."""
    parts = [p for p in name.split("/") if p and ":" not in p]
    for i, p in enumerate(parts[:-1]):
        if re.fullmatch(r"d\d+", p):
            return parts[i + 1]
    return ""


def _shape_from_name(name):
    shape = {}
    for key, pat in (
        ("head_dim", r"/d(\d+)"),
        ("seqlen_q", r"/N(\d+)"),
        ("causal", r"/causal(\d)"),
        ("batch", r"/B(\d+)"),
        ("heads_kv", r"/Hkv(\d+)"),
        ("heads_q", r"/H(\d+)"),
        ("seqlen_q", r"/Sq(\d+)"),
        ("seqlen_k", r"/Sk(\d+)"),
        ("page_size", r"/P(\d+)"),
    ):
        m = re.search(pat, name)
        if m:
            shape[key] = int(m.group(1))
    if "seqlen_q" in shape and "seqlen_k" not in shape:
        shape["seqlen_k"] = shape["seqlen_q"]
    shape.setdefault("causal", 0)
    shape.setdefault("page_size", 0)
    return shape


def load_context(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f).get("context", {})


def skipped_pairs(context):
    """ladder_bench lists each (rung, shape) it did not register as a context key "skip: <name>"."""
    return {k[len("skip: ") :]: v for k, v in context.items() if k.startswith("skip: ")}


def slug(device_name):
    """ "NVIDIA H100 80GB HBM3" -> "nvidia-h100-80gb-hbm3" (the results folder name)."""
    s = re.sub(r"[^a-z0-9]+", "-", device_name.lower()).strip("-")
    return s or "unknown-gpu"


def version_text(v):
    """CUDA versions come as 12080 (= 12.8); leave anything else alone."""
    try:
        n = int(float(v))
    except (TypeError, ValueError):
        return str(v)
    return "%d.%d" % (n // 1000, (n % 1000) // 10) if n >= 1000 else str(v)


# ---- the registry: each rung's declared baselines ---------------------------------------------


def load_registry(path):
    """{label: [{"kind": "rung"|"fastest_earlier", "label": ..., "why": ...}, ...]} from the JSON
    that `tour --registry-json` prints (schema flashladder.registry/1)."""
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    if doc.get("schema") != "flashladder.registry/1":
        raise ValueError("%s: not a FlashLadder registry (tour --registry-json)" % path)
    return {r["label"]: r["baselines"] for r in doc["rungs"]}


def find_tour(bin_dir=None):
    """The built `tour` of @p bin_dir, else the newest build/*/bin/tour of this checkout; None if none."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    bins = [bin_dir] if bin_dir else glob.glob(os.path.join(root, "build", "*", "bin"))
    tours = [os.path.join(b, "tour") for b in bins if os.path.exists(os.path.join(b, "tour"))]
    return max(tours, key=os.path.getmtime) if tours else None


def registry_from_tour(tour):
    """(load_registry()'s dict, the raw entries by label) from `tour --registry-json`."""
    out = subprocess.run([tour, "--registry-json"], capture_output=True, text=True)
    if out.returncode != 0:
        raise ValueError("%s --registry-json failed: %s" % (tour, out.stderr.strip()))
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        f.write(out.stdout)
    try:
        return load_registry(f.name), {r["label"]: r for r in json.loads(out.stdout)["rungs"]}
    finally:
        os.unlink(f.name)


def load_ceilings(path):
    """{key: (what, value, unit)} of the measured ceilings (bench/ceilings.cu's JSON); value None
    where the ceiling was not measured (the note says why)."""
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    if doc.get("schema") != "flashladder.ceilings/1":
        raise ValueError("%s: not a ceilings JSON (bench/ceilings.cu)" % path)
    return {
        k: (c["what"], finite_or(c.get("value")), c["unit"], c.get("note", ""))
        for k, c in doc["ceilings"].items()
    }


def peak_tflops(context, peak):
    """The datasheet peak in TFLOP/s that a registry entry's "peak" (fp32_fma, tensor_16bit,
    tensor_fp8) is measured against, from a bench context (load_context); None for another peak or
    when the context has no value. The FP8 tensor peak is twice the 16-bit one (DeviceInfo's
    formula, Peak::tensor_fp8)."""
    key, factor = {"fp32_fma": ("peak_fp32_tflops", 1), "tensor_16bit": ("peak_tensor_tflops", 1),
                   "tensor_fp8": ("peak_tensor_tflops", 2)}.get(peak, (None, 1))
    v = finite_or(context.get(key)) if key else None
    return factor * v if v else None


def rate_ceilings(context, ceilings=None):
    """The two rates a memory- or compute-bound kernel is held against (the MLA decode table's
    floors: FLOPs / tensor rate, bytes / HBM rate), as {"tflops", "tflops_what", "gbps", "gbps_what"}:
    the measured ceilings where @p ceilings (load_ceilings) has them (cuBLAS's GEMM in the run's
    16-bit type, the device copy), else the datasheet peaks of the bench @p context; None where
    neither says."""
    ceilings = ceilings or {}
    dtype = context.get("dtype", "fp16")
    out = {"tflops": None, "tflops_what": "", "gbps": None, "gbps_what": ""}
    gemm = ceilings.get("cublas_%s_tflops" % ("bf16" if dtype == "bf16" else "fp16"))
    if gemm and gemm[1]:
        out.update(tflops=gemm[1], tflops_what="%s (measured)" % gemm[0])
    elif finite_or(context.get("peak_tensor_tflops")):
        out.update(tflops=finite_or(context.get("peak_tensor_tflops")), tflops_what="16-bit tensor peak (datasheet)")
    copy = ceilings.get("copy_gbps")
    if copy and copy[1]:
        out.update(gbps=copy[1], gbps_what="%s (measured)" % copy[0])
    elif finite_or(context.get("peak_gbps")):
        out.update(gbps=finite_or(context.get("peak_gbps")), gbps_what="DRAM peak (datasheet)")
    return out


# ---- the run reports of rungs 12 and 13 (bench/run_ring.sh, bench/run_fp8.sh) -----------------


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
    flashladder.torch_ring/1, bench/pytorch/torch_ring_baseline.py) in @p folder, files <prefix>*.json."""
    out = {}
    for f in sorted(glob.glob(os.path.join(folder, prefix + "*.json"))):
        with open(f, encoding="utf-8") as fh:
            t = json.load(fh)
        if isinstance(t, dict) and t.get("schema") == "flashladder.torch_ring/1":
            out[(t.get("ranks", t["gpus"]), t["problem"]["seqlen"], int(t["problem"]["causal"]))] = t
    return out


def torch_cp_runs(folder):
    """{(gpus, seqlen, causal): report} of PyTorch's context_parallel forward + backward (schema
    flashladder.torch_cp/1, bench/pytorch/torch_cp_baseline.py) in @p folder, files torch_cp_*.json."""
    out = {}
    for f in sorted(glob.glob(os.path.join(folder, "torch_cp_*.json"))):
        with open(f, encoding="utf-8") as fh:
            t = json.load(fh)
        if isinstance(t, dict) and t.get("schema") == "flashladder.torch_cp/1":
            out[(t["gpus"], t["problem"]["seqlen"], int(t["problem"]["causal"]))] = t
    return out


def ring_ablation_run(folder, causal, setting):
    """(ran, report) of the two-GPU zigzag ring under one NCCL setting, in the NCCL ablation's
    @p folder (files ring_p2_n<N>_zigzag_causal<c>_<setting>.json and .log): ran tells whether the
    setting left any file; report is its JSON, or None for a run stopped before its first timed pass
    (it leaves only its log)."""
    found = sorted(glob.glob(os.path.join(folder, "ring_p2_n*_zigzag_causal%d_%s.*" % (causal, setting))))
    js = [f for f in found if f.endswith(".json")]
    if not js:
        return bool(found), None
    with open(js[0], encoding="utf-8") as f:
        return True, json.load(f)


def fp8_accuracy_runs(folder):
    """The run reports (schema flashladder.run/1 with an "fp8" object) of bench/run_fp8.sh under
    @p folder/fp8_accuracy/, sorted by file name; [] when there are none."""
    out = []
    for f in sorted(glob.glob(os.path.join(folder, "fp8_accuracy", "*.json"))):
        with open(f, encoding="utf-8") as fh:
            j = json.load(fh)
        if isinstance(j, dict) and j.get("schema") == "flashladder.run/1" and "fp8" in j:
            j["_file"] = os.path.basename(f)
            out.append(j)
    return out


# ---- records' coordinates and the shared formatting -----------------------------------------


def x_of(r):
    if r["family"] == "ablation":
        return r["head_dim"]
    if r["family"] == "mla-decode":  # (seqlen_q, batch, seqlen_k): the rows of one heads count's table
        return (r["seqlen_q"], r["batch"], r["seqlen_k"])
    if r["family"] in MASK_FAMILIES:  # (order, seqlen, case): the columns in ladder_bench's order
        case = r.get("case") or ""
        return (MASK_CASES.index(case) if case in MASK_CASES else len(MASK_CASES), r["seqlen_q"], case)
    return r["seqlen_q"] if r["family"] in SEQLEN_FAMILIES else r["seqlen_k"]


def rung_order(labels):
    def key(label):
        m = LABEL_RE.match(label)
        if m:
            return (0, int(m["num"]), m["variant"] or "")
        if label in TORCH_ORDER:
            return (1, TORCH_ORDER.index(label), "")
        return (2, 0, label)

    return sorted(labels, key=key)


def seqlen_text(n):
    return "%dk" % (n // 1024) if n >= 1024 and n % 1024 == 0 else str(n)


def fmt_value(v):
    if v is None:
        return "—"
    if v >= 100:
        return "%.0f" % v
    if v >= 10:
        return "%.1f" % v
    return "%.2f" % v if v >= 1 else "%.3f" % v


def fmt_ratio(v):
    if v is None:
        return "—"
    if v >= 100:
        return "%.0f×" % v
    if v >= 10:
        return "%.1f×" % v
    return ("%.2f×" % v) if v >= 0.1 else ("%#.2g×" % v)  # 2 significant digits, trailing zeros kept


def is_main(label):
    m = LABEL_RE.match(label)
    return bool(m) and not m["variant"]


def number_of(label):
    m = LABEL_RE.match(label)
    return int(m["num"]) if m else None


def short(label):
    """ "05_tensor_cores" -> "05"; a variant keeps its name: "07[untiled-m64-n64]"."""
    m = LABEL_RE.match(label)
    if not m:
        return label
    return m["num"] + ("[%s]" % m["variant"] if m["variant"] else "")


def markdown_table(header, rows, align=None):
    align = align or ["---"] + ["--:"] * (len(header) - 1)
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)
