"""Prefill run 45, decode-host runs 57 and 58 and decode-breakdown run 16, on an H200 (the library of prefill run 44 and
decode-host run 56, v38 removed): benchmarks/RESULTS.md's section, the NOTES' measured paragraphs and the README's H200
table, every number they quote computed from the recorded files."""

from __future__ import annotations

import json

from tests.helpers import ROOT, flat, load_script, notes_section, results_section, span

DATA = ROOT / "benchmarks" / "data"
card = load_script("benchmarks/scorecard.py")
SECTION = "### Prefill run 45, decode-host runs 57 and 58 and decode-breakdown run 16, on an H200"
PREFILL = "prefill-h200-run45.json"
D64 = (1, 32, 8, 32768, 64)
HOSTS = (57, 58)


def _run(name: str) -> dict:
    return json.loads((DATA / name).read_text())


def host(run: int) -> dict:
    return _run(f"decode-host-h200-run{run}.json")


def host_rows(run: int) -> dict:
    return {r["call"]: r["host_us"] for r in host(run)["host"]}


def bars(run: int) -> list[dict]:
    return card.scorecard({PREFILL: _run(PREFILL)["rows"]}, host(run))


def bar(run: int, name: str) -> str:
    return next(b["measured"] for b in bars(run) if b["bar"] == name)


def pairs(name: str) -> dict:
    return {(p["D"], p["causal"], p["N"], p["pass_"], p["H"], p["Hkv"]): p
            for p in card.prefill_pairs({name: _run(name)["rows"]})}


def kept(run: int) -> tuple[float, float]:
    return min(card.kept_host_us(host_rows(run))), host(run)["floors"][card.EMPTY_LAUNCH]


def speed(run: int, shape) -> dict:
    return next(r for r in host(run)["speed"]
                if (r["B"], r["H"], r["Hkv"], r["L"], r["D"]) == shape and r["provider"] == "attnlab")


def prefill_text() -> str:
    p, p37 = pairs(PREFILL), pairs("prefill-h200-run37.json")
    fwd = [x["ratio"] for k, x in p.items() if k[3] == "fwd"]
    both = [x["ratio"] for k, x in p.items() if k[3] == "fwd_bwd"]
    assert min(fwd + both) >= 1
    gqa = [k for k in p if k[1] and k[4] != k[5] and k[3] == "fwd_bwd"]
    assert len(gqa) == 6
    return (f"The forward at or above cuDNN on all {len(fwd)} rows ({span(fwd)}×), the forward+backward on all "
            f"{len(both)} ({span(both)}×). The GQA causal forward+backward rows {span([p[k]['ratio'] for k in gqa])}× "
            f"cuDNN, against {span([p37[k]['ratio'] for k in gqa])}× in run 37, the last H200 table before v53's L2 "
            f"chunks. The fastest D = 128 forward {bar(57, 'forward at D = 128 (goal beyond the bar)')}.")


def decode_text() -> str:
    (k57, e57), (k58, e58) = kept(57), kept(58)
    bd = {s["step"]: s["host_us"] for s in _run("decode-breakdown-h200-run16.json")["breakdown"]["steps"]}
    r58 = host_rows(58)
    sdpa = [host_rows(r)["SDPA cudnn"] for r in HOSTS]
    e = [speed(r, D64) for r in HOSTS]
    b1 = "decode: batch 1 at or above cuDNN under CUDA graphs"
    h100 = next(r["graph_us"] for r in _run("decode-host-h100-run56.json")["speed"]
                if (r["B"], r["H"], r["Hkv"], r["L"], r["D"]) == D64 and r["provider"] == "attnlab")
    return (f"A kept call's host time {k57:.1f} and {k58:.1f} µs ({k57 / e57:.2f}× and {k58 / e58:.2f}× an empty "
            f"launch's {e57:.1f} and {e58:.1f}): the host bar missed in both. The host was slow and unsteady: SDPA's "
            f"cuDNN call took {sdpa[0]:.1f} and {sdpa[1]:.1f} µs of host time in the two runs, and in run 58 "
            f"`flash_decode_triton` with its plan kept took {r58['flash_decode_triton (plan kept)']:.1f} µs and, in "
            f"the same rounds, {r58['flash_decode_triton (plan kept), again']:.1f} as the repeat of the same row. "
            f"Decode-breakdown run 16, on the same machine between the two runs (seven interleaved rounds of 1,000 "
            f"calls, the best of each step), put the kept call at {bd['attnlab.flash_decode']:.1f} µs: its key "
            f"{bd['decode.plan_key']:.1f}, its outputs {bd['outputs.take']:.1f}, its launch "
            f"{bd['the split kernel' + chr(39) + 's launch']:.1f}. Eager within 10 % of graphs at 32K: D = 128 "
            f"{bar(57, 'decode: eager within 10 % of CUDA graphs, D = 128').split()[0]} and "
            f"{bar(58, 'decode: eager within 10 % of CUDA graphs, D = 128').split()[0]}; D = 64 "
            f"{e[0]['eager_over_graph']:.2f}× and {e[1]['eager_over_graph']:.2f}×, the loop's host time per call "
            f"{e[0]['loop_host_us']:.1f} and {e[1]['loop_host_us']:.1f} µs against a graph of {e[0]['graph_us']:.1f} "
            f"and {e[1]['graph_us']:.1f}: the host sets the pace, and the H200's graph of {e[1]['graph_us']:.1f} µs leaves it "
            f"less room than the H100's of {h100:.1f} (decode-host run 56). Batch 1 at or above cuDNN under graphs on every shape in both runs, the lowest "
            f"{bar(57, b1).split()[0]} and {bar(58, b1).split()[0]}.")


def sweep_text() -> str:
    rows = [r for r in host(57)["sweep"] if (r["B"], r["H"], r["Hkv"], r["L"], r["D"]) == D64]
    best = {c: min(rows, key=lambda r: r["graph_us"] if r["config"] == c else 1e9) for c in ("small", "large")}
    picked = {c: next(r for r in rows if r["config"] == c and r["picked"]) for c in ("small", "large")}
    return (f"The split sweep (run 57) at D = 64 over 32K: `small` at its best {best['small']['graph_us']:.1f} µs "
            f"({best['small']['splits']} splits), `large` {best['large']['graph_us']:.1f} "
            f"({best['large']['splits']}), within {abs(best['small']['graph_us'] / best['large']['graph_us'] - 1) * 100:.1f} % "
            f"of each other; at the split counts the model picks, `large` {picked['large']['graph_us']:.1f} µs "
            f"({picked['large']['splits']} splits, the library's) and `small` {picked['small']['graph_us']:.1f} "
            f"({picked['small']['splits']}).")


KEPT_ROWS = ("attnlab.flash_decode (plan kept)", "attnlab.flash_decode, window (plan kept)",
             "flash_decode_triton (plan kept)")


def row_spreads(gpu: str, runs) -> dict[int, float]:
    """The slowest of a run's three kept-call rows (the same launches, the public call with and without a window and
    the Triton entry point) over the fastest, by run."""
    out = {}
    for n in runs:
        rows = {r["call"]: r["host_us"] for r in _run(f"decode-host-{gpu}-run{n}.json")["host"]}
        v = [rows[c] for c in KEPT_ROWS]
        out[n] = max(v) / min(v)
    return out


def spread_text() -> str:
    h200, h100 = row_spreads("h200", (*range(25, 37), 57, 58)), row_spreads("h100", range(37, 57))
    wide = [n for n, x in h200.items() if x >= 1.3]
    assert not [n for n, x in h100.items() if x >= 1.3]
    return (f"The three kept-call rows of a run (the public call with and without a window, and the Triton entry "
            f"point: one kept launch each) differ by a host's steadiness: the slowest over the fastest "
            f"{span(list(h100.values()))}× in the H100's decode-host runs 37–56, and {span(list(h200.values()))}× in "
            f"the H200's runs 25–36, 57 and 58, 1.3× or more in runs {', '.join(map(str, wide[:-1]))} and {wide[-1]}.")


def test_the_runs_are_what_the_section_says():
    for d in (_run(PREFILL)["environment"], host(57), host(58), _run("decode-breakdown-h200-run16.json")):
        assert d["gpu"] == "NVIDIA H200" and (d["torch"], d["triton"]) == ("2.11.0+cu130", "3.6.0")
    section = results_section(SECTION)
    assert card.markdown(bars(57)).rstrip("\n") in section
    lines = [x for x in card.markdown(bars(58)).splitlines() if x.startswith("| decode")]
    assert len(lines) == 9 and all(x in section for x in lines)
    text = flat(section)
    for sentence in (prefill_text(), decode_text(), spread_text(), sweep_text()):
        assert flat(sentence) in text, sentence


def test_the_notes_hold_the_runs_against_their_predictions():
    p = flat(notes_section("NOTES-prefill.md", "## The scorecard again, asking for an H200"))
    assert flat(prefill_text()) in p
    m = flat(notes_section("NOTES-decode.md", "## The scorecard again, asking for an H200"))
    assert flat(decode_text()) in m and flat(sweep_text()) in m and flat(spread_text()) in m


def test_the_notes_round_numbers():
    """NOTES-decode's "moved by a third", "about 13 µs at best" and "held to is 22"."""
    (_, e57), (_, e58) = kept(57), kept(58)
    assert 1.25 < e58 / e57 < 1.42
    bd = {s["step"]: s["host_us"] for s in _run("decode-breakdown-h200-run16.json")["breakdown"]["steps"]}
    assert round(bd["attnlab.flash_decode"]) == 13 and round(speed(58, D64)["graph_us"]) == 22
    m = flat(notes_section("NOTES-decode.md", "## The scorecard again, asking for an H200"))
    assert "floors moved by a third between two runs minutes apart" in m
    assert "the call is about 13 µs at best, and the graph it is held to is 22" in m


SECTION59 = "### Decode-host run 59, on an H100: the empty launch timed in the same rounds as the kept call"


def bars59() -> list[dict]:
    return card.scorecard({"prefill-h100-run44.json": _run("prefill-h100-run44.json")["rows"]},
                          _run("decode-host-h100-run59.json"))


def run59_text() -> str:
    r = _run("decode-host-h100-run59.json")
    empty, same = card.empty_launch_us(r)
    assert same and all(b["met"] for b in bars59() if b["bar"].startswith("decode"))
    kept59 = min(card.kept_host_us({h["call"]: h["host_us"] for h in r["host"]}))
    first = {b["bar"]: b["measured"].split()[0] for b in bars59()}
    return (f"The empty one-argument launch took {empty:.1f} µs in the host rows' rounds and "
            f"{r['floors'][card.EMPTY_LAUNCH]:.1f} among the floors before them; the kept call {kept59:.1f} µs, "
            f"{kept59 / empty:.2f}× the empty launch of its own rounds (predicted for the H200: at most 1.45×). Every "
            f"decode bar met: eager within 10 % of graphs at 32K "
            f"{first['decode: eager within 10 % of CUDA graphs, D = 128']} at D = 128 and "
            f"{first['decode: eager within 10 % of CUDA graphs, D = 64']} at D = 64, batch 1 the lowest "
            f"{first['decode: batch 1 at or above cuDNN under CUDA graphs']}. The runs the prediction was for, on an "
            f"H200 (now decode-host runs 60 and 61 and decode-breakdown run 17), wait for one.")


def test_run59():
    r = _run("decode-host-h100-run59.json")
    assert r["gpu"] == "NVIDIA H100 80GB HBM3" and (r["torch"], r["triton"]) == ("2.11.0+cu130", "3.6.0")
    section = results_section(SECTION59)
    lines = [x for x in card.markdown(bars59()).splitlines() if x.startswith("| decode")]
    assert len(lines) == 9 and all(x in section for x in lines)
    assert flat(run59_text()) in flat(section)
    assert flat(run59_text()) in flat(notes_section("NOTES-decode.md", "## The H200's host again"))
