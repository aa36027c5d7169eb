"""The variants through the public entry points: flash_attention (window, softcap, ALiBi, deterministic),
flash_attention_varlen (flash-attn's packed layout), flash_decode's variants, attention_forward/backward —
what they compute against the float64 oracle, and one clear error for each kind of bad value."""

import math

import pytest
import torch
from tests.helpers import F64, qkv

import attnlab
from attnlab import (
    attention_backward,
    attention_forward,
    flash_attention,
    flash_attention_varlen,
    flash_decode,
)
from attnlab.reference import attention_ref, attention_ref_varlen

VARIANTS = [
    dict(causal=True, window=(5, 0)),
    dict(causal=False, window=(7, 3)),
    dict(causal=False, window=(-1, 2)),
    dict(causal=False, window=(0, 0)),
    dict(causal=True, softcap=2.5),
    dict(causal=False, alibi="H"),
    dict(causal=True, alibi="BH", softcap=4.0, window=(9, 0)),
]


def _kwargs(v, B, H):
    v = dict(v)
    a = v.pop("alibi", None)
    if a == "H":
        v["alibi_slopes"] = torch.rand(H, dtype=torch.float32) * 0.5
    elif a == "BH":
        v["alibi_slopes"] = torch.rand(B, H, dtype=torch.float32) * 0.5
    return v


def _grads(fn, q, k, v, dout, dlse):
    q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
    o, l = fn(q, k, v)
    loss = (o * dout).sum() + (torch.where(torch.isfinite(l), l, 0) * dlse).sum()
    return (o, l, *torch.autograd.grad(loss, (q, k, v)))


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: "-".join(f"{k}{v[k]}" for k in v))
@pytest.mark.parametrize("shape", [(2, 4, 2, 37, 53, 16), (1, 2, 1, 53, 37, 8)], ids=["nq<nk", "nq>nk"])
def test_flash_attention_variants(variant, shape):
    B, H, Hkv, Nq, Nk, D = shape
    q, k, v = qkv(*shape)
    kw = _kwargs(variant, B, H)
    dout, dlse = torch.randn(B, H, Nq, D, dtype=F64), torch.randn(B, H, Nq, dtype=F64)
    got = _grads(lambda *a: flash_attention(*a, return_lse=True, block_q=16, block_k=8, **kw), q, k, v, dout, dlse)
    want = _grads(lambda *a: attention_ref(*a, **kw), q, k, v, dout, dlse)
    assert torch.equal(torch.isinf(got[1]), torch.isinf(want[1]))
    for g, w in zip(got, want):
        torch.testing.assert_close(torch.nan_to_num(g, neginf=0), torch.nan_to_num(w, neginf=0), rtol=0, atol=1e-10)


def _packed(lens_q, lens_k, H, Hkv, D):
    q = torch.randn(sum(lens_q), H, D, dtype=F64)
    k = torch.randn(sum(lens_k), Hkv, D, dtype=F64)
    v = torch.randn(sum(lens_k), Hkv, D, dtype=F64)
    cu = lambda n: torch.tensor([0, *torch.tensor(n).cumsum(0).tolist()], dtype=torch.int32)  # noqa: E731
    return q, k, v, cu(lens_q), cu(lens_k)


@pytest.mark.parametrize("variant", [dict(causal=False), dict(causal=True), *VARIANTS[:5]],
                         ids=lambda v: "-".join(f"{k}{v[k]}" for k in v) or "dense")
def test_varlen_matches_each_sequence_alone(variant):
    lens_q, lens_k = [5, 0, 17, 1, 9], [5, 3, 20, 1, 4]  # an empty sequence, Nq > Nk, Nq < Nk
    q, k, v, cq, ck = _packed(lens_q, lens_k, 4, 2, 8)
    kw = _kwargs(variant, len(lens_q), 4)
    dout, dlse = torch.randn(q.shape[0], 4, 8, dtype=F64), torch.randn(4, q.shape[0], dtype=F64)
    got = _grads(lambda *a: flash_attention_varlen(*a, cq, ck, return_lse=True, block_q=4, block_k=4, **kw),
                 q, k, v, dout, dlse)
    want = _grads(lambda *a: attention_ref_varlen(*a, cq, ck, **kw), q, k, v, dout, dlse)
    assert got[0].shape == (sum(lens_q), 4, 8) and got[1].shape == (4, sum(lens_q))
    for g, w in zip(got, want):
        torch.testing.assert_close(torch.nan_to_num(g, neginf=0), torch.nan_to_num(w, neginf=0), rtol=0, atol=1e-10)


def test_varlen_max_seqlen_may_be_an_upper_bound():
    """max_seqlen_q/k bound the longest sequences from above (flash-attn's contract): larger ones change nothing."""
    q, k, v, cq, ck = _packed([5, 0, 17], [5, 3, 20], 2, 1, 8)
    want = flash_attention_varlen(q, k, v, cq, ck, causal=True, return_lse=True)
    got = flash_attention_varlen(q, k, v, cq, ck, causal=True, return_lse=True, max_seqlen_q=64, max_seqlen_k=20)
    assert all(torch.equal(a, b) for a, b in zip(want, got))


def test_varlen_never_mixes_documents():
    """Changing one document's keys changes no other document's output, and a NaN in one document's q, k, v or dO
    stays out of the other's output and gradients."""
    q, k, v, cq, ck = _packed([6, 6], [6, 6], 2, 2, 8)
    a = flash_attention_varlen(q, k, v, cq, ck)
    k2 = k.clone()
    k2[6:] += torch.randn(6, 2, 8, dtype=F64)
    b = flash_attention_varlen(q, k2, v, cq, ck)
    assert torch.equal(a[:6], b[:6]) and not torch.allclose(a[6:], b[6:])
    # nor does a NaN in one document's q, k, v or output gradient reach another's output or gradients
    qn, kn, vn = (t.clone() for t in (q, k, v))
    do = torch.randn_like(q)
    don = do.clone()
    for t in (qn, kn, vn, don):
        t[6] = float("nan")

    def run(q, k, v, do):
        q, k, v = (t.clone().requires_grad_() for t in (q, k, v))
        out = flash_attention_varlen(q, k, v, cq, ck, causal=True)
        return (out, *torch.autograd.grad(out, (q, k, v), do))

    for clean, poisoned in zip(run(q, k, v, do), run(qn, kn, vn, don)):
        assert torch.equal(clean[:6], poisoned[:6]) and poisoned[6:].isnan().any()


def test_deterministic_backward_is_bit_identical():
    q, k, v = (t.requires_grad_() for t in qkv(2, 4, 1, 70, 70, 16))
    dout = torch.randn(2, 4, 70, 16, dtype=F64)
    runs = [torch.autograd.grad(flash_attention(q, k, v, causal=True, window=(20, 0), deterministic=True),
                                (q, k, v), dout) for _ in range(3)]
    assert all(torch.equal(a, b) for r in runs[1:] for a, b in zip(runs[0], r))


@pytest.mark.parametrize("causal", [False, True])
def test_forward_backward_halves_compose_across_key_blocks(causal):
    """Two key halves: attention_forward's (out, lse) merged with ⊕ equal the whole; attention_backward given
    the whole row's out and lse gives each half's share of the gradient (the ring-attention identity)."""
    q, k, v = qkv(1, 4, 2, 24, 24, 8)
    dout = torch.randn(1, 4, 24, 8, dtype=F64)
    o, l = attention_forward(q, k, v, causal=causal)
    torch.testing.assert_close(o, attention_ref(q, k, v, causal=causal)[0], rtol=0, atol=1e-12)
    # halves: keys 0..11 and 12..23 (non-causal so that the halves need no offsets)
    o1, l1 = attention_forward(q, k[:, :, :12], v[:, :, :12])
    o2, l2 = attention_forward(q, k[:, :, 12:], v[:, :, 12:])
    m = torch.maximum(l1, l2)
    w1, w2 = torch.exp(l1 - m), torch.exp(l2 - m)
    merged = (o1 * w1[..., None] + o2 * w2[..., None]) / (w1 + w2)[..., None]
    o_all, l_all = attention_forward(q, k, v)
    torch.testing.assert_close(merged, o_all, rtol=0, atol=1e-12)
    dq1, dk1, dv1 = attention_backward(dout, q, k[:, :, :12], v[:, :, :12], o_all, l_all)
    dq2, dk2, dv2 = attention_backward(dout, q, k[:, :, 12:], v[:, :, 12:], o_all, l_all)
    qa, ka, va = (t.clone().requires_grad_() for t in (q, k, v))
    (attention_ref(qa, ka, va)[0] * dout).sum().backward()
    torch.testing.assert_close(dq1 + dq2, qa.grad, rtol=0, atol=1e-10)
    torch.testing.assert_close(torch.cat([dk1, dk2], 2), ka.grad, rtol=0, atol=1e-10)
    torch.testing.assert_close(torch.cat([dv1, dv2], 2), va.grad, rtol=0, atol=1e-10)


@pytest.mark.parametrize("variant", [dict(window=(6, 0)), dict(softcap=3.0), dict(alibi="H"),
                                     dict(window=(3, 0), softcap=2.0, alibi="BH")], ids=str)
def test_flash_decode_variants(variant):
    B, H, Hkv, Nq, L, D = 3, 4, 2, 2, 40, 16
    q = torch.randn(B, H, Nq, D, dtype=F64)
    kc, vc = torch.randn(B, Hkv, L, D, dtype=F64), torch.randn(B, Hkv, L, D, dtype=F64)
    lens = [40, 9, 1]
    kw = _kwargs(variant, B, H)
    out, lse = flash_decode(q, kc, vc, cache_seqlens=lens, **kw)
    for b, n in enumerate(lens):
        ref_kw = dict(kw)
        if "alibi_slopes" in ref_kw and ref_kw["alibi_slopes"].dim() == 2:
            ref_kw["alibi_slopes"] = ref_kw["alibi_slopes"][b:b + 1]
        o, l = attention_ref(q[b:b + 1], kc[b:b + 1, :, :n], vc[b:b + 1, :, :n], causal=True, **ref_kw)
        torch.testing.assert_close(out[b:b + 1], o, rtol=0, atol=1e-12)
        torch.testing.assert_close(lse[b:b + 1], l, rtol=0, atol=1e-12)


# -- bad values: one clear error each, nothing computed --------------------------------------------------


def _bad(call, exc, words):
    with pytest.raises(exc) as e:
        call()
    for w in words:
        assert w in str(e.value), (w, str(e.value))


@pytest.mark.parametrize("kw, exc, words", [
    (dict(window=(-3, 0)), ValueError, ["window", ">= -1"]),
    (dict(window=(2, 5), causal=True), ValueError, ["causal=True", "right"]),
    (dict(window=[1]), TypeError, ["window", "pair"]),
    (dict(softcap=0.0), ValueError, ["softcap", "> 0"]),
    (dict(softcap=-1), ValueError, ["softcap"]),
    (dict(softcap=math.inf), ValueError, ["softcap", "finite"]),
    (dict(alibi_slopes=torch.ones(3)), ValueError, ["alibi_slopes", "(H,) = (4,)"]),
    (dict(alibi_slopes=torch.ones(2, 2)), ValueError, ["alibi_slopes", "(B, H) = (1, 4)"]),
    (dict(alibi_slopes=torch.ones(4, dtype=torch.float16)), TypeError, ["alibi_slopes", "float32"]),
    (dict(alibi_slopes=[0.5] * 4), TypeError, ["alibi_slopes", "Tensor"]),
    (dict(deterministic=1), TypeError, ["deterministic"]),
])
def test_bad_variant_values(kw, exc, words):
    q, k, v = qkv(1, 4, 2, 8, 8, 8)
    _bad(lambda: flash_attention(q, k, v, **kw), exc, words)
    dkw = {key: val for key, val in kw.items() if key != "deterministic"}
    if dkw and "causal" not in dkw:
        _bad(lambda: flash_decode(q[:, :, :1], k, v, **dkw), exc, words)


@pytest.mark.parametrize("cu_q, cu_k, extra, exc, words", [
    ([0, 3, 2, 10], [0, 3, 5, 12], {}, ValueError, ["cu_seqlens_q", "non-decreasing"]),
    ([1, 3, 5, 10], [0, 3, 5, 12], {}, ValueError, ["cu_seqlens_q", "start at 0"]),
    ([0, 3, 5, 9], [0, 3, 5, 12], {}, ValueError, ["cu_seqlens_q[-1] = 9", "10"]),
    ([0, 3, 5, 10], [0, 3, 12], {}, ValueError, ["same number of sequences"]),
    ([0, 3, 5, 10], [0, 3, 5, 11], {}, ValueError, ["cu_seqlens_k[-1] = 11", "12"]),
    ([0, 3, 5, 10], [0, 3, 5, 12], dict(max_seqlen_q=4), ValueError, ["max_seqlen_q = 4", "5"]),
    # off CUDA the values are checked even with both max_seqlen given
    ([0, 3, 2, 10], [0, 3, 5, 12], dict(max_seqlen_q=10, max_seqlen_k=12), ValueError, ["cu_seqlens_q",
                                                                                      "non-decreasing"]),
    # what the shapes alone say (checked on CUDA too): 3 sequences of at most 3 rows hold at most 9
    ([0, 3, 5, 10], [0, 3, 5, 12], dict(max_seqlen_q=3, max_seqlen_k=5), ValueError,
     ["max_seqlen_q = 3", "3 sequences of at most 3 rows", "10 packed rows"]),
    ([0, 3, 5, 10], [0, 3, 5, 12], dict(max_seqlen_k=-1), ValueError, ["max_seqlen_k", "non-negative int"]),
    ([0, 10], [0, 12], dict(alibi_slopes=torch.ones(2, 4)), ValueError, ["alibi_slopes", "(B, H) = (1, 4)"]),
])
def test_bad_varlen_inputs(cu_q, cu_k, extra, exc, words):
    q, k, v = torch.randn(10, 4, 8), torch.randn(12, 2, 8), torch.randn(12, 2, 8)
    cq, ck = torch.tensor(cu_q, dtype=torch.int32), torch.tensor(cu_k, dtype=torch.int32)
    _bad(lambda: flash_attention_varlen(q, k, v, cq, ck, **extra), exc, words)


def test_bad_varlen_types_and_shapes():
    q, k, v = torch.randn(10, 4, 8), torch.randn(12, 2, 8), torch.randn(12, 2, 8)
    cq, ck = torch.tensor([0, 10], dtype=torch.int32), torch.tensor([0, 12], dtype=torch.int32)
    _bad(lambda: flash_attention_varlen(q, k, v, [0, 10], ck), TypeError, ["cu_seqlens_q", "Tensor"])
    _bad(lambda: flash_attention_varlen(q, k, v, cq.float(), ck), TypeError, ["cu_seqlens_q", "int32"])
    _bad(lambda: flash_attention_varlen(q[None], k, v, cq, ck), ValueError, ["q", "3 dimensions"])
    _bad(lambda: flash_attention_varlen(q, k[:, :1].expand(12, 3, 8), v, cq, ck), ValueError, ["v must have shape"])
    _bad(lambda: flash_attention_varlen(q, torch.randn(12, 3, 8), torch.randn(12, 3, 8), cq, ck), ValueError,
         ["not a multiple"])


def test_top_level_names():
    for name in ("flash_attention_varlen", "attention_forward", "attention_backward", "Mask", "attention_ref_varlen"):
        assert getattr(attnlab, name) is not None
