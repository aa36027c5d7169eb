"""benchmarks/bwd_l2_sim.py: the programs it schedules are the kernel's, its LRU counts what it should at the two
extremes, and the numbers the Gluon backward's ``L2_CHUNKS`` comment quotes are the model's."""

from __future__ import annotations

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
    if order in ("table", "hfirst"):  # (512 programs: heads first, below 8 waves)
        assert progs == heads_first
    if order == "l2":
        chunk = gb.l2_chunk(8, 4, N, N, D, 132)
        assert chunk == 2 and progs == [(u * 4, 4, n) for c in (0, 2, 4, 6) for n in range(64) for u in (c, c + 1)]


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
    and 128, the library's numbering against the candidate's."""
    rows = sim.run(GQA_ROWS, (64, 128), ("table", "l2"))
    table = [r for r in rows if r["order"] == "table"]
    cand = [r for r in rows if r["order"] == "l2"]
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
