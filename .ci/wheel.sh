#!/usr/bin/env bash
# The wheel in CI: `pip install ./common/python` (its pyproject.toml: scikit-build-core over the
# repository's CMake tree, nanobind pinned) builds the package, here with rung 01 only and one
# architecture to keep CI short (the README's line builds every rung for the archs asked),
# installs it into a folder, and the package's CPU tests run against the installed copy (no build
# tree on PYTHONPATH).
set -euo pipefail
cd "$(dirname "$0")/.."
site=$(mktemp -d "${TMPDIR:-/tmp}/fl-wheel.XXXXXX")
trap 'rm -rf "$site"' EXIT
python3 -m pip install -q --target "$site" ./common/python -C cmake.define.FL_RUNGS=01 \
  -C cmake.define.CMAKE_CUDA_ARCHITECTURES=80 -C build-dir=../../build/wheel-ci
echo "wheel: installed $(ls "$site" | grep dist-info)"
(cd "$site" && PYTHONPATH="$site" python3 - <<'PY'
import flashladder, os, sys
here = os.path.dirname(flashladder.__file__)
assert here.startswith(os.environ["PYTHONPATH"]), here  # the installed copy, not the build tree
print("wheel: flashladder from", here, "rungs:", [r.label for r in flashladder.rungs()])
PY
)
(cd "$site" && PYTHONPATH="$site" python3 "$OLDPWD/tests/python/test_cpu.py" 2>&1 | tail -3)
echo "wheel: passed"
