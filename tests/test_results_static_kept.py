"""Static-kept run 1, on an H100 (the Gluon decode kernel's replay timeline, and the prefill GPU suite with the
prefill's launches through PyTorch's launcher), and v32 (the Gluon merge in the layouts of Triton's):
benchmarks/RESULTS.md's section, NOTES-decode's "Measured: static-kept run 1" and "v32", and docs/decode.md, their
tables rendered from the recorded files and every number they quote computed from those files or from the builds."""

from __future__ import annotations

import json
import re

import pytest
from tests.helpers import ROOT, flat, fresh_json, load_script, notes_section, pytest_summary, results_section

DATA = ROOT / "benchmarks" / "data"
dsp = load_script("benchmarks/decode_split_probe.py")
ms = load_script("benchmarks/merge_sass.py")
SECTION = "### Static-kept run 1, on an H100"


def rows() -> list[dict]:
    return json.loads((DATA / "decode-split-timeline-h100-run1.json").read_text())["rows"]


def us(L: int, cache: str, arm: str, kernel: str) -> float:
    return next(r["us"] for r in rows() if (r["L"], r["cache"], r["arm"]) == (L, cache, arm) and kernel in r["kernel"])


def outcomes() -> dict:
    """The cut-off suite's outcomes, counted off its -q progress lines."""
    text = (DATA / "static-kept-run1/tests.log").read_text()
    body = "".join(re.sub(r"\s*\[\s*\d+%\]$", "", ln.strip()) for ln in text.splitlines()
                   if re.fullmatch(r"[.sFEx]+(\s*\[\s*\d+%\])?", ln.strip()))
    return {"ran": len(body), "passed": body.count("."), "skipped": body.count("s"), "failed": body.count("F")}


def summary(name: str) -> str:
    return pytest_summary(DATA / "static-kept-run1" / name)


def test_the_section_renders_the_timeline_and_counts_the_suite():
    section = results_section(SECTION)
    d = json.loads((DATA / "decode-split-timeline-h100-run1.json").read_text())
    assert d["gpu"] == "NVIDIA H100 80GB HBM3" and d["torch"] == "2.11.0+cu130"
    assert dsp.timeline_markdown(rows()).rstrip() in section
    text = flat(section)
    o = outcomes()
    assert (f"{o['ran']} tests ran (the rest did not fit the call's 300 s): {o['passed']} passed, {o['skipped']} "
            f"skipped, {o['failed']} failed") in text
    assert f"`test_prefill.py` ({summary('tests-launch-prefill.log')})" in text
    assert f"`test_prefill_plans.py` ({summary('tests-prefill-plans.log')})" in text
    w, c = (lambda *a: us(8192, "warm", *a)), (lambda *a: us(8192, "cold", *a))
    assert (f"the Gluon split kernel ran {w('gluon+merge', 'split'):.2f} µs against the Triton one's "
            f"{w('triton+merge', 'split'):.2f} L2-warm and {c('gluon+merge', 'split'):.2f} against "
            f"{c('triton+merge', 'split'):.2f} L2-cold; the Gluon merge kernel {w('gluon+merge', 'merge'):.2f} against "
            f"{w('triton+merge', 'merge'):.2f}") in text


def test_the_notes_and_the_doc_quote_the_timeline():
    notes = flat(notes_section("NOTES-decode.md", "## Measured: static-kept run 1"))
    w, c = (lambda *a: us(8192, "warm", *a)), (lambda *a: us(8192, "cold", *a))
    assert (f"the Gluon split kernel ran {w('gluon+merge', 'split'):.2f} µs against the Triton one's "
            f"{w('triton+merge', 'split'):.2f} L2-warm, and {c('gluon+merge', 'split'):.2f} against "
            f"{c('triton+merge', 'split'):.2f} L2-cold. The Gluon merge kernel ran {w('gluon+merge', 'merge'):.2f} µs "
            f"against the Triton merge kernel's {w('triton+merge', 'merge'):.2f}") in notes
    assert f"the Gluon split kernel ran {w('gluon', 'split'):.2f} µs against {w('triton', 'split'):.2f} warm" in notes
    d32 = abs(us(32768, "warm", "gluon+merge", "split") - us(32768, "warm", "triton+merge", "split"))
    assert (f"within {d32:.2f} µs of each other warm, and the merges ran {us(32768, 'warm', 'gluon+merge', 'merge'):.2f}"
            f" against {us(32768, 'warm', 'triton+merge', 'merge'):.2f}") in notes
    gaps = [r["gap_before_us"] for r in rows()]
    assert f"met ({min(gaps):.2f}–{max(gaps):.2f} µs for every kernel)" in notes and max(gaps) - min(gaps) < 0.5
    ncu = {k: float(re.search(r"Duration\s+ns\s+([\d,]+)", (DATA / f"ncu-decode-{k}-h100-run1.txt").read_text())
                    .group(1).replace(",", "")) / 1000 for k in ("triton", "gluon")}
    under = [ncu["triton"] - c("triton+merge", "split"), ncu["gluon"] - c("gluon+merge", "split")]
    assert f"Both ran {min(under):.1f}–{max(under):.1f} µs under their ncu durations" in notes
    assert c("gluon+merge", "split") < c("triton+merge", "split") and ncu["gluon"] < ncu["triton"]
    o = outcomes()
    assert f"{o['ran']} tests ran (about half the suite): {o['passed']} passed, {o['skipped']} skipped and " \
           f"{o['failed']} failed" in notes
    assert f"`test_prefill.py` ({summary('tests-launch-prefill.log')})" in notes
    assert f"`test_prefill_plans.py` ({summary('tests-prefill-plans.log')})" in notes
    doc = flat((ROOT / "docs" / "decode.md").read_text())
    assert (f"At 64/8 heads over 8K the Gluon split kernel ran {w('gluon+merge', 'split'):.2f} µs against the Triton "
            f"one's {w('triton+merge', 'split'):.2f} L2-warm and {c('gluon+merge', 'split'):.2f} against "
            f"{c('triton+merge', 'split'):.2f} L2-cold, and the Gluon merge kernel {w('gluon+merge', 'merge'):.2f} µs "
            f"against {w('triton+merge', 'merge'):.2f}") in doc


def _sass(name: str) -> dict:
    return json.loads((DATA / name).read_text())


def test_v32_quotes_the_merge_builds():
    notes = flat(notes_section("NOTES-decode.md", "## v32"))
    before, now = _sass("merge-sass-before-v32.json"), _sass("merge-sass-v32.json")
    g, t = before["gluon"], before["triton"]
    assert (f"Its build had {g['LDG']} LDG ({g['ldg_scalar']} of them scalar, {g['ldg_128']} of 128 bits), "
            f"{g['MUFU']} MUFU, {g['FMUL']} FMUL and {g['instructions']:,} instructions, against the Triton merge's "
            f"{t['LDG']} LDG ({t['ldg_scalar']} scalar), {t['MUFU']} MUFU, {t['FMUL']} FMUL and "
            f"{t['instructions']:,}") in notes
    per_thread = before["rows"] * before["splits"] // 4  # (the lanes along D, the 4 warps along the splits)
    assert f"every thread held {per_thread} of the ({before['rows']}, {before['splits']}) lse values" in notes
    g = now["gluon"]
    assert (f"{g['LDG']} LDG ({g['ldg_scalar']} scalar), {g['MUFU']} MUFU, {g['FMUL']} FMUL, and "
            f"{g['instructions']:,} instructions in all against {now['triton']['instructions']:,}") in notes
    for k in ("LDG", "ldg_scalar", "ldg_128", "MUFU", "FMUL", "FFMA", "FADD", "STG"):
        assert now["gluon"][k] == now["triton"][k], k


def test_the_merge_builds_as_recorded():
    """The two merge kernels built again here give the counts v33 recorded (where this triton is one that recorded
    them: 3.9, or 3.6, the GPU machines'), and in any triton with Gluon the Gluon merge makes the Triton merge's
    global loads, with no more shared-memory traffic, barriers or exponentials (its sum over the splits inside a
    thread where the rows allow)."""
    from attnlab.gpu import decode_gluon

    if not decode_gluon.HAVE_GLUON:
        pytest.skip("this triton has no Gluon")
    rep = fresh_json("import json, sys; sys.path.insert(0, 'benchmarks'); import merge_sass; "
                     "print(json.dumps(merge_sass.report()))", timeout=600)
    if rep["gluon"] is None:
        pytest.skip("this triton ships no cuobjdump")
    g, t = rep["gluon"], rep["triton"]
    for k in ("LDG", "ldg_scalar", "ldg_128", "STG"):
        assert g[k] == t[k], k
    assert g["LDS"] + g["STS"] <= t["LDS"] + t["STS"] and g["BAR"] <= t["BAR"] and g["MUFU"] <= t["MUFU"], (g, t)
    for name in ("merge-sass-v33.json", "merge-sass-v33-triton36.json"):
        recorded = _sass(name)
        if rep["triton_version"] == recorded["triton_version"]:
            assert (t, g) == (recorded["triton"], recorded["gluon"]), name
