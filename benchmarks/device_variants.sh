#!/usr/bin/env bash
# The one script a GPU call runs for the attention variants (window, softcap, ALiBi, varlen,
# deterministic backward): GPU tests, the correctness check on odd shapes, then the benchmark against
# FlexAttention and SDPA in the same run; logs, JSON and markdown land in $OUT.
#   PHASES="tests check bench" BENCH_ARGS="--D 64" DEADLINE=570 bash benchmarks/device_variants.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out/variants}
PHASES=${PHASES:-"tests check bench"}
DEADLINE=${DEADLINE:-570}
BENCH_ARGS=${BENCH_ARGS:-}
TAG=${TAG:-all}
mkdir -p "$OUT"
t0=$(date +%s)
left() { local l=$(( DEADLINE - ($(date +%s) - t0) )); [ "$l" -lt "$1" ] && echo "$l" || echo "$1"; }
stamp() { echo "== $1 at +$(( $(date +%s) - t0 )) s"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
python -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
for phase in $PHASES; do
  stamp "$phase"
  case $phase in
    tests) timeout "$(left 240)" python -m pytest -q -n 8 -p no:cacheprovider tests/gpu tests/test_api.py tests/kvcache \
             > "$OUT/tests.log" 2>&1
           echo "tests exit $?"; grep -E "FAILED|Error|passed|failed" "$OUT/tests.log" | tail -n 15 ;;
    check) timeout "$(left 150)" python benchmarks/variants.py check --json "$OUT/check.json" > "$OUT/check.log" 2>&1
           echo "check exit $?"; cat "$OUT/check.log" | tail -n 20 ;;
    bench) timeout "$(left 500)" python benchmarks/variants.py bench $BENCH_ARGS --json "$OUT/variants-$TAG.json" \
             --md "$OUT/variants-$TAG.md" > "$OUT/bench-$TAG.log" 2>&1
           echo "bench exit $?"; grep -iE "error|failed" "$OUT/bench-$TAG.log" | head; cat "$OUT/variants-$TAG.md" 2>/dev/null ;;
  esac
done
stamp done
