"""The Gluon backward (attnlab.gpu.prefill_gluon_bwd): dQ, dK, dV in one pass, a TMA loader warp and two
consumer warp groups, dQ by float32 atomics.

Triton's interpreter cannot run Gluon. On the CPU these tests build the kernel for sm_90 (no GPU) and read
what the compiler made of it, and check the dispatch (a Gluon configuration falls back to the Triton
kernels wherever Gluon cannot run, deterministic calls included) and the refusals. On a Hopper GPU the
kernel runs and its gradients are held to the float64 criterion of the other kernels on awkward shapes.
"""


import pytest
import torch
from tests.helpers import GLUON_CASES, GLUON_WINDOW_CASES, sm90_reports, within_criterion
from tests.helpers import abs_err as _err

from attnlab.reference import attention_ref
from attnlab.variants import Mask

pytest.importorskip("triton")
from attnlab.gpu import BwdConfig, prefill_backward, prefill_forward  # noqa: E402
from attnlab.gpu import prefill_gluon as G  # noqa: E402
from attnlab.gpu import prefill_gluon_bwd as GB  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"
HOPPER = DEV == "cuda" and torch.cuda.get_device_capability() == (9, 0)
needs_gluon = pytest.mark.skipif(not G.HAVE_GLUON, reason="this triton has no Gluon")
on_hopper = pytest.mark.skipif(not (HOPPER and G.HAVE_GLUON), reason="needs a Hopper GPU and Gluon")

pytestmark = pytest.mark.usefixtures("interpreter_bfloat16")


def _gluon_cfg(stages=2, dq_split=1, dq_atomic=False, dq_shared=False, dq_lag=0):
    return BwdConfig(64, 128, 4, stages, 64, 128, 4, stages, gluon=True, dq_split=dq_split, dq_atomic=dq_atomic,
                     dq_shared=dq_shared, dq_lag=dq_lag)


@needs_gluon
def test_builds_for_sm90_as_one_pass():
    """sm_90 builds (D 64/128, causal or not, float16 and bfloat16, ring depths 2 and 3, dQ whole, in
    slices or shared by the warp groups): Sᵀ is waited for alone while dPᵀ stays in flight (wait_group 1);
    Q and dO arrive by TMA; dQ leaves by TMA bulk reductions from shared memory (or float32 atomics; one
    pass: no second kernel); registers move from the loader warp to the consumers (setmaxnreg); shared
    memory = K and V of the block, the Q/dO ring, the dSᵀ tiles and the dQ staging tiles. At D = 64
    nothing spills (at D = 128 the Triton 3.6 build spills a little: ``benchmarks/NOTES-prefill.md``)."""
    cases = [dict(D=D, causal=c, dtype="bfloat16") for D in (64, 128) for c in (False, True)]
    cases += [dict(D=128, causal=True, stages=3, dq_split=2, dq_atomic=True, dtype="float16"),
              dict(D=64, causal=False, stages=3, dtype="bfloat16"),
              dict(D=64, causal=True, dq_atomic=True, dtype="bfloat16"),
              dict(D=128, causal=False, dq_split=2, dtype="float16"),
              dict(D=128, causal=True, dq_shared=True, dtype="bfloat16"),
              dict(D=64, causal=False, dq_shared=True, dq_atomic=True, dtype="bfloat16"),
              dict(D=64, causal=True, dq_lag=1, dtype="bfloat16"), dict(D=64, causal=False, dq_lag=2, dtype="float16")]
    for case, rep in zip(cases, sm90_reports("prefill_gluon_bwd", [dict(c) for c in cases])):
        D, st = case["D"], case.get("stages", 2)
        assert 1 in rep["wait_groups"], (case, rep)
        assert rep["tma_loads"] > 0 and rep["wgmma"] > 0, (case, rep)
        tma_dq = not case.get("dq_atomic")
        if tma_dq:  # dQ by TMA bulk reductions, staged through shared memory
            assert rep["tma_reduces"] > 0 and rep["atomics"] == 0, (case, rep)
        else:  # dQ by float32 atomics (whole or in column slices)
            assert rep["atomics"] > 0 and rep["tma_reduces"] == 0, (case, rep)
        assert 24 in rep["setmaxnreg"] and max(rep["setmaxnreg"]) >= 232, (case, rep)
        lag = case.get("dq_lag", 0)
        ds_slots = 4 if lag else 2
        expect_kb = (2 * 128 * D * 2 + 2 * st * 64 * D * 2 + ds_slots * 128 * 64 * 2) / 1024  # K, V; Q/dO; dSᵀ ring
        if tma_dq:
            expect_kb += 2 * 64 * D * 4 / 1024  # each consumer's float32 dQ tile on its way to the reduction
        assert expect_kb * 1024 == GB.smem_bytes(D, st, case.get("dq_split", 1), case.get("dq_atomic", False), lag)
        if tma_dq:  # one reduction per staged tile: per column slice and per warp group (a lagged dQ also
            # drains its last steps after the loop: a second copy of the product)
            assert rep["tma_reduces"] == 2 * case.get("dq_split", 1) * (2 if lag else 1), (case, rep)
        assert rep["smem_kb"] == pytest.approx(expect_kb, abs=1.0), (case, rep)
        assert rep["smem_kb"] <= 227, (case, rep)
        if D == 64 and rep.get("stack") is not None:
            assert rep["stack"] == 0, (case, rep)


def test_programs_go_head_first_only_for_uneven_walks_on_a_small_grid():
    """The measured sides of the rule (H200, 132 SMs): a causal GQA 32/8 layer at 8K (64 key blocks x 8
    K/V heads) goes head first; causal MHA at 16K (128 x 16) and at 4K with 4 sequences (32 x 128) go key
    block first, and so does every non-causal, non-windowed call."""
    assert GB.heads_first_default(True, 64 * 8, 132)
    assert not GB.heads_first_default(True, 128 * 16, 132)
    assert not GB.heads_first_default(True, 32 * 128, 132)
    assert not GB.heads_first_default(False, 64 * 8, 132)
    assert GB.heads_first_default(True, 7 * 132, 132) and not GB.heads_first_default(True, 8 * 132, 132)


@needs_gluon
def test_measurement_variants_leave_out_what_they_name():
    """``benchmarks/bwd_gluon_ablation.py``'s variants (``_ablate``) as sm_90 builds: the ones that add dQ
    keep their TMA reductions (5 waits at once, 7 adds an unwritten tile), the others have none; 2 and 3
    drop the dQ products' wgmmas too."""
    variants = (0, 1, 2, 3, 5, 6, 7)
    reps = dict(zip(variants, sm90_reports("prefill_gluon_bwd", [dict(D=128, causal=False, dtype="bfloat16", _ablate=a)
                                                                 for a in variants])))
    assert {a: r["tma_reduces"] > 0 for a, r in reps.items()} == {0: True, 1: False, 2: False, 3: False, 5: True,
                                                                    6: False, 7: True}
    full = reps[0]["wgmma"]
    assert all(reps[a]["wgmma"] == full for a in (1, 5, 6, 7)), reps
    assert reps[2]["wgmma"] < full and reps[3]["wgmma"] < full, reps


@needs_gluon
@pytest.mark.parametrize("bad", [dict(stages=0), dict(stages=4), dict(dq_split=3), dict(dq_split=4, D=64),
                                 dict(stages=3, dq_split=1), dict(dq_shared=True, dq_split=2),
                                 dict(consumer_regs=248), dict(consumer_regs=236), dict(dq_lag=3),
                                 dict(dq_lag=1)])
def test_gluon_backward_refuses_bad_tiles_before_any_work(bad):
    bad = dict(bad)
    D = bad.pop("D", 128)
    q = torch.zeros(1, 1, 8, D, dtype=torch.float16)
    grads = [torch.full_like(q, 7.0) for _ in range(3)]
    stats = torch.zeros(1, 1, 8)
    with pytest.raises(ValueError, match="the Gluon backward takes"):
        GB.gluon_backward(q, q, q, q, stats, stats, *grads, causal_off=None, scale=0.1, **bad)
    assert all((g == 7).all() for g in grads)  # nothing written


def _ref_grads(q, k, v, do, causal, scale, dtype, window=None):
    q, k, v = (t.detach().to(dtype).requires_grad_(True) for t in (q, k, v))
    out, _ = attention_ref(q, k, v, causal=causal, scale=scale, window=window)
    return torch.autograd.grad(out, (q, k, v), do.to(dtype))


def _check_grads(q, k, v, do, grads, causal, scale, window=None):
    g64 = _ref_grads(q, k, v, do, causal, scale, torch.float64, window)
    g_same = _ref_grads(q, k, v, do, causal, scale, q.dtype, window)
    for name, g, s, r in zip(("dq", "dk", "dv"), grads, g_same, g64):
        e, e_ref = _err(g, r), _err(s, r)
        assert not torch.isnan(g).any(), f"{name}: NaN (an element was not written)"
        assert within_criterion(e, e_ref, r, g.dtype), (name, e, e_ref)


def _forward(q, k, v, mask, scale):
    return prefill_forward(q, k, v, mask=mask, scale=scale)


@pytest.mark.parametrize("deterministic", [False, True])
def test_a_gluon_config_falls_back_to_the_triton_kernels_where_gluon_cannot_run(deterministic):
    """On the CPU (the interpreter), for softcap, and for deterministic calls (atomics add in arrival order),
    a configuration that asks for the Gluon backward still gives the right gradients, through the Triton
    kernels."""
    gen = torch.Generator(device=DEV).manual_seed(1)
    D, causal = 64, True
    q, k, v, do = (torch.randn(1, 2, 45, D, dtype=torch.float16, device=DEV, generator=gen) for _ in range(4))
    mask, scale = Mask(-1, 0), D ** -0.5
    out, lse = _forward(q, k, v, mask, scale)
    grads = prefill_backward(do, q, k, v, out, lse, mask=mask, scale=scale, config=_gluon_cfg(),
                             deterministic=deterministic)
    _check_grads(q, k, v, do, grads, causal, scale)
    if deterministic:  # the Triton kernels without atomics: bit-identical
        again = prefill_backward(do, q, k, v, out, lse, mask=mask, scale=scale, config=_gluon_cfg(),
                                 deterministic=True)
        assert all(torch.equal(a, b) for a, b in zip(grads, again))
    out_c, lse_c = prefill_forward(q, k, v, mask=mask, scale=scale, softcap=20.0)
    capped = prefill_backward(do, q, k, v, out_c, lse_c, mask=mask, scale=scale, softcap=20.0, config=_gluon_cfg())
    plain = prefill_backward(do, q, k, v, out_c, lse_c, mask=mask, scale=scale, softcap=20.0)
    for a, b in zip(capped, plain):
        torch.testing.assert_close(a, b, atol=0, rtol=0)


def test_set_config_puts_a_gluon_backward_in_its_own_table():
    """A Gluon backward given to set_config goes to the Gluon table (and is what default_bwd_config then
    returns); a Triton one replaces the Triton entry and drops the Gluon one."""
    from attnlab.gpu import default_bwd_config, set_config
    from attnlab.gpu.config import SHORT_KEYS

    cuda = torch.device("cuda")
    before, before_triton = (default_bwd_config(128, True, cuda, SHORT_KEYS, gluon=g) for g in (True, False))
    try:
        set_config(128, True, bwd=_gluon_cfg(3), length="long")
        assert default_bwd_config(128, True, cuda, SHORT_KEYS) == _gluon_cfg(3)
        assert default_bwd_config(128, True, cuda, SHORT_KEYS, gluon=False) == before_triton
        set_config(128, True, bwd=before_triton, length="long")
        assert default_bwd_config(128, True, cuda, SHORT_KEYS) == before_triton
    finally:
        set_config(128, True, bwd=before_triton, length="long")
        if before.gluon:
            set_config(128, True, bwd=before, length="long")
    assert default_bwd_config(128, True, cuda, SHORT_KEYS) == before


# -- on a Hopper GPU ---------------------------------------------------------------------------------

TILES = [(2, 1, False, False, 0), (3, 1, False, False, 0), (2, 2, True, False, 0), (2, 1, True, False, 0),
         (2, 2, False, False, 0), (2, 1, False, True, 0), (2, 1, True, True, 0), (2, 1, False, False, 1),
         (3, 1, False, True, 2)]  # (stages, dq_split, dq_atomic, dq_shared, dq_lag)


def _gpu_inputs(B, H, Hkv, Nq, Nk, D, dtype, seed):
    gen = torch.Generator(device=DEV).manual_seed(seed)
    q = torch.randn(B, H, Nq, D, dtype=dtype, device=DEV, generator=gen)
    k, v = (torch.randn(B, Hkv, Nk, D, dtype=dtype, device=DEV, generator=gen) for _ in range(2))
    do = torch.randn(B, H, Nq, D, dtype=dtype, device=DEV, generator=gen)
    return q, k, v, do


@pytest.mark.gpu
@on_hopper
@pytest.mark.parametrize("stages,dq_split,dq_atomic,dq_shared,dq_lag", TILES)
@pytest.mark.parametrize("B,H,Hkv,Nq,Nk,D,causal,dtype", GLUON_CASES)
def test_gpu_gluon_backward_matches_reference(B, H, Hkv, Nq, Nk, D, causal, dtype, stages, dq_split, dq_atomic,
                                              dq_shared, dq_lag):
    if GB.smem_bytes(D, stages, dq_split, dq_atomic, dq_lag) > GB.SMEM_LIMIT:
        pytest.skip("more shared memory than a block has (refused: test_gluon_backward_refuses_bad_tiles...)")
    q, k, v, do = _gpu_inputs(B, H, Hkv, Nq, Nk, D, dtype, Nq * 7 + Nk)
    mask, scale = Mask(-1, 0 if causal else -1), D ** -0.5
    out, lse = _forward(q, k, v, mask, scale)
    grads = [torch.full(t.shape, float("nan"), dtype=dtype, device=DEV) for t in (q, k, v)]
    prefill_backward(do, q, k, v, out, lse, mask=mask, scale=scale,
                     config=_gluon_cfg(stages, dq_split, dq_atomic, dq_shared, dq_lag), dq=grads[0], dk=grads[1],
                     dv=grads[2])
    _check_grads(q, k, v, do, grads, causal, scale)


@pytest.mark.gpu
@on_hopper
@pytest.mark.parametrize("dq_shared,dq_lag", [(False, 0), (True, 0), (False, 1), (False, 2)])
@pytest.mark.parametrize("B,H,Hkv,Nq,Nk,D,window", GLUON_WINDOW_CASES)
def test_gpu_gluon_backward_sliding_window(B, H, Hkv, Nq, Nk, D, window, dq_shared, dq_lag):
    if GB.smem_bytes(D, 2, 1, False, dq_lag) > GB.SMEM_LIMIT:
        pytest.skip("more shared memory than a block has (the lagged dQ ring is D = 64's)")
    q, k, v, do = _gpu_inputs(B, H, Hkv, Nq, Nk, D, torch.bfloat16, Nq + Nk + window[0])
    mask, scale = Mask(*window), D ** -0.5
    out, lse = _forward(q, k, v, mask, scale)
    grads = prefill_backward(do, q, k, v, out, lse, mask=mask, scale=scale,
                             config=_gluon_cfg(dq_shared=dq_shared, dq_lag=dq_lag))
    _check_grads(q, k, v, do, grads, window[1] == 0, scale, window=window)


@pytest.mark.gpu
@on_hopper
def test_gpu_gluon_backward_strided_inputs_and_lse_gradient():
    """(B, N, H, D) tensors seen as (B, H, N, D) go through the descriptors' strides, and an incoming
    gradient of the logsumexp (dlse) is folded into D_i as in the Triton kernels: both agree."""
    gen = torch.Generator(device=DEV).manual_seed(5)
    q, k, v, do = (torch.randn(2, 1500, 8, 128, dtype=torch.bfloat16, device=DEV, generator=gen).transpose(1, 2)
                   for _ in range(4))
    mask, scale = Mask(-1, 0), 0.1
    out, lse = _forward(q, k, v, mask, scale)
    dlse = torch.randn(lse.shape, device=DEV, generator=gen)
    got = prefill_backward(do, q, k, v, out, lse, mask=mask, scale=scale, config=_gluon_cfg(), dlse=dlse)
    tri = prefill_backward(do, q, k, v, out, lse, mask=mask, scale=scale, dlse=dlse,
                           config=BwdConfig(64, 128, 8, 3, 128, 64, 8, 3))
    for a, b in zip(got, tri):
        scale_ = b.float().abs().max().item()
        assert (a.float() - b.float()).abs().max().item() <= 2e-2 * max(scale_, 1.0)
