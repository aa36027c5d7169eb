#!/usr/bin/env bash
# One GPU call for the native decode call (attnlab.gpu.native, on by default), by PHASES (default "build tests suite
# host breakdown"):
#   build      its module built, timed
#   tests      its GPU tests and its CPU tests (the stand-in driver's among them)
#   suite      the decode GPU suite as the library ships (the native call on for every steady call)
#   host       two decode-host runs: HOST_RUN as the library ships (its host rows hold the Python path's knob row
#              beside the kept call) and HOST_RUN + 1 with --python-path (every row without the native call)
#   pdl        decode-host run PDL_RUN with --split-pdl-ab (the split kernel's eager launch plain, dependent, and
#              dependent with the early trigger, in turns, on every shape; not in the default phases)
#   breakdown  with BREAKDOWN_RUN, decode_host.py's breakdown of a kept call (the program's C++ call timed alone), one
#              run for each of BREAKDOWN_SHAPES (comma-separated "B H HKV L D", or "tiny": the host rows'; default tiny),
#              numbered from BREAKDOWN_RUN
# WANT (e.g. H200): run nothing, exit 3, on another GPU. Run from the repository root on a CUDA machine; logs and JSON
# go to $OUT/native (default ./out-native/native), and with TAR set into one archive, $OUT/all.tgz.
set -uo pipefail
OUT=${OUT:-out-native}
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
echo "$GPU"
if [ -n "${WANT:-}" ] && [[ "$GPU" != *"$WANT"* ]]; then echo "not $WANT: nothing run"; exit 3; fi
D="$OUT/native"
source "$(dirname "$0")/device_env.sh"
for phase in ${PHASES:-build tests suite host breakdown}; do
    case $phase in
    build) t0=$(date +%s)
           python3 -c 'from attnlab.gpu import native; m = native.module(); print("native module:", m)' \
               > "$D/build.log" 2>&1
           echo "build: exit $? in $(( $(date +%s) - t0 ))s"; tail -n 3 "$D/build.log" ;;
    tests) gpu_tests ${TEST_S:-180} native-tests.log tests/gpu/test_decode_native.py tests/test_native_decode.py \
               tests/test_native_decode_driver.py ;;
    suite) gpu_tests ${SUITE_S:-300} suite.log tests/gpu/test_launch.py tests/gpu/test_decode.py \
               tests/gpu/test_decode_plans.py tests/gpu/test_decode_variants.py tests/gpu/test_decode_gluon.py \
               tests/gpu/test_guarded_memory.py ;;
    host) : "${HOST_RUN:?set HOST_RUN, the number of the first decode-host run}"
          for run in "$HOST_RUN" $((HOST_RUN + 1)); do
              args=""; [ "$run" != "$HOST_RUN" ] && args="--python-path"
              t0=$(date +%s)
              timeout ${HOST_S:-200} python3 benchmarks/decode_host.py $args \
                  --json "$D/decode-host-${GPU_TAG}-run$run.json" --md "$D/decode-host-run$run.md" \
                  > "$D/host-run$run.log" 2>&1
              echo "decode_host${args:+ $args}: exit $? in $(( $(date +%s) - t0 ))s"
              sed -n '/^| call |/,/^$/p' "$D/decode-host-run$run.md" 2>/dev/null || tail -n 20 "$D/host-run$run.log"
          done ;;
    pdl) : "${PDL_RUN:?set PDL_RUN, the number of the decode-host run}"  # the split kernel's launch, plain or dependent
         t0=$(date +%s)
         timeout ${HOST_S:-240} python3 benchmarks/decode_host.py --split-pdl-ab \
             --json "$D/decode-host-${GPU_TAG}-run$PDL_RUN.json" --md "$D/decode-host-run$PDL_RUN.md" \
             > "$D/host-run$PDL_RUN.log" 2>&1
         echo "decode_host --split-pdl-ab: exit $? in $(( $(date +%s) - t0 ))s"
         sed -n '/^| B | H\/Hkv | L | D | SPLIT_PDL/,/^$/p' "$D/decode-host-run$PDL_RUN.md" 2>/dev/null \
             || tail -n 20 "$D/host-run$PDL_RUN.log" ;;
    breakdown) run=${BREAKDOWN_RUN:-}  # the kept call's steps, the program's C++ call among them: one run a shape
               IFS=, read -ra shapes <<< "${BREAKDOWN_SHAPES:-tiny}"
               for shape in "${shapes[@]}"; do
                   [ -z "$run" ] && break
                   args=""; [ "$shape" != tiny ] && args="--breakdown-shape $shape"
                   t0=$(date +%s)
                   timeout ${BENCH_S:-150} python3 benchmarks/decode_host.py --breakdown --calls 1000 $args \
                       --json "$D/decode-breakdown-${GPU_TAG}-run$run.json" > "$D/breakdown-run$run.log" 2>&1
                   echo "breakdown ($shape): exit $? in $(( $(date +%s) - t0 ))s"; head -n 24 "$D/breakdown-run$run.log"
                   run=$((run + 1))
               done ;;
    *) echo "unknown phase $phase"; exit 2 ;;
    esac
done
if [ -n "${TAR:-}" ]; then tar czf "$OUT/all.tgz" -C "$D" . && rm -rf "$D" && ls -la "$OUT"; fi
