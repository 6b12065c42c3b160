#!/usr/bin/env python3
"""Summary table of a ropekv_perf JSON file (--benchmark_out_format=json).

Usage: python3 perf/summary.py results/perf.json

One row per benchmark: name, µs per call, effective GB/s (byte model of
ropekv_perf --help), % of the copy ceiling measured in the same run, speedup of the fused
op over the unfused baseline (fused rows only), the fused op's speed as a % of
a plain copy of the same byte count (GPU, nnz >= 64), the fused time over the
floor of its dependent-load chain (GPU decode rows), the CPU time of run()
above a bare launch (cpu-run rows), and the benchmark's label (GPU: kernel
path, hot or l2-resident, output check). Skipped benchmarks show their error.
"""
import json
import sys


def clean_name(name):
    for suffix in ("/manual_time", "/real_time"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return name


def fmt(value, spec):
    return format(value, spec) if isinstance(value, (int, float)) else "-"


def main(argv):
    if len(argv) != 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    with open(argv[1]) as f:
        data = json.load(f)
    benches = data.get("benchmarks", [])
    ctx = data.get("context", {})
    print(f"ropekv_perf {ctx.get('date', '')} on {ctx.get('host_name', '?')}, "
          f"{ctx.get('num_cpus', '?')} CPUs @ {ctx.get('mhz_per_cpu', '?')} MHz")
    ceilings = {}
    for b in benches:
        if "copy_GBps" in b:
            family = "cuda" if clean_name(b["name"]).startswith("cuda") else "host"
            ceilings.setdefault(family, b["copy_GBps"])
    for family, gbps in sorted(ceilings.items()):
        kind = ("cudaMemcpyAsync D2D 1 GiB" if family == "cuda"
                else "memcpy 256 MiB, as many threads as the host backend")
        print(f"copy ceiling ({family}): {gbps:.1f} GB/s ({kind}, read + write)")
    if not benches:
        print("no benchmarks in the file")
        return 1
    rows = []
    for b in benches:
        name = clean_name(b["name"])
        if b.get("error_occurred"):
            rows.append((name, "-", "-", "-", "-", "-", "-", "-",
                         "SKIPPED: " + b.get("error_message", "")))
            continue
        rows.append((name, fmt(b.get("us_per_call"), ".2f"), fmt(b.get("GBps"), ".2f"),
                     fmt(b.get("pct_of_copy"), ".1f"), fmt(b.get("pct_of_same_size_copy"), ".1f"),
                     fmt(b.get("speedup_vs_unfused"), ".2f"), fmt(b.get("x_floor"), ".2f"),
                     fmt(b.get("cpu_over_launch_us"), ".2f"), b.get("label", "")))
    head = ("benchmark", "us/call", "GB/s", "% copy", "% same-size copy", "vs unfused",
            "x floor", "cpu over launch us", "note")
    n = len(head) - 1
    widths = [max(len(str(r[i])) for r in rows + [head]) for i in range(n)]
    line = "  ".join(h.ljust(widths[0]) if i == 0 else h.rjust(widths[i])
                     for i, h in enumerate(head[:n])) + "  " + head[n]
    print(line)
    print("-" * len(line))
    for r in rows:
        print("  ".join(str(c).ljust(widths[0]) if i == 0 else str(c).rjust(widths[i])
                        for i, c in enumerate(r[:n])) + ("  " + r[n] if r[n] else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
