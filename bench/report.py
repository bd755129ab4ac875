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
bench/torch_flex.py and SDPA on the causal cells; the window / causal time ratio).

The baselines come from the registry the rungs declare (`Rung::baselines`), printed by
`tour --registry-json` (REGISTRY.json): a rung is compared with the rung it improves on, a study
with its own untiled kernel, a decode rung with the fastest earlier rung on the same shape, a
variant with its rung. Without --registry the report has no baseline columns.

bench/docgen.py (the package bench/docblocks/) imports this module to generate the README and
handout tables (summary_table() and friends) and to regenerate every committed report.md; the
notebooks use load_records(). The run reports of rungs 12 and 13 (ring_runs, torch_ring_runs,
ring_ablation_run, fp8_accuracy_runs) are read here too, for the docs and the notebooks alike.

Inputs: ladder_bench's Google Benchmark JSON (--benchmark_out=F --benchmark_out_format=json), whose
benchmark names are "<rung label>/<family>/<shape>" (e.g. "04_fa2/prefill/d128/N4096/causal1",
"08_flash_decoding/decode/d128/B1/Hkv8/Sk65536", "08_flash_decoding/paged/d128/B1/Hkv8/Sk65536/P16",
"11_backward/backward/d128/N4096/causal1/det", "13_fp8/fp8/d128/N4096/causal1"), and torch_sdpa.py's JSON in the same schema
("torch_flash/prefill/d128/N4096/causal0", "torch_cudnn/backward/d128/N4096/causal1");
bench/torch_flex.py's JSON in the same schema ("torch_flex/masks/d128/window4096/N32768"), from
--flex or else the torch_flex.json beside LADDER.json; bench/ceilings.cu's JSON for the measured
ceilings.
"""

import argparse
import glob
import json
import math
import os
import re
import subprocess
import sys
import tempfile

TORCH_ORDER = ["torch_flex", "torch_flash", "torch_cudnn", "torch_efficient", "torch_math"]
LABEL_RE = re.compile(r"^(?P<num>\d+)_(?P<name>[A-Za-z0-9_]+)(\[(?P<variant>[^\]]*)\])?$")
SHAPE_FIELDS = ("batch", "seqlen_q", "seqlen_k", "heads_q", "heads_kv", "head_dim", "causal", "page_size")
FAMILIES = ("prefill", "decode", "ablation", "paged", "backward", "backward-gqa", "fp8", "hopper-prefill", "llama",
            "masks", "masks-backward")
BACKWARD_FAMILIES = ("backward", "backward-gqa")
# Rung 16's masks and score modifiers: one table per family, a column per (case, seqlen) of
# "masks/d128/<case>/N<n>", in ladder_bench's order (mask_shapes); an unknown case after them.
MASK_FAMILIES = ("masks", "masks-backward")
MASK_CASES = ("causal", "window4096", "docs", "prefix2048", "softcap50", "alibi", "sinks")
# Families swept over seqlen at each (head_dim, causal), in TFLOP/s: the prefill shapes.
SEQLEN_FAMILIES = ("prefill", "fp8", "hopper-prefill", "llama") + BACKWARD_FAMILIES


# ---- loading -----------------------------------------------------------------------------------


def _num(x, default=None):
    try:
        v = float(x)
    except (TypeError, ValueError):
        return default
    return v if math.isfinite(v) else default


def _split_name(name):
    """ "04_fa2[v]/prefill/d128/N4096/causal1/iterations:20/manual_time" -> ("04_fa2[v]", "prefill").

    Google Benchmark appends its own components (iterations:N, manual_time, repeats:N)."""
    parts = [p for p in name.split("/") if p and ":" not in p and p not in ("manual_time", "real_time")]
    return (parts[0] if parts else name), (parts[1] if len(parts) > 1 else "")


def load_records(path):
    """One dict per measured (or failed) benchmark of a ladder_bench or torch_sdpa.py JSON file.

    Keys: rung (label: "04_fa2", "06_headdim_tiles[d64-64x64]", "torch_flash"), number (int,
    None for torch), variant, source ("ladder" or "torch"), family, the shape fields, deterministic
    (backward family: 1 for a deterministic-dQ run, else 0), ms (median), tflops, gbps, error ("" if
    it ran), and for the FP8 rungs' entries quantize_ms (the e4m3 conversion of Q, K, V, not in ms)
    and e2e_rel_fro (the error against fp64 on the 16-bit inputs); None where absent. case: the
    masks families' case ("window4096", from the name), None in the other families."""
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    if not isinstance(doc, dict) or "benchmarks" not in doc:
        raise ValueError("%s: not a Google Benchmark JSON file (no 'benchmarks')" % path)
    out = []
    for b in doc["benchmarks"]:
        if b.get("run_type", "iteration") != "iteration":
            continue  # aggregates (mean/median/stddev over repetitions) would double count
        label, family = _split_name(b.get("name", ""))
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
            v = _num(b.get(k))
            rec[k] = int(v) if v is not None else None
        if rec["head_dim"] is None:  # counters missing: fall back to the name
            rec.update(_shape_from_name(b.get("name", "")))
        if rec["page_size"] is None:  # runs before the paged family recorded no page size
            rec["page_size"] = 0
        det = _num(b.get("deterministic"))
        rec["deterministic"] = int(det) if det is not None else int("det" in b.get("name", "").split("/"))
        ms = _num(b.get("median_ms"))
        if ms is None:
            ms = _num(b.get("real_time"))
            unit = b.get("time_unit", "ms")
            if ms is not None:
                ms *= {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}.get(unit, 1.0)
        rec["ms"] = ms
        rec["tflops"] = _num(b.get("TFLOPS"))
        rec["gbps"] = _num(b.get("GB/s"))
        rec["quantize_ms"] = _num(b.get("quantize_ms"))
        rec["e2e_rel_fro"] = _num(b.get("e2e_rel_fro"))
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
        k: (c["what"], _num(c.get("value")), c["unit"], c.get("note", ""))
        for k, c in doc["ceilings"].items()
    }


def peak_tflops(context, peak):
    """The datasheet peak in TFLOP/s that a registry entry's "peak" (fp32_fma, tensor_16bit,
    tensor_fp8) is measured against, from a bench context (load_context); None for another peak or
    when the context has no value. The FP8 tensor peak is twice the 16-bit one (DeviceInfo's
    formula, Peak::tensor_fp8)."""
    key, factor = {"fp32_fma": ("peak_fp32_tflops", 1), "tensor_16bit": ("peak_tensor_tflops", 1),
                   "tensor_fp8": ("peak_tensor_tflops", 2)}.get(peak, (None, 1))
    v = _num(context.get(key)) if key else None
    return factor * v if v else None


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
    flashladder.torch_ring/1, bench/torch_ring_baseline.py) in @p folder, files <prefix>*.json."""
    out = {}
    for f in sorted(glob.glob(os.path.join(folder, prefix + "*.json"))):
        with open(f, encoding="utf-8") as fh:
            t = json.load(fh)
        if isinstance(t, dict) and t.get("schema") == "flashladder.torch_ring/1":
            out[(t.get("ranks", t["gpus"]), t["problem"]["seqlen"], int(t["problem"]["causal"]))] = t
    return out


def torch_cp_runs(folder):
    """{(gpus, seqlen, causal): report} of PyTorch's context_parallel forward + backward (schema
    flashladder.torch_cp/1, bench/torch_cp_baseline.py) in @p folder, files torch_cp_*.json."""
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


def x_of(r):
    if r["family"] == "ablation":
        return r["head_dim"]
    if r["family"] in MASK_FAMILIES:  # (order, seqlen, case): the columns in ladder_bench's order
        case = r.get("case") or ""
        return (MASK_CASES.index(case) if case in MASK_CASES else len(MASK_CASES), r["seqlen_q"], case)
    return r["seqlen_q"] if r["family"] in SEQLEN_FAMILIES else r["seqlen_k"]


def x_text(family, x):
    if family == "ablation":
        return "d=%d" % x
    if family in MASK_FAMILIES:
        return "%s N=%s" % (x[2], seqlen_text(x[1]))
    return ("N=" if family in SEQLEN_FAMILIES else "Sk=") + seqlen_text(x)


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


def markdown_table(header, rows, align=None):
    align = align or ["---"] + ["--:"] * (len(header) - 1)
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


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
        v = _num(ctx.get(key))
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
    """bench/torch_flex.py's JSON in the folder of @p ladder_path (run_all.sh writes it there), or None."""
    path = os.path.join(os.path.dirname(os.path.abspath(ladder_path)), "torch_flex.json")
    return path if os.path.exists(path) else None


def full_report(ladder_path, torch_path=None, include_variants=False, registry=None, ceilings=None, flex_path=None):
    """The markdown report. @p registry: load_registry()'s dict (baseline tables); @p ceilings:
    load_ceilings()'s dict (header line); @p flex_path: bench/torch_flex.py's JSON (default: the
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
        "`bench/torch_sdpa.py`%s); %s. `—` = not measured, `skip` = the rung refuses the shape "
        "(reason below), `fail` = the output check failed. Generated by `bench/report.py` from `%s`%s."
        % (
            ", `bench/torch_flex.py`" if flex_path else "",
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
            label, family = _split_name(name)
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
    ap.add_argument("--torch", help="torch_sdpa.py JSON from the same GPU (optional)")
    ap.add_argument("--flex", help="torch_flex.py JSON from the same GPU (default: torch_flex.json beside LADDER)")
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
