"""attnlab.cost.decode: KV-cache size (§8.2), prefill vs decode of one layer (§8.3), exercise 7, and a
layer of a shape the lecture never printed against arithmetic written out here."""

from __future__ import annotations

import pytest

from attnlab.cost import (
    GPUS,
    decode_attention_intensity,
    get_gpu,
    kv_cache_bytes,
    layer_costs,
    prefill_decode_table,
)

GiB, MiB = 2**30, 2**20
H100 = GPUS["H100"]


def test_s8_2_kv_cache():
    assert kv_cache_bytes(layers=32, d_model=4096, seq=1) == MiB // 2  # 7B: 0.5 MiB per token
    assert kv_cache_bytes(layers=32, d_model=4096, seq=2048, batch=128) == 128 * GiB


def test_s8_3_prefill_vs_decode():
    pre, d1, d128 = prefill_decode_table(prefill_seq=2048, context=2048, batches=(1, 128))
    assert round(100 * d1.attention_share) == 8 and round(100 * d128.attention_share) == 91
    assert round(d1.time_per_token / pre.time_per_token, -2) == 300  # "about 300×"
    assert pre.linear_intensity > H100.ridge > d1.linear_intensity  # prefill compute-bound, decode not
    assert d1.attention_intensity == pytest.approx(1, abs=0.01) == d128.attention_intensity  # "always about 1"


def test_exercise_7_gqa():
    kw = dict(context=4096, head_dim=128)
    mha = decode_attention_intensity(heads=64, **kw)
    gqa = decode_attention_intensity(heads=64, kv_heads=8, **kw)
    assert round(gqa / mha) == 8
    assert kv_cache_bytes(layers=80, kv_heads=8, head_dim=128, seq=4096) * 8 == kv_cache_bytes(
        layers=80, d_model=64 * 128, seq=4096)


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


@pytest.mark.parametrize("call,match", [
    (lambda: kv_cache_bytes(layers=32, seq=8), "d_model"),
    (lambda: kv_cache_bytes(layers=32, seq=8, d_model=4096, kv_heads=8, head_dim=128), "not both"),
    (lambda: layer_costs(new_tokens=10, context=5), "context"),
])
def test_bad_input_is_refused(call, match):
    with pytest.raises((ValueError, TypeError), match=match):
        call()
