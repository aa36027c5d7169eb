#!/usr/bin/env bash
# One GPU call for the deterministic Gluon backward (ordered dQ additions): its GPU tests, the backward alone
# against the default, the Triton kernels' deterministic backward and cuDNN (bwd_dq_layout.py), then the
# variants' forward+backward with deterministic calls on the Gluon kernel (variants.py --det-kernel gluon).
# Run from the repository root on a CUDA machine; logs and JSON go to $OUT/det (default ./out-det/det).
# Each phase is cut off by `timeout`.
set -uo pipefail
OUT=${OUT:-out-det}
D="$OUT/det"
RUN=${RUN:-x}
source "$(dirname "$0")/device_env.sh"
t0=$(date +%s)
timeout ${TEST_S:-200} python3 -m pytest -q -p no:cacheprovider $XDIST tests/gpu/test_prefill_gluon_bwd.py \
    -k "deterministic or falls_back or alibi_calls" > "$D/tests.log" 2>&1
echo "tests: exit $? in $(( $(date +%s) - t0 ))s"; tail -n 5 "$D/tests.log"
t0=$(date +%s)
timeout ${LAYOUT_S:-200} python3 benchmarks/bwd_dq_layout.py --rounds ${ROUNDS:-2} \
    --layouts default det-gluon det-triton cudnn --json "$D/bwd-dq-layout-h200-run$RUN.json" > "$D/layout.log" 2>&1
echo "bwd_dq_layout: exit $? in $(( $(date +%s) - t0 ))s"; grep "^|" "$D/layout.log" || tail -n 20 "$D/layout.log"
t0=$(date +%s)
timeout ${VARIANTS_S:-150} python3 benchmarks/variants.py bench --variants ${VARIANTS:-window alibi} --passes fwd_bwd \
    --providers attnlab attnlab-det --det-kernel gluon --json "$D/variants-h200-det-gluon-run$RUN.json" \
    > "$D/variants.log" 2>&1
echo "variants: exit $? in $(( $(date +%s) - t0 ))s"; grep "^|" "$D/variants.log" || tail -n 20 "$D/variants.log"
