#!/usr/bin/env bash
# One GPU call for where a long D = 128 forward's energy goes (benchmarks/energy_parts.py), by PHASES (default
# "tests energy gqa switches"):
#   tests     the Q_REGS builds' GPU tests (Q from registers gives the bits of Q from shared memory on awkward shapes);
#             the phases after it run only if they pass
#   suite     the prefill GPU tests (the Gluon forward's, the library's prefill, its plans and variants), the phases
#             after it run only if they pass
#   energy    energy_parts.py with ARMS (default: its own default arms), 16 heads, N = 16K, not causal, ROUNDS rounds
#             (default 3), numbered RUN
#   gqa       the same with 16/4 heads (the GEMM, the library's forward, Q_REGS and cuDNN), two rounds, numbered RUN + 1
#   switches  fwd_switches.py at D = 128, SWITCH_BUILDS (default "shipped qregs") on SWITCH_ROWS (default "full causal
#             causal16k": the dense 4 × 4K rows, causal and not, and one causal 16K sequence), five rounds of do_bench
#             times, numbered SWITCH_RUN
# Run from the repository root on a CUDA machine; logs and JSON go to $OUT/energy (default ./out-energy/energy).
set -uo pipefail
OUT=${OUT:-out-energy}
D="$OUT/energy"
source "$(dirname "$0")/device_env.sh"
: "${RUN:?set RUN, the number of the energy-parts run}"
for phase in ${PHASES:-tests energy gqa switches}; do
    t0=$(date +%s)
    case $phase in
    tests) gpu_tests ${TEST_S:-300} tests.log tests/gpu/test_prefill_gluon.py -k q_regs \
               || { echo "GPU tests failed: no benchmarks"; exit 1; } ;;
    suite) gpu_tests ${SUITE_S:-360} suite.log tests/gpu/test_prefill_gluon.py tests/gpu/test_prefill.py \
               tests/gpu/test_prefill_plans.py tests/gpu/test_prefill_variants.py \
               || { echo "GPU tests failed: no benchmarks"; exit 1; } ;;
    energy) timeout ${ENERGY_S:-240} python3 benchmarks/energy_parts.py --rounds ${ROUNDS:-3} ${ARMS:+--arms $ARMS} \
                --json "$D/energy-parts-${GPU_TAG}-run$RUN.json" --md "$D/energy-parts-run$RUN.md" \
                > "$D/energy-run$RUN.log" 2>&1
            echo "energy_parts: exit $? in $(( $(date +%s) - t0 ))s"
            cat "$D/energy-parts-run$RUN.md" 2>/dev/null || tail -n 20 "$D/energy-run$RUN.log" ;;
    gqa) run=$((RUN + 1))
         timeout ${ENERGY_S:-240} python3 benchmarks/energy_parts.py --kv-heads 4 --arms gemm attnlab qregs sdpa-cudnn \
             --rounds 2 --json "$D/energy-parts-${GPU_TAG}-run$run.json" --md "$D/energy-parts-run$run.md" \
             > "$D/energy-run$run.log" 2>&1
         echo "energy_parts --kv-heads 4: exit $? in $(( $(date +%s) - t0 ))s"
         cat "$D/energy-parts-run$run.md" 2>/dev/null || tail -n 20 "$D/energy-run$run.log" ;;
    switches) : "${SWITCH_RUN:?set SWITCH_RUN, the number of the fwd-switches run}"
              ab_bench ${BENCH_S:-240} benchmarks/fwd_switches.py --rows ${SWITCH_ROWS:-full causal causal16k} --D 128 \
                  --builds ${SWITCH_BUILDS:-shipped qregs} --rounds 5 \
                  --json "$D/fwd-switches-${GPU_TAG}-run$SWITCH_RUN.json" ;;
    *) echo "device_energy.sh: unknown phase $phase"; exit 2 ;;
    esac
done
