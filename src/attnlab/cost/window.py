"""What a sliding window and packed variable-length batches cost, in closed form (§6.2 generalised, §8.4).

The window is flash-attn's (``attnlab.variants``): key j is visible to query i iff
``i + off − left <= j <= i + off + right`` with ``off = Nk − Nq`` (bottom-right), −1 meaning that side
is unbounded; ``causal=True`` is the right side at 0. A window is given as ``(left, right)`` or as any
object with int ``left`` / ``right`` (an ``attnlab.variants.Mask``); this module needs no torch.

* ``visible_pairs`` — (query, key) pairs a window leaves visible, a difference of two sums of clamped
  arithmetic series (no loop); ``visible_fraction`` — their share of the dense Nq·Nk.
* ``window_block_pairs`` — the (Q block, K block) pairs a blockwise loop visits with Br×Bc blocks, the
  pairs that need the element-wise mask, and the K/V rows and Q rows they read: §6.2's whole-block
  skipping on both sides of a band, in O(#Q blocks + #K blocks) arithmetic. With a window of W keys a
  Q block reads about Br + W keys instead of Nk, so the forward's K/V traffic is ≈ 2·d·N·(Br + W)/Br
  instead of 2·d·N²/Br: linear in N.
* ``window_forward_io`` — the elements the FA2 forward moves per array and the block pairs it
  computes, skips and masks, in the form of ``attnlab.blockwise.IOStats``; ``window_kv_bytes`` the K/V
  bytes alone.
* ``varlen_forward_io`` and ``packed_vs_padded`` — a batch of documents packed end to end (each with
  its own blocks and alignment, flash-attn's varlen layout) against the same batch padded to the
  longest document.
* ``decode_window_keys`` — the keys one decode step streams per sequence (§8.4): about the window.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

from ._args import flag, heads_pair, nonneg_int, pos_int

__all__ = [
    "WindowBlockPairs",
    "PackedVsPadded",
    "window_sides",
    "visible_pairs",
    "visible_fraction",
    "window_block_pairs",
    "window_forward_io",
    "window_kv_bytes",
    "varlen_forward_io",
    "packed_vs_padded",
    "decode_window_keys",
]


# -- arguments -------------------------------------------------------------------------------------------


def window_sides(window=None, causal: bool = False) -> tuple[int, int]:
    """``(left, right)`` from a window ``(left, right)`` (ints >= −1, −1: unbounded), an object with
    ``left`` / ``right`` (an ``attnlab.variants.Mask``) or None (dense), folded with ``causal`` (the
    right side at 0; a right side other than −1 or 0 with causal=True is refused)."""
    flag(causal, "causal")
    if window is None:
        sides = (-1, -1)
    elif hasattr(window, "left") and hasattr(window, "right"):
        sides = (window.left, window.right)
    elif isinstance(window, (tuple, list)) and len(window) == 2:
        sides = tuple(window)
    else:
        raise TypeError(f"window must be a pair (left, right) or a Mask, got {window!r}")
    if not all(isinstance(w, numbers.Integral) and not isinstance(w, bool) for w in sides):
        raise TypeError(f"window must be a pair of ints (left, right), -1 meaning unbounded, got {window!r}")
    left, right = int(sides[0]), int(sides[1])
    if left < -1 or right < -1:
        raise ValueError(f"window sides must be >= -1 (-1: unbounded), got {(left, right)!r}")
    if causal:
        if right not in (-1, 0):
            raise ValueError(f"causal=True fixes the window's right side at 0, got window={(left, right)!r}")
        right = 0
    return left, right


# -- visible pairs: closed form --------------------------------------------------------------------------


def _tri(x: int) -> int:
    """1 + 2 + ... + x (0 for x <= 0)."""
    return x * (x + 1) // 2 if x > 0 else 0


def _sum_pos(a: int, n: int) -> int:
    """Σ_{i=0}^{n−1} max(0, a + i): a sum of positive integers up to a + n − 1, less those below a."""
    return _tri(a + n - 1) - _tri(a - 1)


def _pairs_below(c: int, Nq: int, Nk: int) -> int:
    """#{(i, j): 0 <= i < Nq, 0 <= j < Nk, j <= i + c} = Σ_i clamp(i + c + 1, 0, Nk)."""
    return _sum_pos(c + 1, Nq) - _sum_pos(c + 1 - Nk, Nq)


def visible_pairs(*, seq_q: int, seq_k: int, window=None, causal: bool = False) -> int:
    """(query, key) pairs the window leaves visible, per head, exactly (bottom-right alignment).

    The visible pairs are those with ``off − left <= j − i <= off + right``: the pairs on or below the
    upper diagonal less those strictly below the lower one, each a sum of clamped arithmetic series.
    Dense: Nq·Nk; causal with Nq = Nk = N: N(N+1)/2; a causal window of W keys (left = W − 1):
    N·W − W(W−1)/2 when W <= N."""
    Nq, Nk = nonneg_int(seq_q, "seq_q"), nonneg_int(seq_k, "seq_k")
    left, right = window_sides(window, causal)
    off = Nk - Nq
    upper = Nq * Nk if right < 0 else _pairs_below(off + right, Nq, Nk)
    lower = 0 if left < 0 else _pairs_below(off - left - 1, Nq, Nk)
    return upper - lower


def visible_fraction(*, seq_q: int, seq_k: int, window=None, causal: bool = False) -> float:
    """Share of the dense Nq·Nk (query, key) pairs that the window leaves visible (0 when empty)."""
    pairs = visible_pairs(seq_q=seq_q, seq_k=seq_k, window=window, causal=causal)
    return pairs / (seq_q * seq_k) if seq_q * seq_k else 0.0


# -- block pairs a blockwise loop visits -----------------------------------------------------------------


@dataclass(frozen=True)
class WindowBlockPairs:
    """The (Q block, K block) pairs of one (batch, K/V head) under a window, Br×Bc blocks."""

    pairs: int  # visited (computed) pairs: some query of the Q block sees some key of the K block
    total_pairs: int  # Tr·Tc
    masked: int  # visited pairs that hide some of their (query, key) pairs: the element-wise mask runs
    kv_rows_read: int  # Σ over Q blocks of the K rows of the blocks they visit (FA2 forward: K and V reads)
    q_rows_read: int  # Σ over K blocks of the Q rows of the blocks that visit them (backward: Q, dO reads)
    scores: int  # Σ over visited pairs of rows × cols: score elements computed

    @property
    def skipped(self) -> int:
        return self.total_pairs - self.pairs

    @property
    def fraction(self) -> float:
        """Share of the Tr·Tc block pairs that are computed."""
        return self.pairs / self.total_pairs if self.total_pairs else 0.0


def _q_block_visits(i0: int, i1: int, off: int, left: int, right: int, Nk: int, Bc: int) -> tuple[int, int, int]:
    """(visited K blocks, of them fully visible, K rows read) for the Q rows [i0, i1)."""
    lo = 0 if left < 0 else max(0, i0 + off - left)  # the keys some query of the block sees: [lo, hi)
    hi = Nk if right < 0 else min(Nk, i1 + off + right)
    if hi <= lo:
        return 0, 0, 0
    fb, lb = lo // Bc, (hi - 1) // Bc  # first and last visited K block
    Tc = -(-Nk // Bc)
    # a block is fully visible when its first key is >= the last query's left edge (A) and its last
    # key is <= the first query's right edge (Z)
    t_min = fb if left < 0 else max(fb, -(-(i1 - 1 + off - left) // Bc))
    if right < 0:
        full = max(0, lb - t_min + 1)
    else:
        Z = i0 + off + right
        t_max = min(lb, Tc - 2, (Z + 1) // Bc - 1)  # blocks before the last end at (t + 1)·Bc − 1
        full = max(0, t_max - t_min + 1)
        if lb == Tc - 1 and t_min <= Tc - 1 and Nk - 1 <= Z:  # the last (maybe partial) block ends at Nk − 1
            full += 1
    return lb - fb + 1, full, min(Nk, (lb + 1) * Bc) - fb * Bc


def _k_block_q_rows(j0: int, j1: int, off: int, left: int, right: int, Nq: int, Br: int) -> int:
    """Q rows of the Q blocks that visit the K rows [j0, j1)."""
    # Q block [i0, i1) visits iff its last query reaches j0 (i1 − 1 >= j0 − off − right) and its first
    # query reaches j1 − 1 (i0 <= j1 − 1 − off + left)
    s_lo = 0 if right < 0 else max(0, j0 - off - right) // Br
    if right >= 0 and j0 - off - right > Nq - 1:
        return 0
    if left < 0:
        s_hi = -(-Nq // Br) - 1
    else:
        c = j1 - 1 - off + left
        if c < 0:
            return 0
        s_hi = min(c // Br, -(-Nq // Br) - 1)
    if s_hi < s_lo:
        return 0
    return min(Nq, (s_hi + 1) * Br) - s_lo * Br


def window_block_pairs(*, seq_q: int, seq_k: int, block_q: int, block_k: int, window=None,
                       causal: bool = False) -> WindowBlockPairs:
    """The block pairs a blockwise loop (FA2 order, Q blocks outside) visits under the window.

    Q block [i0, i1) sees the keys [i0 + off − left, i1 − 1 + off + right] (clipped to [0, Nk)) and
    visits every K block that meets them; a visited block is masked element-wise unless its first key
    is at least the last query's left edge and its last key at most the first query's right edge — as
    ``Mask.block_kind``. One step per Q block and per K block (no Nq×Nk grid)."""
    Nq, Nk = nonneg_int(seq_q, "seq_q"), nonneg_int(seq_k, "seq_k")
    Br, Bc = pos_int(block_q, "block_q"), pos_int(block_k, "block_k")
    left, right = window_sides(window, causal)
    off = Nk - Nq
    Tr, Tc = -(-Nq // Br), -(-Nk // Bc)
    pairs = full = kv_rows = scores = 0
    for s in range(Tr):
        i0, i1 = s * Br, min((s + 1) * Br, Nq)
        n, f, rows = _q_block_visits(i0, i1, off, left, right, Nk, Bc)
        pairs, full, kv_rows, scores = pairs + n, full + f, kv_rows + rows, scores + (i1 - i0) * rows
    q_rows = sum(_k_block_q_rows(t * Bc, min((t + 1) * Bc, Nk), off, left, right, Nq, Br) for t in range(Tc))
    return WindowBlockPairs(pairs, Tr * Tc, pairs - full, kv_rows, q_rows, scores)


# -- HBM traffic of the forward --------------------------------------------------------------------------


def window_forward_io(*, seq_q: int, seq_k: int, head_dim: int, block_q: int, block_k: int, window=None,
                      causal: bool = False, batch: int = 1, heads: int = 1, kv_heads: int | None = None,
                      head_dim_v: int | None = None) -> dict:
    """What the FA2 forward moves under the window, as ``IOStats.as_dict`` counts it: elements read
    (Q once; K and V once per visited block pair, per K/V head, shared by the G = H/Hkv query heads of
    a group) and written (O, L), and the block pairs computed, skipped and masked per (batch, K/V head).

    Returns ``{"reads": {"Q", "K", "V"}, "writes": {"O", "L"}, "pairs_computed", "pairs_skipped",
    "pairs_masked"}``; rows of Q that see no key still cost their Q read and O, L write."""
    B = pos_int(batch, "batch")
    H, Hkv = heads_pair(heads, kv_heads)
    d = pos_int(head_dim, "head_dim")
    dv = d if head_dim_v is None else pos_int(head_dim_v, "head_dim_v")
    bp = window_block_pairs(seq_q=seq_q, seq_k=seq_k, block_q=block_q, block_k=block_k, window=window,
                            causal=causal)
    Nq = int(seq_q)
    return {"reads": {"Q": B * H * Nq * d, "K": B * Hkv * bp.kv_rows_read * d, "V": B * Hkv * bp.kv_rows_read * dv},
            "writes": {"O": B * H * Nq * dv, "L": B * H * Nq},
            "pairs_computed": B * Hkv * bp.pairs, "pairs_skipped": B * Hkv * bp.skipped,
            "pairs_masked": B * Hkv * bp.masked}


def window_kv_bytes(*, seq: int, head_dim: int, block_q: int, block_k: int, window=None, causal: bool = False,
                    seq_k: int | None = None, dtype_bytes: int = 2) -> int:
    """Bytes of K and V the FA2 forward reads per (batch, K/V head): 2·d·bytes per K row of every
    visited block pair. Dense: 2·d·N·Tr ≈ 2·d·N²/Br; a window of W keys: ≈ 2·d·N·(Br + W)/Br."""
    bp = window_block_pairs(seq_q=seq, seq_k=seq if seq_k is None else seq_k, block_q=block_q, block_k=block_k,
                            window=window, causal=causal)
    return 2 * pos_int(head_dim, "head_dim") * pos_int(dtype_bytes, "dtype_bytes") * bp.kv_rows_read


# -- packed variable-length batches vs padding -----------------------------------------------------------


def seqlens_pair(seqlens_q, seqlens_k) -> tuple[list[int], list[int]]:
    """Per-sequence query and key lengths as lists of non-negative ints (keys default to the queries')."""
    if not isinstance(seqlens_q, (list, tuple)) or not seqlens_q:
        raise TypeError(f"seqlens_q must be a non-empty list of ints, got {seqlens_q!r}")
    lq = [nonneg_int(n, f"seqlens_q[{b}]") for b, n in enumerate(seqlens_q)]
    if seqlens_k is None:
        return lq, list(lq)
    if not isinstance(seqlens_k, (list, tuple)) or len(seqlens_k) != len(lq):
        raise ValueError(f"seqlens_k must be a list of {len(lq)} ints like seqlens_q, got {seqlens_k!r}")
    return lq, [nonneg_int(n, f"seqlens_k[{b}]") for b, n in enumerate(seqlens_k)]


def _add(a: dict, b: dict) -> dict:
    return {k: (_add(v, b[k]) if isinstance(v, dict) else v + b[k]) for k, v in a.items()}


def varlen_forward_io(*, seqlens_q, seqlens_k=None, head_dim: int, block_q: int, block_k: int, window=None,
                      causal: bool = False, heads: int = 1, kv_heads: int | None = None,
                      head_dim_v: int | None = None, padded: bool = False) -> dict:
    """``window_forward_io`` of a batch of documents: packed (each document its own blocks and its own
    bottom-right alignment, flash-attn's varlen layout — the sum over documents) or, with
    ``padded=True``, every document padded to the longest (batch × the longest document's cost)."""
    lq, lk = seqlens_pair(seqlens_q, seqlens_k)
    kw = dict(head_dim=head_dim, block_q=block_q, block_k=block_k, window=window, causal=causal, heads=heads,
              kv_heads=kv_heads, head_dim_v=head_dim_v)
    if flag(padded, "padded"):
        return window_forward_io(seq_q=max(lq), seq_k=max(lk), batch=len(lq), **kw)
    total = None
    for nq, nk in zip(lq, lk):
        io = window_forward_io(seq_q=nq, seq_k=nk, **kw)
        total = io if total is None else _add(total, io)
    return total


@dataclass(frozen=True)
class PackedVsPadded:
    """One batch of documents, packed end to end vs padded to the longest, per K/V head."""

    tokens: int  # Σ document lengths (queries)
    padded_tokens: int  # batch × the longest document
    pairs: int  # visible (query, key) pairs: the useful work
    padded_pairs: int  # pairs the padded batch's mask leaves visible (padding included)
    blocks: int  # block pairs the packed loop visits
    padded_blocks: int
    kv_rows: int  # K/V rows the packed forward reads
    padded_kv_rows: int

    @property
    def blocks_ratio(self) -> float:
        """How many times more block pairs padding visits than packing."""
        return self.padded_blocks / self.blocks if self.blocks else float("inf")

    @property
    def useful_fraction(self) -> float:
        """Share of the padded batch's visible pairs that are real (both ends inside a document)."""
        return self.pairs / self.padded_pairs if self.padded_pairs else 0.0


def packed_vs_padded(*, seqlens_q, seqlens_k=None, block_q: int, block_k: int, window=None,
                     causal: bool = False) -> PackedVsPadded:
    """Pairs, block pairs and K/V rows of a batch of documents packed (varlen) vs padded to the longest."""
    lq, lk = seqlens_pair(seqlens_q, seqlens_k)
    kw = dict(block_q=block_q, block_k=block_k, window=window, causal=causal)
    per_doc = [window_block_pairs(seq_q=nq, seq_k=nk, **kw) for nq, nk in zip(lq, lk)]
    longest = window_block_pairs(seq_q=max(lq), seq_k=max(lk), **kw)
    B = len(lq)
    return PackedVsPadded(
        tokens=sum(lq), padded_tokens=B * max(lq),
        pairs=sum(visible_pairs(seq_q=nq, seq_k=nk, window=window, causal=causal) for nq, nk in zip(lq, lk)),
        padded_pairs=B * visible_pairs(seq_q=max(lq), seq_k=max(lk), window=window, causal=causal),
        blocks=sum(p.pairs for p in per_doc), padded_blocks=B * longest.pairs,
        kv_rows=sum(p.kv_rows_read for p in per_doc), padded_kv_rows=B * longest.kv_rows_read)


# -- decoding --------------------------------------------------------------------------------------------


def decode_window_keys(*, seq: int, queries: int = 1, window=None, causal: bool = False) -> int:
    """Keys one decode step reads per (sequence, K/V head) from a cache holding ``seq`` keys (§8.4).

    The step's ``queries`` sit at positions seq − queries .. seq − 1, so the keys any of them may see
    are [seq − queries − left, seq): ``min(seq, left + queries)`` with a left edge, all ``seq`` without
    one (the right edge never reaches past the cache). A 4K window over a 128K cache: 4K keys, not 128K."""
    n = nonneg_int(seq, "seq")
    nq = pos_int(queries, "queries")
    left, _ = window_sides(window, causal)
    return n if left < 0 else min(n, left + nq)
