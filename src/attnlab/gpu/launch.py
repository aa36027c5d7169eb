"""Launching a compiled Triton kernel again without Triton's per-call work (the host side of §8.4).

``kernel[grid](*args)`` on a ``triton.jit`` function binds every argument, computes the
specialisation key (dtype and 16-byte alignment of each pointer, divisibility of each int), looks the
compiled kernel up and only then launches it: tens of µs of Python per call, which at decode sizes
is more than the kernel itself runs. A caller that has already checked its inputs and can say, by a
key of its own, that a call has the same signature as an earlier one can reuse the earlier call's
compiled kernel and launch it directly:

* ``Launcher(kernel, grid, num_warps=, num_stages=)`` — one kernel and grid. Calling it launches
  through ``kernel[grid]`` (compiling if needed) and keeps the compiled kernel; ``launch`` then
  launches that compiled kernel with the same positional arguments (every parameter, constexprs
  included, in the kernel's order; pointers may be passed as ints) straight through its C launcher
  on a given stream — unless a launch hook (a profiler's) is installed, which only Triton's path
  calls (``direct()`` says which).
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
    """The raw handle of the current CUDA stream on ``device`` (what a launch is queued on): the raw
    getter Triton itself uses (a fraction of a µs; ``torch.cuda.current_stream()`` builds a Python
    object, several µs)."""
    index = device.index if device.index is not None else torch.cuda.current_device()
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    return raw(index) if raw is not None else torch.cuda.current_stream(device).cuda_stream


_KNOBS: list = []


def _hooks_set() -> bool:
    """Whether a Triton launch hook (a profiler's) is installed: then launches go through Triton."""
    if not _KNOBS:
        try:
            from triton import knobs
            _KNOBS.append(knobs.runtime)
        except ImportError:  # a triton without knobs has no hook chains
            _KNOBS.append(None)
    runtime = _KNOBS[0]
    if runtime is None:
        return False
    for hook in (runtime.launch_enter_hook, runtime.launch_exit_hook):
        if hook is not None and getattr(hook, "calls", True):
            return True
    return False


class Launcher:
    """One Triton kernel on one grid, launched first through Triton's JIT and then from its compiled
    kernel directly. ``args`` are all of the kernel's parameters in order, constexprs included.

    ``direct()`` says whether the next launch can skip Triton (a compiled kernel is kept and no launch
    hook is installed); ``launch(args, stream)`` then takes the pointers as ints (``data_ptr()``) or
    tensors, and the raw stream handle."""

    __slots__ = ("kernel", "grid", "options", "compiled")

    def __init__(self, kernel, grid: tuple[int, int, int], *, num_warps: int, num_stages: int):
        self.kernel = kernel
        self.grid = grid
        self.options = {"num_warps": num_warps, "num_stages": num_stages}
        self.compiled = None

    def direct(self) -> bool:
        return self.compiled is not None and not _hooks_set()

    def launch(self, args: list, stream: int) -> None:
        """Launch the kept compiled kernel (``direct()`` must be true) on ``stream``."""
        c = self.compiled
        c.run(*self.grid, stream, c.function, c.packed_metadata, None, None, None, *args)

    def __call__(self, args: list, stream: int | None = None) -> None:
        """Launch through Triton's JIT (compiling if needed); keep the compiled kernel."""
        compiled = self.kernel[self.grid](*args, **self.options)
        if compiled is not None:  # the interpreter compiles nothing and returns None
            self.compiled = compiled


__all__ = ["Launcher", "current_stream", "tensor_key"]
