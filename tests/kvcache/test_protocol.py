"""The model's KV-cache protocol (attnlab.kvcache.KVCacheProtocol, §8.2): both caches implement it,
generation through either gives the tokens of generation without a cache, and Transformer.forward
makes exactly the calls the protocol documents."""

import pytest
import torch

from attnlab.kvcache import ContiguousKVCache, KVCacheProtocol, PagedKVCache
from attnlab.model import ModelConfig, Transformer, compare, generate


def _model(seed: int, **kw) -> Transformer:
    cfg = ModelConfig.from_name("likesworld", **kw)
    torch.manual_seed(seed)
    m = Transformer(cfg).to(torch.float64).eval()
    with torch.no_grad():  # larger random weights, so attention is far from uniform
        for p in m.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return m


def _prompts(seed: int, lengths) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 32, (n,), generator=g).tolist() for n in lengths]


def test_both_caches_implement_the_protocol():
    caches = [ContiguousKVCache(n_layers=2), ContiguousKVCache(n_layers=2, attention="flash"),
              PagedKVCache(batch=1, kv_heads=4, head_dim=16, n_layers=2)]
    for c in caches:
        assert isinstance(c, KVCacheProtocol), type(c).__name__
    assert not isinstance(object(), KVCacheProtocol)


@pytest.mark.parametrize("kw", [{}, {"n_kv_heads": 2}, {"n_kv_heads": 1}, {"positions": "learned"}])
@pytest.mark.parametrize("cache,attention,splits", [
    ("contiguous", "reference", None), ("contiguous", "flash", 3), ("paged", "reference", None), ("paged", "reference", 2),
])
def test_generation_through_either_cache_matches_no_cache(kw, cache, attention, splits, seed):
    m = _model(seed, **kw)
    prompts = _prompts(seed, (1, 5, 5, 12, 19, 26))
    cached = generate(m, prompts, 8, cache=cache, attention=attention, num_splits=splits)
    plain = generate(m, prompts, 8, use_cache=False)
    c = compare(cached, plain)
    print(f"{kw} {cache}/{attention}/{splits}: {c}")
    assert cached.tokens == plain.tokens and c["identical"] == len(prompts)
    assert c["max_logit_diff"] < 1e-12
    assert cached.token_forwards == sum(len(p) + 7 for p in prompts)


class _Recorder:
    """Exactly the protocol's members, delegating to a real cache and recording the calls."""

    def __init__(self, inner):
        self.inner, self.calls = inner, []

    @property
    def length(self):
        self.calls.append(("length",))
        return self.inner.length

    def start_position(self, layer):
        self.calls.append(("start_position", layer))
        return self.inner.start_position(layer)

    def attend(self, layer, q, k, v, positions, return_probs=False):
        self.calls.append(("attend", layer, q.shape[2], positions.tolist()))
        return self.inner.attend(layer, q, k, v, positions, return_probs)

    def commit(self, n_new):
        self.calls.append(("commit", n_new))
        return self.inner.commit(n_new)


@pytest.mark.parametrize("make", [lambda: ContiguousKVCache(n_layers=2),
                                  lambda: PagedKVCache(batch=2, kv_heads=4, head_dim=16, n_layers=2,
                                                       page_size=4, dtype=torch.float64)])
def test_forward_makes_the_documented_calls(make, seed):
    m = _model(seed)
    rec = _Recorder(make())
    assert isinstance(rec, KVCacheProtocol)
    rec.calls.clear()  # isinstance reads the ``length`` property
    tok = torch.randint(0, 32, (2, 7), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        m(tok[:, :5], cache=rec)
        first = list(rec.calls)
        rec.calls.clear()
        out = m(tok[:, 5:], cache=rec)
    assert first == [("start_position", 0), ("attend", 0, 5, [0, 1, 2, 3, 4]),
                     ("start_position", 1), ("attend", 1, 5, [0, 1, 2, 3, 4]), ("commit", 5)]
    assert rec.calls == [("start_position", 0), ("attend", 0, 2, [5, 6]),
                         ("start_position", 1), ("attend", 1, 2, [5, 6]), ("commit", 2)]
    assert rec.inner.length == 7
    with torch.no_grad():
        assert (out - m(tok)[:, 5:]).abs().max() < 1e-12


def test_paged_cache_refuses_positions_it_cannot_attend_from():
    cache = PagedKVCache(batch=1, kv_heads=1, head_dim=4, dtype=torch.float64)
    q = k = v = torch.zeros(1, 1, 2, 4, dtype=torch.float64)
    with pytest.raises(ValueError, match="positions must be 0 .. 1"):
        cache.attend(0, q, k, v, torch.tensor([3, 4]))
    assert cache.length == 0 and cache.layer_seqlens(0).tolist() == [0]  # nothing written
