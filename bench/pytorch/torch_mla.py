#!/usr/bin/env python3
"""PyTorch SDPA on ladder_bench's MLA families, as transformers runs DeepSeek-V3 without MLA kernels.

  mla-decode:  ladder_bench times rung 17 on the latent cache (one 576-dim row per key, V its first
               512 columns, pages of 64 keys). Without MLA kernels a model keeps the cache
               decompressed: per head K = [c W_uk (128 dims) | k_rope (64, shared by the heads)]
               and V = c W_uv (128 dims), so SDPA runs MHA on q [B, H, Sq, 192],
               k [B, H, N, 192], v [B, H, N, 128] (PyTorch's [B, H, S, D] layout, contiguous: its
               best case). Same grid as ladder_bench (mla_decode_shapes): batch 1, 8, 32, 128 x
               seqlen_k 1k ... 64k (batch x seqlen_k <= 512k keys), heads 16, 64, 128, seqlen_q 1
               and 2; two queries are causal bottom-right (query 0 sees N - 1 keys), given to SDPA
               as torch.nn.attention.bias.causal_lower_right (SDPA's is_causal is top-left).
  mla-prefill: rung 16's forward at head_dim 192, V and O 128 (ladder_bench's mla-prefill: 16
               heads, batch x seqlen = 16k tokens, seqlen 1k ... 16k, causal 0 / 1): SDPA on the
               same q [B, H, N, 192], k [B, H, N, 192], v [B, H, N, 128] (square, so is_causal
               is the ladder's mask).
  mla-prefill-backward: the same shapes, the backward pass alone: SDPA's forward once under the
               backend (which picks its backward kernel), then torch.autograd.grad(out, (q, k, v),
               dO, retain_graph=True) timed (torch_sdpa.py's run_backward), as ladder_bench times
               rung 16's backward entry alone; TFLOP/s 2.5 x the forward's FLOPs.

Each backend of --backends is forced with sdpa_kernel and timed where it runs; one that refuses
the shape is recorded with its first line (flash takes no V head_dim of its own). The report
compares each rung with the fastest backend that ran (bench/report_tables.py).

Names and fields are ladder_bench's, so bench/report.py joins them: "torch_cudnn/mla-decode/d576/
B32/H128/Sq1/Sk16384/P64" (the shape fields of the ladder's problem: head_dim 576, one KV head,
page 64; "sdpa" says what SDPA ran instead), "torch_cudnn/mla-prefill/d192/N4096/causal1",
"torch_cudnn/mla-prefill-backward/d192/N4096/causal1".
Counters: TFLOP/s and GB/s of the work SDPA does, which for mla-decode is not the rung's:
FLOPs 2 x pairs x heads x (192 + 128) (the rung's are 2 x pairs x heads x (576 + 512)), bytes the
decompressed cache read once, 128 x (192 + 128) x 2 per key at 128 heads (the rung reads
576 x 2); for mla-prefill both are the rung's (Q, K, V read once, O written once). Compare times.

Timing: torch_sdpa.py's Bench (bench/pytorch/timing.py: CUDA events, the L2 flushed before each
call, median of --iters after a warm-up).

Usage: python3 bench/pytorch/torch_mla.py [--out torch_mla.json] [--family mla-decode,mla-prefill,...]
           [--dtype bf16] [--backends flash,cudnn,efficient,math] [--iters N] [--quick] [--list]
--list prints the names and needs no PyTorch. Exits 0 with a message without PyTorch or a GPU.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import runinfo  # noqa: E402  bench/pytorch/runinfo.py
import torch_sdpa  # noqa: E402  bench/pytorch/torch_sdpa.py: Bench, the JSON, the pairs (no PyTorch at import)

FAMILIES = ("mla-decode", "mla-prefill", "mla-prefill-backward")
# DeepSeek-V3's attention (its config.json): kv_lora_rank 512, qk_rope_head_dim 64, qk_nope_head_dim
# 128, v_head_dim 128, 128 heads.
KV_LORA, ROPE, NOPE, V_HEAD = 512, 64, 128, 128
QK = NOPE + ROPE  # 192: a head's q and k
LATENT = KV_LORA + ROPE  # 576: a latent cache row (rung 17's head_dim; V its first 512)
PAGE = 64  # the latent cache's page (ladder_bench's mla-decode)
MLA_KEYS = 512 * 1024  # ladder_bench's kMlaKeys: batch x seqlen_k bound of the decode grid
PREFILL_TOKENS, PREFILL_HEADS = 16384, 16  # mla-prefill: DeepSeek-V3's 128 heads over 8 GPUs
MATH_CACHE_LIMIT = 4 << 30  # the math backend may copy K and V to fp32: skip above this cache


def mla_decode_shapes(quick):
    """ladder_bench.cpp's mla_decode_shapes, in its order."""
    out = []
    for b in (1, 8, 32, 128):
        for sk in (1024, 4096, 16384, 65536):
            if b * sk > MLA_KEYS or (quick and sk in (1024, 16384)):
                continue
            for heads in (16, 64, 128):
                for sq in (1, 2):
                    out.append(dict(family="mla-decode", batch=b, seqlen_q=sq, seqlen_k=sk, heads_q=heads,
                                    heads_kv=1, head_dim=LATENT, head_dim_v=KV_LORA, causal=int(sq > 1),
                                    page_size=PAGE))
    return out


def mla_prefill_shapes(quick, family="mla-prefill"):
    """ladder_bench.cpp's mla-prefill shapes (and mla-prefill-backward's, the same)."""
    return [dict(family=family, batch=PREFILL_TOKENS // n, seqlen_q=n, seqlen_k=n, heads_q=PREFILL_HEADS,
                 heads_kv=PREFILL_HEADS, head_dim=QK, head_dim_v=V_HEAD, causal=causal, page_size=0)
            for causal in (0, 1) for n in (1024, 2048, 4096, 8192, 16384)
            if not (quick and n in (2048, 8192))]


def shape_name(s):
    if s["family"] == "mla-decode":
        return "mla-decode/d%d/B%d/H%d/Sq%d/Sk%d/P%d" % (s["head_dim"], s["batch"], s["heads_q"], s["seqlen_q"],
                                                        s["seqlen_k"], s["page_size"])
    return "%s/d%d/N%d/causal%d" % (s["family"], s["head_dim"], s["seqlen_q"], s["causal"])


def pairs(s):
    """Unmasked (query, key) pairs of all batches and heads, bottom-right causal."""
    return s["batch"] * s["heads_q"] * torch_sdpa.unmasked_pairs(s["seqlen_q"], s["seqlen_k"], s["causal"])


def sdpa_flops(s):
    """FLOPs of SDPA's problem: q.k over 192 dims and p.v over 128 per pair (the backward pass: 2.5
    x that, FlashAttention's convention, as ladder_bench counts it)."""
    return 2.0 * pairs(s) * (QK + V_HEAD) * (2.5 if s["family"] == "mla-prefill-backward" else 1.0)


def cache_bytes(s):
    """The decompressed cache SDPA reads (mla-decode): K (192) and V (128) per head and key, 16-bit."""
    return 2.0 * s["batch"] * s["seqlen_k"] * s["heads_q"] * (QK + V_HEAD)


def sdpa_bytes(s):
    """The bytes counted: the cache once (the decode metric), or Q, K, V read and O written (prefill)."""
    if s["family"] == "mla-decode":
        return cache_bytes(s)
    tokens, h = s["batch"] * s["seqlen_q"], s["heads_q"]
    if s["family"] == "mla-prefill-backward":  # Q, dQ, K, dK (192) and O, dO, V, dV (128); the LSE in fp32
        return 2.0 * tokens * h * 2 * (QK + V_HEAD) * 2 + 4.0 * tokens * h
    return 2.0 * tokens * h * (QK + QK + V_HEAD + V_HEAD)


def entry(rung, s, iters):
    """One benchmark record in ladder_bench's format (torch_sdpa.py's fields)."""
    name = "%s/%s" % (rung, shape_name(s))
    e = dict(name=name, run_name=name, run_type="iteration", rung=rung, iterations=iters, dtype=torch_sdpa.DTYPE,
             time_unit="ms", real_time=0.0, cpu_time=0.0, TFLOPS=0.0, skipped="", note="", **s)
    e["GB/s"] = 0.0
    if s["family"] == "mla-decode":
        e["sdpa"] = {"q": [s["batch"], s["heads_q"], s["seqlen_q"], QK],
                     "k": [s["batch"], s["heads_q"], s["seqlen_k"], QK],
                     "v": [s["batch"], s["heads_q"], s["seqlen_k"], V_HEAD],
                     "mask": "causal_lower_right" if s["causal"] else "none",
                     "cache_bytes": cache_bytes(s)}
    return e


class Tensors:
    """The last shape's q, k, v on the GPU, kept while the next shape shares them (decode: the
    decompressed cache of one (batch, seqlen_k, heads) serves both seqlen_q and every backend)."""

    def __init__(self, torch):
        self.torch, self.key, self.kv, self.q = torch, None, None, {}

    def get(self, s):
        torch = self.torch
        dt = getattr(torch, torch_sdpa.TORCH_DTYPES[torch_sdpa.DTYPE])
        b, h, sk, sq = s["batch"], s["heads_q"], s["seqlen_k"], s["seqlen_q"]
        key = (s["family"], b, h, sk)
        if key != self.key:
            self.kv, self.q, self.key = None, {}, None
            torch.cuda.empty_cache()
            need = (2.0 * b * h * sk * (QK + V_HEAD)) * 1.1
            free = torch.cuda.mem_get_info()[0]
            if need > 0.85 * free:
                raise RuntimeError("the decompressed cache needs %.1f GB, %.1f GB free" % (need / 1e9, free / 1e9))
            gen = torch.Generator(device="cuda").manual_seed(2024)
            k = torch.empty(b, h, sk, QK, device="cuda", dtype=dt).normal_(generator=gen)
            v = torch.empty(b, h, sk, V_HEAD, device="cuda", dtype=dt).normal_(generator=gen)
            self.kv, self.key = (k, v), key
        if sq not in self.q:
            gen = torch.Generator(device="cuda").manual_seed(2025 + sq)
            self.q[sq] = torch.empty(b, h, sq, QK, device="cuda", dtype=dt).normal_(generator=gen)
        return self.q[sq], self.kv[0], self.kv[1]


def run_sdpa(torch, bench, backend, tensors, s):
    """(median ms, note) of SDPA with @p backend on shape @p s; raises with the reason if refused."""
    F = torch.nn.functional
    from torch.nn.attention import sdpa_kernel

    q, k, v = tensors.get(s)
    kwargs, note = {}, ""
    if s["causal"] and s["seqlen_q"] != s["seqlen_k"]:  # bottom-right: SDPA's is_causal is top-left
        from torch.nn.attention.bias import causal_lower_right

        kwargs["attn_mask"] = causal_lower_right(s["seqlen_q"], s["seqlen_k"])
        note = "bottom-right causal as causal_lower_right"
    elif s["causal"]:
        kwargs["is_causal"] = True
    if s["family"] == "mla-prefill-backward":
        leaves = [t.detach().requires_grad_() for t in (q, k, v)]
        with sdpa_kernel([backend]):
            out = F.scaled_dot_product_attention(*leaves, **kwargs)  # raises when the backend refuses
        dout = torch.empty_like(out).normal_(generator=torch.Generator(device="cuda").manual_seed(2026))
        ms = torch_sdpa.time_backward(torch, bench, out, leaves, dout)  # raises if the backend has no backward
        del out, dout, leaves
        return ms, note
    with sdpa_kernel([backend]):
        F.scaled_dot_product_attention(q, k, v, **kwargs)  # raises when the backend refuses
        torch.cuda.synchronize()
        ms = bench.time_ms(lambda: F.scaled_dot_product_attention(q, k, v, **kwargs))
    return ms, note


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="torch_mla.json", help="JSON output file")
    ap.add_argument("--family", default="all", help="mla-decode, mla-prefill, mla-prefill-backward or all, "
                    "comma-separated")
    ap.add_argument("--quick", action="store_true", help="ladder_bench --fl_quick's shapes, 20 timed calls")
    ap.add_argument("--iters", type=int, default=0, help="timed calls per shape (>= 20)")
    ap.add_argument("--backends", default="flash,cudnn,efficient,math",
                    help="comma-separated subset of flash,cudnn,efficient,math")
    ap.add_argument("--dtype", default="bf16", choices=sorted(torch_sdpa.TORCH_DTYPES),
                    help="the inputs' 16-bit type (as ladder_bench --fl_dtype; DeepSeek-V3 runs bf16)")
    ap.add_argument("--list", action="store_true", help="print the names; time nothing")
    args = ap.parse_args()
    torch_sdpa.DTYPE = args.dtype
    try:
        families = torch_sdpa.parse_families(args.family, FAMILIES)
    except ValueError as e:
        ap.error("--family: %s" % e)
    shapes = (mla_decode_shapes(args.quick) if "mla-decode" in families else []) + \
        [s for f in ("mla-prefill", "mla-prefill-backward") if f in families for s in mla_prefill_shapes(args.quick, f)]
    wanted = [b.strip() for b in args.backends.split(",") if b.strip()]
    for name in wanted:
        if name not in ("flash", "cudnn", "efficient", "math"):
            ap.error("--backends: unknown backend '%s' (flash, cudnn, efficient, math)" % name)
    if args.list:
        for s in shapes:
            print(shape_name(s))
        return 0

    torch = runinfo.cuda_torch("torch_mla.py")
    if torch is None:
        return 0
    try:
        from torch.nn.attention import SDPBackend
    except ImportError:
        print("torch_mla.py: this PyTorch (%s) has no torch.nn.attention.sdpa_kernel (needs >= 2.3); "
              "nothing measured." % torch.__version__)
        return 0
    backends = {"flash": getattr(SDPBackend, "FLASH_ATTENTION", None),
                "cudnn": getattr(SDPBackend, "CUDNN_ATTENTION", None),
                "efficient": getattr(SDPBackend, "EFFICIENT_ATTENTION", None),
                "math": getattr(SDPBackend, "MATH", None)}
    iters = max(20, args.iters) if args.iters else (20 if args.quick else 30)
    bench = torch_sdpa.Bench(torch, iters=iters, warmup=3 if args.quick else 5)
    context = torch_sdpa.run_context(torch, "bench/pytorch/torch_mla.py", "bhsd", bench)
    context["dtype"] = args.dtype
    context["mla"] = ("SDPA on the decompressed cache (mla-decode: per head K = [c W_uk | k_rope] 192, V = c W_uv "
                      "128) and on the 192/128 prefill; counters of SDPA's own problem")
    tensors = Tensors(torch)
    results = []
    for s in shapes:
        for name in wanted:
            rung = "torch_" + name
            e = entry(rung, s, iters)
            big = cache_bytes(s) if s["family"] == "mla-decode" else \
                2.0 * 3 * s["batch"] * s["heads_q"] * s["seqlen_q"] * s["seqlen_k"]  # S, P, a temporary
            if backends[name] is None:
                e["skipped"] = "backend not in this torch"
            elif name == "math" and big > MATH_CACHE_LIMIT:
                e["skipped"] = "math backend: %.1f GB of %s" % (
                    big / 2**30, "cache it may copy to fp32" if s["family"] == "mla-decode" else "scores")
            else:
                try:
                    ms, note = run_sdpa(torch, bench, backends[name], tensors, s)
                    torch_sdpa.record_time(e, ms, note, sdpa_flops(s), sdpa_bytes(s))
                except (RuntimeError, ValueError) as err:  # refused (or out of memory): one cell lost
                    torch_sdpa.record_refusal(torch, e, err)
            torch_sdpa.finish_entry(e, results, 60)
    torch_sdpa.write_benchmarks(args.out, context, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
