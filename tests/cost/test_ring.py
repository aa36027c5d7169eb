"""attnlab.cost.ring: the ring attention cost model — its closed form against an independent
step-by-step sum over every rank's blocks (from attnlab.distributed's schedule), and its properties:
efficiency ≤ 1, monotone in the link's bandwidth, communication hidden at large N / small P."""

from __future__ import annotations

import json
import math

import pytest

from attnlab.cost.ring import (
    LINKS,
    Link,
    attention_time,
    get_link,
    kv_block_bytes,
    merge_time,
    ring_estimate,
    transfer_time,
)
from attnlab.distributed import ring_schedule


def _step_by_step(*, ranks, seq, link, gpu, batch, heads, kv_heads, head_dim, dtype_bytes, causal, layout):
    """Forward and backward time summed step by step: each step takes the longer of the slowest
    rank's blocks (as ring_schedule deals them out) and the transfers in flight."""
    P, n = ranks, seq // ranks
    shape = dict(gpu=gpu, batch=batch, heads=heads, kv_heads=kv_heads, head_dim=head_dim, dtype_bytes=dtype_bytes)
    kv = kv_block_bytes(local_seq=n, batch=batch, kv_heads=kv_heads, head_dim=head_dim, dtype_bytes=dtype_bytes)
    dkv = kv // dtype_bytes * 4  # float32 accumulators
    schedules = [ring_schedule(rank=r, world_size=P, local_seq=n, causal=causal, layout=layout) for r in range(P)]
    total = {}
    for pass_ in ("fwd", "bwd"):
        t = 0.0
        for s in range(P):
            compute = max(sum(attention_time(seq_q=b.q1 - b.q0, seq_k=b.k1 - b.k0, causal=b.causal, pass_=pass_, **shape)
                              + merge_time(seq_q=b.q1 - b.q0, seq_k=b.k1 - b.k0, pass_=pass_, **shape)
                              for b in schedules[r][s].blocks) for r in range(P))
            sending = [kv] if s < P - 1 else []  # the K/V for the next step
            if pass_ == "bwd" and s >= 1:
                sending.append(dkv)  # the previous step's dK/dV accumulators
            t += max(compute, transfer_time(sum(sending), link, transfers=len(sending)) if sending else 0.0)
        if pass_ == "bwd" and P > 1:
            t += transfer_time(dkv, link)  # the last hop home
        total[pass_] = t
    return total


@pytest.mark.parametrize("layout", ["zigzag", "contiguous"])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("ranks, seq, link, kv_heads", [
    (1, 4096, "nvlink4", 8), (2, 131072, "nvlink4", 8), (3, 6 * 1000, "pcie5", 32), (4, 8 * 64, "ib-ndr", 32),
    (5, 10 * 4096, "nvlink4", 1), (8, 16 * 2048, "pcie5", 8), (16, 32 * 24, "nvlink4", 32),
])
def test_closed_form_equals_step_by_step_sum(layout, causal, ranks, seq, link, kv_heads):
    kw = dict(ranks=ranks, seq=seq, link=link, gpu="H200", batch=2, heads=32, kv_heads=kv_heads, head_dim=128,
              dtype_bytes=2, causal=causal, layout=layout)
    est = ring_estimate(**kw)
    want = _step_by_step(**kw)
    assert math.isclose(est.forward.time, want["fwd"], rel_tol=1e-12), (est.forward.time, want["fwd"])
    assert math.isclose(est.backward.time, want["bwd"], rel_tol=1e-12), (est.backward.time, want["bwd"])
    assert sum(k.count for k in est.forward.kinds) == ranks == sum(k.count for k in est.backward.kinds)


GRID = [(P, seq) for P in (1, 2, 3, 8, 64, 1000, 1024) for seq in (2 * P * 64, 2 * P * 4096, 2 * P * 3)]


@pytest.mark.parametrize("link", list(LINKS))
@pytest.mark.parametrize("layout", ["zigzag", "contiguous"])
@pytest.mark.parametrize("causal", [True, False])
def test_efficiency_at_most_one(link, layout, causal):
    for P, seq in GRID:
        for gpu, dtype_bytes in (("H100", 2), ("A100", 4)):
            est = ring_estimate(ranks=P, seq=seq, link=link, gpu=gpu, layout=layout, causal=causal, heads=8,
                                kv_heads=2, dtype_bytes=dtype_bytes)
            assert 0 < est.efficiency <= 1, (P, seq, gpu, est.efficiency)
            assert est.forward.exposed >= -1e-15 and est.backward.exposed >= -1e-15


def test_monotone_in_link_bandwidth():
    for P, seq in ((2, 8192), (8, 131072), (64, 131072), (1024, 2048 * 8)):
        times, effs = [], []
        for bw in (1e9, 10e9, 50e9, 200e9, 450e9, 2000e9, 1e13):
            est = ring_estimate(ranks=P, seq=seq, link=Link("test", bw), gpu="H200")
            times.append(est.time)
            effs.append(est.efficiency)
        assert times == sorted(times, reverse=True) and effs == sorted(effs), (P, times)
        assert times[0] > times[-1]  # the slowest link shows: at 1 GB/s nothing hides


def test_hidden_at_large_seq_and_small_ranks():
    for name in LINKS:
        # fixed P: once the transfer hides, it stays hidden at every longer sequence (compute ∝ N², bytes ∝ N)
        hidden = [ring_estimate(ranks=8, seq=16 * 2**k, link=name, gpu="H200").hidden for k in range(2, 16)]
        assert not hidden[0] and hidden[-1], (name, hidden)
        first = hidden.index(True)
        assert all(hidden[first:]), (name, hidden)
        # fixed N: hidden on few ranks, not on many (each step's block shrinks as 1/P², its transfer as 1/P)
        by_p = [ring_estimate(ranks=P, seq=2**20, link=name, gpu="H200").hidden for P in (2, 4, 8, 16, 64, 256, 1024)]
        assert by_p[0] and not by_p[-1], (name, by_p)
        assert by_p == sorted(by_p, reverse=True), (name, by_p)


def test_zigzag_balances_causal_work():
    # hidden communication: zigzag scales almost perfectly, contiguous waits on its last rank (≈ 1/2)
    zig = ring_estimate(ranks=8, seq=2**20, gpu="H200", layout="zigzag")
    con = ring_estimate(ranks=8, seq=2**20, gpu="H200", layout="contiguous")
    assert zig.hidden and con.hidden
    assert zig.efficiency > 0.9 and 0.45 < con.efficiency < 0.6
    # without a mask the layouts do the same work
    a = ring_estimate(ranks=8, seq=2**20, gpu="H200", layout="zigzag", causal=False)
    b = ring_estimate(ranks=8, seq=2**20, gpu="H200", layout="contiguous", causal=False)
    assert a.time == b.time


def test_transfer_and_block_bytes():
    assert kv_block_bytes(local_seq=1000, batch=2, kv_heads=8, head_dim=128, dtype_bytes=2) == 2 * 8 * 1000 * 256 * 2
    lk = get_link("NVLink4")
    assert transfer_time(0, lk) == 0.0
    assert math.isclose(transfer_time(450e9, lk, transfers=2), 1.0 + 2 * lk.latency)
    assert math.isclose(get_link("pcie5").bandwidth, 63.015e9, rel_tol=1e-4)
    assert get_link("ib-ndr").bandwidth == 50e9


def test_to_dict_is_plain_json():
    d = ring_estimate(ranks=4, seq=4096, link="pcie5").to_dict()
    assert json.loads(json.dumps(d)) == d
    assert d["local_seq"] == 1024 and d["link"]["name"].startswith("PCIe")


@pytest.mark.parametrize("kwargs, err, words", [
    (dict(ranks=0, seq=64), ValueError, ("ranks", "0")),
    (dict(ranks=1025, seq=2050 * 2), ValueError, ("ranks", "1024", "1025")),
    (dict(ranks=4, seq=100), ValueError, ("seq", "100", "8")),
    (dict(ranks=4, seq=100, layout="contiguous", causal=True), None, ()),
    (dict(ranks=3, seq=100, layout="contiguous"), ValueError, ("seq", "100", "3")),
    (dict(ranks=2, seq=64, link="ethernet"), ValueError, ("link", "ethernet", "nvlink4")),
    (dict(ranks=2, seq=64, layout="striped"), ValueError, ("layout", "striped")),
    (dict(ranks=2, seq=64, causal=1), TypeError, ("causal",)),
    (dict(ranks=2.0, seq=64), TypeError, ("ranks",)),
])
def test_bad_arguments(kwargs, err, words):
    if err is None:
        assert ring_estimate(**kwargs).local_seq == 25
        return
    with pytest.raises(err) as e:
        ring_estimate(**kwargs)
    assert all(w in str(e.value) for w in words), str(e.value)


def test_link_checks_its_fields():
    with pytest.raises(ValueError, match="bandwidth"):
        Link("x", 0)
    with pytest.raises(ValueError, match="latency"):
        Link("x", 1e9, latency=-1)
