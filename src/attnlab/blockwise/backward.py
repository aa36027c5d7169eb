"""Blockwise FlashAttention-2 backward and the autograd function around it (§7.2–§7.4, §7.7).

* ``flash_backward`` — recompute ``P`` from ``L`` (§7.2), ``D_i = rowsum(dO_i ∘ O_i)`` (§7.3), K/V blocks
  outside, ``dQ`` accumulated by atomic adds (§7.4).
* ``flash_attention_blockwise`` — differentiable attention: an ``autograd.Function`` whose forward is
  ``flash_forward`` and whose backward is ``flash_backward``; it saves only q, k, v, O and L (§7.7).

Shapes as in ``attnlab.blockwise.forward``.
"""

from __future__ import annotations

import torch

from .._checks import causal_offset, check_causal, check_qkv, check_same, check_tensor, resolve_scale
from .._runtime import LOG2E
from .forward import check_no_grad, fa2_forward
from .iostats import IOStats, check_stats
from .programs import NEG_INF, acc_dtype, mask_block, pair_kind, q_block, resolve_blocks

__all__ = ["flash_backward", "flash_attention_blockwise"]


def _check_backward(q, dims, out, lse, dout, dlse):
    shape_o = (dims.B, dims.H, dims.Nq, dims.Dv)
    for name, t in (("out", out), ("dout", dout)):
        check_tensor(t, name)
        if tuple(t.shape) != shape_o:
            raise ValueError(f"{name} must have shape (B, H, Nq, Dv) = {shape_o}, got {tuple(t.shape)}")
    check_same({"q": q, "out": out, "dout": dout})
    for name, t in (("lse", lse), ("dlse", dlse)):
        if t is None and name == "dlse":
            continue
        check_tensor(t, name, ndim=3)
        if tuple(t.shape) != shape_o[:3]:
            raise ValueError(f"{name} must have shape (B, H, Nq) = {shape_o[:3]}, got {tuple(t.shape)}")
        if t.device != q.device:
            raise ValueError(f"{name} is on {t.device} but q is on {q.device}")


def flash_backward(q, k, v, out, lse, dout, *, causal: bool = False, scale: float | None = None,
                   block_q: int | None = None, block_k: int | None = None, stats: IOStats | None = None, dlse=None):
    """FlashAttention-2 backward (§7.2–§7.4): gradients of ``out = attention(q, k, v)``.

    ``P`` is recomputed from the saved ``lse`` (already normalised, no online softmax);
    ``D_i = rowsum(dO_i ∘ O_i)`` is computed once up front, so ``dS = P ∘ (dP - D_i)`` needs one block
    at a time. K/V blocks are outside: ``dK_j``, ``dV_j`` accumulate on chip and are written once;
    ``dQ_i`` receives one atomic add per computed (Q block, K/V block) pair. For GQA the ``dK``, ``dV`` of
    a K/V head sum over its group of query heads. ``dlse`` (B, H, Nq), optional, is the gradient flowing
    into ``lse`` itself (``dS += P ∘ dlse``).

    Arguments: as ``flash_forward``, plus out (B, H, Nq, Dv), lse (B, H, Nq) from the forward and
    dout (B, H, Nq, Dv). Returns dq, dk, dv in the shapes and dtypes of q, k, v.
    ``stats`` counts: O and dO read and D written by the preprocessing; per (batch, K/V head) K_j, V_j
    read and dK_j, dV_j written once; per computed pair Q_i, dO_i, L_i, D_i read and dQ_i atomically
    added (the zero fill of the dQ accumulator is not counted).
    """
    dims = check_qkv(q, k, v)
    check_no_grad("flash_backward", q, k, v, out, lse, dout, *(() if dlse is None else (dlse,)))
    check_stats(stats)
    _check_backward(q, dims, out, lse, dout, dlse)
    Br, Bc = resolve_blocks(block_q, block_k, dims)
    return fa2_backward(q, k, v, out, lse, dout, dims, causal=check_causal(causal), scale=resolve_scale(scale, dims.D),
                        Br=Br, Bc=Bc, stats=stats, dlse=dlse)


def fa2_backward(q, k, v, out, lse, dout, dims, *, causal: bool, scale: float, Br: int, Bc: int,
                 stats: IOStats | None = None, dlse=None):
    """``flash_backward`` on inputs already checked, without grad."""
    B, H, Hkv, Nq, Nk, D, Dv, G = dims.B, dims.H, dims.Hkv, dims.Nq, dims.Nk, dims.D, dims.Dv, dims.group
    acc_dt = acc_dtype(q.dtype)
    off = causal_offset(Nq, Nk)
    q5 = q.reshape(B, Hkv, G, Nq, D)  # the G query heads of each K/V head side by side
    do5 = dout.reshape(B, Hkv, G, Nq, Dv)  # as q
    # -- preprocess: D_i = rowsum(dO_i ∘ O_i)  (B, Hkv, G, Nq)
    Dvec = (do5.to(acc_dt) * out.reshape(B, Hkv, G, Nq, Dv).to(acc_dt)).sum(dim=-1)
    if dlse is not None:
        Dvec = Dvec - dlse.reshape(B, Hkv, G, Nq).to(acc_dt)
    L5 = lse.reshape(B, Hkv, G, Nq).to(acc_dt) * LOG2E  # in log2 units, for exp2
    L5 = L5.masked_fill(L5 == NEG_INF, float("inf"))  # rows that saw no key: P = exp(S - inf) = 0
    if stats is not None:
        stats.read("O", B * H * Nq * Dv)
        stats.read("dO", B * H * Nq * Dv)
        stats.write("D", B * H * Nq)
    dq_acc = torch.zeros(B, Hkv, G, Nq, D, dtype=acc_dt, device=q.device)  # (B, Hkv, G, Nq, D), in "HBM"
    dk = torch.empty_like(k)
    dv = torch.empty_like(v)
    nq_blocks = -(-Nq // Br)
    for j0 in range(0, Nk, Bc):  # outer: one K/V block per thread block
        j1 = min(j0 + Bc, Nk)
        kj = k[:, :, j0:j1].to(acc_dt)  # (B, Hkv, Bc, D)
        vj = v[:, :, j0:j1].to(acc_dt)  # (B, Hkv, Bc, Dv)
        dk_j = torch.zeros(B, Hkv, j1 - j0, D, dtype=acc_dt, device=q.device)  # on chip
        dv_j = torch.zeros(B, Hkv, j1 - j0, Dv, dtype=acc_dt, device=q.device)
        n_done = n_masked = 0
        for i0 in range(0, Nq, Br):  # inner: every Q block that sees K_j
            i1 = min(i0 + Br, Nq)
            kind = pair_kind(causal, i0, i1, j0, j1, off)
            if kind == "skip":
                continue
            R = G * (i1 - i0)
            qi = q_block(q5, i0, i1, acc_dt)  # (B, Hkv, G·Br, D)
            doi = q_block(do5, i0, i1, acc_dt)  # (B, Hkv, G·Br, Dv)
            Li = L5[:, :, :, i0:i1].reshape(B, Hkv, R, 1)  # (B, Hkv, G·Br, 1)
            Di = Dvec[:, :, :, i0:i1].reshape(B, Hkv, R, 1)  # (B, Hkv, G·Br, 1)
            # -- recompute P from L: P = exp(S - L) = 2^(S·log2 e - L·log2 e)
            s = torch.matmul(qi, kj.transpose(-1, -2)).mul_(scale * LOG2E)  # (B, Hkv, G·Br, Bc)
            if kind == "mask":
                mask_block(s, i0, i1, j0, j1, off, G)
                n_masked += 1
            p = s.sub_(Li).exp2_()
            # -- dV_j += Pᵀ dO_i;  dP = dO_i V_jᵀ;  dS = P ∘ (dP - D_i)
            dv_j += torch.matmul(p.transpose(-1, -2), doi)
            ds = p.mul_(torch.matmul(doi, vj.transpose(-1, -2)).sub_(Di))
            # -- dQ_i += scale · dS K_j  (an atomic add: other K/V blocks add to the same rows)
            # (B, Hkv, G·Br, D) -> (B, Hkv, G, Br, D)
            dq_acc[:, :, :, i0:i1] += torch.matmul(ds, kj).mul_(scale).view(B, Hkv, G, i1 - i0, D)
            # -- dK_j += scale · dSᵀ Q_i
            dk_j += torch.matmul(ds.transpose(-1, -2), qi).mul_(scale)
            n_done += 1
            if stats is not None:
                stats.read("Q", B * Hkv * R * D)
                stats.read("dO", B * Hkv * R * Dv)
                stats.read("L", B * Hkv * R)
                stats.read("D", B * Hkv * R)
                stats.atomic_add("dQ", B * Hkv * R * D)
        dk[:, :, j0:j1] = dk_j  # written once
        dv[:, :, j0:j1] = dv_j
        if stats is not None:
            stats.read("K", B * Hkv * (j1 - j0) * D)
            stats.read("V", B * Hkv * (j1 - j0) * Dv)
            stats.write("dK", B * Hkv * (j1 - j0) * D)
            stats.write("dV", B * Hkv * (j1 - j0) * Dv)
            stats.pairs(computed=B * Hkv * n_done, skipped=B * Hkv * (nq_blocks - n_done),
                        masked=B * Hkv * n_masked)
    return dq_acc.view(B, H, Nq, D).to(q.dtype), dk, dv  # (B, Hkv, G, Nq, D) -> (B, H, Nq, D)


# -- §7.7 autograd: save q, k, v, O, L only ---------------------------------------------------------


class _FlashAttentionFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, dims, causal, scale, Br, Bc):
        out, lse = fa2_forward(q, k, v, dims, causal=causal, scale=scale, Br=Br, Bc=Bc)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.args = (dims, causal, scale, Br, Bc)
        ctx.set_materialize_grads(False)
        return out, lse

    @staticmethod
    def backward(ctx, dout, dlse):
        if torch.is_grad_enabled():
            raise RuntimeError("attnlab.flash_attention: double backward (create_graph=True) is not supported")
        q, k, v, out, lse = ctx.saved_tensors
        dims, causal, scale, Br, Bc = ctx.args
        if dout is None:
            dout = torch.zeros_like(out)
        dq, dk, dv = fa2_backward(q, k, v, out, lse, dout, dims, causal=causal, scale=scale, Br=Br, Bc=Bc, dlse=dlse)
        return dq, dk, dv, None, None, None, None, None


def attention_fn(q, k, v, dims, *, causal: bool, scale: float, block_q: int | None = None,
                 block_k: int | None = None):
    """``flash_attention_blockwise`` on inputs already checked (``dims`` from ``check_qkv``):
    returns (out, lse), both differentiable."""
    Br, Bc = resolve_blocks(block_q, block_k, dims)
    return _FlashAttentionFn.apply(q, k, v, dims, causal, scale, Br, Bc)


def flash_attention_blockwise(q, k, v, *, causal: bool = False, scale: float | None = None, return_lse: bool = False,
                              block_q: int | None = None, block_k: int | None = None):
    """Differentiable blockwise attention in PyTorch (§7.7): forward ``flash_forward``, backward
    ``flash_backward``; autograd keeps only q, k, v, out and lse. Block sizes: ``cpu_block_sizes``
    unless given (Br = ``block_q``, Bc = ``block_k``).

    Returns ``out`` (B, H, Nq, Dv), or ``(out, lse)`` with ``return_lse=True`` (lse is differentiable too).
    """
    dims = check_qkv(q, k, v)
    out, lse = attention_fn(q, k, v, dims, causal=check_causal(causal), scale=resolve_scale(scale, dims.D),
                            block_q=block_q, block_k=block_k)
    return (out, lse) if return_lse else out
