#!/usr/bin/env bash
# One GPU call for the Gluon forward's compile-time switches (prefill_gluon RESCALE_SKIP, RESCALE_TAU, ROW_MAX_TREE),
# by PHASES (default "tests bench"):
#   tests  the switches' GPU tests (TEST_FILES, default tests/gpu/test_prefill_gluon.py, -k "rescale or scale_rows", or
#          those TEST_K names);
#   suite  the whole GPU suite with the switches as the tree has them;
#   bench  benchmarks/fwd_switches.py on ROWS (default "window causal full") at D (default "64 128"), BUILDS (default
#          "shipped skip skip+tau8") taking turns ROUNDS times (default 3), numbered RUN.
# Run from the repository root on a CUDA machine; logs and JSON go to $OUT/switches (default ./out-switches/switches).
set -uo pipefail
OUT=${OUT:-out-switches}
D="$OUT/switches"
source "$(dirname "$0")/device_env.sh"
for phase in ${PHASES:-tests bench}; do
    case $phase in
    tests) gpu_tests ${TEST_S:-240} tests.log ${TEST_FILES:-tests/gpu/test_prefill_gluon.py} \
               -k "${TEST_K:-rescale or scale_rows}" || { echo "GPU tests failed: no benchmarks"; exit 1; } ;;
    suite) gpu_tests ${SUITE_S:-420} suite.log tests/gpu ;;
    bench) ab_bench ${BENCH_S:-330} benchmarks/fwd_switches.py --rows ${ROWS:-window causal full} \
               --D ${DS:-64 128} --builds ${BUILDS:-shipped skip skip+tau8} --rounds ${ROUNDS:-3} \
               --json "$D/fwd-switches-${GPU_TAG}-run${RUN:-x}.json" ;;
    *) echo "device_fwd_switches.sh: unknown phase $phase"; exit 2 ;;
    esac
done
