#!/bin/bash
# Rung 16 with attention dropout against the same call without it, forward and backward (the
# `backward` entry), on the issue's shape (bf16, d = 128, 4k keys, causal) and beside it: each
# entry checked once with dropout against the fp64 reference under the same mask, then timed in
# turn, ROUNDS rounds (the order alternating), one JSON and one log per run. The issue's goal is
# dropout's forward + backward within 15% of the time without it; rung 16's README (section 7)
# predicts more from its instruction count. Each round also times the dropout call with the
# published Philox4x32-10 (`--dropout-rounds 10`, tagged `p<P>-philox10`) beside the rung's 7 rounds.
# usage: bench/studies/rung16_dropout_ab.sh BIN_DIR OUT_DIR [ROUNDS] [P]
set -u
B=$1/16_masks
R=$2
ROUNDS=${3:-3}
P=${4:-0.1}
mkdir -p "$R"
# dtype d seqlen batch heads kv_heads causal
SHAPES=${SHAPES:-"bf16 128 4096 4 16 16 1
bf16 128 4096 4 16 16 0
fp16 64 4096 4 16 16 1
bf16 128 8192 1 32 8 1"}
while read -r t d n b h kv c; do
  shape=${t}_d${d}_N${n}_B${b}_H${h}_KV${kv}_c${c}
  args=(--dtype "$t" --dim "$d" --seqlen "$n" --batch "$b" --heads "$h" --kv-heads "$kv" --causal "$c" --no-compare)
  for v in "" backward; do
    timeout 300 "$B" ${v:+--variant $v} "${args[@]}" --dropout "$P" --check auto --iters 3 \
      > "$R/${shape}_${v:-forward}_dropout_check.log" 2>&1
    for ((r = 0; r < ROUNDS; r++)); do
      if ((r % 2 == 0)); then order="0 $P $P-philox10"; else order="$P-philox10 $P 0"; fi
      for e in $order; do
        p=${e%-philox10}
        extra=()
        [[ $e == *-philox10 ]] && extra=(--dropout-rounds 10)
        tag=${shape}_${v:-forward}_p${e}_r$r
        timeout 60 "$B" ${v:+--variant $v} "${args[@]}" --dropout "$p" "${extra[@]}" --check none --iters 50 \
          --json "$R/$tag.json" > "$R/$tag.log" 2>&1
      done
    done
  done
done <<< "$SHAPES"
