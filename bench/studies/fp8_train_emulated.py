#!/usr/bin/env python3
"""Does an FP8 attention backward train? The training demo's model (bench/pytorch/train_model.py,
smaller) trained with attention emulated three ways on the CPU, the same data, initial weights and
steps, the loss curves compared.

    python3 bench/studies/fp8_train_emulated.py --out DIR [--steps 1000]

The three attention implementations (autograd Functions over bench/studies/fp8_bwd_error.py's
arithmetic: PyTorch's e4m3 rounding, fp32 accumulation):
- emu16: the 16-bit attention's arithmetic (bf16 Q, K, V, dO; P and dS rounded to bf16 before their
  GEMMs; rung 14's), the reference curve;
- emu8-bwd: the same forward, and the backward with dV, dQ and dK on e4m3 operands (P x 2^8, dS
  per 64 x 64 tile, Q, K, dO per head), S and dP 16-bit: what fp8_bwd_error.py found the error
  allows;
- emu8-fwdbwd: rung 13's FP8 forward (e4m3 Q, K, V per head, P x 2^8) and that backward with S
  recomputed from the same e4m3 Q and K (a backward must recompute the S its forward used).

Everything else is torch_train.py's loop (bf16 model, fp32 master weights, AdamW, the learning-rate
schedule, clipping), on a model small enough for the CPU. What it shows is the arithmetic's effect
on training, not a kernel's: rung 18 does not exist yet. Writes DIR/fp8_train_emulated.json and
DIR/fp8_train_emulated.md.
"""

import argparse
import json
import os
import platform
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "pytorch"))
sys.path.insert(0, HERE)

import fp8_bwd_error as emu  # noqa: E402  the study's e4m3 arithmetic
import torch_train  # noqa: E402
import train_model  # noqa: E402

# A model the CPU trains 1000 steps of in minutes: the demo's shape rules (GQA 2:1, head_dim 64).
CPU_MODEL = dict(hidden=256, intermediate=688, layers=4, heads=4, kv_heads=2, head_dim=64, seqlen=256, batch=8,
                 steps=1000, eval_every=100, eval_batches=4, timing_skip=3, warmup=50)

MODES = {  # name: (forward in FP8, the backward's configuration for fp8_bwd_error.backward)
    "emu16": (False, {"fp8": set(), "p": "pow2", "ds": "tile", "rotate": False}),
    "emu8-bwd": (False, {"fp8": {"dv", "dq", "dk"}, "p": "pow2", "ds": "tile", "rotate": False}),
    "emu8-fwdbwd": (True, {"fp8": {"s", "dv", "dq", "dk"}, "p": "pow2", "ds": "tile", "rotate": False}),
}


def attention_function(torch, mode):
    """The autograd Function of one mode: causal attention on [batch, heads, seqlen, head_dim]."""
    fwd8, cfg = MODES[mode]
    f32 = torch.float32

    class EmulatedAttention(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v):
            qf, kf, vf = q.to(f32), k.to(f32), v.to(f32)
            n, d = q.shape[-2], q.shape[-1]
            if fwd8:  # rung 13: e4m3 Q, K, V with a scale per head, P x 2^8 in e4m3
                qf, kf, vf = (emu.e4m3(t, emu.per_head(t)) for t in (qf, kf, vf))
            s = qf @ kf.transpose(-1, -2) * d ** -0.5
            s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
            lse = torch.logsumexp(s, dim=-1, keepdim=True)
            p = torch.exp(s - lse)
            p = emu.e4m3(p, torch.full_like(p, 2.0 ** -8)) if fwd8 else p.to(torch.bfloat16).to(f32)
            o = p @ vf
            ctx.save_for_backward(q, k, v, o, lse)
            return o.to(q.dtype)

        @staticmethod
        def backward(ctx, do):
            q, k, v, o, lse = ctx.saved_tensors
            dq, dk, dv = emu.backward(q, k, v, do, o, lse, True, cfg)
            return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)

    return EmulatedAttention


def register(torch, mode):
    """attn_implementation=mode in transformers: GQA's K and V repeated to the query heads (their
    gradients summed back by autograd), causal, no padding mask (the training windows have none)."""
    from transformers import AttentionInterface

    fn = attention_function(torch, mode)

    def attention_forward(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
        group = query.shape[1] // key.shape[1]
        out = fn.apply(query, key.repeat_interleave(group, 1), value.repeat_interleave(group, 1))
        return out.transpose(1, 2).contiguous(), None

    AttentionInterface.register(mode, attention_forward)
    try:
        from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS
    except ImportError:
        return
    ALL_MASK_ATTENTION_FUNCTIONS.register(mode, lambda *a, **kw: None)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    torch_train.add_training_args(ap, "fp8_train_emulated.json and .md")
    a = ap.parse_args(argv)
    for key, value in CPU_MODEL.items():
        if getattr(a, key, None) is None:
            setattr(a, key, value)
    import torch

    torch.set_num_threads(max(1, os.cpu_count() or 1))
    device = torch.device("cpu")
    train_bytes, held_bytes, data_desc = train_model.load_corpus()
    data = train_model.Batches(torch, train_bytes, held_bytes, a, device)
    state, n_params = train_model.initial_state(torch, a, device)
    runs = {}
    for mode in MODES:
        register(torch, mode)
        runs[mode] = torch_train.train(torch, a, mode, mode, state, data, device, torch.bfloat16)
    base = runs["emu16"]
    summary = {}
    for mode, rec in runs.items():
        n = min(len(rec["loss"]), len(base["loss"]))
        win = 50  # the curves' difference over 50-step means (the per-step loss is one batch's)
        means = [(sum(rec["loss"][i:i + win]) - sum(base["loss"][i:i + win])) / win for i in range(0, n - win + 1, win)]
        summary[mode] = {"final_heldout": rec["final_heldout"], "heldout": rec["heldout"],
                         "diverged_at": rec.get("diverged_at"),
                         "heldout_minus_emu16": [[s, l - b] for (s, l), (_, b) in zip(rec["heldout"], base["heldout"])],
                         "train_loss_minus_emu16_50step_means": means}
        print("%-12s final held-out %.4f (emu16 %.4f)" % (mode, rec["final_heldout"], base["final_heldout"]))
    os.makedirs(a.out, exist_ok=True)
    sha = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True, cwd=HERE).stdout.strip()
    meta = {"what": "training with emulated FP8 attention on the CPU (bench/studies/fp8_train_emulated.py)",
            "model": {k: getattr(a, k) for k in CPU_MODEL}, "parameters": n_params, "data": data_desc,
            "lr": a.lr, "seed": a.seed, "torch": torch.__version__, "python": platform.python_version(),
            "git_sha": sha, "command": "python3 bench/studies/fp8_train_emulated.py --out %s --steps %d"
                                       % (os.path.relpath(a.out), a.steps)}
    with open(os.path.join(a.out, "fp8_train_emulated.json"), "w", encoding="utf-8") as f:
        json.dump({"meta": meta, "summary": summary, "runs": runs}, f, indent=1)
        f.write("\n")
    with open(os.path.join(a.out, "fp8_train_emulated.md"), "w", encoding="utf-8") as f:
        f.write(markdown(meta, summary))
    return 0


def markdown(meta, summary):
    m = meta["model"]
    out = ["# Training with emulated FP8 attention (`bench/studies/fp8_train_emulated.py`)", "",
           "%d layers, hidden %d, %d/%d heads of %d, seqlen %d, batch %d, %d steps, %.1fM parameters; bf16 model, "
           "fp32 masters, AdamW (lr %g); the attention's arithmetic emulated on the CPU." % (
               m["layers"], m["hidden"], m["heads"], m["kv_heads"], m["head_dim"], m["seqlen"], m["batch"],
               m["steps"], meta["parameters"] / 1e6, meta["lr"]),
           "Command: `%s` (commit `%s`, PyTorch %s)." % (meta["command"], meta["git_sha"], meta["torch"]), "",
           "| attention | final held-out loss | held-out − emu16, at each evaluation | train loss − emu16, largest 50-step mean |",
           "|---|--:|---|--:|"]
    for mode, s in summary.items():
        diffs = ", ".join("%+.4f" % d for _, d in s["heldout_minus_emu16"])
        worst = max((abs(x) for x in s["train_loss_minus_emu16_50step_means"]), default=0.0)
        out.append("| %s | %.4f | %s | %.4f |" % (mode, s["final_heldout"], diffs, worst))
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.exit(main())
