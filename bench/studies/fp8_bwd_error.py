#!/usr/bin/env python3
"""Which GEMMs of attention's backward can take e4m3 operands, and with what scaling: the error of
dQ, dK and dV against fp64 when each GEMM's operands are rounded to e4m3, emulated in PyTorch.

    python3 bench/studies/fp8_bwd_error.py --out DIR [--seqlen 1024] [--head-dim 128] [--heads 2]

The backward recomputes S = Q K^T and P = exp(S - LSE), then runs five GEMMs (FlashAttention 2's
algorithm 2; rung 14):

    dV = P^T dO      dP = dO V^T      dS = P o (dP - D)      dQ = dS K      dK = dS^T Q

(D = rowsum(dO o O), the softmax scale folded into dQ and dK). An FP8 backward chooses, for each
GEMM, whether its operands are e4m3 and how each is scaled. This study measures those choices one
at a time and together, before any kernel is written (rung 18's design, issue 54):

- the 16-bit baseline: Q, K, V, O, dO in bf16, P and dS rounded to bf16 before their GEMMs, each
  GEMM accumulated in fp32 (rung 14's arithmetic);
- each GEMM with e4m3 operands: Q, K, V and dO with one scale per head (amax / 448, the forward's
  per-head descales); P scaled by 2^8 (rung 13's forward: P <= 1, so P x 256 <= 256 < 448) or by
  its block's amax; dS, whose range is not P's (signed, and proportional to dO's scale and to
  how far dP is from D), by one scale per head, per 64 x 64 tile (the kernel's tile: a reduction
  inside the CTA), or per row of a tile;
- the Hadamard rotation (rung 13's): Q and K rotated along head_dim (S unchanged; dQ and dK come
  out rotated and are rotated back), dO and V likewise (dP unchanged; dV rotated back).
- S in e4m3 means the forward was FP8 too: its LSE and O (rung 13's arithmetic on the same e4m3
  Q, K, V, P x 2^8) are what the backward reads, so exp(S - LSE) stays a softmax of the S it
  recomputes.

The inputs: N(0, 1) + 0.25 for Q and K, + 0.5 for V (the harness's random input), dO N(0, 1); and
the outlier input, the same with 4 of head_dim's channels of Q and K times 20 (the channels that
make per-head scales coarse). Causal and not. Each figure is the relative Frobenius error
||g - g64|| / ||g64|| of dQ, dK or dV. The e4m3 rounding is PyTorch's (torch.float8_e4m3fn:
round to nearest even, values within +-448 after scaling); the GEMMs accumulate in fp32 (what
wgmma's FP8 with fp32 accumulators gives, up to the order of the sums). Emulation on the CPU: no
GPU, no kernel; the kernel's own error is checked against these when it exists.

Writes DIR/fp8_bwd_error.json and DIR/fp8_bwd_error.md.
"""

import argparse
import json
import math
import os
import platform
import subprocess
import sys

import torch

E4M3_MAX = 448.0
TILE = 64  # the backward's tile of query rows and of keys (rung 14's 64 x 64 blocks at d = 128)


def e4m3(x, scale):
    """x rounded to e4m3 through its scale (x / scale within +-448), back in x's dtype."""
    return (x / scale).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).to(x.dtype) * scale


def scale_of(a):
    """amax / 448, at least the dtype's smallest normal (a slice whose values all but vanished, as dS
    on the rows of a peaked softmax, would otherwise get a scale of 0 and 0 / 0), 1 for zeros."""
    return torch.where(a > 0, (a / E4M3_MAX).clamp(min=torch.finfo(a.dtype).tiny), torch.ones_like(a))


def per_head(x):
    """One scale per (batch, head): amax / 448 over [seqlen, head_dim] (1 for an all-zero slice)."""
    return scale_of(x.abs().amax(dim=(-2, -1), keepdim=True))


def per_tile(x, rows=TILE, cols=TILE, row_only=False):
    """One scale per [rows, cols] tile of the last two dims (per row of a tile with row_only)."""
    *lead, n, m = x.shape
    pn, pm = -(-n // rows) * rows, -(-m // cols) * cols
    xp = torch.nn.functional.pad(x, (0, pm - m, 0, pn - n))
    t = xp.reshape(*lead, pn // rows, rows, pm // cols, cols)
    a = t.abs().amax(dim=-1, keepdim=True) if row_only else t.abs().amax(dim=(-3, -1), keepdim=True)
    return scale_of(a.expand_as(t).reshape(*lead, pn, pm)[..., :n, :m])


def hadamard(d, seed=0x5EED, dtype=torch.float64):
    """D H / sqrt(d): random signs times the Walsh-Hadamard matrix (orthogonal), rung 13's rotation."""
    h = torch.ones(1, 1, dtype=dtype)
    while h.shape[0] < d:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    g = torch.Generator().manual_seed(seed)
    signs = torch.randint(0, 2, (d,), generator=g).to(dtype) * 2 - 1
    return signs[:, None] * h / math.sqrt(d)


def inputs(b, h, n, d, outlier, seed):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, n, d, generator=g, dtype=torch.float64) + 0.25
    k = torch.randn(b, h, n, d, generator=g, dtype=torch.float64) + 0.25
    v = torch.randn(b, h, n, d, generator=g, dtype=torch.float64) + 0.5
    do = torch.randn(b, h, n, d, generator=g, dtype=torch.float64)
    if outlier:
        q[..., :4] *= 20
        k[..., :4] *= 20
    bf = lambda x: x.to(torch.bfloat16).to(torch.float64)  # noqa: E731  the 16-bit inputs
    return bf(q), bf(k), bf(v), bf(do)


def reference(q, k, v, do, causal):
    """fp64 forward and backward: O, LSE and dQ, dK, dV."""
    n, d = q.shape[-2], q.shape[-1]
    scale = 1.0 / math.sqrt(d)
    s = (q @ k.transpose(-1, -2)) * scale
    if causal:
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    lse = torch.logsumexp(s, dim=-1, keepdim=True)
    p = torch.exp(s - lse)
    o = p @ v
    dv = p.transpose(-1, -2) @ do
    dp = do @ v.transpose(-1, -2)
    dd = (do * o).sum(-1, keepdim=True)
    ds = p * (dp - dd)
    return o, lse, (ds @ k * scale, ds.transpose(-1, -2) @ q * scale, dv)


def backward(q, k, v, do, o, lse, causal, cfg):
    """dQ, dK, dV by the backward's GEMMs, each operand rounded as @p cfg says, accumulated in
    fp32. cfg: {"fp8": set of GEMM names (s, dp, dv, dq, dk), "p": "pow2" | "tile", "ds": "head" |
    "tile" | "row", "rotate": bool}."""
    f32 = torch.float32
    n, d = q.shape[-2], q.shape[-1]
    scale = 1.0 / math.sqrt(d)
    fp8 = cfg["fp8"]
    bf = lambda x: x.to(torch.bfloat16).to(f32)  # noqa: E731
    q, k, v, do, o, lse = (t.to(f32) for t in (q, k, v, do, o, lse))
    rot = hadamard(d, dtype=f32) if cfg.get("rotate") else None
    qr, kr, vr, dor = (q, k, v, do) if rot is None else (q @ rot, k @ rot, v @ rot, do @ rot)

    def operand(x, gemm):  # Q, K, V, dO as a GEMM reads them: e4m3 per head, or the 16-bit input
        return e4m3(x, per_head(x)) if gemm in fp8 else x

    # S = Q K^T (recomputed), P = exp(S - LSE) with the forward's fp32 LSE. With S from e4m3 Q and K
    # the forward was FP8 too (rung 13 on the same e4m3 Q, K, V, P x 2^8): its LSE and O are the ones
    # the backward reads, or exp(S - LSE) would not be a softmax of this S.
    s = operand(qr, "s") @ operand(kr, "s").transpose(-1, -2) * scale
    if causal:
        s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    if "s" in fp8:
        lse = torch.logsumexp(s, dim=-1, keepdim=True)
        p_fwd = torch.exp(s - lse)
        o = e4m3(p_fwd, torch.full_like(p_fwd, 2.0 ** -8)) @ e4m3(vr, per_head(vr))
        if rot is not None:
            o = o @ rot.T
    p = torch.exp(s - lse)
    # dV = P^T dO: P e4m3 (x 2^8, or its tile's amax) or bf16.
    if "dv" in fp8:
        ps = torch.full_like(p, 2.0 ** -8) if cfg["p"] == "pow2" else per_tile(p)
        p_op = e4m3(p, ps)
    else:
        p_op = bf(p)
    dv = p_op.transpose(-1, -2) @ operand(dor, "dv")
    # dP = dO V^T (rotated together: unchanged), D from the forward's O.
    dp = operand(dor, "dp") @ operand(vr, "dp").transpose(-1, -2)
    dd = (do * o).sum(-1, keepdim=True)  # D = rowsum(dO o O): the row's weighted mean of dP
    ds = p * (dp - dd)
    # dQ = dS K, dK = dS^T Q: dS e4m3 per head, per tile or per tile row, or bf16.
    if "dq" in fp8 or "dk" in fp8:
        mode = cfg["ds"]
        dss = per_head(ds) if mode == "head" else per_tile(ds, row_only=(mode == "row"))
        ds8 = e4m3(ds, dss)
        if mode == "row":  # dK reads dS^T: its tile rows are dS's tile columns
            ds8_t = e4m3(ds.transpose(-1, -2), per_tile(ds.transpose(-1, -2), row_only=True))
        else:
            ds8_t = ds8.transpose(-1, -2)
    ds16 = bf(ds)
    dq = (ds8 if "dq" in fp8 else ds16) @ operand(kr, "dq") * scale
    dk = (ds8_t if "dk" in fp8 else ds16.transpose(-1, -2)) @ operand(qr, "dk") * scale
    if rot is not None:  # back from the rotated basis
        dq, dk, dv = dq @ rot.T, dk @ rot.T, dv @ rot.T
    return dq, dk, dv


def rel(g, ref):
    g, ref = g.to(torch.float64), ref.to(torch.float64)
    return ((g - ref).norm() / ref.norm()).item()


CONFIGS = [  # (name, fp8 GEMMs, P scale, dS scale, rotate)
    ("16-bit (rung 14)", (), "pow2", "tile", False),
    ("S in e4m3", ("s",), "pow2", "tile", False),
    ("dP in e4m3", ("dp",), "pow2", "tile", False),
    ("dV in e4m3, P x 2^8", ("dv",), "pow2", "tile", False),
    ("dV in e4m3, P per tile", ("dv",), "tile", "tile", False),
    ("dQ in e4m3, dS per head", ("dq",), "pow2", "head", False),
    ("dQ in e4m3, dS per tile", ("dq",), "pow2", "tile", False),
    ("dQ in e4m3, dS per tile row", ("dq",), "pow2", "row", False),
    ("dK in e4m3, dS per head", ("dk",), "pow2", "head", False),
    ("dK in e4m3, dS per tile", ("dk",), "pow2", "tile", False),
    ("dK in e4m3, dS per tile row", ("dk",), "pow2", "row", False),
    ("dV, dQ, dK in e4m3 (dS per tile)", ("dv", "dq", "dk"), "pow2", "tile", False),
    ("dV, dQ, dK in e4m3 (dS per tile), rotated", ("dv", "dq", "dk"), "pow2", "tile", True),
    ("all five in e4m3 (dS per tile)", ("s", "dp", "dv", "dq", "dk"), "pow2", "tile", False),
    ("all five in e4m3 (dS per tile), rotated", ("s", "dp", "dv", "dq", "dk"), "pow2", "tile", True),
]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seqlen", type=int, default=1024)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=2024)
    a = ap.parse_args(argv)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    rows = []
    for outlier in (False, True):
        for causal in (False, True):
            q, k, v, do = inputs(1, a.heads, a.seqlen, a.head_dim, outlier, a.seed)
            o, lse, ref = reference(q, k, v, do, causal)
            for name, fp8, p_mode, ds_mode, rotate in CONFIGS:
                cfg = {"fp8": set(fp8), "p": p_mode, "ds": ds_mode, "rotate": rotate}
                got = backward(q, k, v, do, o, lse, causal, cfg)
                errs = [rel(g, r) for g, r in zip(got, ref)]
                rows.append({"input": "outlier" if outlier else "random", "causal": causal, "config": name,
                             "fp8_gemms": list(fp8), "p_scale": p_mode, "ds_scale": ds_mode, "rotated": rotate,
                             "rel_fro": {"dq": errs[0], "dk": errs[1], "dv": errs[2]}})
                print("%-8s causal=%d %-44s dQ %.2e  dK %.2e  dV %.2e" % (rows[-1]["input"], causal, name, *errs))
    os.makedirs(a.out, exist_ok=True)
    try:
        sha = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True,
                             cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
    except OSError:
        sha = "unknown"
    meta = {"what": "FP8 backward error, emulated on the CPU (bench/studies/fp8_bwd_error.py)",
            "shape": {"batch": 1, "heads": a.heads, "seqlen": a.seqlen, "head_dim": a.head_dim},
            "seed": a.seed, "torch": torch.__version__, "python": platform.python_version(), "git_sha": sha,
            "command": "python3 bench/studies/fp8_bwd_error.py --out %s --seqlen %d --head-dim %d --heads %d"
                       % (os.path.relpath(a.out), a.seqlen, a.head_dim, a.heads)}
    with open(os.path.join(a.out, "fp8_bwd_error.json"), "w", encoding="utf-8") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)
        f.write("\n")
    with open(os.path.join(a.out, "fp8_bwd_error.md"), "w", encoding="utf-8") as f:
        f.write(markdown(rows, meta))
    print("fp8_bwd_error.py: wrote %s" % a.out)
    return 0


def markdown(rows, meta):
    """The tables: one per input, a row per configuration, dQ, dK, dV errors not causal and causal."""
    out = ["# FP8 backward error, emulated (`bench/studies/fp8_bwd_error.py`)", "",
           "Relative Frobenius error of dQ, dK, dV against fp64; batch 1, %(heads)d heads, seqlen %(seqlen)d, "
           "head_dim %(head_dim)d; e4m3 rounding by PyTorch, fp32 accumulation, on the CPU." % meta["shape"],
           "Command: `%s` (commit `%s`, PyTorch %s)." % (meta["command"], meta["git_sha"], meta["torch"]), ""]
    for inp in ("random", "outlier"):
        out += ["## %s input" % inp, "",
                "| configuration | dQ | dK | dV | dQ causal | dK causal | dV causal |",
                "|---|--:|--:|--:|--:|--:|--:|"]
        for name, *_ in CONFIGS:
            cells = []
            for causal in (False, True):
                r = next(x for x in rows if x["input"] == inp and x["causal"] == causal and x["config"] == name)
                cells += ["%.2e" % r["rel_fro"][g] for g in ("dq", "dk", "dv")]
            out.append("| %s | %s |" % (name, " | ".join(cells)))
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
