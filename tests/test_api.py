"""The public entry points (attnlab.flash_attention, attnlab.flash_decode and the blockwise functions):
what they compute, how they dispatch, and how they refuse bad input — one clear error naming the argument."""

import warnings

import pytest
import torch
from tests.helpers import F64, autograd_ref, qkv

import attnlab
from attnlab import flash_attention, flash_backward, flash_decode, flash_forward, flash_forward_fa1
from attnlab.reference import attention_ref

# -- flash_attention ---------------------------------------------------------------------------------


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("blocks", [(None, None), (16, 24), (64, 64)])
def test_flash_attention_gradients(causal, blocks):
    q, k, v = qkv(2, 4, 2, 97, 130, 59)
    qa, ka, va = (t.clone().requires_grad_() for t in (q, k, v))
    out, lse = flash_attention(qa, ka, va, causal=causal, return_lse=True, block_q=blocks[0], block_k=blocks[1])
    dout = torch.randn_like(out)
    ((out * dout).sum() + lse.sum()).backward()
    want = autograd_ref(q, k, v, dout, causal, torch.ones_like(lse))
    for g, w in zip((qa.grad, ka.grad, va.grad), want):
        torch.testing.assert_close(g, w, rtol=0, atol=1e-9)


def test_flash_attention_gradcheck():
    q, k, v = (t.requires_grad_() for t in qkv(1, 2, 1, 5, 7, 4, Dv=3))
    assert torch.autograd.gradcheck(lambda *a: flash_attention(*a, causal=True, return_lse=True), (q, k, v))
    assert torch.autograd.gradcheck(lambda *a: flash_attention(*a, scale=0.8, block_q=2, block_k=3), (q, k, v))


def test_double_backward_is_refused_clearly():
    q, k, v = (t.requires_grad_() for t in qkv(1, 2, 1, 9, 9, 8))
    out = flash_attention(q, k, v, causal=True)
    (g,) = torch.autograd.grad(out.sum(), q, create_graph=False)
    assert g.shape == q.shape
    out = flash_attention(q, k, v, causal=True)
    with pytest.raises(RuntimeError, match="double backward"):
        torch.autograd.grad(out.sum(), q, create_graph=True)


@pytest.mark.parametrize("fn", [flash_forward, flash_forward_fa1])
def test_raw_forward_refuses_inputs_that_require_grad(fn):
    q, k, v = qkv(1, 2, 1, 9, 9, 8)
    q.requires_grad_()
    with pytest.raises(RuntimeError, match=f"{fn.__name__} is not differentiable: use attnlab.flash_attention"):
        fn(q, k, v)
    with torch.no_grad():  # inference on a parameter-derived tensor is fine
        o, _ = fn(q, k, v)
    torch.testing.assert_close(o, attention_ref(q.detach(), k, v)[0], rtol=0, atol=1e-12)
    o, lse = flash_forward(q.detach(), k, v)
    with pytest.raises(RuntimeError, match="flash_backward is not differentiable"):
        flash_backward(q, k, v, o, lse, torch.randn_like(o))


def test_cpu_calls_warn_nothing():
    q, k, v = qkv(1, 2, 1, 33, 33, 16, dtype=torch.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the CPU path is the blockwise path by design: no fallback warning
        flash_attention(q, k, v)
        flash_decode(q[:, :, -1:], k, v)


def test_default_blocks_are_the_fast_ones_and_agree_with_the_lecture_blocks():
    q, k, v = qkv(1, 8, 8, 1000, 1000, 64, dtype=torch.float32)
    fast, st_fast = flash_forward(q, k, v, causal=True, stats=(s1 := attnlab.IOStats()))[0], s1
    lecture, st_lect = flash_forward(q, k, v, causal=True, block_q=64, block_k=64, stats=(s2 := attnlab.IOStats()))[0], s2
    torch.testing.assert_close(fast, lecture, rtol=0, atol=2e-6)
    # the fast blocks are larger: fewer block pairs, so fewer K/V re-reads than the lecture's 64×64
    assert st_fast.pairs_computed < st_lect.pairs_computed and st_fast.reads["K"] < st_lect.reads["K"]


# -- flash_decode ----------------------------------------------------------------------------------------


def test_flash_decode_is_the_blockwise_path_on_the_cpu():
    q, k, v = qkv(2, 4, 2, 1, 77, 32)
    a = flash_decode(q, k, v, num_splits=3, cache_seqlens=[77, 40])
    b = attnlab.flash_decode_blockwise(q, k, v, num_splits=3, cache_seqlens=[77, 40])
    assert all(torch.equal(x, y) for x, y in zip(a, b))


# -- one rule for every argument ----------------------------------------------------------------------


@pytest.mark.parametrize("bad", [1, 0, "yes", None, 1.0])
def test_causal_must_be_a_bool_everywhere(bad):
    q, k, v = qkv(1, 2, 1, 5, 5, 8)
    for call in (lambda: attention_ref(q, k, v, causal=bad), lambda: flash_attention(q, k, v, causal=bad),
                 lambda: flash_forward(q, k, v, causal=bad), lambda: flash_decode(q, k, v, causal=bad),
                 lambda: attnlab.reference.attention_scores(q, k, causal=bad)):
        with pytest.raises(TypeError, match="causal must be True or False"):
            call()


def _bad_calls():
    q, k, v = qkv(1, 4, 2, 8, 8, 16)
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


def test_bad_block_sizes_of_flash_attention():
    q, k, v = qkv(1, 2, 1, 5, 5, 8)
    with pytest.raises(ValueError, match="block_q must be a positive integer, got 0"):
        flash_attention(q, k, v, block_q=0)
    with pytest.raises(ValueError, match="block_k must be a positive integer"):
        flash_attention(q, k, v, block_k=2.5)
