"""The simulated GPU: global arrays, kernel launches and the execution context (lecture §3.3, §5.2).

A kernel is a Python function ``kernel(ctx, *args)`` written in CUDA style, but "SIMT over numpy":
it runs once for a whole chunk of blocks, and every per-thread value is a numpy array over the
threads of all blocks in the chunk.

* ``ctx.blockIdx.x`` has shape ``(nb, 1)`` (one row per block of the chunk), ``ctx.threadIdx.x`` has
  shape ``(1, nt)`` (nt = threads per block, rounded up to whole warps; the extra lanes never take
  part), so ``ctx.blockIdx.x * ctx.blockDim.x + ctx.threadIdx.x`` is a ``(nb, nt)`` array as in CUDA.
  ``blockDim`` and ``gridDim`` hold plain ints.
* Control flow that differs between threads is a mask: ``with ctx.masked(row < N): ...``; memory
  instructions inside touch only active lanes. ``ctx.select(new, old)`` keeps registers of inactive
  lanes. Loops that are the same for all threads are Python loops.
* Per-thread values keep the thread axes last: a register is an array of shape ``(..., nb, nt)``
  (or with 1 for axes it does not vary along), so masks of shape (nb, nt) broadcast against it.
  An unrolled loop is a leading axis: ``c = ctx.unroll(BC)`` has shape ``(BC, 1, 1)``, so
  ``Ks.load((c, k))`` issues BC instructions in one call and returns ``(BC, nb, nt)``. A vector
  access of ``width`` w adds an axis of length w just before the thread axes:
  ``A.load(i, width=4)`` returns ``(4, nb, nt)``; ``store`` takes values in the same layout.
* Memory: ``A.load(idx, width=1|2|4, mask=None)``, ``A.store(idx, value, ...)``,
  ``A.atomic_add(idx, value, ...)`` for global arrays; ``ctx.shared(name, shape, dtype)`` declares
  a shared array (one per block) with ``load``/``store``; ``ctx.syncthreads()``. An index is a flat
  element index or a tuple with one entry per dimension (each checked against its extent).

Every memory instruction is accounted per warp by the vectorised functions of ``accounting.py``;
the counts land in a ``KernelStats`` per launch (``report.py``). Out-of-bounds accesses raise
``OutOfBoundsError`` naming kernel, block, thread, array and index; shared-memory hazards (two warps,
one word, no barrier between, one writing) warn or raise.
"""

from __future__ import annotations

import math
import warnings
from contextlib import contextmanager

import numpy as np

from . import accounting as acc
from .errors import (
    DivergentBarrierError,
    LaunchError,
    MisalignedAccessError,
    OutOfBoundsError,
    SharedMemoryHazard,
    SharedMemoryHazardWarning,
)
from .report import KernelStats, Report

WARP = 32
MAX_THREADS_PER_BLOCK = 1024
H100_SHARED_BYTES_PER_BLOCK = 227 * 1024  # opt-in maximum of an H100 SM (CUDA guide, cc 9.0)
_HAZARD_MODES = ("warn", "error", "ignore")


class Dim3:
    """``x``, ``y``, ``z`` of blockIdx / threadIdx (arrays) or blockDim / gridDim (ints)."""

    __slots__ = ("x", "y", "z")

    def __init__(self, x, y=1, z=1):
        self.x, self.y, self.z = x, y, z

    def __iter__(self):
        return iter((self.x, self.y, self.z))

    def __repr__(self):
        return f"Dim3(x={self.x!r}, y={self.y!r}, z={self.z!r})"


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


# ------------------------------------------------------------------------------------------------
# arrays
# ------------------------------------------------------------------------------------------------


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
        self._dev = device
        self._data = np.ascontiguousarray(data).reshape(-1)
        self.base = base  # byte address

    def load(self, index, *, width: int = 1, mask=None):
        """Each active thread reads ``width`` consecutive elements starting at ``index``."""
        return self._dev._active_ctx(self)._access(self, "read", index, width, mask, None)

    def store(self, index, value, *, width: int = 1, mask=None) -> None:
        """Each active thread writes ``width`` consecutive elements starting at ``index``."""
        self._dev._active_ctx(self)._access(self, "write", index, width, mask, value)

    def atomic_add(self, index, value, *, width: int = 1, mask=None) -> None:
        """``atomicAdd``: each active thread adds ``value`` to its element(s); all adds land."""
        self._dev._active_ctx(self)._access(self, "atomic", index, width, mask, value)

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
        self._ctx = ctx
        self._st = state
        self.base = state.base_byte

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


# ------------------------------------------------------------------------------------------------
# the execution context
# ------------------------------------------------------------------------------------------------


class Context:
    """What a kernel sees: indices, masks, shared memory, barriers. One per chunk of blocks."""

    def __init__(self, dev, launch, block_ids: np.ndarray):
        self._dev, self._launch, self._stats = dev, launch, launch.stats
        gx, gy, gz = launch.grid
        bx, by, bz = launch.block
        nthreads = bx * by * bz
        self.nb = nb = len(block_ids)
        self.nt = nt = -(-nthreads // WARP) * WARP
        self.nwarps = nt // WARP
        ids = block_ids.astype(np.int64).reshape(nb, 1)
        self.blockIdx = Dim3(ids % gx, (ids // gx) % gy, ids // (gx * gy))
        t = np.arange(nt, dtype=np.int64).reshape(1, nt)
        self.threadIdx = Dim3(t % bx, (t // bx) % by, t // (bx * by))
        self.blockDim = Dim3(bx, by, bz)
        self.gridDim = Dim3(gx, gy, gz)
        self.warp_size = WARP
        self.lane_id = t % WARP
        self.warp_id = t // WARP
        self._lane_ok = t < nthreads  # (1, nt)
        self._bm = np.ones(nb, bool)  # active blocks
        self._tm = self._lane_ok  # active threads, (1|nb, nt)
        self._shared: dict = {}
        self._states: list = []
        self._shared_bytes = 0
        self.name = launch.stats.name

    # -- control flow -------------------------------------------------------------------------
    @contextmanager
    def masked(self, cond):
        """Only threads where ``cond`` holds take part in what the block does (``if (cond) {...}``)."""
        c = np.asarray(cond, dtype=bool)
        saved = self._bm, self._tm
        if c.ndim == 0:
            if not c:
                self._bm = np.zeros_like(self._bm)
        elif c.ndim == 2 and c.shape == (self.nb, 1):
            self._bm = self._bm & c[:, 0]
        else:
            if c.ndim > 2 or c.shape[-1] not in (1, self.nt) or (c.ndim == 2 and c.shape[0] not in (1, self.nb)):
                raise ValueError(
                    f"kernel {self.name!r}: masked() needs a per-thread condition of shape (nb|1, nt|1) = "
                    f"({self.nb}|1, {self.nt}|1), got {c.shape}"
                )
            self._tm = self._tm & c
        try:
            yield
        finally:
            self._bm, self._tm = saved

    @property
    def active(self) -> np.ndarray:
        """The (nb, nt) mask of threads that take part right now."""
        return self._bm[:, None] & self._tm

    def select(self, new, old):
        """``new`` in active lanes, ``old`` elsewhere (registers survive a branch they skipped)."""
        new, old = np.asarray(new), np.asarray(old)
        return np.where(self.active, new, old)

    @staticmethod
    def unroll(*counts):
        """Index arrays of an unrolled loop nest: ``c, k = ctx.unroll(BC, D4)`` gives shapes
        (BC, 1, 1, 1) and (1, D4, 1, 1): leading axes that broadcast against (nb, nt)."""
        n = len(counts)
        out = []
        for i, c in enumerate(counts):
            shape = [1] * (n + 2)
            shape[i] = int(c)
            out.append(np.arange(int(c), dtype=np.int64).reshape(shape))
        return out[0] if n == 1 else tuple(out)

    # -- shared memory and barriers -----------------------------------------------------------
    def _check_new_name(self, name):
        if name in self._shared:
            raise LaunchError(f"kernel {self.name!r} declares shared array {name!r} twice")

    def shared(self, name: str, shape, dtype=np.float32) -> SharedArray:
        """``__shared__ dtype name[shape]``: one array per block, uninitialised (NaN for floats)."""
        self._check_new_name(name)
        shape = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape)
        dtype = np.dtype(dtype)
        size = int(math.prod(shape))
        nbytes = size * dtype.itemsize
        base = -(-self._shared_bytes // 128) * 128  # each array starts on a 128-byte (bank 0) line
        self._shared_bytes = base + nbytes
        limit = self._dev.shared_bytes_per_block
        if self._shared_bytes > limit:
            raise LaunchError(
                f"kernel {self.name!r}: shared arrays need {self._shared_bytes:,} bytes per block "
                f"(after {name!r} {shape} {dtype}), more than the {limit:,} available"
            )
        self._stats.shared_bytes_per_block = max(self._stats.shared_bytes_per_block, self._shared_bytes)
        st = _SharedState(self.nb, size, dtype, base, -(-nbytes // 4), self._dev.hazards != "ignore")
        self._states.append(st)
        arr = SharedArray(self, name, shape, dtype, st)
        self._shared[name] = arr
        return arr

    def syncthreads(self) -> None:
        """``__syncthreads()``: every thread of a block must reach it, or none."""
        act = self._bm[:, None] & self._tm  # (nb, nt)
        ok = self._lane_ok
        some = act.any(axis=1)
        partial = some & ~(act | ~ok).all(axis=1)
        if partial.any():
            b = int(np.flatnonzero(partial)[0])
            t = int(np.flatnonzero(ok[0] & ~act[b])[0])
            raise DivergentBarrierError(
                f"kernel {self.name!r}: syncthreads() reached by only part of {self._where(b, t)}: "
                f"that thread skips it (a barrier inside divergent code)"
            )
        nblk = int(np.count_nonzero(some))
        self._stats.barriers += nblk
        self._stats.barrier_instructions += nblk * self.nwarps
        if self._dev.hazards != "ignore" and nblk:
            for st in self._states:
                st.reset(some)

    # -- descriptions for messages ------------------------------------------------------------
    def _where(self, b: int, t: int | None = None) -> str:
        bi = tuple(int(v[b, 0]) for v in self.blockIdx)
        s = f"block {bi}"
        if t is not None:
            ti = tuple(int(v[0, t]) for v in self.threadIdx)
            s += f", thread {ti}"
        return s

    # -- the memory instruction ---------------------------------------------------------------
    def _access(self, arr, kind, index, width, mask, value):
        name = self.name
        if width not in (1, 2, 4):
            raise ValueError(f"kernel {name!r}: width must be 1, 2 or 4 elements, got {width!r}")
        comps = index if isinstance(index, tuple) else (index,)
        if len(comps) != 1 and len(comps) != arr.ndim:
            raise ValueError(
                f"kernel {name!r}: {arr.space} array {arr.name!r} of shape {arr.shape} indexed with "
                f"{len(comps)} indices (give one flat index or {arr.ndim})"
            )
        comps = [np.asarray(c) for c in comps]
        for c in comps:
            if c.dtype.kind not in "iu":
                raise TypeError(f"kernel {name!r}: indices into {arr.name!r} must be integers, got {c.dtype}")
        nb, nt = self.nb, self.nt
        bm, tm = self._bm, self._tm
        if mask is not None:
            mk = np.asarray(mask, dtype=bool)
            if mk.ndim >= 2 and mk.shape[-2:] == (nb, 1) and all(s == 1 for s in mk.shape[:-2]) and nb > 1:
                bm = bm & mk.reshape(nb)
            else:
                tm = tm & mk
        try:
            shape = np.broadcast_shapes(*(c.shape for c in comps), tm.shape)
        except ValueError:
            raise ValueError(
                f"kernel {name!r}: index shapes {[c.shape for c in comps]} and mask {tm.shape} do not "
                f"broadcast to (*unrolled, {nb}, {nt})"
            ) from None
        if len(shape) < 2 or shape[-2] not in (1, nb) or shape[-1] not in (1, nt):
            raise ValueError(
                f"kernel {name!r}: access to {arr.name!r} has shape {shape}; per-thread shapes are "
                f"(*unrolled, nb|1, nt|1) = (..., {nb}|1, {nt}|1); use ctx.unroll() for unrolled loops"
            )
        U = shape[:-2]
        nu = len(U)
        Up = int(math.prod(U))
        # flat index (at its own broadcast shape) and bounds
        if len(comps) == 1:
            flat = comps[0].astype(np.int64, copy=False)
            bad = (flat < 0) | (flat > arr.size - width)
        else:
            flat, bad = 0, False
            last = arr.ndim - 1
            for i, c in enumerate(comps):
                lim = arr.shape[i] - (width - 1 if i == last else 0)
                bad = bad | (c < 0) | (c >= lim)
                flat = flat + c.astype(np.int64, copy=False) * arr.estrides[i]
            flat = np.asarray(flat, dtype=np.int64)
        flat = flat.reshape((1,) * (nu + 2 - flat.ndim) + flat.shape)
        bad = np.asarray(bad)
        nbA = int(np.count_nonzero(bm))
        bmcol = bm[:, None]
        any_bad = bool(bad.any())
        if any_bad or width > 1:
            self._check(arr, kind, comps, flat, bad if any_bad else None, width, bm, bmcol, tm, shape, nbA)
        stats = self._stats
        if nbA and tm.any():
            self._count(arr, kind, flat, width, bm, bmcol, tm, U, Up, nbA, stats)
        # -- data movement
        g = np.where(bad.reshape((1,) * (flat.ndim - bad.ndim) + bad.shape), 0, flat) if any_bad else flat
        if kind == "read":
            return self._gather(arr, g, width, nu)
        self._scatter(arr, kind, g, width, bmcol, tm, shape, U, nu, value)
        return None

    def _check(self, arr, kind, comps, flat, bad, width, bm, bmcol, tm, shape, nbA):
        """Raise for an active lane that is out of bounds or misaligned."""
        blk = bmcol if shape[-2] == self.nb else bool(nbA)
        for problem, m in (("out-of-bounds", bad), ("misaligned", (flat % width != 0) if width > 1 else None)):
            if m is None:
                continue
            hit = np.broadcast_to(m & tm & blk, shape)
            if not hit.any():
                continue
            pos = tuple(int(p) for p in np.argwhere(hit)[0])
            b = pos[-2] if shape[-2] == self.nb else int(np.flatnonzero(bm)[0])
            t = pos[-1] if shape[-1] == self.nt else int(np.flatnonzero(np.broadcast_to(tm, shape)[pos[:-1]])[0])
            idx = tuple(int(np.broadcast_to(c, shape)[pos]) for c in comps)
            idx_s = str(idx[0]) if len(idx) == 1 else str(idx)
            op = {"read": "load", "write": "store", "atomic": "atomic_add"}[kind]
            what = f"{op} of width {width}" if width > 1 else op
            unrolled = f", unrolled instruction {pos[:-2]}" if len(pos) > 2 else ""
            if problem == "out-of-bounds":
                raise OutOfBoundsError(
                    f"kernel {self.name!r}: out-of-bounds {what} of {arr.space} array {arr.name!r} "
                    f"(shape {arr.shape}) at index {idx_s} by {self._where(b, t)}{unrolled}"
                )
            raise MisalignedAccessError(
                f"kernel {self.name!r}: misaligned {what} of {arr.space} array {arr.name!r} at index "
                f"{idx_s} (flat {int(np.broadcast_to(flat, shape)[pos])}, not a multiple of {width}) by "
                f"{self._where(b, t)}{unrolled}"
            )

    def _count(self, arr, kind, flat, width, bm, bmcol, tm, U, Up, nbA, stats):
        nb, nt, nw = self.nb, self.nt, self.nwarps
        lane_bytes = width * arr.itemsize
        is_global = arr.space == "global"
        c = stats.g(arr.name, kind) if is_global else stats.s(arr.name, kind)
        l2 = self._launch.l2 if is_global else None
        tm3 = tm.reshape((1,) * (len(U) + 2 - tm.ndim) + tm.shape)
        if flat.shape[-1] == 1 and l2 is None:
            # -- uniform: every active lane of a warp reads/writes the same address
            B = nb if (flat.shape[-2] == nb or tm3.shape[-2] == nb) else 1
            act = np.broadcast_to(tm3, U + (B, nt))
            if B == nb:
                act = act & bmcol
            lanes = int(np.count_nonzero(act))
            actw = act.reshape(Up, B, nw, WARP).any(axis=3)  # (Up, B, nw)
            flatU = np.broadcast_to(flat, U + flat.shape[-2:]).reshape(Up, flat.shape[-2])
            mult = nbA if B == 1 else 1
            nwi = int(np.count_nonzero(actw)) * mult
            c["instructions"] += nwi
            c["requests"] += lanes * mult
            c["requested_bytes"] += lanes * mult * lane_bytes
            if is_global:
                c["sectors"] += nwi
                used = actw.any(axis=2)  # (Up, B)
                f = np.broadcast_to(flatU, (Up, B))[used]
                self._first_touch(arr, kind, f, width, c)
            else:
                c["wavefronts"] += nwi
                c["ideal_wavefronts"] += nwi
                if self._dev.hazards != "ignore":
                    key = ("u", arr.itemsize, lane_bytes, arr._st.nwords, flatU.shape, flatU.tobytes(),
                           actw.tobytes()) if B == 1 else None
                    entries = _MEMO.get(key) if key else None
                    if entries is None:
                        entries = self._hazard_uniform(arr, flatU, actw, bm, B, Up, lane_bytes)
                        _memo_put(key, entries)
                    self._hazard_apply(arr, kind, *entries, bm)
            return
        B = nb if (flat.shape[-2] == nb or tm3.shape[-2] == nb or l2 is not None) else 1
        mult = nbA if B == 1 else 1
        idx3 = np.broadcast_to(flat, U + (B, nt)).reshape(Up, B, nt)
        act3 = np.broadcast_to(tm3, U + (B, nt))
        act3 = (act3 & bmcol) if B == nb else act3
        act3 = act3.reshape(Up, B, nt)
        G = Up * B * nw
        if is_global:
            lanes = int(np.count_nonzero(act3))
            sec = (arr.base + idx3 * arr.itemsize) >> 5
            instr, nsec, order = acc.sectors(sec.reshape(G, WARP), act3.reshape(G, WARP), want_order=l2 is not None)
            c["instructions"] += instr * mult
            c["sectors"] += nsec * mult
            if l2 is not None:
                hits = l2.access(order)
                if kind != "write":
                    c["l2_hit_sectors"] += hits
                    c["l2_miss_sectors"] += nsec - hits
            self._first_touch(arr, kind, idx3[act3], width, c)
        else:
            # the same pattern recurs at every loop iteration: its costs are memoised (B == 1 only)
            track = self._dev.hazards != "ignore"
            key = ("l", arr.base, arr.itemsize, lane_bytes, arr._st.nwords, track, idx3.shape, idx3.tobytes(),
                   act3.tobytes()) if B == 1 else None
            hit = _MEMO.get(key) if key else None
            if hit is None:
                k = max(1, lane_bytes // 4)
                word0 = (arr.base + idx3 * arr.itemsize) >> 2
                lanes = int(np.count_nonzero(act3))
                instr, wf, ideal = acc.wavefronts(word0.reshape(G, WARP), act3.reshape(G, WARP), k, k)
                entries = self._hazard_lanes(arr, idx3, act3, B, lane_bytes) if track else None
                hit = (lanes, instr, wf, ideal, entries)
                _memo_put(key, hit)
            lanes, instr, wf, ideal, entries = hit
            c["instructions"] += instr * mult
            c["wavefronts"] += wf * mult
            c["ideal_wavefronts"] += ideal * mult
            if track:
                self._hazard_apply(arr, kind, *entries, bm)
        c["requests"] += lanes * mult
        c["requested_bytes"] += lanes * mult * lane_bytes

    def _first_touch(self, arr, kind, elems, width, c):
        key = (arr.name, kind)
        tmap = self._launch.touched.get(key)
        if tmap is None:
            tmap = self._launch.touched[key] = acc.TouchMap(arr.size)
        if width > 1:
            elems = (elems[:, None] + np.arange(width)).reshape(-1)
        c["first_touch_bytes"] += tmap.add(elems) * arr.itemsize

    # -- hazards ------------------------------------------------------------------------------
    def _hazard_lanes(self, arr, idx3, act3, B, lane_bytes):
        """(Up, B, nt) lane accesses -> (words, warp|-2, blocks|None): one entry per touched word."""
        u, b, t = np.nonzero(act3)
        w0 = (idx3[u, b, t] * arr.itemsize) >> 2  # word within the buffer (buffer base cancels)
        k = max(1, lane_bytes // 4)
        warp = (t // WARP).astype(np.int8)
        if k > 1:
            w0 = (w0[:, None] + np.arange(k)).reshape(-1)
            warp = np.repeat(warp, k)
            b = np.repeat(b, k)
        nwords = arr._st.nwords
        words, wv = _collapse(w0 if B == 1 else b * nwords + w0, warp, nwords * B)
        return (words, wv, None) if B == 1 else (words % nwords, wv, words // nwords)

    def _hazard_uniform(self, arr, flatU, actw, bm, B, Up, lane_bytes):
        """Uniform accesses: per (instruction, block) one address, read by the active warps."""
        nact = actw.sum(axis=2)  # (Up, B)
        firstw = actw.argmax(axis=2).astype(np.int8)
        wv = np.where(nact >= 2, np.int8(-2), firstw)
        fl = np.broadcast_to(flatU, (Up, B))
        used = nact > 0
        if B == 1:
            u = np.flatnonzero(used[:, 0])
            blocks = np.zeros(len(u), np.int64)
            w0 = (fl[u, 0] * arr.itemsize) >> 2
            wv = wv[u, 0]
        else:
            u, blocks = np.nonzero(used & bm[None, :])
            w0 = (fl[u, blocks] * arr.itemsize) >> 2
            wv = wv[u, blocks]
        k = max(1, lane_bytes // 4)
        if k > 1:
            w0 = (w0[:, None] + np.arange(k)).reshape(-1)
            blocks = np.repeat(blocks, k)
            wv = np.repeat(wv, k)
        nwords = arr._st.nwords
        words, wv = _collapse(blocks * nwords + w0, wv, nwords * B)  # several instructions, one word
        return (words, wv, None) if B == 1 else (words % nwords, wv, words // nwords)

    def _hazard_apply(self, arr, kind, words, wv, blocks, bm):
        """Check and record accesses: one entry per touched (block, word), wv the warp or -2 for several.
        ``blocks=None``: the same entries in every active block (``bm``)."""
        st = arr._st
        if blocks is None and not st.expanded and bm.all():
            W, R, pos = st.W[0], st.R[0], words  # one row stands for every block
        else:
            st.expand()
            if blocks is None:
                act_b = np.flatnonzero(bm)
                blocks = np.repeat(act_b, len(words))
                words, wv = np.tile(words, len(act_b)), np.tile(wv, len(act_b))
            W, R, pos = st.W.reshape(-1), st.R.reshape(-1), blocks * st.nwords + words
        pw = W[pos]
        pr = R[pos]
        if kind == "read":
            bad = (pw != -1) & ((pw != wv) | (wv == -2))
            R[pos] = np.where((wv != -2) & ((pr == -1) | (pr == wv)), wv, np.int8(-2))
        else:
            bad = (wv == -2) | ((pw != -1) & (pw != wv)) | ((pr != -1) & (pr != wv))
            W[pos] = wv
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            b = int(pos[i] // st.nwords) if W.ndim == 1 and pos is not words else 0
            self._hazard_found(arr, kind, b, int(words[i]), int(wv[i]), int(pw[i]), int(pr[i]),
                               int(np.count_nonzero(bad)))

    def _hazard_found(self, arr, kind, b, word, warp, pw, pr, n):
        self._stats.hazards += n
        elem = (word * 4) // arr.itemsize
        idx = np.unravel_index(min(elem, arr.size - 1), arr.shape) if arr.ndim > 1 else (elem,)
        idx_s = str(int(idx[0])) if len(idx) == 1 else str(tuple(int(i) for i in idx))

        def who(w):
            return "several warps" if w == -2 else f"warp {w} (threads {w * WARP}-{w * WARP + WARP - 1})"

        if kind == "read":
            what = f"{who(warp)} reads it after {who(pw)} wrote it"
        else:
            prev = pw if pw != -1 and pw != warp else pr
            verb = "wrote" if prev == pw else "read"
            what = (f"{who(warp)} write it in one instruction" if warp == -2 else
                    f"{who(warp)} writes it after {who(prev)} {verb} it")
        t = max(warp, 0) * WARP
        msg = (f"kernel {self.name!r}: shared-memory hazard on {arr.name!r}[{idx_s}] in {self._where(b, t)}: "
               f"{what}, with no syncthreads() between ({n} word(s) in this instruction)")
        if self._dev.hazards == "error":
            raise SharedMemoryHazard(msg)
        if self._launch.first_hazard is None:
            self._launch.first_hazard = msg

    # -- data movement ------------------------------------------------------------------------
    def _gather(self, arr, g, width, nu):
        """Values at (*U, B, T) indices, as registers (*U, [w], B, T)."""
        if arr.space == "global":
            src = arr._data
            vals = src[g] if width == 1 else src[g[..., None] + np.arange(width)]
        elif g.shape[-2] == 1:  # the same index in every block: one take along the block's storage
            src = arr._st.storage
            gi = g[..., 0, :] if width == 1 else g[..., 0, :, None] + np.arange(width)
            vals = np.moveaxis(np.take(src, gi, axis=1), 0, nu)  # (*U, nb, T[, w])
        else:
            src = arr._st.storage
            bidx = np.arange(self.nb).reshape(self.nb, 1)
            vals = src[bidx, g] if width == 1 else src[bidx[..., None], g[..., None] + np.arange(width)]
        if width > 1:
            vals = np.moveaxis(vals, -1, nu)
        return vals

    def _scatter(self, arr, kind, g, width, bmcol, tm, shape, U, nu, value):
        nb, nt = self.nb, self.nt
        full = U + (nb, nt)
        act = np.broadcast_to(tm, full) & np.broadcast_to(bmcol, full)
        if not act.any():
            return
        vshape = U + ((width,) if width > 1 else ()) + (nb, nt)
        val = np.asarray(value)
        try:
            val = np.broadcast_to(val, vshape)
        except ValueError:
            raise ValueError(
                f"kernel {self.name!r}: value of shape {val.shape} for {arr.name!r} does not broadcast to the "
                f"per-thread shape (*unrolled, [width,] nb, nt) = {vshape}"
            ) from None
        if width > 1:
            val = np.moveaxis(val, nu, -1)
        v = val[act].astype(arr.dtype, copy=False)
        idx = np.broadcast_to(g, full)[act]
        if width > 1:
            idx = (idx[:, None] + np.arange(width)).reshape(-1)
            v = v.reshape(-1)
        if arr.space == "global":
            if kind == "atomic":
                np.add.at(arr._data, idx, v)
            else:
                arr._data[idx] = v
        else:
            b = np.broadcast_to(np.arange(nb).reshape(nb, 1), full)[act]
            if width > 1:
                b = np.repeat(b, width)
            arr._st.storage[b, idx] = v


# ------------------------------------------------------------------------------------------------
# the device
# ------------------------------------------------------------------------------------------------


_MEMO: dict = {}  # costs of recurring shared-memory access patterns (pure function of the key)
_MEMO_MAX = 512


def _memo_put(key, value) -> None:
    if key is None:
        return
    if len(_MEMO) >= _MEMO_MAX:
        _MEMO.clear()
    _MEMO[key] = value


def _collapse(pos: np.ndarray, warp: np.ndarray, size: int):
    """Distinct positions and, for each, the warp that touched it or -2 if several warps did."""
    if size <= (1 << 22):
        tmp = np.full(size, -1, np.int8)
        tmp[pos] = warp
        tmp[pos[(tmp[pos] != warp) | (warp == -2)]] = -2
        words = np.flatnonzero(tmp != -1)
        return words, tmp[words]
    key = np.unique(pos * 64 + (warp.astype(np.int64) & 63))
    p, w = key >> 6, (key & 63).astype(np.int8)
    w[w == 62] = -2  # -2 & 63
    same = p[1:] == p[:-1]
    multi = np.zeros(len(p), bool)
    multi[1:] |= same
    multi[:-1] |= same
    keep = np.ones(len(p), bool)
    keep[1:] = ~same
    return p[keep], np.where(multi, np.int8(-2), w)[keep]


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
                 max_threads_per_chunk: int = 1 << 17):
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
