#!/usr/bin/env bash
# One GPU call for the Gluon forward's row maximum as a tree (prefill_gluon._row_max) against the chain build, by
# PHASES (default "tests bench"):
#   tests  the Gluon forward's GPU tests (tests/gpu/test_prefill_gluon.py, or those TEST_K names);
#   bench  benchmarks/row_max.py on ROWS (default "window varlen causal full") at D (default "64 128"), the builds
#          taking turns ROUNDS times (default 3), numbered RUN.
# Run from the repository root on a CUDA machine; logs and JSON go to $OUT/rowmax (default ./out-rowmax/rowmax).
set -uo pipefail
OUT=${OUT:-out-rowmax}
D="$OUT/rowmax"
source "$(dirname "$0")/device_env.sh"
for phase in ${PHASES:-tests bench}; do
    case $phase in
    tests) gpu_tests ${TEST_S:-300} tests.log tests/gpu/test_prefill_gluon.py ${TEST_K:+-k "$TEST_K"} ;;
    bench) ab_bench ${BENCH_S:-360} benchmarks/row_max.py --rows ${ROWS:-window varlen causal full} \
               --D ${DS:-64 128} --rounds ${ROUNDS:-3} --json "$D/row-max-${GPU_TAG}-run${RUN:-x}.json" ;;
    *) echo "device_row_max.sh: unknown phase $phase"; exit 2 ;;
    esac
done
