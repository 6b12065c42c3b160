#!/usr/bin/env bash
# Fingerprints the CUDA kernels as nvcc generates them for sm_90, with the
# library's own flags: per kernel, a hash of its PTX body and ptxas's
# registers, spills and stack. Two trees with the same fingerprint compile
# to the same machine code, so a refactor that leaves it unchanged cannot
# move the kernels' performance (no GPU needed; the launcher is not covered).
# Usage: bash scripts/kernel_fingerprint.sh [OUTFILE]   (default: stdout)
#        diff <(bash scripts/kernel_fingerprint.sh) old.txt
set -euo pipefail
cd "$(dirname "$0")/.."
command -v nvcc >/dev/null || { echo "kernel_fingerprint: nvcc not found" >&2; exit 1; }
out=${1:-/dev/stdout}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cfg=$tmp/include/ropekv
mkdir -p "$cfg"
# The config header as a host + CUDA build writes it.
sed -e 's/@ROPEKV_CFG_KOKKOS@/1/' -e 's/@ROPEKV_CFG_CUDA@/1/' -e 's/@ROPEKV_CFG_HIP@/0/' \
  core/include/ropekv/config.hpp.in >"$cfg/config.hpp"
flags=(-I core/include -I "$tmp/include" -I core -I . -O3 -DNDEBUG -std=c++17 --fmad=false
       -Xcompiler=-ffp-contract=off -arch=sm_90)
nvcc "${flags[@]}" -ptx cuda/kernel_table.cu -o "$tmp/k.ptx"
nvcc "${flags[@]}" -cubin cuda/kernel_table.cu -o "$tmp/k.cubin" -Xptxas -v 2>"$tmp/ptxas.txt"
python3 - "$tmp/k.ptx" "$tmp/ptxas.txt" >"$out" <<'PY'
import hashlib, re, sys
ptx = open(sys.argv[1]).read()
# Each .entry's body with what does not change the code made neutral: the
# kernel's own name, and the numbers nvcc gives labels and local depots by
# the function's position in the file.
bodies = {}
for m in re.finditer(r"\.entry\s+(\S+)\s*\((.*?)\n\}\n", ptx, re.S):
    name, body = m.group(1), m.group(0).replace(m.group(1), "KERNEL")
    body = re.sub(r"\$L__BB\d+_", "$L__BB_", body)
    body = re.sub(r"__local_depot\d+", "__local_depot", body)
    bodies[name] = hashlib.sha1(body.encode()).hexdigest()[:12]
res, cur = {}, None
for line in open(sys.argv[2]):
    m = re.search(r"Compiling entry function '(\S+)'", line)
    if m: cur = m.group(1)
    m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
    if m and cur: res.setdefault(cur, {}).update(stack=m.group(1), spills=m.group(2) + "/" + m.group(3))
    m = re.search(r"Used (\d+) registers", line)
    if m and cur: res.setdefault(cur, {}).update(regs=m.group(1))
print(f"# {len(bodies)} kernels: PTX hash, registers, spill stores/loads bytes, stack bytes")
for name in sorted(bodies):
    r = res.get(name, {})
    print(f"{bodies[name]} regs={r.get('regs','?')} spills={r.get('spills','?')} stack={r.get('stack','?')} {name}")
PY
