"""The GPU simulator's cost rules (attnlab.sim, §3.3, §5.2–5.3): sectors and first touch in global
memory, banks, broadcast and phases in shared memory, the L2 model, and the reports that carry the counts.

The rules are checked two ways: on the lecture's textbook cases (coalesced vs strided copies, padded
vs unpadded columns, broadcast, float4) and against slow per-lane reference implementations of the
same rules on random warps (hypothesis).
"""

import json
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnlab import sim
from attnlab.sim import accounting


def _rng():
    return np.random.default_rng(int(torch.randint(0, 2**31 - 1, ()).item()))  # follows the test seed


# ---------------------------------------------------------------- kernels used below


def _copy(ctx, src, dst, n, stride):
    i = ctx.blockIdx.x * ctx.blockDim.x + ctx.threadIdx.x  # (nb, nt)
    with ctx.masked(i < n):
        dst.store(i, src.load(i * stride))


def _copy_vec(ctx, src, dst, n, width):
    i = (ctx.blockIdx.x * ctx.blockDim.x + ctx.threadIdx.x) * width
    with ctx.masked(i < n):
        dst.store(i, src.load(i, width=width), width=width)


def _column_read(ctx, pad, out):
    """Fill a 32×(32+pad) shared array, then every thread t reads a[t][0] (a column)."""
    t = ctx.threadIdx.x
    a = ctx.shared("a", (32, 32 + pad))
    r = ctx.unroll(32)
    a.store((r, t), (r * 32 + t).astype(np.float32))  # row r, coalesced: 1 wavefront per row
    ctx.syncthreads()
    out.store(t, a.load((t, 0)))


def _one_word(ctx, out):
    t = ctx.threadIdx.x
    a = ctx.shared("a", 32)
    a.store(t, t.astype(np.float32))
    ctx.syncthreads()
    out.store(t, a.load(t * 0 + 5))  # every lane reads word 5


def _float4_read(ctx, out):
    t = ctx.threadIdx.x
    a = ctx.shared("a", 128)
    a.store(t, t.astype(np.float32))
    a.store(t + 32, t.astype(np.float32))
    a.store(t + 64, t.astype(np.float32))
    a.store(t + 96, t.astype(np.float32))
    ctx.syncthreads()
    out.store(4 * t, a.load(4 * t, width=4), width=4)  # 32 consecutive float4s


# ---------------------------------------------------------------- global memory: sectors, first touch


@pytest.mark.parametrize("n", [1024, 1000, 33])
def test_coalesced_copy_touches_exactly_its_bytes(n):
    dev = sim.Device()
    x = dev.array("x", _rng().standard_normal(n).astype(np.float32))
    y = dev.zeros("y", n)
    st = dev.launch(_copy, -(-n // 256), 256, x, y, n, 1)
    np.testing.assert_array_equal(y.numpy(), x.numpy())
    r = st.global_[("x", "read")]
    print(n, r)
    assert r["requested_bytes"] == 4 * n
    assert r["sectors"] == -(-4 * n // 32)  # every sector of the array, once
    assert r["first_touch_bytes"] == 4 * n
    assert r["instructions"] == -(-n // 32)
    assert st.global_[("y", "write")]["sectors"] == -(-4 * n // 32)


def test_strided_copy_costs_one_sector_per_thread():
    n = 256
    dev = sim.Device()
    x = dev.array("x", _rng().standard_normal(32 * n).astype(np.float32))
    y = dev.zeros("y", n)
    st = dev.launch(_copy, 2, 128, x, y, n, 32)  # stride 32 floats = 128 bytes
    np.testing.assert_array_equal(y.numpy(), x.numpy()[::32])
    r = st.global_[("x", "read")]
    assert r["sectors"] == n  # one 32-byte sector per thread for 4 useful bytes
    assert r["requested_bytes"] == 4 * n and r["first_touch_bytes"] == 4 * n
    assert 32 * r["sectors"] == 8 * r["requested_bytes"]


@pytest.mark.parametrize("width", [2, 4])
def test_vector_copy_same_sectors_fewer_instructions(width):
    n = 1024
    dev = sim.Device()
    x = dev.array("x", _rng().standard_normal(n).astype(np.float32))
    y = dev.zeros("y", n)
    st = dev.launch(_copy_vec, n // (256 * width), 256, x, y, n, width)
    np.testing.assert_array_equal(y.numpy(), x.numpy())
    r = st.global_[("x", "read")]
    assert r["sectors"] == 4 * n // 32 and r["requested_bytes"] == 4 * n
    assert r["instructions"] == n // (32 * width) and r["requests"] == n // width


def test_first_touch_counts_each_byte_once_per_launch():
    def twice(ctx, x, y):
        t = ctx.threadIdx.x
        a = x.load(t)
        b = x.load(63 - t)  # the same 64 elements again, other lanes
        y.store(t, a + b)

    dev = sim.Device()
    x, y = dev.array("x", np.arange(64, dtype=np.float32)), dev.zeros("y", 64)
    for _ in range(2):  # the ideal cache starts cold at every launch
        st = dev.launch(twice, 1, 64, x, y)
        r = st.global_[("x", "read")]
        assert r["requested_bytes"] == 2 * 256 and r["first_touch_bytes"] == 256 and r["sectors"] == 16
    assert np.all(y.numpy() == 63)
    rep = dev.report()
    assert rep.global_bytes("x", "read", kind="ideal") == 512 and rep.global_bytes("x", kind="sectors") == 1024


# ---------------------------------------------------------------- shared memory: banks, broadcast, phases


@pytest.mark.parametrize("pad, expected", [(0, 32), (1, 1)])
def test_column_of_shared_array(pad, expected):
    dev = sim.Device()
    out = dev.zeros("out", 32)
    st = dev.launch(_column_read, 1, 32, pad, out)
    np.testing.assert_array_equal(out.numpy(), np.arange(32) * 32)
    rd, wr = st.shared[("a", "read")], st.shared[("a", "write")]
    assert rd["wavefronts"] == expected and rd["ideal_wavefronts"] == 1 and rd["instructions"] == 1
    assert wr["wavefronts"] == 32 and wr["instructions"] == 32  # 32 conflict-free row stores


def test_one_word_read_by_32_threads_is_a_broadcast():
    dev = sim.Device()
    out = dev.zeros("out", 32)
    st = dev.launch(_one_word, 1, 32, out)
    assert np.all(out.numpy() == 5)
    assert st.shared[("a", "read")]["wavefronts"] == 1


def test_float4_reads_by_32_consecutive_threads_cost_4():
    dev = sim.Device()
    out = dev.zeros("out", 128)
    st = dev.launch(_float4_read, 1, 32, out)
    np.testing.assert_array_equal(out.numpy(), np.tile(np.arange(32), 4)[np.arange(128)].astype(np.float32))
    rd = st.shared[("a", "read")]
    assert rd["wavefronts"] == 4 and rd["instructions"] == 1 and rd["requested_bytes"] == 512


def test_phases_of_8_and_16_byte_accesses():
    """float2: half-warp phases; float4: quarter-warp phases; a broadcast float4 costs 1."""

    def k(ctx, out):
        t = ctx.threadIdx.x
        a = ctx.shared("a", 1024)
        i = ctx.unroll(32)
        a.store(i * 32 + t, t.astype(np.float32))
        ctx.syncthreads()
        a.load(2 * t, width=2)  # 64 consecutive words: 2 wavefronts
        a.load(t * 0, width=4)  # the same float4 everywhere: 1
        a.load(8 * t, width=4)  # stride 8 words: every quarter-warp hits 4 banks twice -> 2 x 4 = 8
        a.load(2 * (t % 16), width=2)  # both half-warps read the same 16 float2s: 1
        out.store(t, np.float32(0))

    dev = sim.Device()
    st = dev.launch(k, 1, 32, dev.zeros("out", 32))
    assert st.shared[("a", "read")]["wavefronts"] == 2 + 1 + 8 + 1
    assert st.shared[("a", "read")]["ideal_wavefronts"] == 2 + 1 + 4 + 1


def _ref_wavefronts(words0, active, k, phases):
    """The phase rule, lane by lane (slow reference)."""
    per = 32 // phases
    seen, total = set(), 0
    for p in range(phases):
        per_bank = {}
        for lane in range(p * per, (p + 1) * per):
            if not active[lane]:
                continue
            for w in range(words0[lane], words0[lane] + k):
                if w not in seen:
                    seen.add(w)
                    per_bank.setdefault(w % 32, set()).add(w)
        total += max((len(s) for s in per_bank.values()), default=0)
    return total


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**31 - 1), st.sampled_from([1, 2, 4]), st.sampled_from([4, 40, 300]), st.floats(0.1, 1.0))
def test_wavefront_and_sector_rules_match_lane_by_lane_reference(seed, width, span, p_active):
    rng = np.random.default_rng(seed)
    G = 5
    elems = rng.integers(0, span, (G, 32)) * width  # aligned vector starts
    active = rng.random((G, 32)) < p_active
    k = width  # float32: words per lane = width
    instr, wf, ideal = accounting.wavefronts(elems, active, k, k)
    ref = [_ref_wavefronts(elems[g], active[g], k, k) for g in range(G)]
    assert wf == sum(ref)
    assert instr == int(active.any(axis=1).sum())
    distinct = [len({w for lane in range(32) if active[g, lane] for w in range(elems[g, lane], elems[g, lane] + k)})
                for g in range(G)]
    assert ideal == sum(-(-d // 32) for d in distinct)
    sec = (elems * 4) >> 5
    instr2, nsec, _ = accounting.sectors(sec, active)
    assert nsec == sum(len(set(sec[g][active[g]].tolist())) for g in range(G)) and instr2 == instr


# ---------------------------------------------------------------- L2 model and reports


def test_l2_lru_hits_and_thrashing():
    def sweep(ctx, x, y, n, times):
        t = ctx.threadIdx.x
        acc = np.zeros(t.shape, np.float32)
        for _ in range(times):
            for i0 in range(0, n, 32):
                acc = acc + x.load(i0 + t)
        y.store(t, acc)

    n = 64 * 32  # 8 KiB = 256 sectors
    for cap, hits in ((1 << 20, 256), (4096, 0)):  # fits: 2nd sweep hits; 4 KiB: LRU thrashes
        dev = sim.Device(l2_bytes=cap)
        x, y = dev.array("x", np.ones(n, np.float32)), dev.zeros("y", 32)
        st = dev.launch(sweep, 1, 32, x, y, n, 2)
        r = st.global_[("x", "read")]
        assert r["sectors"] == 512 and r["l2_hit_sectors"] == hits and r["l2_miss_sectors"] == 512 - hits
        assert dev.report().global_bytes("x", "read", kind="l2") == 32 * (512 - hits)
    with pytest.raises(ValueError, match="l2_bytes"):
        sim.Device(l2_bytes=8)


def test_report_dict_json_and_table(tmp_path):
    dev = sim.Device()
    x, y = dev.array("x", np.ones(1024, np.float32)), dev.zeros("y", 1024)
    dev.launch(_copy, 4, 256, x, y, 1024, 1)
    dev.launch(_copy, 4, 256, x, y, 1024, 1, name="copy_again")
    rep = dev.report()
    d = json.loads(rep.to_json(tmp_path / "r.json"))
    assert json.loads((tmp_path / "r.json").read_text()) == d
    assert d["schema"] == "attnlab.sim.report/1"
    assert [k["name"] for k in d["kernels"]] == ["copy", "copy_again"]
    assert d["totals"]["global"]["x"]["read"]["sectors"] == 256
    assert set(d["kernels"][0]["global"]["x"]["read"]) == set(sim.GLOBAL_FIELDS)
    assert rep["copy_again"].warp_instructions == 64
    from rich.console import Console

    console = Console(record=True, width=150)
    rep.print(console)
    text = console.export_text()
    assert "copy_again" in text and "4,096" in text
    assert math.isclose(rep.global_bytes(kind="sectors"), 4 * 4096)
