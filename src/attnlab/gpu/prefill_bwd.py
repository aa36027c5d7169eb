"""FlashAttention-2 backward in Triton (lecture §7.2 recompute P from L, §7.3 D_i = dO_i·O_i, §7.4 loop order),
with the variants of the forward (sliding windows, softcap, ALiBi, packed variable-length batches).

Three launches:

1. ``_attn_bwd_prep``: per query row, D_i = rowsum(dO ∘ O) (minus dL_i when the caller's loss
   also depends on the logsumexp) and L_i converted to log2 units; an empty row (L = -inf) gets
   +inf so that the recomputed P is exactly 0 there without any mask.
2. ``_attn_bwd_dkdv``: one program per key/value block (K/V outer, §7.4): K_j, V_j stay in
   registers, dK_j and dV_j accumulate on chip over every query block of every query head that
   reads this K/V head (GQA without repeating K/V) and are written once.
   P = exp2(S·log2e·scale − L₂), dV += Pᵀ dO, dP = dO Vᵀ, dS = P ∘ (dP − D), dK += dSᵀ Q.
3. ``_attn_bwd_dq``: one program per query block, streaming K/V again to form dQ = dS K
   (a second pass instead of float32 atomics; ``BwdConfig.dq_atomic`` switches to atomics
   issued from kernel 2, for measurement). Without atomics every gradient element is summed by
   one program in a fixed order: the gradients are bit-identical run after run (``deterministic``
   refuses the atomic variant).

Masks are bottom-right aligned. Blocks outside the window are skipped by the loop bounds (in the
dK/dV kernel the range of query blocks shrinks the same way), blocks wholly inside run without the
element mask. Softcap multiplies dS by 1 − tanh² (tanh recomputed with S); ALiBi adds a constant.
"""

from __future__ import annotations

import dataclasses

import torch
import triton
import triton.language as tl

from .._runtime import LOG2E
from .config import BwdConfig, default_bwd_config, next_pow2, tma_ok, varlen_bounds, varlen_grid
from .launch import KeptLaunch, current_stream, hooks_set, keep_plan, launch_kept, recording, tensor_key
from .layout import empty_like_layout, packed_bounds, packed_rows, padded_rows_bound, store_dq
from .prefill_fwd import (
    _key_range,
    _last_dim_contiguous,
    _load_tile,
    _row0,
    _score_mod,
    _varlen_block,
    _varlen_seq,
    packed_as_bhnd,
    variant_args,
)

_LOG2E = tl.constexpr(LOG2E)  # a jit function reads module globals only as constexprs

# -- preprocess: D and L in log2 units ---------------------------------------------------------


@triton.jit
def _attn_bwd_prep(O, DO, LSE, DLSE, DELTA, LSE2,
                   stride_ob, stride_oh, stride_on,
                   stride_dob, stride_doh, stride_don,
                   H, Nq, ROWS,
                   HEAD_D: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr,
                   HAS_DLSE: tl.constexpr, CU_Q=None, CU_P=None):
    """D_i and L₂ of rows BLOCK_M·pid_m.. of head (b, h) into DELTA, LSE2 (ROWS rows per head). With CU_Q, CU_P
    (a packed batch, B = 1): grid (query blocks of the longest sequence, sequence · H); sequence s's rows
    CU_Q[s].. go to rows CU_P[s].. of its head's ROWS (each sequence's rows start at a multiple of 64 there)."""
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    out_m = offs_m
    if CU_Q is not None:  # sequence b's rows, in the packed rows of batch 0
        q0 = tl.load(CU_Q + b)
        row_ok = offs_m < tl.load(CU_Q + b + 1) - q0
        out_m = tl.load(CU_P + b) + offs_m
        offs_m = q0 + offs_m
        bh = h
        b = 0
    else:
        row_ok = offs_m < Nq
    o = _load_tile(O + b.to(tl.int64) * stride_ob + h.to(tl.int64) * stride_oh
                   + offs_m[:, None] * stride_on + offs_d[None, :], offs_m, Nq, offs_d, HEAD_D, BLOCK_D, True)
    do = _load_tile(DO + b.to(tl.int64) * stride_dob + h.to(tl.int64) * stride_doh
                    + offs_m[:, None] * stride_don + offs_d[None, :], offs_m, Nq, offs_d, HEAD_D, BLOCK_D, True)
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), 1)
    row = bh.to(tl.int64) * Nq + offs_m
    if HAS_DLSE:
        delta -= tl.load(DLSE + row, mask=row_ok, other=0.0)
    lse = tl.load(LSE + row, mask=row_ok, other=0.0)
    lse2 = tl.where(lse == float("-inf"), float("inf"), lse * _LOG2E)
    out_row = bh.to(tl.int64) * ROWS + out_m  # DELTA, LSE2: ROWS >= Nq rows per head (padded for the Gluon kernel)
    tl.store(DELTA + out_row, delta, mask=row_ok)
    tl.store(LSE2 + out_row, lse2, mask=row_ok)


# -- dK, dV (key/value block outer) -------------------------------------------------------------


@triton.jit
def _dkdv_loop(dk, dv, k, v, Q_h, DO_h, LSE2_h, DELTA_h, DQ_h,
               stride_qn, stride_don, stride_dqn,
               lo, hi, offs_n, Nq, causal_off, qk_scale, sm_scale,
               win_off, alibi_off, cap2, slope2,
               HEAD_D: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr,
               CAUSAL_MASK: tl.constexpr, ROW_MASK: tl.constexpr, DQ_ATOMIC: tl.constexpr,
               WIN_MASK: tl.constexpr, SOFTCAP: tl.constexpr, ALIBI: tl.constexpr):
    """Accumulate into dk, dv (Bc, BLOCK_D) the contributions of query blocks [lo, hi)."""
    offs_d = tl.arange(0, BLOCK_D)
    for start_m in range(lo, hi, BLOCK_M):
        start_m = tl.multiple_of(start_m, BLOCK_M)
        offs_m = start_m + tl.arange(0, BLOCK_M)
        # -- recompute Pᵀ (Bc, Br) from L: already normalised, no online softmax needed (§7.2)
        q = _load_tile(Q_h + offs_m[:, None] * stride_qn + offs_d[None, :], offs_m, Nq, offs_d,
                       HEAD_D, BLOCK_D, ROW_MASK)
        if ROW_MASK:
            lse2 = tl.load(LSE2_h + offs_m, mask=offs_m < Nq, other=float("inf"))
        else:
            lse2 = tl.load(LSE2_h + offs_m)
        if SOFTCAP or ALIBI:
            sT, tT = _score_mod(tl.dot(k, tl.trans(q)), offs_m[None, :], offs_n[:, None], qk_scale, cap2, slope2,
                                alibi_off, SOFTCAP, ALIBI)
            sT = sT - lse2[None, :]  # (Bc, Br), log2 units
        else:
            sT = tl.dot(k, tl.trans(q)) * qk_scale - lse2[None, :]  # (Bc, Br), log2 units
        # -- mask before exp2: a hidden score may exceed its row's L by far
        if CAUSAL_MASK and WIN_MASK:
            sT = tl.where((offs_n[:, None] <= offs_m[None, :] + causal_off)
                          & (offs_n[:, None] >= offs_m[None, :] + win_off), sT, float("-inf"))
        elif CAUSAL_MASK:
            sT = tl.where(offs_n[:, None] <= offs_m[None, :] + causal_off, sT, float("-inf"))
        elif WIN_MASK:
            sT = tl.where(offs_n[:, None] >= offs_m[None, :] + win_off, sT, float("-inf"))
        pT = tl.math.exp2(sT)
        do = _load_tile(DO_h + offs_m[:, None] * stride_don + offs_d[None, :], offs_m, Nq, offs_d,
                        HEAD_D, BLOCK_D, ROW_MASK)
        # -- dV += Pᵀ dO
        dv += tl.dot(pT.to(do.dtype), do)
        # -- dPᵀ = V dOᵀ; dSᵀ = Pᵀ ∘ (dPᵀ − D)  (§7.3)
        if ROW_MASK:
            Di = tl.load(DELTA_h + offs_m, mask=offs_m < Nq, other=0.0)
        else:
            Di = tl.load(DELTA_h + offs_m)
        dpT = tl.dot(v, tl.trans(do))
        if SOFTCAP:  # through the cap: d(softcap·tanh(x/softcap))/dx = 1 − tanh²
            dsT = (pT * (dpT - Di[None, :]) * (1.0 - tT * tT)).to(do.dtype)
        else:
            dsT = (pT * (dpT - Di[None, :])).to(do.dtype)
        # -- dK += dSᵀ Q  (the softmax scale is applied once at the end)
        dk += tl.dot(dsT, q)
        if DQ_ATOMIC:
            # -- dQ_i += dS K_j from every key block: float32 atomics (§7.4)
            dq = tl.dot(tl.trans(dsT), k) * sm_scale
            dq_ptrs = DQ_h + offs_m[:, None] * stride_dqn + offs_d[None, :]
            tl.atomic_add(dq_ptrs, dq, mask=(offs_m[:, None] < Nq) & (offs_d[None, :] < HEAD_D), sem="relaxed")
    return dk, dv


@triton.jit
def _attn_bwd_dkdv(Q, K, V, DO, LSE2, DELTA, DK, DV, DQ,
                   stride_qb, stride_qh, stride_qn,
                   stride_kb, stride_kh, stride_kn,
                   stride_vb, stride_vh, stride_vn,
                   stride_dob, stride_doh, stride_don,
                   stride_dkb, stride_dkh, stride_dkn,
                   stride_dvb, stride_dvh, stride_dvn,
                   stride_dqb, stride_dqh, stride_dqn,
                   H, G, Nq, Nk, causal_off, qk_scale, sm_scale,
                   HEAD_D: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   CAUSAL: tl.constexpr, EVEN_M: tl.constexpr, DQ_ATOMIC: tl.constexpr,
                   # variants, as in _attn_fwd (VARLEN: grid (B·Hkv, key blocks of max_seqlen_k))
                   SLOPES=None, stride_sb=0, stride_sh=0, CU_Q=None, CU_K=None,
                   win_off=0, alibi_off=0, cap2=1.0,
                   HAS_WINDOW: tl.constexpr = False, SOFTCAP: tl.constexpr = 0, ALIBI: tl.constexpr = False,
                   VARLEN: tl.constexpr = False):
    Hkv = H // G
    if VARLEN:
        b, hk, pid_n = _varlen_block(Hkv, not CAUSAL)  # causal: the first key blocks are the heaviest
        q0, n_q, k0, n_k = _varlen_seq(CU_Q, CU_K, b, Nq, Nk)
        start_n = pid_n * BLOCK_N
        if start_n >= n_k:  # the grid covers the longest sequence; this one is shorter
            return
        lse_len = Nq  # total_q: the row length of LSE2 and DELTA (H, total_q)
        Nq = n_q
        Nk = n_k
        causal_off += Nk - Nq
        win_off += Nk - Nq
        alibi_off += Nk - Nq
    else:
        pid_n = tl.program_id(0)
        bhk = tl.program_id(1)
        b = bhk // Hkv
        hk = bhk % Hkv
        start_n = pid_n * BLOCK_N
        q0 = b  # (unused: rows start at batch b)
        k0 = b
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    # -- K_j, V_j: loaded once, stay on chip (rows past Nk are zeros and never stored)
    K_h = K + _row0(b, k0, stride_kb, stride_kn, VARLEN) + hk.to(tl.int64) * stride_kh
    V_h = V + _row0(b, k0, stride_vb, stride_vn, VARLEN) + hk.to(tl.int64) * stride_vh
    k = _load_tile(K_h + offs_n[:, None] * stride_kn + offs_d[None, :], offs_n, Nk, offs_d, HEAD_D, BLOCK_D, True)
    v = _load_tile(V_h + offs_n[:, None] * stride_vn + offs_d[None, :], offs_n, Nk, offs_d, HEAD_D, BLOCK_D, True)
    dk = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)

    # -- query ranges: [m_lo, m_full) straddles the diagonal (element mask), [m_full, m_mid) is
    #    wholly visible, [max(m_full, m_mid), m_end) is the window's left edge and the ragged last
    #    block (element mask); rows < m_lo and >= m_end see nothing of this key block
    if CAUSAL:
        m_lo = (tl.maximum(start_n - causal_off, 0) // BLOCK_M) * BLOCK_M
        m_full = tl.maximum(start_n + BLOCK_N - 1 - causal_off, 0)
        m_full = ((m_full + BLOCK_M - 1) // BLOCK_M) * BLOCK_M
    else:
        m_full = 0
    m_even = (Nq // BLOCK_M) * BLOCK_M
    if HAS_WINDOW:  # row i sees the whole block iff i <= start_n − win_off, some of it iff i < m_end
        m_end = tl.minimum(tl.maximum(start_n + BLOCK_N - win_off, 0), Nq)
        m_mid = tl.minimum(m_even, (tl.maximum(start_n + 1 - win_off, 0) // BLOCK_M) * BLOCK_M)
    else:
        m_end = Nq
        m_mid = m_even
    if CAUSAL:
        m_diag_end = tl.minimum(m_full, m_end)
    MASK_BLOCK_M: tl.constexpr = BLOCK_M // 2 if BLOCK_M >= 32 else BLOCK_M

    for g in range(G):  # every query head that reads this K/V head
        h = hk * G + g
        Q_h = Q + _row0(b, q0, stride_qb, stride_qn, VARLEN) + h.to(tl.int64) * stride_qh
        DO_h = DO + _row0(b, q0, stride_dob, stride_don, VARLEN) + h.to(tl.int64) * stride_doh
        DQ_h = DQ + _row0(b, q0, stride_dqb, stride_dqn, VARLEN) + h.to(tl.int64) * stride_dqh
        if VARLEN:
            row0 = h.to(tl.int64) * lse_len + q0
        else:
            row0 = (b * H + h).to(tl.int64) * Nq
        if ALIBI:
            slope2 = tl.load(SLOPES + b * stride_sb + h * stride_sh).to(tl.float32) * _LOG2E
        else:
            slope2 = 0.0
        if CAUSAL:  # diagonal blocks in half-height steps: the element mask costs registers
            dk, dv = _dkdv_loop(dk, dv, k, v, Q_h, DO_h, LSE2 + row0, DELTA + row0, DQ_h,
                                stride_qn, stride_don, stride_dqn, m_lo, m_diag_end, offs_n, Nq,
                                causal_off, qk_scale, sm_scale, win_off, alibi_off, cap2, slope2,
                                HEAD_D, BLOCK_D, MASK_BLOCK_M, True, True, DQ_ATOMIC, HAS_WINDOW, SOFTCAP, ALIBI)
        dk, dv = _dkdv_loop(dk, dv, k, v, Q_h, DO_h, LSE2 + row0, DELTA + row0, DQ_h,
                            stride_qn, stride_don, stride_dqn, m_full, m_mid, offs_n, Nq,
                            causal_off, qk_scale, sm_scale, win_off, alibi_off, cap2, slope2,
                            HEAD_D, BLOCK_D, BLOCK_M, False, False, DQ_ATOMIC, False, SOFTCAP, ALIBI)
        if HAS_WINDOW or not EVEN_M:
            dk, dv = _dkdv_loop(dk, dv, k, v, Q_h, DO_h, LSE2 + row0, DELTA + row0, DQ_h,
                                stride_qn, stride_don, stride_dqn, tl.maximum(m_full, m_mid), m_end, offs_n, Nq,
                                causal_off, qk_scale, sm_scale, win_off, alibi_off, cap2, slope2,
                                HEAD_D, BLOCK_D, BLOCK_M, False, True, DQ_ATOMIC, HAS_WINDOW, SOFTCAP, ALIBI)

    dk *= sm_scale
    mask = (offs_n[:, None] < Nk) & (offs_d[None, :] < HEAD_D)
    DK_h = DK + _row0(b, k0, stride_dkb, stride_dkn, VARLEN) + hk.to(tl.int64) * stride_dkh
    DV_h = DV + _row0(b, k0, stride_dvb, stride_dvn, VARLEN) + hk.to(tl.int64) * stride_dvh
    tl.store(DK_h + offs_n[:, None] * stride_dkn + offs_d[None, :], dk.to(k.dtype), mask=mask)
    tl.store(DV_h + offs_n[:, None] * stride_dvn + offs_d[None, :], dv.to(v.dtype), mask=mask)


# -- dQ (query block outer) ---------------------------------------------------------------------


@triton.jit
def _dq_loop(dq, q, do, lse2, Di, K_h, V_h, stride_kn, stride_vn,
             lo, hi, offs_m, Nk, causal_off, qk_scale, win_off, alibi_off, cap2, slope2,
             HEAD_D: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr,
             MASKED: tl.constexpr, CAUSAL: tl.constexpr,
             HAS_WINDOW: tl.constexpr, SOFTCAP: tl.constexpr, ALIBI: tl.constexpr):
    """Accumulate into dq (Br, BLOCK_D) the contributions of key blocks [lo, hi)."""
    offs_d = tl.arange(0, BLOCK_D)
    for start_n in range(lo, hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        cols = start_n + tl.arange(0, BLOCK_N)
        k = _load_tile(K_h + cols[:, None] * stride_kn + offs_d[None, :], cols, Nk, offs_d, HEAD_D, BLOCK_D, MASKED)
        v = _load_tile(V_h + cols[:, None] * stride_vn + offs_d[None, :], cols, Nk, offs_d, HEAD_D, BLOCK_D, MASKED)
        # -- recompute P (Br, Bc) from L
        if SOFTCAP or ALIBI:
            s, t = _score_mod(tl.dot(q, tl.trans(k)), offs_m[:, None], cols[None, :], qk_scale, cap2, slope2,
                              alibi_off, SOFTCAP, ALIBI)
            s = s - lse2[:, None]  # log2 units
        else:
            s = tl.dot(q, tl.trans(k)) * qk_scale - lse2[:, None]  # log2 units
        if MASKED:  # mask before exp2: a hidden score may exceed its row's L by far
            visible = cols[None, :] < Nk
            if CAUSAL:
                visible = visible & (cols[None, :] <= offs_m[:, None] + causal_off)
            if HAS_WINDOW:
                visible = visible & (cols[None, :] >= offs_m[:, None] + win_off)
            s = tl.where(visible, s, float("-inf"))
        p = tl.math.exp2(s)
        # -- dP = dO Vᵀ, dS = P ∘ (dP − D), dQ += dS K
        dp = tl.dot(do, tl.trans(v))
        if SOFTCAP:
            ds = (p * (dp - Di[:, None]) * (1.0 - t * t)).to(k.dtype)
        else:
            ds = (p * (dp - Di[:, None])).to(k.dtype)
        dq = tl.dot(ds, k, dq)
    return dq


@triton.jit
def _attn_bwd_dq(Q, K, V, DO, LSE2, DELTA, DQ,
                 stride_qb, stride_qh, stride_qn,
                 stride_kb, stride_kh, stride_kn,
                 stride_vb, stride_vh, stride_vn,
                 stride_dob, stride_doh, stride_don,
                 stride_dqb, stride_dqh, stride_dqn,
                 H, G, Nq, Nk, causal_off, qk_scale, sm_scale,
                 HEAD_D: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                 CAUSAL: tl.constexpr,
                 SLOPES=None, stride_sb=0, stride_sh=0, CU_Q=None, CU_K=None,
                 win_off=0, alibi_off=0, cap2=1.0,
                 HAS_WINDOW: tl.constexpr = False, SOFTCAP: tl.constexpr = 0, ALIBI: tl.constexpr = False,
                 VARLEN: tl.constexpr = False):
    if VARLEN:  # grid (B·H, query blocks of max_seqlen_q), as the forward's
        b, h, pid_m = _varlen_block(H, True)
        q0, n_q, k0, n_k = _varlen_seq(CU_Q, CU_K, b, Nq, Nk)
        start_m = pid_m * BLOCK_M
        if start_m >= n_q:
            return
        lse_len = Nq  # total_q: the row length of LSE2 and DELTA (H, total_q)
        Nq = n_q
        Nk = n_k
        causal_off += Nk - Nq
        win_off += Nk - Nq
        alibi_off += Nk - Nq
        hk = h // G
    else:
        pid_m = tl.program_id(0)
        if CAUSAL:  # heaviest query blocks first
            pid_m = tl.num_programs(0) - 1 - pid_m
        bh = tl.program_id(1)
        b = bh // H
        h = bh % H
        hk = h // G
        start_m = pid_m * BLOCK_M
        q0 = b  # (unused: rows start at batch b)
        k0 = b
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    q = _load_tile(Q + _row0(b, q0, stride_qb, stride_qn, VARLEN) + h.to(tl.int64) * stride_qh
                   + offs_m[:, None] * stride_qn + offs_d[None, :], offs_m, Nq, offs_d, HEAD_D, BLOCK_D, True)
    do = _load_tile(DO + _row0(b, q0, stride_dob, stride_don, VARLEN) + h.to(tl.int64) * stride_doh
                    + offs_m[:, None] * stride_don + offs_d[None, :], offs_m, Nq, offs_d, HEAD_D, BLOCK_D, True)
    if VARLEN:
        row = h.to(tl.int64) * lse_len + q0 + offs_m
    else:
        row = bh.to(tl.int64) * Nq + offs_m
    lse2 = tl.load(LSE2 + row, mask=offs_m < Nq, other=float("inf"))  # padded rows: P = 0
    Di = tl.load(DELTA + row, mask=offs_m < Nq, other=0.0)
    K_h = K + _row0(b, k0, stride_kb, stride_kn, VARLEN) + hk.to(tl.int64) * stride_kh
    V_h = V + _row0(b, k0, stride_vb, stride_vn, VARLEN) + hk.to(tl.int64) * stride_vh
    if ALIBI:
        slope2 = tl.load(SLOPES + b * stride_sb + h * stride_sh).to(tl.float32) * _LOG2E
    else:
        slope2 = 0.0
    dq = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    # -- key ranges as in the forward: [lo, lo_full) and [max(full, lo_full), hi) masked, [lo_full, full) not
    lo, lo_full, full, hi = _key_range(start_m, Nk, causal_off, win_off, BLOCK_M, BLOCK_N, CAUSAL, HAS_WINDOW)
    if HAS_WINDOW:
        dq = _dq_loop(dq, q, do, lse2, Di, K_h, V_h, stride_kn, stride_vn, lo, tl.minimum(lo_full, hi), offs_m, Nk,
                      causal_off, qk_scale, win_off, alibi_off, cap2, slope2,
                      HEAD_D, BLOCK_D, BLOCK_N, True, CAUSAL, HAS_WINDOW, SOFTCAP, ALIBI)
        tail = tl.maximum(full, lo_full)
    else:
        tail = full
    dq = _dq_loop(dq, q, do, lse2, Di, K_h, V_h, stride_kn, stride_vn, lo_full, full, offs_m, Nk, causal_off,
                  qk_scale, win_off, alibi_off, cap2, slope2,
                  HEAD_D, BLOCK_D, BLOCK_N, False, CAUSAL, HAS_WINDOW, SOFTCAP, ALIBI)
    dq = _dq_loop(dq, q, do, lse2, Di, K_h, V_h, stride_kn, stride_vn, tail, hi, offs_m, Nk, causal_off,
                  qk_scale, win_off, alibi_off, cap2, slope2,
                  HEAD_D, BLOCK_D, BLOCK_N, True, CAUSAL, HAS_WINDOW, SOFTCAP, ALIBI)
    dq *= sm_scale
    DQ_h = DQ + _row0(b, q0, stride_dqb, stride_dqn, VARLEN) + h.to(tl.int64) * stride_dqh
    tl.store(DQ_h + offs_m[:, None] * stride_dqn + offs_d[None, :], dq.to(q.dtype),
             mask=(offs_m[:, None] < Nq) & (offs_d[None, :] < HEAD_D))


# -- launcher -----------------------------------------------------------------------------------


def _s3(x: torch.Tensor):
    return x.stride(0), x.stride(1), x.stride(2)


def prefill_backward(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                     lse: torch.Tensor, *, mask, scale: float, softcap: float | None = None,
                     slopes: torch.Tensor | None = None, cu_seqlens=None, max_seqlen=None,
                     dlse: torch.Tensor | None = None, deterministic: bool = False, config: BwdConfig | None = None,
                     dq: torch.Tensor | None = None, dk: torch.Tensor | None = None,
                     dv: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Run the backward kernels; returns (dq, dk, dv) shaped like (q, k, v).

    ``lse`` is the forward's natural-log logsumexp (B, H, Nq) — (H, total_q) for a packed batch
    (``cu_seqlens``, ``max_seqlen`` as in ``prefill_forward``; q, k, v, out, do then (total, H, D));
    ``dlse`` its incoming gradient when the caller's loss used it (dS gains P ∘ dL). ``mask``, ``softcap``,
    ``slopes`` as in ``prefill_forward``. ``deterministic``: never the dQ-atomics variant, so the gradients are
    bit-identical run after run (the default configurations never use atomics); where the Gluon backward
    runs, its ordered build (``prefill_gluon_bwd.DETERMINISTIC``: each dQ tile's additions in a fixed order),
    else the Triton kernels. No input checks here.
    """
    D = q.shape[-1]
    do, q, k, v, out = (_last_dim_contiguous(t) for t in (do, q, k, v, out))
    given = (dq, dk, dv)
    # the gradients laid out as their inputs are (a model's (B, N, H, D) projections: no copies on the way back)
    dq = empty_like_layout(q) if dq is None else dq
    dk = empty_like_layout(k) if dk is None else dk
    dv = empty_like_layout(v) if dv is None else dv
    if cu_seqlens is None:
        B, H, Nq, _ = q.shape
        Hkv, Nk = k.shape[1], k.shape[2]
        n_keys, cu_q, cu_k, max_q = Nk, None, None, Nq
    else:
        (Nq, H, _), (Nk, Hkv, _) = q.shape, k.shape  # Nq, Nk: total_q, total_k
        cu_q, cu_k, max_q, n_keys = varlen_bounds(cu_seqlens, max_seqlen)
        B = cu_q.shape[0] - 1
    plan_key = None
    if q.is_cuda and slopes is None:  # a kept plan of this signature (``_CallPlan``), or the key to keep one under
        cfg = config or default_bwd_config(D, not mask.dense, q.device, n_keys)
        plan_key = (tensor_key(do), tensor_key(q), tensor_key(k), tensor_key(v), tensor_key(out), tensor_key(lse),
                    None if dlse is None else tensor_key(dlse),
                    tuple(None if t is None else tensor_key(t) for t in given), mask.left, mask.right, scale, softcap,
                    deterministic, cfg, None if cu_q is None else (tensor_key(cu_q), tensor_key(cu_k), max_q, n_keys),
                    _gluon_switches() if cfg.gluon else None, torch.cuda.current_device())
        plan = _CALL_PLANS.get(plan_key)
        if plan is not None and not hooks_set():
            return plan.run(do, q, k, v, out, lse, dlse, cu_q, cu_k, dq, dk, dv)
    if cu_seqlens is not None:
        do, q, k, v, out, dq, dk, dv = (packed_as_bhnd(t) for t in (do, q, k, v, out, dq, dk, dv))
        lse = lse.unsqueeze(0)  # (1, H, total_q)
        dlse = None if dlse is None else dlse.unsqueeze(0)
    if B * H == 0 or Nq == 0 or Nk == 0:
        dq.zero_(), dk.zero_(), dv.zero_()
        return _unpack(dq, dk, dv, cu_seqlens)
    cfg = config or default_bwd_config(D, not mask.dense, q.device, n_keys)
    if cfg.gluon:  # the Gluon kernel takes dense calls (ALiBi too) on Hopper; the Triton entry runs the rest
        from . import prefill_gluon_bwd
        from .prefill_gluon import gluon_supported

        packed_ok = cu_seqlens is None or (prefill_gluon_bwd.PACKED and mask.left < 0 and slopes is None
                                           and (D in prefill_gluon_bwd.PACKED_DET or not deterministic)
                                           and not cfg.dq_atomic and prefill_gluon_bwd.DQ_PERMUTED
                                           and max(B * Hkv, -(-n_keys // 128)) <= 65535)  # (the grid's axes)
        plain = (packed_ok and softcap is None
                 # ordered dQ additions: whole tiles (dq_split 1), where DETERMINISTIC is set
                 and not (deterministic and (not prefill_gluon_bwd.DETERMINISTIC or cfg.dq_split != 1))
                 and not (slopes is not None and mask.right > 0)  # ALiBi: a causal edge at the diagonal or none
                 and q.shape[0] * q.shape[1] * q.shape[2] < 2**31 - 64  # dQ's TMA rows are 32-bit
                 and (cfg.dq_atomic or prefill_gluon_bwd.HAVE_TMA_REDUCE))
        if not (plain and gluon_supported(q, k, v) and tma_ok(do, dk, dv)):
            cfg = default_bwd_config(D, not mask.dense, q.device, n_keys, gluon=False)
    if deterministic and cfg.dq_atomic:  # float32 atomics add in arrival order: not bit-reproducible
        cfg = dataclasses.replace(cfg, dq_atomic=False)
    if cfg.gluon and cfg.block_m1 == 128 and (deterministic or slopes is not None):  # (no such build: 64 rows)
        cfg = dataclasses.replace(cfg, block_m1=64)
    BLOCK_D = next_pow2(max(D, 16))
    lse = lse.contiguous()
    # D_i = rowsum(dO ∘ O) − dL_i and L in log2 units (+inf for empty rows), (B, H, Nq); for the Gluon kernel
    # each head's rows padded to whole query blocks (its loader brings them by TMA, 64 rows at a time)
    # (a packed batch on the Gluon kernel: each sequence's rows from a multiple of 64, layout.packed_rows)
    rows, grid_pre, packed_rows_ = Nq, None, {}
    PRE_M = 64 if q.device.type == "cuda" else 16
    if cfg.gluon and cu_seqlens is None:
        from .prefill_gluon_bwd import lse_rows

        rows = lse_rows(Nq)
    elif cfg.gluon:  # (the lengths clamped into the packed tensors first: the host may never have read them)
        cu_q, cu_k = packed_bounds(cu_q, Nq), packed_bounds(cu_k, Nk)
        cu_p = packed_rows(cu_q)
        rows, grid_pre, packed_rows_ = padded_rows_bound(Nq, B), (triton.cdiv(max_q, PRE_M), B * H), dict(CU_Q=cu_q,
                                                                                                          CU_P=cu_p)
    rows_shape = (*lse.shape[:2], rows)
    delta, lse2 = (torch.empty(rows_shape, device=q.device, dtype=torch.float32) for _ in range(2))
    if not packed_rows_:  # (packed: the whole padded buffers; the kernels find each sequence's rows in them)
        delta, lse2 = delta[..., :Nq], lse2[..., :Nq]
    has_dlse = dlse is not None
    dlse_arg = dlse.contiguous() if has_dlse else lse
    # what a kept plan names each call's tensors by (the kernels' parameters)
    named = dict(O=out, DO=do, LSE=lse, DLSE=dlse_arg, DELTA=delta, LSE2=lse2, Q=q, K=k, V=v, DQ=dq, DK=dk, DV=dv,
                 CU_Q=cu_q, CU_K=cu_k, CU_P=packed_rows_.get("CU_P"))
    with recording() as launches:
        if grid_pre is None or grid_pre[0]:
            # (the kept compiled kernel after a specialisation's first call: launch.launch_kept)
            args = (out, do, lse, dlse_arg, delta, lse2, *_s3(out), *_s3(do), H, Nq, rows)
            launch_kept(_attn_bwd_prep, grid_pre or (triton.cdiv(Nq, PRE_M), q.shape[0] * H),
                        dict(zip(_attn_bwd_prep.arg_names, args)) | dict(HEAD_D=D, BLOCK_D=BLOCK_D, BLOCK_M=PRE_M,
                                                                        HAS_DLSE=has_dlse) | packed_rows_, num_warps=4)
    if cfg.gluon:  # bottom-right aligned, as in the forward (ALiBi's offset too: Nk − Nq)
        from .prefill_gluon_bwd import gluon_backward

        if cu_seqlens is not None:  # each sequence's diagonal: the kernel adds its len_k − len_q to the edge
            inner = gluon_backward(q, k, v, do, lse2, delta, dq, dk, dv, scale=scale, stages=cfg.stages1,
                                   dq_split=cfg.dq_split, dq_atomic=cfg.dq_atomic, dq_shared=cfg.dq_shared,
                                   dq_lag=cfg.dq_lag, causal_off=mask.right if mask.right >= 0 else None,
                                   cu_seqlens=(cu_q, cu_k), max_seqlen_k=n_keys, max_seqlen_q=max_q, cu_rows=cu_p,
                                   deterministic=deterministic, block_m=cfg.block_m1, persistent=cfg.persistent)
            _keep(plan_key, launches, named, inner, rows_shape, gluon=True, packed=True)
            return _unpack(dq, dk, dv, cu_seqlens)
        inner = gluon_backward(q, k, v, do, lse2, delta, dq, dk, dv, scale=scale, stages=cfg.stages1,
                               dq_split=cfg.dq_split, dq_atomic=cfg.dq_atomic, dq_shared=cfg.dq_shared,
                               dq_lag=cfg.dq_lag, causal_off=Nk - Nq + mask.right if mask.right >= 0 else None,
                               win_off=Nk - Nq - mask.left if mask.left >= 0 else None, slopes=slopes,
                               deterministic=deterministic, block_m=cfg.block_m1, persistent=cfg.persistent,
                               kv_split=prefill_gluon_bwd.det_kv_split(
                                   H // Hkv, mask.left < 0 and mask.right == 0 and slopes is None,
                                   k.numel() * k.element_size()) if deterministic else 1)
        _keep(plan_key, launches, named, inner, rows_shape, gluon=True, packed=False)
        return dq, dk, dv
    G = H // Hkv
    common = (H, G, Nq, Nk)
    var = variant_args(mask, scale, softcap, slopes, Nk - Nq if cu_seqlens is None else 0, q.device)
    var["sm_scale"] = scale
    dq_acc = torch.zeros(dq.shape, device=q.device, dtype=torch.float32) if cfg.dq_atomic else dq  # like dq, float32
    if cu_seqlens is not None:  # (sequence, K/V head) x key blocks of the longest sequence
        var_kv = var | dict(CU_Q=cu_q, CU_K=cu_k, VARLEN=True)
        grid_kv, even_m = varlen_grid(B, Hkv, n_keys, cfg.block_n1), False
    else:
        var_kv, grid_kv, even_m = var, (triton.cdiv(Nk, cfg.block_n1), B * Hkv), Nq % cfg.block_m1 == 0
    with recording() as more:
        if grid_kv[0] and grid_kv[1]:
            args = (q, k, v, do, lse2, delta, dk, dv, dq_acc,
                    *_s3(q), *_s3(k), *_s3(v), *_s3(do), *_s3(dk), *_s3(dv), *_s3(dq_acc), *common)
            launch_kept(_attn_bwd_dkdv, grid_kv, dict(zip(_attn_bwd_dkdv.arg_names, args)) | var_kv | dict(
                HEAD_D=D, BLOCK_D=BLOCK_D, BLOCK_M=cfg.block_m1, BLOCK_N=cfg.block_n1, EVEN_M=even_m,
                DQ_ATOMIC=cfg.dq_atomic), num_warps=cfg.warps1, num_stages=cfg.stages1)
        if cfg.dq_atomic:
            store_dq(dq_acc, dq)
            return _unpack(dq, dk, dv, cu_seqlens)
        if cu_seqlens is not None:  # (sequence, head) x query blocks of the longest sequence
            var_q = var | dict(CU_Q=cu_q, CU_K=cu_k, VARLEN=True)
            grid_q = varlen_grid(B, H, max_q, cfg.block_m2)
        else:
            var_q, grid_q = var, (triton.cdiv(Nq, cfg.block_m2), B * H)
        if grid_q[0] and grid_q[1]:
            args = (q, k, v, do, lse2, delta, dq, *_s3(q), *_s3(k), *_s3(v), *_s3(do), *_s3(dq), *common)
            launch_kept(_attn_bwd_dq, grid_q, dict(zip(_attn_bwd_dq.arg_names, args)) | var_q | dict(
                HEAD_D=D, BLOCK_D=BLOCK_D, BLOCK_M=cfg.block_m2, BLOCK_N=cfg.block_n2),
                num_warps=cfg.warps2, num_stages=cfg.stages2)
    _keep(plan_key, launches + more, named, None, rows_shape, gluon=False, packed=False)
    return _unpack(dq, dk, dv, cu_seqlens)


# -- plans: a call's launches kept per signature ---------------------------------------------------------

_CALL_PLANS: dict = {}
_NAMES = ("O", "DO", "LSE", "DLSE", "DELTA", "LSE2", "Q", "K", "V", "DQ", "DK", "DV", "CU_Q", "CU_K", "CU_P")
_SOURCES = {n: n for n in _NAMES}


def _gluon_switches() -> tuple:
    """The Gluon backward's module switches a call's route and launches depend on (part of a plan's key)."""
    from . import prefill_gluon_bwd as gb

    return (gb.PACKED, gb.DETERMINISTIC, gb.HAVE_TMA_REDUCE, gb.DQ_PERMUTED, gb.LSE_BY_TMA, gb.DQ_SWIZZLE,
            gb.HEADS_FIRST_WAVES, gb.DET_KV_SPLIT, gb.DET_KV_SPLIT_BYTES, gb.ZERO_PAST, gb.PACKED_DET_ROTATE,
            gb.DET_WRITER_REGS, gb.DET_EARLY_TURN, gb.PERSISTENT_PROGRAMS,
            gb.PERSISTENT_SNAKE, gb.HEAD_CHUNK_MB, gb.HEAD_CHUNK_FROM_D, gb.TAIL_PIECES, gb.TAIL_FROM_D,
            gb.L2_CHUNKS, gb.L2_CHUNKS_MIN_GROUP, gb.L2_CHUNK_MB, gb.L2_CHUNK_SLACK)


class _CallPlan:
    """What a ``prefill_backward`` call derives from its signature (its key: every input's ``tensor_key``, the
    variant's scalars, the configuration, the Gluon backward's switches), kept after the first call: the
    launches it made (the preprocessing kernel, then the Triton kernels or the Gluon backward's own plan)
    with their compiled kernels and arguments, and the shape of the L₂ and Dᵢ buffers. A later call of the
    signature allocates those and launches: no configuration, no gluon/TMA checks, no views, no argument
    binding. Calls with ALiBi, dQ atomics or a Gluon backward that kept no plan of its own keep none."""

    __slots__ = ("launches", "inner", "rows_shape", "packed_rows")

    def run(self, do, q, k, v, out, lse, dlse, cu_q, cu_k, dq, dk, dv):
        """The call's gradients, in the caller's layout (packed batches: (total, H, D))."""
        packed = cu_q is not None
        if packed:
            lse = lse.unsqueeze(0)
        lse = lse.contiguous()
        delta, lse2 = (torch.empty(self.rows_shape, device=q.device, dtype=torch.float32) for _ in range(2))
        cu_p = None
        if self.packed_rows:  # (the Gluon backward's packed build: the lengths clamped, as the first call's were)
            cu_q, cu_k = packed_bounds(cu_q, q.shape[0]), packed_bounds(cu_k, k.shape[0])
            cu_p = packed_rows(cu_q)
        named = dict(O=out, DO=do, LSE=lse, DLSE=lse if dlse is None else dlse.contiguous(), DELTA=delta, LSE2=lse2,
                     Q=q, K=k, V=v, DQ=dq, DK=dk, DV=dv, CU_Q=cu_q, CU_K=cu_k, CU_P=cu_p)
        stream = current_stream(q.device)
        for launch in self.launches:
            launch.run(named, stream)
        if self.inner is not None:  # (pointers only: the packed tensors, not their (1, H, total, D) views)
            self.inner.run(q, k, v, do, lse2, delta, dq, dk, dv, (cu_q, cu_k) if packed else None, cu_p)
        return dq, dk, dv


def _keep(key, launches, named, inner, rows_shape, *, gluon: bool, packed: bool) -> None:
    """Keep a plan under ``key`` for the launches a call made (``launches``: (launcher, arguments) in order)
    and, on the Gluon route (``gluon``), the Gluon backward's own plan ``inner`` (None: it kept none, and so
    neither does the call). ``rows_shape``: the L₂ and Dᵢ buffers' shape."""
    if key is None or (inner is None if gluon else not launches):
        return
    kept = [KeptLaunch.make(launcher, args, _SOURCES, named) for launcher, args in launches]
    if any(k is None for k in kept):
        return
    plan = _CallPlan()
    plan.launches, plan.inner, plan.rows_shape, plan.packed_rows = kept, inner, tuple(rows_shape), gluon and packed
    keep_plan(_CALL_PLANS, key, plan)


def _unpack(dq, dk, dv, cu_seqlens):
    """The gradients in the caller's layout: (1, H, total, D) views back to packed (total, H, D)."""
    if cu_seqlens is None:
        return dq, dk, dv
    return tuple(t.transpose(1, 2).squeeze(0) for t in (dq, dk, dv))  # (total, H, D)
