"""Flash-Decoding in PyTorch, blockwise (§8.4): a few new queries against a KV cache.

The K/V sequence is cut into ``num_splits`` segments; each segment gives a partial ``(out, lse)`` as
one GPU thread block would, and the partials are merged with the ⊕ of §4.4 (``attnlab.softmax.merge``).
The cache is contiguous ``(B, Hkv, Lmax, D)`` or paged ``(num_pages, page_size, Hkv, D)`` with a block
table (see ``attnlab.kvcache``). The variants (``attnlab.variants``) apply per sequence, its queries
aligned bottom-right with its own keys (``off = cache_seqlens[b] − Nq``); with a sliding window only
the keys some query of a sequence can see are split and read.
"""

from __future__ import annotations

import torch

from .._checks import check_decode_inputs, check_positive_int, check_variants, resolve_scale, seqlens_tensor
from ..softmax import AttnState, merge
from ..variants import score_mod
from .iostats import IOStats, check_stats
from .programs import NEG_INF, acc_dtype

__all__ = ["flash_decode_blockwise"]


def _cache_slice(cache, block_table, page_size, a: int, b: int, seqlens_t) -> torch.Tensor:
    """Keys/values at positions a..b-1 of every sequence: (B, Hkv, b - a, D).

    Contiguous: a view. Paged: gathered page by page through block_table (positions past a sequence's
    length read page 0, and are masked)."""
    if block_table is None:
        return cache[:, :, a:b]
    pos = torch.arange(a, b, device=cache.device)
    pages = block_table[:, pos // page_size].long()  # (B, n)
    pages = torch.where(pos.unsqueeze(0) < seqlens_t.unsqueeze(1), pages, torch.zeros_like(pages))
    return cache[pages, (pos % page_size).unsqueeze(0)].permute(0, 2, 1, 3)  # (B, n, Hkv, D) -> (B, Hkv, n, D)


def flash_decode_blockwise(q, k_cache, v_cache, *, cache_seqlens=None, block_table=None,
                           num_splits: int | None = None, causal: bool = True, window=None,
                           softcap: float | None = None, alibi_slopes=None, scale: float | None = None,
                           stats: IOStats | None = None):
    """Flash-Decoding in PyTorch (§8.4): attention of a few new queries against a KV cache.

    Arguments:
        q: (B, H, Nq, D), Nq small (1 for plain decoding, a few for speculative steps).
        k_cache, v_cache: contiguous (B, Hkv, Lmax, D/Dv), or paged (num_blocks, page_size, Hkv, D/Dv)
            when ``block_table`` (B, max_pages; int32/int64: page ids of each sequence) is given.
        cache_seqlens: (B,) ints, keys held per sequence (default: the whole capacity, Lmax or
            max_pages·page_size); 0 is allowed and gives out 0, lse -inf.
        num_splits: S segments of the K/V sequence (default 1 on the CPU: a CPU has no idle SMs to fill).
            The keys some query may see, ``[lo, hi)`` over the batch (``[0, max(cache_seqlens))``
            without a window), are cut into S segments of ``ceil((hi - lo)/S)`` keys (the last shorter,
            trailing ones empty when S exceeds the keys); empty segments give (0, -inf) partials,
            which ⊕ ignores.
        causal: query i of sequence b sees keys j <= cache_seqlens[b] - Nq + i (bottom-right, per
            sequence); with False it sees every key j < cache_seqlens[b].
        window, softcap, alibi_slopes: as ``flash_forward``, with off = cache_seqlens[b] - Nq.
    Returns:
        out (B, H, Nq, Dv) in q's dtype, lse (B, H, Nq) in float32 (float64 for float64 inputs).
    ``stats`` counts per (batch, K/V head, segment): q read, the keys and values of the segment that some
    query of the sequence may see read, a partial O_split and L_split written; then the merge reads
    them all and writes O, L.
    """
    cache_seqlens = seqlens_tensor(cache_seqlens, q)
    dims = check_decode_inputs(q, k_cache, v_cache, cache_seqlens, block_table)
    check_stats(stats)
    if num_splits is not None:
        check_positive_int(num_splits, "num_splits")
    mask, softcap, slopes = check_variants(causal, window, softcap, alibi_slopes, dims.B, dims.H, q.device)
    return decode_fn(q, k_cache, v_cache, dims, cache_seqlens=cache_seqlens, block_table=block_table,
                     num_splits=num_splits, mask=mask, scale=resolve_scale(scale, dims.D), softcap=softcap,
                     slopes=slopes, stats=stats)


def decode_fn(q, k_cache, v_cache, dims, *, cache_seqlens, block_table, num_splits: int | None, mask,
              scale: float, softcap: float | None = None, slopes=None, stats: IOStats | None = None):
    """``flash_decode_blockwise`` on inputs already checked (``dims`` from ``check_decode_inputs``,
    ``mask`` a ``variants.Mask``, ``slopes`` (B, H) float32 or None)."""
    page_size = dims.page_size or 0
    seqlens = [dims.capacity] * dims.B if cache_seqlens is None else cache_seqlens.tolist()
    B, H, Hkv, Nq, D, Dv, G = dims.B, dims.H, dims.Hkv, dims.Nq, dims.D, dims.Dv, dims.group
    S = 1 if num_splits is None else num_splits
    acc_dt = acc_dtype(q.dtype)
    dev = q.device
    # the keys [lo, hi) some query of sequence b may see (its off = n - Nq)
    ranges = [mask.key_range(0, Nq, n - Nq, n) for n in seqlens]
    seen = [(lo, hi) for lo, hi in ranges if lo < hi]
    span_lo, span_hi = (min(r[0] for r in seen), max(r[1] for r in seen)) if seen else (0, 0)
    seg = -(-(span_hi - span_lo) // S)  # keys per segment
    seqlens_t = torch.tensor(seqlens, dtype=torch.long, device=dev)
    qg = q.reshape(B, Hkv, G * Nq, D).to(acc_dt) * scale  # rows: G heads × Nq queries
    row_i = torch.arange(Nq, device=dev).repeat(G)  # query index of each row
    # each row's position in its sequence's keys, i + off: (B, 1, G·Nq, 1)
    row_pos = (seqlens_t.view(B, 1) - Nq + row_i.view(1, -1)).view(B, 1, G * Nq, 1)
    seqlens_4 = seqlens_t.view(B, 1, 1, 1)
    slopes_rows = None  # (B, Hkv, G·Nq, 1): each row's head's slope
    if slopes is not None:
        slopes_rows = slopes.to(acc_dt).view(B, Hkv, G, 1).expand(B, Hkv, G, Nq).reshape(B, Hkv, G * Nq, 1)
    state = None
    for s_idx in range(S):  # every segment is an independent thread block on a GPU
        a, b = min(span_lo + s_idx * seg, span_hi), min(span_lo + (s_idx + 1) * seg, span_hi)
        if b > a:
            kj = _cache_slice(k_cache, block_table, page_size, a, b, seqlens_t).to(acc_dt)  # (B, Hkv, n, D)
            vj = _cache_slice(v_cache, block_table, page_size, a, b, seqlens_t).to(acc_dt)
            scores = torch.matmul(qg, kj.transpose(-1, -2))  # (B, Hkv, G·Nq, n)
            pos = torch.arange(a, b, device=dev).view(1, 1, 1, -1)
            if softcap is not None or slopes_rows is not None:
                scores = score_mod(scores, softcap=softcap, slopes=slopes_rows, i=row_pos, j=pos, off=0)
            hidden = pos >= seqlens_4  # past the sequence's keys
            if not mask.dense:
                hidden = hidden | ~mask.visible(row_pos, pos, 0)
            scores.masked_fill_(hidden, NEG_INF)
            m = scores.amax(dim=-1)
            base = m.masked_fill(m == NEG_INF, 0.0)
            p = scores.sub_(base.unsqueeze(-1)).exp_()
            l = p.sum(dim=-1)
            o = torch.matmul(p, vj)
            # the partial a kernel writes: normalised out and its lse
            part_out = o / torch.where(l == 0, 1.0, l).unsqueeze(-1)
            part_lse = m + torch.log(l)
        else:
            part_out = torch.zeros(B, Hkv, G * Nq, Dv, dtype=acc_dt, device=dev)
            part_lse = torch.full((B, Hkv, G * Nq), NEG_INF, dtype=acc_dt, device=dev)
        # -- ⊕ the partial into the running result: (m, ℓ, o) = (lse, 1, out), or (-inf, 0, 0) if empty
        part = AttnState(part_lse, (part_lse > NEG_INF).to(acc_dt), part_out)
        state = part if state is None else merge(state, part)
        if stats is not None:
            # keys of this segment that some query of each sequence may see
            held = [max(0, min(b, hi) - max(a, lo)) for lo, hi in ranges]
            stats.read("Q", B * H * Nq * D)
            stats.read("K", Hkv * sum(held) * D)
            stats.read("V", Hkv * sum(held) * Dv)
            stats.write("O_split", B * H * Nq * Dv)
            stats.write("L_split", B * H * Nq)
            nonempty = sum(1 for h in held if h > 0)
            stats.pairs(computed=Hkv * nonempty, skipped=Hkv * (B - nonempty))
    if stats is not None:  # the merge kernel
        stats.read("O_split", S * B * H * Nq * Dv)
        stats.read("L_split", S * B * H * Nq)
        stats.write("O", B * H * Nq * Dv)
        stats.write("L", B * H * Nq)
    out = state.finish().to(q.dtype).view(B, H, Nq, Dv)  # (B, Hkv, G·Nq, Dv) -> (B, H, Nq, Dv)
    lse = state.lse.view(B, H, Nq)  # (B, Hkv, G·Nq) -> (B, H, Nq)
    return out, lse
