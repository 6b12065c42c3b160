#!/usr/bin/env bash
# ropekv's test command (README, CI): installs the dependencies, then for each
# combination of backends it can build here: configure + build its CMake
# preset and run its tests.
#   host       always (Kokkos host backend; validation, oracle, layouts, consumers)
#   cuda       host + CUDA (and the perf suite), when nvcc is on PATH
#   cuda-only  CUDA without the host backend (no perf suite)
#   hip        host + HIP, when hipcc or clang++-15 exists
#   hip-only   HIP without the host backend
#   torch      host + the PyTorch op (python/): its pytest suite on Debian's CPU torch
# Then ThreadSanitizer, fuzzing, the HIP resource check and clang-format
# (scripts/format_check.sh), one summary line each.
# Device tests skip, visibly, without a GPU (and without the host backend they
# compare with); validation runs in every build. Every build runs even when an
# earlier one failed; the exit status is nonzero when any of them failed.
# Builds go to build/<preset> (incremental); the summary gives each one's time.
# Environment: JOBS (default: nproc), ROPEKV_CCACHE=0 to build without ccache.
# Usage: bash scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."

jobs=${JOBS:-$(nproc)}
bash scripts/install_deps.sh

# ccache, when present and its cache is writable (CMake reads these variables
# from the environment when a build folder is first configured).
ccache_dir=$(ccache --get-config cache_dir 2>/dev/null || true)
if [ "${ROPEKV_CCACHE:-1}" != 0 ] && [ -n "$ccache_dir" ] &&
   mkdir -p "$ccache_dir" 2>/dev/null && [ -w "$ccache_dir" ]; then
  export CMAKE_CXX_COMPILER_LAUNCHER=${CMAKE_CXX_COMPILER_LAUNCHER:-ccache}
  export CMAKE_CUDA_COMPILER_LAUNCHER=${CMAKE_CUDA_COMPILER_LAUNCHER:-ccache}
  export CMAKE_HIP_COMPILER_LAUNCHER=${CMAKE_HIP_COMPILER_LAUNCHER:-ccache}
  # Paths relative to the checkout: the device source compiles to the same
  # object in build/cuda and build/cuda-only (and hip, hip-only), so each
  # vendor's minute of kernel compilation is paid once per run, not per build.
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD}
fi

summary=()
status=0
logdir=build/test-logs
mkdir -p "$logdir"

# run_preset NAME [extra configure args...]
run_preset() {
  local name=$1
  shift
  local log=$logdir/$name.ctest.log step="configure" start=$SECONDS
  echo
  echo "==================== [$name] configure, build, test"
  if cmake --preset "$name" "$@" && step="build" &&
     cmake --build --preset "$name" -j "$jobs" && step="test" &&
     ctest --preset "$name" -j "$jobs" 2>&1 | tee "$log"; then  # pipefail: ctest's status
    # ctest counts a skipped test as passed: report the ones that ran apart.
    local total skipped label=PASSED
    total=$(grep -oE 'tests failed out of [0-9]+' "$log" | tail -1 | grep -oE '[0-9]+$' || echo 0)
    skipped=$(grep -cE '\((Skipped|Disabled|Not Run)\)' "$log" || true)
    [ "$skipped" -gt 0 ] && label=PARTIAL
    summary+=("$(printf '%-9s %-8s %4ss  %s of %s tests ran and passed, %s skipped' \
                 "$name" "$label" $((SECONDS - start)) $((total - skipped)) "$total" "$skipped")")
  else
    local line=""
    [ "$step" = test ] && line=$(grep -E 'tests failed out of' "$log" | tail -1 || true)
    summary+=("$(printf '%-9s FAILED   %4ss  at %s %s' "$name" $((SECONDS - start)) "$step" \
                 "$line")")
    status=1
  fi
}

skip() { summary+=("$(printf '%-9s SKIPPED  %s' "$1" "$2")"); }
total_start=$SECONDS

run_preset host

if ! command -v nvcc >/dev/null 2>&1; then
  skip cuda "nvcc not on PATH"
  skip cuda-only "nvcc not on PATH"
else
  run_preset cuda
  run_preset cuda-only
fi

if ! command -v hipcc >/dev/null 2>&1 && ! command -v clang++-15 >/dev/null 2>&1; then
  skip hip "neither hipcc nor clang++-15 found"
  skip hip-only "neither hipcc nor clang++-15 found"
else
  run_preset hip
  run_preset hip-only
fi

run_preset torch
# The pytest counts (ctest runs pytest as one test, Torch.pytest).
if py_counts=$(python3 scripts/pytest_counts.py build/torch/python/pytest.xml); then
  summary+=("$(printf '%-9s %s' torch-py "$py_counts")")
else
  summary+=("$(printf '%-9s FAILED   no pytest results (build/torch/python/pytest.xml)' torch-py)")
  status=1
fi

bash scripts/tsan.sh && summary+=("tsan  PASSED   threaded host tests under ThreadSanitizer") || { summary+=("tsan  FAILED   scripts/tsan.sh"); status=1; }
bash scripts/fuzz.sh && summary+=("fuzz  PASSED   $(cat build/fuzz/summary.txt 2>/dev/null)") || { summary+=("fuzz  FAILED   scripts/fuzz.sh (inputs in build/fuzz/findings)"); status=1; }
bash scripts/hip_resources.sh --check && summary+=("hipres PASSED  HIP kernel resources: no scratch in the vector and decode kernels, hip/RESOURCES.md current") || { summary+=("hipres FAILED  scripts/hip_resources.sh --check"); status=1; }
# clang-format 14 over the C++/CUDA sources; its last line (the count) is the summary.
if fmt=$(bash scripts/format_check.sh 2>&1); then fmt_status=PASSED; else fmt_status=FAILED; status=1; fi
echo "$fmt"
summary+=("format $fmt_status  $(tail -1 <<<"$fmt" | sed 's/^format_check: //')")
echo
echo "==================== ropekv test summary, $((SECONDS - total_start)) s (ctest logs in $logdir/)"
for s in "${summary[@]}"; do echo "$s"; done
[ "$status" -eq 0 ] && echo "ALL PASSED" || echo "SOME BUILD FAILED"
exit "$status"
