#!/usr/bin/env bash
# One GPU call for the Gluon forward's compile-time switches (prefill_gluon RESCALE_SKIP, RESCALE_TAU, ROW_MAX_TREE),
# by PHASES (default "tests bench"):
#   tests  the switches' GPU tests (tests/gpu/test_prefill_gluon.py -k "rescale or scale_rows", or those TEST_K names);
#   suite  the whole GPU suite with the switches as the tree has them;
#   bench  benchmarks/fwd_switches.py on ROWS (default "window causal full") at D (default "64 128"), BUILDS (default
#          "shipped skip skip+tau8") taking turns ROUNDS times (default 3), numbered RUN.
# Run from the repository root on a CUDA machine; logs and JSON go to $OUT/switches (default ./out-switches/switches).
set -uo pipefail
OUT=${OUT:-out-switches}
D="$OUT/switches"
source "$(dirname "$0")/device_env.sh"
for phase in ${PHASES:-tests bench}; do
    t0=$(date +%s)
    case $phase in
    tests)
        timeout ${TEST_S:-240} python3 -m pytest -q -p no:cacheprovider $XDIST tests/gpu/test_prefill_gluon.py \
            -k "${TEST_K:-rescale or scale_rows}" > "$D/tests.log" 2>&1
        echo "tests: exit $? in $(( $(date +%s) - t0 ))s"; tail -n 2 "$D/tests.log"
        grep -E "^FAILED|^ERROR" "$D/tests.log" | head ;;
    suite)
        timeout ${SUITE_S:-420} python3 -m pytest -q -p no:cacheprovider $XDIST tests/gpu > "$D/suite.log" 2>&1
        echo "suite: exit $? in $(( $(date +%s) - t0 ))s"; tail -n 2 "$D/suite.log"
        grep -E "^FAILED|^ERROR|illegal" "$D/suite.log" | head ;;
    bench)
        timeout ${BENCH_S:-330} python3 benchmarks/fwd_switches.py --rows ${ROWS:-window causal full} \
            --D ${DS:-64 128} --builds ${BUILDS:-shipped skip skip+tau8} --rounds ${ROUNDS:-3} \
            --json "$D/fwd-switches-h200-run${RUN:-x}.json" > "$D/bench.log" 2>&1
        echo "bench: exit $? in $(( $(date +%s) - t0 ))s"; sed -n "/^| row |/,\$p" "$D/bench.log" | grep . || tail -n 20 "$D/bench.log" ;;
    *) echo "device_fwd_switches.sh: unknown phase $phase"; exit 2 ;;
    esac
done
