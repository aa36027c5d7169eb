"""benchmarks/decode_host.py's L2-cold timings: calls taken in turn over copies of their inputs (``_in_turn``), the
copy count from benchmarks/decode.py's rule, and the L2-cold table and roofline shares rendered from made-up rows
(the GPU run makes the real ones); a run recorded before them renders as it did."""

from __future__ import annotations

import json

import pytest
from tests.helpers import ROOT, load_script, notes_section

host = load_script("benchmarks/decode_host.py")
DATA = ROOT / "benchmarks" / "data"


def test_calls_in_turn():
    a, b, c = (lambda: "a"), (lambda: "b"), (lambda: "c")
    assert host._in_turn(a, 4) == [a, a, a, a]
    assert host._in_turn([a, b, c], 7) == [a, b, c, a, b, c, a]
    assert host._in_turn([a], 2) == [a, a]


def test_copies_cover_three_l2s_from_hbm():
    """Each shape's copies make one pass more than 3× the H200 preset's L2 (and the fewest copies that reach 180 MB),
    so a call's inputs were last read that many bytes ago."""
    from attnlab.cost import get_gpu

    copies = host._decode_bench()._copies
    l2 = get_gpu("H200").l2_bytes
    for B, _H, Hkv, L, D in host.SHAPES:
        nbytes = 2 * B * Hkv * L * D * 2
        n = copies(nbytes, "cuda")
        assert n * nbytes > 3 * l2 and n * nbytes >= 180e6 and (n == 1 or (n - 1) * nbytes < 180e6)
    assert copies(2 * 8 * 8192 * 128 * 2, "cuda") == 6  # 64/8 heads over 8K keys: 33.6 MB a copy
    assert copies(10, "cpu") == 1


def _result(cold: bool) -> dict:
    speed = []
    for provider, eager, graph in (("attnlab", 12.0, 10.0), ("sdpa-cudnn", 40.0, 11.0)):
        r = dict(B=1, H=64, Hkv=8, L=8192, D=128, provider=provider, eager_us=eager, graph_us=graph,
                 eager_over_graph=eager / graph, eager_tb_per_s=33.554432 / eager, graph_tb_per_s=33.554432 / graph)
        if cold:
            r |= dict(copies=6, eager_cold_us=eager + 2.0, graph_cold_us=graph + 1.5,
                      eager_cold_over_graph=(eager + 2.0) / (graph + 1.5), graph_cold_tb_per_s=33.554432 / (graph + 1.5))
        speed.append(r)
    return {"gpu": "NVIDIA H200", "torch": "2.11.0", "triton": "3.6.0", "floors": {"empty": 10.0},
            "host": [{"call": "x", "host_us": 15.0}], "speed": speed}


def test_the_l2_cold_table_and_its_roofline_shares():
    text = host.markdown(_result(cold=True))
    assert "The same calls L2-cold: each call on the next of several copies of the K/V cache" in text
    rows = [ln for ln in text.splitlines() if ln.startswith("| 1 | 64/8 | 8192 | 128 |")]
    assert len(rows) == 4  # the warm table's two rows and the cold table's two
    roof = host.decode_roofline_ms(batch=1, heads=64, kv_heads=8, seq=8192, head_dim=128,
                                   gpu=host.preset_for("NVIDIA H200")) * 1e3
    assert rows[2] == (f"| 1 | 64/8 | 8192 | 128 | attnlab | 6 | 14.0 | 11.5 | {14.0 / 11.5:.2f} | {33.554432 / 11.5:.2f} "
                       f"| {100 * roof / 14.0:.0f}% | {100 * roof / 11.5:.0f}% |")
    result = host.with_roofline(_result(cold=True), host.preset_for("NVIDIA H200"))
    mine = result["speed"][0]
    assert mine["graph_cold_of_roofline"] == roof / 11.5 and mine["cold_of_roofline"] == roof / 14.0
    assert mine["graph_of_roofline"] == roof / 10.0  # (the warm shares as before)


def test_runs_without_cold_times_render_as_before():
    assert "L2-cold" not in host.markdown(_result(cold=False))
    recorded = json.loads((DATA / "decode-host-h200-run35.json").read_text())
    assert "L2-cold" not in host.markdown(recorded)
    assert not any("cold_of_roofline" in r for r in host.with_roofline(recorded, host.preset_for(recorded["gpu"]))["speed"])


def test_notes_v22_quotes_are_computed():
    text = notes_section("NOTES-decode.md", "## v22: ")
    copies = host._decode_bench()._copies
    size = {shape: 2 * shape[0] * shape[2] * shape[3] * shape[4] * 2 for shape in host.SHAPES}
    assert f"64/8 heads over 8K keys ({size[(1, 64, 8, 8192, 128)] / 1e6:.1f} MB of K and V)" in text
    assert f"28/4 over 20,000 ({size[(1, 28, 4, 20000, 128)] / 1e6:.0f} MB)" in text
    from attnlab.cost import get_gpu

    assert f"the H200's {get_gpu('H200').l2_bytes // 2**20} MiB L2" in text
    assert all(size[s] < get_gpu("H200").l2_bytes for s in ((1, 64, 8, 8192, 128), (1, 28, 4, 20000, 128)))
    words = {2: "two", 6: "six"}
    assert (f"{words[copies(size[(1, 64, 8, 8192, 128)], 'cuda')]} of them at 64/8 over 8K, "
            f"{words[copies(size[(1, 32, 8, 32768, 128)], 'cuda')]} at 32/8 over 32K at D = 128") in text
    run9 = json.loads((DATA / "decode-h200-run9-auto.json").read_text())["rows"]
    cold = {r["provider"]: r["graph_ms"] * 1e3 for r in run9
            if (r["B"], r["H"], r["Hkv"], r["L"], r["D"]) == (1, 32, 8, 32768, 128) and "graph_ms" in r}
    assert f"timed {cold['attnlab']:.1f} µs for attnlab and {cold['sdpa-cudnn']:.1f} for cuDNN" in text
    warm = {p: [r["graph_us"] for run in range(31, 36)
                for r in json.loads((DATA / f"decode-host-h200-run{run}.json").read_text())["speed"]
                if r["provider"] == p and (r["B"], r["H"], r["Hkv"], r["L"], r["D"]) == (1, 32, 8, 32768, 128)]
            for p in ("attnlab", "sdpa-cudnn")}
    assert (f"warm, timed {min(warm['attnlab']):.1f}–{max(warm['attnlab']):.1f} and "
            f"{min(warm['sdpa-cudnn']):.1f}–{max(warm['sdpa-cudnn']):.1f})") in text


def test_speed_rows_time_each_provider_warm_and_over_its_copies(monkeypatch):
    """``speed_rows``' wiring, its timers replaced: the warm times take one call of copy 0, the L2-cold ones the same
    provider's call on every copy of the cache in turn, with one query and one lengths tensor; each row's ratios and
    TB/s come from those times."""
    shape = (1, 4, 2, 64, 16)
    nbytes = 2 * 1 * 2 * 64 * 16 * 2
    monkeypatch.setattr(host, "SHAPES", [shape])
    made = []

    def inputs(s):
        made.append(s)
        n = len(made) - 1
        return f"q{n}", f"k{n}", f"v{n}", f"lens{n}"  # (the copy's number in place of each tensor)

    def sdpa_call(q, k, v, backend):
        return (lambda: None) if k != "k1" else None  # (one copy without a cuDNN call: the provider's first copy decides)

    seen = {}

    def timer(kind):
        def t(fn, *, calls, median=False):
            assert median is (kind == "host")  # (the host's time per call: the median round, as the eager time's)
            seen.setdefault(kind, []).append(fn)
            return {"eager": 12.0, "graph": 10.0, "host": 9.0, "eager_cold": 15.0, "graph_cold": 12.5}[
                kind + ("_cold" if isinstance(fn, list) else "")]
        return t

    monkeypatch.setattr(host, "inputs", inputs)
    monkeypatch.setattr(host, "sdpa_call", sdpa_call)
    monkeypatch.setattr(host, "eager_us", timer("eager"))
    monkeypatch.setattr(host, "graph_us", timer("graph"))
    monkeypatch.setattr(host, "host_us", timer("host"))
    monkeypatch.setattr(host._decode_bench(), "_copies", lambda n, device: 3 if n == nbytes else 0)
    rows = host.speed_rows(calls=100)
    assert len(made) == 3 and [r["provider"] for r in rows] == ["attnlab", "attnlab-full", "sdpa-cudnn"]
    for r in rows[:2]:
        assert r["copies"] == 3 and (r["eager_us"], r["graph_us"], r["eager_cold_us"], r["graph_cold_us"]) == (
            12.0, 10.0, 15.0, 12.5)
        assert r["eager_over_graph"] == 1.2 and r["eager_cold_over_graph"] == 1.2
        assert r["loop_host_us"] == 9.0 and host.eager_pace(r) == "GPU"
        assert r["graph_tb_per_s"] == nbytes / 10.0 / 1e6 and r["graph_cold_tb_per_s"] == nbytes / 12.5 / 1e6
    # cuDNN refused copy 1: its warm times only
    assert (rows[2]["eager_us"], rows[2]["graph_us"]) == (12.0, 10.0) and "graph_cold_us" not in rows[2]
    warm = [fn for fn in seen["eager"] if not isinstance(fn, list)]
    cold = [fn for fn in seen["eager"] if isinstance(fn, list)]
    assert len(warm) == 3 and len(cold) == 2 and all(len(fns) == 3 for fns in cold)
    assert seen["host"] == warm  # (the host's own time: the warm call of each provider)
    assert [fns[0] for fns in cold] == warm[:2]  # the warm call is copy 0's
    assert len({id(f) for fns in cold for f in fns}) == 6  # each copy's own call
    # each copy's call reads its own cache with copy 0's query and lengths (hot in a model)
    assert [f.__defaults__ for f in cold[0]] == [("q0", f"k{i}", f"v{i}", "lens0") for i in range(3)]
    assert [f.__defaults__ for f in cold[1]] == [("q0", f"k{i}", f"v{i}") for i in range(3)]
    assert [len(seen[k]) for k in ("eager", "graph", "host")] == [5, 5, 3]  # eager and graph alike; the host warm


def test_docs_decode_quotes_the_sizes():
    from attnlab.cost import get_gpu

    docs = " ".join((ROOT / "docs" / "decode.md").read_text().split())
    size = 2 * 1 * 8 * 8192 * 128 * 2
    assert (f"64/8 heads over 8K keys is {size / 1e6:.1f} MB against the H200's {get_gpu('H200').l2_bytes // 2**20} "
            f"MiB") in docs
    assert "of at least 180 MB a pass" in docs and host._decode_bench()._copies(180e6 - 1, "cuda") == 2


def test_sweep_times_each_split_count_warm_and_over_the_copies(monkeypatch):
    """``sweep_rows``' wiring, its timer replaced: for each configuration and split count one warm time (copy 0's call)
    and one L2-cold time (the calls on every copy in turn); the table shows both where a run has both."""
    import torch

    shape = (1, 4, 2, 64, 16)
    monkeypatch.setattr(host, "SHAPES", [shape, (2, 4, 2, 64, 16)])  # (batch 2: not swept)
    monkeypatch.setattr(host, "inputs", lambda s: (torch.zeros(1, 4, 1, 16), None, None, None))
    monkeypatch.setattr(host._decode_bench(), "_copies", lambda n, device: 2)
    timed: list = []

    def graph_us(fn, *, calls):
        timed.append(fn)
        return 20.0 if isinstance(fn, list) else 10.0

    monkeypatch.setattr(host, "graph_us", graph_us)
    rows = host.sweep_rows()
    from attnlab.gpu import decode

    configs = decode.decode_configs(16)
    picked = {name: decode.choose_num_splits(batch=1, kv_heads=2, seq=64, head_dim=16, device="cpu", config=c)
              for name, c in configs.items()}
    expect = sum(len({4, 8, 12, 16, 24, 32, 48, 64, p}) + len({16, 32, p}) for p in picked.values())
    assert len(rows) == expect and len(timed) == 2 * expect
    assert all(r["graph_us"] == 10.0 and r["graph_cold_us"] == 20.0 and r["copies"] == 2 for r in rows)
    assert all(isinstance(timed[i + 1], list) and len(timed[i + 1]) == 2 for i in range(0, len(timed), 2))
    assert len({id(f.__defaults__[0]) for fns in timed if isinstance(fns, list) for f in fns}) == 1  # one query
    assert sum(r["picked"] for r in rows) == 2 * len(configs)
    text = host.markdown({**_result(cold=False), "sweep": rows})
    assert "(* the model's pick; L2-warm / L2-cold):" in text and "4: 10.0 / 20.0, 8: 10.0 / 20.0" in text
    old = [{k: v for k, v in r.items() if "cold" not in k} for r in rows]
    assert "L2-cold" not in host.markdown({**_result(cold=False), "sweep": old})


def _fake_library(monkeypatch, shape, copies):
    """``inputs`` making small CPU tensors (each copy's K/V cache told apart by its first value), the library's call
    replaced by one that returns its own K's first value, one kept plan, SDPA's call refused on copy 2 of 3, and the
    timers by ones that say whether they got one call or several in turn."""
    import types

    import torch

    from attnlab.gpu import decode, decode_plan

    made = []

    def inputs(s):
        B, H, Hkv, L, D = s
        n = len(made)
        made.append(n)
        return (torch.zeros(B, H, 1, D), torch.full((B, Hkv, L, D), float(n)), torch.zeros(B, Hkv, L, D),
                torch.full((B,), L, dtype=torch.int32))

    calls = []

    def flash_decode(q, k, v, cache_seqlens=None):
        calls.append((id(q), k[0, 0, 0, 0].item(), cache_seqlens is not None))
        return torch.zeros_like(q), None

    plan = types.SimpleNamespace(merge="kernel", rows=1, num_splits=4, graph_slots=None)
    monkeypatch.setattr(host, "SHAPES", [shape])
    monkeypatch.setattr(host, "inputs", inputs)
    monkeypatch.setattr(host.attnlab, "flash_decode", flash_decode)
    monkeypatch.setattr(decode_plan, "_PLANS", {"key": plan})
    monkeypatch.setattr(decode, "clear_plans", lambda: None)
    monkeypatch.setattr(host._decode_bench(), "_copies", lambda n, device: copies)
    monkeypatch.setattr(host, "sdpa_call", lambda q, k, v, backend: None if k[0, 0, 0, 0].item() == 2 else (lambda: None))

    def timer(kind):
        def t(fn, *, calls):
            if isinstance(fn, list):
                for f in fn:
                    f()
                return {"graph": 12.0, "eager": 15.0}[kind] + len(fn)
            fn()
            return {"graph": 10.0, "eager": 11.0}[kind]
        return t

    monkeypatch.setattr(host, "graph_us", timer("graph"))
    monkeypatch.setattr(host, "eager_us", timer("eager"))
    return made, calls


def test_merge_arms_time_each_arm_warm_and_over_the_copies(monkeypatch):
    """``_arm_rows``' wiring (the merge A/B arms): each arm's warm times from copy 0's call, its L2-cold ones from the
    calls on every copy in turn, each copy its own cache with one query and one lengths tensor; cuDNN, which refused a
    copy here, keeps its warm times only; the table gains the L2-cold columns."""
    shape = (1, 4, 2, 64, 16)
    made, calls = _fake_library(monkeypatch, shape, copies=3)
    used = []
    rows = host._arm_rows(100, 2, [("a", 1), ("b", 2)], used.append)
    assert len(made) == 3 and used == [1, 2, 2, 1]  # (the arms' order reversed every other round)
    mine = [r for r in rows if r["arm"] != "sdpa-cudnn"]
    assert len(mine) == 4 and all(
        (r["graph_us"], r["eager_us"], r["copies"], r["graph_cold_us"], r["eager_cold_us"]) == (10.0, 11.0, 3, 15.0, 18.0)
        for r in mine)
    assert all(r["same_bits"] is (None if i % 2 == 0 else True) for i, r in enumerate(mine))
    cudnn = [r for r in rows if r["arm"] == "sdpa-cudnn"]
    assert len(cudnn) == 2 and all((r["graph_us"], r["eager_us"]) == (10.0, 11.0) and "graph_cold_us" not in r
                                   for r in cudnn)
    # per arm: the check call, the warm graph and eager calls (copy 0), then each copy in turn for each cold timer
    assert {q for q, _, _ in calls} == {calls[0][0]} and all(lens for _, _, lens in calls)
    assert [k for _, k, _ in calls[:9]] == [0.0, 0.0, 0.0, 0.0, 1.0, 2.0, 0.0, 1.0, 2.0]
    lines = host.merge_ab_markdown(rows)
    assert lines[0].endswith("| L2-cold graph µs | × cuDNN | L2-cold eager µs | × cuDNN | eager / graph |")
    a = next(ln for ln in lines if "| a |" in ln).split(" | ")
    assert a[13:] == ["15.00 / 15.00", "—", "18.00 / 18.00", "—", f"{18.0 / 15.0:.2f} |"]
    assert len(lines[1].split("|")) == len(lines[0].split("|"))


def test_order_arms_time_each_arm_warm_and_over_the_copies(monkeypatch):
    """``order_ab_rows``' wiring: with and without the lengths, each arm's warm graph time from copy 0's call and its
    L2-cold one from every copy in turn; the short-length case (no cuDNN row) too; the table's L2-cold columns and their
    ratios to cuDNN's L2-cold median."""
    import torch

    shape = (1, 4, 2, 64, 16)
    made, calls = _fake_library(monkeypatch, shape, copies=2)
    monkeypatch.setattr(host.F, "scaled_dot_product_attention", lambda q, k, v, enable_gqa: torch.zeros_like(q))
    rows = host.order_ab_rows(rounds=1, arms=(("strided", 0),))
    assert len(made) == 4  # two copies for each of the two cases
    full, short = [r for r in rows if r["length"] == 64], [r for r in rows if r["length"] == 2]
    assert [r["arm"] for r in full] == ["strided", "sdpa-cudnn"] and [r["arm"] for r in short] == ["strided"]
    assert (full[0]["graph_us"], full[0]["graph_cold_us"], full[0]["full_graph_us"], full[0]["full_graph_cold_us"]) == (
        10.0, 14.0, 10.0, 14.0)
    assert (full[1]["graph_us"], full[1]["graph_cold_us"]) == (10.0, 14.0)
    assert "full_graph_us" not in short[0] and short[0]["graph_cold_us"] == 14.0
    lines = host.order_ab_markdown(rows)
    assert lines[0].endswith("| L2-cold, lengths | × cuDNN | L2-cold, no lengths | × cuDNN |")
    assert lines[2].split(" | ")[11:] == ["14.00", "1.000", "14.00", "1.000 |"]
    assert lines[4].split(" | ")[11:] == ["14.00", "—", "—", "— |"]
    old = [{k: v for k, v in r.items() if "cold" not in k} for r in rows]
    assert "L2-cold" not in "\n".join(host.order_ab_markdown(old))


@pytest.mark.parametrize("loop,eager,graph,pace", [(20.0, 21.0, 18.0, "host"), (19.0, 21.0, 18.0, "host"),
                                                   (18.0, 21.0, 18.0, "GPU"), (12.0, 21.0, 18.0, "GPU"),
                                                   (18.5, 21.0, 18.0, "both")])
def test_the_eager_pace_says_who_waits(loop, eager, graph, pace):
    """``eager_pace``: the host where its time per call is at least ``PACE_BAND`` (0.9) of the eager time, the GPU where
    it is at most the graph's, both between; the report's table gives it beside the three times."""
    row = dict(B=1, H=32, Hkv=8, L=32768, D=64, provider="attnlab", loop_host_us=loop, eager_us=eager, graph_us=graph,
               eager_over_graph=eager / graph, eager_tb_per_s=1.0, graph_tb_per_s=1.0)
    assert host.PACE_BAND == 0.9 and host.eager_pace(row) == pace
    result = dict(gpu="NVIDIA H200", torch="2.11", triton="3.6", fused_merge=False, eager_fused_below_us=0.0,
                  floors={}, host=[], speed=[row])
    text = host.markdown(result)
    assert (f"| 1 | 32/8 | 32768 | 64 | attnlab | {loop:.1f} | {eager:.1f} | {graph:.1f} | {loop / graph:.2f} | "
            f"{pace} |") in text.splitlines()
    old = {k: v for k, v in row.items() if k != "loop_host_us"}  # (runs before the column: no such table)
    assert "Who sets the eager pace" not in host.markdown(dict(result, speed=[old]))


def _kernel_rows() -> list[dict]:
    """Made-up ``kernel_ab_rows``: two rounds of both arms and cuDNN on one shape, and a sweep of the Gluon kernel."""
    base = dict(B=1, H=32, Hkv=8, L=32768, D=128, length=32768)
    rows = []
    for rnd, (t, g, c) in enumerate(((36.0, 35.0, 37.0), (36.4, 34.6, 37.4))):
        rows += [base | dict(arm="triton", round=rnd, kernel="triton", splits=16, max_err=2e-3, copies=2,
                             eager_us=t + 1, graph_us=t, graph_cold_us=t + 0.5),
                 base | dict(arm="gluon", round=rnd, kernel="gluon", splits=16, max_err=3e-3, copies=2,
                             eager_us=g + 1, graph_us=g, graph_cold_us=g + 0.5),
                 base | dict(arm="sdpa-cudnn", round=rnd, copies=2, graph_us=c, graph_cold_us=c + 1.0)]
    rows += [base | dict(arm="gluon-sweep", block_n=bn, ring=ring, splits=S, picked=S == 16, copies=2,
                         graph_us=40.0 - S / 8 + ring, graph_cold_us=41.0 - S / 8 + ring)
             for bn, ring in ((128, 3), (64, 5)) for S in (8, 16, 32)]
    short = base | dict(length=1024)  # a short sequence in the long cache: no cuDNN row
    rows += [short | dict(arm=arm, round=0, kernel=arm, splits=16, max_err=1e-3, copies=2, eager_us=9.0, graph_us=g,
                          graph_cold_us=g + 0.5) for arm, g in (("triton", 5.0), ("gluon", 5.5))]
    return rows


def test_the_kernel_ab_table_puts_each_arm_against_cudnn_and_lists_the_gluon_sweep():
    """``--kernel-ab``'s table: each arm's rounds, the kernel its plan ran, its medians against cuDNN's, warm and
    L2-cold, and the Gluon kernel's split sweep with the model's pick starred."""
    text = "\n".join(host.kernel_ab_markdown(_kernel_rows()))
    lines = text.splitlines()
    gluon = next(ln for ln in lines if "| gluon |" in ln)
    c, c_cold = (37.0 + 37.4) / 2, (38.0 + 38.4) / 2
    g, g_cold = (35.0 + 34.6) / 2, (35.5 + 35.1) / 2
    assert gluon == (f"| 1 | 32/8 | 32768 | 128 | 32768 | gluon | gluon, 16 | 36.00 / 35.60 | 35.00 / 34.60 | "
                     f"{c / g:.3f} | 35.50 / 35.10 | {c_cold / g_cold:.3f} | 3.0e-03 |")
    triton = next(ln for ln in lines if "| triton |" in ln)
    assert f"| {c / 36.2:.3f} |" in triton
    assert "| 1 | 32/8 | 32768 | 128 | 128 × 3 | 8: 42.0 / 43.0, 16*: 41.0 / 42.0, 32: 39.0 / 40.0 |" in lines
    assert "| 1 | 32/8 | 32768 | 128 | 64 × 5 | 8: 44.0 / 45.0, 16*: 43.0 / 44.0, 32: 41.0 / 42.0 |" in lines
    # with a preset: the shape's roofline and the share of it each arm's median L2-cold graph reaches
    gpu = host.preset_for("NVIDIA H200")
    roof = host.decode_roofline_ms(batch=1, heads=32, kv_heads=8, seq=32768, head_dim=128, gpu=gpu) * 1e3
    gluon, short = [ln for ln in host.kernel_ab_markdown(_kernel_rows(), gpu) if "| gluon |" in ln]
    assert gluon.endswith(f"| 3.0e-03 | {roof:.1f} | {100 * roof / g_cold:.0f}% |")
    roof_short = host.decode_roofline_ms(batch=1, heads=32, kv_heads=8, seq=1024, head_dim=128, gpu=gpu) * 1e3
    assert short == (f"| 1 | 32/8 | 32768 | 128 | 1024 | gluon | gluon, 16 | 9.00 | 5.50 | — | 6.00 | — | 1.0e-03 | "
                     f"{roof_short:.1f} | {100 * roof_short / 6.0:.0f}% |")
    # and in the run's whole report
    result = _result(cold=False) | {"kernel_ab": _kernel_rows()}
    assert "The Triton split kernel and the Gluon one" in host.markdown(result)


def test_kernel_ab_rows_run_end_to_end_on_the_interpreter(monkeypatch):
    """``kernel_ab_rows``' own work on the Triton interpreter, its timers replaced by one call of each callable: the
    arms in turns, each arm's plan and its kernel recorded (the Gluon arm's plan runs the Triton kernel here, and says
    so), cuDNN's place every round taken by SDPA, the sweep's refusal recorded as data (the interpreter is no GPU), and
    the switch as it was after the run."""
    pytest.importorskip("triton")
    import types

    import torch
    import torch.nn.functional as F

    from attnlab.gpu import decode_config, flash_decode_triton

    shape = (1, 8, 2, 96, 64)

    def inputs(shape, seed):
        B, H, Hkv, L, D = shape
        g = torch.Generator().manual_seed(seed)
        return (torch.randn(B, H, 1, D, generator=g).half(), torch.randn(B, Hkv, L, D, generator=g).half(),
                torch.randn(B, Hkv, L, D, generator=g).half(), torch.full((B,), L, dtype=torch.int32))

    made = []

    def timer(fn, calls):
        for f in fn if isinstance(fn, list) else [fn]:
            made.append(f())
        return 10.0

    monkeypatch.setattr(host, "SHAPES", [shape])
    monkeypatch.setattr(host, "cache_copies", lambda s: [inputs(s, 0), inputs(s, 1)])
    monkeypatch.setattr(host, "attnlab", types.SimpleNamespace(flash_decode=flash_decode_triton))
    monkeypatch.setattr(host, "eager_us", timer)
    monkeypatch.setattr(host, "graph_us", timer)
    monkeypatch.setattr(host, "sdpa_call", lambda q, k, v, backend: lambda: F.scaled_dot_product_attention(
        q, k, v, enable_gqa=True))
    monkeypatch.setattr(host, "KERNEL_RINGS", {64: ((16, 3),)})
    rows = host.kernel_ab_rows(100, rounds=2, sweep_counts=(2, 4))
    arms = [(r["arm"], r.get("round"), r["length"]) for r in rows]
    turns = [("triton", 0), ("gluon", 0), ("sdpa-cudnn", 0), ("gluon", 1), ("triton", 1), ("sdpa-cudnn", 1)]
    assert arms == [(*t, 96) for t in turns] + [("gluon-sweep", None, 96)] + [
        (*t, 3) for t in turns if t[0] != "sdpa-cudnn"]  # the short sequence (96 // 32 keys): no cuDNN, no sweep
    for r in rows[:6] + rows[7:]:
        assert r["graph_us"] == r["graph_cold_us"] == 10.0 and r["copies"] == 2
        if r["arm"] != "sdpa-cudnn":
            assert r["kernel"] == "triton" and r["splits"] >= 1 and r["max_err"] < 2e-2
    assert "a device other than a CUDA GPU" in rows[6]["error"]
    assert decode_config.GLUON_SPLIT is False and len(made) > 10
    text = "\n".join(host.kernel_ab_markdown(rows))
    assert "| 1 | 8/2 | 96 | 64 | 16 × 3 | refused: " in text


def test_kernel_ab_rows_with_the_merge_kernel_arms_on_the_interpreter(monkeypatch):
    """``--kernel-ab-merge``: the four arms in turns, the "+merge" ones timed with the merge kernel on every call
    (``EAGER_FUSED_BELOW_US`` 0 and ``GRAPH_FUSED_FROM_US`` inf while they run, the library's values for the others),
    no sweep, and every switch as it was after the run."""
    pytest.importorskip("triton")
    import math
    import types

    import torch
    import torch.nn.functional as F

    from attnlab.gpu import decode_config, decode_plan, flash_decode_triton

    shape = (1, 8, 2, 96, 64)
    g = torch.Generator().manual_seed(0)
    ins = (torch.randn(1, 8, 1, 64, generator=g).half(), torch.randn(1, 2, 96, 64, generator=g).half(),
           torch.randn(1, 2, 96, 64, generator=g).half(), torch.full((1,), 96, dtype=torch.int32))
    before = decode_config.GLUON_SPLIT, decode_plan.EAGER_FUSED_BELOW_US, decode_plan.GRAPH_FUSED_FROM_US
    seen = []

    def timer(fn, calls):
        seen.append((decode_config.GLUON_SPLIT, decode_plan.EAGER_FUSED_BELOW_US, decode_plan.GRAPH_FUSED_FROM_US))
        for f in fn if isinstance(fn, list) else [fn]:
            f()
        return 10.0

    monkeypatch.setattr(host, "SHAPES", [shape])
    monkeypatch.setattr(host, "cache_copies", lambda s: [ins])
    monkeypatch.setattr(host, "attnlab", types.SimpleNamespace(flash_decode=flash_decode_triton))
    monkeypatch.setattr(host, "eager_us", timer)
    monkeypatch.setattr(host, "graph_us", timer)
    monkeypatch.setattr(host, "sdpa_call", lambda q, k, v, backend: lambda: F.scaled_dot_product_attention(
        q, k, v, enable_gqa=True))
    rows = host.kernel_ab_rows(100, rounds=1, sweep_counts=(), arms=host.KERNEL_MERGE_ARMS)
    assert [r["arm"] for r in rows if r["length"] == 96] == [*host.KERNEL_MERGE_ARMS, "sdpa-cudnn"]
    assert not any(r["arm"] == "gluon-sweep" for r in rows)
    knobs = {(gluon, eager, graph) for gluon, eager, graph in seen}
    assert (True, 0, math.inf) in knobs and (False, 0, math.inf) in knobs
    assert (False, before[1], before[2]) in knobs and (True, before[1], before[2]) in knobs
    assert (decode_config.GLUON_SPLIT, decode_plan.EAGER_FUSED_BELOW_US, decode_plan.GRAPH_FUSED_FROM_US) == before
    assert "| triton+merge | triton," in "\n".join(host.kernel_ab_markdown(rows))


def test_split_pdl_ab_rows_run_end_to_end_on_the_interpreter(monkeypatch):
    """``split_pdl_ab_rows`` on the Triton interpreter, its timers replaced: the arms in turns, the switch set for each
    and restored (with ``SPLIT_PDL_FROM_US`` at 0 while they run: the switch itself on every shape), and no dependent
    launch taken (the interpreter is no Hopper GPU: its table says "not taken")."""
    pytest.importorskip("triton")
    import types

    import torch

    from attnlab.gpu import decode_plan, flash_decode_triton

    shape = (1, 8, 2, 200, 64)
    g = torch.Generator().manual_seed(0)
    ins = (torch.randn(1, 8, 1, 64, generator=g).half(), torch.randn(1, 2, 200, 64, generator=g).half(),
           torch.randn(1, 2, 200, 64, generator=g).half(), torch.full((1,), 200, dtype=torch.int32))
    seen, thresholds = [], set()
    default = decode_plan.SPLIT_PDL, decode_plan.SPLIT_PDL_FROM_US

    def timer(fn, calls, median=False):
        seen.append(decode_plan.SPLIT_PDL)
        thresholds.add(decode_plan.SPLIT_PDL_FROM_US)
        fn()
        return 12.0 if decode_plan.SPLIT_PDL is False else 10.0

    monkeypatch.setattr(host, "SHAPES", [shape])
    monkeypatch.setattr(host, "inputs", lambda s: ins)
    monkeypatch.setattr(host, "attnlab", types.SimpleNamespace(flash_decode=flash_decode_triton))
    for name in ("eager_us", "graph_us", "host_us"):
        monkeypatch.setattr(host, name, timer)
    rows = host.split_pdl_ab_rows(100, rounds=2)
    assert [(r["arm"], r["round"]) for r in rows] == [("False", 0), ("True", 0), ("trigger", 0),
                                                      ("trigger", 1), ("True", 1), ("False", 1)]
    assert not any(r["pdl"] for r in rows) and (decode_plan.SPLIT_PDL, decode_plan.SPLIT_PDL_FROM_US) == default
    assert {True, "trigger", False} <= set(seen) and thresholds == {0}
    lines = host.split_pdl_ab_markdown(rows)
    assert "| 1 | 8/2 | 200 | 64 | True (not taken) | 10.00 / 10.00 | 12.0 | 0.833 | 10.0 |" in lines
    assert "| 1 | 8/2 | 200 | 64 | False | 12.00 / 12.00 | 12.0 | 1.000 | 12.0 |" in lines
    gpu = host.preset_for("NVIDIA H200")
    roof = host.decode_roofline_ms(batch=1, heads=8, kv_heads=2, seq=200, head_dim=64, gpu=gpu) * 1e3
    assert (f"| 1 | 8/2 | 200 | 64 | True (not taken) | 10.00 / 10.00 | 12.0 | 0.833 | 10.0 | {roof:.1f} | "
            f"{100 * roof / 10.0:.0f}% |") in host.split_pdl_ab_markdown(rows, gpu)


def test_the_ab_tables_show_a_failed_arm_and_keep_the_others():
    """An arm that failed on the GPU (its rows hold ``error``) is named in the tables with its error; its medians leave
    those rows out, and the other arms' lines are as before."""
    rows = _kernel_rows() + [dict(B=1, H=32, Hkv=8, L=32768, D=128, length=32768, arm="gluon", round=2,
                                  error="OutOfResources: out of resource: shared memory")]
    text = "\n".join(host.kernel_ab_markdown(rows))
    gluon = next(ln for ln in text.splitlines() if "| gluon |" in ln)
    assert "| gluon, 16; failed (OutOfResources: out of resource: shared memory) | 36.00 / 35.60 |" in gluon
    base = dict(B=1, H=8, Hkv=2, L=200, D=64, graph_us=12.0)
    pdl = [base | dict(arm="False", round=0, pdl=False, eager_us=12.0, loop_host_us=9.0),
           base | dict(arm="True", round=0, pdl=False, error="RuntimeError: launch failed")]
    lines = host.split_pdl_ab_markdown(pdl)
    assert "| 1 | 8/2 | 200 | 64 | True (failed: RuntimeError: launch failed) | — | 12.0 | — | — |" in lines
    assert "| 1 | 8/2 | 200 | 64 | False | 12.00 | 12.0 | 1.000 | 9.0 |" in lines


def test_host_rows_are_timed_in_turns_each_knob_set_only_for_its_own_row(monkeypatch):
    """``host_rows`` times every row's loop once a round, the rows in turns, and keeps each row's best round (so that
    the host's drift within a process falls on every row alike); a knob row's setting holds during its own loop only,
    with the plans cleared before and after it."""
    import attnlab
    from attnlab.gpu import decode, decode_plan, launch

    monkeypatch.setattr(host, "inputs", lambda shape: ("q", "k", "v", "lens"))
    monkeypatch.setattr(host, "sdpa_call", lambda q, k, v, backend: (lambda: backend) if backend != "FLASH_ATTENTION"
                        else None)
    monkeypatch.setattr(attnlab, "flash_decode", lambda *a, **kw: "public")
    monkeypatch.setattr(decode, "flash_decode_triton", lambda *a, **kw: "internal")
    monkeypatch.setattr(decode, "plan_key", lambda *a: "key")
    monkeypatch.setattr(decode, "run_planned", lambda *a: "planned")
    monkeypatch.setattr(host, "empty_launch", lambda: (lambda: "empty"))
    from attnlab.gpu import native

    monkeypatch.setattr(native, "module", lambda: None)  # (no native row here: the test below has it)
    cleared = []
    monkeypatch.setattr(decode, "clear_plans", lambda: cleared.append(1))
    knobs = lambda: (decode_plan.SLAB_BYTES, decode_plan.EAGER_FUSED_BELOW_US, launch.STATIC_LAUNCH,  # noqa: E731
                     launch.DIRECT_LAUNCH)
    defaults = knobs()
    seen = []

    def host_us(fn, *, calls, rounds):
        assert calls == 100 and rounds == 1
        seen.append((fn(), knobs()))
        return 50.0 - len(seen) / 10  # (the host speeds up: each loop a little faster than the one before)

    monkeypatch.setattr(host, "host_us", host_us)
    rows = host.host_rows(calls=100, rounds=3)
    names = [r["call"] for r in rows]
    assert names[:3] == ["attnlab.flash_decode (plan kept)", "attnlab.flash_decode, window (plan kept)",
                         "flash_decode_triton (plan kept)"]
    assert "SDPA flash" not in names and {"SDPA cudnn", "SDPA efficient"} <= set(names)
    n = len(rows)
    assert len(seen) == 3 * n and [s[0] for s in seen[:n]] == [s[0] for s in seen[n:2 * n]]  # the same order each round
    # each row's best is its last round's loop, and every round's time is kept in the order of the rounds
    assert [r["host_us"] for r in rows] == [50.0 - (2 * n + i + 1) / 10 for i in range(n)]
    assert [r["rounds_us"] for r in rows] == [[50.0 - (k * n + i + 1) / 10 for k in range(3)] for i in range(n)]
    by_name = dict(zip(names, (s[1] for s in seen[:n])))
    assert by_name["flash_decode_triton (plan kept), outputs by torch.empty"] == (0, *defaults[1:])
    assert by_name["flash_decode_triton (plan kept), merge kernel every call"] == (defaults[0], 0.0, *defaults[2:])
    assert by_name["flash_decode_triton (plan kept), Triton's launcher"] == (*defaults[:2], False, False)
    knob_rows = [c for c in names if c.startswith("flash_decode_triton (plan kept), ") and not c.endswith("again")]
    assert len(knob_rows) == 3 and all(by_name[c] == defaults for c in names if c not in knob_rows)
    assert knobs() == defaults
    # what each row's loop called
    assert [s[0] for s in seen[:n]] == ["public", "public", "internal", "key", "planned", "internal", "internal",
                                        "internal", "internal", "public", "public", "CUDNN_ATTENTION",
                                        "EFFICIENT_ATTENTION", "empty"]
    assert names[-1] == host.EMPTY_ROW  # the empty launch in the same rounds as the rows the host bar reads
    # each knob row clears the plans before and after its loop; the re-planning row clears them every call
    assert len(cleared) == 3 * (3 * 2 + 1)


def test_the_host_table_shows_each_rows_spread_and_the_kept_calls_gpu_time():
    """The host table's premise (a loop of kept calls measures the host, not the GPU) is measured: the kept call's GPU
    time at the host rows' shape heads the table, and a note follows where it exceeds ``GPU_SHARE`` of the kept call's
    host time; each row shows its slowest round over its best where the run kept every round."""
    result = _result(cold=False)
    result["host"] = [{"call": host.KEPT_ROW, "host_us": 12.0, "rounds_us": [13.0, 12.0, 18.0]},
                      {"call": host.EMPTY_ROW, "host_us": 9.0, "rounds_us": [9.0, 9.9, 9.45]}]
    lines = host.markdown(dict(result, tiny_gpu_us=4.25)).splitlines()
    assert any("(its GPU time 4.2 µs a call, the kept call's calls in one CUDA graph):" in ln for ln in lines)
    assert f"| {host.KEPT_ROW} | 12.0 | 1.50 |" in lines and f"| {host.EMPTY_ROW} | 9.0 | 1.10 |" in lines
    assert not any("read the GPU's pace" in ln for ln in lines)
    slow_gpu = host.markdown(dict(result, tiny_gpu_us=host.GPU_SHARE * 12.0 + 0.1))
    assert "its host rows then read the GPU's pace, not the host's" in slow_gpu
    # runs from before: no GPU time, no rounds
    old = host.markdown(_result(cold=False))
    assert "(GPU time far below it):" in old and "| x | 15.0 |" in old.splitlines() and "slowest round" not in old


def test_tiny_gpu_us_times_the_kept_call_in_a_graph(monkeypatch):
    """``tiny_gpu_us`` makes the kept plan once and then times the same call at ``TINY`` captured in a graph."""
    from attnlab.gpu import decode

    calls = []
    monkeypatch.setattr(host, "inputs", lambda shape: (calls.append(shape), ("q", "k", "v", "lens"))[1])
    monkeypatch.setattr(decode, "flash_decode_triton", lambda *a, **kw: calls.append((a, kw)))

    def graph_us(fn, *, calls):
        fn()
        return float(calls)

    monkeypatch.setattr(host, "graph_us", graph_us)
    assert host.tiny_gpu_us(calls=37) == 37.0
    assert calls == [host.TINY] + [(("q", "k", "v"), {"cache_seqlens": "lens"})] * 2


def test_per_call_us_times_each_call_alone_alternating():
    """``per_call_us`` times every call alone on its clock, the functions alternating (reversed every other turn),
    after ``warmup`` untimed calls each, with the sync before and after; each function's stats are its own calls'."""
    order, synced = [], []
    cost = {"a": 3000, "b": 7000}  # ns of clock each call of a function takes
    now = [0]

    def clock():
        return now[0]

    def make(name):
        def fn():
            order.append(name)
            now[0] += cost[name]
        return fn

    stats = host.per_call_us({"a": make("a"), "b": make("b")}, 4, sync=lambda: synced.append(len(order)), clock=clock,
                             warmup=2)
    assert order == ["a", "a", "b", "b"] + ["a", "b", "b", "a", "a", "b", "b", "a"]
    assert synced == [4, 12]
    assert stats["a"] == {"median_us": 3.0, "p10_us": 3.0, "p90_us": 3.0, "mean_us": 3.0, "calls": 4}
    assert stats["b"]["median_us"] == 7.0 and stats["b"]["calls"] == 4


def test_call_stats_percentiles_by_nearest_rank():
    us = [float(x) for x in range(1, 11)]  # 1..10 µs, shuffled
    stats = host.call_stats(us[5:] + us[:5])
    assert stats == {"median_us": 5.5, "p10_us": 1.0, "p90_us": 9.0, "mean_us": 5.5, "calls": 10}
    assert host.call_stats([4.0, 100.0, 4.0])["median_us"] == 4.0  # one stall leaves the median alone
    assert host.call_stats([4.0, 100.0, 4.0])["mean_us"] == 36.0


def test_the_per_call_table():
    result = _result(cold=False)
    result["per_call"] = {host.KEPT_ROW: host.call_stats([12.0, 13.0, 40.0]),
                          host.NOOP_ROW: host.call_stats([0.1, 0.1, 0.2])}
    lines = host.markdown(result).splitlines()
    assert f"| {host.KEPT_ROW} | 13.0 | 12.0 | 40.0 | 21.7 |" in lines
    assert f"| {host.NOOP_ROW} | 0.1 | 0.1 | 0.2 | 0.1 |" in lines
    assert "timed one at a time" not in host.markdown(_result(cold=False))


def test_the_other_paths_row_where_the_module_builds(monkeypatch):
    """Where the native module builds, the host rows time the public kept call by the other path (a knob row: its
    plans made afresh, the setting back after its loop): with the native call on (the default), the Python path;
    with it off, the native call. The knob rows of the Python path's own settings run with the native call off (it
    would make their calls); where the module does not build, no such row."""
    import attnlab
    from attnlab.gpu import decode, native

    monkeypatch.setattr(host, "inputs", lambda shape: ("q", "k", "v", "lens"))
    monkeypatch.setattr(host, "sdpa_call", lambda q, k, v, backend: None)
    monkeypatch.setattr(host, "empty_launch", lambda: (lambda: "empty"))
    monkeypatch.setattr(decode, "clear_plans", lambda: None)
    monkeypatch.setattr(decode, "plan_key", lambda *a: "key")
    monkeypatch.setattr(decode, "run_planned", lambda *a: "planned")
    monkeypatch.setattr(decode, "flash_decode_triton", lambda *a, **kw: ("internal", native.ENABLED))
    monkeypatch.setattr(native, "module", lambda: "built")
    monkeypatch.setattr(attnlab, "flash_decode", lambda *a, **kw: native.ENABLED)
    seen = []
    monkeypatch.setattr(host, "host_us", lambda fn, *, calls, rounds: (seen.append(fn()), 10.0)[1])
    for on, row, other in ((True, host.PYTHON_ROW, host.NATIVE_ROW), (False, host.NATIVE_ROW, host.PYTHON_ROW)):
        seen.clear()
        monkeypatch.setattr(native, "ENABLED", on)
        names = [r["call"] for r in host.host_rows(calls=10, rounds=1)]
        assert names.count(row) == 1 and other not in names
        assert seen[names.index(row)] is (not on) and seen[0] is on and native.ENABLED is on
        for name in ("outputs by torch.empty", "merge kernel every call", "Triton's launcher"):
            assert seen[names.index(f"flash_decode_triton (plan kept), {name}")] == ("internal", False)
    monkeypatch.setattr(native, "module", lambda: None)
    names = [r["call"] for r in host.host_rows(calls=10, rounds=1)]
    assert host.NATIVE_ROW not in names and host.PYTHON_ROW not in names


def test_native_fast_makes_the_program_and_leaves_the_slot_empty(monkeypatch):
    """``native_fast``: the public call made with the native call on until its program exists; the (call, program,
    plan) returned, the setting back and the fast path's slot empty (the breakdown times the program alone); None
    where the module does not build."""
    import attnlab
    from attnlab._runtime import NATIVE_DECODE
    from attnlab.gpu import decode, native

    calls, cleared = [], []
    monkeypatch.setattr(native, "ENABLED", False)  # (ATTNLAB_NATIVE_DECODE=0: on for its calls, then off again)
    monkeypatch.setattr(native, "module", lambda: "built")
    monkeypatch.setattr(decode, "clear_plans", lambda: cleared.append(1))

    def public(q, k, v, cache_seqlens):
        calls.append(native.ENABLED)
        if len(calls) == 3:
            NATIVE_DECODE[0] = ("call", "program", "plan")

    monkeypatch.setattr(attnlab, "flash_decode", public)
    assert host.native_fast("q", "k", "v", "lens") == ("call", "program", "plan")
    assert calls == [True] * 4 and cleared and native.ENABLED is False and NATIVE_DECODE == [None]
    monkeypatch.setattr(native, "module", lambda: None)
    assert host.native_fast("q", "k", "v", "lens") is None


def test_the_header_says_which_reads_take_the_dependent_launch(monkeypatch):
    """The table's first line: with the threshold holding (the Python path; runs before the key), the reads from
    ``split_pdl_from_us``; where the JSON says ``split_pdl_every_read`` (the native call on), every eager split kernel.
    ``_split_pdl`` records the key from ``native.ENABLED`` and the threshold."""
    from attnlab.gpu import decode_plan, native

    base = dict(_result(cold=False), split_pdl=True, split_pdl_from_us=13.0)
    first = host.markdown(base).splitlines()[0]
    assert "eager split kernels reading K/V for 13 µs or more launched as dependent launches" in first
    first = host.markdown(dict(base, split_pdl_every_read=True)).splitlines()[0]
    assert "every eager split kernel launched as a dependent launch" in first and "13 µs" not in first
    assert "dependent launch" not in host.markdown(dict(base, split_pdl=False)).splitlines()[0]
    for enabled, cut, every in ((True, 13.0, True), (False, 13.0, False), (False, 0, True)):
        monkeypatch.setattr(native, "ENABLED", enabled)
        monkeypatch.setattr(decode_plan, "SPLIT_PDL_FROM_US", cut)
        assert host._split_pdl()["split_pdl_every_read"] is every
