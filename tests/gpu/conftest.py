"""Fixtures of the Triton kernel tests (tests/gpu): opt in with
``pytestmark = pytest.mark.usefixtures("interpreter_bfloat16")``."""

import numpy as np
import pytest
import torch


@pytest.fixture(scope="module")
def interpreter_bfloat16():
    """Make Triton's CPU interpreter treat bfloat16 as the GPU does. The interpreter (3.9)
    multiplies bfloat16 tiles as their raw uint16 bit patterns (np.matmul on the storage type),
    and its float32 -> bfloat16 cast truncates instead of rounding to nearest even, which biases
    P just below 1 by up to 2^-8. Here tiles are widened to float32 exactly before the dot, and
    the cast rounds to nearest even, as the tensor cores and cvt.rn do. Only the interpreter is
    touched; GPU runs are unaffected."""
    if torch.cuda.is_available():
        yield
        return
    pytest.importorskip("triton")
    import triton.language as tl
    from triton.runtime import interpreter as interp

    dot, cast = interp.InterpreterBuilder.create_dot, interp.InterpreterBuilder.cast_impl

    def widen(x):
        if x.dtype == tl.bfloat16:
            return interp.TensorHandle((x.data.astype(np.uint32) << 16).view(np.float32), tl.float32)
        return x

    def create_dot(self, a, b, d, *args):
        return dot(self, widen(a), widen(b), d, *args)

    def cast_impl(self, src, dst_type):
        if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16:
            bits = np.ascontiguousarray(src.data, dtype=np.float32).view(np.uint32)
            rounded = ((bits + np.uint32(0x7FFF) + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
            return interp.TensorHandle(np.where(np.isnan(src.data), np.uint16(0x7FC0), rounded), tl.bfloat16)
        return cast(self, src, dst_type)

    interp.InterpreterBuilder.create_dot, interp.InterpreterBuilder.cast_impl = create_dot, cast_impl
    yield
    interp.InterpreterBuilder.create_dot, interp.InterpreterBuilder.cast_impl = dot, cast
