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

``--packed``: the packed batch of ``benchmarks/variants.py`` instead (16K tokens of documents of 256–1792, causal,
128-row tiles, the tiles numbered query block last first as ``prefill_gluon._wspv_tile_t`` numbers them, a tile
past its document's end costing nothing): ``turns``, the persistent kernel's fixed turns (tile r·P + p, or
r·P + P − 1 − p on odd turns, NOTES-prefill v22), against ``list``, the tiles taken in their order by whichever
program frees first (the grid kernel, and the persistent kernel taking its tiles from a counter, v24).

    python benchmarks/fwd_order_sim.py [--packed] [--json out.json]
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


PACKED_ORDERS = ("turns", "list")


def packed_walks(lengths: list[int], H: int, block_m: int = 128, block_n: int = 128) -> list[int | None]:
    """The walk (key blocks, causal inside each document) of every tile of a packed batch in the dynamic kernel's
    numbering: tile t is query block n_m − 1 − t // (B·H) of (document, head) t % (B·H); None past its document's
    end."""
    n_m, n_bh = -(-max(lengths) // block_m), len(lengths) * H
    out = []
    for t in range(n_m * n_bh):
        m, n = n_m - 1 - t // n_bh, lengths[(t % n_bh) // H]
        out.append(None if m * block_m >= n else -(-min(n, m * block_m + block_m) // block_n))
    return out


def packed_makespan(walks: list[int | None], order: str, programs: int = SMS) -> float:
    """The busiest program's work over a perfect balance for a packed batch's tiles (``packed_walks``): ``turns``
    or ``list`` (``PACKED_ORDERS``)."""
    from attnlab.gpu.prefill_gluon import TILE_COST

    ideal = sum(w + TILE_COST for w in walks if w is not None) / programs
    if order == "turns":
        load = [0] * programs
        for t, w in enumerate(walks):
            r, i = divmod(t, programs)
            if w is not None:
                load[i if r % 2 == 0 else programs - 1 - i] += w + TILE_COST
        return max(load) / ideal
    if order != "list":
        raise ValueError(f"packed_makespan takes an order of {PACKED_ORDERS}, got {order!r}")
    free = [0] * programs
    for w in walks:
        if w is not None:
            heapq.heapreplace(free, free[0] + w + TILE_COST)
    return max(free) / ideal


def run_packed() -> list[dict]:
    """``--packed``: each head dim's packed batch (``benchmarks/variants.py``'s documents), both orders."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("variants_bench", Path(__file__).with_name("variants.py"))
    vb = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(vb)
    lengths = vb.doc_lengths(vb.TOKENS)
    rows = []
    for D in (64, 128):
        walks = packed_walks(lengths, WIDTH // D)
        row = dict(D=D, documents=len(lengths), tiles=len(walks), tiles_in_documents=sum(w is not None for w in walks))
        rows.append(row | {o: packed_makespan(walks, o) for o in PACKED_ORDERS})
    return rows


def table_packed(rows: list[dict]) -> list[str]:
    out = ["| D | documents | tiles | tiles inside a document | " + " | ".join(PACKED_ORDERS) + " |",
           "|---|---|---|---|" + "---|" * len(PACKED_ORDERS)]
    for r in rows:
        out.append(f"| {r['D']} | {r['documents']} | {r['tiles']} | {r['tiles_in_documents']} | "
                   + " | ".join(f"{r[o]:.3f}" for o in PACKED_ORDERS) + " |")
    return out


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
    ap.add_argument("--packed", action="store_true", help="the packed batch's tiles: fixed turns against a list")
    args = ap.parse_args(argv)
    if args.json is not None and args.json.exists():
        print(f"fwd_order_sim: {args.json} exists; not overwriting it", file=sys.stderr)
        return 2
    rows = run_packed() if args.packed else run()
    print("\n".join(table_packed(rows) if args.packed else table(rows)))
    if args.json is not None:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
