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
