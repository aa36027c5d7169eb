"""``attnlab estimate``: parse a shape, call ``estimate(...)``, print rich tables (and JSON / a roofline
PNG) — the lecture's H100 estimates (§3.2, §5.4, §7.5, §8.3) for any shape and GPU preset; with
``--ranks P [--link L]`` also ring attention of the shape over P GPUs (``attnlab.cost.ring``).

The work is all in ``attnlab.cost.estimate``; bad input raises ``ValueError`` there and the CLI frame
turns it into one line on stderr and exit status 2. ``--json`` and ``--plot`` follow the output rule
of ``attnlab._cliargs`` (folders created, an existing file kept unless ``--force``; ``--json -`` is
standard output, and the tables then go to stderr so the JSON can be piped).
"""

from __future__ import annotations

import json

from .._cliargs import FORCE_HELP, output_file, positive_float, positive_int, write_text
from .gpus import GPUS, get_gpu
from .ring import LINKS


def _kernel_table(title: str, groups, total_label: str):
    from rich.table import Table

    from .tables import fmt_bytes, fmt_flops, fmt_time

    t = Table(title=title)
    for col in ("algorithm", "kernel", "matmul FLOPs", "HBM bytes", "FLOP/B", "time", "bound"):
        t.add_column(col, justify="left" if col in ("algorithm", "kernel", "bound") else "right")
    for label, ks in groups:
        for i, k in enumerate(ks):
            t.add_row(label if i == 0 else "", k.name, fmt_flops(k.flops), fmt_bytes(k.bytes), f"{k.intensity:,.1f}",
                      fmt_time(k.time), k.bound)
        if len(ks) > 1:
            t.add_row("", f"[b]{total_label}[/b]", fmt_flops(sum(k.flops for k in ks)),
                      fmt_bytes(sum(k.bytes for k in ks)), "", f"[b]{fmt_time(sum(k.time for k in ks))}[/b]", "")
    return t


def print_estimate(est, console=None) -> None:
    """Print an ``Estimate`` as rich tables."""
    from rich.table import Table

    from .._console import make_console
    from .tables import fmt_bytes, fmt_flops, fmt_pct, fmt_time

    c = console or make_console()
    g = est.gpu
    c.print(f"[b]{g.name}[/b]: {g.tensor_flops / 1e12:,.0f} TFLOP/s tensor, {g.hbm_bw / 1e12:.2f} TB/s HBM, "
            f"ridge {g.ridge:.0f} FLOP/B, {g.sms} SMs, launch {g.launch_overhead * 1e6:.0f} µs")
    gqa = f" ({est.kv_heads} K/V heads)" if est.kv_heads != est.heads else ""
    c.print(f"shape: batch {est.batch} × {est.heads} heads{gqa} × N {est.seq:,} × D {est.head_dim}, {est.dtype}"
            f"{', causal' if est.causal else ''}; Br = {est.block_q}, Bc = {est.block_k}; "
            f"attention FLOPs fwd {fmt_flops(est.flops_forward)}, bwd {fmt_flops(est.flops_backward)}")
    f = est.forward
    c.print(_kernel_table("forward (roofline lower bound)", [("standard", f.standard), ("flash, K/V in L2", f.flash_l2),
                                                            ("flash, K/V from HBM", f.flash_hbm)], "total"))
    c.print(f"flash is {f.speedup_l2:.1f}× faster with K/V in L2, {f.speedup_hbm:.1f}× with K/V from HBM")
    if est.grids:
        c.print(_grid_line(est.grids[0], "query rows"))
    b = est.backward
    c.print(_kernel_table("backward (roofline lower bound)", [("standard", b.standard), ("flash, ideal cache", b.flash_l2),
                                                             ("flash, no cache", b.flash_hbm)], "total"))
    c.print(f"flash backward: {100 * (b.flops_ratio - 1):+.0f}% FLOPs, 1/{b.traffic_ratio:.0f} of the traffic, "
            f"{b.speedup:.1f}× faster ({b.speedup_hbm:.1f}× without a cache)")
    if len(est.grids) > 1:
        c.print(_grid_line(est.grids[1], "keys", cut=0 if est.causal else -(-est.seq // est.block_q)))
    d = est.decode
    t = Table(title=f"decode step: 1 token per sequence, {d.context:,} cached tokens (KV cache {fmt_bytes(d.kv_cache_bytes)})")
    for col in ("kernel", "splits", "blocks", "waves", "SM use", "time", "bound"):
        t.add_column(col, justify="left" if col in ("kernel", "bound") else "right")
    for name, s in (("FlashAttention (no split)", d.no_split), ("Flash-Decoding (best split)", d.best)):
        t.add_row(name, str(s.splits), str(s.blocks), str(s.waves), fmt_pct(s.sm_use), fmt_time(s.time),
                  "memory (wave model)")
    for cd in d.calibrated:
        t.add_row(f"attnlab's split kernel, {cd.config[0]}-key tiles", str(cd.splits), str(cd.blocks), str(cd.waves),
                  "", fmt_time(cd.time), "calibrated, " + ("measured" if cd.measured else "predicted"))
    c.print(t)
    if d.calibrated:
        c.print("calibrated: the model fitted to attnlab's split kernel as timed on a GPU (one program's rate, the "
                "fixed and per-wave costs); " + ("measured on this GPU" if all(cd.measured for cd in d.calibrated)
                                                 else "predicted here from a measured GPU or tile"))
    ai = d.flops / d.kv_cache_bytes
    c.print(f"decode attention: {fmt_flops(d.flops)} over {fmt_bytes(d.kv_cache_bytes)} of K/V — {ai:.1f} FLOP/B, "
            f"{'below' if ai < g.ridge else 'above'} the ridge ({g.ridge:.0f}) whatever the batch")


# what cutting a backward's last wave into pieces costs per piece, in programs' times (a guess: a piece loads its K and
# V block and stores its partial dK and dV, as a whole program does once): the ``overhead`` of the estimate's cut
PIECE_OVERHEAD = 0.02


def _grid_line(gr, rows: str, cut: int = 0) -> str:
    """One pass's grid (``grid.GridEstimate``) as the line under its table; with ``cut`` > 0 (equal programs, each
    walking ``cut`` query blocks: a backward without a mask) and a partial last wave, what cutting that wave's
    programs into pieces of whole query blocks would leave (``grid.tail_split``, ``PIECE_OVERHEAD`` per piece)."""
    from .grid import tail_split

    eff = _eff(gr.efficiency)
    line = (f"grid: {gr.programs:,} programs of {gr.block} {rows}, {gr.waves:,.1f} waves on {gr.sms} SMs, longest first: "
            f"busy {eff} of the time, so at most {eff} of the roofline's speed")
    if cut > 1:
        ts = tail_split(programs=gr.programs, sms=gr.sms, max_parts=cut, overhead=PIECE_OVERHEAD)
        if ts.parts > 1:
            line += (f"; the last wave's {ts.tail:,} programs cut into {ts.parts} pieces each (their dK, dV summed "
                     f"after, {PIECE_OVERHEAD:.0%} of a program's time a piece): {ts.waves:,.2f} waves, {ts.saving:.1%} "
                     f"sooner")
    return line


def _eff(x: float) -> str:
    """A percentage with one decimal, or two significant digits below 0.1% (0.027% is not 0.0%)."""
    return f"{100 * x:.1f}%" if 100 * x >= 0.1 else f"{100 * x:.2g}%"


def print_ring(est, console) -> None:
    """The ring table of an ``Estimate`` made with ``ranks``: per P, zigzag's steps and both layouts'
    efficiency."""
    from rich.table import Table

    from .tables import fmt_bytes, fmt_time

    ring = est.ring
    lk = ring[0].link
    t = Table(title=f"ring attention over P GPUs, {lk.name}: {lk.bandwidth / 1e9:,.1f} GB/s per direction, "
                    f"{lk.latency * 1e6:,.0f} µs per transfer (lock-step roofline model)")
    for col in ("P", "N/P", "K/V sent", "fwd step", "fwd transfer", "bwd step", "bwd transfer", "hidden",
                "fwd+bwd", "efficiency zigzag", "efficiency contiguous"):
        t.add_column(col, justify="left" if col == "hidden" else "right")
    for zig, con in zip(ring[0::2], ring[1::2]):
        alone = zig.ranks == 1
        fwd, bwd = zig.forward, zig.backward
        f_tr, b_tr = max(k.transfer for k in fwd.kinds), max(k.transfer for k in bwd.kinds)
        # a step after the first (the last kind of each pass): the diagonal block is step 0's alone
        t.add_row(f"{zig.ranks:,}", f"{zig.local_seq:,}", "-" if alone else fmt_bytes(zig.kv_bytes),
                  fmt_time(fwd.kinds[-1].compute), "-" if alone else fmt_time(f_tr), fmt_time(bwd.kinds[-1].compute),
                  "-" if alone else fmt_time(b_tr), "-" if alone else ("yes" if zig.hidden else "no"),
                  fmt_time(zig.time), _eff(zig.efficiency), _eff(con.efficiency))
    console.print(t)
    zig, con = ring[-2], ring[-1]
    P = zig.ranks
    verdict = ("every step's transfer hides under its compute" if zig.hidden else
               f"{fmt_time(zig.forward.exposed + zig.backward.exposed)} of transfer is not hidden")
    console.print(f"P = {P:,}: {verdict}; one GPU would take {fmt_time(zig.single_forward + zig.single_backward)} "
                  f"for fwd+bwd, the ring {fmt_time(zig.time)} (zigzag) / {fmt_time(con.time)} (contiguous) "
                  f"— {_eff(zig.efficiency)} / {_eff(con.efficiency)} scaling efficiency")


def _estimate_cmd(args) -> int:
    from .._console import make_console, print_wrote
    from .estimate import estimate

    # every output path is checked before any work: a bad one costs nothing
    json_path = output_file(args.json, option="--json", force=args.force, allow_stdout=True) if args.json else None
    plot_path = output_file(args.plot, option="--plot", force=args.force) if args.plot else None
    if plot_path is not None and json_path is not None and plot_path.resolve() == json_path.resolve():
        raise ValueError(f"--json and --plot name the same file {plot_path}")
    if args.link is not None and args.ranks is None:
        raise ValueError(f"--link {args.link} needs --ranks P (the number of GPUs in the ring)")
    if args.ranks is not None and args.seq % (2 * args.ranks):
        raise ValueError(f"--seq {args.seq} is not a multiple of 2·ranks = {2 * args.ranks}: ring attention's "
                         "zigzag layout cuts the sequence into 2·P equal chunks")
    gpu = args.gpu if args.sm_clock is None else get_gpu(args.gpu).at_clock(args.sm_clock)
    est = estimate(gpu=gpu, seq=args.seq, head_dim=args.head_dim, heads=args.heads, batch=args.batch,
                   kv_heads=args.kv_heads, dtype=args.dtype, causal=args.causal, block_q=args.block_q,
                   block_k=args.block_k, ranks=args.ranks, link=args.link or "nvlink4")
    console = make_console(stderr=args.json == "-")  # `--json -`: stdout holds the JSON alone
    print_estimate(est, console)
    if est.ring:
        print_ring(est, console)
    if args.json:
        where = write_text(json_path, json.dumps(est.to_dict(), indent=2, ensure_ascii=False) + "\n",
                           option="--json", force=args.force)
        if json_path is not None:
            print_wrote(console, where)
    if plot_path is not None:
        from .plot import roofline_plot

        ks = [(a, k) for a, k in est.kernels() if "no cache" not in a and "from HBM" not in a]
        try:
            print_wrote(console, roofline_plot(est.gpu, ks, plot_path))
        except OSError as e:
            raise ValueError(f"--plot {plot_path}: cannot write ({e.strerror or e})") from None
    return 0


def _ranks(text: str) -> int:
    """argparse type of --ranks: 1..MAX_RANKS."""
    import argparse

    from .ring import MAX_RANKS

    value = positive_int(text)
    if value > MAX_RANKS:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_RANKS}, got {text!r}")
    return value


def register(sub) -> None:
    p = sub.add_parser("estimate", help="roofline estimates of attention (forward, backward, decode) on a GPU")
    p.add_argument("--gpu", default="H100", help=f"GPU preset: {', '.join(GPUS)} (default: %(default)s)")
    p.add_argument("--sm-clock", type=positive_float, default=None, metavar="MHZ",
                   help="the GPU's SM clock in MHz: its peaks scaled from the clock the preset quotes them at (a GPU "
                        "at its power limit runs below it; default: the preset's own)")
    p.add_argument("--seq", type=positive_int, default=4096, help="sequence length N (default: %(default)s)")
    p.add_argument("--head-dim", type=positive_int, default=128, help="head dimension D (default: %(default)s)")
    p.add_argument("--heads", type=positive_int, default=32, help="query heads H (default: %(default)s)")
    p.add_argument("--kv-heads", type=positive_int, default=None, help="K/V heads Hkv for GQA/MQA (default: = heads)")
    p.add_argument("--batch", type=positive_int, default=1, help="batch size B (default: %(default)s)")
    p.add_argument("--dtype", default="fp16", choices=("fp16", "bf16", "fp32"), help="data type (default: %(default)s)")
    p.add_argument("--causal", action="store_true", help="causal mask (FlashAttention skips masked blocks)")
    p.add_argument("--block-q", type=positive_int, default=128, help="FlashAttention Br (default: %(default)s)")
    p.add_argument("--block-k", type=positive_int, default=None, help="FlashAttention Bc (default: = block-q)")
    p.add_argument("--ranks", type=_ranks, default=None, metavar="P",
                   help="also estimate ring attention of this shape (N = --seq tokens in all) over P GPUs, 1..1024")
    p.add_argument("--link", choices=tuple(LINKS), default=None,
                   help="the ring's link between neighbouring GPUs (default with --ranks: nvlink4)")
    p.add_argument("--json", metavar="FILE", help="also write every number as JSON to FILE ('-': standard output, "
                                                  "tables to stderr); missing folders are created; an existing "
                                                  "FILE is kept unless --force")
    p.add_argument("--plot", metavar="FILE", help="also save a roofline plot (PNG) of the kernels to FILE; "
                                                  "missing folders are created; an existing FILE is kept unless --force")
    p.add_argument("--force", action="store_true", help=FORCE_HELP)
    p.set_defaults(func=_estimate_cmd)
