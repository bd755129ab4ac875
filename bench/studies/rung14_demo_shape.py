#!/usr/bin/env python3
"""Where the training demo's attention backward time goes: rung 14 through the package on the demo's
attention shape (batch 2, 4k tokens, 16 query heads on 4 KV heads of 128, causal), with q, k, v
dense [b, s, h, d] and as transformers passes them ([b, h, s, d] views), bf16 and fp16:
flashladder.attention_backward alone and autograd's backward (CUDA events, median of 20). The
runner's time of the kernels alone is `14_hopper_backward --batch 2 --seqlen 4096 --heads 16
--kv-heads 4 --dim 128 --causal --dtype bf16`.

    PYTHONPATH=build/release/python python3 bench/studies/rung14_demo_shape.py
"""
import torch
import flashladder
B, S, HQ, HKV, D = 2, 4096, 16, 4, 128
def bench(fn, n=20):
    for _ in range(3): fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(n):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); b.synchronize(); ts.append(a.elapsed_time(b))
    ts.sort(); return ts[len(ts) // 2]
for dt in (torch.bfloat16, torch.float16):
    for layout in ("bshd", "bhsd-view"):
        g = torch.Generator(device="cuda").manual_seed(0)
        def mk(h):
            if layout == "bshd":
                return torch.randn(B, S, h, D, device="cuda", dtype=dt, generator=g)
            return torch.randn(B, h, S, D, device="cuda", dtype=dt, generator=g).transpose(1, 2)
        q, k, v = mk(HQ), mk(HKV), mk(HKV)
        out, lse = flashladder.attention(q, k, v, causal=True, return_lse=True)
        dout = torch.randn_like(out)
        ms = bench(lambda: flashladder.attention_backward(dout, q, k, v, out, lse, causal=True))
        q2, k2, v2 = (t.detach().requires_grad_() for t in (q, k, v))
        o2 = flashladder.attention(q2, k2, v2, causal=True)
        ms_ag = bench(lambda: torch.autograd.grad(o2, (q2, k2, v2), dout, retain_graph=True))
        print("%s %-9s attention_backward %.3f ms, autograd backward %.3f ms" % (str(dt)[6:], layout, ms, ms_ag))
