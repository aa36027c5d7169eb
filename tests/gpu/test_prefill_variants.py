"""The Triton prefill kernels' variants (attnlab.gpu, beyond §2.3): sliding windows, softcap, ALiBi, packed
variable-length batches and the deterministic backward, forward and backward, against the float64 oracles
``attention_ref`` / ``attention_ref_varlen``.

Without CUDA the kernels run in Triton's CPU interpreter on tiny shapes with 16×16 blocks; the
``@pytest.mark.gpu`` tests run the real configurations. Criterion (flash-attention's, tests/helpers.py):
for the output and each of dQ, dK, dV, err(kernel) <= 2·err(same-dtype PyTorch reference) + a dtype floor,
both measured against float64. Outputs are poisoned with NaN before each kernel runs.
"""

import dataclasses

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.helpers import abs_err, within_criterion

from attnlab import flash_attention_varlen
from attnlab.reference import attention_ref, attention_ref_varlen
from attnlab.variants import Mask

pytest.importorskip("triton")
from attnlab.gpu import BwdConfig, FwdConfig, prefill_backward, prefill_forward  # noqa: E402
from attnlab.gpu.config import default_fwd_config, variant_fwd_config  # noqa: E402
from attnlab.gpu.prefill import flash_attention_triton, flash_attention_varlen_triton  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"
F16, BF16 = torch.float16, torch.bfloat16
pytestmark = pytest.mark.usefixtures("interpreter_bfloat16")  # tests/gpu/conftest.py
BLOCKS16 = (FwdConfig(16, 16, 1, 1), BwdConfig(16, 16, 1, 1, 16, 16, 1, 1))  # explicit, on any device


def _mask(window, causal) -> Mask:
    left, right = window if window is not None else (-1, -1)
    return Mask(left, 0 if causal else right)


def _cu(lens) -> torch.Tensor:
    return torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32, device=DEV)


def _refs(q, k, v, do, dtype, *, cu=None, **kw):
    """(out, lse, (dq, dk, dv)) of the oracle run in ``dtype`` (float64: the truth)."""
    q, k, v = (t.detach().to(dtype).requires_grad_() for t in (q, k, v))
    out, lse = attention_ref(q, k, v, **kw) if cu is None else attention_ref_varlen(q, k, v, *cu, **kw)
    return out.detach(), lse, torch.autograd.grad(out, (q, k, v), do.to(dtype))


def _check(name, got, same, ref64):
    e, e_ref = abs_err(got, ref64), abs_err(same, ref64)
    print(f"{name}: err {e:.3e}  same-dtype reference {e_ref:.3e}")
    assert not torch.isnan(got).any(), f"{name}: NaN (an element was not written, or a skipped block was read)"
    assert within_criterion(e, e_ref, ref64, got.dtype), (name, e, e_ref)


def _max_seqlen(cu) -> tuple[int, int]:
    """The longest sequences of cumulative lengths (cu_q, cu_k)."""
    return tuple(int((c[1:] - c[:-1]).max()) for c in cu)


def _run_and_check(q, k, v, *, window, causal, softcap, slopes, scale, cu=None, max_seqlen="longest",
                   configs=(None, None), poisoned_keys=None, gen=None):
    """The raw launchers (outputs poisoned with NaN) against the oracles: out, lse (rows that see no key:
    out 0, lse -inf) and the three gradients. ``cu``: a packed batch's (cu_q, cu_k) tensors, launched with
    ``max_seqlen`` ("longest": the longest sequences; None: the launchers read them on the host). ``poisoned_keys``: a boolean (Nk,) mask of keys that
    no query sees, whose K/V the kernels get as NaN; their dK, dV must come back exactly 0.
    Returns (out, lse, dq, dk, dv)."""
    mask, dtype, nan = _mask(window, causal), q.dtype, float("nan")
    if cu is None:
        max_seqlen = None
    elif max_seqlen == "longest":
        max_seqlen = _max_seqlen(cu)
    kw = dict(causal=causal, scale=scale, window=window, softcap=softcap, alibi_slopes=slopes)
    do = torch.randn(q.shape, dtype=dtype, device=DEV, generator=gen)
    o64, l64, g64 = _refs(q, k, v, do, torch.float64, cu=cu, **kw)
    o_same, _, g_same = _refs(q, k, v, do, dtype, cu=cu, **kw)
    if poisoned_keys is not None:
        k, v = (t.masked_fill(poisoned_keys[..., None], nan) for t in (k, v))
    out, lse = torch.full_like(q, nan), torch.full(l64.shape, nan, device=DEV)
    prefill_forward(q, k, v, mask=mask, scale=scale, softcap=softcap, slopes=slopes, cu_seqlens=cu,
                    max_seqlen=max_seqlen, config=configs[0], out=out, lse=lse)
    _check("out", out, o_same, o64)
    seen = torch.isfinite(l64)
    assert torch.equal(torch.isinf(lse), ~seen) and (lse[~seen] < 0).all(), "rows that see no key: lse = -inf"
    assert abs_err(lse[seen], l64[seen]) <= 1e-3 * max(1.0, l64[seen].abs().max().item() if seen.any() else 1.0)
    rows = out.transpose(0, 1) if cu is not None else out  # (H, total_q, D) like lse (H, total_q)
    assert (rows[~seen] == 0).all(), "rows that see no key: out = 0"
    grads = [torch.full_like(t, nan) for t in (q, k, v)]
    prefill_backward(do, q, k, v, out, lse, mask=mask, scale=scale, softcap=softcap, slopes=slopes, cu_seqlens=cu,
                     max_seqlen=max_seqlen, config=configs[1], dq=grads[0], dk=grads[1], dv=grads[2])
    for name, g, s, r in zip(("dq", "dk", "dv"), grads, g_same, g64):
        _check(name, g, s, r)
    if poisoned_keys is not None:
        for g in grads[1:]:
            assert (g.masked_select(poisoned_keys[..., None]) == 0).all(), "a key no query sees gets dK = dV = 0"
    return out, lse, *grads


def _dense(B, H, Hkv, Nq, Nk, D, dtype, alibi, gen=None):
    """Random q, k, v and (B, H) float32 slopes (or None), from ``gen`` or the test's seeded global RNG."""
    q, k, v = (torch.randn(B, h, n, D, dtype=dtype, device=DEV, generator=gen)
               for h, n in ((H, Nq), (Hkv, Nk), (Hkv, Nk)))
    slopes = torch.rand(B, H, device=DEV, generator=gen) * 0.5 if alibi else None
    return q, k, v, slopes


# -- padded batches: every variant, odd shapes, 16×16 blocks in the interpreter ------------------------

DENSE_CASES = [
    # B, H, Hkv, Nq, Nk, D, window, causal, softcap, alibi, dtype
    (1, 2, 1, 50, 50, 32, (5, 0), True, None, False, F16),  # sliding window < block, GQA
    (1, 2, 2, 37, 61, 32, (9, 9), False, None, False, F16),  # two-sided, Nq < Nk; edges at a block boundary
    (1, 2, 2, 45, 29, 32, (3, -1), False, None, False, F16),  # left edge only, Nq > Nk
    (1, 2, 2, 45, 29, 32, (2, 0), True, None, False, BF16),  # Nq > Nk: 16 rows see no key
    (1, 2, 2, 33, 33, 32, (100, 100), False, None, False, F16),  # window wider than N
    (1, 2, 2, 33, 40, 32, None, False, 2.0, False, F16),  # softcap that bites (|scores| >> 2)
    (1, 2, 2, 33, 40, 32, None, True, None, True, BF16),  # ALiBi, causal
    (2, 4, 2, 41, 35, 96, (9, 3), False, 3.0, True, F16),  # all three, GQA, D = 96 in a 128 tile
]


@pytest.mark.parametrize("B,H,Hkv,Nq,Nk,D,window,causal,softcap,alibi,dtype", DENSE_CASES)
def test_variants_match_reference(B, H, Hkv, Nq, Nk, D, window, causal, softcap, alibi, dtype):
    q, k, v, slopes = _dense(B, H, Hkv, Nq, Nk, D, dtype, alibi)
    _run_and_check(q, k, v, window=window, causal=causal, softcap=softcap, slopes=slopes, scale=0.4)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(B=st.integers(1, 2), Hkv=st.integers(1, 2), group=st.integers(1, 2), Nq=st.integers(1, 40),
       Nk=st.integers(1, 40), left=st.integers(-1, 45), right=st.integers(-1, 45), causal=st.booleans(),
       softcap=st.sampled_from([None, 1.0, 5.0]), alibi=st.booleans(), seed=st.integers(0, 2**31 - 1))
def test_random_variants(B, Hkv, group, Nq, Nk, left, right, causal, softcap, alibi, seed):
    gen = torch.Generator(device=DEV).manual_seed(seed)  # the example's own seed: a failure replays exactly
    q, k, v, slopes = _dense(B, Hkv * group, Hkv, Nq, Nk, 32, F16, alibi, gen)
    window = (left, 0 if causal else right)
    _run_and_check(q, k, v, window=window, causal=causal, softcap=softcap, slopes=slopes, scale=0.5, gen=gen)


@pytest.mark.parametrize("kind", ["half-height-diagonal", "dq-atomic"])
def test_variants_with_the_other_backward_configurations(kind):
    """The backward's diagonal walked in half-height steps (Br = 32), and dQ by atomics, under a window
    with softcap and ALiBi."""
    if kind == "half-height-diagonal":
        configs = (FwdConfig(32, 16, 1, 1), BwdConfig(32, 16, 1, 1, 32, 16, 1, 1))
    else:
        configs = (None, BwdConfig(16, 16, 1, 1, 16, 16, 1, 1, dq_atomic=True))
    if DEV == "cuda":
        configs = (None, BwdConfig(32, 128, 8, 3, 128, 64, 8, 2, dq_atomic=kind == "dq-atomic"))
    q, k, v, slopes = _dense(1, 2, 1, 45, 77, 32, BF16, True)
    _run_and_check(q, k, v, window=(10, 0), causal=True, softcap=1.5, slopes=slopes, scale=0.4, configs=configs)


@pytest.mark.parametrize("window,causal", [((5, 0), True), ((20, 6), False)])
def test_keys_outside_every_window_are_never_read(window, causal):
    """One query block against 80 keys: with a window only the last key blocks are visible. The K/V
    blocks before them hold NaN; a kernel that loaded any of them (forward, dQ, or a dK/dV program
    looping over query blocks that cannot see its keys) would spread it."""
    Nq, Nk = 16, 80
    q, k, v, _ = _dense(1, 2, 1, Nq, Nk, 32, F16, False)
    first_seen = Nk - Nq - window[0]  # the first key that query 0 sees (off = Nk - Nq)
    poisoned = torch.arange(Nk, device=DEV) < (first_seen // 16) * 16  # whole 16-key blocks before it
    assert poisoned.sum() >= 32
    _run_and_check(q, k, v, window=window, causal=causal, softcap=None, slopes=None, scale=0.4, configs=BLOCKS16,
                   poisoned_keys=poisoned)


# -- packed variable-length batches ----------------------------------------------------------------

VARLEN_CASES = [
    # lens_q, lens_k, H, Hkv, D, window, causal, softcap, alibi, dtype
    ([0, 17, 33, 1, 20], [5, 17, 20, 0, 40], 4, 2, 32, (6, 0), True, 2.5, True, F16),  # empty sequences both ways
    ([30, 1, 0, 40], [12, 20, 9, 40], 2, 1, 64, None, False, None, False, BF16),  # dense, Nq > Nk in one
    ([19, 40], [40, 19], 2, 2, 32, (3, 20), False, None, True, BF16),  # window + ALiBi, (H,) slopes
]


@pytest.mark.parametrize("lens_q,lens_k,H,Hkv,D,window,causal,softcap,alibi,dtype", VARLEN_CASES)
def test_varlen_matches_reference(lens_q, lens_k, H, Hkv, D, window, causal, softcap, alibi, dtype):
    q = torch.randn(sum(lens_q), H, D, dtype=dtype, device=DEV)
    k, v = (torch.randn(sum(lens_k), Hkv, D, dtype=dtype, device=DEV) for _ in range(2))
    slopes = torch.rand(H, device=DEV).expand(len(lens_q), H) if alibi else None  # (H,) as a (B, H) view
    _run_and_check(q, k, v, window=window, causal=causal, softcap=softcap, slopes=slopes, scale=0.4,
                   cu=(_cu(lens_q), _cu(lens_k)))


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # the interpreter's NaN and inf
def test_varlen_kernels_read_no_row_of_another_sequence():
    """The Triton kernels' packed batches, forward and backward (16×16 blocks): a NaN in the first row of q, k, v and
    dO of one sequence and an infinity in another's leave the sequences before them as they were (out, lse, dK, dV
    bit for bit, dQ up to its additions' order), though their last blocks end 9 and 3 rows into the poisoned ones:
    the masked loads read no row past a sequence's end. (The Gluon builds load whole blocks: test_prefill_gluon.py.)"""
    lens, H, D, nan = [7, 20, 13, 9], 2, 32, float("nan")
    gen = torch.Generator(device=DEV).manual_seed(11)
    q, k, v, do = (torch.randn(sum(lens), H, D, dtype=F16, device=DEV, generator=gen) for _ in range(4))
    cu = (_cu(lens), _cu(lens))
    bounds = cu[0].tolist()

    def run(q, k, v, do):
        out, lse = torch.full_like(q, nan), torch.full((H, q.shape[0]), nan, device=DEV)
        prefill_forward(q, k, v, mask=Mask(-1, 0), scale=0.3, cu_seqlens=cu, max_seqlen=_max_seqlen(cu),
                        config=BLOCKS16[0], out=out, lse=lse)
        grads = [torch.full_like(t, nan) for t in (q, k, v)]
        prefill_backward(do, q, k, v, out, lse, mask=Mask(-1, 0), scale=0.3, cu_seqlens=cu,
                         max_seqlen=_max_seqlen(cu), config=BLOCKS16[1], dq=grads[0], dk=grads[1], dv=grads[2])
        return out, lse, *grads

    clean = run(q, k, v, do)
    poisoned = [t.clone() for t in (q, k, v, do)]
    for t in poisoned:
        t[bounds[1]] = nan
        t[bounds[3]] = float("inf")
    got = run(*poisoned)
    assert all(t.isfinite().all() for t in clean)
    for s in (0, 2):
        rows = slice(bounds[s], bounds[s + 1])
        (out, lse, dq, dk, dv), (out_p, lse_p, dq_p, dk_p, dv_p) = clean, got
        assert torch.equal(out_p[rows], out[rows]) and torch.equal(lse_p[:, rows], lse[:, rows]), s
        assert torch.equal(dk_p[rows], dk[rows]) and torch.equal(dv_p[rows], dv[rows]), s
        torch.testing.assert_close(dq_p[rows], dq[rows])
    for s in (1, 3):  # the poisoned sequences' own outputs do take their values
        assert not got[0][bounds[s]:bounds[s + 1]].isfinite().all(), s


def test_varlen_upper_bound_max_seqlen_gives_the_same_bits():
    """max_seqlen may be an upper bound (flash-attn's contract): the grids grow and the programs past a
    sequence's end return at once. Outputs poisoned with NaN, checked against the oracle, and equal bit
    for bit to the run with the exact longest sequences, to lengths read on the host (max_seqlen=None)
    and to int64 lengths."""
    lens_q, lens_k, H, Hkv, D = [0, 17, 33, 1, 20], [5, 17, 20, 0, 40], 4, 2, 32
    q = torch.randn(sum(lens_q), H, D, dtype=F16, device=DEV)
    k, v = (torch.randn(sum(lens_k), Hkv, D, dtype=F16, device=DEV) for _ in range(2))
    slopes = torch.rand(len(lens_q), H, device=DEV)
    cu = (_cu(lens_q), _cu(lens_k))
    exact = _max_seqlen(cu)
    runs = {}
    for name, cu_run, max_seqlen in (("exact", cu, exact), ("upper bound", cu, (exact[0] + 37, exact[1] + 50)),
                                     ("host", cu, None), ("int64", tuple(c.long() for c in cu), (64, 64))):
        gen = torch.Generator(device=DEV).manual_seed(7)  # the same dO every run
        runs[name] = _run_and_check(q, k, v, window=(6, 0), causal=True, softcap=2.5, slopes=slopes, scale=0.4,
                                    cu=cu_run, max_seqlen=max_seqlen, configs=BLOCKS16, gen=gen)
    for name in ("upper bound", "host", "int64"):
        assert all(torch.equal(a, b) for a, b in zip(runs["exact"], runs[name])), name


# -- bad cumulative lengths: wrong numbers allowed, never an access outside the tensors ---------------

BAD_CU = [
    # cu_q, cu_k (3 sequences over total_q = 40, total_k = 50 rows), max_seqlen (q, k): 3·max_seqlen covers
    # the totals, which is all that the public entry point checks on CUDA
    ([0, 30, 10, 40], [0, 20, 50, 45], (30, 30)),  # decreasing
    ([-100, 5, -7, 40], [-3, 60, 2, -50], (40, 50)),  # negative, past the end
    ([0, 1000, 2000, 2**31 - 1], [2**31 - 1, 0, 7, 9], (20, 20)),  # far past the end; max_seqlen short of them
    ([0, 5, 10, 20], [0, 10, 20, 30], (14, 17)),  # short of the totals: rows no program owns
    ([-(2**40), 2**40, 3, 2**62], [0, 2**33, -(2**33), 50], (40, 50)),  # int64 values beyond int32
]
_GUARD = 4096  # elements of guard before and after each tensor


def _guarded(shape, fill, dtype):
    """A tensor of ``shape`` inside a flat buffer with ``_GUARD`` elements before and after, all ``fill``:
    (tensor, buffer)."""
    n = torch.Size(shape).numel()
    buf = torch.full((n + 2 * _GUARD,), fill, dtype=dtype, device=DEV)
    return buf[_GUARD:_GUARD + n].view(shape), buf


def _run_bad_lengths(cu_q, cu_k, max_seqlen, *, total_q, total_k, H, Hkv, D, configs, plain=False):
    """Forward and backward with bad lengths. The inputs sit between NaN guards and the outputs (zeroed)
    between guards of 3.0: a program that read a guard would spread NaN into the outputs, one that wrote
    outside its tensor would change a guard. ``plain``: a causal call without softcap, ALiBi or window (on
    Hopper the Gluon kernels'); else all three."""
    nan, dtype = float("nan"), F16
    dt = torch.int64 if any(abs(x) >= 2**31 for x in cu_q + cu_k) else torch.int32
    cu = tuple(torch.tensor(c, dtype=dt, device=DEV) for c in (cu_q, cu_k))
    inputs = [_guarded((n, h, D), nan, dtype) for n, h in ((total_q, H), (total_k, Hkv), (total_k, Hkv), (total_q, H))]
    for t, _ in inputs:
        t.normal_()
    (q, _), (k, _), (v, _), (do, _) = inputs
    outputs = [_guarded(shape, 3.0, dt_) for shape, dt_ in (((total_q, H, D), dtype), ((H, total_q), torch.float32),
                                                           ((total_q, H, D), dtype), ((total_k, Hkv, D), dtype),
                                                           ((total_k, Hkv, D), dtype))]
    for t, _ in outputs:
        t.zero_()
    (out, _), (lse, _), (dq, _), (dk, _), (dv, _) = outputs
    mask, var = Mask(9, 0), dict(scale=0.4, softcap=3.0, slopes=torch.rand(len(cu_q) - 1, H, device=DEV))
    if plain:
        mask, var = Mask(-1, 0), dict(scale=0.4)
    prefill_forward(q, k, v, mask=mask, cu_seqlens=cu, max_seqlen=max_seqlen, config=configs[0], out=out, lse=lse,
                    **var)
    prefill_backward(do, q, k, v, out, lse, mask=mask, cu_seqlens=cu, max_seqlen=max_seqlen, config=configs[1],
                     dq=dq, dk=dk, dv=dv, **var)
    for name, (t, buf) in zip(("out", "lse", "dq", "dk", "dv"), outputs):
        assert not torch.isnan(t).any(), f"{name}: NaN, so a program read outside q, k, v or dO"
        assert (buf[:_GUARD] == 3.0).all() and (buf[-_GUARD:] == 3.0).all(), f"{name}: written outside the tensor"


@pytest.mark.parametrize("cu_q,cu_k,max_seqlen", BAD_CU)
def test_bad_lengths_give_wrong_numbers_never_an_access_outside_the_tensors(cu_q, cu_k, max_seqlen):
    """The launchers never check the lengths' values (on CUDA that would synchronise): the kernels clamp
    each sequence into the packed tensors."""
    _run_bad_lengths(cu_q, cu_k, max_seqlen, total_q=40, total_k=50, H=2, Hkv=1, D=32, configs=BLOCKS16)


def test_bad_lengths_are_refused_off_cuda():
    """Off CUDA the lengths are read and checked even with max_seqlen given (the check costs no sync)."""
    q = torch.randn(40, 2, 32, dtype=F16)
    k = v = torch.randn(50, 1, 32, dtype=F16)
    cq, ck = (torch.tensor(c, dtype=torch.int32) for c in BAD_CU[0][:2])
    with pytest.raises(ValueError, match="cu_seqlens_q must be non-decreasing"):
        flash_attention_varlen_triton(q, k, v, cq, ck, max_seqlen_q=30, max_seqlen_k=30)


# -- determinism ---------------------------------------------------------------------------------------


def test_deterministic_backward_is_bit_identical():
    """deterministic=True: two backward runs give the same bits; and it refuses the dQ-atomics variant,
    whose float32 atomics add in arrival order (its gradients equal the second-pass ones exactly)."""
    lens_q, lens_k = [13, 0, 40], [20, 7, 33]
    q = torch.randn(sum(lens_q), 4, 32, dtype=F16, device=DEV)
    k, v = (torch.randn(sum(lens_k), 2, 32, dtype=F16, device=DEV) for _ in range(2))
    do = torch.randn_like(q)
    runs = []
    for _ in range(2):
        qq, kk, vv = (t.detach().clone().requires_grad_() for t in (q, k, v))
        out = flash_attention_varlen_triton(qq, kk, vv, _cu(lens_q), _cu(lens_k), window=(9, 2), softcap=4.0,
                                            deterministic=True)
        runs.append(torch.autograd.grad(out, (qq, kk, vv), do))
    assert all(torch.equal(a, b) for a, b in zip(*runs))

    q, k, v, slopes = _dense(1, 4, 2, 37, 45, 32, F16, True)
    do = torch.randn_like(q)
    mask, var = Mask(6, 0), dict(scale=0.3, softcap=3.0, slopes=slopes)
    out, lse = prefill_forward(q, k, v, mask=mask, **var)
    atomic = dataclasses.replace(BLOCKS16[1], dq_atomic=True)
    grads = {(cfg.dq_atomic, det): prefill_backward(do, q, k, v, out, lse, mask=mask, config=cfg, deterministic=det,
                                                    **var)
             for cfg, det in ((BLOCKS16[1], False), (atomic, True), (atomic, False))}
    assert all(torch.equal(a, b) for a, b in zip(grads[(False, False)], grads[(True, True)]))
    # the atomic variant itself (a different summation order) still meets the criterion
    assert abs_err(grads[(True, False)][0], grads[(False, False)][0]) < 1e-2


# -- the operator: autograd with lse, eager = registered op, refusals --------------------------------


def test_operator_autograd_with_variants_and_lse():
    """flash_attention_triton with a window, softcap and ALiBi through autograd, with a loss that also
    uses the logsumexp, against float64."""
    q, k, v, slopes = _dense(1, 2, 1, 19, 24, 32, F16, True)
    kw = dict(causal=True, window=(4, -1), softcap=2.0, alibi_slopes=slopes[0])  # (H,) slopes
    grads = []
    for dt in (F16, torch.float64):
        qq, kk, vv = (t.detach().to(dt).requires_grad_() for t in (q, k, v))
        if dt == F16:
            out, lse = flash_attention_triton(qq, kk, vv, return_lse=True, **kw)
        else:
            out, lse = attention_ref(qq, kk, vv, **kw)
        (out.float().square().sum() + lse.float().sum()).backward()
        grads.append([t.grad for t in (qq, kk, vv)])
    for name, g, r in zip(("dq", "dk", "dv"), *grads):
        e = abs_err(g, r)
        print(f"{name}: err {e:.3e}")
        assert e < 2e-2 * max(1.0, r.abs().max().item())


def test_varlen_eager_function_equals_registered_op():
    """Eager calls run a plain autograd.Function, torch.compile traces attnlab::flash_attn_varlen_fwd:
    both give the same outputs and gradients (lse's included), bit for bit."""
    lens_q, lens_k = [9, 0, 21], [12, 5, 21]
    q = torch.randn(sum(lens_q), 2, 32, dtype=F16, device=DEV)
    k, v = (torch.randn(sum(lens_k), 1, 32, dtype=F16, device=DEV) for _ in range(2))
    do = torch.randn_like(q)
    cu_q, cu_k = _cu(lens_q), _cu(lens_k)
    results = []
    for call in (lambda q, k, v: flash_attention_varlen_triton(q, k, v, cu_q, cu_k, causal=True, window=(5, 0),
                                                               scale=0.3, return_lse=True),
                 lambda q, k, v: torch.ops.attnlab.flash_attn_varlen_fwd(q, k, v, cu_q, cu_k, max(lens_q),
                                                                         max(lens_k), 5, 0, 0.3, None, None,
                                                                         False)):
        qq, kk, vv = (t.detach().clone().requires_grad_() for t in (q, k, v))
        out, lse = call(qq, kk, vv)
        loss = (out * do).sum() + 0.5 * torch.where(torch.isinf(lse), 0.0, lse).sum()
        results.append([out, lse, *torch.autograd.grad(loss, (qq, kk, vv))])
    for a, b in zip(*results):
        assert torch.equal(a, b)


def test_varlen_op_under_torch_compile_fullgraph():
    """The packed op's fake implementation and autograd formula trace: the compiled loss has the
    eager gradients (window, softcap and ALiBi on)."""
    lens_q, lens_k = [9, 0, 21], [12, 5, 21]
    q = torch.randn(sum(lens_q), 2, 32, dtype=F16, device=DEV).requires_grad_()
    k, v = (torch.randn(sum(lens_k), 1, 32, dtype=F16, device=DEV).requires_grad_() for _ in range(2))
    cu_q, cu_k, slopes = _cu(lens_q), _cu(lens_k), torch.rand(3, 2, device=DEV)

    def f(q, k, v):
        out, lse = torch.ops.attnlab.flash_attn_varlen_fwd(q, k, v, cu_q, cu_k, 21, 21, 5, 0, 0.3, 3.0, slopes, False)
        return out.float().square().sum() + torch.where(torch.isinf(lse), 0.0, lse).sum()

    compiled = torch.compile(f, backend="inductor" if DEV == "cuda" else "aot_eager", fullgraph=True)
    for a, b in zip(torch.autograd.grad(f(q, k, v), (q, k, v)), torch.autograd.grad(compiled(q, k, v), (q, k, v))):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-3)


def test_unsupported_varlen_inputs_are_refused_with_the_reason():
    q = torch.randn(10, 2, 59, device=DEV)
    k = v = torch.randn(12, 2, 59, device=DEV)
    cu_q, cu_k = _cu([4, 6]), _cu([12, 0])
    with pytest.raises(ValueError, match="do not take dtype torch.float32"):
        flash_attention_varlen_triton(q, k, v, cu_q, cu_k)
    with pytest.raises(ValueError, match="do not take head dim 59"):
        flash_attention_varlen_triton(q.half(), k.half(), v.half(), cu_q, cu_k)
    with pytest.raises(ValueError, match="causal=True fixes the window's right side"):
        flash_attention_triton(*(torch.randn(1, 2, 8, 32, dtype=F16, device=DEV) for _ in range(3)),
                               causal=True, window=(3, 2))
    with pytest.raises(ValueError, match="alibi_slopes must have shape"):
        flash_attention_triton(*(torch.randn(1, 2, 8, 32, dtype=F16, device=DEV) for _ in range(3)),
                               alibi_slopes=torch.ones(3, device=DEV))


# -- on a GPU: the real block sizes -------------------------------------------------------------------

GPU_DENSE_CASES = [
    # B, H, Hkv, Nq, Nk, D, window, causal, softcap, alibi, dtype
    (2, 4, 2, 2048, 2048, 128, (255, 0), True, None, False, BF16),  # Mistral-style causal sliding window
    (1, 4, 4, 1025, 3000, 64, (300, 77), False, None, False, F16),  # two-sided, Nq < Nk, ragged
    (2, 8, 2, 1500, 1000, 128, (64, 0), True, None, False, BF16),  # Nq > Nk: rows that see no key
    (2, 4, 2, 2048, 2048, 128, None, True, 30.0, False, BF16),  # Gemma 2 softcap
    (2, 4, 2, 2048, 2048, 128, None, True, 30.0, False, F16),  # the GPU's tanh.approx against float16
    (1, 4, 4, 1025, 1025, 64, None, False, 5.0, False, F16),  # a cap that bites
    (1, 8, 8, 1025, 1025, 64, None, False, None, True, F16),  # ALiBi
    (1, 8, 2, 4096, 4096, 96, (1023, 0), True, 50.0, True, BF16),  # all three, D = 96
]


@pytest.mark.gpu
@pytest.mark.parametrize("B,H,Hkv,Nq,Nk,D,window,causal,softcap,alibi,dtype", GPU_DENSE_CASES)
def test_gpu_variants_match_reference(B, H, Hkv, Nq, Nk, D, window, causal, softcap, alibi, dtype):
    q, k, v, slopes = _dense(B, H, Hkv, Nq, Nk, D, dtype, alibi)
    _run_and_check(q, k, v, window=window, causal=causal, softcap=softcap, slopes=slopes, scale=D ** -0.5)


@pytest.mark.gpu
@pytest.mark.parametrize("D,window,causal,softcap", [(64, None, True, None), (128, (511, 0), True, 30.0),
                                                     (128, None, False, None)])
def test_gpu_varlen_matches_reference(D, window, causal, softcap):
    lens_q = [0, 1, 7, 128, 129, 1000, 2047, 300, 64, 0, 1500]
    lens_k = [5, 1, 7, 200, 129, 1000, 2047, 100, 64, 0, 1500]
    q = torch.randn(sum(lens_q), 8, D, dtype=BF16, device=DEV)
    k, v = (torch.randn(sum(lens_k), 2, D, dtype=BF16, device=DEV) for _ in range(2))
    _run_and_check(q, k, v, window=window, causal=causal, softcap=softcap, slopes=None, scale=D ** -0.5,
                   cu=(_cu(lens_q), _cu(lens_k)))


@pytest.mark.gpu
@pytest.mark.parametrize("atomic_config", [False, True])
def test_gpu_deterministic_backward_is_bit_identical(atomic_config):
    """On a GPU the atomics really race: deterministic=True must still give the same bits, five runs."""
    q, k, v, slopes = _dense(2, 8, 2, 2048, 2048, 128, BF16, True)
    do = torch.randn_like(q)
    mask = Mask(511, 0)
    out, lse = prefill_forward(q, k, v, mask=mask, scale=0.1, softcap=30.0, slopes=slopes)
    config = BwdConfig(32, 128, 8, 3, 128, 64, 8, 2, dq_atomic=True) if atomic_config else None
    runs = [prefill_backward(do, q, k, v, out, lse, mask=mask, scale=0.1, softcap=30.0, slopes=slopes,
                             config=config, deterministic=True) for _ in range(5)]
    assert all(torch.equal(a, b) for run in runs[1:] for a, b in zip(runs[0], run))


@pytest.mark.gpu
@pytest.mark.parametrize("variant", [dict(causal=True), dict(causal=True, window=(127, 0), softcap=30.0, alibi=True,
                                                           deterministic=True)], ids=["causal", "all-variants"])
def test_gpu_varlen_never_synchronises(variant):
    """flash_attention_varlen with max_seqlen_q/k on CUDA, forward and backward (the loss uses lse too),
    under torch.cuda.set_sync_debug_mode("error"): any device synchronisation raises; the profiler sees
    no copy between host and device. The gradients equal those of a call that reads the lengths on the
    host (no max_seqlen), bit for bit — dQ up to rounding where the Gluon backward ran (a plain packed
    batch on Hopper: its dQ additions land in any order)."""
    from attnlab.gpu import prefill_gluon as G
    from attnlab.gpu import prefill_gluon_bwd as GB

    lens_q = [0, 1, 300, 1000, 77, 2048, 513]
    lens_k = [5, 1, 300, 1200, 77, 2048, 600]
    H, Hkv, D = 8, 2, 128
    kw = dict(variant)
    if kw.pop("alibi", False):
        kw["alibi_slopes"] = torch.rand(H, device=DEV)
    q = torch.randn(sum(lens_q), H, D, dtype=BF16, device=DEV, requires_grad=True)
    k, v = (torch.randn(sum(lens_k), Hkv, D, dtype=BF16, device=DEV, requires_grad=True) for _ in range(2))
    do = torch.randn_like(q)
    cu_q, cu_k = _cu(lens_q), _cu(lens_k)

    def step(**max_seqlen):
        out, lse = flash_attention_varlen(q, k, v, cu_q, cu_k, return_lse=True, **max_seqlen, **kw)
        return torch.autograd.grad((out * do).sum() + lse.sum(), (q, k, v))

    max_seqlen = dict(max_seqlen_q=max(lens_q), max_seqlen_k=max(lens_k))
    want = step()  # reads the lengths on the host; compiles the kernels
    step(**max_seqlen)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        torch.cuda.set_sync_debug_mode("error")
        try:
            got = step(**max_seqlen)
        finally:
            torch.cuda.set_sync_debug_mode("default")
        torch.cuda.synchronize()
    copies = [e.name for e in prof.events() if "HtoD" in e.name or "DtoH" in e.name]
    assert not copies, copies
    gluon = variant == dict(causal=True) and GB.PACKED and G.gluon_supported(q, k, v)
    assert torch.equal(want[1], got[1]) and torch.equal(want[2], got[2])
    if gluon:
        torch.testing.assert_close(want[0], got[0])
    else:
        assert torch.equal(want[0], got[0])


@pytest.mark.gpu
@pytest.mark.parametrize("cu_q,cu_k,max_seqlen", BAD_CU)
def test_gpu_bad_lengths_never_crash(cu_q, cu_k, max_seqlen):
    """Bad lengths on CUDA with max_seqlen given: the call is not checked (that would synchronise) and
    the kernels clamp every sequence into the packed tensors. The table's configurations (with every variant,
    and plain causal: the Gluon backward on Hopper), the Gluon forward's packed entry, guards round every tensor,
    then the public entry point forward and backward, and the GPU still works after."""
    scale = 64  # the same patterns, 64 times longer
    cu_q, cu_k = ([x * scale if abs(x) < 2**30 else x for x in c] for c in (cu_q, cu_k))
    max_seqlen = tuple(m * scale for m in max_seqlen)
    from attnlab.gpu.config import packed_gluon_fwd_config

    for plain, fwd in ((False, None), (True, None), (True, packed_gluon_fwd_config(128))):
        _run_bad_lengths(cu_q, cu_k, max_seqlen, total_q=40 * scale, total_k=50 * scale, H=4, Hkv=2, D=128,
                         configs=(fwd, None), plain=plain)
    dt = torch.int64 if any(abs(x) >= 2**31 for x in cu_q + cu_k) else torch.int32
    q = torch.randn(40 * scale, 4, 128, dtype=BF16, device=DEV, requires_grad=True)
    k, v = (torch.randn(50 * scale, 2, 128, dtype=BF16, device=DEV, requires_grad=True) for _ in range(2))
    cq, ck = (torch.tensor(c, dtype=dt, device=DEV) for c in (cu_q, cu_k))
    out = flash_attention_varlen(q, k, v, cq, ck, max_seqlen_q=max_seqlen[0], max_seqlen_k=max_seqlen[1],
                                 causal=True)
    torch.autograd.grad(out.float().sum(), (q, k, v))
    torch.cuda.synchronize()  # an illegal address would surface here
    assert torch.ones(4, device=DEV).sum().item() == 4


def test_variant_configs_leave_what_the_variant_cannot_use():
    """A packed batch gets no tensor descriptors (and Bc <= 64 at D = 128, where pointer loads of
    128-wide tiles spill); softcap/ALiBi lift a register cap; a plain call keeps the table's entry;
    a window at D <= 64 takes 64×64 tiles."""
    cuda = torch.device("cuda")  # the table is keyed by device type only: no GPU needed to read it
    for D, causal in ((64, False), (128, False), (128, True)):
        entry = default_fwd_config(D, causal, cuda, gluon=False)  # variants never run on Gluon
        assert variant_fwd_config(entry, D, packed=False, score_mod=False) == entry
        packed = variant_fwd_config(entry, D, packed=True, score_mod=False)
        assert not packed.tma and not packed.warp_spec and packed.maxnreg is None
        assert packed.block_n == (min(entry.block_n, 64) if D == 128 else entry.block_n)
        assert variant_fwd_config(entry, D, packed=False, score_mod=True).maxnreg is None
    # a window's left edge at D <= 64 takes smaller tiles (the variants sweep); at D = 128, and on
    # the interpreter's table, the entry stays
    for D in (32, 64):
        entry = default_fwd_config(D, True, cuda, gluon=False)
        win = variant_fwd_config(entry, D, packed=False, score_mod=False, window=True)
        assert (win.block_m, win.block_n, win.num_warps) == (64, 64, 4) and win != entry
        assert variant_fwd_config(entry, D, packed=True, score_mod=False, window=True).block_m == entry.block_m
    entry = default_fwd_config(128, True, cuda, gluon=False)
    assert variant_fwd_config(entry, 128, packed=False, score_mod=False, window=True) == entry
    cpu = default_fwd_config(64, True, torch.device("cpu"))
    assert variant_fwd_config(cpu, 64, packed=False, score_mod=False, window=True) == cpu


def test_packed_batches_take_their_own_sweep_winner():
    """A plain causal packed batch of short documents at D = 128 runs the forward its own sweep chose
    (the best forward row of data/variants-sweep-h200-varlen-run3.json); long documents, non-causal
    batches, D = 64 and the interpreter keep the dense table's entry, adapted."""
    import ast
    import json
    from pathlib import Path

    from attnlab.gpu.config import FwdConfig, packed_fwd_config

    cuda = torch.device("cuda")
    rows = json.loads((Path(__file__).resolve().parents[2] / "benchmarks" / "data"
                       / "variants-sweep-h200-varlen-run3.json").read_text())
    best = max((r for r in rows if r["D"] == 128 and r["pass_"] == "fwd" and "tflops" in r), key=lambda r: r["tflops"])
    table = next(r for r in rows if r["D"] == 128 and r["pass_"] == "fwd" and r["current"])
    got = packed_fwd_config(128, True, cuda, 1792)
    # the recorded repr predates fields added since with their defaults (``persistent``): read it back
    inner = best["config"].removeprefix("FwdConfig(").removesuffix(")")
    recorded = FwdConfig(**{k: ast.literal_eval(v) for k, v in (kv.split("=", 1) for kv in inner.split(", "))})
    assert recorded == got == FwdConfig(128, 32, 8, 3)
    assert best["tflops"] >= 1.05 * table["tflops"]  # what made it worth a table entry
    assert packed_fwd_config(128, True, cuda, 4096) is None
    assert packed_fwd_config(128, False, cuda, 1792) is None
    assert packed_fwd_config(64, True, cuda, 1792) is None
    assert packed_fwd_config(128, True, torch.device("cpu"), 1792) is None
