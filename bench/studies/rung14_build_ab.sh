#!/usr/bin/env bash
# Two builds of rung 14's runner timed in turn on the same shapes: A (the build before a change)
# then B (after it), ROUNDS rounds, each run its own process (--check none, the runner's median of
# --iters launches, L2 flushed). Writes OUT_DIR/summary.txt ("s<i> <a|b><round> <args> -> rate <x>
# TFLOP/s", read by bench/docblocks/hopper_backward.py's gen:build-ab) and each run's report as
# OUT_DIR/s<i>_<a|b><round>.log.
#
#   bench/studies/rung14_build_ab.sh A_BIN_DIR B_BIN_DIR OUT_DIR [ROUNDS]
#
# SHAPES=<lines of runner flags> overrides the shapes; ITERS (default 30) the launches per run.
# Exit: 0 done; else the failing run's code.
set -uo pipefail
[ $# -ge 3 ] || { sed -n '2,10p' "$0"; exit 2; }
A=$1 B=$2 OUT=$3 ROUNDS=${4:-2}
mkdir -p "$OUT"
SHAPES=${SHAPES:-"--dtype fp16 --dim 128 --seqlen 512 --batch 32 --heads 16 --causal 0
--dtype fp16 --dim 128 --seqlen 512 --batch 32 --heads 16 --causal 1
--dtype bf16 --dim 128 --seqlen 1024 --batch 16 --heads 16 --causal 0
--dtype bf16 --dim 128 --seqlen 4096 --batch 4 --heads 16 --causal 1
--dtype fp16 --dim 64 --seqlen 1024 --batch 16 --heads 16 --causal 1
--dtype fp16 --dim 64 --seqlen 2048 --batch 8 --heads 32 --causal 0"}
: > "$OUT/summary.txt"
i=0
while read -r args; do
  [ -z "$args" ] && continue
  i=$((i + 1))
  for ((r = 1; r <= ROUNDS; r++)); do
    for side in a b; do
      bin=$A
      [ $side = b ] && bin=$B
      # shellcheck disable=SC2086
      timeout 120 "$bin/14_hopper_backward" $args --check none --iters "${ITERS:-30}" --no-compare \
        > "$OUT/s${i}_${side}${r}.log" 2>&1 || { tail -5 "$OUT/s${i}_${side}${r}.log"; exit 1; }
      echo "s$i $side$r $args -> $(grep -o 'rate *[0-9.]* TFLOP/s' "$OUT/s${i}_${side}${r}.log")" | tee -a "$OUT/summary.txt"
    done
  done
done <<< "$SHAPES"
