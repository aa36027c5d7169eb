"""What the simulator counted: per kernel launch, per array and per direction (lecture §5.3).

``KernelStats`` holds the counts of one launch; ``Report`` a list of them with totals, a rich table
(``print``/``table``) and a dict/JSON form with stable keys (documented in ``docs/simulator.md``):

global memory, per (array, direction), direction in ``read`` / ``write`` / ``atomic``:
    instructions       warp-level instructions with at least one active lane
    requests           thread-level accesses (active lanes)
    requested_bytes    bytes the active lanes asked for
    sectors            32-byte sectors touched, counted per warp instruction (coalescing)
    first_touch_bytes  bytes touched for the first time in this launch (an ideal cache: every byte
                       crosses HBM once per kernel)
    l2_hit_sectors, l2_miss_sectors   with the optional L2 model (``Device(l2_bytes=...)``)
shared memory, per (array, direction), direction in ``read`` / ``write``:
    instructions, requests, requested_bytes
    wavefronts         shared-memory cycles the warp instructions took (32 banks × 4 bytes)
    ideal_wavefronts   the fewest cycles the same bytes could take (``wavefronts - ideal`` are
                       bank conflicts)
per kernel: launches, blocks, threads_per_block, shared_bytes_per_block, barriers (block-level
``syncthreads`` executed), barrier_instructions (warp-level), warp_instructions (memory + barrier
instructions, warp level), hazards.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

GLOBAL_FIELDS = (
    "instructions",
    "requests",
    "requested_bytes",
    "sectors",
    "first_touch_bytes",
    "l2_hit_sectors",
    "l2_miss_sectors",
)
SHARED_FIELDS = ("instructions", "requests", "requested_bytes", "wavefronts", "ideal_wavefronts")
DIRECTIONS = ("read", "write", "atomic")
SECTOR_BYTES = 32
SCHEMA = "attnlab.sim.report/1"


def _zero(fields) -> dict:
    return dict.fromkeys(fields, 0)


@dataclass
class KernelStats:
    """Counts of one kernel launch."""

    name: str
    grid: tuple
    block: tuple
    threads_per_block: int = 0
    blocks: int = 0
    shared_bytes_per_block: int = 0
    l2_bytes: int | None = None
    launches: int = 1
    barriers: int = 0
    barrier_instructions: int = 0
    hazards: int = 0
    global_: dict = field(default_factory=dict)  # (array, direction) -> {field: int}
    shared: dict = field(default_factory=dict)  # (array, direction) -> {field: int}

    def g(self, array: str, direction: str) -> dict:
        key = (array, direction)
        c = self.global_.get(key)
        if c is None:
            c = self.global_[key] = _zero(GLOBAL_FIELDS)
        return c

    def s(self, array: str, direction: str) -> dict:
        key = (array, direction)
        c = self.shared.get(key)
        if c is None:
            c = self.shared[key] = _zero(SHARED_FIELDS)
        return c

    @property
    def warp_instructions(self) -> int:
        n = self.barrier_instructions
        n += sum(c["instructions"] for c in self.global_.values())
        n += sum(c["instructions"] for c in self.shared.values())
        return n

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "grid": list(self.grid),
            "block": list(self.block),
            "launches": self.launches,
            "blocks": self.blocks,
            "threads_per_block": self.threads_per_block,
            "shared_bytes_per_block": self.shared_bytes_per_block,
            "l2_bytes": self.l2_bytes,
            "barriers": self.barriers,
            "barrier_instructions": self.barrier_instructions,
            "warp_instructions": self.warp_instructions,
            "hazards": self.hazards,
            "global": _nest(self.global_),
            "shared": _nest(self.shared),
        }


def _nest(flat: dict) -> dict:
    out: dict = {}
    for (array, direction), c in flat.items():
        out.setdefault(array, {})[direction] = dict(c)
    return out


class Report:
    """The counts of a list of launches (one ``KernelStats`` each), with totals and renderings.

    ``global_bytes(array, direction, kind)`` sums over kernels; ``kind`` is ``"sectors"`` (HBM
    bytes with no cache: 32 × sectors), ``"ideal"`` (first-touch bytes), ``"requested"`` or ``"l2"``
    (HBM bytes behind the L2 model: 32 × misses for reads/atomics, 32 × sectors for writes).
    """

    def __init__(self, kernels=()):
        self.kernels: list[KernelStats] = list(kernels)

    def __add__(self, other: Report) -> Report:
        return Report(self.kernels + other.kernels)

    def __len__(self) -> int:
        return len(self.kernels)

    def __getitem__(self, name: str) -> KernelStats:
        for k in self.kernels:
            if k.name == name:
                return k
        raise KeyError(f"no kernel named {name!r} in this report (have {[k.name for k in self.kernels]})")

    # -- sums ---------------------------------------------------------------------------------
    def arrays(self, space: str = "global") -> list[str]:
        seen: dict = {}
        for k in self.kernels:
            for a, _ in (k.global_ if space == "global" else k.shared):
                seen[a] = None
        return list(seen)

    def _sum(self, space, array, direction, fld) -> int:
        total = 0
        for k in self.kernels:
            table = k.global_ if space == "global" else k.shared
            for (a, d), c in table.items():
                if (array is None or a == array) and (direction is None or d == direction):
                    total += c[fld]
        return total

    def global_count(self, fld: str, array: str | None = None, direction: str | None = None) -> int:
        if fld not in GLOBAL_FIELDS:
            raise ValueError(f"fld must be one of {GLOBAL_FIELDS}, got {fld!r}")
        return self._sum("global", array, direction, fld)

    def shared_count(self, fld: str, array: str | None = None, direction: str | None = None) -> int:
        if fld not in SHARED_FIELDS:
            raise ValueError(f"fld must be one of {SHARED_FIELDS}, got {fld!r}")
        return self._sum("shared", array, direction, fld)

    def global_bytes(self, array: str | None = None, direction: str | None = None, kind: str = "sectors") -> int:
        if kind == "sectors":
            return SECTOR_BYTES * self.global_count("sectors", array, direction)
        if kind == "ideal":
            return self.global_count("first_touch_bytes", array, direction)
        if kind == "requested":
            return self.global_count("requested_bytes", array, direction)
        if kind == "l2":
            total = 0
            for d in DIRECTIONS if direction is None else (direction,):
                f = "sectors" if d == "write" else "l2_miss_sectors"
                total += SECTOR_BYTES * self.global_count(f, array, d)
            return total
        raise ValueError(f"kind must be 'sectors', 'ideal', 'requested' or 'l2', got {kind!r}")

    def wavefronts(self, array: str | None = None, direction: str | None = None) -> int:
        return self.shared_count("wavefronts", array, direction)

    @property
    def barriers(self) -> int:
        return sum(k.barriers for k in self.kernels)

    @property
    def launches(self) -> int:
        return sum(k.launches for k in self.kernels)

    @property
    def warp_instructions(self) -> int:
        return sum(k.warp_instructions for k in self.kernels)

    @property
    def hazards(self) -> int:
        return sum(k.hazards for k in self.kernels)

    @property
    def atomics(self) -> int:
        """Thread-level atomic operations (active lanes of atomic instructions)."""
        return self.global_count("requests", direction="atomic")

    # -- dict / JSON --------------------------------------------------------------------------
    def to_dict(self) -> dict:
        tot_g: dict = {}
        tot_s: dict = {}
        for k in self.kernels:
            for key, c in k.global_.items():
                acc = tot_g.setdefault(key, _zero(GLOBAL_FIELDS))
                for f in GLOBAL_FIELDS:
                    acc[f] += c[f]
            for key, c in k.shared.items():
                acc = tot_s.setdefault(key, _zero(SHARED_FIELDS))
                for f in SHARED_FIELDS:
                    acc[f] += c[f]
        return {
            "schema": SCHEMA,
            "kernels": [k.to_dict() for k in self.kernels],
            "totals": {
                "launches": self.launches,
                "barriers": self.barriers,
                "warp_instructions": self.warp_instructions,
                "hazards": self.hazards,
                "atomics": self.atomics,
                "global": _nest(tot_g),
                "shared": _nest(tot_s),
            },
        }

    def to_json(self, path=None, indent: int = 1) -> str:
        text = json.dumps(self.to_dict(), indent=indent)
        if path is not None:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text + "\n")
        return text

    # -- rich ---------------------------------------------------------------------------------
    def table(self, title: str | None = None):
        """A rich Table: per kernel, one row per (array, direction), global then shared memory."""
        from rich.table import Table

        l2 = any(k.l2_bytes for k in self.kernels)
        t = Table(title=title, header_style="bold", pad_edge=False)
        cols = ["kernel", "array", "dir", "instr", "req B", "sectors", "HBM B", "ideal B"]
        if l2:
            cols.append("L2→HBM B")
        cols += ["wavefr.", "confl."]
        for col in cols:
            t.add_column(col, justify="left" if col in ("kernel", "array", "dir") else "right", no_wrap=True)
        for k in self.kernels:
            first = True
            for (a, d), c in k.global_.items():
                row = [k.name if first else "", a, d, f"{c['instructions']:,}", f"{c['requested_bytes']:,}",
                       f"{c['sectors']:,}", f"{SECTOR_BYTES * c['sectors']:,}", f"{c['first_touch_bytes']:,}"]
                if l2:
                    row.append(f"{SECTOR_BYTES * (c['sectors'] if d == 'write' else c['l2_miss_sectors']):,}")
                t.add_row(*row, "", "")
                first = False
            for (a, d), c in k.shared.items():
                row = [k.name if first else "", f"[cyan]{a}[/cyan]", d, f"{c['instructions']:,}",
                       f"{c['requested_bytes']:,}", "", "", ""] + ([""] if l2 else [])
                t.add_row(*row, f"{c['wavefronts']:,}", f"{c['wavefronts'] - c['ideal_wavefronts']:,}")
                first = False
            if not first:
                t.rows[-1].end_section = True
        return t

    def kernel_table(self, title: str | None = None):
        """A rich Table with one row per launch: grid, block, shared bytes, barriers, instructions."""
        from rich.table import Table

        t = Table(title=title, header_style="bold", pad_edge=False)
        for col in ("kernel", "grid", "block", "smem/block B", "barriers", "warp instr", "atomics", "hazards"):
            t.add_column(col, justify="left" if col == "kernel" else "right", no_wrap=True)
        for k in self.kernels:
            atom = sum(c["requests"] for (a, d), c in k.global_.items() if d == "atomic")
            t.add_row(k.name, _dim(k.grid), _dim(k.block), f"{k.shared_bytes_per_block:,}", f"{k.barriers:,}",
                      f"{k.warp_instructions:,}", f"{atom:,}", f"[red]{k.hazards}[/red]" if k.hazards else "0")
        return t

    def print(self, console=None, title: str | None = None) -> None:
        if console is None:
            from attnlab._console import make_console

            console = make_console()
        console.print(self.kernel_table(title))
        console.print(self.table())


def _dim(d) -> str:
    d = tuple(d)
    while len(d) > 1 and d[-1] == 1:
        d = d[:-1]
    return "×".join(str(x) for x in d)
