"""The FlashAttention forward as one CUDA-style kernel for the simulator (lecture §5.1–5.2, §6.2–6.4).

FA2 loop order (``flash_fwd``): one block per Q block of Br rows, one thread per query row
(split-Q in its extreme form, §6.4). Per block:

1. cooperative, coalesced load of Q_i into shared memory (padded to D+1 columns), then every thread
   copies its own row into registers;
2. for each K/V block j (skipped whole when causal and the block lies above the diagonal, §6.2):
   cooperative float4 loads of K_j and V_j → syncthreads → each thread computes its row's Bc scores
   (all threads read the same K_j[c]: a broadcast) → online softmax update in registers → acc +=
   P̃·V_j (broadcast reads of V_j[c]) → syncthreads;
3. O_i = acc / ℓ is written through shared memory (transposed, so the global stores are coalesced),
   and L_i = m + log ℓ per row.

FA1 loop order (``flash_fwd_fa1``, §6.3): K/V blocks outer, Q blocks inner, one block per head;
O_i, ℓ_i, m_i live in HBM and are read, updated and written back for every K/V block.

Registers are per-thread numpy arrays with the thread axes last: q, acc (D, nb, Br); m, ℓ (nb, Br);
scores s (Bc, nb, Br). Causal masks are bottom-right aligned (query r sees keys c <= r + Nk - Nq).
"""

from __future__ import annotations

import numpy as np

from ..context import shared_bytes

NEG_INF = np.float32(-np.inf)
FLOAT_BYTES = 4  # the kernels compute in float32


def flash_fwd_shared_bytes(*, head_dim: int, block_q: int, block_k: int, order: str = "fa2") -> int:
    """Shared memory per block of ``flash_fwd`` (Qs (Br, D+1), Ks and Vs (Bc, D), float32) or, with
    ``order="fa1"``, of ``flash_fwd_fa1`` (Qs, Os (Br, D+1), Ks, Vs (Bc, D)): the arrays the kernels
    declare, laid out as the simulator lays them out. Lets a caller refuse a (head_dim, block) that no
    block could hold before running anything."""
    D, BR, BC = int(head_dim), int(block_q), int(block_k)
    padded_q = BR * (D + 1) * FLOAT_BYTES
    kv = BC * D * FLOAT_BYTES
    if order == "fa1":
        return shared_bytes(padded_q, padded_q, kv, kv)
    return shared_bytes(padded_q, kv, kv)


def _vec_width(D: int) -> int:
    """Widest vector load (float4, float2, float) that divides a row of D elements."""
    return 4 if D % 4 == 0 else 2 if D % 2 == 0 else 1


def _load_tile(ctx, src, dst, row0, nrows, D, nvalid):
    """Cooperative load of rows row0 .. row0+nrows-1 of ``src`` (N, D) into ``dst`` (nrows, D[+pad]),
    with the widest aligned vector loads; consecutive threads take consecutive vectors (coalesced).
    Only the first ``nvalid`` rows exist in ``src``; the others are set to 0."""
    W = _vec_width(D) if dst.shape[1] % _vec_width(D) == 0 else 1
    nthr, tid = ctx.blockDim.x, ctx.threadIdx.x
    per_row = D // W
    it = ctx.unroll(-(-nrows * per_row // nthr))  # (n_it, 1, 1)
    f = it * nthr + tid  # (n_it, 1, nthr): vector number within the tile
    r, c = f // per_row, (f % per_row) * W
    in_tile = f < nrows * per_row
    ok = in_tile & (r < nvalid)  # nvalid: rows that exist (the last block may be partial)
    # rows past the end are filled with 0: garbage there would turn 0·x into NaN in P̃·V
    vals = src.load((row0 + r, c), width=W, mask=ok)  # (n_it, [W,] nb|1, nthr)
    vals = np.where(ok if W == 1 else np.expand_dims(ok, -3), vals, np.float32(0))
    dst.store((r, c), vals, width=W, mask=in_tile)


def _store_tile(ctx, src, dst, row0, nrows, D, nvalid):
    """Cooperative, coalesced store of shared ``src`` (nrows, D[+pad]) to rows row0.. of ``dst``."""
    nthr, tid = ctx.blockDim.x, ctx.threadIdx.x
    it = ctx.unroll(-(-nrows * D // nthr))
    f = it * nthr + tid
    r, c = f // D, f % D
    ok = (f < nrows * D) & (r < nvalid)
    dst.store((row0 + r, c), src.load((r, c), mask=ok), mask=ok)


def _scores(q, kt):
    """s[c] = Σ_d q[d]·K_j[c][d] for every thread's own row: q (D, nb, Br), kt (Bc, D, nb, 1) -> (Bc, nb, Br).

    (einsum, not matmul: numpy's BLAS would spin up threads for these small products.)"""
    return np.einsum("cdb,dbt->cbt", kt[..., 0], q)


def _pv(p, vt):
    """Σ_c p[c]·V_j[c][d]: p (Bc, nb, Br), vt (Bc, D, nb, 1) -> (D, nb, Br)."""
    return np.einsum("cbt,cdb->dbt", p, vt[..., 0])


def _read_rows_broadcast(ctx, tile, BC, D):
    """All threads read K_j[c][0..D-1] for c = 0..BC-1 (the same address in every lane: broadcast),
    with float4 loads: an unrolled BC × D/4 loop. Returns (BC, D, nb, 1)."""
    W = _vec_width(D)
    cc, kv = ctx.unroll(BC, D // W)
    vals = tile.load((cc, kv * W), width=W)  # (BC, D/W, [W,] nb, 1)
    return vals.reshape((BC, D) + vals.shape[-2:])


def flash_fwd(ctx, Q, K, V, O, L, Nq, Nk, D, BR, BC, scale, causal):
    """FA2 order, launched with grid ceil(Nq/BR) and block BR: Q (Nq, D), K, V (Nk, D) in; O (Nq, D)
    and L (Nq,) = logsumexp of each row out; ``scale`` the softmax scale, ``causal`` bottom-right."""
    tid = ctx.threadIdx.x  # (1, BR): thread t owns query row qb·BR + t
    qb = ctx.blockIdx.x  # (nb, 1)
    row0 = qb * BR
    row = row0 + tid  # (nb, BR)
    off = Nk - Nq  # bottom-right causal alignment
    Qs = ctx.shared("Qs", (BR, D + 1))  # padded: thread t reading row t is conflict-free
    Ks = ctx.shared("Ks", (BC, D))
    Vs = ctx.shared("Vs", (BC, D))

    # 1. Q_i -> shared (coalesced) -> each thread's row into registers
    _load_tile(ctx, Q, Qs, row0, BR, D, Nq - row0)
    ctx.syncthreads()
    q = Qs.load((tid, ctx.unroll(D)))  # (D, nb, BR)
    m = np.full(row.shape, NEG_INF)
    l = np.zeros(row.shape, np.float32)
    acc = np.zeros((D,) + row.shape, np.float32)

    for j in range(-(-Nk // BC)):
        # §6.2: a K/V block whose first key comes after the Q block's last query is skipped whole
        need = (j * BC <= row0 + BR - 1 + off) if causal else np.True_
        with ctx.masked(need):
            # 2. K_j, V_j -> shared, float4 loads
            _load_tile(ctx, K, Ks, j * BC, BC, D, Nk - j * BC)
            _load_tile(ctx, V, Vs, j * BC, BC, D, Nk - j * BC)
            ctx.syncthreads()
            # -- scores of this thread's row against the BC keys (broadcast reads of K_j[c])
            s = _scores(q, _read_rows_broadcast(ctx, Ks, BC, D)) * scale  # (BC, nb, BR)
            key = j * BC + ctx.unroll(BC)  # (BC, 1, 1)
            visible = key < Nk
            if causal:
                visible = visible & (key <= row + off)
            s = np.where(visible, s, NEG_INF)
            # -- update m_i and l_i
            m_new = np.maximum(m, s.max(axis=0))
            m_safe = np.where(m_new == NEG_INF, np.float32(0), m_new)  # rows with nothing visible yet
            p = np.exp(s - m_safe)  # P̃, unnormalised
            alpha = np.exp(m - m_safe)
            l_new = l * alpha + p.sum(axis=0, dtype=np.float32)
            # -- acc = acc·alpha + P̃ V_j (broadcast reads of V_j[c])
            acc_new = acc * alpha + _pv(p, _read_rows_broadcast(ctx, Vs, BC, D))
            m, l, acc = ctx.select(m_new, m), ctx.select(l_new, l), ctx.select(acc_new, acc)
            ctx.syncthreads()

    # 3. O_i = acc / l through shared memory (transposed) for coalesced stores; L_i = m + log l
    empty = l == 0  # fully masked rows: O = 0, L = -inf
    out = acc / np.where(empty, np.float32(1), l)
    Os = Qs.view("Os")  # Q_i is in registers: its shared buffer is reused
    Os.store((tid, ctx.unroll(D)), out)
    ctx.syncthreads()
    _store_tile(ctx, Os, O, row0, BR, D, Nq - row0)
    L.store(row, np.where(empty, NEG_INF, m + np.log(np.where(empty, np.float32(1), l))), mask=row < Nq)


def flash_fwd_fa1(ctx, Q, K, V, O, l_hbm, m_hbm, Nq, Nk, D, BR, BC, scale, causal):
    """FA1 order: for each K/V block j (outer), for each Q block i (inner): read Q_i, O_i, ℓ_i, m_i,
    update, write O_i, ℓ_i, m_i back. One block per head; thread t owns row i·BR + t of Q block i."""
    tid = ctx.threadIdx.x  # (1, BR)
    off = Nk - Nq
    Qs = ctx.shared("Qs", (BR, D + 1))
    Os = ctx.shared("Os", (BR, D + 1))
    Ks = ctx.shared("Ks", (BC, D))
    Vs = ctx.shared("Vs", (BC, D))
    dk = ctx.unroll(D)
    for j in range(-(-Nk // BC)):
        _load_tile(ctx, K, Ks, j * BC, BC, D, Nk - j * BC)
        _load_tile(ctx, V, Vs, j * BC, BC, D, Nk - j * BC)
        ctx.syncthreads()
        for i in range(-(-Nq // BR)):
            row0 = i * BR
            if causal and j * BC > row0 + BR - 1 + off:  # the whole (i, j) pair is masked: skip it
                continue
            row = row0 + tid  # (1, BR)
            ok = row < Nq
            # -- read Q_i, O_i (through shared memory, coalesced) and ℓ_i, m_i
            _load_tile(ctx, Q, Qs, row0, BR, D, Nq - row0)
            _load_tile(ctx, O, Os, row0, BR, D, Nq - row0)
            l_i = l_hbm.load(row, mask=ok)
            m_i = m_hbm.load(row, mask=ok)
            ctx.syncthreads()
            q = Qs.load((tid, dk))  # (D, nb, BR)
            o = Os.load((tid, dk))
            s = _scores(q, _read_rows_broadcast(ctx, Ks, BC, D)) * scale
            key = j * BC + ctx.unroll(BC)
            visible = key < Nk
            if causal:
                visible = visible & (key <= row + off)
            s = np.where(visible, s, NEG_INF)
            # -- m̃ = rowmax, P̃ = exp(s - m̃), ℓ̃ = rowsum
            m_t = s.max(axis=0)
            p = np.exp(s - np.where(m_t == NEG_INF, np.float32(0), m_t))
            l_t = p.sum(axis=0, dtype=np.float32)
            # -- m_new = max(m_i, m̃); ℓ_new = e^(m_i - m_new) ℓ_i + e^(m̃ - m_new) ℓ̃
            m_new = np.maximum(m_i, m_t)
            m_safe = np.where(m_new == NEG_INF, np.float32(0), m_new)
            a_old, a_new = np.exp(m_i - m_safe), np.exp(m_t - m_safe)
            l_new = a_old * l_i + a_new * l_t
            # -- O_i = (ℓ_i e^(m_i - m_new) O_i + e^(m̃ - m_new) P̃ V_j) / ℓ_new
            pv = _pv(p, _read_rows_broadcast(ctx, Vs, BC, D))
            o_new = (l_i * a_old * o + a_new * pv) / np.where(l_new == 0, np.float32(1), l_new)
            # -- write O_i (through shared memory: each thread its own row), ℓ_i, m_i back to HBM
            Os.store((tid, dk), o_new)
            ctx.syncthreads()
            _store_tile(ctx, Os, O, row0, BR, D, Nq - row0)
            l_hbm.store(row, l_new, mask=ok)
            m_hbm.store(row, m_new, mask=ok)
            ctx.syncthreads()
        ctx.syncthreads()  # K_j, V_j are overwritten by the next K/V block
