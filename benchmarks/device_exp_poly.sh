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
    case $phase in
    tests) gpu_tests ${TEST_S:-200} tests.log tests/gpu/test_prefill_gluon.py -k "${TEST_K:-exp2 or exp_poly}" ;;
    bench) ab_bench ${BENCH_S:-330} benchmarks/exp_poly.py --rows ${ROWS:-window causal full} --D ${DS:-64 128} \
               --splits ${SPLITS:-0 1 2 3} --rounds ${ROUNDS:-3} --json "$D/exp-poly-${GPU_TAG}-run${RUN:-x}.json" ;;
    *) echo "device_exp_poly.sh: unknown phase $phase"; exit 2 ;;
    esac
done
