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


def test_docs_model_quotes_what_the_demos_return(cached, tmp_path):
    """docs/model.md's probe paragraph and its list of what demos 01, 04 and 05 print: every figure is the demos' own
    return value on the session's trained model, formatted as the text has it."""
    doc = " ".join((ROOT / "docs" / "model.md").read_text().split())
    o1 = demo01.run(out_dir=tmp_path, console=_console())
    acc, roles, ab = o1["accuracy"], o1["roles"], o1["ablation"]
    owner, lookup = roles["owner"], roles["lookup"]

    def pct(x, d=0):
        return f"{100 * x:.{d}f}%"

    def head(x):
        return f"L{x['layer']}H{x['head']}"

    assert (f"owner **{head(owner)} {pct(owner['weight'])}**; lookup **{head(lookup[0])} {pct(lookup[0]['weight'])}**, "
            + ", ".join(f"{head(x)} {pct(x['weight'])}" for x in lookup[1:])) in doc
    heads = ab["heads"]
    worst = sorted(heads, key=heads.get)
    roles_named = [head(owner), head(lookup[0]), head(lookup[1])]
    assert worst[:3] == sorted(roles_named, key=heads.get)
    assert (f"owner → {pct(heads[head(owner)], 1)}, {head(lookup[0])} → {pct(heads[head(lookup[0])], 1)}, "
            f"{head(lookup[1])} → {pct(heads[head(lookup[1])], 1)}, the next worst {worst[3]} → "
            f"{pct(heads[worst[3]], 1)}; {ab['heads_above_99']} of 8 heads can go with accuracy ≥ 99%") in doc
    second = sorted(((s, h) for h, s in enumerate(roles["scores"]["owner"][owner["layer"]]) if h != owner["head"]))[-1]
    assert f"over {head(owner)} and L{owner['layer']}H{second[1]} ({pct(second[0])})" in doc
    assert (f"**01** — {pct(acc['test_accuracy'], 1)} test accuracy on {acc['answers']:,} answers vs "
            f"{pct(acc['baseline'], 1)} baseline") in doc
    rows = {r["seq"]: r for r in o1["flops_7b"]["rows"]}
    r32 = rows[32768]
    assert (f"attention {pct(rows[1024]['attention_share'], 1)} of FLOPs at 1K, {pct(rows[131072]['attention_share'], 1)}"
            f" at 128K; at 32K S is {r32['scores_bytes'] / 2**30:.0f} GiB, {pct(r32['scores_share_of_memory'])} of HBM, "
            f"{r32['traffic_time'] * 1e3:.0f} ms of traffic vs {r32['math_time'] * 1e3:.0f} ms of matmul") in doc

    o4 = demo04.run(console=_console())
    # rounding errors: their bounds (the figures themselves move with the thread count and the machine)
    assert max(e for errs in o4["backward"].values() for e in errs.values()) < 1e-14 and o4["d_identity"]["max_diff"] < 1e-14
    assert "max |ΔdQ|, |ΔdK|, |ΔdV| below 1e-14, causal or not" in doc and "D_i identity to below 1e-14" in doc
    at = o4["atomics"]
    assert f"`IOStats` {at['counted']:,} = {at['kv_blocks']} × 300 × 32 = the cost model" in doc
    b = o4["cost"]["backward"]
    assert f"(+{100 * (b['flops_ratio'] - 1):.0f}% FLOPs, 1/{b['traffic_ratio']:.0f} traffic, {b['speedup']:.1f}×)" in doc
    tr = o4["training"]
    few, one = tr["blocks"][8], tr["blocks"][tr["seq"]]
    assert (f"({few['blocks']} and {one['blocks']} blocks per {tr['seq']}-token input, counted by `IOStats`: "
            f"{few['pairs_computed']}/{few['pairs_skipped']} and {one['pairs_computed']}/{one['pairs_skipped']} block "
            "pairs computed/skipped): max loss difference below 1e-6 and max parameter difference below 1e-5 for both") \
        in doc
    assert max(r["max_loss_diff"] for r in (few, one)) < 1e-6 and max(r["max_param_diff"] for r in (few, one)) < 1e-5
    assert 0 < few["max_param_diff_vs_one_block"] < 1e-5 and "differs from the one-block run by a rounding error" in doc

    o5 = demo05.run(console=_console())
    kv, pd = o5["kv_cache"], o5["prefill_decode"]
    assert (f"{kv['prompts']} prompts ({kv['avg_prompt_tokens']:.1f} tokens on average), {kv['new_tokens']} new tokens: "
            f"{kv['identical']}/{kv['prompts']} identical with and without the cache, max logit difference "
            f"below 1e-5 (float32 rounding); {kv['token_forwards_uncached']:,} vs {kv['token_forwards_cached']:,} "
            f"token-forwards: {kv['compute_ratio']:.1f}× less compute; with the start-position bug "
            f"{kv['bug_identical']}/{kv['prompts']} identical") in doc
    assert 0 < kv["max_logit_diff"] < 1e-5
    decode = [r for r in pd["rows"] if r["phase"] == "decode"]
    assert (f"costs {pd['decode_vs_prefill_per_token']:.0f}× a prefill token; attention "
            f"{pct(decode[0]['attention_share'])} → {pct(decode[-1]['attention_share'])} of a decode step from batch "
            f"{decode[0]['batch']} to {decode[-1]['batch']}); 7B KV cache {pd['kv_bytes_per_token'] / 2**20:.1f} MiB per "
            f"token, {pd['kv_bytes_b128_2k'] / 2**30:.0f} GiB at batch 128 × 2,048") in doc
    assert all(o5["flash_decode"][s]["identical"] == 60 for s in (2, 4, 7)) and "2, 4 and 7 splits: 60/60" in doc
    t = {(r["seq"], r["splits"]): r["time"] for r in o5["splits"]["rows"]}
    assert f"(32K: 4 splits {t[32768, 4] * 1e6:.0f} µs, 5 splits {t[32768, 5] * 1e6:.0f} µs)" in doc
    assert (f"with vs without the cache: **{kv['bug_identical']}/{kv['prompts']}** identical (max logit difference "
            f"{kv['bug_max_logit_diff']:.1f}; demo 05)") in doc
