"""The tour as one web page (``attnlab tour --html FILE``): every table and plot of code 01–05, in
lecture order, for readers who would rather look than read a terminal.

The tour prints to a recording rich console; after each demo, ``section`` takes what the demo printed
(exported by rich as HTML with inline styles) and the PNGs it wrote, and ``page`` puts the sections
together. The PNGs are embedded as base64 ``data:`` URIs, so the page is one self-contained file that
can be mailed or moved without its folder.
"""

from __future__ import annotations

import base64
import html
from dataclasses import dataclass, field
from pathlib import Path

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

# rich fills {code}, {foreground} and {background}; the rest of the page is ours
_CODE_FORMAT = '<pre class="console" style="color:{foreground};background-color:{background}"><code>{code}</code></pre>'

_CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5em 2em; color: #222; }
nav ol { columns: 2; }
section { margin-top: 2.5em; border-top: 1px solid #ccc; }
pre.console { font-family: ui-monospace, Menlo, Consolas, "Liberation Mono", "DejaVu Sans Mono", monospace; font-size: 13px;
              line-height: 1.25; padding: 0.8em; overflow-x: auto; border: 1px solid #ddd; }
figure { margin: 1em 0; }
figure img { max-width: 100%; height: auto; border: 1px solid #ddd; }
figcaption { font-size: 0.9em; color: #555; }
"""


@dataclass
class Section:
    """One demo's part of the page: its number, title, printed output (HTML) and plots."""

    n: int
    title: str
    console_html: str
    images: list[Path] = field(default_factory=list)

    @property
    def anchor(self) -> str:
        return f"demo{self.n:02d}"


def discard(console) -> None:
    """Forget what the recording console holds so far (e.g. a heading the page renders itself)."""
    console.export_text(clear=True)


def section(console, *, n: int, title: str, images=()) -> Section:
    """What ``console`` recorded since the last call, as demo ``n``'s section; the recording is cleared."""
    return Section(n=n, title=title, console_html=console.export_html(code_format=_CODE_FORMAT, inline_styles=True,
                                                                      clear=True),
                   images=[Path(p) for p in images])


def _img(path: Path) -> str:
    data = path.read_bytes()
    if not data.startswith(PNG_MAGIC):
        raise ValueError(f"plot {path} is not a PNG file")
    uri = "data:image/png;base64," + base64.b64encode(data).decode("ascii")
    name = html.escape(path.name)
    return f'<figure><img src="{uri}" alt="{name}"><figcaption>{name}</figcaption></figure>'


def page(sections: list[Section], *, title: str = "attnlab tour", note: str = "") -> str:
    """The whole page, in the order of ``sections``."""
    from .. import __version__

    toc = "\n".join(f'<li><a href="#{s.anchor}">demo {s.n:02d} · {html.escape(s.title)}</a></li>' for s in sections)
    body = []
    for s in sections:
        figures = "\n".join(_img(p) for p in s.images)
        body.append(f'<section id="{s.anchor}" data-demo="{s.n}">\n<h2>demo {s.n:02d} · {html.escape(s.title)}</h2>\n'
                    f"{s.console_html}\n{figures}\n</section>")
    note_html = f"<p>{html.escape(note)}</p>" if note else ""
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            f'<meta name="generator" content="attnlab {html.escape(__version__)}">\n'
            f"<title>{html.escape(title)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n"
            f"<h1>{html.escape(title)}</h1>\n{note_html}\n<nav><ol>\n{toc}\n</ol></nav>\n"
            + "\n".join(body) + "\n</body>\n</html>\n")
