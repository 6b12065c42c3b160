#!/usr/bin/env bash
# Installs ropekv's build and test dependencies on Debian 12 with apt-get.
# Idempotent: when every package is already installed it does nothing (no
# apt-get update either), so repeated runs take a fraction of a second.
# Runs as root, or through sudo when not root. CUDA is not a Debian package:
# it comes with the machine image (nvcc on PATH) and is never installed here.
# Usage: bash scripts/install_deps.sh
set -euo pipefail

packages=(
  cmake ninja-build g++ ccache                         # build
  libgtest-dev libgmock-dev libbenchmark-dev           # tests, perf suite
  libtrilinos-kokkos-dev                               # host backend (Kokkos)
  hipcc libamdhip64-dev                                # HIP backend (compile-only here)
  python3-matplotlib                                   # perf plots
  clang-14 libclang-rt-14-dev llvm-14                  # fuzzing (libFuzzer, sanitizers, symbolizer)
  python3-torch libtorch-dev python3-pytest            # the PyTorch op (python/), CPU torch 1.13
  clang-format                                         # scripts/format_check.sh (clang-format 14)
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg -s "$p" 2>/dev/null | grep -q '^Status: install ok installed$'; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install_deps: all ${#packages[@]} packages present"
  exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1; then
  as_root=(sudo)
else
  echo "install_deps: missing ${missing[*]}, and not root and no sudo to install them" >&2
  exit 1
fi
command -v apt-get >/dev/null 2>&1 || {
  echo "install_deps: missing ${missing[*]}, and no apt-get (not Debian?); install them yourself" >&2
  exit 1
}

echo "install_deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
${as_root[@]+"${as_root[@]}"} env DEBIAN_FRONTEND=noninteractive apt-get update -q
${as_root[@]+"${as_root[@]}"} env DEBIAN_FRONTEND=noninteractive \
  apt-get install -y -q --no-install-recommends "${packages[@]}"
echo "install_deps: done"
