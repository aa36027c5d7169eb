"""The Gluon forward's row maximum as a tree of folds (``prefill_gluon._row_max`` with ``ROW_MAX_TREE``) against
``gl.max(s, 1)`` as triton 3.6 lowers it (the shipped build: a chain of N/4 − 1 dependent maxima per row and thread),
in one process, against PyTorch's fastest route for the row in the same rounds.

The build the library does not ship is a copy of ``prefill_gluon`` made at run time with ``_ROW_MAX_TREE`` the other
way (``fwd_switches.build_module``); its three forward kernels stand in for the library's own while that build is
timed, so both go through the same dispatch, configuration and launch code. A maximum is exact whatever its order: the two builds'
outputs must be bit-identical, and each row records whether they were (``identical``).

Rows (bfloat16, H·D = 2048): those of ``exp_poly.py`` (the variants benchmark's sliding window W = 4096 and packed
batch at 16K tokens, causal; dense 4 × 4K causal and not), at D = 64 and 128; ``--rounds`` rounds in which the builds
and the peer take turns (``do_bench`` medians; the table gives each one's median over the rounds).

    python benchmarks/row_max.py --json row-max.json          # every row, both head dims, three rounds
    python benchmarks/row_max.py --rows window --D 64 --rounds 5
    python benchmarks/row_max.py --report row-max.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import fwd_switches as fs  # noqa: E402
from exp_poly import ROWS, row_call  # noqa: E402

from attnlab.bench import environment, time_fn  # noqa: E402

BUILDS = ("tree", "chain")


def build_modules() -> dict:
    """{"tree": module, "chain": module}: ``prefill_gluon`` itself for the shipped build, a copy with the switch the
    other way for the other (``fwd_switches.build_module``)."""
    return {b: fs.build_module(b) for b in BUILDS}


def use_build(build: str):
    """``with use_build("tree"):`` the library's Gluon forward runs that build's kernels (``fwd_switches.use_build``)."""
    if build not in BUILDS:
        raise ValueError(f"build must be one of {BUILDS}, got {build!r}")
    return fs.use_build(build)


def _out(x):
    return x[0] if isinstance(x, tuple) else x


def measure(rows, Ds, rounds: int) -> list[dict]:
    device = "cuda"
    results = []
    for D in Ds:
        for name in rows:
            lib, flops, peer_name, peer = row_call(name, D, device)
            times = {b: [] for b in BUILDS}
            peer_times = []
            outs = {}
            for _ in range(rounds):
                for b in BUILDS:
                    with use_build(b):
                        outs[b] = _out(lib()).clone()
                        times[b].append(time_fn(lib, device=device))
                if callable(peer):
                    peer_times.append(time_fn(peer, device=device))
            identical = bool(torch.equal(outs["tree"], outs["chain"]))
            chain_ms = statistics.median(times["chain"])
            for b in BUILDS:
                ms = statistics.median(times[b])
                r = dict(row=name, D=D, build=b, ms=ms, rounds=[round(t, 4) for t in times[b]],
                         tflops=flops / ms / 1e9, vs_chain=chain_ms / ms, identical=identical)
                if peer_times:
                    r.update(peer=peer_name, peer_ms=statistics.median(peer_times),
                             x_peer=statistics.median(peer_times) / ms)
                elif not callable(peer):
                    r.update(peer=peer_name, peer_skipped=f"{type(peer).__name__}: {peer}"[:120])
                results.append(r)
                print(_line(r), flush=True)
            del outs
            torch.cuda.empty_cache()
    return results


def _line(r) -> str:
    peer = f" {r['x_peer']:.3f}× {r['peer']}" if "x_peer" in r else ""
    return (f"| {r['row']} | {r['D']} | {r['build']} | {r['ms']:.3f} | {r['tflops']:.0f} | {r['vs_chain']:.3f} |"
            f"{peer} | {'yes' if r['identical'] else 'NO'} |")


def report(rows) -> str:
    head = "| row | D | row max | ms (median) | TFLOP/s | × chain | × peer | bit-identical |\n"
    return head + "|---|---|---|---|---|---|---|---|\n" + "\n".join(_line(r) for r in rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", nargs="+", default=list(ROWS), choices=ROWS)
    ap.add_argument("--D", type=int, nargs="+", default=[64, 128], choices=[64, 128])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", type=Path, help="write the rows here (refuses an existing file)")
    ap.add_argument("--report", metavar="JSON", help="print the table of a recorded run")
    args = ap.parse_args(argv)
    if args.report:
        print(report(json.loads(Path(args.report).read_text())["rows"]))
        return 0
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    if args.json is not None and args.json.exists():
        ap.error(f"{args.json} exists; not overwriting it")
    if not torch.cuda.is_available():
        print("row_max.py times the Gluon forward on a Hopper GPU; no CUDA device here", file=sys.stderr)
        return 2
    rows = measure(args.rows, args.D, args.rounds)
    print(report(rows))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"benchmark": "row_max", "environment": environment(), "rows": rows},
                                        indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
