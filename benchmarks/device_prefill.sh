#!/usr/bin/env bash
# The one script a GPU call runs for the prefill kernels (lecture §5–§7 on real hardware):
# GPU tests, the configuration sweep, the check of every benchmarked shape with the chosen
# configurations, then the benchmark against PyTorch's backends; logs and JSON land in $OUT.
# Each phase gets at most its own limit and what is left of DEADLINE seconds (the call's limit).
#   PHASES="sweep check bench" DEADLINE=560 BENCH_ARGS="--flex-budget 30" bash benchmarks/device_prefill.sh
#   SWEEP_ARGS="--set v3 --D 128" sweeps another candidate list (the check and bench then use its winners)
#   TESTS="tests/gpu/test_prefill_gluon_bwd.py" runs only those test files in the tests phase
#   GQA rows: CHECK_ARGS="--gqa 4 --N 4096 8192" BENCH_ARGS="--gqa 4 --N 4096 8192 --providers attnlab,sdpa,sdpa-cudnn"
#   the multi-head and GQA rows in one run and one table: BENCH_ARGS="--gqa 1 4 ..."
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out/prefill}
PHASES=${PHASES:-"tests sweep check bench"}
DEADLINE=${DEADLINE:-570}
BENCH_ARGS=${BENCH_ARGS:-}
SWEEP_ARGS=${SWEEP_ARGS:-}
CHECK_ARGS=${CHECK_ARGS:-}
CHECK_S=${CHECK_S:-90}
TESTS_S=${TESTS_S:-120}
TESTS=${TESTS:-"tests/gpu/test_prefill.py tests/gpu/test_prefill_gluon.py tests/gpu/test_prefill_gluon_bwd.py tests/test_api.py"}
mkdir -p "$OUT"
t0=$(date +%s)
left() { local l=$(( DEADLINE - ($(date +%s) - t0) )); [ "$l" -lt "$1" ] && echo "$l" || echo "$1"; }
stamp() { echo "== $1 at +$(( $(date +%s) - t0 )) s"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
python -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
CONFIGS=()
for phase in $PHASES; do
  stamp "$phase"
  [ -f "$OUT/best.json" ] && CONFIGS=(--configs "$OUT/best.json")
  case $phase in
    tests) timeout "$(left "$TESTS_S")" python -m pytest -q -n 8 -p no:cacheprovider $TESTS > "$OUT/tests.log" 2>&1
           echo "tests exit $?"; grep -E "FAILED|Error|passed|failed" "$OUT/tests.log" | tail -n 12 ;;
    sweep) timeout "$(left 180)" python benchmarks/prefill.py sweep $SWEEP_ARGS --json "$OUT/sweep.json" --best "$OUT/best.json" \
             > "$OUT/sweep.log" 2>&1
           echo "sweep exit $?"; grep -E "^D=.*(fwd|bwd):|precompile failed|compiled" "$OUT/sweep.log" ;;
    check) timeout "$(left "$CHECK_S")" python benchmarks/prefill.py check "${CONFIGS[@]}" $CHECK_ARGS > "$OUT/check.log" 2>&1
           echo "check exit $?"; grep -E "ok=False|pass|failed|Error" "$OUT/check.log" | tail -n 8 ;;
    bench) timeout "$(left 400)" python benchmarks/prefill.py bench "${CONFIGS[@]}" $BENCH_ARGS \
             --json "$OUT/prefill.json" --md "$OUT/prefill.md" > "$OUT/bench.log" 2>&1
           echo "bench exit $?"; grep -iE "compile|failed" "$OUT/bench.log"; cat "$OUT/prefill.md" 2>/dev/null ;;
  esac
done
stamp done
