"""The execution context of a kernel: what ``kernel(ctx, *args)`` sees (lecture §3.3, §5.2).

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
from contextlib import contextmanager

import numpy as np

from . import accounting as acc
from . import hazards
from .accounting import WARP
from .arrays import SharedArray, _SharedState
from .errors import DivergentBarrierError, LaunchError, MisalignedAccessError, OutOfBoundsError

SHARED_ALIGN = 128  # bytes: each shared array starts on a 128-byte line (bank 0)


def shared_bytes(*nbytes: int) -> int:
    """Bytes per block that shared arrays of these sizes (in declaration order) take, laid out as
    ``Context.shared`` lays them out: each one starting on a ``SHARED_ALIGN``-byte line."""
    total = 0
    for n in nbytes:
        total = -(-total // SHARED_ALIGN) * SHARED_ALIGN + int(n)
    return total


class Dim3:
    """``x``, ``y``, ``z`` of blockIdx / threadIdx (arrays) or blockDim / gridDim (ints)."""

    __slots__ = ("x", "y", "z")

    def __init__(self, x, y=1, z=1):
        self.x, self.y, self.z = x, y, z

    def __iter__(self):
        return iter((self.x, self.y, self.z))

    def __repr__(self):
        return f"Dim3(x={self.x!r}, y={self.y!r}, z={self.z!r})"


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
        base = -(-self._shared_bytes // SHARED_ALIGN) * SHARED_ALIGN
        self._shared_bytes = shared_bytes(self._shared_bytes, nbytes)
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
                    entries = acc.MEMO.get(key) if key else None
                    if entries is None:
                        entries = hazards.entries_uniform(arr, flatU, actw, bm, B, Up, lane_bytes)
                        acc.memo_put(key, entries)
                    hazards.apply(self, arr, kind, *entries, bm)
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
            hit = acc.MEMO.get(key) if key else None
            if hit is None:
                k = max(1, lane_bytes // 4)
                word0 = (arr.base + idx3 * arr.itemsize) >> 2
                lanes = int(np.count_nonzero(act3))
                instr, wf, ideal = acc.wavefronts(word0.reshape(G, WARP), act3.reshape(G, WARP), k, k)
                entries = hazards.entries_lanes(arr, idx3, act3, B, lane_bytes) if track else None
                hit = (lanes, instr, wf, ideal, entries)
                acc.memo_put(key, hit)
            lanes, instr, wf, ideal, entries = hit
            c["instructions"] += instr * mult
            c["wavefronts"] += wf * mult
            c["ideal_wavefronts"] += ideal * mult
            if track:
                hazards.apply(self, arr, kind, *entries, bm)
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
