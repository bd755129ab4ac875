#!/bin/bash
# Rung 14's deterministic mode against its default on the same shapes: for each shape, causal and
# not, ROUNDS rounds of the default then --deterministic 1 (timed, never checked here; the GPU tests
# check both modes). One JSON and one log per run; summary.txt: one line per run with its rate.
# usage: bench/studies/rung14_det_ratio.sh BIN_DIR OUT_DIR [ROUNDS]
#   DTYPE (bf16), DIM (256), SHAPES (lines of "seqlen batch heads"; MHA) override the defaults.
set -u
B=$1/14_hopper_backward
R=$2
ROUNDS=${3:-2}
mkdir -p "$R"
SHAPES=${SHAPES:-"1024 16 16
4096 4 16
8192 2 16"}
while read -r n b h; do
  for c in 0 1; do
    for ((r = 0; r < ROUNDS; r++)); do
      for det in 0 1; do
        tag=N${n}_B${b}_c${c}_det${det}_r$r
        timeout 60 "$B" --dtype "${DTYPE:-bf16}" --dim "${DIM:-256}" --seqlen "$n" --batch "$b" --heads "$h" \
          --kv-heads "$h" --causal $c --deterministic $det --check none --iters 30 --no-compare \
          --json "$R/$tag.json" > "$R/$tag.log" 2>&1
        echo "$tag $(grep -o 'rate *[0-9.]* TFLOP/s' "$R/$tag.log")" >> "$R/summary.txt"
      done
    done
  done
done <<< "$SHAPES"
