"""Prefill runs at the clocks they ran: each recorded run's rows (``prefill.py bench --clocks``) with every provider's
SM clock (the median of the clocks noted with its times) and its share of the roofline at the datasheet's clock and
at its own (``attnlab.cost.GPU.at_clock``). A GPU held at its power limit runs below the clock its peak is quoted at
(989 TFLOP/s at 1,830 MHz on an H100 or H200), so the first share mixes the kernel with the GPU's power budget and the
second is the kernel's alone; and two providers of one row can run at different clocks.

    python benchmarks/clock_share.py benchmarks/data/prefill-h200-run45.json [more runs] [--D 128] [--pass fwd]
        [--power-limit 700] [--json out.json]

With the GPU's power limit (``--power-limit``, or the one a run recorded), two more tables, of the times whose power
draw sat at it (within ``AT_LIMIT``): the energy each provider spent a FLOP there (the power over the TFLOP/s, pJ a
FLOP), which at the limit sets the speed (TFLOP/s = W / pJ a FLOP), and how the speed of a row's times followed the
clock read during them. NVML's power read is an average over the last second, so a time at the limit is one that
followed others there.

No GPU needed: it reads the runs' JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import prefill  # noqa: E402
from roofline_columns import percent, preset_for  # noqa: E402
from scorecard import GOAL_TFLOPS  # noqa: E402

PEERS = ("attnlab", "sdpa-cudnn")
AT_LIMIT = 0.95  # a time's power draw at least this share of the power limit: the time ran at the limit


def clock_rows(saved: dict, *, D=None, pass_=None, providers=PEERS) -> list[dict]:
    """The rows of one recorded prefill run (its JSON, loaded) that noted clocks, on the preset its GPU names: per
    (shape, provider) the TFLOP/s, ``sm_mhz``, ``of_roofline`` and ``clock_of_roofline``; ``D`` and ``pass_`` pick
    rows. ValueError for a run without a preset or without clocks."""
    gpu = preset_for(saved.get("environment", {}).get("gpu"), saved.get("roofline_gpu"))
    if gpu is None or not gpu.tensor_mhz:
        raise ValueError(f"no preset with a known clock for the GPU {saved.get('environment', {}).get('gpu')!r}")
    rows = [dict(r) for r in saved["rows"] if r.get("provider") in providers and r.get("ms")
            and (D is None or r["D"] == D) and (pass_ is None or r["pass_"] == pass_)]
    prefill.with_roofline(rows, gpu)
    rows = [r for r in rows if "clock_of_roofline" in r]
    if not rows:
        raise ValueError("the run noted no clocks (bench --clocks)")
    return [{"gpu": gpu.name, "D": r["D"], "causal": r["causal"], "N": r["N"], "pass_": r["pass_"], "H": r["H"],
             "Hkv": prefill.kv_heads(r), "provider": r["provider"], "tflops": r["tflops"], "sm_mhz": r["sm_mhz"],
             "of_roofline": r["of_roofline"], "clock_of_roofline": r["clock_of_roofline"]} for r in rows]


def markdown(runs: dict[str, list[dict]], providers=PEERS) -> str:
    """One line per run and shape: each provider's TFLOP/s, clock, share of the datasheet's roofline and of the
    roofline at its clock."""
    head = ["run", "GPU", "D", "heads", "causal", "N", "pass"]
    for p in providers:
        head += [f"{p} TFLOP/s", f"{p} MHz", f"{p} %", f"{p} % at its clock"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for run, rows in runs.items():
        by: dict = {}
        for r in rows:
            by.setdefault((r["gpu"], r["D"], r["H"], r["Hkv"], r["causal"], r["N"], r["pass_"]), {})[r["provider"]] = r
        for (gpu, D, H, Hkv, causal, N, p), cell in by.items():
            cells = [run, gpu, str(D), f"{H}/{Hkv}", "yes" if causal else "no", f"{N // 1024}K", p.replace("_", "+")]
            for name in providers:
                r = cell.get(name)
                cells += (["—"] * 4 if r is None else
                          [f"{r['tflops']:.0f}", f"{r['sm_mhz']:.0f}", percent(r["of_roofline"]),
                           percent(r["clock_of_roofline"])])
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def limit_times(saved: dict, limit_w: float, *, D=None, pass_=None, providers=PEERS,
                at: float = AT_LIMIT) -> list[dict]:
    """Every time of a recorded run's rows (``D``, ``pass_``, ``providers`` pick them) whose power draw was at the
    limit (at least ``at`` × ``limit_w``): its row's shape and provider, ``round``, ``tflops``, ``sm_mhz``, ``power_w``
    and ``pj_per_flop`` (W over TFLOP/s: the energy a FLOP, in pJ)."""
    if not limit_w > 0:
        raise ValueError(f"the power limit must be a positive number of watts, got {limit_w!r}")
    out = []
    for r in saved["rows"]:
        if r.get("provider") not in providers or not r.get("ms") or (D is not None and r["D"] != D) \
                or (pass_ is not None and r["pass_"] != pass_):
            continue
        states = r.get("gpu_during") or r.get("gpu_state") or []
        for i, (ms, s) in enumerate(zip(r["ms_rounds"], states)):
            if not s or not s.get("power_w") or s["power_w"] < at * limit_w:
                continue
            tflops = r["tflops"] * r["ms"] / ms
            out.append({"D": r["D"], "causal": r["causal"], "N": r["N"], "pass_": r["pass_"], "H": r["H"],
                        "Hkv": prefill.kv_heads(r), "provider": r["provider"], "round": i, "tflops": tflops,
                        "sm_mhz": s["sm_mhz"], "power_w": s["power_w"], "pj_per_flop": s["power_w"] / tflops})
    return out


def _shape(t: dict) -> tuple:
    return t["D"], t["H"], t["Hkv"], t["causal"], t["N"], t["pass_"]


def follows(times: list[dict]) -> list[dict]:
    """Per row and provider with two or more times at the limit at different clocks: its lowest-clock and
    highest-clock times, ``clock_gain`` (the higher clock over the lower, less 1), ``speed_gain`` (the same of their
    TFLOP/s) and ``follow`` = speed_gain / clock_gain (1 where the speed rose with the clock, as a kernel bound by its
    clock would; 0 where it did not move)."""
    by: dict = {}
    for t in times:
        by.setdefault((_shape(t), t["provider"]), []).append(t)
    out = []
    for (shape, provider), ts in by.items():
        lo, hi = min(ts, key=lambda t: t["sm_mhz"]), max(ts, key=lambda t: t["sm_mhz"])
        if hi["sm_mhz"] > lo["sm_mhz"]:
            clock, speed = hi["sm_mhz"] / lo["sm_mhz"] - 1, hi["tflops"] / lo["tflops"] - 1
            out.append(dict(zip(("D", "H", "Hkv", "causal", "N", "pass_"), shape), provider=provider,
                            low=lo, high=hi, clock_gain=clock, speed_gain=speed, follow=speed / clock))
    return out


def energy_summary(times: list[dict], limit_w: float, providers=PEERS) -> dict:
    """Per provider, over its times at the limit: their number, the median and lowest pJ a FLOP, the fastest time's
    TFLOP/s and, over its rows of ``follows``, ``follow``: the sum of their speed gains over the sum of their clock
    gains (a slope that rows with a clock gain near 0 cannot swing, as they would a median of ratios); and
    ``goal_pj``, the energy a FLOP at which ``GOAL_TFLOPS`` fits in ``limit_w``."""
    out = {"limit_w": limit_w, "goal_pj": limit_w / GOAL_TFLOPS}
    rows = follows(times)
    for p in providers:
        mine = [t for t in times if t["provider"] == p]
        if mine:
            fol = [f for f in rows if f["provider"] == p]
            out[p] = {"times": len(mine), "pj_median": statistics.median(t["pj_per_flop"] for t in mine),
                      "pj_lowest": min(t["pj_per_flop"] for t in mine), "fastest": max(t["tflops"] for t in mine),
                      "follow": (sum(f["speed_gain"] for f in fol) / sum(f["clock_gain"] for f in fol)
                                 if fol else None), "follow_rows": len(fol)}
    return out


def energy_markdown(runs: dict[str, list[dict]], limits: dict[str, float], providers=PEERS) -> str:
    """The energy table (a line per run and shape: each provider's times at the limit, their best TFLOP/s and median
    pJ a FLOP), the clock-follow table (a line per run, shape and provider of ``follows``) and a line per run and
    provider of ``energy_summary``."""
    head = ["run", "D", "heads", "causal", "N", "pass"]
    for p in providers:
        head += [f"{p} times at the limit", f"{p} TFLOP/s (best)", f"{p} pJ/FLOP (median)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for run, times in runs.items():
        by: dict = {}
        for t in times:
            by.setdefault(_shape(t), {}).setdefault(t["provider"], []).append(t)
        for (D, H, Hkv, causal, N, p), cell in by.items():
            cells = [run, str(D), f"{H}/{Hkv}", "yes" if causal else "no", f"{N // 1024}K", p.replace("_", "+")]
            for name in providers:
                ts = cell.get(name, [])
                cells += ([str(len(ts)), f"{max(t['tflops'] for t in ts):.0f}",
                           f"{statistics.median(t['pj_per_flop'] for t in ts):.3f}"] if ts else ["0", "—", "—"])
            lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "| run | D | heads | causal | N | pass | provider | MHz (low → high) | TFLOP/s (low → high) | clock "
              "gain | speed gain | speed gain / clock gain |", "|" + "---|" * 12]
    for run, times in runs.items():
        for f in follows(times):
            lo, hi = f["low"], f["high"]
            lines.append(f"| {run} | {f['D']} | {f['H']}/{f['Hkv']} | {'yes' if f['causal'] else 'no'} | "
                         f"{f['N'] // 1024}K | {f['pass_'].replace('_', '+')} | {f['provider']} | "
                         f"{lo['sm_mhz']:,.0f} → {hi['sm_mhz']:,.0f} | {lo['tflops']:.0f} → {hi['tflops']:.0f} | "
                         f"{100 * f['clock_gain']:+.1f} % | {100 * f['speed_gain']:+.1f} % | {f['follow']:.2f} |")
    lines.append("")
    for run, times in runs.items():
        summary = energy_summary(times, limits[run], providers)
        lines.append(f"{run}: {GOAL_TFLOPS:.0f} TFLOP/s at its {summary['limit_w']:.0f} W limit needs at most "
                     f"{summary['goal_pj']:.3f} pJ a FLOP")
        for p in providers:
            e = summary.get(p)
            if e:
                fol = (f"; from each row's lowest-clock time to its highest, the speed rose {e['follow']:.2f} of "
                       f"the clock's rise (over {e['follow_rows']} rows)" if e["follow"] is not None else "")
                lines.append(f"- {p}: {e['times']} times at the limit, {e['pj_median']:.3f} pJ a FLOP (median; lowest "
                             f"{e['pj_lowest']:.3f}), the fastest {e['fastest']:.0f} TFLOP/s{fol}")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path, help="prefill.py bench JSON files (with --clocks)")
    ap.add_argument("--D", type=int, default=None, help="only this head dim")
    ap.add_argument("--pass", dest="pass_", choices=("fwd", "fwd_bwd"), default=None, help="only this pass")
    ap.add_argument("--power-limit", type=float, default=None, metavar="W",
                    help="the GPU's power limit in W (default: the one each run recorded, where it did): the energy "
                         "tables of the times at it")
    ap.add_argument("--json", type=Path, default=None, help="write the rows here (not over an existing file)")
    args = ap.parse_args(argv)
    if args.json is not None and args.json.exists():
        ap.error(f"--json {args.json}: the file exists; not overwriting it")
    if args.power_limit is not None and not args.power_limit > 0:
        ap.error(f"--power-limit must be a positive number of watts, got {args.power_limit}")
    runs, limits, energy = {}, {}, {}
    for path in args.runs:
        try:
            saved = json.loads(path.read_text())
            runs[path.stem] = clock_rows(saved, D=args.D, pass_=args.pass_)
            limit = args.power_limit or saved.get("environment", {}).get("power_limit_w")
            if limit:
                limits[path.stem] = limit
                energy[path.stem] = limit_times(saved, limit, D=args.D, pass_=args.pass_)
        except (OSError, ValueError, KeyError) as e:
            ap.error(f"{path}: {e}")
    print(markdown(runs), end="")
    if energy:
        print("\n" + energy_markdown(energy, limits), end="")
    else:
        print("\n(no power limit recorded with the runs: --power-limit W gives the energy tables)")
    if args.json is not None:
        args.json.write_text(json.dumps({"clocks": runs, "at_limit": energy} if energy else runs, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
