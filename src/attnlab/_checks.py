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


def check_backward_inputs(q, dims: AttnDims, out, lse, dout, dlse=None) -> None:
    """The forward's out (B, H, Nq, Dv) and lse (B, H, Nq), and dout (and dlse, optional) of a backward call."""
    shape_o = (dims.B, dims.H, dims.Nq, dims.Dv)
    for name, t in (("out", out), ("dout", dout)):
        check_tensor(t, name)
        if tuple(t.shape) != shape_o:
            raise ValueError(f"{name} must have shape (B, H, Nq, Dv) = {shape_o}, got {tuple(t.shape)}")
    check_same({"q": q, "out": out, "dout": dout})
    for name, t in (("lse", lse), ("dlse", dlse)):
        if t is None and name == "dlse":
            continue
        check_tensor(t, name, ndim=3)
        if tuple(t.shape) != shape_o[:3]:
            raise ValueError(f"{name} must have shape (B, H, Nq) = {shape_o[:3]}, got {tuple(t.shape)}")
        if t.device != q.device:
            raise ValueError(f"{name} is on {t.device} but q is on {q.device}")


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


# -- variants: window, softcap, ALiBi (attnlab.variants) ---------------------------------------------


def check_window(window, causal: bool):
    """``window=(left, right)`` ints >= -1 (-1: unbounded) folded with ``causal`` into one ``Mask``.

    causal=True is the window's right edge at 0, as in flash-attn; a right edge other than -1 or 0
    together with causal=True is refused rather than silently overridden.
    """
    from .variants import Mask

    causal = check_causal(causal)
    if window is None:
        window = (-1, -1)
    if (not isinstance(window, (tuple, list)) or len(window) != 2
            or not all(isinstance(w, int) and not isinstance(w, bool) for w in window)):
        raise TypeError(f"window must be a pair of ints (left, right), -1 meaning unbounded, got {window!r}")
    left, right = window
    if left < -1 or right < -1:
        raise ValueError(f"window sides must be >= -1 (-1: unbounded), got {tuple(window)!r}")
    if causal:
        if right not in (-1, 0):
            raise ValueError(f"causal=True fixes the window's right side at 0, got window={tuple(window)!r}; "
                             "pass causal=False to see keys after the query")
        right = 0
    return Mask(left, right)


def check_softcap(softcap) -> float | None:
    """``softcap``: None (off) or a finite number > 0."""
    if softcap is None:
        return None
    if isinstance(softcap, bool) or not isinstance(softcap, (int, float)) or not math.isfinite(softcap) \
            or softcap <= 0:
        raise ValueError(f"softcap must be a finite number > 0 or None, got {softcap!r}")
    return float(softcap)


def check_alibi(slopes, B: int, H: int, device) -> torch.Tensor | None:
    """ALiBi slopes (H,) or (B, H), float32 as in flash-attn, on the inputs' device; returns (B, H) or None."""
    if slopes is None:
        return None
    if not isinstance(slopes, torch.Tensor):
        raise TypeError(f"alibi_slopes must be a torch.Tensor of shape (H,) or (B, H), got {type(slopes).__name__}")
    if slopes.dtype not in (torch.float32, torch.float64):
        raise TypeError(f"alibi_slopes must be float32 (or float64), got {slopes.dtype}")
    if tuple(slopes.shape) not in ((H,), (B, H)):
        raise ValueError(f"alibi_slopes must have shape (H,) = ({H},) or (B, H) = ({B}, {H}), "
                         f"got {tuple(slopes.shape)}")
    if slopes.device != torch.device(device):
        raise ValueError(f"alibi_slopes is on {slopes.device} but q is on {device}")
    if slopes.device.type != "cuda" and not bool(torch.isfinite(slopes).all()):
        raise ValueError("alibi_slopes must be finite")
    return slopes.expand(B, H)


def check_variants(causal, window, softcap, alibi_slopes, B: int, H: int, device):
    """The variant arguments of an attention call, checked: (Mask, softcap, slopes (B, H) or None)."""
    return check_window(window, causal), check_softcap(softcap), check_alibi(alibi_slopes, B, H, device)


def check_deterministic(deterministic) -> bool:
    if not isinstance(deterministic, bool):
        raise TypeError(f"deterministic must be True or False, got {deterministic!r}")
    return deterministic


# -- packed variable-length batches (flash-attn's varlen layout) -----------------------------------------


@dataclass(frozen=True, eq=False)
class VarlenDims:
    """A packed batch: sequence b owns rows ``cu_q[b]:cu_q[b+1]`` of q and ``cu_k[b]:cu_k[b+1]`` of k, v.

    ``cu_seqlens_q`` / ``cu_seqlens_k`` are the caller's tensors; ``cu_q`` / ``cu_k`` their host copies,
    None when the values were not read (CUDA with both max_seqlen given: reading would synchronise).
    ``max_q`` / ``max_k``: the longest sequences when the values were read, else the caller's bounds."""

    B: int
    H: int
    Hkv: int
    D: int
    Dv: int
    total_q: int
    total_k: int
    cu_seqlens_q: torch.Tensor
    cu_seqlens_k: torch.Tensor
    max_q: int
    max_k: int
    cu_q: tuple[int, ...] | None = None
    cu_k: tuple[int, ...] | None = None

    @property
    def group(self) -> int:
        return self.H // self.Hkv

    def seq(self, b: int) -> tuple[int, int, int, int]:
        """(q start, q length, k start, k length) of sequence b (needs the host copies)."""
        if self.cu_q is None or self.cu_k is None:
            raise RuntimeError("the cumulative lengths were not read on the host; "
                               "check the call with check_varlen(..., check_values=True)")
        return self.cu_q[b], self.cu_q[b + 1] - self.cu_q[b], self.cu_k[b], self.cu_k[b + 1] - self.cu_k[b]


def _check_cu(cu, name: str, device) -> int:
    """Type, dtype, shape and device of one cumulative-lengths tensor (not its values); returns B."""
    if not isinstance(cu, torch.Tensor):
        raise TypeError(f"{name} must be an int32 torch.Tensor of shape (B + 1,), got {type(cu).__name__}")
    if cu.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"{name} must have dtype int32 (or int64), got {cu.dtype}")
    if cu.dim() != 1 or cu.numel() < 2:
        raise ValueError(f"{name} must have shape (B + 1,) with B >= 1, got {tuple(cu.shape)}")
    if cu.device != torch.device(device):
        raise ValueError(f"{name} is on {cu.device} but q is on {device}")
    return cu.numel() - 1


def _cu_values(cu, name: str, total: int) -> tuple[int, ...]:
    """The values of one cumulative-lengths tensor, read on the host (a device sync on a GPU) and checked."""
    vals = tuple(int(x) for x in cu.tolist())
    if vals[0] != 0:
        raise ValueError(f"{name} must start at 0, got {vals[0]}")
    if any(b < a for a, b in zip(vals, vals[1:])):
        raise ValueError(f"{name} must be non-decreasing (cumulative lengths), got {list(vals[:8])}"
                         + ("..." if len(vals) > 8 else ""))
    if vals[-1] != total:
        raise ValueError(f"{name}[-1] = {vals[-1]} must equal the number of packed rows, {total}")
    return vals


def check_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q=None, max_seqlen_k=None, *,
                 check_values: bool | None = None) -> VarlenDims:
    """Check a packed batch: q (total_q, H, D), k (total_k, Hkv, D), v (total_k, Hkv, Dv), cumulative
    lengths (B + 1,) int32 from 0 to the totals, ``max_seqlen_*`` None or at least the longest sequence.

    ``check_values``: also read the lengths on the host and check them (a device synchronisation on a
    GPU). None (the default) reads them unless q is on CUDA and both ``max_seqlen_*`` are given: then
    only their dtype, shape and device are checked, and ``max_seqlen_*`` only against what the shapes
    say (B sequences of at most max_seqlen rows must hold the packed rows); the kernels clamp the values.
    """
    check_tensor(q, "q", 3)
    check_tensor(k, "k", 3)
    check_tensor(v, "v", 3)
    check_same({"q": q, "k": k, "v": v})
    total_q, H, D = q.shape
    total_k, Hkv, Dk = k.shape
    if Dk != D:
        raise ValueError(f"k has head dim {Dk} but q has {D} (q {tuple(q.shape)}, k {tuple(k.shape)})")
    if tuple(v.shape[:2]) != (total_k, Hkv):
        raise ValueError(f"v must have shape (total_k, Hkv, Dv) = ({total_k}, {Hkv}, Dv) like k, got {tuple(v.shape)}")
    if Hkv < 1 or H % Hkv:
        raise ValueError(f"q has {H} heads, which is not a multiple of the {Hkv} heads of k and v")
    if D < 1:
        raise ValueError(f"head dim must be at least 1, got q {tuple(q.shape)}")
    B = _check_cu(cu_seqlens_q, "cu_seqlens_q", q.device)
    if _check_cu(cu_seqlens_k, "cu_seqlens_k", q.device) != B:
        raise ValueError(f"cu_seqlens_q and cu_seqlens_k must describe the same number of sequences, "
                         f"got {B} and {cu_seqlens_k.numel() - 1}")
    for given, total, name in ((max_seqlen_q, total_q, "max_seqlen_q"), (max_seqlen_k, total_k, "max_seqlen_k")):
        if given is None:
            continue
        if isinstance(given, bool) or not isinstance(given, int) or given < 0:
            raise ValueError(f"{name} must be a non-negative int or None, got {given!r}")
        if given * B < total:
            raise ValueError(f"{name} = {given} is less than the longest sequence: {B} sequences of at most "
                             f"{given} rows cannot hold the {total} packed rows")
    if check_values is None:
        check_values = not (q.is_cuda and max_seqlen_q is not None and max_seqlen_k is not None)
    if not check_values:
        return VarlenDims(B, H, Hkv, D, v.shape[2], total_q, total_k, cu_seqlens_q, cu_seqlens_k,
                          max_seqlen_q, max_seqlen_k)
    cu_q = _cu_values(cu_seqlens_q, "cu_seqlens_q", total_q)
    cu_k = _cu_values(cu_seqlens_k, "cu_seqlens_k", total_k)
    max_q = max(b - a for a, b in zip(cu_q, cu_q[1:]))
    max_k = max(b - a for a, b in zip(cu_k, cu_k[1:]))
    for given, actual, name in ((max_seqlen_q, max_q, "max_seqlen_q"), (max_seqlen_k, max_k, "max_seqlen_k")):
        if given is not None and given < actual:
            raise ValueError(f"{name} = {given} is less than the longest sequence, {actual}")
    return VarlenDims(B, H, Hkv, D, v.shape[2], total_q, total_k, cu_seqlens_q, cu_seqlens_k, max_q, max_k,
                      cu_q, cu_k)
