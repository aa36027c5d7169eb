"""The A/B runner the forward's switch benchmarks share (benchmarks/ab_rounds.py), on the CPU with fake arms, calls and
clocks: arms in turns each round, medians over the rounds, ratios to the baseline arm, the outputs compared, the
peer's fields, the refusals; and the scripts' command line on recorded runs."""

import contextlib
import dataclasses
import json
from types import SimpleNamespace

import pytest
import torch
from tests.helpers import ROOT, load_script

ab = load_script("benchmarks/ab_rounds.py")
DATA = ROOT / "benchmarks" / "data"


def _fixture(peer_ok=True):
    state = {"arm": None}
    log = []
    clock = {("a", 64): [2.0, 2.2, 1.8], ("b", 64): [1.0, 1.2, 1.1], ("c", 64): [4.0, 4.0, 4.0]}
    ticks = {}

    @contextlib.contextmanager
    def use(arm, D):
        state["arm"] = arm
        log.append(("enter", arm, D))
        yield
        state["arm"] = None

    def row_call(name, D, device):
        def lib():
            x = torch.full((3,), 1.0)
            return (x + (0.5 if state["arm"] == "c" else 0.0), None)  # arm c's output differs by 0.5

        def peer():
            return None

        return lib, 1e9, "peer-x", peer if peer_ok else RuntimeError("refused")

    def time_fn(fn, device):
        key = (state["arm"], 64) if state["arm"] else ("peer", 64)
        i = ticks.get(key, 0)
        ticks[key] = i + 1
        return clock.get(key, [3.0] * 9)[i]

    return use, row_call, time_fn, log


def test_turns_reverse_every_other_round():
    assert [ab.turns(["a", "b", "c"], i) for i in range(3)] == [["a", "b", "c"], ["c", "b", "a"], ["a", "b", "c"]]
    assert ab.turns({"x": 1, "y": 2}, 1) == ["y", "x"]  # (a dict's keys)


def test_measure_takes_turns_and_takes_medians():
    use, row_call, time_fn, log = _fixture()
    rows = ab.measure(["w"], [64], ["a", "b", "c"], use, 3, row_call, time_fn=time_fn, device="cpu")
    assert [e[1] for e in log] == ["a", "b", "c", "c", "b", "a", "a", "b", "c"]  # every arm, in turns either way
    by = {r["build"]: r for r in rows}
    assert by["a"]["ms"] == 2.0 and by["b"]["ms"] == 1.1 and by["c"]["ms"] == 4.0
    assert by["a"]["rounds"] == [2.0, 2.2, 1.8]
    assert by["b"]["vs_first"] == pytest.approx(2.0 / 1.1) and by["a"]["vs_first"] == 1.0
    assert by["b"]["tflops"] == pytest.approx(1e9 / 1.1 / 1e9)
    assert by["a"]["max_diff"] == 0.0 and by["b"]["max_diff"] == 0.0 and by["c"]["max_diff"] == 0.5
    assert all(r["peer"] == "peer-x" and r["peer_ms"] == 3.0 for r in rows)
    assert by["b"]["x_peer"] == pytest.approx(3.0 / 1.1)
    assert ab.line(by["c"]) == "| w | 64 | c | 4.000 | 0 | 0.500 | 0.750× peer-x | 5.0e-01 |"


def test_measure_against_a_named_base_and_bit_identity():
    use, row_call, time_fn, _ = _fixture(peer_ok=False)
    rows = ab.measure(["w"], [64], ["a", "b"], use, 3, row_call, time_fn=time_fn, base="b", compare="identical",
                      arm_key="split", extra=lambda a: {"tag": a * 2}, device="cpu")
    assert [r["split"] for r in rows] == ["a", "b"] and rows[0]["tag"] == "aa"
    assert rows[0]["vs_b"] == pytest.approx(1.1 / 2.0) and rows[1]["vs_b"] == 1.0
    assert all(r["identical"] for r in rows) and "max_diff" not in rows[0]
    assert rows[0]["peer_skipped"] == "RuntimeError: refused" and "x_peer" not in rows[0]
    assert ab.line(rows[0], "split").endswith("| 0.550 | | yes |")
    use, row_call, time_fn, _ = _fixture()
    rows = ab.measure(["w"], [64], ["a", "c"], use, 1, row_call, time_fn=time_fn, compare="identical", device="cpu")
    assert not rows[0]["identical"] and ab.line(rows[0]).endswith("| NO |")


@pytest.mark.parametrize("kw, match", [(dict(arms=[]), "distinct"), (dict(arms=["a", "a"]), "distinct"),
                                       (dict(base="z"), "base"), (dict(compare="bits"), "compare"),
                                       (dict(rounds=0), "rounds")])
def test_measure_refuses_bad_arguments(kw, match):
    use, row_call, time_fn, log = _fixture()
    args = dict(arms=["a", "b"], rounds=1) | kw
    with pytest.raises(ValueError, match=match):
        ab.measure(["w"], [64], args.pop("arms"), use, args.pop("rounds"), row_call, time_fn=time_fn, device="cpu",
                   **args)
    assert log == []  # refused before anything ran


@pytest.mark.parametrize("script, data", [("exp_poly", "exp-poly-h200-run2.json"),
                                          ("row_max", "row-max-h200-run2.json"),
                                          ("fwd_switches", "fwd-switches-h200-run4.json")])
def test_scripts_report_recorded_runs_and_refuse_without_a_gpu(script, data, tmp_path, capsys):
    mod = load_script(f"benchmarks/{script}.py")
    rows = json.loads((DATA / data).read_text())["rows"]
    assert mod.main(["--report", str(DATA / data)]) == 0
    assert capsys.readouterr().out.strip() == mod.report(rows).strip()
    assert len(mod.report(rows).splitlines()) == len(rows) + 2
    with pytest.raises(SystemExit):
        mod.main(["--report", str(tmp_path / "none.json")])
    kept = tmp_path / "kept.json"
    kept.write_text("{}")
    with pytest.raises(SystemExit):
        mod.main(["--json", str(kept)])
    assert kept.read_text() == "{}"
    with pytest.raises(SystemExit):
        mod.main(["--rounds", "0"])
    if not torch.cuda.is_available():
        assert mod.main(["--rounds", "1"]) == 2


def test_bwd_block_m_arms_and_refusals(tmp_path, capsys):
    """``bwd_block_m.py``: its arms are the table's Gluon entry at D = 64 and that entry with 128 query rows (no lag;
    dQ shared or not), or without the lag; it refuses D = 128 (no such build) and runs nothing without a GPU."""
    from attnlab.gpu.config import _GLUON_BWD_64, _GLUON_BWD_64_CAUSAL

    mod = load_script("benchmarks/bwd_block_m.py")
    for causal, g64 in ((True, _GLUON_BWD_64_CAUSAL), (False, _GLUON_BWD_64)):
        assert mod.arm_config("g64", causal) == g64 and g64.block_m1 == 64 and g64.gluon
        for arm, shared in (("g128", False), ("g128s", True)):
            cfg = mod.arm_config(arm, causal)
            assert (cfg.block_m1, cfg.dq_lag, cfg.dq_shared) == (128, 0, shared) and cfg.gluon
        assert mod.arm_config("g64lag0", causal).dq_lag == 0 and mod.arm_config("g64lag1", causal).dq_lag == 1
        assert mod.arm_config("table", causal) is None
    with pytest.raises(SystemExit):
        mod.main(["--D", "128"])
    with pytest.raises(SystemExit):
        mod.main(["--D", "128", "--arms", "table", "g64"])
    for row, n in mod.PACKS.items():  # packed batches of one document length: 16K tokens in whole documents
        assert row in mod.ROWS and 16384 % n == 0
    with pytest.raises(SystemExit):
        mod.main(["--arms", "g64", "g64"])
    # the steps model: documents of 128 at D = 64 are 128 · 32 programs of one key block and two 64-row steps
    assert mod.programs_steps("pack128", 64) == (4096, 8192) and mod.programs_steps("causal", 128) == (2048, 67584)
    for row in ("gqa", "full", "varlen"):  # (not causal documents of one length)
        with pytest.raises((ValueError, KeyError)):
            mod.programs_steps(row, 64)
    rows = [dict(row=row, D=D, arm="table", ms=0.25 + 2e-5 * mod.programs_steps(row, D)[1])  # a made-up line
            for row in ("pack128", "pack2k", "causal") for D in (64, 128)]
    m = mod.steps_model(rows)
    assert m[64]["intercept_ms"] == pytest.approx(0.25) and m[128]["ns_per_step"] == pytest.approx(20.0)
    assert m[64]["pack128_model_ms"] == pytest.approx(m[64]["pack128_ms"])
    assert mod.steps_model(rows[:2]) == {} and "| 64 | 4,096 | 0.250 | 20.0 |" in mod.model_table(m)
    # the persistent arms: the library's own entry for the row's keys, as a persistent build of 1 or 2 K/V pairs
    from attnlab.gpu.config import default_bwd_config

    for D, causal, row in ((64, True, "pack128"), (128, True, "varlen"), (64, False, "full"), (128, True, "long")):
        n = mod.row_keys(row)
        table = default_bwd_config(D, causal, torch.device("cuda"), n)
        for arm, kv in (("p1", 1), ("p2", 2)):
            assert mod.arm_config(arm, causal, D, n) == dataclasses.replace(table, persistent=kv) and table.gluon
    assert mod.row_keys("pack512") == 512 and mod.row_keys("long") == 16384
    assert mod.row_keys("varlen") == max(load_script("benchmarks/variants.py").doc_lengths(16384)) <= 1792
    seen = []

    def fake_measure(rows, Ds, arms, *a, **kw):  # which arms each row and head dim runs
        seen.append((rows[0], Ds[0], tuple(arms)))
        return []

    orig = mod.ab_rounds.measure
    mod.ab_rounds.measure = fake_measure
    try:
        mod.measure(SimpleNamespace(rows=["pack128"], D=[64, 128], arms=["table", "p1", "p2"], rounds=1))
    finally:
        mod.ab_rounds.measure = orig
    assert seen == [("pack128", 64, ("table", "p1", "p2")), ("pack128", 128, ("table", "p1"))]
    # the numbering and K/V split arms: switched while the arm runs, restored after, the library's kept plans dropped
    from attnlab.gpu import prefill_gluon_bwd as gb

    calls, inside, chunks, switches = [], {}, {}, {}

    def recorder(q, k, *a, kv_split=1, **kw):  # (stands in for the Gluon backward the kv arms wrap)
        calls.append(kv_split)

    def arm_measure(rows, Ds, arms, use, *a, **kw):  # enter each arm's switches and look at them
        for arm in arms:
            with use(arm, Ds[0]):
                inside[arm] = (gb.heads_first_default(True, 10, 132), gb.heads_first_default(False, 10, 132),
                               gb.heads_first_default(True, 10 ** 6, 132))
                chunks[arm] = (gb.head_chunk(8, 4, 8192, 8192, 128), gb.HEAD_CHUNK_FROM_D, gb.L2_CHUNKS,
                               gb.L2_CHUNKS_MIN_GROUP)
                q, k = torch.empty(1, 32, 1, 1), torch.empty(1, 8, 1, 1)
                gb.gluon_backward(q, k)
                gb.gluon_backward(q, torch.empty(1, 32, 1, 1))  # (MHA: nothing to split)
                gb.gluon_backward(q, k, kv_split=4)  # (a deterministic call's own split is kept)
                gb.launch_kept("kernel", (3, 4), {"TAIL_LIMIT": 5, "HCHUNK": 2})
                switches[arm] = (gb.TAIL_PIECES, gb.HEAD_CHUNK_MB)
        return []

    order, saved_backward = gb.heads_first_default, gb.gluon_backward
    saved_chunks = (gb.head_chunk, gb.HEAD_CHUNK_FROM_D, gb.L2_CHUNKS, gb.L2_CHUNKS_MIN_GROUP)
    saved_launch, saved_switches = gb.launch_kept, (gb.TAIL_PIECES, gb.HEAD_CHUNK_MB)
    launches = []
    gb.launch_kept = lambda k, grid, a, **kw: launches.append(k)
    gb._PLANS["stale"] = "plan"
    mod.ab_rounds.measure, gb.gluon_backward = arm_measure, recorder
    try:
        capsys.readouterr()
        mod.measure(SimpleNamespace(rows=["gqa-8k"], D=[128], arms=["table", "kfirst", "hfirst", "kv2", "kv4", "kf1",
                                                                    "kf2", "kf4", "l2chunks", "nol2", "whole",
                                                                    "hc16"],
                                    rounds=1))
    finally:
        mod.ab_rounds.measure, gb.gluon_backward, gb.launch_kept = orig, saved_backward, saved_launch
    log = capsys.readouterr().out.splitlines()
    assert "arm whole, row gqa-8k, D = 128: (TAIL_LIMIT, TAIL_F, TAIL_P) ['(5, None, None)']" in log
    assert "arm hc16, row gqa-8k, D = 128: HCHUNK ['2']" in log
    assert "arm kf2, row gqa-8k, D = 128: (grid, HCHUNK) ['((3, 4), 2)']" in log
    assert "arm kv4, row gqa-8k, D = 128: kv_split [1, 4]" in log
    assert launches == ["kernel"] * 12  # (every arm's launch went through to the launcher it found)
    assert switches["whole"] == (False, saved_switches[1]) and switches["hc16"] == (saved_switches[0], 16)
    assert switches["table"] == saved_switches == (gb.TAIL_PIECES, gb.HEAD_CHUNK_MB)
    assert inside["table"] == (True, False, False)  # (the library's: heads first below 8 waves, uneven walks only)
    assert inside["kfirst"] == (False, False, False) and inside["hfirst"] == (True, False, True)
    assert inside["kv2"] == inside["kv4"] == inside["table"]
    assert calls == [1, 1, 4] * 3 + [2, 1, 4] + [4, 1, 4] + [1, 1, 4] * 7
    table_chunks = (saved_chunks[0](8, 4, 8192, 8192, 128), *saved_chunks[1:])
    assert chunks["table"] == chunks["kfirst"] == table_chunks and table_chunks[2:] == (True, 2)
    assert [chunks[f"kf{c}"] for c in (1, 2, 4)] == [(None, 0, True, 2), (2, 0, True, 2), (4, 0, True, 2)]
    assert all(inside[f"kf{c}"] == (False, False, False) for c in (1, 2, 4))
    assert chunks["l2chunks"] == table_chunks[:2] + (True, 1) and inside["l2chunks"] == inside["table"]
    assert chunks["nol2"] == table_chunks[:2] + (False, 2) and inside["nol2"] == inside["table"]
    assert chunks["hfirst"] == table_chunks[:2] + (False, 2)  # (heads first: no L2 chunks either)
    assert (gb.head_chunk, gb.HEAD_CHUNK_FROM_D, gb.L2_CHUNKS, gb.L2_CHUNKS_MIN_GROUP) == saved_chunks
    assert gb.heads_first_default is order and gb.gluon_backward is saved_backward and "stale" not in gb._PLANS
    assert mod.SHAPES["gqa-8k"] == (2, 32, 8, 8192, True) and "gqa-8k" in mod.ROWS
    # the persistent build's deal: in order, with 132 programs and 4 key blocks a document of 512 (walks of 8, 6, 4 and
    # 2 steps), program 0 takes key block 0 in each of its 32 rounds; reversed every other round, 8 + 2 and 6 + 4 pair up
    programs, steps = mod.programs_steps("pack512", 64)
    assert mod.persistent_balance("pack512", 64, snake=False) == pytest.approx(32 * 8 / (steps / 132))
    assert mod.persistent_balance("pack512", 64) < 1.05 < mod.persistent_balance("causal", 128, snake=False)
    assert mod.persistent_balance("pack128", 64, snake=False) == mod.persistent_balance("pack128", 64)
    with pytest.raises((ValueError, KeyError)):
        mod.persistent_balance("varlen", 64)
    if not torch.cuda.is_available():
        assert mod.main(["--rounds", "1"]) == 2
