"""Roofline estimates (§3.2, §5.5, §7.5, §7.6): time = max(FLOPs / peak, bytes / bandwidth) + launch.

``kernel_time`` is the one formula; ``estimate_forward`` / ``estimate_backward`` apply it to the
kernels of ``io.py`` for a whole (B, H, Hkv, N, D) problem and return ``KernelCost`` lists that demos
print and tests check. These are lower bounds, not measurements: FlashAttention-2 reaches about 35%
of H100's peak (FlashAttention-3 paper), so measured times sit above them.

``attention_roofline`` / ``varlen_attention_roofline`` are the limit a benchmark row is measured
against: the forward, backward or both of one shape (GQA, causal, a sliding window, packed documents)
with every array moved once and only the visible (query, key) pairs computed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from . import io as _io
from ._args import dtype_bytes as _dtype_bytes
from ._args import flag, heads_pair, pos_int
from .gpus import GPU, get_gpu
from .window import seqlens_pair, visible_pairs

STAT_BYTES = 4  # L, m, ℓ, D are FP32 rows


def kernel_time(flops: float, bytes: float, gpu, *, fp32_flops: float = 0.0, matmul_peak: float | None = None,
                launch: bool = True) -> tuple[float, str]:
    """(seconds, bound) of one kernel on the roofline.

    Compute time = max(matmul FLOPs / tensor peak, ``fp32_flops`` / FP32 peak) — the two unit kinds
    run side by side; memory time = bytes / HBM bandwidth; the kernel takes the larger, plus one
    launch overhead when ``launch``. ``bound`` is "compute" or "memory". ``matmul_peak`` overrides
    the tensor peak (e.g. FP32 data on CUDA cores).
    """
    g = get_gpu(gpu)
    for v, name in ((flops, "flops"), (bytes, "bytes"), (fp32_flops, "fp32_flops")):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
            raise ValueError(f"{name} must be a number >= 0, got {v!r}")
    peak = g.tensor_flops if matmul_peak is None else matmul_peak
    t_compute = max(flops / peak, fp32_flops / g.fp32_flops)
    t_memory = bytes / g.hbm_bw
    bound = "compute" if t_compute > t_memory else "memory"
    return max(t_compute, t_memory) + (g.launch_overhead if launch else 0.0), bound


@dataclass(frozen=True)
class KernelCost:
    """One kernel's estimate: FLOPs, HBM bytes, seconds (launch included) and what bounds it."""

    name: str
    flops: float  # matmul FLOPs
    bytes: float  # HBM bytes
    time: float  # seconds
    bound: str  # "compute" | "memory"
    fp32_flops: float = 0.0  # non-matmul FLOPs (softmax, exp, reductions)

    @property
    def intensity(self) -> float:
        """Arithmetic intensity, matmul FLOP per HBM byte."""
        return self.flops / self.bytes if self.bytes else float("inf")

    def to_dict(self) -> dict:
        return asdict(self) | {"intensity": self.intensity}


def total_time(kernels) -> float:
    return sum(k.time for k in kernels)


def total_bytes(kernels) -> float:
    return sum(k.bytes for k in kernels)


def total_flops(kernels) -> float:
    return sum(k.flops for k in kernels)


def cost_kernels(kernels: list[_io.KernelIO], gpu, *, batch: int = 1, heads: int = 1, kv_heads: int | None = None,
                 kv_cached: bool = True, dtype_bytes=2, launch: bool = True, prefix: str = "") -> list[KernelCost]:
    """Scale per-head ``KernelIO``s to B·H heads and cost each on ``gpu``.

    Arrays K, V (and dK, dV) exist per K/V head: read B·Hkv times when cached (``kv_cached``: every
    query head of a group finds them in L2), B·H times otherwise; dK, dV are written B·Hkv times.
    L, m, ℓ, D are FP32; the rest ``dtype_bytes`` per element. FP32 data runs its matmuls on the FP32
    CUDA-core peak.
    """
    g = get_gpu(gpu)
    B = pos_int(batch, "batch")
    H, Hkv = heads_pair(heads, kv_heads)
    nb = _dtype_bytes(dtype_bytes)
    flag(kv_cached, "kv_cached")
    out = []
    for k in kernels:
        nbytes = 0
        for (arr, op), n in k.io.items():
            per_kv = arr in _io.KV_ARRAYS and (kv_cached or op == "write")
            mult = B * (Hkv if per_kv else H)
            nbytes += n * mult * (STAT_BYTES if arr in _io.STAT_ARRAYS else nb)
        flops, other = k.flops * B * H, k.other_flops * B * H
        t, bound = kernel_time(flops, nbytes, g, fp32_flops=other, launch=launch,
                               matmul_peak=g.fp32_flops if nb >= 4 else None)
        out.append(KernelCost(prefix + k.name, flops, float(nbytes), t, bound, other))
    return out


# ---------------------------------------------------------------- §5.5 forward


@dataclass(frozen=True)
class ForwardEstimate:
    """Standard 3-kernel forward vs FlashAttention with K/V in L2 and with K/V from HBM (§5.5)."""

    standard: list[KernelCost]
    flash_l2: list[KernelCost]
    flash_hbm: list[KernelCost]

    @property
    def standard_time(self) -> float:
        return total_time(self.standard)

    @property
    def flash_l2_time(self) -> float:
        return total_time(self.flash_l2)

    @property
    def flash_hbm_time(self) -> float:
        return total_time(self.flash_hbm)

    @property
    def speedup_l2(self) -> float:
        """Standard / flash with K/V in L2: the lower-bound speed-up (§5.5: 4.7×)."""
        return self.standard_time / self.flash_l2_time

    @property
    def speedup_hbm(self) -> float:
        """Standard / flash with K/V re-read from HBM by every Q block (§5.5: 2.0×)."""
        return self.standard_time / self.flash_hbm_time

    def to_dict(self) -> dict:
        return {
            "standard": [k.to_dict() for k in self.standard],
            "flash_l2": [k.to_dict() for k in self.flash_l2],
            "flash_hbm": [k.to_dict() for k in self.flash_hbm],
            "standard_time": self.standard_time,
            "flash_l2_time": self.flash_l2_time,
            "flash_hbm_time": self.flash_hbm_time,
            "speedup_l2": self.speedup_l2,
            "speedup_hbm": self.speedup_hbm,
        }


def estimate_forward(*, seq: int = 4096, head_dim: int = 128, batch: int = 1, heads: int = 32,
                     kv_heads: int | None = None, causal: bool = False, dtype_bytes=2, gpu="H100",
                     block_q: int = 128, block_k: int | None = None) -> ForwardEstimate:
    """Roofline estimate of the attention forward for B·H heads of N×D (§5.5).

    The standard forward computes (and writes) all N² scores even when causal — the mask is applied
    inside the softmax; FlashAttention skips the masked block pairs. Defaults are the lecture's
    N = 4096, D = 128, 32 heads, FP16 on H100 with Br = Bc = 128.
    """
    common = dict(batch=batch, heads=heads, kv_heads=kv_heads, dtype_bytes=dtype_bytes)
    shape = dict(seq=seq, head_dim=head_dim)
    blocks = dict(block_q=block_q, block_k=block_k, causal=causal)
    std = cost_kernels(_io.standard_forward_kernels(**shape), gpu, kv_cached=True, **common)
    l2 = cost_kernels(_io.flash_forward_kernels(**shape, **blocks, kv_in_l2=True), gpu, kv_cached=True, **common)
    hbm = cost_kernels(_io.flash_forward_kernels(**shape, **blocks), gpu, kv_cached=False, **common)
    return ForwardEstimate(std, l2, hbm)


# ---------------------------------------------------------------- §7.5 backward


@dataclass(frozen=True)
class BackwardEstimate:
    """Standard 5-kernel backward (stored P) vs the FlashAttention backward (recompute P from L)."""

    standard: list[KernelCost]
    flash_l2: list[KernelCost]  # ideal cache: every N×d array moves once
    flash_hbm: list[KernelCost]  # Q, O, dO, L re-read and dQ atomically updated per K/V block

    @property
    def standard_time(self) -> float:
        return total_time(self.standard)

    @property
    def flash_time(self) -> float:
        return total_time(self.flash_l2)

    @property
    def flash_hbm_time(self) -> float:
        return total_time(self.flash_hbm)

    @property
    def flops_ratio(self) -> float:
        """Flash / standard backward FLOPs (§7.5: 1.25, "25% more")."""
        return total_flops(self.flash_l2) / total_flops(self.standard)

    @property
    def traffic_ratio(self) -> float:
        """Standard / flash HBM bytes (§7.5: 29, "1/29 of the traffic")."""
        return total_bytes(self.standard) / total_bytes(self.flash_l2)

    @property
    def speedup(self) -> float:
        """Standard / flash time, the lower bound (§7.5: 3.3×)."""
        return self.standard_time / self.flash_time

    @property
    def speedup_hbm(self) -> float:
        return self.standard_time / self.flash_hbm_time

    def to_dict(self) -> dict:
        return {
            "standard": [k.to_dict() for k in self.standard],
            "flash_l2": [k.to_dict() for k in self.flash_l2],
            "flash_hbm": [k.to_dict() for k in self.flash_hbm],
            "standard_time": self.standard_time,
            "flash_time": self.flash_time,
            "flash_hbm_time": self.flash_hbm_time,
            "flops_ratio": self.flops_ratio,
            "traffic_ratio": self.traffic_ratio,
            "speedup": self.speedup,
            "speedup_hbm": self.speedup_hbm,
        }


def estimate_backward(*, seq: int = 4096, head_dim: int = 128, batch: int = 1, heads: int = 32,
                      kv_heads: int | None = None, causal: bool = False, dtype_bytes=2, gpu="H100",
                      block_q: int = 128, block_k: int | None = None) -> BackwardEstimate:
    """Roofline estimate of the attention backward (§7.5; defaults: N = 4096, D = 128, 32 heads, FP16,
    H100): 25% more FLOPs, 1/29 of the traffic, ≈ 3.3× faster as a lower bound."""
    Bc = block_q if block_k is None else block_k
    common = dict(batch=batch, heads=heads, kv_heads=kv_heads, dtype_bytes=dtype_bytes)
    shape = dict(seq=seq, head_dim=head_dim)
    blocks = dict(block_q=block_q, block_k=Bc, causal=causal)
    std = cost_kernels(_io.standard_backward_kernels(**shape), gpu, kv_cached=True, **common)
    l2 = cost_kernels(_io.flash_backward_kernels(**shape, **blocks, ideal_cache=True), gpu, kv_cached=True, **common)
    hbm = cost_kernels(_io.flash_backward_kernels(**shape, **blocks),
                       gpu, kv_cached=True, **common)  # K/V-outer: K, V are read once either way
    return BackwardEstimate(std, l2, hbm)


backward_estimate = estimate_backward  # the name §7.5's demo uses


# ---------------------------------------------------------------- §7.6 recompute or read back?


def recompute_ratio(*, head_dim: int, gpu, dtype_bytes=2) -> float:
    """Time to recompute one score (2d FLOPs at tensor peak) over time to read one element of P back
    (``dtype_bytes`` at HBM bandwidth): 2d / (bytes · ridge) — d / ridge in FP16, whatever N is.
    Below 1 recomputing is cheaper."""
    g: GPU = get_gpu(gpu)
    return (2.0 * pos_int(head_dim, "head_dim") / g.tensor_flops) / (_dtype_bytes(dtype_bytes) / g.hbm_bw)


def recompute_crossover_d(gpu, *, dtype_bytes=2) -> float:
    """Head dim above which reading P back beats recomputing S: bytes · ridge / 2 (V100 FP16: 139)."""
    g = get_gpu(gpu)
    return _dtype_bytes(dtype_bytes) * g.ridge / 2.0


# ---------------------------------------------------------------- the limit a measured kernel is held to

ROOFLINE_PASSES = ("fwd", "bwd", "fwd_bwd")
BWD_FP32_FLOPS = 4  # per visible score in the backward: dS = P ∘ (dP − D) and the exp of the recompute


def _pass_counts(kind: str, *, batch: int, heads: int, kv_heads: int, seq_q: int, seq_k: int, head_dim: int,
                 pairs: int, nb: int) -> tuple[float, float, float]:
    """(matmul FLOPs, FP32 FLOPs, HBM bytes) of one FlashAttention kernel ("fwd" or "bwd") over
    ``batch`` sequences of Nq queries and Nk keys, ``pairs`` visible pairs per (sequence, head).

    Forward: QKᵀ and PV, 2·D FLOPs each per visible pair; the online softmax's 5 per pair; Q read, K
    and V read (per K/V head), O and L written. Backward: S recomputed, then dV, dP, dQ, dK, 2·D each;
    Q, O, dO, L read, dQ written (per query head); K, V read and dK, dV written (per K/V head); D =
    rowsum(dO ∘ O) stays on chip."""
    B, H, Hkv, Nq, Nk, D = batch, heads, kv_heads, seq_q, seq_k, head_dim
    q_rows, kv_rows = B * H * Nq, B * Hkv * Nk  # rows of the per-query-head and per-K/V-head arrays
    if kind == "fwd":
        elements = 2 * q_rows * D + 2 * kv_rows * D  # Q, O; K, V
        return 4.0 * B * H * pairs * D, float(_io.SOFTMAX_FLOPS * B * H * pairs), float(elements * nb + q_rows * STAT_BYTES)
    elements = 4 * q_rows * D + 4 * kv_rows * D  # Q, O, dO, dQ; K, V, dK, dV
    return 10.0 * B * H * pairs * D, float(BWD_FP32_FLOPS * B * H * pairs), float(elements * nb + q_rows * STAT_BYTES)


def _pass_kinds(pass_) -> tuple[str, ...]:
    if pass_ not in ROOFLINE_PASSES:
        raise ValueError(f"pass_ must be one of {', '.join(ROOFLINE_PASSES)}, got {pass_!r}")
    return ("fwd", "bwd") if pass_ == "fwd_bwd" else (pass_,)


def _cost(kind: str, counts: tuple[float, float, float], g: GPU, nb: int, launch: bool) -> KernelCost:
    flops, fp32, nbytes = counts  # FP32 data runs its matmuls on the FP32 peak, as in cost_kernels
    t, bound = kernel_time(flops, nbytes, g, fp32_flops=fp32, launch=launch,
                           matmul_peak=g.fp32_flops if nb >= 4 else None)
    return KernelCost("flash forward" if kind == "fwd" else "flash backward", flops, nbytes, t, bound, fp32)


def attention_roofline(*, seq_q: int, head_dim: int, seq_k: int | None = None, batch: int = 1, heads: int = 1,
                       kv_heads: int | None = None, causal: bool = False, window=None, pass_: str = "fwd",
                       dtype_bytes=2, gpu="H100", launch: bool = False) -> list[KernelCost]:
    """The roofline of attention for ``batch`` × ``heads`` × (Nq × Nk) × ``head_dim`` on ``gpu``: one
    ``KernelCost`` per kernel of ``pass_`` ("fwd", "bwd" or "fwd_bwd": forward then backward), each
    max(FLOPs / peak, bytes / bandwidth) (plus a launch with ``launch=True``); the peak is the 16-bit
    tensor peak, or the FP32 one for 4-byte data.

    The least any kernel can do: FLOPs only on the visible (query, key) pairs (``window.visible_pairs``:
    causal, a window ``(left, right)``, bottom-right aligned), every array moved between HBM and the
    chip once (K and V per K/V head: GQA). So a measured time is at least the sum of these; the ratio
    (this / measured) says how far a kernel is from the physical limit, not only from its peers."""
    g = get_gpu(gpu)
    kinds = _pass_kinds(pass_)
    B, D = pos_int(batch, "batch"), pos_int(head_dim, "head_dim")
    H, Hkv = heads_pair(heads, kv_heads)
    Nq = pos_int(seq_q, "seq_q")
    Nk = Nq if seq_k is None else pos_int(seq_k, "seq_k")
    nb = _dtype_bytes(dtype_bytes)
    flag(launch, "launch")
    pairs = visible_pairs(seq_q=Nq, seq_k=Nk, window=window, causal=causal)
    shape = dict(batch=B, heads=H, kv_heads=Hkv, seq_q=Nq, seq_k=Nk, head_dim=D, pairs=pairs, nb=nb)
    return [_cost(kind, _pass_counts(kind, **shape), g, nb, launch) for kind in kinds]


def varlen_attention_roofline(*, seqlens_q, head_dim: int, seqlens_k=None, heads: int = 1,
                              kv_heads: int | None = None, causal: bool = False, window=None, pass_: str = "fwd",
                              dtype_bytes=2, gpu="H100", launch: bool = False) -> list[KernelCost]:
    """``attention_roofline`` of a packed batch of documents (flash-attn's varlen layout): one kernel per
    pass over all documents, each with its own bottom-right alignment; FLOPs and bytes are the sums
    over the documents (a document of no queries or keys adds nothing)."""
    g = get_gpu(gpu)
    kinds = _pass_kinds(pass_)
    D = pos_int(head_dim, "head_dim")
    H, Hkv = heads_pair(heads, kv_heads)
    nb = _dtype_bytes(dtype_bytes)
    flag(launch, "launch")
    lq, lk = seqlens_pair(seqlens_q, seqlens_k)
    out = []
    for kind in kinds:
        total = [0.0, 0.0, 0.0]
        for nq, nk in zip(lq, lk):
            pairs = visible_pairs(seq_q=nq, seq_k=nk, window=window, causal=causal)
            counts = _pass_counts(kind, batch=1, heads=H, kv_heads=Hkv, seq_q=nq, seq_k=nk, head_dim=D, pairs=pairs,
                                  nb=nb)
            total = [a + b for a, b in zip(total, counts)]
        out.append(_cost(kind, tuple(total), g, nb, launch))
    return out
