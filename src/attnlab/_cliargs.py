"""What the ``attnlab`` commands accept: numeric argument types and the one rule for output paths.

Output paths (``--json``, ``--plot``, ``--html``, ``--out``), the same for every command:

* ``-`` means standard output, where a command allows it (``--json -``);
* missing parent folders are created; a path that is an existing folder, or whose folder cannot be
  created, is refused;
* an existing file is never overwritten unless the command was given ``--force``;
* plot folders (``--out DIR``) may exist; the demos replace their own ``demoNN_<what>.png`` there.

Every refusal is a ``ValueError`` naming the option and the path, which the ``attnlab`` frame prints
as one line on stderr with exit status 2.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

STDOUT = "-"
FORCE_HELP = "overwrite an existing output file (without it, attnlab refuses to replace a file)"


def positive_int(text: str) -> int:
    """argparse type: an int >= 1 (argparse prefixes the option's name to the message)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def positive_float(text: str) -> float:
    """argparse type: a finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}")
    return value


def _make_parent(path: Path, option: str) -> None:
    parent = path.parent
    if parent.exists() and not parent.is_dir():
        raise ValueError(f"{option} {path}: {parent} is a file, not a folder")
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ValueError(f"{option} {path}: cannot create the folder {parent} ({e.strerror or e})") from None


def output_file(path: str | Path, *, option: str, force: bool = False, allow_stdout: bool = False) -> Path | None:
    """Check an output file before any work is done; create its missing folders.

    Returns the path, or ``None`` for ``-`` (standard output) when ``allow_stdout``.
    """
    if str(path) == STDOUT:
        if allow_stdout:
            return None
        raise ValueError(f"{option} needs a file name; '-' (standard output) is not possible here")
    p = Path(path).expanduser()
    if str(path) == "" or p.is_dir():
        raise ValueError(f"{option} {path!s}: is a folder, not a file name" if str(path) else f"{option} is empty")
    if p.exists() and not force:
        raise ValueError(f"{option} {p}: the file exists; add --force to overwrite it")
    _make_parent(p, option)
    return p


def write_text(path: Path | None, text: str, *, option: str, force: bool = False) -> str:
    """Write ``text`` to a path from ``output_file`` (``None``: standard output); say where it went.

    Without ``force`` the file is opened in exclusive mode, so a file that appeared after the check
    is not overwritten either.
    """
    if path is None:
        sys.stdout.write(text)
        sys.stdout.flush()
        return "standard output"
    try:
        with open(path, "w" if force else "x", encoding="utf-8") as f:
            f.write(text)
    except FileExistsError:
        raise ValueError(f"{option} {path}: the file exists; add --force to overwrite it") from None
    except OSError as e:
        raise ValueError(f"{option} {path}: cannot write ({e.strerror or e})") from None
    return str(path)


def output_dir(path: str | Path, *, option: str = "--out") -> Path:
    """A folder for plots: created with its parents if missing; refused if it is a file or cannot be made."""
    p = Path(path).expanduser()
    if str(path) == "":
        raise ValueError(f"{option} is empty")
    if p.exists() and not p.is_dir():
        raise ValueError(f"{option} {p}: is a file, not a folder")
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ValueError(f"{option} {p}: cannot create the folder ({e.strerror or e})") from None
    return p
