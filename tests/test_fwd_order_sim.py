"""benchmarks/fwd_order_sim.py: the causal forward's tile orders, simulated on the kernels' own walks
(``prefill_gluon.tile_walks``) and schedule (``persistent_schedule``). Every order is at least a perfect
balance; the numbers NOTES-prefill v18 predicted from are this model's."""

import subprocess
import sys

import pytest
from tests.helpers import ROOT, load_script

pytest.importorskip("triton")


def test_orders_are_at_least_a_balance_and_the_notes_quote_them():
    sim = load_script("benchmarks/fwd_order_sim.py")
    rows = sim.run()
    assert all(r[o] >= 1.0 for r in rows for o in sim.ORDERS)
    row = {(r["D"], r["N"], r["block_m"], r["part_first"]): r for r in rows}
    last, first = row[64, 4096, 192, False], row[64, 4096, 192, True]
    notes = " ".join((ROOT / "benchmarks" / "NOTES-prefill.md").read_text().split())
    v18 = notes[notes.index("## v18:"):]
    drop = first["blocks_per_head"] / last["blocks_per_head"] - 1
    assert (f"a head's walks sum to {first['blocks_per_head']} key blocks instead of {last['blocks_per_head']}, "
            f"{100 * drop:.1f} %") in v18
    assert (f"the makespan is {last['grid']:.3f}× a perfect balance at D = 64, 4K, and {last['grid-c8']:.3f}× when the "
            f"longest walks go first over groups of 8 heads") in v18
    assert f"Run 2's rounds were balanced in the same model ({last['rounds']:.3f}×)" in v18
    # the host's schedule balances as well as the grid's list schedule over the same groups
    assert all(r["schedule-c8"] == pytest.approx(r["grid-c8"], abs=2e-3) for r in rows)


def test_makespan_refuses_an_unknown_order():
    sim = load_script("benchmarks/fwd_order_sim.py")
    with pytest.raises(ValueError, match="order"):
        sim.makespan([1, 2, 3], 4, "spiral")


def test_script_prints_the_table_and_refuses_to_overwrite(tmp_path):
    out = tmp_path / "sim.json"
    res = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "fwd_order_sim.py"), "--json", str(out)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert res.stdout.count("\n| ") == 10 and out.exists()
    again = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "fwd_order_sim.py"), "--json", str(out)],
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 2 and "not overwriting" in again.stderr


def test_packed_turns_against_a_list_and_the_notes_quote_them():
    """``--packed``: every tile of the packed batch once (the documents' query blocks inside, the rest costing
    nothing), both orders at least a balance, the fixed turns further from it than a list at both head dims, and the
    numbers NOTES-prefill v24 quotes beside the measured ratio of sweep run 6."""
    import json

    sim = load_script("benchmarks/fwd_order_sim.py")
    vb = load_script("benchmarks/variants.py")
    lengths = vb.doc_lengths(vb.TOKENS)
    rows = {r["D"]: r for r in sim.run_packed()}
    for D, r in rows.items():
        H = vb.WIDTH // D
        assert r["tiles_in_documents"] == H * sum(-(-n // 128) for n in lengths)
        assert r["tiles"] == H * len(lengths) * -(-max(lengths) // 128)
        assert 1.0 <= r["list"] < r["turns"]
    sweep = json.loads((ROOT / "benchmarks" / "data" / "variants-sweep-h200-varlen-run6.json").read_text())

    def tf(D, dyn):
        return next(x["tflops"] for x in sweep if x["D"] == D and "block_m=128, block_n=128" in x["config"]
                    and "persistent=True" in x["config"] and f"dynamic={dyn}" in x["config"])

    notes = " ".join((ROOT / "benchmarks" / "NOTES-prefill.md").read_text().split("## v24")[1].split())
    assert (f"{rows[128]['turns']:.3f}× a perfect balance's key blocks at D = 128 and {rows[64]['turns']:.3f}× at D = 64 "
            f"with the turns, {rows[128]['list']:.3f}× at both") in notes
    assert f"{rows[64]['list']:.3f}" == f"{rows[128]['list']:.3f}"
    assert (f"ran at {tf(128, False) / tf(128, True):.2f}× the dynamic one at D = 128 and "
            f"{tf(64, False) / tf(64, True):.2f}× at D = 64") in notes
    with pytest.raises(ValueError, match="order"):
        sim.packed_makespan([1, None, 2], "spiral")
