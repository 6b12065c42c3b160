#!/usr/bin/env python3
"""Sums an Nsight Compute source-page CSV (ncu --page source --print-source sass
--csv, one table per profiled launch) over its launches, per SASS instruction.

Usage: python3 scripts/ncu_source_sum.py FILE.csv [KERNEL-REGEX] [TOP]
Prints the instructions in address order with their summed warp-state samples
(all, and the largest stall reasons) and executed warp instructions, then the
TOP instructions by samples.
"""
import csv
import re
import sys


def tables(path, kernel_re):
    name, header, rows = None, None, []
    with open(path, newline="") as f:
        for rec in csv.reader(f):
            if not rec:
                continue
            if rec[0] == "Kernel Name":
                if header and rows:
                    yield name, header, rows
                name, header, rows = rec[1], None, []
            elif rec[0] == "Address":
                header = rec
            elif header and re.match(r"^[0-9a-fx]+$", rec[0]) and len(rec) == len(header):
                if kernel_re is None or re.search(kernel_re, name or ""):
                    rows.append(rec)
    if header and rows:
        yield name, header, rows


def num(x):
    try:
        return float(x.replace(",", ""))
    except ValueError:
        return 0.0


def main(argv):
    if len(argv) < 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    kernel_re = argv[2] if len(argv) > 2 and argv[2] else None
    top = int(argv[3]) if len(argv) > 3 else 25
    acc, order, launches, names = {}, [], 0, set()
    stall_cols = None
    for name, header, rows in tables(argv[1], kernel_re):
        launches += 1
        names.add(name)
        col = {h: i for i, h in enumerate(header)}
        stall_cols = [h for h in header if h.startswith("stall_") and "Not Issued" not in h]
        for r in rows:
            key = (r[col["Address"]], r[col["Source"]])
            if key not in acc:
                acc[key] = {"all": 0.0, "exec": 0.0, **{s: 0.0 for s in stall_cols}}
                order.append(key)
            a = acc[key]
            a["all"] += num(r[col["Warp Stall Sampling (All Samples)"]])
            a["exec"] += num(r[col["Instructions Executed"]])
            for s in stall_cols:
                a[s] += num(r[col[s]])
    if not launches:
        print("no tables", file=sys.stderr)
        return 1
    total = sum(a["all"] for a in acc.values())
    executed = sum(a["exec"] for a in acc.values())
    print(f"{launches} launches of {len(names)} kernel(s); {total:.0f} samples, "
          f"{executed / launches:.0f} warp instructions a launch")
    for n in sorted(names):
        print("  ", n[:160])
    totals = {s: sum(a[s] for a in acc.values()) for s in stall_cols}
    print("stall reasons:", ", ".join(f"{s[6:]} {v / total:.1%}" for s, v in
                                      sorted(totals.items(), key=lambda kv: -kv[1]) if v > 0))
    def line(key):
        a = acc[key]
        reasons = sorted(((a[s], s[6:]) for s in stall_cols if a[s] > 0), reverse=True)[:3]
        why = " ".join(f"{r}:{v:.0f}" for v, r in reasons)
        return f"{key[0]:>6} {a['all']:6.0f} {a['exec'] / launches:6.1f}  {key[1][:70]:70} {why}"
    print("\naddress samples exec/launch  instruction  top stalls")
    for key in order:
        if acc[key]["exec"] > 0 or acc[key]["all"] > 0:
            print(line(key))
    print(f"\ntop {top} by samples")
    for key in sorted(order, key=lambda k: -acc[k]["all"])[:top]:
        print(line(key))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
