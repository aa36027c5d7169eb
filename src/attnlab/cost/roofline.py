"""Roofline estimates (§3.2, §5.5, §7.5, §7.6): time = max(FLOPs / peak, bytes / bandwidth) + launch.

``kernel_time`` is the one formula; ``estimate_forward`` / ``estimate_backward`` apply it to the
kernels of ``io.py`` for a whole (B, H, Hkv, N, D) problem and return ``KernelCost`` lists that demos
print and tests check. These are lower bounds, not measurements: FlashAttention-2 reaches about 35%
of H100's peak (FlashAttention-3 paper), so measured times sit above them.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from . import io as _io
from ._args import dtype_bytes as _dtype_bytes
from ._args import flag, heads_pair, pos_int
from .gpus import GPU, get_gpu

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
