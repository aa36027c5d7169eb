"""What simulating the lecture's forward kernels takes in memory, estimated before anything is
allocated, and the limit ``simulate_forward`` holds it to (lecture §3.2: the standard forward
materialises S and P, N×N each; §5.2–5.3: the kernels the simulator runs).

The simulator keeps every array of a launch in host memory and runs a chunk of blocks at a time, so a
run needs, at its peak (the phases run one after another; the largest decides):

* the standard forward: S and P, N×N float32 each, plus the first-touch maps of the ideal cache (one
  byte per element of each array a launch touches: S and P during the softmax), plus the per-lane
  arrays of one chunk (indices, sectors, masks of every lane of an unrolled memory instruction);
* the flash forward: no N×N array, only the per-lane arrays and registers of one chunk;
* the float64 reference: S, exp(S − m) and P as N×N float64.

The per-byte constants were measured with ``tracemalloc`` and rounded up; ``tests/sim`` checks that
the estimate stays above the measured peak and within a small factor of it.
"""

from __future__ import annotations

import os

from ..accounting import WARP
from ..device import MAX_THREADS_PER_CHUNK

FLOAT32 = 4
TOUCH_MAP_BYTES = 1  # first-touch map: one bool per element of an array touched in a launch
# per lane of one unrolled global-memory instruction in the softmax kernel: int64 indices, sector ids,
# their sorted copies and masks (measured 50-65 bytes)
SOFTMAX_LANE_BYTES = 72
# per thread × tile in the tiled matmul: the float32 registers a, b (TILE, nb, nt) and a product
# (its shared-memory loads are the same in every block and are counted once; measured 7.5 bytes)
MATMUL_LANE_BYTES = 16
# per thread × max(D, Bc) in the flash kernel: the registers s, P̃ (Bc, nb, Br) and acc (D, nb, Br)
# and the index arrays of the tile loads (measured up to 172 bytes)
FLASH_LANE_BYTES = 192
# per score in the float64 reference: S, exp(S − m) and P alive at once, 8 bytes each (measured 24.6)
REFERENCE_SCORE_BYTES = 28
FIXED_BYTES = 8 << 20  # fixed-size index grids, memoised shared-memory access costs
# The default limit: 4 GiB, or half the machine's memory if that is less. 4 GiB is N ≈ 11,000, a
# simulation of several minutes; nothing the lecture simulates comes near it (N = 256), and half of
# a small machine's memory leaves the rest of it usable while the simulation runs.
DEFAULT_CAP_BYTES = 4 << 30


def _chunk_threads(blocks: int, threads_per_block: int) -> int:
    """Threads that run together in one chunk of a launch (``Device.launch``'s chunking)."""
    nt = -(-threads_per_block // WARP) * WARP
    return min(blocks, max(1, MAX_THREADS_PER_CHUNK // nt)) * nt


def standard_memory_bytes(*, seq_q: int, seq_k: int, head_dim: int, tile: int = 16,
                          softmax_threads: int = 256) -> int:
    """Peak bytes of ``run_standard_forward`` on (seq_q, head_dim) queries and (seq_k, head_dim) keys,
    beyond its inputs: S and P (seq_q, seq_k) float32, both first-touch maps of the softmax launch, the
    widest chunk of lanes — the softmax's (a chunk of rows, all seq_k elements of each) or the matmul's
    (tile-deep unrolled loads) — and the Q, K, V, O copies on the device."""
    Nq, Nk, D = seq_q, seq_k, head_dim
    cdiv = lambda a, b: -(-a // b)  # noqa: E731
    softmax_lanes = _chunk_threads(Nq, softmax_threads) * cdiv(Nk, softmax_threads)
    matmul_lanes = _chunk_threads(cdiv(Nq, tile) * max(cdiv(Nk, tile), cdiv(D, tile)), tile * tile) * tile
    lanes = max(SOFTMAX_LANE_BYTES * softmax_lanes, MATMUL_LANE_BYTES * matmul_lanes)
    return FIXED_BYTES + (2 * Nq + 2 * Nk) * D * FLOAT32 + 2 * Nq * Nk * (FLOAT32 + TOUCH_MAP_BYTES) + lanes


def forward_memory_bytes(*, seq: int, head_dim: int, block: int, tile: int = 16, softmax_threads: int = 256) -> int:
    """Peak bytes that ``simulate_forward(seq=, head_dim=, block=, tile=)`` needs, causal or not (an
    upper estimate; the arguments are taken to be valid positive integers)."""
    N, D = seq, head_dim
    cdiv = lambda a, b: -(-a // b)  # noqa: E731
    # q, k, v on the host and the outputs O (standard, flash) and L, beside each phase's own share
    vectors = (3 + 2) * N * D * FLOAT32 + N * FLOAT32
    standard = standard_memory_bytes(seq_q=N, seq_k=N, head_dim=D, tile=tile, softmax_threads=softmax_threads)
    flash = FIXED_BYTES + 4 * N * D * FLOAT32 + FLASH_LANE_BYTES * _chunk_threads(cdiv(N, block), block) * max(D, block)
    reference = FIXED_BYTES + REFERENCE_SCORE_BYTES * N * N
    return vectors + max(standard, flash, reference)


def check_standard_memory(*, seq_q: int, seq_k: int, head_dim: int, tile: int, softmax_threads: int,
                          max_memory: int | None = None) -> int:
    """Return ``standard_memory_bytes``; raise ValueError, before anything is allocated, when it exceeds
    ``max_memory`` bytes (None: ``default_memory_limit()``)."""
    limit = default_memory_limit() if max_memory is None else max_memory
    need = standard_memory_bytes(seq_q=seq_q, seq_k=seq_k, head_dim=head_dim, tile=tile,
                                 softmax_threads=softmax_threads)
    if need > limit:
        raise ValueError(
            f"the standard forward of {seq_q} queries and {seq_k} keys needs ~{_gib(need)} of memory to simulate "
            f"(S and P are {seq_q}×{seq_k} float32), more than the {_gib(limit)} limit; use fewer rows or raise "
            f"max_memory"
        )
    return need


def physical_memory_bytes() -> int | None:
    """The machine's memory, or None where the OS does not say."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def default_memory_limit() -> int:
    """``DEFAULT_CAP_BYTES``, or half the machine's memory when that is less."""
    phys = physical_memory_bytes()
    return DEFAULT_CAP_BYTES if not phys or phys <= 0 else min(DEFAULT_CAP_BYTES, phys // 2)


def largest_seq(limit: int, **config) -> int:
    """The largest ``seq`` whose estimate fits in ``limit`` bytes (0 if none does)."""
    lo, hi = 0, 1
    while forward_memory_bytes(seq=hi, **config) <= limit:
        lo, hi = hi, 2 * hi
    while hi - lo > 1:  # estimate(lo) fits, estimate(hi) does not
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if forward_memory_bytes(seq=mid, **config) <= limit else (lo, mid)
    return lo


def check_forward_memory(*, seq: int, head_dim: int, block: int, tile: int = 16,
                         max_memory: int | None = None) -> int:
    """Return the estimate; raise ValueError, before anything is allocated, when it exceeds
    ``max_memory`` bytes (None: ``default_memory_limit()``)."""
    limit = default_memory_limit() if max_memory is None else max_memory
    config = dict(head_dim=head_dim, block=block, tile=tile)
    need = forward_memory_bytes(seq=seq, **config)
    if need > limit:
        fits = largest_seq(limit, **config)
        hint = f"use seq <= {fits}" if fits else "no seq fits with this head_dim and block"
        raise ValueError(
            f"seq={seq} needs ~{_gib(need)} of memory to simulate (S and P are {seq}×{seq} in the standard "
            f"forward and its float64 reference), more than the {_gib(limit)} limit; {hint} or raise max_memory"
        )
    return need


def _gib(n: int) -> str:
    """Bytes as GiB with one decimal, or MiB below a tenth of a GiB."""
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 // 10 else f"{n / 2**20:.1f} MiB"
