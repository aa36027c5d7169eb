"""gpusim: a GPU simulator that runs CUDA-style kernels written in Python and counts what they ask
of memory (lecture §3.3 memory hierarchy, §5.2–5.3 counting the kernels).

    from attnlab import sim
    dev = sim.Device()
    x, y = dev.array("x", np.arange(1024, dtype=np.float32)), dev.zeros("y", 1024)

    def copy(ctx, src, dst, n):
        i = ctx.blockIdx.x * ctx.blockDim.x + ctx.threadIdx.x      # (nb, nt) as in CUDA
        with ctx.masked(i < n):                                     # if (i < n) {...}
            dst.store(i, src.load(i))

    dev.launch(copy, 4, 256, x, y, 1024)   # grid, block, *args -> KernelStats
    dev.report().print()                              # sectors, first-touch bytes, wavefronts, ...

Files: ``context.py`` the execution model (what a kernel sees), ``arrays.py`` global and shared arrays,
``device.py`` allocation and launches, ``accounting.py`` the per-warp cost rules, ``hazards.py`` the
shared-memory race checks, ``report.py`` the counters; ``docs/simulator.md`` is the user's guide.
The lecture's attention kernels that run on it are the subpackage ``attnlab.sim.kernels``, which this
package does not import: the simulator knows nothing of attention.
"""

from .arrays import GlobalArray, SharedArray
from .context import Context, Dim3
from .device import Device
from .errors import (
    DivergentBarrierError,
    LaunchError,
    MisalignedAccessError,
    OutOfBoundsError,
    SharedMemoryHazard,
    SharedMemoryHazardWarning,
    SimError,
)
from .report import GLOBAL_FIELDS, SHARED_FIELDS, KernelStats, Report

__all__ = [
    "Context",
    "Device",
    "Dim3",
    "DivergentBarrierError",
    "GLOBAL_FIELDS",
    "GlobalArray",
    "KernelStats",
    "LaunchError",
    "MisalignedAccessError",
    "OutOfBoundsError",
    "Report",
    "SHARED_FIELDS",
    "SharedArray",
    "SharedMemoryHazard",
    "SharedMemoryHazardWarning",
    "SimError",
]
