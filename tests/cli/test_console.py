"""make_console: off a terminal, a table of wide numbers is printed whole (rich alone would cut it)."""

import io

from rich.console import Console
from rich.table import Table

from attnlab._console import make_console


def _table(cols: int) -> Table:
    t = Table(title="wide")
    for i in range(cols):
        t.add_column(f"column {i}", justify="right")
    t.add_row(*[f"{(i + 1) * 123_456_789:,}" for i in range(cols)])
    return t


def test_rich_alone_cuts_and_make_console_does_not(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    t = _table(9)
    cut = io.StringIO()
    Console(file=cut).print(t)  # 80 columns off a terminal
    assert "…" in cut.getvalue()  # the failure this module exists to prevent

    whole = io.StringIO()
    console = make_console(file=whole)
    assert not console.is_terminal and console.width >= 150
    console.print(t)
    assert "…" not in whole.getvalue()
    for i in range(9):
        assert f"{(i + 1) * 123_456_789:,}" in whole.getvalue()


def test_columns_and_width_still_win(monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    assert make_console(file=io.StringIO()).width == 100
    monkeypatch.delenv("COLUMNS")
    assert make_console(file=io.StringIO(), width=60).width == 60


def test_a_written_path_is_printed_whole(tmp_path, monkeypatch):
    """``print_wrote``: a path longer than the console is one unbroken line, brackets and all (rich alone wraps it
    inside a name and takes ``[x]`` for markup)."""
    from attnlab._console import print_wrote

    monkeypatch.setenv("COLUMNS", "30")
    path = tmp_path / "a [x] folder" / ("deep" * 10) / "result.json"
    plain = io.StringIO()
    Console(file=plain).print(f"wrote {path}")
    assert f"wrote {path}" not in plain.getvalue()  # what this helper prevents
    out = io.StringIO()
    print_wrote(make_console(file=out), path)
    assert out.getvalue() == f"wrote {path}\n"


def test_the_cli_prints_a_long_json_path_whole(tmp_path):
    """``attnlab simulate --json`` under a narrow ``COLUMNS``: the path it names is the path it wrote, on one line."""
    import os
    import subprocess
    import sys

    path = tmp_path / ("long-folder-name-" * 6) / "sim.json"
    env = dict(os.environ, COLUMNS="40")
    r = subprocess.run([sys.executable, "-I", "-m", "attnlab", "simulate", "--seq", "32", "--head-dim", "16",
                        "--block", "16", "--json", str(path)], capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0, r.stderr
    assert f"wrote {path}\n" in r.stdout and path.is_file()
