#!/bin/bash
# Rung 16's wider grid (bench/results/<gpu>/rung16/sweep/): the machinery's cost and the modifiers
# beyond the masks family's one shape. fp16 and bf16; head_dim 64, 80, 96, 128, 256 (80 and 96 on
# the d = 128 tiles); 512, 2k and 8k keys with batch x seqlen = 16k tokens; hidden 2048 (heads =
# 2048 / d; 32 heads at d = 80 and 96, as Phi-3 and GPT-NeoX-style models) on GQA 4:1; cases:
# causal (rung 16 and rung 15 side by side), a causal window of N / 4 keys, softcap 50 (causal),
# ALiBi (causal), sinks (causal). One JSON and one log each.
# usage: bench/rung16_sweep.sh BIN_DIR OUT_DIR
set -u
BIN=$1
R=$2
mkdir -p "$R"
run() {  # tag, binary, then the runner's arguments
  local tag=$1 bin=$2; shift 2
  timeout 60 "$BIN/$bin" "$@" --check none --iters 20 --no-compare --json "$R/$tag.json" > "$R/$tag.log" 2>&1
  echo "$tag $(grep -o 'rate *[0-9.]* TFLOP/s' "$R/$tag.log")"
}
for t in fp16 bf16; do for d in 64 80 96 128 256; do for n in 512 2048 8192; do
  h=$((2048 / d)); [ $d = 80 ] || [ $d = 96 ] && h=32
  shape=(--dtype $t --dim $d --seqlen $n --batch $((16384 / n)) --heads $h --kv-heads $((h / 4)) --causal 1)
  tag=${t}_d${d}_N${n}
  case $d in 64|128|256) run ${tag}_causal_rung15 15_persistent "${shape[@]}" ;; esac
  run ${tag}_causal 16_masks "${shape[@]}"
  run ${tag}_window 16_masks "${shape[@]}" --window $((n / 4)),0
  run ${tag}_softcap 16_masks "${shape[@]}" --softcap 50
  run ${tag}_alibi 16_masks "${shape[@]}" --alibi
  run ${tag}_sinks 16_masks "${shape[@]}" --sinks
done; done; done
