"""attnlab.cost.calibration: the calibrated Flash-Decoding split model (§8.4's waves with a measured
per-program rate, a smooth saturation and per-split/per-wave costs) against its time written out wave
by wave, the H200 calibrations' lookup, and the prediction for another kernel configuration."""

from __future__ import annotations

import pytest

from attnlab.cost import (
    CALIBRATIONS,
    DecodeCalibration,
    calibrated_num_splits,
    calibrated_split_time,
    calibration_for,
    programs_per_sm,
    scaled_calibration,
    tiles_in_flight,
)

SMALL, LARGE = (64, 128, 4, 3), (128, 128, 4, 3)  # the decode kernel's two configurations at D = 128


def test_programs_per_sm_from_the_compiled_buffers():
    # sm_90, 227 KiB per block: the small config compiles to 2 buffers each of K and V (64 KiB) + ~6 KiB
    assert programs_per_sm(SMALL) == 3
    assert programs_per_sm(LARGE) == 1  # 2 × 2 × (128×128) bf16 = 128 KiB
    assert programs_per_sm((64, 128, 4, 4)) == 2  # 3 buffers each: 96 KiB
    assert tiles_in_flight((128, 128, 4, 2)) == 1 and tiles_in_flight((64, 128, 4, 1)) == 1


def test_hard_saturation_written_out_wave_by_wave():
    # k = 400: the aggregate rate is the lesser of the programs' demand and bw, to 0.2%
    cal = DecodeCalibration(bw=1e12, program_bw=1e10, programs_per_sm=2, k=400.0, fixed=1e-6, per_split=1e-7,
                            per_wave=2e-7, config=SMALL)
    # 4 K/V heads × 8 splits = 32 programs of 512 keys (2 × 512 × 128 × 2 bytes); 10 SMs × 2 = 20 slots:
    # a wave of 20 programs (demand 2e11 < bw), then one of 12 (demand 1.2e11)
    per = 2 * 512 * 128 * 2
    want = 1e-6 + 8 * 1e-7 + (20 * per / 2e11 + 2e-7) + (12 * per / 1.2e11 + 2e-7)
    got = calibrated_split_time(batch=1, kv_heads=4, seq=4096, head_dim=128, splits=8, sms=10, cal=cal)
    assert got == pytest.approx(want, rel=3e-3)
    # 60 SMs: every program in one wave, demand 3.2e11; 200 programs per SM: demand 4e12 > bw = 1e12
    assert calibrated_split_time(batch=1, kv_heads=4, seq=4096, head_dim=128, splits=8, sms=60, cal=cal) == \
        pytest.approx(1e-6 + 8e-7 + 32 * per / 3.2e11 + 2e-7, rel=3e-3)
    busy = DecodeCalibration(bw=1e12, program_bw=1e11, programs_per_sm=2, k=400.0, config=SMALL)
    assert calibrated_split_time(batch=1, kv_heads=4, seq=4096, head_dim=128, splits=8, sms=60, cal=busy) == \
        pytest.approx(32 * per / 1e12, rel=3e-3)


def test_the_longest_split_sets_the_pace():
    cal = DecodeCalibration(bw=1e12, program_bw=1e10, programs_per_sm=1, k=400.0, config=SMALL)
    # 1000 keys in 3 splits of whole 64-key tiles: 384 + 384 + 232; all three take the 384-key time
    t3 = calibrated_split_time(batch=1, kv_heads=1, seq=1000, head_dim=128, splits=3, sms=132, cal=cal)
    assert t3 == pytest.approx(3 * (2 * 384 * 128 * 2) / 3e10, rel=3e-3)


def test_h200_calibrated_model_shape():
    cal = calibration_for("NVIDIA H200", SMALL)
    t = {S: calibrated_split_time(batch=1, kv_heads=8, seq=131072, head_dim=128, splits=S, sms=132, cal=cal)
         for S in (1, 2, 16, 24, 32)}
    # one program per K/V head streams at program_bw: 8 programs are 8 · 34 GB/s, far from bw
    assert t[1] == pytest.approx(2 * 131072 * 128 * 2 / cal.program_bw + cal.fixed + cal.per_wave, rel=1e-3)
    assert t[1] > t[2] > t[16] > t[24]  # more programs, closer to bw
    assert t[24] == pytest.approx(t[32], rel=0.05)  # saturated
    # a short call: the merge's per-split cost makes 64 splits slower than 16
    t4k = {S: calibrated_split_time(batch=1, kv_heads=8, seq=4096, head_dim=128, splits=S, sms=132, cal=cal)
           for S in (16, 64)}
    assert t4k[64] > t4k[16]
    assert calibrated_num_splits(batch=1, kv_heads=8, seq=256, head_dim=128, sms=132, cal=cal,
                                 min_split_len=64) <= 4  # every split keeps >= 64 keys


def test_calibration_lookup():
    assert calibration_for("NVIDIA H200", SMALL) is CALIBRATIONS["H200", SMALL]
    assert calibration_for("h200", LARGE) is CALIBRATIONS["H200", LARGE]
    assert calibration_for("NVIDIA H100 80GB HBM3", SMALL) is None  # measured on an H200 only
    assert calibration_for("NVIDIA H200", (64, 128, 4, 4)) is None  # a configuration never measured
    assert {cal.programs_per_sm for cal in CALIBRATIONS.values()} == {programs_per_sm(SMALL), programs_per_sm(LARGE)}


def test_scaled_calibration_by_bytes_in_flight():
    small = CALIBRATIONS["H200", SMALL]
    big = scaled_calibration(small, LARGE)  # 128-key tiles, the same 2 tiles in flight: twice the bytes
    assert big.program_bw == pytest.approx(2 * small.program_bw)
    assert (big.programs_per_sm, big.config) == (1, LARGE)
    assert (big.bw, big.k, big.fixed, big.per_split, big.per_wave) == \
        (small.bw, small.k, small.fixed, small.per_split, small.per_wave)
    four = scaled_calibration(small, (64, 128, 4, 4))  # 3 tiles in flight instead of 2
    assert four.program_bw == pytest.approx(1.5 * small.program_bw) and four.programs_per_sm == 2


@pytest.mark.parametrize("call,match", [
    (lambda: calibrated_split_time(batch=1, kv_heads=1, seq=4, head_dim=64, splits=5, sms=132,
                                   cal=CALIBRATIONS["H200", SMALL]), "splits"),
    (lambda: calibrated_split_time(batch=1, kv_heads=1, seq=64, head_dim=64, splits=1, sms=132, cal=None), "cal"),
    (lambda: calibrated_num_splits(batch=1, kv_heads=1, seq=64, head_dim=64, sms=0,
                                   cal=CALIBRATIONS["H200", SMALL]), "sms"),
    (lambda: calibration_for(None, SMALL), "gpu_name"),
    (lambda: calibration_for("H200", "small"), "4 items"),
    (lambda: programs_per_sm((64, 128, 4, 3.0)), "num_stages"),
    (lambda: calibrated_num_splits(batch=1, kv_heads=1, seq=64, head_dim=64, sms=132, cal=CALIBRATIONS["H200", SMALL],
                                   candidates=[2, "x"]), "candidate split count"),
    (lambda: calibrated_num_splits(batch=1, kv_heads=1, seq=64, head_dim=64, sms=132, cal=CALIBRATIONS["H200", SMALL],
                                   candidates=[0]), "candidate split count"),
])
def test_bad_input_is_refused(call, match):
    with pytest.raises((ValueError, TypeError), match=match):
        call()


@pytest.mark.parametrize("config", [SMALL, LARGE, (128, 64, 4, 3), (64, 64, 4, 3)])
def test_the_h100_takes_the_h200_calibration_at_its_own_bandwidth(config):
    """``processor_calibration``: an H100 (the H200's processor with HBM3) takes the H200's calibration of the same
    configuration, measured or scaled, with ``bw`` times the presets' bandwidth ratio (3.35 / 4.8) and everything else
    as it was; ``calibration_for`` still says no H100 calibration was measured; other GPUs get none."""
    from dataclasses import replace

    from attnlab.cost import SAME_PROCESSOR, calibration_for_config, get_gpu, processor_calibration

    base = calibration_for_config("NVIDIA H200", config)
    assert base is not None and SAME_PROCESSOR == {"H100": "H200"}
    ratio = get_gpu("H100").hbm_bw / get_gpu("H200").hbm_bw
    for name in ("NVIDIA H100 80GB HBM3", "H100", "nvidia h100"):
        got = calibration_for_config(name, config)
        assert got == processor_calibration(name, config)
        assert replace(got, bw=base.bw, source=base.source) == base
        assert got.bw == pytest.approx(base.bw * ratio) and ratio == pytest.approx(3.35 / 4.8)
        assert "predicted for the H100" in got.source and "0.698" in got.source
    assert calibration_for("NVIDIA H100 80GB HBM3", config) is None
    for name in ("NVIDIA H200", "NVIDIA A100-SXM4-80GB", "Tesla V100"):
        assert processor_calibration(name, config) is None
    assert calibration_for_config("NVIDIA H100", (64, 256, 4, 3)) is None  # (none on the H200 to carry over)
    with pytest.raises(TypeError, match="gpu_name"):
        processor_calibration(None, config)


def test_the_h100_prediction_moves_the_d64_picks_off_the_wave_model():
    """What the H100's predicted calibration changes: at D = 64 (the large tile at block_d 64) batch 1 over 32K keys
    with 8 K/V heads, the wave model's 16 splits against the calibrated model's 32 (the H200's measured best at that
    shape), the calibrated model timing the wave model's pick over 1.1× its own; at D = 128 the two agree."""
    from attnlab.cost import calibrated_split_time, calibration_for_config, decode_num_splits, get_gpu

    h100 = get_gpu("H100")
    d64 = (128, 64, 4, 3)
    shape = dict(batch=1, kv_heads=8, seq=32768)
    pick = decode_num_splits(**shape, head_dim=64, gpu=h100, config=d64)
    wave = decode_num_splits(**shape, head_dim=64, gpu=h100)
    cal = calibration_for_config(h100.name, d64)
    t = {S: calibrated_split_time(**shape, head_dim=64, splits=S, sms=h100.sms, cal=cal) for S in (wave, pick)}
    assert (wave, pick) == (16, 32) and t[wave] > 1.1 * t[pick]
    from tests.helpers import ROOT

    doc = " ".join((ROOT / "docs" / "cost.md").read_text().split())
    assert f"at D = 64, batch 1 over 32K keys with 8 K/V heads it picks {pick} splits where the wave model picks {wave}" \
        in doc
    assert decode_num_splits(**shape, head_dim=128, gpu=h100, config=LARGE) == \
        decode_num_splits(**shape, head_dim=128, gpu=h100) == 16


def test_notes_v24_quotes_the_h100_picks():
    """NOTES-decode v24's picks on an H100 (the large configuration, 8 K/V heads): the predicted calibration's against
    the wave model's, and the model's time of the wave model's pick over its own."""
    from tests.helpers import notes_section

    from attnlab.cost import (
        best_num_splits,
        calibrated_split_time,
        decode_num_splits,
        get_gpu,
        processor_calibration,
    )

    text = notes_section("NOTES-decode.md", "## v24")
    h100 = get_gpu("H100")

    def picks(B, L, D):
        cfg = (128, D, 4, 3)
        cal = processor_calibration("H100", cfg)
        kw = dict(batch=B, kv_heads=8, seq=L, head_dim=D)
        # (the wave model as the chooser ran it for this configuration: whole 128-key tiles, the merge charged)
        wave = best_num_splits(batch=B, heads=8, seq=L, head_dim=D, gpu=h100, max_splits=64, merge_launch=True,
                               min_split_len=128)
        mine = decode_num_splits(**kw, gpu=h100, config=cfg)
        t = {S: calibrated_split_time(**kw, splits=S, sms=h100.sms, cal=cal) for S in (wave, mine)}
        return wave, mine, t[wave] / t[mine]

    assert picks(1, 32768, 128)[:2] == (16, 16) and "(16 at 32/8 over 32K)" in text
    w32, m32, r32 = picks(1, 32768, 64)
    w4, m4, _ = picks(1, 4096, 64)
    w8, m8, r8 = picks(8, 32768, 64)
    assert f"at D = 64 they double ({w32} → {m32} at 32/8 over 32K, {w4} → {m4} at 4K)" in text
    assert f"at batch 8 over 32K {w8} → {m8} splits; the model has the wave model's picks {r32:.2f}× and {r8:.2f}×" in text
    ratio = h100.hbm_bw / get_gpu("H200").hbm_bw
    assert f"scaled by that ratio ({ratio:.3f})" in text
