"""The Gluon forward built with its compile-time switches set other ways (``prefill_gluon``'s ``RESCALE_SKIP``,
``RESCALE_TAU``, ``ROW_MAX_TREE``), timed against the shipped build in one process, against PyTorch's fastest route
for the row in the same rounds.

A build other than the shipped one is a copy of ``prefill_gluon`` made at run time with the kernels' constexpr
switches (``    _NAME = gl.constexpr(NAME)``) set to the build's values (``switched_source``); its three forward
kernels stand in for the library's own while it is timed, so every build goes through the same dispatch,
configuration and launch code. Each row records each build's largest difference from the first build's output
(``max_diff``; 0 where a switch keeps the bits, as ``RESCALE_SKIP`` must).

Builds (``--builds``, the first the baseline): ``shipped``; ``off`` (neither rescale switch); ``skip`` (O's rescaling
skipped by warps whose alphas are all 1); ``skip+tau8`` (and a row's maximum kept unless it grows by more than 8, log2
units); ``tau8`` (the last three at both head dims, ``RESCALE_FROM_D`` 64); ``tree`` and ``chain`` (the row maximum as
a tree or one score after another); ``pack``, ``mask``, ``pp`` and ``fa4`` (FlashAttention-4's step: P̃ converted two
elements at a time, masked blocks' scores masked by one range test and then the unmasked arithmetic, the consumer
groups' turns at the tensor cores, and all three); ``nolimits``, ``limits1`` and ``limits`` (a masked block's
visibility by three comparisons of each score's column, by two comparisons against constants, or by a bit mask per
row: ``MASK_LIMITS`` 0, 1, 2); ``n256`` and ``n256p``, D = 64 only: the shipped kernels on 128 × 256 tiles (every D =
64 entry of the Gluon forward's table so replaced while the build runs, ``TILE_BUILDS``), as a grid or persistent;
``n192``, ``n192m`` and ``n128g``, D = 64 only: 192 × 192 tiles (FlashAttention-3's, P̃ through shared memory), 128 ×
192 tiles (the same step on two consumer groups of 232 registers) and 192 × 128 tiles, all as a grid; ``n128p``,
``n128d`` and ``n192p``, D = 64 only: the persistent kernel on 128 × 128 tiles (dealt out by the host's schedule, or
taken from a counter) and on 192 × 128 tiles. ``own`` and ``noown``: each consumer group walking only the key blocks
its rows see, or the whole tile (``OWN_BLOCKS``). ``qregs`` and ``noqregs``: Q·Kᵀ's A operand from registers from D = 128, or from shared memory (``Q_REGS``). ``lanes`` and ``nolanes``: each thread's partial row sums, added
across the lanes once after the last block, or a sum across the lanes every block (``ROW_SUM_LANES``);
``lanes+skip+tau8`` the lanes with both rescale switches at both head dims; ``tau8from128`` both rescale switches from
D = 128 only; ``before`` the shipped build before fwd-switches run 16 (no lanes, the rescale switches from D = 128).
Rows: those of ``exp_poly.py`` (the variants benchmark's sliding window W = 4096 and packed batch at 16K tokens,
causal; dense 4 × 4K causal and not; named only: ``alibi``, the variants' ALiBi row, ``causal16k``, one causal
sequence of 16K, and ``causal2k`` and ``causal6k``, causal batches of 8 × 2K and 2 × 6K), at D = 64 and 128;
``--rounds`` rounds in which the builds and the peer take turns (``do_bench`` medians; the table gives each one's
median).

    python benchmarks/fwd_switches.py --json fwd-switches.json     # every row, both head dims, every build
    python benchmarks/fwd_switches.py --rows window full --D 64 --builds shipped skip skip+tau8 --rounds 5
    python benchmarks/fwd_switches.py --report fwd-switches.json
"""

from __future__ import annotations

import importlib.util
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import ab_rounds  # noqa: E402
from exp_poly import EXTRA_ROWS, ROWS, row_call  # noqa: E402

from attnlab.bench import time_fn  # noqa: E402

BUILDS = {  # (the rescale builds set all three of its switches, so that each means the same whatever the library
    "shipped": {},  # ships; runs 1 and 2 recorded them against a library with all three off)
    "off": {"RESCALE_SKIP": False, "RESCALE_TAU": 0.0},
    "skip": {"RESCALE_SKIP": True, "RESCALE_TAU": 0.0, "RESCALE_FROM_D": 64},
    "skip+tau8": {"RESCALE_SKIP": True, "RESCALE_TAU": 8.0, "RESCALE_FROM_D": 64},
    "tau8": {"RESCALE_SKIP": False, "RESCALE_TAU": 8.0, "RESCALE_FROM_D": 64},
    "tree": {"ROW_MAX_TREE": True},
    "chain": {"ROW_MAX_TREE": False},
    # FlashAttention-4's step, one change at a time and together (``prefill_gluon.PACK_P``, ``MASK_RANGE``, ``PINGPONG``)
    "pack": {"PACK_P": True},
    "nopack": {"PACK_P": False},  # (P̃ converted one element at a time, as before PACK_P was on)
    "mask": {"MASK_RANGE": True},
    "pp": {"PINGPONG": True},
    "fa4": {"PACK_P": True, "MASK_RANGE": True, "PINGPONG": True},
    "lanes": {"ROW_SUM_LANES": True},  # each thread's partial row sums, the lanes' added after the last block
    # both at once: the partial row sums, and O's rescaling skipped with a stale maximum at both head dims
    "lanes+skip+tau8": {"ROW_SUM_LANES": True, "RESCALE_SKIP": True, "RESCALE_TAU": 8.0, "RESCALE_FROM_D": 64},
    "nolanes": {"ROW_SUM_LANES": False},
    "tau8from128": {"RESCALE_SKIP": True, "RESCALE_TAU": 8.0, "RESCALE_FROM_D": 128},
    # the shipped build before the lanes went on and the rescale switches went on at D = 64 (fwd-switches run 16)
    "before": {"ROW_SUM_LANES": False, "RESCALE_SKIP": True, "RESCALE_TAU": 8.0, "RESCALE_FROM_D": 128},
    # a masked block's visibility from each row's limits (``prefill_gluon.MASK_LIMITS``): 0 the three comparisons
    # per score before it, 1 two comparisons against constants, 2 a bit mask per row (one AND per score)
    "nolimits": {"MASK_LIMITS": 0},
    "limits1": {"MASK_LIMITS": 1},
    "limits": {"MASK_LIMITS": 2},
    # each consumer group walks only the key blocks holding a key its rows see (``prefill_gluon.OWN_BLOCKS``)
    "noown": {"OWN_BLOCKS": False},
    "own": {"OWN_BLOCKS": True},
    # Q·Kᵀ's A operand from registers, read from shared memory once a tile (``prefill_gluon.Q_REGS``)
    "qregs": {"Q_REGS": 128},  # (from D = 128: the D = 64 builds spill with it)
    "noqregs": {"Q_REGS": 0},
    "n256": {},  # (tiles, not switches: TILE_BUILDS)
    "n256p": {},
    "n192": {},
    "n192m": {},
    "n128g": {},
    "n128p": {},
    "n128d": {},
    "n192p": {},
}
# builds that run the shipped kernels on other tiles: every D = 64 entry of the Gluon forward's table (the long
# entries, causal or not, and a causal entry below 8K keys where there is one) on 128 × 256 tiles (``prefill_gluon.LONG_KEYS``), as a
# grid of programs or persistent, or on 192-row tiles as a grid, the entries' other fields (the part block first,
# groups of heads) kept
TILE_BUILDS = {
    "n256": dict(block_m=128, block_n=256, num_stages=2, persistent=False, dynamic=False),
    "n256p": dict(block_m=128, block_n=256, num_stages=2, persistent=True, dynamic=False),
    # FlashAttention-3's D = 64 tile, 192 × 192 (``prefill_gluon.WIDE_KEYS``: P̃ through shared memory; a grid only),
    # and its baseline: the same grid of 192-row tiles on 128-key blocks
    "n192": dict(block_m=192, block_n=192, num_stages=2, persistent=False, dynamic=False),
    "n192m": dict(block_m=128, block_n=192, num_stages=2, persistent=False, dynamic=False),  # two groups, 232 registers
    "n128g": dict(block_m=192, block_n=128, num_stages=2, persistent=False, dynamic=False),
    # the persistent builds on 128-key blocks: 128-row tiles dealt out by the host's schedule or taken from a
    # counter, and 192-row tiles dealt out (the causal D = 64 entry from 8K keys on is the 192-row grid)
    "n128p": dict(block_m=128, block_n=128, num_stages=2, persistent=True, dynamic=False),
    "n128d": dict(block_m=128, block_n=128, num_stages=2, persistent=True, dynamic=True),
    "n192p": dict(block_m=192, block_n=128, num_stages=2, persistent=True, dynamic=False),
}
TILE_HEAD_DIM = 64
KERNELS = ("_attn_fwd_gluon", "_attn_fwd_gluon_ws", "_attn_fwd_gluon_wsp")
_KEEP: list = []  # the copies' folder, alive while their kernels may compile (Triton reads their source)
_MODULES: dict = {}


def switched_source(src: str, values: dict) -> str:
    """``prefill_gluon``'s source with the kernels' switches set to ``values`` ({name: bool or float}); refuses a name
    without exactly one ``    _NAME = gl.constexpr(NAME)`` line, and a value of another type than the shipped one."""
    for name, value in values.items():
        line = f"    _{name} = gl.constexpr({name})\n"
        if src.count(line) != 1:
            raise RuntimeError(f"prefill_gluon has no single switch {name}; the build cannot be made")
        src = src.replace(line, f"    _{name} = gl.constexpr({value!r})\n")
    return src


def build_values(build: str) -> dict:
    """The build's switches, those equal to the library's own left out."""
    from attnlab.gpu import prefill_gluon as pg

    if build not in BUILDS:
        raise ValueError(f"build must be one of {sorted(BUILDS)}, got {build!r}")
    out = {}
    for name, value in BUILDS[build].items():
        shipped = getattr(pg, name)
        if type(value) is not type(shipped):
            raise TypeError(f"{name}: {value!r} is not a {type(shipped).__name__} like the library's {shipped!r}")
        if value != shipped:
            out[name] = value
    return out


def build_module(build: str):
    """The module whose kernels run for ``build``: ``prefill_gluon`` itself where the build sets nothing the library
    does not, else a copy (``switched_source``) loaded under ``attnlab.gpu`` (its relative imports the library's)."""
    from attnlab.gpu import prefill_gluon as pg

    values = build_values(build)
    if not values:
        return pg
    key = tuple(sorted(values.items()))
    if key in _MODULES:
        return _MODULES[key]
    mod = source_module(f"_prefill_gluon_build{len(_MODULES)}", switched_source(Path(pg.__file__).read_text(), values))
    _MODULES[key] = mod
    return mod


def source_module(name: str, src: str):
    """``src`` (a copy of ``prefill_gluon``'s source) written to a folder kept while its kernels may compile (Triton
    reads their source) and loaded as ``attnlab.gpu.<name>``, its relative imports the library's."""
    if not _KEEP:
        _KEEP.append(tempfile.TemporaryDirectory(prefix="fwd-switches-"))
    path = Path(_KEEP[0].name) / f"{name}.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location(f"attnlab.gpu.{name}", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


class use_build:
    """``with use_build("skip"):`` the library's Gluon forward runs that build's kernels (kept launch plans dropped on
    the way in and out); a tile build (``TILE_BUILDS``) replaces the Gluon forward table's entries for head dim
    ``D`` instead, put back on the way out."""

    def __init__(self, build: str, D: int | None = None):
        self.mod = build_module(build)
        self.tiles = TILE_BUILDS.get(build)
        if self.tiles is not None and D != TILE_HEAD_DIM:
            raise ValueError(f"build {build!r} is D = {TILE_HEAD_DIM}'s (its tiles), not D = {D}'s")
        self.D = D

    @classmethod
    def of_module(cls, mod) -> use_build:
        """The swap for a module copy made elsewhere (``source_module``): its kernels stand in, the table as it is."""
        swap = cls.__new__(cls)
        swap.mod, swap.tiles, swap.D = mod, None, None
        return swap

    def __enter__(self):
        import dataclasses

        from attnlab.gpu import config as gc
        from attnlab.gpu import prefill_fwd
        from attnlab.gpu import prefill_gluon as pg

        self.saved = {k: getattr(pg, k) for k in KERNELS}
        for k in KERNELS:
            setattr(pg, k, getattr(self.mod, k))
        self.tables = (dict(gc._GLUON_FWD_TABLE), dict(gc._GLUON_FWD_MID))
        if self.tiles is not None:
            for table in (gc._GLUON_FWD_TABLE, gc._GLUON_FWD_MID):
                for key, cfg in table.items():
                    if key[0] == self.D:
                        table[key] = dataclasses.replace(cfg, **self.tiles)
        prefill_fwd._PLANS.clear()
        return self

    def __exit__(self, *exc):
        from attnlab.gpu import config as gc
        from attnlab.gpu import prefill_fwd
        from attnlab.gpu import prefill_gluon as pg

        for k, f in self.saved.items():
            setattr(pg, k, f)
        for table, kept in zip((gc._GLUON_FWD_TABLE, gc._GLUON_FWD_MID), self.tables):
            table.clear()
            table.update(kept)
        prefill_fwd._PLANS.clear()
        return False


def measure(rows, Ds, builds, rounds: int) -> list[dict]:
    return ab_rounds.measure(rows, Ds, builds, use_build, rounds, row_call, time_fn=time_fn,
                             extra=lambda b: dict(switches=BUILDS[b], tiles=TILE_BUILDS.get(b)))


def report(rows) -> str:
    first = rows[0]["build"] if rows else "first"
    return ab_rounds.table(rows, f"row | D | build | ms (median) | TFLOP/s | × {first} | × peer | max diff from {first}")


def main(argv=None) -> int:
    def add(ap):
        ap.add_argument("--builds", nargs="+", default=["shipped", "skip", "skip+tau8"], choices=list(BUILDS))

    def check(ap, args):
        if len(set(args.builds)) != len(args.builds):
            ap.error("--builds: each build once")
        if any(b in TILE_BUILDS for b in args.builds) and set(args.D) != {TILE_HEAD_DIM}:
            ap.error(f"--builds {' '.join(b for b in args.builds if b in TILE_BUILDS)}: their tiles are "
                     f"D = {TILE_HEAD_DIM}'s (--D {TILE_HEAD_DIM})")

    return ab_rounds.main(argv, description=__doc__.splitlines()[0], name="fwd_switches", rows=ROWS,
                          extra_rows=EXTRA_ROWS, report=report, add_args=add, check_args=check, measure_fn=lambda a: measure(a.rows, a.D, a.builds, a.rounds))


if __name__ == "__main__":
    sys.exit(main())
