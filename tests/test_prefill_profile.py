"""benchmarks/prefill_profile.py on the CPU: its shapes, its table from synthetic rows, and the checks it makes
before timing anything (the GPU run itself is the script's job on a CUDA machine)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from tests.helpers import ROOT, load_script

pp = load_script("benchmarks/prefill_profile.py")


def _row(provider, eager, graph, kernels, **shape):
    cfg = pp.shape(**(dict(D=128, N=4096, causal=True) | shape))
    return dict(cfg, provider=provider, eager_ms=eager, eager_rounds=[eager], graph_ms=graph, graph_rounds=[graph],
                kernels_ms=sum(kernels.values()) / 1e3, kernels=kernels)


def test_shapes_hold_16k_tokens_and_width_2048():
    s = pp.shape(64, 4096, True, gqa=4)
    assert (s["B"] * s["N"], s["H"] * s["D"], s["H"] // s["Hkv"], s["pass_"]) == (16384, 2048, 4, "fwd_bwd")


def test_table_ratios_and_kernel_lists():
    rows = [_row("attnlab", 2.0, 1.9, {"fwd": 500.0, "bwd": 1300.0, "zero": 40.0, "pre": 30.0, "store": 50.0}),
            _row("sdpa-cudnn", 2.2, 2.09, {"cudnn_fwd": 560.0, "cudnn_bwd": 1500.0})]
    lines = pp.table(rows, top=3)
    attn = next(x for x in lines if "| attnlab |" in x)
    peer = next(x for x in lines if "| sdpa-cudnn |" in x)
    assert "| 2.000 | 1.900 | 1.920 | +0.100 | — | — |" in attn
    assert f"| 2.200 | 2.090 | 2.060 | +0.110 | {2.2 / 2.0:.3f} | {2.09 / 1.9:.3f} |" in peer
    assert "| (2 more) | 80.0 |" in lines  # the kernels past the top 3 summed on one line
    assert lines.count("| kernel | µs |") == 2


def test_a_row_without_a_graph():
    rows = [_row("attnlab", 2.0, None, {"k": 1.0}), _row("sdpa-cudnn", 2.2, 2.0, {"k": 1.0})]
    lines = pp.table(rows)
    assert "| 2.000 | — | 0.001 | — | — | — |" in next(x for x in lines if "| attnlab |" in x)
    assert f"| {2.2 / 2.0:.3f} | — |" in next(x for x in lines if "| sdpa-cudnn |" in x)


def test_report_prints_a_runs_tables(tmp_path):
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"rows": [_row("attnlab", 1.0, 0.9, {"k": 900.0}, D=64, causal=False)]}))
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "prefill_profile.py"), "--report", str(path)],
                         capture_output=True, text=True, check=True).stdout
    assert "== run.json" in out and "| D 64, dense, 4 × 4K, 32 heads | attnlab | 1.000 | 0.900 | 0.900 |" in out


@pytest.mark.parametrize("extra, message", [
    (["--rounds", "0"], "--rounds must be at least 1"),
    (["--json", "{existing}"], "exists: give a new path"),
])
def test_refusals_before_any_timing(tmp_path, extra, message):
    existing = tmp_path / "kept.json"
    existing.write_text("{}")
    args = [a.replace("{existing}", str(existing)) for a in extra]
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "prefill_profile.py"), *args],
                       capture_output=True, text=True)
    assert r.returncode == 2 and message in r.stderr
    assert existing.read_text() == "{}"
