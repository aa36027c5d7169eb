"""The non-causal backward's last wave cut into pieces and its whole programs' build: benchmarks/RESULTS.md's section
"Prefill runs 35 and 36, bwd-block-m runs 16–19", NOTES-prefill v50 and v51, the comment on ``TAIL_PIECES`` and the
sentences of docs/gpu.md and the README on them: each table as its script renders it from the recorded files, each
quoted number computed from them, and the library's switches as the runs left them."""

from __future__ import annotations

import json

import pytest
from tests.helpers import ROOT
from tests.test_results_head_chunks import _run, _span
from tests.test_results_variants import _flat, _notes

DATA = ROOT / "benchmarks" / "data"
SECTION = ("### Prefill runs 35 and 36, bwd-block-m runs 16–19", "### Prefill runs 33 and 34")
FULL = ("full", "full8k", "full16k", "gqa-full")


def _section() -> str:
    results = (ROOT / "benchmarks" / "RESULTS.md").read_text()
    return results[results.index(SECTION[0]):results.index(SECTION[1])]


def _ms(run: int) -> dict:
    rows = json.loads((DATA / f"bwd-block-m-h200-run{run}.json").read_text())["rows"]
    return {(r["row"], r["D"], r["arm"]): r["ms"] for r in rows}


def _pct(values) -> str:
    """A span of fractions as the texts write it: 4.3–6.0, or −0.6 to +0.2 where the sign changes."""
    lo, hi = min(values), max(values)
    if lo < 0 <= hi:
        return f"−{-100 * lo:.1f} to +{100 * hi:.1f}"
    return f"{100 * lo:.1f}–{100 * hi:.1f}"


def _prefill(run: int) -> tuple[list[str], dict]:
    """The report's lines and its main table's rows: {(D, causal, N, pass): (attnlab TFLOP/s, ÷ cudnn median)}."""
    lines = _run(ROOT / "benchmarks" / "prefill.py", "report", DATA / f"prefill-h200-run{run}.json").splitlines()
    rows = {}
    for line in lines:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 14 and cells[0].isdigit():
            head, rest = (cells[:1] + cells[2:5], cells[5:]) if "/" in cells[1] else (cells[:4], cells[4:])
            rows[(int(head[0]), head[1], head[2], head[3])] = (int(rest[0]), float(rest[4].split()[0]))
    return lines, rows


def test_bwd_block_m_tables_and_quotes():
    section = _section()
    for run in (16, 17, 18, 19):
        assert _run(ROOT / "benchmarks" / "bwd_block_m.py", "--report",
                    DATA / f"bwd-block-m-h200-run{run}.json").strip() in section
    text, v50, v51 = _flat(section), _notes("v50"), _notes("v51")
    comment = _flat((ROOT / "src" / "attnlab" / "gpu" / "prefill_gluon_bwd.py").read_text().replace("#", " "))
    r16, r17, r18, r19 = (_ms(n) for n in (16, 17, 18, 19))
    # run 16, one launch: the cut lost at D = 64 on every row, won at D = 128 where it cuts
    lost = [r16[r, 64, "table"] / r16[r, 64, "whole"] for r in FULL]
    assert min(lost) > 1.0 and f"`whole` {_span(lost, '{:.3f}')}× faster than the cut there" in text
    assert f"`table` {_span([1 / x for x in lost])}× `whole` at full, full8k, full16k and gqa-full" in v50
    won = [r16[r, 128, "whole"] / r16[r, 128, "table"] for r in FULL[:3]]
    assert f"model ({_span(won)}×; gqa-full, not cut, {r16['gqa-full', 128, 'whole'] / r16['gqa-full', 128, 'table']:.2f}×" \
           in v50
    # run 17, two launches: the build's gain and the cut's at D = 128, the cut at D = 64
    build = [r17[r, 128, "whole"] / r17[r, 128, "uncutbuild"] - 1 for r in FULL]
    cut128 = [r17[r, 128, "uncutbuild"] / r17[r, 128, "table"] - 1 for r in FULL[:3]]  # (gqa-full: not cut at D = 128)
    cut64 = [r17[r, 64, "uncutbuild"] / r17[r, 64, "table"] - 1 for r in FULL[:3]]
    gqa_cut, gqa_build = (r17["gqa-full", 64, arm] / r17["gqa-full", 64, "whole"] - 1 for arm in ("table", "uncutbuild"))
    assert min(build) > 0 and min(cut128) > 0 and gqa_cut > 0 and gqa_build > 0
    assert f"ran {_pct(build)} % faster than the plain build at D = 128 on all four rows, the cut {_pct(cut128)} %" in text
    assert f"At D = 64 the cut came out {_pct(cut64)} %" in text
    assert f"ran {_pct(build)} % faster than the plain one on all four rows" in v51
    assert f"and the cut added {_pct(cut128)} %. At D = 64 the cut came out {_pct(cut64)} % on full" in v51
    assert f"(the cut {100 * gqa_cut:.1f} % slower, the whole programs' build alone {100 * gqa_build:.1f} %)" in v51
    ascii_ = str.maketrans({"–": "-", "−": "-"})
    assert (f"ran {_pct(build).translate(ascii_)} % faster than the plain build with nothing cut" in comment
            and f"the cut itself {_pct(cut128).translate(ascii_)} % more; at D = 64 the cut came out "
                f"{_pct(cut64).translate(ascii_)} % at 4K-16K, and the GQA row ran {100 * gqa_cut:.1f} % slower cut, "
                f"{100 * gqa_build:.1f} % with the whole programs' build alone" in comment)
    # run 18, as shipped
    shipped = [r18[r, 128, "whole"] / r18[r, 128, "table"] - 1 for r in FULL]
    same = [r18[r, 64, "whole"] / r18[r, 64, "table"] - 1 for r in FULL]
    assert min(shipped) > 0
    assert f"D = 128 {_pct(shipped)} % faster than the plain build; at D = 64 the same kernel in both arms, " \
           f"{_pct(same)} %" in text
    assert f"`table` ran {_pct(shipped)} % faster than `whole` on the four rows" in v51
    assert f"both arms run the plain build, {_pct(same)} %" in v51
    assert f"as shipped: {_pct(shipped).translate(ascii_)} % faster than the plain build at D = 128" in comment
    cost = _flat((ROOT / "docs" / "cost.md").read_text())
    assert f"the cut itself saved {_pct(cut128)} % of the backward at D = 128" in cost
    # run 19: causal calls on the whole programs' build, not taken
    causal = {(r, D): r19[r, D, "table"] / r19[r, D, "limitall"] for r in ("causal", "causal8k", "long", "gqa")
              for D in (64, 128)}
    slower = sum(v < 1 for v in causal.values())
    words = dict(enumerate(("none", "one", "two", "three", "four", "five", "six", "seven", "eight")))
    assert f"ran {_span(causal.values(), '{:.3f}')}× the table's build, slower on {words[slower]} rows of eight" in text
    assert (f"{_span(causal.values(), '{:.3f}')}× the table's build, faster on {words[8 - slower]} rows of eight"
            in v51 and f"slower on {words[slower]}." in v51)
    assert (f"run 19: {_span(causal.values(), '{:.3f}').translate(ascii_)}x the table's build on the causal rows, slower on "
            f"{words[slower]} of eight" in comment)


def test_prefill_runs_35_and_36_tables_and_quotes():
    section, text = _section(), _flat(_section())
    lines35, t35 = _prefill(35)
    lines36, t36 = _prefill(36)
    _, t33 = _prefill(33)
    _, t34 = _prefill(34)
    for lines in (lines35, lines36):
        i = next(i for i, line in enumerate(lines) if line.startswith("| D |"))
        j = next(j for j in range(i, len(lines)) if not lines[j].startswith("|"))
        assert "\n".join(lines[i:j]) in section
        assert next(line for line in lines[j:] if line.startswith("Rounds more than")) in section
    keys = [(128, "no", n, "fwd+bwd") for n in ("4K", "8K", "16K")]
    before, after = [t33[k][0] for k in keys], [t35[k][0] for k in keys]
    gqa_keys = keys[:2]  # (run 34 had no 16K rows)
    g_before, g_after = [t34[k][0] for k in gqa_keys], [t36[k][0] for k in gqa_keys]
    quote = (f"rose from {before[0]}, {before[1]} and {before[2]} TFLOP/s (run 33) to {after[0]}, {after[1]} and "
             f"{after[2]} ({_span([t35[k][1] for k in keys])}× cuDNN, from {_span([t33[k][1] for k in keys])}×), "
             f"the GQA ones from {g_before[0]} and {g_before[1]} (run 34) to {g_after[0]} and {g_after[1]} "
             f"({_span([t36[k][1] for k in keys])}×)")
    assert quote in text
    fwd = [v[1] for t in (t35, t36) for k, v in t.items() if k[3] == "fwd"]
    both = [v[1] for t in (t35, t36) for k, v in t.items() if k[3] == "fwd+bwd"]
    assert min(fwd) > 1.0 and min(both) > 1.0
    assert f"Every median is above cuDNN's in both runs: forward {_span(fwd)}×, forward+backward {_span(both)}×" in text
    v51 = _notes("v51")
    gain = [a / b - 1 for a, b in zip(after, before)]
    g_gain = [a / b - 1 for a, b in zip(g_after, g_before)]
    assert (f"rows at {after[0]}, {after[1]} and {after[2]} TFLOP/s against {before[0]}, {before[1]} and {before[2]} in "
            f"run 33 (+{100 * min(gain):.1f} to +{100 * max(gain):.1f} %), {_span([t35[k][1] for k in keys])}× cuDNN") \
        in v51
    assert f"forward+backward +{100 * min(g_gain):.1f} to +{100 * max(g_gain):.1f} % over run 34 at 4K and 8K" in v51
    for t in (t35, t36):
        f = [v[1] for k, v in t.items() if k[3] == "fwd"]
        b = [v[1] for k, v in t.items() if k[3] == "fwd+bwd"]
        assert f"every median above cuDNN's, forward {_span(f)}×, forward+backward {_span(b)}×" in v51
    nearest = sorted((v[1], k) for t in (t35, t36) for k, v in t.items() if k[3] == "fwd+bwd")[:2]
    assert [k for _, k in nearest] == [(64, "no", "4K", "fwd+bwd"), (128, "yes", "8K", "fwd+bwd")]
    assert t35[64, "no", "4K", "fwd+bwd"][1] == t36[128, "yes", "8K", "fwd+bwd"][1] == 1.02
    docs = _flat((ROOT / "docs" / "gpu.md").read_text())
    assert f"{after[0]}–{after[2]} TFLOP/s ({_span([t35[k][1] for k in keys])}× cuDNN)" in docs


def test_notes_v50_cut_table_is_what_the_host_cuts():
    """NOTES-prefill v50's table of the cut on the benchmark's rows: ``tail_pieces``' (F, R, P), ``tail_split``'s waves
    and the partial gradients' size, for 132 SMs."""
    pytest.importorskip("triton")
    from attnlab.cost import tail_split
    from attnlab.gpu import prefill_gluon_bwd as GB

    v50 = _notes("v50")
    shapes = {"full (4 × 4K)": (4, 4096), "full8k (2 × 8K)": (2, 8192), "full16k (1 × 16K)": (1, 16384)}
    for name, (B, N) in shapes.items():
        for D in (64, 128):
            heads = 2048 // D
            programs, steps = N // 128 * B * heads, N // 64
            F, R, P = GB.tail_pieces(programs, 132, steps, steps, D)
            model = tail_split(programs=programs, sms=132, max_parts=P, overhead=GB.TAIL_PIECE_STEPS / steps)
            label = name if D == 64 else name.split(" ")[0]
            row = (f"| {label} | {D} | {programs:,} | {steps} | ({F}, {R}, {P}) | {model.waves_whole} → "
                   f"{model.waves:.2f} (−{100 * model.saving:.1f} %) | {P * R * 2 * 128 * D * 4 / 2 ** 20:.1f} MB |")
            assert _flat(row) in v50, row
    savings = []
    for B, N in shapes.values():
        for D in (64, 128):
            programs, steps = N // 128 * B * (2048 // D), N // 64
            P = GB.tail_pieces(programs, 132, steps, steps, D)[2]
            savings.append(tail_split(programs=programs, sms=132, max_parts=P, overhead=GB.TAIL_PIECE_STEPS / steps).saving)
    cost = _flat((ROOT / "docs" / "cost.md").read_text())
    assert f"well under the model's {100 * min(savings):.1f}–{100 * max(savings):.1f} %" in cost
    F, R, P = GB.tail_pieces(1024, 132, 256, 64, 64)  # gqa-full at D = 64: 8 K/V heads, 4 query heads each
    assert (F, R, P) == (924, 100, 5) and "| gqa-full (4 × 4K, 32/8) | 64 | 1,024 | 256 | (924, 100, 5) |" in v50
    assert GB.tail_pieces(512, 132, 256, 64, 128) is None and GB.tail_pieces(512, 132, 32, 32, 64) is None
    assert GB.tail_pieces(256, 132, 32, 32, 128) is None


def test_the_switches_as_the_runs_left_them():
    pytest.importorskip("triton")
    from attnlab.gpu import prefill_gluon_bwd as GB

    assert (GB.TAIL_PIECES, GB.TAIL_FROM_D, GB.TAIL_LIMIT_ALL) == (True, 128, False)
    assert (GB.TAIL_PIECE_STEPS, GB.TAIL_MAX_PARTS, GB.TAIL_MAX_MB, GB.TAIL_MIN_SAVING) == (3, 64, 64, 0.01)
