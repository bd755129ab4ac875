#!/usr/bin/env python3
"""PyTorch SDPA on FlashLadder's benchmark shapes, one entry per backend.

Runs torch.nn.functional.scaled_dot_product_attention with each backend
(flash, cuDNN, memory-efficient, math) forced through
torch.nn.attention.sdpa_kernel, over the same sweeps as ladder_bench:

  prefill:  batch * seqlen = 16384 tokens, hidden 2048 (heads = 2048 / d),
            seqlen 512 ... 16384, head_dim 32, 64, 128, causal 0 / 1, fp16
  decode:   batch 1 and 8, 32 query heads, 32 or 8 KV heads (GQA), d = 128,
            seqlen_q 1, seqlen_k 1k ... 128k
  backward: the prefill shapes at seqlen 512 ... 16k, head_dim 64, 128, 256, causal
            0 / 1: the backward pass only (torch.autograd.grad of the forward's
            output with dO, the graph retained; the forward runs once, untimed)
  backward-gqa, backward-gqa8: the backward shapes with GQA 4:1 and 8:1 (heads_kv =
            heads_q / 4 or / 8, enable_gqa=True)
  hopper-prefill: the prefill shapes at head_dim 64, 128, 256
  llama:    Llama-3-8B's prefill: batch 1, 32 / 8 heads, d = 128, causal, seqlen 8k and 16k
  varlen:   64 sequences of 128 ... 8k tokens (mixed_lengths, seed 2024), 32 / 8 heads, d = 128,
            causal 0 / 1, run two ways per backend: as nested (jagged) tensors
            ("torch_<backend>_nested") and zero-padded to the longest ("torch_<backend>_padded",
            every sequence's tail computed and thrown away); FLOPs and bytes are the packed
            batch's in both, so TFLOP/s compare as tokens/s do
  varlen-backward: the same packed batch, both ways, the backward pass alone (as the backward
            family times it; nested: the gradients of the packed [total, heads, d] leaves)

Beside SDPA's backends, "ladder" (--backends ...,ladder) times the package as a training step
calls it, in the same process: flashladder.attention on [B, S, H, D] leaves under autograd, the
backward pass alone as the backward families time SDPA's ("torch_ladder/backward/d128/N4096/
causal1"; the backward families only). The package comes from PYTHONPATH (or build/*/python).
The backward families draw N(0, 1) inputs; --inputs offset draws the runner's instead (N(0, 1)
plus 0.25 for Q, K and dO, 0.5 for V), for every backend, so that the runner's timing and this
script's can be set side by side on one distribution (the context's "inputs" names it).

and writes Google Benchmark's JSON format ({"context", "benchmarks"}) with the
same names and counters as ladder_bench, so the report can join the two:
"torch_flash/prefill/d128/N4096/causal0", "torch_cudnn/decode/d128/B8/Hkv8/Sk65536",
"torch_cudnn/backward/d128/N4096/causal1".

Timing (bench/pytorch/timing.py, EventTimer): CUDA events around each call, warm-up first, L2
flushed before every timed call by writing a buffer twice the L2 size, median of >= 20 calls.
Metrics, defined as in common/ (problem.h):
  FLOPs = 4 * B * Hq * d * (unmasked (query, key) pairs), causal bottom-right
          aligned: query i sees key j iff j <= i + Sk - Sq;
  bytes = Q, K, V read once + O written once (16-bit).
Backward (common/include/flashladder/backward.h, FlashAttention's convention):
  FLOPs = 2.5 x the forward's;
  bytes = Q, K, V, O, dO read + dQ, dK, dV written (16-bit) + the LSE read (fp32).

Usage: python3 bench/pytorch/torch_sdpa.py [--out FILE]
           [--family prefill|decode|backward|backward-gqa|ablation|fp8|hopper-prefill|llama|varlen|all[,...]]
                                  [--quick] [--dtype fp16|bf16]
Exits 0 with a message when torch or a CUDA GPU is missing (nothing to measure).
"""

import argparse
import datetime
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import runinfo  # noqa: E402  bench/pytorch/runinfo.py: PyTorch with a CUDA device, or why nothing is measured
import timing  # noqa: E402  bench/pytorch/timing.py: the events, the L2 flush, the median (imports no PyTorch)

HIDDEN = 2048
TOKENS = 16384
PREFILL_SEQLENS = [512, 1024, 2048, 4096, 8192, 16384]
PREFILL_HEAD_DIMS = [32, 64, 128]
BACKWARD_SEQLENS = [512, 1024, 2048, 4096, 8192, 16384]
BACKWARD_HEAD_DIMS = [64, 128, 256]
ABLATION_HEAD_DIMS = [32, 64, 128, 256]
FP8_HEAD_DIMS = [64, 128, 256]
FAMILIES = ("prefill", "decode", "backward", "backward-gqa", "backward-gqa8", "ablation", "fp8", "hopper-prefill",
            "llama", "varlen", "varlen-backward")
HOPPER_HEAD_DIMS = [64, 128, 256]
VARLEN = dict(count=64, lo=128, hi=8192, seed=2024)  # ladder_bench's varlen family
TORCH_DTYPES = {"fp16": "float16", "bf16": "bfloat16"}
DTYPE = "fp16"  # the inputs' type (--dtype), as ladder_bench --fl_dtype
# The backward families' inputs (--inputs): "randn", N(0, 1) each; "offset", the runner's random
# input (common/include/flashladder/inputs.h: N(0, 1) plus 0.25 for Q, K and dO, 0.5 for V), so
# that a timing can be set beside the runner's on the same distribution.
INPUTS = "randn"
OFFSETS = {"q": 0.25, "k": 0.25, "v": 0.5, "dout": 0.25}


def offset_(x, role):
    """@p x (a fresh tensor, not requiring grad yet) with --inputs offset's shift for @p role."""
    if INPUTS == "offset":
        x.add_(OFFSETS[role])
    return x
BACKWARD_FAMILIES = ("backward", "backward-gqa", "backward-gqa8", "varlen-backward")
GQA_GROUPS = {"backward-gqa": 4, "backward-gqa8": 8}  # the GQA backward families' query heads per KV head
VARLEN_FAMILIES = ("varlen", "varlen-backward")
DECODE_SEQLENS = [1024 << i for i in range(8)]  # 1k ... 128k
MATH_LIMIT_BYTES = 4 << 30  # the math backend materializes S (and P): skip above this
ELEM_BYTES = 2  # fp16


def unmasked_pairs(sq, sk, causal):
    """(query, key) pairs that are not masked, per (batch, head)."""
    if not causal:
        return sq * sk
    off = sk - sq
    # Query i sees min(sk, max(0, i + off + 1)) keys.
    total = 0
    for i in range(sq):
        total += min(sk, max(0, i + off + 1))
    return total


def prefill_shapes(quick, head_dims=None):
    out = []
    for d in head_dims or PREFILL_HEAD_DIMS:
        for causal in (0, 1):
            for n in PREFILL_SEQLENS:
                if quick and n in (512, 8192):
                    continue
                out.append(dict(family="prefill", batch=TOKENS // n, seqlen_q=n, seqlen_k=n,
                                heads_q=HIDDEN // d, heads_kv=HIDDEN // d, head_dim=d,
                                causal=causal))
    return out


def splitmix64(x):
    m = (1 << 64) - 1
    x = (x + 0x9E3779B97F4A7C15) & m
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & m
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & m
    return x ^ (x >> 31)


def mixed_lengths(count, lo, hi, seed):
    """common/'s mixed_lengths (inputs.h): the same lengths, drawn the same way."""
    m = (1 << 64) - 1
    return [lo + splitmix64(((seed * 0x9E3779B97F4A7C15) & m) ^ i) % (hi - lo + 1) for i in range(count)]


def hopper_shapes(quick):
    """ladder_bench's hopper-prefill family: the prefill shapes at head_dim 64, 128 and 256."""
    out = []
    for d in HOPPER_HEAD_DIMS:
        for causal in (0, 1):
            for n in PREFILL_SEQLENS:
                if quick and n in (1024, 8192):
                    continue
                out.append(dict(family="hopper-prefill", batch=TOKENS // n, seqlen_q=n, seqlen_k=n,
                                heads_q=HIDDEN // d, heads_kv=HIDDEN // d, head_dim=d, causal=causal))
    return out


def llama_shapes():
    return [dict(family="llama", batch=1, seqlen_q=n, seqlen_k=n, heads_q=32, heads_kv=8, head_dim=128, causal=1)
            for n in (8192, 16384)]


def varlen_shapes(family="varlen"):
    lens = mixed_lengths(VARLEN["count"], VARLEN["lo"], VARLEN["hi"], VARLEN["seed"])
    return [dict(family=family, batch=len(lens), seqlen_q=max(lens), seqlen_k=max(lens), heads_q=32, heads_kv=8,
                 head_dim=128, causal=causal, lens=lens) for causal in (0, 1)]


def fp8_shapes(quick):
    """ladder_bench's fp8 family: the prefill shapes at head_dim 64, 128 and 256 (the 16-bit
    backends there, beside rung 13 in e4m3 and rung 10 in 16 bits)."""
    return [dict(s, family="fp8") for d in FP8_HEAD_DIMS
            for s in prefill_shapes(quick, head_dims=(d,))]


def ablation_shapes(quick):
    """ladder_bench's ablation family: the prefill problem at seqlen 4096, head_dim 32..256 (the
    only family with head_dim 256, where the Hopper rungs are compared with cuDNN)."""
    del quick  # one seqlen already
    n = 4096
    return [dict(family="ablation", batch=TOKENS // n, seqlen_q=n, seqlen_k=n, heads_q=HIDDEN // d,
                 heads_kv=HIDDEN // d, head_dim=d, causal=causal)
            for d in ABLATION_HEAD_DIMS for causal in (0, 1)]


def backward_shapes(quick, family="backward"):
    """ladder_bench's backward family: the prefill shapes of the backward rungs; its backward-gqa
    and backward-gqa8 families: the same with heads_kv = heads_q / 4 and / 8."""
    out = []
    for d in BACKWARD_HEAD_DIMS:
        for causal in (0, 1):
            for n in BACKWARD_SEQLENS:
                if quick and n in (512, 8192):
                    continue
                heads = HIDDEN // d
                out.append(dict(family=family, batch=TOKENS // n, seqlen_q=n, seqlen_k=n,
                                heads_q=heads, heads_kv=heads // GQA_GROUPS.get(family, 1),
                                head_dim=d, causal=causal))
    return out


def forward_flops(s):
    if "lens" in s:  # a packed batch: each sequence's own pairs
        return 4.0 * s["heads_q"] * s["head_dim"] * sum(unmasked_pairs(n, n, s["causal"]) for n in s["lens"])
    return 4.0 * s["batch"] * s["heads_q"] * s["head_dim"] * unmasked_pairs(
        s["seqlen_q"], s["seqlen_k"], s["causal"])


def flops_of(s):
    """FLOPs of the timed pass: the forward's, or 2.5 x it for the backward family."""
    return forward_flops(s) * (2.5 if s["family"] in BACKWARD_FAMILIES else 1.0)


def bytes_of(s):
    """Compulsory bytes of the timed pass, as common/src/problem.cpp counts them."""
    b, sq, sk = s["batch"], s["seqlen_q"], s["seqlen_k"]
    hq, hkv, d = s["heads_q"], s["heads_kv"], s["head_dim"]
    if "lens" in s:  # a packed batch: its tokens, one sequence of them
        b, sq, sk = 1, sum(s["lens"]), sum(s["lens"])
    q_like, kv_like = ELEM_BYTES * b * sq * hq * d, ELEM_BYTES * b * sk * hkv * d
    if s["family"] in BACKWARD_FAMILIES:  # Q, O, dO, dQ and K, V, dK, dV; LSE in fp32
        return 4 * q_like + 4 * kv_like + 4 * b * hq * sq
    return 2 * q_like + 2 * kv_like  # Q, O + K, V


def parse_families(text, known=None):
    """ "prefill,backward" or "all" -> the families in order, of @p known (default this script's
    FAMILIES; torch_flex.py passes its own); ValueError on an unknown one."""
    known = known or FAMILIES
    out = []
    for f in (x.strip() for x in text.split(",")):
        if f == "all":
            out += [x for x in known if x not in out]
        elif f in known:
            if f not in out:
                out.append(f)
        elif f:
            raise ValueError("unknown family '%s' (%s or all)" % (f, ", ".join(known)))
    return out


def decode_shapes(quick):
    out = []
    for b in (1, 8):
        for hkv in (32, 8):
            for sk in DECODE_SEQLENS:
                if quick and sk in (2048, 8192, 32768):
                    continue
                out.append(dict(family="decode", batch=b, seqlen_q=1, seqlen_k=sk, heads_q=32,
                                heads_kv=hkv, head_dim=128, causal=0))
    return out


def shape_name(s):
    if s["family"] in VARLEN_FAMILIES:
        return "%s/d%d/S%d/causal%d" % (s["family"], s["head_dim"], s["batch"], s["causal"])
    if s["family"] in ("prefill", "ablation", "fp8", "hopper-prefill", "llama") + BACKWARD_FAMILIES:
        return "%s/d%d/N%d/causal%d" % (s["family"], s["head_dim"], s["seqlen_q"], s["causal"])
    return "decode/d%d/B%d/Hkv%d/Sk%d" % (s["head_dim"], s["batch"], s["heads_kv"], s["seqlen_k"])


def git_sha():
    """The commit measured: runinfo.git_info's (FL_GIT_SHA where set, else the checkout's)."""
    return runinfo.git_info()["git_sha"]


class Bench(timing.EventTimer):
    """Times SDPA calls on one GPU: timing.EventTimer (CUDA events, the L2 flushed before each call
    by writing 2 x its size: K/V come from HBM, as in ladder_bench) at one iters and warm-up."""

    def __init__(self, torch, iters, warmup):
        super().__init__(torch)
        self.iters = iters
        self.warmup = warmup

    def time_ms(self, fn):
        return super().time_ms(fn, self.iters, self.warmup)


def run_context(torch, executable, layout, bench):
    """The "context" of a run's JSON (report.py and docgen read it): date, script, GPU, CUDA,
    PyTorch and cuDNN versions, commit, layout, iterations and the L2 flush's bytes."""
    props = torch.cuda.get_device_properties(0)
    return {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "executable": executable,
        "device": props.name,
        "sms": props.multi_processor_count,
        "cuda_version": torch.version.cuda or "unknown",
        "torch": torch.__version__,
        "cudnn": str(torch.backends.cudnn.version()) if torch.backends.cudnn.is_available() else "",
        "git_sha": git_sha(),
        "layout": layout,
        "inputs": INPUTS,
        "iterations": bench.iters,
        "l2_flush_bytes": bench.flush_buf.numel(),
        "library_build_type": "release",
    }


def time_backward(torch, bench, out, inputs, dout):
    """Median ms of the backward pass alone: torch.autograd.grad(out, inputs, dout,
    retain_graph=True), called once first (it raises there when the backend has no backward for
    the shape, and a compiled backward graph compiles there), then timed by @p bench."""
    grad = lambda: torch.autograd.grad(out, inputs, dout, retain_graph=True)  # noqa: E731
    grad()
    torch.cuda.synchronize()
    return bench.time_ms(grad)


def record_time(entry, ms, note, flops, nbytes):
    """Fills @p entry with one timed cell: @p ms per call, its TFLOP/s and GB/s from @p flops and
    @p nbytes, and the backend's @p note."""
    entry.update(real_time=ms, cpu_time=ms, TFLOPS=flops / (ms * 1e-3) / 1e12, note=note)
    entry["GB/s"] = nbytes / (ms * 1e-3) / 1e9


def record_refusal(torch, entry, err):
    """Marks @p entry skipped with the first line of @p err (a backend's refusal, or out of
    memory: one cell lost) and frees what the failed call left on the device."""
    reason = str(err).strip().splitlines()
    entry["skipped"] = (reason[0] if reason else type(err).__name__)[:200]
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


def finish_entry(entry, results, width):
    """Appends a timed or skipped entry to @p results and prints its line (name in @p width
    columns); a skipped one is marked as Google Benchmark marks an error (error_occurred,
    error_message), which report.py reads as "skip"."""
    if entry["skipped"]:
        entry["error_occurred"] = True
        entry["error_message"] = "skipped: " + entry["skipped"]
        print("%-*s skipped: %s" % (width, entry["name"], entry["skipped"]), flush=True)
    else:
        print("%-*s %9.4f ms %8.1f TFLOP/s %8.1f GB/s" %
              (width, entry["name"], entry["real_time"], entry["TFLOPS"], entry["GB/s"]), flush=True)
    results.append(entry)


def write_benchmarks(path, context, results):
    """The JSON file of a run in Google Benchmark's shape: {"context", "benchmarks"}."""
    with open(path, "w") as f:
        json.dump({"context": context, "benchmarks": results}, f, indent=1)
    print("wrote %s (%d entries)" % (path, len(results)))


def run_backend(torch, bench, backend, s, layout):
    """Returns (median_ms, note); raises RuntimeError with the reason if refused. The backward
    family times the backward pass alone (run_backward)."""
    if s["family"] in BACKWARD_FAMILIES:
        return run_backward(torch, bench, backend, s, layout)
    if s["family"] in VARLEN_FAMILIES:
        return run_varlen(torch, bench, backend, s, layout, backward=s["family"] == "varlen-backward")
    F = torch.nn.functional
    from torch.nn.attention import sdpa_kernel

    b, sq, sk = s["batch"], s["seqlen_q"], s["seqlen_k"]
    hq, hkv, d = s["heads_q"], s["heads_kv"], s["head_dim"]
    gen = torch.Generator(device="cuda").manual_seed(2024)

    def make(seqlen, heads):
        if layout == "bshd":  # FlashLadder / flash_attn_func layout, viewed as [B, H, S, D]
            x = torch.randn(b, seqlen, heads, d, device="cuda", dtype=getattr(torch, TORCH_DTYPES[DTYPE]), generator=gen)
            return x.transpose(1, 2)
        return torch.randn(b, heads, seqlen, d, device="cuda", dtype=getattr(torch, TORCH_DTYPES[DTYPE]), generator=gen)

    q, k, v = make(sq, hq), make(sk, hkv), make(sk, hkv)
    # SDPA's is_causal is top-left aligned; FlashLadder's mask is bottom-right.
    # They agree when sq == sk (prefill); decode (sq = 1) runs unmasked.
    assert not s["causal"] or sq == sk
    kwargs = dict(is_causal=bool(s["causal"]))
    note = ""
    if hq != hkv:
        kwargs["enable_gqa"] = True
    with sdpa_kernel([backend]):
        try:
            out = F.scaled_dot_product_attention(q, k, v, **kwargs)
        except TypeError:  # torch < 2.5 has no enable_gqa: repeat the KV heads instead
            kwargs.pop("enable_gqa", None)
            k = k.repeat_interleave(hq // hkv, dim=1)
            v = v.repeat_interleave(hq // hkv, dim=1)
            note = "GQA by repeat_interleave (no enable_gqa in this torch)"
            out = F.scaled_dot_product_attention(q, k, v, **kwargs)
        del out
        torch.cuda.synchronize()
        ms = bench.time_ms(lambda: F.scaled_dot_product_attention(q, k, v, **kwargs))
    del q, k, v
    return ms, note


def run_varlen(torch, bench, backend, s, layout, backward=False):
    """A packed batch (s["lens"]) with @p backend, as nested (jagged) tensors (layout "nested")
    or zero-padded to the longest sequence (layout "padded": a dense causal or full SDPA whose
    padded rows and keys are computed too; under the causal mask every real query still sees only
    real keys). @p backward: the backward pass alone, as run_backward times it (the forward once,
    then torch.autograd.grad with retain_graph). Returns (median_ms, note)."""
    F = torch.nn.functional
    from torch.nn.attention import sdpa_kernel

    lens, hq, hkv, d = s["lens"], s["heads_q"], s["heads_kv"], s["head_dim"]
    dt = getattr(torch, TORCH_DTYPES[DTYPE])
    gen = torch.Generator(device="cuda").manual_seed(2024)
    total, longest = sum(lens), max(lens)
    note = ""
    kwargs = dict(is_causal=bool(s["causal"]))
    if layout == "nested":
        offsets = torch.tensor([0] + [sum(lens[:i + 1]) for i in range(len(lens))], device="cuda", dtype=torch.int64)

        leaves = []

        def make(heads, grad=backward):  # [total, heads, d] packed, as the ladder takes it, then [B, heads, j, d]
            x = torch.randn(total, heads, d, device="cuda", dtype=dt, generator=gen).requires_grad_(grad)
            leaves.append(x)
            return torch.nested.nested_tensor_from_jagged(x, offsets).transpose(1, 2)

        if hq != hkv:  # nested tensors take no enable_gqa: K/V heads repeated (outside the time)
            q, k, v = make(hq), make(hq), make(hq)
            note = "GQA as repeated K/V heads (nested tensors take no enable_gqa)"
        else:
            q, k, v = make(hq), make(hkv), make(hkv)
        inputs = tuple(leaves)
        make_dout = lambda out: make(hq, grad=False)  # noqa: E731
    else:
        def dense(heads):
            x = torch.randn(len(lens), heads, longest, d, device="cuda", dtype=dt, generator=gen)
            return x.requires_grad_(backward)

        q, k, v = dense(hq), dense(hkv), dense(hkv)
        inputs = (q, k, v)
        make_dout = lambda out: torch.empty_like(out).normal_(generator=gen)  # noqa: E731
        if hq != hkv:
            kwargs["enable_gqa"] = True
    with sdpa_kernel([backend]):
        out = F.scaled_dot_product_attention(q, k, v, **kwargs)
        if backward:
            dout = make_dout(out)
            ms = time_backward(torch, bench, out, inputs, dout)  # raises if the backend has no backward here
            del dout
        else:
            del out
            torch.cuda.synchronize()
            ms = bench.time_ms(lambda: F.scaled_dot_product_attention(q, k, v, **kwargs))
    del q, k, v, inputs
    return ms, note


def run_backward_ladder(torch, bench, fl, s):
    """The package's backward pass as a training step runs it: q, k, v leaves [B, S, H, D] (its
    layout), flashladder.attention(q, k, v, causal) under autograd twice (the second call's graph:
    a training step's from its second step on), then
    torch.autograd.grad(out, (q, k, v), dO, retain_graph=True) timed alone, as run_backward times
    SDPA's (the package's backward rung, its D and dQ passes and its host path included). Returns
    (median_ms, note)."""
    b, sq, sk = s["batch"], s["seqlen_q"], s["seqlen_k"]
    hq, hkv, d = s["heads_q"], s["heads_kv"], s["head_dim"]
    gen = torch.Generator(device="cuda").manual_seed(2024)
    dt = getattr(torch, TORCH_DTYPES[DTYPE])

    def make(seqlen, heads, role):
        return offset_(torch.randn(b, seqlen, heads, d, device="cuda", dtype=dt, generator=gen), role).requires_grad_(True)

    q, k, v = make(sq, hq, "q"), make(sk, hkv, "k"), make(sk, hkv, "v")
    # The signature's first call is the checked one; from the second on, a training step takes the
    # prepared launches (flashladder._launch.Prepared): the graph timed is the second call's.
    fl.attention(q, k, v, causal=bool(s["causal"]))
    out = fl.attention(q, k, v, causal=bool(s["causal"]))
    dout = offset_(torch.empty_like(out).normal_(generator=gen), "dout")
    ms = time_backward(torch, bench, out, (q, k, v), dout)
    del q, k, v, out, dout
    return ms, "flashladder.attention under autograd, [B, S, H, D] leaves"


def run_backward(torch, bench, backend, s, layout):
    """The backward pass of SDPA with @p backend: the forward once under sdpa_kernel (which picks
    the backward kernel: flash's, cuDNN's, ...), then torch.autograd.grad(out, (q, k, v), dO,
    retain_graph=True) timed alone. Returns (median_ms, note)."""
    F = torch.nn.functional
    from torch.nn.attention import sdpa_kernel

    b, sq, sk = s["batch"], s["seqlen_q"], s["seqlen_k"]
    hq, hkv, d = s["heads_q"], s["heads_kv"], s["head_dim"]
    gen = torch.Generator(device="cuda").manual_seed(2024)

    def make(seqlen, heads, role):
        if layout == "bshd":
            x = torch.randn(b, seqlen, heads, d, device="cuda", dtype=getattr(torch, TORCH_DTYPES[DTYPE]), generator=gen)
            x = offset_(x, role).transpose(1, 2)
        else:
            x = torch.randn(b, heads, seqlen, d, device="cuda", dtype=getattr(torch, TORCH_DTYPES[DTYPE]), generator=gen)
            x = offset_(x, role)
        return x.requires_grad_(True)

    q, k, v = make(sq, hq, "q"), make(sk, hkv, "k"), make(sk, hkv, "v")
    assert not s["causal"] or sq == sk  # SDPA's is_causal is top-left aligned (see run_backend)
    kwargs = dict(is_causal=bool(s["causal"]))
    note = ""
    if hq != hkv:
        kwargs["enable_gqa"] = True
    with sdpa_kernel([backend]):
        out = F.scaled_dot_product_attention(q, k, v, **kwargs)
    dout = offset_(torch.empty_like(out).normal_(generator=gen), "dout")  # out's strides: no copy in the backward
    ms = time_backward(torch, bench, out, (q, k, v), dout)  # raises if the backend has no backward here
    del q, k, v, out, dout
    return ms, note


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="torch_sdpa.json", help="JSON output file")
    ap.add_argument("--family", default="all",
                    help="prefill, decode, backward, backward-gqa, ablation, fp8, hopper-prefill, llama, varlen, "
                    "varlen-backward "
                    "or all, comma-separated")
    ap.add_argument("--quick", action="store_true", help="fewer shapes, 20 timed calls")
    ap.add_argument("--iters", type=int, default=0, help="timed calls per shape (>= 20)")
    ap.add_argument("--layout", default="bhsd", choices=["bhsd", "bshd"],
                    help="bhsd: contiguous [B,H,S,D] (PyTorch's native, its best case); "
                    "bshd: FlashLadder's [B,S,H,D] viewed as [B,H,S,D]")
    ap.add_argument("--backends", default="flash,cudnn,efficient,math",
                    help="comma-separated subset of flash,cudnn,efficient,math, and ladder: the package's "
                    "autograd (flashladder.attention) on the backward families")
    ap.add_argument("--dtype", default="fp16", choices=sorted(TORCH_DTYPES),
                    help="the inputs' 16-bit type (as ladder_bench --fl_dtype)")
    ap.add_argument("--inputs", default="randn", choices=["randn", "offset"],
                    help="the backward families' inputs: randn, N(0, 1); offset, the runner's random input "
                    "(N(0, 1) + 0.25 for Q, K, dO, + 0.5 for V)")
    args = ap.parse_args()
    global DTYPE, INPUTS
    DTYPE, INPUTS = args.dtype, args.inputs
    try:
        families = parse_families(args.family)
    except ValueError as e:
        ap.error("--family: %s" % e)

    torch = runinfo.cuda_torch("torch_sdpa.py")
    if torch is None:
        return 0
    try:
        from torch.nn.attention import SDPBackend
    except ImportError:
        print("torch_sdpa.py: this PyTorch (%s) has no torch.nn.attention.sdpa_kernel (needs "
              ">= 2.3); nothing to measure." % torch.__version__)
        return 0

    all_backends = {
        "flash": getattr(SDPBackend, "FLASH_ATTENTION", None),
        "cudnn": getattr(SDPBackend, "CUDNN_ATTENTION", None),
        "efficient": getattr(SDPBackend, "EFFICIENT_ATTENTION", None),
        "math": getattr(SDPBackend, "MATH", None),
    }
    wanted = [b.strip() for b in args.backends.split(",") if b.strip()]
    fl = runinfo.import_flashladder() if "ladder" in wanted else None
    iters = max(20, args.iters) if args.iters else (20 if args.quick else 30)
    bench = Bench(torch, iters=iters, warmup=3 if args.quick else 5)

    shapes = []
    if "prefill" in families:
        shapes += prefill_shapes(args.quick)
    if "decode" in families:
        shapes += decode_shapes(args.quick)
    for family in ("backward", "backward-gqa", "backward-gqa8"):
        if family in families:
            shapes += backward_shapes(args.quick, family)
    if "ablation" in families:
        shapes += ablation_shapes(args.quick)
    if "fp8" in families:
        shapes += fp8_shapes(args.quick)
    if "hopper-prefill" in families:
        shapes += hopper_shapes(args.quick)
    if "llama" in families:
        shapes += llama_shapes()
    for family in VARLEN_FAMILIES:
        if family in families:
            shapes += varlen_shapes(family)

    context = run_context(torch, "bench/pytorch/torch_sdpa.py", args.layout, bench)
    results = []
    for s in shapes:
        b, sq, sk, hq = s["batch"], s["seqlen_q"], s["seqlen_k"], s["heads_q"]
        flops = flops_of(s)  # 2.5 x the forward's for the backward family
        nbytes = bytes_of(s)
        ways = [("nested", "_nested"), ("padded", "_padded")] if s["family"] in VARLEN_FAMILIES else [(args.layout, "")]
        for name, (layout, suffix) in [(n, w) for n in wanted for w in ways]:
            rung = "torch_" + name + suffix
            fields = {k: v for k, v in s.items() if k != "lens"}
            entry = dict(name="%s/%s" % (rung, shape_name(s)), run_name="%s/%s" % (rung, shape_name(s)),
                         run_type="iteration", rung=rung, iterations=iters, dtype=DTYPE,
                         time_unit="ms", real_time=0.0, cpu_time=0.0, TFLOPS=0.0, skipped="",
                         note="", **fields)
            entry["GB/s"] = 0.0
            backend = all_backends.get(name) if name != "ladder" else fl
            math_bytes = ELEM_BYTES * 3 * b * hq * sq * sk  # S, P and a softmax temporary
            if s["family"] in BACKWARD_FAMILIES:
                math_bytes *= 2  # the saved P and dP / dS of the backward as well
            if name == "ladder" and s["family"] not in BACKWARD_FAMILIES:
                entry["skipped"] = "the package is timed on the backward families only"
            elif name == "ladder" and fl is None:
                entry["skipped"] = "flashladder not importable (PYTHONPATH=build/release/python)"
            elif backend is None:
                entry["skipped"] = "backend not in this torch"
            elif name == "math" and math_bytes > MATH_LIMIT_BYTES:
                entry["skipped"] = "math backend would materialize ~%.1f GB of scores" % (
                    math_bytes / 2**30)
            else:
                try:
                    ms, note = (run_backward_ladder(torch, bench, fl, s) if name == "ladder" else
                                run_backend(torch, bench, backend, s, layout))
                    record_time(entry, ms, note, flops, nbytes)
                except (RuntimeError, ValueError, TypeError) as e:  # the backend (or the package) refused it
                    record_refusal(torch, entry, e)
            finish_entry(entry, results, 48)

    write_benchmarks(args.out, context, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
