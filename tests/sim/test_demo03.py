"""Demo 03 (FlashAttention forward on the simulator): every number it prints is returned, comes from a
simulation or a closed form, and matches the lecture's prose (§5.3, §5.5, §6.1–6.3)."""

import math

import pytest

from attnlab import cost
from attnlab._console import make_console
from attnlab.demos import demo03


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    console = make_console(record=True, width=160)
    out_dir = tmp_path_factory.mktemp("demo03")
    res = demo03.run(out_dir=out_dir, console=console)
    return res, console.export_text(), out_dir


def test_counts_equal_closed_forms_and_lecture(demo):
    res, text, _ = demo
    c = res["counts"]
    N, d, B = c["config"]["seq"], c["config"]["head_dim"], c["config"]["block_q"]
    assert (N, d, B) == (256, 64, 64)
    s, f = c["standard"]["totals"], c["flash"]["totals"]
    for t in (s, f):
        for key in ("read_no_cache", "read_ideal", "write_no_cache", "write_ideal"):
            assert t[key] == t[key + "_formula"]
    assert s["total_ideal"] == 4 * (4 * N * d + 4 * N * N) == 4 * cost.io_standard_forward(seq=N, head_dim=d)
    assert f["total_ideal"] == 4 * (4 * N * d + N)
    assert f["total_no_cache"] == 4 * (2 * N * d + 2 * N * d * N // B + N)
    assert f"{c['ideal_ratio']:.1f}" == "5.0"  # §5.3: "理想缓存下差 5.0 倍"
    assert set(c["flash"]["arrays"]) == {"Q", "K", "V", "O", "L"}
    # §5.3 aside: 71,680 vs 616,448 shared-memory wavefronts for these kernel writings
    assert (f["shared_wavefronts"], s["shared_wavefronts"]) == (71_680, 616_448)
    for design in ("standard", "flash"):
        assert 1e-8 < c[design]["error"]["out"] < 1.5e-6  # "4 × 10⁻⁷ 左右"
    for shown in (f"{c['ideal_ratio']:.1f}×", f"{s['total_ideal']:,}", f"{f['total_ideal']:,}", "616,448", "71,680",
                  f"{c['flash']['error']['out']:.1e}"):
        assert shown in text


def test_h100_estimate(demo):
    res, text, _ = demo
    h = res["h100"]
    est = cost.estimate_forward(seq=4096, head_dim=128, heads=32, dtype_bytes=2, gpu="H100", block_q=128)
    assert h == est.to_dict()
    # §5.5: ~1,334 µs vs ~282 µs, 4.7× (2.0× with K/V from HBM)
    assert round(h["standard_time"] * 1e6) == 1334 and round(h["flash_l2_time"] * 1e6) == 282
    assert (f"{h['speedup_l2']:.1f}", f"{h['speedup_hbm']:.1f}") == ("4.7", "2.0")
    assert f"{h['speedup_l2']:.1f}×" in text and "1,334.1 µs" in text


def test_block_sizes(demo):
    res, text, _ = demo
    rows = cost.block_size_table(head_dim=128, dtype_bytes=2, gpu="H100")
    assert res["block_sizes"] == [r.to_dict() for r in rows]
    assert any(not r["fits"] for r in res["block_sizes"]) and any(r["fits"] for r in res["block_sizes"])


def test_causal_skipping(demo):
    res, text, _ = demo
    c = res["causal"]
    # §6.2: 10/16 pairs, K/V reads 524,288 -> 327,680 bytes at N = 256, B = 64; 51.6% at T = 32
    assert (c["pairs_simulated"], c["pairs_total_simulated"]) == (c["pairs_formula"], c["pairs_total_formula"]) == (10, 16)
    assert (c["kv_bytes_full"], c["kv_bytes_causal"]) == (c["kv_bytes_full_formula"], c["kv_bytes_causal_formula"])
    assert (c["kv_bytes_full"], c["kv_bytes_causal"]) == (524_288, 327_680)
    assert f"{100 * c['fraction_T_large_formula']:.1f}%" == "51.6%" and c["T_large"] == 32
    assert math.isclose(c["fraction_simulated"], (c["T"] + 1) / (2 * c["T"]))
    assert c["error_out"] < 2e-6
    for shown in ("10 / 16", "524,288", "327,680", "51.6%"):
        assert shown in text


def test_fa1_vs_fa2(demo):
    res, text, _ = demo
    f = res["fa1_vs_fa2"]
    sim = f["simulated"]
    for r in sim["rows"]:
        assert (r["fa1_simulated"], r["fa2_simulated"]) == (r["fa1_formula"], r["fa2_formula"]), r
    assert sim["totals"]["fa1_simulated"] > sim["totals"]["fa2_simulated"]
    N, d, B = sim["N"], sim["d"], sim["block"]
    assert sim["totals"]["fa1_simulated"] == 2 * N * d + (N // B) * (3 * N * d + 4 * N)
    # §6.3 at N = 4096, d = 128, B = 128: FA1 ≈ 51.9 M, FA2 ≈ 34.6 M, K/V in L2 ≈ 2.1 M elements
    by_name = {r["algorithm"]: r["elements"] for r in f["formula"]["rows"]}
    assert round(by_name["FlashAttention-1 order"] / 1e6, 1) == 51.9
    assert round(by_name["FlashAttention-2 order"] / 1e6, 1) == 34.6
    assert round(by_name["FA2, K/V in L2"] / 1e6, 1) == 2.1
    assert f["blocks_at_32_heads"] == {"fa1": 32, "fa2": 1024}  # "32 个线程块" vs "1,024 个线程块"
    assert sim["error_out"] < 2e-6
    assert "51.9 M" in text and "1,024 blocks" in text


def test_plot_written(demo):
    res, _, out_dir = demo
    path = out_dir / "demo03_traffic_by_array.png"  # the demoNN_<what>.png scheme
    assert res["plot"] == str(path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000


def test_no_plot_without_out_dir(tmp_path, monkeypatch):
    from io import StringIO

    monkeypatch.chdir(tmp_path)
    res = demo03.run(out_dir=None, console=make_console(file=StringIO()))
    assert "plot" not in res and list(tmp_path.iterdir()) == []  # nothing written anywhere
    assert res["counts"]["ideal_ratio"] > 1


def test_docs_simulator_quotes_what_demo03_returns(demo):
    """docs/simulator.md's table and paragraphs on the lecture's kernels: every count is demo 03's own return value
    (itself checked against the closed forms above), and the memory refusal is the library's message."""
    from pathlib import Path

    from attnlab.sim.kernels import memory

    res, _, _ = demo
    doc = " ".join((Path(__file__).resolve().parents[2] / "docs" / "simulator.md").read_text().split())
    c = res["counts"]
    s, f = c["standard"]["totals"], c["flash"]["totals"]
    assert (f"| HBM bytes, ideal cache | {s['total_ideal']:,} | {f['total_ideal']:,} | 4·(4Nd + 4N²), 4·(4Nd + N): "
            f"ratio {c['ideal_ratio']:.1f}× |") in doc
    assert f"| HBM bytes, no cache | {s['total_no_cache']:,} | {f['total_no_cache']:,} |" in doc
    assert f"| shared wavefronts | {s['shared_wavefronts']:,} | {f['shared_wavefronts']:,} |" in doc
    assert f"| barriers | {s['barriers']:,} | {f['barriers']:,} |" in doc
    errs = [c["standard"]["error"]["out"], c["flash"]["error"]["out"]]
    assert "| max error vs float64 | < 1e-6 | < 1e-6 | float32 rounding |" in doc and 0 < min(errs) <= max(errs) < 1e-6
    assert (f"quotes {f['shared_wavefronts']:,} (flash) vs {s['shared_wavefronts']:,} (standard); these kernels give "
            "exactly those numbers") in doc
    k = res["causal"]
    assert (f"the causal kernel computes {k['pairs_simulated']} of {k['pairs_total_simulated']} block pairs and reads "
            f"{k['kv_bytes_causal']:,} bytes of K/V instead of {k['kv_bytes_full']:,}") in doc
    assert (f"at T = {k['T_large']} the share is {k['pairs_T_large_formula']}/{k['T_large'] ** 2} = "
            f"{100 * k['fraction_T_large_formula']:.1f}%") in doc
    t = res["fa1_vs_fa2"]
    tot = t["simulated"]["totals"]
    assert f"the FA1-order kernel moves {tot['fa1_simulated']:,} elements" in doc
    assert f"against FA2's {tot['fa2_simulated']:,}" in doc
    rows = {r["algorithm"]: r["elements"] for r in t["formula"]["rows"]}
    assert (f"(`cost.forward_io_table`: {rows['FlashAttention-1 order'] / 1e6:.1f} M, "
            f"{rows['FlashAttention-2 order'] / 1e6:.1f} M, {rows['FA2, K/V in L2'] / 1e6:.1f} M elements; "
            f"{t['blocks_at_32_heads']['fa1']} vs {t['blocks_at_32_heads']['fa2']:,} blocks at 32 heads)") in doc
    h = res["h100"]
    std, l2, hbm = (sum(x["time"] for x in h[key]) for key in ("standard", "flash_l2", "flash_hbm"))  # (launches in)
    assert (f"(`cost.estimate_forward`: standard ≈ {std * 1e6:,.0f} µs, flash ≈ {l2 * 1e6:.0f} µs, {std / l2:.1f}×; "
            f"{std / hbm:.1f}× with K/V from HBM)") in doc
    assert f"the lecture's size, N = 256, takes about {c['memory_estimate_bytes'] / 2**20:.0f} MiB" in doc
    try:
        memory.check_forward_memory(seq=100000, head_dim=64, block=64, max_memory=4 * 2**30)
    except ValueError as e:
        message = " ".join(f"attnlab simulate: error: {e}".split())
    assert message in doc and "$ attnlab simulate --seq 100000" in doc
