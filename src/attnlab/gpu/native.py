"""A kept decode plan's eager call made by one C++ function (``native_decode.cpp``), where ``ENABLED``.

A kept plan's call (``decode_plan``) is about 11 µs of host time on an H100's host, of which the launch itself is
4: the rest is Python — the plan's key from four tensors, the two outputs, the launch's arguments, the layers between
``attnlab.flash_decode`` and the plan. Here a plan whose eager calls have reached their steady state (every kernel
compiled, the first calls' pair of kernels run) is recorded as a *program*: its inputs' signature, its outputs'
shapes, and each launch — the compiled kernel's function, grid, warps, shared memory, whether it is a programmatic
dependent launch, and its parameters, the call's pointers as slots. ``attnlab.flash_decode`` (and
``flash_decode_triton``) then hand a call with the defaults (a page table or none) to ``call`` before anything else:
the C++ side checks the tensors against the record, the current device and stream, that no CUDA graph is being
captured and no launch hook is installed, allocates the outputs and launches through the driver; for anything else
it returns None and the call takes the Python path as before.

* ``ENABLED`` (on; ``ATTNLAB_NATIVE_DECODE=0`` in the environment turns it off);
* ``module()``: the compiled module, built with the C++ compiler PyTorch's extensions use, against the driver's
  header that triton ships, into attnlab's cache folder (``native/``, a folder per source, Python and torch); None
  where it cannot be built (a one-time warning says why). The library asks with ``wait=False``: the first such ask
  starts the build (about 20 s) in a process of its own and the calls take the Python path until it is done, so a
  decode loop never stalls on the compiler, and a program that exits meanwhile leaves no half-built module;
* ``launch_spec(launcher, args)``: one launch as the module takes it (``Slot`` marks a per-call pointer);
* ``program(...)`` and ``set_fast(...)``: a plan's program, and which program the public call tries first.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import torch

from .._runtime import NATIVE_DECODE, cache_root, warn_once
from .launch import static_arg_types

ENABLED = os.environ.get("ATTNLAB_NATIVE_DECODE", "1") != "0"
NAME = "attnlab_native_decode"
SOURCE = Path(__file__).with_name("native_decode.cpp")


class Slot(int):
    """A per-call pointer among a launch's arguments: 0 q, 1 k, 2 v, 3 the lengths, 4 out, 5 lse, 6 the page table."""


Q, K, V, LENS, OUT, LSE, TABLE = (Slot(i) for i in range(7))

_MODULE: list = []  # [the module, or None where it could not be built], built once
_BUILDER: list = []  # [the background build's process], while one runs


def build_dir() -> Path:
    """Where the module is built: attnlab's cache folder, one folder per source, Python and torch version (so a
    module found there was built from this source)."""
    digest = hashlib.sha1(SOURCE.read_bytes()).hexdigest()[:10]
    tag = f"py{sys.version_info[0]}{sys.version_info[1]}-torch{torch.__version__}-{digest}"
    return cache_root() / "native" / f"{NAME}-{tag}"


def driver_include() -> Path | None:
    """The folder of the CUDA driver's header (``cuda.h``) that triton ships with its NVIDIA backend, or None."""
    try:
        import triton
    except ImportError:
        return None
    path = Path(triton.__file__).parent / "backends" / "nvidia" / "include"
    return path if (path / "cuda.h").is_file() else None


def module(wait: bool = True):
    """The compiled module (built at the first call, then loaded from ``build_dir()``), or None where it cannot be
    built here: no triton (whose driver header it compiles against), no C++ compiler, no ninja. ``wait=False``:
    the module if it can be had without compiling; else None, the build started in a process of its own (or still
    running), and a later ask takes the module once that process has finished."""
    if _MODULE:
        return _MODULE[0]
    if wait:
        if _BUILDER:
            _BUILDER.pop().wait()
        _MODULE.append(_build())
        return _MODULE[0]
    if _BUILDER:
        if _BUILDER[0].poll() is None:
            return None
        proc = _BUILDER.pop()
        if proc.returncode != 0:  # (its own run of _build warned in its log; say it here, once)
            _MODULE.append(None)
            warn_once("native-decode", "attnlab: the native decode call could not be built (see "
                                       f"{build_dir() / 'build.log'}); calls take the Python path")
            return None
    elif not (build_dir() / f"{NAME}.so").is_file() and driver_include() is not None:
        try:
            _BUILDER.append(_start_build())
        except OSError as e:  # (a cache folder it cannot write, no interpreter to start: never the user's call)
            _MODULE.append(None)
            warn_once("native-decode", f"attnlab: the native decode call could not be built ({e}); calls take the "
                                       "Python path")
        return None
    _MODULE.append(_build())  # (built: loading it takes no compiler)
    return _MODULE[0]


def _start_build() -> subprocess.Popen:
    """The build in a Python process of its own (its output into ``build_dir()/build.log``): it outlives its parent,
    so a program that exits while it runs leaves no half-built module behind."""
    where = build_dir()
    where.mkdir(parents=True, exist_ok=True)
    package_parent = str(Path(__file__).resolve().parents[2])
    code = (f"import sys; sys.path.insert(0, {package_parent!r}); from attnlab.gpu import native; "
            "raise SystemExit(0 if native.module() is not None else 1)")
    with open(where / "build.log", "w") as log:
        return subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.DEVNULL, stdout=log,
                                stderr=subprocess.STDOUT, start_new_session=True)


def _build():
    include = driver_include()
    if include is None:
        warn_once("native-decode", "attnlab: the native decode call needs triton's CUDA driver header "
                                   "(triton/backends/nvidia/include/cuda.h); calls take the Python path")
        return None
    try:
        from torch.utils.cpp_extension import load

        where = build_dir()
        where.mkdir(parents=True, exist_ok=True)
        return load(name=NAME, sources=[str(SOURCE)], extra_include_paths=[str(include)], extra_cflags=["-O2"],
                    extra_ldflags=["-ldl"], build_directory=str(where), verbose=False)
    except Exception as e:  # (no compiler, no ninja, a header this torch lacks: the Python path)
        first = (str(e).strip().splitlines() or [""])[0][:200]
        warn_once("native-decode", f"attnlab: the native decode call could not be built ({type(e).__name__}: "
                                   f"{first}); calls take the Python path")
        return None


def launch_spec(launcher, args: list) -> tuple | None:
    """``launcher``'s kept compiled kernel launched on ``args`` (every parameter of the kernel, constexprs included,
    pointers as ints or ``Slot``s) as ``module().program`` takes a launch: (function, grid, warps, shared memory,
    programmatic dependent, params), each param (type letter, constant or None, slot or -1), the binary's parameters
    only (``launch.static_arg_types``) and its trailing scratch pointers null. None where the kernel is not compiled
    or its launch is not one the module makes (cooperative, a cluster, scratch memory, host TMA descriptors)."""
    compiled = getattr(launcher, "compiled", None)
    if compiled is None or getattr(compiled, "function", None) is None:
        return None
    how = static_arg_types(compiled, allow_pdl=True)
    if how is None:
        return None
    letters, keep, scratch = how
    params = []
    for letter, i in zip(letters, keep):
        a = args[i]
        if isinstance(a, Slot):
            params.append(("O", None, int(a)))
        elif letter == "O" and not isinstance(a, int):
            return None  # (a tensor or descriptor the plan did not give as a pointer)
        else:
            params.append((letter, a, -1))
    params += [("O", None, -1)] * scratch
    grid = tuple(launcher.grid) + (1,) * (3 - len(launcher.grid))
    md = compiled.metadata
    return (int(compiled.function), grid, int(md.num_warps), int(md.shared), bool(getattr(md, "launch_pdl", False)),
            tuple(params))


def program(q, k_cache, v_cache, cache_seqlens, out, lse, *, block_table=None, device: int, stream: int,
            launches: list, stream_fn=None, hooks_fn=None, dry: bool = False):
    """A program of one steady call (``module().program``), or None where the module is not built or, for a GPU
    program, where the driver's list of a kernel's parameters (``cuFuncGetParamInfo``: their number and sizes) is not
    the launch's description (a one-time warning says so). ``stream_fn``:
    the current raw stream of a device (default: PyTorch's raw getter); ``hooks_fn``: whether a launch hook is
    installed (default ``launch.hooks_set``)."""
    mod = module()
    if stream_fn is None:
        stream_fn = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        if stream_fn is None and dry:
            stream_fn = int  # (a dry program asks no stream)
    if mod is None or stream_fn is None:
        return None
    if hooks_fn is None:
        from .launch import hooks_set as hooks_fn
    try:
        return mod.program(q, k_cache, v_cache, cache_seqlens, block_table, out, lse, device, stream, launches,
                           stream_fn, hooks_fn, dry)
    except (RuntimeError, ValueError, TypeError) as e:  # (the driver's list of a kernel's parameters disagrees, or
        # a description it cannot take: a user's call never fails for a program it did not ask for)
        if dry:
            raise
        warn_once("native-decode-program", f"attnlab: no native decode call for this plan ({e}); its calls take "
                                           "the Python path")
        return None


def set_fast(plan) -> None:
    """Make ``plan``'s program (``plan.native``) the one the public call tries first; None: none. The plan is kept
    with it: the program launches into the plan's buffers."""
    NATIVE_DECODE[0] = (module().call, plan.native, plan) if plan is not None and plan.native else None


__all__ = ["ENABLED", "LENS", "LSE", "K", "OUT", "Q", "Slot", "TABLE", "V", "build_dir", "driver_include", "launch_spec",
           "module", "program", "set_fast"]
