#!/usr/bin/env python3
"""Rung 16's tables for its README, from committed results folders:

  MASKS  one run of bench/run_all.sh --family masks (bf16, d = 128, 16 heads, 32k tokens): each
         mask and modifier's rate and time against the plain causal kernel on the same shape,
         against FlexAttention, and the two classification ablations; the sliding-window check
         (a window of w over 2w keys against causal over 2w);
  SWEEP  bench/rung16_sweep.sh (fp16 and bf16, d = 64 ... 256, 512 to 8k keys, GQA 4:1): rung 16's
         causal kernel against rung 15's, each modifier against rung 16's causal kernel, and
         head_dims 80 and 96 against 128;
  BACKWARD  one run of bench/run_all.sh --family masks-backward (the same shapes, the backward pass
         alone): rung 16's backward per case against its causal cell, FlexAttention's backward,
         rung 14 on the causal cells;
  BWD_SWEEP bench/rung16_bwd_sweep.sh: rung 16's backward against rung 14 (causal), each modifier
         against rung 16's causal backward, d = 96 against 128;
  ROUNDS the 32k causal forward cell, rungs 15 and 16 in alternating processes (n32k_<rung>_<i>.json,
         its meta.json has the command): each round's median and the fastest launch.

usage: python3 bench/rung16_tables.py MASKS SWEEP [BACKWARD BWD_SWEEP [ROUNDS]]
  e.g. python3 bench/rung16_tables.py bench/results/nvidia-h100-80gb-hbm3/rung16/masks-bf16 \\
           bench/results/nvidia-h100-80gb-hbm3/rung16/sweep
"""
import json
import os
import sys

CASES = ["causal", "window4096", "docs", "prefix2048", "softcap50", "alibi", "sinks"]
CASE_NAMES = {"causal": "causal", "window4096": "sliding window 4096 (causal)", "docs": "documents (causal within each)",
              "prefix2048": "prefix-LM (2048 keys)", "softcap50": "softcap 50 (causal)", "alibi": "ALiBi (causal)",
              "sinks": "attention sinks (causal)"}


def masks_times(folder):
    """{(rung, case, N): (ms, TFLOP/s)} of a masks-family folder."""
    out = {}
    for name in ("ladder_bench.json", "torch_flex.json"):
        path = os.path.join(folder, name)
        if not os.path.exists(path):
            continue
        for b in json.load(open(path))["benchmarks"]:
            if b.get("skipped"):
                continue
            parts = b["name"].replace("/iterations:1/manual_time", "").split("/")
            rung, case, n = parts[0], parts[3], int(parts[4][1:])
            out[rung, case, n] = (b["real_time"], b["TFLOPS"])
    return out


def fmt(x, digits=2):
    return "-" if x is None else ("%.*f" % (digits, x))


def case_cells(t, rung, case, n, flex="torch_flex"):
    """A masks-family row's common cells for @p rung: its TFLOP/s, its time and rate against its
    own causal cell at the same length, FlexAttention's TFLOP/s and FlexAttention's time over the
    rung's. Returns (cells, ms)."""
    ms, tf = t[rung, case, n]
    causal, fl = t.get((rung, "causal", n)), t.get((flex, case, n))
    return ["%s" % CASE_NAMES[case], "%dk" % (n // 1024), "%.0f" % tf,
            fmt(ms / causal[0]) if causal else "-", fmt(tf / causal[1]) if causal else "-",
            "%.0f" % fl[1] if fl else "-", fmt(fl[0] / ms) + "×" if fl else "-"], ms


def measured(t, rung):
    """The (case, N) cells of the masks family that @p rung ran, in the tables' order."""
    return [(case, n) for case in CASES for n in (8192, 32768) if (rung, case, n) in t]


def row(cells):
    return "| " + " | ".join(cells) + " |"


def masks_tables(folder):
    t = masks_times(folder)
    meta = json.load(open(os.path.join(folder, "meta.json")))
    lines = ["Masks family: %s, %s, commit `%s` (`%s`): bf16, d = 128, 16 heads, batch x seqlen = 32k "
             "tokens; TFLOP/s of the unmasked pairs." % (meta["device"], meta["date"][:10], meta["git_sha"][:7], folder), ""]
    r16, r15, flex = "16_masks", "15_persistent", "torch_flex"
    lines += ["| case | N | rung 16 (TFLOP/s) | time / causal's | rate / causal's | FlexAttention (TFLOP/s) | "
              "rung 16 / FlexAttention | no-full-blocks | no-skip |",
              "|---|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for case, n in measured(t, r16):
        cells, ms = case_cells(t, r16, case, n, flex)
        abl = [t.get((r16 + "[%s]" % v, case, n)) for v in ("no-full-blocks", "no-skip")]
        lines.append(row(cells + [fmt(ms / a[0]) if a else "-" for a in abl]))
    lines += ["", "(time / causal's and rate / causal's: against rung 16's plain causal kernel on the same shape; "
              "no-full-blocks and no-skip: rung 16's time over the ablation's, below 1 = the idea the ablation "
              "turns off helps.)", ""]
    rows = []
    for n in (8192, 32768):
        if (r15, "causal", n) in t and (r16, "causal", n) in t:
            rows.append("| %dk | %.0f | %.0f | %s |" % (n // 1024, t[r16, "causal", n][1], t[r15, "causal", n][1],
                                                        fmt(t[r15, "causal", n][0] / t[r16, "causal", n][0])))
    lines += ["**The machinery's cost** (causal, rung 16's block lists against rung 15's special code)", "",
              "| N | rung 16 (TFLOP/s) | rung 15 (TFLOP/s) | rung 16 / rung 15 |", "|--:|--:|--:|--:|"] + rows + [""]
    w = t.get((r16, "window4096", 8192))
    c = t.get((r16, "causal", 8192))
    if w and c:
        lines += ["**A window of w = 4096 keys over 2w = 8k** takes %.3f ms, causal over 8k %.3f ms: %.2f× "
                  "(the issue's bound: 1.3×)." % (w[0], c[0], w[0] / c[0]), ""]
    return lines


def sweep_runs(folder):
    """{tag: (ms, TFLOP/s)} of a sweep folder (one JSON per run)."""
    out = {}
    for f in os.listdir(folder):
        if f.endswith(".json") and f != "meta.json":
            j = json.load(open(os.path.join(folder, f)))
            out[f[:-5]] = (j["timing"]["median_ms"], j["timing"]["tflops"])
    return out


def sweep_tables(folder):
    runs = sweep_runs(folder)
    meta = json.load(open(os.path.join(folder, "meta.json")))
    lines = ["Sweep: %s, %s, commit `%s` (`%s`): batch x seqlen = 16k tokens, hidden 2048 (32 heads at "
             "d = 80 and 96), GQA 4:1, causal." % (meta["device"], meta["date"][:10], meta["git_sha"][:7], folder), ""]
    ratios = []
    lines += ["**Rung 16's causal kernel / rung 15's** (time ratio, above 1 = rung 16 faster)", "",
              "| dtype, d | N=512 | N=2k | N=8k |", "|---|--:|--:|--:|"]
    for t in ("fp16", "bf16"):
        for d in (64, 128, 256):
            cells = []
            for n in (512, 2048, 8192):
                a, b = runs.get("%s_d%d_N%d_causal" % (t, d, n)), runs.get("%s_d%d_N%d_causal_rung15" % (t, d, n))
                if a and b:
                    ratios.append(b[0] / a[0])
                cells.append(fmt(b[0] / a[0]) if a and b else "-")
            lines.append("| %s, d=%d | %s |" % (t, d, " | ".join(cells)))
    if ratios:
        lines += ["", "From %.3f× to %.3f× (%d of %d cells below 0.95×)." % (
            min(ratios), max(ratios), sum(r < 0.95 for r in ratios), len(ratios)), ""]
    lines += ["**Each modifier's rate against rung 16's causal kernel** (TFLOP/s ratio on the same shape; the "
              "window's rate counts only its unmasked pairs)", "",
              "| dtype, d | case | N=512 | N=2k | N=8k |", "|---|---|--:|--:|--:|"]
    for t in ("fp16", "bf16"):
        for d in (64, 80, 96, 128, 256):
            for case in ("window", "softcap", "alibi", "sinks"):
                cells = []
                for n in (512, 2048, 8192):
                    a, c = runs.get("%s_d%d_N%d_%s" % (t, d, n, case)), runs.get("%s_d%d_N%d_causal" % (t, d, n))
                    cells.append(fmt(a[1] / c[1]) if a and c else "-")
                lines.append("| %s, d=%d | %s | %s |" % (t, d, case, " | ".join(cells)))
    lines += ["", "**Head_dims 80 and 96 on the d = 128 tiles** (useful TFLOP/s, causal; d = 128 with 16 heads "
              "for comparison)", "", "| dtype | N | d=80 | d=96 | d=128 | 80 / 128 | 96 / 128 |", "|---|--:|--:|--:|--:|--:|--:|"]
    for t in ("fp16", "bf16"):
        for n in (512, 2048, 8192):
            v = [runs.get("%s_d%d_N%d_causal" % (t, d, n)) for d in (80, 96, 128)]
            if all(v):
                lines.append("| %s | %d | %.0f | %.0f | %.0f | %s | %s |" % (
                    t, n, v[0][1], v[1][1], v[2][1], fmt(v[0][1] / v[2][1]), fmt(v[1][1] / v[2][1])))
    return lines


def backward_tables(folder):
    t = masks_times(folder)
    meta = json.load(open(os.path.join(folder, "meta.json")))
    r16, r14, flex = "16_masks[backward]", "14_hopper_backward", "torch_flex"
    lines = ["Masks family, backward: %s, %s, commit `%s` (`%s`): bf16, d = 128, 16 heads, batch x seqlen = 32k "
             "tokens, the backward pass alone; TFLOP/s of the unmasked pairs (2.5 x the forward's)."
             % (meta["device"], meta["date"][:10], meta["git_sha"][:7], folder), "",
             "| case | N | rung 16 backward (TFLOP/s) | time / causal's | rate / causal's | FlexAttention backward "
             "(TFLOP/s) | rung 16 / FlexAttention | rung 14 (TFLOP/s) | rung 16 / rung 14 |",
             "|---|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for case, n in measured(t, r16):
        cells, ms = case_cells(t, r16, case, n, flex)
        b14 = t.get((r14, case, n))
        lines.append(row(cells + ["%.0f" % b14[1] if b14 else "-", fmt(b14[0] / ms) if b14 else "-"]))
    w, c = t.get((r16, "window4096", 8192)), t.get((r16, "causal", 8192))
    if w and c:
        lines += ["", "**A window of w = 4096 keys over 2w = 8k, backward:** %.3f ms against causal's %.3f ms: "
                  "%.2f× (the issue's bound: 1.3×)." % (w[0], c[0], w[0] / c[0])]
    return lines


def bwd_sweep_tables(folder):
    runs = sweep_runs(folder)
    meta = json.load(open(os.path.join(folder, "meta.json")))
    lines = ["Backward sweep: %s, %s, commit `%s` (`%s`): batch x seqlen = 16k tokens, hidden 2048 (32 heads at "
             "d = 96), GQA 4:1, causal; rung 16's backward (TFLOP/s) and its time against rung 14's, then each "
             "modifier's rate against rung 16's causal backward." % (meta["device"], meta["date"][:10],
                                                                   meta["git_sha"][:7], folder), "",
             "| dtype, d | N | causal (TFLOP/s) | rung 14 / rung 16 (time) | window N/4 | softcap 50 | ALiBi | sinks |",
             "|---|--:|--:|--:|--:|--:|--:|--:|"]
    for cell in ("bf16_d64", "bf16_d96", "bf16_d128", "fp16_d128"):
        for n in (2048, 8192):
            c, b = runs.get("%s_N%d_causal" % (cell, n)), runs.get("%s_N%d_causal_rung14" % (cell, n))
            if not c:
                continue
            mods = [runs.get("%s_N%d_%s" % (cell, n, m)) for m in ("window", "softcap", "alibi", "sinks")]
            t, d = cell.split("_")
            lines.append("| %s, d=%s | %dk | %.0f | %s | %s |" % (
                t, d[1:], n // 1024, c[1], fmt(b[0] / c[0]) if b else "-",
                " | ".join(fmt(m[1] / c[1]) if m else "-" for m in mods)))
    return lines


def rounds_table(folder):
    meta = json.load(open(os.path.join(folder, "meta.json")))
    timing = {}
    for name in sorted(os.listdir(folder)):
        if name.startswith("n32k_") and name.endswith(".json"):
            rung, i = name[len("n32k_"):-len(".json")].rsplit("_", 1)
            timing[(rung, int(i))] = json.load(open(os.path.join(folder, name)))["timing"]
    rounds = sorted({i for _, i in timing})
    out = ["The 32k causal forward cell: %s, %s, commit `%s` (`%s`): %s; %d launches per process, "
           "rungs 15 and 16 alternating." % (meta["device"], meta["date"][:10], meta["git_sha"][:7],
                                             os.path.relpath(folder), meta["shape"], meta["iters"]), "",
           "| round | rung 15 median (ms) | rung 16 median (ms) | rung 16 / rung 15 (rate) | rung 15 fastest | "
           "rung 16 fastest |", "|--:|--:|--:|--:|--:|--:|"]
    for i in rounds:
        a, b = timing[("15_persistent", i)], timing[("16_masks", i)]
        out.append(row([str(i), "%.3f" % a["median_ms"], "%.3f" % b["median_ms"], fmt(a["median_ms"] / b["median_ms"]),
                        "%.3f" % a["min_ms"], "%.3f" % b["min_ms"]]))
    fast15 = min(timing[("15_persistent", i)]["min_ms"] for i in rounds)
    fast16 = min(timing[("16_masks", i)]["min_ms"] for i in rounds)
    out += ["", "Fastest launch over all rounds: rung 15 %.3f ms, rung 16 %.3f ms (%s)." % (fast15, fast16,
                                                                                         fmt(fast15 / fast16))]
    return out


def main():
    if len(sys.argv) not in (3, 5, 6):
        sys.exit(__doc__)
    out = masks_tables(sys.argv[1]) + [""] + sweep_tables(sys.argv[2])
    if len(sys.argv) >= 5:
        out += [""] + backward_tables(sys.argv[3]) + [""] + bwd_sweep_tables(sys.argv[4])
    if len(sys.argv) == 6:
        out += [""] + rounds_table(sys.argv[5])
    print("\n".join(out))


if __name__ == "__main__":
    main()
