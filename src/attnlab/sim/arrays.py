"""Global arrays (simulated HBM) and shared arrays (one per block) with CUDA-style loads and stores
(lecture §3.3). The accounting happens in ``context.Context._access``; these classes hold the data and
route each ``load`` / ``store`` / ``atomic_add`` there.
"""

from __future__ import annotations

import math
import weakref

import numpy as np

from .errors import LaunchError


class _Array:
    """What global and shared arrays share: shape, dtype and index handling."""

    space = ""

    def _setup(self, name, shape, dtype):
        self.name = str(name)
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self.itemsize = self.dtype.itemsize
        self.size = int(math.prod(self.shape))
        self.ndim = len(self.shape)
        st, s = [], 1
        for n in reversed(self.shape):
            st.append(s)
            s *= n
        self.estrides = tuple(reversed(st))  # row-major element strides

    def __repr__(self):
        return f"<{self.space} array {self.name!r} {self.shape} {self.dtype}>"


class GlobalArray(_Array):
    """An array in the simulated HBM ("global memory"). Create with ``Device.array/zeros/empty``."""

    space = "global"

    def __init__(self, device, name, data: np.ndarray, base: int):
        self._setup(name, data.shape, data.dtype)
        self._dev_ref = weakref.ref(device)  # no cycle with Device.arrays: memory frees with the device
        self._data = np.ascontiguousarray(data).reshape(-1)
        self.base = base  # byte address

    def _context(self):
        dev = self._dev_ref()
        if dev is None:
            raise RuntimeError(f"{self.name!r}.load/store can only be called inside a kernel launched by Device.launch")
        return dev._active_ctx(self)

    def load(self, index, *, width: int = 1, mask=None):
        """Each active thread reads ``width`` consecutive elements starting at ``index``."""
        return self._context()._access(self, "read", index, width, mask, None)

    def store(self, index, value, *, width: int = 1, mask=None) -> None:
        """Each active thread writes ``width`` consecutive elements starting at ``index``."""
        self._context()._access(self, "write", index, width, mask, value)

    def atomic_add(self, index, value, *, width: int = 1, mask=None) -> None:
        """``atomicAdd``: each active thread adds ``value`` to its element(s); all adds land."""
        self._context()._access(self, "atomic", index, width, mask, value)

    def numpy(self) -> np.ndarray:
        """A host copy, shaped like the array."""
        return self._data.reshape(self.shape).copy()

    def copy_from(self, host) -> None:
        host = np.asarray(host)
        if host.shape != self.shape:
            raise ValueError(f"copy_from({self.name!r}) expects shape {self.shape}, got {host.shape}")
        self._data[:] = host.reshape(-1).astype(self.dtype, copy=False)


class _SharedState:
    """Storage and hazard bookkeeping of one shared buffer in one chunk of blocks.

    Hazard state per word since the last barrier: W (writer) and R (reader) are -1 for nobody,
    w >= 0 for warp w alone, -2 for several warps. While every block of the chunk has done the same
    accesses (the usual case) one row stands for all blocks; it is expanded to one row per block
    the first time blocks differ.
    """

    def __init__(self, nb, size, dtype, base_byte, nwords, track):
        self.storage = np.full((nb, size), np.nan, dtype) if dtype.kind == "f" else np.zeros((nb, size), dtype)
        self.base_byte = base_byte
        self.nb, self.nwords = nb, nwords
        self.W = np.full((1, nwords), -1, np.int8) if track else None
        self.R = np.full((1, nwords), -1, np.int8) if track else None

    @property
    def expanded(self) -> bool:
        return self.W.shape[0] > 1 or self.nb == 1

    def expand(self) -> None:
        if self.W.shape[0] == 1 and self.nb > 1:
            self.W = np.repeat(self.W, self.nb, axis=0)
            self.R = np.repeat(self.R, self.nb, axis=0)

    def reset(self, blocks) -> None:
        """A barrier in the blocks where ``blocks`` (bool (nb,)) is True."""
        if self.W.shape[0] == 1 and not blocks.all():
            self.expand()
        if self.W.shape[0] == 1:
            self.W.fill(-1)
            self.R.fill(-1)
        else:
            self.W[blocks] = -1
            self.R[blocks] = -1


class SharedArray(_Array):
    """A ``__shared__`` array: one copy per block. Declare with ``ctx.shared(name, shape, dtype)``."""

    space = "shared"

    def __init__(self, ctx, name, shape, dtype, state: _SharedState):
        self._setup(name, shape, dtype)
        self._ctx_ref = weakref.ref(ctx)  # no cycle with the context's list of shared arrays
        self._st = state
        self.base = state.base_byte

    @property
    def _ctx(self):
        ctx = self._ctx_ref()
        if ctx is None:
            raise RuntimeError(f"shared array {self.name!r} is used after the launch that declared it")
        return ctx

    def load(self, index, *, width: int = 1, mask=None):
        return self._ctx._access(self, "read", index, width, mask, None)

    def store(self, index, value, *, width: int = 1, mask=None) -> None:
        self._ctx._access(self, "write", index, width, mask, value)

    def view(self, name: str, shape=None, dtype=None) -> SharedArray:
        """The same shared bytes under another name (counted separately), e.g. a Q buffer reused for O."""
        shape = self.shape if shape is None else tuple(shape)
        dtype = self.dtype if dtype is None else np.dtype(dtype)
        if dtype != self.dtype or math.prod(shape) > self.size:
            raise LaunchError(f"view {name!r} must keep dtype {self.dtype} and fit in {self.size} elements")
        self._ctx._check_new_name(name)
        v = SharedArray(self._ctx, name, shape, dtype, self._st)
        self._ctx._shared[name] = v
        return v

    def numpy(self) -> np.ndarray:
        """Contents per block of the chunk: (nb, *shape) (for tests and debugging)."""
        return self._st.storage[:, : self.size].reshape((-1,) + self.shape).copy()
