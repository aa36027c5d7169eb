"""Prefill runs 44 and 45 at the clocks they ran (``benchmarks/clock_share.py``): RESULTS.md's section, the NOTES'
analysis of the 700 TFLOP/s goal, the README's paragraph and docs/cost.md's sentence, every number they quote computed
from the recorded runs; and the script's own behaviour (its table, its refusals)."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
from tests.helpers import ROOT, doc_text, flat, load_script, md_table, notes_section, results_section, span

from attnlab.cost import get_gpu

DATA = ROOT / "benchmarks" / "data"
cs = load_script("benchmarks/clock_share.py")
SECTION = "### Prefill runs 44 and 45 at the clocks they ran"
RUNS = {44: "prefill-h100-run44.json", 45: "prefill-h200-run45.json"}
FA3 = 740.0  # FlashAttention-3's published D = 128 forward on an H100, TFLOP/s (the issue's figure)


def _rows(run: int) -> list[dict]:
    return cs.clock_rows(json.loads((DATA / RUNS[run]).read_text()), D=128, pass_="fwd")


def _facts(run: int) -> dict:
    rows = _rows(run)
    mine = [r for r in rows if r["provider"] == "attnlab"]
    peer = {(r["causal"], r["N"], r["Hkv"]): r for r in rows if r["provider"] == "sdpa-cudnn"}
    key = lambda r: (r["causal"], r["N"], r["Hkv"])  # noqa: E731
    best = max(mine, key=lambda r: r["tflops"])
    g = get_gpu(best["gpu"])
    return dict(
        mhz=span([r["sm_mhz"] for r in mine], ",.0f"), peer_mhz=span([r["sm_mhz"] for r in peer.values()], ",.0f"),
        share=span([100 * r["of_roofline"] for r in mine], ".0f"),
        clock=span([100 * r["clock_of_roofline"] for r in mine], ".0f"),
        peer_clock=span([100 * r["clock_of_roofline"] for r in peer.values()], ".0f"),
        higher=sum(peer[key(r)]["sm_mhz"] > r["sm_mhz"] for r in mine), n=len(mine),
        higher_causal=sum(peer[key(r)]["sm_mhz"] > r["sm_mhz"] for r in mine if r["causal"]),
        n_causal=sum(r["causal"] for r in mine),
        lead=span([r["tflops"] / peer[key(r)]["tflops"] for r in mine]),
        lead_clock=span([r["clock_of_roofline"] / peer[key(r)]["clock_of_roofline"] for r in mine]),
        best=best, best_mhz=f"{best['sm_mhz']:,.0f}", best_share=f"{100 * best['of_roofline']:.0f}",
        best_clock=f"{100 * best['clock_of_roofline']:.0f}",
        need=f"{700e12 / (best['clock_of_roofline'] * g.tensor_flops / g.tensor_mhz):,.0f}",
        top=f"{max(r['sm_mhz'] for r in mine):,.0f}", quoted=f"{g.tensor_mhz:,.0f}", peak=f"{g.tensor_flops / 1e12:.0f}")


def test_the_section_is_the_scripts_output_and_its_quotes_are_computed():
    section = results_section(SECTION)
    out = subprocess.run([sys.executable, "benchmarks/clock_share.py", *(f"benchmarks/data/{f}" for f in RUNS.values()),
                          "--D", "128", "--pass", "fwd"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert md_table(out, "| run |") in section
    text = flat(section)
    h200, h100 = _facts(45), _facts(44)
    assert (f"attnlab's D = 128 forward rows ran at {h200['mhz']} MHz, {h200['share']} % of the datasheet's roofline and "
            f"{h200['clock']} % of the roofline at their clock; cuDNN's at {h200['peer_mhz']} MHz, {h200['peer_clock']} % "
            f"at its clock") in text
    assert (f"cuDNN's clock was the higher on {h200['higher']} of the {h200['n']} rows (on all {h200['n_causal']} causal "
            f"ones): at their clocks attnlab leads {h200['lead_clock']}×, against the {h200['lead']}× measured") in text
    assert h200["higher_causal"] == h200["n_causal"]
    assert (f"attnlab at {h100['mhz']} MHz, {h100['clock']} % at its clock; cuDNN at {h100['peer_mhz']} MHz, "
            f"{h100['peer_clock']} %") in text
    b = h200["best"]
    assert (f"The fastest row, {b['tflops']:.0f} TFLOP/s (run 45, non-causal 16K, 16/{b['Hkv']} heads), ran at "
            f"{h200['best_mhz']} MHz, {h200['best_clock']} % of the roofline at that clock. At that share 700 TFLOP/s "
            f"needs {h200['need']} MHz under the load; no D = 128 row of attnlab's held more than {h200['top']}") in text
    assert not b["causal"] and b["N"] == 16384
    assert f"presets are quoted at {h200['quoted']} MHz" in text


def test_the_notes_readme_and_docs_quote_the_same_figures():
    h200, h100 = _facts(45), _facts(44)
    b = h200["best"]
    notes = notes_section("NOTES-prefill.md", "## The 700 TFLOP/s goal at the clocks the runs had")
    assert (f"attnlab's D = 128 forward rows at {h200['clock']} % of the roofline at their clock ({h200['share']} % of "
            f"the datasheet's); cuDNN's at {h200['peer_clock']} %, running at the higher clock on {h200['higher']} of "
            f"the {h200['n']} rows") in notes
    assert (f"The fastest row, {b['tflops']:.0f} TFLOP/s, ran at {h200['best_mhz']} MHz; at its {h200['best_clock']} % "
            f"share 700 TFLOP/s needs {h200['need']} MHz under the load, and no D = 128 row of attnlab's held more "
            f"than {h200['top']} there") in notes
    fa3 = FA3 / get_gpu("H100").tensor_flops * 1e12
    assert f"FlashAttention-3's published {FA3:.0f} TFLOP/s is {100 * fa3:.0f} % of {h200['peak']}" in notes
    share, clock = math.log(fa3 / b["clock_of_roofline"]), math.log(get_gpu("H200").tensor_mhz / b["sm_mhz"])
    assert (f"the gap from {b['tflops']:.0f} to {FA3:.0f} is, in ratios, {100 * share / (share + clock):.0f} % the "
            f"kernel's share ({h200['best_clock']} % against {100 * fa3:.0f} %) and {100 * clock / (share + clock):.0f} % "
            "the clock") in notes
    assert f"run 44's H100 rows span {h100['clock']} %" in notes
    mine = [r for r in _rows(44) if r["provider"] == "attnlab"]
    top = max(mine, key=lambda r: r["clock_of_roofline"])
    assert top["sm_mhz"] == min(r["sm_mhz"] for r in mine)  # the highest share where the clock read lowest
    assert f"the highest on rows whose samples read {top['sm_mhz']:,.0f} MHz" in notes
    readme = doc_text("README.md")  # (the clock of the H200's fastest row; the goal's reading is the energy's now)
    assert (f"on the H200 the fastest, {b['tflops']:.0f} TFLOP/s, ran at {h200['best_mhz']} MHz, below the "
            f"{h200['quoted']} MHz its {h200['peak']} TFLOP/s peak is quoted at") in readme
    gpu_doc = doc_text("docs/gpu.md")
    assert (f"against the roofline at the clock each row ran, attnlab's D = 128 forward rows reach {h200['clock']} % on "
            "the H200") in gpu_doc
    cost = doc_text("docs/cost.md")
    assert f"attnlab's D = 128 forward rows of prefill run 45 ran at {h200['mhz']} MHz on an H200" in cost
    assert f"`get_gpu(\"H200\").at_clock(1690)` is the same GPU with its peaks at 1,690 MHz " \
           f"({get_gpu('H200').at_clock(1690).tensor_flops / 1e12:.0f} TFLOP/s;" in cost


def test_clock_share_refuses_runs_it_cannot_read(tmp_path):
    saved = json.loads((DATA / RUNS[45]).read_text())
    no_clocks = dict(saved, rows=[{k: v for k, v in r.items() if k != "gpu_state"} for r in saved["rows"]])
    with pytest.raises(ValueError, match="noted no clocks"):
        cs.clock_rows(no_clocks)
    with pytest.raises(ValueError, match="no preset with a known clock"):
        cs.clock_rows(dict(saved, environment={"gpu": "NVIDIA B200"}, roofline_gpu=None))
    out = tmp_path / "rows.json"
    out.write_text("mine")
    r = subprocess.run([sys.executable, "benchmarks/clock_share.py", f"benchmarks/data/{RUNS[45]}", "--json", str(out)],
                       cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 2 and "exists; not overwriting it" in r.stderr and out.read_text() == "mine"
    r = subprocess.run([sys.executable, "benchmarks/clock_share.py", str(tmp_path / "none.json")], cwd=ROOT,
                       capture_output=True, text=True)
    assert r.returncode == 2 and "none.json" in r.stderr


def test_clock_share_writes_its_rows(tmp_path):
    out = tmp_path / "rows.json"
    subprocess.run([sys.executable, "benchmarks/clock_share.py", f"benchmarks/data/{RUNS[44]}", "--pass", "fwd_bwd",
                    "--json", str(out)], cwd=ROOT, capture_output=True, text=True, check=True)
    rows = json.loads(out.read_text())["prefill-h100-run44"]
    assert rows and {r["pass_"] for r in rows} == {"fwd_bwd"} and {r["D"] for r in rows} == {64, 128}
    assert rows == json.loads(json.dumps(cs.clock_rows(json.loads((DATA / RUNS[44]).read_text()), pass_="fwd_bwd")))


def test_the_prediction_quotes_the_first_rounds_reads():
    rows = [r for r in json.loads((DATA / RUNS[45]).read_text())["rows"] if r["provider"] == "attnlab"
            and r["D"] == 128 and r["N"] == 4096 and r["pass_"] == "fwd"]
    first = [r["gpu_state"][0] for r in rows]
    notes = notes_section("NOTES-prefill.md", "## The 700 TFLOP/s goal at the clocks the runs had")
    assert (f"run 45's D = 128 4K forward rows of attnlab read {span([s['power_w'] for s in first], '.0f')} W after "
            f"their first round, at up to {max(s['sm_mhz'] for s in first):,.0f} MHz") in notes
