"""The KV cache of incremental decoding (lecture §8.2, §8.4; code 05).

At decode step t the keys and values of the first t - 1 tokens are exactly what the previous steps
computed (the causal mask keeps earlier tokens from seeing later ones), so each layer keeps them and
only the new tokens' q, k, v are computed. ``Transformer.forward(tokens, cache=cache)`` runs the
new tokens at absolute positions ``start .. start+T-1`` and calls ``attend`` once per layer.

Two ways to attend over the cache:

* ``decode="standard"``: reference math, the mask built from absolute positions — query at position
  p sees the keys at positions <= p;
* ``decode="flash"``: ``attnlab.flash_decode`` (§8.4, Flash-Decoding): the cache split along the
  sequence into ``num_splits`` parts, partial results merged by their logsumexp (the ⊕ of §4.4);
  bottom-right causal when several tokens are added at once (prefill).

``buggy_start_pos=True`` reproduces the lecture's real bug (§8.2, "plan vs actual" 2): each layer
takes the start position of the new tokens from ``cache.length`` — but that reads layer 0's cache,
which already holds the new tokens when layer 1 runs, so from layer 1 on the start is T too large:
RoPE positions shift and, in prefill, the causal mask lets every token see the whole prompt.
Comparing generation with and without the cache catches it.

Shapes: q (B, H, T, D); per layer k, v (B, Hkv, L, D).
"""

from __future__ import annotations

import torch

DECODE_IMPLS = ("standard", "flash")


class KVCache:
    """Per-layer K/V tensors of one batch of sequences (all of the same length)."""

    def __init__(self, n_layers: int, *, decode: str = "standard", num_splits: int = 1,
                 buggy_start_pos: bool = False):
        if decode not in DECODE_IMPLS:
            raise ValueError(f"decode must be one of {DECODE_IMPLS}, got {decode!r}")
        if isinstance(num_splits, bool) or not isinstance(num_splits, int) or num_splits < 1:
            raise ValueError(f"num_splits must be a positive integer, got {num_splits!r}")
        self.k: list[torch.Tensor | None] = [None] * n_layers
        self.v: list[torch.Tensor | None] = [None] * n_layers
        self.decode, self.num_splits, self.buggy_start_pos = decode, num_splits, buggy_start_pos
        self.committed = 0  # tokens fully processed by every layer

    @property
    def length(self) -> int:
        """Tokens held by layer 0's cache (during a forward, layer 0 may already hold the new ones)."""
        return 0 if self.k[0] is None else self.k[0].shape[2]

    def start_position(self, layer: int) -> int:
        """Absolute position of the first new token, as ``layer`` sees it."""
        if self.buggy_start_pos:
            return self.length  # the bug: layer 0's length, already extended when layer >= 1 runs
        return self.committed

    def commit(self, n_new: int) -> None:
        """Called by the model after all layers have appended ``n_new`` tokens."""
        self.committed += n_new

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor):
        """Add k, v (B, Hkv, T, D) to ``layer``; return the layer's whole cache (B, Hkv, L, D) ×2."""
        if self.k[layer] is None:
            self.k[layer], self.v[layer] = k, v
        else:
            self.k[layer] = torch.cat([self.k[layer], k], dim=2)
            self.v[layer] = torch.cat([self.v[layer], v], dim=2)
        return self.k[layer], self.v[layer]

    def attend(self, layer: int, q, k, v, positions, return_probs: bool = False):
        """Append k, v and attend q (B, H, T, D) at absolute ``positions`` (T,) over the cache.

        Returns (out (B, H, T, D), P (B, H, T, L) or None).
        """
        from .transformer import masked_attention

        k_all, v_all = self.append(layer, k, v)
        if self.decode == "flash" and not return_probs:
            from ..flash import flash_decode

            out = flash_decode(q, k_all, v_all, num_splits=self.num_splits, causal=True)
            if isinstance(out, tuple):
                out = out[0]
            return out, None
        L = k_all.shape[2]
        visible = torch.arange(L, device=q.device)[None, :] <= positions[:, None]  # (T, L)
        if return_probs:
            return masked_attention(q, k_all, v_all, visible, return_probs=True)
        return masked_attention(q, k_all, v_all, visible), None
