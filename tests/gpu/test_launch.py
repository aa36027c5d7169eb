"""attnlab.gpu.launch: when two launches of a kernel may share one compiled kernel."""

import pytest

pytest.importorskip("triton")
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from attnlab.gpu.launch import same_specialisation  # noqa: E402


@triton.jit
def _kernel(X, n, m, scale, B: tl.constexpr, FLAG: tl.constexpr):
    pass


@pytest.mark.parametrize("a, b, same", [
    ([32, 7, 0.5, 16, True], [48, 9, 0.5, 16, True], True),  # ints alike: divisible by 16 / not, not 1
    ([32, 7, 0.5, 16, True], [33, 7, 0.5, 16, True], False),  # 32 divides by 16, 33 does not
    ([32, 1, 0.5, 16, True], [32, 3, 0.5, 16, True], False),  # 1 is specialised
    ([32, 7, 0.5, 16, True], [32, 7, 0.5, 32, True], False),  # a constexpr by value
    ([32, 7, 0.5, 16, True], [32, 7, 0.5, 16, False], False),
    ([32, 7, 0.5, 16, True], [32, 7, 0.25, 16, True], False),  # a float argument that changed: not assumed
    ([32, 7, 0.5, 16, True], [32, 2**31 + 7, 0.5, 16, True], False),  # past 32 bits
    ([32, 7, 0.5, 16, True], [32, 7, 0.5, 16], False),
])
def test_same_specialisation(a, b, same):
    assert same_specialisation(_kernel, a, b) is same
    assert same_specialisation(_kernel, b, a) is same


@triton.jit
def _store_args(OUT, a, b, C: tl.constexpr = 3, EXTRA=None):
    tl.store(OUT, a)
    tl.store(OUT + 1, b)
    tl.store(OUT + 2, C)
    if EXTRA is not None:
        tl.store(OUT + 3, 1)


def test_launch_kept_orders_the_arguments_and_takes_the_defaults():
    """``launch_kept`` takes every argument by name (in any order), the kernel's defaults for the rest, and
    refuses a call that leaves out an argument without a default (before anything runs); on the GPU, the
    second call of a specialisation takes the kept compiled kernel."""
    import torch

    from attnlab.gpu.launch import launch_kept

    out = torch.zeros(4, dtype=torch.int32, device="cuda" if torch.cuda.is_available() else "cpu")
    launch_kept(_store_args, (1,), dict(b=7, a=5, OUT=out), num_warps=1)
    assert out.tolist() == [5, 7, 3, 0]
    launch_kept(_store_args, (1,), dict(OUT=out, a=1, b=2, C=9, EXTRA=out), num_warps=1)
    assert out.tolist() == [1, 2, 9, 1]
    if out.is_cuda:  # the compiled kernel is kept, and the next call of the same specialisation launches it
        from attnlab.gpu import launch

        assert any(key[0] is _store_args for key in launch._SHARED)
    launch_kept(_store_args, (1,), dict(OUT=out, a=4, b=2, C=9, EXTRA=out), num_warps=1)
    assert out.tolist() == [4, 2, 9, 1]
    out.zero_()
    with pytest.raises(TypeError, match=r"no value for \['b'\]"):
        launch_kept(_store_args, (1,), dict(OUT=out, a=1), num_warps=1)
    assert not out.any()


def test_descriptors_and_none_specialise_by_kind_not_by_address():
    """Tensor descriptors key a kept compiled kernel by dtype, block shape and layout (not by their tensor's
    address or extent); None is an argument like any other."""
    import torch
    from triton.tools.tensor_descriptor import TensorDescriptor

    from attnlab.gpu.launch import _specialisation

    def desc(rows, dtype=torch.float16, block=(16, 32)):
        x = torch.zeros(rows, 32, dtype=dtype)
        return TensorDescriptor(x, list(x.shape), list(x.stride()), list(block))

    a = _specialisation(_kernel, [desc(64), 7, 9, 0.5, 16, True])
    assert a is not None and a == _specialisation(_kernel, [desc(128), 7, 9, 0.5, 16, True])
    assert a != _specialisation(_kernel, [desc(64, block=(32, 32)), 7, 9, 0.5, 16, True])
    assert a != _specialisation(_kernel, [desc(64, dtype=torch.bfloat16), 7, 9, 0.5, 16, True])
    assert _specialisation(_kernel, [None, 7, 9, 0.5, 16, True]) is not None
    assert _specialisation(_kernel, [object(), 7, 9, 0.5, 16, True]) is None


class _Compiled:
    """A stand-in compiled kernel: what a launch hands its launcher (``run``'s arguments), recorded."""

    function, packed_metadata = "fn", "meta"

    def __init__(self):
        self.calls = []

    def run(self, *a):
        self.calls.append(a)


def test_recorded_launches_are_kept_with_each_tensor_named_and_launch_again_with_new_ones():
    """``recording`` collects a block's ``launch_kept`` launches; ``KeptLaunch.make`` keeps one only where every
    tensor (and descriptor) argument is named by the caller and is the object named, and only with a compiled
    kernel (never under the interpreter); ``run`` passes each call's tensors as pointers, descriptors rebased
    (``rebased``: a copy over another tensor, the template's tensor untouched), and everything else as recorded."""
    import torch
    from triton.tools.tensor_descriptor import TensorDescriptor

    from attnlab.gpu import launch
    from attnlab.gpu.launch import KeptLaunch, Launcher, launch_kept, rebased, recording

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    out = torch.zeros(4, dtype=torch.int32, device=dev)
    with recording() as launches:
        launch_kept(_store_args, (1,), dict(OUT=out, a=5, b=7), num_warps=1)
    launch_kept(_store_args, (1,), dict(OUT=out, a=1, b=1), num_warps=1)  # (outside the block: not recorded)
    assert len(launches) == 1 and out.tolist() == [1, 1, 3, 0]
    launcher, args = launches[0]
    assert args[0] is out and args[1:] == [5, 7, 3, None]
    assert launcher.allow_static is launch.STATIC_KEPT  # (the prefill's launches: Triton's launcher unless it is set)
    if not out.is_cuda:  # the interpreter compiles nothing: nothing to keep
        assert launcher.compiled is None and launcher.static is None and KeptLaunch.make(launcher, args, {"OUT": "out"}, {"out": out}) is None
    else:
        kept = KeptLaunch.make(launcher, args, {"OUT": "out"}, {"out": out})
        other = torch.zeros(4, dtype=torch.int32, device=dev)
        kept.run({"out": other}, torch.cuda.current_stream().cuda_stream)
        assert other.tolist() == [5, 7, 3, 0] and out.tolist() == [1, 1, 3, 0]

    fake = Launcher(_kernel, (2, 1, 1), num_warps=1, num_stages=None)
    fake.compiled = _Compiled()
    x, y = torch.zeros(64, 32, dtype=torch.float16), torch.ones(64, 32, dtype=torch.float16)
    d = TensorDescriptor(x, list(x.shape), list(x.stride()), [16, 32])
    assert KeptLaunch.make(fake, [x, 7, 9, 0.5, 16, True], {}, {}) is None  # a tensor nobody named
    assert KeptLaunch.make(fake, [x, 7, 9, 0.5, 16, True], {"X": "x"}, {"x": y}) is None  # named, another object
    assert KeptLaunch.make(fake, [x, 7, 9, 0.5, 16, True], {"X": "x", "n": "x"}, {"x": x}) is None  # an int named
    kept = KeptLaunch.make(fake, [d, 7, 9, 0.5, 16, True], {"X": "d"}, {"d": d})
    assert kept is not None and kept.args[0] is None  # (no tensor of the first call kept alive)
    d2 = rebased(d, y)
    assert d2.base is y and d.base is x and (d2.shape, d2.strides, d2.block_shape) == (d.shape, d.strides, d.block_shape)
    kept.run({"d": d2}, 11)
    assert fake.compiled.calls == [(2, 1, 1, 11, "fn", "meta", None, None, None, d2, 7, 9, 0.5, 16, True)]
    kept = KeptLaunch.make(fake, [x, 7, 9, 0.5, 16, True], {"X": "x"}, {"x": x})
    kept.run({"x": y}, 3)
    assert fake.compiled.calls[-1][9] == y.data_ptr()


# -- PyTorch's launcher for the kept compiled kernels ------------------------------------------------------------

_STATIC_ABI = r"""
import json, re, sys
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from attnlab.gpu import decode_kernels, launch

def params(c):
    ptx = c.asm["ptx"]
    entry = ptx[ptx.index(".entry"):]
    return re.findall(r"\.param\s+\.(\w+)", entry[:entry.index(")")])

out = []
for D, kw in ((128, {}), (64, dict(merge=1, group_rows=7)), (128, dict(trigger=True, wait=True))):
    c = decode_kernels.compile_sm90(D, **kw)
    how = launch.static_arg_types(c)
    out.append(dict(types=how and how[0], scratch=how and how[1 + 1], kept=how and len(how[1]),
                    params=params(c), names=len(c.src.fn.arg_names)))
fn = decode_kernels._decode_merge_kernel
for pdl in (False, True):
    const = dict(NQ=1, BLOCK_S=16, BLOCK_D=128, stride_od=1, PDL=pdl, ROWS=4)
    sig, const, attrs = decode_kernels.sm90_signature(fn, const, dict(O_PART="*fp32", LSE_PART="*fp32",
                                                                      OUT="*bf16", LSE="*fp32"))
    c = triton.compile(ASTSource(fn, sig, const, attrs),
                       target=GPUTarget("cuda", 90, 32), options=dict(num_warps=4, launch_pdl=pdl))
    how = launch.static_arg_types(c)
    out.append(dict(types=how and how[0], params=params(c), pdl=pdl))
print(json.dumps(out))
"""

# PyTorch's launcher's type letters -> the PTX parameter type each stands for
_PTX = {"O": "u64", "i": "u32", "l": "u64", "f": "f32", "d": "f64"}


def test_static_launch_takes_the_parameters_the_binary_has():
    """``static_arg_types`` reads a compiled kernel's parameters as the binary has them: built for sm_90 (Triton's
    own ptxas, any machine), the type letters it hands PyTorch's launcher are the PTX entry's parameters one for
    one — the constexprs left out, the scratch pointers Triton appends at the end — for the decode split kernel
    as plans launch it (with and without the merge kernel, waiting and triggering as a dependent launch does) and
    the merge kernel; a kernel compiled for a programmatic dependent launch is refused (PyTorch's launcher has
    no launch attributes: Triton's path launches it)."""
    from tests.helpers import fresh_json

    reports = fresh_json(_STATIC_ABI, timeout=600)
    for r in reports[:3]:
        assert r["types"] is not None
        assert [_PTX[t] for t in r["types"]] == r["params"]
        assert r["kept"] + r["scratch"] == len(r["params"]) and r["kept"] < r["names"]  # constexprs left out
    plain, pdl = reports[3:]
    assert plain["types"] is not None and [_PTX[t] for t in plain["types"]] == plain["params"]
    assert pdl["types"] is None


def test_static_launch_refuses_what_it_cannot_launch_as_triton_would():
    """The launches PyTorch's launcher would make differently from Triton's are refused, read off the compiled
    kernel's metadata and source (made-up kernels here): a programmatic dependent or cooperative launch, a
    cluster, scratch memory, host-side TMA descriptors, a parameter type without a letter, a constant inside a
    tuple argument; and where the kernel is one it takes, ints Triton specialised into constants are not
    parameters."""
    from types import SimpleNamespace

    from attnlab.gpu.launch import static_arg_types

    def compiled(signature, constants=None, **meta):
        md = dict(num_warps=4, shared=0, launch_pdl=False, launch_cooperative_grid=False, num_ctas=1,
                  global_scratch_size=0, profile_scratch_size=0)
        md.update(meta)
        fn = SimpleNamespace(arg_names=list(signature))
        return SimpleNamespace(metadata=SimpleNamespace(**md),
                               src=SimpleNamespace(fn=fn, signature=signature, constants=constants or {}))

    sig = {"X": "*bf16", "n": "i32", "m": "i64", "s": "fp32", "B": "constexpr"}
    assert static_arg_types(compiled(sig)) == ("OilfOO", (0, 1, 2, 3), 2)
    assert static_arg_types(compiled(sig, {(1,): 1, (4,): 16})) == ("OlfOO", (0, 2, 3), 2)  # n == 1: a constant
    assert static_arg_types(compiled(sig, {"B": 16})) == ("OilfOO", (0, 1, 2, 3), 2)  # keyed by name
    for meta in (dict(launch_pdl=True), dict(launch_cooperative_grid=True), dict(num_ctas=2),
                 dict(cluster_dims=(2, 1, 1)), dict(global_scratch_size=128), dict(profile_scratch_size=64),
                 dict(tensordesc_meta=[{"swizzle": 128}]), dict(instrumentation_mode="gsan")):
        assert static_arg_types(compiled(sig, **meta)) is None, meta
    assert static_arg_types(compiled(dict(sig, s="fp16"))) is None  # a half-precision scalar: no letter
    assert static_arg_types(compiled(dict(sig, X="tensordesc<bf16[64, 64]>"))) is None
    assert static_arg_types(compiled(sig, {(0, 1): 3})) is None  # inside a tuple argument
    assert static_arg_types(SimpleNamespace(metadata=None, src=None)) is None


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("B, H, Hkv, L, D", [(1, 32, 8, 256, 128), (3, 28, 4, 20000, 64), (2, 6, 6, 1000, 128)])
def test_static_launches_give_the_bits_of_tritons(B, H, Hkv, L, D, monkeypatch):
    """A kept decode plan launches its split kernel through PyTorch's launcher (where this torch has it) and its
    calls give, bit for bit, what the same calls give with every launch through Triton's (``STATIC_LAUNCH``
    off), eager and in a CUDA graph; the dependent launches, which PyTorch's launcher cannot make, go through
    Triton's C launcher without its Python wrapper under triton 3.6 (``direct_launch``), and give the bits of Triton's
    whole path (``DIRECT_LAUNCH`` off too). Every call on the Python path (the native call, which would make the
    steady ones, off)."""
    import torch

    from attnlab.gpu import decode, decode_plan, launch, native

    monkeypatch.setattr(native, "ENABLED", False)

    if launch._static_launcher() is None:
        pytest.skip("this torch has no static CUDA launcher")
    g = torch.Generator(device="cuda").manual_seed(B * 1000 + L)
    q = torch.randn(B, H, 1, D, device="cuda", dtype=torch.bfloat16, generator=g)
    k, v = (torch.randn(B, Hkv, L, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
    lens = torch.randint(1, L + 1, (B,), device="cuda", dtype=torch.int32, generator=g)

    def calls():
        decode.clear_plans()
        outs = [decode.flash_decode_triton(q, k, v, cache_seqlens=lens) for _ in range(4)]
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured = decode.flash_decode_triton(q, k, v, cache_seqlens=lens)
        graph.replay()
        torch.cuda.synchronize()
        plans = list(decode_plan._PLANS.values())
        return [(o.clone(), s.clone()) for o, s in [*outs, captured]], plans

    saved = launch.STATIC_LAUNCH, launch.DIRECT_LAUNCH
    try:
        launch.STATIC_LAUNCH = launch.DIRECT_LAUNCH = True
        fast, plans = calls()
        launchers = [lc for p in plans for name in ("split", "fused_split", "eager_split", "merge_launch", "pdl_launch")
                     if (lc := getattr(p, name, None)) is not None and lc.compiled is not None]
        assert any(lc.static is not None for lc in launchers)
        pdl = [lc for lc in launchers if lc.options.get("launch_pdl")]
        assert all(lc.static is None for lc in pdl)
        if triton.__version__.startswith("3.6.") and torch.cuda.get_device_capability()[0] >= 9:
            assert all(lc.direct is not None for lc in pdl)  # Triton's C launcher without its wrapper
            # (an eager split kernel reading its K/V for SPLIT_PDL_FROM_US or more at the preset's bandwidth is a
            # dependent launch on the Python path: 28/4 heads over 20,000 keys at B = 3 on an H100, not on an H200)
            nbytes = 2 * B * Hkv * L * D * k.element_size()
            assert pdl or decode_plan.read_us(nbytes, q.device) < decode_plan.SPLIT_PDL_FROM_US
        launch.STATIC_LAUNCH = launch.DIRECT_LAUNCH = False
        slow, plans = calls()
        assert all(getattr(p, name, None) is None or (getattr(p, name).static, getattr(p, name).direct) == (None, None)
                   for p in plans for name in ("split", "fused_split", "eager_split", "merge_launch", "pdl_launch"))
    finally:
        launch.STATIC_LAUNCH, launch.DIRECT_LAUNCH = saved
        decode.clear_plans()
    for (o1, s1), (o2, s2) in zip(fast, slow):
        assert torch.equal(o1, o2) and torch.equal(s1, s2)


def test_the_environment_turns_the_static_launches_off():
    """``ATTNLAB_STATIC_LAUNCH=0`` in a fresh interpreter's environment sets ``STATIC_LAUNCH`` off (every kept
    kernel then launches through Triton's launcher), and ``ATTNLAB_STATIC_KEPT=0`` sets ``STATIC_KEPT`` off (the
    prefill's kept launches through Triton's launcher); any other value, or none, leaves each on."""
    import os
    import subprocess
    import sys

    from tests.helpers import ROOT

    code = "from attnlab.gpu import launch; print(launch.STATIC_LAUNCH, launch.STATIC_KEPT)"
    seen = {}
    for value in ("0", "1", None):
        env = {k: v for k, v in os.environ.items() if k not in ("ATTNLAB_STATIC_LAUNCH", "ATTNLAB_STATIC_KEPT")}
        if value is not None:
            env["ATTNLAB_STATIC_LAUNCH"] = env["ATTNLAB_STATIC_KEPT"] = value
        res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT,
                             timeout=120)
        assert res.returncode == 0, res.stderr[-2000:]
        seen[value] = res.stdout.split()
    assert seen == {"0": ["False", "False"], "1": ["True", "True"], None: ["True", "True"]}


def test_a_static_launcher_that_refuses_its_arguments_hands_the_launch_to_tritons():
    """Where PyTorch's launcher parses other arguments than this module passes (another torch release), it raises
    ``TypeError`` before launching anything: that launch, and every later one of the Launcher, goes through Triton's
    compiled launcher instead."""
    from attnlab.gpu.launch import Launcher

    refused = []

    def static(args, stream):
        refused.append((args, stream))
        raise TypeError("function takes exactly 10 arguments (9 given)")

    launcher = Launcher(_kernel, (2, 1, 1), num_warps=1)
    launcher.compiled, launcher.static = _Compiled(), static
    launcher.launch([1, 7, 9, 0.5, 16, True], 5)
    launcher.launch([2, 7, 9, 0.5, 16, True], 5)
    assert len(refused) == 1 and launcher.static is None
    assert [c[9] for c in launcher.compiled.calls] == [1, 2] and launcher.compiled.calls[0][3] == 5


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("deterministic", [True, False])
@pytest.mark.parametrize("B, H, Hkv, N, D, causal", [(1, 4, 4, 1000, 64, True), (2, 8, 2, 2048, 128, False),
                                                     (1, 6, 6, 777, 128, True)])
def test_prefill_launches_through_pytorchs_launcher_give_the_bits_of_tritons(monkeypatch, B, H, Hkv, N, D, causal,
                                                                             deterministic):
    """With ``STATIC_KEPT`` on, the prefill's kept launches (``launch_kept``: forward, backward, on whichever kernels the
    GPU takes) go through PyTorch's launcher where it can launch them, and a call's output and gradients equal, bit for
    bit, those of the same calls with every launch through Triton's (one of the tests ``STATIC_KEPT`` must pass to be
    on by default). Without ``deterministic`` a backward may sum dQ by atomics in arrival order (the Gluon
    backward's TMA reductions), which no launcher makes reproducible: there the output must still be the same bits, the
    gradients the same to within bfloat16 rounding."""
    import torch

    import attnlab
    from attnlab.gpu import launch, prefill_bwd, prefill_fwd, prefill_gluon_bwd

    if launch._static_launcher() is None:
        pytest.skip("this torch has no static CUDA launcher")
    g = torch.Generator(device="cuda").manual_seed(N * 10 + D)
    q = torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16, generator=g)
    k, v = (torch.randn(B, Hkv, N, D, device="cuda", dtype=torch.bfloat16, generator=g) for _ in range(2))
    dout = torch.randn(B, H, N, D, device="cuda", dtype=torch.bfloat16, generator=g)
    made = []

    def counted(compiled, grid):
        go = static_launch(compiled, grid)
        made.append(go is not None)
        return go

    static_launch = launch.static_launch
    monkeypatch.setattr(launch, "static_launch", counted)

    def calls(static: bool):
        monkeypatch.setattr(launch, "STATIC_KEPT", static)
        for module, plans in ((prefill_fwd, "_PLANS"), (prefill_bwd, "_CALL_PLANS"), (prefill_gluon_bwd, "_PLANS")):
            monkeypatch.setattr(module, plans, {})  # (plans of this setting only)
        made.clear()
        got = []
        for _ in range(3):  # the first call plans and compiles; the later ones launch the kept plans
            qq, kk, vv = (t.clone().requires_grad_() for t in (q, k, v))
            out = attnlab.flash_attention(qq, kk, vv, causal=causal, deterministic=deterministic)
            out.backward(dout)
            got.append([out.detach(), qq.grad, kk.grad, vv.grad])
        torch.cuda.synchronize()
        return got, any(made)

    fast, took = calls(True)
    assert took  # some kept launch went through PyTorch's launcher
    slow, took = calls(False)
    assert not took
    names = ("out", "dq", "dk", "dv")
    for call, (a, b) in enumerate(zip(fast, slow)):
        differ = [n for n, x, y in zip(names, a, b) if not torch.equal(x, y)]
        if deterministic:
            assert not differ, f"call {call}: {differ} differ between the launchers"
            continue
        assert "out" not in differ, f"call {call}: the forward's output differs between the launchers"
        for n, x, y in zip(names[1:], a[1:], b[1:]):
            torch.testing.assert_close(x.float(), y.float(), rtol=2e-2, atol=2e-2 * y.float().abs().max().item(),
                                       msg=lambda m, n=n, call=call: f"call {call}, {n}: {m}")


class _Run36:
    """A stand-in for triton 3.6's launcher: its wrapper's form, no scratch, a C launcher that records its arguments."""

    global_scratch_size = profile_scratch_size = 0
    launch_cooperative_grid, launch_pdl = False, True

    def __init__(self):
        self.calls = []
        self.launch = _Recorder(self.calls)

    def __call__(self, gridX, gridY, gridZ, stream, function, *args):
        raise AssertionError("the wrapper is skipped")


class _Recorder:
    def __init__(self, calls):
        self.calls = calls

    def __call__(self, *a):
        self.calls.append(a)


class _Compiled36(_Compiled):
    def __init__(self, run=None):
        super().__init__()
        self.run = run or _Run36()


def test_direct_launches_call_tritons_c_launcher_as_its_wrapper_would():
    """``direct_launch`` hands triton 3.6's C launcher what its Python wrapper would — the grid, the stream, the
    function, the build's cooperative and dependent-launch flags, no scratch, the packed metadata, no launch metadata
    or hooks, then every argument — and a Launcher whose kernel PyTorch's launcher refuses launches through it."""
    from attnlab.gpu import launch
    from attnlab.gpu.launch import Launcher, direct_launch

    compiled = _Compiled36()
    go = direct_launch(compiled, (3, 2, 1))
    go([1, 7, 9], 5)
    assert compiled.run.calls == [(3, 2, 1, 5, "fn", False, True, None, None, "meta", None, None, None, 1, 7, 9)]
    launcher = Launcher(_kernel, (2, 1, 1), num_warps=1)
    launcher.compiled, launcher.direct = compiled, go
    launcher.launch([4, 7, 9, 0.5, 16, True], 6)
    assert compiled.run.calls[-1][:4] == (3, 2, 1, 6) and compiled.calls == []
    assert launch.DIRECT_LAUNCH


def test_direct_launches_refuse_what_the_wrapper_does_more_for(monkeypatch):
    """None where the wrapper does work of its own or has another form: scratch memory, a C launcher wrapped by a
    Python function (tensor descriptors), a wrapper of another triton's form, no loaded binary, the switch off."""
    from attnlab.gpu import launch
    from attnlab.gpu.launch import direct_launch

    scratch = _Run36()
    scratch.global_scratch_size = 64
    wrapped = _Run36()
    wrapped.launch = lambda *a: None

    class _Run39(_Run36):  # the form of later tritons' wrapper
        def __call__(self, gridX, gridY, gridZ, stream, function, kernel_metadata, launch_metadata,
                     launch_enter_hook, launch_exit_hook, *args):
            raise AssertionError

    for run in (scratch, wrapped, _Run39()):
        assert direct_launch(_Compiled36(run), (1, 1, 1)) is None
    no_binary = _Compiled36()
    no_binary.function = None
    assert direct_launch(no_binary, (1, 1, 1)) is None
    assert direct_launch(_Compiled36(), (1, 1, 1)) is not None
    monkeypatch.setattr(launch, "DIRECT_LAUNCH", False)
    assert direct_launch(_Compiled36(), (1, 1, 1)) is None


def test_a_direct_launch_that_is_refused_hands_the_launch_to_tritons_whole_path():
    """A C launcher that parses other arguments raises ``TypeError`` before launching: that launch and every later one
    of the Launcher go through Triton's whole path."""
    from attnlab.gpu.launch import Launcher

    refused = []

    def direct(args, stream):
        refused.append(args)
        raise TypeError("function takes exactly 14 arguments")

    launcher = Launcher(_kernel, (2, 1, 1), num_warps=1)
    launcher.compiled, launcher.direct = _Compiled(), direct
    launcher.launch([1, 7, 9, 0.5, 16, True], 5)
    launcher.launch([2, 7, 9, 0.5, 16, True], 5)
    assert len(refused) == 1 and launcher.direct is None and [c[9] for c in launcher.compiled.calls] == [1, 2]


def test_the_installed_tritons_launcher_form():
    """triton 3.6's launcher wrapper has the form ``direct_launch`` calls past; triton 3.7 onwards changed it (the
    kernel metadata and hooks named), and there the direct launch stays off."""
    import inspect

    import triton

    from attnlab.gpu import launch

    try:
        from triton.backends.nvidia.driver import CudaLauncher
    except ImportError:
        pytest.skip("this triton has no CUDA backend")
    form = list(inspect.signature(CudaLauncher.__call__).parameters) == launch._DIRECT_FORM
    major, minor = (int(x) for x in triton.__version__.split(".")[:2])
    if (major, minor) == (3, 6):
        assert form
    elif (major, minor) > (3, 6):
        assert not form


def test_the_fast_paths_order(monkeypatch):
    """A Launcher takes PyTorch's launcher where it can, else Triton's C launcher alone (``direct_launch``);
    ``allow_static=False`` takes neither."""
    from attnlab.gpu import launch
    from attnlab.gpu.launch import Launcher

    def static(args, stream):
        raise AssertionError

    def paths(allow_static=True, can_static=True):
        monkeypatch.setattr(launch, "static_launch", lambda compiled, grid: static if can_static else None)
        launcher = Launcher(_kernel, (1, 1, 1), num_warps=1, allow_static=allow_static)
        launcher.compiled = _Compiled36()
        if allow_static:
            launcher._fast_paths()
        return launcher.static is static, launcher.direct is not None

    assert paths() == (True, False)
    assert paths(can_static=False) == (False, True)
    assert paths(allow_static=False) == (False, False)


def test_static_launches_pass_the_binarys_parameters(monkeypatch):
    """``static_launch``: PyTorch's launcher gets the binary's parameters out of the whole argument list — the
    constexprs left out, the two scratch pointers after — with their letters, the grid, warps and shared memory."""
    from types import SimpleNamespace

    from attnlab.gpu import launch

    got = []
    monkeypatch.setattr(launch, "_static_launcher", lambda: lambda *a: got.append(a))
    sig = {"X": "*bf16", "Y": "*fp32", "n": "i32", "B": "constexpr", "m": "i64", "s": "fp32", "C": "constexpr"}
    md = dict(num_warps=4, shared=0, launch_pdl=False, launch_cooperative_grid=False, num_ctas=1,
              global_scratch_size=0, profile_scratch_size=0)
    compiled = SimpleNamespace(metadata=SimpleNamespace(**md), function="fn",
                               src=SimpleNamespace(fn=SimpleNamespace(arg_names=list(sig)), signature=sig, constants={}))
    launch.static_launch(compiled, (2, 3, 1))([10, 20, 5, 16, 7, 0.5, 64], 9)
    assert got == [("fn", 2, 3, 1, 4, 0, "OOilfOO", (10, 20, 5, 7, 0.5, None, None), 9)]
