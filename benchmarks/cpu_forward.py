"""CPU benchmark: attnlab's blockwise forward (``flash_forward``, FA2 order, lecture §5.1) against
PyTorch's ``scaled_dot_product_attention`` on the same CPU, float32, B = 1, H = 8, D = 64.

* time at N = 4096 (``attnlab.bench.run``: median wall time of repeated calls), with the block sizes of
  ``attnlab.cpu_block_sizes`` (Br = 256, Bc = 512 here) — what the default call
  ``flash_forward(q, k, v)`` and ``attnlab.flash_attention(q, k, v)`` use, the lecture's 64 × 64, and standard
  attention (``attention_ref``, S and P materialised) for scale;
* with one thread, also CPU time of attnlab and SDPA measured alternately (steadier on a shared machine);
* peak memory at N = 16384: each provider runs once in a fresh subprocess; its peak is the rise of the
  resident set's high-water mark (``VmHWM``, reset through ``/proc/self/clear_refs``; Linux) over the
  resident set after the inputs are allocated and one small warm-up call has been made (so thread
  pools and BLAS buffers count in neither). ``ru_maxrss`` cannot be reset and keeps the peak of
  importing torch, which hides the call's own peak. The output alone is B·H·N·D·4 bytes
  (32 MiB); a materialised S would be B·H·N²·4 bytes (8 GiB).

    python benchmarks/cpu_forward.py [--threads T] [--json FILE] [--n 4096] [--mem-n 16384]

Prints two tables and writes JSON (default: ``benchmarks/data/cpu_forward.json``).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from attnlab.bench import Benchmark, environment, run  # noqa: E402

B, H, D = 1, 8, 64
DTYPE = torch.float32


def _inputs(N: int):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(B, H, N, D, generator=g, dtype=DTYPE) for _ in range(3)]


def _blocks(N: int) -> tuple[int, int]:
    from attnlab import AttnDims, cpu_block_sizes

    return cpu_block_sizes(AttnDims(B, H, H, N, N, D, D))


def _provider(name: str, q, k, v):
    """A zero-argument callable running provider ``name`` on (q, k, v)."""
    from attnlab import attention_ref, flash_attention, flash_forward

    if name == "attnlab":  # the default call: no block sizes given
        return lambda: flash_forward(q, k, v)
    if name == "flash_attention":  # the public entry point (dispatch + autograd function, no grad here)
        return lambda: flash_attention(q, k, v)
    if name == "attnlab 64x64":
        return lambda: flash_forward(q, k, v, block_q=64, block_k=64)
    if name == "sdpa":
        return lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v)
    if name == "standard":
        return lambda: attention_ref(q, k, v)
    raise ValueError(f"unknown provider {name!r}")


def _flops(cfg) -> float:
    return 4.0 * B * H * cfg["N"] * cfg["N"] * D  # QKᵀ and PV, 2 FLOPs per multiply-add


def time_table(N: int, threads: int, console) -> list[dict]:
    """Time every provider at one N with ``attnlab.bench.run``."""
    providers = {}
    for name in ("attnlab", "flash_attention", "sdpa", "attnlab 64x64", "standard"):
        providers[name] = lambda cfg, name=name: _provider(name, *_inputs(cfg["N"]))
    br, bc = _blocks(N)
    bench = Benchmark(name=f"forward, B={B} H={H} D={D} float32, {threads} CPU thread(s); attnlab blocks Br={br} Bc={bc}",
                      x_names=["N"], x_vals=[(N,)], providers=providers, flops=_flops, device="cpu")
    return run(bench, console=console, warmup=1, rep=3, min_time=0.0)


def interleaved_cpu_time(N: int, rounds: int, console) -> dict:
    """CPU time (``time.process_time``) of attnlab and SDPA, alternating the two for ``rounds`` rounds and
    keeping each one's minimum: on a shared machine this is steadier than wall time, since time spent
    descheduled is not counted and slow phases of the machine hit both alike. Meaningful with one
    thread only (with more, process time adds up all threads)."""
    import time

    q, k, v = _inputs(N)
    fns = {name: _provider(name, q, k, v) for name in ("attnlab", "sdpa")}
    best = {name: float("inf") for name in fns}
    for f in fns.values():
        f()
    for _ in range(rounds):
        for name, f in fns.items():
            t = time.process_time()
            f()
            best[name] = min(best[name], time.process_time() - t)
    res = {f"{name}_cpu_ms": 1e3 * t for name, t in best.items()}
    res["ratio"] = best["attnlab"] / best["sdpa"]
    res["rounds"] = rounds
    console.print(f"CPU time, min of {rounds} interleaved rounds: attnlab {res['attnlab_cpu_ms']:.0f} ms, "
                  f"sdpa {res['sdpa_cpu_ms']:.0f} ms: [bold]{res['ratio']:.2f}x[/bold]")
    return res


# -- peak memory, one provider per fresh process -------------------------------------------------------


def _vm(field: str) -> float:
    """A VmXXX line of /proc/self/status, in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise OSError(f"{field} not in /proc/self/status")


def _peak_child(name: str, N: int, threads: int) -> None:
    torch.set_num_threads(threads)
    small = _inputs(256)
    _provider(name, *small)()  # warm-up: thread pool, BLAS buffers, lazy imports
    q, k, v = _inputs(N)
    fn = _provider(name, q, k, v)
    # reset the high-water mark to the current RSS (Linux >= 4.0); ru_maxrss cannot be reset and also
    # remembers the peak of the import of torch, which hides the call's own peak
    Path("/proc/self/clear_refs").write_text("5")
    base = _vm("VmRSS")
    out = fn()
    peak = _vm("VmHWM")
    o = out[0] if isinstance(out, tuple) else out
    print(json.dumps({"provider": name, "N": N, "baseline_mib": base, "peak_rise_mib": peak - base,
                      "out_mib": o.numel() * o.element_size() / 2**20,
                      "ru_maxrss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))


def memory_table(N: int, threads: int, console) -> list[dict]:
    from rich.table import Table

    rows = []
    for name in ("attnlab", "sdpa"):
        r = subprocess.run([sys.executable, __file__, "--_peak-child", name, "--mem-n", str(N), "--threads", str(threads)],
                           capture_output=True, text=True, check=True)
        rows.append(json.loads(r.stdout.strip().splitlines()[-1]))
    sdpa = rows[-1]["peak_rise_mib"]
    br, bc = _blocks(N)
    table = Table(title=f"peak memory of one forward, N={N}, B={B} H={H} D={D} float32 (fresh process each)",
                  caption=f"attnlab blocks Br={br} Bc={bc}; a materialised S would be {B * H * N * N * 4 / 2**20:,.0f} MiB")
    for c in ("provider", "peak RSS rise MiB", "of which the output", "vs sdpa"):
        table.add_column(c, justify="left" if c == "provider" else "right")
    for r in rows:
        r["vs_sdpa"] = r["peak_rise_mib"] / sdpa if sdpa > 0 else float("nan")
        table.add_row(r["provider"], f"{r['peak_rise_mib']:.1f}", f"{r['out_mib']:.1f}", f"{r['vs_sdpa']:.2f}x")
    console.print(table)
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=torch.get_num_threads(), help="torch CPU threads (default: %(default)s)")
    p.add_argument("--n", type=int, default=4096, help="sequence length of the time table")
    p.add_argument("--mem-n", type=int, default=16384, help="sequence length of the memory table (0: skip)")
    p.add_argument("--rounds", type=int, default=5, help="interleaved CPU-time rounds with --threads 1 (0: skip)")
    p.add_argument("--json", default=str(Path(__file__).parent / "data" / "cpu_forward.json"), metavar="FILE")
    p.add_argument("--_peak-child", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.threads < 1 or args.n < 1 or args.mem_n < 0:
        raise SystemExit("--threads and --n must be positive, --mem-n non-negative")
    if args._peak_child:
        _peak_child(args._peak_child, args.mem_n, args.threads)
        return 0
    from rich.console import Console

    console = Console()
    torch.set_num_threads(args.threads)
    times = time_table(args.n, args.threads, console)
    by = {r["provider"]: r.get("ms") for r in times}
    ratio = by["attnlab"] / by["sdpa"] if by.get("attnlab") and by.get("sdpa") else None
    if ratio is not None:
        console.print(f"attnlab / sdpa time at N={args.n}: [bold]{ratio:.2f}x[/bold]")
    cpu = interleaved_cpu_time(args.n, args.rounds, console) if args.threads == 1 and args.rounds else None
    mem = memory_table(args.mem_n, args.threads, console) if args.mem_n else []
    br, bc = _blocks(args.n)
    result = {"benchmark": "cpu_forward", "environment": environment(), "B": B, "H": H, "D": D, "dtype": "float32",
              "blocks": {"block_q": br, "block_k": bc}, "time": times, "time_ratio_attnlab_over_sdpa": ratio,
              "cpu_time_interleaved": cpu, "memory": mem}
    path = Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2))
    console.print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
