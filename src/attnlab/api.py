"""The public entry points that choose an implementation: the only place that decides and falls back.

    flash_attention   exact attention, differentiable (§5–§7): the Triton FlashAttention-2 kernels
                      (``attnlab.gpu``) for CUDA tensors they cover, else the blockwise PyTorch
                      path (``attnlab.blockwise``)
    flash_attention_varlen   the same for a packed batch of variable-length sequences (flash-attn's
                      ``flash_attn_varlen_func`` layout): no padding, no attention across documents
    flash_decode      Flash-Decoding over a KV cache (§8.4): the Triton split-KV kernels for CUDA
                      tensors they cover, else the blockwise PyTorch path
    attention_forward / attention_backward   the two halves without autograd, for callers that own
                      the backward themselves (ring attention: ``attnlab.distributed``)

Every entry point takes the variants of ``attnlab.variants``: ``window=(left, right)`` (sliding
window, -1 unbounded; causal is right = 0), ``softcap`` and ``alibi_slopes``, with flash-attn's meaning.

Inputs are checked once, here; then the chosen implementation runs on the checked inputs. A CUDA
call that the kernels do not cover (float32, an odd head dim, triton missing, an old GPU) runs the
blockwise path after one ``RuntimeWarning`` per reason and process. Nothing below this module falls
back or imports it.

Shapes: ``q (B, H, Nq, D)``, ``k, v (B, Hkv, Nk, D)`` with ``H % Hkv == 0`` (GQA/MQA); causal masks
are aligned bottom-right when ``Nq != Nk`` (query i sees keys ``j <= i + Nk - Nq``), as a KV cache
needs; PyTorch SDPA's ``is_causal`` is top-left, and the two agree when ``Nq == Nk``.
"""

from __future__ import annotations

import functools

import torch

from ._checks import (
    check_backward_inputs,
    check_decode_inputs,
    check_deterministic,
    check_positive_int,
    check_qkv,
    check_variants,
    check_varlen,
    check_window,
    resolve_scale,
    seqlens_tensor,
)
from ._runtime import NATIVE_DECODE, triton_available, warn_once
from .blockwise.backward import attention_fn as _blockwise_attention
from .blockwise.decode import decode_fn as _blockwise_decode
from .blockwise.iostats import IOStats, check_stats

__all__ = ["flash_attention", "flash_attention_varlen", "flash_decode", "attention_forward", "attention_backward"]


def _warn_fallback(entry: str, why: tuple[str, str]) -> None:
    warn_once(f"{entry}:{why[0]}", f"attnlab.{entry}: the Triton kernels do not take {why[1]}; "
              "running the blockwise PyTorch path", stacklevel=4)


def _needs_grad(*tensors) -> bool:
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def _kernels_why(q, dims, needs_grad: bool):
    """None when the Triton prefill kernels take this call, else the (key, text) reason."""
    if not triton_available():
        return ("triton", "calls without triton installed (pip install 'attnlab[gpu]')")
    from .gpu import prefill

    return prefill.unsupported(q, dims, needs_grad=needs_grad)


def _variant_args(dims, q, causal, window, softcap, alibi_slopes, scale, deterministic, block_q, block_k):
    """The checks every prefill entry point shares: (mask, softcap, slopes (B, H) or None, scale)."""
    mask, softcap, slopes = check_variants(causal, window, softcap, alibi_slopes, dims.B, dims.H, q.device)
    check_deterministic(deterministic)
    for value, name in ((block_q, "block_q"), (block_k, "block_k")):
        if value is not None:
            check_positive_int(value, name)
    return mask, softcap, slopes, resolve_scale(scale, dims.D)


def flash_attention(q, k, v, *, causal: bool = False, window=None, softcap: float | None = None, alibi_slopes=None,
                    deterministic: bool = False, scale: float | None = None, return_lse: bool = False,
                    block_q: int | None = None, block_k: int | None = None):
    """Exact attention with FlashAttention's memory behaviour, differentiable (§5–§7).

    Arguments:
        q: (B, H, Nq, D); k: (B, Hkv, Nk, D); v: (B, Hkv, Nk, Dv); H % Hkv == 0.
        causal: bottom-right aligned mask (query i sees keys j <= i + Nk - Nq). Rows that see no key
            give out = 0 and lse = -inf.
        window: (left, right) sliding window: query i sees keys i+off-left <= j <= i+off+right,
            off = Nk - Nq, -1 = unbounded side (flash-attn's ``window_size``); causal=True is right = 0.
            Key blocks outside the window are skipped, so the cost grows as N·W, not N².
        softcap: scores become ``softcap·tanh(s/softcap)`` (Gemma 2); None = off.
        alibi_slopes: (H,) or (B, H) float32: the bias ``-slope·|i + off - j|`` (ALiBi) is added to the
            scores (after the softcap).
        deterministic: the backward gives bit-identical gradients run after run (no atomics in an
            order that varies).
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
    mask, softcap, slopes, scale = _variant_args(dims, q, causal, window, softcap, alibi_slopes, scale,
                                                 deterministic, block_q, block_k)
    if q.is_cuda and block_q is None and block_k is None:
        why = _kernels_why(q, dims, _needs_grad(q, k, v))
        if why is None:
            from .gpu import prefill

            out, lse = prefill.attention_fn(q, k, v, mask=mask, scale=scale, softcap=softcap, slopes=slopes,
                                            deterministic=deterministic)
            return (out, lse) if return_lse else out
        _warn_fallback("flash_attention", why)
    out, lse = _blockwise_attention(q, k, v, dims, mask=mask, scale=scale, softcap=softcap, slopes=slopes,
                                    block_q=block_q, block_k=block_k)
    return (out, lse) if return_lse else out


def flash_attention_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, *, max_seqlen_q: int | None = None,
                           max_seqlen_k: int | None = None, causal: bool = False, window=None,
                           softcap: float | None = None, alibi_slopes=None, deterministic: bool = False,
                           scale: float | None = None, return_lse: bool = False,
                           block_q: int | None = None, block_k: int | None = None):
    """Exact attention over a packed batch of variable-length sequences, differentiable.

    The layout is flash-attn's ``flash_attn_varlen_func``: the sequences are concatenated, without
    padding, and sequence b owns rows ``cu_seqlens_q[b]:cu_seqlens_q[b+1]`` of q and
    ``cu_seqlens_k[b]:cu_seqlens_k[b+1]`` of k and v. No query ever sees a key of another sequence.

    Arguments:
        q: (total_q, H, D); k: (total_k, Hkv, D); v: (total_k, Hkv, Dv); H % Hkv == 0.
        cu_seqlens_q, cu_seqlens_k: (B + 1,) int32 cumulative lengths on q's device, from 0 to
            total_q / total_k.
        max_seqlen_q, max_seqlen_k: at least the longest sequences (upper bounds are fine). Pass both
            to avoid a device synchronisation: on CUDA the kernels then read the lengths from device
            memory, nothing is read on the host and nothing is copied to the GPU, and the lengths'
            values are not checked (the kernels clamp them into the packed tensors: bad values give
            wrong numbers, never an access out of bounds). Without them, or off CUDA, the lengths are
            read and checked on the host (one synchronisation on a GPU).
        causal, window, softcap, alibi_slopes, deterministic, scale: as ``flash_attention``; masks are
            aligned bottom-right per sequence (off = that sequence's Nk - Nq). alibi_slopes (H,) or (B, H).
        return_lse: also return lse (H, total_q), float32 (flash-attn's varlen layout).
        block_q, block_k: the blockwise path's Br and Bc (giving either runs that path).
    Returns:
        out (total_q, H, Dv) in q's dtype, or (out, lse).
    """
    vdims = check_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k)
    mask, softcap, slopes, scale = _variant_args(vdims, q, causal, window, softcap, alibi_slopes, scale,
                                                 deterministic, block_q, block_k)
    if q.is_cuda and block_q is None and block_k is None:
        why = _kernels_why(q, vdims, _needs_grad(q, k, v))
        if why is None:
            from .gpu import prefill

            out, lse = prefill.varlen_attention_fn(q, k, v, vdims, mask=mask, scale=scale, softcap=softcap,
                                                   slopes=slopes, deterministic=deterministic)
            return (out, lse) if return_lse else out
        _warn_fallback("flash_attention_varlen", why)
    if vdims.cu_q is None:  # the blockwise path needs the lengths on the host: read and check them now
        vdims = check_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, check_values=True)
    from .blockwise.varlen import varlen_attention_fn

    out, lse = varlen_attention_fn(q, k, v, vdims, mask=mask, scale=scale, softcap=softcap, slopes=slopes,
                                   block_q=block_q, block_k=block_k)
    return (out, lse) if return_lse else out


def attention_forward(q, k, v, *, causal: bool = False, scale: float | None = None):
    """The forward alone, without autograd: (out, lse) with lse (B, H, Nq) natural-log, float32 (float64
    for float64 inputs). The Triton kernel on CUDA when it covers the call, else the blockwise path.

    With ``attention_backward`` this is the building block of algorithms that own their backward,
    e.g. ring attention, which merges per-block (out, lse) pairs with ``attnlab.softmax.merge``.
    """
    dims = check_qkv(q, k, v)
    mask = check_window(None, causal)
    scale = resolve_scale(scale, dims.D)
    with torch.no_grad():
        if q.is_cuda:
            why = _kernels_why(q, dims, False)
            if why is None:
                from .gpu import prefill_fwd

                return prefill_fwd.prefill_forward(q, k, v, mask=mask, scale=scale)
            _warn_fallback("attention_forward", why)
        from .blockwise.forward import fa2_forward
        from .blockwise.programs import resolve_blocks

        Br, Bc = resolve_blocks(None, None, dims)
        return fa2_forward(q, k, v, dims, mask=mask, scale=scale, Br=Br, Bc=Bc)


def attention_backward(dout, q, k, v, out, lse, *, causal: bool = False, scale: float | None = None,
                       dlse=None, deterministic: bool = False):
    """Gradients (dq, dk, dv) of one (q, k, v) block given the row statistics of the whole attention.

    ``out`` (B, H, Nq, Dv) and ``lse`` (B, H, Nq) may be the *final* output and logsumexp of rows whose keys
    span several blocks (P is recomputed as exp(S - lse)); the result is then this block's share of
    the gradient: dq summed over blocks, dk and dv of this block's keys — what ring attention sends
    round the ring. ``dlse`` is the gradient flowing into lse, if any. No autograd graph is built.
    """
    dims = check_qkv(q, k, v)
    mask = check_window(None, causal)
    scale = resolve_scale(scale, dims.D)
    deterministic = check_deterministic(deterministic)
    check_backward_inputs(q, dims, out, lse, dout, dlse)
    with torch.no_grad():
        if q.is_cuda:
            why = _kernels_why(q, dims, True)
            if why is None:
                from .gpu import prefill_bwd

                return prefill_bwd.prefill_backward(dout, q, k, v, out, lse, mask=mask, scale=scale, dlse=dlse,
                                                    deterministic=deterministic)
            _warn_fallback("attention_backward", why)
        from .blockwise.backward import fa2_backward
        from .blockwise.programs import resolve_blocks

        Br, Bc = resolve_blocks(None, None, dims)
        return fa2_backward(q, k, v, out, lse, dout, dims, mask=mask, scale=scale, Br=Br, Bc=Bc, dlse=dlse)


@functools.cache
def _gpu_decode():
    """attnlab.gpu.decode, imported once (on the first CUDA decode call: it needs triton)."""
    from .gpu import decode

    return decode


def flash_decode(q, k_cache, v_cache, *, cache_seqlens=None, block_table=None, num_splits: int | None = None,
                 causal: bool = True, window=None, softcap: float | None = None, alibi_slopes=None,
                 scale: float | None = None, stats: IOStats | None = None):
    """Flash-Decoding (§8.4): attention of a few new queries against a KV cache.

    Arguments:
        q: (B, H, Nq, D), Nq small (1 for plain decoding, a few for speculative steps).
        k_cache, v_cache: contiguous (B, Hkv, Lmax, D/Dv), or paged (num_pages, page_size, Hkv, D/Dv)
            when ``block_table`` (B, max_pages) int32/int64 of page ids is given (``attnlab.kvcache``).
        cache_seqlens: (B,) ints (a tensor or a list), keys held per sequence (default: the capacity).
        num_splits: K/V splits per (sequence, K/V head). None: on CUDA the kernels' split model
            (``attnlab.cost``) picks it; on the CPU one split (a CPU has no idle SMs to fill).
        causal: query i of sequence b sees keys j <= cache_seqlens[b] - Nq + i (bottom-right).
        window, softcap, alibi_slopes: as ``flash_attention``, with query i of sequence b at position
            cache_seqlens[b] - Nq + i; with a window only the keys inside it are read.
        scale: softmax scale, default 1/sqrt(D).
        stats: an ``IOStats`` to count the blockwise path's traffic into (forces that path).
    Returns:
        out (B, H, Nq, Dv) in q's dtype, lse (B, H, Nq) float32 (float64 for float64 inputs).
    """
    fast = NATIVE_DECODE[0]  # (set only where the native decode call is on and a plan's program is made)
    if fast is not None and stats is None and num_splits is None and causal is True and window is None \
            and softcap is None and alibi_slopes is None and scale is None \
            and (result := fast[0](fast[1], q, k_cache, v_cache, cache_seqlens, block_table)) is not None:
        return result
    key = None
    if stats is None and type(q) is torch.Tensor and q.is_cuda and triton_available():
        decode = _gpu_decode()
        # a call with the signature of an earlier supported call reuses its plan: no checks, no binding
        key = decode.plan_key(q, k_cache, v_cache, cache_seqlens, block_table, num_splits, causal, window,
                              softcap, alibi_slopes, scale)
        if key is not None and (result := decode.run_planned(key, q, k_cache, v_cache, cache_seqlens, block_table,
                                                             alibi_slopes)) is not None:
            return result
    cache_seqlens = seqlens_tensor(cache_seqlens, q)
    on_cuda = isinstance(q, torch.Tensor) and q.is_cuda
    # the page ids and lengths are checked on the host except on CUDA, where that would synchronise
    dims = check_decode_inputs(q, k_cache, v_cache, cache_seqlens, block_table, check_values=not on_cuda)
    mask, softcap, slopes = check_variants(causal, window, softcap, alibi_slopes, dims.B, dims.H, q.device)
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
                                        block_table=block_table, num_splits=num_splits, mask=mask, scale=scale,
                                        softcap=softcap, slopes=slopes, key=key)
        _warn_fallback("flash_decode", why)
        check_decode_inputs(q, k_cache, v_cache, cache_seqlens, block_table)  # now the values: read on the host
    return _blockwise_decode(q, k_cache, v_cache, dims, cache_seqlens=cache_seqlens, block_table=block_table,
                             num_splits=num_splits, mask=mask, scale=scale, softcap=softcap, slopes=slopes,
                             stats=stats)
