"""The varlen rows of benchmarks/RESULTS.md's variants runs 8 and 9 are what ``benchmarks/variants.py
report`` renders from the recorded runs (benchmarks/data/variants-h200-d128-varlen-run{8,9}.json): a changed
file or a retyped number fails here."""

from __future__ import annotations

import dataclasses
import json
import re

from tests.helpers import ROOT, load_script


def _flat(text: str) -> str:
    """The text with its line breaks and runs of spaces as single spaces (a quote may wrap anywhere)."""
    return " ".join(text.split())


def _notes(version: str) -> str:
    """NOTES-prefill.md from its section ``## <version>`` on, flattened."""
    return _flat((ROOT / "benchmarks" / "NOTES-prefill.md").read_text().split(f"## {version}")[1])


def _prefill_tflops(run: int) -> dict:
    """benchmarks/data/prefill-h200-run{run}.json's TFLOP/s by (D, causal, N, pass, provider), timed rows only."""
    rows = json.loads((ROOT / "benchmarks" / "data" / f"prefill-h200-run{run}.json").read_text())["rows"]
    return {(r["D"], r["causal"], r["N"], r["pass_"], r["provider"]): r["tflops"] for r in rows if "tflops" in r}


def _prefill_report_rows(name: str) -> list[str]:
    """The table rows (D = 64 and 128) that ``benchmarks/prefill.py report`` renders from benchmarks/data/``name``."""
    import subprocess
    import sys

    res = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "prefill.py"), "report",
                          str(ROOT / "benchmarks" / "data" / name)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    return [ln for ln in res.stdout.splitlines() if ln.startswith(("| 64 ", "| 128 "))]


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
    doc = _flat((ROOT / "docs" / "variants.md").read_text())  # line breaks aside
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
    text = _flat(section)
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


def test_results_runs_14_to_16_are_the_recorded_ones():
    """RESULTS.md's variants runs 14–16 and varlen-profile runs 3–6 (prefill calls from kept plans, packed batches
    on the Gluon backward): the tables as the scripts render them from the recorded files, and every number its
    text and NOTES-prefill v21 quote."""
    vb = load_script("benchmarks/variants.py")
    vp = load_script("benchmarks/varlen_profile.py")
    results = (ROOT / "benchmarks" / "RESULTS.md").read_text()
    section = results[results.index("### Variants runs 14–16"):results.index("### Varlen-profile runs 1 and 2")]
    text = _flat(section)
    notes = _notes("v21")
    data = ROOT / "benchmarks" / "data"
    prof = {n: json.loads((data / f"varlen-profile-h200-run{n}.json").read_text())["rows"] for n in (3, 4, 5, 6)}
    assert "\n".join(vp.compare(prof)) in section
    tf = {}
    for run in (14, 15, 16):
        for kern, tag in (("triton", "Triton"), ("gluon", "Gluon")):
            rows = json.loads((data / f"variants-h200-varlen-run{run}-{kern}.json").read_text())["rows"]
            for line in vb.report(rows).splitlines()[2:]:
                assert line.replace("| varlen |", f"| varlen (run {run}, {tag}) |", 1) in section, line
            tf[run, kern] = {(r["D"], r["pass_"], r["provider"]): r["tflops"] for r in rows if "tflops" in r}
    row = {(n, r["packed"]): r for n, rows in prof.items() for r in rows}
    step = {k: {s: v[0] for s, v in r["steps"].items()} for k, r in row.items()}
    # host time
    bwd = [step[n, "gluon"]["prefill_bwd.prefill_backward"] for n in (5, 6)]
    assert f"took {step[3, 'gluon']['prefill_bwd.prefill_backward']:,.0f} µs of host time a call before" in text
    assert f"and {min(bwd):.0f}–{max(bwd):.0f} µs from kept plans" in text
    g_host = [row[n, "gluon"]["host_ms"] for n in (5, 6)]
    t_host = [row[n, "triton"]["host_ms"] for n in (3, 4, 5, 6)]
    assert (f"{row[3, 'gluon']['host_ms']:.3f} ms → {min(g_host):.3f}–{max(g_host):.3f} ms, against "
            f"{min(t_host):.3f}–{max(t_host):.3f} ms on the Triton route") in text
    assert (f"({row[5, 'gluon']['eager_ms']:.3f} and {row[6, 'gluon']['eager_ms']:.3f} ms against "
            f"{row[5, 'gluon']['graph_ms']:.3f} and {row[6, 'gluon']['graph_ms']:.3f})") in text
    ahead = [row[n, "triton"]["eager_ms"] - row[n, "gluon"]["eager_ms"] for n in (5, 6)]
    assert f"{min(ahead):.2f}–{max(ahead):.2f} ms ahead of the Triton route" in text
    assert all(abs(row[n, "gluon"]["eager_ms"] - row[n, "gluon"]["graph_ms"]) < 0.015 for n in (5, 6))
    # the varlen rows
    fb = {(run, kern, D): tf[run, kern][D, "fwd_bwd", "attnlab"] for run in (15, 16) for kern in ("triton", "gluon")
          for D in (64, 128)}
    flex = {(run, kern, D): tf[run, kern][D, "fwd_bwd", "flex"] for run in (15, 16) for kern in ("triton", "gluon")
            for D in (64, 128)}
    x = {k: fb[k] / flex[k] for k in fb}
    assert (f"{fb[15, 'gluon', 128]:.0f} and {fb[16, 'gluon', 128]:.0f} TFLOP/s (runs 15 and 16) against "
            f"{fb[15, 'triton', 128]:.0f} on the Triton kernels in both, so {x[15, 'gluon', 128]:.2f}× and "
            f"{x[16, 'gluon', 128]:.2f}× FlexAttention, where the Triton route stays at {x[15, 'triton', 128]:.2f}×") in text
    assert f"{fb[16, 'triton', 128]:.0f}" == f"{fb[15, 'triton', 128]:.0f}"
    x64 = [x[r, k, 64] for r in (15, 16) for k in ("triton", "gluon")]
    assert (f"D = 64: {fb[15, 'gluon', 64]:.0f} and {fb[16, 'gluon', 64]:.0f} against {fb[15, 'triton', 64]:.0f} and "
            f"{fb[16, 'triton', 64]:.0f}, level within the runs' noise; {min(x64):.2f}–{max(x64):.2f}× FlexAttention") in text
    det = [tf[r, "gluon"][128, "fwd_bwd", "attnlab-det"] / fb[r, "gluon", 128] for r in (15, 16)]
    assert f"the deterministic backward is now {min(det):.2f}–{max(det):.2f}× the default's speed" in text
    was = {f"{tf[r, 'triton'][128, 'fwd_bwd', 'attnlab-det'] / fb[r, 'triton', 128]:.2f}" for r in (15, 16)}
    assert len(was) == 1 and f"(it was {was.pop()}× beside the Triton default)" in text
    src = " ".join((ROOT / "src" / "attnlab" / "gpu" / "prefill_gluon_bwd.py").read_text().replace("#", "").split())
    assert (f"then {fb[15, 'gluon', 128]:.0f} against {fb[15, 'triton', 128]:.0f} TFLOP/s at D = 128, "
            f"{fb[15, 'gluon', 64]:.0f} against {fb[15, 'triton', 64]:.0f} at D = 64 (variants run 15); "
            f"{fb[16, 'gluon', 128]:.0f} against {fb[16, 'triton', 128]:.0f} and {fb[16, 'gluon', 64]:.0f} against "
            f"{fb[16, 'triton', 64]:.0f} (run 16)") in src
    doc = _flat((ROOT / "docs" / "variants.md").read_text())
    assert (f"(variants runs 15 and 16): forward+backward {fb[15, 'gluon', 128]:.0f} and {fb[16, 'gluon', 128]:.0f} "
            f"TFLOP/s, {x[15, 'gluon', 128]:.2f}× and {x[16, 'gluon', 128]:.2f}× FlexAttention") in doc
    g = sorted((fb[15, "gluon", 128], fb[16, "gluon", 128]))
    assert (f"{g[0]:.0f}–{g[1]:.0f} TFLOP/s forward+backward at D = 128 against {fb[15, 'triton', 128]:.0f} on the "
            "Triton kernels (") in doc
    run2 = next(r for r in json.loads((data / "varlen-profile-h200-run2.json").read_text())["rows"]
                if r["packed"] == "gluon")
    assert f"but needed {run2['host_ms']:.1f} ms of host time a call until prefill calls ran from plans" in doc
    gpu_doc = " ".join((ROOT / "docs" / "gpu.md").read_text().split())
    assert (f"from {step[3, 'gluon']['prefill_gluon_bwd.gluon_backward']:.0f} to "
            f"{step[4, 'gluon']['prefill_gluon_bwd.gluon_backward']:.0f} µs a call, a whole packed batch's backward "
            f"from {step[3, 'gluon']['prefill_bwd.prefill_backward'] / 1e3:.2f} to {min(bwd) / 1e3:.2f}–"
            f"{max(bwd) / 1e3:.2f} ms") in gpu_doc
    # NOTES v21's quotes of the same files
    assert (f"in the Gluon route's {step[3, 'gluon']['prefill_bwd.prefill_backward'] / 1e3:.3f} ms of `prefill_backward`, "
            f"`gluon_backward` took {step[3, 'gluon']['prefill_gluon_bwd.gluon_backward']:.0f} µs") in notes
    assert (f"`gluon_backward` {step[4, 'gluon']['prefill_gluon_bwd.gluon_backward']:.0f} µs "
            f"({step[3, 'gluon']['prefill_gluon_bwd.gluon_backward']:.0f})") in notes
    assert (f"the Gluon route's host loop {row[4, 'gluon']['host_ms']:.3f} ms a call "
            f"({row[3, 'gluon']['host_ms']:.3f})") in notes
    assert (f"The Gluon route's host loop {row[5, 'gluon']['host_ms']:.3f} ms a call ({row[4, 'gluon']['host_ms']:.3f} "
            f"in run 4), below its kernels' {row[5, 'gluon']['kernels_ms']:.3f} ms, so do_bench "
            f"{row[5, 'gluon']['eager_ms']:.3f} ms, its graph time ({row[5, 'gluon']['graph_ms']:.3f})") in notes
    short = [100 * (1 - x[r, "gluon", 128] / 1.3) for r in (15, 16)]
    assert f"missed by {short[0]:.0f} % (run 15) and {short[1]:.0f} % (run 16)" in notes
    flex_ms = next(r["ms"] for r in json.loads((data / "variants-h200-varlen-run16-gluon.json").read_text())["rows"]
                   if r["D"] == 128 and r["pass_"] == "fwd_bwd" and r["provider"] == "flex")
    assert (f"the kernels sum to {row[6, 'gluon']['kernels_ms']:.3f} ms in run 6; the bar, 1.3× FlexAttention's "
            f"{flex_ms:.3f} ms of run 16, is {flex_ms / 1.3:.3f} ms") in notes
    assert (f"The Gluon route {row[6, 'gluon']['eager_ms']:.3f} ms do_bench and graph alike (the Triton route "
            f"{row[6, 'triton']['eager_ms']:.3f})") in notes
    assert f"{row[6, 'gluon']['graph_ms']:.3f}" == f"{row[6, 'gluon']['eager_ms']:.3f}"
    assert (f"{fb[16, 'gluon', 128]:.0f} TFLOP/s against {fb[16, 'triton', 128]:.0f} at D = 128 "
            f"({x[16, 'gluon', 128]:.2f}× FlexAttention; run 15's {fb[15, 'gluon', 128]:.0f}") in notes
    assert (f"{fb[16, 'gluon', 64]:.0f} against {fb[16, 'triton', 64]:.0f} at D = 64 (run 15: {fb[15, 'gluon', 64]:.0f} "
            f"against {fb[15, 'triton', 64]:.0f})") in notes
    up = [100 * (fb[r, "gluon", 128] / fb[r, "triton", 128] - 1) for r in (15, 16)]
    assert f"ahead by {min(up):.0f}–{max(up):.0f} % at D = 128" in notes
    assert (f"D = 128 varlen forward+backward {fb[15, 'gluon', 128]:.0f} TFLOP/s on the Gluon backward against "
            f"{fb[15, 'triton', 128]:.0f} on the Triton kernels, {x[15, 'gluon', 128]:.2f}× FlexAttention") in notes


def test_results_runs_17_and_18_are_the_recorded_ones():
    """RESULTS.md's variants runs 17 and 18, variants-sweep varlen run 5 and varlen-profile run 7 (the packed Gluon
    forward): the tables as the scripts render them from the recorded files, and every number the text, NOTES-prefill
    v22, docs/variants.md and the ``PACKED`` comment quote."""
    import math

    vb = load_script("benchmarks/variants.py")
    vp = load_script("benchmarks/varlen_profile.py")
    vs = load_script("benchmarks/variants_sweep.py")
    results = (ROOT / "benchmarks" / "RESULTS.md").read_text()
    section = results[results.index("### Variants runs 17 and 18"):results.index("### Variants runs 14–16")]
    text = _flat(section)
    notes = _notes("v22")
    doc = _flat((ROOT / "docs" / "variants.md").read_text())
    src = " ".join((ROOT / "src" / "attnlab" / "gpu" / "prefill_gluon.py").read_text().replace("#", "").split())
    data = ROOT / "benchmarks" / "data"
    tf = {}
    for run in (17, 18):
        for fwd, tag in (("triton", "Triton"), ("gluon", "Gluon")):
            rows = json.loads((data / f"variants-h200-varlen-run{run}-gluon-fwd-{fwd}.json").read_text())["rows"]
            assert all(r["packed_fwd"] == fwd and r["packed_kernel"] == "gluon" for r in rows if "packed_fwd" in r)
            for line in vb.report(rows).splitlines()[2:]:
                assert line.replace("| varlen |", f"| varlen (run {run}, {tag} forward) |", 1) in section, line
            tf[run, fwd] = {(r["D"], r["pass_"], r["provider"]): r["tflops"] for r in rows if "tflops" in r}
    sweep = json.loads((data / "variants-sweep-h200-varlen-run5.json").read_text())
    assert vs.markdown(sweep).rstrip("\n") in section
    prof = json.loads((data / "varlen-profile-h200-run7.json").read_text())["rows"]
    assert "\n".join(vp.table(prof)) in section
    # the sweep: the Triton entry, the Gluon grid kernel, the persistent build, at each head dim
    sw = {}
    for r in sweep:
        c = r["config"]
        kind = ("triton" if r["kernel"] == "triton" else "persistent" if "persistent=True" in c else "grid")
        if "block_m=128, block_n=128" in c or kind == "triton":
            sw[r["D"], kind] = r["tflops"]
    slow = {D: [r["tflops"] for r in sweep if r["D"] == D and ("block_n=64" in r["config"] or "block_m=192"
                                                                in r["config"]) and r["kernel"] == "gluon"]
            for D in (64, 128)}
    assert all(max(slow[D]) < sw[D, "persistent"] < sw[D, "grid"] for D in (64, 128))  # "slower still"
    k = {r["packed_fwd"]: r["kernels"] for r in prof}
    kt, kg = k["triton"]["_attn_fwd"], k["gluon"]["_attn_fwd_gluon_ws"]
    host = {r["packed_fwd"]: r["steps"]["prefill_fwd._FwdPlan.run"][0] for r in prof}
    fb = {(run, D): tf[run, "triton"][D, "fwd_bwd", "attnlab"] for run in (17, 18) for D in (64, 128)}
    x = {key: fb[key] / tf[key[0], "triton"][key[1], "fwd_bwd", "flex"] for key in fb}
    f17 = {(fwd, D): tf[17, fwd][D, "fwd", "attnlab"] for fwd in ("triton", "gluon") for D in (64, 128)}
    assert (f"level with the Triton kernel at D = 128 ({sw[128, 'grid']:.0f} against {sw[128, 'triton']:.0f} TFLOP/s "
            f"in the sweep; {kg:.1f} against {kt:.1f} µs of GPU time in run 7; {f17['gluon', 128]:.0f} against "
            f"{f17['triton', 128]:.0f} in run 17's varlen rows, one process each) and behind it at D = 64 "
            f"({sw[64, 'grid']:.0f} against {sw[64, 'triton']:.0f} in the sweep, {f17['gluon', 64]:.0f} against "
            f"{f17['triton', 64]:.0f} in run 17)") in text
    assert (f"ran at {sw[128, 'persistent']:.0f} TFLOP/s against the grid kernel's {sw[128, 'grid']:.0f} at D = 128 and "
            f"{sw[64, 'persistent']:.0f} against {sw[64, 'grid']:.0f} at D = 64") in text
    assert (f"ran at {fb[17, 128]:.0f} and {fb[18, 128]:.0f} TFLOP/s at D = 128 ({x[17, 128]:.2f}× FlexAttention in "
            f"both runs) and {fb[17, 64]:.0f} and {fb[18, 64]:.0f} at D = 64 ({x[17, 64]:.2f}× and {x[18, 64]:.2f}×)") in text
    assert f"{x[17, 128]:.2f}" == f"{x[18, 128]:.2f}"
    assert f"took {host['gluon']:.1f} µs of host time on the Gluon kernel" in text and f"against {host['triton']:.1f} on" in text
    # NOTES v22
    doc_lengths = vb.doc_lengths(vb.TOKENS)
    H = vb.WIDTH // 128
    grid = H * len(doc_lengths) * math.ceil(max(doc_lengths) / 128)
    empty = grid - H * sum(math.ceil(n / 128) for n in doc_lengths)
    assert f"({empty:,} of {grid:,} at D = 128) lie past their sequence's end and return at once" in notes
    assert (f"The Gluon forward's kernel ran {kg:.1f} µs against the Triton kernel's {kt:.1f}, level" in notes)
    assert (f"the varlen rows {f17['gluon', 128]:.0f} against {f17['triton', 128]:.0f} TFLOP/s for the forward alone at "
            f"D = 128") in notes and f"and {f17['gluon', 64]:.0f} against {f17['triton', 64]:.0f} at D = 64" in notes
    assert (f"Forward+backward {tf[17, 'gluon'][128, 'fwd_bwd', 'attnlab']:.0f} against {fb[17, 128]:.0f} at "
            "D = 128") in notes
    assert (f"{sw[128, 'persistent']:.0f} against the grid kernel's {sw[128, 'grid']:.0f} TFLOP/s at D = 128, "
            f"{sw[64, 'persistent']:.0f} against {sw[64, 'grid']:.0f} at D = 64") in notes
    s128 = sorted(r["tflops"] for r in sweep if r["D"] == 128 and "block_n=64" in r["config"])
    big = [r["tflops"] for r in sweep if r["D"] == 128 and "block_m=192" in r["config"]]
    assert f"64-key blocks ({s128[0]:.0f}–{s128[-1]:.0f} at D = 128, any ring depth) and 192-row blocks ({big[0]:.0f})" in notes
    assert (f"{fb[17, 128]:.0f} and {fb[18, 128]:.0f} TFLOP/s at D = 128, {x[17, 128]:.2f}× FlexAttention in both "
            "runs") in notes
    # docs and the switch's comment
    assert f"in variants runs 17 and 18, {fb[17, 128]:.0f} and {fb[18, 128]:.0f}, {x[17, 128]:.2f}× in both" in doc
    assert f"at D = 128 ({sw[128, 'grid']:.0f} against {sw[128, 'triton']:.0f} TFLOP/s, the forward alone" in doc
    assert (f"level with the Triton kernel at D = 128 ({sw[128, 'grid']:.0f} against {sw[128, 'triton']:.0f} TFLOP/s, "
            f"variants-sweep varlen run 5) and {round(100 * (1 - sw[64, 'grid'] / sw[64, 'triton']))} % behind at "
            "D = 64") in src


def test_results_run_19_is_the_recorded_one():
    """RESULTS.md's variants run 19 (deterministic packed batches on the Gluon backward): the table as the script
    renders it from the recorded file, and the numbers its text, NOTES-prefill v23, docs/variants.md and the
    ``PACKED_DET`` comment quote, beside runs 17 and 18's (the docs quote runs 20 and 21 now)."""
    vb = load_script("benchmarks/variants.py")
    results = (ROOT / "benchmarks" / "RESULTS.md").read_text()
    section = results[results.index("### Variants run 19"):results.index("### Variants runs 17 and 18")]
    text = _flat(section)
    notes = _notes("v23")
    src = " ".join((ROOT / "src" / "attnlab" / "gpu" / "prefill_gluon_bwd.py").read_text().replace("#", "").split())
    data = ROOT / "benchmarks" / "data"
    rows = json.loads((data / "variants-h200-varlen-run19-gluon.json").read_text())["rows"]
    for line in vb.report(rows).splitlines()[2:]:
        assert line.replace("| varlen |", "| varlen (run 19) |", 1) in section, line
    tf = {(r["pass_"], r["provider"]): r["tflops"] for r in rows if "tflops" in r and r["D"] == 128}
    det, dflt = tf["fwd_bwd", "attnlab-det"], tf["fwd_bwd", "attnlab"]
    old = {}
    for run in (17, 18):
        r = json.loads((data / f"variants-h200-varlen-run{run}-gluon-fwd-triton.json").read_text())["rows"]
        t = {(x["pass_"], x["provider"]): x["tflops"] for x in r if "tflops" in x and x["D"] == 128}
        old[run] = (t["fwd_bwd", "attnlab-det"], t["fwd_bwd", "attnlab"])
    (d17, f17), (d18, f18) = old[17], old[18]
    assert (f"ran at {det:.0f} TFLOP/s, {det / dflt:.2f}× this run's default ({dflt:.0f}); on the Triton kernels in "
            f"runs 17 and 18 it ran at {d17:.0f} and {d18:.0f}, {d17 / f17:.2f}× and {d18 / f18:.2f}× theirs "
            f"({f17:.0f} and {f18:.0f})") in text
    moved = round(100 * (1 - dflt / min(f17, f18)))
    assert f"(the default moved by {moved} % between them)" in text
    assert (f"deterministic forward+backward {det:.0f} TFLOP/s, {det / dflt:.2f}× the same run's default ({dflt:.0f}), "
            f"against {d17:.0f} and {d18:.0f} on the Triton kernels in runs 17 and 18 ({d17 / f17:.2f}× and "
            f"{d18 / f18:.2f}× defaults of {f17:.0f} and {f18:.0f})") in notes
    gain = sorted(100 * (det / d - 1) for d in (d17, d18))
    assert f"{gain[0]:.0f}–{gain[1]:.0f} %, is within what the default moved between runs ({moved} %)" in notes
    assert (f"D = 128 {det:.0f} TFLOP/s (variants run 19) against {d17:.0f} and {d18:.0f} on the Triton kernels (runs "
            "17 and 18)") in src


def test_results_runs_20_and_21_are_the_recorded_ones():
    """RESULTS.md's variants runs 20 and 21 and variants-sweep varlen run 6 (the packed forward taking its tiles from a
    counter; both deterministic routes): the tables as the scripts render them from the recorded files, every
    number the text, NOTES-prefill v24, docs/variants.md and the switches' comments quote, and the switches as the
    text says (``PACKED_DET`` (128,), the Gluon entry at D = 128 only, the dynamic build; ``PACKED``, off then, is on
    since the checks of the window-sweep runs 4 and 5 section)."""
    vb = load_script("benchmarks/variants.py")
    vs = load_script("benchmarks/variants_sweep.py")
    from attnlab.gpu import config as gc
    from attnlab.gpu import prefill_gluon, prefill_gluon_bwd

    results = (ROOT / "benchmarks" / "RESULTS.md").read_text()
    section = results[results.index("### Variants runs 20 and 21"):results.index("### Variants run 19")]
    text = _flat(section)
    notes = _notes("v24")
    doc = _flat((ROOT / "docs" / "variants.md").read_text())
    src_f = " ".join((ROOT / "src" / "attnlab" / "gpu" / "prefill_gluon.py").read_text().replace("#", "").split())
    src_b = " ".join((ROOT / "src" / "attnlab" / "gpu" / "prefill_gluon_bwd.py").read_text().replace("#", "").split())
    src_c = " ".join((ROOT / "src" / "attnlab" / "gpu" / "config.py").read_text().replace("#", "").split())
    data = ROOT / "benchmarks" / "data"
    sweep = json.loads((data / "variants-sweep-h200-varlen-run6.json").read_text())
    assert vs.markdown(sweep).rstrip("\n") in section
    routes = {(20, "triton", "triton"): "gluon-det-triton", (20, "triton", "gluon"): "gluon-det-gluon",
              (20, "dynamic", "triton"): "gluon-fwd-gluon-dynamic",
              (21, "dynamic", "triton"): "gluon-fwd-gluon-dynamic-det-triton",
              (21, "dynamic", "gluon"): "gluon-fwd-gluon-dynamic-det-gluon"}
    tf = {}
    for (run, fwd, det), name in routes.items():
        rows = json.loads((data / f"variants-h200-varlen-run{run}-{name}.json").read_text())["rows"]
        tag = f"run {run}, {'Triton' if fwd == 'triton' else 'dynamic'} forward, {det.capitalize()} det."
        for line in vb.report(rows).splitlines()[2:]:
            assert line.replace("| varlen |", f"| varlen ({tag}) |", 1) in section, line
        tf[run, fwd, det] = {(r["D"], r["pass_"], r["provider"]): r["tflops"] for r in rows if "tflops" in r}
        assert all(r["packed_fwd"] == ("library" if fwd == "triton" else "gluon-dynamic") for r in rows
                   if "packed_fwd" in r)

    def sweep_of(D, kind):
        for r in sweep:
            c = r["config"]
            if r["D"] != D:
                continue
            if kind == "triton" and r["kernel"] == "triton":
                return r["tflops"]
            if r["kernel"] == "gluon" and "block_m=128, block_n=128" in c and (
                    kind == "grid" and "persistent=False" in c or kind == "static" and "persistent=True" in c
                    and "dynamic=False" in c or kind == "dynamic" and "dynamic=True" in c):
                return r["tflops"]
        raise KeyError((D, kind))

    sw = {(D, k): sweep_of(D, k) for D in (64, 128) for k in ("triton", "grid", "static", "dynamic")}
    assert max(r["tflops"] for r in sweep if r["D"] == 64 and r["kernel"] == "gluon") < sw[64, "triton"]

    def span(vals):
        lo, hi = f"{min(vals):.0f}", f"{max(vals):.0f}"
        return lo if lo == hi else f"{lo}–{hi}"

    dyn = [k for k in tf if k[1] == "dynamic"]
    tri = [k for k in tf if k[1] == "triton"]
    fwd_dyn = span([tf[k][128, "fwd", "attnlab"] for k in dyn])
    fwd_tri = span([tf[k][128, "fwd", "attnlab"] for k in tri])
    fb_dyn = span([tf[k][128, "fwd_bwd", "attnlab"] for k in dyn])
    fb_tri = span([tf[k][128, "fwd_bwd", "attnlab"] for k in tri])
    x_dyn = [tf[k][128, "fwd_bwd", "attnlab"] / tf[k][128, "fwd_bwd", "flex"] for k in dyn]
    x_tri = {f"{tf[k][128, 'fwd_bwd', 'attnlab'] / tf[k][128, 'fwd_bwd', 'flex']:.2f}" for k in tri}
    assert (f"ran at {sw[128, 'dynamic']:.0f} TFLOP/s at D = 128 against {sw[128, 'grid']:.0f} for the grid kernel, "
            f"{sw[128, 'static']:.0f} with its tiles dealt out in turns and {sw[128, 'triton']:.0f} for the Triton kernel "
            f"in the sweep, and at {fwd_dyn} against {fwd_tri} in the varlen rows; at D = 64 at {sw[64, 'dynamic']:.0f} "
            f"against {sw[64, 'triton']:.0f} for the Triton kernel ({span([tf[k][64, 'fwd', 'attnlab'] for k in dyn])} "
            f"against {span([tf[k][64, 'fwd', 'attnlab'] for k in tri if k[2] == 'gluon'])} in the rows)") in text
    assert (f"Forward+backward at D = 128: {fb_dyn} TFLOP/s against {fb_tri} on the Triton forward "
            f"({min(x_dyn):.2f}–{max(x_dyn):.2f}× FlexAttention against {x_tri.pop()}×)") in text and not x_tri
    det = {k: (tf[k][128, "fwd_bwd", "attnlab-det"], tf[k][128, "fwd_bwd", "attnlab-det"]
               / tf[k][128, "fwd_bwd", "attnlab"]) for k in tf}
    g20, t20 = det[20, "triton", "gluon"], det[20, "triton", "triton"]
    g21, t21 = det[21, "dynamic", "gluon"], det[21, "dynamic", "triton"]
    assert g20[0] > t20[0] and g21[0] > t21[0]
    assert (f"{g20[0]:.0f} against {t20[0]:.0f} TFLOP/s with the Triton forward (run 20, {g20[1]:.2f}× and {t20[1]:.2f}× "
            f"the route's default) and {g21[0]:.0f} against {t21[0]:.0f} with the dynamic forward (run 21, "
            f"{g21[1]:.2f}× and {t21[1]:.2f}×); at D = 64 they ran level "
            f"({span([tf[k][64, 'fwd_bwd', 'attnlab-det'] for k in tf])})") in text
    assert f"run at {g20[1]:.2f}× the default, inside the issue's 15 %" in text and g20[1] >= 0.85
    # NOTES v24
    assert (f"{sw[128, 'dynamic']:.0f} TFLOP/s against {sw[128, 'grid']:.0f} for the grid kernel and "
            f"{sw[128, 'triton']:.0f} for the Triton kernel (sweep), {fwd_dyn} against {fwd_tri} in the varlen rows of "
            f"runs 20 and 21: +{round(100 * (sw[128, 'dynamic'] / sw[128, 'grid'] - 1))} % over the grid kernel") in notes
    assert (f"At D = 64 {sw[64, 'dynamic']:.0f} against {sw[64, 'triton']:.0f} (Triton)" in notes
            and f"({sw[128, 'static']:.0f} with its turns fixed)" in notes
            and f"Forward+backward at D = 128 {fb_dyn} against {fb_tri}" in notes)
    assert (f"in both calls ({g20[0]:.0f} against {t20[0]:.0f}, {g21[0]:.0f} against {t21[0]:.0f}; "
            f"{g20[1]:.2f}–{g21[1]:.2f}× the default against {t21[1]:.2f}–{t20[1]:.2f}×)") in notes
    # docs and the switches' comments
    assert (f"it ran at {sw[128, 'dynamic']:.0f} against the Triton kernel's {sw[128, 'triton']:.0f} (sweep run 6; "
            f"{fwd_dyn} against {fwd_tri} in variants runs 20 and 21), forward+backward {fb_dyn} against {fb_tri}; at "
            f"D = 64 it stayed behind the Triton kernel ({sw[64, 'dynamic']:.0f} against {sw[64, 'triton']:.0f})") in doc
    assert (f"at {g20[0]:.0f} and {g21[0]:.0f} TFLOP/s against {t20[0]:.0f} and {t21[0]:.0f} on the Triton kernels in "
            f"the same calls (variants runs 20 and 21), {g20[1]:.2f}–{g21[1]:.2f}× the default route's speed") in doc
    assert (f"ran {sw[128, 'dynamic']:.0f} against {sw[128, 'triton']:.0f} and {sw[128, 'grid']:.0f} for the grid "
            f"kernel at D = 128 (sweep run 6; {fwd_dyn.replace('–', '-')} against {fwd_tri.replace('–', '-')} in "
            f"variants runs 20 and 21) and {sw[64, 'dynamic']:.0f} against {sw[64, 'triton']:.0f} at D = 64") in src_f
    assert (f"forward+backward at D = 128 {fb_dyn.replace('–', '-')} against {fb_tri.replace('–', '-')} on the "
            "Triton forward") in src_f
    assert (f"{sw[128, 'dynamic']:.0f} TFLOP/s against {sw[128, 'grid']:.0f} for the grid kernel, "
            f"{sw[128, 'static']:.0f} with its tiles dealt out in turns and {sw[128, 'triton']:.0f} for the Triton "
            f"kernel") in src_c and f"At D = 64 the best Gluon build ({sw[64, 'dynamic']:.0f}) stayed behind the " \
        f"Triton kernel ({sw[64, 'triton']:.0f})" in src_c
    assert (f"{g20[0]:.0f} against {t20[0]:.0f} (run 20) and, with the packed forward taking its tiles from a counter, "
            f"{g21[0]:.0f} against {t21[0]:.0f} (run 21, {g21[1]:.2f}x and {t21[1]:.2f}x that route's default)") in src_b
    assert prefill_gluon.PACKED is True and prefill_gluon_bwd.PACKED_DET == (64, 128)
    assert set(gc._GLUON_PACKED_FWD) == {128} and gc._GLUON_PACKED_FWD[128].dynamic
    assert gc._GLUON_PACKED_FWD[128].persistent and gc._GLUON_PACKED_FWD[128].block_m == 128


def test_results_run_22_and_window_sweeps_4_and_5_are_the_recorded_ones():
    """RESULTS.md's variants run 22 and variants-sweep window runs 4 and 5 (the packed Gluon forward switched on, the
    window forward's persistent builds): the tables as the scripts render them from the recorded files, the checks
    table as the recorded logs say, every number the text and NOTES-prefill v25 quote, and the switches as the text
    says (``PACKED`` on, the window entries kept)."""
    import re

    vb = load_script("benchmarks/variants.py")
    vs = load_script("benchmarks/variants_sweep.py")
    from attnlab.gpu import prefill_gluon

    results = (ROOT / "benchmarks" / "RESULTS.md").read_text()
    section = results[results.index("### Variants run 22,"):results.index("### Variants runs 20 and 21")]
    text = _flat(section)
    notes = _notes("v25")
    data = ROOT / "benchmarks" / "data"
    logs = data / "packed-fwd-checks"
    sweeps = {r: json.loads((data / f"variants-sweep-h200-window-run{r}.json").read_text()) for r in (4, 5)}
    for sweep in sweeps.values():
        assert vs.markdown(sweep).rstrip("\n") in section
    rows = json.loads((data / "variants-h200-varlen-run22-library.json").read_text())["rows"]
    assert vb.report(rows).rstrip("\n") in section
    assert all(r["packed_fwd"] == "library" for r in rows if "packed_fwd" in r)

    # the checks table, row by row, from the logs
    def pytest_summary(name):
        line = [x for x in (logs / name).read_text().splitlines() if re.search(r"\d+ passed", x)][-1]
        counts = dict((k, int(n)) for n, k in re.findall(r"(\d+) (passed|skipped|failed)", line))
        return ", ".join(f"{counts[k]} {k}" for k in ("passed", "skipped", "failed") if k in counts)

    for name in ("dynamic-tests-call1.log", "suite-call1.log", "suite-call3.log", "dynamic-tests-call4.log"):
        assert re.search(rf"`{re.escape(name)}`\) \| \d \| {pytest_summary(name)} \|", section), name
    for name in ("suite-call1.log", "suite-call3.log"):
        failed = re.findall(r"^FAILED (\S+)", (logs / name).read_text(), re.M)
        assert {f.split("::")[1] for f in failed} == {"test_packed_calls_reach_the_gluon_forward_without_softcap_or_alibi"}
    mem = re.search(r"ERROR SUMMARY: (\d+) errors", (logs / "sanitize-memcheck.log").read_text()).group(1)
    assert f"(`sanitize-memcheck.log`) | 2 | {mem} errors |" in section and mem == "0"
    race = (logs / "sanitize-racecheck.log").read_text()
    err, warn = re.search(r"RACECHECK SUMMARY: \d+ hazards displayed \((\d+) errors, (\d+) warnings\)", race).groups()
    assert f"(`sanitize-racecheck.log`) | 2 | {err} errors, {warn} warnings |" in section
    kernels = set(re.findall(r"access at (\w+)\+0x", race))
    assert kernels == {"_attn_fwd_gluon_wsp", "_attn_bwd_gluon_ws"}  # the forward's and the backward's, as the text says
    rounds = re.search(r"dynamic: (\d+) rounds of 5 cases, no fault", (logs / "repeat-call2.log").read_text()).group(1)
    assert f"the five cases {rounds} rounds in a row on the dynamic forward" in text
    # the text's numbers
    tf = {(r["D"], r["pass_"], r["provider"]): r["tflops"] for r in rows if "tflops" in r}
    x = {k: tf[k[0], k[1], "attnlab"] / tf[k[0], k[1], "flex"] for k in ((64, "fwd_bwd"), (128, "fwd"), (128, "fwd_bwd"))}
    det = tf[128, "fwd_bwd", "attnlab-det"] / tf[128, "fwd_bwd", "attnlab"]
    assert (f"at D = 128 ran forward at {tf[128, 'fwd', 'attnlab']:.0f} TFLOP/s ({x[128, 'fwd']:.2f}× FlexAttention) and "
            f"forward+backward at {tf[128, 'fwd_bwd', 'attnlab']:.0f} ({x[128, 'fwd_bwd']:.2f}×); the deterministic route "
            f"at {tf[128, 'fwd_bwd', 'attnlab-det']:.0f}, {det:.2f}× the default, just outside the issue's 15 %") in text
    assert det < 0.85
    assert (f"{tf[64, 'fwd', 'attnlab']:.0f} forward and {tf[64, 'fwd_bwd', 'attnlab']:.0f} forward+backward "
            f"({x[64, 'fwd_bwd']:.2f}×)") in text

    def pick(run, D, block_m, persistent, dynamic, table=False):
        got = [r["tflops"] for r in sweeps[run] if r["D"] == D and "gluon=True" in r["config"]
               and f"block_m={block_m}," in r["config"] and f"persistent={persistent}" in r["config"]
               and f"dynamic={dynamic}" in r["config"] and (not table or r["current"])]
        assert len(got) == 1, (run, D, block_m, persistent, dynamic)
        return got[0]

    table64 = [pick(r, 64, 192, False, False, table=True) for r in (4, 5)]
    pers64 = [pick(r, 64, 128, True, False) for r in (4, 5)]
    dyn64 = [pick(r, 64, 128, True, True) for r in (4, 5)]
    table128, dyn128 = pick(5, 128, 128, True, False, table=True), pick(5, 128, 128, True, True)
    gains = [100 * (p / t - 1) for p, t in zip(pers64, table64)]
    assert (f"at D = 64 the 128-row persistent build ran at {pers64[0]:.0f} and {pers64[1]:.0f} TFLOP/s against "
            f"{table64[0]:.0f} and {table64[1]:.0f} for the table's 192-row grid kernel (+{gains[0]:.1f} % and "
            f"+{gains[1]:.1f} %), its dynamic twin at {dyn64[0]:.0f} and {dyn64[1]:.0f}; at D = 128 the dynamic build ran "
            f"at {dyn128:.0f} against {table128:.0f} for the table's persistent build "
            f"(+{100 * (dyn128 / table128 - 1):.1f} %, one run)") in text
    assert all(0 < g < 5 for g in gains) and dyn128 / table128 < 1.05
    flex = {r["D"]: r["tflops"] for r in json.loads((data / "variants-h200-window-gluon-run4.json").read_text())["rows"]
            if r["variant"] == "window" and r["pass_"] == "fwd" and r["provider"] == "flex"}
    assert f"1.3× FlexAttention's {flex[64]:.0f} in variants run 4 would be {1.3 * flex[64]:.0f}" in text
    assert max(r["tflops"] for r in sweeps[4] + sweeps[5] if r["D"] == 64) < 1.3 * flex[64]
    doc = _flat((ROOT / "docs" / "variants.md").read_text())
    assert (f"(variants run 22) packed batches at D = 128 ran forward at {tf[128, 'fwd', 'attnlab']:.0f} TFLOP/s and "
            f"forward+backward at {tf[128, 'fwd_bwd', 'attnlab']:.0f}, {x[128, 'fwd']:.2f}× and {x[128, 'fwd_bwd']:.2f}× "
            "FlexAttention") in doc
    assert (f"(variants run 22) {tf[128, 'fwd_bwd', 'attnlab-det']:.0f} against {tf[128, 'fwd_bwd', 'attnlab']:.0f}, "
            f"{det:.2f}×, at the edge of the 15 % a deterministic backward may cost") in doc
    # NOTES v25 quotes the same
    assert (f"{tf[128, 'fwd', 'attnlab']:.0f} TFLOP/s forward and {tf[128, 'fwd_bwd', 'attnlab']:.0f} "
            f"forward+backward at D = 128") in notes and f"{err} errors" in notes
    # the switches: the packed forward on, the window entries as the sweeps' table rows
    assert prefill_gluon.PACKED is True
    import torch

    from attnlab.gpu.config import default_fwd_config

    for D in (64, 128):  # the sweeps' (table) rows are the window's forward entries still, at D = 64 as the
        entry = default_fwd_config(D, True, torch.device("cuda"))  # persistent build since fwd-switches runs 17-20
        if D == 64:
            entry = dataclasses.replace(entry, persistent=False)
        assert {r["config"] for r in sweeps[5] if r["D"] == D and r["current"]} == {str(entry)}


def test_results_sweep_7_is_the_recorded_one():
    """RESULTS.md's variants-sweep varlen run 7 (the packed Gluon forward with the next sequence's values set to 0): the
    table as the script renders it, the tests' log as quoted, the numbers the text, NOTES v26 and docs/variants.md
    quote against sweep run 6."""
    import re

    vs = load_script("benchmarks/variants_sweep.py")
    results = (ROOT / "benchmarks" / "RESULTS.md").read_text()
    section = results[results.index("### Variants-sweep varlen run 7"):results.index("### Variants run 22,")]
    text = _flat(section)
    notes = _notes("v26")
    doc = _flat((ROOT / "docs" / "variants.md").read_text())
    data = ROOT / "benchmarks" / "data"
    runs = {r: json.loads((data / f"variants-sweep-h200-varlen-run{r}.json").read_text()) for r in (6, 7)}
    assert vs.markdown(runs[7]).rstrip("\n") in section

    def at(run, kind):
        got = [r["tflops"] for r in runs[run] if r["D"] == 128 and (
            kind == "triton" and r["kernel"] == "triton"
            or kind != "triton" and r["kernel"] == "gluon" and "block_m=128, block_n=128" in r["config"]
            and (kind == "grid" and "persistent=False" in r["config"] or kind == "dynamic" and "dynamic=True" in r["config"]))]
        assert len(got) == 1, (run, kind)
        return got[0]

    d7, d6, t7, t6, g7, g6 = (at(r, k) for k in ("dynamic", "triton", "grid") for r in (7, 6))
    assert [r["current"] for r in runs[7] if r["tflops"] == d7] == [True]
    assert (f"ran at {d7:.0f} TFLOP/s against {d6:.0f} in sweep run 6 without the zeroing, the Triton kernel at "
            f"{t7:.0f} against {t6:.0f}: no cost that a sweep can see. The grid kernel ran at {g7:.0f} against "
            f"{g6:.0f}") in text
    assert abs(d7 / d6 - 1) < 0.02
    log = (data / "packed-fwd-checks" / "dynamic-tests-call5.log").read_text()
    summary = re.search(r"(\d+) passed, (\d+) skipped", log).groups()
    assert f"({summary[0]} passed, {summary[1]} skipped:" in text and "FAILED" not in log
    assert f"the entry at {d7:.0f} TFLOP/s against {d6:.0f} in run 6" in notes
    assert f"variants-sweep varlen run 7: the entry at {d7:.0f} TFLOP/s with it, {d6:.0f} in run 6 without" in doc


def test_results_runs_23_and_24_and_the_det_probes_are_the_recorded_ones():
    """RESULTS.md's variants runs 23 and 24 and packed-det probe runs 1 and 2 (the deterministic packed backward
    taken apart, the writer warp at the loader's registers, ``ZERO_PAST`` measured, the window forward counted): the
    tables as the scripts render them from the recorded files, the checks as the logs say, every number the text,
    NOTES-prefill v27, docs/variants.md and the switches' comments quote, and the switches as the text says."""
    import re

    vb = load_script("benchmarks/variants.py")
    probe = load_script("benchmarks/packed_probe.py")
    stalls = load_script("benchmarks/ncu_stalls.py")
    from attnlab.gpu import prefill_gluon_bwd as gb

    results = (ROOT / "benchmarks" / "RESULTS.md").read_text()
    section = results[results.index("### Variants runs 23 and 24,"):results.index("### Variants-sweep varlen run 7")]
    text = _flat(section)
    notes = _notes("v27")
    doc = _flat((ROOT / "docs" / "variants.md").read_text())
    src = " ".join((ROOT / "src" / "attnlab" / "gpu" / "prefill_gluon_bwd.py").read_text().replace("#", " ").split())
    data = ROOT / "benchmarks" / "data"
    runs = {name: json.loads((data / f"variants-h200-{name}.json").read_text())["rows"]
            for name in ("varlen-run23-zero-off", "varlen-run23-zero-on", "varlen-run24", "det-run24")}
    for rows in runs.values():
        assert vb.report(rows).rstrip("\n") in section
    probes = {r: json.loads((data / f"packed-det-probe-h200-run{r}.json").read_text()) for r in (1, 2)}
    for rows in probes.values():
        assert probe.det_report(rows) in section

    def tf(run, D, pass_, provider):
        return next(r["tflops"] for r in runs[run] if (r["D"], r["pass_"], r["provider"]) == (D, pass_, provider))

    # run 23: the switch off and on (the NOTES table), D = 128
    for state in ("off", "on"):
        run = f"varlen-run23-zero-{state}"
        row = (f"| `ZERO_PAST` {state} | {tf(run, 128, 'fwd', 'attnlab'):.0f} | {tf(run, 128, 'fwd_bwd', 'attnlab'):.0f} "
               f"| {tf(run, 128, 'fwd_bwd', 'attnlab-det'):.0f} |")
        assert row in notes, row
    off, on = tf("varlen-run23-zero-off", 128, "fwd_bwd", "attnlab"), tf("varlen-run23-zero-on", 128, "fwd_bwd", "attnlab")
    assert f"so −{(1 - on / off) * 100:.0f} % on forward+backward" in notes
    assert f"forward+backward at D = 128 fell from {off:.0f} to {on:.0f} TFLOP/s" in doc
    assert f"fell from {off:.0f} to {on:.0f} TFLOP/s: off" in src and gb.ZERO_PAST is False
    # the probes
    p = {(r, row["variant"]): row for r, rows in probes.items() for row in rows}
    det1, nt1, rot1 = (p[1, v] for v in ("deterministic", "deterministic, no turns (measurement)",
                                         "deterministic, staggered walks, turns in arrival order"))
    det2, w48, nt2, base2 = (p[2, v] for v in ("deterministic", "deterministic, writer at 48 registers",
                                                "deterministic, no turns (measurement)", "default"))
    assert f"the same speed (0.929 against 0.934 ms; {det1['sem']['waits']} waits polled, {det1['sem']['polls']} polls" \
           in text and (f"{nt1['ms']:.3f}", f"{det1['ms']:.3f}") == ("0.929", "0.934")
    assert f"slower still ({rot1['ms']:.3f} ms, {rot1['sem']['waits']:,} waits)" in text
    assert f"The deterministic build: {det2['ms']:.3f} ms against {w48['ms']:.3f} with the writer at 48" in text
    assert f"{det2['x_default']:.3f}× the default backward alone (run 1: {det1['x_default']:.3f}×)" in text
    assert (f"Probe run 2: {det2['ms']:.3f} against {w48['ms']:.3f} ms at 48 in the same rounds, "
            f"{det2['x_default']:.3f}× the default (now unstaggered, {base2['ms']:.3f}); without waits {nt2['ms']:.3f}") \
        in notes
    assert all(row.get("bit_identical", True) and row.get("sem", {}).get("given_up", 0) == 0 for row in p.values())
    assert f"the deterministic backward alone ran {det2['ms']:.3f} ms against {w48['ms']:.3f}" in doc
    assert f"{det2['ms']:.3f} ms against {w48['ms']:.3f} at 48 in the same rounds" in src and gb.DET_WRITER_REGS == 24
    assert "(1.21 ms)" in doc and f"{rot1['ms']:.2f}-{p[2, rot1['variant']]['ms']:.2f} ms" in src
    assert gb.PACKED_DET_ROTATE is False
    zp = p[2, "default, ZERO_PAST on"]
    assert (f"`ZERO_PAST` in the same process: {zp['ms']:.3f} against {base2['ms']:.3f} ms, "
            f"−{(1 - base2['ms'] / zp['ms']) * 100:.0f} %") in notes
    # run 24: the library's rows and the dense ordered build's
    d, dflt = tf("varlen-run24", 128, "fwd_bwd", "attnlab-det"), tf("varlen-run24", 128, "fwd_bwd", "attnlab")
    assert f"deterministic forward+backward {d:.0f} TFLOP/s, {d / dflt:.2f}× the default" in text
    assert f"forward+backward {d:.0f} TFLOP/s against the default's {dflt:.0f}, {d / dflt:.2f}×" in doc
    assert f"{d:.0f} against the default's {dflt:.0f}, {d / dflt:.2f}x (variants run 24" in src
    assert d / dflt >= 0.85  # the issue's 15 %
    det_tf = {(r["variant"], r["D"]): r["tflops"] for r in runs["det-run24"] if r["provider"] == "attnlab-det"}
    dense = [det_tf[r["variant"], r["D"]] / r["tflops"] for r in runs["det-run24"] if r["provider"] == "attnlab"]
    assert len(dense) == 4 and f"The dense calls' deterministic rows: {min(dense):.2f}–{max(dense):.2f}×" in text
    # the checks, from the logs
    logs = data / "packed-det-checks"

    def summary(name):
        line = [x for x in (logs / name).read_text().splitlines() if re.search(r"\d+ passed", x)][-1]
        return dict((k, int(n)) for n, k in re.findall(r"(\d+) (passed|skipped|failed|xfailed)", line))

    c2, c3, c4, c5 = (summary(n) for n in ("tests-call2.log", "tests-call3.log", "suite-call4.log",
                                            "packed-tests-call5.log"))
    assert f"call 2's tests, {c2['passed']} passed and the expected failure" in text and c2.get("failed", 0) == 0
    assert f"call 3's, {c3['passed']} passed, {c3['skipped']} skipped, the expected failure, and one failure" in text
    assert c3["failed"] == 1 and "test_deterministic_builds_add_dq_from_a_writer_warp" in (logs / "tests-call3.log").read_text()
    assert f"the whole GPU suite, {c4['passed']} passed, {c4['skipped']} skipped, the expected failure and two failures" \
        in text and c4["failed"] == 2 and c4["xfailed"] == 1
    assert c5.get("failed", 0) == 0 and c5["passed"] > 0
    # the window forward's counters and ledger
    for prov in ("attnlab", "flex"):
        page = (data / f"ncu-window-h200-{prov}.txt").read_text()
        dur = re.search(r"gpu__time_duration.sum\s+ns\s+([\d,]+)", page).group(1)
        assert f"| {dur} |" in section, prov
    led = stalls.ledger(*stalls.read_source_csv(data / "ncu-window-sass-h200-run1.csv.gz"))
    share = {k: v / led["total"] for k, v in led["by_opcode"].items()}
    pct = {k: f"{v * 100:.0f} %" for k, v in share.items()}
    assert (f"the exponentials (`MUFU`, {pct['MUFU']} of samples) and the row maxima (`FMNMX`, {pct['FMNMX']}) "
            f"against {pct['HGMMA']} on the `HGMMA`s") in notes
    assert abs(share["MUFU"] + share["FMNMX"] - 1 / 3) < 0.02  # "together a third of all samples"
    from collections import Counter

    by_op = {}  # each instruction's three largest reasons (the ledger's), summed by opcode
    for ins in led["instructions"]:
        words = ins["source"].split()
        op = (words[1] if words[0].startswith("@") else words[0]).split(".")[0]
        by_op.setdefault(op, Counter()).update(ins["reasons"])
    mufu, fmnmx = by_op["MUFU"], by_op["FMNMX"]
    assert [k for k, _ in mufu.most_common(2)] == ["stall_wait", "stall_mio"] and fmnmx.most_common(1)[0][0] == "stall_wait"
    assert (f"fixed-latency dependency ({mufu['stall_wait']:,.0f}: the exponent computed just before) and the MIO queue "
            f"({mufu['stall_mio']:,.0f}: the exponentials' unit full), the `FMNMX`s' waits on their chain "
            f"({fmnmx['stall_wait']:,.0f})") in notes


def test_results_det_probe_3_and_the_exp_poly_runs_are_the_recorded_ones():
    """RESULTS.md's packed-det probe run 3 and exp-poly runs 1 and 2 (``DET_EARLY_TURN`` and ``EXP_POLY`` measured):
    the tables as the scripts render them from the recorded files, every number the text, NOTES-prefill v28,
    docs/variants.md and the switches' comments quote, the test counts as the logs say, and both switches off."""
    probe = load_script("benchmarks/packed_probe.py")
    ep = load_script("benchmarks/exp_poly.py")
    from attnlab.gpu import prefill_gluon as pg
    from attnlab.gpu import prefill_gluon_bwd as gb

    results = (ROOT / "benchmarks" / "RESULTS.md").read_text()
    section = results[results.index("### Packed-det probe run 3, exp-poly runs 1 and 2"):
                      results.index("### Variants runs 23 and 24,")]
    text, notes, doc = _flat(section), _notes("v28"), _flat((ROOT / "docs" / "variants.md").read_text())
    data = ROOT / "benchmarks" / "data"
    p3 = json.loads((data / "packed-det-probe-h200-run3.json").read_text())
    assert probe.det_report(p3) in section
    runs = {r: json.loads((data / f"exp-poly-h200-run{r}.json").read_text())["rows"] for r in (1, 2)}
    for rows in runs.values():
        assert ep.report(rows) in section
    # the early turns
    v = {row["variant"]: row for row in p3}
    det, early = v["deterministic"], v["deterministic, turns waited for first"]
    assert f"The early turns ran {early['ms']:.3f} ms against {det['ms']:.3f} without them" in text
    assert f"waits polled {early['sem']['waits']} times against {det['sem']['waits']}" in text
    assert (f"{early['ms']:.3f} against {det['ms']:.3f} ms in the same rounds, {early['x_default']:.3f}× against "
            f"{det['x_default']:.3f}×; its waits polled {early['sem']['waits']} times against {det['sem']['waits']}") in notes
    assert early["ms"] > det["ms"] and early["bit_identical"] and early["sem"]["given_up"] == 0
    src_b = " ".join((ROOT / "src" / "attnlab" / "gpu" / "prefill_gluon_bwd.py").read_text().replace("#", " ").split())
    assert f"{early['ms']:.3f} ms against {det['ms']:.3f} without it" in src_b and gb.DET_EARLY_TURN is False
    assert f"ran {early['ms']:.3f} ms against {det['ms']:.3f}" in doc
    # the polynomial exponentials: every split slower than none but D = 128 causal at 1 in 8, within noise
    P = {(r["row"], r["D"], r["split"]): r for r in runs[2]}
    assert all(r["vs_first"] < 1.0 for r in runs[2] if r["split"] and (r["row"], r["D"], r["split"]) != ("causal", 128, 1))
    assert P["causal", 128, 1]["vs_first"] < 1.02
    w1, w4 = P["window", 64, 1]["vs_first"], P["window", 64, 4]["vs_first"]
    d64 = [P[r, 64, 1]["vs_first"] for r in ("causal", "full")]
    for quote in (f"the D = 64 window forward {w1:.3f}× at 1 in 8 and {w4:.3f}× at 4",
                  f"the dense D = 64 rows {min(d64):.3f}–{max(d64):.3f}× at 1"):
        assert quote in text, quote
    assert f"the D = 64 window {w1:.3f}× at 1 in 8 and {w4:.3f}× at 4, dense D = 64 {min(d64):.3f}–{max(d64):.3f}× at 1" \
        in notes
    d128 = [P[r, 128, 1]["vs_first"] for r in ("window", "causal", "full")]
    assert f"D = 128 {min(d128):.3f}–{max(d128):.3f}× at 1" in notes
    src = " ".join((ROOT / "src" / "attnlab" / "gpu" / "prefill_gluon.py").read_text().replace("#", " ").split())
    assert (f"the D = 64 window forward {w1:.3f}x at 1 in 8 and {w4:.3f}x at 4, the dense D = 64 rows "
            f"{min(d64):.3f}-{max(d64):.3f}x at 1, D = 128 {min(d128):.2f}-{max(d128):.2f}x at 1") in src
    assert f"that row {w1:.3f}× at 1 in 8, {w4:.3f}× at 4" in doc
    assert pg.EXP_POLY == {64: 0, 128: 0}
    assert f"stays at {P['window', 64, 0]['x_peer']:.3f}× FlexAttention in this run" in text
    # run 1: slower still, its non-ftz exponentials; the test logs' counts
    assert all(r["vs_first"] < 0.96 for r in runs[1] if r["split"] and r["D"] == 64)
    logs = data / "exp-poly-checks"
    assert "4 failed, 84 passed" in (logs / "tests-run1.log").read_text()
    assert "88 passed" in (logs / "tests-run2.log").read_text().splitlines()[-1]
    assert "Its GPU tests: 84 passed and the 4 bit tests" in text and "88 GPU tests passed" in text
    assert "131 passed, 14 skipped, 1 xfailed" in (data / "packed-det-checks" / "tests-run3.log").read_text()


def test_exp_poly_benchmark_refuses_to_overwrite_and_reprints_a_run(tmp_path, capsys):
    """``benchmarks/exp_poly.py``: an existing ``--json`` file is refused before any work (exit 2, the file as it
    was), bad rounds likewise; ``--report`` prints a recorded run's table as RESULTS.md holds it."""
    import pytest

    ep = load_script("benchmarks/exp_poly.py")
    kept = tmp_path / "run.json"
    kept.write_text("mine")
    for argv in (["--json", str(kept)], ["--rounds", "0"]):
        with pytest.raises(SystemExit) as e:
            ep.main(argv)
        assert e.value.code == 2
    assert kept.read_text() == "mine"
    capsys.readouterr()
    assert ep.main(["--report", str(ROOT / "benchmarks" / "data" / "exp-poly-h200-run2.json")]) == 0
    assert capsys.readouterr().out.strip() in (ROOT / "benchmarks" / "RESULTS.md").read_text()


def test_results_row_max_runs_are_the_recorded_ones():
    """RESULTS.md's row-max runs 1 and 2 (the forward's row maximum as a tree, ``ROW_MAX_TREE``): the tables as
    ``benchmarks/row_max.py`` renders them from the recorded files, bit-identical outputs on every row, every number
    the text, NOTES-prefill v29, docs/variants.md and the switch's comment quote, the logs' test counts, and the
    switch off."""
    rm = load_script("benchmarks/row_max.py")
    from attnlab.gpu import prefill_gluon as pg

    results = (ROOT / "benchmarks" / "RESULTS.md").read_text()
    section = results[results.index("### Row-max runs 1 and 2"):results.index("### Packed-det probe run 3, exp-poly")]
    text, notes, doc = _flat(section), _notes("v29"), _flat((ROOT / "docs" / "variants.md").read_text())
    src = " ".join((ROOT / "src" / "attnlab" / "gpu" / "prefill_gluon.py").read_text().replace("#", " ").split())
    data = ROOT / "benchmarks" / "data"
    runs = {r: json.loads((data / f"row-max-h200-run{r}.json").read_text())["rows"] for r in (1, 2)}
    T = {}
    for r, rows in runs.items():
        assert rm.report(rows) in section
        assert all(x["identical"] for x in rows)
        assert {x["build"] for x in rows} == {"tree", "chain"}
        T |= {(r, x["row"], x["D"]): x["vs_chain"] for x in rows if x["build"] == "tree"}
    w64, f64 = [T[r, "window", 64] for r in (1, 2)], [T[r, "full", 64] for r in (1, 2)]
    noise = T[1, "varlen", 64]
    rest = [v for (r, row, D), v in T.items() if (row, D) not in (("window", 64), ("full", 64), ("varlen", 64))]
    assert max(w64) < 1.01 and max(f64) < 0.96 and noise > max(w64)
    assert (f"its {noise:.3f}× in run 1 is the noise of these rows. The tree was no faster where the softmax limits, "
            f"the D = 64 window forward ({w64[0]:.3f}× and {w64[1]:.3f}×), and slower on the dense D = 64 non-causal "
            f"row in both runs ({f64[0]:.3f}× and {f64[1]:.3f}×, every round); the other Gluon rows "
            f"{min(rest):.3f}–{max(rest):.3f}×") in text
    for r in (1, 2):  # every round of the dense D = 64 row slower with the tree
        full = {x["build"]: x for x in runs[r] if (x["row"], x["D"]) == ("full", 64)}
        assert max(full["chain"]["rounds"]) < min(full["tree"]["rounds"])
    r1_rest = [v for (r, row, D), v in T.items() if r == 1 and (row, D) not in (("window", 64), ("full", 64))]
    r2_128 = [T[2, row, 128] for row in ("window", "causal", "full")]
    assert (f"Run 1: the D = 64 window forward {w64[0]:.3f}×, dense D = 64 non-causal {f64[0]:.3f}×, the rest "
            f"{min(r1_rest):.3f}–{max(r1_rest):.3f}× (the {noise:.3f} a row both builds run on the Triton kernel") in notes
    assert (f"Run 2 repeated the window and dense rows: {w64[1]:.3f}× and {f64[1]:.3f}×, D = 128 "
            f"{min(r2_128):.3f}–{max(r2_128):.3f}×") in notes
    assert (f"the D = 64 window forward {min(w64):.2f}-{max(w64):.2f}x), slower on the dense D = 64 non-causal 4K row "
            f"({f64[0]:.2f}x in both runs), the other Gluon rows {min(rest):.2f}-{max(rest):.2f}x") in src
    assert round(f64[0], 2) == round(f64[1], 2)
    assert (f"no faster on that row (row-max runs 1 and 2: {w64[0]:.3f}× and {w64[1]:.3f}×) and slower on the dense "
            f"D = 64 row ({f64[0]:.3f}×, {f64[1]:.3f}×): off too") in doc
    peers = [x["x_peer"] for rows in runs.values() for x in rows if (x["row"], x["D"], x["build"]) == ("window", 64, "chain")]
    assert "(1.10–1.12× FlexAttention in these runs" in notes and 1.10 <= min(peers) and max(peers) < 1.125
    dense = [x["tflops"] for rows in runs.values() for x in rows if (x["row"], x["D"], x["build"]) == ("full", 64, "chain")]
    assert f"the shipped dense D = 64 non-causal {min(dense):.0f}–{max(dense):.0f})" in notes
    logs = data / "row-max-checks"
    assert "37 passed" in (logs / "tests-run1.log").read_text().splitlines()[-1]
    assert "404 passed, 7 skipped, 1 xfailed" in (logs / "tests-run2.log").read_text().splitlines()[-1]
    assert "37 passed" in text and "404 passed, 7 skipped, the expected failure" in text
    assert pg.ROW_MAX_TREE is False


def test_row_max_benchmark_refuses_to_overwrite_and_reprints_a_run(tmp_path, capsys):
    """``benchmarks/row_max.py``: an existing ``--json`` file is refused before any work (exit 2, the file as it was),
    bad rounds likewise; ``--report`` prints a recorded run's table as RESULTS.md holds it; the other build's source
    (``fwd_switches.switched_source``) is the library's with only the switch turned, a source without exactly one switch
is refused, and so is a switch value of another type than the library's."""
    import pytest

    rm = load_script("benchmarks/row_max.py")
    kept = tmp_path / "run.json"
    kept.write_text("mine")
    for argv in (["--json", str(kept)], ["--rounds", "0"]):
        with pytest.raises(SystemExit) as e:
            rm.main(argv)
        assert e.value.code == 2
    assert kept.read_text() == "mine"
    capsys.readouterr()
    assert rm.main(["--report", str(ROOT / "benchmarks" / "data" / "row-max-h200-run1.json")]) == 0
    assert capsys.readouterr().out.strip() in (ROOT / "benchmarks" / "RESULTS.md").read_text()
    fs = load_script("benchmarks/fwd_switches.py")
    src = (ROOT / "src" / "attnlab" / "gpu" / "prefill_gluon.py").read_text()
    other = fs.switched_source(src, {"ROW_MAX_TREE": True})
    diff = [(a, b) for a, b in zip(src.splitlines(), other.splitlines()) if a != b]
    assert diff == [("    _ROW_MAX_TREE = gl.constexpr(ROW_MAX_TREE)", "    _ROW_MAX_TREE = gl.constexpr(True)")]
    switch = "    _ROW_MAX_TREE = gl.constexpr(ROW_MAX_TREE)\n"
    for bad in (src.replace(switch, ""), src + switch):
        with pytest.raises(RuntimeError, match="no single switch ROW_MAX_TREE"):
            fs.switched_source(bad, {"ROW_MAX_TREE": True})
    assert fs.build_values("chain") == {} and fs.build_values("tree") == {"ROW_MAX_TREE": True}
    with pytest.raises(TypeError, match="RESCALE_TAU"):
        fs.BUILDS["bad"] = {"RESCALE_TAU": 8}
        try:
            fs.build_values("bad")
        finally:
            del fs.BUILDS["bad"]
    with pytest.raises(ValueError, match="build must be one of"):
        rm.use_build("fast")


def test_tile_builds_run_the_d64_entries_on_256_key_blocks_and_put_them_back():
    """``fwd_switches.py``'s tile builds (``n256``, ``n256p``): inside ``use_build`` every D = 64 entry of the Gluon
    forward's table (long causal and not, and the causal entry below 8K keys) takes 128 × 256 tiles, as a grid or
    persistent, its other fields kept, and the D = 128 entries stay; on the way out the tables are as they were. At
    D = 128 the builds are refused, by ``use_build`` and by the command line before any work."""
    import dataclasses

    import pytest
    import torch

    pytest.importorskip("triton")
    from attnlab.gpu import config as gc

    fs = load_script("benchmarks/fwd_switches.py")
    before = (dict(gc._GLUON_FWD_TABLE), dict(gc._GLUON_FWD_MID))
    for build, persistent in (("n256", False), ("n256p", True)):
        with fs.use_build(build, 64):
            for table, kept in zip((gc._GLUON_FWD_TABLE, gc._GLUON_FWD_MID), before):
                assert table.keys() == kept.keys()
                for key, cfg in table.items():
                    if key[0] == 64:
                        assert (cfg.block_m, cfg.block_n, cfg.num_stages, cfg.persistent) == (128, 256, 2, persistent)
                        assert dataclasses.replace(cfg, block_m=kept[key].block_m, block_n=kept[key].block_n,
                                                   num_stages=kept[key].num_stages, persistent=kept[key].persistent,
                                                   dynamic=kept[key].dynamic) == kept[key]
                    else:
                        assert cfg == kept[key]
            assert gc.default_fwd_config(64, True, torch.device("cuda"), 4096).block_n == 256
        assert (gc._GLUON_FWD_TABLE, gc._GLUON_FWD_MID) == before
    with pytest.raises(ValueError, match="D = 64's"):
        fs.use_build("n256", 128)
    with pytest.raises(SystemExit) as e:
        fs.main(["--builds", "shipped", "n256", "--D", "64", "128"])
    assert e.value.code == 2


def test_results_fwd_switches_runs_are_the_recorded_ones():
    """RESCALE_SKIP / RESCALE_TAU measured (RESULTS.md's fwd-switches runs 1 and 2): the tables as
    ``benchmarks/fwd_switches.py`` renders them from the recorded files, the skip's bits kept on every row, every range
    the text, NOTES-prefill v30, docs/variants.md and the switches' comment quote, the logs' test counts, and the
    switches off."""
    fs = load_script("benchmarks/fwd_switches.py")
    from attnlab.gpu import prefill_gluon as pg

    results = (ROOT / "benchmarks" / "RESULTS.md").read_text()
    section = results[results.index("### Fwd-switches runs 1 and 2"):results.index("### Row-max runs 1 and 2")]
    text, notes, doc = _flat(section), _notes("v30"), _flat((ROOT / "docs" / "variants.md").read_text())
    src = " ".join((ROOT / "src" / "attnlab" / "gpu" / "prefill_gluon.py").read_text().replace("#", " ").split())
    data = ROOT / "benchmarks" / "data"
    runs = {r: json.loads((data / f"fwd-switches-h200-run{r}.json").read_text())["rows"] for r in (1, 2)}
    X = {}
    for r, rows in runs.items():
        assert fs.report(rows) in section
        X |= {(r, x["build"], x["row"], x["D"]): x["vs_first"] for x in rows}
        assert all(x["max_diff"] == 0 for x in rows if x["build"] in ("shipped", "skip"))

    def span(run, build, D=None, fmt=".3f", sep="–", unit="×"):
        v = [x for (r, b, _, d), x in X.items() if r == run and b == build and (D is None or d == D)]
        return f"{min(v):{fmt}}{sep}{max(v):{fmt}}{unit}"

    skip, tau = span(1, "skip"), span(2, "tau8")
    st128_2, st128_1 = span(2, "skip+tau8", 128), span(1, "skip+tau8", 128)
    st64 = [x for (r, b, _, d), x in X.items() if b == "skip+tau8" and d == 64]
    st64 = f"{min(st64):.3f}–{max(st64):.3f}×"
    assert (f"kept the bits on every row and ran {skip}" in text and f"ran {tau}" in text
            and f"the D = 128 rows ran {st128_2} in run 2 and {st128_1} in run 1, the D = 64 rows {st64}" in text)
    assert (f"skip alone {skip} (bits kept), τ alone {tau}, skip + τ at D = 128 {st128_2} in run 2 (five rounds) and "
            f"{st128_1} in run 1, at D = 64 {st64}") in notes
    a = lambda s: s.replace("–", "-").replace("×", "x")  # noqa: E731
    assert (f"the skip alone {a(skip)} (bits kept), the bound alone {a(tau)}, both with the bound 8 at D = 128 "
            f"{a(st128_2)} (run 2) and {a(st128_1)} (run 1), at D = 64 {a(st64)}") in src
    w64 = [X[r, "skip+tau8", "window", 64] for r in (1, 2)]
    assert f"left that row at {w64[0]:.3f}× and {w64[1]:.3f}× (fwd-switches runs 1 and 2)" in doc
    assert min(X[2, "skip+tau8", row, 128] for row in ("window", "causal", "full")) > 1.0
    rs = {(row, D): x for (r, b, row, D), x in X.items() if b == "skip+tau8+rowsum"}
    rest = [x for k, x in rs.items() if k != ("window", 64)]
    assert (f"(the D = 64 window {rs['window', 64]:.3f}×; the other rows {min(rest):.3f}–{max(rest):.3f}×)"
            in notes)
    logs = data / "fwd-switches-checks"
    log1 = (logs / "tests-run1.log").read_text()
    assert "19 failed, 7 passed, 24 errors" in log1.splitlines()[-1]
    assert log1.count("AssertionError: skip+tau8+rowsum") == 16 and "19 failed, 7 passed, 24 errors" in text
    assert "50 passed" in (logs / "tests-run2.log").read_text().splitlines()[-1] and "(50 passed:" in text
    assert not hasattr(pg, "ROWSUM_MMA")


def test_results_long_keys_run_3_and_the_window_sweep_are_the_recorded_ones():
    """256-key blocks at D = 64 (fwd-switches run 3, variants-sweep window run 6): the table as ``fwd_switches.py``
    renders it, every range RESULTS, NOTES-prefill v31, docs/variants.md and the comment quote, the sweep's numbers, the
    GPU tests' count; and no table entry takes 256-key blocks."""
    import dataclasses

    import pytest

    pytest.importorskip("triton")
    from attnlab.gpu import config as gc

    fs = load_script("benchmarks/fwd_switches.py")
    results = (ROOT / "benchmarks" / "RESULTS.md").read_text()
    section = results[results.index("### Fwd-switches run 3, variants-sweep"):results.index("### Fwd-switches runs 1 and 2")]
    data = ROOT / "benchmarks" / "data"
    rows = json.loads((data / "fwd-switches-h200-run3.json").read_text())["rows"]
    assert fs.report(rows) in section
    x = {(r["row"], r["build"]): r["vs_first"] for r in rows}
    long = [v for (_, b), v in x.items() if b != "shipped"]
    assert max(long) < 0.8
    notes, doc = _notes("v31"), _flat((ROOT / "docs" / "variants.md").read_text())
    src = " ".join((ROOT / "src" / "attnlab" / "gpu" / "prefill_gluon.py").read_text().replace("#", " ").split())
    assert f"run 3): {min(long):.2f}-{max(long):.2f}x the shipped tiles" in src
    assert (f"{min(long):.2f}–{max(long):.2f}× the shipped tiles on every row (the window forward "
            f"{x['window', 'n256']:.3f}× as a grid and {x['window', 'n256p']:.3f}× persistent, causal 4 × 4K "
            f"{x['causal', 'n256']:.3f}× and {x['causal', 'n256p']:.3f}×, dense non-causal {x['full', 'n256']:.3f}× and "
            f"{x['full', 'n256p']:.3f}×)") in notes
    assert f"ran that row at {x['window', 'n256']:.3f}× (grid) and {x['window', 'n256p']:.3f}× (persistent)" in doc
    sweep = json.loads((data / "variants-sweep-h200-window-run6.json").read_text())
    t = {r["config"]: r["tflops"] for r in sweep}
    n256 = [f"{t[c]:.0f}" for c in t if "block_n=256" in c]
    table = [r["tflops"] for r in sweep if r["current"]]
    best128 = max(v for c, v in t.items() if "block_n=256" not in c)
    assert len(n256) == 3 and len(table) == 1
    text = _flat(section)
    assert (f"the table's entry (192 × 128) at {table[0]:.0f} TFLOP/s and the best 128-key build {best128:.0f}, put the "
            f"256-key builds at {n256[0]}, {n256[1]} and {n256[2]}") in text
    assert f"293–307 TFLOP/s against the table's {table[0]:.0f}" in notes and (n256[0], n256[1]) == ("293", "307")
    log = (data / "long-keys-checks" / "tests-run3.log").read_text().splitlines()[-1]
    assert "36 passed" in log and "36 passed" in text
    for table_ in (gc._GLUON_FWD_TABLE, gc._GLUON_FWD_MID, gc._GLUON_PACKED_FWD):
        assert all(dataclasses.asdict(c)["block_n"] <= 128 for c in table_.values())


def test_results_rescale_on_run_4_and_prefill_run_22_are_the_recorded_ones():
    """The rescale switches on at D = 128 (fwd-switches run 4, prefill run 22): the tables as their scripts render them,
    the gain's range and round pairs in RESULTS, NOTES-prefill v32, docs/variants.md and the switches' comment, the
    suite's counts from its logs, run 22's ranges against cuDNN and run 21; and the switches as shipped."""

    import pytest

    pytest.importorskip("triton")
    from attnlab.gpu import prefill_gluon as pg

    fs = load_script("benchmarks/fwd_switches.py")
    results = (ROOT / "benchmarks" / "RESULTS.md").read_text()
    section = results[results.index("### Run 22 and fwd-switches run 4"):results.index("### Fwd-persistent run 9")]
    text, notes, doc = _flat(section), _notes("v32"), _flat((ROOT / "docs" / "variants.md").read_text())
    src = " ".join((ROOT / "src" / "attnlab" / "gpu" / "prefill_gluon.py").read_text().replace("#", " ").split())
    data = ROOT / "benchmarks" / "data"
    rows = json.loads((data / "fwd-switches-h200-run4.json").read_text())["rows"]
    assert fs.report(rows) in section
    gain = [1 / r["vs_first"] for r in rows if r["build"] == "off"]
    span = f"{min(gain):.3f}–{max(gain):.3f}×"
    assert min(gain) > 1 and all(r["D"] == 128 for r in rows)
    assert f"by {100 * (min(gain) - 1):.1f}–{100 * (max(gain) - 1):.1f} % in the medians" in text
    assert f"{span} on the D = 128 window, packed, causal and dense rows" in notes
    assert f"a third run gave {span}" in doc and f"run 4: {span.replace('–', '-').replace('×', 'x')}" in src
    ship = {r["row"]: r["rounds"] for r in rows if r["build"] == "shipped"}
    off = {r["row"]: r["rounds"] for r in rows if r["build"] == "off"}
    won = sum(a < b for row in ship for a, b in zip(ship[row], off[row]))
    pairs = sum(len(v) for v in ship.values())
    assert f"Shipped faster in {won} of the {pairs} rounds' pairs" in text and f"({won} of {pairs} round pairs" in notes
    logs = data / "fwd-switches-checks"
    call1 = (logs / "suite-run4-call1.log").read_text()
    call2 = (logs / "suite-run4-call2.log").read_text().splitlines()[-1]
    progress = [ln for ln in call1.splitlines() if ln[:1] in (".", "s")]
    assert len(progress) > 10 and not any(c in ln for ln in progress for c in "FE") and "FAILED" not in call1
    assert call2.startswith("1116 passed, 49 skipped, 1 xfailed") and " failed" not in call2
    assert "1116 passed, 49 skipped, 1 expected failure" in text and "1116 passed, 1 expected failure" in notes
    lines = _prefill_report_rows("prefill-h200-run22.json")
    assert len(lines) == 16 and all(ln in section for ln in lines)

    def tflops(run):
        rs = json.loads((data / f"prefill-h200-run{run}.json").read_text())["rows"]
        return {(r["D"], r["causal"], r["N"], r["pass_"], r["provider"]): r["tflops"] for r in rs if "tflops" in r}

    t21, t22 = tflops(21), tflops(22)
    x = {k[:4]: v / t22[(*k[:4], "sdpa-cudnn")] for k, v in t22.items() if k[4] == "attnlab"}
    fwd = [v for k, v in x.items() if k[3] == "fwd"]
    both = [v for k, v in x.items() if k[3] == "fwd_bwd"]
    quote = f"forward {min(fwd):.2f}–{max(fwd):.2f}×, forward+backward {min(both):.2f}–{max(both):.2f}×"
    assert f"Against cuDNN: {quote}" in text
    assert f"forward {min(fwd):.2f}–{max(fwd):.2f}× cuDNN, forward+backward {min(both):.2f}–{max(both):.2f}×" in notes
    below = [k for k, v in x.items() if v < 1]
    assert below == [(64, True, 4096, "fwd")] and f"D = 64 causal at 4K forward ({x[below[0]]:.2f}×)" in text

    def pct(D, provider="attnlab", pass_="fwd"):
        v = [100 * (t22[k] / t21[k] - 1) for k in t22 if k[4] == provider and (D is None or k[0] == D)
             and (pass_ is None or k[3] == pass_)]
        return min(v), max(v)

    lo, hi = pct(128)
    assert f"the D = 128 forward rows ran {lo:.1f}–{hi:.1f} % faster" in text
    lo, hi = pct(64)
    assert f"the D = 64 ones {lo:+.1f} to {hi:+.1f} %".replace("-", "−") in text
    lo, hi = pct(None, "sdpa-cudnn", None)
    assert f"cuDNN's own rows moving by {lo:+.1f} to {hi:+.1f} %".replace("-", "−") in text
    assert (pg.RESCALE_SKIP, pg.RESCALE_TAU) == (True, 8.0) and pg.RESCALE_FROM_D in (64, 128)  # (64 since run 16)


def test_results_gqa_run_23_is_the_recorded_one():
    """Prefill run 23 (GQA, four query heads per K/V head): the table as ``prefill.py report`` renders it, the check's
    12 passing shapes from its log, every SDPA row on ``enable_gqa`` (none starred), and the section's ranges against
    cuDNN, PyTorch's own choice and run 22's MHA rows computed from the two JSON files."""

    data = ROOT / "benchmarks" / "data"
    results = (ROOT / "benchmarks" / "RESULTS.md").read_text()
    section = results[results.index("### Runs 23 and 24: GQA rows"):results.index("### Run 22 and fwd-switches run 4")]
    text = _flat(section)
    lines = _prefill_report_rows("prefill-h200-run23.json")
    assert len(lines) == 24 and all(ln in section for ln in lines) and not any("*" in ln for ln in lines)
    check = (data / "prefill-run23" / "check.log").read_text()
    assert "check: 12/12 shapes pass" in check and "ok=False" not in check
    rows = json.loads((data / "prefill-h200-run23.json").read_text())["rows"]
    assert {(r["D"], r["H"], r["Hkv"]) for r in rows} == {(64, 32, 8), (128, 16, 4)}
    t, mha = _prefill_tflops(23), _prefill_tflops(22)

    def span(ref, pass_, f="{:.2f}–{:.2f}×"):
        v = [t[k] / t[(*k[:4], ref)] for k in t if k[4] == "attnlab" and k[3] == pass_]
        return f.format(min(v), max(v)), v

    (fc, _), (bc, _) = span("sdpa-cudnn", "fwd"), span("sdpa-cudnn", "fwd_bwd")
    (fs, _), (bs, _) = span("sdpa", "fwd"), span("sdpa", "fwd_bwd")
    assert f"Against cuDNN: forward {fc}, forward+backward {bc[:-1]}×; against PyTorch's own choice {fs} and {bs}" in text
    same = [t[(*k[:4], "sdpa")] / t[k] for k in t if k[4] == "sdpa-cudnn"]
    assert f"whose rows ran at {min(same):.2f}–{max(same):.2f}× the pinned cuDNN rows" in text
    below = sorted(k[:4] for k in t if k[4] == "attnlab" and min(t[k] / t[(*k[:4], r)] for r in ("sdpa", "sdpa-cudnn")) < 1)
    assert below == [(64, True, 4096, "fwd"), (128, True, 8192, "fwd_bwd")]
    a = (64, True, 4096, "fwd")
    assert (f"D = 64 causal 4K forward ({t[(*a, 'attnlab')] / t[(*a, 'sdpa-cudnn')]:.2f}× cuDNN, "
            f"{t[(*a, 'attnlab')] / t[(*a, 'sdpa')]:.2f}× `sdpa`") in text
    b = (128, True, 8192, "fwd_bwd")
    assert (f"({t[(*b, 'attnlab')] / t[(*b, 'sdpa')]:.2f}×, where the pinned cuDNN row of the same shape gives "
            f"{t[(*b, 'attnlab')] / t[(*b, 'sdpa-cudnn')]:.2f}×)") in text

    def vs_mha(provider):
        v = [t[k] / mha[k] for k in t if k[4] == provider and k in mha]
        return f"{min(v):.2f}–{max(v):.2f}×"

    assert (f"attnlab ran at {vs_mha('attnlab')} its MHA speed and cuDNN at {vs_mha('sdpa-cudnn')[:-1]}× its own"
            in text)


def test_notes_v33_quotes_run_23():
    """NOTES-prefill v33: run 23's ranges and the issue's GQA shape (32/8, causal 8K, D = 64) against PyTorch's own
    SDPA choice, computed from the run's JSON."""
    t = _prefill_tflops(23)
    notes = _notes("v33")

    def span(ref, pass_):
        v = [t[k] / t[(*k[:4], ref)] for k in t if k[4] == "attnlab" and k[3] == pass_]
        return f"{min(v):.2f}–{max(v):.2f}"

    assert (f"forward {span('sdpa-cudnn', 'fwd')}× cuDNN and forward+backward {span('sdpa-cudnn', 'fwd_bwd')}×; "
            f"against PyTorch's own choice {span('sdpa', 'fwd')}× and {span('sdpa', 'fwd_bwd')}×") in notes
    f, b = (t[(64, True, 8192, p, "attnlab")] / t[(64, True, 8192, p, "sdpa")] for p in ("fwd", "fwd_bwd"))
    assert f"now reads {f:.2f}× / {b:.2f}× at D = 64" in notes
    assert "the 12 shapes within the criterion" in notes


def test_results_gqa_run_24_repeats_the_rows():
    """Prefill run 24 (the GQA rows at 4K and 8K again): its table as rendered, the ranges, the repeated rows against
    run 23, and the GPU test logs of the same call."""

    data = ROOT / "benchmarks" / "data"
    results = (ROOT / "benchmarks" / "RESULTS.md").read_text()
    section = results[results.index("### Runs 23 and 24: GQA rows"):results.index("### Run 22 and fwd-switches run 4")]
    text = _flat(section)
    lines = _prefill_report_rows("prefill-h200-run24.json")
    assert len(lines) == 16 and all(ln in section for ln in lines)

    t23, t24 = _prefill_tflops(23), _prefill_tflops(24)

    def span(ref, pass_):
        v = [t24[k] / t24[(*k[:4], ref)] for k in t24 if k[4] == "attnlab" and k[3] == pass_]
        return f"{min(v):.2f}–{max(v):.2f}×"

    assert (f"Against cuDNN forward {span('sdpa-cudnn', 'fwd')} and forward+backward {span('sdpa-cudnn', 'fwd_bwd')}; "
            f"against `sdpa` {span('sdpa', 'fwd')} and {span('sdpa', 'fwd_bwd')}.") in text

    def x(t, key, ref):
        return f"{t[(*key, 'attnlab')] / t[(*key, ref)]:.2f}×"

    b = (128, True, 8192, "fwd_bwd")
    assert f"ran at {x(t23, b, 'sdpa')} `sdpa` in run 23 ran at {x(t24, b, 'sdpa')} here" in text
    a = (64, True, 4096, "fwd")
    assert (f"D = 64 causal 4K forward at {x(t24, a, 'sdpa-cudnn')} cuDNN and {x(t24, a, 'sdpa')} `sdpa` (run 23: "
            f"{x(t23, a, 'sdpa-cudnn')[:-1]}× and {x(t23, a, 'sdpa')})") in text
    same = [t24[(*k[:4], "sdpa")] / t24[k] for k in t24 if k[4] == "sdpa-cudnn"]
    assert f"between its two columns ({min(same):.2f}–{max(same):.2f}× here)" in text
    c = (128, False, 8192, "fwd_bwd")
    assert f"({t24[(*c, 'attnlab')]:.0f} against {t24[(*c, 'sdpa-cudnn')]:.0f})" in text
    o = (128, False, 4096, "fwd")
    up = 100 * (t24[(*o, "attnlab")] / t23[(*o, "attnlab")] - 1)
    down = 100 * (1 - t24[(*o, "sdpa-cudnn")] / t23[(*o, "sdpa-cudnn")])
    assert (f"at {t24[(*o, 'attnlab')]:.0f} TFLOP/s is {up:.0f} % above run 23's {t23[(*o, 'attnlab')]:.0f} for the "
            f"same kernel, with cuDNN's row {down:.0f} % lower") in text
    call1 = (data / "prefill-run24" / "tests-call1.log").read_text()
    progress = [ln for ln in call1.splitlines() if ln.startswith((".", "s", "x")) and "%]" in ln]
    assert progress[-1].endswith("[ 72%]") and not any(c in ln for ln in progress for c in "FE")
    call2 = (data / "prefill-run24" / "tests-call2.log").read_text().splitlines()[-1]
    assert call2.startswith("151 passed") and "failed" not in call2
    assert "the 151 tests that use the shared checks and input builders, all passed" in text


def test_results_run_25_repeats_the_d128_noncausal_4k_forward():
    """Prefill run 25 (the D = 128 non-causal 4K forward in three processes): each process's table as rendered, the
    row's range against cuDNN in the same processes, run 22's value for the same row, the causal row's spread, and
    NOTES-prefill v34's Next."""

    data = ROOT / "benchmarks" / "data"
    results = (ROOT / "benchmarks" / "RESULTS.md").read_text()
    section = results[results.index("### Run 25: the D = 128"):results.index("### Runs 23 and 24: GQA rows")]
    text = _flat(section)
    runs = []
    for p in (1, 2, 3):
        lines = _prefill_report_rows(f"prefill-h200-run25-p{p}.json")
        assert len(lines) == 4 and all(ln.startswith("| 128 ") and ln in section for ln in lines)
        rows = json.loads((data / f"prefill-h200-run25-p{p}.json").read_text())["rows"]
        runs.append({(r["causal"], r["pass_"], r["provider"]): r["tflops"] for r in rows if "tflops" in r})
    ours = [t[False, "fwd", "attnlab"] for t in runs]
    cudnn = [t[False, "fwd", "sdpa-cudnn"] for t in runs]
    ratio = [a / c for a, c in zip(ours, cudnn)]
    causal = [t[True, "fwd", "attnlab"] for t in runs]
    r22 = _prefill_tflops(22)[128, False, 4096, "fwd", "attnlab"]
    assert (f"The row held: {min(ours):.0f}–{max(ours):.0f} TFLOP/s in the three processes (cuDNN "
            f"{min(cudnn):.0f}–{max(cudnn):.0f} in the same ones, {min(ratio):.2f}–{max(ratio):.2f}×), against "
            f"{r22:.0f} for the same MHA row in run 22") in text
    assert f"({min(causal):.0f}–{max(causal):.0f})" in text
    assert f"at {min(ours):.0f}–{max(ours):.0f} TFLOP/s in three processes (run 25)" in _notes("v34")
    assert min(ours) > max(cudnn)


def test_results_wide_keys_runs_5_and_6_are_the_recorded_ones():
    """192-key blocks at D = 64 (fwd-switches runs 5 and 6): the tables as ``fwd_switches.py`` renders them, the ranges
    against the 128-key grid and the shipped entries in RESULTS, NOTES-prefill v34, docs/variants.md and the comment
    above ``WIDE_KEYS``, the GPU tests' counts from their logs; and no table entry takes 192-key blocks."""
    import dataclasses

    import pytest

    pytest.importorskip("triton")
    from attnlab.gpu import config as gc

    fs = load_script("benchmarks/fwd_switches.py")
    results = (ROOT / "benchmarks" / "RESULTS.md").read_text()
    section = results[results.index("### Fwd-switches runs 5 and 6"):results.index("### Fwd-switches run 3, variants")]
    text = _flat(section)
    data = ROOT / "benchmarks" / "data"
    r5 = json.loads((data / "fwd-switches-h200-run5.json").read_text())["rows"]
    r6 = json.loads((data / "fwd-switches-h200-run6.json").read_text())["rows"]
    assert fs.report(r5) in section and fs.report(r6) in section
    ms5 = {(r["row"], r["build"]): r["ms"] for r in r5}
    x6 = {(r["row"], r["build"]): r["vs_first"] for r in r6}  # (run 6's first build is n128g)
    vs_grid = [ms5[row, "n128g"] / ms5[row, "n192"] for row in ("window", "causal", "full")]
    vs_grid += [x6[row, "n192"] for row in ("full", "window")]
    vs_shipped = [ms5[row, "shipped"] / ms5[row, "n192"] for row in ("window", "causal", "full")]
    two = [x6[row, "n192m"] for row in ("full", "window")]
    grid_span = f"{min(vs_grid):.2f}–{max(vs_grid):.2f}×"
    assert (f"ran at {grid_span} the 128-key grid on every row ({min(vs_shipped):.2f}–{max(vs_shipped):.2f}× the "
            f"shipped entries), and on two consumer groups without spills at {min(two):.2f}–{max(two):.2f}×") in text
    assert max(vs_grid) < 0.7 and max(two) < 0.9
    notes = _notes("v34")
    assert (f"`n192` ran at {grid_span} `n128g` on every row (window {vs_grid[0]:.3f}× and {x6['window', 'n192']:.3f}×, "
            f"causal 4 × 4K {vs_grid[1]:.3f}×, dense non-causal {vs_grid[2]:.3f}× and {x6['full', 'n192']:.3f}×), "
            f"{min(vs_shipped):.2f}–{max(vs_shipped):.2f}× the shipped entries") in notes
    assert f"{x6['full', 'n192m']:.3f}× on the dense row and {x6['window', 'n192m']:.3f}× on the window row" in notes
    src = " ".join((ROOT / "src" / "attnlab" / "gpu" / "prefill_gluon.py").read_text().replace("#", " ").split())
    assert (f"{min(vs_grid):.2f}-{max(vs_grid):.2f}x the same grid on 128-key blocks" in src
            and f"{min(two):.2f}-{max(two):.2f}x on two groups" in src)
    doc = _flat((ROOT / "docs" / "variants.md").read_text())
    assert (f"ran it at {x6['window', 'n192']:.3f}× the same grid on 128-key blocks, and at {x6['window', 'n192m']:.3f}× "
            "on two consumer warp groups") in doc
    logs = data / "wide-keys-checks"
    assert "50 passed" in (logs / "tests-run5.log").read_text().splitlines()[-1] and "50 passed" in text
    call1 = (logs / "tests-call1.log").read_text()
    assert "[ 91%]" in call1 and "F" not in "".join(ln for ln in call1.splitlines() if ln.startswith("."))
    for table in (gc._GLUON_FWD_TABLE, gc._GLUON_FWD_MID, gc._GLUON_PACKED_FWD):
        assert all(dataclasses.asdict(c)["block_n"] != 192 for c in table.values())


def _fa4_ratios(run: int) -> dict:
    """benchmarks/data/fa4-peer-h200-run{run}.json: (row, D) -> (FlashAttention-4 over attnlab, attnlab over the peer,
    FlashAttention-4 over the peer), as speed ratios."""
    rows = json.loads((ROOT / "benchmarks" / "data" / f"fa4-peer-h200-run{run}.json").read_text())["rows"]
    ms = {(r["row"], r["D"], r["provider"]): r["ms"] for r in rows}
    return {(row, D): (ms[row, D, "attnlab"] / ms[row, D, "fa4"], ms[row, D, "peer"] / ms[row, D, "attnlab"],
                       ms[row, D, "peer"] / ms[row, D, "fa4"]) for row, D, p in ms if p == "attnlab"}


def test_results_fa4_runs_1_and_2_are_the_recorded_ones():
    """attnlab against FlashAttention-4 (fa4-peer runs 1 and 2): the tables as ``fa4_peer.py --report`` renders them,
    and every ratio RESULTS quotes, from the JSON."""
    fp = load_script("benchmarks/fa4_peer.py")
    results = (ROOT / "benchmarks" / "RESULTS.md").read_text()
    section = results[results.index("### FlashAttention-4 runs 1 and 2"):results.index("### Run 25: the D = 128")]
    text = _flat(section)
    data = ROOT / "benchmarks" / "data"
    for run in (1, 2):
        rows = json.loads((data / f"fa4-peer-h200-run{run}.json").read_text())["rows"]
        assert fp.report(rows) in section
        assert {r["provider"] for r in rows} == set(fp.PROVIDERS) and not any("skipped" in r for r in rows)
    f1, f2 = _fa4_ratios(1), _fa4_ratios(2)
    faster = sum(x[0] > 1 for x in (*f1.values(), *f2.values()))
    assert f"FlashAttention-4 is faster than attnlab on {faster} of the {len(f1) + len(f2)} rows" in text

    def span(vals):
        return f"{min(vals):.2f}–{max(vals):.2f}×"
    fwd64 = [f1[r, 64][0] for r in fp.ROWS]
    fwd128 = [f1[r, 128][0] for r in fp.ROWS if f1[r, 128][0] > 1]
    assert f"the forward by {span(fwd64)} at D = 64 and {span(fwd128)} at D = 128" in text
    assert f"causal D = 128 forward, {f1['causal', 128][0]:.3f}×" in text and f1["causal", 128][0] < 1
    dense = [f2[r, D][0] for r in ("window", "causal", "full") for D in (64, 128)]
    packed = [f2["varlen", D][0] for D in (64, 128)]
    assert f"forward and backward by {span(dense)} on the dense and window rows and {span(packed)} on the packed" in text
    readme = _flat((ROOT / "README.md").read_text())
    assert (f"its forward {span(fwd64)} attnlab's at D = 64 and up to {max(fwd128):.2f}× at D = 128 (attnlab faster on "
            f"the causal D = 128 forward), forward+backward {span(dense)} ({span(packed)} on a packed batch)") in readme
    w = f1["window", 64]
    assert f"attnlab {w[1]:.2f}× FlexAttention, FlashAttention-4 {w[2]:.2f}×" in text
    assert f"{(w[0] - 1) * 100:.0f} % above attnlab" in text
    c = f1["causal", 64]
    assert f"attnlab {c[1]:.3f}× cuDNN, FlashAttention-4 {c[2]:.2f}×" in text
    v = f2["varlen", 128]
    assert f"attnlab {v[1]:.2f}× FlexAttention here" in text and f"FlashAttention-4 {v[2]:.2f}×;" in text
    others = [x[1] for k, x in f1.items() if k not in (("window", 64), ("causal", 64))] + [x[1] for x in f2.values()]
    assert min(others) >= 1.0  # "every other row at or above its peer"
    log = (data / "fa4-peer" / "tests-call1.log").read_text().splitlines()
    outcomes = "".join(ln.split("[")[0].strip() for ln in log if ln.strip() and set(ln.split("[")[0].strip()) <= set(".sxFE"))
    assert log[-2].endswith("[ 90%]") and not log[-1].endswith("%]")  # stopped past 90 %
    counts = (outcomes.count("."), outcomes.count("s"), outcomes.count("x"))
    assert f"{counts[0]} passed, {counts[1]} skipped, {counts[2]} xfailed, none failed" in text
    assert len(outcomes) == sum(counts)


def _switch_runs(start: str, end: str, runs: tuple[int, ...]):
    """The RESULTS section from heading ``start`` to heading ``end``, flattened too, and the rows of the fwd-switches
    runs it records, after checking that each run's table is in it as ``fwd_switches.py`` renders it."""
    fs = load_script("benchmarks/fwd_switches.py")
    results = (ROOT / "benchmarks" / "RESULTS.md").read_text()
    section = results[results.index(start):results.index(end)]
    rows = [json.loads((ROOT / "benchmarks" / "data" / f"fwd-switches-h200-run{n}.json").read_text())["rows"]
            for n in runs]
    for r in rows:
        assert fs.report(r) in section
    return section, _flat(section), rows


def test_results_variants_runs_26_and_27_are_the_recorded_ones():
    """Variants runs 26 and 27: both tables as ``variants.py report`` renders them, and the ratios the text quotes."""
    v = load_script("benchmarks/variants.py")
    results = (ROOT / "benchmarks" / "RESULTS.md").read_text()
    section = results[results.index("### Variants runs 26 and 27"):results.index("### Fwd-switches runs 9 and 10")]
    text = _flat(section)
    ratios = {}
    for n in (26, 27):
        rows = json.loads((ROOT / "benchmarks" / "data" / f"variants-h200-run{n}.json").read_text())["rows"]
        assert v.report(rows) in section
        for line in section.split(f"Run {n}:")[1].split("\n\n")[1].splitlines()[2:]:
            c = [t.strip() for t in line.strip("|").split("|")]
            ratios[n, int(c[0]), c[1], c[2]] = c[7]
    assert (f"ran at {ratios[26, 128, 'varlen', 'fwd_bwd']}× and {ratios[27, 128, 'varlen', 'fwd_bwd']}× FlexAttention"
            in text)
    assert f"The D = 64 window forward ran at {ratios[26, 64, 'window', 'fwd']}× and {ratios[27, 64, 'window', 'fwd']}×" in text
    low = {k for k, r in ratios.items() if float(r) < 1.3}
    assert low == {(26, 64, "window", "fwd"), (27, 64, "window", "fwd")} and len(ratios) == 16


def test_results_mask_limits_runs_9_and_10_are_the_recorded_ones():
    """The masked step from each row's limits (fwd-switches runs 9 and 10): the tables as ``fwd_switches.py`` renders
    them, every ratio RESULTS quotes, the GPU tests' count from their log, and the switch as the runs decided it."""
    import pytest

    pytest.importorskip("triton")
    from attnlab.gpu import prefill_gluon as G

    section, text, (r9, r10) = _switch_runs("### Fwd-switches runs 9 and 10", "### Fwd-switches runs 7 and 8", (9, 10))
    data = ROOT / "benchmarks" / "data"
    x = [{(r["row"], r["D"], r["build"]): r["vs_first"] for r in rows} for rows in (r9, r10)]

    def span(row, D):
        a, b = (xi[row, D, "nolimits"] for xi in x)
        return f"{min(a, b):.3f}–{max(a, b):.3f}×"
    slower = [("varlen", 64), ("varlen", 128), ("window", 64), ("causal", 128)]
    assert (f"the packed batch {span('varlen', 64)} at D = 64 and {span('varlen', 128)} at D = 128, the D = 64 window "
            f"{span('window', 64)}, the D = 128 causal 4 × 4K {span('causal', 128)}: slower in both runs") in text
    assert all(xi[key + ("nolimits",)] < 1 for xi in x for key in slower)
    others = [xi[key + ("nolimits",)] for xi in x for key in (("causal", 64), ("window", 128), ("full", 64), ("full", 128))]
    assert f"`nolimits` was level to {(max(others) - 1) * 100:.1f} % faster" in text and min(others) > 0.999
    assert f"the D = 64 causal 4 × 4K {x[0]['causal', 64, 'nolimits']:.3f}× in both runs" in text
    assert f"{x[0]['causal', 64, 'nolimits']:.3f}" == f"{x[1]['causal', 64, 'nolimits']:.3f}"
    assert (f"the D = 128 window {span('window', 128)}, and the dense non-causal rows {span('full', 64)} at D = 64 and "
            f"{span('full', 128)} at D = 128") in text
    lim1 = {(r["row"], r["D"]): r for r in r9 if r["build"] == "limits1"}
    faster = [k for k, r in lim1.items() if r["vs_first"] > 1]
    assert sorted(faster) == [("full", 64), ("varlen", 128)]
    assert (f"only on the D = 128 packed batch ({lim1['varlen', 128]['vs_first']:.3f}×) and the dense D = 64 row "
            f"({lim1['full', 64]['vs_first']:.3f}×, no masked block)") in text
    assert all(r["max_diff"] == 0.0 for r in lim1.values())
    peer = [{(r["row"], r["D"]): r["x_peer"] for r in rows if r["build"] == "shipped"} for rows in (r9, r10)]
    assert (f"the D = 64 window forward {peer[0]['window', 64]:.2f}× and {peer[1]['window', 64]:.2f}× FlexAttention "
            f"(the bar 1.3×), the D = 64 causal 4K forward {peer[0]['causal', 64]:.2f}× and {peer[1]['causal', 64]:.2f}× "
            f"cuDNN") in text
    log = (data / "fwd-switches-checks" / "tests-run9.log").read_text().strip().splitlines()[-1]
    n = log.split(" in ")[0]
    assert f"GPU tests: {n}." in text and re.search(r"\b\d+ failed", log) is None
    assert G.MASK_LIMITS == 2 and not G.MASK_RANGE


def test_results_fa4_step_runs_7_and_8_are_the_recorded_ones():
    """FlashAttention-4's step one difference at a time (fwd-switches runs 7 and 8): the tables as ``fwd_switches.py``
    renders them, every ratio RESULTS quotes, the checks' counts from their logs, and the library's switches as the
    runs decided them."""
    import pytest

    pytest.importorskip("triton")
    from attnlab.gpu import prefill_gluon as G

    section, text, (r7, r8) = _switch_runs("### Fwd-switches runs 7 and 8", "### Fwd-switches runs 5 and 6", (7, 8))
    data = ROOT / "benchmarks" / "data"
    x7 = {(r["row"], r["D"], r["build"]): r["vs_first"] for r in r7}
    x8 = {(r["row"], r["D"], r["build"]): r["vs_first"] for r in r8}
    rows = ("window", "causal", "full")
    pack64 = [x[row, 64, "pack"] for x in (x7, x8) for row in rows]
    assert (f"`pack` is faster on {sum(v > 1 for v in pack64)} of the {len(pack64)} D = 64 rows of the two runs (window "
            f"{x7['window', 64, 'pack']:.3f}× and {x8['window', 64, 'pack']:.3f}×, dense {x7['full', 64, 'pack']:.3f}× "
            f"and {x8['full', 64, 'pack']:.3f}×, causal {x7['causal', 64, 'pack']:.3f}× and "
            f"{x8['causal', 64, 'pack']:.3f}×)") in text
    pack128 = [x8[row, 128, "pack"] for row in rows]
    assert f"on the three D = 128 rows ({min(pack128):.3f}–{max(pack128):.3f}×)" in text and min(pack128) > 1

    def span(build):
        vals = [x7[row, 64, build] for row in rows]
        return f"{min(vals):.3f}–{max(vals):.3f}×"
    assert f"`mask` lost on every row ({span('mask')})" in text and max(x7[r, 64, "mask"] for r in rows) < 1
    assert f"`pp` changed nothing ({span('pp')})" in text
    assert f"`lanes` lost on every row ({span('lanes')})" in text and max(x7[r, 64, "lanes"] for r in rows) < 1
    assert f"`fa4` ran at {span('fa4')}" in text
    for r in (*r7, *r8):  # pack and pp keep the bits
        if r["build"] in ("pack", "pp"):
            assert r["max_diff"] == 0.0, r
    peer8 = {(r["row"], r["build"]): r["x_peer"] for r in r8 if r["D"] == 64}
    assert (f"the D = 64 window forward in run 8 ran at {peer8['window', 'pack']:.2f}× FlexAttention and the causal 4K "
            f"forward at {peer8['causal', 'pack']:.2f}× cuDNN") in text
    logs = data / "fa4-step-checks"
    checks = (logs / "checks-run7.log").read_text()
    n = int(checks.split(" passed")[0].split()[-1])
    assert f"the GPU tests of the builds, {n} passed" in text and "failed" not in checks
    pack_log = (logs / "pack-tests.log").read_text().strip().splitlines()[-1]
    assert pack_log.startswith("298 passed, 7 skipped") and "298 passed, 7 skipped" in text
    assert G.PACK_P and not (G.MASK_RANGE or G.PINGPONG)  # (ROW_SUM_LANES on since fwd-switches run 16)


def test_results_own_blocks_and_the_whole_variants_table_are_the_recorded_ones():
    """Fwd-switches runs 11 and 12 and variants runs 28–30: every table as the scripts render it from the recorded
    files (run 30's from its markdown), the ratios the text quotes, the GPU tests' counts from their logs, the switches
    as the runs left them, and the bars' cells the text names as missed."""
    import pytest

    pytest.importorskip("triton")
    from attnlab.gpu import prefill_gluon as G
    from attnlab.gpu import prefill_gluon_bwd as GB

    start = "### Variants runs 28–30, fwd-switches runs 11–13"
    section, text, (r11, r12) = _switch_runs(start, "### Variants runs 26 and 27", (11, 12))
    data = ROOT / "benchmarks" / "data"
    gain = [{(r["row"], r["D"]): 1 / r["vs_first"] for r in rows if r["build"] == "noown"} for rows in (r11, r12)]
    assert (f"The D = 64 window ran {gain[0]['window', 64]:.3f}× and {gain[1]['window', 64]:.3f}× faster with the switch, "
            f"the D = 128 packed batch {gain[0]['varlen', 128]:.3f}× and {gain[1]['varlen', 128]:.3f}×, the dense D = 64 "
            f"rows {gain[0]['full', 64]:.3f}× in both runs") in text
    assert f"{gain[0]['full', 64]:.3f}" == f"{gain[1]['full', 64]:.3f}"
    others = [g[k] for g in gain for k in g if k not in (("window", 64), ("varlen", 128), ("full", 64), ("varlen", 64))]
    assert f"the other rows within {min(others):.3f}–{max(others):.3f}×" in text
    assert f"ran {gain[0]['varlen', 64]:.3f}× and {gain[1]['varlen', 64]:.3f}× faster under `shipped`" in text
    assert all(r["max_diff"] == 0.0 for r in r11 + r12)
    checks = data / "fwd-switches-checks"
    progress = "".join(ln for ln in (checks / "tests-run11-call1.log").read_text().splitlines()
                       if re.fullmatch(r"[.sxFE]+( +\[ *\d+%\])?", ln))
    counts = {c: progress.count(c) for c in ".sxFE"}
    assert counts["F"] == counts["E"] == 0
    assert f"with {counts['.']} passed, {counts['s']} skipped, {counts['x']} xfailed" in text
    last = (checks / "tests-run11-call2.log").read_text().strip().splitlines()[-1]
    assert f"{last.split(' in ')[0]}." in text and "failed" not in last

    v = load_script("benchmarks/variants.py")
    cells = {}
    for n in (28, 29):
        rows = json.loads((data / f"variants-h200-run{n}.json").read_text())["rows"]
        table = v.report(rows)
        assert table in section
        for ln in table.splitlines()[2:]:
            c = [t.strip() for t in ln.strip("|").split("|")]
            cells[n, int(c[0]), c[1], c[2]] = c
    below = {k for k, c in cells.items() if float(c[7]) < 1.3}
    assert below == {(28, 64, "window", "fwd"), (29, 64, "window", "fwd")} and len(cells) == 32
    w = [cells[n, 64, "window", "fwd"][7] for n in (28, 29)]
    assert f"but the D = 64 window forward ({w[0]}× and {w[1]}×)" in text
    sdpa = [float(c[8]) for c in cells.values() if c[8] != "—"]
    assert f"at least {min(sdpa):.2f}× the best of them" in text and min(sdpa) >= 1.0
    det = {k: float(c[9]) for k, c in cells.items() if c[9] != "—"}
    assert {k for k, x in det.items() if x < 0.85} == {(28, 64, "varlen", "fwd_bwd"), (29, 64, "varlen", "fwd_bwd"),
                                                      (28, 128, "varlen", "fwd_bwd")}
    d = [cells[n, D, "varlen", "fwd_bwd"][9] for D in (64, 128) for n in (28, 29)]
    assert f"{d[0]}× and {d[1]}× at D = 64 in both runs, and {d[2]}× and {d[3]}× at D = 128" in text

    md = {k: (data / "packed-det64-run30" / f"det64-{k}.md").read_text().strip().splitlines()[-1]
          for k in ("1-gluon", "2-triton", "3-gluon")}
    for ln in md.values():
        assert ln in section
    col = {k: [t.strip() for t in ln.strip("|").split("|")] for k, ln in md.items()}
    assert col["1-gluon"][9] == col["3-gluon"][9] and float(col["1-gluon"][9]) >= 0.85 > float(col["2-triton"][9])
    assert (f"0.88× the default in both of its processes, against {col['2-triton'][9]}× on the Triton kernels"
            in text) and col["1-gluon"][9] == "0.88"
    assert G.OWN_BLOCKS is True and GB.PACKED_DET == (64, 128)


def test_results_fwd_switches_run_13_times_the_arms_in_both_orders():
    """Fwd-switches run 13 (the arms' order reversed every other round): its table as ``fwd_switches.py`` renders it,
    and the round-by-round counts RESULTS draws from the recorded times."""
    start = "### Variants runs 28–30, fwd-switches runs 11–13"
    section, text, (rows,) = _switch_runs(start, "### Variants runs 26 and 27", (13,))
    t = {(r["row"], r["build"]): r["rounds"] for r in rows}
    by = {(r["row"], r["build"]): r for r in rows}
    assert f"came out level ({by['varlen', 'noown']['vs_first']:.3f}×)" in text
    firsts = [(a, b) if i % 2 == 0 else (b, a) for i, (a, b) in enumerate(zip(t["varlen", "shipped"],
                                                                            t["varlen", "noown"]))]
    won = [b / a - 1 for a, b in firsts if a < b]
    assert f"in {len(won)} of {len(firsts)} rounds, by up to {100 * max(won):.1f} %" in text
    w = [n / s - 1 for s, n in zip(t["window", "shipped"], t["window", "noown"])]
    fast = [x for x in w if x > 0]
    assert (f"window ran {1 / by['window', 'noown']['vs_first']:.3f}× faster with the switch, and faster in {len(fast)} "
            f"of its {len(w)} rounds whichever build went first (by {100 * min(fast):.1f}–{100 * max(fast):.1f} %") in text
    assert f"the dense D = 64 row {1 / by['full', 'noown']['vs_first']:.3f}×" in text


def test_results_fwd_switches_run_16_and_variants_runs_31_and_32_are_the_recorded_ones():
    """Fwd-switches run 16 (the row sums in the lanes and the rescale switches at D = 64) and variants runs 31 and 32:
    the tables as the scripts render them from the recorded files (run 32's from its markdown), every ratio the text
    and NOTES-prefill v43 quote computed from them, the GPU tests' counts from their logs, and the switches as the runs
    left them."""
    import pytest

    pytest.importorskip("triton")
    from attnlab.gpu import prefill_gluon as G

    start = "### Fwd-switches runs 16–18, variants runs 31–33"
    section, text, (rows,) = _switch_runs(start, "### Variants runs 28–30, fwd-switches runs 11–13", (16,))
    notes = (ROOT / "benchmarks" / "NOTES-prefill.md").read_text()
    notes = _flat(notes[notes.index("## v43:"):])
    data = ROOT / "benchmarks" / "data"
    by = {(r["row"], r["D"], r["build"]): r for r in rows}
    names = ("window", "causal", "full", "causal16k")

    def span(xs):
        return f"{min(xs):.3f}–{max(xs):.3f}"

    gain = {(row, D): 1 / by[row, D, "before"]["vs_first"] for row in names for D in (64, 128)}
    assert all(g > 1 for g in gain.values())
    assert (f"faster on every row: {span([gain[r, 64] for r in names])}× at D = 64 and "
            f"{span([gain[r, 128] for r in names])}× at D = 128") in text
    slower = [sum(b > s for b, s in zip(by[k]["rounds"], by[k[0], k[1], "shipped"]["rounds"]))
              for k in by if k[2] == "before"]
    assert f"slower in {min(slower)}–{max(slower)} of its 6 rounds on each row" in text
    control = [by[r, 128, "tau8from128"]["vs_first"] for r in names]
    assert all(by[r, 128, "tau8from128"]["max_diff"] == 0.0 for r in names)
    assert f"The control rows at D = 128 spread {span(control)}×" in text
    assert f"(the same build compiled twice) spread {span(control)}×" in notes
    small, big = (gain["window", 128], gain["causal", 128]), (gain["full", 128], gain["causal16k", 128])
    assert max(small) <= 1 / min(control) and min(big) > 1 / min(control)
    assert f"{big[0]:.3f}" == f"{big[1]:.3f}"
    assert f"rows' {small[0]:.3f}× and {small[1]:.3f}× are inside" in text
    assert f"rows' {big[0]:.3f}× (both) outside" in text
    resc = [1 / by[r, 64, "tau8from128"]["vs_first"] for r in names]
    assert f"switches alone (`tau8from128` against `shipped`) were worth {span(resc)}×" in text
    assert f"alone at D = 64 were worth {span(resc)}×" in notes
    w, c = by["window", 64, "shipped"], by["causal", 64, "shipped"]
    assert f"The D = 64 window forward: {w['x_peer']:.2f}× FlexAttention" in text
    assert f"the D = 64 causal 4K row {c['x_peer']:.2f}× cuDNN" in text
    assert (f"ran {gain['window', 64]:.3f}× on the D = 64 window (predicted +3–5 %), {gain['causal', 64]:.3f}× on "
            f"causal 4K (predicted +1–2 %), {gain['causal16k', 64]:.3f}× on causal 16K, but only "
            f"{gain['full', 64]:.3f}× on the dense D = 64 row") in notes
    assert f"at D = 128 {span([gain[r, 128] for r in names])}× (predicted 0 to +2 %)" in notes
    assert f"{w['tflops']:.0f} TFLOP/s, {w['x_peer']:.2f}× FlexAttention in the A/B run" in notes
    assert f"{c['x_peer']:.2f}× cuDNN, still under it" in notes and c["x_peer"] < 1

    checks = data / "fwd-switches-checks"
    progress = "".join(ln for ln in (checks / "tests-run16-call1.log").read_text().splitlines()
                       if re.fullmatch(r"[.sxFE]+( +\[ *\d+%\])?", ln))
    assert "F" not in progress and "E" not in progress and "[ 84%]" in progress
    assert "stopped at its 270 s limit past 84 % with no failure" in text
    last = (checks / "tests-run16-call3.log").read_text().strip().splitlines()[-1]
    assert not re.search(r"\d+ failed", last) and last.startswith("415 passed, 7 skipped, 2 xfailed")
    five = (checks / "tests-run16-call5.log").read_text().strip().splitlines()[-1]
    assert not re.search(r"\d+ failed", five) and f"{five.split(' passed')[0]} passed (`tests-run16-call5.log`)" in text
    assert "415 passed, 7 skipped, 2 xfailed" in text
    assert "GPU tests of the forward with both switches: 415 passed" in notes

    v = load_script("benchmarks/variants.py")

    def whole_table(n):
        """Run n's table as ``variants.py`` renders it, checked against the section and the run's own markdown:
        its cells by (D, variant, pass)."""
        table = v.report(json.loads((data / f"variants-h200-run{n}.json").read_text())["rows"])
        assert table in section
        assert table.strip() == (data / f"variants-run{n}" / f"variants-run{n}.md").read_text().strip()
        return {(int(c[0]), c[1], c[2]): c
                for c in ([t.strip() for t in ln.strip("|").split("|")] for ln in table.splitlines()[2:])}

    cells = whole_table(31)
    assert [k for k, col in cells.items() if float(col[7]) < 1.3] == [(64, "window", "fwd")] and len(cells) == 16
    assert f"but the D = 64 window forward ({cells[64, 'window', 'fwd'][7]}×" in text
    assert f"{cells[64, 'window', 'fwd'][7]}× in the whole variants table (variants run 31" in notes
    sdpa = [float(col[8]) for col in cells.values() if col[8] != "—"]
    assert f"at least {min(sdpa):.2f}× the best of them" in text and min(sdpa) >= 1.0
    det = [float(col[9]) for col in cells.values() if col[9] != "—"]
    assert min(det) >= 0.85 and f"within 15 % of the default on every row ({min(det):.2f}–{max(det):.2f}×)" in text
    dv = {cells[D, "varlen", "fwd_bwd"][9] for D in (64, 128)}
    assert len(dv) == 1
    x = dv.pop()
    assert f"the packed batch at both head dims included ({x}× at both)" in text
    assert f"{x}× at both head dims in the whole table (run 31)" in notes and f"run 31's is {x}×" in text

    c33 = whole_table(33)
    assert [k for k, col in c33.items() if float(col[7]) < 1.3] == [(64, "window", "fwd")] and len(c33) == 16
    w33 = c33[64, "window", "fwd"][7]
    assert f"every row at least 1.3× FlexAttention but the D = 64 window forward ({w33}×)" in text
    sd33 = [float(col[8]) for col in c33.values() if col[8] != "—"]
    d33 = [float(col[9]) for col in c33.values() if col[9] != "—"]
    assert (f"every SDPA row at least {min(sd33):.2f}×; the deterministic backward at "
            f"{min(d33):.2f}–{max(d33):.2f}×") in text
    mine = {cells[64, "window", "fwd"][3], c33[64, "window", "fwd"][3]}
    flex = [cells[64, "window", "fwd"][5], c33[64, "window", "fwd"][5]]
    assert len(mine) == 1 and (f"In both runs the D = 64 window forward ran at {mine.pop()} TFLOP/s, against "
                               f"FlexAttention's {flex[0]} and {flex[1]}: the bar of 1.3× asks for "
                               f"{1.3 * int(flex[0]):.0f} and {1.3 * int(flex[1]):.0f}") in text

    md = {k: (data / "packed-det128-run32" / f"det128-{k}.md").read_text().strip().splitlines()[-1]
          for k in ("1-gluon", "2-triton")}
    col = {k: [t.strip() for t in ln.strip("|").split("|")] for k, ln in md.items()}
    for k, ln in md.items():
        assert ln in section
        j = json.loads((data / "packed-det128-run32" / f"variants-h200-det128-run32-{k}.json").read_text())
        assert v.report(j["rows"]).splitlines()[-1] == ln
    g, t = col["1-gluon"][9], col["2-triton"][9]
    assert float(g) >= 0.85 > float(t)
    assert f"The ordered Gluon build: {g}× the default, against {t}× on the Triton kernels" in text
    assert f"{g}× in its own process (variants run 32; the Triton kernels {t}×)" in notes
    assert G.ROW_SUM_LANES is True and G.RESCALE_FROM_D == 64 and not G.PINGPONG


def test_results_fwd_switches_runs_17_and_18_time_the_persistent_192_row_build():
    """Fwd-switches runs 17 and 18 (the D = 64 entries on other tiles): both tables as ``fwd_switches.py`` renders
    them, the ratios the text and NOTES-prefill v44 quote, the same bits everywhere, the ALiBi control level, the
    partial GPU test log without a failure, and the causal D = 64 entry persistent since."""
    import pytest

    pytest.importorskip("triton")
    from attnlab.gpu import config as gc

    start = "### Fwd-switches runs 16–18, variants runs 31–33"
    section, text, (r17, r18) = _switch_runs(start, "### Variants runs 28–30, fwd-switches runs 11–13", (17, 18))
    notes = (ROOT / "benchmarks" / "NOTES-prefill.md").read_text()
    notes = _flat(notes[notes.index("## v44:"):])
    by = {(n, r["row"], r["build"]): r for n, rows in ((17, r17), (18, r18)) for r in rows}
    assert all(r["max_diff"] == 0.0 for r in by.values())
    x = {k: f"{r['vs_first']:.3f}" for k, r in by.items()}
    quote = (f"ran the window {x[17, 'window', 'n192p']}× and {x[18, 'window', 'n192p']}× and causal 16K "
             f"{x[17, 'causal16k', 'n192p']}× and {x[18, 'causal16k', 'n192p']}× the grid kernel")
    assert quote in text and quote.replace("ran the", "ran the D = 64", 1) in notes
    small = [by[17, row, b]["vs_first"] for row in ("window", "causal16k") for b in ("n128p", "n128d")]
    assert f"the 128-row builds {min(small):.3f}–{max(small):.3f}×" in text and max(small) < 1
    assert f"is the control: {x[18, 'alibi', 'n192p']}×" in text and x[18, "alibi", "n192p"] == "1.000"
    peers = [by[n, "window", "n192p"]["x_peer"] for n in (17, 18)]
    assert f"The window forward at {min(peers):.2f}–{max(peers):.2f}× FlexAttention in this harness" in text
    ships = [round(by[n, "window", "shipped"]["tflops"]) for n in (17, 18)]
    assert f"(which ran it at {ships[0]} and {ships[1]} TFLOP/s" in text
    log = (ROOT / "benchmarks" / "data" / "fwd-switches-checks" / "tests-run18-persistent192.log").read_text()
    progress = "".join(ln for ln in log.splitlines() if re.fullmatch(r"[.sxFE]+( +\[ *\d+%\])?", ln))
    assert "F" not in progress and "E" not in progress and "[ 19%]" in progress
    assert "stopped at the call's 130 s limit past 19 % with no failure" in text
    # switched after its GPU tests ran (RESULTS "Variants runs 34–37")
    assert gc._GLUON_FWD_TABLE[64, True, "long"].persistent is True
