"""Kernel ② of the standard forward: row softmax with two block tree reductions (lecture §5.2,
lecture 4's reduction "v3", sequential addressing).

One block per row of S; thread t holds the elements t, t + blockDim, t + 2·blockDim, … of its row
in registers (coalesced loads), so S is read once and P written once. The row maximum and the row
sum are each a tree reduction in shared memory:

    for (s = blockDim/2; s > 0; s >>= 1) { if (tid < s) sdata[tid] = op(sdata[tid], sdata[tid+s]); __syncthreads(); }

Fully masked rows (all -inf) give P = 0.
"""

from __future__ import annotations

import numpy as np


def _block_reduce(ctx, sdata, value, op):
    """Reduce ``value`` (one number per thread, (nb, nt)) over the block; every thread gets the result."""
    tid = ctx.threadIdx.x
    sdata.store(tid, value)
    ctx.syncthreads()
    s = ctx.blockDim.x // 2
    while s > 0:
        with ctx.masked(tid < s):
            sdata.store(tid, op(sdata.load(tid), sdata.load(tid + s)))
        ctx.syncthreads()
        s >>= 1
    result = sdata.load(0)  # every thread reads sdata[0]: one broadcast word per warp
    ctx.syncthreads()  # sdata is reused by the next reduction
    return result


def row_softmax(ctx, S, P, Nc):
    """Launched with one block per row of S (rows, Nc) and a power-of-two block: P = softmax(S) by rows."""
    tid = ctx.threadIdx.x  # (1, nt)
    row = ctx.blockIdx.x  # (nb, 1): one block per row
    nt = ctx.blockDim.x  # a power of two
    sdata = ctx.shared("sdata", nt)
    it = ctx.unroll(-(-Nc // nt))  # (n_it, 1, 1)
    col = it * nt + tid  # (n_it, 1, nt): consecutive threads, consecutive columns
    ok = col < Nc
    x = np.where(ok, S.load((row, col), mask=ok), np.float32(-np.inf))  # (n_it, nb, nt)
    # -- reduction 1: the row maximum
    m = _block_reduce(ctx, sdata, x.max(axis=0), np.maximum)  # (nb, nt)
    m_safe = np.where(m == -np.inf, np.float32(0), m)
    e = np.exp(x - m_safe)  # exp(-inf) = 0 for masked and padding entries
    # -- reduction 2: the row sum
    l = _block_reduce(ctx, sdata, e.sum(axis=0, dtype=np.float32), np.add)
    p = e / np.where(l == 0, np.float32(1), l)
    P.store((row, col), p, mask=ok)
