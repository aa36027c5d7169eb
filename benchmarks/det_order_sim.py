"""The deterministic Gluon backward's turn order, simulated (no GPU): why the ordered dQ additions cost a
causal call twice the Triton kernels' time, and which order would not (``benchmarks/NOTES-prefill.md``, v9).

Model: one head; key block n (128 keys, one program, all resident) walks its query blocks (64 rows) in
the kernel's order, one step per time unit; with ordered additions each dQ tile (one query block) takes
its additions from the key blocks that see it in a fixed order, and a program whose turn has not come
waits. Orders:

* ``none``: no order (the default backward, not reproducible);
* ``ascending``: key block order, the kernel's (turn = n − first key block that sees the tile);
* ``descending``: reverse key block order (turn = last key block that sees the tile − n): a causal key
  block starts its walk at its diagonal, so the last key block reaches a tile first;
* ``arrival``: the order in which the unordered walks reach each tile (any walk, rotated or not).

Prints, per shape and order, the steps the slowest program needs (the makespan) and how much longer
than without an order; then (``makespan_timed``) the kernel's orders with a latency between a tile's turns
(an addition completes and is counted before the next may add), for the two ways the kernel has counted:
by the consumer warp group itself, which holds its next step (v10's first build), or by a writer warp of
its own (the second); and (``grid_makespan``) the causal grid alone as a list schedule, by the order its
programs start in.

    python benchmarks/det_order_sim.py [--tokens 2048 8192 16384] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

BLOCK_N, BLOCK_M = 128, 64
ORDERS = ("none", "ascending", "descending", "arrival")


def walks(n_tokens: int, causal: bool, rotate: bool = False) -> list[list[int]]:
    """Each key block's query blocks in the kernel's walk order (Nq = Nk = n_tokens, no window): causal,
    from the block holding its first key's diagonal (m_lo) to the end; ``rotate``: starting at block
    n mod (its count) of that range and wrapping, as the default (unordered) kernel does."""
    nb, nm = -(-n_tokens // BLOCK_N), -(-n_tokens // BLOCK_M)
    out = []
    for n in range(nb):
        lo = (n * BLOCK_N // BLOCK_M) if causal else 0
        blocks = list(range(lo, nm))
        if rotate and blocks:
            r = n % len(blocks)
            blocks = blocks[r:] + blocks[:r]
        out.append(blocks)
    return out


def turns(walk: list[list[int]], order: str) -> dict[tuple[int, int], int]:
    """(key block, query block) -> its turn at that tile (0 first) under ``order`` ("none": all 0)."""
    visitors: dict[int, list[int]] = {}
    for n, blocks in enumerate(walk):
        for m in blocks:
            visitors.setdefault(m, []).append(n)
    if order == "arrival":  # when each key block reaches each tile without any order
        reach = {(n, m): i for n, blocks in enumerate(walk) for i, m in enumerate(blocks)}
    out = {}
    for m, ns in visitors.items():
        if order == "none":
            ranked = {n: 0 for n in ns}
        elif order == "ascending":
            ranked = {n: n - min(ns) for n in ns}
        elif order == "descending":
            ranked = {n: max(ns) - n for n in ns}
        elif order == "arrival":
            ranked = {n: i for i, n in enumerate(sorted(ns, key=lambda n: (reach[n, m], n)))}
        else:
            raise ValueError(f"unknown order {order!r}; one of {', '.join(ORDERS)}")
        for n, t in ranked.items():
            out[n, m] = t
    return out


def makespan(walk: list[list[int]], order: str) -> int:
    """Time units until the last program finishes: a step ends one unit after the program's previous step
    and, with an order, one unit after the tile's previous turn has added. Raises on a deadlock."""
    turn = turns(walk, order)
    pred = {}  # (m, t) -> the key block whose turn t is at tile m
    for (n, m), t in turn.items():
        pred[m, t] = n
    done: dict[tuple[int, int], int] = {}
    pos = [0] * len(walk)  # next step of each program
    last = [0] * len(walk)  # end time of its previous step
    remaining = sum(len(b) for b in walk)
    while remaining:
        moved = False
        for n, blocks in enumerate(walk):
            while pos[n] < len(blocks):
                m = blocks[pos[n]]
                t = turn[n, m]
                ready = last[n]
                if order != "none" and t > 0:
                    before = done.get((pred[m, t - 1], m))
                    if before is None:
                        break  # waits for its turn
                    ready = max(ready, before)
                last[n] = ready + 1
                done[n, m] = last[n]
                pos[n] += 1
                remaining -= 1
                moved = True
        if not moved:
            raise RuntimeError(f"deadlock under the {order} order")
    return max(last)


SCHEMES = ("consumer", "writer")


def makespan_timed(walk: list[list[int]], order: str, scheme: str, count: float, stall: float = 0.0) -> float:
    """Makespan (step units) with the additions' latency, for the kernel's two ways of counting them.

    A step computes for 1 unit and ends with its dQ tile's addition; the tile's next turn may add ``count``
    units after this one was issued (the addition completes, is counted, the count is seen). ``consumer``:
    the program itself waits for its turn before adding, and counting its addition holds its next step for
    ``stall`` units (v10's first build: the warp group waits for completion early in its next step).
    ``writer``: a warp of its own waits for the turns and adds; the program's steps run on unless the writer
    is two steps behind (the staging buffers), and nothing stalls them (v10's second build)."""
    if scheme not in SCHEMES:
        raise ValueError(f"unknown scheme {scheme!r}; one of {', '.join(SCHEMES)}")
    turn = turns(walk, order)
    pred = {(m, t): n for (n, m), t in turn.items()}
    added: dict[tuple[int, int], float] = {}  # (key block, tile) -> when its addition was issued
    end = [[0.0] * len(b) for b in walk]  # each step's end (its tile staged)
    issue = [[0.0] * len(b) for b in walk]  # each step's addition issued
    pos = [0] * len(walk)
    remaining = sum(len(b) for b in walk)
    while remaining:
        moved = False
        for n, blocks in enumerate(walk):
            while pos[n] < len(blocks):
                k, m = pos[n], blocks[pos[n]]
                t = turn[n, m]
                free = 0.0
                if order != "none" and t > 0:
                    before = added.get((pred[m, t - 1], m))
                    if before is None:
                        break  # its turn waits for a program that has not got there yet
                    free = before + count
                prev_end = end[n][k - 1] if k else 0.0
                if scheme == "consumer":
                    start = issue[n][k - 1] + stall if k else 0.0
                    end[n][k] = max(start, prev_end) + 1.0
                    issue[n][k] = max(end[n][k], free)
                else:
                    buffer_free = issue[n][k - 2] if k >= 2 else 0.0
                    end[n][k] = max(prev_end, buffer_free) + 1.0
                    issue[n][k] = max(end[n][k], issue[n][k - 1] if k else 0.0, free)
                added[n, m] = issue[n][k]
                pos[n] += 1
                remaining -= 1
                moved = True
        if not moved:
            raise RuntimeError(f"deadlock under the {order} order")
    return max(max(i) for i in issue if i)


def latency_rows(n_tokens: int, counts=(0.25, 0.5, 1.0, 2.0, 3.0), stall: float = 0.5) -> list[dict]:
    """Per walk (causal; non-causal unrotated), scheme and latency of a count, the makespan against the
    unordered walks (descending turns for causal walks, ascending otherwise: the kernel's)."""
    rows = []
    for causal in (True, False):
        walk = walks(n_tokens, causal)
        order = "descending" if causal else "ascending"
        base = makespan_timed(walk, "none", "writer", 0.0)
        for scheme in SCHEMES:
            for c in counts:
                t = makespan_timed(walk, order, scheme, c, stall if scheme == "consumer" else 0.0)
                rows.append(dict(tokens=n_tokens, causal=causal, order=order, scheme=scheme, count=c,
                                 stall=stall if scheme == "consumer" else 0.0, vs_none=t / base))
    return rows


GRID_SHAPES = [  # (name, K/V heads, tokens, query heads per K/V head): bwd_dq_layout.py's causal shapes
    ("GQA 32/8, 8K", 8, 8192, 4), ("MHA 32, 16K (D = 64)", 32, 16384, 1), ("MHA 16, 16K (D = 128)", 16, 16384, 1)]
GRID_ORDERS = ("head by head, last first", "head first, last first", "head by head, first first",
               "head first, first first")


def grid_makespan(heads: int, n_tokens: int, group: int, order: str, sms: int = 132) -> float:
    """The causal backward's grid as a list schedule (no turns, no latency): programs (K/V head, key block)
    of ``group`` query heads each, a key block's walk ``group``·(its query blocks) steps, started in
    ``order`` on whichever of ``sms`` SMs (one program each) frees first. Returns the makespan over a
    perfect balance (total steps / sms). Orders: "head by head, last first" (the deterministic kernel's:
    inside a head, key blocks last first), "head first, last first" (every head's last key block first),
    "head by head, first first" (the longest walks first: the default kernel's order on large grids) and
    "head first, first first" (the default kernel's order on small ones, ``heads_first_default``)."""
    lengths = [group * len(b) for b in walks(n_tokens, True)]
    nb = len(lengths)
    if order == GRID_ORDERS[0]:
        seq = [(h, n) for h in range(heads) for n in reversed(range(nb))]
    elif order == GRID_ORDERS[1]:
        seq = [(h, n) for n in reversed(range(nb)) for h in range(heads)]
    elif order == GRID_ORDERS[2]:
        seq = [(h, n) for h in range(heads) for n in range(nb)]
    elif order == GRID_ORDERS[3]:
        seq = [(h, n) for n in range(nb) for h in range(heads)]
    else:
        raise ValueError(f"grid_makespan takes an order of {GRID_ORDERS}, got {order!r}")
    return list_schedule([lengths[n] for _, n in seq], sms) / (heads * sum(lengths) / sms)


def list_schedule(jobs: list[float], sms: int) -> float:
    """The makespan of ``jobs`` (lengths, in their start order) on ``sms`` SMs, one at a time each: every job starts
    on whichever SM frees first (a GPU's block scheduler, one program per SM)."""
    import heapq

    free = [0.0] * sms
    end = 0.0
    for length in jobs:
        t = heapq.heappop(free)
        end = max(end, t + length)
        heapq.heappush(free, t + length)
    return end


CHUNK_SHAPES = [  # (name, programs per key block (batch · heads), tokens of a sequence): the prefill table's causal
    # rows at D = 128 (16 heads) and D = 64 (32 heads)
    ("D = 128, 4 × 4K", 64, 4096), ("D = 128, 2 × 8K", 32, 8192), ("D = 128, 1 × 16K", 16, 16384),
    ("D = 64, 4 × 4K", 128, 4096), ("D = 64, 2 × 8K", 64, 8192), ("D = 64, 1 × 16K", 32, 16384)]


def chunk_makespan(heads: int, n_tokens: int, chunk: int, sms: int = 132) -> float:
    """The default causal backward's grid as a list schedule, its programs numbered in chunks of ``chunk`` heads
    (``prefill_gluon_bwd``'s HCHUNK): chunk after chunk, inside a chunk key block after key block (the longest walk
    first), every head of the chunk at each; ``chunk`` 1 is the numbering without chunks (head after head, key
    blocks first first), ``heads`` every head at each key block. Makespan over a perfect balance."""
    if chunk < 1:
        raise ValueError(f"chunk_makespan takes chunk >= 1, got {chunk}")
    lengths = [len(b) for b in walks(n_tokens, True)]
    seq = [lengths[n] for c in range(0, heads, chunk) for n in range(len(lengths)) for _ in range(min(chunk, heads - c))]
    return list_schedule(seq, sms) / (heads * sum(lengths) / sms)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, nargs="+", default=[2048, 8192, 16384])
    ap.add_argument("--json", type=Path, help="write the rows here (refuses an existing file)")
    args = ap.parse_args(argv)
    if args.json is not None and args.json.exists():
        ap.error(f"{args.json} exists; not overwriting it")
    if any(t < 1 for t in args.tokens):
        ap.error("--tokens must be positive")
    rows = []
    for n_tokens in args.tokens:
        for causal in (True, False):
            for rotate in (False, True):
                walk = walks(n_tokens, causal, rotate)
                base = makespan(walk, "none")
                for order in ORDERS:
                    try:
                        steps = makespan(walk, order)
                    except RuntimeError as e:
                        print(f"det_order_sim: {e} ({n_tokens} tokens, causal={causal}, rotate={rotate})",
                              file=sys.stderr)
                        return 1
                    rows.append(dict(tokens=n_tokens, causal=causal, rotate=rotate, order=order, steps=steps,
                                     vs_none=steps / base))
    print("| tokens | causal | rotated walks | order | makespan (steps) | × no order |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['tokens']} | {r['causal']} | {r['rotate']} | {r['order']} | {r['steps']} | {r['vs_none']:.2f} |")
    timed = latency_rows(max(args.tokens))
    print("\nWith the additions' latency (a tile's next turn adds `count` steps after the last was issued), the "
          "kernel's orders, for its two ways of counting:\n")
    print("| tokens | causal | order | scheme | count (steps) | stall (steps) | × no order |")
    print("|---|---|---|---|---|---|---|")
    for r in timed:
        print(f"| {r['tokens']} | {r['causal']} | {r['order']} | {r['scheme']} | {r['count']:g} | {r['stall']:g} | "
              f"{r['vs_none']:.2f} |")
    grid = [dict(shape=name, order=o, vs_balance=grid_makespan(h, n, g, o))
            for name, h, n, g in GRID_SHAPES for o in GRID_ORDERS]
    print("\nThe grid alone (causal walks, one program per SM on 132 SMs, no turns): makespan over a perfect "
          "balance, by the order the programs start in:\n")
    print("| shape | order | × balance |")
    print("|---|---|---|")
    for r in grid:
        print(f"| {r['shape']} | {r['order']} | {r['vs_balance']:.3f} |")
    chunks = [dict(shape=name, chunk=c, vs_balance=chunk_makespan(h, n, c)) for name, h, n in CHUNK_SHAPES
              for c in (1, 2, 4, 8)]
    print("\nThe default backward's causal grid numbered in chunks of heads (1: head after head), one program per "
          "SM on 132 SMs: makespan over a perfect balance:\n")
    print("| shape | heads per chunk | × balance |")
    print("|---|---|---|")
    for r in chunks:
        print(f"| {r['shape']} | {r['chunk']} | {r['vs_balance']:.3f} |")
    if args.json:
        args.json.write_text(json.dumps({"orders": rows, "latency": timed, "grid": grid, "chunks": chunks}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
