"""benchmarks/det_order_sim.py: the deterministic backward's turn orders, simulated. Every order gives the
key blocks that see a tile distinct turns 0..k−1 (a programme a kernel can follow); the kernel's ascending
order costs a causal walk about half its time again in this model, the descending order nothing."""

import subprocess
import sys

import pytest
from tests.helpers import ROOT, load_script


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("rotate", [True, False])
def test_turns_number_each_tiles_visitors_from_zero(causal, rotate):
    sim = load_script("benchmarks/det_order_sim.py")
    walk = sim.walks(1000, causal, rotate)  # ragged: 8 key blocks, 16 query blocks
    visitors = {}
    for n, blocks in enumerate(walk):
        assert len(set(blocks)) == len(blocks)
        for m in blocks:
            visitors.setdefault(m, set()).add(n)
    for order in ("ascending", "descending", "arrival"):
        t = sim.turns(walk, order)
        for m, ns in visitors.items():
            assert sorted(t[n, m] for n in ns) == list(range(len(ns))), (order, m)
    if causal:  # key block n starts at its diagonal's query block, 2n
        assert [b[0] for b in sim.walks(1024, True)] == [2 * n for n in range(8)]


def test_makespans_say_which_order_costs_nothing():
    sim = load_script("benchmarks/det_order_sim.py")
    causal = sim.walks(8192, True)
    none = sim.makespan(causal, "none")
    assert none == 8192 // 64  # key block 0 walks every query block
    assert sim.makespan(causal, "descending") == none  # the last key block reaches each tile first
    assert 1.4 < sim.makespan(causal, "ascending") / none < 1.6  # the kernel's order: turns at block 0's pace
    rotated = sim.walks(8192, False, rotate=True)
    assert sim.makespan(rotated, "arrival") == sim.makespan(rotated, "none")


def test_cli_table_and_refusals(tmp_path):
    script = str(ROOT / "benchmarks" / "det_order_sim.py")
    res = subprocess.run([sys.executable, script, "--tokens", "1024"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert "| 1024 | True | False | descending | 16 | 1.00 |" in res.stdout
    kept = tmp_path / "rows.json"
    kept.write_text("mine")
    res = subprocess.run([sys.executable, script, "--json", str(kept)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and kept.read_text() == "mine"
    res = subprocess.run([sys.executable, script, "--tokens", "0"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2


def test_latency_model_separates_the_two_ways_of_counting():
    """makespan_timed: with no order it is the unordered makespan whatever the latency; causal walks in
    descending order cost nothing with a writer warp while a tile's turns are under two steps apart, and
    the consumer's own stall stretches every step; non-causal walks queue, the more the longer a count."""
    sim = load_script("benchmarks/det_order_sim.py")
    causal, plain = sim.walks(4096, True), sim.walks(4096, False)
    base = sim.makespan(causal, "none")
    assert sim.makespan_timed(causal, "none", "writer", 5.0) == base
    for c in (0.25, 1.0, 1.9):
        assert sim.makespan_timed(causal, "descending", "writer", c) == base
    assert sim.makespan_timed(causal, "descending", "writer", 3.0) > 1.3 * base
    assert sim.makespan_timed(causal, "descending", "consumer", 0.5, stall=0.5) == pytest.approx(1.5 * base, rel=0.01)
    q = [sim.makespan_timed(plain, "ascending", "writer", c) for c in (0.25, 1.0, 2.0)]
    assert base < q[0] < q[1] < q[2]
    with pytest.raises(ValueError, match="unknown scheme"):
        sim.makespan_timed(causal, "descending", "warp", 1.0)
    rows = sim.latency_rows(1024, counts=(1.0,))
    assert {(r["causal"], r["scheme"]) for r in rows} == {(c, s) for c in (True, False) for s in sim.SCHEMES}


def test_grid_model_and_the_notes_quote_it():
    """The causal grid as a list schedule: the deterministic kernel's order (head by head, key blocks last
    first) against the default's on each shape, as NOTES-prefill quotes it; every order is at least a
    perfect balance, and the GQA layer's 512 long programs pay most for starting the longest walks last."""
    sim = load_script("benchmarks/det_order_sim.py")
    got = {(name, o): sim.grid_makespan(h, n, g, o) for name, h, n, g in sim.GRID_SHAPES for o in sim.GRID_ORDERS}
    assert all(v >= 1.0 for v in got.values())
    gqa = {o: got[("GQA 32/8, 8K", o)] for o in sim.GRID_ORDERS}
    det, hf_lpt, hm_lpt = gqa[sim.GRID_ORDERS[0]], gqa[sim.GRID_ORDERS[3]], gqa[sim.GRID_ORDERS[2]]
    assert det == max(gqa.values()) and hf_lpt == min(gqa.values())
    notes = " ".join((ROOT / "benchmarks" / "NOTES-prefill.md").read_text().split())
    mha = [got[(name, sim.GRID_ORDERS[0])] for name, *_ in sim.GRID_SHAPES[1:]]
    assert (f"one program per SM: {mha[0]:.2f}× at D = 64, {mha[1]:.2f}× at D = 128 over a perfect balance; "
            f"{det:.2f}× for the GQA layer") in notes
    assert (f"the deterministic order's makespan is {det / hf_lpt:.2f}× the default's ({det:.3f} against "
            f"{hf_lpt:.3f} over a perfect balance), head by head longest first {hm_lpt / hf_lpt:.2f}×") in notes
    assert f"head first, longest walks first, {hf_lpt:.2f}× in the same model" in notes
    import json

    rows = json.loads((ROOT / "benchmarks" / "data" / "bwd-dq-layout-h200-run10.json").read_text())["rows"]
    best = {}
    for r in rows:
        if r["Hkv"] == 8 and "ms" in r:
            best[r["layout"]] = min(best.get(r["layout"], float("inf")), r["ms"])
    assert f"(measured {best['default-hm'] / best['default']:.2f}×)" in notes
    split = [sim.grid_makespan(h, 8192, g, sim.GRID_ORDERS[0]) / sim.grid_makespan(h, 8192, g, sim.GRID_ORDERS[3])
             for h, g in ((16, 2), (32, 1))]
    assert (f"the deterministic order's makespan falls from {det / hf_lpt:.2f}× to {split[0]:.2f}× the default's; "
            f"one query head per program, {split[1]:.2f}×") in notes
    with pytest.raises(ValueError, match="order"):
        sim.grid_makespan(8, 8192, 4, "random")
