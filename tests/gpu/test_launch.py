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
