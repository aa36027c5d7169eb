"""attnlab.cost.estimate and ``attnlab estimate``: the lecture's defaults (§5.5, §7.5, §8.4) in one
call, the CLI end to end (JSON equal to the Python call), bad input, and a light import."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from attnlab.cost import estimate, kv_cache_bytes


def test_estimate_reproduces_the_lecture_defaults():
    est = estimate()
    assert round(est.forward.standard_time * 1e6) == 1334 and round(est.backward.speedup, 1) == 3.3
    assert est.decode.best.splits == 4 and est.decode.no_split.blocks == 32
    assert est.decode.kv_cache_bytes == kv_cache_bytes(layers=1, seq=4096, kv_heads=32, head_dim=128)
    d = est.to_dict()
    assert json.loads(json.dumps(d)) == d  # plain JSON types only
    assert d["shape"]["kv_heads"] == 32 and d["gpu"]["name"] == "H100"


def test_cli_estimate_prints_and_writes_json(tmp_path, capsys):
    from attnlab.cli import main

    out = tmp_path / "est.json"
    argv = ["estimate", "--gpu", "a100", "--seq", "1025", "--head-dim", "96", "--heads", "8", "--kv-heads", "2",
            "--batch", "3", "--causal", "--json", str(out)]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "A100" in text and "memory" in text and "compute" in text and "Flash-Decoding" in text
    got = json.loads(out.read_text())
    want = estimate(gpu="A100", seq=1025, head_dim=96, heads=8, kv_heads=2, batch=3, causal=True).to_dict()
    assert got == json.loads(json.dumps(want))


def _run_cli(argv):
    """``attnlab`` with ``argv``: its exit status (returned, or raised by argparse's error path)."""
    from attnlab.cli import main

    try:
        return main(argv)
    except SystemExit as e:
        return e.code


@pytest.mark.parametrize("argv,words", [
    (["estimate", "--gpu", "nope"], ["unknown GPU", "nope"]),
    (["estimate", "--seq", "0"], ["seq", "positive integer", "0"]),
    (["estimate", "--heads", "12", "--kv-heads", "5"], ["multiple of kv_heads"]),
    (["estimate", "--head-dim", "-3"], ["head", "dim", "-3"]),
])
def test_cli_estimate_bad_input_exits_2(argv, words, capsys):
    assert _run_cli(argv) == 2
    err = capsys.readouterr().err.strip()
    assert all(w in err for w in words) and len(err.splitlines()) == 1, err


def test_cli_plot_writes_a_png(tmp_path):
    from attnlab.cli import main

    png = tmp_path / "roof.png"
    assert main(["estimate", "--seq", "2048", "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("call,match", [
    (lambda: estimate(heads=32, kv_heads=5), "multiple of kv_heads"),
    (lambda: estimate(dtype="fp8"), "dtype"),
    (lambda: estimate(gpu="TPU"), "unknown GPU"),
])
def test_bad_input_is_refused(call, match):
    with pytest.raises((ValueError, TypeError), match=match):
        call()


def test_import_is_light():
    code = ("import sys, attnlab.cost; bad = [m for m in ('torch', 'matplotlib', 'rich', 'triton', 'numpy') "
            "if m in sys.modules]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)
