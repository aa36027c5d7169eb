"""GPU presets as data (§3.2–3.3, §5.5, §7.6, §8.4): the numbers every cost model divides by.

A ``GPU`` is a frozen dataclass; ``GPUS`` holds the presets; ``get_gpu("h100")`` looks one up (case
does not matter). Build your own with ``GPU(...)`` or ``dataclasses.replace(get_gpu("H100"), sms=114)``.

Peaks are *dense* (no 2:4 sparsity) FP16/BF16 tensor-core FLOP/s and FP32 non-tensor FLOP/s;
``hbm_bw`` is bytes/s; ``memory`` is the nominal HBM capacity in bytes with decimal GB, as NVIDIA
states it (the lecture's "64 GiB = 86% of an 80 GB H100" uses 80e9). ``tensor_mhz`` and ``fp32_mhz`` are
the SM clocks the two peaks are quoted at (the peak is units × FLOP per clock × that clock), so that
``gpu.at_clock(mhz)`` gives the peaks of a GPU running at another clock: a GPU held at its power limit
runs below the quoted one, and its roofline at the clock it ran is its physical limit there. ``launch_overhead`` is not a
datasheet number: it is the lecture's assumption of 4 µs per kernel launch, the value that makes
§5.5 come out ("standard ≈ 1,334 µs incl. 3 launches", "flash ≈ 282 µs").
"""

from __future__ import annotations

from dataclasses import dataclass, replace

KiB = 1024
MiB = 1024**2
GB = 10**9
TB = 10**12
TFLOP = 10**12

LAUNCH_OVERHEAD = 4e-6  # seconds per kernel launch (lecture §5.5; measured launch latencies are a few µs)


@dataclass(frozen=True)
class GPU:
    """One accelerator, as the roofline sees it."""

    name: str
    tensor_flops: float  # dense FP16/BF16 tensor-core peak, FLOP/s
    fp32_flops: float  # FP32 non-tensor (CUDA core) peak, FLOP/s
    hbm_bw: float  # HBM bandwidth, bytes/s
    sms: int  # streaming multiprocessors
    smem_per_sm: int  # shared memory per SM, bytes
    l2_bytes: int  # L2 cache, bytes
    memory: float = 0.0  # HBM capacity, bytes (nominal, decimal GB)
    launch_overhead: float = LAUNCH_OVERHEAD  # seconds added per kernel launch
    tensor_mhz: float = 0.0  # the SM clock tensor_flops is quoted at, MHz (0: not known)
    fp32_mhz: float = 0.0  # the SM clock fp32_flops is quoted at, MHz (0: not known)

    def __post_init__(self):
        for field in ("tensor_flops", "fp32_flops", "hbm_bw"):
            v = getattr(self, field)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
                raise ValueError(f"GPU.{field} must be a positive number, got {v!r}")
        for field in ("sms", "smem_per_sm", "l2_bytes"):
            v = getattr(self, field)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"GPU.{field} must be a positive integer, got {v!r}")
        if isinstance(self.memory, bool) or not isinstance(self.memory, (int, float)) or self.memory < 0:
            raise ValueError(f"GPU.memory must be a number of bytes >= 0, got {self.memory!r}")
        for field in ("tensor_mhz", "fp32_mhz"):
            v = getattr(self, field)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0:
                raise ValueError(f"GPU.{field} must be a clock in MHz >= 0 (0: not known), got {v!r}")
        lo = self.launch_overhead
        if isinstance(lo, bool) or not isinstance(lo, (int, float)) or lo < 0:
            raise ValueError(f"GPU.launch_overhead must be seconds >= 0, got {lo!r}")

    @property
    def ridge(self) -> float:
        """Ridge point of the FP16 tensor roofline, FLOP/byte: above it a kernel is compute-bound."""
        return self.tensor_flops / self.hbm_bw

    def at_clock(self, mhz: float) -> GPU:
        """This GPU with its SM clock at ``mhz``: each peak scaled from the clock it is quoted at (``tensor_mhz``,
        ``fp32_mhz``; a peak whose clock is not known stays, the tensor peak's must be known), the name saying so.
        HBM bandwidth, memory and the rest stay: they do not follow the SM clock."""
        if isinstance(mhz, bool) or not isinstance(mhz, (int, float)) or not mhz > 0:
            raise ValueError(f"mhz must be a positive SM clock in MHz, got {mhz!r}")
        if not self.tensor_mhz:
            raise ValueError(f"{self.name}: the clock its tensor peak is quoted at is not known (tensor_mhz = 0)")
        fp32 = self.fp32_flops * mhz / self.fp32_mhz if self.fp32_mhz else self.fp32_flops
        return replace(self, name=f"{self.name} at {mhz:.0f} MHz", tensor_flops=self.tensor_flops * mhz / self.tensor_mhz,
                       fp32_flops=fp32, tensor_mhz=float(mhz), fp32_mhz=float(mhz) if self.fp32_mhz else 0.0)

    @property
    def smem_total(self) -> int:
        """Shared memory of the whole chip, bytes (H100: 132 × 228 KiB ≈ 30 MB, §3.3)."""
        return self.sms * self.smem_per_sm


GPUS: dict[str, GPU] = {
    # Tesla V100 SXM2 32GB — NVIDIA Tesla V100 datasheet (125 TFLOP/s tensor, 15.7 TFLOP/s FP32,
    # 900 GB/s, 32 GB) and Volta architecture whitepaper (80 SMs, up to 96 KB shared memory per SM,
    # 6 MB L2). Ridge 125e12 / 900e9 = 139 FLOP/byte: the lecture's "d > 139" (§7.6, exercise 6).
    # Both peaks at its 1,530 MHz boost: 640 tensor cores × 128 FLOP a clock × 1.53 GHz = 125.3 TFLOP/s,
    # 5,120 FP32 lanes × 2 × 1.53 GHz = 15.7 TFLOP/s.
    "V100": GPU("V100", 125 * TFLOP, 15.7 * TFLOP, 900 * GB, 80, 96 * KiB, 6 * MiB, 32 * GB,
                tensor_mhz=1530, fp32_mhz=1530),
    # A100 SXM4 80GB — NVIDIA A100 datasheet (312 TFLOP/s dense FP16 tensor, 19.5 TFLOP/s FP32 — the
    # FlashAttention-2 paper's two numbers, §6.3 — and 2,039 GB/s, 80 GB) and the Ampere GA100
    # whitepaper (108 SMs, up to 164 KB shared memory per SM, 40 MB L2). The FA2 paper benchmarks the
    # 80GB SXM4 part, hence 2.039 TB/s rather than the 40GB part's 1.555 TB/s ("A100-40GB" below).
    # Both peaks at its 1,410 MHz boost: 108 SMs × 2,048 dense FP16 FLOP a clock × 1.41 GHz = 311.9 TFLOP/s,
    # 6,912 FP32 lanes × 2 × 1.41 GHz = 19.5 TFLOP/s.
    "A100": GPU("A100", 312 * TFLOP, 19.5 * TFLOP, 2039 * GB, 108, 164 * KiB, 40 * MiB, 80 * GB,
                tensor_mhz=1410, fp32_mhz=1410),
    "A100-40GB": GPU("A100-40GB", 312 * TFLOP, 19.5 * TFLOP, 1555 * GB, 108, 164 * KiB, 40 * MiB, 40 * GB,
                     tensor_mhz=1410, fp32_mhz=1410),
    # H100 SXM5 80GB — NVIDIA H100 datasheet (989 TFLOP/s dense FP16/BF16 tensor, 67 TFLOP/s FP32,
    # 3.35 TB/s, 80 GB) and the Hopper architecture whitepaper (132 SMs, 228 KB shared memory per SM,
    # 50 MB L2). Ridge 989e12 / 3.35e12 = 295 FLOP/byte (§3.2).
    # The two peaks are quoted at different clocks: 132 SMs × 4,096 dense FP16 FLOP a clock (twice the A100's SM)
    # × 1.83 GHz = 989.4 TFLOP/s, and 16,896 FP32 lanes × 2 × 1.98 GHz (the maximum boost) = 66.9 TFLOP/s.
    "H100": GPU("H100", 989 * TFLOP, 67 * TFLOP, 3350 * GB, 132, 228 * KiB, 50 * MiB, 80 * GB,
                tensor_mhz=1830, fp32_mhz=1980),
    # H200 SXM 141GB — NVIDIA H200 datasheet (989 TFLOP/s dense FP16 tensor, 67 TFLOP/s FP32,
    # 4.8 TB/s, 141 GB); same GH100 die as H100 (132 SMs, 228 KB shared memory per SM, 50 MB L2).
    # The same peaks at the same clocks as the H100's.
    "H200": GPU("H200", 989 * TFLOP, 67 * TFLOP, 4800 * GB, 132, 228 * KiB, 50 * MiB, 141 * GB,
                tensor_mhz=1830, fp32_mhz=1980),
    # B200 (HGX B200, 1000 W) — NVIDIA Blackwell datasheet / HGX B200 spec: 4.5 PFLOP/s FP16/BF16
    # tensor with sparsity = 2.25 PFLOP/s dense, 80 TFLOP/s FP32; DGX B200 datasheet: 64 TB/s HBM3e
    # and 1,440 GB over 8 GPUs = 8 TB/s and 180 GB each. 148 SMs (2 dies × 74 enabled) and 228 KB
    # shared memory per SM (CUDA programming guide, compute capability 10.0) from public
    # measurements (Chips and Cheese, "Nvidia's B200"); NVIDIA does not list the L2 size in its
    # datasheets — 126 MB is what the CUDA runtime reports, treat it as approximate.
    "B200": GPU("B200", 2250 * TFLOP, 80 * TFLOP, 8000 * GB, 148, 228 * KiB, 126 * MiB, 180 * GB),
}


def get_gpu(name) -> GPU:
    """The preset called ``name`` (case-insensitive, e.g. "h100"); a ``GPU`` is returned as is.

    Raises ``ValueError`` listing the known names for anything else.
    """
    if isinstance(name, GPU):
        return name
    if not isinstance(name, str):
        raise TypeError(f"gpu must be a GPU or a preset name like 'H100', got {name!r}")
    key = name.strip().upper()
    for k, g in GPUS.items():
        if k.upper() == key:
            return g
    raise ValueError(f"unknown GPU {name!r}; known GPUs: {', '.join(GPUS)} (or build one with attnlab.cost.GPU(...))")
