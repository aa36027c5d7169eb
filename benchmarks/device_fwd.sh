#!/usr/bin/env bash
# One GPU call for the Gluon forward's schedules: a first small call of every new build (the script stops if
# one fails or hangs), the GPU tests of TESTS (default the Gluon forward's file; KEXPR: pytest's -k), then
# benchmarks/fwd_persistent.py (grid, part block first, groups of heads, persistent schedules, cuDNN; alternating
# rounds in one process; SWEEP=1: its --sweep; FWD_BENCH=0: not run) into fwd-persistent-<gpu>-run$RUN.json.
# PREFILL_RUN set: the library's table after it (benchmarks/prefill.py bench against SDPA's flash and cuDNN
# backends) into prefill-<gpu>-run$PREFILL_RUN.json.
# Run from the repository root on a CUDA machine; logs and JSON go to $OUT/fwd (default ./out-fwd/fwd).
# Each phase is cut off by `timeout`.
set -uo pipefail
OUT=${OUT:-out-fwd}
D="$OUT/fwd"
RUN=${RUN:-x}
source "$(dirname "$0")/device_env.sh"
t0=$(date +%s)
timeout ${SMOKE_S:-120} python3 - > "$D/smoke.log" 2>&1 <<'PY'
import torch
from attnlab.gpu import prefill_gluon as G
for D, bm in ((64, 192), (128, 128)):
    for build in (dict(), dict(part_first=True, head_chunk=8), dict(part_first=True, head_chunk=8, persistent=True)):
        q, k, v = (torch.randn(2, 8, 1000, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))
        out, lse = torch.empty_like(q), torch.empty(2, 8, 1000, device="cuda")
        G.gluon_forward(q, k, v, out, lse, causal_off=0, scale=D ** -0.5, block_m=bm, block_n=128, stages=2,
                        num_warps=4, warp_spec=True, **build)
        torch.cuda.synchronize()
        print("smoke", D, build, out.float().abs().sum().item(), flush=True)
PY
rc=$?
echo "smoke: exit $rc in $(( $(date +%s) - t0 ))s"; tail -n 6 "$D/smoke.log"
[ "$rc" = 0 ] || { echo "a build failed or hung on a small call: stopping"; exit 1; }
t0=$(date +%s)
timeout ${TEST_S:-240} python3 -m pytest -q -p no:cacheprovider $XDIST ${TESTS:-tests/gpu/test_prefill_gluon.py} \
    ${KEXPR:+-k "$KEXPR"} > "$D/tests.log" 2>&1
echo "tests: exit $? in $(( $(date +%s) - t0 ))s"; tail -n 3 "$D/tests.log"; grep "^FAILED" "$D/tests.log" | head
if [ "${FWD_BENCH:-1}" != 0 ]; then
    t0=$(date +%s)
    timeout ${BENCH_S:-240} python3 benchmarks/fwd_persistent.py --rounds ${ROUNDS:-2} ${SWEEP:+--sweep} \
        --json "$D/fwd-persistent-${GPU_TAG}-run$RUN.json" > "$D/bench.log" 2>&1
    echo "fwd_persistent: exit $? in $(( $(date +%s) - t0 ))s"; grep "^|" "$D/bench.log" || tail -n 20 "$D/bench.log"
fi
if [ -n "${PREFILL_RUN:-}" ]; then
    t0=$(date +%s)
    timeout ${PREFILL_S:-240} python3 benchmarks/prefill.py bench --D 64 128 --N 4096 16384 \
        --providers attnlab,sdpa-flash,sdpa-cudnn --json "$D/prefill-${GPU_TAG}-run$PREFILL_RUN.json" > "$D/prefill.log" 2>&1
    echo "prefill: exit $? in $(( $(date +%s) - t0 ))s"; grep "^|" "$D/prefill.log" | head -40 || tail -n 20 "$D/prefill.log"
fi
