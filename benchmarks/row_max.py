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

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import ab_rounds  # noqa: E402
import fwd_switches as fs  # noqa: E402
from exp_poly import ROWS, row_call  # noqa: E402

from attnlab.bench import time_fn  # noqa: E402

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


def measure(rows, Ds, rounds: int) -> list[dict]:
    return ab_rounds.measure(rows, Ds, BUILDS, lambda b, D: use_build(b), rounds, row_call, time_fn=time_fn,
                             base="chain", compare="identical")


def report(rows) -> str:
    return ab_rounds.table(rows, "row | D | row max | ms (median) | TFLOP/s | × chain | × peer | bit-identical")


def main(argv=None) -> int:
    return ab_rounds.main(argv, description=__doc__.splitlines()[0], name="row_max", rows=ROWS, report=report,
                          measure_fn=lambda a: measure(a.rows, a.D, a.rounds))


if __name__ == "__main__":
    sys.exit(main())
