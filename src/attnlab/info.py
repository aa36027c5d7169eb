"""``attnlab info``: what this installation has (versions, device, optional parts, the demos of the
lecture's code 01–05 it can run). Not a lecture section: the facts a bug report needs."""

from __future__ import annotations


def info() -> dict:
    """Versions and capabilities, as a dict."""
    import importlib.util

    from . import __version__
    from .bench import environment

    env = environment()
    env["attnlab"] = __version__
    env["cuda_available"] = __import__("torch").cuda.is_available()
    env["matplotlib"] = importlib.util.find_spec("matplotlib") is not None
    from .demos import available

    env["demos"] = available()
    return env


def _info_cmd(args) -> int:
    from rich.table import Table

    from ._console import make_console

    t = Table(title="attnlab info", show_header=False)
    for k, v in info().items():
        t.add_row(k, str(v))
    make_console().print(t)
    return 0


def register(sub) -> None:
    p = sub.add_parser("info", help="versions, device and optional parts of this installation")
    p.set_defaults(func=_info_cmd)
