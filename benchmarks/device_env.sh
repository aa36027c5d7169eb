# Sourced by the one-call GPU scripts (device_bwd_dq.sh, device_decode_host.sh) after they set $D, the
# folder of their logs: the import path, the GPU and its clocks and the torch/triton versions into
# $D/gpu.txt, XDIST, pytest's worker flag where pytest-xdist is installed, and decode_gpu_tests (the GPU tests of
# the decode kernels, plans and launches into $D/tests.log; fails when they do).
export PYTHONPATH=src PYTHONUNBUFFERED=1
mkdir -p "$D"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.limit --format=csv > "$D/gpu.txt" 2>&1
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)' | tee -a "$D/gpu.txt"
XDIST=""
python3 -c 'import xdist' 2>/dev/null && XDIST="-n 8"

decode_gpu_tests() {
    local t0 rc
    t0=$(date +%s)
    timeout ${TEST_S:-240} python3 -m pytest -q -p no:cacheprovider $XDIST tests/gpu/test_launch.py \
        tests/gpu/test_decode.py tests/gpu/test_decode_plans.py tests/gpu/test_decode_variants.py > "$D/tests.log" 2>&1
    rc=$?
    echo "tests: exit $rc in $(( $(date +%s) - t0 ))s"; tail -n 2 "$D/tests.log"; grep "^FAILED" "$D/tests.log" | head
    return $rc
}
