"""Launching a compiled Triton kernel again without Triton's per-call work (the host side of §8.4).

``kernel[grid](*args)`` on a ``triton.jit`` function binds every argument, computes the
specialisation key (dtype and 16-byte alignment of each pointer, divisibility of each int), looks the
compiled kernel up and only then launches it: tens of µs of Python per call, which at decode sizes
is more than the kernel itself runs. A caller that has already checked its inputs and can say, by a
key of its own, that a call has the same signature as an earlier one can reuse the earlier call's
compiled kernel and launch it directly:

* ``Launcher(kernel, grid, num_warps=, num_stages=)`` — one kernel and grid. Its first call goes
  through ``kernel[grid]`` (compiling if needed) and keeps the compiled kernel; later calls launch
  that compiled kernel with the same positional arguments (every parameter, constexprs included,
  in the kernel's order) on the given stream.
* ``tensor_key(t)`` — what Triton specialises a tensor argument on (and what the checks of a call
  read): shape, strides, dtype, device and whether the address is a multiple of 16.

Under ``TRITON_INTERPRET=1`` there is no compiled kernel: every call goes through ``kernel[grid]``.
The caller's key must determine every argument Triton specialises on; ``tensor_key`` of each tensor
argument together with the scalar arguments themselves does.
"""

from __future__ import annotations

import torch


def tensor_key(t) -> tuple:
    """(shape, strides, dtype, device, 16-byte aligned) of tensor ``t`` (AttributeError if not a tensor)."""
    return (t.shape, t.stride(), t.dtype, t.device, t.data_ptr() % 16 == 0)


def current_stream(device: torch.device) -> int:
    """The raw handle of the current CUDA stream on ``device`` (what a launch is queued on)."""
    return torch.cuda.current_stream(device).cuda_stream


class Launcher:
    """One Triton kernel on one grid, launched first through Triton's JIT and then from its compiled
    kernel directly. ``args`` are all of the kernel's parameters in order, constexprs included."""

    __slots__ = ("kernel", "grid", "options", "runner")

    def __init__(self, kernel, grid: tuple[int, int, int], *, num_warps: int, num_stages: int):
        self.kernel = kernel
        self.grid = grid
        self.options = {"num_warps": num_warps, "num_stages": num_stages}
        self.runner = None

    def __call__(self, args: list, stream: int | None = None) -> None:
        if self.runner is not None:
            self.runner(*args, stream=stream)
            return
        compiled = self.kernel[self.grid](*args, **self.options)
        if compiled is not None:  # the interpreter compiles nothing and returns None
            self.runner = compiled[self.grid]


__all__ = ["Launcher", "current_stream", "tensor_key"]
