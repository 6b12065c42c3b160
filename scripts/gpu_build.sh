#!/usr/bin/env bash
# Builds HERE (no GPU needed) what the GPU machine runs, and assembles it in
# build/gpu, the one folder to carry there (about 30 MB):
#   build/gpu/cuda         CUDA tests, perf suite, libropekv.a (scripts/gpu_run.sh,
#                          scripts/gpu_profile.sh), from preset cuda
#   build/gpu/cuda-shared  libropekv.so (host + CUDA backends, shared CUDA
#                          runtime) and its config header, which the PyTorch op
#                          links there (scripts/gpu_torch.sh), from preset cuda-shared
# each with lib/: the Debian shared libraries they need, and BUILD_INFO.
# ROPEKV_GPU_EXTRA_PRESETS adds measurement builds the same way (preset P ->
# build/gpu/P, which ROPEKV_GPU_BUILD=build/gpu/P bash scripts/gpu_run.sh runs);
# ROPEKV_GPU_PRESETS replaces the default list (e.g. "cuda" alone, for a
# kernel A/B). Only the folders of the presets built are replaced: an older
# build kept beside them (build/gpu/OTHER) stays for scripts/gpu_ab.sh.
# Usage: bash scripts/gpu_build.sh
set -euo pipefail
cd "$(dirname "$0")/.."
command -v nvcc >/dev/null || { echo "gpu_build: nvcc not found" >&2; exit 1; }
for preset in ${ROPEKV_GPU_PRESETS:-cuda cuda-shared} ${ROPEKV_GPU_EXTRA_PRESETS:-}; do
  cmake --preset "$preset" >/dev/null
  cmake --build --preset "$preset" -j "$(nproc)"
  from=build/$preset to=build/gpu/$preset
  rm -rf "$to"
  mkdir -p "$to/lib"
  for f in tests/ropekv_tests_cuda perf/ropekv_perf libropekv.a libropekv.so include; do
    [ -e "$from/$f" ] || continue
    mkdir -p "$(dirname "$to/$f")"
    cp -rL "$from/$f" "$to/$f"
    [ -f "$from/$f" ] || continue
    libs=$(ldd "$from/$f" 2>/dev/null | awk '/=> \// {print $3}' |
           grep -E 'kokkos|trilinos|benchmark|gtest' || true)  # none for an archive
    for lib in $libs; do cp -L "$lib" "$to/lib/"; done
  done
  # What was built, for the GPU scripts to report (the GPU machine's copy of
  # the tree may not carry the git history).
  { git rev-parse --short HEAD 2>/dev/null || echo "no git"
    git diff --quiet HEAD -- . 2>/dev/null || echo "plus uncommitted changes"; } >"$to/BUILD_INFO"
done
du -sh build/gpu/*
