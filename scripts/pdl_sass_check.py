#!/usr/bin/env python3
"""Checks the SASS of a CUDA build for 128-bit global loads placed before a PDL
wait (griddepcontrol.wait, SASS ACQBULK) in the same basic block.

The q, k, v input vectors are the kernels' 128-bit loads that must follow the
wait: with programmatic dependent launch the previous grid may still be writing
them. The assembler schedules within a basic block and has moved a read-only
(ld.global.nc) input load above such a wait (perf/RESULTS.md), so every 128-bit
load in a wait's block, before it, is reported (a cos/sin load placed there
would be too, and is to be looked at). Exit status 1 when one is found.

Usage: cuobjdump --dump-sass build/gpu/cuda/libropekv.a | python3 scripts/pdl_sass_check.py
"""
import re
import sys

BOUNDARY = re.compile(r"\bBRA\b|\bEXIT\b|\bBSYNC\b|\bBSSY\b|\bCALL\b|\bRET\b")


def main():
    functions = {}
    name = None
    for line in sys.stdin:
        m = re.search(r"Function : (\S+)", line)
        if m:
            name = m.group(1)
            functions[name] = []
            continue
        m = re.search(r"/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
        if name and m:
            functions[name].append((m.group(1), m.group(2).strip()))
    waits = 0
    found = []
    for name, code in functions.items():
        for i, (_, text) in enumerate(code):
            if "ACQBULK" not in text:
                continue
            waits += 1
            j = i - 1
            while j >= 0 and not BOUNDARY.search(code[j][1]):
                if "LDG" in code[j][1] and ".128" in code[j][1]:
                    found.append(f"{name} at 0x{code[j][0]}: {code[j][1]}")
                j -= 1
    print(f"PDL waits: {waits} in {len(functions)} kernels; "
          f"128-bit loads before a wait in its block: {len(found)}")
    for f in found[:20]:
        print("  " + f)
    return 1 if found or not functions else 0


if __name__ == "__main__":
    sys.exit(main())
