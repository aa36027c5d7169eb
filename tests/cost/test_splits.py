"""attnlab.cost.splits: the lecture's Flash-Decoding wave model (§8.4: 169 µs at 4 splits, 268 µs at
5; exercise 8: 2 splits) against a block-by-block schedule on the SMs, ``best_num_splits`` against an
enumeration, and ``decode_num_splits`` (calibrated model where a calibration exists, else waves)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnlab.cost import (
    CALIBRATIONS,
    GPUS,
    best_num_splits,
    calibrated_num_splits,
    decode_blocks,
    decode_num_splits,
    decode_split_cost,
    decode_split_table,
    decode_split_time,
    get_gpu,
    processor_calibration,
)

H100 = GPUS["H100"]


def test_s8_4_flash_decoding_waves():
    kw = dict(batch=1, heads=32, seq=32768, head_dim=128, gpu="H100")
    t4, t5 = decode_split_time(splits=4, **kw), decode_split_time(splits=5, **kw)
    assert (round(t4 * 1e6), round(t5 * 1e6)) == (169, 268)
    assert round(100 * decode_split_cost(splits=1, **kw).sm_use) == 24  # "32 blocks use 24% of 132 SMs"
    assert decode_split_cost(splits=5, **kw).waves == 2  # "160 blocks do not fit one wave"
    assert best_num_splits(**kw) == 4
    rows = [r for r in decode_split_table(seqs=(32768,)) if r.splits in (4, 5)]
    assert [round(r.time * 1e6) for r in rows] == [169, 268] and rows[0].best


def test_exercise_8_two_splits():
    kw = dict(batch=2, heads=32, seq=65536, head_dim=128, gpu="H100")
    assert best_num_splits(**kw) == 2
    t2, t3 = decode_split_time(splits=2, **kw), decode_split_time(splits=3, **kw)
    # 2 splits: 128 blocks in one wave, each reading 1/128 of a sequence's cache; 3: 192 blocks in 2
    # waves of 1/192 each, 2/192 = 1/96 in all: 128/96 of the time (launch aside, merge negligible)
    assert (t3 - H100.launch_overhead) / (t2 - H100.launch_overhead) == pytest.approx(128 / 96, rel=1e-3)


def _scheduled_split_kernel(B, H, N, D, S, g, nb):
    """The split kernel block by block: each block goes to the SM that frees first and streams its
    bytes at bw/SMs; the kernel ends when the last SM does."""
    free = [0.0] * g.sms
    for _ in range(B * H * S):
        i = min(range(g.sms), key=free.__getitem__)
        free[i] += (2 * N * D * nb / S) / (g.hbm_bw / g.sms)
    return g.launch_overhead + max(free)


@pytest.mark.parametrize("gpu,B,H,N,D,S", [("A100", 3, 8, 10_000, 64, 7), ("H100", 1, 32, 32768, 128, 5),
                                            ("B200", 2, 4, 999, 256, 19), ("V100", 1, 1, 64, 32, 1)])
def test_wave_model_against_a_block_schedule(gpu, B, H, N, D, S):
    g = get_gpu(gpu)
    c = decode_split_cost(batch=B, heads=H, seq=N, head_dim=D, splits=S, gpu=g)
    assert c.blocks == decode_blocks(batch=B, heads=H, splits=S) == B * H * S
    assert c.split_time == pytest.approx(_scheduled_split_kernel(B, H, N, D, S, g, 2), rel=1e-12)
    # the merge: S partial rows of D + 1 FP32 values per (batch, head) read, one FP16 row written
    merge = 0.0 if S == 1 else sum([S * (D + 1) * 4 + D * 2] * (B * H)) / g.hbm_bw
    assert c.merge_time == pytest.approx(merge, rel=1e-12)
    with_launch = decode_split_time(batch=B, heads=H, seq=N, head_dim=D, splits=S, gpu=g, merge_launch=True)
    assert with_launch - c.time == pytest.approx(g.launch_overhead if S > 1 else 0.0, abs=1e-15)


@settings(max_examples=40, deadline=None)
@given(B=st.integers(1, 300), H=st.integers(1, 64), N=st.integers(1, 300_000), D=st.sampled_from([64, 96, 128, 256]),
       sms=st.integers(1, 200), max_splits=st.integers(1, 64), ml=st.booleans())
def test_best_num_splits_is_the_fewest_within_tolerance(B, H, N, D, sms, max_splits, ml):
    g = dataclasses.replace(H100, sms=sms)  # what a GPU decode kernel builds from the device's SM count
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


def test_decode_num_splits_takes_the_calibration_where_there_is_one():
    h200 = dataclasses.replace(get_gpu("H200"), sms=132)
    (key, cal), = [(k, c) for (gpu, k), c in CALIBRATIONS.items() if gpu == "H200" and k[0] == 64]
    shapes = [(1, 8, 131072), (1, 32, 4096), (16, 8, 32768), (2, 1, 256)]
    for B, Hkv, L in shapes:
        got = decode_num_splits(batch=B, kv_heads=Hkv, seq=L, head_dim=128, gpu=h200, config=key)
        assert got == calibrated_num_splits(batch=B, kv_heads=Hkv, seq=L, head_dim=128, sms=132, cal=cal,
                                            min_split_len=64)
        # an H100 takes the H200's at its own bandwidth (``processor_calibration``); an A100 has none: the wave
        # model, the merge's launch charged, whole 64-key tiles
        assert decode_num_splits(batch=B, kv_heads=Hkv, seq=L, head_dim=128, gpu="H100", config=key) == \
            calibrated_num_splits(batch=B, kv_heads=Hkv, seq=L, head_dim=128, sms=132, min_split_len=64,
                                  cal=processor_calibration("H100", key))
        assert decode_num_splits(batch=B, kv_heads=Hkv, seq=L, head_dim=128, gpu="A100", config=key) == \
            best_num_splits(batch=B, heads=Hkv, seq=L, head_dim=128, gpu="A100", merge_launch=True, min_split_len=64)
    # where the two models part (batch 1, 8 K/V heads, 128K): 8 programs are far from the H200's
    # bandwidth in the calibrated model; in the wave model 16 splits fill 128 of 132 SMs at bw/SMs each
    cal_pick = decode_num_splits(batch=1, kv_heads=8, seq=131072, head_dim=128, gpu=h200, config=key)
    wave_pick = decode_num_splits(batch=1, kv_heads=8, seq=131072, head_dim=128, gpu=h200)
    assert cal_pick > wave_pick == 16


@pytest.mark.parametrize("call,match", [
    (lambda: decode_split_time(batch=1, heads=1, seq=4, head_dim=64, splits=5, gpu="H100"), "splits"),
    (lambda: best_num_splits(batch=1, heads=1, seq=4, head_dim=64, gpu="H100", tolerance=1.5), "tolerance"),
    (lambda: decode_blocks(batch=0, heads=1, splits=1), "batch"),
    (lambda: decode_num_splits(batch=1, kv_heads=0, seq=4, head_dim=64, gpu="H100"), "kv_heads"),
    (lambda: decode_num_splits(batch=1, kv_heads=1, seq=4, head_dim=64, gpu="H100", config=(64, 128)), "4 items"),
    (lambda: decode_num_splits(batch=1, kv_heads=1, seq=4, head_dim=64, gpu="H100", config=(64, 128, 4, 0)),
     "num_stages"),
])
def test_bad_input_is_refused(call, match):
    with pytest.raises((ValueError, TypeError), match=match):
        call()
