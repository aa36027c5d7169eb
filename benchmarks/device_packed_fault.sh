#!/usr/bin/env bash
# One GPU call that hunts an illegal memory access in the packed backward (NOTES-prefill v37, v38), by PHASES (default
# "blocking alone memcheck"):
#   blocking   the packed tests of the Gluon backward (BLOCK_K) in one process, in their order, with
#              CUDA_LAUNCH_BLOCKING=1: a fault then names the launch that made it;
#   alone      the deterministic packed cases at D = 64 (K) alone;
#   memcheck   tests (SAN_FILES, SAN_K) under compute-sanitizer's memcheck, with PYTORCH_NO_CUDA_MEMORY_CACHING=1
#              (NO_CACHING): each tensor an allocation of its own, so a read past a tensor is reported even where it
#              does not fault (with PyTorch's caching allocator memcheck sees only the allocator's segments); or
#              SAN_IDS, a file of test ids (benchmarks/data/packed-fault/memcheck-ids.txt);
#   store      the packed dQ store's tests (the new one runs its script under memcheck where the machine has one);
#   old-store  that script against the store before its fix (OLD_LAYOUT, that layout.py), which memcheck must flag.
# Run from the repository root on a CUDA machine; logs go to $OUT/fault (default ./out-fault/fault).
set -uo pipefail
OUT=${OUT:-out-fault}
D="$OUT/fault"
source "$(dirname "$0")/device_env.sh"
XDIST=""
T=tests/gpu/test_prefill_gluon_bwd.py
K=${K:-deterministic_packed_batch}
for phase in ${PHASES:-blocking alone memcheck}; do
    case $phase in
    blocking) export CUDA_LAUNCH_BLOCKING=1; gpu_tests ${BLOCK_S:-240} blocking.log -x $T -k "${BLOCK_K:-gpu and packed_batch}"
              unset CUDA_LAUNCH_BLOCKING ;;
    alone) gpu_tests ${ALONE_S:-120} alone.log $T -k "$K and 64-False" ;;
    memcheck)
        SAN=$(command -v compute-sanitizer || find / -name compute-sanitizer -type f 2>/dev/null | head -n 1)
        echo "compute-sanitizer: ${SAN:-none}"
        if [ -n "$SAN" ]; then
            if [ -n "${SAN_IDS:-}" ]; then
                mapfile -t tests < "$SAN_IDS"
            else
                tests=(${SAN_FILES:-$T} -k "${SAN_K:-$K and lens_q2 and 64-False-False-False}")
            fi
            PYTORCH_NO_CUDA_MEMORY_CACHING=${NO_CACHING:-1} timeout ${SAN_S:-200} "$SAN" --tool memcheck --print-limit 20 \
                python3 -m pytest -q -p no:cacheprovider "${tests[@]}" > "$D/memcheck.log" 2>&1
            echo "memcheck: exit $?"; grep -E "Invalid|ERROR SUMMARY|at 0x|by thread|Address|passed|failed" "$D/memcheck.log" | head -n 30
        fi ;;
    store) gpu_tests ${STORE_S:-200} store.log tests/gpu/test_prefill.py -k "packed_store_reads or packed_rows_and" ;;
    old-store)  # the store test's script against the kernel before the fix, under memcheck without the caching
        # allocator: OLD_LAYOUT, that layout.py (made before the call: git show 8d142ec:src/attnlab/gpu/layout.py)
        python3 - "${OLD_LAYOUT:?OLD_LAYOUT: the layout.py before the fix}" "$D/old_store.py" <<'PY'
import re, sys
src = open("tests/gpu/test_prefill.py").read()
script = re.search(r'_GUARDED_STORE = r"""(.*?)"""', src, re.S).group(1)
script = script.replace("from attnlab.gpu.layout import", (
    "import attnlab.gpu.layout as L, importlib.util as U\n"
    f"spec = U.spec_from_file_location('attnlab.gpu.old_layout', {sys.argv[1]!r})\n"
    "old = U.module_from_spec(spec); spec.loader.exec_module(old)\n"
    "L.store_dq_tiles = old.store_dq_tiles\nfrom attnlab.gpu.layout import"))
open(sys.argv[2], "w").write(script)
PY
        SAN=$(command -v compute-sanitizer || find / -name compute-sanitizer -type f 2>/dev/null | head -n 1)
        PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout ${OLD_S:-120} "$SAN" --tool memcheck --print-limit 5 \
            python3 "$D/old_store.py" cuda > "$D/old_store.log" 2>&1
        echo "old kernel under memcheck: exit $?"; grep -E "Invalid|ERROR SUMMARY|^ok" "$D/old_store.log" | head -n 5 ;;
    *) echo "device_packed_fault.sh: unknown phase $phase"; exit 2 ;;
    esac
done
