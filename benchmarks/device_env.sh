# Sourced by the one-call GPU scripts (device_bwd_dq.sh, device_decode_host.sh) after they set $D, the
# folder of their logs: the import path, the GPU and its clocks and the torch/triton versions into
# $D/gpu.txt, and XDIST, pytest's worker flag where pytest-xdist is installed.
export PYTHONPATH=src PYTHONUNBUFFERED=1
mkdir -p "$D"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,power.limit --format=csv > "$D/gpu.txt" 2>&1
python3 -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__)' | tee -a "$D/gpu.txt"
XDIST=""
python3 -c 'import xdist' 2>/dev/null && XDIST="-n 8"
