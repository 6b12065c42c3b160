#!/usr/bin/env bash
# The main job: install the dependencies, build the perf suite (Release), run
# it, print a summary table and render the plot.
#
#   bash scripts/main_job.sh [OUTDIR]        (default OUTDIR: results)
#
# Writes OUTDIR/perf.json (Google Benchmark JSON), OUTDIR/perf.txt (console
# output), OUTDIR/summary.txt and OUTDIR/perf.png. Builds the CUDA backend
# too when nvcc is on PATH and `nvidia-smi -L` lists a GPU; otherwise the host
# (Kokkos) backend only, whose trimmed set takes a few minutes on 2 cores.
# Environment: ROPEKV_PERF_ARGS adds arguments to ropekv_perf (e.g.
# --benchmark_filter=llama); ROPEKV_CUDA_ARCH overrides the CUDA architecture
# (default: native when a GPU is present).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-results}
mkdir -p "$out"

# ---- dependencies
bash scripts/install_deps.sh

# ---- configure + build
cuda=OFF
if command -v nvcc >/dev/null 2>&1 && command -v nvidia-smi >/dev/null 2>&1 &&
   nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  cuda=ON
fi
build=build/perf-main-$([ "$cuda" = ON ] && echo cuda || echo host)
cfg=(-S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DROPEKV_BUILD_PERF=ON
     -DROPEKV_BUILD_TESTS=OFF -DROPEKV_BUILD_EXAMPLES=OFF -DROPEKV_ENABLE_CUDA=$cuda)
[ "$cuda" = ON ] && cfg+=(-DCMAKE_CUDA_ARCHITECTURES="${ROPEKV_CUDA_ARCH:-native}")
echo "main_job: configuring $build (CUDA $cuda)"
cmake "${cfg[@]}" >"$out/configure.log" || { cat "$out/configure.log"; exit 1; }
jobs=$(nproc 2>/dev/null || echo 2)
cmake --build "$build" --target ropekv_perf -j "$jobs"

# ---- run (stdout: console table; stderr: copy ceilings, notes)
echo "main_job: running $build/perf/ropekv_perf"
# shellcheck disable=SC2086  # ROPEKV_PERF_ARGS is a list of arguments
"$build/perf/ropekv_perf" --benchmark_min_time=0.1 \
  --benchmark_out="$out/perf.json" --benchmark_out_format=json ${ROPEKV_PERF_ARGS:-} |
  tee "$out/perf.txt"

# ---- summary + plot (a python3 that has matplotlib: Debian's, if the first
# python3 on PATH lacks it)
py=python3
if ! "$py" -c 'import matplotlib' 2>/dev/null && [ -x /usr/bin/python3 ]; then py=/usr/bin/python3; fi
echo
"$py" perf/summary.py "$out/perf.json" | tee "$out/summary.txt"
echo
if "$py" -c 'import matplotlib' 2>/dev/null; then
  "$py" perf/plot.py "$out/perf.json" "$out/perf.png"
else
  echo "main_job: no matplotlib for $py: plot skipped" >&2
fi
echo "main_job: results in $out/ (perf.json, perf.txt, summary.txt, perf.png)"
