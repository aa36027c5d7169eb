#!/usr/bin/env bash
# One GPU call for the Gluon forward's exponentials split between the exponentials' unit and a polynomial on the
# FMA pipe (prefill_gluon.EXP_POLY), by PHASES (default "tests bench"):
#   tests  the GPU tests of the split (tests/gpu/test_prefill_gluon.py -k "exp2 or exp_poly"), or those TEST_K names;
#   bench  benchmarks/exp_poly.py on ROWS (default "window causal full") at D (default "64 128"), SPLITS (default
#          "0 1 2 3") taking turns ROUNDS times (default 3), numbered RUN.
# Run from the repository root on a CUDA machine; logs and JSON go to $OUT/poly (default ./out-poly/poly).
set -uo pipefail
OUT=${OUT:-out-poly}
D="$OUT/poly"
source "$(dirname "$0")/device_env.sh"
for phase in ${PHASES:-tests bench}; do
    t0=$(date +%s)
    case $phase in
    tests)
        timeout ${TEST_S:-200} python3 -m pytest -q -p no:cacheprovider $XDIST tests/gpu/test_prefill_gluon.py \
            -k "${TEST_K:-exp2 or exp_poly}" > "$D/tests.log" 2>&1
        echo "tests: exit $? in $(( $(date +%s) - t0 ))s"; tail -n 2 "$D/tests.log"
        grep -E "^FAILED|^ERROR" "$D/tests.log" | head ;;
    bench)
        timeout ${BENCH_S:-330} python3 benchmarks/exp_poly.py --rows ${ROWS:-window causal full} --D ${DS:-64 128} \
            --splits ${SPLITS:-0 1 2 3} --rounds ${ROUNDS:-3} --json "$D/exp-poly-h200-run${RUN:-x}.json" \
            > "$D/bench.log" 2>&1
        echo "bench: exit $? in $(( $(date +%s) - t0 ))s"; sed -n "/^| row |/,\$p" "$D/bench.log" | grep . || tail -n 20 "$D/bench.log" ;;
    *) echo "device_exp_poly.sh: unknown phase $phase"; exit 2 ;;
    esac
done
