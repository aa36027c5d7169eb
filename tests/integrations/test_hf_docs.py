"""The transformers numbers quoted in docs/hf.md and the README are those of the recorded H200 run they
name (benchmarks/data/hf-h200-run10.json): a changed file or a retyped number fails here."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run10():
    return json.loads((ROOT / "benchmarks" / "data" / "hf-h200-run10.json").read_text())


def _row(doc: str, label: str) -> list[str]:
    line = next(ln for ln in doc.splitlines() if ln.startswith(f"| {label} |"))
    return [c.strip() for c in line.strip("|").split("|")[1:]]


def test_docs_table_is_run_10():
    r, doc = _run10(), (ROOT / "docs" / "hf.md").read_text()
    t, lay, gen = r["train"], r["layer"], r["generate"]
    a, s, ratio = _row(doc, "training step (forward, backward, AdamW), 1 × 8,192 tokens")
    assert (a, s) == (f"{t['attnlab']['step_ms']:.1f} ms", f"{t['sdpa']['step_ms']:.1f} ms")
    assert ratio == f"{t['attnlab']['step_ms'] / t['sdpa']['step_ms']:.3f}"
    a, s, _ = _row(doc, "one layer's attention, forward + backward at 8,192")
    assert (a, s) == (f"{lay['attnlab']['train_fwd_bwd_ms']:.2f} ms", f"{lay['sdpa']['train_fwd_bwd_ms']:.2f} ms")
    a, s, _ = _row(doc, "prefill, 1 × 32,768 tokens")
    assert (a, s) == (f"{gen['attnlab']['prefill_ms']:.1f} ms", f"{gen['sdpa']['prefill_ms']:.1f} ms")
    a, s, _ = _row(doc, "decode, batch 1 at 32,768, `generate` (tokens/s)")
    assert (a, s) == (f"{gen['attnlab']['decode_tokens_per_s']:.1f}", f"{gen['sdpa']['decode_tokens_per_s']:.1f}")
    a, s, _ = _row(doc, "one layer's decode step, GPU time")
    assert (a, s) == (f"{lay['attnlab']['decode_step_gpu_us']:.1f} µs", f"{lay['sdpa']['decode_step_gpu_us']:.1f} µs")
    assert r["checks"]["train"]["ok"] and r["checks"]["padded"]["ok"] and r["checks"]["generate"]["ok"]


def test_readme_quotes_run_10():
    r, readme = _run10(), (ROOT / "README.md").read_text()
    t, gen = r["train"], r["generate"]
    text = " ".join(readme.split())
    step = t["attnlab"]["step_ms"] / t["sdpa"]["step_ms"]
    prefill = gen["attnlab"]["prefill_ms"] / gen["sdpa"]["prefill_ms"]
    decode = gen["attnlab"]["decode_tokens_per_s"] / gen["sdpa"]["decode_tokens_per_s"]
    assert re.search(rf"training step at 8K tokens takes {step:.3f}× the time of transformers' SDPA \(hf run 10", text)
    assert f"32K-token prefill {prefill:.3f}×" in text
    assert f"gives {decode:.1f}× SDPA's tokens/s" in text
    # the earlier runs the sentence names beside run 10
    runs = {n: json.loads((ROOT / "benchmarks" / "data" / f"hf-h200-run{n}.json").read_text()) for n in range(2, 10)}
    steps = [runs[n]["train"]["attnlab"]["step_ms"] / runs[n]["train"]["sdpa"]["step_ms"] for n in range(6, 10)]
    assert f"layout; {min(steps):.3f}–{max(steps):.3f}× in runs 6–9)" in text
    tokens = [runs[n]["generate"]["attnlab"]["decode_tokens_per_s"] / runs[n]["generate"]["sdpa"]["decode_tokens_per_s"]
              for n in range(2, 7)]
    assert f"SDPA's tokens/s ({min(tokens):.2f}–{max(tokens):.2f}× in runs 2–6)" in text


def test_step_probe_refuses_what_it_cannot_do(tmp_path):
    """benchmarks/hf_step_probe.py: an existing output file stops it before any work (kept as it was);
    without a GPU it says it needs one."""
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("on a GPU the probe would run")
    script = ROOT / "benchmarks" / "hf_step_probe.py"

    def run(*args):
        return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=300)

    kept = tmp_path / "probe.json"
    kept.write_text("mine")
    r = run("--json", str(kept))
    assert r.returncode == 2 and "exists" in r.stderr and kept.read_text() == "mine"
    r = run("--phases", "pair")
    assert r.returncode == 2 and "needs a CUDA GPU" in r.stderr


def test_docs_later_calls_are_runs_11_to_13():
    runs = {n: json.loads((ROOT / "benchmarks" / "data" / f"hf-h200-run{n}.json").read_text()) for n in (11, 12, 13)}
    doc = " ".join((ROOT / "docs" / "hf.md").read_text().split())
    lay13, lay11 = runs[13]["layer"], runs[11]["layer"]
    a13, s13 = lay13["attnlab"]["decode_step_gpu_us"], lay13["sdpa"]["decode_step_gpu_us"]
    assert (f"one layer's decode step takes {a13:.1f} µs of GPU time against SDPA's {s13:.1f} ({a13 / s13:.2f}×; "
            f"run 11, the fused merge: {lay11['attnlab']['decode_step_gpu_us']:.1f} against "
            f"{lay11['sdpa']['decode_step_gpu_us']:.1f})") in doc
    gen = runs[13]["generate"]
    assert (f"{gen['attnlab']['decode_tokens_per_s']:.1f} against {gen['sdpa']['decode_tokens_per_s']:.1f} "
            "tokens/s in run 13") in doc
    steps = ", ".join(f"{r['train']['attnlab']['step_ms'] / r['train']['sdpa']['step_ms']:.3f}×" for r in runs.values())
    assert f"Training step {steps} SDPA" in doc
    for r in runs.values():
        assert r["checks"]["train"]["ok"] and r["checks"]["padded"]["ok"] and r["checks"]["generate"]["ok"]


def test_docs_backward_calls_are_runs_14_to_16():
    runs = {n: json.loads((ROOT / "benchmarks" / "data" / f"hf-h200-run{n}.json").read_text()) for n in (14, 15, 16)}
    doc = " ".join((ROOT / "docs" / "hf.md").read_text().split())
    step = {n: r["train"]["attnlab"]["step_ms"] / r["train"]["sdpa"]["step_ms"] for n, r in runs.items()}
    assert f"(run 14) the training step took {step[14]:.3f}× SDPA's time" in doc
    assert f"{step[15]:.3f}× (run 15) and {step[16]:.3f}× (run 16)" in doc
    lay = {n: r["layer"] for n, r in runs.items()}
    a, s_ = lay[15]["attnlab"], lay[15]["sdpa"]
    b, t = lay[16]["attnlab"], lay[16]["sdpa"]
    assert (f"One layer's forward + backward {a['train_fwd_bwd_ms']:.2f} against {s_['train_fwd_bwd_ms']:.2f} ms "
            f"(run 15), {b['train_fwd_bwd_ms']:.2f} against {t['train_fwd_bwd_ms']:.2f} (run 16); the model's layout "
            f"{a['train_fwd_bwd_model_layout_ms']:.2f} against {s_['train_fwd_bwd_model_layout_ms']:.2f} and "
            f"{b['train_fwd_bwd_model_layout_ms']:.2f} against {t['train_fwd_bwd_model_layout_ms']:.2f}.") in doc
    pre = [r["generate"]["attnlab"]["prefill_ms"] / r["generate"]["sdpa"]["prefill_ms"] for r in (runs[15], runs[16])]
    assert f"Prefill {pre[0]:.3f}× and {pre[1]:.3f}×." in doc
    for r in runs.values():
        assert r["checks"]["train"]["ok"] and r["checks"]["padded"]["ok"] and r["checks"]["generate"]["ok"]
