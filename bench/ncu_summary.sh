#!/usr/bin/env bash
# Nsight Compute figures the READMEs quote, exported as CSV (never the .ncu-rep files):
#
#   bench/ncu_summary.sh BIN_DIR OUT_DIR [TARGETS_REGEX]
#
# For each target below, one launch of the rung's kernels is profiled with a fixed metric list
# (`ncu --metrics ... --csv --page raw`, default clock control: base clocks) and written to
# OUT_DIR/ncu_<target>.csv: a header row, a units row, then one row per profiled kernel. Metrics this ncu does not know on this GPU
# are dropped (listed in the log) rather than failing the run.
#
#   rung05_d128  05_tensor_cores, prefill B=4 N=4096 H=16 d=128 fp16: tensor pipe, shared-memory
#                bank conflicts, instructions
#   rung06_d128  06_headdim_tiles, the same problem
#   rung09_d128, rung10_d128  09_wgmma_tma, 10_warp_specialized on the same problem (if built): the
#                tensor pipe and the stall reasons
#   rung11_d128  11_backward's main kernel on the same problem (if built)
#   rung13_d128  13_fp8 on the same problem (if built): the tensor pipe against the XU pipe (ex2,
#                the conversions to e4m3) that its softmax runs on
#   rung08_128k  08_flash_decoding, decode B=1 32/8 heads d=128 Sk=131072: DRAM throughput,
#                issue activity, instructions (split kernel and combine kernel)
#   rung14_bwd_{demo,gqa8k}, cudnn_bwd_{demo,gqa8k}
#                14_hopper_backward's main kernel (if built) and PyTorch SDPA cuDNN's backward kernels
#                (bench/studies/sdpa_bwd_shape.py, if PyTorch is there) on the training demo's
#                attention (bf16 B=2 N=4096 H=16/4 d=128 causal) and GQA 32/8 at 8k keys, causal:
#                where rung 14 still trails cuDNN (its README, "Where it is not at cuDNN's speed")
#   rung16_{causal,softcap}_d64, rung16_bwd_{causal,softcap}_d64
#                16_masks (if built), prefill B=4 N=4096 H=16 d=64 fp16 causal, with and without
#                softcap 50, forward and backward's main kernel: the XU pipe (ex2, tanh) against
#                the tensor pipe, softcap's price (rung 16's README, "Where it is not...")
#
# TARGETS_REGEX (bash regex): profile only the targets whose name matches, e.g. 'rung1[03]_d128'.
# Exit: 0 written; 77 no ncu or no GPU; otherwise ncu's exit code.
set -euo pipefail
BIN=${1:?usage: ncu_summary.sh BIN_DIR OUT_DIR}
OUT=${2:?usage: ncu_summary.sh BIN_DIR OUT_DIR}
ONLY=${3:-}
NCU=${NCU:-ncu}
command -v "$NCU" >/dev/null || { echo "ncu_summary.sh: no ncu on PATH; nothing profiled"; exit 77; }
mkdir -p "$OUT"

metrics=(
  gpu__time_duration.sum
  sm__cycles_elapsed.avg.per_second
  dram__throughput.avg.pct_of_peak_sustained_elapsed
  dram__bytes_read.sum
  sm__throughput.avg.pct_of_peak_sustained_elapsed
  sm__inst_executed.sum
  smsp__issue_active.avg.pct_of_peak_sustained_active
  sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active
  sm__inst_executed_pipe_tensor_op_hmma.sum
  smsp__inst_executed_op_ldsm.sum
  l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum
  l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum
  l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum
  launch__registers_per_thread
  launch__occupancy_limit_registers
  sm__warps_active.avg.pct_of_peak_sustained_active
  smsp__warps_active.avg.per_cycle_active
  lts__t_sectors_op_red.sum
  sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active
  sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active
  sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active
)
# Why warps wait (cycles per issued instruction, by reason): the Hopper rungs' and rung 11's
# READMEs explain their gaps with these.
for r in barrier short_scoreboard long_scoreboard wait mio_throttle math_pipe_throttle dispatch_stall \
         not_selected selected branch_resolving lg_throttle membar sleeping no_instruction; do
  metrics+=("smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio")
done
# Keep the metrics this ncu knows on this GPU (a metric is known when its base name is listed).
known=$("$NCU" --query-metrics 2>/dev/null | awk '{print $1}' || true)
use=()
for m in "${metrics[@]}"; do
  base=${m%%.*}
  if grep -qx "$base" <<<"$known"; then use+=("$m"); else echo "ncu_summary.sh: dropped unknown metric $m"; fi
done
[ ${#use[@]} -gt 0 ] || { echo "ncu_summary.sh: ncu lists none of the metrics"; exit 1; }
list=$(IFS=,; echo "${use[*]}")

profile() {  # profile NAME KERNEL_REGEX COUNT EXE ARGS...
  local name=$1 kernels=$2 count=$3; shift 3
  if [ -n "$ONLY" ] && ! [[ $name =~ $ONLY ]]; then return 0; fi
  local log="$OUT/ncu_$name.log"
  echo "ncu_summary.sh: [$name] $*"
  set +e
  "$NCU" --metrics "$list" --csv --page raw -k "regex:$kernels" -c "$count" --log-file "$log" "$@" >/dev/null
  local rc=$?
  set -e
  if [ $rc -ne 0 ]; then
    echo "ncu_summary.sh: [$name] ncu exit $rc:"; tail -20 "$log"
    return $rc
  fi
  # The CSV rows are the quoted lines of ncu's log; the rest is ncu's progress text.
  grep '^"' "$log" >"$OUT/ncu_$name.csv"
  rm -f "$log"
  # Lines: a header, a units row, then one row per kernel.
  echo "ncu_summary.sh: [$name] $(($(wc -l <"$OUT/ncu_$name.csv") - 2)) kernel row(s) -> ncu_$name.csv"
}

prefill=(--batch 4 --seqlen 4096 --heads 16 --dim 128 --iters 1 --warmup 0 --check none --no-compare)
profile rung05_d128 "flash_fwd_tc" 1 "$BIN/05_tensor_cores" "${prefill[@]}"
profile rung06_d128 "flash_fwd_tc" 1 "$BIN/06_headdim_tiles" "${prefill[@]}"
# The Hopper rungs (built only with sm_90a) and the backward rung, when built.
[ -x "$BIN/09_wgmma_tma" ] && profile rung09_d128 "wgmma_tma_fwd" 1 "$BIN/09_wgmma_tma" "${prefill[@]}"
[ -x "$BIN/10_warp_specialized" ] && profile rung10_d128 "ws_fwd" 1 "$BIN/10_warp_specialized" "${prefill[@]}"
[ -x "$BIN/11_backward" ] && profile rung11_d128 "bwd_main" 1 "$BIN/11_backward" "${prefill[@]}"
[ -x "$BIN/13_fp8" ] && profile rung13_d128 "fp8_fwd" 1 "$BIN/13_fp8" "${prefill[@]}"
profile rung08_128k "split_kv_attention|combine_splits" 2 "$BIN/08_flash_decoding" --batch 1 --seqlen-q 1 \
  --seqlen-k 131072 --heads 32 --kv-heads 8 --dim 128 --iters 1 --warmup 0 --check none --no-compare
demo=(--dtype bf16 --batch 2 --seqlen 4096 --heads 16 --kv-heads 4 --dim 128 --causal 1)
gqa8k=(--dtype bf16 --batch 1 --seqlen 8192 --heads 32 --kv-heads 8 --dim 128 --causal 1)
if [ -x "$BIN/14_hopper_backward" ]; then
  one=(--iters 1 --warmup 0 --check none --no-compare)
  profile rung14_bwd_demo "bwd_hopper_kernel" 1 "$BIN/14_hopper_backward" "${demo[@]}" "${one[@]}"
  profile rung14_bwd_gqa8k "bwd_hopper_kernel" 1 "$BIN/14_hopper_backward" "${gqa8k[@]}" "${one[@]}"
fi
here=$(cd "$(dirname "$0")" && pwd)
if python3 -c "import torch" 2>/dev/null; then
  # cuDNN's backward: its kernels after the forward's (the regex skips the forward's fprop kernel).
  profile cudnn_bwd_demo "bprop|dgrad|bwd|dq|dkdv|convert" 4 python3 "$here/studies/sdpa_bwd_shape.py" \
    --backend cudnn "${demo[@]}"
  profile cudnn_bwd_gqa8k "bprop|dgrad|bwd|dq|dkdv|convert" 4 python3 "$here/studies/sdpa_bwd_shape.py" \
    --backend cudnn "${gqa8k[@]}"
fi
if [ -x "$BIN/16_masks" ]; then
  masked=(--batch 4 --seqlen 4096 --heads 16 --dim 64 --causal 1 --iters 1 --warmup 0 --check none --no-compare)
  profile rung16_causal_d64 "masked_fwd_kernel" 1 "$BIN/16_masks" "${masked[@]}"
  profile rung16_softcap_d64 "masked_fwd_kernel" 1 "$BIN/16_masks" "${masked[@]}" --softcap 50
  profile rung16_bwd_causal_d64 "bwd_hopper_kernel" 1 "$BIN/16_masks" --variant backward "${masked[@]}"
  profile rung16_bwd_softcap_d64 "bwd_hopper_kernel" 1 "$BIN/16_masks" --variant backward "${masked[@]}" --softcap 50
fi
