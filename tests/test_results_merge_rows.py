"""The merge that loads all its rows at once (decode-host run 30) and every eager call launching once (run 31):
benchmarks/RESULTS.md's section, NOTES-decode v18 and v19, docs/decode.md, the README and the comment on
``decode_plan.EAGER_FUSED_BELOW_US``: each table as decode_host.py renders it from the recorded files, each quoted
number computed from them, and the switches as the runs left them."""

from __future__ import annotations

import json
import math
import re
import statistics

from tests.helpers import ROOT
from tests.test_results_strided_decode import _run as _script
from tests.test_results_strided_decode import _section as _results_section
from tests.test_results_strided_decode import _span
from tests.test_results_variants import _flat

DATA = ROOT / "benchmarks" / "data"
SECTION = ("### Decode-host runs 30 and 31:", "### Decode runs 6 and 7:")
D128, D64, SMALL, MID, B8 = ((1, 32, 32768, 128), (1, 32, 32768, 64), (1, 64, 8192, 128), (1, 28, 20000, 128),
                             (8, 32, 32768, 128))


def _run(run: int) -> dict:
    return json.loads((DATA / f"decode-host-h200-run{run}.json").read_text())


def _section(bounds=SECTION) -> str:
    return _results_section(bounds)


def _notes(version: str) -> str:
    return _flat((ROOT / "benchmarks" / "NOTES-decode.md").read_text().split(f"## {version}")[1].split("\n## ")[0])


def _merge_arms() -> dict:
    """(B, H, L, D) -> arm -> rows of run 30's merge A/B."""
    out: dict = {}
    for r in _run(30)["merge_ab"]:
        out.setdefault((r["B"], r["H"], r["L"], r["D"]), {}).setdefault(r["arm"], []).append(r)
    return out


def _med(rows, key="graph_us") -> float:
    return statistics.median(r[key] for r in rows)


def _eager_ab(shape) -> tuple[list, list]:
    rows = [r for r in _run(31)["eager_ab"] if (r["B"], r["H"], r["L"], r["D"]) == shape]
    return [r["us"] for r in rows if r["eager_fused"]], [r["us"] for r in rows if not r["eager_fused"]]


def _speed(run: int) -> dict:
    return {(r["B"], r["H"], r["L"], r["D"], r["provider"]): r for r in _run(run)["speed"]}


def _timeline(run: int) -> dict:
    return {(r["D"], r["mode"]): r for r in _run(run)["timeline"] if r["B"] == 1}


def quotes() -> dict[str, str]:
    """Every number RESULTS' section quotes, by the name of its place."""
    arms = _merge_arms()
    one, rows = "in-kernel, 1 row", "in-kernel, rows"
    k1, kr = "merge kernel, 1 row", "merge kernel, rows"
    gain = [_med(a[one]) - _med(a[rows]) for a in arms.values()]
    change = [_med(a[kr]) - _med(a[k1]) for a in arms.values()]
    pair = lambda shape, x, y: f"{_med(arms[shape][x]):.1f} against {_med(arms[shape][y]):.1f}"  # noqa: E731
    speed = _speed(31)
    tl = _timeline(31)
    on64, off64 = _eager_ab(D64)
    on128, off128 = _eager_ab(D128)
    tiny_on, tiny_off = _eager_ab((1, 32, 256, 128))
    cudnn = lambda s: speed[(*s, "sdpa-cudnn")]["graph_us"] / speed[(*s, "attnlab")]["graph_us"]  # noqa: E731
    return {
        "fused_gain": f"{min(gain):.1f}–{max(gain):.1f} µs faster under CUDA graphs on every shape",
        "fused_vs_kernel": f"{pair(D128, rows, kr)} µs at D = 128, {pair(D64, rows, kr)} at D = 64, "
                           f"{pair(B8, rows, kr)} at batch 8",
        "fused_slow": f"{pair(SMALL, rows, kr)} at 64/8 heads over 8K keys, {pair(MID, rows, kr)} at 28/4 over 20,000",
        "kernel_change": f"{min(change):+.2f} to {max(change):+.2f}".replace("-", "−"),
        "max_err": f"{max(r['max_err'] for r in _run(30)['merge_ab'] if 'max_err' in r):.1e}",
        "d64_on": _span(on64), "d64_off": _span(off64),
        "d64_ratio": f"{speed[(*D64, 'attnlab')]['eager_over_graph']:.2f}",
        "d128_on": _span(on128), "d128_off": _span(off128),
        "d128_ratio": f"{speed[(*D128, 'attnlab')]['eager_over_graph']:.2f}",
        "tiny_on": _span(tiny_on), "tiny_off": _span(tiny_off),
        "cudnn_batch1": _span([cudnn(s) for s in (D128, SMALL, MID, D64)], "{:.2f}"),
        "cudnn_b8": f"{cudnn(B8):.3f}",
        "tl_d128": f"{tl[(128, 'eager')]['gpu_period_us'] - tl[(128, 'graph')]['gpu_period_us']:.1f}",
        "tl_d64_split": f"{tl[(64, 'eager')]['split_us']:.1f}",
        "tl_d64_pair": f"{tl[(64, 'graph')]['split_us']:.1f} + {tl[(64, 'graph')]['merge_us']:.1f}",
        "tl_d64_host": f"{tl[(64, 'eager')]['host_period_us']:.1f}",
        "tl_d64_gpu": f"{tl[(64, 'eager')]['gpu_period_us']:.1f}",
    }


def _report(run: int) -> str:
    return _script(ROOT / "benchmarks" / "decode_host.py", "--report", DATA / f"decode-host-h200-run{run}.json")


def _table(text: str, head: str) -> str:
    i = text.index(head)
    j = text.find("\n\n", i)
    return text[i:j if j > 0 else len(text)].strip()


def test_tables_are_the_scripts_rendering():
    section = _section()
    r30, r31 = _report(30), _report(31)
    assert _table(r30, "| B | H/Hkv | L | D | arm | rows |") in section
    for head in ("| B | H/Hkv | L | D | fused when on |", "| B | H/Hkv | L | D | mode | calls |",
                 "| B | H/Hkv | L | D | provider | eager µs |"):
        assert _table(r31, head) in section, head


def test_section_quotes_are_computed():
    text = _flat(_section())
    q = quotes()
    assert f"made the in-kernel merge {q['fused_gain']}" in text
    assert f"CUDA graphs at 32K ({q['fused_vs_kernel']})" in text
    assert f"slower on the two small reads ({q['fused_slow']})" in text
    assert f"changed by {q['kernel_change']} µs under graphs" in text
    assert f"within {q['max_err']} of SDPA" in text
    assert (f"eager calls took {q['d64_on']} µs against {q['d64_off']} with the merge kernel, faster in every round; "
            f"eager over graph {q['d64_ratio']}× in the main table") in text
    assert f"At D = 128 level ({q['d128_on']} against {q['d128_off']}), eager over graph {q['d128_ratio']}×" in text
    assert f"host time (already one launch): {q['tiny_on']} against {q['tiny_off']} µs" in text
    assert f"{q['cudnn_batch1']}× cuDNN's speed on the four batch-1 shapes and {q['cudnn_b8']}× at batch 8" in text
    assert f"costs {q['tl_d128']} µs of GPU time over the graph's" in text
    assert (f"the one kernel takes {q['tl_d64_split']} µs, the graph's two {q['tl_d64_pair']}; under the profiler the "
            f"host's period ({q['tl_d64_host']}) still sets the GPU's ({q['tl_d64_gpu']})") in text
    # what the claims rest on: faster in every round at D = 64, the GPU tests passed in both runs
    on64, off64 = _eager_ab(D64)
    assert max(on64) < min(off64)
    passed = {}
    for run in (30, 31):
        log = (DATA / f"decode-host-run{run}" / "tests.log").read_text()
        assert "failed" not in log.lower() and "error" not in log.lower()
        passed[run] = re.search(r"(\d+) passed", log).group(1)
    assert f"{passed[30]} passed in run 30, {passed[31]} in run 31" in text


def test_notes_quotes_are_computed():
    arms = _merge_arms()
    v18 = _notes("v18 measured")
    med = lambda shape, arm: f"{_med(arms[shape][arm]):.1f}"  # noqa: E731
    one, rows, kr = "in-kernel, 1 row", "in-kernel, rows", "merge kernel, rows"
    assert (f"{med(D128, rows)} against {med(D128, one)} µs at 32/8 over 32K (D = 128), {med(D64, rows)} against "
            f"{med(D64, one)} at D = 64, {med(SMALL, rows)} against {med(SMALL, one)} at 64/8 over 8K, {med(MID, rows)} "
            f"against {med(MID, one)} at 28/4 over 20,000, {med(B8, rows)} against {med(B8, one)} at batch 8") in v18
    assert (f"faster at 32K ({med(D128, rows)} against {med(D128, kr)} at D = 128, {med(D64, rows)} against "
            f"{med(D64, kr)} at D = 64, {med(B8, rows)} against {med(B8, kr)} at batch 8), slower on the two small reads "
            f"({med(SMALL, rows)} against {med(SMALL, kr)} at 64/8 over 8K, {med(MID, rows)} against {med(MID, kr)} "
            f"at 28/4)") in v18
    faster = [_med(arms[s][kr]) - _med(arms[s][rows]) for s in (D128, D64, B8)]
    assert f"the in-kernel merge was {_span(faster)} µs faster" in v18
    eager = lambda shape, arm: _span([r["eager_us"] for r in arms[shape][arm]])  # noqa: E731
    assert f"the in-kernel merge {eager(D64, rows)} µs, the merge kernel {eager(D64, kr)} on this host" in v18
    small = [r["eager_us"] for a in ("merge kernel, 1 row", kr) for r in arms[SMALL][a]]
    assert f"64/8 over 8K with the merge kernel {_span(small)} µs eager by round" in v18
    v19 = _notes("v19 measured")
    q = quotes()
    assert f"{q['d64_on']} µs a call against {q['d64_off']}" in v19 and f"eager over graph {q['d64_ratio']}×" in v19
    kept = lambda run: next(r["host_us"] for r in _run(run)["host"]  # noqa: E731
                            if r["call"] == "attnlab.flash_decode (plan kept)")
    assert f"kept call at 256 keys took {kept(31):.1f} µs of host time (runs 26–29: " \
           f"{_span([kept(run) for run in (26, 27, 28, 29)])})" in v19
    assert (f"the one kernel takes {q['tl_d64_split']} µs against the graph's {q['tl_d64_pair']}, and under the profiler "
            f"the host's period ({q['tl_d64_host']} µs) still set the GPU's ({q['tl_d64_gpu']})") in v19
    assert f"attnlab ran at {q['cudnn_batch1']}× cuDNN on the four batch-1 shapes and {q['cudnn_b8']}× at batch 8" in v19


def test_switches_and_their_comment():
    from attnlab.gpu import decode_plan

    assert decode_plan.EAGER_FUSED_BELOW_US == math.inf and decode_plan.MERGE_ROWS is None
    comment = " ".join((ROOT / "src" / "attnlab" / "gpu" / "decode_plan.py").read_text()
                       .split("EAGER_FUSED_BELOW_US = math.inf")[0].rsplit("\n\n", 1)[1].replace("#", " ").split())
    arms = _merge_arms()
    eager = lambda shape, arm: _span([r["eager_us"] for r in arms[shape][arm]]).replace("–", "-")  # noqa: E731
    assert (f"took {eager(D64, 'in-kernel, rows')} against {eager(D64, 'merge kernel, rows')} µs with the merge kernel "
            f"at D = 64 and {eager(D128, 'in-kernel, rows')} against {eager(D128, 'merge kernel, rows')} at D = 128") \
        in comment


def test_docs_quote_the_runs():
    q = quotes()
    docs = _flat((ROOT / "docs" / "decode.md").read_text())
    assert (f"At 32/8 heads over 32K keys and D = 64, eager calls took {q['d64_on']} µs against {q['d64_off']} with the "
            f"merge kernel, {q['d64_ratio']}× the CUDA-graph time (decode-host run 31; at D = 128 {q['d128_ratio']}×)") in docs
    assert f"faster at 32K ({q['fused_vs_kernel']}; decode-host run 30)" in docs
    arms = _merge_arms()
    slower = max(_med(a["in-kernel, rows"]) - _med(a["merge kernel, rows"]) for a in arms.values())
    assert f"Now the fused merge is at most {slower:.1f} µs slower than the merge kernel under CUDA graphs" in docs
