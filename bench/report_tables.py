"""The report's tables, one family group at a time: the groups (family_groups) and their titles,
the grid of times (Grid: series x shape, ratios, each entry's declared baselines resolved per
shape), and the rows and sections that bench/report.py puts in report.md (family_section,
backward_section, masks_section, mla_decode_section; mla_decode_table is also the docs' gen:mla-decode
block). Records come from bench/results_io.py.
"""

from results_io import (  # bench/results_io.py: the records' families and the shared formatting
    BACKWARD_FAMILIES, FAMILIES, LABEL_RE, MASK_FAMILIES, SEQLEN_FAMILIES, TORCH_ORDER, fmt_ratio,
    fmt_value, is_main, markdown_table, number_of, rung_order, seqlen_text, short, x_of)

MLA_PREFILL_NOTES = {
    "mla-prefill": "the forward pass alone (the backward pass: the mla-prefill-backward family)",
    "mla-prefill-backward": ("the backward pass alone (rung 16's backward entry: rung 14's kernel on the d = 256 "
                             "tiles, V's and dO's maps at 128 columns; SDPA's torch.autograd.grad after one "
                             "forward under the backend), TFLOP/s 2.5 x the forward's FLOPs (FlashAttention's "
                             "convention)"),
}


# ---- groups and grids ----------------------------------------------------------------------------


def family_groups(records):
    """{(family, key): [records]}: key (head_dim, causal) for prefill, fp8, backward and mla-prefill,
    (batch, heads_kv, head_dim) for decode and paged, causal for ablation, heads for mla-decode."""
    groups = {}
    for r in records:
        if r["family"] in SEQLEN_FAMILIES:
            key = (r["head_dim"], r["causal"])
        elif r["family"] in MASK_FAMILIES:  # every case in one table, a column each
            key = (r["head_dim"],)
        elif r["family"] == "ablation":
            key = (r["causal"],)
        elif r["family"] == "mla-decode":  # one table per heads count, a row per shape
            key = (r["heads_q"],)
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
    if family in ("mla-prefill", "mla-prefill-backward"):
        d, causal = key
        return (
            "MLA prefill%s, head_dim %d (V and O %d), %s" % (", backward" if family.endswith("backward") else "", d,
                                                            r.get("head_dim_v") or d,
                                                            "causal" if causal else "not causal"),
            "batch x seqlen = %d tokens, %d heads (DeepSeek-V3's 128 over 8 GPUs); the %s that take "
            "V's own head_dim beside PyTorch SDPA on the same q, k, v (`bench/pytorch/torch_mla.py`; flash takes no "
            "V head_dim of its own); TFLOP/s = 2 x pairs x (%d + %d)%s, unmasked pairs only; %s"
            % (r["batch"] * r["seqlen_q"], r["heads_q"],
               "backward entries" if family.endswith("backward") else "forward rungs", d, r.get("head_dim_v") or d,
               " x 2.5" if family.endswith("backward") else "", MLA_PREFILL_NOTES[family]),
        )
    if family == "mla-decode":
        return (
            "MLA decode, %d heads" % key[0],
            "rung 17 on the latent cache (one 576-dim row per key, V its first 512 columns, pages of 64 keys), "
            "bf16 as run; SDPA on the decompressed cache of the same step (per head K = [c W_uk | k_rope] 192, "
            "V = c W_uv 128: `bench/pytorch/torch_mla.py`), its fastest backend that ran. Sq 2 is causal "
            "(bottom-right)",
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
        gqa = family != "backward"
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
    if family == "decode-fp8":
        return (
            "FP8 KV cache, batch %d, %d KV heads" % (b, hkv),
            "seqlen_q 1, %d query heads, head_dim %d; rung 08's e4m3 cache (`fp8-kv`, made once outside the "
            "time) beside its 16-bit cache, contiguous (P=0) and in pages of P tokens; GB/s of K and V as "
            "stored (one byte per element for e4m3)" % (r["heads_q"], d),
        )
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
    if r["family"] in ("paged", "decode-fp8"):
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


def best_torch(records, want):
    """The fastest PyTorch record (no error) of the shape @p want (field: value), or None."""
    recs = [r for r in records if r["source"] == "torch" and not r["error"] and r["ms"]
            and all(r.get(k) == v for k, v in want.items())]
    return min(recs, key=lambda r: r["ms"]) if recs else None


def backend_of(label):
    """ "torch_cudnn" -> "cuDNN" (a PyTorch record's backend, as the tables name it)."""
    name = label[len("torch_"):] if label.startswith("torch_") else label
    return {"cudnn": "cuDNN", "flash": "flash", "efficient": "efficient", "math": "math"}.get(name, name)


def mla_decode_table(records, floors, heads=None, seqlens_q=None, batches=None, seqlens_k=None):
    """The MLA decode table (report.md's mla-decode sections and the docs' gen:mla-decode): one row
    per (heads, seqlen_q, batch, seqlen_k) a ladder entry ran (filtered by the optional lists), with
    its time, TFLOP/s and GB/s beside the two floors' rates (@p floors: results_io.rate_ceilings;
    % of each), the floor's time (FLOPs / tensor rate or bytes / HBM rate, the larger: the bound it
    names), and SDPA on the decompressed cache: its fastest backend's time and the rung's speedup.
    Returns (header, rows) for markdown_table; rows [] when nothing matches."""
    tf, bw = floors.get("tflops"), floors.get("gbps")
    ladder = [r for r in records if r["family"] == "mla-decode" and r["source"] == "ladder" and not r["error"]
              and is_main(r["rung"])]
    keep = lambda v, allowed: not allowed or v in allowed  # noqa: E731
    ladder = [r for r in ladder if keep(r["heads_q"], heads) and keep(r["seqlen_q"], seqlens_q)
              and keep(r["batch"], batches) and keep(r["seqlen_k"], seqlens_k)]
    ladder.sort(key=lambda r: (r["heads_q"], r["seqlen_q"], r["batch"], r["seqlen_k"], rung_order([r["rung"]])))
    several = len({r["rung"] for r in ladder}) > 1
    rows = []
    for r in ladder:
        ms = r["ms"]
        # The record's rates times its time give its FLOPs and bytes (ladder_bench's definitions).
        c_ms = r["tflops"] * ms / tf if tf and r["tflops"] else None
        m_ms = r["gbps"] * ms / bw if bw and r["gbps"] else None
        bound = "—"
        if c_ms is not None and m_ms is not None:
            bound = "%.4f (%s)" % (max(c_ms, m_ms), "compute" if c_ms >= m_ms else "memory")
        want = dict(family="mla-decode", batch=r["batch"], heads_q=r["heads_q"], seqlen_q=r["seqlen_q"],
                    seqlen_k=r["seqlen_k"])
        t = best_torch(records, want)
        cells = [str(r["heads_q"]), str(r["seqlen_q"]), str(r["batch"]), seqlen_text(r["seqlen_k"])]
        if several:
            cells.append(rung_cell(r["rung"]))
        floor = max(c_ms, m_ms) if c_ms is not None and m_ms is not None else None
        cells += ["%.4f" % ms, fmt_value(r["tflops"]), "%.0f %%" % (100 * r["tflops"] / tf) if tf else "—",
                  fmt_value(r["gbps"]), "%.0f %%" % (100 * r["gbps"] / bw) if bw else "—", bound,
                  fmt_ratio(floor / ms) if floor else "—",
                  "%.4f %s" % (t["ms"], backend_of(t["rung"])) if t else "—",
                  fmt_ratio(t["ms"] / ms) if t else "—"]
        rows.append(cells)
    header = ["heads", "Sq", "B", "Sk"] + (["rung"] if several else []) + [
        "ms", "TFLOP/s", "of tensor", "GB/s", "of HBM", "floor ms (bound)", "floor / time",
        "SDPA decompressed ms", "speedup"]
    return header, rows


def mla_decode_floor_note(floors):
    """The sentence under an MLA decode table: what the floors are and where their rates come from."""
    tf, bw = floors.get("tflops"), floors.get("gbps")
    return ("Floors: FLOPs = 2 x (query, key) pairs of every row and head x (576 + 512) at %s; bytes = the "
            "latent cache read once (576 x 2 per key) at %s. \"floor ms\" is the larger of the two times, named "
            "by its bound; \"floor / time\" is how close the rung comes to it. SDPA: q [B, H, Sq, 192] on K "
            "[B, H, N, 192] and V [B, H, N, 128], the decompressed cache (H x 320 x 2 bytes per key: 71x the "
            "latent row at 128 heads), its fastest backend that ran; speedup = its time / the rung's."
            % ("%s TFLOP/s, %s" % (fmt_value(tf), floors.get("tflops_what")) if tf else "no tensor rate",
               "%s GB/s, %s" % (fmt_value(bw), floors.get("gbps_what")) if bw else "no HBM rate"))


def torch_refusals(records, family):
    """ "flash: <first reason> (12 shapes); ..." of the PyTorch records of @p family that did not run."""
    out = {}
    for r in records:
        if r["family"] == family and r["source"] == "torch" and r["error"]:
            out.setdefault((r["rung"], r["error"]), []).append(r)
    return "; ".join("%s: %s (%d shape%s)" % (backend_of(l), why, len(v), "s" if len(v) > 1 else "")
                     for (l, why), v in sorted(out.items()))


def mla_decode_section(key, records, floors=None):
    """The mla-decode family at one heads count: mla_decode_table and its note, and the SDPA backends
    that refused."""
    title, sub = group_title("mla-decode", key, records)
    header, rows = mla_decode_table(records, floors or {}, heads=[key[0]])
    out = ["## %s" % title, "", sub + ".", ""]
    if rows:
        out += [markdown_table(header, rows), "", mla_decode_floor_note(floors or {}), ""]
    refused = torch_refusals([r for r in records if r["heads_q"] == key[0]], "mla-decode")
    if refused:
        out += ["SDPA backends that did not run: %s." % refused, ""]
    return "\n".join(out)


def best_torch_rows(g, labels, records):
    """One row per ladder entry: time of the fastest PyTorch backend that ran each shape / time of the
    entry, with the backend named (the MLA prefill, where SDPA's backends differ by shape)."""
    rows = []
    for l in labels:
        cells = []
        for x in g.xs:
            ms = g.ms.get((l, x))
            t = min(((g.ms[(t, x)], t) for t in g.labels if t.startswith("torch_") and (t, x) in g.ms), default=None)
            cells.append("%s vs %s" % (fmt_ratio(t[0] / ms), backend_of(t[1])) if ms and t else "—")
        if any(c != "—" for c in cells):
            rows.append([rung_cell(l)] + cells)
    return rows


def family_section(family, key, records, include_variants, registry=None, floors=None):
    if family in BACKWARD_FAMILIES:
        return backward_section(key, records, include_variants, family)
    if family in MASK_FAMILIES:
        return masks_section(family, key, records, include_variants, registry)
    if family == "mla-decode":
        return mla_decode_section(key, records, floors)
    g = Grid(records, registry)
    labels = [l for l in g.labels if include_variants or not LABEL_RE.match(l) or is_main(l)]
    if family in ("prefill", "decode", "fp8"):  # a variant that is a main's baseline is shown with it
        wanted = {b["label"] for m in g.mains for b in g.baselines(m) if b["kind"] == "rung"}
        labels = [l for l in g.labels if l in labels or l in wanted]
    title, sub = group_title(family, key, records)
    out = ["## %s" % title, "", sub + ".", ""]
    header = ["rung"] + [x_text(family, x) for x in g.xs]
    unit = "TFLOP/s" if family in ("prefill", "ablation", "fp8", "hopper-prefill", "llama", "mla-prefill",
                                   "mla-prefill-backward") else "GB/s"
    out += ["**%s**" % unit, "", markdown_table(header, [[rung_cell(l)] + value_cells(g, l) for l in labels]), ""]
    ladder = [l for l in labels if LABEL_RE.match(l)]
    if family == "decode-fp8":
        rows = []
        for l in labels:
            rung, page = l.split(" P=")
            if not rung.endswith("[fp8-kv]"):
                continue
            base = rung[:-len("[fp8-kv]")] + " P=" + page
            rows.append([rung_cell(l)] + [fmt_ratio(g.ratio(base, l, x)) for x in g.xs])
        if rows:
            out += ["**e4m3 / 16-bit** (time of the 16-bit cache / time of the e4m3 cache, same pages: above 1 = "
                    "the e4m3 cache is faster)", "", markdown_table(header, rows), ""]
        return "\n".join(out)
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
    if family in ("mla-prefill", "mla-prefill-backward"):
        rows = best_torch_rows(g, ladder, records)
        if rows:
            out += ["**Ratio to the fastest PyTorch SDPA backend that ran** (its time / time of the rung: above 1 = "
                    "the rung is faster)", "", markdown_table(header, rows), ""]
        refused = torch_refusals(records, family)
        if refused:
            out += ["SDPA backends that did not run: %s." % refused, ""]
    return "\n".join(out)
