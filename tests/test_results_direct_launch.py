"""Decode-breakdown runs 8-10 and decode-host run 51 (an H100): where an eager decode call's host time goes at 32K
keys, and the dependent launch's cost through Triton's launcher: NOTES-decode's measured paragraph and
benchmarks/RESULTS.md's section, every number they quote computed from the recorded files."""

from __future__ import annotations

import json
import statistics

from tests.helpers import ROOT, flat, load_script, notes_section, pytest_summary, results_section, span

DATA = ROOT / "benchmarks" / "data"
dh = load_script("benchmarks/decode_host.py")
PLAIN = "the split kernel's launch"
TRITON = "the split kernel's launch, Triton's launcher"
PDL = "the eager split kernel's launch (dependent launch, Triton's launcher)"
SHAPES = [(1, 32, 8, 32768, 128), (1, 64, 8, 8192, 128), (1, 28, 4, 20000, 128), (8, 32, 8, 32768, 128),
          (1, 32, 8, 32768, 64)]
SECTION = "### Decode-breakdown runs 8–14 and decode-host runs 51–54, on an H100"


def _run(name: str) -> dict:
    return json.loads((DATA / name).read_text())


def bd(run: int) -> dict:
    return {s["step"]: s["host_us"] for s in _run(f"decode-breakdown-h100-run{run}.json")["breakdown"]["steps"]}


def ab_host(run: int, shape, arm: str) -> float:
    """The rounds' median host µs per call of an arm of a run's ``--split-pdl-ab``."""
    return statistics.median(r["loop_host_us"] for r in _run(f"decode-host-h100-run{run}.json")["split_pdl_ab"]
                             if (r["B"], r["H"], r["Hkv"], r["L"], r["D"]) == shape and r["arm"] == arm)


def measured_text() -> str:
    t, a, b = bd(8), bd(9), bd(10)
    static = [x[PLAIN] - t[PLAIN] for x in (a, b)]
    triton = [x[TRITON] - t[TRITON] for x in (a, b)]
    over = [x[PDL] - x[PLAIN] for x in (a, b)]
    same = [x[PDL] - x[TRITON] for x in (a, b)]
    gaps = [ab_host(51, s, "True") - ab_host(51, s, "False") for s in SHAPES]
    return (f"At 32K (D = 64, then 128) the plain launch through PyTorch's launcher took {a[PLAIN]:.1f} and "
            f"{b[PLAIN]:.1f} µs against {t[PLAIN]:.1f} at `TINY` ({span(static)} µs more), and through Triton's "
            f"launcher {span(triton)} µs more: a busy GPU costs a launch under 1 µs of host time, and the prediction "
            f"(at least 2) missed. The dependent launch took {a[PDL]:.1f} and {b[PDL]:.1f} µs, {span(over)} µs over "
            f"the plain one (predicted: at least 1; met), and within {max(abs(x) for x in same):.2f} µs of the plain "
            f"launch through Triton's launcher: its cost is Triton's launcher, not the kind of launch. In run 51's `--split-pdl-ab` the eager "
            f"calls' host µs per call were {span(gaps, '.1f')} higher with the dependent launch than with the plain "
            f"one (predicted: at least 2; met on {sum(g >= 2 for g in gaps)} of {len(gaps)} shapes). The kept call at "
            f"`TINY` took {t['attnlab.flash_decode']:.1f} µs on this machine, its key {t['decode.plan_key']:.1f} and "
            f"its outputs {t['outputs.take']:.1f}.")


def test_the_runs_are_what_the_notes_say():
    for run in (8, 9, 10):
        r = _run(f"decode-breakdown-h100-run{run}.json")
        assert r["gpu"] == "NVIDIA H100 80GB HBM3" and (r["torch"], r["triton"]) == ("2.11.0+cu130", "3.6.0")
    shapes = [tuple(_run(f"decode-breakdown-h100-run{run}.json")["breakdown"]["shape"]) for run in (8, 9, 10)]
    assert shapes == [dh.TINY, (1, 32, 8, 32768, 64), (1, 32, 8, 32768, 128)]
    assert PDL not in bd(8) and PDL in bd(9) and PDL in bd(10)
    n = flat(notes_section("NOTES-decode.md", "## Where an eager call's host time goes at 32K on a slow host"))
    assert flat(measured_text()) in n


DIRECT = "the eager split kernel's launch (dependent launch, Triton's C launcher alone)"


def v36_text() -> str:
    t, a = bd(11), bd(12)
    gaps = [ab_host(52, s, "True") - ab_host(52, s, "False") for s in SHAPES]
    d64 = [r for r in _run("decode-host-h100-run52.json")["split_pdl_ab"]
           if (r["B"], r["H"], r["Hkv"], r["L"], r["D"]) == SHAPES[-1]]
    ratio = {arm: statistics.median(r["eager_us"] for r in d64 if r["arm"] == arm) / d64[0]["graph_us"]
             for arm in ("True", "False")}
    return (f"The dependent launch through the C launcher alone took {a[DIRECT]:.1f} µs, against {a[PLAIN]:.1f} for "
            f"the plain launch through PyTorch's launcher (predicted: within 0.7; met, and under it) and {a[PDL]:.1f} "
            f"through Triton's whole path in the same rounds ({a[PDL] - a[DIRECT]:.1f} µs under it; predicted: at "
            f"least 1.2; missed on this machine, whose kept call at `TINY` took {t['attnlab.flash_decode']:.1f} µs, "
            f"less than half run 8's). The plan's call at 32K at D = 64 took {a[CALL]:.1f} µs "
            f"against {t[CALL]:.1f} at `TINY` (predicted: at most 1.5 over; met). In run 52 the eager calls' host µs "
            f"per call with the dependent launch ran {span([-g for g in gaps], '.1f')} µs under the plain launch's "
            f"(predicted: within 1; met, and under it on every shape); at 32/8 heads over 32K at D = 64 the eager calls "
            f"took {ratio['True']:.3f}× the graph's time with it and {ratio['False']:.3f}× without. The decode and "
            f"launch GPU tests: {pytest_summary(DATA / 'decode-breakdown-run11' / 'tests.log')}.")


CALL = "the plan's __call__"


def test_v36_against_its_prediction():
    for run in (11, 12):
        r = _run(f"decode-breakdown-h100-run{run}.json")
        assert r["gpu"] == "NVIDIA H100 80GB HBM3" and (r["torch"], r["triton"]) == ("2.11.0+cu130", "3.6.0")
    assert DIRECT in bd(12) and PDL in bd(12) and DIRECT not in bd(9)
    n = flat(notes_section("NOTES-decode.md", "## v36"))
    assert flat(v36_text()) in n


C_PLAIN = "the split kernel's launch, Triton's C launcher alone"
card = load_script("benchmarks/scorecard.py")


def host_rows(run: int) -> dict:
    return {r["call"]: r["host_us"] for r in _run(f"decode-host-h100-run{run}.json")["host"]}


def v37_text() -> str:
    t, a, h = bd(13), bd(14), host_rows(53)
    first = h["flash_decode_triton (plan kept), Triton's C launcher alone first"]
    default = [h["flash_decode_triton (plan kept)"], h["flash_decode_triton (plan kept), again"]]
    return (f"The plain split launch through the C launcher alone took {t[C_PLAIN]:.1f} µs against PyTorch's launcher's "
            f"{t[PLAIN]:.1f} at `TINY` and {a[C_PLAIN]:.1f} against {a[PLAIN]:.1f} at 32K (predicted: 0.2–0.6 under; "
            f"missed), and the kept call with it first {first:.1f} µs against the default rows' {span(default, '.1f')} "
            f"in the same rounds (predicted: 0.2–0.6 under; missed). Under 0.3 µs: not taken (the switch is gone; the "
            f"breakdown still times the plain launch both ways). The "
            f"dependent launch through it took {a[DIRECT]:.1f} µs against Triton's whole path's {a[PDL]:.1f} on this "
            f"machine. The decode and launch GPU tests under `ATTNLAB_DIRECT_FIRST=1`: "
            f"{pytest_summary(DATA / 'decode-breakdown-run13' / 'tests-direct-first.log')}.")


def decode_card(run: int) -> tuple[list[dict], dict, float, float]:
    """A decode-host run's scorecard (with prefill run 42's table), its bars by name, the kept call's host µs and the
    empty launch's."""
    bars = card.scorecard({"prefill-h100-run42.json": _run("prefill-h100-run42.json")["rows"]},
                          _run(f"decode-host-h100-run{run}.json"))
    return (bars, {b["bar"]: b for b in bars}, min(card.kept_host_us(host_rows(run))),
            _run(f"decode-host-h100-run{run}.json")["floors"][card.EMPTY_LAUNCH])


def run53_text() -> str:
    bars, bar, kept, empty = decode_card(53)
    loops = [r["loop_host_us"] for r in _run("decode-host-h100-run53.json")["speed"]
             if r["provider"] == "attnlab" and (r["B"], r["L"]) == (1, 32768)]
    decode = [b for b in bars if b["bar"].startswith("decode")]
    assert all(b["met"] for b in decode)
    return (f"With v36, decode-host run 53 met every decode bar: a kept call's host time {kept:.1f} µs, "
            f"{kept / empty:.2f}× an empty launch's {empty:.1f}; eager within 10 % of graphs at 32K, "
            f"{bar['decode: eager within 10 % of CUDA graphs, D = 128']['measured'].split()[0]} at D = 128 and "
            f"{bar['decode: eager within 10 % of CUDA graphs, D = 64']['measured'].split()[0]} at D = 64; batch 1 at or "
            f"above cuDNN under graphs, the lowest "
            f"{bar['decode: batch 1 at or above cuDNN under CUDA graphs']['measured'].split()[0]}. The eager calls at "
            f"32K took {span(loops, '.1f')} µs of host time each, about the kept call's {kept:.1f} at `TINY`.")


def test_v37_and_run53():
    assert C_PLAIN in bd(13) and C_PLAIN in bd(14) and C_PLAIN not in bd(12)
    v37 = flat(notes_section("NOTES-decode.md", "## v37"))
    assert flat(v37_text()) in v37 and flat(run53_text()) in v37
    from attnlab.gpu import launch

    assert not hasattr(launch, "DIRECT_FIRST")  # measured, not taken, removed


def test_the_section():
    section = results_section(SECTION)
    runs = {f"run {n}": _run(f"decode-breakdown-h100-run{n}.json")["breakdown"] for n in range(8, 15)}
    assert "\n".join(dh.breakdown_markdown(runs)) in section
    for run in (51, 52):
        rows = _run(f"decode-host-h100-run{run}.json")["split_pdl_ab"]
        assert "\n".join(dh.split_pdl_ab_markdown(rows, dh.preset_for("NVIDIA H100 80GB HBM3"))) in section
    bars = card.scorecard({"prefill-h100-run42.json": _run("prefill-h100-run42.json")["rows"]},
                          _run("decode-host-h100-run53.json"))
    assert all(x in section for x in card.markdown(bars).splitlines() if x.startswith("| decode"))
    text = flat(section)
    for sentence in (measured_text(), v36_text(), v37_text(), run53_text()):
        assert flat(sentence) in text, sentence


def test_the_sections_hosts():
    empty = [_run(f"decode-host-h100-run{run}.json")["floors"][card.EMPTY_LAUNCH] for run in (51, 52, 53)]
    assert (f"an empty one-argument Triton launch {empty[0]:.1f}, {empty[1]:.1f} and {empty[2]:.1f} µs in runs "
            "51–53") in flat(results_section(SECTION))


def test_the_sentences_after_the_readmes_h100_table():
    """The sentences after the README's H100 table (the table itself: tests/test_results_run44.py)."""
    readme = flat((ROOT / "README.md").read_text())
    pre = {f"prefill-h100-run{n}.json": _run(f"prefill-h100-run{n}.json")["rows"] for n in (41, 42)}
    low = {(p["D"], p["causal"], p["N"], p["pass_"], p["H"], p["Hkv"]): p
           for p in card.prefill_pairs({"42": pre["prefill-h100-run42.json"]})}[(64, False, 4096, "fwd_bwd", 32, 32)]
    alone = next(p for p in card.prefill_pairs({"43": _run("prefill-h100-run43.json")["rows"]})
                 if (p["causal"], p["pass_"]) == (False, "fwd_bwd"))
    a = {r["provider"]: r["tflops"] for r in pre["prefill-h100-run42.json"]
         if (r["D"], r["causal"], r["N"], r["pass_"], r["H"], r["Hkv"]) == (64, False, 4096, "fwd_bwd", 32, 32)}
    assert (f"ran {low['ratio']:.3f}× cuDNN ({a['attnlab']:.0f} against {a['sdpa-cudnn']:.0f} TFLOP/s); timed alone in "
            f"seven rounds (prefill run 43) it ran {alone['ratio']:.2f}×") in readme
    hosts = []
    for n in (48, 49, 50):
        h = _run(f"decode-host-h100-run{n}.json")
        hosts.append((min(card.kept_host_us(host_rows(n))), h["floors"][card.EMPTY_LAUNCH]))
    e = [_run(f"decode-host-h100-run{n}.json")["floors"][card.EMPTY_LAUNCH] for n in (52, 53)]
    assert (f"an empty Triton launch took {e[0]:.1f} and {e[1]:.1f} µs on the machines of decode-host runs 52 and 53, "
            f"and {span([x for _, x in hosts], '.1f')} µs on those of runs 48–50, where the kept call took "
            f"{span([k for k, _ in hosts], '.1f')} µs") in readme


def loops_over_kept(run: int) -> list[float]:
    """The eager calls' host µs per call at 32K (batch 1, both head dims) over the kept call's at ``TINY``."""
    h = _run(f"decode-host-h100-run{run}.json")
    kept = min(card.kept_host_us(host_rows(run)))
    return [r["loop_host_us"] - kept for r in h["speed"] if r["provider"] == "attnlab" and (r["B"], r["L"]) == (1, 32768)]


def test_the_prediction_for_run54_quotes_runs_48_and_49():
    n = flat(notes_section("NOTES-decode.md", "## v37"))
    assert f"(runs 48 and 49: {span(loops_over_kept(48) + loops_over_kept(49), '.1f')} µs over)" in n


def run54_text() -> str:
    bars, bar, kept, empty = decode_card(54)
    missed = [b["bar"] for b in bars if b["bar"].startswith("decode") and not b["met"]]
    assert missed == ["decode: a kept call's host time"]
    over = loops_over_kept(54)
    return (f"Decode-host run 54, on another machine (an empty launch {empty:.1f} µs): every decode bar met but the "
            f"host's, a kept call taking {kept:.1f} µs ({kept / empty:.2f}× the empty launch); eager within 10 % of "
            f"graphs at 32K {bar['decode: eager within 10 % of CUDA graphs, D = 128']['measured'].split()[0]} at "
            f"D = 128 and {bar['decode: eager within 10 % of CUDA graphs, D = 64']['measured'].split()[0]} at D = 64; "
            f"batch 1 at or above cuDNN, the lowest "
            f"{bar['decode: batch 1 at or above cuDNN under CUDA graphs']['measured'].split()[0]}. The eager calls at "
            f"32K took {span([-x for x in over], '.1f')} µs less host time each than the kept call at `TINY` "
            f"(predicted: at most 2 more; met).")


def test_run54():
    h = _run("decode-host-h100-run54.json")
    assert h["gpu"] == "NVIDIA H100 80GB HBM3" and (h["torch"], h["triton"]) == ("2.11.0+cu130", "3.6.0")
    assert flat(run54_text()) in flat(notes_section("NOTES-decode.md", "## v37"))
    section = results_section(SECTION)
    bars = card.scorecard({"prefill-h100-run42.json": _run("prefill-h100-run42.json")["rows"]}, h)
    assert all(x in section for x in card.markdown(bars).splitlines() if x.startswith("| decode"))
    assert flat(run54_text()) in flat(section)
