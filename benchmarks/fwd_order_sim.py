"""The causal Gluon forward's tile orders, simulated (no GPU): the model behind NOTES-prefill v18's predictions.

Model: ``programs`` SMs, one program each; a tile (query block, batch · head) costs its walk (key blocks,
``prefill_gluon.tile_walks``, the kernels' own count) plus ``TILE_COST`` blocks of start and end. The result is
the makespan (the busiest SM's work) over a perfect balance (all work / SMs). Orders:

* ``grid``: the grid kernel's programs as a list schedule (the next program to whichever SM frees first), heads
  one after another, each head's longest walk first (``head_chunk`` 1);
* ``grid-cK``: the same with the longest walks first over groups of K heads (``head_chunk`` K);
* ``rounds``: persistent, fixed rounds of ``programs`` tiles taken forward and back, the tiles longest first
  over all heads (fwd-persistent run 2's build);
* ``schedule-cK``: persistent, the host's schedule (``prefill_gluon.persistent_schedule``, groups of K heads).

Each with the part query block last (as before) and first (``part_first``). The model counts blocks only: it has
no L2, no masked-block cost and no overlap between a program's tiles, which is what the measurements add.

    python benchmarks/fwd_order_sim.py [--json out.json]
"""

from __future__ import annotations

import argparse
import heapq
import json
import sys
from pathlib import Path

SHAPES = [(64, 4096, 192), (64, 4096, 128), (64, 16384, 192), (128, 4096, 128), (128, 16384, 128)]  # D, N, block_m
TOKENS, WIDTH, SMS, BLOCK_N = 16384, 2048, 132, 128
ORDERS = ("grid", "grid-c8", "rounds", "schedule-c8")


def _tiles(walks: list[int], bh: int, order: str) -> list[int]:
    """The tiles' walks in the order programs start them (grid) or tiles are listed (rounds)."""
    n_m = len(walks)
    by_len = sorted(range(n_m), key=lambda m: (-walks[m], -m))
    if order == "rounds":  # every head's longest walk, then every head's next one
        return [walks[m] for m in by_len for _ in range(bh)]
    chunk = int(order.rsplit("-c", 1)[1]) if "-c" in order else 1
    return [walks[m] for h0 in range(0, bh, chunk) for m in by_len for _ in range(h0, min(bh, h0 + chunk))]


def makespan(walks: list[int], bh: int, order: str, programs: int = SMS) -> float:
    """The busiest program's work over a perfect balance, for ``order`` (one of ``ORDERS``, or ``grid-cK``,
    ``schedule-cK``)."""
    from attnlab.gpu.prefill_gluon import TILE_COST, persistent_schedule

    ideal = bh * sum(w + TILE_COST for w in walks) / programs
    if order.startswith("schedule"):
        rows = persistent_schedule(len(walks), bh, programs, walks, int(order.rsplit("-c", 1)[1]))
        return max(sum(walks[t % len(walks)] + TILE_COST for t in r) for r in rows) / ideal
    seq = _tiles(walks, bh, order)
    if order == "rounds":  # program p takes tile p of even rounds and programs − 1 − p of odd ones
        load = [0] * programs
        for i, w in enumerate(seq):
            r, p = divmod(i, programs)
            load[p if r % 2 == 0 else programs - 1 - p] += w + TILE_COST
        return max(load) / ideal
    if not order.startswith("grid"):
        raise ValueError(f"makespan takes an order of {ORDERS} (or grid-cK, schedule-cK), got {order!r}")
    free = [0] * programs
    for w in seq:
        heapq.heapreplace(free, free[0] + w + TILE_COST)
    return max(free) / ideal


def run() -> list[dict]:
    from attnlab.gpu.prefill_gluon import part_first_shift, tile_walks

    rows = []
    for D, N, block_m in SHAPES:
        bh = (TOKENS // N) * (WIDTH // D)
        for part_first in (False, True):
            shift = part_first_shift(N, block_m) if part_first else 0
            walks = tile_walks(N, N, block_m, BLOCK_N, 0, None, shift)
            row = dict(D=D, N=N, block_m=block_m, part_first=part_first, blocks_per_head=sum(walks))
            row |= {o: makespan(walks, bh, o) for o in ORDERS}
            rows.append(row)
    return rows


def table(rows: list[dict]) -> list[str]:
    out = ["| D | N | block_m | part block | key blocks a head | " + " | ".join(ORDERS) + " |",
           "|---|---|---|---|---|" + "---|" * len(ORDERS)]
    for r in rows:
        out.append(f"| {r['D']} | {r['N']} | {r['block_m']} | {'first' if r['part_first'] else 'last'} | "
                   f"{r['blocks_per_head']} | " + " | ".join(f"{r[o]:.3f}" for o in ORDERS) + " |")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", type=Path, help="write the rows here (refuses an existing file)")
    args = ap.parse_args(argv)
    if args.json is not None and args.json.exists():
        print(f"fwd_order_sim: {args.json} exists; not overwriting it", file=sys.stderr)
        return 2
    rows = run()
    print("\n".join(table(rows)))
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
