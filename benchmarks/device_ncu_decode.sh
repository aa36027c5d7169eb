#!/usr/bin/env bash
# Hardware counters of the two decode split kernels (Triton's and Gluon's) on one batch-1 shape, each caught alone by
# ncu while benchmarks/decode_split_probe.py calls it with the merge kernel on every call (the one launch after the
# first ten): duration, occupancy and launch figures, memory throughput and the warp stall breakdown.
# SHAPE: "B H HKV L D" (default "1 64 8 8192 128"); KERNELS (default "triton gluon"; "triton-full": the Triton kernel
# called without the lengths). Run from the repository root on a CUDA machine; reports go to
# $OUT/ncu.
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out-ncu}
mkdir -p "$OUT/ncu"
NCU=${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}
SHAPE=${SHAPE:-1 64 8 8192 128}
TAG=$(echo "$SHAPE" | tr ' ' '-')
for kernel in ${KERNELS:-triton gluon}; do
    case $kernel in *-full) probe="--kernel ${kernel%-full} --no-lengths" ;; *) probe="--kernel $kernel" ;; esac
    timeout ${NCU_S:-120} "$NCU" --clock-control none --kernel-name "regex:_decode_split" --launch-skip 10 \
        --launch-count 1 --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
        --section MemoryWorkloadAnalysis --print-units base \
        python3 benchmarks/decode_split_probe.py $probe --shape $SHAPE > "$OUT/ncu/$kernel-$TAG.txt" 2>&1
    echo "== $kernel ($SHAPE): exit $?"
    grep -E "^kernel |Duration|Registers Per|Shared Memory Config|Dynamic Shared|Static Shared|Achieved Occupancy|Theoretical Occupancy|Block Limit|Waves Per SM|Memory Throughput|DRAM Throughput|L2 Hit|Warp Cycles Per Issued|Issued Warp|No Eligible|Stall|Grid Size|Block Size|Elapsed Cycles" \
        "$OUT/ncu/$kernel-$TAG.txt" | head -45
done
