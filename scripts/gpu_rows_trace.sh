#!/usr/bin/env bash
# Runs on the GPU machine: where a rows-kernel launch's time goes, team by
# team. BUILD is a measurement build of the perf suite compiled with
# -DROPEKV_ROWS_TRACE (cuda/kernels/vec_rows.cuh): each team's lane 0 records
# the global timer at its start and after each token. For each benchmark
# row matching a FILTER (one row each), the suite runs it and the last
# launch's trace is summarised: the launch's span, its teams' starts, first
# and last tokens, the time a token takes by its place in the team's order,
# when each multiprocessor's teams end on average, and how many teams are
# still running in each tenth of the span.
# Usage: ROPEKV_PERF_TUNING=... bash scripts/gpu_rows_trace.sh BUILD OUTDIR FILTER...
# (build: cmake --preset cuda -B build/trace -DCMAKE_CUDA_FLAGS=-DROPEKV_ROWS_TRACE
#  -DCMAKE_CXX_FLAGS=-DROPEKV_ROWS_TRACE && cmake --build build/trace --target ropekv_perf)
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:?usage: gpu_rows_trace.sh BUILD OUTDIR FILTER...}
out=${2:?outdir}
shift 2
mkdir -p "$out"
i=0
for filter in "$@"; do
  i=$((i + 1))
  ROPEKV_ROWS_TRACE_OUT="$out/trace$i.bin" "$build/perf/ropekv_perf" --benchmark_filter="$filter" \
    --benchmark_out="$out/trace$i.json" --benchmark_out_format=json >"$out/trace$i.txt" 2>&1
  echo "== $filter"
  grep -E '^cuda' "$out/trace$i.txt" | head -3
  python3 - "$out/trace$i.bin" <<'PY'
import struct, sys, statistics as st
raw = open(sys.argv[1], "rb").read()
n = len(raw) // 8
vals = struct.unpack(f"<{n}Q", raw)
S = 64
teams = []
for t in range(n // S):
    row = vals[t * S:(t + 1) * S]
    if row[0] == 0:
        continue
    k = 1
    while k < S - 1 and row[k] != 0:
        k += 1
    teams.append((list(row[:k]), row[S - 1]))
if not teams:
    print("no trace (did the launch take the rows kernel?)"); sys.exit(0)
t0 = min(r[0] for r, _ in teams)
end = max(r[-1] for r, _ in teams)
span = (end - t0) / 1000
pct = lambda xs, q: sorted(xs)[min(len(xs) - 1, int(q * len(xs)))]
def show(name, xs):
    xs = [x / 1000 for x in xs]
    print(f"{name:28s} min {min(xs):7.2f}  p10 {pct(xs,.1):7.2f}  p50 {pct(xs,.5):7.2f}  "
          f"p90 {pct(xs,.9):7.2f}  max {max(xs):7.2f} us")
toks = [len(r) - 1 for r, _ in teams]
print(f"teams {len(teams)}, tokens a team {min(toks)}-{max(toks)}, multiprocessors "
      f"{len(set(sm for _, sm in teams))}, span {span:.2f} us (first start to last token)")
show("start", [r[0] - t0 for r, _ in teams])
show("first token done", [r[1] - t0 for r, _ in teams if len(r) > 1])
show("last token done", [r[-1] - t0 for r, _ in teams])
for j in range(1, max(toks) + 1):
    d = [r[j] - r[j - 1] for r, _ in teams if len(r) > j]
    show(f"token {j} (teams {len(d)})", d)
by_sm = {}
for r, sm in teams:
    by_sm.setdefault(sm, []).append(r[-1] - t0)
means = [sum(v) / len(v) for v in by_sm.values()]
show("a multiprocessor's mean end", means)
bins = 10
busy = []
for b in range(bins):
    lo = t0 + (end - t0) * b / bins
    busy.append(sum(1 for r, _ in teams if r[0] <= lo < r[-1]))
print("teams running at each tenth of the span:", " ".join(str(x) for x in busy))
PY
done
