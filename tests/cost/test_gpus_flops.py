"""attnlab.cost.gpus and attnlab.cost.flops: the presets the lecture divides by (§3.2–3.3, §6.3,
§7.6), FLOP counts against a pair count, exercise 1, and the figures of §3.1–3.2's layer table."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnlab.cost import GPU, GPUS, attention_flops, get_gpu, kernel_time, layer_flops_table, scores_bytes

GiB, MiB = 2**30, 2**20
H100 = GPUS["H100"]


def test_gpu_presets_give_the_lecture_ridges_and_totals():
    assert round(H100.ridge) == 295  # §3.2
    assert 29e6 < H100.smem_total < 32e6  # §3.3 "132 × 228 KB ≈ 30 MB"
    assert round(GPUS["V100"].ridge) == 139  # exercise 6: d > 139
    assert GPUS["A100"].tensor_flops / GPUS["A100"].fp32_flops == 16  # §6.3 "each non-matmul FLOP costs 16"
    assert {"V100", "A100", "H100", "H200", "B200"} <= set(GPUS)


def test_s3_layer_flops_scores_memory_and_traffic():
    rows = {r.seq: r for r in layer_flops_table(seqs=(2048, 32768, 131072))}
    assert round(100 * rows[131072].attention_share) == 73  # §3.1: 73% at 128K
    assert rows[2048].attention_share < 0.05  # "negligible for short sequences"
    assert rows[32768].scores_bytes == 64 * GiB  # §3.2: 64 GiB ...
    assert round(100 * rows[32768].scores_share_of_memory) == 86  # ... = 86% of an 80 GB H100
    assert round(rows[32768].traffic_time * 1e3) == 82  # ~82 ms of traffic
    assert round(rows[32768].math_time * 1e3) == 18  # ~18 ms of matmul (masked half included)


def test_exercise_1_scores_of_a_13b_layer():
    s = scores_bytes(heads=40, seq_q=8192)
    assert s / GiB == 5.0
    assert 40 * s / GiB == 200  # all 40 layers


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


def test_custom_gpu_and_lookup():
    assert get_gpu("h100") is H100 and get_gpu(" B200 ") is GPUS["B200"] and get_gpu(H100) is H100
    slow = dataclasses.replace(H100, name="H100-half-bw", hbm_bw=H100.hbm_bw / 2)
    assert slow.ridge == pytest.approx(2 * H100.ridge)
    t, bound = kernel_time(1e12, 1e9, slow)
    assert (t, bound) == (pytest.approx(max(1e12 / 989e12, 1e9 / 1.675e12) + 4e-6), "compute")
    mine = GPU("toy", tensor_flops=100e12, fp32_flops=10e12, hbm_bw=1e12, sms=10, smem_per_sm=64 * 1024, l2_bytes=4 * MiB)
    assert mine.ridge == 100


@pytest.mark.parametrize("call,match", [
    (lambda: get_gpu("H800"), "known GPUs: V100, A100"),
    (lambda: get_gpu(3), "gpu must be"),
    (lambda: attention_flops(seq_q=0, head_dim=64), "seq_q"),
    (lambda: attention_flops(seq_q=8, head_dim=64, heads=True), "heads"),
    (lambda: attention_flops(seq_q=8, head_dim=64, pass_="backward"), "pass_"),
    (lambda: attention_flops(seq_q=8, head_dim=64, causal=1), "causal"),
    (lambda: kernel_time(-1, 0, "H100"), "flops"),
    (lambda: GPU("bad", 0, 1, 1, 1, 1, 1), "tensor_flops"),
    (lambda: dataclasses.replace(H100, sms=0), "sms"),
])
def test_bad_input_is_refused(call, match):
    with pytest.raises((ValueError, TypeError), match=match):
        call()


# (tensor cores or SMs, dense 16-bit tensor FLOP a clock each, FP32 lanes) of each preset whose clocks are known: its
# peaks are these × 2 for FP32's FMA × the clocks the preset names
UNITS = {"V100": (640, 128, 5120), "A100": (108, 2048, 6912), "A100-40GB": (108, 2048, 6912),
         "H100": (132, 4096, 16896), "H200": (132, 4096, 16896)}


@pytest.mark.parametrize("name", sorted(UNITS))
def test_each_peak_is_its_units_at_the_clock_the_preset_names(name):
    g = GPUS[name]
    units, per_clock, lanes = UNITS[name]
    assert units * per_clock * g.tensor_mhz * 1e6 == pytest.approx(g.tensor_flops, rel=3e-3)  # (datasheets round: 125.3 -> 125)
    assert lanes * 2 * g.fp32_mhz * 1e6 == pytest.approx(g.fp32_flops, rel=3e-3)


def test_at_clock_scales_each_peak_from_its_own_clock():
    slow = H100.at_clock(1464)  # 0.8 × the tensor peak's 1,830 MHz
    assert slow.name == "H100 at 1464 MHz" and slow.tensor_mhz == slow.fp32_mhz == 1464
    assert slow.tensor_flops == pytest.approx(0.8 * 989e12) and slow.fp32_flops == pytest.approx(67e12 * 1464 / 1980)
    assert (slow.hbm_bw, slow.sms, slow.l2_bytes, slow.memory) == (H100.hbm_bw, H100.sms, H100.l2_bytes, H100.memory)
    assert H100.at_clock(1830).tensor_flops == H100.tensor_flops
    assert slow.at_clock(1830).tensor_flops == pytest.approx(H100.tensor_flops)  # back again
    # a compute-bound kernel takes 1/0.8 the time at 0.8 the clock
    t, _ = kernel_time(1e15, 1e6, slow, launch=False)
    assert t == pytest.approx(kernel_time(1e15, 1e6, H100, launch=False)[0] / 0.8)
    fp32_unknown = dataclasses.replace(H100, fp32_mhz=0)
    assert fp32_unknown.at_clock(915).fp32_flops == H100.fp32_flops  # a peak whose clock is not known stays


@pytest.mark.parametrize("call,match", [
    (lambda: GPUS["B200"].at_clock(1500), "B200: the clock its tensor peak is quoted at is not known"),
    (lambda: H100.at_clock(0), "positive SM clock"),
    (lambda: H100.at_clock(True), "positive SM clock"),
    (lambda: H100.at_clock(float("nan")), "positive SM clock"),
    (lambda: dataclasses.replace(H100, tensor_mhz=-1), "tensor_mhz"),
    (lambda: dataclasses.replace(H100, fp32_mhz="fast"), "fp32_mhz"),
])
def test_bad_clocks_are_refused(call, match):
    with pytest.raises(ValueError, match=match):
        call()
