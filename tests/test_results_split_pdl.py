"""Decode-host runs 38-40, on an H100 (the eager split kernel as a programmatic dependent launch, and run 40's split
sweep): benchmarks/RESULTS.md's section and NOTES-decode's "Measured: decode-host runs 38–40", their tables as
decode_host.py renders them from the recorded files, and every number they and ``decode_plan``'s comments quote
computed from those files."""

from __future__ import annotations

import json
import statistics

from tests.helpers import ROOT, flat, load_script, md_table, notes_section, results_section, span

DATA = ROOT / "benchmarks" / "data"
RUNS = (38, 39, 40)
dh = load_script("benchmarks/decode_host.py")

D128, SMALL, MID, B8, D64 = ((1, 32, 8, 32768, 128), (1, 64, 8, 8192, 128), (1, 28, 4, 20000, 128),
                             (8, 32, 8, 32768, 128), (1, 32, 8, 32768, 64))


def _run(n: int) -> dict:
    return json.loads((DATA / f"decode-host-h100-run{n}.json").read_text())


def _results() -> str:
    return results_section("### Decode-host runs 38–40, on an H100")


def _notes() -> str:
    return notes_section("NOTES-decode.md", "## Measured: decode-host runs 38–40")


def _arms(n: int) -> dict:
    """(shape, arm) -> the run's rows of that arm, in round order."""
    arms: dict = {}
    for r in _run(n)["split_pdl_ab"]:
        arms.setdefault(((r["B"], r["H"], r["Hkv"], r["L"], r["D"]), r["arm"]), []).append(r)
    return {k: sorted(rs, key=lambda r: r["round"]) for k, rs in arms.items()}


def _med(n: int, shape, arm) -> float:
    return statistics.median(r["eager_us"] for r in _arms(n)[shape, arm])


def _over_graph(n: int, shape, arm) -> float:
    return _med(n, shape, arm) / _arms(n)[shape, arm][0]["graph_us"]


def test_the_section_holds_each_runs_tables_as_decode_host_renders_them():
    section = _results()
    for n in RUNS:
        run = _run(n)
        assert run["gpu"].startswith("NVIDIA H100") and "split_pdl" not in run  # made before the switch existed
        gpu = dh.preset_for(run["gpu"])
        assert "\n".join(dh.split_pdl_ab_markdown(run["split_pdl_ab"], gpu)) in section
    assert md_table(dh.markdown(_run(40)), "| B | H/Hkv | L | D | config |") in section


def test_the_dependent_launch_at_32k():
    notes, results = flat(_notes()), flat(_results())
    rounds = [(f["eager_us"] - t["eager_us"]) / f["eager_us"] for n in RUNS
              for f, t in zip(_arms(n)[D64, "False"], _arms(n)[D64, "True"])]
    assert len(rounds) == 9 and min(rounds) > 0.03  # the rule's first half: 3 % or more in every round
    assert f"in every one of the nine rounds, by {100 * min(rounds):.1f} % at the least" in notes
    t64 = [_over_graph(n, D64, "True") for n in RUNS]
    f64 = [_over_graph(n, D64, "False") for n in RUNS]
    assert f"{', '.join(f'{x:.3f}' for x in t64)} against {', '.join(f'{x:.3f}' for x in f64)} plain" in notes
    assert f"over the graph's {span(t64, '.3f')} against {span(f64, '.3f')}" in results
    t128 = [_over_graph(n, D128, "True") for n in RUNS]
    f128 = [_over_graph(n, D128, "False") for n in RUNS]
    gain = [_med(n, D128, "False") - _med(n, D128, "True") for n in RUNS]
    assert (f"At D = 128, {', '.join(f'{x:.3f}' for x in t128)} against {', '.join(f'{x:.3f}' for x in f128)}: "
            f"{span(gain, '.1f')} µs a call") in notes
    assert f"D = 128: {span(t128, '.3f')} against {span(f128, '.3f')}" in results
    b8t = [_over_graph(n, B8, "True") for n in RUNS]
    b8f = [_over_graph(n, B8, "False") for n in RUNS]
    assert f"Batch 8 {span(b8t, '.3f')} against {span(b8f, '.3f')}" in notes
    trig = [_over_graph(n, D64, "trigger") for n in RUNS]
    trig_span = span(trig, ".3f")
    assert f"is slower than `True` at D = 64 ({trig_span})" in notes and f"at D = 64 ({trig_span})" in results
    assert min(trig) > max(t64)


def test_the_host_paced_shapes():
    notes = flat(_notes())
    plain = [r["eager_us"] for n in RUNS for r in _arms(n)[MID, "False"]]
    assert f"the plain launch's rounds ran from {min(plain):.1f} to {max(plain):.1f} µs" in notes
    mid = [_med(n, MID, "True") / _med(n, MID, "False") for n in RUNS]
    assert (f"`True`'s median was {mid[0]:.2f}× the plain one's in run 38, {mid[1]:.2f}× in run 39, {mid[2]:.2f}× in "
            f"run 40") in notes
    assert max(mid) > 1.01  # the rule's second half missed
    small = [_med(n, SMALL, "True") / _med(n, SMALL, "False") for n in RUNS]
    assert f"at 64/8 `True` was faster in all three ({span(small, '.2f')}×)" in notes
    pace = [r["loop_host_us"] / r["graph_us"] for n in (37, *RUNS)
            for r in json.loads((DATA / f"decode-host-h100-run{n}.json").read_text())["speed"]
            if r["provider"] == "attnlab" and (r["B"], r["H"], r["Hkv"], r["L"], r["D"]) in (SMALL, MID)]
    assert f"the host's time per call {span(pace, '.1f')}× the graph's in runs 37–40" in notes


def test_the_threshold_splits_the_measured_shapes():
    """``SPLIT_PDL_FROM_US`` falls between the host-paced and the GPU-paced shapes' reads on both presets, as the notes
    and ``decode_plan``'s comment say."""
    from attnlab.gpu import decode_plan

    notes = flat(_notes())
    source = flat((ROOT / "src" / "attnlab" / "gpu" / "decode_plan.py").read_text().replace("#", " "))
    cut = decode_plan.SPLIT_PDL_FROM_US
    assert decode_plan.SPLIT_PDL is True
    read = {name: {s: dh.decode_roofline_ms(batch=s[0], heads=s[1], kv_heads=s[2], seq=s[3], head_dim=s[4],
                                         gpu=dh.preset_for(name)) * 1e3 for s in (D128, SMALL, MID, B8, D64)}
            for name in ("NVIDIA H100 80GB HBM3", "NVIDIA H200")}
    h100, h200 = read["NVIDIA H100 80GB HBM3"], read["NVIDIA H200"]
    assert max(h100[SMALL], h100[MID], h200[SMALL], h200[MID]) < cut <= min(h100[D64], h200[D64])
    assert f"at least {cut:g} µs at the preset's bandwidth" in notes
    assert f"({h100[SMALL]:.1f} and {h100[MID]:.1f} µs on the H100 preset)" in notes
    assert f"({h100[D64]:.1f}, {h100[D128]:.1f} and {h100[B8]:.1f} µs) take it" in notes
    assert (f"64/8 over 8K ({h200[SMALL]:.1f} µs), 28/4 over 20,000 ({h200[MID]:.1f}) and 32/8 over 32K at D = 64 "
            f"({h200[D64]:.1f})") in notes
    assert f"whose reads take {h100[SMALL]:.1f} and {h100[MID]:.1f} µs on the H100 preset" in source
    assert f"at 32/8 over 32K: {h100[D64]:.1f} and {h100[D128]:.1f} µs" in source


def test_the_comment_in_decode_plan():
    source = flat((ROOT / "src" / "attnlab" / "gpu" / "decode_plan.py").read_text().replace("#", " "))
    t64 = [_over_graph(n, D64, "True") for n in RUNS]
    f64 = [_over_graph(n, D64, "False") for n in RUNS]
    t128 = [_over_graph(n, D128, "True") for n in RUNS]
    f128 = [_over_graph(n, D128, "False") for n in RUNS]
    assert (f"from {min(f64):.2f}-{max(f64):.2f}x its CUDA graph's time to {min(t64):.2f}-{max(t64):.2f}x (each run's "
            f"median)") in source
    assert f"{min(f128):.2f}" == f"{max(f128):.2f}"  # one figure for the plain launch at D = 128
    assert f"D = 128 from {min(f128):.2f}x to {min(t128):.2f}-{max(t128):.2f}x" in source
    doc = flat((ROOT / "docs" / "decode.md").read_text())
    assert (f"from {span(f64, '.2f')}× its CUDA graph's time to {span(t64, '.2f')}× at D = 64, and from "
            f"{min(f128):.2f}× to {span(t128, '.2f')}× at D = 128") in doc
    from attnlab.gpu import decode_plan

    assert f"`decode_plan.SPLIT_PDL_FROM_US` ({decode_plan.SPLIT_PDL_FROM_US:g} µs" in doc
    readme = flat((ROOT / "README.md").read_text())
    assert (f"now the default for every read under the native call and for reads of "
            f"{decode_plan.SPLIT_PDL_FROM_US:g} µs or more on the Python path, took eager decode at 32/8 "
            f"heads over 32K keys to {span(t64, '.2f')}× its CUDA graph's time at D = 64 ({span(f64, '.2f')}× "
            f"without it) and {span(t128, '.2f')}× at D = 128") in readme
    pace: dict = {True: [], False: []}  # host-paced shapes (True) and the batch-1 32K ones
    for n in (37, *RUNS):
        for r in json.loads((DATA / f"decode-host-h100-run{n}.json").read_text())["speed"]:
            shape = (r["B"], r["H"], r["Hkv"], r["L"], r["D"])
            if r["provider"] == "attnlab" and shape in (SMALL, MID, D128, D64):
                pace[shape in (SMALL, MID)].append(r["loop_host_us"] / r["graph_us"])
    assert f"{min(pace[True]):.1f}-{max(pace[True]):.1f} at 64/8 heads" in source
    assert f"({min(pace[False]):.2f}-{max(pace[False]):.2f} at 32/8 over 32K" in source
    plain = [r["eager_us"] for n in RUNS for r in _arms(n)[MID, "False"]]
    assert f"widely ({max(plain) / min(plain):.1f}x at 28/4 heads)" in source


def test_the_sweep_and_v23():
    notes, results = flat(_notes()), flat(_results())
    sweep = [r for r in _run(40)["sweep"] if r["config"] == "large"]
    ratio = {}
    for shape in (D128, SMALL, MID, D64):
        rs = [r for r in sweep if (r["B"], r["H"], r["Hkv"], r["L"], r["D"]) == shape]
        pick = next(r for r in rs if r["picked"])
        ratio[shape] = pick["graph_us"] / min(r["graph_us"] for r in rs)
    assert [round(ratio[s], 2) for s in (D128, SMALL, MID)] == [1.0, 1.0, 1.0]
    assert f"{ratio[D64]:.2f}× it on the fourth" in results and f"{ratio[D64]:.2f}× the fastest at D = 64" in notes
    by = {r["splits"]: r["graph_us"] for r in sweep if (r["B"], r["H"], r["Hkv"], r["L"], r["D"]) == D64}
    assert f"(32 splits, {by[32]:.1f} µs, against 16, {by[16]:.1f})" in notes and by[16] <= by[32]
    host = {n: next(h["host_us"] for h in _run(n)["host"] if h["call"] == "attnlab.flash_decode (plan kept)")
            for n in RUNS}
    loop = {n: {r["D"]: r["loop_host_us"] for r in _run(n)["speed"] if r["provider"] == "attnlab" and r["B"] == 1
                and r["L"] == 32768} for n in RUNS}
    assert (f"{loop[38][64]:.1f} against {host[38]:.1f} µs (run 38), {loop[39][64]:.1f} against {host[39]:.1f} "
               f"(run 39), {loop[40][64]:.1f} against {host[40]:.1f} (run 40)") in notes
    assert (f"at D = 128 {min(loop[n][128] for n in RUNS):.1f}–{max(loop[n][128] for n in RUNS):.1f}") in notes
