"""Prefill run 39 with decode-host run 43, Gluon-decode run 2, ncu-decode run 1 and launch run 1, all on an H100:
benchmarks/RESULTS.md's section and NOTES-decode's "Measured: prefill run 39, decode-host run 43 ...", their tables as
the scripts render them from the recorded files, and every number they quote computed from those files."""

from __future__ import annotations

import json
import re
import statistics

from tests.helpers import ROOT, arm_medians, flat, load_script, notes_section, pytest_summary, results_section

DATA = ROOT / "benchmarks" / "data"
dh = load_script("benchmarks/decode_host.py")
card = load_script("benchmarks/scorecard.py")
dsp = load_script("benchmarks/decode_split_probe.py")
SECTION = "### Prefill run 39 with decode-host run 43, Gluon-decode run 2 and the prefill's launches"
NOTES = "## Measured: prefill run 39, decode-host run 43, Gluon-decode run 2 and ncu-decode run 1"
NCU = ("triton", "triton-full", "gluon")
SMALL = (1, 64, 8, 8192, 128)


def _run(name: str) -> dict:
    return json.loads((DATA / name).read_text())


def _pre() -> dict:
    return {"prefill-h100-run39.json": _run("prefill-h100-run39.json")["rows"]}


def _host() -> dict:
    return _run("decode-host-h100-run43.json")


def host_table() -> str:
    rows = _host()["host"]
    return "| call | host µs |\n|---|---|\n" + "\n".join(f"| {r['call'].strip()} | {r['host_us']:.1f} |" for r in rows)


def ncu(kernel: str) -> dict:
    """What ncu-decode run 1 says of one split kernel: duration (µs), DRAM throughput (%), registers a thread,
    dynamic shared memory (KiB), achieved occupancy (%) and the grid."""
    text = (DATA / f"ncu-decode-{kernel}-h100-run1.txt").read_text()

    def num(label: str) -> float:
        return float(re.search(rf"^\s+{label}\s+\S+\s+([\d,.]+)\s*$", text, re.M).group(1).replace(",", ""))

    return dict(us=num("Duration") / 1000, dram=num("DRAM Throughput"), regs=num("Registers Per Thread"),
                smem=num("Dynamic Shared Memory Per Block") / 1024, occ=num("Achieved Occupancy"),
                grid=re.search(r"_decode_split_\w+ \((\d+, \d+, \d+)\)", text).group(1))


def ncu_table() -> str:
    head = ("| split kernel | duration µs | DRAM throughput | registers a thread | dynamic shared KiB | achieved occupancy "
            "| grid |\n|---|---|---|---|---|---|---|")
    names = {"triton": "Triton, with the lengths", "triton-full": "Triton, without them", "gluon": "Gluon, with the lengths"}
    return head + "\n" + "\n".join(
        f"| {names[k]} | {m['us']:.2f} | {m['dram']:.1f} % | {m['regs']:.0f} | {m['smem']:.0f} | {m['occ']:.2f} % | "
        f"({m['grid']}) |" for k in NCU for m in [ncu(k)])


def probe_medians() -> dict:
    return arm_medians(_run("decode-split-probe-h100-run2.json")["rows"])


def _counts(path: str) -> str:
    return pytest_summary(DATA / path)


def graph(provider: str, shape=SMALL, key: str = "graph_us") -> float:
    return next(r[key] for r in _host()["speed"] if r["provider"] == provider
                and (r["B"], r["H"], r["Hkv"], r["L"], r["D"]) == shape)


def test_the_section_holds_the_runs_tables():
    section = results_section(SECTION)
    host = _host()
    assert host["gpu"].startswith("NVIDIA H100") and (host["torch"], host["triton"]) == ("2.11.0+cu130", "3.6.0")
    bars = card.scorecard(_pre(), host)
    assert card.markdown(bars).rstrip("\n") in section
    scope, lines = card.standing(_pre(), {"decode-host-h100-run43.json": host})
    assert card.standing_markdown(scope, lines, "H100").rstrip("\n") in section
    assert "\n".join(dh.split_pdl_ab_markdown(host["split_pdl_ab"], dh.preset_for(host["gpu"]))) in section
    assert host_table() in section
    assert dsp.markdown(_run("decode-split-probe-h100-run2.json")["rows"]).rstrip() in section
    assert ncu_table() in section


def test_the_section_quotes_the_runs():
    text = flat(results_section(SECTION))
    h = {r["call"]: r["host_us"] for r in _host()["host"]}
    empty = _host()["floors"]["triton_empty_1_arg, kernel[grid]"]
    public, internal = h["attnlab.flash_decode (plan kept)"], h["flash_decode_triton (plan kept), again"]
    assert (f"the bar's {internal:.1f} µs is the internal call's second row; the public call's one row, measured first, "
            f"took {public:.1f} µs ({public / empty:.2f}× the empty launch)") in text
    triton_row = h["flash_decode_triton (plan kept), Triton's launcher"]
    assert (f"with every launch through Triton's launcher took {triton_row:.1f} µs, {triton_row - internal:.1f} µs over "
            "the default's second row") in text
    assert f"(the internal call's first row took {h['flash_decode_triton (plan kept)']:.1f} µs)" in text
    assert f"{_counts('gluon-decode-run2/tests.log')} for the Gluon decode GPU tests" in text
    m = probe_medians()[SMALL]
    assert f'"gluon+merge" {m["gluon+merge"]:.2f} µs against "triton+merge" {m["triton+merge"]:.2f}' in text
    g, t, f = ncu("gluon"), ncu("triton"), ncu("triton-full")
    assert f"Alone the Gluon kernel took {g['us']:.2f} µs, the Triton kernel {t['us']:.2f} with the lengths and " \
           f"{f['us']:.2f} without them" in text
    assert g["us"] < f["us"] < t["us"]
    before = (DATA / "launch-run1/tests-before-fix.log").read_text()
    failed = re.findall(r"^FAILED \S+::(\S+)\[(\S+)\]$", before, re.M)
    assert failed == [("test_prefill_launches_through_pytorchs_launcher_give_the_bits_of_tritons", "2-8-2-2048-128-False")]
    assert f"the first call ({_counts('launch-run1/tests-before-fix.log')})" in text
    assert f"the second ({_counts('launch-run1/tests.log')}" in text
    with_l, without, cudnn = graph("attnlab"), graph("attnlab-full"), graph("sdpa-cudnn")
    assert (f"at 64/8 heads over 8K, {with_l:.1f} µs with the lengths, {without:.1f} without them, cuDNN "
            f"{cudnn:.1f}") in text


def test_the_notes_hold_the_predictions_against_the_runs():
    notes = flat(notes_section("NOTES-decode.md", NOTES))
    h = {r["call"]: r["host_us"] for r in _host()["host"]}
    empty = _host()["floors"]["triton_empty_1_arg, kernel[grid]"]
    internal = h["flash_decode_triton (plan kept), again"]
    public = h["attnlab.flash_decode (plan kept)"]
    assert f"{internal:.1f} µs, {internal / empty:.2f}× the empty launch's {empty:.1f}" in notes
    assert internal / empty > 1.35  # "missed"
    assert f"the public call's row, measured first in the process, took {public:.1f}" in notes
    triton_row = h["flash_decode_triton (plan kept), Triton's launcher"]
    assert f"the \"Triton's launcher\" row {triton_row - internal:.1f} µs above the default's second row" in notes
    pdl = {(r["D"], r["arm"]): r for r in _host()["split_pdl_ab"] if (r["B"], r["L"]) == (1, 32768)}
    ratio = {k: statistics.median(r["eager_us"] for r in _host()["split_pdl_ab"] if (r["B"], r["L"], r["D"], r["arm"])
                                  == (1, 32768, k[0], k[1])) / v["graph_us"] for k, v in pdl.items()}
    assert f"at D = 64 over 32K {ratio[64, 'True']:.3f} with the dependent launch against {ratio[64, 'False']:.3f}" in notes
    assert f"at D = 128 {ratio[128, 'True']:.3f} against {ratio[128, 'False']:.3f}" in notes
