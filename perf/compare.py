#!/usr/bin/env python3
"""Side-by-side table of several perf-suite runs (Google Benchmark JSON) of the
same rows, e.g. an old and a new binary, or a measurement build, run in one
device call: us per call of each, and each run's ratio to the first; then the
ratios' median and range over all rows and by group (the row's kind without
its -hot and -pt suffixes, and its token count).

    python3 perf/compare.py old=a.json new=b.json [more=c.json ...]
"""
import json
import re
import sys


def rows(path):
    with open(path) as f:
        data = json.load(f)
    out = {}
    for b in data.get("benchmarks", []):
        us = b.get("us_per_call")
        if us is not None and b.get("run_type", "iteration") == "iteration":
            out[b["name"]] = float(us)
    return out


def main(argv):
    runs = []
    for arg in argv:
        label, _, path = arg.partition("=")
        runs.append((label, rows(path)))
    if not runs:
        print(__doc__)
        return 2
    names = [n for n in runs[0][1] if all(n in r for _, r in runs)]
    width = max((len(n) for n in names), default=4)
    head = f"{'row':<{width}} " + " ".join(f"{label:>10}" for label, _ in runs)
    head += "".join(f" {label + '/' + runs[0][0]:>12}" for label, _ in runs[1:])
    print(head)
    ratios = [[] for _ in runs[1:]]
    for n in names:
        base = runs[0][1][n]
        line = f"{n:<{width}} " + " ".join(f"{r[n]:>10.3f}" for _, r in runs)
        for i, (_, r) in enumerate(runs[1:]):
            q = r[n] / base
            ratios[i].append(q)
            line += f" {q:>12.3f}"
        print(line)
    for i, (label, _) in enumerate(runs[1:]):
        if ratios[i]:
            print(f"{label}/{runs[0][0]}: {spread(ratios[i])}")
    groups = {}
    for k, n in enumerate(names):
        groups.setdefault(group(n), []).append(k)
    if len(groups) > 1:
        for i, (label, _) in enumerate(runs[1:]):
            print(f"{label}/{runs[0][0]} by group:")
            for key in sorted(groups):
                print(f"  {key[0]:<24} nnz {key[1]:>6}: "
                      f"{spread([ratios[i][k] for k in groups[key]])}")
    return 0


def spread(ratios):
    """Median, min and max of non-empty ratios, as printed."""
    q = sorted(ratios)
    return (f"median {q[len(q) // 2]:.3f}, min {q[0]:.3f}, max {q[-1]:.3f} "
            f"over {len(q)} rows")


def group(name):
    """(kind without -hot and -pt, token count) of a row name."""
    kind = re.sub(r"-(hot|pt)(?=-|$)", "", name.split("/")[0])
    m = re.search(r"/nnz:(\d+)", name)
    return kind, int(m.group(1)) if m else -1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
