#!/usr/bin/env bash
# One GPU call for the non-causal backward's last wave cut into pieces (prefill_gluon_bwd.tail_pieces), by PHASES
# (default "cut bench checks"):
#   cut     the cut's GPU tests (tests/gpu/test_prefill_gluon_bwd_tail.py; stops the call when they fail);
#   bench   benchmarks/bwd_block_m.py on ROWS (default the non-causal rows) with ARMS (default "table whole") taking
#           turns ROUNDS times (default 3), at D = 64 and 128, numbered RUN;
#   checks  the Gluon backward's and the prefill plans' other GPU tests (every non-causal call there now cut where the
#           model says so: small grids are cut into pieces nearly whole).
# Run from the repository root on a CUDA machine; logs and JSON go to $OUT/tail (default ./out-tail/tail).
set -uo pipefail
OUT=${OUT:-out-tail}
D="$OUT/tail"
source "$(dirname "$0")/device_env.sh"
for phase in ${PHASES:-cut bench checks}; do
    case $phase in
    cut) gpu_tests ${CUT_S:-240} cut.log tests/gpu/test_prefill_gluon_bwd_tail.py -k gpu \
             || { echo "the cut's GPU tests failed: no benchmarks"; exit 1; } ;;
    bench) ab_bench ${BENCH_S:-300} benchmarks/bwd_block_m.py --rows ${ROWS:-full full8k full16k gqa-full full-small} \
               --D 64 128 --arms ${ARMS:-table whole} --rounds ${ROUNDS:-3} \
               --json "$D/bwd-block-m-${GPU_TAG}-run${RUN:-x}.json"
           grep "^arm " "$D/bench.log" | sort -u ;;
    checks) gpu_tests ${CHECK_S:-300} checks.log tests/gpu/test_prefill_gluon_bwd.py tests/gpu/test_prefill_plans.py \
                -k "${CHECK_K:-gpu}" ;;
    *) echo "device_tail.sh: unknown phase $phase"; exit 2 ;;
    esac
done
