"""The batch-1 decode numbers the README and benchmarks/RESULTS.md quote are those of the recorded H200
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


def test_readme_batch_one_range_is_run_6():
    """cuDNN's CUDA-graph time over attnlab's, over the batch-1 rows of run 6."""
    ratios = [v["sdpa-cudnn"]["graph_us"] / v["attnlab"]["graph_us"] for k, v in _speed(6).items() if k[0] == 1]
    readme = (ROOT / "README.md").read_text()
    assert len(ratios) == 4
    assert f"batch 1 with GQA it takes {min(ratios):.2f}–{max(ratios):.2f}× cuDNN's speed under CUDA graphs" in readme
    assert "(decode-host run 6)" in readme


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


def test_readme_host_time_is_run_9():
    r = json.loads((ROOT / "benchmarks" / "data" / "decode-host-h200-run9.json").read_text())
    host = {x["call"]: x["host_us"] for x in r["host"]}
    calls = [host["flash_decode_triton (plan kept)"], host["attnlab.flash_decode (plan kept)"],
             host["attnlab.flash_decode, window (plan kept)"]]
    empty = r["floors"]["triton_empty_1_arg, kernel[grid]"]
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert (f"costs {min(calls) / empty:.1f}–{max(calls) / empty:.1f}× the host time of an empty Triton kernel launch "
            f"(decode-host run 9: {min(calls):.1f}–{max(calls):.1f} against {empty:.1f} µs;") in readme
