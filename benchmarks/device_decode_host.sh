#!/usr/bin/env bash
# One GPU call for the decode kernel's merge and the host path of a growing cache (lecture §8.4):
# the decode GPU tests, then decode_host.py (host floors, eager against CUDA graphs, the batch-1 split
# sweep with the merge kernel beside it, a cache one key longer every call), then transformers' model
# (benchmarks/hf.py, no profiled step) unless HF=0; SWEEP=0 leaves the split sweep out. Run from the
# repository root on a CUDA machine; logs and JSON go to $OUT/dh (default ./out-decode-host/dh). Each
# phase is cut off by `timeout`. TESTS=0 leaves the GPU tests out; HOST_ARGS adds arguments to decode_host.py
# (e.g. HOST_ARGS="--eager-ab --eager-fused-below 16" for the in-kernel merge's eager A/B at another threshold, or
# HOST_ARGS="--kernel-ab" for the Triton split kernel against the Gluon one, "--kernel-ab-merge" for both with and without
# their in-kernel merge).
set -uo pipefail
OUT=${OUT:-out-decode-host}
D="$OUT/dh"
RUN=${RUN:-x}
source "$(dirname "$0")/device_env.sh"
t0=$(date +%s)
[ "${TESTS:-1}" = 1 ] && timeout ${TEST_S:-150} python3 -m pytest -q -p no:cacheprovider $XDIST tests/gpu/test_decode.py tests/gpu/test_decode_plans.py \
    tests/gpu/test_decode_variants.py tests/gpu/test_decode_gluon.py tests/gpu/test_launch.py tests/kvcache > "$D/tests.log" 2>&1
[ "${TESTS:-1}" = 1 ] && { echo "tests: exit $? in $(( $(date +%s) - t0 ))s"; tail -n 5 "$D/tests.log"; }
t0=$(date +%s)
SWEEP_FLAG=--sweep
[ "${SWEEP:-1}" = 1 ] || SWEEP_FLAG=""
timeout ${HOST_S:-240} python3 benchmarks/decode_host.py $SWEEP_FLAG ${HOST_ARGS:-} --profile --json "$D/decode-host-${GPU_TAG}-run$RUN.json" \
    --md "$D/decode-host-${GPU_TAG}-run$RUN.md" > "$D/host.log" 2>&1
echo "decode_host: exit $? in $(( $(date +%s) - t0 ))s"
cat "$D/decode-host-${GPU_TAG}-run$RUN.md" 2>/dev/null || tail -n 30 "$D/host.log"
if [ "${HF:-1}" = 1 ]; then
    t0=$(date +%s)
    timeout ${HF_S:-150} python3 benchmarks/hf.py --no-profile --json "$D/hf-${GPU_TAG}-run$RUN.json" > "$D/hf.log" 2>&1
    echo "hf: exit $? in $(( $(date +%s) - t0 ))s"; tail -n 25 "$D/hf.log"
fi
