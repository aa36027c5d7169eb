"""Ring attention on 4 CPU processes (gloo) against the single-process float64 oracle: output and
gradients to 1e-10 on rings of 4, 3 and 2 ranks (the last a sub-group of global ranks 1 and 3),
causal and not, zigzag and contiguous layouts, GQA/MQA; bad input refused alike on every rank.

The processes are spawned once for the module (a spawn costs seconds on a small CPU) and run every
case; the run is bounded in time (``ranks.launch``).
"""

import os
import zlib

import pytest
from tests.distributed.ranks import RINGS, all_rings, cases_for, launch

TOL = 1e-10
WORLD = 4


@pytest.fixture(scope="module")
def runs(request, tmp_path_factory):
    """Every rank's results; the seed from the session seed and this module's id, as conftest does per test."""
    seed = (int(os.environ.get("ATTNLAB_SEED") or 0) * 1_000_003 + zlib.crc32(request.node.nodeid.encode())) % 2**31
    return launch(all_rings, world_size=WORLD, args=(seed,), workdir=tmp_path_factory.mktemp("ring"), timeout=120)


@pytest.mark.parametrize("ring, members", RINGS, ids=[name for name, _ in RINGS])
def test_ring_matches_single_process_reference(runs, ring, members):
    P = len(members)
    cases = cases_for(P)
    assert {c["layout"] for c in cases} == {"zigzag", "contiguous"} and {c["causal"] for c in cases} == {True, False}
    for rank in range(WORLD):
        results = runs[rank][ring]
        if rank not in members:
            assert results is None
            continue
        assert len(results) == len(cases)
        for r in results:
            where = f"{ring}, global rank {rank}, {r['layout']}, causal={r['causal']}, H={r['H']}, Hkv={r['Hkv']}"
            assert all(e <= TOL for e in r["errors"].values()), (where, r["errors"])
            assert r["dtype"] == "torch.float64"
            assert r["shape"] == (r["B"], r["H"], r["N"] // P, r["D"]), where


@pytest.mark.parametrize("ring, members", RINGS, ids=[name for name, _ in RINGS])
def test_timeline_records_every_step(runs, ring, members):
    P = len(members)
    for rank in members:
        for r in runs[rank][ring]:
            # one forward span per step; backward steps 0..P (P: the last dK/dV hop home)
            steps = r["timeline_steps"]
            assert [s for p, s in steps if p == "forward"] == list(range(P)), steps
            assert [s for p, s in steps if p == "backward"] == list(range(P + 1)), steps
            assert r["timeline_finite"]


def test_ring_refuses_bad_input_on_every_rank(runs):
    msgs = [runs[rank]["rejects"] for rank in range(WORLD)]
    for rank, got in enumerate(msgs):
        assert got["odd_zigzag"].startswith("ValueError") and "even" in got["odd_zigzag"] and "5" in got["odd_zigzag"]
        assert got["ranks_differ"].startswith("ValueError"), got["ranks_differ"]
        assert "rank 1" in got["ranks_differ"] and "(1, 2, 6, 4)" in got["ranks_differ"], got["ranks_differ"]
        assert "(1, 2, 8, 4)" in got["ranks_differ"], got["ranks_differ"]
        assert got["q_k_lengths"].startswith("ValueError") and "one length" in got["q_k_lengths"]
        assert got["heads"].startswith("ValueError") and "multiple" in got["heads"]
        assert got["layout"].startswith("ValueError") and "'striped'" in got["layout"]
        assert got["causal"].startswith("TypeError") and "causal" in got["causal"]
        assert tuple(got["after"]) == (1, 2, 6, 4), rank  # the ring still works after the refusals
    assert all(m["ranks_differ"] == msgs[0]["ranks_differ"] for m in msgs)  # the same refusal everywhere
