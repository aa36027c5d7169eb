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
