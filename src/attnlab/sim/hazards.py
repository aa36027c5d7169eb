"""Shared-memory hazard detection: a missing ``syncthreads`` must not go unnoticed (lecture §3.3, §5.2).

A hazard is two different warps of one block touching the same 4-byte shared word between the same
pair of barriers, at least one of them writing. Each shared buffer keeps, per block and word, who
wrote (W) and who read (R) since the last barrier: -1 nobody, w >= 0 warp w alone, -2 several warps
(``arrays._SharedState``). An access is first reduced to one entry per touched word — the warp that
touched it, or -2 when several warps of the block did in the same instruction — then checked and
recorded. Reported as a warning per launch (default), or raised as ``SharedMemoryHazard``.
"""

from __future__ import annotations

import numpy as np

from .accounting import WARP
from .errors import SharedMemoryHazard


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


def entries_lanes(arr, idx3, act3, B, lane_bytes):
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


def entries_uniform(arr, flatU, actw, bm, B, Up, lane_bytes):
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


def apply(ctx, arr, kind, words, wv, blocks, bm):
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
        _found(ctx, arr, kind, b, int(words[i]), int(wv[i]), int(pw[i]), int(pr[i]), int(np.count_nonzero(bad)))


def _found(ctx, arr, kind, b, word, warp, pw, pr, n):
    ctx._stats.hazards += n
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
    msg = (f"kernel {ctx.name!r}: shared-memory hazard on {arr.name!r}[{idx_s}] in {ctx._where(b, t)}: "
           f"{what}, with no syncthreads() between ({n} word(s) in this instruction)")
    if ctx._dev.hazards == "error":
        raise SharedMemoryHazard(msg)
    if ctx._launch.first_hazard is None:
        ctx._launch.first_hazard = msg
