"""Benchmarks as data: configurations × providers → a table and JSON.

``Benchmark`` names the configuration fields, their values and the providers (a provider is a
function of one configuration that returns a zero-argument callable to time, or ``None`` when it
cannot run there). ``run`` times every pair with the same method — ``triton.testing.do_bench``
(median) on CUDA, a median of wall-clock repeats on the CPU — and reports the rate the caller's
``flops``/``bytes`` functions give. The scripts in ``benchmarks/`` and ``attnlab bench`` use it.
"""

from __future__ import annotations

import contextlib
import json
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

import torch


def time_fn(fn: Callable[[], object], *, device: str | torch.device = "cpu", warmup: int = 2,
            rep: int = 7, min_time: float = 0.2) -> float:
    """Median time of ``fn()`` in milliseconds.

    On CUDA this is ``triton.testing.do_bench(..., return_mode="median")`` when triton is there,
    else CUDA events. On the CPU: ``warmup`` calls, then at least ``rep`` calls and ``min_time``
    seconds, median of the per-call wall times.
    """
    if torch.device(device).type == "cuda":
        try:
            from triton.testing import do_bench
        except ImportError:
            do_bench = None
        if do_bench is not None:
            return float(do_bench(fn, warmup=25, rep=100, return_mode="median"))
        for _ in range(warmup):
            fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(max(rep, 20)):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            torch.cuda.synchronize()
            times.append(a.elapsed_time(b))
        return statistics.median(times)
    for _ in range(warmup):
        fn()
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < rep or (time.perf_counter() - start) < min_time and len(times) < 1000:
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times)


def environment() -> dict:
    """Date, machine and versions, recorded with every result."""
    env = {
        "date": date.today().isoformat(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "machine": platform.machine(),
        "cpu_threads": torch.get_num_threads(),
    }
    try:
        import triton

        env["triton"] = triton.__version__
    except ImportError:
        env["triton"] = None
    if torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name()
        env["cuda"] = torch.version.cuda
    return env


@dataclass
class Benchmark:
    """A grid of configurations and the providers to time on each."""

    name: str
    x_names: list[str]
    x_vals: list[tuple]
    providers: dict[str, Callable[[dict], Callable[[], object] | None]]
    flops: Callable[[dict], float] | None = None
    bytes: Callable[[dict], float] | None = None
    device: str = "cpu"
    extra: dict = field(default_factory=dict)

    def configs(self):
        for vals in self.x_vals:
            yield dict(zip(self.x_names, vals))


def payload(bench: Benchmark, rows: list[dict]) -> dict:
    """What the JSON file of a run holds: the benchmark's name, the environment, its extras, the rows."""
    return {"benchmark": bench.name, "environment": environment(), **bench.extra, "rows": rows}


def _set_ms(bench: Benchmark, row: dict, ms: float) -> None:
    row["ms"] = ms
    if bench.flops:
        row["tflops"] = bench.flops(row) / (ms * 1e-3) / 1e12
    if bench.bytes:
        row["tb_per_s"] = bench.bytes(row) / (ms * 1e-3) / 1e12


def _time_row(bench: Benchmark, row: dict, fn, times: list, time_kw: dict, after=None, around=None) -> None:
    """Time ``fn`` once: the time goes into ``times`` and the row; a failure marks the row skipped. ``after``: called
    with the row once the time is in (what else a run records beside each time); ``around``: called with the row, a
    context manager the time is taken inside (what a run records during each time); before a row's first time one call
    of ``fn`` outside it, so that what it records leaves out a kernel's build or autotuning (prefill run 46: first times
    of 1.1-3.2 s sampled, most of them a build at an idle GPU's clock)."""
    try:
        if around is not None and not times:
            fn()
            if torch.device(bench.device).type == "cuda":
                torch.cuda.synchronize(bench.device)
        with around(row) if around is not None else contextlib.nullcontext():
            ms = time_fn(fn, device=bench.device, **time_kw)
    except (RuntimeError, NotImplementedError) as e:
        row["skipped"] = f"{type(e).__name__}: {str(e).splitlines()[0][:80]}"
        row.pop("ms", None)
        return
    times.append(ms)
    _set_ms(bench, row, ms)
    if after is not None:
        after(row)


def run(bench: Benchmark, *, console=None, json_path: str | Path | None = None, rounds: int = 1, after=None,
        around=None, **time_kw) -> list[dict]:
    """Time every (configuration, provider) pair; print a table; write JSON to ``json_path`` if given.

    ``rounds`` > 1: the providers of a configuration take turns, each timed once per round, on inputs made once; the
    order rotates by one each round (a b c, b c a, c a b, ...: every provider in every place, and with three or more
    none timed twice in a row across a round's end, which an order reversed every other round does to the first and
    last); a row's ``ms`` is the median of its rounds' times, ``ms_rounds`` holds them all and ``places`` where in each
    round it was timed (from 0). A peer's time then
    does not depend on where in the run it was measured, and a gap between providers can be told from their spread.
    ``after``: called with a row after each of its times (e.g. to note the GPU's clock beside it); ``around``: called
    with a row before each of its times, the context manager that time is taken inside (e.g. to sample the GPU's clock
    while it runs).

    The benchmark scripts keep their results in ``benchmarks/data/`` and replace their own file there;
    ``attnlab bench`` checks its ``--json`` path first (``attnlab._cliargs``) and writes it itself."""
    from rich.table import Table

    from ._console import make_console, print_wrote

    if int(rounds) != rounds or rounds < 1:
        raise ValueError(f"rounds must be a positive whole number, got {rounds!r}")
    console = console or make_console()
    rows = []
    for cfg in bench.configs():
        timed: list[tuple[dict, Callable[[], object]]] = []
        for prov, make in bench.providers.items():
            row = dict(cfg, provider=prov)
            rows.append(row)
            try:
                fn = make(cfg)
            except (RuntimeError, NotImplementedError, ValueError) as e:  # backend refused this shape
                fn, row["skipped"] = None, f"{type(e).__name__}: {str(e).splitlines()[0][:80]}"
            if fn is None:
                row.setdefault("skipped", "not available here")
                continue
            timed.append((row, fn))
            if rounds == 1:  # (one provider's inputs alive at a time)
                _time_row(bench, row, fn, [], time_kw, after, around)
                timed.clear()
        for row, _ in timed:
            row["ms_rounds"] = []
            row["places"] = []
        for r in range(rounds if timed else 0):
            k = r % len(timed)
            for place, (row, fn) in enumerate(timed[k:] + timed[:k]):
                if "skipped" not in row:
                    row["places"].append(place)
                    _time_row(bench, row, fn, row["ms_rounds"], time_kw, after, around)
        for row, _ in timed:
            if "skipped" in row:
                del row["ms_rounds"], row["places"]
            else:
                _set_ms(bench, row, statistics.median(row["ms_rounds"]))
    table = Table(title=bench.name)
    for n in [*bench.x_names, "provider", "ms"] + (["TFLOP/s"] if bench.flops else []) + (
            ["TB/s"] if bench.bytes else []):
        table.add_column(n, justify="right" if n not in ("provider",) else "left")
    for r in rows:
        cells = [str(r[n]) for n in bench.x_names] + [r["provider"]]
        if "ms" in r:
            cells.append(f"{r['ms']:.3f}")
            if bench.flops:
                cells.append(f"{r['tflops']:.3g}")
            if bench.bytes:
                cells.append(f"{r['tb_per_s']:.3f}")
        else:
            cells += [f"[dim]{r['skipped']}[/dim]"] + [""] * (bool(bench.flops) + bool(bench.bytes))
        table.add_row(*cells)
    console.print(table)
    if json_path is not None:
        path = Path(json_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(payload(bench, rows), indent=2))
        print_wrote(console, path)
    return rows


# -- `attnlab bench`: attnlab's forward against PyTorch SDPA on this machine ----------------------


def forward_benchmark(*, device: str, dtype: torch.dtype, seqs, head_dim: int = 64, heads: int = 8,
                      batch: int = 1, causal: bool = False) -> Benchmark:
    """attnlab's forward (Triton on CUDA; blockwise PyTorch with `cpu_block_sizes` on the CPU) against SDPA."""
    import attnlab
    from attnlab.cost import attention_flops

    def inputs(cfg):
        g = torch.Generator(device=device).manual_seed(0)
        shape = (batch, heads, cfg["N"], head_dim)
        return [torch.randn(shape, generator=g, device=device, dtype=dtype) for _ in range(3)]

    def attnlab_fwd(cfg):
        q, k, v = inputs(cfg)
        if device == "cpu":
            return lambda: attnlab.flash_forward(q, k, v, causal=causal)
        return lambda: attnlab.flash_attention(q, k, v, causal=causal)

    def sdpa(cfg):
        q, k, v = inputs(cfg)
        f = torch.nn.functional.scaled_dot_product_attention
        return lambda: f(q, k, v, is_causal=causal)

    def flops(cfg):
        return attention_flops(batch=batch, heads=heads, seq_q=cfg["N"], seq_k=cfg["N"], head_dim=head_dim,
                               causal=causal)

    return Benchmark(
        name=f"forward, B={batch} H={heads} D={head_dim} {str(dtype).removeprefix('torch.')}"
             f"{' causal' if causal else ''} on {device}",
        x_names=["N"], x_vals=[(n,) for n in seqs],
        providers={"attnlab": attnlab_fwd, "sdpa": sdpa}, flops=flops, device=device)


def _bench_cmd(args) -> int:
    from ._cliargs import output_file, write_text
    from ._console import make_console, print_wrote

    # the output path is checked before anything is timed; `--json -` puts the JSON on stdout, the table on stderr
    json_out = args.json is not None
    path = output_file(args.json, option="--json", force=args.force, allow_stdout=True) if json_out else None
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("--device cuda asked for, but no CUDA GPU is visible")
    dtype = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}[
        args.dtype or ("bfloat16" if device == "cuda" else "float32")]
    b = forward_benchmark(device=device, dtype=dtype, seqs=args.seq, head_dim=args.head_dim,
                          heads=args.heads, causal=args.causal)
    rows = run(b, console=make_console(stderr=json_out and path is None), rounds=args.rounds)
    if json_out:
        where = write_text(path, json.dumps(payload(b, rows), indent=2) + "\n", option="--json", force=args.force)
        if path is not None:
            print_wrote(make_console(), where)
    return 0


def register(sub) -> None:
    from ._cliargs import FORCE_HELP, positive_int

    p = sub.add_parser("bench", help="time attnlab's forward against PyTorch SDPA on this machine")
    seqs = [1024, 2048]
    p.add_argument("--seq", type=positive_int, nargs="+", default=seqs,
                   help=f"sequence lengths N, one table row per length and provider (default: {' '.join(map(str, seqs))})")
    p.add_argument("--head-dim", type=positive_int, default=64, help="head dimension D (default: %(default)s)")
    p.add_argument("--heads", type=positive_int, default=8, help="heads H, batch 1 (default: %(default)s)")
    p.add_argument("--causal", action="store_true", help="causal mask (both providers)")
    p.add_argument("--rounds", type=positive_int, default=1,
                   help="time attnlab and SDPA in turns this many times (the order rotated each round); each row is "
                        "the median of its rounds")
    p.add_argument("--device", choices=["cpu", "cuda"], default=None,
                   help="where to time (default: cuda when a CUDA GPU is visible, else cpu)")
    p.add_argument("--dtype", choices=["float32", "float16", "bfloat16"], default=None,
                   help="data type (default: bfloat16 on cuda, float32 on cpu)")
    p.add_argument("--json", default=None, metavar="FILE",
                   help="also write the rows as JSON ('-': standard output, the table then goes to stderr)")
    p.add_argument("--force", action="store_true", help=FORCE_HELP)
    p.set_defaults(func=_bench_cmd)
