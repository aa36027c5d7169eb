"""Packed variable-length batches, blockwise (flash-attn's varlen layout; §5.1 and §7 per sequence).

A packed batch concatenates its sequences instead of padding them to the longest: q (total_q, H, D),
k (total_k, Hkv, D), v (total_k, Hkv, Dv), and cumulative lengths ``cu_seqlens_q`` / ``cu_seqlens_k``
(B + 1,) saying which rows belong to which sequence. Each (sequence, K/V head) is its own set of
programs, run on views of the packed tensors: nothing is computed across two documents, no padding
is read or written, and each sequence has its own bottom-right alignment ``off = Nk_b − Nq_b``.

* ``flash_forward_varlen``             — the forward, with ``IOStats`` (compare a packed batch's traffic
  with the same documents padded to the longest, run through ``flash_forward``).
* ``flash_attention_varlen_blockwise`` — differentiable: forward and backward per sequence, saving only
  q, k, v, out and lse.

Results: out (total_q, H, Dv) in q's dtype, lse (H, total_q) float32 (float64 for float64 inputs).
"""

from __future__ import annotations

import torch

from .._checks import AttnDims, check_variants, check_varlen, resolve_scale
from .backward import AttentionFn, Passes, bwd_programs
from .forward import check_no_grad, fa2_programs, log2_units
from .iostats import IOStats, check_stats
from .programs import acc_dtype, program_chunks, programs_per_step, resolve_blocks, run_programs
from .tiles import TileMasks

__all__ = ["flash_attention_varlen_blockwise", "flash_forward_varlen"]


def _rows(x: torch.Tensor, start: int, n: int, Hkv: int) -> torch.Tensor:
    """Rows start..start+n of a packed (total, H, E) tensor as (Hkv, G, n, E), a view."""
    return x[start:start + n].unflatten(1, (Hkv, -1)).permute(1, 2, 0, 3)  # (n, Hkv, G, E) -> (Hkv, G, n, E)


def _lse_rows(lse: torch.Tensor, start: int, n: int, Hkv: int) -> torch.Tensor:
    """Columns start..start+n of a packed (H, total) tensor as (Hkv, G, n), a view."""
    return lse[:, start:start + n].unflatten(0, (Hkv, -1))


def _keys(x: torch.Tensor, start: int, n: int) -> torch.Tensor:
    """Rows start..start+n of a packed (total_k, Hkv, E) tensor as (Hkv, n, E), a view."""
    return x[start:start + n].transpose(0, 1)


def _chunks(vdims, Br: int, Bc: int, device) -> list:
    """(sequence, K/V heads) steps: every sequence with queries, its heads as ``programs_per_step`` says."""
    dims = AttnDims(1, vdims.H, vdims.Hkv, vdims.max_q, vdims.max_k, vdims.D, vdims.Dv)
    heads = [hs for _, hs in program_chunks(1, vdims.Hkv, programs_per_step(dims, Br, Bc, device))]
    return [(b, hs) for b in range(vdims.B) if vdims.seq(b)[1] > 0 for hs in heads]


def _per_sequence(q, vdims, softcap, slopes):
    """What the two passes share: the accumulator dtype, softcap in log2 units, and ``views(b, hs,
    rows=, lse_rows=, keys=)``: sequence b's part of packed tensors for K/V heads ``hs`` — rows of
    (total_q, H, E) tensors as (Hkv, G, n, E), columns of (H, total_q) ones as (Hkv, G, n), keys of
    (total_k, Hkv, E) ones as (Hkv, n, E) — with its offset Nk_b − Nq_b and its slopes (log2 units)."""
    acc_dt = acc_dtype(q.dtype)
    Hkv = vdims.Hkv
    softcap2, slopes2 = log2_units(softcap, slopes, acc_dt)
    slopes3 = None if slopes2 is None else slopes2.reshape(vdims.B, Hkv, -1)  # (B, H) -> (B, Hkv, G)

    def views(b, hs, *, rows=(), lse_rows=(), keys=()):
        q0, nq, k0, nk = vdims.seq(b)
        return ([_rows(x, q0, nq, Hkv)[hs] for x in rows],
                [None if x is None else _lse_rows(x, q0, nq, Hkv)[hs] for x in lse_rows],
                [_keys(x, k0, nk)[hs] for x in keys], nk - nq, None if slopes3 is None else slopes3[b, hs])

    return acc_dt, softcap2, views


def varlen_forward(q, k, v, vdims, *, mask, scale: float, softcap=None, slopes=None, Br: int, Bc: int,
                   stats: IOStats | None = None):
    """The forward of a packed batch, inputs already checked (``vdims`` from ``check_varlen``), without grad."""
    acc_dt, softcap2, views = _per_sequence(q, vdims, softcap, slopes)
    masks = TileMasks(mask)  # one for all sequences: a pattern is keyed by j0 - i0 - off and its shape
    out = torch.empty(vdims.total_q, vdims.H, vdims.Dv, dtype=q.dtype, device=q.device)  # (total_q, H, Dv)
    lse = torch.empty(vdims.H, vdims.total_q, dtype=acc_dt, device=q.device)  # (H, total_q)

    def step(chunk):
        (qs, os), (ls,), (ks, vs), off, slopes2 = views(*chunk, rows=(q, out), lse_rows=(lse,), keys=(k, v))
        fa2_programs(qs, ks, vs, os, ls, masks=masks, off=off, scale=scale, softcap2=softcap2, slopes2=slopes2,
                     Br=Br, Bc=Bc, stats=stats)

    run_programs(step, _chunks(vdims, Br, Bc, q.device), q.device, stats)
    return out, lse


def varlen_backward(q, k, v, out, lse, dout, dlse, vdims, *, mask, scale: float, softcap=None, slopes=None,
                    Br: int, Bc: int, stats: IOStats | None = None):
    """Gradients (dq, dk, dv) of a packed batch, sequence by sequence (``fa2_backward``'s loop on views)."""
    acc_dt, softcap2, views = _per_sequence(q, vdims, softcap, slopes)
    masks = TileMasks(mask)
    dq_acc = torch.zeros(vdims.total_q, vdims.H, vdims.D, dtype=acc_dt, device=q.device)  # (total_q, H, D)
    dk = torch.zeros_like(k)  # keys of a sequence without queries get no gradient
    dv = torch.zeros_like(v)

    def step(chunk):
        (qs, os, dos, dqs), (ls, dls), (ks, vs, dks, dvs), off, slopes2 = views(
            *chunk, rows=(q, out, dout, dq_acc), lse_rows=(lse, dlse), keys=(k, v, dk, dv))
        bwd_programs(qs, ks, vs, os, ls, dos, dls, dqs, dks, dvs, masks=masks, off=off, scale=scale,
                     softcap2=softcap2, slopes2=slopes2, Br=Br, Bc=Bc, stats=stats)

    run_programs(step, _chunks(vdims, Br, Bc, q.device), q.device, stats)
    return dq_acc.to(q.dtype), dk, dv


VARLEN = Passes("attnlab.flash_attention_varlen", varlen_forward, varlen_backward)


def _blocks(block_q, block_k, vdims) -> tuple[int, int]:
    """Block sizes: as given, else ``cpu_block_sizes`` for the longest sequence."""
    return resolve_blocks(block_q, block_k, AttnDims(1, vdims.H, vdims.Hkv, max(1, vdims.max_q),
                                                     max(1, vdims.max_k), vdims.D, vdims.Dv))


def varlen_attention_fn(q, k, v, vdims, *, mask, scale: float, softcap: float | None = None, slopes=None,
                        block_q: int | None = None, block_k: int | None = None):
    """``flash_attention_varlen_blockwise`` on inputs already checked (``vdims`` from ``check_varlen`` with
    the lengths read on the host, ``vdims.cu_q`` not None; ``mask`` a ``variants.Mask``, ``slopes`` (B, H)
    float32 or None): (out (total_q, H, Dv), lse (H, total_q)), both differentiable in q, k, v."""
    Br, Bc = _blocks(block_q, block_k, vdims)
    return AttentionFn.apply(q, k, v, VARLEN, vdims, mask, scale, softcap, slopes, Br, Bc)


def flash_attention_varlen_blockwise(q, k, v, cu_seqlens_q, cu_seqlens_k, *, causal: bool = False,
                                     window=None, softcap: float | None = None, alibi_slopes=None,
                                     scale: float | None = None, return_lse: bool = False,
                                     block_q: int | None = None, block_k: int | None = None):
    """Differentiable attention of a packed variable-length batch (blockwise, any device).

    Arguments:
        q: (total_q, H, D); k: (total_k, Hkv, D); v: (total_k, Hkv, Dv); H % Hkv == 0.
        cu_seqlens_q, cu_seqlens_k: (B + 1,) int32 cumulative lengths from 0 to total_q / total_k;
            sequence b owns rows cu[b]:cu[b+1] (empty sequences are allowed).
        causal, window, softcap, alibi_slopes, scale: as ``flash_forward``, per sequence (off = Nk_b − Nq_b);
            alibi_slopes (H,) or (B, H).
        block_q, block_k: Br and Bc (None: ``cpu_block_sizes`` for the longest sequence).
    Returns:
        out (total_q, H, Dv), or (out, lse (H, total_q)) with ``return_lse=True``.
    """
    vdims = check_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k)
    mask, softcap, slopes = check_variants(causal, window, softcap, alibi_slopes, vdims.B, vdims.H, q.device)
    out, lse = varlen_attention_fn(q, k, v, vdims, mask=mask, scale=resolve_scale(scale, vdims.D),
                                   softcap=softcap, slopes=slopes, block_q=block_q, block_k=block_k)
    return (out, lse) if return_lse else out


def flash_forward_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k, *, causal: bool = False, window=None,
                         softcap: float | None = None, alibi_slopes=None, scale: float | None = None,
                         block_q: int | None = None, block_k: int | None = None, stats: IOStats | None = None):
    """The forward of a packed variable-length batch, counted (not differentiable).

    Arguments as ``flash_attention_varlen_blockwise``; ``stats`` counts as ``flash_forward`` does, summed
    over the sequences: each sequence reads its own Q rows once and the K/V blocks its queries reach,
    writes its O rows and L once; no padding is read, written or computed.
    Returns out (total_q, H, Dv) in q's dtype, lse (H, total_q) float32 (float64 for float64 inputs).
    """
    vdims = check_varlen(q, k, v, cu_seqlens_q, cu_seqlens_k)
    check_no_grad("flash_forward_varlen", q, k, v)
    check_stats(stats)
    mask, softcap, slopes = check_variants(causal, window, softcap, alibi_slopes, vdims.B, vdims.H, q.device)
    Br, Bc = _blocks(block_q, block_k, vdims)
    return varlen_forward(q, k, v, vdims, mask=mask, scale=resolve_scale(scale, vdims.D), softcap=softcap,
                          slopes=slopes, Br=Br, Bc=Bc, stats=stats)
