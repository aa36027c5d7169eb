"""Decode-host runs 66 and 67 and prefill run 47, on an H200 (v40: the native call's plans take the dependent launch
for every read; the clock sampler's build left out): benchmarks/RESULTS.md's section, the NOTES' measured paragraphs
and the README's H200 and H100 tables, every number they quote computed from the recorded files."""

from __future__ import annotations

import json
import statistics

from tests.helpers import (
    ROOT,
    eager_graph_table,
    flat,
    load_script,
    notes_section,
    pytest_summary,
    results_section,
    span,
)

DATA = ROOT / "benchmarks" / "data"
dh = load_script("benchmarks/decode_host.py")
card = load_script("benchmarks/scorecard.py")
pf = load_script("benchmarks/prefill.py")
SECTION = "### Decode-host runs 66 and 67 and prefill run 47, on an H200"
SHORT = [(1, 64, 8, 8192, 128), (1, 28, 4, 20000, 128)]
LONG = [(1, 32, 8, 32768, 128), (1, 32, 8, 32768, 64), (8, 32, 8, 32768, 128)]
LOGS = DATA / "native-run66"


def _run(name: str) -> dict:
    return json.loads((DATA / name).read_text())


def host(n: int) -> dict:
    return _run(f"decode-host-h200-run{n}.json")


def rows(n: int) -> dict:
    return {r["call"]: r["host_us"] for r in host(n)["host"]}


def speed(n: int, shape, provider: str = "attnlab") -> dict:
    return next(r for r in host(n)["speed"]
                if (r["B"], r["H"], r["Hkv"], r["L"], r["D"]) == shape and r["provider"] == provider)


def speed_table() -> list[str]:
    return eager_graph_table(speed, 63, 66, 67, [*LONG[:2], *SHORT, LONG[2]])


def spread(n: int) -> float:
    return max(max(r["rounds_us"]) / min(r["rounds_us"]) for r in host(n)["host"])


def prefill47() -> list[dict]:
    return _run("prefill-h200-run47.json")["rows"]


def test_the_runs_are_what_the_section_says():
    for n, native in ((66, True), (67, False)):
        r = host(n)
        assert (r["gpu"], r["torch"], r["triton"], r["date"]) == ("NVIDIA H200", "2.11.0+cu130", "3.6.0", "2026-12-06")
        assert r["native"] is native and r["split_pdl_every_read"] is native
    env = _run("prefill-h200-run47.json")["environment"]
    assert env["gpu"] == "NVIDIA H200" and str(env["torch"]) == "2.11.0+cu130"


def test_the_results_section():
    text = results_section(SECTION)
    for line in speed_table():
        assert line in text, line
    assert pytest_summary(LOGS / "suite.log") == "2 failed, 217 passed, 8 skipped"
    assert "The decode suite 2 failed, 217 passed, 8 skipped" in flat(text)
    kept, empty = rows(66)[dh.KEPT_ROW], rows(66)[dh.EMPTY_ROW]
    py = rows(66)[dh.PYTHON_ROW]
    assert (f"The kept call {kept:.1f} µs, {kept / empty:.2f}× the empty launch's {empty:.1f} µs in the same rounds "
            f"(the Python path's row {py:.1f})") in flat(text)
    assert f"slowest round up to {spread(66):.2f}× its best" in flat(text)
    pre = (DATA / "native-run66" / "prefill-run47.md").read_text()
    table = pre[pre.index("| D | heads"):pre.index("\n\n", pre.index("| D | heads"))]
    assert table in text
    bars = card.scorecard({"prefill-h200-run45.json": _run("prefill-h200-run45.json")["rows"]}, host(66))
    decode = [b for b in bars if b["bar"].startswith("decode")]
    assert all(b["met"] for b in decode) and "every decode bar met" in flat(text)


def test_the_decode_notes():
    notes = flat(notes_section("NOTES-decode.md", "### v40 measured"))
    s66 = [speed(66, s)["eager_over_graph"] for s in SHORT]
    s63 = [speed(63, s)["eager_over_graph"] for s in SHORT]
    assert (f"8K {s66[0]:.3f}× their graph and at 28/4 over 20,000 {s66[1]:.3f}×, down from {s63[0]:.3f}× and "
            f"{s63[1]:.3f}× in run 63") in notes
    assert min(s66) > 1.06 and "(at most 1.06×) missed by a little on both" in notes
    h65 = _run("decode-host-h100-run65.json")
    s65 = max(max(r["rounds_us"]) / min(r["rounds_us"]) for r in h65["host"])
    assert f"up to {spread(66):.2f}× their best, against at most {s65:.2f}× in run 65" in notes
    assert all(abs(speed(66, s)["eager_over_graph"] - 1) < 0.01 for s in LONG) and "within ±1 % of 1 (met)" in notes
    kept, empty = rows(66)[dh.KEPT_ROW], rows(66)[dh.EMPTY_ROW]
    assert f"the kept call {kept:.1f} µs, {kept / empty:.2f}× the empty launch" in notes and 6 <= kept <= 8
    g = [speed(66, s, "sdpa-cudnn")["graph_us"] / speed(66, s)["graph_us"] for s in [*SHORT, *LONG[:2]]]
    assert f"batch 1 under graphs {span(g, '.3f')}× cuDNN" in notes
    s67 = [speed(67, s)["eager_over_graph"] for s in SHORT]
    s62 = [speed(62, s)["eager_over_graph"] for s in SHORT]
    assert f"the short reads ran {s67[0]:.3f}× and {s67[1]:.3f}× their graphs" in notes
    assert f"the H200's own before the native call were {s62[0]:.3f}× and {s62[1]:.3f}× (run 62)" in notes
    b, hkv, L, D = 3, 4, 20000, 64
    nbytes = 2 * b * hkv * L * D * 2
    h200 = nbytes / dh.preset_for("NVIDIA H200").hbm_bw * 1e6
    h100 = nbytes / dh.preset_for("NVIDIA H100 80GB HBM3").hbm_bw * 1e6
    assert f"whose read takes {h200:.1f} µs at an H200's bandwidth, under the 13 µs threshold ({h100:.1f} on" in notes


def test_the_prefill_notes():
    notes = flat(notes_section("NOTES-prefill.md", "## The clocks during each time, measured"))
    reads = [g["reads"] for r in prefill47() for g in r["gpu_during"]]
    assert f"{min(reads)}–{max(reads)} reads a time" in notes and max(reads) < 100
    assert sum(x < 10 for x in reads) == 1 and f"one time read {min(reads)}, short of it" in notes
    ours = [r for r in prefill47() if r["provider"] == "attnlab"]
    first = [r["gpu_during"][0]["sm_mhz"] for r in ours]
    later = [g["sm_mhz"] for r in ours for g in r["gpu_during"][1:]]
    assert min(first) > max(later)
    assert (f"attnlab's first times ran at {min(first):,.0f}–{max(first):,.0f} MHz against "
            f"{min(later):,.0f}–{max(later):,.0f} for its other rounds") in notes
    for r in ours:
        assert statistics.median(g["sm_mhz"] for g in r["gpu_during"]) != r["gpu_during"][0]["sm_mhz"]
    p = card.prefill_pairs({"prefill-h200-run47.json": prefill47()})
    fwd = [x["ratio"] for x in p if x["pass_"] == "fwd"]
    both = [x["ratio"] for x in p if x["pass_"] == "fwd_bwd"]
    assert min(fwd + both) >= 1 and len(fwd + both) == 8
    assert f"all 8 rows ({span(fwd)}× forward, {span(both)}× forward+backward)" in notes


def test_the_readmes_tables():
    """The README's H200 standing: prefill run 45 and decode-host run 66 (the decode call as the library now makes it;
    the H100's is test_results_run68's)."""
    readme = flat((ROOT / "README.md").read_text())
    scope, lines = card.standing({"prefill-h200-run45.json": _run("prefill-h200-run45.json")["rows"]},
                                 {"decode-host-h200-run66.json": host(66)})
    assert flat(card.standing_markdown(scope, lines)) in readme
    assert ("`python benchmarks/scorecard.py --standing --prefill benchmarks/data/prefill-h200-run45.json "
            "--decode-history benchmarks/data/decode-host-h200-run66.json`") in readme
    e66 = [speed(66, s)["eager_over_graph"] for s in SHORT]
    e63 = [speed(63, s)["eager_over_graph"] for s in SHORT]
    assert (f"the batch-1 eager calls over 8K and 20,000 keys ran {e66[0]:.3f}× and {e66[1]:.3f}× their CUDA graphs in "
            f"decode-host run 66, against {e63[0]:.3f}× and {e63[1]:.3f}× in run 63") in readme
