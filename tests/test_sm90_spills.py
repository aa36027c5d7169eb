"""benchmarks/sm90_spills.py on the CPU: the report of one combination built here (its static and dynamic builds,
registers, spill stack and the product loops' reloads), its table, and its refusal of an existing JSON file."""

from __future__ import annotations

import subprocess
import sys

import pytest
from tests.helpers import ROOT, fresh_json, load_script

spills = load_script("benchmarks/sm90_spills.py")


def test_one_combination_builds_both_ways_and_renders():
    triton = pytest.importorskip("triton")
    from attnlab.gpu import prefill_gluon

    if not prefill_gluon.HAVE_GLUON:
        pytest.skip("this triton has no Gluon")
    rep = fresh_json("import json, sys; sys.path.insert(0, 'benchmarks'); import sm90_spills; "
                     "print(json.dumps(sm90_spills.report(((128, 128, False, False),))))", timeout=600)
    assert rep["triton_version"] == triton.__version__
    static, dynamic = rep["rows"]
    assert (static["dynamic"], dynamic["dynamic"]) == (False, True)
    assert all((r["D"], r["block_m"], r["causal"], r["packed"]) == (128, 128, False, False) for r in rep["rows"])
    if static["stack"] is None:
        pytest.skip("this triton ships no cuobjdump")
    # the shipped dense D = 128 build on two consumer warp groups: no spill, both ways, in every triton tested
    assert static["stack"] == dynamic["stack"] == 0 and static["loop_ldl"] and not any(static["loop_ldl"])
    table = spills.markdown(rep).splitlines()
    assert table[4] == (f"| 128 | 128 | full | dense | static | {static['regs']} | 0 | {static['loop_ldl']} |")


def test_an_existing_json_file_is_refused(tmp_path):
    kept = tmp_path / "kept.json"
    kept.write_text("mine")
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "sm90_spills.py"), "--json", str(kept)],
                       capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 2 and "exists" in r.stderr and kept.read_text() == "mine"
