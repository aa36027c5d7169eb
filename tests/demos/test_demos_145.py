"""Demos 01, 04 and 05 run on the session's trained model (trained once into a temporary cache by
the conftest fixture ``trained_cache``) and return numbers that agree with the library that computed
them."""

import io
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from rich.console import Console

from attnlab import cost
from attnlab.demos import demo01, demo04, demo05
from attnlab.model import LikesWorld, baseline_accuracy, get_model, head_roles
from attnlab.model.train import cpu_threads

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def cached(monkeypatch, trained_cache):
    folder, _ = trained_cache
    monkeypatch.setenv("ATTNLAB_CACHE", folder)
    return folder


def _console():
    return Console(file=io.StringIO(), width=200)


def test_demo01(cached, tmp_path):
    con = _console()
    t0 = time.perf_counter()
    out = demo01.run(out_dir=tmp_path, console=con)
    print(f"demo 01 in {time.perf_counter() - t0:.1f} s")
    text = con.file.getvalue()
    acc = out["accuracy"]
    assert acc["test_accuracy"] == 1.0 and "100.0%" in text
    test = LikesWorld().test_set(acc["test_sequences"])
    assert acc["baseline"] == pytest.approx(baseline_accuracy(test), abs=1e-12)
    assert acc["answers"] == 2 * acc["test_sequences"]
    # the roles it printed are the ones the probe finds
    tm = get_model(progress=False)
    with cpu_threads():
        roles = head_roles(tm.model, LikesWorld().test_set(demo01.PROBE_SEQUENCES, seed=7))
    o = out["roles"]["owner"]
    assert (o["layer"], o["head"]) == roles.owner[:2] and o["weight"] == pytest.approx(roles.owner[2], abs=1e-6)
    assert [(x["layer"], x["head"]) for x in out["roles"]["lookup"]] == [r[:2] for r in roles.lookup]
    assert f"L{o['layer']}H{o['head']}" in text
    ab = out["ablation"]
    assert len(ab["heads"]) == 8 and ab["full"] == 1.0
    assert ab["heads"][f"L{o['layer']}H{o['head']}"] < 0.95
    assert [Path(p).name for p in out["roles"]["plots"]] == ["demo01_owner_and_lookup_heads.png"]
    for p in out["roles"]["plots"]:
        assert Path(p).parent == tmp_path and Path(p).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = out["flops_7b"]["rows"]
    assert rows == [r.to_dict() for r in cost.layer_flops_table()]
    assert rows[-1]["attention_share"] == pytest.approx(0.73, abs=0.01)  # §3.1: 73% at 128K


def test_demo04():
    con = _console()
    t0 = time.perf_counter()
    out = demo04.run(console=con)
    print(f"demo 04 in {time.perf_counter() - t0:.1f} s")
    text = con.file.getvalue()
    for mask in ("none", "causal"):
        assert max(out["backward"][mask].values()) < 1e-13  # the lecture: <= 5.3e-15
    assert out["d_identity"]["max_diff"] < 1e-13
    at = out["atomics"]
    assert at["counted"] == at["formula"] == at["cost_model"] == 67_200
    b = out["cost"]["backward"]
    assert b["flops_ratio"] == pytest.approx(1.25, abs=0.01)
    assert round(b["traffic_ratio"]) == 29 and round(b["speedup"], 1) == 3.3  # §7.5
    assert [r["gpu"] for r in out["cost"]["recompute"] if r["recompute_cheaper"]] == ["V100", "A100", "H100", "B200"]
    tr = out["training"]
    print(tr)
    assert tr["loss_last"] < tr["loss_first"]
    # the sequences the run saw: LikesWorld inputs (a sequence less its last token), the longest first
    assert tr["seq"] == LikesWorld().max_len - 1 and tr["seq_min"] <= tr["seq"]
    assert sorted(tr["blocks"]) == sorted({*demo04.TRAIN_BLOCKS, tr["seq"]})
    for block, r in tr["blocks"].items():
        T = math.ceil(tr["seq"] / block)
        assert r["blocks"] == T  # counted by IOStats in the blockwise forward
        assert (r["pairs_computed"], r["pairs_skipped"]) == (T * (T + 1) // 2, T * (T - 1) // 2)
        assert f"{r['max_loss_diff']:.1e}" in text and f"{r['max_param_diff']:.1e}" in text
        # float32 rounding, not a different model
        assert r["max_loss_diff"] < 1e-4 and r["max_param_diff"] < 1e-4
    assert tr["blocks"][tr["seq"]]["max_param_diff_vs_one_block"] == 0.0
    # several blocks per sequence round differently from one block: the block size reached the run
    for block in demo04.TRAIN_BLOCKS:
        assert tr["blocks"][block]["blocks"] > 1 and tr["blocks"][block]["max_param_diff_vs_one_block"] > 0


def test_demo05(cached):
    con = _console()
    t0 = time.perf_counter()
    out = demo05.run(console=con)
    print(f"demo 05 in {time.perf_counter() - t0:.1f} s")
    kv = out["kv_cache"]
    print(kv)
    assert kv["prompts"] == 60 and kv["identical"] == 60 and kv["max_logit_diff"] < 1e-3
    # compute saved = ratio of token-forwards: Σ(n + t) for t < 8 versus n + 7 per prompt
    prompts = LikesWorld().prompts(60)
    assert kv["token_forwards_uncached"] == sum(8 * len(p) + 28 for p in prompts)
    assert kv["token_forwards_cached"] == sum(len(p) + 7 for p in prompts)
    assert kv["compute_ratio"] == pytest.approx(6.9, abs=0.3)  # §8.2: 19-token prompts, 8 tokens
    assert kv["bug_identical"] < 60  # the injected bug is caught
    for S in demo05.SPLITS:
        assert out["flash_decode"][S]["identical"] == 60
    assert out["prefill_decode"]["rows"] == [r.to_dict() for r in cost.prefill_decode_table()]
    assert out["prefill_decode"]["kv_bytes_per_token"] == 2**19  # 0.5 MiB (§8.2)
    assert out["splits"]["rows"] == [r.to_dict() for r in cost.decode_split_table()]


def test_script_is_a_thin_wrapper_and_runs(cached, tmp_path):
    for name, n in (("01_attention.py", 1), ("04_backward.py", 4), ("05_inference.py", 5)):
        src = (ROOT / "scripts" / name).read_text()
        assert f"run_demo({n})" in src and len(src.splitlines()) < 10
    env = dict(os.environ, ATTNLAB_CACHE=cached)
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "05_inference.py")], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=300)
    print(f"python scripts/05_inference.py: {time.perf_counter() - t0:.1f} s (the lecture: <= 6 s once cached; "
          f"{torch.get_num_threads()} torch threads here)")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "60/60" in r.stdout and "training" not in r.stdout.lower()
