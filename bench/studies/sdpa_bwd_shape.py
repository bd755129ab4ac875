#!/usr/bin/env python3
"""One forward and one backward of PyTorch SDPA on one backend and one shape, for a profiler to
catch the backend's backward kernels beside the ladder's (bench/ncu_summary.sh's cudnn_bwd_*
targets; rung 14's README, "Where it is not at cuDNN's speed").

    python3 bench/studies/sdpa_bwd_shape.py --backend cudnn --dtype bf16 --batch 2 --seqlen 4096 \\
        --heads 16 --kv-heads 4 --dim 128 --causal 1

q [batch, heads, seqlen, dim], k and v with kv-heads (GQA through enable_gqa), N(0, 1) inputs;
the backward of O's sum with a random dO. Exits 77 without a CUDA device."""

import argparse
import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", choices=("cudnn", "flash", "efficient"), default="cudnn")
    ap.add_argument("--dtype", choices=("fp16", "bf16"), default="bf16")
    for name, default in (("batch", 2), ("seqlen", 4096), ("heads", 16), ("kv-heads", 0), ("dim", 128),
                          ("causal", 1), ("repeat", 1)):
        ap.add_argument("--" + name, type=int, default=default)
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device: skipped (exit 77)")
        return 77
    dt = torch.bfloat16 if a.dtype == "bf16" else torch.float16
    hkv = a.kv_heads or a.heads
    q = torch.randn(a.batch, a.heads, a.seqlen, a.dim, device="cuda", dtype=dt, requires_grad=True)
    k = torch.randn(a.batch, hkv, a.seqlen, a.dim, device="cuda", dtype=dt, requires_grad=True)
    v = torch.randn(a.batch, hkv, a.seqlen, a.dim, device="cuda", dtype=dt, requires_grad=True)
    backend = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
               "efficient": SDPBackend.EFFICIENT_ATTENTION}[a.backend]
    with sdpa_kernel([backend]):
        for _ in range(a.repeat):
            out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=bool(a.causal),
                                                                   enable_gqa=hkv != a.heads)
            out.backward(torch.randn_like(out))
    torch.cuda.synchronize()
    print("sdpa %s %s B=%d N=%d H=%d/%d d=%d causal=%d: forward and backward ran" % (
        a.backend, a.dtype, a.batch, a.seqlen, a.heads, hkv, a.dim, a.causal))
    return 0


if __name__ == "__main__":
    sys.exit(main())
