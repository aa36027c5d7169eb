"""Arms of one library call timed in turns in one process (A/B rounds), beside a peer: the runner, table and command
line that ``exp_poly.py``, ``row_max.py`` and ``fwd_switches.py`` share.

An *arm* is a way to run the same call (a build of the kernels, a setting of a switch), entered by a context
manager ``use(arm, D)``. For every head dim and row, ``row_call(name, D, device)`` gives the library's call (a
zero-argument callable), the FLOPs of its visible pairs and a peer (PyTorch's fastest route for the row, or the
exception that stopped it being built). Each of ``rounds`` rounds runs every arm in turn, once for its output and once
timed (``do_bench`` median), then times the peer: drift between rounds shows up as a change within a column, not as
a difference between arms. Every other round takes the arms in reverse order, so that no arm always runs first
(fwd-switches runs 11 and 12, which took them in one order, timed one kernel under two arms 2-3 % apart). A row of the result is one arm's median over the rounds, with its ratio to the baseline
arm's median and how its output compared with the others' (the largest difference from the round's first arm, or
whether every arm's output was bit-identical).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from attnlab.bench import environment  # noqa: E402


def _out(x):
    return x[0] if isinstance(x, tuple) else x


def turns(items, round_: int) -> list:
    """The order in which round ``round_`` (from 0) times ``items``: as given in even rounds, reversed in odd ones, so
    that no arm always runs first (in fwd-switches runs 11 and 12, one order every round, the first arm ran 2-3 %
    faster on a row where both arms ran the same kernel)."""
    items = list(items)
    return items if round_ % 2 == 0 else items[::-1]


def measure(rows, Ds, arms, use: Callable[[object, int], AbstractContextManager], rounds: int, row_call, *,
            time_fn, arm_key: str = "build", base=None, compare: str = "diff", extra=None,
            device: str = "cuda") -> list[dict]:
    """Result rows ``{row, D, <arm_key>: arm, ms, rounds, tflops, vs_<base or "first">, max_diff | identical}`` (and
    ``peer``, ``peer_ms``, ``x_peer``, or ``peer_skipped`` when the peer could not be built), one per row, head dim
    and arm, printed as they come. ``base``: the arm the ratios are taken against (the first by default);
    ``compare``: "diff" (each arm's largest difference from the same round's first arm, over the rounds) or
    "identical" (whether the last round's outputs were equal to the bit); ``extra(arm)``: more fields for its rows."""
    arms = list(arms)
    if not arms or len(set(arms)) != len(arms):
        raise ValueError(f"arms must be distinct and at least one, got {arms!r}")
    if base is not None and base not in arms:
        raise ValueError(f"base {base!r} is not one of the arms {arms!r}")
    if compare not in ("diff", "identical"):
        raise ValueError(f"compare must be 'diff' or 'identical', got {compare!r}")
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds!r}")
    vs_key = f"vs_{'first' if base is None else base}"
    results = []
    for D in Ds:
        for name in rows:
            lib, flops, peer_name, peer = row_call(name, D, device)
            times = {a: [] for a in arms}
            peer_times = []
            diffs = {a: 0.0 for a in arms}
            outs = {}
            for i in range(rounds):
                outs = {}
                for a in turns(arms, i):
                    with use(a, D):
                        outs[a] = _out(lib()).detach().clone()
                        times[a].append(time_fn(lib, device=device))
                first = outs[arms[0]].float()
                for a in arms:
                    diffs[a] = max(diffs[a], (outs[a].float() - first).abs().max().item() if a != arms[0] else 0.0)
                if callable(peer):
                    peer_times.append(time_fn(peer, device=device))
            identical = all(torch.equal(outs[a], outs[arms[0]]) for a in arms)
            base_ms = statistics.median(times[arms[0] if base is None else base])
            for a in arms:
                ms = statistics.median(times[a])
                r = dict(row=name, D=D, **{arm_key: a}, **(extra(a) if extra else {}), ms=ms,
                         rounds=[round(t, 4) for t in times[a]], tflops=flops / ms / 1e9, **{vs_key: base_ms / ms})
                r.update(max_diff=diffs[a]) if compare == "diff" else r.update(identical=identical)
                if peer_times:
                    r.update(peer=peer_name, peer_ms=statistics.median(peer_times),
                             x_peer=statistics.median(peer_times) / ms)
                elif not callable(peer):
                    r.update(peer=peer_name, peer_skipped=f"{type(peer).__name__}: {peer}"[:120])
                results.append(r)
                print(line(r, arm_key), flush=True)
            del outs
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
    return results


def line(r: dict, arm_key: str = "build") -> str:
    """One result row as a markdown table line: row, D, arm, ms, TFLOP/s, × baseline, × peer, the comparison."""
    vs = next(v for k, v in r.items() if k.startswith("vs_"))
    peer = f" {r['x_peer']:.3f}× {r['peer']}" if "x_peer" in r else ""
    cmp = f"{r['max_diff']:.1e}" if "max_diff" in r else ("yes" if r["identical"] else "NO")
    return (f"| {r['row']} | {r['D']} | {r[arm_key]} | {r['ms']:.3f} | {r['tflops']:.0f} | {vs:.3f} |{peer} | "
            f"{cmp} |")


def table(rows: list[dict], head: str, arm_key: str = "build") -> str:
    """The markdown table of result rows under ``head`` (its eight column names, ``|``-separated)."""
    return f"| {head} |\n" + "|---" * 8 + "|\n" + "\n".join(line(r, arm_key) for r in rows)


def main(argv, *, description: str, name: str, rows, measure_fn, report, add_args=None, check_args=None,
         env_extra=None, extra_rows=()) -> int:
    """The command line the A/B scripts share: ``--rows`` (default ``rows``; ``extra_rows`` when named),
    ``--D``, ``--rounds``, ``--json`` (never overwriting a file), ``--report JSON`` (the table of a recorded run, no
    GPU needed); ``add_args(parser)`` adds a script's own options and ``check_args(parser, args)`` checks them;
    ``measure_fn(args)`` returns the result rows; ``env_extra()`` more fields for the JSON's environment."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--rows", nargs="+", default=list(rows), choices=list(rows) + list(extra_rows))
    ap.add_argument("--D", type=int, nargs="+", default=[64, 128], choices=[64, 128])
    if add_args:
        add_args(ap)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", type=Path, help="write the rows here (refuses an existing file)")
    ap.add_argument("--report", metavar="JSON", help="print the table of a recorded run")
    args = ap.parse_args(argv)
    if args.report:
        path = Path(args.report)
        if not path.is_file():
            ap.error(f"--report: no such file: {path}")
        print(report(json.loads(path.read_text())["rows"]))
        return 0
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    if args.json is not None and args.json.exists():
        ap.error(f"{args.json} exists; not overwriting it")
    if check_args:
        check_args(ap, args)
    if not torch.cuda.is_available():
        print(f"{name}.py times GPU kernels; no CUDA device here", file=sys.stderr)
        return 2
    result = measure_fn(args)
    print(report(result))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        env = environment() | (env_extra() if env_extra else {})
        args.json.write_text(json.dumps({"benchmark": name, "environment": env, "rows": result}, indent=2, default=str))
    return 0
