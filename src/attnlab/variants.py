"""What the attention variants mean, in one place: sliding windows, softcapping, ALiBi (beyond §2.3).

Every implementation (the oracle, the blockwise PyTorch path, the Triton kernels, the cost model)
reads the variants from here, so they have one meaning everywhere. The meaning is flash-attn's:

    score      s_ij = scale · q_i · k_j
    softcap    s_ij = softcap · tanh(s_ij / softcap)                      (Gemma 2, Grok)
    ALiBi      s_ij = s_ij − slope_h · |i + Nk − Nq − j|                  (MPT, BLOOM)
    window     key j is visible to query i iff
                   i + off − left <= j <= i + off + right,   off = Nk − Nq
               with −1 meaning "unbounded" on that side (Mistral, Gemma 2/3, gpt-oss)
    causal     the window's right edge is 0: causal=True is window (left, 0)

Positions are aligned bottom-right (``off = Nk − Nq``): the last query sits at the last key, as in
decoding with a KV cache. In a packed variable-length batch each sequence has its own ``off``.
Rows that see no key give out = 0 and lse = −inf, as for a causal mask.

``Mask`` is the visibility rule (window and causal folded together); ``score_mod`` applies softcap and
ALiBi to a tile of scaled scores. ``Mask.key_range`` and ``Mask.block_kind`` are what lets the
blockwise loops and the kernels skip whole K/V blocks outside the window (§6.2 generalised): with a
window of W keys a query block visits about ``(Br + W)/Bc`` key blocks instead of ``Nk/Bc``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["Mask", "score_mod", "alibi_bias"]


@dataclass(frozen=True)
class Mask:
    """Which keys each query sees: ``i + off − left <= j <= i + off + right`` (−1: unbounded side).

    ``Mask(-1, -1)`` is dense attention, ``Mask(-1, 0)`` causal, ``Mask(W - 1, 0)`` a causal sliding
    window of W keys (the query's own position included), as flash-attn's ``window_size=(W-1, 0)``.
    """

    left: int = -1
    right: int = -1

    @property
    def dense(self) -> bool:
        return self.left < 0 and self.right < 0

    @property
    def causal(self) -> bool:
        return self.right == 0

    def visible(self, i: torch.Tensor, j: torch.Tensor, off: int) -> torch.Tensor:
        """Boolean tensor (broadcast of i and j): True where key j is visible to query i."""
        d = j - i - off  # (broadcast of i and j); tensor arithmetic, not torch.broadcast_shapes (it imports sympy)
        ok = torch.ones_like(d, dtype=torch.bool)
        if self.right >= 0:
            ok &= d <= self.right
        if self.left >= 0:
            ok &= d >= -self.left
        return ok

    def grid(self, Nq: int, Nk: int, device=None, *, off: int | None = None) -> torch.Tensor:
        """The (Nq, Nk) visibility matrix of one sequence (``off`` defaults to Nk − Nq)."""
        i = torch.arange(Nq, device=device).unsqueeze(1)
        j = torch.arange(Nk, device=device).unsqueeze(0)
        return self.visible(i, j, Nk - Nq if off is None else off)

    def key_range(self, i0: int, i1: int, off: int, Nk: int) -> tuple[int, int]:
        """Keys ``[lo, hi)`` that some query of ``[i0, i1)`` may see (``lo >= hi``: none)."""
        lo, hi = 0, Nk
        if i1 <= i0:
            return 0, 0
        if self.right >= 0:
            hi = min(hi, i1 - 1 + off + self.right + 1)
        if self.left >= 0:
            lo = max(lo, i0 + off - self.left)
        return max(0, lo), max(0, hi)

    def block_kind(self, i0: int, i1: int, j0: int, j1: int, off: int) -> str:
        """'skip' (no query of [i0, i1) sees a key of [j0, j1)), 'mask' (some pairs hidden) or 'full'."""
        if i1 <= i0 or j1 <= j0:
            return "skip"
        if self.right >= 0 and j0 > i1 - 1 + off + self.right:
            return "skip"
        if self.left >= 0 and j1 - 1 < i0 + off - self.left:
            return "skip"
        if self.right >= 0 and j1 - 1 > i0 + off + self.right:
            return "mask"
        if self.left >= 0 and j0 < i1 - 1 + off - self.left:
            return "mask"
        return "full"


def alibi_bias(slopes: torch.Tensor, i: torch.Tensor, j: torch.Tensor, off: int) -> torch.Tensor:
    """ALiBi bias ``−slope · |i + off − j|``; ``slopes`` broadcasts against the (i, j) grid from the left,
    e.g. (B, H, 1, 1) against (Nq, Nk)."""
    dist = (i + off - j).abs().to(slopes.dtype)
    return -slopes * dist


def score_mod(s: torch.Tensor, *, softcap: float | None = None, slopes: torch.Tensor | None = None,
              i: torch.Tensor | None = None, j: torch.Tensor | None = None, off: int = 0) -> torch.Tensor:
    """Softcap, then ALiBi, applied to scaled scores ``s`` (not in place; masking is separate).

    ``slopes`` must already broadcast against ``s`` with the (i, j) grid as its last two dims, e.g.
    (B, H, 1, 1) for s (B, H, Nq, Nk); ``i`` / ``j`` are the query / key positions of s's rows / columns.
    """
    if softcap is not None:
        s = torch.tanh(s / softcap) * softcap
    if slopes is not None:
        s = s + alibi_bias(slopes.to(s.dtype), i, j, off)
    return s


def softcap_grad(s_capped: torch.Tensor, softcap: float) -> torch.Tensor:
    """d(softcap·tanh(x/softcap))/dx from the capped value y: ``1 − (y/softcap)²``."""
    t = s_capped / softcap
    return 1.0 - t * t
