"""How many K/V splits a Flash-Decoding step should use (§8.4, exercise 8): the lecture's wave model
and the chooser that picks between it and the calibrated model of ``calibration.py``.

Wave model (batch B, H heads, S splits): B·H·S thread blocks run in ceil(B·H·S / SMs) waves; each
block reads its 1/(B·H·S) share of K/V at 1/SMs of the HBM bandwidth; a merge kernel then reads the
S partial outputs and logsumexps (FP32) of every (batch, head) and writes O. One launch overhead is
charged for the split kernel — the lecture's model ("32K: 169 µs at S = 4, 268 µs at S = 5");
``merge_launch=True`` also charges the merge kernel's launch, which is what makes splitting a loss
at short contexts.

``decode_num_splits`` is the one rule a decode kernel needs: the calibrated model where a
``DecodeCalibration`` was measured for that GPU and kernel configuration, the wave model elsewhere.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ._args import dtype_bytes as _dtype_bytes
from ._args import flag, pos_int
from .calibration import calibrated_num_splits, calibration_for_config, config_key
from .gpus import get_gpu

PARTIAL_BYTES = 4  # Flash-Decoding's partial outputs and logsumexps are FP32


def decode_blocks(*, batch: int, heads: int, splits: int) -> int:
    """Thread blocks of a Flash-Decoding step: one per (batch, head, split), B·H·S (§8.4)."""
    return pos_int(batch, "batch") * pos_int(heads, "heads") * pos_int(splits, "splits")


@dataclass(frozen=True)
class DecodeSplit:
    """The wave model's view of one Flash-Decoding step."""

    splits: int
    blocks: int
    waves: int
    block_bytes: float  # K/V bytes one thread block reads: 2·N·D·dtype / S
    split_time: float  # the split kernel, launch included
    merge_time: float  # the merge kernel (0 when splits == 1)
    sm_use: float  # blocks / (waves · SMs): how full the waves are

    @property
    def time(self) -> float:
        return self.split_time + self.merge_time

    def to_dict(self) -> dict:
        return asdict(self) | {"time": self.time}


def _decode_split(B: int, H: int, N: int, D: int, S: int, g, nb: int, merge_launch: bool) -> DecodeSplit:
    blocks = B * H * S
    waves = -(-blocks // g.sms)
    block_bytes = 2 * N * D * nb / S  # its 1/(B·H·S) share of the K/V cache (q and o are noise)
    split = g.launch_overhead + waves * block_bytes / (g.hbm_bw / g.sms)  # each block gets bw / SMs
    merge = 0.0
    if S > 1:  # read S partial (o, lse) per (b, h), write o
        merge = (B * H * S * (D + 1) * PARTIAL_BYTES + B * H * D * nb) / g.hbm_bw
        merge += g.launch_overhead if merge_launch else 0.0
    return DecodeSplit(S, blocks, waves, block_bytes, split, merge, blocks / (waves * g.sms))


def decode_split_cost(*, batch: int, heads: int, seq: int, head_dim: int, splits: int, gpu, dtype_bytes=2,
                      merge_launch: bool = False) -> DecodeSplit:
    """The wave model of §8.4 for one decode step; ``heads`` = heads that get their own blocks (the
    K/V heads of a kernel that serves a GQA group from one block)."""
    B, H, N, D = pos_int(batch, "batch"), pos_int(heads, "heads"), pos_int(seq, "seq"), pos_int(head_dim, "head_dim")
    S = pos_int(splits, "splits")
    if S > N:
        raise ValueError(f"splits ({S}) cannot exceed seq ({N}): every split needs at least one key")
    return _decode_split(B, H, N, D, S, get_gpu(gpu), _dtype_bytes(dtype_bytes), flag(merge_launch, "merge_launch"))


def decode_split_time(*, batch: int, heads: int, seq: int, head_dim: int, splits: int, gpu, dtype_bytes=2,
                      merge_launch: bool = False) -> float:
    """Seconds of one Flash-Decoding step with ``splits`` K/V splits (§8.4 wave model).

    Batch 1, 32 heads, D = 128, FP16, H100, 32K context: ≈ 169 µs at 4 splits, ≈ 268 µs at 5.
    """
    return decode_split_cost(batch=batch, heads=heads, seq=seq, head_dim=head_dim, splits=splits, gpu=gpu,
                             dtype_bytes=dtype_bytes, merge_launch=merge_launch).time


def _split_time(B: int, H: int, N: int, D: int, S: int, sms: int, bw: float, launch: float, nb: int,
                merge_launch: bool) -> float:
    """``_decode_split(...).time`` without building the dataclass (best_num_splits' inner loop)."""
    waves = -(-(B * H * S) // sms)
    t = launch + waves * (2 * N * D * nb / S) * sms / bw
    if S > 1:
        t += (B * H * S * (D + 1) * PARTIAL_BYTES + B * H * D * nb) / bw + (launch if merge_launch else 0.0)
    return t


def best_num_splits(*, batch: int, heads: int, seq: int, head_dim: int, gpu, max_splits: int = 64, dtype_bytes=2,
                    merge_launch: bool = False, min_split_len: int = 1, tolerance: float = 0.05) -> int:
    """The fewest K/V splits whose wave-model time is within ``tolerance`` of the fastest.

    Tries S = 1 .. min(max_splits, seq // min_split_len) — every split keeps at least
    ``min_split_len`` keys (a kernel's BLOCK_N, say). The pure argmin (``tolerance=0``) likes block
    counts that are exact multiples of the SM count (batch 1, 32 heads: 33 splits = 8 full waves of
    132, 3% faster than 4 splits in one wave); the model does not see what many small blocks cost
    (scheduling, prologues, a bigger merge), so by default the fewest splits within 5% win — the rule
    FlashAttention's own ``num_splits_heuristic`` follows (smallest split count within 85% of the best
    wave efficiency). Exercise 8 (batch 2, 32 heads, 64K, H100) → 2; batch 1, 32K → 4.

    Cheap (at most ``max_splits`` closed-form evaluations, tens of µs) and valid for any batch,
    heads and seq >= 1 on any ``GPU``, e.g. one built from the running device's SM count.
    """
    B, H, N, D = pos_int(batch, "batch"), pos_int(heads, "heads"), pos_int(seq, "seq"), pos_int(head_dim, "head_dim")
    top = min(pos_int(max_splits, "max_splits"), max(1, N // pos_int(min_split_len, "min_split_len")))
    g, nb, ml = get_gpu(gpu), _dtype_bytes(dtype_bytes), flag(merge_launch, "merge_launch")
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)) or not 0 <= tolerance < 1:
        raise ValueError(f"tolerance must be a number in [0, 1), got {tolerance!r}")
    times = [_split_time(B, H, N, D, S, g.sms, g.hbm_bw, g.launch_overhead, nb, ml) for S in range(1, top + 1)]
    limit = min(times) * (1 + tolerance) * (1 + 1e-12)  # 1e-12: exact ties go to the fewer splits
    return next(S for S, t in enumerate(times, start=1) if t <= limit)


def decode_num_splits(*, batch: int, kv_heads: int, seq: int, head_dim: int, gpu, config=None,
                      dtype_bytes=2) -> int:
    """The split count for one call of a split-KV decode kernel whose programs each read one K/V head
    (the GQA group shares it), on ``gpu`` (a ``GPU`` or preset name; give the device's own SM count
    with ``dataclasses.replace(get_gpu("H200"), sms=...)``).

    ``config``: the kernel configuration ``(block_n, block_d, num_warps, num_stages)``, or None. Where
    ``calibration_for_config(gpu.name, config)`` has a ``DecodeCalibration`` (measured, or scaled from the
    same tile at a wider head dim): ``calibrated_num_splits`` on it. Elsewhere the lecture's wave model,
    ``best_num_splits`` with the merge's launch charged and every split at least ``block_n`` keys (1
    without a config), at most 64 splits.
    """
    B, Hkv, N, D = pos_int(batch, "batch"), pos_int(kv_heads, "kv_heads"), pos_int(seq, "seq"), \
        pos_int(head_dim, "head_dim")
    g, nb = get_gpu(gpu), _dtype_bytes(dtype_bytes)
    key = None if config is None else config_key(config)
    block_n = 1 if key is None else key[0]
    cal = None if key is None else calibration_for_config(g.name, key)
    if cal is not None:
        return calibrated_num_splits(batch=B, kv_heads=Hkv, seq=N, head_dim=D, sms=g.sms, cal=cal,
                                     min_split_len=block_n, dtype_bytes=nb)
    return best_num_splits(batch=B, heads=Hkv, seq=N, head_dim=D, gpu=g, max_splits=64, dtype_bytes=nb,
                           merge_launch=True, min_split_len=block_n)
