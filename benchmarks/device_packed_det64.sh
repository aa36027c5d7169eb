#!/usr/bin/env bash
# One GPU call: the deterministic packed backward on the Gluon kernel's ordered packed build against the Triton
# kernels (variants.py bench, the packed batch's forward+backward, attnlab and attnlab-det, one process each, in the
# order KERNELS: default "gluon triton gluon"), at head dim DIM (default 64; "64 128" times both in each process,
# D = 64 first), then the GPU tests of the deterministic packed builds (TESTS=0 leaves them out). Logs and JSON in
# $OUT/packed-det64.
set -uo pipefail
OUT=${OUT:-out-packed-det64}
D="$OUT/packed-det64"
source "$(dirname "$0")/device_env.sh"
RUN=${RUN:-x}
i=0
DIM=${DIM:-64}
tag=${DIM// /-}
for kernel in ${KERNELS:-gluon triton gluon}; do
    i=$((i + 1))
    timeout ${BENCH_S:-100} python3 benchmarks/variants.py bench --variants varlen --D $DIM --passes fwd_bwd \
        --providers attnlab attnlab-det --packed-det $kernel --json "$D/variants-${GPU_TAG}-det$tag-run$RUN-$i-$kernel.json" \
        --md "$D/det$tag-$i-$kernel.md" > "$D/bench-$tag-$i-$kernel.log" 2>&1
    echo "bench $i ($kernel): exit $?"; tail -n +3 "$D/det$tag-$i-$kernel.md" 2>/dev/null
done
[ "${TESTS:-1}" = 0 ] || gpu_tests ${TEST_S:-120} tests.log tests/gpu/test_prefill_gluon_bwd.py -k "packed and determin"
