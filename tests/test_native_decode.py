"""The native decode call (attnlab.gpu.native, native_decode.cpp) on the CPU: the module builds, a *dry* program (one
that launches nothing and keeps what it would have launched) puts each call's pointers into their slots and its
constants into the parameter words as the kernel's types lay them out, refuses every call that is not its own, and the
public call tries the fast program first only where its arguments are the defaults. The launches themselves need a GPU
(tests/gpu/test_decode_native.py)."""

from __future__ import annotations

import struct
from types import SimpleNamespace

import pytest
import torch

pytest.importorskip("triton")
from attnlab.gpu import native  # noqa: E402

mod = native.module()
pytestmark = pytest.mark.skipif(mod is None, reason="the native module cannot be built here (no C++ compiler?)")


def _inputs(Hkv=2, L=100, lens=True):
    q = torch.randn(1, 4, 1, 64)
    k = torch.randn(1, Hkv, L, 64)
    v = torch.randn(1, Hkv, L, 64)
    return q, k, v, (torch.tensor([L], dtype=torch.int32) if lens else None)


SPLIT = (1234, (2, 3, 1), 4, 1024, False,
         (("O", None, 0), ("O", None, 1), ("O", None, 2), ("O", None, 3), ("i", 7, -1), ("i", -1, -1), ("f", 0.5, -1),
          ("O", None, 4), ("O", None, 5), ("l", -3, -1), ("b", True, -1), ("O", None, -1)))
MERGE = (99, (3, 1, 1), 8, 0, True, (("O", None, 4), ("O", 4096, -1), ("d", 0.25, -1)))


def _program(q, k, v, lens, launches=(SPLIT, MERGE), hooks=lambda: False):
    out, lse = torch.empty(1, 4, 1, 64, dtype=q.dtype), torch.empty(1, 4, 1)
    return native.program(q, k, v, lens, out, lse, device=-1, stream=0, launches=list(launches), hooks_fn=hooks,
                          dry=True)


@pytest.fixture
def fast_slot():
    """Put a value in the fast path's slot (the list ``_runtime.NATIVE_DECODE``, which the callers hold by reference)
    for one test."""
    from attnlab import _runtime

    saved = _runtime.NATIVE_DECODE[0]
    yield lambda value: _runtime.NATIVE_DECODE.__setitem__(0, value)
    _runtime.NATIVE_DECODE[0] = saved


def _bits(fmt: str, x) -> int:
    return int.from_bytes(struct.pack("<" + fmt, x).ljust(8, b"\0"), "little")


def test_a_dry_program_fills_the_slots_and_lays_out_the_constants():
    q, k, v, lens = _inputs()
    p = _program(q, k, v, lens)
    out, lse = mod.call(p, q, k, v, lens, None)
    assert (out.shape, out.dtype, lse.shape, lse.dtype) == ((1, 4, 1, 64), q.dtype, (1, 4, 1), torch.float32)
    (f1, g1, b1, s1, pdl1, w1), (f2, g2, b2, s2, pdl2, w2) = mod.last(p)
    assert (f1, g1, b1, s1, pdl1) == (1234, (2, 3, 1), 128, 1024, False)  # 32 threads a warp
    assert (f2, g2, b2, s2, pdl2) == (99, (3, 1, 1), 256, 0, True)
    assert w1 == [q.data_ptr(), k.data_ptr(), v.data_ptr(), lens.data_ptr(), 7, _bits("i", -1), _bits("f", 0.5),
                  out.data_ptr(), lse.data_ptr(), _bits("q", -3), 1, 0]
    assert w2 == [out.data_ptr(), 4096, _bits("d", 0.25)]
    again = mod.call(p, q, k, v, lens, None)
    assert again[0].data_ptr() != out.data_ptr() and mod.last(p)[0][5][7] == again[0].data_ptr()  # new outputs
    assert mod.calls(p) == 2


def test_a_call_that_is_not_the_programs_returns_none():
    q, k, v, lens = _inputs()
    p = _program(q, k, v, lens)
    other = _inputs(L=101)
    other = (torch.randn(1, 4, 2, 64), *other[1:])  # (q of two new tokens)

    class Sub(torch.Tensor):
        pass

    misaligned = torch.randn(1, 4, 1, 65)[..., 1:]  # (4 bytes past a 16-byte boundary, the strides of another shape)
    aligned_view = torch.randn(1, 4, 1, 68)[..., 4:]  # (16 bytes in: aligned, but its strides are not q's)
    calls = [(other[0], k, v, lens), (q, other[1], v, lens), (q, k, other[2], lens), (q, k, v, None),
             (q, k, v, [100]), (q, k, v, lens.long()), (q.double(), k, v, lens), (q.transpose(1, 2), k, v, lens),
             (misaligned, k, v, lens), (aligned_view, k, v, lens), (q.as_subclass(Sub), k, v, lens),
             (q.numpy(), k, v, lens), (None, k, v, lens), (q.to_sparse(), k, v, lens),
             (torch.empty(1, 4, 1, 64, device="meta"), k, v, lens)]
    for args in calls:
        assert mod.call(p, *args, None) is None
    assert mod.calls(p) == 0
    assert mod.call(p, q.clone(), k, v, lens, None) is not None  # (another tensor of the same signature)
    assert mod.call(p, q, torch.nn.Parameter(k, requires_grad=False), v, lens, None) is not None  # (a Parameter is a tensor)
    hooked = _program(q, k, v, lens, hooks=lambda: True)
    assert mod.call(hooked, q, k, v, lens, None) is None  # a launch hook installed: the Python path, which calls it
    with pytest.raises(TypeError, match="strided tensors"):
        _program(q.to_sparse(), k, v, lens)
    no_lens = _program(q, k, v, None)
    assert mod.call(no_lens, q, k, v, None, None) is not None and mod.call(no_lens, q, k, v, lens, None) is None


def test_a_page_table_has_its_slot():
    """A program of a paged call records the page table as its fifth input: its pointer goes into slot 6, and a call
    without one, or with another table's shape, is not the program's."""
    q, k, v, lens = _inputs()
    table = torch.tensor([[0, 1, 2]], dtype=torch.int32)
    out, lse = torch.empty(1, 4, 1, 64), torch.empty(1, 4, 1)
    launch = (5, (1, 1, 1), 4, 0, False, (("O", None, 6), ("O", None, 3)))
    p = native.program(q, k, v, lens, out, lse, block_table=table, device=-1, stream=0, launches=[launch],
                       hooks_fn=lambda: False, dry=True)
    assert mod.call(p, q, k, v, lens, table) is not None
    assert mod.last(p)[0][5] == [table.data_ptr(), lens.data_ptr()]
    assert mod.call(p, q, k, v, lens, None) is None
    assert mod.call(p, q, k, v, lens, torch.tensor([[0, 1]], dtype=torch.int32)) is None


def test_outputs_follow_inference_mode():
    q, k, v, lens = _inputs()
    p = _program(q, k, v, lens)
    with torch.inference_mode():
        out, lse = mod.call(p, q, k, v, lens, None)
    assert out.is_inference() and lse.is_inference()
    out, _ = mod.call(p, q, k, v, lens, None)
    assert not out.is_inference()


@pytest.mark.parametrize("launch, error", [
    ((1, (1, 1, 1), 4, 0, False, (("x", 3, -1),)), "unknown parameter type"),
    ((1, (1, 1, 1), 4, 0, False, (("O", None, 7),)), "slot -1..6"),
    ((1, (1, 1, 1), 4, 0, False, (("i", None, 0),)), "slot -1..6"),
    ((1, (1, 1, 1), 4, 0, False, (("i", None, -1),)), "not a pointer"),
    ((1, (1, 1, 1), 4, 0, False, (("O", None, -1),) * 97), "at most 96"),
    ((1, (1, 1), 4, 0, False, ()), "takes exactly 3 arguments"),
])
def test_bad_launches_are_refused(launch, error):
    q, k, v, lens = _inputs()
    with pytest.raises((ValueError, TypeError), match=error):
        _program(q, k, v, lens, launches=[launch])


def test_launch_spec_reads_the_binarys_parameters():
    """``launch_spec``: the compiled kernel's function, grid (padded to three), warps, shared memory and programmatic
    dependent flag; its binary's parameters only (constexprs left out), ``Slot``s as slots, Triton's two scratch
    pointers null at the end; None for a kernel not compiled or a tensor where a pointer was expected."""
    sig = {"X": "*bf16", "Y": "*fp32", "n": "i32", "B": "constexpr", "m": "i64", "s": "fp32", "C": "constexpr"}
    md = dict(num_warps=4, shared=512, launch_pdl=True, launch_cooperative_grid=False, num_ctas=1,
              global_scratch_size=0, profile_scratch_size=0)
    compiled = SimpleNamespace(metadata=SimpleNamespace(**md), function=77,
                               src=SimpleNamespace(fn=SimpleNamespace(arg_names=list(sig)), signature=sig, constants={}))
    launcher = SimpleNamespace(compiled=compiled, grid=(5, 2))
    spec = native.launch_spec(launcher, [native.OUT, 4096, 5, 16, -7, 0.5, 64])
    assert spec == (77, (5, 2, 1), 4, 512, True, (("O", None, 4), ("O", 4096, -1), ("i", 5, -1), ("l", -7, -1),
                                                   ("f", 0.5, -1), ("O", None, -1), ("O", None, -1)))
    assert native.launch_spec(launcher, [torch.zeros(1), 4096, 5, 16, -7, 0.5, 64]) is None
    assert native.launch_spec(SimpleNamespace(compiled=None, grid=(1,)), []) is None
    # and the program takes it
    q, k, v, lens = _inputs()
    p = _program(q, k, v, lens, launches=[spec])
    out, _ = mod.call(p, q, k, v, lens, None)
    assert mod.last(p)[0][5] == [out.data_ptr(), 4096, 5, _bits("q", -7), _bits("f", 0.5), 0, 0]


def test_the_public_call_tries_the_fast_program_first_with_the_defaults(monkeypatch, fast_slot):
    """``attnlab.flash_decode`` (and ``flash_decode_triton``) hand a call to the registered program before anything
    else where every optional argument is its default; its None sends the call on as before; a call with a window, a
    scale or anything else never reaches it."""
    import attnlab
    from attnlab.gpu import decode

    seen = []

    def fast(prog, q, k, v, lens, table):
        seen.append(prog)
        return "fast" if prog == "serves" else None

    q, k, v, lens = _inputs(Hkv=4)
    fast_slot((fast, "serves", None))
    assert attnlab.flash_decode(q, k, v, cache_seqlens=lens) == "fast"
    assert decode.flash_decode_triton(q, k, v, cache_seqlens=lens) == "fast"
    for kw in ({"window": (8, 0)}, {"scale": 0.1}, {"num_splits": 2}, {"causal": False}, {"softcap": 5.0}):
        out, _ = attnlab.flash_decode(q, k, v, cache_seqlens=lens, **kw)  # (the CPU's blockwise path)
        assert isinstance(out, torch.Tensor)
    assert seen == ["serves", "serves"]
    table = torch.zeros(1, 2, dtype=torch.int32)
    assert attnlab.flash_decode(q, k, v, cache_seqlens=lens, block_table=table) == "fast"  # (a paged call too)
    seen.clear()
    fast_slot((fast, "declines", None))
    out, lse = attnlab.flash_decode(q, k, v, cache_seqlens=lens)
    fast_slot(None)
    ref_out, ref_lse = attnlab.flash_decode(q, k, v, cache_seqlens=lens)
    assert torch.equal(out, ref_out) and torch.equal(lse, ref_lse) and seen == ["declines"]


def test_only_default_calls_make_programs(monkeypatch):
    """A plan's program is made only from a call whose key says the defaults (``decode_plan._defaults``): a program
    serves calls by their tensors alone, so a window's plan must never make one."""
    from attnlab.gpu import decode_plan

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    q, k, v, lens = _inputs()
    key = decode_plan.plan_key(q, k, v, lens, None, None, True, None, None, None, None)
    assert decode_plan._defaults(key)
    for kw in (dict(window=(8, 0)), dict(softcap=5.0), dict(scale=0.1), dict(num_splits=2), dict(causal=False)):
        args = dict(num_splits=None, causal=True, window=None, softcap=None, scale=None) | kw
        key = decode_plan.plan_key(q, k, v, lens, None, args["num_splits"], args["causal"], args["window"],
                                   args["softcap"], None, args["scale"])
        assert not decode_plan._defaults(key), kw
    table = torch.zeros(1, 2, dtype=torch.int32)
    assert decode_plan._defaults(decode_plan.plan_key(q, k, v, lens, table, None, True, None, None, None, None))
    slopes = torch.rand(4)
    assert not decode_plan._defaults(decode_plan.plan_key(q, k, v, lens, None, None, True, None, None, slopes, None))
    assert not decode_plan._defaults(decode_plan.plan_key(q, k, v, lens, None, None, True, None, None, None, None,
                                                          config="forced"))


def test_clear_plans_forgets_the_fast_program(fast_slot):
    from attnlab import _runtime
    from attnlab.gpu import decode

    fast_slot(("call", "program", "plan"))
    decode.clear_plans()
    assert _runtime.NATIVE_DECODE == [None]


def test_a_plan_makes_its_program_at_its_second_steady_call(monkeypatch):
    """``_native_after``: a plan makes its program once it has served a second call on the Python path with its
    eager calls steady, never from a call with other than the defaults, never while a graph is captured, and each
    Python-path call of a plan with a program makes that program the fast path's."""
    from attnlab.gpu import decode_plan

    made, fast = [], []
    monkeypatch.setattr(native, "program", lambda *a, **kw: made.append(kw["stream"]) or f"prog{len(made)}")
    monkeypatch.setattr(native, "set_fast", lambda plan: fast.append(plan.native))
    capturing = [False]
    monkeypatch.setattr(decode_plan, "_capturing", lambda: capturing[0])
    q, k, v, lens = _inputs()
    defaults = (None,) * 6 + (None, True, None, None, None, None, 0, 7)  # (device 0, stream 7)
    plan = SimpleNamespace(native=None, native_seen=0, native_launches=lambda: ["launch"])

    def after(key=defaults):
        decode_plan._native_after(plan, key, q, k, v, lens, None, ("out", "lse"))

    after()
    assert made == [] and fast == []  # (one call: a plan of a growing cache is used once)
    capturing[0] = True
    after()
    assert made == []
    capturing[0] = False
    built = [None]  # the module still building in the background: the Python path, asked again at the next call
    monkeypatch.setattr(native, "module", lambda wait=True: mod if wait else built[0])
    after()
    assert made == [] and plan.native is None and fast == []
    built[0] = mod
    after()
    assert made == [7] and plan.native == "prog1" and fast == ["prog1"]
    after()
    assert made == [7] and fast == ["prog1", "prog1"]  # made once
    window = defaults[:8] + ((8, 0),) + defaults[9:]
    other = SimpleNamespace(native=None, native_seen=5, native_launches=lambda: ["launch"])
    decode_plan._native_after(other, window, q, k, v, lens, None, ("out", "lse"))
    assert other.native is None and made == [7]
    unsteady = SimpleNamespace(native=None, native_seen=5, native_launches=lambda: None)
    decode_plan._native_after(unsteady, defaults, q, k, v, lens, None, ("out", "lse"))
    assert unsteady.native is None and made == [7]
    # a program the module would not make (None): not asked for again
    refused = SimpleNamespace(native=None, native_seen=5, native_launches=lambda: ["launch"])
    monkeypatch.setattr(native, "program", lambda *a, **kw: made.append("refused"))
    for _ in range(3):
        decode_plan._native_after(refused, defaults, q, k, v, lens, None, ("out", "lse"))
    assert refused.native is False and made == [7, "refused"] and fast == ["prog1", "prog1"]


def _fake_compiled(launcher, n_pointers: int):
    """A compiled kernel for ``launcher``'s JIT function as ``launch.static_arg_types`` reads one: its constexprs as
    such, its first ``n_pointers`` parameters pointers, the rest ints."""
    import inspect

    fn = launcher.kernel  # (in the interpreter a wrapper of the function: its annotations say the constexprs)
    params = inspect.signature(fn.fn).parameters.values()
    sig = {p.name: "constexpr" if "constexpr" in str(p.annotation) else "*fp32" if i < n_pointers else "i64"
           for i, p in enumerate(params)}
    md = SimpleNamespace(num_warps=4, shared=0, launch_pdl=bool(launcher.options.get("launch_pdl", False)),
                         launch_cooperative_grid=False, num_ctas=1, global_scratch_size=0, profile_scratch_size=0)
    return SimpleNamespace(metadata=md, function=id(launcher), src=SimpleNamespace(fn=fn, signature=sig, constants={}))


@pytest.mark.parametrize("case", ["merge-kernel", "fused", "fused-pdl", "one-split", "no-lengths", "paged"])
def test_a_programs_launches_are_the_python_paths(monkeypatch, case):
    """``DecodePlan.native_launches`` describes exactly what the plan's own steady eager call launches: the same
    launchers with the same arguments, the call's tensors in the slots. The plan is made by a real call in Triton's
    interpreter; its launchers then get stand-in compiled kernels, and the Python path's steady call is recorded at
    ``Launcher.launch``."""
    from attnlab._runtime import interpreter_problem
    from attnlab.gpu import decode, decode_plan
    from attnlab.gpu.launch import Launcher

    if (problem := interpreter_problem()) is not None:
        pytest.skip(f"Triton's interpreter cannot run the kernels here: {problem}")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(decode_plan, "eager_fused", lambda nbytes, device: case.startswith("fused"))
    monkeypatch.setattr(decode_plan, "split_pdl", lambda device, nbytes=None: case == "fused-pdl")
    decode.clear_plans()
    q = torch.randn(1, 4, 1, 32, dtype=torch.float16)
    table = torch.tensor([[3, 0, 2, 1]], dtype=torch.int32) if case == "paged" else None  # (four pages of 16 keys)
    shape = (4, 16, 2, 32) if case == "paged" else (1, 2, 64, 32)
    k = torch.randn(*shape, dtype=torch.float16)
    v = torch.randn(*shape, dtype=torch.float16)
    lens = None if case == "no-lengths" else torch.tensor([50], dtype=torch.int32)
    decode.flash_decode_triton(q, k, v, cache_seqlens=lens, block_table=table,
                               num_splits=1 if case == "one-split" else 2)
    (plan,) = decode_plan._PLANS.values()
    decode.clear_plans()
    assert plan.merge == (0 if case == "one-split" else 1) and plan.fused == case.startswith("fused")
    for name in ("split", "fused_split", "eager_split", "merge_launch", "pdl_launch"):
        launcher = getattr(plan, name, None)
        if launcher is not None:
            launcher.compiled = _fake_compiled(launcher, 11 if "split" in name else 4)
    plan.on_cuda, plan.pair_ran, plan.fused_ran = True, True, True
    plan._partials(False)  # (the kept split buffers)
    monkeypatch.setattr(decode_plan, "_capturing", lambda: False)
    monkeypatch.setattr(decode_plan, "hooks_set", lambda: False)
    launched = []
    monkeypatch.setattr(Launcher, "launch", lambda self, args, stream: launched.append((self, list(args), stream)))
    out, lse = plan(q, k, v, lens, table, None, 5)
    monkeypatch.setattr(native, "launch_spec", lambda launcher, args: (launcher, list(args)))
    described = plan.native_launches()
    pointers = {native.Q: q.data_ptr(), native.K: k.data_ptr(), native.V: v.data_ptr(),
                native.LENS: None if lens is None else lens.data_ptr(), native.OUT: out.data_ptr(),
                native.LSE: lse.data_ptr(), native.TABLE: None if table is None else table.data_ptr()}
    assert len(described) == len(launched) == (2 if case in ("merge-kernel", "no-lengths", "paged") else 1)
    assert (native.TABLE in described[0][1]) == (case == "paged")
    for (launcher, template), (made_by, args, stream) in zip(described, launched):
        assert launcher is made_by and stream == 5
        assert [pointers[a] if isinstance(a, native.Slot) else a for a in template] == args
    assert (launched[0][0] is getattr(plan, "eager_split", None)) == (case == "fused-pdl")
    # and not steady yet, or a call that needs more than its pointers: no program
    plan.pair_ran = False
    assert plan.native_launches() is None or case == "one-split"
    plan.pair_ran, plan.has_slopes = True, True
    assert plan.native_launches() is None
    plan.has_slopes, plan.cast_table = False, True  # (an int64 or strided page table, made int32 on each call)
    assert plan.native_launches() is None


def test_a_gpu_program_is_checked_against_the_driver(monkeypatch):
    """A program that launches (not dry) is made only where the driver lists each kernel's parameters and they are
    the description's, in number and size (``cuFuncGetParamInfo``); here, without libcuda, no program: None, a
    warning, and the call goes on by the Python path (on a GPU machine: a launch without a function is refused
    before the driver is asked). A dry program's error is raised."""
    from attnlab import _runtime

    monkeypatch.setattr(_runtime, "_warned", set())
    q, k, v, lens = _inputs()
    out, lse = torch.empty(1, 4, 1, 64), torch.empty(1, 4, 1)
    launch = (0, (1, 1, 1), 4, 0, False, (("O", None, 0),))  # (no function: never handed to a driver)
    with pytest.warns(RuntimeWarning, match="no native decode call for this plan .*(libcuda|has no function)"):
        assert native.program(q, k, v, lens, out, lse, device=0, stream=0, launches=[launch], stream_fn=int,
                              hooks_fn=lambda: False) is None
    with pytest.raises(ValueError, match="unknown parameter type"):
        native.program(q, k, v, lens, out, lse, device=-1, stream=0, launches=[(1, (1, 1, 1), 4, 0, False,
                                                                              (("z", 1, -1),))], dry=True)


_KERNEL_PARAMS = r"""
import json, re, triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from attnlab.gpu import decode_kernels as dk
from attnlab.gpu.launch import static_arg_types

def ptx_bytes(ptx):
    entry = re.search(r"\.entry\s+\w+\((.*?)\)", ptx, re.S).group(1)
    return [int(re.search(r"\d+", t).group()) // 8 for t in re.findall(r"\.param\s+\.(\w+)", entry)]

split = dk.compile_sm90(128, merge=2, wait=True)
fn = dk._decode_merge_kernel
const = dict(NQ=1, BLOCK_S=16, BLOCK_D=128, PDL=True, ROWS=4, stride_od=1)
ptrs = dict(O_PART="*fp32", LSE_PART="*fp32", OUT="*bf16", LSE="*fp32")
merge = triton.compile(ASTSource(fn, *dk.sm90_signature(fn, const, ptrs)), target=GPUTarget("cuda", 90, 32),
                       options=dict(num_warps=4, num_stages=3))
out = []
for kernel in (split, merge):
    letters, keep, scratch = static_arg_types(kernel, allow_pdl=True)
    out.append(dict(letters=letters, keep=len(keep), scratch=scratch, ptx=ptx_bytes(kernel.asm["ptx"])))
print(json.dumps(out))
"""


def test_the_described_parameters_are_the_kernels_own():
    """What a program passes to each decode kernel — the binary's parameters as ``launch.static_arg_types`` reads them
    off the compiled kernel, with its dependent launches allowed — has the number and sizes of the parameters of the
    kernel's PTX entry: the split kernel's eager build (the in-kernel merge, the wait of a dependent launch) and the
    merge kernel, built for sm_90 here (the check a GPU program gets from the driver, made on the CPU)."""
    from tests.helpers import fresh_json

    for kernel in fresh_json(_KERNEL_PARAMS, timeout=600):
        sizes = [{"O": 8, "l": 8, "K": 8, "d": 8, "i": 4, "I": 4, "f": 4, "h": 2, "H": 2}.get(c, 1)
                 for c in kernel["letters"]]
        assert sizes == kernel["ptx"] and kernel["scratch"] == 2, kernel
        assert kernel["keep"] == len(kernel["letters"]) - 2


class _Builder:
    """A background build's process as ``native.module`` polls it."""

    def __init__(self):
        self.returncode, self.waited = None, False

    def poll(self):
        return self.returncode

    def wait(self):
        self.waited = True
        self.returncode = 0 if self.returncode is None else self.returncode
        return self.returncode


def test_the_library_never_waits_for_the_build(monkeypatch, tmp_path):
    """``module(wait=False)`` (the library's ask): where no module is built for this source, the first ask starts the
    build in a process of its own and every ask returns None until that process ends; then the module is loaded (no
    compiler) and kept. A failed build is said once and final; a module already built is loaded at the first ask;
    ``module()`` waits for a running build."""
    from attnlab import _runtime

    monkeypatch.setattr(_runtime, "_warned", set())
    monkeypatch.setattr(native, "build_dir", lambda: tmp_path)
    monkeypatch.setattr(native, "_build", lambda: "loaded")
    started = []

    def start():
        started.append(_Builder())
        return started[-1]

    monkeypatch.setattr(native, "_start_build", start)
    for outcome in (0, 1):
        monkeypatch.setattr(native, "_MODULE", [])
        monkeypatch.setattr(native, "_BUILDER", [])
        assert native.module(wait=False) is None and native.module(wait=False) is None and len(started) == 1
        started[0].returncode = outcome
        if outcome == 0:
            assert native.module(wait=False) == "loaded" and native.module(wait=False) == "loaded"
        else:
            with pytest.warns(RuntimeWarning, match="could not be built"):
                assert native.module(wait=False) is None
            assert native.module(wait=False) is None and native.module() is None
        started.clear()
    monkeypatch.setattr(native, "_MODULE", [])
    monkeypatch.setattr(native, "_BUILDER", [])
    (tmp_path / f"{native.NAME}.so").write_bytes(b"")
    assert native.module(wait=False) == "loaded" and started == []
    monkeypatch.setattr(native, "_MODULE", [])
    (tmp_path / f"{native.NAME}.so").unlink()
    assert native.module(wait=False) is None and native.module() == "loaded" and started[0].waited
    # a build that cannot start (a cache folder it cannot write): said once, the Python path from then on

    def refused():
        raise PermissionError("read-only cache")

    monkeypatch.setattr(native, "_start_build", refused)
    monkeypatch.setattr(native, "_MODULE", [])
    monkeypatch.setattr(_runtime, "_warned", set())
    with pytest.warns(RuntimeWarning, match="read-only cache"):
        assert native.module(wait=False) is None
    assert native.module(wait=False) is None and native.module() is None


def test_a_module_built_in_the_background(monkeypatch, tmp_path):
    """The background build for real: a fresh cache folder, the build in its own Python process (which finds attnlab
    however this one did), polled until it ends; the module it leaves is this source's and is loaded."""
    monkeypatch.setenv("ATTNLAB_CACHE", str(tmp_path))
    monkeypatch.setattr(native, "_MODULE", [])
    monkeypatch.setattr(native, "_BUILDER", [])
    assert native.module(wait=False) is None
    (proc,) = native._BUILDER
    assert proc.wait(timeout=600) == 0, (native.build_dir() / "build.log").read_text()
    built = native.module(wait=False)
    assert built is not None and built.__file__.startswith(str(tmp_path)) and hasattr(built, "call")
