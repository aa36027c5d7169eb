"""The public entry points that choose an implementation (temporary: delegates to attnlab.flash
while the blockwise package is being split out)."""

from __future__ import annotations


def flash_attention(q, k, v, *, causal: bool = False, scale: float | None = None, return_lse: bool = False,
                    block_q: int | None = None, block_k: int | None = None):
    from .flash import flash_attention as f

    return f(q, k, v, causal=causal, scale=scale, return_lse=return_lse)


def flash_decode(q, k_cache, v_cache, *, cache_seqlens=None, block_table=None, num_splits: int | None = None,
                 causal: bool = True, scale: float | None = None, stats=None):
    from .flash import flash_decode as f

    return f(q, k_cache, v_cache, cache_seqlens=cache_seqlens, block_table=block_table, num_splits=num_splits,
             causal=causal, scale=scale, stats=stats)
