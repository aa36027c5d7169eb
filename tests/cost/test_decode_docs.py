"""The batch-1 decode numbers the README and benchmarks/RESULTS.md quote are those of the recorded H200
run they name (benchmarks/data/decode-host-h200-run6.json): a changed file or a retyped number fails here."""

from __future__ import annotations

import json

from tests.helpers import ROOT, load_script

from attnlab.cost import GPUS

_cols = load_script("benchmarks/roofline_columns.py")
decode_roofline_ms, percent = _cols.decode_roofline_ms, _cols.percent


def _speed(run: int) -> dict:
    r = json.loads((ROOT / "benchmarks" / "data" / f"decode-host-h200-run{run}.json").read_text())
    rows: dict = {}
    for x in r["speed"]:
        rows.setdefault((x["B"], x["H"], x["Hkv"], x["L"], x["D"]), {})[x["provider"]] = x
    return rows


def test_readme_batch_one_range_is_run_6():
    """cuDNN's CUDA-graph time over attnlab's, over the batch-1 rows of run 6."""
    ratios = [v["sdpa-cudnn"]["graph_us"] / v["attnlab"]["graph_us"] for k, v in _speed(6).items() if k[0] == 1]
    readme = (ROOT / "README.md").read_text()
    assert len(ratios) == 4
    assert f"batch 1 with GQA it takes {min(ratios):.2f}–{max(ratios):.2f}× cuDNN's speed under CUDA graphs" in readme
    assert "(decode-host run 6)" in readme


def test_results_table_is_run_6():
    """Every row of RESULTS.md's run 6 table: attnlab's and cuDNN's graph and eager µs, the ratios, and the
    decode roofline of the shape on the H200 preset with each graph call's share of it."""
    text = (ROOT / "benchmarks" / "RESULTS.md").read_text()
    section = text[text.index("### Decode-host runs 4–7"):]
    for (B, H, Hkv, L, D), v in _speed(6).items():
        a, c = v["attnlab"], v["sdpa-cudnn"]
        head = f"| {B} | {H}/{Hkv} | {L} | {D} | {a['graph_us']:.1f} | "
        line = next(ln for ln in section.splitlines() if ln.startswith(head))
        cells = [x.strip() for x in line.strip("|").split("|")]
        roof = decode_roofline_ms(batch=B, heads=H, kv_heads=Hkv, seq=L, head_dim=D, gpu=GPUS["H200"]) * 1e3
        assert cells[6:] == [f"{c['graph_us']:.1f}", f"{c['graph_us'] / a['graph_us']:.2f}", f"{a['eager_us']:.1f}",
                             f"{c['eager_us']:.1f}", f"{a['eager_over_graph']:.2f}", f"{roof:.1f}",
                             percent(roof / a["graph_us"]), percent(roof / c["graph_us"])], line


def test_results_pdl_paragraph_is_run_8():
    """RESULTS.md's run 8 paragraph: per shape, the PDL launch's two rounds against the plain launch's."""
    rows = json.loads((ROOT / "benchmarks" / "data" / "decode-host-h200-run8.json").read_text())["pdl"]
    text = " ".join((ROOT / "benchmarks" / "RESULTS.md").read_text().split())
    shapes = sorted({(r["H"], r["Hkv"], r["L"], r["D"]) for r in rows}, key=lambda s: (s[3] != 128, -s[2]))
    assert len(shapes) == 4
    for shape in shapes:
        g = {(r["pdl"], r["round"]): r["graph_us"] for r in rows if (r["H"], r["Hkv"], r["L"], r["D"]) == shape}
        cell = f"{g[True, 0]:.1f} / {g[True, 1]:.1f} against {g[False, 0]:.1f} / {g[False, 1]:.1f}"
        assert cell in text, (shape, cell)
        assert g[True, 0] > g[False, 0] and g[True, 1] > g[False, 1]  # "slower everywhere", as the text says
