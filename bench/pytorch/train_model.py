"""The parts of the training demo that bench/pytorch/torch_train.py and torch_train_cp.py share:
the corpus (the standard library's *.py sources as bytes, every 20th file held out), its windows,
the model (a Llama-style decoder of transformers, its attention by name), its initial weights,
the learning-rate schedule and the optimizer (AdamW on fp32 masters of bf16 weights). PyTorch comes
in as an argument (this module imports none).
"""

import contextlib
import hashlib
import math
import os
import statistics
import sys
import sysconfig

VOCAB = 256  # byte-level tokens
HELDOUT_EVERY = 20  # every 20th source file (in sorted order) is held out
SKIP_DIRS = ("site-packages", "dist-packages", "__pycache__")

FULL = dict(hidden=2048, intermediate=5632, layers=6, heads=16, kv_heads=4, head_dim=128, seqlen=4096,
            batch=2, steps=300, eval_every=25, eval_batches=4, timing_skip=10, warmup=30)
QUICK = dict(hidden=128, intermediate=344, layers=2, heads=2, kv_heads=1, head_dim=64, seqlen=128,
             batch=2, steps=20, eval_every=5, eval_batches=2, timing_skip=3, warmup=5)
# The models --model names (FULL is "demo"): "gqa8-8k" is the demo's model with GQA 8:1 (16 query
# heads, 2 KV heads of 128) on one sequence of 8192 tokens per step, the backward issue's second
# training shape.
MODELS = {"demo": FULL, "gqa8-8k": dict(FULL, kv_heads=2, seqlen=8192, batch=1)}


def apply_defaults(args):
    """Each size flag left unset takes the preset's value: QUICK with --quick, else --model's."""
    preset = QUICK if args.quick else MODELS[getattr(args, "model", None) or "demo"]
    for k, v in preset.items():
        if getattr(args, k, None) is None:
            setattr(args, k, v)


# ---- data -----------------------------------------------------------------------------------------

def load_corpus():
    """(train bytes, held-out bytes, description) of the standard library's *.py sources."""
    root = sysconfig.get_paths()["stdlib"]
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS]
        files += [os.path.relpath(os.path.join(dirpath, f), root) for f in filenames if f.endswith(".py")]
    files.sort()
    train, held = bytearray(), bytearray()
    digest = hashlib.sha256()
    for i, rel in enumerate(files):
        with open(os.path.join(root, rel), "rb") as f:
            data = f.read()
        digest.update(data)
        (held if i % HELDOUT_EVERY == HELDOUT_EVERY - 1 else train).extend(data)
    desc = {"source": "the *.py files of Python %s's standard library (sysconfig 'stdlib', without %s), "
                      "sorted by path, as bytes" % (sys.version.split()[0], ", ".join(SKIP_DIRS)),
            "files": len(files), "bytes": len(train) + len(held), "train_bytes": len(train),
            "heldout_bytes": len(held), "heldout_rule": "every %dth file" % HELDOUT_EVERY,
            "sha256": digest.hexdigest()}
    return bytes(train), bytes(held), desc


class Batches:
    """Windows of seqlen + 1 bytes: training offsets drawn once from a seeded generator (the same
    order for every run), held-out offsets evenly spaced."""

    def __init__(self, torch, train, held, args, device):
        self.torch, self.device = torch, device
        self.S, self.B = args.seqlen, args.batch
        self.train = torch.frombuffer(bytearray(train), dtype=torch.uint8).to(device)
        self.held = torch.frombuffer(bytearray(held), dtype=torch.uint8).to(device)
        g = torch.Generator().manual_seed(args.seed)
        self.offsets = torch.randint(0, len(train) - self.S - 1, (args.steps, self.B), generator=g)
        n = args.eval_batches * self.B
        self.held_offsets = torch.linspace(0, len(held) - self.S - 2, n).long().view(args.eval_batches, self.B)

    def _windows(self, data, offsets):
        idx = offsets.to(self.device)[:, None] + self.torch.arange(self.S + 1, device=self.device)[None, :]
        w = data[idx].long()
        return w[:, :-1].contiguous(), w[:, 1:].contiguous()

    def step(self, i):
        return self._windows(self.train, self.offsets[i])

    def heldout(self):
        return [self._windows(self.held, o) for o in self.held_offsets]


# ---- model ----------------------------------------------------------------------------------------

def make_config(args, impl):
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=VOCAB, hidden_size=args.hidden, intermediate_size=args.intermediate,
                       num_hidden_layers=args.layers, num_attention_heads=args.heads,
                       num_key_value_heads=args.kv_heads, head_dim=args.head_dim,
                       max_position_embeddings=args.seqlen, attention_dropout=0.0,
                       tie_word_embeddings=False, attn_implementation=impl)


def initial_state(torch, args, device):
    """(the fp32 state dict every run starts from, the parameter count): the model's random init
    on @p device from --seed."""
    torch.manual_seed(args.seed)
    from transformers import LlamaForCausalLM

    with torch.device(device):
        init = LlamaForCausalLM(make_config(args, "sdpa"))
    n_params = sum(p.numel() for p in init.parameters())
    state = {k: v.detach().clone() for k, v in init.state_dict().items()}  # fp32: every run starts here
    del init
    return state, n_params


def build_model(torch, args, impl, state, dtype, device):
    from transformers import LlamaForCausalLM

    # Built in @p dtype (the default dtype while it is made) rather than cast afterwards: RoPE's
    # inverse frequencies stay fp32, as they are made, where .to(dtype) would round them.
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = LlamaForCausalLM(make_config(args, impl))
    finally:
        torch.set_default_dtype(default)
    model.load_state_dict(state)
    if model.config._attn_implementation != impl:
        raise RuntimeError("the model runs %s, not %s" % (model.config._attn_implementation, impl))
    return model


def attention_context(torch, impl, device, backend="flash"):
    """sdpa_kernel(FLASH_ATTENTION), or CUDNN_ATTENTION with @p backend "cudnn", for the SDPA runs
    on a GPU (an error, not a silent fallback, if that backend cannot run), nothing for the ladder
    or on the CPU."""
    if impl == "sdpa" and device.type == "cuda":
        from torch.nn.attention import SDPBackend, sdpa_kernel

        which = SDPBackend.CUDNN_ATTENTION if backend == "cudnn" else SDPBackend.FLASH_ATTENTION
        return lambda: sdpa_kernel(which)
    return contextlib.nullcontext


def diff(a, b):
    """{max_abs, rel_fro, ref_max_abs} of a against b (fp64)."""
    a, b = a.double(), b.double()
    d = a - b
    norm = b.norm().item()
    return {"max_abs": d.abs().max().item(), "rel_fro": d.norm().item() / (norm if norm > 0 else 1.0),
            "ref_max_abs": b.abs().max().item()}


# ---- training ------------------------------------------------------------------------------------

def lr_at(step, args):
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    t = (step - args.warmup) / max(1, args.steps - args.warmup)
    return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))


def sync(torch, device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def make_optimizer(torch, args, params, device):
    """(fp32 master copies of @p params with zero gradients, AdamW over them): weight decay on the
    matrices only. The model computes in bf16 (mixed precision); the step runs on the masters."""
    master = [p.detach().float().clone() for p in params]
    for m in master:
        m.grad = torch.zeros_like(m)
    groups = [{"params": [m for m in master if m.ndim >= 2], "weight_decay": args.weight_decay},
              {"params": [m for m in master if m.ndim < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.95), eps=1e-8,
                            **({"fused": True} if device.type == "cuda" else {}))
    return master, opt


def record_step_times(rec, skip, tokens):
    """The step times' summary in @p rec past the first @p skip steps (warm-up, compilation):
    their count, mean and median, and @p tokens per step over their sum as tokens/s. False when no
    step is left to time."""
    timed = rec["step_ms"][skip:]
    if not timed:
        return False
    rec["timed_steps"] = len(timed)
    rec["step_ms_mean"] = statistics.fmean(timed)
    rec["step_ms_median"] = statistics.median(timed)
    rec["tokens_per_s"] = tokens * len(timed) / (sum(timed) / 1e3)
    return True


def record_step(rec, step, steps, loss, gnorm, ms, tokens):
    """Appends step @p step's loss, gradient norm and time to @p rec and prints every fifteenth of
    @p steps; False (with rec["diverged_at"]) when the loss is not finite: the run stops there."""
    rec["loss"].append(loss)
    rec["grad_norm"].append(gnorm)
    rec["step_ms"].append(ms)
    if not math.isfinite(loss):
        rec["diverged_at"] = step
        print("  step %d: loss %s: stopped" % (step, loss))
        return False
    if step % max(1, steps // 15) == 0 or step == steps - 1:
        print("  step %4d  loss %.4f  grad norm %.3f  %.1f ms  %.0f tokens/s" % (
            step, loss, gnorm, ms, tokens / ms * 1e3))
    return True
