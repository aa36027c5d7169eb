#!/usr/bin/env bash
# The one GPU call of the Flash-Decoding work (§8.4): GPU tests, then the benchmark.
# Run from the repository root on a CUDA machine; logs and JSON go to $OUT (default ./out-decode).
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out-decode}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.used,memory.total --format=csv | tee "$OUT/gpu.txt"
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)'
t0=$(date +%s)
python3 -m pytest -q -p no:cacheprovider tests/test_gpu_decode.py tests/test_kvcache.py > "$OUT/tests.log" 2>&1
echo "tests: exit $? in $(( $(date +%s) - t0 ))s"; tail -n 15 "$OUT/tests.log"
t0=$(date +%s)
python3 benchmarks/decode.py --json "$OUT/decode.json" 2>&1 | tee "$OUT/bench.log" | grep -v '^done'
echo "benchmark: exit ${PIPESTATUS[0]} in $(( $(date +%s) - t0 ))s"
