#!/bin/bash
# Rung 15's ablation and tile runs (bench/results/<gpu>/rung15/ablation/): the rung and each variant
# with one idea turned off (no-persistent, no-epilogue-overlap, fifo, static, pair-stores) or one
# added (two Q tiles: d64-q2, d128-q2) at head_dim 64, 128
# and 256, 512, 2k and 8k keys (batch x seqlen = 16k tokens, hidden 2048), causal and not, fp16;
# the tile variants beside the rung at their head_dim in fp16 and bf16; and the rung and its
# schedule variants on the varlen family's packed batch (64 sequences of 128..8k tokens, 32/8
# heads, head_dim 128). One JSON and one log each.
# usage: bench/studies/rung15_ablation.sh BIN_DIR OUT_DIR
set -u
B=$1/15_persistent
R=$2
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$R"
run() {  # tag, then the runner's arguments
  local tag=$1; shift
  timeout 60 "$B" "$@" --check none --iters 30 --no-compare --json "$R/$tag.json" > "$R/$tag.log" 2>&1
  echo "$tag $(grep -o 'rate *[0-9.]* TFLOP/s' "$R/$tag.log")"
}
for d in 64 128 256; do for c in 0 1; do for n in 512 2048 8192; do
  shape=(--dim $d --seqlen $n --batch $((16384 / n)) --heads $((2048 / d)) --causal $c)
  q2=""; [ $d = 64 ] && q2=d64-q2; [ $d = 128 ] && q2=d128-q2
  for v in "" no-persistent no-epilogue-overlap fifo static pair-stores $q2; do
    run fp16_d${d}_N${n}_c${c}_${v:-rung} ${v:+--variant $v} "${shape[@]}"
  done
  for t in fp16 bf16; do
    case $d in 64) tiles="d64-128x192" ;; 128) tiles="d128-128x128 d128-128x176" ;; 256) tiles="d256-128x64" ;; esac
    [ $t = bf16 ] && run bf16_d${d}_N${n}_c${c}_rung --dtype bf16 "${shape[@]}"
    for v in $tiles; do run ${t}_d${d}_N${n}_c${c}_$v --variant $v --dtype $t "${shape[@]}"; done
  done
done; done; done
lens=$(python3 -c "import sys; sys.path.insert(0, '$ROOT/bench/pytorch'); import torch_sdpa as t; v = t.VARLEN; print(','.join(map(str, t.mixed_lengths(v['count'], v['lo'], v['hi'], v['seed']))))")
for c in 0 1; do for v in "" no-persistent no-epilogue-overlap fifo static pair-stores; do
  run bf16_varlen_c${c}_${v:-rung} ${v:+--variant $v} --dtype bf16 --seqlens-q "$lens" --heads 32 --kv-heads 8 --dim 128 --causal $c
done; done
