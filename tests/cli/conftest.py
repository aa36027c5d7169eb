"""Fixtures for running ``attnlab`` and the scripts as a user does: a fresh, isolated interpreter.

``python -I`` ignores the user's site folder and every ``PYTHON*`` variable, and does not put the
current folder on ``sys.path``; the environment is built here from scratch, so an import that works
only because something else loaded a module first fails these tests.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# a cell of a rich table (between box-drawing bars) that holds a digit and an ellipsis: a cut number
_BARS = re.compile(r"[│┃║|]")


def _cut_numbers(text: str) -> list[str]:
    """Table cells in ``text`` that hold a number rich cut short ("4,447…"), and any digit run
    directly followed by "…" anywhere."""
    bad = [m.group(0) for m in re.finditer(r"\S*\d[\d,.]*…", text)]
    for line in text.splitlines():
        if not _BARS.search(line):
            continue
        for cell in _BARS.split(line):
            if "…" in cell and re.search(r"\d", cell):
                bad.append(cell.strip())
    return bad


def _one_error_line(r: subprocess.CompletedProcess, prog: str) -> str:
    """Check a refused command: exit 2, nothing on stdout, one line on stderr; return that line."""
    assert r.returncode == 2, (r.returncode, r.stdout[-2000:], r.stderr[-2000:])
    assert r.stdout == "", r.stdout[-2000:]
    assert r.stderr.endswith("\n") and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith(f"{prog}: error: "), r.stderr
    assert "Traceback" not in r.stderr
    return r.stderr.strip()


@pytest.fixture
def cut_numbers():
    """``cut_numbers(text)``: the table cells of ``text`` that hold a number cut short by rich."""
    return _cut_numbers


@pytest.fixture
def one_error_line():
    """``one_error_line(result, "attnlab demo")``: assert a one-line refusal with exit 2; the line."""
    return _one_error_line


@pytest.fixture
def cli_env(tmp_path):
    """The whole environment of a child process: PATH, HOME, a UTF-8 locale, a private model cache,
    matplotlib's file-only backend. Nothing else is inherited."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", str(tmp_path)),
           "LANG": "C.UTF-8", "ATTNLAB_CACHE": str(tmp_path / "cache"), "MPLBACKEND": "Agg"}
    if os.environ.get("CUDA_VISIBLE_DEVICES") is not None:
        env["CUDA_VISIBLE_DEVICES"] = os.environ["CUDA_VISIBLE_DEVICES"]
    return env


@pytest.fixture
def run_cli(tmp_path, cli_env):
    """``run_cli("estimate", "--seq", "64")``: ``python -I -m attnlab ...`` in ``tmp_path`` with stdout
    piped (not a terminal); a CompletedProcess with text output. ``script=`` runs a file instead."""

    def run(*args: str, script: Path | None = None, env: dict | None = None, timeout: float = 300,
            cwd: Path | None = None) -> subprocess.CompletedProcess:
        target = [str(script)] if script is not None else ["-m", "attnlab"]
        return subprocess.run([sys.executable, "-I", *target, *args], cwd=cwd or tmp_path,
                              env=env or cli_env, capture_output=True, text=True, encoding="utf-8",
                              timeout=timeout, stdin=subprocess.DEVNULL)

    return run
