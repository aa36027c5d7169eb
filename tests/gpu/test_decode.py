"""Flash-Decoding Triton kernels (attnlab.gpu.decode, §8.4) against the float64 oracle.

Without CUDA the kernels run in Triton's CPU interpreter on CPU tensors (conftest sets
TRITON_INTERPRET=1), on small shapes; the ``@pytest.mark.gpu`` tests add large shapes on a GPU.
Criterion (flash-attention's): err(kernel) <= 2·err(same-dtype PyTorch reference) + the error of
rounding the exact answer to the dtype, both measured against ``attention_ref`` in float64 on the
gathered cache, sequence by sequence. The split-count models are tested with ``attnlab.cost``.
"""

import math
from dataclasses import replace

import pytest
import torch

import attnlab
from attnlab.kvcache import PagedKVCache
from attnlab.reference import attention_ref

pytest.importorskip("triton")
from attnlab.gpu import (  # noqa: E402
    choose_num_splits,
    decode_config_for,
    decode_configs,
    flash_decode_triton,
)
from attnlab.gpu.decode import kernel_config  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"


def _inputs(B, H, Hkv, Nq, D, L, dtype, device=DEV):
    q = torch.randn(B, H, Nq, D, dtype=dtype, device=device)
    k = torch.randn(B, Hkv, L, D, dtype=dtype, device=device)
    v = torch.randn(B, Hkv, L, D, dtype=dtype, device=device)
    return q, k, v


def _check_against_reference(q, k, v, lens, out, lse, *, causal=True, scale=None):
    """Each sequence b: out/lse vs attention_ref on its first lens[b] keys (float64 oracle).

    flash-attention's criterion over the whole batch: max error <= 2·(max error of the same-dtype
    PyTorch reference) + eps, eps = the error of merely rounding the exact answer to the dtype.
    """
    assert not torch.isnan(out).any(), "NaN in out"
    err = err_ref = eps = lse_err = 0.0
    for b, n in enumerate(lens):
        if n == 0:  # an empty cache: nothing to see
            assert torch.isinf(lse[b]).all() and (out[b] == 0).all()
            continue
        qb, kb, vb = q[b:b + 1], k[b:b + 1, :, :n], v[b:b + 1, :, :n]
        o64, l64 = attention_ref(qb.double(), kb.double(), vb.double(), causal=causal, scale=scale)
        o_same, _ = attention_ref(qb, kb, vb, causal=causal, scale=scale)  # the same-dtype reference
        err = max(err, (out[b:b + 1].double() - o64).abs().max().item())
        err_ref = max(err_ref, (o_same.double() - o64).abs().max().item())
        eps = max(eps, (o64.to(q.dtype).double() - o64).abs().max().item())
        seen = torch.isfinite(l64)  # rows with at least one visible key
        if seen.any():
            lse_err = max(lse_err, ((lse[b:b + 1][seen].double() - l64[seen]).abs() / l64[seen].abs().clamp(min=1)).max().item())
        # rows that see no key: out = 0, lse = -inf
        assert torch.equal(torch.isinf(lse[b:b + 1]), ~seen)
        assert (out[b:b + 1][~seen] == 0).all()
    print(f"lens {lens}: err {err:.2e}, same-dtype reference {err_ref:.2e}, rounding {eps:.2e}, lse rel err {lse_err:.2e}")
    assert err <= 2 * err_ref + eps, (err, err_ref, eps)
    assert lse_err <= 1e-5


# -- the interpreter grid (CI) --------------------------------------------------------------------------

CASES = [
    # B, H, Hkv, Nq, D, lens, splits, dtype
    (3, 4, 4, 1, 64, [97, 1, 40], 3, torch.float16),  # MHA (group 1), ragged incl. 1
    (2, 8, 2, 2, 64, [33, 64], 2, torch.bfloat16),  # GQA 4, two queries, causal among them
    (2, 8, 1, 1, 32, [50, 17], 1, torch.bfloat16),  # MQA (group 8), one split: no merge kernel
    (1, 4, 1, 3, 96, [70], 4, torch.float16),  # D = 96 (masked to 128), three queries
]


@pytest.mark.parametrize("B,H,Hkv,Nq,D,lens,splits,dtype", CASES)
def test_contiguous_matches_reference(B, H, Hkv, Nq, D, lens, splits, dtype):
    L = max(lens) + 5  # capacity beyond the longest sequence: the tail must not be read
    q, k, v = _inputs(B, H, Hkv, Nq, D, L, dtype)
    k[:, :, max(lens):] = float("nan")  # poison what no sequence holds
    v[:, :, max(lens):] = float("nan")
    seqlens = torch.tensor(lens, dtype=torch.int32, device=DEV)
    out, lse = flash_decode_triton(q, k, v, cache_seqlens=seqlens, num_splits=splits)
    assert out.shape == q.shape and out.dtype == dtype
    assert lse.shape == (B, H, Nq) and lse.dtype == torch.float32
    _check_against_reference(q, k, v, lens, out, lse)


@pytest.mark.parametrize("page_size,splits", [(16, 3), (64, 1)])
def test_paged_equals_contiguous(page_size, splits):
    B, H, Hkv, Nq, D = 3, 8, 2, 1, 64
    lens = [1, 47, 80]  # 47 and 80 are not multiples of the page size
    q, k, v = _inputs(B, H, Hkv, Nq, D, max(lens), torch.bfloat16)
    seqlens = torch.tensor(lens, dtype=torch.int32, device=DEV)
    cache = PagedKVCache.from_dense(k, v, seqlens, page_size=page_size, shuffle=True)
    cfg = decode_config_for(q, cache.k_pages[0], cache.block_table)  # the paged call's (layouts may differ)
    out_c, lse_c = flash_decode_triton(q, k, v, cache_seqlens=seqlens, num_splits=splits, config=cfg)
    out_p, lse_p = flash_decode_triton(q, cache.k_pages[0], cache.v_pages[0], cache_seqlens=cache.seqlens,
                                     block_table=cache.block_table, num_splits=splits)
    # the same configuration: the same tiles in the same order, equal to the last bit
    assert torch.equal(out_p, out_c)
    assert torch.equal(lse_p, lse_c)
    _check_against_reference(q, k, v, lens, out_p, lse_p)


def test_split_counts_agree_and_short_sequences():
    """More splits than tiles, empty splits, one-key sequences: every count gives the same answer."""
    q, k, v = _inputs(2, 4, 2, 1, 64, 40, torch.float16)
    seqlens = torch.tensor([40, 3], dtype=torch.int32, device=DEV)
    ref = None
    for s in (1, 2, 5, 64):
        out, lse = flash_decode_triton(q, k, v, cache_seqlens=seqlens, num_splits=s)
        _check_against_reference(q, k, v, [40, 3], out, lse)
        if ref is not None:
            assert (out.float() - ref.float()).abs().max() < 2e-3
        ref = out


def test_non_causal_and_scale():
    """Non-causal: every query sees all cache_seqlens[b] keys; a given scale is used."""
    q, k, v = _inputs(2, 4, 2, 2, 64, 30, torch.bfloat16)
    seqlens = torch.tensor([30, 9], dtype=torch.int32, device=DEV)
    out, lse = flash_decode_triton(q, k, v, cache_seqlens=seqlens, num_splits=2, causal=False, scale=0.3)
    _check_against_reference(q, k, v, [30, 9], out, lse, causal=False, scale=0.3)


def test_fully_masked_rows():
    """Length shorter than the queries: the first queries see nothing (out 0, lse -inf), no NaN."""
    q, k, v = _inputs(2, 2, 1, 3, 32, 8, torch.float16)
    seqlens = torch.tensor([1, 0], dtype=torch.int32, device=DEV)
    out, lse = flash_decode_triton(q, k, v, cache_seqlens=seqlens, num_splits=2)
    assert torch.isinf(lse[0, :, :2]).all() and torch.isfinite(lse[0, :, 2]).all()
    assert torch.isinf(lse[1]).all() and (out[1] == 0).all() and (out[0, :, :2] == 0).all()
    _check_against_reference(q, k, v, [1, 0], out, lse)


def test_choose_num_splits_is_the_wave_model():
    from attnlab import cost

    block_n = kernel_config(128).block_n
    for B, Hkv, L in [(1, 8, 32768), (1, 32, 4096), (16, 8, 131072), (1, 8, 100)]:
        want = cost.best_num_splits(batch=B, heads=Hkv, seq=L, head_dim=128, gpu=cost.get_gpu("H100"), max_splits=64,
                                    min_split_len=block_n, merge_launch=True)
        assert choose_num_splits(batch=B, kv_heads=Hkv, seq=L, head_dim=128, device="cpu") == want
        assert 1 <= want <= max(1, L // block_n)
    # batch 1, 8 K/V heads, 32K on 132 SMs: 16 splits fill one wave of 128 programs
    assert choose_num_splits(batch=1, kv_heads=8, seq=32768, head_dim=128, device="cpu") == 16
    q, k, v = _inputs(1, 4, 2, 1, 64, 50, torch.bfloat16)
    out, lse = flash_decode_triton(q, k, v)  # num_splits=None, cache_seqlens=None: the full cache
    _check_against_reference(q, k, v, [50], out, lse)


def test_unsupported_inputs_are_refused_and_the_dispatch_falls_back(monkeypatch):
    """flash_decode_triton never falls back; attnlab.flash_decode runs float32 / D = 59 blockwise."""
    q, k, v = _inputs(2, 4, 2, 1, 59, 20, torch.float32)  # float32 and D = 59: the PyTorch path
    seqlens = torch.tensor([20, 7], dtype=torch.int32, device=DEV)
    with pytest.raises(ValueError, match="do not take dtype torch.float32"):
        flash_decode_triton(q, k, v, cache_seqlens=seqlens)
    with pytest.raises(ValueError, match="do not take head dim 59"):
        flash_decode_triton(q.half(), k.half(), v.half(), cache_seqlens=seqlens)
    out, lse = attnlab.flash_decode(q, k, v, cache_seqlens=seqlens)
    # float32 is outside flash-attention's criterion (made for 16-bit kernels: on a GPU the split
    # path and cuBLAS round differently by a few ulps); hold it to float32's own accuracy instead
    for b, n in enumerate([20, 7]):
        o64, l64 = attention_ref(q[b:b + 1].double(), k[b:b + 1, :, :n].double(), v[b:b + 1, :, :n].double(),
                                 causal=True)
        assert (out[b:b + 1].double() - o64).abs().max().item() < 1e-5
        assert (lse[b:b + 1].double() - l64).abs().max().item() < 1e-5


@pytest.mark.parametrize("bad,err", [
    (dict(q=torch.zeros(2, 4, 1, 64)), TypeError),  # dtype differs from the cache
    (dict(cache_seqlens=torch.tensor([5, 5, 5], dtype=torch.int32)), ValueError),  # wrong length
    (dict(cache_seqlens=torch.tensor([5, 99], dtype=torch.int32)), ValueError),  # beyond the capacity
    (dict(block_table=torch.zeros(2, 2)), TypeError),  # float block table
    (dict(num_splits=0), ValueError),
    (dict(k_cache=torch.zeros(2, 3, 20, 64, dtype=torch.float16)), ValueError),  # 4 heads vs 3
])
def test_bad_input_raises(bad, err):
    args = dict(q=torch.randn(2, 4, 1, 64, dtype=torch.float16), k_cache=torch.randn(2, 2, 20, 64, dtype=torch.float16),
                v_cache=torch.randn(2, 2, 20, 64, dtype=torch.float16), cache_seqlens=None, block_table=None,
                num_splits=None)
    args.update(bad)
    if args["k_cache"].shape != args["v_cache"].shape:
        args["v_cache"] = torch.zeros_like(args["k_cache"])
    with pytest.raises(err):
        flash_decode_triton(args.pop("q"), args.pop("k_cache"), args.pop("v_cache"), **args)


# -- GPU (large shapes) -----------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("H,Hkv,Nq", [(32, 32, 1), (32, 8, 1), (32, 4, 4), (64, 8, 2)])
def test_gpu_large_ragged(dtype, H, Hkv, Nq):
    lens = [1, 1025, 4097, 16000]
    q, k, v = _inputs(len(lens), H, Hkv, Nq, 128, 16384, dtype)
    seqlens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    out, lse = flash_decode_triton(q, k, v, cache_seqlens=seqlens)  # the model's split count
    _check_against_reference(q, k, v, lens, out, lse)
    out1, _ = flash_decode_triton(q, k, v, cache_seqlens=seqlens, num_splits=1)
    _check_against_reference(q, k, v, lens, out1, lse)


@pytest.mark.gpu
@pytest.mark.parametrize("page_size,D", [(16, 128), (32, 64), (64, 256), (128, 96), (256, 128)])
def test_gpu_paged_equals_contiguous(page_size, D):
    lens = [1, 300, 5000, 2049]
    q, k, v = _inputs(len(lens), 32, 8, 1, D, 5000, torch.bfloat16)
    seqlens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    cache = PagedKVCache.from_dense(k, v, seqlens, page_size=page_size, shuffle=True)
    cfg = decode_config_for(q, cache.k_pages[0], cache.block_table)  # the paged call's (layouts may differ)
    for s in (1, 7, None):
        out_c, lse_c = flash_decode_triton(q, k, v, cache_seqlens=seqlens, num_splits=s or 16, config=cfg)
        out_p, lse_p = flash_decode_triton(q, cache.k_pages[0], cache.v_pages[0], cache_seqlens=cache.seqlens,
                                         block_table=cache.block_table, num_splits=s or 16)
        assert torch.equal(out_p, out_c) and torch.equal(lse_p, lse_c)
    _check_against_reference(q, k, v, lens, out_p, lse_p)
    assert math.isfinite(lse_p[0].max().item())
    # every config the chooser can return (page ids one per tile or one per key), paged == contiguous
    for cfg in decode_configs(D).values():
        out_c, lse_c = flash_decode_triton(q, k, v, cache_seqlens=seqlens, num_splits=5, config=cfg)
        out_p, lse_p = flash_decode_triton(q, cache.k_pages[0], cache.v_pages[0], cache_seqlens=cache.seqlens,
                                           block_table=cache.block_table, num_splits=5, config=cfg)
        assert torch.equal(out_p, out_c) and torch.equal(lse_p, lse_c)
        _check_against_reference(q, k, v, lens, out_p, lse_p)


@pytest.mark.gpu
def test_gpu_paged_small_pages_take_the_small_config():
    """B·Hkv >= SMs/2: a contiguous cache (and 256-key pages) run the large config, 64-key pages the
    small one; each paged call equals the contiguous cache run with its own config, to the last bit."""
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    B, Hkv = -(-sms // 2 // 8), 8  # B·Hkv >= SMs/2
    lens = [1 + (977 * b) % 1500 for b in range(B)]
    q, k, v = _inputs(B, 32, Hkv, 1, 128, 1536, torch.bfloat16)
    seqlens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    assert decode_config_for(q, k) == decode_configs(128)["large"]
    for page_size, name in ((64, "small"), (256, "large")):
        cache = PagedKVCache.from_dense(k, v, seqlens, page_size=page_size, shuffle=True)
        cfg = decode_config_for(q, cache.k_pages[0], block_table=cache.block_table)
        assert cfg == replace(decode_configs(128)[name], order="chunks")  # (paged caches: runs of tiles)
        out_p, lse_p = flash_decode_triton(q, cache.k_pages[0], cache.v_pages[0], cache_seqlens=cache.seqlens,
                                         block_table=cache.block_table, num_splits=3)
        out_c, lse_c = flash_decode_triton(q, k, v, cache_seqlens=seqlens, num_splits=3, config=cfg)
        assert torch.equal(out_p, out_c) and torch.equal(lse_p, lse_c)
    _check_against_reference(q, k, v, lens, out_p, lse_p)


@pytest.mark.parametrize("paged", [False, True])
def test_fused_merge_matches_merge_kernel(paged):
    """The in-kernel merge (last program of a group merges) against the separate merge kernel."""
    B, H, Hkv, Nq, D = 2, 8, 2, 2, 64
    lens = [45, 2]
    q, k, v = _inputs(B, H, Hkv, Nq, D, 48, torch.float16)
    seqlens = torch.tensor(lens, dtype=torch.int32, device=DEV)
    args = (q, k, v)
    table = None
    if paged:
        cache = PagedKVCache.from_dense(k, v, seqlens, page_size=16, shuffle=True)
        args, table = (q, cache.k_pages[0], cache.v_pages[0]), cache.block_table
    cfg = decode_config_for(q, args[1], block_table=table)
    for _ in range(3):  # the arrival counters must be back at zero after each call, or the next merges early
        out_f, lse_f = flash_decode_triton(*args, cache_seqlens=seqlens, block_table=table, num_splits=3,
                                           config=replace(cfg, fused_merge=True))
        _check_against_reference(q, k, v, lens, out_f, lse_f)
    out_m, lse_m = flash_decode_triton(*args, cache_seqlens=seqlens, block_table=table, num_splits=3,
                                       config=replace(cfg, fused_merge=False))
    assert (out_f.float() - out_m.float()).abs().max() <= 2e-3
    fin = torch.isfinite(lse_m)
    assert torch.equal(fin, torch.isfinite(lse_f)) and (lse_f[fin] - lse_m[fin]).abs().max() < 1e-5


@pytest.mark.parametrize("H,Hkv,Nq", [(6, 2, 1), (4, 4, 1), (8, 2, 2)])
def test_fused_merge_matches_merge_kernel_over_groups(H, Hkv, Nq):
    """Both merges on groups of 3, 1 and 8 query rows, with 7 splits: short sequences leave splits empty
    (lse = -inf) and one sequence has no key at all."""
    from attnlab.gpu import decode

    decode.clear_plans()
    B, D = 3, 64
    lens = [120, 5, 0]
    q, k, v = _inputs(B, H, Hkv, Nq, D, 128, torch.bfloat16)
    seqlens = torch.tensor(lens, dtype=torch.int32, device=DEV)
    cfg = decode_config_for(q, k)
    out_f, lse_f = flash_decode_triton(q, k, v, cache_seqlens=seqlens, num_splits=7,
                                       config=replace(cfg, fused_merge=True))
    out_m, lse_m = flash_decode_triton(q, k, v, cache_seqlens=seqlens, num_splits=7,
                                       config=replace(cfg, fused_merge=False))
    decode.clear_plans()
    for out, lse in ((out_f, lse_f), (out_m, lse_m)):
        _check_against_reference(q, k, v, lens, out, lse)
    assert (out_f.float() - out_m.float()).abs().max() <= 2e-2  # two bf16 roundings of the same sums
    fin = torch.isfinite(lse_m)
    assert torch.equal(fin, torch.isfinite(lse_f)) and (lse_f[fin] - lse_m[fin]).abs().max() < 1e-5


# -- the kernel configurations ------------------------------------------------------------------------

def test_kernel_config_rule(monkeypatch):
    """GPU configs: a contiguous cache at D <= 128 takes the large tile at every B·Hkv; paged caches
    (and D = 256) the small one below B·Hkv = SMs/2, the large one from there unless the pages do not
    hold whole large tiles; D = 256 halves the tile."""
    monkeypatch.setenv("TRITON_INTERPRET", "0")  # the rule for a GPU (read at call time; no kernel runs here)
    for D, bns in ((128, (64, 128)), (64, (64, 128)), (256, (32, 64))):
        assert kernel_config(D, batch_heads=32, sms=132).block_n == (bns[1] if D <= 128 else bns[0])
        assert kernel_config(D, batch_heads=1, sms=132).block_n == (bns[1] if D <= 128 else bns[0])
        assert kernel_config(D, batch_heads=66, sms=132).block_n == bns[1]
        assert kernel_config(D, batch_heads=128, sms=132) == decode_configs(D)["large"]
        for page_size in (16, 64, 128, 256):
            got = kernel_config(D, batch_heads=128, sms=132, page_size=page_size)
            want = decode_configs(D)["large" if page_size % bns[1] == 0 else "small"]
            assert got == replace(want, order="chunks")  # paged: runs of tiles
            assert kernel_config(D, batch_heads=32, sms=132, page_size=page_size) == replace(
                decode_configs(D)["small"], order="chunks")
    assert decode_configs(128)["small"].key == (64, 128, 4, 3)


def _chooser_configs():
    """Every config the GPU chooser can return, for the D of the interpreter tests."""
    return [(D, name, c) for D in (64, 256) for name, c in decode_configs(D).items()]


@pytest.mark.parametrize("D,name,cfg", _chooser_configs(), ids=lambda x: x if isinstance(x, str) else None)
def test_chooser_configs_match_reference(D, name, cfg):
    """Each config the chooser can return, contiguous with and without cache_seqlens (the
    HAS_SEQLENS=False path), split and not, against the float64 oracle."""
    B, H, Hkv = 2, 4, 2
    cfg = replace(cfg, num_stages=1) if DEV == "cpu" else cfg
    lens = [3 * cfg.block_n + 5, 1]
    L = lens[0]
    q, k, v = _inputs(B, H, Hkv, 1, D, L, torch.bfloat16)
    out, lse = flash_decode_triton(q, k, v, num_splits=2, config=cfg)  # full cache, no seqlens
    _check_against_reference(q, k, v, [L, L], out, lse)
    seqlens = torch.tensor(lens, dtype=torch.int32, device=DEV)
    out, lse = flash_decode_triton(q, k, v, cache_seqlens=seqlens, num_splits=1, config=cfg)
    _check_against_reference(q, k, v, lens, out, lse)


@pytest.mark.parametrize("page_size,block_n", [(16, 64), (32, 16), (128, 64), (256, 128)])
def test_paged_prefetch_equals_contiguous(page_size, block_n):
    """Page ids loaded one tile ahead: one per tile (page_size a multiple of BLOCK_N) or one per key;
    lengths not multiples of the page size, splits starting mid-page, empty splits: bit-equal to the
    contiguous cache with the same tiles."""
    B, H, Hkv, D = 3, 4, 2, 32
    lens = [page_size * 2 + 7, 1, block_n + 3]
    q, k, v = _inputs(B, H, Hkv, 1, D, max(lens), torch.float16)
    seqlens = torch.tensor(lens, dtype=torch.int32, device=DEV)
    cache = PagedKVCache.from_dense(k, v, seqlens, page_size=page_size, shuffle=True)
    cfg = replace(decode_config_for(q, k), block_n=block_n)
    for splits in (3,):  # splits of 2–3 tiles: each starts with a prefetched tile and ends with a masked one
        out_c, lse_c = flash_decode_triton(q, k, v, cache_seqlens=seqlens, num_splits=splits, config=cfg)
        out_p, lse_p = flash_decode_triton(q, cache.k_pages[0], cache.v_pages[0], cache_seqlens=cache.seqlens,
                                           block_table=cache.block_table, num_splits=splits, config=cfg)
        assert torch.equal(out_p, out_c) and torch.equal(lse_p, lse_c)
    _check_against_reference(q, k, v, lens, out_p, lse_p)


# -- how tiles are dealt to splits: one run each ("chunks") or in turn ("strided"), and the L2 prefetch ------


@pytest.fixture
def split_order(monkeypatch):
    """Set ``decode_plan.SPLIT_ORDER`` and ``PREFETCH_TILES`` for one call (plans made again)."""
    from attnlab.gpu import decode, decode_plan

    def set_order(order: str, prefetch: int = 0):
        monkeypatch.setattr(decode_plan, "SPLIT_ORDER", order)
        monkeypatch.setattr(decode_plan, "PREFETCH_TILES", prefetch)
        decode.clear_plans()

    yield set_order
    decode.clear_plans()


@pytest.mark.parametrize("window", [None, (21, 0)], ids=["no-window", "window"])
def test_split_orders_agree_with_the_reference(split_order, window):
    """Both orders on ragged lengths (a tile cut by the length, more splits than some sequences' tiles, an
    empty cache, a window starting mid-tile), K/V past each length poisoned: each gives the oracle's
    answer, and they agree with each other to rounding."""
    lens = [97, 1, 0, 40]
    B, H, Hkv, Nq, D = len(lens), 8, 2, 2, 64
    q, k, v = _inputs(B, H, Hkv, Nq, D, max(lens) + 11, torch.bfloat16)
    kp, vp = k.clone(), v.clone()
    for b, n in enumerate(lens):
        kp[b, :, n:] = float("nan")
        vp[b, :, n:] = float("nan")
    seqlens = torch.tensor(lens, dtype=torch.int32, device=DEV)
    outs = {}
    for order in ("chunks", "strided"):
        split_order(order)
        out, lse = flash_decode_triton(q, kp, vp, cache_seqlens=seqlens, num_splits=3, window=window)
        assert not torch.isnan(out).any()
        if window is None:
            _check_against_reference(q, k, v, lens, out, lse)
        outs[order] = out.float(), lse
    assert (outs["chunks"][0] - outs["strided"][0]).abs().max() < 2e-2
    seen = torch.isfinite(outs["chunks"][1])
    assert torch.equal(seen, torch.isfinite(outs["strided"][1]))
    assert (outs["chunks"][1][seen] - outs["strided"][1][seen]).abs().max() < 1e-4


def test_split_order_is_checked(split_order):
    split_order("round-robin")
    q, k, v = _inputs(1, 2, 1, 1, 32, 16, torch.float16)
    with pytest.raises(ValueError, match="SPLIT_ORDER"):
        flash_decode_triton(q, k, v)


def test_split_layout_prefetches_only_where_the_first_tiles_are_known(monkeypatch):
    """The prefetch needs a strided order, no left window edge, a contiguous cache with unit stride along D,
    and a CUDA device outside the interpreter; the line count covers a key row."""
    from attnlab import variants
    from attnlab.gpu import decode_plan

    monkeypatch.setattr(decode_plan, "SPLIT_ORDER", "strided")
    monkeypatch.setattr(decode_plan, "PREFETCH_TILES", 2)
    monkeypatch.setattr(decode_plan, "interpret_mode", lambda: False)
    cuda, cpu = torch.device("cuda", 0), torch.device("cpu")
    full, window = variants.Mask(left=-1, right=0), variants.Mask(left=100, right=0)
    unit, strided_d = (1, 1, 128, 1), (1, 1, 256, 2)
    kw = dict(k_strides=unit, v_strides=unit, head_dim=128, itemsize=2)
    assert decode_plan.split_layout(full, paged=False, device=cuda, **kw) == (True, 2, 2)
    assert decode_plan.split_layout(window, paged=False, device=cuda, **kw) == (True, 0, 2)
    assert decode_plan.split_layout(full, paged=True, device=cuda, **kw) == (True, 0, 2)
    assert decode_plan.split_layout(full, paged=False, device=cpu, **kw) == (True, 0, 2)
    assert decode_plan.split_layout(full, paged=False, device=cuda, **{**kw, "k_strides": strided_d})[1] == 0
    assert decode_plan.split_layout(full, paged=False, device=cuda, **{**kw, "head_dim": 96})[2] == 2  # 192 B
    assert decode_plan.split_layout(full, paged=False, device=cuda, **{**kw, "head_dim": 256, "itemsize": 4})[2] == 8
    assert decode_plan.split_layout(full, paged=False, device=cuda, **{**kw, "head_dim": 32})[2] == 1
    monkeypatch.setattr(decode_plan, "SPLIT_ORDER", "chunks")
    assert decode_plan.split_layout(full, paged=False, device=cuda, **kw) == (False, 0, 2)
    monkeypatch.setattr(decode_plan, "SPLIT_ORDER", None)  # the configuration's order
    assert decode_plan.split_layout(full, paged=True, device=cuda, order="chunks", **kw) == (False, 0, 2)
    assert decode_plan.split_layout(full, paged=False, device=cuda, order="strided", **kw) == (True, 2, 2)
    with pytest.raises(ValueError, match="DecodeConfig.order"):
        decode_plan.split_layout(full, paged=False, device=cuda, order="zigzag", **kw)


def test_contiguous_caches_take_the_strided_order_and_paged_ones_chunks():
    """``kernel_config``: a contiguous cache's splits take every S-th tile, a paged cache's runs of tiles (what
    measured faster for each); a paged call and a contiguous one given its configuration run the same tiles in the
    same order, so they agree to the bit."""
    assert kernel_config(128).order == "strided" and kernel_config(64, batch_heads=4).order == "strided"
    for page_size in (16, 64, 256):
        assert kernel_config(128, page_size=page_size).order == "chunks"
        assert kernel_config(128, batch_heads=512, page_size=page_size).order == "chunks"
    lens = [70, 3]
    q, k, v = _inputs(2, 4, 2, 1, 32, 80, torch.bfloat16)
    seqlens = torch.tensor(lens, dtype=torch.int32, device=DEV)
    cache = PagedKVCache.from_dense(k, v, seqlens, page_size=16, shuffle=True)
    pcfg = decode_config_for(q, cache.k_pages[0], cache.block_table)
    assert pcfg.order == "chunks" and decode_config_for(q, k).order == "strided"
    out_c = flash_decode_triton(q, k, v, cache_seqlens=seqlens, num_splits=3, config=pcfg)
    out_p = flash_decode_triton(q, cache.k_pages[0], cache.v_pages[0], cache_seqlens=cache.seqlens,
                                block_table=cache.block_table, num_splits=3)
    assert torch.equal(out_p[0], out_c[0]) and torch.equal(out_p[1], out_c[1])


@pytest.mark.gpu
@pytest.mark.parametrize("D", [64, 96, 128, 256])
def test_gpu_prefetch_changes_no_bit(split_order, D):
    """The L2 prefetch is a hint: with it the same bits as without, on lengths that cut tiles, short sequences
    in a long cache (prefetched tiles past the length), a capacity that is not a multiple of the tile, and
    the model's split count; both orders give the oracle's answer."""
    lens = [1, 77, 1025, 4097, 9000]
    q, k, v = _inputs(len(lens), 32, 8, 1, D, 9000 + 77, torch.bfloat16)
    seqlens = torch.tensor(lens, dtype=torch.int32, device="cuda")
    got = {}
    for order, prefetch in (("chunks", 0), ("strided", 0), ("strided", 2), ("strided", 4)):
        split_order(order, prefetch)
        for splits in (None, 7):
            out, lse = flash_decode_triton(q, k, v, cache_seqlens=seqlens, num_splits=splits)
            got[order, prefetch, splits] = out, lse
        _check_against_reference(q, k, v, lens, *got[order, prefetch, None])
    for splits in (None, 7):
        for prefetch in (2, 4):
            assert torch.equal(got["strided", prefetch, splits][0], got["strided", 0, splits][0])
            assert torch.equal(got["strided", prefetch, splits][1], got["strided", 0, splits][1])


@pytest.mark.parametrize("name,sms,preset,calibrated", [
    ("NVIDIA H200", 132, "H200", True), ("NVIDIA H100 80GB HBM3", 132, "H100", True),
    ("NVIDIA H100 PCIe", 114, "H100", True), ("NVIDIA A100-SXM4-80GB", 108, "A100", False),
    ("NVIDIA GeForce RTX 4090", 128, None, False)])
def test_a_devices_preset_and_whether_a_calibration_applies(name, sms, preset, calibrated, monkeypatch):
    """``gpu_for_device``: the preset the device's name matches, with the device's SM count; the H200 and the H100
    take a calibration (measured, or predicted from the H200's), any other GPU the wave model — a device matching no
    preset keeps the H100's numbers under its own name, so the H100's calibration does not apply to it."""
    from types import SimpleNamespace

    from attnlab import cost
    from attnlab.gpu.decode_config import decode_configs, gpu_for_device

    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda index: SimpleNamespace(name=name, multi_processor_count=sms))
    g = gpu_for_device.__wrapped__(0)
    assert g.sms == sms and g.name == (preset or name)
    assert g.hbm_bw == cost.get_gpu(preset or "H100").hbm_bw
    large = decode_configs(64)["large"].key  # (the GPU's configuration at D = 64, the one decode_host.py times)
    assert (cost.calibration_for_config(g.name, large) is not None) is calibrated
    shape = dict(batch=1, kv_heads=8, seq=32768, head_dim=64)
    wave = cost.best_num_splits(batch=1, heads=8, seq=32768, head_dim=64, gpu=g, max_splits=64, merge_launch=True,
                                min_split_len=large[0])
    assert (cost.decode_num_splits(**shape, gpu=g, config=large) == wave) is not calibrated
