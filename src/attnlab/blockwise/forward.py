"""Blockwise FlashAttention forward in PyTorch, in both loop orders (§5.1, §6.2, §6.3), with the variants.

* ``flash_forward``     — FlashAttention-2 order (§5.1): Q blocks outside, K/V blocks inside, the online
  softmax state ``(m, ℓ, acc)`` kept per Q block; K/V blocks outside the mask (above the causal diagonal,
  outside a sliding window) skipped whole, never loaded (§6.2).
* ``flash_forward_fa1`` — FlashAttention-1 order (§6.3): K/V blocks outside; ``O``, ``ℓ``, ``m`` of every
  Q block read, updated and written back for each K/V block.

Shapes: ``q (B, H, Nq, D)``, ``k, v (B, Hkv, Nk, D/Dv)`` with ``H % Hkv == 0`` (GQA/MQA); ``out (B, H, Nq, Dv)``,
``lse (B, H, Nq)`` (natural log). One program handles one Q block of ``Br`` positions for all ``G = H/Hkv``
query heads that share a K/V head (q viewed as ``(B, Hkv, G, Nq, D)``), so K/V are never repeated.
The variants (``attnlab.variants``: causal, sliding window, softcap, ALiBi) have flash-attn's meaning,
positions aligned bottom-right (``off = Nk − Nq``). Rows that see no key give ``out = 0`` and
``lse = -inf``. Half-precision inputs accumulate in float32, float64 in float64.

These functions are not differentiable themselves (``attnlab.flash_attention`` is): called with inputs
that require grad while grad mode is on, they say so instead of building a graph that cannot run.
"""

from __future__ import annotations

import math

import torch

from .._checks import causal_offset, check_qkv, check_variants, resolve_scale
from .._runtime import LN2, LOG2E
from .iostats import IOStats, check_stats
from .programs import (
    NEG_INF,
    acc_dtype,
    add_matmul_,
    program_chunks,
    programs_per_step,
    q_block,
    resolve_blocks,
    run_programs,
)
from .tiles import TileMasks, key_blocks, mask_tile_, modify_tile, query_blocks

__all__ = ["flash_forward", "flash_forward_fa1"]


def check_no_grad(name: str, *tensors) -> None:
    """Refuse inputs that require grad in grad mode: the blockwise kernels write in place."""
    if torch.is_grad_enabled() and any(t.requires_grad for t in tensors):
        raise RuntimeError(f"{name} is not differentiable: use attnlab.flash_attention(q, k, v, return_lse=True) "
                           f"for gradients, or call {name} under torch.no_grad()")


def flash_forward(q, k, v, *, causal: bool = False, scale: float | None = None, window=None,
                  softcap: float | None = None, alibi_slopes=None, block_q: int | None = None,
                  block_k: int | None = None, stats: IOStats | None = None):
    """FlashAttention forward in the FlashAttention-2 loop order (§5.1).

    Arguments:
        q: (B, H, Nq, D); k: (B, Hkv, Nk, D); v: (B, Hkv, Nk, Dv); H % Hkv == 0.
        causal: bottom-right aligned (query i sees keys j <= i + Nk - Nq); K/V blocks wholly above the
            diagonal are skipped without being read (§6.2).
        scale: default 1/sqrt(D).
        window: (left, right): query i sees keys i+off-left <= j <= i+off+right (off = Nk - Nq; -1: that
            side unbounded; None: (-1, -1)). A Q block visits only the K/V blocks its window reaches.
        softcap: scores become softcap·tanh(s/softcap) (None: off).
        alibi_slopes: (H,) or (B, H) float32; the scores get -slope·|i + off - j| (after softcap).
        block_q, block_k: Br and Bc (ragged last blocks are fine); ``None`` (the default) picks
            ``cpu_block_sizes``, large blocks that are fast on a CPU. The lecture's 64×64 blocks (and
            the I/O counts of §5.4 that go with them) must be asked for.
        stats: an ``IOStats`` to count into: Q read once, K/V once per computed pair, O and L written once.
    Returns:
        out (B, H, Nq, Dv) in q's dtype, lse (B, H, Nq) in float32 (float64 for float64 inputs).

    Every (batch, K/V head, Q block) is an independent program (a thread block on a GPU); the loop
    runs several (batch, K/V head) programs side by side (``programs_per_step``). As in FlashAttention's
    kernels the scores are kept in base-2 units (q pre-multiplied by scale·log2 e), so that ``exp2`` —
    cheaper than ``exp`` — does the exponentials: 2^(x·log2 e) = e^x.
    """
    dims = check_qkv(q, k, v)
    check_no_grad("flash_forward", q, k, v)
    check_stats(stats)
    mask, softcap, slopes = check_variants(causal, window, softcap, alibi_slopes, dims.B, dims.H, q.device)
    Br, Bc = resolve_blocks(block_q, block_k, dims)
    return fa2_forward(q, k, v, dims, mask=mask, scale=resolve_scale(scale, dims.D), softcap=softcap,
                       slopes=slopes, Br=Br, Bc=Bc, stats=stats)


def log2_units(softcap, slopes, dtype):
    """Softcap and ALiBi slopes in the base-2 units of the scores (both scale with the scores)."""
    return (None if softcap is None else softcap * LOG2E,
            None if slopes is None else slopes.to(dtype) * LOG2E)


def fa2_forward(q, k, v, dims, *, mask, scale: float, softcap=None, slopes=None, Br: int, Bc: int,
                stats: IOStats | None = None):
    """``flash_forward`` on inputs already checked (``dims`` from ``check_qkv``, ``mask`` a
    ``variants.Mask``, ``slopes`` (B, H) or None), without grad."""
    B, H, Hkv, Nq, Nk, D, Dv, G = dims.B, dims.H, dims.Hkv, dims.Nq, dims.Nk, dims.D, dims.Dv, dims.group
    acc_dt = acc_dtype(q.dtype)
    q5 = q.reshape(B, Hkv, G, Nq, D)  # a view: the G query heads of each K/V head side by side
    out = torch.empty(B, Hkv, G, Nq, Dv, dtype=q.dtype, device=q.device)  # (B, Hkv, G, Nq, Dv)
    lse = torch.empty(B, Hkv, G, Nq, dtype=acc_dt, device=q.device)  # (B, Hkv, G, Nq)
    softcap2, slopes2 = log2_units(softcap, slopes, acc_dt)
    slopes5 = None if slopes2 is None else slopes2.reshape(B, Hkv, G)  # (B, H) -> (B, Hkv, G)
    masks = TileMasks(mask)

    def step(chunk):
        bs, hs = chunk
        fa2_programs(q5[bs, hs], k[bs, hs], v[bs, hs], out[bs, hs], lse[bs, hs], masks=masks,
                     off=causal_offset(Nq, Nk), scale=scale, softcap2=softcap2,
                     slopes2=None if slopes5 is None else slopes5[bs, hs], Br=Br, Bc=Bc, stats=stats)

    run_programs(step, list(program_chunks(B, Hkv, programs_per_step(dims, Br, Bc, q.device))), q.device, stats)
    return out.view(B, H, Nq, Dv), lse.view(B, H, Nq)  # (B, Hkv, G, ...) -> (B, H, ...)


def fa2_programs(q5, k, v, out, lse, *, masks: TileMasks, off: int, scale: float, softcap2=None, slopes2=None, Br: int,
                 Bc: int, stats=None):
    """The FA2 loop for the programs of one step: q5 (..., G, Nq, D), k (..., Nk, D), v (..., Nk, Dv);
    writes out (..., G, Nq, Dv) and lse (..., G, Nq). The leading dims ``...`` index programs (batch,
    K/V head), and are absent for a single one. ``masks`` holds the call's Mask; ``off`` aligns query i
    with key i + off; ``softcap2`` and ``slopes2`` (..., G) are in base-2 units (``log2_units``)."""
    mask = masks.mask
    *lead, G, Nq, D = q5.shape
    Nk, Dv = k.shape[-2], v.shape[-1]
    n_prog = math.prod(lead)
    acc_dt = lse.dtype
    floor = torch.finfo(acc_dt).min  # m starts here rather than at -inf: (-inf) - (-inf) never happens
    n_kv_blocks = -(-Nk // Bc)
    for i0 in range(0, Nq, Br):  # each Q block is independent: one thread block on a GPU
        i1 = min(i0 + Br, Nq)
        R = G * (i1 - i0)
        qi = q_block(q5, i0, i1, acc_dt) * (scale * LOG2E)  # (..., G·Br, D), read once
        m = torch.full((*lead, R, 1), floor, dtype=acc_dt, device=q5.device)  # stays on chip
        l = torch.zeros(*lead, R, 1, dtype=acc_dt, device=q5.device)
        acc = torch.zeros(*lead, R, Dv, dtype=acc_dt, device=q5.device)
        n_done = n_masked = 0
        for j0 in key_blocks(mask, i0, i1, off, Nk, Bc):  # only the K/V blocks the mask reaches (§6.2)
            j1 = min(j0 + Bc, Nk)
            kind = mask.block_kind(i0, i1, j0, j1, off)
            if kind == "skip":
                continue
            kj, vj = k[..., j0:j1, :], v[..., j0:j1, :]  # (..., Bc, D), (..., Bc, Dv)
            if kj.dtype != acc_dt:
                kj, vj = kj.to(acc_dt), vj.to(acc_dt)
            s = torch.matmul(qi, kj.transpose(-1, -2))  # S_ij·log2(e) (..., G·Br, Bc), only on chip
            if softcap2 is not None or slopes2 is not None:
                s = modify_tile(s, softcap=softcap2, slopes=slopes2, i0=i0, i1=i1, j0=j0, j1=j1, off=off, G=G)
            if kind == "mask":
                mask_tile_(s, masks, i0, i1, j0, j1, off, G)
                n_masked += 1
            # -- update m and l
            m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
            alpha = torch.exp2(m - m_new)  # the rescale factor e^(m - m_new) (in base 2)
            p = s.sub_(m_new).exp2_()  # P̃ = exp(S_ij - m_new), unnormalised, in place of S
            l.mul_(alpha).add_(p.sum(dim=-1, keepdim=True))
            # -- update the accumulator: acc = acc·alpha + P̃ V_j
            add_matmul_(acc.mul_(alpha), p, vj)
            m = m_new
            n_done += 1
            if stats is not None:
                stats.read("K", n_prog * (j1 - j0) * D)
                stats.read("V", n_prog * (j1 - j0) * Dv)
        # -- epilogue: O_i = acc / l, L_i = m + log l (back from base 2 to natural log), written once
        # (..., G·Br, Dv) -> (..., G, Br, Dv) and (..., G·Br, 1) -> (..., G, Br)
        out[..., i0:i1, :] = (acc / torch.where(l == 0, 1.0, l)).view(*lead, G, i1 - i0, Dv)
        lse[..., i0:i1] = torch.where(l == 0, NEG_INF, (m + torch.log2(l)) * LN2).view(*lead, G, i1 - i0)
        if stats is not None:
            stats.read("Q", n_prog * R * D)
            stats.write("O", n_prog * R * Dv)
            stats.write("L", n_prog * R)
            stats.pairs(computed=n_prog * n_done, skipped=n_prog * (n_kv_blocks - n_done), masked=n_prog * n_masked)


# -- §6.3 FlashAttention-1 forward: K/V blocks outside ----------------------------------------------


def flash_forward_fa1(q, k, v, *, causal: bool = False, scale: float | None = None, window=None,
                      softcap: float | None = None, alibi_slopes=None, block_q: int | None = None,
                      block_k: int | None = None, stats: IOStats | None = None):
    """FlashAttention forward in the first version's loop order (§6.3, FlashAttention Algorithm 1).

    K/V blocks are outside and read once; for each of them every Q block that sees it reads Q_i and
    its running O_i (kept normalised, as FA1 does), ℓ_i, m_i from memory, updates them and writes them
    back. Same arguments and result as ``flash_forward``. ``stats`` counts, per (batch, K/V head):
    the initialisation of O, ℓ, m (writes), each K/V block that some query sees once, Q/O/ℓ/m read and
    O/ℓ/m written per computed pair, and an epilogue that reads m, ℓ and writes L = m + log ℓ.
    """
    dims = check_qkv(q, k, v)
    check_no_grad("flash_forward_fa1", q, k, v)
    scale = resolve_scale(scale, dims.D)
    mask, softcap, slopes = check_variants(causal, window, softcap, alibi_slopes, dims.B, dims.H, q.device)
    Br, Bc = resolve_blocks(block_q, block_k, dims)
    check_stats(stats)
    B, H, Hkv, Nq, Nk, D, Dv, G = dims.B, dims.H, dims.Hkv, dims.Nq, dims.Nk, dims.D, dims.Dv, dims.group
    acc_dt = acc_dtype(q.dtype)
    off = causal_offset(Nq, Nk)
    q5 = q.reshape(B, Hkv, G, Nq, D)  # the G query heads of each K/V head side by side
    slopes3 = None if slopes is None else slopes.to(acc_dt).reshape(B, Hkv, G)  # (B, H) -> (B, Hkv, G)
    masks = TileMasks(mask)
    # "HBM" state, initialised: O = 0, ℓ = 0, m = -inf
    O = torch.zeros(B, Hkv, G, Nq, Dv, dtype=acc_dt, device=q.device)
    l_hbm = torch.zeros(B, Hkv, G, Nq, dtype=acc_dt, device=q.device)
    m_hbm = torch.full((B, Hkv, G, Nq), NEG_INF, dtype=acc_dt, device=q.device)
    if stats is not None:
        stats.write("O", B * H * Nq * Dv)
        stats.write("l", B * H * Nq)
        stats.write("m", B * H * Nq)
    nq_blocks = -(-Nq // Br)
    for j0 in range(0, Nk, Bc):  # outer: K/V block, read once
        j1 = min(j0 + Bc, Nk)
        kj = k[:, :, j0:j1].to(acc_dt)
        vj = v[:, :, j0:j1].to(acc_dt)
        n_done = n_masked = 0
        for i0 in query_blocks(mask, j0, j1, off, Nq, Br):  # inner: every Q block that sees K_j
            i1 = min(i0 + Br, Nq)
            kind = mask.block_kind(i0, i1, j0, j1, off)
            if kind == "skip":
                continue
            R = G * (i1 - i0)
            qi = q_block(q5, i0, i1, acc_dt) * scale
            o_i = O[:, :, :, i0:i1].reshape(B, Hkv, R, Dv)  # read O_i, ℓ_i, m_i back from memory
            l_i = l_hbm[:, :, :, i0:i1].reshape(B, Hkv, R)  # (B, Hkv, G·Br)
            m_i = m_hbm[:, :, :, i0:i1].reshape(B, Hkv, R)  # (B, Hkv, G·Br)
            s = torch.matmul(qi, kj.transpose(-1, -2))  # (B, Hkv, G·Br, Bc)
            if softcap is not None or slopes3 is not None:
                s = modify_tile(s, softcap=softcap, slopes=slopes3, i0=i0, i1=i1, j0=j0, j1=j1, off=off, G=G)
            if kind == "mask":
                mask_tile_(s, masks, i0, i1, j0, j1, off, G)
                n_masked += 1
            # -- statistics of this block: m̃, P̃ = exp(S - m̃), ℓ̃
            m_blk = s.amax(dim=-1)
            p = s.sub_(m_blk.masked_fill(m_blk == NEG_INF, 0.0).unsqueeze(-1)).exp_()
            l_blk = p.sum(dim=-1)
            # -- merge with the running state (§4.5), keep O normalised
            m_new = torch.maximum(m_i, m_blk)
            base = m_new.masked_fill(m_new == NEG_INF, 0.0)
            c_old, c_blk = torch.exp(m_i - base), torch.exp(m_blk - base)
            l_new = l_i * c_old + l_blk * c_blk
            o_new = (o_i * (l_i * c_old).unsqueeze(-1) + torch.matmul(p, vj) * c_blk.unsqueeze(-1)) / torch.where(
                l_new == 0, 1.0, l_new).unsqueeze(-1)
            # -- write O_i, ℓ_i, m_i back
            O[:, :, :, i0:i1] = o_new.view(B, Hkv, G, i1 - i0, Dv)  # (B, Hkv, G·Br, Dv) -> (B, Hkv, G, Br, Dv)
            l_hbm[:, :, :, i0:i1] = l_new.view(B, Hkv, G, i1 - i0)
            m_hbm[:, :, :, i0:i1] = m_new.view(B, Hkv, G, i1 - i0)
            n_done += 1
            if stats is not None:
                stats.read("Q", B * Hkv * R * D)
                for name, n in (("O", R * Dv), ("l", R), ("m", R)):
                    stats.read(name, B * Hkv * n)
                    stats.write(name, B * Hkv * n)
        if stats is not None:
            if n_done:  # a K/V block that no query sees is never loaded
                stats.read("K", B * Hkv * (j1 - j0) * D)
                stats.read("V", B * Hkv * (j1 - j0) * Dv)
            stats.pairs(computed=B * Hkv * n_done, skipped=B * Hkv * (nq_blocks - n_done),
                        masked=B * Hkv * n_masked)
    lse = m_hbm + torch.log(l_hbm)  # epilogue: L = m + log ℓ
    if stats is not None:
        stats.read("m", B * H * Nq)
        stats.read("l", B * H * Nq)
        stats.write("L", B * H * Nq)
    return O.to(q.dtype).view(B, H, Nq, Dv), lse.view(B, H, Nq)  # (B, Hkv, G, ...) -> (B, H, ...)
