#!/usr/bin/env bash
# One command for the whole benchmark, on a machine with a GPU:
#
#   bench/run_all.sh [BUILD_OR_BIN_DIR] [--quick] [--family F[,F...]] [--dtype fp16|bf16] [--no-torch]
#                    [--ncu] [--skip STEP[,STEP...]] [--results DIR] [-- LADDER_ARGS...]
#
#   0. ceilings: the measured FFMA, mma.sync, cuBLAS and copy rates   -> ceilings.json
#   1. ladder_bench: every rung over the sweeps of the families       -> ladder_bench.json
#   2. bench/pytorch/torch_sdpa.py on the same shapes, if PyTorch imports      -> torch_sdpa.json
#      (families prefill, decode, backward, backward-gqa(8), ablation and fp8: SDPA's backward pass
#      alone for the backward families, the 16-bit backends for fp8)
#      bench/pytorch/torch_flex.py on the masks families (FlexAttention, and    -> torch_flex.json
#      SDPA flash / cuDNN on their causal cells)
#      bench/pytorch/torch_mla.py on the MLA families (SDPA on the decompressed -> torch_mla.json
#      cache, and on the 192/128 prefill)
#   3. rung 07's --sweep at head_dim 64 and 128 (family prefill)       -> sweep07_d64.json, sweep07_d128.json
#   4. rung 08 with --splits 1..64 and the heuristic (family decode)   -> decode_splits/*.json
#   5. rung 13's accuracy runs, bench/run_fp8.sh (family fp8)          -> fp8_accuracy/*.json
#   6. with --ncu: bench/ncu_summary.sh (Nsight Compute, a few kernels) -> ncu_*.csv
#   7. the tour (every rung on its default problems)                  -> tour.txt
#   8. bench/report.py                                                -> report.md
#   9. meta.json: device, date, git sha (and whether the tree had local changes), the commands,
#      written relative to the repository root
#
# Families (bench/README.md): prefill, decode, ablation, paged, backward, backward-gqa, backward-gqa8, fp8,
# hopper-prefill, llama, varlen, varlen-backward, masks, masks-backward, mla-decode, mla-prefill, mla-prefill-backward,
# decode-fp8;
# "all" (the default) is all seventeen. bench/studies/mla_decode.sh runs the MLA families (bf16).
# Everything goes to bench/results/<gpu-name-slug>/ (e.g. bench/results/nvidia-h100-80gb-hbm3/),
# replacing that GPU's previous files; logs of each step sit next to them (*.log).
# BUILD_OR_BIN_DIR defaults to build/release (then any build/*/bin with ladder_bench).
# --quick: fewer shapes (ladder_bench --fl_quick, torch_sdpa.py --quick, 4 split counts).
# --dtype: the inputs' 16-bit type for ladder_bench (--fl_dtype) and torch_sdpa.py (--dtype); fp16
# by default.
# --torch-backends: PyTorch's SDPA backends torch_sdpa.py runs (--backends), all four by default.
# --skip: leave out steps by name (ceilings, torch, sweep07, splits, fp8, tour), e.g. in all but
# one part of a run split by rungs (-- --fl_rungs=...), so each step runs once.
# A run may be made in parts (--family prefill,ablation into one folder, --family decode,paged
# into another) and joined with bench/merge_results.py.
# Exit: 0 done; 77 no GPU; otherwise the failing step's code.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}

bin="" quick=0 torch=1 ncu=0 results="" family=all skip="" dtype=fp16 backends=flash,cudnn,efficient,math ladder_args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=1 ;;
    --no-torch) torch=0 ;;
    --ncu) ncu=1 ;;
    --family) family=$2; shift ;;
    --dtype) dtype=$2; shift ;;
    --torch-backends) backends=$2; shift ;;
    --skip) skip=$2; shift ;;
    --results) results=$2; shift ;;
    --) shift; ladder_args=("$@"); break ;;
    -h|--help) sed -n '2,39p' "$0"; exit 0 ;;
    *) bin=$1 ;;
  esac
  shift
done

# ---- find the binaries --------------------------------------------------------------------------
find_bin() {
  local d
  for d in "$@"; do
    [ -x "$d/ladder_bench" ] && { echo "$d"; return; }
    [ -x "$d/bin/ladder_bench" ] && { echo "$d/bin"; return; }
  done
  # Newest build/*/bin/ladder_bench.
  ls -t "$ROOT"/build/*/bin/ladder_bench 2>/dev/null | head -1 | xargs -r dirname || true
}
[ "$family" = all ] && family=prefill,decode,ablation,paged,backward,backward-gqa,backward-gqa8,fp8,hopper-prefill,llama,varlen,varlen-backward,masks,masks-backward,mla-decode,mla-prefill,mla-prefill-backward,decode-fp8
for f in ${family//,/ }; do
  case "$f" in prefill|decode|ablation|paged|backward|backward-gqa|backward-gqa8|fp8|hopper-prefill|llama|varlen|varlen-backward|masks|masks-backward|mla-decode|mla-prefill|mla-prefill-backward|decode-fp8) ;;
    *) echo "run_all.sh: --family takes prefill, decode, ablation, paged, backward, backward-gqa, backward-gqa8, fp8, hopper-prefill, llama, varlen, varlen-backward, masks, masks-backward, mla-decode, mla-prefill, mla-prefill-backward, decode-fp8 or all (comma-separated), got '$f'" >&2; exit 2 ;;
  esac
done
has_family() { [[ ",$family," == *",$1,"* ]]; }
for st in ${skip//,/ }; do
  case "$st" in ceilings|torch|sweep07|splits|fp8|tour) ;;
    *) echo "run_all.sh: --skip takes ceilings, torch, sweep07, splits, fp8 or tour (comma-separated), got '$st'" >&2; exit 2 ;;
  esac
done
runs() { [[ ",$skip," != *",$1,"* ]]; }  # runs STEP: not named by --skip
[ "$torch" = 0 ] || runs torch || torch=0
if [ -n "$bin" ]; then BIN=$(find_bin "$bin"); else BIN=$(find_bin "$ROOT/build/release"); fi
if [ -z "$BIN" ]; then
  echo "run_all.sh: no ladder_bench found${bin:+ in $bin}. Build it first:" >&2
  echo "  cmake --preset release && cmake --build --preset release" >&2
  exit 2
fi
BIN=$(cd "$BIN" && pwd)
# Run from the repository root with repo-relative binaries, so no file records a machine's paths.
cd "$ROOT"
case "$BIN" in "$ROOT"/*) BIN=${BIN#"$ROOT"/} ;; esac
echo "run_all.sh: binaries from $BIN"

STAGE=$(mktemp -d "${TMPDIR:-/tmp}/fl-bench.XXXXXX")
finished=0  # an interrupted run keeps what it measured so far
trap 'if [ $finished = 1 ]; then rm -rf "$STAGE"; else echo "run_all.sh: stopped; partial results in $STAGE" >&2; fi' EXIT
commands=()
step() {  # step NAME LOG CMD...: runs CMD, output to the terminal and to LOG
  local name=$1 log=$2; shift 2
  echo "run_all.sh: [$name] $*"
  commands+=("$*")
  "$@" 2>&1 | tee "$STAGE/$log"
  return "${PIPESTATUS[0]}"
}

# ---- 0. the ceilings ----------------------------------------------------------------------------
if runs ceilings && [ -x "$BIN/ceilings" ]; then
  step ceilings ceilings.log "$BIN/ceilings" --json "$STAGE/ceilings.json" ||
    echo "run_all.sh: [ceilings] failed (see ceilings.log); the report goes on without measured ceilings"
fi

# ---- 1. the ladder ------------------------------------------------------------------------------
qflag=()
[ $quick = 1 ] && qflag=(--fl_quick)
set +e
step ladder ladder_bench.log "$BIN/ladder_bench" "${qflag[@]}" --fl_family="$family" --fl_dtype="$dtype" --benchmark_out="$STAGE/ladder_bench.json" \
  --benchmark_out_format=json --benchmark_counters_tabular=true "${ladder_args[@]}"
rc=$?
set -e
if [ $rc = 77 ]; then finished=1; echo "run_all.sh: no usable CUDA device; nothing measured" >&2; exit 77; fi
[ $rc = 0 ] || { echo "run_all.sh: ladder_bench failed (exit $rc)" >&2; exit $rc; }

device=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["context"].get("device","unknown"))' \
  "$STAGE/ladder_bench.json")
slug=$("$PY" -c 'import sys; sys.path.insert(0, sys.argv[1]); import results_io; print(results_io.slug(sys.argv[2]))' \
  "$ROOT/bench" "$device")
OUT=${results:-$ROOT/bench/results/$slug}
echo "run_all.sh: device '$device' -> $OUT"

# ---- 2. PyTorch SDPA ----------------------------------------------------------------------------
torch_json=()
if [ $torch = 0 ]; then
  echo "run_all.sh: [torch] skipped (--no-torch)"
elif ! "$PY" -c 'import torch' 2>/dev/null; then
  echo "run_all.sh: [torch] skipped (PyTorch does not import in $PY)"
else
  tq=()
  [ $quick = 1 ] && tq=(--quick)
  tfam=""
  for f in prefill decode backward backward-gqa backward-gqa8 ablation fp8 hopper-prefill llama varlen varlen-backward; do
    has_family $f && tfam=${tfam:+$tfam,}$f
  done
  ffam=""
  for f in masks masks-backward; do
    has_family $f && ffam=${ffam:+$ffam,}$f
  done
  mfam=""
  for f in mla-decode mla-prefill mla-prefill-backward; do
    has_family $f && mfam=${mfam:+$mfam,}$f
  done
  if [ -z "$tfam" ] && [ -z "$ffam" ] && [ -z "$mfam" ]; then
    echo "run_all.sh: [torch] skipped (PyTorch runs every family but paged)"
  elif [ -n "$tfam" ]; then
  step torch torch_sdpa.log "$PY" "$ROOT/bench/pytorch/torch_sdpa.py" --family "$tfam" --dtype "$dtype" --backends "$backends" --out "$STAGE/torch_sdpa.json" "${tq[@]}" ||
    echo "run_all.sh: [torch] torch_sdpa.py failed (see torch_sdpa.log); the report goes on without it"
  fi
  if [ -f "$STAGE/torch_sdpa.json" ]; then torch_json=(--torch "$STAGE/torch_sdpa.json"); fi
  # FlexAttention on the masks families (SDPA flash / cuDNN on their causal cells), into
  # torch_flex.json beside ladder_bench.json, where bench/report.py finds it.
  if [ -n "$ffam" ]; then
    fb=""  # the SDPA backends torch_flex.py times beside FlexAttention: flash and cuDNN of --torch-backends
    for b in ${backends//,/ }; do
      case "$b" in flash|cudnn) fb=${fb:+$fb,}$b ;; esac
    done
    step torch torch_flex.log "$PY" "$ROOT/bench/pytorch/torch_flex.py" --family "$ffam" --dtype "$dtype" --backends "${fb:-none}" --out "$STAGE/torch_flex.json" "${tq[@]}" ||
      echo "run_all.sh: [torch] torch_flex.py failed (see torch_flex.log); the report goes on without it"
  fi
  # SDPA on the MLA families (the decompressed cache; the 192/128 prefill), into torch_mla.json
  # beside ladder_bench.json, where bench/report.py finds it.
  if [ -n "$mfam" ]; then
    step torch torch_mla.log "$PY" "$ROOT/bench/pytorch/torch_mla.py" --family "$mfam" --dtype "$dtype" --backends "$backends" --out "$STAGE/torch_mla.json" "${tq[@]}" ||
      echo "run_all.sh: [torch] torch_mla.py failed (see torch_mla.log); the report goes on without it"
  fi
fi

# ---- 3. rung 07's sweep -------------------------------------------------------------------------
if runs sweep07 && has_family prefill && [ -x "$BIN/07_dv_tiling" ]; then
  for d in 64 128; do
    step sweep07 "sweep07_d$d.log" "$BIN/07_dv_tiling" --sweep --dim "$d" --batch 8 --heads 16 --seqlen-q 2048 \
      --seqlen-k 2048 --iters 10 --json "$STAGE/sweep07_d$d.json" ||
      echo "run_all.sh: [sweep07] head_dim $d: a check failed or the sweep stopped (see sweep07_d$d.log)"
  done
fi

# ---- 4. rung 08's split study --------------------------------------------------------------------
if runs splits && has_family decode && [ -x "$BIN/08_flash_decoding" ]; then
  mkdir -p "$STAGE/decode_splits"
  lengths=(4096 16384 65536 131072) counts=(1 2 4 8 16 32 64 0)  # 0 = the heuristic
  [ $quick = 1 ] && lengths=(16384 131072) counts=(1 8 64 0)
  for sk in "${lengths[@]}"; do
    for s in "${counts[@]}"; do
      f="$STAGE/decode_splits/b1_hkv8_sk${sk}_s${s}.json"
      "$BIN/08_flash_decoding" --batch 1 --seqlen-q 1 --seqlen-k "$sk" --heads 32 --kv-heads 8 --dim 128 \
        --splits "$s" --check sample --iters 20 --no-compare --json "$f" >>"$STAGE/decode_splits.log" 2>&1 ||
        echo "run_all.sh: [splits] Sk=$sk splits=$s failed (see decode_splits.log)"
      if [ -f "$f" ]; then
        "$PY" -c 'import json,sys; r=json.load(open(sys.argv[1])); t=r.get("timing",{})
print("run_all.sh: [splits] Sk=%-6s --splits %-2s %8.1f GB/s  check %s" % (sys.argv[2], sys.argv[3],
      t.get("gbps", 0), "ok" if r["check"]["pass"] else "FAILED"))' "$f" "$sk" "$s"
      fi
    done
  done
  commands+=("08_flash_decoding --splits {${counts[*]}} x Sk {${lengths[*]}} (decode_splits.log)")
fi

# ---- 5. rung 13's accuracy runs --------------------------------------------------------------------
# The FP8 rung's errors per input and quantization mode (bench/run_fp8.sh): the fp8 family's speed
# sweep above times it, this measures what the speed costs in accuracy. A failing check is kept in
# its report; a run that fails otherwise is said and the report goes on.
if runs fp8 && has_family fp8; then
  if [ -x "$BIN/13_fp8" ]; then
    # The commands in fp8_accuracy/runs.json name the folder the staging folder becomes (meta.json's rule).
    case "$OUT" in "$ROOT"/*) fp8_as=${OUT#"$ROOT"/} ;; /*) fp8_as="<part>" ;; *) fp8_as=$OUT ;; esac
    fq=()
    [ $quick = 1 ] && fq=(--quick)
    frc=0
    step fp8 run_fp8.log bash "$ROOT/bench/run_fp8.sh" "$BIN" "$STAGE" "${fq[@]}" --record-as "$fp8_as" || frc=$?
    [ $frc = 0 ] || echo "run_all.sh: [fp8] run_fp8.sh exited $frc (see run_fp8.log, fp8_accuracy.log)"
  else
    echo "run_all.sh: [fp8] no $BIN/13_fp8 (rung 13 needs a toolkit with sm_90a): no accuracy runs"
  fi
fi

# ---- 6. Nsight Compute -----------------------------------------------------------------------------
if [ $ncu = 1 ]; then
  step ncu ncu.log bash "$ROOT/bench/ncu_summary.sh" "$BIN" "$STAGE" ||
    echo "run_all.sh: [ncu] failed (see ncu.log); no ncu_*.csv this run"
fi

# ---- 7. the tour ---------------------------------------------------------------------------------
if runs tour && [ -x "$BIN/tour" ]; then
  step tour tour.txt "$BIN/tour" || echo "run_all.sh: [tour] a rung failed its check (see tour.txt)"
fi

# ---- 8. report, 9. meta -----------------------------------------------------------------------------
report_args=("$STAGE/ladder_bench.json" "${torch_json[@]}" --variants --out "$STAGE/report.md")
[ -f "$STAGE/ceilings.json" ] && report_args+=(--ceilings "$STAGE/ceilings.json")
# The baselines ("vs baseline") come from the registry the rungs declare (tour --registry-json).
registry_json=$(mktemp "${TMPDIR:-/tmp}/fl-registry.XXXXXX")
if [ -x "$BIN/tour" ] && "$BIN/tour" --registry-json >"$registry_json"; then
  report_args+=(--registry "$registry_json")
fi
"$PY" "$ROOT/bench/report.py" "${report_args[@]}"
rm -f "$registry_json"
sha=$(git -C "$ROOT" rev-parse --short=12 HEAD 2>/dev/null || echo "${FL_GIT_SHA:-unknown}")  # env: trees without .git
dirty=$(git -C "$ROOT" status --porcelain --untracked-files=no 2>/dev/null | grep -c . || true)
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
"$PY" - "$STAGE/meta.json" "$STAGE" "$OUT" "$ROOT" "$(cd "$BIN" && pwd)" "$device" "$sha" "$dirty" "$quick" "$family" "${commands[@]}" <<'EOF'
import datetime, json, os, sys
path, stage, out, root, bin_dir, device, sha, dirty, quick, family, *commands = sys.argv[1:]
def rel(c):
    """The command as run from the repository root: no path of the machine that ran it."""
    # The files' final place, not the staging folder; a --results folder outside the repository
    # (one part of a run that bench/merge_results.py joins later) is written <part>.
    c = c.replace(stage, out if out.startswith(root + os.sep) else "<part>")
    if not bin_dir.startswith(root + os.sep):
        c = c.replace(bin_dir, "<build>/bin")  # a build folder outside the repository
    return c.replace(root + os.sep, "")
json.dump({"device": device, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "git_sha": sha, "local_changes": int(dirty) > 0, "quick": quick == "1", "family": family,
           "commands": [rel(c) for c in commands]}, open(path, "w"), indent=1)
EOF

rm -rf "$OUT/decode_splits"
[ -d "$STAGE/fp8_accuracy" ] && rm -rf "$OUT/fp8_accuracy"  # a new accuracy run replaces the old one
cp -r "$STAGE"/. "$OUT"/
finished=1
echo "run_all.sh: wrote $OUT:"
(cd "$OUT" && ls -1 | sed 's/^/  /')
echo "run_all.sh: the READMEs' generated tables: python3 bench/docgen.py --write"
