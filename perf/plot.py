#!/usr/bin/env python3
"""Plot a ropekv_perf JSON file: effective GB/s vs tokens.

Usage: python3 perf/plot.py results/perf.json [results/perf.png]

One panel per backend family (host, cuda); in each, one line per shape and
variant: fused solid, unfused dashed, fused with programmatic dependent
launch dotted; the copy ceiling of that family as a horizontal line. Token
count on a log axis. Needs matplotlib (Debian: python3-matplotlib).
"""
import json
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

NAME = re.compile(r"^(?P<backend>[^/]+)/(?P<shape>[^/]+)/nnz:(?P<nnz>\d+)")
STYLES = {"": "-", "-unfused": "--", "-pdl": ":"}


def parse(path):
    with open(path) as f:
        data = json.load(f)
    series = {}  # (family, variant, shape) -> [(nnz, GBps)]
    ceilings = {}
    for b in data.get("benchmarks", []):
        m = NAME.match(b["name"])
        if not m or b.get("error_occurred") or "GBps" not in b:
            continue
        backend = m.group("backend")
        family = backend.split("-")[0]
        variant = backend[len(family):]
        series.setdefault((family, variant, m.group("shape")), []).append(
            (int(m.group("nnz")), b["GBps"]))
        if "copy_GBps" in b:
            ceilings.setdefault(family, b["copy_GBps"])
    return series, ceilings


def main(argv):
    if len(argv) not in (2, 3):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    out = argv[2] if len(argv) == 3 else re.sub(r"\.json$", "", argv[1]) + ".png"
    series, ceilings = parse(argv[1])
    if not series:
        print("plot: no benchmark results in " + argv[1], file=sys.stderr)
        return 1
    families = sorted({k[0] for k in series}, key=lambda f: (f != "host", f))
    shapes = sorted({k[2] for k in series})
    cmap = plt.get_cmap("tab10" if len(shapes) <= 10 else "tab20")
    colour = {s: cmap(i % cmap.N) for i, s in enumerate(shapes)}
    fig, axes = plt.subplots(1, len(families), figsize=(8 * len(families), 6.5), squeeze=False)
    for ax, family in zip(axes[0], families):
        for (fam, variant, shape), pts in sorted(series.items()):
            if fam != family:
                continue
            pts.sort()
            label = shape + (variant if variant else "")
            ax.plot([p[0] for p in pts], [p[1] for p in pts], STYLES.get(variant, "-."),
                     marker="o", markersize=3, color=colour[shape], label=label, linewidth=1.3)
        if family in ceilings:
            ax.axhline(ceilings[family], color="black", linewidth=1.5,
                       label=f"copy ceiling {ceilings[family]:.0f} GB/s")
        ax.set_xscale("log", base=2)
        ticks = sorted({p[0] for k, pts in series.items() if k[0] == family for p in pts})
        ax.set_xticks(ticks)
        ax.set_xticklabels([str(t) for t in ticks])
        ax.minorticks_off()
        ax.set_yscale("log")
        ax.set_xlabel("tokens (nnz)")
        ax.set_ylabel("effective GB/s (byte model)")
        ax.set_title(f"{family}: fused solid, unfused dashed, PDL dotted")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, ncol=2, loc="lower right")
    fig.suptitle("ropekv: RoPE + FP8 quantize + paged KV append")
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print("plot: wrote " + out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
