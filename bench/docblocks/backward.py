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
