#!/usr/bin/env bash
# Builds the CUDA configuration HERE (no GPU needed) and gathers the Debian
# shared libraries its binaries need into build/cuda/lib, so that the whole
# build/cuda folder can be carried to a GPU machine and run there with
# scripts/gpu_run.sh. Usage: bash scripts/gpu_build.sh
set -euo pipefail
cd "$(dirname "$0")/.."
command -v nvcc >/dev/null || { echo "gpu_build: nvcc not found" >&2; exit 1; }
cmake --preset cuda >/dev/null
cmake --build --preset cuda -j "$(nproc)"
mkdir -p build/cuda/lib
for bin in build/cuda/tests/ropekv_tests_cuda build/cuda/perf/ropekv_perf; do
  [ -x "$bin" ] || continue
  ldd "$bin" | awk '/=> \// {print $3}' | grep -E 'kokkos|trilinos|benchmark|gtest' |
    while read -r lib; do cp -L "$lib" build/cuda/lib/; done
done
# What was built, for gpu_run.sh to report (the GPU machine's copy of the
# tree may not carry the git history).
{ git rev-parse --short HEAD 2>/dev/null || echo "no git"
  git diff --quiet HEAD -- . 2>/dev/null || echo "plus uncommitted changes"; } >build/cuda/BUILD_INFO
ls build/cuda/lib
