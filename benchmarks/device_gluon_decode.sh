#!/usr/bin/env bash
# One GPU call for the Gluon decode split kernel against the Triton one (NOTES-decode v29): the Gluon decode GPU tests,
# then benchmarks/decode_split_probe.py --time (both kernels, with their in-kernel merge and with the merge kernel on
# every call, under CUDA graphs in turns) on the batch-1 shapes, then, with NCU=1, both split kernels under ncu on 64/8
# heads over 8K keys (benchmarks/device_ncu_decode.sh). Run from the repository root on a CUDA machine; logs and JSON
# go to $OUT/gd (default ./out-gluon-decode/gd); RUN numbers the probe's JSON.
set -uo pipefail
OUT=${OUT:-out-gluon-decode}
D="$OUT/gd"
source "$(dirname "$0")/device_env.sh"
gpu_tests ${TEST_S:-150} tests.log tests/gpu/test_decode_gluon.py
t0=$(date +%s)
timeout ${PROBE_S:-150} python3 benchmarks/decode_split_probe.py --time --shape 1 64 8 8192 128 --shape 1 28 4 20000 128 \
    --shape 1 32 8 32768 64 --shape 1 32 8 32768 128 --json "$D/decode-split-probe-${GPU_TAG}-run${RUN:-x}.json" \
    > "$D/probe.log" 2>&1
echo "probe: exit $? in $(( $(date +%s) - t0 ))s"; tail -n 20 "$D/probe.log"
[ "${NCU:-0}" = 1 ] && NCU= OUT="$OUT" KERNELS="triton triton-full gluon" SHAPE="1 64 8 8192 128" bash "$(dirname "$0")/device_ncu_decode.sh"
exit 0
