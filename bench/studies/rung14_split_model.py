#!/usr/bin/env python3
"""A model of rung 14's grid under a causal mask, and the measured effect of splitting a GQA group.

Under a causal mask K/V block j of a (KV head, batch) group sees the query blocks from its diagonal
on: block 0 is the longest, and a block walks every query head of its slice of the group. The grid
launches the K/V block fastest, so the longest blocks of the groups launched last start late and can
end the kernel alone. The model gives each block, in launch order, to the first of 132 SMs to be
free (a list schedule) and reports the efficiency: all the blocks' steps over 132 SMs against the
time the last one finishes. Splitting the group into s slices (rung 11's fp32 partial dK, dV, added
by its convert kernel) divides the longest block by s; it costs the partial sums' traffic. The
model's "predicted split" weighs both: the steps' GEMM FLOPs over the efficiency plus the partial
sums' bytes (written and read back) at 167 FLOPs per byte (about 500 TFLOP/s of backward over the
3.0 TB/s of a copy on the H100), and takes a larger split only where that is 5% cheaper.

With results folders (runs of bench/run_all.sh --family backward-gqa with --fl_variants, so that
the `nosplit` and `fullsplit` variants ran, or a folder of the rung's --json files of one shape),
each row also gets the measured ratio fullsplit / nosplit at that shape, one per folder (the rung's
default is rung 11's rule, which splits none of these shapes).

usage: python3 bench/studies/rung14_split_model.py [RESULTS_FOLDER ...]
"""
import heapq
import json
import os
import sys

SMS = 132
FLOPS_PER_BYTE = 167.0
MIN_GAIN = 0.05


def tiles(d):
    """(query block rows, K/V block keys) of rung 14 at head_dim d (traits.h)."""
    return (128 if d == 64 else 64), (64 if d > 128 else 128)


def block_steps(n_q_rows, n_k, d, causal):
    """Steps (query blocks) of each K/V block for one query head, as the kernel's BlockWork counts."""
    bm, bn = tiles(d)
    n_q = (n_q_rows + bm - 1) // bm
    offset = n_k - n_q_rows
    return [n_q - min(n_q, max(0, key0 - offset) // bm) if causal else n_q for key0 in range(0, n_k, bn)]


def efficiency(batch, n, heads_q, heads_kv, d, causal, split):
    steps = block_steps(n, n, d, causal)
    per_slice = heads_q // heads_kv // split
    free = [0] * SMS
    total = end = 0
    for _ in range(batch * heads_kv * split):  # grid y, z: launch order after the K/V blocks
        for s in steps:
            t = heapq.heappop(free) + s * per_slice
            heapq.heappush(free, t)
            end = max(end, t)
            total += s * per_slice
    return total / (SMS * end)


def cost(batch, n, heads_q, heads_kv, d, causal, split):
    bm, bn = tiles(d)
    steps = sum(block_steps(n, n, d, causal)) * heads_q * batch
    work = steps * 10.0 * bm * bn * d / efficiency(batch, n, heads_q, heads_kv, d, causal, split)
    partial = 16.0 * split * batch * n * heads_kv * d if split > 1 else 0.0
    return work + FLOPS_PER_BYTE * partial


def predicted_split(batch, n, heads_q, heads_kv, d, causal):
    group = heads_q // heads_kv
    base = cost(batch, n, heads_q, heads_kv, d, causal, 1)
    best, best_cost = 1, base
    for s in range(2, group + 1):
        if group % s == 0:
            c = cost(batch, n, heads_q, heads_kv, d, causal, s)
            if c < best_cost:
                best, best_cost = s, c
    return best if best_cost <= (1 - MIN_GAIN) * base else 1


def measured(folders):
    """{(batch, d, n, causal): [fullsplit / nosplit, ...]}: from a sweep folder's ladder_bench.json
    (its GQA entries), or from a folder of the rung's --json files named
    <dtype>_<nosplit|fullsplit>_det0.json (one shape each, e.g. the training demo's)."""
    out = {}
    for f in folders:
        rate = {}
        path = os.path.join(f, "ladder_bench.json")
        if os.path.exists(path):
            for b in json.load(open(path))["benchmarks"]:
                parts = b["name"].split("/")
                if parts[1] == "backward-gqa" and parts[0].endswith(("[nosplit]", "[fullsplit]")):
                    key = (int(b["batch"]), int(parts[2][1:]), int(parts[3][1:]), int(parts[4][-1]))
                    rate[parts[0].split("[")[1].rstrip("]"), key] = b["TFLOPS"]
        else:
            for dtype in ("fp16", "bf16"):
                runs = {}
                for v in ("nosplit", "fullsplit"):
                    name = os.path.join(f, "%s_%s_det0.json" % (dtype, v))
                    if os.path.exists(name):
                        runs[v] = json.load(open(name))
                if len(runs) == 2:
                    p = runs["nosplit"]["problem"]
                    key = (p["batch"], p["head_dim"], p["seqlen_q"], int(p["causal"]))
                    out.setdefault(key, []).append(runs["fullsplit"]["timing"]["tflops"] /
                                                   runs["nosplit"]["timing"]["tflops"])
        for (v, key), r in rate.items():
            if v == "fullsplit" and ("nosplit", key) in rate:
                out.setdefault(key, []).append(r / rate["nosplit", key])
    return out


def main():
    meas = measured(sys.argv[1:])
    print("| shape | efficiency unsplit | split in 4 | predicted split | measured fullsplit / nosplit |")
    print("|---|--:|--:|--:|--:|")
    shapes = [(16384 // n, n, 2048 // d, 2048 // d // 4, d, 1) for d in (64, 128, 256)
              for n in (1024, 2048, 4096, 8192, 16384)]
    shapes.append((2, 4096, 16, 4, 128, 1))  # the training demo's attention
    for b, n, hq, hkv, d, c in shapes:
        m = meas.get((b, d, n, c), [])
        label = "B=%d, N=%dk, %d/%d heads, d=%d%s" % (b, n // 1024, hq, hkv, d, ", causal" if c else "")
        print("| %s | %.2f | %.2f | %d | %s |" % (
            label, efficiency(b, n, hq, hkv, d, c, 1), efficiency(b, n, hq, hkv, d, c, 4),
            predicted_split(b, n, hq, hkv, d, c), " ".join("%.2f" % x for x in m) if m else "–"))


if __name__ == "__main__":
    main()
