"""attnlab.blockwise forward (§5.1 FA2 order, §6.2 causal skipping, §6.3 FA1 order) against attention_ref.
float64 unless a test says otherwise."""

import math

import pytest
import torch
from tests.helpers import BLOCKS, F64, SHAPES, abs_err, assert_lse, qkv, shape_id

from attnlab import AttnDims
from attnlab.blockwise import IOStats, cpu_block_sizes, flash_forward, flash_forward_fa1
from attnlab.blockwise.programs import program_chunks, programs_per_step
from attnlab.reference import attention_ref

FORWARDS = [flash_forward, flash_forward_fa1]


@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("fwd", FORWARDS)
def test_forward_matches_reference(fwd, causal, shape):
    B, H, Hkv, Nq, Nk, D = shape
    q, k, v = qkv(*shape, Dv=D + 3)  # Dv != D as well
    want_o, want_l = attention_ref(q, k, v, causal=causal)
    for bq, bk in BLOCKS if Nq * Nk < 1025 * 1025 else BLOCKS[:1]:
        o, l = fwd(q, k, v, causal=causal, block_q=bq, block_k=bk)
        print(fwd.__name__, shape, causal, (bq, bk), "max |Δout| =", abs_err(o, want_o))
        assert o.shape == want_o.shape and o.dtype == F64 and l.dtype == F64
        assert not o.isnan().any()
        torch.testing.assert_close(o, want_o, rtol=0, atol=1e-10)
        assert_lse(l, want_l, 1e-10)


@pytest.mark.parametrize("threads", [1, 2])
def test_forward_inprogram_chunks(threads):
    # large blocks: one (batch, K/V head) per step; with more threads the steps are dealt out to
    # worker threads (each on one intra-op thread), and the caller's thread setting is left alone
    q, k, v = qkv(2, 4, 2, 300, 333, 16)
    want_o, want_l = attention_ref(q, k, v, causal=True)
    n = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        per_step = programs_per_step(AttnDims(2, 4, 2, 300, 333, 16, 16), 256, 512, q.device)
        o, l = flash_forward(q, k, v, causal=True, block_q=256, block_k=512)
        assert torch.get_num_threads() == threads
        single = programs_per_step(AttnDims(1, 4, 1, 300, 333, 16, 16), 256, 512, q.device)
    finally:
        torch.set_num_threads(n)
    assert per_step == 1
    assert single == 1  # a lone program: its operations are split across threads instead
    torch.testing.assert_close(o, want_o, rtol=0, atol=1e-10)
    assert_lse(l, want_l, 1e-10)


@pytest.mark.parametrize("B,Hkv,per_step", [(1, 1, 1), (3, 4, 1), (3, 4, 3), (3, 4, 4), (3, 4, 9), (2, 3, 100)])
def test_program_chunks_cover_every_program_once(B, Hkv, per_step):
    seen = torch.zeros(B, Hkv, dtype=torch.int64)
    for bs, hs in program_chunks(B, Hkv, per_step):
        assert seen[bs, hs].numel() <= per_step
        seen[bs, hs] += 1
    assert (seen == 1).all()


def test_fully_masked_rows_give_zero_and_minus_inf():
    q, k, v = qkv(1, 2, 1, 9, 4, 8)  # Nq > Nk: queries 0..4 see no key
    for fwd in FORWARDS:
        o, l = fwd(q, k, v, causal=True, block_q=2, block_k=3)
        assert (o[:, :, :5] == 0).all() and (l[:, :, :5] == -math.inf).all()
        assert torch.isfinite(l[:, :, 5:]).all()
    o, l = flash_forward(q, k[:, :, :0], v[:, :, :0])  # no keys at all
    assert (o == 0).all() and (l == -math.inf).all()


def test_non_contiguous_inputs_and_default_scale():
    x = torch.randn(2, 97, 4, 16, dtype=F64)  # (B, N, H, D) as a model produces it
    q = x.transpose(1, 2)
    k = torch.randn(2, 97, 2, 16, dtype=F64).transpose(1, 2)
    v = torch.randn(2, 97, 2, 16, dtype=F64).transpose(1, 2)
    want_o, want_l = attention_ref(q, k, v, causal=True)
    o, l = flash_forward(q, k, v, causal=True, block_q=None, block_k=None)
    torch.testing.assert_close(o, want_o, rtol=0, atol=1e-10)
    o, _ = flash_forward(q, k, v, scale=0.3)
    torch.testing.assert_close(o, attention_ref(q, k, v, scale=0.3)[0], rtol=0, atol=1e-10)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_low_precision_error_at_most_twice_the_same_dtype_reference(dtype):
    q, k, v = qkv(1, 4, 2, 300, 300, 64)
    want, _ = attention_ref(q, k, v, causal=True)
    ref_lp, _ = attention_ref(q.to(dtype), k.to(dtype), v.to(dtype), causal=True)
    o, l = flash_forward(q.to(dtype), k.to(dtype), v.to(dtype), causal=True)
    err, err_ref = abs_err(o, want), abs_err(ref_lp, want)
    print(dtype, "flash", err, "same-dtype reference", err_ref)
    assert o.dtype == dtype and l.dtype == torch.float32
    assert err <= 2 * err_ref + 1e-7
    if dtype == torch.float32:
        assert err < 1e-5  # float32 rounding: differences near 1e-6


def test_float16_scores_in_the_hundreds():
    q, k, v = qkv(1, 2, 2, 97, 97, 16, scale=60.0)  # |scores| reach several hundred
    q, k, v = q.half().double(), k.half().double(), v.half().double()  # exactly representable in float16
    want, want_l = attention_ref(q, k, v, causal=True)
    assert (q @ k.transpose(-1, -2) / 4).abs().max() > 200
    o, l = flash_forward(q.half(), k.half(), v.half(), causal=True)
    assert torch.isfinite(o).all() and torch.isfinite(l).all()
    assert abs_err(o, want) < 1e-2


def test_stats_do_not_change_the_result():
    q, k, v = qkv(1, 2, 1, 97, 97, 16)
    for fwd in FORWARDS:
        a = fwd(q, k, v, causal=True)
        b = fwd(q, k, v, causal=True, stats=IOStats())
        assert all(torch.equal(x, y) for x, y in zip(a, b))



def test_cpu_block_sizes_bound_the_score_tile():
    assert cpu_block_sizes(AttnDims(1, 8, 8, 4096, 4096, 64, 64)) == (256, 512)  # the benchmarked pair
    for dims in (AttnDims(1, 8, 8, 16384, 16384, 64, 64), AttnDims(4, 32, 8, 16384, 16384, 128, 128),
                 AttnDims(1, 1, 1, 1, 5, 16, 16), AttnDims(2, 3, 1, 97, 1025, 59, 59)):
        br, bc = cpu_block_sizes(dims)
        assert 1 <= br <= min(256, dims.Nq) and 1 <= bc <= min(512, dims.Nk)
        assert dims.B * dims.H * br * bc <= max(1 << 20, dims.B * dims.H * 16 * bc)  # 16 rows at least

