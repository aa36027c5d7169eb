"""FlashAttention-2 forward in Triton (lecture §5.1 algorithm, §6.2 causal block skipping, §6.3 FA2 order).

One program owns one block of Br = BLOCK_M query rows of one (batch, head) and streams the key /
value blocks of Bc = BLOCK_N rows past it (FA2 order: Q blocks are independent programs). The
running max m, the running sum l and the output accumulator stay in registers (online softmax,
§4.3); scores use exp2 with the softmax scale and log2(e) folded into one multiplier; the row's
logsumexp L is written once at the end (natural log, as ``attention_ref`` returns it).

Causal masks are bottom-right aligned (query i sees keys j <= i + Nk - Nq). The key loop is split
in two: blocks that every row of the program sees in full run without any mask, and the few
blocks on the diagonal (or the ragged last block) run with the element mask; blocks above the
diagonal are never loaded. GQA/MQA: query head h reads key/value head h // (H / Hkv) directly.
Head dims that are not powers of two (96) run in a padded BLOCK_D with masked loads and stores.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._runtime import LN2, LOG2E
from .config import FwdConfig, default_fwd_config, next_pow2, tma_ok

_LN2 = tl.constexpr(LN2)  # a jit function reads module globals only as constexprs

# -- jit helpers --------------------------------------------------------------------------------


@triton.jit
def _key_range(start_m, Nk, causal_off, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, CAUSAL: tl.constexpr):
    """Keys of the Q block starting at row start_m: [0, full) is seen unmasked by every row (whole
    BLOCK_N blocks), [full, hi) needs the element mask, keys >= hi are skipped (§6.2; bottom-right
    causal: row i sees keys j <= i + causal_off). Shared by the forward and the dQ kernel."""
    if CAUSAL:
        hi = tl.maximum(tl.minimum(Nk, start_m + BLOCK_M + causal_off), 0)
        full = tl.maximum(tl.minimum(Nk, start_m + 1 + causal_off), 0)
    else:
        hi = Nk
        full = Nk
    return (full // BLOCK_N) * BLOCK_N, hi


@triton.jit
def _load_tile(ptrs, rows, n_rows, offs_d, HEAD_D: tl.constexpr, BLOCK_D: tl.constexpr,
               CHECK_ROWS: tl.constexpr):
    """Load a (rows, BLOCK_D) tile; masks only where the tile can leave the tensor."""
    if CHECK_ROWS:
        if BLOCK_D == HEAD_D:
            x = tl.load(ptrs, mask=rows[:, None] < n_rows, other=0.0)
        else:
            x = tl.load(ptrs, mask=(rows[:, None] < n_rows) & (offs_d[None, :] < HEAD_D), other=0.0)
    else:
        if BLOCK_D == HEAD_D:
            x = tl.load(ptrs)
        else:
            x = tl.load(ptrs, mask=offs_d[None, :] < HEAD_D, other=0.0)
    return x


@triton.jit
def _fwd_step(acc, l_i, m_i, q, K, V, desc_k, desc_v, b, hk, stride_kn, stride_vn,
              start_n, offs_m, Nk, causal_off, qk_scale,
              HEAD_D: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr,
              MASKED: tl.constexpr, CAUSAL: tl.constexpr, USE_TMA: tl.constexpr):
    """One online-softmax step: the key/value block starting at start_n past the query block."""
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    start_n = tl.multiple_of(start_n, BLOCK_N)
    cols = start_n + offs_n
    # -- S = Q Kᵀ for this block, in log2 units
    if USE_TMA:
        k = desc_k.load([b, hk, start_n, 0]).reshape(BLOCK_N, BLOCK_D)
    else:
        k = _load_tile(K + cols[:, None] * stride_kn + offs_d[None, :], cols, Nk, offs_d,
                       HEAD_D, BLOCK_D, MASKED)
    s = tl.dot(q, tl.trans(k))  # (Br, Bc) float32
    if MASKED:
        # -- element mask: ragged last block and/or the causal diagonal
        visible = cols[None, :] < Nk
        if CAUSAL:
            visible = visible & (cols[None, :] <= offs_m[:, None] + causal_off)
        s = tl.where(visible, s * qk_scale, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # rows with nothing visible yet
        p = tl.math.exp2(s - m_use[:, None])
    else:
        # -- scale folded into the max and the exponent (one FMA per score)
        m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)
        m_use = m_new
        p = tl.math.exp2(s * qk_scale - m_use[:, None])
    # -- update m_i and l_i: rescale what was summed under the old max
    alpha = tl.math.exp2(m_i - m_use)
    l_i = l_i * alpha + tl.sum(p, 1)
    # -- update the output accumulator: acc·alpha + P̃ V
    if USE_TMA:
        v = desc_v.load([b, hk, start_n, 0]).reshape(BLOCK_N, BLOCK_D)
    else:
        v = _load_tile(V + cols[:, None] * stride_vn + offs_d[None, :], cols, Nk, offs_d,
                       HEAD_D, BLOCK_D, MASKED)
    acc = acc * alpha[:, None]
    acc = tl.dot(p.to(v.dtype), v, acc)
    m_i = m_new
    return acc, l_i, m_i


@triton.jit
def _fwd_kv_loop(acc, l_i, m_i, q, K, V, desc_k, desc_v, b, hk, stride_kn, stride_vn,
                 lo, hi, offs_m, Nk, causal_off, qk_scale,
                 HEAD_D: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr,
                 MASKED: tl.constexpr, CAUSAL: tl.constexpr, USE_TMA: tl.constexpr, WARP_SPEC: tl.constexpr):
    """Stream key/value blocks [lo, hi) past the query block (one online-softmax step each).
    WARP_SPEC asks Triton to warp-specialise the loop (producer warps issue the loads, consumer
    warp groups do the math; Hopper and newer, with tensor descriptors)."""
    if WARP_SPEC:
        for start_n in tl.range(lo, hi, BLOCK_N, warp_specialize=True):
            acc, l_i, m_i = _fwd_step(acc, l_i, m_i, q, K, V, desc_k, desc_v, b, hk, stride_kn, stride_vn,
                                      start_n, offs_m, Nk, causal_off, qk_scale,
                                      HEAD_D, BLOCK_D, BLOCK_N, MASKED, CAUSAL, USE_TMA)
    else:
        for start_n in range(lo, hi, BLOCK_N):
            acc, l_i, m_i = _fwd_step(acc, l_i, m_i, q, K, V, desc_k, desc_v, b, hk, stride_kn, stride_vn,
                                      start_n, offs_m, Nk, causal_off, qk_scale,
                                      HEAD_D, BLOCK_D, BLOCK_N, MASKED, CAUSAL, USE_TMA)
    return acc, l_i, m_i


# -- kernel -------------------------------------------------------------------------------------


@triton.jit
def _attn_fwd(Q, K, V, O, LSE,  # pointers, or tensor descriptors (B, H|Hkv, N, D) when USE_TMA
              stride_qb, stride_qh, stride_qn,
              stride_kb, stride_kh, stride_kn,
              stride_vb, stride_vh, stride_vn,
              stride_ob, stride_oh, stride_on,
              H, G, Nq, Nk, causal_off, qk_scale,
              HEAD_D: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
              CAUSAL: tl.constexpr, USE_TMA: tl.constexpr, WARP_SPEC: tl.constexpr = False):
    pid_m = tl.program_id(0)
    if CAUSAL:  # heaviest query blocks first: the short ones fill the tail of the grid
        pid_m = tl.num_programs(0) - 1 - pid_m
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    hk = h // G  # GQA/MQA: the key/value head this query head reads
    start_m = pid_m * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)

    # -- Q block: loaded once, stays on chip
    if USE_TMA:
        q = Q.load([b, h, start_m, 0]).reshape(BLOCK_M, BLOCK_D)
        K_h = K
        V_h = V
    else:
        Q_h = Q + b.to(tl.int64) * stride_qb + h.to(tl.int64) * stride_qh
        K_h = K + b.to(tl.int64) * stride_kb + hk.to(tl.int64) * stride_kh
        V_h = V + b.to(tl.int64) * stride_vb + hk.to(tl.int64) * stride_vh
        q = _load_tile(Q_h + offs_m[:, None] * stride_qn + offs_d[None, :], offs_m, Nq, offs_d,
                       HEAD_D, BLOCK_D, True)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)

    # -- key ranges: [0, full) seen by every row unmasked; [full, hi) needs the element mask
    full, hi = _key_range(start_m, Nk, causal_off, BLOCK_M, BLOCK_N, CAUSAL)

    acc, l_i, m_i = _fwd_kv_loop(acc, l_i, m_i, q, K_h, V_h, K, V, b, hk, stride_kn, stride_vn,
                                 0, full, offs_m, Nk, causal_off, qk_scale,
                                 HEAD_D, BLOCK_D, BLOCK_N, False, CAUSAL, USE_TMA, WARP_SPEC)
    acc, l_i, m_i = _fwd_kv_loop(acc, l_i, m_i, q, K_h, V_h, K, V, b, hk, stride_kn, stride_vn,
                                 full, hi, offs_m, Nk, causal_off, qk_scale,
                                 HEAD_D, BLOCK_D, BLOCK_N, True, CAUSAL, USE_TMA, False)

    # -- epilogue: O = acc / l, L = ln(sum exp S) = (m + log2 l)·ln 2; empty rows: O = 0, L = -inf
    empty = l_i == 0.0
    l_safe = tl.where(empty, 1.0, l_i)
    out = acc * (1.0 / l_safe)[:, None]
    lse = tl.where(empty, float("-inf"), (m_i + tl.math.log2(l_safe)) * _LN2)
    tl.store(LSE + bh.to(tl.int64) * Nq + offs_m, lse, mask=offs_m < Nq)
    if USE_TMA:
        O.store([b, h, start_m, 0], out.to(q.dtype).reshape(1, 1, BLOCK_M, BLOCK_D))
    else:
        O_h = O + b.to(tl.int64) * stride_ob + h.to(tl.int64) * stride_oh
        o_ptrs = O_h + offs_m[:, None] * stride_on + offs_d[None, :]
        if BLOCK_D == HEAD_D:
            tl.store(o_ptrs, out.to(q.dtype), mask=offs_m[:, None] < Nq)
        else:
            tl.store(o_ptrs, out.to(q.dtype), mask=(offs_m[:, None] < Nq) & (offs_d[None, :] < HEAD_D))


# -- launcher -----------------------------------------------------------------------------------


def _last_dim_contiguous(x: torch.Tensor) -> torch.Tensor:
    return x if x.stride(-1) == 1 else x.contiguous()


def prefill_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool, scale: float,
                config: FwdConfig | None = None, out: torch.Tensor | None = None,
                lse: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Run the forward kernel; no input checks (the public entry point does them).

    q (B, H, Nq, D), k/v (B, Hkv, Nk, D) in float16/bfloat16 on CUDA (or CPU under the Triton
    interpreter). Returns out (B, H, Nq, D) in q's dtype and lse (B, H, Nq) float32 (natural log).
    ``out``/``lse`` may be given preallocated (tests poison them to check every element is written).
    """
    B, H, Nq, D = q.shape
    Hkv, Nk = k.shape[1], k.shape[2]
    q, k, v = _last_dim_contiguous(q), _last_dim_contiguous(k), _last_dim_contiguous(v)
    if out is None:
        out = torch.empty((B, H, Nq, D), device=q.device, dtype=q.dtype)  # (B, H, Nq, D)
    if lse is None:
        lse = torch.empty((B, H, Nq), device=q.device, dtype=torch.float32)  # (B, H, Nq), natural log
    if Nq == 0 or B * H == 0:
        return out, lse
    if Nk == 0:  # no keys at all: every row is empty
        out.zero_()
        lse.fill_(float("-inf"))
        return out, lse
    cfg = config or default_fwd_config(D, causal, q.device, Nk)
    BLOCK_D = next_pow2(max(D, 16))
    use_tma = cfg.tma and tma_ok(q, k, v, out)
    if use_tma:
        from triton.tools.tensor_descriptor import TensorDescriptor

        def desc(x, rows):
            return TensorDescriptor(x, list(x.shape), list(x.stride()), [1, 1, rows, BLOCK_D])

        args = (desc(q, cfg.block_m), desc(k, cfg.block_n), desc(v, cfg.block_n), desc(out, cfg.block_m))
    else:
        args = (q, k, v, out)
    grid = (triton.cdiv(Nq, cfg.block_m), B * H)
    extra = {"maxnreg": cfg.maxnreg} if cfg.maxnreg else {}
    _attn_fwd[grid](
        *args, lse,
        q.stride(0), q.stride(1), q.stride(2),
        k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2),
        out.stride(0), out.stride(1), out.stride(2),
        H, H // Hkv, Nq, Nk, Nk - Nq, scale * LOG2E,
        HEAD_D=D, BLOCK_D=BLOCK_D, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n,
        CAUSAL=bool(causal), USE_TMA=use_tma, WARP_SPEC=cfg.warp_spec and use_tma,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages, **extra,
    )
    return out, lse
