"""One score tile of the blockwise loops: which blocks to visit, the variants, the mask (§6.2 generalised).

The causal block skipping of §6.2 generalises to any ``attnlab.variants.Mask`` (a sliding window, a
causal mask, both): a Q block visits only the K/V blocks of ``Mask.key_range`` (``key_blocks``), a
K/V block only the Q blocks of ``query_blocks``, so 'skip' blocks are never loaded and a window of W
keys costs about ``(N/Br)·((Br + W)/Bc + 1)`` block pairs instead of ``(N/Br)·(N/Bc)``: N·W, not N². Within the range,
``Mask.block_kind`` says whether a tile needs the element-wise mask ('mask') or not ('full').

A tile holds the scores of ``G`` query heads × ``Br`` positions (rows) against ``Bc`` keys (columns):
shape ``(..., G·Br, Bc)``, the leading dims indexing programs (batch, K/V head).
"""

from __future__ import annotations

import torch

from ..variants import Mask, score_mod, softcap_grad
from .programs import NEG_INF


def key_blocks(mask: Mask, i0: int, i1: int, off: int, Nk: int, Bc: int) -> range:
    """Start positions of the K/V blocks (on the grid 0, Bc, 2·Bc, ...) that queries [i0, i1) may see."""
    lo, hi = mask.key_range(i0, i1, off, Nk)
    return range(lo - lo % Bc, hi, Bc) if lo < hi else range(0)


def query_blocks(mask: Mask, j0: int, j1: int, off: int, Nq: int, Br: int) -> range:
    """Start positions of the Q blocks (on the grid 0, Br, ...) with a query that may see a key of [j0, j1).

    The inverse of ``Mask.key_range``: query i sees key j iff ``j − off − right <= i <= j − off + left``.
    """
    if j1 <= j0:
        return range(0)
    lo, hi = 0, Nq
    if mask.right >= 0:
        lo = max(lo, j0 - off - mask.right)
    if mask.left >= 0:
        hi = min(hi, j1 - 1 - off + mask.left + 1)
    return range(lo - lo % Br, hi, Br) if lo < hi else range(0)


def _positions(s: torch.Tensor, i0: int, i1: int, j0: int, j1: int):
    i = torch.arange(i0, i1, device=s.device).unsqueeze(1)  # (Br, 1)
    j = torch.arange(j0, j1, device=s.device).unsqueeze(0)  # (1, Bc)
    return i, j


class TileMasks:
    """The hidden pairs of the masked tiles of one call, each pattern built once.

    Whether key j is visible to query i depends only on ``j − i − off`` (``attnlab.variants.Mask``), so
    every tile with the same ``j0 − i0 − off`` and shape has the same pattern. Straddling tiles repeat
    across programs (batch, heads, sequences) and along the diagonal, so a call builds only a few
    (Br, Bc) boolean tiles, and masking a tile costs one ``masked_fill_``. Safe to share between the
    worker threads (an entry built twice is the same).
    """

    def __init__(self, mask: Mask):
        self.mask = mask
        self._hidden: dict[tuple[int, int, int], torch.Tensor] = {}

    def hidden(self, i0: int, i1: int, j0: int, j1: int, off: int, device) -> torch.Tensor:
        """(Br, Bc) boolean: True where the pair is hidden."""
        key = (j0 - i0 - off, i1 - i0, j1 - j0)
        h = self._hidden.get(key)
        if h is None or h.device != torch.device(device):
            i = torch.arange(i0, i1, device=device).unsqueeze(1)  # (Br, 1)
            j = torch.arange(j0, j1, device=device).unsqueeze(0)  # (1, Bc)
            h = self._hidden[key] = ~self.mask.visible(i, j, off)
        return h


def mask_tile_(s: torch.Tensor, masks: TileMasks, i0: int, i1: int, j0: int, j1: int, off: int, G: int) -> None:
    """Set the hidden scores of a (..., G·Br, Bc) tile to -inf, in place."""
    shape = s.shape
    s.view(*shape[:-2], G, i1 - i0, j1 - j0).masked_fill_(masks.hidden(i0, i1, j0, j1, off, s.device),
                                                          NEG_INF)  # (..., G, Br, Bc)


def softcap_tile(s: torch.Tensor, softcap: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Capped scores ``softcap·tanh(s/softcap)`` and their derivative ``1 − (y/softcap)²`` (for the backward)."""
    y = score_mod(s, softcap=softcap)
    return y, softcap_grad(y, softcap)


def alibi_tile(s: torch.Tensor, slopes: torch.Tensor, i0: int, i1: int, j0: int, j1: int, off: int,
               G: int) -> torch.Tensor:
    """Scores plus the ALiBi bias ``−slope·|i + off − j|``; ``slopes`` (..., G) holds each row's head's slope."""
    i, j = _positions(s, i0, i1, j0, j1)
    shape = s.shape
    s4 = s.view(*shape[:-2], G, i1 - i0, j1 - j0)  # (..., G, Br, Bc)
    return score_mod(s4, slopes=slopes[..., None, None], i=i, j=j, off=off).view(shape)


def modify_tile(s: torch.Tensor, *, softcap: float | None, slopes: torch.Tensor | None, i0: int, i1: int,
                j0: int, j1: int, off: int, G: int) -> torch.Tensor:
    """Softcap then ALiBi on a (..., G·Br, Bc) tile of scaled scores (the forward: no derivative needed)."""
    if softcap is not None:
        s = score_mod(s, softcap=softcap)
    if slopes is not None:
        s = alibi_tile(s, slopes, i0, i1, j0, j1, off, G)
    return s
