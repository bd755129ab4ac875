"""The ladder inside PyTorch (the flashladder package): the training demo (bench/pytorch/torch_train.py), the
call overhead (bench/pytorch/torch_overhead.py) and decode through the package (bench/pytorch/torch_decode.py), each
from its own JSON in a results folder. (PyTorch SDPA beside a rung in the bench is the ladder's
torch-compare.)"""

import results_io
from .core import Missing, binary_bytes, generator, link, results_folder

TORCH_RUN_COMMANDS = {
    "torch_train.json": "PYTHONPATH=build/release/python python3 bench/pytorch/torch_train.py "
                        "--out bench/results/<gpu>/pytorch",
    "torch_overhead.json": "PYTHONPATH=build/release/python python3 bench/pytorch/torch_overhead.py --bin build/release/bin "
                           "--out bench/results/<gpu>/pytorch",
    "torch_decode.json": "PYTHONPATH=build/release/python python3 bench/pytorch/torch_decode.py --out bench/results/<gpu>/pytorch-decode",
    "torch_fp8.json": "PYTHONPATH=build/release/python python3 bench/pytorch/torch_fp8.py --out bench/results/<gpu>/pytorch-fp8",
    "cudnn_fp8.json": "python3 -m pip install --target build/pip-cudnn -r bench/pytorch/requirements-cudnn.txt && "
                      "PYTHONPATH=build/release/python:build/pip-cudnn python3 bench/pytorch/cudnn_fp8.py "
                      "--out bench/results/<gpu>/cudnn-fp8",
    "fa_tests.json": "PYTHONPATH=build/release/python python3 bench/studies/fa_tests/run.py --tests "
                     "PATH/flash-attention/tests/test_flash_attn.py --out bench/results/<gpu>/fa-tests --sample 1/64",
    "torch_flex_steps.json": "PYTHONPATH=build/release/python python3 bench/pytorch/torch_flex_steps.py "
                             "--out bench/results/<gpu>/flex-steps/bf16-4k",
    "host_serving_ab.json": "python3 bench/pytorch/host_serving_ab.py --a BUILD_A/python --b BUILD_B/python "
                            "--names A,B --out bench/results/<gpu>/<folder>",
}


def torch_run(ctx, gpu, name):
    """(Results, the JSON) of a PyTorch script's run in folder @p gpu; Missing when no committed
    run has it (the folder may not exist yet either)."""
    res = results_folder(ctx, gpu, name, TORCH_RUN_COMMANDS[name])
    if not res.has(name):
        raise Missing("%s in bench/results/%s" % (name, res.gpu), TORCH_RUN_COMMANDS[name])
    return res, res.json(name)


def torch_provenance(data):
    """ "NVIDIA H100 80GB HBM3, 2026-11-24, commit `abc1234`, PyTorch 2.11.0, transformers 5.17.0"."""
    v = data.get("versions", {})
    extra = "".join(", %s %s" % (n, v[k]) for k, n in (("torch", "PyTorch"), ("transformers", "transformers"))
                    if v.get(k))
    dirty = " with local changes (the folder's `meta.json` names them)" if data.get("git_dirty") else ""
    return "%s, %s, commit `%s`%s%s" % (data.get("device", {}).get("name", "?"), str(data.get("date", "?"))[:10],
                                        data.get("git_sha", "?"), dirty, extra)


def fmt_loss(v):
    return "—" if v is None else "%.3f" % v


def fmt_tokens(v):
    return "—" if v is None else "%.0fk" % (v / 1e3) if v >= 1e4 else "%.0f" % v


@generator("torch-train")
def gen_torch_train(ctx, gpu=None):
    """The training demo (bench/pytorch/torch_train.py, torch_train.json): per run (SDPA flash, SDPA cuDNN
    when the run has it, the ladder, SDPA flash again) the steady-state step time, tokens/s, the
    last held-out loss and the ladder's speedup over SDPA flash and cuDNN; the logits check, the
    loss curves' agreement and attention's share of a step."""
    res, d = torch_run(ctx, gpu, "torch_train.json")
    s, cfg, lad = d.get("summary", {}), d["config"], d.get("ladder", {})
    by = {r["name"]: r for r in d["runs"]}
    ref = by.get("sdpa_flash")
    cud = by.get("sdpa_cudnn")
    names = {"sdpa_flash": ("SDPA", "flash backend forced (FlashAttention-2)"),
             "sdpa_cudnn": ("SDPA", "cuDNN backend forced"),
             "ladder": ("the ladder", "forward `%s`, backward `%s` (autograd)" % (
                 lad.get("forward_rung", "?"), lad.get("backward_rung", "?"))),
             "sdpa_flash_rerun": ("SDPA again", "flash backend forced: the noise between two runs")}
    rows = []
    for r in d["runs"]:
        who, what = names.get(r["name"], (r["name"], ""))
        ratio = ref["step_ms_mean"] / r["step_ms_mean"] if ref and r is not ref and r.get("step_ms_mean") else None
        ratio_cudnn = (cud["step_ms_mean"] / r["step_ms_mean"]
                       if cud and r is not cud and r.get("step_ms_mean") and r["name"] == "ladder" else None)
        rows.append([who, what, "%.1f" % r["step_ms_mean"] if r.get("step_ms_mean") else "—",
                     fmt_tokens(r.get("tokens_per_s")), fmt_loss(r.get("final_heldout")),
                     results_io.fmt_ratio(ratio) if ratio else "—",
                     results_io.fmt_ratio(ratio_cudnn) if ratio_cudnn else "—"])
    out = results_io.markdown_table(["run", "attention", "ms / step", "tokens/s", "last held-out loss",
                                 "speedup over SDPA flash", "speedup over SDPA cuDNN"], rows,
                                ["---", "---", "--:", "--:", "--:", "--:", "--:"])
    notes = []
    lc = d.get("logits_check", {})
    if lc.get("ladder_vs_sdpa_flash"):
        notes.append("Logits check (%s, %s): the ladder's logits differ from SDPA flash's by max abs %.2e, "
                     "relative Frobenius %.2e; against the fp32 model the ladder's relative error is %.2e and SDPA "
                     "flash's %.2e (%.2f×; pass at ≤ %s×, attention on the ladder in %d of %d layers): **%s**." % (
                         lc["input"], lc["dtype"], lc["ladder_vs_sdpa_flash"]["max_abs"],
                         lc["ladder_vs_sdpa_flash"]["rel_fro"], lc["ladder_vs_fp32"]["rel_fro"],
                         lc["sdpa_flash_vs_fp32"]["rel_fro"], lc["error_ratio"],
                         "%g" % lc.get("tolerance_ratio", 2.0),
                         lc.get("ladder_attention_calls", 0), lc.get("layers", cfg["model"]["layers"]),
                         "pass" if lc.get("pass") else "FAIL"))
    if "loss_match" in s:
        rerun = ((" (two SDPA flash runs: %.4f)" % s["rerun_final_heldout_gap"])
                 if "rerun_final_heldout_gap" in s else "")
        notes.append("Loss curves: the last held-out losses differ by %.4f%s, tolerance %.4f: **%s**." % (
            s["final_heldout_gap"], rerun, s["loss_tolerance"], "match" if s["loss_match"] else "differ"))
    if "cudnn_final_heldout_gap" in s:
        notes.append("Against SDPA cuDNN: the last held-out losses differ by %.4f (the same tolerance): **%s**." % (
            s["cudnn_final_heldout_gap"], "match" if s.get("loss_match_cudnn") else "differ"))
    shares = [(n, s.get("attention_share_%s" % k))
              for n, k in (("SDPA flash", "sdpa_flash"), ("SDPA cuDNN", "sdpa_cudnn"), ("the ladder", "ladder"))]
    if any(v for _, v in shares):
        notes.append("Attention's share of a step (one layer's forward + backward alone x %d layers): %s." % (
            cfg["model"]["layers"], ", ".join("%s %.0f %%" % (n, 100 * v) for n, v in shares if v)))
    m = cfg["model"]
    notes.append("Model: Llama-style (GQA, RoPE), random init, %.3gM parameters, %d layers, hidden %d, %d/%d heads of "
                 "%d, MLP %d, byte vocabulary; %s; batch %d x seqlen %s, %d steps of AdamW, tokens/s without the first "
                 "%d steps; data: %s (%d files, %.1f MB). Measured on %s; %s." % (
                     m["parameters"] / 1e6, m["layers"], m["hidden"], m["heads_q"], m["heads_kv"], m["head_dim"],
                     m["intermediate"], cfg["precision"], cfg["batch"], results_io.seqlen_text(cfg["seqlen"]), cfg["steps"],
                     cfg["timing_skip"], d["data"]["source"].split(" (")[0], d["data"]["files"],
                     d["data"]["bytes"] / 1e6, torch_provenance(d), link(res, "torch_train.json")))
    return out + "\n\n" + "\n\n".join(notes)


def host_time_notes(d):
    """The notes on the host's time per call (the tiny problem) and its target, when measured."""
    h = d.get("host")
    if not h:
        return []
    t = h["shape"]
    alone = h.get("call_alone_us", {})
    notes = ["Host time per call (batch %d, seqlen %d, %d heads, d=%d; the kernel alone %.1f µs)%s: %s." % (
        t["batch"], t["seqlen"], t["heads"], t["head_dim"], h["kernel_us"],
        ", in a loop of %d calls (each call timed alone, the GPU synchronized every 16 calls)" % h["calls"]
        if alone else "",
        "; ".join("%s %.1f µs%s" % (n, v, " (%.1f)" % alone[n] if n in alone else "")
                  for n, v in h["per_call_us"].items()))]
    sdpa = [n for n in h["per_call_us"] if n.startswith("F.scaled_dot_product_attention")]
    ours = [n for n in ("flashladder.attention", "flashladder.flash_attn_func") if n in h["per_call_us"]]
    if alone and sdpa and ours:
        best = min(sdpa, key=lambda n: h["per_call_us"][n])
        met = all(h["per_call_us"][n] <= h["per_call_us"][best] and alone[n] <= alone[best] for n in ours)
        notes.append("Host-time target (%s no more than SDPA's fastest here, %s, in the loop and alone): "
                     "**%s**." % (" and ".join(ours), best, "met" if met else "not met"))
    return notes


def gpu_state_text(st):
    """One GPU-state summary (GpuMonitor.window) in words."""
    if not st:
        return "not sampled"
    reasons = ", ".join("%s in %.0f %% of samples" % (n, 100 * f) for n, f in st["reason_share"].items())
    return "SM clock median %.0f MHz (min %.0f), power median %.0f W, max %.0f W of its %.0f W limit%s" % (
        st["sm_mhz_median"], st["sm_mhz_min"], st["power_w_median"], st["power_w_max"], st["power_limit_w"],
        "; clock limited by: " + reasons if reasons else "")


def paired_overhead(res, d):
    """The overhead table of a run with the paired series (torch_overhead.py's paired rounds)."""
    rows, states = [], []
    for e in d["rungs"]:
        if "paired" not in e:
            continue
        p, m = e["paired"], e["median_ms"]
        pm = p["median_us"]

        def diff(name):
            x = p[name]
            return "%+.1f (%+.1f, %+.1f)" % (x["median"], x["p10"], x["p90"])

        rows.append(["`%s`%s" % (e["label"], " (default)" if e["requested"] == "default" else ""),
                     "%.1f" % pm["runner_loop"], "%.1f" % pm["python"], "**%s**" % diff("python_minus_runner_loop_us"),
                     diff("binding_minus_runner_loop_us"), diff("randn_python_minus_runner_loop_us"),
                     diff("randn_runner_loop_minus_runner_loop_us"), "%.1f" % (m["runner"] * 1e3),
                     "%+.1f" % e["unpaired_diff_us"], "%+.1f" % e["idle_diff_us"]])
        g = e.get("gpu_state", {})
        states.append("`%s`: during the paired rounds %s; during the runner binary's runs %s." % (
            e["label"], gpu_state_text(g.get("paired")), gpu_state_text(g.get("runner_binary"))))
    head = ["rung", "the runner's loop, paired, µs", "PyTorch, paired, µs",
            "PyTorch − the runner's loop, paired, µs (p10, p90)", "binding alone − the runner's loop, paired",
            "N(0,1) inputs: PyTorch − the runner's loop on them, paired",
            "the runner's loop: N(0,1) − the runner's inputs, paired", "the runner binary, µs",
            "PyTorch − the runner binary, series in turn, µs", "the same, GPU idle before the call"]
    out = results_io.markdown_table(head, rows)
    sh = d["shape"]
    e0 = next(e for e in d["rungs"] if "paired" in e)
    ok = all(abs(e["diff_us"]) <= d["target_us"] for e in d["rungs"] if "paired" in e)
    notes = ["batch %d, seqlen %s, %d heads, head_dim %d, %s, not causal; every call timed the runner's way (the "
             "L2 flushed by the runner's own cudaMemsetAsync, CUDA events around the call). Paired: %d rounds, in "
             "each %d calls of every series in turn (the runner's own timing loop run in PyTorch's process, "
             "_ext.PreparedForward.time_runner_loop; the PyTorch call; the binding alone; the same two on N(0,1) "
             "inputs), the order rotated per round; a difference is the median over the rounds of the round's "
             "difference of medians (in brackets its 10th and 90th percentiles). In turn: the runner binary and each "
             "series for %d calls, one after the other, median of %d repeats. Target (PyTorch − runner within %g µs, "
             "paired): **%s**." % (
                 sh["batch"], results_io.seqlen_text(sh["seqlen"]), sh["heads"], sh["head_dim"], sh["dtype"],
                 e0["paired"]["rounds"], e0["paired"]["iters"], d["iters"], d["repeats"], d["target_us"],
                 "met" if ok else "not met"),
             "The GPU's state (nvidia-smi, sampled every 100 ms): " + " ".join(states)]
    notes += host_time_notes(d)
    notes.append("Measured on %s; %s." % (torch_provenance(d), link(res, "torch_overhead.json")))
    return out + "\n\n" + "\n\n".join(notes)


@generator("torch-overhead")
def gen_torch_overhead(ctx, gpu=None):
    """The call overhead (bench/pytorch/torch_overhead.py, torch_overhead.json): per rung the runner's time
    and flashladder.attention's on the same shape, timed the runner's way, their difference per call
    against the target, the same with the GPU idle before each call, and the host's time per call."""
    res, d = torch_run(ctx, gpu, "torch_overhead.json")
    if any("paired" in e for e in d["rungs"]):
        return paired_overhead(res, d)
    rows = []
    for e in d["rungs"]:
        if "median_ms" not in e:
            continue
        m = e["median_ms"]
        rows.append(["`%s`%s" % (e["label"], " (default)" if e["requested"] == "default" else ""),
                     "%.1f" % (m["runner"] * 1e3), "%.1f" % (m["python"] * 1e3), "%+.1f" % e["diff_us"],
                     "%+.1f" % e["idle_diff_us"], "%+.1f" % e["python_layer_idle_us"]])
        if "binding_diff_us" in e:  # measured since the profiler column was added
            rows[-1] += ["%+.1f" % e["binding_diff_us"],
                         "%+.1f" % e["kernel_diff_us"] if "kernel_diff_us" in e else "not measured"]
        if "fill_diff_us" in e:  # measured since the flush is the runner's memset
            rows[-1] += ["%+.1f" % e["fill_diff_us"], "%+.1f" % e["binding_fill_diff_us"]]
        if "runner_loop_diff_us" in e:  # measured since the runner's loop also runs in the process
            rows[-1] += ["%+.1f" % e["runner_loop_diff_us"], "%+.1f" % ((m["python"] - m["runner_loop"]) * 1e3)]
        if "runner_case_diff_us" in e:  # measured since the runner's whole case also runs in the process
            rows[-1] += ["%+.1f" % e["runner_case_diff_us"],
                         "%+.1f" % e["randn_diff_us"] if "randn_diff_us" in e else "not measured"]
    if not rows:
        raise Missing("a timed rung in %s" % res.rel("torch_overhead.json"), TORCH_RUN_COMMANDS["torch_overhead.json"])
    head = ["rung", "runner µs", "PyTorch µs", "PyTorch − runner, µs", "the same, GPU idle before the call",
            "Python layer over the binding, GPU idle"]
    extra = [["binding alone − runner, µs", "the call's kernels (profiler) − runner, µs"],
             ["PyTorch − runner, after PyTorch's fill kernel", "binding alone − runner, after the fill kernel"],
             ["the runner's own loop in PyTorch's process − runner, µs", "PyTorch − that loop, µs"],
             ["the runner's whole case (its inputs, its buffers) in PyTorch's process − runner, µs",
              "PyTorch on N(0,1) inputs − runner, µs"]]
    for cols in extra:
        if all(len(r) >= len(head) + len(cols) for r in rows):
            head += cols
    rows = [r[:len(head)] for r in rows]
    memset = "fill_diff_us" in next(e for e in d["rungs"] if "median_ms" in e)
    out = results_io.markdown_table(head, rows)
    sh = d["shape"]
    ok = all(abs(e["diff_us"]) <= d["target_us"] for e in d["rungs"] if "diff_us" in e)
    notes = ["batch %d, seqlen %s, %d heads, head_dim %d, %s, not causal; median of %d single calls per repeat, "
             "the L2 flushed before each (%s), median of %d repeats. Target: within %g µs per call: "
             "**%s**." % (sh["batch"], results_io.seqlen_text(sh["seqlen"]), sh["heads"], sh["head_dim"], sh["dtype"],
                          d["iters"], "by the runner's own cudaMemsetAsync; the two fill-kernel columns by PyTorch's "
                          "zero_() instead" if memset else "by PyTorch's zero_(), the runner by cudaMemsetAsync",
                          d["repeats"], d["target_us"], "met" if ok else "not met")]
    if any("runner_loop_diff_us" in e for e in d["rungs"]):
        notes.append("The runner's own loop: the C++ runner's timing loop (common/src/timing.cpp, time_launches) over "
                     "the same tensors, run inside PyTorch's process (_ext.PreparedForward.time_runner_loop), in the "
                     "same rotation as the other series.%s" % (
                         " The runner's whole case: its inputs, its own buffers and that loop "
                         "(_ext.time_runner_case). Every series reads inputs drawn as the runner draws them (N(0,1), "
                         "+ 0.25 for Q and K, + 0.5 for V) but the last column's, N(0,1)."
                         if any("runner_case_diff_us" in e for e in d["rungs"]) else ""))
    notes += host_time_notes(d)
    notes.append("Measured on %s; %s." % (torch_provenance(d), link(res, "torch_overhead.json")))
    return out + "\n\n" + "\n\n".join(notes)


def host_time_table(loop, alone, not_run, base, first, unit, base_name):
    """A host-time table (host_steps', host_serving's): per entry, µs per @p unit in a loop and timed
    alone, each over entry @p base's (None: "—"), and a row per entry that did not run."""
    rows = [["`%s`" % n, "%.1f" % loop[n], "%.1f" % alone[n],
             results_io.fmt_ratio(loop[n] / loop[base]) if base else "—",
             results_io.fmt_ratio(alone[n] / alone[base]) if base else "—"] for n in loop]
    rows += [["`%s`" % n, "not run: %s" % why, "", "", ""] for n, why in not_run.items()]
    return results_io.markdown_table([first, "µs per %s, in a loop" % unit, "µs per %s, timed alone" % unit,
                                      "over %s, in a loop" % base_name, "over %s, alone" % base_name], rows,
                                     ["---", "--:", "--:", "--:", "--:"])


@generator("torch-host-steps")
def gen_torch_host_steps(ctx, gpu=None):
    """The host's cost of one forward + backward step under autograd per entry point (torch_overhead.json's
    host_steps, bench/pytorch/host_steps.py) beside SDPA's default backend, in a loop and timed alone."""
    res, d = torch_run(ctx, gpu, "torch_overhead.json")
    h = d.get("host_steps")
    if not h:
        raise Missing("host_steps in %s" % res.rel("torch_overhead.json"), TORCH_RUN_COMMANDS["torch_overhead.json"])
    sdpa = next((n for n in h["step_us"] if n.startswith("F.scaled_dot_product_attention") and "default" in n),
                None)
    out = host_time_table(h["step_us"], h["step_alone_us"], h.get("not_run", {}), sdpa, "entry point", "step",
                          "SDPA's")
    prof = h.get("cpu_profile") or {}
    gpu_us = {n: p["device_us_total"] for n, p in prof.items() if isinstance(p, dict) and "device_us_total" in p}
    if gpu_us:  # the GPU's own time per step (runs since the profile records it): host- or GPU-bound
        out += "\n\nThe GPU's time per step under the profiler (its kernels, memsets and copies): " + "; ".join(
            "`%s` %.1f µs" % (n, us) for n, us in gpu_us.items()) + "."
    t = h["shape"]
    how = ("%d rounds, each entry point in turn for %d steps in a loop and %d timed alone per round, the "
           "order rotated per round; medians over the rounds" % (h["rounds"], h["calls"] // h["rounds"],
                                                                 h["calls"] // h["rounds"])
           if "rounds" in h else "each entry point for %d steps in a loop, then %d timed alone, one entry point "
           "after the other (one series each: a figure carries whatever changed between the series)" % (
               h["calls"], h["calls"]))
    notes = ["A step: `out = f(q, k, v); out.backward(dout)`, q, k, v requiring grad, batch %d, seqlen %d, %d heads, "
             "head_dim %d, %s: the GPU's work takes microseconds, so the step's time is the host's (Python, checks, "
             "plans, allocations, autograd, forward and backward). %s." % (
                 t["batch"], t["seqlen"], t["heads"], t["head_dim"], t["dtype"], how[0].upper() + how[1:]),
             "Measured on %s; %s." % (torch_provenance(d), link(res, "torch_overhead.json"))]
    return out + "\n\n" + "\n\n".join(notes)


@generator("torch-host-steps-profile")
def gen_torch_host_steps_profile(ctx, gpu=None, entries="F.scaled_dot_product_attention, causal (default backend);"
                                 "flashladder.attention, causal", top="8"):
    """Where a forward + backward step's host time goes (torch_overhead.json's host_steps.cpu_profile,
    bench/pytorch/host_steps.py): for each of @p entries (';'-separated names), its @p top host events
    by own time per step under the PyTorch profiler, side by side."""
    res, d = torch_run(ctx, gpu, "torch_overhead.json")
    prof = (d.get("host_steps") or {}).get("cpu_profile")
    if not prof:
        raise Missing("host_steps.cpu_profile in %s" % res.rel("torch_overhead.json"),
                      TORCH_RUN_COMMANDS["torch_overhead.json"])
    names = [n for n in entries.split(";") if n in prof and "ops" in prof[n]]
    if not names:
        raise Missing("the profiles of %s in %s" % (entries, res.rel("torch_overhead.json")),
                      TORCH_RUN_COMMANDS["torch_overhead.json"])
    n_top = int(top)
    head, align, cols = ["rank"], ["--:"], []
    for n in names:
        head += ["`%s`: host event" % n, "µs per step", "calls per step"]
        align += ["---", "--:", "--:"]
        cols.append(prof[n]["ops"][:n_top])
    rows = []
    for k in range(max(len(c) for c in cols)):
        row = ["%d" % (k + 1)]
        for c in cols:
            row += ["`%s`" % c[k][0], "%.1f" % c[k][1], "%g" % c[k][2]] if k < len(c) else ["", "", ""]
        rows.append(row)
    rows.append(["all"] + sum((["(own time, every event)", "%.1f" % prof[n]["self_us_total"], ""] for n in names), []))
    out = results_io.markdown_table(head, rows, align)
    steps = prof[names[0]]["steps"]
    return out + "\n\n" + ("The PyTorch profiler's host events (aten ops, autograd nodes, CUDA runtime calls) over %d "
                            "steps per entry point, by own time; the profiler's own cost inflates every figure alike, "
                            "so read them as shares. Measured on %s; %s." % (steps, torch_provenance(d),
                                                                            link(res, "torch_overhead.json")))


@generator("torch-host-serving")
def gen_torch_host_serving(ctx, gpu=None):
    """The host's cost of one serving call per entry point (torch_overhead.json's host_serving,
    bench/pytorch/host_serving.py) beside SDPA's decode step, in a loop and timed alone."""
    res, d = torch_run(ctx, gpu, "torch_overhead.json")
    h = d.get("host_serving")
    if not h:
        raise Missing("host_serving in %s" % res.rel("torch_overhead.json"), TORCH_RUN_COMMANDS["torch_overhead.json"])
    sdpa = next((n for n in h["call_us"] if n.startswith("F.scaled_dot_product_attention")), None)
    out = host_time_table(h["call_us"], h["call_alone_us"], h.get("not_run", {}), sdpa, "call", "call",
                          "SDPA's decode")
    t = h["shape"]
    notes = ["Batch %d, %d query heads on %d KV heads, head_dim %d, %s; a cache of %d slots holding %d keys "
             "(pages of %d when paged); no autograd. %d rounds, each call in turn for %d calls in a loop and %d "
             "timed alone per round, the order rotated per round; medians over the rounds." % (
                 t["batch"], t["heads_q"], t["heads_kv"], t["head_dim"], t["dtype"], t["slots"], t["used"],
                 t["page"], h["rounds"], h["calls"] // h["rounds"], h["calls"] // h["rounds"]),
             "Measured on %s; %s." % (torch_provenance(d), link(res, "torch_overhead.json"))]
    return out + "\n\n" + "\n\n".join(notes)


def ab_table(per_run, base, first, unit, names, base_name, per="round"):
    """The table of two packages' host times run in turn: @p per_run maps "a" and "b" to one
    {entry: µs} per process; per entry each package's µs per @p unit in a loop (one figure per
    process), its ratio over entry @p base in the same process (the median over its processes), and
    B's ratio over A's; @p base's row last. @p names: A's and B's names."""
    import statistics

    a_name, b_name = names
    rows = []
    for name in per_run["a"][0]:
        if name == base or not all(name in r for side in "ab" for r in per_run[side]):
            continue
        over = {side: statistics.median(r[name] / r[base] for r in per_run[side]) for side in "ab"}
        rows.append(["`%s`" % name] + [", ".join("%.1f" % r[name] for r in per_run[side]) for side in "ab"] +
                    [results_io.fmt_ratio(over["a"]), results_io.fmt_ratio(over["b"]),
                     results_io.fmt_ratio(over["b"] / over["a"])])
    rows.append(["`%s`" % base] + [", ".join("%.1f" % r[base] for r in per_run[side]) for side in "ab"] +
                ["1.00×", "1.00×", "—"])
    return results_io.markdown_table(
        [first, "%s: µs per %s in a loop, per %s" % (a_name, unit, per),
         "%s: µs per %s in a loop, per %s" % (b_name, unit, per),
         "%s over %s" % (a_name, base_name), "%s over %s" % (b_name, base_name), "%s / %s" % (b_name, a_name)],
        rows, ["---", "--:", "--:", "--:", "--:", "--:"])


@generator("host-serving-ab")
def gen_host_serving_ab(ctx, gpu=None, what="serving"):
    """Two builds' serving calls in turn (bench/pytorch/host_serving_ab.py, host_serving_ab.json):
    per entry point each build's µs per call in a loop (one figure per round), each over SDPA's
    decode call timed in the same process (the median over the rounds), and B's ratio over A's.
    what=steps: the forward + backward steps of a run made with --steps, over SDPA's default causal
    step."""
    res, d = torch_run(ctx, gpu, "host_serving_ab.json")
    command = TORCH_RUN_COMMANDS["host_serving_ab.json"]
    a_name, b_name = d["names"]
    steps = what == "steps"
    key, unit = ("step_us", "step") if steps else ("call_us", "call")
    base_name = "SDPA's step" if steps else "SDPA's decode"
    runs = {b: [r for r in d["runs"] if r["build"] == b and key in r] for b in ("a", "b")}
    if not runs["a"] or not runs["b"]:
        raise Missing("both builds' runs (%s) in %s" % (key, res.rel("host_serving_ab.json")), command)
    sdpa = next((n for n in runs["a"][0][key] if n.startswith("F.scaled_dot_product_attention")
                 and (not steps or "default" in n)), None)
    if sdpa is None:
        raise Missing("SDPA's entry in %s" % res.rel("host_serving_ab.json"), command)
    table = ab_table({side: [r[key] for r in runs[side]] for side in "ab"}, sdpa,
                     "entry point (forward + backward step)" if steps else "call", unit, (a_name, b_name),
                     base_name)
    c = d["context"]
    if steps:
        t = d["steps_shape"]
        what_text = ("Batch %d, seqlen %d, %d heads, head_dim %d, %s; a step is `out = f(q, k, v); "
                     "out.backward(dout)` under autograd; %d steps per entry point per process" % (
                         t["batch"], t["seqlen"], t["heads"], t["head_dim"], t["dtype"], d["calls"]))
    else:
        t = d["shape"]
        what_text = ("Batch %d, %d query heads on %d KV heads, head_dim %d, %s; a cache of %d slots holding %d keys "
                     "(pages of %d when paged); %d calls per entry point per process; no autograd" % (
                         t["batch"], t["heads_q"], t["heads_kv"], t["head_dim"], t["dtype"], t["slots"], t["used"],
                         t["page"], d["calls"]))
    timed = "SDPA's default causal step beside the package's steps" if steps else \
        "SDPA's decode call beside the package's calls"
    note = ("Each round runs %s's package, then %s's, each in a process of its own on one GPU; every process times "
            "%s, and a build's ratio over SDPA is the median over the rounds of the ratio within its process. "
            "%s. %s, %s, commit `%s`, PyTorch %s; %s." % (
                a_name, b_name, timed, what_text, c["device"], c["date"][:10], c["git_sha"][:7],
                c["versions"].get("torch", "?"), link(res, "host_serving_ab.json")))
    return table + "\n\n" + note


@generator("overhead-ab")
def gen_overhead_ab(ctx, gpu=None, a="main", b="branch"):
    """Two packages' host paths from torch_overhead.py runs in turn (folders <gpu>/<a>-1, <b>-1,
    <a>-2, ...: one process each): per forward + backward step (host_steps) and per serving call
    (host_serving), each package's µs in a loop per run, its ratio over SDPA's in the same process
    (the median over its runs), and B's ratio over A's."""
    import glob
    import os

    command = TORCH_RUN_COMMANDS["torch_overhead.json"]
    folder = gpu or ""
    runs = {}
    for side in (a, b):
        paths = sorted(glob.glob(os.path.join(ctx.results(folder).dir, "%s-*" % side, "torch_overhead.json")))
        runs[side] = [(os.path.basename(os.path.dirname(p)), ctx.results("%s/%s" % (folder, os.path.basename(
            os.path.dirname(p)))).json("torch_overhead.json")) for p in paths]
        if not runs[side]:
            raise Missing("%s-<n>/torch_overhead.json in bench/results/%s" % (side, folder), command)
    out = []
    for key, unit, base_prefix, base_name in (("host_steps", "step", "F.scaled_dot_product_attention, causal (default",
                                               "SDPA's step"),
                                              ("host_serving", "call", "F.scaled_dot_product_attention, decode",
                                               "SDPA's decode")):
        field = "step_us" if key == "host_steps" else "call_us"
        base = next((n for n in runs[a][0][1][key][field] if n.startswith(base_prefix)), None)
        if base is None:
            raise Missing("SDPA's entry in %s's %s" % (a, key), command)
        out.append(ab_table({"a": [d[key][field] for _, d in runs[a]], "b": [d[key][field] for _, d in runs[b]]},
                            base, "entry point (forward + backward step)" if key == "host_steps" else "serving call",
                            unit, (a, b), base_name, per="run"))
    d0 = runs[b][0][1]
    order = ", ".join(n for n, _ in sorted(runs[a] + runs[b], key=lambda x: x[1].get("date", "")))
    note = ("Each run is `torch_overhead.py` in a process of its own (in this order: %s); a package's ratio over "
            "SDPA is the median over its runs of the ratio within each process, SDPA's call timed beside the "
            "package's. Steps: batch 1, seqlen 128, 2 heads, head_dim 64, fp16, under autograd; serving calls: "
            "no autograd. %s; %s." % (order, torch_provenance(d0), link(ctx.results(folder), "%s/torch_overhead.json"
                                                                         % runs[b][0][0])))
    return "\n\n".join(out) + "\n\n" + note


@generator("torch-flex-steps")
def gen_torch_flex_steps(ctx, gpu=None):
    """Masked training steps through the package against compiled FlexAttention
    (bench/pytorch/torch_flex_steps.py, torch_flex_steps.json): per case the forward + backward step's ms
    of each, SDPA cuDNN's on the causal case, the forward alone, the ratios, and the worst and best cell."""
    res, d = torch_run(ctx, gpu, "torch_flex_steps.json")
    rows, steps, fwds = [], [], []

    def cell(r, name):
        return "%.3f" % r["ms"][name] if name in r["ms"] else ("refused" if name in r.get("refused", {}) else "—")

    for r in d["rows"]:
        s = r["shape"]
        what = "d=%d %s N=%s" % (s["head_dim"], s["case"], results_io.seqlen_text(s["seqlen_q"]))
        if "flex_over_ladder" in r:
            steps.append((r["flex_over_ladder"], what))
        if "flex_fwd_over_ladder_fwd" in r:
            fwds.append((r["flex_fwd_over_ladder_fwd"], what))
        rows.append(["%d" % s["head_dim"], s["case"], "%d × %s" % (s["batch"], results_io.seqlen_text(s["seqlen_q"])),
                     cell(r, "ladder"), "%.0f" % r["tflops"]["ladder"] if "ladder" in r.get("tflops", {}) else "—",
                     cell(r, "flex"), cell(r, "cudnn"),
                     results_io.fmt_ratio(r.get("flex_over_ladder")), results_io.fmt_ratio(r.get("cudnn_over_ladder")),
                     cell(r, "ladder_fwd"), cell(r, "flex_fwd"), results_io.fmt_ratio(r.get("flex_fwd_over_ladder_fwd"))])
    head = ["head_dim", "case", "batch × seqlen", "ladder step, ms", "TFLOP/s", "FlexAttention step, ms",
            "SDPA cuDNN step, ms", "Flex / ladder", "cuDNN / ladder", "ladder fwd, ms", "Flex fwd, ms",
            "Flex / ladder, fwd"]
    out = results_io.markdown_table(head, rows, ["--:", "---", "---"] + ["--:"] * 9)
    notes = []
    for name, xs in (("forward + backward", steps), ("the forward alone", fwds)):
        if xs:
            lo, hi = min(xs), max(xs)
            notes.append("FlexAttention's time over the ladder's, %s: worst %s (%s), best %s (%s)." % (
                name, results_io.fmt_ratio(lo[0]), lo[1], results_io.fmt_ratio(hi[0]), hi[1]))
    notes.append("A step is the forward and `torch.autograd.grad` of its output, %s, %d heads, 16k tokens; the "
                 "ladder through `flash_attn_func` (`flash_attn_varlen_func` for the documents, packed as one "
                 "sequence), FlexAttention compiled with its BlockMask made outside the time. Median of %d steps "
                 "after a warm-up, the L2 flushed before each, the columns in turn over %d rounds. TFLOP/s: 4 × "
                 "head_dim FLOPs per unmasked (query, key) pair, × 3.5. Measured on %s; %s." % (
                     d["dtype"], d["heads"], d["iters"], d["repeats"], torch_provenance(d),
                     link(res, "torch_flex_steps.json")))
    return out + "\n\n" + " ".join(notes)


@generator("torch-fp8")
def gen_torch_fp8(ctx, gpu=None):
    """FP8 through the package (bench/pytorch/torch_fp8.py, torch_fp8.json): per shape flash_attn_func on
    e4m3 tensors (rung 13, V's transpose included), rung 13's launch alone, fp8_quantize of q, k, v, the
    same call on the bf16 originals and SDPA's cuDNN backend; the ratios (time of the other / the FP8
    call's); the worst and best cell of each."""
    res, d = torch_run(ctx, gpu, "torch_fp8.json")
    rows, vs_bf16, vs_cudnn = [], [], []

    def cell(r, name):
        return "%.3f" % r["ms"][name] if name in r["ms"] else "refused"

    for r in d["rows"]:
        s = r["shape"]
        what = "d=%d, N=%s%s" % (s["head_dim"], results_io.seqlen_text(s["seqlen"]), " causal" if s["causal"] else "")
        if "bf16_over_fp8" in r:
            vs_bf16.append((r["bf16_over_fp8"], what))
        if "cudnn_over_fp8" in r:
            vs_cudnn.append((r["cudnn_over_fp8"], what))
        rows.append(["%d" % s["head_dim"], "%d × %s, %d heads" % (s["batch"], results_io.seqlen_text(s["seqlen"]),
                                                                  s["heads"]),
                     "yes" if s["causal"] else "no", cell(r, "fp8"),
                     "%.0f" % r["tflops"]["fp8"] if "fp8" in r["tflops"] else "—", cell(r, "fp8_kernel"),
                     cell(r, "quantize"), cell(r, "bf16"), cell(r, "cudnn"),
                     results_io.fmt_ratio(r["bf16_over_fp8"]) if "bf16_over_fp8" in r else "—",
                     results_io.fmt_ratio(r["cudnn_over_fp8"]) if "cudnn_over_fp8" in r else "—"])
    head = ["head_dim", "batch × seqlen", "causal", "FP8 call, ms", "TFLOP/s", "rung 13 alone, ms",
            "fp8_quantize q, k, v, ms", "bf16 call, ms", "SDPA cuDNN bf16, ms", "bf16 / FP8", "cuDNN / FP8"]
    out = results_io.markdown_table(head, rows, ["---"] * 3 + ["--:"] * 8)
    notes = []
    for name, xs in (("the bf16 call", vs_bf16), ("SDPA's cuDNN (bf16)", vs_cudnn)):
        if xs:
            lo, hi = min(xs), max(xs)
            notes.append("Against %s: worst %s (%s), best %s (%s)." % (name, results_io.fmt_ratio(lo[0]), lo[1],
                                                                      results_io.fmt_ratio(hi[0]), hi[1]))
    notes.append("The FP8 call is `flash_attn_func` on float8_e4m3fn q, k, v with their descales, as a user calls "
                 "it (rung 13 and V's transpose into the layout it reads); *rung 13 alone* is its launch on a "
                 "V^T made once; *fp8_quantize* makes the three e4m3 tensors and descales from bf16 (once per "
                 "tensor, not part of the attention's time). TFLOP/s of the FP8 call, 4 × head_dim FLOPs per "
                 "unmasked (query, key) pair. Median of %d calls after a warm-up, the L2 flushed before each, "
                 "the columns in turn over %d rounds. Measured on %s; %s." % (
                     d["iters"], d["repeats"], torch_provenance(d), link(res, "torch_fp8.json")))
    return out + "\n\n" + " ".join(notes)


CUDNN_FP8_COLUMNS = (("cudnn_fp8_fwd", "cuDNN FP8 fwd"), ("ladder_fp8_fwd", "rung 13 fwd"),
                     ("cudnn_fwd", "cuDNN bf16 fwd"), ("cudnn_fp8_bwd", "cuDNN FP8 bwd"),
                     ("ladder_bwd", "rung 14 bwd (bf16)"), ("cudnn_bwd", "cuDNN bf16 bwd"))


@generator("cudnn-fp8")
def gen_cudnn_fp8(ctx, gpu=None):
    """cuDNN's FP8 attention through its Python frontend beside the ladder (bench/pytorch/cudnn_fp8.py,
    cudnn_fp8.json): per shape the six columns' ms ("—" where cuDNN does not take the graph, its
    reason below), the backward ratios rung 18 is measured against (rung 14's bf16 backward over
    cuDNN's FP8 one: what an FP8 backward gains there), and the error block."""
    res, d = torch_run(ctx, gpu, "cudnn_fp8.json")
    rows, gains, reasons = [], [], {}
    for r in d["rows"]:
        s = r["shape"]
        ms = r["ms"]
        for name, why in r.get("refused", {}).items():
            reasons.setdefault(why, set()).add(s["head_dim"])
        gain = ms["ladder_bwd"] / ms["cudnn_fp8_bwd"] if "ladder_bwd" in ms and "cudnn_fp8_bwd" in ms else None
        what = "d=%d, N=%s%s" % (s["head_dim"], results_io.seqlen_text(s["seqlen"]), " causal" if s["causal"] else "")
        if gain:
            gains.append((gain, what))
        rows.append(["%d" % s["head_dim"], "%d × %s, %d heads" % (s["batch"], results_io.seqlen_text(s["seqlen"]),
                                                                  s["heads"]), "yes" if s["causal"] else "no"]
                    + ["%.3f" % ms[c] if c in ms else "—" for c, _ in CUDNN_FP8_COLUMNS]
                    + [results_io.fmt_ratio(gain) if gain else "—"])
    head = ["head_dim", "batch × seqlen", "causal"] + ["%s, ms" % label for _, label in CUDNN_FP8_COLUMNS] + [
        "rung 14 / cuDNN FP8 bwd"]
    out = results_io.markdown_table(head, rows, ["---"] * 3 + ["--:"] * (len(CUDNN_FP8_COLUMNS) + 1))
    notes = []
    if gains:
        lo, hi = min(gains), max(gains)
        notes.append("cuDNN's FP8 backward against rung 14's bf16 one: %s (%s) to %s (%s)." % (
            results_io.fmt_ratio(lo[0]), lo[1], results_io.fmt_ratio(hi[0]), hi[1]))
    for why, dims in sorted(reasons.items()):
        notes.append("Not taken by cuDNN at head_dim %s: \"%s\"." % (
            ", ".join("%d" % x for x in sorted(dims)), why.replace("|", "\\|")))
    errs = [e for e in d.get("errors", []) if "cudnn_fp8_held" in e]
    for e in errs:
        held, e2e, lad = e["cudnn_fp8_held"], e["cudnn_fp8_end_to_end"], e["ladder_bf16"]
        notes.append("Error at d=%d (batch 1, %s tokens, %d heads, causal), relative Frobenius against fp64: cuDNN's "
                     "FP8 dQ, dK, dV %.1e, %.1e, %.1e on the values its e4m3 inputs hold, %.1e, %.1e, %.1e against "
                     "the bf16 originals; rung 14's bf16 gradients %.1e, %.1e, %.1e." % (
                         e["head_dim"], results_io.seqlen_text(e["seqlen"]), e["heads"], held["dQ"], held["dK"],
                         held["dV"], e2e["dQ"], e2e["dK"], e2e["dV"], lad["dQ"], lad["dK"], lad["dV"]))
    kinds = sorted({"O %s, gradients %s" % (r["cudnn_notes"].get("o"), r["cudnn_notes"].get("grads"))
                    for r in d["rows"] if r.get("cudnn_notes") and "cudnn_fp8_bwd" in r["ms"]})
    notes.append("cuDNN %s through %s: e4m3 q, k, v (and dO) with one descale per tensor, P scaled by %g%s; the "
                 "ladder's FP8 forward is `flash_attn_func` on `fp8_quantize`'s e4m3 tensors (per-head descales, bf16 "
                 "O), its backward `flashladder.attention_backward` on the bf16 originals (rung 14); cuDNN bf16 is "
                 "SDPA with the cuDNN backend forced, its backward alone by autograd.grad. Median of %d calls, the "
                 "L2 flushed before each, the columns in turn over %d rounds. Measured on %s; %s." % (
                     d["versions"].get("cudnn", "?"), d["versions"].get("cudnn_frontend", "its frontend"),
                     d.get("p_scale", 256.0), "; cuDNN's graphs as taken: " + "; ".join(kinds) if kinds else "",
                     d["iters"], d["repeats"], torch_provenance(d), link(res, "cudnn_fp8.json")))
    return out + "\n\n" + " ".join(notes)


@generator("torch-decode")
def gen_torch_decode(ctx, gpu=None):
    """Decode through the package (bench/pytorch/torch_decode.py, torch_decode.json): per shape the rung the
    route picked, its time and GB/s, rung 08 and the prefill rung called by number, SDPA's cuDNN and
    flash backends, and the route against cuDNN; the worst and best cell and the bench goal."""
    res, d = torch_run(ctx, gpu, "torch_decode.json")
    rows, ratios = [], []

    def cell(r, name):
        return "%.4f" % r["ms"][name] if name in r["ms"] else "refused"

    for r in d["rows"]:
        s = r["shape"]
        vs = r.get("route_vs_cudnn")
        if vs:
            ratios.append((vs, s))
        flash = r["ms"].get("flash")
        rows.append([s["dtype"], "%d, %d/%d" % (s["batch"], s["heads_q"], s["heads_kv"]),
                     "%d" % s["seqlen_q"] + (" causal" if s["causal"] else ""), results_io.seqlen_text(s["seqlen_k"]),
                     "`%s`" % r["route"], cell(r, "route"),
                     "%.0f" % r["gbps"]["route"] if "route" in r.get("gbps", {}) else "—",
                     cell(r, "rung08"), cell(r, "prefill"), cell(r, "cudnn"), cell(r, "flash"),
                     results_io.fmt_ratio(vs) if vs else "—",
                     results_io.fmt_ratio(flash / r["ms"]["route"]) if flash and "route" in r["ms"] else "—"])
        if "kvcache" in d["rows"][0]["ms"]:  # flash_attn_with_kvcache's columns (runs that have them)
            rows[-1] += [cell(r, "kvcache"), results_io.fmt_ratio(r["kvcache_vs_cudnn"]) if "kvcache_vs_cudnn" in r else "—",
                         cell(r, "paged"),
                         results_io.fmt_ratio(r["paged_vs_contiguous"]) if "paged_vs_contiguous" in r else "—"]
    head = ["dtype", "B, heads q/kv", "seqlen_q", "seqlen_k", "route", "route ms", "GB/s", "rung 08 ms",
            "`%s` ms" % d["prefill_rung"], "cuDNN ms", "flash ms", "cuDNN / route", "flash / route"]
    if "kvcache" in d["rows"][0]["ms"]:
        head += ["with_kvcache ms", "cuDNN / with_kvcache", "paged ms", "contiguous / paged"]
    out = results_io.markdown_table(head, rows, ["---", "---", "--:", "--:", "---"] + ["--:"] * (len(head) - 5))
    notes = []
    if ratios:
        lo, hi = min(ratios, key=lambda x: x[0]), max(ratios, key=lambda x: x[0])

        def where(sh):
            return "%s B=%d %d/%d seqlen_q %d, %s keys" % (sh["dtype"], sh["batch"], sh["heads_q"], sh["heads_kv"],
                                                          sh["seqlen_q"], results_io.seqlen_text(sh["seqlen_k"]))

        notes.append("The route against cuDNN: worst %s (%s), best %s (%s). Goal: at least %.2f× cuDNN for a decode step "
                     "at 64k and 128k keys: **%s**." % (results_io.fmt_ratio(lo[0]), where(lo[1]), results_io.fmt_ratio(hi[0]),
                                                        where(hi[1]), d["target_vs_cudnn"],
                                                        "met" if d["target_met"] else "not met"))
    if "kvcache_target_met" in d:
        kv = [r["kvcache_vs_cudnn"] for r in d["rows"] if "kvcache_vs_cudnn" in r and r["shape"]["seqlen_q"] == 1
              and r["shape"]["seqlen_k"] in (65536, 131072)]
        paged = [(r["paged_vs_contiguous"], r["shape"]) for r in d["rows"] if "paged_vs_contiguous" in r]
        big = [x for x, sh in paged if sh["seqlen_q"] == 1 and sh["seqlen_k"] in (65536, 131072)]
        lo = min(paged, key=lambda x: x[0])
        notes.append("`flash_attn_with_kvcache` (the same cache, its lengths per sequence on the device) against cuDNN "
                     "for a decode step at 64k and 128k keys: %s–%s (goal %.2f×: **%s**). Paged (pages of %d, "
                     "shuffled in a pool) against contiguous: %s–%s at 64k and 128k keys, %s–%s over the whole grid, "
                     "the worst %s (goal %.2f× on every cell: **%s**)." % (
                         results_io.fmt_ratio(min(kv)), results_io.fmt_ratio(max(kv)), d["target_vs_cudnn"],
                         "met" if d["kvcache_target_met"] else "not met", d["page"], results_io.fmt_ratio(min(big)),
                         results_io.fmt_ratio(max(big)), results_io.fmt_ratio(lo[0]),
                         results_io.fmt_ratio(max(x for x, _ in paged)), where(lo[1]), d["paged_target"],
                         "met" if d["paged_target_met"] else "not met"))
    notes.append("head_dim %d; each figure the median of %d repeats (the columns in a rotating order) of the median "
                 "of %d calls, each timed with CUDA events after a %s flush of the L2, long enough that the host's work "
                 "of either library's call is queued under it: the GPU time of the call's kernels, the same way for "
                 "every column; GB/s counts K and V read once. Measured on %s; %s." % (
                     d["head_dim"], d.get("repeats", 1), d["iters"], binary_bytes(d.get("flush_bytes", 0)),
                     torch_provenance(d), link(res, "torch_decode.json")))
    return out + "\n\n" + "\n\n".join(notes)


FA_KINDS = ("passed", "failed", "refused", "internal", "skipped")


@generator("fa-tests")
def gen_fa_tests(ctx, gpu=None):
    """FlashAttention 2's own test file on the package (bench/studies/fa_tests/run.py, fa_tests.json):
    per test function its sampled cases by outcome, the share of the cases not skipped that ran
    and of those that passed, and the most frequent refusals."""
    res, d = torch_run(ctx, gpu, "fa_tests.json")
    rows = ["| test | cases | %s |" % " | ".join(FA_KINDS), "|---|--:|%s" % "".join("--:|" for _ in FA_KINDS)]
    for name, counts in sorted(d["per_test"].items()):
        n = sum(v for k, v in counts.items() if k != "not_reached")
        rows.append("| `%s` | %d | %s |" % (name, n, " | ".join("%d" % counts.get(k, 0) for k in FA_KINDS)))
    t = d["total"]
    rows.append("| all | %d | %s |" % (d["cases"], " | ".join("**%d**" % t.get(k, 0) for k in FA_KINDS)))
    share = "%.1f%%" % (100 * d["ran_share"]) if d["ran_share"] is not None else "—"
    passed = "%.1f%%" % (100 * d["passed_share_of_ran"]) if d["passed_share_of_ran"] is not None else "—"
    notes = ["Of the %d sampled cases FlashAttention does not skip, %d ran on the ladder (**%s**; the issue's target "
             "is 95%%), and %s of those passed. Refused: flashladder's one-line refusal of an argument or shape; "
             "internal: the test calls FlashAttention's C++ extension itself. Sample %s of the file's cases (the "
             "same on every run: a hash of each case's id)%s." % (
                 d["not_skipped"], d["ran"], share, passed, d["sample"],
                 ", %d left unrun by the time budget" % d["not_reached"] if d.get("not_reached") else "")]
    if d["refusals"]:
        # A refusal names the shape, then each rung's reason in brackets: group by what comes
        # before the reasons, and give the reasons once, for the most frequent group.
        heads = {}
        for text, n in d["refusals"]:
            head = text.split(" (")[0]
            heads.setdefault(head, [0, text])[0] += n
        ranked = sorted(heads.items(), key=lambda kv: -kv[1][0])
        notes.append("The refusals, most frequent first: " + "; ".join(
            "%d × %s" % (n, head.replace("|", "\\|")) for head, (n, _) in ranked[:6]) + ".")
        first_head, (_, first_text) = ranked[0]
        if first_text != first_head:
            notes.append("The first in full: %s." % first_text.replace("|", "\\|"))
    if d["failures_total"]:
        notes.append("%d failed; the first: `%s` (%s)." % (d["failures_total"], d["failures"][0]["case"],
                                                          d["failures"][0]["error"].replace("|", "\\|")))
    notes.append("Test file: `%s`%s. Measured on %s; %s." % (
        d["tests_file"], " (%s)" % d["tests_source"] if d.get("tests_source") else "", torch_provenance(d),
        link(res, "fa_tests.json")))
    return "\n".join(rows) + "\n\n" + "\n\n".join(notes)
