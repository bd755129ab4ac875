#!/usr/bin/env bash
# MLA's bench in one command (rung 17 and rung 16's 192/128 prefill against PyTorch), on an sm_90 GPU:
#
#   bench/studies/mla_decode.sh BIN_DIR OUT_DIR [--quick]
#
#   1. bench/run_all.sh BIN_DIR --family mla-decode,mla-prefill,mla-prefill-backward --dtype bf16 --skip tour
#      --results OUT_DIR: the ceilings (the floors' rates), ladder_bench on both families,
#      bench/pytorch/torch_mla.py (SDPA on the decompressed cache; on the 192/128 prefill),
#      report.md, meta.json
#   2. rung 17's runner, checked against fp64 on sampled rows (--check sample), on the issue's
#      shape: batch 32 at 8k keys, 128 heads, seqlen_q 1 and 2 (causal)     -> rung17_*.json, .log
#   3. bench/pytorch/torch_mla_layer.py: one DeepSeek-V3 decode layer end to end at batch 32, 8k
#      keys, the ladder's way (flashladder.flash_mla_with_kvcache from BIN_DIR/../python, when
#      the package has it) against SDPA's on the decompressed cache       -> torch_mla_layer.json, .log
#   4. meta.json gains "driver": each step's command (repository-relative) and exit code
#
# About 3 minutes on an H200 (most of it ladder_bench making each shape's latent cache on the host,
# and SDPA reading caches of up to 43 GB); --quick: ladder_bench --fl_quick's shapes and 20 timed
# calls per PyTorch shape.
# Every step runs whatever the one before it did; each failure is said here and in
# OUT_DIR/mla_decode.log. Exit: 0 when every step ran; 77 without a usable CUDA device (step 1);
# 2 for bad arguments; else the first failing step's code.
# The docs' blocks over OUT_DIR (once committed as bench/results/<gpu>/mla):
#   <!-- gen:mla-decode gpu=<gpu>/mla -->, gen:mla-prefill, gen:mla-prefill-backward, gen:mla-layer (bench/docblocks/mla.py).
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PY=${PYTHON:-python3}
quick=()
args=()
for a in "$@"; do
  case "$a" in
    --quick) quick=(--quick) ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    *) args+=("$a") ;;
  esac
done
if [ ${#args[@]} -ne 2 ]; then
  echo "usage: bench/studies/mla_decode.sh BIN_DIR OUT_DIR [--quick]" >&2
  exit 2
fi
BIN=${args[0]} OUT=${args[1]}
[ -x "$BIN/ladder_bench" ] || { [ -x "$BIN/bin/ladder_bench" ] && BIN=$BIN/bin; }
if [ ! -x "$BIN/ladder_bench" ]; then
  echo "mla_decode.sh: no ladder_bench in $BIN (build it: cmake --preset release && cmake --build --preset release)" >&2
  exit 2
fi
BIN=$(cd "$BIN" && pwd)
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
LOG=$OUT/mla_decode.log
: >"$LOG"
cd "$ROOT"
rel() {  # a command as run from the repository root: no path of this machine
  local p="$*"
  [[ $OUT == "$ROOT"/* ]] || p=${p//$OUT/<out>}
  [[ $BIN == "$ROOT"/* ]] || p=${p//$BIN/<build>\/bin}
  echo "${p//$ROOT\//}"
}
steps=()  # "exit<TAB>command" per step, for meta.json
first_rc=0
run_step() {  # run_step NAME CMD...: runs CMD (output to the terminal and the log), records its exit code
  local name=$1; shift
  echo "mla_decode.sh: [$name] $(rel "$*")" | tee -a "$LOG"
  "$@" 2>&1 | tee -a "$LOG"
  local rc=${PIPESTATUS[0]}
  steps+=("$rc	$(rel "$*")")
  if [ "$rc" != 0 ]; then
    echo "mla_decode.sh: [$name] exited $rc (see $(rel "$LOG")); going on" | tee -a "$LOG"
    [ "$first_rc" = 0 ] && first_rc=$rc
  fi
  return 0
}

# ---- 1. the families, PyTorch's side and the report ------------------------------------------
run_step families bash "$ROOT/bench/run_all.sh" "$BIN" --family mla-decode,mla-prefill,mla-prefill-backward --dtype bf16 --skip tour \
  --results "$OUT" "${quick[@]}"
if [ "$first_rc" = 77 ]; then
  echo "mla_decode.sh: no usable CUDA device; nothing measured" | tee -a "$LOG"
  exit 77
fi

# ---- 2. rung 17 checked on the issue's shape -------------------------------------------------
if [ -x "$BIN/17_mla" ]; then
  for sq in 1 2; do
    causal=0
    [ $sq -gt 1 ] && causal=1
    f=rung17_b32_h128_sq${sq}_sk8k
    run_step "rung17 sq$sq" "$BIN/17_mla" --batch 32 --seqlen-q $sq --seqlen-k 8192 --heads 128 --kv-heads 1 \
      --dim 576 --dim-v 512 --v-in-k 1 --page-size 64 --causal $causal --dtype bf16 --check sample --iters 30 \
      --no-compare --json "$OUT/$f.json"
  done
else
  echo "mla_decode.sh: [rung17] no $BIN/17_mla (it needs a toolkit with sm_90a): not checked" | tee -a "$LOG"
  steps+=("2	$(rel "$BIN")/17_mla (not built)")
  [ "$first_rc" = 0 ] && first_rc=2
fi

# ---- 3. one layer end to end -------------------------------------------------------------------
pkg=$(cd "$BIN/.." && pwd)/python
[ -d "$pkg/flashladder" ] && export PYTHONPATH=$pkg${PYTHONPATH:+:$PYTHONPATH}
run_step layer "$PY" "$ROOT/bench/pytorch/torch_mla_layer.py" --out "$OUT" --batch 32 --seqlen-k 8192 \
  ${quick:+--iters 20}

# ---- 4. meta.json: the driver's steps ----------------------------------------------------------
"$PY" - "$OUT/meta.json" "$(rel "$0")" "${quick[*]:-}" "${steps[@]}" <<'EOF' 2>&1 | tee -a "$LOG"
import datetime, json, os, subprocess, sys
path, script, quick, *steps = sys.argv[1:]
meta = json.load(open(path)) if os.path.exists(path) else {}
if not meta.get("device"):  # step 1 failed before it wrote meta.json
    try:
        meta["device"] = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                                        capture_output=True, text=True).stdout.splitlines()[0].strip()
    except (OSError, IndexError):
        meta["device"] = "unknown"
    meta.setdefault("date", datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"))
    meta.setdefault("git_sha", subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True,
                                              text=True).stdout.strip() or "unknown")
meta["driver"] = {"command": " ".join(x for x in (script, "BIN_DIR", "OUT_DIR", quick) if x),
                  "steps": [{"exit": int(s.split("\t", 1)[0]), "command": s.split("\t", 1)[1]} for s in steps]}
json.dump(meta, open(path, "w"), indent=1)
print("mla_decode.sh: %s: %d step(s), %d failed" % (path, len(steps), sum(1 for s in steps if not s.startswith("0\t"))))
EOF
echo "mla_decode.sh: wrote $OUT (exit $first_rc)"
exit "$first_rc"
