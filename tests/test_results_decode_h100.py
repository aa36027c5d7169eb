"""Decode-host run 37, on an H100 (the Gluon split kernel against the Triton one): benchmarks/RESULTS.md's section and
NOTES-decode's "Measured: decode-host run 37", their tables as decode_host.py renders them from the recorded file and
every quoted number computed from it."""

from __future__ import annotations

import json
import re
import statistics

from tests.helpers import ROOT, flat, load_script, md_table, notes_section, results_section

DATA = ROOT / "benchmarks" / "data"
dh = load_script("benchmarks/decode_host.py")
card = load_script("benchmarks/scorecard.py")

D128, SMALL, MID, B8, D64 = ((1, 32, 8, 32768, 128), (1, 64, 8, 8192, 128), (1, 28, 4, 20000, 128),
                             (8, 32, 8, 32768, 128), (1, 32, 8, 32768, 64))
BATCH1 = (D128, SMALL, MID, D64)


def _run() -> dict:
    return json.loads((DATA / "decode-host-h100-run37.json").read_text())


def _results_section() -> str:
    return results_section("### Decode-host run 37, on an H100")


def _notes_section() -> str:
    return notes_section("NOTES-decode.md", "## Measured: decode-host run 37")


def _medians(run: dict) -> dict:
    """(shape, length, arm) -> the median of the A/B's rounds for eager, graph and L2-cold graph µs."""
    groups: dict = {}
    for r in run["kernel_ab"]:
        if "round" in r:
            groups.setdefault(((r["B"], r["H"], r["Hkv"], r["L"], r["D"]), r["length"], r["arm"]), []).append(r)
    return {k: {m: statistics.median(r[m] for r in rs if r.get(m) is not None)
                for m in ("eager_us", "graph_us", "graph_cold_us") if any(r.get(m) is not None for r in rs)}
            for k, rs in groups.items()}


def test_the_section_holds_the_tables_as_decode_host_renders_them():
    md = dh.markdown(_run())
    section = _results_section()
    for head in ("| B | H/Hkv | L | D | provider | eager µs | graph µs | eager/graph | eager TB/s",
                 "| B | H/Hkv | L | D | provider | host µs", "| B | H/Hkv | L | D | keys | arm",
                 "| B | H/Hkv | L | D | ring"):
        assert md_table(md, head) in section, head
    tests = re.search(r"(\d+ passed, \d+ skipped)", (DATA / "decode-host-run37" / "tests.log").read_text()).group(1)
    assert f"kernel's: {tests}" in flat(section)
    assert "H100" in (DATA / "decode-host-run37" / "gpu.txt").read_text() and _run()["gpu"].startswith("NVIDIA H100")


def test_the_quoted_spans():
    run = _run()
    med = _medians(run)
    loss = [med[s, s[3], "gluon"]["graph_us"] - med[s, s[3], "triton"]["graph_us"] for s in BATCH1]
    ratio = {s: med[s, s[3], "triton"]["graph_us"] / med[s, s[3], "gluon"]["graph_us"] for s in (*BATCH1, B8)}
    vs_cudnn = [med[s, s[3], "sdpa-cudnn"]["graph_us"] / med[s, s[3], "triton"]["graph_us"] for s in BATCH1]
    cold = [med[s, s[3], "sdpa-cudnn"]["graph_cold_us"] / med[s, s[3], "triton"]["graph_cold_us"]
            for s in BATCH1]
    short = med[D128, 1024, "gluon"]["graph_us"] - med[D128, 1024, "triton"]["graph_us"]
    short_cold = med[D128, 1024, "gluon"]["graph_cold_us"] - med[D128, 1024, "triton"]["graph_cold_us"]
    results, notes = flat(_results_section()), flat(_notes_section())
    assert min(loss) > 0  # slower on every batch-1 shape: the reason the switch stays off
    assert f"{min(loss):.1f}–{max(loss):.1f} µs a call under graphs" in results
    assert f"Gluon is {min(loss):.1f}–{max(loss):.1f} µs slower a call" in notes
    assert f"is {short:.1f} µs slower" in results and f"is {short:.1f} µs slower against" in notes
    doc = flat((ROOT / "docs" / "decode.md").read_text())
    assert (f"it ran {min(loss):.1f}–{max(loss):.1f} µs a call slower than the Triton kernel on every batch-1 shape"
            in doc and f"and {short:.1f} µs slower on a short sequence" in doc)
    assert f"({short:.2f} and {short_cold:.2f} µs)" in notes
    assert (f"{ratio[D128]:.3f} at 32/8 heads over 32K (D = 128), {ratio[D64]:.3f} at D = 64, {ratio[SMALL]:.3f} at "
            f"64/8 over 8K, {ratio[MID]:.3f} at 28/4 over 20,000; batch 8 {ratio[B8]:.3f}") in notes
    assert f"the A/B's medians {min(vs_cudnn):.3f}–{max(vs_cudnn):.3f}× cuDNN" in results
    assert f"L2-cold {min(cold):.3f}–{max(cold):.3f}" in notes
    b = {s: med[s, s[3], "triton"]["graph_us"] for s in BATCH1}
    c = {s: med[s, s[3], "sdpa-cudnn"]["graph_us"] for s in (*BATCH1, B8)}
    t8 = med[B8, B8[3], "triton"]["graph_us"]
    assert (f"{c[D128] / b[D128]:.3f} at 32/8 over 32K, {c[SMALL] / b[SMALL]:.3f} at 64/8 over 8K, "
            f"{c[MID] / b[MID]:.3f} at 28/4 over 20,000, {c[B8] / t8:.3f} at batch 8, {c[D64] / b[D64]:.3f} at "
            f"D = 64") in notes


def test_the_early_copies_past_a_short_length():
    """The wasted copies NOTES quotes for 1,024 keys of 32,768: every program copies the ring's first RING - 1 tiles
    of K and V before it knows the length; the ones at or past the length are never read."""
    from attnlab.gpu import decode_gluon

    run = _run()
    rows = [r for r in run["kernel_ab"] if r.get("arm") == "gluon" and r["length"] == 1024]
    splits, block_n, ring = rows[0]["splits"], 128, decode_gluon.RING_STAGES
    hkv, d, length = D128[2], D128[4], 1024
    copies = [(s + t * splits) for s in range(splits) for t in range(ring - 1)]
    wasted = sum(1 for tile in copies if tile * block_n >= length) * hkv
    tile_bytes = 2 * block_n * d * 2  # K and V, bf16
    notes = flat(_notes_section())
    assert f"every one of the call's {hkv * splits} programs copies its first {ring - 1} tiles" in notes
    assert (f"{wasted} of those {len(copies) * hkv} tiles lie past it: {wasted * tile_bytes >> 20} MiB of the "
            f"{len(copies) * hkv * tile_bytes >> 20} copied are never used") in notes


def test_the_scorecard_of_the_run():
    bars = {b["bar"]: b for b in card.scorecard({}, _run())}
    notes = flat(_notes_section())
    small = bars["decode: batch 1 at or above cuDNN under CUDA graphs"]
    assert not small["met"] and "0.978× cuDNN (12.2 against 12.0 µs)" in notes
    for bar in ("decode: a kept call's host time", "decode: eager within 10 % of CUDA graphs, D = 128",
                "decode: eager within 10 % of CUDA graphs, D = 64"):
        assert bars[bar]["met"], bar
    sp = {(x["B"], x["H"], x["Hkv"], x["L"], x["D"], x["provider"]): x for x in _run()["speed"]}
    e128, e64 = sp[(*D128, "attnlab")], sp[(*D64, "attnlab")]
    assert (f"1.04 at D = 128 and {e64['eager_over_graph']:.2f} at D = 64 (L2-cold {e128['eager_cold_over_graph']:.2f} "
            f"and {e64['eager_cold_over_graph']:.2f})") in notes
    assert f"{e128['eager_over_graph']:.2f}" == "1.04"
    host = next(h["host_us"] for h in _run()["host"] if h["call"] == "attnlab.flash_decode (plan kept)")
    empty = _run()["floors"]["triton_empty_1_arg, kernel[grid]"]
    assert f"A kept call's host time {host:.1f} µs (an empty one-argument Triton launch {empty:.1f}" in notes
    assert f"{e64['loop_host_us']:.1f} at D = 64, against {host:.1f}" in notes
