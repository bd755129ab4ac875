"""The package's end-to-end runs in docs/pytorch.md that have no block in pytorch.py: the training
demo with context parallelism (bench/pytorch/torch_train_cp.py, one sub-folder per ring size) and
text generation through transformers (bench/pytorch/torch_generate.py, torch_generate.json); the paged
cache's history and bandwidth in decode (bench/pytorch/torch_decode.py's runs, torch_decode.json)."""

import os

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
