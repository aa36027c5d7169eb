"""One way to make the rich consoles that attnlab prints with.

In a terminal a table fits the window; written to a pipe or a file, rich would assume 80 columns and
cut cells to "4,447…". A number must never be cut, so off a terminal the console is wide enough for
every table attnlab prints (``COLUMNS`` still wins when set).
"""

from __future__ import annotations

import os

WIDE = 200  # columns off a terminal: wider than any table attnlab prints


def make_console(*, stderr: bool = False, **kwargs):
    """A ``rich.console.Console`` that never cuts a table cell when the output is not a terminal."""
    from rich.console import Console

    console = Console(stderr=stderr, **kwargs)
    if "width" not in kwargs and not console.is_terminal and not os.environ.get("COLUMNS"):
        console = Console(stderr=stderr, width=WIDE, **kwargs)
    return console


def print_wrote(console, path) -> None:
    """``wrote <path>`` on ``console``, the path whole whatever the width (never wrapped inside a name, so it can be
    copied) and as written (no rich markup: a path may hold brackets)."""
    console.print(f"wrote {path}", soft_wrap=True, markup=False, highlight=False)
