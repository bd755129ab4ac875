#!/usr/bin/env python3
"""cuDNN's FP8 attention, forward and backward, through cuDNN's own Python frontend, beside the
ladder's FP8 forward (rung 13), its 16-bit backward (rung 14) and SDPA's cuDNN backend in bf16, on
one GPU, in one process: the baseline rung 18 (the FP8 backward) is measured against.

The frontend is the pinned wheel nvidia-cudnn-frontend==1.14.0 (PyPI; it loads the cuDNN library
PyTorch ships). Shapes: torch_fp8.py's, 16k tokens (batch x seqlen) at seqlen 4k and 16k (--quick:
4k), heads = 2048 / head_dim, head_dim 64, 128 and 256, causal and not; the originals bf16
N(0, 1). Per shape (median ms of --iters single calls, the L2 flushed before each; the columns in
turn, --repeats times in a rotating order; timing.py):

  cudnn_fp8_fwd   cuDNN's FP8 forward graph: e4m3 q, k, v with one descale each (amax / 448 per
                  tensor), P quantized with a scale of 2^8, O bf16 where cuDNN takes it (else e4m3,
                  scaled from V's amax), the softmax stats for the backward
  cudnn_fp8_bwd   cuDNN's FP8 backward graph on them: dO e4m3 (per-tensor descale), dQ, dK, dV
                  bf16 where cuDNN takes them (else e4m3); dP's and the gradients' scales from the
                  amaxes a first call reports (delayed scaling, one step), powers of two
  ladder_fp8_fwd  flash_attn_func on e4m3 q, k, v (rung 13, per-head descales from fp8_quantize)
  ladder_bwd      flashladder.attention_backward on the bf16 originals (rung 14)
  cudnn_fwd       F.scaled_dot_product_attention, cuDNN backend forced, bf16
  cudnn_bwd       its backward alone (autograd.grad on a kept graph)

A graph cuDNN does not take (check_support) is recorded with its message, not timed. TFLOP/s: 4 x
head_dim FLOPs per unmasked (query, key) pair forward, 10 x head_dim backward (the five GEMMs of
the recomputing backward, 2.5 x the forward).

Error (--error-seqlen, default 1024, batch 1, the same heads and head_dims, causal): dQ, dK and
dV relative Frobenius error against an fp64 reference, (a) on the values the FP8 graph holds (the
dequantized e4m3 q, k, v, dO: the kernel's own error) and (b) against the bf16 originals (end to
end); beside rung 14's bf16 gradients against the same fp64 reference.

Writes <out>/cudnn_fp8.json and <out>/cudnn_fp8.log and adds its command line to <out>/meta.json.

    PYTHONPATH=build/release/python python3 bench/pytorch/cudnn_fp8.py --out DIR [--quick]

Exits 0 with a message, measuring nothing, without PyTorch, a CUDA device, the package, rung 13 or
the cudnn frontend.
"""

import math
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import runinfo  # noqa: E402  bench/pytorch/runinfo.py
import timing  # noqa: E402  bench/pytorch/timing.py
import torch_sdpa  # noqa: E402  bench/pytorch/torch_sdpa.py (unmasked_pairs)

FRONTEND = "nvidia-cudnn-frontend==1.14.0"
TOKENS = 16384
SEQLENS = (4096, 16384)
HEAD_DIMS = (64, 128, 256)
COLUMNS = ("cudnn_fp8_fwd", "cudnn_fp8_bwd", "ladder_fp8_fwd", "ladder_bwd", "cudnn_fwd", "cudnn_bwd")
E4M3_MAX = 448.0
P_SCALE = 256.0  # P in [0, 1] times 2^8: e4m3's normal range (the emulation study's choice)


def shapes(quick):
    return [dict(batch=TOKENS // n, seqlen=n, heads=2048 // d, head_dim=d, causal=causal)
            for d in HEAD_DIMS for n in SEQLENS if not (quick and n != 4096) for causal in (False, True)]


def pow2_scale(amax):
    """The largest power of two s with amax x s <= 448 (1 for a zero or non-finite amax)."""
    if not (amax > 0 and math.isfinite(amax)):
        return 1.0
    return 2.0 ** math.floor(math.log2(E4M3_MAX / amax))


class CudnnFp8:
    """cuDNN's FP8 forward and backward graphs for one shape (BSHD storage, as the ladder's)."""

    def __init__(self, cudnn, torch, handle, b, h, n, d, causal):
        self.cudnn, self.torch, self.handle = cudnn, torch, handle
        self.b, self.h, self.n, self.d, self.causal = b, h, n, d, causal
        self.dims, self.strides = (b, h, n, d), (n * h * d, d, h * d, 1)
        self.fwd = self.bwd = None
        self.notes = {}
        self.uid = 0

    def _uid(self):
        self.uid += 1  # every tensor of a graph named by a uid of its own (the variant packs' keys)
        return self.uid

    def _graph(self):
        c = self.cudnn
        return c.pygraph(io_data_type=c.data_type.FP8_E4M3, intermediate_data_type=c.data_type.FLOAT,
                         compute_data_type=c.data_type.FLOAT, handle=self.handle)

    def _scalar(self, g, name):
        return g.tensor(name=name, uid=self._uid(), dim=(1, 1, 1, 1), stride=(1, 1, 1, 1),
                        data_type=self.cudnn.data_type.FLOAT)

    def _build(self, g):
        c = self.cudnn
        g.validate()
        g.build_operation_graph()
        g.create_execution_plans([c.heur_mode.A, c.heur_mode.FALLBACK])
        g.check_support()
        g.build_plans()
        return g

    def build_forward(self, o_type):
        c, e4m3 = self.cudnn, self.cudnn.data_type.FP8_E4M3
        g = self._graph()
        t = {name: g.tensor(name=name, uid=self._uid(), dim=self.dims, stride=self.strides, data_type=e4m3)
             for name in "qkv"}
        for name in ("descale_q", "descale_k", "descale_v", "descale_s", "scale_s", "scale_o"):
            t[name] = self._scalar(g, name)
        o, stats, amax_s, amax_o = g.sdpa_fp8(
            q=t["q"], k=t["k"], v=t["v"], descale_q=t["descale_q"], descale_k=t["descale_k"],
            descale_v=t["descale_v"], descale_s=t["descale_s"], scale_s=t["scale_s"], scale_o=t["scale_o"],
            generate_stats=True, attn_scale=self.d ** -0.5, use_causal_mask=self.causal)
        o.set_output(True).set_uid(self._uid()).set_dim(self.dims).set_stride(self.strides).set_data_type(o_type)
        stats.set_output(True).set_uid(self._uid()).set_dim((self.b, self.h, self.n, 1)).set_stride(
            (self.h * self.n, self.n, 1, 1)).set_data_type(c.data_type.FLOAT)
        for a in (amax_s, amax_o):
            a.set_output(True).set_uid(self._uid()).set_dim((1, 1, 1, 1)).set_stride((1, 1, 1, 1)).set_data_type(c.data_type.FLOAT)
        t.update(o=o, stats=stats, amax_s=amax_s, amax_o=amax_o)
        self.fwd = (self._build(g), t)

    def build_backward(self, o_type, grad_type):
        c, e4m3 = self.cudnn, self.cudnn.data_type.FP8_E4M3
        g = self._graph()
        t = {name: g.tensor(name=name, uid=self._uid(), dim=self.dims, stride=self.strides, data_type=e4m3)
             for name in "qkv"}
        t["o"] = g.tensor(name="o", uid=self._uid(), dim=self.dims, stride=self.strides, data_type=o_type)
        t["dO"] = g.tensor(name="dO", uid=self._uid(), dim=self.dims, stride=self.strides, data_type=e4m3)
        t["stats"] = g.tensor(name="stats", uid=self._uid(), dim=(self.b, self.h, self.n, 1),
                              stride=(self.h * self.n, self.n, 1, 1), data_type=c.data_type.FLOAT)
        for name in ("descale_q", "descale_k", "descale_v", "descale_o", "descale_dO", "descale_s", "descale_dP",
                     "scale_s", "scale_dQ", "scale_dK", "scale_dV", "scale_dP"):
            t[name] = self._scalar(g, name)
        outs = g.sdpa_fp8_backward(
            q=t["q"], k=t["k"], v=t["v"], o=t["o"], dO=t["dO"], stats=t["stats"], descale_q=t["descale_q"],
            descale_k=t["descale_k"], descale_v=t["descale_v"], descale_o=t["descale_o"],
            descale_dO=t["descale_dO"], descale_s=t["descale_s"], descale_dP=t["descale_dP"],
            scale_s=t["scale_s"], scale_dQ=t["scale_dQ"], scale_dK=t["scale_dK"], scale_dV=t["scale_dV"],
            scale_dP=t["scale_dP"], attn_scale=self.d ** -0.5, use_causal_mask=self.causal)
        for name, x in zip(("dQ", "dK", "dV"), outs[:3]):
            x.set_output(True).set_uid(self._uid()).set_dim(self.dims).set_stride(self.strides).set_data_type(
                grad_type)
            t[name] = x
        for name, x in zip(("amax_dQ", "amax_dK", "amax_dV", "amax_dP"), outs[3:]):
            x.set_output(True).set_uid(self._uid()).set_dim((1, 1, 1, 1)).set_stride((1, 1, 1, 1)).set_data_type(
                c.data_type.FLOAT)
            t[name] = x
        self.bwd = (self._build(g), t)

    def build(self):
        """Both graphs, 16-bit O and gradients first, e4m3 where cuDNN takes only those; raises
        cudnnGraphNotSupportedError (its message) when neither is taken."""
        c = self.cudnn
        last = None
        for o_type in (c.data_type.BFLOAT16, c.data_type.FP8_E4M3):
            try:
                self.build_forward(o_type)
                self.o_type = o_type
                break
            except c.cudnnGraphNotSupportedError as e:
                last = e
        if self.fwd is None:
            raise last
        for grad_type in (c.data_type.BFLOAT16, c.data_type.FP8_E4M3):
            try:
                self.build_backward(self.o_type, grad_type)
                self.grad_type = grad_type
                break
            except c.cudnnGraphNotSupportedError as e:
                last = e
        self.notes = {"o": str(self.o_type).split(".")[-1], "grads": str(getattr(self, "grad_type", None)).split(".")[-1]}
        if self.bwd is None:
            self.notes["backward"] = str(last).splitlines()[0][:300]

    def bind(self, q, k, v, dout):
        """The buffers and scales of one problem (bf16 q, k, v, dO [b, n, h, d]); the gradients'
        and dP's scales from a first call's amaxes."""
        torch = self.torch
        f32 = lambda x: torch.tensor([x], dtype=torch.float32, device="cuda")  # noqa: E731
        self.x8, self.desc = {}, {}
        for name, x in (("q", q), ("k", k), ("v", v), ("dO", dout)):
            amax = x.float().abs().max().item()
            s = E4M3_MAX / amax if amax > 0 else 1.0
            self.x8[name] = (x.float() * s).to(torch.float8_e4m3fn)
            self.desc[name] = 1.0 / s
        o_fp8 = self.o_type == self.cudnn.data_type.FP8_E4M3
        self.scale_o = pow2_scale(v.float().abs().max().item()) if o_fp8 else 1.0
        o_dtype = torch.float8_e4m3fn if o_fp8 else torch.bfloat16
        shape = (self.b, self.n, self.h, self.d)
        self.o = torch.empty(shape, dtype=o_dtype, device="cuda")
        self.stats = torch.empty((self.b, self.h, self.n, 1), dtype=torch.float32, device="cuda")
        self.amax = {name: f32(float("nan")) for name in ("s", "o", "dQ", "dK", "dV", "dP")}
        g_dtype = torch.float8_e4m3fn if getattr(self, "grad_type", None) == self.cudnn.data_type.FP8_E4M3 \
            else torch.bfloat16
        self.grads = {name: torch.empty(shape, dtype=g_dtype, device="cuda") for name in ("dQ", "dK", "dV")}
        self.scales = {"dQ": 1.0, "dK": 1.0, "dV": 1.0, "dP": 1.0}
        self.ws = torch.empty(max(self.fwd[0].get_workspace_size(),
                                  self.bwd[0].get_workspace_size() if self.bwd else 0), dtype=torch.uint8,
                              device="cuda")
        self._packs()
        if self.bwd is not None:  # delayed scaling: one call with scales 1, then the amaxes' powers of two
            self.forward()
            self.backward()
            torch.cuda.synchronize()
            for name in ("dP",) + (("dQ", "dK", "dV") if g_dtype != torch.bfloat16 else ()):
                self.scales[name] = pow2_scale(self.amax[name].item())
            self._packs()

    def _packs(self):
        f32 = lambda x: self.torch.tensor([x], dtype=self.torch.float32, device="cuda")  # noqa: E731
        _, t = self.fwd
        self.fwd_pack = {t["q"]: self.x8["q"], t["k"]: self.x8["k"], t["v"]: self.x8["v"],
                         t["descale_q"]: f32(self.desc["q"]), t["descale_k"]: f32(self.desc["k"]),
                         t["descale_v"]: f32(self.desc["v"]), t["descale_s"]: f32(1.0 / P_SCALE),
                         t["scale_s"]: f32(P_SCALE), t["scale_o"]: f32(self.scale_o), t["o"]: self.o,
                         t["stats"]: self.stats, t["amax_s"]: self.amax["s"], t["amax_o"]: self.amax["o"]}
        if self.bwd is None:
            return
        _, t = self.bwd
        self.bwd_pack = {t["q"]: self.x8["q"], t["k"]: self.x8["k"], t["v"]: self.x8["v"], t["o"]: self.o,
                         t["dO"]: self.x8["dO"], t["stats"]: self.stats, t["descale_q"]: f32(self.desc["q"]),
                         t["descale_k"]: f32(self.desc["k"]), t["descale_v"]: f32(self.desc["v"]),
                         t["descale_o"]: f32(1.0 / self.scale_o), t["descale_dO"]: f32(self.desc["dO"]),
                         t["descale_s"]: f32(1.0 / P_SCALE), t["descale_dP"]: f32(1.0 / self.scales["dP"]),
                         t["scale_s"]: f32(P_SCALE), t["scale_dQ"]: f32(self.scales["dQ"]),
                         t["scale_dK"]: f32(self.scales["dK"]), t["scale_dV"]: f32(self.scales["dV"]),
                         t["scale_dP"]: f32(self.scales["dP"])}
        for name in ("dQ", "dK", "dV"):
            self.bwd_pack[t[name]] = self.grads[name]
            self.bwd_pack[t["amax_" + name]] = self.amax[name]
        self.bwd_pack[t["amax_dP"]] = self.amax["dP"]

    def forward(self):
        self.fwd[0].execute(self.fwd_pack, self.ws, handle=self.handle)

    def backward(self):
        self.bwd[0].execute(self.bwd_pack, self.ws, handle=self.handle)

    def gradients(self):
        """dQ, dK, dV in fp32, their scales undone."""
        return [self.grads[name].float() / self.scales[name] for name in ("dQ", "dK", "dV")]

    def dequantized(self):
        return {name: self.x8[name].float() * self.desc[name] for name in self.x8}


def reference_grads(torch, q, k, v, dout, causal):
    """dQ, dK, dV in fp64 of attention on [b, n, h, d] inputs (bottom-right causal, square)."""
    leaves = [t.double().transpose(1, 2).detach().requires_grad_() for t in (q, k, v)]
    out = torch.nn.functional.scaled_dot_product_attention(*leaves, is_causal=causal)
    return [g.transpose(1, 2) for g in torch.autograd.grad(out, leaves, dout.double().transpose(1, 2))]


def rel_fro(got, ref):
    return ((got.double() - ref).norm() / ref.norm().clamp_min(1e-300)).item()


def errors(torch, fl, cudnn, handle, h, d, n):
    """The error block (module docstring) at batch 1, seqlen n, causal."""
    gen = torch.Generator(device="cuda").manual_seed(7)
    q, k, v, dout = (torch.randn(1, n, h, d, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(4))
    row = {"head_dim": d, "heads": h, "seqlen": n, "causal": True}
    g = CudnnFp8(cudnn, torch, handle, 1, h, n, d, True)
    try:
        g.build()
    except cudnn.cudnnGraphNotSupportedError as e:
        row["cudnn_fp8"] = "not supported: " + str(e).splitlines()[0][:300]
    else:
        row["cudnn_notes"] = g.notes
        if g.bwd is not None:
            g.bind(q, k, v, dout)
            g.forward()
            g.backward()
            torch.cuda.synchronize()
            got = g.gradients()
            deq = g.dequantized()
            held = reference_grads(torch, deq["q"], deq["k"], deq["v"], deq["dO"], True)
            orig = reference_grads(torch, q, k, v, dout, True)
            row["cudnn_fp8_held"] = {n_: rel_fro(x, r) for n_, x, r in zip(("dQ", "dK", "dV"), got, held)}
            row["cudnn_fp8_end_to_end"] = {n_: rel_fro(x, r) for n_, x, r in zip(("dQ", "dK", "dV"), got, orig)}
            row["cudnn_scales"] = dict(g.scales)
    out, lse = fl.attention(q, k, v, causal=True, return_lse=True)
    dq, dk, dv = fl.attention_backward(dout, q, k, v, out, lse, causal=True)
    orig = reference_grads(torch, q, k, v, dout, True)
    row["ladder_bf16"] = {n_: rel_fro(x, r) for n_, x, r in zip(("dQ", "dK", "dV"), (dq, dk, dv), orig)}
    return row


def run(args):
    torch = runinfo.cuda_torch("cudnn_fp8.py")
    if torch is None:
        return 0
    try:
        import cudnn
    except Exception as e:  # noqa: BLE001  not installed, or no cuDNN library to load
        print("cudnn_fp8.py: the cudnn frontend (%s) does not import: %s: nothing measured" % (FRONTEND, e))
        return 0
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    fl = runinfo.import_flashladder(args.package)
    if fl is None:
        return 0
    if not any(r.number == 13 for r in fl.rungs()) or torch.cuda.get_device_capability() != (9, 0):
        print("cudnn_fp8.py: rung 13 (sm_90a) is not built or this GPU is not sm_90: nothing measured")
        return 0
    handle = cudnn.create_handle()
    cudnn.set_stream(handle=handle, stream=torch.cuda.current_stream().cuda_stream)
    print("cudnn_fp8.py: cuDNN %s, frontend %s" % (cudnn.backend_version_string(), FRONTEND))
    bench = timing.EventTimer(torch)
    info = fl.device_info()
    rows = []
    print("%-28s %9s %9s %9s %9s %9s %9s  %s" % ("shape", *COLUMNS, "notes"))
    for s in shapes(args.quick):
        gen = torch.Generator(device="cuda").manual_seed(2024)
        b, n, h, d, causal = s["batch"], s["seqlen"], s["heads"], s["head_dim"], s["causal"]
        q, k, v, dout = (torch.randn(b, n, h, d, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(4))
        row = dict(shape=s, ms={}, refused={}, repeats={})
        calls = {}
        g = CudnnFp8(cudnn, torch, handle, b, h, n, d, causal)
        try:
            g.build()
            g.bind(q, k, v, dout)
            row["cudnn_notes"] = g.notes
            calls["cudnn_fp8_fwd"] = g.forward
            if g.bwd is not None:
                calls["cudnn_fp8_bwd"] = g.backward
            else:
                row["refused"]["cudnn_fp8_bwd"] = g.notes.get("backward", "not supported")
        except cudnn.cudnnGraphNotSupportedError as e:
            row["refused"]["cudnn_fp8_fwd"] = row["refused"]["cudnn_fp8_bwd"] = str(e).splitlines()[0][:300]
        q8, qd = fl.fp8_quantize(q)
        k8, kd = fl.fp8_quantize(k)
        v8, vd = fl.fp8_quantize(v)
        calls["ladder_fp8_fwd"] = lambda: fl.flash_attn_func(q8, k8, v8, causal=causal, q_descale=qd, k_descale=kd,
                                                            v_descale=vd)
        out, lse = fl.attention(q, k, v, causal=causal, return_lse=True)
        calls["ladder_bwd"] = lambda: fl.attention_backward(dout, q, k, v, out, lse, causal=causal)
        qt, kt, vt = (t.transpose(1, 2).detach().requires_grad_() for t in (q, k, v))
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            calls["cudnn_fwd"] = lambda: F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
            graph_out = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal)
        dout_t = dout.transpose(1, 2)
        calls["cudnn_bwd"] = lambda: torch.autograd.grad(graph_out, (qt, kt, vt), dout_t, retain_graph=True)
        for name in list(calls):
            try:
                with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                    calls[name]()
                torch.cuda.synchronize()
            except (RuntimeError, ValueError) as e:
                row["refused"][name] = str(e).splitlines()[0][:300]
                del calls[name]

        def timed(name):
            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                return bench.time_ms(calls[name], args.iters, args.warmup)

        row["repeats"].update(timing.paired_rounds({name: (lambda name=name: timed(name)) for name in calls},
                                                   args.repeats))
        row["ms"] = {name: statistics.median(x) for name, x in row["repeats"].items()}
        pairs = torch_sdpa.unmasked_pairs(n, n, causal) * b * h
        row["tflops"] = {name: (10.0 if name.endswith("bwd") else 4.0) * pairs * d / (ms * 1e-3) / 1e12
                         for name, ms in row["ms"].items()}
        rows.append(row)
        print("%-28s %s  %s" % ("d=%d B=%d N=%d H=%d%s" % (d, b, n, h, " causal" if causal else ""),
                                " ".join("%9.4f" % row["ms"][c] if c in row["ms"] else "%9s" % "-" for c in COLUMNS),
                                "; ".join("%s: %s" % kv for kv in row["refused"].items()) or row.get("cudnn_notes", "")))
        del q, k, v, dout, q8, k8, v8, out, lse, qt, kt, vt, graph_out, g
        calls.clear()
        torch.cuda.empty_cache()
    err_rows = []
    if args.error_seqlen:
        for d in HEAD_DIMS:
            try:
                err_rows.append(errors(torch, fl, cudnn, handle, 2048 // d, d, args.error_seqlen))
            except Exception as e:  # noqa: BLE001  one head_dim's error block failing keeps the timings
                err_rows.append({"head_dim": d, "error": "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:300])})
            print("error d=%d: %s" % (d, err_rows[-1]))
    cudnn.destroy_handle(handle)
    result = {"schema": "flashladder.cudnn_fp8/1", "date": runinfo.now(), **runinfo.git_info(),
              "command": runinfo.command_line(), "versions": dict(runinfo.versions(), cudnn_frontend=FRONTEND,
                                                                  cudnn=cudnn.backend_version_string()),
              "device": {"name": info.name, "arch": info.arch, "sm_count": info.sm_count},
              "package": runinfo.package_path(fl), "tokens": TOKENS, "iters": args.iters, "repeats": args.repeats,
              "p_scale": P_SCALE, "columns": list(COLUMNS), "rows": rows, "errors": err_rows}
    runinfo.write_result(args.out, "cudnn_fp8.json", result, info.name)
    return 0


def main(argv=None):
    def add_args(ap):
        ap.add_argument("--error-seqlen", type=int, default=1024, help="the error block's seqlen (0: none)")

    return runinfo.shape_sweep_main(__doc__, argv, "cudnn_fp8.log", run, 3, add_args)


if __name__ == "__main__":
    sys.exit(main())
