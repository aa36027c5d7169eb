"""The backward numbers benchmarks/RESULTS.md quotes for prefill run 18 are the recorded runs' (the dQ layout
runs 2–4, the prefill run 18 table, the ncu stall ledger, variants runs 10–12): a changed file or a retyped
number fails here."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from tests.helpers import ROOT, fwd_persistent_best, load_script

DATA = ROOT / "benchmarks" / "data"


def _results() -> str:
    return (ROOT / "benchmarks" / "RESULTS.md").read_text()


def _flat(text: str) -> str:
    return " ".join(text.split())


def _best(run: int) -> dict:
    """(shape) -> {layout: best ms over the rounds} of a bwd_dq_layout run."""
    out: dict = {}
    for r in json.loads((DATA / f"bwd-dq-layout-h200-run{run}.json").read_text())["rows"]:
        if "ms" in r:
            by = out.setdefault((r["D"], r["H"], r["Hkv"], r["N"], r["causal"]), {})
            by[r["layout"]] = min(by.get(r["layout"], float("inf")), r["ms"])
    return out


def test_dq_layout_table_and_ranges_are_runs_2_to_4():
    mod = load_script("benchmarks/bwd_dq_layout.py")
    results = _results()
    data = json.loads((DATA / "bwd-dq-layout-h200-run3.json").read_text())
    for line in mod.table(data["rows"])[2:]:
        assert line in results, line
    best = {n: _best(n) for n in (2, 3, 4)}

    def span(pairs, pct):
        v = [a / b for a, b in pairs]
        lo, hi = min(v), max(v)
        return f"{(lo - 1) * 100:.1f}–{(hi - 1) * 100:.1f} %" if pct else f"{lo:.2f}–{hi:.2f}×"

    tiles = span([(x["rows"], x["tiles"]) for n in (2, 3, 4) for x in best[n].values()], True)
    lse = span([(x["tiles"], x["default"]) for n in (3, 4) for x in best[n].values()], True)
    vs_tiles = span([(x["cudnn"], x["tiles"]) for n in (2, 3) for x in best[n].values()], False)
    vs_default = span([(x["cudnn"], x["default"]) for n in (3, 4) for x in best[n].values()], False)
    text = _flat(results)
    assert f"the register-order tile alone is {tiles} faster than the row-major one (runs 2–4)" in text
    assert f"L₂ and Dᵢ by TMA another {lse} (runs 3, 4)" in text
    assert f"the `tiles` build ran at {vs_tiles} its speed (runs 2, 3), the default at **{vs_default}** (runs 3, 4)" in text
    gpu_doc = _flat((ROOT / "docs" / "gpu.md").read_text())
    assert f"took the backward from {vs_tiles} cuDNN's speed to {vs_default}" in gpu_doc


def test_prefill_run_18_table_is_the_recorded_run():
    res = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "prefill.py"), "report",
                          str(DATA / "prefill-h200-run18.json")], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    rows = [ln for ln in res.stdout.splitlines() if ln.startswith("| 64 ") or ln.startswith("| 128 ")]
    assert len(rows) == 16
    results = _results()
    for line in rows:
        assert line in results, line


def test_stall_ledger_numbers_are_the_recorded_page():
    mod = load_script("benchmarks/ncu_stalls.py")
    led = mod.ledger(*mod.read_source_csv(DATA / "ncu-bwd-sass-h200-run1.csv.gz"))
    ins = led["instructions"]
    nops = [d["samples"] for d in ins if d["source"].split()[0] == "NOP"][:2]
    loader = next(d["samples"] for d in ins if "BRA" in d["source"])  # the largest branch: the loader's wait
    ffma = [d["samples"] for d in ins if d["source"].startswith("FFMA")][:2]
    fence = [d["samples"] for d in ins if d["source"].startswith("FENCE")][:4]
    text = _flat(_results())
    assert f"{led['total']:,.0f} stall samples. {sum(nops):,.0f} of them are idle warps" in text
    assert f"and {loader:,.0f} the loader warp waiting for a free ring slot" in text
    assert f"({ffma[0]:,.0f} and {ffma[1]:,.0f} samples, long scoreboard" in text
    assert (f"`FENCE.VIEW.ASYNC.S`: {fence[0]:,.0f}, {fence[1]:,.0f}, {fence[2]:,.0f} and {fence[3]:,.0f} samples"
            in text)
    warp = (DATA / "ncu-bwd-warpstate-h200-run1.txt").read_text()
    cycles = next(ln.split()[-1] for ln in warp.splitlines() if "Warp Cycles Per Issued Instruction" in ln)
    assert f"the warp cycles per issued instruction were {cycles}" in text


def test_variants_runs_10_to_12_rows_are_the_recorded_runs():
    vb = load_script("benchmarks/variants.py")
    results = _results()
    for tag, run in (("run10", 10), ("run11", 11), ("det-gluon-run12", 12)):
        rows = json.loads((DATA / f"variants-h200-window-alibi-{tag}.json").read_text())["rows"]
        body = vb.report(rows).splitlines()[2:]
        assert len(body) == 4
        for line in body:
            assert line.replace("| fwd_bwd |", f"| fwd_bwd (run {run}) |", 1) in results, line


def test_variants_runs_10_to_12_ranges_in_the_text():
    vb = load_script("benchmarks/variants.py")

    def cols(tag):  # (D, variant) -> (×flex, det./default) as the report prints them
        rows = json.loads((DATA / f"variants-h200-window-alibi-{tag}.json").read_text())["rows"]
        out = {}
        for line in vb.report(rows).splitlines()[2:]:
            c = [x.strip() for x in line.strip("|").split("|")]
            out[(c[0], c[1])] = (float(c[7]), float(c[9]))
        return out

    r10, r11, r12 = cols("run10"), cols("run11"), cols("det-gluon-run12")

    def span(values):
        return f"{min(values):.2f}–{max(values):.2f}×"

    text = _flat(_results())
    windows = [r[(d, "window")][0] for r in (r11, r12) for d in ("64", "128")]
    alibi128 = [r[("128", "alibi")][0] for r in (r11, r12)]
    assert f"**windows met at both head dims** in runs 11 and 12 ({span(windows)};" in text
    assert f"ALiBi's forward+backward at D = 128 too ({span(alibi128)};" in text
    det = {n: span([v[1] for v in r.values()]) for n, r in ((10, r10), (11, r11), (12, r12))}
    assert f"deterministic backward runs at {det[11]} the default (run 11; {det[10]} in run 10" in text
    assert f"the ordered Gluon kernel (run 12) at {det[12]}." in text


def test_deterministic_gluon_sentence_is_runs_11_and_12():
    vb = load_script("benchmarks/variants.py")

    def det(tag):
        rows = json.loads((DATA / f"variants-h200-window-alibi-{tag}.json").read_text())["rows"]
        vals = [float(ln.strip("|").split("|")[4]) for ln in vb.report(rows).splitlines()[2:]]
        return f"{min(vals):.0f}–{max(vals):.0f}"

    text = _flat(_results())
    assert (f"It ran at {det('det-gluon-run12')} TFLOP/s forward+backward on the window and ALiBi rows at 16K "
            f"(variants run 12, below), against {det('run11')} for the Triton kernels' deterministic backward") in text


def test_docs_variants_quote_run_11():
    vb = load_script("benchmarks/variants.py")
    rows = json.loads((DATA / "variants-h200-window-alibi-run11.json").read_text())["rows"]
    c = {}
    for line in vb.report(rows).splitlines()[2:]:
        x = [v.strip() for v in line.strip("|").split("|")]
        c[(x[0], x[1])] = (x[3], x[7])
    doc = _flat((ROOT / "docs" / "variants.md").read_text())
    w64, w128, a64, a128 = c[("64", "window")], c[("128", "window")], c[("64", "alibi")], c[("128", "alibi")]
    assert (f"windows forward+backward {w64[0]} and {w128[0]} TFLOP/s, {w64[1]}× and {w128[1]}× FlexAttention; "
            f"ALiBi {a64[0]} and {a128[0]}, {a64[1]}× and {a128[1]}×.") in doc


def _vs(run: int, ref: str, pass_: str) -> str:
    """attnlab's range against ``ref`` over prefill run ``run``'s rows of ``pass_``, as the docs quote it."""
    rows = json.loads((DATA / f"prefill-h200-run{run}.json").read_text())["rows"]
    t = {(r["D"], r["causal"], r["N"], r["pass_"], r["provider"]): r["tflops"] for r in rows if "tflops" in r}
    v = [t[k] / t[(*k[:4], ref)] for k in t if k[4] == "attnlab" and k[3] == pass_]
    return f"{min(v):.2f}–{max(v):.2f}×"


def test_readme_quotes_hf_runs_15_16():
    readme = _flat((ROOT / "README.md").read_text())
    steps = []
    for n in (15, 16):
        t = json.loads((DATA / f"hf-h200-run{n}.json").read_text())["train"]
        steps.append(f"{t['attnlab']['step_ms'] / t['sdpa']['step_ms']:.3f}×")
    assert f"the training step takes {steps[0]} and {steps[1]} SDPA's time (hf runs 15 and 16)" in readme
    b = _best(3)[(64, 32, 8, 8192, True)]
    assert f"the attention backward alone runs at {b['cudnn'] / b['default']:.2f}× cuDNN's speed" in readme


def test_deterministic_backward_alone_is_run_5():
    mod = load_script("benchmarks/bwd_dq_layout.py")
    results = _results()
    rows = json.loads((DATA / "bwd-dq-layout-h200-run5.json").read_text())["rows"]
    for line in mod.table(rows)[2:]:
        assert line in results, line
    b = _best(5)[(64, 32, 32, 16384, False)]
    assert (f"level with the Triton deterministic backward at D = 64 ({b['det-gluon']:.2f} against "
            f"{b['det-triton']:.2f} ms)") in _flat(results)
    for shape, t in _best(5).items():  # causal: the ordered kernel takes about twice the Triton kernels' time
        if shape[4]:
            assert 1.15 < t["det-gluon"] / t["det-triton"] < 2.2, shape


def test_deterministic_turns_in_walk_order_are_run_6_and_variants_run_13():
    mod = load_script("benchmarks/bwd_dq_layout.py")
    vb = load_script("benchmarks/variants.py")
    results = _results()
    for line in mod.table(json.loads((DATA / "bwd-dq-layout-h200-run6.json").read_text())["rows"])[2:]:
        assert line in results, line
    vrows = json.loads((DATA / "variants-h200-window-alibi-det-gluon-run13.json").read_text())["rows"]
    assert {r["det_kernel"] for r in vrows if r["provider"] == "attnlab-det"} == {"gluon"}
    for line in vb.report(vrows).splitlines()[2:]:
        assert line in results, line
    b5, b6 = _best(5), _best(6)
    c64, c128, gqa = (64, 32, 32, 16384, True), (128, 16, 16, 16384, True), (64, 32, 8, 8192, True)
    text = _flat(results)
    assert (f"took the causal calls from {b5[c64]['det-gluon']:.2f} to {b6[c64]['det-gluon']:.2f} ms at D = 64 and "
            f"from {b5[c128]['det-gluon']:.2f} to {b6[c128]['det-gluon']:.2f} ms at D = 128 (run 5), but not near the "
            f"default ({b6[c64]['default']:.2f} and {b6[c128]['default']:.2f} ms)") in text
    assert f"the GQA layer at 8K got slower ({b5[gqa]['det-gluon']:.2f} → {b6[gqa]['det-gluon']:.2f} ms)" in text
    for shape, t in b6.items():  # "still under the Triton kernels' deterministic backward on every causal row"
        if shape[4]:
            assert t["det-gluon"] > t["det-triton"], shape


def test_docs_quote_variants_runs_12_13_16_and_bwd_dq_layout_run_9():
    vb = load_script("benchmarks/variants.py")

    def span(name):  # det./default over a run's rows, as the report prints them
        rows = json.loads((DATA / name).read_text())["rows"]
        vals = [float(ln.strip("|").split("|")[9]) for ln in vb.report(rows).splitlines()[2:]]
        return f"{min(vals):.2f}–{max(vals):.2f}×"

    r12, r13 = (span(f"variants-h200-window-alibi-det-gluon-run{n}.json") for n in (12, 13))
    r16 = span("variants-h200-det-run16.json")
    b9 = _best(9)
    alone = [t["default"] / t["det-gluon"] for t in b9.values()]
    triton = [t["default"] / t["det-triton"] for t in b9.values()]
    alone_s, triton_s = (f"{min(v):.2f}–{max(v):.2f}×" for v in (alone, triton))
    gpu = _flat((ROOT / "docs" / "gpu.md").read_text())
    assert (f"it runs at {alone_s} the default backward's speed alone (bwd-dq-layout run 9; the Triton kernels' "
            f"deterministic backward {triton_s}) and at {r16} forward+backward on every variant (variants run 16)") in gpu
    variants = _flat((ROOT / "docs" / "variants.md").read_text())
    assert (f"{r12[:-1]}× the default backward's speed forward+backward with turns in key block order (run 12), "
            f"{r13} with causal turns in descending order (run 13), {r16} with the writer warp, head by head, on "
            f"every variant (run 16;") in variants
    assert f"The backward alone runs at {alone_s} the default (bwd-dq-layout run 9)" in variants


def test_wait_table_reads_each_shapes_first_det_gluon_round():
    """bwd_dq_layout.py's table of the ordered waits: one row per shape from the round that read the counters,
    polls per addition computed; nothing for runs without them (runs 1–6)."""
    mod = load_script("benchmarks/bwd_dq_layout.py")
    base = dict(H=16, Hkv=16, N=16384, layout="det-gluon", ms=1.0, tflops=1.0, rel_diff=0.0)
    rows = [dict(base, D=128, causal=True, round=0, additions=400, waits=40, polls=1000, given_up=0),
            dict(base, D=128, causal=True, round=1),
            dict(base, D=64, causal=False, round=0, additions=0, waits=0, polls=0, given_up=0)]
    lines = mod.wait_table(rows)
    assert lines[2:] == ["| 128 | 16/16 | 16384 | True | det-gluon | 400 | 40 | 1000 | 2.50 | 0 |",
                         "| 64 | 16/16 | 16384 | False | det-gluon | 0 | 0 | 0 | 0.00 | 0 |"]
    for run in range(1, 7):
        data = json.loads((DATA / f"bwd-dq-layout-h200-run{run}.json").read_text())
        assert mod.wait_table(data["rows"] if isinstance(data, dict) else data) == []


def test_deterministic_writer_head_by_head_is_runs_7_to_9_and_variants_run_16():
    """The writer-warp build: run 7 (head first), run 8 (head first against head by head), run 9 and variants
    run 16 (the library as shipped: deterministic calls on the Gluon kernel, head by head)."""
    mod = load_script("benchmarks/bwd_dq_layout.py")
    vb = load_script("benchmarks/variants.py")
    results = _results()
    text = _flat(results)
    b7, b8, b9 = _best(7), _best(8), _best(9)
    gqa = (64, 32, 8, 8192, True)

    def span(vals):
        return f"{min(vals):.2f}–{max(vals):.2f}×"

    causal = [s for s in b7 if s[4]]
    assert (f"brought the non-causal calls to {span([b7[s]['default'] / b7[s]['det-gluon'] for s in b7 if not s[4]])} "
            f"the default backward, but left the causal ones where they were "
            f"({span([b7[s]['default'] / b7[s]['det-gluon'] for s in causal])[:-1]}×)") in text
    rows7 = {(r["D"], r["causal"], r["N"]): r for r in json.loads((DATA / "bwd-dq-layout-h200-run7.json").read_text())["rows"]
             if r["layout"] == "det-gluon" and "additions" in r}
    polled = sorted(rows7[(D, True, 16384)]["waits"] for D in (64, 128))
    assert (f"at 16K the causal waits polled on {polled[0]} and {polled[1]} of "
            f"{rows7[(64, True, 16384)]['additions']:,} additions (the GQA layer's on {rows7[(64, True, 8192)]['waits']} "
            f"of {rows7[(64, True, 8192)]['additions']:,})") in text
    for line in mod.table(json.loads((DATA / "bwd-dq-layout-h200-run8.json").read_text())["rows"])[2:]:
        if "det-gluon-h" in line:
            assert line in results, line
    less = [1 - b8[s]["det-gluon-hm"] / b8[s]["det-gluon-hf"] for s in b8]
    assert all(x > 0 for x in less)  # "every row is faster"
    big = [1 - b8[s]["det-gluon-hm"] / b8[s]["det-gluon-hf"] for s in b8 if s[4] and s[3] == 16384]
    assert (f"the causal ones at 16K take {min(big) * 100:.0f}–{max(big) * 100:.0f} % less time, the GQA layer "
            f"{(1 - b8[gqa]['det-gluon-hm'] / b8[gqa]['det-gluon-hf']) * 100:.0f} %") in text
    data9 = json.loads((DATA / "bwd-dq-layout-h200-run9.json").read_text())["rows"]
    for line in mod.table(data9)[2:] + mod.wait_table(data9)[2:]:
        assert line in results, line
    assert all(r.get("given_up", 0) == 0 for r in data9)
    vrows = json.loads((DATA / "variants-h200-det-run16.json").read_text())["rows"]
    assert {r["det_kernel"] for r in vrows if r["provider"] == "attnlab-det"} == {"library"}
    report = vb.report(vrows).splitlines()
    for line in report[2:]:
        assert line in results, line
    det = [float(ln.strip("|").split("|")[9]) for ln in report[2:]]
    assert min(det) >= 0.85  # the variants issue's bar: within 15 % of the default, on every row
    assert f"within the 15 % the variants issue asks on every row: {span(det)[:-1]}× forward+backward" in text
    alone = [b9[s]["default"] / b9[s]["det-gluon"] for s in b9]
    triton = [b9[s]["default"] / b9[s]["det-triton"] for s in b9]
    assert (f"Alone it runs at {span(alone)} the default backward, faster than the Triton kernels' deterministic "
            f"backward ({span(triton)[:-1]}×) on every row but the GQA layer at 8K, where both take "
            f"{b9[gqa]['det-gluon']:.1f} ms") in text
    assert all(b9[s]["det-gluon"] < b9[s]["det-triton"] for s in b9 if s != gqa)
    assert round(b9[gqa]["det-triton"], 1) == round(b9[gqa]["det-gluon"], 1)


def test_gluon_backward_source_quotes_runs_8_and_9():
    """The comment on DETERMINISTIC and heads_first_default's docstring quote bwd-dq-layout runs 8 and 9."""
    b8, b9 = _best(8), _best(9)

    def span(vals, sep="-"):
        return f"{min(vals):.2f}{sep}{max(vals):.2f}x"

    src = _flat((ROOT / "src" / "attnlab" / "gpu" / "prefill_gluon_bwd.py").read_text()).replace("# ", "")
    hf = {c: [b8[s]["default"] / b8[s]["det-gluon-hf"] for s in b8 if s[4] == c] for c in (True, False)}
    hm_causal = [b8[s]["default"] / b8[s]["det-gluon-hm"] for s in b8 if s[4]]
    assert (f"bwd-dq-layout run 9): {span([t['default'] / t['det-gluon'] for t in b9.values()])} the default "
            f"backward's speed, the Triton kernels {span([t['default'] / t['det-triton'] for t in b9.values()])}; "
            f"numbered head first, a wave held every head's dQ tiles (run 8: {span(hf[True])} on the causal rows, "
            f"{span(hf[False])} on the others)") in src
    assert (f"(bwd-dq-layout run 8: {span(hf[True])} the default backward on the causal rows head first, "
            f"{span(hm_causal)} head by head)") in src


def test_variants_runs_14_to_16_spans():
    vb = load_script("benchmarks/variants.py")

    def span(name):
        rows = json.loads((DATA / name).read_text())["rows"]
        vals = [float(ln.strip("|").split("|")[9]) for ln in vb.report(rows).splitlines()[2:]]
        return f"{min(vals):.2f}–{max(vals):.2f}×"

    text = _flat(_results())
    r14, r15 = (span(f"variants-h200-window-alibi-det-gluon-run{n}.json") for n in (14, 15))
    assert (f"det./default {r14}; run 15 (`…-run15.json`, head by head): {r15}; run 16 "
            f"(`data/variants-h200-det-run16.json`, the library as shipped, every variant): "
            f"{span('variants-h200-det-run16.json')}, the issue's 15 % met on every row") in text


def test_run_10_says_what_the_gqa_rows_gap_is():
    mod = load_script("benchmarks/bwd_dq_layout.py")
    results = _results()
    rows = json.loads((DATA / "bwd-dq-layout-h200-run10.json").read_text())["rows"]
    for line in mod.table(rows)[2:] + mod.wait_table(rows)[2:]:
        assert line in results, line
    b = _best(10)
    g, c64, c128 = b[(64, 32, 8, 8192, True)], b[(64, 32, 32, 16384, True)], b[(128, 16, 16, 16384, True)]
    text = _flat(results)
    assert (f"the default backward itself takes {g['default-hm']:.2f} ms on the GQA layer against {g['default']:.2f} "
            f"ms head first: the order costs that row most of its gap, and the writer's ordered additions the rest "
            f"({g['det-gluon']:.2f} against {g['default-hm']:.2f} ms)") in text
    assert g["default-hm"] - g["default"] > g["det-gluon"] - g["default-hm"] > 0  # "most of its gap", "the rest"
    assert (f"(GQA {g['det-gluon-lpt']:.2f}, 16K {c64['det-gluon-lpt']:.2f} ms against {g['det-gluon']:.2f} and "
            f"{c64['det-gluon']:.2f} ms); at D = 128 it ties") in text
    assert abs(c128["det-gluon-lpt"] / c128["det-gluon"] - 1) < 0.02
    polls = {(r["D"], r["N"]): r["polls"] / r["additions"] for r in rows
             if r["layout"] == "det-gluon-lpt" and "additions" in r and r["causal"]}
    assert all(0.9 < polls[(64, n)] < 1.2 for n in (8192, 16384))  # "about once per addition"


def test_kv_split_section_is_run_15():
    """RESULTS.md's bwd-dq-layout runs 14 and 15 section (its table as the script renders run 15, the ratios
    and differences it quotes), and run 14's error rows."""
    mod = load_script("benchmarks/bwd_dq_layout.py")
    results = _results()
    section = results[results.index("### bwd-dq-layout runs 14 and 15"):results.index("### Run 18: the backward")]
    rows = json.loads((DATA / "bwd-dq-layout-h200-run15.json").read_text())["rows"]
    for line in mod.table(rows)[2:]:
        assert line in section, line
    (best,) = _best(15).values()
    diff = {r["layout"]: r["rel_diff"] for r in rows if r["round"] == 0}
    unsplit, four = best["default"] / best["det-gluon"], best["default"] / best["det-gluon-kv4"]
    assert best["det-gluon-kv4"] < best["det-gluon-kv2"] < best["det-gluon"]  # "four ways" is the split kept
    text = _flat(section)
    assert f"from {unsplit:.2f}× to {four:.2f}× the default's speed in the same process" in text
    assert f"grows from {diff['det-gluon']:.1e} to {diff['det-gluon-kv4']:.1e} of the largest gradient" in text
    first = json.loads((DATA / "bwd-dq-layout-h200-run14.json").read_text())["rows"]
    assert {r["layout"] for r in first if "error" in r} == {"det-gluon-kv2", "det-gluon-kv4"}


def test_kv_split_in_place_section_docs_and_source_are_run_16():
    """RESULTS.md's bwd-dq-layout run 16 section (its tables as the script renders them, the ratios, run 15's
    four-way time and the differences it quotes), docs/variants.md's and docs/gpu.md's ratios, and the
    milliseconds beside ``DET_KV_SPLIT``."""
    mod = load_script("benchmarks/bwd_dq_layout.py")
    results = _results()
    section = results[results.index("### bwd-dq-layout run 16"):results.index("### bwd-dq-layout runs 14 and 15")]
    rows = json.loads((DATA / "bwd-dq-layout-h200-run16.json").read_text())["rows"]
    for line in mod.table(rows)[2:] + mod.wait_table(rows)[2:]:
        assert line in section, line
    (best,) = _best(16).values()
    (before,) = _best(15).values()
    ratio = {name: best["default"] / ms for name, ms in best.items()}
    assert best["det-gluon-kv4"] < best["det-gluon-kv2"] < best["det-gluon-kv1"]
    assert abs(best["det-gluon"] / best["det-gluon-kv4"] - 1) < 0.01  # the library's pick is the four-way split
    assert ratio["det-gluon-kv4"] > 0.85 > ratio["det-gluon-kv1"]  # the bar, met only split
    text = _flat(section)
    assert (f"Four ways now run at {ratio['det-gluon-kv4']:.2f}× the default's speed in the same process, against "
            f"{ratio['det-gluon-kv1']:.2f}× unsplit (run 15's copying build: "
            f"{before['default'] / before['det-gluon-kv4']:.2f}×)") in text
    assert f"run 15's copying build took {before['det-gluon-kv4']:.2f} ms for the same walks" in text
    diff = {r["layout"]: r["rel_diff"] for r in rows if r["round"] == 0}
    old = {r["layout"]: r["rel_diff"] for r in json.loads(
        (DATA / "bwd-dq-layout-h200-run15.json").read_text())["rows"] if r["round"] == 0}
    assert diff["det-gluon-kv4"] == old["det-gluon-kv4"]  # "run 15's to the digit"
    assert f"({diff['det-gluon-kv4']:.1e} of the largest at four ways)" in text
    four, unsplit = ratio["det-gluon-kv4"], ratio["det-gluon-kv1"]
    assert f"{four:.2f}× the default alone on that row, against {unsplit:.2f}× unsplit" in _flat(
        (ROOT / "docs" / "variants.md").read_text())
    assert f"went from {unsplit:.2f}× to {four:.2f}× (bwd-dq-layout run 16)" in _flat((ROOT / "docs" / "gpu.md").read_text())
    ms = {name: [r["ms"] for r in rows if r["layout"] == name] for name in best}
    source = _flat((ROOT / "src" / "attnlab" / "gpu" / "prefill_gluon_bwd.py").read_text())
    assert (f"{min(ms['det-gluon-kv1']):.2f} ms unsplit, {min(ms['det-gluon-kv2']):.2f} split two ways, "
            f"{min(ms['det-gluon-kv4']):.2f} four ways, against the default backward's # "
            f"{min(ms['default']):.2f}-{max(ms['default']):.2f} (run 15's build, which copied K and V per program "
            f"head: {before['det-gluon-kv4']:.2f} four ways)") in source


def test_default_split_and_mha_check_are_runs_17_and_18():
    """RESULTS.md's runs 17 and 18 (inside the run 16 section): their tables as the script renders them, the
    default build's split slower than unsplit (not taken), and the deterministic/default ratios against run 9's."""
    mod = load_script("benchmarks/bwd_dq_layout.py")
    results = _results()
    section = results[results.index("### bwd-dq-layout run 16"):results.index("### bwd-dq-layout runs 14 and 15")]
    for run in (17, 18):
        for line in mod.table(json.loads((DATA / f"bwd-dq-layout-h200-run{run}.json").read_text())["rows"])[2:]:
            assert line in section, (run, line)
    (g,) = _best(17).values()
    assert min(g["default-kv2"], g["default-kv4"]) > g["default"]  # "it does not"
    text = _flat(section)
    assert f"The deterministic build ran at {g['default'] / g['det-gluon']:.2f}× here" in text
    b18, b9 = _best(18), _best(9)
    r18 = [b18[k]["default"] / b18[k]["det-gluon"] for k in ((64, 32, 32, 16384, True), (128, 16, 16, 16384, True))]
    r9 = [b9[k]["default"] / b9[k]["det-gluon"] for k in ((64, 32, 32, 16384, True), (128, 16, 16, 16384, True))]
    assert (f"Deterministic against default {r18[0]:.2f}× at D = 64 and {r18[1]:.2f}× at D = 128, as in run 9 "
            f"({r9[0]:.2f}×, {r9[1]:.2f}×)") in text


def test_persistent_forward_section_is_fwd_persistent_runs_1_2_and_prefill_run_19():
    """RESULTS.md's prefill run 19 section: fwd-persistent run 2's table as the script renders it, the gains and
    losses its text draws from runs 1 and 2, run 19's table as prefill.py reports it, and its ranges against
    cuDNN beside run 18's."""
    mod = load_script("benchmarks/fwd_persistent.py")
    results = _results()
    section = results[results.index("### Run 19 and fwd-persistent"):results.index("### bwd-dq-layout run 16")]
    runs = {n: json.loads((DATA / f"fwd-persistent-h200-run{n}.json").read_text())["rows"] for n in (1, 2)}
    for line in mod.table(runs[2])[2:]:
        assert line in section, line
    assert all(r["same_bits"] for rows in runs.values() for r in rows if r["build"].startswith("persistent"))

    def by_row(rows, causal):
        best = {}
        for r in rows:
            key = (r["D"], r["causal"], r["N"], r["build"])
            best[key] = min(best.get(key, float("inf")), r["ms"])
        return {(D, N): best[D, c, N, "grid"] / ms for (D, c, N, b), ms in best.items()
                if b == "persistent" and c == causal}

    def gains(rows, causal):
        return list(by_row(rows, causal).values())

    text = _flat(section)
    g1, g2 = gains(runs[1], False), gains(runs[2], False)
    assert (f"by {100 * (min(g2) - 1):.1f}–{100 * (max(g2) - 1):.1f} % here and {100 * (min(g1) - 1):.1f}–"
            f"{100 * (max(g1) - 1):.1f} % in run 1") in text
    c1, c2 = gains(runs[1], True), gains(runs[2], True)
    worst = by_row(runs[1], True)
    assert f"{worst[64, 4096]:.2f}× at D = 64, 4K and {worst[128, 16384]:.2f}× at D = 128, 16K" in text
    assert sorted(c1)[:2] == sorted([worst[64, 4096], worst[128, 16384]])  # the two worst rows
    assert f"still {min(c2):.2f}–{max(c2):.2f}×" in text and max(c2) < 1
    res = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "prefill.py"), "report",
                          str(DATA / "prefill-h200-run19.json")], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("| 64 ") or ln.startswith("| 128 ")]
    assert len(lines) == 16
    for line in lines:
        assert line in section, line

    def vs_cudnn(run):
        rows = json.loads((DATA / f"prefill-h200-run{run}.json").read_text())["rows"]
        t = {(r["D"], r["causal"], r["N"], r["pass_"], r["provider"]): r["tflops"] for r in rows if "tflops" in r}
        return {k[:4]: v / t[(*k[:4], "sdpa-cudnn")] for k, v in t.items() if k[4] == "attnlab"}

    r19, r18 = vs_cudnn(19), vs_cudnn(18)
    fwd19 = sorted(v for k, v in r19.items() if k[3] == "fwd")
    assert fwd19[0] == r19[64, True, 4096, "fwd"] and fwd19[1] >= 1.005  # "7 of the 8 rows"
    assert f"{fwd19[1]:.2f}–{fwd19[-1]:.2f}× on 7 of the 8 rows, and still {fwd19[0]:.2f}× at D = 64 causal 4K" in text
    fwd18 = [v for k, v in r18.items() if k[3] == "fwd"]
    assert f"(run 18: {min(fwd18):.2f}–{max(fwd18):.2f}×" in text
    both19 = [v for k, v in r19.items() if k[3] == "fwd_bwd"]
    both18 = [v for k, v in r18.items() if k[3] == "fwd_bwd"]
    assert f"Forward+backward {min(both19):.2f}–{max(both19):.2f}× (run 18: {min(both18):.2f}–{max(both18):.2f}×)" in text
    doc = _flat((ROOT / "docs" / "gpu.md").read_text())
    g = g1 + g2
    assert (f"({100 * (min(g) - 1):.1f}–{100 * (max(g) - 1):.1f} % faster than the grid kernel on every such row" in doc
            and f"({min(c2):.2f}–{max(c2):.2f}× the grid kernel, run 2)" in doc)


def test_causal_schedule_section_is_fwd_persistent_runs_3_5_and_prefill_run_21():
    """RESULTS.md's run 21 section: fwd-persistent runs 4 and 5 and prefill run 21 as their scripts render them,
    every build's bits equal to the grid kernel's, the gains its text and docs/gpu.md draw from runs 3-5, and
    run 21's ranges against cuDNN in the section and in docs/gpu.md's performance paragraph."""
    mod = load_script("benchmarks/fwd_persistent.py")
    results = _results()
    section = _flat(results[results.index("### Run 21 and fwd-persistent runs 3–5"):
                            results.index("### Run 19 and fwd-persistent")])
    rows = {n: json.loads((DATA / f"fwd-persistent-h200-run{n}.json").read_text())["rows"] for n in (3, 4, 5)}
    for n in (4, 5):
        for line in mod.table(rows[n])[2:]:
            assert _flat(line) in section, line
    assert all(r["same_bits"] for rs in rows.values() for r in rs if r["same_bits"] is not None)
    b = {n: fwd_persistent_best(n) for n in (3, 4, 5)}

    def pct(v):
        return f"{100 * (min(v) - 1):.1f}–{100 * (max(v) - 1):.1f} %"

    pf = [b[n][64, True, 4096, "grid"] / b[n][64, True, 4096, "grid-pf"] for n in (3, 4, 5)]
    assert f"The part block first is worth {pct(pf)} at D = 64, 4K (runs 3–5)" in section
    none = [b[n][128, True, N, "grid"] / b[n][128, True, N, "grid-pf"] for n in (4, 5) for N in (4096, 16384)]
    assert f"128-row blocks: {min(none):.2f}–{max(none):.2f}×" in section
    from attnlab.gpu.prefill_gluon import auto_head_chunk

    d128 = [b[4][128, True, N, "grid"] / b[4][128, True, N, f"persistent-pf-c{auto_head_chunk(N, 128, 1, 2)}"]
            for N in (4096, 8192, 16384)]
    d128 += [b[5][128, True, N, "grid"] / b[5][128, True, N, "table"] for N in (4096, 16384)]
    assert f"at D = 128 on every row of runs 4 and 5 ({pct(d128)})" in section and min(d128) > 1
    ahead = [b[4][64, True, N, f"persistent-pf-c{auto_head_chunk(N, 64, 1, 2)}"] / b[4][64, True, N, "grid-pf"]
             for N in (8192, 16384)] + [b[3][64, True, 16384, "persistent-pf-c8"] / b[3][64, True, 16384, "grid-pf"]]
    assert f"with the part block first {pct(ahead)} ahead" in section and min(ahead) > 1
    mid = [b[n][64, True, 4096, x] / b[n][64, True, 4096, y] for n, x, y in (
        (3, "persistent-pf-c8", "persistent-128-c8"), (4, "persistent-pf-c8", "persistent-128-c8"),
        (5, "table", "persistent-128"))]
    assert f"({pct(mid)} ahead of the 192-row one at 4K in runs 3–5)" in section and min(mid) > 1
    slow = b[4][128, True, 16384, "persistent-pf-c8"] / b[4][128, True, 16384, "persistent-pf-c1"]
    assert f"ran up to {100 * (slow - 1):.0f} % slower (D = 128, 16K)" in section
    res = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "prefill.py"), "report",
                          str(DATA / "prefill-h200-run21.json")], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("| 64 ") or ln.startswith("| 128 ")]
    assert len(lines) == 16 and all(_flat(ln) in section for ln in lines)

    def vs_cudnn(run):
        rows = json.loads((DATA / f"prefill-h200-run{run}.json").read_text())["rows"]
        t = {(r["D"], r["causal"], r["N"], r["pass_"], r["provider"]): r["tflops"] for r in rows if "tflops" in r}
        return {k[:4]: v / t[(*k[:4], "sdpa-cudnn")] for k, v in t.items() if k[4] == "attnlab"}, t

    r21, t21 = vs_cudnn(21)
    r20, t20 = vs_cudnn(20)
    fwd = [v for k, v in r21.items() if k[3] == "fwd"]
    both = [v for k, v in r21.items() if k[3] == "fwd_bwd"]
    assert (f"Forward against cuDNN now {min(fwd):.2f}–{max(fwd):.2f}×, forward+backward "
            f"{min(both):.2f}–{max(both):.2f}×") in section
    low = r21[64, True, 4096, "fwd"]
    assert min(fwd) == low
    assert (f"0.97× in run 20 (with the 192-row persistent build) and {low:.2f}× here, where cuDNN ran "
            f"{t21[64, True, 4096, 'fwd', 'sdpa-cudnn']:.0f} TFLOP/s against "
            f"{t20[64, True, 4096, 'fwd', 'sdpa-cudnn']:.0f} in run 20") in section
    assert f"{r20[64, True, 4096, 'fwd']:.2f}× in run 20" in section
    p128 = b[5][64, True, 4096, "cudnn"] / b[5][64, True, 4096, "persistent-128"]
    assert f"run 5 timed {p128:.2f}× in its own process" in section
    assert (f"causal 16K at {t20[128, True, 16384, 'fwd', 'attnlab']:.0f} TFLOP/s; neither run 5 "
            f"({attention_tflops(b[5][128, True, 16384, 'table'], 128, 16384):.0f}) nor run 21 "
            f"({t21[128, True, 16384, 'fwd', 'attnlab']:.0f})") in section
    doc = _flat((ROOT / "docs" / "gpu.md").read_text())
    gain = [b[n][64, True, 4096, "grid"] / b[n][64, True, 4096, x]
            for n, x in ((3, "persistent-128-c8"), (4, "persistent-128-c8"), (5, "persistent-128"))]
    gain += [b[4][128, True, 4096, "grid"] / b[4][128, True, 4096, "persistent-pf-c4"],
             b[5][128, True, 4096, "grid"] / b[5][128, True, 4096, "table"]]
    assert f"at 4K keys {pct(gain)} faster than the grid kernel before" in doc


def attention_tflops(ms, D, N):
    from attnlab.cost import attention_flops

    return attention_flops(batch=16384 // N, heads=2048 // D, seq_q=N, head_dim=D, causal=True, pass_="fwd") / ms / 1e9


def test_turns_rings_and_overlap_section_is_fwd_persistent_runs_6_8():
    """RESULTS.md's fwd-persistent runs 6-8 section: the runs' tables as the script renders them, every compared
    build's bits equal to its base's, and the ratios its text and NOTES-prefill v19 and v20 draw from them."""
    mod = load_script("benchmarks/fwd_persistent.py")
    results = _results()
    section = _flat(results[results.index("### Fwd-persistent runs 6–8"):results.index("### Run 21 and fwd-persistent")])
    notes_all = (ROOT / "benchmarks" / "NOTES-prefill.md").read_text()
    notes = _flat(notes_all.split("## v19")[1].split("## v20")[0])
    v20 = _flat(notes_all.split("## v20")[1])
    for n in (6, 7, 8):
        rows = json.loads((DATA / f"fwd-persistent-h200-run{n}.json").read_text())["rows"]
        for line in mod.table(rows)[2:]:
            assert _flat(line) in section, line
        assert all(r["same_bits"] for r in rows if r["same_bits"] is not None)
    b6, b7 = fwd_persistent_best(6), fwd_persistent_best(7)
    pp = {k: b6[(*k[:3], k[3][:-3])] / v for k, v in b6.items() if k[3].endswith("-pp")}
    lo, hi = min(pp.values()), max(pp.values())
    assert f"Turns: {lo:.2f}–{hi:.2f}× the same build without them" in section
    assert f"{lo:.2f}–{hi:.2f}× the same build without turns" in notes
    up = [100 * (pp[64, True, N, "persistent-pf-pp"] - 1) for N in (4096, 16384)]
    assert f"+{up[0]:.1f} % and +{up[1]:.1f} % for the 192-row causal build" in section
    assert f"+{up[0]:.1f} % at 4K, +{up[1]:.1f} % at 16K" in notes
    down = [100 * (1 - pp[64, c, N, "persistent-128-pp"]) for c in (True, False) for N in (4096, 16384)]
    assert f"{min(down):.0f}–{max(down):.0f} % slower for the 128-row builds" in section
    assert b6[64, True, 16384, "table"] < b6[64, True, 16384, "persistent-pf-pp"]  # "still trails the table's entry"
    d128 = [100 * (v - 1) for k, v in pp.items() if k[0] == 128]
    assert f"moved D = 128 by −{-min(d128):.1f} to +{max(d128):.1f} %" in notes
    s3 = [b7[64, True, N, "persistent-128"] / b7[64, True, N, "persistent-128-s3"] for N in (4096, 16384)]
    n64 = [b7[64, True, N, "persistent-128"] / b7[64, True, N, "persistent-128-n64"] for N in (4096, 16384)]
    assert f"Three stages: {min(s3):.2f}–{max(s3):.2f}× two; 64-key blocks: {min(n64):.2f}–{max(n64):.2f}×" in section
    assert f"{s3[0]:.2f}× at 4K, {s3[1]:.2f}× at 16K" in notes and f"{n64[0]:.2f}× and {n64[1]:.2f}×" in notes
    vs = [b[64, True, 4096, "cudnn"] / b[64, True, 4096, "table"] for b in (b6, b7)]
    assert f"{vs[0]:.2f}× (run 6) and {vs[1]:.2f}× (run 7)" in section and f"{vs[0]:.2f}× (run 6) and {vs[1]:.2f}× (run 7)" in notes
    b8 = fwd_persistent_best(8)
    x = {k: b8[(*k[:3], k[3][:-2])] / v for k, v in b8.items() if k[3].endswith("-x")}
    d128 = [v for k, v in x.items() if k[0] == 128]
    nc64 = [100 * (x[64, False, N, "persistent-128-x"] - 1) for N in (4096, 16384)]
    assert (f"Tiles overlapped: {x[64, True, 4096, 'table-x']:.2f}× at D = 64 causal 4K, {min(d128):.2f}–{max(d128):.2f}× at "
            f"D = 128, +{min(nc64):.1f}–{max(nc64):.1f} % only for the 128-row builds") in section
    assert (f"D = 64 causal 4K, the row it was for: {x[64, True, 4096, 'table-x']:.2f}× (best "
            f"{b8[64, True, 4096, 'table-x']:.3f} against {b8[64, True, 4096, 'table']:.3f} ms)") in v20
    assert f"D = 64 causal 16K {x[64, True, 16384, 'persistent-128-x']:.2f}×" in v20
    c128 = {f"{x[128, True, N, 'table-x']:.2f}" for N in (4096, 16384)}
    n128 = {f"{x[128, False, N, 'persistent-x']:.2f}" for N in (4096, 16384)}
    assert len(c128) == len(n128) == 1
    assert f"D = 128 {c128.pop()}× (causal 4K and 16K), {n128.pop()}× without a mask" in v20
    assert f"(+{nc64[0]:.1f} % and +{nc64[1]:.1f} %)" in v20
    ahead = [100 * (b8[64, False, N, "persistent-128-x"] / b8[64, False, N, "persistent"] - 1) for N in (4096, 16384)]
    assert f"192-row persistent build is {min(ahead):.0f}–{max(ahead):.0f} % ahead of them" in v20
    vs8 = b8[64, True, 4096, "cudnn"] / b8[64, True, 4096, "table"]
    assert f"against cuDNN in the same rounds: {vs8:.2f}×" in section and f"stays at {vs8:.2f}× cuDNN" in v20


def test_varlen_profile_section_is_its_runs_and_variants_run_13():
    """RESULTS.md's varlen-profile section: runs 1 and 2 as the script renders them, and the times its text and
    NOTES-prefill v19 quote: the library's route bound by its kernels, the Gluon route bound by its host, the bar
    from FlexAttention's time in variants run 13."""
    mod = load_script("benchmarks/varlen_profile.py")
    results = _results()
    section = _flat(results[results.index("### Varlen-profile runs 1 and 2"):results.index("### Run 13: the packed")])
    notes = _flat((ROOT / "benchmarks" / "NOTES-prefill.md").read_text().split("## v19")[1])
    runs = {n: json.loads((DATA / f"varlen-profile-h200-run{n}.json").read_text())["rows"] for n in (1, 2)}
    for n, rows in runs.items():
        for line in mod.table([dict(r, hot=[]) for r in rows]):  # (the host's cProfile entries stay in the file)
            if line.startswith("| "):
                assert _flat(line) in section, (n, line)
    lib = [r for r in runs[1] if r["D"] == 128] + [r for r in runs[2] if r["packed"] == "triton"]
    assert max(abs(r["eager_ms"] - r["kernels_ms"]) for r in lib) <= 0.03
    assert f"took {lib[0]['host_ms']:.3f} ms a call in run 1 and {lib[1]['host_ms']:.3f} in run 2" in section
    g = next(r for r in runs[2] if r["packed"] == "gluon")
    assert f"save {lib[1]['kernels_ms'] - g['kernels_ms']:.2f} ms of GPU time" in section
    assert (f"({g['host_ms']:.3f} ms) exceeds its GPU time ({g['graph_ms']:.3f} ms under a graph), so do_bench sees "
            f"{g['eager_ms']:.3f} ms") in section
    assert g["host_ms"] > g["graph_ms"] and g["eager_ms"] > lib[1]["eager_ms"]
    flex = next(r["ms"] for r in json.loads((DATA / "variants-h200-varlen-run13.json").read_text())["rows"]
                if r["D"] == 128 and r["pass_"] == "fwd_bwd" and r["provider"] == "flex")
    assert f"1.3× FlexAttention's {flex:.3f} ms of variants run 13, so {flex / 1.3:.2f} ms" in section
    assert f"FlexAttention took {flex:.3f} ms in run 13, so 1.3× is {flex / 1.3:.2f} ms" in notes
    assert flex / 1.3 < g["graph_ms"]
    r1 = next(r for r in runs[1] if r["D"] == 128)
    assert (f"eager {r1['eager_ms']:.3f} ms, under a graph {r1['graph_ms']:.3f}, the kernels' sum "
            f"{r1['kernels_ms']:.3f}") in notes
    assert (f"costs {g['host_ms']:.3f} ms of host time against the Triton route's {lib[1]['host_ms']:.3f}"
            in notes)


def test_dynamic_tiles_section_is_fwd_persistent_run_9():
    """RESULTS.md's fwd-persistent run 9 section (each persistent build beside its twin taking its tiles from a
    counter): the table as the script renders it, every build's bits equal to its base's, and the ratios its text,
    NOTES-prefill v24 and docs/gpu.md quote."""
    mod = load_script("benchmarks/fwd_persistent.py")
    results = _results()
    section = _flat(results[results.index("### Fwd-persistent run 9"):results.index("### Fwd-persistent runs 6–8")])
    notes = _flat((ROOT / "benchmarks" / "NOTES-prefill.md").read_text().split("## v24")[1])
    doc = _flat((ROOT / "docs" / "gpu.md").read_text())
    rows = json.loads((DATA / "fwd-persistent-h200-run9.json").read_text())["rows"]
    for line in mod.table(rows)[2:]:
        assert _flat(line) in section, line
    assert all(r["same_bits"] for r in rows if r["same_bits"] is not None)
    b = fwd_persistent_best(9)
    dyn = {k: b[(*k[:3], k[3][:-4])] / v for k, v in b.items() if k[3].endswith("-dyn")}
    assert len(dyn) == 15
    span = f"{min(dyn.values()):.2f}–{max(dyn.values()):.2f}×"
    assert f"The dynamic twins ran at {span} their static builds" in section
    assert f"Dense calls: the prediction missed.** {span} the same build with its tiles dealt out" in notes
    assert f"(fwd-persistent run 9: {span} the same build with its tiles dealt out)" in doc
    nc = [v for k, v in dyn.items() if not k[1]]
    c4 = [v for k, v in dyn.items() if k[1] and k[2] == 4096 and ("128" in k[3] or k[0] == 128 or k[3] == "table-dyn")]
    c192 = dyn[64, True, 4096, "persistent-pf-dyn"]
    assert (f"(non-causal {min(nc):.2f}–{max(nc):.2f}, causal 4K {min(c4):.2f}–{max(c4):.2f} with 128-row tiles, "
            f"{c192:.2f} with 192-row ones)") in notes
    table = {(D, c, N): "table" if c else "persistent" for D in (64, 128) for c in (True, False) for N in (4096, 16384)}
    x = {k: b[(*k, "cudnn")] / b[(*k, n)] for k, n in table.items()}
    x4 = sorted([x[64, True, 4096], b[64, True, 4096, "cudnn"] / b[64, True, 4096, "table-dyn"]])
    rest = [v for k, v in x.items() if k != (64, True, 4096)]
    assert (f"D = 64 causal 4K {x4[0]:.2f}–{x4[1]:.2f}× (table and table-dyn), every other row "
            f"{min(rest):.2f}–{max(rest):.2f}× for the table's build") in section


def test_gpu_doc_quotes_prefill_runs_22_and_23():
    """docs/gpu.md's performance paragraph: run 22's ranges against SDPA-flash and cuDNN, its fastest D = 128
    forward row and that row's share of the roofline, the one row below cuDNN, and run 23's GQA ranges."""
    rows = json.loads((DATA / "prefill-h200-run22.json").read_text())["rows"]
    t = {(r["D"], r["causal"], r["N"], r["pass_"], r["provider"]): r for r in rows if "tflops" in r}
    top = max((k for k in t if k[4] == "attnlab" and k[3] == "fwd" and k[0] == 128), key=lambda k: t[k]["tflops"])
    low = (64, True, 4096, "fwd")
    assert min((k for k in t if k[4] == "attnlab"), key=lambda k: t[k]["tflops"] / t[(*k[:4], "sdpa-cudnn")]["tflops"])[:4] == low
    doc = _flat((ROOT / "docs" / "gpu.md").read_text())
    assert (f"forward {_vs(22, 'sdpa-flash', 'fwd')} SDPA's flash backend and {_vs(22, 'sdpa-cudnn', 'fwd')} cuDNN "
            f"(up to {t[top]['tflops']:.0f} TFLOP/s at D = 128, {100 * t[top]['of_roofline']:.0f} % of the roofline), "
            f"forward+backward {_vs(22, 'sdpa-flash', 'fwd_bwd')} SDPA-flash and {_vs(22, 'sdpa-cudnn', 'fwd_bwd')} "
            f"cuDNN (RESULTS.md, prefill run 22). The one forward row below cuDNN is D = 64 causal at 4K "
            f"({t[(*low, 'attnlab')]['tflops'] / t[(*low, 'sdpa-cudnn')]['tflops']:.2f}×).") in doc
    assert (f"forward {_vs(23, 'sdpa-cudnn', 'fwd')} and forward+backward {_vs(23, 'sdpa-cudnn', 'fwd_bwd')} cuDNN, "
            f"and {_vs(23, 'sdpa', 'fwd')} and {_vs(23, 'sdpa', 'fwd_bwd')} PyTorch's own SDPA choice") in doc


def _block_m_runs() -> tuple[str, dict]:
    """RESULTS' "Bwd-block-m runs 1–5" section, and each run's rows, after checking that the section holds every
    run's table as ``bwd_block_m.py`` renders it."""
    mod = load_script("benchmarks/bwd_block_m.py")
    results = _results()
    section = results[results.index("### Bwd-block-m runs 1–5"):results.index("### FlashAttention-4 runs 1 and 2")]
    runs = {n: json.loads((DATA / f"bwd-block-m-h200-run{n}.json").read_text())["rows"] for n in range(1, 6)}
    for rows in runs.values():
        assert mod.report(rows) in section
    return section, runs


def test_results_bwd_block_m_runs_1_to_4_are_the_recorded_ones():
    """The 128-row backward measured and not taken, D = 64's short causal entry moved, the lag by group size left as
    it was (bwd-block-m runs 1–4, variants run 25): every ratio and time the section quotes, the GPU tests' counts
    from their logs, and the library's table as the runs decided it."""
    from attnlab.gpu import config as C

    section, runs = _block_m_runs()
    text = _flat(section)

    def x(n, row, arm, key="vs_first"):
        (r,) = [r for r in runs[n] if r["row"] == row and r["arm"] == arm]
        return r[key]

    dense = ("causal", "full", "long", "gqa")
    g128 = [x(n, row, "g128") for n in (1, 2) for row in dense]
    g128s = [x(1, row, "g128s") for row in dense]
    assert max(g128) < 1 and max(g128s) < 1 and max(x(n, "varlen", "g128") for n in (1, 2)) < 1
    assert (f"{min(g128):.3f}–{max(g128):.3f}× the 64-row build on the dense rows of runs 1 and 2 "
            f"({min(g128s):.3f}–{max(g128s):.3f}× with dQ shared), {x(2, 'varlen', 'g128'):.3f}× and "
            f"{x(1, 'varlen', 'g128'):.3f}× on the packed batch") in text
    assert all(e.block_m1 == 64 for e in C._GLUON_BWD_TABLE.values())  # no entry takes 128 rows
    ms = {k: x(2, *k, key="ms") for k in (("varlen", "table"), ("varlen", "g64lag0"), ("short", "table"),
                                          ("short", "g64lag0"))}
    assert ms["varlen", "g64lag0"] < ms["varlen", "table"] and ms["short", "g64lag0"] < ms["short", "table"]
    assert (f"the packed batch {ms['varlen', 'table']:.3f} ms on the Triton kernels against {ms['varlen', 'g64lag0']:.3f} "
            f"on `g64lag0`, 16 × 1K {ms['short', 'table']:.3f} against {ms['short', 'g64lag0']:.3f} "
            f"({x(2, 'short', 'table', 'x_peer'):.3f}× cuDNN against {x(2, 'short', 'g64lag0', 'x_peer'):.3f}×)") in text
    assert (f"the library's packed backward {x(3, 'varlen', 'table', 'ms'):.3f} ms, its 16 × 1K backward "
            f"{x(3, 'short', 'table', 'ms'):.3f} ms, {x(3, 'short', 'table', 'x_peer'):.3f}× cuDNN") in text
    short = C._GLUON_BWD_TABLE[64, True, "short"]
    assert short.gluon and short.dq_lag == 0 and C._GLUON_BWD_TABLE[64, True, "long"].dq_lag == 2
    lag0 = [x(n, row, "g64lag0") for n in (1, 2, 3) for row in ("causal", "long")]
    gqa = [x(n, "gqa", "g64lag0") for n in (1, 2, 3)]
    assert (f"without it the 4K and 16K causal rows ran at {min(lag0):.3f}–{max(lag0):.3f}×, GQA at "
            f"{min(gqa):.3f}–{max(gqa):.3f}×") in text

    def tf(kind, provider, pass_):
        rows = json.loads((DATA / f"variants-h200-varlen-run25-{kind}.json").read_text())["rows"]
        (r,) = [r for r in rows if r["provider"] == provider and r["pass_"] == pass_]
        return r["tflops"]

    lib, tri, flex = tf("library", "attnlab", "fwd_bwd"), tf("triton", "attnlab", "fwd_bwd"), tf("library", "flex",
                                                                                                  "fwd_bwd")
    assert lib > tri
    assert (f"forward+backward of the packed batch at D = 64 {lib:.0f} TFLOP/s against {tri:.0f} on the Triton kernels, "
            f"{lib / flex:.2f}× FlexAttention ({flex:.0f}); the forward alone {tf('library', 'attnlab', 'fwd'):.0f} and "
            f"{tf('triton', 'attnlab', 'fwd'):.0f}") in text
    doc = _flat((ROOT / "docs" / "variants.md").read_text())
    assert (f"{lib:.0f} TFLOP/s forward+backward against {tri:.0f} on the Triton kernels, {lib / flex:.2f}× "
            "FlexAttention (variants run 25)") in doc
    gqa = ("gqa2", "gqa", "gqa8", "gqa-4k", "gqa-16k")  # run 4: the lag by group size
    l0, l1 = [x(4, r, "g64lag0") for r in gqa], [x(4, r, "g64lag1") for r in (*gqa, "causal")]
    assert (f"without the lag {min(l0):.3f}–{max(l0):.3f}× on the GQA rows (the 4K row slower), one step behind "
            f"{min(l1):.3f}–{max(l1):.3f}× on every row") in text
    assert x(4, "gqa-4k", "g64lag0") < 1 and max(l1) < 1
    logs = DATA / "bwd-block-m"
    for name in ("checks-run1", "extra-run1", "checks-run3", "extra-run3"):
        last = (logs / f"{name}.log").read_text().strip().splitlines()[-1]
        counts = last.split(", 5 warnings")[0].split(", 3 warnings")[0].split(", 22 warnings")[0]
        assert counts in text, (name, counts)
        assert " failed" not in last and "error" not in last, last


def test_results_bwd_block_m_run_5_is_the_recorded_one():
    """Packed programs from a map of their key blocks (bwd-block-m run 5), measured slower and taken out: the ratios
    the section quotes, and no map left in the library."""
    from attnlab.gpu import prefill_gluon_bwd as gb

    section, runs = _block_m_runs()
    rows = runs[5]

    def x(row, D):
        (r,) = [r for r in rows if r["row"] == row and r["D"] == D and r["arm"] == "table-nomap"]
        return r["vs_first"]

    v, c = [x("varlen", D) for D in (64, 128)], [x("causal", D) for D in (64, 128)]
    assert min(v) > 1
    assert (f"the grid ran at {v[0]:.3f}× and {v[1]:.3f}× the map's speed on the packed batch, {min(c):.3f}–{max(c):.3f}× "
            "on the dense causal rows") in _flat(section)
    assert not hasattr(gb, "PACKED_BLOCK_MAP")


def test_results_bwd_block_m_run_6_is_the_recorded_one():
    """A packed backward's time by document length (bwd-block-m run 6): the table as the script renders it, every ratio
    and the line through the 2,048-key and 4K rows the section quotes, recomputed from the run's rows and the steps and
    programs each row launches; the GPU tests' counts around the packed dQ store's fix, from their logs."""
    mod = load_script("benchmarks/bwd_block_m.py")
    results = _results()
    section = results[results.index("### Bwd-block-m run 6"):results.index("### Bwd-block-m runs 1–5")]
    rows = json.loads((DATA / "bwd-block-m-h200-run6.json").read_text())["rows"]
    assert mod.report(rows) in section
    text = _flat(section)
    r = {(x["row"], x["D"]): x for x in rows}
    lengths = {"pack128": 128, "pack512": 512, "pack2k": 2048, "causal": 4096}

    def programs_steps(row, D):  # documents of one length, 16K tokens, H·D = 2048: key blocks of 128, steps of 64 rows
        n, heads = lengths[row], 2048 // D
        docs = 16384 // n * heads
        return docs * (n // 128), docs * sum((n - 128 * j) // 64 for j in range(n // 128))

    def ratio(row, D):
        return f"{r[row, D]['tflops'] / r['causal', D]['tflops']:.2f}×"

    assert (f"documents of 2,048 keys {ratio('pack2k', 64)} (D = 64) and {ratio('pack2k', 128)} (D = 128), of 512 "
            f"{ratio('pack512', 64)} and {ratio('pack512', 128)}, of 128 {ratio('pack128', 64)} and "
            f"{ratio('pack128', 128)}; the packed batch {ratio('varlen', 64)} and {ratio('varlen', 128)}") in text
    doc = _flat((ROOT / "docs" / "variants.md").read_text())

    def span(row):
        a, b = sorted(r[row, D]["tflops"] / r["causal", D]["tflops"] for D in (64, 128))
        return f"{a:.2f}–{b:.2f}×"

    assert (f"Documents of 2,048 keys run at {span('pack2k')} the TFLOP/s of 4 × 4K, documents of 512 at "
            f"{span('pack512')} and documents of 128 at {span('pack128')}, at D = 64 and 128 alike") in doc
    fits = []
    model = mod.steps_model(rows)  # (the script's line, against the one counted here)
    for D in (64, 128):
        assert len({programs_steps(row, D)[0] for row in lengths}) == 1  # one count of programs per head dim
        assert all(mod.programs_steps(row, D) == programs_steps(row, D) for row in lengths)
        (_, s2k), (_, s4k), (_, s128) = (programs_steps(row, D) for row in ("pack2k", "causal", "pack128"))
        slope = (r["causal", D]["ms"] - r["pack2k", D]["ms"]) / (s4k - s2k)
        a = r["pack2k", D]["ms"] - slope * s2k
        fits.append((a, slope * 1e6, slope * 1e3 * 132, a + slope * s128, r["pack128", D]["ms"]))
        m = model[D]
        assert (m["intercept_ms"], m["ns_per_step"], m["us_per_step_per_sm"], m["pack128_model_ms"],
                m["pack128_ms"]) == pytest.approx(fits[-1], rel=1e-12)
    (a1, n1, u1, p1, m1), (a2, n2, u2, p2, m2) = fits
    assert (f"{a1:.3f} ms + {n1:.1f} ns a step at D = 64, {a2:.3f} ms + {n2:.1f} ns a step at D = 128 ({u1:.2f} and "
            f"{u2:.2f} µs a step on one of 132 SMs) — gives the 128-key rows within 4 % ({p1:.3f} against {m1:.3f} ms, "
            f"{p2:.3f} against {m2:.3f})") in text
    assert max(abs(p / m - 1) for *_, p, m in fits) < 0.04
    assert {f"{a:.1f}" for a, *_ in fits} == {"0.3"} and "costs about 0.3 ms whatever their documents' lengths" in doc
    assert f"{programs_steps('pack128', 64)[1]:,} at D = 64 for documents of 128 to {programs_steps('causal', 64)[1]:,}" \
        in text
    logs = DATA / "packed-fault"
    after = (logs / "blocking-after.log").read_text()
    assert "33 passed, 4 skipped" in after and "failed" not in after and "(33 passed, 4 skipped" in text
    before = (logs / "blocking-before.log").read_text()
    assert "illegal memory access" in before
    assert "gridX = 11, gridY = 10" in before and "grid 11 × 10" in text
    old = (logs / "old-store-memcheck.log").read_text()
    n_old = int(old.split("ERROR SUMMARY: ")[1].split()[0])
    assert n_old > 0 and "Invalid __global__ read" in old and "at _dq_store_tiles" in old
    assert f"made memcheck report {n_old} errors" in text
    mem = (logs / "memcheck-after.log").read_text()
    n_pass = mem.split(" passed")[0].split()[-1]
    assert "ERROR SUMMARY: 0 errors" in mem and " failed" not in mem and f"{n_pass} passed, 0 errors" in text
    dense = (logs / "memcheck-dense-det.log").read_text()
    ids = (logs / "memcheck-ids.txt").read_text().split()
    counts = [ln for ln in dense.splitlines() if " passed" in ln][-1].split(" in ")[0]
    assert "ERROR SUMMARY: 0 errors" in dense and " failed" not in dense
    assert f"{len(ids)} cases" in text and f"{counts}, 0 errors" in text
    assert sum(int(x.split()[0]) for x in counts.split(", ")) == len(ids)
    store = (logs / "store-after.log").read_text()
    assert "4 passed" in store and "failed" not in store


def test_results_bwd_block_m_runs_10_to_12_are_the_recorded_ones():
    """The backward's masked steps from each key row's limits (bwd-block-m runs 10–12): the compact table recomputed
    from runs 11 and 12, run 12's table as the script renders it, the ranges the text quotes, the GPU tests' counts
    from their logs, and the switch as the runs decided it."""
    from attnlab.gpu import prefill_gluon_bwd as gb

    mod = load_script("benchmarks/bwd_block_m.py")
    results = _results()
    section = results[results.index("### Bwd-block-m runs 10–12"):results.index("### Bwd-block-m runs 7–9")]
    runs = {n: {(x["row"], x["D"], x["arm"]): x["vs_first"] for x in json.loads(
        (DATA / f"bwd-block-m-h200-run{n}.json").read_text())["rows"]} for n in (11, 12)}
    assert mod.report(json.loads((DATA / "bwd-block-m-h200-run12.json").read_text())["rows"]) in section
    keys = sorted({(row, D) for (row, D, arm) in runs[11] if arm == "nolimits"})
    assert len(keys) == 12
    for row, D in keys:
        cells = " | ".join(f"{runs[n][row, D, 'nolimits']:.3f}×" if (row, D, "nolimits") in runs[n] else "—"
                           for n in (11, 12))
        assert f"| {row} | {D} | {cells} |" in section, (row, D)
    text = _flat(section)
    packed128 = [runs[n][r, 128, "nolimits"] for n in (11, 12) for r in ("varlen", "pack512")]
    assert f"`nolimits` {min(packed128):.3f}–{max(packed128):.3f}× on the variants' batch" in text and max(packed128) < 1
    dense128 = [runs[n][k] for n in (11, 12) for k in runs[n] if k[1] == 128 and k[2] == "nolimits"
                and k[0] in ("causal", "long", "full")]
    assert f"within 1.5 % on the dense rows ({min(dense128):.3f}–{max(dense128):.3f}×)" in text
    assert max(abs(x - 1) for x in dense128) < 0.015
    long64 = [runs[n]["long", 64, "nolimits"] for n in (11, 12)]
    assert f"ran {long64[0]:.3f}× and {long64[1]:.3f}× faster without it" in text and min(long64) > 1
    for name in ("checks-run10.log", "extra-run10.log"):
        last = (DATA / "bwd-block-m" / name).read_text().strip().splitlines()[-1]
        assert last.split(" in ")[0] in text and "failed" not in last, name
    assert gb.MASK_LIMITS == 2 and gb.MASK_LIMITS_FROM_D == 128


def test_results_bwd_block_m_runs_7_to_9_are_the_recorded_ones():
    """The persistent backward (bwd-block-m runs 7–9): each arm's ratio to the table's backward in the compact table,
    recomputed from the three runs' rows; run 9's table as the script renders it; ncu's long-scoreboard shares from the
    recorded source pages (``ncu_stalls.ledger``); the GPU tests' counts from their logs; docs/gpu.md's range and gain."""
    mod = load_script("benchmarks/bwd_block_m.py")
    stalls = load_script("benchmarks/ncu_stalls.py")
    results = _results()
    section = results[results.index("### Bwd-block-m runs 7–9"):results.index("### Bwd-block-m run 6")]
    runs = {n: {(x["row"], x["D"], x["arm"]): x for x in json.loads((DATA / f"bwd-block-m-h200-run{n}.json")
                                                                   .read_text())["rows"]} for n in (7, 8, 9)}
    assert mod.report(list(runs[9].values())) in section
    arms = [k for k in runs[8] if k[2] != "table"]
    assert set(arms) >= {k for n in (7, 9) for k in runs[n] if k[2] != "table"}
    for row, D, arm in arms:
        cells = " | ".join(f"{runs[n][row, D, arm]['vs_first']:.2f}×" if (row, D, arm) in runs[n] else "—"
                           for n in (7, 8, 9))
        assert f"| {row} | {D} | {arm} | {cells} |" in section, (row, D, arm)
    text = _flat(section)
    bal = {(row, snake): f"{mod.persistent_balance(row, 64, snake=snake):.2f}"
           for row in ("pack512", "pack2k", "causal", "pack128") for snake in (False, True)}
    assert (f"{bal['pack512', False]} for documents of 512 dealt in order, {bal['pack2k', False]} for 2,048 and "
            f"{bal['causal', False]} for 4 × 4K, and {bal['pack128', True]} on every row reversed every other round") in text
    assert len({bal[row, True] for row in ("pack512", "pack2k", "causal", "pack128")}) == 1
    shares = {}
    for tag in ("pack128-p2", "pack128-table", "causal-table"):
        led = stalls.ledger(*stalls.read_source_csv(DATA / f"ncu-bwd-sass-h200-{tag}.csv.gz"))
        shares[tag] = f"{led['by_reason']['stall_long_sb'] / led['total'] * 100:.1f} %"
    assert (f"put {shares['pack128-p2']} of the persistent kernel's stall samples on long-scoreboard waits" in text
            and f"against {shares['pack128-table']} in the table's kernel on the same call and "
                f"{shares['causal-table']} on 4 × 4K" in text)
    logs = DATA / "bwd-block-m"
    for name, counts in (("checks-run8.log", "20 passed"), ("checks-run9.log", "20 passed"),
                         ("checks-run9-first.log", "8 failed, 12 passed")):
        assert counts in (logs / name).read_text().splitlines()[-1], name
    assert "passed in runs 8 and 9 (20 of 20)" in text
    memcheck = (logs / "memcheck-persistent.log").read_text()
    ids = (logs / "memcheck-persistent-ids.txt").read_text().split()
    assert "ERROR SUMMARY: 0 errors" in memcheck and f"{len(ids)} passed" in memcheck
    assert f"{len(ids)} passed, 0 errors" in text and all("persistent_backward_packed_batch" in i and i.endswith("-3]")
                                                          for i in ids)
    ratios = [x["vs_first"] for k, x in runs[9].items() if k[2] != "table"]
    doc = _flat((ROOT / "docs" / "gpu.md").read_text())
    gain = (runs[9]["pack128", 64, "p2"]["vs_first"] - 1) * 100
    assert (f"ran at {min(ratios):.2f}–{max(ratios):.2f}× the table's backward on 16K-token rows: only documents of 128 "
            f"at D = 64 gained ({gain:.0f} %)") in doc
    assert max(ratios) == runs[9]["pack128", 64, "p2"]["vs_first"]
