#!/usr/bin/env bash
# Hardware counters of the sliding-window forward at D = 64 (W = 4096, causal, 16K tokens, H·D = 2048: the variants
# rows' shape), where attnlab's Gluon kernel runs at ~1.1-1.2x FlexAttention against the 1.3x it should: attnlab's
# kernel and FlexAttention's, each caught alone by ncu while `benchmarks/variants.py bench` times them (one launch
# after the first three): duration, instructions, tensor-pipe and shared-memory activity, and the warp stall
# breakdown. Run from the repository root on a CUDA machine; reports go to $OUT/ncu.
# SOURCE=1: instead, attnlab's kernel's source page (SASS with the sampled stall reasons of every instruction) as
# CSV, reduced to a ledger by benchmarks/ncu_stalls.py. D: the head dim (default 64).
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out-ncu}
mkdir -p "$OUT/ncu"
NCU=${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}
HEAD_D=${D:-64}
BENCH="benchmarks/variants.py bench --variants window --passes fwd --D $HEAD_D --flex-budget 200"
METRICS=gpu__time_duration.sum,smsp__inst_executed.sum,sm__cycles_elapsed.avg
METRICS=$METRICS,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active
METRICS=$METRICS,smsp__inst_executed_op_shared_st.sum,smsp__inst_executed_op_shared_ld.sum
METRICS=$METRICS,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum
if [ "${SOURCE:-0}" = 1 ]; then
    timeout ${NCU_S:-300} "$NCU" --clock-control none --kernel-name "regex:_attn_fwd_gluon" --launch-skip 3 \
        --launch-count 1 --import-source yes --section SourceCounters --section WarpStateStats \
        -o "$OUT/ncu/window-source" -f python3 $BENCH --providers attnlab > "$OUT/ncu/window-source.log" 2>&1
    echo "== source collection: exit $?"; tail -n 3 "$OUT/ncu/window-source.log"
    "$NCU" -i "$OUT/ncu/window-source.ncu-rep" --page source --csv --print-source sass > "$OUT/ncu/window-sass.csv" 2>&1
    echo "== source page: exit $?"; head -c 600 "$OUT/ncu/window-sass.csv"; echo
    python3 benchmarks/ncu_stalls.py "$OUT/ncu/window-sass.csv" --json "$OUT/ncu/window-stalls.json" | head -90
    exit 0
fi
# attnlab's Gluon forward, then FlexAttention's compiled template kernel (torch.compile names it triton_tem_*)
for pair in "attnlab:_attn_fwd_gluon" "flex:triton_tem"; do
    provider=${pair%%:*}
    kernel=${pair#*:}
    timeout ${NCU_S:-300} "$NCU" --clock-control none --kernel-name "regex:$kernel" --launch-skip 3 --launch-count 1 \
        --metrics "$METRICS" --section WarpStateStats --print-units base \
        python3 $BENCH --providers $provider > "$OUT/ncu/window-$provider.txt" 2>&1
    echo "== $provider ($kernel): exit $?"
    grep -E "^\s+(gpu__|smsp__inst|sm__|l1tex__|Stall|Warp Cycles|Avg\.|Issued|No Eligible|One or More)" \
        "$OUT/ncu/window-$provider.txt" | head -40
done
