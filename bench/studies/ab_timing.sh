#!/usr/bin/env bash
# A/B timing of two builds of the ladder on one GPU, in one run: the same ladder_bench sweep from
# the build before a change (A) and after it (B), interleaved A B A B, so that the spread between
# the two A runs (and the two B runs) measures the noise the after/before ratio is read against.
#
#   bench/studies/ab_timing.sh BEFORE_BIN AFTER_BIN OUT_DIR [LADDER_ARGS...]
#
#   BEFORE_BIN, AFTER_BIN  bin folders holding ladder_bench (e.g. build/before/bin build/release/bin)
#   OUT_DIR                gets a1.json b1.json a2.json b2.json (Google Benchmark JSON), their logs,
#                          and ab.md: bench/studies/ab_compare.py's table of every benchmark both ran
#   LADDER_ARGS            ladder_bench flags, e.g. --fl_family=prefill,backward --fl_rungs=9,10,11 --fl_quick
#
# Exit: 0 done; 77 no GPU; otherwise the failing run's code. No verdict: the table is read by a person.
set -euo pipefail
[ $# -ge 3 ] || { sed -n '2,14p' "$0"; exit 2; }
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
A=$1 B=$2 OUT=$3
shift 3
mkdir -p "$OUT"
for round in 1 2; do
  for side in a b; do
    bin=$A
    [ $side = b ] && bin=$B
    echo "ab_timing.sh: [$side$round] $bin/ladder_bench $*"
    set +e
    "$bin/ladder_bench" "$@" --benchmark_out="$OUT/$side$round.json" --benchmark_out_format=json \
      >"$OUT/$side$round.log" 2>&1
    rc=$?
    set -e
    [ $rc = 0 ] || { tail -5 "$OUT/$side$round.log" >&2; exit $rc; }
  done
done
"${PYTHON:-python3}" "$ROOT/bench/studies/ab_compare.py" --before "$OUT/a1.json" "$OUT/a2.json" \
  --after "$OUT/b1.json" "$OUT/b2.json" --out "$OUT/ab.md"
cat "$OUT/ab.md"
