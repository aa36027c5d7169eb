"""Kept plans of the prefill calls (``prefill_fwd._FwdPlan``, ``prefill_bwd._CallPlan``): a call keeps its
launches per signature, and the next call of the signature runs them on its own tensors.

A plan is made only from compiled kernels, so the interpreter keeps none (checked on the CPU). On a GPU, for
the Triton kernels (dense and packed, windows, softcap), the Gluon forward of packed batches and the Gluon
backward (dense and packed), a call run
from its plan gives what the first path gives the same tensors: the same bits where the kernels are
deterministic (dQ by TMA reductions lands in any order: equal up to rounding), and within the criterion.
"""

import pytest
import torch
from tests.helpers import abs_err as _err
from tests.helpers import within_criterion

from attnlab.reference import attention_ref, attention_ref_varlen
from attnlab.variants import Mask

pytest.importorskip("triton")
from attnlab.gpu import BwdConfig, prefill_backward, prefill_forward  # noqa: E402
from attnlab.gpu import prefill_bwd as PB  # noqa: E402
from attnlab.gpu import prefill_fwd as PF  # noqa: E402
from attnlab.gpu import prefill_gluon as G  # noqa: E402
from attnlab.gpu import prefill_gluon_bwd as GB  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"
HOPPER = DEV == "cuda" and torch.cuda.get_device_capability() == (9, 0) and G.HAVE_GLUON

pytestmark = pytest.mark.usefixtures("interpreter_bfloat16")


def _plans(monkeypatch):
    """Empty plan caches for the test, and counters of the plans' runs."""
    monkeypatch.setattr(PF, "_PLANS", {})
    monkeypatch.setattr(PB, "_CALL_PLANS", {})
    monkeypatch.setattr(GB, "_PLANS", {})
    ran = {"fwd": 0, "bwd": 0}
    fwd_run, bwd_run = PF._FwdPlan.run, PB._CallPlan.run

    def counted_fwd(self, *a):
        ran["fwd"] += 1
        return fwd_run(self, *a)

    def counted_bwd(self, *a):
        ran["bwd"] += 1
        return bwd_run(self, *a)

    monkeypatch.setattr(PF._FwdPlan, "run", counted_fwd)
    monkeypatch.setattr(PB._CallPlan, "run", counted_bwd)
    return ran


def _inputs(shape_q, shape_kv, dtype, seed):
    gen = torch.Generator(device=DEV).manual_seed(seed)
    q, do = (torch.randn(shape_q, dtype=dtype, device=DEV, generator=gen) for _ in range(2))
    k, v = (torch.randn(shape_kv, dtype=dtype, device=DEV, generator=gen) for _ in range(2))
    return q, k, v, do


def _cu(lens):
    return torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32, device=DEV)


def test_the_interpreter_keeps_no_plan(monkeypatch):
    """Under the interpreter nothing is compiled, so no call keeps a plan; every call takes the whole path."""
    if DEV == "cuda":
        pytest.skip("on a GPU the plans are kept (the tests below)")
    ran = _plans(monkeypatch)
    q, k, v, do = _inputs((1, 2, 40, 32), (1, 2, 40, 32), torch.float16, 1)
    for _ in range(2):
        out, lse = prefill_forward(q, k, v, mask=Mask(-1, 0), scale=0.2)
        prefill_backward(do, q, k, v, out, lse, mask=Mask(-1, 0), scale=0.2)
    assert PF._PLANS == {} and PB._CALL_PLANS == {} and ran == {"fwd": 0, "bwd": 0}


def _check(q, k, v, do, out, grads, mask, scale, cu=None):
    """Output and gradients within the criterion against float64 (and same-dtype) references."""
    refs = []
    for dt in (torch.float64, q.dtype):
        qq, kk, vv = (t.detach().to(dt).requires_grad_() for t in (q, k, v))
        if cu is None:
            o, _ = attention_ref(qq, kk, vv, causal=mask.right == 0, scale=scale,
                                 window=(mask.left, mask.right) if mask.left >= 0 else None)
        else:
            o, _ = attention_ref_varlen(qq, kk, vv, *cu, causal=mask.right == 0, scale=scale)
        refs.append((o, *torch.autograd.grad(o, (qq, kk, vv), do.to(dt))))
    for name, g, r64, same in zip(("out", "dq", "dk", "dv"), (out, *grads), *refs):
        e, e_ref = _err(g, r64), _err(same.detach(), r64.detach())
        assert within_criterion(e, e_ref, r64.detach(), g.dtype), (name, e, e_ref)


TRITON_BWD = BwdConfig(64, 64, 4, 2, 64, 64, 4, 2)  # the Triton kernels, whatever the table says
GLUON_BWD = BwdConfig(64, 128, 4, 2, 64, 128, 4, 2, gluon=True)


@pytest.mark.gpu
@pytest.mark.skipif(DEV != "cuda", reason="needs a GPU (the interpreter keeps no plan)")
@pytest.mark.parametrize("route", ["triton", "gluon"])
@pytest.mark.parametrize("B,H,Hkv,Nq,Nk,D,mask", [
    (2, 4, 4, 1000, 1000, 64, (-1, 0)), (1, 8, 2, 257, 1030, 128, (-1, -1)), (1, 4, 2, 700, 900, 64, (300, 0))])
def test_gpu_a_dense_call_run_from_its_plan(B, H, Hkv, Nq, Nk, D, mask, route, monkeypatch):
    """Two calls of one signature on other tensors: the second runs the forward's and the backward's plans
    and gives what the first path gives it."""
    if route == "gluon" and not HOPPER:
        pytest.skip("the Gluon backward needs a Hopper GPU")
    ran = _plans(monkeypatch)
    mask, scale, dtype = Mask(*mask), D ** -0.5, torch.bfloat16
    cfg = TRITON_BWD if route == "triton" else GLUON_BWD
    inputs = [_inputs((B, H, Nq, D), (B, Hkv, Nk, D), dtype, seed) for seed in (Nq, Nq + 1)]
    results = []
    for attempt in range(2):  # 0: the second call runs the plans kept by the first; 1: the first path
        for cache in (PF._PLANS, PB._CALL_PLANS, GB._PLANS):
            cache.clear()
        for q, k, v, do in inputs if attempt == 0 else inputs[1:]:
            out, lse = prefill_forward(q, k, v, mask=mask, scale=scale)
            results.append((out, lse, *prefill_backward(do, q, k, v, out, lse, mask=mask, scale=scale, config=cfg)))
        if attempt == 0:
            assert ran["bwd"] == 1, "the second call did not run the kept backward plan"
            assert len(PB._CALL_PLANS) == 1 and (route == "triton") == (GB._PLANS == {})
    planned, first = results[1], results[2]
    for i, (a, b) in enumerate(zip(planned, first)):
        if i == 2 and route == "gluon":  # (dQ's additions land in any order)
            torch.testing.assert_close(a, b)
        else:
            assert torch.equal(a, b), i
    q, k, v, do = inputs[1]
    _check(q, k, v, do, planned[0], planned[2:], mask, scale)


@pytest.mark.gpu
@pytest.mark.skipif(DEV != "cuda", reason="needs a GPU (the interpreter keeps no plan)")
@pytest.mark.parametrize("route", ["triton", "gluon"])
@pytest.mark.parametrize("D,causal", [(128, True), (64, False)])
def test_gpu_a_packed_call_run_from_its_plan(D, causal, route, monkeypatch):
    """A packed batch's plans take each call's lengths: kept from a call whose cu_seqlens_q is cu_seqlens_k,
    they run a call of the same totals with other lengths, a tensor for each, and give what the first path
    gives it (the Triton kernels, or the Gluon forward and backward)."""
    if route == "gluon" and not HOPPER:
        pytest.skip("the Gluon kernels need a Hopper GPU")
    ran = _plans(monkeypatch)
    monkeypatch.setattr(GB, "PACKED", route == "gluon")
    monkeypatch.setattr(G, "PACKED", route == "gluon")
    dtype, H, Hkv = torch.bfloat16, 4, 2
    mask, scale = Mask(-1, 0 if causal else -1), D ** -0.5
    cfg = TRITON_BWD if route == "triton" else GLUON_BWD
    q, k, v, do = _inputs((1000, H, D), (1000, Hkv, D), dtype, D)

    def call(lens_q, lens_k):
        cu_q = _cu(lens_q)
        cu = (cu_q, cu_q if lens_q == lens_k else _cu(lens_k))
        out, lse = prefill_forward(q, k, v, mask=mask, scale=scale, cu_seqlens=cu, max_seqlen=(700, 700))
        grads = prefill_backward(do, q, k, v, out, lse, mask=mask, scale=scale, cu_seqlens=cu, max_seqlen=(700, 700),
                                 config=cfg)
        return (out, lse, *grads), cu

    call([100, 700, 200], [100, 700, 200])
    assert len(PF._PLANS) == 1 and len(PB._CALL_PLANS) == 1
    planned, cu = call([300, 650, 50], [500, 20, 480])
    assert ran == {"fwd": 1, "bwd": 1}
    for cache in (PF._PLANS, PB._CALL_PLANS, GB._PLANS):
        cache.clear()
    first, _ = call([300, 650, 50], [500, 20, 480])
    for i, (a, b) in enumerate(zip(planned, first)):
        if i == 2 and route == "gluon":
            torch.testing.assert_close(a, b)
        else:
            assert torch.equal(a, b), i
    _check(q, k, v, do, planned[0], planned[2:], mask, scale, cu=cu)


@pytest.mark.gpu
@pytest.mark.skipif(DEV != "cuda", reason="needs a GPU (the interpreter keeps no plan)")
def test_gpu_plans_are_keyed_by_what_the_launch_depends_on(monkeypatch):
    """A call differing from a kept plan's in anything the launch depends on (a variant's scalar, softcap,
    the configuration, a tensor's layout, the causal mask) keeps a plan of its own; ALiBi keeps none."""
    _plans(monkeypatch)
    q, k, v, do = _inputs((1, 4, 300, 64), (1, 4, 300, 64), torch.float16, 3)
    calls = [dict(mask=Mask(-1, 0), scale=0.125), dict(mask=Mask(-1, -1), scale=0.125),
             dict(mask=Mask(-1, 0), scale=0.25), dict(mask=Mask(-1, 0), scale=0.125, softcap=20.0),
             dict(mask=Mask(50, 0), scale=0.125)]
    for kw in calls:
        for _ in range(2):
            out, lse = prefill_forward(q, k, v, **kw)
            prefill_backward(do, q, k, v, out, lse, config=TRITON_BWD, **kw)
    assert len(PB._CALL_PLANS) == len(calls)
    qt = q.transpose(1, 2).contiguous().transpose(1, 2)  # another layout: another signature
    out, lse = prefill_forward(qt, k, v, **calls[0])
    prefill_backward(do, qt, k, v, out, lse, config=TRITON_BWD, **calls[0])
    assert len(PB._CALL_PLANS) == len(calls) + 1
    slopes = torch.rand(1, 4, device=DEV)  # (B, H), as the entry points pass them
    out, lse = prefill_forward(q, k, v, slopes=slopes, **calls[0])
    prefill_backward(do, q, k, v, out, lse, slopes=slopes, config=TRITON_BWD, **calls[0])
    assert len(PB._CALL_PLANS) == len(calls) + 1
