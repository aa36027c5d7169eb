#!/usr/bin/env bash
# One GPU call for changes to the host path (how the prefill and decode kernels are launched): PHASES=tests
# runs the GPU tests of the launch paths and of every kernel launched through them; PHASES=bench the
# backward's host and GPU time (packed_probe.py --timing), the varlen rows against FlexAttention and SDPA
# (variants.py) and the decode host table (decode_host.py). Default: both (about nine minutes). PHASES=hf:
# transformers' training and decode steps against SDPA (hf.py), where a step's many short calls meet the host.
# PHASES=plan: the Gluon backward's kept plans (below).
# Run from the repository root on a CUDA machine; logs and JSON go to $OUT/candidate (default
# ./out-candidate/candidate), the JSON files numbered by RUN (packed-probe), VARLEN_RUN and DECODE_RUN.
set -uo pipefail
OUT=${OUT:-out-candidate}
D="$OUT/candidate"
RUN=${RUN:-x}
source "$(dirname "$0")/device_env.sh"
if [ "${PHASES:-tests bench}" = "hf" ]; then
    timeout ${HF_S:-300} python3 benchmarks/hf.py --no-profile --json "$D/hf-${GPU_TAG}-run${HF_RUN:-x}.json" > "$D/hf.log" 2>&1
    echo "hf: exit $?"; grep "^|" "$D/hf.log" | head -30 || tail -n 20 "$D/hf.log"
    exit 0
fi
if [ "${PHASES:-tests bench}" = "plan" ]; then
    # the prefill calls' kept plans: their GPU tests and those of every prefill kernel they launch, then the packed
    # batch's time by step on each backward and forward (varlen_profile.py --steps, numbered PROFILE_RUN;
    # PROFILE_BWD, PROFILE_FWD) and the varlen rows with each ROUTES entry, backward[:forward[:deterministic]],
    # one process each (variants.py --packed-kernel, --packed-fwd, --packed-det: VARLEN_RUN-<backward>, then
    # -fwd-<forward> and -det-<deterministic> for those named). SWEEP_RUN: first the Gluon forward's packed
    # entries (variants_sweep.py --packed-gluon); PROFILE_S=0: no profile.
    t0=$(date +%s)
    # (PLAN_TESTS: other pytest arguments, e.g. a call that reruns only the tests a change touched)
    timeout ${TEST_S:-420} python3 -m pytest -q -p no:cacheprovider $XDIST ${PLAN_TESTS:-tests/gpu/test_launch.py \
        tests/gpu/test_prefill_plans.py tests/gpu/test_prefill.py tests/gpu/test_prefill_variants.py \
        tests/gpu/test_prefill_gluon_bwd.py tests/gpu/test_prefill_gluon.py} > "$D/tests.log" 2>&1
    rc=$?
    echo "tests: exit $rc in $(( $(date +%s) - t0 ))s"; tail -n 3 "$D/tests.log"; grep "^FAILED" "$D/tests.log" | head
    [ "$rc" = 0 ] || { echo "GPU tests failed: no benchmarks"; exit 1; }
    if [ -n "${SWEEP_RUN:-}" ]; then  # the Gluon forward's packed entries beside the Triton kernel's (forward only)
        t0=$(date +%s)
        timeout ${SWEEP_S:-240} python3 benchmarks/variants_sweep.py --variants varlen --passes fwd --packed-gluon \
            --D ${VARLEN_D:-128 64} --json "$D/variants-sweep-${GPU_TAG}-varlen-run$SWEEP_RUN.json" > "$D/sweep.log" 2>&1
        echo "sweep: exit $? in $(( $(date +%s) - t0 ))s"; grep "^|" "$D/sweep.log" || tail -n 20 "$D/sweep.log"
    fi
    t0=$(date +%s)
    [ "${PROFILE_S:-150}" = 0 ] || timeout ${PROFILE_S:-150} python3 benchmarks/varlen_profile.py --D 128 --packed ${PROFILE_BWD:-triton gluon} \
        --packed-fwd ${PROFILE_FWD:-library} --steps --json "$D/varlen-profile-${GPU_TAG}-run${PROFILE_RUN:-x}.json" \
        > "$D/profile.log" 2>&1
    echo "varlen_profile: exit $? in $(( $(date +%s) - t0 ))s"; grep "^|" "$D/profile.log" | head -90
    for route in ${ROUTES:-triton gluon}; do
        IFS=: read -r kernel fwd det <<< "$route"
        name=$kernel
        [ -n "$fwd" ] && name="$name-fwd-$fwd"
        [ -n "$det" ] && name="$name-det-$det"
        t0=$(date +%s)
        timeout ${BENCH_S:-150} python3 benchmarks/variants.py bench --variants varlen --D ${VARLEN_D:-128 64} \
            --packed-kernel $kernel --packed-fwd ${fwd:-library} --packed-det ${det:-library} \
            --json "$D/variants-${GPU_TAG}-varlen-run${VARLEN_RUN:-x}-$name.json" > "$D/bench-$name.log" 2>&1
        echo "varlen, $kernel backward, ${fwd:-library} forward, ${det:-library} deterministic: exit $? in $(( $(date +%s) - t0 ))s"
        grep "^|" "$D/bench-$name.log" || tail -n 20 "$D/bench-$name.log"
    done
    exit 0
fi
if [ "${PHASES:-tests bench}" != "bench" ]; then
    t0=$(date +%s)
    timeout ${TEST_S:-330} python3 -m pytest -q -p no:cacheprovider $XDIST tests/gpu/test_launch.py \
        tests/gpu/test_decode*.py tests/gpu/test_prefill.py tests/gpu/test_prefill_variants.py \
        tests/gpu/test_prefill_gluon.py tests/gpu/test_prefill_gluon_bwd.py > "$D/tests.log" 2>&1
    rc=$?
    echo "tests: exit $rc in $(( $(date +%s) - t0 ))s"; tail -n 3 "$D/tests.log"; grep "^FAILED" "$D/tests.log" | head
    [ "$rc" = 0 ] || { echo "GPU tests failed: no benchmarks"; exit 1; }
fi
[ "${PHASES:-tests bench}" = "tests" ] && exit 0
t0=$(date +%s)
timeout ${PROBE_S:-90} python3 benchmarks/packed_probe.py --timing --D 128 --json "$D/packed-probe-${GPU_TAG}-run$RUN.json" \
    > "$D/probe.log" 2>&1
echo "packed_probe: exit $? in $(( $(date +%s) - t0 ))s"; grep "^|" "$D/probe.log" || tail -n 20 "$D/probe.log"
t0=$(date +%s)
timeout ${BENCH_S:-150} python3 benchmarks/variants.py bench --variants varlen --D 128 64 \
    --json "$D/variants-${GPU_TAG}-varlen-run${VARLEN_RUN:-x}.json" > "$D/bench.log" 2>&1
echo "varlen: exit $? in $(( $(date +%s) - t0 ))s"; grep "^|" "$D/bench.log" || tail -n 20 "$D/bench.log"
t0=$(date +%s)
timeout ${DECODE_S:-150} python3 benchmarks/decode_host.py --json "$D/decode-host-${GPU_TAG}-run${DECODE_RUN:-x}.json" \
    > "$D/decode.log" 2>&1
echo "decode_host: exit $? in $(( $(date +%s) - t0 ))s"; grep "^|" "$D/decode.log" | head -40 || tail -n 20 "$D/decode.log"
