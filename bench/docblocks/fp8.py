"""Rung 13's blocks (FP8): the fp8 family of bench/run_all.sh (speed) and bench/run_fp8.sh's accuracy
runs (fp8_accuracy/*.json, read by results_io.fp8_accuracy_runs): the errors per quantization mode and
the choice of scaling P."""

import results_io
from .core import (Missing, entry_label, generator, ints, labels_of, link, measured_line, ms, pct, pct_of_peak,
                   prefill_want, ratio_text, results_folder)

FP8_SPEED_COMMAND = "bench/run_all.sh --family fp8 --results bench/results/<gpu>/fp8"
FP8_ACCURACY_COMMAND = "bench/run_fp8.sh build/release/bin bench/results/<gpu>/fp8"
# The quantization modes in the order the accuracy table lists them (fp8.mode of a run report).
FP8_MODES = ("per-tensor", "per-head", "per-tensor+hadamard", "per-head+hadamard")


def fp8_runs(ctx, gpu, rung):
    """(Results, the accuracy runs of rung @p rung) of folder @p gpu; Missing if it has none."""
    res = results_folder(ctx, gpu, "fp8_accuracy/*.json", FP8_ACCURACY_COMMAND)
    runs = [j for j in results_io.fp8_accuracy_runs(res.dir) if j["rung"]["number"] == int(rung)]
    if not runs:
        raise Missing("fp8_accuracy/*.json of rung %s in bench/results/%s" % (rung, res.gpu), FP8_ACCURACY_COMMAND)
    return res, runs


def sci(v):
    return "—" if v is None else "%.2e" % v


def fp8_errors(j):
    """(kernel rel_fro, end-to-end rel_fro, kernel max_abs, end-to-end max_abs) of one accuracy run;
    None where the run checked nothing."""
    c, f = j["check"], j["fp8"]
    if not c.get("checked"):
        return None, None, None, None
    return c["rel_fro"], f["e2e_rel_fro"], c["max_abs"], f["e2e_max_abs"]


def fp8_cell(v, j):
    """An error with " (fail)" when the run's check failed (13_fp8 exited 1; the run is kept)."""
    if v is None:
        return "—"
    return sci(v) + ("" if j["check"]["pass"] else " (fail)")


def runs_provenance(runs):
    """ "NVIDIA H100 80GB HBM3, 2026-11-30, commit `abc1234`" of the run reports (each distinct one)."""
    seen = []
    for j in runs:
        p = "%s, %s, commit `%s`" % (j["device"]["name"], str(j.get("date", "?"))[:10], j.get("git_sha", "?"))
        if p not in seen:
            seen.append(p)
    return "; ".join(seen)


def runs_shape(runs):
    p = runs[0]["problem"]
    dims = sorted({j["problem"]["head_dim"] for j in runs})
    return "batch %d, seqlen %s, heads = %d / head_dim (%s), %s, %s" % (
        p["batch"], results_io.seqlen_text(p["seqlen_q"]), p["heads_q"] * p["head_dim"],
        ", ".join("%d at d=%d" % (p["heads_q"] * p["head_dim"] // d, d) for d in dims), p["dtype"],
        "causal" if p["causal"] else "not causal")


def label_in_run(ctx, res, family, number):
    """The main entry's label of rung @p number as the run recorded it (a build without the rung
    still regenerates the docs), else from the registry."""
    for r in res.records:
        if r["family"] == family and r["number"] == number and not r["variant"]:
            return r["rung"]
    return labels_of(ctx, [number])[0]


@generator("fp8-speed")
def gen_fp8_speed(ctx, rung="13", baseline="10", d="64,128,256", n="", causal="0,1", gpu=None):
    """The fp8 family (the prefill shapes at head_dim 64, 128, 256): per head_dim, causal and seqlen
    the FP8 rung's TFLOP/s and % of the FP8 tensor peak, the 16-bit rung it changes and PyTorch
    SDPA's cuDNN backend (16-bit) in the same run, the ratios (time of the other / time of the FP8
    rung: above 1 = the FP8 rung is faster), and the e4m3 conversion of Q, K, V (quantize_ms, not
    in the rung's time) where the run has it. n= picks seqlens (default: every one measured)."""
    res = results_folder(ctx, gpu, "the fp8 family", FP8_SPEED_COMMAND)
    if not res.has("ladder_bench.json"):
        raise Missing("the fp8 family in bench/results/%s" % res.gpu, FP8_SPEED_COMMAND)
    label = label_in_run(ctx, res, "fp8", int(rung))
    base = label_in_run(ctx, res, "fp8", int(baseline))
    mine = [r for r in res.records if r["family"] == "fp8" and r["rung"] == label]
    if not mine:
        raise Missing("the fp8 family for %s in bench/results/%s" % (label, res.gpu), FP8_SPEED_COMMAND)
    cj = res.ctx
    rows, quant = [], False
    for dd in ints(d):
        for c in ints(causal):
            ns = ints(n) if n else sorted({r["seqlen_q"] for r in mine if r["head_dim"] == dd and r["causal"] == c})
            for nn in ns:
                w = dict(family="fp8", **prefill_want(dd, nn, c))
                r = res.find(rung=label, **w)
                b = res.find(rung=base, **w)
                cu = res.find(rung="torch_cudnn", **w)
                q = r.get("quantize_ms") if r else None
                quant = quant or q is not None
                rows.append([str(dd), "yes" if c else "no", results_io.seqlen_text(nn),
                             results_io.fmt_value(r["tflops"]) if r else "—",
                             pct(pct_of_peak(cj, "tensor_fp8", r)) if r else "—",
                             results_io.fmt_value(b["tflops"]) if b else "—",
                             results_io.fmt_value(cu["tflops"]) if cu else "—",
                             ratio_text(b, r), ratio_text(cu, r),
                             "%s (%.0f %%)" % (ms(q), 100.0 * q / r["ms"]) if q is not None else "—"])
    head = ["head_dim", "causal", "seqlen", "`%s` TFLOP/s" % label, "% of FP8 peak", "`%s` TFLOP/s" % base,
            "cuDNN TFLOP/s", "%s / %s" % (results_io.short(label), results_io.short(base)),
            "%s / cuDNN" % results_io.short(label), "quantize Q, K, V (% of the rung's time)"]
    if not quant:
        head, rows = head[:-1], [row[:-1] for row in rows]
    torch = res.json("torch_sdpa.json")["context"].get("torch", "?") if res.has("torch_sdpa.json") else "not run"
    return results_io.markdown_table(head, rows) + "\n\n" + measured_line(
        res, "; `%s` on e4m3 Q, K, V (per-head scales, made once outside the time) from the fp16 inputs, `%s` "
        "and cuDNN (PyTorch %s) on the fp16 inputs; batch x seqlen = 16k tokens, hidden 2048; ratios: time of "
        "the other / time of `%s` (above 1 = FP8 is faster); FP8 peak = 2 x the 16-bit tensor peak (datasheet "
        "formula)" % (label, base, torch, label))


def fp8_by_key(runs):
    """{(input, fp8 mode, head_dim, variant): run report}."""
    return {(j["input"], j["fp8"]["mode"], j["problem"]["head_dim"], j["rung"]["variant"]): j for j in runs}


@generator("fp8-accuracy")
def gen_fp8_accuracy(ctx, rung="13", d="64,128,256", inputs="random,outlier", gpu=None):
    """bench/run_fp8.sh's accuracy runs (fp8_accuracy/*.json): per input and quantization mode
    (per-tensor or per-head scales, with or without the Hadamard rotation of Q and K), per head_dim
    the kernel's error (relative Frobenius, against fp64 on the dequantized inputs: what the check
    judges) and the end-to-end error (against fp64 on the original 16-bit inputs: what a user sees);
    then, on the outlier input, end-to-end error with the rotation / without (per-head scales)."""
    res, runs = fp8_runs(ctx, gpu, rung)
    by = fp8_by_key(runs)
    dims = ints(d)
    rows = []
    for inp in inputs.split(","):
        for mode in FP8_MODES:
            cells = []
            for dd in dims:
                j = by.get((inp, mode, dd, ""))
                k, e = fp8_errors(j)[:2] if j else (None, None)
                cells += [fp8_cell(k, j), fp8_cell(e, j)]
            if any(c != "—" for c in cells):
                rows.append([inp, mode] + cells)
    if not rows:
        raise Missing("fp8_accuracy/*.json with inputs %s in bench/results/%s" % (inputs, res.gpu),
                      FP8_ACCURACY_COMMAND)
    head = ["input", "scales"]
    for dd in dims:
        head += ["d=%d kernel" % dd, "d=%d end to end" % dd]
    out = results_io.markdown_table(head, rows, ["---", "---"] + ["--:"] * (2 * len(dims)))
    ratios = []
    for dd in dims:
        rot, plain = by.get(("outlier", "per-head+hadamard", dd, "")), by.get(("outlier", "per-head", dd, ""))
        a, b = (fp8_errors(rot)[1] if rot else None), (fp8_errors(plain)[1] if plain else None)
        if a is not None and b:
            ratios.append((dd, a / b))
    if ratios:
        met = [dd for dd, r in ratios if r <= 0.5]
        out += ("\n\nOutlier input, end-to-end error with the Hadamard rotation / without (per-head scales): %s "
                "(target ≤ 0.5: %s)." % (", ".join("d=%d %.2f" % (dd, r) for dd, r in ratios),
                                         "met at every head_dim" if len(met) == len(ratios) else
                                         "met at %s" % (", ".join("d=%d" % x for x in met) if met else "none")))
    checks = sorted({j["check"]["mode"] for j in runs if j["check"]["checked"]})
    fails = [j["_file"] for j in runs if j["check"]["checked"] and not j["check"]["pass"]]
    out += ("\n\n%s; `%s`, default variant; check %s%s. Measured on %s; %s." % (
        runs_shape(runs), entry_label(runs[0]).split("[")[0], ", ".join(checks) or "none",
        "; `(fail)`: the check failed (%s)" % ", ".join("`%s`" % f for f in fails) if fails else "",
        runs_provenance(runs), link(res, "fp8_accuracy", "`%s`" % res.rel("fp8_accuracy/"))))
    return out


@generator("fp8-p-scaling")
def gen_fp8_p_scaling(ctx, rung="13", variant="p-unscaled", d="128", mode="per-head", inputs="random,outlier",
                      gpu=None):
    """The choice of scaling P before its e4m3 cast (bench/run_fp8.sh): the rung against its variant
    that casts P as it is, same inputs and scales; kernel and end-to-end errors (relative Frobenius)
    and the variant's error / the rung's (above 1 = the variant is less accurate)."""
    res, runs = fp8_runs(ctx, gpu, rung)
    by = fp8_by_key(runs)
    rows = []
    main = alt = None
    for dd in ints(d):
        for inp in inputs.split(","):
            j, v = by.get((inp, mode, dd, "")), by.get((inp, mode, dd, variant))
            if not (j and v):
                continue
            main, alt = main or j, alt or v
            (k1, e1, _, _), (k2, e2, _, _) = fp8_errors(j), fp8_errors(v)
            rows.append([inp, str(dd), fp8_cell(k1, j), fp8_cell(k2, v),
                         "%.2f" % (k2 / k1) if k1 and k2 is not None else "—",
                         fp8_cell(e1, j), fp8_cell(e2, v), "%.2f" % (e2 / e1) if e1 and e2 is not None else "—"])
    if not rows:
        raise Missing("fp8_accuracy/*.json with the %s variant in bench/results/%s" % (variant, res.gpu),
                      FP8_ACCURACY_COMMAND)
    a, b = entry_label(main), entry_label(alt)
    head = ["input", "head_dim", "kernel: `%s`" % a, "kernel: `%s`" % b, "ratio", "end to end: `%s`" % a,
            "end to end: `%s`" % b, "ratio"]
    return results_io.markdown_table(head, rows, ["---"] + ["--:"] * 7) + (
        "\n\n`%s`: %s. `%s`: %s. %s scales; %s; relative Frobenius errors, kernel against fp64 on the "
        "dequantized inputs, end to end against fp64 on the 16-bit inputs. Measured on %s; %s." % (
            a, main["rung"]["summary"], b, alt["rung"]["summary"], mode, runs_shape([main, alt]),
            runs_provenance([main, alt]), link(res, "fp8_accuracy", "`%s`" % res.rel("fp8_accuracy/"))))
