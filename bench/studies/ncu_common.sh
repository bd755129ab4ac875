# Sourced by the Nsight Compute studies (rung14_fp8dq_ncu.sh, rung17_ncu.sh): the checks they
# open with, and the warps' stall reasons as ncu metrics.
#
#   ncu_study_start NAME BIN_DIR OUT_DIR   sets BIN and OUT (made); the script stops without both,
#                                          and exits 77 without ncu
#   ncu_stall_metrics                      prints smsp__average_warps_issue_stalled_<reason>_per_issue_active.ratio
#                                          for each reason, comma-separated

ncu_study_start() {
  BIN=${2:?usage: $1 BIN_DIR OUT_DIR}
  OUT=${3:?usage: $1 BIN_DIR OUT_DIR}
  command -v "${NCU:-ncu}" >/dev/null || { echo "$1: no ncu on PATH"; exit 77; }
  mkdir -p "$OUT"
}

ncu_stall_metrics() {
  local r out=""
  for r in barrier long_scoreboard wait math_pipe_throttle mio_throttle short_scoreboard membar sleeping dispatch_stall \
           selected not_selected no_instruction branch_resolving misc; do
    out=${out:+$out,}smsp__average_warps_issue_stalled_${r}_per_issue_active.ratio
  done
  echo "$out"
}
