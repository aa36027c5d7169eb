"""``attnlab tour`` and ``attnlab demo N``: the lecture's code 01–05 from the command line.

Output paths follow the rule of ``attnlab._cliargs``: the plot folder is created if missing, and the
``--html`` page never replaces an existing file without ``--force``. Every path is checked before any
demo runs, so a bad one costs nothing.
"""

from __future__ import annotations

import time
from pathlib import Path

_OUT_HELP = ("folder for the plots, created if missing; the demos replace their own demoNN_<what>.png "
             "files there (default: %(default)s)")


def _pngs(folder: Path) -> dict[Path, int]:
    return {p: p.stat().st_mtime_ns for p in folder.glob("*.png")}


def tour(*, out: str | Path = "attnlab-out", html: str | Path | None = None, force: bool = False,
         console=None) -> dict:
    """Run every demo in lecture order; with ``html``, also write the tour as one web page there.

    Returns ``{"demos": {n: numbers}, "seconds": {n: s}, "plots": {n: [paths]}, "html": path or None}``.
    """
    from rich.rule import Rule

    from .._cliargs import output_dir, output_file, write_text
    from .._console import make_console, print_wrote
    from . import DEMOS, available, page, run_demo

    html_path = output_file(html, option="--html", force=force) if html is not None else None
    out = output_dir(out)
    console = console or make_console(record=html_path is not None)
    ns = available()
    res = {"demos": {}, "seconds": {}, "plots": {}, "html": None}
    sections = []
    t0 = time.perf_counter()
    for n in ns:
        console.print(Rule(f"[bold]demo {n:02d}[/bold] · {DEMOS[n][1]}"))
        if html_path is not None:
            page.discard(console)  # the page has its own heading
        before = _pngs(out)
        t = time.perf_counter()
        res["demos"][n] = run_demo(n, out_dir=out, console=console)
        res["seconds"][n] = time.perf_counter() - t
        res["plots"][n] = sorted(p for p, mtime in _pngs(out).items() if before.get(p) != mtime)
        if html_path is not None:
            sections.append(page.section(console, n=n, title=DEMOS[n][1], images=res["plots"][n]))
        console.print(f"[dim]demo {n:02d} took {res['seconds'][n]:.1f} s[/dim]\n")
    total = time.perf_counter() - t0
    console.print(f"[bold]tour done[/bold]: {len(ns)} demos in {total:.1f} s; plots in {out}/")
    if html_path is not None:
        text = page.page(sections, note=f"{len(ns)} demos in {total:.1f} s; every number on this page was "
                                        "computed by the run that wrote it.")
        res["html"] = write_text(html_path, text, option="--html", force=force)
        print_wrote(console, res["html"])
    return res


def _tour(args) -> int:
    tour(out=args.out, html=args.html, force=args.force)
    return 0


def _demo(args) -> int:
    from . import run_demo

    run_demo(args.n, out_dir=args.out)
    return 0


def register(sub) -> None:
    p = sub.add_parser("tour", help="run every lecture demo in order (trains the tiny model on first use)",
                       description="Run the lecture's code 01-05 in order: tables on the terminal, plots in --out.")
    p.add_argument("--out", default="attnlab-out", metavar="DIR", help=_OUT_HELP)
    p.add_argument("--html", metavar="FILE", default=None,
                   help="also write the whole tour, every table and plot, as one self-contained web page "
                        "(plots embedded); missing folders are created; an existing FILE is kept unless --force")
    p.add_argument("--force", action="store_true", help="overwrite an existing --html FILE")
    p.set_defaults(func=_tour)
    p = sub.add_parser("demo", help="run one lecture demo (1-5)",
                       description="Run one of the lecture's code 01-05: tables on the terminal, plots in --out.")
    p.add_argument("n", type=int, choices=range(1, 6), metavar="N", help="demo number, 1-5")
    p.add_argument("--out", default="attnlab-out", metavar="DIR", help=_OUT_HELP)
    p.set_defaults(func=_demo)
