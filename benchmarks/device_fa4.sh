#!/usr/bin/env bash
# One GPU call for attnlab against FlashAttention-4's Hopper kernels (benchmarks/fa4_peer.py), by PHASES (default
# "tests bench"):
#   tests  GPU tests TEST_FILES (default: the Gluon kernels' files, tests/gpu/test_prefill_gluon*.py; stops the call
#          when they fail);
#   bench  fa4_peer.py on ROWS (default every row) at head dims DS (default "64 128"), PASSES (default "fwd"), ROUNDS
#          rounds (default 3), numbered RUN.
# flash-attn-4 (with nvidia-cutlass-dsl) must be importable, e.g. installed with pip --target into a folder on
# PYTHONPATH (add its nvidia_cutlass_dsl/dsl_packages folder too: pip --target does not run the package's .pth file);
# without it the fa4 rows say why they were skipped. Run from the repository root on a CUDA machine; logs and JSON go
# to $OUT/fa4 (default ./out-fa4/fa4).
set -uo pipefail
OUT=${OUT:-out-fa4}
D="$OUT/fa4"
EXTRA_PATH=${PYTHONPATH:-}
source "$(dirname "$0")/device_env.sh"
[ -n "$EXTRA_PATH" ] && export PYTHONPATH="src:$EXTRA_PATH"
python3 -c 'from importlib.metadata import version as v; print("flash-attn-4", v("flash-attn-4"), "cutlass-dsl",
v("nvidia-cutlass-dsl"))' 2>&1 | tail -n 1 | tee -a "$D/gpu.txt"
for phase in ${PHASES:-tests bench}; do
    case $phase in
    tests)
        gpu_tests ${TEST_S:-420} tests.log ${TEST_FILES:-tests/gpu/test_prefill_gluon*.py} \
            || { echo "GPU tests failed: no benchmarks"; exit 1; } ;;
    bench) ab_bench ${BENCH_S:-400} benchmarks/fa4_peer.py --rows ${ROWS:-window varlen causal full} --D ${DS:-64 128} \
               --passes ${PASSES:-fwd} --rounds ${ROUNDS:-3} --json "$D/fa4-peer-${GPU_TAG}-run${RUN:-x}.json" ;;
    *) echo "device_fa4.sh: unknown phase $phase"; exit 2 ;;
    esac
done
