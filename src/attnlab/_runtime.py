"""Process-wide helpers: one-time warnings, Triton interpreter detection, and the base-2 constants.

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


def warn_once(reason: str, message: str, *, stacklevel: int = 3) -> None:
    """``warnings.warn(message, RuntimeWarning)`` once per process for each distinct ``reason``."""
    if reason in _warned:
        return
    _warned.add(reason)
    warnings.warn(message, RuntimeWarning, stacklevel=stacklevel)


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
