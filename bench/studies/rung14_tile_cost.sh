#!/usr/bin/env bash
# Where rung 14's fixed cost per K/V block goes on short rows. At d = 128 with 512 keys the MHA
# grid (2048 K/V blocks of 8 steps) runs 20-25 % slower than GQA 4:1 of the same FLOPs (512 blocks
# of 32 steps), about 7 us more per block. Two diagnostic builds bound the two suspects, each by
# removing it (their gradients are wrong; they are timed, never checked, and never merged):
#   no-dkv-store  patches/rung14_no_dkv_store.patch: the dK, dV stores after the walk skipped (the
#                 GEMMs kept), the epilogue's cost;
#   kv-early      patches/rung14_kv_early.patch: the persistent producer loads the next K_j, V_j
#                 without waiting for the math warps to release the last ones, the load's exposed
#                 latency;
#   both          the two patches.
# The rung (base) and the three are built from one source tree, then timed in turn over ROUNDS
# rounds (the order rotating), 50 launches each (the runner's median, L2 flushed).
#
#   bench/studies/rung14_tile_cost.sh SRC_DIR WORK_DIR OUT_DIR [ROUNDS]
#
# SRC_DIR: the repository (copied to WORK_DIR/<build>, the patches applied there). OUT_DIR gets one
# runner JSON and log per run, and tile_cost.md (the median over the rounds per build and shape,
# each build's time over the rung's and the time per K/V block it saves). SHAPES=<lines of
# "dtype d seqlen batch heads kv_heads causal"> overrides the shapes. Exit: 0 done; else the
# failing build's code.
set -uo pipefail
[ $# -ge 3 ] || { sed -n '2,21p' "$0"; exit 2; }
SRC=$(cd "$1" && pwd) WORK=$2 OUT=$3 ROUNDS=${4:-3}
P=$SRC/bench/studies/patches
mkdir -p "$WORK" "$OUT"
declare -A PATCHES=([base]="" [no-dkv-store]="rung14_no_dkv_store.patch" [kv-early]="rung14_kv_early.patch"
                    [both]="rung14_no_dkv_store.patch rung14_kv_early.patch")
BUILDS=(base no-dkv-store kv-early both)
for b in "${BUILDS[@]}"; do
  (
    rm -rf "$WORK/$b" && mkdir -p "$WORK/$b"
    tar -C "$SRC" --exclude=./build --exclude=./.git -cf - . | tar -C "$WORK/$b" -xf -
    for f in ${PATCHES[$b]}; do (cd "$WORK/$b" && git apply "$P/$f") || exit 1; done
    cmake -S "$WORK/$b" -B "$WORK/$b/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
      -DFL_RUNGS="11;14;15" -DFL_BUILD_PYTHON=OFF -DFL_BUILD_BENCH=OFF -DFL_BUILD_TESTS=OFF -DFL_BUILD_DOCS=OFF \
      > "$OUT/build_$b.log" 2>&1 &&
      cmake --build "$WORK/$b/build" --target 14_hopper_backward -j "${JOBS:-4}" >> "$OUT/build_$b.log" 2>&1
  ) &
done
rc=0
for j in $(jobs -p); do wait "$j" || rc=$?; done
[ $rc = 0 ] || { echo "rung14_tile_cost.sh: a build failed"; tail -20 "$OUT"/build_*.log; exit $rc; }
SHAPES=${SHAPES:-"fp16 128 512 32 16 16 0
fp16 128 512 32 16 16 1
bf16 128 512 32 16 16 1
fp16 128 512 32 16 4 0
fp16 128 1024 16 16 16 0
fp16 128 16384 1 16 16 0
fp16 64 512 32 16 16 1"}
while read -r t d n b h kv c; do
  shape=${t}_d${d}_N${n}_B${b}_H${h}_KV${kv}_c${c}
  args=(--dtype "$t" --dim "$d" --seqlen "$n" --batch "$b" --heads "$h" --kv-heads "$kv" --causal "$c" --no-compare
        --check none --iters 50)
  for ((i = 0; i < ROUNDS; i++)); do
    for ((k = 0; k < ${#BUILDS[@]}; k++)); do
      bld=${BUILDS[$(((k + i) % ${#BUILDS[@]}))]}
      tag=${shape}_${bld}_r$i
      timeout 120 "$WORK/$bld/build/bin/14_hopper_backward" "${args[@]}" --json "$OUT/$tag.json" > "$OUT/$tag.log" 2>&1
      echo "$tag $(grep -o 'rate *[0-9.]* TFLOP/s' "$OUT/$tag.log")"
    done
  done
done <<< "$SHAPES"
python3 - "$OUT" "${BUILDS[@]}" > "$OUT/tile_cost.md" <<'EOF'
import glob, json, os, re, statistics, sys
out, builds = sys.argv[1], sys.argv[2:]
runs = {}
for f in glob.glob(os.path.join(out, "*_r*.json")):
    m = re.match(r"(.*)_(" + "|".join(map(re.escape, builds)) + r")_r\d+\.json$", os.path.basename(f))
    if m:
        d = json.load(open(f))
        runs.setdefault(m.group(1), {}).setdefault(m.group(2), []).append((d["timing"]["median_ms"], d))
print("| shape | " + " | ".join(f"{b} (ms)" for b in builds) + " | " +
      " | ".join(f"{b} / base, us per K/V block saved" for b in builds[1:]) + " |")
print("|---|" + "--:|" * (2 * len(builds) - 1))
for shape in sorted(runs):
    med = {b: statistics.median(t for t, _ in runs[shape].get(b, [(float("nan"), None)])) for b in builds}
    pr = runs[shape]["base"][0][1]["problem"]
    blocks_per_sm = (pr["batch"] * pr["heads_kv"] * -(-pr["seqlen_k"] // (128 if pr["head_dim"] <= 128 else 64))
                     / runs[shape]["base"][0][1]["device"]["sms"])
    cells = [f"{med[b]:.3f}" for b in builds]
    cells += [f"{med[b] / med['base']:.3f}, {1e3 * (med['base'] - med[b]) / blocks_per_sm:.2f}" for b in builds[1:]]
    print(f"| {shape} | " + " | ".join(cells) + " |")
EOF
cat "$OUT/tile_cost.md"
