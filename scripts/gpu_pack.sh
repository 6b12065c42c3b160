#!/usr/bin/env bash
# Packs build folders (scripts/gpu_build.sh's build/gpu/cuda, measurement
# builds for scripts/gpu_ab.sh) into one gzip tarball to carry to the GPU
# machine: binaries shrink about 4x, so a call's 64 MiB carry limit holds
# several builds. On the GPU machine: tar xzf build/carry.tgz (paths kept).
# Usage: bash scripts/gpu_pack.sh DIR [DIR ...]   (writes build/carry.tgz)
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -gt 0 ] || { echo "usage: gpu_pack.sh DIR [DIR ...]" >&2; exit 2; }
for d in "$@"; do [ -d "$d" ] || { echo "gpu_pack: no folder $d" >&2; exit 1; }; done
tar czf build/carry.tgz "$@"
du -h build/carry.tgz
