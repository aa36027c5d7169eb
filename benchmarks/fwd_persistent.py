"""The Gluon forward's schedules against the grid kernel, and cuDNN, on the prefill table's shapes.

The warp-specialised Gluon forward (``attnlab.gpu.prefill_gluon``) launches one program per (query block,
batch · head): each program loads its Q block, walks its key blocks and stores O, and at 4K tokens a causal
program walks 16 key blocks on average, so a program's start (Q and the first K/V loads) and end (O's
normalisation and store) are a larger share of its time than at 16K. The persistent build
(``FwdConfig.persistent``, ``_attn_fwd_gluon_wsp``) runs at most one program per SM, each taking the tiles of
its row of a schedule made on the host: the loader brings the next tile's Q and key blocks while the consumers
finish the current tile, and O leaves through a buffer of its own. Causal calls can also take the part query
block first (``part_first``) and their longest walks first over groups of heads (``head_chunk``).

For each row (bfloat16, 16K tokens, H·D = 2048, as ``benchmarks/prefill.py``'s grid; N = 4K and 16K, D = 64
and 128, causal or not) the script times, alternating in ``--rounds`` rounds in one process
(``triton.testing.do_bench``'s times, forward only: ``ms`` their median, ``ms_mean`` and ``ms_p90`` beside it;
runs 1-4 recorded do_bench's default, the mean, as ``ms``) the builds of ``builds``: the table's long entry as
a plain grid (``grid``), its persistent twin or (causal) the part block first and the table's own entry for the
row, at D = 64 the 128-row builds, and SDPA's cuDNN forward (``cudnn``). ``--sweep`` times causal rows at 4K, 8K
and 16K with persistent schedules of 1, 2, 4 and 8 heads at a time instead (``sweep_builds``). Each attnlab
build's output is compared with its base's (``base_of``): every build must give the same bits (each row's
arithmetic is unchanged). ``--long-keys`` times the D = 64 rows only, with the 128-row builds on 256-key blocks
beside them. TFLOP/s by ``attnlab.cost.attention_flops``.

    python benchmarks/fwd_persistent.py [--rounds 2] [--sweep] [--dynamic] [--long-keys] [--json out.json]
    python benchmarks/fwd_persistent.py --report benchmarks/data/fwd-persistent-h200-run5.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ab_rounds import turns  # noqa: E402

TOKENS, WIDTH = 16384, 2048
ROWS = [(D, causal, N) for D in (64, 128) for causal in (True, False) for N in (4096, 16384)]
SWEEP_ROWS = [(D, True, N) for D in (64, 128) for N in (4096, 8192, 16384)]


def sweep_builds(D: int, causal: bool, chunks=(1, 2, 4, 8)):
    """``--sweep`` (causal rows): the grid kernel plain and with the part block first, and the persistent build
    with the part block first and schedules of ``chunks`` heads at a time; at D = 64 the 128-row grid and
    persistent builds too."""
    from attnlab.gpu.config import FwdConfig, default_fwd_config

    entry = default_fwd_config(D, causal, torch.device("cuda"))
    base = dataclasses.replace(entry, persistent=False, head_chunk=1, part_first=False)
    out = [("grid", base), ("grid-pf", dataclasses.replace(base, part_first=True))]
    out += [(f"persistent-pf-c{c}", dataclasses.replace(base, part_first=True, head_chunk=c, persistent=True))
            for c in chunks]
    if base.block_m != 128:
        e128 = FwdConfig(128, base.block_n, base.num_warps, base.num_stages, tma=True, warp_spec=True, gluon=True)
        out.append(("grid-128", e128))
        out += [(f"persistent-128-c{c}", dataclasses.replace(e128, head_chunk=c, persistent=True)) for c in chunks]
    return out


def builds(D: int, causal: bool, N: int = 16384, dynamic: bool = False, long_keys: bool = False):
    """(name, FwdConfig) of the attnlab builds timed for a row. Every build's bits must equal the first's
    (``grid``: the table's long Gluon entry as a grid of programs, heads one after another, the part query block
    last). Without a causal mask: its persistent twin (the table's entry). With one: the part block first
    (``grid-pf``), the table's entry for N keys (``table``) and the persistent build with the part block first and
    the 8 MB groups (``persistent-pf``). At D = 64 (whose long entry has 192-row tiles) the 128-row grid and
    persistent builds too. (Builds measured once and not kept, NOTES-prefill v19 and v20: run 6 timed each
    persistent build with its consumers' products in turns, ``…-pp``; run 7 the 128-row persistent build at D = 64
    causal on three K/V stages, ``persistent-128-s3``, and on 64-key blocks with four, ``…-n64``; run 8 each
    distinct 128-row persistent build with its tiles overlapped, ``…-x``.) ``dynamic``: each persistent build's
    twin taking its tiles from a counter (``FwdConfig.dynamic``), ``…-dyn``, after it. ``long_keys`` (D = 64): the
    128-row grid and persistent builds on 256-key blocks too (``grid-128-n256``, ``persistent-128-n256``)."""
    from attnlab.gpu.config import FwdConfig, default_fwd_config

    entry = default_fwd_config(D, causal, torch.device("cuda"))
    base = dataclasses.replace(entry, persistent=False, head_chunk=1, part_first=False)
    out = [("grid", base)]
    if not causal:
        out.append(("persistent", dataclasses.replace(base, persistent=True)))
    else:
        out += [("grid-pf", dataclasses.replace(base, part_first=True)),
                ("table", default_fwd_config(D, causal, torch.device("cuda"), N)),
                ("persistent-pf", dataclasses.replace(base, part_first=True, head_chunk=0, persistent=True))]
    if base.block_m != 128:
        e128 = FwdConfig(128, base.block_n, base.num_warps, base.num_stages, tma=True, warp_spec=True, gluon=True)
        p128 = dataclasses.replace(e128, persistent=True, head_chunk=0, part_first=causal)
        out += [("grid-128", e128), ("persistent-128", p128)]
    if long_keys and D == 64:
        e256 = FwdConfig(128, 256, 4, 2, tma=True, warp_spec=True, gluon=True)
        out += [("grid-128-n256", e256),
                ("persistent-128-n256", dataclasses.replace(e256, persistent=True, head_chunk=0, part_first=causal))]
    if dynamic:
        out = [b for name, cfg in out for b in [(name, cfg)] + ([(f"{name}-dyn", dataclasses.replace(
            cfg, dynamic=True))] if cfg.persistent else [])]
    return out


def base_of(name: str) -> str:
    """The build a build is compared with, for speed and bits: for ``…-pp`` the same build without turns, for
    ``…-x`` the same build without its tiles overlapped, for ``…-dyn`` the same build with its tiles dealt out
    beforehand, for ``persistent-128-n64`` and ``…-n256`` the grid kernel with its blocks (``grid-128-n64``,
    ``grid-128-n256``, which is its own base), else ``grid-128`` for the 128-row builds and ``grid`` for the others.
    (Run 7 compared no bits between 64- and 128-key blocks, which round differently.)"""
    if name.endswith("-pp"):
        return name[:-3]
    if name.endswith("-dyn"):
        return name[:-4]
    if name in ("persistent-128-n64", "persistent-128-n256"):
        return name.replace("persistent", "grid")
    if name == "grid-128-n256":  # (no bits compared between 128- and 256-key blocks: they round differently)
        return name
    if name.endswith("-x"):
        return name[:-2]
    return "grid-128" if "-128" in name else "grid"


def row(D: int, causal: bool, N: int, rounds: int, sweep: bool = False, dynamic: bool = False,
        long_keys: bool = False) -> list[dict]:
    """The timed rows of one shape: every build (``builds``, or ``sweep_builds``) and cuDNN, alternating in
    ``rounds`` rounds."""
    import triton
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    from attnlab.cost import attention_flops
    from attnlab.gpu import prefill_forward
    from attnlab.variants import Mask

    B, H = TOKENS // N, WIDTH // D
    g = torch.Generator(device="cuda").manual_seed(N + D)
    q, k, v = (torch.randn(B, H, N, D, generator=g, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    mask, scale = Mask(-1, 0 if causal else -1), D ** -0.5
    fl = attention_flops(batch=B, heads=H, seq_q=N, head_dim=D, causal=causal, pass_="fwd")
    fns, outs = {}, {}
    for name, cfg in (sweep_builds(D, causal) if sweep else builds(D, causal, N, dynamic, long_keys)):
        def fn(cfg=cfg):
            return prefill_forward(q, k, v, mask=mask, scale=scale, config=cfg)
        fns[name], outs[name] = fn, fn()
    # each build against its base (the same rows' arithmetic: the same bits)
    same = {name: bool(torch.equal(o[0], outs[twin][0]) and torch.equal(o[1], outs[twin][1]))
            for name, o in outs.items() for twin in [base_of(name)] if twin != name}

    def cudnn():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return sdpa(q, k, v, is_causal=causal)
    fns["cudnn"] = cudnn
    rows = []
    for rnd in range(rounds):
        for name in turns(fns, rnd):  # (the builds' order reversed every other round)
            fn = fns[name]
            times = sorted(triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="all"))
            ms = statistics.median(times)
            rows.append({"D": D, "causal": causal, "N": N, "B": B, "H": H, "build": name, "round": rnd, "ms": ms,
                         "ms_mean": statistics.fmean(times), "ms_p90": times[int(0.9 * (len(times) - 1))],
                         "tflops": fl / ms / 1e9, "same_bits": same.get(name)})
    return rows


def run(rounds: int, sweep: bool = False, dynamic: bool = False, long_keys: bool = False) -> list[dict]:
    rows = []
    for D, causal, N in (SWEEP_ROWS if sweep else ROWS):
        if long_keys and D != 64:
            continue
        rows += row(D, causal, N, rounds, sweep, dynamic, long_keys)
        print(f"fwd_persistent: D = {D}, causal {causal}, N = {N} done", file=sys.stderr, flush=True)
    return rows


def table(rows: list[dict]) -> list[str]:
    """Markdown: one line per (row, build), ms by round, best TFLOP/s, × its base (``base_of``: the grid kernel,
    or for a ``…-pp``, ``…-x`` or ``…-dyn`` build its twin without turns, overlapped tiles or the counter; the column says "× grid" where
    the run has no such build) and × cuDNN (best rounds), and whether the build's bits equal its base's."""
    twins = any(r["build"].endswith(("-pp", "-x", "-dyn")) for r in rows)
    out = [f"| D | causal | N | build | ms by round | TFLOP/s (best) | {'× base' if twins else '× grid'} | × cuDNN | "
           "same bits |", "|---|---|---|---|---|---|---|---|---|"]
    keys = []
    for r in rows:
        key = (r["D"], r["causal"], r["N"])
        if key not in keys:
            keys.append(key)
    for key in keys:
        rs = [r for r in rows if (r["D"], r["causal"], r["N"]) == key]
        names = []
        for r in rs:
            if r["build"] not in names:
                names.append(r["build"])
        best = {n: min(r["ms"] for r in rs if r["build"] == n) for n in names}
        for n in names:
            mine = [r for r in rs if r["build"] == n]
            # (runs 1 and 2 had one persistent build per grid build, named after it)
            old_names = not any("-pf" in m or "-c" in m or m.endswith(("-pp", "-x", "-dyn")) for m in names)
            twin = n.replace("persistent", "grid") if old_names else base_of(n)
            bits = mine[0]["same_bits"]
            ms = " / ".join(f"{r['ms']:.3f}" for r in mine)
            vs_grid = "—" if n == "cudnn" else f"{best[twin] / best[n]:.3f}"
            same = "—" if bits is None else "yes" if bits else "NO"
            out.append(f"| {key[0]} | {key[1]} | {key[2]} | {n} | {ms} | {max(r['tflops'] for r in mine):.0f} | "
                       f"{vs_grid} | {best['cudnn'] / best[n]:.2f} | {same} |")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=2, help="alternating rounds of every build (default 2)")
    ap.add_argument("--json", type=Path, help="write the rows here (refuses an existing file)")
    ap.add_argument("--sweep", action="store_true",
                    help="causal rows at 4K, 8K and 16K: persistent schedules of 1, 2, 4 and 8 heads at a time")
    ap.add_argument("--dynamic", action="store_true",
                    help="each persistent build's twin taking its tiles from a counter (…-dyn) beside it")
    ap.add_argument("--long-keys", action="store_true",
                    help="the D = 64 rows only, with the 128-row builds on 256-key blocks (…-n256) beside them")
    ap.add_argument("--report", type=Path, help="print the table of a run's JSON (no GPU needed)")
    args = ap.parse_args(argv)
    if args.long_keys and args.sweep:
        print("fwd_persistent: --long-keys times the table's rows, not --sweep's", file=sys.stderr)
        return 2
    if args.report is not None:
        print("\n".join(table(json.loads(args.report.read_text())["rows"])))
        return 0
    if args.rounds < 1:
        print("fwd_persistent: --rounds must be at least 1", file=sys.stderr)
        return 2
    if args.json is not None and args.json.exists():
        print(f"fwd_persistent: {args.json} exists; not overwriting it", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("fwd_persistent: needs a CUDA GPU (Hopper, for the Gluon kernels)", file=sys.stderr)
        return 2
    import triton

    rows = run(args.rounds, args.sweep, args.dynamic, args.long_keys)
    if args.json is not None:  # (first: a table that fails to print loses no run)
        args.json.write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "gpu": torch.cuda.get_device_name(),
                                         "torch": torch.__version__, "triton": triton.__version__, "rows": rows},
                                        indent=1))
    print("\n".join(table(rows)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
