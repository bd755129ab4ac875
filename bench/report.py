#!/usr/bin/env python3
"""Speedup tables from one ladder_bench run (and the PyTorch SDPA run on the same GPU).

    python3 bench/report.py LADDER.json [--torch TORCH.json] [--out report.md]
    python3 bench/report.py LADDER.json [--torch TORCH.json] --readme README.md [--link report.md]

The first form writes a markdown report: a header (device, date, git sha, CUDA, peaks), then per
family (prefill by head_dim and causal; decode by batch and KV heads) the throughput of every rung
at every sequence length (TFLOP/s for prefill, GB/s for decode), the speedup over rung 01, over the
previous rung, and the ratio to PyTorch SDPA's flash and cuDNN backends. Every ratio compares
times on the same shape, so it is also the ratio of throughputs.

The second form replaces what lies between the lines

    <!-- BENCH-TABLE-BEGIN -->
    <!-- BENCH-TABLE-END -->

in README.md with a compact table (one prefill shape, causal and not, and one decode shape).

Inputs: ladder_bench's Google Benchmark JSON (--benchmark_out=F --benchmark_out_format=json), whose
benchmark names are "<rung label>/<family>/<shape>" (e.g. "04_fa2/prefill/d128/N4096/causal1",
"08_flash_decoding/decode/d128/B1/Hkv8/Sk65536"), and torch_sdpa.py's JSON in the same schema
("torch_flash/prefill/d128/N4096/causal0"). The functions load_records() and friends are also
used by the notebooks.
"""

import argparse
import json
import math
import os
import re
import sys

BEGIN_MARK = "<!-- BENCH-TABLE-BEGIN -->"
END_MARK = "<!-- BENCH-TABLE-END -->"
TORCH_ORDER = ["torch_flash", "torch_cudnn", "torch_efficient", "torch_math"]
LABEL_RE = re.compile(r"^(?P<num>\d+)_(?P<name>[A-Za-z0-9_]+)(\[(?P<variant>[^\]]*)\])?$")
SHAPE_FIELDS = ("batch", "seqlen_q", "seqlen_k", "heads_q", "heads_kv", "head_dim", "causal")


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
    None for torch), variant, source ("ladder" or "torch"), family, the shape fields, ms (median),
    tflops, gbps, error ("" if it ran)."""
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
        if family not in ("prefill", "decode"):
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
        ms = _num(b.get("median_ms"))
        if ms is None:
            ms = _num(b.get("real_time"))
            unit = b.get("time_unit", "ms")
            if ms is not None:
                ms *= {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}.get(unit, 1.0)
        rec["ms"] = ms
        rec["tflops"] = _num(b.get("TFLOPS"))
        rec["gbps"] = _num(b.get("GB/s"))
        err = b.get("skipped") or (b.get("error_message") if b.get("error_occurred") else "")
        rec["error"] = str(err or "")
        if not rec["error"] and not ms:
            rec["error"] = "no time"
        out.append(rec)
    return out


def _shape_from_name(name):
    shape = {}
    for key, pat in (
        ("head_dim", r"/d(\d+)"),
        ("seqlen_q", r"/N(\d+)"),
        ("causal", r"/causal(\d)"),
        ("batch", r"/B(\d+)"),
        ("heads_kv", r"/Hkv(\d+)"),
        ("seqlen_k", r"/Sk(\d+)"),
    ):
        m = re.search(pat, name)
        if m:
            shape[key] = int(m.group(1))
    if "seqlen_q" in shape and "seqlen_k" not in shape:
        shape["seqlen_k"] = shape["seqlen_q"]
    shape.setdefault("causal", 0)
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


# ---- tables ------------------------------------------------------------------------------------


def family_groups(records):
    """{(family, key): [records]} with key (head_dim, causal) for prefill, (batch, heads_kv) for decode."""
    groups = {}
    for r in records:
        if r["family"] == "prefill":
            key = (r["head_dim"], r["causal"])
        else:
            key = (r["batch"], r["heads_kv"], r["head_dim"])
        groups.setdefault((r["family"], key), []).append(r)
    return dict(sorted(groups.items(), key=lambda kv: (kv[0][0] != "prefill", kv[0][1])))


def group_title(family, key, records):
    if family == "prefill":
        d, causal = key
        r = records[0]
        return (
            "Prefill, head_dim %d, %s" % (d, "causal" if causal else "not causal"),
            "batch x seqlen = %d tokens, %d heads; TFLOP/s (unmasked pairs only)"
            % (r["batch"] * r["seqlen_q"], r["heads_q"]),
        )
    b, hkv, d = key
    return (
        "Decode, batch %d, %d KV heads" % (b, hkv),
        "seqlen_q 1, %d query heads, head_dim %d; GB/s (Q, K, V read once, O written once)"
        % (records[0]["heads_q"], d),
    )


def x_of(r):
    return r["seqlen_q"] if r["family"] == "prefill" else r["seqlen_k"]


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
    return ("%.2f×" % v) if v >= 0.1 else ("%.2g×" % v)  # 2 significant digits


class Grid:
    """Times (ms) of one family group: rung label x sequence length."""

    def __init__(self, records):
        self.ms, self.value, self.error = {}, {}, {}
        family = records[0]["family"]
        for r in records:
            cell = (r["rung"], x_of(r))
            if r["error"]:
                self.error[cell] = r["error"]
                continue
            self.ms[cell] = r["ms"]
            self.value[cell] = r["tflops"] if family == "prefill" else r["gbps"]
        self.xs = sorted({x_of(r) for r in records})
        self.labels = rung_order({r["rung"] for r in records})
        self.mains = [l for l in self.labels if LABEL_RE.match(l) and not LABEL_RE.match(l)["variant"]]

    def ratio(self, base, label, x):
        """time(base) / time(label): > 1 means label is faster."""
        a, b = self.ms.get((base, x)), self.ms.get((label, x))
        return a / b if a and b else None

    def previous(self, label, x):
        """The closest lower-numbered main rung measured at x (a variant's previous is its main's)."""
        m = LABEL_RE.match(label)
        if not m:
            return None
        num = int(m["num"])
        best = None
        for l in self.mains:
            n = int(LABEL_RE.match(l)["num"])
            if n < num and (l, x) in self.ms:
                best = l
        return best


def markdown_table(header, rows):
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "|".join(["---"] + ["--:"] * (len(header) - 1)) + "|",
    ]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def rung_cell(label):
    return "`%s`" % label


def family_section(family, key, records, include_variants):
    g = Grid(records)
    labels = [
        l
        for l in g.labels
        if include_variants or not (LABEL_RE.match(l) and LABEL_RE.match(l)["variant"])
    ]
    title, sub = group_title(family, key, records)
    out = ["## %s" % title, "", sub + ".", ""]
    header = ["rung"] + [("N=" if family == "prefill" else "Sk=") + seqlen_text(x) for x in g.xs]

    def value_row(label):
        cells = []
        for x in g.xs:
            if (label, x) in g.value:
                cells.append(fmt_value(g.value[(label, x)]))
            elif (label, x) in g.error:
                cells.append("fail" if "check failed" in g.error[(label, x)] else "skip")
            else:
                cells.append("—")
        return [rung_cell(label)] + cells

    unit = "TFLOP/s" if family == "prefill" else "GB/s"
    out += ["**%s**" % unit, "", markdown_table(header, [value_row(l) for l in labels]), ""]

    ladder = [l for l in labels if LABEL_RE.match(l)]
    base = next((l for l in g.mains if LABEL_RE.match(l)["num"] == "01"), None)
    if base:
        rows = [
            [rung_cell(l)] + [fmt_ratio(g.ratio(base, l, x)) for x in g.xs] for l in ladder if l != base
        ]
        if rows:
            out += ["**Speedup over `%s`**" % base, "", markdown_table(header, rows), ""]
    rows = []
    for l in ladder:
        prevs = {x: g.previous(l, x) for x in g.xs}
        ratios = [g.ratio(prevs[x], l, x) if prevs[x] else None for x in g.xs]
        if not any(ratios):
            continue
        named = {p for p in prevs.values() if p}
        if len(named) == 1:  # the usual case: one previous rung for the whole row
            rows.append(["%s vs `%s`" % (rung_cell(l), named.pop())] + [fmt_ratio(r) for r in ratios])
        else:
            rows.append(
                [rung_cell(l)]
                + [
                    "%s vs %s" % (fmt_ratio(r), prevs[x].split("_")[0]) if r else "—"
                    for r, x in zip(ratios, g.xs)
                ]
            )
    if rows:
        out += [
            "**Speedup over the previous rung** (the closest lower rung measured on that shape)",
            "",
            markdown_table(header, rows),
            "",
        ]
    for torch_label, name in (
        ("torch_flash", "PyTorch SDPA flash"),
        ("torch_cudnn", "PyTorch SDPA cuDNN"),
    ):
        if not any((torch_label, x) in g.ms for x in g.xs):
            continue
        rows = [[rung_cell(l)] + [fmt_ratio(g.ratio(torch_label, l, x)) for x in g.xs] for l in ladder]
        rows = [r for r in rows if any(c != "—" for c in r[1:])]
        if not rows:
            continue
        out += [
            "**Ratio to %s** (time of `%s` / time of the rung: above 1 = the rung is faster)"
            % (name, torch_label),
            "",
            markdown_table(header, rows),
            "",
        ]
    return "\n".join(out)


def header_lines(ctx, torch_ctx):
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
    if peaks:
        rows.append(["peaks (datasheet formula)", ", ".join(peaks)])
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


def full_report(ladder_path, torch_path=None, include_variants=False):
    ctx = load_context(ladder_path)
    records = load_records(ladder_path)
    torch_ctx = None
    notes = []
    if torch_path:
        torch_ctx = load_context(torch_path)
        if torch_ctx.get("device") and torch_ctx.get("device") != ctx.get("device"):
            notes.append(
                "**Warning:** the PyTorch run was on `%s`, the ladder on `%s`; ratios to PyTorch "
                "compare different GPUs." % (torch_ctx.get("device"), ctx.get("device"))
            )
        records += [r for r in load_records(torch_path)]
    out = ["# FlashLadder benchmark report", ""]
    out += header_lines(ctx, torch_ctx) + [""]
    out += notes
    out += [
        "Median of CUDA-event times with L2 flushed before each launch (`bench/ladder_bench.cpp`, "
        "`bench/torch_sdpa.py`); fp16. `—` = not measured, `skip` = the rung refuses the shape "
        "(reason below), `fail` = the output check failed. Generated by `bench/report.py` from `%s`%s."
        % (
            os.path.basename(ladder_path),
            (" and `%s`" % os.path.basename(torch_path)) if torch_path else "",
        ),
        "",
    ]
    groups = family_groups(records)
    if not groups:
        out += ["No benchmark entries found."]
    torch_only = []
    for (family, key), recs in groups.items():
        if not any(r["source"] == "ladder" for r in recs):
            torch_only.append(group_title(family, key, recs)[0])
            continue
        out += [family_section(family, key, recs, include_variants), ""]
    if torch_only:
        out += [
            "PyTorch measured shapes the ladder does not run (%s); they are in `%s`."
            % ("; ".join(torch_only), os.path.basename(torch_path)),
            "",
        ]
    skips = skipped_pairs(ctx)
    errors = [(r["rung"], r) for r in records if r["error"] and r["source"] == "ladder"]
    if skips or errors:
        out += ["## Not measured", ""]
        reasons = {}
        for name, why in skips.items():
            label, _ = _split_name(name)
            if not include_variants and LABEL_RE.match(label) and LABEL_RE.match(label)["variant"]:
                continue
            reasons.setdefault((label, why), []).append(name.split("/", 1)[1] if "/" in name else name)
        for label, r in errors:
            reasons.setdefault((label, r["error"]), []).append("%s %s" % (r["family"], x_of(r)))
        for (label, why), shapes in sorted(reasons.items(), key=lambda kv: rung_order([kv[0][0]])[0]):
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


def summary_table(ladder_path, torch_path=None, link=None, seqlen=4096, decode_sk=65536):
    ctx = load_context(ladder_path)
    records = load_records(ladder_path)
    if torch_path:
        records += load_records(torch_path)
    prefill = [r for r in records if r["family"] == "prefill" and r["head_dim"] == 128]
    decode = [r for r in records if r["family"] == "decode" and r["batch"] == 1 and r["heads_kv"] == 8]
    # Fall back to the largest measured length when the preferred one is absent (--fl_quick runs).
    if prefill and not any(r["seqlen_q"] == seqlen for r in prefill):
        seqlen = max(r["seqlen_q"] for r in prefill)
    if decode and not any(r["seqlen_k"] == decode_sk for r in decode):
        decode_sk = max(r["seqlen_k"] for r in decode)
    labels = rung_order(
        {
            r["rung"]
            for r in records
            if r["rung"] in ("torch_flash", "torch_cudnn")
            or (LABEL_RE.match(r["rung"]) and not LABEL_RE.match(r["rung"])["variant"])
        }
    )
    base = {
        c: pick(prefill, rung=l, causal=c, seqlen_q=seqlen)
        for c in (0, 1)
        for l in labels
        if l.startswith("01_")
    }
    flash = pick(prefill, rung="torch_flash", causal=0, seqlen_q=seqlen)
    header = [
        "rung",
        "prefill TFLOP/s",
        "causal TFLOP/s",
        "vs 01",
        "vs previous",
        "vs PyTorch flash",
        "decode GB/s",
    ]
    rows = []
    prev_ms = {}
    for l in labels:
        p0 = pick(prefill, rung=l, causal=0, seqlen_q=seqlen)
        p1 = pick(prefill, rung=l, causal=1, seqlen_q=seqlen)
        dec = pick(decode, rung=l, seqlen_k=decode_sk)
        is_ladder = bool(LABEL_RE.match(l))
        b0 = base.get(0)
        vs01 = (b0["ms"] / p0["ms"]) if (is_ladder and b0 and p0 and not l.startswith("01_")) else None
        vsprev = (prev_ms[0] / p0["ms"]) if (is_ladder and p0 and prev_ms.get(0)) else None
        if is_ladder and p0:
            prev_ms[0] = p0["ms"]
        rows.append(
            [
                rung_cell(l),
                fmt_value(p0["tflops"]) if p0 else "—",
                fmt_value(p1["tflops"]) if p1 else "—",
                fmt_ratio(vs01),
                fmt_ratio(vsprev),
                fmt_ratio(flash["ms"] / p0["ms"]) if (is_ladder and flash and p0) else "—",
                fmt_value(dec["gbps"]) if dec else "—",
            ]
        )
    shape = (
        "Prefill: head_dim 128, seqlen %s, batch x seqlen = 16k tokens, 16 heads (speedups on the "
        "non-causal column). Decode: batch 1, 32 query / 8 KV heads, head_dim 128, seqlen_k %s."
        % (seqlen_text(seqlen), seqlen_text(decode_sk))
    )
    where = "Measured on %s, %s, commit `%s`" % (
        ctx.get("device", "?"),
        str(ctx.get("date", "?"))[:10],
        ctx.get("git_sha", "?"),
    )
    if link:
        where += "; every shape and ratio: [%s](%s)" % (link, link)
    return "\n".join([markdown_table(header, rows), "", shape + " " + where + "."]) + "\n"


def replace_block(text, block):
    b, e = text.find(BEGIN_MARK), text.find(END_MARK)
    if b < 0 or e < 0 or e < b:
        raise ValueError("no %s ... %s block" % (BEGIN_MARK, END_MARK))
    return text[: b + len(BEGIN_MARK)] + "\n" + block + text[e:]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("ladder", help="ladder_bench JSON (Google Benchmark format)")
    ap.add_argument("--torch", help="torch_sdpa.py JSON from the same GPU (optional)")
    ap.add_argument("--out", help="markdown report to write (default: standard output)")
    ap.add_argument("--variants", action="store_true", help="list rung variants too (ablations, sweeps)")
    ap.add_argument("--readme", help="replace the BENCH-TABLE block of this file with the summary table")
    ap.add_argument(
        "--link", help="with --readme: path of the full report to link (relative to the README)"
    )
    args = ap.parse_args(argv)
    try:
        if args.readme:
            with open(args.readme, encoding="utf-8") as f:
                text = f.read()
            new = replace_block(text, summary_table(args.ladder, args.torch, args.link))
            with open(args.readme, "w", encoding="utf-8") as f:
                f.write(new)
            print("report.py: updated the bench table in %s" % args.readme)
            if not args.out:
                return 0
        report = full_report(args.ladder, args.torch, args.variants)
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
