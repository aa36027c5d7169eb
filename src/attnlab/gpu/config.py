"""Launch configurations of the Triton prefill kernels (lecture §6.1: block sizes are a tuned trade-off).

What the kernels cover (dtypes, head dims), the block-size tables — one deterministic choice per
(head dim, masked or not, length class), the winners of measured H200 sweeps, so that tests and benchmarks
run the same compiled kernel — ``tma_ok``, and the block tables of packed variable-length batches
(one program per real block, heaviest first). Nothing here imports triton.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

KERNEL_DTYPES = (torch.float16, torch.bfloat16)
FWD_HEAD_DIMS = (32, 64, 96, 128, 256)  # 96 runs padded to 128 with masks
BWD_HEAD_DIMS = (32, 64, 96, 128)


def next_pow2(x: int) -> int:
    """The smallest power of two >= x (1 for x <= 1)."""
    return 1 << max(0, (int(x) - 1).bit_length())


@dataclass(frozen=True)
class FwdConfig:
    """Forward launch: Br = block_m query rows per program, Bc = block_n keys per step."""

    block_m: int
    block_n: int
    num_warps: int
    num_stages: int
    tma: bool = False  # load Q/K/V and store O through Hopper tensor-memory descriptors
    warp_spec: bool = False  # warp-specialise the unmasked key loop (needs tma; Hopper and newer)
    maxnreg: int | None = None  # cap registers per thread (e.g. 128: two 8-warp programs per SM)


@dataclass(frozen=True)
class BwdConfig:
    """Backward launch: dK/dV kernel (key block block_n1 outer, query block block_m1 inner) and
    dQ kernel (query block block_m2 outer, key block block_n2 inner), or dQ by atomics."""

    block_m1: int
    block_n1: int
    warps1: int
    stages1: int
    block_m2: int
    block_n2: int
    warps2: int
    stages2: int
    dq_atomic: bool = False  # accumulate dQ with float32 atomics inside the dK/dV kernel


def _head_bucket(D: int) -> int:
    return 64 if D <= 64 else (128 if D <= 128 else 256)


SHORT_KEYS = 2048  # calls with fewer keys than this use the "short" table entries


def length_class(n_keys: int | None) -> str:
    """The table's length class of a call with ``n_keys`` keys: "short" below SHORT_KEYS, else "long"."""
    return "short" if n_keys is not None and n_keys < SHORT_KEYS else "long"


# Deterministic choices (no autotuning at run time), keyed by (head-dim bucket, causal, length class):
# the winners of the H200 block-size sweeps of runs 2 and 3 (2026-11-29, triton 3.6; highest TFLOP/s
# summed over N = 4K and 16K for "long", at N = 1K for "short"; benchmarks/data/prefill-best-h200-run2.json
# overridden by -run3.json, benchmarks/NOTES-prefill.md). ``tma`` (and ``warp_spec`` with it) falls back to pointer loads
# where descriptors can't be used.
_F = FwdConfig
_B = BwdConfig
_FWD_TABLE = {
    (64, False, "long"): _F(128, 64, 8, 3), (64, True, "long"): _F(128, 64, 8, 3),
    (64, False, "short"): _F(128, 64, 8, 3), (64, True, "short"): _F(64, 64, 4, 3),
    # run 3's forward-only sweep at D = 128 replaced these two (prefill-best-h200-run3.json)
    (128, False, "long"): _F(128, 64, 8, 2, tma=True, warp_spec=True, maxnreg=128),
    (128, True, "long"): _F(128, 128, 8, 3, tma=True),
    (128, False, "short"): _F(128, 128, 8, 3, tma=True), (128, True, "short"): _F(64, 64, 4, 3),
    # not in the sweep: chosen to fit (D = 256 needs small tiles), checked by the GPU tests
    (256, False, "long"): _F(64, 32, 4, 2), (256, True, "long"): _F(64, 32, 4, 2),
    (256, False, "short"): _F(64, 32, 4, 2), (256, True, "short"): _F(64, 32, 4, 2),
}
_BWD_64_SMALL = _B(64, 64, 4, 3, 64, 64, 4, 3)
_BWD_RUN1 = _B(64, 128, 8, 3, 128, 64, 8, 3)  # run 1's winner for every shape
_BWD_TABLE = {
    (64, False, "long"): _BWD_64_SMALL, (64, True, "long"): _BWD_64_SMALL,
    (64, False, "short"): _BWD_RUN1, (64, True, "short"): _BWD_64_SMALL,
    (128, False, "long"): _B(64, 128, 8, 4, 128, 64, 8, 4), (128, True, "long"): _B(64, 128, 8, 4, 128, 64, 8, 4),
    (128, False, "short"): _BWD_RUN1, (128, True, "short"): _BWD_RUN1,
}
# the interpreter runs one program at a time in numpy: small blocks keep the CPU tests quick and
# still give several blocks (and ragged ones) at small N
_INTERP_FWD = FwdConfig(block_m=16, block_n=16, num_warps=1, num_stages=1)
_INTERP_BWD = BwdConfig(block_m1=16, block_n1=16, warps1=1, stages1=1, block_m2=16, block_n2=16, warps2=1, stages2=1)


def tma_ok(*tensors: torch.Tensor) -> bool:
    """Tensor descriptors need sm90+ (or the interpreter), 16-byte aligned bases and strides."""
    try:
        from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: F401
    except ImportError:
        return False
    for t in tensors:
        if t.is_cuda and torch.cuda.get_device_capability(t.device)[0] < 9:
            return False
        if t.stride(-1) != 1 or t.data_ptr() % 16:
            return False
        if any((s * t.element_size()) % 16 or (s == 0 and n > 1) for s, n in zip(t.stride()[:-1], t.shape)):
            return False  # unaligned, or a broadcast (stride-0) dimension
    return True


def default_fwd_config(D: int, causal: bool, device: torch.device, n_keys: int | None = None) -> FwdConfig:
    """The table's forward launch for head dim D with ``n_keys`` keys (None: a long sequence)."""
    if device.type == "cpu":
        return _INTERP_FWD
    return _FWD_TABLE[(_head_bucket(D), bool(causal), length_class(n_keys))]


def variant_fwd_config(cfg: FwdConfig, D: int, *, packed: bool, score_mod: bool) -> FwdConfig:
    """A table entry adapted to a call with variants (chosen from sm_90 compiler reports, not yet timed):
    a packed batch cannot use tensor descriptors (a tile would cross into the next sequence), and
    pointer loads of 128×128 tiles at D = 128 spill, so it takes Bc = 64; softcap/ALiBi scores need
    more registers than a ``maxnreg`` cap of 128 leaves (ALiBi at D = 128 spilled under it)."""
    if packed:
        cfg = dataclasses.replace(cfg, tma=False, warp_spec=False, maxnreg=None,
                                  block_n=min(cfg.block_n, 64) if D > 64 else cfg.block_n)
    if score_mod and cfg.maxnreg:
        cfg = dataclasses.replace(cfg, maxnreg=None)
    return cfg


def default_bwd_config(D: int, causal: bool, device: torch.device, n_keys: int | None = None) -> BwdConfig:
    """The table's backward launch for head dim D with ``n_keys`` keys (None: a long sequence)."""
    if device.type == "cpu":
        return _INTERP_BWD
    return _BWD_TABLE[(_head_bucket(D), bool(causal), length_class(n_keys))]


def set_config(D: int, causal: bool, *, fwd: FwdConfig | None = None, bwd: BwdConfig | None = None,
               length: str | None = None) -> None:
    """Replace the table entries that head dim ``D`` uses, for one length class ("short", "long")
    or both (a tuning hook for benchmarks/prefill.py)."""
    if length not in (None, "short", "long"):
        raise ValueError(f"length must be 'short', 'long' or None, got {length!r}")
    for n in (length,) if length else ("short", "long"):
        key = (_head_bucket(D), bool(causal), n)
        if fwd is not None:
            _FWD_TABLE[key] = fwd
        if bwd is not None:
            _BWD_TABLE[key] = bwd


# -- packed variable-length batches: one program per real block ------------------------------------


def max_seqlen(cu) -> int:
    """The longest sequence of host cumulative lengths ``cu`` (B + 1 ints)."""
    return max(b - a for a, b in zip(cu, cu[1:]))


def varlen_block_table(cu_q, cu_k, block: int, mask, *, rows: str) -> torch.Tensor:
    """(n, 2) int32 on the host: (sequence, first row) of every block of ``block`` query rows
    (``rows="q"``) or key rows (``rows="k"``) of a packed batch, with cumulative lengths ``cu_q``,
    ``cu_k`` (host sequences of B + 1 ints). Empty sequences have no block. Heaviest first (longest
    processing time first fills the grid's tail): ordered by the keys a query block may see, or the
    queries that may see a key block, under ``mask`` (a ``variants.Mask``; off = Nk − Nq per sequence)."""
    if rows not in ("q", "k"):
        raise ValueError(f"rows must be 'q' or 'k', got {rows!r}")
    cq = torch.tensor(cu_q, dtype=torch.int64)
    ck = torch.tensor(cu_k, dtype=torch.int64)
    nq, nk = cq[1:] - cq[:-1], ck[1:] - ck[:-1]  # (B,)
    n_rows = nq if rows == "q" else nk
    n_blocks = (n_rows + block - 1) // block  # (B,)
    seq = torch.repeat_interleave(torch.arange(len(n_rows)), n_blocks)  # (n,)
    first_block = torch.repeat_interleave(torch.cumsum(n_blocks, 0) - n_blocks, n_blocks)
    start = (torch.arange(seq.numel()) - first_block) * block  # (n,) first row of each block
    nq, nk = nq[seq], nk[seq]
    off = nk - nq
    if rows == "q":  # keys [lo, hi) some row of [start, end) may see (Mask.key_range)
        end = torch.minimum(start + block, nq)
        lo, hi = torch.zeros_like(start), nk.clone()
        if mask.right >= 0:
            hi = torch.minimum(hi, end + off + mask.right)
        if mask.left >= 0:
            lo = torch.clamp(start + off - mask.left, min=0)
    else:  # queries [lo, hi) that may see some key of [start, end)
        end = torch.minimum(start + block, nk)
        lo, hi = torch.zeros_like(start), nq.clone()
        if mask.right >= 0:
            lo = torch.clamp(start - off - mask.right, min=0)
        if mask.left >= 0:
            hi = torch.minimum(hi, end - off + mask.left)
    work = torch.clamp(hi - lo, min=0)
    order = torch.sort(work, descending=True, stable=True).indices
    return torch.stack([seq, start], 1)[order].to(torch.int32)  # (n, 2)


def varlen_meta(cu_seqlens, block: int, mask, *, rows: str, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """cu_q (B + 1,), cu_k (B + 1,) and the block table (n, 2) of ``varlen_block_table``, int32 on
    ``device``, moved there in one copy (three views of one buffer). ``cu_seqlens``: the host
    cumulative lengths (cu_q, cu_k)."""
    cu_q, cu_k = (tuple(int(x) for x in cu) for cu in cu_seqlens)
    table = varlen_block_table(cu_q, cu_k, block, mask, rows=rows)
    n_cu = len(cu_q)
    buf = torch.tensor(cu_q + cu_k, dtype=torch.int32)
    buf = torch.cat([buf, table.flatten()]).to(device)  # (2·(B + 1) + 2n,)
    return buf[:n_cu], buf[n_cu:2 * n_cu], buf[2 * n_cu:].view(-1, 2)
