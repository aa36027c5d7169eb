"""The batch-1 decode numbers benchmarks/RESULTS.md quotes are those of the recorded H200
run they name (benchmarks/data/decode-host-h200-run6.json): a changed file or a retyped number fails here."""

from __future__ import annotations

import json

from tests.helpers import ROOT, load_script

from attnlab.cost import GPUS

_cols = load_script("benchmarks/roofline_columns.py")
decode_roofline_ms, percent = _cols.decode_roofline_ms, _cols.percent


def _speed(run: int) -> dict:
    r = json.loads((ROOT / "benchmarks" / "data" / f"decode-host-h200-run{run}.json").read_text())
    rows: dict = {}
    for x in r["speed"]:
        rows.setdefault((x["B"], x["H"], x["Hkv"], x["L"], x["D"]), {})[x["provider"]] = x
    return rows


def test_results_table_is_run_6():
    """Every row of RESULTS.md's run 6 table: attnlab's and cuDNN's graph and eager µs, the ratios, and the
    decode roofline of the shape on the H200 preset with each graph call's share of it."""
    text = (ROOT / "benchmarks" / "RESULTS.md").read_text()
    section = text[text.index("### Decode-host runs 4–7"):]
    for (B, H, Hkv, L, D), v in _speed(6).items():
        a, c = v["attnlab"], v["sdpa-cudnn"]
        head = f"| {B} | {H}/{Hkv} | {L} | {D} | {a['graph_us']:.1f} | "
        line = next(ln for ln in section.splitlines() if ln.startswith(head))
        cells = [x.strip() for x in line.strip("|").split("|")]
        roof = decode_roofline_ms(batch=B, heads=H, kv_heads=Hkv, seq=L, head_dim=D, gpu=GPUS["H200"]) * 1e3
        assert cells[6:] == [f"{c['graph_us']:.1f}", f"{c['graph_us'] / a['graph_us']:.2f}", f"{a['eager_us']:.1f}",
                             f"{c['eager_us']:.1f}", f"{a['eager_over_graph']:.2f}", f"{roof:.1f}",
                             percent(roof / a["graph_us"]), percent(roof / c["graph_us"])], line


def test_results_pdl_paragraph_is_run_8():
    """RESULTS.md's run 8 paragraph: per shape, the PDL launch's two rounds against the plain launch's."""
    rows = json.loads((ROOT / "benchmarks" / "data" / "decode-host-h200-run8.json").read_text())["pdl"]
    text = " ".join((ROOT / "benchmarks" / "RESULTS.md").read_text().split())
    shapes = sorted({(r["H"], r["Hkv"], r["L"], r["D"]) for r in rows}, key=lambda s: (s[3] != 128, -s[2]))
    assert len(shapes) == 4
    for shape in shapes:
        g = {(r["pdl"], r["round"]): r["graph_us"] for r in rows if (r["H"], r["Hkv"], r["L"], r["D"]) == shape}
        cell = f"{g[True, 0]:.1f} / {g[True, 1]:.1f} against {g[False, 0]:.1f} / {g[False, 1]:.1f}"
        assert cell in text, (shape, cell)
        assert g[True, 0] > g[False, 0] and g[True, 1] > g[False, 1]  # "slower everywhere", as the text says


def test_results_slab_section_is_run_9():
    """RESULTS.md's decode-host run 9 section: the host rows it quotes and the ratios it draws from them."""
    r = json.loads((ROOT / "benchmarks" / "data" / "decode-host-h200-run9.json").read_text())
    host = {x["call"]: x["host_us"] for x in r["host"]}
    floors = r["floors"]
    text = (ROOT / "benchmarks" / "RESULTS.md").read_text()
    section = " ".join(text[text.index("### Decode-host run 9"):text.index("### Decode-host runs 4–7")].split())
    slab, per_call = host["flash_decode_triton (plan kept)"], host["flash_decode_triton (plan kept), outputs by torch.empty"]
    api = [host["attnlab.flash_decode (plan kept)"], host["attnlab.flash_decode, window (plan kept)"]]
    empty1, cudnn = floors["triton_empty_1_arg, kernel[grid]"], host["SDPA cudnn"]
    for label, v in (("(outputs from slabs)", slab), ("per-call `torch.empty` outputs", per_call),
                     ("`attnlab.flash_decode`, plan kept", api[0]), ("window, plan kept", api[1]),
                     ("SDPA, cuDNN backend", cudnn), ("SDPA, flash backend", host["SDPA flash"]),
                     ("(`kernel[grid]`)", empty1),
                     ("integer pointers", floors["triton_empty_54_args, compiled launcher, int pointers"])):
        assert f"{label} | {v:.1f} |" in section, label
    calls = [slab, *api]
    assert f"took {per_call - slab:.1f} µs ({(1 - slab / per_call) * 100:.0f} %) off the kept plan's call" in section
    assert (f"cost {min(calls) / empty1:.1f}–{max(calls) / empty1:.1f}× an empty Triton launch and "
            f"{min(calls) / cudnn:.2f}–{max(calls) / cudnn:.2f}× SDPA's cuDNN call") in section
    missed = host["  of which: the kept plan's allocations and launch"]
    assert f"{missed:.1f} µs, timed a lookup" in section
    speed = {(x["B"], x["H"], x["Hkv"], x["L"], x["D"], x["provider"]): x for x in r["speed"]}
    ones = [k for k in speed if k[0] == 1 and k[5] == "attnlab"]
    ours = ", ".join(f"{speed[k]['graph_us']:.1f}" for k in ones[:-1]) + f" and {speed[ones[-1]]['graph_us']:.1f}"
    theirs = ", ".join(f"{speed[k[:5] + ('sdpa-cudnn',)]['graph_us']:.1f}" for k in ones[:-1])
    theirs += f" and {speed[ones[-1][:5] + ('sdpa-cudnn',)]['graph_us']:.1f}"
    assert f"batch-1 calls are as in run 6: {ours} µs against cuDNN's {theirs}" in section
    at32k = speed[(1, 32, 8, 32768, 128, "attnlab")]
    assert f"eager at 32K took {at32k['eager_over_graph']:.2f}× its graph time" in section


def test_docs_decode_quotes_run_9():
    host = {x["call"]: x["host_us"] for x in json.loads(
        (ROOT / "benchmarks" / "data" / "decode-host-h200-run9.json").read_text())["host"]}
    floors = json.loads((ROOT / "benchmarks" / "data" / "decode-host-h200-run9.json").read_text())["floors"]
    doc = " ".join((ROOT / "docs" / "decode.md").read_text().split())
    assert (f"an empty one-argument launch {floors['triton_empty_1_arg, kernel[grid]']:.1f} µs) took a kept plan's "
            f"call from {host['flash_decode_triton (plan kept), outputs by torch.empty']:.1f} to "
            f"{host['flash_decode_triton (plan kept)']:.1f} µs in one process") in doc


def test_readme_host_time_is_runs_14_16_18():
    """The README's host time of a kept decode call: both timings of the call in each of runs 14, 16 and 18,
    each over its own run's empty launch."""
    ratios, kept, empty = [], [], []
    for run in (14, 16, 18):
        r = json.loads((ROOT / "benchmarks" / "data" / f"decode-host-h200-run{run}.json").read_text())
        host = {x["call"]: x["host_us"] for x in r["host"]}
        e = r["floors"]["triton_empty_1_arg, kernel[grid]"]
        for call in ("flash_decode_triton (plan kept)", "flash_decode_triton (plan kept), again"):
            ratios.append(host[call] / e)
            kept.append(host[call])
        empty.append(e)
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert (f"costs {min(ratios):.1f}–{max(ratios):.1f}× the host time of an empty Triton kernel launch "
            f"(decode-host runs 14, 16 and 18: {min(kept):.1f}–{max(kept):.1f} against "
            f"{min(empty):.1f}–{max(empty):.1f} µs;") in readme


def _run(run: int) -> dict:
    return json.loads((ROOT / "benchmarks" / "data" / f"decode-host-h200-run{run}.json").read_text())


def _host(run: int) -> dict:
    return {x["call"]: x["host_us"] for x in _run(run)["host"]}


def test_results_eager_merge_section_is_runs_10_to_18():
    """RESULTS.md's decode-host runs 10–18 section: the launch floors and host rows it quotes, the eager
    A/B table of runs 17 and 18 round by round, the kept call's range over runs 14, 16 and 18, and the
    run 18 table with its ratios."""
    text = (ROOT / "benchmarks" / "RESULTS.md").read_text()
    raw = text[text.index("### Decode-host runs 10–18"):text.index("### Decode-host run 9")]
    section = " ".join(raw.split())
    f11, f12, h10 = _run(11)["floors"], _run(12)["floors"], _host(10)
    assert (f"took {f12['triton_empty_55_args, cuLaunchKernel (RawLaunch), int pointers']:.1f} µs against "
            f"{f12['triton_empty_55_args, compiled launcher, int pointers']:.1f} through Triton's launcher (run 12), "
            f"{f11['triton_empty_54_args, cuLaunchKernel (RawLaunch), int pointers']:.1f} against "
            f"{f11['triton_empty_54_args, compiled launcher, int pointers']:.1f} (run 11)") in section
    assert (f"the kept plan's call {h10['flash_decode_triton (plan kept)']:.1f} against "
            f"{h10['flash_decode_triton (plan kept), Triton' + chr(39) + 's launcher']:.1f} µs (run 10)") in section
    steps = {x["step"]: x["host_us"] for x in json.loads(
        (ROOT / "benchmarks" / "data" / "decode-breakdown-h200-run1.json").read_text())["breakdown"]["steps"]}
    assert (f"spent {steps['split launch, Triton' + chr(39) + 's launcher']:.1f} µs of its "
            f"{steps['flash_decode_triton']:.1f} on the split kernel's launch") in section
    for run in (17, 18):
        rows = _run(run)["eager_ab"]
        for shape in ((64, 8, 8192, 128), (28, 4, 20000, 128), (32, 8, 256, 128)):
            rs = [x for x in rows if (x["H"], x["Hkv"], x["L"], x["D"]) == shape]
            assert len(rs) == 6 and all(x["fused"] for x in rs if x["eager_fused"])
            on = [x["us"] for x in rs if x["eager_fused"]]
            off = [x["us"] for x in rs if not x["eager_fused"]]
            roof = decode_roofline_ms(batch=1, heads=shape[0], kv_heads=shape[1], seq=shape[2], head_dim=shape[3],
                                      gpu=GPUS["H200"]) * 1e3
            assert (f"| {run} | {shape[0]}/{shape[1]} | {shape[2]} | {shape[3]} | "
                    f"{' / '.join(f'{v:.1f}' for v in on)} | {' / '.join(f'{v:.1f}' for v in off)} | {roof:.2f} | "
                    f"{percent(roof / min(on))} / {percent(roof / min(off))} |") in raw
    kept = [_host(r)[c] for r in (14, 16, 18) for c in ("flash_decode_triton (plan kept)",
                                                         "flash_decode_triton (plan kept), again")]
    two = [_host(r)["flash_decode_triton (plan kept), merge kernel every call"] for r in (14, 16, 18)]
    empty = [_run(r)["floors"]["triton_empty_1_arg, kernel[grid]"] for r in (14, 16, 18)]
    again = [_host(r)["flash_decode_triton (plan kept), again"] for r in (14, 16, 18)]
    assert (f"{min(kept):.1f}–{max(kept):.1f} µs of host time, against {min(two):.1f}–{max(two):.1f} µs with the "
            f"merge kernel on every call in the same processes; an empty one-argument Triton launch cost "
            f"{min(empty):.1f}–{max(empty):.1f} µs there") in section
    assert f"came to {min(again):.1f}–{max(again):.1f} µs, about the bar, the first up to {max(kept):.1f}" in section
    assert min(again) < 20 < max(kept) and max(again) < 21
    assert min(x["us"] for x in _run(17)["eager_ab"] if x["L"] == 256) > 20  # "no call came under it"
    for (B, H, Hkv, L, D), v in _speed(18).items():
        a, c = v["attnlab"], v["sdpa-cudnn"]
        roof = decode_roofline_ms(batch=B, heads=H, kv_heads=Hkv, seq=L, head_dim=D, gpu=GPUS["H200"]) * 1e3
        assert (f"| {B} | {H}/{Hkv} | {L} | {D} | {a['graph_us']:.1f} | {c['graph_us']:.1f} | "
                f"{c['graph_us'] / a['graph_us']:.2f} | {a['eager_us']:.1f} | {c['eager_us']:.1f} | "
                f"{a['eager_over_graph']:.2f} | {roof:.1f} | {percent(roof / a['graph_us'])} | "
                f"{percent(roof / a['eager_us'])} | {percent(roof / c['graph_us'])} |") in raw


def test_docs_decode_quotes_the_eager_merge_runs():
    """docs/decode.md's merge paragraph: run 12's sweep at 28/4 heads (merge kernel against fused, 32 splits, large
    configuration) and the eager A/B ranges of runs 17 and 18 on the shapes that merge in the split kernel."""
    doc = " ".join((ROOT / "docs" / "decode.md").read_text().split())
    sweep = {(x["H"], x["config"], x["splits"]): x["graph_us"] for x in _run(12)["sweep"]}
    assert (f"{sweep[28, 'large', 32]:.1f} against {sweep[28, 'large, fused merge', 32]:.1f} µs at 28/4 heads, "
            "20,000 keys, 32 splits; decode-host run 12") in doc
    rows = [x for r in (17, 18) for x in _run(r)["eager_ab"] if x["L"] in (8192, 20000) and x["H"] in (64, 28)]
    on = [x["us"] for x in rows if x["eager_fused"]]
    off = [x["us"] for x in rows if not x["eager_fused"]]
    assert f"{min(on):.1f}–{max(on):.1f} against {min(off):.1f}–{max(off):.1f} µs per eager call" in doc
    kept = [_host(r)[c] for r in (14, 16, 18) for c in ("flash_decode_triton (plan kept)",
                                                         "flash_decode_triton (plan kept), again")]
    assert f"call at 256 keys to {min(kept):.1f}–{max(kept):.1f} µs" in doc


def test_results_full_cache_section_is_runs_19_and_20():
    """RESULTS.md's decode-host runs 19 and 20: every row (graph µs with and without lengths, cuDNN's, the ratios,
    the roofline and its shares) and the ranges the text draws from the batch-1 rows."""
    text = (ROOT / "benchmarks" / "RESULTS.md").read_text()
    raw = text[text.index("### Decode-host runs 19 and 20"):text.index("### Decode-host runs 10–18")]
    diff, full, lens, worst = [], [], [], []
    for run in (19, 20):
        for (B, H, Hkv, L, D), v in _speed(run).items():
            a, f, c = v["attnlab"], v["attnlab-full"], v["sdpa-cudnn"]
            roof = decode_roofline_ms(batch=B, heads=H, kv_heads=Hkv, seq=L, head_dim=D, gpu=GPUS["H200"]) * 1e3
            assert (f"| {run} | {B} | {H}/{Hkv} | {L} | {D} | {a['graph_us']:.1f} | {f['graph_us']:.1f} | "
                    f"{c['graph_us']:.1f} | {c['graph_us'] / a['graph_us']:.2f} | {c['graph_us'] / f['graph_us']:.2f} | "
                    f"{roof:.1f} | {percent(roof / f['graph_us'])} | {percent(roof / c['graph_us'])} |") in raw
            if B == 1:
                d = round(a["graph_us"], 1) - round(f["graph_us"], 1)
                diff.append(d)
                worst.append((d, H))
                full.append(c["graph_us"] / f["graph_us"])
                lens.append(c["graph_us"] / a["graph_us"])
    section = " ".join(raw.split())
    assert f"{min(diff):.1f}–{max(diff):.1f} µs a call at batch 1 (the most at 64/8 heads" in section
    assert all(h == 64 for d, h in worst if d == max(diff))
    assert (f"attnlab runs at {min(full):.2f}–{max(full):.2f}× cuDNN's speed under CUDA graphs on the four batch-1 "
            f"shapes; with lengths {min(lens):.2f}–{max(lens):.2f}×") in section


def test_results_pdl_eager_section_is_runs_21_to_23():
    """RESULTS.md's decode-host runs 21–23 section: breakdown run 4's table and the figures drawn from it, the PDL
    table of runs 22 and 23 row by row with the counts and ranges of its text, and the eager/graph ranges."""
    text = (ROOT / "benchmarks" / "RESULTS.md").read_text()
    raw = text[text.index("### Decode-host runs 21–23"):text.index("### Decode-host runs 19 and 20")]
    section = " ".join(raw.split())
    steps = {x["step"]: x["host_us"] for x in json.loads(
        (ROOT / "benchmarks" / "data" / "decode-breakdown-h200-run4.json").read_text())["breakdown"]["steps"]}
    for name, us in steps.items():
        assert f"| {name} | {us:.1f} |" in raw, name
    assert f"a kept call takes {steps['attnlab.flash_decode']:.1f} µs through `attnlab.flash_decode`" in section
    assert steps["attnlab.flash_decode"] < 20
    assert (f"{steps['decode.plan_key']:.1f} against {steps['the key from tensor_key tuples (before)']:.1f} µs "
            "for the key as it was built before") in section
    launch = steps["the split kernel's launch"]
    assert f"The launch ({launch:.1f} µs)" in section
    faster, slower, graph_slower = [], [], 0
    for run, mode in ((22, True), (23, "eager")):
        rows = [r for r in _run(run)["pdl"] if r["L"] == 32768]
        for D in (128, 64):
            for rnd in (0, 1):
                g = {r["pdl"]: r for r in rows if r["D"] == D and r["round"] == rnd}
                assert (f"| {run} | 32/8 | 32768 | {D} | {rnd + 1} | {g[False]['eager_us']:.1f} | "
                        f"{g[mode]['eager_us']:.1f} | {g[False]['graph_us']:.1f} | {g[True]['graph_us']:.1f} |") in raw
                d = round(g[False]["eager_us"], 1) - round(g[mode]["eager_us"], 1)
                (faster if d > 0 else slower).append(d)
                graph_slower += g[True]["graph_us"] > g[False]["graph_us"]
    assert len(faster) == 7 and len(slower) == 1 and graph_slower == 8
    assert f"faster eagerly in 7 of the 8 pairs, by {min(faster):.1f}–{max(faster):.1f} µs" in section
    ratio = {run: {s[4]: v["attnlab"]["eager_over_graph"] for s, v in _speed(run).items() if s[:4] == (1, 32, 8, 32768)}
             for run in (21, 22, 23)}
    d128, d64 = [ratio[r][128] for r in ratio], [ratio[r][64] for r in ratio]
    assert f"eager/graph ratio is {min(d128):.2f}–{max(d128):.2f} (runs 21–23)" in section
    assert f"tables say {min(d64):.2f}–{max(d64):.2f}" in section
    ab = [x["us"] for x in _run(21)["eager_ab"] if x["L"] == 32768 and x["D"] == 64]
    assert f"took {min(ab):.1f}–{max(ab):.1f} µs (run 21, six rounds; its graph " \
           f"{_speed(21)[1, 32, 8, 32768, 64]['attnlab']['graph_us']:.1f})" in section
    p22 = {r["round"]: [x["eager_us"] for x in _run(22)["pdl"] if x["D"] == 64 and x["round"] == r["round"]]
           for r in _run(22)["pdl"]}
    assert (f"{min(p22[0]):.1f}–{max(p22[0]):.1f} in run 22's first round and {min(p22[1]):.1f}–{max(p22[1]):.1f} "
            "in its second") in section
    p23 = [x["eager_us"] for x in _run(23)["pdl"] if x["D"] == 64]
    assert f"{min(p23):.1f}–{max(p23):.1f} in run 23" in section
    kept = [_host(r)[c] for r in (21, 22, 23) for c in ("flash_decode_triton (plan kept)",
                                                         "flash_decode_triton (plan kept), again")]
    assert f"{min(kept):.1f}–{max(kept):.1f} µs of host time in runs 21–23" in section
    doc = " ".join((ROOT / "docs" / "decode.md").read_text().split())
    assert (f"a kept call took {steps['attnlab.flash_decode']:.1f} µs through `attnlab.flash_decode`, "
            f"{launch:.1f} of them the launch and "
            f"{steps['decode.plan_key']:.1f} the plan key (breakdown run 4)") in doc
    assert f"faster in 7 of 8 eager pairs at 32K, by {min(faster):.1f}–{max(faster):.1f} µs" in doc


def test_results_eager_fused_section_is_run_24():
    """RESULTS.md's decode-host run 24 section and NOTES-decode v13's measured paragraph: every A/B cell from the
    run's JSON, the ranges at D = 64 32K and the merge-kernel call against its graph time."""
    r = json.loads((ROOT / "benchmarks" / "data" / "decode-host-h200-run24.json").read_text())
    assert r["eager_fused_below_us"] == 16.0
    results = (ROOT / "benchmarks" / "RESULTS.md").read_text()
    table = results[results.index("### Decode-host run 24"):results.index("### Decode-host runs 21–23")]
    sec = " ".join(table.split())
    notes = " ".join((ROOT / "benchmarks" / "NOTES-decode.md").read_text().split("### v13 measured")[1].split())
    ab = r["eager_ab"]

    def cells(shape, on):
        return " / ".join(f"{x['us']:.1f}" for x in ab if (x["H"], x["L"], x["D"]) == shape and x["eager_fused"] == on)

    for shape in {(x["H"], x["L"], x["D"]) for x in ab}:
        assert f"| {cells(shape, True)}" in table and f"| {cells(shape, False)} |" in table, shape
    on = [x["us"] for x in ab if (x["H"], x["L"], x["D"]) == (32, 32768, 64) and x["eager_fused"]]
    off = [x["us"] for x in ab if (x["H"], x["L"], x["D"]) == (32, 32768, 64) and not x["eager_fused"]]
    assert max(off) < min(on)
    on_, off_ = f"{min(on):.1f}–{max(on):.1f}", f"{min(off):.1f}–{max(off):.1f}"
    assert f"slower in all three rounds ({on_} against {off_} µs)" in sec
    assert f"took {on_} µs a call against {off_} with the merge kernel" in notes
    graph = next(x for x in r["speed"] if x["D"] == 64 and x["provider"] == "attnlab")
    ratio = f"{min(off) / graph['graph_us']:.2f}–{max(off) / graph['graph_us']:.2f}× its"
    assert f"ran at {ratio} CUDA-graph time ({graph['graph_us']:.1f} µs)" in sec
    assert f"the merge-kernel call at {ratio} graph time, {graph['graph_us']:.1f} µs" in notes
    assert f"({graph['eager_us']:.1f} µs eager, {graph['eager_over_graph']:.2f}×)" in sec
    doc = " ".join((ROOT / "docs" / "decode.md").read_text().split())
    assert f"was slower there: {on_} against {off_} µs, the host already ahead of the GPU (decode-host run 24)" in doc
