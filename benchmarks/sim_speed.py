"""How fast the GPU simulator runs: simulated warp-level instructions per second of wall time.

Each case is one launch sequence on fresh random data: a coalesced copy, the lecture's kernels
(standard 3-kernel forward, FlashAttention FA2 / causal / FA1 order, §5.2–6.3) and the same with
hazard tracking off or the L2 model on. Wall time is the median of repeats (attnlab.bench.time_fn).

    python benchmarks/sim_speed.py [--json sim_speed.json] [--force] [--quick]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np


def _copy(ctx, src, dst, n):
    i = ctx.blockIdx.x * ctx.blockDim.x + ctx.threadIdx.x
    with ctx.masked(i < n):
        dst.store(i, src.load(i))


def _case_copy(n):
    from attnlab import sim

    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)

    def run():
        dev = sim.Device()
        dev.launch(_copy, -(-n // 256), 256, dev.array("x", x), dev.zeros("y", n), n)
        return dev.report()

    return run


def _case_attention(kind, N, d, **kw):
    from attnlab.sim.kernels import run_flash_forward, run_standard_forward

    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((N, d)).astype(np.float32) for _ in range(3))
    if kind == "standard":
        return lambda: run_standard_forward(q, k, v, **kw)[-1]
    return lambda: run_flash_forward(q, k, v, **kw)[-1]


# (name, configuration, factory of a zero-argument run() -> Report)
CASES = [
    ("copy", "N=1M floats", lambda: _case_copy(1 << 20)),
    ("standard fwd", "N=256 d=64", lambda: _case_attention("standard", 256, 64)),
    ("standard fwd, no hazard check", "N=256 d=64", lambda: _case_attention("standard", 256, 64, hazards="ignore")),
    ("standard fwd, L2 50 MB", "N=256 d=64", lambda: _case_attention("standard", 256, 64, l2_bytes=50 << 20)),
    ("flash fwd (FA2)", "N=256 d=64 Br=Bc=64", lambda: _case_attention("flash", 256, 64)),
    ("flash fwd causal", "N=256 d=64 Br=Bc=64", lambda: _case_attention("flash", 256, 64, causal=True)),
    ("flash fwd (FA1 order)", "N=256 d=64 Br=Bc=64", lambda: _case_attention("flash", 256, 64, order="fa1")),
    ("flash fwd (FA2)", "N=1024 d=128 Br=Bc=128", lambda: _case_attention("flash", 1024, 128, block_q=128, block_k=128)),
]
QUICK = {"copy", "standard fwd", "flash fwd (FA2)", "flash fwd causal", "flash fwd (FA1 order)"}


def main(argv=None) -> list[dict]:
    from rich.table import Table

    from attnlab._cliargs import FORCE_HELP, output_file, write_text
    from attnlab._console import make_console
    from attnlab.bench import environment, time_fn

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default="sim_speed.json", help="where to write the results (default: %(default)s)")
    ap.add_argument("--force", action="store_true", help=FORCE_HELP)
    ap.add_argument("--quick", action="store_true", help="fewer cases, fewer repeats")
    args = ap.parse_args(argv)
    try:  # checked before the cases run: an existing file is kept unless --force
        path = output_file(args.json, option="--json", force=args.force)
    except ValueError as e:
        ap.error(str(e))
    console = make_console()
    rows = []
    for name, cfg, factory in CASES:
        if args.quick and (name not in QUICK or "1024" in cfg):
            continue
        run = factory()
        t = time.perf_counter()
        rep = run()
        first = time.perf_counter() - t
        ms = time_fn(run, warmup=0, rep=1 if args.quick else 3, min_time=0.0)
        wi = rep.warp_instructions
        rows.append({"case": name, "config": cfg, "launches": rep.launches, "warp_instructions": wi,
                     "first_call_s": first, "median_s": ms / 1e3, "warp_instr_per_s": wi / (ms / 1e3)})
    table = Table(title="GPU simulator speed (simulated warp instructions per second of wall time)")
    for col in ("case", "config", "launches", "warp instr", "first call s", "median s", "warp instr/s"):
        table.add_column(col, justify="left" if col in ("case", "config") else "right")
    for r in rows:
        table.add_row(r["case"], r["config"], str(r["launches"]), f"{r['warp_instructions']:,}",
                      f"{r['first_call_s']:.3f}", f"{r['median_s']:.3f}", f"{r['warp_instr_per_s']:,.0f}")
    console.print(table)
    text = json.dumps({"benchmark": "sim_speed", "environment": environment(), "rows": rows}, indent=2) + "\n"
    console.print(f"wrote {write_text(path, text, option='--json', force=args.force)}")
    return rows


if __name__ == "__main__":
    main()
