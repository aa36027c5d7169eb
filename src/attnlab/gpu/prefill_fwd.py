"""FlashAttention-2 forward in Triton (lecture §5.1 algorithm, §6.2 block skipping, §6.3 FA2 order), with the
variants of ``attnlab.variants``: sliding windows, softcap, ALiBi and packed variable-length batches.

One program owns one block of Br = BLOCK_M query rows of one (batch, head) and streams the key /
value blocks of Bc = BLOCK_N rows past it (FA2 order: Q blocks are independent programs). The
running max m, the running sum l and the output accumulator stay in registers (online softmax,
§4.3); scores use exp2 with the softmax scale and log2(e) folded into one multiplier; the row's
logsumexp L is written once at the end (natural log, as ``attention_ref`` returns it).

Masks are bottom-right aligned (off = Nk − Nq): query i sees keys i + off − left <= j <= i + off + right
(−1: unbounded side; causal is right = 0). The key loop runs in up to three parts: the blocks on the
window's left edge (element mask), the blocks every row of the program sees in full (no mask at all),
and the blocks on the diagonal / right edge or the ragged end (element mask). Blocks outside the
window are never loaded: the loop bounds move, not a mask (§6.2 generalised).
GQA/MQA: query head h reads key/value head h // (H / Hkv) directly. Head dims that are not powers of
two (96) run in a padded BLOCK_D with masked loads and stores. Every variant is a ``tl.constexpr``
flag, so a dense or causal call compiles to the kernel it always was.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .._runtime import LN2, LOG2E
from .config import (
    FwdConfig,
    default_fwd_config,
    gluon_alibi_config,
    next_pow2,
    packed_fwd_config,
    packed_gluon_fwd_config,
    tma_ok,
    variant_fwd_config,
    varlen_bounds,
    varlen_grid,
)
from .launch import (
    KeptLaunch,
    current_stream,
    hooks_set,
    keep_plan,
    launch_kept,
    rebased,
    recording,
    tensor_key,
)
from .layout import empty_like_layout, packed_as_bhnd

_LN2 = tl.constexpr(LN2)  # a jit function reads module globals only as constexprs
_LOG2E = tl.constexpr(LOG2E)
_M2LOG2E = tl.constexpr(-2.0 * LOG2E)

# -- jit helpers (shared with the backward) -------------------------------------------------------


@triton.jit
def _key_range(start_m, Nk, causal_off, win_off, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
               CAUSAL: tl.constexpr, HAS_WINDOW: tl.constexpr):
    """Keys of the Q block starting at row start_m, as (lo, lo_full, full, hi): [lo, lo_full) straddles
    the window's left edge (element mask), [lo_full, full) is seen unmasked by every row (whole BLOCK_N
    blocks), [max(full, lo_full), hi) needs the element mask (diagonal / right edge, ragged end), and
    keys outside [lo, hi) are skipped (§6.2). Row i sees keys j <= i + causal_off (CAUSAL: the right
    edge) and j >= i + win_off (HAS_WINDOW: the left edge). Shared by the forward and the dQ kernel."""
    if CAUSAL:
        hi = tl.maximum(tl.minimum(Nk, start_m + BLOCK_M + causal_off), 0)
        full = tl.maximum(tl.minimum(Nk, start_m + 1 + causal_off), 0)
    else:
        hi = Nk
        full = Nk
    if HAS_WINDOW:
        lo = (tl.maximum(start_m + win_off, 0) // BLOCK_N) * BLOCK_N
        lo_full = tl.maximum(start_m + BLOCK_M - 1 + win_off, 0)
        lo_full = ((lo_full + BLOCK_N - 1) // BLOCK_N) * BLOCK_N
    else:
        lo = 0
        lo_full = 0
    return lo, lo_full, (full // BLOCK_N) * BLOCK_N, hi


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
def _tanh(x, SOFTCAP: tl.constexpr):
    """tanh. SOFTCAP == 2 (CUDA): the hardware's tanh.approx.f32, one MUFU op (relative error about
    2^-11, as flash-attn's fast-math tanhf). Else one exp2: (1 − e)/(1 + e) with e = exp(−2|x|), the sign
    put back; ±1 at ±inf, no NaN (the Triton interpreter runs this one)."""
    if SOFTCAP == 2:
        t = tl.inline_asm_elementwise("tanh.approx.f32 $0, $1;", "=r,r", [x], dtype=tl.float32, is_pure=True,
                                      pack=1)
    else:
        e = tl.math.exp2(tl.abs(x) * _M2LOG2E)
        t = tl.math.fdiv(1.0 - e, 1.0 + e, ieee_rounding=False)
        t = tl.where(x < 0, -t, t)
    return t


@triton.jit
def _score_mod(s, i, j, qk_scale, cap2, slope2, alibi_off, SOFTCAP: tl.constexpr, ALIBI: tl.constexpr):
    """Raw scores q·k (float32) -> the modified scores in log2 units, and tanh (for the backward).

    SOFTCAP: qk_scale = scale/softcap and cap2 = softcap·log2e, so cap2·tanh(s·qk_scale) is
    softcap·tanh(scale·s/softcap) in log2 units; else qk_scale = scale·log2e. ALIBI then subtracts
    slope2·|i + alibi_off − j| (slope2 = slope·log2e); i, j broadcast to s's shape."""
    if SOFTCAP:
        t = _tanh(s * qk_scale, SOFTCAP)
        s = t * cap2
    else:
        s = s * qk_scale
        t = s
    if ALIBI:
        s = s - slope2 * tl.abs(i + alibi_off - j).to(tl.float32)
    return s, t


@triton.jit
def _fwd_step(acc, l_i, m_i, q, K, V, desc_k, desc_v, b, hk, stride_kn, stride_vn,
              start_n, offs_m, Nk, causal_off, win_off, alibi_off, qk_scale, cap2, slope2,
              HEAD_D: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr,
              MASKED: tl.constexpr, CAUSAL: tl.constexpr, USE_TMA: tl.constexpr,
              HAS_WINDOW: tl.constexpr, SOFTCAP: tl.constexpr, ALIBI: tl.constexpr):
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
        # -- element mask: ragged last block, the diagonal / right edge, the window's left edge
        visible = cols[None, :] < Nk
        if CAUSAL:
            visible = visible & (cols[None, :] <= offs_m[:, None] + causal_off)
        if HAS_WINDOW:
            visible = visible & (cols[None, :] >= offs_m[:, None] + win_off)
    if SOFTCAP or ALIBI:
        s, _ = _score_mod(s, offs_m[:, None], cols[None, :], qk_scale, cap2, slope2, alibi_off, SOFTCAP, ALIBI)
        if MASKED:
            s = tl.where(visible, s, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            m_use = tl.where(m_new == float("-inf"), 0.0, m_new)  # rows with nothing visible yet
        else:
            m_new = tl.maximum(m_i, tl.max(s, 1))
            m_use = m_new
        p = tl.math.exp2(s - m_use[:, None])
    elif MASKED:
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
                 lo, hi, offs_m, Nk, causal_off, win_off, alibi_off, qk_scale, cap2, slope2,
                 HEAD_D: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_N: tl.constexpr,
                 MASKED: tl.constexpr, CAUSAL: tl.constexpr, USE_TMA: tl.constexpr, WARP_SPEC: tl.constexpr,
                 HAS_WINDOW: tl.constexpr, SOFTCAP: tl.constexpr, ALIBI: tl.constexpr):
    """Stream key/value blocks [lo, hi) past the query block (one online-softmax step each).
    WARP_SPEC asks Triton to warp-specialise the loop (producer warps issue the loads, consumer
    warp groups do the math; Hopper and newer, with tensor descriptors)."""
    if WARP_SPEC:
        for start_n in tl.range(lo, hi, BLOCK_N, warp_specialize=True):
            acc, l_i, m_i = _fwd_step(acc, l_i, m_i, q, K, V, desc_k, desc_v, b, hk, stride_kn, stride_vn,
                                      start_n, offs_m, Nk, causal_off, win_off, alibi_off, qk_scale, cap2, slope2,
                                      HEAD_D, BLOCK_D, BLOCK_N, MASKED, CAUSAL, USE_TMA, HAS_WINDOW, SOFTCAP, ALIBI)
    else:
        for start_n in range(lo, hi, BLOCK_N):
            acc, l_i, m_i = _fwd_step(acc, l_i, m_i, q, K, V, desc_k, desc_v, b, hk, stride_kn, stride_vn,
                                      start_n, offs_m, Nk, causal_off, win_off, alibi_off, qk_scale, cap2, slope2,
                                      HEAD_D, BLOCK_D, BLOCK_N, MASKED, CAUSAL, USE_TMA, HAS_WINDOW, SOFTCAP, ALIBI)
    return acc, l_i, m_i


@triton.jit
def _varlen_seq(CU_Q, CU_K, b, total_q, total_k):
    """Sequence b of a packed batch, read from the cumulative lengths in device memory: (q start,
    q length, k start, k length). Clamped into the packed tensors (start in [0, total], length >= 0,
    start + length <= total): bad values give wrong numbers, never an access outside q, k, v or the
    outputs."""
    q0 = tl.minimum(tl.maximum(tl.load(CU_Q + b), 0), total_q)
    q1 = tl.minimum(tl.maximum(tl.load(CU_Q + b + 1), q0), total_q)
    k0 = tl.minimum(tl.maximum(tl.load(CU_K + b), 0), total_k)
    k1 = tl.minimum(tl.maximum(tl.load(CU_K + b + 1), k0), total_k)
    return q0.to(tl.int32), (q1 - q0).to(tl.int32), k0.to(tl.int32), (k1 - k0).to(tl.int32)


@triton.jit
def _varlen_block(H, REVERSE: tl.constexpr):
    """A packed batch's program: (sequence b, head h, block index). Axis 0 is b·H + h, axis 1 the
    block of a grid sized for the longest sequence; REVERSE deals the blocks last first, so the
    longest sequences' last blocks run first (the heaviest under a causal mask) and the short
    ones fill the grid's tail."""
    bh = tl.program_id(0)
    blk = tl.program_id(1)
    if REVERSE:
        blk = tl.num_programs(1) - 1 - blk
    return bh // H, bh % H, blk


@triton.jit
def _row0(b, r0, stride_b, stride_n, VARLEN: tl.constexpr):
    """Offset of a sequence's first row: batch b's (padded), or row r0 of the packed tensor (VARLEN)."""
    if VARLEN:
        return r0.to(tl.int64) * stride_n
    else:
        return b.to(tl.int64) * stride_b


# -- kernel -------------------------------------------------------------------------------------


@triton.jit
def _attn_fwd(Q, K, V, O, LSE,  # pointers, or tensor descriptors (B, H|Hkv, N, D) when USE_TMA
              stride_qb, stride_qh, stride_qn,
              stride_kb, stride_kh, stride_kn,
              stride_vb, stride_vh, stride_vn,
              stride_ob, stride_oh, stride_on,
              H, G, Nq, Nk, causal_off, qk_scale,
              HEAD_D: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
              CAUSAL: tl.constexpr, USE_TMA: tl.constexpr, WARP_SPEC: tl.constexpr = False,
              # variants (attnlab.variants); all off: the dense / causal kernel
              SLOPES=None, stride_sb=0, stride_sh=0, CU_Q=None, CU_K=None,
              win_off=0, alibi_off=0, cap2=1.0,
              HAS_WINDOW: tl.constexpr = False, SOFTCAP: tl.constexpr = 0, ALIBI: tl.constexpr = False,
              VARLEN: tl.constexpr = False):
    """CAUSAL: a right edge, row i sees keys j <= i + causal_off (= off + right); HAS_WINDOW: a left edge,
    j >= i + win_off (= off − left). VARLEN: a packed batch, grid (B·H, query blocks of max_seqlen_q);
    Nq, Nk are then total_q, total_k (LSE is (H, total_q)), tensors are (1, H, total, D) views, each
    program reads its sequence's bounds from CU_Q, CU_K and returns at once when its block lies past
    the sequence's end, and each sequence adds its own Nk − Nq to causal_off, win_off, alibi_off."""
    if VARLEN:
        b, h, pid_m = _varlen_block(H, True)
        q0, n_q, k0, n_k = _varlen_seq(CU_Q, CU_K, b, Nq, Nk)
        start_m = pid_m * BLOCK_M
        if start_m >= n_q:  # the grid covers the longest sequence; this one is shorter
            return
        lse_row = h.to(tl.int64) * Nq + q0
        Nq = n_q
        Nk = n_k
        causal_off += Nk - Nq
        win_off += Nk - Nq
        alibi_off += Nk - Nq
    else:
        pid_m = tl.program_id(0)
        if CAUSAL:  # heaviest query blocks first: the short ones fill the tail of the grid
            pid_m = tl.num_programs(0) - 1 - pid_m
        bh = tl.program_id(1)
        b = bh // H
        h = bh % H
        start_m = pid_m * BLOCK_M
        q0 = b  # (unused: rows start at batch b)
        k0 = b
    hk = h // G  # GQA/MQA: the key/value head this query head reads
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    if ALIBI:
        slope2 = tl.load(SLOPES + b * stride_sb + h * stride_sh).to(tl.float32) * _LOG2E
    else:
        slope2 = 0.0

    # -- Q block: loaded once, stays on chip
    if USE_TMA:
        q = Q.load([b, h, start_m, 0]).reshape(BLOCK_M, BLOCK_D)
        K_h = K
        V_h = V
    else:
        Q_h = Q + _row0(b, q0, stride_qb, stride_qn, VARLEN) + h.to(tl.int64) * stride_qh
        K_h = K + _row0(b, k0, stride_kb, stride_kn, VARLEN) + hk.to(tl.int64) * stride_kh
        V_h = V + _row0(b, k0, stride_vb, stride_vn, VARLEN) + hk.to(tl.int64) * stride_vh
        q = _load_tile(Q_h + offs_m[:, None] * stride_qn + offs_d[None, :], offs_m, Nq, offs_d,
                       HEAD_D, BLOCK_D, True)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)

    # -- key ranges: [lo, lo_full) and [max(full, lo_full), hi) masked, [lo_full, full) unmasked
    lo, lo_full, full, hi = _key_range(start_m, Nk, causal_off, win_off, BLOCK_M, BLOCK_N, CAUSAL, HAS_WINDOW)
    if HAS_WINDOW:  # the window's left edge
        acc, l_i, m_i = _fwd_kv_loop(acc, l_i, m_i, q, K_h, V_h, K, V, b, hk, stride_kn, stride_vn,
                                     lo, tl.minimum(lo_full, hi), offs_m, Nk, causal_off, win_off, alibi_off,
                                     qk_scale, cap2, slope2, HEAD_D, BLOCK_D, BLOCK_N, True, CAUSAL, USE_TMA, False,
                                     HAS_WINDOW, SOFTCAP, ALIBI)
        tail = tl.maximum(full, lo_full)
    else:
        tail = full
    acc, l_i, m_i = _fwd_kv_loop(acc, l_i, m_i, q, K_h, V_h, K, V, b, hk, stride_kn, stride_vn,
                                 lo_full, full, offs_m, Nk, causal_off, win_off, alibi_off, qk_scale, cap2, slope2,
                                 HEAD_D, BLOCK_D, BLOCK_N, False, CAUSAL, USE_TMA, WARP_SPEC,
                                 HAS_WINDOW, SOFTCAP, ALIBI)
    acc, l_i, m_i = _fwd_kv_loop(acc, l_i, m_i, q, K_h, V_h, K, V, b, hk, stride_kn, stride_vn,
                                 tail, hi, offs_m, Nk, causal_off, win_off, alibi_off, qk_scale, cap2, slope2,
                                 HEAD_D, BLOCK_D, BLOCK_N, True, CAUSAL, USE_TMA, False,
                                 HAS_WINDOW, SOFTCAP, ALIBI)

    # -- epilogue: O = acc / l, L = ln(sum exp S) = (m + log2 l)·ln 2; empty rows: O = 0, L = -inf
    empty = l_i == 0.0
    l_safe = tl.where(empty, 1.0, l_i)
    out = acc * (1.0 / l_safe)[:, None]
    lse = tl.where(empty, float("-inf"), (m_i + tl.math.log2(l_safe)) * _LN2)
    if VARLEN:
        tl.store(LSE + lse_row + offs_m, lse, mask=offs_m < Nq)
    else:
        tl.store(LSE + bh.to(tl.int64) * Nq + offs_m, lse, mask=offs_m < Nq)
    if USE_TMA:
        O.store([b, h, start_m, 0], out.to(q.dtype).reshape(1, 1, BLOCK_M, BLOCK_D))
    else:
        O_h = O + _row0(b, q0, stride_ob, stride_on, VARLEN) + h.to(tl.int64) * stride_oh
        o_ptrs = O_h + offs_m[:, None] * stride_on + offs_d[None, :]
        if BLOCK_D == HEAD_D:
            tl.store(o_ptrs, out.to(q.dtype), mask=offs_m[:, None] < Nq)
        else:
            tl.store(o_ptrs, out.to(q.dtype), mask=(offs_m[:, None] < Nq) & (offs_d[None, :] < HEAD_D))


# -- launcher -----------------------------------------------------------------------------------


def _last_dim_contiguous(x: torch.Tensor) -> torch.Tensor:
    return x if x.stride(-1) == 1 else x.contiguous()


def variant_args(mask, scale: float, softcap: float | None, slopes: torch.Tensor | None, off: int,
                 device: torch.device) -> dict:
    """The kernels' variant arguments for a call whose sequences have Nk − Nq = ``off`` (0 for a
    packed batch: the kernels add each sequence's own): causal_off, win_off, alibi_off, qk_scale,
    cap2, the slopes and the constexpr flags (SOFTCAP: 0 off, 1 tanh from exp2, 2 the GPU's tanh)."""
    return dict(
        causal_off=off + max(mask.right, 0), win_off=off - mask.left if mask.left >= 0 else 0,
        alibi_off=off if slopes is not None else 0,
        qk_scale=scale / softcap if softcap is not None else scale * LOG2E,
        cap2=softcap * LOG2E if softcap is not None else 1.0,
        SLOPES=slopes, stride_sb=slopes.stride(0) if slopes is not None else 0,
        stride_sh=slopes.stride(1) if slopes is not None else 0,
        CAUSAL=mask.right >= 0, HAS_WINDOW=mask.left >= 0, ALIBI=slopes is not None,
        SOFTCAP=0 if softcap is None else 2 if device.type == "cuda" and torch.version.hip is None else 1)


def prefill_forward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, mask, scale: float,
                    softcap: float | None = None, slopes: torch.Tensor | None = None, cu_seqlens=None,
                    max_seqlen=None, config: FwdConfig | None = None, out: torch.Tensor | None = None,
                    lse: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Run the forward kernel; no input checks (the public entry points do them).

    q (B, H, Nq, D), k/v (B, Hkv, Nk, D) in float16/bfloat16 on CUDA (or CPU under the Triton
    interpreter); ``mask`` a ``variants.Mask``, ``softcap`` None or > 0, ``slopes`` (B, H) or None.
    Returns out (B, H, Nq, D) in q's dtype and lse (B, H, Nq) float32 (natural log).
    ``cu_seqlens`` = (cu_q, cu_k), (B + 1,) int32 (or int64) cumulative lengths on q's device: a packed
    batch, q (total_q, H, D), k/v (total_k, Hkv, D); returns out (total_q, H, D) and lse (H, total_q).
    ``max_seqlen`` = (max_q, max_k), at least the longest sequences (an upper bound is fine: the extra
    programs return at once); None reads them from ``cu_seqlens`` on the host, a device synchronisation.
    The lengths' values are never checked here: the kernel clamps them into the packed tensors, so bad
    values give wrong numbers, never an access out of bounds; rows no program owns are left unwritten.
    ``out``/``lse`` may be given preallocated (tests poison them to check every element is written).
    A ``config`` (or table entry) with ``gluon`` runs the Gluon forward (``prefill_gluon``) where it can:
    Hopper, D 64/128, dense, causal or a sliding window (warp-specialised), with or without ALiBi, tensor
    descriptors, not softcap; a packed batch without ALiBi (warp-specialised; without a ``config``, the
    ``packed_gluon_fwd_config`` entry while ``prefill_gluon.PACKED`` is on); anywhere else the Triton table's
    entry runs. An ALiBi call on a table entry of three consumer warp groups takes two (``gluon_alibi_config``).
    """
    D = q.shape[-1]
    q, k, v = _last_dim_contiguous(q), _last_dim_contiguous(k), _last_dim_contiguous(v)
    if cu_seqlens is None:
        B, H, Nq, _ = q.shape
        Hkv, Nk = k.shape[1], k.shape[2]
        n_keys, out_shape, lse_shape = Nk, (B, H, Nq, D), (B, H, Nq)
    else:
        (Nq, H, _), (Nk, Hkv, _) = q.shape, k.shape  # Nq, Nk: total_q, total_k
        cu_q, cu_k, max_q, n_keys = varlen_bounds(cu_seqlens, max_seqlen)
        B = cu_q.shape[0] - 1
        out_shape, lse_shape = (Nq, H, D), (H, Nq)
    if out is None:  # (B, H, Nq, D) or (total_q, H, D), laid out as q is
        out = empty_like_layout(q, out_shape)
    if lse is None:
        lse = torch.empty(lse_shape, device=q.device, dtype=torch.float32)  # (B, H, Nq) or (H, total_q)
    if Nq == 0 or B * H == 0:
        return out, lse
    if Nk == 0:  # no keys at all: every row is empty
        out.zero_()
        lse.fill_(float("-inf"))
        return out, lse
    causal = not mask.dense
    cfg = config or default_fwd_config(D, causal, q.device, n_keys)
    if cu_seqlens is not None and config is None and softcap is None and slopes is None:
        from . import prefill_gluon

        if prefill_gluon.PACKED:
            cfg = packed_gluon_fwd_config(D) or cfg
    if cfg.gluon:  # the Gluon kernel takes dense, causal, windowed and ALiBi calls on Hopper, packed batches without
        from .prefill_gluon import gluon_supported  # ALiBi (warp-specialised); Triton the rest

        plain = (cu_seqlens is None or (cfg.warp_spec and slopes is None)) and (mask.left < 0 or cfg.warp_spec) \
            and softcap is None and scale > 0  # (a masked block's scores are masked raw, then scaled: scale > 0)
        if not (plain and gluon_supported(q, k, v) and tma_ok(out)):
            cfg = default_fwd_config(D, causal, q.device, n_keys, gluon=False)
        elif config is None and slopes is not None:
            cfg = gluon_alibi_config(cfg)
    if cfg.gluon and cu_seqlens is not None:
        _gluon_packed(q, k, v, out, lse, mask, scale, cfg, cu_q, cu_k, max_q)
        return out, lse
    if cfg.gluon:  # bottom-right aligned: row i sees keys j <= i + (Nk − Nq) + right; ALiBi |i + (Nk − Nq) − j|
        from .prefill_gluon import gluon_forward

        gluon_forward(q, k, v, out, lse, causal_off=Nk - Nq + mask.right if mask.right >= 0 else None, scale=scale,
                      block_m=cfg.block_m, block_n=cfg.block_n, stages=cfg.num_stages, num_warps=cfg.num_warps,
                      warp_spec=cfg.warp_spec, win_off=Nk - Nq - mask.left if mask.left >= 0 else None,
                      slopes=slopes, persistent=cfg.persistent and slopes is None, head_chunk=cfg.head_chunk,
                      part_first=cfg.part_first, dynamic=cfg.persistent and slopes is None and cfg.dynamic)
        return out, lse
    if config is None:
        plain_packed = cu_seqlens is not None and softcap is None and slopes is None and mask.left < 0
        cfg = (plain_packed and packed_fwd_config(D, causal, q.device, n_keys)) or variant_fwd_config(
            cfg, D, packed=cu_seqlens is not None, score_mod=softcap is not None or slopes is not None,
            window=mask.left >= 0)
    plan_key = None
    if q.is_cuda and slopes is None:  # a kept plan of this signature (``_FwdPlan``), or the key to keep one under
        plan_key = (tensor_key(q), tensor_key(k), tensor_key(v), tensor_key(out), tensor_key(lse), mask.left,
                    mask.right, scale, softcap, cfg, None if cu_seqlens is None else (
                        tensor_key(cu_q), tensor_key(cu_k), max_q, n_keys), torch.cuda.current_device())
        plan = _PLANS.get(plan_key)
        if plan is not None and not hooks_set():
            plan.run(q, k, v, out, lse, None if cu_seqlens is None else (cu_q, cu_k))
            return out, lse
    BLOCK_D = next_pow2(max(D, 16))
    extra = {"maxnreg": cfg.maxnreg} if cfg.maxnreg else {}
    var = variant_args(mask, scale, softcap, slopes, Nk - Nq if cu_seqlens is None else 0, q.device)
    if cu_seqlens is not None:  # packed: (sequence, head) x query blocks of the longest sequence
        q4, k4, v4, o4 = (packed_as_bhnd(t) for t in (q, k, v, out))  # (1, H|Hkv, total, D)
        args, use_tma, grid = (q4, k4, v4, o4), False, varlen_grid(B, H, max_q, cfg.block_m)
        var |= dict(CU_Q=cu_q, CU_K=cu_k, VARLEN=True)
    else:
        q4, k4, v4, o4 = q, k, v, out
        use_tma = cfg.tma and tma_ok(q, k, v, out)
        if use_tma:
            from triton.tools.tensor_descriptor import TensorDescriptor

            def desc(x, rows):
                return TensorDescriptor(x, list(x.shape), list(x.stride()), [1, 1, rows, BLOCK_D])

            args = (desc(q, cfg.block_m), desc(k, cfg.block_n), desc(v, cfg.block_n), desc(out, cfg.block_m))
        else:
            args = (q, k, v, out)
        grid = (triton.cdiv(Nq, cfg.block_m), B * H)
    if grid[1] == 0:  # a packed batch whose longest query sequence is empty
        return out, lse
    named = dict(zip("QKVO", args), LSE=lse, CU_Q=var.get("CU_Q"), CU_K=var.get("CU_K"))
    # (the kept compiled kernel after a specialisation's first call: launch.launch_kept)
    args = (*args, lse, *q4.stride()[:3], *k4.stride()[:3], *v4.stride()[:3], *o4.stride()[:3], H, H // Hkv, Nq, Nk)
    with recording() as launches:
        launch_kept(_attn_fwd, grid, dict(zip(_attn_fwd.arg_names, args)) | var | dict(
            HEAD_D=D, BLOCK_D=BLOCK_D, BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, USE_TMA=use_tma,
            WARP_SPEC=cfg.warp_spec and use_tma), num_warps=cfg.num_warps, num_stages=cfg.num_stages, **extra)
    if plan_key is not None:
        _FwdPlan.keep(plan_key, launches, named, _SOURCES, _TRITON_DESCS if use_tma else ())
    return out, lse


def _gluon_packed(q, k, v, out, lse, mask, scale: float, cfg: FwdConfig, cu_q, cu_k, max_q: int) -> None:
    """A packed batch on the Gluon forward (``prefill_gluon.gluon_forward``), from a kept plan where one is."""
    from .prefill_gluon import exp_poly_for, gluon_forward

    key = ("gluon", tensor_key(q), tensor_key(k), tensor_key(v), tensor_key(out), tensor_key(lse), tensor_key(cu_q),
           tensor_key(cu_k), max_q, mask.left, mask.right, scale, cfg, exp_poly_for(q.shape[-1]),
           q.is_cuda and torch.cuda.current_device(),
           # (the dynamic kernel's tile counter is the stream's own)
           cfg.dynamic and q.is_cuda and current_stream(q.device))
    plan = _PLANS.get(key)
    if plan is not None and not hooks_set():
        plan.run(q, k, v, out, lse, (cu_q, cu_k))
        return
    with recording() as launches:  # (sequence offsets: each adds its own Nk − Nq)
        gluon_forward(q, k, v, out, lse, causal_off=mask.right if mask.right >= 0 else None, scale=scale,
                      block_m=cfg.block_m, block_n=cfg.block_n, stages=cfg.num_stages, num_warps=cfg.num_warps,
                      warp_spec=True, win_off=-mask.left if mask.left >= 0 else None, cu_seqlens=(cu_q, cu_k),
                      max_seqlen_q=max_q, persistent=cfg.persistent, dynamic=cfg.persistent and cfg.dynamic)
    if len(launches) == 1:
        a = dict(zip(launches[0][0].kernel.arg_names, launches[0][1]))
        named = dict(Q=q, K=k, V=v, O=out, LSE=lse, CU_Q=cu_q, CU_K=cu_k, Qd=a["desc_q"], Kd=a["desc_k"],
                     Vd=a["desc_v"], Od=a["desc_o"])
        fixed = ()
        if a.get("COUNTER") is not None:
            named["COUNTER"], fixed = a["COUNTER"], ("COUNTER",)
        elif cfg.persistent and cfg.dynamic:  # (the grid kernel stood in while a CUDA graph was captured: no plan)
            return
        _FwdPlan.keep(key, launches, named, _GLUON_SOURCES, _GLUON_DESCS, fixed)


# -- plans: a call's launch kept per signature -------------------------------------------------------------

_PLANS: dict = {}
_SOURCES = {n: n for n in ("Q", "K", "V", "O", "LSE", "CU_Q", "CU_K")}
_TRITON_DESCS = tuple((n, n) for n in "QKVO")  # (descriptor's name, its tensor's name) with tensor descriptors
# the Gluon forward of a packed batch: its descriptors (over the packed tensors' (1, H, total, D) views: a
# descriptor keeps its own shape and strides, and its launch reads only the base's address) and pointers
_GLUON_SOURCES = dict(desc_q="Qd", desc_k="Kd", desc_v="Vd", desc_o="Od", LSE="LSE", CU_Q="CU_Q", CU_K="CU_K", O="O",
                      COUNTER="COUNTER")
_GLUON_DESCS = (("Qd", "Q"), ("Kd", "K"), ("Vd", "V"), ("Od", "O"))


class _FwdPlan:
    """What a ``prefill_forward`` call on the Triton kernel derives from its signature (its key: every
    tensor's ``tensor_key``, the variant's scalars, the configuration), kept after the first call: the launch
    with its compiled kernel and arguments (tensor descriptors by their shapes and layouts). A later call of
    the signature launches it with its own tensors: no variant arguments, views or argument binding.
    A packed batch's Gluon forward (``_gluon_packed``) keeps one the same way; calls with ALiBi, and dense calls
    of the Gluon kernel, keep none."""

    __slots__ = ("launch", "descs", "fixed")

    @classmethod
    def keep(cls, key, launches, named, sources: dict, descs: tuple, fixed: tuple = ()) -> None:
        """``descs``: (descriptor's name, the name of the tensor it is made over) of each tensor descriptor;
        ``fixed``: the names in ``named`` of tensors every call passes as they are (the dynamic persistent kernel's
        tile counter), which the plan holds."""
        if len(launches) != 1:
            return
        kept = KeptLaunch.make(*launches[0], sources, named)
        if kept is None:
            return
        plan = cls()
        # (the descriptors' shapes and layouts without their tensors: a plan keeps no call's memory alive)
        plan.launch, plan.descs = kept, tuple((n, rebased(named[n], None), base) for n, base in descs)
        plan.fixed = {n: named[n] for n in fixed}
        keep_plan(_PLANS, key, plan)

    def run(self, q, k, v, out, lse, cu) -> None:
        """Launch on this call's tensors (pointers only: a packed batch's tensors, not their views)."""
        named = dict(Q=q, K=k, V=v, O=out, LSE=lse)
        if cu is not None:
            named["CU_Q"], named["CU_K"] = cu
        for name, d, base in self.descs:
            named[name] = rebased(d, named[base])
        if self.fixed:
            named.update(self.fixed)
        self.launch.run(named, current_stream(q.device))
