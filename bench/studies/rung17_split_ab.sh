#!/usr/bin/env bash
# Rung 17's split count on short grids: the heuristic (mla_plan.h: rung 08's policy, pieces of at
# least 256 keys) against forced split counts, on the small batches where the grid is a handful of
# CTAs (rung 17's README, "Why small batches are far from the floor").
#
#   bench/studies/rung17_split_ab.sh BIN_DIR OUT_DIR
#
# Writes OUT_DIR/<shape>_s<splits>.json (the runner's JSON; s0 = the heuristic, checked against the
# fp64 reference on sampled rows, the others unchecked: the GPU tests cover forced splits) and
# OUT_DIR/summary.txt (one line per shape: the time of each split count).
set -uo pipefail
BIN=${1:?usage: rung17_split_ab.sh BIN_DIR OUT_DIR}
OUT=${2:?usage: rung17_split_ab.sh BIN_DIR OUT_DIR}
mkdir -p "$OUT"
A="--kv-heads 1 --dim 576 --dim-v 512 --v-in-k --dtype bf16 --page-size 64 --iters 30 --no-compare"
: > "$OUT/summary.txt"
for b in 1 8; do
  for h in 16 64 128; do
    for sk in 4096 16384; do
      tag="b${b}_h${h}_sk${sk}"
      line="B=$b H=$h Sk=$sk:"
      for s in 0 8 16 32 64 128; do
        [ "$s" -gt $((sk / 64)) ] && continue
        chk=none; [ "$s" = 0 ] && chk=sample
        "$BIN/17_mla" --batch "$b" --heads "$h" --seqlen-q 1 --seqlen-k "$sk" --splits "$s" $A --check "$chk" \
          --json "$OUT/${tag}_s$s.json" > "$OUT/${tag}_s$s.log" 2>&1 || echo "failed: $tag s$s" >> "$OUT/summary.txt"
        ms=$(python3 -c "import json,sys; print('%.4f' % json.load(open(sys.argv[1]))['timing']['median_ms'])" \
             "$OUT/${tag}_s$s.json" 2>/dev/null || echo "-")
        line="$line s$s $ms"
      done
      echo "$line" | tee -a "$OUT/summary.txt"
    done
  done
done
