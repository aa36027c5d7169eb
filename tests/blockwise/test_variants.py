"""The variants in attnlab.blockwise — sliding windows, causal, softcap, ALiBi — in the forward (FA2 and FA1
order), the backward, autograd and Flash-Decoding, against the float64 oracle attention_ref; and the
block skipping of a window in the I/O counts, against block pairs read off the visibility grid by
brute force."""

import math

import pytest
import torch
from tests.blockwise.pairs import blocks, expected_forward, mask_grid, pair_table
from tests.helpers import F64, assert_lse, block_table, qkv, scatter

from attnlab import AttnDims
from attnlab.blockwise import (
    IOStats,
    flash_attention_blockwise,
    flash_backward,
    flash_decode_blockwise,
    flash_forward,
    flash_forward_fa1,
)
from attnlab.blockwise.backward import attention_fn
from attnlab.blockwise.programs import programs_per_step
from attnlab.reference import attention_ref
from attnlab.variants import Mask

# (causal, window): dense, causal, windows smaller than a block, larger than N, one-sided, two-sided,
# left = 0 with right > 0, the diagonal alone
MASKS = [(False, None), (True, None), (True, (5, 0)), (True, (3, -1)), (False, (2, 3)), (False, (0, 4)),
         (False, (-1, 2)), (False, (7, -1)), (False, (500, 500)), (False, (0, 0))]
MODS = [{}, {"softcap": 1.5}, {"alibi": "H"}, {"alibi": "BH", "softcap": 3.0}]
# (B, H, Hkv, Nq, Nk, D): Nq < Nk with GQA, Nq > Nk with MQA (rows that see no key), one query
SHAPES = [(2, 4, 2, 37, 53, 16), (1, 3, 1, 53, 37, 9), (1, 2, 2, 1, 40, 8)]


def mask_id(m):
    return f"causal{int(m[0])}-w{m[1]}"


def kwargs(mask, mods, B, H, generator=None):
    causal, window = mask
    kw = {"causal": causal, "window": window, "softcap": mods.get("softcap")}
    alibi = mods.get("alibi")
    if alibi is not None:
        kw["alibi_slopes"] = torch.rand(*((H,) if alibi == "H" else (B, H)), generator=generator) * 0.5
    return kw


def grads(fn, q, k, v, dout, dlse):
    """out, lse and the gradients of sum(out·dout) + sum(lse·dlse) (rows with lse = -inf left out)."""
    q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
    o, l = fn(q, k, v)
    loss = (o * dout).sum() + (torch.where(torch.isfinite(l), l, 0) * dlse).sum()
    return (o, l, *torch.autograd.grad(loss, (q, k, v)))


@pytest.mark.parametrize("mods", MODS, ids=lambda m: "-".join(f"{k}{v}" for k, v in m.items()) or "plain")
@pytest.mark.parametrize("mask", MASKS, ids=mask_id)
def test_forward_matches_reference(mask, mods):
    for shape in SHAPES:
        B, H, Hkv, Nq, Nk, D = shape
        q, k, v = qkv(*shape, Dv=D + 3, scale=3.0)  # scores of a few units: the softcap bites
        kw = kwargs(mask, mods, B, H)
        want_o, want_l = attention_ref(q, k, v, **kw)
        for fwd in (flash_forward, flash_forward_fa1):
            for bq, bk in ((8, 16), (16, 8)):
                o, l = fwd(q, k, v, block_q=bq, block_k=bk, **kw)
                assert o.shape == want_o.shape and o.dtype == F64 and not o.isnan().any()
                torch.testing.assert_close(o, want_o, rtol=0, atol=1e-10)
                assert_lse(l, want_l, 1e-10)


@pytest.mark.parametrize("mods", [MODS[0], MODS[3]], ids=["plain", "alibi-softcap"])
@pytest.mark.parametrize("mask", MASKS, ids=mask_id)
def test_gradients_match_autograd_through_the_reference(mask, mods):
    for shape in SHAPES[:2]:
        B, H, Hkv, Nq, Nk, D = shape
        q, k, v = qkv(*shape, Dv=D + 2, scale=3.0)
        kw = kwargs(mask, mods, B, H)
        dout, dlse = torch.randn(B, H, Nq, D + 2, dtype=F64), torch.randn(B, H, Nq, dtype=F64)
        want = grads(lambda *a, kw=kw: attention_ref(*a, **kw), q, k, v, dout, dlse)
        got = grads(lambda *a, kw=kw: flash_attention_blockwise(*a, return_lse=True, block_q=16, block_k=8, **kw),
                    q, k, v, dout, dlse)
        assert_lse(got[1], want[1], 1e-10)
        for g, w in zip(got[:1] + got[2:], want[:1] + want[2:]):
            torch.testing.assert_close(g, w, rtol=0, atol=1e-10)
        # flash_backward called directly, with other blocks: the same gradients
        with torch.no_grad():
            o, l = flash_forward(q, k, v, **kw)
            dq, dk, dv = flash_backward(q, k, v, o, l, dout, block_q=8, block_k=16, dlse=dlse, **kw)
        for g, w in zip((dq, dk, dv), want[2:]):
            torch.testing.assert_close(g, w, rtol=0, atol=1e-10)


def test_softcap_and_alibi_gradcheck():
    # the softcap's derivative checked by finite differences, independently of the oracle
    q, k, v = (t.requires_grad_() for t in qkv(1, 2, 1, 5, 7, 3, Dv=2, scale=4.0))
    slopes = torch.tensor([0.3, 0.7])
    fn = lambda *a: flash_attention_blockwise(*a, softcap=2.0, alibi_slopes=slopes, window=(3, 1),  # noqa: E731
                                              return_lse=True, block_q=2, block_k=3)
    assert torch.autograd.gradcheck(fn, (q, k, v))


def test_low_precision_within_the_criterion():
    q, k, v = qkv(1, 4, 2, 200, 200, 64)
    kw = {"causal": True, "window": (40, 0), "softcap": 5.0, "alibi_slopes": torch.rand(4) * 0.2}
    want, _ = attention_ref(q, k, v, **kw)
    for dtype in (torch.float32, torch.bfloat16):
        ref_lp, _ = attention_ref(q.to(dtype), k.to(dtype), v.to(dtype), **kw)
        o, l = flash_forward(q.to(dtype), k.to(dtype), v.to(dtype), **kw)
        err, err_ref = (o.double() - want).abs().max().item(), (ref_lp.double() - want).abs().max().item()
        assert o.dtype == dtype and l.dtype == torch.float32
        assert err <= 2 * err_ref + 4 * torch.finfo(dtype).eps


# -- I/O counts: a window visits only the blocks it reaches --------------------------------------------


COUNT_CASES = [(1, 1, 1, 256, 256, 16, 64, 64), (2, 4, 2, 97, 131, 8, 16, 24), (1, 2, 1, 131, 97, 8, 24, 16)]
COUNT_MASKS = [(-1, -1), (-1, 0), (63, 0), (5, 0), (10, 10), (0, 30), (-1, 7), (40, -1)]


@pytest.mark.parametrize("window", COUNT_MASKS, ids=str)
@pytest.mark.parametrize("case", COUNT_CASES, ids=str)
def test_forward_counts_are_the_visible_block_pairs(case, window):
    B, H, Hkv, Nq, Nk, D, Br, Bc = case
    q, k, v = qkv(B, H, Hkv, Nq, Nk, D, dtype=torch.float32)
    grid = mask_grid(*window, Nq, Nk)
    want = expected_forward(grid, Br, Bc, D, D, B * Hkv, H // Hkv)
    for mods in ({}, {"softcap": 2.0, "alibi_slopes": torch.rand(H)}):  # the variants change no count
        st = IOStats()
        flash_forward(q, k, v, window=window, block_q=Br, block_k=Bc, stats=st, **mods)
        assert st.reads == want["reads"] and st.writes == want["writes"]
        assert (st.pairs_computed, st.pairs_skipped, st.pairs_masked) == (want["computed"], want["skipped"],
                                                                          want["masked"])


@pytest.mark.parametrize("window", COUNT_MASKS, ids=str)
@pytest.mark.parametrize("case", COUNT_CASES, ids=str)
def test_fa1_and_backward_counts_are_the_visible_block_pairs(case, window):
    B, H, Hkv, Nq, Nk, D, Br, Bc = case
    q, k, v = qkv(B, H, Hkv, Nq, Nk, D, dtype=torch.float32)
    table = pair_table(mask_grid(*window, Nq, Nk), Br, Bc)
    qb, kb = blocks(Nq, Br), blocks(Nk, Bc)
    rows = B * H * sum(qb[i][1] - qb[i][0] for (i, j), kind in table.items() if kind != "skip")
    seen_keys = sum(j1 - j0 for j, (j0, j1) in enumerate(kb) if any(table[i, j] != "skip" for i in range(len(qb))))
    fa1 = IOStats()
    flash_forward_fa1(q, k, v, window=window, block_q=Br, block_k=Bc, stats=fa1)
    assert fa1.reads["Q"] == fa1.reads["O"] == rows * D
    assert fa1.reads.get("K", 0) == fa1.reads.get("V", 0) == B * Hkv * seen_keys * D
    assert fa1.pairs_computed == B * Hkv * sum(kind != "skip" for kind in table.values())
    o, l = flash_forward(q, k, v, window=window)
    bwd = IOStats()
    flash_backward(q, k, v, o, l, torch.randn_like(o), window=window, block_q=Br, block_k=Bc, stats=bwd)
    assert bwd.atomic_adds.get("dQ", 0) == rows * D
    assert bwd.reads.get("K", 0) == B * Hkv * seen_keys * D and bwd.reads.get("Q", 0) == rows * D
    assert bwd.writes["dK"] == B * Hkv * Nk * D  # every dK row written once (zeros where no query sees it)
    assert bwd.pairs_masked == B * Hkv * sum(kind == "mask" for kind in table.values())


def test_a_window_makes_traffic_linear_in_n():
    # causal window of W = 64 keys, 64 x 64 blocks: each Q block visits 2 K/V blocks (1 for the first),
    # the causal mask visits i + 1; doubling N doubles the windowed K/V traffic and ~quadruples the causal
    D, W, blk = 16, 64, 64
    counts = {}
    for N in (512, 1024):
        q, k, v = qkv(1, 1, 1, N, N, D, dtype=torch.float32)
        for name, window in (("dense", None), ("causal", (-1, 0)), ("window", (W - 1, 0))):
            st = IOStats()
            flash_forward(q, k, v, window=window, block_q=blk, block_k=blk, stats=st)
            counts[name, N] = st
    for N in (512, 1024):
        T = N // blk
        assert counts["window", N].pairs_computed == 2 * T - 1
        assert counts["causal", N].pairs_computed == T * (T + 1) // 2
        assert counts["window", N].total < counts["causal", N].total < counts["dense", N].total
    kv = {key: st.reads["K"] + st.reads["V"] for key, st in counts.items()}
    assert kv["window", 1024] / kv["window", 512] == (2 * 16 - 1) / (2 * 8 - 1)  # ~2: N·W
    assert kv["dense", 1024] / kv["dense", 512] == 4  # N²


# -- decoding with the variants ----------------------------------------------------------------------


@pytest.mark.parametrize("mask", [(True, None), (True, (4, 0)), (False, (2, 3)), (False, (60, -1)), (False, (0, 0))],
                         ids=mask_id)
@pytest.mark.parametrize("paged", [False, True])
def test_decode_variants_match_reference(mask, paged):
    B, H, Hkv, L, D, page = 4, 6, 2, 37, 9, 8
    k_full, v_full = torch.randn(B, Hkv, L, D, dtype=F64), torch.randn(B, Hkv, L, D + 2, dtype=F64)
    if paged:
        bt = block_table(B, -(-L // page), extra_blocks=3)
        kc, vc = scatter(k_full, v_full, bt, page)
    else:
        kc, vc, bt = k_full, v_full, None
    seqlens = [1, L, 17, 0]
    for Nq in (1, 3):
        q = torch.randn(B, H, Nq, D, dtype=F64) * 3
        for mods in (MODS[0], MODS[3]):
            kw = kwargs(mask, mods, B, H)
            for S in (1, 3, 50) if Nq == 1 else (2,):
                o, l = flash_decode_blockwise(q, kc, vc, cache_seqlens=seqlens, block_table=bt, num_splits=S, **kw)
                for b, n in enumerate(seqlens):
                    if n == 0:
                        assert (o[b] == 0).all() and (l[b] == -math.inf).all()
                        continue
                    slopes = kw.get("alibi_slopes")
                    if slopes is not None and slopes.dim() == 2:
                        slopes = slopes[b:b + 1]
                    wo, wl = attention_ref(q[b:b + 1], k_full[b:b + 1, :, :n], v_full[b:b + 1, :, :n],
                                           **{**kw, "alibi_slopes": slopes})
                    torch.testing.assert_close(o[b:b + 1], wo, rtol=0, atol=1e-10)
                    assert_lse(l[b:b + 1], wl, 1e-10)


def test_decode_window_reads_only_the_window():
    B, H, Hkv, Nq, L, D = 3, 4, 2, 2, 100, 8
    q = torch.randn(B, H, Nq, D)
    kc, vc = torch.randn(B, Hkv, L, D), torch.randn(B, Hkv, L, D)
    seqlens = [100, 9, 0]
    for window in ((15, 0), (-1, 0)):
        seen = sum(int(mask_grid(*window, Nq, n).any(dim=0).sum()) for n in seqlens)  # keys some query sees
        for S in (1, 3, 7):
            st = IOStats()
            flash_decode_blockwise(q, kc, vc, cache_seqlens=seqlens, num_splits=S, window=window, stats=st)
            assert st.reads["K"] == st.reads["V"] == Hkv * seen * D
    assert Hkv * (16 + 1 + 9) * D < Hkv * sum(seqlens) * D  # the window's count above is the smaller


# -- the contract the public dispatch calls, determinism, bad arguments ----------------------------------


def test_attention_fn_takes_a_mask():
    # the call attnlab.api makes: checked inputs, the window and causal folded into one Mask
    q, k, v = qkv(2, 4, 2, 30, 41, 8)
    slopes = torch.rand(2, 4)
    want_o, want_l = attention_ref(q, k, v, window=(6, 2), softcap=2.0, alibi_slopes=slopes, scale=0.4)
    o, l = attention_fn(q, k, v, AttnDims(2, 4, 2, 30, 41, 8, 8), mask=Mask(6, 2), scale=0.4, softcap=2.0,
                        slopes=slopes, block_q=8, block_k=16)
    torch.testing.assert_close(o, want_o, rtol=0, atol=1e-10)
    assert_lse(l, want_l, 1e-10)


def test_deterministic_with_worker_threads():
    # 256 x 256 blocks: one (batch, K/V head) program per step, dealt out to the worker threads; every
    # program writes its own rows, so the result is the same bits with 1 or 2 threads, run after run
    q, k, v = qkv(2, 4, 2, 600, 600, 8)
    kw = {"causal": True, "window": (100, 0), "softcap": 3.0, "alibi_slopes": torch.rand(4)}
    dout, dlse = torch.randn(2, 4, 600, 8, dtype=F64), torch.randn(2, 4, 600, dtype=F64)
    n = torch.get_num_threads()
    runs = []
    try:
        for threads in (1, 2, 2):
            torch.set_num_threads(threads)
            runs.append(grads(lambda *a: flash_attention_blockwise(*a, return_lse=True, block_q=256, block_k=256,
                                                                   **kw), q, k, v, dout, dlse))
    finally:
        torch.set_num_threads(n)
    assert programs_per_step(AttnDims(2, 4, 2, 600, 600, 8, 8), 256, 256, q.device) == 1  # 4 steps, 2 workers
    for run in runs[1:]:
        assert all(torch.equal(a, b) for a, b in zip(runs[0], run))


@pytest.mark.parametrize("fn", [flash_forward, flash_forward_fa1, flash_attention_blockwise])
def test_bad_variant_arguments(fn):
    q, k, v = qkv(1, 2, 1, 8, 8, 4)
    with pytest.raises(TypeError, match="window"):
        fn(q, k, v, window=3)
    with pytest.raises(ValueError, match="window"):
        fn(q, k, v, window=(-2, 0))
    with pytest.raises(ValueError, match="causal=True"):
        fn(q, k, v, causal=True, window=(4, 2))
    with pytest.raises(ValueError, match="softcap"):
        fn(q, k, v, softcap=0.0)
    with pytest.raises(ValueError, match="alibi_slopes"):
        fn(q, k, v, alibi_slopes=torch.rand(3))
    with pytest.raises(TypeError, match="alibi_slopes"):
        fn(q, k, v, alibi_slopes=torch.rand(2, dtype=torch.float16))
    with pytest.raises(ValueError, match="alibi_slopes"):
        flash_decode_blockwise(q, k, v, alibi_slopes=torch.rand(1, 3))
