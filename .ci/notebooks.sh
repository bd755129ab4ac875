#!/usr/bin/env bash
# Notebooks in CI: (1) every committed notebook is stripped (no outputs, no execution counts);
# (2) the pinned requirements install into a venv; (3) every notebook runs headless with
# nbconvert --execute (any cell error fails). A notebook whose metadata lists results it needs
# ("flashladder": {"needs": [...], "family": "prefill"|"decode"}) runs on the newest
# bench/results/<gpu>/ that has them (notebooks/flresults.py, find_results), or FL_RESULTS; with
# no such results it is skipped (results come only from real GPU runs), and instead we check
# that it stops with the clear "no benchmark results" message.
#
#   .ci/notebooks.sh            # all of the above
#   .ci/notebooks.sh --check    # (1) only: no Python packages needed
#
# Env: FL_NOTEBOOK_VENV (default build/notebooks-venv, reused while requirements.txt is unchanged),
# FL_RESULTS (a results folder), FL_NOTEBOOK_OUT (where executed notebooks and PNGs go, kept; by
# default a temp folder, removed on exit: a failing notebook's log is printed first).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${PYTHON:-python3}

# ---- (1) stored outputs ------------------------------------------------------------------------
"$PY" - notebooks/*.ipynb <<'EOF'
import json, sys
bad = []
for path in sys.argv[1:]:
    with open(path, encoding="utf-8") as f:
        nb = json.load(f)
    for i, cell in enumerate(nb.get("cells", [])):
        if cell.get("cell_type") != "code":
            continue
        if cell.get("outputs"):
            bad.append("%s: cell %d has stored outputs" % (path, i))
        if cell.get("execution_count") is not None:
            bad.append("%s: cell %d has an execution count" % (path, i))
if bad:
    print("notebooks must be committed without outputs; strip them with\n"
          "  jupyter nbconvert --clear-output --inplace notebooks/*.ipynb\n  " + "\n  ".join(bad))
    sys.exit(1)
print("notebooks: %d stripped (no outputs, no execution counts)" % len(sys.argv[1:]))
EOF
[ "${1:-}" = "--check" ] && exit 0

# What this script and the tools it runs leave in the temp folder (the executed copies, the staging
# folder that `ipykernel install` does not remove) goes in one folder, removed on exit.
SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/fl-notebooks.XXXXXX")
trap 'rm -rf "$SCRATCH"' EXIT
export TMPDIR=$SCRATCH

# ---- (2) pinned requirements in a venv ---------------------------------------------------------
VENV=${FL_NOTEBOOK_VENV:-$ROOT/build/notebooks-venv}
STAMP="$VENV/.requirements.sha256"
WANT=$(sha256sum notebooks/requirements.txt | cut -d' ' -f1)
if [ ! -x "$VENV/bin/python" ] || [ "$(cat "$STAMP" 2>/dev/null)" != "$WANT" ]; then
  echo "notebooks: installing notebooks/requirements.txt into $VENV"
  rm -rf "$VENV"
  "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -r notebooks/requirements.txt
  echo "$WANT" > "$STAMP"
fi
VPY="$VENV/bin/python"
"$VPY" -m ipykernel install --prefix "$VENV" --name python3 >/dev/null  # the kernel nbconvert starts

# ---- (3) execute ---------------------------------------------------------------------------------
KEEP_OUT=${FL_NOTEBOOK_OUT:-}
OUT=${KEEP_OUT:-$SCRATCH/out}
mkdir -p "$OUT"
export FL_NOTEBOOK_OUT="$OUT" MPLBACKEND=Agg JUPYTER_PATH="$VENV/share/jupyter"
USER_RESULTS=${FL_RESULTS:-}
unset FL_RESULTS
passed=0 failed=0 skipped=0
for nb in notebooks/*.ipynb; do
  name=$(basename "$nb" .ipynb)
  # What this notebook needs ("-" = nothing) and the results folder it will plot ("" = none):
  # notebooks/flresults.py's find_results, the rule the notebook itself applies.
  read -r needs results < <(FL_RESULTS="$USER_RESULTS" "$VPY" - "$nb" <<'EOF2'
import json, os, sys
sys.path.insert(0, "notebooks")
import flresults
meta = json.load(open(sys.argv[1])).get("metadata", {}).get("flashladder", {})
needs, family = meta.get("needs", []), meta.get("family")
found = (flresults.find_results(needs, family) or "") if needs else "-"
print(",".join(needs + (["%s-sweep" % family] if family else [])) or "-",
      os.path.abspath(found) if found not in ("", "-") else found)
EOF2
)
  if [ -z "${results:-}" ]; then
    # No results: the notebook must stop with the clear message, not with some other error.
    if env ${USER_RESULTS:+FL_RESULTS="$USER_RESULTS"} "$VPY" -m nbconvert --to notebook --execute "$nb" \
         --output-dir "$OUT" --output "$name.noresults" >"$OUT/$name.noresults.log" 2>&1; then
      echo "FAILED  $name: ran without the results it needs ($needs)"; failed=$((failed + 1))
    elif grep -q "NoResults" "$OUT/$name.noresults.log"; then
      echo "skipped $name: no bench/results/<gpu>/ with $needs (it stops with a clear message, as it should)"
      skipped=$((skipped + 1))
    else
      echo "FAILED  $name: without results it failed for another reason:"; tail -20 "$OUT/$name.noresults.log"
      failed=$((failed + 1))
    fi
    continue
  fi
  start=$(date +%s)
  env_results=()
  [ "$results" != "-" ] && env_results=(FL_RESULTS="$results")
  if env "${env_results[@]}" "$VPY" -m nbconvert --to notebook --execute "$nb" \
       --ExecutePreprocessor.timeout=600 --output-dir "$OUT" --output "$name" >"$OUT/$name.log" 2>&1; then
    echo "passed  $name ($(( $(date +%s) - start )) s${env_results:+, results ${results#"$ROOT"/}})"
    passed=$((passed + 1))
  else
    echo "FAILED  $name:"; tail -30 "$OUT/$name.log"; failed=$((failed + 1))
  fi
done
if [ -n "$KEEP_OUT" ]; then echo "notebooks: executed copies and figures in $OUT"; fi
echo "notebooks: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
