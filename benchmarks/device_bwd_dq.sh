#!/usr/bin/env bash
# One GPU call for the Gluon backward's dQ staging: the backward's GPU tests, then bwd_dq_layout.py (the dQ
# tile in register order against the row-major tile and cuDNN's backward, alternating rounds), then
# transformers' model (benchmarks/hf.py, no profiled step) unless HF=0. Run from the repository root on a
# CUDA machine; logs and JSON go to $OUT/bwd (default ./out-bwd-dq/bwd). Each phase is cut off by `timeout`.
set -uo pipefail
OUT=${OUT:-out-bwd-dq}
D="$OUT/bwd"
RUN=${RUN:-x}
source "$(dirname "$0")/device_env.sh"
t0=$(date +%s)
timeout ${TEST_S:-200} python3 -m pytest -q -p no:cacheprovider $XDIST tests/gpu/test_prefill_gluon_bwd.py \
    tests/gpu/test_prefill.py tests/test_api.py > "$D/tests.log" 2>&1
echo "tests: exit $? in $(( $(date +%s) - t0 ))s"; tail -n 5 "$D/tests.log"
t0=$(date +%s)
timeout ${LAYOUT_S:-200} python3 benchmarks/bwd_dq_layout.py --rounds ${ROUNDS:-2} \
    --json "$D/bwd-dq-layout-${GPU_TAG}-run$RUN.json" > "$D/layout.log" 2>&1
echo "bwd_dq_layout: exit $? in $(( $(date +%s) - t0 ))s"; grep "^|" "$D/layout.log" || tail -n 20 "$D/layout.log"
if [ "${HF:-1}" = 1 ]; then
    t0=$(date +%s)
    timeout ${HF_S:-150} python3 benchmarks/hf.py --no-profile --json "$D/hf-${GPU_TAG}-run$RUN.json" > "$D/hf.log" 2>&1
    echo "hf: exit $? in $(( $(date +%s) - t0 ))s"; tail -n 25 "$D/hf.log"
fi
