#!/usr/bin/env bash
# cuobjdump (rung 07's spill test reads its compiled SASS) and nvdisasm (which `cuobjdump -sass`
# calls: the Hopper SASS tests), from NVIDIA's pinned wheels into build/tools/bin, when the CUDA
# Toolkit install lacks them. CMakePresets.json puts build/tools/bin on PATH for configure, build
# and tests. Called by the README's install command and by .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in cuobjdump nvdisasm; do
  if command -v "$tool" >/dev/null || [ -x "/usr/local/cuda/bin/$tool" ] || [ -x "build/tools/bin/$tool" ]; then
    continue
  fi
  python3 -m pip install -q --upgrade --target "build/tools/$tool" "nvidia-cuda-$tool==13.5.37"
  mkdir -p build/tools/bin
  ln -sfr "$(find "build/tools/$tool" -name "$tool" -type f | head -1)" "build/tools/bin/$tool"
  echo "$tool: build/tools/bin/$tool"
done
