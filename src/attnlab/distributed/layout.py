"""How a sequence is cut among the P ranks of a ring (context parallelism; the merge ⊕ of §4.4–§4.5
is what lets each rank see only its chunk of keys at a time).

Two layouts of a global sequence of N tokens:

* ``"contiguous"`` — N/P tokens per rank: rank r holds chunk r of P equal chunks. With a causal mask
  rank P-1 has the most work (every earlier chunk is visible to it) and rank 0 the least.
* ``"zigzag"`` — the sequence is cut into 2P chunks of N/(2P) tokens; rank r holds chunks r and
  2P-1-r, one early and one late, so every rank sees the same number of (query, key) pairs::

      P = 4, 2P = 8 chunks:   0 1 2 3 4 5 6 7
      rank 0: 0 7   rank 1: 1 6   rank 2: 2 5   rank 3: 3 4

``shard``/``unshard`` (and their zigzag forms ``zigzag_shard``/``zigzag_unshard``) cut a full tensor
into a rank's piece and put the P pieces back together, along any dimension (default 2, the sequence
dimension of (B, H, N, D)). ``local_positions`` gives the global position of every local row (what a
rotary embedding or a position-dependent mask needs).
"""

from __future__ import annotations

import torch

__all__ = ["LAYOUTS", "check_layout", "chunk_ids", "local_positions", "shard", "unshard", "zigzag_shard",
           "zigzag_unshard"]

LAYOUTS = ("zigzag", "contiguous")


def check_layout(layout) -> str:
    """``layout`` if it is one of ``LAYOUTS``; else ``ValueError`` naming what was given."""
    if not isinstance(layout, str) or layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(map(repr, LAYOUTS))}, got {layout!r}")
    return layout


def _check_ranks(world_size, rank) -> tuple[int, int]:
    for name, value in (("world_size", world_size), ("rank", rank)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int, got {value!r} ({type(value).__name__})")
    if world_size < 1:
        raise ValueError(f"world_size must be at least 1, got {world_size}")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in [0, world_size) = [0, {world_size}), got {rank}")
    return world_size, rank


def chunk_ids(*, rank: int, world_size: int, layout: str = "zigzag") -> tuple[int, ...]:
    """The chunks rank ``rank`` holds, in local order: ``(r, 2P-1-r)`` of 2P chunks (zigzag) or ``(r,)``
    of P chunks (contiguous)."""
    P, r = _check_ranks(world_size, rank)
    return (r, 2 * P - 1 - r) if check_layout(layout) == "zigzag" else (r,)


def _chunk_len(seq: int, world_size: int, layout: str, what: str) -> int:
    parts = 2 * world_size if layout == "zigzag" else world_size
    if seq % parts:
        raise ValueError(f"{what} has {seq} tokens, which the {layout} layout cannot cut into {parts} equal "
                         f"chunks ({'2·' if layout == 'zigzag' else ''}world_size = {parts})")
    return seq // parts


def local_positions(*, seq: int, world_size: int, rank: int, layout: str = "zigzag", device=None) -> torch.Tensor:
    """Global positions (int64) of the N/P local rows of rank ``rank``, in local order."""
    if isinstance(seq, bool) or not isinstance(seq, int) or seq < 1:
        raise ValueError(f"seq must be a positive int, got {seq!r}")
    ids = chunk_ids(rank=rank, world_size=world_size, layout=layout)
    c = _chunk_len(seq, world_size, layout, "the sequence")
    return torch.cat([torch.arange(i * c, (i + 1) * c, device=device) for i in ids])


def _dim(x: torch.Tensor, dim, name: str) -> int:
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise TypeError(f"dim must be an int, got {dim!r}")
    if not -x.dim() <= dim < x.dim():
        raise ValueError(f"dim {dim} is out of range for {name} of shape {tuple(x.shape)}")
    return dim % x.dim()


def shard(x, *, world_size: int, rank: int, layout: str = "zigzag", dim: int = 2) -> torch.Tensor:
    """Rank ``rank``'s piece of the full tensor ``x`` along ``dim`` (a new contiguous tensor):
    its chunks concatenated in local order (``chunk_ids``). The length along ``dim`` must split into
    2P (zigzag) or P (contiguous) equal chunks."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    d = _dim(x, dim, "x")
    ids = chunk_ids(rank=rank, world_size=world_size, layout=layout)
    c = _chunk_len(x.shape[d], world_size, layout, f"x (shape {tuple(x.shape)}) along dim {dim}")
    return torch.cat([x.narrow(d, i * c, c) for i in ids], dim=d)


def unshard(pieces, *, layout: str = "zigzag", dim: int = 2) -> torch.Tensor:
    """The full tensor from the P pieces of ranks 0..P-1 (e.g. from ``all_gather``): the inverse of
    ``shard``. The pieces must share one shape; zigzag pieces need an even length along ``dim``."""
    check_layout(layout)
    if isinstance(pieces, torch.Tensor) or not isinstance(pieces, (list, tuple)) or not pieces:
        raise TypeError(f"pieces must be a non-empty list of tensors (one per rank), got {type(pieces).__name__}")
    for i, p in enumerate(pieces):
        if not isinstance(p, torch.Tensor):
            raise TypeError(f"pieces[{i}] must be a torch.Tensor, got {type(p).__name__}")
        if p.shape != pieces[0].shape:
            raise ValueError(f"pieces[{i}] has shape {tuple(p.shape)} but pieces[0] has {tuple(pieces[0].shape)}")
    P = len(pieces)
    d = _dim(pieces[0], dim, "pieces[0]")
    n = pieces[0].shape[d]
    if layout == "contiguous":
        return torch.cat(list(pieces), dim=d)
    if n % 2:
        raise ValueError(f"zigzag pieces hold two equal chunks each, but pieces[0] has an odd length {n} "
                         f"along dim {dim}")
    c = n // 2
    chunks = [None] * (2 * P)
    for r, p in enumerate(pieces):
        chunks[r], chunks[2 * P - 1 - r] = p.narrow(d, 0, c), p.narrow(d, c, c)
    return torch.cat(chunks, dim=d)


def zigzag_shard(x, *, world_size: int, rank: int, dim: int = 2) -> torch.Tensor:
    """``shard(x, layout="zigzag")``: chunks ``rank`` and ``2·world_size-1-rank`` of 2·world_size."""
    return shard(x, world_size=world_size, rank=rank, layout="zigzag", dim=dim)


def zigzag_unshard(pieces, *, dim: int = 2) -> torch.Tensor:
    """``unshard(pieces, layout="zigzag")``: the full sequence from the P zigzag pieces."""
    return unshard(pieces, layout="zigzag", dim=dim)
