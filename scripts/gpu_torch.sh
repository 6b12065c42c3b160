#!/usr/bin/env bash
# Runs on the GPU machine: builds the PyTorch op (python/) against that
# machine's torch (its C++ ABI must match), linking the libropekv.so that
# scripts/gpu_build.sh built here (preset cuda-shared: host + CUDA backends,
# shared CUDA runtime), then runs the pytest suite (CUDA tests included) and
# the layer benchmark. Everything lands under OUTDIR.
# Usage: bash scripts/gpu_torch.sh OUTDIR [layer-bench tokens, e.g. 8,64,1024]
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: gpu_torch.sh OUTDIR [tokens]}
tokens=${2:-8,16,64,256,1024}
mkdir -p "$out"
lib=$PWD/build/gpu/cuda-shared  # scripts/gpu_build.sh assembles it
op=$PWD/build/torch-gpu
export LD_LIBRARY_PATH="$lib:$lib/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
rc=0
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name())" |
  tee "$out/torch.txt"
echo "build: $(tr '\n' ' ' <"$lib/BUILD_INFO" 2>/dev/null || echo unknown)" | tee -a "$out/torch.txt"

echo "== build the op against this torch"
{ cmake -S python -B "$op" -G Ninja -DCMAKE_BUILD_TYPE=Release -DROPEKV_PREBUILT="$lib" \
    -DROPEKV_PYTHON="$(command -v python3)" &&
  cmake --build "$op" -j "$(nproc)"; } >"$out/build.log" 2>&1 || { rc=1; tail -30 "$out/build.log"; }

echo "== pytest"
PYTHONPATH="$op" ROPEKV_HOST_REFERENCE="$op/ropekv_host_reference.so" \
  timeout 400 python3 -m pytest -v -rs -p no:cacheprovider --junitxml="$out/pytest.xml" \
  python/tests >"$out/pytest.log" 2>&1 || rc=1
tail -25 "$out/pytest.log"
python3 scripts/pytest_counts.py "$out/pytest.xml" || rc=1

echo "== layer benchmark"
PYTHONPATH="$op" timeout 300 python3 perf/layer_bench.py --tokens "$tokens" \
  --out "$out/layer_bench.json" 2>"$out/layer_bench.err" | tee "$out/layer_bench.txt" || rc=1
tail -5 "$out/layer_bench.err"
exit $rc
