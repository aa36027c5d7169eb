"""KV caches for incremental decoding (lecture §8.2, §8.4), both attending through
``attnlab.api.flash_decode``.

protocol     KVCacheProtocol: the four members Transformer.forward calls (start_position, attend,
             commit, length)
paged        PagedKVCache: a pool of pages, a block table and per-sequence lengths (ragged batches,
             any number of layers; what the Triton decode kernel reads)
contiguous   ContiguousKVCache: one growing K/V tensor per layer, attention "reference" or "flash",
             and the lecture's start-position bug as a switch (buggy_start_pos)
"""

from __future__ import annotations

from .contiguous import ContiguousKVCache
from .paged import PagedKVCache
from .protocol import KVCacheProtocol

__all__ = ["ContiguousKVCache", "KVCacheProtocol", "PagedKVCache"]
