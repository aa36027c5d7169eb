"""The ring's schedule: over all ranks and steps every visible (query, key) pair of the global
sequence is computed exactly once, in both layouts; zigzag balances the causal work, contiguous
does not."""

import re

import pytest
import torch

from attnlab.distributed import LAYOUTS, chunk_ids, local_positions, ring_schedule, schedule_grid, step_pairs
from attnlab.reference import causal_mask


def _coverage(P, n, causal, layout):
    """How many times each global (query, key) pair is computed, from the schedules of all ranks."""
    N = n * P
    count = torch.zeros(N, N, dtype=torch.int64)
    for r in range(P):
        pos_q = local_positions(seq=N, world_size=P, rank=r, layout=layout)
        for step in ring_schedule(rank=r, world_size=P, local_seq=n, causal=causal, layout=layout):
            assert step.source == (r - step.step) % P
            pos_k = local_positions(seq=N, world_size=P, rank=step.source, layout=layout)
            for b in step.blocks:
                qi, kj = pos_q[b.q0:b.q1], pos_k[b.k0:b.k1]
                pairs = torch.ones(len(qi), len(kj), dtype=torch.int64)
                if b.causal:  # the diagonal block: local rows, query i sees key j <= i
                    assert (b.q0, b.q1) == (b.k0, b.k1) and step.source == r
                    pairs = causal_mask(len(qi), len(kj)).long()
                count[qi[:, None], kj[None, :]] += pairs
    return count


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("P", [1, 2, 3, 4, 5, 8])
def test_every_visible_pair_exactly_once(layout, causal, P):
    n = 6
    count = _coverage(P, n, causal, layout)
    want = causal_mask(n * P, n * P).long() if causal else torch.ones(n * P, n * P, dtype=torch.int64)
    assert torch.equal(count, want)


@pytest.mark.parametrize("P", [2, 3, 4, 8])
def test_zigzag_balances_causal_work_and_contiguous_does_not(P):
    n = 8
    c = n // 2
    zig = [[step_pairs(s) for s in ring_schedule(rank=r, world_size=P, local_seq=n, causal=True)] for r in range(P)]
    for r in range(P):  # step 0: the causal diagonal of 2c rows; every later step: a full 2c × c block
        assert zig[r] == [2 * c * (2 * c + 1) // 2] + [2 * c * c] * (P - 1)
    con = [sum(step_pairs(s) for s in ring_schedule(rank=r, world_size=P, local_seq=n, causal=True,
                                                     layout="contiguous")) for r in range(P)]
    assert con == [n * (n + 1) // 2 + r * n * n for r in range(P)]  # rank r sees r earlier chunks
    assert sum(con) == sum(map(sum, zig))  # the same work in all, dealt out differently


@pytest.mark.parametrize("kwargs, err, words", [
    (dict(rank=0, world_size=2, local_seq=5, causal=True), ValueError, ("even", "5")),
    (dict(rank=2, world_size=2, local_seq=4, causal=True), ValueError, ("rank",)),
    (dict(rank=0, world_size=2, local_seq=0, causal=True), ValueError, ("local_seq",)),
    (dict(rank=0, world_size=2, local_seq=4, causal="yes"), TypeError, ("causal",)),
    (dict(rank=0, world_size=2, local_seq=4, causal=True, layout="striped"), ValueError, ("layout",)),
])
def test_bad_arguments(kwargs, err, words):
    with pytest.raises(err) as e:
        ring_schedule(**kwargs)
    assert all(w in str(e.value) for w in words)


def _cells(grid: str):
    rows = [line.split()[1:] for line in grid.splitlines()[1:]]
    return rows


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("P", [1, 2, 3, 4])
def test_schedule_grid_draws_every_block_once(layout, P):
    for causal in (True, False):
        rows = _cells(schedule_grid(world_size=P, layout=layout, causal=causal))
        n = len(rows)
        assert n == (2 * P if layout == "zigzag" else P) and all(len(r) == n for r in rows)
        for i, row in enumerate(rows):
            for j, cell in enumerate(row):
                if causal and j > i:
                    assert cell == "·"
                    continue
                m = re.fullmatch(r"r(\d+)s(\d+)(◣?)", cell)
                assert m, (i, j, cell)
                rank, step, diag = int(m[1]), int(m[2]), m[3]
                assert bool(diag) == (causal and i == j) and (step == 0) >= bool(diag)
                assert i in chunk_ids(rank=rank, world_size=P, layout=layout)  # the query's owner computes it
                assert j in chunk_ids(rank=(rank - step) % P, world_size=P, layout=layout)  # with that K/V
        if causal and layout == "zigzag":  # every rank: 3 chunk blocks at step 0 (two diagonal), 2 later
            for r in range(P):
                per_step = [sum(c.startswith(f"r{r}s{s}") for row in rows for c in row) for s in range(P)]
                assert per_step == [3] + [2] * (P - 1), (r, per_step)
