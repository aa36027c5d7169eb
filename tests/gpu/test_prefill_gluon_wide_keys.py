"""The Gluon forward on 192-key blocks at D = 64 (``prefill_gluon.WIDE_KEYS``, FlashAttention-3's D = 64 tile): each
step's Q·Kᵀ as three 64-key wgmmas, one softmax step for the three, P̃ through shared memory and P̃·V as three
wgmmas of k = 64; the K/V ring eight 64-key boxes (a tensor descriptor's box and a shared buffer are powers of two).

On the CPU: the sm_90 builds (grid, causal or not, two or three consumer warp groups, packed) keep P̃·V in flight
under the next block's softmax, fit the H200's shared memory, and issue the wgmmas the tile implies; the tiles the
kernel has no build for are refused before any work. On a Hopper GPU: the float64 criterion on awkward shapes (dense,
causal, GQA, windows, packed batches), and the public entry point running it when a configuration names it.
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

WIDE = G.WIDE_KEYS
TILES = dict(block_m=192, block_n=WIDE, stages=2, num_warps=4, warp_spec=True)


@needs_gluon
def test_wide_key_builds_for_sm90_keep_the_overlap_and_fit():
    """Grid builds at D = 64 on 192-key blocks (causal or not, three or two consumer warp groups, packed): the wait
    that leaves the three P̃·V wgmmas in flight while the scores are read (``wgmma.wait_group 3``), shared memory Q +
    the ring's 16 boxes of K and V + three 64 × 64 P̃ tiles per consumer within the H200's 227 KB, and per consumer
    and step three Q·Kᵀ wgmmas of k = 64 (4 instructions each) and three P̃·V of k = 64 (4 each): 24 a step against
    the 128-key build's 4 + 8, so nearly twice its instructions in all."""
    cases = [dict(D=64, causal=c, dtype="bfloat16", **TILES) for c in (False, True)]
    cases += [dict(D=64, causal=True, dtype="bfloat16", **(TILES | dict(block_m=128))),
              dict(D=64, causal=True, dtype="float16", packed=True, **TILES)]
    short = dict(cases[0], block_n=128)
    reps = sm90_reports("prefill_gluon", [dict(c) for c in cases + [short]])
    base = reps.pop()
    for case, rep in zip(cases, reps):
        assert 3 in rep["wait_groups"], (case, rep)
        nc = case["block_m"] // 64
        expect = (nc * 64 * 64 * 2 + 2 * 8 * 64 * 64 * 2 + nc * 3 * 64 * 64 * 2) / 1024
        assert rep["smem_kb"] == pytest.approx(expect, abs=1.0) and rep["smem_kb"] <= 227, (case, rep)
    assert 1 in base["wait_groups"] and 3 not in base["wait_groups"], base
    # per consumer, as written: the peeled first block (3 Q·Kᵀ), the loop (3 Q·Kᵀ + 3 P̃·V), the last P̃·V (3): 12
    # wgmmas of k = 64 (4 instructions each) = 48 instructions, against 128-key blocks' 4 + (4 + 8) + 8 = 24 (triton
    # 3.6: 144 and 72 in the three consumers' code; 3.9 folds some of each: 132 and 64)
    assert reps[0]["wgmma"] > 1.5 * base["wgmma"], (reps[0], base)


@needs_gluon
@pytest.mark.parametrize("bad", [dict(D=128), dict(stages=3), dict(alibi=True), dict(persistent=True),
                                 dict(warp_spec=False, block_m=64, num_warps=4)])
def test_wide_key_blocks_are_refused_where_the_kernel_has_no_build(bad):
    """192-key blocks at D = 128, on three stages, with ALiBi, persistent or without warp specialisation: a clear error
    before any work, nothing written."""
    D = bad.pop("D", 64)
    args = dict(TILES) | bad
    q = torch.zeros(1, 1, 8, D, dtype=torch.float16)
    out, lse = torch.full_like(q, 7.0), torch.full((1, 1, 8), 7.0)
    slopes = torch.ones(1) if args.pop("alibi", False) else None
    with pytest.raises(ValueError, match="block_n 192 only at head dim 64"):
        G.gluon_forward(q, q, q, out, lse, causal_off=None, scale=0.125, slopes=slopes, **args)
    assert (out == 7).all() and (lse == 7).all()


def test_warp_specialised_rings_stop_short_of_the_wide_ring():
    """A warp-specialised ring of more than 4 slots is refused: 8 slots mean 192-key blocks' boxes to the kernels."""
    q = torch.zeros(1, 1, 8, 64, dtype=torch.float16)
    out, lse = torch.full_like(q, 7.0), torch.full((1, 1, 8), 7.0)
    with pytest.raises(ValueError, match="at most 4 stages"):
        G.gluon_forward(q, q, q, out, lse, causal_off=None, scale=0.125, **(TILES | dict(block_n=128, stages=8)))
    assert (out == 7).all() and (lse == 7).all()


# -- on a Hopper GPU ---------------------------------------------------------------------------------

DENSE_CASES = [
    # B, H, Hkv, Nq, Nk, (left, right); D = 64
    (1, 2, 2, 1, 1, (-1, -1)),  # one row, one key
    (2, 4, 4, 193, 193, (-1, -1)),  # one key past a block
    (2, 4, 4, 1000, 1000, (-1, 0)),  # causal, ragged
    (1, 8, 2, 255, 1030, (-1, 0)),  # GQA, Nq < Nk (bottom-right diagonal)
    (1, 6, 1, 700, 300, (-1, 0)),  # MQA, Nq > Nk: empty rows
    (3, 5, 5, 2304, 2304, (-1, 0)),  # odd head count, full blocks (12 of 192)
    (1, 4, 2, 3000, 4099, (-1, -1)),  # more blocks than the ring's boxes hold, ragged end
    (2, 4, 4, 700, 1300, (100, 0)),  # a window narrower than a block
    (1, 4, 2, 4096, 4096, (1023, 0)),  # key blocks skipped left of the window
    (1, 2, 2, 513, 513, (300, -1)),  # a left edge only
]


@pytest.mark.gpu
@on_hopper
@pytest.mark.parametrize("block_m", [192, 128])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("B,H,Hkv,Nq,Nk,window", DENSE_CASES)
def test_gpu_wide_key_blocks_match_reference(B, H, Hkv, Nq, Nk, window, dtype, block_m):
    """192-key blocks within the criterion (outputs poisoned with NaN), with three consumer warp groups or two; a
    causal call with the part block first and groups of heads gives the same bits; ``prefill_forward`` with a
    configuration that names the tiles gives them too."""
    gen = torch.Generator(device=DEV).manual_seed(Nq * 13 + Nk + window[0])
    q = torch.randn(B, H, Nq, 64, dtype=dtype, device=DEV, generator=gen)
    k, v = (torch.randn(B, Hkv, Nk, 64, dtype=dtype, device=DEV, generator=gen) for _ in range(2))
    left, right = window
    scale = 64 ** -0.5
    tiles = TILES | dict(block_m=block_m)
    kw = dict(causal_off=Nk - Nq + right if right >= 0 else None, win_off=Nk - Nq - left if left >= 0 else None,
              scale=scale, **tiles)
    out, lse = torch.full_like(q, float("nan")), torch.full((B, H, Nq), float("nan"), device=DEV)
    G.gluon_forward(q, k, v, out, lse, **kw)
    check_forward(q, k, v, out, lse, causal=right == 0, scale=scale,
                  window=window if left >= 0 or right > 0 else None)
    if right == 0:
        o2, l2 = torch.full_like(q, float("nan")), torch.full((B, H, Nq), float("nan"), device=DEV)
        G.gluon_forward(q, k, v, o2, l2, **kw, part_first=True, head_chunk=3)
        assert torch.equal(o2, out) and torch.equal(l2, lse)
    cfg = FwdConfig(block_m, WIDE, 4, 2, tma=True, warp_spec=True, gluon=True)
    got, got_lse = prefill_forward(q, k, v, mask=Mask(left, right), scale=scale, config=cfg)
    assert torch.equal(got, out) and torch.equal(got_lse, lse)


PACKED_CASES = [
    # lens_q, lens_k, H, Hkv, (left, right), dtype; D = 64
    ([1, 0, 64, 191, 192, 193, 577, 300], [1, 5, 64, 191, 192, 193, 577, 300], 4, 4, (-1, 0), torch.bfloat16),
    ([700, 33, 0, 1000, 257], [900, 33, 7, 1000, 100], 6, 1, (-1, -1), torch.float16),  # MQA, Nq ≠ Nk
    ([1792, 256, 1000, 513, 1100], [1792, 256, 1000, 513, 1100], 4, 2, (200, 0), torch.bfloat16),  # window
]


@pytest.mark.gpu
@on_hopper
@pytest.mark.parametrize("lens_q,lens_k,H,Hkv,window,dtype", PACKED_CASES)
def test_gpu_wide_key_blocks_on_packed_batches(lens_q, lens_k, H, Hkv, window, dtype):
    """A packed batch on 192-key blocks: within the criterion against the per-sequence oracle, rows no sequence owns
    left as they were, and each sequence equal to the bit to the dense kernel of the same tiles on that sequence
    alone (a sequence's last block's values past its end, the next sequence's, zeroed box by box)."""
    check_packed_gluon_tiles(lens_q, lens_k, H, Hkv, window, dtype, TILES, device=DEV, nan_tail=True)
