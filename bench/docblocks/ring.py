"""Rung 12's blocks (ring attention): on one GPU (the ring through the launcher and replayed with
--replay), on one shared GPU (--share-gpu: the NCCL path's checks), on P GPUs (times, steps and the
NCCL ablation). The reports are read by bench/results_io.py: ring_runs, torch_ring_runs, ring_ablation_run."""

import results_io
from .core import PRIMARY, Missing, binary_bytes, generator, ints, link, ms, results_folder


# ---- rung 12 on one GPU (bench/run_ring.sh --gpus 1 --replay "2 4 8") -------------------------------

RING_ONE_GPU_COMMAND = ('bench/run_ring.sh --gpus 1 --replay "2 4 8" --no-torch '
                        '--results bench/results/<gpu>/ring-1gpu')


def ring_hidden(j):
    """The share of the communication the ring hid, on its worst rank: 1 - (time the compute
    stream waited for shards) / (time the transfers took); None without transfers."""
    st = j["steps_ms"]
    shares = [1.0 - sum(e) / sum(t) for e, t in zip(st["exposed_comm"], st["transfer"]) if sum(t) > 0]
    return min(shares) if shares else None


def ring_provenance(res):
    """ "Measured on <device>, <date>, commit `<sha>`; files <folder link>." of a ring folder."""
    m = res.meta
    return "Measured on %s, %s, commit `%s`; files %s." % (
        m.get("device", "?"), str(m.get("date", "?"))[:10], m.get("git_sha", "?"),
        link(res, "", "`%s`" % res.rel("")))


@generator("ring-one-gpu")
def gen_ring_one_gpu(ctx, gpu=None, n="65536,131072", ranks="1,2,4,8"):
    """Rung 12 on one GPU (folder <gpu>/ring-1gpu): per length, mask, sharding and ring size P the
    single-GPU rung's time T1, the ring's time (P = 1: the degenerate ring through the launcher; P > 1:
    the slowest rank's pass of the ring replayed with --replay, each rank alone on the GPU: the ring's
    time if every transfer hid), T1 / (P x that time) (P = 1: the measured scaling efficiency; P > 1:
    its compute bound), the slowest rank's merges, the plan's work imbalance and the checks."""
    folder = gpu or PRIMARY + "/ring-1gpu"
    res = results_folder(ctx, folder, "rung 12's one-GPU runs", RING_ONE_GPU_COMMAND)
    runs = results_io.ring_runs(res.dir)
    if not runs:
        raise Missing("rung 12's reports in bench/results/%s" % folder, RING_ONE_GPU_COMMAND)
    rows, shape = [], None
    for nn in ints(n):
        for c in (1, 0):
            for v in (("zigzag", "contiguous") if c else ("zigzag",)):
                for P in ints(ranks):
                    j = runs.get(("ring" if P == 1 else "replay", P, nn, c, v))
                    if j is None:
                        continue
                    t, st = j["timing"], j["steps_ms"]
                    one = t["single_median_ms"]
                    mine = t["ring_median_ms"] if P == 1 else t["slowest_rank_median_ms"]
                    eff = t["scaling_efficiency"] if P == 1 else t["compute_bound_efficiency"]
                    merge = max(sum(m) for m in st["merge"]) if st["merge"] else None
                    ok = j["check"]["pass"] and j["single"]["ran"] and j["single"]["ring_vs_single_pass"]
                    pr = j["problem"]
                    shape = "batch %d, %d heads, head_dim %d, %s" % (pr["batch"], pr["heads_q"], pr["head_dim"],
                                                                   pr["dtype"])
                    rows.append([results_io.seqlen_text(nn), "yes" if c else "no", v, str(P), ms(one),
                                 ms(mine) + ("" if P == 1 else " (replay)"), "**%.3f**" % eff, ms(merge),
                                 "%.3f" % j["imbalance"],
                                 "%s (%.2g)" % ("pass" if ok else "FAIL", j["single"]["ring_vs_single_max_abs"])])
    if not rows:
        raise Missing("rung 12's reports at n=%s in bench/results/%s" % (n, folder), RING_ONE_GPU_COMMAND)
    any_run = runs[next(iter(runs))]
    head = ["N", "causal", "sharding", "P", "one GPU (T1)", "ring: the slowest rank", "T1 / (P × ring)",
            "its merges", "work max/mean", "checks (ring vs one GPU, max abs)"]
    return results_io.markdown_table(head, rows, ["--:", "---", "---", "--:", "--:", "--:", "--:", "--:", "--:", "---"]) + (
        "\n\n%s; forward rung `%s` in every step and for T1; medians of %d timed passes. P = 1 is the ring "
        "itself through the launcher (its T1 / (P × ring) is the measured scaling efficiency of one GPU); "
        "P > 1 is the ring replayed on one GPU (`--replay P`): every rank's steps, launches and merges as "
        "on P GPUs, each rank's pass timed alone, no transfer, so T1 / (P × ring) is the compute bound of "
        "the scaling efficiency, the value P GPUs reach if every transfer hides and NCCL takes nothing from "
        "the compute. Checks: the fp64 reference on sampled rows and the single-GPU rung on every element. "
        "%s" % (shape, any_run["forward_rung"], any_run["timing"]["iters"], ring_provenance(res)))


@generator("ring-steps")
def gen_ring_steps(ctx, gpu=None, n="65536,131072", ranks="2,4,8", variant="zigzag"):
    """The steps of the replayed rings (<gpu>/ring-1gpu, --replay P): per length, mask and P the
    shard length N/P, the slowest rank's compute at step 0 (its own shard) and at a later step
    (median of steps 1..P-1), the forward rung's rate on a later step's problem, the merge per step,
    the K/V bytes a rank sends per step and the link bandwidth per direction at which that transfer
    takes exactly a later step's compute (above it, the transfer can hide)."""
    folder = gpu or PRIMARY + "/ring-1gpu"
    res = results_folder(ctx, folder, "rung 12's one-GPU runs", RING_ONE_GPU_COMMAND)
    runs = results_io.ring_runs(res.dir)
    rows = []
    for nn in ints(n):
        for c in (1, 0):
            for P in ints(ranks):
                j = runs.get(("replay", P, nn, c, variant))
                if j is None:
                    continue
                pr, st = j["problem"], j["steps_ms"]
                slow = max(range(P), key=lambda r: sum(st["compute"][r]) + sum(st["merge"][r]))
                comp, merge = st["compute"][slow], st["merge"][slow]
                later = sorted(comp[1:])[(P - 1) // 2]
                shard = nn // P
                # (query, key) pairs of a later step per (batch, head): zigzag causal computes half
                # the N/P x N/P pairs of an unmasked step (and N is a multiple of 2P here).
                pairs = shard * shard // (2 if c else 1)
                rate = 4.0 * pr["batch"] * pr["heads_q"] * pr["head_dim"] * pairs / (later * 1e-3) / 1e12
                sent = j["send_bytes_per_step"][0]
                rows.append([results_io.seqlen_text(nn), "yes" if c else "no", str(P), results_io.seqlen_text(shard),
                             ms(comp[0]), ms(later), results_io.fmt_value(rate), ms(sum(merge) / P),
                             binary_bytes(sent), "%.0f GB/s" % (sent / (later * 1e-3) / 1e9)])
    if not rows:
        raise Missing("replayed rings (--replay) in bench/results/%s" % folder, RING_ONE_GPU_COMMAND)
    head = ["N", "causal", "P", "N/P", "step 0", "a later step", "its TFLOP/s", "merge per step",
            "K/V sent per step", "hidden if the link gives ≥"]
    return results_io.markdown_table(head, rows, ["--:", "---", "--:", "--:", "--:", "--:", "--:", "--:", "--:", "--:"]) + (
        "\n\n%s sharding; the slowest rank of each replayed ring (`--replay P`, each rank alone on the GPU); "
        "a later step: the median of steps 1 … P−1. The last column is the K/V bytes of a step over a later "
        "step's compute: the bandwidth per direction a link needs for the transfer to take no longer than the "
        "compute it runs under (NCCL's own use of the SMs aside). %s" % (variant, ring_provenance(res)))


RING_SHARED_COMMAND = 'bench/run_ring.sh --share "2 4" --results bench/results/<gpu>/ring-shared'


@generator("ring-shared")
def gen_ring_shared(ctx, gpu=None, n="65536,131072", ranks="2,4"):
    """The ring's NCCL path on one GPU (<gpu>/ring-shared, launch_ring.py --share-gpu): per length,
    mask, sharding and P the checks of the gathered output (the fp64 reference on sampled rows, the
    single-GPU rung on every element), the K/V bytes each rank sent through NCCL and, on the zigzag
    rows, PyTorch's all-gather baseline run the same way (torch_shared_p<P>_n<N>_causal<c>.json:
    its gathered output against one-GPU SDPA). No times: the ranks time-share the GPU."""
    folder = gpu or PRIMARY + "/ring-shared"
    res = results_folder(ctx, folder, "rung 12's rings on one shared GPU", RING_SHARED_COMMAND)
    runs = results_io.ring_runs(res.dir)
    torch_runs = results_io.torch_ring_runs(res.dir, "torch_shared_p")
    rows = []
    for nn in ints(n):
        for c in (1, 0):
            for v in (("zigzag", "contiguous") if c else ("zigzag",)):
                for P in ints(ranks):
                    j = runs.get(("shared", P, nn, c, v))
                    t = torch_runs.get((P, nn, c)) if v == "zigzag" else None
                    if j is None:
                        continue
                    ck, single = j["check"], j["single"]
                    rows.append([results_io.seqlen_text(nn), "yes" if c else "no", v, str(P),
                                 "%s (%d rows, max abs %.2g, tol %.2g)" % (
                                     "pass" if ck["pass"] else "FAIL", ck["rows"], ck["max_abs"], ck["tol_max_abs"]),
                                 "%s (max abs %.2g)" % ("pass" if single["ran"] and single["ring_vs_single_pass"]
                                                        else "FAIL", single["ring_vs_single_max_abs"]),
                                 binary_bytes(sum(j["send_bytes_per_step"])),
                                 "max abs %.2g" % t["max_abs_vs_single_gpu"] if t else "—"])
    if not rows:
        raise Missing("rings on one shared GPU (--share-gpu) in bench/results/%s" % folder, RING_SHARED_COMMAND)
    any_run = runs[next(k for k in runs if k[0] == "shared")]
    pr = any_run["problem"]
    head = ["N", "causal", "sharding", "P", "gathered O vs fp64 (sampled rows)", "vs the single-GPU rung",
            "K/V each rank sent", "PyTorch baseline vs one-GPU SDPA"]
    torch_note = ""
    if torch_runs:
        t = next(iter(torch_runs.values()))
        torch_note = (" PyTorch's baseline (`bench/pytorch/torch_ring_baseline.py --share-gpu` under torchrun: all-gather K/V, "
                      "SDPA on the zigzag query shard) ran the same way on PyTorch %s, NCCL %s; its gathered output is "
                      "compared with SDPA on the whole sequence on one GPU." % (t["torch"], t["nccl"]))
    return results_io.markdown_table(head, rows, ["--:", "---", "---", "--:", "---", "---", "--:", "---"]) + (
        "\n\nbatch %d, %d heads, head_dim %d, %s; forward rung `%s`; NCCL %s. P processes on one GPU "
        "(`launch_ring.py --share-gpu`), each its own NCCL host, so every shard crossed NCCL's socket transport "
        "on loopback; the ranks time-share the GPU, so no time is reported.%s %s" % (
            pr["batch"], pr["heads_q"], pr["head_dim"], pr["dtype"], any_run["forward_rung"], any_run["nccl"],
            torch_note, ring_provenance(res)))


# ---- rung 12 on P GPUs (bench/run_ring.sh --gpus 2 on a two-GPU machine) ---------------------------

RING_GPUS_COMMAND = 'bench/run_ring.sh --gpus 2 --results bench/results/<gpu>-x2/ring'


def ring_gpu_rows(runs, n, gpus):
    """(N, causal, sharding, P, report) of the rings on P GPUs in @p runs (results_io.ring_runs), in the tables'
    order: by length, causal first, zigzag first, by P."""
    for nn in ints(n):
        for c in (1, 0):
            for v in ("zigzag", "contiguous"):
                for P in ints(gpus):
                    j = runs.get(("ring", P, nn, c, v))
                    if j is not None:
                        yield nn, c, v, P, j


@generator("ring-gpus")
def gen_ring_gpus(ctx, gpu="nvidia-h200-x2/ring", n="65536,131072", gpus="2"):
    """Rung 12 on P GPUs: per length, mask and sharding the single-GPU rung's time T1 (rank 0, same
    run), the ring's time, the scaling efficiency T1 / (P x ring), the share of the communication
    hidden under the compute (worst rank), and, on the zigzag rows, PyTorch's all-gather baseline from
    the same run (one-GPU SDPA, all-gather + SDPA on P GPUs, its efficiency); the checks."""
    res = results_folder(ctx, gpu, "rung 12's runs on P GPUs", RING_GPUS_COMMAND)
    runs = results_io.ring_runs(res.dir)
    torch_runs = results_io.torch_ring_runs(res.dir, "torch_ring_p")
    rows, any_run = [], None
    for nn, c, v, P, j in ring_gpu_rows(runs, n, gpus):
        any_run = j
        t = j["timing"]
        tr = torch_runs.get((P, nn, c)) if v == "zigzag" else None
        ok = j["check"]["pass"] and j["single"]["ran"] and j["single"]["ring_vs_single_pass"]
        hidden = ring_hidden(j)
        rows.append([results_io.seqlen_text(nn), "yes" if c else "no", v, str(P), ms(t["single_median_ms"]),
                     ms(t["ring_median_ms"]), "**%.3f**" % t["scaling_efficiency"],
                     "—" if hidden is None else "%.1f %%" % (100 * hidden),
                     ms(tr["single_gpu_ms"]) if tr else "—", ms(tr["total_ms"]) if tr else "—",
                     "%.3f" % tr["scaling_efficiency"] if tr else "—",
                     "%s (%.2g)" % ("pass" if ok else "FAIL", j["single"]["ring_vs_single_max_abs"])])
    if not rows:
        raise Missing("rung 12's runs on P GPUs in bench/results/%s" % gpu, RING_GPUS_COMMAND)
    pr = any_run["problem"]
    tr = next(iter(torch_runs.values()), None)
    head = ["N", "causal", "sharding", "P", "one GPU (T1)", "ring", "T1 / (P × ring)", "communication hidden",
            "PyTorch: one GPU", "PyTorch: all-gather + SDPA", "PyTorch: T1 / (P × that)",
            "checks (ring vs one GPU, max abs)"]
    torch_text = ""
    if tr:
        torch_text = (" PyTorch %s (`bench/pytorch/torch_ring_baseline.py` under torchrun, NCCL %s): K and V all-gathered, then "
                      "SDPA on the zigzag query shard; its one-GPU time is SDPA with cuDNN on the whole sequence, and its "
                      "causal shards run on SDPA's flash / memory-efficient kernels (they take the lower-right mask, "
                      "cuDNN does not)." % (tr["torch"], tr["nccl"]))
    return results_io.markdown_table(head, rows, ["--:", "---", "---", "--:", "--:", "--:", "--:", "--:", "--:", "--:",
                                              "--:", "---"]) + (
        "\n\nbatch %d, %d heads, head_dim %d, %s; forward rung `%s` in every step and for T1 (rank 0, the whole sequence "
        "on one GPU, in the same run); NCCL %s, one process per GPU, `NCCL_NVLS_ENABLE=0`; medians of %d timed passes, "
        "each the slowest rank's. Communication hidden: 1 − (time the compute stream waited for a shard) / (time the "
        "transfers took), on the worst rank. Checks: the fp64 reference on sampled rows and the single-GPU rung on every "
        "element.%s %s" % (pr["batch"], pr["heads_q"], pr["head_dim"], pr["dtype"], any_run["forward_rung"],
                            any_run["nccl"], any_run["timing"]["iters"], torch_text, ring_provenance(res)))


@generator("ring-gpus-steps")
def gen_ring_gpus_steps(ctx, gpu="nvidia-h200-x2/ring", n="65536,131072", gpus="2"):
    """Each rank's steps in the runs on P GPUs: compute per step, the merges, the exposed communication
    and the transfer (the K/V bytes over the transfer's time), per length, mask and sharding."""
    res = results_folder(ctx, gpu, "rung 12's runs on P GPUs", RING_GPUS_COMMAND)
    runs = results_io.ring_runs(res.dir)
    rows = []
    for nn, c, v, P, j in ring_gpu_rows(runs, n, gpus):
        st = j["steps_ms"]
        for r in range(P):
            sent = sum(j["send_bytes_per_step"])
            moved = sum(st["transfer"][r][s] for s in range(P) if j["send_bytes_per_step"][s] > 0)
            rows.append([results_io.seqlen_text(nn), "yes" if c else "no", v, str(r),
                         " / ".join(ms(x) for x in st["compute"][r]), ms(sum(st["merge"][r])),
                         ms(sum(st["exposed_comm"][r])), ms(moved),
                         "%.0f GB/s" % (sent / (moved * 1e-3) / 1e9) if moved > 0 else "—"])
    if not rows:
        raise Missing("rung 12's runs on P GPUs in bench/results/%s" % gpu, RING_GPUS_COMMAND)
    head = ["N", "causal", "sharding", "rank", "compute per step", "merges", "exposed communication",
            "transfer", "K/V bytes / transfer time"]
    return results_io.markdown_table(head, rows, ["--:", "---", "---", "--:", "--:", "--:", "--:", "--:", "--:"]) + (
        "\n\nMedians over the timed passes, per rank. The transfer runs on its own stream under the step's compute; "
        "its time is from its launch to the shard's arrival, so the last column is the rate the transfer got while "
        "the compute ran, not the link's. %s" % ring_provenance(res))


RING_ABLATION_SETTINGS = (("default", "NCCL's default (P2P over NVLink, one CTA per channel)"),
                          ("ch1", "`NCCL_MAX_P2P_NCHANNELS=1` (one channel)"),
                          ("ce", "`NCCL_P2P_USE_CUDA_MEMCPY=1` (copy engines)"))


@generator("ring-gpus-ablation")
def gen_ring_gpus_ablation(ctx, gpu="nvidia-h200-x2/ring-nccl-ablation"):
    """How NCCL moves the shards (<gpu>-x2/ring-nccl-ablation, ring_p2_n<N>_zigzag_causal<c>_<setting>.json):
    per mask and setting the ring's time, T1 and the efficiency, each rank's compute at step 0 (under
    the transfer) and step 1, the exposed communication and the transfer (worst rank); a setting whose
    run left no report is listed as such."""
    res = results_folder(ctx, gpu, "the NCCL ablation on two GPUs", "see bench/results/%s/meta.json" % gpu)
    rows, n = [], None
    for c in (0, 1):
        for tag, label in RING_ABLATION_SETTINGS:
            ran, j = results_io.ring_ablation_run(res.dir, c, tag)
            if j is None:
                if ran:
                    rows.append(["yes" if c else "no", label, "did not finish its first pass in the time given "
                                 "(stopped, no report)", "", "", "", "", "", ""])
                continue
            t, st = j["timing"], j["steps_ms"]
            n = j["problem"]["seqlen"]
            rows.append(["yes" if c else "no", label, ms(t["ring_median_ms"]), ms(t["single_median_ms"]),
                         "**%.3f**" % t["scaling_efficiency"], " / ".join(ms(r[0]) for r in st["compute"]),
                         " / ".join(ms(r[1]) for r in st["compute"]),
                         ms(max(sum(e) for e in st["exposed_comm"])), ms(max(r[0] for r in st["transfer"]))])
    if not rows:
        raise Missing("the NCCL ablation in bench/results/%s" % gpu, "see its meta.json")
    head = ["causal", "how NCCL moves the shards", "ring", "one GPU (T1)", "T1 / (2 × ring)",
            "step 0 compute, rank 0 / 1", "step 1 compute, rank 0 / 1", "exposed communication", "transfer"]
    return results_io.markdown_table(head, rows, ["---", "---", "--:", "--:", "--:", "--:", "--:", "--:", "--:"]) + (
        "\n\n%s tokens, zigzag, otherwise as above; one run per setting, in turn, medians of 20 passes. Exposed "
        "communication and transfer: the worst rank's. %s" % (results_io.seqlen_text(n) if n else "?",
                                                               ring_provenance(res)))


# ---- rung 12's backward on P GPUs (bench/run_ring.sh --backward) -------------------------------------

RING_BACKWARD_COMMAND = ('bench/run_ring.sh --backward --gpus "1 2 4" --seqlens "65536 131072 262144" '
                         '--single-p1 0 --results bench/results/<gpu>/ring-backward')


@generator("ring-backward")
def gen_ring_backward(ctx, gpu=None, n="65536,131072,262144", gpus="2,4"):
    """Rung 12 forward + backward on P GPUs: per length, mask, sharding and P the one-GPU times T1 (the
    ring of one from the same folder where there is one: the same kernels and D rule on one GPU; else
    the forward rung and the backward rung's own entry on the whole sequence, rank 0, same run), the
    ring's forward and forward + backward, both scaling efficiencies, the share of the backward's
    communication hidden, PyTorch's context_parallel forward + backward beside the zigzag rows (its
    one-GPU time, its P-GPU time, its efficiency, and the ring's speed over it), and the checks of O
    and of dQ, dK, dV."""
    folder = gpu or PRIMARY + "/ring-backward"
    res = results_folder(ctx, folder, "rung 12's forward + backward runs", RING_BACKWARD_COMMAND)
    runs = results_io.ring_runs(res.dir)
    cp = results_io.torch_cp_runs(res.dir)
    rows, any_run = [], None
    for nn, c, v, P, j in ring_gpu_rows(runs, n, gpus):
        b = j.get("backward")
        if not b:
            continue
        any_run = j
        t, bt = j["timing"], b["timing"]
        # T1: the ring of one (--single-p1 0) where the folder has it, else rank 0's single-GPU run.
        one = runs.get(("ring", 1, nn, c, v))
        if one is not None and one.get("backward"):
            t1_fwd, t1 = one["timing"]["ring_median_ms"], one["backward"]["timing"]["ring_fwd_bwd_median_ms"]
            t1_from = "ring of one" + ("" if one["backward"]["check"]["pass"] else "; its dQ check FAILS")
        else:
            t1_fwd, t1 = t.get("single_median_ms", 0), bt["single_fwd_bwd_median_ms"]
            t1_from = "own entries"
        eff = (lambda one_gpu, ring: one_gpu / (P * ring) if one_gpu and ring else 0)
        tc = cp.get((P, nn, c)) if v == "zigzag" else None
        steps = b["steps_ms"]
        shares = [1.0 - sum(e) / sum(x) for e, x in zip(steps.get("exposed_comm", []), steps.get("transfer", []))
                  if sum(x) > 0]
        # --single 0: O against fp64 only; with the single-GPU run, against that rung as well.
        ok_fwd = j["check"]["pass"] and (not j["single"]["ran"] or j["single"]["ring_vs_single_pass"])
        ok_bwd = b["check"]["pass"]
        ahead = ("%.2f×" % (tc["fwd_bwd_ms"] / bt["ring_fwd_bwd_median_ms"])) if tc and bt["ring_fwd_bwd_median_ms"] else "—"
        rows.append([results_io.seqlen_text(nn), "yes" if c else "no", v, str(P),
                     "%s (%s)" % (ms(t1), t1_from), ms(t["ring_median_ms"]), ms(bt["ring_fwd_bwd_median_ms"]),
                     "%.3f" % eff(t1_fwd, t["ring_median_ms"]),
                     "**%.3f**" % eff(t1, bt["ring_fwd_bwd_median_ms"]),
                     "%.1f %%" % (100 * min(shares)) if shares else "—",
                     ms(tc["single_fwd_bwd_ms"]) if tc else "—", ms(tc["fwd_bwd_ms"]) if tc else "—",
                     "%.3f" % tc["scaling_efficiency_fwd_bwd"] if tc and tc["scaling_efficiency_fwd_bwd"] else "—",
                     ahead, "%s, %s" % ("pass" if ok_fwd else "FAIL", "pass" if ok_bwd else "FAIL")])
    if not rows:
        raise Missing("rung 12's forward + backward runs in bench/results/%s" % folder, RING_BACKWARD_COMMAND)
    pr, b = any_run["problem"], any_run["backward"]
    tc = next(iter(cp.values()), None)
    head = ["N", "causal", "sharding", "P", "one GPU: fwd + bwd (T1)", "ring: fwd", "ring: fwd + bwd",
            "T1 / (P × ring): fwd", "fwd + bwd", "backward's communication hidden", "PyTorch CP: one GPU",
            "PyTorch CP: P GPUs", "PyTorch CP: T1 / (P × that)", "ring's speed over PyTorch CP", "checks: O, dQ/dK/dV"]
    torch_text = ""
    if tc:
        torch_text = (" PyTorch CP: `torch.distributed.tensor.experimental.context_parallel` (PyTorch %s, SDPA %s "
                      "inside its ring, K/V rotated by %s; `bench/pytorch/torch_cp_baseline.py` under torchrun), forward + "
                      "backward, its one-GPU time SDPA on the whole sequence with the same backend."
                      % (tc["torch"], tc["backend"], tc["rotate_method"]))
    caps = {}
    for nn, c, v, P, j in ring_gpu_rows(runs, n, gpus):
        if j.get("backward"):
            caps.setdefault(nn, set()).add(j["backward"].get("forward_key_cap", 0))
    cap_text = cut_text(caps)
    single_ran = any_run["single"]["ran"]
    t1_text = ("the ring of one (P = 1 through the launcher: the same kernels and D rule) where the folder has it, else "
               "the forward rung and `%s` (the backward rung's own entry, whose D on rows past 16k keys comes from an "
               "exact pass) on the whole sequence (rank 0, same run)" % b["single"]["rung"] if single_ran
               else "the ring of one (P = 1 through the launcher: the same kernels and D rule)")
    return results_io.markdown_table(head, rows, ["--:", "---", "---", "--:"] + ["--:"] * 10 + ["---"]) + (
        "\n\nbatch %d, %d heads, head_dim %d, %s; forward rung `%s` and backward rung `%s` in every step; the one-GPU "
        "time T1 is %s; %s; "
        "NCCL %s, one process per GPU, `NCCL_NVLS_ENABLE=0`; medians of %d timed passes, each the slowest rank's. "
        "Communication hidden: 1 − (time the compute stream waited for K/V and for the dK, dV sums) / (time the "
        "transfers took), on the worst rank. Checks: O against the fp64 reference on sampled rows%s; dQ, dK, dV "
        "against the fp64 backward reference (%s).%s %s" % (
            pr["batch"], pr["heads_q"], pr["head_dim"], pr["dtype"], any_run["forward_rung"], b["rung"],
            t1_text, cap_text, any_run["nccl"], any_run["timing"]["iters"],
            " and the single-GPU rung" if single_ran else "",
            bwd_check_text(b), torch_text, ring_provenance(res)))


def cut_text(caps):
    """How the forward's launches were cut (ring_plan.h's forward_key_cap), from {N: {caps of its runs}}."""
    if all(c <= {0} for c in caps.values()):
        return "the forward's launches uncut"
    return "the forward's launches cut to at most %s (`forward_key_cap`)" % ", ".join(
        "%s at %s" % ("/".join("%d keys" % k if k else "uncut" for k in sorted(caps[nn])), results_io.seqlen_text(nn))
        for nn in sorted(caps))


def bwd_check_text(b):
    """How the gradients of a backward report were compared, from its check's mode."""
    mode = b["check"].get("mode")
    if mode == "sample-rows":
        return ("sampled rows, every head: dQ's rows exact in fp64, dK's and dV's rows summed in fp64 over every query "
                "with P and D from the forward's LSE and O, where one (batch, KV head) group is too long for the whole "
                "reference")
    if mode == "sample":
        return "sampled (batch, KV head) groups"
    return "every group" if mode == "full" else "not compared"
