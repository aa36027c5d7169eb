"""Flash-Decoding kernels with the variants (attnlab.gpu.decode, §8.4 with attnlab.variants): sliding
windows, softcapping, ALiBi, over contiguous and paged caches.

Without CUDA the kernels run in Triton's CPU interpreter (conftest sets TRITON_INTERPRET=1), on tiny
shapes. The oracle is ``attention_ref`` in float64 on each sequence's first cache_seqlens[b] keys —
the dense equivalent: its bottom-right alignment puts query i at position cache_seqlens[b] − Nq + i,
as the decode call does. Criterion (tests.helpers): error <= 2 × the same-dtype reference's error +
a few roundings of the output. Keys outside the window are poisoned with NaN, so a kernel that read
one (K or V) would put NaN in the output: the window's keys are the only ones streamed.
"""

import math

import pytest
import torch
from tests.helpers import abs_err, within_criterion

from attnlab import cost
from attnlab.kvcache import PagedKVCache
from attnlab.reference import attention_ref
from attnlab.variants import Mask

pytest.importorskip("triton")
from attnlab.gpu import flash_decode_triton  # noqa: E402
from attnlab.gpu.decode import decode_config_for, streamed_keys  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"


def _inputs(B, H, Hkv, Nq, D, L, dtype=torch.float16):
    q = torch.randn(B, H, Nq, D, dtype=dtype, device=DEV)
    k = torch.randn(B, Hkv, L, D, dtype=dtype, device=DEV)
    v = torch.randn(B, Hkv, L, D, dtype=dtype, device=DEV)
    return q, k, v


def _poison_outside(k, v, lens, Nq, left):
    """NaN in every cached key no query of the step can see: before seqlen − Nq − left and past seqlen."""
    for b, n in enumerate(lens):
        first = 0 if left < 0 else max(0, n - Nq - left)
        for x in (k, v):
            x[b, :, :first] = float("nan")
            x[b, :, n:] = float("nan")


def _check(q, k, v, lens, out, lse, *, causal=True, window=None, softcap=None, slopes=None, scale=None):
    """out/lse of each sequence vs the float64 oracle on its first lens[b] keys (clean copies of k, v)."""
    assert not torch.isnan(out).any() and not torch.isnan(lse).any(), "NaN: a key outside the window was read"
    err = err_ref = lse_err = 0.0
    want_all = []
    for b, n in enumerate(lens):
        kw = dict(causal=causal, window=window, softcap=softcap, scale=scale)
        sl = None if slopes is None else slopes.expand(len(lens), q.shape[1])[b:b + 1]
        qb, kb, vb = q[b:b + 1], k[b:b + 1, :, :n], v[b:b + 1, :, :n]
        o64, l64 = attention_ref(qb.double(), kb.double(), vb.double(), alibi_slopes=None if sl is None else sl.double(),
                                 **kw)
        o_same, _ = attention_ref(qb, kb, vb, alibi_slopes=sl, **kw)
        err = max(err, abs_err(out[b:b + 1], o64))
        err_ref = max(err_ref, abs_err(o_same, o64))
        want_all.append(o64)
        seen = torch.isfinite(l64)
        assert torch.equal(torch.isfinite(lse[b:b + 1]), seen), "rows that see no key: lse = -inf, and only they"
        assert (out[b:b + 1][~seen] == 0).all()
        if seen.any():
            rel = (lse[b:b + 1][seen].double() - l64[seen]).abs() / l64[seen].abs().clamp(min=1)
            lse_err = max(lse_err, rel.max().item())
    want = torch.cat(want_all)
    print(f"lens {lens}: err {err:.2e}, same-dtype reference {err_ref:.2e}, lse rel err {lse_err:.2e}")
    assert within_criterion(err, err_ref, want, q.dtype), (err, err_ref)
    assert lse_err <= 1e-5


def _paged(q, k, v, lens, page_size):
    seqlens = torch.tensor(lens, dtype=torch.int32, device=DEV)
    cache = PagedKVCache.from_dense(k, v, seqlens, page_size=page_size, shuffle=True)
    return dict(k_cache=cache.k_pages[0], v_cache=cache.v_pages[0], cache_seqlens=cache.seqlens,
                block_table=cache.block_table)


# B, H, Hkv, Nq, D, lens, splits, causal, window, softcap, alibi
CASES = {
    "causal-window": (3, 4, 2, 1, 32, [97, 1, 40], 3, True, (20, -1), None, None),
    "window-both-sides-3q": (2, 4, 1, 3, 32, [50, 9], 2, False, (5, 1), None, None),
    "softcap": (2, 4, 2, 2, 64, [45, 17], 2, True, None, 2.0, None),
    "alibi-noncausal": (2, 4, 4, 1, 32, [33, 70], 2, False, None, None, "BH"),
    "all-gqa": (2, 8, 2, 2, 32, [81, 30], 3, True, (17, 0), 5.0, "H"),
}


@pytest.mark.parametrize("paged", [False, True], ids=["contiguous", "paged"])
@pytest.mark.parametrize("case", list(CASES))
def test_variants_match_reference(case, paged):
    B, H, Hkv, Nq, D, lens, splits, causal, window, softcap, alibi = CASES[case]
    q, k, v = _inputs(B, H, Hkv, Nq, D, max(lens) + 3)
    slopes = None
    if alibi == "BH":
        slopes = torch.rand(B, H, dtype=torch.float32, device=DEV) * 0.5
    elif alibi == "H":
        slopes = 2.0 ** -torch.arange(1, H + 1, dtype=torch.float32, device=DEV)
    kp, vp = k.clone(), v.clone()
    _poison_outside(kp, vp, lens, Nq, -1 if window is None else window[0])
    seqlens = torch.tensor(lens, dtype=torch.int32, device=DEV)
    caches = _paged(q, kp, vp, lens, 16) if paged else dict(k_cache=kp, v_cache=vp, cache_seqlens=seqlens)
    out, lse = flash_decode_triton(q, num_splits=splits, causal=causal, window=window, softcap=softcap,
                                   alibi_slopes=slopes, **caches)
    assert out.shape == q.shape and lse.shape == (B, H, Nq) and lse.dtype == torch.float32
    _check(q, k, v, lens, out, lse, causal=causal, window=window, softcap=softcap, slopes=slopes)


def test_paged_equals_contiguous_with_window_and_splits():
    """Tiles start at multiples of BLOCK_N also when the window starts mid-tile, so a paged cache and
    a contiguous one run the same tiles in the same order: equal to the last bit, for any split count;
    every split count gives the oracle's answer."""
    lens, window = [77, 40, 5], (22, 0)
    q, k, v = _inputs(3, 4, 2, 2, 32, 80, torch.bfloat16)
    seqlens = torch.tensor(lens, dtype=torch.int32, device=DEV)
    pages = _paged(q, k, v, lens, 32)
    cfg = decode_config_for(q, pages["k_cache"], pages["block_table"])  # the paged call's configuration
    for s in (1, 2, 5):
        out_c, lse_c = flash_decode_triton(q, k, v, cache_seqlens=seqlens, num_splits=s, window=window, softcap=3.0,
                                           config=cfg)
        out_p, lse_p = flash_decode_triton(q, num_splits=s, window=window, softcap=3.0, **pages)
        assert torch.equal(out_p, out_c) and torch.equal(lse_p, lse_c)
        _check(q, k, v, lens, out_c, lse_c, window=window, softcap=3.0)


def test_long_cache_streams_only_the_window():
    """A 31-key window over a 2048-key cache: every key outside the window is NaN, the split count is
    the model's for the window's keys (num_splits=None), and the answer is the oracle's."""
    lens, Nq, left = [2048, 1500], 2, 30
    q, k, v = _inputs(2, 4, 2, Nq, 32, 2048)
    kp, vp = k.clone(), v.clone()
    _poison_outside(kp, vp, lens, Nq, left)
    seqlens = torch.tensor(lens, dtype=torch.int32, device=DEV)
    out, lse = flash_decode_triton(q, kp, vp, cache_seqlens=seqlens, window=(left, -1))
    _check(q, k, v, lens, out, lse, window=(left, -1))
    assert streamed_keys(capacity=2048, queries=Nq, mask=Mask(left, 0)) == left + Nq  # not 2048
    assert streamed_keys(capacity=2048, queries=Nq, mask=Mask(-1, 0)) == 2048
    # a 4K window over a 128K cache: about 4K keys per decode step, not 128K
    assert cost.decode_window_keys(seq=131072, window=(4095, 0)) == 4096


def test_rows_that_see_no_key():
    """window (0, 0), non-causal: each query sees only its own position; with 1 cached key and 3
    queries the first two sit before the cache and see nothing (out 0, lse -inf); an empty cache too."""
    q, k, v = _inputs(2, 2, 1, 3, 32, 8)
    seqlens = torch.tensor([1, 0], dtype=torch.int32, device=DEV)
    out, lse = flash_decode_triton(q, k, v, cache_seqlens=seqlens, num_splits=2, causal=False, window=(0, 0),
                                   alibi_slopes=torch.full((2,), 0.25, device=DEV))
    assert torch.isinf(lse[0, :, :2]).all() and torch.isfinite(lse[0, :, 2]).all()
    assert torch.isinf(lse[1]).all() and (out[1] == 0).all() and (out[0, :, :2] == 0).all()
    # the one visible pair: the output is that key's value exactly (rounded to the dtype)
    torch.testing.assert_close(out[0, :, 2], v[0, :, 0].expand(2, -1), rtol=0, atol=0)
    assert math.isfinite(lse[0, 0, 2].item())


@pytest.mark.parametrize("bad,err,match", [
    (dict(window=(3,)), TypeError, "window"),
    (dict(window=(-2, 0)), ValueError, "window"),
    (dict(window=(4, 2)), ValueError, "causal=True"),  # causal fixes the right side at 0
    (dict(softcap=0.0), ValueError, "softcap"),
    (dict(alibi_slopes=torch.ones(3)), ValueError, "alibi_slopes"),
    (dict(alibi_slopes=torch.ones(4, dtype=torch.float16)), TypeError, "alibi_slopes"),
])
def test_bad_variant_arguments(bad, err, match):
    q, k, v = _inputs(2, 4, 2, 1, 32, 20)
    with pytest.raises(err, match=match):
        flash_decode_triton(q, k, v, **bad)


# -- GPU (large shapes) -----------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("page_size", [None, 16, 64, 256])
@pytest.mark.parametrize("H,Hkv,Nq", [(32, 8, 1), (32, 4, 4)])
def test_gpu_window_softcap_alibi_large(page_size, H, Hkv, Nq):
    """Ragged lengths up to 16K, a 4K and a 1K window with softcap and ALiBi, the model's split count
    and a forced one, every key outside the window NaN; paged equal to contiguous to the last bit on the
    same configuration."""
    lens = [1, 1025, 4097, 16000]
    q, k, v = _inputs(len(lens), H, Hkv, Nq, 128, 16000, torch.bfloat16)
    slopes = 2.0 ** -(8 * torch.arange(1, H + 1, dtype=torch.float32, device=DEV) / H)
    for window in ((4095, 0), (1000, -1)):
        kp, vp = k.clone(), v.clone()
        _poison_outside(kp, vp, lens, Nq, window[0])
        seqlens = torch.tensor(lens, dtype=torch.int32, device=DEV)
        for splits in (None, 7):
            kw = dict(num_splits=splits, window=window, softcap=30.0, alibi_slopes=slopes)
            out_c, lse_c = flash_decode_triton(q, kp, vp, cache_seqlens=seqlens, **kw)
            if page_size is not None:  # against the contiguous cache on the paged call's configuration
                pages = _paged(q, kp, vp, lens, page_size)
                cfg = decode_config_for(q, pages["k_cache"], pages["block_table"])
                out_p, lse_p = flash_decode_triton(q, **pages, **kw)
                same_c = flash_decode_triton(q, kp, vp, cache_seqlens=seqlens, config=cfg, **kw)
                assert torch.equal(out_p, same_c[0]) and torch.equal(lse_p, same_c[1])
            _check(q, k, v, lens, out_c, lse_c, window=window, softcap=30.0, slopes=slopes)
