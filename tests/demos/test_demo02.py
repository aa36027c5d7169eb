"""Demo 02 (§4): its numbers against independent computation."""

import io
import math

import numpy as np
import pytest
import torch
from rich.console import Console

from attnlab.demos import demo02


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("demo02")
    buf = io.StringIO()
    res = demo02.run(out_dir=out_dir, console=Console(file=buf, width=120))
    return res, buf.getvalue(), out_dir


def test_overflow_thresholds(demo):
    res, text, _ = demo
    for name, want in (("float32", 88.72), ("float16", 11.09)):
        r = res["overflow"][name]
        dtype = np.dtype(name).type
        assert r["threshold"] == pytest.approx(math.log(float(np.finfo(dtype).max)), abs=1e-12)
        assert round(r["threshold"], 2) == want  # the lecture's 88.7 and 11.09
        assert math.isfinite(r["exp_below"]) and math.isinf(r["exp_above"])
        x = np.array(r["x"], dtype=np.float64)
        assert x.max() > r["threshold"]
        assert r["naive_has_nan"] and np.isnan(r["naive"][-1]) and r["safe_finite"]
        want_p = torch.softmax(torch.tensor(x), 0).numpy()
        np.testing.assert_allclose(r["safe"], want_p, atol=2e-3)
        np.testing.assert_allclose(r["online"], want_p, atol=2e-3)
        assert f"{r['threshold']:.2f}" in text


def _records(x):
    prev = np.maximum.accumulate(x)[:-1]
    return [int(k) + 2 for k in np.nonzero(x[1:] > prev)[0]]


def test_passes_and_rescales(demo):
    res, text, out_dir = demo
    p = res["passes"]
    n = p["n"]
    assert n == len(p["x"]) == 4096
    for name, passes in (("naive", 2), ("safe", 3), ("online", 2)):
        assert p[name]["passes"] == passes
        assert p[name]["reads"] == passes * n
        assert p[name]["max_abs_diff"] < 1e-15
    assert p["online"]["rescale_at"] == _records(p["x"])
    assert p["online"]["rescales"] == len(_records(p["x"]))
    assert p["expected_rescales"] == pytest.approx(float(np.sum(1.0 / np.arange(2, n + 1))), rel=1e-12)
    assert round(p["expected_rescales"], 1) == 7.9
    assert f"re-based its sum {p['online']['rescales']} times" in text
    png = out_dir / "demo02_rescales.png"
    assert png.exists() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_merge_orders(demo):
    res, text, _ = demo
    m = res["merge"]
    x = m["x"]
    assert len(x) == 10_000 == sum(m["chunk_sizes"]) and len(m["chunk_sizes"]) == 7
    assert len(set(m["chunk_sizes"])) > 1 and sorted(m["shuffle"]) == list(range(7))
    assert m["float64"]["tree_depth"] == m["float32"]["tree_depth"] == math.ceil(math.log2(10_000)) == 14
    for name, tol in (("float64", 1e-13), ("float32", 1e-4)):
        xd = x.astype(name)
        want = float(torch.logsumexp(torch.from_numpy(xd), 0))
        assert m[name]["torch_logsumexp"] == want
        assert len(m[name]["orders"]) == 4
        for label, r in m[name]["orders"].items():
            assert r["abs_diff"] == abs(r["lse"] - want)
            assert r["abs_diff"] < tol, (name, label)
    # an independent float64 value: numpy's logaddexp over the chunks
    bounds = np.cumsum([0] + m["chunk_sizes"])
    parts = [np.logaddexp.reduce(x[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]
    assert abs(np.logaddexp.reduce(parts) - m["float64"]["orders"]["7 uneven chunks"]["lse"]) < 1e-13
    assert m["float64"]["max_abs_diff"] < 1e-14  # the lecture: 3.6e-15
    assert 1e-7 < m["float32"]["max_abs_diff"] < 1e-4  # float32: order shows in the last digits (7.6e-6)
    assert f"{m['float32']['max_abs_diff']:.1e}" in text


def test_online_attention_row(demo):
    res, text, _ = demo
    r = res["online_attention"]
    q, k, v = (torch.tensor(r[n], dtype=torch.float64) for n in ("q", "k", "v"))
    s = k @ q / math.sqrt(q.numel())
    nb = len(r["steps"])
    assert nb == 4 and q.numel() == 2
    per = len(s) // nb
    m_prev = -math.inf
    for b, step in enumerate(r["steps"]):
        seen = s[: (b + 1) * per]
        m = seen.max().item()
        w = torch.exp(seen - m)
        assert step["m"] == pytest.approx(m, abs=1e-15)
        assert step["l"] == pytest.approx(w.sum().item(), abs=1e-14)
        np.testing.assert_allclose(step["o"], (w @ v[: (b + 1) * per]).numpy(), atol=1e-14)
        if b > 0:
            assert step["rescale"] == pytest.approx(math.exp(m_prev - m), abs=1e-15)
            assert step["max_grew"] == (m > m_prev)
        m_prev = m
    want = (torch.softmax(s, 0) @ v).numpy()
    np.testing.assert_allclose(r["out"], want, atol=1e-15)
    np.testing.assert_allclose(r["reference"], want, atol=1e-15)
    assert r["max_abs_diff"] < 1e-15
    assert r["max_grew_at"] == [b + 1 for b, st in enumerate(r["steps"]) if st["max_grew"]]
    assert r["max_grew_at"], "the example row should show a rescale, as the lecture's does"
    assert f"max |Δ| = {r['max_abs_diff']:.1e}" in text


def test_script_wrapper_runs_demo_2(monkeypatch, tmp_path):
    import runpy
    from pathlib import Path

    import attnlab.demos as demos

    called = []
    monkeypatch.setattr(demos, "run_demo", lambda n, **kw: called.append(n))
    runpy.run_path(str(Path(__file__).parents[2] / "scripts" / "02_softmax.py"), run_name="__main__")
    assert called == [2]
