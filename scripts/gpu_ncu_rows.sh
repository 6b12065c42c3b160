#!/usr/bin/env bash
# Runs on the GPU machine, over a build made by scripts/gpu_build.sh: one
# Nsight Compute launch (caches flushed, clocks left alone) of each perf row
# named, printing per row the counters that say where a large launch's time
# goes (duration, DRAM and L2 throughput, instructions, occupancy, registers,
# the leading warp stall reasons). Full reports land under OUTDIR.
# ROPEKV_NCU_CACHE=none keeps the caches as the row leaves them (its hot
# rows: the data resident in the L2, as the perf suite times them).
# A row is [TUNING%]ROW: ROW a perf-suite name without the "/iterations..."
# tail (e.g. cuda-pt/llama-3.1-8b/nnz:8192), TUNING a ROPEKV_PERF_TUNING value.
# Usage: bash scripts/gpu_ncu_rows.sh OUTDIR ROW [ROW ...]
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: gpu_ncu_rows.sh OUTDIR ROW [ROW ...]}
shift
mkdir -p "$out"
B=${ROPEKV_GPU_BUILD:-build/gpu/cuda}
export LD_LIBRARY_PATH="$PWD/$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
metrics=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed
metrics+=,lts__throughput.avg.pct_of_peak_sustained_elapsed,smsp__inst_executed.sum
metrics+=,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread
metrics+=,launch__grid_size,launch__block_size,smsp__issue_active.avg.pct_of_peak_sustained_active
metrics+=,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct
metrics+=,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio
metrics+=,smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio
metrics+=,smsp__average_warps_issue_stalled_drain_per_issue_active.ratio
metrics+=,smsp__average_warps_issue_stalled_wait_per_issue_active.ratio
metrics+=,smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio
metrics+=,smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio
metrics+=,smsp__average_warps_issue_stalled_no_instruction_per_issue_active.ratio
metrics+=,smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio
metrics+=,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio
for spec in "$@"; do
  tune= row=$spec
  case "$spec" in *%*) tune=${spec%%%*} row=${spec#*%} ;; esac
  name=$(echo "$spec" | tr '/:%=,' '_____')
  ROPEKV_PERF_TUNING=$tune ncu --clock-control none --cache-control "${ROPEKV_NCU_CACHE:-all}" -k 'regex:fused|floor|move' \
    -s 3 -c 1 --metrics "$metrics" "$B/perf/ropekv_perf" --benchmark_filter="^$row/" >"$out/$name.txt" 2>&1
  echo "== $spec"
  grep -E '\)x\(|^\s+[a-z0-9_]+__[a-z0-9_.]+' "$out/$name.txt" |
    awk '/\)x\(/ {match($0, /\([0-9, ]+\)x\([0-9, ]+\)/); print "  " substr($1, 1, 40) " " substr($0, RSTART, RLENGTH); next} {printf "  %-64s %s\n", $1, $NF}' |
    sed -e 's/smsp__average_warps_issue_stalled_//' -e 's/_per_issue_active.ratio/ (stall)/' |
    head -30
done
