#!/usr/bin/env bash
# Rung 14's backward kernel under Nsight Compute, the rung beside its fp8-dq variants (dS scaled
# per query row, and per tile: fp8-dq-tile): issue slots, instructions, the tensor pipe, shared-
# memory wavefronts and the warps' stall reasons, on one shape (rung 14's README, "dQ in e4m3":
# where the row scale's time goes).
#
#   bench/studies/rung14_fp8dq_ncu.sh BIN_DIR OUT_DIR
#
# Writes OUT_DIR/ncu_<variant>.csv (ncu --csv, one row per metric of the first bwd_hopper launch)
# and OUT_DIR/ncu_<variant>.cmd (the runner's arguments).
# Exit: 0 written; 77 no ncu; otherwise the failing command's code.
set -uo pipefail
. "$(dirname "$0")/ncu_common.sh"
ncu_study_start rung14_fp8dq_ncu.sh "$@"
M=gpu__time_duration.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active
M=$M,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active
M=$M,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,$(ncu_stall_metrics)
A="--dtype bf16 --batch 4 --seqlen 4096 --heads 16 --dim 128 --causal 1 --iters 1 --warmup 0 --check none --no-compare"
rc=0
for v in rung fp8-dq-tile fp8-dq; do
  flag=""
  [ "$v" != rung ] && flag="--variant $v"
  echo "14_hopper_backward $flag $A" > "$OUT/ncu_$v.cmd"
  "${NCU:-ncu}" --metrics "$M" --csv -c 1 -k regex:bwd_hopper "$BIN/14_hopper_backward" $flag $A > "$OUT/ncu_$v.csv" || rc=$?
done
exit $rc
