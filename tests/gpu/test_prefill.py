"""Triton FlashAttention-2 forward/backward (attnlab.gpu, §5–§7) against the float64 oracle.

Without CUDA the kernels run in Triton's CPU interpreter (conftest sets TRITON_INTERPRET=1) on
small shapes with small blocks; the ``@pytest.mark.gpu`` tests run the real configurations on a GPU.
Criterion (flash-attention's): for the output and each of dQ, dK, dV,
err(kernel) <= 2·err(same-dtype PyTorch reference) + a floor of a few roundings of the output's
magnitude in the kernel's dtype, both measured (max abs) against ``attention_ref`` in float64.
Outputs are poisoned with NaN before each kernel runs.
"""

import dataclasses
import subprocess
import sys

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.helpers import abs_err as _err
from tests.helpers import fwd_persistent_best, within_criterion

import attnlab
from attnlab.reference import attention_ref
from attnlab.variants import Mask

pytest.importorskip("triton")
from attnlab.gpu import (  # noqa: E402
    BwdConfig,
    FwdConfig,
    default_bwd_config,
    default_fwd_config,
    flash_attention_triton,
    prefill_backward,
    prefill_forward,
    set_config,
)
from attnlab.gpu.config import SHORT_KEYS  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"


# Triton's interpreter gets bfloat16 wrong; the conftest fixture makes it behave as the GPU does
pytestmark = pytest.mark.usefixtures("interpreter_bfloat16")


def _inputs(B, H, Hkv, Nq, Nk, D, dtype, device=DEV, generator=None):
    q = torch.randn(B, H, Nq, D, dtype=dtype, device=device, generator=generator)
    k = torch.randn(B, Hkv, Nk, D, dtype=dtype, device=device, generator=generator)
    v = torch.randn(B, Hkv, Nk, D, dtype=dtype, device=device, generator=generator)
    return q, k, v


def _ref(q, k, v, do, causal, scale, dtype, grads=True):
    """attention_ref in ``dtype``: (out, lse, (dq, dk, dv))."""
    q, k, v = (t.detach().to(dtype).requires_grad_(grads) for t in (q, k, v))
    out, lse = attention_ref(q, k, v, causal=causal, scale=scale)
    g = torch.autograd.grad(out, (q, k, v), do.to(dtype)) if grads else None
    return out.detach(), lse, g


def _check(name, got, same, ref64):
    e, e_ref = _err(got, ref64), _err(same, ref64)
    print(f"{name}: err {e:.3e}  same-dtype reference {e_ref:.3e}")
    assert not torch.isnan(got).any(), f"{name}: NaN (an element was not written)"
    assert within_criterion(e, e_ref, ref64, got.dtype), (name, e, e_ref)


def _run_and_check(B, H, Hkv, Nq, Nk, D, causal, dtype, fwd_cfg=None, bwd_cfg=None, scale=None, backward=True,
                   seed=None):
    """Run the raw launchers on random inputs (from ``seed``'s generator, else the test's seeded
    global one) and hold out, lse and the gradients to the criterion."""
    gen = None if seed is None else torch.Generator(device=DEV).manual_seed(seed)
    q, k, v = _inputs(B, H, Hkv, Nq, Nk, D, dtype, generator=gen)
    scale = D ** -0.5 if scale is None else scale
    nan = float("nan")
    out = torch.full((B, H, Nq, D), nan, dtype=dtype, device=DEV)
    lse = torch.full((B, H, Nq), nan, dtype=torch.float32, device=DEV)
    mask = Mask(-1, 0 if causal else -1)
    prefill_forward(q, k, v, mask=mask, scale=scale, config=fwd_cfg, out=out, lse=lse)
    do = torch.randn(out.shape, dtype=dtype, device=DEV, generator=gen)
    o64, l64, g64 = _ref(q, k, v, do, causal, scale, torch.float64, backward)
    o_same, _, g_same = _ref(q, k, v, do, causal, scale, dtype, backward)
    _check("out", out, o_same, o64)
    seen = torch.isfinite(l64)  # rows that see at least one key
    lse_err = _err(lse[seen], l64[seen])
    print(f"lse: err {lse_err:.3e}")
    assert lse_err <= 1e-3 * max(1.0, l64[seen].abs().max().item() if seen.any() else 1.0)
    assert torch.equal(torch.isinf(lse), ~seen) and (lse[~seen] < 0).all(), "empty rows: lse = -inf"
    assert (out[~seen] == 0).all(), "empty rows: out = 0"
    if not backward:
        return
    grads = [torch.full(t.shape, nan, dtype=dtype, device=DEV) for t in (q, k, v)]
    prefill_backward(do, q, k, v, out, lse, mask=mask, scale=scale, config=bwd_cfg,
                     dq=grads[0], dk=grads[1], dv=grads[2])
    for name, g, s, r in zip(("dq", "dk", "dv"), grads, g_same, g64):
        _check(name, g, s, r)


# -- the interpreter grid (CI): raw launchers, small shapes, 16×16 blocks -------------------------

CPU_CASES = [
    # B, H, Hkv, Nq, Nk, D, causal, dtype
    (1, 2, 2, 97, 97, 64, False, torch.float16),  # awkward N: ragged last blocks
    (1, 2, 2, 97, 97, 64, True, torch.bfloat16),  # causal, diagonal blocks masked, others skipped
    (1, 4, 1, 33, 70, 32, True, torch.float16),  # MQA, Nq < Nk (bottom-right diagonal)
    (1, 4, 2, 53, 37, 96, True, torch.bfloat16),  # GQA, D = 96 padded to 128, Nq > Nk: empty rows
    (2, 1, 1, 1, 1, 32, False, torch.float16),  # N = 1
    (1, 2, 2, 1, 40, 128, True, torch.float16),  # one query row sees every key
]


@pytest.mark.parametrize("B,H,Hkv,Nq,Nk,D,causal,dtype", CPU_CASES)
def test_kernels_match_reference(B, H, Hkv, Nq, Nk, D, causal, dtype):
    _run_and_check(B, H, Hkv, Nq, Nk, D, causal, dtype, scale=0.37)


@pytest.mark.parametrize("variant", ["tma+atomic", "half-height-diagonal", "warp-specialised", "register-capped"])
def test_variants_match_reference(variant):
    """The measured alternatives: tensor-descriptor loads in the forward and dQ by atomics; and
    block sizes where the backward walks the causal diagonal in half-height steps (Br >= 32);
    the warp-specialised key loop; and a register cap."""
    if variant == "tma+atomic":
        fwd = FwdConfig(64, 64, 4, 2, tma=True) if DEV == "cpu" else FwdConfig(128, 64, 4, 2, tma=True)
        bwd = BwdConfig(16, 16, 1, 1, 16, 16, 1, 1, dq_atomic=True) if DEV == "cpu" else None
    elif variant == "register-capped":  # two 8-warp programs per SM on Hopper
        fwd = FwdConfig(16, 16, 1, 1, tma=True, maxnreg=128) if DEV == "cpu" else \
            FwdConfig(128, 64, 8, 2, tma=True, maxnreg=128)
        bwd = None
    elif variant == "warp-specialised":
        fwd = FwdConfig(16, 16, 1, 1, tma=True, warp_spec=True) if DEV == "cpu" else \
            FwdConfig(128, 128, 8, 3, tma=True, warp_spec=True)
        bwd = None
    else:
        fwd = FwdConfig(32, 16, 1, 1) if DEV == "cpu" else FwdConfig(128, 64, 8, 3)
        bwd = BwdConfig(32, 16, 1, 1, 32, 16, 1, 1) if DEV == "cpu" else BwdConfig(64, 128, 8, 2, 128, 64, 8, 2)
    Nq, Nk = (77, 45) if variant == "tma+atomic" else (45, 77)  # the first has empty rows (Nq > Nk)
    _run_and_check(1, 4, 2, Nq, Nk, 96, True, torch.bfloat16, fwd_cfg=fwd, bwd_cfg=bwd)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(B=st.integers(1, 2), Hkv=st.integers(1, 2), group=st.integers(1, 3), Nq=st.integers(1, 40),
       Nk=st.integers(1, 40), D=st.sampled_from([32, 64, 96]), causal=st.booleans(), seed=st.integers(0, 2**31 - 1))
def test_random_shapes(B, Hkv, group, Nq, Nk, D, causal, seed):
    # the tensors come from the example's own seed, so a failing example replays exactly
    _run_and_check(B, Hkv * group, Hkv, Nq, Nk, D, causal, torch.float16, seed=seed)


def test_head_dim_256_forward():
    _run_and_check(1, 1, 1, 20, 33, 256, True, torch.float16, backward=False)


# -- the operator: autograd, lse gradient, torch.compile, fallback, bad input ----------------------


def test_operator_autograd_with_lse():
    """flash_attention_triton through autograd, with a loss that also uses the logsumexp."""
    q, k, v = _inputs(1, 2, 1, 19, 24, 32, torch.float16)
    grads = []
    for dt in (torch.float16, torch.float64):
        qq, kk, vv = (t.detach().clone().requires_grad_() for t in (q, k, v))
        if dt == torch.float16:
            out, lse = flash_attention_triton(qq, kk, vv, causal=True, return_lse=True)
        else:
            out, lse = attention_ref(qq.double(), kk.double(), vv.double(), causal=True)
        (out.float().square().sum() + lse.float().sum()).backward()
        grads.append([t.grad for t in (qq, kk, vv)])
    for name, g, r in zip(("dq", "dk", "dv"), *grads):
        e = _err(g, r)
        print(f"{name}: err {e:.3e}")
        assert e < 2e-2 * max(1.0, r.abs().max().item())


def test_eager_function_equals_registered_op():
    """Eager calls run a plain autograd.Function, torch.compile traces the registered op: both
    must give the same outputs and gradients (lse's gradient included), bit for bit."""
    q, k, v = _inputs(1, 4, 2, 21, 30, 32, torch.float16)
    do = torch.randn(q.shape, dtype=q.dtype, device=q.device)
    results = []
    for call in (lambda q, k, v: flash_attention_triton(q, k, v, causal=True, scale=0.3, return_lse=True),
                 lambda q, k, v: torch.ops.attnlab.flash_attn_fwd(q, k, v, -1, 0, 0.3, None, None, False)):
        qq, kk, vv = (t.detach().clone().requires_grad_() for t in (q, k, v))
        out, lse = call(qq, kk, vv)
        loss = (out * do).sum() + 0.5 * lse.sum()
        results.append([out, lse, *torch.autograd.grad(loss, (qq, kk, vv))])
        # only the output used: no lse gradient reaches the backward
        qq, kk, vv = (t.detach().clone().requires_grad_() for t in (q, k, v))
        results[-1] += list(torch.autograd.grad((call(qq, kk, vv)[0] * do).sum(), (qq, kk, vv)))
    for a, b in zip(*results):
        assert torch.equal(a, b)


def test_operator_under_torch_compile_fullgraph():
    """The op is registered with torch.library: fake tensors trace it, autograd differentiates it."""
    q, k, v = (t.requires_grad_() for t in _inputs(1, 2, 1, 24, 24, 32, torch.float16))

    def f(q, k, v):
        return flash_attention_triton(q, k, v, causal=True).float().square().sum()

    backend = "inductor" if DEV == "cuda" else "aot_eager"
    compiled = torch.compile(f, backend=backend, fullgraph=True)
    g_eager = torch.autograd.grad(f(q, k, v), (q, k, v))
    g_comp = torch.autograd.grad(compiled(q, k, v), (q, k, v))
    for a, b in zip(g_eager, g_comp):  # same kernels; only the loss's own backward may round differently
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-3)


def _model_layout(B, N, H, D, dtype, gen=None):
    """A model's projection: (B, N, H, D) storage seen as (B, H, N, D)."""
    return torch.randn(B, N, H, D, dtype=dtype, device=DEV, generator=gen).transpose(1, 2)


def _stride_order(x):
    """x's dimensions, outermost first (stride 0 outermost)."""
    s = x.stride()
    return sorted(range(x.dim()), key=lambda i: (-s[i] if s[i] else -float("inf"), i))


@pytest.mark.parametrize("shape", [(2, 3, 5, 4), (1, 7, 1, 16), (3, 1, 4, 8), (2, 4, 6, 8)])
def test_empty_like_layout_follows_the_strides(shape):
    """Outputs and gradients are laid out as their inputs: dimensions in the inputs' stride order,
    dense; a contiguous input gives a contiguous tensor, a broadcast dimension goes outermost."""
    from attnlab.gpu.layout import empty_like_layout

    B, H, N, D = shape
    base = torch.empty(B, N, H, D)
    for x in (base.permute(0, 2, 1, 3), base.permute(0, 2, 1, 3).contiguous(), base[:, :, :1].expand(B, N, H, D)
              .permute(0, 2, 1, 3)):
        t = empty_like_layout(x)
        assert t.shape == x.shape and t.permute(_stride_order(t)).is_contiguous()  # dense
        assert _stride_order(t) == _stride_order(x) or 1 in shape  # size-1 dimensions may go anywhere
        if x.is_contiguous():
            assert t.is_contiguous()
    x = base.permute(0, 2, 1, 3)
    t = empty_like_layout(x, (B, H, N, 2 * D), dtype=torch.float16)  # another last dim, another dtype
    assert t.shape == (B, H, N, 2 * D) and t.dtype == torch.float16 and t.transpose(1, 2).is_contiguous()


@pytest.mark.parametrize("causal", [False, True])
def test_model_layout_in_model_layout_out(causal):
    """(B, N, H, D) projections seen as (B, H, N, D): the output and the gradients come back in that
    layout (so a model's transpose and reshape to (B, N, H·D) copy nothing), with the reference's
    values; GQA. Contiguous inputs keep contiguous outputs and gradients."""
    B, N, H, Hkv, D = 1, 45, 4, 2, 32
    gen = torch.Generator(device=DEV).manual_seed(5)
    q = _model_layout(B, N, H, D, torch.bfloat16, gen).requires_grad_()
    k, v = (_model_layout(B, N, Hkv, D, torch.bfloat16, gen).requires_grad_() for _ in range(2))
    out = flash_attention_triton(q, k, v, causal=causal)
    do = _model_layout(B, N, H, D, torch.bfloat16, gen)
    g = torch.autograd.grad(out, (q, k, v), do)
    assert out.transpose(1, 2).is_contiguous()
    assert all(t.transpose(1, 2).is_contiguous() for t in g)
    o64, _, g64 = _ref(q, k, v, do, causal, None, torch.float64)
    o_same, _, g_same = _ref(q, k, v, do, causal, None, torch.bfloat16)
    _check("out", out, o_same, o64)
    for name, a, s_, r in zip(("dq", "dk", "dv"), g, g_same, g64):
        _check(name, a, s_, r)
    qc, kc, vc = (t.detach().contiguous().requires_grad_() for t in (q, k, v))
    out_c = flash_attention_triton(qc, kc, vc, causal=causal)
    g_c = torch.autograd.grad(out_c, (qc, kc, vc), do)
    assert out_c.is_contiguous() and all(t.is_contiguous() for t in g_c)
    torch.testing.assert_close(out_c, out, rtol=0, atol=0)  # the same kernels, only the layout differs
    for a, b in zip(g_c, g):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_dq_atomics_into_the_model_layout():
    """The dQ-atomics backward accumulates dQ in a contiguous float32 buffer and stores it into the
    model-layout gradient: the same values as the default backward, in q's layout."""
    B, N, H, Hkv, D = 1, 37, 4, 2, 32
    gen = torch.Generator(device=DEV).manual_seed(7)
    q, do = (_model_layout(B, N, H, D, torch.float16, gen) for _ in range(2))
    k, v = (_model_layout(B, N, Hkv, D, torch.float16, gen) for _ in range(2))
    mask = Mask(-1, 0)
    out, lse = prefill_forward(q, k, v, mask=mask, scale=0.2)
    base = default_bwd_config(D, True, q.device)
    got = prefill_backward(do, q, k, v, out, lse, mask=mask, scale=0.2,
                           config=BwdConfig(**{**base.__dict__, "dq_atomic": True}))
    want = prefill_backward(do, q, k, v, out, lse, mask=mask, scale=0.2, config=base)
    assert got[0].transpose(1, 2).is_contiguous()
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("layout", ["contiguous", "model"])
@pytest.mark.parametrize("scale", [1.0, 0.125])
def test_store_dq_writes_the_scaled_sum_in_any_layout(layout, scale):
    """``store_dq``: the float32 accumulator, scaled, into a bfloat16 gradient of either layout; the
    values are the accumulator's times the scale, rounded once."""
    from attnlab.gpu.layout import store_dq

    gen = torch.Generator(device=DEV).manual_seed(8)
    B, H, N, D = 2, 3, 37, 32
    acc = torch.randn(B, H, N, D, device=DEV, generator=gen)
    dq = torch.full((B, H, N, D), float("nan"), dtype=torch.bfloat16, device=DEV)
    if layout == "model":
        dq = torch.full((B, N, H, D), float("nan"), dtype=torch.bfloat16, device=DEV).transpose(1, 2)
    store_dq(acc, dq, scale=scale)
    assert torch.equal(dq, (acc * scale).to(torch.bfloat16))
    assert (dq.is_contiguous() if layout == "contiguous" else dq.transpose(1, 2).is_contiguous())


@pytest.mark.parametrize("layout", ["contiguous", "model"])
@pytest.mark.parametrize("Nq,D,split_d", [(1, 64, 64), (70, 64, 64), (129, 128, 64), (37, 64, 32), (64, 128, 128)])
def test_store_dq_tiles_puts_register_order_back_in_rows(layout, Nq, D, split_d):
    """The Gluon backward's dQ buffer holds 64-row tiles in the wgmma accumulator's register order:
    element (row 16w + 8a + l // 4, column 8i + 2(l % 4) + e) of a tile at ((i·128 + 32w + l)·2 + a)·2 + e.
    ``dq_to_tiles`` (PyTorch) lays a dQ out so — checked element by element against that formula — and
    ``store_dq_tiles`` (the kernel on the backward's way out) puts it back, scaled, in either layout, with
    the padding rows of a head's last block dropped."""
    from attnlab.gpu.layout import dq_tiles_shape, dq_to_tiles, store_dq_tiles

    gen = torch.Generator(device=DEV).manual_seed(Nq + D)
    B, H = 2, 3
    acc = torch.randn(B, H, Nq, D, device=DEV, generator=gen)
    tiles = dq_to_tiles(acc, split_d)
    assert tuple(tiles.shape) == dq_tiles_shape(B, H, Nq, D, split_d)
    flat, nb = tiles.view(-1).cpu(), -(-Nq // 64)
    for b, h, m, d in [(0, 0, 0, 0), (1, 2, Nq - 1, D - 1), (1, 1, Nq // 2, D // 3), (0, 2, min(Nq - 1, 17), 9)]:
        r, c = m % 64, d % split_d
        w, a, lh, i, ll, e = r // 16, (r // 8) % 2, r % 8, c // 8, (c // 2) % 4, c % 2
        tile = ((b * H + h) * nb + m // 64) * (D // split_d) + d // split_d
        assert flat[tile * 64 * split_d + ((i * 128 + 32 * w + 4 * lh + ll) * 2 + a) * 2 + e] == acc[b, h, m, d].cpu()
    assert float(tiles.abs().sum()) == pytest.approx(float(acc.abs().sum()), rel=1e-5)  # the padding is zero
    dq = torch.full((B, H, Nq, D), float("nan"), dtype=torch.bfloat16, device=DEV)
    if layout == "model":
        dq = torch.full((B, Nq, H, D), float("nan"), dtype=torch.bfloat16, device=DEV).transpose(1, 2)
    store_dq_tiles(tiles, dq, split_d, scale=0.125)
    assert torch.equal(dq, (acc * 0.125).to(torch.bfloat16))


@pytest.mark.parametrize("lens", [[1, 64, 0, 130, 63], [200], [0, 0, 5]])
def test_packed_rows_and_the_packed_store(lens):
    """A packed batch in the Gluon backward's buffers: ``packed_rows`` starts each sequence at a multiple of 64
    (within ``padded_rows_bound``), the preprocessing kernel writes each sequence's L₂ and Dᵢ from there, and
    ``store_dq_tiles`` puts each sequence's tiles back into its packed rows (nothing written past them)."""
    from attnlab.gpu.layout import dq_to_tiles, packed_rows, padded_rows_bound, store_dq_tiles
    from attnlab.gpu.prefill_bwd import _attn_bwd_prep

    gen = torch.Generator(device=DEV).manual_seed(len(lens) + sum(lens))
    H, D, split_d = 2, 64, 32
    total, B = sum(lens), len(lens)
    cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32, device=DEV)
    cu_p = packed_rows(cu)
    rows = padded_rows_bound(total, B)
    starts = [0]
    for n in lens:
        starts.append(starts[-1] + -(-n // 64) * 64)
    assert cu_p.tolist() == starts and cu_p.dtype == torch.int32 and rows % 64 == 0 and starts[-1] <= rows
    # dQ: each sequence's rows at their padded place in (1, H, rows, D), as tiles, back into (1, H, total, D)
    acc = torch.zeros(1, H, rows, D, device=DEV)
    ref = torch.randn(total, H, D, device=DEV, generator=gen)
    for s, n in enumerate(lens):
        acc[0, :, starts[s]:starts[s] + n] = ref[cu[s]:cu[s] + n].transpose(0, 1)
    dq = torch.full((total + 3, H, D), float("nan"), dtype=torch.bfloat16, device=DEV)  # 3 rows past the batch
    store_dq_tiles(dq_to_tiles(acc, split_d), dq[:total].transpose(0, 1).unsqueeze(0), split_d, scale=0.5,
                   packed=(cu, cu_p, rows, max(lens)))
    assert torch.equal(dq[:total], (ref * 0.5).to(torch.bfloat16)) and dq[total:].isnan().all()
    # L₂ and Dᵢ: row r of sequence s at padded row cu_p[s] + r − cu[s] of its head
    out, do = (torch.randn(total, H, D, device=DEV, generator=gen) for _ in range(2))
    lse = torch.randn(1, H, total, device=DEV, generator=gen)
    delta = torch.full((1, H, rows), float("nan"), device=DEV)
    lse2 = delta.clone()
    o4, do4 = (t.transpose(0, 1).unsqueeze(0) for t in (out, do))
    if B * H and max(lens):
        _attn_bwd_prep[(-(-max(lens) // 16), B * H)](o4, do4, lse, lse, delta, lse2, *o4.stride()[:3],
                                                      *do4.stride()[:3], H, total, rows, HEAD_D=D, BLOCK_D=D,
                                                      BLOCK_M=16, HAS_DLSE=False, CU_Q=cu, CU_P=cu_p)
    want = (out * do).sum(-1).transpose(0, 1)  # (H, total)
    for s, n in enumerate(lens):
        torch.testing.assert_close(delta[0, :, starts[s]:starts[s] + n], want[:, cu[s]:cu[s] + n])
        torch.testing.assert_close(lse2[0, :, starts[s]:starts[s] + n], lse[0, :, cu[s]:cu[s] + n] * 1.4426950408889634)
        assert delta[0, :, starts[s] + n:starts[s + 1]].isnan().all()  # padding rows untouched


_GUARDED_STORE = r"""
import sys
import torch
from attnlab.gpu.layout import dq_to_tiles, packed_rows, store_dq_tiles

dev = sys.argv[1]
lens, H, D, split_d = [300, 1, 0, 700, 128], 2, 64, 64  # the last sequence 9 query blocks shorter than the longest
total = sum(lens)
cu = torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32)
cu_p = packed_rows(cu)
rows = int(cu_p[-1])  # exactly the sequences' padded rows: the last head's last sequence's tiles end the buffer
ref = torch.randn(total, H, D, generator=torch.Generator().manual_seed(0))
acc = torch.zeros(1, H, rows, D)
for s, n in enumerate(lens):
    acc[0, :, int(cu_p[s]):int(cu_p[s]) + n] = ref[int(cu[s]):int(cu[s]) + n].transpose(0, 1)
# (with PYTORCH_NO_CUDA_MEMORY_CACHING=1 the tiles an allocation of their own: memcheck reports a read past them)
tiles, cu, cu_p = dq_to_tiles(acc, split_d).to(dev), cu.to(dev), cu_p.to(dev)
dq = torch.full((total, H, D), float("nan"), device=dev)
store_dq_tiles(tiles, dq.transpose(0, 1).unsqueeze(0), split_d, scale=0.5, packed=(cu, cu_p, rows, max(lens)))
assert torch.equal(dq.cpu(), ref * 0.5)
print("ok")
"""


@pytest.mark.gpu
def test_gpu_packed_store_reads_no_tile_past_a_sequence():
    """``store_dq_tiles`` of a packed batch launches programs for the longest sequence's query blocks in every
    sequence; those past a shorter sequence's rows must not read its tiles' buffer there: for the last head's last
    sequence that is past the end of the buffer (a read that stopped an H200 on an illegal memory access, in
    whichever test's allocation happened to end a memory segment). The tiles in one allocation of their own, under
    compute-sanitizer's memcheck (skipped where the machine has none). On the CPU, ``test_guarded_memory.py``'s
    ``layout`` case puts them against an unreadable page."""
    import os
    import shutil

    san = shutil.which("compute-sanitizer") or os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin",
                                                             "compute-sanitizer")
    if not os.path.exists(san):
        pytest.skip("no compute-sanitizer on this machine")
    res = subprocess.run([san, "--tool", "memcheck", "--error-exitcode", "3", sys.executable, "-c", _GUARDED_STORE,
                          DEV], capture_output=True, text=True, env=dict(os.environ, PYTORCH_NO_CUDA_MEMORY_CACHING="1"),
                         timeout=600)
    assert res.returncode == 0 and "ok" in res.stdout.splitlines(), (res.returncode, res.stdout[-3000:],
                                                                      res.stderr[-3000:])
    assert "ERROR SUMMARY: 0 errors" in res.stdout + res.stderr


def test_packed_rows_are_kept_for_the_same_unchanged_lengths():
    """``packed_rows`` keeps its last result for the same tensor while it is unchanged, and computes anew for
    another tensor or after the lengths changed in place."""
    from attnlab.gpu.layout import packed_rows

    cu = torch.tensor([0, 3, 70], dtype=torch.int32, device=DEV)
    first = packed_rows(cu)
    assert packed_rows(cu) is first and first.tolist() == [0, 64, 192]
    other = cu.clone()
    assert packed_rows(other) is not first and packed_rows(other).tolist() == [0, 64, 192]
    cu[2] = 200  # in place: a new version of the same tensor
    assert packed_rows(cu).tolist() == [0, 64, 320]


@pytest.mark.parametrize("cu,total", [
    ([0, 30, 10, 40], 40), ([-100, 5, -7, 40], 40), ([0, 1000, 2000, 2**31 - 1], 40), ([0, 5, 10, 20], 40),
    ([-(2**40), 2**40, 3, 2**62], 40), ([0, 3, 3, 70], 70), ([], 0)])
def test_packed_bounds_clamp_any_lengths_into_the_packed_tensors(cu, total):
    """``packed_bounds``: each entry clamped into [0, total] and to at least the one before, int32 — the running
    clamp written out here — so valid lengths pass unchanged and padded rows (``packed_rows``) stay within
    ``padded_rows_bound``; kept for the same unchanged tensor."""
    from attnlab.gpu.layout import packed_bounds, packed_rows, padded_rows_bound

    t = torch.tensor(cu, dtype=torch.int64 if any(abs(x) >= 2**31 for x in cu) else torch.int32, device=DEV)
    want, last = [], 0
    for x in cu:
        last = min(max(x, 0, last), total)
        want.append(last)
    got = packed_bounds(t, total)
    assert got.dtype == torch.int32 and got.tolist() == want
    assert packed_bounds(t, total) is got
    if len(cu) > 1:
        assert packed_rows(got)[-1].item() <= padded_rows_bound(total, len(cu) - 1)
    if cu == [0, 3, 3, 70]:  # valid: unchanged
        assert got.tolist() == cu


def test_store_dq_tiles_refuses_tiles_of_another_shape():
    from attnlab.gpu.layout import dq_to_tiles, store_dq_tiles

    tiles = dq_to_tiles(torch.randn(1, 2, 70, 64, device=DEV), 64)
    dq = torch.zeros(1, 2, 129, 64, dtype=torch.bfloat16, device=DEV)  # three blocks of rows, the tiles hold two
    with pytest.raises(ValueError, match="do not hold"):
        store_dq_tiles(tiles, dq, 64)
    assert not dq.any()  # nothing written


def test_fake_outputs_have_the_real_layouts():
    """torch.compile plans with the registered ops' fake outputs: their strides must be those the
    kernels' launchers really allocate (else compiled code would read the output wrongly)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    gen = torch.Generator(device=DEV).manual_seed(6)
    for layout in (_model_layout, lambda B, N, H, D, dt, g: _model_layout(B, N, H, D, dt, g).contiguous()):
        q, k, v = layout(1, 24, 4, 32, torch.float16, gen), *(layout(1, 24, 2, 32, torch.float16, gen) for _ in range(2))
        out, lse = torch.ops.attnlab.flash_attn_fwd(q, k, v, -1, 0, 0.3, None, None, False)
        grads = torch.ops.attnlab.flash_attn_bwd(out, q, k, v, out, lse, None, -1, 0, 0.3, None, None, False)
        with FakeTensorMode(allow_non_fake_inputs=True) as mode:
            fq, fk, fv, fo, fl = (mode.from_tensor(t) for t in (q, k, v, out, lse))
            f_out, f_lse = torch.ops.attnlab.flash_attn_fwd(fq, fk, fv, -1, 0, 0.3, None, None, False)
            f_grads = torch.ops.attnlab.flash_attn_bwd(fo, fq, fk, fv, fo, fl, None, -1, 0, 0.3, None, None, False)
        assert f_out.stride() == out.stride() and f_lse.stride() == lse.stride()
        assert [t.stride() for t in f_grads] == [t.stride() for t in grads]
    # packed batches: (total, H, D) as the heads of a (total, H·D) projection
    cu = torch.tensor([0, 10, 24], dtype=torch.int32, device=DEV)
    q = torch.randn(24, 4 * 32, dtype=torch.float16, device=DEV, generator=gen).view(24, 4, 32)
    k, v = (torch.randn(24, 2 * 32, dtype=torch.float16, device=DEV, generator=gen).view(24, 2, 32) for _ in range(2))
    out, lse = torch.ops.attnlab.flash_attn_varlen_fwd(q, k, v, cu, cu, 14, 14, -1, 0, 0.3, None, None, False)
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        f_out, _ = torch.ops.attnlab.flash_attn_varlen_fwd(*(mode.from_tensor(t) for t in (q, k, v, cu, cu)), 14, 14,
                                                            -1, 0, 0.3, None, None, False)
    assert f_out.stride() == out.stride()


def test_unsupported_inputs_are_refused_with_the_reason():
    """The Triton entry point never falls back (attnlab.flash_attention does): it says why."""
    q, k, v = _inputs(1, 2, 2, 17, 23, 59, torch.float32)  # float32 and D = 59: not kernel shapes
    with pytest.raises(ValueError, match="do not take dtype torch.float32"):
        flash_attention_triton(q, k, v, causal=True)
    with pytest.raises(ValueError, match="do not take head dim 59"):
        flash_attention_triton(q.half(), k.half(), v.half(), causal=True)
    q, k, v = (t.requires_grad_() for t in _inputs(1, 2, 2, 17, 23, 256, torch.float16))
    with pytest.raises(ValueError, match="head dim 256 with gradients"):
        flash_attention_triton(q, k, v)


@pytest.mark.gpu
def test_dispatch_falls_back_with_one_warning_per_reason(monkeypatch):
    import warnings

    from attnlab import _runtime

    monkeypatch.setattr(_runtime, "_warned", set())
    q, k, v = _inputs(1, 2, 2, 17, 23, 59, torch.float32)  # float32 and D = 59: not kernel shapes
    with pytest.warns(RuntimeWarning, match="blockwise PyTorch path"):
        out = attnlab.flash_attention(q, k, v, causal=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        attnlab.flash_attention(q, k, v, causal=True)  # same reason: no second warning
    ref, _ = attention_ref(q.double(), k.double(), v.double(), causal=True)
    assert _err(out, ref) < 1e-5


@pytest.mark.skipif(DEV != "cpu", reason="the interpreter's check is for CPU tensors")
def test_an_interpreter_that_cannot_run_here_is_named_before_any_kernel(monkeypatch):
    """Triton's CPU interpreter up to 3.6 turns one-element arrays into ints with ``int()``, which numpy 2.4 refuses:
    ``interpreter_problem`` finds that from the interpreter's source and the numpy installed, and the Triton entry
    points (prefill and decode) then raise a ValueError that names it, where the interpreter would fail deep inside
    a kernel."""
    import numpy

    from attnlab import _runtime
    from attnlab.gpu import decode, flash_decode_triton
    from attnlab.gpu import prefill as P

    old = "    scope.set_attr(tensor, '__index__', lambda self: int(self.handle.data))"
    new = "    scope.set_attr(tensor, '__index__', lambda self: int(self.handle.data.squeeze()))"
    try:
        int(numpy.array([1]))
        refuses = False
    except TypeError:
        refuses = True
    found = _runtime._interpreter_source_problem(old, "3.6.0")
    assert (found is not None) == refuses
    assert _runtime._interpreter_source_problem(new, "3.9.0") is None
    assert found is None or found.startswith("the CPU interpreter of triton 3.6.0 under numpy ")
    message = "the CPU interpreter of triton 3.6.0 under numpy 2.4.6 (it converts one-element arrays with int())"
    monkeypatch.setattr(P, "_interpreter_problem", lambda: message)
    monkeypatch.setattr(decode, "interpreter_problem", lambda: message)
    q, k, v = _inputs(1, 2, 2, 17, 23, 64, torch.float16)
    with pytest.raises(ValueError, match="do not take the CPU interpreter of triton 3.6.0 under numpy 2.4.6"):
        flash_attention_triton(q, k, v, causal=True)
    with pytest.raises(ValueError, match="do not take the CPU interpreter of triton 3.6.0"):
        flash_decode_triton(q[:, :, :1], k, v)


def test_bad_input_raises_clear_errors():
    q, k, v = _inputs(1, 2, 2, 8, 8, 32, torch.float16)
    with pytest.raises(ValueError, match="head dim"):
        flash_attention_triton(q, k[..., :16], v)
    with pytest.raises(ValueError, match="multiple"):
        flash_attention_triton(q, k[:, :1].expand(1, 3, 8, 32)[:, :3], v[:, :1].expand(1, 3, 8, 32))
    with pytest.raises(TypeError, match="causal"):
        flash_attention_triton(q, k, v, causal="yes")
    with pytest.raises(ValueError, match="scale"):
        flash_attention_triton(q, k, v, scale=float("nan"))


def test_gpu_package_imports_without_triton():
    code = ("import sys; sys.modules['triton'] = None\n"
            "import attnlab, attnlab.gpu as g, torch\n"
            "assert g.is_available() is False\n"
            "assert not any(m.startswith('triton') and sys.modules[m] is not None for m in sys.modules)\n"
            "print('ok')")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr[-2000:]


# -- on a GPU: the real block sizes, awkward and large shapes ---------------------------------------

GPU_CASES = [
    # B, H, Hkv, Nq, Nk, D, causal, dtype
    (2, 4, 4, 1025, 1025, 64, False, torch.float16),
    (2, 4, 4, 1025, 1025, 64, True, torch.bfloat16),
    (1, 4, 2, 97, 1025, 128, True, torch.float16),  # GQA, Nq < Nk
    (1, 8, 1, 1025, 97, 96, True, torch.bfloat16),  # MQA, D = 96, Nq > Nk (empty rows)
    (2, 2, 2, 1, 1, 32, False, torch.bfloat16),  # N = 1
    (1, 2, 2, 1, 1025, 128, True, torch.float16),
    (1, 4, 4, 1000, 1000, 32, False, torch.float16),
    (1, 4, 4, 4096, 4096, 128, True, torch.bfloat16),
    (2, 4, 2, 2048, 2048, 96, False, torch.float16),
]


@pytest.mark.gpu
@pytest.mark.parametrize("B,H,Hkv,Nq,Nk,D,causal,dtype", GPU_CASES)
def test_gpu_kernels_match_reference(B, H, Hkv, Nq, Nk, D, causal, dtype):
    _run_and_check(B, H, Hkv, Nq, Nk, D, causal, dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("D", [64, 128])
def test_gpu_dq_atomic_variant(D):
    _run_and_check(1, 4, 4, 1025, 1025, D, True, torch.bfloat16,
                   bwd_cfg=BwdConfig(32, 128, 8, 3, 128, 64, 8, 2, dq_atomic=True))


@pytest.mark.gpu
@pytest.mark.parametrize("tma", [False, True])
def test_gpu_forward_load_paths(tma):
    _run_and_check(2, 4, 2, 1025, 777, 128, True, torch.bfloat16, fwd_cfg=FwdConfig(128, 64, 8, 3, tma=tma),
                   backward=False)


def test_block_size_table_has_a_length_class():
    """Short calls (fewer than SHORT_KEYS keys) and long ones read separate entries of the table;
    set_config changes one class or both, and refuses an unknown class without changing anything."""
    cuda = torch.device("cuda")  # the table is keyed by device type only: no GPU needed to read it
    n_short, n_long = SHORT_KEYS - 1, SHORT_KEYS
    saved = {n: default_fwd_config(128, True, cuda, n) for n in (n_short, n_long)}
    try:
        marker = FwdConfig(32, 32, 2, 1)
        set_config(128, True, fwd=marker, length="short")
        assert default_fwd_config(128, True, cuda, n_short) is marker
        assert default_fwd_config(128, True, cuda, n_long) is not marker
        assert default_fwd_config(128, True, cuda) is not marker  # no length: long
        with pytest.raises(ValueError, match="length"):
            set_config(128, True, fwd=FwdConfig(16, 16, 1, 1), length="medium")
        assert default_fwd_config(128, True, cuda, n_short) is marker
    finally:
        set_config(128, True, fwd=saved[n_short], length="short")
        set_config(128, True, fwd=saved[n_long], length="long")
    assert default_fwd_config(128, True, cuda, n_short) == saved[n_short]
    interp = default_fwd_config(96, False, torch.device("cpu"), 10)  # the interpreter's small blocks
    assert (interp.block_m, interp.block_n) == (16, 16)


def test_block_size_table_is_the_measured_sweep_winners():
    """The table's D = 64 and 128 entries are what the H200 sweeps chose (their best.json files are
    kept in benchmarks/data, later runs overriding earlier ones; the Gluon tables beside the Triton one):
    changing one without the other fails here."""
    import json
    from pathlib import Path

    cuda = torch.device("cuda")
    data = Path(__file__).resolve().parents[2] / "benchmarks" / "data"
    chosen = json.loads((data / "prefill-best-h200-run2.json").read_text())
    assert len(chosen) == 8  # D in (64, 128) x causal x length class
    for key, entry in json.loads((data / "prefill-best-h200-run3.json").read_text()).items():
        chosen[key] = chosen[key] | entry  # run 3 swept the forward alone, at D = 128
    for key, entry in chosen.items():  # the Triton kernel's entries (what runs where Gluon cannot)
        D, causal, length = key.split(",")
        n_keys = SHORT_KEYS - 1 if length == "short" else SHORT_KEYS
        assert default_fwd_config(int(D), causal == "True", cuda, n_keys, gluon=False) == FwdConfig(**entry["fwd"]), key
        assert default_bwd_config(int(D), causal == "True", cuda, n_keys, gluon=False) == BwdConfig(**entry["bwd"]), key
    gluon = json.loads((data / "prefill-best-h200-run5.json").read_text())  # run 5: Gluon against Triton
    assert len(gluon) == 4
    gluon |= json.loads((data / "prefill-best-h200-run9.json").read_text())  # run 9: D = 64 re-swept
    # non-causal calls run the winner's persistent build, faster on every non-causal row of fwd-persistent runs
    # 1 and 2 (benchmarks/fwd_persistent.py)
    faster = [best[D, c, N, "grid"] > ms for best in (fwd_persistent_best(1), fwd_persistent_best(2))
              for (D, c, N, build), ms in best.items() if build == "persistent" and not c]
    assert all(faster) and len(faster) == 8
    # causal calls: the part block first and groups of heads by K/V bytes; at D = 128 the persistent build, the
    # faster of the two on every D = 128 causal row of runs 3 and 4 that timed both; at D = 64 the persistent build
    # on 192-row tiles at every long length, faster than the 192-row grid kernel (fwd-switches runs 17 and 18)
    # and than the 128-row persistent build (runs 19 and 20) on every causal row they timed, with the same bits
    from attnlab.gpu import prefill_gluon as G

    won = []
    for run in (3, 4, 5):
        best = fwd_persistent_best(run)
        for D, c, N, build in list(best):
            if not c or build != "grid":
                continue
            auto = G.auto_head_chunk(N, D, 1, 2)
            entry = default_fwd_config(D, True, cuda, N)
            assert entry.part_first and entry.head_chunk == 0
            pf = f"persistent-pf-c{auto}"
            assert entry.persistent and entry.block_m == (128 if D == 128 else 192)
            if run == 5:  # run 5's "table" is the entry itself
                continue
            if D == 128 and (D, True, N, pf) in best and (D, True, N, "grid-pf") in best:
                won.append((run, D, N, best[D, True, N, pf] < best[D, True, N, "grid-pf"]))
    assert all(ok for *_, ok in won) and len(won) == 3, won
    switched = []
    for run in (17, 18, 19, 20):
        rows = json.loads((data / f"fwd-switches-h200-run{run}.json").read_text())["rows"]
        by = {(r["row"], r["build"]): r for r in rows if r["D"] == 64}
        for row in ("window", "causal16k", "causal2k", "causal", "causal6k"):
            if (row, "n192p") in by and (run in (17, 18)) == (row in ("window", "causal16k")):
                # runs 17-18: the shipped build was the 192-row grid; runs 19-20: the 128-row persistent one
                r = by[row, "n192p"]
                switched.append((run, row, r["vs_first"] > 1 and r["max_diff"] == 0.0))
    assert all(ok for *_, ok in switched) and len(switched) == 8, switched
    for key, entry in gluon.items():
        D, causal, length = key.split(",")
        n_keys = SHORT_KEYS - 1 if length == "short" else SHORT_KEYS
        want = dataclasses.replace(FwdConfig(**entry["fwd"]), persistent=causal == "False" or D == "128")
        if causal == "True":
            want = dataclasses.replace(want, part_first=True, head_chunk=0)
            if D == "64":  # 192-row persistent below MID_KEYS too (no mid entry)
                want = dataclasses.replace(want, persistent=True)
                assert default_fwd_config(64, True, cuda, SHORT_KEYS) == want
            n_keys = 8192
        assert default_fwd_config(int(D), causal == "True", cuda, n_keys) == want, key
    gluon_bwd = json.loads((data / "prefill-best-h200-run16.json").read_text())  # sweep 16: the Gluon backward
    assert len(gluon_bwd) == 8  # both length classes
    for key, entry in gluon_bwd.items():
        D, causal, length = key.split(",")
        n_keys = SHORT_KEYS - 1 if length == "short" else SHORT_KEYS
        if key == "64,True,short":  # the one short key Triton kept there, since moved (bwd-block-m runs 1 and 2)
            assert not BwdConfig(**entry["bwd"]).gluon
            continue
        assert default_bwd_config(int(D), causal == "True", cuda, n_keys) == BwdConfig(**entry["bwd"]), key
    short = default_bwd_config(64, True, cuda, SHORT_KEYS - 1)
    assert short.gluon and short.dq_lag == 0 and short.block_m1 == 64
    for run in (1, 2):  # the move's basis: the Gluon backward without the lag ahead of the lagged one, and (run 2)
        # of the Triton kernels, on the short causal and packed rows
        rows = {(r["row"], r["arm"]): r["ms"] for r in
                json.loads((data / f"bwd-block-m-h200-run{run}.json").read_text())["rows"]}
        assert rows["varlen", "g64lag0"] < rows["varlen", "g64"], run
        if run == 2:
            for row in ("varlen", "short"):
                assert rows[row, "g64lag0"] < min(rows[row, "g64"], rows[row, "table"]), (run, row)
    for D in (64, 128):  # no Gluon entry for short calls: the Triton one
        assert default_fwd_config(D, True, cuda, SHORT_KEYS - 1) == default_fwd_config(D, True, cuda, SHORT_KEYS - 1,
                                                                                         gluon=False)


@pytest.mark.gpu
@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("N", [1024, 2500])
def test_gpu_table_configs(D, causal, N):
    """Every entry of the block-size table (both length classes) against the reference."""
    _run_and_check(2, 4, 2, N, N, D, causal, torch.bfloat16)


@pytest.mark.gpu
def test_gpu_head_dim_256_forward():
    _run_and_check(1, 4, 4, 1025, 1025, 256, True, torch.bfloat16, backward=False)


@pytest.mark.gpu
def test_gpu_strided_inputs_through_the_operator():
    """(B, N, H, D) storage viewed as (B, H, N, D), as a model's projections give it."""
    B, N, H, D = 2, 300, 4, 64
    q, k, v = (torch.randn(B, N, H, D, device=DEV, dtype=torch.bfloat16).transpose(1, 2).requires_grad_()
               for _ in range(3))
    out = flash_attention_triton(q, k, v, causal=True)
    do = torch.randn_like(out)
    g = torch.autograd.grad(out, (q, k, v), do)
    assert out.transpose(1, 2).is_contiguous() and all(t.transpose(1, 2).is_contiguous() for t in g)
    o64, _, g64 = _ref(q, k, v, do, True, None, torch.float64)
    o_same, _, g_same = _ref(q, k, v, do, True, None, torch.bfloat16)
    _check("out", out, o_same, o64)
    for name, a, s, r in zip(("dq", "dk", "dv"), g, g_same, g64):
        _check(name, a, s, r)


@pytest.mark.parametrize("causal", [False, True])
def test_a_negative_scale_never_overflows_and_keeps_its_gradients(causal):
    """The forward takes a block's row maximum of the raw scores before the scale, which bounds the scaled scores
    only for a scale ≥ 0: a negative scale runs as −q with −scale. With scores spread over ±300 and scale −0.125
    (the kernels' exponentials would overflow), the output, lse and gradients meet the float64 reference, dense
    and packed."""
    from tests.helpers import check_forward

    gen = torch.Generator(device=DEV).manual_seed(3)
    B, H, N, D, scale = 1, 2, 160, 64, -0.125
    q, k = ((6 * torch.randn(B, H, N, D, generator=gen, device=DEV)).half() for _ in range(2))
    v, do = (torch.randn(B, H, N, D, generator=gen, device=DEV).half() for _ in range(2))
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    out, lse = flash_attention_triton(q, k, v, causal=causal, scale=scale, return_lse=True)
    check_forward(q.detach(), k.detach(), v.detach(), out, lse, causal=causal, scale=scale)
    grads = torch.autograd.grad(out, (q, k, v), do)
    qd, kd, vd = (t.detach().double().requires_grad_() for t in (q, k, v))
    ref_grads = torch.autograd.grad(attention_ref(qd, kd, vd, causal=causal, scale=scale)[0], (qd, kd, vd),
                                    do.double())
    for g, r in zip(grads, ref_grads):
        assert torch.isfinite(g).all() and (g.double() - r).abs().max() < 2e-2 * (1 + r.abs().max())
    cu = torch.tensor([0, 100, N], dtype=torch.int32, device=DEV)
    packed = [t.detach()[0].transpose(0, 1).contiguous() for t in (q, k, v)]  # (N, H, D)
    out_p = attnlab.flash_attention_varlen(*packed, cu, cu, max_seqlen_q=100, max_seqlen_k=100, causal=causal,
                                           scale=scale)
    assert torch.isfinite(out_p).all()
    for a, b in ((0, 100), (100, N)):
        r, _ = attention_ref(*(x[a:b].transpose(0, 1)[None].double() for x in packed), causal=causal, scale=scale)
        assert (out_p[a:b].transpose(0, 1)[None].double() - r).abs().max() < 1e-2
