#!/usr/bin/env bash
# Rung 14's main kernel at the training demo's shape (bf16, batch 2, 4k keys, 16/4 heads of 128,
# causal) under Nsight Compute's per-instruction view: each SASS instruction's sampled warp stalls
# by reason (ncu's source page), so that a reason the kernel-wide metrics single out (mio_throttle,
# eleven times cuDNN's: rung 14's README, "On the H200") is traced to the
# instructions that wait on it.
#
#   bench/studies/rung14_ncu_source.sh BIN_DIR OUT_DIR
#   NAME=<file prefix> ARGS=<runner flags>: another shape (default: rung14_demo and the demo's), e.g.
#   NAME=rung14_mha512 ARGS="--dtype fp16 --batch 32 --seqlen 512 --heads 16 --kv-heads 16 --dim 128 --causal 0"
#
# Writes OUT_DIR/NAME_source.csv.gz (ncu --page source --print-source sass --csv: one row per
# SASS instruction, its stall samples by reason), OUT_DIR/NAME_source.cmd (the runner's
# arguments) and OUT_DIR/NAME_top.txt (ncu_source_top.py: the instructions with the most
# samples, overall and per reason). The report itself (.ncu-rep) is not kept.
# Exit: 0 written; 77 no ncu; otherwise the failing command's code.
set -uo pipefail
. "$(dirname "$0")/ncu_common.sh"
ncu_study_start rung14_ncu_source.sh "$@"
N=${NAME:-rung14_demo}
A="${ARGS:---dtype bf16 --batch 2 --seqlen 4096 --heads 16 --kv-heads 4 --dim 128 --causal 1} --iters 1 --warmup 0 --check none --no-compare"
echo "14_hopper_backward $A" > "$OUT/${N}_source.cmd"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# shellcheck disable=SC2086
"${NCU:-ncu}" --section SourceCounters --section WarpStateStats -k regex:bwd_hopper_kernel -c 1 -o "$tmp/${N}" \
  "$BIN/14_hopper_backward" $A > "$OUT/${N}_ncu.log" 2>&1 || exit $?
"${NCU:-ncu}" -i "$tmp/${N}.ncu-rep" --page source --print-source sass --csv > "$OUT/${N}_source.csv" || exit $?
python3 "$(dirname "$0")/ncu_source_top.py" "$OUT/${N}_source.csv" > "$OUT/${N}_top.txt" || exit $?
gzip -9f "$OUT/${N}_source.csv"  # ncu_source_top.py reads the .gz as well
