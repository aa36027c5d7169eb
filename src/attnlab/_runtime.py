"""Process-wide helpers: one-time warnings, Triton interpreter detection (and whether the interpreter can run here),
and the base-2 constants.

Kernels (blockwise PyTorch and Triton alike) keep scores in base 2 so that ``exp2`` — cheaper than
``exp`` — does the exponentials: e^x = 2^(x·log2 e). ``LOG2E`` and ``LN2`` are defined here once.
"""

from __future__ import annotations

import functools
import os
import warnings

LOG2E = 1.4426950408889634  # log2(e) = 1 / ln 2
LN2 = 0.6931471805599453  # ln 2 = 1 / log2(e)

_warned: set[str] = set()

# (call, program, plan) of the native decode call that ``attnlab.flash_decode`` (and ``flash_decode_triton``) try
# first, or None: ``attnlab.gpu.native`` sets it where it is on (the default; ATTNLAB_NATIVE_DECODE=0 turns it off),
# ``clear_plans`` empties it
NATIVE_DECODE: list = [None]


def warn_once(reason: str, message: str, *, stacklevel: int = 3) -> None:
    """``warnings.warn(message, RuntimeWarning)`` once per process for each distinct ``reason``."""
    if reason in _warned:
        return
    _warned.add(reason)
    warnings.warn(message, RuntimeWarning, stacklevel=stacklevel)


def cache_root():
    """attnlab's cache folder (not created here): ``$ATTNLAB_CACHE`` if set, else ``$XDG_CACHE_HOME/attnlab``, else
    ``~/.cache/attnlab``. Trained checkpoints and built native modules live under it."""
    from pathlib import Path

    env = os.environ.get("ATTNLAB_CACHE")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "attnlab"


def interpret_mode() -> bool:
    """True when Triton runs kernels in its CPU interpreter: ``TRITON_INTERPRET`` is 1, true, yes or on
    (any case), as Triton itself reads the variable. Read at call time, so tests may set it late."""
    return os.environ.get("TRITON_INTERPRET", "").strip().lower() in ("1", "true", "yes", "on")


@functools.cache
def triton_available() -> bool:
    """True when triton (the ``gpu`` extra) can be imported."""
    try:
        import triton  # noqa: F401
        import triton.language  # noqa: F401
    except ImportError:
        return False
    return True


@functools.cache
def interpreter_problem() -> str | None:
    """Why Triton's CPU interpreter cannot run the kernels in this environment, or None where it can (or where
    triton is not installed: the caller says so). Triton's interpreter up to 3.6 turns a one-element scalar into a
    Python int with ``int(array)``, which numpy 2.4 refuses for arrays of one dimension; every loop over key blocks
    then fails deep inside the interpreter. Newer interpreters squeeze the array first."""
    if not triton_available():
        return None
    import inspect

    import triton
    from triton.runtime import interpreter

    try:
        source = inspect.getsource(interpreter)
    except (OSError, TypeError):
        return None
    return _interpreter_source_problem(source, triton.__version__)


def _interpreter_source_problem(source: str, version: str) -> str | None:
    """``interpreter_problem`` for an interpreter of this source and triton version, under the numpy installed."""
    import numpy

    if "int(self.handle.data))" not in source:
        return None
    try:
        int(numpy.array([1]))
    except TypeError:
        return (f"the CPU interpreter of triton {version} under numpy {numpy.__version__} (it converts one-element "
                f"arrays with int(), which numpy 2.4 refuses: use numpy < 2.4, or a newer triton)")
    return None
