#!/usr/bin/env python3
"""Generation through transformers: tokens/s of model.generate() with attn_implementation="ladder"
against "sdpa", the same model and prompts, one process.

Model: a Llama-style decoder built from a config (random init, nothing downloaded): 8 layers,
hidden 2048, 16 query heads and 4 KV heads of 128, MLP 5632, vocabulary 32000, bf16. Prompts: a
batch of 8 of mixed lengths (17 to 1024 tokens), left-padded with their attention mask, as
generate() takes a batch; 256 new tokens each (greedy, min_new_tokens = max_new_tokens: every row
generates all of them). Per cache (dynamic, static): one warm-up generate per implementation, then
--repeats rounds, each timing one generate per implementation in turn (wall clock between
torch.cuda.synchronize() calls); tokens/s = 8 x 256 / the median time. The ladder's prefill runs
the padded batch through its packed path (rung 15), each decode step rung 15 or 08 on the packed
cache (transformers' FlashAttention path, the package's _hf.py).

Also recorded: how many of the generated tokens the two implementations agree on (greedy decoding
of a random model in bf16 may part ways at a near tie; informational, not a check).

Writes <out>/torch_generate.json and <out>/torch_generate.log, and adds its command line to
<out>/meta.json (made when absent: device, date, commit).

    PYTHONPATH=build/release/python python3 bench/pytorch/torch_generate.py --out DIR [--repeats R]

Exits 0 with a message, measuring nothing, without PyTorch, transformers, a CUDA device or the
package.
"""

import argparse
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import runinfo  # noqa: E402  bench/pytorch/runinfo.py
import timing  # noqa: E402  bench/pytorch/timing.py: wall_s, paired_rounds

CONFIG = dict(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=8,
              num_attention_heads=16, num_key_value_heads=4, max_position_embeddings=4096,
              pad_token_id=0, bos_token_id=1, eos_token_id=2)
PROMPTS = [17, 64, 128, 256, 400, 512, 768, 1024]
NEW_TOKENS = 256
TARGET = 1.0  # tokens/s on the ladder against SDPA's (bench goal)


def run(args):
    torch = runinfo.cuda_torch("torch_generate.py")
    if torch is None:
        return 0
    try:
        import transformers
    except ImportError:
        print("transformers is not installed: nothing measured")
        return 0
    fl = runinfo.import_flashladder(args.package)
    if fl is None:
        return 0
    fl.register_transformers()
    info = fl.device_info()
    gen = torch.Generator(device="cpu").manual_seed(7)
    longest = max(PROMPTS)
    ids = torch.zeros(len(PROMPTS), longest, dtype=torch.long)
    mask = torch.zeros(len(PROMPTS), longest, dtype=torch.long)
    for row, n in enumerate(PROMPTS):  # left padding, as generate() takes a batch
        ids[row, longest - n:] = torch.randint(3, CONFIG["vocab_size"], (n,), generator=gen)
        mask[row, longest - n:] = 1
    ids, mask = ids.cuda(), mask.cuda()

    def build(impl):
        torch.manual_seed(0)
        cfg = transformers.LlamaConfig(**CONFIG)
        cfg._attn_implementation = impl
        return transformers.LlamaForCausalLM(cfg).to("cuda", torch.bfloat16).eval()

    models = {"ladder": build("ladder"), "sdpa": build("sdpa")}
    models["sdpa"].load_state_dict(models["ladder"].state_dict())

    def generate(model, cache):
        kw = dict(attention_mask=mask, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS, do_sample=False,
                  pad_token_id=0)
        if cache == "static":
            kw["cache_implementation"] = "static"
        with torch.no_grad():
            return model.generate(ids, **kw)

    result = {"schema": "flashladder.torch_generate/1", "date": runinfo.now(), **runinfo.git_info(),
              "command": runinfo.command_line(), "versions": runinfo.versions(),
              "device": {"name": info.name, "arch": info.arch, "sm_count": info.sm_count},
              "package": runinfo.package_path(fl), "config": CONFIG, "prompts": PROMPTS,
              "new_tokens": NEW_TOKENS, "repeats": args.repeats, "target": TARGET, "caches": {}}
    print("torch_generate.py: %s, PyTorch %s, transformers %s; Llama-style, %d layers, hidden %d, %d/%d heads; "
          "prompts %s, %d new tokens" % (info.name, torch.__version__, transformers.__version__,
                                         CONFIG["num_hidden_layers"], CONFIG["hidden_size"],
                                         CONFIG["num_attention_heads"], CONFIG["num_key_value_heads"], PROMPTS,
                                         NEW_TOKENS))
    for cache in args.caches:
        outs = {}
        for name, model in models.items():  # warm-up: allocations, the plans, the static cache
            outs[name] = generate(model, cache)
        torch.cuda.synchronize()
        # the models in turn, the order rotated per repeat (timing.paired_rounds)
        times = timing.paired_rounds({name: (lambda m=model: timing.wall_s(torch, lambda: generate(m, cache)))
                                      for name, model in models.items()}, args.repeats)
        new = {n: o[:, longest:] for n, o in outs.items()}
        agree = (new["ladder"] == new["sdpa"]).float().mean().item()
        tokens = len(PROMPTS) * NEW_TOKENS
        row = {"seconds": times, "median_s": {n: statistics.median(t) for n, t in times.items()},
               "tokens_per_s": {n: tokens / statistics.median(t) for n, t in times.items()},
               "agreeing_tokens": agree}
        row["ladder_vs_sdpa"] = row["tokens_per_s"]["ladder"] / row["tokens_per_s"]["sdpa"]
        row["target_met"] = row["ladder_vs_sdpa"] >= TARGET
        result["caches"][cache] = row
        print("%-8s cache: ladder %.0f tokens/s, SDPA %.0f tokens/s: %.2fx (goal %.2fx: %s); the same token in "
              "%.1f %% of positions" % (cache, row["tokens_per_s"]["ladder"], row["tokens_per_s"]["sdpa"],
                                         row["ladder_vs_sdpa"], TARGET, "met" if row["target_met"] else "not met",
                                         100 * agree))
    runinfo.write_json(os.path.join(args.out, "torch_generate.json"), result)
    runinfo.update_meta(args.out, info.name, result, result["command"])
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="results folder (bench/results/<gpu>/...)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--caches", nargs="+", default=["dynamic", "static"], choices=["dynamic", "static"])
    ap.add_argument("--package", default=None, help="folder holding the flashladder package (default: import it)")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    with runinfo.Log(os.path.join(args.out, "torch_generate.log")):
        return run(args)

if __name__ == "__main__":
    sys.exit(main())
