"""attnlab.cost.grid: a flash kernel's programs on the GPU's SMs, one at a time per SM, longest first — whole waves
and a partial one for equal programs, a list schedule for causal walks — and its place in ``attnlab estimate``."""

from __future__ import annotations

import math

import pytest
from tests.helpers import load_script

from attnlab.cost import estimate
from attnlab.cost import grid as G


@pytest.mark.parametrize("programs_per_head,heads,sms", [(32, 64, 132), (32, 128, 132), (8, 3, 2), (4, 1, 8),
                                                          (128, 16, 132)])
def test_equal_programs_fill_whole_waves_and_a_partial_one(programs_per_head, heads, sms):
    g = G.grid_estimate(pass_="forward", batch=1, heads=heads, seq=128 * programs_per_head, block=128, causal=False,
                        sms=sms)
    P = programs_per_head * heads
    assert g.programs == P and math.isclose(g.waves, P / sms)
    assert math.isclose(g.efficiency, P / sms / math.ceil(P / sms))
    assert g.to_dict()["waves"] == g.waves and g.to_dict()["pass_"] == "forward"


def test_the_tables_non_causal_rows_lose_three_per_cent_to_their_last_wave():
    """The prefill table's non-causal shapes (16K tokens, H·D = 2048, 128-row blocks): 2,048 programs at D = 128 and
    4,096 at D = 64, 15.5 and 31.0 waves on an H200's 132 SMs, both 97.0 % busy."""
    for D, N in ((128, 4096), (128, 16384), (64, 8192)):
        for p in G.PASSES:
            g = G.grid_estimate(pass_=p, batch=16384 // N, heads=2048 // D, seq=N, block=128, causal=False, sms=132)
            assert g.programs == 16384 * (2048 // D) // 128
            assert f"{100 * g.efficiency:.1f}" == "97.0"


def test_causal_walks_by_hand():
    # one head, 4 query blocks of work 1, 2, 3, 4 on 2 SMs: 4 | 3, then 2 on the second, 1 on the first: 5 and 5
    assert G.program_work(pass_="forward", seq=512, block=128, causal=True) == [1, 2, 3, 4]
    assert G.grid_estimate(pass_="forward", batch=1, heads=1, seq=512, block=128, causal=True, sms=2).efficiency == 1.0
    # 3 programs of work 3, 2, 1 (the backward: key block j seen from query block j on) on 2 SMs: 3 | 2 + 1
    assert G.program_work(pass_="backward", seq=384, block=128, causal=True) == [3, 2, 1]
    # with 2 query heads a K/V head, every walk twice as long; a partial last block counts as one
    assert G.program_work(pass_="backward", seq=300, block=128, causal=True, group=2) == [6, 4, 2]
    # 5 programs of 5, 4, 3, 2, 1 on 3 SMs: 5 | 4 | 3, then 2 and 1 on the 3 and 4: 5, 5, 5
    g = G.grid_estimate(pass_="backward", batch=1, heads=1, seq=640, block=128, causal=True, sms=3)
    assert g.efficiency == 1.0
    # 3 programs of 3, 2, 1 on 3 SMs: 3 | 2 | 1: 6 of 9
    g = G.grid_estimate(pass_="backward", batch=1, heads=1, seq=384, block=128, causal=True, sms=3)
    assert g.efficiency == pytest.approx(6 / 9)


def test_causal_backward_matches_the_benchmarks_list_schedule():
    """The backward's causal grid is det_order_sim's chunked numbering with every head in one chunk (each key block
    for every head, longest first): the same makespan."""
    sim = load_script("benchmarks/det_order_sim.py")
    for name, heads, n in sim.CHUNK_SHAPES:
        g = G.grid_estimate(pass_="backward", batch=1, heads=heads, seq=n, block=128, causal=True, sms=132)
        assert 1 / g.efficiency == pytest.approx(sim.chunk_makespan(heads, n, heads)), name


@pytest.mark.parametrize("batch,heads,seq", [(2, 8, 4096), (8, 32, 16384)])
def test_past_the_schedule_limit_a_lower_bound(monkeypatch, batch, heads, seq):
    """Graham's bound (no SM ends more than the longest program after the average): below the exact schedule's
    efficiency, and close to it where the programs far outnumber the SMs."""
    args = dict(pass_="backward", batch=batch, heads=heads, seq=seq, block=128, causal=True, sms=132)
    exact = G.grid_estimate(**args)
    monkeypatch.setattr(G, "SCHEDULE_LIMIT", 10)
    bound = G.grid_estimate(**args)
    assert bound.efficiency <= exact.efficiency
    if exact.programs > 100 * 132:
        assert bound.efficiency > 0.99


@pytest.mark.parametrize("kw, match", [
    (dict(pass_="sideways"), "pass_ must be one of"),
    (dict(seq=0), "seq"),
    (dict(block=-1), "block"),
    (dict(sms=0), "sms"),
    (dict(batch=0), "batch"),
    (dict(heads=6, kv_heads=4), "multiple"),
])
def test_bad_input_is_refused(kw, match):
    args = dict(pass_="forward", batch=1, heads=8, seq=1024, block=128, causal=True, sms=132) | kw
    with pytest.raises(ValueError, match=match):
        G.grid_estimate(**args)
    with pytest.raises(TypeError, match="causal must be True or False"):
        G.grid_estimate(**(args | dict(pass_="forward", seq=1024, block=128, sms=132, batch=1, heads=8, kv_heads=None,
                                       causal=1)))


def test_estimate_holds_both_grids_and_prints_them(capsys):
    from attnlab.cost.cli import print_estimate

    est = estimate(gpu="H200", seq=4096, head_dim=128, heads=16, batch=4, block_q=128, block_k=64)
    fwd, bwd = est.grids
    assert (fwd.pass_, fwd.block, fwd.programs) == ("forward", 128, 2048)
    assert (bwd.pass_, bwd.block, bwd.programs) == ("backward", 64, 4096)
    assert est.to_dict()["grids"][1]["programs"] == 4096
    print_estimate(est)
    out = " ".join(capsys.readouterr().out.split())
    assert "grid: 2,048 programs of 128 query rows, 15.5 waves on 132 SMs, longest first" in out
    assert f"busy {100 * fwd.efficiency:.1f}% of the time, so at most {100 * fwd.efficiency:.1f}% of the roofline" in out
    assert "grid: 4,096 programs of 64 keys, 31.0 waves on 132 SMs" in out
    from attnlab.cost.cli import PIECE_OVERHEAD

    ts = G.tail_split(programs=4096, sms=132, max_parts=4096 // 128, overhead=PIECE_OVERHEAD)
    assert ts.parts > 1 and f"the last wave's {ts.tail} programs cut into {ts.parts} pieces each" in out
    assert f"{ts.waves:.2f} waves, {ts.saving:.1%} sooner" in out
    print_estimate(estimate(gpu="H200", seq=4096, head_dim=128, heads=16, batch=4, block_q=128, block_k=64, causal=True))
    assert "cut into" not in capsys.readouterr().out  # unequal walks: no cut offered


def test_docs_show_the_grid_lines_the_command_prints():
    from pathlib import Path

    from attnlab.cost.cli import _grid_line

    est = estimate(gpu="H100", seq=4096, head_dim=128, heads=32)
    doc = (Path(__file__).resolve().parents[2] / "docs" / "cost.md").read_text()
    block = doc[doc.index("$ attnlab estimate --gpu H100 --seq 4096 --head-dim 128 --heads 32"):]
    assert _grid_line(est.grids[0], "query rows") in block
    assert _grid_line(est.grids[1], "keys", cut=-(-est.seq // est.block_q)) in block


def test_docs_quote_the_tables_grids():
    from pathlib import Path

    doc = " ".join((Path(__file__).resolve().parents[2] / "docs" / "cost.md").read_text().split())
    causal = [G.grid_estimate(pass_=p, batch=16384 // N, heads=2048 // D, seq=N, block=128, causal=True, sms=132)
              .efficiency for D in (64, 128) for N in (4096, 8192, 16384) for p in G.PASSES]
    lo, hi = 100 * min(causal), 100 * max(causal)
    assert f"keep the SMs {lo:.1f}–{hi:.0f} % busy" in doc and f"{hi:.1f}" == "100.0"
    dense = G.grid_estimate(pass_="forward", batch=4, heads=16, seq=4096, block=128, causal=False, sms=132)
    assert f"reach at most {100 * dense.efficiency:.1f} % of the roofline's speed" in doc


def test_tail_split_cuts_the_last_wave_where_it_ends_soonest():
    """``tail_split``: equal programs fill whole waves; the partial wave's programs cut into pieces end sooner, and the
    shortest schedule's fewest parts win; an overhead per piece makes fewer parts best; no tail, no cut."""
    from attnlab.cost import tail_split

    whole = tail_split(programs=2048, sms=132, max_parts=1)  # uncut: 15 whole waves and 68 left over
    assert (whole.tail, whole.parts, whole.waves, whole.waves_whole, whole.saving) == (68, 1, 16.0, 16, 0.0)
    thirds = tail_split(programs=2048, sms=132, max_parts=3)  # halves: 136 pieces need 2 rounds of 1/2: no gain
    assert thirds.parts == 3 and thirds.waves == pytest.approx(15 + 2 / 3)
    best = tail_split(programs=2048, sms=132)
    assert best.parts == 33 and best.waves == pytest.approx(15 + 17 / 33)  # ⌈68·33/132⌉ = 17 rounds of 1/33
    assert all(best.waves <= tail_split(programs=2048, sms=132, max_parts=p).waves + 1e-12 for p in range(1, 65))
    d64 = tail_split(programs=4096, sms=132)  # 31 whole waves and 4 left: 132 pieces in one round of 1/33
    assert (d64.tail, d64.parts) == (4, 33) and d64.waves == pytest.approx(31 + 1 / 33)
    assert d64.saving == pytest.approx(1 - (31 + 1 / 33) / 32)
    costly = tail_split(programs=2048, sms=132, overhead=0.05)  # each piece 5 % of a program more: fewer pieces
    assert costly.parts < best.parts and costly.waves == pytest.approx(15 + 3 * (1 / 5 + 0.05))
    even = tail_split(programs=264, sms=132)
    assert (even.tail, even.parts, even.waves, even.saving) == (0, 1, 2.0, 0.0)
    for bad in ({"programs": 0, "sms": 132}, {"programs": 10, "sms": 0}, {"programs": 10, "sms": 4, "max_parts": 0},
                {"programs": 10, "sms": 4, "overhead": -0.1}):
        with pytest.raises(ValueError):
            tail_split(**bad)


def test_docs_quote_tail_split():
    """docs/cost.md's tail_split sentence: each number as the function computes it."""
    from tests.helpers import ROOT

    from attnlab.cost import tail_split

    doc = " ".join((ROOT / "docs" / "cost.md").read_text().split())
    d128 = [tail_split(programs=2048, sms=132, max_parts=p) for p in (1, 3, 64)]
    d64 = [tail_split(programs=4096, sms=132, max_parts=p) for p in (1, 64)]
    assert (f"2,048 programs end after {d128[0].waves:.0f} waves uncut, {d128[1].waves:.2f} in thirds and "
            f"{d128[2].waves:.2f} at best; 4,096 after {d64[0].waves:.0f} uncut and {d64[1].waves:.2f} with each of the "
            f"{d64[1].tail} left over cut in {d64[1].parts}") in doc


def test_notes_prefill_v49_quotes_tail_split():
    """NOTES-prefill v49's schedule numbers, as ``tail_split`` computes them."""
    from tests.helpers import ROOT

    from attnlab.cost import tail_split

    text = " ".join((ROOT / "benchmarks" / "NOTES-prefill.md").read_text().split("## v49")[1].split())
    t = lambda n, **kw: tail_split(programs=n, sms=132, **kw)  # noqa: E731
    best, o2, o5 = t(2048), t(2048, overhead=0.02), t(2048, overhead=0.05)
    assert (f"D = 128: {t(2048, max_parts=1).waves:.0f} waves uncut, {t(2048, max_parts=3).waves:.2f} in thirds, "
            f"{best.waves:.2f} at best (each of the {best.tail} in {best.parts} pieces); with 2 % of a program's time of "
            f"overhead per piece, {o2.parts} pieces and {o2.waves:.2f}; with 5 %, {o5.parts} and {o5.waves:.2f}") in text
    d64, d64o = t(4096), t(4096, overhead=0.02)
    assert (f"D = 64: {d64.waves_whole} waves uncut, {d64.waves:.2f} with each of the {d64.tail} cut in {d64.parts} "
            f"({d64o.waves:.2f} at 2 % overhead), about {d64.saving * 100:.0f} % of the backward") in text
    assert f"about {2 * d64.parts * d64.tail * 128 * 64 * 4 / 1e6:.0f} MB at D = 64 with P = {d64.parts}" in text
