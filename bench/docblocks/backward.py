"""The backward pass's blocks (rung 11 on): the backward and backward-gqa families against PyTorch's
backward, every entry of a backward rung, and the gradients' checks of its run reports."""

import results_io
from .core import (Missing, generator, ints, labels_of, link, measured_line, prefill_shapes, prefill_want, ratio_text,
                   run_label, run_problem, run_reports, torch_cells)


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
    for _, _, _, w, lead in prefill_shapes(d, n, causal):
        r = res.need(family, rung=label, deterministic=0, **w)
        det = res.find(family=family, rung=label, deterministic=1, **w)
        rows.append(lead + ["%.3f" % r["ms"], results_io.fmt_value(r["tflops"]),
                            results_io.fmt_value(det["tflops"]) if det else "—"] + torch_cells(res, family, w, r))
    head = ["head_dim", "seqlen", "causal", "`%s` ms" % label, "TFLOP/s", "deterministic TFLOP/s",
            "flash ms", "flash / rung", "cuDNN ms", "cuDNN / rung"]
    torch = res.json("torch_sdpa.json")["context"].get("torch", "?") if res.has("torch_sdpa.json") else "not run"
    return results_io.markdown_table(head, rows) + "\n\n" + measured_line(
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
    head = ["entry"] + ["d=%d %s%s" % (dd, results_io.seqlen_text(nn), ", causal" if c else "")
                        for dd, nn, c in shapes]
    rows = []
    for lab in entries:
        cells = ["`%s`" % lab]
        for dd, nn, c in shapes:
            w = prefill_want(dd, nn, c)
            r = res.find(family=family, rung=lab, deterministic=0, **w)
            fl = res.find(family=family, rung="torch_flash", **w)
            cells.append("%s (%s)" % (results_io.fmt_value(r["tflops"]), ratio_text(fl, r)) if r else "—")
        rows.append(cells)
    if not rows:
        raise Missing("the %s family for %s" % (family, prefix), "bench/run_all.sh --family %s" % family)
    return results_io.markdown_table(head, rows, ["---"] + ["--:"] * len(shapes)) + "\n\n" + measured_line(
        res, ", fp16, backward pass only, TFLOP/s (time of PyTorch's flash backward / time of the "
        "entry), batch x seqlen = 16k tokens, hidden 2048" + gqa_text(family))


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
    return results_io.markdown_table(head, rows) + "\n\nMeasured on %s, %s, commit `%s`." % (
        first["device"]["name"], first["date"][:10], first["git_sha"])


@generator("o16-delta")
def gen_o16_delta(ctx, gpu, folder="o16-delta"):
    """Where D = rowsum(dO * O) comes from on short rows (delta_policy.h's kO16DeltaKeys): dQ's
    error against the fp64 reference with D from the 16-bit O and from the fp32 O (rung 14's
    runner, the rule and the o16-delta / o32-delta entries, --check full: @p folder/scan), and what
    the fp32 O costs the package (bench/studies/o32_cost.py: the forward with and without it, the
    backward from it and from the 16-bit O; @p folder/o32_cost_<dtype>.json)."""
    import glob
    import json
    import re
    res = ctx.results(gpu)
    scans = sorted(glob.glob(res.path(folder + "/scan/err_*.txt")))
    if not scans:
        raise Missing("the D-source scan in %s/%s" % (gpu, folder), "14_hopper_backward --variant o16-delta|o32-delta "
                      "... --check full")
    err = {}
    for path in scans:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        m = re.search(r"problem +B=(\d+) Sq=(\d+) Sk=(\d+) H=(\d+)/(\d+) d=(\d+) (\w+)", text)
        e = re.search(r"dQ rel_fro ([0-9.e+-]+) \(tol ([0-9.e+-]+)\)", text)
        src = "fp32" if "D from the fp32 O" in text else "o16" if "D from the 16-bit O" in text else None
        if not (m and e and src):
            continue
        b, sq, sk, hq, hk, d, dt = m.groups()
        shape = "%s, %s keys, %s" % (dt, sk, "1 query, GQA %s/%s" % (hq, hk) if sq == "1" else "%s queries" % sq)
        err.setdefault((dt, int(sq), int(sk)), {"shape": shape})[src] = (float(e.group(1)), float(e.group(2)))
    rows = ["| dtype, keys, queries | dQ error, D from the 16-bit O | from the fp32 O | ratio | tolerance | "
            "16-bit O's share of it |", "|---|--:|--:|--:|--:|--:|"]
    for key in sorted(err, key=lambda k: (k[0] != "fp16", k[1] == 1, k[2])):
        v = err[key]
        if "o16" in v and "fp32" in v:
            tol = v["o16"][1]
            rows.append("| %s | %.2e | %.2e | %.1f× | %.1e | %.0f %% |" % (
                v["shape"], v["o16"][0], v["fp32"][0], v["o16"][0] / v["fp32"][0], tol, 100 * v["o16"][0] / tol))
    rows += ["", "Relative Frobenius error of dQ against the fp64 backward (every group checked), head_dim 128, not "
             "causal, batch 1 and 4 heads (the 1-query rows: batch 4, 32/8 heads); the rule's entry and the ablation "
             "that takes the other source; dK and dV do not depend on D. %s." % link(res, folder + "/scan")]
    cost = []
    for dt in ("bf16", "fp16"):
        name = "%s/o32_cost_%s.json" % (folder, dt)
        if res.has(name):
            with open(res.path(name), encoding="utf-8") as f:
                cost.append((dt, json.load(f)))
    if cost:
        rows += ["", "| head_dim, keys | " + " | ".join(
            "%s forward: fp32 O's share | %s backward: D from it, over the 16-bit O" % (dt, dt) for dt, _ in cost) + " |",
            "|---|" + "--:|--:|" * len(cost)]
        keys = [(r["head_dim"], r["seqlen"]) for r in cost[0][1]["rows"]]
        for d, n in dict.fromkeys(keys):
            cells = []
            for _, run in cost:
                rs = [r for r in run["rows"] if r["head_dim"] == d and r["seqlen"] == n]
                fwd = ["%.0f %%" % (100 * (1 - r["ms"]["fwd"] / r["ms"]["fwd_o32"])) for r in rs]
                bwd = ["%.2f×" % (r["ms"]["bwd_o32"] / r["ms"]["bwd_o16"]) for r in rs]
                cells += [" / ".join(fwd), " / ".join(bwd)]
            rows.append("| %d, %s | " % (d, "%dk" % (n // 1024) if n >= 1024 else n) + " | ".join(cells) + " |")
        run = cost[0][1]
        rows += ["", "Per cell not causal / causal; batch x seqlen = 16k tokens, 2048 / head_dim heads. The forward's "
                 "share: 1 - (the forward without the fp32 O) / (with it); the backward: rung 14's o32-delta over its "
                 "o16-delta entry (one grid, the D source alone differs). CUDA-event medians of %d calls, L2 flushed, "
                 "the four calls in rotated order over %d rounds, on %s (%s)." % (
                     run["iters"], run["rounds"], run["device"], ", ".join(link(res, "%s/o32_cost_%s.json" % (folder, dt))
                                                                          for dt, _ in cost))]
    return "\n".join(rows)
