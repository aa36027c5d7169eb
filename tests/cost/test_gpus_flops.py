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
