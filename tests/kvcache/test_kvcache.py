"""The paged KV cache (attnlab.kvcache.PagedKVCache, §8.2): append/gather round trips, page
bookkeeping, multi-layer commits, the model's protocol, and attention through it against the
reference (CPU)."""

import pytest
import torch

from attnlab.api import flash_decode
from attnlab.kvcache import PagedKVCache
from attnlab.model import ModelConfig, Transformer
from attnlab.reference import attention_ref


def _kv(B, Hkv, T, D, dtype=torch.float32):
    return torch.randn(B, Hkv, T, D, dtype=dtype), torch.randn(B, Hkv, T, D, dtype=dtype)


def test_append_then_gather_round_trip_ragged():
    cache = PagedKVCache(batch=3, kv_heads=2, head_dim=8, page_size=4)
    k1, v1 = _kv(3, 2, 7, 8)
    cache.append(k1, v1, lengths=[7, 1, 0])  # ragged prompt, padded on the right
    k2, v2 = _kv(3, 2, 1, 8)
    cache.append(k2, v2)  # one decode step for everybody
    assert cache.lengths == [8, 2, 1]
    k, v, lens = cache.gather()
    assert k.shape == (3, 2, 8, 8) and lens.tolist() == [8, 2, 1]
    want_k = [torch.cat([k1[0], k2[0]], 1), torch.cat([k1[1, :, :1], k2[1]], 1), k2[2]]
    want_v = [torch.cat([v1[0], v2[0]], 1), torch.cat([v1[1, :, :1], v2[1]], 1), v2[2]]
    for b, n in enumerate([8, 2, 1]):
        assert torch.equal(k[b, :, :n], want_k[b]) and torch.equal(v[b, :, :n], want_v[b])
        assert (k[b, :, n:] == 0).all()
    # pages: ceil(8/4) + ceil(2/4) + ceil(1/4) = 4 in use
    assert sum(len(cache.pages(b)) for b in range(3)) == 4
    assert cache.block_table.dtype == torch.int32 and cache.block_table.shape == (3, 2)


def test_page_layout_matches_block_table():
    """Token j of sequence b sits in page block_table[b, j // page_size], slot j % page_size."""
    k, v = _kv(2, 3, 37, 4)
    cache = PagedKVCache.from_dense(k, v, [37, 20], page_size=8, shuffle=True)
    table = cache.block_table
    for b, n in enumerate([37, 20]):
        for j in (0, 7, 8, n - 1):
            page, slot = table[b, j // 8].item(), j % 8
            assert torch.equal(cache.k_pages[0][page, slot], k[b, :, j])
            assert torch.equal(cache.v_pages[0][page, slot], v[b, :, j])


def test_pool_grows_or_refuses():
    k, v = _kv(1, 1, 40, 4)
    growing = PagedKVCache(batch=1, kv_heads=1, head_dim=4, page_size=4)  # starts with 4 pages
    growing.append(k, v)
    assert growing.num_pages >= 10 and growing.lengths == [40]
    assert torch.equal(growing.gather()[0][0, :, :40], k[0])
    fixed = PagedKVCache(batch=1, kv_heads=1, head_dim=4, page_size=4, num_pages=5)
    with pytest.raises(ValueError, match="more pages"):
        fixed.append(k, v)
    assert fixed.lengths == [0] and fixed.free_pages == 5  # a refused append changes nothing


def test_release_recycles_pages():
    cache = PagedKVCache(batch=2, kv_heads=1, head_dim=4, page_size=4, num_pages=6)
    cache.append(*_kv(2, 1, 12, 4))  # 3 pages each
    with pytest.raises(ValueError):
        cache.append(*_kv(2, 1, 4, 4))
    cache.release(0)
    assert cache.lengths == [0, 12] and cache.free_pages == 3 and cache.pages(0) == []
    k, v = _kv(2, 1, 4, 4)
    cache.append(k, v, lengths=[4, 0])
    assert cache.lengths == [4, 12]
    assert torch.equal(cache.gather()[0][0, :, :4], k[0])


def test_multi_layer_commit_keeps_the_start_position():
    """The §8.2 bug cannot happen: layer 1 sees the committed length, not layer 0's new tokens."""
    cache = PagedKVCache(batch=1, kv_heads=1, head_dim=4, n_layers=2, page_size=4)
    cache.append(*_kv(1, 1, 5, 4), layer=0)
    assert cache.start_position(1) == 0 and cache.length == 0
    assert cache.layer_seqlens(0).tolist() == [5] and cache.layer_seqlens(1).tolist() == [0]
    with pytest.raises(ValueError, match="same new tokens"):
        cache.commit(5)
    cache.append(*_kv(1, 1, 5, 4), layer=1)
    cache.commit(5)
    assert cache.length == 5 and cache.start_position(0) == 5


def test_attention_through_the_cache_matches_reference():
    B, H, Hkv, D = 2, 4, 2, 16
    cache = PagedKVCache(batch=B, kv_heads=Hkv, head_dim=D, page_size=4, dtype=torch.float64)
    cache.append(*_kv(B, Hkv, 11, D, torch.float64), lengths=[11, 6])
    q = torch.randn(B, H, 1, D, dtype=torch.float64)
    out, lse = cache.attention(q, num_splits=3)
    k, v, lens = cache.gather()
    for b, n in enumerate(lens.tolist()):
        ro, rl = attention_ref(q[b:b + 1], k[b:b + 1, :, :n], v[b:b + 1, :, :n], causal=True)
        assert (out[b:b + 1] - ro).abs().max() < 1e-12 and (lse[b:b + 1] - rl).abs().max() < 1e-12


def test_model_protocol_attend_commit():
    """attend(layer, q, k, v, positions) appends and attends bottom-right causally; commit advances."""
    cache = PagedKVCache(batch=1, kv_heads=2, head_dim=8, n_layers=1, page_size=4, dtype=torch.float64)
    q = torch.randn(1, 4, 3, 8, dtype=torch.float64)
    k, v = _kv(1, 2, 3, 8, torch.float64)
    out, probs = cache.attend(0, q, k, v, torch.arange(3))
    assert probs is None and cache.length == 0  # not committed until the model says so
    cache.commit(3)
    ro, _ = attention_ref(q, k, v, causal=True)
    assert (out - ro).abs().max() < 1e-12 and cache.length == 3
    out_p, probs = cache.attend(0, q[:, :, :1], *_kv(1, 2, 1, 8, torch.float64), None, return_probs=True)
    assert probs.shape == (1, 4, 1, 4) and torch.allclose(probs.sum(-1), torch.ones(1, 4, 1, dtype=torch.float64))


@pytest.mark.parametrize("kw,err", [
    (dict(batch=0), ValueError), (dict(page_size=-1), ValueError), (dict(dtype=torch.int32), TypeError),
])
def test_bad_construction(kw, err):
    args = dict(batch=1, kv_heads=1, head_dim=4) | kw
    with pytest.raises(err):
        PagedKVCache(**args)


def test_bad_append_changes_nothing():
    cache = PagedKVCache(batch=2, kv_heads=1, head_dim=4, page_size=4)
    with pytest.raises(ValueError, match="shape"):
        cache.append(*_kv(2, 2, 3, 4))  # 2 heads, cache has 1
    with pytest.raises(ValueError, match="lengths"):
        cache.append(*_kv(2, 1, 3, 4), lengths=[4, 1])
    assert cache.lengths == [0, 0] and all(not cache.pages(b) for b in range(2)) and cache.free_pages == 4


def test_flash_decode_checks_the_pages_in_use():
    """The cache's layout through the public flash_decode: a page id outside the pool is an error
    only where the lengths use it; lengths past the block table's capacity are errors."""
    q = torch.randn(1, 2, 1, 4, dtype=torch.float64)
    pages = torch.randn(3, 4, 1, 4, dtype=torch.float64)
    table = torch.tensor([[0, 5]], dtype=torch.int32)
    out, _ = flash_decode(q, pages, pages, cache_seqlens=torch.tensor([4], dtype=torch.int32), block_table=table)
    ref, _ = attention_ref(q, pages[0].transpose(0, 1)[None], pages[0].transpose(0, 1)[None])
    assert (out - ref).abs().max() < 1e-12  # page 5 is not in use at length 4
    with pytest.raises(ValueError, match="page ids"):
        flash_decode(q, pages, pages, cache_seqlens=torch.tensor([5], dtype=torch.int32), block_table=table)
    with pytest.raises(ValueError, match=r"\[0, 8\]"):
        flash_decode(q, pages, pages, cache_seqlens=torch.tensor([9], dtype=torch.int32), block_table=table)


def test_model_runs_incrementally_through_the_paged_cache():
    """attnlab's model run incrementally over a 2-layer PagedKVCache equals the full forward."""
    cfg = ModelConfig()
    m = Transformer(cfg).eval()
    toks = torch.randint(0, cfg.vocab_size, (2, 10))
    cache = PagedKVCache(batch=2, kv_heads=cfg.kv_heads, head_dim=cfg.head_dim, n_layers=cfg.n_layers, page_size=4)
    with torch.no_grad():
        full = m(toks)
        inc = torch.cat([m(toks[:, :7], cache=cache), m(toks[:, 7:8], cache=cache), m(toks[:, 8:], cache=cache)], 1)
    assert cache.lengths == [10, 10]
    assert (inc - full).abs().max() < 1e-5
