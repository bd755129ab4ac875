"""What the PyTorch profiler (CUPTI) says of single calls timed the runner's way, for
bench/pytorch/torch_overhead.py: the device time of a call's kernels (kernel_ms) and the GPU's
timeline around each call (timeline_us: the flush's end to the kernel's start, how early the host's
launch returned, the events' interval less the kernels). Both are run after every timed loop, so
that whatever the profiler sets up in the process cannot touch the host times.
"""

import json
import os
import statistics
import tempfile


def timeline_us(torch, fn, flush, iters, start, end):
    """The GPU's timeline of single calls timed the runner's way (flush, start event, call, end
    event), from the profiler's trace (CUPTI: the flush's memset, the call's kernels and the host's
    launch calls on one clock). Per call: the flush's end to the first kernel's start on the GPU
    (gap_us), the launch call's return on the host before the flush's end (queued_us: positive,
    the launch was queued in time; negative, the GPU waited for it), the first kernel's duration,
    the events' interval and that interval less the call's kernels (events_minus_kernels_us).
    Medians; None for a figure the trace does not have (no runtime call correlated)."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(5):
        flush()
        fn()
    torch.cuda.synchronize()
    ms = []
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            flush()
            start.record()
            fn()
            end.record()
            end.synchronize()
            ms.append(start.elapsed_time(end))
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = json.load(f).get("traceEvents", [])
    gpu = sorted((e for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memset")),
                 key=lambda e: e["ts"])
    calls = {}
    for e in events:
        corr = (e.get("args") or {}).get("correlation")
        if e.get("ph") == "X" and e.get("cat") in ("cuda_runtime", "cuda_driver") and corr is not None:
            calls[corr] = e
    gaps, queued, kdur, kernels_of_call = [], [], [], []
    i = 0
    while i < len(gpu):
        if gpu[i]["cat"] != "gpu_memset":
            i += 1
            continue
        flush_end = gpu[i]["ts"] + gpu[i]["dur"]
        j = i + 1
        total = 0.0
        while j < len(gpu) and gpu[j]["cat"] == "kernel":
            total += gpu[j]["dur"]
            j += 1
        if j > i + 1:
            first = gpu[i + 1]
            gaps.append(first["ts"] - flush_end)
            kdur.append(first["dur"])
            kernels_of_call.append(total)
            launch = calls.get((first.get("args") or {}).get("correlation"))
            if launch is not None:
                queued.append(flush_end - (launch["ts"] + launch["dur"]))
        i = j
    med = (lambda xs: statistics.median(xs) if xs else None)
    events_us = [m * 1e3 for m in ms]
    n = min(len(events_us), len(kernels_of_call))
    return {"calls": len(kdur), "gap_us": med(gaps), "queued_us": med(queued), "kernel_us": med(kdur),
            "events_us": med(events_us),
            "events_minus_kernels_us": med([events_us[-n + t] - kernels_of_call[-n + t] for t in range(n)]) if n else None}


def kernel_ms(torch, fn, flush, iters):
    """(median ms per call of the device time of every kernel @p fn launched, {kernel: median ms})
    from the PyTorch profiler (CUPTI), each call after @p flush; kernels that @p flush launches
    (run alone first) are left out. (None, why) when the profiler gives no kernel."""
    from torch.profiler import ProfilerActivity, profile

    def kernels(prof):
        out = []
        for e in prof.events():
            if str(getattr(e, "device_type", "")).endswith("CUDA") and e.time_range.elapsed_us() > 0:
                out.append((e.time_range.start, e.name, e.time_range.elapsed_us() / 1e3))
        return sorted(out)

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            flush()
        torch.cuda.synchronize()
    flush_names = {name for _, name, _ in kernels(prof)}
    for _ in range(5):
        flush()
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            flush()
            fn()
        torch.cuda.synchronize()
    per_name = {}
    for _, name, ms in kernels(prof):
        if name not in flush_names:
            per_name.setdefault(name, []).append(ms)
    if not per_name:
        return None, "the profiler recorded no kernel of the call"
    calls = max(len(v) for v in per_name.values())
    medians = {name: statistics.median(v) for name, v in per_name.items()}
    return sum(medians[n] * len(v) / calls for n, v in per_name.items()), medians
