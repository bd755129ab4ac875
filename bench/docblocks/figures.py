"""The figures of the docs: SVG files under docs/figures/, drawn from the committed results.

Each entry of core.FIGURES is (name, output path, generator, params); `docgen.py --write` writes
every file and `--check` fails, naming it, when a committed SVG differs from what the committed
results draw (core.figure_files). The SVG is written by svg.py in plain Python, so the same
results give the same bytes: fixed fonts and sizes, fixed precision, sorted iteration, no dates
but the run's own. Every figure carries a <title> and a caption line (GPU, date, commit and folder
of the run it plots); a README embeds it with one image line.

    climb     TFLOP/s per rung at one prefill shape, with PyTorch SDPA's cuDNN and flash lines
    roofline  every rung by arithmetic intensity, under the measured ceilings (ceilings.json)
    rung14    rung 14's backward over cuDNN's as a heatmap (head_dim x causal x seqlen, MHA, GQA)
    bwd-kernels  the same heatmap kernel against kernel, from torch_bwd_profile.py's grid
    decode    decode bandwidth against seqlen_k: rung 08, PyTorch's backends, the HBM ceilings
    ring      rung 12's scaling efficiency, forward + backward, per P and length
"""

import math

import results_io
from . import svg
from .core import FIGURES, PRIMARY, Missing, results_folder

SWEEP = "nvidia-h200/sweep"  # the one-commit sweep of every rung that the README's summary reads
SWEEP_COMMAND = "bench/run_all.sh"
TORCH_LINES = (("torch_cudnn", "PyTorch SDPA cuDNN", svg.BLUE), ("torch_flash", "PyTorch SDPA flash", svg.VERMILLION))
# The colour of a rung by the peak it is measured against (the registry's "peak").
PEAK_COLOURS = (("fp32_fma", svg.ORANGE, "CUDA cores (fp32 FMA)"), ("tensor_16bit", svg.BLUE, "tensor cores, 16-bit"),
                ("tensor_fp8", svg.PURPLE, "tensor cores, FP8"), ("memory", svg.GREEN, "HBM bandwidth (decode)"))
OTHER_COLOUR = svg.YELLOW


def register(name, path, fn, **params):
    FIGURES.append((name, path, placeholder_on_missing(name, fn), params))


def placeholder_on_missing(name, fn):
    """@p fn, or when its data is in no committed run, a small SVG that says so and names the
    command that measures it (as a generated block does): never a figure from elsewhere."""

    def draw(ctx, **params):
        try:
            return fn(ctx, **params)
        except Missing as m:
            s = svg.Svg(720, 90, "%s: not in a committed run yet" % name)
            s.text(16, 36, "Not in a committed run yet: %s." % m.what, 13)
            s.text(16, 60, "%s measures it; then python3 bench/docgen.py --write draws this figure." % m.command, 12)
            return s.render()

    return draw


def caption(svgf, y, text):
    svgf.text(16, y, text, 11, colour="#444444")


def run_caption(res):
    """ "NVIDIA H100 80GB HBM3, 2026-11-26, commit 3f79aa1c427d; data: bench/results/<folder>/" of a
    bench run (its ladder context)."""
    c = res.ctx
    return "%s, %s, commit %s; data: %s" % (c.get("device", "?"), str(c.get("date", "?"))[:10],
                                           str(c.get("git_sha", "?"))[:12], res.rel(""))


def number_of(label):
    return int(label.split("_", 1)[0])


def rung_name_lines(label):
    """ "10_warp_specialized" -> "10\\nwarp\\nspecialized" (tick labels)."""
    num, name = label.split("_", 1)
    words = name.split("_")
    if len(words) > 2:
        words = [words[0], " ".join(words[1:])]
    return "\n".join([num] + words)


def peak_colour(ctx, label):
    peak = ctx.info.get(label, {}).get("peak")
    return next((c for p, c, _ in PEAK_COLOURS if p == peak), OTHER_COLOUR)


def ceilings_of(res):
    if not res.has("ceilings.json"):
        raise Missing("ceilings.json in %s" % res.rel(""), "bench/run_all.sh (its ceilings step)")
    return results_io.load_ceilings(res.path("ceilings.json"))


def label_column(svgf, points, x_text, gap, lo, hi, size=10):
    """Labels (y, text, colour) beside a column of points, pushed apart and joined to their point
    by a thin line where they moved."""
    ys = svg.spread([p[0] for p in points], gap, lo, hi)
    for (y, text, colour), ly in zip(points, ys):
        if abs(ly - y) > 1.5:
            svgf.line(x_text - 10, y, x_text - 2, ly - 3, "#999999", 0.6)
        svgf.text(x_text, ly + 1, text, size, colour=colour, halo=True)


# ---- the climb ------------------------------------------------------------------------------------


def ladder_groups(records):
    """(forward rungs, fp8 rungs, backward rungs) of a run as the README's summary groups them
    (report.summary_table): a forward rung is measured outside the backward and fp8 families."""
    not_forward = results_io.BACKWARD_FAMILIES + ("fp8", "masks-backward")
    forward = {r["rung"] for r in records if r["family"] not in not_forward}
    fp8 = {r["rung"] for r in records if r["family"] == "fp8"} - forward
    backward = {r["rung"] for r in records if r["family"] == "backward"} - forward
    keep = lambda s: {l for l in s if results_io.LABEL_RE.match(l) and results_io.is_main(l)}  # noqa: E731
    return keep(forward), keep(fp8), keep(backward)


def fig_climb(ctx, gpu=SWEEP, d="128", n="4096"):
    """TFLOP/s of every rung at one prefill shape (log scale), not causal and causal, the backward
    rungs' backward pass, and PyTorch SDPA's cuDNN and flash on the same shapes in the same run."""
    res = results_folder(ctx, gpu, "the ladder sweep", SWEEP_COMMAND)
    d, n = int(d), int(n)
    recs = res.records
    forward, fp8, backward = ladder_groups(recs)

    def at(family, label, causal):
        want = dict(family=family, rung=label, head_dim=d, seqlen_q=n, causal=causal)
        if family == "backward":
            want["deterministic"] = 0
        return res.find(**want)

    points = {}  # label -> {series: record}
    for label in forward | fp8 | backward:
        if label in backward:
            p = {"bwd": at("backward", label, 0)}
        else:
            fam = "fp8" if label in fp8 else "prefill"
            p = {"fwd": at(fam, label, 0), "causal": at(fam, label, 1)}
        p = {k: v for k, v in p.items() if v}
        if p:
            points[label] = p
    if not points:
        raise Missing("prefill records at head_dim %d, seqlen %d in %s" % (d, n, res.rel("")), SWEEP_COMMAND)
    labels = sorted(points, key=lambda l: (number_of(l), l))
    lines = []  # (value, text, colour, dash)
    for fam, what in (("prefill", "forward"), ("backward", "backward")):
        if fam == "backward" and not any("bwd" in p for p in points.values()):
            continue
        for tl, name, colour in TORCH_LINES:
            r = res.find(family=fam, rung=tl, head_dim=d, seqlen_q=n, causal=0)
            if r:
                style = {("torch_cudnn", "prefill"): None, ("torch_cudnn", "backward"): "2,3",
                         ("torch_flash", "prefill"): "7,4", ("torch_flash", "backward"): "7,3,2,3"}[(tl, fam)]
                lines.append((r["tflops"], "%s %s %s" % (name.split()[-1], what, results_io.fmt_value(r["tflops"])),
                              colour, style))
    vals = [r["tflops"] for p in points.values() for r in p.values() if r] + [v for v, _, _, _ in lines]
    W, H = 960, 570
    box = (80, 50, W - 150, H - 150)
    lo = 10.0 ** math.floor(math.log10(min(vals)))
    hi = max(vals) * 1.5  # room for the top point's value
    ys = svg.Scale(lo, hi, box[3], box[1], log=True)
    xs = svg.Scale(-0.6, len(labels) - 0.4, box[0], box[2])
    title = "The ladder's climb: TFLOP/s per rung, head_dim %d, seqlen %s, fp16" % (d, results_io.seqlen_text(n))
    s = svg.Svg(W, H, title, "TFLOP/s of each rung at one prefill shape against PyTorch SDPA's cuDNN and flash "
                "backends on the same shape in the same run (log scale).")
    s.text(box[0], 30, title, 16, bold=True)
    svg.frame(s, box, xs, ys, "rung", "TFLOP/s (log scale)",
              xticks=[(i, rung_name_lines(l)) for i, l in enumerate(labels)])
    # PyTorch's lines across the plot, their labels in the right margin.
    for v, text, colour, dash in lines:
        s.line(box[0], ys(v), box[2], ys(v), colour, 1.6, dash=dash)
    if lines:
        label_column(s, [(ys(v), text, colour) for v, text, colour, _ in lines], box[2] + 14, 13, box[1], box[3])
    style = {"fwd": ("circle", True, svg.BLACK), "causal": ("triangle", False, svg.BLACK),
             "bwd": ("diamond", True, svg.GREEN)}
    # The climb itself: a thin line through the forward points, under the markers.
    fwd_path = [(xs(i), ys(points[l]["fwd"]["tflops"])) for i, l in enumerate(labels) if "fwd" in points[l]]
    if len(fwd_path) > 1:
        s.polyline(fwd_path, "#999999", 1.0)
    for i, l in enumerate(labels):
        p = points[l]
        for series in ("causal", "fwd", "bwd"):
            r = p.get(series)
            if not r:
                continue
            shape, filled, colour = style[series]
            if series == "fwd":
                colour = svg.PURPLE if l in fp8 else svg.BLACK
            s.marker(xs(i), ys(r["tflops"]), shape, colour, filled, 5)
            if series in ("fwd", "bwd"):
                s.text(xs(i), ys(r["tflops"]) - 10, results_io.fmt_value(r["tflops"]), 10, "middle", colour=colour,
                       halo=True)
    entries = [("marker", svg.BLACK, "forward, not causal (16-bit)", ("circle", True))]
    if fp8:
        entries.append(("marker", svg.PURPLE, "forward, not causal, FP8 (e4m3)", ("circle", True)))
    entries.append(("marker", svg.BLACK, "forward, causal", ("triangle", False)))
    if backward:
        entries.append(("marker", svg.GREEN, "backward pass (2.5 x forward FLOPs)", ("diamond", True)))
    lw, lh = svg.legend_size(entries)
    svg.legend(s, box[2] - lw - 10, box[3] - lh - 10, entries)
    measured = {r["rung"] for r in recs if r["source"] == "ladder" and results_io.is_main(r["rung"])}
    missing = sorted(measured - set(labels), key=lambda l: (number_of(l), l))
    note = ("Batch x seqlen = 16k tokens, hidden 2048; the backward pass alone, not deterministic (dQ summed in any order). Lines: PyTorch SDPA on "
            "the same shapes in the same run.")
    caption(s, H - 44, note)
    if missing:
        caption(s, H - 28, "Not measured at this shape: %s." % ", ".join(missing))
    caption(s, H - 12, run_caption(res))
    return s.render()


# ---- the roofline ---------------------------------------------------------------------------------


def fig_roofline(ctx, gpu=SWEEP, d="128", n="4096", decode="1/8/65536"):
    """Every rung on the roofline: TFLOP/s against arithmetic intensity (FLOPs / the ideal bytes:
    Q, K, V read once and O written once, so the same shape has one intensity whatever the rung),
    at the prefill shape (filled) and the decode shape (hollow), under the measured ceilings: the
    device copy bandwidth and the FFMA, mma.sync and cuBLAS rates of ceilings.json."""
    res = results_folder(ctx, gpu, "the ladder sweep", SWEEP_COMMAND)
    ceil = ceilings_of(res)
    d, n = int(d), int(n)
    b, hkv, sk = (int(x) for x in decode.split("/"))
    forward, fp8, backward = ladder_groups(res.records)
    pts = []  # (ai, tflops, label text, colour, filled, shape)
    for label in sorted(forward | fp8 | backward, key=lambda l: (number_of(l), l)):
        fam = "fp8" if label in fp8 else "backward" if label in backward else "prefill"
        want = dict(family=fam, rung=label, head_dim=d, seqlen_q=n, causal=0)
        if fam == "backward":
            want["deterministic"] = 0
        colour = peak_colour(ctx, label)
        for r, filled in ((res.find(**want), True),
                          (res.find(family="decode", rung=label, batch=b, heads_kv=hkv, seqlen_k=sk), False)):
            if r and r["gbps"]:
                shape = "diamond" if fam == "backward" else "circle"
                pts.append((1000.0 * r["tflops"] / r["gbps"], r["tflops"], label.split("_")[0], colour, filled, shape))
    for tl, name, _ in TORCH_LINES[:1]:
        for r in (res.find(family="prefill", rung=tl, head_dim=d, seqlen_q=n, causal=0),
                  res.find(family="decode", rung=tl, batch=b, heads_kv=hkv, seqlen_k=sk)):
            if r and r["gbps"]:
                pts.append((1000.0 * r["tflops"] / r["gbps"], r["tflops"], "cuDNN", svg.BLACK, False, "square"))
    if not pts:
        raise Missing("prefill and decode records in %s" % res.rel(""), SWEEP_COMMAND)
    bw = ceil["copy_gbps"][1]
    roofs = sorted([(v[1], v[0]) for k, v in ceil.items() if v[2] == "TFLOP/s" and v[1] and "bf16" not in k],
                   reverse=True)
    W, H = 960, 700
    box = (80, 50, W - 200, H - 110)
    xlo = 10.0 ** math.floor(math.log10(min(p[0] for p in pts)))
    xhi = 10.0 ** math.ceil(math.log10(max(p[0] for p in pts)) + 0.3)
    ylo = 10.0 ** math.floor(math.log10(min(p[1] for p in pts)))
    yhi = max([p[1] for p in pts] + [r[0] for r in roofs]) * 3.0  # room for the labels of the top cluster
    xs = svg.Scale(xlo, xhi, box[0], box[2], log=True)
    ys = svg.Scale(ylo, yhi, box[3], box[1], log=True)
    title = "Roofline: every rung under the measured ceilings"
    s = svg.Svg(W, H, title, "TFLOP/s against arithmetic intensity of each rung at one prefill shape and one "
                "decode shape, under the measured copy bandwidth and compute ceilings (log-log).")
    s.text(box[0], 30, title, 16, bold=True)
    svg.frame(s, box, xs, ys, "arithmetic intensity (FLOP per byte of Q, K, V read and O written, log scale)",
              "TFLOP/s (log scale)")
    # The roofs: the bandwidth diagonal up to the highest ceiling, each compute ceiling from its knee.
    top = roofs[0][0] if roofs else yhi
    x_top = min(xhi, 1000.0 * top / bw)
    x0 = max(xlo, 1000.0 * ylo / bw)
    s.line(xs(x0), ys(bw * x0 / 1000.0), xs(x_top), ys(bw * x_top / 1000.0), svg.BLACK, 1.8)
    ang = math.degrees(math.atan2(ys(bw * x_top / 1000.0) - ys(bw * x0 / 1000.0), xs(x_top) - xs(x0)))
    xm = math.sqrt(x0 * x_top) / 3.0
    s.text(xs(xm), ys(bw * xm / 1000.0) - 6, "%s %s GB/s" % (ceil["copy_gbps"][0], results_io.fmt_value(bw)), 11,
           rotate=ang)
    roof_labels = []
    for v, what in roofs:
        knee = 1000.0 * v / bw
        s.line(xs(max(xlo, knee)), ys(v), box[2], ys(v), svg.BLACK, 1.2, dash="6,3")
        roof_labels.append((ys(v), "%s %s" % (what, results_io.fmt_value(v)), svg.BLACK))
    label_column(s, roof_labels, box[2] + 8, 13, box[1], box[3])
    # The points, and their rung numbers in a column beside each cluster of one intensity.
    clusters = {}
    for p in pts:
        clusters.setdefault(round(math.log10(p[0]) * 2), []).append(p)
    for key in sorted(clusters):
        group = clusters[key]
        xr = max(xs(p[0]) for p in group)
        for p in sorted(group, key=lambda p: p[2] != "cuDNN"):  # PyTorch's under the rungs'
            s.marker(xs(p[0]), ys(p[1]), p[5], p[3], p[4], 5)
        label_column(s, [(ys(p[1]) + 3, p[2], p[3]) for p in group], xr + 14, 11, box[1] + 8, box[3] - 2)
    entries = [("marker", c, what, ("circle", True)) for peak, c, what in PEAK_COLOURS
               if any(ctx.info.get(l, {}).get("peak") == peak for l in forward | fp8 | backward)]
    if any(p[3] == OTHER_COLOUR for p in pts):
        entries.append(("marker", OTHER_COLOUR, "another peak", ("circle", True)))
    entries += [("marker", svg.BLACK, "prefill d=%d, %s (filled)" % (d, results_io.seqlen_text(n)), ("circle", True)),
                ("marker", svg.BLACK, "decode B=%d, %d KV heads, %s keys (hollow)" % (
                    b, hkv, results_io.seqlen_text(sk)), ("circle", False)),
                ("marker", svg.BLACK, "PyTorch SDPA cuDNN", ("square", False))]
    if backward:
        entries.append(("marker", svg.BLACK, "backward pass", ("diamond", True)))
    lw, lh = svg.legend_size(entries)
    svg.legend(s, box[2] - lw - 10, box[3] - lh - 10, entries)
    caption(s, H - 28, "Dashed: the measured compute ceilings (bench/ceilings.cu); solid: the measured copy "
                       "bandwidth. A rung's number sits beside its point.")
    caption(s, H - 12, run_caption(res))
    return s.render()


# ---- rung 14's backward against cuDNN -------------------------------------------------------------


def blend(c1, c2, t):
    a = [int(c1[i:i + 2], 16) for i in (1, 3, 5)]
    b = [int(c2[i:i + 2], 16) for i in (1, 3, 5)]
    return "#%02X%02X%02X" % tuple(int(round(x + (y - x) * t)) for x, y in zip(a, b))


def ratio_colour(v, span=0.5):
    """White at 1, towards blue above (faster than the baseline), towards orange below, saturating
    at a ratio of 1 + span or 1 / (1 + span)."""
    t = min(1.0, abs(math.log(v)) / math.log(1.0 + span))
    return blend("#FFFFFF", "#2166AC" if v >= 1 else "#D55E00", 0.85 * t)


def fig_rung14(ctx, gpu=PRIMARY + "/rung14-sweep-fp16", rung="14_hopper_backward", against="torch_cudnn"):
    """Rung 14's backward over cuDNN's on one grid (time of cuDNN / time of the rung: above 1 the
    rung is faster): rows head_dim x causal, columns seqlen, one panel per family (MHA: backward,
    GQA: backward-gqa and backward-gqa8); not deterministic (dQ summed in any order)."""
    res = results_folder(ctx, gpu, "rung 14's backward sweep", "bench/run_all.sh --family backward,backward-gqa")
    panels = []
    for fam, name in (("backward", "MHA"), ("backward-gqa", "GQA"), ("backward-gqa8", "GQA")):
        mine = [r for r in res.records if r["family"] == fam and r["rung"] == rung and not r["deterministic"]]
        if not mine:
            continue
        sub = sorted({(r["heads_q"], r["heads_kv"]) for r in mine})
        rows = sorted({(r["head_dim"], r["causal"]) for r in mine})
        cols = sorted({r["seqlen_q"] for r in mine})
        cells = {}
        for r in mine:
            base = res.find(family=fam, rung=against, head_dim=r["head_dim"], seqlen_q=r["seqlen_q"],
                            causal=r["causal"], heads_kv=r["heads_kv"])
            if base:
                cells[(r["head_dim"], r["causal"], r["seqlen_q"])] = base["ms"] / r["ms"]
        ratio_heads = sorted({q // k for q, k in sub})
        panels.append((name + (" (%s query heads per KV head)" % "/".join(map(str, ratio_heads)) if fam != "backward"
                               else ""), rows, cols, cells))
    if not panels or not any(p[3] for p in panels):
        raise Missing("%s and %s in the backward families in %s" % (rung, against, res.rel("")),
                      "bench/run_all.sh --family backward,backward-gqa")
    return ratio_heatmap(panels, "Rung 14's backward against cuDNN's: time of cuDNN / time of rung 14",
                         "Heatmap of cuDNN's backward time over rung 14's, by head_dim, causal mask and seqlen, for "
                         "MHA and GQA; above 1 rung 14 is faster.",
                         "above 1 (blue): rung 14 faster; below 1 (orange): cuDNN faster; dQ summed in any order",
                         "time of cuDNN / time of rung 14",
                         ["fp16, hidden 2048 (heads = 2048 / head_dim); the backward pass alone; PyTorch SDPA's "
                          "cuDNN backend in the same run.", run_caption(res)])


def ratio_heatmap(panels, title, desc, subtitle, key_text, captions):
    """A heatmap of ratios, one panel per (name, rows (head_dim, causal), cols (seqlen), cells
    {(head_dim, causal, seqlen): ratio}), each cell coloured by ratio_colour and labelled."""
    cw, ch = 64, 34
    left, top = 130, 100
    pw = max(len(p[2]) for p in panels) * cw
    W = max(900, left + len(panels) * pw + (len(panels) - 1) * 70 + 40)
    nrows = max(len(p[1]) for p in panels)
    H = top + nrows * ch + 118 + 16 * len(captions)
    s = svg.Svg(W, H, title, desc)
    s.text(16, 30, title, 16, bold=True)
    s.text(16, 50, subtitle, 12, colour="#444444")
    for k, (name, rows, cols, cells) in enumerate(panels):
        x0 = left + k * (pw + 70)
        s.text(x0 + len(cols) * cw / 2.0, top - 22, name, 13, "middle", bold=True)
        for j, nn in enumerate(cols):
            s.text(x0 + (j + 0.5) * cw, top - 6, results_io.seqlen_text(nn), 11, "middle")
        for i, (dd, c) in enumerate(rows):
            y = top + i * ch
            if k == 0:
                s.text(x0 - 8, y + ch / 2.0 + 4, "d=%d, %s" % (dd, "causal" if c else "not causal"), 11, "end")
            for j, nn in enumerate(cols):
                v = cells.get((dd, c, nn))
                x = x0 + j * cw
                if v is None:
                    s.rect(x, y, cw, ch, "#EEEEEE", "#FFFFFF", 1.0)
                    s.text(x + cw / 2.0, y + ch / 2.0 + 4, "—", 11, "middle", colour="#777777")
                    continue
                fill = ratio_colour(v)
                s.rect(x, y, cw, ch, fill, "#FFFFFF", 1.0)
                dark = abs(math.log(v)) > 0.8 * math.log(1.5)
                s.text(x + cw / 2.0, y + ch / 2.0 + 4, results_io.fmt_ratio(v), 11, "middle",
                       colour="#FFFFFF" if dark else svg.BLACK)
        s.text(x0 + len(cols) * cw / 2.0, top + len(rows) * ch + 20, "seqlen (batch x seqlen = 16k tokens)", 11,
               "middle")
    # The colour key.
    ky = top + nrows * ch + 44
    kx = left + 120
    s.text(kx - 8, ky + 13, key_text, 11, "end")
    for i, v in enumerate((1 / 1.5, 1 / 1.25, 1 / 1.1, 1.0, 1.1, 1.25, 1.5)):
        s.rect(kx + i * 56, ky, 56, 16, ratio_colour(v), "#BBBBBB", 0.5)
        s.text(kx + i * 56 + 28, ky + 30, results_io.fmt_ratio(v), 10, "middle")
    for n, text in enumerate(captions):
        caption(s, H - 12 - 16 * (len(captions) - 1 - n), text)
    return s.render()


def fig_bwd_kernels(ctx, gpu="nvidia-h200/bwd-kernels-bf16"):
    """The package's backward kernels against cuDNN's over the bench grid, kernel against kernel
    (bench/pytorch/torch_bwd_profile.py: each cell's profiled device time per pass, pre- and
    post-passes included, no host wait): time of cuDNN / time of the package's, one panel per
    family, as fig_rung14 draws the runner's grid."""
    res = results_folder(ctx, gpu, "the backward grid's kernels",
                         "bench/pytorch/torch_bwd_profile.py --family backward,backward-gqa,backward-gqa8")
    if not res.has("torch_bwd_profile.json"):
        raise Missing("torch_bwd_profile.json in %s" % res.rel(""), "bench/pytorch/torch_bwd_profile.py")
    run = res.json("torch_bwd_profile.json")
    panels = []
    for fam, name in (("backward", "MHA"), ("backward-gqa", "GQA 4:1"), ("backward-gqa8", "GQA 8:1")):
        cells = {}
        for shp in run["shapes"]:
            r, c = shp["backends"].get("ladder", {}), shp["backends"].get("cudnn", {})
            if shp["name"].split("/")[0] == fam and "total_ms" in r and "total_ms" in c:
                sh = shp["shape"]
                cells[(sh["head_dim"], bool(sh["causal"]), sh["seqlen"])] = c["total_ms"] / r["total_ms"]
        if cells:
            panels.append((name, sorted({k[:2] for k in cells}), sorted({k[2] for k in cells}), cells))
    if not panels:
        raise Missing("a --family run in %s" % res.rel(""), "bench/pytorch/torch_bwd_profile.py --family ...")
    ctxt = run["context"]
    dtype = ctxt.get("dtype") or "?"
    return ratio_heatmap(
        panels, "The backward's kernels against cuDNN's, %s: time of cuDNN / time of the package's" % dtype,
        "Heatmap of cuDNN's backward kernel time over the package's (rung 14's kernels with D's pass and dQ's "
        "conversion), by head_dim, causal mask and seqlen, for MHA, GQA 4:1 and GQA 8:1; above 1 the package is "
        "faster.",
        "above 1 (blue): rung 14's kernels faster; below 1 (orange): cuDNN's faster; the PyTorch profiler's device "
        "time per pass, no host wait",
        "time of cuDNN / time of rung 14",
        ["%s; the package under autograd against SDPA's cuDNN backward, the median of %d passes each; PyTorch %s, "
         "cuDNN %s." % (dtype, ctxt["passes"], ctxt["versions"].get("torch", "?"), ctxt.get("cudnn", "?")),
         "%s, %s, commit %s; data: %s" % (ctxt.get("device", "?"), str(ctxt.get("date", "?"))[:10],
                                          str(ctxt.get("git_sha", "?"))[:12], res.rel(""))])


# ---- decode bandwidth -------------------------------------------------------------------------------


def fig_decode(ctx, gpu=SWEEP, rung="08_flash_decoding", shapes="1/8,1/32"):
    """Decode bandwidth (GB/s, log) against seqlen_k: rung 08 and PyTorch SDPA's backends, one panel
    per (batch, KV heads) of @p shapes, under the measured copy bandwidth and the datasheet HBM peak."""
    res = results_folder(ctx, gpu, "the decode family", "bench/run_all.sh --family decode")
    ceil = ceilings_of(res)
    copy = ceil["copy_gbps"][1]
    peak = float(res.ctx.get("peak_gbps") or 0) or None  # the datasheet HBM bandwidth, in the run's context
    series = [(rung, "%s (split-KV)" % rung, svg.BLACK, None, "circle")]  # (label, name, colour, dash, marker)
    series += [("torch_cudnn", "PyTorch SDPA cuDNN", svg.BLUE, "6,3", "square"),
               ("torch_flash", "PyTorch SDPA flash", svg.VERMILLION, "6,3", "diamond"),
               ("torch_efficient", "PyTorch SDPA efficient", svg.GREEN, "2,3", "triangle"),
               ("torch_math", "PyTorch SDPA math", svg.ORANGE, "2,3", "triangle")]
    panels = []
    for shp in shapes.split(","):
        b, hkv = (int(x) for x in shp.split("/"))
        recs = [r for r in res.records if r["family"] == "decode" and r["batch"] == b and r["heads_kv"] == hkv]
        lines = []
        for label, name, colour, dash, shape in series:
            pts = sorted((r["seqlen_k"], r["gbps"]) for r in recs if r["rung"] == label and r["gbps"])
            if pts:
                lines.append((name, colour, dash, shape, pts))
        if lines:
            hq = next(r["heads_q"] for r in recs)
            panels.append(("batch %d, %d query / %d KV heads" % (b, hq, hkv), lines))
    if not panels:
        raise Missing("%s in the decode family in %s" % (rung, res.rel("")), "bench/run_all.sh --family decode")
    allx = sorted({x for _, lines in panels for l in lines for x, _ in l[4]})
    ally = [y for _, lines in panels for l in lines for _, y in l[4]] + [copy] + ([peak] if peak else [])
    ylo = 10.0 ** math.floor(math.log10(min(ally)))
    yhi = 10.0 ** math.ceil(math.log10(max(ally)) + 0.02)
    pw, gap = 380, 90
    W = 80 + len(panels) * pw + (len(panels) - 1) * gap + 30
    H = 600
    title = "Decode bandwidth against the HBM ceiling: %s and PyTorch SDPA" % rung
    s = svg.Svg(W, H, title, "GB/s of single-query decode against the number of keys, for the split-KV rung and "
                "PyTorch SDPA's backends, with the measured copy bandwidth and the datasheet HBM bandwidth.")
    s.text(80, 30, title, 16, bold=True)
    for k, (name, lines) in enumerate(panels):
        x0 = 80 + k * (pw + gap)
        box = (x0, 70, x0 + pw, H - 190)
        xs = svg.Scale(allx[0] / 1.3, allx[-1] * 1.3, box[0], box[2], log=True)
        ys = svg.Scale(ylo, yhi, box[3], box[1], log=True)
        s.text((box[0] + box[2]) / 2.0, box[1] - 10, name, 13, "middle", bold=True)
        svg.frame(s, box, xs, ys, "seqlen_k (keys in the cache, log scale)", "GB/s (log scale)",
                  xticks=[(x, results_io.seqlen_text(x)) for x in allx])
        s.line(box[0], ys(copy), box[2], ys(copy), svg.BLACK, 1.4)
        s.text(box[0] + 6, ys(copy) + 14, "%s %s GB/s (measured)" % (ceil["copy_gbps"][0], results_io.fmt_value(copy)),
               10, halo=True)
        if peak:
            s.line(box[0], ys(peak), box[2], ys(peak), "#777777", 1.2, dash="2,3")
            s.text(box[0] + 6, ys(peak) - 5, "HBM datasheet %s GB/s" % results_io.fmt_value(peak), 10, colour="#555555",
                   halo=True)
        for _, colour, dash, shape, pts in lines:
            s.polyline([(xs(x), ys(y)) for x, y in pts], colour, 2.0 if dash is None else 1.5, dash)
            for x, y in pts:
                s.marker(xs(x), ys(y), shape, colour, dash is None, 3.5)
    shown = {l[0] for _, lines in panels for l in lines}
    svg.legend(s, 80, H - 116, [("both", c, name, (dash, shape, dash is None)) for _, name, c, dash, shape in series
                                if name in shown], columns=3)
    caption(s, H - 28, "One query per sequence, head_dim 128, fp16; GB/s counts K and V read once (and Q, O). "
                       "PyTorch in the same run; a backend missing at a point did not run that shape.")
    caption(s, H - 12, run_caption(res))
    return s.render()


# ---- the ring's scaling -----------------------------------------------------------------------------


def fig_ring(ctx, gpu="nvidia-h200-x4/ring-backward", gpus="2,4", variant="zigzag"):
    """Rung 12's scaling efficiency T1 / (P x ring time), forward + backward, against the sequence
    length, per P (T1: the ring of one in the same folder), beside PyTorch's context_parallel on
    the same P GPUs; one panel per mask."""
    folder = gpu
    command = ('bench/run_ring.sh --backward --gpus "1 2 4" --seqlens "65536 131072 262144" --single-p1 0 '
               '--results bench/results/<gpu>/ring-backward')
    res = results_folder(ctx, folder, "rung 12's forward + backward runs", command)
    runs = results_io.ring_runs(res.dir)
    cp = results_io.torch_cp_runs(res.dir)
    Ps = [int(x) for x in gpus.split(",")]
    colours = [svg.BLUE, svg.VERMILLION, svg.GREEN, svg.PURPLE]
    panels = []
    for c, name in ((0, "not causal"), (1, "causal")):
        lines = []
        for i, P in enumerate(Ps):
            ring, torch = [], []
            for key in sorted(k for k in runs if k[0] == "ring" and k[1] == P and k[3] == c and k[4] == variant):
                j, one = runs[key], runs.get(("ring", 1, key[2], c, variant))
                if not (j.get("backward") and one and one.get("backward")):
                    continue
                t = j["backward"]["timing"]["ring_fwd_bwd_median_ms"]
                t1 = one["backward"]["timing"]["ring_fwd_bwd_median_ms"]
                if t and t1:
                    ring.append((key[2], t1 / (P * t)))
                tc = cp.get((P, key[2], c))
                if tc and tc.get("scaling_efficiency_fwd_bwd"):
                    torch.append((key[2], tc["scaling_efficiency_fwd_bwd"]))
            if ring:
                lines.append(("rung 12, %d GPUs" % P, colours[i % 4], None, "circle", ring))
            if torch:
                lines.append(("PyTorch context_parallel, %d GPUs" % P, colours[i % 4], "6,3", "square", torch))
        if lines:
            panels.append((name, lines))
    if not panels:
        raise Missing("rung 12's forward + backward runs with a ring of one in %s" % res.rel(""), command)
    allx = sorted({x for _, lines in panels for l in lines for x, _ in l[4]})
    ally = [y for _, lines in panels for l in lines for _, y in l[4]]
    ylo = min(0.9, math.floor((min(ally) - 0.02) * 20) / 20.0)
    pw, gap = 360, 80
    W = 80 + len(panels) * pw + (len(panels) - 1) * gap + 30
    H = 560
    title = "Ring attention's scaling: forward + backward, T1 / (P x ring time)"
    s = svg.Svg(W, H, title, "Scaling efficiency of rung 12's ring (forward and backward) on P GPUs against the "
                "sequence length, beside PyTorch's context_parallel on the same GPUs; 1 is perfect scaling.")
    s.text(80, 30, title, 16, bold=True)
    for k, (name, lines) in enumerate(panels):
        x0 = 80 + k * (pw + gap)
        box = (x0, 70, x0 + pw, H - 170)
        xs = svg.Scale(allx[0] / 1.4, allx[-1] * 1.4, box[0], box[2], log=True)
        ys = svg.Scale(ylo, 1.05, box[3], box[1])
        s.text((box[0] + box[2]) / 2.0, box[1] - 10, name, 13, "middle", bold=True)
        svg.frame(s, box, xs, ys, "tokens in the sequence (log scale)", "scaling efficiency",
                  xticks=[(x, results_io.seqlen_text(x)) for x in allx])
        s.line(box[0], ys(1.0), box[2], ys(1.0), svg.BLACK, 1.2, dash="2,3")
        s.text(box[0] + 6, ys(1.0) - 5, "perfect scaling", 10, colour="#555555")
        values = {}  # x -> the ring's points there, labelled to their right
        for _, colour, dash, shape, pts in lines:
            s.polyline([(xs(x), ys(y)) for x, y in pts], colour, 2.0 if dash is None else 1.5, dash)
            for x, y in pts:
                s.marker(xs(x), ys(y), shape, colour, dash is None, 4)
                if dash is None:
                    values.setdefault(x, []).append((ys(y) + 4, "%.3f" % y, colour))
        for x in sorted(values):
            label_column(s, values[x], xs(x) + 9, 13, box[1] + 10, box[3] - 4)
    entries = {}
    for _, lines in panels:
        for n, c, dash, shape, _ in lines:
            entries.setdefault(n, ("both", c, n, (dash, shape, dash is None)))
    svg.legend(s, 80, H - 104, [entries[k] for k in sorted(entries, key=lambda n: (int(n.split(", ")[1].split()[0]),
                                                                                     n.startswith("PyTorch")))],
               columns=2)
    m = res.meta
    caption(s, H - 28, "Batch 1, 16 heads, head_dim 128, bf16, %s shards; T1: the ring of one GPU through the same "
                       "launcher; PyTorch's T1: SDPA on one GPU." % variant)
    caption(s, H - 12, "%s, %s, commit %s; data: %s" % (m.get("device", "?"), str(m.get("date", "?"))[:10],
                                                        str(m.get("git_sha", "?"))[:12], res.rel("")))
    return s.render()


def fig_flex_steps(ctx, gpus="nvidia-h200/flex-steps/bf16-4k,nvidia-h200/flex-steps/bf16-8k"):
    """Masked training steps through the package against compiled FlexAttention
    (bench/pytorch/torch_flex_steps.py): per case, FlexAttention's forward + backward time over the
    ladder's, a bar per head_dim; one panel per run (folder in @p gpus); the issue's 1.2x marked."""
    command = "PYTHONPATH=build/release/python python3 bench/pytorch/torch_flex_steps.py --out bench/results/<gpu>/flex-steps/<run>"
    panels = []
    for folder in gpus.split(","):
        res = results_folder(ctx, folder, "torch_flex_steps.json", command)
        if not res.has("torch_flex_steps.json"):
            raise Missing("torch_flex_steps.json in bench/results/%s" % folder, command)
        d = res.json("torch_flex_steps.json")
        rows = [r for r in d["rows"] if "flex_over_ladder" in r]
        cases = []
        for r in rows:
            if r["shape"]["case"] not in cases:
                cases.append(r["shape"]["case"])
        dims = sorted({r["shape"]["head_dim"] for r in rows})
        value = {(r["shape"]["case"], r["shape"]["head_dim"]): r["flex_over_ladder"] for r in rows}
        seqlen = max(r["shape"]["seqlen_q"] for r in rows if r["shape"]["case"] != "docs")
        panels.append((res, d, cases, dims, value, seqlen))
    colours = [svg.BLUE, svg.ORANGE, svg.GREEN, svg.PURPLE]
    hi = max(v for p in panels for v in p[4].values())
    ytop = math.ceil(hi * 2 + 0.5) / 2.0
    pw, gap = 470, 70
    W = 80 + len(panels) * pw + (len(panels) - 1) * gap + 30
    H = 520
    title = "Masked training steps: compiled FlexAttention's time over the ladder's"
    s = svg.Svg(W, H, title, "Forward + backward under autograd, per mask or modifier and head_dim: "
                "FlexAttention's time divided by the ladder's (above 1: the ladder is faster); the dashed "
                "line is the 1.2x target.")
    s.text(80, 30, title, 16, bold=True)
    for k, (res, d, cases, dims, value, seqlen) in enumerate(panels):
        x0 = 80 + k * (pw + gap)
        box = (x0, 70, x0 + pw, H - 170)
        slot = (box[2] - box[0]) / float(len(cases))
        xs = svg.Scale(0, len(cases), box[0], box[2])
        ys = svg.Scale(0, ytop, box[3], box[1])
        s.text((box[0] + box[2]) / 2.0, box[1] - 10, "%s, %s keys (documents: 16k packed)" % (
            d["dtype"], results_io.seqlen_text(seqlen)), 13, "middle", bold=True)
        svg.frame(s, box, xs, ys, "", "FlexAttention time / ladder time",
                  xticks=[(i + 0.5, c.replace("window", "window\n").replace("softcap", "softcap\n"))
                          for i, c in enumerate(cases)])
        s.line(box[0], ys(1.2), box[2], ys(1.2), svg.BLACK, 1.2, dash="5,3")
        s.text(box[2] - 6, ys(1.2) - 5, "1.2x", 10, "end", colour="#555555")
        bw = slot * 0.8 / len(dims)
        for i, c in enumerate(cases):
            for j, dim in enumerate(dims):
                v = value.get((c, dim))
                if v is None:
                    continue
                x = box[0] + slot * i + slot * 0.1 + bw * j
                s.rect(x, ys(v), bw, ys(0) - ys(v), colours[j % 4])
                s.text(x + bw / 2.0, ys(v) - 4, "%.2f" % v, 8, "middle")
    svg.legend(s, 80, H - 104, [("marker", colours[j % 4], "head_dim %d" % dim, ("square", True))
                                for j, dim in enumerate(panels[0][3])], columns=len(panels[0][3]))
    res, d = panels[0][0], panels[0][1]
    caption(s, H - 28, "%d heads, 16k tokens per step; the ladder through flash_attn_func (flash_attn_varlen_func "
                       "for documents), FlexAttention compiled with its BlockMask made outside the time." % d["heads"])
    caption(s, H - 12, "%s, %s, commit %s; data: %s" % (d["device"]["name"], str(d["date"])[:10],
                                                        str(d["git_sha"])[:12],
                                                        ", ".join(p[0].rel("") for p in panels)))
    return s.render()


# ---- the registry: (name, output path, generator, params) ---------------------------------------------

register("climb", "docs/figures/climb.svg", fig_climb, gpu=SWEEP)
register("roofline", "docs/figures/roofline.svg", fig_roofline, gpu=SWEEP)
register("rung14-vs-cudnn-h100", "docs/figures/rung14-vs-cudnn-h100.svg", fig_rung14,
         gpu=PRIMARY + "/rung14-sweep-fp16")
register("rung14-vs-cudnn-h200", "docs/figures/rung14-vs-cudnn-h200.svg", fig_rung14,
         gpu="nvidia-h200/rung14-grid-fp16")
register("bwd-kernels-h200-bf16", "docs/figures/bwd-kernels-h200-bf16.svg", fig_bwd_kernels,
         gpu="nvidia-h200/bwd-kernels-bf16")
register("bwd-kernels-h200-fp16", "docs/figures/bwd-kernels-h200-fp16.svg", fig_bwd_kernels,
         gpu="nvidia-h200/bwd-kernels-fp16")
register("decode-bandwidth", "docs/figures/decode-bandwidth.svg", fig_decode, gpu=PRIMARY)  # rung 08 README's run
register("ring-scaling", "docs/figures/ring-scaling.svg", fig_ring, gpu="nvidia-h200-x4/ring-backward")
register("flex-steps-h200", "docs/figures/flex-steps-h200.svg", fig_flex_steps,
         gpus="nvidia-h200/flex-steps/bf16-4k,nvidia-h200/flex-steps/bf16-8k")
