#!/usr/bin/env python3
"""Compare two builds' ladder_bench runs (bench/studies/ab_timing.sh): per benchmark the median time of the
runs before a change and after it, after / before, and the noise: the larger spread between two runs
of the same build (max / min - 1). A change is "within noise" where |after / before - 1| is no larger
than that spread plus 2 %."""
import argparse
import json
import statistics
import sys


def load(path):
    """name -> real time in ms, for the benchmarks of one Google Benchmark JSON (no aggregates)."""
    scale = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}
    with open(path) as f:
        data = json.load(f)
    return {b["name"]: b["real_time"] * scale[b.get("time_unit", "ns")]
            for b in data["benchmarks"] if b.get("run_type", "iteration") == "iteration" and "error_occurred" not in b}


def spread(xs):
    return max(xs) / min(xs) - 1.0 if len(xs) > 1 and min(xs) > 0 else 0.0


def compare(before, after, slack=0.02):
    """Rows (name, before ms, after ms, after/before, noise, within) for every name all runs have."""
    names = sorted(set.intersection(*(set(r) for r in before + after)))
    rows = []
    for n in names:
        a = [r[n] for r in before]
        b = [r[n] for r in after]
        ma, mb = statistics.median(a), statistics.median(b)
        noise = max(spread(a), spread(b))
        ratio = mb / ma
        rows.append((n, ma, mb, ratio, noise, abs(ratio - 1.0) <= noise + slack))
    return rows


def markdown(rows, context):
    out = ["| benchmark | before ms | after ms | after / before | noise (same build) | within noise |",
           "|---|--:|--:|--:|--:|---|"]
    for n, ma, mb, r, noise, ok in rows:
        name = n.replace("/iterations:1/manual_time", "")
        out.append("| `%s` | %.4f | %.4f | %.3f | %.1f %% | %s |" % (name, ma, mb, r, 100 * noise, "yes" if ok else "**no**"))
    ratios = [r for _, _, _, r, _, _ in rows]
    if ratios:
        g = statistics.geometric_mean(ratios)
        out += ["", "%d benchmarks; geometric mean of after / before %.3f (min %.3f, max %.3f); %d outside noise + 2 %%. %s"
                % (len(rows), g, min(ratios), max(ratios), sum(1 for r in rows if not r[5]), context)]
    return "\n".join(out) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", nargs="+", required=True, help="ladder_bench JSON files of the build before")
    ap.add_argument("--after", nargs="+", required=True, help="ladder_bench JSON files of the build after")
    ap.add_argument("--out", help="markdown to write (default: standard output)")
    args = ap.parse_args(argv)
    before = [load(p) for p in args.before]
    after = [load(p) for p in args.after]
    with open(args.before[0]) as f:
        ctx = json.load(f)["context"]
    context = "Device %s, %s; runs interleaved before, after, before, after." % (
        ctx.get("device", "?"), str(ctx.get("date", "?"))[:10])
    text = markdown(compare(before, after), context)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
