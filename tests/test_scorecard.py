"""benchmarks/scorecard.py: the bars computed from recorded runs (made-up rows for each way a bar is met or missed,
and the recorded H200 runs), and its command line's refusals."""

from __future__ import annotations

import json

import pytest
from tests.helpers import ROOT, load_script

card = load_script("benchmarks/scorecard.py")
DATA = ROOT / "benchmarks" / "data"


def _row(D, causal, N, p, provider, ms, group=1, rounds=None, tflops=100.0, roofline=True):
    H = 2048 // D
    r = dict(D=D, causal=causal, N=N, pass_=p, B=16384 // N, H=H, Hkv=H // group, provider=provider, ms=ms,
             tflops=tflops, ms_rounds=rounds or [ms])
    return dict(r, roofline_ms=0.5) if roofline else r


def _table(ratio_of=lambda D, causal, p, g: 1.05, groups=(1, 4), N=4096):
    """attnlab and cuDNN rows of every combination, cuDNN ``ratio_of(...)`` times slower."""
    rows = []
    for D in (64, 128):
        for causal in (False, True):
            for p in ("fwd", "fwd_bwd"):
                for g in groups:
                    rows += [_row(D, causal, N, p, "attnlab", 1.0, g, tflops=600.0 + D + g),
                             _row(D, causal, N, p, "sdpa-cudnn", ratio_of(D, causal, p, g), g, roofline=False)]
    return rows


def _bars(runs, result=None):
    return {b["bar"]: b for b in card.scorecard(runs, result)}


def test_every_row_at_or_above_cudnn_in_one_run_meets_the_prefill_bars():
    bars = _bars({"one.json": _table()})
    fwd, both = bars["prefill forward at or above cuDNN"], bars["prefill forward+backward at or above cuDNN"]
    assert fwd["met"] and both["met"] and fwd["measured"].startswith("1.050× (8 rows; 0 below 1")
    cover = bars["prefill rows: every head dim, mask, pass, multi-head and GQA, in one run"]
    assert cover["met"] and cover["measured"] == "16 of 16 combinations, all in one.json"
    goal = bars["forward at D = 128 (goal beyond the bar)"]
    assert goal["measured"] == "732 TFLOP/s" and goal["met"]
    assert goal["where"] == "D = 128, non-causal, 4K, forward, 16/4 heads"
    low = _bars({"one.json": [dict(r, tflops=r["tflops"] - 100) for r in _table()]})
    assert not low["forward at D = 128 (goal beyond the bar)"]["met"]
    assert low["forward at D = 128 (goal beyond the bar)"]["measured"] == "632 TFLOP/s"  # (no clocks noted)
    # with the clock it ran at (``--clocks``): that clock and its share there; with the power it drew during its times
    # (the median of its rounds'), the energy a FLOP beside the one at which 700 TFLOP/s fits in that power
    clocked = [dict(r, tflops=r["tflops"] - 100, sm_mhz=1600.0, clock_of_roofline=0.75) for r in _table()]
    goal = _bars({"one.json": clocked})["forward at D = 128 (goal beyond the bar)"]
    assert goal["measured"] == "632 TFLOP/s at 1,600 MHz, 75% of the roofline at that clock" and not goal["met"]
    watts = [{"sm_mhz": 1600.0, "power_w": w} for w in (650.0, 690.0, 700.0)]
    powered = [dict(r, gpu_during=watts) for r in clocked]
    goal = _bars({"one.json": powered})["forward at D = 128 (goal beyond the bar)"]
    assert goal["measured"] == ("632 TFLOP/s at 1,600 MHz, 75% of the roofline at that clock, 690 W: "
                                f"{690 / 632:.3f} pJ a FLOP, where 700 TFLOP/s at that power needs {690 / 700:.3f}")
    met = _bars({"one.json": [dict(r, sm_mhz=1600.0, clock_of_roofline=0.9) for r in _table()]})
    assert met["forward at D = 128 (goal beyond the bar)"]["measured"] == "732 TFLOP/s"  # (met: nothing to explain)


def test_one_row_below_cudnn_misses_and_is_named():
    slow = _table(lambda D, causal, p, g: 0.97 if (D, causal, p, g) == (128, True, "fwd_bwd", 4) else 1.05)
    bars = _bars({"one.json": slow})
    both = bars["prefill forward+backward at or above cuDNN"]
    assert not both["met"] and both["measured"].startswith("0.970× (8 rows; 1 below 1")
    assert both["where"] == "D = 128, causal, 4K, forward+backward, 16/4 heads"
    assert bars["prefill forward at or above cuDNN"]["met"]


def test_rows_over_two_runs_cover_but_not_in_one_run():
    table = _table()
    mha = [r for r in table if r["H"] == r["Hkv"]]
    gqa = [r for r in table if r["H"] != r["Hkv"]]
    cover = _bars({"a.json": mha, "b.json": gqa})[
        "prefill rows: every head dim, mask, pass, multi-head and GQA, in one run"]
    assert not cover["met"] and cover["measured"] == "16 of 16 combinations, over 2 runs"
    partial = _bars({"a.json": mha})["prefill rows: every head dim, mask, pass, multi-head and GQA, in one run"]
    assert partial["measured"] == "8 of 16 combinations, over 1 runs" and not partial["met"]


def test_rows_out_of_scope_or_without_a_peer_are_left_out():
    rows = _table() + [_row(64, False, 1024, "fwd", "attnlab", 1.0), _row(64, False, 1024, "fwd", "sdpa-cudnn", 0.5),
                       _row(32, False, 4096, "fwd", "attnlab", 1.0), _row(32, False, 4096, "fwd", "sdpa-cudnn", 0.5),
                       _row(64, True, 8192, "fwd", "attnlab", 1.0)]
    pairs = card.prefill_pairs({"one.json": rows})
    assert len(pairs) == 16 and min(p["ratio"] for p in pairs) == pytest.approx(1.05)


def test_the_worst_round_is_the_lowest_round_by_round_ratio():
    rows = [_row(64, False, 4096, "fwd", "attnlab", 1.0, rounds=[1.0, 1.2, 0.9]),
            _row(64, False, 4096, "fwd", "sdpa-cudnn", 1.1, rounds=[1.1, 1.08, 1.2])]
    (pair,) = card.prefill_pairs({"r": rows})
    assert pair["ratio"] == pytest.approx(1.1) and pair["worst_round"] == pytest.approx(0.9)


def test_the_worst_round_names_its_row_and_clocks():
    """The worst round's row where it is not the worst row, and the two providers' SM clocks in that round where the
    rows noted them."""
    rows = [_row(64, False, 4096, "fwd", "attnlab", 1.0, rounds=[1.0, 1.0, 1.0]),
            _row(64, False, 4096, "fwd", "sdpa-cudnn", 1.01, rounds=[1.01, 1.01, 1.01]),
            _row(128, True, 8192, "fwd", "attnlab", 1.0, rounds=[0.9, 1.2, 0.95]),
            _row(128, True, 8192, "fwd", "sdpa-cudnn", 1.1, rounds=[1.1, 1.08, 1.1])]
    rows[2]["gpu_state"] = [{"sm_mhz": 1900.0}, {"sm_mhz": 1400.0}, {"sm_mhz": 1800.0}]
    rows[3]["gpu_state"] = [{"sm_mhz": 1700.0}, {"sm_mhz": 1750.0}, {"sm_mhz": 1720.0}]
    bar = _bars({"r": rows})["prefill forward at or above cuDNN"]
    assert bar["where"] == "D = 64, non-causal, 4K, forward"
    assert bar["measured"] == (f"1.010× (2 rows; 0 below 1; worst round {1.08 / 1.2:.2f}× on D = 128, causal, 8K, "
                               "forward, attnlab's SM clock 1400 MHz against cuDNN's 1750)")
    del rows[3]["gpu_state"]  # no clocks: the row alone
    bar = _bars({"r": rows})["prefill forward at or above cuDNN"]
    assert bar["measured"].endswith(f"worst round {1.08 / 1.2:.2f}× on D = 128, causal, 8K, forward)")
    same = [rows[2], rows[3]]  # the worst round on the worst row: no row named
    assert _bars({"r": same})["prefill forward at or above cuDNN"]["measured"].endswith(f"worst round {1.08 / 1.2:.2f}×)")


def _host_result(kept=(17.0, 16.0), empty=10.0, eager=((128, 1.04), (64, 1.12)), graph=((11.0, 11.5), (30.0, 29.0)),
                 full=None, cold=None):
    speed = []
    for D, ratio in eager:
        speed.append(dict(B=1, H=32, Hkv=8, L=32768, D=D, provider="attnlab", eager_us=20.0 * ratio, graph_us=20.0,
                          eager_over_graph=ratio, roofline_ms=0.01))
    for i, (mine, peer) in enumerate(graph):
        shape = dict(B=1, H=64, Hkv=8, L=8192 * (i + 1), D=128)
        speed += [dict(shape, provider="attnlab", graph_us=mine, eager_us=mine * 2, eager_over_graph=2.0,
                       roofline_ms=0.007), dict(shape, provider="sdpa-cudnn", graph_us=peer)]
        if full is not None:  # the call without lengths, cuDNN's work
            speed.append(dict(shape, provider="attnlab-full", graph_us=full[i], eager_us=full[i] * 2,
                              eager_over_graph=2.0, roofline_ms=0.007))
    speed.append(dict(B=8, H=32, Hkv=8, L=32768, D=128, provider="attnlab", graph_us=250.0, eager_us=251.0,
                      eager_over_graph=1.004))  # (batch 8: not a small-batch shape; no roofline: counted)
    host = [dict(call=c, host_us=t) for c, t in zip(card.KEPT_CALLS, kept)]
    if cold is not None:  # L2-cold times: every row's own times scaled by cold[provider]
        for r in speed:
            if r["provider"] in cold and "graph_us" in r:
                r["graph_cold_us"] = r["graph_us"] * cold[r["provider"]]
                if "eager_us" in r:
                    r["eager_cold_us"] = r["eager_us"] * cold[r["provider"]] * cold.get("eager", 1.0)
    return dict(host=host, floors={card.EMPTY_LAUNCH: empty}, speed=speed)


def test_decode_bars():
    bars = _bars({}, _host_result())
    host = bars["decode: a kept call's host time"]
    assert host["met"] and host["measured"] == "16.0 µs; empty launch 10.0 µs, 1.60× it"
    assert bars["decode: eager within 10 % of CUDA graphs, D = 128"]["met"]
    d64 = bars["decode: eager within 10 % of CUDA graphs, D = 64"]
    assert not d64["met"] and d64["measured"] == "1.120× (22.4 against 20.0 µs)"
    small = bars["decode: batch 1 at or above cuDNN under CUDA graphs"]
    assert not small["met"] and small["measured"] == f"{29.0 / 30.0:.3f}× (2 shapes; 1 below 1)"
    assert small["where"] == "64/8 heads, 16384 keys, D = 128"
    assert "decode: batch 1 at or above cuDNN under CUDA graphs, cuDNN's work (no lengths)" not in bars  # no such rows
    same = _bars({}, _host_result(full=(10.0, 28.0)))["decode: batch 1 at or above cuDNN under CUDA graphs, cuDNN's "
                                                     "work (no lengths)"]
    assert same["met"] and same["measured"] == f"{29.0 / 28.0:.3f}× (2 shapes; 0 below 1)"
    assert same["where"] == "64/8 heads, 16384 keys, D = 128"
    slower = _bars({}, _host_result(full=(12.0, 28.0)))["decode: batch 1 at or above cuDNN under CUDA graphs, cuDNN's "
                                                        "work (no lengths)"]
    assert not slower["met"] and slower["measured"] == f"{11.5 / 12.0:.3f}× (2 shapes; 1 below 1)"
    roof = bars["roofline time beside every attnlab row"]
    assert roof["measured"] == "4 of 5 rows" and not roof["met"]
    slow = _bars({}, _host_result(kept=(25.0, 21.0)))["decode: a kept call's host time"]
    assert not slow["met"] and slow["measured"].startswith("21.0 µs")


def test_decode_bars_l2_cold():
    """Runs with L2-cold times get the eager and batch-1 bars again on them (", L2 cold"); runs without get none."""
    warm = _bars({}, _host_result())
    assert not [b for b in warm if b.endswith(", L2 cold")]
    bars = _bars({}, _host_result(cold={"attnlab": 1.2, "sdpa-cudnn": 1.3, "eager": 1.01}))
    d64 = bars["decode: eager within 10 % of CUDA graphs, D = 64, L2 cold"]
    assert d64["measured"] == f"{1.12 * 1.01:.3f}× ({22.4 * 1.2 * 1.01:.1f} against {20.0 * 1.2:.1f} µs)"
    assert not d64["met"]  # (1.131×)
    assert bars["decode: eager within 10 % of CUDA graphs, D = 128, L2 cold"]["met"]
    small = bars["decode: batch 1 at or above cuDNN under CUDA graphs, L2 cold"]
    worst = min(11.5 * 1.3 / (11.0 * 1.2), 29.0 * 1.3 / (30.0 * 1.2))  # (the warm bar's 0.967× is 1.047× cold)
    assert small["met"] and small["measured"] == f"{worst:.3f}× (2 shapes; 0 below 1)"
    assert small["where"] == "64/8 heads, 16384 keys, D = 128"
    # the warm bars unchanged beside them
    assert bars["decode: batch 1 at or above cuDNN under CUDA graphs"] == warm["decode: batch 1 at or above cuDNN under "
                                                                              "CUDA graphs"]
    # no L2-cold cuDNN rows: no L2-cold batch-1 bar
    alone = _bars({}, _host_result(cold={"attnlab": 1.2}))
    assert "decode: batch 1 at or above cuDNN under CUDA graphs, L2 cold" not in alone
    assert "decode: eager within 10 % of CUDA graphs, D = 64, L2 cold" in alone


def test_the_recorded_h200_runs():
    """The scorecard of prefill runs 35 and 36 with decode-host run 35, each bar against the recorded rows."""
    runs = {n: json.loads((DATA / n).read_text())["rows"] for n in ("prefill-h200-run35.json",
                                                                    "prefill-h200-run36.json")}
    host = json.loads((DATA / "decode-host-h200-run35.json").read_text())
    bars = _bars(runs, host)
    pairs = card.prefill_pairs(runs)
    assert len(pairs) == 48 and {r["run"] for r in pairs} == set(runs)
    for p in ("fwd", "fwd_bwd"):
        rows = [r for r in pairs if r["pass_"] == p]
        b = bars[f"prefill {card.PASS_NAMES[p]} at or above cuDNN"]
        assert b["met"] == (min(r["ratio"] for r in rows) >= 1)
    assert not bars["prefill rows: every head dim, mask, pass, multi-head and GQA, in one run"]["met"]
    assert bars["decode: a kept call's host time"]["measured"].startswith(
        f"{min(h['host_us'] for h in host['host'] if h['call'] in card.OLD_KEPT_CALLS):.1f} µs")  # (no second public row)


def test_a_kept_calls_host_time_is_the_public_calls_where_a_run_has_its_second_row():
    """A run with the public call's second row takes the best of the public call's two rows, not the internal call's
    (which skips the API layer); a run without it, the older pair."""
    old = {"attnlab.flash_decode (plan kept)": 21.8, "flash_decode_triton (plan kept), again": 13.9}
    assert card.kept_host_us(old) == [21.8, 13.9]
    new = old | {"attnlab.flash_decode (plan kept), again": 17.5}
    assert card.kept_host_us(new) == [21.8, 17.5]
    bar = next(b for b in card.decode_bars({"host": [dict(call=c, host_us=t) for c, t in new.items()]})
               if b["bar"] == "decode: a kept call's host time")
    assert bar["measured"].startswith("17.5 µs") and bar["met"]


def test_command_line(tmp_path, capsys):
    with pytest.raises(SystemExit):
        card.main([])
    with pytest.raises(SystemExit):
        card.main(["--prefill", str(tmp_path / "missing.json")])
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    with pytest.raises(SystemExit):
        card.main(["--prefill", str(bad)])
    table = tmp_path / "table.json"
    table.write_text(json.dumps({"rows": _table()}))
    kept = tmp_path / "card.md"
    kept.write_text("mine")
    with pytest.raises(SystemExit):
        card.main(["--prefill", str(table), "--md", str(kept)])
    assert kept.read_text() == "mine"
    capsys.readouterr()
    out_json, out_md = tmp_path / "out.json", tmp_path / "out.md"
    assert card.main(["--prefill", str(table), "--json", str(out_json), "--md", str(out_md)]) == 0
    printed = capsys.readouterr().out
    assert printed == out_md.read_text() and printed.startswith("| bar | measured | where | needed | met |")
    saved = json.loads(out_json.read_text())
    assert saved["prefill"] == ["table.json"] and saved["decode_host"] is None
    assert card.markdown(saved["bars"]) == printed


def test_decode_history_puts_runs_side_by_side(tmp_path, capsys):
    """``--decode-history``: a row a decode bar, a column a run, each cell measured and met or missed; the worst
    shape named where it moves from run to run."""
    a = _host_result()
    b = _host_result(kept=(30.0, 25.0), eager=((128, 1.02), (64, 1.05)), graph=((11.0, 10.9), (30.0, 31.0)))
    text = card.history({"a": a, "b": b})
    lines = text.splitlines()
    assert lines[0] == "| bar | a | b |" and len(lines) == 2 + 4
    cells = {ln.split(" | ")[0].lstrip("| "): ln.rstrip(" |").split(" | ")[1:] for ln in lines[2:]}
    assert cells["decode: a kept call's host time"] == ["16.0 µs; empty launch 10.0 µs, 1.60× it: met",
                                                        "25.0 µs; empty launch 10.0 µs, 2.50× it: missed"]
    assert cells["decode: eager within 10 % of CUDA graphs, D = 64"][1] == "1.050× (21.0 against 20.0 µs): met"
    worst = cells["decode: batch 1 at or above cuDNN under CUDA graphs"]
    assert worst[0].endswith("64/8 heads, 16384 keys, D = 128: missed") and worst[1].endswith(
        "64/8 heads, 8192 keys, D = 128: missed")
    assert "keys" not in cells["decode: eager within 10 % of CUDA graphs, D = 128"][0]  # (the same shape in both)
    paths = []
    for name, result in (("a.json", a), ("b.json", b)):
        paths.append(tmp_path / name)
        paths[-1].write_text(json.dumps(result))
    capsys.readouterr()
    assert card.main(["--decode-history", *map(str, paths)]) == 0
    assert capsys.readouterr().out == text.replace("| a | b |", "| a.json | b.json |")


def test_run_labels_as_a_reader_says_them():
    assert card._runs(["prefill-h200-run35.json", "prefill-h200-run36.json"]) == "prefill runs 35, 36"
    assert card._runs([f"decode-host-h200-run{n}.json" for n in (33, 31, 32, 35, 34)]) == "decode-host runs 31–35"
    assert card._runs(["prefill-h200-run36.json"]) == "prefill run 36"
    assert card._runs(["a-h200-run2.json", "a-h200-run4.json", "b.json"]) == "a runs 2, 4; b"


def test_standing_spans_every_row_and_run():
    """``--standing``'s lines: the span of the peer's median over attnlab's on every row in scope (cuDNN's, and SDPA's
    own choice where the runs have it), the fastest D = 128 forward, and the decode spans over shapes and runs."""
    ratio = {("fwd", 1): 1.03, ("fwd", 4): 1.11, ("fwd_bwd", 1): 1.02, ("fwd_bwd", 4): 0.98}
    rows = _table(lambda D, causal, p, g: ratio[p, g] + (0.01 if D == 128 and causal else 0))
    rows += [dict(r, provider="sdpa", ms=r["ms"] * 1.1) for r in rows if r["provider"] == "sdpa-cudnn"]
    a = _host_result()
    b = _host_result(kept=(30.0, 25.0), eager=((128, 1.02), (64, 1.05)), graph=((11.0, 10.9), (30.0, 31.0)))
    for r in (a, b):
        r["speed"] += [dict(B=8, H=32, Hkv=8, L=32768, D=128, provider="sdpa-cudnn", graph_us=249.0)]
        r["speed"][-2]["graph_tb_per_s"] = 4.3
    scope, lines = card.standing({"p-h200-run1.json": rows}, {"h-h200-run3.json": a, "h-h200-run4.json": b})
    assert scope == ("the prefill rows are D = 64 and 128, 4K tokens, causal and not, multi-head and GQA (4 query "
                     "heads a K/V head); the batch-1 decode shapes 32/8 heads over 32,768 keys at D = 64, 64/8 heads "
                     "over 8,192 keys at D = 128, 64/8 heads over 16,384 keys at D = 128, 32/8 heads over 32,768 keys "
                     "at D = 128")
    got = {(ln["what"], ln["against"]): (ln["measured"], ln["runs"]) for ln in lines}
    cudnn, sdpa = card.STANDING_PEERS[0][1], card.STANDING_PEERS[1][1]
    assert got["prefill forward", cudnn] == ("1.03–1.12× its speed (8 rows)", "p run 1")
    assert got["prefill forward", sdpa] == (f"{1.03 * 1.1:.2f}–{1.12 * 1.1:.2f}× its speed (8 rows)", "p run 1")
    assert got["prefill forward+backward", cudnn][0] == "0.98–1.03× its speed (8 rows)"
    assert got["fastest forward at D = 128", "—"] == ("732 TFLOP/s (non-causal, 4K, forward, 16/4 heads)", "p run 1")
    assert got["decode, batch 1, CUDA graphs, with the lengths, as a server calls it", "cuDNN"] == (
        f"{29.0 / 30.0:.3f}–{11.5 / 11.0:.3f}× its speed", "h runs 3, 4")
    assert not any("without the lengths" in w for w, _ in got)  # (no attnlab-full rows)
    assert got["decode, batch 8, 32/8 heads over 32,768 keys at D = 128, CUDA graphs", "cuDNN"][0] == (
        f"{249.0 / 250.0:.3f}× its speed, reading the cache at 4.3 TB/s")
    assert got["decode called eagerly, batch 1 over 32K keys at D = 64", "the same calls in a CUDA graph"][0] == (
        "1.05–1.12× their time")
    assert got["a decode call's host time, its plan kept", "an empty Triton launch"][0] == "16.0–25.0 µs, 1.60–2.50× its time"
    # the scope says what the rows are: here D = 128 causal GQA rows only
    some = [r for r in rows if r["D"] == 128 and r["causal"] and r["H"] != r["Hkv"]]
    assert card.standing({"p-h200-run1.json": some}, {})[0] == (
        "the prefill rows are D = 128, 4K tokens, causal, GQA (4 query heads a K/V head)")
    text = card.standing_markdown(scope, lines)
    assert text.startswith("| on an H200 | against | attnlab | runs |\n|---|---|---|---|\n")
    assert text.endswith(f"\n\n({scope[0].upper()}{scope[1:]}.)\n") and len(text.splitlines()) == 2 + len(lines) + 2


def test_standing_on_the_command_line(tmp_path, capsys):
    """The README's table from recorded runs, headed by the GPU they name (an H100's files here); runs of two GPUs are
    refused, with nothing written."""
    table, host = tmp_path / "p-h100-run1.json", tmp_path / "h-h100-run3.json"
    h100 = "NVIDIA H100 80GB HBM3"
    table.write_text(json.dumps({"environment": {"gpu": h100}, "rows": _table()}))
    host.write_text(json.dumps(dict(_host_result(), gpu=h100)))
    capsys.readouterr()
    assert card.main(["--standing", "--prefill", str(table), "--decode-host", str(host)]) == 0
    out = capsys.readouterr().out
    assert out == card.standing_markdown(*card.standing({"p-h100-run1.json": _table()},
                                                        {"h-h100-run3.json": dict(_host_result(), gpu=h100)}), "H100")
    assert out.startswith("| on an H100 | against | attnlab | runs |")
    other = tmp_path / "h-h200-run4.json"
    other.write_text(json.dumps(dict(_host_result(), gpu="NVIDIA H200")))
    md = tmp_path / "standing.md"
    with pytest.raises(SystemExit) as e:
        card.main(["--standing", "--prefill", str(table), "--decode-host", str(other), "--md", str(md)])
    assert e.value.code == 2 and "measured on H100, H200" in capsys.readouterr().err and not md.exists()
    assert card.gpu_of([None, ""]) is None and card._runs(["p-h100-run1.json", "p-h100-run2.json"]) == "p runs 1, 2"
    assert card.standing_markdown("", [], "B200").startswith("| on a B200 |")
    assert card.standing_markdown("", [], None).startswith("| on the GPU |")
    assert "| prefill forward | cuDNN (SDPA's fastest backend) | 1.05× its speed (8 rows) | p run 1 |" in out


def test_the_host_bar_reads_the_empty_launch_timed_in_the_same_rounds_where_a_run_has_it():
    """Runs from decode-host run 59 on time an empty launch among the host rows, in the same rounds as the kept call:
    the host bar and the standing's ratio take that one (on an unsteady host the floors timed before the rows saw
    another host); older runs, the floors' empty launch."""
    result = _host_result()
    assert card.empty_launch_us(result) == (10.0, False)
    result["host"].append(dict(call=card.EMPTY_ROW, host_us=12.5))
    assert card.empty_launch_us(result) == (12.5, True)
    host = _bars({}, result)["decode: a kept call's host time"]
    assert host["measured"] == f"16.0 µs; empty launch 12.5 µs in the same rounds, {16.0 / 12.5:.2f}× it"
    scope, lines = card.standing({}, {"run": result})
    line = next(x for x in lines if x["what"] == "a decode call's host time, its plan kept")
    assert line["measured"] == f"16.0 µs, {16.0 / 12.5:.2f}× its time"
