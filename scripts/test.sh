#!/usr/bin/env bash
# ropekv's test command (README, CI): installs the dependencies, then for each
# build it can make here: configure + build its CMake preset and run its tests.
#   host  always (Kokkos host backend; validation, oracle, consumer tests)
#   cuda  when nvcc is on PATH and cuda/ exists; device tests skip, visibly, without a GPU
#   hip   when hipcc or clang++-15 exists and hip/ exists; device tests skip without a GPU
# Every build runs even when an earlier one failed; the exit status is nonzero
# when any of them failed. Builds go to build/<preset> (incremental).
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
fi

summary=()
status=0
logdir=build/test-logs
mkdir -p "$logdir"

# run_preset NAME [extra configure args...]
run_preset() {
  local name=$1
  shift
  local log=$logdir/$name.ctest.log step="configure"
  echo
  echo "==================== [$name] configure, build, test"
  if cmake --preset "$name" "$@" && step="build" &&
     cmake --build --preset "$name" -j "$jobs" && step="test" &&
     ctest --preset "$name" -j "$jobs" 2>&1 | tee "$log"; then  # pipefail: ctest's status
    local line skipped
    line=$(grep -E 'tests passed, [0-9]+ tests failed out of' "$log" | tail -1 || true)
    skipped=$(grep -c '(Skipped)' "$log" || true)
    summary+=("$(printf '%-5s PASSED   %s; %s skipped' "$name" "$line" "$skipped")")
  else
    local line=""
    [ "$step" = test ] && line=$(grep -E 'tests failed out of' "$log" | tail -1 || true)
    summary+=("$(printf '%-5s FAILED   at %s %s' "$name" "$step" "$line")")
    status=1
  fi
}

# The perf suite (perf/) may not exist yet in a checkout; build it only when it does.
perf_args=()
[ -f perf/CMakeLists.txt ] || perf_args=(-DROPEKV_BUILD_PERF=OFF)

run_preset host

if ! command -v nvcc >/dev/null 2>&1; then
  summary+=("$(printf '%-5s SKIPPED  nvcc not on PATH' cuda)")
elif [ ! -f cuda/CMakeLists.txt ]; then
  summary+=("$(printf '%-5s SKIPPED  no cuda/CMakeLists.txt in this checkout' cuda)")
else
  run_preset cuda ${perf_args[@]+"${perf_args[@]}"}
fi

if ! command -v hipcc >/dev/null 2>&1 && ! command -v clang++-15 >/dev/null 2>&1; then
  summary+=("$(printf '%-5s SKIPPED  neither hipcc nor clang++-15 found' hip)")
elif [ ! -f hip/CMakeLists.txt ]; then
  summary+=("$(printf '%-5s SKIPPED  no hip/CMakeLists.txt in this checkout' hip)")
else
  run_preset hip
fi

bash scripts/tsan.sh && summary+=("tsan  PASSED   threaded host tests under ThreadSanitizer") || { summary+=("tsan  FAILED   scripts/tsan.sh"); status=1; }
bash scripts/fuzz.sh && summary+=("fuzz  PASSED   $(cat build/fuzz/summary.txt 2>/dev/null)") || { summary+=("fuzz  FAILED   scripts/fuzz.sh (inputs in build/fuzz/findings)"); status=1; }
bash scripts/hip_resources.sh --check --report-only && summary+=("hipres PASSED  HIP kernel resources (report-only for scratch)") || { summary+=("hipres FAILED  scripts/hip_resources.sh --check"); status=1; }
echo
echo "==================== ropekv test summary (ctest logs in $logdir/)"
for s in "${summary[@]}"; do echo "$s"; done
[ "$status" -eq 0 ] && echo "ALL PASSED" || echo "SOME BUILD FAILED"
exit "$status"
