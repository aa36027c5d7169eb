"""attention_ref against a loop over rows written from the definition, and its input checks."""

import math

import pytest
import torch

from attnlab import attention_ref, causal_mask


def _rowwise(q, k, v, causal, scale):
    B, H, Nq, D = q.shape
    Hkv, Nk = k.shape[1], k.shape[2]
    out = torch.zeros(B, H, Nq, v.shape[-1], dtype=q.dtype)
    lse = torch.full((B, H, Nq), -math.inf, dtype=q.dtype)
    for b in range(B):
        for h in range(H):
            kh = h // (H // Hkv)
            for i in range(Nq):
                last = i + Nk - Nq if causal else Nk - 1
                if last < 0:
                    continue
                s = [scale * float(q[b, h, i] @ k[b, kh, j]) for j in range(last + 1)]
                m = max(s)
                w = [math.exp(x - m) for x in s]
                z = sum(w)
                lse[b, h, i] = m + math.log(z)
                out[b, h, i] = sum(wj / z * v[b, kh, j] for j, wj in enumerate(w))
    return out, lse


@pytest.mark.parametrize("Nq,Nk,H,Hkv", [(5, 5, 2, 2), (3, 7, 4, 2), (7, 3, 2, 1), (1, 9, 3, 3)])
@pytest.mark.parametrize("causal", [False, True])
def test_matches_definition(Nq, Nk, H, Hkv, causal):
    q = torch.randn(2, H, Nq, 6, dtype=torch.float64)
    k = torch.randn(2, Hkv, Nk, 6, dtype=torch.float64)
    v = torch.randn(2, Hkv, Nk, 6, dtype=torch.float64)
    out, lse = attention_ref(q, k, v, causal=causal, scale=0.7)
    out2, lse2 = _rowwise(q, k, v, causal, 0.7)
    torch.testing.assert_close(out, out2, rtol=0, atol=1e-12)
    torch.testing.assert_close(lse, lse2, rtol=0, atol=1e-12)


def test_fully_masked_rows_are_zero_not_nan():
    q, k, v = (torch.randn(1, 1, n, 4) for n in (6, 2, 2))
    out, lse = attention_ref(q, k, v, causal=True)
    assert not out.isnan().any()
    assert (out[0, 0, :4] == 0).all() and torch.isinf(lse[0, 0, :4]).all()
    assert torch.isfinite(lse[0, 0, 4:]).all()


def test_no_keys_at_all():
    q, k = torch.randn(2, 3, 4, 8), torch.randn(2, 3, 0, 8)
    out, lse = attention_ref(q, k, k, causal=False)
    assert out.shape == (2, 3, 4, 8) and (out == 0).all() and torch.isinf(lse).all() and (lse < 0).all()


def test_causal_mask_is_bottom_right():
    m = causal_mask(2, 4)
    assert m.tolist() == [[True, True, True, False], [True, True, True, True]]


@pytest.mark.parametrize(
    "shapes,match",
    [
        (((2, 4, 5, 8), (2, 4, 5, 8), (2, 4, 5)), "v must have 4 dimensions"),
        (((2, 4, 5, 8), (3, 4, 5, 8), (3, 4, 5, 8)), "batch"),
        (((2, 4, 5, 8), (2, 4, 5, 6), (2, 4, 5, 8)), "head dim"),
        (((2, 4, 5, 8), (2, 3, 5, 8), (2, 3, 5, 8)), "not a multiple"),
        (((2, 4, 5, 8), (2, 4, 5, 8), (2, 4, 6, 8)), "v must have shape"),
    ],
)
def test_bad_shapes(shapes, match):
    q, k, v = (torch.randn(s) for s in shapes)
    with pytest.raises(ValueError, match=match):
        attention_ref(q, k, v)


def test_bad_dtypes_and_types():
    q = torch.randn(1, 1, 3, 4)
    with pytest.raises(TypeError, match="k has dtype"):
        attention_ref(q, q.double(), q)
    with pytest.raises(TypeError, match="q must be a torch.Tensor"):
        attention_ref(q.numpy(), q, q)
    with pytest.raises(TypeError, match="float16"):
        attention_ref(q.long(), q.long(), q.long())
