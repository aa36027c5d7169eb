"""The varlen rows of benchmarks/RESULTS.md's variants runs 8 and 9 are what ``benchmarks/variants.py
report`` renders from the recorded runs (benchmarks/data/variants-h200-d128-varlen-run{8,9}.json): a changed
file or a retyped number fails here."""

from __future__ import annotations

import json

from tests.helpers import ROOT, load_script


def test_results_varlen_rows_are_the_recorded_runs():
    vb = load_script("benchmarks/variants.py")
    results = (ROOT / "benchmarks" / "RESULTS.md").read_text()
    for run in (8, 9):
        rows = json.loads((ROOT / "benchmarks" / "data" / f"variants-h200-d128-varlen-run{run}.json").read_text())["rows"]
        body = vb.report(rows).splitlines()[2:]
        assert len(body) == 2
        for line in body:
            assert line.startswith("| 128 | varlen | ")
            assert line.replace("| varlen |", f"| varlen (run {run}) |", 1) in results, line


def test_docs_varlen_numbers_are_run_9():
    rows = json.loads((ROOT / "benchmarks" / "data" / "variants-h200-d128-varlen-run9.json").read_text())["rows"]
    tf = {(r["pass_"], r["provider"]): r["tflops"] for r in rows if "tflops" in r}
    doc = " ".join((ROOT / "docs" / "variants.md").read_text().split())  # line breaks aside
    fwd, fb = tf["fwd", "attnlab"], tf["fwd_bwd", "attnlab"]
    assert (f"forward {fwd:.0f} TFLOP/s, {fwd / tf['fwd', 'flex']:.2f}× FlexAttention with a document mask; "
            f"forward+backward {fb:.0f}, {fb / tf['fwd_bwd', 'flex']:.2f}×.") in doc
