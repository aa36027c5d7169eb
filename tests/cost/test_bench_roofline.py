"""The roofline columns of the benchmark tables (benchmarks/roofline_columns.py and its use in
benchmarks/prefill.py, decode.py, variants.py): which preset a device gets, ``roofline_ms`` and
``of_roofline`` per row, the table cells — on the CPU, from synthetic rows and from the H200 runs kept
in benchmarks/data (where no measured time may beat the roofline). One GPU test times a kernel."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

from attnlab.cost import GPUS, kv_cache_bytes
from attnlab.cost.decode import decode_roofline
from attnlab.cost.roofline import attention_roofline, varlen_attention_roofline

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "benchmarks" / "data"


def _load(name: str):
    """A script of benchmarks/ as a module (its own folder and src/ go on sys.path, as when it runs)."""
    path = ROOT / "benchmarks" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"bench_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


cols = _load("roofline_columns")
prefill = _load("prefill")
decode = _load("decode")


# -- roofline_columns ------------------------------------------------------------------------------


@pytest.mark.parametrize("device, preset", [
    ("NVIDIA H200", "H200"),
    ("NVIDIA H100 80GB HBM3", "H100"),
    ("NVIDIA A100-SXM4-80GB", "A100"),
    ("NVIDIA A100-SXM4-40GB", "A100-40GB"),  # the more specific preset wins
    ("Tesla V100-SXM2-32GB", "V100"),
    ("NVIDIA B200", "B200"),
    ("NVIDIA GH200 480GB", None),  # a name that contains H200 as part of a word is another chip
    ("NVIDIA GeForce RTX 4090", None),
    (None, None),  # the CPU
])
def test_preset_for_device(device, preset):
    got = cols.preset_for(device)
    assert got is (GPUS[preset] if preset else None)


def test_preset_override_wins_and_is_checked():
    assert cols.preset_for("NVIDIA H200", "h100") is GPUS["H100"]
    assert cols.preset_for(None, "B200") is GPUS["B200"]
    with pytest.raises(ValueError, match="X100"):
        cols.preset_for("NVIDIA H200", "X100")
    with pytest.raises(TypeError, match="device_name"):
        cols.preset_for(200)


def test_roofline_ms_is_the_cost_models_time():
    g = GPUS["H200"]
    kernels = attention_roofline(batch=2, heads=16, seq_q=4096, head_dim=128, causal=True, pass_="fwd_bwd", gpu=g)
    assert len(kernels) == 2
    got = cols.prefill_roofline_ms(batch=2, heads=16, seq=4096, head_dim=128, causal=True, pass_="fwd_bwd", gpu=g)
    assert got == pytest.approx(1e3 * (kernels[0].time + kernels[1].time), rel=1e-12)
    docs = [100, 300, 57]
    packed = varlen_attention_roofline(seqlens_q=docs, heads=4, head_dim=64, causal=True, window=(31, 0), gpu=g)
    got = cols.prefill_roofline_ms(batch=1, heads=4, seq=sum(docs), head_dim=64, causal=True, pass_="fwd", gpu=g,
                                   window=(31, 0), seqlens=docs)
    assert got == pytest.approx(1e3 * packed[0].time, rel=1e-12)
    step = decode_roofline(batch=16, heads=32, kv_heads=8, seq=32768, head_dim=128, gpu=g)
    assert cols.decode_roofline_ms(batch=16, heads=32, kv_heads=8, seq=32768, head_dim=128, gpu=g) == pytest.approx(
        1e3 * step.time, rel=1e-12)


def test_add_fraction():
    row = {"ms": 2.5, "graph_ms": 2.0, "of_roofline": 9.0}
    cols.add_fraction(row, 1.0, measured=(("ms", "of_roofline"), ("graph_ms", "graph_of_roofline")))
    assert row == {"ms": 2.5, "graph_ms": 2.0, "roofline_ms": 1.0, "of_roofline": 1.0 / 2.5,
                   "graph_of_roofline": 1.0 / 2.0}
    skipped = {"skipped": "refused", "of_roofline": 0.5}  # a fraction from another preset goes
    assert cols.add_fraction(skipped, 0.25) == {"skipped": "refused", "roofline_ms": 0.25}
    with pytest.raises(ValueError, match="roofline_ms"):
        cols.add_fraction({}, 0.0)
    with pytest.raises(ValueError, match="'ms'"):
        cols.add_fraction({"ms": -1.0}, 1.0)


def test_cells():
    assert cols.percent(0.476) == "48%" and cols.percent(1.0) == "100%"
    assert cols.percent(None) == "—" and cols.percent(None, "-") == "-"
    g = GPUS["H200"]
    text = cols.preset_text(g)
    assert f"{g.tensor_flops / 1e12:.0f} TFLOP/s" in text and f"{g.hbm_bw / 1e12:.2f} TB/s" in text


# -- prefill.py ------------------------------------------------------------------------------------


def _prefill_rows():
    shape = dict(D=64, causal=True, N=1024, pass_="fwd_bwd", B=4, H=8)
    return [dict(shape, provider="attnlab", ms=0.5), dict(shape, provider="sdpa-flash", ms=0.8),
            dict(shape, provider="flex", skipped="RuntimeError: refused")]


def test_prefill_rows_and_markdown():
    g = GPUS["H200"]
    rows = prefill.with_roofline(_prefill_rows(), g)
    want = cols.prefill_roofline_ms(batch=4, heads=8, seq=1024, head_dim=64, causal=True, pass_="fwd_bwd", gpu=g)
    assert all(r["roofline_ms"] == want for r in rows)
    assert [r.get("of_roofline") for r in rows] == [want / 0.5, want / 0.8, None]
    md = prefill.markdown(rows).splitlines()
    head = [c.strip() for c in md[0].strip("|").split("|")]
    cells = [c.strip() for c in md[2].strip("|").split("|")]
    assert head[-4:] == ["roofline ms", "attnlab %", "sdpa-flash %", "flex %"]
    assert cells[-4:] == [f"{want:.3g}", cols.percent(want / 0.5), cols.percent(want / 0.8), "—"]
    bare = prefill.markdown(prefill.with_roofline(_prefill_rows(), None))  # no preset: the table as before
    assert "roofline" not in bare and bare.splitlines()[0].endswith("| ÷ cudnn |")


def test_prefill_share_at_the_clock_it_ran():
    """Rows that noted the SM clock after each time (``--clocks``) get the clocks' median and attnlab's share of the
    roofline at that clock; the columns show only where asked (``at_clock``), and a preset without a known clock, or
    rows without clocks, get none."""
    g = GPUS["H200"]
    rows = _prefill_rows()
    rows[0]["gpu_state"] = [{"sm_mhz": 1980.0, "power_w": 150.0}, {"sm_mhz": 1464.0, "power_w": 690.0},
                            {"sm_mhz": 1500.0, "power_w": 700.0}]
    rows[1]["gpu_state"] = [None, {"sm_mhz": 1700.0, "power_w": 650.0}]
    prefill.with_roofline(rows, g)
    at = cols.prefill_roofline_ms(batch=4, heads=8, seq=1024, head_dim=64, causal=True, pass_="fwd_bwd",
                                  gpu=g.at_clock(1500.0))
    assert rows[0]["sm_mhz"] == 1500.0 and rows[0]["clock_of_roofline"] == at / 0.5
    assert rows[0]["clock_of_roofline"] > rows[0]["of_roofline"]  # below the quoted clock: the limit is lower
    assert rows[1]["sm_mhz"] == 1700.0 and "sm_mhz" not in rows[2]
    assert rows[0]["roofline_ms"] == cols.prefill_roofline_ms(batch=4, heads=8, seq=1024, head_dim=64, causal=True,
                                                              pass_="fwd_bwd", gpu=g)  # the preset's stays
    md = prefill.markdown(rows, at_clock=True).splitlines()
    head = [c.strip() for c in md[0].strip("|").split("|")]
    cells = [c.strip() for c in md[2].strip("|").split("|")]
    assert head[-2:] == ["attnlab MHz", "attnlab % at its clock"] and cells[-2:] == ["1500", cols.percent(at / 0.5)]
    assert prefill.markdown(rows) == prefill.markdown(prefill.with_roofline(_prefill_rows(), g))  # not asked: as before
    assert "roofline at that clock" in prefill.roofline_note(g, True) and "1830 MHz" in prefill.roofline_note(g, True)
    assert prefill.roofline_note(g) == prefill.roofline_note(g, False) and "clock" not in prefill.roofline_note(g)
    unknown = prefill.with_roofline([dict(r) for r in rows], GPUS["B200"])
    assert not any("clock_of_roofline" in r or "sm_mhz" in r for r in unknown)  # (the earlier preset's dropped)
    assert "at its clock" not in prefill.markdown(unknown, at_clock=True)


def test_prefill_gqa_grid_and_its_errors():
    """``--gqa G``: every row has H / G K/V heads (H = 2048 / D); a G that does not divide H, or is not a
    positive int, is refused before anything runs."""
    rows = list(prefill.grid(False, Ds=(64, 128), Ns=(4096,), group=4))
    assert {(r["D"], r["H"], r["Hkv"]) for r in rows} == {(64, 32, 8), (128, 16, 4)}
    assert all(r["B"] * r["N"] == prefill.TOKENS for r in rows)
    assert all(r["Hkv"] == r["H"] for r in prefill.grid(False, Ns=(1024,)))
    for bad in (0, -2, 1.5, True):
        with pytest.raises(ValueError, match="positive int"):
            list(prefill.grid(False, group=bad))
    with pytest.raises(ValueError, match="does not divide the 16 query heads"):
        list(prefill.grid(False, Ds=(128,), group=3))


def test_prefill_gqa_rows_roofline_and_markdown():
    """GQA rows: the roofline moves K and V per K/V head (less than the same shape's MHA roofline), the table
    gets a heads column and the ratio to PyTorch's own SDPA choice, and a peer that ran on K/V repeated to the
    query heads is starred."""
    g = GPUS["H200"]
    shape = dict(D=64, causal=False, N=1024, pass_="fwd", B=16, H=32, Hkv=8)
    rows = [dict(shape, provider="attnlab", ms=0.5, tflops=2.0), dict(shape, provider="sdpa", ms=0.6, tflops=1.0),
            dict(shape, provider="sdpa-cudnn", ms=0.8, tflops=4.0, kv="repeated")]
    prefill.with_roofline(rows, g)
    gqa = cols.prefill_roofline_ms(batch=16, heads=32, kv_heads=8, seq=1024, head_dim=64, causal=False, pass_="fwd",
                                   gpu=g)
    mha = cols.prefill_roofline_ms(batch=16, heads=32, seq=1024, head_dim=64, causal=False, pass_="fwd", gpu=g)
    assert rows[0]["roofline_ms"] == gqa and gqa <= mha
    md = prefill.markdown(rows).splitlines()
    head = [c.strip() for c in md[0].strip("|").split("|")]
    cells = dict(zip(head, (c.strip() for c in md[2].strip("|").split("|"))))
    assert head[:5] == ["D", "heads", "causal", "N", "pass"]
    assert cells["heads"] == "32/8" and cells["sdpa-cudnn"] == "4*" and cells["sdpa"] == "1"
    assert cells["÷ sdpa"] == "2.00" and cells["÷ cudnn"] == "0.50" and cells["÷ sdpa-flash"] == "—"
    mha_md = prefill.markdown([dict(shape, Hkv=32, provider="attnlab", ms=0.5, tflops=2.0)])
    assert "heads" not in mha_md and "÷ sdpa |" not in mha_md


def test_prefill_several_groups_in_one_table(capsys):
    """``--gqa 1 4``: the multi-head rows and the GQA rows of every shape in one table, the multi-head ones first in
    each pass, every row with its heads; a group given twice, or one that does not divide the heads, is refused
    before anything runs."""
    g = GPUS["H200"]
    rows = []
    for group in (4, 1):  # (timed in either order: the table sorts them)
        for cfg in prefill.grid(False, Ds=(128,), Ns=(8192,), causals=(True,), group=group):
            rows += [dict(cfg, provider="attnlab", ms=1.0, tflops=500.0 + group),
                     dict(cfg, provider="sdpa-cudnn", ms=1.1, tflops=490.0)]
    md = prefill.markdown(prefill.with_roofline(rows, g)).splitlines()
    head = [c.strip() for c in md[0].strip("|").split("|")]
    lines = [dict(zip(head, (c.strip() for c in ln.strip("|").split("|")))) for ln in md[2:]]
    assert [(r["heads"], r["pass"], r["attnlab"]) for r in lines] == [
        ("16/16", "fwd", "501"), ("16/4", "fwd", "504"), ("16/16", "fwd+bwd", "501"), ("16/4", "fwd+bwd", "504")]
    assert [r["÷ cudnn"] for r in lines] == [f"{501 / 490:.2f}", f"{504 / 490:.2f}"] * 2
    for argv, why in ((["bench", "--gqa", "4", "4"], "each group once"), (["bench", "--gqa", "1", "3"], "--gqa 3"),
                      (["check", "--gqa", "0"], "--gqa 0")):
        with pytest.raises(SystemExit) as e:
            prefill.main(argv)
        assert e.value.code == 2 and why in capsys.readouterr().err


def test_prefill_gqa_check_on_the_cpu():
    """``prefill.py check --gqa 2`` (Triton's interpreter, tiny shapes): each K/V head with the query heads that
    read it against float64, out, dq, dk and dv within the criterion."""
    import subprocess
    import sys

    res = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "prefill.py"), "check", "--gqa", "2"],
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    rows = [ln for ln in res.stdout.splitlines() if ln.startswith("D=")]
    assert len(rows) == 2 and all("H=4 Hkv=2" in ln and ln.endswith("ok=True") for ln in rows)
    assert "check: 2/2 shapes pass" in res.stdout


def test_prefill_report_of_the_h200_run(capsys):
    """Run 3 on the H200: no provider beats the roofline, and since every row is compute-bound its share
    is TFLOP/s over the tensor peak — exactly for full attention, times (N+1)/N for causal (the roofline
    counts the N(N+1)/2 visible pairs, the TFLOP/s the convention N²/2)."""
    saved = json.loads((DATA / "prefill-h200-run3.json").read_text())
    g = cols.preset_for(saved["environment"]["gpu"])
    assert g is GPUS["H200"]
    rows = prefill.with_roofline(saved["rows"], g)
    timed = [r for r in rows if "ms" in r]
    assert len(timed) >= 100
    for r in timed:
        assert 0 < r["of_roofline"] <= 1, r
        share = r["tflops"] * 1e12 / g.tensor_flops * ((r["N"] + 1) / r["N"] if r["causal"] else 1.0)
        assert r["of_roofline"] == pytest.approx(share, rel=1e-9), r
    assert prefill.main(["report", str(DATA / "prefill-h200-run3.json")]) == 0
    out = capsys.readouterr().out
    assert prefill.roofline_note(g) in out
    first = next(r for r in timed if r["provider"] == "attnlab")
    line = next(ln for ln in out.splitlines() if ln.startswith(f"| {first['D']} |")
                and f"| {first['pass_'].replace('_', '+')} |" in ln
                and f"| {first['N'] // 1024}K |" in ln and f"| {'yes' if first['causal'] else 'no'} |" in ln)
    assert f"| {first['roofline_ms']:.3g} | {cols.percent(first['of_roofline'])} |" in line


def test_aot_markdown_takes_gluon_rows():
    """``prefill.py aot``'s table: a Gluon row (from the PTX report: no SASS counts) shows dashes where the
    Triton rows show LDL/STL and instruction counts, and an error row keeps its message."""
    triton_row = dict(source="table", D=64, causal=False, kernel="fwd 128x64w8s3", regs=168, stack=0, LDL=0, STL=0,
                      smem_kb=96.0, HGMMA=24, HMMA=0, UTMALDG=9)
    gluon_row = dict(source="table", D=128, causal=True, kernel="bwd gluon-s2-tma-dqsh", smem_kb=224.5, regs=168,
                     stack=104, wgmma_waits=[0, 1], tma_reduces=2, atomics=0)
    error_row = dict(source="sweep", D=128, causal=False, kernel="bwd gluon-s3-tma", error="ValueError: too big")
    lines = prefill.aot_markdown([triton_row, gluon_row, error_row]).splitlines()
    assert lines[2] == "| table | 64 | no | fwd 128x64w8s3 | 168 | 0 | 0/0 | 96.0 | 24 | 0 | 9 |"
    assert lines[3] == "| table | 128 | yes | bwd gluon-s2-tma-dqsh | 168 | 104 | –/– | 224.5 | – | – | – |"
    assert lines[4] == "| sweep | 128 | False | bwd gluon-s3-tma | ValueError: too big |"


def test_aot_gluon_row_from_a_report_or_its_error():
    """``prefill.py aot`` turns a Gluon kernel's sm_90 report into a row (the keys it asks for too), and
    a refused build into the error's first line; either way the row keeps its label, D and causal."""
    calls = []

    def report(D, causal, **kw):
        calls.append((D, causal, kw))
        return dict(smem_kb=128.5, regs=168, stack=0, wait_groups=[0, 1], tma_reduces=2, atomics=0)

    def refused(D, causal, **kw):
        raise ValueError("the Gluon backward takes fewer stages\nsecond line")

    row = prefill._gluon_row(dict(source="table", D=64, causal=True, kernel="bwd g"), report, dict(stages=2),
                             ("tma_reduces",))
    assert calls == [(64, True, dict(stages=2))]
    assert row == dict(source="table", D=64, causal=True, kernel="bwd g", smem_kb=128.5, regs=168, stack=0,
                       wgmma_waits=[0, 1], tma_reduces=2)
    row = prefill._gluon_row(dict(source="sweep", D=128, causal=False, kernel="bwd h"), refused, {})
    assert row["error"] == "ValueError: the Gluon backward takes fewer stages" and "smem_kb" not in row


def test_prefill_cli():
    with pytest.raises(SystemExit) as e:
        prefill.main(["--help"])
    assert e.value.code == 0
    with pytest.raises(SystemExit) as e:
        prefill.main(["report", "x.json", "--gpu", "X100"])
    assert e.value.code == 2


# -- decode.py -------------------------------------------------------------------------------------


def test_decode_rows_of_the_h200_run():
    """Run 4 on the H200: decode is memory-bound, so each share is the measured KV bandwidth over the
    preset's, scaled by the bytes the roofline moves beyond the cache (q and o); none beats it."""
    result = json.loads((DATA / "decode-h200-run4.json").read_text())
    g = cols.preset_for(result["environment"]["gpu"])
    decode.with_roofline(result, g)
    assert result["roofline_gpu"] == "H200"
    timed = [r for r in result["rows"] if "ms" in r]
    assert len(timed) >= 50
    for r in timed:
        B, H, Hkv, L, D = (r[k] for k in ("B", "H", "Hkv", "L", "D"))
        assert r["roofline_ms"] == cols.decode_roofline_ms(batch=B, heads=H, kv_heads=Hkv, seq=L, head_dim=D, gpu=g)
        cache = kv_cache_bytes(layers=1, seq=L, batch=B, kv_heads=Hkv, head_dim=D, dtype_bytes=2)
        extra = (cache + 2 * B * H * D * 2) / cache  # q read and o written
        for bw_key, frac_key in (("tb_per_s", "of_roofline"), ("graph_tb_per_s", "graph_of_roofline")):
            assert r[frac_key] == pytest.approx(r[bw_key] * 1e12 / g.hbm_bw * extra, rel=1e-9)
            assert 0 < r[frac_key] <= 1, r
    summary = decode.summary_rows(result, "graph_tb_per_s")
    row = next(r for r in result["rows"] if r["provider"] == "sdpa-cudnn" and "graph_ms" in r)
    d = next(d for d in summary if (d["B"], d["H"], d["Hkv"], d["L"]) == (row["B"], row["H"], row["Hkv"], row["L"]))
    assert d["roofline_ms"] == row["roofline_ms"] and d["sdpa-cudnn:roof"] == row["graph_of_roofline"]


def test_decode_markdown_and_table():
    from rich.console import Console

    result = json.loads((DATA / "decode-h200-run4.json").read_text())
    bare = decode.markdown(json.loads(json.dumps(result)))
    assert "roofline" not in bare
    decode.with_roofline(result, GPUS["H200"])
    md = decode.markdown(result)
    assert "`attnlab.cost.decode.decode_roofline` on " + cols.preset_text(GPUS["H200"]) in md
    head = next(ln for ln in md.splitlines() if ln.startswith("| B | H/Hkv |"))
    provs = decode._providers(result)
    assert head.endswith("| roofline µs | " + " | ".join(f"{p} %" for p in provs) + " |")
    d = decode.summary_rows(result, "tb_per_s")[0]
    line = next(ln for ln in md.splitlines() if ln.startswith(f"| {d['B']} | {d['H']}/{d['Hkv']} | {d['L'] // 1024}K |"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[-len(provs) - 1:] == [f"{d['roofline_ms'] * 1e3:.1f}", *(cols.percent(d.get(p + ":roof"), "–")
                                                                         for p in provs)]
    console = Console(width=200, record=True)
    decode.table(result, console=console)
    text = console.export_text()
    assert "roofline µs" in text and "…" not in text  # 200 columns hold every cell
    assert f"{d['attnlab']:.2f} {cols.percent(d['attnlab:roof'])}" in text


def test_decode_cli(capsys):
    with pytest.raises(SystemExit) as e:
        decode.main(["--help"])
    assert e.value.code == 0
    assert decode.main(["--report", str(DATA / "decode-h200-run4.json"), "--gpu", "h100"]) == 0
    assert cols.preset_text(GPUS["H100"]) in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        decode.main(["--report", "x.json", "--gpu", "X100"])
    assert e.value.code == 2


# -- decode_host.py --------------------------------------------------------------------------------


def test_decode_host_report_of_the_h200_run(capsys, tmp_path):
    """decode_host.py's eager/graph table of run 6 with the roofline beside each row: the decode roofline
    of the shape on the H200 preset, each call's share of it (never above 1), and clear refusals of files
    that are not a recorded run."""
    host = _load("decode_host")
    path = DATA / "decode-host-h200-run6.json"
    assert host.main(["--report", str(path)]) == 0
    out = capsys.readouterr().out
    assert cols.preset_text(GPUS["H200"]) in out
    result = json.loads(path.read_text())
    for r in result["speed"]:
        roof_us = cols.decode_roofline_ms(batch=r["B"], heads=r["H"], kv_heads=r["Hkv"], seq=r["L"], head_dim=r["D"],
                                          gpu=GPUS["H200"]) * 1e3
        head = f"| {r['B']} | {r['H']}/{r['Hkv']} | {r['L']} | {r['D']} | {r['provider']} | {r['eager_us']:.1f} | "
        line = next(ln for ln in out.splitlines() if ln.startswith(head))
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert cells[-3:] == [f"{roof_us:.1f}", cols.percent(roof_us / r["eager_us"]), cols.percent(roof_us / r["graph_us"])]
        assert roof_us < r["graph_us"] <= r["eager_us"] * 1.001
    (tmp_path / "x.json").write_text("[1, 2]")
    (tmp_path / "bad.json").write_text("{")
    for bad in (tmp_path / "x.json", tmp_path / "bad.json", tmp_path / "none.json"):
        with pytest.raises(SystemExit) as e:
            host.main(["--report", str(bad)])
        assert e.value.code == 2


def test_decode_host_report_shows_the_pdl_rounds(capsys):
    """Run 8's A/B of the merge kernel's launch: every round of every shape, each way, as recorded."""
    host = _load("decode_host")
    path = DATA / "decode-host-h200-run8.json"
    assert host.main(["--report", str(path)]) == 0
    out = capsys.readouterr().out
    rows = json.loads(path.read_text())["pdl"]
    assert len(rows) == 16 and {r["pdl"] for r in rows} == {False, True}
    for r in rows:
        assert (f"| {r['B']} | {r['H']}/{r['Hkv']} | {r['L']} | {r['D']} | {'yes' if r['pdl'] else 'no'} | "
                f"{r['round'] + 1} | {r['graph_us']:.1f} | {r['eager_us']:.1f} |") in out


# -- variants.py -----------------------------------------------------------------------------------


def test_variant_rows_and_report():
    variants = _load("variants")
    g = GPUS["H200"]
    lengths = variants.doc_lengths(4096)
    window = dict(variant="window", D=64, H=32, N=4096, pass_="fwd")
    varlen = dict(variant="varlen", D=64, H=32, N=4096, pass_="fwd_bwd", lengths=lengths)
    w = variants.roofline_ms(window, g)
    assert w == pytest.approx(1e3 * attention_roofline(heads=32, seq_q=4096, head_dim=64, causal=True,
                                                       window=(variants.WINDOW - 1, 0), gpu=g)[0].time, rel=1e-12)
    v = variants.roofline_ms(varlen, g)
    assert v == pytest.approx(1e3 * sum(k.time for k in varlen_attention_roofline(
        seqlens_q=lengths, heads=32, head_dim=64, causal=True, pass_="fwd_bwd", gpu=g)), rel=1e-12)
    # the window's roofline counts only the visible pairs: 4·pairs·D·H FLOPs, the variant's own count
    pairs = variants.visible_pairs("window", 4096)
    assert attention_roofline(heads=32, seq_q=4096, head_dim=64, causal=True, window=(variants.WINDOW - 1, 0),
                              gpu=g)[0].flops == 4.0 * pairs * 64 * 32
    rows = [dict(window, provider="attnlab", ms=2 * w), dict(window, provider="flex", ms=4 * w),
            dict(window, provider="sdpa-cudnn", ms=8 * w)]
    for r in rows:
        r["tflops"] = 4.0 * pairs * 64 * 32 / (r["ms"] * 1e-3) / 1e12
        cols.add_fraction(r, w)
    table = variants.report(rows).splitlines()
    assert table[0].endswith("| roofline ms | attnlab % | det. % | flex % | SDPA % |")
    assert table[2].endswith(f"| {w:.3g} | {cols.percent(1 / 2)} | — | {cols.percent(1 / 4)} | {cols.percent(1 / 8)} |")
    assert "roofline" not in variants.report([{k: x for k, x in r.items() if "roofline" not in k} for r in rows])


# -- on the GPU: no kernel beats its roofline --------------------------------------------------------


@pytest.mark.gpu
def test_measured_kernels_stay_under_the_roofline():
    """attnlab's prefill forward and decode step on this GPU: the roofline of its preset is below the
    measured time (a share <= 1) and not absurdly far (a share > 0.1: a unit slip would show)."""
    from attnlab.bench import time_fn
    from attnlab.gpu import flash_attention_triton, flash_decode_triton

    g = cols.preset_for(torch.cuda.get_device_name())
    if g is None:
        pytest.skip(f"no attnlab.cost preset for {torch.cuda.get_device_name()}")
    gen = torch.Generator(device="cuda").manual_seed(0)
    B, H, N, D = 1, 16, 4096, 128
    q, k, v = (torch.randn(B, H, N, D, generator=gen, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    ms = time_fn(lambda: flash_attention_triton(q, k, v, causal=True), device="cuda")
    share = cols.prefill_roofline_ms(batch=B, heads=H, seq=N, head_dim=D, causal=True, pass_="fwd", gpu=g) / ms
    assert 0.1 < share <= 1, share
    Bd, Hq, Hkv, L = 16, 32, 8, 32768
    q = torch.randn(Bd, Hq, 1, D, generator=gen, device="cuda", dtype=torch.bfloat16)
    kc, vc = (torch.randn(Bd, Hkv, L, D, generator=gen, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    ms = time_fn(lambda: flash_decode_triton(q, kc, vc), device="cuda")
    share = cols.decode_roofline_ms(batch=Bd, heads=Hq, kv_heads=Hkv, seq=L, head_dim=D, gpu=g) / ms
    assert 0.1 < share <= 1, share
