# Sourced by the one-call GPU scripts (device_bwd_dq.sh, device_decode_host.sh, the A/B scripts below) after they set
# $D, the folder of their logs: the import path, the GPU and its clocks and the torch/triton versions into $D/gpu.txt,
# GPU_TAG (the GPU's model in the data files' names: h100, h200), XDIST, pytest's worker flag where pytest-xdist is
# installed, and decode_gpu_tests (the GPU tests of the decode kernels, plans and launches into $D/tests.log; fails
# when they do).
export PYTHONPATH=src PYTHONUNBUFFERED=1
mkdir -p "$D"

# The GPU's model in lower case, the part of every data file's name after the benchmark's ("NVIDIA H200" -> h200,
# "NVIDIA H100 80GB HBM3" -> h100), "gpu" where the name holds no such model
gpu_tag() {
    local tag
    tag=$(printf '%s\n' "$1" | grep -oE '\b[A-Z][0-9]{2,3}[A-Z]?\b' | head -n 1 | tr 'A-Z' 'a-z')
    printf '%s\n' "${tag:-gpu}"
}
GPU_TAG=$(gpu_tag "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)")
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

# The A/B scripts' phases (device_exp_poly.sh, device_row_max.sh, device_fwd_switches.sh, device_long_keys.sh):
#   gpu_tests LIMIT LOG PYTEST_ARGS...  pytest under a time limit into $D/LOG, its exit status and failures printed;
#                                       returns pytest's status
#   ab_bench LIMIT SCRIPT ARGS...       a benchmark script under a time limit into $D/bench.log, its table printed
gpu_tests() {
    local limit=$1 log=$2 t0 rc
    shift 2
    t0=$(date +%s)
    timeout "$limit" python3 -m pytest -q -p no:cacheprovider $XDIST "$@" > "$D/$log" 2>&1
    rc=$?
    echo "${log%.log}: exit $rc in $(( $(date +%s) - t0 ))s"; tail -n 2 "$D/$log"
    grep -E "^FAILED|^ERROR|illegal" "$D/$log" | head
    return $rc
}

ab_bench() {
    local limit=$1 t0 rc
    shift
    t0=$(date +%s)
    timeout "$limit" python3 "$@" > "$D/bench.log" 2>&1
    rc=$?
    echo "bench: exit $rc in $(( $(date +%s) - t0 ))s"
    sed -n "/^| row |/,\$p" "$D/bench.log" | grep . || tail -n 20 "$D/bench.log"
    return $rc
}
