#!/usr/bin/env bash
# One GPU call for the Gluon backward on packed batches (cu_seqlens): a first packed call per head dim and
# mask against the Triton kernels' gradients (cut off early: a build that hangs stops the script), the GPU
# tests of packed batches, then the varlen rows of variants.py against FlexAttention and SDPA, and the same
# rows with the Triton backward (--packed-kernel triton), attnlab alone. (The build is off by default,
# prefill_gluon_bwd.PACKED: the smoke call and the benchmark switch it on. Start with
# `python benchmarks/packed_probe.py` while its first calls fail.)
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
[ "$rc" = 0 ] || { echo "the packed build failed or hung on a first call: stopping"; exit 1; }
t0=$(date +%s)
timeout ${TEST_S:-150} python3 -m pytest -q -p no:cacheprovider $XDIST tests/gpu/test_prefill_gluon_bwd.py -k packed \
    > "$D/tests.log" 2>&1
echo "tests: exit $? in $(( $(date +%s) - t0 ))s"; tail -n 4 "$D/tests.log"
t0=$(date +%s)
timeout ${BENCH_S:-240} python3 benchmarks/variants.py bench --variants varlen --D ${DIMS:-128 64} --packed-kernel gluon \
    --json "$D/variants-h200-varlen-run$RUN.json" > "$D/bench.log" 2>&1
echo "bench: exit $? in $(( $(date +%s) - t0 ))s"; grep "^|" "$D/bench.log" || tail -n 20 "$D/bench.log"
t0=$(date +%s)
timeout ${AB_S:-90} python3 benchmarks/variants.py bench --variants varlen --D ${DIMS:-128 64} --passes fwd_bwd \
    --providers attnlab --packed-kernel triton --json "$D/variants-h200-varlen-triton-run$RUN.json" > "$D/ab.log" 2>&1
echo "triton backward: exit $? in $(( $(date +%s) - t0 ))s"; grep "^|" "$D/ab.log" || tail -n 20 "$D/ab.log"
