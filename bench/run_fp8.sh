#!/usr/bin/env bash
# Rung 13's accuracy runs (FP8 attention), on a Hopper GPU:
#
#   bench/run_fp8.sh BUILD_OR_BIN_DIR OUT_DIR [--check sample|full] [--iters N] [--quick]
#                    [--record-as DIR]
#
# 13_fp8 on one shape (batch 4, seqlen 4096 for Q and K, heads = 2048 / head_dim, fp16, not causal)
# at head_dim 64, 128 and 256, on two inputs (random: N(0,1) plus an offset; outlier: a few channels
# of Q and K at 10-100x the others, where one scale per tensor or per head loses the small values),
# in four quantization modes:
#   per-tensor            --fp8-scale tensor
#   per-head              --fp8-scale head (the rung's default)
#   per-tensor+hadamard   --fp8-scale tensor --hadamard   (Q and K rotated by a random Hadamard matrix)
#   per-head+hadamard     --fp8-scale head --hadamard
# the variant fast-accum (P V accumulated in the tensor cores, no fp32 sum per block) on the random
# input, per-head, at each head_dim, and the variant p-unscaled (P cast to e4m3 as it is, without
# the scaling before its cast) on both
# inputs, per-head, head_dim 128. Each run writes its report (schema flashladder.run/1: "check" is
# the kernel on the dequantized inputs, "fp8" the end-to-end error against fp64 on the 16-bit
# inputs and the time of the quantization) to
#   OUT_DIR/fp8_accuracy/<input>_<mode>_d<head_dim>[_<variant>].json
# its output to OUT_DIR/fp8_accuracy.log, and the list of runs to OUT_DIR/fp8_accuracy/runs.json
# (date, git sha, whether the tree had local changes, per run the command relative to the
# repository root and its exit code). Runs go from the repository root with repo-relative paths;
# a folder outside the repository is written <build>/bin (binaries) or <out> (OUT_DIR), or
# --record-as DIR for OUT_DIR (bench/run_all.sh passes the results folder its staging folder
# becomes). --check: sample (default; sampled rows against fp64) or full (every row: minutes per
# run on the CPU). --iters: timed launches per run (default 20; the report's time and the
# quantization's). --quick: head_dim 128 only.
#
# Exit: 0 every run ran (a failing check, exit 1 of 13_fp8, is recorded in its report and in
# runs.json, not fatal); 77 no usable CUDA device; 2 bad arguments or no 13_fp8 in the bin
# folder; otherwise the first other exit code of a run (the other runs still run).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}

usage() { sed -n '2,31p' "$0"; }
bin="" out="" check=sample iters=20 quick=0 record_as=""
while [ $# -gt 0 ]; do
  case "$1" in
    --check) check=${2:-}; shift ;;
    --iters) iters=${2:-}; shift ;;
    --quick) quick=1 ;;
    --record-as) record_as=${2:-}; shift ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "run_fp8.sh: unknown argument '$1' (--help)" >&2; exit 2 ;;
    *)
      if [ -z "$bin" ]; then bin=$1
      elif [ -z "$out" ]; then out=$1
      else echo "run_fp8.sh: one bin folder and one output folder, got also '$1'" >&2; exit 2
      fi ;;
  esac
  shift
done
if [ -z "$bin" ] || [ -z "$out" ]; then
  echo "run_fp8.sh: usage: bench/run_fp8.sh BUILD_OR_BIN_DIR OUT_DIR [--check sample|full] [--iters N] [--quick]" >&2
  exit 2
fi
case "$check" in sample|full) ;; *) echo "run_fp8.sh: --check takes sample or full, got '$check'" >&2; exit 2 ;; esac
case "$iters" in ''|*[!0-9]*|0) echo "run_fp8.sh: --iters takes a count >= 1, got '$iters'" >&2; exit 2 ;; esac
if [ -x "$bin/13_fp8" ]; then :
elif [ -x "$bin/bin/13_fp8" ]; then bin=$bin/bin
else
  echo "run_fp8.sh: no 13_fp8 in $bin (build rung 13: it needs a CUDA toolkit with sm_90a)" >&2
  exit 2
fi
BIN=$(cd "$bin" && pwd)
mkdir -p "$out/fp8_accuracy"
OUT=$(cd "$out" && pwd)

# Run from the repository root with repo-relative paths, so no file records a machine's paths.
cd "$ROOT"
case "$BIN" in "$ROOT"/*) BIN=${BIN#"$ROOT"/}; bin_as=$BIN ;; *) bin_as="<build>/bin" ;; esac
case "$OUT" in "$ROOT"/*) OUT=${OUT#"$ROOT"/}; out_as=$OUT ;; *) out_as="<out>" ;; esac
[ -n "$record_as" ] && out_as=$record_as
ACC="$OUT/fp8_accuracy"
LOG="$OUT/fp8_accuracy.log"
: >"$LOG"
rm -f "$ACC"/*.json

dims=(64 128 256)
[ $quick = 1 ] && dims=(128)
runs=()  # "file<TAB>exit<TAB>command as recorded"
rc=0
one() {  # one NAME ARGS...: 13_fp8 on the shape with ARGS, report to $ACC/NAME.json
  local name=$1; shift
  local d=$1; shift
  local cmd=("$BIN/13_fp8" --batch 4 --seqlen 4096 --heads $((2048 / d)) --dim "$d" --dtype fp16 --causal 0
             "$@" --check "$check" --iters "$iters" --no-compare --json "$ACC/$name.json")
  local shown="${cmd[*]}"
  shown=${shown//"$BIN/"/"$bin_as/"}
  shown=${shown//"$OUT/"/"$out_as/"}
  echo "== $name: $shown" | tee -a "$LOG"
  local c=0
  "${cmd[@]}" >>"$LOG" 2>&1 || c=$?
  runs+=("$name.json"$'\t'"$c"$'\t'"$shown")
  case $c in
    0) ;;
    1) echo "   check failed (exit 1): recorded in $name.json" | tee -a "$LOG" ;;
    77) echo "run_fp8.sh: no usable CUDA device; nothing measured (exit 77)" >&2; exit 77 ;;
    *) echo "   failed (exit $c): see $LOG" | tee -a "$LOG"; [ $rc = 0 ] && rc=$c ;;
  esac
  return 0
}
for input in random outlier; do
  for d in "${dims[@]}"; do
    one "${input}_per-tensor_d$d" "$d" --input "$input" --fp8-scale tensor
    one "${input}_per-head_d$d" "$d" --input "$input" --fp8-scale head
    one "${input}_per-tensor+hadamard_d$d" "$d" --input "$input" --fp8-scale tensor --hadamard
    one "${input}_per-head+hadamard_d$d" "$d" --input "$input" --fp8-scale head --hadamard
  done
  # The choice of scaling P before its cast, measured: the variant that casts P as it is.
  one "${input}_per-head_d128_p-unscaled" 128 --input "$input" --fp8-scale head --variant p-unscaled
done
# The choice of summing each block's P V in fp32, measured: the variant that accumulates P V in
# the FP8 tensor cores across all blocks (its error grows with the number of blocks).
for d in "${dims[@]}"; do
  one "random_per-head_d${d}_fast-accum" "$d" --input random --fp8-scale head --variant fast-accum
done

sha=$(git -C "$ROOT" rev-parse --short=12 HEAD 2>/dev/null || echo "${FL_GIT_SHA:-unknown}")  # env: trees without .git
dirty=$(git -C "$ROOT" status --porcelain --untracked-files=no 2>/dev/null | grep -c . || true)
"$PY" - "$ACC/runs.json" "$sha" "$dirty" "$check" "${runs[@]}" <<'EOF'
import datetime, json, sys
path, sha, dirty, check, *runs = sys.argv[1:]
rows = []
for r in runs:
    name, code, command = r.split("\t", 2)
    rows.append({"file": name, "exit": int(code), "command": command})
json.dump({"schema": "flashladder.fp8-accuracy/1",
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "git_sha": sha, "local_changes": int(dirty) > 0, "check": check, "runs": rows},
          open(path, "w"), indent=1)
EOF
ok=$(printf '%s\n' "${runs[@]}" | awk -F'\t' '$2 == 0' | wc -l)
failed=$(printf '%s\n' "${runs[@]}" | awk -F'\t' '$2 == 1' | wc -l)
echo "run_fp8.sh: ${#runs[@]} runs in $ACC ($ok passed their check, $failed failed it, $(( ${#runs[@]} - ok - failed )) did not run)"
exit $rc
