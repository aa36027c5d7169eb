#!/usr/bin/env bash
# One GPU call for the persistent Gluon forward that takes its tiles from a counter (FwdConfig.dynamic), by
# PHASES (default "tests sweep"):
#   tests   its GPU tests and those of the persistent and packed Gluon forward (stops the call when they fail);
#   sweep   the packed batch's Gluon entries, the dynamic ones among them, beside the Triton kernel's
#           (variants_sweep.py --packed-gluon, numbered SWEEP_RUN);
#   dense   the prefill rows with each persistent build's dynamic twin (fwd_persistent.py --dynamic, numbered
#           DENSE_RUN, ROUNDS rounds);
#   routes  the varlen rows, one process per ROUTES entry backward[:forward[:deterministic]] (variants.py,
#           numbered VARLEN_RUN: ...-<backward>[-fwd-<forward>][-det-<deterministic>]);
#   window  the window forward's Gluon builds (grid, persistent, tiles from a counter; 128- and 192-row tiles) beside
#           the other forward candidates (variants_sweep.py --variants window --passes fwd, numbered WINDOW_RUN);
#   sanitize  the bad-lengths test's cases on the dynamic packed forward under compute-sanitizer's memcheck, then
#           racecheck (bad_lengths_probe.py; SAN_S seconds each), then REPEAT rounds of them without it;
#   suite   the whole GPU suite SUITE_ROUNDS times (default 1) with prefill_gluon.PACKED on (switched on in this copy
#           of the tree where it is off, put back after), so every packed batch's forward at D = 128 is the dynamic
#           build;
#   zeropast  the packed backward's rows past a sequence set to 0 (prefill_gluon_bwd.ZERO_PAST): the isolation tests
#           both ways, then the varlen rows without and with it (variants.py, numbered VARLEN_RUN: ...-zero-off,
#           ...-zero-on; the switch turned on in this copy of the tree for the second, put back after).
# Run from the repository root on a CUDA machine; logs and JSON go to $OUT/dynamic (default ./out-dynamic/dynamic).
set -uo pipefail
OUT=${OUT:-out-dynamic}
D="$OUT/dynamic"
source "$(dirname "$0")/device_env.sh"
# switch_on FILE NAME: the module switch NAME = True in this copy of FILE (a copy of the file kept for put_back)
switch_on() {
    KEEP=$(mktemp)
    cp "$1" "$KEEP"
    sed -i "s/^$2 = False\$/$2 = True/" "$1"
    grep -q "^$2 = True\$" "$1" || { echo "$phase: no '$2 = ' line in $1 to switch on"; return 1; }
}
put_back() { cp "$KEEP" "$1"; rm -f "$KEEP"; }
for phase in ${PHASES:-tests sweep}; do
    t0=$(date +%s)
    case $phase in
    tests)
        timeout ${TEST_S:-240} python3 -m pytest -q -p no:cacheprovider $XDIST tests/gpu/test_prefill_gluon_dynamic.py \
            tests/gpu/test_prefill_gluon.py -k "dynamic or persistent or packed" > "$D/tests.log" 2>&1
        rc=$?
        echo "tests: exit $rc in $(( $(date +%s) - t0 ))s"; tail -n 3 "$D/tests.log"; grep "^FAILED" "$D/tests.log" | head
        [ "$rc" = 0 ] || { echo "GPU tests failed: no benchmarks"; exit 1; } ;;
    sweep)
        timeout ${SWEEP_S:-200} python3 benchmarks/variants_sweep.py --variants varlen --passes fwd --packed-gluon \
            --D ${VARLEN_D:-128 64} --json "$D/variants-sweep-${GPU_TAG}-varlen-run${SWEEP_RUN:-x}.json" > "$D/sweep.log" 2>&1
        echo "sweep: exit $? in $(( $(date +%s) - t0 ))s"; grep "^|" "$D/sweep.log" || tail -n 20 "$D/sweep.log" ;;
    dense)
        timeout ${DENSE_S:-240} python3 benchmarks/fwd_persistent.py --dynamic --rounds ${ROUNDS:-2} \
            --json "$D/fwd-persistent-${GPU_TAG}-run${DENSE_RUN:-x}.json" > "$D/dense.log" 2>&1
        echo "fwd_persistent: exit $? in $(( $(date +%s) - t0 ))s"; grep "^|" "$D/dense.log" || tail -n 20 "$D/dense.log" ;;
    routes)
        for route in ${ROUTES:-gluon gluon:gluon-dynamic}; do
            IFS=: read -r kernel fwd det <<< "$route"
            name=$kernel
            [ -n "$fwd" ] && name="$name-fwd-$fwd"
            [ -n "$det" ] && name="$name-det-$det"
            t1=$(date +%s)
            timeout ${BENCH_S:-150} python3 benchmarks/variants.py bench --variants varlen --D ${VARLEN_D:-128 64} \
                --packed-kernel $kernel --packed-fwd ${fwd:-library} --packed-det ${det:-library} \
                --json "$D/variants-${GPU_TAG}-varlen-run${VARLEN_RUN:-x}-$name.json" > "$D/bench-$name.log" 2>&1
            echo "varlen, $kernel backward, ${fwd:-library} forward, ${det:-library} deterministic: exit $? in $(( $(date +%s) - t1 ))s"
            grep "^|" "$D/bench-$name.log" || tail -n 20 "$D/bench-$name.log"
        done ;;
    window)
        timeout ${WINDOW_S:-200} python3 benchmarks/variants_sweep.py --variants window --passes fwd --D ${WINDOW_D:-64 128} \
            --json "$D/variants-sweep-${GPU_TAG}-window-run${WINDOW_RUN:-x}.json" > "$D/window.log" 2>&1
        echo "window sweep: exit $? in $(( $(date +%s) - t0 ))s"; grep "^|" "$D/window.log" || tail -n 20 "$D/window.log" ;;
    sanitize)
        for tool in memcheck racecheck; do
            t1=$(date +%s)
            timeout ${SAN_S:-150} compute-sanitizer --tool $tool --print-limit 20 python3 benchmarks/bad_lengths_probe.py \
                --forward dynamic --rounds 1 > "$D/sanitize-$tool.log" 2>&1
            echo "compute-sanitizer $tool: exit $? in $(( $(date +%s) - t1 ))s"; grep -v "^bad_lengths_probe: dynamic round" \
                "$D/sanitize-$tool.log" | tail -n 25
        done
        timeout ${REPEAT_S:-60} python3 benchmarks/bad_lengths_probe.py --forward dynamic --rounds ${REPEAT:-300} \
            > "$D/repeat.log" 2>&1
        echo "repeat: exit $?"; tail -n 2 "$D/repeat.log" ;;
    suite)
        f=src/attnlab/gpu/prefill_gluon.py
        switch_on "$f" PACKED || { put_back "$f"; exit 2; }
        for r in $(seq ${SUITE_ROUNDS:-1}); do
            t1=$(date +%s)
            timeout ${SUITE_S:-400} python3 -m pytest -q -p no:cacheprovider $XDIST tests/gpu > "$D/suite-$r.log" 2>&1
            echo "suite round $r (PACKED on): exit $? in $(( $(date +%s) - t1 ))s"; tail -n 2 "$D/suite-$r.log"
            grep -E "^FAILED|^ERROR|illegal" "$D/suite-$r.log" | head
        done
        put_back "$f" ;;
    zeropast)
        timeout ${TEST_S:-240} python3 -m pytest -q -p no:cacheprovider $XDIST tests/gpu/test_prefill_gluon.py \
            tests/gpu/test_prefill_variants.py -k "reads_no_value or read_no_row or varlen" > "$D/zeropast-tests.log" 2>&1
        echo "zero-past tests: exit $? in $(( $(date +%s) - t0 ))s"; tail -n 2 "$D/zeropast-tests.log"
        grep -E "^FAILED|^XPASS|^ERROR" "$D/zeropast-tests.log" | head
        f=src/attnlab/gpu/prefill_gluon_bwd.py
        for state in off on; do
            [ "$state" = on ] && { switch_on "$f" ZERO_PAST || break; }
            t1=$(date +%s)
            timeout ${BENCH_S:-150} python3 benchmarks/variants.py bench --variants varlen --D ${VARLEN_D:-128 64} \
                --json "$D/variants-${GPU_TAG}-varlen-run${VARLEN_RUN:-x}-zero-$state.json" > "$D/bench-zero-$state.log" 2>&1
            echo "varlen rows, ZERO_PAST $state: exit $? in $(( $(date +%s) - t1 ))s"
            grep "^|" "$D/bench-zero-$state.log" || tail -n 20 "$D/bench-zero-$state.log"
        done
        [ -n "${KEEP:-}" ] && put_back "$f" ;;
    *) echo "device_dynamic.sh: unknown phase $phase"; exit 2 ;;
    esac
done
