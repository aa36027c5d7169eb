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


def test_recorded_launches_are_kept_with_each_tensor_named_and_launch_again_with_new_ones():
    """``recording`` collects a block's ``launch_kept`` launches; ``KeptLaunch.make`` keeps one only where every
    tensor (and descriptor) argument is named by the caller and is the object named, and only with a compiled
    kernel (never under the interpreter); ``run`` passes each call's tensors as pointers, descriptors rebased
    (``rebased``: a copy over another tensor, the template's tensor untouched), and everything else as recorded."""
    import torch
    from triton.tools.tensor_descriptor import TensorDescriptor

    from attnlab.gpu.launch import KeptLaunch, Launcher, launch_kept, rebased, recording

    dev = "cuda" if torch.cuda.is_available() else "cpu"
    out = torch.zeros(4, dtype=torch.int32, device=dev)
    with recording() as launches:
        launch_kept(_store_args, (1,), dict(OUT=out, a=5, b=7), num_warps=1)
    launch_kept(_store_args, (1,), dict(OUT=out, a=1, b=1), num_warps=1)  # (outside the block: not recorded)
    assert len(launches) == 1 and out.tolist() == [1, 1, 3, 0]
    launcher, args = launches[0]
    assert args[0] is out and args[1:] == [5, 7, 3, None]
    if not out.is_cuda:  # the interpreter compiles nothing: nothing to keep
        assert launcher.compiled is None and KeptLaunch.make(launcher, args, {"OUT": "out"}, {"out": out}) is None
    else:
        kept = KeptLaunch.make(launcher, args, {"OUT": "out"}, {"out": out})
        other = torch.zeros(4, dtype=torch.int32, device=dev)
        kept.run({"out": other}, torch.cuda.current_stream().cuda_stream)
        assert other.tolist() == [5, 7, 3, 0] and out.tolist() == [1, 1, 3, 0]

    class Compiled:  # what a launch hands the compiled kernel's launcher
        function, packed_metadata = "fn", "meta"

        def __init__(self):
            self.calls = []

        def run(self, *a):
            self.calls.append(a)

    fake = Launcher(_kernel, (2, 1, 1), num_warps=1, num_stages=None)
    fake.compiled = Compiled()
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
