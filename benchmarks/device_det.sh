#!/usr/bin/env bash
# One GPU call for the deterministic Gluon backward (ordered dQ additions): a first small call (the script
# stops if it fails or hangs), its GPU tests, the backward alone
# against the default, the Triton kernels' deterministic backward and cuDNN (bwd_dq_layout.py), then the
# variants' forward+backward, deterministic and not (variants.py; DET_KERNEL picks the deterministic backward).
# SHAPES: bwd_dq_layout.py's shape indices (default all); VARIANTS=none: no variants phase.
# Run from the repository root on a CUDA machine; logs and JSON go to $OUT/det (default ./out-det/det).
# Each phase is cut off by `timeout`.
set -uo pipefail
OUT=${OUT:-out-det}
D="$OUT/det"
RUN=${RUN:-x}
source "$(dirname "$0")/device_env.sh"
t0=$(date +%s)
# a first deterministic call per head dim and mask on a small long-class shape (2,100 keys: the Gluon
# backward's class), cut off early: a build that hangs stops the script here
timeout ${SMOKE_S:-90} python3 - > "$D/smoke.log" 2>&1 <<'PY'
import torch
import attnlab
from attnlab.gpu import prefill_gluon_bwd as gb
gb.DETERMINISTIC = True
sems, kernel = [], gb.gluon_backward
gb.gluon_backward = lambda *a, **kw: kernel(*a, **kw, _sem_out=sems)
for causal, D in ((True, 64), (True, 128), (False, 64), (False, 128)):
    q, k, v = (torch.randn(1, 4, 2100, D, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
    attnlab.flash_attention(q, k, v, causal=causal, deterministic=True).sum().backward()
    torch.cuda.synchronize()
    print("smoke", causal, D, gb.sem_stats(sems[-1]) if sems else "not the Gluon kernel", flush=True)
PY
rc=$?
echo "smoke: exit $rc in $(( $(date +%s) - t0 ))s"; cat "$D/smoke.log" | tail -n 6
[ "$rc" = 0 ] || { echo "the deterministic build failed or hung on a small call: stopping"; exit 1; }
t0=$(date +%s)
timeout ${TEST_S:-200} python3 -m pytest -q -p no:cacheprovider $XDIST ${TESTS:-tests/gpu/test_prefill_gluon_bwd.py \
    -k "deterministic or falls_back or alibi_calls"} > "$D/tests.log" 2>&1
echo "tests: exit $? in $(( $(date +%s) - t0 ))s"; tail -n 5 "$D/tests.log"
t0=$(date +%s)
timeout ${LAYOUT_S:-200} python3 benchmarks/bwd_dq_layout.py --rounds ${ROUNDS:-2} ${SHAPES:+--shapes $SHAPES} \
    --layouts ${LAYOUTS:-default det-gluon det-triton cudnn} --json "$D/bwd-dq-layout-${GPU_TAG}-run$RUN.json" > "$D/layout.log" 2>&1
echo "bwd_dq_layout: exit $? in $(( $(date +%s) - t0 ))s"; grep "^|" "$D/layout.log" || tail -n 20 "$D/layout.log"
[ "${VARIANTS:-}" = none ] && exit 0
t0=$(date +%s)
timeout ${VARIANTS_S:-150} python3 benchmarks/variants.py bench --variants ${VARIANTS:-window alibi} --passes fwd_bwd \
    --providers attnlab attnlab-det --det-kernel ${DET_KERNEL:-library} --json "$D/variants-${GPU_TAG}-det-gluon-run$RUN.json" \
    > "$D/variants.log" 2>&1
echo "variants: exit $? in $(( $(date +%s) - t0 ))s"; grep "^|" "$D/variants.log" || tail -n 20 "$D/variants.log"
