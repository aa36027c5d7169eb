"""Sharding a sequence among P ranks: zigzag (chunks r and 2P-1-r) and contiguous, and back."""

import pytest
import torch

from attnlab.distributed import (
    LAYOUTS,
    chunk_ids,
    local_positions,
    shard,
    unshard,
    zigzag_shard,
    zigzag_unshard,
)


def test_zigzag_of_eight_tokens_on_two_ranks():
    x = torch.arange(8)
    assert zigzag_shard(x, world_size=2, rank=0, dim=0).tolist() == [0, 1, 6, 7]
    assert zigzag_shard(x, world_size=2, rank=1, dim=0).tolist() == [2, 3, 4, 5]
    assert shard(x, world_size=2, rank=1, layout="contiguous", dim=0).tolist() == [4, 5, 6, 7]


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("P", [1, 2, 3, 4, 7])
def test_shard_unshard_round_trip(layout, P, seed):
    g = torch.Generator().manual_seed(seed)
    N = 2 * P * 3
    x = torch.randn(2, 3, N, 5, generator=g)
    pieces = [shard(x, world_size=P, rank=r, layout=layout) for r in range(P)]
    assert all(p.shape == (2, 3, N // P, 5) for p in pieces)
    assert torch.equal(unshard(pieces, layout=layout), x)
    # every token lands on exactly one rank, at the position local_positions names
    for r, p in enumerate(pieces):
        pos = local_positions(seq=N, world_size=P, rank=r, layout=layout)
        assert torch.equal(p, x[:, :, pos])
    everyone = torch.cat([local_positions(seq=N, world_size=P, rank=r, layout=layout) for r in range(P)])
    assert sorted(everyone.tolist()) == list(range(N))
    if layout == "zigzag":
        assert torch.equal(zigzag_unshard([zigzag_shard(x, world_size=P, rank=r) for r in range(P)]), x)


@pytest.mark.parametrize("P", [1, 2, 5])
def test_zigzag_chunks_one_early_one_late(P):
    for r in range(P):
        a, b = chunk_ids(rank=r, world_size=P)
        assert a == r and a + b == 2 * P - 1  # chunks r and 2P-1-r of 2P
        pos = local_positions(seq=4 * P, world_size=P, rank=r)
        assert torch.all(pos[1:] > pos[:-1])  # local order is global order


def test_shard_along_another_dim(seed):
    x = torch.randn(12, 2, generator=torch.Generator().manual_seed(seed))
    pieces = [zigzag_shard(x, world_size=3, rank=r, dim=-2) for r in range(3)]
    assert torch.equal(zigzag_unshard(pieces, dim=0), x)


@pytest.mark.parametrize("call, words", [
    (lambda: zigzag_shard(torch.zeros(1, 1, 10, 2), world_size=3, rank=0), ("10 tokens", "6 equal chunks")),
    (lambda: shard(torch.zeros(1, 1, 10, 2), world_size=4, rank=0, layout="contiguous"), ("10 tokens", "4 equal")),
    (lambda: zigzag_shard(torch.zeros(4), world_size=2, rank=2, dim=0), ("rank", "[0, 2)", "2")),
    (lambda: zigzag_shard(torch.zeros(4), world_size=0, rank=0, dim=0), ("world_size", "0")),
    (lambda: zigzag_shard(torch.zeros(4), world_size=2, rank=0, dim=1), ("dim 1", "(4,)")),
    (lambda: shard(torch.zeros(4), world_size=2, rank=0, layout="ring", dim=0), ("layout", "'ring'")),
    (lambda: zigzag_unshard([torch.zeros(1, 1, 4, 2), torch.zeros(1, 1, 6, 2)]), ("pieces[1]", "(1, 1, 6, 2)")),
    (lambda: zigzag_unshard([torch.zeros(1, 1, 3, 2)] * 2), ("odd", "3")),
    (lambda: local_positions(seq=0, world_size=1, rank=0), ("seq", "0")),
])
def test_bad_arguments_named(call, words):
    with pytest.raises(ValueError) as e:
        call()
    assert all(w in str(e.value) for w in words), str(e.value)


@pytest.mark.parametrize("call", [
    lambda: zigzag_shard([1, 2], world_size=1, rank=0),
    lambda: zigzag_unshard(torch.zeros(1, 1, 4, 2)),
    lambda: zigzag_shard(torch.zeros(4), world_size=2.0, rank=0, dim=0),
])
def test_bad_types_refused(call):
    with pytest.raises(TypeError):
        call()
