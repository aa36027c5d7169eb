"""The calibrated split model of Flash-Decoding (§8.4's waves, with what a real GPU adds), and the
calibrations measured for attnlab's Triton decode kernel on an H200.

The lecture's wave model (``splits.py``) gives every thread block 1/SMs of the HBM bandwidth, so one
full wave of one block per SM always streams at full speed. On a real GPU one program streams at
the rate its bytes in flight allow (Little's law), several programs share an SM, the aggregate rate
saturates smoothly, and each split and wave costs a little fixed time. ``calibrated_split_time``
models that with the constants of a ``DecodeCalibration``; ``calibrated_num_splits`` picks a split
count from it; ``calibration_for`` looks up a measured calibration; ``scaled_calibration`` predicts
one for another kernel configuration, and ``calibration_for_config`` does so for a narrower head dim.
``calibration_fit.py`` fits the constants to measured sweeps.

A kernel configuration is a plain tuple ``(block_n, block_d, num_warps, num_stages)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ._args import dtype_bytes as _dtype_bytes
from ._args import pos_int
from .gpus import get_gpu

# Split counts the decode benchmarks sweep.
SPLIT_CANDIDATES = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 40, 48, 64)
# Split counts the calibrated chooser picks from: the powers of two. In the split sweeps of the current kernels on an
# H200 (decode-host runs 5, 6, 12 and 26, the merge kernel; decode runs 6-9) the fastest power of two is within 1 % of
# the fastest count, while counts in between run slower than the model has them: it picked 40 splits at 28/4 heads
# over 20,000 keys (the small configuration), where 64 ran 1.25-1.27x faster (tests/cost/test_calibration_fit.py).
PICK_CANDIDATES = (1, 2, 4, 8, 16, 32, 64)

SMEM_PER_SM = 227 * 1024  # shared memory one block may use on sm_90 (228 KiB less the 1 KiB reserved)


def config_key(config) -> tuple[int, int, int, int]:
    """``config`` as the tuple ``(block_n, block_d, num_warps, num_stages)`` of positive ints; raises
    for anything else (4 items, each a positive integer)."""
    try:
        items = tuple(config)
    except TypeError:
        raise TypeError(f"config must be a tuple (block_n, block_d, num_warps, num_stages), got {config!r}") from None
    if len(items) != 4:
        raise ValueError(f"config must have 4 items (block_n, block_d, num_warps, num_stages), got {config!r}")
    names = ("block_n", "block_d", "num_warps", "num_stages")
    return tuple(pos_int(v, f"config's {n}") for v, n in zip(items, names))


@dataclass(frozen=True)
class DecodeCalibration:
    """What the wave model leaves out, measured once on one GPU for one kernel configuration.

    bw: bytes/s the split kernel streams K/V at once enough programs run (not the datasheet's).
    program_bw: bytes/s ONE program streams at when it has the memory system to itself — set by the
        bytes it keeps in flight (tiles in flight × block_n × block_d × 2 tensors) over the memory
        latency, not by a 1/SMs share of the bandwidth as the wave model assumes.
    programs_per_sm: programs resident on an SM at once (the configuration's shared memory).
    k: how sharply P programs' demand P·program_bw meets bw: the aggregate rate is
        (1/(P·program_bw)^k + 1/bw^k)^(-1/k) (k → ∞ is a hard min).
    fixed: seconds of a call that depend neither on the split count nor on the bytes (launch, q load).
    per_split: seconds per split when S > 1: the merging program reads the S partials one after the
        other (one dependent round trip to L2 each).
    per_wave: seconds per wave of programs: a program's start (q load, first tile's latency) and end
        (stores, arrival counter) that streaming does not hide.
    config: (block_n, block_d, num_warps, num_stages) it was measured with.
    source: where the numbers come from.
    """

    bw: float
    program_bw: float
    programs_per_sm: int
    k: float
    fixed: float = 0.0
    per_split: float = 0.0
    per_wave: float = 0.0
    config: tuple = ()
    source: str = ""


def tiles_in_flight(config) -> int:
    """K/V tiles a program has in flight: Triton's pipeliner keeps num_stages − 1 buffers of the K and
    V tiles in shared memory (seen in the compiled kernel, sm_90: 2 × (64×128) bf16 buffers each for
    block_n = 64, 3 stages)."""
    return max(1, config_key(config)[3] - 1)


def programs_per_sm(config, smem_per_sm: int = SMEM_PER_SM) -> int:
    """Programs resident per SM, from the shared memory of the K/V buffers (+ 8 KiB for q and the
    rest; the compiled small config takes 70 KiB: 3 per SM, the large 136 KiB: 1)."""
    bn, bd, _, _ = key = config_key(config)
    smem = tiles_in_flight(key) * 2 * bn * bd * 2 + 8 * 1024
    return max(1, pos_int(smem_per_sm, "smem_per_sm") // smem)


def scaled_calibration(cal: DecodeCalibration, config) -> DecodeCalibration:
    """A prediction for another configuration from a measured one, by Little's law: one program's
    rate scales with the K/V bytes it keeps in flight (tiles in flight × block_n × block_d); programs
    per SM from the shared memory those buffers take; bw, k and the overheads unchanged."""
    key, base = config_key(config), config_key(cal.config)
    ratio = (tiles_in_flight(key) * key[0] * key[1]) / (tiles_in_flight(base) * base[0] * base[1])
    return replace(cal, program_bw=cal.program_bw * ratio, programs_per_sm=programs_per_sm(key),
                   config=key, source=f"predicted from {base} by bytes in flight")


# Measured on an H200 (132 SMs), D = 128, CUDA-graph times; fitted by ``fit_decode_calibration`` to
# the recorded runs (tests/cost/test_calibration_fit.py re-derives these numbers from the files named):
# both configurations from the batch-1 split sweeps of decode-host run 5, timed with the split kernel and
# the separate merge kernel (the library's default merge since that run). The merge kernel merges one
# query row per program, all in parallel, so a split costs almost nothing more (5 ns for the large
# configuration, 0 for the small); fitted to the fused merge's sweeps (decode runs 2, 3 and
# decode-host run 2), where the group's last program merges alone, a split cost 0.19–0.26 µs and the
# model picked 16–20 splits where the merge kernel runs fastest at 32. Out of sample, the large
# configuration's picks on run 3's B = 16 sweeps are within 0.1 % of each sweep's best.
_H200_SMALL = DecodeCalibration(bw=3.8441e12, program_bw=31.718e9, programs_per_sm=3, k=5.3394, fixed=1.6774e-6,
                                per_split=0.0, per_wave=1.3675e-6, config=(64, 128, 4, 3),
                                source="H200, 2026-12-01, benchmarks/data/decode-host-h200-run5.json")
_H200_LARGE = DecodeCalibration(bw=4.3899e12, program_bw=45.067e9, programs_per_sm=1, k=4.0, fixed=0.62159e-6,
                                per_split=5.2603e-9, per_wave=2.0572e-6, config=(128, 128, 4, 3),
                                source="H200, 2026-12-01, benchmarks/data/decode-host-h200-run5.json")
# (GPU name part, config) -> calibration
CALIBRATIONS = {("H200", _H200_SMALL.config): _H200_SMALL, ("H200", _H200_LARGE.config): _H200_LARGE}
# GPUs on the processor of a GPU measured above, with other memory: their name part -> the measured GPU's. The H100
# is the H200's chip (132 SMs, 50 MB of L2, the same latencies) with HBM3 at 3.35 TB/s instead of HBM3e at 4.8: one
# program's rate (set by its bytes in flight over the latency), the programs per SM and the fixed, per-split and
# per-wave costs carry over, the aggregate bandwidth scales (``processor_calibration``). Not measured on an H100.
SAME_PROCESSOR = {"H100": "H200"}


def calibration_for(gpu_name: str, config) -> DecodeCalibration | None:
    """The calibration measured on a GPU whose name contains a GPU key of ``CALIBRATIONS`` ("H200"
    matches "NVIDIA H200") for this kernel configuration, or None."""
    if not isinstance(gpu_name, str):
        raise TypeError(f"gpu_name must be a string like 'NVIDIA H200', got {gpu_name!r}")
    key = config_key(config)
    for (gpu, ckey), cal in CALIBRATIONS.items():
        if gpu in gpu_name.upper() and ckey == key:
            return cal
    return None


def calibration_for_config(gpu_name: str, config) -> DecodeCalibration | None:
    """``calibration_for``, or else where this GPU has a measured calibration for the same tile length,
    warps and stages at a wider ``block_d``: that one scaled to ``config`` by ``scaled_calibration``
    (Little's law: fewer bytes in flight per program, more programs per SM). The head dims below 128 run
    such configurations ((128, 64, 4, 3) at D = 64); a wider one (D = 256) is not predicted from a narrower
    one. Else, for a GPU on a measured GPU's processor with other memory (``SAME_PROCESSOR``: the H100),
    ``processor_calibration``; else None."""
    cal = calibration_for(gpu_name, config)
    if cal is not None:
        return cal
    bn, bd, warps, stages = config_key(config)
    wider = [c for (gpu, key), c in CALIBRATIONS.items() if gpu in gpu_name.upper()
             and (key[0], key[2], key[3]) == (bn, warps, stages) and key[1] > bd]
    if wider:
        return scaled_calibration(min(wider, key=lambda c: c.config[1]), (bn, bd, warps, stages))
    return processor_calibration(gpu_name, config)


def processor_calibration(gpu_name: str, config) -> DecodeCalibration | None:
    """For a GPU of ``SAME_PROCESSOR`` (a name part of ``gpu_name``, "NVIDIA H100 80GB HBM3" -> H100): the calibration
    of the GPU whose processor it shares (``calibration_for_config``, measured or scaled), its aggregate bandwidth
    ``bw`` times the ratio of the two presets' HBM bandwidths (H100 over H200: 3.35 / 4.8), the rest unchanged; None
    for any other GPU, or where that GPU has no calibration for ``config``. A prediction: its ``source`` says so."""
    if not isinstance(gpu_name, str):
        raise TypeError(f"gpu_name must be a string like 'NVIDIA H100', got {gpu_name!r}")
    for part, measured in SAME_PROCESSOR.items():
        if part in gpu_name.upper():
            base = calibration_for_config(measured, config)
            if base is None:
                return None
            ratio = get_gpu(part).hbm_bw / get_gpu(measured).hbm_bw
            return replace(base, bw=base.bw * ratio,
                           source=f"predicted for the {part} from {measured}'s ({base.source}): its bandwidth "
                                  f"x {ratio:.3f}, the HBM bandwidths' ratio")
    return None


def aggregate_rate(programs: int, program_bw: float, bw: float, k: float) -> float:
    """Bytes/s of ``programs`` programs streaming at once: bw·(x^-k + 1)^(-1/k) with x = demand / bw =
    programs·program_bw / bw — about the demand well below bw, about bw well above it (k → ∞: the
    lesser of the two). Written so that no power overflows, whatever k."""
    x = max(programs, 1) * program_bw / bw
    if x <= 1.0:
        return bw * x / (1.0 + x ** k) ** (1.0 / k)
    return bw / (1.0 + x ** -k) ** (1.0 / k)


def _rate(P: int, cal: DecodeCalibration) -> float:
    return aggregate_rate(P, cal.program_bw, cal.bw, cal.k)


def _time(B: int, Hkv: int, N: int, D: int, S: int, sms: int, cal: DecodeCalibration, nb: int) -> float:
    P = B * Hkv * S
    block_n = cal.config[0] if cal.config else 1
    chunk = min(N, math.ceil(math.ceil(N / S) / block_n) * block_n)  # the longest split sets the pace
    per = 2 * chunk * D * nb
    slots = sms * cal.programs_per_sm
    full, rest = divmod(P, slots)
    t = full * (slots * per / _rate(slots, cal) + cal.per_wave)
    if rest:
        t += rest * per / _rate(rest, cal) + cal.per_wave
    return cal.fixed + (cal.per_split * S if S > 1 else 0.0) + t


def _check_cal(cal) -> DecodeCalibration:
    if not isinstance(cal, DecodeCalibration):
        raise TypeError(f"cal must be a DecodeCalibration, got {cal!r}")
    return cal


def calibrated_split_time(*, batch: int, kv_heads: int, seq: int, head_dim: int, splits: int, sms: int,
                          cal: DecodeCalibration, dtype_bytes=2) -> float:
    """Seconds of one decode call with ``splits`` splits (§8.4's waves, calibrated).

    P = B·Hkv·S programs of 2·chunk·D·dtype_bytes bytes each (chunk = ceil(seq/S) rounded up to whole
    block_n tiles: the longest split sets the pace) run in waves of sms·programs_per_sm; a wave of n
    programs streams at the aggregate rate of n programs and pays ``per_wave``; the merge pays
    ``per_split`` per split. The wave model instead gives every program bw/SMs, so for it one full
    wave of 1 program per SM is always enough."""
    B, Hkv, N, D = pos_int(batch, "batch"), pos_int(kv_heads, "kv_heads"), pos_int(seq, "seq"), \
        pos_int(head_dim, "head_dim")
    S, sm = pos_int(splits, "splits"), pos_int(sms, "sms")
    if S > N:
        raise ValueError(f"splits ({S}) cannot exceed seq ({N}): every split needs at least one key")
    return _time(B, Hkv, N, D, S, sm, _check_cal(cal), _dtype_bytes(dtype_bytes))


def calibrated_num_splits(*, batch: int, kv_heads: int, seq: int, head_dim: int, sms: int,
                          cal: DecodeCalibration, max_splits: int = 64, min_split_len: int = 1,
                          tolerance: float = 0.03, dtype_bytes=2, candidates=None) -> int:
    """The fewest of ``candidates`` (None: ``PICK_CANDIDATES``, the powers of two) within ``tolerance`` of the
    calibrated model's fastest among them (every split keeps at least ``min_split_len`` keys, at most ``max_splits``
    splits; 1 is always a candidate)."""
    B, Hkv, N, D = pos_int(batch, "batch"), pos_int(kv_heads, "kv_heads"), pos_int(seq, "seq"), \
        pos_int(head_dim, "head_dim")
    sm, nb = pos_int(sms, "sms"), _dtype_bytes(dtype_bytes)
    top = max(1, min(pos_int(max_splits, "max_splits"), N // pos_int(min_split_len, "min_split_len")))
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not 0 <= tolerance < 1:
        raise ValueError(f"tolerance must be a number in [0, 1), got {tolerance!r}")
    _check_cal(cal)
    pool = PICK_CANDIDATES if candidates is None else [pos_int(S, "a candidate split count") for S in candidates]
    cands = sorted({1, *(S for S in pool if S <= top)})
    times = {S: _time(B, Hkv, N, D, S, sm, cal, nb) for S in cands}
    limit = min(times.values()) * (1 + tolerance)
    return next(S for S in cands if times[S] <= limit)
