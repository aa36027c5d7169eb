"""attnlab.cost: the lecture's printed cost figures (§3, §5–§8) and §12 exercises come out of the
closed forms; shapes and GPUs the lecture never printed are checked against arithmetic or brute-force
counts written here; bad input is refused; `attnlab estimate` works end to end. No torch needed."""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnlab import cost
from attnlab.cost import (
    GPU,
    GPUS,
    attention_flops,
    best_num_splits,
    block_pairs,
    causal_block_pairs,
    causal_fraction,
    decode_split_cost,
    decode_split_time,
    estimate,
    estimate_backward,
    estimate_forward,
    get_gpu,
    io_fa1_forward,
    io_flash_backward,
    io_flash_backward_breakdown,
    io_flash_forward,
    io_flash_forward_breakdown,
    io_standard_backward,
    io_standard_backward_breakdown,
    io_standard_forward,
    io_standard_forward_breakdown,
    kernel_time,
    kv_cache_bytes,
    layer_costs,
    recompute_crossover_d,
    recompute_ratio,
    sram_bytes,
)

GiB, MiB = 2**30, 2**20
H100 = GPUS["H100"]


def r1(x):  # the lecture prints one decimal
    return round(x, 1)


# ============================================================ the lecture's printed figures


def test_gpu_presets_match_the_lecture():
    assert (H100.tensor_flops, H100.hbm_bw, H100.sms, H100.smem_per_sm, H100.l2_bytes, H100.memory) == (
        989e12, 3.35e12, 132, 228 * 1024, 50 * MiB, 80e9)
    assert round(H100.ridge) == 295  # §3.2
    assert 29e6 < H100.smem_total < 32e6  # §3.3 "132 × 228 KB ≈ 30 MB"
    assert round(GPUS["V100"].ridge) == 139
    assert (GPUS["A100"].tensor_flops, GPUS["A100"].fp32_flops) == (312e12, 19.5e12)  # §6.3, FA2 paper
    assert GPUS["A100"].tensor_flops / GPUS["A100"].fp32_flops == 16  # "each non-matmul FLOP costs 16"
    assert (GPUS["H200"].tensor_flops, GPUS["H200"].hbm_bw, GPUS["H200"].sms, GPUS["H200"].memory) == (989e12, 4.8e12, 132, 141e9)
    assert {"V100", "A100", "H100", "H200", "B200"} <= set(GPUS)


def test_s3_layer_flops_scores_memory_and_traffic():
    rows = {r.seq: r for r in cost.layer_flops_table(seqs=(2048, 32768, 131072))}
    print({n: (r.attention_share, r.scores_bytes / GiB, r.traffic_time, r.math_time) for n, r in rows.items()})
    assert round(100 * rows[131072].attention_share) == 73  # §3.1: 73% at 128K
    assert rows[2048].attention_share < 0.05  # "negligible for short sequences"
    assert rows[32768].scores_bytes == 64 * GiB  # §3.2: 64 GiB ...
    assert round(100 * rows[32768].scores_share_of_memory) == 86  # ... = 86% of an 80 GB H100
    assert round(rows[32768].traffic_time * 1e3) == 82  # ~82 ms of traffic
    assert round(rows[32768].math_time * 1e3) == 18  # ~18 ms of matmul (masked half included)


def test_s3_standard_kernels_are_memory_bound():
    est = estimate_forward()  # N = 4096, D = 128, 32 heads, FP16, H100
    k1 = est.standard[0]
    assert k1.intensity < H100.ridge  # §3.2: ~128 FLOP/byte < 295
    assert all(k.bound == "memory" for k in est.standard)
    # §3.2: kernel 1 does 2N²d / (2Nd + N²) ≈ 2d FLOP per element when N >> d
    N, d = 10**6, 128
    (kern1, *_) = cost.standard_forward_kernels(N, d)
    assert kern1.flops / kern1.elements == pytest.approx(2 * d, rel=1e-3)


def test_s5_3_ideal_cache_gap_is_5x():
    N, d = 256, 64
    assert io_standard_forward(N, d) == 4 * N * d + 4 * N * N
    assert io_flash_forward(N, d, 64, kv_in_l2=True) == 4 * N * d + N
    assert r1(io_standard_forward(N, d) / io_flash_forward(N, d, 64, kv_in_l2=True)) == 5.0


def test_s5_5_h100_forward_estimate():
    est = estimate_forward(seq=4096, head_dim=128, heads=32, gpu="H100")
    print([(k.name, k.time * 1e6, k.bound) for k in est.standard + est.flash_l2 + est.flash_hbm])
    assert len(est.standard) == 3  # 3 launches
    assert round(est.standard_time * 1e6) == 1334  # "standard ≈ 1,334 µs (3 launches)"
    assert round(est.flash_l2_time * 1e6) == 282  # "flash ≈ 282 µs"
    assert est.flash_l2[0].bound == "compute"
    assert r1(est.speedup_l2) == 4.7
    assert r1(est.speedup_hbm) == 2.0


def test_s6_1_block_sizes_in_shared_memory():
    assert sram_bytes(128, 128, 128) == (128 * 128 + 2 * 2 * 128 * 128) * 2  # Q + double-buffered K, V
    rows = {(r.block_q, r.block_k): r for r in cost.block_size_table(d=128, gpu="H100")}
    assert rows[128, 128].fits and rows[256, 128].fits
    assert not rows[128, 256].fits and not rows[256, 256].fits
    assert rows[64, 64].kv_passes_per_4k == 64


def test_s6_2_causal_block_skipping():
    assert causal_block_pairs(4) == 10  # N = 256, B = 64: 10 of 16 pairs
    b = io_flash_forward_breakdown(256, 64, 64)
    c = io_flash_forward_breakdown(256, 64, 64, causal=True)
    kv = [("K", "read"), ("V", "read")]
    assert sum(b[k] for k in kv) * 4 == 524_288 and sum(c[k] for k in kv) * 4 == 327_680  # FP32 bytes
    assert cost.causal_kv_bytes_saved(256, 64, 64, dtype_bytes=4) == 524_288 - 327_680
    assert r1(100 * causal_fraction(32)) == 51.6
    assert block_pairs(32 * 16, 16, 16, causal=True).pairs == causal_block_pairs(32)


def test_s6_3_fa1_vs_fa2_traffic():
    N, d = 4096, 128
    fa1, fa2 = io_fa1_forward(N, d, 128, 128), io_flash_forward(N, d, 128)
    l2 = io_flash_forward(N, d, 128, kv_in_l2=True)
    print(fa1, fa2, l2)
    assert (r1(fa1 / 1e6), r1(fa2 / 1e6), r1(l2 / 1e6)) == (51.9, 34.6, 2.1)
    # derived from the description: K, V once; per K/V block all of Q, and O, ℓ, m read + written
    Tc = N // 128
    assert fa1 == 2 * N * d + Tc * (N * d + 2 * N * d + 2 * 2 * N)


def test_s7_1_s7_2_store_p_or_l():
    row = {r.seq: r for r in cost.p_vs_l_table(seqs=(65536,), heads=32)}[65536]
    assert row.p_bytes == 256 * GiB and row.l_bytes == 8 * MiB
    assert row.ratio == 32768


def test_s7_4_dq_atomics():
    assert cost.dq_atomic_elements(300, 32, 48) == 67_200 == 7 * 300 * 32


def test_s7_5_backward_more_flops_less_traffic():
    N, d = 4096, 128
    bd = io_standard_backward_breakdown(N, d)
    nn = sum(v for (a, _), v in bd.items() if a in {"S", "P", "dP", "dS"})
    assert nn == 7 * N * N  # "the standard backward's 7N²"
    assert io_standard_backward(N, d) == 7 * N * N + 7 * N * d
    assert io_flash_backward(N, d, 128, 128, ideal_cache=True) == 8 * N * d + N
    est = cost.backward_estimate(seq=N, head_dim=d, heads=32, gpu="H100")
    print(est.flops_ratio, est.traffic_ratio, est.speedup)
    assert est.flops_ratio == pytest.approx(1.25)  # 25% more backward FLOPs
    assert round(est.traffic_ratio) == 29  # 1/29 of the traffic
    assert r1(est.speedup) == 3.3
    assert attention_flops(seq_q=N, head_dim=d, pass_="bwd") == 2.5 * attention_flops(seq_q=N, head_dim=d)


def test_s7_6_recompute_criterion():
    rows = {r.gpu: r for r in cost.recompute_table(d=128)}
    assert set(rows) == {"V100", "A100", "H100", "B200"}
    assert all(r.ratio < 1 and r.recompute_cheaper for r in rows.values())  # recompute wins on all four
    assert rows["H100"].ratio == pytest.approx(128 / H100.ridge)
    assert round(recompute_crossover_d("V100")) == 139  # exercise 6: d > 139
    assert recompute_ratio(139, "V100") > 1 > recompute_ratio(138, "V100")


def test_s8_2_kv_cache():
    assert kv_cache_bytes(layers=32, d_model=4096, seq=1) == MiB // 2  # 7B: 0.5 MiB per token
    assert kv_cache_bytes(layers=32, d_model=4096, seq=2048, batch=128) == 128 * GiB


def test_s8_3_prefill_vs_decode():
    rows = cost.prefill_decode_table(prefill_seq=2048, context=2048, batches=(1, 128))
    pre, d1, d128 = rows
    print([(r.phase, r.batch, r.attention_share, r.time_per_token) for r in rows])
    assert round(100 * d1.attention_share) == 8 and round(100 * d128.attention_share) == 91
    assert round(d1.time_per_token / pre.time_per_token, -2) == 300  # "about 300×"
    assert pre.linear_intensity > H100.ridge > d1.linear_intensity  # prefill compute-bound, decode not
    assert d1.attention_intensity == pytest.approx(1, abs=0.01) == d128.attention_intensity


def test_s8_4_flash_decoding_waves():
    kw = dict(batch=1, heads=32, seq=32768, head_dim=128, gpu="H100")
    t4, t5 = decode_split_time(splits=4, **kw), decode_split_time(splits=5, **kw)
    print(t4 * 1e6, t5 * 1e6)
    assert (round(t4 * 1e6), round(t5 * 1e6)) == (169, 268)
    assert round(100 * decode_split_cost(splits=1, **kw).sm_use) == 24  # 32 of 132 SMs
    assert decode_split_cost(splits=5, **kw).waves == 2
    assert best_num_splits(**kw) == 4
    rows = [r for r in cost.decode_split_table(seqs=(32768,)) if r.splits in (4, 5)]
    assert [round(r.time * 1e6) for r in rows] == [169, 268] and rows[0].best


# ============================================================ §12 exercises


def test_exercise_1_scores_of_a_13b_layer():
    s = cost.scores_bytes(heads=40, seq_q=8192)
    assert s == 40 * 8192**2 * 2 and s / GiB == 5.0
    assert 40 * s / GiB == 200  # all 40 layers


def test_exercise_4_flash_io():
    N, d = 4096, 128
    n = io_flash_forward(N, d, 128)
    assert n == 2 * N * d + 2 * N * d * (N // 128) + N == 34_607_104
    b = io_flash_forward_breakdown(N, d, 128)
    assert round(100 * (b["K", "read"] + b["V", "read"]) / n) == 97  # "97% of it is K/V read per Q block"


def test_exercise_5_causal_pairs():
    assert (causal_block_pairs(8), 8 * 8) == (36, 64)
    assert causal_fraction(8) == 0.5625
    assert causal_fraction(10**6) == pytest.approx(0.5, abs=1e-6)


def test_exercise_6_crossover():
    assert round(recompute_crossover_d(get_gpu("v100"))) == 139


def test_exercise_7_gqa():
    kw = dict(context=4096, head_dim=128)
    mha = cost.decode_attention_intensity(heads=64, **kw)
    gqa = cost.decode_attention_intensity(heads=64, kv_heads=8, **kw)
    assert round(gqa / mha) == 8
    assert kv_cache_bytes(layers=80, kv_heads=8, head_dim=128, seq=4096) * 8 == kv_cache_bytes(
        layers=80, d_model=64 * 128, seq=4096)


def test_exercise_8_two_splits():
    kw = dict(batch=2, heads=32, seq=65536, head_dim=128, gpu="H100")
    assert best_num_splits(**kw) == 2
    t2, t3 = decode_split_time(splits=2, **kw), decode_split_time(splits=3, **kw)
    assert t3 > t2  # 2 waves of 1/192 = 1/96 vs 1 wave of 1/128
    assert (t3 - H100.launch_overhead) / (t2 - H100.launch_overhead) == pytest.approx(128 / 96, rel=1e-3)


# ============================================================ shapes and GPUs the lecture never printed


@settings(max_examples=60, deadline=None)
@given(B=st.integers(1, 4), H=st.integers(1, 8), Nq=st.integers(1, 40), Nk=st.integers(1, 40), D=st.integers(1, 96),
       causal=st.booleans())
def test_attention_flops_against_pair_count(B, H, Nq, Nk, D, causal):
    if not causal:
        pairs = Nq * Nk
    elif Nq == Nk:
        pairs = Nq * Nq / 2  # the lecture's "half"
    else:  # bottom-right: query i sees keys j <= i + Nk - Nq
        pairs = sum(1 for i in range(Nq) for j in range(Nk) if j <= i + Nk - Nq)
    f = attention_flops(batch=B, heads=H, seq_q=Nq, seq_k=Nk, head_dim=D, causal=causal)
    assert f == 4 * B * H * pairs * D
    assert attention_flops(batch=B, heads=H, seq_q=Nq, seq_k=Nk, head_dim=D, causal=causal, pass_="fwd_bwd") == 3.5 * f


def _brute_flash_forward(N, d, Br, Bc, causal, kv_in_l2):
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
def test_flash_forward_io_against_brute_force(N, Br, Bc, causal):
    d = 59
    for l2 in (False, True):
        want, pairs = _brute_flash_forward(N, d, Br, Bc, causal, l2)
        assert io_flash_forward(N, d, Br, block_k=Bc, causal=causal, kv_in_l2=l2) == want
    assert block_pairs(N, Br, Bc, causal=causal).pairs == pairs
    if not causal and N % Br == 0:  # the lecture's closed form
        assert io_flash_forward(N, d, Br, block_k=Bc) == 2 * N * d + 2 * N * d * N // Br + N


@pytest.mark.parametrize("N,Br,Bc", [(97, 32, 32), (300, 64, 48), (1025, 128, 64), (1, 16, 16)])
@pytest.mark.parametrize("causal", [False, True])
def test_flash_backward_io_against_brute_force(N, Br, Bc, causal):
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
    assert io_flash_backward(N, d, Br, Bc, causal=causal) == want
    assert cost.dq_atomic_elements(N, d, Bc, block_q=Br, causal=causal) == q_rows * d
    assert io_flash_backward(N, d, Br, Bc, causal=causal, ideal_cache=True) == 8 * N * d + N
    assert io_flash_backward_breakdown(N, d, Br, Bc)["K", "read"] == N * d


@pytest.mark.parametrize("N,d,T", [(40, 24, 16), (97, 59, 16), (64, 64, 32)])
def test_tiled_standard_io_against_brute_force(N, d, T):
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
    assert io_standard_forward(N, d, ideal_cache=False, tile=T) == want
    bd = io_standard_forward_breakdown(N, d)
    assert bd == {("Q", "read"): N * d, ("K", "read"): N * d, ("S", "write"): N * N, ("S", "read"): N * N,
                  ("P", "write"): N * N, ("P", "read"): N * N, ("V", "read"): N * d, ("O", "write"): N * d}
    assert io_standard_backward(N, d, ideal_cache=False, tile=T) > io_standard_backward(N, d)


def test_fa1_with_a_partial_last_block():
    N, d, Bc = 1000, 96, 96
    Tc = math.ceil(N / Bc)
    assert io_fa1_forward(N, d, 64, Bc) == 2 * N * d + Tc * (3 * N * d + 4 * N)


def _roof(flops, nbytes, g, fp32=0.0):
    return max(flops / g.tensor_flops, fp32 / g.fp32_flops, nbytes / g.hbm_bw) + g.launch_overhead


@pytest.mark.parametrize("gpu", ["A100", "H200", "B200", "V100"])
def test_forward_estimate_other_gpus_and_shapes(gpu):
    g = get_gpu(gpu)
    B, H, Hkv, N, D = 2, 16, 4, 3000, 64  # GQA, N not a multiple of the block
    est = estimate_forward(seq=N, head_dim=D, batch=B, heads=H, kv_heads=Hkv, gpu=gpu, block_q=128)
    nb = 2
    std = (_roof(2 * N * N * D * B * H, (B * H * N * D + B * Hkv * N * D + B * H * N * N) * nb, g, B * H * N * N)
           + _roof(0, 2 * B * H * N * N * nb, g, 5 * B * H * N * N)
           + _roof(2 * N * N * D * B * H, (B * H * N * N + B * Hkv * N * D + B * H * N * D) * nb, g))
    assert est.standard_time == pytest.approx(std, rel=1e-12)
    l2_bytes = (2 * B * H * N * D + 2 * B * Hkv * N * D) * nb + B * H * N * 4  # Q, O; K, V once; L in FP32
    assert est.flash_l2[0].bytes == l2_bytes
    Tr = math.ceil(N / 128)
    hbm_bytes = (2 * B * H * N * D + 2 * Tr * B * H * N * D) * nb + B * H * N * 4
    assert est.flash_hbm[0].bytes == hbm_bytes
    assert est.flash_l2_time == pytest.approx(_roof(4 * N * N * D * B * H, l2_bytes, g, 5 * B * H * N * N), rel=1e-12)


def test_backward_estimate_matches_kernel_arithmetic():
    g = get_gpu("A100")
    B, H, N, D = 1, 8, 2048, 96
    est = estimate_backward(seq=N, head_dim=D, batch=B, heads=H, gpu=g)
    nn, nd = B * H * N * N * 2, B * H * N * D * 2
    mm = 2 * B * H * N * N * D
    std = (_roof(mm, nn + 2 * nd, g) + _roof(mm, nn + nd, g) + _roof(0, 3 * nn, g, 4 * B * H * N * N)
           + _roof(mm, nn + 2 * nd, g) + _roof(mm, nn + 2 * nd, g))
    assert est.standard_time == pytest.approx(std, rel=1e-12)
    assert est.flops_ratio == pytest.approx(1.25)
    assert est.flash_time == pytest.approx(_roof(5 * mm, 8 * nd + B * H * N * 4, g, 4 * B * H * N * N), rel=1e-12)


def test_causal_estimate_skips_blocks_only_in_flash():
    full = estimate_forward(seq=1024, head_dim=64, heads=4, block_q=64)
    causal = estimate_forward(seq=1024, head_dim=64, heads=4, block_q=64, causal=True)
    assert causal.standard_time == full.standard_time  # the standard kernels compute all N² scores
    T = 1024 // 64
    assert causal.flash_l2[0].flops == full.flash_l2[0].flops * causal_block_pairs(T) / T**2


def test_layer_costs_against_arithmetic():
    g = get_gpu("H200")
    c = layer_costs(batch=4, new_tokens=1, context=1000, d_model=2048, heads=16, kv_heads=4, ffn_dim=5632, gpu=g)
    D = 128
    att = c.attention
    assert att.flops == 4 * 4 * 16 * 1000 * D  # a decode query sees all 1000 cached keys
    assert att.bytes == (2 * 4 * 16 * D + 2 * 4 * 4 * 1000 * D) * 2
    w = 2048 * (16 + 8) * D + 16 * D * 2048 + 3 * 2048 * 5632
    assert sum(k.flops for k in c.linear) == 2 * w * 4
    assert c.attention_time == pytest.approx(max(att.flops / g.tensor_flops, att.bytes / g.hbm_bw))
    assert c.attention_share == pytest.approx(c.attention_time / (c.attention_time + c.linear_time))


def test_decode_wave_model_against_arithmetic():
    g = get_gpu("A100")  # 108 SMs
    B, H, N, D, S = 3, 8, 10_000, 64, 7
    blocks = B * H * S
    waves = math.ceil(blocks / 108)
    split = g.launch_overhead + waves * (2 * N * D * 2 / S) / (g.hbm_bw / 108)
    merge = (B * H * S * (D + 1) * 4 + B * H * D * 2) / g.hbm_bw
    assert cost.decode_blocks(B, H, S) == blocks == 168 and waves == 2
    assert decode_split_time(batch=B, heads=H, seq=N, head_dim=D, splits=S, gpu=g) == pytest.approx(split + merge)
    assert decode_split_time(batch=B, heads=H, seq=N, head_dim=D, splits=S, gpu=g, merge_launch=True) == pytest.approx(
        split + merge + g.launch_overhead)


@settings(max_examples=40, deadline=None)
@given(B=st.integers(1, 300), H=st.integers(1, 64), N=st.integers(1, 300_000), D=st.sampled_from([64, 96, 128, 256]),
       sms=st.integers(1, 200), max_splits=st.integers(1, 64), ml=st.booleans())
def test_best_num_splits_is_the_fewest_within_tolerance(B, H, N, D, sms, max_splits, ml):
    g = dataclasses.replace(H100, sms=sms)  # what the GPU decode code builds from the device's SM count
    S = best_num_splits(batch=B, heads=H, seq=N, head_dim=D, gpu=g, max_splits=max_splits, merge_launch=ml)
    cands = range(1, min(max_splits, N) + 1)
    assert S in cands
    times = {s: decode_split_time(batch=B, heads=H, seq=N, head_dim=D, splits=s, gpu=g, merge_launch=ml) for s in cands}
    best = min(times.values())
    assert times[S] <= best * 1.05 * (1 + 1e-9)
    assert all(times[s] > best * 1.05 * (1 - 1e-9) for s in cands if s < S)
    if (B * H) % sms == 0:  # full waves without splitting: more splits only add the merge
        assert S == 1


def test_best_num_splits_pure_argmin_and_min_split_len():
    kw = dict(batch=1, heads=32, seq=32768, head_dim=128, gpu="H100")
    assert best_num_splits(tolerance=0, **kw) == 33  # 33 × 32 = 1056 blocks = 8 full waves of 132
    assert best_num_splits(min_split_len=16384, **kw) == 2
    assert best_num_splits(batch=1, heads=1, seq=1, head_dim=64, gpu="H100") == 1
    assert best_num_splits(batch=2, heads=66, seq=32768, head_dim=128, gpu="H100") == 1  # 132 blocks: one full wave
    assert best_num_splits(batch=4, heads=32, seq=32768, head_dim=128, gpu="H100") == 1  # 128 blocks: 97% full


def test_custom_gpu_and_lookup():
    assert get_gpu("h100") is H100 and get_gpu(" B200 ") is GPUS["B200"] and get_gpu(H100) is H100
    slow = dataclasses.replace(H100, name="H100-half-bw", hbm_bw=H100.hbm_bw / 2)
    assert slow.ridge == pytest.approx(2 * H100.ridge)
    assert recompute_ratio(128, slow) == pytest.approx(recompute_ratio(128, H100) / 2)
    t, bound = kernel_time(1e12, 1e9, slow)
    assert (t, bound) == (pytest.approx(max(1e12 / 989e12, 1e9 / 1.675e12) + 4e-6), "compute")
    mine = GPU("toy", tensor_flops=100e12, fp32_flops=10e12, hbm_bw=1e12, sms=10, smem_per_sm=64 * 1024, l2_bytes=4 * MiB)
    assert mine.ridge == 100 and best_num_splits(batch=1, heads=2, seq=4096, head_dim=64, gpu=mine) >= 4


# ============================================================ bad input


@pytest.mark.parametrize("call,match", [
    (lambda: get_gpu("H800"), "known GPUs: V100, A100"),
    (lambda: get_gpu(3), "gpu must be"),
    (lambda: attention_flops(seq_q=0, head_dim=64), "seq_q"),
    (lambda: attention_flops(seq_q=8, head_dim=64, heads=True), "heads"),
    (lambda: attention_flops(seq_q=8, head_dim=64, pass_="backward"), "pass_"),
    (lambda: attention_flops(seq_q=8, head_dim=64, causal=1), "causal"),
    (lambda: io_flash_forward(0, 64, 64), "N"),
    (lambda: io_flash_forward(64, 64, 64.0), "block_q"),
    (lambda: io_standard_forward(64, -1), "d"),
    (lambda: kv_cache_bytes(layers=32, seq=8), "d_model"),
    (lambda: kv_cache_bytes(layers=32, seq=8, d_model=4096, kv_heads=8, head_dim=128), "not both"),
    (lambda: decode_split_time(batch=1, heads=1, seq=4, head_dim=64, splits=5, gpu="H100"), "splits"),
    (lambda: best_num_splits(batch=1, heads=1, seq=4, head_dim=64, gpu="H100", tolerance=1.5), "tolerance"),
    (lambda: kernel_time(-1, 0, "H100"), "flops"),
    (lambda: layer_costs(new_tokens=10, context=5), "context"),
    (lambda: estimate(heads=32, kv_heads=5), "multiple of kv_heads"),
    (lambda: estimate(dtype="fp8"), "dtype"),
    (lambda: estimate(gpu="TPU"), "unknown GPU"),
    (lambda: GPU("bad", 0, 1, 1, 1, 1, 1), "tensor_flops"),
    (lambda: dataclasses.replace(H100, sms=0), "sms"),
])
def test_bad_input_is_refused(call, match):
    with pytest.raises((ValueError, TypeError), match=match):
        call()


# ============================================================ estimate() and the CLI


def test_estimate_reproduces_the_lecture_defaults():
    est = estimate()
    assert round(est.forward.standard_time * 1e6) == 1334 and r1(est.backward.speedup) == 3.3
    assert est.decode.best.splits == 4 and est.decode.no_split.blocks == 32
    assert est.decode.kv_cache_bytes == 2 * 32 * 4096 * 128 * 2
    d = est.to_dict()
    json.dumps(d)  # plain JSON types only
    assert d["shape"]["kv_heads"] == 32 and d["gpu"]["name"] == "H100"


def test_cli_estimate_prints_and_writes_json(tmp_path, capsys):
    from attnlab.cli import main

    out = tmp_path / "est.json"
    argv = ["estimate", "--gpu", "a100", "--seq", "1025", "--head-dim", "96", "--heads", "8", "--kv-heads", "2",
            "--batch", "3", "--causal", "--json", str(out)]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "A100" in text and "memory" in text and "compute" in text and "Flash-Decoding" in text
    got = json.loads(out.read_text())
    want = estimate(gpu="A100", seq=1025, head_dim=96, heads=8, kv_heads=2, batch=3, causal=True).to_dict()
    assert got == json.loads(json.dumps(want))
    assert got["forward"]["standard"][0]["bound"] in ("memory", "compute")


@pytest.mark.parametrize("argv,msg", [
    (["estimate", "--gpu", "nope"], "unknown GPU"),
    (["estimate", "--seq", "0"], "seq must be a positive integer"),
    (["estimate", "--heads", "12", "--kv-heads", "5"], "multiple of kv_heads"),
    (["estimate", "--head-dim", "-3"], "head_dim"),
])
def test_cli_estimate_bad_input_exits_2(argv, msg, capsys):
    from attnlab.cli import main

    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert msg in err and len(err.splitlines()) == 1


def test_cli_plot_writes_a_png(tmp_path):
    from attnlab.cli import main

    png = tmp_path / "roof.png"
    assert main(["estimate", "--seq", "2048", "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_import_is_light():
    code = ("import sys, attnlab.cost; bad = [m for m in ('torch', 'matplotlib', 'rich', 'triton', 'numpy') "
            "if m in sys.modules]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)
