#!/usr/bin/env python3
"""Markdown tables of a ropekv_perf JSON file (GPU rows) for perf/RESULTS.md.

Usage: python3 perf/decode_tables.py results/perf.json [--bare results/bare.json]

1. Decode (nnz <= 256): per shape, token count and addressing form, the floor of
   the dependent-load chain, the data floor (that chain moving every byte of
   the op, no arithmetic), a copy of the op's bytes (slot mapping's), the move
   floor (a kernel moving the q, k, v bytes) and the math floor (the same with
   the op's arithmetic; the best of its grids and block sizes) and the arith floor
   (the move floor with less arithmetic than the op needs), without and with PDL (hot
   with PDL: the faster of the trigger without early indices and the early-index
   path's, the -pdl-early rows), and the fused op, rotated and hot, without PDL, with
   PDL and with PDL + early indices; ratio to the floor.
2. PDL on / off at every token count (slot mapping, rotated buffers).
3. Larger batches (nnz >= 1024, rotated): slot mapping's time, bandwidth, % of
   the copy ceiling and of a same-size copy, PDL / no PDL, and page tables'.
4. The chain floor (the math floor behind the floor's index chain) and the op floor
   (the op's whole work in its plainest kernel: one 1D grid, U units a thread): at
   decode sizes against the floor and the fused op; the op floor at larger
   sizes its % of the copy ceiling beside the math floor's and the fused op's.
5. CPU time per call: run() against a bare launch of the same kernel, and the
   prepared call's counters (repeated, moving, against the moving bare launch).
6. Decode targets per row: without PDL at most 1.15x the floor, with PDL and early
   indices at most 1.3 µs hot; each row met, beyond the device (a kernel doing less
   than the op, measured in the same run, already past the mark and no slower than
   the op's row) or missed.

--bare: the fused rows of the bare kernels (preset cuda-bare: the library's kernels
with their loads and stores and no arithmetic; scripts/gpu_run.sh writes bare.json
beside perf.json in the same device call): a table of them against the fused rows
(decode sizes, and the larger launches the file has), and one more bound per decode
row in 6.
"""
import collections
import json
import sys


def load(path):
    with open(path) as f:
        data = json.load(f)
    rows = {}
    for b in data.get("benchmarks", []):
        if b.get("error_occurred"):
            continue
        name = b["name"].split("/iterations")[0]
        rows[name] = b
    return rows


def us(rows, name):
    b = rows.get(name)
    return b["us_per_call"] if b else None


def best(rows, kind, suffix, shape, n):
    """The fastest of a floor's rows over its grids and block sizes (kind-[flat]bN + suffix)."""
    return lowest(*(us(rows, f"{kind}-{g}b{b}{suffix}/{shape}/nnz:{n}")
                    for g in ("", "flat") for b in (64, 128, 256)))


def lowest(*values):
    """The smallest of values that are present (None if none is)."""
    present = [v for v in values if v is not None]
    return min(present) if present else None


def hot_pdl_floor(rows, kind, s, n):
    """A floor's hot PDL time (kind cuda-movearith, or cuda-mathfloor over its grids):
    the faster of its two triggers (-hot-pdl, -hot-pdl-early)."""
    if kind == "cuda-mathfloor":
        return lowest(best(rows, kind, "-hot-pdl", s, n), best(rows, kind, "-hot-pdl-early", s, n))
    return lowest(us(rows, f"{kind}-hot-pdl/{s}/nnz:{n}"), us(rows, f"{kind}-hot-pdl-early/{s}/nnz:{n}"))


def fmt(x, spec=".2f"):
    return format(x, spec) if isinstance(x, (int, float)) else "-"


def decode_shapes(rows):
    """The shapes with decode rows (those with a floor row), in the file's order."""
    shapes = []
    for name in rows:
        parts = name.split("/")
        if len(parts) == 3 and parts[0] == "cuda-floor" and parts[1] not in shapes:
            shapes.append(parts[1])
    return shapes


def decode_table(rows):
    shapes = decode_shapes(rows)
    print("| shape | nnz | addressing | floor rot / hot | data floor rot / hot "
          "| same-size copy rot / hot | move floor rot / hot | move floor + PDL rot / hot "
          "| math floor rot / hot | math floor + PDL rot / hot "
          "| arith floor rot / hot | arith floor + PDL rot / hot "
          "| fused rot / hot (x floor) | PDL rot / hot | PDL + early rot / hot |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for s in shapes:
        for n in (1, 8, 64, 256):
            for pt in ("", "-pt"):
                key = lambda kind: f"{kind}{pt}/{s}/nnz:{n}"
                fr, fh = us(rows, key("cuda-floor")), us(rows, key("cuda-floor-hot"))
                r, h = us(rows, key("cuda")), us(rows, key("cuda-hot"))
                pr, ph = us(rows, key("cuda-pdl")), us(rows, key("cuda-hot-pdl"))
                er, eh = us(rows, key("cuda-pdl-early")), us(rows, key("cuda-hot-pdl-early"))
                dr, dh = us(rows, key("cuda-datafloor")), us(rows, key("cuda-datafloor-hot"))
                cr = us(rows, f"cuda-copy/{s}/nnz:{n}")
                ch = us(rows, f"cuda-copy-hot/{s}/nnz:{n}")
                mr, mh = us(rows, f"cuda-move/{s}/nnz:{n}"), us(rows, f"cuda-move-hot/{s}/nnz:{n}")
                mpr = us(rows, f"cuda-move-pdl/{s}/nnz:{n}")
                mph = us(rows, f"cuda-move-hot-pdl/{s}/nnz:{n}")
                ar, ah = best(rows, "cuda-mathfloor", "", s, n), best(rows, "cuda-mathfloor", "-hot", s, n)
                apr = best(rows, "cuda-mathfloor", "-pdl", s, n)
                aph = hot_pdl_floor(rows, "cuda-mathfloor", s, n)
                qr, qh = us(rows, f"cuda-movearith/{s}/nnz:{n}"), us(rows, f"cuda-movearith-hot/{s}/nnz:{n}")
                qpr = us(rows, f"cuda-movearith-pdl/{s}/nnz:{n}")
                qph = hot_pdl_floor(rows, "cuda-movearith", s, n)
                if r is None:
                    continue
                xr = r / fr if fr else None
                xh = h / fh if fh else None
                print(f"| {s} | {n} | {'page table' if pt else 'slot mapping'} | "
                      f"{fmt(fr)} / {fmt(fh)} | {fmt(dr)} / {fmt(dh)} | {fmt(cr)} / {fmt(ch)} | "
                      f"{fmt(mr)} / {fmt(mh)} | {fmt(mpr)} / {fmt(mph)} | "
                      f"{fmt(ar)} / {fmt(ah)} | {fmt(apr)} / {fmt(aph)} | "
                      f"{fmt(qr)} / {fmt(qh)} | {fmt(qpr)} / {fmt(qph)} | "
                      f"{fmt(r)} / {fmt(h)} ({fmt(xr)} / {fmt(xh)}) | "
                      f"{fmt(pr)} / {fmt(ph)} | {fmt(er)} / {fmt(eh)} |")


def pdl_table(rows):
    print("| shape | nnz | no PDL µs | PDL µs | PDL / no PDL | path |")
    print("|---|---|---|---|---|---|")
    for name, b in rows.items():
        parts = name.split("/")
        if len(parts) != 3 or parts[0] != "cuda":
            continue
        p = us(rows, f"cuda-pdl/{parts[1]}/{parts[2]}")
        if p is None:
            continue
        print(f"| {parts[1]} | {parts[2].split(':')[1]} | {fmt(b['us_per_call'])} | {fmt(p)} | "
              f"{fmt(p / b['us_per_call'], '.3f')} | {path_of(b)} |")


def path_of(b):
    label = b.get("label", "")
    return label.split("path ")[1].split(";")[0] if "path " in label else "-"


def large_table(rows):
    print("| shape | nnz | path | µs | GB/s | % copy | % same-size copy | PDL / no PDL "
          "| page table µs (% copy) | page table / slot |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, b in rows.items():
        parts = name.split("/")
        if len(parts) != 3 or parts[0] != "cuda" or int(parts[2].split(":")[1]) < 1024:
            continue
        t = b["us_per_call"]
        p = us(rows, f"cuda-pdl/{parts[1]}/{parts[2]}")
        pt = rows.get(f"cuda-pt/{parts[1]}/{parts[2]}")
        ptt = pt["us_per_call"] if pt else None
        print(f"| {parts[1]} | {parts[2].split(':')[1]} | {path_of(b)} | {fmt(t)} | "
              f"{fmt(b.get('GBps'), '.0f')} | {fmt(b.get('pct_of_copy'), '.1f')} | "
              f"{fmt(b.get('pct_of_same_size_copy'), '.1f')} | "
              f"{fmt(p / t if p else None, '.3f')} | "
              f"{fmt(ptt)} ({fmt(pt.get('pct_of_copy') if pt else None, '.1f')}) | "
              f"{fmt(ptt / t if ptt else None, '.3f')} |")


def opfloor_table(rows):
    """Decode sizes: floor, chain floor (best block size), op floor and fused op
    (x floor) per form and buffers."""
    print("| shape | nnz | form | hot/rot | floor | chain floor (x floor) | op floor (x floor) "
          "| fused (x floor) |")
    print("|---|---|---|---|---|---|---|---|")
    x = lambda v, floor: f"{fmt(v)} ({fmt(v / floor if v else None)})"
    for s, n, pt in decode_rows(rows):
        for temp, hot in (("rot", ""), ("hot", "-hot")):
            floor = us(rows, f"cuda-floor{hot}{pt}/{s}/nnz:{n}")
            chain = best(rows, "cuda-chainfloor", hot + pt, s, n)
            op = us(rows, f"cuda-opfloor-b128{hot}{pt}/{s}/nnz:{n}")
            fused = us(rows, f"cuda{hot}{pt}/{s}/nnz:{n}")
            if not floor or fused is None or (op is None and chain is None):
                continue
            print(f"| {s} | {n} | {'pt' if pt else 'slot'} | {temp} | {fmt(floor)} | "
                  f"{x(chain, floor)} | {x(op, floor)} | {x(fused, floor)} |")


def large_floor_table(rows):
    """Larger sizes, rotated: % of the copy ceiling of the fused op, the best math
    floor and the op floor with 1, 2 and 4 units a thread, both forms."""
    print("| shape | nnz | form | fused | math floor (best) | chain floor (best) | op floor u1 "
          "| u2 | u4 |")
    print("|---|---|---|---|---|---|---|---|---|")
    pct = lambda name: rows[name].get("pct_of_copy") if name in rows else None
    for name in rows:
        parts = name.split("/")
        if len(parts) != 3 or parts[0] != "cuda-opfloor-b128":
            continue
        s, nnz = parts[1], parts[2]
        if int(nnz.split(":")[1]) < 1024:
            continue
        mf = [pct(f"cuda-mathfloor-{g}b{b}/{s}/{nnz}") for g in ("", "flat") for b in (128, 256)]
        mf = [x for x in mf if x is not None]
        for pt in ("", "-pt"):
            ops = [pct(f"cuda-opfloor-b128{u}{pt}/{s}/{nnz}") for u in ("", "-u2", "-u4")]
            ch = [pct(f"cuda-chainfloor-b{b}{pt}/{s}/{nnz}") for b in (128, 256)]
            ch = [x for x in ch if x is not None]
            print(f"| {s} | {nnz.split(':')[1]} | {'pt' if pt else 'slot'} | "
                  f"{fmt(pct(f'cuda{pt}/{s}/{nnz}'), '.1f')} | "
                  f"{fmt(max(mf) if mf else None, '.1f')} | "
                  f"{fmt(max(ch) if ch else None, '.1f')} | "
                  + " | ".join(fmt(x, ".1f") for x in ops) + " |")


def cpu_table(rows):
    keys = ["prepared_over_launch_us", "prepared_moving_over_launch_us",
            "moving_launch_over_launch_us", "prepared_moving_over_moving_launch_us",
            "fields_over_launch_us", "fields_moving_over_moving_launch_us"]
    print("| shape | nnz | run() CPU µs | bare launch CPU µs | run() - launch µs | "
          "prepared, repeated | prepared, moving | moving launch | prepared moving - moving launch | "
          "step fields, repeated | step fields moving - moving launch |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, b in rows.items():
        parts = name.split("/")
        if len(parts) != 3 or parts[0] != "cuda-cpu-run":
            continue
        bare = us(rows, f"cuda-cpu-launch/{parts[1]}/{parts[2]}")
        extra = " | ".join(fmt(b.get(k)) for k in keys)
        print(f"| {parts[1]} | {parts[2].split(':')[1]} | {fmt(b['us_per_call'])} | {fmt(bare)} | "
              f"{fmt(b['us_per_call'] - bare if bare else None)} | {extra} |")


MARK_X_FLOOR = 1.15  # fused / floor without PDL
MARK_EARLY_US = 1.3  # PDL + early indices, hot
BARE = "bare kernel"  # the bound of --bare's rows


def decode_rows(rows):
    """(shape, nnz, page table?) of every fused decode row, in the table's order."""
    return [(s, n, pt) for s in decode_shapes(rows) for n in (1, 8, 64, 256) for pt in ("", "-pt")
            if f"cuda{pt}/{s}/nnz:{n}" in rows]


def bare_table(rows, bare):
    """Decode rows: the fused op and the bare kernels (no arithmetic), x floor, and
    bare / fused, without PDL (rotated, hot) and hot with PDL + early indices; then
    the larger launches' rows the bare file has (% of each run's copy ceiling)."""
    print("| shape | nnz | addressing | fused rot / hot (x floor) | bare rot / hot (x floor) "
          "| bare / fused rot / hot | PDL + early hot: fused / bare |")
    print("|---|---|---|---|---|---|---|")
    ratio = lambda a, b: a / b if a and b else None
    for s, n, pt in decode_rows(rows):
        key = lambda kind: f"{kind}{pt}/{s}/nnz:{n}"
        fr, fh = us(rows, key("cuda-floor")), us(rows, key("cuda-floor-hot"))
        r, h = us(rows, key("cuda")), us(rows, key("cuda-hot"))
        br, bh = us(bare, key("cuda")), us(bare, key("cuda-hot"))
        e, be = us(rows, key("cuda-hot-pdl-early")), us(bare, key("cuda-hot-pdl-early"))
        if br is None and bh is None:
            continue
        print(f"| {s} | {n} | {'page table' if pt else 'slot mapping'} | "
              f"{fmt(r)} / {fmt(h)} ({fmt(ratio(r, fr))} / {fmt(ratio(h, fh))}) | "
              f"{fmt(br)} / {fmt(bh)} ({fmt(ratio(br, fr))} / {fmt(ratio(bh, fh))}) | "
              f"{fmt(ratio(br, r), '.3f')} / {fmt(ratio(bh, h), '.3f')} | {fmt(e)} / {fmt(be)} |")
    print("\n| shape | nnz | addressing | fused µs (% copy) | bare µs (% copy) | bare / fused |")
    print("|---|---|---|---|---|---|")
    for name, b in bare.items():
        parts = name.split("/")
        if len(parts) != 3 or parts[0] not in ("cuda", "cuda-pt") or name not in rows:
            continue
        if int(parts[2].split(":")[1]) < 1024:
            continue
        f = rows[name]
        print(f"| {parts[1]} | {parts[2].split(':')[1]} | "
              f"{'page table' if parts[0] == 'cuda-pt' else 'slot mapping'} | "
              f"{fmt(f['us_per_call'])} ({fmt(f.get('pct_of_copy'), '.1f')}) | "
              f"{fmt(b['us_per_call'])} ({fmt(b.get('pct_of_copy'), '.1f')}) | "
              f"{fmt(b['us_per_call'] / f['us_per_call'], '.3f')} |")


def status_table(rows, bare=None):
    """Per decode row and target: met, beyond (which bound) or missed. A bound is a
    kernel of the same run doing less than the op: without PDL the move, math and
    arith floors (no index chain); with PDL + early indices the move, arith and math
    floors with PDL (they wait before loading q, k, v as the op must; the math floor
    loads its cos/sin before the wait as the op may), each at its faster trigger;
    with bare rows (same device call) the bare kernel of the row, for both targets."""
    bare = bare or {}
    counts = collections.Counter()
    lines = []
    for s, n, pt in decode_rows(rows):
        form = "page table" if pt else "slot mapping"
        for temp, hot in (("rotated", ""), ("hot", "-hot")):
            floor = us(rows, f"cuda-floor{hot}{pt}/{s}/nnz:{n}")
            fused = us(rows, f"cuda{hot}{pt}/{s}/nnz:{n}")
            if not floor or fused is None:
                continue
            bounds = {"move floor": us(rows, f"cuda-move{hot}/{s}/nnz:{n}"),
                      "math floor": best(rows, "cuda-mathfloor", hot, s, n),
                      "arith floor": us(rows, f"cuda-movearith{hot}/{s}/nnz:{n}"),
                      "chain floor": best(rows, "cuda-chainfloor", hot + pt, s, n),
                      BARE: us(bare, f"cuda{hot}{pt}/{s}/nnz:{n}")}
            verdict = classify(fused / floor, {k: v / floor for k, v in bounds.items() if v},
                               MARK_X_FLOOR)
            counts[("x floor", verdict[0])] += 1
            counts[("x floor", "bare only")] += verdict[1].startswith("beyond: only " + BARE)
            lines.append(f"| x floor | {s} | {n} | {form} | {temp} | {fused / floor:.2f} | "
                         f"{verdict[1]} |")
        early = us(rows, f"cuda-hot-pdl-early{pt}/{s}/nnz:{n}")
        if early is not None:
            bounds = {"move floor + PDL": us(rows, f"cuda-move-hot-pdl/{s}/nnz:{n}"),
                      "arith floor + PDL": hot_pdl_floor(rows, "cuda-movearith", s, n),
                      "math floor + PDL": hot_pdl_floor(rows, "cuda-mathfloor", s, n),
                      BARE + " + PDL + early": us(bare, f"cuda-hot-pdl-early{pt}/{s}/nnz:{n}")}
            verdict = classify(early, {k: v for k, v in bounds.items() if v}, MARK_EARLY_US)
            counts[("early", verdict[0])] += 1
            counts[("early", "bare only")] += verdict[1].startswith("beyond: only " + BARE)
            lines.append(f"| PDL + early µs | {s} | {n} | {form} | hot | {early:.2f} | "
                         f"{verdict[1]} |")
    for target, label in (("x floor", f"at most {MARK_X_FLOOR}x the floor (no PDL)"),
                          ("early", f"PDL + early indices at most {MARK_EARLY_US} µs hot")):
        only = counts[(target, "bare only")]
        print(f"- {label}: met {counts[(target, 'met')]}, "
              f"beyond the device {counts[(target, 'beyond')]}"
              + (f" ({only} of them by the bare kernel alone)" if bare else "")
              + f", missed {counts[(target, 'missed')]}")
    print("\n| target | shape | nnz | addressing | buffers | value | verdict |")
    print("|---|---|---|---|---|---|---|")
    for line in lines:
        print(line)


def classify(value, bounds, mark):
    """('met' | 'beyond' | 'missed', text): beyond where a bound is already past mark.
    A bound counts only where it is no slower than the op's own row (value): a kernel
    doing less than the op that takes longer than the op shows only that it is slower."""
    if value <= mark:
        return "met", "met"
    past = {k: v for k, v in bounds.items() if mark < v <= value}
    floors = [k for k in past if not k.startswith(BARE)]
    if floors:
        k = max(floors, key=past.get)
        return "beyond", f"beyond: {k} {past[k]:.2f}"
    if past:  # the library's own kernels without their arithmetic, and no floor
        k = max(past, key=past.get)
        return "beyond", f"beyond: only {k} {past[k]:.2f}"
    return "missed", "missed" + "".join(f", {k} {v:.2f}" for k, v in sorted(bounds.items()))


def main(argv):
    bare = None
    if len(argv) == 4 and argv[2] == "--bare":
        bare = load(argv[3])
    elif len(argv) != 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    rows = load(argv[1])
    print("### Decode\n")
    decode_table(rows)
    print("\n### PDL on and off\n")
    pdl_table(rows)
    print("\n### Larger batches (rotated)\n")
    large_table(rows)
    print("\n### The chain floor and the op floor at decode sizes\n")
    opfloor_table(rows)
    print("\n### Larger batches: floors (rotated, % of the copy ceiling)\n")
    large_floor_table(rows)
    print("\n### CPU time per call\n")
    cpu_table(rows)
    if bare:
        print("\n### The bare kernels (no arithmetic)\n")
        bare_table(rows, bare)
    print("\n### Decode targets by row\n")
    status_table(rows, bare)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
