#!/usr/bin/env bash
# The one GPU call of the Flash-Decoding work (§8.4): GPU tests, then the benchmark with the config sweep.
# Run from the repository root on a CUDA machine; logs and JSON go to $OUT/dec (default ./out-decode/dec).
# Budget: tests ≤ 60 s (~30 s), benchmark ≤ 130 s (~75 s): each phase is cut off by `timeout`; the JSON is
# rewritten after every shape, so a cut-off run keeps its data.
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out-decode}
D="$OUT/dec"
mkdir -p "$D"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,memory.used,memory.total --format=csv > "$D/gpu.txt" 2>&1
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)' | tee -a "$D/gpu.txt"
t0=$(date +%s)
XDIST=""
python3 -c 'import xdist' 2>/dev/null && XDIST="-n 8"
timeout 60 python3 -m pytest -q -p no:cacheprovider $XDIST tests/gpu/test_decode.py tests/kvcache > "$D/tests.log" 2>&1
echo "tests: exit $? in $(( $(date +%s) - t0 ))s"; tail -n 8 "$D/tests.log"
t0=$(date +%s)
timeout 130 python3 -W ignore::UserWarning benchmarks/decode.py --config-sweep --json "$D/decode.json" > "$D/bench.log" 2>&1
echo "benchmark: exit $? in $(( $(date +%s) - t0 ))s"
grep -v '^done' "$D/bench.log" | tail -n 90
