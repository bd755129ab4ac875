#!/usr/bin/env python3
"""dQ = dS K on e4m3 operands, as rung 14's `fp8-dq` variant runs it and with finer scales: dQ's
error against fp64, emulated on the CPU with NumPy (no GPU, no PyTorch).

    python3 bench/studies/fp8_dq_scales.py --out DIR [--seqlen 1024] [--head-dim 128] [--heads 2]
        [--dtype bf16|fp16] [--seed 2024]

Needs numpy and ml_dtypes (its float8_e4m3fn: round to nearest even; values are clamped to
+-448 first, as the kernel's saturating conversion does). Pinned: numpy 2.4.6, ml_dtypes 0.6.0.

What is emulated (steps/14_hopper_backward/README.md, "dQ in e4m3"): Q, K, V and dO in bf16 (or
fp16, --dtype); S, P = exp(S - LSE) (the fp64 LSE), dP = dO V^T and dS = P o (dP - D) in fp32; dS
rounded to the 16-bit type (the 16-bit path's rounding, which the kernel keeps), then to e4m3 with
one scale per tile; K
rounded to e4m3 with one scale per block of keys; dQ = sum over key blocks of the e4m3 products in
fp32, each times its scales. A scale is amax / 448, at least fp32's smallest normal, 1 for zeros.

The scales compared (`SCALES`):
- `fp8-dq-tile` (the variant as first built): dS per M-query x 128-key tile (M = 64 at d = 128,
  128 at d = 64), K per 128-key block;
- dS per 64 x 64 tile (the emulation of rung 13's README);
- dS per query row of its tile, `fp8-dq` as built since `05aa235` (a scale per row of dS is legal:
  rows are dQ's rows);
- dS per query row of each 64-key half of the block (two scales per row: each math warpgroup's
  keys alone, so no exchange between the warpgroups; dQ's GEMM then sums the halves apart);
- K per dim of its block (legal too: K's dims are dQ's columns, so each column is rescaled
  after the GEMM by its own scale);
- both;
- and, to tell which rounding the error comes from (bounds, not kernels): `fp8-dq` with K kept
  16-bit (dS alone in e4m3), and `fp8-dq` with dS rounded to e4m3's 3 mantissa bits but without
  its exponent range (no value flushed or saturated);
- `fp8-dq` with a Hadamard rotation over each block's 128 keys, the GEMM's reduction dimension:
  dQ = (dS H)(H^T K), both rotated operands in e4m3 (a tail block padded with zero keys). It
  spreads a sharp row of dS, and each dim of K, over the block's keys before they are rounded.

Inputs: the harness's random input (N(0, 1) + 0.25 for Q and K, + 0.5 for V; dO N(0, 1)) and its
`--input outlier` (common/src/inputs.cpp: max(2, d / 32) channels of Q and K times 10 to 100, every
channel scaled so that the scores' standard deviation is 2), not causal and causal. Each figure is
||dQ - dQ64|| / ||dQ64|| over the batch and heads. NumPy's random numbers are not the harness's:
the inputs have its distributions, not its values.

Writes DIR/fp8_dq_scales.json and DIR/fp8_dq_scales.md.
"""

import argparse
import json
import os
import platform
import subprocess
import sys

import ml_dtypes
import numpy as np

E4M3_MAX = 448.0
FLT_MIN = float(np.finfo(np.float32).tiny)

#: (name, dS tile (queries, keys) or "row" of the variant's tile, K scale "block" or "dim"); M is
#: the variant's query block: 64 at d = 128, 128 at d = 64 (--tile-rows)
SCALES = [
    ("fp8-dq-tile: dS per M x 128 tile, K per 128-key block", ("M", 128), "block"),
    ("dS per 64 x 64 tile, K per 128-key block", (64, 64), "block"),
    ("fp8-dq: dS per query row of its tile, K per 128-key block", "row", "block"),
    ("dS per query row of each 64-key half, K per 128-key block", ("row", 64), "block"),
    ("dS per M x 128 tile, K per dim of a 128-key block", ("M", 128), "dim"),
    ("dS per query row, K per dim of a 128-key block", "row", "dim"),
    ("bound: fp8-dq with K 16-bit (dS alone in e4m3)", "row", "block", "e4m3", "k16"),
    ("bound: fp8-dq with dS in 3 mantissa bits, no range limit", "row", "block", "m3", "e4m3"),
    ("fp8-dq with a Hadamard rotation over each block's 128 keys", "row", "block", "e4m3", "e4m3", True),
]
KEY_BLOCK = 128


def bf16(x):
    return x.astype(ml_dtypes.bfloat16).astype(np.float32)


def fp16(x):
    return x.astype(np.float16).astype(np.float32)


#: the 16-bit type of the inputs and of dS (--dtype)
ROUND16 = {"bf16": bf16, "fp16": fp16}


def e4m3(x):
    """x (already divided by its scale) rounded to e4m3, saturated at +-448, in fp32."""
    return np.clip(x, -E4M3_MAX, E4M3_MAX).astype(ml_dtypes.float8_e4m3fn).astype(np.float32)


def hadamard(n):
    """The n x n Hadamard matrix (Sylvester's, n a power of 2) over sqrt(n): orthogonal."""
    h = np.ones((1, 1))
    while h.shape[0] < n:
        h = np.block([[h, h], [h, -h]])
    return (h / np.sqrt(n)).astype(np.float32)


def m3(x):
    """x rounded to 4 significant bits (e4m3's mantissa) at any exponent: e4m3 without its range."""
    m, e = np.frexp(x)
    return np.ldexp(np.round(m * 16) / 16, e).astype(np.float32)


def scale_of(amax):
    return np.where(amax > 0, np.maximum(amax / E4M3_MAX, FLT_MIN), 1.0).astype(np.float32)


def harness_outlier_factors(d):
    """common/src/inputs.cpp's outlier_channels and outlier_scale, per channel."""
    n = max(2, d // 32)
    chans = [min(d - 1, 3 + i * (d // n) + 2 * i) for i in range(n)]
    facs = [10.0 * 10.0 ** (i / (n - 1)) for i in range(n)]
    f4 = sum(f ** 4 for f in facs) + d
    factor = np.full(d, (4.0 * d / (f4 * 1.0625 ** 2)) ** 0.25)
    for c, f in zip(chans, facs):
        factor[c] *= f
    return factor


def inputs(h, n, d, outlier, seed, r16=bf16):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((h, n, d)) + 0.25
    k = rng.standard_normal((h, n, d)) + 0.25
    v = rng.standard_normal((h, n, d)) + 0.5
    do = rng.standard_normal((h, n, d))
    if outlier:
        f = harness_outlier_factors(d)
        q, k = q * f, k * f
    return tuple(r16(t).astype(np.float64) for t in (q, k, v, do))


def reference(q, k, v, do, causal):
    """fp64: dQ (times the softmax scale), and the LSE, O the kernel reads."""
    n, d = q.shape[-2], q.shape[-1]
    sc = 1.0 / np.sqrt(d)
    s = q @ k.transpose(0, 2, 1) * sc
    if causal:
        s = np.where(np.triu(np.ones((n, n), dtype=bool), 1), -np.inf, s)
    m = s.max(-1, keepdims=True)
    lse = m + np.log(np.exp(s - m).sum(-1, keepdims=True))
    p = np.exp(s - lse)
    o = p @ v
    dp = do @ v.transpose(0, 2, 1)
    ds = p * (dp - (do * o).sum(-1, keepdims=True))
    return ds @ k * sc, lse, o


def dq_e4m3(q, k, v, do, lse, o, causal, ds_tile, k_mode, tile_rows, r16=bf16, ds_round="e4m3", k_round="e4m3",
            rotate=False):
    """dQ with dS and K in e4m3 (module docstring), fp32 sums; @p tile_rows: the variant's M."""
    f32 = np.float32
    n, d = q.shape[-2], q.shape[-1]
    sc = f32(1.0 / np.sqrt(d))
    q32, k32, v32, do32 = (t.astype(f32) for t in (q, k, v, do))
    s = q32 @ k32.transpose(0, 2, 1) * sc
    p = np.exp(s - lse.astype(f32))
    if causal:
        p = np.where(np.triu(np.ones((n, n), dtype=bool), 1), f32(0), p)
    dp = do32 @ v32.transpose(0, 2, 1)
    ds = r16(p * (dp - (do32 * o.astype(f32)).sum(-1, keepdims=True)))
    dq = np.zeros(q.shape, dtype=f32)
    per_row = ds_tile == "row" or ds_tile[0] == "row"
    rows_t, keys_t = (tile_rows, 128) if ds_tile == "row" else (tile_rows, ds_tile[1]) if per_row else ds_tile
    rows_t = tile_rows if rows_t == "M" else rows_t
    if rotate:  # pad the keys to whole blocks (zero keys add nothing) and rotate each block's keys
        pad = -n % KEY_BLOCK
        k32 = np.concatenate([k32, np.zeros((k32.shape[0], pad, d), f32)], axis=1)
        ds = np.concatenate([ds, np.zeros(ds.shape[:2] + (pad,), f32)], axis=2)
        hm = hadamard(KEY_BLOCK)
        nb = k32.shape[1] // KEY_BLOCK
        k32 = np.einsum("ij,hbjd->hbid", hm.T, k32.reshape(k32.shape[0], nb, KEY_BLOCK, d)).reshape(k32.shape)
        ds = np.einsum("hqbj,ji->hqbi", ds.reshape(ds.shape[0], n, nb, KEY_BLOCK), hm).reshape(ds.shape)
    nk = k32.shape[1]
    for k0 in range(0, nk, KEY_BLOCK):
        kb = k32[:, k0:k0 + KEY_BLOCK]  # [h, keys, d]
        ks = scale_of(np.abs(kb).max(axis=1, keepdims=True)) if k_mode == "dim" else \
            scale_of(np.abs(kb).max(axis=(1, 2), keepdims=True))
        k8 = kb / ks if k_round == "k16" else e4m3(kb / ks)
        for c0 in range(k0, min(k0 + KEY_BLOCK, nk), keys_t):  # the dS tiles' key columns in this block
            c1 = min(c0 + keys_t, k0 + KEY_BLOCK, nk)
            part = np.zeros(q.shape, dtype=f32)
            for r0 in range(0, n, rows_t):
                t = ds[:, r0:r0 + rows_t, c0:c1]
                a = np.abs(t).max(axis=2, keepdims=True) if per_row else np.abs(t).max(axis=(1, 2), keepdims=True)
                dss = scale_of(a)
                t8 = m3(t / dss) if ds_round == "m3" else e4m3(t / dss)
                part[:, r0:r0 + rows_t] = (t8 @ k8[:, c0 - k0:c1 - k0]) * dss
            dq += part * ks  # K's scale: per block, or per dim (dQ's columns)
    return dq * sc


def rel(x, ref):
    return float(np.linalg.norm((x.astype(np.float64) - ref).ravel()) / np.linalg.norm(ref.ravel()))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seqlen", type=int, default=1024)
    ap.add_argument("--head-dim", type=int, default=128)
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=2024)
    ap.add_argument("--dtype", choices=sorted(ROUND16), default="bf16", help="Q, K, V, dO and dS's 16-bit type")
    ap.add_argument("--tile-rows", type=int, default=None,
                    help="the variant's query block M (default: 64 at head_dim 128, 128 at 64)")
    a = ap.parse_args(argv)
    tile_rows = a.tile_rows or (128 if a.head_dim == 64 else 64)
    rows = []
    for outlier in (False, True):
        for causal in (False, True):
            q, k, v, do = inputs(a.heads, a.seqlen, a.head_dim, outlier, a.seed, ROUND16[a.dtype])
            ref, lse, o = reference(q, k, v, do, causal)
            for name, ds_tile, k_mode, *rounding in SCALES:
                err = rel(dq_e4m3(q, k, v, do, lse, o, causal, ds_tile, k_mode, tile_rows, ROUND16[a.dtype], *rounding),
                          ref)
                rows.append({"input": "outlier" if outlier else "random", "causal": causal, "config": name,
                             "rel_fro_dq": err})
                print("%-8s causal=%d %-58s dQ %.2e" % (rows[-1]["input"], causal, name, err))
    try:
        sha = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True,
                             cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
    except OSError:
        sha = "unknown"
    meta = {"what": "dQ = dS K in e4m3, its scales, emulated on the CPU (bench/studies/fp8_dq_scales.py)",
            "shape": {"batch": 1, "heads": a.heads, "seqlen": a.seqlen, "head_dim": a.head_dim, "tile_rows": tile_rows},
            "seed": a.seed, "dtype": a.dtype,
            "numpy": np.__version__, "ml_dtypes": ml_dtypes.__version__, "python": platform.python_version(),
            "git_sha": sha,
            "command": "python3 bench/studies/fp8_dq_scales.py --out %s --seqlen %d --head-dim %d --heads %d%s%s"
                       % (os.path.relpath(a.out), a.seqlen, a.head_dim, a.heads,
                          "" if a.dtype == "bf16" else " --dtype %s" % a.dtype,
                          "" if a.seed == 2024 else " --seed %d" % a.seed)}
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "fp8_dq_scales.json"), "w", encoding="utf-8") as f:
        json.dump({"meta": meta, "rows": rows}, f, indent=1)
        f.write("\n")
    out = ["# dQ = dS K in e4m3: its scales, emulated (`bench/studies/fp8_dq_scales.py`)", "",
           "Relative Frobenius error of dQ against fp64, dQ's GEMM alone in e4m3; batch 1, %(heads)d heads, "
           "seqlen %(seqlen)d, head_dim %(head_dim)d, M = %(tile_rows)d; " % meta["shape"]
           + "%s inputs, seed %d; NumPy on the CPU." % (a.dtype, a.seed),
           "Command: `%s` (commit `%s`, NumPy %s, ml_dtypes %s)." % (meta["command"], sha, np.__version__,
                                                                    ml_dtypes.__version__), "",
           "| scales | random | random, causal | outlier | outlier, causal |", "|---|--:|--:|--:|--:|"]
    for name, *_ in SCALES:
        cells = ["%.2e" % next(r["rel_fro_dq"] for r in rows if r["input"] == i and r["causal"] == c
                               and r["config"] == name) for i in ("random", "outlier") for c in (False, True)]
        out.append("| %s | %s |" % (name.replace("M x", "%d x" % tile_rows), " | ".join(cells)))
    with open(os.path.join(a.out, "fp8_dq_scales.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(out) + "\n")
    print("fp8_dq_scales.py: wrote %s" % a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
