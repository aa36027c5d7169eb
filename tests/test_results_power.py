"""Prefill runs 44-46 at the power limit (``benchmarks/clock_share.py --power-limit``): the times at the limit, the
energy a FLOP and how a row's speed followed its clock, on made-up rows and on the recorded runs; RESULTS.md's section
as the script's output, and the NOTES, README and docs/gpu.md quoting what it computes; the sampler's power reader
(instantaneous where NVML answers it) on a stand-in NVML."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import types

import pytest
from tests.helpers import ROOT, doc_text, flat, load_script, md_table, notes_section, results_section, span

DATA = ROOT / "benchmarks" / "data"
cs = load_script("benchmarks/clock_share.py")
pf = load_script("benchmarks/prefill.py")
SECTION = "### Prefill runs 44–46 at the power limit"
NOTES = "## The 700 TFLOP/s goal at the power limit"
RUNS = ("prefill-h100-run44", "prefill-h200-run45", "prefill-h100-run46")
COMMAND = [sys.executable, "benchmarks/clock_share.py", *(f"benchmarks/data/{r}.json" for r in RUNS), "--D", "128",
           "--pass", "fwd", "--power-limit", "700"]


def _row(provider="attnlab", ms_rounds=(1.0, 1.1, 1.2), states=(), **shape):
    base = dict(D=128, causal=False, N=16384, pass_="fwd", B=1, H=16, Hkv=16, provider=provider,
                ms_rounds=list(ms_rounds), ms=statistics.median(ms_rounds), tflops=600.0 / statistics.median(ms_rounds))
    base.update(shape)
    return dict(base, gpu_during=[dict(sm_mhz=m, power_w=w) for m, w in states])


def test_times_at_the_limit_their_energy_and_how_speed_followed_the_clock():
    # three times of one row: at 1,500 MHz and 1,800 MHz at the limit, one at 600 W (not at it: left out)
    saved = {"rows": [_row(ms_rounds=(1.0, 1.1, 1.2), states=((1800, 700.0), (1500, 690.0), (1700, 600.0))),
                      _row("sdpa-cudnn", ms_rounds=(1.3, 1.3), states=((1600, 700.0), (1700, 700.0))),
                      _row(D=64, states=((1800, 700.0),) * 3)]}
    times = cs.limit_times(saved, 700.0, D=128)
    assert [(t["provider"], t["round"]) for t in times] == [("attnlab", 0), ("attnlab", 1), ("sdpa-cudnn", 0),
                                                            ("sdpa-cudnn", 1)]
    first = times[0]
    assert first["tflops"] == pytest.approx(600.0 / 1.1 * 1.1 / 1.0) and first["power_w"] == 700.0
    assert first["pj_per_flop"] == pytest.approx(700.0 / first["tflops"])
    (mine, peer) = cs.follows(times)
    assert (mine["low"]["round"], mine["high"]["round"]) == (1, 0)
    assert mine["clock_gain"] == pytest.approx(1800 / 1500 - 1) and mine["speed_gain"] == pytest.approx(1.1 - 1)
    assert mine["follow"] == pytest.approx(0.1 / 0.2)
    assert peer["speed_gain"] == 0 and peer["follow"] == 0
    e = cs.energy_summary(times, 700.0)
    assert e["goal_pj"] == 1.0 and e["attnlab"]["times"] == 2
    assert e["attnlab"]["pj_median"] == pytest.approx(statistics.median([700 / 600, 690 / (600 / 1.1)]))
    assert e["attnlab"]["follow"] == pytest.approx(0.5) and e["sdpa-cudnn"]["follow"] == 0
    assert e["attnlab"]["fastest"] == pytest.approx(600.0)
    # the slope is summed over rows: a row with a tiny clock gain cannot swing it as it would a median of ratios
    two = times + [dict(t, N=4096) for t in cs.limit_times(
        {"rows": [_row(N=4096, ms_rounds=(1.0, 0.9), states=((1500, 700.0), (1515, 700.0)))]}, 700.0)]
    slope = (0.1 + 1.0 / 0.9 - 1) / (0.2 + 0.01)
    assert cs.energy_summary(two, 700.0)["attnlab"]["follow"] == pytest.approx(slope)
    with pytest.raises(ValueError, match="positive number of watts"):
        cs.limit_times(saved, 0)


def test_the_section_is_the_scripts_output():
    out = subprocess.run(COMMAND, cwd=ROOT, capture_output=True, text=True, check=True).stdout
    section = results_section(SECTION)
    assert md_table(out, "| run | D | heads | causal | N | pass | attnlab times") in section
    assert md_table(out, "| run | D | heads | causal | N | pass | provider | MHz") in section
    for line in out[out.index("prefill-h100-run44: 700 TFLOP/s"):].splitlines():
        assert line in section
    text = flat(section)
    assert "700 W on both (`power.limit` in each run's `gpu.txt`" in text
    for run in (44, 45, 46):
        assert "700.00 W" in (DATA / f"scorecard-run{run}" / "gpu.txt").read_text()


def minus(x: float) -> str:
    """``x`` to one decimal with a typographic minus sign, as the notes write a negative figure."""
    return f"{x:.1f}".replace("-", "−")


def _summaries() -> dict:
    out = {}
    for run in RUNS:
        times = cs.limit_times(json.loads((DATA / f"{run}.json").read_text()), 700.0, D=128, pass_="fwd")
        out[int(run[-2:])] = dict(times=times, e=cs.energy_summary(times, 700.0),
                                  follows=[f for f in cs.follows(times) if f["provider"] == "attnlab"])
    return out


def test_the_notes_quote_the_computed_figures():
    s = _summaries()
    notes = flat(notes_section("NOTES-prefill.md", NOTES))
    e44, e45, e46 = (s[r]["e"] for r in (44, 45, 46))
    f46, f45 = s[46]["follows"], s[45]["follows"]
    assert (f"attnlab's speed rose {e46['attnlab']['follow']:.3f} of the clock's rise in run 46 (the clock read during "
            f"each time; clocks up {span([100 * f['clock_gain'] for f in f46], '.1f')} % within a row, speed "
            f"{minus(100 * min(f['speed_gain'] for f in f46))} to {100 * max(f['speed_gain'] for f in f46):+.1f} %) "
            f"and {e44['attnlab']['follow']:.3f} in run 44; cuDNN's {e46['sdpa-cudnn']['follow']:.3f} and "
            f"{e44['sdpa-cudnn']['follow']:.3f}") in notes
    assert min(f["speed_gain"] for f in f46) < 0
    assert e46["attnlab"]["follow_rows"] == 8
    assert (f"run 45, the clock read after each time) {e45['attnlab']['follow']:.3f} and "
            f"{e45['sdpa-cudnn']['follow']:.3f}, over smaller clock spreads "
            f"({span([100 * f['clock_gain'] for f in f45], '.1f')} % for attnlab)") in notes
    assert (f"{e46['attnlab']['pj_median']:.3f} pJ a FLOP in run 46 ({e46['attnlab']['times']} times), "
            f"{e44['attnlab']['pj_median']:.3f} in run 44 ({e44['attnlab']['times']}) and "
            f"{e45['attnlab']['pj_median']:.3f} in run 45 ({e45['attnlab']['times']}); cuDNN's "
            f"{e46['sdpa-cudnn']['pj_median']:.3f}, {e44['sdpa-cudnn']['pj_median']:.3f} and "
            f"{e45['sdpa-cudnn']['pj_median']:.3f}") in notes
    medians = [e["attnlab"]["pj_median"] for e in (e44, e45, e46)]
    below = span([100 * (1 - 1.0 / m) for m in medians], ".0f")
    assert f"needs at most {e46['goal_pj']:.3f} pJ a FLOP: {below} % below attnlab's medians" in notes
    assert f"spends {below} % less energy a FLOP" in notes
    counts = [e["attnlab"]["times"] for e in (e44, e45, e46)]
    assert f"the medians over {min(counts)}–{max(counts)} times are" in notes
    low = min((t for t in s[44]["times"] if t["provider"] == "attnlab"), key=lambda t: t["pj_per_flop"])
    assert low["pj_per_flop"] == e44["attnlab"]["pj_lowest"] < e44["goal_pj"]  # (one time under the goal's energy)
    assert (f"The lowest time, {low['pj_per_flop']:.3f} in run 44, read {low['power_w']:.0f} W while running "
            f"{low['tflops']:.0f} TFLOP/s") in notes
    assert "1.02–1.10 pJ a FLOP on either GPU and cuDNN's 1.10–1.20" in notes  # (the prediction, before its run)


def test_the_readme_and_docs_quote_the_same_figures():
    s = _summaries()
    e45, e46 = s[45]["e"], s[46]["e"]
    readme = doc_text("README.md")
    assert (f"The medians of attnlab's D = 128 forward times at the limit spent {e46['attnlab']['pj_median']:.3f} pJ a "
            f"FLOP in prefill run 46 (an H100) and {e45['attnlab']['pj_median']:.3f} in run 45 (an H200); cuDNN's "
            f"{e46['sdpa-cudnn']['pj_median']:.3f} and {e45['sdpa-cudnn']['pj_median']:.3f}") in readme
    assert f"700 TFLOP/s needs at most {e46['goal_pj']:.3f} pJ a FLOP" in readme
    assert f"attnlab's speed rose {e46['attnlab']['follow']:.3f} of the clock's rise in run 46" in readme
    gpu = doc_text("docs/gpu.md")
    assert (f"spent {e45['attnlab']['pj_median']:.3f} pJ a FLOP on the H200 against cuDNN's "
            f"{e45['sdpa-cudnn']['pj_median']:.3f}, where 700 TFLOP/s within 700 W needs {e45['goal_pj']:.3f}") in gpu


def test_clock_share_takes_the_recorded_limit_and_refuses_a_bad_one(tmp_path):
    saved = json.loads((DATA / f"{RUNS[2]}.json").read_text())
    recorded = tmp_path / f"{RUNS[2]}.json"  # (the same name: the same label in the tables)
    recorded.write_text(json.dumps(dict(saved, environment=dict(saved["environment"], power_limit_w=700.0))))
    given = subprocess.run(COMMAND[:2] + [f"benchmarks/data/{RUNS[2]}.json", "--power-limit", "700"], cwd=ROOT,
                           capture_output=True, text=True, check=True).stdout
    taken = subprocess.run(COMMAND[:2] + [str(recorded)], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert "pJ a FLOP" in taken and taken == given
    none = subprocess.run(COMMAND[:2] + [f"benchmarks/data/{RUNS[2]}.json"], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout
    assert "--power-limit W gives the energy tables" in none and "pJ/FLOP" not in none
    out = tmp_path / "rows.json"
    bad = subprocess.run(COMMAND[:2] + [f"benchmarks/data/{RUNS[2]}.json", "--power-limit", "-5", "--json", str(out)],
                         cwd=ROOT, capture_output=True, text=True)
    assert bad.returncode == 2 and "--power-limit must be a positive number of watts" in bad.stderr
    assert not out.exists()


class _Field:
    def __init__(self, ret, mw):
        self.nvmlReturn, self.valueType, self.value = ret, 1, types.SimpleNamespace(uiVal=mw)


def _nvml(instant_mw=None, ret=0, field=True):
    """A stand-in for ``pynvml``: the 1 s average always 700 W; the instantaneous field where ``field``."""
    calls = []
    m = types.SimpleNamespace(nvmlDeviceGetPowerUsage=lambda h: 700_000)
    if field:
        m.NVML_FI_DEV_POWER_INSTANT = 186

        def values(handle, ids):
            calls.append(ids)
            return [_Field(ret, instant_mw)]

        m.nvmlDeviceGetFieldValues = values
    return m, calls


def test_the_power_reader_takes_the_instantaneous_power_where_nvml_answers_it():
    m, calls = _nvml(612_345)
    source, read = pf.power_reader(m, "gpu0")
    assert source == "instant" and read() == pytest.approx(612.345) and calls[-1] == [186]
    for m, _ in (_nvml(612_345, ret=3), _nvml(field=False), _nvml(0)):
        source, read = pf.power_reader(m, "gpu0")
        assert source == "1 s average" and read() == 700.0
