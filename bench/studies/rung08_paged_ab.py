#!/usr/bin/env python3
"""Rung 08's paged loader, before and after a change: two builds' 08_flash_decoding runners, each
on the same decode shapes with a contiguous cache and with pages of 256 and 16 tokens (shuffled
pages: the runner's --page-size), interleaved (before, after; then after, before) over --rounds
rounds. Per cell: the median of the rounds' runner medians (--iters launches each, the L2 flushed
before each: common/src/timing.cpp), after / before, and paged / contiguous within each build.

    python3 bench/studies/rung08_paged_ab.py build/before/bin/08_flash_decoding build/release/bin/08_flash_decoding \\
        bench/results/<gpu>/rung08-paged-ab/ab.json > bench/results/<gpu>/rung08-paged-ab/ab.log

The shapes: 32 query / 8 KV heads of 128, fp16, batch 1: a decode step against 128k keys, 4 and
16 queries (speculative decoding) against 16k keys, 16 queries against 64k keys, causal. No
verdict: the table is read by a person. Exit 0; 77 when a runner reports no usable CUDA device."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HEADS = ["--heads", "32", "--kv-heads", "8", "--dim", "128"]
SHAPES = [("1q 128k", ["--batch", "1", "--seqlen-q", "1", "--seqlen-k", "131072"]),
          ("4q 16k causal", ["--batch", "1", "--seqlen-q", "4", "--seqlen-k", "16384", "--causal", "1"]),
          ("16q 16k causal", ["--batch", "1", "--seqlen-q", "16", "--seqlen-k", "16384", "--causal", "1"]),
          ("16q 64k causal", ["--batch", "1", "--seqlen-q", "16", "--seqlen-k", "65536", "--causal", "1"])]
LAYOUTS = [("contiguous", []), ("page256", ["--page-size", "256"]), ("page16", ["--page-size", "16"])]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("before", help="the 08_flash_decoding runner built before the change")
    ap.add_argument("after", help="the 08_flash_decoding runner built after it")
    ap.add_argument("out", help="JSON of every timing (the table goes to stdout)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--iters", type=int, default=100)
    args = ap.parse_args(argv)
    times = {}
    with tempfile.TemporaryDirectory() as tmp:
        report = os.path.join(tmp, "r.json")
        for r in range(args.rounds):
            builds = [("before", args.before), ("after", args.after)]
            for shape, sargs in SHAPES:
                for layout, largs in LAYOUTS:
                    for build, binary in (builds if r % 2 == 0 else builds[::-1]):
                        cmd = [binary] + sargs + HEADS + ["--iters", str(args.iters), "--check", "none",
                                                         "--no-compare", "--json", report] + largs
                        p = subprocess.run(cmd, capture_output=True, text=True)
                        if p.returncode == 77:
                            print("rung08_paged_ab.py: no usable CUDA device")
                            return 77
                        if p.returncode != 0:
                            print("FAILED (%d): %s\n%s" % (p.returncode, " ".join(cmd), (p.stdout + p.stderr)[-600:]))
                            continue
                        with open(report, encoding="utf-8") as f:
                            times.setdefault((shape, layout, build), []).append(json.load(f)["timing"]["median_ms"])
    rows = []
    print("%-16s %-11s %9s %9s %7s  %s" % ("shape", "layout", "old ms", "new ms", "new/old",
                                          "paged/contig (old, new)"))
    for shape, _ in SHAPES:
        for layout, _ in LAYOUTS:
            if not all((shape, l, b) in times for l in (layout, "contiguous") for b in ("before", "after")):
                continue
            med = {(l, b): statistics.median(times[(shape, l, b)]) for l in (layout, "contiguous")
                   for b in ("before", "after")}
            print("%-16s %-11s %9.4f %9.4f %7.3f  %.3f %.3f" % (
                shape, layout, med[(layout, "before")], med[(layout, "after")],
                med[(layout, "after")] / med[(layout, "before")],
                med[("contiguous", "before")] / med[(layout, "before")],
                med[("contiguous", "after")] / med[(layout, "after")]))
            rows.append({"shape": shape, "layout": layout, "old_ms": times[(shape, layout, "before")],
                         "new_ms": times[(shape, layout, "after")]})
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        # old = the runner before the change, new = after it (the columns' names in the table).
        json.dump({"rows": rows, "note": "old = rung 08 before the change, new = after; median of %d rounds, "
                   "each the runner's median of %d launches" % (args.rounds, args.iters)}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
