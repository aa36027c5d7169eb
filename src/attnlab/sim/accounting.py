"""Vectorised accounting of warp-level memory instructions (lecture §3.3, §5.2–5.3).

All functions take lanes grouped by warp: integer arrays of shape ``(G, 32)`` (one row per warp
instruction, G = unrolled instructions × blocks × warps) and a mask of active lanes of the same
shape. Nothing here loops over threads in Python.

* Global memory: one aligned access of 1, 2 or 4 elements (at most 32 bytes) lies in one 32-byte
  sector; a warp instruction costs one sector per *distinct* sector its active lanes touch.
* Shared memory: 32 banks of 4 bytes. An instruction whose lanes access ``s`` bytes each is served
  in phases of ``128 / s`` lanes (one phase for 4-byte accesses, half-warps for 8-byte, quarter-warps
  for 16-byte). A phase costs as many wavefronts as the largest number of *distinct* words it needs
  from one bank; words already fetched by an earlier phase of the same instruction cost nothing
  (a word read by many lanes is broadcast, also across phases). So 32 lanes reading one word: 1;
  a float4 read of 32 consecutive float4s: 4; a column of a 32×32 float array: 32.
* L2: fully associative LRU over 32-byte sectors (exact, sequential; used only when asked for).
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

WARP = 32
_SENT = np.iinfo(np.int64).max
MEMO: dict = {}  # costs of recurring shared-memory access patterns (a pure function of the key)
_MEMO_MAX = 512


def memo_put(key, value) -> None:
    """Remember ``value`` under ``key`` (None: do nothing); the cache is emptied when full."""
    if key is None:
        return
    if len(MEMO) >= _MEMO_MAX:
        MEMO.clear()
    MEMO[key] = value


def sectors(sec: np.ndarray, act: np.ndarray, want_order: bool = False):
    """Warp instructions and 32-byte sectors of global accesses.

    sec: (G, 32) sector id of each lane's access; act: (G, 32) active lanes.
    Returns (instructions, sectors, ordered) where ordered (with want_order) is the flat array of
    each instruction's distinct sectors, instruction after instruction.
    """
    s = np.where(act, sec, -1)
    s.sort(axis=1)
    valid = s >= 0
    first = valid.copy()
    first[:, 1:] &= s[:, 1:] != s[:, :-1]
    instr = int(np.count_nonzero(valid[:, -1]))
    n = int(np.count_nonzero(first))
    return instr, n, (s[first] if want_order else None)


def wavefronts(word0: np.ndarray, act: np.ndarray, words_per_lane: int, phases: int):
    """Warp instructions, wavefronts and ideal wavefronts of shared-memory accesses.

    word0: (G, 32) first 4-byte word of each lane's access (bank = word % 32); each lane touches
    ``words_per_lane`` consecutive words; lanes are served in ``phases`` phases of 32/phases lanes.
    """
    G = word0.shape[0]
    k = words_per_lane
    if k == 1:
        words, a = word0, act
    else:
        words = (word0[:, :, None] + np.arange(k, dtype=np.int64)).reshape(G, 32 * k)
        a = np.repeat(act, k, axis=1)
    if phases == 1:
        key = np.where(a, words, _SENT)
    else:
        phase = (np.arange(32 * k, dtype=np.int64) // k) // (32 // phases)
        key = np.where(a, words * 8 + phase, _SENT)
    key.sort(axis=1)
    valid = key != _SENT
    wd = key >> 3 if phases > 1 else key
    first = valid.copy()
    first[:, 1:] &= wd[:, 1:] != wd[:, :-1]
    instr = int(np.count_nonzero(valid[:, 0]))
    if instr == 0:
        return 0, 0, 0
    g = np.arange(G, dtype=np.int64)[:, None]
    slot = (g * phases + (key & 7 if phases > 1 else 0)) * 32 + (wd & 31)
    cnt = np.bincount(slot[first], minlength=G * phases * 32).reshape(G, phases, 32)
    wf = int(cnt.max(axis=2).sum())
    distinct = np.count_nonzero(first, axis=1)
    ideal = int(((distinct + 31) // 32).sum())
    return instr, wf, ideal


class TouchMap:
    """Which elements of one array an instruction stream has touched: the ideal cache's contents."""

    __slots__ = ("touched", "count")

    def __init__(self, size: int):
        self.touched = np.zeros(size, bool)
        self.count = 0

    def add(self, elems: np.ndarray) -> int:
        """Mark ``elems`` (flat element ids, repeats allowed); return how many were new."""
        if elems.size == 0:
            return 0
        new = elems[~self.touched[elems]]
        if new.size == 0:
            return 0
        self.touched[new] = True
        before, self.count = self.count, int(np.count_nonzero(self.touched))
        return self.count - before


class LRUCache:
    """A fully associative LRU cache of 32-byte sectors (the optional L2 model).

    Reads and atomics that miss cost one sector from HBM; writes allocate (write-through: a write's
    sectors always count as HBM writes). Exact but sequential, so it is only run when asked for.
    """

    def __init__(self, capacity_bytes: int):
        if capacity_bytes < 32:
            raise ValueError(f"l2_bytes must be at least one 32-byte sector, got {capacity_bytes}")
        self.capacity = int(capacity_bytes) // 32
        self._lines: OrderedDict = OrderedDict()

    def access(self, sector_ids) -> int:
        """Touch the sectors in order; return the number of hits."""
        lines, cap, hits = self._lines, self.capacity, 0
        for s in sector_ids.tolist():
            if s in lines:
                lines.move_to_end(s)
                hits += 1
            else:
                lines[s] = None
                if len(lines) > cap:
                    lines.popitem(last=False)
        return hits

    def flush(self) -> None:
        self._lines.clear()
