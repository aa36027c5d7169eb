"""What the model asks of a KV cache (lecture §8.2): the four members ``Transformer.forward`` calls.

Incremental decoding runs only the new tokens through the model; each attention layer appends their
K/V to its cache and attends over everything the cache holds. ``attnlab.model.Transformer.forward``
(and therefore ``attnlab.model.generate``) talks to a cache through this protocol only, so any cache
that has these members works — ``ContiguousKVCache`` (per-layer tensors) and ``PagedKVCache``
(pages and a block table) both do. One forward of T new tokens makes these calls, in this order:

    start = cache.start_position(layer)                  # for each layer, before its q, k, v
    out, P = cache.attend(layer, q, k, v, positions, return_probs)
    ...                                                  # every layer did the two calls above
    cache.commit(T)                                      # after the last layer

and, with learned absolute position embeddings, reads ``cache.length`` before the first layer.

The invariant that keeps the §8.2 start-position bug out: ``start_position(layer)`` is the number of
tokens *committed* before this forward, the same for every layer — never a count that already
includes the new tokens another layer has just appended.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import torch


@runtime_checkable
class KVCacheProtocol(Protocol):
    """The cache interface of ``Transformer.forward``. Shapes: q (B, H, T, D), k, v (B, Hkv, T, D)."""

    @property
    def length(self) -> int:
        """Tokens committed so far (the absolute position of the next new token)."""
        ...

    def start_position(self, layer: int) -> int:
        """Absolute position of the first new token, as layer ``layer`` must see it."""
        ...

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
               positions: torch.Tensor, return_probs: bool = False
               ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Append the new k, v to ``layer`` and attend the new queries over the layer's whole cache.

        positions: (T,) absolute positions of the new tokens (``start_position(layer) + arange(T)``).
        Returns (out (B, H, T, D), P (B, H, T, L) when ``return_probs`` else None), where query t
        sees the cached keys at positions <= its own.
        """
        ...

    def commit(self, n_new: int) -> None:
        """Every layer has appended ``n_new`` tokens: they count from now on."""
        ...
