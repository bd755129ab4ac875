#!/usr/bin/env python3
"""The training demo with context parallelism: bench/pytorch/torch_train.py's model, data and optimizer,
one sequence split over P GPUs, its attention by flashladder.ring_attention; the loss curve must
match the one-GPU run's.

Run with torchrun, one process per GPU (NVLink multicast off, as for rung 12's launcher):

    NCCL_NVLS_ENABLE=0 torchrun --standalone --nproc-per-node 4 bench/pytorch/torch_train_cp.py --out DIR \\
        --compare DIR1/torch_train.json
    python3 -m torch.distributed.run --standalone --nproc-per-node 2 bench/pytorch/torch_train_cp.py \\
        --cpu --quick --out DIR                      # the whole CP path on the CPU (gloo)

(PYTHONPATH=build/release/python, or --package DIR, for the flashladder package.) Without torchrun
it runs as one rank.

What context parallelism (CP) does to a training step, with P ranks:

  replicated  the parameters, their fp32 master copies and AdamW's state: every rank holds the whole
              model and takes the same optimizer step.
  sharded     the sequence. Every batch of windows [batch, seqlen] is cut along seqlen by
              flashladder.ring_shard (zigzag: 2P chunks, rank r holds chunks r and 2P-1-r, the same
              causal work on every rank): the input ids, the labels and the position ids. Every
              layer but attention works token by token, so a rank runs the embedding, the norms,
              the MLPs and the LM head on its rows alone. Attention is the one layer where a token
              needs the others: flashladder.ring_attention passes the K/V shards around the ring
              (causal over the whole sequence) and its backward pass brings every rank the
              gradient of its own rows' K and V (flashladder/_ring.py draws both rings).
  labels      shifted BEFORE sharding: the label of position t is token t+1 of the window, and
              after the cut t+1 may live on another rank (a chunk's last row). So the shift is done
              on the whole window (torch_train.Batches gives inputs and labels) and both are cut
              with the same plan: row i of a rank's labels is row i's next token.
  positions   global. RoPE rotates q and k by a token's position in the sequence. transformers
              takes arange(rows) when given none, which for a shard means 0 .. seqlen/P-1: right
              for rank 0's first chunk only. Each rank passes ring_shard(arange(seqlen)), its
              rows' global positions; the attention function refuses any other.
  loss        the global mean. Each rank sums its rows' token losses and divides by the batch's
              TOTAL token count, batch x seqlen (not by its own rows): the P parts then add up to
              the one-GPU loss, and since a gradient is linear, the sum over ranks of the gradients
              of (local sum / total) is the one-GPU gradient. (A mean over each rank's own rows,
              averaged over ranks as DDP does, equals it only when every rank has as many tokens.)
  all_reduce  after the backward pass: the per-rank gradients, copied into one fp32 buffer (so
              the sum rounds in fp32, not bf16), summed by one all_reduce; the reported loss
              likewise. Then clipping on the summed gradient and the same AdamW step on every
              rank's fp32 master weights: the same inputs to the same operations, so the weights
              stay identical bit for bit (checked at the end against rank 0's broadcast).

What changes from one GPU is the order of sums only: the ring merges partial softmaxes by their
LSE, the loss and the gradients are summed in P parts. In fp32 (--cpu) the curves agree to a few
ulp of the loss (1e-6; tests/python/test_train_cp.py); in bf16 they should stay within the noise
that two one-GPU runs of the same kernels show
(torch_train.py's SDPA flash run and its rerun, reported when --compare has them).

Per step: the loss, the gradient norm, the step time (synchronised; the slowest rank's) and the
held-out loss every --eval-every steps (the held-out windows sharded the same way); steady tokens/s
of the whole batch over the steps after --timing-skip. Data preparation, the cut included, is
outside the timed step, as torch_train.py's is. Gradients are summed after the backward pass, not
overlapped with it (DDP's buckets would hide part of that all_reduce).

On rank 0 writes <out>/torch_train_cp.json (device, world size, versions, commit, date, config,
the shards, curves, timings, the weights check and, with --compare FILE, the per-step loss
differences against FILE's ladder run: a torch_train.json, whose SDPA flash run and its rerun give
the noise yardstick, or another torch_train_cp.json, e.g. P = 1) and <out>/torch_train_cp.log; on a
GPU adds its command line to <out>/meta.json as torch_train.py does.

--cpu runs on the CPU with the gloo backend and flashladder._ring.ReferenceBackend (plain torch
math; fp32 unless --dtype says otherwise) with --quick; on CUDA the package's rungs run the ring
(--backend reference: the plain math there too).
"""

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import runinfo  # noqa: E402  bench/pytorch/runinfo.py
import torch_train as tt  # noqa: E402  bench/pytorch/torch_train.py: its flags, its summary, its loss rule
import train_model as tm  # noqa: E402  bench/pytorch/train_model.py: the corpus, the windows, the model, the optimizer

# The name the ring is registered under (attn_implementation=...): no "flash" in it (see
# torch_train.LADDER_NAME).
RING_NAME = "ladder_ring"
# Steps at the end of the curves that their tail is measured over (torch_train.tail_gap's n).
TAIL = 50
# Keys of the "config" objects that must agree for two curves to be the same training run.
SAME_RUN = ("model", "precision", "batch", "seqlen", "steps", "lr", "warmup", "grad_clip", "optimizer", "seed")


class Refused(ValueError):
    """Something the ring's attention function does not implement: one line, on every rank alike
    (every rank runs the same model on the same kind of batch)."""


# ---- transformers' attention on the ring -----------------------------------------------------------

class RingAttention:
    """An AttentionInterface function on flashladder.ring_attention for sequences of ``seqlen``
    tokens cut over the default process group: query [batch, heads_q, rows, head_dim], key and
    value [batch, heads_kv, rows, head_dim] (GQA: heads_kv divides heads_q; the ring takes them as
    they are) transposed to the package's [batch, rows, heads, head_dim]; returns (attn_output
    [batch, rows, heads_q, head_dim], None), what transformers reshapes into the o_proj input.
    Causal only, no mask, no dropout, no window, softcap, sinks, packed rows or KV cache: each
    refused with one line."""

    # Keyword arguments read here; flashladder._hf.IGNORED lists those that cannot change the
    # result (a KV cache can: it is refused below when one is passed).
    ACCEPTED = ("scaling", "dropout", "is_causal", "position_ids")
    CACHE = ("past_key_values", "past_key_value")

    def __init__(self, fl, seqlen, sharding, backend):
        from flashladder import _hf

        self.fl, self.seqlen, self.sharding, self.backend = fl, seqlen, sharding, backend
        self.ignored = tuple(n for n in _hf.IGNORED if n not in self.CACHE)
        self.brief = _hf._brief
        self.calls = 0
        self._checked = [None, -1]  # the last position_ids found right (one read per forward call)

    def register(self, name=RING_NAME):
        """attn_implementation=name runs this function, with transformers' FlashAttention mask
        function beside it: no mask when every token is valid (none for causal), the 2D padding
        mask otherwise, which then reaches __call__ and is refused (without a mask function
        transformers would drop a padding mask silently)."""
        from transformers import AttentionInterface
        from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, flash_attention_mask

        def attention_forward(module, query, key, value, attention_mask, **kwargs):
            return self(module, query, key, value, attention_mask, **kwargs)

        AttentionInterface.register(name, attention_forward)
        ALL_MASK_ATTENTION_FUNCTIONS.register(name, flash_attention_mask)
        return name

    def __call__(self, module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
        if attention_mask is not None:
            raise Refused("ring attention: a mask of shape %s (padding or custom): the ring runs causal attention "
                          "over whole windows only" % (tuple(attention_mask.shape),))
        if dropout:
            raise Refused("ring attention: no attention dropout, got dropout=%s" % (dropout,))
        causal = kwargs.get("is_causal")
        if not (getattr(module, "is_causal", True) if causal is None else causal):
            raise Refused("ring attention: causal only (this model's attention is bidirectional)")
        for name, value_ in kwargs.items():
            if name in self.ACCEPTED or name in self.ignored:
                continue
            if value_ is None or (isinstance(value_, (bool, int, float)) and not value_):
                continue  # not in use (sliding_window=None, softcap=0.0, ...)
            raise Refused("ring attention: %s=%s, which it does not implement (a window, softcap, sinks, packed "
                          "rows, a KV cache); use another attn_implementation" % (name, self.brief(value_)))
        if kwargs.get("position_ids") is not None:
            self.check_positions(kwargs["position_ids"])
        q, k, v = query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2)
        out = self.fl.ring_attention(q, k, v, self.seqlen, causal=True, softmax_scale=scaling,
                                     sharding=self.sharding, _backend=self.backend)
        self.calls += 1
        return out, None

    def check_positions(self, position_ids):
        """Refuses position ids that are not this rank's global positions (the mistake that trains
        without an error: RoPE would rotate every shard as if it began the sequence). A model
        passes one tensor to every layer: one device-to-host read per forward call."""
        import torch

        version = getattr(position_ids, "_version", 0)
        if self._checked[0] is position_ids and self._checked[1] == version:
            return
        want = self.fl.ring_shard(torch.arange(self.seqlen, device=position_ids.device), self.seqlen,
                                  sharding=self.sharding, dim=0)
        if position_ids.shape[-1] != want.numel() or not bool((position_ids == want).all()):
            raise Refused("ring attention: position_ids are not this rank's global positions "
                          "(ring_shard(arange(%d)): %s...); pass them to the model" % (
                              self.seqlen, want[:4].tolist()))
        self._checked[:] = [position_ids, version]


# ---- the process group ------------------------------------------------------------------------------

def init_group(torch, dist, args):
    """(rank, ranks, device) of this process in the default group torchrun describes (RANK,
    WORLD_SIZE, LOCAL_RANK; without them a group of one): NCCL with one GPU per rank, gloo with
    --cpu."""
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink multicast stays off (before NCCL starts)
    if args.cpu:
        device, backend = torch.device("cpu"), "gloo"
    else:
        local = int(os.environ.get("LOCAL_RANK", "0"))
        if local >= torch.cuda.device_count():
            raise Refused("local rank %d but %d GPUs visible (one process per GPU)"
                          % (local, torch.cuda.device_count()))
        torch.cuda.set_device(local)
        device, backend = torch.device("cuda", local), "nccl"
    kw = {"device_id": device} if device.type == "cuda" else {}
    if "RANK" in os.environ:
        dist.init_process_group(backend, **kw)
    else:  # one rank, no torchrun: an in-process store
        dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1, **kw)
    return dist.get_rank(), dist.get_world_size(), device


def command_line(ranks):
    """This run's command as torchrun takes it (runinfo.command_line's, launched by torchrun)."""
    cmd = runinfo.command_line()
    if "RANK" not in os.environ:
        return cmd
    return cmd.replace("python3 ", "NCCL_NVLS_ENABLE=0 torchrun --standalone --nproc-per-node %d " % ranks, 1)


# ---- training -----------------------------------------------------------------------------------

def shard(fl, args, *tensors):
    """This rank's rows of each [batch, seqlen] tensor (the plan's local order)."""
    return tuple(fl.ring_shard(t, args.seqlen, sharding=args.sharding) for t in tensors)


def evaluate_cp(torch, F, dist, model, batches, positions, total):
    """The held-out loss: every batch's token losses summed over the ranks, / its token count."""
    model.eval()
    losses = []
    with torch.no_grad():
        for x, y in batches:
            logits = model(input_ids=x, position_ids=positions, use_cache=False).logits
            part = F.cross_entropy(logits.float().view(-1, tm.VOCAB), y.view(-1), reduction="sum") / total
            dist.all_reduce(part)
            losses.append(part.item())
    model.train()
    return sum(losses) / len(losses)


def weights_check(torch, dist, master):
    """Every rank's fp32 master weights against rank 0's (broadcast), bit for bit, and the spread
    of a float64 checksum over the ranks."""
    differ, worst = 0, 0.0
    for m in master:
        ref = m.detach().clone()
        dist.broadcast(ref, 0)
        if not torch.equal(ref, m):
            differ += 1
            worst = max(worst, (ref - m).abs().max().item())
    checksum = sum(m.double().sum() for m in master)
    stats = torch.stack([torch.tensor(float(differ), dtype=torch.float64), torch.tensor(worst, dtype=torch.float64),
                         checksum.cpu(), -checksum.cpu()]).to(master[0].device)
    dist.all_reduce(stats, op=dist.ReduceOp.MAX)
    differ_max, worst, high, low = stats[0].item(), stats[1].item(), stats[2].item(), -stats[3].item()
    return {"identical": differ_max == 0, "tensors": len(master), "tensors_differing": int(differ_max),
            "max_abs_diff_vs_rank0": worst, "checksum": checksum.item(), "checksum_spread": high - low,
            "how": "every rank's fp32 master weights against rank 0's broadcast (torch.equal), and the max - min "
                   "over ranks of the float64 sum of all of them"}


def train_cp(torch, dist, fl, args, ring, state, data, device, dtype, ranks):
    """The one training run (torch_train.py's loop, its batches cut over the ranks): its record."""
    import torch.nn.functional as F

    name = "ladder_ring_p%d" % ranks
    print("\n== run %s (attn_implementation=%s, %d rank%s, %s, %s)" % (
        name, RING_NAME, ranks, "s" if ranks > 1 else "", args.sharding, type(ring.backend).__name__))
    torch.manual_seed(args.seed)
    model = tm.build_model(torch, args, RING_NAME, state, dtype, device).train()
    params = list(model.parameters())
    master, opt = tm.make_optimizer(torch, args, params, device)
    # The summed gradient lives in one fp32 buffer: one all_reduce per step, and the master
    # weights' gradients are views of it.
    flat = torch.zeros(sum(m.numel() for m in master), dtype=torch.float32, device=device)
    for m, g in zip(master, flat.split([m.numel() for m in master])):
        m.grad = g.view_as(m)
    tokens = args.batch * args.seqlen  # the whole batch's: the loss's denominator on every rank
    positions, = shard(fl, args, torch.arange(args.seqlen, device=device).expand(args.batch, -1))
    heldout = [shard(fl, args, x, y) for x, y in data.heldout()]
    rec = {"name": name, "attn_implementation": RING_NAME, "ranks": ranks, "loss": [], "grad_norm": [],
           "step_ms": [], "heldout": []}
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    for step in range(args.steps):
        if step % args.eval_every == 0:
            rec["heldout"].append([step, evaluate_cp(torch, F, dist, model, heldout, positions, tokens)])
        for g in opt.param_groups:
            g["lr"] = tm.lr_at(step, args)
        x, y = shard(fl, args, *data.step(step))  # y: the window's next tokens, cut like x
        calls = ring.calls
        tm.sync(torch, device)
        t0 = time.perf_counter()
        logits = model(input_ids=x, position_ids=positions, use_cache=False).logits
        if step == 0:
            rec["ring_attention_calls_per_forward"] = ring.calls - calls
        loss = F.cross_entropy(logits.float().view(-1, tm.VOCAB), y.view(-1), reduction="sum") / tokens
        loss.backward()
        with torch.no_grad():
            for m, p in zip(master, params):
                m.grad.copy_(p.grad)
            total = loss.detach().reshape(1).clone()
            dist.all_reduce(flat)  # the one-GPU gradient: the sum of the ranks' parts
            dist.all_reduce(total)
            gnorm = torch.nn.utils.clip_grad_norm_(master, args.clip)
            opt.step()
            for m, p in zip(master, params):
                p.copy_(m)
        model.zero_grad(set_to_none=True)
        tm.sync(torch, device)
        ms = (time.perf_counter() - t0) * 1e3
        # The same summed loss on every rank: a loss that is not finite stops them all.
        if not tm.record_step(rec, step, args.steps, total.item(), gnorm.item(), ms, tokens):
            break
    if "diverged_at" not in rec:
        rec["heldout"].append([args.steps, evaluate_cp(torch, F, dist, model, heldout, positions, tokens)])
    # Step times: the slowest rank's (the all_reduce holds the others there, but not the optimizer).
    slowest = torch.tensor(rec["step_ms"], dtype=torch.float64, device=device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    rec["step_ms"] = slowest.tolist()
    rec["step_ms_rule"] = "per step, the slowest rank's (synchronised before and after the step)"
    timed = tm.record_step_times(rec, args.timing_skip, tokens)
    if timed:
        rec["tokens_per_s_per_rank"] = rec["tokens_per_s"] / ranks
    if device.type == "cuda":
        peak = torch.tensor([torch.cuda.max_memory_allocated(device) / 2**30], device=device)
        dist.all_reduce(peak, op=dist.ReduceOp.MAX)
        rec["peak_memory_gib"] = peak.item()
    rec["final_heldout"] = rec["heldout"][-1][1] if rec["heldout"] else None
    print("  held-out loss: %s" % ", ".join("%d: %.4f" % (s, l) for s, l in rec["heldout"]))
    if timed:
        print("  steady state (steps %d-%d): %.2f ms/step, %.0f tokens/s (%.0f per rank)" % (
            args.timing_skip, args.timing_skip + rec["timed_steps"] - 1, rec["step_ms_mean"], rec["tokens_per_s"],
            rec["tokens_per_s_per_rank"]))
    weights = weights_check(torch, dist, master)
    print("  weights: %s (%d tensors; max |w - rank 0's| %.3g; checksum spread %.3g)" % (
        "identical on every rank" if weights["identical"] else "DIFFER on %d tensors" % weights["tensors_differing"],
        weights["tensors"], weights["max_abs_diff_vs_rank0"], weights["checksum_spread"]))
    return rec, weights


# ---- the comparison ---------------------------------------------------------------------------------

def curve_gap(a, b, n=TAIL):
    """|a - b| per step of two loss curves cut to their common steps: max over all, max over the
    last n, and the mean over the last n (torch_train.tail_gap, the tail gap its summary gives)."""
    steps = min(len(a["loss"]), len(b["loss"]))
    d = [x - y for x, y in zip(a["loss"][:steps], b["loss"][:steps])]
    if not d:
        return {"steps_compared": 0}, d
    gap = {"steps_compared": steps, "max_abs": max(abs(x) for x in d),
           "max_abs_last%d" % n: max(abs(x) for x in d[-n:]),
           "tail_gap_last%d" % n: tt.tail_gap({"loss": a["loss"][:steps]}, {"loss": b["loss"][:steps]}, n)}
    if a.get("final_heldout") is not None and b.get("final_heldout") is not None:
        gap["final_heldout_gap"] = abs(a["final_heldout"] - b["final_heldout"])
    return gap, d


def compare(result, path):
    """The run's loss curve against FILE's ladder run (a torch_train.json; its SDPA flash run when it
    has none, a run without CUDA) or FILE's ring run (a torch_train_cp.json), judged by
    torch_train.py's rule: the last held-out losses within max(LOSS_REL x the reference's, 3 x the
    SDPA rerun's gap) when FILE has a rerun."""
    with open(path, encoding="utf-8") as f:
        other = json.load(f)
    runs = {r["name"]: r for r in other.get("runs", [])}
    out = {"file": path, "schema": other.get("schema"), "git_sha": other.get("git_sha"),
           "device": other.get("device", {}).get("name")}
    if str(other.get("schema", "")).startswith("flashladder.torch_train_cp/"):
        ref = other["runs"][0]
    elif "ladder" in runs:
        ref = runs["ladder"]
    elif "sdpa_flash" in runs:
        ref = runs["sdpa_flash"]
        out["note"] = "no ladder run in it (a run without CUDA): against its SDPA flash run"
    else:
        out["error"] = "no ladder, SDPA flash or ring run in it"
        return out
    out["against"] = ref["name"]
    out["against_ranks"] = ref.get("ranks", 1)
    mine = result["runs"][0]
    out["config_differs"] = [k for k in SAME_RUN if result["config"].get(k) != other.get("config", {}).get(k)]
    if result["data"].get("sha256") != other.get("data", {}).get("sha256"):
        out["config_differs"].append("data")
    gap, d = curve_gap(mine, ref)
    out.update(gap)
    out["loss_diff"] = d
    rerun = runs.get("sdpa_flash_rerun")
    if rerun and "sdpa_flash" in runs:
        out["noise"] = dict(curve_gap(rerun, runs["sdpa_flash"])[0], what="SDPA flash against its rerun in %s" % path)
    if "final_heldout_gap" in out:
        noise = out.get("noise", {}).get("final_heldout_gap")
        tol = max(tt.LOSS_REL * ref["final_heldout"], 3 * noise if noise is not None else 0.0)
        out["loss_tolerance"] = tol
        out["loss_tolerance_rule"] = ("last held-out loss within max(%g x the reference's, 3 x the SDPA rerun's gap), "
                                      "torch_train.py's rule" % tt.LOSS_REL)
        out["loss_match"] = out["final_heldout_gap"] <= tol and not out["config_differs"]
    return out


# ---- main ---------------------------------------------------------------------------------------

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    tt.add_training_args(ap, "torch_train_cp.json and torch_train_cp.log",
                         seqlen_help="tokens of one sequence, over all the ranks")
    ap.add_argument("--dtype", choices=("bf16", "fp16", "fp32"),
                    help="default bf16 (fp32 with --cpu); fp32 runs on the reference backend only")
    ap.add_argument("--sharding", choices=("zigzag", "contiguous"), default="zigzag",
                    help="rung 12's plan for cutting the sequence (default zigzag)")
    ap.add_argument("--backend", choices=("rungs", "reference"),
                    help="the ring's attention: the package's rungs (CUDA default) or plain torch math "
                         "(flashladder._ring.ReferenceBackend; the --cpu default)")
    ap.add_argument("--compare", metavar="FILE",
                    help="a torch_train.json (its ladder run) or torch_train_cp.json to compare the loss curve with")
    ap.add_argument("--cpu", action="store_true",
                    help="run on the CPU with gloo and the reference backend (with --quick)")
    args = ap.parse_args(argv)
    tm.apply_defaults(args)
    args.dtype = args.dtype or ("fp32" if args.cpu else "bf16")
    args.backend = args.backend or ("reference" if args.cpu else "rungs")
    try:
        import torch
        import torch.distributed as dist
        import transformers
    except ImportError as e:
        print("torch_train_cp.py: needs PyTorch and transformers (%s): nothing measured" % e)
        return 0
    if not args.cpu and not torch.cuda.is_available():
        print("torch_train_cp.py: no CUDA device: nothing measured (--cpu --quick runs the same path on the CPU "
              "with gloo and the reference backend)")
        return 0
    if args.cpu and not args.quick:
        print("torch_train_cp.py: --cpu runs the tiny model only (add --quick): nothing measured")
        return 0
    if args.dtype == "fp32" and args.backend == "rungs":
        print("torch_train_cp.py: the rungs take fp16 and bf16: fp32 runs on --backend reference")
        return 2
    if args.cpu and args.backend == "rungs":
        print("torch_train_cp.py: the rungs run on CUDA tensors: --cpu runs on --backend reference")
        return 2
    if not dist.is_available():
        print("torch_train_cp.py: this PyTorch has no torch.distributed: nothing measured")
        return 0
    try:
        rank, ranks, device = init_group(torch, dist, args)
    except Refused as e:
        print("torch_train_cp.py: %s" % e)
        return 2
    try:
        if rank == 0:
            os.makedirs(args.out, exist_ok=True)
            with runinfo.Log(os.path.join(args.out, "torch_train_cp.log")):
                return run(torch, dist, transformers, args, rank, ranks, device)
        with open(os.devnull, "w") as quiet:  # rank 0 speaks for all (every rank reaches the same values)
            sys.stdout = quiet
            try:
                return run(torch, dist, transformers, args, rank, ranks, device)
            finally:
                sys.stdout = sys.__stdout__
    except Refused as e:
        print("torch_train_cp.py: refused: %s" % e, file=sys.stderr)
        return 2
    finally:
        dist.destroy_process_group()


def run(torch, dist, transformers, args, rank, ranks, device):
    fl = runinfo.import_flashladder(args.package)
    if fl is None:
        raise Refused("the flashladder package is not built or not importable")
    from flashladder import _ring

    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    names = [None] * ranks
    dist.all_gather_object(names, torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU")
    print("torch_train_cp.py: %d rank%s (%s, %s); PyTorch %s, transformers %s; flashladder %s" % (
        ranks, "s" if ranks > 1 else "", ", ".join(sorted(set(names))), dist.get_backend(), torch.__version__,
        transformers.__version__, runinfo.package_path(fl)))
    backend = _ring.ReferenceBackend() if args.backend == "reference" else _ring.RungBackend()
    ring = RingAttention(fl, args.seqlen, args.sharding, backend)
    ring.register(RING_NAME)
    plans = [_ring._schedule(args.sharding, True, args.seqlen, ranks, r)[0] for r in range(ranks)]
    for r, p in enumerate(plans):
        print("  rank %d: %d rows, %s" % (r, p["shard_len"], _ring._describe_shard(p)))

    train_bytes, held_bytes, data_desc = tm.load_corpus()
    print("data: %d files, %.1f MB (%.1f MB held out), sha256 %s" % (
        data_desc["files"], data_desc["bytes"] / 1e6, data_desc["heldout_bytes"] / 1e6, data_desc["sha256"][:12]))
    data = tm.Batches(torch, train_bytes, held_bytes, args, device)

    # torch_train.py's init (the same seed on the same kind of device), then rank 0's copy on every
    # rank, so that the ranks start identical whatever their generators did.
    state, n_params = tm.initial_state(torch, args, device)
    differed = 0
    for t in state.values():
        ref = t.clone()
        dist.broadcast(ref, 0)
        differed += not torch.equal(ref, t)
        t.copy_(ref)
    print("model: %.1fM parameters, %d layers, hidden %d, %d/%d heads of %d, MLP %d, seqlen %d (%s over %d ranks), "
          "batch %d, %s" % (n_params / 1e6, args.layers, args.hidden, args.heads, args.kv_heads, args.head_dim,
                            args.intermediate, args.seqlen, args.sharding, ranks, args.batch, args.dtype))

    result = {"schema": "flashladder.torch_train_cp/1", "date": runinfo.now(), **runinfo.git_info(),
              "command": command_line(ranks),
              "versions": dict(runinfo.versions(), flashladder=runinfo.package_path(fl)),
              "quick": args.quick, "world_size": ranks}
    if device.type == "cuda":
        p = torch.cuda.get_device_properties(device)
        result["device"] = {"name": p.name, "cc": "%d.%d" % (p.major, p.minor), "sms": p.multi_processor_count,
                            "memory_gib": round(p.total_memory / 2**30, 1), "count": ranks, "names": names,
                            "process_group": dist.get_backend()}
    else:
        result["device"] = {"name": "CPU", "count": ranks, "process_group": dist.get_backend()}
    result["config"] = tt.config_record(args, n_params)
    result["context_parallel"] = {
        "ranks": ranks, "sharding": args.sharding, "backend": type(backend).__name__, "seqlen": args.seqlen,
        "shards": [{"rank": r, "rows": p["shard_len"], "chunks": _ring._describe_shard(p)}
                   for r, p in enumerate(plans)],
        "init": "torch_train.initial_state on every rank, then rank 0's broadcast (%d tensors differed before)"
                % differed,
        "loss": "each rank's token losses summed / the batch's tokens (%d), all_reduced (SUM)"
                % (args.batch * args.seqlen),
        "gradients": "copied to one fp32 buffer, one all_reduce (SUM) per step, then clipping and AdamW on every rank",
        "positions": "ring_shard(arange(seqlen)): the global positions of each rank's rows"}
    result["data"] = data_desc

    rec, weights = train_cp(torch, dist, fl, args, ring, state, data, device, dtype, ranks)
    result["runs"] = [rec]
    result["weights"] = weights
    if args.compare and rank == 0:
        result["compare"] = compare(result, args.compare)
    if rank == 0:
        runinfo.write_json(os.path.join(args.out, "torch_train_cp.json"), result)
        if device.type == "cuda":
            runinfo.update_meta(args.out, result["device"]["name"], result, result["command"])
        print_summary(result)
    return 0 if weights["identical"] else 1


def print_summary(result):
    r = result["runs"][0]
    print("\n== summary (%s, %d rank%s)" % (result["device"]["name"], result["world_size"],
                                           "s" if result["world_size"] > 1 else ""))
    if r.get("tokens_per_s"):
        print("  %-17s %8.2f ms/step  %9.0f tokens/s (%.0f per rank)  last held-out loss %.4f" % (
            r["name"], r["step_ms_mean"], r["tokens_per_s"], r["tokens_per_s_per_rank"], r["final_heldout"]))
    w = result["weights"]
    print("  weights: %s" % ("identical on every rank" if w["identical"] else "DIFFER across ranks"))
    c = result.get("compare")
    if not c:
        return
    if "error" in c:
        print("  compare: %s: %s" % (c["file"], c["error"]))
        return
    print("  against %s's %s run (%d rank%s)%s:" % (c["file"], c["against"], c["against_ranks"],
                                                   "s" if c["against_ranks"] > 1 else "",
                                                   "; " + c["note"] if "note" in c else ""))
    if c["config_differs"]:
        print("    NOT the same run: %s differ" % ", ".join(c["config_differs"]))
    for name, g in (("ring", c), ("noise", c.get("noise"))):
        if g and g.get("steps_compared"):
            print("    %-6s max |dloss| %.3e over %d steps, %.3e over the last %d; tail gap %.3e%s" % (
                name, g["max_abs"], g["steps_compared"], g["max_abs_last%d" % TAIL], min(TAIL, g["steps_compared"]),
                g["tail_gap_last%d" % TAIL],
                "; last held-out gap %.4f" % g["final_heldout_gap"] if "final_heldout_gap" in g else ""))
    if "loss_match" in c:
        print("    loss curves: last held-out gap %.4f (tolerance %.4f): %s" % (
            c["final_heldout_gap"], c["loss_tolerance"], "match" if c["loss_match"] else "DIFFER"))


if __name__ == "__main__":
    sys.exit(main())
