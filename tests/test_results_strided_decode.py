"""Decode's tiles dealt to splits in turn (decode-host runs 25 and 26), the merge trigger (run 27) and the prefill
table with rotated rounds and clocks (prefill runs 33 and 34): benchmarks/RESULTS.md's three sections, NOTES-decode
v14 and v15, NOTES-prefill v48, docs/decode.md and the comments on ``decode_plan.SPLIT_ORDER`` and ``MERGE_TRIGGER``: each table as its script renders it from the recorded files, each
quoted number computed from them, and the library's switches as the runs left them."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys

from tests.helpers import ROOT, load_script
from tests.test_results_variants import _flat

DATA = ROOT / "benchmarks" / "data"
DECODE = ("### Decode-host runs 25 and 26", "### Decode-host run 24:")
TRIGGER = ("### Decode-host run 27:", "### Decode-host runs 25 and 26")
PREFILL = ("### Prefill runs 33 and 34:", "### Prefill runs 29–32, prefill-profile run 1")
BATCH1 = ((1, 32, 8, 32768, 128), (1, 64, 8, 8192, 128), (1, 28, 4, 20000, 128), (1, 32, 8, 32768, 64))


def _section(bounds) -> str:
    results = (ROOT / "benchmarks" / "RESULTS.md").read_text()
    return results[results.index(bounds[0]):results.index(bounds[1])]


def _notes(name: str, version: str) -> str:
    return _flat((ROOT / "benchmarks" / name).read_text().split(f"## {version}")[1])


def _run(*args) -> str:
    res = subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    return res.stdout


def _decode(run: int) -> dict:
    return json.loads((DATA / f"decode-host-h200-run{run}.json").read_text())


def _arms(run: int) -> dict:
    """(B, H, Hkv, L, D, keys) -> arm -> {"len": [graph µs by round], "full": [...]}."""
    out: dict = {}
    for r in _decode(run)["order_ab"]:
        arm = out.setdefault((r["B"], r["H"], r["Hkv"], r["L"], r["D"], r["length"]), {}).setdefault(
            r["arm"], {"len": [], "full": []})
        arm["len"].append(r["graph_us"])
        if "full_graph_us" in r:
            arm["full"].append(r["full_graph_us"])
    return out


def _med(arm: dict, which="len") -> float:
    return statistics.median(arm[which])


def _span(values, fmt="{:.1f}", dash="–") -> str:
    lo, hi = fmt.format(min(values)), fmt.format(max(values))
    return lo if lo == hi else f"{lo}{dash}{hi}"


def test_decode_order_tables_are_the_scripts_rendering():
    section = _section(DECODE)
    for run in (25, 26):
        out = _run(ROOT / "benchmarks" / "decode_host.py", "--report", DATA / f"decode-host-h200-run{run}.json")
        start = out.index("| B | H/Hkv | L | D | keys |")
        end = out.find("\n\n", start)
        table = out[start:end if end > 0 else len(out)].strip()
        assert table in section, f"run {run}'s order table"
        # every arm gave SDPA's answer
        assert all(r["max_err"] < 1e-3 for r in _decode(run)["order_ab"] if "max_err" in r)


def test_decode_quotes_are_computed():
    text, notes = _flat(_section(DECODE)), _notes("NOTES-decode.md", "v14 measured")
    runs = {run: _arms(run) for run in (25, 26)}
    key = lambda shape, keys=None: (*shape, shape[3] if keys is None else keys)  # noqa: E731
    ratio = lambda arms, arm, which="len": _med(arms["sdpa-cudnn"]) / _med(arms[arm], which)  # noqa: E731
    # strided faster than chunks with lengths at 64/8 8K and both 32K shapes, in both runs; 28/4 slower
    for run, arms in runs.items():
        for shape in (BATCH1[0], BATCH1[1], BATCH1[3]):
            a = arms[key(shape)]
            assert _med(a["strided"]) < _med(a["chunks"]), (run, shape)
        a = arms[key(BATCH1[2])]
        assert _med(a["strided"]) > _med(a["chunks"])
        for b1 in BATCH1:  # without lengths strided was faster on every batch-1 shape
            assert _med(arms[key(b1)]["strided"], "full") < _med(arms[key(b1)]["chunks"], "full")
    slower = [_med(runs[r][key(BATCH1[2])]["strided"]) / _med(runs[r][key(BATCH1[2])]["chunks"]) - 1 for r in (25, 26)]
    assert f"{slower[0] * 100:.1f} % and {slower[1] * 100:.1f} % slower at 28/4" in text
    chunks_64_8 = [ratio(runs[r][key(BATCH1[1])], "chunks") for r in (25, 26)]
    assert f"({_span(chunks_64_8, '{:.2f}')}× here" in text
    # the prefetch against the strided order without it
    rel = {p: [] for p in (1, 2)}
    batch8 = []
    for arms in runs.values():
        for k, a in arms.items():
            for p in (1, 2):
                for which in ("len", "full"):
                    if a[f"strided+prefetch{p}"][which]:
                        x = _med(a[f"strided+prefetch{p}"], which) / _med(a["strided"], which) - 1
                        (rel[p] if k[0] == 1 else batch8).append(x)
    assert min(rel[1]) > 0 and min(rel[2]) > 0
    p1 = f"{min(rel[1]) * 100:.2f}–{max(rel[1]) * 100:.1f}"  # the least is under 0.1 %
    p2 = _span([x * 100 for x in rel[2]])
    within = max(abs(x) for x in batch8) * 100
    quote = f"one tile by {p1} %, two by {p2} %"
    assert quote in text and f"within {within:.1f} % either way" in text
    assert f"by {p1} % (one tile) and {p2} % (two), and within {within:.1f} % at batch 8" in notes
    comment = _flat((ROOT / "src" / "attnlab" / "gpu" / "decode_plan.py").read_text().replace("\n# ", "\n"))
    assert f"(one tile by {p1.replace('–', '-')} %, two by {p2.replace('–', '-')} %), within {within:.1f} % at batch 8" \
        in comment
    # the medians NOTES v14 quotes, run 25 / run 26
    for shape, label in ((BATCH1[1], "64/8 over 8K"),):
        s, c = (" / ".join(f"{_med(runs[r][key(shape)][arm]):.2f}" for r in (25, 26)) for arm in ("strided", "chunks"))
        assert f"{label} {s} against {c} µs" in notes
    for shape in (BATCH1[0], BATCH1[3]):
        s, c = (" / ".join(f"{_med(runs[r][key(shape)][arm]):.2f}" for r in (25, 26)) for arm in ("strided", "chunks"))
        assert f"{s} against {c}" in notes
    s, c = (" / ".join(f"{_med(runs[r][key(BATCH1[2])][arm]):.2f}" for r in (25, 26)) for arm in ("strided", "chunks"))
    assert f"28/4 over 20,000 {s} against {c}" in notes
    for shape, arm in ((BATCH1[1], "strided"), (BATCH1[1], "chunks"), (BATCH1[3], "strided"), (BATCH1[3], "chunks")):
        x = " / ".join(f"{ratio(runs[r][key(shape)], arm):.2f}" for r in (25, 26))
        assert x in notes, (shape, arm, x)
    # the comment's and docs/decode.md's run-25 figures
    a25 = runs[25]
    s64, c64 = (_span(a25[key(BATCH1[1])][arm]["len"], dash="-") for arm in ("strided", "chunks"))
    s32, c32 = (f"{_med(a25[key(BATCH1[0])][arm]):.1f}" for arm in ("strided", "chunks"))
    sd64, cd64 = (_span(a25[key(BATCH1[3])][arm]["len"], dash="-") for arm in ("strided", "chunks"))
    s28, c28 = (f"{_med(a25[key(BATCH1[2])][arm]):.1f}" for arm in ("strided", "chunks"))
    assert (f"{s64} against {c64} µs at 64/8 heads over 8K keys, {s32} against {c32} at 32/8 over 32K (D = 128), "
            f"{sd64} against {cd64} at D = 64" in comment)
    assert f"{s28} against {c28} at 28/4 over 20,000" in comment
    docs = _flat((ROOT / "docs" / "decode.md").read_text())
    assert (f"({s64.replace('-', '–')} against {c64.replace('-', '–')} µs at 64/8 heads over 8K keys, {s32} against "
            f"{c32} at 32/8 over 32K; decode-host run 25) and level on a fourth (batch 8), {slower[0] * 100:.1f} % "
            "slower at 28/4" in docs)
    b8 = [_med(runs[r][key((8, 32, 8, 32768, 128))][arm]) for r in (25, 26) for arm in ("strided", "chunks")]
    assert abs(b8[0] / b8[1] - 1) < 0.005 and abs(b8[2] / b8[3] - 1) < 0.005  # "level at batch 8"


def test_decode_sweep_and_main_table_quotes():
    text, notes = _flat(_section(DECODE)), _notes("NOTES-decode.md", "v14 measured")
    r26 = _decode(26)
    for shape in BATCH1:  # the model's pick is the fastest of the "large" sweep on every batch-1 shape
        rows = [r for r in r26["sweep"] if (r["B"], r["H"], r["Hkv"], r["L"], r["D"]) == shape
                and r["config"] == "large"]
        assert min(rows, key=lambda r: r["graph_us"])["picked"]
    host = {r["call"]: r["host_us"] for r in r26["host"]}
    floor = r26["floors"]["triton_empty_1_arg, kernel[grid]"]
    assert f"kept plan {host['attnlab.flash_decode (plan kept)']:.1f} µs of host time" in text
    assert f"(an empty one-argument Triton launch {floor:.1f} µs)" in text
    speed = {(r["B"], r["H"], r["Hkv"], r["L"], r["D"], r["provider"]): r for r in r26["speed"]}
    eg = [speed[(*BATCH1[i], "attnlab")]["eager_over_graph"] for i in (0, 3)]
    assert f"eager within {round((eg[0] - 1) * 100)} % of the CUDA-graph time at 32K, D = 128, and {round((eg[1] - 1) * 100)} %" \
        in text
    assert f"(1.06×), not at D = 64 ({eg[1]:.2f}×" in notes and f"{eg[0]:.2f}" == "1.06"
    vs = [speed[(*s, "sdpa-cudnn")]["graph_us"] / speed[(*s, "attnlab")]["graph_us"] for s in BATCH1]
    assert (f"{vs[0]:.2f}× cuDNN at 32/8 over 32K, {vs[1]:.2f}× at 64/8 over 8K, {vs[2]:.2f}× at 28/4 over 20,000, "
            f"{vs[3]:.2f}× at D = 64 32K" in notes)
    b8 = speed[(8, 32, 8, 32768, 128, "attnlab")]["graph_us"], speed[(8, 32, 8, 32768, 128, "sdpa-cudnn")]["graph_us"]
    assert f"{b8[1] / b8[0]:.3f}× at batch 8 ({b8[0]:.1f} against {b8[1]:.1f} µs" in notes
    assert f"host time {host['attnlab.flash_decode (plan kept)']:.1f} µs through `attnlab.flash_decode`" in notes


def _prefill(run: str) -> tuple[list, dict, dict]:
    """A prefill run's rows, its rows by (D, causal, N, pass) and provider, and attnlab's speed over cuDNN's by pass
    as the span the texts quote ("1.01–1.14")."""
    rows = json.loads((DATA / f"prefill-h200-run{run}.json").read_text())["rows"]
    by: dict = {}
    for r in rows:
        by.setdefault((r["D"], r["causal"], r["N"], r["pass_"]), {})[r["provider"]] = r
    spans = {p: _span([v["sdpa-cudnn"]["ms"] / v["attnlab"]["ms"] for k, v in by.items() if k[3] == p], "{:.2f}")
             for p in ("fwd", "fwd_bwd")}
    return rows, by, spans


def test_prefill_run_33_table_and_quotes():
    section = _section(PREFILL)
    out = _run(ROOT / "benchmarks" / "prefill.py", "report", DATA / "prefill-h200-run33.json").strip()
    assert out in section
    text, notes = _flat(section), _notes("NOTES-prefill.md", "v48")
    prefill = load_script("benchmarks/prefill.py")
    rows, by, spans = _prefill("33")
    assert min(v["sdpa-cudnn"]["ms"] / v["attnlab"]["ms"] for v in by.values()) > 1.0
    assert f"forward {spans['fwd']}×, forward+backward {spans['fwd_bwd']}×" in text
    assert f"forward {spans['fwd']}×, forward+backward {spans['fwd_bwd']}×" in notes
    s = prefill.slow_rounds(rows)
    n = len(s["slow"])
    assert (f"had {s['by_provider']['sdpa']} slow rounds, attnlab {s['by_provider']['attnlab']}, cuDNN pinned none; "
            f"{s['by_round'][2]} fell in the last round" in text) and "sdpa-cudnn" not in s["by_provider"]
    under = sorted((min(x["others_mhz"]) - x["sm_mhz"] for x in s["slow"]), reverse=True)
    big = [u for u in under if u >= 150]
    assert f"{len(big)} of the {n} ran at least {min(big):.0f} MHz under their row's other rounds, a ninth " \
           f"{under[len(big)]:.0f} MHz under" in text and len(big) + 1 == 9
    rest = [x for x in s["slow"] if min(x["others_mhz"]) - x["sm_mhz"] < 100]
    assert len(rest) == 3 and all(x["provider"] == "attnlab" and x["D"] == 64 and x["sm_mhz"] in x["others_mhz"]
                                  for x in rest)
    mhz = [st["sm_mhz"] for r in rows for st in r["gpu_state"]]
    watts = [st["power_w"] for r in rows for st in r["gpu_state"]]
    by_d = {D: statistics.median(st["sm_mhz"] for r in rows if r["D"] == D for st in r["gpu_state"]) for D in (64, 128)}
    assert (f"ranged {min(mhz):,.0f}–{max(mhz):,.0f} MHz (median {statistics.median(mhz):,.0f}; D = 64 rows "
            f"{by_d[64]:,.0f}, D = 128 rows {by_d[128]:,.0f}) at a median draw of {statistics.median(watts):.0f} W, "
            f"{max(watts):.0f} W at most" in text)
    assert f"at {by_d[128] / max(mhz) * 100:.0f} % of the top clock" in text
    assert f"{s['clock_slow']:,.0f} MHz against {s['clock_rest']:,.0f} after the others" in notes
    assert f"{n} of {s['times']} times were more than 10 %" in notes
    tflops = [by[(128, c, 16384, "fwd")]["attnlab"]["tflops"] for c in (True, False)]
    rate = 989 * by_d[128] / max(mhz)
    assert f"989 × {by_d[128]:,.0f} / {max(mhz):,.0f} = {rate:.0f} TFLOP/s" in notes
    assert f"700 TFLOP/s is about {700 / rate * 100:.0f} %" in notes
    assert f"against the {_span([t / rate * 100 for t in tflops], '{:.0f}')} % ({_span(tflops, '{:.0f}')} TFLOP/s)" \
        in notes


def test_switches_as_the_runs_left_them():
    from attnlab.gpu import decode_plan
    from attnlab.gpu.decode_config import kernel_config

    assert decode_plan.SPLIT_ORDER is None and decode_plan.PREFETCH_TILES == 0
    assert kernel_config(128).order == "strided" and kernel_config(128, page_size=64).order == "chunks"
    assert decode_plan.MERGE_TRIGGER is False


def test_trigger_run_27_table_and_quotes():
    section = _section(TRIGGER)
    out = _run(ROOT / "benchmarks" / "decode_host.py", "--report", DATA / "decode-host-h200-run27.json")
    start = out.index("| B | H/Hkv | L | D | eager, on |")
    assert out[start:].strip() in section
    text, notes = _flat(section), _notes("NOTES-decode.md", "v15 measured")
    r27 = _decode(27)
    ab: dict = {}
    for r in r27["trigger_ab"]:
        ab.setdefault((r["L"], r["D"]), {}).setdefault(r["trigger"], []).append(r)
    on, off = ([r["eager_us"] for r in ab[(32768, 128)][t]] for t in (True, False))
    assert min(on) > max(off)  # slower in every round
    comment = _flat((ROOT / "src" / "attnlab" / "gpu" / "decode_plan.py").read_text().replace("\n# ", "\n"))
    assert f"took {_span(on, dash='-')} µs with it against {_span(off, dash='-')} without at D = 128" in comment
    assert f"{_span(on)} µs with the trigger against {_span(off)} without" in notes
    on64, off64 = ([r["eager_us"] for r in ab[(32768, 64)][t]] for t in (True, False))
    assert f"({_span(on64)} against {_span(off64)})" in notes
    assert abs(statistics.median(on64) / statistics.median(off64) - 1) < 0.02  # "level"
    for rs in ab.values():  # graphs level
        g = [statistics.median(r["graph_us"] for r in rs[t]) for t in (True, False)]
        assert abs(g[0] / g[1] - 1) < 0.01
    speed = {(r["B"], r["H"], r["Hkv"], r["L"], r["D"], r["provider"]): r for r in r27["speed"]}
    shapes = {k[:5] for k in speed}
    vs = [speed[(*sh, "sdpa-cudnn")]["graph_us"] / speed[(*sh, "attnlab")]["graph_us"] for sh in shapes]
    assert f"attnlab under CUDA graphs at {_span(vs, '{:.2f}')}× cuDNN on the five shapes" in text and len(shapes) == 5
    hosts = {r["call"]: r["host_us"] for r in r27["host"]}
    host = hosts["attnlab.flash_decode (plan kept)"]
    two = hosts["flash_decode_triton (plan kept), merge kernel every call"]
    d64 = speed[(1, 32, 8, 32768, 64, "attnlab")]
    ab64 = [r["eager_us"] / r["graph_us"] for t in (True, False) for r in ab[(32768, 64)][t]]
    assert (f"a kept call's host time at {host:.1f} µs for a call of one launch (an empty one-argument Triton launch "
            f"{r27['floors']['triton_empty_1_arg, kernel[grid]']:.1f} µs) and {two:.1f} µs through `flash_decode_triton` "
            "with two launches" in text)
    assert (f"at {d64['eager_over_graph']:.2f}× their graph time ({d64['graph_us']:.1f} µs), {_span(ab64, '{:.2f}')}× in "
            "the A/B's rounds" in text)
    eager64 = [r["eager_us"] for t in (True, False) for r in ab[(32768, 64)][t]] + [d64["eager_us"]]
    assert (f"{d64['graph_us']:.1f} µs of GPU time under graphs; host time per call {two:.1f} µs" in notes
            and f"{host:.1f} µs for a one-launch call" in notes
            and f"eager calls at {d64['eager_over_graph']:.2f}× the graph time in the main table and "
                f"{_span(ab64, '{:.2f}')}× in the A/B's rounds, {_span(eager64, '{:.0f}')} µs" in notes)
    assert min(eager64) > max(two, d64["graph_us"])  # "more than either"


def test_prefill_run_34_gqa_quotes():
    section = _section(PREFILL)
    out = _run(ROOT / "benchmarks" / "prefill.py", "report", DATA / "prefill-h200-run34.json").strip()
    assert out in section
    text = _flat(section)
    prefill = load_script("benchmarks/prefill.py")
    rows, by, a = _prefill("34")
    b = _prefill("31-gqa")[2]
    assert all(r["Hkv"] * 4 == r["H"] for r in rows)
    assert min(v["sdpa-cudnn"]["ms"] / v["attnlab"]["ms"] for v in by.values()) > 1.0
    s = prefill.slow_rounds(rows)
    mhz = [st["sm_mhz"] for r in rows for st in r["gpu_state"]]
    watts = [st["power_w"] for r in rows for st in r["gpu_state"]]
    gpu_doc = _flat((ROOT / "docs" / "gpu.md").read_text())
    r33, _, s33 = _prefill("33")
    d128 = statistics.median(st["sm_mhz"] for r in r33 if r["D"] == 128 for st in r["gpu_state"])
    assert (f"forward {s33['fwd']}× and forward+backward {s33['fwd_bwd']}×, with GQA {a['fwd']}× and {a['fwd_bwd']}×"
            in gpu_doc and f"holds about {d128:,.0f} MHz on the D = 128 rows" in gpu_doc)
    assert (f"forward {a['fwd']}×, forward+backward {a['fwd_bwd']}× (run 31-gqa: {b['fwd']}× and {b['fwd_bwd']}×)"
            in text)
    assert (f"median {s['clock_slow']:,.0f} MHz after them against {s['clock_rest']:,.0f} after the others; the clock "
            f"ranged {min(mhz):,.0f}–{max(mhz):,.0f} MHz at a median draw of {statistics.median(watts):.0f} W" in text)
    notes = _notes("NOTES-prefill.md", "v48")
    assert (f"forward {a['fwd']}×, forward+backward {a['fwd_bwd']}× (the prediction said 1.00–1.08×); "
            f"{len(s['slow'])} slow rounds of {s['times']}, median clock after them {s['clock_slow']:,.0f} MHz against "
            f"{s['clock_rest']:,.0f}" in notes)


def test_timeline_runs_28_and_29_tables_and_quotes():
    section = _section(("### Decode-host runs 28 and 29:", "### Decode-host run 27:"))
    text, notes = _flat(section), _notes("NOTES-decode.md", "v16 measured")
    rows = {}
    for run in (28, 29):
        out = _run(ROOT / "benchmarks" / "decode_host.py", "--report", DATA / f"decode-host-h200-run{run}.json")
        assert out[out.index("| B | H/Hkv | L | D | mode |"):].strip() in section
        rows[run] = _decode(run)["timeline"]
    default = [r for run in (28, 29) for r in rows[run] if r["mode"] in ("eager", "eager, MERGE_PDL=eager")]
    d64 = [r for run in (28, 29) for r in rows[run] if r["D"] == 64 and r["mode"] != "graph"]
    periods = [x for r in d64 for x in (r["host_period_us"], r["gpu_period_us"])]
    assert all(abs(r["host_period_us"] / r["gpu_period_us"] - 1) < 0.01 for r in d64)  # host-bound
    assert f"equals the GPU's ({_span(periods)} µs a call" in text and f"({_span(periods)} µs under the profiler" in notes
    assert f"(split {_span([r['split_us'] for r in d64])} µs, merge {_span([r['merge_us'] for r in d64])})" in text
    gaps = [r["gap_merge_split_us"] for r in default if r["D"] == 64]
    starts = [r["launch_to_start_us"] for r in d64]
    assert f"idles {_span(gaps)} µs before each split kernel with the default launches" in text
    assert f"starts {_span(starts)} µs after its launch" in text and f"{_span(starts)} µs, not under 5" in notes
    main = {run: next(r for r in _decode(run)["speed"] if r["D"] == 64 and r["provider"] == "attnlab")
            for run in (28, 29)}
    assert (f"{main[29]['eager_over_graph']:.2f}× in run 29's main table, {main[28]['eager_over_graph']:.2f}× in run 28's"
            in text)
    ahead = [r for r in rows[29] if r["D"] == 128 and r["mode"] != "graph"]
    graph128 = next(r for r in rows[29] if r["D"] == 128 and r["mode"] == "graph")["gpu_period_us"]
    assert all(r["launch_to_start_us"] > 500 for r in ahead)  # queued: "about a millisecond"
    assert (f"{_span([r['host_period_us'] for r in ahead])} µs of host time against "
            f"{_span([r['gpu_period_us'] for r in ahead])} on the GPU" in text)
    r28 = next(r for r in rows[28] if r["D"] == 128 and r["mode"] == "eager")
    assert f"({r28['host_period_us']:.1f} against {r28['gpu_period_us']:.1f} µs)" in text
    assert (f"{_span([r['gpu_period_us'] - graph128 for r in ahead])} µs over the graph's ({graph128:.1f})" in text)
    pdl = {r["mode"]: r for r in rows[29] if r["D"] == 128}
    assert (f"at D = 128 the GPU period was {pdl['eager, MERGE_PDL=False']['gpu_period_us'] - pdl['eager, MERGE_PDL=eager']['gpu_period_us']:.1f} µs shorter with it"
            in text)
    docs = _flat((ROOT / "docs" / "decode.md").read_text())
    assert (f"equal ({_span(periods)} µs under the profiler) and the GPU idles {_span(gaps)} µs before each split kernel, "
            f"whose launch takes {_span(starts)} µs to start it" in docs)
    assert (f"({main[29]['eager_over_graph']:.2f}× on one host, {main[28]['eager_over_graph']:.2f}× on a slower one)"
            in docs)
    assert (f"({_span([r['host_period_us'] for r in ahead])} µs a call against {_span([r['gpu_period_us'] for r in ahead])} "
            f"on the GPU), and an eager call still costs {_span([r['gpu_period_us'] - graph128 for r in ahead])} µs" in docs)
    ref = next(r for r in rows[29] if r["mode"].startswith("reference"))
    assert f"host at {ref['host_period_us']:.1f} µs a call, far ahead of the GPU's {ref['gpu_period_us']:.1f}" in text


def _order_ratios() -> dict:
    """(B, contiguous?, Hkv, L) -> strided over chunks graph TB/s, a list over decode runs 6 and 7 and the calls
    (attnlab's default; the paged caches)."""
    out: dict = {}
    for run in (6, 7):
        a, b = ({(r["B"], r["H"], r["Hkv"], r["L"], r["provider"]): r for r in json.loads(
            (DATA / f"decode-h200-run{run}-{o}.json").read_text())["rows"] if "graph_tb_per_s" in r}
            for o in ("chunks", "strided"))
        for k, r in a.items():
            if k in b and k[4] in ("attnlab", "paged16", "paged64", "paged256"):
                out.setdefault((k[0], k[4] == "attnlab", k[2], k[3]), []).append(
                    b[k]["graph_tb_per_s"] / r["graph_tb_per_s"])
    return out


def test_decode_runs_6_and_7_tables_and_quotes():
    section = _section(("### Decode runs 6 and 7:", "### Decode-host runs 28 and 29:"))
    for run in (6, 7):
        a, b = (json.loads((DATA / f"decode-h200-run{run}-{o}.json").read_text()) for o in ("chunks", "strided"))
        assert a["split_order"] == "chunks" and b["split_order"] == "strided"
        out = _run(ROOT / "benchmarks" / "decode.py", "--compare", DATA / f"decode-h200-run{run}-chunks.json",
                   DATA / f"decode-h200-run{run}-strided.json")
        assert out.strip() in section
    rat = _order_ratios()
    contiguous1 = [x for k, v in rat.items() if k[0] == 1 and k[1] for x in v]
    contiguous16 = [x for k, v in rat.items() if k[0] == 16 and k[1] for x in v]
    paged_long = [x for k, v in rat.items() if k[0] == 1 and not k[1] and k[2] == 8 and k[3] >= 32768 for x in v]
    paged_4k = [x for k, v in rat.items() if k[0] == 1 and not k[1] and k[2] == 8 and k[3] == 4096 for x in v]
    faster = sum(x > 1 for x in contiguous1)
    text = _flat(section)
    notes = _notes("NOTES-decode.md", "v17 measured")
    c1, c16, pl = (_span(v, "{:.3f}") for v in (contiguous1, contiguous16, paged_long))
    assert f"strided at {c1}× the TB/s of runs of tiles at batch 1 (faster on {faster} rows of {len(contiguous1)}" in text
    assert f"and {c16}× at batch 16" in text
    assert f"strided at {pl}× in both runs" in text and f"(at 4K keys {_span(paged_4k, '{:.2f}')}×)" in text
    assert max(paged_long) < 1.0
    assert f"strided at {c1}× the TB/s of chunks at batch 1 and {c16}× at batch 16" in notes
    assert f"strided ran at {pl}× in both runs" in notes
    config_doc = _flat(ROOT.joinpath("src", "attnlab", "gpu", "decode_config.py").read_text())
    assert (f"at batch 1 at {c1}× the TB/s of runs (decode runs 6 and 7; faster on {faster} rows of {len(contiguous1)}) "
            f"and at batch 16 at {c16}×, but paged caches at batch 1 with GQA over 32K and 128K keys at {pl}×" in config_doc)
    docs = _flat((ROOT / "docs" / "decode.md").read_text())
    assert f"over 32K and 128K keys at {pl}× the TB/s, decode runs 6 and 7" in docs
