#!/usr/bin/env bash
# Runs on the GPU machine, over a build made by scripts/gpu_build.sh:
# the CUDA test suite, the multi-device tests (CudaMultiDevice, in a process
# of their own: their first calls must be the process's first; they skip,
# saying so, below two GPUs), compute-sanitizer memcheck (multi-device tests
# included) + racecheck, the SASS load width check and the perf suite, and
# (where build/gpu/cuda-bare was carried) the bare kernels' rows.
# Everything lands under OUTDIR.
# Usage: bash scripts/gpu_run.sh OUTDIR [perf-filter] [sanitize: 0|1]
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: gpu_run.sh OUTDIR [perf-filter] [sanitize]}
filter=${2:-.}
sanitize=${3:-1}
mkdir -p "$out"
B=${ROPEKV_GPU_BUILD:-build/gpu/cuda}  # scripts/gpu_build.sh assembles it
export LD_LIBRARY_PATH="$PWD/$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
rc=0
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version --format=csv | tee "$out/gpu.txt"
gpus=$(nvidia-smi -L | tee -a "$out/gpu.txt" | grep -c '^GPU')
echo "GPUs: $gpus" | tee -a "$out/gpu.txt"
echo "build: $(tr '\n' ' ' <"$B/BUILD_INFO" 2>/dev/null || echo unknown)" | tee -a "$out/gpu.txt"

echo "== CUDA tests"
timeout 300 "$B/tests/ropekv_tests_cuda" --gtest_brief=1 --gtest_filter='-CudaMultiDevice.*' \
  >"$out/tests.log" 2>&1 || rc=1
grep -E '^\[ fp8 hw|oracle|PASSED|FAILED|SKIPPED|tests ran' "$out/tests.log" | tail -20

echo "== CUDA multi-device tests ($gpus GPUs)"
md=$(mktemp)
timeout 300 "$B/tests/ropekv_tests_cuda" --gtest_filter='CudaMultiDevice.*' >"$md" 2>&1 || rc=1
{ echo "== CudaMultiDevice (a process of its own)"; cat "$md"; } >>"$out/tests.log"
grep -E -A1 ': (Skipped|Failure)$' "$md" | grep -v -e '^--$' -e ': Skipped$' | head -20  # why
sed -n '/^\[==========\] .* ran\./,$p' "$md"  # the summary

if [ "$sanitize" = 1 ]; then
  for tool in memcheck racecheck; do
    echo "== compute-sanitizer $tool"
    compute-sanitizer --tool "$tool" --error-exitcode 9 "$B/tests/ropekv_tests_cuda" \
      --gtest_brief=1 --gtest_filter='Cuda/GridCase.Run/c00*:Cuda/GridCase.Run/c01*:CudaRuntime.*:CudaPdl.*:Cuda/Issue11.*:Cuda/PreparedCallSuite.*:-CudaRuntime.LargeBatchGridStride' \
      >"$out/sanitizer_$tool.log" 2>&1 || rc=1
    tail -3 "$out/sanitizer_$tool.log"
    if [ "$tool" = memcheck ]; then  # the multi-device tests, in a process of their own
      compute-sanitizer --tool memcheck --error-exitcode 9 "$B/tests/ropekv_tests_cuda" \
        --gtest_filter='CudaMultiDevice.*' >"$md" 2>&1 || rc=1
      { echo "== CudaMultiDevice (a process of its own)"; cat "$md"; } >>"$out/sanitizer_$tool.log"
      tail -3 "$md"
    fi
  done
fi

rm -f "$md"

echo "== SASS: 128-bit global loads in the vector kernels"
sass=$(mktemp)  # kept out of OUTDIR: the device tool returns at most 8 files
cuobjdump --dump-sass "$B/libropekv.a" >"$sass" 2>&1 || true
echo "LDG.E.128: $(grep -c 'LDG.E.128' "$sass"), LDG.E.64: $(grep -c 'LDG.E.64' "$sass"), STG.E.64: $(grep -c 'STG.E.64' "$sass"), F2FP (cvt fp8): $(grep -c 'F2FP' "$sass")"
echo "== SASS: no input load before a PDL wait"
python3 scripts/pdl_sass_check.py <"$sass" || rc=1

echo "== perf"
"$B/perf/ropekv_perf" --benchmark_filter="$filter" --benchmark_out="$out/perf.json" \
  --benchmark_out_format=json >"$out/perf.txt" 2>"$out/perf.err" || rc=1
python3 perf/summary.py "$out/perf.json" | tee "$out/summary.txt"
tail -5 "$out/perf.err"

# The bare kernels (preset cuda-bare: the same kernels without their arithmetic,
# wrong output) on the fused decode rows and, without PDL, 8192 and 32768 tokens,
# which perf/decode_tables.py --bare reads beside perf.json; only where that
# build was carried (ROPEKV_GPU_BARE names another) and the filter takes decode rows.
bare=${ROPEKV_GPU_BARE:-build/gpu/cuda-bare}
if [ -x "$bare/perf/ropekv_perf" ] && [[ "cuda-hot/shape/nnz:1/" =~ $filter ]]; then
  echo "== perf, bare kernels ($bare): fused decode rows, and 8192 and 32768 tokens without PDL"
  ROPEKV_PERF_GPU_NNZ=1,8,64,256,8192,32768 "$bare/perf/ropekv_perf" \
    --benchmark_filter='^cuda(-hot)?(-pdl(-early)?)?(-pt)?/.*/nnz:(1|8|64|256)/|^cuda(-pt)?/.*/nnz:(8192|32768)/' \
    --benchmark_out="$out/bare.json" \
    --benchmark_out_format=json >/dev/null 2>"$out/bare.err" || rc=1
  tail -2 "$out/bare.err"
fi
exit $rc
