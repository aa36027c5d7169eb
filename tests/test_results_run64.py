"""Decode-host runs 64 and 65, decode-breakdown runs 18 and 19 and prefill run 46, on an H100 (the native decode call
as the library's default): benchmarks/RESULTS.md's two sections and NOTES-decode's "Measured, call A/B" paragraphs,
every number they quote computed from the recorded files."""

from __future__ import annotations

import json
import statistics

from tests.helpers import ROOT, flat, load_script, notes_section, pytest_summary, results_section, span

DATA = ROOT / "benchmarks" / "data"
dh = load_script("benchmarks/decode_host.py")
card = load_script("benchmarks/scorecard.py")
clock = load_script("benchmarks/clock_share.py")
DECODE = "### Decode-host runs 64 and 65 and decode-breakdown runs 18 and 19, on an H100"
PREFILL_SECTION = "### Prefill run 46 and decode-host run 65, on an H100: the scorecard as shipped"
NOTES = "## The native call on: its dependent launches for short reads, and the scorecard"
SHORT = [(1, 64, 8, 8192, 128), (1, 28, 4, 20000, 128)]
LONG = [(1, 32, 8, 32768, 128), (1, 32, 8, 32768, 64)]
H100 = dh.preset_for("NVIDIA H100 80GB HBM3")


def _run(name: str) -> dict:
    return json.loads((DATA / name).read_text())


def pdl(shape, arm: str) -> list[dict]:
    return [r for r in _run("decode-host-h100-run64.json")["split_pdl_ab"]
            if (r["B"], r["H"], r["Hkv"], r["L"], r["D"]) == shape and r["arm"] == arm]


def over(shape, arm: str) -> float:
    rs = pdl(shape, arm)
    return statistics.median(r["eager_us"] for r in rs) / rs[0]["graph_us"]


def steps(run: int) -> dict:
    return {s["step"]: s["host_us"] for s in _run(f"decode-breakdown-h100-run{run}.json")["breakdown"]["steps"]}


CALL = "the native program's call alone (C++: checks, outputs, launch)"


def breakdown_table() -> list[str]:
    a, b = steps(18), steps(19)
    lines = ["| step | run 18: B = 1, 32/8 heads, 256 keys, D = 128 | run 19: B = 1, 64/8 heads, 8192 keys, D = 128 |",
             "|---|---|---|"]
    return lines + [f"| {name} | {a[name]:.1f} | {b[name]:.1f} |" for name in a]


def host65() -> dict:
    return _run("decode-host-h100-run65.json")


def speed(shape, provider: str = "attnlab") -> dict:
    return next(r for r in host65()["speed"]
                if (r["B"], r["H"], r["Hkv"], r["L"], r["D"]) == shape and r["provider"] == provider)


def speed_table() -> list[str]:
    lines = ["| B | H/Hkv | L | D | eager µs | graph µs | eager/graph | host µs/call in the eager loop | cuDNN graph µs "
             "| attnlab graph against cuDNN's |", "|---|---|---|---|---|---|---|---|---|---|"]
    for shape in [*LONG, *SHORT, (8, 32, 8, 32768, 128)]:
        a, c = speed(shape), speed(shape, "sdpa-cudnn")
        B, H, Hkv, L, D = shape
        lines.append(f"| {B} | {H}/{Hkv} | {L} | {D} | {a['eager_us']:.1f} | {a['graph_us']:.1f} | "
                     f"{a['eager_over_graph']:.3f} | {a['loop_host_us']:.1f} | {c['graph_us']:.1f} | "
                     f"{c['graph_us'] / a['graph_us']:.3f}× |")
    return lines


def host_rows() -> dict:
    return {r["call"]: r["host_us"] for r in host65()["host"]}


def test_the_runs_are_what_the_sections_say():
    for name in ("decode-host-h100-run64.json", "decode-host-h100-run65.json", "decode-breakdown-h100-run18.json",
                 "decode-breakdown-h100-run19.json", "prefill-h100-run46.json"):
        r = _run(name)
        env = r.get("environment", r)
        assert env["gpu"] == "NVIDIA H100 80GB HBM3" and str(env["torch"]) == "2.11.0+cu130", name
        assert str(env["triton"]) == "3.6.0", name
    for name in ("decode-host-h100-run64.json", "decode-host-h100-run65.json", "decode-breakdown-h100-run18.json"):
        r = _run(name)
        assert r["native"] is True and r["split_pdl"] is True and r["split_pdl_from_us"] == 13.0
        assert "split_pdl_every_read" not in r  # (the runs came before v40)


def test_the_decode_section_holds_the_runs():
    text = results_section(DECODE)
    logs = DATA / "native-run64"
    tests, suite = pytest_summary(logs / "native-tests.log"), pytest_summary(logs / "suite.log")
    assert (tests, suite) == ("32 passed, 6 skipped", "219 passed, 8 skipped")
    assert f"its tests {tests}" in flat(text) and f"the decode suite as shipped {suite}" in flat(text)
    lines = dh.split_pdl_ab_markdown(_run("decode-host-h100-run64.json")["split_pdl_ab"], H100)
    assert "\n".join(lines) in text
    for line in [*breakdown_table(), *speed_table()]:
        assert line in text, line
    # the dependent launch below the plain one in every round on the short reads
    for shape in SHORT:
        for plain, dep in zip(sorted(pdl(shape, "False"), key=lambda r: r["round"]),
                              sorted(pdl(shape, "True"), key=lambda r: r["round"])):
            assert dep["eager_us"] < plain["eager_us"]
    a, b = (f"{over(s, 'False'):.3f}× to {over(s, 'True'):.3f}×" for s in SHORT)
    assert f"from {a} at 64/8 heads over 8K and from {b} at 28/4 over 20,000, lower in every round" in flat(text)
    kept, empty = host_rows()[dh.KEPT_ROW], host_rows()[dh.EMPTY_ROW]
    assert f"kept call {kept:.1f} µs, {kept / empty:.2f}× the empty launch's {empty:.1f} µs" in flat(text)
    short = [f"{speed(s)['eager_over_graph']:.2f}×" for s in SHORT]
    assert f"still take plain launches: {short[0]} and {short[1]}" in flat(text)
    r56 = next(r for r in _run("decode-host-h100-run56.json")["speed"]
               if (r["B"], r["H"], r["Hkv"], r["L"], r["D"]) == SHORT[0] and r["provider"] == "attnlab")
    c56 = next(r for r in _run("decode-host-h100-run56.json")["speed"]
               if (r["B"], r["H"], r["Hkv"], r["L"], r["D"]) == SHORT[0] and r["provider"] == "sdpa-cudnn")
    a, c = speed(SHORT[0]), speed(SHORT[0], "sdpa-cudnn")
    assert f"(run 56: {c56['graph_us'] / r56['graph_us']:.3f}×), and below it here by " \
           f"{a['graph_us'] - c['graph_us']:.1f} µs" in flat(text)


def test_the_notes_quote_the_runs():
    notes = flat(notes_section("NOTES-decode.md", NOTES))
    a, b = ((f"{over(s, 'False'):.3f}", f"{over(s, 'True'):.3f}") for s in SHORT)
    assert f"from {a[0]}× its graph to {a[1]}×, at 28/4 over 20,000 from {b[0]}× to {b[1]}×" in notes
    assert max(over(s, "True") for s in SHORT) <= 1.08 and "(at most 1.08×) met" in notes
    trig = [over(s, "trigger") for s in SHORT]
    assert all(t > over(s, "True") for t, s in zip(trig, SHORT)) and f"met ({trig[0]:.3f}× and {trig[1]:.3f}×)" in notes
    long = [(over(s, "False"), over(s, "True")) for s in LONG]
    assert (f"ran {long[0][0]:.3f}× (D = 128) and {long[1][0]:.3f}× (D = 64) against the dependent launch's "
            f"{long[0][1]:.3f}× and {long[1][1]:.3f}×") in notes
    t, s = steps(18), steps(19)
    assert f"alone {t[CALL]:.1f} µs at TINY and {s[CALL]:.1f} µs at 64/8 over 8K" in notes
    assert t[CALL] > 6 and abs(t[CALL] - s[CALL]) < 1
    pub = "attnlab.flash_decode"
    assert f"The whole public call took {t[pub]:.1f} and {s[pub]:.1f} µs" in notes
    logs = DATA / "native-run64"
    passed, skipped = (int(x.split()[0]) for x in pytest_summary(logs / "native-tests.log").split(", "))
    assert f"its tests passed ({passed}, the {skipped} that need the interpreter skipped" in notes
    assert f"passed whole ({pytest_summary(logs / 'suite.log')})" in notes
    built = (DATA / "native-run64" / "build.log").read_text()
    assert built.startswith("native module: <module 'attnlab_native_decode'") and "The native module built;" in notes
    kept, empty = host_rows()[dh.KEPT_ROW], host_rows()[dh.EMPTY_ROW]
    assert f"The kept call {kept:.1f} µs, {kept / empty:.2f}× the empty launch's {empty:.1f} µs" in notes
    eg = [speed(x)["eager_over_graph"] for x in LONG]
    assert max(abs(e - 1) for e in eg) < 0.002 and f"eager at 32K {eg[0]:.3f}× its graph at both head dims" in notes
    cud = speed(SHORT[0], "sdpa-cudnn")["graph_us"] / speed(SHORT[0])["graph_us"]
    assert (f"64/8 heads over 8K {cud:.3f}× ({speed(SHORT[0])['graph_us']:.1f} against "
            f"{speed(SHORT[0], 'sdpa-cudnn')['graph_us']:.1f} µs") in notes
    short = [speed(x)["eager_over_graph"] for x in SHORT]
    assert f"{short[0]:.2f}× (64/8 over 8K) and {short[1]:.2f}× (28/4 over 20,000) their graphs" in notes
    py = [r["eager_over_graph"] for n in (55, 56) for r in _run(f"decode-host-h100-run{n}.json")["speed"]
          if (r["B"], r["H"], r["Hkv"], r["L"], r["D"]) in SHORT and r["provider"] == "attnlab"]
    assert len(py) == 4
    v40 = flat(notes_section("NOTES-decode.md", "## v40: the native call's plans take the dependent launch"))
    assert f"(H100 runs 55 and 56: {span(py)}×)" in v40
    assert f"at most 1.06× their graphs (run 65: {short[0]:.2f}× and {short[1]:.2f}×)" in v40


def clock_rows() -> list[dict]:
    return clock.clock_rows(_run("prefill-h100-run46.json"), D=128, pass_="fwd")


def test_the_prefill_section_holds_the_scorecard_and_the_clocks():
    text = results_section(PREFILL_SECTION)
    standing = (DATA / "scorecard-run46" / "standing.md").read_text().strip()
    assert standing.split("\n\n")[0] in text
    md = clock.markdown({"prefill-h100-run46": clock_rows()})
    assert md.strip() in text


def _first_times() -> tuple[list[dict], list[dict]]:
    """The clock reads of every time of run 46: those that held a build (over 100 reads) and the others."""
    build, other = [], []
    for r in _run("prefill-h100-run46.json")["rows"]:
        for i, g in enumerate(r.get("gpu_during") or []):
            if g:
                (build if g["reads"] > 100 else other).append(dict(g, row=r, round=i))
    return build, other


def test_the_sampler_fault_is_what_the_notes_say():
    build, other = _first_times()
    assert all(g["round"] == 0 and g["row"]["provider"] == "attnlab" and g["row"]["N"] == 4096 for g in build)
    fours = {(r["D"], r["causal"], r["pass_"], r["Hkv"]) for r in _run("prefill-h100-run46.json")["rows"]
             if r["provider"] == "attnlab" and r["N"] == 4096}
    reads = [g["reads"] for g in build]
    mhz = [g["sm_mhz"] for g in build]
    quote = (f"attnlab's first time on {len(build)} of its {len(fours)} 4K rows (the first shape of each kind, where its "
             f"kernels were built) took {span(reads, 'd')} reads ({min(reads) / 100:.1f}–{max(reads) / 100:.1f} s) "
             f"against {span([g['reads'] for g in other], 'd')} for every other time, at "
             f"{min(mhz):,.0f}–{max(mhz):,.0f} MHz")
    assert quote in flat(notes_section("NOTES-prefill.md", "## The clocks during each time, measured"))
    assert (f"attnlab's first time on {len(build)} of its {len(fours)} 4K rows sampled its kernels' build too "
            f"({min(reads) / 100:.1f}–{max(reads) / 100:.1f} s") in flat(results_section(PREFILL_SECTION))
    # the medians of those rows took another round's clock, not the build's
    for g in build:
        assert g["row"]["sm_mhz"] != g["sm_mhz"]


def test_the_prefill_notes_quote_run_46():
    notes = flat(notes_section("NOTES-prefill.md", "## The clocks during each time, measured"))
    p = card.prefill_pairs({"prefill-h100-run46.json": _run("prefill-h100-run46.json")["rows"]})
    fwd = [x["ratio"] for x in p if x["pass_"] == "fwd"]
    both = [x["ratio"] for x in p if x["pass_"] == "fwd_bwd"]
    assert min(fwd + both) >= 1 and len(fwd) == len(both) == 24
    assert f"forward ({span(fwd)}×) and forward+backward ({span(both)}×)" in notes
    ours = [r for r in clock_rows() if r["provider"] == "attnlab"]
    best = max(ours, key=lambda r: r["tflops"])
    assert (best["causal"], best["N"], best["Hkv"]) == (False, 16384, 4)
    assert f"the fastest D = 128 forward {best['tflops']:.0f} TFLOP/s (non-causal 16K, 16/4 heads)" in notes
    mhz = [r["sm_mhz"] for r in ours]
    shares = [r["clock_of_roofline"] * 100 for r in ours]
    assert f"at {min(mhz):,.0f}–{max(mhz):,.0f} MHz during their times" in notes
    assert 1550 <= min(mhz) and max(mhz) <= 1800 and "1,550–1,800: met" in notes
    assert f"clock {min(shares):.0f}–{max(shares):.0f} % (predicted 65–78 %: missed at both ends" in notes
    need = best["sm_mhz"] * 700 / best["tflops"]
    held = sum(r["sm_mhz"] >= need for r in ours)
    assert (f"ran at {best['sm_mhz']:,.0f} MHz, {best['clock_of_roofline'] * 100:.0f} % at its clock: at that share "
            f"700 TFLOP/s needs {need:,.0f} MHz under the load, which {held} of attnlab's {len(ours)} D = 128 "
            f"forward rows held") in notes


def test_the_decode_doc_quotes_runs_64_and_65():
    from attnlab.gpu import decode_plan

    doc = flat((ROOT / "docs" / "decode.md").read_text())
    rows = host_rows()
    assert (f"The native call costs the host {rows[dh.KEPT_ROW]:.1f} µs a call against the Python path's "
            f"{rows[dh.PYTHON_ROW]:.1f} (decode-host run 65, an H100)") in doc
    reads = [dh.decode_roofline_ms(batch=s[0], heads=s[1], kv_heads=s[2], seq=s[3], head_dim=s[4], gpu=H100) * 1e3
             for s in SHORT]
    assert max(reads) < decode_plan.SPLIT_PDL_FROM_US
    assert (f"at 64/8 heads over 8K and 28/4 over 20,000 ({reads[0]:.1f} and {reads[1]:.1f} µs reads) the dependent "
            f"launch took the eager call from {over(SHORT[0], 'False'):.3f}× and {over(SHORT[1], 'False'):.3f}× its "
            f"graph's time to {over(SHORT[0], 'True'):.3f}× and {over(SHORT[1], 'True'):.3f}× (decode-host run 64, "
            f"lower in every round)") in doc


def test_the_comments_in_the_source():
    source = flat((ROOT / "src" / "attnlab" / "gpu" / "decode_plan.py").read_text().replace("#", " "))
    a, b = ((f"{over(s, 'False'):.2f}x", f"{over(s, 'True'):.2f}x") for s in SHORT)
    assert (f"took batch-1 eager calls at 64/8 heads over 8K keys from {a[0]} their CUDA graph's time to {a[1]} and at "
            f"28/4 over 20,000 from {b[0]} to {b[1]}, lower in every round") in source
    assert all(over(s, "trigger") > over(s, "True") for s in SHORT)
    bench = flat((ROOT / "src" / "attnlab" / "bench.py").read_text())
    build, _ = _first_times()
    secs = [g["reads"] / 100 for g in build]
    assert f"first times of {min(secs):.1f}-{max(secs):.1f} s sampled" in bench


def test_the_scorecard_on_the_700_goal_at_run_46s_clock_and_power():
    best = max((r for r in clock_rows() if r["provider"] == "attnlab"), key=lambda r: r["tflops"])
    row = next(r for r in _run("prefill-h100-run46.json")["rows"] if r["provider"] == "attnlab" and r["D"] == 128
               and r["pass_"] == "fwd" and (r["causal"], r["N"], r["H"] // r["Hkv"]) == (False, 16384, 4))
    watts = statistics.median(s["power_w"] for s in row["gpu_during"])
    bars = card.scorecard({"prefill-h100-run46.json": _run("prefill-h100-run46.json")["rows"]}, None)
    goal = next(b for b in bars if b["bar"] == "forward at D = 128 (goal beyond the bar)")["measured"]
    assert goal == (f"{best['tflops']:.0f} TFLOP/s at {best['sm_mhz']:,.0f} MHz, {best['clock_of_roofline']:.0%} of the "
                    f"roofline at that clock, {watts:.0f} W: {watts / best['tflops']:.3f} pJ a FLOP, where 700 TFLOP/s "
                    f"at that power needs {watts / 700:.3f}")
    readme = flat((ROOT / "README.md").read_text())
    assert (f"The fastest row, {best['tflops']:.0f} TFLOP/s on the H100, ran at {best['sm_mhz']:,.0f} MHz and "
            f"{watts:.0f} W, {watts / best['tflops']:.3f} pJ a FLOP") in readme
    notes = flat(notes_section("NOTES-prefill.md", "## The 700 TFLOP/s goal at the power limit"))
    assert goal in notes
