"""Packed variable-length batches in attnlab.blockwise (flash-attn's varlen layout): forward and gradients
against the float64 oracle attention_ref_varlen, with the variants, empty sequences and rows that see no
key; no computation across documents; and the I/O counts of a packed batch against the block pairs of
each document read off its visibility grid, and against the same documents padded to the longest."""

import itertools
import math

import pytest
import torch
from tests.blockwise.pairs import expected_forward, mask_grid
from tests.helpers import F64, assert_lse

from attnlab.blockwise import (
    IOStats,
    flash_attention_varlen_blockwise,
    flash_forward,
    flash_forward_varlen,
)
from attnlab.reference import attention_ref_varlen


def cu(lengths) -> torch.Tensor:
    return torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int32)


def packed(lq, lk, H, Hkv, D, Dv, dtype=F64):
    q = torch.randn(sum(lq), H, D, dtype=dtype) * 3  # scores of a few units: the softcap bites
    k = torch.randn(sum(lk), Hkv, D, dtype=dtype)
    v = torch.randn(sum(lk), Hkv, Dv, dtype=dtype)
    return q, k, v


def grads(fn, q, k, v, dout, dlse):
    q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
    o, l = fn(q, k, v)
    loss = (o * dout).sum() + (torch.where(torch.isfinite(l), l, 0) * dlse).sum()
    return (o, l, *torch.autograd.grad(loss, (q, k, v)))


# per sequence (Nq, Nk): Nq < Nk, Nq > Nk (rows that see no key under causal), no queries, no keys,
# neither, equal and odd
LQ = [5, 0, 17, 3, 0, 9, 1]
LK = [7, 4, 17, 0, 0, 30, 1]
VARIANTS = [dict(causal=False), dict(causal=True), dict(causal=True, window=(4, 0)), dict(window=(2, 3)),
            dict(window=(0, 6)), dict(causal=True, softcap=1.5), dict(alibi="H"),
            dict(causal=True, window=(6, 0), softcap=3.0, alibi="BH")]


def variant_kwargs(variant, B, H):
    kw = dict(variant)
    a = kw.pop("alibi", None)
    if a is not None:
        kw["alibi_slopes"] = torch.rand(*((H,) if a == "H" else (B, H))) * 0.5
    return kw


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: "-".join(f"{k}{v[k]}" for k in v))
@pytest.mark.parametrize("heads", [(4, 2), (3, 3)], ids=["gqa", "mha"])
def test_varlen_matches_reference(variant, heads):
    H, Hkv = heads
    D, Dv = 8, 6
    q, k, v = packed(LQ, LK, H, Hkv, D, Dv)
    cq, ck = cu(LQ), cu(LK)
    kw = variant_kwargs(variant, len(LQ), H)
    want_o, want_l = attention_ref_varlen(q, k, v, cq, ck, **kw)
    for bq, bk in ((4, 8), (8, 3), (None, None)):
        o, l = flash_forward_varlen(q, k, v, cq, ck, block_q=bq, block_k=bk, **kw)
        assert o.shape == (sum(LQ), H, Dv) and l.shape == (H, sum(LQ)) and l.dtype == F64
        torch.testing.assert_close(o, want_o, rtol=0, atol=1e-10)
        assert_lse(l, want_l, 1e-10)
    dout, dlse = torch.randn(sum(LQ), H, Dv, dtype=F64), torch.randn(H, sum(LQ), dtype=F64)
    got = grads(lambda *a: flash_attention_varlen_blockwise(*a, cq, ck, return_lse=True, block_q=4, block_k=8, **kw),
                q, k, v, dout, dlse)
    want = grads(lambda *a: attention_ref_varlen(*a, cq, ck, **kw), q, k, v, dout, dlse)
    assert_lse(got[1], want[1], 1e-10)
    for g, w in zip(got[:1] + got[2:], want[:1] + want[2:]):
        torch.testing.assert_close(g, w, rtol=0, atol=1e-10)


def test_rows_without_keys_and_empty_sequences():
    lq, lk = [4, 0, 3], [2, 5, 0]  # causal: rows 0, 1 of sequence 0 see no key; sequence 2 has no keys
    q, k, v = packed(lq, lk, 2, 1, 4, 4)
    o, l = flash_forward_varlen(q, k, v, cu(lq), cu(lk), causal=True, block_q=2, block_k=2)
    assert (o[[0, 1, 4, 5, 6]] == 0).all() and (l[:, [0, 1, 4, 5, 6]] == -math.inf).all()
    assert torch.isfinite(l[:, [2, 3]]).all()
    qa, ka, va = (t.clone().requires_grad_() for t in (q, k, v))
    out = flash_attention_varlen_blockwise(qa, ka, va, cu(lq), cu(lk), causal=True)
    out.sum().backward()
    assert torch.isfinite(qa.grad).all() and (ka.grad[2:] == 0).all()  # sequence 1's keys: no query


def test_documents_do_not_see_each_other():
    # changing one document's keys and values changes no other document's rows, bit for bit; and each
    # document's rows are what flash_forward gives for it alone
    q, k, v = packed(LQ, LK, 4, 2, 8, 8)
    cq, ck = cu(LQ), cu(LK)
    o1, l1 = flash_forward_varlen(q, k, v, cq, ck, causal=True, block_q=4, block_k=8)
    k2, v2 = k.clone(), v.clone()
    k2[ck[2]:ck[3]] += 1.0
    v2[ck[2]:ck[3]] -= 1.0
    o2, l2 = flash_forward_varlen(q, k2, v2, cq, ck, causal=True, block_q=4, block_k=8)
    rows = torch.ones(sum(LQ), dtype=torch.bool)
    rows[cq[2]:cq[3]] = False
    assert torch.equal(o1[rows], o2[rows]) and torch.equal(l1[:, rows], l2[:, rows])
    assert not torch.equal(o1[~rows], o2[~rows])
    for b in range(len(LQ)):
        q0, q1, k0, k1 = int(cq[b]), int(cq[b + 1]), int(ck[b]), int(ck[b + 1])
        if q1 == q0:
            continue
        ob, lb = flash_forward(q[q0:q1].transpose(0, 1)[None], k[k0:k1].transpose(0, 1)[None],
                               v[k0:k1].transpose(0, 1)[None], causal=True, block_q=4, block_k=8)
        torch.testing.assert_close(o1[q0:q1], ob[0].transpose(0, 1), rtol=0, atol=1e-12)
        assert_lse(l1[:, q0:q1], lb[0], 1e-12)


@pytest.mark.parametrize("window", [(-1, -1), (-1, 0), (6, 0), (3, 5)], ids=str)
def test_packed_counts_are_each_documents_visible_block_pairs(window):
    H, Hkv, D, Br, Bc = 4, 2, 8, 4, 8
    q, k, v = packed(LQ, LK, H, Hkv, D, D, dtype=torch.float32)
    st = IOStats()
    flash_forward_varlen(q, k, v, cu(LQ), cu(LK), window=window, block_q=Br, block_k=Bc, stats=st)
    reads, writes, pairs = {}, {}, [0, 0, 0]
    for nq, nk in zip(LQ, LK):
        if nq == 0:  # a document without queries runs no program
            continue
        want = expected_forward(mask_grid(*window, nq, nk), Br, Bc, D, D, Hkv, H // Hkv)
        for total, part in ((reads, want["reads"]), (writes, want["writes"])):
            for name, n in part.items():
                total[name] = total.get(name, 0) + n
        pairs = [a + b for a, b in zip(pairs, (want["computed"], want["skipped"], want["masked"]))]
    assert st.reads == reads and st.writes == writes
    assert [st.pairs_computed, st.pairs_skipped, st.pairs_masked] == pairs


def test_packed_moves_less_than_padded():
    # the same documents padded to the longest and run as one (B, H, N, D) batch: every padded row of
    # Q, O and L moves, and the K/V blocks of the padding too
    lengths = [100, 20, 60, 7]
    H, D, blk = 2, 16, 16
    q, k, v = packed(lengths, lengths, H, H, D, D, dtype=torch.float32)
    packed_st = IOStats()
    flash_forward_varlen(q, k, v, cu(lengths), cu(lengths), causal=True, block_q=blk, block_k=blk, stats=packed_st)
    N = max(lengths)
    pad = torch.zeros(3, len(lengths), H, N, D)  # q, k, v of every document, padded: (B, H, N, D)
    for b, (a, n) in enumerate(zip(cu(lengths).tolist(), lengths)):
        for t, x in zip(pad, (q, k, v)):
            t[b, :, :n] = x[a:a + n].transpose(0, 1)
    padded_st = IOStats()
    flash_forward(*pad, causal=True, block_q=blk, block_k=blk, stats=padded_st)
    assert packed_st.total < padded_st.total
    assert packed_st.reads["Q"] == H * sum(lengths) * D < padded_st.reads["Q"] == len(lengths) * H * N * D


def test_deterministic_with_worker_threads():
    lq = lk = [300, 41, 257, 0, 90]
    q, k, v = packed(lq, lk, 4, 2, 8, 8)
    kw = {"causal": True, "window": (50, 0), "softcap": 3.0, "alibi_slopes": torch.rand(4)}
    dout, dlse = torch.randn(sum(lq), 4, 8, dtype=F64), torch.randn(4, sum(lq), dtype=F64)
    n = torch.get_num_threads()
    runs = []
    try:
        for threads in (1, 2, 2):
            torch.set_num_threads(threads)
            runs.append(grads(lambda *a: flash_attention_varlen_blockwise(*a, cu(lq), cu(lk), return_lse=True,
                                                                          block_q=64, block_k=64, **kw),
                              q, k, v, dout, dlse))
    finally:
        torch.set_num_threads(n)
    for run in runs[1:]:
        assert all(torch.equal(a, b) for a, b in zip(runs[0], run))


def test_bad_arguments():
    q, k, v = packed([3, 4], [3, 4], 2, 1, 4, 4)
    with pytest.raises(ValueError, match="cu_seqlens_k"):
        flash_forward_varlen(q, k, v, cu([3, 4]), cu([3, 3]))
    with pytest.raises(ValueError, match="window"):
        flash_forward_varlen(q, k, v, cu([3, 4]), cu([3, 4]), window=(-3, 0))
    with pytest.raises(ValueError, match="alibi_slopes"):
        flash_attention_varlen_blockwise(q, k, v, cu([3, 4]), cu([3, 4]), alibi_slopes=torch.rand(3, 2))
    with pytest.raises(RuntimeError, match="not differentiable"):
        flash_forward_varlen(q.requires_grad_(), k, v, cu([3, 4]), cu([3, 4]))
