"""attnlab.softmax (§4): the three softmaxes, their counts, the summary and its merge ⊕."""

import math
import random

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnlab.softmax import (
    AttnState,
    SoftmaxCounts,
    Summary,
    expected_rescales,
    merge,
    merge_factors,
    naive_softmax,
    online_softmax,
    safe_softmax,
    summarize,
)

SOFTMAXES = [naive_softmax, safe_softmax, online_softmax]


def _np(seed=None):
    return np.random.default_rng(seed if seed is not None else torch.randint(0, 2**31, ()).item())


# -- the three softmaxes agree with torch.softmax --------------------------------------------------


@pytest.mark.parametrize("f", SOFTMAXES)
@pytest.mark.parametrize("shape", [(1,), (7,), (3, 97), (2, 3, 1025)])
def test_softmaxes_match_torch(f, shape):
    x = torch.randn(shape, dtype=torch.float64) * 3
    want = torch.softmax(x, dim=-1)
    got_t = f(x)
    got_np = f(x.numpy())
    assert isinstance(got_t, torch.Tensor) and isinstance(got_np, np.ndarray)
    # relative: a row's sum of up to 1025 exponentials rounds differently from torch's (a few ulps)
    torch.testing.assert_close(got_t, want, rtol=1e-14, atol=1e-300)
    np.testing.assert_allclose(got_np, want.numpy(), rtol=1e-14, atol=1e-300)


@pytest.mark.parametrize("f", SOFTMAXES)
def test_counted_loop_equals_vectorised(f):
    x = _np().standard_normal((3, 50)) * 4
    c = SoftmaxCounts()
    np.testing.assert_allclose(f(x, counts=c), f(x), rtol=0, atol=1e-15)
    t = torch.from_numpy(x).to(torch.bfloat16)  # numpy has no bfloat16: the loop runs in float32
    y = f(t, counts=SoftmaxCounts())
    assert y.dtype == torch.bfloat16
    torch.testing.assert_close(y.float(), torch.softmax(t.float(), -1), rtol=0, atol=1e-2)


@pytest.mark.parametrize("f,passes", [(naive_softmax, 2), (safe_softmax, 3), (online_softmax, 2)])
def test_passes_and_reads(f, passes):
    x = _np().standard_normal((2, 300))
    c = SoftmaxCounts()
    f(x, counts=c)
    assert c.passes == passes
    assert c.reads == passes * x.size
    assert c.writes == x.size


def _records(x):
    """Independent count: positions k >= 2 (1-based) where x_k beats every earlier value."""
    prev = np.maximum.accumulate(x)[:-1]
    return [k + 2 for k in np.nonzero(x[1:] > prev)[0]]


def test_online_rescales_are_the_running_maximum_records():
    x = _np().standard_normal(4096)
    c = SoftmaxCounts()
    online_softmax(x, counts=c)
    assert c.rescale_at == _records(x)
    assert c.rescales == len(_records(x))
    # sorted input: every element is a new maximum; reversed: never
    c_up, c_down = SoftmaxCounts(), SoftmaxCounts()
    online_softmax(np.sort(x), counts=c_up)
    online_softmax(np.sort(x)[::-1].copy(), counts=c_down)
    assert (c_up.rescales, c_down.rescales) == (4095, 0)


def test_expected_rescales_formula_and_average():
    # Σ_{k=2}^{N} 1/k = H_N - 1 ≈ ln N + γ - 1 + 1/(2N)
    n = 4096
    approx = math.log(n) + 0.5772156649015329 - 1 + 1 / (2 * n)
    assert abs(expected_rescales(n) - approx) < 1e-6
    assert round(expected_rescales(n), 1) == 7.9  # the lecture's "expectation 7.9"
    assert expected_rescales(1) == 0
    # the counted loop, averaged over 200 random rows of 64, lands on the expectation
    x = _np().standard_normal((200, 64))
    c = SoftmaxCounts()
    online_softmax(x, counts=c)
    mean = c.rescales / 200
    print("mean rescales", mean, "expected", expected_rescales(64))
    assert abs(mean - expected_rescales(64)) < 0.5  # standard error ≈ 0.11


# -- overflow (§4.1) ---------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_naive_overflows_where_exp_does_and_safe_does_not(dtype):
    threshold = math.log(float(np.finfo(dtype).max))  # 88.72 for float32, 11.09 for float16
    below = dtype(threshold - 0.05)
    above = dtype(threshold + 0.05)
    with np.errstate(over="ignore"):
        assert np.isfinite(np.exp(below)) and np.isinf(np.exp(above))
    x = np.array([0.0, 1.0, float(above)], dtype=dtype)
    assert np.isnan(naive_softmax(x)).any()
    assert np.isnan(naive_softmax(x, counts=SoftmaxCounts())).any()
    want = torch.softmax(torch.tensor(x, dtype=torch.float64), -1).numpy()
    for f in (safe_softmax, online_softmax):
        for y in (f(x), f(x, counts=SoftmaxCounts()), f(torch.from_numpy(x)).numpy()):
            assert y.dtype == dtype
            np.testing.assert_allclose(y.astype(np.float64), want, atol=2e-3)


def test_float16_safe_with_scores_in_the_hundreds():
    x = torch.tensor([[300.0, 299.0, 297.5, 100.0, -250.0]], dtype=torch.float16)
    want = torch.softmax(x.double(), -1)
    for f in (safe_softmax, online_softmax):
        y = f(x)
        assert y.dtype == torch.float16 and torch.isfinite(y).all()
        torch.testing.assert_close(y.double(), want, rtol=0, atol=1e-3)
    assert torch.isnan(naive_softmax(x)).any()


def test_rows_of_minus_inf_are_zero_for_safe_and_online():
    x = torch.full((2, 5), -math.inf, dtype=torch.float64)
    x[1, 2] = 0.3
    for f in (safe_softmax, online_softmax):
        y = f(x)
        assert not y.isnan().any() and (y[0] == 0).all() and y[1, 2] == 1
        y = f(x.numpy(), counts=SoftmaxCounts())
        assert not np.isnan(y).any() and (y[0] == 0).all()


# -- the summary and the merge ⊕ (§4.4) ------------------------------------------------------------


def _merge_random_tree(parts, rng):
    parts = list(parts)
    while len(parts) > 1:
        i = rng.randrange(len(parts) - 1)
        parts[i:i + 2] = [merge(parts[i], parts[i + 1]) if rng.random() < 0.5 else merge(parts[i + 1], parts[i])]
    return parts[0]


@settings(max_examples=60, deadline=None)
@given(values=st.lists(st.floats(-200, 200) | st.just(-math.inf), min_size=1, max_size=60),
       cuts=st.lists(st.integers(0, 60), max_size=12), seed=st.integers(0, 2**32 - 1))
def test_merge_any_grouping_and_order_matches_logsumexp(values, cuts, seed):
    x = np.array(values, dtype=np.float64)
    bounds = sorted({0, len(x), *[c for c in cuts if c <= len(x)]})
    segments = [x[a:b] for a, b in zip(bounds[:-1], bounds[1:])] + [x[:0]]  # an empty one too
    rng = random.Random(seed)
    rng.shuffle(segments)
    s = _merge_random_tree([summarize(seg) for seg in segments], rng)
    want = torch.logsumexp(torch.from_numpy(x), 0).item()
    if want == -math.inf:
        assert s.lse == -math.inf and s.l == 0
    else:
        assert abs(float(s.lse) - want) <= 1e-12 * max(1.0, abs(want))


def test_merge_of_two_empty_sides_is_empty_not_nan():
    for e in (Summary(-math.inf, 0.0), Summary(np.array([-math.inf]), np.array([0.0])),
              Summary(torch.tensor([-math.inf]), torch.tensor([0.0]))):
        s = merge(e, e)
        m, l, lse = (float(np.asarray(t).reshape(-1)[0]) for t in (s.m, s.l, s.lse))
        assert m == -math.inf and l == 0 and lse == -math.inf
    m, ca, cb = merge_factors(Summary(-math.inf, 0.0), Summary(1.5, 2.0))
    assert float(m) == 1.5 and float(ca) == 0 and float(cb) == 1


def test_merge_rejects_mixed_types():
    s = Summary(0.0, 1.0)
    with pytest.raises(TypeError, match="Summary or two AttnState"):
        merge(s, AttnState(0.0, 1.0, np.zeros(2)))
    with pytest.raises(TypeError, match="x must be a numpy array or a torch tensor, got list"):
        safe_softmax([1.0, 2.0])
    with pytest.raises(TypeError, match="floating-point"):
        summarize(np.arange(3))
    with pytest.raises(ValueError, match="block must be a positive integer, got 0"):
        online_softmax(np.ones(3), block=0)


def test_float32_merge_order_differs_in_the_last_digits():
    x = torch.randn(10_000, dtype=torch.float64) * 4
    want = torch.logsumexp(x, 0).item()
    x32 = x.float().numpy()
    s = Summary(np.float32(-np.inf), np.float32(0))
    for xj in x32:  # left to right, one element at a time
        s = merge(s, Summary(xj, np.float32(1)))
    assert np.asarray(s.l).dtype == np.float32
    err = abs(float(s.lse) - want)
    print("float32 one-by-one vs float64", err)
    assert 0 < err < 5e-5  # a few ulps of a value near 15; never exact


def test_attention_state_blocks_equal_softmax_times_v():
    s = torch.randn(3, 37, dtype=torch.float64) * 2
    v = torch.randn(37, 5, dtype=torch.float64)
    want = torch.softmax(s, -1) @ v
    st_ = AttnState.from_scores(s[:, :0], v[:0])
    for a in range(0, 37, 8):
        st_ = merge(st_, AttnState.from_scores(s[:, a:a + 8], v[a:a + 8]))
    torch.testing.assert_close(st_.finish(), want, rtol=0, atol=1e-14)
    torch.testing.assert_close(st_.lse, torch.logsumexp(s, -1), rtol=0, atol=1e-13)
    empty = AttnState(np.array(-np.inf), np.array(0.0), np.zeros(4))
    assert (empty.finish() == 0).all() and (merge(empty, empty).finish() == 0).all()
