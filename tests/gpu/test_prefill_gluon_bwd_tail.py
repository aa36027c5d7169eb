"""The non-causal Gluon backward's last wave cut into pieces (``prefill_gluon_bwd.tail_pieces``, ``TAIL_PIECES``).

On the CPU: the cut the host asks for (``cost.tail_split``'s, within its caps), the pieces' walks (every query block
of every cut key block exactly once), the sum of the pieces (``layout.sum_tail_pieces``, in the interpreter: bit for
bit the float32 sum in piece order) and the sm_90 build with the cut. On a Hopper GPU: the gradients of cut grids
against the uncut build and the float64 criterion, with every program cut, one, most of them, pieces with no query
block, GQA, ragged and unequal lengths, and a kept plan's replay.
"""

import math

import pytest
import torch
from tests.helpers import sm90_reports

pytest.importorskip("triton")
from tests.gluon_env import DEV, needs_gluon, on_hopper  # noqa: E402

from attnlab.cost import tail_split  # noqa: E402
from attnlab.gpu import prefill_backward, prefill_forward  # noqa: E402
from attnlab.gpu import prefill_gluon_bwd as GB  # noqa: E402
from attnlab.gpu.layout import sum_tail_pieces  # noqa: E402
from attnlab.variants import Mask  # noqa: E402

pytestmark = pytest.mark.usefixtures("interpreter_bfloat16")

BLOCK_N = 2 * GB.BWD_SUB_N


def test_the_cut_is_the_schedule_models_within_its_caps(monkeypatch):
    """``tail_pieces``: the first programs whole, the ones past the last whole wave cut as ``cost.tail_split`` says
    with ``TAIL_PIECE_STEPS`` steps of overhead a piece; nothing cut where no wave is partial, where the model saves
    less than ``TAIL_MIN_SAVING``, or with the switch off; the parts never more than the query blocks, the cap or the
    partial gradients' budget allows."""
    # the prefill table's non-causal shapes: 4,096 programs of 64 steps at D = 64, 2,048 at D = 128 (4 x 4K)
    for programs, steps, D in ((4096, 64, 64), (2048, 64, 128), (4096, 256, 64), (1024, 256, 64)):
        blocks = steps if programs >= 2048 else steps // 4
        cut = GB.tail_pieces(programs, 132, steps, blocks, D)
        model = tail_split(programs=programs, sms=132, max_parts=min(GB.TAIL_MAX_PARTS, blocks),
                           overhead=GB.TAIL_PIECE_STEPS / steps)
        F, R, P = cut
        assert (F, R) == (programs - programs % 132, programs % 132) and P == model.parts >= 2
        assert P * R * 2 * BLOCK_N * D * 4 <= GB.TAIL_MAX_MB << 20
    assert GB.tail_pieces(4092, 132, 64, 64, 64) is None  # whole waves only
    assert GB.tail_pieces(4096, 132, 64, 1, 64) is None  # one query block: nothing to cut
    assert GB.tail_pieces(10, 132, 64, 3, 64)[2] == 3  # a grid under one wave: at most its query blocks
    assert GB.tail_pieces(133, 132, 3, 3, 64) is None  # a piece's overhead a whole program's steps: no gain
    long_grid = 100 * 132 + 1  # 101 waves uncut, ~100.06 cut: under 1 % saved
    assert tail_split(programs=long_grid, sms=132, max_parts=64, overhead=GB.TAIL_PIECE_STEPS / 64).saving < 0.01
    assert GB.tail_pieces(long_grid, 132, 64, 64, 64) is None
    monkeypatch.setattr(GB, "TAIL_MIN_SAVING", 0.0)
    assert GB.tail_pieces(long_grid, 132, 64, 64, 64) is not None
    monkeypatch.setattr(GB, "TAIL_MAX_MB", 1)  # 68 blocks x 2 x 128 x 128 x 4 bytes = 8.5 MB a part: none fits
    assert GB.tail_pieces(2048, 132, 64, 64, 128) is None
    monkeypatch.setattr(GB, "TAIL_MAX_MB", 64)
    monkeypatch.setattr(GB, "TAIL_PIECES", False)
    assert GB.tail_pieces(4096, 132, 64, 64, 64) is None


def _walks(F: int, R: int, P: int, n_m: int) -> list:
    """The two launches' programs as the kernel's code numbers them (``_attn_bwd_gluon_ws``): the whole programs'
    grid with TAIL_LIMIT = F, then the pieces' with TAIL_F = F, TAIL_P = P: [(key block's number in the grid, first
    query block, query blocks, slot or -1)]."""
    out = [(lin, 0, n_m if lin < F else 0, -1) for lin in range(F + R)]
    for j in range(R * P):
        tile, piece = F + j // P, j % P
        lo = piece * n_m // P
        out.append((tile, lo, (piece + 1) * n_m // P - lo, piece * (R * P // P) + tile - F))
    return out


@pytest.mark.parametrize("F,R,P,n_m", [(4092, 4, 33, 64), (1980, 68, 5, 64), (0, 6, 7, 3), (3, 1, 2, 1),
                                       (0, 5, 4, 17)])
def test_pieces_walk_every_query_block_of_their_block_once(F, R, P, n_m):
    """Every whole program walks its key block's n_m query blocks, the cut blocks' programs in that launch none; the
    P pieces of a cut block walk consecutive shares of them, together each exactly once (P > n_m: some pieces walk
    none and store zeros), each piece into its own slot of the (P, R) buffer."""
    walks = _walks(F, R, P, n_m)
    seen: dict = {}
    slots = set()
    for tile, lo, n, slot in walks:
        assert n >= 0
        seen.setdefault(tile, []).extend(range(lo, lo + n))
        if slot >= 0:
            slots.add(slot)
    assert sorted(seen) == list(range(F + R))
    assert all(sorted(blocks) == list(range(n_m)) for blocks in seen.values())
    assert slots == set(range(P * R))


@pytest.mark.parametrize("B,Hkv,Nk,D,first,R,P", [(2, 3, 300, 64, 2, 4, 3), (1, 2, 128, 128, 0, 2, 5),
                                                  (1, 1, 1000, 16, 7, 1, 1), (3, 1, 257, 32, 0, 9, 2)])
def test_sum_tail_pieces_adds_each_blocks_pieces_in_order_and_rounds_once(B, Hkv, Nk, D, first, R, P):
    """``layout.sum_tail_pieces``: key block ``first`` + r of the grid gets the float32 sum of its P pieces in piece
    order (dK times the scale), rounded once, bit for bit that sum in PyTorch, into contiguous or (B, N, H, D)-strided
    gradients; its rows past Nk and every other key block are left as they were; bad shapes are refused."""
    gen = torch.Generator().manual_seed(Nk + R)
    pieces = torch.randn(P, R, 2, BLOCK_N, D, generator=gen).to(DEV)
    n_kb, scale = -(-Nk // BLOCK_N), 0.125
    acc = pieces[0].clone()
    for s in range(1, P):
        acc += pieces[s]
    want = [torch.full((B, Hkv, n_kb * BLOCK_N, D), float("nan"), dtype=torch.float32) for _ in range(2)]
    for r in range(R):
        bhk, kb = divmod(first + r, n_kb)
        for w, a in zip(want, (acc[r, 0].cpu() * scale, acc[r, 1].cpu())):
            w[bhk // Hkv, bhk % Hkv, kb * BLOCK_N:(kb + 1) * BLOCK_N] = a
    want = [w[:, :, :Nk].to(torch.bfloat16) for w in want]
    for layout in ("bhnd", "bnhd"):
        if layout == "bhnd":
            dk, dv = (torch.full((B, Hkv, Nk, D), float("nan"), dtype=torch.bfloat16, device=DEV) for _ in range(2))
        else:
            dk, dv = (torch.full((B, Nk, Hkv, D), float("nan"), dtype=torch.bfloat16, device=DEV).transpose(1, 2)
                      for _ in range(2))
        sum_tail_pieces(pieces, dk, dv, first=first, scale=scale)
        for got, w in zip((dk, dv), want):  # (the blocks left as they were: NaN in both)
            torch.testing.assert_close(got.cpu(), w, rtol=0, atol=0, equal_nan=True)
    with pytest.raises(ValueError, match="key blocks"):
        sum_tail_pieces(pieces, dk, dv, first=B * Hkv * n_kb - R + 1, scale=scale)
    with pytest.raises(ValueError, match=r"\(P, R, 2, 128, D\)"):
        sum_tail_pieces(pieces[:, :, 0], dk, dv, first=first, scale=scale)
    with pytest.raises(ValueError, match="key blocks"):
        sum_tail_pieces(pieces.double(), dk, dv, first=first, scale=scale)


@needs_gluon
def test_the_cut_builds_add_the_numbering_and_the_pieces_stores_only():
    """The builds of a cut grid's two launches (TAIL_LIMIT, TAIL_F an int): the same shared memory, register budget,
    products, loads, reductions and exponentials as the uncut build at both head dims' table tiles (what differs is
    the numbering and the pieces' float32 stores of dK and dV)."""
    cases = [dict(D=64, causal=False, dq_lag=1, dtype="bfloat16"),
             dict(D=128, causal=False, dq_shared=True, dtype="bfloat16")]
    reps = sm90_reports("prefill_gluon_bwd", [dict(c) for c in cases] + [dict(c, tail_limit=True) for c in cases]
                        + [dict(c, tail=True) for c in cases])
    for i, plain in enumerate(reps[:2]):
        for cut in (reps[2 + i], reps[4 + i]):
            for key in ("setmaxnreg", "wgmma", "tma_loads", "tma_reduces", "exponentials", "atomics"):
                assert plain[key] == cut[key], key
            assert abs(plain["smem_kb"] - cut["smem_kb"]) < 1
            if "loops" in plain:  # (where triton ships cuobjdump) every step's products in the same loops
                assert [lp["wgmma"] for lp in plain["loops"]] == [lp["wgmma"] for lp in cut["loops"]]
                assert len(plain["loops"]) >= 2 and all(lp["mufu"] for lp in plain["loops"][:1])


@needs_gluon
def test_the_faster_whole_programs_build_has_the_longer_loop():
    """What the sm_90 SASS of triton 3.6 (the version measured) says of the D = 128 whole programs' build that ran
    4.3-6.0 % faster than the plain build (bwd-block-m run 17): not a shorter loop. Its first consumer warp group's
    loop is longer, with more spill reloads and a larger spill stack; the second's is the same length. So the
    builds' loop lengths do not tell which one runs faster. Causal builds: the two builds' loops are the same."""
    import triton

    if not triton.__version__.startswith("3.6."):
        pytest.skip("the SASS of the triton the builds were measured with (3.6)")
    cases = [dict(D=128, causal=causal, dq_shared=True, dtype="bfloat16", tail_limit=limit)
             for causal in (False, True) for limit in (False, True)]
    plain, limit, causal_plain, causal_limit = sm90_reports("prefill_gluon_bwd", cases)
    first, second = (zip(plain["loops"], limit["loops"]))
    assert first[1]["instructions"] > first[0]["instructions"] and first[1]["local_loads"] > first[0]["local_loads"]
    assert second[1]["instructions"] == second[0]["instructions"] and limit["stack"] > plain["stack"]
    assert [{k: v for k, v in lp.items() if k not in ("start", "end")} for lp in causal_plain["loops"]] == \
        [{k: v for k, v in lp.items() if k not in ("start", "end")} for lp in causal_limit["loops"]]


# -- on a Hopper GPU ---------------------------------------------------------------------------------


def _inputs(B, H, Hkv, Nq, Nk, D, seed):
    from tests.gpu.test_prefill_gluon_bwd import _gpu_inputs

    return _gpu_inputs(B, H, Hkv, Nq, Nk, D, torch.bfloat16, seed)


CUT_CASES = [
    # B, H, Hkv, Nq, Nk, D, cut blocks (None: every program), parts, the table's options
    (1, 8, 2, 257, 1030, 128, 0, 2, dict(dq_shared=True)),  # nothing cut: the whole programs' build alone
    (2, 4, 4, 1000, 1000, 64, None, 4, dict(dq_lag=1)),  # every program cut, ragged
    (2, 4, 4, 1000, 1000, 64, 1, 3, dict(dq_lag=1)),  # the last program only
    (1, 8, 2, 257, 1030, 128, 9, 2, dict(dq_shared=True)),  # GQA, Nq < Nk: most of the 18 programs
    (1, 4, 2, 3000, 4099, 128, 5, 47, dict(dq_shared=True)),  # 47 pieces of 47 query blocks: one each
    (1, 6, 1, 700, 300, 64, None, 13, dict(dq_lag=1)),  # MQA, Nq > Nk, 13 pieces of 11 blocks: two walk none
    (3, 5, 5, 2048, 2048, 128, 7, 6, dict(dq_shared=True)),  # odd heads, full blocks
]


@pytest.mark.gpu
@on_hopper
@pytest.mark.parametrize("B,H,Hkv,Nq,Nk,D,cut,parts,opts", CUT_CASES)
def test_gpu_cut_grids_give_the_uncut_gradients(B, H, Hkv, Nq, Nk, D, cut, parts, opts, monkeypatch):
    """A grid with its last ``cut`` key blocks in ``parts`` pieces each (at both head dims: ``TAIL_FROM_D`` lowered):
    dK, dV equal to the plain build's up to the order of their float32 sums, dQ up to its additions' order, all within
    the float64 criterion; the whole programs' launch skipped the cut blocks and the pieces' launch took the cut asked
    for (none with nothing cut), and the run with ``TAIL_PIECES`` off launched the plain build alone."""
    from tests.gpu.test_prefill_gluon_bwd import _check_grads, _gluon_cfg

    from attnlab.gpu import prefill_bwd

    q, k, v, do = _inputs(B, H, Hkv, Nq, Nk, D, Nq + Nk + parts)
    mask, scale = Mask(-1, -1), D ** -0.5
    out, lse = prefill_forward(q, k, v, mask=mask, scale=scale)
    launched = []
    real = GB.launch_kept
    monkeypatch.setattr(GB, "launch_kept", lambda kern, grid, a, **kw: launched.append(
        (a["TAIL_LIMIT"], a["TAIL_F"], a["TAIL_P"], grid)) or real(kern, grid, a, **kw))
    programs = -(-Nk // BLOCK_N) * B * Hkv
    R = programs if cut is None else cut
    monkeypatch.setattr(GB, "TAIL_FROM_D", 64)
    monkeypatch.setattr(GB, "tail_pieces", lambda *a: (programs - R, R, parts))
    runs = []
    for on in (False, True):
        monkeypatch.setattr(GB, "TAIL_PIECES", on)
        GB._PLANS.clear()
        prefill_bwd._CALL_PLANS.clear()
        grads = [torch.full(t.shape, float("nan"), dtype=torch.bfloat16, device=DEV) for t in (q, k, v)]
        prefill_backward(do, q, k, v, out, lse, mask=mask, scale=scale, config=_gluon_cfg(**opts), dq=grads[0],
                         dk=grads[1], dv=grads[2])
        runs.append(grads)
    GB._PLANS.clear()
    prefill_bwd._CALL_PLANS.clear()
    grid = (-(-Nk // BLOCK_N), B * Hkv)
    assert launched == [(None, None, None, grid), (programs - R, None, None, grid)] + (
        [(None, programs - R, parts, (R * parts,))] if R else [])
    for name, a, b in zip(("dq", "dk", "dv"), *runs):
        torch.testing.assert_close(b.float(), a.float(), rtol=2e-2, atol=2e-2 * a.float().abs().max().item(), msg=name)
    _check_grads(q, k, v, do, runs[1], False, scale)


@pytest.mark.gpu
@on_hopper
@pytest.mark.parametrize("D,opts", [(64, dict(dq_lag=1)), (128, dict(dq_shared=True))])
def test_gpu_a_cut_grids_kept_plan_gives_the_same_bits(D, opts, monkeypatch):
    """The library's own cut (``tail_pieces`` as shipped; a small grid, so most programs are cut) kept in a plan: the
    plan's replay on the same tensors gives dK and dV bit for bit (the pieces' sums in a fixed order), dQ up to its
    additions' order; the plan ran four launches (the whole programs, the pieces, their sum, dQ's store)."""
    from tests.gpu.test_prefill_gluon_bwd import _check_grads, _gluon_cfg

    from attnlab.gpu import prefill_bwd

    B, H, Hkv, N = 1, 4, 4, 1500
    q, k, v, do = _inputs(B, H, Hkv, N, N, D, D)
    mask, scale = Mask(-1, -1), D ** -0.5
    out, lse = prefill_forward(q, k, v, mask=mask, scale=scale)
    monkeypatch.setattr(GB, "TAIL_FROM_D", 64)  # (the library cuts from D = 128: here both head dims)
    monkeypatch.setattr(GB, "_PLANS", {})
    monkeypatch.setattr(prefill_bwd, "_CALL_PLANS", {})
    assert GB.tail_pieces(-(-N // BLOCK_N) * B * Hkv, torch.cuda.get_device_properties(DEV).multi_processor_count,
                          -(-N // 64), -(-N // 64), D) is not None
    runs = [prefill_backward(do, q, k, v, out, lse, mask=mask, scale=scale, config=_gluon_cfg(**opts))
            for _ in range(2)]
    (plan,) = GB._PLANS.values()
    assert len(plan.launches) == 4 and plan.tail_shape is not None
    (dq0, dk0, dv0), (dq1, dk1, dv1) = runs
    assert torch.equal(dk0, dk1) and torch.equal(dv0, dv1)
    torch.testing.assert_close(dq1, dq0)
    _check_grads(q, k, v, do, runs[1], False, scale)


@pytest.mark.gpu
@on_hopper
def test_gpu_the_library_takes_the_whole_programs_build_from_d128_non_causal_only(monkeypatch):
    """As shipped (``TAIL_FROM_D`` = 128): a non-causal call at D = 128 launches the whole programs' build (TAIL_LIMIT
    the grid's programs where nothing is cut, as on a grid of whole waves), and its pieces where the model cuts; at
    D = 64 and under a causal mask the plain build alone."""
    from attnlab.gpu import prefill_bwd

    sms = torch.cuda.get_device_properties(DEV).multi_processor_count
    launched = []
    real = GB.launch_kept
    monkeypatch.setattr(GB, "launch_kept", lambda kern, grid, a, **kw: launched.append(
        (a["TAIL_LIMIT"], a["TAIL_F"])) or real(kern, grid, a, **kw))
    monkeypatch.setattr(GB, "_PLANS", {})
    monkeypatch.setattr(prefill_bwd, "_CALL_PLANS", {})
    B = 1  # 1024 keys: 8 key blocks a head, so H heads give 8·H programs (whole waves at H = sms / 8)
    whole_waves = sms // math.gcd(sms, 8)  # heads whose 8·H programs fill whole waves
    for D, causal, heads, want in ((128, False, 4, "cut"), (128, False, whole_waves, "whole"), (64, False, 4, "plain"),
                                   (128, True, 4, "plain")):
        launched.clear()
        q, k, v, do = _inputs(B, heads, heads, 1024, 1024, D, D + heads)
        mask, scale = Mask(-1, 0 if causal else -1), D ** -0.5
        out, lse = prefill_forward(q, k, v, mask=mask, scale=scale)
        prefill_backward(do, q, k, v, out, lse, mask=mask, scale=scale)
        programs = 8 * heads
        cut = GB.tail_pieces(programs, sms, 16, 16, D)
        if want == "plain":
            assert launched == [(None, None)], (D, causal)
        elif want == "whole":
            assert cut is None and launched == [(programs, None)]
        else:
            assert cut is not None and launched == [(cut[0], None), (None, cut[0])]
