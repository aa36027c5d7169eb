"""Where attnlab stands against its bars on a GPU, computed from recorded runs: the prefill table
(``prefill.py bench``'s JSON) and the decode host run (``decode_host.py``'s JSON).

The bars (each row of the scorecard says what it measured, where the worst case is, what was needed and whether it
was met):

* **prefill at or above cuDNN**: attnlab's speed over SDPA's cuDNN backend (the ratio of the two medians) on every
  row at D = 64 and 128 with N ≥ 4K, causal and not, forward and forward+backward, multi-head and GQA, a bar per
  pass; the worst round of the worst row beside it (rows timed in turns). And whether those rows cover every such
  combination (head dim × mask × pass × multi-head/GQA) within one run, or needed several;
* **700 TFLOP/s forward at D = 128** (a goal beyond the bar): the fastest D = 128 forward row; where the run noted the
  clock and power during its times (``prefill.py bench --clocks``), short of the goal, the SM clock it ran at, its
  share of the roofline at that clock, the power it drew and the energy it spent a FLOP (pJ: W over TFLOP/s) beside
  the energy a FLOP at which the goal fits in that power. At the power limit, where the long D = 128 forward rows
  run, the energy a FLOP sets the speed: the speed of a row's times followed the clock read with them by a fraction
  of the clock's change (``clock_share.py --power-limit``);
* **decode host time**: a kept ``flash_decode`` call's host µs (the better of the run's two timings of it), at most
  20, with the empty one-argument Triton launch of the same process beside it (a host that launches slowly
  makes every call slow: the ratio is what the library controls);
* **eager decode within 10 % of CUDA graphs** at 32K keys, batch 1, each head dim;
* **small-batch decode at least cuDNN's speed under CUDA graphs**: the batch-1 shapes, GPU time replayed from
  graphs; once for attnlab's call with the lengths (``cache_seqlens``, as a server passes them), and once for the
  call without them, the work SDPA's cuDNN call does;
* the eager and batch-1 decode bars twice where the run has both timings: every call on the same inputs (a cache
  smaller than the L2 is served from it) and L2-cold (", L2 cold": each call on the next of several copies of the K/V
  cache, which then comes from HBM, as in a model's decode step);
* **roofline columns**: every attnlab row of both tables carries ``attnlab.cost``'s roofline time.

    python benchmarks/scorecard.py --prefill benchmarks/data/prefill-h200-run35.json \\
        benchmarks/data/prefill-h200-run36.json --decode-host benchmarks/data/decode-host-h200-run35.json
    python benchmarks/scorecard.py --prefill table.json --decode-host host.json --json card.json --md card.md
    python benchmarks/scorecard.py --decode-history benchmarks/data/decode-host-h200-run3{1,2,3,4,5}.json
    python benchmarks/scorecard.py --standing --prefill benchmarks/data/prefill-h200-run3{5,6}.json \
        --decode-history benchmarks/data/decode-host-h200-run3{1,2,3,4,5}.json     # the README's table

``--standing`` prints, in place of the bars, what a reader asks first: the span of attnlab's speed over cuDNN's and
over SDPA's own choice on the prefill rows, the fastest D = 128 forward, and the spans over the decode host runs of
decode against cuDNN, eager against CUDA graphs and a call's host time.

Nothing is timed here: the numbers are the recorded runs' own.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # (prefill.py's and decode_host.py's, also as a module)
from decode_host import EMPTY_ROW, TINY  # noqa: E402
from prefill import kv_heads, round_ratios, row_power_w  # noqa: E402

PEER = "sdpa-cudnn"
PEER_NAME = "cuDNN"
HOST_BAR_US = 20.0
EAGER_BAR = 1.10
GOAL_TFLOPS = 700.0
# a kept call's host time: the best of the public call's two rows (before the knob rows, and again after them: the
# host's speed drifts within a process); runs before the second row took the internal call's second row instead
KEPT_CALLS = ("attnlab.flash_decode (plan kept)", "attnlab.flash_decode (plan kept), again")
OLD_KEPT_CALLS = ("attnlab.flash_decode (plan kept)", "flash_decode_triton (plan kept), again")
EMPTY_LAUNCH = "triton_empty_1_arg, kernel[grid]"
PASS_NAMES = {"fwd": "forward", "fwd_bwd": "forward+backward"}
# the batch-1 bar by decode_host.py's provider: attnlab's call as a server makes it (with ``cache_seqlens``, all full:
# its splits wait for the length before their first loads), and the work cuDNN's call does (no lengths)
BATCH1_BARS = {"attnlab": "decode: batch 1 at or above cuDNN under CUDA graphs",
               "attnlab-full": "decode: batch 1 at or above cuDNN under CUDA graphs, cuDNN's work (no lengths)"}
# the decode calls' times two ways (decode_host.py): every call on the same inputs (bars named as before), and
# L2-cold, each call on the next of several copies of the K/V cache (runs from decode-host run 36 on)
L2_WAYS = (("", "eager_us", "graph_us"), (", L2 cold", "eager_cold_us", "graph_cold_us"))


def _where(r: dict) -> str:
    heads = f", {r['H']}/{r['Hkv']} heads" if r["H"] != r["Hkv"] else ""
    return (f"D = {r['D']}, {'causal' if r['causal'] else 'non-causal'}, {r['N'] // 1024}K, "
            f"{PASS_NAMES.get(r['pass_'], r['pass_'])}{heads}")


def prefill_pairs(runs: dict[str, list[dict]], peer: str = PEER) -> list[dict]:
    """attnlab's rows with their ``peer``'s (cuDNN's by default), of the bars' scope (D 64 and 128, N ≥ 4K), from every
    run ({label: its rows}): each with ``ratio`` (the peer's median ms over attnlab's), ``worst_round`` (the lowest
    round-by-round ratio; the median where the rows were timed once), where the rows noted the GPU's clock after every
    time (``prefill.py --clocks``) ``worst_round_mhz`` (attnlab's and the peer's SM clock in that round), and ``run``."""
    out = []
    for label, rows in runs.items():
        by: dict[tuple, dict] = {}
        for r in rows:
            if "ms" in r and r["D"] in (64, 128) and r["N"] >= 4096:
                by.setdefault((r["D"], r["causal"], r["N"], r["pass_"], r["H"], kv_heads(r)), {})[r["provider"]] = r
        for v in by.values():
            a, p = v.get("attnlab"), v.get(peer)
            if a is None or p is None:
                continue
            rounds = round_ratios(a, p)
            pair = dict(a, Hkv=kv_heads(a), ratio=p["ms"] / a["ms"],
                        worst_round=min(rounds) if rounds else p["ms"] / a["ms"], run=label)
            i = rounds.index(min(rounds)) if rounds else None
            states = [r.get("gpu_state") or [] for r in (a, p)]
            if i is not None and all(len(st) > i and st[i].get("sm_mhz") for st in states):
                pair["worst_round_mhz"] = (states[0][i]["sm_mhz"], states[1][i]["sm_mhz"])
            out.append(pair)
    return out


def _cells(pairs: list[dict]) -> set[tuple]:
    return {(r["D"], r["causal"], r["pass_"], r["H"] != r["Hkv"]) for r in pairs}


REQUIRED = {(D, c, p, g) for D in (64, 128) for c in (False, True) for p in ("fwd", "fwd_bwd") for g in (False, True)}


def prefill_bars(runs: dict[str, list[dict]]) -> list[dict]:
    pairs = prefill_pairs(runs)
    bars = []
    for p in ("fwd", "fwd_bwd"):
        rows = [r for r in pairs if r["pass_"] == p]
        if not rows:
            bars.append(dict(bar=f"prefill {PASS_NAMES[p]} at or above cuDNN", measured="no rows", where="",
                             needed="≥ 1.00× on every row", met=False))
            continue
        worst = min(rows, key=lambda r: r["ratio"])
        low = min(rows, key=lambda r: r["worst_round"])
        mhz = low.get("worst_round_mhz")
        parts = ([f" on {_where(low)}"] if low is not worst else []) + (  # the worst round's row, where it is another
            [f" attnlab's SM clock {mhz[0]:.0f} MHz against cuDNN's {mhz[1]:.0f}"] if mhz else [])
        clocks = ",".join(parts)
        bars.append(dict(bar=f"prefill {PASS_NAMES[p]} at or above cuDNN",
                         measured=f"{worst['ratio']:.3f}× ({len(rows)} rows; {sum(r['ratio'] < 1 for r in rows)} "
                                  f"below 1; worst round {low['worst_round']:.2f}×{clocks})",
                         where=_where(worst), needed="≥ 1.00× on every row", met=worst["ratio"] >= 1.0))
    one_run = [label for label, rows in runs.items()
               if REQUIRED <= _cells([r for r in pairs if r["run"] == label])]
    missing = REQUIRED - _cells(pairs)
    bars.append(dict(bar="prefill rows: every head dim, mask, pass, multi-head and GQA, in one run",
                     measured=(f"{len(REQUIRED) - len(missing)} of {len(REQUIRED)} combinations, "
                               + (f"all in {one_run[0]}" if one_run else f"over {len(runs)} runs")),
                     where="", needed="all in one run", met=bool(one_run)))
    fwd128 = [r for r in pairs if r["pass_"] == "fwd" and r["D"] == 128]
    if fwd128:
        best = max(fwd128, key=lambda r: r["tflops"])
        measured = f"{best['tflops']:.0f} TFLOP/s"
        mhz, share, watts = best.get("sm_mhz"), best.get("clock_of_roofline"), row_power_w(best)
        if mhz and share and best["tflops"] < GOAL_TFLOPS:  # (runs with --clocks: the clock it ran at, and its share)
            measured += f" at {mhz:,.0f} MHz, {share:.0%} of the roofline at that clock"
            if watts:  # and the power it drew: at a power limit the energy a FLOP sets the speed
                measured += (f", {watts:.0f} W: {watts / best['tflops']:.3f} pJ a FLOP, where {GOAL_TFLOPS:.0f} "
                             f"TFLOP/s at that power needs {watts / GOAL_TFLOPS:.3f}")
        bars.append(dict(bar="forward at D = 128 (goal beyond the bar)", measured=measured,
                         where=_where(best), needed=f"{GOAL_TFLOPS:.0f} TFLOP/s", met=best["tflops"] >= GOAL_TFLOPS))
    return bars


def kept_host_us(host: dict) -> list[float]:
    """The host µs of a run's kept-call rows (``host``: call -> µs): the public call's two where the run has both, else
    (older runs) ``OLD_KEPT_CALLS``."""
    return [host[c] for c in (KEPT_CALLS if KEPT_CALLS[1] in host else OLD_KEPT_CALLS) if c in host]


def empty_launch_us(result: dict) -> tuple[float | None, bool]:
    """A decode-host run's empty one-argument Triton launch (µs) and whether it was timed in the same rounds as the
    kept-call rows (``EMPTY_ROW``, runs from decode-host run 59 on) rather than among the floors before them."""
    host = {h["call"]: h["host_us"] for h in result.get("host", [])}
    if EMPTY_ROW in host:
        return host[EMPTY_ROW], True
    return result.get("floors", {}).get(EMPTY_LAUNCH), False


def decode_bars(result: dict) -> list[dict]:
    host = {h["call"]: h["host_us"] for h in result.get("host", [])}
    bars = []
    kept = kept_host_us(host)
    if kept:
        empty, same = empty_launch_us(result)
        beside = f"; empty launch {empty:.1f} µs{' in the same rounds' if same else ''}, {min(kept) / empty:.2f}× it" \
            if empty else ""
        bars.append(dict(bar="decode: a kept call's host time", measured=f"{min(kept):.1f} µs{beside}",
                         where="B = {}, {}/{} heads, {} keys, D = {} (GPU time far below the host's)".format(*TINY),
                         needed=f"≤ {HOST_BAR_US:.0f} µs", met=min(kept) <= HOST_BAR_US))
    speed = result.get("speed", [])
    mine = [r for r in speed if r["provider"] == "attnlab"]
    peer = {(r["B"], r["H"], r["Hkv"], r["L"], r["D"]): r for r in speed if r["provider"] == PEER}
    for suffix, eager_key, graph_key in L2_WAYS:
        for r in sorted((r for r in mine if r["B"] == 1 and r["L"] == 32768 and graph_key in r), key=lambda r: -r["D"]):
            ratio = r[eager_key] / r[graph_key]
            bars.append(dict(bar=f"decode: eager within 10 % of CUDA graphs, D = {r['D']}{suffix}",
                             measured=f"{ratio:.3f}× ({r[eager_key]:.1f} against {r[graph_key]:.1f} µs)",
                             where=f"B = 1, {r['H']}/{r['Hkv']} heads, 32K keys", needed=f"≤ {EAGER_BAR:.2f}×",
                             met=ratio <= EAGER_BAR))
        for provider, bar in BATCH1_BARS.items():
            ratios = [(peer[k][graph_key] / r[graph_key], r) for r in speed
                      if r["provider"] == provider and r["B"] == 1 and graph_key in r
                      and (k := (r["B"], r["H"], r["Hkv"], r["L"], r["D"])) in peer and graph_key in peer[k]]
            if ratios:
                ratio, r = min(ratios, key=lambda x: x[0])
                bars.append(dict(bar=bar + suffix,
                                 measured=f"{ratio:.3f}× ({len(ratios)} shapes; {sum(x < 1 for x, _ in ratios)} below 1)",
                                 where=f"{r['H']}/{r['Hkv']} heads, {r['L']} keys, D = {r['D']}",
                                 needed="≥ 1.00× on every shape", met=ratio >= 1.0))
    return bars


def roofline_bar(runs: dict[str, list[dict]], result: dict | None) -> dict:
    rows = [r for rs in runs.values() for r in rs if r.get("provider") == "attnlab" and "ms" in r]
    rows += [r for r in (result or {}).get("speed", []) if r["provider"] == "attnlab"]
    have = sum("roofline_ms" in r for r in rows)
    return dict(bar="roofline time beside every attnlab row", measured=f"{have} of {len(rows)} rows", where="",
                needed="every row", met=bool(rows) and have == len(rows))


def scorecard(runs: dict[str, list[dict]], result: dict | None) -> list[dict]:
    """The bars of the recorded runs ({label: prefill rows}) and decode host result (``decode_host.py``'s JSON)."""
    return ([*prefill_bars(runs)] if runs else []) + (decode_bars(result) if result else []) + [roofline_bar(runs, result)]


def history(results: dict[str, dict]) -> str:
    """The decode bars of several decode host runs ({label: ``decode_host.py``'s JSON}), a row a bar and a column a
    run, each cell what the run measured (and where, for a bar whose worst case moves from run to run) and whether
    it met the bar."""
    cards = {label: {b["bar"]: b for b in decode_bars(r)} for label, r in results.items()}
    names = list(dict.fromkeys(name for card in cards.values() for name in card))
    lines = ["| bar | " + " | ".join(cards) + " |", "|---|" + "---|" * len(cards)]
    for name in names:
        moves = len({c[name]["where"] for c in cards.values() if name in c}) > 1
        cells = [(f"{c[name]['measured']}" + (f", {c[name]['where']}" if moves else "")
                  + f": {'met' if c[name]['met'] else 'missed'}" if name in c else "—") for c in cards.values()]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


STANDING_PEERS = (("sdpa-cudnn", "cuDNN (SDPA's fastest backend)"), ("sdpa", "SDPA's own choice of backend"))


def _span(xs, digits: int = 2) -> str:
    lo, hi = f"{min(xs):.{digits}f}", f"{max(xs):.{digits}f}"
    return lo if lo == hi else f"{lo}–{hi}"


def _runs(labels) -> str:
    """Recorded runs' file names as a reader says them: "prefill-h200-run35.json", "prefill-h200-run36.json" ->
    "prefill runs 35, 36"; five consecutive decode-host runs -> "decode-host runs 31–35"."""
    by: dict[str, list[int]] = {}
    for label in labels:
        m = re.fullmatch(r"(.+?)-(?:[a-z]\d{2,3}[a-z]?|gpu)-run(\d+)(?:\.json)?", label)  # (the GPU tag: h200, h100)
        name, n = (m.group(1), int(m.group(2))) if m else (label.removesuffix(".json"), None)
        by.setdefault(name, []).append(n)
    out = []
    for name, ns in by.items():
        if None in ns:
            out.append(name)
            continue
        ns = sorted(ns)
        nums = (f"{ns[0]}–{ns[-1]}" if len(ns) > 2 and ns == list(range(ns[0], ns[-1] + 1))
                else ", ".join(map(str, ns)))
        out.append(f"{name} run{'s' if len(ns) > 1 else ''} {nums}")
    return "; ".join(out)


def _shape(r: dict) -> tuple:
    return r["B"], r["H"], r["Hkv"], r["L"], r["D"]


def standing(runs: dict[str, list[dict]], hosts: dict[str, dict]) -> tuple[str, list[dict]]:
    """What attnlab measured against its peers, for a reader rather than against the bars: from prefill runs ({label:
    prefill.py's rows}) the spans of its speed over cuDNN's and over SDPA's own choice on every row of the bars' scope,
    and its fastest D = 128 forward; from decode host runs ({label: decode_host.py's JSON}) the spans over the shapes
    and runs of batch-1 and batch-8 decode against cuDNN under CUDA graphs, of eager decode over its graph time at 32K,
    and of a kept call's host time. Returns the scope (a sentence: which rows and shapes) and the lines (``what``,
    ``against``, ``measured``, ``runs``)."""
    lines, scope = [], []
    pairs = prefill_pairs(runs)
    if pairs:
        Ns = sorted({r["N"] for r in pairs})
        groups = sorted({r["H"] // r["Hkv"] for r in pairs} - {1})
        lengths = f"{Ns[0] // 1024}K" + (f"–{Ns[-1] // 1024}K" if len(Ns) > 1 else "")
        dims = " and ".join(str(D) for D in sorted({r["D"] for r in pairs}))
        masks = {r["causal"] for r in pairs}
        mask = "causal and not" if len(masks) == 2 else "causal" if True in masks else "non-causal"
        kinds = ["multi-head"] * any(r["H"] == r["Hkv"] for r in pairs) + (
            [f"GQA ({' and '.join(map(str, groups))} query heads a K/V head)"] if groups else [])
        scope.append(f"the prefill rows are D = {dims}, {lengths} tokens, {mask}, {' and '.join(kinds)}")
        for p in ("fwd", "fwd_bwd"):
            for peer, name in STANDING_PEERS:
                rows = [r for r in prefill_pairs(runs, peer) if r["pass_"] == p]
                if rows:
                    lines.append(dict(what=f"prefill {PASS_NAMES[p]}", against=name,
                                      measured=f"{_span([r['ratio'] for r in rows])}× its speed ({len(rows)} rows)",
                                      runs=_runs(runs)))
        fwd = [r for r in pairs if r["pass_"] == "fwd" and r["D"] == 128]
        if fwd:
            best = max(fwd, key=lambda r: r["tflops"])
            lines.append(dict(what="fastest forward at D = 128", against="—",
                              measured=f"{best['tflops']:.0f} TFLOP/s ({_where(best).removeprefix('D = 128, ')})",
                              runs=_runs([best["run"]])))
    if hosts:
        speed = {label: r.get("speed", []) for label, r in hosts.items()}

        def ratios(provider, batch):
            out = []
            for rows in speed.values():
                peer = {_shape(r): r for r in rows if r["provider"] == PEER}
                out += [peer[_shape(r)]["graph_us"] / r["graph_us"] for r in rows
                        if r["provider"] == provider and r["B"] == batch and _shape(r) in peer]
            return out

        shapes = sorted({(r["H"], r["Hkv"], r["L"], r["D"]) for rows in speed.values() for r in rows
                         if r["provider"] == "attnlab" and r["B"] == 1}, key=lambda s: (s[3], s[2], s[0]))
        if shapes:
            scope.append("the batch-1 decode shapes " + ", ".join(f"{h}/{kv} heads over {L:,} keys at D = {D}"
                                                                  for h, kv, L, D in shapes))
        for provider, how in (("attnlab", "with the lengths, as a server calls it"),
                              ("attnlab-full", "without the lengths (cuDNN's work)")):
            if xs := ratios(provider, 1):
                lines.append(dict(what=f"decode, batch 1, CUDA graphs, {how}", against=PEER_NAME,
                                  measured=f"{_span(xs, 3)}× its speed", runs=_runs(hosts)))
        big = [r for rows in speed.values() for r in rows if r["provider"] == "attnlab" and r["B"] > 1]
        big = [r for r in big if (r["B"], r["H"], r["Hkv"], r["L"], r["D"]) == _shape(big[0])] if big else []
        if big and (xs := ratios("attnlab", big[0]["B"])):
            r = big[0]
            lines.append(dict(what=f"decode, batch {r['B']}, {r['H']}/{r['Hkv']} heads over {r['L']:,} keys at D = "
                                   f"{r['D']}, CUDA graphs", against=PEER_NAME,
                              measured=f"{_span(xs, 3)}× its speed, reading the cache at "
                                       f"{_span([r['graph_tb_per_s'] for r in big], 1)} TB/s", runs=_runs(hosts)))
        for D in (128, 64):
            xs = [r["eager_us"] / r["graph_us"] for rows in speed.values() for r in rows
                  if r["provider"] == "attnlab" and r["B"] == 1 and r["L"] == 32768 and r["D"] == D]
            if xs:
                lines.append(dict(what=f"decode called eagerly, batch 1 over 32K keys at D = {D}",
                                  against="the same calls in a CUDA graph", measured=f"{_span(xs)}× their time",
                                  runs=_runs(hosts)))
        kept, empty = [], []
        for r in hosts.values():
            host = {h["call"]: h["host_us"] for h in r.get("host", [])}
            if mine := kept_host_us(host):
                kept.append(min(mine))
                if e := empty_launch_us(r)[0]:
                    empty.append(min(mine) / e)
        if kept:
            lines.append(dict(what="a decode call's host time, its plan kept", against="an empty Triton launch",
                              measured=f"{_span(kept, 1)} µs" + (f", {_span(empty)}× its time" if empty else ""),
                              runs=_runs(hosts)))
    return "; ".join(scope), lines


def gpu_of(names) -> str | None:
    """The one GPU recorded runs were measured on, as a reader says it ("NVIDIA H200" -> "H200"), from the names the
    runs recorded (prefill.py's ``environment["gpu"]``, decode_host.py's ``gpu``), or None where none is named; raises
    ValueError for runs of several GPUs (a scorecard speaks of one)."""
    short = {str(n).removeprefix("NVIDIA ").split()[0] for n in names if n}
    if len(short) > 1:
        raise ValueError(f"the runs were measured on {', '.join(sorted(short))}: a scorecard speaks of one GPU's runs")
    return short.pop() if short else None


def standing_markdown(scope: str, lines: list[dict], gpu: str | None = "H200") -> str:
    article = "an" if gpu and gpu[0].upper() in "AEFHILMNORSX" else "a"  # (letters said with a vowel first: an H200)
    out = [f"| on {article + ' ' + gpu if gpu else 'the GPU'} | against | attnlab | runs |", "|---|---|---|---|"]
    out += [f"| {ln['what']} | {ln['against']} | {ln['measured']} | {ln['runs']} |" for ln in lines]
    return "\n".join(out) + "\n" + (f"\n({scope[0].upper() + scope[1:]}.)\n" if scope else "")


def markdown(bars: list[dict]) -> str:
    lines = ["| bar | measured | where | needed | met |", "|---|---|---|---|---|"]
    for b in bars:
        lines.append(f"| {b['bar']} | {b['measured']} | {b['where'] or '—'} | {b['needed']} | "
                     f"{'yes' if b['met'] else 'no'} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prefill", type=Path, nargs="*", default=[], metavar="JSON",
                    help="prefill.py bench JSON files (one run each)")
    ap.add_argument("--decode-host", type=Path, metavar="JSON", help="decode_host.py's JSON")
    ap.add_argument("--decode-history", type=Path, nargs="+", default=[], metavar="JSON",
                    help="several decode_host.py JSON files: their decode bars side by side, a column a run")
    ap.add_argument("--standing", action="store_true",
                    help="instead of the bars, the spans of attnlab's speed against its peers over the --prefill, "
                         "--decode-host and --decode-history runs (the README's table)")
    ap.add_argument("--json", type=Path, help="write the bars here")
    ap.add_argument("--md", type=Path, help="write the table here")
    args = ap.parse_args(argv)
    if not args.prefill and not args.decode_host and not args.decode_history:
        ap.error("give --prefill, --decode-host or --decode-history")
    for path in [*args.prefill, *([args.decode_host] if args.decode_host else []), *args.decode_history]:
        if not path.is_file():
            ap.error(f"no such file: {path}")
    for out in (args.json, args.md):
        if out is not None and out.exists():
            ap.error(f"{out} exists: not overwritten")
    try:
        docs = {p.name: json.loads(p.read_text()) for p in args.prefill}
        runs = {name: doc["rows"] for name, doc in docs.items()}
        result = json.loads(args.decode_host.read_text()) if args.decode_host else None
        past = {p.name: json.loads(p.read_text()) for p in args.decode_history}
        gpu = gpu_of([d.get("environment", {}).get("gpu") for d in docs.values()]
                     + [r.get("gpu") for r in [*past.values(), *([result] if result else [])]])
        if args.standing:
            scope, lines = standing(runs, past | ({args.decode_host.name: result} if result else {}))
            bars, text = lines, standing_markdown(scope, lines, gpu)
        else:
            bars = scorecard(runs, result) if runs or result else []
            text = (markdown(bars) if bars else "") + ("\n" if bars and past else "") + (history(past) if past else "")
    except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as e:
        ap.error(f"not a recorded run: {e!r}")
    except ValueError as e:
        ap.error(str(e))
    print(text, end="")
    if args.json:
        args.json.write_text(json.dumps(dict(prefill=[p.name for p in args.prefill],
                                             decode_host=args.decode_host and args.decode_host.name, bars=bars,
                                             decode_history={label: decode_bars(r) for label, r in past.items()}),
                                        indent=2))
    if args.md:
        args.md.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
