"""``attnlab.bench.run`` with ``rounds``: the providers of a configuration take turns (the order rotated by one each
round), a row's time is the median of its rounds, and the prefill table shows each ratio's lowest and
highest round. On the CPU, with providers whose "timed" call records the order it ran in."""

from __future__ import annotations

import statistics

import pytest
from tests.helpers import load_script

from attnlab import bench as B

prefill = load_script("benchmarks/prefill.py")


def _bench(calls: list, fail_make: set = frozenset(), fail_round: dict | None = None, names=("a", "b", "c")):
    fail_round = fail_round or {}

    def provider(name):
        def make(cfg):
            if name in fail_make:
                raise ValueError(f"{name} refuses N = {cfg['N']}")
            seen = [0]

            def fn():
                calls.append((cfg["N"], name))
                seen[0] += 1
                if name in fail_round and seen[0] > fail_round[name]:
                    raise RuntimeError(f"{name} broke")
            return fn
        return make

    return B.Benchmark(name="t", x_names=["N"], x_vals=[(8,), (16,)], providers={n: provider(n) for n in names},
                       flops=lambda cfg: 2.0 * cfg["N"])


def test_rounds_alternate_the_order_and_take_the_median(monkeypatch):
    calls: list = []
    scripted = {"a": [3.0, 1.0, 2.0] * 2, "b": [5.0, 4.0, 9.0] * 2, "c": [1.0, 1.0, 7.0] * 2}  # (each its own order)

    def time_fn(fn, device="cpu", **kw):
        fn()
        return scripted[calls[-1][1]].pop(0)

    monkeypatch.setattr(B, "time_fn", time_fn)
    rows = B.run(_bench(calls), rounds=3, console=_quiet())
    # per configuration: round 0 a b c, round 1 b c a, round 2 c a b — no provider twice in a row
    assert [n for N, n in calls if N == 8] == list("abc") + list("bca") + list("cab")
    assert [n for N, n in calls] == [n for n in "abcbcacab"] * 2
    assert all(x != y for x, y in zip(calls, calls[1:]))
    by = {(r["N"], r["provider"]): r for r in rows}
    assert by[(8, "a")]["ms_rounds"] == [3.0, 1.0, 2.0] and by[(8, "a")]["ms"] == 2.0
    assert [by[(16, n)]["places"] for n in "abc"] == [[0, 2, 1], [1, 0, 2], [2, 1, 0]]  # where each round timed it
    assert by[(8, "b")]["ms"] == statistics.median([5.0, 4.0, 9.0]) == 5.0
    assert by[(16, "c")]["ms"] == 1.0 and by[(16, "c")]["tflops"] == pytest.approx(2.0 * 16 / 1e-3 / 1e12)
    assert [(r["N"], r["provider"]) for r in rows] == [(N, n) for N in (8, 16) for n in "abc"]


def test_one_round_times_each_provider_once_as_before(monkeypatch):
    calls: list = []
    monkeypatch.setattr(B, "time_fn", lambda fn, device="cpu", **kw: (fn(), 1.5)[1])
    rows = B.run(_bench(calls), console=_quiet())
    assert calls == [(N, n) for N in (8, 16) for n in "abc"]
    assert all(r["ms"] == 1.5 and "ms_rounds" not in r for r in rows)


def test_a_refused_shape_and_a_failing_round_are_skipped(monkeypatch):
    calls: list = []
    monkeypatch.setattr(B, "time_fn", lambda fn, device="cpu", **kw: (fn(), 2.0)[1])
    rows = B.run(_bench(calls, fail_make={"b"}, fail_round={"c": 1}), rounds=3, console=_quiet())
    by = {(r["N"], r["provider"]): r for r in rows}
    assert by[(8, "b")]["skipped"].startswith("ValueError: b refuses N = 8") and "ms" not in by[(8, "b")]
    assert by[(8, "c")]["skipped"] == "RuntimeError: c broke" and "ms" not in by[(8, "c")]
    assert by[(8, "a")]["ms_rounds"] == [2.0, 2.0, 2.0] and by[(8, "a")]["places"] == [0, 1, 0]
    assert "places" not in by[(8, "c")] and "places" not in by[(8, "b")]
    assert [n for N, n in calls if N == 8] == ["a", "c", "c", "a", "a"]  # rounds: a c | c (broke) a | a


def test_after_is_called_once_a_time_with_the_row(monkeypatch):
    calls: list = []
    monkeypatch.setattr(B, "time_fn", lambda fn, device="cpu", **kw: (fn(), 1.0)[1])
    seen = []
    B.run(_bench(calls, names=("a", "b")), rounds=2, console=_quiet(), after=lambda row: seen.append(
        (row["N"], row["provider"], len(row.get("ms_rounds", [])))))
    # four times a configuration: a b | b a, each reported as its time went in
    assert [(N, n) for N, n, _ in seen] == [(8, "a"), (8, "b"), (8, "b"), (8, "a"), (16, "a"), (16, "b"), (16, "b"),
                                          (16, "a")]
    rows = B.run(_bench([], names=("a",)), console=_quiet(), after=prefill.note_gpu_state)
    for row in rows:  # on this machine the state may be None (no GPU), but one entry a time
        assert len(row["gpu_state"]) == 1
        assert row["gpu_state"][0] is None or set(row["gpu_state"][0]) == {"sm_mhz", "power_w"}


def test_around_wraps_each_time_and_sees_failures(monkeypatch):
    """``around(row)`` is entered before each time and left after it, with the row, the time taken inside it; a
    time that fails leaves it too (and the row is skipped as before)."""
    import contextlib

    calls: list = []
    events: list = []

    def time_fn(fn, device="cpu", **kw):
        events.append("time")
        fn()
        return 1.0

    @contextlib.contextmanager
    def around(row):
        events.append(("enter", row["N"], row["provider"]))
        try:
            yield
        finally:
            events.append(("leave", row["N"], row["provider"]))

    monkeypatch.setattr(B, "time_fn", time_fn)
    rows = B.run(_bench(calls, names=("a", "b"), fail_round={"b": 1}), console=_quiet(), around=around)
    assert events[:6] == [("enter", 8, "a"), "time", ("leave", 8, "a"), ("enter", 8, "b"), "time", ("leave", 8, "b")]
    assert len(events) == 12 and {r["provider"]: "skipped" in r for r in rows} == {"a": False, "b": True}
    # a row's first time: one call before ``around`` (a build outside what it records), the timed one inside
    assert calls[:4] == [(8, "a"), (8, "a"), (8, "b"), (8, "b")]
    # with rounds, only the row's first time has that call before it
    calls.clear(), events.clear()
    B.run(_bench(calls, names=("a",)), console=_quiet(), around=around, rounds=3)
    assert [c for c in calls if c[0] == 8] == [(8, "a")] * 4 and events.count("time") == 6
    # a first call that fails skips the row, ``around`` never entered
    calls.clear(), events.clear()
    rows = B.run(_bench(calls, names=("b",), fail_round={"b": 0}), console=_quiet(), around=around)
    assert events == [] and all("skipped" in r for r in rows)


def test_the_clock_sampler_reads_during_each_time():
    """``ClockSampler`` reads the state in a thread from the time's start to its end (at least once), and puts the
    reads' summary into the row, one entry a time; None where nothing answered."""
    import threading

    reads = iter([{"sm_mhz": 1500.0, "power_w": 600.0}, None, {"sm_mhz": 1700.0, "power_w": 700.0}]
                 + [{"sm_mhz": 1600.0, "power_w": 650.0}] * 10_000)
    third = threading.Event()
    count = [0]

    def read():
        count[0] += 1
        if count[0] >= 3:
            third.set()
        return next(reads)

    sampler = prefill.ClockSampler(read=read, interval=0.001)
    row: dict = {}
    with sampler(row):
        assert third.wait(10)  # (the time lasts until the thread has read three times)
    entry = row["gpu_during"][0]
    n = entry["reads"]
    assert n == count[0] - 1 and n >= 2  # one read answered None
    assert (entry["sm_mhz_min"], entry["sm_mhz_max"]) == (1500.0, 1700.0)
    mhz = [1500.0, 1700.0] + [1600.0] * (n - 2)
    assert entry["sm_mhz"] == pytest.approx(sum(mhz) / n)
    with prefill.ClockSampler(read=lambda: None, interval=0.001)(row):
        pass
    assert row["gpu_during"][1] is None and len(row["gpu_during"]) == 2
    assert prefill.state_summary([]) is None
    with pytest.raises(ValueError, match="interval"):
        prefill.ClockSampler(read=read, interval=0)


def test_the_share_at_the_clock_prefers_the_reads_during_the_times():
    from attnlab.cost import GPUS

    cfg = dict(D=128, causal=False, N=4096, pass_="fwd", B=4, H=16, Hkv=16, provider="attnlab", ms=1.0)
    during = [{"sm_mhz": 1600.0, "sm_mhz_min": 1500.0, "sm_mhz_max": 1700.0, "power_w": 690.0, "reads": 50}, None,
              {"sm_mhz": 1650.0, "sm_mhz_min": 1600.0, "sm_mhz_max": 1700.0, "power_w": 695.0, "reads": 40}]
    after = [{"sm_mhz": 1980.0, "power_w": 150.0}] * 3
    both = prefill.with_roofline([dict(cfg, gpu_during=during, gpu_state=after)], GPUS["H200"])[0]
    assert both["sm_mhz"] == 1625.0  # the median of the two answered means; the reads after the times not used
    old = prefill.with_roofline([dict(cfg, gpu_state=after)], GPUS["H200"])[0]
    assert old["sm_mhz"] == 1980.0  # a run from before the reads during: the read after each time


@pytest.mark.parametrize("rounds", [0, -1, 1.5])
def test_rounds_must_be_a_positive_whole_number(rounds):
    with pytest.raises(ValueError, match="rounds must be a positive whole number"):
        B.run(_bench([]), rounds=rounds, console=_quiet())


def test_prefill_table_shows_the_lowest_and_highest_round():
    cfg = dict(D=64, causal=True, N=4096, pass_="fwd_bwd", B=4, H=32, Hkv=32)
    rows = [dict(cfg, provider="attnlab", ms=1.0, tflops=100.0, ms_rounds=[1.0, 1.1, 0.9]),
            dict(cfg, provider="sdpa-cudnn", ms=1.05, tflops=95.0, ms_rounds=[1.05, 1.0, 1.08])]
    ratios = prefill.round_ratios(rows[0], rows[1])
    assert ratios == pytest.approx([1.05, 1.0 / 1.1, 1.08 / 0.9])
    line = next(x for x in prefill.markdown(rows, names=["attnlab", "sdpa-cudnn"]).splitlines() if x.startswith("| 64"))
    assert f"| {100 / 95:.2f} ({1.0 / 1.1:.2f}–{1.08 / 0.9:.2f}) |" in line
    # rows timed once (or with different round counts) show the ratio alone
    once = [{k: v for k, v in r.items() if k != "ms_rounds"} for r in rows]
    assert prefill.round_ratios(*once) == [] and prefill.round_ratios(rows[0], dict(rows[1], ms_rounds=[1.0])) == []
    assert f"| {100 / 95:.2f} |" in next(x for x in prefill.markdown(once, names=["attnlab", "sdpa-cudnn"]).splitlines()
                                         if x.startswith("| 64"))


def _quiet():
    import io

    from rich.console import Console

    return Console(file=io.StringIO(), width=200)


def test_slow_rounds_are_counted_by_provider_round_and_place_with_their_clocks():
    """prefill.slow_rounds: rounds over 1.10 × their row's fastest, by provider, round and place (recorded, or the
    rotation's where only clocks were), with the clock after each beside the row's other rounds'."""
    cfg = dict(D=64, causal=False, N=4096, pass_="fwd", B=4, H=32, Hkv=32)
    state = lambda *mhz: [{"sm_mhz": m, "power_w": 600.0} for m in mhz]  # noqa: E731
    rows = [dict(cfg, provider="attnlab", ms_rounds=[1.0, 1.2, 1.05], places=[0, 2, 1], gpu_state=state(1900, 1500, 1880)),
            dict(cfg, provider="sdpa", ms_rounds=[2.0, 2.0, 2.5], places=[1, 0, 2], gpu_state=state(1890, 1870, 1400))]
    s = prefill.slow_rounds(rows)
    assert s["times"] == 6 and [(r["provider"], r["round"], r["place"]) for r in s["slow"]] == [
        ("attnlab", 1, 2), ("sdpa", 2, 2)]
    assert s["slow"][0]["over_best"] == pytest.approx(1.2) and s["slow"][0]["others_mhz"] == [1900, 1880]
    assert s["by_provider"] == {"attnlab": 1, "sdpa": 1} and s["by_round"] == {1: 1, 2: 1} and s["by_place"] == {2: 2}
    assert s["clock_slow"] == 1450 and s["clock_rest"] == statistics.median([1900, 1880, 1890, 1870])
    # no recorded places, but clocks: the rotation's (row i in round k at (i - k) mod n); neither: unknown
    inferred = prefill.slow_rounds([{k: v for k, v in r.items() if k != "places"} for r in rows])
    assert [r["place"] for r in inferred["slow"]] == [(0 - 1) % 2, (1 - 2) % 2]
    bare = prefill.slow_rounds([{k: v for k, v in r.items() if k not in ("places", "gpu_state")} for r in rows])
    assert [r["place"] for r in bare["slow"]] == [None, None] and bare["by_place"] == {} and bare["clock_slow"] is None
    md = prefill.slow_rounds_markdown(rows)
    assert "2 of 6" in md and "Median SM clock after the slow rounds 1450 MHz" in md
    assert "| 64 | 32/32 | no | 4K | fwd | attnlab | 1 | 2 | 1.200 | 1500 | 1900, 1880 |" in md
    assert prefill.slow_rounds_markdown([dict(cfg, provider="attnlab", ms=1.0)]) == ""
