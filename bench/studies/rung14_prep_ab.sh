#!/bin/bash
# Rung 14's pre- and post-passes, the rung (one pre-pass, the 16-byte convert) against its
# unfused-prep ablation (a memset, warp-per-row statistics, the narrow convert; README, "Before and
# after the kernel"): the shapes where they weigh most (short rows, d = 64) and the training
# shapes of the backward's issue, each checked once and then timed in turn, ROUNDS rounds
# (the order alternating), one JSON and one log per run. The runner's time is the whole backward:
# pre-pass, kernel and convert. The check is --check auto: every (batch, KV head) group up to the
# reference's work limit, two sampled groups above it (the 8k and 16k shapes).
# usage: bench/studies/rung14_prep_ab.sh BIN_DIR OUT_DIR [ROUNDS] [ONLY]
#   ONLY: an extended regex on the shape names (e.g. 'N8192|d256'): run those shapes alone.
#   OTHER=<variant>: time the rung against another entry (default unfused-prep; fused-prep before
#   the rung took the fused passes, split-model before it took the modeled group split).
#   SHAPES=<lines of "dtype d seqlen batch heads kv_heads causal">: other shapes, e.g. the group
#   split against rung 11's rule on causal GQA shapes: OTHER=rule-split SHAPES="$(cat <<'X'
#   bf16 128 4096 2 16 4 1 ...
#   X
#   )" bench/studies/rung14_prep_ab.sh BIN OUT 3
#   EXTRA_ARGS=<runner flags for every run>, e.g. the deterministic mode against late-free:
#   OTHER=late-free EXTRA_ARGS="--deterministic 1" SHAPES=... bench/studies/rung14_prep_ab.sh BIN OUT 3
#   BINARY=<runner> BASE=<its entry>: another backward than rung 14's (its files still tagged "rung"),
#   e.g. rung 16's masked backward against its grid ablation on a window:
#   BINARY=16_masks BASE=backward OTHER=backward-tile-grid EXTRA_ARGS="--window 511,0" SHAPES=... \
#   bench/studies/rung14_prep_ab.sh BIN OUT 2
set -u
B=$1/${BINARY:-14_hopper_backward}
BASE=${BASE:-}
R=$2
ROUNDS=${3:-3}
ONLY=${4:-}
OTHER=${OTHER:-unfused-prep}
mkdir -p "$R"
# dtype d seqlen batch heads kv_heads causal
SHAPES=${SHAPES:-"fp16 64 1024 16 16 16 1
fp16 64 2048 8 32 32 1
fp16 128 512 32 16 16 0
bf16 128 4096 4 16 16 1
bf16 128 8192 1 32 8 1
bf16 128 16384 1 32 8 0
bf16 256 4096 2 16 16 1"}
while read -r t d n b h kv c; do
  shape=${t}_d${d}_N${n}_B${b}_H${h}_KV${kv}_c${c}
  [ -n "$ONLY" ] && ! grep -qE "$ONLY" <<< "$shape" && continue
  args=(--dtype "$t" --dim "$d" --seqlen "$n" --batch "$b" --heads "$h" --kv-heads "$kv" --causal "$c" --no-compare
        ${EXTRA_ARGS:-})
  for v in "$BASE" "$OTHER"; do  # the check, once per entry
    name=rung && [ "$v" != "$BASE" ] && name=$v
    timeout 300 "$B" ${v:+--variant $v} "${args[@]}" --check auto --iters 3 > "$R/${shape}_${name}_check.log" 2>&1
    echo "$shape $name check: $(grep -o 'PASS\|FAIL' "$R/${shape}_${name}_check.log" | head -1)"
  done
  for ((i = 0; i < ROUNDS; i++)); do
    order=("$BASE" "$OTHER")
    [ $((i % 2)) = 1 ] && order=("$OTHER" "$BASE")
    for v in "${order[@]}"; do
      name=rung && [ "$v" != "$BASE" ] && name=$v
      tag=${shape}_${name}_r$i
      timeout 60 "$B" ${v:+--variant $v} "${args[@]}" --check none --iters 50 --json "$R/$tag.json" > "$R/$tag.log" 2>&1
      echo "$tag $(grep -o 'rate *[0-9.]* TFLOP/s' "$R/$tag.log")"
    done
  done
done <<< "$SHAPES"
