"""Decode-host run 35 (the decode code as shipped, with transformers' model as hf run 17): benchmarks/RESULTS.md's
section, its table as decode_host.py renders it from the recorded file and every quoted number computed from the
recorded files."""

from __future__ import annotations

import json
import re

from tests.helpers import ROOT
from tests.test_results_merge_rows import B8, D64, D128, MID, SMALL, _run, _table
from tests.test_results_merge_rows import _section as _merge_section
from tests.test_results_strided_decode import _run as _script
from tests.test_results_variants import _flat

DATA = ROOT / "benchmarks" / "data"
SECTION = ("### Decode-host run 35:", "### Decode-host runs 32–34 and decode runs 8 and 9:")


def _section() -> str:
    return _merge_section(SECTION)


def quotes() -> dict[str, str]:
    r = _run(35)
    hf = json.loads((DATA / "hf-h200-run17.json").read_text())
    sp = {(x["B"], x["H"], x["L"], x["D"], x["provider"]): x for x in r["speed"]}
    ratio = lambda s: sp[(*s, "sdpa-cudnn")]["graph_us"] / sp[(*s, "attnlab")]["graph_us"]  # noqa: E731
    ratios = [ratio(s) for s in (D128, SMALL, MID, D64)]
    logs = DATA / "decode-host-run35"
    return {
        "tests": re.search(r"(\d+ passed, \d+ skipped)", (logs / "tests.log").read_text()).group(1),
        "extra": re.search(r"(\d+ failed, \d+ passed, \d+ skipped)", (logs / "extra.log").read_text()).group(1),
        "cudnn": f"{min(ratios):.2f}–{max(ratios):.2f}", "b8": f"{ratio(B8):.3f}",
        "e128": f"{sp[(*D128, 'attnlab')]['eager_over_graph']:.2f}",
        "e64": f"{sp[(*D64, 'attnlab')]['eager_over_graph']:.2f}",
        "host": f"{next(h['host_us'] for h in r['host'] if h['call'] == 'attnlab.flash_decode (plan kept)'):.1f}",
        "step": f"{hf['layer']['attnlab']['decode_step_gpu_us']:.1f}",
        "sstep": f"{hf['layer']['sdpa']['decode_step_gpu_us']:.1f}",
        "tps": f"{hf['generate']['attnlab']['decode_tokens_per_s']:.1f}",
        "stps": f"{hf['generate']['sdpa']['decode_tokens_per_s']:.1f}",
    }


def host_table() -> str:
    """A kept call's host µs in decode-host runs 30–35 beside the empty one-argument launch of the same process."""
    lines = ["| run | attnlab.flash_decode (plan kept) | flash_decode_triton (plan kept), again | empty Triton launch "
             "(1 argument) | best ÷ empty |", "|---|---|---|---|---|"]
    for run in range(30, 36):
        r = _run(run)
        h = {x["call"]: x["host_us"] for x in r["host"]}
        a, b = h["attnlab.flash_decode (plan kept)"], h["flash_decode_triton (plan kept), again"]
        empty = r["floors"]["triton_empty_1_arg, kernel[grid]"]
        lines.append(f"| {run} | {a:.1f} | {b:.1f} | {empty:.1f} | {min(a, b) / empty:.2f} |")
    return "\n".join(lines)


def test_table_is_the_scripts_rendering():
    out = _script(ROOT / "benchmarks" / "decode_host.py", "--report", DATA / "decode-host-h200-run35.json")
    assert _table(out, "| B | H/Hkv | L | D | provider | eager µs |") in _section()


def test_quotes_are_computed():
    text, q = _flat(_section()), quotes()
    assert host_table() in _section()
    runs = {run: _run(run) for run in range(30, 36)}
    best = {run: min(x["host_us"] for x in r["host"] if x["call"] in ("attnlab.flash_decode (plan kept)",
                                                                       "flash_decode_triton (plan kept), again"))
            for run, r in runs.items()}
    empty = {run: r["floors"]["triton_empty_1_arg, kernel[grid]"] for run, r in runs.items()}
    assert sum(b < 20 for b in best.values()) == 5 and best[35] >= 20 and max(empty, key=empty.get) == 35
    assert (f"run 35's host was the slowest of the six (its empty launch {empty[35]:.1f} µs, `torch.empty` "
            f"{runs[35]['floors']['torch.empty']:.1f})") in text
    assert f"The decode GPU tests: {q['tests']}" in text
    final = re.search(r"(\d+ passed, \d+ skipped)", (DATA / "decode-checks-run3" / "tests.log").read_text()).group(1)
    assert f"`data/decode-checks-run3/tests.log`): {final} (the kernel" in text
    assert "failed" not in (DATA / "decode-checks-run3" / "tests.log").read_text().lower()
    assert f"The KV-cache and integration tests: {q['extra']}; the one failure is the check" in text
    assert q["extra"].startswith("1 failed")
    failed = re.findall(r"^FAILED (\S+)", (DATA / "decode-host-run35" / "extra.log").read_text(), re.M)
    assert failed == ["tests/integrations/test_hf_optional.py::test_transformers_is_optional"]
    assert (f"attnlab ran at {q['cudnn']}× cuDNN's speed on the four batch-1 shapes and {q['b8']}× at batch 8; called "
            f"eagerly, {q['e128']}× its graph time at 32/8 heads over 32K keys with D = 128 and {q['e64']}× with D = 64; "
            f"a kept call's host time {q['host']} µs") in text
    assert (f"keys {q['step']} µs of GPU time against SDPA's {q['sstep']}; `generate` at batch 1 after a 32,768-token "
            f"prompt {q['tps']} tokens/s against {q['stps']}") in text
