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
