"""Decode-breakdown runs 5–7 and Gluon-decode run 1, on an H100: benchmarks/RESULTS.md's section and NOTES-decode's
"Measured: decode-breakdown runs 5–7 and Gluon-decode run 1", their tables rendered from the recorded files and every
number they quote computed from those files (and from the earlier runs they compare with)."""

from __future__ import annotations

import json
import re

from tests.helpers import ROOT, arm_medians, flat, load_script, notes_section, results_section

DATA = ROOT / "benchmarks" / "data"
dsp = load_script("benchmarks/decode_split_probe.py")
RUNS = (5, 6, 7)
STATIC, TRITON = "the split kernel's launch", "the split kernel's launch, Triton's launcher"
# the batch-1 shapes in the probe's order: 64/8 over 8K, 28/4 over 20,000, 32/8 over 32K at D = 64 and 128
SHAPES = ((1, 64, 8, 8192, 128), (1, 28, 4, 20000, 128), (1, 32, 8, 32768, 64), (1, 32, 8, 32768, 128))


def _json(name: str) -> dict:
    return json.loads((DATA / name).read_text())


def steps(run: int) -> dict[str, float]:
    """The breakdown's steps of ``run`` (decode-breakdown-h100-runN.json), host µs per call by step."""
    return {s["step"]: s["host_us"] for s in _json(f"decode-breakdown-h100-run{run}.json")["breakdown"]["steps"]}


def breakdown_table() -> str:
    names = list(steps(RUNS[0]))
    head = "| step | " + " | ".join(f"run {r}" for r in RUNS) + " |\n|---|" + "---|" * len(RUNS)
    return head + "\n" + "\n".join(f"| {n} | " + " | ".join(f"{steps(r)[n]:.1f}" for r in RUNS) + " |" for n in names)


def probe_rows() -> list[dict]:
    return _json("decode-split-probe-h100-run1.json")["rows"]


def probe_medians() -> dict:
    return arm_medians(probe_rows())


def run41_medians() -> dict:
    """The same arms' medians in decode-host run 41 (--kernel-ab-merge), whole-length rows only."""
    rows = [r for r in _json("decode-host-h100-run41.json")["kernel_ab"] if r.get("length", r["L"]) == r["L"]]
    return arm_medians(rows)


def gaps(m: dict) -> list[str]:
    return [f"{m[s]['gluon+merge'] - m[s]['triton+merge']:.2f}" for s in SHAPES]


def merge_cost(m: dict) -> str:
    """At 28/4 heads: how much longer the Gluon kernel with its in-kernel merge runs than with the merge kernel."""
    s = SHAPES[1]
    return f"{m[s]['gluon'] - m[s]['gluon+merge']:.2f}"


def listing(values: list[str]) -> str:
    return ", ".join(values[:-1]) + " and " + values[-1]


def pytest_counts(text: str) -> tuple[int, int]:
    """(passed, skipped) of a pytest log's summary line."""
    m = re.search(r"(\d+) passed(?:, (\d+) skipped)?", text.strip().splitlines()[-1])
    return int(m.group(1)), int(m.group(2) or 0)


def _counts(path: str) -> str:
    passed, skipped = pytest_counts((DATA / path).read_text())
    return f"{passed} passed, {skipped} skipped"


def savings() -> list[float]:
    return [steps(r)[TRITON] - steps(r)[STATIC] for r in RUNS]


def test_results_render_the_tables_from_the_recorded_runs():
    text = results_section("### Decode-breakdown runs 5–7 and Gluon-decode run 1")
    assert breakdown_table() in text
    assert dsp.markdown(probe_rows()).rstrip() in text
    for r in RUNS:
        d = _json(f"decode-breakdown-h100-run{r}.json")
        assert d["gpu"] == "NVIDIA H100 80GB HBM3" and (d["torch"], d["triton"]) == ("2.11.0+cu130", "3.6.0")
        assert d["breakdown"]["shape"] == [1, 32, 8, 256, 128] and d["breakdown"]["eager_fused"]
    assert _json("decode-split-probe-h100-run1.json")["gpu"] == "NVIDIA H100 80GB HBM3"


def test_results_quote_the_runs():
    text = flat(results_section("### Decode-breakdown runs 5–7 and Gluon-decode run 1"))
    assert f"the decode and launch GPU tests first ({_counts('decode-breakdown-run5/tests.log')};" in text
    assert f"(the Gluon decode GPU tests: {_counts('gluon-decode-run1/tests.log')};" in text
    cut = savings()
    share = [c / steps(r)[TRITON] for c, r in zip(cut, RUNS)]
    assert (f"PyTorch's launcher takes {listing([f'{c:.1f}' for c in cut])} µs off the launch "
            f"({min(share) * 100:.0f}–{max(share) * 100:.0f} % of Triton's)") in text
    calls = [f"{steps(r)['attnlab.flash_decode']:.1f}" for r in RUNS]
    keys = [steps(r)["decode.plan_key"] for r in RUNS]
    assert (f"a kept `attnlab.flash_decode` took {listing(calls)} µs, the key alone {min(keys):.1f} to "
            f"{max(keys):.1f}") in text
    # the first call's two failures, on an H200, and the later passes
    first = (DATA / "decode-breakdown-run5/tests-first-call.log").read_text()
    failed = re.findall(r"^FAILED .*::(\S+)\[(\S+)\]$", first, re.M)
    assert failed == [("test_graphs_of_large_variant_calls_merge_in_the_split_kernel_with_eager_bits", "paged"),
                      ("test_graphs_of_large_variant_calls_merge_in_the_split_kernel_with_eager_bits", "batch-3-ragged")]
    assert "NVIDIA H200" in (DATA / "decode-breakdown-run5/gpu-first-call.txt").read_text()
    assert "failed two of the three large-call graph tests" in text and "paged and three ragged sequences" in text
    m, before = probe_medians(), run41_medians()
    assert f'"gluon+merge" is {listing(gaps(m))} µs over "triton+merge" (run 41: {listing(gaps(before))})' in text
    assert f"the in-kernel merge now costs {merge_cost(m)} µs over the merge kernel ({merge_cost(before)} in run 41)" in text
    assert all(m[s]["gluon+merge"] > m[s]["triton+merge"] for s in SHAPES)  # "still the slower one on every shape"


def test_notes_hold_the_predictions_against_the_runs():
    notes = notes_section("NOTES-decode.md", "## Measured: decode-breakdown runs 5–7 and Gluon-decode run 1")
    cut = savings()
    share = [c / steps(r)[TRITON] for c, r in zip(cut, RUNS)]
    assert (f"{listing([f'{c:.1f}' for c in cut])} µs under it in runs 5, 6 and 7 "
            f"({min(share) * 100:.0f}–{max(share) * 100:.0f} % of Triton's launch)") in notes
    met = sum(c >= 1.5 for c in cut)
    assert f'"At least 1.5 µs" is met in {["none", "one", "two", "all"][met]} of the three processes' in notes
    keys = [steps(r)["decode.plan_key"] for r in RUNS]
    run4 = {s["step"]: s["host_us"] for s in _json("decode-breakdown-h200-run4.json")["breakdown"]["steps"]}
    assert f"(the key alone took {min(keys):.1f}–{max(keys):.1f} µs against {run4['decode.plan_key']:.1f})" in notes
    assert f"run 4's {run4['attnlab.flash_decode']:.1f}" in notes and min(keys) > run4["decode.plan_key"]
    slow = max(RUNS, key=lambda r: steps(r)["attnlab.flash_decode"])
    assert (f"On the slowest of these hosts (run {slow}, {steps(slow)['attnlab.flash_decode']:.1f} µs a call) it is "
            f"{steps(slow)[TRITON] - steps(slow)[STATIC]:.1f} µs") in notes
    empty = _json("decode-host-h100-run42.json")["floors"]["triton_empty_1_arg, kernel[grid]"]
    assert f"the call at about {20 / empty:.2f}× an empty launch" in notes
    outs = [steps(r)["outputs.take"] for r in RUNS]
    assert f"the key ({min(keys):.1f}–{max(keys):.1f} µs), the outputs ({min(outs):.1f}–{max(outs):.1f})" in notes
    assert f"The Gluon decode GPU tests pass ({_counts('gluon-decode-run1/tests.log')})" in notes
    m, before = probe_medians(), run41_medians()
    assert f'"gluon" {merge_cost(m)} µs over "gluon+merge" ({merge_cost(before)} in run 41)' in notes
    assert f"{listing(gaps(m))} µs" in notes and f"against run 41's {listing(gaps(before))}" in notes
    assert all(float(a) > float(b) / 2 for a, b in zip(gaps(m), gaps(before)))  # "not halved anywhere"
    s = SHAPES[0]
    assert f"At 64/8 the Gluon kernel runs at {m[s]['triton+merge'] / m[s]['gluon+merge']:.2f}×" in notes
    splits = {r["splits"] for r in probe_rows() if (r["B"], r["H"], r["Hkv"], r["L"], r["D"]) == s}
    assert splits == {16} and f"(16 splits of {s[3] // 16} keys), " in notes
    assert (f"{m[s]['gluon+merge'] - m[s]['triton+merge']:.1f} µs of the Gluon kernel's {m[s]['gluon+merge']:.1f} "
            "is left for the ncu run") in notes


_SIZES = r"""
import json, re
import triton
from attnlab.gpu import decode_gluon, decode_kernels
from attnlab.gpu.prefill_gluon import cuobjdump

def size(kernel):
    sass = cuobjdump(kernel, "-sass") or ""
    return len(re.findall(r"^\s+/\*[0-9a-f]{4}\*/\s+\S", sass, re.M))

kw = dict(group_rows=8, merge=1, splits=16)
print(json.dumps(dict(version=triton.__version__, triton=size(decode_kernels.compile_sm90(128, **kw)),
                      gluon=size(decode_gluon.compile_sm90(128, **kw)))))
"""


def test_notes_lead_for_the_ncu_run():
    """The lead NOTES-decode gives the ncu run: the Gluon kernel's gap against the keys a program reads (from the probe's
    split counts), and the two builds' sizes, counted off triton 3.9's sm_90 builds (the numbers quoted where this
    triton is 3.9; any triton's builds within 10 % of each other)."""
    import pytest
    from tests.helpers import fresh_json

    from attnlab.gpu import decode_gluon

    notes = notes_section("NOTES-decode.md", "## Measured: decode-breakdown runs 5–7 and Gluon-decode run 1")
    m = probe_medians()
    splits = {(r["B"], r["H"], r["Hkv"], r["L"], r["D"]): r["splits"] for r in probe_rows()}
    d128 = sorted((s[3] // splits[s], m[s]["gluon+merge"] - m[s]["triton+merge"]) for s in SHAPES if s[4] == 128)
    assert [g for _, g in d128] == sorted((g for _, g in d128), reverse=True)  # "shrinks as a program's keys grow"
    quoted = ", ".join(f"{g:.2f}{' µs' if i == 0 else ''} at {keys:,}{' keys a program' if i == 0 else ''}"
                       for i, (keys, g) in enumerate(d128[:-1]))
    keys, g = d128[-1]
    assert f"At D = 128 it is {quoted} and {g:.2f} at {keys:,}." in notes
    if not decode_gluon.HAVE_GLUON:
        pytest.skip("this triton has no Gluon")
    sizes = fresh_json(_SIZES, timeout=600)
    assert 0.9 < sizes["gluon"] / sizes["triton"] < 1.1
    if sizes["version"].startswith("3.9."):
        assert f"{sizes['gluon']:,} SASS instructions against the Triton kernel's {sizes['triton']:,}" in notes
