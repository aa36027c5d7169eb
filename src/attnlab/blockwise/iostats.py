"""``IOStats``: what a blockwise algorithm reads and writes, counted per tensor (§5.4, §6.3, §7.4).

The blockwise algorithms of ``attnlab.blockwise`` take an optional ``stats=IOStats()`` and count,
as a GPU kernel would move them, the elements of every tensor they read from and write to memory,
the atomic adds of dQ, and the (Q block, K/V block) pairs they compute or skip. The closed forms of
``attnlab.cost`` predict the same numbers; the tests hold the two equal.
"""

from __future__ import annotations

__all__ = ["IOStats"]

_ORDER = ["Q", "K", "V", "O", "L", "m", "l", "dO", "D", "dQ", "dK", "dV", "O_split", "L_split"]


class IOStats:
    """Elements read / written / atomically added per tensor name, and block pairs computed or skipped.

    A block pair is one (Q block, K/V block) of one (batch, K/V head); ``pairs_masked`` counts the
    computed pairs that straddle the edge of the mask (causal diagonal, window edge) and need the
    element-wise mask. Counts are elements, not bytes (multiply by the element size for bytes), as in
    §5.4 and §6.3.
    """

    def __init__(self):
        self.reads: dict[str, int] = {}
        self.writes: dict[str, int] = {}
        self.atomic_adds: dict[str, int] = {}
        self.pairs_computed = 0
        self.pairs_skipped = 0
        self.pairs_masked = 0

    def read(self, name: str, n: int) -> None:
        self.reads[name] = self.reads.get(name, 0) + int(n)

    def write(self, name: str, n: int) -> None:
        self.writes[name] = self.writes.get(name, 0) + int(n)

    def atomic_add(self, name: str, n: int) -> None:
        self.atomic_adds[name] = self.atomic_adds.get(name, 0) + int(n)

    def pairs(self, computed: int = 0, skipped: int = 0, masked: int = 0) -> None:
        self.pairs_computed += int(computed)
        self.pairs_skipped += int(skipped)
        self.pairs_masked += int(masked)

    @property
    def total_reads(self) -> int:
        return sum(self.reads.values())

    @property
    def total_writes(self) -> int:
        return sum(self.writes.values())

    @property
    def total_atomic_adds(self) -> int:
        return sum(self.atomic_adds.values())

    @property
    def total(self) -> int:
        """All element traffic: reads + writes + atomic adds (an atomic add is one read-modify-write)."""
        return self.total_reads + self.total_writes + self.total_atomic_adds

    def names(self) -> list[str]:
        seen = set(self.reads) | set(self.writes) | set(self.atomic_adds)
        return [n for n in _ORDER if n in seen] + sorted(seen - set(_ORDER))

    def as_dict(self) -> dict:
        return {"reads": dict(self.reads), "writes": dict(self.writes), "atomic_adds": dict(self.atomic_adds),
                "total_reads": self.total_reads, "total_writes": self.total_writes,
                "total_atomic_adds": self.total_atomic_adds, "total": self.total,
                "pairs_computed": self.pairs_computed, "pairs_skipped": self.pairs_skipped,
                "pairs_masked": self.pairs_masked}

    def _rows(self):
        for n in self.names():
            yield n, self.reads.get(n, 0), self.writes.get(n, 0), self.atomic_adds.get(n, 0)

    def table(self, title: str = "elements moved"):
        """A rich Table: one row per tensor, then the totals and the block pairs."""
        from rich.table import Table

        t = Table(title=title)
        for c in ("tensor", "read", "written", "atomic add"):
            t.add_column(c, justify="left" if c == "tensor" else "right")
        for n, r, w, a in self._rows():
            t.add_row(n, f"{r:,}", f"{w:,}", f"{a:,}")
        t.add_row("[bold]total[/bold]", f"{self.total_reads:,}", f"{self.total_writes:,}", f"{self.total_atomic_adds:,}")
        t.caption = (f"block pairs: {self.pairs_computed:,} computed ({self.pairs_masked:,} masked element-wise), "
                     f"{self.pairs_skipped:,} skipped")
        return t

    def __str__(self) -> str:
        lines = [f"{'tensor':<8} {'read':>14} {'written':>14} {'atomic add':>14}"]
        for n, r, w, a in self._rows():
            lines.append(f"{n:<8} {r:>14,} {w:>14,} {a:>14,}")
        lines.append(f"{'total':<8} {self.total_reads:>14,} {self.total_writes:>14,} {self.total_atomic_adds:>14,}")
        lines.append(f"block pairs: {self.pairs_computed:,} computed ({self.pairs_masked:,} masked), "
                     f"{self.pairs_skipped:,} skipped")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"IOStats(total={self.total:,}, pairs_computed={self.pairs_computed:,}, pairs_skipped={self.pairs_skipped:,})"


def check_stats(stats) -> None:
    """``stats`` is an IOStats or None."""
    if stats is not None and not isinstance(stats, IOStats):
        raise TypeError(f"stats must be an IOStats or None, got {type(stats).__name__}")
