"""benchmarks/RESULTS.md's sections on prefill run 37 with decode-host run 36, and bwd-block-m runs 20 and 21: their
tables as the scripts render them from the recorded files, and the spans their sentences quote."""

from __future__ import annotations

import json

from tests.helpers import ROOT, load_script

DATA = ROOT / "benchmarks" / "data"
card = load_script("benchmarks/scorecard.py")
bm = load_script("benchmarks/bwd_block_m.py")


def _rows(name: str) -> list[dict]:
    return json.loads((DATA / name).read_text())["rows"]


def _section(title: str) -> str:
    text = (ROOT / "benchmarks" / "RESULTS.md").read_text()
    start = text.index(title)
    return text[start:text.index("\n### ", start + 1)]


def test_the_scorecard_of_prefill_run_37_and_decode_host_run_36():
    section = _section("### Prefill run 37 with decode-host run 36")
    runs = {"prefill-h200-run37.json": _rows("prefill-h200-run37.json")}
    host = json.loads((DATA / "decode-host-h200-run36.json").read_text())
    bars = card.scorecard(runs, host)
    assert card.markdown(bars).rstrip("\n") in section
    met = {b["bar"]: b["met"] for b in bars}
    assert met["prefill rows: every head dim, mask, pass, multi-head and GQA, in one run"]
    assert met["prefill forward at or above cuDNN"] and met["prefill forward+backward at or above cuDNN"]
    assert not met["decode: eager within 10 % of CUDA graphs, D = 64"]
    assert not met["decode: eager within 10 % of CUDA graphs, D = 64, L2 cold"]


def test_bwd_block_m_runs_20_and_21():
    section = _section("### Bwd-block-m runs 20 and 21")
    rows = {n: _rows(f"bwd-block-m-h200-run{n}.json") for n in (20, 21)}
    for n in (20, 21):
        assert bm.report(rows[n]).rstrip("\n") in section
    ratio = {}
    for n in (20, 21):
        ms = {(r["row"], r["D"], r["arm"]): r["ms"] for r in rows[n]}
        for (row, D, arm), t in ms.items():
            if arm == "l2chunks":
                ratio.setdefault(row.startswith("gqa"), []).append(ms[row, D, "table"] / t)
    gqa, mha = ratio[True], ratio[False]
    assert (f"the GQA rows {min(gqa):.3f}–{max(gqa):.3f}×, the multi-head causal rows "
            f"{min(mha):.3f}–{max(mha):.3f}× (both runs)") in section


def test_the_l2_chunks_default_quotes_runs_20_and_21():
    """``prefill_gluon_bwd``'s ``L2_CHUNKS`` comment and docs/gpu.md quote the GQA rows' gain that turned it on, and the
    multi-head rows' spread between two arms of the same launches (numbered key blocks first either way)."""
    from attnlab.gpu import prefill_gluon_bwd as gb

    gqa, mha = [], []
    for n in (20, 21):
        ms = {(r["row"], r["D"], r["arm"]): r["ms"] for r in _rows(f"bwd-block-m-h200-run{n}.json")}
        for (row, D, arm), t in ms.items():
            if arm != "l2chunks":
                continue
            (gqa if row.startswith("gqa") else mha).append(ms[row, D, "table"] / t)
            B, H, Hkv, N, _ = bm.SHAPES[row]
            hkv = Hkv * 64 // D
            assert gb.heads_first_default(True, -(-N // 128) * B * hkv, 132) == row.startswith("gqa"), row
    comment = " ".join((ROOT / "src" / "attnlab" / "gpu" / "prefill_gluon_bwd.py").read_text().replace("#", " ").split())
    assert f"GQA causal rows at {min(gqa):.3f}-{max(gqa):.3f}x heads first's speed" in comment
    assert f"their {min(mha):.3f}-{max(mha):.3f}x is the spread between two arms of the same launches" in comment
    doc = " ".join((ROOT / "docs" / "gpu.md").read_text().split())
    assert f"it ran the GQA causal backward {min(gqa):.2f}–{max(gqa):.2f}× faster than heads first" in doc
    assert gb.L2_CHUNKS and gb.L2_CHUNKS_MIN_GROUP == 2 and min(gqa) >= 1.02
