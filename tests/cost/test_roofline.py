"""attnlab.cost.roofline and its tables: the §5.5 and §7.5 estimates, the §6.1 block-size table, the
§7.6 recompute criterion, and estimates for GPUs and shapes the lecture never printed, against
roofline arithmetic written out here."""

from __future__ import annotations

import dataclasses
import math

import pytest

from attnlab.cost import (
    GPUS,
    attention_flops,
    backward_estimate,
    block_size_table,
    causal_block_pairs,
    estimate_backward,
    estimate_forward,
    get_gpu,
    p_vs_l_table,
    recompute_crossover_d,
    recompute_ratio,
    recompute_table,
)

GiB, MiB = 2**30, 2**20
H100 = GPUS["H100"]


def r1(x):
    return round(x, 1)


def test_s3_standard_kernels_are_memory_bound():
    est = estimate_forward()  # N = 4096, D = 128, 32 heads, FP16, H100
    assert est.standard[0].intensity < H100.ridge  # §3.2: ~128 FLOP/byte < 295
    assert all(k.bound == "memory" for k in est.standard)


def test_s5_5_h100_forward_estimate():
    est = estimate_forward(seq=4096, head_dim=128, heads=32, gpu="H100")
    assert len(est.standard) == 3  # 3 launches
    assert round(est.standard_time * 1e6) == 1334  # "standard ≈ 1,334 µs (3 launches)"
    assert round(est.flash_l2_time * 1e6) == 282  # "flash ≈ 282 µs"
    assert est.flash_l2[0].bound == "compute"
    assert r1(est.speedup_l2) == 4.7
    assert r1(est.speedup_hbm) == 2.0


def test_s6_1_block_sizes_in_shared_memory():
    rows = {(r.block_q, r.block_k): r for r in block_size_table(head_dim=128, gpu="H100")}
    assert rows[128, 128].fits and rows[256, 128].fits
    assert not rows[128, 256].fits and not rows[256, 256].fits
    assert rows[64, 64].kv_passes_per_4k == 64


def test_s7_1_s7_2_store_p_or_l():
    row = {r.seq: r for r in p_vs_l_table(seqs=(65536,), heads=32)}[65536]
    assert row.p_bytes == 256 * GiB and row.l_bytes == 8 * MiB
    assert row.ratio == 32768


def test_s7_5_backward_more_flops_less_traffic():
    N, d = 4096, 128
    est = backward_estimate(seq=N, head_dim=d, heads=32, gpu="H100")
    assert est.flops_ratio == pytest.approx(1.25)  # 25% more backward FLOPs
    assert round(est.traffic_ratio) == 29  # 1/29 of the traffic
    assert r1(est.speedup) == 3.3
    assert attention_flops(seq_q=N, head_dim=d, pass_="bwd") == 2.5 * attention_flops(seq_q=N, head_dim=d)


def test_s7_6_recompute_criterion_and_exercise_6():
    rows = {r.gpu: r for r in recompute_table(head_dim=128)}
    assert set(rows) == {"V100", "A100", "H100", "B200"}
    assert all(r.ratio < 1 and r.recompute_cheaper for r in rows.values())  # recompute wins on all four
    assert round(recompute_crossover_d("V100")) == 139  # exercise 6: d > 139
    assert recompute_ratio(head_dim=139, gpu="V100") > 1 > recompute_ratio(head_dim=138, gpu="V100")
    slow = dataclasses.replace(H100, hbm_bw=H100.hbm_bw / 2)  # half the bandwidth: reading back costs twice
    assert recompute_ratio(head_dim=128, gpu=slow) == pytest.approx(recompute_ratio(head_dim=128, gpu=H100) / 2)


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
    assert est.flash_time == pytest.approx(_roof(5 * mm, 8 * nd + B * H * N * 4, g, 4 * B * H * N * N), rel=1e-12)


def test_causal_estimate_skips_blocks_only_in_flash():
    full = estimate_forward(seq=1024, head_dim=64, heads=4, block_q=64)
    causal = estimate_forward(seq=1024, head_dim=64, heads=4, block_q=64, causal=True)
    assert causal.standard_time == full.standard_time  # the standard kernels compute all N² scores
    T = 1024 // 64
    assert causal.flash_l2[0].flops == full.flash_l2[0].flops * causal_block_pairs(T) / T**2


@pytest.mark.parametrize("call,match", [
    (lambda: recompute_ratio(head_dim=0, gpu="H100"), "head_dim"),
    (lambda: recompute_ratio(128, "H100"), "positional"),
    (lambda: block_size_table(head_dim=-1), "head_dim"),
])
def test_bad_input_is_refused(call, match):
    with pytest.raises((ValueError, TypeError), match=match):
        call()
