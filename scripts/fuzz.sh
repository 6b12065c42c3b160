#!/usr/bin/env bash
# Coverage-guided fuzzing of ropekv's public API for a bounded time (CI: about
# two minutes): builds tests/fuzz (libFuzzer, AddressSanitizer and
# UndefinedBehaviorSanitizer, abort on the first report) with clang++-14 into
# build/fuzz, starts from the committed seed corpus (tests/fuzz/corpus,
# copied: the checkout is not modified) and prints the executions, the corpus
# size and the findings. A finding (crash, sanitizer report, broken property,
# timeout, out of memory) leaves its input in build/fuzz/findings/ and makes
# the exit status nonzero; replay it with
#   build/fuzz/ropekv_fuzz_api build/fuzz/findings/<file>
# The harness counts the inputs validated, accepted, run and checked against
# the test oracle; the run also fails when the oracle checked too few of them,
# over the seed corpus alone (a first pass, -runs=0) or over the whole run (a
# validator or harness change that rejects or skips most calls would leave
# the fuzzer checking little).
# Usage: bash scripts/fuzz.sh [seconds]     (default: FUZZ_SECONDS or 120)
# Environment: FUZZ_SECONDS, JOBS (build parallelism, default 2),
#   FUZZ_KEEP_CORPUS=DIR (copy the grown corpus there afterwards),
#   FUZZ_MIN_SEED_ORACLE_PCT (default 20; the seeds gave 24.4 when it was set),
#   FUZZ_MIN_ORACLE_PCT (default 2; 2-minute runs gave about 3.5): the least
#   share, in percent, of validated inputs that must be run and oracle-checked.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${1:-${FUZZ_SECONDS:-120}}
bash scripts/install_deps.sh
cxx=$(command -v clang++-14 || true)
if [ -z "$cxx" ]; then
  echo "fuzz: clang++-14 not found (Debian: clang-14, libclang-rt-14-dev)" >&2
  exit 1
fi

build=build/fuzz
mkdir -p "$build"
cmake -S tests/fuzz -B "$build" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$build/configure.log" 2>&1 ||
  { cat "$build/configure.log"; echo "fuzz: configure failed" >&2; exit 1; }
cmake --build "$build" -j "${JOBS:-2}" --target ropekv_fuzz_api

corpus=$build/corpus
findings=$build/findings
rm -rf "$corpus" "$findings" "$build/summary.txt"
mkdir -p "$corpus" "$findings"
cp tests/fuzz/corpus/* "$corpus/"
seeds=$(find "$corpus" -type f | wc -l)

# Sanitizers abort on the first report (a finding); symbolized stacks when
# llvm-symbolizer is there.
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
sym=$(command -v llvm-symbolizer-14 || command -v llvm-symbolizer || true)
[ -n "$sym" ] && export ASAN_SYMBOLIZER_PATH=$sym

# "validated V accepted A run R oracle_checked O" from the harness's counts line.
counts() {
  { grep -o 'counts: validated [0-9]* accepted [0-9]* run [0-9]* oracle_checked [0-9]*' "$1" ||
    true; } | tail -1 | sed 's/counts: //'
}
# Whether oracle_checked is at least $2 percent of validated in counts $1.
share_ok() { echo "$1" | awk -v min="$2" '{ exit !($8 * 100 >= min * $2 && $2 > 0) }'; }

# The seed corpus alone, once: its share of oracle-checked inputs.
seedlog=$build/seeds.log
set +e
"$build/ropekv_fuzz_api" -runs=0 -timeout=20 -rss_limit_mb=4096 -artifact_prefix="$findings/" \
  "$corpus" >"$seedlog" 2>&1
seed_rc=$?
set -e
seed_counts=$(counts "$seedlog")
if [ "$seed_rc" -ne 0 ] || [ -z "$seed_counts" ]; then
  grep -E 'FINDING|ERROR|SUMMARY|runtime error|deadly signal' "$seedlog" | head -20
  echo "fuzz: FAILED on the seed corpus (status $seed_rc; log: $seedlog; inputs in $findings/)"
  exit 1
fi
min_seed=${FUZZ_MIN_SEED_ORACLE_PCT:-20}
if ! share_ok "$seed_counts" "$min_seed"; then
  echo "fuzz: seed corpus: $seed_counts"
  echo "fuzz: FAILED: fewer than $min_seed% of the seed inputs were run and checked against" \
    "the oracle (validator, harness or corpus regression?)"
  exit 1
fi
echo "fuzz: seed corpus: $seed_counts"

log=$build/fuzz.log
echo "fuzz: $seconds s from $seeds seed inputs (log: $log)"
set +e
"$build/ropekv_fuzz_api" -max_total_time="$seconds" -print_final_stats=1 -timeout=20 \
  -rss_limit_mb=4096 -max_len=65536 -artifact_prefix="$findings/" "$corpus" >"$log" 2>&1
rc=$?
set -e

execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
cov=$(grep -oE '(cov|ft): [0-9]+' "$log" | tail -2 | tr '\n' ' ')
size=$(find "$corpus" -type f | wc -l)
found=$(find "$findings" -type f | wc -l)
if [ -n "${FUZZ_KEEP_CORPUS:-}" ]; then
  mkdir -p "$FUZZ_KEEP_CORPUS"
  cp "$corpus"/* "$FUZZ_KEEP_CORPUS/"
fi
run_counts=$(counts "$log")
line="${execs:-?} executions in $seconds s (${rate:-?}/s), corpus $seeds -> $size inputs, coverage ${cov:-?}, findings: $found; ${run_counts:-no counts}"
echo "$line" >"$build/summary.txt"
echo "fuzz: $line (libFuzzer exit status $rc)"
if [ "$rc" -ne 0 ] || [ "$found" -ne 0 ]; then
  grep -E 'FINDING|ERROR|SUMMARY|runtime error|deadly signal' "$log" | head -20
  echo "fuzz: FAILED (inputs in $findings/)"
  exit 1
fi
min_run=${FUZZ_MIN_ORACLE_PCT:-2}
if [ -z "$run_counts" ] || ! share_ok "$run_counts" "$min_run"; then
  echo "fuzz: FAILED: fewer than $min_run% of the validated inputs were run and checked" \
    "against the oracle (validator or harness regression?)"
  exit 1
fi
echo "fuzz: PASSED"
