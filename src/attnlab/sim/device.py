"""The simulated GPU: allocate global arrays, launch kernels, collect the counts (lecture §3.3, §5.2).

``Device.launch(kernel, grid, block, *args)`` runs ``kernel(ctx, *args)`` over chunks of blocks (a
``context.Context`` per chunk) and returns the launch's ``KernelStats``; ``Device.report()`` gathers
all launches. The execution model and the kernel-writing rules are in ``context.py``; the cost rules
in ``accounting.py``; ``docs/simulator.md`` is the user's guide.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from . import accounting as acc
from .accounting import WARP
from .arrays import GlobalArray
from .context import Context
from .errors import LaunchError, SharedMemoryHazardWarning
from .report import KernelStats, Report

MAX_THREADS_PER_BLOCK = 1024
H100_SHARED_BYTES_PER_BLOCK = 227 * 1024  # opt-in maximum of an H100 SM (CUDA guide, cc 9.0)
MAX_THREADS_PER_CHUNK = 1 << 17  # threads of the blocks that run together: bounds the per-lane arrays
_HAZARD_MODES = ("warn", "error", "ignore")


def _dim3(value, name: str) -> tuple:
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        value = (int(value),)
    if not isinstance(value, (tuple, list)) or not 1 <= len(value) <= 3:
        raise LaunchError(f"{name} must be an int or a tuple of 1-3 ints, got {value!r}")
    out = []
    for v in value:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 1:
            raise LaunchError(f"{name} entries must be positive ints, got {value!r}")
        out.append(int(v))
    return tuple(out) + (1,) * (3 - len(out))


class _Launch:
    def __init__(self, stats, grid, block, l2):
        self.stats, self.grid, self.block, self.l2 = stats, grid, block, l2
        self.touched: dict = {}
        self.first_hazard = None


class Device:
    """A simulated GPU: allocate global arrays, launch kernels, read the counts.

    Arguments:
        l2_bytes: capacity of the optional L2 model (LRU over 32-byte sectors, kept across
            launches); None (default) runs without it, which is faster.
        hazards: "warn" (default), "error" or "ignore" for shared-memory hazards.
        shared_bytes_per_block: shared memory a block may declare (default: H100's 227 KiB).
        max_threads_per_chunk: blocks run together in chunks of at most this many threads.
    """

    def __init__(self, *, l2_bytes: int | None = None, hazards: str = "warn",
                 shared_bytes_per_block: int = H100_SHARED_BYTES_PER_BLOCK,
                 max_threads_per_chunk: int = MAX_THREADS_PER_CHUNK):
        if hazards not in _HAZARD_MODES:
            raise ValueError(f"hazards must be one of {_HAZARD_MODES}, got {hazards!r}")
        if l2_bytes is not None and (isinstance(l2_bytes, bool) or not isinstance(l2_bytes, (int, np.integer))):
            raise ValueError(f"l2_bytes must be an int number of bytes or None, got {l2_bytes!r}")
        self.hazards = hazards
        self.l2_bytes = None if l2_bytes is None else int(l2_bytes)
        self.l2 = None if l2_bytes is None else acc.LRUCache(int(l2_bytes))
        self.shared_bytes_per_block = int(shared_bytes_per_block)
        self.max_threads_per_chunk = int(max_threads_per_chunk)
        self.arrays: dict = {}
        self.kernels: list = []
        self._next = 0
        self._ctx = None

    # -- memory -------------------------------------------------------------------------------
    def _alloc(self, name, data) -> GlobalArray:
        if not isinstance(name, str) or not name:
            raise ValueError(f"array name must be a non-empty string, got {name!r}")
        if name in self.arrays:
            raise ValueError(f"an array named {name!r} already exists on this device")
        base = self._next
        self._next = -(-(base + data.nbytes) // 256) * 256  # cudaMalloc alignment
        arr = GlobalArray(self, name, data, base)
        self.arrays[name] = arr
        return arr

    def array(self, name: str, data, dtype=None) -> GlobalArray:
        """Copy host data (numpy array or CPU tensor) into a new global array."""
        if hasattr(data, "detach"):
            data = data.detach().cpu().numpy()
        data = np.array(data, dtype=dtype, copy=True)
        if data.dtype.kind not in "fiub":
            raise TypeError(f"array {name!r}: unsupported dtype {data.dtype}")
        return self._alloc(name, data)

    def zeros(self, name: str, shape, dtype=np.float32) -> GlobalArray:
        return self._alloc(name, np.zeros(shape, dtype))

    def empty(self, name: str, shape, dtype=np.float32) -> GlobalArray:
        """Uninitialised memory (NaN for floats, so a never-written output shows)."""
        dtype = np.dtype(dtype)
        return self._alloc(name, np.full(shape, np.nan, dtype) if dtype.kind == "f" else np.zeros(shape, dtype))

    def _active_ctx(self, arr) -> Context:
        if self._ctx is None:
            raise RuntimeError(f"{arr.name!r}.load/store can only be called inside a kernel launched by Device.launch")
        return self._ctx

    # -- launch -------------------------------------------------------------------------------
    def launch(self, kernel, grid, block, *args, name: str | None = None) -> KernelStats:
        """Run ``kernel(ctx, *args)`` over ``grid`` blocks of ``block`` threads; return its counts."""
        grid, block = _dim3(grid, "grid"), _dim3(block, "block")
        nthreads = math.prod(block)
        if nthreads > MAX_THREADS_PER_BLOCK:
            raise LaunchError(f"block {block} has {nthreads} threads, more than {MAX_THREADS_PER_BLOCK}")
        name = name or getattr(kernel, "__name__", "kernel").lstrip("_")
        stats = KernelStats(name=name, grid=grid, block=block, threads_per_block=nthreads,
                            blocks=math.prod(grid), l2_bytes=self.l2_bytes)
        launch = _Launch(stats, grid, block, self.l2)
        nblocks = math.prod(grid)
        nt = -(-nthreads // WARP) * WARP
        chunk = max(1, self.max_threads_per_chunk // nt)
        try:
            with np.errstate(over="ignore", invalid="ignore", divide="ignore", under="ignore"):
                for start in range(0, nblocks, chunk):
                    ids = np.arange(start, min(nblocks, start + chunk))
                    self._ctx = Context(self, launch, ids)
                    kernel(self._ctx, *args)
        finally:
            self._ctx = None
        self.kernels.append(stats)
        if launch.first_hazard is not None:
            warnings.warn(
                f"{stats.hazards} shared-memory hazard word(s) in kernel {name!r}; first: {launch.first_hazard}",
                SharedMemoryHazardWarning,
                stacklevel=2,
            )
        return stats

    def report(self, since: int = 0) -> Report:
        """The counts of every launch so far (or from launch number ``since`` on)."""
        return Report(self.kernels[since:])

    def flush_l2(self) -> None:
        if self.l2 is not None:
            self.l2.flush()
