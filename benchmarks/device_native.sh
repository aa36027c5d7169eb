#!/usr/bin/env bash
# One GPU call for the native decode call (attnlab.gpu.native): its module built (timed), its GPU tests, the decode GPU
# suite with it on for every call (ATTNLAB_NATIVE_DECODE=1), then two decode-host runs — HOST_RUN with the library's
# defaults (its host rows hold the native call's knob row beside the kept call) and HOST_RUN + 1 with --native (every
# row, the eager rows of the speed table among them, through it); with BREAKDOWN_RUN, decode_host.py's breakdown of a
# kept call (the program's C++ call timed alone among its steps). WANT (e.g. H200): run nothing, exit 3, on another
# GPU. Run from the repository root on a CUDA machine; logs and JSON go to $OUT/native (default ./out-native/native),
# and with TAR set into one archive, $OUT/all.tgz.
set -uo pipefail
OUT=${OUT:-out-native}
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
echo "$GPU"
if [ -n "${WANT:-}" ] && [[ "$GPU" != *"$WANT"* ]]; then echo "not $WANT: nothing run"; exit 3; fi
: "${HOST_RUN:?set HOST_RUN, the number of the first decode-host run}"
D="$OUT/native"
source "$(dirname "$0")/device_env.sh"
t0=$(date +%s)
python3 -c 'from attnlab.gpu import native; m = native.module(); print("native module:", m)' > "$D/build.log" 2>&1
echo "build: exit $? in $(( $(date +%s) - t0 ))s"; tail -n 3 "$D/build.log"
gpu_tests ${TEST_S:-180} native-tests.log tests/gpu/test_decode_native.py tests/test_native_decode.py \
    tests/test_native_decode_driver.py
ATTNLAB_NATIVE_DECODE=1 gpu_tests ${TEST_S:-300} suite-native-on.log tests/gpu/test_launch.py tests/gpu/test_decode.py \
    tests/gpu/test_decode_plans.py tests/gpu/test_decode_variants.py
for run in "$HOST_RUN" $((HOST_RUN + 1)); do
    args=""; [ "$run" != "$HOST_RUN" ] && args="--native"
    t0=$(date +%s)
    timeout ${HOST_S:-200} python3 benchmarks/decode_host.py $args --json "$D/decode-host-${GPU_TAG}-run$run.json" \
        --md "$D/decode-host-run$run.md" > "$D/host-run$run.log" 2>&1
    echo "decode_host${args:+ $args}: exit $? in $(( $(date +%s) - t0 ))s"
    sed -n '/^| call |/,/^$/p' "$D/decode-host-run$run.md" 2>/dev/null || tail -n 20 "$D/host-run$run.log"
done
if [ -n "${BREAKDOWN_RUN:-}" ]; then  # the kept call's steps, the program's C++ call among them
    t0=$(date +%s)
    timeout ${BENCH_S:-150} python3 benchmarks/decode_host.py --breakdown --calls 1000 \
        --json "$D/decode-breakdown-${GPU_TAG}-run$BREAKDOWN_RUN.json" > "$D/breakdown-run$BREAKDOWN_RUN.log" 2>&1
    echo "breakdown: exit $? in $(( $(date +%s) - t0 ))s"; head -n 24 "$D/breakdown-run$BREAKDOWN_RUN.log"
fi
if [ -n "${TAR:-}" ]; then tar czf "$OUT/all.tgz" -C "$D" . && rm -rf "$D" && ls -la "$OUT"; fi
