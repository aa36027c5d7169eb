"""Input checks shared by every attention entry point: prefill (q, k, v) and decode (q and a KV cache).

Shapes follow PyTorch SDPA: ``q (B, H, Nq, D)``, ``k, v (B, Hkv, Nk, D)`` with ``H % Hkv == 0``
(GQA/MQA). Every failure raises ``ValueError`` / ``TypeError`` naming the argument and what it got;
nothing is broadcast or truncated silently.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


@dataclass(frozen=True)
class AttnDims:
    """The dimension names used everywhere in attnlab."""

    B: int
    H: int
    Hkv: int
    Nq: int
    Nk: int
    D: int
    Dv: int

    @property
    def group(self) -> int:
        """Query heads per K/V head (1 for MHA, H for MQA)."""
        return self.H // self.Hkv


def check_tensor(x, name: str, ndim: int | None = 4) -> torch.Tensor:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if ndim is not None and x.dim() != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {tuple(x.shape)}")
    if x.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{name} must be float16, bfloat16, float32 or float64, got {x.dtype}")
    return x


def check_same(tensors: dict[str, torch.Tensor]) -> None:
    """All named tensors share one dtype and one device."""
    items = list(tensors.items())
    n0, t0 = items[0]
    for n, t in items[1:]:
        if t.dtype != t0.dtype:
            raise TypeError(f"{n} has dtype {t.dtype} but {n0} has {t0.dtype}; cast them to one dtype")
        if t.device != t0.device:
            raise ValueError(f"{n} is on {t.device} but {n0} is on {t0.device}")


def check_qkv(q, k, v) -> AttnDims:
    """Check q (B, H, Nq, D), k (B, Hkv, Nk, D), v (B, Hkv, Nk, Dv); return the dims."""
    check_tensor(q, "q")
    check_tensor(k, "k")
    check_tensor(v, "v")
    check_same({"q": q, "k": k, "v": v})
    B, H, Nq, D = q.shape
    Bk, Hkv, Nk, Dk = k.shape
    if Bk != B:
        raise ValueError(f"k has batch {Bk} but q has batch {B} (q {tuple(q.shape)}, k {tuple(k.shape)})")
    if Dk != D:
        raise ValueError(f"k has head dim {Dk} but q has {D} (q {tuple(q.shape)}, k {tuple(k.shape)})")
    if tuple(v.shape[:3]) != (B, Hkv, Nk):
        raise ValueError(
            f"v must have shape (B, Hkv, Nk, Dv) = ({B}, {Hkv}, {Nk}, Dv) like k, got {tuple(v.shape)}"
        )
    if Hkv < 1 or H % Hkv != 0:
        raise ValueError(f"q has {H} heads, which is not a multiple of the {Hkv} heads of k and v")
    if D < 1:
        raise ValueError(f"head dim must be at least 1, got q {tuple(q.shape)}")
    return AttnDims(B, H, Hkv, Nq, Nk, D, v.shape[3])


def resolve_scale(scale, D: int) -> float:
    """Softmax scale: ``1/sqrt(D)`` unless given; must be a finite number."""
    if scale is None:
        return 1.0 / math.sqrt(D)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not math.isfinite(scale):
        raise ValueError(f"scale must be a finite number or None, got {scale!r}")
    return float(scale)


def check_positive_int(value, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


def check_causal(causal) -> bool:
    """The one rule for ``causal`` everywhere: True or False, nothing else (not 1, not "yes")."""
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be True or False, got {causal!r}")
    return causal


def causal_offset(Nq: int, Nk: int) -> int:
    """Bottom-right causal alignment: query i sees keys j <= i + (Nk - Nq)."""
    return Nk - Nq


# -- §8.4 decode calls: a KV cache, contiguous or paged ------------------------------------------------


@dataclass(frozen=True)
class DecodeDims:
    """Dimensions of one decode call; ``page_size`` is None for a contiguous cache."""

    B: int
    H: int
    Hkv: int
    Nq: int
    D: int
    capacity: int  # the most keys any sequence can hold: Lmax, or max_pages * page_size
    page_size: int | None
    num_pages: int | None
    Dv: int

    @property
    def group(self) -> int:
        return self.H // self.Hkv


def check_decode_inputs(q, k_cache, v_cache, cache_seqlens=None, block_table=None,
                        *, check_values: bool = True) -> DecodeDims:
    """Check the arguments of a decode call; return its dimensions.

    q: (B, H, Nq, D). Contiguous cache: k_cache (B, Hkv, Lmax, D), v_cache (B, Hkv, Lmax, Dv).
    Paged cache: k_cache (num_pages, page_size, Hkv, D), v_cache (..., Dv) with block_table (B, max_pages) int32/int64.
    cache_seqlens: (B,) int32/int64 lengths (None: every sequence is full). With ``check_values``
    the lengths and the page ids in use are checked too (this reads them on the host, a device
    synchronisation on a GPU).
    """
    check_tensor(q, "q")
    check_tensor(k_cache, "k_cache")
    check_tensor(v_cache, "v_cache")
    for name, t in (("k_cache", k_cache), ("v_cache", v_cache)):
        if t.dtype != q.dtype:
            raise TypeError(f"{name} has dtype {t.dtype} but q has {q.dtype}; cast them to one dtype")
        if t.device != q.device:
            raise ValueError(f"{name} is on {t.device} but q is on {q.device}")
    if k_cache.shape[:3] != v_cache.shape[:3]:
        raise ValueError(f"v_cache must have shape {tuple(k_cache.shape[:3])} + (Dv,) like k_cache "
                         f"{tuple(k_cache.shape)}, got {tuple(v_cache.shape)}")
    B, H, Nq, D = q.shape
    if Nq < 1 or D < 1 or B < 1:
        raise ValueError(f"q must have shape (B, H, Nq, D) with B, Nq, D >= 1, got {tuple(q.shape)}")
    if block_table is None:
        Bk, Hkv, capacity, Dk = k_cache.shape
        if Bk != B:
            raise ValueError(f"k_cache has batch {Bk} but q has batch {B} "
                             f"(q {tuple(q.shape)}, k_cache (B, Hkv, Lmax, D) {tuple(k_cache.shape)})")
        page_size = num_pages = None
    else:
        if not isinstance(block_table, torch.Tensor):
            raise TypeError(f"block_table must be a torch.Tensor, got {type(block_table).__name__}")
        if block_table.dtype not in (torch.int32, torch.int64):
            raise TypeError(f"block_table must have dtype int32 or int64, got {block_table.dtype}")
        if block_table.dim() != 2 or block_table.shape[0] != B:
            raise ValueError(f"block_table must have shape (B, max_pages) with B = {B}, got {tuple(block_table.shape)}")
        if block_table.device != q.device:
            raise ValueError(f"block_table is on {block_table.device} but q is on {q.device}")
        num_pages, page_size, Hkv, Dk = k_cache.shape
        capacity = block_table.shape[1] * page_size
    if Dk != D:
        raise ValueError(f"k_cache has head dim {Dk} but q has {D} (q {tuple(q.shape)}, k_cache {tuple(k_cache.shape)})")
    if Hkv < 1 or H % Hkv:
        raise ValueError(f"q has {H} heads, which is not a multiple of the {Hkv} heads of the cache")
    if cache_seqlens is not None:
        if not isinstance(cache_seqlens, torch.Tensor):
            raise TypeError(f"cache_seqlens must be a torch.Tensor, got {type(cache_seqlens).__name__}")
        if cache_seqlens.dtype not in (torch.int32, torch.int64):
            raise TypeError(f"cache_seqlens must have dtype int32 or int64, got {cache_seqlens.dtype}")
        if tuple(cache_seqlens.shape) != (B,):
            raise ValueError(f"cache_seqlens must have shape (B,) = ({B},), got {tuple(cache_seqlens.shape)}")
        if cache_seqlens.device != q.device:
            raise ValueError(f"cache_seqlens is on {cache_seqlens.device} but q is on {q.device}")
    if check_values:
        lens = None
        if cache_seqlens is not None:
            lens = cache_seqlens.tolist()
            bad = [n for n in lens if not 0 <= n <= capacity]
            if bad:
                raise ValueError(f"cache_seqlens must lie in [0, {capacity}] (the cache's capacity), got {bad[:4]}")
        if block_table is not None:
            used = block_table if lens is None else torch.cat(
                [block_table[b, : math.ceil(n / page_size)] for b, n in enumerate(lens)])
            if used.numel() and (int(used.min()) < 0 or int(used.max()) >= num_pages):
                raise ValueError(f"block_table holds page ids outside [0, {num_pages}) in the pages in use "
                                 f"(min {int(used.min())}, max {int(used.max())})")
    return DecodeDims(B, H, Hkv, Nq, D, capacity, page_size, num_pages, v_cache.shape[-1])


def seqlens_tensor(cache_seqlens, q):
    """``cache_seqlens`` as given (a tensor or None), or a list/tuple of ints made an int64 tensor on q's device."""
    if cache_seqlens is None or isinstance(cache_seqlens, torch.Tensor):
        return cache_seqlens
    if not (isinstance(cache_seqlens, (list, tuple))
            and all(isinstance(n, int) and not isinstance(n, bool) for n in cache_seqlens)):
        raise TypeError(f"cache_seqlens must be an int tensor or a list of ints, got {cache_seqlens!r}")
    return torch.tensor(list(cache_seqlens), dtype=torch.int64, device=q.device if isinstance(q, torch.Tensor) else None)
