"""``attnlab tour --html`` and ``python scripts/0N_*.py``, on the session's trained model (trained once
by the ``trained_cache`` fixture into a private folder), each in a fresh ``python -I`` process.

The page: one section per demo in lecture order, every image a PNG that decodes (embedded as a data
URI), every plot the tour wrote shown, and no table number cut short in the piped terminal output.
"""

import base64
import re
import time
from html.parser import HTMLParser
from pathlib import Path

import pytest

from attnlab.demos import DEMOS, available

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


class _Page(HTMLParser):
    """The parts of the page the tests look at: sections (with their demo number) and images."""

    def __init__(self):
        super().__init__()
        self.sections: list[int] = []
        self.images: list[tuple[int | None, str, str]] = []  # (section, src, alt)
        self.headings: list[str] = []
        self._in_h2 = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "section":
            self.sections.append(int(a["data-demo"]))
        elif tag == "img":
            self.images.append((self.sections[-1] if self.sections else None, a.get("src", ""), a.get("alt", "")))
        elif tag == "h2":
            self._in_h2 = True
            self.headings.append("")

    def handle_endtag(self, tag):
        if tag == "h2":
            self._in_h2 = False

    def handle_data(self, data):
        if self._in_h2:
            self.headings[-1] += data


def readme_tour_excerpt() -> list[str]:
    """The lines of the README's excerpt of ``attnlab tour``'s output, each as a pattern: its "..." any text, a number
    in e-notation (a float32 rounding error, which moves with the machine's arithmetic) any such number."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    excerpt = readme.split("A few lines of what `attnlab tour` printed", 1)[1].split("```text\n", 1)[1].split("```", 1)[0]
    lines = []
    for line in excerpt.splitlines():
        parts = [r"\d\.\de-\d\d".join(map(re.escape, re.split(r"\d\.\de-\d\d", p.strip()))) for p in line.split("...")]
        lines.append(".*?".join(p for p in parts if p))
    return [line for line in lines if line]


def test_the_readme_tour_excerpt_is_read_whole():
    lines = readme_tour_excerpt()
    assert len(lines) == 10 and lines[0].startswith("test\\ accuracy")
    assert re.search(lines[8], "with vs without the cache: 60/60 generations identical, max logit difference 9.9e-07 "
                               "(float32 rounding)")
    assert not re.search(lines[0], "test accuracy 99.0% on 4,000 answers of 2,000 held-out sequences; random item of "
                                   "the context: 29.2%")


@pytest.fixture
def trained_env(cli_env, trained_cache):
    folder, _ = trained_cache
    return dict(cli_env, ATTNLAB_CACHE=folder)


def test_tour_html_page(run_cli, trained_env, cut_numbers, one_error_line, tmp_path):
    r = run_cli("tour", "--out", "plots", "--html", "pages/tour.html", env=trained_env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert cut_numbers(r.stdout) == [], "a number in a table was cut short with stdout piped"
    page_path = tmp_path / "pages" / "tour.html"
    text = page_path.read_text(encoding="utf-8")
    page = _Page()
    page.feed(text)

    ns = available()
    assert ns == sorted(DEMOS)  # every demo of the lecture is part of this installation
    assert page.sections == ns  # one section each, in lecture order
    for n, heading in zip(ns, page.headings):
        assert heading == f"demo {n:02d} · {DEMOS[n][1]}"
    # every image decodes to a PNG, and every plot the tour wrote is on the page, in its demo's section
    shown = {}
    for n, src, alt in page.images:
        assert src.startswith("data:image/png;base64,"), src[:40]
        data = base64.b64decode(src.split(",", 1)[1], validate=True)
        assert data.startswith(PNG_MAGIC)
        assert data == (tmp_path / "plots" / alt).read_bytes()
        shown[alt] = n
    written = sorted(p.name for p in (tmp_path / "plots").iterdir())
    assert sorted(shown) == written and written
    for name, n in shown.items():  # one naming scheme: demoNN_<what>.png, NN the demo that drew it
        assert re.fullmatch(rf"demo{n:02d}_[a-z0-9_]+\.png", name), name
    # the tables are on the page as text, numbers and all
    assert cut_numbers(re.sub(r"<[^>]+>", "", text)) == []
    assert "test accuracy" in text and "online softmax re-based its sum" in text
    # the README's excerpt of the tour is what the tour prints
    missing = [line for line in readme_tour_excerpt() if not re.search(line, r.stdout)]
    assert missing == [], "README lines the tour did not print"
    # and the README's table of the demos quotes the same run
    acc, base = (float(x) for x in re.search(r"test accuracy ([\d.]+)% on .*? random item of the context: ([\d.]+)%",
                                             r.stdout).groups())
    ratio = re.search(r"ideal cache: standard .*? → ([\d.]+)×", r.stdout).group(1)
    readme = " ".join((Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8").split())
    assert f"LikesWorld: {acc:.0f}% accuracy vs the {base:.0f}% baseline" in readme
    assert f"every count beside its closed form ({ratio}× less HBM traffic)" in readme

    # a second tour must not replace the page without --force; refused before any demo runs
    before = page_path.read_bytes()
    t0 = time.perf_counter()
    line = one_error_line(run_cli("tour", "--out", "plots", "--html", "pages/tour.html", env=trained_env),
                          "attnlab tour")
    assert "--html" in line and "--force" in line
    assert page_path.read_bytes() == before
    print(f"refusal took {time.perf_counter() - t0:.1f} s")


@pytest.mark.parametrize("n", sorted(DEMOS))
def test_script_runs_in_a_fresh_interpreter(run_cli, trained_env, cut_numbers, tmp_path, n):
    scripts = sorted((Path(__file__).resolve().parents[2] / "scripts").glob(f"{n:02d}_*.py"))
    assert len(scripts) == 1, scripts
    t0 = time.perf_counter()
    r = run_cli(script=scripts[0], env=trained_env)
    seconds = time.perf_counter() - t0
    assert r.returncode == 0, r.stderr[-3000:]
    assert cut_numbers(r.stdout) == []
    print(f"python -I {scripts[0].name}: {seconds:.1f} s (the lecture: within 6 s once the model is cached)")
