"""The Gluon forward's row maximum as a tree of folds (``prefill_gluon._row_max`` with ``ROW_MAX_TREE``) against
``gl.max(s, 1)`` as triton 3.6 lowers it (the shipped build: a chain of N/4 − 1 dependent maxima per row and thread),
in one process, against PyTorch's fastest route for the row in the same rounds.

The build the library does not ship is a copy of ``prefill_gluon`` made at run time with ``_ROW_MAX_TREE`` the other
way (``other_module``); its three forward kernels stand in for the library's own while that build is timed, so both
go through the same dispatch, configuration and launch code. A maximum is exact whatever its order: the two builds'
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
import importlib.util
import json
import statistics
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from exp_poly import ROWS, row_call  # noqa: E402

from attnlab.bench import environment, time_fn  # noqa: E402

BUILDS = ("tree", "chain")
KERNELS = ("_attn_fwd_gluon", "_attn_fwd_gluon_ws", "_attn_fwd_gluon_wsp")
SWITCH = "    _ROW_MAX_TREE = gl.constexpr(ROW_MAX_TREE)\n"
_KEEP: list = []  # the copy's folder, alive while its kernels may compile (Triton reads their source)


def other_source(src: str, tree: bool) -> str:
    """``prefill_gluon``'s source with the kernels' ``_ROW_MAX_TREE`` fixed to ``tree``; refuses a source without
    exactly one such switch."""
    if src.count(SWITCH) != 1:
        raise RuntimeError("prefill_gluon has no single _ROW_MAX_TREE switch; the other build cannot be made")
    return src.replace(SWITCH, f"    _ROW_MAX_TREE = gl.constexpr({tree})\n")


def other_module():
    """The build the library does not ship (the tree where ``ROW_MAX_TREE`` is off, the chain where it is on):
    ``other_source`` loaded as ``attnlab.gpu._prefill_gluon_other`` (its relative imports the library's own
    modules)."""
    from attnlab.gpu import prefill_gluon as pg

    name = "attnlab.gpu._prefill_gluon_other"
    if name in sys.modules:
        return sys.modules[name]
    folder = tempfile.TemporaryDirectory(prefix="row-max-")
    _KEEP.append(folder)
    path = Path(folder.name) / "_prefill_gluon_other.py"
    path.write_text(other_source(Path(pg.__file__).read_text(), not pg.ROW_MAX_TREE))
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def build_modules() -> dict:
    """{"tree": module, "chain": module}: ``prefill_gluon`` itself for the shipped build, ``other_module`` for the
    other."""
    from attnlab.gpu import prefill_gluon as pg

    other = other_module()
    return dict(tree=pg if pg.ROW_MAX_TREE else other, chain=other if pg.ROW_MAX_TREE else pg)


class use_build:
    """``with use_build("tree"):`` the library's Gluon forward runs that build's kernels (kept launch plans dropped
    on the way in and out); the shipped build: the library's own."""

    def __init__(self, build: str):
        if build not in BUILDS:
            raise ValueError(f"build must be one of {BUILDS}, got {build!r}")
        self.build = build

    def __enter__(self):
        from attnlab.gpu import prefill_fwd
        from attnlab.gpu import prefill_gluon as pg

        self.saved = {k: getattr(pg, k) for k in KERNELS}
        mod = build_modules()[self.build]
        for k in KERNELS:
            setattr(pg, k, getattr(mod, k))
        prefill_fwd._PLANS.clear()
        return self

    def __exit__(self, *exc):
        from attnlab.gpu import prefill_fwd
        from attnlab.gpu import prefill_gluon as pg

        for k, f in self.saved.items():
            setattr(pg, k, f)
        prefill_fwd._PLANS.clear()
        return False


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
