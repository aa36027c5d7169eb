"""A flash kernel's grid on the GPU's SMs (lecture §8.4's waves, applied to prefill): how much of the SMs' time the
last waves leave idle when each SM runs one program at a time.

The roofline (``roofline``) assumes the work spreads evenly over every SM. A FlashAttention kernel's work comes in
programs — the forward one per (batch, head, block of ``block`` query rows), the backward one per (batch, K/V head,
block of ``block`` keys) walking the query blocks of the heads that read it — and a GPU starts each program on
whichever SM frees first. Programs of equal work (no mask) fill ``programs / SMs`` waves, the last one partly; under
a causal mask the walks differ in length, and started longest first they fill the SMs more evenly. ``grid_estimate``
schedules the programs so (a list schedule, longest first) and returns the fraction of the SMs' time that holds
work: the most of the roofline's speed a kernel with one program per SM at a time can reach on that grid.
"""

from __future__ import annotations

import heapq
from dataclasses import asdict, dataclass

from ._args import flag, heads_pair, pos_int

PASSES = ("forward", "backward")
SCHEDULE_LIMIT = 1 << 21  # programs scheduled one by one at most; past it the list-schedule bound (Graham's: no SM
# ends more than the longest program after the average) stands in, a lower bound of the efficiency


@dataclass(frozen=True)
class GridEstimate:
    """One pass's grid: ``programs`` of ``block`` rows (forward: query rows; backward: keys) on ``sms`` SMs, in
    ``waves`` = programs / SMs; ``efficiency`` = the programs' work over (SMs × the schedule's length)."""

    pass_: str
    programs: int
    block: int
    sms: int
    efficiency: float

    @property
    def waves(self) -> float:
        return self.programs / self.sms

    def to_dict(self) -> dict:
        return asdict(self) | {"waves": self.waves}


def program_work(*, pass_: str, seq: int, block: int, causal: bool, group: int = 1) -> list[int]:
    """The work of one head's programs (block pairs visited, in ``block`` × ``block`` units): the forward's query
    block i sees i + 1 key blocks under a causal mask, all of them otherwise; the backward's key block j is seen by
    the query blocks from j on (causal) or all of them, for each of the ``group`` query heads that read its K/V head.
    Square attention (as many queries as keys), the last block partial."""
    if pass_ not in PASSES:
        raise ValueError(f"pass_ must be one of {PASSES}, got {pass_!r}")
    n = -(-pos_int(seq, "seq") // pos_int(block, "block"))
    g = pos_int(group, "group")
    if pass_ == "forward":
        return [(i + 1 if causal else n) for i in range(n)]
    return [g * (n - j if causal else n) for j in range(n)]


def grid_estimate(*, pass_: str, batch: int, heads: int, kv_heads: int | None = None, seq: int, block: int,
                  causal: bool, sms: int) -> GridEstimate:
    """``pass_``'s grid for attention of ``batch`` × ``heads`` (``kv_heads`` K/V heads) × ``seq`` in blocks of
    ``block`` on ``sms`` SMs, one program each at a time, the longest programs started first (past
    ``SCHEDULE_LIMIT`` uneven programs: a lower bound). Raises ``ValueError`` on non-positive sizes or ``heads`` not
    a multiple of ``kv_heads``."""
    flag(causal, "causal")
    H, Hkv = heads_pair(heads, kv_heads)
    B, S = pos_int(batch, "batch"), pos_int(sms, "sms")
    per_head = program_work(pass_=pass_, seq=seq, block=block, causal=causal, group=H // Hkv)
    copies = B * (H if pass_ == "forward" else Hkv)
    programs = copies * len(per_head)
    total = copies * sum(per_head)
    if len(set(per_head)) == 1:  # equal programs: whole waves and one partial
        makespan = -(-programs // S) * per_head[0]
    elif programs > SCHEDULE_LIMIT:
        makespan = total / S + max(per_head)
    else:
        free = [0] * min(S, programs)
        for w in sorted(per_head, reverse=True):  # longest first; each length copies times, in turn
            for _ in range(copies):
                heapq.heappush(free, heapq.heappop(free) + w)
        makespan = max(free)
    return GridEstimate(pass_, programs, pos_int(block, "block"), S, total / (S * makespan))


@dataclass(frozen=True)
class TailSplit:
    """Equal programs on ``sms`` SMs with the last, partial wave's ``tail`` programs each cut into ``parts`` equal
    pieces (1: not cut): ``waves`` the schedule's length in programs' times, against ``waves_whole`` uncut."""

    programs: int
    sms: int
    tail: int
    parts: int
    waves: float
    waves_whole: int

    @property
    def saving(self) -> float:
        """The share of the uncut schedule's length the cut saves."""
        return 1.0 - self.waves / self.waves_whole


def tail_split(*, programs: int, sms: int, max_parts: int = 64, overhead: float = 0.0) -> TailSplit:
    """The cut of a grid's last wave that ends it soonest: ``programs`` equal programs on ``sms`` SMs, one at a time
    each, fill ``programs // sms`` whole waves; the ``programs % sms`` left over, each cut into ``parts`` pieces of
    1 / parts of a program plus ``overhead`` (a piece's own start and end, in programs), run in ⌈tail · parts / sms⌉
    rounds after them. The fewest parts (1 to ``max_parts``) of the shortest schedule: e.g. 2,048 programs on 132 SMs
    (the backward of B·N = 16K tokens, 16 heads, 128-key blocks) end after 16 waves uncut, 15.67 in thirds and 15.52
    with the 68 left each cut in 33 (no overhead); 4,096 (32 heads, D = 64) after 32 uncut and 31.03 with each of
    the 4 left cut in 33. Raises ``ValueError`` on non-positive sizes or a negative overhead."""
    n, S, top = pos_int(programs, "programs"), pos_int(sms, "sms"), pos_int(max_parts, "max_parts")
    if not overhead >= 0:
        raise ValueError(f"overhead must be >= 0, got {overhead!r}")
    whole, tail = divmod(n, S)
    waves_whole = whole + (tail > 0)
    best = (float(waves_whole), 1)
    if tail:
        for parts in range(2, top + 1):
            waves = whole + -(-tail * parts // S) * (1.0 / parts + overhead)
            if waves < best[0] - 1e-12:
                best = (waves, parts)
    return TailSplit(n, S, tail, best[1], best[0], waves_whole)
