"""Decode plans (attnlab.gpu.decode): a call with an earlier call's signature reuses that call's plan
and, on a GPU, its compiled kernel launched directly — and gives exactly what a fresh, fully checked
call gives. Every change of signature (shape, stride, dtype, alignment, variant, split count) makes a
new plan; bad input is still refused after a plan exists.

Without CUDA the kernels run in Triton's CPU interpreter (plans are made and reused there too; only
the direct launch of a compiled kernel needs a GPU, and the same tests cover it there).
"""

from dataclasses import replace

import pytest
import torch
from tests.helpers import graph_after_eager

import attnlab
from attnlab.reference import attention_ref

pytest.importorskip("triton")
from attnlab.gpu import decode  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"
pytestmark = pytest.mark.usefixtures("interpreter_bfloat16")

B, H, HKV, D, L = 2, 4, 2, 32, 80


def _cache(*, dtype=torch.bfloat16, Nq=1, L=L, D=D):
    q = torch.randn(B, H, Nq, D, dtype=dtype, device=DEV)
    k = torch.randn(B, HKV, L, D, dtype=dtype, device=DEV)
    v = torch.randn(B, HKV, L, D, dtype=dtype, device=DEV)
    return q, k, v


def _fresh(q, k, v, **kw):
    """The same call with no plan kept: every check, a new plan."""
    decode.clear_plans()
    out = decode.flash_decode_triton(q, k, v, **kw)
    decode.clear_plans()
    return out


def _counts():
    """plan_stats without the bytes of kept buffers."""
    return {k: v for k, v in decode.plan_stats().items() if k not in ("scratch_bytes", "graph_counter_bytes")}


def _same(a, b):
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def _slopes(shape):
    return torch.rand(shape, dtype=torch.float32, device=DEV) * 0.5


VARIANTS = {
    "dense": {},
    "window": {"window": (24, 0)},
    "softcap": {"softcap": 5.0},
    "alibi-h": {"alibi_slopes": "H"},
    "alibi-bh": {"alibi_slopes": "BH"},
    "one-split": {"num_splits": 1},
    "merge-kernel": {"num_splits": 3, "config": "merge-kernel"},
    "int64-lengths": {"lengths": torch.int64},
}


def _kwargs(name):
    kw = dict(VARIANTS[name])
    if "alibi_slopes" in kw:
        kw["alibi_slopes"] = _slopes((H,) if kw["alibi_slopes"] == "H" else (B, H))
    if kw.get("config") == "merge-kernel":
        kw["config"] = replace(decode.decode_config_for(torch.empty(B, H, 1, D), torch.empty(B, HKV, L, D)),
                               fused_merge=False)
    dtype = kw.pop("lengths", torch.int32)
    return kw, dtype


@pytest.mark.parametrize("name", list(VARIANTS))
def test_second_call_reuses_the_plan_and_equals_a_checked_call(name):
    kw, len_dtype = _kwargs(name)
    q, k, v = _cache()
    decode.clear_plans()
    decode.flash_decode_triton(q, k, v, cache_seqlens=torch.tensor([L, 37], dtype=len_dtype, device=DEV), **kw)
    assert _counts() == {"hits": 0, "plans": 1, "resized": 0, "restreamed": 0, "cached": 1}
    # new queries and new lengths, same signature: the plan is reused and reads the new values
    q2 = torch.randn_like(q)
    lens2 = torch.tensor([5, L - 1], dtype=len_dtype, device=DEV)
    got = decode.flash_decode_triton(q2, k, v, cache_seqlens=lens2, **kw)
    assert decode.plan_stats()["hits"] == 1
    _same(got, _fresh(q2, k, v, cache_seqlens=lens2, **kw))


def test_paged_cache_with_int64_table_reuses_its_plan():
    q, k, v = _cache()
    page = 16
    pages = torch.randperm(B * L // page, device=DEV)
    kp = k.reshape(B, HKV, L // page, page, D).permute(0, 2, 3, 1, 4).reshape(-1, page, HKV, D)[torch.argsort(pages)]
    vp = v.reshape(B, HKV, L // page, page, D).permute(0, 2, 3, 1, 4).reshape(-1, page, HKV, D)[torch.argsort(pages)]
    table = pages.reshape(B, L // page).to(torch.int64)
    lens = torch.tensor([L, 41], dtype=torch.int32, device=DEV)
    decode.clear_plans()
    first = decode.flash_decode_triton(q, kp, vp, cache_seqlens=lens, block_table=table)
    again = decode.flash_decode_triton(q, kp, vp, cache_seqlens=lens, block_table=table)
    assert decode.plan_stats()["hits"] == 1
    _same(first, again)
    cfg = decode.decode_config_for(q, kp, table)  # the contiguous cache's answer with the paged call's configuration
    _same(again, decode.flash_decode_triton(q, k, v, cache_seqlens=lens, config=cfg))


CHANGES = {
    "window": {"window": (8, 0)},
    "not causal": {"causal": False},
    "scale": {"scale": 0.3},
    "softcap": {"softcap": 2.0},
    "num_splits": {"num_splits": 2},
}


@pytest.mark.parametrize("name", list(CHANGES))
def test_each_change_of_signature_makes_a_new_plan(name):
    q, k, v = _cache()
    lens = torch.tensor([L, 50], dtype=torch.int32, device=DEV)
    kw = CHANGES[name]
    want = _fresh(q, k, v, cache_seqlens=lens, **kw)
    decode.flash_decode_triton(q, k, v, cache_seqlens=lens)
    got = decode.flash_decode_triton(q, k, v, cache_seqlens=lens, **kw)
    assert _counts() == {"hits": 0, "plans": 2, "resized": 0, "restreamed": 0, "cached": 2}
    _same(got, want)


def test_layout_dtype_and_alignment_are_part_of_the_signature():
    q, k, v = _cache(Nq=2)
    lens = torch.tensor([L, 50], dtype=torch.int32, device=DEV)
    half = [x.to(torch.float16) for x in (q, k, v)]
    want_half = _fresh(*half, cache_seqlens=lens)
    base = decode.flash_decode_triton(q, k, v, cache_seqlens=lens)
    # q as a strided view (B, Nq, H, D) transposed: other strides, same values
    qt = q.transpose(1, 2).contiguous().transpose(1, 2)
    assert qt.stride() != q.stride()
    _same(decode.flash_decode_triton(qt, k, v, cache_seqlens=lens), base)
    # q at an address that is not a multiple of 16 bytes
    flat = torch.empty(q.numel() + 1, dtype=q.dtype, device=DEV)
    qm = flat[1:].view(q.shape)
    qm.copy_(q)
    assert qm.data_ptr() % 16
    _same(decode.flash_decode_triton(qm, k, v, cache_seqlens=lens), base)
    _same(decode.flash_decode_triton(*half, cache_seqlens=lens), want_half)  # float16: another dtype
    assert _counts() == {"hits": 0, "plans": 4, "resized": 0, "restreamed": 0, "cached": 4}


def test_bad_input_is_refused_after_a_plan_exists():
    q, k, v = _cache()
    lens = torch.tensor([L, 50], dtype=torch.int32, device=DEV)
    decode.clear_plans()
    decode.flash_decode_triton(q, k, v, cache_seqlens=lens, num_splits=1, softcap=1.0)
    with pytest.raises(ValueError, match="num_splits"):
        decode.flash_decode_triton(q, k, v, cache_seqlens=lens, num_splits=True, softcap=1.0)
    with pytest.raises(ValueError, match="softcap"):
        decode.flash_decode_triton(q, k, v, cache_seqlens=lens, num_splits=1, softcap=True)
    with pytest.raises(TypeError, match="dtype"):
        decode.flash_decode_triton(q, k.half(), v, cache_seqlens=lens, num_splits=1, softcap=1.0)
    assert decode.plan_stats()["hits"] == 0


def test_what_has_no_key_takes_the_checked_path():
    q, k, v = _cache()
    assert decode.plan_key(q, k, v, [L, 50], None, None, True, None, None, None, None) is None  # a list of lengths
    assert decode.plan_key(q, k, v, None, None, None, True, [4, 0], None, None, None) is None  # a list window
    assert decode.plan_key(q, k, v, None, None, True, True, None, None, None, None) is None  # a bool split count
    decode.clear_plans()
    got = decode.flash_decode_triton(q, k, v, cache_seqlens=[L, 50], window=[4, 0])
    assert _counts() == {"hits": 0, "plans": 0, "resized": 0, "restreamed": 0, "cached": 0}
    lens = torch.tensor([L, 50], device=DEV)
    _same(got, _fresh(q, k, v, cache_seqlens=lens, window=(4, 0)))


@pytest.mark.gpu
def test_flash_decode_reuses_plans_on_the_gpu():
    """attnlab.flash_decode (the dispatch) keeps and reuses plans on CUDA, bit for bit."""
    q, k, v = _cache(L=4096, D=128)
    lens = torch.tensor([4096, 3000], dtype=torch.int32, device=DEV)
    decode.clear_plans()
    first = attnlab.flash_decode(q, k, v, cache_seqlens=lens, window=(1024, 0))
    for _ in range(3):
        _same(attnlab.flash_decode(q, k, v, cache_seqlens=lens, window=(1024, 0)), first)
    assert decode.plan_stats()["hits"] == 3
    graph_safe = attnlab.flash_decode(q, k, v, cache_seqlens=lens)  # another plan
    _same(graph_safe, _fresh(q, k, v, cache_seqlens=lens))


@pytest.mark.gpu
def test_plans_under_cuda_graph_capture():
    """A plan made eagerly and one made during capture: the graph's replay follows new inputs and
    equals eager calls (the captured call has its own split buffers)."""
    q, k, v = _cache(L=4096, D=128)
    lens = torch.tensor([4096, 1234], dtype=torch.int32, device=DEV)
    decode.clear_plans()
    attnlab.flash_decode(q, k, v, cache_seqlens=lens)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        attnlab.flash_decode(q, k, v, cache_seqlens=lens)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out, lse = attnlab.flash_decode(q, k, v, cache_seqlens=lens)
    q.copy_(torch.randn_like(q))
    lens.copy_(torch.tensor([777, 4000], dtype=torch.int32, device=DEV))
    g.replay()
    want = attnlab.flash_decode(q, k, v, cache_seqlens=lens)
    _same((out, lse), want)
    _same(want, _fresh(q, k, v, cache_seqlens=lens))


def test_a_growing_cache_resizes_its_plan():
    """transformers' DynamicCache hands a new, one-key-longer cache every step: each step's plan is
    the last one resized, and equals a fully checked call."""
    q, k, v = _cache(L=70)
    decode.clear_plans()
    decode.flash_decode_triton(q, k, v, window=(40, 0))
    wants = []
    for step in range(1, 6):
        k = torch.cat([k, torch.randn(B, HKV, 1, D, dtype=k.dtype, device=DEV)], dim=2)  # (B, Hkv, L + 1, D)
        v = torch.cat([v, torch.randn(B, HKV, 1, D, dtype=v.dtype, device=DEV)], dim=2)
        got = decode.flash_decode_triton(q, k, v, window=(40, 0))
        assert _counts() == {"hits": 0, "plans": 1, "resized": step, "restreamed": 0, "cached": 1 + step}
        wants.append((got, q, k, v))
    for got, q, k, v in wants:
        _same(got, _fresh(q, k, v, window=(40, 0)))


def test_a_growing_cache_shares_its_launchers_and_buffers_while_the_split_count_stays():
    """With the split count fixed, each step's plan is a copy with the new strides and capacity: one split
    buffer for them all, and one launcher per specialisation of the changed integers (the capacity 304
    divides by 16, its neighbours do not: two launchers over 296..315 keys), each step's answer the checked
    call's (the GPU's 128-key tiles still give 2 splits: 3 tiles)."""
    from attnlab.gpu import decode_plan

    q, k, v = _cache(L=296)
    decode.clear_plans()
    decode.flash_decode_triton(q, k, v, num_splits=2)
    wants = []
    for _ in range(19):
        k = torch.cat([k, torch.randn(B, HKV, 1, D, dtype=k.dtype, device=DEV)], dim=2)
        v = torch.cat([v, torch.randn(B, HKV, 1, D, dtype=v.dtype, device=DEV)], dim=2)
        wants.append((decode.flash_decode_triton(q, k, v, num_splits=2), q, k, v))
    plans = list(decode_plan._PLANS.values())
    assert [p.capacity for p in plans] == list(range(296, 316)) and {p.num_splits for p in plans} == {2}
    assert len({id(p.scratch) for p in plans}) == 1 and plans[0].scratch is not None
    assert len({id(p.split) for p in plans}) == 2
    assert {p.capacity % 16 == 0 for p in plans if p.split is plans[8].split} == {True}  # 304's launcher
    for got, q, k, v in wants:
        _same(got, _fresh(q, k, v, num_splits=2))


def test_a_resized_plan_still_refuses_what_the_checks_refuse():
    q, k, v = _cache()
    decode.clear_plans()
    decode.flash_decode_triton(q, k, v)
    k2 = torch.randn(B, HKV, L + 3, D, dtype=k.dtype, device=DEV)
    v2 = torch.randn(B, HKV, L + 4, D, dtype=v.dtype, device=DEV)
    with pytest.raises(ValueError, match="v_cache must have shape"):
        decode.flash_decode_triton(q, k2, v2)
    # a strided view of a bigger cache is no family member: the checked path, the right answer
    big = torch.randn(B, HKV, L + 16, D, dtype=k.dtype, device=DEV)
    ks, vs = big[:, :, :L], big[:, :, 8:L + 8]
    _same(decode.flash_decode_triton(q, ks, vs), _fresh(q, ks.contiguous(), vs.contiguous()))


def test_kept_plans_hand_out_outputs_no_later_call_overwrites(monkeypatch):
    """A kept plan's outputs come from slabs (one allocation for the next calls' pairs): every call's
    (out, lse) is a tensor of its own, still its own call's answer after many more calls, slabs grow from
    4 pairs, and each is released to the allocator only with the last of its outputs. (The Python path's: the
    native call, which would make the steady calls, off.)"""
    from attnlab.gpu import decode_plan, native

    monkeypatch.setattr(native, "ENABLED", False)
    q, k, v = _cache()
    decode.clear_plans()
    qs = [torch.randn_like(q) for _ in range(14)]
    got = [decode.flash_decode_triton(x, k, v) for x in qs]
    (plan,) = decode_plan._PLANS.values()
    assert plan.outputs.size == min(32, plan.outputs.limit)  # slabs of 4, 8 and 16 opened, 32 next
    pointers = {t.data_ptr() for pair in got for t in pair}
    assert len(pointers) == 2 * len(got)
    assert got[1][0]._base is got[2][0]._base and got[1][0]._base.shape[0] == 4
    for x, pair in zip(qs, got):
        _same(pair, _fresh(x, k, v))


def test_slab_outputs_are_the_kind_of_tensor_the_call_would_make():
    """A slab made under inference mode holds inference tensors: a call outside it gets a tensor it may update
    in place, as torch.empty would have given it (and the other way round)."""
    q, k, v = _cache()
    decode.clear_plans()
    with torch.inference_mode():
        inside = decode.flash_decode_triton(q, k, v)
    assert inside[0].is_inference()
    outside = decode.flash_decode_triton(q, k, v)  # the same plan, another mode: a new slab
    assert not outside[0].is_inference() and not outside[1].is_inference()
    outside[0].add_(1)  # an inference tensor would refuse this here
    with torch.inference_mode():
        again = decode.flash_decode_triton(q, k, v)
    assert again[0].is_inference()
    _same(again, _fresh(q, k, v))


def test_outputs_too_large_for_a_slab_are_allocated_per_call(monkeypatch):
    from attnlab.gpu import decode_plan

    monkeypatch.setattr(decode_plan, "SLAB_BYTES", 3 * 2 * H * (D * 2 + 4))  # under 4 pairs of B = 2
    q, k, v = _cache()
    decode.clear_plans()
    got = [decode.flash_decode_triton(q, k, v) for _ in range(3)]
    assert all(t._base is None for pair in got for t in pair)
    for pair in got:
        _same(pair, got[0])


def test_model_seq_rounds_up_by_at_most_a_32nd():
    from attnlab.gpu.decode_config import model_seq

    last = 0
    for n in range(1, 20000, 7):
        m = model_seq(n)
        assert n <= m <= n + n // 32 and m >= last
        last = m
    assert model_seq(32769) == 33792


def test_kept_split_buffers_stay_within_the_budget(monkeypatch):
    """Plans keep their split buffers only while all of them fit ``SCRATCH_BUDGET``; beyond it a call
    allocates its own, with the same answer."""
    from attnlab.gpu import decode_plan

    q, k, v = _cache()
    lens = torch.tensor([L, 50], dtype=torch.int32, device=DEV)
    decode.clear_plans()
    small = decode.kernel_config(D, batch_heads=1, page_size=16)  # tiles small enough for 3 splits of L keys
    kept = decode.flash_decode_triton(q, k, v, cache_seqlens=lens, num_splits=3, config=small)
    assert 0 < decode.plan_stats()["scratch_bytes"] <= decode_plan.SCRATCH_BUDGET
    monkeypatch.setattr(decode_plan, "SCRATCH_BUDGET", 0)
    decode.clear_plans()
    for _ in range(2):
        _same(decode.flash_decode_triton(q, k, v, cache_seqlens=lens, num_splits=3, config=small), kept)
    assert decode.plan_stats()["scratch_bytes"] == 0 and decode.plan_stats()["hits"] == 1


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU the benchmark would run")
def test_the_host_time_benchmark_refuses_what_it_cannot_do(tmp_path):
    """benchmarks/decode_host.py: bad options and an existing output file stop it before any work;
    without a GPU it says so (host time in the interpreter would mean nothing)."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "decode_host.py"

    def run(*args):
        return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True, timeout=120)

    r = run("--calls", "5")
    assert r.returncode == 2 and "--calls must be at least 10" in r.stderr
    kept = tmp_path / "host.json"
    kept.write_text("mine")
    r = run("--json", str(kept))
    assert r.returncode == 2 and "exists" in r.stderr and kept.read_text() == "mine"
    r = run()
    assert r.returncode == 2 and "needs a CUDA GPU" in r.stderr


def test_merge_pdl_is_eager_by_default_and_never_off_cuda(monkeypatch):
    """The merge kernel's programmatic dependent launch: for eager calls only by default (under graphs it was
    slower on an H200, decode-host runs 8 and 22), never without CUDA; a Launcher asked for it carries
    Triton's ``launch_pdl`` compile option."""
    from attnlab.gpu import decode_plan
    from attnlab.gpu.decode_kernels import _decode_merge_kernel
    from attnlab.gpu.launch import Launcher

    assert decode_plan.MERGE_PDL == "eager"
    for mode in ("eager", True, False):
        monkeypatch.setattr(decode_plan, "MERGE_PDL", mode)
        assert not decode_plan.merge_pdl(torch.device("cpu")) and not decode_plan.merge_pdl(torch.device("cpu"), True)
    if torch.cuda.is_available() and not decode_plan.interpret_mode():
        dev = torch.device("cuda", torch.cuda.current_device())
        hopper = torch.cuda.get_device_capability(dev)[0] >= 9
        for mode, graph, eager in (("eager", False, hopper), (True, hopper, hopper), (False, False, False)):
            monkeypatch.setattr(decode_plan, "MERGE_PDL", mode)
            assert (decode_plan.merge_pdl(dev), decode_plan.merge_pdl(dev, eager=True)) == (graph, eager)
    assert Launcher(_decode_merge_kernel, (1, 1, 1), num_warps=4, num_stages=3, launch_pdl=True).options == \
        {"num_warps": 4, "num_stages": 3, "launch_pdl": True}
    assert "launch_pdl" not in Launcher(_decode_merge_kernel, (1, 1, 1), num_warps=4, num_stages=3).options


class _Counted:
    """A Launcher that counts its launches (through JIT or directly) and is otherwise the Launcher."""

    def __init__(self, inner):
        self.inner, self.calls = inner, 0

    def __call__(self, *a, **kw):
        self.calls += 1
        return self.inner(*a, **kw)

    def launch(self, *a, **kw):
        self.calls += 1
        return self.inner.launch(*a, **kw)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_eager_calls_of_a_small_plan_merge_in_the_split_kernel_and_give_the_same_bits(monkeypatch):
    """A plan marked ``fused`` (K/V read below ``EAGER_FUSED_BELOW_US``; forced here, as no interpreter run
    is ever marked) runs the split and merge kernels on its first call, then one launch per call whose
    in-kernel merge is the merge kernel's arithmetic: every call's output and lse equal, to the bit, those
    of a plan that always launches the merge kernel — splits empty for the short sequence included."""
    from attnlab.gpu import decode_plan

    q, k, v = _cache(L=600)  # 4 splits of whole tiles (16 keys in the interpreter, 128 on a GPU)
    lens = torch.tensor([600, 9], dtype=torch.int32, device=DEV)
    monkeypatch.setattr(decode_plan, "EAGER_FUSED_BELOW_US", 0.0)
    want = _fresh(q, k, v, cache_seqlens=lens, num_splits=4)
    assert not any(p.fused for p in decode_plan._PLANS.values())
    decode.clear_plans()
    monkeypatch.setattr(decode_plan, "eager_fused", lambda nbytes, device: True)
    monkeypatch.setattr(decode_plan, "split_pdl", lambda device, plan_bytes=None: False)  # (the fused build itself)
    first = decode.flash_decode_triton(q, k, v, cache_seqlens=lens, num_splits=4)
    (plan,) = decode_plan._PLANS.values()
    assert plan.fused and plan.merge == 1 and plan.pair_ran
    plan.split, plan.fused_split, plan.merge_launch = (_Counted(plan.split), _Counted(plan.fused_split),
                                                       _Counted(plan.merge_launch))
    outs = [decode.flash_decode_triton(q, k, v, cache_seqlens=lens, num_splits=4) for _ in range(3)]
    assert (plan.split.calls, plan.fused_split.calls, plan.merge_launch.calls) == (0, 3, 0)
    for got in (first, *outs):
        _same(got, want)
    decode.clear_plans()


@pytest.mark.parametrize("rows,H_,Nq", [(1, 4, 2), (2, 6, 1), (2, 4, 2), (4, 8, 1), (1, 16, 1), (None, 12, 1)])
def test_the_merge_takes_rows_in_any_chunks_with_the_same_bits(monkeypatch, rows, H_, Nq):
    """``MERGE_ROWS`` query rows per round trip, in the merge kernel's programs and in the in-kernel merge alike:
    chunks that split a K/V head's G·Nq rows unevenly (3 rows by 2), the unrolled loop and the one that is not
    (16 rows one at a time), and a last merge-kernel program with fewer rows than the others. The two merges
    give the same bits, and match the reference, with a sequence so short that most splits are empty."""
    from attnlab.gpu import decode_plan

    monkeypatch.setattr(decode_plan, "MERGE_ROWS", rows)
    q = torch.randn(B, H_, Nq, D, dtype=torch.bfloat16, device=DEV)
    k, v = (torch.randn(B, HKV, 600, D, dtype=torch.bfloat16, device=DEV) for _ in range(2))
    lens = torch.tensor([600, 9], dtype=torch.int32, device=DEV)
    monkeypatch.setattr(decode_plan, "eager_fused", lambda nbytes, device: False)
    want = _fresh(q, k, v, cache_seqlens=lens, num_splits=5)
    decode.clear_plans()
    monkeypatch.setattr(decode_plan, "eager_fused", lambda nbytes, device: True)
    decode.flash_decode_triton(q, k, v, cache_seqlens=lens, num_splits=5)  # the pair, then the in-kernel merge
    (plan,) = decode_plan._PLANS.values()
    G = H_ // HKV
    assert plan.fused and plan.rows == (rows or decode_plan.merge_rows(G * Nq, 8, plan.cfg.block_d,
                                                                      plan.cfg.num_warps))
    assert plan.merge_launch.grid[0] == -(-B * H_ * Nq // plan.rows)
    got = decode.flash_decode_triton(q, k, v, cache_seqlens=lens, num_splits=5)
    _same(got, want)
    for b, n in enumerate(lens.tolist()):  # the float64 oracle on each sequence's own keys
        o64, l64 = attention_ref(q[b:b + 1].double(), k[b:b + 1, :, :n].double(), v[b:b + 1, :, :n].double(),
                                 causal=True)
        assert (got[0][b:b + 1].double() - o64).abs().max() < 2e-2
        assert (got[1][b:b + 1].double() - l64).abs().max() < 1e-3
    decode.clear_plans()


def test_merge_rows_fill_the_registers_given_and_refuse_what_is_not_a_power_of_two(monkeypatch):
    """``merge_rows``: the group's rows rounded up to a power of two, no more than fit
    ``MERGE_FLOATS_PER_THREAD`` floats of partials per thread, at least one; a forced ``MERGE_ROWS`` is taken
    as it is, and one that is not a power of two is refused."""
    from attnlab.gpu import decode_plan

    per = decode_plan.MERGE_FLOATS_PER_THREAD
    assert decode_plan.merge_rows(4, 16, 64, 4) == 4  # 4·16·64 floats over 128 threads: 32 each
    assert decode_plan.merge_rows(3, 16, 64, 4) == 4
    assert decode_plan.merge_rows(7, 32, 128, 4) == per * 128 // (32 * 128) == 4
    assert decode_plan.merge_rows(64, 16, 64, 4) == per * 128 // (16 * 64) == 16
    assert decode_plan.merge_rows(64, 16, 64, 8) == 32  # twice the threads, twice the rows
    assert decode_plan.merge_rows(8, 256, 256, 4) == 1  # one row's partials alone overflow: one row
    assert decode_plan.merge_rows(5, 8, 64, 4) == 8
    monkeypatch.setattr(decode_plan, "MERGE_FLOATS_PER_THREAD", 48)  # 48·128 // (16·64) = 6: the power of two below
    assert decode_plan.merge_rows(16, 16, 64, 4) == 4
    monkeypatch.setattr(decode_plan, "MERGE_ROWS", 2)
    assert decode_plan.merge_rows(16, 16, 64, 4) == 2
    monkeypatch.setattr(decode_plan, "MERGE_ROWS", 3)
    with pytest.raises(ValueError, match="power of two"):
        decode_plan.merge_rows(16, 16, 64, 4)


def test_eager_calls_take_the_dependent_merge_launch_after_the_first_call(monkeypatch):
    """With the merge kernel's eager launch a programmatic dependent one (``merge_pdl(..., eager=True)``,
    pretended here; the interpreter runs no such launch, so the eager Launcher is the plain kernel, counted):
    a plan's first call launches the plain merge (what a graph captured later takes, compiled), every later
    eager call the eager Launcher, with the same bits; with both plain they are one Launcher."""
    from attnlab.gpu import decode_plan

    q, k, v = _cache(L=600)
    lens = torch.tensor([600, 9], dtype=torch.int32, device=DEV)
    monkeypatch.setattr(decode_plan, "eager_fused", lambda nbytes, device: False)  # (a GPU would merge in-kernel)
    want = _fresh(q, k, v, cache_seqlens=lens, num_splits=4)
    monkeypatch.setattr(decode_plan, "merge_pdl", lambda device, eager=False: eager)
    counted = {}

    class Plan(decode_plan.DecodePlan):
        def _merge_launcher(self, pdl):
            tail, launcher = super()._merge_launcher(False)  # the plain kernel in the eager one's place
            counted[pdl] = _Counted(launcher)
            return tail, counted[pdl]

    monkeypatch.setattr(decode_plan, "DecodePlan", Plan)
    first = decode.flash_decode_triton(q, k, v, cache_seqlens=lens, num_splits=4)
    (plan,) = decode_plan._PLANS.values()
    assert plan.merge == 1 and not plan.fused and plan.pdl_launch is counted[True] is not plan.merge_launch
    assert (counted[False].calls, counted[True].calls) == (1, 0)
    outs = [decode.flash_decode_triton(q, k, v, cache_seqlens=lens, num_splits=4) for _ in range(3)]
    assert (counted[False].calls, counted[True].calls) == (1, 3)
    for got in (first, *outs):
        _same(got, want)
    decode.clear_plans()
    monkeypatch.setattr(decode_plan, "merge_pdl", lambda device, eager=False: False)
    decode.flash_decode_triton(q, k, v, cache_seqlens=lens, num_splits=4)
    (plan,) = decode_plan._PLANS.values()
    assert plan.pdl_launch is plan.merge_launch and plan.pdl_tail is plan.merge_tail
    decode.clear_plans()


def test_split_pdl_needs_a_hopper_gpu_a_long_read_and_a_known_mode(monkeypatch):
    """``split_pdl``: ``SPLIT_PDL`` (on by default) on a CUDA GPU of compute capability 9.0 or newer outside the
    interpreter, for a plan whose K/V read takes at least ``SPLIT_PDL_FROM_US`` at the preset's bandwidth (any read
    with the threshold at 0, or with the native call on), else False; a mode it does not know is refused."""
    from attnlab.gpu import config, decode_plan, native

    assert decode_plan.SPLIT_PDL is True and decode_plan.SPLIT_PDL_FROM_US == 13.0
    for mode in (True, "trigger"):
        monkeypatch.setattr(decode_plan, "SPLIT_PDL", mode)
        assert decode_plan.split_pdl(torch.device("cpu")) is False
        assert decode_plan.split_pdl(torch.device("cpu"), 1e9) is False
    monkeypatch.setattr(decode_plan, "interpret_mode", lambda: False)
    for capability, want in (((9, 0), "trigger"), ((10, 0), "trigger"), ((8, 0), False)):
        monkeypatch.setattr(config, "device_capability", lambda device, c=capability: c)
        assert decode_plan.split_pdl(torch.device("cuda", 0)) == want
    # the read's µs: bytes over 1 MB/µs here (a preset of 1 TB/s)
    monkeypatch.setattr(decode_plan, "read_us", lambda nbytes, device: nbytes / 1e6)
    monkeypatch.setattr(config, "device_capability", lambda device: (9, 0))
    monkeypatch.setattr(native, "ENABLED", False)  # the Python path makes the eager calls: the threshold holds
    assert decode_plan.split_pdl(torch.device("cuda", 0), 12.9e6) is False
    assert decode_plan.split_pdl(torch.device("cuda", 0), 13.0e6) == "trigger"
    monkeypatch.setattr(native, "ENABLED", True)  # the native call's launch: every read
    assert decode_plan.split_pdl(torch.device("cuda", 0), 1.0) == "trigger"
    monkeypatch.setattr(native, "ENABLED", False)
    assert decode_plan.split_pdl(torch.device("cuda", 0), 1.0) is False
    monkeypatch.setattr(decode_plan, "SPLIT_PDL_FROM_US", 0)
    assert decode_plan.split_pdl(torch.device("cuda", 0), 1.0) == "trigger"
    monkeypatch.setattr(decode_plan, "SPLIT_PDL", False)
    assert decode_plan.split_pdl(torch.device("cuda", 0), 1e9) is False
    monkeypatch.setattr(decode_plan, "SPLIT_PDL", "yes")
    with pytest.raises(ValueError, match="SPLIT_PDL must be False, True or 'trigger'"):
        decode_plan.split_pdl(torch.device("cuda", 0))


def test_eager_fused_calls_take_the_dependent_split_launch_that_waits_first(monkeypatch):
    """With ``split_pdl`` on (pretended here), a fused plan's eager calls take a build of their own: the split kernel
    with WAIT (and with "trigger" TRIGGER) set and Triton's ``launch_pdl`` option, its other arguments the fused
    build's; graphs keep the fused build. The interpreter runs no ``griddepcontrol``, so the plain fused build stands in
    for it, counted: the first fused eager call takes the plain build (which a graph captured later needs compiled),
    every later one the dependent launch's, with the bits of a plan without it. Off, a plan has no such build."""
    from attnlab.gpu import decode_plan

    q, k, v = _cache(L=600)
    lens = torch.tensor([600, 9], dtype=torch.int32, device=DEV)
    monkeypatch.setattr(decode_plan, "eager_fused", lambda nbytes, device: True)
    monkeypatch.setattr(decode_plan, "split_pdl", lambda device, plan_bytes=None: False)  # (a GPU's own answer: any)
    decode.clear_plans()
    decode.flash_decode_triton(q, k, v, cache_seqlens=lens, num_splits=4)  # the pair
    want = decode.flash_decode_triton(q, k, v, cache_seqlens=lens, num_splits=4)  # the fused build, eager
    (plan,) = decode_plan._PLANS.values()
    assert plan.fused and plan.eager_split is None
    monkeypatch.setattr(decode_plan, "split_pdl", lambda device, plan_bytes=None: "trigger")
    decode.clear_plans()
    decode.flash_decode_triton(q, k, v, cache_seqlens=lens, num_splits=4)
    (plan,) = decode_plan._PLANS.values()
    wait, trigger = decode_plan.tail_index("WAIT"), decode_plan.tail_index("TRIGGER")
    assert plan.eager_split is not plan.fused_split and plan.eager_split.options.get("launch_pdl") is True
    assert plan.eager_tail[wait] is True and plan.eager_tail[trigger] is True
    assert plan.fused_tail[wait] is False and plan.tail[wait] is False and plan.fused_tail[trigger] is False
    rest = [i for i in range(len(plan.fused_tail)) if i not in (wait, trigger)]
    assert [plan.eager_tail[i] for i in rest] == [plan.fused_tail[i] for i in rest]
    plan.fused_split = _Counted(plan.fused_split)
    plan.eager_split, plan.eager_tail = _Counted(plan.fused_split.inner), plan.fused_tail
    outs = [decode.flash_decode_triton(q, k, v, cache_seqlens=lens, num_splits=4) for _ in range(4)]
    # the first fused eager call takes the plain build (compiling what a graph captured later takes), the rest the
    # dependent launch's
    assert (plan.fused_split.calls, plan.eager_split.calls) == (1, 3)
    for got in outs:
        _same(got, want)
    decode.clear_plans()


@pytest.mark.gpu
@pytest.mark.parametrize("mode", [True, "trigger"])
def test_gpu_dependent_split_launches_wait_for_the_query_written_before_them(monkeypatch, mode):
    """On a Hopper GPU, eager calls launched as programmatic dependent launches, each on a query that a torch kernel
    queued just before it writes: every call gives what a plain launch gives on that query, to the bit, the shape
    reading its cache for 20 µs and more (32/8 heads over 32K keys, D = 64) and a small one."""
    from attnlab.gpu import decode_plan

    if torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("programmatic dependent launches need compute capability 9.0")
    for B_, H_, Hkv_, L_, D_ in ((1, 32, 8, 32768, 64), (2, 8, 2, 600, 128)):
        base = torch.randn(B_, H_, 1, D_, dtype=torch.bfloat16, device=DEV)
        k, v = (torch.randn(B_, Hkv_, L_, D_, dtype=torch.bfloat16, device=DEV) for _ in range(2))
        lens = torch.full((B_,), L_ - 3, dtype=torch.int32, device=DEV)
        scales = [0.5 + 0.1 * i for i in range(8)]
        monkeypatch.setattr(decode_plan, "SPLIT_PDL", False)
        monkeypatch.setattr(decode_plan, "SPLIT_PDL_FROM_US", 0)  # the small shape's plan takes it too
        decode.clear_plans()
        want = []
        for s_ in scales:
            want.append(decode.flash_decode_triton(base * s_, k, v, cache_seqlens=lens))
        monkeypatch.setattr(decode_plan, "SPLIT_PDL", mode)
        decode.clear_plans()
        q = torch.empty_like(base)
        got = []
        for s_ in scales:
            torch.mul(base, s_, out=q)  # the kernel before the call writes its query
            out, lse = decode.flash_decode_triton(q, k, v, cache_seqlens=lens)
            got.append((out.clone(), lse.clone()))
        (plan,) = decode_plan._PLANS.values()
        assert plan.fused and plan.eager_split is not None
        for g, w in zip(got, want):
            _same(g, w)
        monkeypatch.setattr(decode_plan, "SPLIT_PDL", False)
    decode.clear_plans()


def test_eager_fused_takes_small_reads_on_cuda_only(monkeypatch):
    """``eager_fused``: the K/V bytes at the preset's bandwidth against ``EAGER_FUSED_BELOW_US`` (every read by
    default); never off CUDA or in the interpreter, and never with the threshold at 0."""
    import math

    from attnlab.gpu import decode_plan

    assert decode_plan.EAGER_FUSED_BELOW_US == math.inf
    assert not decode_plan.eager_fused(1.0, torch.device("cpu"))
    assert decode_plan.read_us(1.0, torch.device("cpu")) is None
    if torch.cuda.is_available() and not decode_plan.interpret_mode():
        dev = torch.device("cuda", torch.cuda.current_device())
        bw = decode_plan.gpu_for_device(dev.index).hbm_bw
        assert decode_plan.read_us(bw * 1e-6, dev) == pytest.approx(1.0)
        assert decode_plan.eager_fused(1e15, dev)  # a petabyte: still one launch
        monkeypatch.setattr(decode_plan, "EAGER_FUSED_BELOW_US", 10.0)
        assert decode_plan.eager_fused(0.9 * 10e-6 * bw, dev)
        assert not decode_plan.eager_fused(1.1 * 10e-6 * bw, dev)
        monkeypatch.setattr(decode_plan, "EAGER_FUSED_BELOW_US", 0.0)
        assert not decode_plan.eager_fused(1.0, dev)


@pytest.mark.gpu
@pytest.mark.parametrize("L", [512, 32768])
def test_a_fused_plan_is_captured_with_the_merge_kernel_and_gives_eager_bits(L):
    """On the GPU a decode call of any size is ``fused``: eager calls launch once, a CUDA graph captured after
    them holds the split and merge kernels (a small read) or the split kernel alone (a large one, its counters its
    own), and the replay equals the eager call to the bit."""
    q, k, v = _cache(L=L, D=128)
    lens = torch.tensor([L, L * 3 // 5], dtype=torch.int32, device=DEV)
    decode.clear_plans()

    def fused_pair_ran(plan):
        assert plan.fused and plan.pair_ran

    got, want = graph_after_eager(lambda: attnlab.flash_decode(q, k, v, cache_seqlens=lens, num_splits=4), q,
                                  fused_pair_ran)
    _same(got, want)
    decode.clear_plans()


def _graph_of(fn, stream):
    """A CUDA graph of ``fn`` captured on ``stream`` (None: torch's own capture stream), and its output."""
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=stream):
        out = fn()
    return g, out


@pytest.mark.gpu
def test_graphs_of_a_large_call_merge_in_the_split_kernel_each_with_counters_of_its_own(monkeypatch):
    """A call reading at least ``GRAPH_FUSED_FROM_US`` of K/V is captured with the in-kernel merge (one kernel, no
    merge kernel), each captured call taking a set of zeroed counters of its own (``CounterSlots``); once the plan's
    sets are gone a capture takes the merge kernel. Eager calls warm up on a side stream and the first two graphs are
    captured on torch's own capture stream, as torch's docs do it (the plan is ``restreamed``: compiled, its sets
    shared); the third on the side stream. Three graphs replayed at the same time on three streams, twenty times over,
    give what eager calls give on their inputs, to the bit."""
    from attnlab.gpu import decode_plan

    monkeypatch.setattr(decode_plan, "GRAPH_COUNTER_SLOTS", 2)
    q = torch.randn(1, 32, 1, 128, dtype=torch.bfloat16, device=DEV)
    k, v = (torch.randn(1, 8, 32768, 128, dtype=torch.bfloat16, device=DEV) for _ in range(2))
    lens = torch.tensor([30001], dtype=torch.int32, device=DEV)
    decode.clear_plans()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    qs = [torch.randn_like(q) for _ in range(3)]
    fn = [lambda x=x: attnlab.flash_decode(x, k, v, cache_seqlens=lens) for x in qs]
    with torch.cuda.stream(side):
        for _ in range(3):
            fn[0]()
    torch.cuda.current_stream().wait_stream(side)
    (plan,) = decode_plan._PLANS.values()
    assert plan.fused and plan.merge == 1 and plan.graph_slots is not None and plan.graph_slots.next == 0
    plan.fused_split, plan.merge_launch = _Counted(plan.fused_split), _Counted(plan.merge_launch)
    graphs = []
    for i in range(3):
        before = (plan.fused_split.calls, plan.merge_launch.calls)
        graphs.append(_graph_of(fn[i], None if i < 2 else side))
        took = (plan.fused_split.calls - before[0], plan.merge_launch.calls - before[1])
        # the first two captures take a set of counters each and launch the split kernel alone; the third, none left
        assert took == ((1, 0) if i < 2 else (0, 1)) and plan.graph_slots.next == min(i + 1, 2), (i, took)
    assert decode.plan_stats()["restreamed"] == 1 and len(decode_plan._PLANS) == 2
    torch.cuda.synchronize()
    streams = [torch.cuda.Stream() for _ in graphs]
    for _ in range(20):  # replays of the graphs at the same time, on streams of their own
        for (g, _), st in zip(graphs, streams):
            with torch.cuda.stream(st):
                g.replay()
    torch.cuda.synchronize()
    for i, (_, got) in enumerate(graphs):
        with torch.cuda.stream(side):
            want = fn[i]()
        torch.cuda.synchronize()
        _same(got, want)
    decode.clear_plans()


@pytest.mark.gpu
@pytest.mark.parametrize("variant", ["paged", "window-alibi", "batch-3-ragged"])
def test_graphs_of_large_variant_calls_merge_in_the_split_kernel_with_eager_bits(variant):
    """Large calls of the other kinds — a paged cache, a window with ALiBi, ragged lengths over three sequences — are
    captured (on torch's own capture stream, after warm-up on a side stream) with the in-kernel merge, and the replay
    equals the eager call to the bit."""
    from attnlab.gpu import decode_plan
    from attnlab.kvcache import PagedKVCache

    B = 3 if variant == "batch-3-ragged" else 1
    q = torch.randn(B, 32, 1, 128, dtype=torch.bfloat16, device=DEV)
    k, v = (torch.randn(B, 8, 32768, 128, dtype=torch.bfloat16, device=DEV) for _ in range(2))
    lens = torch.tensor([32768, 20001, 7][:B], dtype=torch.int32, device=DEV)
    kw: dict = {"cache_seqlens": lens}
    args = (q, k, v)
    if variant == "paged":
        cache = PagedKVCache.from_dense(k, v, lens, page_size=256, shuffle=True)
        args, kw["block_table"] = (q, cache.k_pages[0], cache.v_pages[0]), cache.block_table
    elif variant == "window-alibi":
        kw.update(window=(20000, 0), alibi_slopes=torch.rand(32, device=DEV) * 0.1)  # ~20K keys read: >= 10 µs
    decode.clear_plans()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            attnlab.flash_decode(*args, **kw)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    (plan,) = decode_plan._PLANS.values()
    assert plan.fused and plan.graph_slots is not None
    g, got = _graph_of(lambda: attnlab.flash_decode(*args, **kw), None)
    assert plan.graph_slots.next == 1  # the capture merged in the split kernel
    q_before = q.clone()
    q.copy_(torch.randn_like(q))
    g.replay()
    side.wait_stream(torch.cuda.current_stream())  # (the eager call reads the new q)
    with torch.cuda.stream(side):
        want = attnlab.flash_decode(*args, **kw)
    torch.cuda.synchronize()
    if variant != "window-alibi" and not (torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])):
        # which query each answer is the attention of: the test's failure says which side went wrong
        def err(out, qq):
            ref = torch.cat([attention_ref(qq[b:b + 1].double(), k[b:b + 1, :, :n].double(),
                                           v[b:b + 1, :, :n].double(), causal=True)[0]
                             for b, n in enumerate(lens.tolist())])
            return (out.double() - ref).abs().max().item()

        pytest.fail(f"graph replay: error {err(got[0], q):.3g} against the new query, {err(got[0], q_before):.3g} "
                    f"against the one before; eager: {err(want[0], q):.3g} and {err(want[0], q_before):.3g}")
    _same(got, want)
    decode.clear_plans()


@pytest.mark.gpu
def test_a_plan_made_during_a_capture_keeps_none_of_the_graphs_memory():
    """A plan whose first call is inside a CUDA graph's capture (its kernel compiled by an earlier call, its plan
    forgotten), with the configuration that merges in the split kernel on every call (MERGE = 2): the graph gets
    zeroed counters of its own, nothing is kept per stream from the capture, and eager calls with that plan after the
    capture find the stream's own counters. The replay and those eager calls equal a fresh call to the bit."""
    from attnlab.gpu import decode_plan

    q = torch.randn(1, 32, 1, 128, dtype=torch.bfloat16, device=DEV)
    k, v = (torch.randn(1, 8, 8192, 128, dtype=torch.bfloat16, device=DEV) for _ in range(2))
    lens = torch.tensor([8000], dtype=torch.int32, device=DEV)
    cfg = replace(decode.decode_config_for(q, k), fused_merge=True)
    want = decode.flash_decode_triton(q, k, v, cache_seqlens=lens, config=cfg, num_splits=8)  # compiles
    decode.clear_plans()
    kept = dict(decode_plan._COUNTERS)
    fresh = torch.cuda.Stream()
    fresh.wait_stream(torch.cuda.current_stream())
    g, got = _graph_of(lambda: decode.flash_decode_triton(q, k, v, cache_seqlens=lens, config=cfg, num_splits=8),
                       fresh)
    assert decode_plan._COUNTERS == kept  # nothing of the graph's memory kept
    (plan,) = decode_plan._PLANS.values()
    assert plan.merge == 2 and plan.counters is None
    for _ in range(3):
        g.replay()
    with torch.cuda.stream(fresh):
        again = [decode.flash_decode_triton(q, k, v, cache_seqlens=lens, config=cfg, num_splits=8) for _ in range(2)]
    torch.cuda.synchronize()
    assert plan.counters is not None and plan.counters.data_ptr() != 0
    for x in (got, *again):
        _same(x, want)
    decode.clear_plans()


@pytest.mark.gpu
def test_graph_counter_sets_stay_within_their_budget(monkeypatch):
    """The kept plans' counter sets for graphs, all together, stay within ``GRAPH_COUNTER_BUDGET``: a plan past it
    keeps none (its graphs take the merge kernel), and ``clear_plans`` gives the budget back."""
    from attnlab.gpu import decode_plan

    decode.clear_plans()
    k, v = (torch.randn(1, 8, 32768, 128, dtype=torch.bfloat16, device=DEV) for _ in range(2))
    one = 4 * 8 * decode_plan.GRAPH_COUNTER_SLOTS  # a B = 1, Hkv = 8 plan's sets
    monkeypatch.setattr(decode_plan, "GRAPH_COUNTER_BUDGET", one)
    plans = []
    for H in (32, 64):  # two plans of one size
        attnlab.flash_decode(torch.randn(1, H, 1, 128, dtype=torch.bfloat16, device=DEV), k, v)
        plans.append(next(p for key, p in decode_plan._PLANS.items() if key[0][0][1] == H))
    assert plans[0].graph_slots is not None and plans[1].graph_slots is None
    assert decode.plan_stats()["graph_counter_bytes"] == one
    decode.clear_plans()
    assert decode.plan_stats()["graph_counter_bytes"] == 0


def test_a_restreamed_plan_shares_kernels_and_keeps_buffers_of_its_own():
    """``DecodePlan.restreamed`` (what a capture on a stream with no plan takes): the same launchers, compiled kernels,
    split count and counter sets; no split buffers and no eager counters of the other stream's (found at its first
    eager call); and the same output to the bit."""
    from attnlab.gpu import decode_plan

    decode.clear_plans()  # (the one plan below is then the only one, whichever tests ran before in this process)
    q, k, v = _cache(L=600)
    lens = torch.tensor([600, 9], dtype=torch.int32, device=DEV)
    want = decode.flash_decode_triton(q, k, v, cache_seqlens=lens, num_splits=4)
    (plan,) = decode_plan._PLANS.values()
    other = plan.restreamed()
    assert other is not plan and other.split is plan.split and other.launcher_memo is plan.launcher_memo
    assert other.graph_slots is plan.graph_slots and other.num_splits == plan.num_splits == 4
    assert plan.scratch is not None and other.scratch is None and other.counters is None
    got = other(q, k, v, lens, None, None)
    assert other.counters is not None and other.scratch is not None and other.scratch is not plan.scratch
    _same(got, want)
    decode.clear_plans()


def test_no_counter_slots_off_cuda_or_below_the_graph_bound(monkeypatch):
    """``CounterSlots`` hands each set out once and says when none is left; plans in the interpreter, and plans whose
    read is under ``GRAPH_FUSED_FROM_US``, keep none (their graphs take the merge kernel)."""
    from attnlab.gpu import decode_plan

    slots = decode_plan.CounterSlots(torch.device("cpu"), 3, 2)
    a, b = slots.take(), slots.take()
    assert slots.take() is None and a[1].numel() == 3 and not a[1].any() and a[0] != b[0]
    assert decode_plan.CounterSlots(torch.device("cpu"), 3, 0).take() is None
    capped = decode_plan.CounterSlots(torch.device("cpu"), 4, 100, max_bytes=40)  # 40 bytes: two sets of 4 counters
    assert capped.take() and capped.take() and capped.take() is None
    q, k, v = _cache(L=600)
    decode.flash_decode_triton(q, k, v, num_splits=4)
    (plan,) = decode_plan._PLANS.values()
    assert plan.graph_slots is None
    decode.clear_plans()


@pytest.mark.gpu
def test_eager_dependent_merge_launches_and_a_graph_give_the_same_bits(monkeypatch):
    """On the GPU a decode call that does not merge in its split kernel (``EAGER_FUSED_BELOW_US`` at 0 here: by
    default every eager call does) launches the merge kernel plainly on its first call and, on Hopper, as a
    programmatic dependent launch on later eager calls (``MERGE_PDL``); a CUDA graph captured after them takes the
    plain launch, and its replay equals the eager call to the bit."""
    from attnlab.gpu import decode_plan

    monkeypatch.setattr(decode_plan, "EAGER_FUSED_BELOW_US", 0.0)

    q = torch.randn(1, 32, 1, 128, dtype=torch.bfloat16, device=DEV)
    k, v = (torch.randn(1, 8, 32768, 128, dtype=torch.bfloat16, device=DEV) for _ in range(2))
    lens = torch.tensor([30001], dtype=torch.int32, device=DEV)
    decode.clear_plans()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            attnlab.flash_decode(q, k, v, cache_seqlens=lens)
    torch.cuda.current_stream().wait_stream(s)
    (plan,) = decode_plan._PLANS.values()
    assert plan.merge == 1 and not plan.fused and plan.pair_ran
    hopper = torch.cuda.get_device_capability()[0] >= 9
    assert plan.pdl_launch.options.get("launch_pdl", False) == hopper
    assert "launch_pdl" not in plan.merge_launch.options
    if hopper:
        assert plan.pdl_launch.compiled is not None and plan.pdl_launch is not plan.merge_launch
    assert plan.tail[decode_plan.tail_index("TRIGGER")] == (hopper and decode_plan.MERGE_TRIGGER)  # the split kernel lets the PDL merge start early
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        out, lse = attnlab.flash_decode(q, k, v, cache_seqlens=lens)
    q.copy_(torch.randn_like(q))
    g.replay()
    torch.cuda.synchronize()
    with torch.cuda.stream(s):
        want = attnlab.flash_decode(q, k, v, cache_seqlens=lens)
    torch.cuda.synchronize()
    _same((out, lse), want)
    decode.clear_plans()


@pytest.mark.gpu
def test_the_merge_trigger_changes_no_bit(monkeypatch):
    """The split kernel's early ``launch_dependents`` (``MERGE_TRIGGER``) only lets the PDL merge kernel start sooner:
    eager calls with it and without it give the same bits, on lengths that cut tiles (with the merge kernel on every
    call: ``EAGER_FUSED_BELOW_US`` at 0)."""
    from attnlab.gpu import decode_plan

    monkeypatch.setattr(decode_plan, "EAGER_FUSED_BELOW_US", 0.0)

    q = torch.randn(4, 32, 1, 64, dtype=torch.bfloat16, device=DEV)
    k, v = (torch.randn(4, 8, 20011, 64, dtype=torch.bfloat16, device=DEV) for _ in range(2))
    lens = torch.tensor([20011, 7777, 1, 12345], dtype=torch.int32, device=DEV)
    got = {}
    for trigger in (True, False):
        monkeypatch.setattr(decode_plan, "MERGE_TRIGGER", trigger)
        decode.clear_plans()
        outs = [attnlab.flash_decode(q, k, v, cache_seqlens=lens) for _ in range(3)]  # the first plain, then PDL
        (plan,) = decode_plan._PLANS.values()
        assert plan.merge == 1 and not plan.fused
        assert plan.tail[decode_plan.tail_index("TRIGGER")] == (trigger and torch.cuda.get_device_capability()[0] >= 9)
        for o in outs[1:]:
            _same(o, outs[0])
        got[trigger] = outs[-1]
    _same(got[True], got[False])
    decode.clear_plans()
