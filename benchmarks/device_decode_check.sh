#!/usr/bin/env bash
# One GPU call for the decode host path: the GPU tests of the decode kernels, plans and launches, then
# decode_host.py's breakdown of a kept plan's call (each step alone, interleaved rounds: the key beside the
# key as it was built before) and its eager A/B (one launch against two, alternating in one process).
# Run from the repository root on a CUDA machine; logs and JSON go to $OUT/decode (default
# ./out-decode/decode): decode-breakdown-<gpu>-run$RUN.json and decode-host-<gpu>-run$RUN.json. EAGER=0 leaves the
# eager A/B out; GLUON=1 then runs device_gluon_decode.sh (the Gluon split kernel's tests and A/B) with GLUON_RUN.
set -uo pipefail
OUT=${OUT:-out-decode}
D="$OUT/decode"
RUN=${RUN:-x}
source "$(dirname "$0")/device_env.sh"
decode_gpu_tests || { echo "GPU tests failed: no benchmarks"; exit 1; }
t0=$(date +%s)
timeout ${BENCH_S:-120} python3 benchmarks/decode_host.py --breakdown --calls 1000 \
    --json "$D/decode-breakdown-${GPU_TAG}-run$RUN.json" > "$D/breakdown.log" 2>&1
echo "breakdown: exit $? in $(( $(date +%s) - t0 ))s"; head -n 24 "$D/breakdown.log"
[ "${EAGER:-1}" = 1 ] || { [ "${GLUON:-0}" = 1 ] && RUN=${GLUON_RUN:-x} bash "$(dirname "$0")/device_gluon_decode.sh"; exit 0; }
t0=$(date +%s)
timeout ${BENCH_S:-120} python3 benchmarks/decode_host.py --eager-ab --json "$D/decode-host-${GPU_TAG}-run$RUN.json" \
    > "$D/eager-ab.log" 2>&1
echo "eager-ab: exit $? in $(( $(date +%s) - t0 ))s"; grep "^|" "$D/eager-ab.log" | head -n 30
[ "${GLUON:-0}" = 1 ] && RUN=${GLUON_RUN:-x} bash "$(dirname "$0")/device_gluon_decode.sh"
exit 0
