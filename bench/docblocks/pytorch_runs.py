"""The package's end-to-end runs in docs/pytorch.md that have no block in pytorch.py: the training
demo with context parallelism (bench/pytorch/torch_train_cp.py, one sub-folder per ring size) and
text generation through transformers (bench/pytorch/torch_generate.py, torch_generate.json); the paged
cache's history and bandwidth in decode (bench/pytorch/torch_decode.py's runs, torch_decode.json)."""

import os
import re

import results_io
from .core import Missing, generator, link


@generator("torch-train-cp")
def gen_torch_train_cp(ctx, gpu, runs="p1,p2,p4"):
    """The training demo on 1, 2, 4 ... GPUs (one sub-folder of gpu= per ring size, its
    torch_train_cp.json compared with the one-GPU ladder run of the folder): the last held-out
    loss, its gap to the one-GPU run, the largest gap over the last 50 steps, and the tolerance
    (torch_train.py's rule)."""
    res = ctx.results(gpu)
    rows = ["| GPUs | last held-out loss | gap to the one-GPU ladder run | max gap, last 50 steps | tolerance |",
            "|--:|--:|--:|--:|--:|"]
    js = []
    for part in runs.split(","):
        name = os.path.join(part, "torch_train_cp.json")
        if not res.has(name):
            raise Missing(res.rel(name), "torchrun ... bench/pytorch/torch_train_cp.py --compare torch_train.json")
        j = res.json(name)
        c = j["compare"]
        rows.append("| %d | %.4f | %.4f | %.3f | %.4f |" % (j["world_size"], j["runs"][0]["final_heldout"],
                                                             c["final_heldout_gap"], c["max_abs_last50"],
                                                             c["loss_tolerance"]))
        js.append(j)
    return "\n".join(rows) + (
        "\n\nThe yardstick, two one-GPU SDPA flash runs' gap in the last held-out loss: %.4f. Mean step time: %s." % (
            js[0]["compare"]["noise"]["final_heldout_gap"],
            ", ".join("%.1f ms (P = %d)" % (j["runs"][0]["step_ms_mean"], j["world_size"]) for j in js)))


@generator("torch-generate")
def gen_torch_generate(ctx, gpu):
    """Text generation (bench/pytorch/torch_generate.py): per cache, the ladder's and SDPA's tokens/s (the
    median of the repeats) and their ratio."""
    res = ctx.results(gpu)
    if not res.has("torch_generate.json"):
        raise Missing(res.rel("torch_generate.json"), "python3 bench/pytorch/torch_generate.py")
    caches = res.json("torch_generate.json")["caches"]
    names = {"dynamic": "dynamic", "static": "static (compiled, CUDA graphs)"}
    rows = ["| cache | ladder tokens/s | SDPA tokens/s | ladder / SDPA |", "|---|--:|--:|--:|"]
    for key in ("dynamic", "static"):
        c = caches[key]
        rows.append("| %s | %.0f | %.0f | **%.2f×** |" % (names[key], c["tokens_per_s"]["ladder"],
                                                           c["tokens_per_s"]["sdpa"], c["ladder_vs_sdpa"]))

    def secs(key, who):
        return ", ".join("%.2f" % x for x in caches[key]["seconds"][who])

    return "\n".join(rows) + (
        "\n\nEach run's seconds, ladder / SDPA: dynamic %s / %s, static %s / %s. Positions where the two paths' "
        "tokens agree: %.1f %% (dynamic), %.1f %% (static)." % (
            secs("dynamic", "ladder"), secs("dynamic", "sdpa"), secs("static", "ladder"), secs("static", "sdpa"),
            100 * caches["dynamic"]["agreeing_tokens"], 100 * caches["static"]["agreeing_tokens"]))


def decode_runs(ctx, folder):
    """(Results, [torch_decode.json of the folder and of its run2/ when there is one], the tree's commit from
    its meta.json)."""
    res = ctx.results(folder)
    if not res.has("torch_decode.json"):
        raise Missing(res.rel("torch_decode.json"), "python3 bench/pytorch/torch_decode.py --quick")
    runs = [res.json(n) for n in ("torch_decode.json", "run2/torch_decode.json") if res.has(n)]
    sha = res.json("meta.json").get("git_sha", runs[0]["git_sha"]) if res.has("meta.json") else runs[0]["git_sha"]
    return res, runs, str(sha)[:7]


def ratio_range(xs):
    """"0.96×" or "0.96× to 0.97×" as printed (each ratio at two decimals)."""
    lo, hi = results_io.fmt_ratio(min(xs)), results_io.fmt_ratio(max(xs))
    return lo if lo == hi else "%s to %s" % (lo, hi)


@generator("torch-decode-paged-history")
def gen_torch_decode_paged_history(ctx, runs):
    """Contiguous / paged over the runs of torch_decode.py in the folders @p runs (comma-separated, each
    with its run2/ if any), oldest first: the 16-query cell at 16k keys and the decode steps (one query)."""
    out = []
    for folder in runs.split(","):
        res, js, sha = decode_runs(ctx, folder)
        rows = [r for j in js for r in j["rows"] if "paged_vs_contiguous" in r]
        cell = [r["paged_vs_contiguous"] for r in rows if r["shape"]["seqlen_q"] == 16 and r["shape"]["seqlen_k"] == 16384]
        steps = [r["paged_vs_contiguous"] for r in rows if r["shape"]["seqlen_q"] == 1]
        out.append("- `%s`%s: 16 queries against 16k keys %s, the decode steps %s (%s)" % (
            sha, " (%d runs)" % len(js) if len(js) > 1 else "", ratio_range(cell), ratio_range(steps),
            link(res, "torch_decode.json", "`%s`" % os.path.basename(folder))))
    return "\n".join(out)


@generator("torch-decode-paged-bandwidth")
def gen_torch_decode_paged_bandwidth(ctx, gpus):
    """The rate at which the paged and the contiguous cache (flash_attn_with_kvcache) read K and V, counted once
    (the bf16 rows' bytes over their times), per folder of @p gpus (comma-separated torch_decode.py runs): the
    largest decode cells (batch 8 at 64k and 128k keys, MHA at 64k) and the 16-query cell."""
    big, small = [], []
    for folder in gpus.split(","):
        res, js, _ = decode_runs(ctx, folder)
        d = js[0]
        paged, contig, p16, c16 = [], [], [], []
        for r in d["rows"]:
            s = r["shape"]
            if s["dtype"] != "bf16" or "paged" not in r["ms"]:
                continue
            tb = r["gbps"]["route"] * r["ms"]["route"] / 1e3  # bytes of K and V / 1e12, times ms
            if s["seqlen_q"] == 1 and ((s["batch"] == 8 and s["seqlen_k"] >= 65536) or
                                       (s["heads_q"] == s["heads_kv"] and s["seqlen_k"] == 65536)):
                paged.append(tb / r["ms"]["paged"])
                contig.append(tb / r["ms"]["kvcache"])
            if s["seqlen_q"] == 16:
                p16.append(tb / r["ms"]["paged"])
                c16.append(tb / r["ms"]["kvcache"])
        name = d["device"]["name"].split()[1]
        big.append((name, paged, contig))
        small.append((p16, c16))

    def rng(xs):
        f = "%.1f" if min(xs) >= 1 else "%.2f"
        lo, hi = f % min(xs), f % max(xs)
        return lo if lo == hi else "%s to %s" % (lo, hi)

    return ("Counting K and V read once (the bf16 rows' bytes over their times; batch 8 at 64k and 128k keys, MHA at "
            "64k), the paged cache reads %s, while the contiguous cache reads %s. The 16-query cell: %s TB/s paged "
            "against %s contiguous." % (
                " and ".join("%s TB/s on the %s" % (rng(p), n) for n, p, _ in big),
                " and ".join("%s TB/s on the %s" % (rng(c), n) for n, _, c in big),
                rng([x for p, _ in small for x in p]), rng([x for _, c in small for x in c])))


@generator("torch-train-attention")
def gen_torch_train_attention(ctx, gpu, earlier=None):
    """One layer's attention alone in the training demo (torch_train.json's attention_alone): the ladder's
    forward and backward beside SDPA cuDNN's; with @p earlier (an older run's folder), the ladder's step
    against SDPA flash's there."""
    res = ctx.results(gpu)
    if not res.has("torch_train.json"):
        raise Missing(res.rel("torch_train.json"), "python3 bench/pytorch/torch_train.py")
    d = res.json("torch_train.json")
    a, lad = d["attention_alone"], d["ladder"]
    out = ("One layer's attention alone (`attention_alone` in `torch_train.json`): the ladder's forward (`%s`) "
           "takes %.2f ms and cuDNN's %.2f, its backward (`%s`) %.2f ms and cuDNN's %.2f." % (
               lad["forward_rung"], a["ladder"]["forward"], a["sdpa_cudnn"]["forward"], lad["backward_rung"],
               a["ladder"]["backward"], a["sdpa_cudnn"]["backward"]))
    if earlier:
        old = ctx.results(earlier)
        if not old.has("torch_train.json"):
            raise Missing(old.rel("torch_train.json"), "python3 bench/pytorch/torch_train.py")
        e = old.json("torch_train.json")
        out += " In the earlier run with `%s`'s backward (`%s`, %s) the ladder's step was %s SDPA flash's." % (
            e["ladder"]["backward_rung"], str(e["git_sha"])[:7], link(old, "torch_train.json"),
            results_io.fmt_ratio(e["summary"]["speedup_vs_sdpa_flash"]))
    return out


def overhead_runs(ctx, folder):
    """(Results, [torch_overhead.json of the folder and of its run2/, run3/ ... when there are any])."""
    res = ctx.results(folder)
    if not res.has("torch_overhead.json"):
        raise Missing(res.rel("torch_overhead.json"), "python3 bench/pytorch/torch_overhead.py")
    names = ["torch_overhead.json"] + ["run%d/torch_overhead.json" % i for i in range(2, 10)]
    return res, [res.json(n) for n in names if res.has(n)]


def us_range(xs, sign=""):
    """"12.5 to 18.8" (µs at one decimal), one figure when both print the same."""
    f = "%" + sign + ".1f"
    lo, hi = f % min(xs), f % max(xs)
    return lo if lo == hi else "%s to %s" % (lo, hi)


def minus(text):
    """A negative figure's sign as the prose writes it (U+2212)."""
    return re.sub(r"(?<=[ (])-(?=\d)", "\u2212", text)


def rung_short(e):
    return "rung %s" % e["label"][:2]


@generator("torch-overhead-why")
def gen_torch_overhead_why(ctx, gpu, earlier):
    """Why PyTorch − runner is the paired figure (torch_overhead.json of the folder @p gpu): the GPU's clock
    under load, the runner's loop timed three ways, the inputs' values, the host path against the flush;
    the earlier runs' unpaired gap of the default rung (the folders @p earlier, comma-separated)."""
    res, (d,) = overhead_runs(ctx, gpu)[0], overhead_runs(ctx, gpu)[1][:1]
    rs = [e for e in d["rungs"] if "paired" in e]
    if not rs:
        raise Missing("paired rounds in %s" % res.rel("torch_overhead.json"), "python3 bench/pytorch/torch_overhead.py")
    e0 = rs[0]
    p0, g0 = e0["paired"], e0["gpu_state"]
    old = [e["diff_us"] for f in earlier.split(",") for j in overhead_runs(ctx, f)[1] for e in j["rungs"]
           if e["requested"] == "default" and "diff_us" in e]
    ok = all(abs(e["diff_us"]) <= d["target_us"] for e in rs)
    cap = [e["gpu_state"]["paired"]["reason_share"].get("software power cap", 0) * 100 for e in rs]
    case = (e0["median_ms"]["runner_case"] - e0["median_ms"]["runner"]) * 1e3
    tl = e0["timeline"]["python"]
    lines = [
        "**PyTorch − runner: the target (≤ %g µs) is %s, paired: %s.** What the earlier runs measured as the gap "
        "(%s µs for %s since the fast path) was the GPU's clock, not the call:" % (
            d["target_us"], "met" if ok else "not met",
            " and ".join("%+.1f µs for %s" % (e["paired"]["python_minus_runner_loop_us"]["median"], rung_short(e))
                         for e in rs), us_range(old, "+"), rung_short(e0)),
        "- **The GPU slows down as it works.** Run back to back, this kernel takes the %s to its %.0f W limit: during "
        "the paired rounds nvidia-smi reports the software power cap as the clock's limit in %s %% of its samples, "
        "and the SM clock's median drops to %.0f MHz (%s). The runner binary starts on a GPU that its process start "
        "left idle: its %d calls run at a median %.0f MHz and %.0f W." % (
            d["device"]["name"].split()[1], g0["paired"]["power_limit_w"],
            "%.0f" % cap[0] if "%.0f" % min(cap) == "%.0f" % max(cap) else "%.0f to %.0f" % (min(cap), max(cap)),
            g0["paired"]["sm_mhz_median"], rung_short(e0), d["iters"], g0["runner_binary"]["sm_mhz_median"],
            g0["runner_binary"]["power_w_median"]),
        "- **So the same code has three times.** The runner's own loop, run in PyTorch's process, takes %.1f µs in "
        "the paired rounds and %.1f µs as one series in turn; the binary takes %.1f µs. Its whole case in PyTorch's "
        "process, which first draws its inputs on the host (the GPU idle meanwhile), takes %.1f µs%s. Against the "
        "binary, series after series, PyTorch is %+.1f µs; against the runner's loop in the same rounds, %+.1f µs." % (
            p0["median_us"]["runner_loop"], e0["median_ms"]["runner_loop"] * 1e3, e0["median_ms"]["runner"] * 1e3,
            e0["median_ms"]["runner_case"] * 1e3,
            " too: the process costs nothing" if abs(case) < 0.05 else " (%+.1f µs)" % case,
            e0["unpaired_diff_us"], p0["python_minus_runner_loop_us"]["median"]),
        "- **The inputs' values do not move the kernel.** Paired, the runner's loop on N(0,1) inputs is %s from the "
        "same loop on the runner's inputs (N(0,1), +0.25 for Q and K, +0.5 for V). What the earlier runs gave N(0,1) "
        "inputs came from the order of the series, that is from the clock." % " and ".join(
            "%+.1f µs (%s)" % (e["paired"]["randn_runner_loop_minus_runner_loop_us"]["median"], rung_short(e))
            for e in rs),
        "- **The call's host path fits in the flush.** In the paired rounds a call takes %s of host time, against "
        "the flush's %s µs on the GPU, so the launch is queued before the GPU needs it. The profiler's timeline of "
        "%s agrees: the launch returns %.1f µs before the flush ends and the kernel starts %.1f µs after it. One "
        "thing is not located: a single call's host path varies between runs on one host (%.1f µs in this run's "
        "series in turn, %.1f µs in its paired rounds)." % (
            " and ".join("%.1f µs (%s)" % (e["paired"]["host_path_us"]["python"], rung_short(e)) for e in rs),
            " and ".join("%.1f" % e["flush_us"] for e in rs), rung_short(e0), tl["queued_us"], tl["gap_us"],
            e0["host_path_us"]["python"], p0["host_path_us"]["python"])]
    return minus("\n".join(lines))


@generator("torch-overhead-host-history")
def gen_torch_overhead_host_history(ctx, gpu, earlier):
    """Host time per call (torch_overhead.json's host table) in the folder @p gpu and the earlier runs
    @p earlier (comma-separated folders): flashladder.attention against SDPA's faster backend, in the loop
    and timed alone; what return_lse=True adds; the binding alone and the prepared launch."""
    res, (d,) = overhead_runs(ctx, gpu)[0], overhead_runs(ctx, gpu)[1][:1]
    olds = [(f, overhead_runs(ctx, f)[1][0]) for f in earlier.split(",")]
    h = d["host"]
    pc, al = h["per_call_us"], h["call_alone_us"]
    att, faf, lse = "flashladder.attention", "flashladder.flash_attn_func", "flashladder.attention, return_lse=True"
    sf, sd = "F.scaled_dot_product_attention (flash)", "F.scaled_dot_product_attention (default backend)"
    bind = ("binding alone (_ext.forward)", "prepared launch alone (PreparedForward)")
    ok = all(pc[n] <= min(pc[sf], pc[sd]) and al[n] <= min(al[sf], al[sd]) for n in (att, faf))
    hs = [j["host"] for _, j in olds]

    def best(x, key):
        return min(x[key][sf], x[key][sd])

    thin = min(olds, key=lambda fj: best(fj[1]["host"], "per_call_us") - fj[1]["host"]["per_call_us"][att])
    th = thin[1]["host"]["per_call_us"]
    every = [h] + hs
    return (
        "**Host time per call: the target is %s.** In this run `flashladder.attention` costs %.1f µs in the loop and "
        "%.1f µs timed alone, `flash_attn_func` %.1f and %.1f µs, SDPA's flash backend %.1f and %.1f µs, its default "
        "(cuDNN) %.1f and %.1f µs. The %d runs before it %s: %s: `flashladder.attention` %s µs in the loop and %s µs "
        "alone, SDPA's faster backend %s and %s µs. The margin was thinnest in `%s`: %.1f against %.1f µs in the "
        "loop. Over these %d runs `return_lse=True` adds %s µs; the binding alone and the prepared launch take %s µs "
        "in the loop and %s µs timed alone." % (
            "met" if ok else "not met", pc[att], al[att], pc[faf], al[faf], pc[sf], al[sf], pc[sd], al[sd], len(olds),
            "met it too" if all(x["per_call_us"][att] <= best(x, "per_call_us") for x in hs) else "did not all meet it",
            ", ".join(link(ctx.results(f), "torch_overhead.json", "`%s`" % os.path.basename(f)) for f, _ in olds),
            us_range([x["per_call_us"][att] for x in hs]), us_range([x["call_alone_us"][att] for x in hs]),
            us_range([best(x, "per_call_us") for x in hs]), us_range([best(x, "call_alone_us") for x in hs]),
            str(thin[1]["git_sha"])[:7] if not ctx.results(thin[0]).has("meta.json")
            else str(ctx.results(thin[0]).json("meta.json").get("git_sha", ""))[:7],
            th[att], min(th[sf], th[sd]), len(every),
            us_range([x[k][lse] - x[k][att] for x in every for k in ("per_call_us", "call_alone_us")]),
            us_range([x["per_call_us"][b] for x in every for b in bind]),
            us_range([x["call_alone_us"][b] for x in every for b in bind])))


@generator("torch-overhead-early")
def gen_torch_overhead_early(ctx, gpu):
    """An early overhead run (the folder @p gpu and its run2/, run3/ ...): flashladder.attention's host time
    against SDPA flash's, and PyTorch − runner per rung, series one after the other."""
    res, js = overhead_runs(ctx, gpu)
    att, sf = "flashladder.attention", "F.scaled_dot_product_attention (flash)"
    labels = [e["label"] for e in js[0]["rungs"] if "diff_us" in e]
    return minus("%s µs per call against SDPA flash's %s µs, PyTorch − runner %s." % (
        us_range([j["host"]["per_call_us"][att] for j in js]), us_range([j["host"]["per_call_us"][sf] for j in js]),
        " and ".join("%s µs for rung %s" % (us_range([e["diff_us"] for j in js for e in j["rungs"]
                                                       if e["label"] == lab], "+"), lab[:2]) for lab in labels)))


@generator("torch-generate-runs")
def gen_torch_generate_runs(ctx, runs):
    """Text generation runs (torch_generate.json in each folder of @p runs, comma-separated), one bullet each:
    per cache the ladder's and SDPA's tokens/s and their ratio; then the spread of SDPA's dynamic cache."""
    out, sdpa = [], []
    for folder in runs.split(","):
        res = ctx.results(folder)
        if not res.has("torch_generate.json"):
            raise Missing(res.rel("torch_generate.json"), "python3 bench/pytorch/torch_generate.py")
        c = res.json("torch_generate.json")["caches"]
        sha = res.json("meta.json").get("git_sha", "") if res.has("meta.json") else ""
        sdpa.append(c["dynamic"]["tokens_per_s"]["sdpa"])
        out.append("- `%s` (%s): dynamic cache %.0f against %.0f tokens/s, **%s**; static cache %.0f against %.0f, "
                   "**%s**" % (str(sha)[:7], link(res, "torch_generate.json", "`%s`" % os.path.basename(folder)),
                               c["dynamic"]["tokens_per_s"]["ladder"], sdpa[-1],
                               results_io.fmt_ratio(c["dynamic"]["ladder_vs_sdpa"]),
                               c["static"]["tokens_per_s"]["ladder"], c["static"]["tokens_per_s"]["sdpa"],
                               results_io.fmt_ratio(c["static"]["ladder_vs_sdpa"])))
    return "\n".join(out) + "\n\nTokens/s move between runs on this host: SDPA's dynamic cache gave %.0f to %.0f " \
        "tokens/s across these runs." % (min(sdpa), max(sdpa))
