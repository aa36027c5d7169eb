"""The public entry points that choose an implementation: the only place that decides and falls back.

    flash_attention   exact attention, differentiable (§5–§7): the Triton FlashAttention-2 kernels
                      (``attnlab.gpu``) for CUDA tensors they cover, else the blockwise PyTorch
                      path (``attnlab.blockwise``)
    flash_decode      Flash-Decoding over a KV cache (§8.4): the Triton split-KV kernels for CUDA
                      tensors they cover, else the blockwise PyTorch path

Inputs are checked once, here; then the chosen implementation runs on the checked inputs. A CUDA
call that the kernels do not cover (float32, an odd head dim, triton missing, an old GPU) runs the
blockwise path after one ``RuntimeWarning`` per reason and process. Nothing below this module falls
back or imports it.

Shapes: ``q (B, H, Nq, D)``, ``k, v (B, Hkv, Nk, D)`` with ``H % Hkv == 0`` (GQA/MQA); causal masks
are aligned bottom-right when ``Nq != Nk`` (query i sees keys ``j <= i + Nk - Nq``), as a KV cache
needs; PyTorch SDPA's ``is_causal`` is top-left, and the two agree when ``Nq == Nk``.
"""

from __future__ import annotations

import torch

from ._checks import (
    check_causal,
    check_decode_inputs,
    check_positive_int,
    check_qkv,
    resolve_scale,
    seqlens_tensor,
)
from ._runtime import triton_available, warn_once
from .blockwise.backward import attention_fn as _blockwise_attention
from .blockwise.decode import decode_fn as _blockwise_decode
from .blockwise.iostats import IOStats, check_stats

__all__ = ["flash_attention", "flash_decode"]


def _warn_fallback(entry: str, why: tuple[str, str]) -> None:
    warn_once(f"{entry}:{why[0]}", f"attnlab.{entry}: the Triton kernels do not take {why[1]}; "
              "running the blockwise PyTorch path", stacklevel=4)


def flash_attention(q, k, v, *, causal: bool = False, scale: float | None = None, return_lse: bool = False,
                    block_q: int | None = None, block_k: int | None = None):
    """Exact attention with FlashAttention's memory behaviour, differentiable (§5–§7).

    Arguments:
        q: (B, H, Nq, D); k: (B, Hkv, Nk, D); v: (B, Hkv, Nk, Dv); H % Hkv == 0.
        causal: bottom-right aligned mask (query i sees keys j <= i + Nk - Nq). Rows that see no key
            give out = 0 and lse = -inf.
        scale: softmax scale, default 1/sqrt(D).
        return_lse: also return lse (B, H, Nq), the natural-log logsumexp; it is differentiable too.
        block_q, block_k: Br and Bc of the blockwise path (None: ``cpu_block_sizes``, fast on a CPU).
            Giving either runs the blockwise path on any device; the Triton kernels use their own
            tuned tables.
    Returns:
        out (B, H, Nq, Dv) in q's dtype, or (out, lse).

    CUDA tensors in float16/bfloat16 with a head dim the kernels cover run ``attnlab.gpu``'s Triton
    kernels; everything else runs ``attnlab.blockwise`` (one warning per reason on CUDA). Autograd saves
    q, k, v, out and lse only; the backward recomputes P (§7.2). Double backward is not supported.
    """
    dims = check_qkv(q, k, v)
    causal = check_causal(causal)
    scale = resolve_scale(scale, dims.D)
    if block_q is not None:
        check_positive_int(block_q, "block_q")
    if block_k is not None:
        check_positive_int(block_k, "block_k")
    if q.is_cuda and block_q is None and block_k is None:
        if not triton_available():
            why = ("triton", "calls without triton installed (pip install 'attnlab[gpu]')")
        else:
            from .gpu import prefill

            needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
            why = prefill.unsupported(q, dims, needs_grad=needs_grad)
            if why is None:
                out, lse = prefill.attention_fn(q, k, v, causal=causal, scale=scale)
                return (out, lse) if return_lse else out
        _warn_fallback("flash_attention", why)
    out, lse = _blockwise_attention(q, k, v, dims, causal=causal, scale=scale, block_q=block_q, block_k=block_k)
    return (out, lse) if return_lse else out


def flash_decode(q, k_cache, v_cache, *, cache_seqlens=None, block_table=None, num_splits: int | None = None,
                 causal: bool = True, scale: float | None = None, stats: IOStats | None = None):
    """Flash-Decoding (§8.4): attention of a few new queries against a KV cache.

    Arguments:
        q: (B, H, Nq, D), Nq small (1 for plain decoding, a few for speculative steps).
        k_cache, v_cache: contiguous (B, Hkv, Lmax, D/Dv), or paged (num_pages, page_size, Hkv, D/Dv)
            when ``block_table`` (B, max_pages) int32/int64 of page ids is given (``attnlab.kvcache``).
        cache_seqlens: (B,) ints (a tensor or a list), keys held per sequence (default: the capacity).
        num_splits: K/V splits per (sequence, K/V head). None: on CUDA the kernels' split model
            (``attnlab.cost``) picks it; on the CPU one split (a CPU has no idle SMs to fill).
        causal: query i of sequence b sees keys j <= cache_seqlens[b] - Nq + i (bottom-right).
        scale: softmax scale, default 1/sqrt(D).
        stats: an ``IOStats`` to count the blockwise path's traffic into (forces that path).
    Returns:
        out (B, H, Nq, Dv) in q's dtype, lse (B, H, Nq) float32 (float64 for float64 inputs).
    """
    cache_seqlens = seqlens_tensor(cache_seqlens, q)
    on_cuda = isinstance(q, torch.Tensor) and q.is_cuda
    # the page ids and lengths are checked on the host except on CUDA, where that would synchronise
    dims = check_decode_inputs(q, k_cache, v_cache, cache_seqlens, block_table, check_values=not on_cuda)
    causal = check_causal(causal)
    scale = resolve_scale(scale, dims.D)
    check_stats(stats)
    if num_splits is not None:
        check_positive_int(num_splits, "num_splits")
    if on_cuda and stats is None:
        if not triton_available():
            why = ("triton", "calls without triton installed (pip install 'attnlab[gpu]')")
        else:
            from .gpu import decode

            why = decode.unsupported(q, dims)
            if why is None:
                return decode.decode_fn(q, k_cache, v_cache, dims, cache_seqlens=cache_seqlens,
                                        block_table=block_table, num_splits=num_splits, causal=causal, scale=scale)
        _warn_fallback("flash_decode", why)
        check_decode_inputs(q, k_cache, v_cache, cache_seqlens, block_table)  # now the values: read on the host
    return _blockwise_decode(q, k_cache, v_cache, dims, cache_seqlens=cache_seqlens, block_table=block_table,
                             num_splits=num_splits, causal=causal, scale=scale, stats=stats)
