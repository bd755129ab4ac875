#!/usr/bin/env python3
"""What the fp32 O costs a training step through the package: the forward with and without it, and
rung 14's backward with D from it (its `o32-delta` entry) against D from the 16-bit O (the rung's
rule on rows of at most 4096 keys: steps/11_backward/delta_policy.h, kO16DeltaKeys), on the bench's
backward grid (batch x seqlen = 16k tokens, 2048 / head_dim heads, MHA).

    PYTHONPATH=<build>/python python3 bench/studies/o32_cost.py --dtype bf16 --out <folder>

Per shape, CUDA-event medians (L2 flushed before each call, bench/pytorch/timing.py) of four calls,
timed in rounds in a rotated order: the forward writing O, the LSE and the fp32 O (what autograd
ran before this rule on every row), the forward without the fp32 O, the backward from the fp32 O,
the backward from the 16-bit O. Writes o32_cost.json and prints a table. Without PyTorch, a CUDA
device or the package it says so and measures nothing."""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "pytorch"))

import runinfo  # noqa: E402
import timing  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dtype", choices=("bf16", "fp16"), default="bf16")
    ap.add_argument("--dims", default="64,128,256")
    ap.add_argument("--seqlens", default="512,1024,2048,4096")
    ap.add_argument("--causal", default="0,1")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", help="folder for o32_cost.json")
    a = ap.parse_args()
    torch = runinfo.cuda_torch("o32_cost.py")
    flashladder = runinfo.import_flashladder() if torch else None
    if flashladder is None:
        return 0
    from flashladder import _core, _launch
    dt = torch.bfloat16 if a.dtype == "bf16" else torch.float16
    timer = timing.EventTimer(torch)
    rows = []
    print("o32_cost.py: %s, PyTorch %s, flashladder %s, %s" % (torch.cuda.get_device_name(), torch.__version__,
                                                                getattr(flashladder, "__version__", "?"), a.dtype))
    print("%-26s %10s %10s %8s %10s %10s %8s" % ("shape", "fwd+o32", "fwd", "saved", "bwd(o32)", "bwd(o16)", "saved"))
    for d in (int(x) for x in a.dims.split(",")):
        for n in (int(x) for x in a.seqlens.split(",")):
            for causal in (int(x) for x in a.causal.split(",")):
                b, h = 16384 // n, 2048 // d
                g = torch.Generator(device="cuda").manual_seed(n + d + causal)
                q, k, v, dout = (torch.randn(b, n, h, d, device="cuda", dtype=dt, generator=g) for _ in range(4))
                key = _core.check_qkv(q, k, v, bool(causal), None, tensor_type=torch.Tensor)
                out, lse, o32 = _launch.forward(q, k, v, key, o_fp32=True)
                calls = {
                    "fwd_o32": lambda: _launch.forward(q, k, v, key, o_fp32=True),
                    "fwd": lambda: _launch.forward(q, k, v, key, o_fp32=False, backward=True),
                    "bwd_o32": lambda: _launch.backward(dout, q, k, v, out, lse, key, False, 14, "o32-delta", o32),
                    "bwd_o16": lambda: _launch.backward(dout, q, k, v, out, lse, key, False, 14, "o16-delta", None),
                }
                per_round = timing.paired_rounds(
                    {name: (lambda fn=fn: timer.time_ms(fn, iters=a.iters)) for name, fn in calls.items()}, a.rounds)
                ms = {name: timing.median(xs) for name, xs in per_round.items()}
                shape = "d%d/N%d/causal%d" % (d, n, causal)
                rows.append({"shape": shape, "head_dim": d, "seqlen": n, "batch": b, "heads": h, "causal": causal,
                             "ms": ms, "rounds": per_round})
                print("%-26s %10.4f %10.4f %7.1f%% %10.4f %10.4f %7.1f%%" % (
                    shape, ms["fwd_o32"], ms["fwd"], 100 * (1 - ms["fwd"] / ms["fwd_o32"]), ms["bwd_o32"],
                    ms["bwd_o16"], 100 * (1 - ms["bwd_o16"] / ms["bwd_o32"])))
                del q, k, v, dout, out, lse, o32
    if a.out:
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "o32_cost.json"), "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "dtype": a.dtype,
                       "iters": a.iters, "rounds": a.rounds, "rows": rows}, f, indent=1)
        print("wrote", os.path.join(a.out, "o32_cost.json"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
