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

Paged caches load each tile's page ids one tile ahead (a loop-carried value): Triton's pipeliner
otherwise stages the page-id load itself and keeps one K/V buffer fewer in flight.

The kernel config (BLOCK_N, warps, stages) is chosen per call from B·Hkv, D and the page size
(``kernel_config``), and the split count S for that config from the lecture's wave model
(``attnlab.cost.best_num_splits``) for the GPU in use, or from ``choose_num_splits``'s calibrated
model (see its docstring and benchmarks/NOTES-decode.md for why the two differ on a real H200).

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

from .._checks import check_decode_inputs, check_positive_int, resolve_scale

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
    HAS_SEQLENS: tl.constexpr,  # False: every sequence holds CAPACITY keys (SEQLENS is not read)
):
    split = tl.program_id(0)
    hkv = tl.program_id(1)
    b = tl.program_id(2)

    # -- this split's keys: the sequence's length cut into NUM_SPLITS chunks of whole BLOCK_N tiles
    if HAS_SEQLENS:
        seqlen = tl.load(SEQLENS + b)
        seqlen = tl.minimum(tl.maximum(seqlen, 0), CAPACITY)  # never read outside the cache
    else:
        seqlen = CAPACITY
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
    if PAGED:
        # Page ids are loaded one tile ahead (software prefetch): the K/V addresses of a tile never
        # wait for a page-table load. A tile lies inside one page when PAGE_SIZE is a multiple of
        # BLOCK_N (tiles start at multiples of BLOCK_N): then one id per tile, else one per key.
        tb_row = BLOCK_TABLE + b.to(tl.int64) * stride_tb
        if PAGE_SIZE % BLOCK_N == 0:
            page_next = tl.load(tb_row + lo // PAGE_SIZE, mask=lo < hi, other=0)
        else:
            page_next = tl.load(tb_row + (lo + offs_n0) // PAGE_SIZE, mask=lo + offs_n0 < hi, other=0)
    for start_n in range(lo, hi, BLOCK_N):
        offs_n = start_n + offs_n0
        n_ok = offs_n < hi
        # -- where each key's row lives
        if PAGED:
            page = tl.minimum(tl.maximum(page_next, 0), NUM_PAGES - 1).to(tl.int64)  # never outside the pool
            nxt = start_n + BLOCK_N
            if PAGE_SIZE % BLOCK_N == 0:
                page_next = tl.load(tb_row + nxt // PAGE_SIZE, mask=nxt < hi, other=0)
            else:
                page_next = tl.load(tb_row + (nxt + offs_n0) // PAGE_SIZE, mask=nxt + offs_n0 < hi, other=0)
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


def gpu_configs(D: int) -> dict:
    """The split kernel's configurations on a GPU for head dim D, by name (BLOCK_N halves for D > 128:
    the same shared memory). ``small``: BLOCK_N 64, 4 warps, 3 stages (2 K/V buffers in flight, 70 KiB
    compiled at D = 128: 3 programs per SM); ``large``: BLOCK_N 128, 4 warps, 3 stages (136 KiB, 1
    program per SM, twice the bytes in flight per program)."""
    block_d = triton.next_power_of_2(D)
    scale = 1 if block_d <= 128 else 2
    base = dict(BLOCK_D=block_d, num_warps=4, num_stages=3, EVICT="", FUSED_MERGE=True)
    return {"small": dict(base, BLOCK_N=64 // scale), "large": dict(base, BLOCK_N=128 // scale)}


def kernel_config(D: int, *, batch_heads: int = 1, sms: int = 132, page_size: int | None = None) -> dict:
    """Tile and launch parameters of the split kernel for head dim D, B·Hkv = ``batch_heads`` and a
    contiguous (``page_size`` None) or paged cache (measured on an H200, see benchmarks/NOTES-decode.md).

    ``large`` once B·Hkv >= sms / 2 — enough (sequence, K/V head) pairs to fill the SMs with few
    splits, and a program that keeps twice the bytes in flight streams faster (H200 run 3, B = 16,
    contiguous: 3.84–4.56 vs 3.60–4.51 TB/s for the small config) — unless the cache is paged in pages
    that do not hold whole large tiles: then every key of a tile needs its own page id, and the large
    config ran at 3.40–4.07 TB/s against the small one's 3.63–4.45 (64-key pages). ``small`` below
    SMs/2, where many splits of small programs (3 per SM) fill the GPU. The interpreter uses
    BLOCK_N = 16 (many tiles on small test shapes)."""
    if _INTERPRET:
        block_d = triton.next_power_of_2(D)
        return dict(BLOCK_N=16, BLOCK_D=block_d, num_warps=4, num_stages=1, EVICT="", FUSED_MERGE=True)
    cfgs = gpu_configs(D)
    whole_tiles = page_size is None or page_size % cfgs["large"]["BLOCK_N"] == 0
    return cfgs["large" if batch_heads * 2 >= sms and whole_tiles else "small"]


def config_key(cfg: dict) -> tuple:
    """(BLOCK_N, BLOCK_D, num_warps, num_stages): what a DecodeCalibration is tied to."""
    return (cfg["BLOCK_N"], cfg["BLOCK_D"], cfg["num_warps"], cfg["num_stages"])


@functools.cache
def _sms(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


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


def _wave_splits(batch: int, heads_kv: int, seq: int, head_dim: int, gpu, block_n: int) -> int:
    """``attnlab.cost.best_num_splits`` for this kernel: a split holds whole BLOCK_N tiles, and the
    merge is a kernel launch of its own."""
    from ..cost import best_num_splits

    return int(best_num_splits(batch=batch, heads=heads_kv, seq=seq, head_dim=head_dim, gpu=gpu, max_splits=64,
                               min_split_len=block_n, merge_launch=True))


@functools.lru_cache(maxsize=4096)
def _model_splits(batch: int, heads_kv: int, seq: int, head_dim: int, device_index: int, key: tuple) -> int:
    name = torch.cuda.get_device_properties(device_index).name
    cal = calibration_for(name, key)
    if cal is not None:
        return calibrated_num_splits(batch=batch, heads_kv=heads_kv, seq=seq, head_dim=head_dim,
                                     sms=_sms(device_index), cal=cal, min_split_len=key[0])
    return _wave_splits(batch, heads_kv, seq, head_dim, gpu_for_device(device_index), key[0])


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
    fixed: seconds of a call that depend neither on the split count nor on the bytes (launch, q load).
    per_split: seconds per split when S > 1: the merging program reads the S partials one after the
        other (one dependent round trip to L2 each).
    per_wave: seconds per wave of programs: a program's start (q load, first tile's latency) and end
        (stores, arrival counter) that streaming does not hide.
    config: (BLOCK_N, BLOCK_D, num_warps, num_stages) it was measured with (``config_key``).
    source: where the numbers come from.
    """

    bw: float
    program_bw: float
    programs_per_sm: int
    k: float
    fixed: float = 0.0
    per_split: float = 0.0
    per_wave: float = 0.0
    config: tuple = ()
    source: str = ""


def tiles_in_flight(key: tuple) -> int:
    """K/V tiles a program has in flight: Triton's pipeliner keeps num_stages − 1 buffers of the K and
    V tiles in shared memory (seen in the compiled kernel, sm_90: 2 × (64×128) bf16 buffers each for
    BLOCK_N = 64, 3 stages)."""
    return max(1, key[3] - 1)


def programs_per_sm(key: tuple, smem_per_sm: int = 227 * 1024) -> int:
    """Programs resident per SM, from the shared memory of the K/V buffers (+ 8 KiB for q and the
    rest; the compiled small config takes 70 KiB: 3 per SM, the large 136 KiB: 1)."""
    bn, bd, _, _ = key
    smem = tiles_in_flight(key) * 2 * bn * bd * 2 + 8 * 1024
    return max(1, smem_per_sm // smem)


def scaled_calibration(cal: DecodeCalibration, config: dict) -> DecodeCalibration:
    """A prediction for another configuration from a measured one, by Little's law: one program's
    rate scales with the K/V bytes it keeps in flight (tiles in flight × BLOCK_N × BLOCK_D); programs
    per SM from the shared memory those buffers take; bw, k and the overheads unchanged."""
    key = config_key(config)
    ratio = (tiles_in_flight(key) * key[0] * key[1]) / (tiles_in_flight(cal.config) * cal.config[0] * cal.config[1])
    return replace(cal, program_bw=cal.program_bw * ratio, programs_per_sm=programs_per_sm(key),
                   config=key, source=f"predicted from {cal.config} by bytes in flight")


# Measured on an H200 (132 SMs), D = 128, CUDA-graph times; fitted by benchmarks/decode.py's
# calibration_from() (tests/test_gpu_decode.py re-derives these numbers from the files named):
# ``small`` (BLOCK_N 64, 4 warps, 3 stages) from the 12 small-config sweeps of run 2 and the 6 of run 3,
# ``large`` (BLOCK_N 128) from the 6 large-config sweeps of run 3.
_H200_SMALL = DecodeCalibration(bw=4.4863e12, program_bw=34.572e9, programs_per_sm=3, k=3.3636, fixed=2.7717e-6,
                                per_split=0.25857e-6, per_wave=3.0671e-6, config=(64, 128, 4, 3),
                                source="H200, 2026-11-29, benchmarks/data/decode-h200-run2.json + run3.json")
_H200_LARGE = DecodeCalibration(bw=4.6223e12, program_bw=50.488e9, programs_per_sm=1, k=8.4757, fixed=13.672e-6,
                                per_split=1.3877e-6, per_wave=0.36797e-6, config=(128, 128, 4, 3),
                                source="H200, 2026-11-29, benchmarks/data/decode-h200-run3.json")
CALIBRATIONS = {("H200", _H200_SMALL.config): _H200_SMALL, ("H200", _H200_LARGE.config): _H200_LARGE}


def _rate(P: int, cal: DecodeCalibration) -> float:
    """Aggregate bytes/s of P programs streaming at once."""
    x = P * cal.program_bw / cal.bw  # demand over supply
    return cal.bw * (x ** -cal.k + 1.0) ** (-1.0 / cal.k)


def calibrated_split_time(*, batch: int, heads_kv: int, seq: int, head_dim: int, splits: int, sms: int,
                          cal: DecodeCalibration, itemsize: int = 2) -> float:
    """Seconds of one decode call with ``splits`` splits (§8.4's waves, calibrated).

    P = B·Hkv·S programs of 2·chunk·D·itemsize bytes each (chunk = ceil(seq/S) rounded up to whole
    BLOCK_N tiles: the longest split sets the pace) run in waves of sms·programs_per_sm; a wave of n
    programs streams at ``_rate(n)`` and pays ``per_wave``; the merge pays ``per_split`` per split.
    The wave model instead gives every program bw/SMs, so for it one full wave of 1 program per SM
    is always enough."""
    P = batch * heads_kv * splits
    block_n = cal.config[0] if cal.config else 1
    chunk = min(seq, math.ceil(math.ceil(seq / splits) / block_n) * block_n)
    per = 2 * chunk * head_dim * itemsize
    slots = sms * cal.programs_per_sm
    full, rest = divmod(P, slots)
    t = full * (slots * per / _rate(slots, cal) + cal.per_wave)
    if rest:
        t += rest * per / _rate(rest, cal) + cal.per_wave
    return cal.fixed + (cal.per_split * splits if splits > 1 else 0.0) + t


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


def calibration_for(name: str, config) -> DecodeCalibration | None:
    """The calibration measured on a GPU whose name contains a key of CALIBRATIONS for this kernel
    configuration (a kernel_config dict or its ``config_key``), if any."""
    key = config_key(config) if isinstance(config, dict) else tuple(config)
    for (gpu, ckey), cal in CALIBRATIONS.items():
        if gpu in name.upper() and ckey == key:
            return cal
    return None


def choose_num_splits(*, batch: int, heads_kv: int, seq: int, head_dim: int, device=None,
                      config: dict | None = None) -> int:
    """The split count for a decode call with kernel configuration ``config`` (default: the
    ``kernel_config`` this call would use).

    On a GPU with a ``DecodeCalibration`` for that configuration (the H200): ``calibrated_num_splits``.
    Elsewhere the lecture's wave model, ``attnlab.cost.best_num_splits``, on the ``GPU`` preset
    matching the device with its SM count (``gpu_for_device``).
    One program reads one K/V head (the GQA group shares it), so the models' "heads" are the
    ``heads_kv`` K/V heads; ``seq`` is the cache's capacity (the lengths are not read on the host).
    """
    index = torch.device(device).index if device is not None else None
    if index is None and torch.device(device or "cuda").type == "cuda" and torch.cuda.is_available():
        index = torch.cuda.current_device()
    if index is None:  # no GPU (the interpreter): any count is correct; use the H100 preset
        from ..cost import get_gpu

        cfg = config or kernel_config(head_dim, batch_heads=batch * heads_kv)
        return _wave_splits(batch, heads_kv, seq, head_dim, get_gpu("H100"), cfg["BLOCK_N"])
    cfg = config or kernel_config(head_dim, batch_heads=batch * heads_kv, sms=_sms(index))
    return _model_splits(batch, heads_kv, seq, head_dim, index, config_key(cfg))


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
    cfg = _call_config(dims, q.device)
    if num_splits is None:
        num_splits = choose_num_splits(batch=dims.B, heads_kv=dims.Hkv, seq=dims.capacity, head_dim=dims.D,
                                       device=q.device, config=cfg)
    return _launch(q, k_cache, v_cache, dims, cache_seqlens, block_table, num_splits, causal, scale, **cfg)


def _call_config(dims, device) -> dict:
    """kernel_config for this call's shape, layout and page size on this device. With the same config
    (and split count) a paged cache gives the contiguous cache's output to the last bit; at
    B·Hkv >= SMs/2 a cache paged in pages smaller than the large tile takes the small config."""
    sms = _sms(device.index if device.index is not None else torch.cuda.current_device()) \
        if device.type == "cuda" else 132
    return kernel_config(dims.D, batch_heads=dims.B * dims.Hkv, sms=sms, page_size=dims.page_size)


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


_CONFIG_KEYS = frozenset(("BLOCK_N", "BLOCK_D", "num_warps", "num_stages", "EVICT", "FUSED_MERGE"))


def _launch(q, k_cache, v_cache, dims, cache_seqlens, block_table, num_splits: int, causal: bool, scale: float,
            **config):
    """Run the kernels (inputs already checked). ``config``: a whole kernel_config, or values that
    override the call's kernel_config (benchmarks, tests)."""
    B, H, Nq, D, Hkv = dims.B, dims.H, dims.Nq, dims.D, dims.Hkv
    cfg = config if _CONFIG_KEYS <= config.keys() else {**_call_config(dims, q.device), **config}
    block_n = cfg["BLOCK_N"]
    num_splits = max(1, min(num_splits, triton.cdiv(dims.capacity, block_n)))
    dev = q.device
    has_seqlens = cache_seqlens is not None
    if has_seqlens and (cache_seqlens.dtype != torch.int32 or not cache_seqlens.is_contiguous()):
        cache_seqlens = cache_seqlens.to(torch.int32).contiguous()
    paged = block_table is not None
    if paged:
        if block_table.dtype != torch.int32 or block_table.stride(-1) != 1:
            block_table = block_table.to(torch.int32).contiguous()
        stride_tb = block_table.stride(0)
    else:
        block_table, stride_tb = q, 0  # not read
    if not has_seqlens:
        cache_seqlens = q  # not read (HAS_SEQLENS=False: every sequence holds the capacity)
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
        HAS_SEQLENS=has_seqlens,
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


__all__ = ["flash_decode_cuda", "choose_num_splits", "gpu_for_device", "kernel_config", "gpu_configs", "decode_bytes",
           "SUPPORTED_HEAD_DIMS", "SUPPORTED_DTYPES"]
