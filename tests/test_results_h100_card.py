"""Prefill run 38 with decode-host runs 41 and 42, and bwd-block-m run 22, all on an H100: benchmarks/RESULTS.md's
section and NOTES-decode's "Measured: decode-host runs 41 and 42", their tables as the scripts render them from the
recorded files, and every number they quote computed from those files."""

from __future__ import annotations

import json
import statistics

from tests.helpers import ROOT, flat, load_script, notes_section, results_section, span

DATA = ROOT / "benchmarks" / "data"
dh = load_script("benchmarks/decode_host.py")
card = load_script("benchmarks/scorecard.py")
bm = load_script("benchmarks/bwd_block_m.py")
ARMS = ("triton", "gluon", "triton+merge", "gluon+merge")
D128, SMALL, MID, D64 = (1, 32, 8, 32768, 128), (1, 64, 8, 8192, 128), (1, 28, 4, 20000, 128), (1, 32, 8, 32768, 64)


def _run(name: str) -> dict:
    return json.loads((DATA / name).read_text())


def _host(n: int) -> dict:
    return _run(f"decode-host-h100-run{n}.json")


def _results() -> str:
    return results_section("### Prefill run 38 with decode-host runs 41 and 42, on an H100")


def _notes() -> str:
    return notes_section("NOTES-decode.md", "## Measured: decode-host runs 41 and 42")


def merge_medians() -> dict:
    """(B, H, Hkv, L, D, length) -> {arm: median CUDA-graph µs} of run 41's --kernel-ab-merge rows."""
    out: dict = {}
    for r in _host(41)["kernel_ab"]:
        if r["arm"] in ARMS and "graph_us" in r:
            out.setdefault((r["B"], r["H"], r["Hkv"], r["L"], r["D"], r["length"]), {}).setdefault(r["arm"], []).append(
                r["graph_us"])
    return {k: {a: statistics.median(v) for a, v in arms.items()} for k, arms in out.items()}


def shape_label(key) -> str:
    B, H, Hkv, L, D, length = key
    return f"{B} × {H}/{Hkv} over {length:,}{'' if length == L else f' (in {L:,})'}, D = {D}"


def merge_table() -> str:
    return "\n".join(f"| {shape_label(k)} | " + " | ".join(f"{m[a]:.2f}" for a in ARMS) + " |"
                     for k, m in merge_medians().items())


def _pdl(n: int, shape, arm: str) -> float:
    rows = [r for r in _host(n)["split_pdl_ab"] if (r["B"], r["H"], r["Hkv"], r["L"], r["D"]) == shape
            and r["arm"] == arm]
    return statistics.median(r["eager_us"] for r in rows) / rows[0]["graph_us"]


def _main(n: int, shape) -> float:
    r = next(r for r in _host(n)["speed"] if r["provider"] == "attnlab"
             and (r["B"], r["H"], r["Hkv"], r["L"], r["D"]) == shape)
    return r["eager_us"] / r["graph_us"]


def _eager_loops() -> tuple[str, int]:
    """How decode_host.py's speed table times an eager call: the median of ``eager_us``'s rounds (as a word), each a
    loop of a tenth of ``--calls``'s default calls."""
    import inspect
    import re

    rounds = inspect.signature(dh.eager_us).parameters["rounds"].default
    assert "eager_us(fn, calls=calls // 10)" in inspect.getsource(dh.speed_rows)
    calls = int(re.search(r'"--calls", type=int, default=(\d+)', inspect.getsource(dh)).group(1)) // 10
    return {3: "three", 5: "five", 7: "seven"}[rounds], calls


def test_the_notes_quote_the_merge_ab():
    notes = _notes()
    med = merge_medians()
    assert flat(merge_table()) in notes
    batch1 = [k for k in med if k[0] == 1 and k[3] == k[5]]
    gaps = [med[k]["gluon+merge"] - med[k]["triton+merge"] for k in batch1]
    assert min(gaps) > 0  # the Gluon split kernel is the slower one with the same merge
    assert f"the Gluon kernel is still the slower one by {span(gaps, '.2f')} µs on the batch-1 shapes" in notes
    mid = next(k for k in med if k[:5] == MID)
    inkernel = {a: med[mid][a] - med[mid][a + "+merge"] for a in ("gluon", "triton")}
    assert f"its in-kernel merge costs {inkernel['gluon']:.2f} µs more than its merge kernel" in notes
    assert f"(the Triton kernel's: {inkernel['triton']:.2f})" in notes
    others = [med[k]["gluon"] - med[k]["gluon+merge"] for k in med if k[:5] != MID]
    assert max(others) < 0.5 < inkernel["gluon"]  # the one shape with two merge rounds


def test_the_notes_quote_the_dependent_launch_and_the_main_table():
    notes = _notes()
    p64, f64 = ([_pdl(n, D64, arm) for n in (41, 42)] for arm in ("True", "False"))
    p128, f128 = ([_pdl(n, D128, arm) for n in (41, 42)] for arm in ("True", "False"))
    assert f"eager/graph {span(p64, '.3f')} against {span(f64, '.3f')} plain (runs 41 and 42)" in notes
    assert f"at D = 128 {span(p128, '.3f')} against {span(f128, '.3f')}" in notes
    assert max(p64) < min(f64) and max(p128) < min(f128)
    main = [_main(n, D64) for n in (41, 42)]
    assert f"at D = 64 over 32K took {', '.join(f'{x:.2f}×' for x in main)} their graph's time" in notes
    loops, calls = _eager_loops()
    assert f"run 41's {main[0]:.2f}× is one measurement (the median of {loops} loops of {calls} calls back to back)" in notes


def test_the_scorecard_section_holds_the_runs_tables():
    section = _results()
    pre = {"prefill-h100-run38.json": _run("prefill-h100-run38.json")["rows"]}
    host = _host(42)
    assert host["gpu"].startswith("NVIDIA H100") and host["split_pdl"] and host["split_pdl_from_us"] == 13.0
    bars = card.scorecard(pre, host)
    assert card.markdown(bars).rstrip("\n") in section
    scope, lines = card.standing(pre, {"decode-host-h100-run42.json": host})
    assert card.standing_markdown(scope, lines, "H100").rstrip("\n") in section
    gpu = dh.preset_for(host["gpu"])
    for n in (41, 42):
        assert "\n".join(dh.split_pdl_ab_markdown(_host(n)["split_pdl_ab"], gpu)) in section
    assert "\n".join(dh.kernel_ab_markdown(_host(41)["kernel_ab"], gpu)) in section
    met = {b["bar"]: b for b in bars}
    for bar in ("prefill forward at or above cuDNN", "prefill forward+backward at or above cuDNN",
                "prefill rows: every head dim, mask, pass, multi-head and GQA, in one run",
                "decode: eager within 10 % of CUDA graphs, D = 128", "decode: eager within 10 % of CUDA graphs, D = 64",
                "decode: eager within 10 % of CUDA graphs, D = 64, L2 cold"):
        assert met[bar]["met"], bar
    for bar in ("decode: a kept call's host time", "decode: batch 1 at or above cuDNN under CUDA graphs",
                "forward at D = 128 (goal beyond the bar)"):
        assert not met[bar]["met"], bar
    text = flat(section)
    tflops = met["forward at D = 128 (goal beyond the bar)"]["measured"].split()[0]
    h200 = card.scorecard({"prefill-h200-run37.json": _run("prefill-h200-run37.json")["rows"]},
                          _run("decode-host-h200-run36.json"))
    h200_tflops = next(b for b in h200 if b["bar"] == "forward at D = 128 (goal beyond the bar)")["measured"].split()[0]
    assert f"the fastest D = 128 forward ({tflops} TFLOP/s) is where the H200's was ({h200_tflops} in run 37)" in text
    kept = met["decode: a kept call's host time"]["measured"]  # "25.5 µs; empty launch 15.9 µs, 1.61× it"
    host_us, empty = kept.split(" µs")[0], kept.split("empty launch ")[1].split(" µs")[0]
    assert f"a kept call's host time ({host_us} µs against an empty launch's {empty}" in text
    b1 = met["decode: batch 1 at or above cuDNN under CUDA graphs"]["measured"].split("×")[0]
    work = met["decode: batch 1 at or above cuDNN under CUDA graphs, cuDNN's work (no lengths)"]["measured"].split("×")[0]
    assert f"at 64/8 heads over 8K ({b1}×; without the lengths {work}× or more on every shape)" in text


def test_the_run_41_tests_and_the_merge_sentence():
    text = flat(_results())
    log = (DATA / "decode-host-run41" / "tests.log").read_text().strip().splitlines()[-1]
    assert log.startswith("1 failed, 232 passed, 2 skipped")
    assert "the decode GPU tests first: 232 passed, 2 skipped, 1 failed" in text
    med = merge_medians()
    gaps = [med[k]["gluon+merge"] - med[k]["triton+merge"] for k in med if k[0] == 1 and k[3] == k[5]]
    mid = next(k for k in med if k[:5] == MID)
    assert f"the Gluon split kernel is still {span(gaps, '.2f')} µs slower on the batch-1 shapes" in text
    assert f"its in-kernel merge cost {med[mid]['gluon'] - med[mid]['gluon+merge']:.2f} µs more" in text


def test_bwd_block_m_run_22():
    section = results_section("### Bwd-block-m run 22, on an H100")
    rows = _run("bwd-block-m-h100-run22.json")["rows"]
    assert bm.report(rows).rstrip("\n") in section
    checks = (DATA / "bwd-block-m-run22" / "checks.log").read_text()
    assert "49 passed" in checks and "failed" not in checks and "(49 passed)" in section
    ms = {(r["row"], r["D"], r["arm"]): r["ms"] for r in rows}
    keys = [(r, D) for (r, D, a) in ms if a == "table"]
    gqa = [ms[r, D, "nol2"] / ms[r, D, "table"] for r, D in keys if r.startswith("gqa")]
    same = [ms[r, D, "table"] / ms[r, D, "l2chunks"] for r, D in keys if r.startswith("gqa")]
    text = flat(section)
    assert f"the table over `nol2` {span(gqa, '.3f')}×, `l2chunks` over the table {span(same, '.3f')}×" in text
    c1 = {D: (ms["causal1", D, "nol2"] / ms["causal1", D, "table"], ms["causal1", D, "table"] / ms["causal1", D, "l2chunks"])
          for D in (64, 128)}
    assert (f"the same launches, {c1[64][0]:.3f}× at D = 64 and {c1[128][0]:.3f}× at D = 128; `l2chunks` over the table "
            f"{c1[64][1]:.3f}× and {c1[128][1]:.3f}×") in text


def test_the_prefill_notes_quote_v53_on_the_h100():
    text = notes_section("NOTES-prefill.md", "## v53")
    text = text[text.index("**Measured, v53, on an H100**"):]
    rows = _run("bwd-block-m-h100-run22.json")["rows"]
    ms = {(r["row"], r["D"], r["arm"]): r["ms"] for r in rows}
    keys = [(r, D) for (r, D, a) in ms if a == "table"]
    gqa = [ms[r, D, "nol2"] / ms[r, D, "table"] for r, D in keys if r.startswith("gqa")]
    gqa128 = [ms[r, D, "nol2"] / ms[r, D, "table"] for r, D in keys if r.startswith("gqa") and D == 128]
    same = [ms[r, D, "table"] / ms[r, D, "l2chunks"] for r, D in keys if r.startswith("gqa")]
    c1s = [ms["causal1", D, "nol2"] / ms["causal1", D, "table"] for D in (64, 128)]
    c1l = [ms["causal1", D, "table"] / ms["causal1", D, "l2chunks"] for D in (64, 128)]
    assert f"over `nol2` {span(gqa, '.3f')}× — above the predicted 1.04–1.10× at D = 128 ({span(gqa128, '.3f')}×)" in text
    assert min(gqa128) > 1.10 and max(abs(x - 1) for x in same) < 0.02
    assert f"`l2chunks` against the table {span(same, '.3f')}×, inside the predicted ±2 %" in text
    assert f"the same launches, {c1s[0]:.3f} and {c1s[1]:.3f}× (D = 64, 128)" in text and abs(c1s[0] - 1) > 0.02
    assert f"`l2chunks` over the table {c1l[0]:.3f} and {c1l[1]:.3f}×" in text and min(c1l) < 1.02  # the rule not met
    from attnlab.gpu import prefill_gluon_bwd as gb

    assert gb.L2_CHUNKS_MIN_GROUP == 2 and "so it stays at 2" in text
    bars = card.scorecard({"prefill-h100-run38.json": _run("prefill-h100-run38.json")["rows"]}, _host(42))
    tf = next(b for b in bars if b["bar"].startswith("forward at D = 128"))["measured"].split()[0]
    assert f"the fastest D = 128 forward {tf} TFLOP/s, inside the predicted 630–665" in text and 630 <= float(tf) <= 665


def test_the_decode_doc_quotes_the_merge_ab():
    med = merge_medians()
    gaps = [med[k]["gluon+merge"] - med[k]["triton+merge"] for k in med if k[0] == 1 and k[3] == k[5]]
    doc = flat((ROOT / "docs" / "decode.md").read_text())
    assert (f"On an H100 (decode-host run 41) the Gluon split kernel was still {span(gaps, '.2f')} µs slower with the "
            "merge kernel on every call (each kernel with the merge kernel of its own kind)") in doc


def test_the_gpu_doc_table_of_where_the_prefill_stands():
    """docs/gpu.md's first performance table: ``scorecard.py --standing``'s prefill lines of the H200's and the
    H100's latest whole-table runs."""
    doc = (ROOT / "docs" / "gpu.md").read_text()
    own = []
    for name, gpu, run in (("H200", "h200", 45), ("H100", "h100", 44)):
        file = f"prefill-{gpu}-run{run}.json"
        _, lines = card.standing({file: _run(file)["rows"]}, {})
        m = {(ln["what"], ln["against"].split(" ")[0]): ln["measured"] for ln in lines}
        fwd, fb = (m[what, "cuDNN"].split(" ")[0] for what in ("prefill forward", "prefill forward+backward"))
        assert (f"| {name} | {fwd} | {fb} | {m['fastest forward at D = 128', '—']} | prefill run {run} "
                f"(`benchmarks/data/{file}`) |") in doc
        own.append(f"{m['prefill forward', 'SDPA' + chr(39) + 's'].split(' ')[0]} on the {name}")
    assert f"against SDPA's own choice of backend the forward is {' and '.join(own)}." in flat(doc)
