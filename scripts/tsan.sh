#!/usr/bin/env bash
# ThreadSanitizer build of the host tests that exercise threads
# (tests/CMakeLists.txt, ropekv_tests_threads: the host backend's own threads,
# the checked-mode counter under them, many threads calling run() at once,
# and the rest of issue 11's regression suite), library included, into
# build/tsan. Each test runs in a process of its own (so "first calls" are the
# process's first), and any race report fails it.
# Usage: bash scripts/tsan.sh     Environment: JOBS (build parallelism, default 2)
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install_deps.sh
build=build/tsan
mkdir -p "$build"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DROPEKV_BUILD_TESTS=ON -DROPEKV_BUILD_PERF=OFF -DROPEKV_BUILD_EXAMPLES=OFF \
  -DCMAKE_CXX_FLAGS="-fsanitize=thread" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=thread" \
  >"$build/configure.log" 2>&1 ||
  { cat "$build/configure.log"; echo "tsan: configure failed" >&2; exit 1; }
cmake --build "$build" -j "${JOBS:-2}" --target ropekv_tests_threads

bin=$build/tests/ropekv_tests_threads
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}
# Not Defect9: it makes two tokens write one cache entry on purpose (a caller
# error whose writes race by definition; the test checks their bounds).
tests=$("$bin" --gtest_list_tests | awk '/^[^ ]/ {suite=$1} /^  / {print suite $1}' |
  grep -v 'Defect9')
pass=0
fail=0
for t in $tests; do
  if "$bin" --gtest_filter="$t" >"$build/last.log" 2>&1; then
    pass=$((pass + 1))
  else
    fail=$((fail + 1))
    echo "tsan: FAILED $t"
    grep -E 'WARNING: ThreadSanitizer|SUMMARY|Failure|FAILED' "$build/last.log" | head -10
    cp "$build/last.log" "$build/failed-$(echo "$t" | tr '/' '_').log"
  fi
done
echo "tsan: $pass passed, $fail failed of $((pass + fail)) tests under ThreadSanitizer"
[ "$fail" -eq 0 ]
