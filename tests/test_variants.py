"""attnlab.variants: the one meaning of windows, softcap and ALiBi, and the block arithmetic that lets the
fast paths skip K/V blocks — checked against brute force over the visibility grid."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnlab import attention_ref
from attnlab.reference import causal_mask
from attnlab.variants import Mask, alibi_bias, score_mod, softcap_grad

sides = st.integers(-1, 40)


def test_named_masks():
    assert Mask().dense and not Mask().causal
    assert Mask(-1, 0).causal and not Mask(-1, 0).dense
    # Mask(-1, 0) is the bottom-right causal mask, for Nq < Nk, Nq == Nk and Nq > Nk
    for nq, nk in ((5, 9), (9, 9), (9, 5)):
        assert torch.equal(Mask(-1, 0).grid(nq, nk), causal_mask(nq, nk))


def test_window_of_w_keys_sees_w_keys():
    W, N = 4, 12
    g = Mask(W - 1, 0).grid(N, N)
    assert g.sum(1).tolist() == [min(i + 1, W) for i in range(N)]
    # a row sees exactly keys i-W+1..i
    assert g[7].nonzero().flatten().tolist() == [4, 5, 6, 7]


@settings(max_examples=300)
@given(left=sides, right=sides, nq=st.integers(0, 50), nk=st.integers(0, 50), i0=st.integers(0, 50),
       di=st.integers(1, 20), j0=st.integers(0, 50), dj=st.integers(1, 20))
def test_block_kind_and_key_range_agree_with_the_grid(left, right, nq, nk, i0, di, j0, dj):
    m = Mask(left, right)
    off = nk - nq
    i0, j0 = min(i0, nq), min(j0, nk)
    i1, j1 = min(i0 + di, nq), min(j0 + dj, nk)
    # brute force over the visibility of the block's pairs
    i = torch.arange(i0, i1).unsqueeze(1)
    j = torch.arange(j0, j1).unsqueeze(0)
    vis = m.visible(i, j, off)
    want = "skip" if i1 <= i0 or j1 <= j0 or not vis.any() else ("full" if vis.all() else "mask")
    assert m.block_kind(i0, i1, j0, j1, off) == want
    lo, hi = m.key_range(i0, i1, off, nk)
    if i1 > i0 and nk:
        rows = m.visible(i, torch.arange(nk).unsqueeze(0), off)  # (rows, Nk)
        cols = rows.any(0).nonzero().flatten()
        if len(cols):
            assert (lo, hi) == (int(cols.min()), int(cols.max()) + 1)  # tight: no visible key left out
        else:
            assert lo >= hi


def test_score_mod_and_its_derivative():
    s = torch.linspace(-200, 200, 101, dtype=torch.float64)
    capped = score_mod(s, softcap=30.0)
    assert capped.abs().max() < 30 and torch.allclose(capped[50], s[50])
    x = s.clone().requires_grad_()
    (g,) = torch.autograd.grad(score_mod(x, softcap=30.0).sum(), x)
    torch.testing.assert_close(softcap_grad(capped, 30.0), g, rtol=0, atol=1e-14)
    i, j = torch.arange(3).unsqueeze(1), torch.arange(5).unsqueeze(0)
    b = alibi_bias(torch.tensor(0.5, dtype=torch.float64), i, j, 2)
    assert b[0, 2] == 0 and b[0, 4] == -1.0 and b[2, 0] == -2.0  # -slope·|i + off - j|


def test_reference_variants_from_first_principles():
    """attention_ref with the variants equals a softmax over a hand-built score matrix."""
    g = torch.Generator().manual_seed(3)
    q = torch.randn(2, 4, 6, 8, dtype=torch.float64, generator=g)
    k = torch.randn(2, 2, 9, 8, dtype=torch.float64, generator=g)
    v = torch.randn(2, 2, 9, 5, dtype=torch.float64, generator=g)
    slopes = torch.rand(2, 4, dtype=torch.float64, generator=g)
    out, lse = attention_ref(q, k, v, window=(2, 1), softcap=3.0, alibi_slopes=slopes)
    kk, vv = k.repeat_interleave(2, 1), v.repeat_interleave(2, 1)
    s = 3.0 * torch.tanh(q @ kk.transpose(-1, -2) / 8 ** 0.5 / 3.0)
    i, j = torch.arange(6).unsqueeze(1), torch.arange(9).unsqueeze(0)
    s = s - slopes[:, :, None, None] * (i + 3 - j).abs()
    s = s.masked_fill(~((j >= i + 3 - 2) & (j <= i + 3 + 1)), float("-inf"))
    torch.testing.assert_close(out, torch.softmax(s, -1) @ vv, rtol=0, atol=1e-13)
    torch.testing.assert_close(lse, torch.logsumexp(s, -1), rtol=0, atol=1e-13)


@pytest.mark.parametrize("window, causal, error", [
    ((-2, 0), False, ">= -1"),
    ((3,), False, "pair of ints"),
    ((1.5, 2), False, "pair of ints"),
    ((True, 0), False, "pair of ints"),
    ((4, 3), True, "right side at 0"),
    ("left", False, "pair of ints"),
])
def test_bad_windows(window, causal, error):
    q = torch.zeros(1, 1, 4, 8)
    with pytest.raises((ValueError, TypeError), match=error):
        attention_ref(q, q, q, window=window, causal=causal)


def test_causal_with_unbounded_or_zero_right_is_the_same_mask():
    q = torch.randn(1, 2, 7, 8, dtype=torch.float64)
    k = torch.randn(1, 2, 11, 8, dtype=torch.float64)
    a = attention_ref(q, k, k, causal=True, window=(3, -1))[0]
    b = attention_ref(q, k, k, causal=True, window=(3, 0))[0]
    c = attention_ref(q, k, k, causal=False, window=(3, 0))[0]
    assert torch.equal(a, b) and torch.equal(b, c)


def test_masks_do_not_import_sympy():
    """A masked call must not pull in sympy (torch.broadcast_shapes does: most of a second per process)."""
    import subprocess
    import sys

    code = ("import sys, torch, attnlab\n"
            "q = torch.randn(1, 2, 9, 8)\n"
            "attnlab.attention_ref(q, q, q, causal=True, window=(3, 0))\n"
            "attnlab.flash_attention(q, q, q, causal=True, window=(3, 0), softcap=5.0)\n"
            "assert 'sympy' not in sys.modules, 'sympy was imported'\n")
    r = subprocess.run([sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
