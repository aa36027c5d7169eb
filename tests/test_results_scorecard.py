"""benchmarks/RESULTS.md's scorecard section: its table as scorecard.py renders it from the recorded runs, the decode
bars of decode-host runs 31-35 computed from their files, and every number its sentences quote."""

from __future__ import annotations

import json
import re

from tests.helpers import ROOT, load_script

card = load_script("benchmarks/scorecard.py")
DATA = ROOT / "benchmarks" / "data"
PREFILL = ("prefill-h200-run35.json", "prefill-h200-run36.json")
HOST_RUNS = range(31, 36)


def _section() -> str:
    text = (ROOT / "benchmarks" / "RESULTS.md").read_text()
    start = text.index("## H200: the scorecard")
    return text[start:text.index("## H200: decode (Flash-Decoding)")]


def _host(run: int) -> dict:
    return json.loads((DATA / f"decode-host-h200-run{run}.json").read_text())


def _bars(run: int) -> dict:
    return {b["bar"]: b for b in card.decode_bars(_host(run))}


def history() -> str:
    """The decode bars of each decode-host run, as ``scorecard.py --decode-history`` renders them."""
    return card.history({f"decode-host-h200-run{run}.json": _host(run) for run in HOST_RUNS}).rstrip("\n")


def _card() -> str:
    runs = {n: json.loads((DATA / n).read_text())["rows"] for n in PREFILL}
    return card.markdown(card.scorecard(runs, _host(35)))


def test_the_tables_are_computed():
    section = _section()
    assert _card() in section
    assert history() in section


def test_quotes_are_computed():
    text = " ".join(_section().split())
    pairs = card.prefill_pairs({n: json.loads((DATA / n).read_text())["rows"] for n in PREFILL})
    for p, name in (("fwd_bwd", "forward+backward"), ("fwd", "forward")):
        low = min((r for r in pairs if r["pass_"] == p), key=lambda r: r["worst_round"])
        mhz = low["worst_round_mhz"]
        assert mhz[0] < mhz[1]
        quote = f"{low['worst_round']:.2f}× has attnlab at {mhz[0]:.0f} MHz against cuDNN's {mhz[1]:.0f}" if p == "fwd_bwd" \
            else f"the {name}'s {low['worst_round']:.2f}× at {mhz[0]:.0f} against {mhz[1]:.0f}"
        assert quote in text
    bars = {run: _bars(run) for run in HOST_RUNS}
    host = {run: b["decode: a kept call's host time"] for run, b in bars.items()}
    under = sum(h["met"] for h in host.values())
    ratios = [float(re.search(r", ([\d.]+)× it", h["measured"]).group(1)) for h in host.values()]
    assert f"under 20 µs in {['no', 'one', 'two', 'three', 'four', 'all'][under]} of the five processes" in text
    assert f"at {min(ratios):.2f}–{max(ratios):.2f}× the same process's empty one-argument Triton launch" in text
    assert f"run 35's host launched an empty kernel in {_host(35)['floors'][card.EMPTY_LAUNCH]:.1f} µs" in text
    e64 = {run: float(b["decode: eager within 10 % of CUDA graphs, D = 64"]["measured"].split("×")[0])
           for run, b in bars.items()}
    e128 = {run: b["decode: eager within 10 % of CUDA graphs, D = 128"]["met"] for run, b in bars.items()}
    met64 = {run: b["decode: eager within 10 % of CUDA graphs, D = 64"]["met"] for run, b in bars.items()}
    assert all(e128.values()) and [run for run, m in met64.items() if not m] == [34]
    assert f"at D = 128 in all five, at D = 64 in four (run 34's {e64[34]:.2f}×)" in text
    worst = {run: b["decode: batch 1 at or above cuDNN under CUDA graphs"] for run, b in bars.items()}
    shape = "64/8 heads, 8192 keys, D = 128"
    on_shape = [run for run, w in worst.items() if w["where"] == shape]
    assert len(on_shape) == 4 and "in four of the five runs" in text
    mine = {run: {(r["H"], r["Hkv"], r["L"], r["D"]): r["graph_us"] for r in _host(run)["speed"]
                  if r["B"] == 1 and r["provider"] == p} for run in HOST_RUNS for p in ("attnlab",)}
    peer = {run: {(r["H"], r["Hkv"], r["L"], r["D"]): r["graph_us"] for r in _host(run)["speed"]
                  if r["B"] == 1 and r["provider"] == "sdpa-cudnn"} for run in HOST_RUNS}
    at = [peer[run][(64, 8, 8192, 128)] / mine[run][(64, 8, 8192, 128)] for run in HOST_RUNS]
    assert f"at {min(at):.3f}–{max(at):.3f}×" in text
    roof = [r["roofline_ms"] * 1e3 for r in _host(35)["speed"] if (r["H"], r["Hkv"], r["L"]) == (64, 8, 8192)]
    assert f"a {roof[0]:.1f} µs read (the roofline)" in text
    graph = [mine[run][(64, 8, 8192, 128)] for run in HOST_RUNS] + [peer[run][(64, 8, 8192, 128)] for run in HOST_RUNS]
    assert all(10.5 <= g <= 11.5 for g in graph) and "both take about 11 µs for" in text
    same = [b["decode: batch 1 at or above cuDNN under CUDA graphs, cuDNN's work (no lengths)"] for b in bars.values()]
    assert all(b["met"] for b in same) and "above cuDNN on every batch-1 shape in all five runs" in text
    same_ratios = [float(b["measured"].split("×")[0]) for b in same]
    assert f"(its worst shape at {min(same_ratios):.3f}–{max(same_ratios):.3f}×)" in text
    full = {run: {(r["H"], r["Hkv"], r["L"], r["D"]): r["graph_us"] for r in _host(run)["speed"]
                  if r["B"] == 1 and r["provider"] == "attnlab-full"} for run in HOST_RUNS}
    cost = [mine[run][(64, 8, 8192, 128)] - full[run][(64, 8, 8192, 128)] for run in HOST_RUNS]
    assert f"the lengths cost {min(cost):.2f}–{max(cost):.2f} µs a call at 64/8 heads over 8,192 keys" in text
