"""A paged KV cache: a pool of fixed-size pages, a block table and per-sequence lengths (§8.2, §8.4).

Decoding keeps every earlier token's K and V (§8.2). Storing each sequence contiguously wastes the
memory between its length and the longest one; a *paged* cache (PagedAttention, the lecture's
lecture-16 pointer) cuts each layer's K/V into pages of ``page_size`` tokens drawn from one pool and
lists each sequence's pages in a block table:

    k_pages, v_pages   (num_pages, page_size, Hkv, D)   the pool of one layer
    block_table        (B, max_pages) int32             page ids of each sequence, in order
    seqlens            (B,) int32                       tokens held by each sequence

Token ``j`` of sequence ``b`` lives in page ``block_table[b, j // page_size]`` at slot
``j % page_size``. ``attnlab.api.flash_decode`` (the Triton kernel on CUDA, the blockwise PyTorch
path elsewhere) reads this layout directly; ``gather`` rebuilds the contiguous ``(B, Hkv, L, D)``
view for the reference.

``PagedKVCache`` works on any device and with any number of layers. All layers share one block
table and one committed length per sequence; each layer's ``append`` writes after the committed
tokens and the lengths advance only in ``commit`` — so a layer never reads another layer's
half-finished state (the start-position bug of §8.2). It also implements the model's cache protocol
(``attnlab.kvcache.protocol``: ``length``, ``start_position``, ``attend``, ``commit``), so
``attnlab.model`` can generate through it.

This module never imports triton.
"""

from __future__ import annotations

import math

import torch

from .._checks import check_positive_int, check_tensor
from ..api import flash_decode
from ..reference import attention_ref

# -- the cache -----------------------------------------------------------------------------------------


class PagedKVCache:
    """Paged K/V for ``n_layers`` layers of a batch of ``batch`` sequences.

    Arguments:
        batch, kv_heads, head_dim: B, Hkv, D.
        n_layers: layers sharing the block table and lengths (1 for a single attention).
        page_size: tokens per page.
        num_pages: size of each layer's pool; None grows the pool (doubling) on demand.
        dtype, device: of the pages.
        num_splits: Flash-Decoding splits of ``attention`` (None: ``flash_decode`` chooses).
    """

    def __init__(self, *, batch: int, kv_heads: int, head_dim: int, n_layers: int = 1, page_size: int = 16,
                 num_pages: int | None = None, dtype: torch.dtype = torch.float32,
                 device: str | torch.device = "cpu", num_splits: int | None = None):
        self.batch = check_positive_int(batch, "batch")
        self.kv_heads = check_positive_int(kv_heads, "kv_heads")
        self.head_dim = check_positive_int(head_dim, "head_dim")
        self.n_layers = check_positive_int(n_layers, "n_layers")
        self.page_size = check_positive_int(page_size, "page_size")
        if num_pages is not None:
            check_positive_int(num_pages, "num_pages")
        if num_splits is not None:
            check_positive_int(num_splits, "num_splits")
        if dtype not in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
            raise TypeError(f"dtype must be a floating dtype, got {dtype}")
        self.dtype, self.device = dtype, torch.device(device)
        self.num_splits = num_splits
        self._grow = num_pages is None
        n = num_pages or 4
        shape = (n, page_size, kv_heads, head_dim)
        self.k_pages = [torch.zeros(shape, dtype=dtype, device=self.device) for _ in range(n_layers)]
        self.v_pages = [torch.zeros(shape, dtype=dtype, device=self.device) for _ in range(n_layers)]
        self._free = list(range(n - 1, -1, -1))  # a stack: pages are handed out from the end
        self._pages: list[list[int]] = [[] for _ in range(batch)]  # page ids of each sequence (host copy)
        self._lens = [0] * batch  # committed tokens of each sequence (host copy)
        self._pending = [[0] * batch for _ in range(n_layers)]  # written but not committed, per layer
        self._table_dev: torch.Tensor | None = None

    # -- views -----------------------------------------------------------------------------------------
    @property
    def num_pages(self) -> int:
        return self.k_pages[0].shape[0]

    @property
    def free_pages(self) -> int:
        """Pages of the pool not held by any sequence."""
        return len(self._free)

    def pages(self, seq: int) -> list[int]:
        """Page ids of sequence ``seq``, in token order."""
        self._check_seq(seq)
        return list(self._pages[seq])

    @property
    def lengths(self) -> list[int]:
        """Committed tokens of each sequence."""
        return list(self._lens)

    @property
    def length(self) -> int:
        """Committed tokens of the longest sequence (the model's protocol)."""
        return max(self._lens)

    @property
    def seqlens(self) -> torch.Tensor:
        """(B,) int32 committed lengths, on the cache's device."""
        return torch.tensor(self._lens, dtype=torch.int32, device=self.device)

    def layer_seqlens(self, layer: int = 0) -> torch.Tensor:
        """(B,) int32 lengths of ``layer``, its uncommitted tokens included."""
        self._check_layer(layer)
        return torch.tensor([n + p for n, p in zip(self._lens, self._pending[layer])],
                            dtype=torch.int32, device=self.device)

    @property
    def block_table(self) -> torch.Tensor:
        """(B, max_pages) int32 page ids (unused entries hold 0, a valid page)."""
        if self._table_dev is None:
            width = max(1, max(len(p) for p in self._pages))
            t = torch.zeros(self.batch, width, dtype=torch.int32)
            for b, pages in enumerate(self._pages):
                t[b, : len(pages)] = torch.tensor(pages, dtype=torch.int32)
            self._table_dev = t.to(self.device)
        return self._table_dev

    def start_position(self, layer: int) -> int:
        """Absolute position of the next token: the committed length (never another layer's)."""
        self._check_layer(layer)
        if len(set(self._lens)) != 1:
            raise ValueError(f"start_position needs sequences of one length, got lengths {self._lens}")
        return self._lens[0]

    # -- writing ---------------------------------------------------------------------------------------
    def append(self, k: torch.Tensor, v: torch.Tensor, *, layer: int = 0, lengths=None) -> None:
        """Write new tokens k, v (B, Hkv, T, D) after each sequence's tokens in ``layer``.

        lengths: (B,) how many of the T tokens are real for each sequence (ragged prompts padded on
        the right); default T for all. Pages are allocated as needed. With one layer the tokens are
        committed at once; with several, ``commit`` advances the lengths after every layer wrote.
        """
        self._write(k, v, layer, lengths)
        if self.n_layers == 1:
            self.commit()

    def _write(self, k, v, layer, lengths) -> None:
        """Write without committing: the new tokens are ``layer``'s pending ones."""
        self._check_layer(layer)
        for name, t in (("k", k), ("v", v)):
            check_tensor(t, name)
        if k.shape != v.shape:
            raise ValueError(f"v must have the shape of k {tuple(k.shape)}, got {tuple(v.shape)}")
        B, Hkv, T, D = k.shape
        if (B, Hkv, D) != (self.batch, self.kv_heads, self.head_dim):
            raise ValueError(f"k must have shape (B, Hkv, T, D) = ({self.batch}, {self.kv_heads}, T, "
                             f"{self.head_dim}), got {tuple(k.shape)}")
        n_new = self._check_lengths(lengths, T)
        if any(self._pending[layer]):
            raise ValueError(f"layer {layer} already holds uncommitted tokens; call commit() first")
        starts = list(self._lens)
        self._reserve([s + n for s, n in zip(starts, n_new)])
        dev, ps = self.device, self.page_size
        flat_k = self.k_pages[layer].view(-1, Hkv, D)  # (num_pages * page_size, Hkv, D)
        flat_v = self.v_pages[layer].view(-1, Hkv, D)
        for b in range(B):
            if n_new[b] == 0:
                continue
            pos = torch.arange(starts[b], starts[b] + n_new[b])  # absolute token positions
            pages = torch.tensor(self._pages[b], dtype=torch.long)[pos // ps]
            slots = (pages * ps + pos % ps).to(dev)
            flat_k[slots] = k[b, :, : n_new[b]].to(device=dev, dtype=self.dtype).transpose(0, 1)  # (n, Hkv, D)
            flat_v[slots] = v[b, :, : n_new[b]].to(device=dev, dtype=self.dtype).transpose(0, 1)
        self._pending[layer] = n_new

    def commit(self, n_new: int | None = None) -> None:
        """Advance the lengths by what every layer has written (the model calls ``commit(T)``)."""
        pend = self._pending[0]
        if any(p != pend for p in self._pending[1:]):
            raise ValueError(f"commit needs every layer to hold the same new tokens, got {self._pending}")
        if n_new is not None and any(p != n_new for p in pend):
            raise ValueError(f"commit({n_new}) but the layers hold {pend} new tokens")
        self._lens = [n + p for n, p in zip(self._lens, pend)]
        self._pending = [[0] * self.batch for _ in range(self.n_layers)]

    def release(self, seq: int) -> None:
        """Return sequence ``seq``'s pages to the pool and set its length to 0."""
        self._check_seq(seq)
        self._free.extend(self._pages[seq])
        self._pages[seq] = []
        self._lens[seq] = 0
        for p in self._pending:
            p[seq] = 0
        self._table_dev = None

    def reset(self) -> None:
        """Empty every sequence."""
        for b in range(self.batch):
            self.release(b)

    # -- reading ---------------------------------------------------------------------------------------
    def gather(self, layer: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Contiguous copies (B, Hkv, L, D) of ``layer``'s K and V, zero past each length, and the
        (B,) lengths (uncommitted tokens of the layer included); L is the longest length."""
        lens = self.layer_seqlens(layer).tolist()
        L = max(lens)
        shape = (self.batch, self.kv_heads, L, self.head_dim)
        k = torch.zeros(shape, dtype=self.dtype, device=self.device)
        v = torch.zeros(shape, dtype=self.dtype, device=self.device)
        for b, n in enumerate(lens):
            if n == 0:
                continue
            pages = torch.tensor(self._pages[b][: math.ceil(n / self.page_size)], device=self.device)
            # (P, page_size, Hkv, D) -> (Hkv, P * page_size, D) -> first n tokens
            k[b, :, :n] = self.k_pages[layer][pages].flatten(0, 1).transpose(0, 1)[:, :n]
            v[b, :, :n] = self.v_pages[layer][pages].flatten(0, 1).transpose(0, 1)[:, :n]
        return k, v, torch.tensor(lens, dtype=torch.int32, device=self.device)

    def attention(self, q: torch.Tensor, *, layer: int = 0, causal: bool = True, scale: float | None = None,
                  num_splits: int | None = None):
        """Attention of q (B, H, Nq, D) over ``layer``'s cache: ``attnlab.api.flash_decode`` on the
        paged layout (§8.4). Returns (out (B, H, Nq, D), lse (B, H, Nq))."""
        self._check_layer(layer)
        return flash_decode(q, self.k_pages[layer], self.v_pages[layer], cache_seqlens=self.layer_seqlens(layer),
                            block_table=self.block_table, num_splits=num_splits or self.num_splits,
                            causal=causal, scale=scale)

    def attend(self, layer: int, q, k, v, positions=None, return_probs: bool = False):
        """The model's protocol: append k, v (B, Hkv, T, D) to ``layer`` and attend q (B, H, T, D),
        bottom-right causal. positions, if given, must be the committed length + arange(T) (this
        cache cannot attend from other positions). Returns (out (B, H, T, D), P (B, H, T, L) or None)."""
        if positions is not None:
            start = self.start_position(layer)
            want = torch.arange(start, start + q.shape[2], device=positions.device)
            if positions.shape != want.shape or not torch.equal(positions, want):
                raise ValueError(f"positions must be {start} .. {start + q.shape[2] - 1} (the committed length "
                                 f"onwards), got {positions.tolist()}")
        self._write(k, v, layer, None)
        if return_probs:
            kk, vv, lens = self.gather(layer)
            if len(set(lens.tolist())) != 1:
                raise ValueError("return_probs needs sequences of one length")
            out, _, p = attention_ref(q, kk, vv, causal=True, return_probs=True)
            return out, p
        out, _ = self.attention(q, layer=layer, causal=True)
        return out, None

    # -- helpers ---------------------------------------------------------------------------------------
    def _check_seq(self, seq):
        if isinstance(seq, bool) or not isinstance(seq, int) or not 0 <= seq < self.batch:
            raise ValueError(f"seq must be an index in [0, {self.batch}), got {seq!r}")

    def _check_layer(self, layer):
        if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < self.n_layers:
            raise ValueError(f"layer must be an index in [0, {self.n_layers}), got {layer!r}")

    def _check_lengths(self, lengths, T: int) -> list[int]:
        if lengths is None:
            return [T] * self.batch
        vals = lengths.tolist() if isinstance(lengths, torch.Tensor) else list(lengths)
        if len(vals) != self.batch or any(isinstance(n, bool) or not isinstance(n, int) or not 0 <= n <= T
                                          for n in vals):
            raise ValueError(f"lengths must be {self.batch} integers in [0, {T}], got {vals}")
        return vals

    def _reserve(self, new_lens: list[int]) -> None:
        """Give every sequence pages for ``new_lens`` tokens (all-or-nothing)."""
        need = [math.ceil(n / self.page_size) - len(p) for n, p in zip(new_lens, self._pages)]
        total = sum(max(0, n) for n in need)
        if total > len(self._free):
            if not self._grow:
                raise ValueError(f"the cache needs {total} more pages but only {len(self._free)} of "
                                 f"{self.num_pages} are free; make num_pages larger")
            self._grow_pool(self.num_pages + max(total - len(self._free), self.num_pages))
        for b, n in enumerate(need):
            for _ in range(n):
                self._pages[b].append(self._free.pop())
        if total:
            self._table_dev = None

    def _grow_pool(self, n: int) -> None:
        old = self.num_pages
        for pools in (self.k_pages, self.v_pages):
            for i, p in enumerate(pools):
                new = torch.zeros((n, *p.shape[1:]), dtype=p.dtype, device=p.device)
                new[:old] = p
                pools[i] = new
        self._free[:0] = range(n - 1, old - 1, -1)

    @classmethod
    def from_dense(cls, k: torch.Tensor, v: torch.Tensor, seqlens=None, *, page_size: int = 16,
                   shuffle: bool = False, generator: torch.Generator | None = None) -> PagedKVCache:
        """A one-layer cache holding k, v (B, Hkv, L, D) (the first ``seqlens[b]`` tokens of each
        sequence). ``shuffle`` scatters the pages over the pool in random order."""
        check_tensor(k, "k")
        B, Hkv, L, D = k.shape
        lens = [L] * B if seqlens is None else (seqlens.tolist() if isinstance(seqlens, torch.Tensor) else list(seqlens))
        n = sum(math.ceil(x / page_size) for x in lens) or 1
        cache = cls(batch=B, kv_heads=Hkv, head_dim=D, page_size=page_size, num_pages=n, dtype=k.dtype,
                    device=k.device)
        if shuffle:
            cache._free = torch.randperm(n, generator=generator).tolist()
        cache.append(k, v, lengths=lens)
        return cache

    def __repr__(self) -> str:
        return (f"PagedKVCache(batch={self.batch}, kv_heads={self.kv_heads}, head_dim={self.head_dim}, "
                f"n_layers={self.n_layers}, page_size={self.page_size}, pages {self.num_pages - len(self._free)}"
                f"/{self.num_pages} used, lengths={self._lens}, {self.dtype}, {self.device})")
