#!/usr/bin/env bash
# One GPU call for the Gluon backward on packed batches (cu_seqlens): a first packed call per head dim and
# mask against the Triton kernels' gradients (cut off early: a build that fails or hangs runs
# benchmarks/packed_probe.py and stops the script), the kernel's GPU tests, dense and packed (PHASES=check
# stops here), the dense backward alone against cuDNN (bwd_dq_layout.py), then the varlen rows of
# variants.py against FlexAttention and SDPA, and the same rows with the Triton backward (--packed-kernel triton), attnlab alone. (The build was off by default then,
# prefill_gluon_bwd.PACKED: the smoke call and the benchmark switch it on.)
# Run from the repository root on a CUDA machine; logs and JSON go to $OUT/packed (default ./out-packed/packed).
set -uo pipefail
OUT=${OUT:-out-packed}
D="$OUT/packed"
RUN=${RUN:-x}
source "$(dirname "$0")/device_env.sh"
t0=$(date +%s)
timeout ${SMOKE_S:-90} python3 - > "$D/smoke.log" 2>&1 <<'PY'
import torch
import triton
from attnlab.gpu import prefill_backward, prefill_forward
from attnlab.gpu import prefill_gluon_bwd as gb
from attnlab.variants import Mask
lens = [1000, 257, 1792, 63, 700, 1, 1500, 900, 1200, 400, 1024, 1100, 800, 600, 1300, 1280]
cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32, device="cuda")
for causal in (True, False):
    for D in (64, 128):
        q, k, v, do = (torch.randn(sum(lens), 2048 // D, D, device="cuda", dtype=torch.bfloat16) for _ in range(4))
        mask = Mask(-1, 0 if causal else -1)
        out, lse = prefill_forward(q, k, v, mask=mask, scale=D ** -0.5, cu_seqlens=(cu, cu), max_seqlen=(1792, 1792))
        grads, ms = {}, {}
        for packed in (True, False):
            gb.PACKED = packed
            call = lambda: prefill_backward(do, q, k, v, out, lse, mask=mask, scale=D ** -0.5, cu_seqlens=(cu, cu),
                                            max_seqlen=(1792, 1792))
            grads[packed] = call()
            torch.cuda.synchronize()
            ms[packed] = triton.testing.do_bench(call, warmup=10, rep=60)
        gb.PACKED = True
        rel = [((a.float() - b.float()).abs().max() / b.float().abs().max()).item() for a, b in zip(grads[True], grads[False])]
        print("smoke causal", causal, "D", D, "max rel. diff gluon/triton (dq, dk, dv)", [f"{r:.1e}" for r in rel],
              f"backward ms: library {ms[True]:.3f}, Triton kernels {ms[False]:.3f}", flush=True)
PY
rc=$?
echo "smoke: exit $rc in $(( $(date +%s) - t0 ))s"; tail -n 6 "$D/smoke.log"
if [ "$rc" != 0 ]; then  # which part: each case in a process of its own
    echo "the packed build failed or hung on a first call: the probe, then stopping"
    timeout ${PROBE_S:-200} python3 benchmarks/packed_probe.py --timeout 40 | tee "$D/probe.log"
    exit 1
fi
if [ "${PHASES:-all}" != "bench" ]; then  # (PHASES=bench: the smoke call, then the benchmarks)
    t0=$(date +%s)
    # the packed batches' GPU tests and the dense ones of the same kernel (the build shares its code)
    timeout ${TEST_S:-240} python3 -m pytest -q -p no:cacheprovider $XDIST ${TESTS:-tests/gpu/test_prefill_gluon_bwd.py} \
        > "$D/tests.log" 2>&1
    echo "tests: exit $? in $(( $(date +%s) - t0 ))s"; tail -n 4 "$D/tests.log"
    t0=$(date +%s)  # the dense backward, as bwd-dq-layout runs 9 and 10 measured it
    timeout ${LAYOUT_S:-120} python3 benchmarks/bwd_dq_layout.py --rounds 1 --layouts default cudnn \
        --json "$D/bwd-dq-layout-${GPU_TAG}-run${LAYOUT_RUN:-$RUN}.json" > "$D/layout.log" 2>&1
    echo "bwd_dq_layout: exit $? in $(( $(date +%s) - t0 ))s"; grep "^|" "$D/layout.log" || tail -n 20 "$D/layout.log"
fi
[ "${PHASES:-all}" = "check" ] && exit 0
t0=$(date +%s)
timeout ${BENCH_S:-240} python3 benchmarks/variants.py bench --variants varlen --D ${DIMS:-128 64} --packed-kernel gluon \
    --json "$D/variants-${GPU_TAG}-varlen-run$RUN.json" > "$D/bench.log" 2>&1
echo "bench: exit $? in $(( $(date +%s) - t0 ))s"; grep "^|" "$D/bench.log" || tail -n 20 "$D/bench.log"
t0=$(date +%s)
timeout ${AB_S:-90} python3 benchmarks/variants.py bench --variants varlen --D ${DIMS:-128 64} --passes fwd_bwd \
    --providers attnlab --packed-kernel triton --json "$D/variants-${GPU_TAG}-varlen-triton-run$RUN.json" > "$D/ab.log" 2>&1
echo "triton backward: exit $? in $(( $(date +%s) - t0 ))s"; grep "^|" "$D/ab.log" || tail -n 20 "$D/ab.log"
