#!/bin/sh
# Runs one rung executable under compute-sanitizer; exits 77 (skipped) without
# a GPU or without compute-sanitizer, 1 on any reported error.
# usage: sanitize.sh memcheck|racecheck EXE [rung flags...]
tool=$1
exe=$2
shift 2
if [ ! -x "$exe" ]; then
  echo "sanitize.sh: no executable $exe (a test of nothing fails)"
  exit 1
fi
"$exe" --device-info >/dev/null 2>&1
if [ $? -eq 77 ]; then
  echo "no usable CUDA device: sanitizer test skipped"
  exit 77
fi
san=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
if [ -z "$san" ]; then
  echo "compute-sanitizer not found: sanitizer test skipped"
  exit 77
fi
exec "$san" --tool "$tool" --error-exitcode 1 --print-limit 20 \
  "$exe" "$@" --iters 1 --warmup 0 --check full --no-compare
