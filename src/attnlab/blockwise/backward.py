"""Blockwise FlashAttention-2 backward and the autograd function around it (§7.2–§7.4, §7.7).

* ``flash_backward`` — recompute ``P`` from ``L`` (§7.2), ``D_i = rowsum(dO_i ∘ O_i)`` (§7.3), K/V blocks
  outside, ``dQ`` accumulated by atomic adds (§7.4).
* ``flash_attention_blockwise`` — differentiable attention: an ``autograd.Function`` whose forward is
  ``flash_forward`` and whose backward is ``flash_backward``; it saves only q, k, v, O and L (§7.7).

Shapes as in ``attnlab.blockwise.forward``. The variants: a K/V block visits only the Q blocks whose
window reaches it; ALiBi is a constant of the scores (no gradient for the slopes); softcap multiplies
``dS`` by its derivative ``1 − (y/softcap)²``, y the capped score.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from .._checks import causal_offset, check_backward_inputs, check_qkv, check_variants, resolve_scale
from .._runtime import LOG2E
from .forward import check_no_grad, fa2_forward, log2_units
from .iostats import IOStats, check_stats
from .programs import NEG_INF, acc_dtype, q_block, resolve_blocks
from .tiles import TileMasks, alibi_tile, mask_tile_, query_blocks, softcap_tile

__all__ = ["flash_backward", "flash_attention_blockwise"]


def flash_backward(q, k, v, out, lse, dout, *, causal: bool = False, scale: float | None = None, window=None,
                   softcap: float | None = None, alibi_slopes=None, block_q: int | None = None,
                   block_k: int | None = None, stats: IOStats | None = None, dlse=None):
    """FlashAttention-2 backward (§7.2–§7.4): gradients of ``out = attention(q, k, v)``.

    ``P`` is recomputed from the saved ``lse`` (already normalised, no online softmax);
    ``D_i = rowsum(dO_i ∘ O_i)`` is computed once up front, so ``dS = P ∘ (dP - D_i)`` needs one block
    at a time. K/V blocks are outside: ``dK_j``, ``dV_j`` accumulate on chip and are written once;
    ``dQ_i`` receives one atomic add per computed (Q block, K/V block) pair. For GQA the ``dK``, ``dV`` of
    a K/V head sum over its group of query heads. ``dlse`` (B, H, Nq), optional, is the gradient flowing
    into ``lse`` itself (``dS += P ∘ dlse``).

    Arguments: as ``flash_forward`` (causal, window, softcap, alibi_slopes as given to it), plus out
    (B, H, Nq, Dv), lse (B, H, Nq) from the forward and dout (B, H, Nq, Dv). Returns dq, dk, dv in the
    shapes and dtypes of q, k, v.
    ``stats`` counts: O and dO read and D written by the preprocessing; per (batch, K/V head) K_j, V_j
    read once if some query sees them and dK_j, dV_j written once (zeros where none does); per computed
    pair Q_i, dO_i, L_i, D_i read and dQ_i atomically added (the zero fill of the dQ accumulator is not
    counted).
    """
    dims = check_qkv(q, k, v)
    check_no_grad("flash_backward", q, k, v, out, lse, dout, *(() if dlse is None else (dlse,)))
    check_stats(stats)
    check_backward_inputs(q, dims, out, lse, dout, dlse)
    mask, softcap, slopes = check_variants(causal, window, softcap, alibi_slopes, dims.B, dims.H, q.device)
    Br, Bc = resolve_blocks(block_q, block_k, dims)
    return fa2_backward(q, k, v, out, lse, dout, dims, mask=mask, scale=resolve_scale(scale, dims.D),
                        softcap=softcap, slopes=slopes, Br=Br, Bc=Bc, stats=stats, dlse=dlse)


def fa2_backward(q, k, v, out, lse, dout, dims, *, mask, scale: float, softcap=None, slopes=None, Br: int,
                 Bc: int, stats: IOStats | None = None, dlse=None):
    """``flash_backward`` on inputs already checked, without grad."""
    B, H, Hkv, Nq, Nk, D, Dv, G = dims.B, dims.H, dims.Hkv, dims.Nq, dims.Nk, dims.D, dims.Dv, dims.group
    acc_dt = acc_dtype(q.dtype)
    q5 = q.reshape(B, Hkv, G, Nq, D)  # the G query heads of each K/V head side by side
    do5 = dout.reshape(B, Hkv, G, Nq, Dv)  # as q
    dq_acc = torch.zeros(B, Hkv, G, Nq, D, dtype=acc_dt, device=q.device)  # (B, Hkv, G, Nq, D), in "HBM"
    dk = torch.empty_like(k)
    dv = torch.empty_like(v)
    softcap2, slopes2 = log2_units(softcap, slopes, acc_dt)
    bwd_programs(q5, k, v, out.reshape(B, Hkv, G, Nq, Dv), lse.reshape(B, Hkv, G, Nq), do5,
                 None if dlse is None else dlse.reshape(B, Hkv, G, Nq), dq_acc, dk, dv, masks=TileMasks(mask),
                 off=causal_offset(Nq, Nk), scale=scale, softcap2=softcap2,
                 slopes2=None if slopes2 is None else slopes2.reshape(B, Hkv, G), Br=Br, Bc=Bc, stats=stats)
    return dq_acc.view(B, H, Nq, D).to(q.dtype), dk, dv  # (B, Hkv, G, Nq, D) -> (B, H, Nq, D)


def bwd_programs(q5, k, v, o5, lse5, do5, dlse5, dq_acc, dk, dv, *, masks: TileMasks, off: int, scale: float, softcap2=None,
                 slopes2=None, Br: int, Bc: int, stats=None):
    """The backward loop of some programs: q5 (..., G, Nq, D), k (..., Nk, D), v (..., Nk, Dv), o5 and do5
    (..., G, Nq, Dv), lse5 and dlse5 (..., G, Nq); adds into dq_acc (..., G, Nq, D) and writes dk, dv
    (..., Nk, D/Dv). The leading dims index programs (batch, K/V head); ``softcap2``, ``slopes2`` (..., G)
    in base-2 units (``log2_units``); ``masks`` holds the call's Mask."""
    mask = masks.mask
    *lead, G, Nq, D = q5.shape
    Nk, Dv = k.shape[-2], v.shape[-1]
    n_prog = math.prod(lead)
    acc_dt = dq_acc.dtype
    # -- preprocess: D_i = rowsum(dO_i ∘ O_i)  (..., G, Nq)
    Dvec = (do5.to(acc_dt) * o5.to(acc_dt)).sum(dim=-1)
    if dlse5 is not None:
        Dvec = Dvec - dlse5.to(acc_dt)
    L5 = lse5.to(acc_dt) * LOG2E  # in log2 units, for exp2
    L5 = L5.masked_fill(L5 == NEG_INF, float("inf"))  # rows that saw no key: P = exp(S - inf) = 0
    if stats is not None:
        stats.read("O", n_prog * G * Nq * Dv)
        stats.read("dO", n_prog * G * Nq * Dv)
        stats.write("D", n_prog * G * Nq)
    nq_blocks = -(-Nq // Br)
    for j0 in range(0, Nk, Bc):  # outer: one K/V block per thread block
        j1 = min(j0 + Bc, Nk)
        kj = k[..., j0:j1, :].to(acc_dt)  # (..., Bc, D)
        vj = v[..., j0:j1, :].to(acc_dt)  # (..., Bc, Dv)
        dk_j = torch.zeros(*lead, j1 - j0, D, dtype=acc_dt, device=q5.device)  # on chip
        dv_j = torch.zeros(*lead, j1 - j0, Dv, dtype=acc_dt, device=q5.device)
        n_done = n_masked = 0
        for i0 in query_blocks(mask, j0, j1, off, Nq, Br):  # inner: every Q block that sees K_j
            i1 = min(i0 + Br, Nq)
            kind = mask.block_kind(i0, i1, j0, j1, off)
            if kind == "skip":
                continue
            R = G * (i1 - i0)
            qi = q_block(q5, i0, i1, acc_dt)  # (..., G·Br, D)
            doi = q_block(do5, i0, i1, acc_dt)  # (..., G·Br, Dv)
            Li = L5[..., i0:i1].reshape(*lead, R, 1)  # (..., G·Br, 1)
            Di = Dvec[..., i0:i1].reshape(*lead, R, 1)  # (..., G·Br, 1)
            # -- recompute P from L: P = exp(S - L) = 2^(S·log2 e - L·log2 e)
            s = torch.matmul(qi, kj.transpose(-1, -2)).mul_(scale * LOG2E)  # (..., G·Br, Bc)
            if softcap2 is not None:
                s, dcap = softcap_tile(s, softcap2)  # dcap = d(capped)/d(raw score)
            if slopes2 is not None:
                s = alibi_tile(s, slopes2, i0, i1, j0, j1, off, G)
            if kind == "mask":
                mask_tile_(s, masks, i0, i1, j0, j1, off, G)
                n_masked += 1
            p = s.sub_(Li).exp2_()
            # -- dV_j += Pᵀ dO_i;  dP = dO_i V_jᵀ;  dS = P ∘ (dP - D_i)
            dv_j += torch.matmul(p.transpose(-1, -2), doi)
            ds = p.mul_(torch.matmul(doi, vj.transpose(-1, -2)).sub_(Di))
            if softcap2 is not None:
                ds.mul_(dcap)  # through the cap: dS_raw = dS · (1 - (y/softcap)²)
            # -- dQ_i += scale · dS K_j  (an atomic add: other K/V blocks add to the same rows)
            # (..., G·Br, D) -> (..., G, Br, D)
            dq_acc[..., i0:i1, :] += torch.matmul(ds, kj).mul_(scale).view(*lead, G, i1 - i0, D)
            # -- dK_j += scale · dSᵀ Q_i
            dk_j += torch.matmul(ds.transpose(-1, -2), qi).mul_(scale)
            n_done += 1
            if stats is not None:
                stats.read("Q", n_prog * R * D)
                stats.read("dO", n_prog * R * Dv)
                stats.read("L", n_prog * R)
                stats.read("D", n_prog * R)
                stats.atomic_add("dQ", n_prog * R * D)
        dk[..., j0:j1, :] = dk_j  # written once (zeros if no query sees K_j)
        dv[..., j0:j1, :] = dv_j
        if stats is not None:
            if n_done:  # a K/V block that no query sees is never loaded
                stats.read("K", n_prog * (j1 - j0) * D)
                stats.read("V", n_prog * (j1 - j0) * Dv)
            stats.write("dK", n_prog * (j1 - j0) * D)
            stats.write("dV", n_prog * (j1 - j0) * Dv)
            stats.pairs(computed=n_prog * n_done, skipped=n_prog * (nq_blocks - n_done), masked=n_prog * n_masked)


# -- §7.7 autograd: save q, k, v, O, L only ---------------------------------------------------------


@dataclass(frozen=True)
class Passes:
    """A blockwise attention's two passes, for ``AttentionFn``: ``forward(q, k, v, dims, *, mask, scale,
    softcap, slopes, Br, Bc)`` -> (out, lse) and ``backward(q, k, v, out, lse, dout, dlse, dims, *, ...)``
    -> (dq, dk, dv); ``name`` for errors."""

    name: str
    forward: Callable
    backward: Callable


class AttentionFn(torch.autograd.Function):
    """Autograd of a blockwise attention (dense or packed): the forward saves q, k, v, out and lse; the
    backward recomputes the scores block by block (§7)."""

    @staticmethod
    def forward(ctx, q, k, v, passes: Passes, dims, mask, scale, softcap, slopes, Br, Bc):
        out, lse = passes.forward(q, k, v, dims, mask=mask, scale=scale, softcap=softcap, slopes=slopes,
                                  Br=Br, Bc=Bc)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.passes = passes
        ctx.args = (dims, mask, scale, softcap, slopes, Br, Bc)
        ctx.set_materialize_grads(False)
        return out, lse

    @staticmethod
    def backward(ctx, dout, dlse):
        if torch.is_grad_enabled():
            raise RuntimeError(f"{ctx.passes.name}: double backward (create_graph=True) is not supported")
        q, k, v, out, lse = ctx.saved_tensors
        dims, mask, scale, softcap, slopes, Br, Bc = ctx.args
        if dout is None:
            dout = torch.zeros_like(out)
        dq, dk, dv = ctx.passes.backward(q, k, v, out, lse, dout, dlse, dims, mask=mask, scale=scale,
                                         softcap=softcap, slopes=slopes, Br=Br, Bc=Bc)
        return dq, dk, dv, None, None, None, None, None, None, None, None


def _dense_backward(q, k, v, out, lse, dout, dlse, dims, **kw):
    return fa2_backward(q, k, v, out, lse, dout, dims, dlse=dlse, **kw)


DENSE = Passes("attnlab.flash_attention", fa2_forward, _dense_backward)


def attention_fn(q, k, v, dims, *, mask, scale: float, softcap: float | None = None, slopes=None,
                 block_q: int | None = None, block_k: int | None = None):
    """``flash_attention_blockwise`` on inputs already checked (``dims`` from ``check_qkv``, ``mask`` a
    ``variants.Mask``, ``slopes`` (B, H) float32 or None): returns (out, lse), both differentiable in
    q, k, v."""
    Br, Bc = resolve_blocks(block_q, block_k, dims)
    return AttentionFn.apply(q, k, v, DENSE, dims, mask, scale, softcap, slopes, Br, Bc)


def flash_attention_blockwise(q, k, v, *, causal: bool = False, scale: float | None = None, window=None,
                              softcap: float | None = None, alibi_slopes=None, return_lse: bool = False,
                              block_q: int | None = None, block_k: int | None = None):
    """Differentiable blockwise attention in PyTorch (§7.7): forward ``flash_forward``, backward
    ``flash_backward``; autograd keeps only q, k, v, out and lse. The variants (window, softcap,
    alibi_slopes) as in ``flash_forward``. Block sizes: ``cpu_block_sizes`` unless given (Br =
    ``block_q``, Bc = ``block_k``).

    Returns ``out`` (B, H, Nq, Dv), or ``(out, lse)`` with ``return_lse=True`` (lse is differentiable too).
    """
    dims = check_qkv(q, k, v)
    mask, softcap, slopes = check_variants(causal, window, softcap, alibi_slopes, dims.B, dims.H, q.device)
    out, lse = attention_fn(q, k, v, dims, mask=mask, scale=resolve_scale(scale, dims.D), softcap=softcap,
                            slopes=slopes, block_q=block_q, block_k=block_k)
    return (out, lse) if return_lse else out
