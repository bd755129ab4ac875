#!/usr/bin/env python3
"""The backward pass kernel by kernel: the package's autograd beside PyTorch SDPA's cuDNN and flash
backends, from the PyTorch profiler (CUPTI), on the training shapes of the backward's issue.

Per shape: q, k, v [batch, seqlen, heads, head_dim] requiring grad (SDPA gets their [b, h, s, d]
views, as transformers passes them); the forward once, outside the profile, its graph retained;
then PASSES backward passes, each alone under torch.profiler with torch.cuda.synchronize() around
it: torch.autograd.grad(out, (q, k, v), dO, retain_graph=True) (no .grad accumulation). For each
backend: every GPU kernel and memset of a pass, in launch order, with its role (main: the longest
of the pass; pre: launched before it; post: after it), its device time per pass (the median over
the passes) and the pass's total of those (kernels only: the gaps between them are not in it).

    PYTHONPATH=build/release/python python3 bench/pytorch/torch_bwd_profile.py --out DIR [--passes N]
                                                                             [--shapes NAME,...]

--family F[,F...] (backward, backward-gqa, backward-gqa8) and --dtype: instead of SHAPES, every cell of
those bench families (torch_sdpa.py's backward_shapes: d = 64, 128, 256, 512 to 16k keys, causal and
not), each named as torch_sdpa.py names it ("backward-gqa/d128/N4096/causal1"); --backends picks
the backends (default ladder, cudnn, flash). The kernels against the kernels over the whole grid.

--window: also the pass as torch_sdpa.py times it (timing.EventTimer: the L2 flushed by PyTorch's
fill kernel, a start event, the pass, an end event), PASSES times without the profiler (the
events' interval, as torch_sdpa.py's figure) and PASSES times under it, each profiled interval
taken apart (window()): from the flush's end to the first kernel ("lead": the GPU waiting for
the host's first launch), the kernels, the gaps between them, and the rest of the interval.

Writes DIR/torch_bwd_profile.json ({"context", "shapes": [{name, shape, backends: {name:
{"kernels": [{name, role, ms, launches}], "pre_ms", "main_ms", "post_ms", "total_ms"[, "window":
{"events_ms", "events_profiled_ms", "lead_ms", "kernels_ms", "gaps_ms", "rest_ms"}]} or
{"skipped": why}}}]}) and DIR/torch_bwd_profile.log; bench/docblocks (gen:bwd-profile) renders the
table. --list prints the shapes and needs no PyTorch. Exits 0 with a message without PyTorch or a
CUDA GPU.
"""

import argparse
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import runinfo  # noqa: E402  bench/pytorch/runinfo.py
import timing  # noqa: E402  bench/pytorch/timing.py
import torch_sdpa  # noqa: E402  bench/pytorch/torch_sdpa.py: the bench families' shapes (imports no PyTorch)

# name: (dtype, head_dim, seqlen, batch, heads_q, heads_kv, causal): the cells and the
# training demo's attention.
SHAPES = {
    "bf16-d128-4k-causal": ("bf16", 128, 4096, 4, 16, 16, True),
    "bf16-d128-gqa32/8-8k-causal": ("bf16", 128, 8192, 1, 32, 8, True),
    "fp16-d64-2k-causal": ("fp16", 64, 2048, 8, 32, 32, True),
    "fp16-d64-1k-causal": ("fp16", 64, 1024, 16, 16, 16, True),
    "bf16-d128-gqa32/8-16k": ("bf16", 128, 16384, 1, 32, 8, False),
    "bf16-d256-4k-causal": ("bf16", 256, 4096, 2, 16, 16, True),
    "bf16-d128-demo-2x4k-16/4-causal": ("bf16", 128, 4096, 2, 16, 4, True),
    # Two cells of the backward grid where the package's time is farthest above the runner's
    # (rung 14's README, "On the H200": the part that grows with the cell's work).
    "bf16-d128-16k-causal": ("bf16", 128, 16384, 1, 16, 16, True),
    "bf16-d256-16k": ("bf16", 256, 16384, 1, 8, 8, False),
}
BACKENDS = ("ladder", "cudnn", "flash")
GRID_FAMILIES = ("backward", "backward-gqa", "backward-gqa8")


def grid_shapes(families, dtype):
    """{name: SHAPES-style tuple} of every cell of the bench @p families (torch_sdpa.py's
    backward_shapes), named as torch_sdpa.py names them: "<family>/d<d>/N<seqlen>/causal<0|1>"."""
    out = {}
    for fam in families:
        if fam not in GRID_FAMILIES:
            raise ValueError("unknown family %r; known: %s" % (fam, ", ".join(GRID_FAMILIES)))
        for c in torch_sdpa.backward_shapes(False, fam):
            name = "%s/d%d/N%d/causal%d" % (fam, c["head_dim"], c["seqlen_k"], c["causal"])
            out[name] = (dtype, c["head_dim"], c["seqlen_k"], c["batch"], c["heads_q"], c["heads_kv"], bool(c["causal"]))
    return out


def roles(events):
    """[(name, role, ms)] of one pass's GPU events [(start, name, ms)]: the longest is "main", those
    launched before it "pre", after it "post"."""
    events = sorted(events)
    if not events:
        return []
    main = max(range(len(events)), key=lambda i: events[i][2])
    return [(name, "main" if i == main else "pre" if i < main else "post", ms)
            for i, (_, name, ms) in enumerate(events)]


def summarize(passes):
    """The backend's record from every pass's roles(): each (name, role) kernel's median time per pass
    and launches per pass, in the first pass's order, and the median per pass of each role's sum and
    of the total."""
    order, per = [], {}
    for p in passes:
        seen = {}
        for name, role, ms in p:
            key = (name, role)
            if key not in per:
                per[key] = []
                order.append(key)
            seen[key] = seen.get(key, (0.0, 0))
            seen[key] = (seen[key][0] + ms, seen[key][1] + 1)
        for key in per:
            per[key].append(seen.get(key, (0.0, 0)))
    kernels = [{"name": n, "role": r, "ms": statistics.median(x[0] for x in per[(n, r)]),
                "launches": statistics.median(x[1] for x in per[(n, r)])} for n, r in order]
    rec = {"kernels": kernels, "passes": len(passes)}
    for role in ("pre", "main", "post"):
        rec[role + "_ms"] = statistics.median(sum(ms for _, r, ms in p if r == role) for p in passes)
    rec["total_ms"] = statistics.median(sum(ms for _, _, ms in p) for p in passes)
    return rec


def window(events, events_ms):
    """One timed pass taken apart: @p events [(start µs, name, ms)] of the profiled interval, the
    flush's fill kernel first, then the pass's kernels; @p events_ms the interval between the
    events. {"lead_ms": the flush's end to the first kernel's start, "kernels_ms": their sum,
    "gaps_ms": the idle time between them, "rest_ms": the interval less the three (the end
    event's wait after the last kernel, and the start event's after the flush)}."""
    events = sorted(events)
    flush, rest = events[0], events[1:]
    if not rest:
        return {"lead_ms": 0.0, "kernels_ms": 0.0, "gaps_ms": 0.0, "rest_ms": events_ms}
    end = lambda e: e[0] + e[2] * 1e3  # noqa: E731  µs
    lead = max(0.0, rest[0][0] - end(flush)) / 1e3
    kernels = sum(e[2] for e in rest)
    gaps, last = 0.0, end(rest[0])
    for e in rest[1:]:
        gaps += max(0.0, e[0] - last) / 1e3
        last = max(last, end(e))
    return {"lead_ms": lead, "kernels_ms": kernels, "gaps_ms": gaps, "rest_ms": events_ms - lead - kernels - gaps}


def gpu_events(prof):
    """[(start µs, name, ms)] of a profile's GPU kernels and memsets."""
    out = []
    for e in prof.events():
        if str(e.device_type).endswith("CUDA"):
            out.append((e.time_range.start, e.name, e.time_range.elapsed_us() / 1e3))
    return out


def profile_backend(torch, fl, backend, shape, passes, timed_window=False):
    """summarize() of @p passes backward passes of @p backend on @p shape; @p timed_window: with
    the passes as torch_sdpa.py times them ("window", the module's docstring)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.profiler import ProfilerActivity, profile

    dtype_name, d, n, b, hq, hkv, causal = shape
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[dtype_name]
    gen = torch.Generator(device="cuda").manual_seed(2024)
    q, k, v = (torch.randn(b, n, h, d, device="cuda", dtype=dtype, generator=gen).requires_grad_()
               for h in (hq, hkv, hkv))
    if backend == "ladder":
        out = fl.attention(q, k, v, causal=causal)
    else:
        which = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}[backend]
        kwargs = {"is_causal": causal}
        if hq != hkv:
            kwargs["enable_gqa"] = True
        with sdpa_kernel([which]):
            out = torch.nn.functional.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), **kwargs).transpose(1, 2)
    dout = torch.randn(out.shape, device="cuda", dtype=dtype, generator=gen)

    def grad():
        return torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)

    for _ in range(3):  # the first pass plans and allocates; then warm
        grad()
    torch.cuda.synchronize()
    runs = []
    for _ in range(passes):
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            grad()
            torch.cuda.synchronize()
        runs.append(roles(gpu_events(prof)))
    rec = summarize(runs)
    if timed_window:
        timer = timing.EventTimer(torch)
        plain = [timer.once(grad, "fill")[0] for _ in range(passes)]
        parts = []
        for _ in range(passes):
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                ms = timer.once(grad, "fill")[0]
            parts.append(dict(window(gpu_events(prof), ms), events_profiled_ms=ms))
        rec["window"] = {key: statistics.median(p[key] for p in parts) for key in parts[0]}
        rec["window"]["events_ms"] = statistics.median(plain)
        del timer
    del q, k, v, out, dout
    torch.cuda.empty_cache()
    return rec


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="folder for torch_bwd_profile.json and .log")
    ap.add_argument("--passes", type=int, default=10, help="profiled backward passes per backend and shape")
    ap.add_argument("--shapes", help="comma-separated names of SHAPES (default: all)")
    ap.add_argument("--package", help="folder holding the flashladder package (default: PYTHONPATH)")
    ap.add_argument("--list", action="store_true", help="print the shapes and exit")
    ap.add_argument("--family", help="comma-separated bench families (%s): their whole grid instead of SHAPES"
                    % ", ".join(GRID_FAMILIES))
    ap.add_argument("--dtype", default="bf16", choices=("bf16", "fp16"), help="the grid's dtype (with --family)")
    ap.add_argument("--backends", default=",".join(BACKENDS), help="comma-separated subset of %s" % ", ".join(BACKENDS))
    ap.add_argument("--window", action="store_true",
                    help="also time the pass as torch_sdpa.py does and take the interval apart (the docstring)")
    args = ap.parse_args(argv)
    shapes = SHAPES
    if args.family:
        try:
            shapes = grid_shapes(args.family.split(","), args.dtype)
        except ValueError as e:
            ap.error(str(e))
    names = args.shapes.split(",") if args.shapes else list(shapes)
    unknown = [s for s in names if s not in shapes]
    if unknown:
        ap.error("unknown shape(s) %s; known: %s" % (", ".join(unknown), ", ".join(shapes)))
    backends = args.backends.split(",")
    if any(b not in BACKENDS for b in backends):
        ap.error("--backends: a subset of %s" % ", ".join(BACKENDS))
    if args.list:
        for s in names:
            print(s, *shapes[s])
        return 0
    if not args.out:
        ap.error("--out is required")
    os.makedirs(args.out, exist_ok=True)
    with runinfo.Log(os.path.join(args.out, "torch_bwd_profile.log")):
        return run(args, names, shapes, backends)


def run(args, names, shapes=SHAPES, backends=BACKENDS):
    torch = runinfo.cuda_torch("torch_bwd_profile.py")
    if torch is None:
        return 0
    fl = runinfo.import_flashladder(args.package)
    if fl is None:
        return 0
    git = runinfo.git_info()
    device = torch.cuda.get_device_name()
    result = {"context": dict(git, date=runinfo.now(), device=device, command=runinfo.command_line(),
                              versions=runinfo.versions(), passes=args.passes, window=args.window,
                              family=args.family, dtype=args.dtype if args.family else None,
                              package=runinfo.package_path(fl),
                              cudnn=str(torch.backends.cudnn.version())),
              "shapes": []}
    print("torch_bwd_profile.py: %s, PyTorch %s, cuDNN %s, commit %s" % (
        device, torch.__version__, result["context"]["cudnn"], git["git_sha"]))
    for name in names:
        shape = shapes[name]
        rec = {"name": name, "shape": dict(zip(("dtype", "head_dim", "seqlen", "batch", "heads_q", "heads_kv",
                                                 "causal"), shape)), "backends": {}}
        for backend in backends:
            try:
                rec["backends"][backend] = profile_backend(torch, fl, backend, shape, args.passes, args.window)
            except (RuntimeError, ValueError) as e:  # a backend that refuses the shape: say so
                rec["backends"][backend] = {"skipped": str(e).split("\n")[0]}
            r = rec["backends"][backend]
            if "skipped" in r:
                print("%-32s %-6s skipped: %s" % (name, backend, r["skipped"]))
            else:
                print("%-32s %-6s total %.3f ms: pre %.3f, main %.3f, post %.3f (%d kernels)" % (
                    name, backend, r["total_ms"], r["pre_ms"], r["main_ms"], r["post_ms"], len(r["kernels"])))
                if "window" in r:
                    w = r["window"]
                    print("%-32s %-6s timed as torch_sdpa.py: %.3f ms (profiled %.3f: lead %.3f, kernels %.3f, "
                          "gaps %.3f, rest %.3f)" % (name, backend, w["events_ms"], w["events_profiled_ms"],
                                                     w["lead_ms"], w["kernels_ms"], w["gaps_ms"], w["rest_ms"]))
        result["shapes"].append(rec)
    runinfo.write_json(os.path.join(args.out, "torch_bwd_profile.json"), result)
    runinfo.update_meta(args.out, device, git, runinfo.command_line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
