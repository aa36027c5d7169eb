"""``attnlab tour`` and ``attnlab demo N``."""

from __future__ import annotations

import time


def _tour(args) -> int:
    from rich.console import Console
    from rich.rule import Rule

    from . import DEMOS, available, run_demo

    console = Console()
    ns = available()
    t0 = time.perf_counter()
    for n in ns:
        console.print(Rule(f"[bold]demo {n:02d}[/bold] · {DEMOS[n][1]}"))
        t = time.perf_counter()
        run_demo(n, out_dir=args.out, console=console)
        console.print(f"[dim]demo {n:02d} took {time.perf_counter() - t:.1f} s[/dim]\n")
    console.print(f"[bold]tour done[/bold]: {len(ns)} demos in {time.perf_counter() - t0:.1f} s; plots in {args.out}/")
    return 0


def _demo(args) -> int:
    from rich.console import Console

    from . import run_demo

    run_demo(args.n, out_dir=args.out, console=Console())
    return 0


def register(sub) -> None:
    p = sub.add_parser("tour", help="run every lecture demo in order (trains the tiny model on first use)")
    p.add_argument("--out", default="attnlab-out", help="folder for the plots (default: %(default)s)")
    p.set_defaults(func=_tour)
    p = sub.add_parser("demo", help="run one lecture demo (1-5)")
    p.add_argument("n", type=int, choices=range(1, 6), metavar="N", help="demo number, 1-5")
    p.add_argument("--out", default="attnlab-out", help="folder for the plots (default: %(default)s)")
    p.set_defaults(func=_demo)
