#!/usr/bin/env bash
# One GPU call for the Gluon forward on other tiles at D = 64: 256-key blocks (prefill_gluon.LONG_KEYS) or 192-key
# blocks (WIDE_KEYS), by PHASES (default "tests bench"):
#   tests  GPU tests TEST_FILES (default tests/gpu/test_prefill_gluon_long_keys.py; stops the call when they fail);
#   bench  benchmarks/fwd_switches.py on ROWS (default "window causal full") at D = 64, BUILDS (default "shipped n256
#          n256p"; 192-key blocks: "shipped n128g n192") taking turns ROUNDS times (default 3), numbered RUN;
#   window the window forward's candidates, the 256-key ones among them (variants_sweep.py --variants window
#          --passes fwd --D 64, numbered WINDOW_RUN).
# Run from the repository root on a CUDA machine; logs and JSON go to $OUT/longkeys (default ./out-longkeys/longkeys).
set -uo pipefail
OUT=${OUT:-out-longkeys}
D="$OUT/longkeys"
source "$(dirname "$0")/device_env.sh"
for phase in ${PHASES:-tests bench}; do
    t0=$(date +%s)
    case $phase in
    tests)
        gpu_tests ${TEST_S:-240} tests.log ${TEST_FILES:-tests/gpu/test_prefill_gluon_long_keys.py} \
            || { echo "GPU tests failed: no benchmarks"; exit 1; } ;;
    bench) ab_bench ${BENCH_S:-300} benchmarks/fwd_switches.py --rows ${ROWS:-window causal full} --D 64 \
               --builds ${BUILDS:-shipped n256 n256p} --rounds ${ROUNDS:-3} \
               --json "$D/fwd-switches-${GPU_TAG}-run${RUN:-x}.json" ;;
    window)
        timeout ${WINDOW_S:-200} python3 benchmarks/variants_sweep.py --variants window --passes fwd --D 64 \
            --json "$D/variants-sweep-${GPU_TAG}-window-run${WINDOW_RUN:-x}.json" > "$D/window.log" 2>&1
        echo "window sweep: exit $? in $(( $(date +%s) - t0 ))s"; grep "^|" "$D/window.log" || tail -n 20 "$D/window.log" ;;
    *) echo "device_long_keys.sh: unknown phase $phase"; exit 2 ;;
    esac
done
