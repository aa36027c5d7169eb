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


def test_results_packed_gluon_runs_are_the_recorded_ones():
    """RESULTS.md's varlen runs 11 and 12 (the packed-batch Gluon backward) and its packed_probe tables are what
    the scripts render from the recorded files."""
    vb = load_script("benchmarks/variants.py")
    probe = load_script("benchmarks/packed_probe.py")
    results = (ROOT / "benchmarks" / "RESULTS.md").read_text()
    data = ROOT / "benchmarks" / "data"
    for name, tag in (("variants-h200-varlen-run11", "run 11, Gluon"), ("variants-h200-varlen-triton-run11",
                                                                       "run 11, Triton"),
                      ("variants-h200-varlen-run12", "run 12, Gluon")):
        rows = json.loads((data / f"{name}.json").read_text())["rows"]
        for line in vb.report(rows).splitlines()[2:]:
            assert line.replace("| varlen |", f"| varlen ({tag}) |", 1) in results, line
    for run in (1, 5, 6, 7):
        table = probe.report(json.loads((data / f"packed-probe-h200-run{run}.json").read_text()))
        assert table in results, run


def test_results_dense_backward_unchanged_by_the_packed_build():
    """The ranges RESULTS.md quotes for the dense backward after the packed build (bwd-dq-layout runs 11–13) are
    the recorded files' default rows, shape by shape."""
    results = " ".join((ROOT / "benchmarks" / "RESULTS.md").read_text().split())
    by_shape: dict = {}
    for run in (11, 12, 13):
        for r in json.loads((ROOT / "benchmarks" / "data" / f"bwd-dq-layout-h200-run{run}.json").read_text())["rows"]:
            if r["layout"] == "default":
                by_shape.setdefault((r["D"], r["H"], r["Hkv"], r["N"], r["causal"]), []).append(r["ms"])
    ranges = ", ".join(f"{min(v):.2f}–{max(v):.2f}" for v in by_shape.values())
    assert f"`-run13.json`: {ranges} ms against run 9's" in results


def test_results_run_13_is_the_recorded_one():
    """RESULTS.md's variants run 13 (the packed Triton kernels from kept compiled kernels): its varlen table and
    packed_probe table as the scripts render them, and the host-time ranges it compares (runs 7 and 8)."""
    vb = load_script("benchmarks/variants.py")
    probe = load_script("benchmarks/packed_probe.py")
    results = (ROOT / "benchmarks" / "RESULTS.md").read_text()
    section = results[results.index("### Run 13: the packed Triton kernels"):results.index("### Runs 11 and 12: varlen")]
    data = ROOT / "benchmarks" / "data"
    rows = json.loads((data / "variants-h200-varlen-run13.json").read_text())["rows"]
    for line in vb.report(rows).splitlines()[2:]:
        assert line.replace("| varlen |", "| varlen (run 13) |", 1) in section, line
    runs = {r: json.loads((data / f"packed-probe-h200-run{r}.json").read_text()) for r in (7, 8)}
    assert probe.report(runs[8]) in section
    tri = {r: [x["host_ms"] for x in v if "Triton" in x["layout"]] for r, v in runs.items()}
    text = " ".join(section.split())
    assert (f"was {min(tri[8]):.2f}–{max(tri[8]):.2f} ms against {min(tri[7]):.2f}–{max(tri[7]):.2f} in run 7"
            in text)
    tf = {(r["D"], r["pass_"], r["provider"]): r["tflops"] for r in rows if "tflops" in r}
    assert (f"{tf[128, 'fwd_bwd', 'attnlab']:.0f} and {tf[128, 'fwd_bwd', 'attnlab-det']:.0f} TFLOP/s "
            f"forward+backward at D = 128") in text
    assert f"still {tf[128, 'fwd_bwd', 'attnlab'] / tf[128, 'fwd_bwd', 'flex']:.2f}× FlexAttention" in text
    floors = json.loads((data / "decode-host-h200-run12.json").read_text())["floors"]
    assert (f"{floors['triton_empty_55_args, kernel[grid]']:.1f} µs through `kernel[grid]`, "
            f"{floors['triton_empty_55_args, compiled launcher']:.1f} through the compiled launcher") in text
    gpu_doc = " ".join((ROOT / "docs" / "gpu.md").read_text().split())
    assert (f"{floors['triton_empty_55_args, kernel[grid]']:.1f} µs through `kernel[grid]`, "
            f"{floors['triton_empty_55_args, compiled launcher']:.1f} through the kept compiled launcher, "
            "decode-host run 12") in gpu_doc
