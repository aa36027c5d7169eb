"""What each rank computes at each step of ring attention (§4.4–§4.5 applied across devices).

At step s (0 ≤ s < P) rank r holds the K/V of rank ``(r - s) mod P`` — its own at step 0, then each
neighbour's in turn as the blocks travel round the ring — and attends its local queries to them. A
step is a tuple of ``Block``s: local query rows ``[q0, q1)`` against rows ``[k0, k1)`` of the K/V block
held, with or without the causal mask, its (out, lse) merged into the rows' running state by ⊕.

Causal masks need no general offsets in either layout, because local order is global order within
a rank (``layout.chunk_ids`` is increasing):

    contiguous   step 0: the diagonal block, causal; K/V of an earlier rank: one full block;
                 of a later rank: nothing (rank P-1 works at every step, rank 0 only at step 0)
    zigzag       step 0: the diagonal block (both local chunks), causal;
                 K/V of an earlier rank (src < r): all queries × its first chunk, full;
                 of a later rank (src > r): the second query chunk × both its chunks, full —
                 every step is a full n × n/2 block, so all ranks do the same work

Without a mask every step is one full block. ``step_pairs`` counts the (query, key) pairs of a step;
``schedule_grid`` draws, chunk by chunk, which rank computes each (query chunk, key chunk) block at
which step.
"""

from __future__ import annotations

from dataclasses import dataclass

from .layout import check_layout, chunk_ids

__all__ = ["Block", "Step", "ring_schedule", "schedule_grid", "step_pairs"]


@dataclass(frozen=True)
class Block:
    """Local query rows [q0, q1) against rows [k0, k1) of the K/V block held; ``causal``: the
    diagonal block (query i sees key j <= i, local rows, Nq == Nk)."""

    q0: int
    q1: int
    k0: int
    k1: int
    causal: bool


@dataclass(frozen=True)
class Step:
    """Step ``step`` of the ring: the K/V held came from rank ``source``; ``blocks`` to compute."""

    step: int
    source: int
    blocks: tuple[Block, ...]


def ring_schedule(*, rank: int, world_size: int, local_seq: int, causal: bool, layout: str = "zigzag"
                  ) -> tuple[Step, ...]:
    """The P steps of rank ``rank`` for local chunks of ``local_seq`` rows (even for zigzag)."""
    chunk_ids(rank=rank, world_size=world_size, layout=layout)  # checks rank, world_size and layout
    if isinstance(local_seq, bool) or not isinstance(local_seq, int) or local_seq < 1:
        raise ValueError(f"local_seq must be a positive int, got {local_seq!r}")
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be True or False, got {causal!r}")
    if check_layout(layout) == "zigzag" and local_seq % 2:
        raise ValueError(f"the zigzag layout holds two equal chunks per rank, so local_seq must be even, "
                         f"got {local_seq}")
    n, c, P, r = local_seq, local_seq // 2, world_size, rank
    full = Block(0, n, 0, n, False)
    steps = []
    for s in range(P):
        src = (r - s) % P
        if not causal:
            blocks = (full,)
        elif s == 0:
            blocks = (Block(0, n, 0, n, True),)
        elif layout == "contiguous":
            blocks = (full,) if src < r else ()
        else:
            blocks = (Block(0, n, 0, c, False),) if src < r else (Block(c, n, 0, n, False),)
        steps.append(Step(s, src, blocks))
    return tuple(steps)


def step_pairs(step: Step) -> int:
    """(query, key) pairs a step computes: full blocks all of theirs, a causal diagonal n(n+1)/2."""
    total = 0
    for b in step.blocks:
        nq, nk = b.q1 - b.q0, b.k1 - b.k0
        total += nq * (nq + 1) // 2 if b.causal else nq * nk
    return total


def schedule_grid(*, world_size: int, layout: str = "zigzag", causal: bool = True) -> str:
    """The attention matrix at chunk granularity (rows: query chunks, columns: key chunks, global
    order): each cell ``r<rank>s<step>`` names the rank that computes the block and the ring step at
    which it does; ``◣`` marks a diagonal block computed under the causal mask, ``·`` a block that
    the mask hides."""
    per_rank = len(chunk_ids(rank=0, world_size=world_size, layout=layout))
    n_chunks = per_rank * world_size
    cells = [["·"] * n_chunks for _ in range(n_chunks)]
    for r in range(world_size):
        mine = chunk_ids(rank=r, world_size=world_size, layout=layout)
        # one row per chunk: local row i is chunk mine[i]; a block's rows are whole chunks
        for step in ring_schedule(rank=r, world_size=world_size, local_seq=per_rank, causal=causal, layout=layout):
            theirs = chunk_ids(rank=step.source, world_size=world_size, layout=layout)
            for b in step.blocks:
                for i in range(b.q0, b.q1):
                    for j in range(b.k0, b.k1):
                        if b.causal and j > i:
                            continue
                        mark = "◣" if b.causal and i == j else ""
                        cells[mine[i]][theirs[j]] = f"r{r}s{step.step}{mark}"
    width = max(len(c) for row in cells for c in row) + 1
    head = "q\\k".ljust(5) + "".join(str(j).rjust(width) for j in range(n_chunks))
    return "\n".join([head] + [str(i).ljust(5) + "".join(c.rjust(width) for c in row) for i, row in enumerate(cells)])
