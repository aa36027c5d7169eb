#!/usr/bin/env bash
# One GPU call for the prefill's kept launches through PyTorch's launcher (ATTNLAB_STATIC_KEPT=1) and for the Gluon
# decode split kernel's loss under CUDA graphs (NOTES-decode v31):
#   timeline  benchmarks/decode_split_probe.py --timeline on 64/8 heads over 8K and 32/8 over 32K at D = 128: each arm's
#             graph replayed under torch.profiler, each kernel's µs in the replay and the gap before it, into
#             $D/decode-split-timeline-<gpu>-runRUN.json; PROBE_ARGS adds arguments (--cross: each split kernel with
#             the other kind's merge kernel too), PROBE_SHAPES replaces the shapes ("--shape B H HKV L D ...");
#   gluon     the Gluon decode GPU tests (tests/gpu/test_decode_gluon.py);
#   tests     the launch GPU tests and the prefill GPU tests (TESTS, default all of them) with the prefill's kept launches
#             through PyTorch's launcher (ATTNLAB_STATIC_KEPT=1), each test's name and outcome in the log as it ends
#             (-v: a run cut off by its time limit still names its failures). The whole prefill suite takes about ten
#             minutes on 8 workers: split it over two calls with TESTS.
# Run from the repository root on a CUDA machine; logs and JSON go to $OUT/sk (default ./out-static-kept/sk).
set -uo pipefail
OUT=${OUT:-out-static-kept}
D="$OUT/sk"
source "$(dirname "$0")/device_env.sh"
for phase in ${PHASES:-timeline tests}; do
    case $phase in
    timeline) t0=$(date +%s)
              timeout ${PROBE_S:-180} python3 benchmarks/decode_split_probe.py --timeline ${PROBE_ARGS:-} \
                  ${PROBE_SHAPES:---shape 1 64 8 8192 128 --shape 1 32 8 32768 128} \
                  --json "$D/decode-split-timeline-${GPU_TAG}-run${RUN:-x}.json" \
                  > "$D/timeline.log" 2>&1
              echo "timeline: exit $? in $(( $(date +%s) - t0 ))s"; tail -n 20 "$D/timeline.log" ;;
    gluon) gpu_tests ${GLUON_S:-150} gluon-tests.log -v -rf tests/gpu/test_decode_gluon.py ;;
    tests) ATTNLAB_STATIC_KEPT=1 gpu_tests ${TEST_S:-330} tests.log -v -rf ${TESTS:-tests/gpu/test_launch.py tests/gpu/test_prefill*.py}
           grep -E " FAILED " "$D/tests.log" | head -20 ;;
    *) echo "device_static_kept.sh: unknown phase $phase"; exit 2 ;;
    esac
done
exit 0
