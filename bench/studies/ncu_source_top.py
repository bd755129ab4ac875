#!/usr/bin/env python3
"""The SASS instructions with the most sampled warp stalls, from Nsight Compute's source page.

    python3 bench/studies/ncu_source_top.py SOURCE_CSV [--top N] [--reasons mio,barrier,...]

SOURCE_CSV (or SOURCE_CSV.gz) is `ncu -i REPORT --page source --print-source sass --csv`: one row per SASS
instruction, with its address, its text and its stall samples (all reasons together, and one
column per reason). Prints, for the samples of all reasons and then for each column whose name
holds one of --reasons (default: mio, barrier, long_scoreboard, short_scoreboard, wait,
math_pipe), the N instructions with the most samples there: their share of that column, the
address and the instruction. Column names differ between ncu versions, so they are matched by
these substrings, and the header is printed first. Needs no GPU and no PyTorch.
"""
import argparse
import csv
import gzip
import sys


def number(text):
    try:
        return float(text.replace(",", ""))
    except (AttributeError, ValueError):
        return 0.0


def read_rows(path):
    """The rows of ncu's source page at @p path (.csv, or .csv.gz), one dict per SASS instruction:
    ncu may print a "Kernel Name" line before the table, which starts at its "Address" header."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8", newline="") as f:
        lines = [line for line in f if line.startswith('"')]
    start = next((i for i, line in enumerate(lines) if line.startswith('"Address"')), 0)
    return list(csv.DictReader(lines[start:]))


def top(rows, column, source, address, n):
    """The @p n rows with the most samples in @p column, as printable lines."""
    total = sum(number(r.get(column)) for r in rows)
    if total <= 0:
        return ["  (no samples)"]
    ranked = sorted(rows, key=lambda r: -number(r.get(column)))[:n]
    return ["  %5.1f %%  %-8s %s" % (100 * number(r.get(column)) / total, r.get(address, ""), r.get(source, ""))
            for r in ranked if number(r.get(column)) > 0]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--reasons", default="mio,barrier,long_scoreboard,short_scoreboard,wait,math_pipe")
    args = ap.parse_args(argv)
    rows = read_rows(args.csv)
    if not rows:
        print("ncu_source_top.py: no rows in %s" % args.csv)
        return 1
    head = list(rows[0].keys())
    print("columns: " + " | ".join(head))
    pick = lambda *keys: next((h for h in head if all(k in h.lower() for k in keys)), None)  # noqa: E731
    source = pick("source") or head[1]
    address = pick("address") or head[0]
    stall_cols = [h for h in head if "stall" in h.lower() and "sampl" in h.lower()]
    every = next((h for h in stall_cols if "all" in h.lower() or "total" in h.lower()), stall_cols[0] if stall_cols else None)
    if every:
        print("\n%s (%d instructions):" % (every, len(rows)))
        print("\n".join(top(rows, every, source, address, args.top)))
    for reason in args.reasons.split(","):
        for h in head:
            if reason in h.lower() and h != every:
                print("\n%s:" % h)
                print("\n".join(top(rows, h, source, address, args.top)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
