"""benchmarks/decode_host.py's ``timeline_stats``: kernel times, the gaps between them and the host's period read off
a chrome trace of decode calls, on a made-up trace whose answers are known (the GPU run makes the real one)."""

from __future__ import annotations

import pytest
from tests.helpers import load_script

host = load_script("benchmarks/decode_host.py")


def _trace(calls=15, period=30.0, split=20.0, merge=3.0, gap=1.0, lead=5.0, with_merge=True):
    ev = [{"ph": "X", "cat": "cpu_op", "name": "aten::empty", "ts": 0.0, "dur": 1.0}]  # not a kernel: ignored
    corr = 0
    for i in range(calls):
        t = 100.0 + i * period
        corr += 1
        ev.append({"ph": "X", "cat": "cuda_driver", "name": "cuLaunchKernelEx", "ts": t - lead, "dur": 2.0,
                   "args": {"correlation": corr}})
        ev.append({"ph": "X", "cat": "kernel", "name": "_decode_split_kernel", "ts": t, "dur": split,
                   "args": {"correlation": corr}})
        if with_merge:
            corr += 1
            ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": t + 1.0, "dur": 2.0,
                       "args": {"correlation": corr}})
            ev.append({"ph": "X", "cat": "kernel", "name": "_decode_merge_kernel", "ts": t + split + gap, "dur": merge,
                       "args": {"correlation": corr}})
    ev.append({"ph": "X", "cat": "kernel", "name": "elementwise_kernel", "ts": 5.0, "dur": 1.0})  # not ours
    return {"traceEvents": ev[::-1]}  # (any order)


def test_timeline_of_split_and_merge_calls():
    s = host.timeline_stats(_trace(), skip=3)
    assert s["calls"] == 12
    assert s["split_us"] == 20.0 and s["merge_us"] == 3.0
    assert s["gap_split_merge_us"] == pytest.approx(1.0) and s["gap_merge_split_us"] == pytest.approx(30 - 20 - 1 - 3)
    assert s["gpu_period_us"] == 30.0 and s["host_period_us"] == 30.0 and s["launch_to_start_us"] == 5.0


def test_timeline_of_one_launch_calls_and_a_trace_without_launches():
    s = host.timeline_stats(_trace(with_merge=False, period=25.0), skip=0)
    assert s["merge_us"] is None and s["gap_split_split_us"] == pytest.approx(5.0) and s["gpu_period_us"] == 25.0
    bare = {"traceEvents": [e for e in _trace()["traceEvents"] if e["cat"] == "kernel"]}
    s = host.timeline_stats(bare, skip=0)
    assert "host_period_us" not in s and s["split_us"] == 20.0


def test_timeline_markdown_has_a_cell_per_column():
    rows = [dict(B=1, H=32, Hkv=8, L=32768, D=64, mode="eager", **host.timeline_stats(_trace(), skip=3))]
    lines = host.timeline_markdown(rows)
    assert len(lines) == 3 and lines[2].count("|") == lines[0].count("|")
    assert "| 1 | 32/8 | 32768 | 64 | eager | 12 | 20.0 | 3.0 | 1.0 | 6.0 | 30.0 | 30.0 | 5.0 |" == lines[2]


def test_timeline_markdown_leaves_the_host_columns_of_a_graph_and_the_shape_of_a_reference_empty():
    stats = host.timeline_stats(_trace(), skip=3)
    lines = host.timeline_markdown([dict(B=1, H=32, Hkv=8, L=32768, D=64, mode="graph", **stats),
                                    dict(B=0, H=0, Hkv=0, L=0, D=0, mode="reference", **stats)])
    assert lines[2].endswith("| 30.0 | — | — |") and lines[3].startswith("| — | — | — | — | reference | 12 |")


def test_decode_compare_puts_two_runs_side_by_side():
    dec = load_script("benchmarks/decode.py")
    row = lambda prov, tb, B=1, L=4096: dict(B=B, H=32, Hkv=8, L=L, D=128, provider=prov, graph_tb_per_s=tb)  # noqa: E731
    a = {"split_order": "chunks", "rows": [row("attnlab", 2.0), row("paged64", 1.0), row("sdpa-cudnn", 3.0),
                                           dict(B=1, H=32, Hkv=8, L=4096, provider="sdpa-flash", skipped="no")]}
    b = {"split_order": "strided", "rows": [row("attnlab", 2.5), row("paged64", 0.9), row("sdpa-cudnn", 2.8),
                                            row("attnlab", 4.0, B=16)]}
    md = dec.compare_markdown(a, b, "a.json", "b.json")
    assert "A = a.json (chunks), B = b.json (strided)" in md
    b["graph_merge"], a["graph_merge"] = "auto", "kernel"
    assert "A = a.json (chunks, graphs' merge: kernel), B = b.json (strided, graphs' merge: auto)" in \
        dec.compare_markdown(a, b, "a.json", "b.json")
    b["gluon_split"], a["gluon_split"] = True, False
    assert "A = a.json (chunks, graphs' merge: kernel), B = b.json (strided, graphs' merge: auto, the Gluon split " \
        "kernel)" in dec.compare_markdown(a, b, "a.json", "b.json")
    assert "| 1 | 32/8 | 4096 | attnlab | 2.00 | 2.50 | 1.250 | 2.80 |" in md
    assert "| 1 | 32/8 | 4096 | paged64 | 1.00 | 0.90 | 0.900 | 2.80 |" in md
    assert "sdpa" not in md.split("| call |")[1].replace("cuDNN", "") and "| 16 |" not in md  # own rows in both only


def test_merge_ab_markdown_takes_medians_ratios_and_bit_checks():
    """``merge_ab_markdown``: each arm's rounds, the median's ratio to cuDNN's median (cuDNN µs / arm µs), eager over
    graph, the largest error and whether every round's output equalled the first arm's."""
    rows = []
    for rnd, (g, e) in enumerate(((20.0, 30.0), (22.0, 24.0), (21.0, 26.0))):
        base = {"B": 1, "H": 32, "Hkv": 8, "L": 32768, "D": 64, "round": rnd}
        rows.append({**base, "arm": "merge kernel, 1 row", "rows": 1, "max_err": 1e-3, "same_bits": None,
                     "graph_us": g, "eager_us": e})
        rows.append({**base, "arm": "in-kernel, rows", "rows": 4, "max_err": 2e-3 * (rnd + 1),
                     "same_bits": rnd != 1, "graph_us": g + 1, "eager_us": g + 2})
        rows.append({**base, "arm": "sdpa-cudnn", "graph_us": 21.0 + rnd, "eager_us": 30.0})
    lines = host.merge_ab_markdown(rows)
    body = {ln.split(" | ")[4]: ln.split(" | ") for ln in lines[2:]}
    kernel, fused, cudnn = body["merge kernel, 1 row"], body["in-kernel, rows"], body["sdpa-cudnn"]
    assert kernel[6] == "20.00 / 22.00 / 21.00" and kernel[7] == f"{22.0 / 21.0:.3f}"
    assert kernel[9] == f"{30.0 / 26.0:.3f}" and kernel[10] == f"{26.0 / 21.0:.2f}" and kernel[12] == "— |"
    assert fused[5] == "4" and fused[7] == f"{22.0 / 22.0:.3f}" and fused[8] == "22.00 / 24.00 / 23.00"
    assert fused[11] == "6.0e-03" and fused[12] == "no |"
    assert cudnn[5] == "—" and cudnn[7] == "—" and cudnn[11] == "—"
