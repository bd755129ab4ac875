#!/usr/bin/env python3
"""Where rung 11's dQ error on long rows comes from: the kernel against an fp64 emulation of it
on the kernel's own inputs, one source of error at a time.

One query against seqlen_k keys (GQA 32/8, head_dim 128; inputs N(0, 1) + 0.25): the forward
(rung 06, or 10) gives O, its fp32 copy and the LSE; rung 11's backward runs with D from the fp32 O
(variant o32-delta), from the 16-bit O (o16-delta) and deterministically. Then, in fp64 on the GPU:
the exact O, LSE, D and dQ; the forward's errors (O in fp32 and 16 bits, the LSE); how far each D
is from the exact one; and dQ recomputed as the kernel does (P from an LSE, dS = P (dP - D) rounded
to 16 bits, dQ = s dS K) with each combination of the exact or the kernel's LSE and D, the row sum
of dS (zero for a consistent D) and the sum of P minus 1.

    PYTHONPATH=build/release/python python3 bench/studies/bwd_delta_study.py

The committed log (bench/results/<gpu>/backward-long-rows/delta-study/) was made before the exact
D pass existed, when the rung itself took D from the fp32 O and attention_backward without
out_fp32 from the 16-bit O: what the o32-delta and o16-delta variants do now.
"""

import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "pytorch"))
import runinfo  # noqa: E402  bench/pytorch/runinfo.py

flashladder = runinfo.import_flashladder()
if flashladder is None or not torch.cuda.is_available():
    print("needs the flashladder package and a CUDA device: nothing measured")
    sys.exit(0)
from flashladder import _core, _launch  # noqa: E402

torch.manual_seed(0)
dev = "cuda"


def run(sk, hq, hkv, dt, fwd_rung=6):
    d, b, sq = 128, 1, 1
    q = (torch.randn(b, sq, hq, d, device=dev) + 0.25).to(dt)
    k = (torch.randn(b, sk, hkv, d, device=dev) + 0.25).to(dt)
    v = (torch.randn(b, sk, hkv, d, device=dev) + 0.25).to(dt)
    do = (torch.randn(b, sq, hq, d, device=dev) + 0.25).to(dt)
    key = _core.check_qkv(q, k, v, False, None)
    out, lse, o32 = _launch.forward(q, k, v, key, fwd_rung, "", o_fp32=True)
    dq, dk, dv = flashladder.attention_backward(do, q, k, v, out, lse, rung=11, variant="o32-delta", out_fp32=o32)
    dq16, _, _ = flashladder.attention_backward(do, q, k, v, out, lse, rung=11, variant="o16-delta")
    dqd, _, _ = flashladder.attention_backward(do, q, k, v, out, lse, rung=11, variant="o32-delta", out_fp32=o32,
                                               deterministic=True)
    g, s = hq // hkv, d ** -0.5
    Q = q.double().transpose(1, 2)              # [b,hq,1,d]
    K = k.double().repeat_interleave(g, 2).transpose(1, 2)
    V = v.double().repeat_interleave(g, 2).transpose(1, 2)
    dO = do.double().transpose(1, 2)
    S = (Q @ K.transpose(-1, -2)) * s           # [b,hq,1,sk]
    L = torch.logsumexp(S, -1, keepdim=True)
    P = torch.exp(S - L)
    O = P @ V
    dP = dO @ V.transpose(-1, -2)
    Dx = (dO * O).sum(-1, keepdim=True)
    dS = P * (dP - Dx)
    dQ = (dS @ K) * s                           # exact
    def rel(a, ref):
        return ((a.double() - ref).norm() / ref.norm()).item()

    dq_ = dq.double().transpose(1, 2)
    print("sk=%d H=%d/%d %s fwd rung %d" % (sk, hq, hkv, dt, fwd_rung))
    print("  kernel dQ rel err: o32-D %.3e, o16-D %.3e, deterministic %.3e" % (rel(dq_, dQ), rel(dq16.double().transpose(1, 2), dQ), rel(dqd.double().transpose(1,2), dQ)))
    print("  fwd: O32 rel err %.3e, O16 %.3e, LSE max abs err %.3e" % (rel(o32.double().transpose(1,2), O), rel(out.double().transpose(1,2), O), (lse.double()[..., None] - L).abs().max().item()))
    Dk = (dO * o32.double().transpose(1, 2)).sum(-1, keepdim=True)
    print("  D: exact mean %.4f, |D(o32) - D| max %.3e, |D(o16) - D| max %.3e" % (Dx.mean().item(), (Dk - Dx).abs().max().item(), ((dO * out.double().transpose(1,2)).sum(-1, keepdim=True) - Dx).abs().max().item()))
    # emulate the kernel on the device in fp64 with the kernel's inputs, one source at a time
    Lk = lse.double()[..., None]
    for name, LL, DD, r16 in (("exact L, exact D, dS rounded", L, Dx, True),
                              ("kernel L, exact D, dS rounded", Lk, Dx, True),
                              ("exact L, o32 D, dS rounded", L, Dk, True),
                              ("kernel L, o32 D, dS rounded", Lk, Dk, True),
                              ("kernel L, o32 D, dS exact", Lk, Dk, False)):
        Pk = torch.exp(S - LL)
        dSk = Pk * (dP - DD)
        if r16:
            dSk = dSk.to(dt).double()
        print("  emulated %-32s dQ rel err %.3e, row sum of dS %.3e (sum |dS| %.3e)" % (name, rel(dSk @ K * s, dQ), dSk.sum(-1).abs().max().item(), dSk.abs().sum(-1).max().item()))
    print("  sum P (kernel L) - 1: %.3e" % (torch.exp(S - Lk).sum(-1) - 1).abs().max().item())
for dt in (torch.float16, torch.bfloat16):
    run(100003, 32, 8, dt)
run(100003, 32, 8, torch.float16, fwd_rung=10)
run(16384, 32, 8, torch.float16)
run(4096, 32, 8, torch.float16)
