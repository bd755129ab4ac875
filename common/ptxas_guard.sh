#!/bin/sh
# ptxas_guard.sh <compiler command...>
#
# The compiler launcher of the Hopper (sm_90a) targets (common/FlashLadder.cmake,
# fl_hopper_target). It runs the compile command unchanged, passes its output through, and fails
# the compile when ptxas reported one of the Hopper performance losses it only prints as "info"
# (so neither -Werror nor -Xptxas=-Werror catches them):
#   C7508  'setmaxnreg' ignored; unable to determine register count at entry
#          (the kernel needs __launch_bounds__(threads, 1))
#   C7510, C7511, C7513, C7514, C7515  wgmma.mma_async instructions are serialized
#          (extern calls / insufficient registers / a register of an unfinished wgmma written:
#          P packed or O rescaled before its wait_group, a wgmma issued out of order /
#          non-wgmma instructions touching accumulators)
# A kernel with either still runs and gives the right answer, only much slower, which is why a
# build must not let it through. On failure the object file is deleted so the next build retries.
# Override the list with FL_PTXAS_GUARD_IDS (an extended regex), e.g. to add C7517|C7519.
ids=${FL_PTXAS_GUARD_IDS:-C7508|C7510|C7511|C7513|C7514|C7515}
log=$(mktemp "${TMPDIR:-/tmp}/fl-ptxas-guard.XXXXXX") || exit 1
"$@" 2>"$log"
rc=$?
cat "$log" >&2
if [ "$rc" -eq 0 ] && grep -Eq "\\((${ids})\\)" "$log"; then
  found=$(grep -Eo "\\((${ids})\\)" "$log" | tr -d '()' | sort -u | tr '\n' ' ')
  echo "ptxas_guard: error: ptxas reported a Hopper performance loss (${found% }):" \
    "the kernel would run with setmaxnreg ignored or its wgmmas serialized; see docs/hopper.md" >&2
  out=""
  prev=""
  for arg in "$@"; do
    [ "$prev" = "-o" ] && out=$arg
    prev=$arg
  done
  [ -n "$out" ] && rm -f "$out"
  rc=1
fi
rm -f "$log"
exit "$rc"
