#!/usr/bin/env python3
"""The call overhead: a rung called from PyTorch (flashladder.attention) against the same rung in
the C++ runner, on the same shape and GPU.

Shape: the prefill family's at seqlen 1k: batch 16 (batch x seqlen = 16k tokens), 16 heads of
head_dim 128 (hidden 2048), fp16, not causal. Rungs: the package's default forward for this GPU
and rung 06 (--rungs). Per rung, --repeats times in turn:

  runner         `<bin>/<NN_name> --batch 16 --seqlen 1024 --heads 16 --dim 128 --iters N --json F
                 --check none --no-compare`: its median (CUDA events around one launch, the L2
                 flushed before each: common/src/timing.cpp, time_launches).
  PyTorch        flashladder.attention(q, k, v, rung=R) timed the runner's way: a 2 x L2 buffer
                 written before each call by the runner's own flush (_ext.flush_l2, cudaMemsetAsync:
                 L2Flusher), CUDA events around the call, median of N. The host
                 work of a call that fits in the flush's time is hidden, as it is in the runner.
  PyTorch, idle  the same with the GPU idle when the start event is recorded
                 (torch.cuda.synchronize() after the flush): the call's whole host path (checks,
                 plan, output allocation, launch) is inside the timed interval.
  binding, idle  flashladder._ext.forward with the outputs allocated once: the C++ extension's
                 checks and the launch alone, the floor the Python layer adds to.
  binding        the binding alone timed the runner's way (GPU busy with the flush when the call
                 is queued).
  after fill     PyTorch and the binding again, the buffer written by PyTorch's zero_() (its fill
                 kernel) instead: how the kernel before the call moves the figure (what this script
                 measured before it flushed through the runner's memset).
  runner's loop  the runner's own C++ loop (time_launches: flush, events, launch on the default
  in-process     stream) run inside this process through _ext.PreparedForward.time_runner_loop:
                 the process without any Python between the events.
  runner's case  the runner's whole forward case (its inputs drawn by make_inputs, its own buffers,
  in-process     its loop) run inside this process (_ext.time_runner_case): the process alone.
  N(0,1) inputs  the PyTorch call on N(0,1) inputs instead of the runner's (every other series
                 reads inputs drawn as the runner draws them: N(0,1), + 0.25 for Q and K, + 0.5
                 for V): what the inputs' values alone move.
  back to back   N calls between two events, no flush: time per call when launches queue up.
  host path      per series, the call's own wall-clock time on the host (median) beside the flush's
                 time on the GPU: timed the runner's way, a host path longer than the flush leaves
                 the GPU idle before the kernel, and that difference is what PyTorch - runner sees.
  kernel         the device time of the rung's own kernels in the PyTorch call, from the
                 profiler (CUPTI): the GPU's share of a call, without any host time or event;
                 measured last, after every timed loop.
  timeline       the same profiler's trace of single calls timed the runner's way (PyTorch and
                 the binding): the flush's end to the kernel's start on the GPU, how long before
                 the flush's end the host's launch call returned, and the events' interval less
                 the kernels.

The series are measured in a rotating order, so that none always runs first after the runner's
process (the GPU's clocks after a pause).

  paired         the runner's loop (in this process), the PyTorch call, the binding, and both on
                 N(0,1) inputs again, --pair-iters calls each, in turn, --pair-rounds rounds (the
                 order rotated per round): each round's series meet the GPU in one state.
  GPU state      nvidia-smi's SM clock, power draw and clock-limit reasons sampled in the
                 background (every 100 ms) during the series in turn, the runner binary's runs and
                 the paired rounds: a GPU that runs back to back reaches its power limit and lowers
                 its clock, which the runner binary, started on an idle GPU, does not meet.

The figure the target (within 5 us) is read on: PyTorch minus the runner's loop, paired (the median
over the rounds of each round's difference). The series in turn against the runner binary (median
of the repeats' medians) stay beside it as unpaired_diff_us. The idle times bound what a call's host path costs when the GPU
waits for it. Then the host's cost per call alone, on a problem too small to keep the GPU busy
(batch 1, seqlen 128, 16 heads, d=128): wall-clock time of 2000 calls in a loop (and of each
call timed alone, the GPU synchronized every 16 calls, so that the host never waits for it), for
flashladder.attention without and with autograd, the binding alone, the fast path's prepared launch
alone (_ext.PreparedForward, what a call without autograd runs once its inputs' signature is known)
and F.scaled_dot_product_attention (flash, and its default backend), the same per rung measured
above, and a breakdown of
the Python layer (input checks, plan lookup, output allocation, stream, the fast path's signature).
Last, the host's cost of one forward + backward step under autograd per entry point (SDPA, the
package's attention, flash_attn_func plain, causal, with softcap and a window, the varlen form) on
batch 1, 2 heads, 128 tokens, d=64 (host_steps.py; "host_steps" in the JSON), and of one serving
call per entry point (SDPA's decode, flash_attn_func's, flash_attn_with_kvcache contiguous, paged
and appending, flash_attn_varlen_func; host_serving.py; "host_serving" in the JSON).

Writes <out>/torch_overhead.json and <out>/torch_overhead.log, and adds its command line to
<out>/meta.json (made when absent: device, date, commit).

    PYTHONPATH=build/release/python python3 bench/pytorch/torch_overhead.py --bin build/release/bin --out DIR

Exits 0 with a message, measuring nothing, without PyTorch, a CUDA device or the package.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import host_serving  # noqa: E402  bench/pytorch/host_serving.py: a serving call per entry point
import host_steps  # noqa: E402  bench/pytorch/host_steps.py: a forward + backward step per entry point
import runinfo  # noqa: E402  bench/pytorch/runinfo.py
import timing  # noqa: E402  bench/pytorch/timing.py: events, flush, median, paired rounds, host time
from gpu_monitor import GpuMonitor  # noqa: E402  bench/pytorch/gpu_monitor.py: nvidia-smi's clock and power
from profile_timeline import kernel_ms, timeline_us  # noqa: E402  bench/pytorch/profile_timeline.py

SHAPE = dict(batch=16, seqlen=1024, heads=16, head_dim=128)
TINY = dict(batch=1, seqlen=128, heads=16, head_dim=128)
TARGET_US = 5.0


def runner_ms(binary, shape, iters, json_path):
    """(median ms, command) of one runner invocation; raises RuntimeError with its output on failure."""
    cmd = [binary, "--batch", str(shape["batch"]), "--seqlen", str(shape["seqlen"]), "--heads", str(shape["heads"]),
           "--dim", str(shape["head_dim"]), "--iters", str(iters), "--json", json_path, "--check", "none",
           "--no-compare"]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError("%s exited %d:\n%s" % (" ".join(cmd), out.returncode, (out.stdout + out.stderr)[-2000:]))
    with open(json_path, encoding="utf-8") as f:
        rep = json.load(f)
    return rep["timing"]["median_ms"], cmd


class Timer(timing.EventTimer):
    """timing.EventTimer with the runner's own flush: "memset" (_ext.flush_l2: cudaMemsetAsync of a
    2 x L2 buffer, common/src/device.cpp, the default) beside "fill", PyTorch's zero_() of the same
    buffer (its fill kernel: what this script used before, kept to compare)."""

    def __init__(self, torch, l2_bytes, device):
        from flashladder import _ext, _launch

        super().__init__(torch, 2 * max(l2_bytes, 1 << 20), device, flush="memset")
        buf, nbytes = self.flush_buf.data_ptr(), self.flush_buf.numel()
        stream, index = _launch.stream(self.flush_buf), device.index
        self.flushes = {"memset": lambda: _ext.flush_l2(buf, nbytes, stream, index), "fill": self.flush_buf.zero_}

    def single(self, fn, iters, idle, warmup=10, flush="memset"):
        """Median ms of single calls the runner's way; self.last: the host's time of a call and the
        flush's on the GPU (what hides the call's host path in the runner's way)."""
        return self.time_ms(fn, iters, warmup, idle, flush)

    def back_to_back(self, fn, iters, warmup=10):
        return self.back_to_back_ms(fn, iters, warmup)


def make_qkv(torch, shape, device, requires_grad=False):
    b, s, h, d = shape["batch"], shape["seqlen"], shape["heads"], shape["head_dim"]
    return [torch.randn(b, s, h, d, device=device, dtype=torch.float16).requires_grad_(requires_grad)
            for _ in range(3)]


def ext_launcher(torch, fl, plan, q, k, v):
    """A call of the binding alone: outputs allocated once, every argument prepared."""
    from flashladder import _ext, _launch

    out = torch.empty_like(q)
    lse = torch.empty(q.shape[0], q.shape[2], q.shape[1], dtype=torch.float32, device=q.device)
    ws = torch.empty(max(plan.workspace_bytes, 1), dtype=torch.uint8, device=q.device)
    ptrs = (q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr())
    strides = (q.stride(), k.stride(), v.stride(), out.stride())
    stream, index = _launch.stream(q), q.device.index
    ws_ptr, ws_bytes = (ws.data_ptr(), plan.workspace_bytes) if plan.workspace_bytes else (0, 0)

    def call():  # planned=True, as the package calls it (its plan asked supports and the workspace)
        _ext.forward(plan.number, plan.variant, plan.problem, ptrs, strides, ws_ptr, ws_bytes, stream, index,
                     planned=True)

    return call


def prepared_launcher(torch, fl, plan, q, k, v):
    """A call of the fast path's prepared launch alone (_ext.PreparedForward): outputs allocated
    once, the pointers and the stream read once."""
    from flashladder import _ext, _launch

    out = torch.empty_like(q)
    lse = torch.empty(q.shape[0], q.shape[2], q.shape[1], dtype=torch.float32, device=q.device)
    ws = torch.empty(max(plan.workspace_bytes, 1), dtype=torch.uint8, device=q.device)
    launch = _ext.PreparedForward(plan.number, plan.variant, plan.problem,
                                  (q.stride(), k.stride(), v.stride(), out.stride()), q.device.index,
                                  plan.workspace_bytes)
    args = (q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), lse.data_ptr(),
            ws.data_ptr() if plan.workspace_bytes else 0, _launch.stream(q))

    def call():
        launch.launch(*args)

    return call


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True, help="folder with the built rungs (build/release/bin)")
    ap.add_argument("--out", required=True, help="folder for torch_overhead.json and torch_overhead.log")
    ap.add_argument("--rungs", default="default,6", help="'default' (the package's choice) and rung numbers")
    ap.add_argument("--iters", type=int, default=200, help="timed calls per measurement")
    ap.add_argument("--repeats", type=int, default=3, help="runner and PyTorch measured in turn this many times")
    ap.add_argument("--host-calls", type=int, default=2000, help="calls per host-overhead loop")
    ap.add_argument("--pair-rounds", type=int, default=60,
                    help="rounds of the paired series (the runner's loop and the PyTorch call, in turn)")
    ap.add_argument("--pair-iters", type=int, default=50, help="calls per series per paired round")
    ap.add_argument("--package", help="folder holding the flashladder package")
    args = ap.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    with runinfo.Log(os.path.join(args.out, "torch_overhead.log")):
        return run(args)


def run(args):
    torch = runinfo.cuda_torch("torch_overhead.py")
    if torch is None:
        return 0
    fl = runinfo.import_flashladder(args.package)
    if fl is None:
        print("torch_overhead.py: nothing measured")
        return 0
    if fl.device_count() == 0:
        print("torch_overhead.py: %s: nothing measured" % fl.no_device_reason())
        return 0
    from flashladder import _core, _ext, _launch

    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    device = torch.device("cuda", torch.cuda.current_device())
    index = device.index
    info = fl.device_info(index)
    print("torch_overhead.py: %s (%s), PyTorch %s, package %s" % (info.name, info.arch, torch.__version__,
                                                                   runinfo.package_path(fl)))
    key = (SHAPE["batch"], SHAPE["seqlen"], SHAPE["seqlen"], SHAPE["heads"], SHAPE["heads"], SHAPE["head_dim"],
           "fp16", False, 0.0)
    wanted = []
    for tok in args.rungs.split(","):
        tok = tok.strip()
        if tok == "default":
            wanted.append(("default", _core.plan_forward(None, "", key, index)))
        elif tok:
            wanted.append((int(tok), _core.plan_forward(int(tok), "", key, index)))
    timer = Timer(torch, info.l2_bytes, device)
    uuid = getattr(torch.cuda.get_device_properties(device), "uuid", None)
    monitor = GpuMonitor("GPU-%s" % uuid if uuid else None)
    # The runner's inputs (common/include/flashladder/inputs.h, make_inputs random): N(0,1), + 0.25
    # for Q and K, + 0.5 for V. The same rung on other values runs at another speed (N(0,1) inputs:
    # the python_randn series), so every series that is compared with the runner reads these.
    q, k, v = (t + off for t, off in zip(make_qkv(torch, SHAPE, device), (0.25, 0.25, 0.5)))
    nq, nk, nv = make_qkv(torch, SHAPE, device)  # N(0,1), as a test's inputs would be
    result = {"schema": "flashladder.torch_overhead/1", "date": runinfo.now(), **runinfo.git_info(),
              "command": runinfo.command_line(), "versions": runinfo.versions(),
              "device": {"name": info.name, "arch": info.arch, "sms": info.sm_count, "l2_bytes": info.l2_bytes},
              "shape": dict(SHAPE, kv_heads=SHAPE["heads"], dtype="fp16", causal=False),
              "iters": args.iters, "repeats": args.repeats, "target_us": TARGET_US,
              "method": "median of CUDA-event times of single calls, a 2 x L2 buffer written before each "
                        "by cudaMemsetAsync (the runner's way, _ext.flush_l2); idle: the GPU synchronized before "
                        "the start event; *_fill: the buffer written by PyTorch's zero_() instead; the figure "
                        "is the median over the repeats of each repeat's median",
              "rungs": []}
    # The profiler runs last, after every timed loop, so that whatever it sets up in the process
    # (CUPTI, its observers) cannot touch the host times.
    profile_later = []
    with tempfile.TemporaryDirectory() as tmp:
        for requested, plan in wanted:
            binary = os.path.join(args.bin, plan.label)
            entry = {"requested": requested, "label": plan.label, "number": plan.number}
            print("\n== %s (%s)" % (plan.label,
                                     "the default rung" if requested == "default" else "rung=%d" % requested))
            if not os.path.exists(binary):
                entry["error"] = "no %s in %s" % (plan.label, args.bin)
                print("  skipped: " + entry["error"])
                result["rungs"].append(entry)
                continue
            rung = None if requested == "default" else plan.number  # as a user would call it

            def call(rung=rung):
                fl.attention(q, k, v, rung=rung)

            ext_call = ext_launcher(torch, fl, plan, q, k, v)
            loop_out, loop_lse = torch.empty_like(q), torch.empty(q.shape[0], q.shape[2], q.shape[1],
                                                                  dtype=torch.float32, device=device)
            loop_ws = torch.empty(max(plan.workspace_bytes, 1), dtype=torch.uint8, device=device)
            prepared = _ext.PreparedForward(plan.number, plan.variant, plan.problem,
                                            (q.stride(), k.stride(), v.stride(), loop_out.stride()), index,
                                            plan.workspace_bytes)

            def runner_loop(prepared=prepared):  # the runner's own C++ loop, inside this process
                timer.last = None
                return prepared.time_runner_loop(q.data_ptr(), k.data_ptr(), v.data_ptr(), loop_out.data_ptr(),
                                                 loop_lse.data_ptr(), loop_ws.data_ptr(), args.iters, 10)

            def runner_case(plan=plan):  # the runner's whole forward case (its inputs and buffers), in this process
                timer.last = None
                return _ext.time_runner_case(plan.number, plan.variant, plan.problem, args.iters, 10, index)

            def call_randn(rung=rung):  # the PyTorch call on N(0,1) inputs
                fl.attention(nq, nk, nv, rung=rung)

            names = ("runner", "python", "python_idle", "binding", "binding_idle", "python_fill", "binding_fill",
                     "runner_loop", "runner_case", "python_randn")
            series = {n: [] for n in names}
            host_paths = {}  # per series: each repeat's median host time of the call and the flush's GPU time
            measure = {"python": lambda: timer.single(call, args.iters, idle=False),
                       "python_idle": lambda: timer.single(call, args.iters, idle=True),
                       "binding": lambda: timer.single(ext_call, args.iters, idle=False),
                       "binding_idle": lambda: timer.single(ext_call, args.iters, idle=True),
                       "python_fill": lambda: timer.single(call, args.iters, idle=False, flush="fill"),
                       "binding_fill": lambda: timer.single(ext_call, args.iters, idle=False, flush="fill"),
                       "runner_loop": runner_loop,
                       "runner_case": runner_case,
                       "python_randn": lambda: timer.single(call_randn, args.iters, idle=False)}
            in_turn_t0, runner_windows = time.monotonic(), []
            for r in range(args.repeats):
                t_run = time.monotonic()
                ms, cmd = runner_ms(binary, SHAPE, args.iters, os.path.join(tmp, "run.json"))
                runner_windows.append((t_run, time.monotonic()))
                series["runner"].append(ms)
                order = list(measure)
                order = order[r % len(order):] + order[:r % len(order)]  # rotate the order
                for n in order:
                    series[n].append(measure[n]())
                    if timer.last is not None:
                        host_paths.setdefault(n, []).append(dict(timer.last))
                print("  repeat %d: runner %.4f ms, PyTorch %.4f ms, PyTorch idle %.4f ms, binding %.4f ms, "
                      "binding idle %.4f ms; after PyTorch's fill kernel: PyTorch %.4f ms, binding %.4f ms; "
                      "the runner's loop in this process %.4f ms, the runner's whole case in this process %.4f ms, "
                      "PyTorch on N(0,1) inputs %.4f ms (order %s)"
                      % (r + 1, *(series[n][-1] for n in names), ", ".join(order)))
            in_turn_t1 = time.monotonic()
            med = {n: statistics.median(s) for n, s in series.items()}
            entry["runner_command"] = " ".join([os.path.join(args.bin, plan.label)] + cmd[1:-5] +
                                               ["--json", "F"] + cmd[-3:])
            entry["ms"] = {n: s for n, s in series.items()}
            entry["median_ms"] = med
            entry["back_to_back_ms"] = {"python": timer.back_to_back(call, args.iters),
                                        "binding": timer.back_to_back(ext_call, args.iters)}
            profile_later.append((entry, call, ext_call))
            entry["diff_us"] = (med["python"] - med["runner"]) * 1e3
            entry["idle_diff_us"] = (med["python_idle"] - med["runner"]) * 1e3
            entry["python_layer_idle_us"] = (med["python_idle"] - med["binding_idle"]) * 1e3
            entry["binding_diff_us"] = (med["binding"] - med["runner"]) * 1e3
            entry["fill_diff_us"] = (med["python_fill"] - med["runner"]) * 1e3
            entry["binding_fill_diff_us"] = (med["binding_fill"] - med["runner"]) * 1e3
            # The runner's own loop and launch, from this process: what the process adds without
            # any Python between the events.
            entry["runner_loop_diff_us"] = (med["runner_loop"] - med["runner"]) * 1e3
            # The runner's whole case (its inputs, its buffers) in this process: the process alone;
            # and the PyTorch call on N(0,1) inputs instead of the runner's: the inputs' values.
            entry["runner_case_diff_us"] = (med["runner_case"] - med["runner"]) * 1e3
            entry["randn_diff_us"] = (med["python_randn"] - med["runner"]) * 1e3
            entry["host_path_us"] = {n: statistics.median(h["host_us"] for h in hs) for n, hs in host_paths.items()}
            entry["flush_us"] = statistics.median(h["flush_us"] for hs in host_paths.values() for h in hs)
            entry["within_target"] = abs(entry["diff_us"]) <= TARGET_US
            print("  PyTorch - runner: %+.1f us per call (target within %g us: %s); GPU idle before the call: "
                  "%+.1f us; the Python layer over the binding, idle: %+.1f us" % (
                      entry["diff_us"], TARGET_US, "met" if entry["within_target"] else "NOT met",
                      entry["idle_diff_us"], entry["python_layer_idle_us"]))
            print("  binding alone - runner: %+.1f us per call; the runner's loop in this process - runner: %+.1f us; "
                  "the runner's whole case in this process - runner: %+.1f us; PyTorch on N(0,1) inputs - "
                  "runner: %+.1f us" % (entry["binding_diff_us"], entry["runner_loop_diff_us"],
                                         entry["runner_case_diff_us"], entry["randn_diff_us"]))
            print("  flushed by PyTorch's fill kernel instead of the runner's memset: PyTorch - runner %+.1f us, "
                  "binding alone - runner %+.1f us" % (entry["fill_diff_us"], entry["binding_fill_diff_us"]))
            print("  the call's host path (wall clock, median): %s; the flush before it on the GPU: %.1f us" % (
                ", ".join("%s %.1f us" % (n, v) for n, v in entry["host_path_us"].items()), entry["flush_us"]))

            # ---- paired: the runner's loop and the PyTorch call in turn, round after round -------
            # The series above each run 200 calls back to back, one series after the other, and the
            # runner binary from a GPU its process start left idle; the GPU's clock follows its
            # power draw (the monitor's figures), so a series measured later, on a GPU that has run
            # longer, can be slower for that alone. Here every round runs each series once, for
            # pair_iters calls, in a rotated order, and the figure is the median over the rounds of
            # the per-round difference: the same GPU state for both sides of each difference.
            pair_host = {}

            def block(fn, name):
                us = timer.single(fn, args.pair_iters, idle=False, warmup=2) * 1e3
                pair_host.setdefault(name, []).append(timer.last["host_us"])
                return us

            def loop_block(qq, kk, vv, prepared=prepared):
                return prepared.time_runner_loop(qq.data_ptr(), kk.data_ptr(), vv.data_ptr(), loop_out.data_ptr(),
                                                 loop_lse.data_ptr(), loop_ws.data_ptr(), args.pair_iters, 2) * 1e3

            pair_measure = {"runner_loop": lambda: loop_block(q, k, v),
                            "python": lambda: block(call, "python"),
                            "binding": lambda: block(ext_call, "binding"),
                            "runner_loop_randn": lambda: loop_block(nq, nk, nv),
                            "python_randn": lambda: block(call_randn, "python_randn")}
            pair_t0 = time.monotonic()
            per_round = timing.paired_rounds(pair_measure, args.pair_rounds)
            pair_t1 = time.monotonic()
            paired = {"rounds": args.pair_rounds, "iters": args.pair_iters, "per_round_us": per_round,
                      "median_us": {n: statistics.median(v) for n, v in per_round.items()},
                      "host_path_us": {n: statistics.median(v) for n, v in pair_host.items()},
                      "python_minus_runner_loop_us": timing.paired_diff(per_round, "python", "runner_loop"),
                      "binding_minus_runner_loop_us": timing.paired_diff(per_round, "binding", "runner_loop"),
                      "randn_python_minus_runner_loop_us": timing.paired_diff(per_round, "python_randn",
                                                                       "runner_loop_randn"),
                      "randn_runner_loop_minus_runner_loop_us": timing.paired_diff(per_round, "runner_loop_randn",
                                                                            "runner_loop")}
            gpu_state = {"in_turn": monitor.window(in_turn_t0, in_turn_t1), "paired": monitor.window(pair_t0, pair_t1),
                         "runner_binary": monitor.windows(runner_windows)}
            entry["paired"] = paired
            entry["gpu_state"] = gpu_state
            # The figure the target is read on: PyTorch minus the runner's own loop, paired. The
            # unpaired difference (series in turn, against the binary) stays as unpaired_diff_us.
            entry["unpaired_diff_us"] = entry["diff_us"]
            entry["diff_us"] = paired["python_minus_runner_loop_us"]["median"]
            entry["within_target"] = abs(entry["diff_us"]) <= TARGET_US
            pm = paired["median_us"]
            print("  paired (%d rounds of %d calls per series, in turn): the runner's loop %.1f us, PyTorch %.1f us, "
                  "binding %.1f us; on N(0,1) inputs the runner's loop %.1f us, PyTorch %.1f us" % (
                      args.pair_rounds, args.pair_iters, pm["runner_loop"], pm["python"], pm["binding"],
                      pm["runner_loop_randn"], pm["python_randn"]))
            for label, name in (("PyTorch - the runner's loop", "python_minus_runner_loop_us"),
                                ("binding alone - the runner's loop", "binding_minus_runner_loop_us"),
                                ("on N(0,1) inputs, PyTorch - the runner's loop", "randn_python_minus_runner_loop_us"),
                                ("the runner's loop on N(0,1) inputs - on the runner's inputs",
                                 "randn_runner_loop_minus_runner_loop_us")):
                x = paired[name]
                print("    %-62s %+.1f us (p10 %+.1f, p90 %+.1f)" % (label, x["median"], x["p10"], x["p90"]))
            print("  PyTorch - runner, paired: %+.1f us per call (target within %g us: %s); the series in turn against "
                  "the binary (above): %+.1f us" % (entry["diff_us"], TARGET_US,
                                                     "met" if entry["within_target"] else "NOT met",
                                                     entry["unpaired_diff_us"]))
            print("  the paired calls' host path (median): %s" % ", ".join(
                "%s %.1f us" % (n, v) for n, v in paired["host_path_us"].items()))
            for what, st in gpu_state.items():
                if st:
                    print("  GPU state, %-14s SM clock median %.0f MHz (min %.0f), power median %.0f W, max %.0f W "
                          "of %.0f W, limits: %s (%d samples)" % (
                              what + ":", st["sm_mhz_median"], st["sm_mhz_min"], st["power_w_median"],
                              st["power_w_max"], st["power_limit_w"],
                              ", ".join("%s %.0f%%" % (n, 100 * f) for n, f in st["reason_share"].items()) or "none",
                              st["samples"]))
            result["rungs"].append(entry)

    # ---- the host's cost per call, on a problem too small to keep the GPU busy ------------------
    print("\n== host time per call: batch %d, seqlen %d, %d heads, d=%d, fp16 (%d calls in a loop)" % (
        TINY["batch"], TINY["seqlen"], TINY["heads"], TINY["head_dim"], args.host_calls))
    tq, tk, tv = make_qkv(torch, TINY, device)
    gq, gk, gv = make_qkv(torch, TINY, device, requires_grad=True)
    tkey = (TINY["batch"], TINY["seqlen"], TINY["seqlen"], TINY["heads"], TINY["heads"], TINY["head_dim"], "fp16",
            False, 0.0)
    tplan = _core.plan_forward(None, "", tkey, index)
    st = [t.transpose(1, 2) for t in (tq, tk, tv)]  # SDPA's [b, h, s, d]
    ext_tiny = ext_launcher(torch, fl, tplan, tq, tk, tv)
    host = {"shape": dict(TINY, dtype="fp16", causal=False), "calls": args.host_calls, "rung": tplan.label,
            "per_call_us": {}, "python_layer_us": {}}
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        loops = [("flashladder.attention", lambda: fl.attention(tq, tk, tv)),
                 ("flashladder.attention, autograd", lambda: fl.attention(gq, gk, gv)),
                 ("binding alone (_ext.forward)", ext_tiny),
                 ("prepared launch alone (PreparedForward)", prepared_launcher(torch, fl, tplan, tq, tk, tv)),
                 ("F.scaled_dot_product_attention (flash)", lambda: F.scaled_dot_product_attention(*st)),
                 ("flashladder.attention, return_lse=True", lambda: fl.attention(tq, tk, tv, return_lse=True)),
                 ("flashladder.flash_attn_func", lambda: fl.flash_attn_func(tq, tk, tv))]
        for requested, _plan in wanted:  # the rungs measured above, by number
            if requested == "default":
                continue
            rplan = _core.plan_forward(requested, "", tkey, index)
            loops.append(("flashladder.attention, rung=%d" % requested,
                          lambda r=requested: fl.attention(tq, tk, tv, rung=r)))
            loops.append(("binding alone, %s" % rplan.label, ext_launcher(torch, fl, rplan, tq, tk, tv)))
        for name, fn in loops:
            try:
                fn()
            except ValueError as e:  # a series this build cannot run (autograd without a backward rung)
                host.setdefault("not_run", {})[name] = str(e)
                print("  %-42s not run: %s" % (name, e))
                continue
            host["per_call_us"][name] = timing.host_us(torch, fn, args.host_calls)
            host.setdefault("call_alone_us", {})[name] = timing.host_call_us(torch, fn, args.host_calls)
            print("  %-42s %6.1f us per call in the loop, %6.1f us each call timed alone" % (
                name, host["per_call_us"][name], host["call_alone_us"][name]))
    # SDPA's default choice on this GPU (cuDNN on Hopper), outside the flash-only context
    name = "F.scaled_dot_product_attention (default backend)"
    sdpa_default = (lambda: F.scaled_dot_product_attention(*st))
    host["per_call_us"][name] = timing.host_us(torch, sdpa_default, args.host_calls)
    host.setdefault("call_alone_us", {})[name] = timing.host_call_us(torch, sdpa_default, args.host_calls)
    print("  %-42s %6.1f us per call in the loop, %6.1f us each call timed alone" % (
        name, host["per_call_us"][name], host["call_alone_us"][name]))
    host["kernel_us"] = timer.back_to_back(ext_tiny, args.iters) * 1e3
    print("  %-42s %6.1f us (back to back: below the figures above, the host is what limits them)" % (
        "the kernel alone", host["kernel_us"]))
    lse_like = tq.new_empty((0,), dtype=torch.float32)
    parts = [("input checks (check_qkv_cached)",
              lambda: _core.check_qkv_cached(tq, tk, tv, False, None, tensor_type=torch.Tensor)),
             ("input checks, uncached (check_qkv)",
              lambda: _core.check_qkv(tq, tk, tv, False, None, tensor_type=torch.Tensor)),
             ("plan lookup (plan_forward)", lambda: _core.plan_forward(None, "", tkey, index)),
             ("output and LSE allocation (the fast path's: empty_like(q), the LSE from a kept fp32 tensor)",
              lambda: (torch.empty_like(tq), lse_like.new_empty((1, 16, 128)))),
             ("output and LSE allocation, new_empty(shape) and new_empty(shape, dtype=)",
              lambda: (tq.new_empty(tq.shape), tq.new_empty((1, 16, 128), dtype=torch.float32))),
             ("output and LSE allocation, torch.empty(shape, dtype=, device=)",
              lambda: (torch.empty(tq.shape, dtype=tq.dtype, device=device),
                       torch.empty((1, 16, 128), dtype=torch.float32, device=device))),
             ("current stream", lambda: _launch.stream(tq)),
             ("the fast path's signature and lookup (_fast_signature)",
              lambda: _launch.FAST.get(_launch.fast_signature(tq, tk, tv, False, None, None, "")))]
    for name, fn in parts:
        host["python_layer_us"][name] = timing.host_us(torch, fn, args.host_calls * 5, sync=False)
        print("  %-42s %6.2f us" % (name, host["python_layer_us"][name]))
    result["host"] = host

    # ---- the host's cost of a forward + backward step under autograd, per entry point -----------
    st = host_steps.STEP_SHAPE
    print("\n== host time per forward + backward step under autograd: batch %d, seqlen %d, %d heads, d=%d, "
          "fp16 (%d steps)" % (st["batch"], st["seqlen"], st["heads"], st["head_dim"], args.host_calls))
    result["host_steps"] = host_steps.measure(torch, F, fl, device, args.host_calls,
                                              lambda: sdpa_kernel(SDPBackend.FLASH_ATTENTION))

    # ---- the host's cost of a serving call (decode, a KV cache, its append, varlen) -------------
    print("\n== host time per serving call: %s (%d calls)" % (host_serving.SERVING_SHAPE, args.host_calls))
    result["host_serving"] = host_serving.measure(torch, F, fl, device, args.host_calls)

    # ---- the device time of each call's kernels, from the profiler (last: see profile_later) -----
    print("\n== the call's kernels on the GPU (PyTorch profiler, CUPTI), each call after the flush")
    for entry, call, ext_call in profile_later:
        try:
            k_ms, k_detail = kernel_ms(torch, call, timer.flushes["memset"], args.iters)
        except Exception as e:  # noqa: BLE001  a profiler that cannot run: say so, keep the rest
            k_ms, k_detail = None, "%s: %s" % (type(e).__name__, e)
        entry["timeline"] = {}
        for what, fn in (("python", call), ("binding", ext_call)):
            try:
                entry["timeline"][what] = timeline_us(torch, fn, timer.flushes["memset"], args.iters,
                                                      timer.start, timer.end)
            except Exception as e:  # noqa: BLE001  as above
                entry["timeline"][what] = {"error": "%s: %s" % (type(e).__name__, e)}
            print("  %-22s timeline of %s: %s" % (entry["label"], what, ", ".join(
                "%s %s" % (n, ("%.1f" % x) if isinstance(x, float) else x) for n, x in entry["timeline"][what].items())))
        entry["kernel_ms"] = k_ms
        entry["kernels"] = k_detail
        if k_ms is None:
            print("  %-22s not measured: %s" % (entry["label"], k_detail))
            continue
        entry["kernel_diff_us"] = (k_ms - entry["median_ms"]["runner"]) * 1e3
        print("  %-22s %.4f ms, the runner's median %+.1f us (%s)" % (
            entry["label"], k_ms, entry["kernel_diff_us"],
            "; ".join("%s %.4f" % (n[:60], v) for n, v in k_detail.items())))
    monitor.stop()
    runinfo.write_json(os.path.join(args.out, "torch_overhead.json"), result)
    runinfo.update_meta(args.out, info.name, result, result["command"])
    print("\n== summary (%s)" % info.name)
    for e in result["rungs"]:
        if "diff_us" in e:
            print("  %-22s paired: the runner's loop %.1f us, PyTorch %.1f us: %+.1f us per call (target %g us: %s); "
                  "in turn against the binary (%.4f ms): %+.1f us; GPU idle first: %+.1f us"
                  % (e["label"], e["paired"]["median_us"]["runner_loop"], e["paired"]["median_us"]["python"],
                     e["diff_us"], TARGET_US, "met" if e["within_target"] else "NOT met", e["median_ms"]["runner"],
                     e["unpaired_diff_us"], e["idle_diff_us"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
