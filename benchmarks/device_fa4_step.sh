#!/usr/bin/env bash
# One GPU call for FlashAttention-4's step in the Gluon forward (prefill_gluon.PACK_P, MASK_RANGE, PINGPONG,
# ROW_SUM_LANES), by
# PHASES (default "checks suite bench"):
#   checks  the switches' GPU tests (the builds' bits and the float64 criterion; stops the call when they fail);
#   suite   the Gluon forward's GPU tests with all four switches on in this copy of the tree (put back after);
#   bench   benchmarks/fwd_switches.py on ROWS (default "window causal full") at head dims DS (default 64), BUILDS
#           (default "shipped pack mask pp lanes fa4") taking turns ROUNDS times (default 3), numbered RUN.
# Run from the repository root on a CUDA machine; logs and JSON go to $OUT/fa4step (default ./out-fa4step/fa4step).
set -uo pipefail
OUT=${OUT:-out-fa4step}
D="$OUT/fa4step"
source "$(dirname "$0")/device_env.sh"
SRC=src/attnlab/gpu/prefill_gluon.py
for phase in ${PHASES:-checks suite bench}; do
    case $phase in
    checks)
        gpu_tests ${CHECK_S:-150} checks.log tests/gpu/test_prefill_gluon.py -k fa4_step \
            || { echo "GPU checks failed: no benchmarks"; exit 1; } ;;
    suite)
        cp "$SRC" "$D/prefill_gluon.py.orig"
        sed -i -e 's/^PACK_P = False$/PACK_P = True/' -e 's/^MASK_RANGE = False$/MASK_RANGE = True/' \
            -e 's/^PINGPONG = False$/PINGPONG = True/' -e 's/^ROW_SUM_LANES = False$/ROW_SUM_LANES = True/' "$SRC"
        grep -E "^(PACK_P|MASK_RANGE|PINGPONG|ROW_SUM_LANES) = " "$SRC"
        gpu_tests ${SUITE_S:-240} suite.log tests/gpu/test_prefill_gluon.py tests/gpu/test_prefill_gluon_dynamic.py \
            -k "gpu and not exp_poly and not tree and not rescale and not fa4_step and not backward"
        rc=$?
        cp "$D/prefill_gluon.py.orig" "$SRC" && rm "$D/prefill_gluon.py.orig"
        [ $rc -eq 0 ] || { echo "GPU suite failed with the switches on: no benchmarks"; exit 1; } ;;
    bench) ab_bench ${BENCH_S:-300} benchmarks/fwd_switches.py --rows ${ROWS:-window causal full} --D ${DS:-64} \
               --builds ${BUILDS:-shipped pack mask pp lanes fa4} --rounds ${ROUNDS:-3} \
               --json "$D/fwd-switches-${GPU_TAG}-run${RUN:-x}.json" ;;
    *) echo "device_fa4_step.sh: unknown phase $phase"; exit 2 ;;
    esac
done
