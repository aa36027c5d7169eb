"""attnlab as transformers' attention implementation, on the CPU with tiny models built from configs (no
weights downloaded): logits and gradients within float32 rounding of transformers' own implementation,
greedy generation with and without left padding, packed documents, a static cache, the attnlab entry
point each step takes, and the refusals. Skipped without transformers (``pip install 'attnlab[hf]'``)."""

import copy
import json
import math
import warnings
from collections import Counter
from types import SimpleNamespace

import pytest
import torch

transformers = pytest.importorskip("transformers")

from tests.helpers import abs_err, within_criterion  # noqa: E402

import attnlab.api  # noqa: E402
from attnlab.integrations import hf  # noqa: E402
from attnlab.reference import attention_ref  # noqa: E402

VOCAB, LAYERS, WINDOW = 97, 2, 5
COMMON = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=LAYERS, num_attention_heads=4,
              num_key_value_heads=2, head_dim=16, max_position_embeddings=128, initializer_range=0.2)
# name -> (config class, model class, what the config adds, transformers' implementation to compare with)
MODELS = {
    "llama": ("LlamaConfig", "LlamaForCausalLM", {}, "sdpa"),
    "mistral": ("MistralConfig", "MistralForCausalLM", {"sliding_window": WINDOW}, "sdpa"),
    # SDPA has no softcap: Gemma 2 runs eager there; its layers alternate sliding and full attention
    "gemma2": ("Gemma2Config", "Gemma2ForCausalLM", {"sliding_window": WINDOW, "attn_logit_softcapping": 2.0,
                                                     "final_logit_softcapping": 5.0, "query_pre_attn_scalar": 16},
               "eager"),
}
ENTRY_POINTS = ("flash_attention", "flash_attention_varlen", "flash_decode")


@pytest.fixture(scope="module", autouse=True)
def _registered():
    assert hf.register() == hf.NAME
    assert hf.register() == hf.NAME  # again: harmless


def _counted(seen: Counter, name: str, fn):
    def wrapper(*args, **kwargs):
        seen[name + ("(cache_seqlens)" if kwargs.get("cache_seqlens") is not None else "")] += 1
        return fn(*args, **kwargs)
    return wrapper


@pytest.fixture
def routes(monkeypatch) -> Counter:
    """Counts the attnlab entry points the integration calls (flash_decode with cache_seqlens apart)."""
    seen = Counter()
    for name in ENTRY_POINTS:
        monkeypatch.setattr(attnlab.api, name, _counted(seen, name, getattr(attnlab.api, name)))
    return seen


def build(name: str, **extra):
    cfg_cls, model_cls, adds, ref = MODELS[name]
    if not hasattr(transformers, model_cls):
        pytest.skip(f"transformers {transformers.__version__} has no {model_cls}")
    config = getattr(transformers, cfg_cls)(**{**COMMON, **adds, **extra})
    return getattr(transformers, model_cls)(config).eval(), ref


def batch(padding: str, B: int = 3, N: int = 13):
    """Token ids (B, N) and the 0/1 mask; rows hold N, N-4, N-7 real tokens, padded on ``padding``'s side."""
    ids = torch.randint(1, VOCAB, (B, N))
    mask = torch.ones(B, N, dtype=torch.long)
    for b, n in enumerate([N, N - 4, N - 7][:B]):
        if padding == "left":
            mask[b, : N - n] = 0
        elif padding == "right":
            mask[b, n:] = 0
    return ids.masked_fill(mask == 0, 0), mask


def logits(model, impl: str, ids, mask, **kwargs):
    model.set_attn_implementation(impl)
    with torch.no_grad():
        return model(ids, attention_mask=mask, **kwargs).logits


def real_logits(model, impl: str, ids, mask, alone: bool = False):
    """Logits (real tokens, V) at the real tokens, row after row: of the padded batch, or of each row's
    real tokens run alone (no padding at all: the oracle's way). Differentiable."""
    model.set_attn_implementation(impl)
    if not alone:
        return model(ids, attention_mask=mask).logits[mask.bool()]
    return torch.cat([model(ids[b:b + 1, mask[b].bool()]).logits[0] for b in range(ids.shape[0])])


def check(got, base, want, what: str, dtype=torch.float32):
    """attnlab's result within 2x the same-dtype transformers result's error vs the oracle (a wider dtype)."""
    err, err_ref = abs_err(got, want), abs_err(base, want)
    print(f"{what}: attnlab {err:.2e}, transformers {err_ref:.2e}")
    assert within_criterion(err, err_ref, want, dtype), f"{what}: {err:.2e} vs {err_ref:.2e}"


@pytest.mark.parametrize("padding", ["none", "left", "right"])
@pytest.mark.parametrize("name", MODELS)
def test_logits_match_transformers(name, padding):
    model, ref = build(name)
    ids, mask = batch(padding)
    with torch.no_grad():
        want = real_logits(copy.deepcopy(model).double(), ref, ids, mask, alone=True)
        got, base = real_logits(model, "attnlab", ids, mask), real_logits(model, ref, ids, mask)
    check(got, base, want, f"{name} logits")


def grads(model, impl: str, ids, mask, alone: bool = False) -> list[torch.Tensor]:
    """Gradients of the next-token loss over real tokens (a real token predicting the next real one)."""
    model.zero_grad(set_to_none=True)
    out = real_logits(model, impl, ids, mask, alone)  # (real tokens, V)
    n = mask.sum(1)
    first = n.cumsum(0) - n  # each row's first real token in ``out``
    keep = torch.cat([torch.arange(a, a + m - 1) for a, m in zip(first.tolist(), n.tolist())])  # not each row's last
    loss = torch.nn.functional.cross_entropy(out[keep], ids[mask.bool()][keep + 1])
    loss.backward()
    return [p.grad.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize("padding", ["left", "right"])
@pytest.mark.parametrize("name", MODELS)
def test_training_step_gradients(name, padding, routes):
    model, ref = build(name)
    model.train()
    ids, mask = batch(padding)
    want = grads(copy.deepcopy(model).double(), ref, ids, mask, alone=True)
    base = grads(model, ref, ids, mask)
    routes.clear()
    got = grads(model, "attnlab", ids, mask)
    assert routes == {"flash_attention_varlen": LAYERS}  # the padded batch, unpadded
    for (pname, _), g, gb, gw in zip(model.named_parameters(), got, base, want):
        check(g, gb, gw, f"{name} d{pname}")


def generate(model, impl: str, ids, mask, new: int, **kwargs):
    """Greedy: the new tokens (B, new) and the logits of every step (new × (B, V))."""
    model.set_attn_implementation(impl)
    out = model.generate(ids, attention_mask=mask, max_new_tokens=new, min_new_tokens=new, do_sample=False,
                         pad_token_id=0, output_logits=True, return_dict_in_generate=True, **kwargs)
    return out.sequences[:, ids.shape[1]:], torch.stack(out.logits)  # (B, new), (new, B, V)


def assert_same_greedy(got, want, rows=None):
    """Same tokens and, step by step, logits within float32 rounding — or, where a token differs, the
    reference's two best logits were a tie within that rounding (then the runs rightly part)."""
    (tok, lg), (tok_w, lg_w) = got, want
    for b, bw in enumerate(rows if rows is not None else range(tok_w.shape[0])):
        tol = 1e-4 * lg_w[:, bw].abs().max().item()
        differ = (tok[b] != tok_w[bw]).nonzero().flatten().tolist()
        last = differ[0] if differ else tok_w.shape[1] - 1
        err = abs_err(lg[: last + 1, b], lg_w[: last + 1, bw])
        assert err <= tol, f"row {bw}: logits differ by {err:.2e} before the first differing token"
        if differ:
            top = lg_w[last, bw].topk(2).values
            assert top[0] - top[1] <= tol, f"row {bw} differs at new token {last} without a tie"


@pytest.mark.parametrize("name", MODELS)
def test_generate_greedy_with_and_without_padding(name, routes):
    model, ref = build(name)
    ids, mask = batch("left")
    new = 6
    want = generate(model, ref, ids, mask, new)
    routes.clear()
    got = generate(model, "attnlab", ids, mask, new)
    padded_routes = dict(routes)
    assert_same_greedy(got, want)
    for b in range(ids.shape[0]):  # each prompt alone: no padding, every decode step is Flash-Decoding
        routes.clear()
        alone = generate(model, "attnlab", ids[b:b + 1, mask[b].bool()], None, new)
        assert_same_greedy(alone, (got[0][b:b + 1], got[1][:, b:b + 1]))
        assert routes == {"flash_attention": LAYERS, "flash_decode": LAYERS * (new - 1)}
    if name == "llama":  # every step of the left-padded batch sees padding: prefill and decode unpadded
        assert padded_routes == {"flash_attention_varlen": LAYERS * new}
    else:  # sliding-window layers keep W - 1 keys; the padding leaves them, and those steps decode
        assert padded_routes.get("flash_decode", 0) > 0


def test_static_cache_decodes_with_key_lengths(routes):
    model, _ = build("llama")
    prompt = torch.randint(1, VOCAB, (1, 9))
    want = generate(model, "attnlab", prompt, None, 5)
    routes.clear()
    got = generate(model, "attnlab", prompt, None, 5, cache_implementation="static")
    assert_same_greedy(got, want)
    # the static cache holds prompt + new tokens: its empty slots are left out by cache_seqlens, without a
    # copy, until the last step fills it
    assert routes == {"flash_attention": LAYERS, "flash_decode(cache_seqlens)": LAYERS * 3, "flash_decode": LAYERS}


@pytest.mark.parametrize("name", MODELS)
def test_packed_documents(name, routes):
    model, ref = build(name)
    lengths = [5, 8, 3]
    cu = torch.tensor([0, 5, 13, 16], dtype=torch.int32)
    ids = torch.randint(1, VOCAB, (1, 16))
    pos = torch.cat([torch.arange(n) for n in lengths])[None]  # (1, 16): restarts at every document
    oracle = copy.deepcopy(model).double()
    want = torch.cat([logits(oracle, ref, ids[:, a:b], None) for a, b in zip(cu[:-1], cu[1:])], dim=1)
    base = logits(model, ref, ids, None, position_ids=pos, use_cache=False)
    routes.clear()
    check(logits(model, "attnlab", ids, None, position_ids=pos, use_cache=False), base, want, f"{name} packed")
    assert routes == {"flash_attention_varlen": LAYERS}
    by_collator = logits(model, "attnlab", ids, None, position_ids=pos, use_cache=False, cu_seq_lens_q=cu,
                         cu_seq_lens_k=cu, max_length_q=8, max_length_k=8)  # DataCollatorWithFlattening's kwargs
    check(by_collator, base, want, f"{name} packed, cu_seq_lens")


@pytest.mark.parametrize("Nq,Nk,Lm", [(1, 37, 37), (3, 37, 37), (37, 37, 37), (1, 37, 30), (5, 37, 30)])
@pytest.mark.parametrize("padding", ["none", "left"])
def test_attention_forward_against_the_oracle(Nq, Nk, Lm, padding, seed):
    """One call, float64: each row's real queries against its real keys, through attention_ref."""
    g = torch.Generator().manual_seed(seed)
    B, H, Hkv, D = 3, 4, 2, 16
    q = torch.randn(B, H, Nq, D, dtype=torch.float64, generator=g)
    k, v = (torch.randn(B, Hkv, Nk, D, dtype=torch.float64, generator=g) for _ in range(2))
    mask = torch.ones(B, Lm, dtype=torch.bool)
    if padding == "left":
        mask[1, :4], mask[2, : Lm - 1] = False, False  # row 2 keeps one real token
    module = SimpleNamespace(is_causal=True)
    out, weights = hf.attention_forward(module, q, k, v, mask if Lm < Nk or padding == "left" else None,
                                        sliding_window=7, softcap=3.0, scaling=0.3)
    assert weights is None and out.shape == (B, Nq, H, D)
    for b in range(B):
        real_k = mask[b].nonzero().flatten()
        real_q = (mask[b, Lm - Nq:]).nonzero().flatten()
        want, _ = attention_ref(q[b:b + 1, :, real_q], k[b:b + 1, :, real_k], v[b:b + 1, :, real_k], causal=True,
                                window=(6, 0), softcap=3.0, scale=0.3)
        torch.testing.assert_close(out[b, real_q], want[0].transpose(0, 1), rtol=0, atol=1e-12)
        padded_q = (~mask[b, Lm - Nq:]).nonzero().flatten()
        assert (out[b, padded_q] == 0).all()


@pytest.mark.gpu
@pytest.mark.parametrize("name", MODELS)
def test_gpu_bfloat16_through_the_triton_kernels(name, routes):
    """bfloat16 on a GPU with head dim 64 (the Triton kernels' case): the logits of a left-padded batch, the
    gradients of a right-padded one and a decode step over the cache, each within 2x transformers' own
    bfloat16 error vs a float32 oracle — and no fallback to the blockwise path."""
    bf16 = torch.bfloat16
    model, ref = build(name, hidden_size=128, head_dim=64)
    model = model.to("cuda", bf16)
    oracle = copy.deepcopy(model).float()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ids, mask = (t.cuda() for t in batch("left", N=40))
        with torch.no_grad():
            want = real_logits(oracle, ref, ids, mask, alone=True)
            got, base = real_logits(model, hf.NAME, ids, mask), real_logits(model, ref, ids, mask)
        check(got, base, want, f"{name} logits", bf16)
        ids, mask = (t.cuda() for t in batch("right", N=40))
        want = grads(oracle.train(), ref, ids, mask, alone=True)
        base, got = grads(model.train(), ref, ids, mask), grads(model, hf.NAME, ids, mask)
        for (pname, _), g, gb, gw in zip(model.named_parameters(), got, base, want):
            check(g, gb, gw, f"{name} d{pname}", bf16)
        prompt = torch.randint(1, VOCAB, (1, 41), device="cuda")
        want = logits(oracle.eval(), ref, prompt, None)[0, -1]
        step = {}
        for impl in (hf.NAME, ref):  # the prompt's last token as a decode step over the cache of the others
            model.set_attn_implementation(impl)
            with torch.no_grad():
                cache = model(prompt[:, :-1], use_cache=True).past_key_values
                step[impl] = model(prompt[:, -1:], past_key_values=cache).logits[0, -1]
        check(step[hf.NAME], step[ref], want, f"{name} decode step", bf16)
    assert not [str(w.message) for w in caught if "attnlab" in str(w.message)]
    assert routes["flash_decode"] == LAYERS


def test_refusals():
    module = SimpleNamespace(is_causal=True)
    q, k = torch.randn(1, 2, 4, 8), torch.randn(1, 2, 4, 8)
    with pytest.raises(ValueError, match="2D padding mask"):
        hf.attention_forward(module, q, k, k, torch.ones(1, 1, 4, 4, dtype=torch.bool))
    with pytest.raises(TypeError, match="bool or integer"):
        hf.attention_forward(module, q, k, k, torch.ones(1, 4))
    with pytest.raises(ValueError, match=r"\(B, Lm\)"):
        hf.attention_forward(module, q, k, k, torch.ones(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="bidirectional"):
        hf.attention_forward(SimpleNamespace(is_causal=False), q, k, k, None, sliding_window=3)
    with pytest.raises(ValueError, match="sliding_window must be"):
        hf.attention_forward(module, q, k, k, None, sliding_window=0)
    with pytest.raises(ValueError, match="s_aux"):
        hf.attention_forward(module, q, k, k, None, s_aux=torch.zeros(2))
    with pytest.raises(ValueError, match="output_attentions"):
        hf.attention_forward(module, q, k, k, None, output_attentions=True)
    with pytest.raises(ValueError, match="cu_seq_lens_q and cu_seq_lens_k"):
        hf.attention_forward(module, q, k, k, None, cu_seq_lens_q=torch.tensor([0, 4], dtype=torch.int32))
    with pytest.raises(TypeError, match="name must be a str"):
        hf.register(3)
    with pytest.raises(ValueError, match="already an attention implementation"):
        hf.register("sdpa")
    with pytest.raises(ValueError, match="non-empty"):
        hf.register("paged|attnlab")


def test_training_with_attention_dropout_is_refused():
    model, _ = build("llama", attention_dropout=0.1)
    model.train()
    model.set_attn_implementation(hf.NAME)
    with pytest.raises(ValueError, match="attention dropout"):
        model(torch.randint(1, VOCAB, (1, 6)))
    model.eval()  # no dropout at inference: runs
    assert math.isfinite(model(torch.randint(1, VOCAB, (1, 6))).logits.sum().item())


def _load(relative: str):
    """A script of the repository as a module, in this process (a fresh interpreter would import
    transformers again: ~10 s)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / relative
    spec = importlib.util.spec_from_file_location(path.stem + "_script", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_example_hf_llama(capsys):
    r = _load("examples/hf_llama.py").main([])
    printed = capsys.readouterr().out
    assert r["same_as_sdpa"] and r["same_alone"]
    assert r["grad_max_diff"] <= 1e-5 * r["grad_max"] and abs(r["loss_attnlab"] - r["loss_sdpa"]) <= 1e-5
    assert f"loss attnlab {r['loss_attnlab']:.6f}" in printed and f"attnlab {r['tokens'][0]}" in printed


def test_benchmark_quick(tmp_path):
    """benchmarks/hf.py --quick: both implementations timed, every check passes, decoding went through
    flash_decode, the padded check through flash_attention_varlen."""
    bench = _load("benchmarks/hf.py")
    out = tmp_path / "hf.json"
    assert bench.main(["--quick", "--json", str(out)]) == 0
    r = json.loads(out.read_text())
    assert all(r["checks"][c]["ok"] for c in ("train", "padded", "generate"))
    assert r["train"]["attnlab"]["step_ms"] > 0 and r["generate"]["sdpa"]["decode_tokens_per_s"] > 0
    calls = r["attnlab_calls"]
    assert calls["timed"]["train"] == {"flash_attention": LAYERS * 3}  # a warm-up step and 2 timed steps
    assert calls["timed"]["generate"]["flash_decode"] > 0
    assert calls["checks"] == {"train": {"flash_attention": LAYERS}, "padded": {"flash_attention_varlen": LAYERS}}
    assert bench.main(["--quick", "--json", str(out)]) == 2  # the file exists: refused without --force


def test_padding_mask_hook_without_a_mask():
    """No 2D mask (transformers >= 5.24 passes none without padding): None, except for a static cache,
    whose slots past the tokens so far are empty — then the first q_offset + q_length keys only."""
    assert hf.padding_mask(2, 9, 9) is None  # no cache
    assert hf.padding_mask(2, 1, 10, q_offset=torch.tensor(9)) is None  # a dynamic cache: every slot is filled
    m = hf.padding_mask(2, 1, 16, q_offset=torch.tensor(9), device="cpu")  # a static cache of 16 slots
    assert m.shape == (2, 10) and m.dtype == torch.bool and bool(m.all())
    assert hf.padding_mask(2, 1, 16, q_offset=torch.tensor(9), kv_offset=3) is None  # a rolled window cache


def test_position_ids_are_read_once_per_tensor_and_anew_after_a_change():
    """Every layer of a forward gets the same position_ids: the documents they mark are read once; an
    in-place change of the tensor (a new version) is read again, never served stale."""
    module = SimpleNamespace(is_causal=True)
    q, k, v = (torch.randn(1, 2, 8, 4, dtype=torch.float64) for _ in range(3))
    pos = torch.tensor([[0, 1, 2, 3, 0, 1, 2, 3]])
    packed, _ = hf.attention_forward(module, q, k, v, None, position_ids=pos)
    again, _ = hf.attention_forward(module, q, k, v, None, position_ids=pos)
    fresh, _ = hf.attention_forward(module, q, k, v, None, position_ids=pos.clone())
    assert torch.equal(packed, again) and torch.equal(packed, fresh)
    want_first = attention_ref(q[:, :, :4], k[:, :, :4], v[:, :, :4], causal=True)[0]  # the first document
    assert torch.allclose(packed.transpose(1, 2)[:, :, :4], want_first, atol=1e-12)
    pos.copy_(torch.arange(8))  # one document now
    dense, _ = hf.attention_forward(module, q, k, v, None, position_ids=pos)
    want = attention_ref(q, k, v, causal=True)[0].transpose(1, 2)  # (B, N, H, D)
    assert torch.allclose(dense, want, atol=1e-12) and not torch.allclose(dense, packed)
