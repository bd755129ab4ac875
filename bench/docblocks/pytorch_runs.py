"""The package's end-to-end runs in docs/pytorch.md that have no block in pytorch.py: the training
demo with context parallelism (bench/pytorch/torch_train_cp.py, one sub-folder per ring size) and
text generation through transformers (bench/pytorch/torch_generate.py, torch_generate.json)."""

import os

from .core import Missing, generator


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
