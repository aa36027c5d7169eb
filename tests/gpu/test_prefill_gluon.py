"""The Gluon forward (attnlab.gpu.prefill_gluon): softmax under the P·V wgmma, FlashAttention-3's
intra-warpgroup overlap, on Hopper.

Triton's interpreter cannot run Gluon. On the CPU these tests build the kernel for sm_90 (Triton's own
ptxas, no GPU) and read what the compiler made of it: the wait that lets the softmax run while the
P·V product is in flight, no register spill, shared memory within the H200's, with ALiBi and without;
they also check the dispatch (a Gluon configuration falls back to the Triton kernel wherever Gluon cannot
run, ALiBi calls reach the Gluon kernel) and the refusals. On a Hopper GPU the kernel runs and is held to
the float64 criterion of the other kernels on awkward shapes.
"""

import dataclasses
from pathlib import Path

import pytest
import torch
from tests.helpers import (
    GLUON_CASES,
    GLUON_WINDOW_CASES,
    check_forward,
    check_packed_forward,
    fresh_json,
    packed_sequences,
    sm90_reports,
    within_criterion,
)
from tests.helpers import abs_err as _err

from attnlab.variants import Mask

pytest.importorskip("triton")
from tests.gluon_env import DEV, HOPPER, needs_gluon  # noqa: E402

from attnlab.gpu import FwdConfig, prefill_forward  # noqa: E402
from attnlab.gpu import prefill_gluon as G  # noqa: E402

pytestmark = pytest.mark.usefixtures("interpreter_bfloat16")

CONFIGS = [  # (block_m, block_n, stages, num_warps, warp_spec)
    (128, 128, 2, 8, False), (128, 64, 3, 8, False), (64, 64, 3, 4, False),
    (128, 128, 2, 4, True), (128, 64, 3, 4, True), (128, 128, 3, 4, True),
    (192, 128, 2, 4, True), (192, 64, 2, 4, True),  # three consumer warp groups
]


@needs_gluon
def test_builds_for_sm90_with_the_softmax_under_the_pv_product():
    """The sm_90 builds (D 64/128, causal or not, small float16 tiles, warp-specialised): each loop step
    waits for one wgmma group while the other (P·V) stays in flight ("wgmma.wait_group 1" in the PTX),
    the overlap this kernel exists for; K/V by TMA; no spill; shared memory = Q + two K and two V
    buffers, within the H200's 227 KB. Warp-specialised: registers moved to the consumers (setmaxnreg)."""
    cases = [dict(D=D, causal=c, dtype="bfloat16") for D in (64, 128) for c in (False, True)]
    cases.append(dict(D=64, causal=True, block_m=64, block_n=64, stages=3, num_warps=4, dtype="float16"))
    cases += [dict(D=D, causal=c, num_warps=4, warp_spec=True, dtype="bfloat16") for D in (64, 128) for c in (False, True)]
    for case, rep in zip(cases, sm90_reports("prefill_gluon", [dict(c) for c in cases])):
        assert 1 in rep["wait_groups"], (case, rep)
        assert rep["tma_loads"] > 0 and rep["wgmma"] > 0, (case, rep)
        bm, bn, st = case.get("block_m", 128), case.get("block_n", 128), case.get("stages", 2)
        expect_kb = (bm * case["D"] * 2 + 2 * st * bn * case["D"] * 2) / 1024
        assert rep["smem_kb"] == pytest.approx(expect_kb, abs=1.0), (case, rep)
        assert rep["smem_kb"] <= 227, (case, rep)
        if rep.get("stack") is not None:
            assert rep["stack"] == 0 and rep["regs"] <= 255, (case, rep)  # no spill
        if case.get("warp_spec"):
            assert 24 in rep["setmaxnreg"] and max(rep["setmaxnreg"]) >= 232, (case, rep)  # loader gives, consumers take


@needs_gluon
def test_alibi_builds_for_sm90_with_the_same_schedule_and_no_spill():
    """The ALiBi builds (D 64/128, causal or not; the single-program kernel and the table's two consumer
    warp groups): the same wgmma schedule as the build without ALiBi (the one-group wait, as many wgmmas
    and TMA loads, the same setmaxnreg, shared memory within 0.5 KB) and no spill. The 192-row build
    (three consumer warp groups at 160 registers) compiles too; it spills, which is why the dispatch runs
    ALiBi calls with 128 rows (``gluon_alibi_config``)."""
    cases = [dict(D=D, causal=c, dtype="bfloat16") for D in (64, 128) for c in (False, True)]
    cases += [dict(D=D, causal=c, num_warps=4, warp_spec=True, dtype="bfloat16") for D in (64, 128) for c in (False, True)]
    cases.append(dict(D=64, causal=True, block_m=192, num_warps=4, warp_spec=True, dtype="bfloat16"))
    reps = sm90_reports("prefill_gluon", [dict(c) for c in cases] + [dict(c, alibi=True) for c in cases])
    for case, plain, rep in zip(cases, reps[:len(cases)], reps[len(cases):]):
        assert 1 in rep["wait_groups"], (case, rep)
        for key in ("wait_groups", "wgmma", "tma_loads", "setmaxnreg"):
            if key == "wgmma" and case.get("block_m") == 192 and G.OWN_BLOCKS:
                continue  # (ALiBi's groups walk the whole tile, the plain build's only their own blocks: triton 3.9
            assert rep[key] == plain[key], (case, key, plain, rep)  # writes the 192-row walks' wgmmas 64 and 72 times)
        assert rep["smem_kb"] == pytest.approx(plain["smem_kb"], abs=0.5), (case, plain, rep)
        if rep.get("stack") is not None and case.get("block_m", 128) == 128:
            assert rep["stack"] == 0 and rep["regs"] <= 255, (case, rep)  # no spill


@needs_gluon
@pytest.mark.parametrize("bad", [dict(block_m=64), dict(block_n=32), dict(stages=0), dict(warp_spec=True)])
def test_gluon_forward_refuses_bad_tiles_before_any_work(bad):
    q = torch.zeros(1, 1, 8, 64, dtype=torch.float16)
    out = torch.full_like(q, 7.0)
    lse = torch.full((1, 1, 8), 7.0)
    args = dict(block_m=128, block_n=128, stages=2, num_warps=8) | bad
    with pytest.raises(ValueError, match="the Gluon forward takes block_m"):
        G.gluon_forward(q, q, q, out, lse, causal_off=None, scale=0.125, **args)
    assert (out == 7).all() and (lse == 7).all()  # nothing written


def test_gluon_is_only_taken_on_hopper():
    q = torch.zeros(1, 1, 8, 64, dtype=torch.float16)
    assert not G.gluon_supported(q, q, q)  # a CPU tensor
    if DEV == "cuda" and not HOPPER:
        assert not G.gluon_supported(*(t.cuda() for t in (q, q, q)))


def _ref_check(q, k, v, out, lse, causal, scale, window=None, alibi_slopes=None):
    check_forward(q, k, v, out, lse, causal=causal, scale=scale, window=window, alibi_slopes=alibi_slopes)


def test_a_gluon_config_falls_back_to_the_triton_kernel_where_gluon_cannot_run():
    """On the CPU (the interpreter, where no call can take Gluon), with softcap or a head dim Gluon does
    not take, a configuration that asks for Gluon still gives the right answer, through the Triton kernel
    (on the CPU an ALiBi call too)."""
    gen = torch.Generator(device=DEV).manual_seed(0)
    cfg = FwdConfig(16, 16, 1, 1, gluon=True) if DEV == "cpu" else FwdConfig(128, 64, 8, 3, tma=True, gluon=True)
    slopes = torch.tensor([[0.5, 0.125]], device=DEV)
    extras = [(64, True, {}), (32, False, {}), (64, True, dict(softcap=20.0))]
    if DEV == "cpu":
        extras.append((64, True, dict(slopes=slopes)))
    for D, causal, extra in extras:
        q, k, v = (torch.randn(1, 2, 37, D, dtype=torch.float16, device=DEV, generator=gen) for _ in range(3))
        out, lse = prefill_forward(q, k, v, mask=Mask(-1, 0 if causal else -1), scale=D ** -0.5, config=cfg, **extra)
        if not extra:
            _ref_check(q, k, v, out, lse, causal, D ** -0.5)
        else:
            ref, _ = prefill_forward(q, k, v, mask=Mask(-1, 0), scale=D ** -0.5, config=FwdConfig(16, 16, 1, 1)
                                     if DEV == "cpu" else None, **extra)
            torch.testing.assert_close(out, ref, atol=2e-3, rtol=0)


def test_alibi_calls_reach_the_gluon_forward_with_their_slopes(monkeypatch):
    """The dispatch, seen on the CPU by standing in for the Gluon kernel: where Gluon can run (here
    ``gluon_supported`` is made to say so), an ALiBi call with a Gluon configuration goes to
    ``gluon_forward`` with its slopes, mask edges and tiles; the table's 192-row entry runs it with 128
    rows (and a call without ALiBi keeps 192); softcap and packed batches still go to the Triton kernel."""
    from attnlab.gpu import config as C
    from attnlab.gpu import prefill_fwd as F

    calls = []
    monkeypatch.setattr(G, "gluon_supported", lambda *a: True)
    monkeypatch.setattr(G, "gluon_forward", lambda *a, **kw: calls.append(kw))
    q = torch.randn(2, 4, 40, 64, dtype=torch.float16)
    k, v = torch.randn(2, 2, 50, 64, dtype=torch.float16), torch.randn(2, 2, 50, 64, dtype=torch.float16)
    slopes = torch.tensor([0.5, 0.25, 0.125, 0.0625]).expand(2, 4)  # (H,) as the API passes it: (B, H), stride 0
    ws = FwdConfig(128, 64, 4, 2, tma=True, warp_spec=True, gluon=True)
    prefill_forward(q, k, v, mask=Mask(30, 0), scale=0.125, slopes=slopes, config=ws)
    assert len(calls) == 1 and calls[0]["slopes"] is slopes
    assert (calls[0]["causal_off"], calls[0]["win_off"], calls[0]["block_m"], calls[0]["block_n"]) == (10, -20, 128, 64)
    # the table's entry: three consumer warp groups become two for ALiBi only
    monkeypatch.setattr(F, "default_fwd_config", lambda *a, gluon=True, **kw: C._GLUON_192 if gluon else C._INTERP_FWD)
    calls.clear()
    prefill_forward(q, k, v, mask=Mask(-1, -1), scale=0.125, slopes=slopes)
    prefill_forward(q, k, v, mask=Mask(-1, -1), scale=0.125)
    assert [(c["block_m"], c["slopes"] is slopes) for c in calls] == [(128, True), (192, False)]
    assert all(c["warp_spec"] and c["causal_off"] is None and c["win_off"] is None for c in calls)
    # softcap: the Triton kernel's launch (a stand-in here), not the Gluon forward
    launches = []
    monkeypatch.setattr(F, "launch_kept", lambda kernel, grid, kwargs, **options: launches.append(kwargs))
    calls.clear()
    prefill_forward(q, k, v, mask=Mask(-1, 0), scale=0.125, slopes=slopes, softcap=5.0)
    assert calls == [] and len(launches) == 1 and launches[0]["ALIBI"] and launches[0]["SOFTCAP"]


def test_a_zero_scale_takes_the_triton_kernel(monkeypatch):
    """A masked block's scores are masked raw and scaled after (``MASK_LIMITS``), so −∞ · 0 would make a NaN: with
    scale 0 the call goes to the Triton kernel (a stand-in here), with any positive scale to the Gluon forward; the
    Gluon forward itself refuses scale 0 before writing anything."""
    from attnlab.gpu import prefill_fwd as F

    q = torch.zeros(1, 2, 40, 64, dtype=torch.float16)
    if G.HAVE_GLUON:
        out, lse = q.clone().fill_(7.0), torch.full((1, 2, 40), 7.0)
        with pytest.raises(ValueError, match="positive scale"):
            G.gluon_forward(q, q, q, out, lse, causal_off=0, scale=0.0, block_m=128, block_n=128, stages=2,
                            num_warps=4, warp_spec=True)
        assert (out == 7).all() and (lse == 7).all()
    calls, launches = [], []
    monkeypatch.setattr(G, "gluon_supported", lambda *a: True)
    monkeypatch.setattr(G, "gluon_forward", lambda *a, **kw: calls.append(kw))
    monkeypatch.setattr(F, "launch_kept", lambda kernel, grid, kwargs, **options: launches.append(kwargs))
    ws = FwdConfig(128, 64, 4, 2, tma=True, warp_spec=True, gluon=True)
    prefill_forward(q, q, q, mask=Mask(-1, 0), scale=0.0, config=ws)
    assert calls == [] and len(launches) == 1
    prefill_forward(q, q, q, mask=Mask(-1, 0), scale=1e-30, config=ws)
    assert len(calls) == 1 and calls[0]["scale"] == 1e-30 and len(launches) == 1


def test_mask_edges_beyond_any_sequence_are_clamped_within_int32():
    """``clamp_edges``: offsets past ±2^30 become the kernels' own "no edge" values, the rest stay as they are."""
    assert G.clamp_edges(None, None) == (None, None)
    assert G.clamp_edges(5, -7) == (5, -7)
    assert G.clamp_edges(1 << 31, -(1 << 31) + 4000) == (-G.NO_WINDOW, G.NO_WINDOW)
    assert G.clamp_edges(1 << 40, -(1 << 40)) == (1 << 30, -(1 << 30))


@pytest.mark.gpu
@pytest.mark.skipif(not (HOPPER and G.HAVE_GLUON), reason="needs a Hopper GPU and Gluon")
@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_gpu_windows_wider_than_int32_are_no_windows(D, causal):
    """A window's sides near 2^31 (a left edge that int32 arithmetic on row numbers would wrap) on the Gluon kernels:
    the same forward, to the bit, as no window, and the same gradients within bf16 rounding."""
    import attnlab

    gen = torch.Generator(device="cuda").manual_seed(5)
    q, k, v, do = (torch.randn(1, 2048 // D // 4, 2100, D, device="cuda", dtype=torch.bfloat16, generator=gen)
                   for _ in range(4))
    wide = ((1 << 31) - 100, 0 if causal else (1 << 31) - 100)
    outs = []
    for window in (wide, None):
        qs, ks, vs = (t.clone().requires_grad_() for t in (q, k, v))
        o = attnlab.flash_attention(qs, ks, vs, causal=causal, window=window)
        outs.append((o.detach(), *torch.autograd.grad(o, (qs, ks, vs), do)))
    assert torch.equal(outs[0][0], outs[1][0])
    for a, b in zip(outs[0][1:], outs[1][1:]):
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a, b, rtol=0, atol=2e-2 * b.abs().max().item())


@pytest.mark.parametrize("block_n", [64, 128])
def test_the_masked_blocks_bit_masks_are_the_row_limits(block_n):
    """``MASK_LIMITS`` 2's arithmetic (``mask_bits_reference``, the kernel's step by step): for every lane of a warp
    and row limits [lo, hi) left of, across and right of the block, and the unbounded left edge, a thread's
    register is visible exactly where its column c = 8j + 2(lane % 4) + k has lo <= c < hi."""
    edges = sorted(set(range(-10, block_n + 11)) | {G.NO_WINDOW, G.NO_WINDOW - 5000, 1 << 20})
    for lane in range(32):
        cols = [8 * j + 2 * (lane % 4) + k for j in range(block_n // 8) for k in range(2)]
        for lo in edges:
            for hi in edges[::3] if lo < -10 or lo > block_n + 10 else edges:
                got = G.mask_bits_reference(lo, hi, lane, block_n)
                assert got == [lo <= c < hi for c in cols], (lane, lo, hi)


def _block_seen(rows, blk, block_n, nk, causal_off, win_off) -> bool:
    """Whether one of ``rows`` sees a key of key block ``blk`` (keys before nk; causal_off / win_off None: no edge)."""
    keys = range(blk * block_n, min((blk + 1) * block_n, nk))
    return any((causal_off is None or j <= i + causal_off) and (win_off is None or j >= i + win_off)
               for i in rows for j in keys)


def test_each_group_walks_every_block_its_rows_see_and_no_other():
    """``OWN_BLOCKS``' ranges (``group_blocks``, the kernel's arithmetic) against each (row, key) pair's visibility, on
    the tiles the kernels walk (``tile_walks``' blocks, the part block first or not) of 128- and 192-row tiles: every
    block of a tile's walk that holds a key one of a group's rows (before Nq) sees lies in the group's range, and
    for a group whose rows are all before Nq the range's first and last blocks hold such a key (it takes no more)."""
    import random

    rng = random.Random(5)
    cases = [(1000, 1000, 0, None), (4096, 4096, 0, -4095), (700, 1300, 600, -500), (1537, 1537, 0, -300),
             (900, 900, 13, -97), (700, 300, -400, None), (2048, 2048, None, None), (3000, 4099, None, -2000)]
    for _ in range(40):
        nq, nk = rng.randint(1, 1500), rng.randint(1, 1500)
        right = rng.choice([None, 0, rng.randint(0, 300)])
        left = rng.choice([None, rng.randint(0, 900)])
        cases.append((nq, nk, None if right is None else nk - nq + right, None if left is None else nk - nq - left))
    skipped = 0
    for nq, nk, causal_off, win_off in cases:
        for block_m in (128, 192):
            block_n = 128
            for shift in {0, G.part_first_shift(nq, block_m)} if causal_off is not None else {0}:
                walks = G.tile_walks(nq, nk, block_m, block_n, causal_off, win_off, shift)
                for m, n_blocks in enumerate(walks):
                    start = max(m * block_m - shift, 0)
                    lo_blk = max(start + (G.NO_WINDOW if win_off is None else win_off), 0) // block_n
                    for g in range(block_m // 64):
                        first, end = G.group_blocks(start, g, lo_blk, n_blocks, nq, nk, causal_off, win_off, block_n)
                        rows = range(start + 64 * g, min(start + 64 * g + 64, nq))
                        seen = [_block_seen(rows, lo_blk + t, block_n, nk, causal_off, win_off)
                                for t in range(n_blocks)]
                        assert 0 <= first <= end <= n_blocks
                        assert all(first <= t < end for t in range(n_blocks) if seen[t]), \
                            (nq, nk, causal_off, win_off, block_m, m, g)
                        if len(rows) == 64 and end > first:
                            assert seen[first] and seen[end - 1], (nq, nk, causal_off, win_off, block_m, m, g)
                        skipped += n_blocks - (end - first)
    assert skipped > 0  # (the cases do reach blocks a group passes on)


def test_causal_calls_reach_the_gluon_forward_with_the_schedule_of_their_length(monkeypatch):
    """The table's causal entries, seen on the CPU by standing in for the Gluon kernel: the part block first and
    groups of heads by K/V bytes (head_chunk 0) on every causal call; persistent (192-row tiles at D = 64, 128-row
    at D = 128) at every long length; ALiBi calls the grid kernel."""
    from attnlab.gpu import config as C
    from attnlab.gpu import prefill_fwd as F

    calls = []
    monkeypatch.setattr(G, "gluon_supported", lambda *a: True)
    monkeypatch.setattr(G, "gluon_forward", lambda *a, **kw: calls.append(kw))
    real = C.default_fwd_config
    monkeypatch.setattr(F, "default_fwd_config", lambda D, causal, device, n_keys=None, gluon=True:
                        real(D, causal, torch.device("cuda"), n_keys, gluon=gluon))
    for D, Nk, slopes, want, rows in ((64, 2048, None, True, 192), (64, 8191, None, True, 192),
                                      (64, 8192, None, True, 192), (128, 20000, None, True, 128),
                                      (128, 4096, torch.ones(2), False, 128)):
        calls.clear()
        q = torch.zeros(1, 2, 8, D, dtype=torch.float16)
        k = torch.zeros(1, 2, Nk, D, dtype=torch.float16)
        prefill_forward(q, k, k, mask=Mask(-1, 0), scale=0.1, slopes=slopes)
        assert len(calls) == 1 and calls[0]["persistent"] is want and calls[0]["block_m"] == rows, (D, Nk)
        assert calls[0]["part_first"] and calls[0]["head_chunk"] == 0


def test_auto_head_chunk_is_the_group_run_4_measured_fastest():
    """``auto_head_chunk`` (8 MB of K and V a group): on each causal row of fwd-persistent run 4 its persistent
    build is the fastest of the groups of 1, 2, 4 and 8 heads or within 1 % of it, as its docstring says; the
    group of 8 heads at D = 128, 16K (eight times the bytes) 8 % slower. GQA groups count K/V heads once."""
    import json

    rows = json.loads((Path(__file__).resolve().parents[2] / "benchmarks" / "data"
                       / "fwd-persistent-h200-run4.json").read_text())["rows"]
    best = {}
    for r in rows:
        key = (r["D"], r["N"], r["build"])
        best[key] = min(best.get(key, float("inf")), r["ms"])
    shapes = sorted({(D, N) for D, N, _ in best})
    assert len(shapes) == 6
    for D, N in shapes:
        mine = best[D, N, f"persistent-pf-c{G.auto_head_chunk(N, D, 1, 2)}"]
        fastest = min(best[D, N, f"persistent-pf-c{c}"] for c in (1, 2, 4, 8))
        assert mine <= 1.01 * fastest, (D, N)
    assert G.auto_head_chunk(16384, 128, 1, 2) == 1
    assert best[128, 16384, "persistent-pf-c8"] / best[128, 16384, "persistent-pf-c1"] == pytest.approx(1.08, abs=0.005)
    assert G.auto_head_chunk(4096, 64, 1, 2) == 8 and G.auto_head_chunk(4096, 64, 4, 2) == 32
    assert G.auto_head_chunk(1 << 20, 128, 1, 2) == 1


def test_gluon_alibi_config_takes_two_consumer_warp_groups():
    from attnlab.gpu import config as C

    assert C.gluon_alibi_config(C._GLUON_192) == C._GLUON_LONG  # the same tiles with 128 rows
    assert C.gluon_alibi_config(C._GLUON_LONG) is C._GLUON_LONG
    triton_entry = FwdConfig(192, 64, 8, 2)  # not a Gluon entry: unchanged
    assert C.gluon_alibi_config(triton_entry) is triton_entry


# -- on a Hopper GPU ---------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.skipif(not (HOPPER and G.HAVE_GLUON), reason="needs a Hopper GPU and Gluon")
@pytest.mark.parametrize("tiles", CONFIGS)
@pytest.mark.parametrize("B,H,Hkv,Nq,Nk,D,causal,dtype", GLUON_CASES)
def test_gpu_gluon_matches_reference(B, H, Hkv, Nq, Nk, D, causal, dtype, tiles):
    block_m, block_n, stages, warps, ws = tiles
    gen = torch.Generator(device=DEV).manual_seed(Nq * 7 + Nk)
    q = torch.randn(B, H, Nq, D, dtype=dtype, device=DEV, generator=gen)
    k, v = (torch.randn(B, Hkv, Nk, D, dtype=dtype, device=DEV, generator=gen) for _ in range(2))
    out = torch.full_like(q, float("nan"))
    lse = torch.full((B, H, Nq), float("nan"), device=DEV)
    scale = D ** -0.5
    G.gluon_forward(q, k, v, out, lse, causal_off=Nk - Nq if causal else None, scale=scale,
                    block_m=block_m, block_n=block_n, stages=stages, num_warps=warps, warp_spec=ws)
    _ref_check(q, k, v, out, lse, causal, scale)


@pytest.mark.gpu
@pytest.mark.skipif(not (HOPPER and G.HAVE_GLUON), reason="needs a Hopper GPU and Gluon")
@pytest.mark.parametrize("window", [(-1, 0), (100, 0)])
def test_gpu_zero_scale_gives_uniform_attention_over_the_visible_keys(window):
    """scale 0 (every visible key weighted alike) on a long causal call that would take the Gluon forward: the
    Triton kernel's answer, held to the float64 criterion, with no NaN from a masked block."""
    import attnlab

    gen = torch.Generator(device="cuda").manual_seed(3)
    q, k, v = (torch.randn(1, 4, 1100, 64, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(3))
    out, lse = attnlab.flash_attention(q, k, v, causal=True, window=window, scale=0.0, return_lse=True)
    assert torch.isfinite(out).all()
    _ref_check(q, k, v, out, lse, True, 0.0, window=window)


@pytest.mark.gpu
@pytest.mark.skipif(not (HOPPER and G.HAVE_GLUON), reason="needs a Hopper GPU and Gluon")
def test_gpu_gluon_strided_inputs_and_the_dispatch():
    """(B, N, H, D) tensors seen as (B, H, N, D) (the layout of a model's projections) go through the
    descriptors' strides; a Gluon configuration passed to prefill_forward takes the Gluon kernel and
    agrees with the Triton kernel."""
    gen = torch.Generator(device=DEV).manual_seed(3)
    q, k, v = (torch.randn(2, 1500, 8, 128, dtype=torch.bfloat16, device=DEV, generator=gen).transpose(1, 2)
               for _ in range(3))
    for causal, cfg in ((False, FwdConfig(128, 128, 8, 2, tma=True, gluon=True)),
                        (True, FwdConfig(128, 128, 8, 2, tma=True, gluon=True)),
                        (False, FwdConfig(128, 128, 4, 2, tma=True, warp_spec=True, gluon=True)),
                        (True, FwdConfig(128, 64, 4, 3, tma=True, warp_spec=True, gluon=True))):
        mask = Mask(-1, 0 if causal else -1)
        out, lse = prefill_forward(q, k, v, mask=mask, scale=0.1, config=cfg)
        _ref_check(q, k, v, out, lse, causal, 0.1)
        tri, tri_lse = prefill_forward(q, k, v, mask=mask, scale=0.1, config=FwdConfig(128, 64, 8, 3, tma=True))
        assert (out.float() - tri.float()).abs().max().item() < 2e-2
        torch.testing.assert_close(lse, tri_lse, atol=1e-3, rtol=0)


def test_the_table_takes_gluon_for_long_calls_and_set_config_can_replace_it():
    """Long calls at D = 64 and 128 read the Gluon entries; a Triton forward given to set_config is what
    then runs (the Gluon entry for its key is dropped), and a Gluon one puts it back."""
    from attnlab.gpu import default_fwd_config, set_config
    from attnlab.gpu.config import SHORT_KEYS

    cuda = torch.device("cuda")  # the table is keyed by device type only: no GPU needed to read it
    entry = default_fwd_config(128, False, cuda, SHORT_KEYS)
    assert entry.gluon and entry.warp_spec and (entry.block_m, entry.num_warps) == (128, 4)
    # long calls run the persistent build (fwd-persistent runs 1-5, fwd-switches runs 17-20), causal ones with the
    # part block first and groups of heads; at D = 64 on 192-row tiles at every long length (no mid entry)
    from attnlab.gpu.config import MID_KEYS

    for D in (64, 128):
        assert default_fwd_config(D, False, cuda, SHORT_KEYS).persistent
        assert default_fwd_config(D, False, cuda, MID_KEYS - 1) == default_fwd_config(D, False, cuda, MID_KEYS)
        for n in (SHORT_KEYS, MID_KEYS - 1, MID_KEYS, None):
            causal = default_fwd_config(D, True, cuda, n)
            assert causal.part_first and causal.head_chunk == 0
            assert causal.persistent and causal.block_m == (192 if D == 64 else 128)
            assert causal == default_fwd_config(D, True, cuda, None)
    triton_entry = default_fwd_config(128, False, cuda, SHORT_KEYS, gluon=False)
    assert not triton_entry.gluon
    try:
        marker = FwdConfig(64, 64, 4, 3)
        set_config(128, False, fwd=marker, length="long")
        assert default_fwd_config(128, False, cuda, SHORT_KEYS) is marker
    finally:
        set_config(128, False, fwd=triton_entry, length="long")
        set_config(128, False, fwd=entry, length="long")
    assert default_fwd_config(128, False, cuda, SHORT_KEYS) == entry
    assert default_fwd_config(128, False, cuda, SHORT_KEYS, gluon=False) == triton_entry
    # a mid entry runs below MID_KEYS only, and a long entry given to set_config runs below MID_KEYS too (the mid
    # entry is dropped)
    from attnlab.gpu import config as C

    saved = (dict(C._GLUON_FWD_MID), C._GLUON_FWD_TABLE[64, True, "long"])
    try:
        mid = FwdConfig(128, 64, 4, 2, tma=True, warp_spec=True, gluon=True)
        C._GLUON_FWD_MID[64, True] = mid
        assert default_fwd_config(64, True, cuda, MID_KEYS - 1) is mid
        assert default_fwd_config(64, True, cuda, MID_KEYS) is saved[1]
        marker = FwdConfig(192, 64, 4, 2, tma=True, warp_spec=True, gluon=True)
        set_config(64, True, fwd=marker, length="long")
        assert default_fwd_config(64, True, cuda, SHORT_KEYS) is marker and (64, True) not in C._GLUON_FWD_MID
    finally:
        C._GLUON_FWD_MID.clear()
        C._GLUON_FWD_MID.update(saved[0])
        C._GLUON_FWD_TABLE[64, True, "long"] = saved[1]
    assert default_fwd_config(64, True, cuda, SHORT_KEYS) is saved[1] and not C._GLUON_FWD_MID


@pytest.mark.gpu
@pytest.mark.skipif(not (HOPPER and G.HAVE_GLUON), reason="needs a Hopper GPU and Gluon")
@pytest.mark.parametrize("B,H,Hkv,Nq,Nk,D,window", GLUON_WINDOW_CASES)
@pytest.mark.parametrize("block_m,block_n", [(128, 128), (128, 64), (192, 128), (192, 64)])
def test_gpu_gluon_sliding_window(B, H, Hkv, Nq, Nk, D, window, block_m, block_n):
    """The warp-specialised kernel with a window's left edge, straight and through prefill_forward's
    dispatch (a Gluon configuration with Mask(left, right))."""
    gen = torch.Generator(device=DEV).manual_seed(Nq + Nk + window[0])
    q = torch.randn(B, H, Nq, D, dtype=torch.bfloat16, device=DEV, generator=gen)
    k, v = (torch.randn(B, Hkv, Nk, D, dtype=torch.bfloat16, device=DEV, generator=gen) for _ in range(2))
    scale = D ** -0.5
    left, right = window
    out = torch.full_like(q, float("nan"))
    lse = torch.full((B, H, Nq), float("nan"), device=DEV)
    G.gluon_forward(q, k, v, out, lse, causal_off=Nk - Nq + right if right >= 0 else None, scale=scale,
                    block_m=block_m, block_n=block_n, stages=2, num_warps=4, warp_spec=True, win_off=Nk - Nq - left)
    _ref_check(q, k, v, out, lse, right == 0, scale, window=window)
    cfg = FwdConfig(block_m, block_n, 4, 2, tma=True, warp_spec=True, gluon=True)
    out2, lse2 = prefill_forward(q, k, v, mask=Mask(left, right), scale=scale, config=cfg)
    assert torch.equal(out2, out) and torch.equal(lse2, lse)


@needs_gluon
def test_persistent_builds_for_sm90_with_an_output_buffer_and_the_same_schedule():
    """The persistent forward's sm_90 builds (D 64 and 128, causal or not, two and three consumer warp groups):
    the softmax still under the P·V product (wgmma.wait_group 1), registers moved to the consumers, shared
    memory the non-persistent build's plus one O buffer per consumer (64 rows × D), within the H200's 227 KB;
    at most a few words of spill with two consumer warp groups (none with triton 3.6, the device's). ALiBi and a
    persistent build without warp specialisation are refused."""
    cases = [dict(D=D, causal=c, block_m=bm, num_warps=4, warp_spec=True, dtype="bfloat16")
             for D, bm in ((128, 128), (64, 128), (64, 192)) for c in (False, True)]
    plain = sm90_reports("prefill_gluon", [dict(c) for c in cases])
    pers = sm90_reports("prefill_gluon", [dict(c, persistent=True) for c in cases])
    for case, rep, base in zip(cases, pers, plain):
        assert 1 in rep["wait_groups"] and rep["wgmma"] > 0 and rep["tma_loads"] > 0, (case, rep)
        assert 24 in rep["setmaxnreg"], (case, rep)
        assert rep["smem_kb"] == pytest.approx(base["smem_kb"] + case["block_m"] * case["D"] * 2 / 1024, abs=1.0)
        assert rep["smem_kb"] <= 227, (case, rep)
        if rep.get("stack") is not None and case["block_m"] == 128:  # (triton 3.6: none; 3.9: 40 bytes at D = 128)
            assert rep["stack"] <= 48, (case, rep)
    with pytest.raises(ValueError, match="persistent"):
        G.compile_sm90(64, causal=True, num_warps=4, warp_spec=True, alibi=True, persistent=True)
    with pytest.raises(ValueError, match="persistent"):
        G.compile_sm90(64, causal=True, persistent=True)


# the warp-specialised builds that must give the plain grid kernel's bits: persistent, the part query block first,
# the longest walks first over groups of heads (grid and persistent schedule), and all of them together
SAME_BITS_BUILDS = [dict(persistent=True), dict(part_first=True), dict(head_chunk=8), dict(head_chunk=3),
                    dict(part_first=True, head_chunk=8, persistent=True), dict(part_first=True, head_chunk=3,
                                                                               persistent=True)]


@pytest.mark.gpu
@pytest.mark.skipif(not (HOPPER and G.HAVE_GLUON), reason="needs a Hopper GPU and Gluon")
@pytest.mark.parametrize("block_m,block_n,stages", [(128, 128, 2), (192, 128, 2), (128, 64, 2), (128, 128, 3),
                                                     (128, 64, 4)])
@pytest.mark.parametrize("B,H,Hkv,Nq,Nk,D,causal,dtype", GLUON_CASES + [
    (2, 16, 4, 4200, 4200, 128, True, torch.bfloat16), (1, 24, 24, 3000, 2900, 64, False, torch.float16),  # > 132 tiles
    (4, 8, 2, 4096, 4096, 64, True, torch.bfloat16),  # 192-row blocks: a part block of 64 rows
    (1, 5, 5, 1000, 1100, 64, True, torch.float16)])  # a part block of 40 rows past 64-row slices, Nq < Nk
def test_gpu_persistent_gluon_matches_reference_and_the_grid_kernel(B, H, Hkv, Nq, Nk, D, causal, dtype, block_m,
                                                                    block_n, stages):
    """The persistent forward (one program per SM at most, tiles in turn), the part query block first and the
    longest walks first over groups of heads, within the criterion, and each equal to the plain grid kernel's
    output and lse to the bit (each row's arithmetic is the same), also when there are more tiles than SMs and
    when fewer, on K/V rings of two to four stages."""
    if D == 128 and stages * block_n > 256:  # (the persistent build's shared memory: Q, O and the ring)
        pytest.skip("a ring of more than 256 keys at D = 128 does not fit the persistent build's shared memory")
    gen = torch.Generator(device=DEV).manual_seed(Nq * 11 + Nk)
    q = torch.randn(B, H, Nq, D, dtype=dtype, device=DEV, generator=gen)
    k, v = (torch.randn(B, Hkv, Nk, D, dtype=dtype, device=DEV, generator=gen) for _ in range(2))
    scale = D ** -0.5
    outs = []
    for build in [{}] + SAME_BITS_BUILDS:
        out = torch.full_like(q, float("nan"))
        lse = torch.full((B, H, Nq), float("nan"), device=DEV)
        G.gluon_forward(q, k, v, out, lse, causal_off=Nk - Nq if causal else None, scale=scale, block_m=block_m,
                        block_n=block_n, stages=stages, num_warps=4, warp_spec=True, **build)
        outs.append((build, out, lse))
    _ref_check(q, k, v, *outs[-1][1:], causal, scale)
    for build, out, lse in outs[1:]:
        assert torch.equal(outs[0][1], out) and torch.equal(outs[0][2], lse), build


@pytest.mark.gpu
@pytest.mark.skipif(not (HOPPER and G.HAVE_GLUON), reason="needs a Hopper GPU and Gluon")
@pytest.mark.parametrize("causal", [False, True])
def test_gpu_persistent_gluon_under_cuda_graph_capture(causal):
    """A persistent call whose schedule is not kept yet, first made while a CUDA graph is captured, runs the grid
    kernel (the schedule's copy to the GPU cannot be captured) and replays with the grid kernel's bits; once the
    schedule is kept, a captured call takes the persistent kernel, the same bits again."""
    gen = torch.Generator(device=DEV).manual_seed(7 + causal)
    q, k, v = (torch.randn(2, 6, 1100, 64, dtype=torch.bfloat16, device=DEV, generator=gen) for _ in range(3))
    mask = Mask(-1, 0 if causal else -1)
    base = FwdConfig(128, 128, 4, 2, tma=True, warp_spec=True, gluon=True)
    pcfg = dataclasses.replace(base, persistent=True, part_first=causal, head_chunk=0 if causal else 1)
    want = prefill_forward(q, k, v, mask=mask, scale=0.125, config=base)
    G._SCHEDULES.clear()
    for kept in (False, True):
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out, lse = prefill_forward(q, k, v, mask=mask, scale=0.125, config=pcfg)
        assert bool(G._SCHEDULES) is kept
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, want[0]) and torch.equal(lse, want[1]), kept
        if not kept:
            prefill_forward(q, k, v, mask=mask, scale=0.125, config=pcfg)  # an eager call keeps the schedule


def _half_walks(Nq, Nk, block_m, block_n, causal_off, win_off, m_shift):
    """For every (query block, 64-row slice) of the warp-specialised kernels, the key blocks it walks with the
    kernel's masked flag each: ``_wsp_tile``'s bounds and ``_ws_consumer``'s ``full`` and ``lo_full``."""
    walks = G.tile_walks(Nq, Nk, block_m, block_n, causal_off, win_off, m_shift)
    out = []
    for m, n in enumerate(walks):
        start = max(m * block_m - m_shift, 0)
        lo_blk = max(start + (G.NO_WINDOW if win_off is None else win_off), 0) // block_n
        for half in range(block_m // 64):
            row0 = start + 64 * half
            full = Nk if causal_off is None else max(min(Nk, row0 + 1 + causal_off), 0)
            full = full // block_n * block_n
            lo_full = max(row0 + 63 + (G.NO_WINDOW if win_off is None else win_off), 0)
            lo_full = -(-lo_full // block_n) * block_n
            blocks = [(j, j * block_n < lo_full or j * block_n >= full) for j in range(lo_blk, lo_blk + n)]
            out.append((row0, blocks))
    return out


@pytest.mark.parametrize("Nq,Nk,block_m,block_n,right,left", [
    (4096, 4096, 192, 128, 0, -1), (1000, 1000, 192, 128, 0, -1), (1000, 1100, 192, 64, 0, -1),
    (700, 300, 192, 128, 0, -1), (4096, 4096, 192, 128, 0, 1023), (900, 400, 192, 64, 0, 300),
    (4160, 4200, 192, 128, 3, -1), (4096, 4096, 128, 128, 0, -1), (200, 200, 192, 128, 0, -1)])
def test_the_part_block_first_walks_every_row_as_before(Nq, Nk, block_m, block_n, right, left):
    """``part_first_shift``: the last query block ends at Nq (less than 64 rows after it), block 1 starts after
    row 0, every row is in some block, and the shift keeps every 64-row slice on a multiple of 64. The same-bits
    claim, on the kernels' own bounds (``tile_walks``) and masked flags: a row made by two blocks sees the same
    key blocks with the same flags in both, and a block of either walk that the other lacks shows it no key
    (wholly right of its diagonal or left of its window), so adds nothing."""
    causal_off = Nk - Nq + right
    win_off = Nk - Nq - left if left >= 0 else None
    shift = G.part_first_shift(Nq, block_m)
    n_m = -(-Nq // block_m)
    assert shift % 64 == 0 and 0 <= shift < block_m
    if n_m >= 2:
        assert 0 < block_m - shift and Nq <= (n_m * block_m - shift) < Nq + 64
    else:
        assert shift == 0
    seen: dict[int, list] = {}
    for row0, blocks in _half_walks(Nq, Nk, block_m, block_n, causal_off, win_off, shift):
        for r in range(row0, min(row0 + 64, Nq)):
            lo = r + (win_off if win_off is not None else -(1 << 30))
            visible = [(j, flag) for j, flag in blocks
                       if max(j * block_n, lo) <= min(j * block_n + block_n - 1, Nk - 1, r + causal_off)]
            if r in seen:
                assert visible == seen[r], (r, visible, seen[r])
            seen[r] = visible
    assert sorted(seen) == list(range(Nq))
    # and the unshifted blocks walk each row the same way too (the kernels' arithmetic for a row is its walk's)
    plain = {}
    for row0, blocks in _half_walks(Nq, Nk, block_m, block_n, causal_off, win_off, 0):
        for r in range(row0, min(row0 + 64, Nq)):
            lo = r + (win_off if win_off is not None else -(1 << 30))
            plain[r] = [(j, flag) for j, flag in blocks
                        if max(j * block_n, lo) <= min(j * block_n + block_n - 1, Nk - 1, r + causal_off)]
    assert plain == seen


def test_the_part_block_first_saves_the_products_of_the_longest_walk():
    """At 4K rows in 192-row blocks (the D = 64 causal entry) the part block holds 64 rows; first instead of last,
    its walk is 2 key blocks, not 32: the blocks' walks sum to 364 key blocks a head instead of 384."""
    assert sum(G.tile_walks(4096, 4096, 192, 128, 0, None)) == 384
    assert sum(G.tile_walks(4096, 4096, 192, 128, 0, None, G.part_first_shift(4096, 192))) == 364


@pytest.mark.parametrize("n_m,bh,programs,chunk", [(22, 128, 132, 8), (32, 64, 132, 4), (3, 5, 132, 8),
                                                   (86, 32, 132, 16), (7, 9, 4, 2), (1, 1, 1, 1)])
def test_persistent_schedules_take_every_tile_once_and_balance_causal_walks(n_m, bh, programs, chunk):
    """Every tile once. Without walks: the rounds forward and back (program p takes tile p of round 0 and
    programs − 1 − p of round 1). With a causal mask's walks: each group of ``chunk`` heads' tiles longest first,
    and no program's work (walks plus TILE_COST a tile) more than the longest tile above the average."""
    rows = G.persistent_schedule(n_m, bh, programs)
    assert sorted(t for r in rows for t in r) == list(range(n_m * bh))
    if n_m * bh >= 2 * programs:
        assert rows[0][:2] == [0, 2 * programs - 1] and rows[-1][:2] == [programs - 1, programs]
    Nq = n_m * 192 - 64  # n_m query blocks, the last of 128 rows
    walks = G.tile_walks(Nq, Nq, 192, 128, 0, None, G.part_first_shift(Nq, 192))
    rows = G.persistent_schedule(n_m, bh, programs, walks, chunk)
    flat = [t for r in rows for t in r]
    assert sorted(flat) == list(range(n_m * bh))
    cost = [sum(walks[t % n_m] + G.TILE_COST for t in r) for r in rows]
    longest = max(walks) + G.TILE_COST
    assert max(cost) - sum(cost) / programs <= longest
    for r in rows:  # a program's tiles in the order of the groups, and longest first inside one
        keys = [((t // n_m) // chunk, -walks[t % n_m]) for t in r]
        assert keys == sorted(keys)
    with pytest.raises(ValueError, match="walks"):
        G.persistent_schedule(n_m, bh, programs, walks[:-1] + [0, 0], chunk)
    with pytest.raises(ValueError, match="positive"):
        G.persistent_schedule(n_m, bh, programs, walks, 0)


@pytest.mark.gpu
@pytest.mark.skipif(not (HOPPER and G.HAVE_GLUON), reason="needs a Hopper GPU and Gluon")
@pytest.mark.parametrize("B,H,Hkv,Nq,Nk,D,window", GLUON_WINDOW_CASES)
def test_gpu_persistent_gluon_sliding_window_and_the_dispatch(B, H, Hkv, Nq, Nk, D, window):
    """The persistent forward with a window's left edge, through prefill_forward's dispatch (a persistent
    Gluon configuration), equal to the non-persistent kernel's to the bit; an ALiBi call given the persistent
    configuration runs the non-persistent kernel."""
    gen = torch.Generator(device=DEV).manual_seed(Nq + Nk + window[0] + 1)
    q = torch.randn(B, H, Nq, D, dtype=torch.bfloat16, device=DEV, generator=gen)
    k, v = (torch.randn(B, Hkv, Nk, D, dtype=torch.bfloat16, device=DEV, generator=gen) for _ in range(2))
    scale = D ** -0.5
    cfg = FwdConfig(128, 128, 4, 2, tma=True, warp_spec=True, gluon=True)
    pcfg = FwdConfig(128, 128, 4, 2, tma=True, warp_spec=True, gluon=True, persistent=True)
    mask = Mask(*window)
    want = prefill_forward(q, k, v, mask=mask, scale=scale, config=cfg)
    got = prefill_forward(q, k, v, mask=mask, scale=scale, config=pcfg)
    _ref_check(q, k, v, *got, window[1] == 0, scale, window=window)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    for build in SAME_BITS_BUILDS:  # the part block first, groups of heads: the same bits with a window too
        for base in (cfg, FwdConfig(192, 128, 4, 2, tma=True, warp_spec=True, gluon=True)):
            ref = want if base is cfg else prefill_forward(q, k, v, mask=mask, scale=scale, config=base)
            got = prefill_forward(q, k, v, mask=mask, scale=scale, config=dataclasses.replace(base, **build))
            assert torch.equal(got[0], ref[0]) and torch.equal(got[1], ref[1]), (build, base.block_m)
    slopes = torch.rand(H, device=DEV)
    a = prefill_forward(q, k, v, mask=mask, scale=scale, config=pcfg, slopes=slopes)
    b = prefill_forward(q, k, v, mask=mask, scale=scale, config=cfg, slopes=slopes)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    for build in SAME_BITS_BUILDS:  # ALiBi: the grid kernel, its order and part block first give the same bits
        a = prefill_forward(q, k, v, mask=mask, scale=scale, config=dataclasses.replace(cfg, **build), slopes=slopes)
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]), build


@needs_gluon
def test_a_window_needs_the_warp_specialised_kernel():
    q = torch.zeros(1, 1, 8, 64, dtype=torch.float16)
    with pytest.raises(ValueError, match="warp-specialised"):
        G.gluon_forward(q, q, q, q.clone(), torch.zeros(1, 1, 8), causal_off=0, scale=0.1, block_m=128,
                        block_n=128, stages=2, num_warps=8, warp_spec=False, win_off=-5)


# -- ALiBi on a Hopper GPU ---------------------------------------------------------------------------

ALIBI_CASES = [
    # B, H, Hkv, Nq, Nk, D, (left, right), slopes (H,) or (B, H), dtype
    (1, 2, 2, 1, 1, 64, (-1, -1), "H", torch.bfloat16),  # one row, one key
    (2, 4, 4, 1000, 1000, 64, (-1, 0), "H", torch.bfloat16),  # causal, ragged
    (2, 4, 4, 129, 129, 128, (-1, -1), "BH", torch.float16),  # non-causal, ragged: the diagonal crosses blocks
    (1, 8, 2, 257, 1030, 128, (-1, 0), "BH", torch.bfloat16),  # GQA, Nq < Nk (bottom-right diagonal)
    (1, 6, 1, 700, 300, 64, (-1, 0), "H", torch.float16),  # MQA, Nq > Nk: empty rows
    (2, 4, 2, 300, 1000, 64, (-1, -1), "BH", torch.bfloat16),  # non-causal, Nq < Nk: blocks right of the diagonal
    (1, 4, 4, 1000, 129, 128, (-1, -1), "H", torch.bfloat16),  # non-causal, Nq > Nk
    (1, 4, 4, 600, 600, 64, (-1, 70), "BH", torch.bfloat16),  # a right edge past the diagonal: unmasked blocks it crosses
    (1, 4, 2, 1000, 1000, 128, (255, 0), "BH", torch.bfloat16),  # causal sliding window, GQA
    (2, 4, 4, 700, 1300, 64, (100, 0), "H", torch.float16),  # a window narrower than a block, Nq < Nk
    (1, 4, 4, 2048, 2048, 128, (-1, 0), "BH", torch.bfloat16),  # full blocks
]
ALIBI_TILES = [  # (block_m, block_n, num_warps, warp_spec), two stages
    (128, 128, 4, True), (128, 64, 4, True), (192, 128, 4, True), (192, 64, 4, True), (128, 128, 8, False),
]


def _alibi_slopes(B, H, kind, gen):
    """ALiBi's geometric slopes 2^(−8(h+1)/H) with a steep first one (1.0) and, from three heads on, a
    negative last one; "BH": (B, H), each batch's scaled by its own factor; "H": (H,)."""
    s = torch.tensor([2.0 ** (-8 * (h + 1) / H) for h in range(H)])
    s[0] = 1.0
    if H > 2:
        s[-1] = -0.02
    if kind == "BH":
        s = s * (0.5 + torch.rand(B, 1, generator=gen))
    return s.to(DEV, torch.float32)


@pytest.fixture
def gluon_calls(monkeypatch):
    """The keyword arguments of every call of ``gluon_forward``, through a counting wrapper around it."""
    calls, real = [], G.gluon_forward

    def counted(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(G, "gluon_forward", counted)
    return calls


@pytest.mark.gpu
@pytest.mark.skipif(not (HOPPER and G.HAVE_GLUON), reason="needs a Hopper GPU and Gluon")
@pytest.mark.parametrize("tiles", ALIBI_TILES)
@pytest.mark.parametrize("B,H,Hkv,Nq,Nk,D,window,kind,dtype", ALIBI_CASES)
def test_gpu_gluon_alibi_matches_reference(B, H, Hkv, Nq, Nk, D, window, kind, dtype, tiles, gluon_calls):
    """ALiBi through prefill_forward with a Gluon configuration: the Gluon kernel runs (once, with the
    slopes), matches the float64 reference by the criterion of the other tests and the Triton kernel's
    ALiBi closely; (H,) slopes given straight to gluon_forward give the same bits as their (B, H) view."""
    block_m, block_n, warps, ws = tiles
    left, right = window
    if left >= 0 and not ws:
        pytest.skip("a window's left edge needs the warp-specialised kernel")
    gen = torch.Generator().manual_seed(Nq * 7 + Nk + D)
    q = torch.randn(B, H, Nq, D, generator=gen).to(DEV, dtype)
    k, v = (torch.randn(B, Hkv, Nk, D, generator=gen).to(DEV, dtype) for _ in range(2))
    slopes = _alibi_slopes(B, H, kind, gen)
    bh_slopes = slopes.expand(B, H)  # what the API passes for (H,)
    scale = D ** -0.5
    mask = Mask(left, right)
    cfg = FwdConfig(block_m, block_n, warps, 2, tma=True, warp_spec=ws, gluon=True)
    out = torch.full_like(q, float("nan"))
    lse = torch.full((B, H, Nq), float("nan"), device=DEV)
    prefill_forward(q, k, v, mask=mask, scale=scale, slopes=bh_slopes, config=cfg, out=out, lse=lse)
    assert len(gluon_calls) == 1 and gluon_calls[0]["slopes"] is bh_slopes, "the Gluon forward did not run"
    _ref_check(q, k, v, out, lse, False, scale, window=window, alibi_slopes=slopes)
    tri, tri_lse = prefill_forward(q, k, v, mask=mask, scale=scale, slopes=bh_slopes, config=FwdConfig(64, 64, 4, 3))
    assert len(gluon_calls) == 1  # the Triton configuration ran the Triton kernel
    assert (out.float() - tri.float()).abs().max().item() < 2e-2
    torch.testing.assert_close(lse, tri_lse, atol=1e-3, rtol=0)
    if kind == "H":
        out1, lse1 = torch.full_like(q, float("nan")), torch.full_like(lse, float("nan"))
        G.gluon_forward(q, k, v, out1, lse1, causal_off=Nk - Nq + right if right >= 0 else None, scale=scale,
                        block_m=block_m, block_n=block_n, stages=2, num_warps=warps, warp_spec=ws,
                        win_off=Nk - Nq - left if left >= 0 else None, slopes=slopes)
        assert torch.equal(out1, out) and torch.equal(lse1, lse)


@pytest.mark.gpu
@pytest.mark.skipif(not (HOPPER and G.HAVE_GLUON), reason="needs a Hopper GPU and Gluon")
@pytest.mark.parametrize("kind", ["H", "BH"])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("D", [64, 128])
def test_gpu_alibi_through_flash_attention_takes_the_gluon_kernel(D, causal, kind, gluon_calls):
    """attnlab.flash_attention with alibi_slopes on a long call (the table's Gluon entry, ≥ 2048 keys)
    runs the Gluon forward, with two consumer warp groups (``gluon_alibi_config``), and matches the
    float64 reference."""
    import attnlab

    B, H, Hkv, Nq, Nk = 2, 4, 2, 2100, 2100 if causal else 2300
    gen = torch.Generator().manual_seed(D + 2 * causal)
    q = torch.randn(B, H, Nq, D, generator=gen).to(DEV, torch.bfloat16)
    k, v = (torch.randn(B, Hkv, Nk, D, generator=gen).to(DEV, torch.bfloat16) for _ in range(2))
    slopes = _alibi_slopes(B, H, kind, gen)
    out, lse = attnlab.flash_attention(q, k, v, causal=causal, alibi_slopes=slopes, return_lse=True)
    assert len(gluon_calls) == 1, "the Gluon forward did not run"
    assert gluon_calls[0]["warp_spec"] and gluon_calls[0]["block_m"] == 128 and gluon_calls[0]["slopes"] is not None
    _ref_check(q, k, v, out, lse, causal, D ** -0.5, alibi_slopes=slopes)


# -- packed batches (cu_seqlens) on the warp-specialised grid kernel -----------------------------------

@needs_gluon
def test_packed_builds_for_sm90_with_the_dense_schedule_and_no_spill():
    """The packed-batch builds (D 64 and 128, causal or not, grid and persistent): the dense warp-specialised
    build's schedule (the one-group wait, as many wgmmas, the same setmaxnreg, shared memory within 0.5 KB),
    global loads for the cumulative lengths (the grid kernel's four: a sequence's bounds in q and in k; the
    persistent kernel's in the loader and each consumer), the shared stores that set a last block's rows of V past
    the sequence to 0, and, with triton 3.6 (the device's), no spill. ALiBi and a build without warp specialisation
    are refused."""
    cases = [dict(D=D, causal=c, num_warps=4, warp_spec=True, dtype="bfloat16", persistent=pers) for D in (64, 128)
             for c in (False, True) for pers in (False, True)]
    reps = sm90_reports("prefill_gluon", [dict(c) for c in cases] + [dict(c, packed=True) for c in cases])
    for case, plain, rep in zip(cases, reps[:len(cases)], reps[len(cases):]):
        for key in ("wait_groups", "wgmma", "setmaxnreg"):
            assert rep[key] == plain[key], (case, key, plain, rep)
        assert 1 in rep["wait_groups"], (case, rep)
        assert rep["global_loads"] >= plain["global_loads"] + 4, (case, plain, rep)
        assert rep["smem_kb"] == pytest.approx(plain["smem_kb"], abs=0.5), (case, plain, rep)
        # _zero_past: each of the two consumer warp groups writes a last block's 128 rows of V, 16 at a time, in
        # 16-byte stores (2 per thread and slice at D = 128, 1 at D = 64) the dense build has not
        v4 = rep["shared_stores"].get("v4.b32", 0) - plain["shared_stores"].get("v4.b32", 0)
        assert v4 >= 2 * (128 // 16) * (case["D"] // 64), (case, plain, rep)
        if rep.get("stack") is not None:
            import triton
            spill_free = not case["persistent"] or triton.__version__.startswith("3.6")  # (3.9: 80 bytes at D = 128)
            assert rep["regs"] <= 255 and (rep["stack"] == 0 or not spill_free), (case, rep)
    for bad in (dict(warp_spec=True, num_warps=4, alibi=True), dict(num_warps=8)):
        with pytest.raises(ValueError, match="packed"):
            G.compile_sm90(64, causal=True, packed=True, **bad)


def _packed(lens_q, lens_k, H, Hkv, D, dtype, gen, extra_q=0, extra_k=0, device=DEV):
    """Random packed q (total_q, H, D), k, v (total_k, Hkv, D) and int32 cumulative lengths on ``device`` (``gen``
    one of its generators); ``extra_*`` rows past the last sequence (rows no sequence owns)."""
    q = torch.randn(sum(lens_q) + extra_q, H, D, dtype=dtype, device=device, generator=gen)
    k, v = (torch.randn(sum(lens_k) + extra_k, Hkv, D, dtype=dtype, device=device, generator=gen) for _ in range(2))
    cu = [torch.tensor([0] + torch.tensor(lens).cumsum(0).tolist(), dtype=torch.int32, device=device)
          for lens in (lens_q, lens_k)]
    return q, k, v, cu


def test_packed_calls_reach_the_gluon_forward_without_softcap_or_alibi(monkeypatch):
    """The dispatch, seen on the CPU by standing in for the Gluon kernel: with ``PACKED`` on, a plain packed batch (causal, windowed or not) at D = 128 goes to ``gluon_forward`` with its lengths, the mask's edges as
    one sequence's offsets (each adds its own Nk − Nq in the kernel) and the table's entry, the persistent build with
    two consumer warp groups taking its tiles from a counter; D = 64 (no entry: its Gluon builds ran behind the
    Triton kernel), softcap, ALiBi, another head dim and ``PACKED`` off go to the Triton kernel. ``PACKED`` is on."""
    from attnlab.gpu import prefill_fwd as F

    calls, launches = [], []
    monkeypatch.setattr(G, "gluon_supported", lambda *a: True)
    monkeypatch.setattr(G, "gluon_forward", lambda *a, **kw: calls.append(kw))
    monkeypatch.setattr(F, "launch_kept", lambda kernel, grid, kwargs, **options: launches.append(kwargs))
    assert G.PACKED
    gen = torch.Generator().manual_seed(0)
    q, k, v, cu = _packed([5, 0, 40], [9, 3, 30], 4, 2, 128, torch.bfloat16, gen, device="cpu")
    for mask, want in ((Mask(-1, 0), (0, None)), (Mask(-1, -1), (None, None)), (Mask(20, 3), (3, -20))):
        calls.clear()
        prefill_forward(q, k, v, mask=mask, scale=0.1, cu_seqlens=cu, max_seqlen=(40, 30))
        assert len(calls) == 1 and (calls[0]["causal_off"], calls[0]["win_off"]) == want, mask
        kw = calls[0]
        assert kw["cu_seqlens"][0] is cu[0] and kw["cu_seqlens"][1] is cu[1] and kw["max_seqlen_q"] == 40
        assert kw["warp_spec"] and (kw["block_m"], kw["block_n"], kw["num_warps"]) == (128, 128, 4)
        assert kw["persistent"] and kw["dynamic"]
    calls.clear()
    for extra in (dict(softcap=5.0), dict(slopes=torch.rand(3, 4))):
        prefill_forward(q, k, v, mask=Mask(-1, 0), scale=0.1, cu_seqlens=cu, max_seqlen=(40, 30), **extra)
    for D in (32, 64):
        qd, kd, vd, cud = _packed([5, 0, 40], [9, 3, 30], 4, 2, D, torch.bfloat16, gen, device="cpu")
        prefill_forward(qd, kd, vd, mask=Mask(-1, 0), scale=0.1, cu_seqlens=cud, max_seqlen=(40, 30))
    monkeypatch.setattr(G, "PACKED", False)
    prefill_forward(q, k, v, mask=Mask(-1, 0), scale=0.1, cu_seqlens=cu, max_seqlen=(40, 30))
    assert calls == [] and len(launches) == 5 and all(kw["VARLEN"] for kw in launches)


PACKED_CASES = [
    # lens_q, lens_k, H, Hkv, D, (left, right), dtype
    ([1, 0, 64, 65, 127, 128, 129, 300], [1, 5, 64, 65, 127, 128, 129, 300], 4, 4, 64, (-1, 0), torch.bfloat16),
    ([700, 33, 0, 1000, 257], [900, 33, 7, 1000, 100], 8, 2, 128, (-1, 0), torch.bfloat16),  # Nq ≠ Nk: empty rows
    ([700, 33, 0, 1000, 257], [900, 33, 7, 1000, 100], 6, 1, 64, (-1, -1), torch.float16),  # MQA, no mask
    ([1792, 256, 1000, 513, 1100], [1792, 256, 1000, 513, 1100], 5, 5, 128, (200, 0), torch.bfloat16),  # window
    ([300, 1500, 2], [300, 1700, 2], 4, 2, 64, (100, 50), torch.float16),  # a window reaching right
    ([2048, 1, 191, 2047], [2048, 1, 191, 2047], 16, 4, 128, (-1, -1), torch.bfloat16),
]


PACKED_TILES = [  # block_m, block_n, stages, persistent
    (128, 128, 2, False), (128, 128, 2, True), (128, 64, 3, True), (192, 64, 2, False), (192, 64, 2, True)]


@pytest.mark.gpu
@pytest.mark.skipif(not (HOPPER and G.HAVE_GLUON), reason="needs a Hopper GPU and Gluon")
@pytest.mark.parametrize("block_m,block_n,stages,persistent", PACKED_TILES)
@pytest.mark.parametrize("lens_q,lens_k,H,Hkv,D,window,dtype", PACKED_CASES)
def test_gpu_packed_gluon_matches_reference_and_the_dense_kernel(lens_q, lens_k, H, Hkv, D, window, dtype, block_m,
                                                                 block_n, stages, persistent, monkeypatch):
    """A packed batch on the Gluon forward, grid or persistent (outputs poisoned with NaN, rows past the last
    sequence included): within the criterion against the per-sequence oracle, empty rows out 0 and lse −inf, rows
    no sequence owns left as they were, and each sequence equal to the bit to the dense grid kernel of the same
    tiles (no part block first) run on that sequence alone; the public entry point with the same tiles gives the
    same bits."""
    from attnlab import flash_attention_varlen
    from attnlab.gpu import config as C

    gen = torch.Generator(device=DEV).manual_seed(sum(lens_q) + H)
    q, k, v, cu = _packed(lens_q, lens_k, H, Hkv, D, dtype, gen, extra_q=70, extra_k=30)
    left, right = window
    mask, scale, nan = Mask(left, right), D ** -0.5, float("nan")
    out, lse = torch.full_like(q, nan), torch.full((H, q.shape[0]), nan, device=DEV)
    G.gluon_forward(q, k, v, out, lse, causal_off=right if right >= 0 else None, scale=scale, block_m=block_m,
                    block_n=block_n, stages=stages, num_warps=4, warp_spec=True,
                    win_off=-left if left >= 0 else None, cu_seqlens=cu, max_seqlen_q=max(lens_q),
                    persistent=persistent)
    n = sum(lens_q)
    assert out[n:].isnan().all() and lse[:, n:].isnan().all(), "rows no sequence owns were written"
    out, lse = out[:n], lse[:, :n]
    qs, ks, vs = q[:n], k[:sum(lens_k)], v[:sum(lens_k)]
    check_packed_forward(qs, ks, vs, out, lse, cu, causal=right == 0, scale=scale,
                         window=window if left >= 0 or right > 0 else None)
    for s, q0, q1, k0, k1 in packed_sequences(cu):
        qd, kd, vd = (t.transpose(0, 1).unsqueeze(0).contiguous() for t in (q[q0:q1], k[k0:k1], v[k0:k1]))
        od, ld = torch.empty_like(qd), torch.empty(1, H, q1 - q0, device=DEV)
        off = (k1 - k0) - (q1 - q0)
        G.gluon_forward(qd, kd, vd, od, ld, causal_off=off + right if right >= 0 else None, scale=scale,
                        block_m=block_m, block_n=block_n, stages=stages, num_warps=4, warp_spec=True,
                        win_off=off - left if left >= 0 else None)
        assert torch.equal(od[0].transpose(0, 1), out[q0:q1]) and torch.equal(ld[0], lse[:, q0:q1]), s
    monkeypatch.setattr(G, "PACKED", True)
    monkeypatch.setitem(C._GLUON_PACKED_FWD, D, FwdConfig(block_m, block_n, 4, stages, tma=True, warp_spec=True,
                                                          gluon=True, persistent=persistent))
    got = [prefill_forward(qs, ks, vs, mask=mask, scale=scale, cu_seqlens=cu, max_seqlen=(max(lens_q), max(lens_k)))]
    if left < 0 and right <= 0:
        got.append(flash_attention_varlen(qs, ks, vs, *cu, causal=right == 0, scale=scale, return_lse=True))
    for o, lse_got in got:
        assert torch.equal(o, out) and torch.equal(lse_got, lse)


@pytest.mark.gpu
@pytest.mark.skipif(not (HOPPER and G.HAVE_GLUON), reason="needs a Hopper GPU and Gluon")
@pytest.mark.parametrize("D", [64, 128])
@pytest.mark.parametrize("persistent,dynamic", [(False, False), (True, False), (True, True)])
@pytest.mark.parametrize("causal", [True, False])
def test_gpu_packed_gluon_reads_no_value_of_the_next_sequence(D, persistent, dynamic, causal):
    """A NaN in the first row of V of one sequence and an infinity in another's reach those sequences' outputs only.
    The sequences before them, whose last key blocks the packed build loads whole (37 and 130 keys: their blocks
    reach 91 and 126 rows into the next sequence), give the same bits as with finite values there: their keys past
    their ends are set to 0 in shared memory before P·V."""
    lens = [37, 200, 130, 64]
    gen = torch.Generator(device=DEV).manual_seed(D + 2 * persistent + dynamic)
    q, k, v, cu = _packed(lens, lens, 4, 2, D, torch.bfloat16, gen)
    bounds = cu[1].tolist()
    poisoned = v.clone()
    poisoned[bounds[1]] = float("nan")  # sequence 1's first row
    poisoned[bounds[3]] = float("inf")  # sequence 3's first row
    outs = []
    for vals in (v, poisoned):
        out, lse = torch.empty_like(q), torch.empty(4, q.shape[0], device=DEV)
        G.gluon_forward(q, k, vals, out, lse, causal_off=0 if causal else None, scale=D ** -0.5, block_m=128,
                        block_n=128, stages=2, num_warps=4, warp_spec=True, cu_seqlens=cu, max_seqlen_q=max(lens),
                        persistent=persistent, dynamic=dynamic)
        outs.append((out, lse))
    (out, lse), (out_p, lse_p) = outs
    assert out.isfinite().all()
    for s in (0, 2):  # the sequences just before the poisoned ones
        rows = slice(bounds[s], bounds[s + 1])
        assert torch.equal(out_p[rows], out[rows]) and torch.equal(lse_p[:, rows], lse[:, rows]), s
    for s in (1, 3):  # every row of a poisoned sequence sees its first key, causal or not
        assert not out_p[bounds[s]:bounds[s + 1]].isfinite().all(), s


@pytest.mark.gpu
@pytest.mark.skipif(not (HOPPER and G.HAVE_GLUON), reason="needs a Hopper GPU and Gluon")
@pytest.mark.parametrize("D, zero_past", [
    *(pytest.param(D, False, marks=pytest.mark.xfail(
        strict=True, raises=AssertionError, reason="without ZERO_PAST the Gluon backward's packed build multiplies "
        "the next sequence's rows by 0")) for D in (64, 128)),
    (64, True), (128, True)])
def test_gpu_packed_backward_reads_no_value_of_the_next_sequence(D, zero_past, monkeypatch):
    """The forward test above through the public entry point and autograd: a NaN in the first rows of q, k, v and
    dO of one sequence and an infinity in another's leave the gradients of the sequences before them as they were
    (dK and dV bit for bit). These calls run the Gluon backward's packed build (at D = 64 too since its short causal
    entry moved there): with ``prefill_gluon_bwd.ZERO_PAST`` on they pass; off (the default: it costs the packed
    backward time), they fail, as an H200 showed: 0 · NaN in dV += Pᵀ·dO, dK += dSᵀ·Q and dQ += dS·K at a
    sequence's last blocks."""
    from attnlab import flash_attention_varlen
    from attnlab.gpu import prefill_gluon_bwd as GB

    monkeypatch.setattr(GB, "ZERO_PAST", zero_past)

    lens = [37, 200, 130, 64]
    gen = torch.Generator(device=DEV).manual_seed(D)
    q, k, v, cu = _packed(lens, lens, 4, 2, D, torch.bfloat16, gen)
    do = torch.randn(q.shape, dtype=q.dtype, device=DEV, generator=gen)
    bounds = cu[0].tolist()

    def grads(*tensors):
        q, k, v, do = (t.detach().clone() for t in tensors)
        q, k, v = (t.requires_grad_() for t in (q, k, v))
        out = flash_attention_varlen(q, k, v, *cu, max_seqlen_q=max(lens), max_seqlen_k=max(lens), causal=True)
        return torch.autograd.grad(out, (q, k, v), do)

    from attnlab.gpu import prefill_bwd

    ran, real = [], GB.gluon_backward
    monkeypatch.setattr(prefill_bwd, "_CALL_PLANS", {})  # (no plan kept by another test: every call takes its route)
    monkeypatch.setattr(GB, "gluon_backward", lambda *a, **kw: ran.append(1) or real(*a, **kw))
    clean = grads(q, k, v, do)
    assert ran  # the route the docstring names
    poisoned = [t.clone() for t in (q, k, v, do)]
    for t in poisoned:
        t[bounds[1]] = float("nan")
        t[bounds[3]] = float("inf")
    got = grads(*poisoned)
    assert all(g.isfinite().all() for g in clean)
    for s in (0, 2):  # the sequences just before the poisoned ones (same lengths for queries and keys)
        rows = slice(bounds[s], bounds[s + 1])
        assert torch.equal(got[1][rows], clean[1][rows]) and torch.equal(got[2][rows], clean[2][rows]), s
        # dQ: its additions land in any order on this build, so equal up to rounding (and a NaN is never close)
        torch.testing.assert_close(got[0][rows], clean[0][rows])


@pytest.mark.gpu
@pytest.mark.skipif(not (HOPPER and G.HAVE_GLUON), reason="needs a Hopper GPU and Gluon")
def test_gpu_packed_gluon_with_int64_lengths_and_an_upper_bound_max_seqlen(monkeypatch):
    """int64 cumulative lengths and a max_seqlen above the longest sequence (the extra programs return at once):
    the same bits as int32 lengths with the exact bound."""
    monkeypatch.setattr(G, "PACKED", True)
    gen = torch.Generator(device=DEV).manual_seed(5)
    q, k, v, cu = _packed([100, 1000, 3], [100, 1200, 3], 4, 2, 128, torch.bfloat16, gen)
    want = prefill_forward(q, k, v, mask=Mask(-1, 0), scale=0.1, cu_seqlens=cu, max_seqlen=(1000, 1200))
    got = prefill_forward(q, k, v, mask=Mask(-1, 0), scale=0.1, cu_seqlens=tuple(c.long() for c in cu),
                          max_seqlen=(1700, 1900))
    assert torch.equal(want[0], got[0]) and torch.equal(want[1], got[1])


# -- the exponentials split between the exponentials' unit and a polynomial on the FMA pipe (EXP_POLY) ----------


def test_exp2_polynomial_is_within_its_bound_and_exact_where_it_must_be():
    """``exp2_poly_reference`` (the inline assembly's polynomial path, bit for bit): within 8.6e-5 relative of 2^x on
    [−126, 0] (the module's stated bound; bfloat16's P̃ rounds at 2^-9), exactly 2^x at the integers, 0 at and below
    −127 and at −∞, and its constants are ``EXP2_POLY`` as float32 bit patterns in the PTX."""
    import struct

    x = torch.cat([torch.linspace(-126.0, 0.0, 1_000_001), -126.0 * torch.rand(100_000, generator=torch.Generator()
                                                                                .manual_seed(0))])
    y = G.exp2_poly_reference(x)
    rel = (y.double() / torch.exp2(x.double()) - 1).abs().max().item()
    assert 1e-6 < rel <= 8.6e-5, rel  # (a polynomial, not ex2: it errs, and by no more than stated)
    ints = torch.arange(-126, 1, dtype=torch.float32)
    assert torch.equal(G.exp2_poly_reference(ints), torch.exp2(ints))
    assert (G.exp2_poly_reference(torch.tensor([-127.0, -127.5, -300.0, float("-inf")])) == 0).all()
    for c, hexed in zip(G.EXP2_POLY, G._EXP2_POLY_HEX):
        assert hexed == f"0f{struct.unpack('<I', struct.pack('<f', c))[0]:08X}"
    x1 = -(2 ** -20)  # f → 1 from below: the cubic near 2, within its bound of the next power
    assert abs(G.exp2_poly_reference(torch.tensor([x1])).item() / 2 ** x1 - 1) <= 8.6e-5


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_exp2_poly_asm_takes_n_of_8_exponentials_off_the_unit(n):
    """The inline assembly of ``_exp2_mixed``: 8 − n ``ex2.approx`` and n polynomial paths (each one clamp, one
    rounding add, three FMAs and the exponent's integer multiply-add), every output written once, every input read."""
    import re

    asm = G.exp2_poly_asm(n)
    assert len(re.findall(r"ex2\.approx\.ftz\.f32", asm)) == 8 - n  # (as gl.exp2: no denormal fix-up)
    assert len(re.findall(r"mad\.lo\.u32 pb, tb, 8388608, pb;", asm)) == n
    assert len(re.findall(r"fma\.rn\.f32", asm)) == 3 * n and len(re.findall(r"add\.rm\.f32", asm)) == n
    outs = re.findall(r"(?:ex2\.approx\.ftz\.f32|mov\.b32) \$(\d+),", asm)
    assert sorted(int(o) for o in outs) == list(range(8))
    assert sorted(int(i) for i in re.findall(r"\$(\d+)", asm) if int(i) >= 8) == list(range(8, 16))
    assert asm.count("{") == asm.count("}")


@pytest.mark.parametrize("bad", [0, 5, -1])
def test_exp2_poly_asm_refuses_a_split_outside_1_to_4(bad):
    with pytest.raises(ValueError, match="1 to 4"):
        G.exp2_poly_asm(bad)


@pytest.mark.parametrize("bad", [5, -1, 2.0, True, "2"])
def test_the_gluon_forward_refuses_a_bad_split_before_any_work(bad):
    q = torch.zeros(1, 1, 64, 64)
    out = q.clone()
    with pytest.raises(ValueError, match="exp_poly must be 0 to 4"):
        G.gluon_forward(q, q, q, out, torch.zeros(1, 1, 64), causal_off=None, scale=0.1, block_m=128, block_n=128,
                        stages=2, num_warps=4, warp_spec=True, exp_poly=bad)
    assert (out == 0).all()


@needs_gluon
def test_exp_poly_builds_for_sm90_keep_the_schedule_and_move_exponentials_to_the_fma_pipe():
    """The sm_90 builds with ``exp_poly`` n (D = 64 and 128; the grid kernel at 128 and 192 rows, the persistent and
    dynamic builds, a packed one): the same waits, products, loads, registers given and taken and shared memory as
    with 0, and of the unmasked key blocks' exponentials (two ``_softmax`` sites per consumer warp group, 64·BLOCK_N/128
    per thread each) n of every 8 moved to the polynomial: ``ex2.approx`` fewer by exactly the count of polynomial
    paths. Spills depend on the ptxas: with triton 3.6's (the GPU's) none at 128 rows and 8 bytes for the 192-row
    build's consumers (160 registers each); 3.9's spills more (192 bytes there, 40 in the D = 128 persistent build),
    so the 128-row builds are held to none under 3.6 only. Builds with 0 have no polynomial path."""
    import triton

    base = [dict(D=64, causal=True, block_m=192, num_warps=4, warp_spec=True, dtype="bfloat16"),
            dict(D=64, causal=True, num_warps=4, warp_spec=True, persistent=True, dynamic=True, dtype="bfloat16"),
            dict(D=128, causal=False, num_warps=4, warp_spec=True, persistent=True, dtype="bfloat16"),
            dict(D=128, causal=True, num_warps=4, warp_spec=True, packed=True, dtype="bfloat16"),
            dict(D=64, causal=True, num_warps=4, warp_spec=True, block_n=64, dtype="bfloat16")]
    splits = [2, 3, 1, 4, 2]
    reps = sm90_reports("prefill_gluon", [dict(c) for c in base] + [dict(c, exp_poly=n) for c, n in zip(base, splits)])
    for case, n, plain, rep in zip(base, splits, reps[:len(base)], reps[len(base):]):
        assert plain["poly_exponentials"] == 0, (case, plain)
        for key in ("wait_groups", "wgmma", "tma_loads", "setmaxnreg", "smem_kb", "atomics", "global_loads"):
            assert rep[key] == plain[key], (case, key, plain, rep)
        consumers = case.get("block_m", 128) // 64
        per_thread = 64 * case.get("block_n", 128) // 128
        moved = consumers * 2 * per_thread * n // 8
        assert rep["poly_exponentials"] == moved, (case, n, rep)
        assert plain["exponentials"] - rep["exponentials"] == moved, (case, n, plain, rep)
        if rep.get("stack") is not None and consumers == 2 and triton.__version__.startswith("3.6."):
            assert rep["stack"] == 0, (case, rep)


if G.HAVE_GLUON:
    @G.gluon.jit
    def _exp2_mixed_probe(X, Y, N_POLY: G.gl.constexpr):
        lay: G.gl.constexpr = G.gl.BlockedLayout([8], [32], [4], [0])  # 8 consecutive elements per thread
        offs = G.gl.program_id(0) * 1024 + G.gl.arange(0, 1024, layout=lay)
        G.gl.store(Y + offs, G._exp2_mixed(G.gl.load(X + offs), N_POLY))


@pytest.mark.gpu
@pytest.mark.skipif(not (HOPPER and G.HAVE_GLUON), reason="needs a Hopper GPU and Gluon")
@pytest.mark.parametrize("n", [0, 1, 2, 3, 4])
def test_gpu_exp2_mixed_is_the_polynomial_bit_for_bit_in_its_slots_and_ex2_elsewhere(n):
    """``_exp2_mixed`` on the GPU, 8 consecutive elements per thread: in the pack's polynomial slots the outputs are
    ``exp2_poly_reference``'s bits (the CPU model is the kernel's arithmetic), elsewhere ``gl.exp2``'s (the
    exponentials' unit, 2 ulp of 2^x); with n = 0 every output is ``gl.exp2``'s."""
    gen = torch.Generator(device=DEV).manual_seed(n)
    x = -40.0 * torch.rand(64 * 1024, device=DEV, generator=gen)
    x[:8] = torch.tensor([0.0, -1.0, -126.5, -127.0, -130.0, -0.5, -2.25, -3e-8], device=DEV)
    y, y0 = torch.empty_like(x), torch.empty_like(x)
    _exp2_mixed_probe[(64,)](x, y, n, num_warps=4)
    _exp2_mixed_probe[(64,)](x, y0, 0, num_warps=4)
    slot = torch.arange(x.numel(), device=DEV) % 8
    poly = torch.zeros_like(slot, dtype=torch.bool)
    for s in G._EXP2_POLY_SLOTS.get(n, ()):
        poly |= slot == s
    want = G.exp2_poly_reference(x.cpu()).to(DEV)
    assert torch.equal(y[poly].view(torch.int32), want[poly].view(torch.int32))
    assert torch.equal(y[~poly], y0[~poly])
    torch.testing.assert_close(y0.double(), torch.exp2(x.double()), rtol=4e-7, atol=1e-38)


EXP_POLY_CASES = [
    # B, H, Hkv, Nq, Nk, D, (left, right)  (right −1: no causal edge)
    (2, 4, 4, 1000, 1000, 64, (-1, 0)),  # causal, ragged
    (1, 8, 2, 257, 1030, 128, (-1, 0)),  # GQA, Nq < Nk
    (1, 4, 2, 3000, 4099, 128, (-1, -1)),  # no mask: every block unmasked but the last
    (2, 4, 4, 700, 1300, 64, (100, 0)),  # a window narrower than a block
    (1, 2, 2, 4096, 4096, 64, (1023, 0)),  # full blocks inside the window
    (1, 6, 1, 700, 300, 64, (-1, 0)),  # MQA, Nq > Nk: empty rows
]


@pytest.mark.gpu
@pytest.mark.skipif(not (HOPPER and G.HAVE_GLUON), reason="needs a Hopper GPU and Gluon")
@pytest.mark.parametrize("exp_poly", [1, 2, 4])
@pytest.mark.parametrize("build", ["grid-128", "grid-192", "persistent", "dynamic"])
@pytest.mark.parametrize("B,H,Hkv,Nq,Nk,D,window", EXP_POLY_CASES)
def test_gpu_exp_poly_forward_matches_reference(B, H, Hkv, Nq, Nk, D, window, build, exp_poly):
    """Every warp-specialised build with n of every 8 exponentials by the polynomial: the float64 criterion of the
    other tests (empty rows out 0, lse −∞), and no further from the build without it than bfloat16's rounding of P̃
    could take it."""
    gen = torch.Generator(device=DEV).manual_seed(Nq + Nk + exp_poly)
    q = torch.randn(B, H, Nq, D, dtype=torch.bfloat16, device=DEV, generator=gen)
    k, v = (torch.randn(B, Hkv, Nk, D, dtype=torch.bfloat16, device=DEV, generator=gen) for _ in range(2))
    scale, (left, right) = D ** -0.5, window
    kw = dict(causal_off=Nk - Nq + right if right >= 0 else None, scale=scale, stages=2, num_warps=4, warp_spec=True,
              win_off=Nk - Nq - left if left >= 0 else None, block_m=192 if build == "grid-192" else 128,
              block_n=128, persistent=build in ("persistent", "dynamic"), dynamic=build == "dynamic")
    outs = []
    for n in (exp_poly, 0):
        out = torch.full_like(q, float("nan"))
        lse = torch.full((B, H, Nq), float("nan"), device=DEV)
        G.gluon_forward(q, k, v, out, lse, exp_poly=n, **kw)
        outs.append((out, lse))
    (out, lse), (out0, lse0) = outs
    _ref_check(q, k, v, out, lse, right == 0, scale, window=window if left >= 0 else None)
    assert (out.float() - out0.float()).abs().max() <= 2 ** -6 * out0.float().abs().max()
    assert torch.equal(torch.isinf(lse), torch.isinf(lse0))


@pytest.mark.gpu
@pytest.mark.skipif(not (HOPPER and G.HAVE_GLUON), reason="needs a Hopper GPU and Gluon")
@pytest.mark.parametrize("persistent", [False, True])
def test_gpu_exp_poly_packed_forward_and_the_switch(persistent, monkeypatch):
    """A packed batch with ``exp_poly`` 3 within the criterion against the per-sequence oracle; and ``EXP_POLY``,
    read at each call: the library's call with the switch set gives the bits of ``gluon_forward`` with that split,
    and with it back at 0 the bits without (no kept plan stands in for another split)."""
    from attnlab import flash_attention_varlen
    from attnlab.gpu import config as C
    from attnlab.reference import attention_ref_varlen

    lens = [700, 33, 1000, 257, 1792]
    gen = torch.Generator(device=DEV).manual_seed(11)
    q, k, v, cu = _packed(lens, lens, 8, 2, 128, torch.bfloat16, gen)
    scale = 128 ** -0.5
    kw = dict(causal_off=0, scale=scale, block_m=128, block_n=128, stages=2, num_warps=4, warp_spec=True,
              cu_seqlens=cu, max_seqlen_q=max(lens), persistent=persistent)
    res = {}
    for n in (3, 0):
        out, lse = torch.empty_like(q), torch.empty(8, q.shape[0], device=DEV)
        G.gluon_forward(q, k, v, out, lse, exp_poly=n, **kw)
        res[n] = out
    o64, _ = attention_ref_varlen(*(t.double() for t in (q, k, v)), *cu, causal=True, scale=scale)
    o_same, _ = attention_ref_varlen(q, k, v, *cu, causal=True, scale=scale)
    assert within_criterion(_err(res[3], o64), _err(o_same, o64), o64, torch.bfloat16)
    monkeypatch.setattr(G, "PACKED", True)
    monkeypatch.setitem(C._GLUON_PACKED_FWD, 128, FwdConfig(128, 128, 4, 2, tma=True, warp_spec=True, gluon=True,
                                                            persistent=persistent))
    for n in (3, 0, 3):
        monkeypatch.setitem(G.EXP_POLY, 128, n)
        got = flash_attention_varlen(q, k, v, *cu, max_seqlen_q=max(lens), max_seqlen_k=max(lens), causal=True,
                                     scale=scale)
        assert torch.equal(got, res[n]), n


ROW_MAX_BUILDS = [  # keyword arguments of compile_sm90 (D, causal and the tiles)
    dict(D=64, causal=True, block_m=192, num_warps=4, warp_spec=True),
    dict(D=128, causal=False, block_n=64, num_warps=4, warp_spec=True, persistent=True, packed=True, dynamic=True),
]


@needs_gluon
def test_the_row_maximum_as_a_tree_is_the_same_instructions_in_a_shorter_chain():
    """``_row_max`` in the sm_90 builds, with ``ROW_MAX_TREE`` each way (the library's build and the other of
    ``benchmarks/row_max.py``): the tree's longest chain of dependent maxima in the PTX is at most 12 (log2(N/8)
    folds, the last 8 columns, the row's running maximum), where ``gl.max(s, 1)`` under triton 3.6 makes one of
    N/4 − 1 and more; and the two builds are the same kernel otherwise: the same maxima, exponentials, products,
    loads and shared memory."""
    import json

    import triton

    code = ("import json, sys; sys.path.insert(0, 'benchmarks'); import row_max; "
            "mods = row_max.build_modules(); out = []\n"
            "for c in json.loads(sys.argv[1]):\n"
            "    D = c.pop('D')\n"
            "    for b in ('tree', 'chain'):\n"
            "        k = mods[b].compile_sm90(D, **c)\n"
            "        r = mods[b].kernel_report(k)\n"
            "        r['maxima'] = k.asm['ptx'].count('max.f32') + k.asm['ptx'].count('max.NaN.f32')\n"
            "        r['shipped'] = mods[b].__name__ == 'attnlab.gpu.prefill_gluon'\n"
            "        out.append(r)\n"
            "print(json.dumps(out))")
    reps = fresh_json(code, json.dumps(ROW_MAX_BUILDS), timeout=600)
    for i, case in enumerate(ROW_MAX_BUILDS):
        tree, chain = reps[2 * i], reps[2 * i + 1]
        assert tree["shipped"] == G.ROW_MAX_TREE and chain["shipped"] != G.ROW_MAX_TREE
        assert tree["max_chain"] <= 12, (case, tree)
        if triton.__version__.startswith("3.6."):
            assert chain["max_chain"] >= case.get("block_n", 128) // 4 - 1, (case, chain)
        assert chain["max_chain"] >= tree["max_chain"], (case, tree, chain)
        for key in ("maxima", "exponentials", "wgmma", "tma_loads", "smem_kb", "shared_stores", "wait_groups"):
            assert tree[key] == chain[key], (case, key, tree[key], chain[key])


SASS_LISTING = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;                                   /* 0x00 */
        /*0010*/                   HGMMA.64x64x16.F32.BF16 R24, gdesc[UR4], RZ, !UPT ;      /* 0x00 */
        /*0020*/                   R2UR UR6, R2 ;                                            /* 0x00 */
        /*0030*/               @P0 LDL R3, [R1+0x8] ;                                        /* 0x00 */
        /*0040*/               @P5 BRA P6, 0x60 ;                                            /* 0x00 */
        /*0050*/                   MUFU.EX2 R4, R4 ;                                         /* 0x00 */
        /*0060*/                   HGMMA.64x64x16.F32.BF16 R24, gdesc[UR8], R24 ;            /* 0x00 */
        /*0070*/               @P0 BRA 0x10 ;                                                /* 0x00 */
        /*0080*/                   SYNCS.PHASECHK.TRANS64.TRYWAIT P0, [UR4], R5 ;            /* 0x00 */
        /*0090*/              @!P0 BRA 0x80 ;                                                /* 0x00 */
        /*00a0*/                   BRA 0x20 ;                                                /* 0x00 */
        /*00b0*/                   EXIT ;                                                    /* 0x00 */
"""


def test_sass_loops_are_the_conditional_back_branches_around_products():
    """``sass_loops`` on a listing: the loop 0x10-0x70 (its masked path's forward branch counted whole) holds two
    products, a spill reload and a move to the uniform datapath; the wait's retry loop (no product) and the jump
    back from code placed out of line (unconditional) are not loops."""
    assert G.sass_loops(SASS_LISTING) == [dict(start=0x10, end=0x70, instructions=7, wgmma=2, local_loads=1,
                                               uniform_moves=1, mufu=1)]
    assert G.sass_loops(SASS_LISTING.replace("HGMMA", "HMMA")) == [] and G.sass_loops("") == []


def _run_builds(mods, q, k, v, kw, lse_shape) -> dict:
    """{build: (out, lse)} of each build module's ``gluon_forward`` with keywords ``kw``, into outputs poisoned
    with NaN first (an element a build leaves unwritten shows)."""
    res = {}
    for b, mod in mods.items():
        out = torch.full_like(q, float("nan"))
        lse = torch.full(lse_shape, float("nan"), device=DEV)
        mod.gluon_forward(q, k, v, out, lse, **kw)
        res[b] = (out, lse)
    return res


def _build_inputs(B, H, Hkv, Nq, Nk, D, window, build, gen, growing=False):
    """bfloat16 q, k, v (dense, or a packed batch of three sequences for ``build`` "packed"), cu_seqlens (None when
    dense), ``gluon_forward``'s keywords for the build ("grid-128", "grid-192", "grid-128x64", "persistent",
    "dynamic", "packed") and the lse's shape. ``growing``: keys scaled by 1 + 6j/N along the sequence, so that rows'
    maxima keep moving after the first block."""
    left, right = window
    kw = dict(causal_off=Nk - Nq + right if right >= 0 else None, scale=D ** -0.5, stages=2, num_warps=4,
              warp_spec=True, win_off=Nk - Nq - left if left >= 0 else None,
              block_m=192 if build == "grid-192" else 128, block_n=64 if build == "grid-128x64" else 128,
              persistent=build in ("persistent", "dynamic"), dynamic=build == "dynamic")
    cu = None
    if build == "packed":
        lens_q = [Nq, max(1, Nq // 3), 129][:B + 1]
        lens_k = [Nk, max(1, Nk // 3), 129][:B + 1]
        q, k, v, cu = _packed(lens_q, lens_k, H, Hkv, D, torch.bfloat16, gen)
        kw |= dict(cu_seqlens=cu, max_seqlen_q=max(lens_q), causal_off=right if right >= 0 else None,
                   win_off=-left if left >= 0 else None, persistent=True, dynamic=True)
        lse_shape = (H, q.shape[0])
    else:
        q = torch.randn(B, H, Nq, D, dtype=torch.bfloat16, device=DEV, generator=gen)
        k, v = (torch.randn(B, Hkv, Nk, D, dtype=torch.bfloat16, device=DEV, generator=gen) for _ in range(2))
        lse_shape = (B, H, Nq)
    if growing:
        n = k.shape[0] if cu is not None else Nk
        grow = 1 + 6 * torch.arange(n, device=DEV) / n
        k = (k.float() * (grow[:, None, None] if cu is not None else grow[:, None])).bfloat16()
    return q, k, v, cu, kw, lse_shape


@pytest.mark.gpu
@pytest.mark.skipif(not (HOPPER and G.HAVE_GLUON), reason="needs a Hopper GPU and Gluon")
@pytest.mark.parametrize("build", ["grid-128", "grid-192", "grid-128x64", "persistent", "dynamic", "packed"])
@pytest.mark.parametrize("B,H,Hkv,Nq,Nk,D,window", EXP_POLY_CASES)
def test_gpu_the_tree_row_maximum_gives_the_chains_bits(B, H, Hkv, Nq, Nk, D, window, build):
    """A maximum is exact in any order: every build with ``_row_max``'s tree gives the same bits, output and lse, as
    with ``gl.max(s, 1)`` (the library's build and the other of ``benchmarks/row_max.py``), on awkward shapes,
    windows and a packed batch; and the float64 criterion of the other tests."""
    from tests.helpers import load_script

    mods = load_script("benchmarks/row_max.py").build_modules()
    gen = torch.Generator(device=DEV).manual_seed(Nq * 7 + Nk)
    scale, (left, right) = D ** -0.5, window
    q, k, v, cu, kw, lse_shape = _build_inputs(B, H, Hkv, Nq, Nk, D, window, build, gen)
    res = _run_builds({b: mods[b] for b in ("tree", "chain")}, q, k, v, kw, lse_shape)
    (out, lse), (out_c, lse_c) = res["tree"], res["chain"]
    assert torch.equal(out, out_c) and torch.equal(lse, lse_c)
    if build != "packed":
        _ref_check(q, k, v, out, lse, right == 0, scale, window=window if left >= 0 else None)


def test_scale_rows_asm_branches_round_the_multiplies():
    """``scale_rows_asm``: one test of the vote's value, a uniform branch, then each output (tied to its accumulator
    input) times its row's alpha, every operand used once; the vote's assembly: both rows' alphas tested against
    exactly 1, one vote across the full warp, −1 out where none moved. A pack below 1 is refused."""
    import re

    for n in (1, 32, 64):
        asm = G.scale_rows_asm(n)
        assert asm.count("bra.uni") == 1 and asm.count("setp") == 1 and f"setp.lt.f32 skip, ${2 * n}," in asm
        muls = re.findall(r"mul\.f32 \$(\d+), \$(\d+), \$(\d+);", asm)
        assert [(int(a), int(b), int(c)) for a, b, c in muls] == [(i, n + i, 2 * n + i) for i in range(n)]
        assert asm.index("bra.uni") < asm.index("mul.f32") and asm.rstrip().endswith("SKIP:\n}")
        cons = G.scale_rows_constraints(n).split(",")
        assert cons == ["=f"] * n + [str(i) for i in range(n)] + ["f"] * n
    with pytest.raises(ValueError, match="at least 1"):
        G.scale_rows_asm(0)
    vote = G.VOTE_ASM
    assert vote.count("vote.sync.any.pred p, p, 0xffffffff") == 1 and "0f3F800000" in vote and "0fBF800000" in vote
    assert "setp.neu.f32 p, $2" in vote and "setp.neu.f32 q, $3" in vote


@needs_gluon
def test_rescale_switch_builds_for_sm90_add_one_vote_and_branch_per_consumer():
    """The builds with ``RESCALE_SKIP`` (and ``RESCALE_TAU``) made as ``benchmarks/fwd_switches.py`` makes them: one
    vote and one branch round O's multiplies per consumer warp group, and the schedule of the build without them (the
    same waits, products, loads and shared memory, no spill); the build without them has no vote, and the library's
    own builds have one where ``RESCALE_SKIP`` is on and the head dim is at least ``RESCALE_FROM_D``, none elsewhere."""

    code = ("import json, sys; sys.path.insert(0, 'benchmarks'); import fwd_switches as fs; out = []\n"
            "for b in ('off', 'skip', 'skip+tau8', 'shipped'):\n"
            "    m = fs.build_module(b)\n"
            "    for D, bm, kw in ((64, 192, {}), (128, 128, {'persistent': True, 'packed': True, 'dynamic': True})):\n"
            "        k = m.compile_sm90(D, causal=True, warp_spec=True, block_m=bm, num_warps=4, **kw)\n"
            "        r = m.kernel_report(k)\n"
            "        r['votes'] = k.asm['ptx'].count('vote.sync.any.pred')\n"
            "        r['build'], r['consumers'] = b, bm // 64\n"
            "        out.append(r)\n"
            "print(json.dumps(out))")
    reps = fresh_json(code)
    off = reps[:2]
    for i, r in enumerate(reps):
        base = off[i % 2]
        D = 64 if i % 2 == 0 else 128
        on = {"off": False, "shipped": G.RESCALE_SKIP and D >= G.RESCALE_FROM_D}.get(r["build"], True)
        assert r["votes"] == (r["consumers"] if on else 0), r
        for key in ("wgmma", "tma_loads", "smem_kb", "wait_groups", "exponentials"):
            assert r[key] == base[key], (key, r, base)
        if r.get("stack") is not None and base.get("stack") == 0:
            assert r["stack"] == 0, r


RESCALE_CASES = EXP_POLY_CASES + [
    (1, 4, 2, 2000, 2000, 128, (-1, -1)),  # scores growing along the keys (see below): maxima move by more than 8
    (2, 2, 2, 1500, 1500, 64, (-1, 0)),
]


@pytest.mark.gpu
@pytest.mark.skipif(not (HOPPER and G.HAVE_GLUON), reason="needs a Hopper GPU and Gluon")
@pytest.mark.parametrize("build", ["grid-128", "grid-192", "grid-128x64", "persistent", "dynamic", "packed"])
@pytest.mark.parametrize("B,H,Hkv,Nq,Nk,D,window", RESCALE_CASES)
def test_gpu_rescale_switches_keep_the_bits_or_the_criterion(B, H, Hkv, Nq, Nk, D, window, build):
    """``RESCALE_SKIP`` (the builds of ``benchmarks/fwd_switches.py``): the bits, output and lse, of the build without
    the switches, on every build and awkward shape (a multiply by exactly 1 skipped changes nothing); with
    ``RESCALE_TAU`` 8 as well, the float64 criterion and the lse within float32 rounding of the build without them.
    The library's own build gives the bits of the build with its switches at the shape's head dim. The last two
    shapes' keys grow along the sequence (k_j · (1 + 6j/Nk)), so rows' maxima move by more than the bound well after
    the first block, and the stale-maximum path rescales."""
    from tests.helpers import load_script

    fs = load_script("benchmarks/fwd_switches.py")
    mods = {b: fs.build_module(b) for b in ("off", "skip", "skip+tau8", "shipped")}
    gen = torch.Generator(device=DEV).manual_seed(Nq * 5 + Nk + D)
    scale, (left, right) = D ** -0.5, window
    growing = (B, H, Hkv, Nq, Nk, D, window) in RESCALE_CASES[-2:]
    q, k, v, cu, kw, lse_shape = _build_inputs(B, H, Hkv, Nq, Nk, D, window, build, gen, growing=growing)
    res = _run_builds(mods, q, k, v, kw, lse_shape)
    assert torch.equal(res["skip"][0], res["off"][0]) and torch.equal(res["skip"][1], res["off"][1])
    on = D >= G.RESCALE_FROM_D
    same = {(False, 0.0): "off", (True, 0.0): "skip", (True, 8.0): "skip+tau8"}[
        (G.RESCALE_SKIP and on, G.RESCALE_TAU if on else 0.0)]
    assert torch.equal(res["shipped"][0], res[same][0]) and torch.equal(res["shipped"][1], res[same][1]), same
    out, lse = res["skip+tau8"]
    lse0 = res["off"][1]
    assert torch.equal(torch.isinf(lse), torch.isinf(lse0))
    fin = torch.isfinite(lse0)
    assert (lse[fin] - lse0[fin]).abs().max() <= 1e-5 * (1 + lse0[fin].abs().max())
    if build != "packed":
        _ref_check(q, k, v, out, lse, right == 0, scale, window=window if left >= 0 else None)
    else:
        check_packed_forward(q, k, v, out, lse, cu, causal=right == 0, scale=scale,
                             window=window if left >= 0 else None)


@needs_gluon
def test_fa4_step_builds_for_sm90_change_only_their_instructions():
    """The builds with FlashAttention-4's step (``PACK_P``, ``MASK_RANGE``, ``PINGPONG``, ``ROW_SUM_LANES``, made as
    ``benchmarks/fwd_switches.py`` makes them): ``pack`` converts P̃ two elements per instruction, ``mask`` tests
    each masked score against its row's range by one unsigned comparison, ``pp`` waits for and hands on the consumer
    groups' turns by named barriers (once before and once after each steady step's products, one first turn),
    ``lanes`` keeps each thread's partial row sums (fewer shuffles; on in the library, ``nolanes`` without it);
    each keeps the schedule of the shipped build (its waits, products, loads and shared memory)."""

    code = ("import json, re, sys; sys.path.insert(0, 'benchmarks'); import fwd_switches as fs; out = []\n"
            "builds = [(b, 64, 192, {})\n"
            "          for b in ('shipped', 'nopack', 'pack', 'mask', 'pp', 'lanes', 'nolanes', 'fa4')]\n"
            "builds += [(b, 128, 128, {'persistent': True}) for b in ('shipped', 'pp')]  # two groups' turns\n"
            "for b, D, bm, kw in builds:\n"
            "        m = fs.build_module(b)\n"
            "        k = m.compile_sm90(D, causal=True, warp_spec=True, block_m=bm, num_warps=4, **kw)\n"
            "        r = m.kernel_report(k)\n"
            "        ptx = k.asm['ptx']\n"
            "        r['bf16x2'] = ptx.count('cvt.rn.bf16x2.f32')\n"
            "        r['ranges'] = ptx.count('setp.lt.u32')\n"
            "        r['syncs'] = len(re.findall(r'bar\\.sync %r\\d+, 256', ptx))\n"
            "        r['arrives'] = len(re.findall(r'bar\\.arrive %r\\d+, 256', ptx))\n"
            "        r['shuffles'] = ptx.count('shfl.sync')\n"
            "        r['build'], r['consumers'] = b, bm // 64\n"
            "        out.append(r)\n"
            "print(json.dumps(out))")
    reps = fresh_json(code, timeout=1200)
    base = {r["consumers"]: r for r in reps if r["build"] == "shipped"}
    assert all(r["syncs"] == r["arrives"] == 0 for r in base.values())
    for r in reps:
        b, n, s = r["build"], r["consumers"], base[r["consumers"]]
        for key in ("wgmma", "tma_loads", "smem_kb", "wait_groups", "exponentials"):
            if key == "wgmma" and b in ("pp", "fa4") and G.OWN_BLOCKS:
                continue  # (their groups walk the whole tile, as the turns need: triton 3.9 writes that walk's
            assert r[key] == s[key], (key, r, s)  # wgmmas 64 times in the PTX, the own blocks' walk 72)
        if G.PACK_P:  # the library's builds convert in pairs: every build but nopack as the shipped one
            assert (r["bf16x2"] < s["bf16x2"]) if b == "nopack" else (r["bf16x2"] == s["bf16x2"]), r
        else:
            assert (r["bf16x2"] > s["bf16x2"]) == (b in ("pack", "fa4")), r
        assert (r["ranges"] > s["ranges"] + 100) == (b in ("mask", "fa4")), r
        turns = b in ("pp", "fa4")
        assert r["syncs"] == (n if turns else 0), r  # each group's wait for its turn
        assert r["arrives"] == (n + 1 if turns else 0), r  # each group's hand-on, and the first turn
        lanes = {"lanes": True, "nolanes": False}.get(b, G.ROW_SUM_LANES)
        if lanes == G.ROW_SUM_LANES:
            assert r["shuffles"] == s["shuffles"], r
        elif lanes:  # the row sums' shuffles leave the steps (at least two per group: first and steady step)
            assert r["shuffles"] <= s["shuffles"] - 2 * n, r
        else:
            assert r["shuffles"] >= s["shuffles"] + 2 * n, r


def test_mask_limits_builds_for_sm90_with_fewer_selects_and_no_spill():
    """The masked step from each row's limits (``MASK_LIMITS`` 2, as ``benchmarks/fwd_switches.py`` builds ``limits``)
    against the three comparisons per score before it (``nolimits``), in the window's build (D = 64, three consumer
    groups) and the persistent D = 128 one: the same products, loads, waits, shared memory and exponentials, no
    more spill, and under half the selects (one per masked score, where there were three)."""
    code = ("import json, re, sys; sys.path.insert(0, 'benchmarks'); import fwd_switches as fs; out = []\n"
            "for b in ('nolimits', 'limits'):\n"
            "    for D, bm, kw in ((64, 192, {}), (128, 128, {'persistent': True})):\n"
            "        m = fs.build_module(b)\n"
            "        k = m.compile_sm90(D, causal=True, warp_spec=True, block_m=bm, num_warps=4, **kw)\n"
            "        r = m.kernel_report(k)\n"
            "        r['selects'] = k.asm['ptx'].count('selp.f32')\n"
            "        r['build'], r['D'] = b, D\n"
            "        out.append(r)\n"
            "print(json.dumps(out))")
    reps = fresh_json(code, timeout=1200)
    base = {r["D"]: r for r in reps if r["build"] == "nolimits"}
    for r in reps:
        if r["build"] != "limits":
            continue
        s = base[r["D"]]
        for key in ("wgmma", "tma_loads", "smem_kb", "wait_groups", "exponentials"):
            assert r[key] == s[key], (key, r, s)
        assert r["stack"] <= s["stack"], (r, s)  # (triton 3.6: none; 3.9's D = 64 build spills either way, less)
        assert r["selects"] < s["selects"] / 2, (r["selects"], s["selects"])


def test_own_blocks_builds_for_sm90_with_the_same_products_and_no_more_spill():
    """``OWN_BLOCKS`` (each consumer group walks only its own key blocks; ``benchmarks/fwd_switches.py`` builds ``own``
    and ``noown``) in the window's build (D = 64, three consumer groups) and the persistent D = 128 one: the same
    loads, waits, shared memory and exponentials, and no more spill. (The count of wgmma instructions in the PTX is
    not compared: triton 3.9 writes the D = 64 build without the switch, the one that spills, with 64 of them and
    triton 3.6 with 72, as both write the build with it.)"""
    code = ("import json, sys; sys.path.insert(0, 'benchmarks'); import fwd_switches as fs; out = []\n"
            "for b in ('noown', 'own'):\n"
            "    for D, bm, kw in ((64, 192, {}), (128, 128, {'persistent': True})):\n"
            "        m = fs.build_module(b)\n"
            "        k = m.compile_sm90(D, causal=True, warp_spec=True, block_m=bm, num_warps=4, **kw)\n"
            "        r = m.kernel_report(k)\n"
            "        r['build'], r['D'] = b, D\n"
            "        out.append(r)\n"
            "print(json.dumps(out))")
    reps = fresh_json(code, timeout=1200)
    base = {r["D"]: r for r in reps if r["build"] == "noown"}
    for r in reps:
        if r["build"] != "own":
            continue
        s = base[r["D"]]
        for key in ("tma_loads", "smem_kb", "wait_groups", "exponentials"):
            assert r[key] == s[key], (key, r, s)
        assert r["stack"] <= s["stack"], (r, s)


OWN_BLOCKS_CASES = [
    # B, H, Hkv, Nq, Nk, D, (left, right), build
    (2, 3, 3, 1000, 1000, 64, (-1, 0), "grid-192"),
    (2, 3, 3, 1000, 1000, 64, (-1, 0), "grid-192-part"),
    (1, 4, 2, 1537, 1537, 64, (300, 0), "grid-192-part"),  # a window: groups pass blocks at both edges
    (1, 2, 2, 4096, 4096, 64, (1023, 0), "grid-192-part"),
    (1, 4, 4, 733, 1029, 128, (-1, 0), "persistent"),  # Nq != Nk, bottom-right causal
    (1, 2, 2, 900, 900, 64, (97, 13), "grid-128"),  # a window with a right edge, not causal
    (1, 6, 1, 700, 300, 64, (-1, 0), "grid-192"),  # MQA, Nq > Nk: empty rows
    (1, 4, 2, 1537, 1537, 64, (300, 0), "dynamic"),
    (2, 4, 2, 1000, 1000, 64, (-1, 0), "packed"),
    (2, 4, 2, 1000, 1000, 128, (200, 0), "packed"),
]


@pytest.mark.gpu
@pytest.mark.skipif(not (HOPPER and G.HAVE_GLUON), reason="needs a Hopper GPU and Gluon")
@pytest.mark.parametrize("B,H,Hkv,Nq,Nk,D,window,build", OWN_BLOCKS_CASES)
def test_gpu_own_blocks_give_the_bits_of_walking_every_block(B, H, Hkv, Nq, Nk, D, window, build):
    """A consumer group passing on the blocks its rows see nothing of (``OWN_BLOCKS``, the library's build) gives the
    bits, output and lse, of every group walking the whole tile (``noown``), on grid, part-block-first, persistent,
    dynamic and packed builds, causal, windows and Nq != Nk; and the float64 criterion. (ALiBi builds walk the whole
    tile either way.)"""
    from tests.helpers import load_script

    fs = load_script("benchmarks/fwd_switches.py")
    mods = {b: fs.build_module(b) for b in ("own", "noown")}
    gen = torch.Generator(device=DEV).manual_seed(Nq * 5 + Nk + D)
    scale, (left, right) = D ** -0.5, window
    base = {"grid-192-part": "grid-192"}.get(build, build)
    q, k, v, cu, kw, lse_shape = _build_inputs(B, H, Hkv, Nq, Nk, D, window, base, gen)
    if build == "grid-192-part":
        kw |= dict(part_first=True, head_chunk=0)
    res = _run_builds(mods, q, k, v, kw, lse_shape)
    (out, lse), (out_n, lse_n) = res["own"], res["noown"]
    assert torch.equal(out, out_n) and torch.equal(lse, lse_n)
    if build == "packed":
        check_packed_forward(q, k, v, out, lse, cu, causal=right == 0, scale=scale,
                             window=window if left >= 0 else None)
    else:
        _ref_check(q, k, v, out, lse, right == 0, scale, window=window if left >= 0 else None)


PERSISTENT_192_CASES = [
    # B, H, Hkv, Nq, Nk, (left, right)  (D = 64: the 192-row tiles' head dim)
    (2, 3, 3, 1000, 1000, (-1, 0)),  # causal, ragged
    (1, 4, 2, 1537, 1537, (300, 0)),  # a window: masked blocks at both edges
    (1, 2, 2, 4096, 4096, (1023, 0)),  # full blocks inside the window
    (2, 4, 4, 700, 1300, (100, 0)),  # a window narrower than a block, Nq < Nk
    (1, 8, 2, 257, 1030, (-1, 0)),  # GQA, Nq < Nk
    (1, 6, 1, 700, 300, (-1, 0)),  # MQA, Nq > Nk: empty rows
    (1, 4, 2, 3000, 4099, (-1, -1)),  # no mask
]


@pytest.mark.gpu
@pytest.mark.skipif(not (HOPPER and G.HAVE_GLUON), reason="needs a Hopper GPU and Gluon")
@pytest.mark.parametrize("order", ["last", "part_first"])
@pytest.mark.parametrize("B,H,Hkv,Nq,Nk,window", PERSISTENT_192_CASES)
def test_gpu_the_persistent_192_row_build_gives_the_grid_kernels_bits(B, H, Hkv, Nq, Nk, window, order):
    """The persistent kernel on 192 × 128 tiles (three consumer groups, the host's schedule) gives the bits, output
    and lse, of the grid kernel on the same tiles, causal, windows, GQA/MQA and Nq != Nk, with the part block last
    or first (the causal entries' order, groups of heads chosen by the library); and the float64 criterion. At
    D = 64 from 8K keys the causal entry is the grid kernel; the persistent one ran 1.014-1.036x faster on the
    window and causal 16K rows (fwd-switches runs 17 and 18)."""
    gen = torch.Generator(device=DEV).manual_seed(Nq * 3 + Nk)
    scale, (left, right) = 64 ** -0.5, window
    q, k, v, _, kw, lse_shape = _build_inputs(B, H, Hkv, Nq, Nk, 64, window, "grid-192", gen)
    if order == "part_first":
        kw |= dict(part_first=True, head_chunk=0)
    res = {}
    for name, extra in (("grid", {}), ("persistent", dict(persistent=True))):
        out = torch.full_like(q, float("nan"))
        lse = torch.full(lse_shape, float("nan"), device=DEV)
        G.gluon_forward(q, k, v, out, lse, **(kw | extra))
        res[name] = (out, lse)
    out, lse = res["grid"]
    assert torch.equal(res["persistent"][0], out) and torch.equal(res["persistent"][1], lse)
    _ref_check(q, k, v, out, lse, right == 0, scale, window=window if left >= 0 else None)


FA4_STEP_CASES = [
    (2, 3, 3, 1000, 1000, 64, (-1, 0)),
    (1, 4, 2, 1537, 1537, 64, (300, 0)),  # windows: both edges' masked blocks
    (1, 4, 4, 733, 1029, 128, (-1, 0)),  # Nq != Nk, bottom-right causal
    (2, 2, 1, 1200, 1200, 128, (-1, -1)),
    (1, 2, 2, 900, 900, 64, (97, 13)),  # a window with a right edge, not causal
]


@pytest.mark.gpu
@pytest.mark.skipif(not (HOPPER and G.HAVE_GLUON), reason="needs a Hopper GPU and Gluon")
@pytest.mark.parametrize("build", ["grid-128", "grid-192", "persistent", "dynamic", "packed"])
@pytest.mark.parametrize("B,H,Hkv,Nq,Nk,D,window", FA4_STEP_CASES)
def test_gpu_fa4_step_switches_keep_the_bits_or_the_criterion(B, H, Hkv, Nq, Nk, D, window, build):
    """``PACK_P`` (on in the library; ``nopack`` without it) and ``PINGPONG`` (the builds of
    ``benchmarks/fwd_switches.py``): the bits, output and lse, of the shipped build on every build and awkward shape; ``MASK_RANGE`` alone and all three together: the float64
    criterion, and the lse within float32 rounding of the shipped build's (a masked block's exponent one fused
    multiply-add where it was a multiply and a subtraction); ``ROW_SUM_LANES`` (on in the library; ``nolanes``
    without it) likewise (the row sums added in another order)."""
    from tests.helpers import load_script

    fs = load_script("benchmarks/fwd_switches.py")
    lanes = "nolanes" if G.ROW_SUM_LANES else "lanes"  # the row sums' other order, whichever the library ships
    mods = {b: fs.build_module(b) for b in ("shipped", "nopack", "pack", "pp", "mask", lanes, "fa4")}
    gen = torch.Generator(device=DEV).manual_seed(Nq * 7 + Nk + D)
    scale, (left, right) = D ** -0.5, window
    q, k, v, cu, kw, lse_shape = _build_inputs(B, H, Hkv, Nq, Nk, D, window, build, gen)
    res = _run_builds(mods, q, k, v, kw, lse_shape)
    for b in ("nopack", "pack", "pp"):
        assert torch.equal(res[b][0], res["shipped"][0]) and torch.equal(res[b][1], res["shipped"][1]), b
    lse0 = res["shipped"][1]
    for b in ("mask", lanes, "fa4"):
        out, lse = res[b]
        assert torch.equal(torch.isinf(lse), torch.isinf(lse0)), b
        fin = torch.isfinite(lse0)
        assert (lse[fin] - lse0[fin]).abs().max() <= 1e-5 * (1 + lse0[fin].abs().max()), b
        if build != "packed":
            _ref_check(q, k, v, out, lse, right == 0, scale, window=window if left >= 0 else None)
        else:
            check_packed_forward(q, k, v, out, lse, cu, causal=right == 0, scale=scale,
                                 window=window if left >= 0 else None)


@needs_gluon
def test_q_regs_builds_for_sm90_take_q_from_registers_with_the_same_loads_and_no_spill_in_the_step():
    """``Q_REGS`` (``benchmarks/fwd_switches.py`` builds ``qregs``: Q·Kᵀ's A operand from registers, from D = 128, and
    ``noqregs``, from shared memory) in the persistent D = 128 builds, causal and not, and the grid build: every Q·Kᵀ
    wgmma of the SASS reads A from registers (``noqregs``: from shared memory), the same TMA loads, shared memory,
    waits and exponentials, and no spill reload in the step's loop (triton 3.6 builds it without a spill; triton 3.9
    spills 24-48 bytes outside the step); the library's build is the one its switch names. The D = 64 builds are the
    same with the switch and without it."""
    code = ("import json, re, sys; sys.path.insert(0, 'benchmarks'); import fwd_switches as fs; out = []\n"
            "for b in ('noqregs', 'qregs', 'shipped'):\n"
            "    m = fs.build_module(b)\n"
            "    for D, bm, causal, kw in ((128, 128, False, {'persistent': True}), (128, 128, True, "
            "{'persistent': True}), (128, 128, False, {}), (64, 192, True, {'persistent': True})):\n"
            "        k = m.compile_sm90(D, causal=causal, warp_spec=True, block_m=bm, num_warps=4, **kw)\n"
            "        r = m.kernel_report(k)\n"
            "        sass = m.cuobjdump(k, '-sass')\n"
            "        h = re.findall(r'HGMMA\\.\\S+ R\\d+, (\\S+)', sass or '')\n"
            "        r.update(build=b, D=D, causal=causal, persistent=bool(kw), hgmma_reg_a=sum(a.startswith('R') for a in h),\n"
            "                 hgmma=len(h), has_sass=bool(sass))\n"
            "        out.append(r)\n"
            "print(json.dumps(out))")
    reps = fresh_json(code, timeout=1200)
    key = lambda r: (r["D"], r["causal"], r["persistent"])  # noqa: E731
    base = {key(r): r for r in reps if r["build"] == "noqregs"}
    ships = {key(r): r for r in reps if r["build"] == "shipped"}
    for r in reps:
        if r["build"] != "qregs":
            continue
        s = base[key(r)]
        on = G.Q_REGS > 0 and r["D"] >= G.Q_REGS  # the library's build is the one its switch names
        assert ships[key(r)]["hgmma_reg_a"] == (r if on else s)["hgmma_reg_a"]
        for k in ("tma_loads", "smem_kb", "wait_groups", "exponentials", "wgmma"):
            assert r[k] == s[k], (k, r, s)
        if not r["has_sass"]:
            continue
        if r["D"] == 64:  # not switched on there: the same build
            assert r["hgmma_reg_a"] == s["hgmma_reg_a"] and r["stack"] == s["stack"]
            continue
        assert r["hgmma"] == s["hgmma"] and r["hgmma"] > 0
        # noqregs: P̃·V's A from registers, Q·Kᵀ's from shared memory; qregs: both from registers
        assert s["hgmma_reg_a"] == r["hgmma"] // 2 and r["hgmma_reg_a"] == r["hgmma"], (r, s)
        step = [lp for lp in r["loops"] if lp["wgmma"] == 16]  # the step's own loop (8 Q·Kᵀ and 8 P̃·V wgmmas)
        assert step and all(lp["local_loads"] == 0 for lp in step), r["loops"]


Q_REGS_CASES = [
    # B, H, Hkv, Nq, Nk, (left, right), build  (D = 128: where the switch applies)
    (2, 3, 3, 1000, 1000, (-1, 0), "grid-128"),
    (1, 4, 2, 3000, 4099, (-1, -1), "persistent"),  # no mask, Nq < Nk, GQA
    (1, 4, 4, 733, 1029, (-1, 0), "persistent"),  # Nq != Nk, bottom-right causal
    (1, 6, 1, 700, 300, (-1, 0), "persistent"),  # MQA, Nq > Nk: empty rows
    (1, 4, 2, 1537, 1537, (300, 0), "dynamic"),  # a window
]


@pytest.mark.gpu
@pytest.mark.skipif(not (HOPPER and G.HAVE_GLUON), reason="needs a Hopper GPU and Gluon")
@pytest.mark.parametrize("B,H,Hkv,Nq,Nk,window,build", Q_REGS_CASES)
def test_gpu_q_regs_give_the_bits_of_q_from_shared_memory(B, H, Hkv, Nq, Nk, window, build):
    """Q·Kᵀ's A operand from registers (``Q_REGS``, the ``qregs`` build) gives the bits, output and lse, of Q from
    shared memory (``noqregs``) at D = 128 on grid, persistent and dynamic builds (packed builds do not take it),
    causal, windows, GQA, MQA and Nq != Nk (a persistent program hands its Q slot back before the tile's first product: the next tile's Q must not reach a
    group still reading this one's); and the float64 criterion."""
    from tests.helpers import load_script

    fs = load_script("benchmarks/fwd_switches.py")
    mods = {b: fs.build_module(b) for b in ("qregs", "noqregs")}
    D = 128
    gen = torch.Generator(device=DEV).manual_seed(Nq * 7 + Nk + H)
    scale, (left, right) = D ** -0.5, window
    q, k, v, cu, kw, lse_shape = _build_inputs(B, H, Hkv, Nq, Nk, D, window, build, gen)
    res = _run_builds(mods, q, k, v, kw, lse_shape)
    (out, lse), (out_s, lse_s) = res["qregs"], res["noqregs"]
    assert torch.equal(out, out_s) and torch.equal(lse, lse_s)
    _ref_check(q, k, v, out, lse, right == 0, scale, window=window if left >= 0 else None)


@pytest.mark.parametrize("version,expect", [("3.6.0", (3, 6)), ("3.10.0+git1234", (3, 10)), ("4.0.0rc1", (4, 0)),
                                            ("3.9", (3, 9))])
def test_triton_version_reads_major_and_minor(version, expect, monkeypatch):
    import triton

    monkeypatch.setattr(triton, "__version__", version)
    assert G.triton_version() == expect
