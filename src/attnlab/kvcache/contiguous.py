"""A contiguous KV cache: one growing K and one V tensor per layer (lecture §8.2, §8.4; code 05).

At decode step t the keys and values of the first t - 1 tokens are exactly what the previous steps
computed (the causal mask keeps earlier tokens from seeing later ones), so each layer keeps them and
only the new tokens' q, k, v are computed. ``Transformer.forward(tokens, cache=cache)`` runs the
new tokens at absolute positions ``start .. start+T-1`` and calls ``attend`` once per layer (the
protocol of ``attnlab.kvcache.protocol``).

Two ways to attend over the cache, chosen by ``attention``:

* ``"reference"``: the reference math, with the mask built from absolute positions — the query at
  position p sees the keys at positions <= p;
* ``"flash"``: ``attnlab.api.flash_decode`` (§8.4, Flash-Decoding): the cache split along the
  sequence into ``num_splits`` parts, partial results merged by their logsumexp (the ⊕ of §4.4);
  bottom-right causal when several tokens are added at once (prefill).

``buggy_start_pos=True`` reproduces the lecture's real bug (§8.2, "plan vs actual" 2): each layer
takes the start position of the new tokens from ``cache.length`` — but that reads layer 0's cache,
which already holds the new tokens when layer 1 runs, so from layer 1 on the start is T too large:
RoPE positions shift and, in prefill, the causal mask lets every token see the whole prompt.
Comparing generation with and without the cache catches it.

All sequences of the batch have one length (``attnlab.model.generate`` batches prompts of equal
length). Shapes: q (B, H, T, D); per layer k, v (B, Hkv, L, D).
"""

from __future__ import annotations

import torch

from .._checks import check_positive_int, check_tensor
from ..api import flash_decode
from ..reference import attention_scores, expand_kv

ATTENTION_KINDS = ("reference", "flash")


def masked_attention(q, k, v, visible: torch.Tensor, return_probs: bool = False):
    """Reference attention with an explicit visibility mask ``visible`` (Nq, Nk), True = may attend.

    q (B, H, Nq, D), k, v (B, Hkv, Nk, D) -> out (B, H, Nq, D) [, P (B, H, Nq, Nk)].
    """
    s = attention_scores(q, k)  # (B, H, Nq, Nk)
    s = s.masked_fill(~visible, float("-inf"))
    p = torch.softmax(s, dim=-1)
    out = torch.matmul(p, expand_kv(v, q.shape[1]))  # (B, H, Nq, D)
    return (out, p) if return_probs else out


class ContiguousKVCache:
    """Per-layer K/V tensors of one batch of sequences (all of the same length).

    Arguments:
        n_layers: layers of the model.
        attention: "reference" (positions mask) or "flash" (``attnlab.api.flash_decode``).
        num_splits: Flash-Decoding splits for ``attention="flash"``; None lets flash_decode choose.
        buggy_start_pos: inject the §8.2 start-position bug.
    """

    def __init__(self, *, n_layers: int, attention: str = "reference", num_splits: int | None = None,
                 buggy_start_pos: bool = False):
        self.n_layers = check_positive_int(n_layers, "n_layers")
        if attention not in ATTENTION_KINDS:
            raise ValueError(f"attention must be one of {ATTENTION_KINDS}, got {attention!r}")
        if num_splits is not None:
            check_positive_int(num_splits, "num_splits")
            if attention != "flash":
                raise ValueError(f"num_splits={num_splits} needs attention='flash', got attention={attention!r}")
        if not isinstance(buggy_start_pos, bool):
            raise TypeError(f"buggy_start_pos must be True or False, got {buggy_start_pos!r}")
        self.k: list[torch.Tensor | None] = [None] * n_layers
        self.v: list[torch.Tensor | None] = [None] * n_layers
        self.attention, self.num_splits, self.buggy_start_pos = attention, num_splits, buggy_start_pos
        self.committed = 0  # tokens fully processed by every layer

    @property
    def length(self) -> int:
        """Tokens committed by every layer."""
        return self.committed

    def _layer_length(self, layer: int) -> int:
        """Tokens held by ``layer``'s cache (during a forward, the new ones included)."""
        return 0 if self.k[layer] is None else self.k[layer].shape[2]

    def start_position(self, layer: int) -> int:
        """Absolute position of the first new token, as ``layer`` sees it."""
        self._check_layer(layer)
        if self.buggy_start_pos:
            return self._layer_length(0)  # the bug: layer 0's length, already extended when layer >= 1 runs
        return self.committed

    def commit(self, n_new: int) -> None:
        """Called by the model after all layers have appended ``n_new`` tokens."""
        check_positive_int(n_new, "n_new")
        held = [self._layer_length(layer) for layer in range(self.n_layers)]
        if any(h != self.committed + n_new for h in held):
            raise ValueError(f"commit({n_new}) after {self.committed} committed tokens, but the layers hold {held}")
        self.committed += n_new

    def gather(self, layer: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``layer``'s K and V (B, Hkv, L, D) and the (B,) int32 lengths (all L)."""
        self._check_layer(layer)
        if self.k[layer] is None:
            raise ValueError(f"layer {layer} holds no tokens yet")
        k = self.k[layer]
        return k, self.v[layer], torch.full((k.shape[0],), k.shape[2], dtype=torch.int32, device=k.device)

    def _append(self, layer: int, k: torch.Tensor, v: torch.Tensor):
        """Add k, v (B, Hkv, T, D) to ``layer``; return the layer's whole cache (B, Hkv, L, D) ×2."""
        check_tensor(k, "k")
        check_tensor(v, "v")
        if k.shape[:3] != v.shape[:3]:
            raise ValueError(f"v must have shape (B, Hkv, T, Dv) like k {tuple(k.shape)}, got {tuple(v.shape)}")
        if self.k[layer] is None:
            self.k[layer], self.v[layer] = k, v
        else:
            old = self.k[layer]
            if (k.shape[0], k.shape[1], k.shape[3]) != (old.shape[0], old.shape[1], old.shape[3]):
                raise ValueError(f"k must have shape (B, Hkv, T, D) = ({old.shape[0]}, {old.shape[1]}, T, "
                                 f"{old.shape[3]}) like the cached keys, got {tuple(k.shape)}")
            self.k[layer] = torch.cat([old, k], dim=2)  # (B, Hkv, L + T, D)
            self.v[layer] = torch.cat([self.v[layer], v], dim=2)
        return self.k[layer], self.v[layer]

    def attend(self, layer: int, q, k, v, positions, return_probs: bool = False):
        """Append k, v and attend q (B, H, T, D) at absolute ``positions`` (T,) over the cache.

        Returns (out (B, H, T, D), P (B, H, T, L) or None). ``return_probs`` always takes the
        reference path (Flash-Decoding never forms P).
        """
        self._check_layer(layer)
        k_all, v_all = self._append(layer, k, v)
        if self.attention == "flash" and not return_probs:
            out, _ = flash_decode(q, k_all, v_all, num_splits=self.num_splits, causal=True)
            return out, None
        L = k_all.shape[2]
        visible = torch.arange(L, device=q.device)[None, :] <= positions[:, None]  # (T, L)
        if return_probs:
            return masked_attention(q, k_all, v_all, visible, return_probs=True)
        return masked_attention(q, k_all, v_all, visible), None

    def _check_layer(self, layer) -> None:
        if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < self.n_layers:
            raise ValueError(f"layer must be an index in [0, {self.n_layers}), got {layer!r}")

    def __repr__(self) -> str:
        return (f"ContiguousKVCache(n_layers={self.n_layers}, attention={self.attention!r}, "
                f"num_splits={self.num_splits}, buggy_start_pos={self.buggy_start_pos}, length={self.committed})")
