"""benchmarks/bwd_l2_sim.py: the programs it schedules are the kernel's, its LRU counts what it should at the two
extremes, and the numbers the Gluon backward's ``L2_CHUNKS`` comment quotes are the model's."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest
from tests.helpers import ROOT, load_script

from attnlab.gpu import prefill_gluon_bwd as gb

sim = load_script("benchmarks/bwd_l2_sim.py")
GQA_ROWS = ("gqa-4k", "gqa-8k", "gqa-16k")  # (the prefill table's GQA rows)


@pytest.mark.parametrize("order", sim.ORDERS)
def test_every_program_once_in_the_orders_numbering(order):
    B, H, Hkv, N, D = 2, 16, 4, 8192, 128
    progs = sim.programs(B, H, Hkv, N, D, order)
    split = {"kv2": 2, "kv4": 4}.get(order, 1)
    per = (H // Hkv) // split
    assert Counter(progs) == Counter((u * per, per, n) for u in range(B * Hkv * split) for n in range(N // 128))
    heads_first = [(u * 4, 4, n) for n in range(64) for u in range(8)]
    if order in ("nol2", "hfirst"):  # (512 programs: heads first, below 8 waves)
        assert progs == heads_first
    if order in ("table", "l2"):  # (GQA: the library's numbering is L2_CHUNKS')
        chunk = gb.l2_chunk(8, 4, N, N, D, 132)
        assert chunk == 2 and progs == [(u * 4, 4, n) for c in (0, 2, 4, 6) for n in range(64) for u in (c, c + 1)]


@pytest.mark.parametrize("D", [64, 128])
def test_a_multi_head_call_numbered_heads_first_keeps_it_in_the_table(D):
    """One multi-head 4K sequence (``causal1``: 1,024 or 512 programs, heads first): the library's numbering is the one
    before ``L2_CHUNKS`` (GQA calls only), ``l2`` takes chunks there too; GQA rows: the table is ``l2``."""
    B, H, Hkv, N = sim.SHAPES["causal1"]
    h = H * 64 // D
    table, nol2, l2 = (sim.programs(B, h, h, N, D, o) for o in ("table", "nol2", "l2"))
    assert table == nol2 == sim.programs(B, h, h, N, D, "hfirst") and l2 != table
    assert gb.l2_chunk(B * h, 1, N, N, D, 132) is not None
    B, H, Hkv, N = sim.SHAPES["gqa-8k"]
    h, hkv = H * 64 // D, Hkv * 64 // D
    assert sim.programs(B, h, hkv, N, D, "table") == sim.programs(B, h, hkv, N, D, "l2") != \
        sim.programs(B, h, hkv, N, D, "nol2")


def test_walks_start_at_the_diagonal_and_rotate():
    steps = list(sim.walk(8, 2, 3, 1024))  # key block 3 of 1K: query blocks 6..15, from 6 + 3 mod 10, two heads
    assert steps == [(h, 6 + (i + 3) % 10) for h in (8, 9) for i in range(10)]


def test_the_lru_at_its_two_extremes():
    B, H, Hkv, N, D = 1, 4, 1, 1024, 64
    big = sim.simulate(B, H, Hkv, N, D, "kf1", l2_bytes=1 << 40)
    assert big["over_once"] == pytest.approx(1.0) and big["steps"] == 4 * sum(16 - 2 * n for n in range(8))
    tiny = sim.simulate(B, H, Hkv, N, D, "kf1", l2_bytes=1)  # every touch a miss; every dQ tile written back
    qb, dqb = 64 * D * 2, 64 * D * 4
    kv = tiny["programs"] * 2 * 128 * D * 2
    assert tiny["hbm_gb"] * 1e9 == pytest.approx(tiny["steps"] * (2 * qb + 2 * dqb) + kv)


def test_the_comments_numbers_are_the_models():
    """``prefill_gluon_bwd``'s L2_CHUNKS comment: the prefill table's GQA rows (and the bwd-block-m 8K row) at D = 64
    and 128, the numbering before ``L2_CHUNKS`` against the library's."""
    rows = sim.run(GQA_ROWS, (64, 128), ("nol2", "table"))
    table = [r for r in rows if r["order"] == "nol2"]
    cand = [r for r in rows if r["order"] == "table"]
    worse = max(c["balance"] - t["balance"] for t, c in zip(table, cand))
    text = " ".join((ROOT / "src" / "attnlab" / "gpu" / "prefill_gluon_bwd.py").read_text().replace("#", " ").split())
    m = re.search(r"move ([\d.]+)-([\d.]+)x the bytes of reading each Q, dO and dQ tile once, against ([\d.]+)-([\d.]+)x "
                  r"in such chunks, at a balance at most ([\d.]+) % worse", text)
    assert m, "the L2_CHUNKS comment no longer quotes the model"
    lo, hi, clo, chi, pct = map(float, m.groups())
    assert (lo, hi) == (round(min(r["over_once"] for r in table), 1), round(max(r["over_once"] for r in table)))
    assert (clo, chi) == (round(min(r["over_once"] for r in cand), 1), round(max(r["over_once"] for r in cand), 1))
    assert pct == round(100 * worse, 1)
    assert all(gb.l2_chunk(r["B"] * r["Hkv"], r["H"] // r["Hkv"], r["N"], r["N"], r["D"], 132) is not None
               for r in cand)
    mha = sim.run(("causal8k",), (64, 128), ("table", "l2"))
    assert [r["hbm_gb"] for r in mha[::2]] == [r["hbm_gb"] for r in mha[1::2]]  # (multi-head: the same numbering)


def test_the_fit_recovers_a_planted_cost_and_the_prediction_applies_it():
    """``fit``: times made as T0 · balance + β · GB from the model's own balance and bytes (a 6 MB L2, V100's, so that
    small shapes miss) give back β; GQA rows are listed, not fitted. ``predict``: a prefill run's causal GQA row's
    backward (forward+backward less forward) in the candidate numbering by the same formula."""
    beta, shapes = 0.2, [(2, 8, 8, 64, 4096), (1, 16, 16, 64, 4096), (1, 8, 2, 64, 4096)]
    rows = []
    for B, H, Hkv, D, N in shapes:
        for variant, order, t0 in (("table's, heads first", "hfirst", 1.0), ("table's, key blocks first", "kf1", 1.0)):
            r = sim.simulate(B, H, Hkv, N, D, order, 6 << 20)
            rows.append(dict(B=B, H=H, Hkv=Hkv, D=D, N=N, causal=True, variant=variant,
                             ms=t0 * r["balance"] + beta * r["hbm_gb"]))
    fitted = sim.fit(rows, gpu="V100")
    assert len(fitted["rows"]) == 3 and fitted["beta_ms_per_gb"] == pytest.approx(beta)
    assert [r["beta_ms_per_gb"] for r in fitted["rows"] if r["H"] != r["Hkv"]] == [pytest.approx(beta)]
    B, H, Hkv, N, D = 1, 8, 2, 4096, 64
    prefill = [dict(D=D, N=N, B=B, H=H, Hkv=Hkv, causal=True, provider="attnlab", pass_=p, ms=ms)
               for p, ms in (("fwd", 0.5), ("fwd_bwd", 2.0))]
    prefill += [dict(prefill[0], causal=False), dict(prefill[1], provider="sdpa-cudnn")]  # (not predicted)
    (p,) = sim.predict(prefill, beta, gpu="V100")
    t, c = sim.simulate(B, H, Hkv, N, D, "nol2", 6 << 20), sim.simulate(B, H, Hkv, N, D, "table", 6 << 20)
    assert t["hbm_gb"] != c["hbm_gb"]  # (the two numberings differ at this shape)
    t0 = (1.5 - beta * t["hbm_gb"]) / t["balance"]
    assert p["bwd_ms"] == 1.5 and p["predicted_ms"] == pytest.approx(t0 * c["balance"] + beta * c["hbm_gb"])
    assert p["predicted_fwd_bwd_ms"] == pytest.approx(0.5 + p["predicted_ms"])


def test_command_line_refusals(tmp_path, capsys):
    for argv in (["--predict", "x.json"], ["--fit", str(tmp_path / "missing.json")], ["--rows", "nope"]):
        with pytest.raises(SystemExit) as e:
            sim.main(argv)
        assert e.value.code == 2
    kept = tmp_path / "out.json"
    kept.write_text("mine")
    with pytest.raises(SystemExit):
        sim.main(["--rows", "causal", "--json", str(kept)])
    assert kept.read_text() == "mine"
    capsys.readouterr()
    assert sim.main(["--rows", "gqa-4k", "--D", "64", "--orders", "table", "l2"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("| row | D | order | programs | balance |") and len(out) == 4


def test_predictions_come_once_per_positive_fit(tmp_path, capsys, monkeypatch):
    """``--fit-chunks`` and ``--predict``: a fit with no positive β (a run without traffic-heavy arms) says so and
    predicts nothing; a positive one predicts the prefill run's causal GQA rows."""
    runs = tmp_path / "arms.json"
    runs.write_text(json.dumps({"rows": []}))
    table = tmp_path / "table.json"
    table.write_text(json.dumps({"rows": [dict(D=64, N=4096, B=1, H=8, Hkv=2, causal=True, provider="attnlab",
                                               pass_=p, ms=ms) for p, ms in (("fwd", 0.5), ("fwd_bwd", 2.0))]}))
    for beta, said in ((-0.1, "no positive β fitted"), (0.05, "With β = 50.0 µs a GB (arms.json)")):
        monkeypatch.setattr(sim, "fit_chunks", lambda rows, gpu, b=beta: dict(beta_ms_per_gb=b, points=[]))
        monkeypatch.setattr(sim, "predict", lambda rows, b, gpu: [dict(D=64, B=1, H=8, Hkv=2, N=4096, bwd_ms=1.5,
                                                                       predicted_ms=1.4, speedup=1.5 / 1.4,
                                                                       fwd_bwd_ms=2.0, predicted_fwd_bwd_ms=1.9,
                                                                       fwd_bwd_speedup=2.0 / 1.9)])
        capsys.readouterr()
        assert sim.main(["--fit-chunks", str(runs), "--predict", str(table)]) == 0
        out = capsys.readouterr().out
        assert said in out and ("| 64 | 1 | 8/2 | 4096 | 1.500 | 1.400 | 1.071 |" in out) == (beta > 0)
    with pytest.raises(SystemExit):
        sim.main(["--fit-chunks", str(tmp_path / "missing.json")])
