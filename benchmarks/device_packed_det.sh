#!/usr/bin/env bash
# One GPU call taking the deterministic packed backward apart, by PHASES (default "tests probe"):
#   tests   the packed isolation tests of the Gluon backward (both ways of prefill_gluon_bwd.ZERO_PAST) and its
#           deterministic tests (PACKED_DET_ROTATE and DET_EARLY_TURN both ways), or those TEST_K names;
#   probe   benchmarks/packed_probe.py --det at D = 128 (ROUNDS rounds, default 3; numbered PROBE_RUN): the default
#           build, its walks unstaggered, in the deterministic launch order, the deterministic build, its writer
#           at 48 registers, waiting for its turns first (DET_EARLY_TURN), without turns, with staggered walks
#           (PACKED_DET_ROTATE), the deterministic Triton kernels, and the default with ZERO_PAST on;
#   bench   the library's varlen rows (variants.py, numbered VARLEN_RUN), then the window and ALiBi rows' forward+backward
#           (the deterministic column: the dense calls' ordered build);
#   ncu     benchmarks/device_ncu_window.sh with SOURCE=1: the D = 64 window forward's stall ledger.
# Run from the repository root on a CUDA machine; logs and JSON go to $OUT/det (default ./out-det/det).
set -uo pipefail
OUT=${OUT:-out-det}
D="$OUT/det"
source "$(dirname "$0")/device_env.sh"
SKIP=""
for phase in ${PHASES:-tests probe}; do
    t0=$(date +%s)
    case $phase in
    tests)
        timeout ${TEST_S:-150} python3 -m pytest -q -p no:cacheprovider $XDIST tests/gpu/test_prefill_gluon.py \
            tests/gpu/test_prefill_gluon_bwd.py -k "${TEST_K:-reads_no_value or deterministic or rotated or early}" \
            > "$D/tests.log" 2>&1
        rc=$?
        echo "tests: exit $rc in $(( $(date +%s) - t0 ))s"; tail -n 2 "$D/tests.log"
        grep -E "^FAILED|^XPASS|^ERROR" "$D/tests.log" | head
        # a failing ordered build may wait out its turns: no timing of it then
        grep -E "^FAILED.*deterministic_packed.*-True-False\]" "$D/tests.log" && SKIP="$SKIP staggered"
        grep -E "^FAILED.*(deterministic_packed.*-False-True\]|bit_identical.*-True\]|early_turn)" "$D/tests.log" \
            && SKIP="$SKIP first" ;;
    probe)
        timeout ${PROBE_S:-280} python3 benchmarks/packed_probe.py --det --D 128 --rounds ${ROUNDS:-3} --skip ${SKIP:-} \
            --json "$D/packed-det-probe-${GPU_TAG}-run${PROBE_RUN:-x}.json" > "$D/probe.log" 2>&1
        echo "probe: exit $? in $(( $(date +%s) - t0 ))s"; grep "^|" "$D/probe.log" || tail -n 20 "$D/probe.log" ;;
    bench)  # the library's varlen rows (numbered VARLEN_RUN), then the window and ALiBi rows' forward+backward
        timeout ${BENCH_S:-150} python3 benchmarks/variants.py bench --variants varlen --D 128 64 \
            --json "$D/variants-${GPU_TAG}-varlen-run${VARLEN_RUN:-x}.json" > "$D/bench-varlen.log" 2>&1
        echo "varlen rows: exit $? in $(( $(date +%s) - t0 ))s"; grep "^|" "$D/bench-varlen.log" || tail -n 20 "$D/bench-varlen.log"
        t1=$(date +%s)
        timeout ${BENCH_S:-150} python3 benchmarks/variants.py bench --variants window alibi --passes fwd_bwd --D 128 64 \
            --json "$D/variants-${GPU_TAG}-det-run${VARLEN_RUN:-x}.json" > "$D/bench-det.log" 2>&1
        echo "window, ALiBi rows: exit $? in $(( $(date +%s) - t1 ))s"; grep "^|" "$D/bench-det.log" || tail -n 20 "$D/bench-det.log" ;;
    ncu)
        OUT="$D" SOURCE=1 NCU_S=${NCU_S:-200} timeout $(( ${NCU_S:-200} + 60 )) bash "$(dirname "$0")/device_ncu_window.sh"
        echo "ncu: exit $? in $(( $(date +%s) - t0 ))s" ;;
    *) echo "device_packed_det.sh: unknown phase $phase"; exit 2 ;;
    esac
done
