#!/bin/bash
# Rung 15 experiment: the L2 section budget and the order inside a section, on the slow cells.
run() {  # label env... -- args
  local label=$1; shift; local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  env "${envs[@]}" timeout 30 build/release/bin/15_persistent "$@" --check none --iters 30 --no-compare 2>&1 | grep -E "^ *time" | awk -v l="$label" '{print l, $2}'
}
for shape in "64 512 0" "128 512 0" "128 4096 1" "128 2048 1" "256 512 1" "256 4096 1" "256 2048 0" "64 4096 1"; do
  set -- $shape; d=$1; n=$2; c=$3
  a=(--batch $((16384/n)) --seqlen $n --heads $((2048/d)) --dim $d --causal $c)
  echo "== d$d n$n c$c"
  timeout 30 build/release/bin/10_warp_specialized "${a[@]}" --check none --iters 30 --no-compare 2>&1 | grep -E "^ *time" | awk '{print "rung10", $2}'
  run default X=1 -- "${a[@]}"
  run l2_8MB FL_R15_L2_MB=8 -- "${a[@]}"
  run l2_2MB FL_R15_L2_MB=2 -- "${a[@]}"
  run m_fastest FL_R15_M_FASTEST=1 -- "${a[@]}"
  run m_fastest_l2_8 FL_R15_M_FASTEST=1 FL_R15_L2_MB=8 -- "${a[@]}"
  run no-persistent X=1 -- "${a[@]}" --variant no-persistent
  run no-epi X=1 -- "${a[@]}" --variant no-epilogue-overlap
  run fifo X=1 -- "${a[@]}" --variant fifo
done
