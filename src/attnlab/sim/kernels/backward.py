"""The FlashAttention backward as one CUDA-style kernel for the simulator (lecture §7.2–7.4).

K/V blocks outer (FA2's backward order): one block per K/V block of Bc keys, one thread per key row,
which keeps k_j, v_j and the accumulators dk_j, dv_j in registers. For every Q block i it visits
(all of them, or those not above the diagonal when causal):

1. cooperative, coalesced loads of Q_i, dO_i, O_i (padded to D+1 columns) and L_i into shared memory;
   D_r = dO_r · O_r for the block's rows (§7.3, computed on chip as FlashAttention's Algorithm 4 does);
2. each thread recomputes its key's column of P from L (§7.2): p_r = exp(s_r − L_r) — no online
   softmax, L already holds the row's normalisation; then dv += p_r·dO_r, dp_r = dO_r·v,
   ds_r = p_r (dp_r − D_r), dk += scale · ds_r·q_r (broadcast reads of the Q_i, dO_i rows);
3. dS_ij goes to shared memory; each thread then forms whole rows of dQ_i's share,
   scale · Σ_c dS[r][c]·K_j[c], stages them in shared memory, and the block adds them into dQ with
   coalesced ``atomicAdd``s: dQ_i is shared by all K/V blocks, which run in different blocks (§7.4).

Finally dK_j, dV_j are written once, transposed through shared memory for coalesced stores. Registers
keep the thread axes last: k, v, dk, dv (D, nb, Bc); per-row values (Br, nb, Bc).
"""

from __future__ import annotations

import numpy as np

from .flash import _load_tile, _store_tile


def flash_bwd(ctx, Q, K, V, O, dO, L, dQ, dK, dV, Nq, Nk, D, BR, BC, scale, causal):
    """Launched with grid ceil(Nk/BC) and block BC: reads Q, O, dO (Nq, D), K, V (Nk, D), L (Nq,);
    adds into dQ (Nq, D, zeroed by the caller) atomically; writes dK, dV (Nk, D)."""
    tid = ctx.threadIdx.x  # (1, BC): thread t owns key row kb·BC + t
    kb = ctx.blockIdx.x  # (nb, 1)
    key0 = kb * BC
    key = key0 + tid  # (nb, BC)
    off = Nk - Nq  # bottom-right causal alignment: query r sees keys <= r + off
    Ks = ctx.shared("Ks", (BC, D + 1))  # padded: thread t reading row t is conflict-free
    Vs = ctx.shared("Vs", (BC, D + 1))
    Qs = ctx.shared("Qs", (BR, D + 1))
    dOs = ctx.shared("dOs", (BR, D + 1))
    Os = ctx.shared("Os", (BR, D + 1))
    Ls = ctx.shared("Ls", BR)
    Ds = ctx.shared("Ds", BR)
    dSs = ctx.shared("dSs", (BR, BC + 1))
    dQs = Os.view("dQs")  # once D_i is known, O_i's buffer stages dQ_i
    dd = ctx.unroll(D)  # (D, 1, 1)
    rr, dr = ctx.unroll(BR, D)  # (BR, 1, 1, 1), (1, D, 1, 1): every row of a Q block, every column
    rows_m = ctx.unroll(-(-BR // BC)) * BC + tid  # (M, 1, BC): the Q rows thread t handles itself
    rows_md = rows_m[:, None]  # (M, 1, 1, BC): the same, against a column axis
    mine = rows_m < BR

    # K_j, V_j -> shared (coalesced) -> each thread's row into registers
    _load_tile(ctx, K, Ks, key0, BC, D, Nk - key0)
    _load_tile(ctx, V, Vs, key0, BC, D, Nk - key0)
    ctx.syncthreads()
    k = Ks.load((tid, dd))  # (D, nb, BC)
    v = Vs.load((tid, dd))
    dk = np.zeros(k.shape, np.float32)
    dv = np.zeros(v.shape, np.float32)

    for i in range(-(-Nq // BR)):
        row0 = i * BR
        # a Q block entirely above this K/V block's first key sees none of it: skipped whole (§6.2)
        need = (key0 <= row0 + BR - 1 + off) if causal else np.True_
        with ctx.masked(need):
            # 1. Q_i, dO_i, O_i, L_i -> shared; rows past the end: zeros, L = +inf (so P = 0 there)
            _load_tile(ctx, Q, Qs, row0, BR, D, Nq - row0)
            _load_tile(ctx, dO, dOs, row0, BR, D, Nq - row0)
            _load_tile(ctx, O, Os, row0, BR, D, Nq - row0)
            ok = mine & (row0 + rows_m < Nq)
            Ls.store(rows_m, np.where(ok, L.load(row0 + rows_m, mask=ok), np.float32(np.inf)), mask=mine)
            ctx.syncthreads()
            # -- D_r = dO_r · O_r for the rows this thread handles
            d_rows = (dOs.load((rows_md, dd), mask=mine[:, None]) * Os.load((rows_md, dd), mask=mine[:, None])).sum(
                axis=1, dtype=np.float32)
            Ds.store(rows_m, d_rows, mask=mine)
            ctx.syncthreads()
            # 2. recompute this key's column of P from L; dV, dP, dS, dK (broadcast reads of the rows)
            q_all = Qs.load((rr, dr))[..., 0]  # (BR, D, nb): row r of Q_i, the same for every thread
            s = np.einsum("rdb,dbt->rbt", q_all, k) * scale  # (BR, nb, BC)
            row = row0 + ctx.unroll(BR)  # (BR, 1, 1)
            lr = Ls.load(ctx.unroll(BR))  # (BR, nb, 1)
            visible = (row < Nq) & (key < Nk) & np.isfinite(lr)  # rows that see no key have L = -inf
            if causal:
                visible = visible & (key <= row + off)
            p = np.where(visible, np.exp(s - np.where(visible, lr, np.float32(0))), np.float32(0))
            do_all = dOs.load((rr, dr))[..., 0]  # (BR, D, nb)
            dv = ctx.select(dv + np.einsum("rbt,rdb->dbt", p, do_all), dv)
            dp = np.einsum("rdb,dbt->rbt", do_all, v)
            ds = p * (dp - Ds.load(ctx.unroll(BR)))  # dS = P ∘ (dP − D)
            dk = ctx.select(dk + np.einsum("rbt,rdb->dbt", ds, q_all) * scale, dk)
            # 3. dQ_i += scale · dS_ij K_j: rows staged in shared memory, then coalesced atomic adds
            dSs.store((ctx.unroll(BR), tid), ds)
            ctx.syncthreads()
            ds_rows = dSs.load((rows_md, ctx.unroll(BC)), mask=mine[:, None])  # (M, BC, nb, BC): dS[r][c]
            k_all = Ks.load(ctx.unroll(BC, D))[..., 0]  # (BC, D, nb): K_j[c], broadcast
            dq = np.einsum("mcbt,cdb->mdbt", ds_rows, k_all) * scale  # (M, D, nb, BC)
            dQs.store((rows_md, dd), dq, mask=mine[:, None])
            ctx.syncthreads()
            it = ctx.unroll(-(-BR * D // BC))
            f = it * BC + tid
            r, c = f // D, f % D
            ok = (f < BR * D) & (row0 + r < Nq)
            dQ.atomic_add((row0 + r, c), dQs.load((r, c), mask=ok), mask=ok)
            ctx.syncthreads()

    # dK_j, dV_j: written once, through shared memory (coalesced)
    dKs, dVs = Ks.view("dKs"), Vs.view("dVs")
    dKs.store((tid, dd), dk)
    dVs.store((tid, dd), dv)
    ctx.syncthreads()
    _store_tile(ctx, dKs, dK, key0, BC, D, Nk - key0)
    _store_tile(ctx, dVs, dV, key0, BC, D, Nk - key0)

