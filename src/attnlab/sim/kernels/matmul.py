"""Kernels ① and ③ of the standard forward: the 16×16 shared-memory tiled matmul (lecture §5.2,
lecture 4's tiled GEMM).

One block of TILE×TILE threads computes one TILE×TILE tile of C. ``threadIdx.x`` runs along the
output's columns, so the loads of A and B and the store of C are coalesced; the shared tiles are
padded to TILE+1 columns, so reading a column of a tile (``Bs[tx][k]``, Bᵀ case) hits 16 different
banks instead of one.

    C = alpha · A · op(B),  A (M, K), B (Nc, K) when ``trans_b`` (S = QKᵀ/√d) else (K, Nc) (O = PV)

With ``causal_offset`` set, C[r, c] = -inf where c > r + causal_offset (bottom-right causal mask on
the scores, applied in the epilogue).
"""

from __future__ import annotations

import numpy as np


def matmul_tiled(ctx, A, B, C, M, K, Nc, alpha, trans_b, causal_offset):
    """Launched with grid (ceil(Nc/TILE), ceil(M/TILE)) and block (TILE, TILE): C (M, Nc) = alpha·A·op(B)."""
    TILE = ctx.blockDim.x  # blockDim = (TILE, TILE)
    tx, ty = ctx.threadIdx.x, ctx.threadIdx.y  # (1, TILE²)
    row = ctx.blockIdx.y * TILE + ty  # (nb, TILE²) output row of this thread
    col = ctx.blockIdx.x * TILE + tx  # (nb, TILE²) output column (consecutive along a warp)
    As = ctx.shared("As", (TILE, TILE + 1))  # +1: padding against bank conflicts
    Bs = ctx.shared("Bs", (TILE, TILE + 1))
    acc = np.zeros(np.broadcast_shapes(row.shape, col.shape), np.float32)
    kk = ctx.unroll(TILE)  # (TILE, 1, 1): the inner loop over k, unrolled
    for k0 in range(0, K, TILE):
        # -- load one tile of A and one of B; out-of-range elements become 0
        a_ok = (row < M) & (k0 + tx < K)
        As.store((ty, tx), np.where(a_ok, A.load((row, k0 + tx), mask=a_ok), np.float32(0)))
        if trans_b:  # Bs[ty][tx] = B[col0 + ty][k0 + tx]   (coalesced along k)
            brow = ctx.blockIdx.x * TILE + ty
            b_ok = (brow < Nc) & (k0 + tx < K)
            Bs.store((ty, tx), np.where(b_ok, B.load((brow, k0 + tx), mask=b_ok), np.float32(0)))
        else:  # Bs[ty][tx] = B[k0 + ty][col]   (coalesced along the columns)
            b_ok = (k0 + ty < K) & (col < Nc)
            Bs.store((ty, tx), np.where(b_ok, B.load((k0 + ty, col), mask=b_ok), np.float32(0)))
        ctx.syncthreads()
        # -- for k in 0..TILE-1: acc += As[ty][k] * Bs[tx][k]  (or Bs[k][tx])
        a = As.load((ty, kk))  # (TILE, nb, nt): row ty of the A tile (two words per warp: broadcast)
        b = Bs.load((tx, kk)) if trans_b else Bs.load((kk, tx))
        for k in range(TILE):
            acc = acc + a[k] * b[k]
        ctx.syncthreads()
    out = acc * alpha
    if causal_offset is not None:
        out = np.where(col > row + causal_offset, np.float32(-np.inf), out)
    C.store((row, col), out, mask=(row < M) & (col < Nc))
