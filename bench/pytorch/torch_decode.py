#!/usr/bin/env python3
"""Decode through the package: flashladder.attention with rung=None (the route,
flashladder._core.route_forward) against PyTorch SDPA's cuDNN and flash backends, on the same GPU,
in one process.

Shapes: a decode step (seqlen_q 1) at batch 1 and 8, 32 query heads on 8 KV heads (GQA 4:1), and
MHA 32/32 at batch 1, head_dim 128, seqlen_k 512 ... 128k, fp16 and bf16; a few queries per
sequence (speculative decoding: seqlen_q 4 and 16) against 16k keys, causal, bottom-right aligned
(SDPA gets torch.nn.attention.bias.causal_lower_right). Per shape:

  route         flashladder.attention(q, k, v) (rung=None): which rung the route picked, its time
  rung 08       flashladder.attention(q, k, v, rung=8)
  prefill rung  flashladder.attention(q, k, v, rung=<DEFAULT_FORWARD's first>): the route before
                decode routing
  kvcache       flashladder.flash_attn_with_kvcache(q, k, v, cache_seqlens=seqlen_k): the same cache
                through FlashAttention's interface (its route, per-sequence lengths on the device)
  paged         the same with the cache in pages of PAGE (256) slots, shuffled in a pool, and a
                block table
  cuDNN, flash  F.scaled_dot_product_attention with the backend forced (enable_gqa=True; a backend
                that refuses the shape or the mask is recorded as refused, with its message)

Timing (bench/pytorch/timing.py): CUDA events around one call, median of --iters calls after a
warm-up, the L2 flushed before each by writing FLUSH_BYTES (1 GiB, about 0.35 ms on an H100): long enough that the host's
work of a call (the package's checks and plan, SDPA's dispatch: tens of microseconds) is queued
while the flush runs, so every column times the call's kernels on the GPU, the same way. The
columns of a shape are timed in turn, --repeats times in a rotating order; each figure is the
median of the repeats' medians. GB/s counts K and V read once (the decode metric, problem.h's
kv_bytes); TFLOP/s counts the unmasked (query, key) pairs (4 x d each).

Writes <out>/torch_decode.json and <out>/torch_decode.log, and adds its command line to
<out>/meta.json (made when absent: device, date, commit).

    PYTHONPATH=build/release/python python3 bench/pytorch/torch_decode.py --out DIR [--iters N] [--repeats R] [--quick]

Exits 0 with a message, measuring nothing, without PyTorch, a CUDA device or the package.
"""

import argparse
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import runinfo  # noqa: E402  bench/pytorch/runinfo.py
import timing  # noqa: E402  bench/pytorch/timing.py: the events, the flush, the rounds in turn
import torch_sdpa  # noqa: E402  bench/pytorch/torch_sdpa.py (unmasked_pairs)

HEAD_DIM = 128
FLUSH_BYTES = 1 << 30
SEQLENS_K = [512, 2048, 8192, 16384, 32768, 65536, 131072]
TARGET = 0.95  # decode through the package against cuDNN at 64k and 128k keys (bench goal)
PAGE = 256  # the paged column's page size (tokens)
PAGED_TARGET = 0.95  # paged against contiguous through flash_attn_with_kvcache (bench goal)


def shapes(quick):
    out = []
    for dtype in ("fp16", "bf16"):
        for batch, hq, hkv in ((1, 32, 8), (8, 32, 8), (1, 32, 32)):
            for sk in SEQLENS_K:
                if quick and sk not in (8192, 65536, 131072):
                    continue
                if hkv == hq and sk not in (16384, 65536):
                    continue  # MHA: two points
                out.append(dict(batch=batch, seqlen_q=1, seqlen_k=sk, heads_q=hq, heads_kv=hkv,
                                dtype=dtype, causal=False))
        for sq in (4, 16):
            out.append(dict(batch=1, seqlen_q=sq, seqlen_k=16384, heads_q=32, heads_kv=8,
                            dtype=dtype, causal=True))
    return out


def kv_bytes(s):
    return 2 * s["batch"] * s["heads_kv"] * s["seqlen_k"] * HEAD_DIM * 2


def flops(s):
    pairs = torch_sdpa.unmasked_pairs(s["seqlen_q"], s["seqlen_k"], s["causal"])
    return 4.0 * s["batch"] * s["heads_q"] * pairs * HEAD_DIM


def run(args):
    torch = runinfo.cuda_torch("torch_decode.py")
    if torch is None:
        return 0
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    fl = runinfo.import_flashladder(args.package)
    if fl is None:
        return 0
    from flashladder import _core

    bench = timing.EventTimer(torch, FLUSH_BYTES)
    info = fl.device_info()
    prefill = next(n for n in _core.DEFAULT_FORWARD
                   if any(r.number == n and not r.variant for r in fl.rungs()))
    dtypes = {"fp16": torch.float16, "bf16": torch.bfloat16}
    backends = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}
    rows = []
    print("%-34s %-18s %10s %10s %10s %10s %10s %8s %10s %10s" % (
        "shape", "route", "route ms", "rung 08", "prefill", "cuDNN", "flash", "vs cuDNN", "kvcache", "paged"))
    for s in shapes(args.quick):
        dt = dtypes[s["dtype"]]
        gen = torch.Generator(device="cuda").manual_seed(2024)
        b, sq, sk, hq, hkv = s["batch"], s["seqlen_q"], s["seqlen_k"], s["heads_q"], s["heads_kv"]
        q = torch.randn(b, sq, hq, HEAD_DIM, device="cuda", dtype=dt, generator=gen)
        k = torch.randn(b, sk, hkv, HEAD_DIM, device="cuda", dtype=dt, generator=gen)
        v = torch.randn(b, sk, hkv, HEAD_DIM, device="cuda", dtype=dt, generator=gen)
        key = _core.check_qkv(q, k, v, s["causal"], None)
        problem = _core.make_problem(*key)
        entry, why = _core.route_forward(problem, q.device.index)
        row = dict(shape=s, route=entry.label, route_why=why, ms={}, refused={}, repeats={})
        calls = {}
        for name, rung in {"route": None, "rung08": 8, "prefill": prefill}.items():
            why_not = rung is not None and fl.supports(rung, b, sq, sk, hq, hkv, HEAD_DIM, s["dtype"],
                                                       s["causal"])
            if why_not:
                row["refused"][name] = why_not
            else:
                calls[name] = lambda rung=rung: fl.attention(q, k, v, rung=rung, causal=s["causal"])
        # FlashAttention's interface on the same cache, contiguous and in shuffled pages.
        used = torch.full((b,), sk, dtype=torch.int32, device="cuda")
        calls["kvcache"] = lambda: fl.flash_attn_with_kvcache(q, k, v, cache_seqlens=used, causal=s["causal"])
        if sk % PAGE == 0:
            pages = b * sk // PAGE
            table = torch.randperm(pages, device="cuda", generator=gen).to(torch.int32).view(b, sk // PAGE)
            k_pool = torch.empty(pages, PAGE, hkv, HEAD_DIM, device="cuda", dtype=dt)
            v_pool = torch.empty_like(k_pool)
            k_pool[table.long()] = k.view(b, sk // PAGE, PAGE, hkv, HEAD_DIM)
            v_pool[table.long()] = v.view(b, sk // PAGE, PAGE, hkv, HEAD_DIM)
            calls["paged"] = lambda: fl.flash_attn_with_kvcache(q, k_pool, v_pool, cache_seqlens=used,
                                                                 causal=s["causal"], block_table=table)
        # SDPA on [b, h, s, d] views of the same tensors; bottom-right causal as a bias object.
        qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        kwargs = dict(enable_gqa=hq != hkv)
        if s["causal"]:
            from torch.nn.attention.bias import causal_lower_right

            kwargs["attn_mask"] = causal_lower_right(sq, sk)
        for name, backend in backends.items():
            def sdpa(backend=backend):
                with sdpa_kernel([backend]):
                    return F.scaled_dot_product_attention(qt, kt, vt, **kwargs)
            try:
                sdpa()
                torch.cuda.synchronize()
                calls[name] = sdpa
            except RuntimeError as e:
                row["refused"][name] = str(e).splitlines()[0][:200]
        names = list(calls)
        # the columns in turn, the order rotated per repeat: no column always runs first
        row["repeats"].update(timing.paired_rounds(
            {name: (lambda name=name: bench.time_ms(calls[name], args.iters, args.warmup)) for name in names},
            args.repeats))
        row["ms"] = {name: statistics.median(v) for name, v in row["repeats"].items()}
        for name, ms in row["ms"].items():
            row.setdefault("gbps", {})[name] = kv_bytes(s) / (ms * 1e-3) / 1e9
            row.setdefault("tflops", {})[name] = flops(s) / (ms * 1e-3) / 1e12
        if "route" in row["ms"] and "cudnn" in row["ms"]:
            row["route_vs_cudnn"] = row["ms"]["cudnn"] / row["ms"]["route"]
        if "kvcache" in row["ms"] and "cudnn" in row["ms"]:
            row["kvcache_vs_cudnn"] = row["ms"]["cudnn"] / row["ms"]["kvcache"]
        if "paged" in row["ms"]:
            row["paged_vs_contiguous"] = row["ms"]["kvcache"] / row["ms"]["paged"]
        rows.append(row)
        del q, k, v, qt, kt, vt
        calls.clear()
        k_pool = v_pool = None

        def cell(n):
            return "%10.4f" % row["ms"][n] if n in row["ms"] else "%10s" % "refused"

        label = "%s B=%d Sq=%d Sk=%d H=%d/%d%s" % (s["dtype"], b, sq, sk, hq, hkv,
                                                   " causal" if s["causal"] else "")
        print("%-34s %-18s %s %s %s %s %s %8s %s %s" % (
            label, entry.label, cell("route"), cell("rung08"), cell("prefill"), cell("cudnn"),
            cell("flash"), "%.2fx" % row["route_vs_cudnn"] if "route_vs_cudnn" in row else "-",
            cell("kvcache"), cell("paged")))
    goal = [r["route_vs_cudnn"] for r in rows if r["shape"]["seqlen_q"] == 1
            and r["shape"]["seqlen_k"] in (65536, 131072) and "route_vs_cudnn" in r]
    result = {"schema": "flashladder.torch_decode/1", "date": runinfo.now(), **runinfo.git_info(),
              "command": runinfo.command_line(), "versions": runinfo.versions(),
              "device": {"name": info.name, "arch": info.arch, "sm_count": info.sm_count},
              "package": runinfo.package_path(fl), "head_dim": HEAD_DIM, "iters": args.iters,
              "repeats": args.repeats, "flush_bytes": FLUSH_BYTES,
              "prefill_rung": fl.find_rung(prefill).label, "target_vs_cudnn": TARGET,
              "target_met": bool(goal) and min(goal) >= TARGET, "rows": rows}
    kv_goal = [r["kvcache_vs_cudnn"] for r in rows if r["shape"]["seqlen_q"] == 1
               and r["shape"]["seqlen_k"] in (65536, 131072) and "kvcache_vs_cudnn" in r]
    paged = [r["paged_vs_contiguous"] for r in rows if "paged_vs_contiguous" in r]
    result.update(page=PAGE, kvcache_target_met=bool(kv_goal) and min(kv_goal) >= TARGET,
                  paged_target=PAGED_TARGET, paged_target_met=bool(paged) and min(paged) >= PAGED_TARGET)
    print("decode through the package vs cuDNN at 64k and 128k keys: worst %.2fx, target %.2fx: %s"
          % (min(goal) if goal else float("nan"), TARGET, "met" if result["target_met"] else "not met"))
    print("flash_attn_with_kvcache vs cuDNN at 64k and 128k keys: worst %.2fx, target %.2fx: %s"
          % (min(kv_goal) if kv_goal else float("nan"), TARGET, "met" if result["kvcache_target_met"] else "not met"))
    print("paged (pages of %d) vs contiguous through flash_attn_with_kvcache: %.2f-%.2fx, target %.2fx: %s"
          % (PAGE, min(paged) if paged else float("nan"), max(paged) if paged else float("nan"), PAGED_TARGET,
             "met" if result["paged_target_met"] else "not met"))
    runinfo.write_json(os.path.join(args.out, "torch_decode.json"), result)
    runinfo.update_meta(args.out, info.name, result, result["command"])
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="results folder (bench/results/<gpu>/...)")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--quick", action="store_true", help="three seqlen_k per decode shape")
    ap.add_argument("--package", help="the folder holding flashladder (default: PYTHONPATH, build/*/python)")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    with runinfo.Log(os.path.join(args.out, "torch_decode.log")):
        return run(args)


if __name__ == "__main__":
    sys.exit(main())
