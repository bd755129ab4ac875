"""CUDA-event timing for the PyTorch comparison scripts of bench/pytorch/, one implementation.

The ladder's runner times a launch as common/src/timing.cpp does (time_launches): write a buffer
twice the L2's size so that the inputs come from HBM, record a start event, launch, record an end
event, and take the median of N such calls after a warm-up. EventTimer does the same from PyTorch,
so that a PyTorch figure and a rung's figure measure one thing:

    timer = timing.EventTimer(torch)                 # flush buffer: 2 x the device's L2
    ms = timer.time_ms(lambda: F.scaled_dot_product_attention(q, k, v), iters=20, warmup=5)
    timer.last                                       # the host's time of the call, the flush's on the GPU

Beside it: host_us, host_call_us and wall_s, the host's wall-clock time of a call; Marks, events at the points of one iteration (the all-gather, then the attention) for
the scripts that time phases; paired_rounds and paired_diff, every series once per round in an
order rotated per round, so that each difference compares series that met the GPU in one state
(clock, power, temperature); median and column_medians.

PyTorch comes in as an argument: this module imports no PyTorch, so that the CPU tests and the
docs generator can import the scripts that use it on a machine without PyTorch.
"""

import statistics
import time

DEFAULT_L2_BYTES = 50 << 20  # a device that does not say its L2 size: larger than any GPU's L2 so far


def median(xs):
    return statistics.median(xs)


def column_medians(rows):
    """The median of each column of @p rows (a list of equal-length lists of times)."""
    return [statistics.median(r[i] for r in rows) for i in range(len(rows[0]))]


def l2_bytes(torch, device=None):
    """The L2 size of @p device (default: the current CUDA device), DEFAULT_L2_BYTES when unknown."""
    props = torch.cuda.get_device_properties(device if device is not None else torch.cuda.current_device())
    return getattr(props, "L2_cache_size", 0) or DEFAULT_L2_BYTES


class EventTimer:
    """Single calls between two CUDA events, each after an L2 flush; the median of N.

    @p flush_bytes: the flush buffer's size (default 2 x the L2, as the runner's; 0: no buffer, no
    flush). The flushes are named: "fill" writes the buffer with PyTorch's fill kernel; a script
    adds its own to self.flushes (torch_overhead.py adds the runner's cudaMemsetAsync as
    "memset"). @p flush: the name time_ms uses by default."""

    def __init__(self, torch, flush_bytes=None, device="cuda", flush="fill"):
        self.torch = torch
        if flush_bytes is None:
            flush_bytes = 2 * l2_bytes(torch, torch.device(device).index)
        self.flush_buf = torch.empty(flush_bytes, dtype=torch.uint8, device=device) if flush_bytes else None
        self.flushes = {"fill": (lambda: self.flush_buf.fill_(1))} if flush_bytes else {}
        self.flush = flush if flush_bytes else None
        self.flush_start = torch.cuda.Event(enable_timing=True)
        self.start = torch.cuda.Event(enable_timing=True)
        self.end = torch.cuda.Event(enable_timing=True)
        self.last = None

    def once(self, fn, flush=None, idle=False):
        """(ms between the events around one call of @p fn, the host's microseconds in the call, the
        flush's microseconds on the GPU or None). @p flush: a name in self.flushes, None for none;
        @p idle: the GPU synchronized after the flush, so that the call's whole host path is inside
        the timed interval."""
        if flush is not None:
            self.flush_start.record()
            self.flushes[flush]()
        if idle:
            self.torch.cuda.synchronize()
        self.start.record()
        t0 = time.perf_counter()
        fn()
        host_us = (time.perf_counter() - t0) * 1e6
        self.end.record()
        self.end.synchronize()
        flush_us = self.flush_start.elapsed_time(self.start) * 1e3 if flush is not None else None
        return self.start.elapsed_time(self.end), host_us, flush_us

    def time_ms(self, fn, iters, warmup=5, idle=False, flush="default"):
        """Median ms of @p iters single calls of @p fn after @p warmup calls, each after the flush
        (@p flush: a name in self.flushes, None for none, "default" for the timer's). Leaves in
        self.last the medians of the host's time of a call (host_us) and of the flush on the GPU
        (flush_us, None without a flush): a host path longer than the flush leaves the GPU idle
        before the call, and the events' interval then holds host time."""
        flush = self.flush if flush == "default" else flush
        for _ in range(warmup):
            fn()
        self.torch.cuda.synchronize()
        ms, host, flushed = [], [], []
        for _ in range(iters):
            m, h, f = self.once(fn, flush, idle)
            ms.append(m)
            host.append(h)
            flushed.append(f)
        self.last = {"host_us": statistics.median(host),
                     "flush_us": statistics.median(flushed) if flush is not None else None}
        return statistics.median(ms)

    def back_to_back_ms(self, fn, iters, warmup=10):
        """ms per call of @p iters calls between two events, no flush: the time per call when the
        launches queue up."""
        for _ in range(warmup):
            fn()
        self.torch.cuda.synchronize()
        self.start.record()
        for _ in range(iters):
            fn()
        self.end.record()
        self.end.synchronize()
        return self.start.elapsed_time(self.end) / iters


class Marks:
    """CUDA events at @p points places of one iteration: record(0) before the first phase, record(i)
    after phase i; intervals() (after a synchronize) gives each phase's ms and then the whole's."""

    def __init__(self, torch, points):
        self.ev = [torch.cuda.Event(enable_timing=True) for _ in range(points)]

    def record(self, i):
        self.ev[i].record()

    def intervals(self):
        ev = self.ev
        return [ev[i].elapsed_time(ev[i + 1]) for i in range(len(ev) - 1)] + [ev[0].elapsed_time(ev[-1])]


# ---- the host's time of a call -----------------------------------------------------------------


def host_us(torch, fn, calls, sync=True):
    """Wall-clock microseconds per call of @p calls calls in a loop (then one synchronize)."""
    for _ in range(20):
        fn()
    if sync:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    if sync:
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) / calls * 1e6


def host_call_us(torch, fn, calls, every=16):
    """Median wall-clock microseconds of one call, each timed alone (time.perf_counter around
    the call), the GPU synchronized after every @p every calls outside the timed interval: the
    host's own cost of a call, with a queue too short to make the host wait for the GPU (the loop
    of host_us can: when the GPU takes longer per call than the host, it measures the GPU)."""
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    times = []
    for i in range(calls):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        if (i + 1) % every == 0:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    return statistics.median(times) * 1e6


def wall_s(torch, fn):
    """Seconds of one call of @p fn on the host's clock, the GPU synchronized before and after: a
    whole generation, many launches and host work between them."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t0


# ---- series in turn ------------------------------------------------------------------------------


def paired_rounds(measure, rounds):
    """@p rounds rounds; in each, every series of @p measure (name: fn -> one figure, e.g. the median
    us of a block of calls) once, in an order rotated per round, so that all of them meet the GPU in
    the same state (clock, power, temperature) within a round. Returns {name: [figure per round]}."""
    names = list(measure)
    out = {n: [] for n in names}
    for r in range(rounds if names else 0):
        for n in names[r % len(names):] + names[:r % len(names)]:
            out[n].append(measure[n]())
    return out


def runnable(named, out, width=48):
    """The (name, fn) of @p named that run once without a ValueError or RuntimeError (an entry this
    build or GPU cannot run); each that does not is recorded in out["not_run"] with its first line,
    and said."""
    ok = []
    for name, fn in named:
        try:
            fn()
        except (ValueError, RuntimeError) as e:
            out.setdefault("not_run", {})[name] = str(e).split("\n")[0]
            print("  %-*s not run: %s" % (width, name, out["not_run"][name]))
            continue
        ok.append((name, fn))
    return ok


def host_rounds(torch, named, calls, rounds):
    """{name: (median µs per call in a loop, median µs of one call timed alone)} for each (name, fn)
    of @p named: paired_rounds of @p rounds rounds, in each @p calls // rounds calls of every fn in
    a loop (host_us) and as many timed alone (host_call_us)."""
    per = max(1, calls // rounds)
    got = paired_rounds({n: (lambda fn=fn: (host_us(torch, fn, per), host_call_us(torch, fn, per)))
                         for n, fn in named}, rounds)
    return {n: (median([x[0] for x in v]), median([x[1] for x in v])) for n, v in got.items()}


def paired_diff(per_round, a, b):
    """Median, 10th and 90th percentiles over the rounds of series @p a minus series @p b."""
    d = sorted(x - y for x, y in zip(per_round[a], per_round[b]))
    return {"median": statistics.median(d), "p10": d[len(d) // 10], "p90": d[(len(d) * 9) // 10]}
