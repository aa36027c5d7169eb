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
  included, in the kernel's order; pointers may be passed as ints) on a given stream, straight through
  PyTorch's C++ launcher where that launches the kernel as Triton would (``static_launch``), else through
  Triton's compiled C launcher without its Python wrapper where the installed triton's wrapper has triton 3.6's
  form (``direct_launch``: programmatic dependent launches, which PyTorch's launcher cannot make), else through
  Triton's whole path — unless a launch hook (a profiler's) is installed, which only Triton's path calls
  (``hooks_set()`` says whether one is).
* ``launch_kept(kernel, grid, kwargs, num_warps=)`` — ``kernel[grid](**kwargs)`` through a ``Launcher``:
  every parameter by name (defaults for the rest), the kept compiled kernel after a specialisation's
  first call (tensor descriptors and None included in the specialisation), through PyTorch's launcher where it
  can, as ``launch`` does, while ``STATIC_KEPT`` is set (the default), else through Triton's. The prefill kernels
  launch so.
* ``tensor_key(t)`` — what Triton specialises a tensor argument on (and what the checks of a call
  read): shape, strides, dtype, device and whether the address is a multiple of 16.
* ``recording()`` and ``KeptLaunch`` — a call's ``launch_kept`` launches, recorded, and kept to be made again
  with other tensors of the same signature: every tensor and tensor-descriptor argument named by the caller
  (a kernel parameter -> a name the caller gives each call's tensor), everything else as recorded. A plan of
  a whole call (``prefill_gluon_bwd``'s) is a list of these.

Under ``TRITON_INTERPRET=1`` there is no compiled kernel: every call goes through ``kernel[grid]``.
The caller's key must determine every argument Triton specialises on; ``tensor_key`` of each tensor
argument together with the scalar arguments themselves does.
"""

from __future__ import annotations

import inspect
import os
import types
from operator import itemgetter

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


def hooks_set() -> bool:
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


_I32, _I64 = 2**31, 2**63
_SHARED: dict = {}  # (kernel, options, device, specialisation) -> a compiled kernel


def _int_spec(a: int) -> tuple:
    """What Triton may specialise an int argument on: equal to 1, divisible by 16, its width."""
    return (a == 1, a % 16 == 0, -_I32 <= a < _I32, -_I64 <= a < _I64)


def _is_descriptor(a) -> bool:
    """A host-side TMA tensor descriptor (Triton's or Gluon's: a base tensor, a block shape)."""
    return hasattr(a, "block_shape") and type(getattr(a, "base", None)) is torch.Tensor


def _specialisation(kernel, args: list) -> tuple | None:
    """What Triton's choice of compiled kernel can depend on, for ``args`` of ``kernel``: constexprs
    by value; ints by whether they equal 1, divide by 16 and fit 32 or 64 bits; floats as floats;
    tensors by dtype and 16-byte alignment; None as None; tensor descriptors by their kind, base dtype,
    block shape, layout and padding. A superset of what Triton specialises on, so equal tuples mean the
    same compiled kernel. None for an argument of another kind."""
    const = _constexprs(kernel)
    key = []
    for a, is_const in zip(args, const):
        t = type(a)
        if is_const:
            key.append((t, a))
        elif t is int:
            key.append(_int_spec(a))
        elif t is float:
            key.append(float)
        elif t is torch.Tensor:
            key.append((a.dtype, a.data_ptr() % 16 == 0))
        elif a is None:
            key.append(None)
        elif _is_descriptor(a):
            key.append((t, a.base.dtype, tuple(a.block_shape), getattr(a, "layout", None),
                        getattr(a, "padding", None)))
        else:
            return None
    return tuple(key)


def same_specialisation(kernel, args: list, other: list) -> bool:
    """Whether two argument lists of ``kernel`` holding the same tensors' kinds (the pointers are not
    compared) specialise alike: ``_specialisation`` of the non-tensor arguments, from the back (the
    lists may leave out the leading pointers)."""
    const = _constexprs(kernel)[-len(args):]
    if len(args) != len(other):
        return False
    for a, b, is_const in zip(args, other, const):
        if a is b or a == b and type(a) is type(b):
            continue
        if is_const or type(a) is not type(b) or type(a) is not int:
            return False
        if _int_spec(a) != _int_spec(b):
            return False
    return True


def int_specs(args) -> tuple:
    """What Triton may specialise each of the int arguments ``args`` on (``_int_spec``), as one key."""
    return tuple(_int_spec(a) for a in args)


_CONSTEXPRS: dict = {}


def _constexprs(kernel) -> tuple[bool, ...]:
    """Which of ``kernel``'s parameters are constexprs (from Triton's parameter list, or under the
    interpreter from the annotations)."""
    flags = _CONSTEXPRS.get(kernel)
    if flags is None:
        params = getattr(kernel, "params", None)
        if params is not None:
            flags = tuple(bool(p.is_constexpr) for p in params)
        else:
            sig = inspect.signature(kernel.fn)
            flags = tuple("constexpr" in str(p.annotation) for p in sig.parameters.values())
        _CONSTEXPRS[kernel] = flags
    return flags


# Launch kept compiled kernels through PyTorch's C++ launcher (``torch._C._StaticCudaLauncher``, TorchInductor's),
# where a kernel is one it launches as Triton would (``static_launch``): one C call converts the arguments and calls
# cuLaunchKernel. Triton's compiled-kernel path runs its launcher's Python first (the scratch allocators, the
# profiling and instrumentation checks) and then its C launcher. False (or ATTNLAB_STATIC_LAUNCH=0 in the
# environment): Triton's path for every launch.
STATIC_LAUNCH = os.environ.get("ATTNLAB_STATIC_LAUNCH", "1") != "0"

# Whether ``launch_kept``'s launches (the prefill's) go through PyTorch's launcher too (kernels it refuses, those
# taking host TMA descriptors among them, keep Triton's path). tests/gpu/test_launch.py holds the prefill's output and
# gradients through it to the bits of the same calls through Triton's launcher, and the whole prefill GPU suite passed
# with it on (static-kept runs 2 and 3, with run 1's reruns). False (or ATTNLAB_STATIC_KEPT=0 in the environment):
# Triton's launcher for the prefill's launches.
STATIC_KEPT = os.environ.get("ATTNLAB_STATIC_KEPT", "1") != "0"

# Triton's scalar types -> the type letters of PyTorch's launcher (pointers: "O", an int or a tensor)
_STATIC_TYPES = {"i1": "b", "i8": "b", "i16": "h", "i32": "i", "i64": "l", "u1": "B", "u8": "B", "u16": "H",
                 "u32": "I", "u64": "K", "fp32": "f", "f32": "f", "fp64": "d"}
_STATIC_FN: list = []  # [PyTorch's launch function, or None where this torch has none], looked up once


def _static_launcher():
    if not _STATIC_FN:
        try:
            from torch._C import _StaticCudaLauncher
            fn = _StaticCudaLauncher._launch_kernel
        except (ImportError, AttributeError):  # a torch without it (a CPU build, an older release)
            fn = None
        _STATIC_FN.append(fn)
    return _STATIC_FN[0]


def static_arg_types(compiled, *, allow_pdl: bool = False) -> tuple[str, tuple[int, ...], int] | None:
    """How PyTorch's launcher takes ``compiled``'s arguments: (the type letters of the parameters the binary
    has, the indices of those parameters among the kernel's own, how many trailing scratch pointers Triton's
    build appends), or None where that launcher cannot launch it as Triton would — a programmatic dependent
    (unless ``allow_pdl``: a launcher of its own that sets the attribute) or cooperative launch, a cluster of CTAs,
    scratch memory, instrumentation, TMA descriptors passed from the host, a parameter type it has no letter for.
    Read off the compiled kernel's source: constexprs (and the arguments Triton specialised into constants, such as
    ints equal to 1) are not parameters of the binary."""
    md = getattr(compiled, "metadata", None)
    src = getattr(compiled, "src", None)
    fn = getattr(src, "fn", None)
    if md is None or fn is None or not isinstance(getattr(src, "signature", None), dict):
        return None
    if (getattr(md, "launch_pdl", False) and not allow_pdl) or getattr(md, "launch_cooperative_grid", False) \
            or getattr(md, "num_ctas", 1) != 1 or tuple(getattr(md, "cluster_dims", None) or (1,)) not in ((1,), (1, 1, 1)) \
            or getattr(md, "tensordesc_meta", None) or getattr(md, "instrumentation_mode", "") \
            or getattr(md, "global_scratch_size", 0) or getattr(md, "profile_scratch_size", 0) \
            or getattr(md, "shared", 0) > 227 * 1024:
        return None
    names = list(fn.arg_names)

    def index(k):
        if isinstance(k, str):
            return names.index(k) if k in names else None
        if isinstance(k, tuple):
            return k[0] if len(k) == 1 and isinstance(k[0], int) else None
        return k if isinstance(k, int) else None

    consts = set()
    for k in getattr(src, "constants", {}) or {}:
        i = index(k)
        if i is None:  # a constant inside a tuple argument: not a flat parameter list
            return None
        consts.add(i)
    types = {}
    for k, ty in src.signature.items():
        i = index(k)
        if i is None or not isinstance(ty, str):
            return None
        types[i] = ty
    if sorted(types) != list(range(len(names))):
        return None
    letters, keep = [], []
    for i in range(len(names)):
        ty = types[i]
        if ty == "constexpr" or i in consts:
            continue
        letter = "O" if ty.startswith("*") else _STATIC_TYPES.get(ty)
        if letter is None:
            return None
        letters.append(letter)
        keep.append(i)
    scratch = sum(hasattr(md, a) for a in ("global_scratch_size", "profile_scratch_size"))
    return "".join(letters) + "O" * scratch, tuple(keep), scratch


def static_launch(compiled, grid: tuple[int, int, int]):
    """A function ``go(args, stream)`` that launches ``compiled`` on ``grid`` through PyTorch's launcher, ``args``
    all of the kernel's parameters as ``Launcher.launch`` takes them — or None (``STATIC_LAUNCH`` off, no such
    launcher in this torch, a kernel ``static_arg_types`` refuses, no loaded binary yet)."""
    fn = _static_launcher() if STATIC_LAUNCH else None
    if fn is None or getattr(compiled, "function", None) is None:
        return None
    how = static_arg_types(compiled)
    if how is None:
        return None
    tys, keep, scratch = how
    function, num_warps, shared = compiled.function, compiled.metadata.num_warps, compiled.metadata.shared
    gx, gy, gz = grid
    tail = (None,) * scratch
    if len(keep) == 1:
        i = keep[0]

        def pick(args):
            return (args[i],)
    else:
        pick = itemgetter(*keep) if keep else (lambda args: ())

    def go(args, stream):
        fn(function, gx, gy, gz, num_warps, shared, tys, pick(args) + tail, stream)

    return go


# Launch kept compiled kernels that PyTorch's launcher refuses (programmatic dependent launches: the decode split
# kernel's eager launches) through Triton's C launcher without its Python wrapper (``direct_launch``), where the
# installed triton's launcher has the form of triton 3.6's. False (or ATTNLAB_DIRECT_LAUNCH=0 in the environment):
# Triton's whole path for them.
DIRECT_LAUNCH = os.environ.get("ATTNLAB_DIRECT_LAUNCH", "1") != "0"

# the parameters of triton 3.6's ``CudaLauncher.__call__``, the wrapper ``direct_launch`` skips
_DIRECT_FORM = ["self", "gridX", "gridY", "gridZ", "stream", "function", "args"]
_FORMS: dict = {}  # the launcher's type -> whether its wrapper has that form


def direct_launch(compiled, grid: tuple[int, int, int]):
    """A function ``go(args, stream)`` that launches ``compiled`` on ``grid`` by calling Triton's compiled C launcher
    (``compiled.run.launch``) with what its Python wrapper would pass — the cooperative and programmatic-dependent
    flags of the build, no scratch, the packed metadata, no launch metadata or hooks — or None (``DIRECT_LAUNCH`` off,
    no loaded binary yet, a wrapper not of triton 3.6's form, a C launcher wrapped for tensor descriptors, a kernel
    that needs scratch memory). The wrapper's own work per launch (two scratch allocators asked for nothing, the
    arguments packed twice) is a few µs of host time where the GPU's time is a few tens."""
    if not DIRECT_LAUNCH or getattr(compiled, "function", None) is None:
        return None
    run = getattr(compiled, "run", None)
    launch = getattr(run, "launch", None)
    if launch is None or isinstance(launch, types.FunctionType) or getattr(run, "global_scratch_size", 1) \
            or getattr(run, "profile_scratch_size", 1):  # (a Python function: the wrapper for tensor descriptors)
        return None
    form = _FORMS.get(type(run))
    if form is None:
        try:
            form = _FORMS[type(run)] = list(inspect.signature(type(run).__call__).parameters) == _DIRECT_FORM
        except (TypeError, ValueError):
            form = _FORMS[type(run)] = False
    if not form:
        return None
    function, metadata = compiled.function, compiled.packed_metadata
    coop, pdl = bool(run.launch_cooperative_grid), bool(run.launch_pdl)
    gx, gy, gz = grid

    def go(args, stream):
        launch(gx, gy, gz, stream, function, coop, pdl, None, None, metadata, None, None, None, *args)

    return go


class Launcher:
    """One Triton kernel on one grid, launched first through Triton's JIT and then from its compiled
    kernel directly. ``args`` are all of the kernel's parameters in order, constexprs included.

    The next launch can skip Triton where a compiled kernel is kept (``compiled``) and no launch hook is
    installed (``hooks_set()``, asked once for all of a call's launchers); ``launch(args, stream)`` then
    takes the pointers as ints (``data_ptr()``) or tensors, and the raw stream handle, and goes through
    PyTorch's C++ launcher where it can (``static``: ``static_launch``; ``allow_static=False`` never), else
    through Triton's: its C launcher alone where ``direct_launch`` takes the kernel (``direct``), else its whole
    path."""

    __slots__ = ("kernel", "grid", "options", "compiled", "static", "direct", "allow_static")

    def __init__(self, kernel, grid: tuple[int, int, int], *, num_warps: int, num_stages: int | None = None,
                 launch_pdl: bool = False, allow_static: bool = True):
        self.kernel = kernel
        self.allow_static = allow_static  # whether ``launch`` may go through PyTorch's launcher (or ``direct_launch``)
        self.grid = grid
        self.options = {"num_warps": num_warps}
        if num_stages is not None:  # (None: the compiler's default)
            self.options["num_stages"] = num_stages
        if launch_pdl:  # a programmatic dependent launch (Hopper): a compile option Triton keeps in the kernel
            self.options["launch_pdl"] = True
        self.compiled = None
        self.static = self.direct = None

    def launch(self, args: list, stream: int) -> None:
        """Launch the kept compiled kernel (``compiled`` set, no launch hook) on ``stream``."""
        if self.static is not None:
            try:
                self.static(args, stream)
                return
            except TypeError:  # a torch whose launcher parses other arguments (nothing launched): Triton's from now on
                self.static = None
        elif self.direct is not None:
            try:
                self.direct(args, stream)
                return
            except TypeError:  # a C launcher that parses other arguments (nothing launched): Triton's whole path
                self.direct = None
        c = self.compiled
        c.run(*self.grid, stream, c.function, c.packed_metadata, None, None, None, *args)

    def _fast_paths(self) -> None:
        """``static`` (PyTorch's launcher) where it can launch the kept compiled kernel, else ``direct`` (Triton's C
        launcher alone) where ``direct_launch`` takes it; the other None. (The C launcher alone first for every launch
        saved 0.1 µs a call: benchmarks/NOTES-decode.md v37.)"""
        self.static = static_launch(self.compiled, self.grid)
        self.direct = None if self.static is not None else direct_launch(self.compiled, self.grid)

    def __call__(self, args: list, stream: int | None = None) -> None:
        """Launch ``args`` (tensors as tensors) — with the compiled kernel of an earlier Launcher of this
        kernel whose arguments had the same specialisation (``_specialisation``), else through Triton's
        JIT (compiling if needed) — and keep the compiled kernel."""
        first = args[0].base if _is_descriptor(args[0]) else args[0]
        on_gpu = isinstance(first, torch.Tensor) and first.is_cuda
        spec = _specialisation(self.kernel, args) if on_gpu else None
        key = None if spec is None else (self.kernel, tuple(self.options.items()), torch.cuda.current_device(), spec)
        if key is not None and key in _SHARED and not hooks_set():
            self.compiled = _SHARED[key]
            if stream is None:
                stream = current_stream(first.device)
            self.launch([a.data_ptr() if type(a) is torch.Tensor else a for a in args], stream)
            if self.static is None and self.direct is None and self.allow_static:  # (the binary is loaded now)
                self._fast_paths()
            return
        compiled = self.kernel[self.grid](*args, **self.options)
        if compiled is not None:  # the interpreter compiles nothing and returns None
            self.compiled = compiled
            self.static = self.direct = None
            if self.allow_static:
                self._fast_paths()
            if key is not None:
                _SHARED[key] = compiled


_PARAMS: dict = {}


_RECORDING: list = []  # the recorders of ``recording()`` blocks open now (innermost last)


class recording:
    """``with recording() as launches:`` — every ``launch_kept`` call made inside appends its ``Launcher`` and
    positional arguments to ``launches``, in launch order."""

    def __enter__(self) -> list:
        self.launches: list = []
        _RECORDING.append(self.launches)
        return self.launches

    def __exit__(self, *exc) -> None:
        _RECORDING.remove(self.launches)


def rebased(desc, base: torch.Tensor):
    """A copy of tensor descriptor ``desc`` over ``base`` (same shape, strides and dtype as its own base, and
    16-byte aligned: the caller's key says so), without the constructor's checks (µs of Python each)."""
    copy = object.__new__(type(desc))
    copy.__dict__.update(desc.__dict__)
    copy.base = base
    return copy


class KeptLaunch:
    """One recorded launch (``recording``) to be made again: its compiled kernel, grid and arguments, with the
    tensors and tensor descriptors in ``sources`` (kernel parameter -> the caller's name for the tensor) taken
    from each call's ``tensors``. ``make`` refuses (None) a launch that had no compiled kernel (the
    interpreter) or passed a tensor or descriptor ``sources`` does not name: its next call would reuse it."""

    __slots__ = ("launcher", "args", "tensor_slots", "desc_slots")

    def __init__(self, launcher: Launcher, args: list, tensor_slots: tuple, desc_slots: tuple):
        self.launcher, self.args = launcher, args
        self.tensor_slots, self.desc_slots = tensor_slots, desc_slots

    @classmethod
    def make(cls, launcher: Launcher, args: list, sources: dict[str, str], named: dict) -> KeptLaunch | None:
        """``named``: the first call's tensors (and descriptors) by the caller's names, each checked to be
        the object the launch passed for its parameter."""
        if launcher.compiled is None:
            return None
        names = launcher.kernel.arg_names
        tensor_slots, desc_slots = [], []
        for i, (pname, a) in enumerate(zip(names, args)):
            src = sources.get(pname)
            if type(a) is torch.Tensor or _is_descriptor(a):
                if src is None or named.get(src) is not a:
                    return None
                (desc_slots if _is_descriptor(a) else tensor_slots).append((i, src))
            elif src is not None and a is not None:
                return None
        kept = list(args)
        for i, _ in tensor_slots + desc_slots:
            kept[i] = None
        return cls(launcher, kept, tuple(tensor_slots), tuple(desc_slots))

    def run(self, tensors: dict, stream: int) -> None:
        """Launch with ``tensors`` (the caller's names -> this call's tensors and descriptors) on ``stream``."""
        args = list(self.args)
        for i, src in self.tensor_slots:
            args[i] = tensors[src].data_ptr()
        for i, src in self.desc_slots:
            args[i] = tensors[src]
        self.launcher.launch(args, stream)


PLANS_KEPT = 64  # signatures a prefill plan cache keeps (a plan holds no tensor: a few KB)


def keep_plan(cache: dict, key, plan) -> None:
    """``cache[key] = plan``, the oldest plan dropped past ``PLANS_KEPT`` (a packed batch's signature changes
    with its lengths: a training run's caches would grow without end)."""
    if len(cache) >= PLANS_KEPT:
        del cache[next(iter(cache))]
    cache[key] = plan


def launch_kept(kernel, grid: tuple, kwargs: dict, *, num_warps: int, num_stages: int | None = None,
                **options) -> None:
    """``kernel[grid](**kwargs, num_warps=num_warps)`` — every parameter by name, those left out taking
    their defaults — through a ``Launcher``: after the first call of a specialisation, the kept compiled
    kernel is launched directly (Triton's binding of a Gluon kernel's forty-odd arguments, nine of them
    tensor descriptors, costs more host time than a short call's GPU time). Positional order from the
    kernel's signature; ``options``: further compile options (``maxnreg``)."""
    params = _PARAMS.get(kernel)
    if params is None:
        sig = inspect.signature(kernel.fn)
        params = _PARAMS[kernel] = tuple((n, p.default) for n, p in sig.parameters.items())
    args = [kwargs[n] if n in kwargs else d for n, d in params]
    if any(a is inspect.Parameter.empty for a in args):
        missing = [n for (n, _), a in zip(params, args) if a is inspect.Parameter.empty]
        raise TypeError(f"launch_kept: no value for {missing}")
    grid = tuple(grid) + (1,) * (3 - len(grid))
    launcher = Launcher(kernel, grid, num_warps=num_warps, num_stages=num_stages, allow_static=STATIC_KEPT)
    launcher.options.update(options)
    launcher(args)
    if _RECORDING:
        _RECORDING[-1].append((launcher, args))


__all__ = ["KeptLaunch", "Launcher", "STATIC_KEPT", "STATIC_LAUNCH", "current_stream", "hooks_set", "int_specs", "keep_plan",
           "launch_kept", "rebased", "recording", "same_specialisation", "static_arg_types", "static_launch",
           "tensor_key"]
