"""Errors and warnings raised by the GPU simulator (lecture §3.3, §5.2: the kernels it checks).

Every error names the kernel, the block (``blockIdx``), the thread (``threadIdx``), the array and the
index involved, so a wrong kernel points at its own bug.
"""

from __future__ import annotations


class SimError(Exception):
    """Base class of the simulator's errors."""


class OutOfBoundsError(SimError, IndexError):
    """A thread read or wrote outside a global or shared array."""


class MisalignedAccessError(SimError, ValueError):
    """A vector access (width 2 or 4) whose first element is not a multiple of its width."""


class SharedMemoryHazard(SimError, RuntimeError):
    """Two warps of a block touched one shared word between the same pair of barriers, one writing
    (raised when the device was created with ``hazards="error"``)."""


class SharedMemoryHazardWarning(UserWarning):
    """The warning form of :class:`SharedMemoryHazard` (the default)."""


class DivergentBarrierError(SimError, RuntimeError):
    """``syncthreads()`` reached by some threads of a block but not all of them."""


class LaunchError(SimError, ValueError):
    """A launch that no GPU would accept: too many threads, too much shared memory, bad arguments."""
