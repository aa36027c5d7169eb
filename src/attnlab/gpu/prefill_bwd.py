"""FlashAttention-2 backward in Triton (lecture §7.2 recompute P from L, §7.3 D_i = dO_i·O_i, §7.4 loop order).

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
   issued from kernel 2, for measurement).

Causal masks are bottom-right aligned; blocks wholly above the diagonal are skipped, blocks
wholly below run without the element mask.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._runtime import LOG2E
from .config import BwdConfig, default_bwd_config, next_pow2
from .prefill_fwd import _key_range, _load_tile

_LOG2E = tl.constexpr(LOG2E)  # a jit function reads module globals only as constexprs

# -- preprocess: D and L in log2 units ---------------------------------------------------------


@triton.jit
def _attn_bwd_prep(O, DO, LSE, DLSE, DELTA, LSE2,
                   stride_ob, stride_oh, stride_on,
                   stride_dob, stride_doh, stride_don,
                   H, Nq,
                   HEAD_D: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr,
                   HAS_DLSE: tl.constexpr):
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
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
    tl.store(DELTA + row, delta, mask=row_ok)
    tl.store(LSE2 + row, lse2, mask=row_ok)


# -- dK, dV (key/value block outer) -------------------------------------------------------------


@triton.jit
def _dkdv_loop(dk, dv, k, v, Q_h, DO_h, LSE2_h, DELTA_h, DQ_h,
               stride_qn, stride_don, stride_dqn,
               lo, hi, offs_n, Nq, causal_off, qk_scale, sm_scale,
               HEAD_D: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr,
               CAUSAL_MASK: tl.constexpr, ROW_MASK: tl.constexpr, DQ_ATOMIC: tl.constexpr):
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
        sT = tl.dot(k, tl.trans(q)) * qk_scale - lse2[None, :]  # (Bc, Br), log2 units
        if CAUSAL_MASK:  # mask before exp2: a hidden score may exceed its row's L by far
            sT = tl.where(offs_n[:, None] <= offs_m[None, :] + causal_off, sT, float("-inf"))
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
                   CAUSAL: tl.constexpr, EVEN_M: tl.constexpr, DQ_ATOMIC: tl.constexpr):
    pid_n = tl.program_id(0)
    bhk = tl.program_id(1)
    Hkv = H // G
    b = bhk // Hkv
    hk = bhk % Hkv
    start_n = pid_n * BLOCK_N
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    # -- K_j, V_j: loaded once, stay on chip (rows past Nk are zeros and never stored)
    K_h = K + b.to(tl.int64) * stride_kb + hk.to(tl.int64) * stride_kh
    V_h = V + b.to(tl.int64) * stride_vb + hk.to(tl.int64) * stride_vh
    k = _load_tile(K_h + offs_n[:, None] * stride_kn + offs_d[None, :], offs_n, Nk, offs_d, HEAD_D, BLOCK_D, True)
    v = _load_tile(V_h + offs_n[:, None] * stride_vn + offs_d[None, :], offs_n, Nk, offs_d, HEAD_D, BLOCK_D, True)
    dk = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)

    # -- query ranges: [m_lo, m_full) straddles the diagonal (element mask), [m_full, m_even) is
    #    wholly visible, [max(m_full, m_even), Nq) is the ragged last block; rows < m_lo see nothing
    if CAUSAL:
        m_lo = (tl.maximum(start_n - causal_off, 0) // BLOCK_M) * BLOCK_M
        m_full = tl.maximum(start_n + BLOCK_N - 1 - causal_off, 0)
        m_full = ((m_full + BLOCK_M - 1) // BLOCK_M) * BLOCK_M
        m_diag_end = tl.minimum(m_full, Nq)
    else:
        m_full = 0
    m_even = (Nq // BLOCK_M) * BLOCK_M
    MASK_BLOCK_M: tl.constexpr = BLOCK_M // 2 if BLOCK_M >= 32 else BLOCK_M

    for g in range(G):  # every query head that reads this K/V head
        h = hk * G + g
        Q_h = Q + b.to(tl.int64) * stride_qb + h.to(tl.int64) * stride_qh
        DO_h = DO + b.to(tl.int64) * stride_dob + h.to(tl.int64) * stride_doh
        DQ_h = DQ + b.to(tl.int64) * stride_dqb + h.to(tl.int64) * stride_dqh
        row0 = (b * H + h).to(tl.int64) * Nq
        if CAUSAL:  # diagonal blocks in half-height steps: the element mask costs registers
            dk, dv = _dkdv_loop(dk, dv, k, v, Q_h, DO_h, LSE2 + row0, DELTA + row0, DQ_h,
                                stride_qn, stride_don, stride_dqn, m_lo, m_diag_end, offs_n, Nq,
                                causal_off, qk_scale, sm_scale,
                                HEAD_D, BLOCK_D, MASK_BLOCK_M, True, True, DQ_ATOMIC)
        dk, dv = _dkdv_loop(dk, dv, k, v, Q_h, DO_h, LSE2 + row0, DELTA + row0, DQ_h,
                            stride_qn, stride_don, stride_dqn, m_full, m_even, offs_n, Nq,
                            causal_off, qk_scale, sm_scale,
                            HEAD_D, BLOCK_D, BLOCK_M, False, False, DQ_ATOMIC)
        if not EVEN_M:
            dk, dv = _dkdv_loop(dk, dv, k, v, Q_h, DO_h, LSE2 + row0, DELTA + row0, DQ_h,
                                stride_qn, stride_don, stride_dqn, tl.maximum(m_full, m_even), Nq, offs_n, Nq,
                                causal_off, qk_scale, sm_scale,
                                HEAD_D, BLOCK_D, BLOCK_M, False, True, DQ_ATOMIC)

    dk *= sm_scale
    mask = (offs_n[:, None] < Nk) & (offs_d[None, :] < HEAD_D)
    DK_h = DK + b.to(tl.int64) * stride_dkb + hk.to(tl.int64) * stride_dkh
    DV_h = DV + b.to(tl.int64) * stride_dvb + hk.to(tl.int64) * stride_dvh
    tl.store(DK_h + offs_n[:, None] * stride_dkn + offs_d[None, :], dk.to(k.dtype), mask=mask)
    tl.store(DV_h + offs_n[:, None] * stride_dvn + offs_d[None, :], dv.to(v.dtype), mask=mask)


# -- dQ (query block outer) ---------------------------------------------------------------------


@triton.jit
def _dq_loop(dq, q, do, lse2, Di, K_h, V_h, stride_kn, stride_vn,
             lo, hi, offs_m, Nk, causal_off, qk_scale,
             HEAD_D: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr,
             MASKED: tl.constexpr, CAUSAL: tl.constexpr):
    """Accumulate into dq (Br, BLOCK_D) the contributions of key blocks [lo, hi)."""
    offs_d = tl.arange(0, BLOCK_D)
    for start_n in range(lo, hi, BLOCK_N):
        start_n = tl.multiple_of(start_n, BLOCK_N)
        cols = start_n + tl.arange(0, BLOCK_N)
        k = _load_tile(K_h + cols[:, None] * stride_kn + offs_d[None, :], cols, Nk, offs_d, HEAD_D, BLOCK_D, MASKED)
        v = _load_tile(V_h + cols[:, None] * stride_vn + offs_d[None, :], cols, Nk, offs_d, HEAD_D, BLOCK_D, MASKED)
        # -- recompute P (Br, Bc) from L
        s = tl.dot(q, tl.trans(k)) * qk_scale - lse2[:, None]  # log2 units
        if MASKED:  # mask before exp2: a hidden score may exceed its row's L by far
            visible = cols[None, :] < Nk
            if CAUSAL:
                visible = visible & (cols[None, :] <= offs_m[:, None] + causal_off)
            s = tl.where(visible, s, float("-inf"))
        p = tl.math.exp2(s)
        # -- dP = dO Vᵀ, dS = P ∘ (dP − D), dQ += dS K
        dp = tl.dot(do, tl.trans(v))
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
                 CAUSAL: tl.constexpr):
    pid_m = tl.program_id(0)
    if CAUSAL:  # heaviest query blocks first
        pid_m = tl.num_programs(0) - 1 - pid_m
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    hk = h // G
    start_m = pid_m * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    q = _load_tile(Q + b.to(tl.int64) * stride_qb + h.to(tl.int64) * stride_qh
                   + offs_m[:, None] * stride_qn + offs_d[None, :], offs_m, Nq, offs_d, HEAD_D, BLOCK_D, True)
    do = _load_tile(DO + b.to(tl.int64) * stride_dob + h.to(tl.int64) * stride_doh
                    + offs_m[:, None] * stride_don + offs_d[None, :], offs_m, Nq, offs_d, HEAD_D, BLOCK_D, True)
    row = bh.to(tl.int64) * Nq + offs_m
    lse2 = tl.load(LSE2 + row, mask=offs_m < Nq, other=float("inf"))  # padded rows: P = 0
    Di = tl.load(DELTA + row, mask=offs_m < Nq, other=0.0)
    K_h = K + b.to(tl.int64) * stride_kb + hk.to(tl.int64) * stride_kh
    V_h = V + b.to(tl.int64) * stride_vb + hk.to(tl.int64) * stride_vh
    dq = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    # -- key ranges as in the forward: [0, full) unmasked, [full, hi) masked
    full, hi = _key_range(start_m, Nk, causal_off, BLOCK_M, BLOCK_N, CAUSAL)
    dq = _dq_loop(dq, q, do, lse2, Di, K_h, V_h, stride_kn, stride_vn, 0, full, offs_m, Nk, causal_off,
                  qk_scale, HEAD_D, BLOCK_D, BLOCK_N, False, CAUSAL)
    dq = _dq_loop(dq, q, do, lse2, Di, K_h, V_h, stride_kn, stride_vn, full, hi, offs_m, Nk, causal_off,
                  qk_scale, HEAD_D, BLOCK_D, BLOCK_N, True, CAUSAL)
    dq *= sm_scale
    DQ_h = DQ + b.to(tl.int64) * stride_dqb + h.to(tl.int64) * stride_dqh
    tl.store(DQ_h + offs_m[:, None] * stride_dqn + offs_d[None, :], dq.to(q.dtype),
             mask=(offs_m[:, None] < Nq) & (offs_d[None, :] < HEAD_D))


# -- launcher -----------------------------------------------------------------------------------


def _s3(x: torch.Tensor):
    return x.stride(0), x.stride(1), x.stride(2)


def _last_dim_contiguous(x: torch.Tensor) -> torch.Tensor:
    return x if x.stride(-1) == 1 else x.contiguous()


def prefill_backward(do: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
                lse: torch.Tensor, *, causal: bool, scale: float, dlse: torch.Tensor | None = None,
                config: BwdConfig | None = None, dq: torch.Tensor | None = None, dk: torch.Tensor | None = None,
                dv: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Run the backward kernels; returns (dq, dk, dv) shaped like (q, k, v).

    ``lse`` is the forward's natural-log logsumexp (B, H, Nq); ``dlse`` its incoming gradient
    when the caller's loss used it (dS gains P ∘ dL). No input checks here.
    """
    B, H, Nq, D = q.shape
    Hkv, Nk = k.shape[1], k.shape[2]
    do, q, k, v, out = (_last_dim_contiguous(t) for t in (do, q, k, v, out))
    dq = torch.empty_like(q, memory_format=torch.contiguous_format) if dq is None else dq
    dk = torch.empty_like(k, memory_format=torch.contiguous_format) if dk is None else dk
    dv = torch.empty_like(v, memory_format=torch.contiguous_format) if dv is None else dv
    if B * H == 0 or Nq == 0 or Nk == 0:
        dq.zero_(), dk.zero_(), dv.zero_()
        return dq, dk, dv
    cfg = config or default_bwd_config(D, causal, q.device, Nk)
    BLOCK_D = next_pow2(max(D, 16))
    lse = lse.contiguous()
    delta = torch.empty((B, H, Nq), device=q.device, dtype=torch.float32)  # D_i = rowsum(dO ∘ O) − dL_i
    lse2 = torch.empty_like(delta)  # (B, H, Nq): L in log2 units, +inf for empty rows
    has_dlse = dlse is not None
    PRE_M = 64 if q.device.type == "cuda" else 16
    _attn_bwd_prep[(triton.cdiv(Nq, PRE_M), B * H)](
        out, do, lse, dlse.contiguous() if has_dlse else lse, delta, lse2,
        *_s3(out), *_s3(do), H, Nq,
        HEAD_D=D, BLOCK_D=BLOCK_D, BLOCK_M=PRE_M, HAS_DLSE=has_dlse, num_warps=4)
    G = H // Hkv
    common = (H, G, Nq, Nk, Nk - Nq, scale * LOG2E, scale)
    dq_acc = torch.zeros((B, H, Nq, D), device=q.device, dtype=torch.float32) if cfg.dq_atomic else dq  # (B, H, Nq, D)
    _attn_bwd_dkdv[(triton.cdiv(Nk, cfg.block_n1), B * Hkv)](
        q, k, v, do, lse2, delta, dk, dv, dq_acc,
        *_s3(q), *_s3(k), *_s3(v), *_s3(do), *_s3(dk), *_s3(dv), *_s3(dq_acc),
        *common,
        HEAD_D=D, BLOCK_D=BLOCK_D, BLOCK_M=cfg.block_m1, BLOCK_N=cfg.block_n1,
        CAUSAL=bool(causal), EVEN_M=Nq % cfg.block_m1 == 0, DQ_ATOMIC=cfg.dq_atomic,
        num_warps=cfg.warps1, num_stages=cfg.stages1)
    if cfg.dq_atomic:
        dq.copy_(dq_acc)
    else:
        _attn_bwd_dq[(triton.cdiv(Nq, cfg.block_m2), B * H)](
            q, k, v, do, lse2, delta, dq,
            *_s3(q), *_s3(k), *_s3(v), *_s3(do), *_s3(dq),
            *common,
            HEAD_D=D, BLOCK_D=BLOCK_D, BLOCK_M=cfg.block_m2, BLOCK_N=cfg.block_n2,
            CAUSAL=bool(causal), num_warps=cfg.warps2, num_stages=cfg.stages2)
    return dq, dk, dv
