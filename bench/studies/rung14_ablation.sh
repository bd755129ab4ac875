#!/bin/bash
# Rung 14's ablation runs (bench/results/<gpu>/rung14/ablation/): the rung and each variant with one
# idea turned off, at head_dim 64 and 128, 4k and 16k keys (batch x seqlen = 16k tokens, hidden
# 2048), causal and not, fp16; the rung alone in bf16 at head_dim 128. One JSON and one log each.
# usage: bench/studies/rung14_ablation.sh BIN_DIR OUT_DIR
set -u
B=$1/14_hopper_backward
R=$2
mkdir -p "$R"
for t in fp16 bf16; do for d in 128 64; do for c in 0 1; do for n in 4096 16384; do
  [ $t = bf16 ] && [ $d = 64 ] && continue
  for v in "" no-ws atomic-dq ss-dkv one-stage unfused-prep; do
    [ $t = bf16 ] && [ -n "$v" ] && continue
    tag=${t}_d${d}_N${n}_c${c}_${v:-rung}
    timeout 60 "$B" ${v:+--variant $v} --dtype $t --dim $d --seqlen $n --batch $((16384 / n)) --heads $((2048 / d)) \
      --causal $c --check none --iters 30 --no-compare --json "$R/$tag.json" > "$R/$tag.log" 2>&1
    echo "$tag $(grep -o 'rate *[0-9.]* TFLOP/s' "$R/$tag.log")"
  done
done; done; done; done
