#!/usr/bin/env bash
# The HIP kernels' resource report without AMD hardware: compiles the device
# source (cuda/kernel_table.cu as HIP) once per architecture with the build's
# own flags (the `hip` preset's compile command) plus clang's
# -Rpass-analysis=kernel-resource-usage, and tabulates registers, scratch,
# spills, LDS and occupancy of every kernel in hip/RESOURCES.md.
#
#   bash scripts/hip_resources.sh            regenerate hip/RESOURCES.md
#   bash scripts/hip_resources.sh --check    CI: write the table under
#       build/hip-resources/ and fail when hip/RESOURCES.md is not that
#       table (its commit line aside) or when a vector-path kernel (every
#       kernel but the generic ones) uses scratch memory (spills or a stack)
#       on any architecture
#   ... --check --report-only                the same, but both are reported,
#       not failed
# Environment: HIP_RESOURCE_ARCHS (default "gfx90a gfx940").
set -euo pipefail
cd "$(dirname "$0")/.."

check=0
report_only=0
for arg in "$@"; do
  case "$arg" in
    --check) check=1 ;;
    --report-only) report_only=1 ;;
    *) echo "usage: $0 [--check [--report-only]]" >&2; exit 2 ;;
  esac
done
archs=${HIP_RESOURCE_ARCHS:-"gfx90a gfx940"}

if ! command -v clang++-15 >/dev/null 2>&1 && ! command -v hipcc >/dev/null 2>&1; then
  echo "hip_resources: SKIPPED (neither clang++-15 nor hipcc found)"
  exit 0
fi

# The build's compile command for the device source, from a configure-only
# build folder of the hip preset.
out=build/hip-resources
mkdir -p "$out"
cmake --preset hip -B "$out" -DCMAKE_EXPORT_COMPILE_COMMANDS=ON -DROPEKV_BUILD_TESTS=OFF \
  -DROPEKV_BUILD_EXAMPLES=OFF -DROPEKV_BUILD_PERF=OFF >"$out/configure.log" 2>&1 ||
  { cat "$out/configure.log"; echo "hip_resources: configure failed" >&2; exit 1; }
cmd=$(python3 - "$out/compile_commands.json" <<'EOF'
import json, shlex, sys
for e in json.load(open(sys.argv[1])):
    if e["file"].endswith("cuda/kernel_table.cu"):
        args = shlex.split(e["command"])
        # Drop the output and the architectures; the caller adds its own.
        keep, skip = [], False
        for a in args:
            if skip:
                skip = False
                continue
            if a in ("-o", "-MF", "-MT"):
                skip = True
                continue
            if a.startswith("--offload-arch=") or a in ("-MD", "-c"):
                continue
            keep.append(a)
        print(shlex.join(keep))
        break
EOF
)
[ -n "$cmd" ] || { echo "hip_resources: no compile command for cuda/kernel_table.cu" >&2; exit 1; }
# ccache (or another launcher) in front of the compiler: run the compiler itself.
cmd=$(python3 -c 'import shlex,sys; a=shlex.split(sys.argv[1]); print(shlex.join(a[1:] if "ccache" in a[0] else a))' "$cmd")

remarks=()
for arch in $archs; do
  log=$out/remarks-$arch.txt
  echo "hip_resources: compiling cuda/kernel_table.cu for $arch (device code only)"
  # shellcheck disable=SC2086
  if ! eval "$cmd --offload-arch=$arch --cuda-device-only -c -o /dev/null \
      -Rpass-analysis=kernel-resource-usage" >"$log" 2>&1; then
    cat "$log" >&2
    echo "hip_resources: compile for $arch failed" >&2
    exit 1
  fi
  remarks+=("$arch=$log")
done

table=$out/RESOURCES.md
[ "$check" -eq 1 ] || table=hip/RESOURCES.md
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
status=0
python3 - "$table" "$commit" "$report_only" "$check" "${remarks[@]}" <<'EOF' || status=$?
import re, subprocess, sys

table, commit, report_only, check = sys.argv[1], sys.argv[2], sys.argv[3] == "1", sys.argv[4] == "1"
dtypes = {"1": "fp32", "2": "fp16", "3": "bf16", "4": "e4m3fn", "5": "e5m2", "6": "e4m3fnuz", "0": "run-time"}
fields = {"SGPRs": "sgpr", "VGPRs": "vgpr", "AGPRs": "agpr", "ScratchSize [bytes/lane]": "scratch",
          "Occupancy [waves/SIMD]": "occupancy", "SGPRs Spill": "sgpr_spill",
          "VGPRs Spill": "vgpr_spill", "LDS Size [bytes/block]": "lds"}

def demangle(names):
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout
    return out.splitlines()

def pretty(full):
    # ropekv::detail::gpu::fused_vec_kernel<(ropekv::DType)3, ..., 64, 0, 64>(...)
    m = re.search(r"(\w+)<(.*)>\(", re.sub(r"^void ", "", full))
    if not m:
        return full, ""
    name, targs = m.group(1), m.group(2)
    parts = [p.strip() for p in targs.split(",")]
    shown = []
    for p in parts:
        d = re.fullmatch(r"\(ropekv::DType\)(\d+)", p)
        if d:
            shown.append(dtypes.get(d.group(1), p))
        elif p in ("true", "false"):
            shown.append("cos fp32" if p == "true" else "cos = input")
        else:
            shown.append(p)
    return name, " ".join(shown)

rows = {}
for spec in sys.argv[5:]:
    arch, path = spec.split("=", 1)
    cur = None
    kernels = []
    for line in open(path, errors="replace"):
        m = re.search(r"remark: .*?Function Name: (\S+)", line)
        if m:
            cur = {"mangled": m.group(1)}
            kernels.append(cur)
            continue
        m = re.search(r"remark: .*?\s([A-Za-z][A-Za-z ]*(?: \[[^\]]+\])?): (\d+)", line)
        if m and cur is not None and m.group(1).strip() in fields:
            cur[fields[m.group(1).strip()]] = int(m.group(2))
    for k, full in zip(kernels, demangle([k["mangled"] for k in kernels])):
        k["name"], k["args"] = pretty(full)
    rows[arch] = kernels

def is_vector(k):
    return "generic" not in k["name"]

lines = [
    "# HIP kernel resources (compiler report)",
    "",
    "Generated by `scripts/hip_resources.sh` from commit `%s`: the device source compiled as" % commit,
    "HIP with the `hip` preset's flags and clang's `-Rpass-analysis=kernel-resource-usage`, one",
    "architecture at a time. No AMD GPU has run these kernels; this is what the compiler allots.",
    "Scratch is per lane (spills and stack); occupancy is waves per SIMD as the compiler estimates",
    "it from registers and LDS. Template arguments: input dtype, output dtype, cos/sin dtype and,",
    "for vector kernels, the compile-time R, N, Dv (0: read at run time).",
    "",
]
failures = []
for arch, kernels in rows.items():
    vec = [k for k in kernels if is_vector(k)]
    scratch_vec = [k for k in vec if k.get("scratch", 0) > 0]
    lines += ["## %s" % arch, "",
              "%d kernels (%d vector-path, %d generic); vector-path kernels using scratch: %d."
              % (len(kernels), len(vec), len(kernels) - len(vec), len(scratch_vec)), "",
              "| kernel | template arguments | SGPRs | VGPRs | AGPRs | scratch B/lane | SGPR spill | VGPR spill | LDS B/block | occupancy |",
              "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for k in sorted(kernels, key=lambda k: (k["name"], k["args"])):
        lines.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            k["name"], k["args"], k.get("sgpr", "?"), k.get("vgpr", "?"), k.get("agpr", "?"),
            k.get("scratch", "?"), k.get("sgpr_spill", "?"), k.get("vgpr_spill", "?"),
            k.get("lds", "?"), k.get("occupancy", "?")))
    lines.append("")
    for k in scratch_vec:
        failures.append("%s: %s<%s> uses %d bytes/lane of scratch" % (arch, k["name"], k["args"], k["scratch"]))
    if not kernels:
        failures.append("%s: no kernel resource remarks (compiler output changed?)" % arch)
open(table, "w").write("\n".join(lines))

for arch, kernels in rows.items():
    vec = [k for k in kernels if is_vector(k)]
    def rng(key, ks):
        vals = [k.get(key, 0) for k in ks]
        return "%d-%d" % (min(vals), max(vals)) if vals else "-"
    print("hip_resources: %s: %d kernels; vector: VGPRs %s, scratch %s B/lane, occupancy %s; "
          "generic: VGPRs %s, scratch %s B/lane" % (
              arch, len(kernels), rng("vgpr", vec), rng("scratch", vec), rng("occupancy", vec),
              rng("vgpr", [k for k in kernels if not is_vector(k)]),
              rng("scratch", [k for k in kernels if not is_vector(k)])))
print("hip_resources: table written to %s" % table)
if failures:
    for f in failures[:10]:
        print("hip_resources: SCRATCH IN VECTOR KERNEL: " + f)
    if len(failures) > 10:
        print("hip_resources: ... %d more" % (len(failures) - 10))
    if check and not report_only:
        sys.exit(3)
    if check:
        print("hip_resources: report-only mode: not failing on %d vector kernels with scratch" % len(failures))
EOF

if [ "$check" -eq 1 ]; then
  # Is the committed table current? (Commit lines differ by design.)
  if diff -q <(grep -v '^Generated by' "$table") <(grep -v '^Generated by' hip/RESOURCES.md 2>/dev/null) \
      >/dev/null 2>&1; then
    echo "hip_resources: hip/RESOURCES.md is current"
  else
    echo "hip_resources: FAILED: hip/RESOURCES.md differs from this build's report" \
         "(regenerate: bash scripts/hip_resources.sh)"
    [ "$report_only" -eq 1 ] || [ "$status" -ne 0 ] || status=4
  fi
fi
if [ "$status" -eq 3 ]; then
  echo "hip_resources: FAILED: vector-path kernels use scratch (see above)"
fi
exit "$status"
