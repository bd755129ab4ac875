#!/usr/bin/env python3
"""Masked training steps through the package against compiled FlexAttention: the forward and the
backward under autograd, as a training step runs them, on the same GPU, in one process.

Shapes: 16k tokens (batch x seqlen), 16 heads, head_dim 64 and 128, bf16 (--dtype fp16 too), at
seqlen 4k (batch 4) and, with --seqlens, others. Per head_dim, the cases:

  causal          the plain causal mask (the ladder: flash_attn_func(causal=True), rung 15 forward,
                  rung 14 backward; SDPA's cuDNN backend beside it, the dense reference)
  window<w>       query i sees keys i - w ... i, w = 256, 512, 1024, 2048, 4096 (the ladder:
                  window_size=(w, 0), rung 16 both ways)
  docs            documents of 256 ... 4096 tokens (torch_flex.py's document_starts, seed 2024)
                  packed as one sequence of all 16k tokens, causal within each (the ladder:
                  flash_attn_varlen_func; FlexAttention: one batch row, document ids)
  softcap30       causal, 30 tanh(s / 30) (Gemma 2's form)
  alibi           causal, the paper's slopes (torch_flex.py's alibi_slope)

Per shape, each column timed (bench/pytorch/timing.py: CUDA events around one step, the L2
flushed before each, median of --iters steps after a warm-up; a host path longer than the flush
shows in the time):

  ladder          out = flashladder call; torch.autograd.grad(out, (q, k, v), dO): the package's
                  forward + backward (its host path included)
  flex            out = compiled flex_attention(q, k, v, score_mod, block_mask); the same grad
  cudnn           SDPA with the cuDNN backend forced, on the causal case only
  ladder_fwd, flex_fwd
                  the forward alone (no grad), for the split

FlexAttention is given what it is meant to be given (torch_flex.py's flex_mods): the BlockMask made
by create_block_mask once per shape outside the time; one compiled flex_attention for every shape
(the window's width a captured tensor, so the windows share one compiled graph per head_dim);
compilation and autotuning happen before the time. The columns of a shape are timed in turn,
--repeats times in a rotating order (timing.paired_rounds); each figure is the median of the
repeats' medians. TFLOP/s counts the unmasked (query, key) pairs, 4 x head_dim FLOPs each, x 3.5
for forward + backward (ladder_bench's 2.5 for the backward). Ratios are times: flex's over the
ladder's (above 1: the ladder is faster).

Writes <out>/torch_flex_steps.json and <out>/torch_flex_steps.log, and adds its command line to
<out>/meta.json.

    PYTHONPATH=build/release/python python3 bench/pytorch/torch_flex_steps.py --out DIR [--iters N] [--repeats R]
        [--quick] [--dtype bf16|fp16] [--seqlens 4096,8192] [--head-dims 64,128]

Exits 0 with a message, measuring nothing, without PyTorch, a CUDA device, FlexAttention or the
package.
"""

import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import runinfo  # noqa: E402  bench/pytorch/runinfo.py
import timing  # noqa: E402  bench/pytorch/timing.py
import torch_flex  # noqa: E402  bench/pytorch/torch_flex.py (document_starts, alibi_slope, row spans)

TOKENS = 16384
HEADS = 16
WINDOWS = (256, 512, 1024, 2048, 4096)
SOFTCAP = 30.0
DOCS = dict(lo=256, hi=4096, seed=2024)
COLUMNS = ("ladder", "flex", "cudnn", "ladder_fwd", "flex_fwd")


def cases(seqlen, head_dim, quick):
    """The cases at one seqlen and head_dim, as dicts torch_flex.row_span and unmasked_pairs read."""
    def shape(case, **mods):
        s = dict(family="masks-step", case=case, batch=TOKENS // seqlen, seqlen_q=seqlen, seqlen_k=seqlen,
                 heads_q=HEADS, heads_kv=HEADS, head_dim=head_dim, causal=1, window_left=-1, window_right=-1,
                 prefix=0, softcap=0.0, alibi=0, sinks=0, doc_starts=None)
        s.update(mods)
        return s

    out = [shape("causal")]
    out += [shape("window%d" % w, window_left=w, window_right=0) for w in WINDOWS
            if w < seqlen and (not quick or w in (256, 2048))]
    if not quick:
        # One packed sequence of all the tokens (batch 1): the documents are the batch.
        out.append(shape("docs", batch=1, seqlen_q=TOKENS, seqlen_k=TOKENS,
                         doc_starts=torch_flex.document_starts(TOKENS, DOCS["lo"], DOCS["hi"], DOCS["seed"])))
        out.append(shape("softcap%d" % SOFTCAP, softcap=SOFTCAP))
        out.append(shape("alibi", alibi=1))
    return out


def flops(s):
    """4 d x the unmasked pairs x 3.5 (forward 1, backward 2.5)."""
    return 4.0 * s["head_dim"] * torch_flex.unmasked_pairs(s) * 3.5


def window_mask(window):
    """The sliding window's mask_mod, made once: its width read from the captured 0-d tensor
    @p window, so that every width runs one compiled graph per head_dim."""
    def mask_mod(b, h, q, k):
        return (k <= q) & (q - window <= k)
    return mask_mod


def flex_mods(torch, s, window, window_mod):
    """torch_flex.flex_mods, the window's case through @p window_mod with its width set in @p window."""
    if s["case"].startswith("window"):
        window.fill_(s["window_left"])
        return window_mod, None
    return torch_flex.flex_mods(torch, s)


def run(args):
    torch = runinfo.cuda_torch("torch_flex_steps.py")
    if torch is None:
        return 0
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    except ImportError:
        print("torch_flex_steps.py: this PyTorch (%s) has no flex_attention: nothing measured" % torch.__version__)
        return 0
    fl = runinfo.import_flashladder(args.package)
    if fl is None:
        return 0
    import torch._dynamo
    import torch._functorch.config

    for knob in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, knob):
            setattr(torch._dynamo.config, knob, max(64, getattr(torch._dynamo.config, knob)))
    flex = torch.compile(flex_attention, dynamic=False)
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    window = torch.zeros((), dtype=torch.int64, device="cuda")
    window_mod = window_mask(window)
    bench = timing.EventTimer(torch)
    info = fl.device_info()
    rows = []
    seqlens = [int(x) for x in args.seqlens.split(",")]
    head_dims = [int(x) for x in args.head_dims.split(",")]
    print("%-26s %9s %9s %9s %9s %9s %8s %8s %8s" % ("case", "ladder", "flex", "cuDNN", "ladder f", "flex f",
                                                  "flex/l", "fwd f/l", "TFLOP/s"))
    for d in head_dims:
        for n in seqlens:
            for s in cases(n, d, args.quick):
                gen = torch.Generator(device="cuda").manual_seed(2024)
                b, sn, h = s["batch"], s["seqlen_q"], s["heads_q"]
                # The ladder's [B, S, H, D] leaves; FlexAttention and SDPA take [B, H, S, D]: their
                # own leaves, the same values (transposed copies), so each backend's gradients land
                # in its own layout.
                base = [torch.randn(b, sn, h, d, device="cuda", dtype=dt, generator=gen) for _ in range(3)]
                dout = torch.randn(b, sn, h, d, device="cuda", dtype=dt, generator=gen)
                lq, lk, lv = (x.clone().requires_grad_(True) for x in base)
                tq, tk, tv = (x.transpose(1, 2).contiguous().requires_grad_(True) for x in base)
                tdout = dout.transpose(1, 2).contiguous()
                case = s["case"]
                if case == "docs":
                    starts = torch.tensor(s["doc_starts"], dtype=torch.int32, device="cuda")
                    pq, pk, pv = (x.view(sn, h, d) for x in (lq, lk, lv))
                    pdout = dout.view(sn, h, d)
                    longest = max(e - a for a, e in zip(s["doc_starts"], s["doc_starts"][1:]))

                    def ladder(pq=pq, pk=pk, pv=pv, starts=starts, longest=longest):
                        return fl.flash_attn_varlen_func(pq, pk, pv, starts, starts, longest, longest, causal=True)
                    ldout = pdout
                else:
                    kwargs = dict(causal=True)
                    if case.startswith("window"):
                        kwargs["window_size"] = (s["window_left"], 0)
                    if s["softcap"]:
                        kwargs["softcap"] = s["softcap"]
                    if s["alibi"]:
                        kwargs["alibi_slopes"] = torch.tensor(
                            [torch_flex.alibi_slope(i, h) for i in range(h)], dtype=torch.float32, device="cuda")

                    def ladder(kwargs=kwargs):
                        return fl.flash_attn_func(lq, lk, lv, **kwargs)
                    ldout = dout
                mask_mod, score_mod = flex_mods(torch, s, window, window_mod)
                block_mask = torch_flex.make_block_mask(create_block_mask, mask_mod, sn)

                def flex_call(score_mod=score_mod, block_mask=block_mask):
                    return flex(tq, tk, tv, score_mod=score_mod, block_mask=block_mask)

                def cudnn_call():
                    with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
                        return F.scaled_dot_product_attention(tq, tk, tv, is_causal=True)

                def step(fwd, leaves, g):
                    return lambda: torch.autograd.grad(fwd(), leaves, g)

                def forward_only(fwd):
                    def call():
                        with torch.no_grad():
                            return fwd()
                    return call

                leaves_l = (lq, lk, lv) if case != "docs" else (pq, pk, pv)
                calls = {"ladder": step(ladder, leaves_l, ldout), "flex": step(flex_call, (tq, tk, tv), tdout),
                         "ladder_fwd": forward_only(ladder), "flex_fwd": forward_only(flex_call)}
                if case == "causal":
                    calls["cudnn"] = step(cudnn_call, (tq, tk, tv), tdout)
                row = dict(shape={k: v for k, v in s.items() if k != "doc_starts"}, ms={}, refused={}, repeats={},
                           host_us={})
                row["shape"]["n_docs"] = len(s["doc_starts"]) - 1 if s["doc_starts"] else 0
                for name in [c for c in COLUMNS if c in calls]:
                    try:
                        calls[name]()  # compiles (FlexAttention: forward and backward graphs) outside the time
                        calls[name]()
                        torch.cuda.synchronize()
                    except Exception as e:  # noqa: BLE001  a refusal or a compile failure: one column lost
                        row["refused"][name] = (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
                        del calls[name]
                        torch.cuda.synchronize()

                def measure(name):
                    ms = bench.time_ms(calls[name], args.iters, args.warmup)
                    row["host_us"].setdefault(name, []).append(bench.last["host_us"])
                    return ms
                row["repeats"].update(timing.paired_rounds(
                    {name: (lambda name=name: measure(name)) for name in calls}, args.repeats))
                row["ms"] = {name: statistics.median(x) for name, x in row["repeats"].items()}
                row["host_us"] = {name: statistics.median(x) for name, x in row["host_us"].items()}
                row["tflops"] = {name: flops(s) / (ms * 1e-3) / 1e12 for name, ms in row["ms"].items()
                                 if not name.endswith("_fwd")}
                if "ladder" in row["ms"]:
                    for other in ("flex", "cudnn"):
                        if other in row["ms"]:
                            row["%s_over_ladder" % other] = row["ms"][other] / row["ms"]["ladder"]
                if "ladder_fwd" in row["ms"] and "flex_fwd" in row["ms"]:
                    row["flex_fwd_over_ladder_fwd"] = row["ms"]["flex_fwd"] / row["ms"]["ladder_fwd"]
                rows.append(row)

                def cell(name):
                    return "%9.4f" % row["ms"][name] if name in row["ms"] else "%9s" % "-"

                def ratio(key):
                    return "%7.2fx" % row[key] if key in row else "%8s" % "-"

                print("%-26s %s %s %s %s %s %s %s %8.0f" % (
                    "d=%d N=%d %s" % (d, sn, case), cell("ladder"), cell("flex"), cell("cudnn"), cell("ladder_fwd"),
                    cell("flex_fwd"), ratio("flex_over_ladder"), ratio("flex_fwd_over_ladder_fwd"),
                    row["tflops"].get("ladder", float("nan"))), flush=True)
                for name, why in row["refused"].items():
                    print("    %s refused: %s" % (name, why))
                del base, dout, lq, lk, lv, tq, tk, tv, tdout, block_mask
                calls.clear()
                torch.cuda.empty_cache()
    result = {"schema": "flashladder.torch_flex_steps/1", "date": runinfo.now(), **runinfo.git_info(),
              "command": runinfo.command_line(), "versions": runinfo.versions(),
              "device": {"name": info.name, "arch": info.arch, "sm_count": info.sm_count},
              "package": runinfo.package_path(fl), "dtype": args.dtype, "tokens": TOKENS, "heads": HEADS,
              "iters": args.iters, "repeats": args.repeats, "rows": rows}
    runinfo.write_result(args.out, "torch_flex_steps.json", result, info.name)
    return 0


def add_args(ap):
    ap.add_argument("--dtype", default="bf16", choices=("bf16", "fp16"))
    ap.add_argument("--seqlens", default="4096", help="comma-separated seqlens (batch = 16k tokens / seqlen)")
    ap.add_argument("--head-dims", default="64,128", help="comma-separated head_dims")


def main(argv=None):
    return runinfo.shape_sweep_main(__doc__, argv, "torch_flex_steps.log", run, 5, add_args)


if __name__ == "__main__":
    sys.exit(main())
