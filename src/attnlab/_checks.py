"""Input checks shared by every attention entry point (DESIGN.md: "Bad input").

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


def causal_offset(Nq: int, Nk: int) -> int:
    """Bottom-right causal alignment: query i sees keys j <= i + (Nk - Nq)."""
    return Nk - Nq
