"""The lecture's five demo scripts as functions (code 01–05).

Each ``demoNN`` module has ``run(out_dir=None, console=None) -> dict``: it prints its tables with
rich, saves its plots under ``out_dir`` (when given) as ``demoNN_<what>.png`` and returns every number
it printed, so tests can check them against the library that computed them. Demos use attnlab's
public API only. ``run_demo`` is what ``attnlab demo N`` and ``scripts/0N_*.py`` call.
"""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path

DEMOS = {
    1: ("attnlab.demos.demo01", "Attention in a tiny transformer (LikesWorld) and why it is slow"),
    2: ("attnlab.demos.demo02", "Three softmaxes, the merge ⊕ and online attention"),
    3: ("attnlab.demos.demo03", "FlashAttention forward on the GPU simulator"),
    4: ("attnlab.demos.demo04", "Backward pass with recomputation"),
    5: ("attnlab.demos.demo05", "Inference: KV cache, prefill vs decode, Flash-Decoding"),
}


def available() -> list[int]:
    """Numbers of the demos that exist in this installation."""
    out = []
    for n, (mod, _) in DEMOS.items():
        if importlib.util.find_spec(mod) is not None:
            out.append(n)
    return out


def run_demo(n: int, *, out_dir: str | Path | None = "attnlab-out", console=None) -> dict:
    """Run demo ``n`` (1–5); return the numbers it printed.

    ``out_dir``: folder for the plots (created if missing; ``None``: no plots). ``console``: where
    the tables go (default: ``make_console()``, which never cuts a number off a terminal).
    """
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"demo must be an int, one of {sorted(DEMOS)}, got {n!r} ({type(n).__name__})")
    if n not in DEMOS:
        raise ValueError(f"demo must be one of {sorted(DEMOS)}, got {n!r}")
    if n not in available():
        raise ValueError(f"demo {n} is not part of this version of attnlab")
    if out_dir is not None:
        from .._cliargs import output_dir

        out_dir = output_dir(out_dir)
    if console is None:
        from .._console import make_console

        console = make_console()
    module = importlib.import_module(DEMOS[n][0])
    return module.run(out_dir=out_dir, console=console)
