#!/bin/bash
# Rung 16's wider grids beyond the masks families' one shape: the machinery's cost and the
# modifiers'. Hidden 2048 (heads = 2048 / d; 32 heads at d = 80 and 96, as Phi-3 and GPT-NeoX-style
# models) on GQA 4:1, batch x seqlen = 16k tokens; cases: causal (rung 16 beside the rung it builds
# on), a causal window of N / 4 keys, softcap 50, ALiBi, sinks (all causal). One JSON and one log
# each.
#   forward  (bench/results/<gpu>/rung16/sweep/): fp16 and bf16; head_dim 64, 80, 96, 128, 256 (80
#            and 96 on the d = 128 tiles); 512, 2k and 8k keys; beside rung 15.
#   backward (rung16/bwd-sweep/, bench/studies/rung16_bwd_sweep.sh): bf16 at head_dim 64, 96, 128 and fp16
#            at 128; 2k and 8k keys; 16_masks[backward] beside rung 14.
# usage: bench/studies/rung16_sweep.sh BIN_DIR OUT_DIR [backward]
set -u
BIN=$1
R=$2
MODE=${3:-forward}
mkdir -p "$R"
run() {  # tag, binary, then the runner's arguments
  local tag=$1 bin=$2; shift 2
  timeout 60 "$BIN/$bin" "$@" --check none --iters 20 --no-compare --json "$R/$tag.json" > "$R/$tag.log" 2>&1
  echo "$tag $(grep -o 'rate *[0-9.]* TFLOP/s' "$R/$tag.log" | tail -1)"
}
cell() {  # dtype, head_dim, keys: every case; rung 16's entry and the baseline's binary from MODE
  local t=$1 d=$2 n=$3 h=$((2048 / $2))
  { [ $d = 80 ] || [ $d = 96 ]; } && h=32
  local shape=(--dtype $t --dim $d --seqlen $n --batch $((16384 / n)) --heads $h --kv-heads $((h / 4)) --causal 1)
  local tag=${t}_d${d}_N${n} entry=(16_masks) base=15_persistent suffix=rung15
  [ "$MODE" = backward ] && entry=(16_masks --variant backward) base=14_hopper_backward suffix=rung14
  case $d in 64|128|256) run ${tag}_causal_$suffix $base "${shape[@]}" ;; esac
  run ${tag}_causal "${entry[@]}" "${shape[@]}"
  run ${tag}_window "${entry[@]}" "${shape[@]}" --window $((n / 4)),0
  run ${tag}_softcap "${entry[@]}" "${shape[@]}" --softcap 50
  run ${tag}_alibi "${entry[@]}" "${shape[@]}" --alibi
  run ${tag}_sinks "${entry[@]}" "${shape[@]}" --sinks
}
if [ "$MODE" = backward ]; then
  for c in bf16:64 bf16:96 bf16:128 fp16:128; do for n in 2048 8192; do cell ${c%%:*} ${c##*:} $n; done; done
else
  for t in fp16 bf16; do for d in 64 80 96 128 256; do for n in 512 2048 8192; do cell $t $d $n; done; done; done
fi
