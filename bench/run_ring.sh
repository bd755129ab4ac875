#!/usr/bin/env bash
# Rung 12's benchmark, on a machine with 1 to 8 GPUs of one host:
#
#   bench/run_ring.sh [--gpus "1 2"] [--replay "2 4 8"] [--share "2 4"] [--seqlens "65536 131072"]
#                     [--bin DIR] [--results DIR] [--no-torch] [--quick] [--backward]
#                     [--variants "zigzag contiguous"] [--iters 20] [--warmup 3] [--single-p1 0] [--single 0]
#                     [--key-cap K]
#
# For each GPU count P and total length N (B = 1, 16 heads, d = 128, bf16):
#   1. rung 12 through its launcher, zigzag and contiguous, causal 1 and 0, sampled check, the
#      single-GPU rung on the whole sequence (the one-GPU time) -> ring_p<P>_n<N>_<variant>_causal<c>.json
#      (schema flashladder.ring/1: per step compute, exposed communication, merge and transfer
#      per rank; the ring's time; the one-GPU time; the scaling efficiency T1 / (P x TP))
#   2. PyTorch's all-gather context-parallel baseline under torchrun (bench/pytorch/torch_ring_baseline.py,
#      if PyTorch imports)                                      -> torch_ring_p<P>_n<N>_causal<c>.json
#   3. --replay R...: the R ranks of a ring in turn on GPU 0 (12_ring_attention --replay R, no
#      transfer; one process, so no launcher), same shapes (contiguous with causal 1 only: without
#      a mask it splits the work as evenly as zigzag), sampled check against
#      fp64 and the single-GPU rung; each rank's pass timed alone: the ring's time if every
#      transfer hid, T1 / (R x slowest rank) the scaling efficiency's compute bound
#                                                      -> replay_r<R>_n<N>_<variant>_causal<c>.json
#   4. --share S...: the ring of S ranks sharing GPU 0 through the launcher (--share-gpu: one
#      process per rank, NCCL over sockets on loopback), same shapes as 3: the whole NCCL path
#      checked at these lengths where one GPU is all there is; its times are no S-GPU ring's
#                                                      -> shared_p<S>_n<N>_<variant>_causal<c>.json
#      and PyTorch's baseline the same way (torchrun, --share-gpu), its gathered output against
#      one-GPU SDPA                                    -> torch_shared_p<S>_n<N>_causal<c>.json
#   5. meta.json: device, date, git sha (and whether the tree had local changes), the commands.
# --variants: the shardings of step 1 (default both); --iters/--warmup: timed and warm-up passes of
# steps 1 to 3 and of the baselines (defaults 20 and 3; the shared runs of step 4 keep 3 and 1);
# --single-p1 0: the P = 1 rings of step 1 skip rank 0's single-GPU run (--single 0): the ring of
# one is then the one-GPU time itself, the same kernels and D rule as the P-GPU rings. --single 0:
# every run of step 1 skips it (the forward is then checked against fp64 only; T1 comes from the
# ring of one in the same folder, so give --gpus a 1 or run it into that folder).
# --backward: every rung 12 run is a forward and a backward pass (--backward: dQ, dK, dV checked,
# forward + backward timed, the scaling efficiency of both), and the baseline of step 2 is
# PyTorch's own context parallelism, forward and backward (bench/pytorch/torch_cp_baseline.py: its ring
# in SDPA, cuDNN)                                      -> torch_cp_p<P>_n<N>_causal<c>.json
# Results then go to bench/results/<gpu>/ring-backward/. --key-cap K (with --backward): every rung
# 12 run cuts the forward's launches to K keys (0: uncut; default: ring_plan.h's forward_key_cap),
# the ablation of D's accuracy against the forward's cost; give it its own --results folder.
# Every run's output goes beside it (*.log). Results: bench/results/<gpu-name-slug>/ring/ unless
# --results; NCCL_NVLS_ENABLE=0 for every process. --quick: N = 65536 and causal 1 only.
# Exit: 0 done; 77 no GPU; otherwise the first failing run's code (the others still run).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
gpus="" replay="" share="" seqlens="65536 131072" bin="" results="" torch=1 causals="1 0" backward=0
variants="zigzag contiguous" iters=20 warmup=3 single_p1=1 single=1 key_cap=""
while [ $# -gt 0 ]; do
  case "$1" in
    --gpus) gpus=$2; shift ;;
    --replay) replay=$2; shift ;;
    --share) share=$2; shift ;;
    --seqlens) seqlens=$2; shift ;;
    --bin) bin=$2; shift ;;
    --results) results=$2; shift ;;
    --no-torch) torch=0 ;;
    --quick) seqlens=65536; causals=1 ;;
    --backward) backward=1 ;;
    --variants) variants=$2; shift ;;
    --iters) iters=$2; shift ;;
    --warmup) warmup=$2; shift ;;
    --single-p1) single_p1=$2; shift ;;
    --single) single=$2; shift ;;
    --key-cap) key_cap=$2; shift ;;
    -h|--help) sed -n 2,47p "$0"; exit 0 ;;
    *) echo "run_ring.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
  shift
done
export NCCL_NVLS_ENABLE=0
if [ -z "$bin" ]; then
  for d in "$ROOT"/build/release/bin "$ROOT"/build/*/bin; do
    if [ -x "$d/12_ring_attention" ]; then bin=$d; break; fi
  done
fi
exe="$bin/12_ring_attention"
if [ ! -x "$exe" ]; then
  echo "run_ring.sh: no 12_ring_attention (build it where NCCL is found: steps/12_ring_attention/README.md)" >&2
  exit 2
fi
if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "run_ring.sh: no GPU (exit 77 = skipped)"; exit 77
fi
visible=$(nvidia-smi -L | grep -c '^GPU')
if [ -z "$gpus" ] && [ -z "$replay" ] && [ -z "$share" ]; then gpus=$(seq 1 "$visible" | tr '\n' ' '); fi
gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
slug=$(echo "$gpu_name" | tr '[:upper:]' '[:lower:]' | sed -E 's/[^a-z0-9]+/-/g; s/^-|-$//g')
bwd=()  # rung 12's flags for --backward (and --key-cap)
if [ "$backward" = 1 ]; then bwd=(--backward); fi
if [ -n "$key_cap" ]; then
  if [ "$backward" != 1 ]; then echo "run_ring.sh: --key-cap needs --backward" >&2; exit 2; fi
  bwd+=(--key-cap "$key_cap")
fi
results=${results:-$ROOT/bench/results/$slug/ring$([ "$backward" = 1 ] && echo -backward)}
mkdir -p "$results"
commands=()
rc=0
run() {  # run NAME CMD...: output to NAME.log, the command into meta.json
  local name=$1; shift
  commands+=("$*")
  echo "== $name: $*"
  local c=0
  "$@" > "$results/$name.log" 2>&1 || c=$?
  if [ "$c" != 0 ]; then
    echo "   failed (exit $c): see $results/$name.log"
    if [ "$rc" = 0 ]; then rc=$c; fi
  fi
  tail -n 4 "$results/$name.log"
}
rel() { realpath --relative-to="$ROOT" "$1"; }
# The one-GPU runs' shardings: both with the causal mask; zigzag only without it (there both
# split the work evenly).
variants_for() { if [ "$1" = 0 ]; then echo zigzag; else echo zigzag contiguous; fi; }
for p in $gpus; do
  for n in $seqlens; do
    for causal in $causals; do
      for variant in $variants; do
        name=ring_p${p}_n${n}_${variant}_causal${causal}
        one=()  # rung 12's flag for --single-p1 0 at P = 1
        if [ "$single" = 0 ] || { [ "$p" = 1 ] && [ "$single_p1" = 0 ]; }; then one=(--single 0); fi
        run "$name" "$PY" "$(rel "$ROOT/steps/12_ring_attention/launch_ring.py")" --exe "$(rel "$exe")" \
          --gpus "$p" -- --batch 1 --seqlen "$n" --heads 16 --dim 128 --dtype bf16 --causal "$causal" \
          --variant "$variant" --check sample --iters "$iters" --warmup "$warmup" ${bwd[@]+"${bwd[@]}"} \
          ${one[@]+"${one[@]}"} --json "$(rel "$results/$name.json")"
      done
      if [ "$torch" = 1 ] && [ "$backward" = 1 ] && "$PY" -c "import torch" 2>/dev/null; then
        name=torch_cp_p${p}_n${n}_causal${causal}
        run "$name" "$PY" -m torch.distributed.run --standalone --nproc-per-node "$p" \
          "$(rel "$ROOT/bench/pytorch/torch_cp_baseline.py")" --seqlen "$n" --causal "$causal" \
          --iters "$iters" --warmup "$warmup" --out "$(rel "$results/$name.json")"
      elif [ "$torch" = 1 ] && "$PY" -c "import torch" 2>/dev/null; then
        name=torch_ring_p${p}_n${n}_causal${causal}
        run "$name" "$PY" -m torch.distributed.run --standalone --nproc-per-node "$p" \
          "$(rel "$ROOT/bench/pytorch/torch_ring_baseline.py")" --seqlen "$n" --causal "$causal" \
          --iters "$iters" --warmup "$warmup" --out "$(rel "$results/$name.json")"
      fi
    done
  done
done
for r in $replay; do
  for n in $seqlens; do
    for causal in $causals; do
      for variant in $(variants_for "$causal"); do
        name=replay_r${r}_n${n}_${variant}_causal${causal}
        run "$name" "$(rel "$exe")" --replay "$r" --batch 1 --seqlen "$n" --heads 16 --dim 128 \
          --dtype bf16 --causal "$causal" --variant "$variant" --check sample --iters "$iters" --warmup "$warmup" \
          ${bwd[@]+"${bwd[@]}"} --json "$(rel "$results/$name.json")"
      done
    done
  done
done
for s in $share; do
  for n in $seqlens; do
    for causal in $causals; do
      for variant in $(variants_for "$causal"); do
        name=shared_p${s}_n${n}_${variant}_causal${causal}
        run "$name" "$PY" "$(rel "$ROOT/steps/12_ring_attention/launch_ring.py")" --exe "$(rel "$exe")" \
          --gpus "$s" --share-gpu -- --batch 1 --seqlen "$n" --heads 16 --dim 128 --dtype bf16 \
          --causal "$causal" --variant "$variant" --check sample --iters 3 --warmup 1 ${bwd[@]+"${bwd[@]}"} \
          --json "$(rel "$results/$name.json")"
      done
      if [ "$torch" = 1 ] && [ "$backward" = 0 ] && "$PY" -c "import torch" 2>/dev/null; then
        name=torch_shared_p${s}_n${n}_causal${causal}
        run "$name" "$PY" -m torch.distributed.run --standalone --nproc-per-node "$s" \
          "$(rel "$ROOT/bench/pytorch/torch_ring_baseline.py")" --share-gpu --seqlen "$n" --causal "$causal" \
          --iters 3 --warmup 1 --out "$(rel "$results/$name.json")"
      fi
    done
  done
done
sha=$(git -C "$ROOT" rev-parse --short=12 HEAD 2>/dev/null || echo "${FL_GIT_SHA:-unknown}")  # env: trees without .git
dirty=$([ -n "$(git -C "$ROOT" status --porcelain 2>/dev/null)" ] && echo true || echo false)
"$PY" - "$results/meta.json" "$gpu_name" "$visible" "$sha" "$dirty" "${commands[@]}" <<'PYEOF'
import datetime, json, sys
out, name, count, sha, dirty, *cmds = sys.argv[1:]
json.dump({"device": name, "gpus_visible": int(count), "git_sha": sha, "local_changes": dirty == "true",
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "env": {"NCCL_NVLS_ENABLE": "0"}, "commands": cmds}, open(out, "w"), indent=1)
PYEOF
echo "run_ring.sh: results in $(rel "$results") (exit $rc)"
exit $rc
