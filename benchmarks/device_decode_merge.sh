#!/usr/bin/env bash
# One GPU call for the decode merge: the GPU tests of the decode kernels and launches, then decode_host.py
# twice — the default (the merge kernel, with --sweep: every split count, and the fused merge beside it at a
# few) and --fused-merge (the splits merged inside the split kernel: one launch per call) — and the
# breakdown of a kept plan's host time, each way. Run from the repository root on a CUDA machine; logs and
# JSON go to $OUT/merge (default ./out-merge/merge), the decode-host files numbered by RUN_A and RUN_B.
set -uo pipefail
OUT=${OUT:-out-merge}
D="$OUT/merge"
source "$(dirname "$0")/device_env.sh"
t0=$(date +%s)
timeout ${TEST_S:-240} python3 -m pytest -q -p no:cacheprovider $XDIST tests/gpu/test_launch.py \
    tests/gpu/test_decode.py tests/gpu/test_decode_plans.py tests/gpu/test_decode_variants.py > "$D/tests.log" 2>&1
rc=$?
echo "tests: exit $rc in $(( $(date +%s) - t0 ))s"; tail -n 2 "$D/tests.log"; grep "^FAILED" "$D/tests.log" | head
[ "$rc" = 0 ] || { echo "GPU tests failed: no benchmarks"; exit 1; }
for way in a b; do
    run=$([ $way = a ] && echo "${RUN_A:-x}" || echo "${RUN_B:-y}")
    flags=$([ $way = a ] && echo "--sweep" || echo "--fused-merge")
    t0=$(date +%s)
    timeout ${BENCH_S:-200} python3 benchmarks/decode_host.py $flags --json "$D/decode-host-h200-run$run.json" \
        > "$D/decode-$way.log" 2>&1
    echo "decode_host $flags: exit $? in $(( $(date +%s) - t0 ))s"; grep "^|" "$D/decode-$way.log" | head -70
done
{ python3 benchmarks/decode_host.py --breakdown --calls 1000 2>&1 | head -16
  python3 benchmarks/decode_host.py --breakdown --fused-merge --calls 1000 2>&1 | head -16; } > "$D/breakdown.log"
cat "$D/breakdown.log"
