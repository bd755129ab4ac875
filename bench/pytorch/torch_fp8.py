#!/usr/bin/env python3
"""FP8 attention through the package: flash_attn_func on float8_e4m3fn q, k, v (rung 13, with
FlashAttention 3's descales) beside the same call on the 16-bit tensors and PyTorch SDPA's cuDNN
backend, on the same GPU, in one process.

Shapes: rung 13's fp8 family (ladder_bench): 16k tokens (batch x seqlen) at seqlen 1k, 4k and 16k,
heads = 2048 / head_dim (the same FLOPs per token at every head_dim), head_dim 64, 128 and 256,
causal and not; the 16-bit originals bf16. Per shape:

  fp8         flash_attn_func(q8, k8, v8, q_descale=..., k_descale=..., v_descale=...): the call as
              a user makes it, V's transpose for rung 13 included (_fp8.attention_fp8)
  fp8 kernel  rung 13's launch alone on the same tensors (_ext.fp8_forward on a V^T made once):
              what the call costs without the transpose
  quantize    fp8_quantize of q, k and v (three calls: amax, descale, cast): what making the
              tensors costs once, not in the attention's time
  bf16        flash_attn_func(q, k, v) on the 16-bit originals (the package's route: rung 15 on sm_90)
  cuDNN       F.scaled_dot_product_attention with the cuDNN backend forced, bf16

Timing (bench/pytorch/timing.py): CUDA events around one call, the L2 flushed before each, median
of --iters calls after a warm-up; the columns of a shape timed in turn, --repeats times in a
rotating order, each figure the median of the repeats' medians. TFLOP/s counts the unmasked
(query, key) pairs, 4 x head_dim FLOPs each. Ratios are times: another column's over fp8's
(above 1: the FP8 call is faster).

Writes <out>/torch_fp8.json and <out>/torch_fp8.log, and adds its command line to <out>/meta.json.

    PYTHONPATH=build/release/python python3 bench/pytorch/torch_fp8.py --out DIR [--iters N] [--repeats R] [--quick]

Exits 0 with a message, measuring nothing, without PyTorch, a CUDA device, the package or rung 13.
"""

import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import runinfo  # noqa: E402  bench/pytorch/runinfo.py
import timing  # noqa: E402  bench/pytorch/timing.py
import torch_sdpa  # noqa: E402  bench/pytorch/torch_sdpa.py (unmasked_pairs)

TOKENS = 16384
SEQLENS = (1024, 4096, 16384)
HEAD_DIMS = (64, 128, 256)
COLUMNS = ("fp8", "fp8_kernel", "quantize", "bf16", "cudnn")


def shapes(quick):
    out = []
    for d in HEAD_DIMS:
        for n in SEQLENS:
            if quick and n != 4096:
                continue
            for causal in (False, True):
                out.append(dict(batch=TOKENS // n, seqlen=n, heads=2048 // d, head_dim=d, causal=causal))
    return out


def flops(s):
    pairs = torch_sdpa.unmasked_pairs(s["seqlen"], s["seqlen"], s["causal"])
    return 4.0 * s["batch"] * s["heads"] * pairs * s["head_dim"]


def run(args):
    torch = runinfo.cuda_torch("torch_fp8.py")
    if torch is None:
        return 0
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    fl = runinfo.import_flashladder(args.package)
    if fl is None:
        return 0
    from flashladder import _ext, _fp8, _launch

    if not any(r.number == 13 for r in fl.rungs()) or torch.cuda.get_device_capability() != (9, 0):
        print("torch_fp8.py: rung 13 (sm_90a) is not built or this GPU is not sm_90: nothing measured")
        return 0
    bench = timing.EventTimer(torch)
    info = fl.device_info()
    rows = []
    print("%-30s %10s %10s %10s %10s %10s %9s %9s %9s" % ("shape", "fp8 ms", "kernel", "quantize", "bf16", "cuDNN",
                                                         "bf16/fp8", "cuDNN/fp8", "TFLOP/s"))
    for s in shapes(args.quick):
        gen = torch.Generator(device="cuda").manual_seed(2024)
        b, n, h, d = s["batch"], s["seqlen"], s["heads"], s["head_dim"]
        q, k, v = (torch.randn(b, n, h, d, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(3))
        q8, qd = fl.fp8_quantize(q)
        k8, kd = fl.fp8_quantize(k)
        v8, vd = fl.fp8_quantize(v)
        causal = s["causal"]
        # The launch alone: the call's own arguments, V^T made once outside the timed call.
        problem = _ext.Problem(b, n, n, h, h, d, "bf16", causal, 0.0)
        vt = torch.empty((b, h, d, _ext.fp8_vt_seqlen(n)), dtype=_fp8.E4M3, device="cuda")
        out = torch.empty((b, n, h, d), dtype=torch.bfloat16, device="cuda")
        lse = torch.empty((b, h, n), dtype=torch.float32, device="cuda")
        st = _launch.stream(q)
        _ext.fp8_transpose_v(v8.data_ptr(), [b, n, h, d], list(v8.stride()[:3]), vt.data_ptr(), st, 0)
        ptrs = [q8.data_ptr(), k8.data_ptr(), vt.data_ptr(), out.data_ptr(), lse.data_ptr()]
        descales = [qd.data_ptr(), kd.data_ptr(), vd.data_ptr()]
        qt, kt, vt16 = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)

        def cudnn():
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                return F.scaled_dot_product_attention(qt, kt, vt16, is_causal=causal)

        calls = {
            "fp8": lambda: fl.flash_attn_func(q8, k8, v8, causal=causal, q_descale=qd, k_descale=kd, v_descale=vd),
            "fp8_kernel": lambda: _ext.fp8_forward(13, "", problem, ptrs, descales, list(q8.stride()[:3]),
                                                   list(k8.stride()[:3]), st, 0),
            "quantize": lambda: (fl.fp8_quantize(q), fl.fp8_quantize(k), fl.fp8_quantize(v)),
            "bf16": lambda: fl.flash_attn_func(q, k, v, causal=causal),
            "cudnn": cudnn,
        }
        row = dict(shape=s, ms={}, refused={}, repeats={})
        for name in list(calls):
            try:
                calls[name]()
                torch.cuda.synchronize()
            except (RuntimeError, ValueError) as e:
                row["refused"][name] = str(e).splitlines()[0][:200]
                del calls[name]
        row["repeats"].update(timing.paired_rounds(
            {name: (lambda name=name: bench.time_ms(calls[name], args.iters, args.warmup)) for name in calls},
            args.repeats))
        row["ms"] = {name: statistics.median(x) for name, x in row["repeats"].items()}
        row["tflops"] = {name: flops(s) / (ms * 1e-3) / 1e12 for name, ms in row["ms"].items() if name != "quantize"}
        for other in ("bf16", "cudnn", "fp8_kernel"):
            if other in row["ms"] and "fp8" in row["ms"]:
                row["%s_over_fp8" % other] = row["ms"][other] / row["ms"]["fp8"]
        rows.append(row)

        def cell(name):
            return "%10.4f" % row["ms"][name] if name in row["ms"] else "%10s" % "refused"

        def ratio(name):
            key = "%s_over_fp8" % name
            return "%8.2fx" % row[key] if key in row else "%9s" % "-"

        print("%-30s %s %s %s %s %s %s %s %9.0f" % (
            "d=%d B=%d N=%d H=%d%s" % (d, b, n, h, " causal" if causal else ""), cell("fp8"), cell("fp8_kernel"),
            cell("quantize"), cell("bf16"), cell("cudnn"), ratio("bf16"), ratio("cudnn"),
            row["tflops"].get("fp8", float("nan"))))
        del q, k, v, q8, k8, v8, vt, out, lse, qt, kt, vt16
        calls.clear()
    result = {"schema": "flashladder.torch_fp8/1", "date": runinfo.now(), **runinfo.git_info(),
              "command": runinfo.command_line(), "versions": runinfo.versions(),
              "device": {"name": info.name, "arch": info.arch, "sm_count": info.sm_count},
              "package": runinfo.package_path(fl), "tokens": TOKENS, "iters": args.iters, "repeats": args.repeats,
              "fp8_rung": fl.find_rung(13).label, "rows": rows}
    runinfo.write_result(args.out, "torch_fp8.json", result, info.name)
    return 0


def main(argv=None):
    return runinfo.shape_sweep_main(__doc__, argv, "torch_fp8.log", run, 5)


if __name__ == "__main__":
    sys.exit(main())
