"""CUDA graphs of large decode calls merging in the split kernel (decode-host runs 32–34, decode runs 8 and 9):
benchmarks/RESULTS.md's section, NOTES-decode v20, docs/decode.md and the comment on ``decode_plan.GRAPH_FUSED_FROM_US``:
each table as its script renders it from the recorded files, each quoted number computed from them."""

from __future__ import annotations

import json
import statistics

from tests.helpers import ROOT
from tests.test_results_merge_rows import B8, D64, D128, MID, SMALL, _run, _table
from tests.test_results_merge_rows import _section as _merge_section
from tests.test_results_strided_decode import _run as _script
from tests.test_results_strided_decode import _span as _span1
from tests.test_results_variants import _flat


def _span(values, fmt="{:.2f}") -> str:
    return _span1(values, fmt)

DATA = ROOT / "benchmarks" / "data"
SECTION = ("### Decode-host runs 32–34 and decode runs 8 and 9:", "### Decode-host runs 30 and 31:")
IN, KERNEL = "graphs: in-kernel merge", "graphs: merge kernel"


def _section() -> str:
    return _merge_section(SECTION)


def _arms(run: int) -> dict:
    out: dict = {}
    for r in _run(run)["graph_merge_ab"]:
        out.setdefault((r["B"], r["H"], r["L"], r["D"]), {}).setdefault(r["arm"], []).append(r)
    return out


def _med(rows, key="graph_us") -> float:
    return statistics.median(r[key] for r in rows)


def _compare(run: int) -> list[float]:
    """decode.py's --compare ratios (default over --graph-merge kernel) of attnlab's own rows in decode run ``run``."""
    a, b = (json.loads((DATA / f"decode-h200-run{run}-{m}.json").read_text()) for m in ("kernel", "auto"))
    keyed = lambda r: {(x["B"], x["H"], x["Hkv"], x["L"], x["provider"]): x["graph_tb_per_s"]  # noqa: E731
                       for x in r["rows"] if "graph_tb_per_s" in x}
    ka, kb = keyed(a), keyed(b)
    own = ("attnlab", "merge-kernel", "paged16", "paged64", "paged256")
    return [kb[k] / ka[k] for k in ka if k in kb and k[4] in own]


def quotes() -> dict[str, str]:
    q = {}
    for run in (33, 34):
        arms = _arms(run)
        for name, shape in (("d128", D128), ("d64", D64), ("b8", B8), ("small", SMALL), ("mid", MID)):
            q[f"{name}_{run}"] = (f"{_span([r['graph_us'] for r in arms[shape][IN]])} against "
                                  f"{_span([r['graph_us'] for r in arms[shape][KERNEL]])}")
        cudnn = {s: _med(arms[s]["sdpa-cudnn"]) for s in arms}
        q[f"x_{run}"] = ", ".join(f"{cudnn[s] / _med(arms[s][IN]):.3f} against {cudnn[s] / _med(arms[s][KERNEL]):.3f}"
                                  for s in (D128, D64))
    q["run32_fused"] = str(sum(bool(r.get("graph_fused")) for r in _run(32)["graph_merge_ab"]))
    q["run32_rows"] = str(sum("graph_fused" in r for r in _run(32)["graph_merge_ab"]))
    fused34 = {(r["B"], r["L"], r["D"]) for r in _run(34)["graph_merge_ab"] if r.get("graph_fused")}
    q["run34_fused"] = "; ".join(f"{'batch ' + str(B) + ', ' if B > 1 else ''}{L // 1024}K keys, D = {D}"
                                 for B, L, D in sorted(fused34))
    q["c8"], q["c9"] = (_span(_compare(run), "{:.3f}") for run in (8, 9))
    speed = {(r["B"], r["H"], r["L"], r["D"], r["provider"]): r for r in _run(34)["speed"]}
    q["main_cudnn"] = _span([speed[(*s, "sdpa-cudnn")]["graph_us"] / speed[(*s, "attnlab")]["graph_us"]
                             for s in (D128, SMALL, MID, D64)])
    q["main_b8"] = f"{speed[(*B8, 'sdpa-cudnn')]['graph_us'] / speed[(*B8, 'attnlab')]['graph_us']:.3f}"
    return q


def test_tables_are_the_scripts_rendering():
    section = _section()
    for run in (33, 34):
        out = _script(ROOT / "benchmarks" / "decode_host.py", "--report", DATA / f"decode-host-h200-run{run}.json")
        assert _table(out[out.index("CUDA graphs of large calls"):], "| B | H/Hkv | L | D | arm |") in section, run
    out = _script(ROOT / "benchmarks" / "decode_host.py", "--report", DATA / "decode-host-h200-run34.json")
    for head in ("| B | H/Hkv | L | D | provider | eager µs |", "| B | H/Hkv | L | D | mode | calls |"):
        assert _table(out, head) in section, head
    cmp = _script(ROOT / "benchmarks" / "decode.py", "--compare", DATA / "decode-h200-run9-kernel.json",
                  DATA / "decode-h200-run9-auto.json")
    assert cmp.strip() in section


def test_section_and_notes_quotes_are_computed():
    text, q = _flat(_section()), quotes()
    notes = _flat((ROOT / "benchmarks" / "NOTES-decode.md").read_text().split("### v20 measured")[1])
    for t in (text, notes):
        assert f"D = 128 {q['d128_33']} µs (run 33) and {q['d128_34']} (run 34)" in t
        assert f"D = 64 {q['d64_33']} and {q['d64_34']}" in t
        assert f"batch 8 {q['b8_33']} and {q['b8_34']}" in t
    assert f"× cuDNN {q['x_33']} (run 33), {q['x_34']} (run 34; D = 128, then D = 64)" in text
    assert (f"64/8 heads over 8K keys {q['small_33']} and {q['small_34']}, 28/4 over 20,000 {q['mid_33']} and "
            f"{q['mid_34']}") in text
    assert f"{q['run32_fused']} of its {q['run32_rows']} rows" in text
    assert f"run 34's rows say the in-kernel arm's graphs merged in the split kernel at {q['run34_fused']}" in text
    assert f"from {q['c9']} (run 9; run 8, the same code twice: {q['c8']})" in text
    assert f"{q['main_cudnn']}× cuDNN's speed on the four batch-1 shapes and {q['main_b8']}× at batch 8" in text
    assert f"table from {q['c9']} default over the merge kernel (run 9), inside the {q['c8']} of the same code twice" in notes
    # the claims rest on: faster in every round at 32K in both runs; the fused flags only on the 32K rows
    for run in (33, 34):
        arms = _arms(run)
        for shape in (D128, D64):
            assert max(r["graph_us"] for r in arms[shape][IN]) <= max(r["graph_us"] for r in arms[shape][KERNEL])
    assert all(not r.get("graph_fused") for r in _run(32)["graph_merge_ab"])


def _pairs(shape) -> str:
    """Runs 33 and 34's in-kernel and merge-kernel graph µs at ``shape``: "a and b µs against c and d"."""
    q = quotes()
    name = {D128: "d128", D64: "d64"}[shape]
    (i33, k33), (i34, k34) = (q[f"{name}_{run}"].split(" against ") for run in (33, 34))
    return f"{i33} and {i34} µs against {k33} and {k34}"


def test_the_switch_and_its_comment():
    from attnlab.gpu import decode_plan

    assert decode_plan.GRAPH_FUSED_FROM_US == 13.0
    comment = " ".join((ROOT / "src" / "attnlab" / "gpu" / "decode_plan.py").read_text()
                       .split("GRAPH_FUSED_FROM_US = 13.0")[0].rsplit("\n\n", 1)[1].replace("#", " ").split())
    want = (f"the in-kernel merge took {_pairs(D128)} with the merge kernel at 32/8 heads over 32K keys (D = 128), "
            f"{_pairs(D64).replace(' µs', '')} at D = 64")
    assert want.replace("–", "-") in comment
    docs = _flat((ROOT / "docs" / "decode.md").read_text())
    assert (f"(decode-host runs 33 and 34: {_pairs(D128)} at 32/8 heads over 32K keys, D = 128; "
            f"{_pairs(D64).replace(' µs', '')} at D = 64)") in docs
