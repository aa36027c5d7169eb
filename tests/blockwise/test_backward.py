"""attnlab.blockwise backward (§7.2–§7.4) and flash_attention_blockwise (autograd, §7.7) against autograd
through attention_ref. float64 unless a test says otherwise."""

import pytest
import torch
from tests.helpers import BLOCKS, F64, SHAPES, abs_err, autograd_ref, qkv, shape_id

from attnlab.blockwise import flash_attention_blockwise, flash_backward, flash_forward
from attnlab.reference import attention_ref


@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
@pytest.mark.parametrize("causal", [False, True])
def test_backward_matches_autograd(shape, causal):
    q, k, v = qkv(*shape, Dv=shape[-1] + 5)
    o, l = flash_forward(q, k, v, causal=causal)
    dout = torch.randn_like(o)
    want = autograd_ref(q, k, v, dout, causal)
    for bq, bk in BLOCKS if shape[3] * shape[4] < 1025 * 1025 else BLOCKS[:1]:
        got = flash_backward(q, k, v, o, l, dout, causal=causal, block_q=bq, block_k=bk)
        for name, g, w, t in zip(("dq", "dk", "dv"), got, want, (q, k, v)):
            print(name, shape, causal, (bq, bk), abs_err(g, w))
            assert g.shape == t.shape and g.dtype == t.dtype
            torch.testing.assert_close(g, w, rtol=0, atol=1e-9)


def test_backward_with_lse_gradient():
    q, k, v = qkv(1, 2, 1, 97, 120, 16)
    o, l = flash_forward(q, k, v, causal=True)
    dout, dlse = torch.randn_like(o), torch.randn_like(l)
    want = autograd_ref(q, k, v, dout, True, dlse)
    got = flash_backward(q, k, v, o, l, dout, causal=True, dlse=dlse)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=0, atol=1e-9)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_backward_low_precision(dtype):
    q, k, v = qkv(1, 2, 2, 97, 97, 64)
    dout = torch.randn(1, 2, 97, 64, dtype=F64)
    want = autograd_ref(q, k, v, dout, True)
    ref_lp = autograd_ref(q.to(dtype), k.to(dtype), v.to(dtype), dout.to(dtype), True)
    lp = [t.to(dtype) for t in (q, k, v)]
    o, l = flash_forward(*lp, causal=True)
    got = flash_backward(*lp, o, l, dout.to(dtype), causal=True)
    for g, r, w in zip(got, ref_lp, want):
        assert g.dtype == dtype
        # flash-attention's criterion, with a floor of a few dozen roundings of the largest
        # gradient: the blockwise backward recomputes P from a rounded lse, so in float32 its error
        # is a small multiple of eps even where the same-dtype reference happens to land closer.
        floor = 32 * torch.finfo(dtype).eps * w.abs().max().item()
        print(dtype, abs_err(g, w), abs_err(r, w), floor)
        assert abs_err(g, w) <= max(2 * abs_err(r, w), floor)


# -- flash_attention: autograd ----------------------------------------------------------------------


@pytest.mark.parametrize("causal", [False, True])
def test_flash_attention_gradients(causal):
    q, k, v = qkv(2, 4, 2, 97, 130, 59)
    qa, ka, va = (t.clone().requires_grad_() for t in (q, k, v))
    out, lse = flash_attention_blockwise(qa, ka, va, causal=causal, return_lse=True)
    dout = torch.randn_like(out)
    ((out * dout).sum() + lse.sum()).backward()
    want = autograd_ref(q, k, v, dout, causal, torch.ones_like(lse))
    for g, w in zip((qa.grad, ka.grad, va.grad), want):
        torch.testing.assert_close(g, w, rtol=0, atol=1e-9)
    o2 = flash_attention_blockwise(q, k, v, causal=causal)
    torch.testing.assert_close(o2, attention_ref(q, k, v, causal=causal)[0], rtol=0, atol=1e-10)


def test_flash_attention_gradcheck():
    q, k, v = (t.requires_grad_() for t in qkv(1, 2, 1, 5, 7, 4, Dv=3))
    assert torch.autograd.gradcheck(lambda *a: flash_attention_blockwise(*a, causal=True, return_lse=True), (q, k, v))
    assert torch.autograd.gradcheck(lambda *a: flash_attention_blockwise(*a, scale=0.8), (q, k, v))


def test_flash_attention_saves_only_inputs_out_and_lse():
    q, k, v = (t.requires_grad_() for t in qkv(1, 2, 2, 64, 64, 16))
    saved = []

    def pack(t):
        saved.append(tuple(t.shape))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        flash_attention_blockwise(q, k, v, causal=True)
    assert sorted(saved) == sorted([(1, 2, 64, 16)] * 4 + [(1, 2, 64)])  # q, k, v, out, lse: no N×N

