#!/usr/bin/env bash
# One GPU call for the Gluon backward's 128-row query blocks at D = 64 (prefill_gluon_bwd, block_m 128), by
# PHASES (default "checks bench"):
#   checks  the 128-row build's GPU tests (dense, windows, packed batches; the float64 criterion; stops the call when
#           they fail), or those CHECK_K selects in that file ("gpu and persistent": the persistent build's), and
#           CHECK_EXTRA, more GPU tests to run beside them (a pytest -k expression over CHECK_FILES; empty: none);
#   bench   benchmarks/bwd_block_m.py on ROWS (default all six) with ARMS (default "g64 g128 g128s g64lag0")
#           taking turns ROUNDS times (default 3), numbered RUN;
#   variants  benchmarks/variants.py's packed batch at D = 64, forward and forward+backward, in two processes: the
#           library's backward beside FlexAttention, then the Triton kernels' (--packed-kernel triton), numbered VRUN;
#   serial  GPU tests in one process (no pytest-xdist workers: a fault in one test then names itself), the -k
#           expression SERIAL_K (default: the packed and deterministic packed backward tests) over SERIAL_FILES.
# Run from the repository root on a CUDA machine; logs and JSON go to $OUT/bwdblockm (default ./out-bwdblockm/bwdblockm).
set -uo pipefail
OUT=${OUT:-out-bwdblockm}
D="$OUT/bwdblockm"
source "$(dirname "$0")/device_env.sh"
for phase in ${PHASES:-checks bench}; do
    case $phase in
    checks)
        gpu_tests ${CHECK_S:-200} checks.log tests/gpu/test_prefill_gluon_bwd.py -k "${CHECK_K:-gpu and 128_row}" \
            || { echo "GPU checks failed: no benchmarks"; exit 1; }
        if [ -n "${CHECK_EXTRA:-}" ]; then
            gpu_tests ${EXTRA_S:-200} extra.log ${CHECK_FILES:-tests/gpu} -k "$CHECK_EXTRA"
        fi ;;
    bench) ab_bench ${BENCH_S:-300} benchmarks/bwd_block_m.py --rows ${ROWS:-causal full long gqa varlen short} \
               --arms ${ARMS:-g64 g128 g128s g64lag0} --rounds ${ROUNDS:-3} \
               --json "$D/bwd-block-m-${GPU_TAG}-run${RUN:-x}.json" ;;
    variants)
        for kernel in library triton; do
            providers="attnlab flex"
            [ $kernel = triton ] && providers=attnlab
            timeout ${VAR_S:-200} python3 benchmarks/variants.py bench --variants varlen --D 64 --passes fwd fwd_bwd \
                --providers $providers --packed-kernel $kernel \
                --json "$D/variants-${GPU_TAG}-varlen-run${VRUN:-x}-$kernel.json" > "$D/variants-$kernel.log" 2>&1
            echo "variants ($kernel): exit $?"; grep "^|" "$D/variants-$kernel.log" | tail -n 4
        done ;;
    serial)
        XDIST="" gpu_tests ${SERIAL_S:-300} serial.log ${SERIAL_FILES:-tests/gpu/test_prefill_gluon_bwd.py} \
            -k "${SERIAL_K:-gpu and packed_batch}" ;;
    *) echo "device_bwd_block_m.sh: unknown phase $phase"; exit 2 ;;
    esac
done
