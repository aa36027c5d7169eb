#!/usr/bin/env bash
# The one script a GPU call runs for the prefill kernels (lecture §5–§7 on real hardware):
# GPU tests, the benchmark-shape check, the configuration sweep, the benchmark; logs and JSON in $OUT.
#   PHASES="tests check sweep bench" BENCH_ARGS="--providers attnlab,sdpa-flash" bash benchmarks/device_prefill.sh
set -uo pipefail
export PYTHONPATH=src PYTHONUNBUFFERED=1
OUT=${OUT:-out/prefill}
PHASES=${PHASES:-"tests check sweep bench"}
BENCH_ARGS=${BENCH_ARGS:-}
mkdir -p "$OUT"
t0=$(date +%s)
stamp() { echo "== $1 at +$(( $(date +%s) - t0 )) s"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv,noheader
python -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
for phase in $PHASES; do
  stamp "$phase"
  case $phase in
    tests) python -m pytest -q -x -n 8 -p no:cacheprovider tests/test_gpu_flash.py > "$OUT/tests.log" 2>&1
           echo "tests exit $?"; tail -n 3 "$OUT/tests.log" ;;
    check) python benchmarks/prefill.py check --json "$OUT/check.json" > "$OUT/check.log" 2>&1
           echo "check exit $?"; tail -n 1 "$OUT/check.log" ;;
    sweep) python benchmarks/prefill.py sweep --json "$OUT/sweep.json" > "$OUT/sweep.log" 2>&1
           echo "sweep exit $?"; grep -E "^D=.*(fwd|bwd):" "$OUT/sweep.log" ;;
    bench) python benchmarks/prefill.py bench $BENCH_ARGS --json "$OUT/prefill.json" --md "$OUT/prefill.md" \
             > "$OUT/bench.log" 2>&1
           echo "bench exit $?"; grep -i "compile" "$OUT/bench.log"; cat "$OUT/prefill.md" ;;
  esac
done
stamp done
