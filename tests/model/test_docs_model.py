"""docs/model.md's and the README's model figures that need no trained model: the recipe's settings as the code has
them, the baselines from the data and their closed forms, the parameter count, and the "plan vs actual" trainings
as benchmarks/plan_vs_actual.py recorded them (benchmarks/data/plan-vs-actual-cpu.json, whose settings are the
script's own); and the script itself on a few steps. (What the demos print is checked in
tests/demos/test_demos_145.py, on a trained model.)"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict
from fractions import Fraction

from tests.helpers import ROOT, doc_text, load_script

from attnlab.model import LikesWorld, ModelConfig, Transformer, baseline_accuracy
from attnlab.model.train import TrainConfig

pva = load_script("benchmarks/plan_vs_actual.py")
DATA = ROOT / "benchmarks" / "data" / "plan-vs-actual-cpu.json"


def _rows() -> dict:
    return {r["arm"]: r for r in json.loads(DATA.read_text())["rows"]}


def _pct(x, d=0) -> str:
    return f"{100 * x:.{d}f}%"


def test_the_recipe_as_the_code_has_it():
    doc, readme = doc_text("docs/model.md"), " ".join((ROOT / "README.md").read_text().split())
    tc, mc = TrainConfig(), ModelConfig.from_name("likesworld")
    assert tc.lr == 2e-3 and (f"lr 2e-3 with {tc.warmup} warm-up steps and cosine decay to {_pct(tc.min_lr_ratio)}, batch "
            f"{tc.batch_size}, gradient clip {tc.grad_clip:g}, next-token cross-entropy on every token with the answers "
            f"weighted {tc.answer_weight:g}×, {tc.steps:,} steps") in doc
    assert f"weight decay {tc.weight_decay:g} on matrices" in doc
    assert (f"at step {tc.check_step} an attempt whose validation accuracy (training-split worlds, never the test set) is "
            f"below {_pct(tc.check_accuracy)} is restarted from seed + 1000; at most {tc.max_attempts} attempts") in doc
    assert (f"answers weighted {tc.answer_weight:g}×, and a run whose validation accuracy is still under "
            f"{_pct(tc.check_accuracy)} at step {tc.check_step} restarts from the next seed (up to {tc.max_attempts} "
            "attempts;") in readme
    params = sum(p.numel() for p in Transformer(mc).parameters())
    assert f"**{params:,} parameters**" in doc
    assert (f"d_model {mc.d_model}, {mc.n_layers} layers, {mc.n_heads} heads × {mc.head_dim}, SwiGLU {mc.d_ff}, RoPE "
            f"(θ = {mc.rope_theta:,.0f})") in doc


def test_the_baselines_and_their_closed_forms():
    doc = doc_text("docs/model.md")
    tc = TrainConfig()
    test = LikesWorld().test_set(tc.test_size)
    counts = range(tc.min_facts, tc.max_facts + 1)
    first = sum(Fraction(1, n) for n in counts) / len(counts)  # a random item of n
    second = sum(Fraction(1, n - 1) for n in counts) / len(counts)  # a random item not asked yet
    assert (f"**{_pct(baseline_accuracy(test), 1)}** on the {tc.test_size:,}-sequence test set (the expectation for n "
            f"uniform in {counts[0]}..{counts[-1]} is {_pct(float(first), 1)})") in doc
    assert (f"its expected accuracy is ({_pct(float(first), 1)} + {_pct(float(second), 1)})/2 = "
            f"{_pct(float(first + second) / 2, 1)}") in doc


def test_the_recorded_trainings_are_the_scripts_settings():
    rows = _rows()
    assert list(rows) == list(pva.ARMS)
    for arm, r in rows.items():
        mc, tc = pva.configs(arm, 1000)
        assert r["model"] == json.loads(json.dumps(asdict(mc))) and r["train"] == json.loads(json.dumps(asdict(tc)))
        assert [h["step"] for h in r["history"]] == list(range(tc.eval_every, tc.steps + 1, tc.eval_every))


def test_docs_quote_the_recorded_trainings():
    doc, readme = doc_text("docs/model.md"), " ".join((ROOT / "README.md").read_text().split())
    rows = _rows()
    val = {arm: {h["step"]: h["val_accuracy"] for h in r["history"]} for arm, r in rows.items()}
    d, gap, learned, nob = rows["default"], rows["gap"], rows["learned"], rows["no-bias"]
    assert (f"the default model reached **{_pct(d['test_accuracy'], 1)}** test accuracy, the validation accuracy jumping "
            f"from {_pct(val['default'][300])} at step 300 to {_pct(val['default'][400])} at step 400; on "
            f"{d['fresh_test']['answers']:,} fresh test-world answers it made {d['fresh_test']['errors']} errors, and "
            f"{d['fresh_train']['errors']} in {d['fresh_train']['answers']:,} fresh training-world answers") in doc
    assert (f"**{_pct(gap['test_accuracy'], 1)}** test accuracy (validation "
            + " → ".join(_pct(val["gap"][s]) for s in (100, 300, 500, 700, 900))
            + f" at steps 100/300/500/700/900), against {_pct(d['test_accuracy'])} for the adjacent format") in doc
    assert f"its owner weight stays at {_pct(gap['owner_layer0'])}" in doc
    assert f"(`--positions learned`): **{_pct(learned['test_accuracy'], 1)}**, same plateau" in doc
    assert (f"without biases, seed 0 reached **{_pct(nob['test_accuracy'], 1)}** in 1,000 steps (owner weight "
            f"{_pct(nob['owner_layer0'])}, against {_pct(d['owner_layer0'])} with them)") in doc
    assert f"plateaus at about {_pct(gap['test_accuracy'])}" in readme and f"reaches {_pct(d['test_accuracy'])}" in readme
    # the plateau sits at the heuristic's level, not at the random-item baseline
    assert abs(gap["test_accuracy"] - 0.373) < 0.02 and abs(learned["test_accuracy"] - 0.373) < 0.02


def test_the_script_runs_and_keeps_an_existing_file(tmp_path):
    script = ROOT / "benchmarks" / "plan_vs_actual.py"
    kept = tmp_path / "mine.json"
    kept.write_text("mine")
    r = subprocess.run([sys.executable, str(script), "--json", str(kept)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "exists" in r.stderr and kept.read_text() == "mine"
    out = tmp_path / "sub" / "pva.json"
    r = subprocess.run([sys.executable, str(script), "--steps", "3", "--arms", "default", "gap", "--fresh", "10",
                        "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = json.loads(out.read_text())["rows"]
    assert [x["arm"] for x in rows] == ["default", "gap"] and rows[1]["train"]["question_format"] == "gap"
    assert rows[0]["fresh_test"]["sequences"] == 10 and "fresh_test" not in rows[1]
    assert r.stdout == pva.markdown(rows)
