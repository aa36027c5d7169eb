"""The GPU simulator (attnlab.sim): execution, per-warp cost rules, checks and reports (§3.3, §5.2–5.3).

The cost rules are checked two ways: on the lecture's textbook cases (coalesced vs strided copies,
padded vs unpadded columns, broadcast, float4) and against slow per-lane reference implementations
of the same rules on random warps (hypothesis).
"""

import json
import math
import warnings

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


def _reverse(ctx, src, dst, n, sync):
    """Reverse each block's slice through shared memory; thread t writes s[t], reads s[nt-1-t]."""
    t = ctx.threadIdx.x
    nt = ctx.blockDim.x
    base = ctx.blockIdx.x * nt
    s = ctx.shared("s", nt)
    s.store(t, src.load(base + t))
    if sync:
        ctx.syncthreads()
    dst.store(base + t, s.load(nt - 1 - t))


def _smem_reduce(ctx, x, out, n):
    """Block sum in shared memory (sequential addressing), then one atomic add per block."""
    tid = ctx.threadIdx.x
    i = ctx.blockIdx.x * ctx.blockDim.x + tid
    s = ctx.shared("sdata", ctx.blockDim.x)
    s.store(tid, np.where(i < n, x.load(i, mask=i < n), np.float32(0)))
    ctx.syncthreads()
    h = ctx.blockDim.x // 2
    while h > 0:
        with ctx.masked(tid < h):
            s.store(tid, s.load(tid) + s.load(tid + h))
        ctx.syncthreads()
        h //= 2
    with ctx.masked(tid == 0):
        out.atomic_add(tid * 0, s.load(0))


def _tiled_matmul(ctx, A, B, C, n):
    """C = A·B for n×n matrices, 16×16 tiles (lecture 4's kernel), for the numerics test."""
    T = ctx.blockDim.x
    tx, ty = ctx.threadIdx.x, ctx.threadIdx.y
    row, col = ctx.blockIdx.y * T + ty, ctx.blockIdx.x * T + tx
    As, Bs = ctx.shared("As", (T, T + 1)), ctx.shared("Bs", (T, T + 1))
    acc = np.zeros(np.broadcast_shapes(row.shape, col.shape), np.float32)
    kk = ctx.unroll(T)
    for k0 in range(0, n, T):
        ok_a, ok_b = (row < n) & (k0 + tx < n), (k0 + ty < n) & (col < n)
        As.store((ty, tx), np.where(ok_a, A.load((row, k0 + tx), mask=ok_a), np.float32(0)))
        Bs.store((ty, tx), np.where(ok_b, B.load((k0 + ty, col), mask=ok_b), np.float32(0)))
        ctx.syncthreads()
        a, b = As.load((ty, kk)), Bs.load((kk, tx))
        for k in range(T):
            acc = acc + a[k] * b[k]
        ctx.syncthreads()
    C.store((row, col), acc, mask=(row < n) & (col < n))


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


# ---------------------------------------------------------------- checks: hazards, bounds, barriers


def test_missing_syncthreads_is_reported_as_a_hazard():
    n = 256
    x = _rng().standard_normal(n).astype(np.float32)
    dev = sim.Device()
    src, dst = dev.array("src", x), dev.zeros("dst", n)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        st = dev.launch(_reverse, 2, 128, src, dst, n, True)  # with the barrier: silent
    assert st.hazards == 0
    np.testing.assert_array_equal(dst.numpy(), x.reshape(2, 128)[:, ::-1].reshape(-1))
    with pytest.warns(sim.SharedMemoryHazardWarning, match=r"kernel 'reverse'.*hazard on 's'\[\d+\].*block \(0, 0, 0\)"):
        st = dev.launch(_reverse, 2, 128, src, dst, n, False)
    assert st.hazards > 0
    strict = sim.Device(hazards="error")
    src2, dst2 = strict.array("src", x), strict.zeros("dst", n)
    with pytest.raises(sim.SharedMemoryHazard, match=r"warp \d+ .*reads it after warp \d+ .*wrote it"):
        strict.launch(_reverse, 2, 128, src2, dst2, n, False)


def test_same_warp_and_read_read_are_not_hazards():
    def k(ctx, out):
        t = ctx.threadIdx.x
        s = ctx.shared("s", 64)
        s.store(t, t.astype(np.float32))
        a = s.load(t ^ 1)  # written by the same warp: no barrier needed within a warp here
        ctx.syncthreads()
        b = s.load(63 - t)  # read by two warps: fine
        c = s.load(t)
        out.store(t, a + b + c)

    dev = sim.Device(hazards="error")
    dev.launch(k, 1, 64, dev.zeros("out", 64))


def test_write_after_read_hazard():
    def k(ctx, out):
        t = ctx.threadIdx.x
        s = ctx.shared("s", 64)
        s.store(t, t.astype(np.float32))
        ctx.syncthreads()
        v = s.load(63 - t)
        s.store(t, v)  # another warp read this word since the barrier
        out.store(t, v)

    with pytest.raises(sim.SharedMemoryHazard, match="writes it after .* read it"):
        sim.Device(hazards="error").launch(k, 1, 64, sim.Device().zeros("out", 64))


def test_off_by_one_is_stopped_with_kernel_block_thread_array_index():
    n = 1000
    dev = sim.Device()
    x, y = dev.array("x", np.ones(n, np.float32)), dev.zeros("y", n)

    def off_by_one(ctx, src, dst, n):
        i = ctx.blockIdx.x * ctx.blockDim.x + ctx.threadIdx.x
        with ctx.masked(i <= n):  # should be i < n
            dst.store(i, src.load(i))

    with pytest.raises(sim.OutOfBoundsError) as e:
        dev.launch(off_by_one, 4, 256, x, y, n)
    msg = str(e.value)
    print(msg)
    for part in ("kernel 'off_by_one'", "block (3, 0, 0)", "thread (232, 0, 0)", "array 'x'", "index 1000", "load"):
        assert part in msg
    assert isinstance(e.value, IndexError)


def test_shared_out_of_bounds_names_the_tuple_index():
    def k(ctx):
        t = ctx.threadIdx.x
        a = ctx.shared("tile", (16, 17))
        a.store((t // 2, ctx.unroll(18)), np.float32(1))  # column 17 is past the padding

    with pytest.raises(sim.OutOfBoundsError, match=r"shared array 'tile' \(shape \(16, 17\)\) at index \(0, 17\) "
                                                   r"by block \(0, 0, 0\), thread \(0, 0, 0\), unrolled instruction \(17,\)"):
        sim.Device().launch(k, 1, 32)


def test_misaligned_vector_and_divergent_barrier():
    dev = sim.Device()
    x = dev.array("x", np.zeros(256, np.float32))

    def mis(ctx, x):
        x.load(4 * ctx.threadIdx.x + 2, width=4)

    with pytest.raises(sim.MisalignedAccessError, match="not a multiple of 4"):
        dev.launch(mis, 1, 32, x)

    def div(ctx):
        with ctx.masked(ctx.threadIdx.x < 16):
            ctx.syncthreads()

    with pytest.raises(sim.DivergentBarrierError, match=r"thread \(16, 0, 0\)"):
        dev.launch(div, 1, 32)


def test_launch_and_device_input_errors():
    dev = sim.Device()
    with pytest.raises(sim.LaunchError, match="1025 threads"):
        dev.launch(lambda ctx: None, 1, (1025,))
    with pytest.raises(sim.LaunchError, match="grid"):
        dev.launch(lambda ctx: None, 0, 32)
    with pytest.raises(ValueError, match="hazards"):
        sim.Device(hazards="maybe")
    with pytest.raises(ValueError, match="already exists"):
        dev.zeros("a", 4)
        dev.zeros("a", 4)

    def big(ctx):
        ctx.shared("huge", 60000)

    with pytest.raises(sim.LaunchError, match="shared arrays need 240,000 bytes"):
        dev.launch(big, 1, 32)
    with pytest.raises(RuntimeError, match="inside a kernel"):
        dev.arrays["a"].load(0)


# ---------------------------------------------------------------- numerics and execution model


@pytest.mark.parametrize("n", [16, 50])
def test_tiled_matmul_equals_numpy(n):
    rng = _rng()
    a, b = rng.standard_normal((n, n)).astype(np.float32), rng.standard_normal((n, n)).astype(np.float32)
    dev = sim.Device(hazards="error")
    A, B, C = dev.array("A", a), dev.array("B", b), dev.empty("C", (n, n))
    T = 16
    st = dev.launch(_tiled_matmul, (-(-n // T), -(-n // T)), (T, T), A, B, C, n)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    err = np.abs(C.numpy() - ref).max()
    print("max err", err)
    assert err < 1e-5 * n
    # sequential float32 sums, exactly as a CUDA loop without FMA would round them
    exp = np.zeros((n, n), np.float32)
    for k in range(n):
        exp = exp + a[:, k : k + 1] * b[k : k + 1, :]
    np.testing.assert_array_equal(C.numpy(), exp)
    assert st.shared[("As", "read")]["wavefronts"] == st.shared[("As", "read")]["instructions"]  # broadcast rows


def test_reduction_with_atomics_and_block_counts():
    n = 3000
    x = _rng().integers(-1000, 1000, n).astype(np.float32)  # integers: the float32 sum is exact
    dev = sim.Device(hazards="error")
    X, out = dev.array("x", x), dev.zeros("out", 1)
    st = dev.launch(_smem_reduce, -(-n // 256), 256, X, out, n)
    assert out.numpy()[0] == x.astype(np.float64).sum()
    nb = -(-n // 256)
    assert st.global_[("out", "atomic")]["requests"] == nb
    assert st.barriers == nb * (1 + 8)  # one after the load, one per halving step
    rep = dev.report()
    assert rep.atomics == nb and rep.launches == 1 and rep.barriers == st.barriers


def test_chunking_does_not_change_counts():
    """Blocks run in chunks; any chunk size gives the same results and counts (no L2)."""
    rng = _rng()
    n = 40
    a, b = rng.standard_normal((n, n)).astype(np.float32), rng.standard_normal((n, n)).astype(np.float32)
    dicts = []
    for chunk in (1 << 17, 256, 512):
        dev = sim.Device(max_threads_per_chunk=chunk)
        A, B, C = dev.array("A", a), dev.array("B", b), dev.empty("C", (n, n))
        dev.launch(_tiled_matmul, (3, 3), (16, 16), A, B, C, n)
        dicts.append((dev.report().to_dict()["totals"], C.numpy()))
    for d, c in dicts[1:]:
        assert d == dicts[0][0]
        np.testing.assert_array_equal(c, dicts[0][1])


def test_three_dimensional_indices():
    def k(ctx, out):
        bid = ctx.blockIdx.x + ctx.gridDim.x * (ctx.blockIdx.y + ctx.gridDim.y * ctx.blockIdx.z)
        tid = ctx.threadIdx.x + ctx.blockDim.x * (ctx.threadIdx.y + ctx.blockDim.y * ctx.threadIdx.z)
        code = ctx.threadIdx.x + 10 * ctx.threadIdx.y + 100 * ctx.threadIdx.z + 1000 * ctx.blockIdx.x \
            + 10000 * ctx.blockIdx.y + 100000 * ctx.blockIdx.z
        out.store(bid * 24 + tid, code.astype(np.float32))

    dev = sim.Device()
    out = dev.zeros("out", 12 * 24)
    st = dev.launch(k, (2, 3, 2), (4, 3, 2), out)
    o = out.numpy().reshape(2, 3, 2, 2, 3, 4)  # bz, by, bx, tz, ty, tx
    idx = np.indices(o.shape)
    np.testing.assert_array_equal(o, idx[5] + 10 * idx[4] + 100 * idx[3] + 1000 * idx[2] + 10000 * idx[1] + 100000 * idx[0])
    assert st.global_[("out", "write")]["instructions"] == 12  # 24 threads = one (partial) warp per block


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
