#!/usr/bin/env bash
# One sweep of every rung at one commit, on one GPU, made in three parts that each fit a
# ten-minute command and joined into one folder (the README's summary table, the ladder's climb
# and the roofline read such a folder):
#
#   bench/run_sweep.sh BIN PARTS a    rungs 01-04 and 07 (CUDA cores), prefill and decode, no PyTorch
#   bench/run_sweep.sh BIN PARTS b    rungs 05, 06, 08-10, 15 and 16, prefill and decode, PyTorch SDPA's
#                                     flash and cuDNN backends, the measured ceilings and the tour
#   bench/run_sweep.sh BIN PARTS c    the backward and fp8 families: rungs 10, 11, 13, 14 and rung 16's
#                                     backward entry beside PyTorch's flash and cuDNN (backward pass
#                                     alone; 16-bit for fp8)
#   bench/run_sweep.sh --merge OUT PARTS [--git-sha SHA]
#                                     PARTS/a, PARTS/b and PARTS/c joined into OUT (bench/merge_results.py)
#
# BIN: the folder with ladder_bench (e.g. build/release/bin). PARTS: a scratch folder; part X goes
# to PARTS/X. The prefill sweep is the standard one (head_dim 64 and 128, seqlen 512 to 16k,
# causal and not; bench/README.md); the backward and fp8 families keep their head_dims 64 to 256.
# Rung 07's DV_TILE sweep and rung 08's split sweep are not part of it (run_all.sh runs them).
# Exit: run_all.sh's (0 done, 77 no GPU, 2 usage).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
usage() { sed -n '2,20p' "$0" >&2; exit 2; }

if [ "${1:-}" = --merge ]; then
  [ $# -ge 3 ] || usage
  out=$2 parts=$3
  shift 3
  exec "${PYTHON:-python3}" "$ROOT/bench/merge_results.py" "$out" "$parts/a" "$parts/b" "$parts/c" "$@"
fi
[ $# = 3 ] || usage
bin=$1 parts=$2 part=$3
prefill_dims=--fl_head_dims=64,128
backends=flash,cudnn
case "$part" in
  a) args=(--family prefill,decode --no-torch --skip ceilings,sweep07,splits,tour
           -- --fl_rungs=1,2,3,4,7 "$prefill_dims") ;;
  b) args=(--family prefill,decode --torch-backends "$backends" --skip sweep07,splits
           -- --fl_rungs=5,6,8,9,10,15,16 "$prefill_dims") ;;
  c) args=(--family backward,fp8 --torch-backends "$backends" --skip ceilings,fp8,tour
           -- --fl_rungs=10,11,13,14,16) ;;
  *) usage ;;
esac
mkdir -p "$parts"
exec "$ROOT/bench/run_all.sh" "$bin" --results "$parts/$part" "${args[@]}"
