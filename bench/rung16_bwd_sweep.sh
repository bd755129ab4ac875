#!/bin/bash
# Rung 16's backward beyond the masks-backward family's one shape: the machinery's cost against
# rung 14 (the same kernel with the causal mask as special code) and the modifiers' cost. bf16 (and
# fp16 at d = 128); head_dim 64, 96 (on the d = 128 tiles), 128; 2k and 8k keys with batch x seqlen
# = 16k tokens; hidden 2048 (heads = 2048 / d, 32 at d = 96) on GQA 4:1; cases: causal (rung 16's
# backward and rung 14 side by side), a causal window of N / 4 keys, softcap 50, ALiBi, sinks (all
# causal). One JSON and one log each.
# usage: bench/rung16_bwd_sweep.sh BIN_DIR OUT_DIR
set -u
BIN=$1
R=$2
mkdir -p "$R"
run() {  # tag, binary, then the runner's arguments
  local tag=$1 bin=$2; shift 2
  timeout 60 "$BIN/$bin" "$@" --check none --iters 20 --no-compare --json "$R/$tag.json" > "$R/$tag.log" 2>&1
  echo "$tag $(grep -o 'rate *[0-9.]* TFLOP/s' "$R/$tag.log" | tail -1)"
}
for cell in bf16:64 bf16:96 bf16:128 fp16:128; do
  t=${cell%%:*} d=${cell##*:}
  for n in 2048 8192; do
    h=$((2048 / d)); [ $d = 96 ] && h=32
    shape=(--dtype $t --dim $d --seqlen $n --batch $((16384 / n)) --heads $h --kv-heads $((h / 4)) --causal 1)
    tag=${t}_d${d}_N${n}
    [ $d = 96 ] || run ${tag}_causal_rung14 14_hopper_backward "${shape[@]}"
    run ${tag}_causal 16_masks --variant backward "${shape[@]}"
    run ${tag}_window 16_masks --variant backward "${shape[@]}" --window $((n / 4)),0
    run ${tag}_softcap 16_masks --variant backward "${shape[@]}" --softcap 50
    run ${tag}_alibi 16_masks --variant backward "${shape[@]}" --alibi
    run ${tag}_sinks 16_masks --variant backward "${shape[@]}" --sinks
  done
done
