"""Flash-Decoding in Triton: split-KV decode over a contiguous or paged KV cache (lecture §8.2–§8.4).

Decoding has 1 to a few query tokens per sequence, so FlashAttention's grid of (batch, head, query
block) has only B·H programs — too few to keep 132 SMs reading (§8.4). Flash-Decoding splits the
keys of each sequence into S parts, computes a partial result and its logsumexp per part, and merges
the parts with the ⊕ of §4.4:

    _decode_split_kernel   grid (S, Hkv, B): one program reads one split of one K/V head of one
                           sequence once, for all the G = H/Hkv query heads of its GQA group and
                           all Nq queries together — the G·Nq query rows (padded to 16) are the M
                           dimension of ``tl.dot``. It writes the split's normalised partial output
                           and its lse (float32); with S = 1 it writes the final output directly.
    _decode_merge_kernel   grid (B·H·Nq,): out = Σ_s e^(lse_s − lse)·o_s with lse = log Σ_s e^lse_s.

Causal masking is bottom-right per sequence: query i of sequence b sees keys
j <= cache_seqlens[b] − Nq + i. The cache is either contiguous, ``(B, Hkv, Lmax, D)``, or paged,
``(num_pages, page_size, Hkv, D)`` pages with a ``block_table (B, max_pages)``; one kernel serves
both (a constexpr chooses how a key's row address is found).

The split count S comes from the lecture's wave model (``attnlab.cost.best_num_splits``) for the
GPU in use, or from ``choose_num_splits``'s calibrated model (see its docstring and
benchmarks/NOTES-decode.md for why the two differ on a real H200).

Reference path: ``attnlab.flash.flash_decode_torch`` (blockwise PyTorch), used here as the fallback
for what the kernel does not cover (float32/float64, head dims outside ``SUPPORTED_HEAD_DIMS``).
"""

from __future__ import annotations

import functools
import math
import os
import warnings
from dataclasses import dataclass, replace

import torch
import triton
import triton.language as tl

from .._checks import check_positive_int, resolve_scale
from ..kvcache import check_decode_inputs

SUPPORTED_HEAD_DIMS = (32, 64, 96, 128, 256)
SUPPORTED_DTYPES = (torch.float16, torch.bfloat16)
MAX_ROWS = 128  # G·Nq query rows per program (the M dimension of tl.dot)

# Triton's CPU interpreter multiplies bfloat16 dot operands wrongly (it sees their raw bits); there
# the dots run on float32 copies of the same (rounded) values.
_INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"


# -- kernels ---------------------------------------------------------------------------------------------


@triton.jit
def _decode_split_kernel(
    Q, K, V, SEQLENS, BLOCK_TABLE, O_PART, LSE_PART, OUT, LSE, COUNTERS,
    stride_qb, stride_qh, stride_qm, stride_qd,
    stride_k0, stride_k1, stride_k2, stride_kd,  # contiguous: (b, hkv, n, d); paged: (page, slot, hkv, d)
    stride_v0, stride_v1, stride_v2, stride_vd,
    stride_tb,
    stride_ob, stride_oh, stride_om, stride_od,
    qk_scale,  # softmax scale · log2(e): the scores live in base 2
    H, CAPACITY, NUM_PAGES, NUM_SPLITS,
    D: tl.constexpr, NQ: tl.constexpr, G: tl.constexpr, PAGE_SIZE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
    PAGED: tl.constexpr, CAUSAL: tl.constexpr, MERGE: tl.constexpr, DOT_F32: tl.constexpr,
    EVICT: tl.constexpr,  # cache policy of the K/V loads ("" or "evict_first": each byte is read once)
):
    split = tl.program_id(0)
    hkv = tl.program_id(1)
    b = tl.program_id(2)

    # -- this split's keys: the sequence's length cut into NUM_SPLITS chunks of whole BLOCK_N tiles
    seqlen = tl.load(SEQLENS + b)
    seqlen = tl.minimum(tl.maximum(seqlen, 0), CAPACITY)  # never read outside the cache
    chunk = tl.cdiv(tl.cdiv(seqlen, NUM_SPLITS), BLOCK_N) * BLOCK_N
    lo = split * chunk
    hi = tl.minimum(lo + chunk, seqlen)

    # -- the group's query rows: row r is query head hkv·G + r // NQ, query token r % NQ
    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, BLOCK_D)
    head = hkv * G + offs_m // NQ
    qi = offs_m % NQ
    row_ok = offs_m < G * NQ
    d_ok = offs_d < D
    q_ptrs = Q + b.to(tl.int64) * stride_qb + head[:, None] * stride_qh + qi[:, None] * stride_qm \
        + offs_d[None, :] * stride_qd
    q = tl.load(q_ptrs, mask=row_ok[:, None] & d_ok[None, :], other=0.0)  # (BLOCK_M, BLOCK_D)
    if DOT_F32:
        q = q.to(tl.float32)
    last_key = seqlen - NQ + qi  # causal: query row r sees keys j <= last_key[r]

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    offs_n0 = tl.arange(0, BLOCK_N)
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + offs_n0
        n_ok = offs_n < hi
        # -- where each key's row lives
        if PAGED:
            page = tl.load(BLOCK_TABLE + b.to(tl.int64) * stride_tb + offs_n // PAGE_SIZE, mask=n_ok, other=0)
            page = tl.minimum(tl.maximum(page, 0), NUM_PAGES - 1).to(tl.int64)
            slot = offs_n % PAGE_SIZE
            k_row = page * stride_k0 + slot * stride_k1 + hkv * stride_k2
            v_row = page * stride_v0 + slot * stride_v1 + hkv * stride_v2
        else:
            k_row = b.to(tl.int64) * stride_k0 + hkv * stride_k1 + offs_n.to(tl.int64) * stride_k2
            v_row = b.to(tl.int64) * stride_v0 + hkv * stride_v1 + offs_n.to(tl.int64) * stride_v2
        kv_mask = n_ok[:, None] & d_ok[None, :]
        k = tl.load(K + k_row[:, None] + offs_d[None, :] * stride_kd, mask=kv_mask, other=0.0,
                    eviction_policy=EVICT)  # (BLOCK_N, BLOCK_D)
        v = tl.load(V + v_row[:, None] + offs_d[None, :] * stride_vd, mask=kv_mask, other=0.0,
                    eviction_policy=EVICT)
        # -- scores of the group's rows against this tile, base 2
        if DOT_F32:
            k = k.to(tl.float32)
        s = tl.dot(q, tl.trans(k)) * qk_scale  # (BLOCK_M, BLOCK_N) float32
        visible = n_ok[None, :]
        if CAUSAL:
            visible = visible & (offs_n[None, :] <= last_key[:, None])
        s = tl.where(visible, s, float("-inf"))
        # -- update m_i and l_i (rows with no visible key yet keep m = -inf; exp2 base 0 for them)
        m_new = tl.maximum(m_i, tl.max(s, 1))
        m_base = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.math.exp2(s - m_base[:, None])
        alpha = tl.math.exp2(m_i - m_base)
        l_i = l_i * alpha + tl.sum(p, 1)
        # -- update the output accumulator
        if DOT_F32:
            pv = tl.dot(p.to(V.dtype.element_ty).to(tl.float32), v.to(tl.float32))
        else:
            pv = tl.dot(p.to(v.dtype), v)
        acc = acc * alpha[:, None] + pv
        m_i = m_new

    # -- normalise; rows that saw no key get out = 0, lse = -inf
    empty = l_i == 0.0
    l_safe = tl.where(empty, 1.0, l_i)
    o = acc / l_safe[:, None]
    lse = tl.where(empty, float("-inf"), (m_i + tl.math.log2(l_safe)) * 0.6931471805599453)
    out_mask = row_ok[:, None] & d_ok[None, :]
    o_ptrs = OUT + b.to(tl.int64) * stride_ob + head[:, None] * stride_oh + qi[:, None] * stride_om \
        + offs_d[None, :] * stride_od
    lse_ptrs = LSE + (b * H + head) * NQ + qi
    if MERGE == 0:  # one split: this is the answer
        tl.store(o_ptrs, o.to(OUT.dtype.element_ty), mask=out_mask)
        tl.store(lse_ptrs, lse, mask=row_ok)
    else:  # partials: O_PART (B, H, NQ, NUM_SPLITS, D), LSE_PART (B, H, NQ, NUM_SPLITS), float32
        row = ((b * H + head) * NQ + qi).to(tl.int64) * NUM_SPLITS
        tl.store(O_PART + (row + split)[:, None] * D + offs_d[None, :], o, mask=out_mask)
        tl.store(LSE_PART + row + split, lse, mask=row_ok)
        if MERGE == 2:  # the group's last program to finish merges all its splits (no second launch)
            tl.debug_barrier()  # every thread's partial stores come before the release below
            cnt = COUNTERS + b * tl.num_programs(1) + hkv
            done = tl.atomic_add(cnt, 1, sem="acq_rel")
            if done == NUM_SPLITS - 1:
                # -- ⊕ over the splits, one at a time: (m, den, acc) rescaled to each new max
                m = tl.full([BLOCK_M], float("-inf"), tl.float32)
                den = tl.zeros([BLOCK_M], tl.float32)
                acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
                for s in range(0, NUM_SPLITS):
                    lse_s = tl.load(LSE_PART + row + s, mask=row_ok, other=float("-inf"), cache_modifier=".cg")
                    o_s = tl.load(O_PART + (row + s)[:, None] * D + offs_d[None, :], mask=out_mask, other=0.0,
                                  cache_modifier=".cg")
                    m_new = tl.maximum(m, lse_s)
                    base = tl.where(m_new == float("-inf"), 0.0, m_new)
                    a = tl.exp(m - base)
                    w = tl.exp(lse_s - base)
                    acc = acc * a[:, None] + w[:, None] * o_s
                    den = den * a + w
                    m = m_new
                empty = den == 0.0
                den_safe = tl.where(empty, 1.0, den)
                tl.store(o_ptrs, (acc / den_safe[:, None]).to(OUT.dtype.element_ty), mask=out_mask)
                tl.store(lse_ptrs, tl.where(empty, float("-inf"), m + tl.log(den_safe)), mask=row_ok)
                tl.atomic_xchg(cnt, 0)  # ready for the next call on this stream


@triton.jit
def _decode_merge_kernel(
    O_PART, LSE_PART, OUT, LSE,
    stride_ob, stride_oh, stride_om, stride_od,
    H, D, NUM_SPLITS,
    NQ: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr,
):
    row = tl.program_id(0)  # (b·H + head)·NQ + qi
    b = row // (H * NQ)
    head = (row // NQ) % H
    qi = row % NQ
    offs_s = tl.arange(0, BLOCK_S)
    offs_d = tl.arange(0, BLOCK_D)
    s_ok = offs_s < NUM_SPLITS
    d_ok = offs_d < D
    # -- ⊕ over the splits: weights e^(lse_s - max); empty splits have lse_s = -inf, weight 0
    lse_s = tl.load(LSE_PART + row.to(tl.int64) * NUM_SPLITS + offs_s, mask=s_ok, other=float("-inf"))
    m = tl.max(lse_s, 0)
    m_base = tl.where(m == float("-inf"), 0.0, m)
    w = tl.exp(lse_s - m_base)
    denom = tl.sum(w, 0)
    o_s = tl.load(O_PART + (row.to(tl.int64) * NUM_SPLITS + offs_s)[:, None] * D + offs_d[None, :],
                  mask=s_ok[:, None] & d_ok[None, :], other=0.0)  # (BLOCK_S, BLOCK_D)
    empty = denom == 0.0
    o = tl.sum(w[:, None] * o_s, 0) / tl.where(empty, 1.0, denom)
    lse = tl.where(empty, float("-inf"), m_base + tl.log(tl.where(empty, 1.0, denom)))
    o_ptrs = OUT + b.to(tl.int64) * stride_ob + head * stride_oh + qi * stride_om + offs_d * stride_od
    tl.store(o_ptrs, o.to(OUT.dtype.element_ty), mask=d_ok)
    tl.store(LSE + row, lse)


# -- configuration ---------------------------------------------------------------------------------------


def kernel_config(D: int) -> dict:
    """Tile and launch parameters of the split kernel for head dim D (tuned on an H200, see NOTES)."""
    block_d = triton.next_power_of_2(D)
    if _INTERPRET:
        return dict(BLOCK_N=16, BLOCK_D=block_d, num_warps=4, num_stages=1, EVICT="", FUSED_MERGE=True)
    return dict(BLOCK_N=64 if block_d <= 128 else 32, BLOCK_D=block_d, num_warps=4, num_stages=3, EVICT="",
                FUSED_MERGE=True)


# -- choosing the number of splits -------------------------------------------------------------------------


@functools.cache
def gpu_for_device(index: int):
    """attnlab.cost's GPU preset matching this CUDA device's name (H100-like defaults if none does),
    with ``sms`` read from the device."""
    from .. import cost

    props = torch.cuda.get_device_properties(index)
    name = props.name.upper()
    preset = None
    for cand in ("B200", "H200", "H100", "A100", "V100"):
        if cand in name:
            try:
                preset = cost.get_gpu(cand)
                break
            except (KeyError, ValueError):
                continue
    if preset is None:
        preset = cost.get_gpu("H100")
    return replace(preset, sms=props.multi_processor_count)


def _wave_splits(batch: int, heads_kv: int, seq: int, head_dim: int, gpu) -> int:
    """``attnlab.cost.best_num_splits`` for this kernel: a split holds whole BLOCK_N tiles, and the
    merge is a kernel launch of its own."""
    from ..cost import best_num_splits

    return int(best_num_splits(batch=batch, heads=heads_kv, seq=seq, head_dim=head_dim, gpu=gpu, max_splits=64,
                               min_split_len=kernel_config(head_dim)["BLOCK_N"], merge_launch=True))


@functools.lru_cache(maxsize=4096)
def _model_splits(batch: int, heads_kv: int, seq: int, head_dim: int, device_index: int) -> int:
    props = torch.cuda.get_device_properties(device_index)
    cfg = kernel_config(head_dim)
    cal = calibration_for(props.name, cfg)
    if cal is not None:
        return calibrated_num_splits(batch=batch, heads_kv=heads_kv, seq=seq, head_dim=head_dim,
                                     sms=props.multi_processor_count, cal=cal, min_split_len=cfg["BLOCK_N"])
    return _wave_splits(batch, heads_kv, seq, head_dim, gpu_for_device(device_index))


# Split counts the calibrated chooser considers (and the benchmark sweeps).
SPLIT_CANDIDATES = (1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32, 40, 48, 64)


@dataclass(frozen=True)
class DecodeCalibration:
    """What the wave model leaves out, measured once on one GPU for one kernel configuration.

    bw: bytes/s the split kernel streams K/V at once enough programs run (not the datasheet's).
    program_bw: bytes/s ONE program streams at when it has the memory system to itself — set by the
        bytes it keeps in flight (num_stages × BLOCK_N × D × 2 tensors) over the memory latency,
        not by a 1/SMs share of the bandwidth as the wave model assumes.
    programs_per_sm: programs resident on an SM at once (the config's shared memory).
    k: how sharply P programs' demand P·program_bw meets bw: the aggregate rate is
        (1/(P·program_bw)^k + 1/bw^k)^(-1/k) (k → ∞ is a hard min).
    fixed: seconds of a call that do not depend on the split count.
    config: the kernel_config values it was measured with (BLOCK_N, num_warps, num_stages).
    """

    bw: float
    program_bw: float
    programs_per_sm: int
    k: float
    fixed: float = 0.0
    config: tuple = ()
    source: str = ""


# Measured on an H200 (132 SMs) with BLOCK_N=64, 4 warps, 3 stages; derived by
# benchmarks/decode.py's calibration_from() from benchmarks/data/decode-h200-run1.json
# (tests/test_gpu_decode.py re-derives these numbers from that file).
CALIBRATIONS = {
    "H200": DecodeCalibration(bw=4.4735e12, program_bw=34.372e9, programs_per_sm=2, k=4.255, fixed=0.0,
                              config=(64, 4, 3), source="H200, 2026-11-29, benchmarks/data/decode-h200-run1.json"),
}


def _rate(P: int, cal: DecodeCalibration) -> float:
    """Aggregate bytes/s of P programs streaming at once."""
    x = P * cal.program_bw / cal.bw  # demand over supply
    return cal.bw * (x ** -cal.k + 1.0) ** (-1.0 / cal.k)


def calibrated_split_time(*, batch: int, heads_kv: int, seq: int, head_dim: int, splits: int, sms: int,
                          cal: DecodeCalibration, itemsize: int = 2) -> float:
    """Seconds of one decode call with ``splits`` splits (§8.4's waves, calibrated).

    P = B·Hkv·S programs of 2·ceil(seq/S)·D·itemsize bytes each run in waves of
    sms·programs_per_sm; a wave of n programs streams at ``_rate(n)`` — the wave model instead
    gives every program bw/SMs, so for it one full wave of 1 program per SM is always enough."""
    P = batch * heads_kv * splits
    per = 2 * math.ceil(seq / splits) * head_dim * itemsize
    slots = sms * cal.programs_per_sm
    full, rest = divmod(P, slots)
    t = full * slots * per / _rate(slots, cal)
    if rest:
        t += rest * per / _rate(rest, cal)
    return cal.fixed + t


def calibrated_num_splits(*, batch: int, heads_kv: int, seq: int, head_dim: int, sms: int,
                          cal: DecodeCalibration, max_splits: int = 64, min_split_len: int = 1,
                          tolerance: float = 0.03) -> int:
    """The fewest of ``SPLIT_CANDIDATES`` within ``tolerance`` of the calibrated model's fastest
    (every split keeps at least ``min_split_len`` keys)."""
    top = max(1, min(max_splits, seq // min_split_len))
    cands = [S for S in SPLIT_CANDIDATES if S <= top] or [1]
    times = {S: calibrated_split_time(batch=batch, heads_kv=heads_kv, seq=seq, head_dim=head_dim, splits=S,
                                      sms=sms, cal=cal) for S in cands}
    limit = min(times.values()) * (1 + tolerance)
    return next(S for S in cands if times[S] <= limit)


def calibration_for(name: str, config: dict) -> DecodeCalibration | None:
    """The calibration measured on a GPU whose name contains a key of CALIBRATIONS with this
    kernel configuration, if any."""
    key = (config["BLOCK_N"], config["num_warps"], config["num_stages"])
    for gpu, cal in CALIBRATIONS.items():
        if gpu in name.upper() and cal.config == key:
            return cal
    return None


def choose_num_splits(*, batch: int, heads_kv: int, seq: int, head_dim: int, device=None) -> int:
    """The split count for a decode call.

    On a GPU with a measured ``DecodeCalibration`` for the kernel configuration in use (the H200):
    ``calibrated_num_splits``. Elsewhere the lecture's wave model, ``attnlab.cost.best_num_splits``,
    on the ``GPU`` preset matching the device with its SM count (``gpu_for_device``).
    One program reads one K/V head (the GQA group shares it), so the models' "heads" are the
    ``heads_kv`` K/V heads; ``seq`` is the cache's capacity (the lengths are not read on the host).
    """
    index = torch.device(device).index if device is not None else None
    if index is None and torch.device(device or "cuda").type == "cuda" and torch.cuda.is_available():
        index = torch.cuda.current_device()
    if index is None:  # no GPU (the interpreter): any count is correct; use the H100 preset
        from ..cost import get_gpu

        return _wave_splits(batch, heads_kv, seq, head_dim, get_gpu("H100"))
    return _model_splits(batch, heads_kv, seq, head_dim, index)


# -- launcher --------------------------------------------------------------------------------------------

_WARNED: set[str] = set()


def _fallback(reason: str, q, k_cache, v_cache, **kw):
    if reason not in _WARNED:
        _WARNED.add(reason)
        warnings.warn(f"flash_decode_cuda: {reason}; using attnlab.flash.flash_decode_torch", RuntimeWarning,
                      stacklevel=3)
    from ..flash import flash_decode_torch

    return flash_decode_torch(q, k_cache, v_cache, **kw)


def _unsupported(q, dims) -> str | None:
    if q.dtype not in SUPPORTED_DTYPES:
        return f"dtype {q.dtype} is not float16/bfloat16"
    if dims.Dv != dims.D:
        return f"value head dim {dims.Dv} differs from the key head dim {dims.D}"
    if dims.D not in SUPPORTED_HEAD_DIMS:
        return f"head dim {dims.D} is not one of {SUPPORTED_HEAD_DIMS}"
    if dims.group * dims.Nq > MAX_ROWS:
        return f"{dims.group} query heads per K/V head × {dims.Nq} queries exceed {MAX_ROWS} rows"
    if q.device.type != "cuda" and not _INTERPRET:
        return f"tensors on {q.device} need CUDA (or TRITON_INTERPRET=1)"
    return None


def flash_decode_cuda(q, k_cache, v_cache, *, cache_seqlens=None, block_table=None, num_splits=None,
                      causal: bool = True, scale: float | None = None):
    """Flash-Decoding over a KV cache with the Triton kernels (§8.4).

    Arguments:
        q: (B, H, Nq, D) float16/bfloat16, Nq small (1 to a few new tokens per sequence).
        k_cache, v_cache: contiguous (B, Hkv, Lmax, D), or paged (num_pages, page_size, Hkv, D)
            when ``block_table`` (B, max_pages) int32 is given; H % Hkv == 0 (GQA/MQA).
        cache_seqlens: (B,) int32 keys held by each sequence (None: the full capacity).
        num_splits: K/V splits per (sequence, K/V head); None asks ``choose_num_splits``.
            Counts beyond one split per key tile change nothing and are capped.
        causal: bottom-right per sequence: query i sees keys j <= cache_seqlens[b] - Nq + i.
        scale: softmax scale, default 1/sqrt(D).
    Returns:
        out (B, H, Nq, D) in q's dtype and lse (B, H, Nq) float32 (natural log). Rows with no
        visible key give out = 0, lse = -inf.

    On CUDA the lengths and page ids are not read on the host (that would synchronise every call);
    the kernel clamps them into the cache, so bad values give wrong numbers, never a bad access.
    Other dtypes and head dims fall back to ``attnlab.flash.flash_decode_torch`` (one warning).
    """
    dims = check_decode_inputs(q, k_cache, v_cache, cache_seqlens, block_table,
                               check_values=q.device.type != "cuda")
    scale = resolve_scale(scale, dims.D)
    if num_splits is not None:
        check_positive_int(num_splits, "num_splits")
    reason = _unsupported(q, dims)
    if reason is not None:
        return _fallback(reason, q, k_cache, v_cache, cache_seqlens=cache_seqlens, block_table=block_table,
                         num_splits=num_splits, causal=causal, scale=scale)
    if num_splits is None:
        num_splits = choose_num_splits(batch=dims.B, heads_kv=dims.Hkv, seq=dims.capacity, head_dim=dims.D,
                                       device=q.device)
    return _launch(q, k_cache, v_cache, dims, cache_seqlens, block_table, num_splits, causal, scale)


_COUNTERS: dict = {}


def _counters(device, n: int) -> torch.Tensor:
    """Arrival counters of the fused merge, one per (sequence, K/V head); kept per (device, stream)
    and left at zero by the kernel itself, so calls need no memset."""
    stream = torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else 0
    key = (str(device), stream)
    buf = _COUNTERS.get(key)
    if buf is None or buf.numel() < n:
        buf = _COUNTERS[key] = torch.zeros(max(n, 1024), dtype=torch.int32, device=device)
    return buf


def _launch(q, k_cache, v_cache, dims, cache_seqlens, block_table, num_splits: int, causal: bool, scale: float,
            **config):
    """Run the kernels (inputs already checked). ``config`` overrides ``kernel_config`` (benchmarks)."""
    B, H, Nq, D, Hkv = dims.B, dims.H, dims.Nq, dims.D, dims.Hkv
    cfg = {**kernel_config(D), **config}
    block_n = cfg["BLOCK_N"]
    num_splits = max(1, min(num_splits, triton.cdiv(dims.capacity, block_n)))
    dev = q.device
    if cache_seqlens is None:
        cache_seqlens = torch.full((B,), dims.capacity, dtype=torch.int32, device=dev)
    elif cache_seqlens.dtype != torch.int32:
        cache_seqlens = cache_seqlens.to(torch.int32)
    paged = block_table is not None
    if paged:
        block_table = block_table.to(torch.int32).contiguous()
        stride_tb = block_table.stride(0)
    else:
        block_table, stride_tb = cache_seqlens, 0  # unused
    out = torch.empty_like(q)  # (B, H, Nq, D)
    lse = torch.empty((B, H, Nq), dtype=torch.float32, device=dev)
    merge = 0 if num_splits == 1 else (2 if cfg["FUSED_MERGE"] else 1)
    counters = _counters(dev, B * Hkv) if merge == 2 else lse
    if merge == 0:
        o_part = lse_part = lse  # unused
    else:
        o_part = torch.empty((B, H, Nq, num_splits, D), dtype=torch.float32, device=dev)
        lse_part = torch.empty((B, H, Nq, num_splits), dtype=torch.float32, device=dev)
    G = H // Hkv
    block_m = max(16, triton.next_power_of_2(G * Nq))
    _decode_split_kernel[(num_splits, Hkv, B)](
        q, k_cache, v_cache, cache_seqlens, block_table, o_part, lse_part, out, lse, counters,
        *q.stride(), *k_cache.stride(), *v_cache.stride(), stride_tb, *out.stride(),
        scale * 1.4426950408889634,
        H, dims.capacity, dims.num_pages or 1, num_splits,
        D=D, NQ=Nq, G=G, PAGE_SIZE=dims.page_size or 1,
        BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_D=cfg["BLOCK_D"],
        PAGED=paged, CAUSAL=bool(causal), MERGE=merge, DOT_F32=_INTERPRET, EVICT=cfg["EVICT"],
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
    )
    if merge == 1:
        _decode_merge_kernel[(B * H * Nq,)](
            o_part, lse_part, out, lse, *out.stride(), H, D, num_splits,
            NQ=Nq, BLOCK_S=triton.next_power_of_2(num_splits), BLOCK_D=cfg["BLOCK_D"],
            num_warps=4 if D >= 128 else 2,
        )
    return out, lse


def decode_bytes(*, batch: int, heads_kv: int, seq: int, head_dim: int, itemsize: int = 2) -> int:
    """Bytes of K and V one decode step must read: 2·B·Hkv·L·D·itemsize (the benchmark's yardstick)."""
    return 2 * batch * heads_kv * seq * head_dim * itemsize


__all__ = ["flash_decode_cuda", "choose_num_splits", "gpu_for_device", "kernel_config", "decode_bytes",
           "SUPPORTED_HEAD_DIMS", "SUPPORTED_DTYPES"]
