"""attnlab.cost.io: HBM traffic per head against the lecture's printed figures (§3.2, §5.3, §6.1–6.3,
§7.4–7.5, exercises 4–5) and against loops that walk the blocks and count what each one moves."""

from __future__ import annotations

import math

import pytest

from attnlab.cost import (
    block_pairs,
    causal_block_pairs,
    causal_fraction,
    causal_kv_bytes_saved,
    dq_atomic_elements,
    io_fa1_forward,
    io_flash_backward,
    io_flash_backward_breakdown,
    io_flash_forward,
    io_flash_forward_breakdown,
    io_standard_backward,
    io_standard_backward_breakdown,
    io_standard_forward,
    io_standard_forward_breakdown,
    sram_bytes,
    standard_forward_kernels,
)

KiB = 1024


def r1(x):  # the lecture prints one decimal
    return round(x, 1)


# ============================================================ the lecture's printed figures


def test_s3_2_first_standard_kernel_does_about_2d_flops_per_element():
    # §3.2: kernel 1 does 2N²d FLOPs over 2Nd + N² elements, ≈ 2d per element when N >> d
    N, d = 10**6, 128
    kern1, *_ = standard_forward_kernels(seq=N, head_dim=d)
    assert kern1.flops / kern1.elements == pytest.approx(2 * d, rel=1e-3)


def test_s5_3_ideal_cache_gap_is_5x():
    N, d = 256, 64
    assert io_standard_forward(seq=N, head_dim=d) == 4 * N * d + 4 * N * N  # §3.2's 4Nd + 4N²
    assert io_flash_forward(seq=N, head_dim=d, block_q=64, kv_in_l2=True) == 4 * N * d + N  # §5.4's 4Nd + N
    assert r1(io_standard_forward(seq=N, head_dim=d) / io_flash_forward(seq=N, head_dim=d, block_q=64,
                                                                        kv_in_l2=True)) == 5.0


def test_s6_1_shared_memory_of_a_block_pair():
    # Br = Bc = d = 128, FP16: Q 32 KiB + K and V double-buffered, 4 × 32 KiB
    assert sram_bytes(block_q=128, block_k=128, head_dim=128) == 160 * KiB
    assert sram_bytes(block_q=128, block_k=128, head_dim=128, double_buffer=False) == 96 * KiB


def test_s6_2_causal_block_skipping():
    assert causal_block_pairs(4) == 10  # N = 256, B = 64: 10 of 16 pairs
    shape = dict(seq=256, head_dim=64, block_q=64)
    b, c = io_flash_forward_breakdown(**shape), io_flash_forward_breakdown(**shape, causal=True)
    kv = [("K", "read"), ("V", "read")]
    assert sum(b[k] for k in kv) * 4 == 524_288 and sum(c[k] for k in kv) * 4 == 327_680  # FP32 bytes
    assert causal_kv_bytes_saved(**shape, dtype_bytes=4) == 524_288 - 327_680
    assert r1(100 * causal_fraction(32)) == 51.6
    assert block_pairs(seq=32 * 16, block_q=16, block_k=16, causal=True).pairs == causal_block_pairs(32)


def test_s6_3_fa1_vs_fa2_traffic():
    shape = dict(seq=4096, head_dim=128, block_q=128)
    fa1, fa2 = io_fa1_forward(**shape, block_k=128), io_flash_forward(**shape)
    l2 = io_flash_forward(**shape, kv_in_l2=True)
    assert (r1(fa1 / 1e6), r1(fa2 / 1e6), r1(l2 / 1e6)) == (51.9, 34.6, 2.1)


def test_s7_4_dq_atomics():
    assert dq_atomic_elements(seq=300, head_dim=32, block_k=48) == 67_200  # 7 K/V blocks × 300 × 32


def test_s7_5_standard_backward_7n2_and_flash_lower_bound():
    N, d = 4096, 128
    bd = io_standard_backward_breakdown(seq=N, head_dim=d)
    nn = sum(v for (a, _), v in bd.items() if a in {"S", "P", "dP", "dS"})
    assert nn == 7 * N * N  # "the standard backward's 7N²"
    assert io_standard_backward(seq=N, head_dim=d) == 7 * N * N + 7 * N * d
    assert io_flash_backward(seq=N, head_dim=d, block_q=128, block_k=128, ideal_cache=True) == 8 * N * d + N


def test_exercise_4_flash_io():
    N, d = 4096, 128
    n = io_flash_forward(seq=N, head_dim=d, block_q=128)
    assert n == 34_607_104  # 2Nd + 2Nd·N/Br + N
    b = io_flash_forward_breakdown(seq=N, head_dim=d, block_q=128)
    assert round(100 * (b["K", "read"] + b["V", "read"]) / n) == 97  # "97% of it is K/V read per Q block"


def test_exercise_5_causal_pairs():
    assert causal_block_pairs(8) == 36  # of 64
    assert causal_fraction(8) == 0.5625
    assert causal_fraction(10**6) == pytest.approx(0.5, abs=1e-6)


# ============================================================ against loops over the blocks


def _walk_flash_forward(N, d, Br, Bc, causal, kv_in_l2):
    """Walk the FA2 loops and count the elements each block moves."""
    reads = {"Q": 0, "K": 0, "V": 0}
    pairs = 0
    for i0 in range(0, N, Br):
        rows = range(i0, min(i0 + Br, N))
        reads["Q"] += len(rows) * d
        for j0 in range(0, N, Bc):
            cols = range(j0, min(j0 + Bc, N))
            if causal and not any(j <= i for i in rows for j in cols):
                continue  # fully masked: skipped, K/V not read
            pairs += 1
            reads["K"] += len(cols) * d
            reads["V"] += len(cols) * d
    if kv_in_l2:
        reads["K"] = reads["V"] = N * d
    return sum(reads.values()) + N * d + N, pairs  # + O and L written once


@pytest.mark.parametrize("N", [1, 97, 256, 1025])
@pytest.mark.parametrize("Br,Bc", [(64, 64), (128, 32), (16, 48)])
@pytest.mark.parametrize("causal", [False, True])
def test_flash_forward_io_against_the_block_walk(N, Br, Bc, causal):
    d = 59
    for l2 in (False, True):
        want, pairs = _walk_flash_forward(N, d, Br, Bc, causal, l2)
        assert io_flash_forward(seq=N, head_dim=d, block_q=Br, block_k=Bc, causal=causal, kv_in_l2=l2) == want
    assert block_pairs(seq=N, block_q=Br, block_k=Bc, causal=causal).pairs == pairs
    if not causal and N % Br == 0:  # the lecture's closed form 2Nd + 2Nd·N/Br + N
        assert io_flash_forward(seq=N, head_dim=d, block_q=Br, block_k=Bc) == 2 * N * d + 2 * N * d * N // Br + N


@pytest.mark.parametrize("N,Br,Bc", [(97, 32, 32), (300, 64, 48), (1025, 128, 64), (1, 16, 16)])
@pytest.mark.parametrize("causal", [False, True])
def test_flash_backward_io_against_the_block_walk(N, Br, Bc, causal):
    d = 96
    q_rows = 0  # K/V blocks outer: rows of Q, O, dO, L (and dQ) each K/V block visits
    for j0 in range(0, N, Bc):
        cols = range(j0, min(j0 + Bc, N))
        for i0 in range(0, N, Br):
            rows = range(i0, min(i0 + Br, N))
            if causal and not any(j <= i for i in rows for j in cols):
                continue
            q_rows += len(rows)
    want = 4 * N * d + q_rows * (3 * d + 1) + 2 * q_rows * d  # K, V, dK, dV; Q, O, dO, L; dQ read + write
    shape = dict(seq=N, head_dim=d, block_q=Br, block_k=Bc)
    assert io_flash_backward(**shape, causal=causal) == want
    assert dq_atomic_elements(seq=N, head_dim=d, block_k=Bc, block_q=Br, causal=causal) == q_rows * d
    assert io_flash_backward(**shape, causal=causal, ideal_cache=True) == 8 * N * d + N
    assert io_flash_backward_breakdown(**shape)["K", "read"] == N * d


@pytest.mark.parametrize("N,d,T", [(40, 24, 16), (97, 59, 16), (64, 64, 32)])
def test_tiled_standard_io_against_the_tile_walk(N, d, T):
    def gemm(M, K, Nc):  # elements of A and B that T×T tiles load (in-bounds only)
        a = b = 0
        for r0 in range(0, M, T):
            for c0 in range(0, Nc, T):
                for k0 in range(0, K, T):
                    kk = min(T, K - k0)
                    a += min(T, M - r0) * kk
                    b += kk * min(T, Nc - c0)
        return a, b

    q, k = gemm(N, d, N)
    p, v = gemm(N, N, d)
    want = q + k + N * N + N * N + N * N + p + v + N * d  # S written, read; P written, read; O written
    assert io_standard_forward(seq=N, head_dim=d, ideal_cache=False, tile=T) == want
    bd = io_standard_forward_breakdown(seq=N, head_dim=d)
    assert bd == {("Q", "read"): N * d, ("K", "read"): N * d, ("S", "write"): N * N, ("S", "read"): N * N,
                  ("P", "write"): N * N, ("P", "read"): N * N, ("V", "read"): N * d, ("O", "write"): N * d}
    assert io_standard_backward(seq=N, head_dim=d, ideal_cache=False, tile=T) > io_standard_backward(seq=N, head_dim=d)


def test_fa1_against_the_block_walk_with_a_partial_last_block():
    N, d, Br, Bc = 1000, 96, 64, 96
    moved = 2 * N * d  # K, V once
    for _ in range(0, N, Bc):  # K/V block outer: every Q block's Q, O, m, ℓ read, O, m, ℓ written
        for i0 in range(0, N, Br):
            rows = min(Br, N - i0)
            moved += rows * d + 2 * rows * d + 2 * 2 * rows
    assert io_fa1_forward(seq=N, head_dim=d, block_q=Br, block_k=Bc) == moved == \
        2 * N * d + math.ceil(N / Bc) * (3 * N * d + 4 * N)


@pytest.mark.parametrize("call,match", [
    (lambda: io_flash_forward(seq=0, head_dim=64, block_q=64), "seq"),
    (lambda: io_flash_forward(seq=64, head_dim=64, block_q=64.0), "block_q"),
    (lambda: io_standard_forward(seq=64, head_dim=-1), "head_dim"),
    (lambda: sram_bytes(block_q=64, block_k=64, head_dim=0), "head_dim"),
    (lambda: io_flash_forward(64, 64, 64), "positional"),
])
def test_bad_input_is_refused(call, match):
    with pytest.raises((ValueError, TypeError), match=match):
        call()
