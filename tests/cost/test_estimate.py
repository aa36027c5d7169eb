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


def test_the_decode_estimate_adds_the_calibrated_kernel_where_a_calibration_applies():
    """``estimate(...).decode.calibrated``: on the H200 the measured calibrations' tiles (64 and 128 keys) at D = 128,
    their picks and times the calibrated model's; on the H100 the same tiles predicted (``processor_calibration``),
    at D = 64 scaled too; none on an A100 or at D = 256; the JSON and the table carry them."""
    import json
    import os
    import subprocess
    import sys

    from attnlab.cost import (
        calibrated_num_splits,
        calibrated_split_time,
        calibration_for_config,
        estimate,
        get_gpu,
    )

    shape = dict(seq=32768, heads=32, kv_heads=8)
    for gpu, D, measured in (("H200", 128, True), ("H100", 64, False), ("H100", 128, False)):
        cal_rows = estimate(gpu=gpu, head_dim=D, **shape).decode.calibrated
        g = get_gpu(gpu)
        assert [r.config for r in cal_rows] == [(64, D, 4, 3), (128, D, 4, 3)]
        for r in cal_rows:
            cal = calibration_for_config(gpu, r.config)
            kw = dict(batch=1, kv_heads=8, seq=32768, head_dim=D, sms=g.sms, cal=cal)
            assert r.splits == calibrated_num_splits(**kw, min_split_len=r.config[0])
            assert r.time == calibrated_split_time(**kw, splits=r.splits) and r.measured is (measured and D == 128)
            assert r.blocks == 8 * r.splits and r.waves == -(-r.blocks // (g.sms * cal.programs_per_sm))
    assert estimate(gpu="A100", head_dim=128, **shape).decode.calibrated == ()
    assert estimate(gpu="H200", head_dim=256, **shape).decode.calibrated == ()
    out = subprocess.run([sys.executable, "-m", "attnlab", "estimate", "--gpu", "H100", "--seq", "32768", "--heads",
                          "32", "--kv-heads", "8", "--head-dim", "64", "--json", "-"], capture_output=True, text=True,
                         check=True, env={**os.environ, "COLUMNS": "200"})  # (wide enough that no cell wraps)
    rows = json.loads(out.stdout)["decode"]["calibrated"]
    assert [(r["config"], r["splits"], r["measured"]) for r in rows] == [([64, 64, 4, 3], rows[0]["splits"], False),
                                                                        ([128, 64, 4, 3], 32, False)]
    table = " ".join(out.stderr.split())
    assert "attnlab's split kernel, 128-key tiles │ 32 │ 256 │ 1 │ │" in table and "calibrated, predicted" in table
