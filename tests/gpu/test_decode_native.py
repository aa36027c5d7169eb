"""The native decode call (attnlab.gpu.native) on a GPU: with it on, a kept plan's steady eager calls go through the
C++ program and give the bits the Python path gives, on every kind of plan (the in-kernel merge, the merge kernel, the
split kernel's dependent launch, one split, no lengths, odd head counts); and every call a program must not take —
another stream, a CUDA graph's capture, a launch hook, a window, another shape — takes the Python path and is right.
Skipped without CUDA (tests/test_native_decode.py covers the module on the CPU)."""

from __future__ import annotations

import pytest
import torch
from tests.helpers import graph_after_eager, load_script

import attnlab

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
pytest.importorskip("triton")
from attnlab._runtime import NATIVE_DECODE  # noqa: E402
from attnlab.gpu import decode, native  # noqa: E402

SHAPES = {  # (B, H, Hkv, L, D, with lengths)
    "fused": (1, 32, 8, 256, 128, True),  # the host rows' shape: eager calls merge in the split kernel
    "split-pdl": (1, 32, 8, 32768, 64, True),  # a long read: the split kernel's dependent launch
    "merge-kernel": (8, 32, 8, 32768, 128, True),  # a large read: the merge kernel after the split kernel
    "no-lengths": (2, 8, 2, 300, 64, False),
    "odd-heads": (3, 28, 4, 1000, 128, True),
    "one-split": (1, 8, 8, 64, 64, True),
}


@pytest.fixture
def native_on(monkeypatch):
    if native.module() is None:
        pytest.skip("the native module cannot be built here")
    monkeypatch.setattr(native, "ENABLED", True)
    decode.clear_plans()
    yield
    decode.clear_plans()


def _inputs(B, H, Hkv, L, D, lens):
    q = torch.randn(B, H, 1, D, dtype=torch.bfloat16, device="cuda")
    k = torch.randn(B, Hkv, L, D, dtype=torch.bfloat16, device="cuda")
    v = torch.randn(B, Hkv, L, D, dtype=torch.bfloat16, device="cuda")
    seqlens = torch.randint(L // 2, L + 1, (B,), dtype=torch.int32, device="cuda") if lens else None
    return q, k, v, seqlens


def _python_path(q, k, v, lens, **kw):
    """The same call with the native call off and no plan kept."""
    saved = native.ENABLED
    native.ENABLED = False
    decode.clear_plans()
    try:
        out = attnlab.flash_decode(q, k, v, cache_seqlens=lens, **kw)
        torch.cuda.synchronize()
        return out
    finally:
        native.ENABLED = saved
        decode.clear_plans()


def _native_calls() -> int:
    fast = NATIVE_DECODE[0]
    return 0 if fast is None else native.module().calls(fast[1])


def _same(a, b):
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


@pytest.mark.parametrize("name", SHAPES)
def test_native_calls_give_the_python_paths_bits(native_on, name):
    q, k, v, lens = _inputs(*SHAPES[name])
    q2 = torch.randn_like(q)
    want, want2 = _python_path(q, k, v, lens), _python_path(q2, k, v, lens)  # (each clears the kept plans)
    got = [attnlab.flash_decode(q, k, v, cache_seqlens=lens) for _ in range(5)]
    torch.cuda.synchronize()
    for g in got:
        _same(g, want)
    assert NATIVE_DECODE[0] is not None and _native_calls() >= 2  # (the first calls make the plan steady)
    n = _native_calls()
    _same(attnlab.flash_decode(q2, k, v, cache_seqlens=lens), want2)
    assert _native_calls() == n + 1
    _same(decode.flash_decode_triton(q2, k, v, cache_seqlens=lens), want2)
    assert _native_calls() == n + 2


def test_a_paged_cache_too(native_on):
    B, H, Hkv, D, page, per_seq = 2, 8, 2, 128, 64, 20
    q = torch.randn(B, H, 1, D, dtype=torch.bfloat16, device="cuda")
    k = torch.randn(B * per_seq, page, Hkv, D, dtype=torch.bfloat16, device="cuda")
    v = torch.randn(B * per_seq, page, Hkv, D, dtype=torch.bfloat16, device="cuda")
    table = torch.randperm(B * per_seq, device="cuda").view(B, per_seq).to(torch.int32)
    lens = torch.tensor([page * per_seq - 5, page * 3 + 1], dtype=torch.int32, device="cuda")
    want = _python_path(q, k, v, lens, block_table=table)
    for _ in range(5):
        _same(attnlab.flash_decode(q, k, v, cache_seqlens=lens, block_table=table), want)
    assert _native_calls() >= 2
    n = _native_calls()
    other = table.flip(1).contiguous()  # (another table of the same signature: the program takes it)
    _same(attnlab.flash_decode(q, k, v, cache_seqlens=lens, block_table=other),
          _python_path(q, k, v, lens, block_table=other))
    for _ in range(4):
        attnlab.flash_decode(q, k, v, cache_seqlens=lens, block_table=table)
    assert _native_calls() >= 1 and n >= 2


def test_calls_a_program_must_not_take_take_the_python_path(native_on):
    q, k, v, lens = _inputs(*SHAPES["fused"])
    for _ in range(4):
        attnlab.flash_decode(q, k, v, cache_seqlens=lens)
    n = _native_calls()
    assert n >= 1
    want = _python_path(q, k, v, lens)
    for _ in range(4):  # (the plans were cleared: steady again)
        attnlab.flash_decode(q, k, v, cache_seqlens=lens)
    n = _native_calls()
    # another stream
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        got = attnlab.flash_decode(q, k, v, cache_seqlens=lens)
    torch.cuda.current_stream().wait_stream(s)
    _same(got, want)
    # a window, a scale: other plans, never the program's
    for kw in ({"window": (64, 0)}, {"scale": 0.05}):
        _same(attnlab.flash_decode(q, k, v, cache_seqlens=lens, **kw), _python_path(q, k, v, lens, **kw))
    # a launch hook installed
    from triton import knobs

    hooked = []

    def hook(*a):
        hooked.append(1)

    chain = knobs.runtime.launch_enter_hook
    if hasattr(chain, "add"):  # (a chain of hooks in later tritons)
        chain.add(hook)
    else:
        knobs.runtime.launch_enter_hook = hook
    try:
        before = _native_calls()
        _same(attnlab.flash_decode(q, k, v, cache_seqlens=lens), want)
        assert _native_calls() == before
    finally:
        if hasattr(chain, "add"):
            chain.remove(hook)
        else:
            knobs.runtime.launch_enter_hook = None
    assert hooked
    # another shape, then this one again (the fast path's program swaps to the shape's own)
    q2, k2, v2, lens2 = _inputs(*SHAPES["odd-heads"])
    for _ in range(3):
        attnlab.flash_decode(q2, k2, v2, cache_seqlens=lens2)
    _same(attnlab.flash_decode(q, k, v, cache_seqlens=lens), want)
    _same(attnlab.flash_decode(q, k, v, cache_seqlens=lens), want)


def test_a_graph_captured_after_native_calls_replays_right(native_on):
    q, k, v, lens = _inputs(*SHAPES["split-pdl"])
    for _ in range(4):
        attnlab.flash_decode(q, k, v, cache_seqlens=lens)
    assert _native_calls() >= 1
    got, want = graph_after_eager(lambda: attnlab.flash_decode(q, k, v, cache_seqlens=lens), q)
    _same(got, want)


def test_the_breakdown_times_the_programs_call_alone(native_on):
    """benchmarks/decode_host.py's breakdown of a kept call: the native program's C++ call timed among its steps, by
    the module's own call (with no page table), below the whole public call's time."""
    host = load_script("benchmarks/decode_host.py")
    steps = {r["step"]: r["host_us"] for r in host.breakdown(calls=20, rounds=1)["steps"]}
    assert 0 < steps[host.NATIVE_STEP] < float("inf")
