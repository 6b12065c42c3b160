#!/usr/bin/env bash
# Runs on the GPU machine: the perf suite's rows matching FILTER under
# several configurations, alternating, ROUNDS times, in one call, so that
# every configuration meets the same machine state; then perf/compare.py's
# side-by-side table of their medians. A configuration is LABEL=SPEC where
# SPEC is BUILD, BUILD@T or tune:T: BUILD a folder holding perf/ropekv_perf
# and lib/ (default build/gpu/cuda; an older build carried beside it, which
# may leave lib/ out and use build/gpu/cuda's), T a
# ROPEKV_PERF_TUNING value (cuda/launcher.hpp, Tuning).
# Usage: bash scripts/gpu_ab.sh OUTDIR FILTER ROUNDS LABEL=SPEC [LABEL=SPEC ...]
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: gpu_ab.sh OUTDIR FILTER ROUNDS LABEL=SPEC ...}
filter=${2:?filter}
rounds=${3:?rounds}
shift 3
mkdir -p "$out"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version --format=csv,noheader | tee "$out/gpu.txt"
rc=0
for r in $(seq 1 "$rounds"); do
  for cfg in "$@"; do
    label=${cfg%%=*} spec=${cfg#*=} build=build/gpu/cuda tune=
    case "$spec" in
      tune:*) tune=${spec#tune:} ;;
      *@*) build=${spec%%@*} tune=${spec#*@} ;;
      *) build=$spec ;;
    esac
    lib=$build/lib
    [ -d "$lib" ] || lib=build/gpu/cuda/lib  # a carried build without its own copy
    start=$SECONDS
    ROPEKV_PERF_TUNING=$tune LD_LIBRARY_PATH="$PWD/$lib" "$build/perf/ropekv_perf" \
      --benchmark_filter="$filter" --benchmark_out="$out/$label.$r.json" \
      --benchmark_out_format=json >/dev/null 2>"$out/$label.$r.err" || rc=1
    grep -E 'ceiling' "$out/$label.$r.err" | sed "s/^/$label round $r: /"
    echo "$label round $r: $((SECONDS - start)) s"  # to size the next call's rounds
  done
done
# The median of the rounds per configuration, then the table.
args=()
for cfg in "$@"; do
  label=${cfg%%=*}
  python3 - "$out/$label" "$rounds" <<'PY'
import json, statistics, sys
base, rounds = sys.argv[1], int(sys.argv[2])
runs = [json.load(open(f"{base}.{r}.json")) for r in range(1, rounds + 1)]
merged = runs[0]
for b in merged["benchmarks"]:
    vals = [x["us_per_call"] for run in runs for x in run["benchmarks"]
            if x["name"] == b["name"] and "us_per_call" in x]
    if vals:
        b["us_per_call"] = statistics.median(vals)
json.dump(merged, open(f"{base}.json", "w"))
PY
  args+=("$label=$out/$label.json")
done
python3 perf/compare.py "${args[@]}" | tee "$out/compare.txt"
exit $rc
