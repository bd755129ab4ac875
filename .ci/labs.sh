#!/usr/bin/env bash
# Labs in CI:
#  1. no lab's starter tree holds a copy of its solution (make_starter.py --check-no-solution:
#     for each lab, its starter tree is generated and searched for runs of the lab's regions);
#  2. the starter tree with every LAB region stubbed configures and builds (one head_dim and
#     dtype, to keep CI short);
#  3. every stubbed rung exits 1 with "not implemented" (not a crash) while rung 01, which has no
#     lab, still runs (0, or 77 without a GPU);
#  4. `grade NN` scores every stubbed rung 0 with its score table (no GPU needed for that).
# Grading a real kernel needs a GPU: bin/grade NN, or ctest -L gpu -R rungNN.
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d "${TMPDIR:-/tmp}/fl-labs.XXXXXX")
trap 'rm -rf "$work"' EXIT
python3 docs/labs/make_starter.py . --check-no-solution
python3 docs/labs/make_starter.py . "$work/starter"
cmake -S "$work/starter" -B "$work/build" -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 -DFL_HEAD_DIM=64 \
  -DFL_DTYPE=fp16 -DFL_BUILD_TESTS=OFF -DFL_BUILD_BENCH=OFF -DFL_BUILD_DOCS=OFF -DFL_BUILD_PYTHON=OFF >/dev/null
cmake --build "$work/build" >"$work/build.log" 2>&1 || { tail -40 "$work/build.log"; exit 1; }
passed=0 failed=0
# The registry's rungs (rung 12, the multi-process ring, has its own main, is not registered and
# has no lab).
registered=$("$work/build/bin/01_naive" --registry-json 2>/dev/null || true)
for exe in "$work"/build/bin/[01][0-9]_*; do
  name=$(basename "$exe")
  if ! grep -q "\"$name\"" <<<"$registered"; then
    echo "labs: $name skipped (not in the rung registry: no lab)"
    continue
  fi
  set +e
  msg=$("$exe" --dim 64 --seqlen 128 2>&1)
  rc=$?
  table=$("$work/build/bin/grade" "${name%%_*}" 2>&1)
  grc=$?
  set -e
  if [ "$name" = 01_naive ]; then
    ok=$({ [ $rc = 0 ] || [ $rc = 77 ]; } && { [ $grc = 0 ] || [ $grc = 77 ]; } && echo yes || echo no)
  else
    ok=$([ $rc = 1 ] && grep -q "not implemented" <<<"$msg" && [ $grc = 1 ] &&
      grep -q "FAIL: not implemented" <<<"$table" && echo yes || echo no)
  fi
  if [ "$ok" = yes ]; then
    passed=$((passed + 1))
    echo "labs: $name exit $rc, grade exit $grc: $(head -1 <<<"$msg" | cut -c1-100)"
  else
    failed=$((failed + 1))
    echo "labs: FAIL $name exit $rc (expected 'not implemented', exit 1): $msg"
    echo "labs: grade ${name%%_*} exit $grc (expected 1 and a table scoring 0):"
    echo "$table"
  fi
done
# One score table as students will see it.
"$work/build/bin/grade" 05 || true
echo "labs: $passed passed, $failed failed"
[ $failed = 0 ]
