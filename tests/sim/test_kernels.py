"""The lecture's CUDA-style kernels on the simulator (attnlab.sim.kernels): results against float64
attention, HBM counts against the closed forms of §3.2, §5.4, §6.2, §6.3 (attnlab.cost and written out
here), shared-memory counts and input checks. ``simulate_forward`` and ``attnlab simulate``: test_simulate.py.
"""

import math
import warnings

import numpy as np
import pytest
import torch

from attnlab import attention_ref, cost, sim
from attnlab.sim.kernels import (
    flash_fwd,
    flash_fwd_shared_bytes,
    reference_forward,
    run_flash_backward,
    run_flash_forward,
    run_standard_forward,
)

F32 = 4  # bytes


def _qkv(Nq, Nk, D):
    g = [torch.randn(n, D, dtype=torch.float32) for n in (Nq, Nk, Nk)]  # the test's seeded generator
    return [x.numpy() for x in g]


def _ref(q, k, v, causal=False):
    t = [torch.from_numpy(x)[None, None] for x in (q, k, v)]
    o64, l64 = attention_ref(*[x.double() for x in t], causal=causal)
    o32, _ = attention_ref(*t, causal=causal)
    err32 = (o32.double() - o64).abs().max().item()
    return o64[0, 0].numpy(), l64[0, 0].numpy(), err32


def _kv_bytes(rep):
    return rep.global_bytes("K", "read", kind="sectors") + rep.global_bytes("V", "read", kind="sectors")


# ---------------------------------------------------------------- numerics against float64 attention


@pytest.mark.parametrize("Nq, Nk, D, causal", [
    (256, 256, 64, False), (256, 256, 64, True), (1, 1, 32, False), (97, 97, 59, False), (97, 97, 96, True),
    (70, 97, 32, True), (97, 40, 32, True),  # Nq != Nk, bottom-right causal; Nq > Nk has rows that see nothing
])
def test_both_designs_match_float64_attention(Nq, Nk, D, causal):
    q, k, v = _qkv(Nq, Nk, D)
    ref_out, ref_lse, err32 = _ref(q, k, v, causal)
    out_s, _ = run_standard_forward(q, k, v, causal=causal, hazards="error")
    out_f, lse_f, _ = run_flash_forward(q, k, v, block_q=32, block_k=48, causal=causal, hazards="error")
    out_1, lse_1, _ = run_flash_forward(q, k, v, block_q=32, block_k=48, causal=causal, order="fa1", hazards="error")
    fin = np.isfinite(ref_lse)
    errs = {n: float(np.abs(o - ref_out).max()) for n, o in (("standard", out_s), ("flash", out_f), ("fa1", out_1))}
    lse_errs = {n: float(np.abs(x[fin] - ref_lse[fin]).max()) if fin.any() else 0.0
                for n, x in (("flash", lse_f), ("fa1", lse_1))}
    print(f"Nq={Nq} Nk={Nk} D={D} causal={causal}: torch float32 {err32:.2e}, kernels {errs}, lse {lse_errs}")
    for e in errs.values():
        assert e <= 2 * err32 + 2e-7  # flash-attention's criterion, plus ~1 ulp of slack
    for e in lse_errs.values():
        assert e <= 2e-6
    assert np.array_equal(np.isneginf(lse_f), ~fin) and np.array_equal(np.isneginf(lse_1), ~fin)
    assert np.all(out_f[~fin] == 0) and np.all(out_s[~fin] == 0)


def test_awkward_long_sequence():
    """N = 1025: one row past a power of two, partial last blocks in every kernel."""
    N, D = 1025, 64
    q, k, v = _qkv(N, N, D)
    for causal in (False, True):
        ref_out, ref_lse, err32 = _ref(q, k, v, causal)
        out, lse, rep = run_flash_forward(q, k, v, block_q=128, block_k=64, causal=causal)
        err = float(np.abs(out - ref_out).max())
        print(f"flash N=1025 causal={causal}: {err:.2e} (torch float32 {err32:.2e})")
        assert err <= 2 * err32 + 2e-7 and np.abs(lse - ref_lse).max() < 2e-6
        assert rep.global_bytes(kind="requested") == F32 * cost.io_flash_forward(seq=N, head_dim=D, block_q=128, causal=causal, block_k=64)
    ref_out, _, err32 = _ref(q, k, v)
    out, rep = run_standard_forward(q, k, v)
    assert np.abs(out - ref_out).max() <= 2 * err32 + 2e-7
    assert rep.global_bytes(kind="ideal") == F32 * cost.io_standard_forward(seq=N, head_dim=D)


def test_lecture_size_error_is_float32_rounding():
    """§5.3: both designs within ~4e-7 of float64 at N = 256, d = 64."""
    q, k, v = _qkv(256, 256, 64)
    ref_out, _, _ = _ref(q, k, v)
    for out in (run_standard_forward(q, k, v)[0], run_flash_forward(q, k, v)[0]):
        err = float(np.abs(out - ref_out).max())
        print("error", err)
        assert 1e-8 < err < 1.5e-6


def test_numpy_reference_equals_attention_ref():
    for causal, (Nq, Nk) in ((False, (50, 50)), (True, (40, 70)), (True, (70, 40))):
        q, k, v = (x.astype(np.float64) for x in _qkv(Nq, Nk, 24))
        o, l = reference_forward(q, k, v, causal=causal)
        t = [torch.from_numpy(x)[None, None] for x in (q, k, v)]
        o2, l2 = attention_ref(*t, causal=causal)
        np.testing.assert_allclose(o, o2[0, 0].numpy(), rtol=0, atol=1e-13)
        np.testing.assert_allclose(l, l2[0, 0].numpy(), rtol=0, atol=1e-13)


def test_torch_inputs_and_scale():
    q, k, v = (torch.randn(64, 32) for _ in range(3))
    out, lse, _ = run_flash_forward(q, k, v, scale=0.3)
    o64, l64 = attention_ref(*[x.double()[None, None] for x in (q, k, v)], scale=0.3)
    o32, _ = attention_ref(*[x[None, None] for x in (q, k, v)], scale=0.3)
    err, err32 = np.abs(out - o64[0, 0].numpy()).max(), (o32.double() - o64).abs().max().item()
    print(f"scale 0.3: kernel {err:.2e}, torch float32 {err32:.2e}")
    assert err <= 2 * err32 + 2e-7 and np.abs(lse - l64[0, 0].numpy()).max() < 2e-6


# ---------------------------------------------------------------- HBM counts = closed forms


@pytest.mark.parametrize("N, d", [(64, 32), (128, 64), (96, 128), (48, 64)])
def test_standard_counts_equal_closed_forms(N, d):
    q, k, v = _qkv(N, N, d)
    _, rep = run_standard_forward(q, k, v)
    ideal = rep.global_bytes(kind="ideal")
    print(f"N={N} d={d}: ideal {ideal:,} B, no cache {rep.global_bytes(kind='sectors'):,} B")
    assert ideal == F32 * (4 * N * d + 4 * N * N)  # §3.2, written out
    assert ideal == F32 * cost.io_standard_forward(seq=N, head_dim=d)
    for ideal_cache in (True, False):
        br = cost.io_standard_forward_breakdown(seq=N, head_dim=d, ideal_cache=ideal_cache, tile=16)
        kind = "ideal" if ideal_cache else "sectors"
        got = {(a, dr): rep.global_bytes(a, dr, kind=kind) // F32 for a in "QKVSPO" for dr in ("read", "write")}
        assert {key: n for key, n in got.items() if n} == br
    # coalesced: the tiled kernels request exactly the sectors they touch
    assert rep.global_bytes(kind="requested") == rep.global_bytes(kind="sectors")


@pytest.mark.parametrize("N, d, Br", [(128, 32, 32), (192, 64, 64), (128, 128, 16), (96, 64, 48), (64, 32, 64)])
def test_flash_counts_equal_closed_forms(N, d, Br):
    q, k, v = _qkv(N, N, d)
    _, _, rep = run_flash_forward(q, k, v, block_q=Br, block_k=Br)
    no_cache, ideal = rep.global_bytes(kind="sectors"), rep.global_bytes(kind="ideal")
    print(f"N={N} d={d} Br={Br}: no cache {no_cache:,} B, ideal {ideal:,} B")
    assert no_cache == F32 * (2 * N * d + 2 * N * d * N // Br + N)  # §5.4, written out
    assert ideal == F32 * (4 * N * d + N)
    assert no_cache == F32 * cost.io_flash_forward(seq=N, head_dim=d, block_q=Br)
    assert ideal == F32 * cost.io_flash_forward(seq=N, head_dim=d, block_q=Br, kv_in_l2=True)
    got = {(a, dr): rep.global_bytes(a, dr) // F32 for a in ("Q", "K", "V", "O", "L") for dr in ("read", "write")}
    assert {key: n for key, n in got.items() if n} == cost.io_flash_forward_breakdown(seq=N, head_dim=d, block_q=Br)
    assert rep.global_bytes(kind="requested") == no_cache
    assert {a for a, _ in rep.kernels[0].global_} == {"Q", "K", "V", "O", "L"}  # no S, no P in HBM


@pytest.mark.parametrize("N, B, d", [(256, 64, 64), (128, 16, 32), (160, 32, 32), (256, 8, 16)])
def test_causal_skipping_saves_what_section_6_2_says(N, B, d):
    q, k, v = _qkv(N, N, d)
    _, _, full = run_flash_forward(q, k, v, block_q=B, block_k=B)
    _, _, skip = run_flash_forward(q, k, v, block_q=B, block_k=B, causal=True)
    T = N // B
    pairs = skip.global_bytes("K", "read") // (F32 * B * d)
    print(f"N={N} B={B}: {pairs}/{T * T} block pairs, K/V bytes {_kv_bytes(full):,} -> {_kv_bytes(skip):,}")
    assert pairs == T * (T + 1) // 2 == cost.causal_block_pairs(T)
    assert _kv_bytes(full) == 2 * F32 * T * T * B * d
    assert _kv_bytes(full) - _kv_bytes(skip) == 2 * F32 * (T * T - T * (T + 1) // 2) * B * d
    assert _kv_bytes(full) - _kv_bytes(skip) == cost.causal_kv_bytes_saved(seq=N, head_dim=d, block_q=B, dtype_bytes=F32)
    assert skip.global_bytes(kind="sectors") == F32 * cost.io_flash_forward(seq=N, head_dim=d, block_q=B, causal=True)
    assert skip.barriers == 2 * T + 2 * cost.causal_block_pairs(T)  # per block: Q, O; per computed pair: 2
    if (N, B) == (256, 64):  # the lecture's example: 10/16 pairs, 524,288 -> 327,680 bytes
        assert (pairs, _kv_bytes(full), _kv_bytes(skip)) == (10, 524_288, 327_680)
    if T == 32:  # "T = 32 时比例为 51.6%"
        assert f"{100 * pairs / T**2:.1f}%" == "51.6%"


def test_fa1_order_counts_equal_closed_form():
    N, d, B = 128, 32, 32
    q, k, v = _qkv(N, N, d)
    _, _, rep = run_flash_forward(q, k, v, block_q=B, block_k=B, order="fa1")
    got = {(a, dr): rep.global_bytes(a, dr) // F32 for a in ("Q", "K", "V", "O", "m", "l") for dr in ("read", "write")}
    assert {key: n for key, n in got.items() if n} == cost.io_fa1_forward_breakdown(seq=N, head_dim=d, block_q=B, block_k=B)
    Tc = N // B
    assert sum(got.values()) == 2 * N * d + Tc * (3 * N * d + 4 * N)  # §6.3, written out
    assert rep.kernels[0].grid == (1, 1, 1)  # one block per head: FA1's only parallelism


def test_l2_model_reproduces_kv_in_l2():
    """With an L2 that holds K and V, the LRU misses equal the ideal-cache count (4Nd + N)."""
    N, d, B = 128, 32, 32
    q, k, v = _qkv(N, N, d)
    _, _, rep = run_flash_forward(q, k, v, block_q=B, block_k=B, l2_bytes=1 << 20)
    assert rep.global_bytes(kind="l2") == F32 * cost.io_flash_forward(seq=N, head_dim=d, block_q=B, kv_in_l2=True)
    _, _, one = run_flash_forward(q, k, v, block_q=B, block_k=B, l2_bytes=32)
    assert one.global_bytes(kind="l2") == one.global_bytes(kind="sectors")  # one sector of L2: nothing is reused
    _, _, small = run_flash_forward(q, k, v, block_q=B, block_k=B, l2_bytes=4096)
    # the blocks run in lock step and read K_j at the same time: 4 KiB (one tile) is enough to share it
    assert small.global_bytes(kind="l2") == rep.global_bytes(kind="l2")


# ---------------------------------------------------------------- backward (§7.2–7.4)


def _grads(q, k, v, do, causal, dtype):
    t = [torch.from_numpy(x).to(dtype)[None, None].requires_grad_() for x in (q, k, v)]
    o, _ = attention_ref(*t, causal=causal)
    o.backward(torch.from_numpy(do).to(dtype)[None, None])
    return [x.grad[0, 0].double().numpy() for x in t]


@pytest.mark.parametrize("Nq, Nk, D, Br, Bc, causal", [
    (300, 300, 32, 64, 48, False), (300, 300, 32, 64, 48, True), (97, 60, 59, 32, 16, True), (1, 1, 16, 16, 16, False),
])
def test_backward_matches_autograd(Nq, Nk, D, Br, Bc, causal):
    q, k, v = _qkv(Nq, Nk, D)
    do = torch.randn(Nq, D).numpy()
    dq, dk, dv, rep = run_flash_backward(q, k, v, do, block_q=Br, block_k=Bc, causal=causal, hazards="error")
    g64 = _grads(q, k, v, do, causal, torch.float64)
    g32 = _grads(q, k, v, do, causal, torch.float32)
    for name, got, ref, r32 in zip(("dq", "dk", "dv"), (dq, dk, dv), g64, g32):
        err, err32 = np.abs(got - ref).max(), np.abs(r32 - ref).max()
        print(f"{name}: kernel {err:.2e}, torch float32 {err32:.2e}")
        assert err <= 2 * err32 + 5e-7
    assert rep.hazards == 0


def test_backward_counts_equal_closed_forms():
    """§7.4: N = 300, d = 32, Bc = 48 -> 7 × 300 × 32 = 67,200 elements added into dQ atomically."""
    N, d, Br, Bc = 300, 32, 64, 48
    q, k, v = _qkv(N, N, d)
    do = torch.randn(N, d).numpy()
    for causal in (False, True):
        _, _, _, rep = run_flash_backward(q, k, v, do, block_q=Br, block_k=Bc, causal=causal)
        atomics = rep.atomics
        assert atomics == cost.dq_atomic_elements(seq=N, head_dim=d, block_k=Bc, block_q=Br, causal=causal)
        if not causal:
            assert atomics == 67_200 == math.ceil(N / Bc) * N * d
        br = cost.io_flash_backward_breakdown(seq=N, head_dim=d, block_q=Br, block_k=Bc, causal=causal)
        got = {(a, dr): rep.global_bytes(a, dr, kind="requested") // F32
               for a in ("Q", "K", "V", "O", "dO", "L", "dK", "dV") for dr in ("read", "write")}
        got = {key: n for key, n in got.items() if n}
        got[("dQ", "read")] = got[("dQ", "write")] = rep.global_bytes("dQ", "atomic", kind="requested") // F32
        assert got == br
        ideal = {(a, dr): rep.global_bytes(a, dr, kind="ideal") // F32
                 for a in ("Q", "K", "V", "O", "dO", "L", "dK", "dV") for dr in ("read", "write")}
        ideal = {key: n for key, n in ideal.items() if n}
        ideal[("dQ", "write")] = rep.global_bytes("dQ", "atomic", kind="ideal") // F32
        assert ideal == cost.io_flash_backward_breakdown(seq=N, head_dim=d, block_q=Br, block_k=Bc, ideal_cache=True,
                                                             causal=causal)


# ---------------------------------------------------------------- shared memory, barriers


def test_shared_memory_counts_at_lecture_size():
    """§5.3 aside: 71,680 wavefronts (flash) vs 616,448 (standard) for these kernel writings."""
    q, k, v = _qkv(256, 256, 64)
    _, rep_s = run_standard_forward(q, k, v)
    _, _, rep_f = run_flash_forward(q, k, v)
    assert rep_f.wavefronts() == 71_680 and rep_s.wavefronts() == 616_448
    # flash: broadcast K_j[c] / V_j[c] float4 reads are 1 wavefront each, float4 tile stores 4, no conflicts
    ks = rep_f.kernels[0].shared
    n_instr = ks[("Ks", "read")]["instructions"]
    assert ks[("Ks", "read")]["wavefronts"] == n_instr == 4 * 2 * 4 * 64 * 16  # blocks·warps·tiles·c·d/4
    assert sum(c["wavefronts"] - c["ideal_wavefronts"] for c in ks.values()) == 0
    # the matmul's 17-column padding: column reads of Bs are conflict-free
    mm = rep_s["S=QKᵀ/√d"].shared
    assert mm[("Bs", "read")]["wavefronts"] == mm[("Bs", "read")]["instructions"]
    assert rep_s["P=softmax(S)"].barriers == 256 * 2 * (1 + 8 + 1)  # 2 reductions over 256 threads


def test_kernels_have_no_hazards_and_catch_a_missing_barrier():
    q, k, v = _qkv(64, 64, 32)
    ref_out, _, err32 = _ref(q, k, v, causal=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out_s, rep_s = run_standard_forward(q, k, v, causal=True, hazards="error")
        out_f, _, rep_f = run_flash_forward(q, k, v, block_q=32, block_k=32, causal=True, hazards="error")
    assert rep_s.hazards == rep_f.hazards == 0
    for out in (out_s, out_f):
        assert np.abs(out - ref_out).max() <= 2 * err32 + 2e-7

    def flash_without_barriers(ctx, *args):
        ctx.syncthreads = lambda: None  # every __syncthreads() deleted
        flash_fwd(ctx, *args)

    dev = sim.Device()
    Q, K, V = dev.array("Q", q), dev.array("K", k), dev.array("V", v)
    O, L = dev.empty("O", (64, 32)), dev.empty("L", 64)
    with pytest.warns(sim.SharedMemoryHazardWarning, match=r"flash_without_barriers.*hazard on '(Qs|Ks|Vs|Os)'"):
        st = dev.launch(flash_without_barriers, 1, 64, Q, K, V, O, L, 64, 64, 32, 64, 32, np.float32(0.2), False)
    assert st.hazards > 0 and st.barriers == 0


@pytest.mark.parametrize("D, Br, Bc, order", [(64, 64, 64, "fa2"), (59, 32, 48, "fa2"), (32, 16, 64, "fa1"),
                                              (7, 64, 16, "fa1")])
def test_flash_shared_bytes_is_what_the_kernel_declares(D, Br, Bc, order):
    q, k, v = _qkv(40, 40, D)
    _, _, rep = run_flash_forward(q, k, v, block_q=Br, block_k=Bc, order=order)
    declared = rep.kernels[0].shared_bytes_per_block
    assert flash_fwd_shared_bytes(head_dim=D, block_q=Br, block_k=Bc, order=order) == declared
    assert declared >= 4 * (Br * (D + 1) * (2 if order == "fa1" else 1) + 2 * Bc * D)  # the tiles, float32


# ---------------------------------------------------------------- input checks


@pytest.mark.parametrize("make, kw, exc, match", [
    (lambda: (np.ones((4, 8), np.float32), np.ones((4, 9), np.float32), np.ones((4, 9), np.float32)), {},
     ValueError, "k has head dim 9 but q has 8"),
    (lambda: (np.ones(8, np.float32),) * 3, {}, ValueError, r"q must be one head of shape \(N, D\)"),
    (lambda: (np.ones((4, 8), np.int64),) * 3, {}, TypeError, "q must be a float array"),
    (lambda: ([[1.0]],) * 3, {}, TypeError, "numpy array or a torch tensor"),
    (lambda: (np.full((4, 8), np.nan, np.float32),) * 3, {}, ValueError, "NaN"),
    (lambda: (np.ones((4, 8), np.float32),) * 3, {"block_q": 2048}, ValueError, "block_q"),
    (lambda: (np.ones((4, 8), np.float32),) * 3, {"block_k": 0}, ValueError, "block_k must be a positive integer"),
    (lambda: (np.ones((4, 8), np.float32),) * 3, {"order": "fa3"}, ValueError, "order must be"),
    (lambda: (np.ones((4, 8), np.float32),) * 3, {"causal": 1}, ValueError, "causal must be True or False"),
])
def test_flash_input_errors(make, kw, exc, match):
    with pytest.raises(exc, match=match):
        run_flash_forward(*make(), **kw)


def test_backward_input_errors():
    x = np.ones((4, 8), np.float32)
    with pytest.raises(ValueError, match="dout must have q's shape"):
        run_flash_backward(x, x, x, np.ones((5, 8), np.float32))
    with pytest.raises(ValueError, match="give both out and lse"):
        run_flash_backward(x, x, x, x, out=x)
    with pytest.raises(ValueError, match="block_k is the number of threads"):
        run_flash_backward(x, x, x, x, block_k=4096)


def test_standard_input_errors():
    x = np.ones((4, 8), np.float32)
    with pytest.raises(ValueError, match="tile"):
        run_standard_forward(x, x, x, tile=40)
    with pytest.raises(ValueError, match="softmax_threads"):
        run_standard_forward(x, x, x, softmax_threads=100)
    with pytest.raises(ValueError, match="v must have the 4 rows of k"):
        run_standard_forward(x, x, np.ones((5, 8), np.float32))
