#!/usr/bin/env python3
"""PyTorch FlexAttention on ladder_bench's masks families (rung 16's masks and score modifiers).

Runs torch.nn.attention.flex_attention.flex_attention under torch.compile on the same shapes
and names as `ladder_bench --fl_family=masks,masks-backward`:

  masks:          head_dim 128, 16 / 16 heads, batch x seqlen = 32768 tokens, bf16 or fp16:
                  causal (N 8k, 32k), window4096 (query i sees keys i - 4096 ... i; N 8k, 32k),
                  docs (N 32k, causal within documents of 512 ... 8k tokens, document_starts,
                  seed 2024), prefix2048 (keys < 2048 seen by every query, the rest causally;
                  N 8k), softcap50 (causal, 50 tanh(s / 50)), alibi (causal, the paper's slopes),
                  sinks (causal, one sink logit per head: no FlexAttention counterpart, listed
                  as skipped)
  masks-backward: the same shapes, the backward pass alone (torch_sdpa.py's run_backward: the
                  forward once, untimed, graph retained; torch.autograd.grad timed)

"torch_flex/masks/d128/window4096/N32768", "torch_flex/masks-backward/d128/docs/N32768". On the
plain causal cells it also times PyTorch SDPA's flash and cuDNN backends through torch_sdpa.py's
own functions ("torch_cudnn/masks/d128/causal/N8192"), the dense reference.

What FlexAttention is given, as it is meant to be used: the mask as a mask_mod(b, h, q_idx, kv_idx)
turned into a BlockMask by create_block_mask once per shape (B = H = None: one mask for every
batch row and head; BLOCK_SIZE 128, its default) OUTSIDE the time, and the modifier as a
score_mod(score, b, h, q_idx, kv_idx); the compiled flex_attention is called once before the
time (compilation, autotuning) and torch_sdpa.py's Bench times it (warm-up calls, L2 flushed
before each timed call, CUDA events, median). Not timed: create_block_mask, compilation.

Metrics as ladder_bench's (common/src/problem.cpp): FLOPs = 4 x d x the unmasked (query, key)
pairs of each row's key span (masks.h's row_span), 2.5 x that for the backward pass; bytes as
torch_sdpa.py's bytes_of for the dense forward / backward pass of the same shape.

Usage: python3 bench/pytorch/torch_flex.py [--out FILE] [--family masks,masks-backward] [--dtype fp16|bf16]
                                   [--backends flash,cudnn] [--iters N] [--quick] [--list]
--list prints the shapes (name, then the document starts where there are some) and needs no
PyTorch. Exits 0 with a message when PyTorch, a CUDA GPU or FlexAttention is missing.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import runinfo  # noqa: E402
import torch_sdpa  # noqa: E402  (imports no PyTorch at module level)

FAMILIES = ("masks", "masks-backward")
TOKENS = 32768  # batch x seqlen of every shape
HEADS = 16
HEAD_DIM = 128
WINDOW = 4096  # window_size (4096, 0)
PREFIX = 2048  # prefix-LM's bidirectional keys
SOFTCAP = 50.0
DOCS = dict(lo=512, hi=8192, seed=2024)  # document_starts' lengths and stream
BLOCK_SIZE = 128  # create_block_mask's default, written out so the record says it


def document_starts(n, lo, hi, seed):
    """ladder_bench.cpp's document_starts: lengths drawn in order from mixed_lengths' stream until
    they fill n tokens exactly (the last document takes the rest when it fits in hi, else the one
    before it leaves lo tokens for the last). Returns the starts, 0 first and n last."""
    draws = torch_sdpa.mixed_lengths(n // lo + 1, lo, hi, seed)
    starts = [0]
    i = 0
    while starts[-1] < n:
        rest = n - starts[-1]
        length = draws[i]
        if rest <= hi and (length >= rest or rest - length < lo):
            length = rest
        elif rest - length < lo:
            length = rest - lo
        starts.append(starts[-1] + length)
        i += 1
    return starts


def alibi_slope(h, heads):
    """masks.h's alibi_slope (Press et al., 2022): 2^(-8 (h + 1) / n) over the largest power of two
    n <= heads, the heads beyond it interleaved at half steps."""
    n = 1
    while 2 * n <= heads:
        n *= 2
    if h < n:
        return 2.0 ** (-8.0 * (h + 1) / n)
    return 2.0 ** (-4.0 * (2 * (h - n) + 1) / n)


def sink_logit(h):
    """The sinks case's logit of query head h (ladder_bench.cpp's fixed pattern)."""
    return 0.5 * (h % 4) - 0.25


def mask_shapes(family):
    """ladder_bench's masks family (or masks-backward): the cases in its order."""
    def shape(case, n, **mods):
        s = dict(family=family, case=case, batch=TOKENS // n, seqlen_q=n, seqlen_k=n, heads_q=HEADS,
                 heads_kv=HEADS, head_dim=HEAD_DIM, causal=1, window_left=-1, window_right=-1, prefix=0,
                 softcap=0.0, alibi=0, sinks=0, doc_starts=None)
        s.update(mods)
        return s

    out = [shape("causal", n) for n in (8192, 32768)]
    out += [shape("window%d" % WINDOW, n, window_left=WINDOW, window_right=0) for n in (8192, 32768)]
    out.append(shape("docs", TOKENS, doc_starts=document_starts(TOKENS, DOCS["lo"], DOCS["hi"], DOCS["seed"])))
    out.append(shape("prefix%d" % PREFIX, 8192, causal=0, prefix=PREFIX))  # causal past the prefix
    out.append(shape("softcap%d" % SOFTCAP, 8192, softcap=SOFTCAP))
    out.append(shape("alibi", 8192, alibi=1))
    out.append(shape("sinks", 8192, sinks=1))
    return out


def shape_name(s):
    """ "masks/d128/window4096/N32768", as ladder_bench's Shape::name."""
    return "%s/d%d/%s/N%d" % (s["family"], s["head_dim"], s["case"], s["seqlen_q"])


def row_span(s, i):
    """The keys [lo, hi] query i sees (masks.h's row_span for self-attention: the diagonal is i;
    causal is a right window of 0)."""
    n = s["seqlen_k"]
    lo, hi = 0, n - 1
    right = 0 if s["causal"] else s["window_right"]
    if s["prefix"] > 0:
        hi = min(hi, max(s["prefix"] - 1, i))
    if s["window_left"] >= 0:
        lo = max(lo, i - s["window_left"])
    if right >= 0:
        hi = min(hi, i + right)
    if s["doc_starts"]:
        d = max(k for k in range(len(s["doc_starts"]) - 1) if s["doc_starts"][k] <= i)
        lo, hi = max(lo, s["doc_starts"][d]), min(hi, s["doc_starts"][d + 1] - 1)
    return lo, hi


def unmasked_pairs(s):
    """(query, key) pairs not masked over the whole batch and every head (problem.cpp's)."""
    starts = s["doc_starts"]
    if starts:  # documents: causal within each, in closed form (row_span's bisection is slow here)
        per = sum((b - a) * (b - a + 1) // 2 for a, b in zip(starts, starts[1:]))
    else:
        per = 0
        for i in range(s["seqlen_q"]):
            lo, hi = row_span(s, i)
            per += max(0, hi - lo + 1)
    return per * s["batch"] * s["heads_q"]


def flops_of(s):
    """4 d x the unmasked pairs; 2.5 x that for the backward pass (ladder_bench's convention)."""
    return 4.0 * s["head_dim"] * unmasked_pairs(s) * (2.5 if s["family"] == "masks-backward" else 1.0)


def bytes_of(s):
    """torch_sdpa.py's bytes of the dense pass of this shape (a mask adds no compulsory bytes)."""
    return torch_sdpa.bytes_of(dict(s, family="backward" if s["family"] == "masks-backward" else "prefill"))


def flex_mods(torch, s):
    """(mask_mod, score_mod) of shape @p s for FlexAttention; score_mod None where there is none.

    flex_attention multiplies Q K^T by `scale` (1 / sqrt(d) by default) BEFORE score_mod (its math
    reference, torch/_higher_order_ops/flex_attention.py: `scores * scale`, then score_mod), so
    score_mod receives the scaled score s, as FlashAttention's softcap and ALiBi do:
    softcap: cap tanh(s / cap) on the scaled score (FlashAttention's cap tanh(q k scale / cap));
    ALiBi: s - slope_h |q - k|, added to the scaled score (masks.h's alibi_bias)."""
    case = s["case"]

    def causal(b, h, q, k):
        return k <= q

    if case.startswith("window"):
        w = s["window_left"]

        def mask_mod(b, h, q, k):
            return (k <= q) & (q - w <= k)
    elif case == "docs":
        starts = s["doc_starts"]
        lengths = torch.tensor([b - a for a, b in zip(starts, starts[1:])], device="cuda")
        doc_id = torch.repeat_interleave(torch.arange(len(lengths), device="cuda"), lengths)

        def mask_mod(b, h, q, k):
            return (doc_id[q] == doc_id[k]) & (k <= q)
    elif case.startswith("prefix"):
        p = s["prefix"]

        def mask_mod(b, h, q, k):
            return (k < p) | (k <= q)
    else:
        mask_mod = causal
    score_mod = None
    if s["softcap"] > 0:
        cap = s["softcap"]

        def score_mod(score, b, h, q, k):
            return cap * torch.tanh(score / cap)
    elif s["alibi"]:
        slopes = torch.tensor([alibi_slope(h, s["heads_q"]) for h in range(s["heads_q"])], device="cuda",
                              dtype=torch.float32)

        def score_mod(score, b, h, q, k):
            return score - slopes[h] * (q - k).abs()
    return mask_mod, score_mod


def make_block_mask(create_block_mask, mask_mod, n):
    """create_block_mask once per shape (outside the time), compiled where this PyTorch takes
    _compile (a 32k x 32k mask in eager mode materializes it)."""
    kwargs = dict(B=None, H=None, Q_LEN=n, KV_LEN=n, device="cuda", BLOCK_SIZE=BLOCK_SIZE)
    try:
        return create_block_mask(mask_mod, _compile=True, **kwargs)
    except TypeError:  # a PyTorch without _compile: it compiles by itself or runs eagerly
        return create_block_mask(mask_mod, **kwargs)


def run_flex(torch, bench, flex, create_block_mask, s):
    """FlexAttention on shape @p s: the forward pass (masks) or the backward pass alone
    (masks-backward). Returns (median_ms, note); raises RuntimeError with the reason if refused."""
    if s["sinks"]:
        raise RuntimeError("no FlexAttention counterpart (attention sinks: a logit in the denominator only)")
    b, n, h, d = s["batch"], s["seqlen_q"], s["heads_q"], s["head_dim"]
    backward = s["family"] == "masks-backward"
    if backward:
        # Timed as torch_sdpa.py times a backward (retain_graph=True, repeated): a backward compiled
        # with donated buffers refuses that (it did from the second shape on), so no donation.
        import torch._functorch.config
        torch._functorch.config.donated_buffer = False
    dt = getattr(torch, torch_sdpa.TORCH_DTYPES[torch_sdpa.DTYPE])
    gen = torch.Generator(device="cuda").manual_seed(2024)
    q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=dt, generator=gen).requires_grad_(backward)
               for _ in range(3))
    mask_mod, score_mod = flex_mods(torch, s)
    block_mask = make_block_mask(create_block_mask, mask_mod, n)
    call = lambda: flex(q, k, v, score_mod=score_mod, block_mask=block_mask)  # noqa: E731
    out = call()  # compiles (and autotunes) outside the time
    if backward:
        dout = torch.empty_like(out).normal_(generator=gen)
        ms = torch_sdpa.time_backward(torch, bench, out, (q, k, v), dout)  # the backward graph compiles first
        del dout
    else:
        del out
        torch.cuda.synchronize()
        ms = bench.time_ms(call)
    del q, k, v, block_mask
    return ms, "BlockMask %dx%d, create_block_mask and compilation not timed" % (BLOCK_SIZE, BLOCK_SIZE)


def run_sdpa(torch, bench, backend, s):
    """PyTorch SDPA with @p backend on a plain causal cell, by torch_sdpa.py's own functions."""
    dense = {k: s[k] for k in ("batch", "seqlen_q", "seqlen_k", "heads_q", "heads_kv", "head_dim", "causal")}
    if s["family"] == "masks-backward":
        return torch_sdpa.run_backward(torch, bench, backend, dict(dense, family="backward"), "bhsd")
    return torch_sdpa.run_backend(torch, bench, backend, dict(dense, family="prefill"), "bhsd")


def entry(rung, s, iters):
    """One benchmark record in ladder_bench's format (torch_sdpa.py's fields, plus the case)."""
    name = "%s/%s" % (rung, shape_name(s))
    fields = {k: v for k, v in s.items() if k != "doc_starts"}
    fields["n_docs"] = len(s["doc_starts"]) - 1 if s["doc_starts"] else 0
    e = dict(name=name, run_name=name, run_type="iteration", rung=rung, iterations=iters, dtype=torch_sdpa.DTYPE,
             time_unit="ms", real_time=0.0, cpu_time=0.0, TFLOPS=0.0, skipped="", note="", **fields)
    e["GB/s"] = 0.0
    return e


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="torch_flex.json", help="JSON output file")
    ap.add_argument("--family", default="all", help="masks, masks-backward or all, comma-separated")
    ap.add_argument("--quick", action="store_true", help="20 timed calls")
    ap.add_argument("--iters", type=int, default=0, help="timed calls per shape (>= 20)")
    ap.add_argument("--backends", default="flash,cudnn",
                    help="PyTorch SDPA backends timed on the plain causal cells (subset of flash,cudnn; "
                    "'none' for FlexAttention alone)")
    ap.add_argument("--dtype", default="fp16", choices=sorted(torch_sdpa.TORCH_DTYPES),
                    help="the inputs' 16-bit type (as ladder_bench --fl_dtype)")
    ap.add_argument("--list", action="store_true", help="print the shapes and document starts; time nothing")
    args = ap.parse_args()
    torch_sdpa.DTYPE = args.dtype  # run_backend / run_backward read it
    try:
        families = torch_sdpa.parse_families(args.family, FAMILIES)
    except ValueError as e:
        ap.error("--family: %s" % e)
    shapes = [s for f in families for s in mask_shapes(f)]
    if args.list:
        for s in shapes:
            docs = "\tdoc_starts=" + ",".join(map(str, s["doc_starts"])) if s["doc_starts"] else ""
            print(shape_name(s) + docs)
        return 0

    torch = runinfo.cuda_torch("torch_flex.py")
    if torch is None:
        return 0
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        from torch.nn.attention import SDPBackend
    except ImportError:
        print("torch_flex.py: this PyTorch (%s) has no torch.nn.attention.flex_attention (needs >= 2.5); "
              "nothing measured." % torch.__version__)
        return 0
    # One compiled flex_attention for every shape: each (shape, score_mod, mask) is one more
    # compiled graph, more than Dynamo's default recompile limit (8), past which it would run eagerly.
    import torch._dynamo

    for knob in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, knob):
            setattr(torch._dynamo.config, knob, max(64, getattr(torch._dynamo.config, knob)))
    flex = torch.compile(flex_attention, dynamic=False)
    backends = {"flash": getattr(SDPBackend, "FLASH_ATTENTION", None),
                "cudnn": getattr(SDPBackend, "CUDNN_ATTENTION", None)}
    wanted = [x.strip() for x in args.backends.split(",") if x.strip() and x.strip() != "none"]
    for name in wanted:
        if name not in backends:
            ap.error("--backends: unknown backend '%s' (flash, cudnn or none)" % name)
    iters = max(20, args.iters) if args.iters else (20 if args.quick else 30)
    bench = torch_sdpa.Bench(torch, iters=iters, warmup=3 if args.quick else 5)

    context = torch_sdpa.run_context(torch, "bench/pytorch/torch_flex.py", "bhsd", bench)
    context["block_size"] = BLOCK_SIZE
    results = []
    for s in shapes:
        runs = [("torch_flex", None)]
        if s["case"] == "causal":
            runs += [("torch_" + name, backends[name]) for name in wanted]
        for rung, backend in runs:
            e = entry(rung, s, iters)
            try:
                if rung == "torch_flex":
                    ms, note = run_flex(torch, bench, flex, create_block_mask, s)
                elif backend is None:
                    raise RuntimeError("backend not in this torch")
                else:
                    ms, note = run_sdpa(torch, bench, backend, s)
                torch_sdpa.record_time(e, ms, note, flops_of(s), bytes_of(s))
            except Exception as err:  # noqa: BLE001  refused, no counterpart, or a compile failure: one cell lost
                torch_sdpa.record_refusal(torch, e, err)
            torch_sdpa.finish_entry(e, results, 52)

    torch_sdpa.write_benchmarks(args.out, context, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
