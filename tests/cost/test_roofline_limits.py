"""attnlab.cost's roofline of a benchmark shape: ``attention_roofline`` (prefill: forward, backward, both;
GQA, causal, windows, Nq != Nk), ``varlen_attention_roofline`` (packed documents) and
``decode_roofline`` (one decode step), each against a count made here from the shape — the visible
(query, key) pairs enumerated on a grid, the bytes of every array summed — and the preset's peak and
bandwidth read from the preset object."""

from __future__ import annotations

import pytest
import torch

from attnlab.cost import GPUS, cost_kernels, flash_backward_kernels, flash_forward_kernels, get_gpu
from attnlab.cost.decode import decode_roofline
from attnlab.cost.roofline import attention_roofline, varlen_attention_roofline

STAT = 4  # the logsumexp L is one FP32 per query row


def pairs_on_grid(Nq: int, Nk: int, window=None, causal: bool = False) -> int:
    """Visible (query, key) pairs by the definition: key j is visible to query i iff
    i + off - left <= j <= i + off + right, off = Nk - Nq, -1 unbounded, causal = right edge 0."""
    left, right = window if window is not None else (-1, -1)
    if causal:
        right = 0
    i = torch.arange(Nq)[:, None]
    j = torch.arange(Nk)[None, :]
    off = Nk - Nq
    vis = torch.ones(Nq, Nk, dtype=torch.bool)
    if left >= 0:
        vis &= j >= i + off - left
    if right >= 0:
        vis &= j <= i + off + right
    return int(vis.sum())


def by_hand(kind, *, B, H, Hkv, Nq, Nk, D, pairs, nb, g):
    """(FLOPs, FP32 FLOPs, bytes, seconds, bound) of one kernel, counted from the shape."""
    if kind == "fwd":
        flops = B * H * pairs * (2 * D + 2 * D)  # q·k and p·v per visible pair
        fp32 = B * H * pairs * 5  # scale, max, subtract, exp, sum
        nbytes = nb * (B * H * Nq * D + B * Hkv * Nk * D * 2 + B * H * Nq * D) + STAT * B * H * Nq  # Q; K, V; O; L
    else:
        flops = B * H * pairs * 5 * (2 * D)  # S again, dV, dP, dQ, dK
        fp32 = B * H * pairs * 4
        q_side = B * H * Nq * D * 4  # Q, O, dO read; dQ written
        kv_side = B * Hkv * Nk * D * 4  # K, V read; dK, dV written
        nbytes = nb * (q_side + kv_side) + STAT * B * H * Nq
    peak = g.fp32_flops if nb == 4 else g.tensor_flops  # 4-byte data: no 16-bit tensor cores
    compute = max(flops / peak, fp32 / g.fp32_flops)
    memory = nbytes / g.hbm_bw
    return flops, fp32, nbytes, max(compute, memory), "compute" if compute > memory else "memory"


CASES = [  # B, H, Hkv, Nq, Nk, D, causal, window, gpu
    (2, 8, 2, 64, 64, 128, False, None, "H200"),  # short: memory-bound
    (1, 16, 16, 2048, 2048, 64, False, None, "H200"),  # long: compute-bound
    (3, 4, 1, 300, 700, 64, True, None, "H100"),  # causal, Nq < Nk (bottom-right)
    (1, 4, 2, 1000, 1000, 128, False, (97, 13), "H200"),  # a two-sided window
    (2, 6, 3, 513, 257, 32, True, (40, 0), "A100"),  # causal window, Nq > Nk: early queries see nothing
]
DTYPES = [("bf16", 2), ("fp32", 4)]


def test_cases_cover_both_bounds():
    bounds = set()
    for B, H, Hkv, Nq, Nk, D, causal, window, gpu in CASES:
        pairs = pairs_on_grid(Nq, Nk, window, causal)
        bounds.add(by_hand("fwd", B=B, H=H, Hkv=Hkv, Nq=Nq, Nk=Nk, D=D, pairs=pairs, nb=2, g=GPUS[gpu])[4])
    assert bounds == {"compute", "memory"}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("pass_", ["fwd", "bwd", "fwd_bwd"])
@pytest.mark.parametrize("dtype, nb", DTYPES)
def test_attention_roofline_by_hand(case, pass_, dtype, nb):
    B, H, Hkv, Nq, Nk, D, causal, window, gpu = case
    g = GPUS[gpu]
    pairs = pairs_on_grid(Nq, Nk, window, causal)
    got = attention_roofline(batch=B, heads=H, kv_heads=Hkv, seq_q=Nq, seq_k=Nk, head_dim=D, causal=causal,
                             window=window, pass_=pass_, dtype_bytes=dtype, gpu=gpu)
    kinds = ["fwd", "bwd"] if pass_ == "fwd_bwd" else [pass_]
    assert [k.name for k in got] == [{"fwd": "flash forward", "bwd": "flash backward"}[k] for k in kinds]
    for k, kind in zip(got, kinds):
        flops, fp32, nbytes, t, bound = by_hand(kind, B=B, H=H, Hkv=Hkv, Nq=Nq, Nk=Nk, D=D, pairs=pairs, nb=nb, g=g)
        assert (k.flops, k.fp32_flops, k.bytes, k.bound) == (flops, fp32, nbytes, bound)
        assert k.time == pytest.approx(t, rel=1e-12)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("kv_heads", [4, 1])
@pytest.mark.parametrize("nb", [2, 4])
def test_agrees_with_the_kernel_model_of_s5_5_and_s7_5(causal, kv_heads, nb):
    """With one-row blocks the §5.5/§7.5 kernels compute exactly the visible pairs, and with K/V in L2
    (forward) and an ideal cache (backward) they move every array once: the same FLOPs, bytes and time."""
    N, D, B, H, g = 96, 64, 2, 4, GPUS["H200"]
    common = dict(batch=B, heads=H, kv_heads=kv_heads, kv_cached=True, dtype_bytes=nb, launch=False)
    fwd = cost_kernels(flash_forward_kernels(seq=N, head_dim=D, block_q=1, block_k=1, kv_in_l2=True, causal=causal),
                       g, **common)
    bwd = cost_kernels(flash_backward_kernels(seq=N, head_dim=D, block_q=1, block_k=1, ideal_cache=True,
                                              causal=causal), g, **common)
    got = attention_roofline(batch=B, heads=H, kv_heads=kv_heads, seq_q=N, head_dim=D, causal=causal,
                             pass_="fwd_bwd", dtype_bytes=nb, gpu=g)
    for mine, model in zip(got, fwd + bwd):
        assert (mine.flops, mine.fp32_flops, mine.bytes, mine.bound) == (model.flops, model.fp32_flops, model.bytes,
                                                                          model.bound)
        assert mine.time == pytest.approx(model.time, rel=1e-12)


def test_launch_adds_one_overhead_per_kernel():
    kw = dict(batch=1, heads=8, seq_q=512, head_dim=64, causal=True, pass_="fwd_bwd", gpu="H200")
    bare, launched = attention_roofline(**kw), attention_roofline(**kw, launch=True)
    for a, b in zip(bare, launched):
        assert b.time == pytest.approx(a.time + get_gpu("H200").launch_overhead, rel=1e-12)


@pytest.mark.parametrize("pass_", ["fwd", "fwd_bwd"])
def test_varlen_is_one_kernel_over_the_documents(pass_):
    """Packed documents: FLOPs and bytes summed over the documents (each its own alignment; an empty one
    adds nothing), then one max(compute, memory) per kernel — not a sum of per-document maxima."""
    lq, lk = [5, 0, 130, 64], [9, 0, 100, 64]
    H, Hkv, D, window, g = 8, 2, 64, (31, 0), GPUS["H200"]
    got = varlen_attention_roofline(seqlens_q=lq, seqlens_k=lk, heads=H, kv_heads=Hkv, head_dim=D, causal=True,
                                    window=window, pass_=pass_, gpu="H200")
    kinds = ["fwd", "bwd"] if pass_ == "fwd_bwd" else ["fwd"]
    for k, kind in zip(got, kinds):
        per_doc = [by_hand(kind, B=1, H=H, Hkv=Hkv, Nq=nq, Nk=nk, D=D, pairs=pairs_on_grid(nq, nk, window, True),
                           nb=2, g=g) for nq, nk in zip(lq, lk)]
        flops, fp32, nbytes = (sum(d[i] for d in per_doc) for i in range(3))
        assert (k.flops, k.fp32_flops, k.bytes) == (flops, fp32, nbytes)
        t = max(flops / g.tensor_flops, fp32 / g.fp32_flops, nbytes / g.hbm_bw)
        assert k.time == pytest.approx(t, rel=1e-12)
        assert k.time <= sum(d[3] for d in per_doc) * (1 + 1e-12)
    # one document is the dense shape with batch 1
    one = varlen_attention_roofline(seqlens_q=[130], seqlens_k=[100], heads=H, kv_heads=Hkv, head_dim=D, causal=True,
                                    window=window, pass_=pass_, gpu="H200")
    dense = attention_roofline(seq_q=130, seq_k=100, heads=H, kv_heads=Hkv, head_dim=D, causal=True, window=window,
                               pass_=pass_, gpu="H200")
    assert one == dense


@pytest.mark.parametrize("B, H, Hkv, L, D, dtype, nb", [
    (16, 32, 8, 32768, 128, "bf16", 2),  # GQA group of 4: memory-bound
    (1, 32, 32, 4096, 128, 2, 2),
    (2, 256, 1, 4096, 64, "bf16", 2),  # a group of 256 query heads: ~H/Hkv FLOP per byte, compute-bound
    (1, 8, 8, 1024, 64, "fp32", 4),  # FP32 data: matmuls on the FP32 peak
])
def test_decode_roofline_by_hand(B, H, Hkv, L, D, dtype, nb):
    g = GPUS["H200"]
    k = decode_roofline(batch=B, heads=H, kv_heads=Hkv, seq=L, head_dim=D, dtype_bytes=dtype, gpu="h200")
    flops = B * H * L * (2 * D + 2 * D)  # q·k and p·v per cached key, per query head
    fp32 = B * H * L * 5
    nbytes = nb * (B * Hkv * L * D * 2 + B * H * D * 2)  # K and V once; q read and o written
    peak = g.fp32_flops if nb == 4 else g.tensor_flops
    compute, memory = max(flops / peak, fp32 / g.fp32_flops), nbytes / g.hbm_bw
    assert (k.flops, k.fp32_flops, k.bytes) == (flops, fp32, nbytes)
    assert k.time == pytest.approx(max(compute, memory), rel=1e-12)
    assert k.bound == ("compute" if compute > memory else "memory")
    # the prefill model of one query row moves the same bytes plus that row's logsumexp
    step = attention_roofline(batch=B, heads=H, kv_heads=Hkv, seq_q=1, seq_k=L, head_dim=D, dtype_bytes=dtype,
                              gpu=g)[0]
    assert (step.flops, step.bytes - STAT * B * H) == (k.flops, k.bytes)


def test_decode_bounds_both_ways():
    kw = dict(batch=1, seq=4096, head_dim=64, gpu="H200")
    assert decode_roofline(heads=32, kv_heads=8, **kw).bound == "memory"
    assert decode_roofline(heads=256, kv_heads=1, **kw).bound == "compute"


@pytest.mark.parametrize("call, exc, match", [
    (lambda: attention_roofline(seq_q=64, head_dim=64, pass_="bwd2"), ValueError, "pass_"),
    (lambda: attention_roofline(seq_q=64, head_dim=64, heads=6, kv_heads=4), ValueError, "kv_heads"),
    (lambda: attention_roofline(seq_q=0, head_dim=64), ValueError, "seq_q"),
    (lambda: attention_roofline(seq_q=64, seq_k=2.0, head_dim=64), TypeError, "seq_k"),
    (lambda: attention_roofline(seq_q=64, head_dim=64, window=(-2, 0)), ValueError, "window"),
    (lambda: attention_roofline(seq_q=64, head_dim=64, window=(8, 3), causal=True), ValueError, "causal"),
    (lambda: attention_roofline(seq_q=64, head_dim=64, gpu="X100"), ValueError, "X100"),
    (lambda: attention_roofline(seq_q=64, head_dim=64, dtype_bytes="int3"), ValueError, "dtype_bytes"),
    (lambda: attention_roofline(seq_q=64, head_dim=64, launch=1), TypeError, "launch"),
    (lambda: varlen_attention_roofline(seqlens_q=[], head_dim=64), TypeError, "seqlens_q"),
    (lambda: varlen_attention_roofline(seqlens_q=[4, -1], head_dim=64), ValueError, r"seqlens_q\[1\]"),
    (lambda: varlen_attention_roofline(seqlens_q=[4, 5], seqlens_k=[4], head_dim=64), ValueError, "seqlens_k"),
    (lambda: decode_roofline(batch=1, heads=8, seq=0, head_dim=64), ValueError, "seq"),
    (lambda: decode_roofline(batch=1, heads=8, kv_heads=3, seq=16, head_dim=64), ValueError, "kv_heads"),
    (lambda: decode_roofline(batch=True, heads=8, seq=16, head_dim=64), TypeError, "batch"),
])
def test_bad_input_is_refused(call, exc, match):
    with pytest.raises(exc, match=match):
        call()
