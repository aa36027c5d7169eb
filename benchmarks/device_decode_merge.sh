#!/usr/bin/env bash
# One GPU call for the decode merge: the GPU tests of the decode kernels, plans and launches, then
# decode_host.py three times in turn — the default (eager calls of small reads merge inside the split
# kernel, decode_plan.EAGER_FUSED_BELOW_US), the merge kernel on every call (--eager-fused-below 0), the
# default again (the host's speed drifts between processes) — and the breakdown of a kept plan's host time.
# PHASES=sweep instead: decode_host.py --sweep (every split count, the fused merge beside the merge kernel).
# Run from the repository root on a CUDA machine; logs and JSON go to $OUT/merge (default
# ./out-merge/merge), the decode-host files numbered from RUN (three consecutive numbers).
set -uo pipefail
OUT=${OUT:-out-merge}
D="$OUT/merge"
RUN=${RUN:-0}
source "$(dirname "$0")/device_env.sh"
if [ "${PHASES:-}" = "sweep" ]; then
    timeout ${BENCH_S:-300} python3 benchmarks/decode_host.py --sweep --json "$D/decode-host-${GPU_TAG}-run$RUN.json" \
        > "$D/decode.log" 2>&1
    echo "decode_host --sweep: exit $?"; grep "^|" "$D/decode.log"
    exit 0
fi
decode_gpu_tests || { echo "GPU tests failed: no benchmarks"; exit 1; }
n=$RUN
for flags in "" "--eager-fused-below 0" ""; do
    t0=$(date +%s)
    echo "== decode_host.py $flags (run $n)" >> "$D/decode.log"
    timeout ${BENCH_S:-120} python3 benchmarks/decode_host.py $flags --json "$D/decode-host-${GPU_TAG}-run$n.json" \
        >> "$D/decode.log" 2>&1
    echo "decode_host $flags (run $n): exit $? in $(( $(date +%s) - t0 ))s"
    n=$((n + 1))
done
grep "^==\|attnlab.flash_decode (plan kept)\|merge kernel every\|attnlab |" "$D/decode.log"
python3 benchmarks/decode_host.py --breakdown --calls 1000 2>&1 | head -18 > "$D/breakdown.log"
cat "$D/breakdown.log"
