#!/usr/bin/env python3
"""The causal grid's launch order in rung 14's schedule model: the rung's (the K/V block fastest),
longest first over all groups (`lpt-grid`) and longest first within sections of S groups
(branch wip/lpt-sections' `lpt-s<S>`), on the shapes of nvidia-h200/rung14/lpt-ab/.

The model is bench/studies/rung14_split_model.py's list schedule: the blocks, in launch order, go to
the first of 132 SMs to be free, one block per SM, each taking its steps (query blocks x the query
heads of its slice) in unit time. It reports, per order:
- eff: all the blocks' steps over 132 SMs against the schedule's end (1 is perfect);
- conc: the blocks of a group running at once, averaged over the kernel's time and the running
  groups (a proxy of L2 reuse: a group's running blocks read the same Q_i, dO_i tiles close
  together in time; at 1 each tile is read once per wave, from HBM).
The model has no L2: it predicts the schedule's gain, and conc says where that gain would be paid
for in HBM reads. The measured ratio (lpt-grid over the rung, one run) sits beside.

usage: python3 bench/studies/rung14_lpt_model.py
"""
import heapq
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rung14_split_model import SMS, block_steps  # noqa: E402


def order(X, G, section):
    """The (group, K/V block) launch order: section 0 the rung's (x fastest), else longest first
    within sections of ``section`` groups (the kernel's grid_coords)."""
    if section == 0:
        return [(g, j) for g in range(G) for j in range(X)]
    out = []
    for s0 in range(0, G, section):
        groups = range(s0, min(G, s0 + section))
        out += [(g, j) for j in range(X) for g in groups]
    return out


def schedule(batch, n, heads_q, heads_kv, d, split, section):
    steps = block_steps(n, n, d, True)
    per_slice = heads_q // heads_kv // split
    X, G = len(steps), batch * heads_kv * split
    free = [0] * SMS
    runs, total, end = [], 0, 0
    for g, j in order(X, G, section):
        t0 = heapq.heappop(free)
        t1 = t0 + steps[j] * per_slice
        heapq.heappush(free, t1)
        runs.append((t0, t1, g))
        total += t1 - t0
        end = max(end, t1)
    # conc: at each event time, running blocks over running groups, weighted by the interval
    events = sorted({t for r in runs for t in r[:2]})
    num = den = 0.0
    for a, b in zip(events, events[1:]):
        running = [g for t0, t1, g in runs if t0 <= a < t1]
        if running:
            num += (b - a) * len(running) / len(set(running))
            den += b - a
    return total / (SMS * end), num / den


SHAPES = [  # batch, n, heads_q, heads_kv, d, the rung's split, label, measured lpt-grid / rung
    (8, 2048, 16, 4, 128, 1, "bf16 d128 2k B8, GQA 16/4", 1.112),
    (2, 4096, 16, 4, 128, 4, "bf16 d128 4k B2, GQA 16/4, split 4", 1.060),
    (2, 8192, 32, 8, 64, 1, "fp16 d64 8k B2, GQA 32/8", 1.033),
    (1, 16384, 16, 2, 128, 1, "fp16 d128 16k B1, GQA 16/2", 0.993),
    (4, 4096, 16, 4, 256, 1, "bf16 d256 4k B4, GQA 16/4", 0.984),
    (4, 4096, 16, 4, 128, 4, "bf16 d128 4k B4, GQA 16/4, split 4", 0.954),
    (8, 2048, 16, 16, 128, 1, "bf16 d128 2k B8, MHA", 0.712),
]
SECTIONS = (0, 8, 16, 32, 1 << 30)


def main():
    names = {0: "rung", 1 << 30: "lpt-grid"}
    cols = [names.get(s, "lpt-s%d" % s) for s in SECTIONS]
    print("| shape (causal) | groups | " + " | ".join("%s eff, conc" % c for c in cols) +
          " | model lpt-grid / rung | measured |")
    print("|---|--:|" + "--:|" * len(cols) + "--:|--:|")
    for b, n, hq, hkv, d, split, label, meas in SHAPES:
        res = [schedule(b, n, hq, hkv, d, split, s) for s in SECTIONS]
        print("| %s | %d | %s | %.3f | %.3f |" % (
            label, b * hkv * split, " | ".join("%.2f, %.1f" % r for r in res), res[-1][0] / res[0][0], meas))


if __name__ == "__main__":
    main()
