"""Decode-host runs 62 and 63 (an H200): the native decode call's first GPU run — its knob row beside the kept call's
Python path (run 62) and every row through it (run 63). NOTES-decode's "v39 measured" and benchmarks/RESULTS.md's
section, every number they quote computed from the recorded files."""

from __future__ import annotations

import json

from tests.helpers import ROOT, flat, load_script, notes_section, results_section

DATA = ROOT / "benchmarks" / "data"
dh = load_script("benchmarks/decode_host.py")
SECTION = "### Decode-host runs 62 and 63, on an H200: the kept call in C++"
SHORT = [(1, 64, 8, 8192, 128), (1, 28, 4, 20000, 128)]  # batch 1, a graph above 10 µs, a read under 13 µs
LONG = [(1, 32, 8, 32768, 64), (1, 32, 8, 32768, 128)]


def run(n: int) -> dict:
    return json.loads((DATA / f"decode-host-h200-run{n}.json").read_text())


def host(n: int) -> dict:
    return {r["call"]: r["host_us"] for r in run(n)["host"]}


def speed(n: int, shape) -> dict:
    (row,) = [r for r in run(n)["speed"] if (r["B"], r["H"], r["Hkv"], r["L"], r["D"]) == shape
              and r["provider"] == "attnlab"]
    return row


def host_table() -> list[str]:
    """The host rows of both runs side by side (µs per call, each row's best round)."""
    a, b = host(62), host(63)
    lines = ["| call | run 62: the Python path, the native call a knob row | run 63: every row through it (`--native`) |",
             "|---|---|---|"]
    for name in a:
        lines.append(f"| {name.strip()} | {a[name]:.1f} | {b[name]:.1f} |" if name in b else
                     f"| {name.strip()} | {a[name]:.1f} | — |")
    return lines


def speed_table() -> list[str]:
    lines = ["| B | H/Hkv | L | D | graph µs | run 62 eager/graph | run 63 eager/graph | run 63 host µs/call in the "
             "eager loop | host/graph |", "|---|---|---|---|---|---|---|---|---|"]
    for shape in [*LONG, *SHORT, (8, 32, 8, 32768, 128)]:
        a, b = speed(62, shape), speed(63, shape)
        B, H, Hkv, L, D = shape
        lines.append(f"| {B} | {H}/{Hkv} | {L} | {D} | {b['graph_us']:.1f} | {a['eager_over_graph']:.2f} | "
                     f"{b['eager_over_graph']:.2f} | {b['loop_host_us']:.1f} | "
                     f"{b['loop_host_us'] / b['graph_us']:.2f} |")
    return lines


def test_the_runs_are_what_the_section_says():
    for n, native in ((62, False), (63, True)):
        r = run(n)
        assert (r["gpu"], r["torch"], r["triton"], r["date"]) == ("NVIDIA H200", "2.11.0+cu130", "3.6.0", "2026-12-05")
        assert r["native"] is native
    assert dh.NATIVE_ROW in host(62) and dh.NATIVE_ROW not in host(63)


def test_the_results_section_holds_the_runs_tables():
    text = results_section(SECTION)
    for line in [*host_table(), *speed_table()]:
        assert line in text, line
    worst = max(abs(speed(63, s)["eager_over_graph"] - 1) for s in [*LONG, (8, 32, 8, 32768, 128)])
    assert worst < 0.01 and "every eager call at 32K within 1 % of its graph" in flat(text)
    over = sorted(round((speed(63, s)["eager_over_graph"] - 1) * 100) for s in SHORT)
    assert f"remaining {over[0]}–{over[1]} % over the graph" in flat(text)
    a = host(62)
    assert a[dh.NATIVE_ROW] < 0.6 * a[dh.KEPT_ROW] and "halves the kept call's host time" in flat(text)


def test_the_notes_quote_the_runs():
    a, b = host(62), host(63)
    notes = notes_section("NOTES-decode.md", "### v39 measured")
    kept, empty, nat = a[dh.KEPT_ROW], a[dh.EMPTY_ROW], a[dh.NATIVE_ROW]
    assert nat < empty
    quotes = [f"The kept call {kept:.1f} µs, the empty one-argument launch {empty:.1f} µs",
              f"the native call's row {nat:.1f} µs: {nat / kept:.2f}× the kept call",
              f"GPU time in a graph is {run(62)['tiny_gpu_us']:.1f} µs, so the {nat:.1f}",
              f"The kept call {b[dh.KEPT_ROW]:.1f} µs."]
    d64, d128 = (speed(63, s) for s in LONG)
    quotes.append(f"Eager D = 64 at 32K {d64['eager_over_graph']:.2f}× its graph ({d64['eager_us']:.1f} against "
                  f"{d64['graph_us']:.1f} µs; predicted within 2 %: met), D = 128 at 32K {d128['eager_over_graph']:.2f}×")
    s8, s20 = (speed(63, s) for s in SHORT)
    p8, p20 = (speed(62, s) for s in SHORT)
    quotes.append(f"64/8 heads over 8K {s8['eager_over_graph']:.2f}× and 28/4 over 20,000 {s20['eager_over_graph']:.2f}×"
                  f" their graphs (predicted within 10 %: missed), against {p8['eager_over_graph']:.2f}× and "
                  f"{p20['eager_over_graph']:.2f}× without it in run 62")
    loops = sorted(r["loop_host_us"] for r in (s8, s20))
    quotes.append(f"({loops[0]:.1f}–{loops[1]:.1f} µs) is the graph's ({s8['loop_host_us'] / s8['graph_us']:.2f}× and "
                  f"{s20['loop_host_us'] / s20['graph_us']:.2f}×)")
    reads = [speed(63, s)["roofline_ms"] * 1e3 for s in SHORT]
    quotes.append(f"their reads, {reads[0]:.1f} and {reads[1]:.1f} µs at the H200 preset's bandwidth")
    for q in quotes:
        assert flat(q) in notes, q


def test_the_decode_doc_quotes_the_runs():
    from tests.helpers import doc_text

    a = host(62)
    before = sorted(speed(62, s)["eager_over_graph"] for s in SHORT)
    after = sorted(speed(63, s)["eager_over_graph"] for s in SHORT)
    quote = (f"it took the kept call's host time from {a[dh.KEPT_ROW]:.1f} to {a[dh.NATIVE_ROW]:.1f} µs, below an empty "
             f"Triton launch, and eager calls at B = 1 over 8K–20K keys from {before[0]:.1f}–{before[1]:.1f}× their "
             f"CUDA graph's time to {after[0]:.2f}–{after[1]:.2f}×")
    assert a[dh.NATIVE_ROW] < a[dh.EMPTY_ROW] and flat(quote) in doc_text("docs/decode.md")


def test_the_readme_on_the_python_paths_kept_call():
    """Beside the README's H200 standing (tests/test_results_run66.py): the Python path's kept call (run 62, and runs
    57 and 58 on slower hosts)."""
    card = load_script("benchmarks/scorecard.py")
    readme = flat((ROOT / "README.md").read_text())
    old = {f"decode-host-h200-run{n}.json": json.loads((DATA / f"decode-host-h200-run{n}.json").read_text())
           for n in (57, 58)}
    (host_line,) = [x for x in card.standing_markdown(*card.standing({}, old)).splitlines()
                    if x.startswith("| a decode call's host time")]
    was = host_line.split(" | ")[2].split(" µs")[0]
    assert float(was.split("–")[0]) > 20  # (each run over the bar)
    assert (f"with kept calls on the Python path (run 62), the kept call took {host(62)[dh.KEPT_ROW]:.1f} µs; on the "
            f"slower, unsteady hosts of decode-host runs 57 and 58 it took {was} µs and missed the 20 µs bar") in readme
