"""The host's cost of one forward + backward step under autograd, per entry point, beside SDPA's.

On a problem whose kernels take microseconds (STEP_SHAPE: batch 1, 2 heads, 128 tokens, d = 64),
a step's wall time is the host's: the Python layers, the checks, the plans, the allocations, the
custom op's dispatch and autograd's bookkeeping, forward and backward. torch_overhead.py runs this
after its per-call series and writes the result under "host_steps" in torch_overhead.json:

    {"shape": {...}, "calls": N, "rounds": R, "step_us": {name: µs per step in a loop},
     "step_alone_us": {name: median µs of one step timed alone}, "not_run": {name: why},
     "cpu_profile": {name: {"steps": n, "ops": [[op, self µs per step, calls per step], ...],
                            "python": [[file:line(function), own µs per step, calls per step], ...],
                            "device": [[kernel or copy, GPU µs per step, calls per step], ...]}}}

cpu_profile says where a step's host time goes: the PyTorch profiler's host events (aten ops,
autograd nodes, the CUDA runtime calls CUPTI records: launches, memsets, attribute calls) over
PROFILE_STEPS steps, the TOP_OPS largest by their own (self) host time per step; "python" is
cProfile's view of the same steps, the package's own functions among them; "device" the GPU's time
per step by kernel (a step slower than its host time is the GPU's).

The entry points take turns: R rounds, in each every entry point runs N / R steps in a loop and
N / R steps timed alone, the order rotated per round; each figure is the median over the rounds
(a single series per entry point, one after the other, carried whatever changed between the
series: the loop and the alone figures of one entry point disagreed by more than the entry points
differed).

A step is `out = f(q, k, v); out.backward(dout)` with q, k, v requiring grad (their .grad reset to
None each step, as an optimizer's zero_grad(set_to_none=True) does). The entry points are the ones
users train through: SDPA (its default backend and flash), flashladder.attention, flash_attn_func
plain, causal, with a window and with softcap, and flash_attn_varlen_func on the same tokens (the
step's leaves [batch, seqlen, heads, d] viewed as packed, and leaves packed already).
PyTorch comes in as an argument (timing.py's rule: importing this module imports no PyTorch).
"""

import timing

STEP_SHAPE = dict(batch=1, seqlen=128, heads=2, head_dim=64)
WINDOW = (63, 0)  # a window that cuts the 128-token row: the masked route, not the plain one
SOFTCAP = 30.0
PROFILE_STEPS = 50
TOP_OPS = 15


def entry_points(F, fl, sdpa_flash, cu, n):
    """(name, f(q, k, v) -> out) of every step's forward, q, k, v as [batch, seqlen, heads, d]. SDPA's
    flash entry picks its backend in the forward; autograd's graph keeps that kernel's backward."""

    def sdpa(a, b, c):
        return F.scaled_dot_product_attention(a.transpose(1, 2), b.transpose(1, 2), c.transpose(1, 2),
                                              is_causal=True).transpose(1, 2)

    def sdpa_flash_only(a, b, c):
        with sdpa_flash():
            return sdpa(a, b, c)

    def varlen(a, b, c):
        flat = [t.reshape(-1, t.shape[2], t.shape[3]) for t in (a, b, c)]
        return fl.flash_attn_varlen_func(*flat, cu, cu, n, n, causal=True).view(a.shape)

    def varlen_packed(a, b, c):  # the leaves packed already, as a packing collator hands them
        return fl.flash_attn_varlen_func(a, b, c, cu, cu, n, n, causal=True)

    return [("F.scaled_dot_product_attention, causal (default backend)", sdpa),
            ("F.scaled_dot_product_attention, causal (flash)", sdpa_flash_only),
            ("flashladder.attention, causal", lambda a, b, c: fl.attention(a, b, c, causal=True)),
            ("flash_attn_func", lambda a, b, c: fl.flash_attn_func(a, b, c)),
            ("flash_attn_func, causal", lambda a, b, c: fl.flash_attn_func(a, b, c, causal=True)),
            ("flash_attn_func, causal, softcap %g" % SOFTCAP,
             lambda a, b, c: fl.flash_attn_func(a, b, c, causal=True, softcap=SOFTCAP)),
            ("flash_attn_func, window %s" % (WINDOW,),
             lambda a, b, c: fl.flash_attn_func(a, b, c, causal=True, window_size=WINDOW)),
            ("flash_attn_varlen_func, causal", varlen),
            ("flash_attn_varlen_func, causal, packed leaves", varlen_packed)]


def measure(torch, F, fl, device, calls, sdpa_flash, rounds=10):
    """The "host_steps" record (module docstring); @p sdpa_flash: a context manager that restricts
    SDPA to its flash backend (lambda: torch.nn.attention.sdpa_kernel(SDPBackend.FLASH_ATTENTION))."""
    s = STEP_SHAPE
    shape = (s["batch"], s["seqlen"], s["heads"], s["head_dim"])
    q, k, v = (torch.randn(shape, device=device, dtype=torch.float16, requires_grad=True) for _ in range(3))
    dout = torch.randn(shape, device=device, dtype=torch.float16)
    # The packed leaves' own (varlen_packed: [tokens, heads, head_dim], no view in the step).
    packed = [t.detach().reshape(-1, shape[2], shape[3]).clone().requires_grad_() for t in (q, k, v)]
    dout_packed = dout.reshape(-1, shape[2], shape[3])
    n = s["seqlen"]
    cu = torch.arange(0, (s["batch"] + 1) * n, n, device=device, dtype=torch.int32)
    out = {"shape": dict(s, dtype="fp16"), "calls": calls, "rounds": rounds, "step_us": {}, "step_alone_us": {}}
    def step_of(f, leaves=(q, k, v), grad=dout):
        def step():
            for t in leaves:
                t.grad = None
            f(*leaves).backward(grad)
        return step

    steps = timing.runnable([(name, step_of(f, packed, dout_packed) if name.endswith("packed leaves") else step_of(f))
                             for name, f in entry_points(F, fl, sdpa_flash, cu, n)], out, 58)
    times = timing.host_rounds(torch, steps, calls, rounds)
    for name, step in steps:
        try:
            prof = out.setdefault("cpu_profile", {})[name] = cpu_profile(torch, step, PROFILE_STEPS)
            print("  %-58s profiled: %.1f us of own host time per step; largest: %s" % (
                name, prof["self_us_total"], "; ".join("%s %.1f" % (k, us) for k, us, _ in prof["ops"][:5])))
        except Exception as e:  # noqa: BLE001  a profiler that cannot run here: say so, keep the timings
            out.setdefault("cpu_profile", {})[name] = {"error": "%s: %s" % (type(e).__name__, e)}
    for name, _ in steps:
        out["step_us"][name], out["step_alone_us"][name] = times[name]
        print("  %-58s %7.1f us per step in a loop, %7.1f us each step timed alone (medians of %d rounds)" % (
            name, out["step_us"][name], out["step_alone_us"][name], rounds))
    return out


def cpu_profile(torch, step, steps):
    """{"steps": n, "ops": [[name, self µs per step, calls per step], ...]} of @p step under the PyTorch
    profiler (host events, CUDA runtime calls included where CUDA is there), the TOP_OPS largest by
    self host time; the profiler's own cost inflates every figure alike, so read them as shares."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    for _ in range(5):
        step()
    with profile(activities=acts) as prof:
        for _ in range(steps):
            step()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    rows = [(e.key, e.self_cpu_time_total / steps, e.count / steps) for e in prof.key_averages()
            if e.self_cpu_time_total > 0]
    rows.sort(key=lambda r: -r[1])
    # The GPU's side of the same steps (CUDA activities: kernels, memsets, copies), so that a step
    # whose time is the GPU's, not the host's, says so.
    dev = [(e.key, getattr(e, "self_device_time_total", 0.0) / steps, e.count / steps) for e in prof.key_averages()]
    dev = sorted((r for r in dev if r[1] > 0), key=lambda r: -r[1])
    return {"steps": steps, "ops": [[k, round(us, 2), round(c, 2)] for k, us, c in rows[:TOP_OPS]],
            "self_us_total": round(sum(r[1] for r in rows), 1), "python": python_profile(step, steps),
            "device": [[k, round(us, 2), round(c, 2)] for k, us, c in dev[:TOP_OPS]],
            "device_us_total": round(sum(r[1] for r in dev), 1)}


def python_profile(step, steps):
    """[[function, own µs per step, calls per step], ...]: Python's own profiler (cProfile) over
    @p steps steps, the TOP_OPS functions by own time, each named file:line(function) with the
    file's last two path parts: where the package's Python spends a step (the PyTorch profiler
    sees its autograd functions as one event each). cProfile's cost inflates every figure alike."""
    import cProfile
    import os
    import pstats

    prof = cProfile.Profile()
    prof.enable()
    for _ in range(steps):
        step()
    prof.disable()
    rows = []
    for (path, line, func), (_, calls, own, _, _) in pstats.Stats(prof).stats.items():
        where = "/".join(path.split(os.sep)[-2:]) if path != "~" else ""
        rows.append(["%s:%d(%s)" % (where, line, func) if where else func, own * 1e6 / steps, calls / steps])
    rows.sort(key=lambda r: -r[1])
    return [[name, round(us, 2), round(c, 2)] for name, us, c in rows[:TOP_OPS]]
