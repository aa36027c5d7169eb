#!/usr/bin/env bash
# One GPU call: where a dense prefill forward+backward's time goes (benchmarks/prefill_profile.py: eager, CUDA-graph
# and per-kernel times of attnlab and cuDNN, the two taking turns), numbered RUN, on PROFILE_ARGS (default: D 64 and
# 128, 4K and 16K, causal and not, three rounds). Then, with TABLE=1, the prefill table in rounds
# (benchmarks/device_prefill.sh's bench phase with BENCH_ARGS, default the 4K-16K table with three rounds, the GPU's
# clock noted after every time).
# Run from the repository root on a CUDA machine; logs and JSON go to $OUT/profile and $OUT/prefill.
set -uo pipefail
OUT=${OUT:-out-profile}
D="$OUT/profile"
source "$(dirname "$0")/device_env.sh"
t0=$(date +%s)
timeout ${PROFILE_S:-240} python3 benchmarks/prefill_profile.py ${PROFILE_ARGS:-} \
    --json "$D/prefill-profile-${GPU_TAG}-run${RUN:-x}.json" > "$D/profile.log" 2>&1
echo "profile: exit $? in $(( $(date +%s) - t0 ))s"
sed -n '/^| shape |/,/^$/p' "$D/profile.log" | tail -n 20
if [ "${TABLE:-0}" = 1 ]; then
    OUT="$OUT/prefill" PHASES=bench DEADLINE=${TABLE_S:-330} \
        BENCH_ARGS="${BENCH_ARGS:---D 64 128 --N 4096 8192 16384 --providers attnlab,sdpa-cudnn,sdpa --flex-budget 0 --rounds 3 --clocks}" \
        bash "$(dirname "$0")/device_prefill.sh"
fi
