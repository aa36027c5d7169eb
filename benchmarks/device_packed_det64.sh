#!/usr/bin/env bash
# One GPU call: the deterministic packed backward at D = 64 on the Gluon kernel's ordered packed build against the
# Triton kernels (variants.py bench, the packed batch's forward+backward, attnlab and attnlab-det, one process each,
# gluon / triton / gluon), then the GPU tests of the deterministic packed builds. Logs and JSON in $OUT/packed-det64.
set -uo pipefail
OUT=${OUT:-out-packed-det64}
D="$OUT/packed-det64"
source "$(dirname "$0")/device_env.sh"
RUN=${RUN:-x}
i=0
for kernel in gluon triton gluon; do
    i=$((i + 1))
    timeout ${BENCH_S:-100} python3 benchmarks/variants.py bench --variants varlen --D 64 --passes fwd_bwd \
        --providers attnlab attnlab-det --packed-det $kernel --json "$D/variants-h200-det64-run$RUN-$i-$kernel.json" \
        --md "$D/det64-$i-$kernel.md" > "$D/bench-$i-$kernel.log" 2>&1
    echo "bench $i ($kernel): exit $?"; tail -n 1 "$D/det64-$i-$kernel.md" 2>/dev/null
done
gpu_tests ${TEST_S:-120} tests.log tests/gpu/test_prefill_gluon_bwd.py -k "packed and determin"
