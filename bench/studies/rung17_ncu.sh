#!/usr/bin/env bash
# Rung 17 (MLA decode) under Nsight Compute: the tensor pipe, the issue slots, shared-memory and
# L2 traffic and the warps' stall reasons on a compute-bound and a memory-side shape (rung 17's
# README, "Where it is not at the targets").
#
#   bench/studies/rung17_ncu.sh BIN_DIR OUT_DIR
#
# Writes OUT_DIR/ncu_<shape>.csv (ncu --csv, one row per metric and launch: the runner's checked
# launch and its timed one) and OUT_DIR/ncu_<shape>.cmd (the runner's arguments).
# Exit: 0 written; 77 no ncu; otherwise the failing command's code.
set -uo pipefail
. "$(dirname "$0")/ncu_common.sh"
ncu_study_start rung17_ncu.sh "$@"
M=gpu__time_duration.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active
M=$M,sm__inst_executed_pipe_tensor_op_hmma.sum,smsp__issue_active.avg.pct_of_peak_sustained_active
M=$M,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,l1tex__throughput.avg.pct_of_peak_sustained_active
M=$M,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sector_hit_rate.pct,$(ncu_stall_metrics)
A="--kv-heads 1 --dim 576 --dim-v 512 --v-in-k --dtype bf16 --iters 1 --warmup 0 --check none --no-compare --page-size 64"
rc=0
for s in "--batch 8 --seqlen-q 2 --seqlen-k 65536 --heads 128 --causal 1" "--batch 32 --seqlen-q 1 --seqlen-k 8192 --heads 128"; do
  n=$(echo "$s" | tr -d ' -')
  echo "17_mla $s $A" > "$OUT/ncu_$n.cmd"
  "${NCU:-ncu}" --metrics "$M" --csv -k regex:mla_decode "$BIN/17_mla" $s $A > "$OUT/ncu_$n.csv" || rc=$?
done
exit $rc
