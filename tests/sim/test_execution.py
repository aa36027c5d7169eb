"""The GPU simulator's execution model and checks (attnlab.sim, §3.3, §5.2): hazards, out-of-bounds
and misaligned accesses, divergent barriers and bad launches stopped with the kernel, block, thread,
array and index named; kernels computing what numpy computes; chunking that changes no count.
"""

import warnings

import numpy as np
import pytest
import torch

from attnlab import sim


def _rng():
    return np.random.default_rng(int(torch.randint(0, 2**31 - 1, ()).item()))  # follows the test seed


# ---------------------------------------------------------------- kernels used below


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
    out = dev.zeros("out", 64)
    st = dev.launch(k, 1, 64, out)
    t = np.arange(64)
    np.testing.assert_array_equal(out.numpy(), (t ^ 1) + (63 - t) + t)  # every load saw the stored values
    assert st.hazards == 0
    assert st.shared[("s", "read")]["instructions"] == 3 * 2 and st.barriers == 1  # 3 loads × 2 warps


def test_write_after_read_hazard():
    def k(ctx, out):
        t = ctx.threadIdx.x
        s = ctx.shared("s", 64)
        s.store(t, t.astype(np.float32))
        ctx.syncthreads()
        v = s.load(63 - t)
        s.store(t, v)  # another warp read this word since the barrier
        out.store(t, v)

    dev = sim.Device(hazards="error")
    with pytest.raises(sim.SharedMemoryHazard, match=r"hazard on 's'\[\d+\].*warp \d+ .*writes it after warp \d+ .*read it"):
        dev.launch(k, 1, 64, dev.zeros("out", 64))


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


def test_a_device_and_its_arrays_are_freed_without_the_cycle_collector():
    """No reference cycle between a device, its arrays, a launch's contexts and shared arrays: the
    memory of a simulation (S and P are N×N) returns as soon as the device is dropped."""
    import gc
    import weakref

    gc.collect()
    gc.disable()
    try:
        dev = sim.Device()
        x, y = dev.array("x", np.arange(256, dtype=np.float32)), dev.zeros("y", 256)
        dev.launch(_reverse, 2, 128, x, y, 256, True)
        np.testing.assert_array_equal(y.numpy(), np.arange(256).reshape(2, 128)[:, ::-1].reshape(-1))
        alive = [weakref.ref(o) for o in (dev, x, y)]
        del dev, x, y
        assert [r() is None for r in alive] == [True] * len(alive)
    finally:
        gc.enable()
