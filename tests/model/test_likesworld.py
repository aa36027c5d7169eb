"""LikesWorld data, training from scratch, the trained model's behaviour (accuracy, head roles,
ablation, generation) and the checkpoint cache (corrupt, stale, unwritable, two processes).

Training the real model once is the expensive part (~1 minute on 2 free cores): the session fixture
``trained_cache`` (tests/conftest.py) trains it into a temporary cache on first use and every test of
the session shares that file.
"""

import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from attnlab.model import (
    CheckpointWarning,
    LikesWorld,
    ModelConfig,
    TrainConfig,
    ablation,
    accuracy,
    baseline_accuracy,
    checkpoint_path,
    compare,
    detokenize,
    generate,
    get_model,
    head_roles,
    tokenize,
)
from attnlab.model.likesworld import ITEMS, NAMES, TEST_MODULUS, is_test_world
from attnlab.model.train import cpu_threads


@pytest.fixture(autouse=True)
def _free_cores():
    with cpu_threads():
        yield


# -- the session's trained model (conftest.trained_cache) ---------------------------------------


@pytest.fixture
def trained(monkeypatch, trained_cache):
    folder, _ = trained_cache
    monkeypatch.setenv("ATTNLAB_CACHE", folder)
    tm = get_model(progress=False)
    assert tm.source == "cache"
    return tm


# -- data -----------------------------------------------------------------------------------------


def test_sequences_follow_the_format():
    w = LikesWorld()
    b = w.sample(200, np.random.default_rng(1))
    for row in range(len(b)):
        toks = detokenize(b.tokens[row]).split()
        n = int(b.n_facts[row])
        assert toks[0] == "<bos>" and toks[-1] == "<eos>" and len(toks) == int(b.lengths[row])
        facts = {toks[1 + 4 * i]: toks[3 + 4 * i] for i in range(n)}
        assert all(toks[2 + 4 * i] == "likes" and toks[4 + 4 * i] == "." for i in range(n))
        assert len(facts) == n and len(set(facts.values())) == n  # distinct names and items
        qs = toks[1 + 4 * n : -1]
        assert len(qs) == 8 and qs[0] == qs[4] == "q" and qs[3] == qs[7] == "."
        assert qs[2] == facts[qs[1]] and qs[6] == facts[qs[5]] and qs[1] != qs[5]
        # the answer mask marks exactly the two answers
        ans = torch.nonzero(b.answer_mask[row]).flatten().tolist()
        assert [toks[p] for p in ans] == [qs[2], qs[6]]
    assert set(b.n_facts.tolist()) == {2, 3, 4, 5, 6}


def test_gap_format_puts_two_tokens_between_name_and_answer():
    b = LikesWorld(question_format="gap").sample(20, np.random.default_rng(2))
    for row in range(len(b)):
        toks = detokenize(b.tokens[row]).split()
        for p in torch.nonzero(b.answer_mask[row]).flatten().tolist():
            assert toks[p - 4 : p] == ["q", toks[p - 3], "?", "a"]


def test_probe_positions_point_at_owner_and_item():
    b = LikesWorld().sample(50, np.random.default_rng(3))
    rows, item, name = b.owner_pairs()
    assert all(detokenize([b.tokens[r, i - 1]]) == "likes" for r, i in zip(rows.tolist(), item.tolist()))
    assert torch.equal(item - name, torch.full_like(item, 2))
    qb, qpos, target = b.lookup_triples()
    for r, q, t in zip(qb.tolist(), qpos.tolist(), target.tolist()):
        assert b.tokens[r, q - 1] == tokenize("q")[0]  # the questioned name follows "q"
        assert b.tokens[r, t - 2] == b.tokens[r, q]  # the target item belongs to that name
        assert b.tokens[r, t] == b.tokens[r, q + 1]  # and it is the answer


def test_splits_are_disjoint_and_deterministic():
    w = LikesWorld()
    test = w.test_set(300)
    train = w.sample(3000, np.random.default_rng(4), "train")
    assert all(is_test_world(t) for t in test.tokens)
    assert not any(is_test_world(t) for t in train.tokens)
    facts = lambda b: {tuple(r[: 1 + 4 * int(n)].tolist()) for r, n in zip(b.tokens, b.n_facts)}  # noqa: E731
    assert not facts(test) & facts(train)
    assert torch.equal(w.test_set(300).tokens, test.tokens)
    # one world in TEST_MODULUS is a test world: random fact lists, not drawn through the split filter
    rng = np.random.default_rng(5)
    worlds = []
    for n in rng.integers(2, 7, size=5000).tolist():
        names, items = rng.permutation(NAMES)[:n], rng.permutation(ITEMS)[:n]
        worlds.append(tokenize("<bos> " + " ".join(f"{a} likes {b} ." for a, b in zip(names, items))))
    rate = float(np.mean([is_test_world(t) for t in worlds]))
    assert abs(rate - 1 / TEST_MODULUS) < 0.02
    with pytest.raises(ValueError, match="split"):
        w.sample(3, np.random.default_rng(0), "val")


def test_baseline_is_computed_from_the_context():
    b = LikesWorld().test_set(2000)
    base = baseline_accuracy(b)
    # independently: 1/n for each of the two answers of an n-fact sequence
    expect = np.mean([1 / n for n in b.n_facts.tolist() for _ in range(2)])
    print(f"random-item baseline on the test set: {100 * base:.1f}% (uniform 2..6 facts: "
          f"{100 * np.mean([1 / n for n in range(2, 7)]):.1f}%)")
    assert base == pytest.approx(expect, abs=1e-12)
    assert 0.27 < base < 0.31  # the lecture's 29.2%


def test_world_rejects_bad_settings():
    with pytest.raises(ValueError, match="question_format"):
        LikesWorld(question_format="cloze")
    with pytest.raises(ValueError, match="max_facts"):
        LikesWorld(max_facts=len(NAMES) + 1)
    with pytest.raises(ValueError, match="unknown LikesWorld token"):
        tokenize("eve likes coffee")
    with pytest.raises(ValueError, match="batch_size"):
        LikesWorld().sample(0, np.random.default_rng(0))
    with pytest.raises(TypeError, match="rng"):
        LikesWorld().sample(4, 0)


# -- training and the trained model ----------------------------------------------------------------


def test_training_from_scratch_reaches_100_percent(trained, trained_cache):
    _, seconds = trained_cache
    m = trained.metrics
    print(f"trained from scratch in {seconds:.1f} s ({m['seconds']:.1f} s of training, "
          f"{len(m['attempts'])} attempt(s), {torch.get_num_threads()} thread(s)): "
          f"test accuracy {100 * m['test_accuracy']:.2f}%, baseline {100 * m['baseline']:.1f}%")
    assert m["test_accuracy"] == 1.0
    assert seconds < 900  # a CI-friendly bound, not a speed claim (about a minute on 2 free cores)


def test_cached_model_answers_fresh_held_out_samples(trained):
    w = LikesWorld()
    fresh = w.sample(1000, np.random.default_rng([int(torch.randint(0, 2**31, ())), 7]), "test")
    acc = accuracy(trained.model, fresh)
    print(f"accuracy on 1000 fresh held-out sequences: {100 * acc:.2f}% (baseline {100 * baseline_accuracy(fresh):.1f}%)")
    # 100% on the fixed test set (above); on fresh draws the default model has made no error in
    # 40,000 test answers and one in 40,000 training answers, so allow a stray one here
    assert acc >= 0.999


def test_head_roles_are_found_and_matter(trained):
    b = LikesWorld().test_set(400)
    roles = head_roles(trained.model, b)
    (ol, oh, ow), (ll, lh, lw) = roles.owner, roles.lookup[0]
    print(f"owner head L{ol}H{oh}: {100 * ow:.0f}% on the owner; lookup heads "
          + ", ".join(f"L{l}H{h} {100 * w:.0f}%" for l, h, w in roles.lookup))
    assert ol < ll and ow > 0.5 and lw > 0.5
    ab = ablation(trained.model, b)
    print({f"L{l}H{h}": round(a, 3) for (l, h), a in ab["heads"].items()})
    # knocking out the owner head or the main lookup head hurts more than knocking out any head
    # that has neither role
    others = [a for (l, h), a in ab["heads"].items() if (l, h) != (ol, oh) and (l, h) not in
              {(x, y) for x, y, _ in roles.lookup}]
    assert ab["heads"][(ol, oh)] < min(others) and ab["heads"][(ll, lh)] < min(others)
    assert ab["heads"][(ol, oh)] < 0.97 and ab["heads"][(ll, lh)] < 0.97
    assert ab["full"] == 1.0


def test_generation_cached_equals_uncached_on_trained_model(trained):
    prompts = LikesWorld().prompts(60)
    a = generate(trained.model, prompts, 8, use_cache=True)
    b = generate(trained.model, prompts, 8, use_cache=False)
    c = compare(a, b)
    bug = compare(generate(trained.model, prompts, 8, use_cache=True, buggy_start_pos=True), b)
    print(f"cache: {c['identical']}/60 identical, max logit diff {c['max_logit_diff']:.1e}, "
          f"{c['forward_ratio'] ** -1:.1f}x fewer token-forwards; with the bug: {bug['identical']}/60")
    assert c["identical"] == 60 and c["max_logit_diff"] < 1e-3
    assert bug["max_logit_diff"] > 1e-2  # the same comparison catches the bug
    # the model answers the first question inside generation
    for p, toks in zip(prompts, a.tokens):
        text = detokenize(p).split()
        facts = {text[i]: text[i + 2] for i in range(1, len(text) - 2, 4) if text[i + 1] == "likes"}
        assert detokenize([toks[0]]) == facts[text[-1]]


# -- the checkpoint cache ---------------------------------------------------------------------------

TINY = dict(model_config=ModelConfig.from_name("micro"),
            train_config=TrainConfig(steps=12, test_size=40, eval_every=6, max_attempts=1))


def _no_temp_files(folder: Path):
    return not [p for p in folder.iterdir() if p.suffix in (".tmp", ".lock")]


def test_cache_roundtrip(tmp_cache):
    tm = get_model(**TINY, progress=False)
    assert tm.source == "trained" and tm.path.exists() and tm.path.parent == tmp_cache
    again = get_model(**TINY, progress=False)
    assert again.source == "cache"
    tok = torch.randint(0, 32, (2, 9))
    assert torch.equal(again.model(tok), tm.model(tok))
    sdpa = get_model(**TINY, progress=False, attention="sdpa")
    assert sdpa.source == "cache" and sdpa.model.cfg.attention == "sdpa"
    assert torch.allclose(sdpa.model(tok), tm.model(tok), atol=1e-5)
    assert _no_temp_files(tmp_cache)
    assert checkpoint_path().name == "likesworld.pt"


def test_corrupt_checkpoint_is_retrained_with_one_warning(tmp_cache):
    path = get_model(**TINY, progress=False).path
    path.write_bytes(b"not a checkpoint" * 10)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        tm = get_model(**TINY, progress=False)
    msgs = [str(x.message) for x in w if issubclass(x.category, CheckpointWarning)]
    print(msgs)
    assert len(msgs) == 1 and "cannot be read" in msgs[0]
    assert tm.source == "trained" and get_model(**TINY, progress=False).source == "cache"


def test_truncated_checkpoint_is_retrained(tmp_cache):
    path = get_model(**TINY, progress=False).path
    path.write_bytes(path.read_bytes()[:200])
    with pytest.warns(CheckpointWarning, match="cannot be read"):
        assert get_model(**TINY, progress=False).source == "trained"


def test_stale_checkpoint_is_retrained_with_one_warning(tmp_cache):
    path = get_model(**TINY, progress=False).path
    ckpt = torch.load(path, weights_only=True)
    ckpt["fingerprint"] = "0" * 16  # as if trained by another attnlab version
    torch.save(ckpt, path)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        tm = get_model(**TINY, progress=False)
    msgs = [str(x.message) for x in w if issubclass(x.category, CheckpointWarning)]
    assert len(msgs) == 1 and "stale" in msgs[0]
    assert tm.source == "trained"


def test_unwritable_cache_dir_trains_and_keeps_the_model_in_memory(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("a file where the cache folder should be")
    monkeypatch.setenv("ATTNLAB_CACHE", str(blocker / "cache"))  # cannot be created, even by root
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        tm = get_model(**TINY, progress=False)
        again = get_model(**TINY, progress=False)
    msgs = [str(x.message) for x in w if issubclass(x.category, CheckpointWarning)]
    print(msgs)
    assert len(msgs) == 1 and "cannot write" in msgs[0]
    assert tm.source == "trained" and tm.path is None and again.source == "memory"
    tok = torch.randint(0, 32, (1, 7))
    assert torch.equal(again.model(tok), tm.model(tok))


def test_two_processes_training_at_once_both_end_with_a_model(tmp_cache):
    script = textwrap.dedent("""
        import sys
        from attnlab.model import ModelConfig, TrainConfig, get_model
        tm = get_model(ModelConfig.from_name("micro"), TrainConfig(steps=40, test_size=40, eval_every=20,
                       max_attempts=1), progress=False)
        import torch
        out = tm.model(torch.randint(0, 32, (1, 5)))
        assert torch.isfinite(out).all()
        print(tm.source, tm.path)
    """)
    env = dict(os.environ, ATTNLAB_CACHE=str(tmp_cache), OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outs):
        print(out.strip(), err.strip()[-300:])
        assert p.returncode == 0
    sources = sorted(out.split()[0] for out, _ in outs)
    assert sources in (["cache", "trained"], ["trained", "trained"])
    assert _no_temp_files(tmp_cache)
    assert get_model(**{**TINY, "train_config": TrainConfig(steps=40, test_size=40, eval_every=20, max_attempts=1)},
                     progress=False).source == "cache"


def test_get_model_rejects_bad_arguments(tmp_cache):
    with pytest.raises(TypeError, match="model_config"):
        get_model("likesworld", progress=False)
    with pytest.raises(ValueError, match="steps"):
        TrainConfig(steps=0)


def test_first_use_says_what_it_does_and_shows_progress(tmp_cache):
    from rich.console import Console

    buf = __import__("io").StringIO()
    tm = get_model(**TINY, console=Console(file=buf, width=200))
    text = buf.getvalue()
    print(text)
    assert "training the 2-layer, 4-head model" in text and "training LikesWorld" in text
    assert f"{TINY['train_config'].steps}/{TINY['train_config'].steps}" in text  # the progress bar
    assert f"saved {tm.path}" in text


def test_train_command_and_lesson_flags(tmp_cache, capsys):
    from attnlab.cli import main

    rc = main(["train", "--steps", "3", "--attempts", "1", "--question-format", "gap", "--positions", "learned"])
    out = capsys.readouterr()
    assert rc == 0
    text = " ".join((out.out + out.err).split())
    assert "training the 2-layer, 4-head model for 3 steps" in text and "test accuracy" in text
    files = [p.name for p in tmp_cache.iterdir()]
    assert files == ["likesworld-positions=learned-steps=3-question_format=gap-max_attempts=1.pt"]
    assert main(["train", "--steps", "3", "--attempts", "1", "--question-format", "gap", "--positions", "learned"]) == 0
    assert "using the cached model" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("args,message", [
    (["--seed", "-1"], "--seed must be a non-negative integer, got -1"),
    (["--seed", "1.5"], "--seed must be a non-negative integer, got '1.5'"),
    (["--seed", str(2**40)], "--seed must be at most"),
    (["--steps", "0"], "--steps must be an integer >= 1, got 0"),
    (["--steps", "ten"], "--steps must be an integer >= 1, got 'ten'"),
    (["--attempts", "-3"], "--attempts must be an integer >= 1, got -3"),
])
def test_train_command_rejects_bad_numbers_naming_the_flag(args, message, tmp_cache, capsys):
    """Bad input: one line on stderr that names the flag, exit status 2, nothing trained."""
    from attnlab.cli import main

    assert main(["train", *args]) == 2
    out = capsys.readouterr()
    lines = out.err.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and not out.out
    assert not tmp_cache.exists() or not list(tmp_cache.iterdir())
