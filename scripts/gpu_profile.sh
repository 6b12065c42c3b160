#!/usr/bin/env bash
# Runs on the GPU machine, over a build made by scripts/gpu_build.sh: the
# SASS of the decode kernel and an Nsight Compute profile of the decode
# kernel and the floor kernel (gpt-oss-120b TP8, one token, hot, slot mapping
# and page table), the SASS of the vector and staged kernels and a profile of
# one large launch (llama-3.1-8b, 8192 tokens). Clocks are left alone
# (--clock-control none).
# Usage: bash scripts/gpu_profile.sh OUTDIR
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: gpu_profile.sh OUTDIR}
mkdir -p "$out"
B=build/gpu/cuda  # scripts/gpu_build.sh assembles it
export LD_LIBRARY_PATH="$PWD/$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# Decode kernels <bf16, e4m3fn, fp32, 64, 0, 64> in the two fixed index forms.
cuobjdump --dump-sass "$B/libropekv.a" 2>/dev/null |
  awk '/Function : .*fused_decode_kernel.*DTypeE3E.*Li64ELi0ELi64ELi[12]E/ {on=1; print; next} /Function : / {on=0} on' \
  >"$out/sass_decode.txt"
echo "decode kernel SASS: $(grep -c '^ */\*[0-9a-f]*\*/' "$out/sass_decode.txt") instructions over its instantiations"
for row in cuda-floor-hot cuda-datafloor-hot cuda-hot cuda-floor-hot-pt cuda-hot-pt cuda-hot-pdl-early cuda-hot-pdl-early-pt; do
  echo "== ncu $row/gpt-oss-120b-tp8/nnz:1"
  ncu --clock-control none --kernel-name-base function -k 'regex:fused_decode|floor_kernel' -c 1 \
    --section LaunchStats --section Occupancy --section SchedulerStats --section WarpStateStats \
    --section InstructionStats --section SpeedOfLight --print-details all \
    "$B/perf/ropekv_perf" --benchmark_filter="^$row/gpt-oss-120b-tp8/nnz:1/" 2>&1 |
    grep -vE '^\s*$' >>"$out/ncu.txt"
  grep -E 'Duration|Elapsed Cycles|Executed Instructions |Registers Per|Grid Size|Block Size|Warp Cycles Per Issued|No Eligible' "$out/ncu.txt" | tail -9
done
# Vector, staged and rows kernels <bf16, e4m3fn, fp32, 128, 0, 128> (llama-3.1-8b).
cuobjdump --dump-sass "$B/libropekv.a" 2>/dev/null |
  awk '/Function : .*fused_vec_(staged_|rows_)?kernel.*DTypeE3E.*Li128ELi0ELi128E/ {on=1; print; next} /Function : / {on=0} on' \
  >"$out/sass_vec.txt"
echo "vector + staged kernel SASS: $(grep -c '^ */\*[0-9a-f]*\*/' "$out/sass_vec.txt") instructions"
# Per-instruction stall samples: the decode kernel (slot mapping, hot, one
# token; 10 launches, summed later by scripts/ncu_source_sum.py) and the
# large-launch kernel at 8192 tokens (one launch), at the shortest sampling
# interval (a one-token launch lasts about 1,800 cycles).
ncu --clock-control none --kernel-name-base function -k regex:fused_decode -s 20 -c 10 \
  --warp-sampling-interval 0 --section WarpStateStats --section SourceCounters --page source --print-source sass --csv \
  "$B/perf/ropekv_perf" --benchmark_filter="^cuda-hot/gpt-oss-120b-tp8/nnz:1/" >"$out/ncu_source.csv" 2>&1
echo "per-instruction profile, decode: $(wc -l <"$out/ncu_source.csv") lines"
ncu --clock-control none --kernel-name-base function -k regex:fused_vec -s 5 -c 1 \
  --warp-sampling-interval 0 --section WarpStateStats --section SourceCounters --page source --print-source sass --csv \
  "$B/perf/ropekv_perf" --benchmark_filter="^cuda/llama-3.1-8b/nnz:8192/" >"$out/ncu_source_large.csv" 2>&1
echo "per-instruction profile, large: $(wc -l <"$out/ncu_source_large.csv") lines"
ncu --clock-control none --kernel-name-base function -k regex:fused_vec -s 5 -c 1 \
  --section SpeedOfLight --section InstructionStats --section WarpStateStats --section MemoryWorkloadAnalysis \
  --section SchedulerStats --section LaunchStats --section Occupancy --print-details all \
  "$B/perf/ropekv_perf" --benchmark_filter="^cuda/llama-3.1-8b/nnz:8192/" >"$out/ncu_large.txt" 2>&1
grep -E 'Duration|DRAM Throughput|Executed Instructions |Issue Slots Busy|Registers Per|Warp Cycles Per Issued|Achieved Occupancy' "$out/ncu_large.txt" | head -12
