"""attnlab.flash (§5.1, §6.2–6.3, §7, §8.4) against attention_ref, its IO counts against closed forms,
and its input checks. float64 unless a test says otherwise."""

import math

import pytest
import torch

from attnlab.flash import (
    IOStats,
    cpu_block_sizes,
    flash_attention,
    flash_attention_torch,
    flash_backward,
    flash_decode,
    flash_decode_torch,
    flash_forward,
    flash_forward_fa1,
)
from attnlab.reference import attention_ref, causal_mask

F64 = torch.float64


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """These tests run thousands of small block operations, where a second OpenMP thread only adds
    synchronisation (8x slower on a shared 2-core machine); the previous setting is restored."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)

FORWARDS = [flash_forward, flash_forward_fa1]

# (B, H, Hkv, Nq, Nk, D): N = 1, 97, 300, 1025; D = 16, 59, 64; Nq != Nk both ways; GQA and MQA
SHAPES = [
    (1, 1, 1, 1, 1, 16),
    (2, 2, 2, 97, 97, 59),
    (1, 4, 2, 300, 300, 64),
    (2, 3, 1, 97, 300, 16),
    (1, 2, 2, 300, 97, 59),  # Nq > Nk: the first 203 causal rows see no key
    (1, 1, 1, 1025, 1025, 64),
    (1, 2, 1, 1, 1025, 59),
]
BLOCKS = [(64, 64), (48, 40)]


def _qkv(B, H, Hkv, Nq, Nk, D, Dv=None, dtype=F64, scale=1.0):
    Dv = D if Dv is None else Dv
    q = torch.randn(B, H, Nq, D, dtype=dtype) * scale
    k = torch.randn(B, Hkv, Nk, D, dtype=dtype)
    v = torch.randn(B, Hkv, Nk, Dv, dtype=dtype)
    return q, k, v


def _assert_lse(got, want, atol):
    assert torch.equal(torch.isinf(got), torch.isinf(want)), "fully masked rows must be -inf, and only they"
    fin = torch.isfinite(want)
    assert (got[~fin] == -math.inf).all()
    torch.testing.assert_close(got[fin], want[fin], rtol=0, atol=atol)


def _abs_err(a, b):
    return (a.double() - b.double()).abs().max().item() if a.numel() else 0.0


# -- forward ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "B{}H{}Hkv{}Nq{}Nk{}D{}".format(*s))
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("fwd", FORWARDS)
def test_forward_matches_reference(fwd, causal, shape):
    B, H, Hkv, Nq, Nk, D = shape
    q, k, v = _qkv(*shape, Dv=D + 3)  # Dv != D as well
    want_o, want_l = attention_ref(q, k, v, causal=causal)
    for bq, bk in BLOCKS if Nq * Nk < 1025 * 1025 else BLOCKS[:1]:
        o, l = fwd(q, k, v, causal=causal, block_q=bq, block_k=bk)
        print(fwd.__name__, shape, causal, (bq, bk), "max |Δout| =", _abs_err(o, want_o))
        assert o.shape == want_o.shape and o.dtype == F64 and l.dtype == F64
        assert not o.isnan().any()
        torch.testing.assert_close(o, want_o, rtol=0, atol=1e-10)
        _assert_lse(l, want_l, 1e-10)


@pytest.mark.parametrize("threads", [1, 2])
def test_forward_in_program_chunks(threads):
    # large blocks: one (batch, K/V head) per step; with more threads the steps are dealt out to
    # worker threads (each on one intra-op thread), and the caller's thread setting is left alone
    from attnlab._checks import AttnDims
    from attnlab.flash import _programs_per_step

    q, k, v = _qkv(2, 4, 2, 300, 333, 16)
    want_o, want_l = attention_ref(q, k, v, causal=True)
    n = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        per_step = _programs_per_step(AttnDims(2, 4, 2, 300, 333, 16, 16), 256, 512, q.device)
        o, l = flash_forward(q, k, v, causal=True, block_q=256, block_k=512)
        assert torch.get_num_threads() == threads
        single = _programs_per_step(AttnDims(1, 4, 1, 300, 333, 16, 16), 256, 512, q.device)
    finally:
        torch.set_num_threads(n)
    assert per_step == 1
    assert single == 1  # a lone program: its operations are split across threads instead
    torch.testing.assert_close(o, want_o, rtol=0, atol=1e-10)
    _assert_lse(l, want_l, 1e-10)


@pytest.mark.parametrize("B,Hkv,per_step", [(1, 1, 1), (3, 4, 1), (3, 4, 3), (3, 4, 4), (3, 4, 9), (2, 3, 100)])
def test_program_chunks_cover_every_program_once(B, Hkv, per_step):
    from attnlab.flash import _program_chunks

    seen = torch.zeros(B, Hkv, dtype=torch.int64)
    for bs, hs in _program_chunks(B, Hkv, per_step):
        assert seen[bs, hs].numel() <= per_step
        seen[bs, hs] += 1
    assert (seen == 1).all()


def test_fully_masked_rows_give_zero_and_minus_inf():
    q, k, v = _qkv(1, 2, 1, 9, 4, 8)  # Nq > Nk: queries 0..4 see no key
    for fwd in FORWARDS:
        o, l = fwd(q, k, v, causal=True, block_q=2, block_k=3)
        assert (o[:, :, :5] == 0).all() and (l[:, :, :5] == -math.inf).all()
        assert torch.isfinite(l[:, :, 5:]).all()
    o, l = flash_forward(q, k[:, :, :0], v[:, :, :0])  # no keys at all
    assert (o == 0).all() and (l == -math.inf).all()


def test_non_contiguous_inputs_and_default_scale():
    x = torch.randn(2, 97, 4, 16, dtype=F64)  # (B, N, H, D) as a model produces it
    q = x.transpose(1, 2)
    k = torch.randn(2, 97, 2, 16, dtype=F64).transpose(1, 2)
    v = torch.randn(2, 97, 2, 16, dtype=F64).transpose(1, 2)
    want_o, want_l = attention_ref(q, k, v, causal=True)
    o, l = flash_forward(q, k, v, causal=True, block_q=None, block_k=None)
    torch.testing.assert_close(o, want_o, rtol=0, atol=1e-10)
    o, _ = flash_forward(q, k, v, scale=0.3)
    torch.testing.assert_close(o, attention_ref(q, k, v, scale=0.3)[0], rtol=0, atol=1e-10)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_low_precision_error_at_most_twice_the_same_dtype_reference(dtype):
    q, k, v = _qkv(1, 4, 2, 300, 300, 64)
    want, _ = attention_ref(q, k, v, causal=True)
    ref_lp, _ = attention_ref(q.to(dtype), k.to(dtype), v.to(dtype), causal=True)
    o, l = flash_forward(q.to(dtype), k.to(dtype), v.to(dtype), causal=True)
    err, err_ref = _abs_err(o, want), _abs_err(ref_lp, want)
    print(dtype, "flash", err, "same-dtype reference", err_ref)
    assert o.dtype == dtype and l.dtype == torch.float32
    assert err <= 2 * err_ref + 1e-7
    if dtype == torch.float32:
        assert err < 1e-5  # float32 rounding: differences near 1e-6


def test_float16_scores_in_the_hundreds():
    q, k, v = _qkv(1, 2, 2, 97, 97, 16, scale=60.0)  # |scores| reach several hundred
    q, k, v = q.half().double(), k.half().double(), v.half().double()  # exactly representable in float16
    want, want_l = attention_ref(q, k, v, causal=True)
    assert (q @ k.transpose(-1, -2) / 4).abs().max() > 200
    o, l = flash_forward(q.half(), k.half(), v.half(), causal=True)
    assert torch.isfinite(o).all() and torch.isfinite(l).all()
    assert _abs_err(o, want) < 1e-2


def test_stats_do_not_change_the_result():
    q, k, v = _qkv(1, 2, 1, 97, 97, 16)
    for fwd in FORWARDS:
        a = fwd(q, k, v, causal=True)
        b = fwd(q, k, v, causal=True, stats=IOStats())
        assert all(torch.equal(x, y) for x, y in zip(a, b))


# -- the counts against closed forms (§5.4, §6.2, §6.3, §7.4) ----------------------------------------


def _blocks(n, b):
    return [(a, min(a + b, n)) for a in range(0, n, b)]


def _pair_table(Nq, Nk, Br, Bc, causal):
    """For every (Q block, K/V block): 'skip', 'mask' or 'full', read off the causal mask itself."""
    M = causal_mask(Nq, Nk) if causal else torch.ones(Nq, Nk, dtype=torch.bool)
    out = {}
    for i, (i0, i1) in enumerate(_blocks(Nq, Br)):
        for j, (j0, j1) in enumerate(_blocks(Nk, Bc)):
            sub = M[i0:i1, j0:j1]
            out[i, j] = "skip" if not sub.any() else ("full" if sub.all() else ("mask" if causal else "full"))
    return out


# N multiples of the blocks and not; causal and not; GQA
COUNT_CASES = [(1, 1, 1, 256, 256, 64, 64, 64), (2, 4, 2, 300, 300, 32, 64, 48), (1, 2, 1, 97, 211, 16, 32, 24),
               (1, 1, 1, 211, 97, 16, 24, 32)]


@pytest.mark.parametrize("case", COUNT_CASES, ids=str)
@pytest.mark.parametrize("causal", [False, True])
def test_fa2_forward_counts(case, causal):
    B, H, Hkv, Nq, Nk, D, Br, Bc = case
    q, k, v = _qkv(B, H, Hkv, Nq, Nk, D, dtype=torch.float32)
    st = IOStats()
    flash_forward(q, k, v, causal=causal, block_q=Br, block_k=Bc, stats=st)
    pairs = _pair_table(Nq, Nk, Br, Bc, causal)
    kb = _blocks(Nk, Bc)
    keys = sum(kb[j][1] - kb[j][0] for (i, j), kind in pairs.items() if kind != "skip")
    G = H // Hkv
    assert st.reads == {"Q": B * H * Nq * D, "K": B * Hkv * keys * D, "V": B * Hkv * keys * D}
    assert st.writes == {"O": B * H * Nq * D, "L": B * H * Nq}
    n_comp = sum(kind != "skip" for kind in pairs.values())
    assert st.pairs_computed == B * Hkv * n_comp
    assert st.pairs_skipped == B * Hkv * (len(pairs) - n_comp)
    assert st.pairs_masked == B * Hkv * sum(kind == "mask" for kind in pairs.values())
    if not causal and Nq % Br == 0:  # §5.4: 2Nd + 2Nd·N/Br + N per head (MHA)
        N = Nq
        assert st.total == B * Hkv * (G * 2 * N * D + 2 * Nk * D * (N // Br) + G * N)


def test_causal_skipping_matches_the_lecture():
    # §6.2: N = 256, B = 64 (T = 4): 10 of 16 pairs; K/V reads 524,288 -> 327,680 bytes (float32, d = 64)
    q, k, v = _qkv(1, 1, 1, 256, 256, 64, dtype=torch.float32)
    full, causal = IOStats(), IOStats()
    flash_forward(q, k, v, block_q=64, block_k=64, stats=full)
    flash_forward(q, k, v, causal=True, block_q=64, block_k=64, stats=causal)
    assert (causal.pairs_computed, causal.pairs_computed + causal.pairs_skipped) == (10, 16)
    kv_bytes = lambda s: 4 * (s.reads["K"] + s.reads["V"])  # noqa: E731
    assert (kv_bytes(full), kv_bytes(causal)) == (524_288, 327_680)
    # T = 32: T(T+1)/2 pairs, 51.6 %
    q, k, v = _qkv(1, 1, 1, 256, 256, 8, dtype=torch.float32)
    st = IOStats()
    flash_forward(q, k, v, causal=True, block_q=8, block_k=8, stats=st)
    assert st.pairs_computed == 32 * 33 // 2
    assert round(100 * st.pairs_computed / (st.pairs_computed + st.pairs_skipped), 1) == 51.6


@pytest.mark.parametrize("case", COUNT_CASES, ids=str)
@pytest.mark.parametrize("causal", [False, True])
def test_fa1_forward_counts(case, causal):
    B, H, Hkv, Nq, Nk, D, Br, Bc = case
    q, k, v = _qkv(B, H, Hkv, Nq, Nk, D, dtype=torch.float32)
    st = IOStats()
    flash_forward_fa1(q, k, v, causal=causal, block_q=Br, block_k=Bc, stats=st)
    pairs = _pair_table(Nq, Nk, Br, Bc, causal)
    qb = _blocks(Nq, Br)
    rows = sum(qb[i][1] - qb[i][0] for (i, j), kind in pairs.items() if kind != "skip")  # Q rows per K/V pass
    G = H // Hkv
    R = B * H * rows
    assert st.reads == {"Q": R * D, "K": B * Hkv * Nk * D, "V": B * Hkv * Nk * D, "O": R * D,
                        "l": R + B * H * Nq, "m": R + B * H * Nq}
    init = B * H * Nq
    assert st.writes == {"O": init * D + R * D, "l": init + R, "m": init + R, "L": B * H * Nq}
    if not causal and G == 1:  # §6.3 per head: K, V once + per K/V block (Q, O in, O out) + (ℓ, m in and out)
        Tc = len(_blocks(Nk, Bc))
        per_head = 2 * Nk * D + Tc * (3 * Nq * D + 4 * Nq)
        assert st.total - B * H * (Nq * D + 2 * Nq) - B * H * 3 * Nq == B * H * per_head


def test_closed_forms_give_the_lecture_totals():
    # the closed forms that test_fa2_forward_counts / test_fa1_forward_counts check exactly, at the
    # lecture's size (§6.3, exercise 4: N = 4096, d = 128, Br = Bc = 128, one head)
    N, d, b = 4096, 128, 128
    fa2 = 2 * N * d + 2 * N * d * (N // b) + N
    fa1 = 2 * N * d + (N // b) * (3 * N * d + 4 * N)
    assert (round(fa2 / 1e6, 1), round(fa1 / 1e6, 1)) == (34.6, 51.9)


@pytest.mark.parametrize("case", COUNT_CASES, ids=str)
@pytest.mark.parametrize("causal", [False, True])
def test_backward_counts(case, causal):
    B, H, Hkv, Nq, Nk, D, Br, Bc = case
    q, k, v = _qkv(B, H, Hkv, Nq, Nk, D, dtype=torch.float32)
    o, l = flash_forward(q, k, v, causal=causal)
    st = IOStats()
    flash_backward(q, k, v, o, l, torch.randn_like(o), causal=causal, block_q=Br, block_k=Bc, stats=st)
    pairs = _pair_table(Nq, Nk, Br, Bc, causal)
    qb = _blocks(Nq, Br)
    R = B * H * sum(qb[i][1] - qb[i][0] for (i, j), kind in pairs.items() if kind != "skip")
    assert st.atomic_adds == {"dQ": R * D}
    assert st.reads == {"O": B * H * Nq * D, "dO": B * H * Nq * D + R * D, "Q": R * D, "L": R, "D": R,
                        "K": B * Hkv * Nk * D, "V": B * Hkv * Nk * D}
    assert st.writes == {"D": B * H * Nq, "dK": B * Hkv * Nk * D, "dV": B * Hkv * Nk * D}


def test_backward_atomic_adds_match_the_lecture():
    # §7.4: N = 300, d = 32, Bc = 48: ceil(N/Bc)·N·d = 7 × 300 × 32 = 67,200 dQ atomic adds
    N, d, Bc = 300, 32, 48
    q, k, v = _qkv(1, 1, 1, N, N, d)
    o, l = flash_forward(q, k, v)
    st = IOStats()
    flash_backward(q, k, v, o, l, torch.randn_like(o), block_q=64, block_k=Bc, stats=st)
    assert st.atomic_adds["dQ"] == math.ceil(N / Bc) * N * d == 67_200
    assert "dQ" in str(st) and "67,200" in str(st) and st.as_dict()["atomic_adds"]["dQ"] == 67_200


def test_iostats_table_and_dict():
    st = IOStats()
    q, k, v = _qkv(1, 1, 1, 97, 97, 16)
    flash_forward(q, k, v, causal=True, stats=st)
    d = st.as_dict()
    assert d["total"] == d["total_reads"] + d["total_writes"] + d["total_atomic_adds"] == st.total
    assert d["pairs_computed"] == 3 and d["pairs_skipped"] == 1 and d["pairs_masked"] == 2
    from rich.console import Console

    con = Console(record=True, width=100)
    con.print(st.table())
    text = con.export_text()
    assert "total" in text and f"{st.total_reads:,}" in text and "2 masked" in str(st)


# -- backward ---------------------------------------------------------------------------------------


def _autograd_ref(q, k, v, dout, causal, dlse=None):
    q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
    o, l = attention_ref(q, k, v, causal=causal)
    loss = (o * dout).sum()
    if dlse is not None:
        loss = loss + (torch.where(torch.isfinite(l), l, 0) * dlse).sum()
    loss.backward()
    return q.grad, k.grad, v.grad


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "B{}H{}Hkv{}Nq{}Nk{}D{}".format(*s))
@pytest.mark.parametrize("causal", [False, True])
def test_backward_matches_autograd(shape, causal):
    q, k, v = _qkv(*shape, Dv=shape[-1] + 5)
    o, l = flash_forward(q, k, v, causal=causal)
    dout = torch.randn_like(o)
    want = _autograd_ref(q, k, v, dout, causal)
    for bq, bk in BLOCKS if shape[3] * shape[4] < 1025 * 1025 else BLOCKS[:1]:
        got = flash_backward(q, k, v, o, l, dout, causal=causal, block_q=bq, block_k=bk)
        for name, g, w, t in zip(("dq", "dk", "dv"), got, want, (q, k, v)):
            print(name, shape, causal, (bq, bk), _abs_err(g, w))
            assert g.shape == t.shape and g.dtype == t.dtype
            torch.testing.assert_close(g, w, rtol=0, atol=1e-9)


def test_backward_with_lse_gradient():
    q, k, v = _qkv(1, 2, 1, 97, 120, 16)
    o, l = flash_forward(q, k, v, causal=True)
    dout, dlse = torch.randn_like(o), torch.randn_like(l)
    want = _autograd_ref(q, k, v, dout, True, dlse)
    got = flash_backward(q, k, v, o, l, dout, causal=True, dlse=dlse)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=0, atol=1e-9)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_backward_low_precision(dtype):
    q, k, v = _qkv(1, 2, 2, 97, 97, 64)
    dout = torch.randn(1, 2, 97, 64, dtype=F64)
    want = _autograd_ref(q, k, v, dout, True)
    ref_lp = _autograd_ref(q.to(dtype), k.to(dtype), v.to(dtype), dout.to(dtype), True)
    lp = [t.to(dtype) for t in (q, k, v)]
    o, l = flash_forward(*lp, causal=True)
    got = flash_backward(*lp, o, l, dout.to(dtype), causal=True)
    for g, r, w in zip(got, ref_lp, want):
        assert g.dtype == dtype
        # flash-attention's criterion, with a floor of a few dozen roundings of the largest
        # gradient: the blockwise backward recomputes P from a rounded lse, so in float32 its error
        # is a small multiple of eps even where the same-dtype reference happens to land closer.
        floor = 32 * torch.finfo(dtype).eps * w.abs().max().item()
        print(dtype, _abs_err(g, w), _abs_err(r, w), floor)
        assert _abs_err(g, w) <= max(2 * _abs_err(r, w), floor)


# -- flash_attention: autograd ----------------------------------------------------------------------


@pytest.mark.parametrize("causal", [False, True])
def test_flash_attention_gradients(causal):
    q, k, v = _qkv(2, 4, 2, 97, 130, 59)
    qa, ka, va = (t.clone().requires_grad_() for t in (q, k, v))
    out, lse = flash_attention(qa, ka, va, causal=causal, return_lse=True)
    dout = torch.randn_like(out)
    ((out * dout).sum() + lse.sum()).backward()
    want = _autograd_ref(q, k, v, dout, causal, torch.ones_like(lse))
    for g, w in zip((qa.grad, ka.grad, va.grad), want):
        torch.testing.assert_close(g, w, rtol=0, atol=1e-9)
    o2 = flash_attention_torch(q, k, v, causal=causal)
    torch.testing.assert_close(o2, attention_ref(q, k, v, causal=causal)[0], rtol=0, atol=1e-10)


def test_flash_attention_gradcheck():
    q, k, v = (t.requires_grad_() for t in _qkv(1, 2, 1, 5, 7, 4, Dv=3))
    assert torch.autograd.gradcheck(lambda *a: flash_attention(*a, causal=True, return_lse=True), (q, k, v))
    assert torch.autograd.gradcheck(lambda *a: flash_attention(*a, scale=0.8), (q, k, v))


def test_flash_attention_saves_only_inputs_out_and_lse():
    q, k, v = (t.requires_grad_() for t in _qkv(1, 2, 2, 64, 64, 16))
    saved = []

    def pack(t):
        saved.append(tuple(t.shape))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        flash_attention(q, k, v, causal=True)
    assert sorted(saved) == sorted([(1, 2, 64, 16)] * 4 + [(1, 2, 64)])  # q, k, v, out, lse: no N×N


def test_cpu_block_sizes_bound_the_score_tile():
    from attnlab._checks import AttnDims

    assert cpu_block_sizes(AttnDims(1, 8, 8, 4096, 4096, 64, 64)) == (256, 512)  # the benchmarked pair
    for dims in (AttnDims(1, 8, 8, 16384, 16384, 64, 64), AttnDims(4, 32, 8, 16384, 16384, 128, 128),
                 AttnDims(1, 1, 1, 1, 5, 16, 16), AttnDims(2, 3, 1, 97, 1025, 59, 59)):
        br, bc = cpu_block_sizes(dims)
        assert 1 <= br <= min(256, dims.Nq) and 1 <= bc <= min(512, dims.Nk)
        assert dims.B * dims.H * br * bc <= max(1 << 20, dims.B * dims.H * 16 * bc)  # 16 rows at least


# -- Flash-Decoding ---------------------------------------------------------------------------------


def _decode_ref(q, k_full, v_full, seqlens, causal):
    """Sequence by sequence through attention_ref on the first seqlens[b] keys (bottom-right causal)."""
    outs, lses = [], []
    for b, n in enumerate(seqlens):
        if n == 0:  # an empty cache: every row sees no key
            outs.append(torch.zeros(1, q.shape[1], q.shape[2], v_full.shape[-1], dtype=q.dtype))
            lses.append(torch.full((1, q.shape[1], q.shape[2]), -math.inf, dtype=q.dtype))
            continue
        o, l = attention_ref(q[b:b + 1], k_full[b:b + 1, :, :n], v_full[b:b + 1, :, :n], causal=causal)
        outs.append(o)
        lses.append(l)
    return torch.cat(outs), torch.cat(lses)


def _block_table(B, max_pages, extra_blocks):
    """Each sequence gets max_pages distinct pages, drawn at random from B·max_pages + extra blocks."""
    num_blocks = B * max_pages + extra_blocks
    return torch.randperm(num_blocks)[: B * max_pages].view(B, max_pages).to(torch.int32)


def _scatter(k_full, v_full, bt, page):
    """Write contiguous caches (B, Hkv, L, D) into pages (num_blocks, page, Hkv, D) along block_table;
    positions past L in the last page hold zeros, unused blocks hold random garbage."""
    B, Hkv, L, _ = k_full.shape
    num_blocks = int(bt.max()) + 4
    out = []
    for x in (k_full, v_full):
        pages = torch.randn(num_blocks, page, Hkv, x.shape[-1], dtype=x.dtype)
        padded = torch.zeros(B, Hkv, bt.shape[1] * page, x.shape[-1], dtype=x.dtype)
        padded[:, :, :L] = x
        pages[bt.long()] = padded.view(B, Hkv, bt.shape[1], page, -1).permute(0, 2, 3, 1, 4)
        out.append(pages)
    return out


@pytest.mark.parametrize("Nq", [1, 3])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("paged", [False, True])
def test_decode_matches_reference(Nq, causal, paged):
    B, H, Hkv, L, D = 4, 6, 2, 37, 59
    q = torch.randn(B, H, Nq, D, dtype=F64)
    k_full = torch.randn(B, Hkv, L, D, dtype=F64)
    v_full = torch.randn(B, Hkv, L, D + 2, dtype=F64)
    page = 8
    if paged:
        bt = _block_table(B, -(-L // page), extra_blocks=3)
        kc, vc = _scatter(k_full, v_full, bt, page)
    else:
        kc, vc, bt = k_full, v_full, None
    capacity = L if not paged else bt.shape[1] * page
    seqlens = [1, L, 17, 0]
    want_o, want_l = _decode_ref(q, k_full, v_full, seqlens, causal)
    for S in [1, 2, 3, 4, 5, 6, 7, 50]:  # 50 splits > 37 keys: empty splits merge harmlessly
        o, l = flash_decode(q, kc, vc, cache_seqlens=torch.tensor(seqlens, dtype=torch.int32), block_table=bt,
                            num_splits=S, causal=causal)
        print("splits", S, _abs_err(o, want_o))
        assert not o.isnan().any()
        torch.testing.assert_close(o, want_o, rtol=0, atol=1e-10)
        _assert_lse(l, want_l, 1e-10)
    # default seqlens: the whole capacity
    o, l = flash_decode(q, kc, vc, block_table=bt, causal=causal)
    full = [capacity] * B
    if paged:  # positions past L in the last page hold zeros (_scatter)
        k_pad = torch.zeros(B, Hkv, capacity, D, dtype=F64)
        v_pad = torch.zeros(B, Hkv, capacity, D + 2, dtype=F64)
        k_pad[:, :, :L], v_pad[:, :, :L] = k_full, v_full
        want_o, _ = _decode_ref(q, k_pad, v_pad, full, causal)
    else:
        want_o, _ = _decode_ref(q, k_full, v_full, full, causal)
    torch.testing.assert_close(o, want_o, rtol=0, atol=1e-10)


def test_decode_is_the_last_rows_of_prefill():
    # decoding the last Nq tokens against a full cache equals the last Nq rows of causal attention
    q, k, v = _qkv(1, 4, 1, 50, 50, 16)
    o_all, l_all = attention_ref(q, k, v, causal=True)
    o, l = flash_decode(q[:, :, -2:], k, v, num_splits=3)
    torch.testing.assert_close(o, o_all[:, :, -2:], rtol=0, atol=1e-12)
    torch.testing.assert_close(l, l_all[:, :, -2:], rtol=0, atol=1e-12)


def test_decode_counts():
    B, H, Hkv, Nq, L, D = 3, 4, 2, 2, 40, 16
    q = torch.randn(B, H, Nq, D)
    kc, vc = torch.randn(B, Hkv, L, D), torch.randn(B, Hkv, L, D)
    seqlens = [40, 9, 0]
    for S in (1, 3, 7):
        st = IOStats()
        flash_decode_torch(q, kc, vc, cache_seqlens=seqlens, num_splits=S, stats=st)
        assert st.reads["K"] == st.reads["V"] == Hkv * sum(seqlens) * D  # every held key read once
        assert st.reads["Q"] == S * B * H * Nq * D
        assert st.writes["O_split"] == st.reads["O_split"] == S * B * H * Nq * D
        assert st.writes["O"] == B * H * Nq * D and st.writes["L"] == B * H * Nq
        seg = math.ceil(40 / S)
        nonempty = sum(1 for s in range(S) for n in seqlens if min(n, (s + 1) * seg) > s * seg)
        assert st.pairs_computed == Hkv * nonempty and st.pairs_computed + st.pairs_skipped == Hkv * B * S


def test_decode_float32_and_gqa_mqa():
    q = torch.randn(2, 8, 1, 64)
    kc, vc = torch.randn(2, 1, 500, 64), torch.randn(2, 1, 500, 64)
    want, _ = attention_ref(q.double(), kc.double(), vc.double(), causal=True)
    o, l = flash_decode(q, kc, vc, num_splits=4)
    assert o.dtype == torch.float32 and l.dtype == torch.float32 and _abs_err(o, want) < 1e-5


# -- bad input --------------------------------------------------------------------------------------


def _bad_calls():
    q, k, v = _qkv(1, 4, 2, 8, 8, 16)
    o, l = flash_forward(q, k, v)
    yield lambda: flash_forward(q, k, v, block_q=0), ValueError, "block_q must be a positive integer, got 0"
    yield lambda: flash_forward_fa1(q, k, v, block_k=1.5), ValueError, "block_k must be a positive integer"
    yield lambda: flash_forward(q[0], k, v), ValueError, "q must have 4 dimensions"
    yield lambda: flash_forward(q, k[:, :, :5], v), ValueError, "v must have shape"
    yield lambda: flash_forward(q, k[..., :8], v), ValueError, "k has head dim 8"
    yield lambda: flash_forward(q[:, :3], k, v), ValueError, "not a multiple"
    yield lambda: flash_forward(q, k.float(), v), TypeError, "k has dtype torch.float32"
    yield lambda: flash_forward(q, k, v, stats="yes"), TypeError, "stats must be an IOStats"
    yield lambda: flash_forward(q, k, v, causal=1), TypeError, "causal must be True or False"
    yield lambda: flash_forward(q, k, v, scale=float("nan")), ValueError, "scale must be a finite number"
    yield lambda: flash_backward(q, k, v, o[:, :2], l, o), ValueError, r"out must have shape \(B, H, Nq, Dv\)"
    yield lambda: flash_backward(q, k, v, o, l[..., :3], o), ValueError, r"lse must have shape \(B, H, Nq\)"
    yield lambda: flash_backward(q, k, v, o, l, o.float()), TypeError, "dout has dtype torch.float32"
    yield lambda: flash_backward(q, k, v, o, l, o, block_q=-1), ValueError, "block_q"
    kc, vc = torch.randn(1, 2, 10, 16, dtype=F64), torch.randn(1, 2, 10, 16, dtype=F64)
    q1 = q[:, :, :1]
    yield lambda: flash_decode(q1, kc, vc, num_splits=0), ValueError, "num_splits must be a positive integer, got 0"
    yield lambda: flash_decode(q1, kc, vc, cache_seqlens=[11]), ValueError, r"cache_seqlens must lie in \[0, 10\]"
    yield lambda: flash_decode(q1, kc, vc, cache_seqlens=[-1]), ValueError, "cache_seqlens must lie in"
    yield lambda: flash_decode(q1, kc, vc, cache_seqlens=[3, 4]), ValueError, r"cache_seqlens must have shape \(B,\)"
    yield lambda: flash_decode(q1, kc, vc, cache_seqlens=torch.tensor([3.0])), TypeError, "cache_seqlens must have dtype"
    yield lambda: flash_decode(q1, kc[:, :, :, :8], vc), ValueError, "k_cache has head dim 8"
    yield lambda: flash_decode(q1, kc, vc[:, :1]), ValueError, "v_cache must have shape"
    yield lambda: flash_decode(q1[:, :3], kc, vc), ValueError, "not a multiple"
    pages = torch.randn(6, 4, 2, 16, dtype=F64)
    bt = torch.tensor([[0, 5, 2]], dtype=torch.int32)
    yield lambda: flash_decode(q1, pages, pages, block_table=bt.float()), TypeError, "block_table must have dtype int32"
    yield lambda: flash_decode(q1, pages, pages, block_table=bt[0]), ValueError, r"block_table must have shape \(B, max_pages\)"
    yield (lambda: flash_decode(q1, pages, pages, block_table=torch.tensor([[0, 6, 1]]), cache_seqlens=[6]),
           ValueError, r"block_table holds page ids outside \[0, 6\)")
    yield lambda: flash_decode(q1, pages, pages, block_table=bt, cache_seqlens=[13]), ValueError, r"\[0, 12\]"
    yield lambda: flash_decode(q1, pages, pages[:, :3], block_table=bt), ValueError, "v_cache must have shape"


@pytest.mark.parametrize("i", range(len(list(_bad_calls()))))
def test_bad_input_names_the_argument(i):
    call, err, match = list(_bad_calls())[i]
    with pytest.raises(err, match=match):
        call()


def test_unused_block_table_entries_may_be_padding():
    pages = torch.randn(6, 4, 2, 16, dtype=F64)
    q = torch.randn(1, 2, 1, 16, dtype=F64)
    bt = torch.tensor([[3, -1, -1]], dtype=torch.int64)  # only page 0 is used by a 4-key sequence
    o, _ = flash_decode(q, pages, pages, block_table=bt, cache_seqlens=[4])
    k = pages[3].permute(1, 0, 2).unsqueeze(0)  # (1, Hkv, 4, D)
    torch.testing.assert_close(o, attention_ref(q, k, k, causal=True)[0], rtol=0, atol=1e-12)

