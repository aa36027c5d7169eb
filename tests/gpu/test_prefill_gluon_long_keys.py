"""The Gluon forward on 256-key blocks at D = 64 (``prefill_gluon.LONG_KEYS``): two consumer warp groups, each
step's wgmmas twice as long as on 128-key blocks.

On the CPU: the sm_90 builds (grid, persistent, packed; triton's own ptxas) keep the softmax under the P·V product,
give the consumers 240 registers, fit the shared memory, and spill at most a bounded few words; the tiles the kernel
has no build for are refused before any work, and an ALiBi call on such an entry takes 128-key blocks. On a Hopper
GPU: the float64 criterion on awkward shapes (dense, causal, windows, packed batches), every schedule of the same
tiles giving the grid kernel's bits, and the public entry points running it when a configuration names it.
"""

import pytest
import torch
from tests.helpers import check_forward, check_packed_gluon_tiles, sm90_reports

from attnlab.variants import Mask

pytest.importorskip("triton")
from tests.gluon_env import DEV, needs_gluon, on_hopper  # noqa: E402

from attnlab.gpu import FwdConfig, prefill_forward  # noqa: E402
from attnlab.gpu import prefill_gluon as G  # noqa: E402

pytestmark = pytest.mark.usefixtures("interpreter_bfloat16")

LONG = G.LONG_KEYS
TILES = dict(block_m=128, block_n=LONG, stages=2, num_warps=4, warp_spec=True)


@needs_gluon
def test_long_key_builds_for_sm90_keep_the_overlap_and_fit():
    """Grid (causal or not), persistent and packed builds at D = 64 on 256-key blocks: the wait that leaves P·V in
    flight, consumers at 240 registers and the loader at 24, twice the 128-key build's wgmmas per step (Q·Kᵀ and P·V
    each one instruction per 16 of the reduced dimension: 4 + 16 against 4 + 8), shared memory Q + two stages of K
    and V (+ an O buffer per consumer, persistent) within the H200's 227 KB, and a bounded spill stack (the scores of
    one block and P̃ of the previous take 192 of the 240 registers): at most 128 bytes under triton 3.6, the device's
    (96-120 when written), at most 384 under later ones (3.9: 56-344)."""
    import triton

    old = tuple(int(x) for x in triton.__version__.split(".")[:2]) < (3, 7)
    cases = [dict(D=64, causal=c, dtype="bfloat16", **TILES) for c in (False, True)]
    cases += [dict(D=64, causal=True, dtype="bfloat16", persistent=True, **TILES),
              dict(D=64, causal=True, dtype="bfloat16", persistent=True, dynamic=True, **TILES),
              dict(D=64, causal=True, dtype="float16", packed=True, **TILES)]
    short = dict(cases[0], block_n=128)
    reps = sm90_reports("prefill_gluon", [dict(c) for c in cases + [short]])
    base = reps.pop()
    for case, rep in zip(cases, reps):
        assert 1 in rep["wait_groups"], (case, rep)
        assert 24 in rep["setmaxnreg"] and 240 in rep["setmaxnreg"], (case, rep)
        q_kb = 128 * 64 * 2 / 1024
        expect = q_kb + 2 * 2 * LONG * 64 * 2 / 1024 + (q_kb if case.get("persistent") else 0)
        assert rep["smem_kb"] == pytest.approx(expect, abs=1.0) and rep["smem_kb"] <= 227, (case, rep)
        if rep.get("stack") is not None:
            assert rep["stack"] <= (128 if old else 384), (case, rep)
    # (each consumer's Q·Kᵀ is 4 wgmmas (k = 64) either way; its P·V 16 against 8 (k = 256 against 128))
    assert reps[0]["wgmma"] - base["wgmma"] == 2 * 8 * 2, (reps[0], base)


@needs_gluon
@pytest.mark.parametrize("bad", [dict(D=128), dict(block_m=192), dict(stages=3), dict(alibi=True),
                                 dict(warp_spec=False, num_warps=8)])
def test_long_key_blocks_are_refused_where_the_kernel_has_no_build(bad):
    """256-key blocks at D = 128, with three consumer warp groups, three stages, ALiBi or without warp specialisation:
    a clear error before any work, nothing written."""
    D = bad.pop("D", 64)
    args = dict(TILES) | bad
    q = torch.zeros(1, 1, 8, D, dtype=torch.float16)
    out, lse = torch.full_like(q, 7.0), torch.full((1, 1, 8), 7.0)
    slopes = torch.ones(1) if args.pop("alibi", False) else None
    with pytest.raises(ValueError, match="block_n 256 only at head dim 64"):
        G.gluon_forward(q, q, q, out, lse, causal_off=None, scale=0.125, slopes=slopes, **args)
    assert (out == 7).all() and (lse == 7).all()


def test_an_alibi_call_on_a_long_key_entry_takes_128_key_blocks():
    from attnlab.gpu.config import gluon_alibi_config

    long = FwdConfig(128, LONG, 4, 2, tma=True, warp_spec=True, gluon=True, persistent=True)
    assert gluon_alibi_config(long) == FwdConfig(128, 128, 4, 2, tma=True, warp_spec=True, gluon=True, persistent=True)
    triton_entry = FwdConfig(128, 64, 8, 3)
    assert gluon_alibi_config(triton_entry) is triton_entry


# -- on a Hopper GPU ---------------------------------------------------------------------------------

DENSE_CASES = [
    # B, H, Hkv, Nq, Nk, (left, right); D = 64
    (1, 2, 2, 1, 1, (-1, -1)),  # one row, one key
    (2, 4, 4, 257, 257, (-1, -1)),  # one key past a block
    (2, 4, 4, 1000, 1000, (-1, 0)),  # causal, ragged
    (1, 8, 2, 255, 1030, (-1, 0)),  # GQA, Nq < Nk (bottom-right diagonal)
    (1, 6, 1, 700, 300, (-1, 0)),  # MQA, Nq > Nk: empty rows
    (3, 5, 5, 2048, 2048, (-1, 0)),  # odd head count, full blocks
    (1, 4, 2, 3000, 4099, (-1, -1)),
    (2, 4, 4, 700, 1300, (100, 0)),  # a window narrower than a block
    (1, 4, 2, 4096, 4096, (1023, 0)),  # key blocks skipped left of the window
    (1, 2, 2, 513, 513, (300, -1)),  # a left edge only
]
SAME_BITS_BUILDS = [dict(persistent=True), dict(persistent=True, dynamic=True), dict(part_first=True, head_chunk=3),
                    dict(part_first=True, head_chunk=8, persistent=True)]


def _check(q, k, v, out, lse, window, scale):
    left, right = window
    check_forward(q, k, v, out, lse, causal=right == 0, scale=scale, window=window if left >= 0 or right > 0 else None)


@pytest.mark.gpu
@on_hopper
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("B,H,Hkv,Nq,Nk,window", DENSE_CASES)
def test_gpu_long_key_blocks_match_reference_and_every_schedule(B, H, Hkv, Nq, Nk, window, dtype):
    """256-key blocks within the criterion (outputs poisoned with NaN); persistent, dynamic, part-block-first and
    grouped-heads schedules of the same tiles give the grid kernel's bits; ``prefill_forward`` with a configuration
    that names the tiles gives them too."""
    gen = torch.Generator(device=DEV).manual_seed(Nq * 13 + Nk + window[0])
    q = torch.randn(B, H, Nq, 64, dtype=dtype, device=DEV, generator=gen)
    k, v = (torch.randn(B, Hkv, Nk, 64, dtype=dtype, device=DEV, generator=gen) for _ in range(2))
    left, right = window
    scale = 64 ** -0.5
    kw = dict(causal_off=Nk - Nq + right if right >= 0 else None, win_off=Nk - Nq - left if left >= 0 else None,
              scale=scale, **TILES)
    outs = []
    for build in [{}] + SAME_BITS_BUILDS:
        if build.get("part_first") and right < 0:
            continue
        out, lse = torch.full_like(q, float("nan")), torch.full((B, H, Nq), float("nan"), device=DEV)
        G.gluon_forward(q, k, v, out, lse, **kw, **build)
        outs.append((build, out, lse))
    _check(q, k, v, outs[0][1], outs[0][2], window, scale)
    for build, out, lse in outs[1:]:
        assert torch.equal(out, outs[0][1]) and torch.equal(lse, outs[0][2]), build
    for persistent in (False, True):
        cfg = FwdConfig(128, LONG, 4, 2, tma=True, warp_spec=True, gluon=True, persistent=persistent)
        got, got_lse = prefill_forward(q, k, v, mask=Mask(left, right), scale=scale, config=cfg)
        assert torch.equal(got, outs[0][1]) and torch.equal(got_lse, outs[0][2]), persistent


PACKED_CASES = [
    # lens_q, lens_k, H, Hkv, (left, right), dtype; D = 64
    ([1, 0, 64, 255, 256, 257, 513, 300], [1, 5, 64, 255, 256, 257, 513, 300], 4, 4, (-1, 0), torch.bfloat16),
    ([700, 33, 0, 1000, 257], [900, 33, 7, 1000, 100], 6, 1, (-1, -1), torch.float16),  # MQA, Nq ≠ Nk
    ([1792, 256, 1000, 513, 1100], [1792, 256, 1000, 513, 1100], 4, 2, (200, 0), torch.bfloat16),  # window
]


@pytest.mark.gpu
@on_hopper
@pytest.mark.parametrize("persistent,dynamic", [(False, False), (True, False), (True, True)])
@pytest.mark.parametrize("lens_q,lens_k,H,Hkv,window,dtype", PACKED_CASES)
def test_gpu_long_key_blocks_on_packed_batches(lens_q, lens_k, H, Hkv, window, dtype, persistent, dynamic):
    """A packed batch on 256-key blocks (grid, persistent, tiles from a counter): within the criterion against the
    per-sequence oracle, rows no sequence owns left as they were, and each sequence equal to the bit to the dense grid
    kernel of the same tiles on that sequence alone."""
    check_packed_gluon_tiles(lens_q, lens_k, H, Hkv, window, dtype, TILES, device=DEV, persistent=persistent,
                             dynamic=dynamic)
