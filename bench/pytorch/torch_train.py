#!/usr/bin/env python3
"""The training demo: a small Llama-style model trained from the same start on PyTorch SDPA's flash
backend, on its cuDNN backend, and on the ladder's kernels.

The model is built from a transformers LlamaConfig with random weights (nothing is downloaded):
byte-level vocabulary (256), hidden 2048, 16 query heads and 4 KV heads (GQA 4:1) of head_dim 128,
RoPE, SwiGLU MLP of 5632, 6 layers (--layers): about 270M parameters. It runs in bf16 (weights,
activations, gradients) with fp32 master weights and AdamW state. The text is the Python standard
library's own sources: every *.py file under sysconfig's "stdlib" folder (not site-packages),
in sorted order, as bytes (tokens 0..255); every 20th file is held out. Batches are windows of
seqlen + 1 bytes at offsets drawn once from a seeded generator, so every run sees the same data in
the same order.

  1. Logits check: one held-out batch through the same weights three ways: fp32 weights with SDPA
     (the reference), bf16 with SDPA forced to its flash backend, bf16 with the ladder
     (flashladder.register_transformers(name="ladder"), attn_implementation="ladder": the default
     forward rung for this GPU; the name avoids "flash", see LADDER_NAME). Reported: max abs and
     relative Frobenius differences of the ladder's logits against SDPA flash's and of both
     against the fp32 reference. A bf16 model's logits differ from its fp32 weights' by the
     rounding of every layer, whatever the attention kernel, so the ladder is judged against
     that: it passes iff its relative Frobenius error against the fp32 reference is at most twice
     SDPA flash's (the ladder's rule for every rung: within 2x of a reference implementation's
     error) and its attention ran in every layer.
  2. Training: from one random init, --steps steps (default 300) of AdamW (betas 0.9/0.95, weight
     decay 0.1 on matrices, gradient clipping 1.0), learning rate --lr with a linear warm-up of
     --warmup steps then cosine decay to 10 %. Four runs: SDPA with
     torch.nn.attention.sdpa_kernel(SDPBackend.FLASH_ATTENTION) (so nothing else can run), SDPA
     with SDPBackend.CUDNN_ATTENTION forced (the fastest path PyTorch offers on Hopper; --no-cudnn
     skips it), the ladder (forward: the default rung; backward: the default backward rung, rung 14
     on sm_90 and rung 11 elsewhere, through the package's eager autograd), and SDPA flash again
     (--no-rerun skips it): the second SDPA run measures how far two runs of the
     same kernels drift apart (atomics in the backward pass make them differ), the noise that
     "the ladder's curve matches SDPA's" is judged against. Recorded per step: the training loss,
     the gradient norm and the step time (torch.cuda.synchronize() before and after; the held-out
     evaluation is outside the timed step); the held-out loss every --eval-every steps.
     Steady-state tokens/s: batch x seqlen x steps / their time, leaving out the first
     --timing-skip steps (allocator and library warm-up). No torch.compile.
  3. Attention alone: one layer's attention forward + backward at the model's shape, through the
     same transformers attention functions (CUDA events, median of 20): its share of a step.

Writes <out>/torch_train.json (device, versions, commit, date, the config, the data, the logits
check, each run's curves and timings, the ratio of step times) and <out>/torch_train.log, and on a
GPU adds its command line to <out>/meta.json (made when absent: device, date, commit), which makes
the folder a run that bench/docgen.py and the notebooks find.

    PYTHONPATH=build/release/python python3 bench/pytorch/torch_train.py --out DIR
    python3 bench/pytorch/torch_train.py --quick --out DIR      # a tiny model, 20 steps: runs on CPU too
    PYTHONPATH=build/release/python python3 bench/pytorch/torch_train.py --model gqa8-8k --out DIR
                     # the second model: GQA 8:1 (16/2 heads of 128), one sequence of 8192 tokens

Without CUDA (or without the flashladder package) the ladder's parts are skipped with a message;
--quick then runs the SDPA part alone on the CPU (default backend: no flash kernel there).
"""

import argparse
import contextlib
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import runinfo  # noqa: E402  bench/pytorch/runinfo.py
import timing  # noqa: E402  bench/pytorch/timing.py: the events
from train_model import (  # noqa: E402  bench/pytorch/train_model.py: the corpus, the model, the optimizer
    MODELS, VOCAB, Batches, apply_defaults, attention_context, build_model, diff, initial_state, load_corpus,
    lr_at, make_optimizer, record_step, record_step_times, sync)

# The logits check: the ladder's relative error against the fp32 model at most this times SDPA
# flash's (the margin every rung's check gives a reference implementation's error).
LOGITS_RATIO = 2.0
# The loss curves match when the ladder's last held-out loss is within this of SDPA flash's
# (relative), or within 3x the SDPA rerun's distance when that is larger.
LOSS_REL = 0.02

# The name the ladder is registered under (attn_implementation=...): the package's default (not
# "flashladder": transformers 5 takes every name with "flash" in it for a FlashAttention package).
LADDER_NAME = "ladder"



# ---- the logits check -----------------------------------------------------------------------------

def logits_check(torch, args, state, x, ladder, device, dtype):
    """The same weights and tokens: fp32 SDPA (reference), SDPA flash in @p dtype, the ladder."""
    out = {"input": "the first held-out batch, %d x %d tokens" % tuple(x.shape), "dtype": args.dtype}
    logits = {}
    runs = [("fp32_sdpa", "sdpa", torch.float32), ("sdpa_flash", "sdpa", dtype)]
    if ladder:
        runs.append(("ladder", ladder["impl"], dtype))
    for name, impl, dt in runs:
        model = build_model(torch, args, impl, state, dt, device).eval()
        ctx = contextlib.nullcontext if dt == torch.float32 else attention_context(torch, impl, device)
        calls0 = ladder["calls"][0] if ladder else 0
        with torch.no_grad(), ctx():
            logits[name] = model(input_ids=x, use_cache=False).logits.float()
        if name == "ladder":
            out["ladder_attention_calls"] = ladder["calls"][0] - calls0
            out["layers"] = args.layers
        del model
        if device.type == "cuda":
            torch.cuda.empty_cache()
    out["sdpa_flash_vs_fp32"] = diff(logits["sdpa_flash"], logits["fp32_sdpa"])
    if not ladder:
        out["pass"] = None
        out["skipped"] = "no ladder run"
        return out
    out["ladder_vs_sdpa_flash"] = diff(logits["ladder"], logits["sdpa_flash"])
    out["ladder_vs_fp32"] = diff(logits["ladder"], logits["fp32_sdpa"])
    ratio = out["ladder_vs_fp32"]["rel_fro"] / max(out["sdpa_flash_vs_fp32"]["rel_fro"], 1e-30)
    out["error_ratio"] = ratio
    out["tolerance_ratio"] = LOGITS_RATIO
    out["tolerance"] = ("the ladder's rel_fro against the fp32 model <= %.1f x SDPA flash's, and the ladder's "
                        "attention ran in every layer" % LOGITS_RATIO)
    out["pass"] = bool(ratio <= LOGITS_RATIO and out.get("ladder_attention_calls") == args.layers)
    return out


# ---- training -------------------------------------------------------------------------------------

def evaluate(torch, F, model, batches, ctx):
    model.eval()
    losses = []
    with torch.no_grad(), ctx():
        for x, y in batches:
            logits = model(input_ids=x, use_cache=False).logits
            losses.append(F.cross_entropy(logits.float().view(-1, VOCAB), y.view(-1)).item())
    model.train()
    return sum(losses) / len(losses)


def train(torch, args, name, impl, state, data, device, dtype, backend="flash"):
    """One training run from @p state (SDPA runs: its @p backend forced); returns its record
    (curves, timings)."""
    import torch.nn.functional as F

    print("\n== run %s (attn_implementation=%s%s)" % (name, impl, ", SDPA %s backend forced" % backend
                                                       if impl == "sdpa" and device.type == "cuda" else ""))
    torch.manual_seed(args.seed)
    model = build_model(torch, args, impl, state, dtype, device).train()
    params = list(model.parameters())
    master, opt = make_optimizer(torch, args, params, device)
    ctx = attention_context(torch, impl, device, backend)
    heldout = data.heldout()
    rec = {"name": name, "attn_implementation": impl, "loss": [], "grad_norm": [], "step_ms": [],
           "heldout": []}
    if impl == "sdpa":
        rec["sdpa_backend"] = "%s (forced)" % backend if device.type == "cuda" else "PyTorch's choice (CPU)"
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    tokens = args.batch * args.seqlen
    for step in range(args.steps):
        if step % args.eval_every == 0:
            rec["heldout"].append([step, evaluate(torch, F, model, heldout, ctx)])
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args)
        x, y = data.step(step)
        sync(torch, device)
        t0 = time.perf_counter()
        with ctx():
            logits = model(input_ids=x, use_cache=False).logits
            loss = F.cross_entropy(logits.float().view(-1, VOCAB), y.view(-1))
            loss.backward()
        with torch.no_grad():
            for m, p in zip(master, params):
                m.grad.copy_(p.grad)
            gnorm = torch.nn.utils.clip_grad_norm_(master, args.clip)
            opt.step()
            for m, p in zip(master, params):
                p.copy_(m)
        model.zero_grad(set_to_none=True)
        sync(torch, device)
        ms = (time.perf_counter() - t0) * 1e3
        if not record_step(rec, step, args.steps, loss.item(), gnorm.item(), ms, tokens):
            break
    if "diverged_at" not in rec:
        rec["heldout"].append([args.steps, evaluate(torch, F, model, heldout, ctx)])
    timed = record_step_times(rec, args.timing_skip, tokens)
    if device.type == "cuda":
        rec["peak_memory_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
    rec["final_heldout"] = rec["heldout"][-1][1] if rec["heldout"] else None
    print("  held-out loss: %s" % ", ".join("%d: %.4f" % (s, l) for s, l in rec["heldout"]))
    if timed:
        print("  steady state (steps %d-%d): %.2f ms/step, %.0f tokens/s" % (
            args.timing_skip, args.timing_skip + rec["timed_steps"] - 1, rec["step_ms_mean"], rec["tokens_per_s"]))
    del model, opt, master, params
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return rec


# ---- attention alone ------------------------------------------------------------------------------

def attention_alone(torch, args, state, impls, device, dtype, iters=20):
    """ms of one layer's attention forward and forward + backward at the model's shape, through the
    attention functions transformers calls (inputs laid out as the model passes them: [b, h, s, d]
    views of [b, s, h, d] projections)."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    out = {}
    B, S, Hq, Hkv, D = args.batch, args.seqlen, args.heads, args.kv_heads, args.head_dim
    model = build_model(torch, args, "sdpa", state, dtype, device)
    module = model.model.layers[0].self_attn
    timer = timing.EventTimer(torch, flush_bytes=0, device=device)  # events around one call, no flush
    for name, impl in impls:
        fn = ALL_ATTENTION_FUNCTIONS[impl]
        ctx = attention_context(torch, impl, device, "cudnn" if name == "sdpa_cudnn" else "flash")
        q = torch.randn(B, S, Hq, D, device=device, dtype=dtype).transpose(1, 2).requires_grad_()
        k = torch.randn(B, S, Hkv, D, device=device, dtype=dtype).transpose(1, 2).requires_grad_()
        v = torch.randn(B, S, Hkv, D, device=device, dtype=dtype).transpose(1, 2).requires_grad_()
        dout = torch.randn(B, S, Hq, D, device=device, dtype=dtype)
        times = {"forward": [], "forward_backward": []}

        def step(what, fn=fn, ctx=ctx, q=q, k=k, v=v, dout=dout):
            with ctx():
                o, _ = fn(module, q, k, v, None, dropout=0.0, scaling=module.scaling, is_causal=True)
                if what == "forward_backward":
                    torch.autograd.grad(o, (q, k, v), dout)

        for i in range(iters + 3):  # the two in turn, the first 3 of each a warm-up
            for what in times:
                ms = timer.once(lambda: step(what))[0]
                if i >= 3:
                    times[what].append(ms)
        out[name] = {what: statistics.median(t) for what, t in times.items()}
        out[name]["backward"] = out[name]["forward_backward"] - out[name]["forward"]
        print("  attention alone, %s: forward %.3f ms, forward + backward %.3f ms" % (
            name, out[name]["forward"], out[name]["forward_backward"]))
    del model
    return out


# ---- main -----------------------------------------------------------------------------------------

def ladder_setup(torch, args, device):
    """flashladder registered with transformers and a call counter, or (None, reason)."""
    if device.type != "cuda":
        return None, "no CUDA device: the ladder runs on CUDA tensors only"
    fl = runinfo.import_flashladder(args.package)
    if fl is None:
        return None, "the flashladder package is not built or not importable"
    if fl.device_count() == 0:
        return None, fl.no_device_reason()
    import flashladder._hf as hf
    from flashladder import _core

    impl = fl.register_transformers(name=LADDER_NAME)
    calls = [0]
    registered = hf.transformers_attention

    def counting(*a, **kw):  # proves that every layer's attention ran on the ladder
        calls[0] += 1
        return registered(*a, **kw)

    hf.transformers_attention = counting
    key = (args.batch, args.seqlen, args.seqlen, args.heads, args.kv_heads, args.head_dim, args.dtype, True, 0.0)
    fwd = _core.plan_forward(None, "", key, device.index or 0).label
    bwd = _core.plan_backward(None, "", key, False, device.index or 0).label
    info = fl.device_info(device.index or 0)
    print("ladder: package %s; forward %s, backward %s (the package's eager autograd) on %s (%s)" % (
        runinfo.package_path(fl), fwd, bwd, info.name, info.arch))
    return {"impl": impl, "calls": calls, "forward_rung": fwd, "backward_rung": bwd,
            "package": runinfo.package_path(fl)}, ""


def add_training_args(ap, out_files, seqlen_help=None):
    """The flags of a training run that bench/pytorch/torch_train_cp.py shares (the model's size, the
    steps, the optimizer, the seed): one definition, one set of defaults. --dtype is each script's."""
    ap.add_argument("--out", required=True, help="folder for %s" % out_files)
    ap.add_argument("--quick", action="store_true", help="a tiny model and 20 steps (runs on a CPU)")
    ap.add_argument("--model", choices=sorted(MODELS), default="demo",
                    help="the model's preset (train_model.MODELS; the flags below override its values)")
    ap.add_argument("--seqlen", type=int, help=seqlen_help)
    ap.add_argument("--batch", type=int)
    ap.add_argument("--layers", type=int)
    ap.add_argument("--steps", type=int)
    ap.add_argument("--eval-every", type=int, help="held-out loss every N steps")
    ap.add_argument("--eval-batches", type=int, help="held-out batches per evaluation")
    ap.add_argument("--timing-skip", type=int, help="first steps left out of tokens/s")
    ap.add_argument("--warmup", type=int, help="learning-rate warm-up steps")
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--package", help="folder holding the flashladder package (default: PYTHONPATH, "
                                      "else the newest build/*/python)")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_training_args(ap, "torch_train.json and torch_train.log")
    ap.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16")
    ap.add_argument("--no-rerun", action="store_true", help="skip the second SDPA flash run (the noise yardstick)")
    ap.add_argument("--no-cudnn", action="store_true", help="skip the SDPA cuDNN run")
    ap.add_argument("--cpu", action="store_true", help="run on the CPU even if CUDA is there (with --quick)")
    args = ap.parse_args(argv)
    apply_defaults(args)
    os.makedirs(args.out, exist_ok=True)
    with runinfo.Log(os.path.join(args.out, "torch_train.log")):
        return run(args)


def run(args):
    try:
        import torch
        import transformers
    except ImportError as e:
        print("torch_train.py: needs PyTorch and transformers (%s): nothing measured" % e)
        return 0
    device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() and not args.cpu \
        else torch.device("cpu")
    if device.type == "cpu" and not args.quick:
        print("torch_train.py: no CUDA device: nothing measured (the full demo needs one; --quick runs a tiny "
              "model on the CPU)")
        return 0
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    print("torch_train.py: %s; PyTorch %s, transformers %s" % (
        torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU", torch.__version__,
        transformers.__version__))
    ladder, why = ladder_setup(torch, args, device)
    if ladder is None:
        print("ladder runs skipped: %s" % why)

    train_bytes, held_bytes, data_desc = load_corpus()
    print("data: %d files, %.1f MB (%.1f MB held out), sha256 %s" % (
        data_desc["files"], data_desc["bytes"] / 1e6, data_desc["heldout_bytes"] / 1e6, data_desc["sha256"][:12]))
    data = Batches(torch, train_bytes, held_bytes, args, device)

    state, n_params = initial_state(torch, args, device)
    print("model: %.1fM parameters, %d layers, hidden %d, %d/%d heads of %d, MLP %d, seqlen %d, batch %d, %s" % (
        n_params / 1e6, args.layers, args.hidden, args.heads, args.kv_heads, args.head_dim, args.intermediate,
        args.seqlen, args.batch, args.dtype))

    result = {"schema": "flashladder.torch_train/1", "date": runinfo.now(), **runinfo.git_info(),
              "command": runinfo.command_line(), "versions": runinfo.versions(), "quick": args.quick}
    if device.type == "cuda":
        p = torch.cuda.get_device_properties(device)
        result["device"] = {"name": p.name, "cc": "%d.%d" % (p.major, p.minor), "sms": p.multi_processor_count,
                            "memory_gib": round(p.total_memory / 2**30, 1)}
    else:
        result["device"] = {"name": "CPU"}
    result["ladder"] = {k: v for k, v in (ladder or {}).items() if k not in ("calls",)} or {"skipped": why}
    result["config"] = config_record(args, n_params)
    result["data"] = data_desc

    print("\n== logits check")
    check = logits_check(torch, args, state, data.heldout()[0][0], ladder, device, dtype)
    result["logits_check"] = check
    print("  SDPA flash vs fp32: max abs %.3e, rel_fro %.3e" % (check["sdpa_flash_vs_fp32"]["max_abs"],
                                                               check["sdpa_flash_vs_fp32"]["rel_fro"]))
    if ladder:
        print("  ladder vs fp32:     max abs %.3e, rel_fro %.3e (%.2f x SDPA flash's)" % (
            check["ladder_vs_fp32"]["max_abs"], check["ladder_vs_fp32"]["rel_fro"], check["error_ratio"]))
        print("  ladder vs SDPA flash: max abs %.3e, rel_fro %.3e; ladder ran in %d of %d layers: %s" % (
            check["ladder_vs_sdpa_flash"]["max_abs"], check["ladder_vs_sdpa_flash"]["rel_fro"],
            check.get("ladder_attention_calls", 0), args.layers, "PASS" if check["pass"] else "FAIL"))

    runs = [("sdpa_flash", "sdpa", "flash")]
    cudnn = device.type == "cuda" and not args.no_cudnn
    if cudnn:
        runs.append(("sdpa_cudnn", "sdpa", "cudnn"))
    if ladder:
        runs.append(("ladder", ladder["impl"], ""))
    if not args.no_rerun:
        runs.append(("sdpa_flash_rerun", "sdpa", "flash"))
    result["runs"] = [train(torch, args, name, impl, state, data, device, dtype, backend or "flash")
                      for name, impl, backend in runs]

    if device.type == "cuda":
        print("\n== attention alone (one layer)")
        impls = [("sdpa_flash", "sdpa")] + ([("sdpa_cudnn", "sdpa")] if cudnn else []) + \
            ([("ladder", ladder["impl"])] if ladder else [])
        result["attention_alone"] = attention_alone(torch, args, state, impls, device, dtype)
    result["summary"] = summarize(result, args)
    runinfo.write_json(os.path.join(args.out, "torch_train.json"), result)
    if device.type == "cuda":
        runinfo.update_meta(args.out, result["device"]["name"], result, result["command"])
    print_summary(result)
    return 0


def config_record(args, n_params):
    """The "config" object of the JSON: the model, precision, batch, optimizer and schedule."""
    return {
        "model": {"arch": "LlamaForCausalLM", "preset": "quick" if args.quick else args.model, "parameters": n_params, "vocab": VOCAB, "hidden": args.hidden,
                  "intermediate": args.intermediate, "layers": args.layers, "heads_q": args.heads,
                  "heads_kv": args.kv_heads, "head_dim": args.head_dim, "rope": True, "causal": True},
        "precision": "%s weights, activations and gradients; fp32 master weights and AdamW state" % args.dtype,
        "batch": args.batch, "seqlen": args.seqlen, "tokens_per_step": args.batch * args.seqlen,
        "steps": args.steps, "optimizer": "AdamW betas (0.9, 0.95) eps 1e-8, weight decay %g on matrices"
                                          % args.weight_decay,
        "lr": args.lr, "schedule": "linear warm-up %d steps, cosine to 10%%" % args.warmup, "warmup": args.warmup,
        "grad_clip": args.clip, "eval_every": args.eval_every, "eval_batches": args.eval_batches,
        "timing_skip": args.timing_skip, "seed": args.seed, "torch_compile": False}


def tail_gap(a, b, n=50):
    """The mean |difference| of two runs' training losses over their last @p n steps (None if
    either has none): how far apart the curves end."""
    x, y = a["loss"][-n:], b["loss"][-n:]
    return statistics.fmean(abs(p - q) for p, q in zip(x, y)) if x and y else None


def summarize(result, args):
    by = {r["name"]: r for r in result["runs"]}
    s = {}
    ref, lad, rerun = by.get("sdpa_flash"), by.get("ladder"), by.get("sdpa_flash_rerun")
    if ref and lad and ref.get("tokens_per_s") and lad.get("tokens_per_s"):
        s["speedup_vs_sdpa_flash"] = ref["step_ms_mean"] / lad["step_ms_mean"]
        s["speedup_target"] = 1.0
        s["meets_speedup_target"] = s["speedup_vs_sdpa_flash"] >= 1.0
    if ref and rerun and rerun.get("tokens_per_s") and ref.get("tokens_per_s"):
        s["rerun_speedup_vs_sdpa_flash"] = ref["step_ms_mean"] / rerun["step_ms_mean"]
    cud = by.get("sdpa_cudnn")
    if cud and lad and cud.get("tokens_per_s") and lad.get("tokens_per_s"):
        s["speedup_vs_sdpa_cudnn"] = cud["step_ms_mean"] / lad["step_ms_mean"]
        s["meets_speedup_target_cudnn"] = s["speedup_vs_sdpa_cudnn"] >= 1.0

    if ref and lad and ref.get("final_heldout") and lad.get("final_heldout"):
        gap = abs(lad["final_heldout"] - ref["final_heldout"])
        s["final_heldout_gap"] = gap
        s["train_loss_gap_last50"] = tail_gap(lad, ref)
        noise = None
        if rerun and rerun.get("final_heldout"):
            noise = abs(rerun["final_heldout"] - ref["final_heldout"])
            s["rerun_final_heldout_gap"] = noise
            s["rerun_train_loss_gap_last50"] = tail_gap(rerun, ref)
        tol = max(LOSS_REL * ref["final_heldout"], 3 * noise if noise is not None else 0.0)
        s["loss_tolerance"] = tol
        s["loss_tolerance_rule"] = ("last held-out loss within max(%g x SDPA flash's, 3 x the SDPA rerun's gap)"
                                    % LOSS_REL)
        s["loss_match"] = gap <= tol
        if cud and cud.get("final_heldout"):
            s["cudnn_final_heldout_gap"] = abs(lad["final_heldout"] - cud["final_heldout"])
            s["loss_match_cudnn"] = s["cudnn_final_heldout_gap"] <= tol
    attn = result.get("attention_alone", {})
    for name in ("sdpa_flash", "sdpa_cudnn", "ladder"):
        if name in attn and name in by and by[name].get("step_ms_mean"):
            s["attention_share_%s" % name] = args.layers * attn[name]["forward_backward"] / by[name]["step_ms_mean"]
    if "logits_check" in result:
        s["logits_pass"] = result["logits_check"].get("pass")
    return s


def print_summary(result):
    s = result["summary"]
    print("\n== summary (%s)" % result["device"]["name"])
    for r in result["runs"]:
        if r.get("tokens_per_s"):
            print("  %-17s %8.2f ms/step  %9.0f tokens/s  last held-out loss %.4f" % (
                r["name"], r["step_ms_mean"], r["tokens_per_s"], r["final_heldout"]))
    if "speedup_vs_sdpa_flash" in s:
        print("  ladder step vs SDPA flash: %.3fx (target >= 1.0: %s)" % (
            s["speedup_vs_sdpa_flash"], "met" if s["meets_speedup_target"] else "NOT met"))
    if "speedup_vs_sdpa_cudnn" in s:
        print("  ladder step vs SDPA cuDNN: %.3fx (target >= 1.0: %s); last held-out gap %.4f: %s" % (
            s["speedup_vs_sdpa_cudnn"], "met" if s["meets_speedup_target_cudnn"] else "NOT met",
            s.get("cudnn_final_heldout_gap", float("nan")), "match" if s.get("loss_match_cudnn") else "DIFFER"))
    if "loss_match" in s:
        print("  loss curves: last held-out gap %.4f (tolerance %.4f%s): %s" % (
            s["final_heldout_gap"], s["loss_tolerance"],
            ", SDPA rerun's gap %.4f" % s["rerun_final_heldout_gap"] if "rerun_final_heldout_gap" in s else "",
            "match" if s["loss_match"] else "DIFFER"))
    for name in ("sdpa_flash", "sdpa_cudnn", "ladder"):
        if "attention_share_%s" % name in s:
            print("  attention's share of a %s step: %.0f %%" % (name, 100 * s["attention_share_%s" % name]))
    if s.get("logits_pass") is not None:
        print("  logits check: %s" % ("PASS" if s["logits_pass"] else "FAIL"))


if __name__ == "__main__":
    sys.exit(main())
