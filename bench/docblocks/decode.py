"""Decode's blocks (rung 08 and the rungs before it at seqlen_q 1): the decode table against the fastest
earlier rung and PyTorch, the variants, the split-KV study and the paged KV cache."""

import glob
import json
import re
import statistics

import results_io
from .core import Missing, earlier_fastest, generator, labels_of, link, measured_line, ms, ratio_text, results_folder


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
        rows.append(["%d, 32/%d, %s" % (b, hkv, results_io.seqlen_text(sk)), "%.4f" % r["ms"], results_io.fmt_value(r["gbps"]),
                     "`%s` %s" % (results_io.short(e[0]), results_io.fmt_value(e[1]["gbps"])) if e else "—",
                     ratio_text(e[1], r) if e else "—", results_io.fmt_value(cu["gbps"]) if cu else "—",
                     results_io.fmt_value(fl["gbps"]) if fl else "—", ratio_text(cu, r), ratio_text(fl, r)])
    head = ["B, heads q/kv, Sk", "`%s` ms" % results_io.short(label), "GB/s", "fastest earlier rung, GB/s",
            "speedup", "cuDNN GB/s", "FA2 GB/s", "vs cuDNN", "vs FA2"]
    out = results_io.markdown_table(head, rows) + "\n\n" + measured_line(
        res, ", fp16, head_dim 128, seqlen_q 1, GB/s of Q, K, V read once and O written once")
    earlier = sorted(l for l, e in ctx.info.items() if not e["variant"] and e["number"] < results_io.number_of(label))
    ran = sorted({r["rung"] for r in res.records if r["family"] == "decode" and r["rung"] in earlier})
    if ran != earlier:
        out += " The earlier rungs measured on this GPU: %s (not all: the fastest earlier rung is the " \
               "fastest of these)." % ", ".join("`%s`" % results_io.short(l) for l in ran)
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
            rows.append(["`%s`" % l] + [results_io.fmt_value(c["gbps"]) if c else "—" for c in cells])
    if len(rows) < 2:
        raise Missing("the variants of %s in the decode family" % label,
                      "bench/run_all.sh --family decode -- --fl_variants")
    return results_io.markdown_table(["entry"] + ["Sk=" + results_io.seqlen_text(x) for x in sks], rows) + "\n\n" + \
        measured_line(res, ", batch %d, 32/%d heads, head_dim 128, GB/s" % (b, hkv))


@generator("decode-fp8")
def gen_decode_fp8(ctx, folders, rung="8"):
    """Rung 08's e4m3 cache against its 16-bit cache (family decode-fp8): one row per (dtype,
    batch, pages), one column per seqlen_k, each cell the 16-bit time over the e4m3 time and the
    e4m3 time. @p folders: the results folders of the runs (one per dtype), comma-separated."""
    label = labels_of(ctx, [int(rung)])[0]
    fp8 = label + "[fp8-kv]"
    rows, lines, sks = [], [], None
    for folder in folders.split(","):
        res = results_folder(ctx, folder, "the decode-fp8 family", "bench/run_all.sh --family decode-fp8")
        recs = [r for r in res.records if r["family"] == "decode-fp8"]
        if not recs:
            raise Missing("the decode-fp8 family in bench/results/%s" % folder, "bench/run_all.sh --family decode-fp8")
        sks = sorted({r["seqlen_k"] for r in recs})
        dtype = res.ctx.get("dtype", "?")
        for b, page in sorted({(r["batch"], r["page_size"]) for r in recs}):
            cells = []
            for sk in sks:
                want = dict(family="decode-fp8", batch=b, page_size=page, seqlen_k=sk)
                a, f = res.find(rung=label, **want), res.find(rung=fp8, **want)
                cells.append("%.2f× (%s)" % (a["ms"] / f["ms"], ms(f["ms"])) if a and f else "—")
            rows.append(["%s, %d, %s" % (dtype, b, "contiguous" if page == 0 else "pages of %d" % page)] + cells)
        lines.append(measured_line(res, ", %s" % dtype))
    head = ["dtype, batch, cache"] + ["Sk=" + results_io.seqlen_text(x) for x in sks]
    return results_io.markdown_table(head, rows) + "\n\n" + \
        "Each cell: the 16-bit cache's time over the e4m3 cache's (above 1: the e4m3 cache is faster), and the " \
        "e4m3 cache's time; 32 query and 8 KV heads, head_dim 128, seqlen_q 1. " + " ".join(lines)


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
        cells = [results_io.seqlen_text(sk)]
        for c in counts:
            v = fixed.get(c)
            cells.append("—" if v is None else ("**%s**" if c == best else "%s") % results_io.fmt_value(v))
        h = runs.get((sk, 0))
        cells.append("%s (%d)" % (results_io.fmt_value(h[0]), h[1]) if h else "—")
        rows.append(cells)
    head = ["seqlen_k"] + [str(c) for c in counts] + ["heuristic (splits)"]
    b, hq, hkv, d = shape
    return results_io.markdown_table(head, rows) + "\n\nGB/s of K and V, batch %d, %d/%d heads, head_dim %d, by " \
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
        cells = [results_io.seqlen_text(sk)]
        for pg in pages:
            r = next((x for x in recs if x["seqlen_k"] == sk and x["page_size"] == pg), None)
            if r is None:
                cells.append("—")
            elif pg == 0 or base is None:
                cells.append(results_io.fmt_value(r["gbps"]))
            else:
                cells.append("%s (%.2f)" % (results_io.fmt_value(r["gbps"]), base["ms"] / r["ms"]))
        rows.append(cells)
    head = ["seqlen_k"] + ["contiguous" if p == 0 else "%d-token pages" % p for p in pages]
    return results_io.markdown_table(head, rows) + "\n\n" + measured_line(
        res, ", GB/s of K and V (in brackets: paged / contiguous)")


AB_COMMAND = ("python3 bench/studies/rung08_paged_ab.py build/before/bin/08_flash_decoding build/release/bin/08_flash_decoding "
              "bench/results/<gpu>/<folder>/ab.json > bench/results/<gpu>/<folder>/ab.log")


@generator("rung08-paged-ab")
def gen_rung08_paged_ab(ctx, gpu=None, change="the change"):
    """Rung 08's paged loader before and after a change (bench/studies/rung08_paged_ab.py's ab.json in
    folder @p gpu, and its run2/ab.json when there): per shape and page size the paged cache's speed
    over the contiguous cache's, before and after, in each run."""
    res = results_folder(ctx, gpu, "ab.json", AB_COMMAND)
    if not res.has("ab.json"):
        raise Missing("ab.json in bench/results/%s" % res.gpu, AB_COMMAND)
    runs = [res.json("ab.json")] + ([res.json("run2/ab.json")] if res.has("run2/ab.json") else [])

    per_run = [_paged_ab_ratios(r) for r in runs]
    rows = []
    for key in sorted(per_run[0], key=lambda k: ([r["shape"] for r in runs[0]["rows"]].index(k[0]),
                                                -int(k[1].replace("page", "")))):
        row = [key[0], key[1].replace("page", "")] + ["%.3f" % x for x in per_run[0][key]]
        if len(per_run) > 1 and key in per_run[1]:
            row.append("%.3f, %.3f" % per_run[1][key])
        rows.append(row)
    head = ["shape", "page size", "before %s" % change, "after"] + (["second run: before, after"]
                                                                   if len(per_run) > 1 else [])
    meta = res.meta
    iters = re.search(r"median of (\d+) launches", runs[0].get("note", ""))
    note = ("Paged speed over contiguous speed (contiguous ms / paged ms) within each build: 32/8 heads of 128, "
            "fp16, causal where there are several queries, pages shuffled in the pool; each the median of %d "
            "rounds (the builds interleaved) of the runner's median of %s launches. Measured on %s, %s, the tree "
            "of commit `%s`; %s." % (len(runs[0]["rows"][0]["old_ms"]), iters.group(1) if iters else "?",
                                     meta.get("device", "?"),
                                     str(meta.get("date", "?"))[:10], meta.get("git_sha", "?"),
                                     link(res, "ab.json")))
    return results_io.markdown_table(head, rows) + "\n\n" + note


@generator("rung08-paged-ab-text")
def gen_rung08_paged_ab_text(ctx, gpu=None):
    """The sentence on rung 08's paged loader before and after a change, from the same ab.json as
    rung08-paged-ab (its first run): 16 queries against 16k and 64k keys at pages of 256 and 16, the span
    of the decode step and 4 queries, and what 16 queries against 64k keys at pages of 256 still cost."""
    res = results_folder(ctx, gpu, "ab.json", AB_COMMAND)
    if not res.has("ab.json"):
        raise Missing("ab.json in bench/results/%s" % res.gpu, AB_COMMAND)
    r = _paged_ab_ratios(res.json("ab.json"))

    def move(shape, page):
        old, new = r[(shape, "page%d" % page)]
        return "from %.2f× to %.2f×" % (old, new)

    rest = [x for k, v in r.items() if not k[0].startswith("16q") for x in v]
    return ("16 queries against 16k keys went %s of contiguous at pages of 256 and %s at pages of 16, "
            "and against 64k keys %s and %s; a decode step and 4 queries stayed at %.2f× to %.2f×, the "
            "contiguous loader's PTX unchanged. What keeps 16 queries against 64k keys at %.2f× is not profiled."
            % (move("16q 16k causal", 256), move("16q 16k causal", 16), move("16q 64k causal", 256),
               move("16q 64k causal", 16), min(rest), max(rest), r[("16q 64k causal", "page256")][1]))


def _copy_budget(ctx, gpu):
    """(device, copy GB/s, SMs, clock MHz) from the GPU's ceilings.json (bench/ceilings.cu)."""
    res = ctx.results(gpu)
    if not res.has("ceilings.json"):
        raise Missing("ceilings.json on %s" % res.gpu, "bench/run_all.sh (step 0: build/release/bin/ceilings)")
    c = results_io.load_ceilings(res.path("ceilings.json"))
    copy = [v for what, v, unit, note in c.values() if what == "device copy" and v]
    if not copy:
        raise Missing("the device copy ceiling in ceilings.json on %s" % res.gpu, "build/release/bin/ceilings")
    dev = res.json("ceilings.json")["device"]
    return dev, copy[0], dev["sms"], dev["clock_mhz"]


def _about(x, digits=-2):
    """x rounded to 10^-digits, with a thousands separator: 2857 -> '2,900', (360.7, -1) -> '360'."""
    return "{:,}".format(int(round(x, digits)))


WORDS = {1: "about as much as", 2: "about twice", 3: "about three times", 4: "about four times"}


@generator("decode-littles-law")
def gen_decode_littles_law(ctx, gpu=None, latency_us="1", inflight_kib="64"):
    """Little's law for rung 08 from the GPU's measured device-copy bandwidth (ceilings.json): the bytes
    that must be in flight at an assumed loaded DRAM latency, per GPU and per SM, against a CTA's
    @p inflight_kib KiB."""
    dev, gbps, sms, _ = _copy_budget(ctx, gpu)
    flight = gbps * 1e9 * float(latency_us) * 1e-6
    need = flight / sms
    times = int(inflight_kib) * 1024 / need
    return ("Take the %s's measured copy bandwidth, ~%.3g TB/s (the `ceilings` block under \"Measured\"; the "
            "datasheet peak is %.3g TB/s), and, as an assumption, ~%s µs of loaded DRAM latency: then ~%.2g MB "
            "must be requested and not yet arrived at any moment, ~%.0f KB per SM. A CTA of rung 08 keeps 2 "
            "chunks of 8 KiB in flight per warp, 4 warps: **%s KiB per CTA**, %s that need."
            % (dev["name"].replace("NVIDIA ", "").split(" ")[0], gbps / 1000, dev["peak_gbps"] / 1000, latency_us,
               flight / 1e6, need / 1e3, inflight_kib, WORDS.get(round(times), "about %.0f times" % times)))


@generator("decode-chunk-budget")
def gen_decode_chunk_budget(ctx, gpu=None, chunk_kib="8"):
    """The time an SM has per chunk of @p chunk_kib KiB at the GPU's measured device-copy bandwidth
    (ceilings.json), in ns, cycles at its clock and issue slots of its 4 schedulers."""
    dev, gbps, sms, mhz = _copy_budget(ctx, gpu)
    ns = int(chunk_kib) * 1024 / (gbps / sms)
    return ("The other half of the budget is time: at the same ~%.3g TB/s an SM must consume an %s KiB chunk "
            "every %s KiB / (%.3g TB/s / %d) ≈ %s ns, ≈ %s cycles at %.3g GHz, ≈ %s issue slots of its 4 "
            "schedulers." % (gbps / 1000, chunk_kib, chunk_kib, gbps / 1000, sms, _about(ns, -1),
                             _about(ns * mhz / 1000), mhz / 1000, _about(ns * mhz / 1000 * 4)))


def _paged_ab_ratios(run):
    """{(shape, layout): (before, after)}: the paged cache's speed over the contiguous cache's in one
    run of bench/studies/rung08_paged_ab.py (medians over its rounds)."""
    med = {(r["shape"], r["layout"]): (statistics.median(r["old_ms"]), statistics.median(r["new_ms"]))
           for r in run["rows"]}
    return {k: (med[(k[0], "contiguous")][0] / v[0], med[(k[0], "contiguous")][1] / v[1])
            for k, v in med.items() if k[1] != "contiguous" and (k[0], "contiguous") in med}
