"""The blockwise algorithms' machinery: block sizes, the loop over programs (§5.1, §6.1).

A *program* is what one GPU thread block does: one (batch, K/V head) and one Q block (forward) or
K/V block (backward). On a CPU the blockwise loops run several (batch, K/V head) programs side by side
per step (``programs_per_step``), and with several intra-op threads deal them out to worker threads
(``run_programs``). ``cpu_block_sizes`` picks the block sizes that make this fast; the lecture's
64×64 blocks are what the demos and the I/O counts pass explicitly. Which block pairs a program
visits (§6.2, windows) is ``attnlab.blockwise.tiles``.
"""

from __future__ import annotations

import torch

from .._checks import check_positive_int

NEG_INF = float("-inf")


def acc_dtype(dtype: torch.dtype) -> torch.dtype:
    """Accumulation dtype: float64 for float64, float32 for everything else."""
    return torch.float64 if dtype == torch.float64 else torch.float32


def cpu_block_sizes(dims, *, budget: int = 1 << 20) -> tuple[int, int]:
    """Block sizes that make the blockwise loop efficient on a CPU: every blockwise function uses them
    when ``block_q`` / ``block_k`` are not given (the lecture's 64×64 blocks must be asked for).

    Each (Q block, K/V block) step costs ~15 tensor operations of fixed overhead, so blocks should be
    large; but every elementwise pass over the score tile ``S_ij`` of all ``B·H`` heads
    (``B·H·Br·Bc`` elements) should stay in cache. ``Bc = min(512, Nk)`` keys, and ``Br`` the rest of a
    ``budget`` of 2^20 elements (4 MiB of float32), a multiple of 16 between 16 and 256. At B·H = 8 this
    is Br = 256, Bc = 512, the fastest pair measured in benchmarks/cpu_forward.py; the tile, and so the
    extra memory, does not grow with N.
    """
    heads = max(1, dims.B * dims.H)
    bc = max(1, min(512, dims.Nk))
    br = budget // (heads * bc)
    br = max(16, min(256, br - br % 16))
    return min(br, max(1, dims.Nq)), bc


def resolve_blocks(block_q, block_k, dims) -> tuple[int, int]:
    if block_q is None or block_k is None:
        auto_q, auto_k = cpu_block_sizes(dims)
        block_q = auto_q if block_q is None else block_q
        block_k = auto_k if block_k is None else block_k
    return check_positive_int(block_q, "block_q"), check_positive_int(block_k, "block_k")


def add_matmul_(c: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """c += a @ b in place (one accumulating gemm for plain matrices)."""
    return c.addmm_(a, b) if c.dim() == 2 else c.add_(torch.matmul(a, b))


def q_block(q5: torch.Tensor, i0: int, i1: int, dtype: torch.dtype) -> torch.Tensor:
    """Rows i0:i1 of all G heads of a group: (..., G, Nq, D) -> (..., G·Br, D)."""
    *lead, G, _, D = q5.shape
    return q5[..., i0:i1, :].reshape(*lead, G * (i1 - i0), D).to(dtype)


def programs_per_step(dims, Br: int, Bc: int, device: torch.device) -> int:
    """How many (batch, K/V head) programs one step of the CPU loop processes together.

    With one CPU thread: as many as keep the score tile ``S_ij`` within 2^17 elements (512 KiB of float32,
    an L2 cache), so every elementwise pass over it stays in cache — one head at a time at Br = 256,
    Bc = 512 (measured 1.2-1.3x faster than all heads at once, benchmarks/cpu_forward.py). With several
    threads, and on other devices: all of them, so each operation has enough work to split across threads.
    """
    programs = dims.B * dims.Hkv
    if device.type != "cpu" or (torch.get_num_threads() > 1 and programs == 1):
        return max(1, programs)
    return max(1, min(programs, (1 << 17) // (dims.group * Br * Bc)))


def run_programs(step, chunks: list, device: torch.device, stats) -> None:
    """Run ``step(chunk)`` for every chunk of (batch, K/V head) programs.

    The programs are independent (one thread block each on a GPU). On a CPU with several intra-op
    threads they are dealt out to that many worker threads, each running its share on one intra-op
    thread (``torch.set_num_threads`` is per thread): every operation then runs whole on one core,
    instead of every one of the ~15 small operations of a block step being split across cores and
    waiting for the slowest. Counting (``stats``) runs in order on the calling thread.
    """
    workers = min(torch.get_num_threads(), len(chunks)) if device.type == "cpu" and stats is None else 1
    if workers <= 1:
        for chunk in chunks:
            step(chunk)
        return
    from concurrent.futures import ThreadPoolExecutor

    grad = torch.is_grad_enabled()  # grad mode is per thread: the workers take the caller's

    def work(share):
        torch.set_num_threads(1)  # this worker thread only
        with torch.set_grad_enabled(grad):
            for chunk in share:
                step(chunk)

    with ThreadPoolExecutor(workers) as pool:
        for f in [pool.submit(work, chunks[w::workers]) for w in range(workers)]:
            f.result()  # re-raise a worker's error here


def program_chunks(B: int, Hkv: int, per_step: int):
    """Indices (into the batch and K/V-head dims) that cover B × Hkv, ``per_step`` programs at a time.

    A single program is indexed by integers, so its tensors lose those two dims and the loop runs on
    plain matrices (2-D gemms, the fastest path on a CPU); larger steps are slices. Views only."""
    if per_step == 1:
        for b0 in range(B):
            for h0 in range(Hkv):
                yield b0, h0
    elif per_step >= Hkv:
        nb = per_step // Hkv
        for b0 in range(0, B, nb):
            yield slice(b0, min(b0 + nb, B)), slice(0, Hkv)
    else:
        for b0 in range(B):
            for h0 in range(0, Hkv, per_step):
                yield slice(b0, b0 + 1), slice(h0, min(h0 + per_step, Hkv))
