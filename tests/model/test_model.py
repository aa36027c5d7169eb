"""The tiny transformer's parts (no training needed): config presets, RoPE, the three attention
implementations against each other (float64), flash attention with several blocks per sequence,
the contiguous KV cache against the full forward (reference and Flash-Decoding paths, GQA), the
injected start-position bug, generation, head masks, AdamW."""

import math

import pytest
import torch

from attnlab.model import ContiguousKVCache, ModelConfig, Transformer, compare, generate
from attnlab.model.train import AdamW, clip_grad_norm, cpu_threads
from attnlab.model.transformer import apply_rope, rope_cos_sin


@pytest.fixture(autouse=True)
def _free_cores():
    """Tiny matmuls on oversubscribed cores are 10-50x slower: use the cores that are free."""
    with cpu_threads():
        yield


def _model(dtype=torch.float64, **kw):
    cfg = ModelConfig.from_name("likesworld", **kw)
    m = Transformer(cfg).to(dtype).eval()
    with torch.no_grad():  # fresh random weights of a "trained" size, so attention is not uniform
        for p in m.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return m


def _tokens(B, N, vocab=32):
    return torch.randint(0, vocab, (B, N))


def test_preset_is_the_lecture_model():
    cfg = ModelConfig.from_name("likesworld")
    n = Transformer(cfg).num_parameters()
    print(f"likesworld: {cfg.n_layers} layers, {cfg.n_heads} heads x {cfg.head_dim}, {n:,} parameters")
    assert (cfg.n_layers, cfg.n_heads) == (2, 4)
    assert 80_000 <= n <= 90_000  # "about 85 K parameters" (§2.2)
    assert ModelConfig.from_name("likesworld", attention="sdpa").attention == "sdpa"


@pytest.mark.parametrize("bad", [dict(n_heads=3), dict(attention="fast"), dict(positions="alibi"),
                                 dict(n_kv_heads=3), dict(d_model=0), dict(n_layers=True)])
def test_config_rejects_bad_values(bad):
    with pytest.raises(ValueError, match=next(iter(bad)) if "n_kv" not in str(bad) else "n_kv_heads"):
        ModelConfig.from_name("likesworld", **bad)


def test_unknown_preset():
    with pytest.raises(ValueError, match="unknown model preset"):
        ModelConfig.from_name("gpt5")


def test_rope_scores_depend_on_position_difference_only():
    D = 16
    q, k = torch.randn(1, 1, 1, D, dtype=torch.float64), torch.randn(1, 1, 1, D, dtype=torch.float64)

    def score(i, j):
        ci, si = rope_cos_sin(torch.tensor([i]), D, 10000.0, torch.float64)
        cj, sj = rope_cos_sin(torch.tensor([j]), D, 10000.0, torch.float64)
        return float((apply_rope(q, ci, si) * apply_rope(k, cj, sj)).sum())

    for i, j, t in [(5, 3, 11), (0, 0, 40), (9, 1, 3)]:
        assert score(i, j) == pytest.approx(score(i + t, j + t), abs=1e-12)
    assert abs(score(5, 3) - score(5, 4)) > 1e-6  # and it does depend on the difference
    c0, s0 = rope_cos_sin(torch.tensor([0]), D, 10000.0, torch.float64)
    assert torch.equal(apply_rope(q, c0, s0), q)  # position 0 is the identity


@pytest.mark.parametrize("N", [1, 17, 34])
@pytest.mark.parametrize("block", [8, 16, 64])
def test_attention_implementations_agree(N, block):
    m = _model(flash_block=block)
    tok = _tokens(3, N)
    ref = m(tok, impl="standard")
    for impl in ("sdpa", "flash"):
        err = (m(tok, impl=impl) - ref).abs().max().item()
        print(f"N={N} block={block} {impl}: max |logits - standard| = {err:.2e}")
        assert err < 1e-12


@pytest.mark.parametrize("block", [8, 29])
def test_flash_gradients_match_standard(block):
    m = _model(flash_block=block)
    tok = _tokens(2, 29)
    grads = {}
    for impl in ("standard", "flash"):
        m.zero_grad()
        m(tok, impl=impl).logsumexp(-1).sum().backward()
        grads[impl] = [p.grad.clone() for p in m.parameters()]
    err = max((a - b).abs().max().item() for a, b in zip(grads["standard"], grads["flash"]))
    print(f"block {block}: max |grad flash - grad standard| = {err:.2e}")
    assert err < 1e-11


def test_flash_block_size_reaches_the_computation():
    """ModelConfig.flash_block is the Br = Bc the model's flash attention runs with: in float32 the
    rounding of 5 blocks per sequence differs from that of one block (a size that was ignored would
    give bit-identical logits)."""
    tok = _tokens(4, 33)
    m8 = _model(torch.float32, flash_block=8)
    m33 = Transformer(m8.cfg.replace(flash_block=33)).eval()
    m33.load_state_dict(m8.state_dict())
    with torch.no_grad():
        a, b, ref = m8(tok, impl="flash"), m33(tok, impl="flash"), m8(tok, impl="standard")
    print(f"block 8 vs 33: {(a - b).abs().max():.2e}; vs standard {(a - ref).abs().max():.2e}")
    assert not torch.equal(a, b)
    assert (a - ref).abs().max() < 1e-4 and (b - ref).abs().max() < 1e-4


@pytest.mark.parametrize("kw", [{}, {"n_kv_heads": 2}, {"n_kv_heads": 1}, {"positions": "learned"}])
@pytest.mark.parametrize("attention,splits", [("reference", None), ("flash", 1), ("flash", 3), ("flash", 7)])
def test_kv_cache_matches_full_forward(kw, attention, splits):
    m = _model(**kw)
    tok = _tokens(2, 23)
    full = m(tok)
    cache = ContiguousKVCache(n_layers=m.cfg.n_layers, attention=attention, num_splits=splits)
    parts = [m(tok[:, :11], cache=cache)]  # prefill 11 tokens
    parts += [m(tok[:, t : t + 1], cache=cache) for t in range(11, 20)]  # 9 decode steps
    parts.append(m(tok[:, 20:], cache=cache))  # 3 tokens at once
    err = (torch.cat(parts, dim=1) - full).abs().max().item()
    print(f"{kw} {attention}/{splits}: max |cached - full| = {err:.2e}")
    k, v, lens = cache.gather(1)
    assert cache.length == 23 and k.shape == v.shape == (2, m.cfg.kv_heads, 23, m.cfg.head_dim)
    assert lens.tolist() == [23, 23]
    assert err < 1e-12


def test_buggy_start_position_is_caught_by_the_same_comparison():
    m = _model()
    tok = _tokens(2, 20)
    full = m(tok)
    cache = ContiguousKVCache(n_layers=m.cfg.n_layers, buggy_start_pos=True)
    cached = torch.cat([m(tok[:, :12], cache=cache)] + [m(tok[:, t : t + 1], cache=cache) for t in range(12, 20)], 1)
    err = (cached - full).abs().max().item()
    print(f"buggy start position: max |cached - full| = {err:.2e}")
    assert err > 1e-3
    # and in generation: the greedy tokens of a random model diverge for some prompts
    prompts = [_tokens(1, 9 + i % 5)[0].tolist() for i in range(12)]
    good = generate(m, prompts, 8, use_cache=True)
    bad = generate(m, prompts, 8, use_cache=True, buggy_start_pos=True)
    plain = generate(m, prompts, 8, use_cache=False)
    assert compare(good, plain)["identical"] == 12
    assert compare(bad, plain)["max_logit_diff"] > 1e-3


@pytest.mark.parametrize("attention,splits", [("reference", None), ("flash", 2), ("flash", 4), ("flash", 7)])
def test_generation_with_and_without_cache_agree(attention, splits):
    m = _model()
    prompts = [_tokens(1, n)[0].tolist() for n in (1, 5, 5, 12, 19, 26)]
    a = generate(m, prompts, 8, use_cache=True, attention=attention, num_splits=splits)
    b = generate(m, prompts, 8, use_cache=False)
    c = compare(a, b)
    print(c)
    assert a.tokens == b.tokens and c["identical"] == len(prompts)
    assert c["max_logit_diff"] < 1e-12
    # token-forwards: cached = prompt + (T-1) per prompt; uncached = sum of growing lengths
    assert a.token_forwards == sum(len(p) + 7 for p in prompts)
    assert b.token_forwards == sum(8 * len(p) + 28 for p in prompts)


def test_generation_rejects_bad_input():
    m = _model(torch.float32)
    with pytest.raises(ValueError, match="max_new_tokens"):
        generate(m, [[1, 2]], 0)
    with pytest.raises(ValueError, match="token ids"):
        generate(m, [[1, 99]], 2)
    with pytest.raises(TypeError, match="prompts"):
        generate(m, "eve likes tea", 2)
    with pytest.raises(ValueError, match="attention"):
        ContiguousKVCache(n_layers=2, attention="paged")
    with pytest.raises(ValueError, match="num_splits"):
        ContiguousKVCache(n_layers=2, attention="flash", num_splits=0)
    with pytest.raises(ValueError, match="num_splits=3 needs attention='flash'"):
        ContiguousKVCache(n_layers=2, num_splits=3)  # would be ignored by the reference path
    with pytest.raises(ValueError, match="n_layers"):
        ContiguousKVCache(n_layers=0)
    with pytest.raises(ValueError, match="cache must be one of"):
        generate(m, [[1, 2]], 2, cache="dense")
    with pytest.raises(ValueError, match="use_cache=True"):
        generate(m, [[1, 2]], 2, use_cache=False, attention="flash")
    with pytest.raises(ValueError, match="paged cache"):
        generate(m, [[1, 2]], 2, cache="paged", buggy_start_pos=True)
    with pytest.raises(TypeError, match="tokens"):
        m(torch.zeros(2, 3))
    with pytest.raises(ValueError, match="token ids"):
        m(torch.tensor([[1, 32]]))
    with pytest.raises(ValueError, match="at least one token"):
        m(torch.zeros(1, 0, dtype=torch.long))


def test_learned_positions_refuse_overlong_input():
    m = _model(torch.float32, positions="learned")
    with pytest.raises(ValueError, match="max_seq_len"):
        m(_tokens(1, m.cfg.max_seq_len + 1))


def test_head_mask_zeroes_one_head():
    m = _model()
    tok = _tokens(2, 15)
    ones = torch.ones(2, 4, dtype=torch.float64)
    assert torch.equal(m(tok, head_mask=ones), m(tok))
    mask = ones.clone()
    mask[0, 2] = 0
    assert (m(tok, head_mask=mask) - m(tok)).abs().max() > 1e-6
    # zeroing a head by mask = zeroing its slice of the output projection
    m2 = _model()
    m2.load_state_dict(m.state_dict())
    D = m.cfg.head_dim
    with torch.no_grad():
        m2.layers[0].attn.wo.weight[:, 2 * D : 3 * D] = 0
    assert (m(tok, head_mask=mask) - m2(tok)).abs().max() < 1e-12


def test_attention_maps_are_causal_distributions():
    m = _model()
    tok = _tokens(2, 13)
    _, maps = m(tok, return_attn=True)
    assert len(maps) == 2
    for P in maps:
        assert P.shape == (2, 4, 13, 13)
        assert torch.allclose(P.sum(-1), torch.ones(2, 4, 13, dtype=torch.float64))
        assert P.triu(1).abs().max() == 0


def test_adamw_and_clipping_match_torch():
    torch.manual_seed(1)
    a = [torch.randn(7, 5, requires_grad=True), torch.randn(5, requires_grad=True)]
    b = [x.detach().clone().requires_grad_(True) for x in a]
    mine = AdamW([{"params": a[:1], "weight_decay": 0.1}, {"params": a[1:], "weight_decay": 0.0}], lr=3e-2)
    ref = torch.optim.AdamW([{"params": b[:1], "weight_decay": 0.1}, {"params": b[1:], "weight_decay": 0.0}],
                            lr=3e-2, betas=(0.9, 0.98))
    for _ in range(15):
        for ps, opt in ((a, mine), (b, ref)):
            opt.zero_grad()
            sum((p**3).sum() + p.sin().sum() for p in ps).backward()
        n1, n2 = clip_grad_norm(a, 1.0), float(torch.nn.utils.clip_grad_norm_(b, 1.0))
        assert n1 == pytest.approx(n2, rel=1e-6)
        mine.step()
        ref.step()
    err = max((x - y).abs().max().item() for x, y in zip(a, b))
    print(f"AdamW vs torch.optim.AdamW after 15 steps: {err:.2e}")
    assert err < 1e-6 and not math.isnan(err)
