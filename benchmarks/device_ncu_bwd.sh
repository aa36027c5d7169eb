#!/usr/bin/env bash
# Hardware counters of the two attention backwards of transformers' 1.24B Llama training step (GQA 32/8,
# D = 64, causal, 8K tokens, the model's layout): attnlab's Gluon backward and cuDNN's, each caught alone
# by ncu in `benchmarks/hf_step_probe.py --phases pair`: shared-memory store/load instructions, wavefronts
# and bank conflicts (the dQ staging tile and the dSᵀ ring go through shared memory), and the warp
# stall breakdown. Run from the repository root on a CUDA machine; reports go to $OUT/ncu.
# SOURCE=1: instead, the Gluon backward's source page (SASS, the sampled stall reasons of every instruction)
# as CSV, reduced to a ledger by benchmarks/ncu_stalls.py; of the call WORKLOAD runs (default the step's pair;
# e.g. "python3 benchmarks/bwd_block_m.py --rows pack128 --D 64 --arms table --rounds 1": documents of 128), its
# files named TAG (default gluon).
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out-ncu}
mkdir -p "$OUT/ncu"
NCU=${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}
METRICS=gpu__time_duration.sum,smsp__inst_executed_op_shared_st.sum,smsp__inst_executed_op_shared_ld.sum
METRICS=$METRICS,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum
METRICS=$METRICS,l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum
METRICS=$METRICS,smsp__inst_executed.sum,sm__cycles_elapsed.avg
if [ "${SOURCE:-0}" = 1 ]; then
    TAG=${TAG:-gluon}
    timeout ${NCU_S:-240} "$NCU" --clock-control none --kernel-name "regex:_attn_bwd_gluon_ws" --launch-skip 3 \
        --launch-count 1 --import-source yes --section SourceCounters --section WarpStateStats \
        -o "$OUT/ncu/$TAG-source" -f ${WORKLOAD:-python3 benchmarks/hf_step_probe.py --phases pair} \
        > "$OUT/ncu/$TAG-source.log" 2>&1
    echo "== source collection: exit $?"; tail -n 3 "$OUT/ncu/$TAG-source.log"
    "$NCU" -i "$OUT/ncu/$TAG-source.ncu-rep" --page source --csv --print-source sass > "$OUT/ncu/$TAG-sass.csv" 2>&1
    echo "== source page: exit $?"; head -c 600 "$OUT/ncu/$TAG-sass.csv"; echo
    "$NCU" -i "$OUT/ncu/$TAG-source.ncu-rep" --section WarpStateStats --print-details all > "$OUT/ncu/$TAG-warpstate.txt" 2>&1
    grep -E "Stall|Warp Cycles|Issued" "$OUT/ncu/$TAG-warpstate.txt" | head -30
    python3 benchmarks/ncu_stalls.py "$OUT/ncu/$TAG-sass.csv" --json "$OUT/ncu/$TAG-stalls.json" | head -${LEDGER_LINES:-90}
    exit 0
fi
for name in _attn_bwd_gluon_ws flash_bprop; do
    timeout ${NCU_S:-200} "$NCU" --clock-control none --kernel-name "regex:$name" --launch-skip 3 --launch-count 1 \
        --metrics "$METRICS" --section WarpStateStats --print-units base \
        python3 benchmarks/hf_step_probe.py --phases pair > "$OUT/ncu/$name.txt" 2>&1
    echo "== $name: exit $?"
    grep -E "^\s+(gpu__|smsp__inst|l1tex__|sm__cycles|Stall|Warp Cycles|Avg\.|Issued|No Eligible|One or More)" "$OUT/ncu/$name.txt" | head -40
done
